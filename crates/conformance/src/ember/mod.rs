//! The ember backend: runs a parsed script against ember's TCP on a virtual clock and
//! scores it.
//!
//! Design. One [`Host`] (ember's sans-IO core) with one interface, and a "link" that is
//! simply this module's loop: every frame the host transmits is taken from
//! [`Host::poll_transmit`] with the virtual time it left at; inbound packet lines are
//! built by [`build_inbound`](crate::packets::build_inbound), wrapped in Ethernet and given to [`Host::receive`] at
//! their script time; outbound lines are checked with [`match_outbound`](crate::packets::match_outbound). Nothing reads
//! a clock.
//!
//! Rules this runner implements:
//!
//! * Addresses. The stack under test is `192.168.0.1`, the script's peer `192.0.2.1`
//!   (the values the corpus's `--local_ip`/`--remote_ip` lines use most; those options,
//!   when written, override them). The interface is `/0`, so every address is on-link
//!   and the host ARPs for the peer directly. At time 0 the peer sends an ARP request
//!   for the local address, which seeds the host's neighbour cache; any later ARP
//!   request the host sends is answered at once with a reply from the peer's MAC (ARP
//!   frames are never matched against script lines). Ports are never written in the
//!   corpus: `bind(fd, ..., ...)` binds `local:8080`; a passive open's peer uses port
//!   [`REMOTE_PORT`]; `connect(fd, ..., ...)` goes to `remote:8080` from the ephemeral
//!   port ember picks (the packet flow learns it). A written sockaddr
//!   (`{sa_family=AF_INET, sin_port=htons(N), sin_addr=inet_addr("...")}`) is honoured.
//! * Time. Script times are µs from the start; `+t` is relative to the previous event's
//!   *scripted* time (for a blocking call, its start), so errors never accumulate.
//!   Before each event the host is advanced to the event's time, firing
//!   [`Host::handle_timeout`] at each [`Host::poll_timeout`] deadline on the way.
//! * Tolerance. `--tolerance_usecs` (default 4000 µs, packetdrill's default): an
//!   outbound packet scripted at `t` must leave at `a` with `|a - t| ≤ tolerance`
//!   (`a~b` ranges widen the window to `[a - tol, b + tol]`; `*` accepts any time).
//!   The 12.5% rule: for an outbound line the tolerance is the wider of
//!   `--tolerance_usecs` and an eighth of the time since the previous event (a timer
//!   scripted 1 s out may fire 125 ms off).
//! * Outbound lines. The next captured IPv4 frame must match the line, field by field
//!   ([`match_outbound`](crate::packets::match_outbound)); a frame that leaves before the window, or a different
//!   frame, fails with what was seen; nothing by the end of the window fails with
//!   "nothing sent". Frames are claimed in order; a frame no outbound line claims is
//!   not an error (calibrated on Linux: the corpus's own `blocking/blocking-write.pkt`
//!   never scripts the data its write sends, and Linux passes it).
//! * System calls. The subset ember's core has: `socket` (AF_INET stream sockets only;
//!   fds are the lowest free number from 3, like a fresh process), `setsockopt`
//!   (SO_REUSEADDR accepted and ignored; TCP_NODELAY, TCP_CORK, SO_SNDBUF, SO_RCVBUF,
//!   SO_KEEPALIVE, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT, TCP_USER_TIMEOUT, TCP_MAXSEG,
//!   IP_TOS applied to the connection, remembered
//!   on a socket that has none yet, applied before the SYN of a connect() and
//!   inherited by accepted connections (TCP_MAXSEG on a listener also shapes the
//!   SYN,ACKs it sends); TCP_MAXSEG outside 88..=32767, TCP_KEEPIDLE and TCP_KEEPINTVL
//!   outside 1..=32767 s and TCP_KEEPCNT outside 1..=127 are EINVAL; TCP_KEEPIDLE on a
//!   connection with keepalive on re-arms its timer; TCP_NOTSENT_LOWAT only as 0 or 0xffffffff, "no
//!   limit", which is ember's behaviour), `getsockopt` (SO_ERROR; TCP_MAXSEG: the MSS
//!   in use once connected, else the value set or 536; TCP_KEEPIDLE, TCP_KEEPINTVL (s),
//!   TCP_KEEPCNT: the connection's, else the value set, else the tunable
//!   (`tcp_keepalive_interval`, `_intvl`, `_probes`); TCP_NODELAY, TCP_CORK,
//!   SO_KEEPALIVE, TCP_NOTSENT_LOWAT, IP_TOS: the value set or 0; SO_SNDBUF/SO_RCVBUF: twice
//!   the value set, as socket(7) says, when 2304..=212992 was set; the length must
//!   be 4), `fcntl` (F_GETFL/F_SETFL with O_NONBLOCK), `bind`, `listen`, `accept`,
//!   `accept4` (flags 0 or SOCK_NONBLOCK), `connect` (blocking, or EINPROGRESS when
//!   non-blocking), `write`/`send`/`sendto`/`sendmsg`/`writev` (flags 0,
//!   MSG_DONTWAIT, MSG_NOSIGNAL, MSG_MORE; buffers must be `...`, zeros are written;
//!   a msghdr's `msg_iov` lengths are summed, `msg_name` must be `...`, control data
//!   is Unsupported), `read`/`recv`/`recvfrom`/`recvmsg`/`readv` (same flags but
//!   MSG_MORE, and MSG_PEEK, which leaves the data to be read again; contents are not
//!   checked), `close`, `shutdown` (SHUT_WR; SHUT_RD and
//!   SHUT_RDWR also mark the socket so a read with nothing buffered returns 0 instead
//!   of blocking), `ioctl` (SIOCINQ/FIONREAD: bytes readable; SIOCOUTQ: bytes written
//!   and not acknowledged; SIOCOUTQNSD: bytes not yet sent; EINVAL on a listener),
//!   `poll`, `epoll_create`/`epoll_create1`/`epoll_ctl`/`epoll_wait`. MSG_MORE is
//!   ember's `Tcb::set_more` (Linux's semantics) until a send without it. A `NULL` buffer is answered by the
//!   syscall layer without calling ember: EFAULT for a write of one byte or more on a
//!   connected socket, and for a read when data is there to copy (with nothing to
//!   read, EAGAIN when non-blocking; blocking is Unsupported). `socket()` and
//!   `epoll_create()` return the fd the script expects when that is a free number
//!   from 3 (fd numbering belongs to the harness, not the stack; the corpus has a
//!   script starting at 4). Anything else is `Unsupported` with the call's (or
//!   option's) name. Return values and errno names must equal the script's (`...`
//!   accepts anything; an errno's other name is the same errno: EWOULDBLOCK is EAGAIN,
//!   EDEADLOCK EDEADLK, ENOTSUP EOPNOTSUPP); values a call writes back (getsockopt's value, ioctl's
//!   count, poll's `revents`, epoll_wait's first event and its data) must equal the
//!   script's where written.
//! * Readiness (poll, epoll). A connected socket's mask is Linux's `tcp_poll` rule
//!   on ember's state: IN|RDNORM with data to read; IN|RDNORM|RDHUP once the peer's
//!   FIN arrived or after SHUT_RD; HUP when both directions are shut (or closed);
//!   OUT|WRNORM once synchronized with free send space of at least ember's send
//!   low-water mark, or when writing is shut (a write fails at once); ERR with a
//!   pending error. poll reports it masked by `events` plus ERR/HUP; epoll likewise,
//!   level-triggered by default. EPOLLET reports an item only after a wakeup: the
//!   EPOLL_CTL_ADD/MOD of a ready item, or a readiness event ember's host raises for
//!   the socket (new data, space freed by an ACK, a state change); EPOLLONESHOT
//!   disables the item after one report. A non-zero timeout blocks (a pending call)
//!   until something is reported or the timeout passes (then 0). Listening and
//!   unconnected sockets in poll/epoll are `Unsupported`.
//! * Blocking calls. A call on a blocking socket that cannot complete now (accept with
//!   an empty queue, read with no data, connect before the handshake, a write that
//!   does not fit) becomes the pending call: it is retried after every frame in and
//!   every timer as virtual time advances, and must complete within the tolerance of
//!   its scripted end time (`...t`: `t` is relative to the same base as the start; a
//!   call with no `...` must complete within the tolerance of its start). One pending
//!   call at a time; a second is `Unsupported`.
//! * Shell commands mid-script go through [`apply_shell`]; applied tunables are set on
//!   the host (new connections see them); `Unsupported` stops the run as Unsupported.
//! * `%{ }%` code blocks: `assert` statements are evaluated against the `tcp_info` of
//!   the socket the last system call used (an accept or socket call counts for the
//!   fd it returned; after that fd is closed, its connection while ember has it). A
//!   socket with no connection answers as Linux's fresh socket (TCP_CLOSE, the initial
//!   RTO, MSS 536, the initial window, ...; see `closed_tcpi`), a listener as Linux's
//!   (TCP_LISTEN, `tcpi_unacked` its accept queue, `tcpi_sacked` its backlog; see
//!   `listen_tcpi`), a connection ember has reaped only with `tcpi_state` (TCP_CLOSE).
//!   `NAME = expr` (and `op=`) defines a variable for this and later
//!   blocks; `print(...)` does nothing. Names are variables, then Linux's constants
//!   (`TCP_CA_*`, `TCPI_OPT_*`, `TCP_ESTABLISHED`..), then fields from ember's
//!   `TcbInfo` in Linux's units: `tcpi_snd_cwnd` = cwnd / MSS, `tcpi_snd_ssthresh` =
//!   ssthresh / MSS (0x7fffffff while unset), `tcpi_unacked`/`tcpi_sacked` = bytes /
//!   MSS rounded up, `tcpi_snd_mss`, `tcpi_rcv_mss`, `tcpi_advmss`, `tcpi_pmtu`,
//!   `tcpi_backoff`, `tcpi_probes`, `tcpi_rto`/`tcpi_rtt`/`tcpi_rttvar`/
//!   `tcpi_min_rtt` in µs, the window scales, `tcpi_ca_state` (0 open, 1 disorder, 3
//!   recovery, 4 loss), `tcpi_state` (Linux's numbers), `tcpi_options` (timestamps,
//!   SACK, window scaling), `tcpi_last_data_recv`/`tcpi_last_data_sent` in ms,
//!   `tcpi_bytes_received`, `tcpi_segs_in`/`tcpi_segs_out`, `tcpi_total_retrans`,
//!   `tcpi_delivered_ce` (0: ember has no ECN), `tcpi_lost`/`tcpi_retrans`/
//!   `tcpi_reordering`/`tcpi_delivered` in segments, `tcpi_busy_time`/
//!   `tcpi_rwnd_limited`/`tcpi_sndbuf_limited` in µs up to the block's time. Any
//!   other field (e.g. `tcpi_reord_seen`) or statement is `Unsupported`.
//! * Budgets: at most [`RunOptions::max_steps`] host steps (frames in, timer firings)
//!   and virtual time up to [`RunOptions::max_virtual_us`]; beyond them the run is an
//!   `Error`, so no script can hang the runner.
//! * Script options other than `tolerance_usecs`, `local_ip`, `remote_ip`,
//!   `gateway_ip`, `ip_version=ipv4`, `mss` and `tcp_ts_tick_usecs=1000` are
//!   `Unsupported`. `--mss=N` delivers an inbound data segment longer than N bytes as
//!   consecutive N-byte segments at the same instant (the GRO packet the option makes
//!   packetdrill build has `gso_size` N; ember has no GRO, so it sees the segments).
//!   `--tcp_ts_tick_usecs=1000` checks the stack's TS val (see [`Flow::ts_val_slack`]:
//!   within the tolerance in ticks, plus one); ember's TS clock ticks every
//!   millisecond (RFC 7323 §5.4), so another tick is `Unsupported`.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use ember_core::host::{ConnId, Interface, ListenerId};
use ember_core::ip::IfaceId;
use ember_core::wire::{ethertype, ArpOp, ArpRepr, EthernetRepr, MacAddr, ARP_LEN};
use ember_core::{Host, Instant};

use crate::packets::Flow;
use crate::profile::{apply_shell, linux_profile, unsupported_features, ShellOutcome};
use crate::runner::{
    assert_text, code_eval, code_names, fail, outcome, raw_segment, run_events, still_blocked,
    stop_result, summarize, unsup, us, Backend, Core, Outcome, Point, RunResult, Stop,
    DEFAULT_PORT, DEFAULT_TOLERANCE_US, R, REMOTE_PORT,
};
use crate::script::{CodeBlock, CodeExpr, CodeStmtKind, Script, Syscall};
use crate::tcp_info::{closed_tcpi, code_constant, listen_tcpi, tcpi, InfoSource, TCP_CLOSE};

mod sockets;

/// The stack's address unless `--local_ip` says otherwise.
pub const DEFAULT_LOCAL_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 0, 1);
/// The script peer's address unless `--remote_ip` says otherwise.
pub const DEFAULT_REMOTE_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

const HOST_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);
const PEER_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x02]);

/// Bounds on one run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Host steps (frames delivered, timer firings, frames captured) before `Error`.
    pub max_steps: usize,
    /// Virtual time limit in µs before `Error`.
    pub max_virtual_us: u64,
    /// The host's secret (ISNs, timestamp offsets, ports).
    pub secret: [u8; 16],
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            max_steps: 200_000,
            max_virtual_us: 3_600_000_000,
            secret: *b"ember-packetdril",
        }
    }
}

/// Runs `script` against ember and scores it (see the module comment for the rules).
pub fn run_script(script: &Script, opts: &RunOptions) -> Outcome {
    if let Some(first) = unsupported_features(script).into_iter().next() {
        return Outcome {
            result: RunResult::Unsupported(first),
            detail: String::new(),
        };
    }
    let mut runner = match Runner::new(script, opts) {
        Ok(r) => r,
        Err(s) => {
            return Outcome {
                result: stop_result(s),
                detail: String::new(),
            }
        }
    };
    let r = run_events(&mut runner, script);
    outcome(r, &runner.core.trace)
}

/// A socket option remembered until a connection exists.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SockOpt {
    NoDelay(bool),
    Cork(bool),
    SndBuf(usize),
    RcvBuf(usize),
    KeepAlive(bool),
    UserTimeout(u64),
    MaxSeg(u32),
    /// TCP_NOTSENT_LOWAT of 0 (use the sysctl, unlimited in the profile) or
    /// 0xffffffff (no limit): ember's behaviour; remembered for getsockopt.
    NotsentLowat(u32),
    Tos(u8),
    /// TCP_KEEPIDLE, TCP_KEEPINTVL (seconds) and TCP_KEEPCNT, range-checked as Linux
    /// does.
    KeepIdle(u32),
    KeepIntvl(u32),
    KeepCnt(u32),
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum SockKind {
    Fresh,
    Listener(ListenerId),
    Conn(ConnId),
}

#[derive(Debug, Clone)]
pub(crate) struct Sock {
    kind: SockKind,
    bound: Option<SocketAddrV4>,
    nonblock: bool,
    opts: Vec<SockOpt>,
    rd_shut: bool,
    /// shutdown(SHUT_WR or SHUT_RDWR) was called.
    wr_shut: bool,
    /// The last send had MSG_MORE: the connection is corked until a send without it.
    more: bool,
    /// listen()'s backlog argument (a listener's `tcpi_sacked`).
    backlog: i64,
}

/// One file in an epoll set.
#[derive(Debug, Clone)]
pub(crate) struct EpItem {
    fd: i64,
    /// The interest mask (with EPOLLET/EPOLLONESHOT).
    events: i64,
    /// What epoll_wait hands back: the name of the `epoll_data` member written
    /// (`fd`, `ptr`, `u32`, `u64`) and its value.
    data: (String, i64),
    /// Edge-triggered: a wakeup happened since the item was last reported.
    woken: bool,
    /// EPOLLONESHOT reported it: nothing more until EPOLL_CTL_MOD.
    disabled: bool,
}

/// A blocking call waiting to complete.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Blocked {
    Accept {
        fd: i64,
        nonblock: bool,
    },
    Connect {
        fd: i64,
    },
    Read {
        fd: i64,
        len: usize,
        /// MSG_PEEK: the data stays to be read again.
        peek: bool,
    },
    Write {
        fd: i64,
        len: usize,
        done: usize,
    },
    /// poll() or epoll_wait() with a timeout: the call is re-evaluated from its
    /// arguments; at `until` (the call's own timeout) it returns 0.
    Wait {
        until: Option<Instant>,
    },
}

#[derive(Debug)]
pub(crate) struct Pending {
    line: u32,
    call: Syscall,
    end: Instant,
    what: Blocked,
}

/// What a call attempt did.
pub(crate) enum Attempt {
    Done(Result<i64, &'static str>),
    Block(Blocked),
}

pub(crate) struct Runner {
    host: Host,
    iface: IfaceId,
    now: Instant,
    /// The loop's state: the flow, the tolerance, the frames captured, the trace.
    core: Core,
    local: Ipv4Addr,
    remote: Ipv4Addr,
    socks: BTreeMap<i64, Sock>,
    pending: Option<Pending>,
    /// The socket of the last system call (its fd argument, or the fd a `socket()` or
    /// `accept()` returned): code blocks read its `tcp_info`.
    last_fd: Option<i64>,
    /// The connection `last_fd` had when last it was one (read after that fd is
    /// closed, while ember still has the connection).
    last_conn: Option<ConnId>,
    /// Variables assigned by code blocks.
    vars: BTreeMap<String, i64>,
    /// epoll instances by fd (they share the fd space with `socks`).
    epolls: BTreeMap<i64, Vec<EpItem>>,
    /// `--mss`: inbound data segments longer than this are delivered as several
    /// segments of this size (the GRO packets the option asks packetdrill to cook).
    gro_mss: Option<usize>,
    steps: usize,
    max_steps: usize,
}

impl Runner {
    fn new(script: &Script, opts: &RunOptions) -> R<Runner> {
        let mut tol = DEFAULT_TOLERANCE_US;
        let mut local = DEFAULT_LOCAL_IP;
        let mut remote = DEFAULT_REMOTE_IP;
        let mut gro_mss = None;
        let mut ts_tick = None;
        for o in &script.options {
            let v = o.value.as_deref().unwrap_or("");
            match o.name.as_str() {
                "tolerance_usecs" => {
                    tol = v
                        .parse()
                        .map_err(|_| Stop::Error(format!("bad --tolerance_usecs={v}")))?
                }
                "local_ip" => {
                    local = v
                        .parse()
                        .map_err(|_| Stop::Error(format!("bad --local_ip={v}")))?
                }
                "remote_ip" => {
                    remote = v
                        .parse()
                        .map_err(|_| Stop::Error(format!("bad --remote_ip={v}")))?
                }
                "gateway_ip" => {}
                "ip_version" if v == "ipv4" => {}
                "mss" => {
                    let m: usize = v
                        .parse()
                        .map_err(|_| Stop::Error(format!("bad --mss={v}")))?;
                    if m == 0 {
                        return Err(Stop::Error("--mss=0".into()));
                    }
                    gro_mss = Some(m);
                }
                // ember's TS clock ticks every millisecond (RFC 7323 §5.4); a script
                // written for another tick cannot be compared with it.
                "tcp_ts_tick_usecs" if v == "1000" => ts_tick = Some(1000u64),
                other => return unsup(format!("script option --{other}")),
            }
        }
        let mut params = linux_profile();
        if let Some(c) = &script.init_command {
            if let ShellOutcome::Unsupported(r) = apply_shell(&c.text, &mut params) {
                return unsup(format!("line {}: {r}", c.line));
            }
        }
        let mut host = Host::new(params, opts.secret);
        let iface = host
            .add_interface(Interface {
                mac: HOST_MAC,
                addr: local,
                prefix_len: 0,
                mtu: 1500,
            })
            .map_err(|e| Stop::Error(format!("interface: {e:?}")))?;
        let mut flow = Flow::new((local, DEFAULT_PORT), (remote, REMOTE_PORT));
        flow.ts_val_slack = ts_tick.map(|t| u32::try_from(tol / t + 1).unwrap_or(u32::MAX));
        let mut r = Runner {
            host,
            iface,
            now: Instant::ZERO,
            core: Core::new(
                flow,
                Duration::from_micros(tol),
                Instant::from_micros(opts.max_virtual_us),
            ),
            local,
            remote,
            socks: BTreeMap::new(),
            pending: None,
            last_fd: None,
            last_conn: None,
            vars: BTreeMap::new(),
            epolls: BTreeMap::new(),
            gro_mss,
            steps: 0,
            max_steps: opts.max_steps,
        };
        // Seed the host's neighbour cache: the peer asks who has the local address.
        r.send_arp(ArpOp::Request, MacAddr([0; 6]), local);
        r.pump()?;
        r.core.captured.clear();
        Ok(r)
    }

    fn step(&mut self) -> R<()> {
        self.steps += 1;
        if self.steps > self.max_steps {
            return Err(Stop::Error(format!(
                "step budget of {} exhausted at {}",
                self.max_steps,
                us(self.now)
            )));
        }
        Ok(())
    }

    fn send_arp(&mut self, op: ArpOp, target_mac: MacAddr, target_ip: Ipv4Addr) {
        // The peer answers for whatever address the host asks about.
        let (sender_ip, dst) = match op {
            ArpOp::Request => (self.remote, MacAddr([0xff; 6])),
            _ => (target_ip, HOST_MAC),
        };
        let arp = ArpRepr {
            op,
            sender_mac: PEER_MAC,
            sender_ip,
            target_mac,
            target_ip: if op == ArpOp::Request {
                target_ip
            } else {
                self.local
            },
        };
        let mut frame = vec![0u8; 14 + ARP_LEN];
        EthernetRepr {
            dst,
            src: PEER_MAC,
            ethertype: ethertype::ARP,
        }
        .emit(&mut frame[..14]);
        arp.emit(&mut frame[14..]);
        self.host.receive(self.now, self.iface, &frame);
    }

    /// Drains the host's output (answering ARP, capturing IPv4) and readiness events,
    /// and retries the pending call, until nothing more happens.
    fn pump(&mut self) -> R<()> {
        loop {
            let mut progress = false;
            while let Some(f) = self.host.poll_transmit() {
                progress = true;
                self.step()?;
                let Ok((eth, payload)) = EthernetRepr::parse(&f.data) else {
                    continue;
                };
                match eth.ethertype {
                    ethertype::ARP => {
                        if let Ok(a) = ArpRepr::parse(payload) {
                            if a.op == ArpOp::Request {
                                self.send_arp(ArpOp::Reply, HOST_MAC, a.target_ip);
                            }
                        }
                    }
                    ethertype::IPV4 => {
                        let s = summarize(payload, &self.core.flow);
                        self.log(format!("> {s}"));
                        self.core.captured.push_back((self.now, payload.to_vec()));
                    }
                    _ => {}
                }
            }
            while let Some(ev) = self.host.poll_event() {
                self.wake(ev);
            }
            if self.pending.is_some() && self.retry_pending()? {
                progress = true;
            }
            if !progress {
                return Ok(());
            }
        }
    }

    /// Advances virtual time to `target`, firing timers on the way; returns early once
    /// more than `stop_after` frames have been captured.
    fn advance_to(&mut self, target: Instant, stop_after: Option<usize>) -> R<()> {
        if target > self.core.max_time {
            return Err(Stop::Error(format!(
                "virtual time limit exceeded ({})",
                us(target)
            )));
        }
        loop {
            self.pump()?;
            if stop_after.is_some_and(|n| self.core.captured.len() > n) {
                return Ok(());
            }
            let wait_until = match &self.pending {
                Some(Pending {
                    what: Blocked::Wait { until: Some(u) },
                    ..
                }) if *u <= target => Some(*u),
                _ => None,
            };
            match (self.host.poll_timeout(), wait_until) {
                (Some(d), w) if d <= target && w.is_none_or(|w| d <= w) => {
                    self.now = self.now.max(d);
                    self.step()?;
                    self.host.handle_timeout(self.now);
                }
                (_, Some(w)) => {
                    // The blocked poll()'s own timeout: the next pump ends it.
                    self.now = self.now.max(w);
                    self.step()?;
                }
                _ => break,
            }
        }
        self.now = self.now.max(target);
        self.pump()
    }

    fn check_pending_deadline(&mut self) -> R<()> {
        if let Some(p) = &self.pending {
            if self.now > p.end.saturating_add(self.core.tol) {
                return still_blocked(p.line, &p.call, p.end, self.now);
            }
        }
        Ok(())
    }

    // ---------------------------------------------------------------------------------
    // Code blocks.

    /// Runs a code block: `assert` statements are evaluated against the `tcp_info` of
    /// the last connection a system call used, assignments set script variables
    /// (visible to later blocks), `print(...)` does nothing.
    fn code_block(&mut self, block: &CodeBlock) -> R<()> {
        let Some(stmts) = &block.statements else {
            return unsup("a code block outside the assertion subset");
        };
        let info = self.info_source();
        let now = self.now;
        for (idx, st) in stmts.iter().enumerate() {
            let lookup = |n: &str| -> Option<i64> {
                if let Some(v) = self.vars.get(n) {
                    return Some(*v);
                }
                if let Some(v) = code_constant(n) {
                    return Some(v);
                }
                match info.as_ref()? {
                    InfoSource::Conn(i) => tcpi(n, i, now),
                    InfoSource::Gone => (n == "tcpi_state").then_some(TCP_CLOSE),
                    InfoSource::Closed => closed_tcpi(n, self.host.params()),
                    InfoSource::Listen { queued, backlog } => {
                        listen_tcpi(n, *queued, *backlog, self.host.params())
                    }
                }
            };
            let test = match &st.kind {
                CodeStmtKind::Assert { test, .. } => test,
                CodeStmtKind::Assign { target, op, value } => {
                    if self.vars.len() >= MAX_CODE_VARS && !self.vars.contains_key(target) {
                        return Err(Stop::Error("too many code-block variables".into()));
                    }
                    let v = code_eval(value, &lookup)?;
                    let v = match op {
                        None => v,
                        Some(op) => {
                            let old = lookup(target).ok_or_else(|| {
                                Stop::Unsupported(format!("`{target}` used before assignment"))
                            })?;
                            code_eval(
                                &CodeExpr::Binary(
                                    *op,
                                    Box::new(CodeExpr::Int(old)),
                                    Box::new(CodeExpr::Int(v)),
                                ),
                                &|_| None,
                            )?
                        }
                    };
                    self.vars.insert(target.clone(), v);
                    continue;
                }
                CodeStmtKind::Expr(CodeExpr::Call(f, _)) if f == "print" => continue,
                CodeStmtKind::Expr(e) => return unsup(format!("code statement {e:?}")),
            };
            let tcp_names = code_names(test).into_iter().any(|n| n.starts_with("tcpi_"));
            if tcp_names && info.is_none() {
                return unsup("a tcp_info assertion with no socket");
            }
            let v = code_eval(test, &lookup)?;
            if v != 0 {
                self.log(format!("assert line {}: true", st.line));
            } else {
                let vals = code_names(test)
                    .into_iter()
                    .map(|n| format!("{n} = {}", lookup(&n).unwrap_or(-1)))
                    .collect::<Vec<_>>()
                    .join(", ");
                let text = assert_text(block, stmts, idx);
                self.log(format!("assert line {}: false", st.line));
                return fail(st.line, format!("`{text}` to hold"), vals);
            }
        }
        Ok(())
    }

    /// Where a code block's `tcpi_*` names come from: the socket of the last system
    /// call (see `last_fd`), as `getsockopt(TCP_INFO)` would read it; a closed fd falls
    /// back to its connection while ember still has it.
    fn info_source(&self) -> Option<InfoSource> {
        let by_conn = |id: ConnId| match self.host.tcp_info(id) {
            Some(i) => InfoSource::Conn(Box::new(i)),
            None => InfoSource::Gone,
        };
        match self.last_fd.and_then(|fd| self.sock(fd)) {
            Some(s) => Some(match s.kind {
                SockKind::Conn(id) => by_conn(id),
                SockKind::Fresh => InfoSource::Closed,
                SockKind::Listener(lid) => {
                    let somaxconn = i64::from(self.host.params().tcp_conn_req_max_q);
                    // Linux's listen(): a backlog above net.core.somaxconn (compared
                    // as unsigned, so a negative one too) is somaxconn.
                    let backlog = if s.backlog as u64 > somaxconn as u64 {
                        somaxconn
                    } else {
                        s.backlog
                    };
                    InfoSource::Listen {
                        queued: self.host.tcp_listener_queued(lid).unwrap_or(0) as i64,
                        backlog,
                    }
                }
            }),
            None => self
                .last_conn
                .and_then(|id| self.host.tcp_info(id))
                .map(|i| InfoSource::Conn(Box::new(i))),
        }
    }
}

impl Backend for Runner {
    fn core(&self) -> &Core {
        &self.core
    }

    fn core_mut(&mut self) -> &mut Core {
        &mut self.core
    }

    fn now(&self) -> Instant {
        self.now
    }

    fn advance(&mut self, target: Instant, stop_after: Option<usize>) -> R<()> {
        self.advance_to(target, stop_after)
    }

    /// A blocked call is retried as time advances; here it only fails once past its
    /// end and tolerance (an outbound line does not check: time has not moved for it),
    /// and after the last line time runs on until it returns or is late.
    fn settle(&mut self, point: Point) -> R<()> {
        match point {
            Point::Outbound => Ok(()),
            Point::Event | Point::Syscall => self.check_pending_deadline(),
            Point::End => {
                if let Some(p) = &self.pending {
                    let until = p.end.saturating_add(self.core.tol);
                    self.advance_to(until.max(self.now), None)?;
                    self.check_pending_deadline()?;
                }
                Ok(())
            }
        }
    }

    /// The datagram in an Ethernet frame from the peer's MAC (split into `--mss`
    /// segments first), then whatever the host does in answer.
    fn inject(&mut self, _line: u32, ip: Vec<u8>) -> R<()> {
        for ip in gro_split(ip, self.gro_mss) {
            let mut frame = vec![0u8; 14];
            EthernetRepr {
                dst: HOST_MAC,
                src: PEER_MAC,
                ethertype: ethertype::IPV4,
            }
            .emit(&mut frame);
            frame.extend_from_slice(&ip);
            self.step()?;
            self.host.receive(self.now, self.iface, &frame);
        }
        self.pump()
    }

    fn syscall(&mut self, line: u32, sc: &Syscall, _start: Instant, end: Option<Instant>) -> R<()> {
        self.call(line, sc, end)
    }

    /// A shell line's tunables are set on the host (new connections see them).
    fn shell(&mut self, line: u32, text: &str) -> R<()> {
        let mut params = self.host.params().clone();
        match apply_shell(text, &mut params) {
            ShellOutcome::Unsupported(r) => return unsup(format!("line {line}: {r}")),
            ShellOutcome::Ignored(_) => {}
            ShellOutcome::Applied(changes) => {
                for ch in changes {
                    self.host.set_param(ch.tunable, &ch.value).map_err(|e| {
                        Stop::Error(format!("line {line}: {} = {}: {e:?}", ch.tunable, ch.value))
                    })?;
                }
            }
        }
        self.log(format!("shell `{}`", text.trim()));
        Ok(())
    }

    fn code(&mut self, block: &CodeBlock) -> R<()> {
        self.code_block(block)
    }

    /// Virtual time: a train is the frames that left at the same instant.
    fn gso_gap(&self) -> Duration {
        Duration::ZERO
    }
}

/// `--mss`: a TCP datagram carrying more than `mss` payload bytes becomes consecutive
/// segments of `mss` bytes (the last may be shorter), each with the first's header;
/// PSH and FIN stay on the last only. Anything else is returned as it is.
pub(crate) fn gro_split(ip: Vec<u8>, mss: Option<usize>) -> Vec<Vec<u8>> {
    let Some(mss) = mss else { return vec![ip] };
    let Some(seg) = raw_segment(&ip) else {
        return vec![ip];
    };
    if seg.payload.len() <= mss || seg.flags & 0x02 != 0 {
        return vec![ip];
    }
    let chunks: Vec<&[u8]> = seg.payload.chunks(mss).collect();
    let mut out = Vec::with_capacity(chunks.len());
    let mut seq = seg.seq;
    for (k, c) in chunks.iter().enumerate() {
        let mut part = seg.clone();
        part.seq = seq;
        part.payload = c.to_vec();
        if k + 1 < chunks.len() {
            part.flags &= !0x09;
        }
        seq = seq.wrapping_add(c.len() as u32);
        match part.emit() {
            Ok(b) => out.push(b),
            Err(_) => return vec![ip],
        }
    }
    out
}

/// Variables a script's code blocks may define (a bound, not a Linux limit).
pub(crate) const MAX_CODE_VARS: usize = 256;
