//! The ember backend: runs a parsed script against ember's TCP on a virtual clock and
//! scores it.
//!
//! Design. One [`Host`] (ember's sans-IO core) with one interface, and a "link" that is
//! simply this module's loop: every frame the host transmits is taken from
//! [`Host::poll_transmit`] with the virtual time it left at; inbound packet lines are
//! built by [`build_inbound`], wrapped in Ethernet and given to [`Host::receive`] at
//! their script time; outbound lines are checked with [`match_outbound`]. Nothing reads
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
//!   ([`match_outbound`]); a frame that leaves before the window, or a different
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

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use ember_core::host::{ConnId, Interface, ListenerId, SocketEvent};
use ember_core::ip::IfaceId;
use ember_core::tcp::{State, Tcb, TcbInfo};
use ember_core::wire::{ethertype, ArpOp, ArpRepr, EthernetRepr, MacAddr, ARP_LEN};
use ember_core::{Host, Instant};

use crate::packets::{build_inbound, flags_text, match_outbound, BuildError, Flow, RawSegment};
use crate::profile::{apply_shell, linux_profile, unsupported_features, ShellOutcome};
use crate::script::{
    Action, CodeBinOp, CodeBlock, CodeCmpOp, CodeExpr, CodeStmt, CodeStmtKind, Direction,
    EventTime, Expr, ExprKind, Packet, PacketBody, Script, Syscall,
};

/// The stack's address unless `--local_ip` says otherwise.
pub const DEFAULT_LOCAL_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 0, 1);
/// The script peer's address unless `--remote_ip` says otherwise.
pub const DEFAULT_REMOTE_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
/// The port `bind(fd, ..., ...)` binds and `connect(fd, ..., ...)` connects to.
pub const DEFAULT_PORT: u16 = 8080;
/// The peer's port in a passive open.
pub const REMOTE_PORT: u16 = 48_213;
/// packetdrill's default timing tolerance, µs.
pub const DEFAULT_TOLERANCE_US: u64 = 4_000;

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

/// The verdict of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunResult {
    /// Every event happened as scripted.
    Pass,
    /// The event at `line` did not.
    Fail {
        /// Script line.
        line: u32,
        /// What the script says.
        expected: String,
        /// What ember did.
        got: String,
    },
    /// The script needs something ember or this runner lacks.
    Unsupported(String),
    /// The script could not be run (a bad value, a budget exceeded).
    Error(String),
}

/// A verdict and a trace of what happened (the last events, for failure reports).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The verdict.
    pub result: RunResult,
    /// The last lines of the run's trace.
    pub detail: String,
}

impl fmt::Display for RunResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunResult::Pass => f.write_str("pass"),
            RunResult::Fail {
                line,
                expected,
                got,
            } => write!(f, "line {line}: expected {expected}, got {got}"),
            RunResult::Unsupported(r) => write!(f, "unsupported: {r}"),
            RunResult::Error(r) => write!(f, "error: {r}"),
        }
    }
}

/// Why a run stopped early.
#[derive(Debug)]
pub(crate) enum Stop {
    Fail {
        line: u32,
        expected: String,
        got: String,
    },
    Unsupported(String),
    Error(String),
}

pub(crate) type R<T> = Result<T, Stop>;

pub(crate) fn fail<T>(line: u32, expected: impl Into<String>, got: impl Into<String>) -> R<T> {
    Err(Stop::Fail {
        line,
        expected: expected.into(),
        got: got.into(),
    })
}

pub(crate) fn unsup<T>(why: impl Into<String>) -> R<T> {
    Err(Stop::Unsupported(why.into()))
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
    let result = match runner.run(script) {
        Ok(()) => RunResult::Pass,
        Err(s) => stop_result(s),
    };
    let n = runner.trace.len();
    let detail = runner.trace[n.saturating_sub(12)..].join("\n");
    Outcome { result, detail }
}

pub(crate) fn stop_result(s: Stop) -> RunResult {
    match s {
        Stop::Fail {
            line,
            expected,
            got,
        } => RunResult::Fail {
            line,
            expected,
            got,
        },
        Stop::Unsupported(r) => RunResult::Unsupported(r),
        Stop::Error(r) => RunResult::Error(r),
    }
}

/// A socket option remembered until a connection exists.
#[derive(Debug, Clone, Copy)]
enum SockOpt {
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
enum SockKind {
    Fresh,
    Listener(ListenerId),
    Conn(ConnId),
}

#[derive(Debug, Clone)]
struct Sock {
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
struct EpItem {
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

const EPOLLIN: i64 = 0x1;
const EPOLLOUT: i64 = 0x4;
const EPOLLERR: i64 = 0x8;
const EPOLLHUP: i64 = 0x10;
const EPOLLRDNORM: i64 = 0x40;
const EPOLLWRNORM: i64 = 0x100;
const EPOLLRDHUP: i64 = 0x2000;
const EPOLLONESHOT: i64 = 1 << 30;
const EPOLLET: i64 = 1 << 31;
const EPOLL_CLOEXEC: i64 = 0o2000000;
const POLLNVAL: i64 = 0x20;

/// A blocking call waiting to complete.
#[derive(Debug, Clone, Copy)]
enum Blocked {
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
struct Pending {
    line: u32,
    call: Syscall,
    end: Instant,
    what: Blocked,
}

/// What a call attempt did.
enum Attempt {
    Done(Result<i64, &'static str>),
    Block(Blocked),
}

struct Runner {
    host: Host,
    iface: IfaceId,
    now: Instant,
    flow: Flow,
    tol: Duration,
    local: Ipv4Addr,
    remote: Ipv4Addr,
    captured: VecDeque<(Instant, Vec<u8>)>,
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
    max_time: Instant,
    trace: Vec<String>,
}

pub(crate) fn us(t: Instant) -> String {
    let u = t.as_micros();
    format!("{}.{:06}", u / 1_000_000, u % 1_000_000)
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
            flow,
            tol: Duration::from_micros(tol),
            local,
            remote,
            captured: VecDeque::new(),
            socks: BTreeMap::new(),
            pending: None,
            last_fd: None,
            last_conn: None,
            vars: BTreeMap::new(),
            epolls: BTreeMap::new(),
            gro_mss,
            steps: 0,
            max_steps: opts.max_steps,
            max_time: Instant::from_micros(opts.max_virtual_us),
            trace: Vec::new(),
        };
        // Seed the host's neighbour cache: the peer asks who has the local address.
        r.send_arp(ArpOp::Request, MacAddr([0; 6]), local);
        r.pump()?;
        r.captured.clear();
        Ok(r)
    }

    fn log(&mut self, s: String) {
        if self.trace.len() > 4096 {
            self.trace.drain(..2048);
        }
        self.trace.push(format!("{} {s}", us(self.now)));
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
                        let s = summarize(payload, &self.flow);
                        self.log(format!("> {s}"));
                        self.captured.push_back((self.now, payload.to_vec()));
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

    /// Advances virtual time to `target`, firing timers on the way; with
    /// `stop_on_frame`, stops as soon as a frame has been captured.
    fn advance_to(&mut self, target: Instant, stop_on_frame: bool) -> R<()> {
        if target > self.max_time {
            return Err(Stop::Error(format!(
                "virtual time limit exceeded ({})",
                us(target)
            )));
        }
        loop {
            self.pump()?;
            if stop_on_frame && !self.captured.is_empty() {
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
            if self.now > p.end.saturating_add(self.tol) {
                let (line, end) = (p.line, p.end);
                return fail(
                    line,
                    format!("{}() to return by {}", p.call.name, us(end)),
                    format!("still blocked at {}", us(self.now)),
                );
            }
        }
        Ok(())
    }

    fn run(&mut self, script: &Script) -> R<()> {
        let mut prev = Instant::ZERO;
        for ev in &script.events {
            let (lo, hi, start) = event_times(ev.time, prev, self.max_time)?;
            let base = prev;
            prev = start;
            match &ev.action {
                Action::Packet(p) if p.direction == Direction::Outbound => {
                    let (wlo, whi) =
                        outbound_window(ev.time, (lo, hi), base, self.tol, self.max_time);
                    self.outbound(ev.line, p, wlo, whi)?;
                }
                Action::Packet(p) => {
                    self.advance_to(start, false)?;
                    self.check_pending_deadline()?;
                    self.inbound(ev.line, p)?;
                }
                Action::Syscall(sc) => {
                    self.advance_to(start, false)?;
                    self.check_pending_deadline()?;
                    let end = call_end(ev.time, sc, base)?;
                    self.syscall(ev.line, sc, end)?;
                }
                Action::Command(c) => {
                    self.advance_to(start, false)?;
                    self.check_pending_deadline()?;
                    let mut params = self.host.params().clone();
                    match apply_shell(&c.text, &mut params) {
                        ShellOutcome::Unsupported(r) => {
                            return unsup(format!("line {}: {r}", c.line))
                        }
                        ShellOutcome::Ignored(_) => {}
                        ShellOutcome::Applied(changes) => {
                            for ch in changes {
                                self.host.set_param(ch.tunable, &ch.value).map_err(|e| {
                                    Stop::Error(format!(
                                        "line {}: {} = {}: {e:?}",
                                        c.line, ch.tunable, ch.value
                                    ))
                                })?;
                            }
                        }
                    }
                    self.log(format!("shell `{}`", c.text.trim()));
                }
                Action::Code(block) => {
                    self.advance_to(start, false)?;
                    self.check_pending_deadline()?;
                    self.code(block)?;
                }
            }
        }
        if let Some(p) = &self.pending {
            let until = p.end.saturating_add(self.tol);
            self.advance_to(until.max(self.now), false)?;
            self.check_pending_deadline()?;
        }
        Ok(())
    }

    fn inbound(&mut self, line: u32, p: &Packet) -> R<()> {
        let ip = match build_inbound(p, &mut self.flow) {
            Ok(ip) => ip,
            Err(BuildError::Unsupported(r)) => return unsup(format!("line {line}: {r}")),
            Err(e) => return Err(Stop::Error(format!("line {line}: {e}"))),
        };
        let s = summarize_in(&ip, &self.flow);
        self.log(format!("< {s}"));
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

    fn outbound(&mut self, line: u32, p: &Packet, lo: Instant, hi: Instant) -> R<()> {
        if self.captured.is_empty() {
            self.advance_to(hi, true)?;
        }
        let Some((t, mut bytes)) = self.captured.pop_front() else {
            return fail(
                line,
                format!("{} by {}", describe(p), us(hi)),
                "nothing sent",
            );
        };
        if let PacketBody::Tcp(tp) = &p.body {
            self.coalesce(t, &mut bytes, tp.seq.len as usize);
        }
        let seen = summarize(&bytes, &self.flow);
        if t < lo || t > hi {
            return fail(
                line,
                format!("{} in [{}, {}]", describe(p), us(lo), us(hi)),
                format!("{seen} at {}", us(t)),
            );
        }
        if let Err(m) = match_outbound(p, &bytes, &mut self.flow) {
            return fail(
                line,
                format!("{} ({}: {})", describe(p), m.field, m.expected),
                format!("{seen} ({}: {})", m.field, m.actual),
            );
        }
        Ok(())
    }

    /// GSO emulation: Linux hands a tun device super-segments larger than the MSS and
    /// the scripts are written that way; ember sends MSS-sized segments. When a line
    /// expects `want` payload bytes and the first frame carries fewer, the frames that
    /// left at the same instant and continue it (contiguous sequence numbers, same
    /// ack, no SYN/RST/FIN before the last) are merged into one segment, if together
    /// they carry exactly `want` bytes: the first's header, with PSH and FIN from the
    /// last. Otherwise nothing is merged (and the line fails on the first frame).
    fn coalesce(&mut self, t: Instant, first: &mut Vec<u8>, want: usize) {
        // Virtual time: a train is the frames that left at the same instant.
        if let Train::Merged(used, merged) =
            gso_train(t, first, want, &self.captured, |a, b| a == b)
        {
            self.captured.drain(..used);
            self.log(format!("  (merged {} segments as GSO)", used + 1));
            *first = merged;
        }
    }

    // ---------------------------------------------------------------------------------
    // Code blocks.

    /// Runs a code block: `assert` statements are evaluated against the `tcp_info` of
    /// the last connection a system call used, assignments set script variables
    /// (visible to later blocks), `print(...)` does nothing.
    fn code(&mut self, block: &CodeBlock) -> R<()> {
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

    // ---------------------------------------------------------------------------------
    // Readiness: poll and epoll.

    /// A readiness event from the host: edge-triggered epoll items of that socket are
    /// woken (Linux queues an item on every wakeup of the socket's wait queue; ember's
    /// events are those wakeups).
    fn wake(&mut self, ev: SocketEvent) {
        let fds: Vec<i64> = self
            .socks
            .iter()
            .filter(|(_, s)| match (s.kind, &ev) {
                (SockKind::Conn(a), SocketEvent::Tcp(b, _)) => a == *b,
                (SockKind::Listener(a), SocketEvent::Listener(b)) => a == *b,
                _ => false,
            })
            .map(|(fd, _)| *fd)
            .collect();
        for items in self.epolls.values_mut() {
            for it in items.iter_mut().filter(|i| fds.contains(&i.fd)) {
                it.woken = true;
            }
        }
    }

    /// The poll mask of `fd`, as Linux's `tcp_poll` computes it from the socket's
    /// state (POLLIN/RDNORM: data to read; RDHUP and IN: the peer's FIN or SHUT_RD;
    /// HUP: both directions shut or closed; OUT/WRNORM: room to write, or writing
    /// shut so a write fails at once; ERR: a pending error). `None`: not a socket.
    fn readiness(&mut self, fd: i64) -> R<Option<i64>> {
        let Some(s) = self.sock(fd).cloned() else {
            return Ok(None);
        };
        let id = match s.kind {
            SockKind::Conn(id) => id,
            SockKind::Listener(_) => return unsup("poll/epoll on a listening socket"),
            SockKind::Fresh => return unsup("poll/epoll on an unconnected socket"),
        };
        let Ok((avail, fin, err, state, writable)) = self.host.tcp_with(self.now, id, |t| {
            (
                t.recv_available(),
                t.fin_received(),
                t.error().is_some(),
                t.state(),
                t.send_space() >= t.send_lowat(),
            )
        }) else {
            // The connection is gone (reset or timed out and reaped): closed.
            return Ok(Some(
                EPOLLIN | EPOLLRDNORM | EPOLLRDHUP | EPOLLHUP | EPOLLOUT | EPOLLWRNORM,
            ));
        };
        let mut m = 0;
        if err {
            m |= EPOLLERR;
        }
        let closed = state == State::Closed;
        let rcv_shut = fin || s.rd_shut || closed;
        let snd_shut = s.wr_shut
            || closed
            || matches!(
                state,
                State::FinWait1
                    | State::FinWait2
                    | State::Closing
                    | State::LastAck
                    | State::TimeWait
            );
        if rcv_shut && snd_shut {
            m |= EPOLLHUP;
        }
        if rcv_shut {
            m |= EPOLLIN | EPOLLRDNORM | EPOLLRDHUP;
        }
        if !matches!(state, State::SynSent | State::SynReceived) {
            if avail > 0 {
                m |= EPOLLIN | EPOLLRDNORM;
            }
            if snd_shut || writable {
                m |= EPOLLOUT | EPOLLWRNORM;
            }
        }
        Ok(Some(m))
    }

    /// epoll_ctl(epfd, EPOLL_CTL_ADD|MOD|DEL, fd, {events=..., fd=N | ptr=V}).
    fn epoll_ctl(&mut self, sc: &Syscall) -> R<Attempt> {
        let epfd = self.fd_arg(sc)?;
        let op = sc.args.get(1).and_then(|a| a.as_word()).unwrap_or("?");
        let fd = arg_int(sc, 2)?.ok_or_else(|| Stop::Unsupported("epoll_ctl() fd ...".into()))?;
        if !self.epolls.contains_key(&epfd) {
            return Ok(Attempt::Done(Err(if self.socks.contains_key(&epfd) {
                "EINVAL"
            } else {
                "EBADF"
            })));
        }
        if !self.socks.contains_key(&fd) {
            return Ok(Attempt::Done(Err(if fd == epfd {
                "EINVAL"
            } else {
                "EBADF"
            })));
        }
        let (events, data) = match op {
            "EPOLL_CTL_DEL" => (0, (String::new(), 0)),
            _ => {
                let Some(ev) = sc.args.get(3).filter(|e| e.as_struct().is_some()) else {
                    return unsup("epoll_ctl() without a struct epoll_event");
                };
                let events = ev
                    .field("events")
                    .map(eval)
                    .transpose()?
                    .flatten()
                    .ok_or_else(|| Stop::Unsupported("epoll_event events ...".into()))?;
                let mut data = None;
                for name in ["fd", "ptr", "u32", "u64"] {
                    if let Some(v) = ev.field(name) {
                        data = Some((name.to_string(), eval(v)?.unwrap_or(0)));
                    }
                }
                let data = data.unwrap_or_else(|| ("fd".into(), fd));
                if events & !(0xffff | EPOLLRDHUP | EPOLLONESHOT | EPOLLET) != 0 {
                    return unsup(format!("epoll_ctl() events {events:#x}"));
                }
                (events, data)
            }
        };
        let ready = match op {
            "EPOLL_CTL_DEL" => None,
            _ => self.readiness(fd)?,
        };
        let items = self.epolls.get_mut(&epfd).expect("checked above");
        let pos = items.iter().position(|i| i.fd == fd);
        // Linux queues a new or modified item that is ready at once.
        let woken = ready.is_some_and(|m| m & (events | EPOLLERR | EPOLLHUP) != 0);
        Ok(Attempt::Done(match (op, pos) {
            ("EPOLL_CTL_ADD", Some(_)) => Err("EEXIST"),
            ("EPOLL_CTL_ADD", None) => {
                items.push(EpItem {
                    fd,
                    events,
                    data,
                    woken,
                    disabled: false,
                });
                Ok(0)
            }
            ("EPOLL_CTL_MOD" | "EPOLL_CTL_DEL", None) => Err("ENOENT"),
            ("EPOLL_CTL_MOD", Some(i)) => {
                items[i] = EpItem {
                    fd,
                    events,
                    data,
                    woken,
                    disabled: false,
                };
                Ok(0)
            }
            ("EPOLL_CTL_DEL", Some(i)) => {
                items.remove(i);
                Ok(0)
            }
            (other, _) => return unsup(format!("epoll_ctl({other})")),
        }))
    }

    /// poll(fds, n, timeout) and epoll_wait(epfd, events, max, timeout). With nothing
    /// ready and a timeout other than 0 the call blocks (if `may_block`) until
    /// something is, or until the timeout. On return, the script's expected `revents`
    /// (poll) or first event and its data (epoll) must match what was reported.
    fn wait_attempt(&mut self, line: u32, sc: &Syscall, may_block: bool) -> R<Attempt> {
        let timeout_arg = if sc.name == "poll" { 2 } else { 3 };
        let timeout = arg_int(sc, timeout_arg)?.unwrap_or(0);
        let until = (timeout > 0).then(|| self.now + Duration::from_millis(timeout as u64));
        let mut reported: Vec<(i64, i64, Option<&Expr>)> = Vec::new();
        if sc.name == "poll" {
            let Some(fds) = sc.args.first().and_then(|a| a.as_array()) else {
                return unsup("poll() without an array of pollfd");
            };
            for pfd in fds {
                let fd = pfd
                    .field("fd")
                    .map(eval)
                    .transpose()?
                    .flatten()
                    .ok_or_else(|| Stop::Unsupported("pollfd without fd".into()))?;
                let events = pfd
                    .field("events")
                    .map(eval)
                    .transpose()?
                    .flatten()
                    .unwrap_or(0);
                let revents = match self.readiness(fd)? {
                    None => POLLNVAL,
                    Some(m) => m & (events | EPOLLERR | EPOLLHUP),
                };
                reported.push((revents, fd, pfd.field("revents")));
            }
            let n = reported.iter().filter(|r| r.0 != 0).count() as i64;
            if n == 0 && timeout != 0 && may_block {
                return Ok(Attempt::Block(Blocked::Wait { until }));
            }
            for (got, fd, want) in &reported {
                if let Some(w) = want.map(eval).transpose()?.flatten() {
                    if w != *got {
                        return fail(
                            line,
                            format!("revents {} for fd {fd}", poll_text(w)),
                            format!("revents {}", poll_text(*got)),
                        );
                    }
                }
            }
            return Ok(Attempt::Done(Ok(n)));
        }
        let epfd = self.fd_arg(sc)?;
        let Some(items) = self.epolls.get(&epfd).cloned() else {
            return Ok(Attempt::Done(Err(if self.socks.contains_key(&epfd) {
                "EINVAL"
            } else {
                "EBADF"
            })));
        };
        let max = arg_int(sc, 2)?.unwrap_or(1);
        if max <= 0 {
            return Ok(Attempt::Done(Err("EINVAL")));
        }
        let mut out: Vec<(i64, (String, i64))> = Vec::new();
        let mut next = items.clone();
        for it in next.iter_mut() {
            if out.len() as i64 >= max || it.disabled {
                continue;
            }
            let edge = it.events & EPOLLET != 0;
            if edge && !it.woken {
                continue;
            }
            let m = self.readiness(it.fd)?.unwrap_or(0)
                & (it.events | EPOLLERR | EPOLLHUP)
                & 0xffff_ffff
                & !(EPOLLET | EPOLLONESHOT);
            it.woken = false;
            if m != 0 {
                out.push((m, it.data.clone()));
                if it.events & EPOLLONESHOT != 0 {
                    it.disabled = true;
                }
            }
        }
        if out.is_empty() && timeout != 0 && may_block {
            return Ok(Attempt::Block(Blocked::Wait { until }));
        }
        self.epolls.insert(epfd, next);
        let want = sc.args.get(1);
        let want_first = match want.and_then(|w| w.as_array()) {
            Some(a) => a.first(),
            None => want,
        };
        if let (Some(w), Some((m, (dname, dval)))) = (want_first, out.first()) {
            if let Some(we) = w.field("events").map(eval).transpose()?.flatten() {
                if we != *m {
                    return fail(
                        line,
                        format!("events {}", poll_text(we)),
                        format!("events {}", poll_text(*m)),
                    );
                }
            }
            if let Some(wd) = w.field(dname).map(eval).transpose()?.flatten() {
                if wd != *dval {
                    return fail(line, format!("{dname}={wd}"), format!("{dname}={dval}"));
                }
            }
        }
        Ok(Attempt::Done(Ok(out.len() as i64)))
    }

    // ---------------------------------------------------------------------------------
    // System calls.

    fn sock(&self, fd: i64) -> Option<&Sock> {
        self.socks.get(&fd)
    }

    /// `fd` is the socket code blocks read next, if it is one.
    fn note_last_fd(&mut self, fd: i64) {
        let Some(s) = self.sock(fd) else { return };
        if let SockKind::Conn(id) = s.kind {
            self.last_conn = Some(id);
        }
        self.last_fd = Some(fd);
    }

    fn new_fd(&self) -> i64 {
        let mut fd = 3;
        while self.socks.contains_key(&fd) || self.epolls.contains_key(&fd) {
            fd += 1;
        }
        fd
    }

    fn syscall(&mut self, line: u32, sc: &Syscall, end: Option<Instant>) -> R<()> {
        self.log(format!("{}() line {line}", sc.name));
        if self.pending.is_some() {
            return unsup(format!(
                "line {line}: {}() while another call is blocked",
                sc.name
            ));
        }
        let attempt = self.attempt(line, sc)?;
        // The socket this call used (for code blocks): its fd, or the fd it returned.
        if let Some(fd) = arg_int(sc, 0).ok().flatten() {
            self.note_last_fd(fd);
        }
        if let Attempt::Done(Ok(fd)) = attempt {
            if matches!(sc.name.as_str(), "socket" | "accept" | "accept4") {
                self.note_last_fd(fd);
            }
        }
        match attempt {
            Attempt::Done(got) => {
                if let Some(e) = end {
                    self.check_time(line, sc, e)?;
                }
                self.check_ret(line, sc, got)
            }
            Attempt::Block(what) => {
                self.pending = Some(Pending {
                    line,
                    call: sc.clone(),
                    end: end.unwrap_or(self.now),
                    what,
                });
                self.pump()
            }
        }
    }

    fn check_time(&self, line: u32, sc: &Syscall, end: Instant) -> R<()> {
        let lo = end.as_nanos().saturating_sub(self.tol.as_nanos() as u64);
        if self.now.as_nanos() < lo || self.now > end.saturating_add(self.tol) {
            return fail(
                line,
                format!("{}() to return at {}", sc.name, us(end)),
                format!("returned at {}", us(self.now)),
            );
        }
        Ok(())
    }

    /// Retries the pending call; true if it completed.
    fn retry_pending(&mut self) -> R<bool> {
        let Some(p) = self.pending.take() else {
            return Ok(false);
        };
        let a = match p.what {
            Blocked::Wait { until } => {
                if until.is_some_and(|u| self.now >= u) {
                    self.wait_attempt(p.line, &p.call, false)?
                } else {
                    match self.wait_attempt(p.line, &p.call, true)? {
                        Attempt::Block(_) => Attempt::Block(p.what),
                        a => a,
                    }
                }
            }
            what => self.attempt_blocked(what)?,
        };
        match a {
            Attempt::Block(what) => {
                self.pending = Some(Pending { what, ..p });
                Ok(false)
            }
            Attempt::Done(got) => {
                self.log(format!("{}() line {} returns", p.call.name, p.line));
                if let (Ok(fd), "accept" | "accept4") = (got, p.call.name.as_str()) {
                    self.note_last_fd(fd);
                }
                self.check_time(p.line, &p.call, p.end)?;
                self.check_ret(p.line, &p.call, got)?;
                Ok(true)
            }
        }
    }

    fn check_ret(&self, line: u32, sc: &Syscall, got: Result<i64, &'static str>) -> R<()> {
        check_ret(line, sc, got)
    }

    fn fd_arg(&self, sc: &Syscall) -> R<i64> {
        arg_int(sc, 0)?.ok_or_else(|| Stop::Unsupported(format!("{}() with fd ...", sc.name)))
    }

    fn attempt(&mut self, line: u32, sc: &Syscall) -> R<Attempt> {
        let name = sc.name.as_str();
        Ok(match name {
            "socket" => {
                let domain = sc.args.first().map(|a| a.kind.clone());
                if !matches!(domain, Some(ExprKind::Ellipsis))
                    && sc.args.first().and_then(|a| a.as_word()) != Some("AF_INET")
                {
                    return unsup("socket() of a family other than AF_INET");
                }
                let ty = sc
                    .args
                    .get(1)
                    .and_then(|a| a.or_words())
                    .unwrap_or_default();
                if !ty.contains(&"SOCK_STREAM") {
                    return unsup(format!("socket() of type {ty:?}"));
                }
                let nonblock = ty.contains(&"SOCK_NONBLOCK");
                if ty
                    .iter()
                    .any(|w| !matches!(*w, "SOCK_STREAM" | "SOCK_NONBLOCK"))
                {
                    return unsup(format!("socket() flags {ty:?}"));
                }
                // The fd number is the harness's business, not the stack's: take the
                // one the script expects when it is a free number from 3.
                let fd = match eval(&sc.ret)? {
                    Some(want)
                        if want >= 3
                            && !self.socks.contains_key(&want)
                            && !self.epolls.contains_key(&want) =>
                    {
                        want
                    }
                    _ => self.new_fd(),
                };
                self.socks.insert(
                    fd,
                    Sock {
                        kind: SockKind::Fresh,
                        bound: None,
                        nonblock,
                        opts: Vec::new(),
                        rd_shut: false,
                        wr_shut: false,
                        more: false,
                        backlog: 0,
                    },
                );
                Attempt::Done(Ok(fd))
            }
            "setsockopt" => self.setsockopt(sc)?,
            "getsockopt" => self.getsockopt(line, sc)?,
            "fcntl" => {
                let fd = self.fd_arg(sc)?;
                let cmd = sc.args.get(1).and_then(|a| a.as_word()).unwrap_or("");
                let Some(s) = self.socks.get_mut(&fd) else {
                    return Ok(Attempt::Done(Err("EBADF")));
                };
                match cmd {
                    "F_GETFL" => Attempt::Done(Ok(2 | if s.nonblock { O_NONBLOCK } else { 0 })),
                    "F_SETFL" => {
                        let v = sc.args.get(2).map(eval).transpose()?.flatten().unwrap_or(0);
                        s.nonblock = v & O_NONBLOCK != 0;
                        Attempt::Done(Ok(0))
                    }
                    other => return unsup(format!("fcntl({other})")),
                }
            }
            "bind" => {
                let fd = self.fd_arg(sc)?;
                let addr = self.sockaddr(sc.args.get(1), self.local)?;
                let Some(s) = self.socks.get_mut(&fd) else {
                    return Ok(Attempt::Done(Err("EBADF")));
                };
                if s.bound.is_some() || !matches!(s.kind, SockKind::Fresh) {
                    return Ok(Attempt::Done(Err("EINVAL")));
                }
                s.bound = Some(addr);
                Attempt::Done(Ok(0))
            }
            "listen" => {
                let fd = self.fd_arg(sc)?;
                let backlog_arg = arg_int(sc, 1)?.unwrap_or(128);
                let backlog = backlog_arg.max(0) as u32;
                let Some(s) = self.socks.get_mut(&fd) else {
                    return Ok(Attempt::Done(Err("EBADF")));
                };
                if !matches!(s.kind, SockKind::Conn(_)) {
                    s.backlog = backlog_arg;
                }
                let s = s.clone();
                match s.kind {
                    SockKind::Listener(_) => Attempt::Done(Ok(0)),
                    SockKind::Conn(_) => Attempt::Done(Err("EINVAL")),
                    SockKind::Fresh => {
                        let addr = s
                            .bound
                            .unwrap_or(SocketAddrV4::new(self.local, DEFAULT_PORT));
                        match self.host.tcp_listen(addr, backlog) {
                            Ok(lid) => {
                                for o in &s.opts {
                                    if let SockOpt::MaxSeg(m) = o {
                                        let _ = self.host.tcp_listener_set_max_segment(lid, *m);
                                    }
                                }
                                self.flow.local_port = addr.port();
                                self.flow.remote_port = REMOTE_PORT;
                                self.socks.get_mut(&fd).expect("fd").kind = SockKind::Listener(lid);
                                Attempt::Done(Ok(0))
                            }
                            Err(e) => Attempt::Done(Err(errno_of(&e))),
                        }
                    }
                }
            }
            "accept" | "accept4" => {
                let mut nonblock = false;
                if name == "accept4" {
                    match sc.args.get(3) {
                        None => {}
                        Some(a) if a.as_int() == Some(0) => {}
                        Some(a) => match a.or_words().as_deref() {
                            Some(["SOCK_NONBLOCK"]) => nonblock = true,
                            _ => return unsup(format!("accept4() flags {:?}", a.kind)),
                        },
                    }
                }
                let fd = self.fd_arg(sc)?;
                self.attempt_blocked(Blocked::Accept { fd, nonblock })?
            }
            "connect" => {
                let fd = self.fd_arg(sc)?;
                let remote = self.sockaddr(sc.args.get(1), self.remote)?;
                let Some(s) = self.socks.get(&fd).cloned() else {
                    return Ok(Attempt::Done(Err("EBADF")));
                };
                match s.kind {
                    SockKind::Listener(_) => Attempt::Done(Err("EISCONN")),
                    SockKind::Conn(_) => self.attempt_blocked(Blocked::Connect { fd })?,
                    SockKind::Fresh => {
                        match self.host.tcp_connect_with(self.now, remote, s.bound, |t| {
                            // Options set before connect() shape the SYN.
                            for o in &s.opts {
                                apply_opt(t, self.now, *o);
                            }
                        }) {
                            Err(e) => Attempt::Done(Err(errno_of(&e))),
                            Ok(id) => {
                                let info = self.host.tcp_info(id).expect("new connection");
                                self.flow.local_port = info.local.port();
                                self.flow.remote_port = remote.port();
                                self.socks.get_mut(&fd).expect("fd").kind = SockKind::Conn(id);
                                if s.nonblock {
                                    Attempt::Done(Err("EINPROGRESS"))
                                } else {
                                    self.attempt_blocked(Blocked::Connect { fd })?
                                }
                            }
                        }
                    }
                }
            }
            "write" | "send" | "sendto" | "sendmsg" | "writev" => {
                let fd = self.fd_arg(sc)?;
                let (len, flags) = match name {
                    "sendmsg" => (msghdr_len(sc)?, sc.args.get(2)),
                    "writev" => (iovec_len(sc.args.get(1))?, None),
                    _ => {
                        if is_null(sc.args.get(1)) {
                            let len = arg_int(sc, 2)?.unwrap_or(1);
                            return self.null_buffer(fd, len, true);
                        }
                        buffer_is_ellipsis(sc)?;
                        let len = arg_int(sc, 2)?.ok_or_else(|| {
                            Stop::Unsupported(format!("{name}() with a length of ..."))
                        })?;
                        (
                            len.max(0) as usize,
                            if name == "write" {
                                None
                            } else {
                                sc.args.get(3)
                            },
                        )
                    }
                };
                let MsgFlags {
                    dontwait,
                    more,
                    peek,
                } = msg_flags(sc, flags)?;
                if peek {
                    return unsup(format!("{name}() flag MSG_PEEK"));
                }
                if name == "sendto"
                    && sc
                        .args
                        .get(4)
                        .is_some_and(|a| !matches!(a.kind, ExprKind::Ellipsis | ExprKind::Int(0)))
                {
                    return unsup("sendto() with an address");
                }
                if more {
                    self.begin_more(fd);
                }
                let a = if dontwait {
                    self.write_once(fd, len, 0, true)
                } else {
                    self.attempt_blocked(Blocked::Write { fd, len, done: 0 })?
                };
                if !more {
                    self.end_more(fd);
                }
                a
            }
            "read" | "recv" | "recvfrom" | "recvmsg" | "readv" => {
                let fd = self.fd_arg(sc)?;
                let (len, flags) = match name {
                    "recvmsg" => (msghdr_len(sc)?, sc.args.get(2)),
                    "readv" => (iovec_len(sc.args.get(1))?, None),
                    _ => {
                        if is_null(sc.args.get(1)) {
                            let len = arg_int(sc, 2)?.unwrap_or(1);
                            return self.null_buffer(fd, len, false);
                        }
                        buffer_is_ellipsis(sc)?;
                        let len = arg_int(sc, 2)?.unwrap_or(65_536).max(0) as usize;
                        (len, if name == "read" { None } else { sc.args.get(3) })
                    }
                };
                let MsgFlags {
                    dontwait,
                    more,
                    peek,
                } = msg_flags(sc, flags)?;
                if more {
                    return unsup(format!("{name}() with MSG_MORE"));
                }
                if dontwait {
                    return Ok(match self.read_once(fd, len, peek) {
                        Attempt::Block(_) => Attempt::Done(Err("EAGAIN")),
                        a => a,
                    });
                }
                self.attempt_blocked(Blocked::Read { fd, len, peek })?
            }
            "ioctl" => self.ioctl(line, sc)?,
            "epoll_create" | "epoll_create1" => {
                let arg = arg_int(sc, 0)?.unwrap_or(1);
                if (name == "epoll_create" && arg <= 0)
                    || (name == "epoll_create1" && arg & !EPOLL_CLOEXEC != 0)
                {
                    return Ok(Attempt::Done(Err("EINVAL")));
                }
                let fd = match eval(&sc.ret)? {
                    Some(want)
                        if want >= 3
                            && !self.socks.contains_key(&want)
                            && !self.epolls.contains_key(&want) =>
                    {
                        want
                    }
                    _ => self.new_fd(),
                };
                self.epolls.insert(fd, Vec::new());
                Attempt::Done(Ok(fd))
            }
            "epoll_ctl" => self.epoll_ctl(sc)?,
            "epoll_wait" | "poll" => self.wait_attempt(line, sc, true)?,
            "close" => {
                let fd = self.fd_arg(sc)?;
                if self.epolls.remove(&fd).is_some() {
                    return Ok(Attempt::Done(Ok(0)));
                }
                for items in self.epolls.values_mut() {
                    // Closing a file removes it from every epoll set.
                    items.retain(|i| i.fd != fd);
                }
                match self.socks.remove(&fd) {
                    None => Attempt::Done(Err("EBADF")),
                    Some(s) => {
                        match s.kind {
                            SockKind::Fresh => {}
                            SockKind::Listener(l) => self.host.tcp_close_listener(self.now, l),
                            SockKind::Conn(c) => self.host.tcp_close(self.now, c),
                        }
                        Attempt::Done(Ok(0))
                    }
                }
            }
            "shutdown" => {
                let fd = self.fd_arg(sc)?;
                let how = sc.args.get(1).and_then(|a| a.as_word()).unwrap_or("");
                let Some(s) = self.socks.get_mut(&fd) else {
                    return Ok(Attempt::Done(Err("EBADF")));
                };
                let SockKind::Conn(id) = s.kind else {
                    return Ok(Attempt::Done(Err("ENOTCONN")));
                };
                match how {
                    "SHUT_RD" => {
                        s.rd_shut = true;
                        Attempt::Done(Ok(0))
                    }
                    "SHUT_WR" | "SHUT_RDWR" => {
                        if how == "SHUT_RDWR" {
                            s.rd_shut = true;
                        }
                        s.wr_shut = true;
                        Attempt::Done(
                            self.host
                                .tcp_shutdown_write(self.now, id)
                                .map(|_| 0)
                                .map_err(|e| errno_of(&e)),
                        )
                    }
                    other => return unsup(format!("shutdown({other})")),
                }
            }
            other => return unsup(format!("line {line}: system call {other}()")),
        })
    }

    fn sockaddr(&self, e: Option<&Expr>, default_ip: Ipv4Addr) -> R<SocketAddrV4> {
        let Some(e) = e else {
            return Ok(SocketAddrV4::new(default_ip, DEFAULT_PORT));
        };
        if matches!(e.kind, ExprKind::Ellipsis) {
            return Ok(SocketAddrV4::new(default_ip, DEFAULT_PORT));
        }
        let port = match e.field("sin_port").map(|p| &p.kind) {
            Some(ExprKind::Call(f, a)) if f == "htons" && a.len() == 1 => a[0]
                .as_int()
                .and_then(|v| u16::try_from(v).ok())
                .ok_or_else(|| Stop::Unsupported("sin_port value".into()))?,
            None => DEFAULT_PORT,
            _ => return unsup("sockaddr port form"),
        };
        let ip = match e.field("sin_addr").map(|p| &p.kind) {
            Some(ExprKind::Call(f, a)) if f == "inet_addr" && a.len() == 1 => match &a[0].kind {
                ExprKind::Str(s) => std::str::from_utf8(s)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| Stop::Unsupported("inet_addr value".into()))?,
                _ => return unsup("inet_addr form"),
            },
            None => default_ip,
            _ => return unsup("sockaddr address form"),
        };
        Ok(SocketAddrV4::new(ip, port))
    }

    fn setsockopt(&mut self, sc: &Syscall) -> R<Attempt> {
        let fd = self.fd_arg(sc)?;
        let opt = sc.args.get(2).and_then(|a| a.as_word()).unwrap_or("?");
        let val = match sc.args.get(3) {
            Some(a) => match a.as_array() {
                Some([x]) => eval(x)?,
                _ => eval(a)?,
            },
            None => None,
        };
        let v = val.unwrap_or(0);
        let o = match opt {
            "SO_REUSEADDR" => None,
            "TCP_NODELAY" => Some(SockOpt::NoDelay(v != 0)),
            "TCP_CORK" => Some(SockOpt::Cork(v != 0)),
            "SO_SNDBUF" => Some(SockOpt::SndBuf(v.max(0) as usize)),
            "SO_RCVBUF" => Some(SockOpt::RcvBuf(v.max(0) as usize)),
            "SO_KEEPALIVE" => Some(SockOpt::KeepAlive(v != 0)),
            "TCP_USER_TIMEOUT" => Some(SockOpt::UserTimeout(v.max(0) as u64)),
            // Linux's TCP_MAXSEG bounds (TCP_MIN_MSS .. MAX_TCP_WINDOW).
            "TCP_MAXSEG" if !(88..=32_767).contains(&v) => return Ok(Attempt::Done(Err("EINVAL"))),
            "TCP_MAXSEG" => Some(SockOpt::MaxSeg(v as u32)),
            // Linux's bounds (MAX_TCP_KEEPIDLE, MAX_TCP_KEEPINTVL, MAX_TCP_KEEPCNT).
            "TCP_KEEPIDLE" | "TCP_KEEPINTVL" if !(1..=32_767).contains(&v) => {
                return Ok(Attempt::Done(Err("EINVAL")))
            }
            "TCP_KEEPCNT" if !(1..=127).contains(&v) => return Ok(Attempt::Done(Err("EINVAL"))),
            "TCP_KEEPIDLE" => Some(SockOpt::KeepIdle(v as u32)),
            "TCP_KEEPINTVL" => Some(SockOpt::KeepIntvl(v as u32)),
            "TCP_KEEPCNT" => Some(SockOpt::KeepCnt(v as u32)),
            // For TCP the ECN field is the stack's, not the application's (RFC 3168
            // §6.1.1: ECT is set by TCP); with no ECN in ember it stays 0.
            "IP_TOS" => Some(SockOpt::Tos((v & 0xfc) as u8)),
            "TCP_NOTSENT_LOWAT" if matches!(v, 0 | -1 | 0xffff_ffff) => {
                Some(SockOpt::NotsentLowat(v as u32))
            }
            "TCP_NOTSENT_LOWAT" => {
                return unsup(format!(
                    "TCP_NOTSENT_LOWAT of {v}: ember has no unsent-bytes limit on writability"
                ))
            }
            other => return unsup(format!("setsockopt({other})")),
        };
        let Some(kind) = self.sock(fd).map(|s| s.kind) else {
            return Ok(Attempt::Done(Err("EBADF")));
        };
        if let (Some(SockOpt::MaxSeg(m)), SockKind::Listener(lid)) = (o, kind) {
            if let Err(e) = self.host.tcp_listener_set_max_segment(lid, m) {
                return Ok(Attempt::Done(Err(errno_of(&e))));
            }
        }
        let s = self.socks.get_mut(&fd).expect("checked above");
        if let Some(o) = o {
            s.opts.push(o);
            if let SockKind::Conn(id) = s.kind {
                self.apply_opts(id, &[o]);
            }
        }
        Ok(Attempt::Done(Ok(0)))
    }

    fn apply_opts(&mut self, id: ConnId, opts: &[SockOpt]) {
        let now = self.now;
        let _ = self.host.tcp_with(now, id, |t| {
            for o in opts {
                apply_opt(t, now, *o);
            }
        });
    }

    fn getsockopt(&mut self, line: u32, sc: &Syscall) -> R<Attempt> {
        let fd = self.fd_arg(sc)?;
        let opt = sc.args.get(2).and_then(|a| a.as_word()).unwrap_or("?");
        let Some(s) = self.sock(fd).cloned() else {
            return Ok(Attempt::Done(Err("EBADF")));
        };
        let conn = match s.kind {
            SockKind::Conn(id) => Some(id),
            _ => None,
        };
        let last = |f: &dyn Fn(&SockOpt) -> Option<i64>| s.opts.iter().rev().find_map(f);
        let mut err = None;
        let got: i64 = match opt {
            "SO_ERROR" => {
                err = conn
                    .and_then(|id| self.host.tcp_with(self.now, id, |t| t.take_error()).ok())
                    .flatten()
                    .map(|e| errno_of(&e.into()));
                err.map_or(0, errno_number)
            }
            // The MSS in use once connected; before that TCP_MAXSEG if set, else
            // Linux's default MSS (536, RFC 9293 §3.7.1).
            "TCP_MAXSEG" => match conn.and_then(|id| self.host.tcp_info(id)) {
                Some(i) => i64::from(i.snd_mss),
                None => last(&|o| match o {
                    SockOpt::MaxSeg(m) => Some(i64::from(*m)),
                    _ => None,
                })
                .unwrap_or(536),
            },
            "TCP_NOTSENT_LOWAT" => last(&|o| match o {
                SockOpt::NotsentLowat(v) => Some(i64::from(*v)),
                _ => None,
            })
            .unwrap_or(0),
            "IP_TOS" => last(&|o| match o {
                SockOpt::Tos(t) => Some(i64::from(*t)),
                _ => None,
            })
            .unwrap_or(0),
            "TCP_NODELAY" => last(&|o| match o {
                SockOpt::NoDelay(b) => Some(i64::from(*b)),
                _ => None,
            })
            .unwrap_or(0),
            "TCP_CORK" => last(&|o| match o {
                SockOpt::Cork(b) => Some(i64::from(*b)),
                _ => None,
            })
            .unwrap_or(0),
            "SO_KEEPALIVE" => last(&|o| match o {
                SockOpt::KeepAlive(b) => Some(i64::from(*b)),
                _ => None,
            })
            .unwrap_or(0),
            // The connection's value (set on it, or inherited from the tunables when it
            // was made); before there is one, the value set, else the tunable now, as
            // Linux reads the sysctl while the socket has none of its own.
            "TCP_KEEPIDLE" | "TCP_KEEPINTVL" | "TCP_KEEPCNT" => {
                let on_conn = conn.and_then(|id| {
                    self.host
                        .tcp_with(self.now, id, |t| t.keepalive_params())
                        .ok()
                });
                let p = self.host.params();
                let (idle, intvl, cnt) = match on_conn {
                    Some((i, v, c)) => (i.as_secs() as i64, v.as_secs() as i64, i64::from(c)),
                    None => (
                        last(&|o| match o {
                            SockOpt::KeepIdle(s) => Some(i64::from(*s)),
                            _ => None,
                        })
                        .unwrap_or(i64::from(p.tcp_keepalive_interval / 1000)),
                        last(&|o| match o {
                            SockOpt::KeepIntvl(s) => Some(i64::from(*s)),
                            _ => None,
                        })
                        .unwrap_or(i64::from(p.tcp_keepalive_intvl / 1000)),
                        last(&|o| match o {
                            SockOpt::KeepCnt(n) => Some(i64::from(*n)),
                            _ => None,
                        })
                        .unwrap_or(i64::from(p.tcp_keepalive_probes)),
                    ),
                };
                match opt {
                    "TCP_KEEPIDLE" => idle,
                    "TCP_KEEPINTVL" => intvl,
                    _ => cnt,
                }
            }
            // socket(7): the kernel doubles the value set (bookkeeping overhead) and
            // getsockopt returns the doubled value. Within 2304..=212992 neither the
            // minimum nor net.core.[rw]mem_max clamps it; outside, and when never set
            // (Linux then reports its autotuned size), the runner cannot answer.
            "SO_SNDBUF" | "SO_RCVBUF" => {
                let set = last(&|o| match (o, opt) {
                    (SockOpt::SndBuf(b), "SO_SNDBUF") | (SockOpt::RcvBuf(b), "SO_RCVBUF") => {
                        Some(*b as i64)
                    }
                    _ => None,
                });
                match set {
                    Some(v) if (2304..=212_992).contains(&v) => 2 * v,
                    Some(v) => {
                        return unsup(format!(
                            "getsockopt({opt}) after setting {v}: Linux clamps it"
                        ))
                    }
                    None => {
                        return unsup(format!(
                            "getsockopt({opt}) never set: Linux reports its autotuned size"
                        ))
                    }
                }
            }
            other => return unsup(format!("getsockopt({other})")),
        };
        if let Some(want) = sc.args.get(3) {
            let want = match want.as_array() {
                Some([x]) => x,
                _ => want,
            };
            let w = match want.as_word() {
                Some(name) if name.starts_with('E') => Some(errno_number(name)),
                _ => eval(want)?,
            };
            if let Some(w) = w {
                if w != got {
                    let errname = err.map(|e| format!(" ({e})")).unwrap_or_default();
                    return fail(line, format!("{opt} {w}"), format!("{opt} {got}{errname}"));
                }
            }
        }
        if let Some(len) = sc.args.get(4) {
            let len = match len.as_array() {
                Some([x]) => x,
                _ => len,
            };
            if let Some(l) = eval(len)? {
                if l != 4 {
                    return fail(line, format!("{opt} length {l}"), format!("{opt} length 4"));
                }
            }
        }
        Ok(Attempt::Done(Ok(0)))
    }

    /// ioctl(fd, SIOCINQ|FIONREAD|SIOCOUTQ|SIOCOUTQNSD, [n]): bytes readable, bytes
    /// written and not yet acknowledged, bytes written and not yet sent (Linux's
    /// answers; a listening socket is EINVAL).
    fn ioctl(&mut self, line: u32, sc: &Syscall) -> R<Attempt> {
        let fd = self.fd_arg(sc)?;
        let req = sc.args.get(1).and_then(|a| a.as_word()).unwrap_or("?");
        let Some(s) = self.sock(fd).cloned() else {
            return Ok(Attempt::Done(Err("EBADF")));
        };
        let id = match s.kind {
            SockKind::Listener(_) => return Ok(Attempt::Done(Err("EINVAL"))),
            SockKind::Fresh => None,
            SockKind::Conn(id) => Some(id),
        };
        let now = self.now;
        let got = match id {
            None => 0,
            Some(id) => {
                let v = self.host.tcp_with(now, id, |t| match req {
                    "SIOCINQ" | "FIONREAD" => Some(t.recv_available()),
                    "SIOCOUTQ" | "TIOCOUTQ" => Some(t.send_queued()),
                    "SIOCOUTQNSD" => Some(t.send_unsent()),
                    _ => None,
                });
                match v {
                    Ok(Some(n)) => n as i64,
                    Ok(None) => return unsup(format!("ioctl({req})")),
                    Err(_) => 0,
                }
            }
        };
        if !matches!(
            req,
            "SIOCINQ" | "FIONREAD" | "SIOCOUTQ" | "TIOCOUTQ" | "SIOCOUTQNSD"
        ) {
            return unsup(format!("ioctl({req})"));
        }
        if let Some(want) = sc.args.get(2) {
            let want = match want.as_array() {
                Some([x]) => x,
                _ => want,
            };
            if let Some(w) = eval(want)? {
                if w != got {
                    return fail(line, format!("{req} {w}"), format!("{req} {got}"));
                }
            }
        }
        Ok(Attempt::Done(Ok(0)))
    }

    /// A write (`write == true`) or read whose buffer is `NULL`: EFAULT, as the kernel
    /// answers when it cannot copy from or to the address; a read with nothing to
    /// copy behaves as a read (blocks, or EAGAIN) and a socket that is not connected
    /// gives its usual error. ember is not called: the fault is the syscall layer's.
    fn null_buffer(&mut self, fd: i64, len: i64, write: bool) -> R<Attempt> {
        let Some(s) = self.sock(fd).cloned() else {
            return Ok(Attempt::Done(Err("EBADF")));
        };
        let SockKind::Conn(id) = s.kind else {
            return Ok(Attempt::Done(Err(if write { "EPIPE" } else { "ENOTCONN" })));
        };
        if len == 0 {
            return Ok(Attempt::Done(Ok(0)));
        }
        if write {
            return Ok(Attempt::Done(Err("EFAULT")));
        }
        let avail = self
            .host
            .tcp_with(self.now, id, |t| t.recv_available())
            .unwrap_or(0);
        if avail > 0 {
            Ok(Attempt::Done(Err("EFAULT")))
        } else if s.nonblock {
            Ok(Attempt::Done(Err("EAGAIN")))
        } else {
            unsup("a blocking read into NULL with nothing to read yet")
        }
    }

    /// MSG_MORE on a send: ember's `set_more` for this call and the next ones with it.
    fn begin_more(&mut self, fd: i64) {
        let now = self.now;
        if let Some(s) = self.socks.get_mut(&fd) {
            if let SockKind::Conn(id) = s.kind {
                s.more = true;
                let _ = self.host.tcp_with(now, id, |t| t.set_more(now, true));
            }
        }
    }

    /// A send without MSG_MORE after one with it: what was held goes out with this
    /// call's data.
    fn end_more(&mut self, fd: i64) {
        let now = self.now;
        if let Some(s) = self.socks.get_mut(&fd) {
            if !s.more {
                return;
            }
            s.more = false;
            if let SockKind::Conn(id) = s.kind {
                let _ = self.host.tcp_with(now, id, |t| t.set_more(now, false));
            }
        }
    }

    fn attempt_blocked(&mut self, what: Blocked) -> R<Attempt> {
        Ok(match what {
            Blocked::Accept { fd, nonblock } => {
                let Some(s) = self.sock(fd).cloned() else {
                    return Ok(Attempt::Done(Err("EBADF")));
                };
                let SockKind::Listener(lid) = s.kind else {
                    return Ok(Attempt::Done(Err("EINVAL")));
                };
                match self.host.tcp_accept(lid) {
                    Ok((id, _peer)) => {
                        let nfd = self.new_fd();
                        self.socks.insert(
                            nfd,
                            Sock {
                                kind: SockKind::Conn(id),
                                bound: None,
                                nonblock,
                                opts: s.opts.clone(),
                                rd_shut: false,
                                wr_shut: false,
                                more: false,
                                backlog: 0,
                            },
                        );
                        self.apply_opts(id, &s.opts);
                        Attempt::Done(Ok(nfd))
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && !s.nonblock => {
                        Attempt::Block(what)
                    }
                    Err(e) => Attempt::Done(Err(errno_of(&e))),
                }
            }
            Blocked::Connect { fd } => {
                let Some(SockKind::Conn(id)) = self.sock(fd).map(|s| s.kind) else {
                    return Ok(Attempt::Done(Err("EBADF")));
                };
                let state = self.host.tcp_info(id).map(|i| i.state);
                match state {
                    Some(State::SynSent | State::SynReceived) => {
                        if self.sock(fd).is_some_and(|s| s.nonblock) {
                            Attempt::Done(Err("EALREADY"))
                        } else {
                            Attempt::Block(what)
                        }
                    }
                    Some(State::Closed) | None => {
                        let e = self
                            .host
                            .tcp_with(self.now, id, |t| t.take_error())
                            .ok()
                            .flatten();
                        Attempt::Done(Err(e.map_or("ECONNABORTED", |e| errno_of(&e.into()))))
                    }
                    Some(_) => Attempt::Done(Ok(0)),
                }
            }
            Blocked::Read { fd, len, peek } => {
                let a = self.read_once(fd, len, peek);
                match a {
                    Attempt::Block(_) if self.sock(fd).is_some_and(|s| s.nonblock) => {
                        Attempt::Done(Err("EAGAIN"))
                    }
                    a => a,
                }
            }
            Blocked::Write { fd, len, done } => {
                let nonblock = self.sock(fd).is_some_and(|s| s.nonblock);
                self.write_once(fd, len, done, nonblock)
            }
            Blocked::Wait { .. } => Attempt::Block(what),
        })
    }

    /// One read (`peek`: MSG_PEEK, the data stays in the receive queue).
    fn read_once(&mut self, fd: i64, len: usize, peek: bool) -> Attempt {
        let Some(s) = self.sock(fd).cloned() else {
            return Attempt::Done(Err("EBADF"));
        };
        let SockKind::Conn(id) = s.kind else {
            return Attempt::Done(Err("ENOTCONN"));
        };
        let mut buf = vec![0u8; len];
        let r = if peek {
            self.host
                .tcp_with(self.now, id, |t| t.peek(&mut buf))
                .and_then(|r| r.map_err(std::io::Error::from))
        } else {
            self.host.tcp_recv(self.now, id, &mut buf)
        };
        match r {
            Ok(n) => Attempt::Done(Ok(n as i64)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && s.rd_shut => {
                Attempt::Done(Ok(0))
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                Attempt::Block(Blocked::Read { fd, len, peek })
            }
            Err(e) => Attempt::Done(Err(errno_of(&e))),
        }
    }

    fn write_once(&mut self, fd: i64, len: usize, mut done: usize, nonblock: bool) -> Attempt {
        let Some(SockKind::Conn(id)) = self.sock(fd).map(|s| s.kind) else {
            return Attempt::Done(Err("EBADF"));
        };
        let zeros = vec![0u8; len - done];
        loop {
            if done == len {
                return Attempt::Done(Ok(len as i64));
            }
            match self.host.tcp_send(self.now, id, &zeros[..len - done]) {
                Ok(0) => {}
                Ok(n) => {
                    done += n;
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => {
                    return Attempt::Done(if done > 0 {
                        Ok(done as i64)
                    } else {
                        Err(errno_of(&e))
                    })
                }
            }
            // Nothing more fits now.
            return if nonblock {
                Attempt::Done(if done > 0 {
                    Ok(done as i64)
                } else {
                    Err("EAGAIN")
                })
            } else {
                Attempt::Block(Blocked::Write { fd, len, done })
            };
        }
    }
}

pub(crate) const O_NONBLOCK: i64 = 0o4000;

/// Applies one remembered socket option to a connection.
fn apply_opt(t: &mut Tcb, now: Instant, o: SockOpt) {
    match o {
        SockOpt::NoDelay(on) => t.set_nodelay(on),
        SockOpt::Cork(on) => t.set_cork(now, on),
        SockOpt::SndBuf(b) => t.set_send_buffer(b),
        SockOpt::RcvBuf(b) => t.set_recv_buffer(b),
        SockOpt::KeepAlive(on) => t.set_keepalive(now, on),
        SockOpt::UserTimeout(ms) => t.set_user_timeout((ms > 0).then(|| Duration::from_millis(ms))),
        SockOpt::MaxSeg(m) => {
            // The value was range-checked by setsockopt.
            let _ = t.set_user_mss(m);
        }
        SockOpt::NotsentLowat(_) => {}
        SockOpt::Tos(tos) => t.set_tos(tos),
        SockOpt::KeepIdle(s) => t.set_keepalive_idle(now, Duration::from_secs(u64::from(s))),
        SockOpt::KeepIntvl(s) => t.set_keepalive_intvl(Duration::from_secs(u64::from(s))),
        SockOpt::KeepCnt(n) => t.set_keepalive_probes(n),
    }
}

/// `--mss`: a TCP datagram carrying more than `mss` payload bytes becomes consecutive
/// segments of `mss` bytes (the last may be shorter), each with the first's header;
/// PSH and FIN stay on the last only. Anything else is returned as it is.
fn gro_split(ip: Vec<u8>, mss: Option<usize>) -> Vec<Vec<u8>> {
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

/// When an event's action runs, in script time (both backends): `(lo, hi, start)`, the
/// scripted window (a range's ends, else the one time) and the moment the action starts;
/// relative times count from `prev`, the previous event's start; `*` is any time up to
/// `max_time`.
pub(crate) fn event_times(
    time: EventTime,
    prev: Instant,
    max_time: Instant,
) -> R<(Instant, Instant, Instant)> {
    Ok(match time {
        EventTime::Absolute(t) => {
            let t = inst(t.micros)?;
            (t, t, t)
        }
        EventTime::Relative(t) => {
            let t = add(prev, t.micros)?;
            (t, t, t)
        }
        EventTime::AbsoluteRange(a, b) => (inst(a.micros)?, inst(b.micros)?, inst(a.micros)?),
        EventTime::RelativeRange(a, b) => (
            add(prev, a.micros)?,
            add(prev, b.micros)?,
            add(prev, a.micros)?,
        ),
        EventTime::Any => (prev, max_time, prev),
    })
}

/// The window an outbound line's packet must leave in. The 12.5% rule: the tolerance is
/// the wider of `tol` and an eighth of the time since the previous event (`base`), so a
/// 1 s timer may fire 125 ms off while a reply at +0 must come within `tol`; `*` waits
/// up to `max_time`.
pub(crate) fn outbound_window(
    time: EventTime,
    (lo, hi): (Instant, Instant),
    base: Instant,
    tol: Duration,
    max_time: Instant,
) -> (Instant, Instant) {
    let tol = tol.max(lo.saturating_duration_since(base) / 8);
    let wlo = Instant::from_nanos(
        lo.as_nanos()
            .saturating_sub(tol.as_nanos().min(u128::from(u64::MAX)) as u64),
    );
    let whi = if matches!(time, EventTime::Any) {
        max_time
    } else {
        hi.saturating_add(tol)
    };
    (wlo, whi)
}

/// A call's scripted end (`...end`): absolute for an absolute event time, else counted
/// from `base`, the previous event's start.
pub(crate) fn call_end(time: EventTime, sc: &Syscall, base: Instant) -> R<Option<Instant>> {
    let Some(e) = sc.end_time else {
        return Ok(None);
    };
    Ok(Some(match time {
        EventTime::Absolute(_) | EventTime::AbsoluteRange(..) => inst(e.micros)?,
        _ => add(base, e.micros)?,
    }))
}

/// What [`gso_train`] found.
pub(crate) enum Train {
    /// The rule does not apply, or the packets after `first` do not continue it.
    No,
    /// The packets so far continue `first` but carry less than wanted; the last left at
    /// the given time (more may be on the way).
    Partial(Instant),
    /// The first `.0` packets after `first` complete it: `.1` is the merged datagram.
    Merged(usize, Vec<u8>),
}

/// The GSO-train rule of both backends. Linux hands a device super-segments larger than
/// the MSS and the scripts are written that way, while ember (and the Linux backend's
/// TUN, which has no TSO) send MSS-sized segments. When a line wants `want` payload bytes
/// and `first` (sent at `t`) carries fewer, the packets after it in `rest` that continue
/// it (contiguous sequence numbers, same ack and ports, no SYN, nothing after a FIN or
/// RST, each in the same train as the one before by `same_train(prev_time, time)`) are
/// merged into one segment if together they carry exactly `want` bytes: the first's
/// header, with PSH and FIN from the last.
pub(crate) fn gso_train<'a>(
    t: Instant,
    first: &[u8],
    want: usize,
    rest: impl IntoIterator<Item = &'a (Instant, Vec<u8>)>,
    same_train: impl Fn(Instant, Instant) -> bool,
) -> Train {
    let Some(mut seg) = raw_segment(first) else {
        return Train::No;
    };
    if seg.payload.is_empty() || seg.payload.len() >= want || seg.flags & 0x07 != 0 {
        return Train::No;
    }
    let (mut used, mut last_flags, mut last_t) = (0, seg.flags, t);
    let mut stopped = false;
    for (nt, nb) in rest {
        if seg.payload.len() >= want || last_flags & 0x07 != 0 || !same_train(last_t, *nt) {
            stopped = true;
            break;
        }
        let Some(next) = raw_segment(nb) else {
            stopped = true;
            break;
        };
        let expect_seq = seg.seq.wrapping_add(seg.payload.len() as u32);
        if next.seq != expect_seq
            || next.ack != seg.ack
            || next.src_port != seg.src_port
            || next.dst_port != seg.dst_port
            || next.flags & 0x02 != 0
        {
            stopped = true;
            break;
        }
        seg.payload.extend_from_slice(&next.payload);
        last_flags = next.flags;
        last_t = *nt;
        used += 1;
    }
    if used > 0 && seg.payload.len() == want {
        seg.flags = (seg.flags & !0x09) | (last_flags & 0x09);
        return match seg.emit() {
            Ok(merged) => Train::Merged(used, merged),
            Err(_) => Train::No,
        };
    }
    if !stopped && seg.payload.len() < want && last_flags & 0x07 == 0 {
        return Train::Partial(last_t);
    }
    Train::No
}

/// The source text of the assert statement `stmts[idx]` of `block`, for a failure
/// message (both backends).
pub(crate) fn assert_text<'a>(block: &'a CodeBlock, stmts: &[CodeStmt], idx: usize) -> &'a str {
    let nth = stmts[..idx.min(stmts.len())]
        .iter()
        .filter(|x| matches!(x.kind, CodeStmtKind::Assert { .. }))
        .count();
    block
        .text
        .lines()
        .flat_map(|l| l.split(';'))
        .map(|l| l.trim().trim_end_matches('\\').trim())
        .filter(|l| l.starts_with("assert"))
        .nth(nth)
        .unwrap_or("assertion")
}

pub(crate) fn inst(micros: i64) -> R<Instant> {
    u64::try_from(micros)
        .map(Instant::from_micros)
        .map_err(|_| Stop::Error(format!("negative time {micros}")))
}

pub(crate) fn add(base: Instant, micros: i64) -> R<Instant> {
    let d = u64::try_from(micros).map_err(|_| Stop::Error(format!("negative time {micros}")))?;
    Ok(base.saturating_add(Duration::from_micros(d)))
}

/// A `tcp_info` field from ember's [`TcbInfo`], in Linux's units (segments for
/// windows, µs for RTTs, ms for the `last_*` idle times, Linux's numbering for states);
/// `None` for fields ember does not have.
fn tcpi(name: &str, i: &TcbInfo, now: Instant) -> Option<i64> {
    let mss = i64::from(i.snd_mss.max(1));
    let ms_since = |t: Instant| now.saturating_duration_since(t).as_millis() as i64;
    Some(match name {
        "tcpi_snd_cwnd" => i64::from(i.cwnd) / mss,
        // Linux reports an unset ssthresh as TCP_INFINITE_SSTHRESH.
        "tcpi_snd_ssthresh" => {
            if i.ssthresh >= 0x7fff_ffff {
                0x7fff_ffff
            } else {
                i64::from(i.ssthresh) / mss
            }
        }
        "tcpi_snd_mss" => i64::from(i.snd_mss),
        "tcpi_rcv_mss" => i64::from(i.rcv_mss),
        "tcpi_advmss" => i64::from(i.adv_mss),
        "tcpi_pmtu" => i64::from(i.pmtu),
        "tcpi_unacked" => (i64::from(i.unacked) + mss - 1) / mss,
        "tcpi_sacked" => (i64::from(i.sacked) + mss - 1) / mss,
        "tcpi_backoff" => i64::from(i.backoff),
        "tcpi_probes" => i64::from(i.probes),
        "tcpi_rto" => i.rto.as_micros() as i64,
        "tcpi_rtt" => i.srtt?.as_micros() as i64,
        "tcpi_rttvar" => i.rttvar.as_micros() as i64,
        "tcpi_min_rtt" => i.min_rtt?.as_micros() as i64,
        "tcpi_snd_wscale" => i64::from(i.snd_wscale),
        "tcpi_rcv_wscale" => i64::from(i.rcv_wscale),
        "tcpi_ca_state" => i64::from(i.ca_state),
        "tcpi_state" => linux_tcp_state(i.state),
        "tcpi_options" => [
            (i.timestamps, TCPI_OPT_TIMESTAMPS),
            (i.sack, TCPI_OPT_SACK),
            (i.window_scaling, TCPI_OPT_WSCALE),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .fold(0, |m, (_, bit)| m | bit),
        "tcpi_last_data_recv" => ms_since(i.last_data_recv),
        "tcpi_last_data_sent" => ms_since(i.last_data_sent),
        "tcpi_bytes_received" => i.bytes_received.min(i64::MAX as u64) as i64,
        "tcpi_segs_in" => i.stats.segs_in.min(i64::MAX as u64) as i64,
        "tcpi_segs_out" => i.stats.segs_out.min(i64::MAX as u64) as i64,
        "tcpi_total_retrans" => i.stats.retrans_segs.min(i64::MAX as u64) as i64,
        "tcpi_lost" => i64::from(i.lost),
        "tcpi_retrans" => i64::from(i.retrans),
        "tcpi_reordering" => i64::from(i.reordering),
        "tcpi_delivered" => i.delivered.min(i64::MAX as u64) as i64,
        "tcpi_busy_time" => i.chrono.busy_time(now).as_micros() as i64,
        "tcpi_rwnd_limited" => i.chrono.rwnd_limited_time(now).as_micros() as i64,
        "tcpi_sndbuf_limited" => i.chrono.sndbuf_limited_time(now).as_micros() as i64,
        // ember has no ECN: nothing is ever delivered CE-marked.
        "tcpi_delivered_ce" => 0,
        _ => return None,
    })
}

/// What a code block's `tcpi_*` names read.
enum InfoSource {
    /// A connection's `tcp_info`.
    Conn(Box<TcbInfo>),
    /// The socket's connection is gone (reset or timed out, and reaped): Linux's socket
    /// is in TCP_CLOSE; ember kept no other figure of it.
    Gone,
    /// A socket with no connection yet (Linux's TCP_CLOSE).
    Closed,
    /// A listener: its accept queue and backlog.
    Listen { queued: i64, backlog: i64 },
}

/// Linux's `TCP_CLOSE` (include/net/tcp_states.h).
const TCP_CLOSE: i64 = 7;

/// `tcp_info` of a socket with no connection yet, as Linux's `tcp_get_info` reports a
/// socket fresh from `tcp_init_sock`: TCP_CLOSE, the initial RTO (and RTTVAR a
/// quarter of it), the default MSS, the initial window, no ssthresh, the reordering
/// degree, no minimum RTT (~0U); every other field ember reports is 0. The
/// `tcpi_last_*` times count from boot on Linux: not answered.
fn closed_tcpi(name: &str, p: &ember_core::params::Params) -> Option<i64> {
    let rto_us = i64::from(p.tcp_rexmit_interval_initial) * 1000;
    Some(match name {
        "tcpi_state" => TCP_CLOSE,
        "tcpi_rto" => rto_us,
        "tcpi_rttvar" => rto_us / 4,
        "tcpi_snd_mss" => i64::from(p.tcp_mss_def_ipv4),
        "tcpi_snd_cwnd" => i64::from(p.tcp_init_cwnd),
        "tcpi_snd_ssthresh" => 0x7fff_ffff,
        "tcpi_reordering" => i64::from(p.tcp_dupack_fast_retransmit),
        "tcpi_min_rtt" => i64::from(u32::MAX),
        n if n.starts_with("tcpi_last_") => return None,
        n => return zero_tcpi(n),
    })
}

/// `tcp_info` of a listener, as Linux's `tcp_get_info` reports one: TCP_LISTEN,
/// `tcpi_unacked` the connections waiting for accept(), `tcpi_sacked` the backlog, the
/// initial window and the reordering degree; every other field ember reports is 0.
fn listen_tcpi(
    name: &str,
    queued: i64,
    backlog: i64,
    p: &ember_core::params::Params,
) -> Option<i64> {
    Some(match name {
        "tcpi_state" => 10,
        "tcpi_unacked" => queued,
        "tcpi_sacked" => backlog,
        "tcpi_snd_cwnd" => i64::from(p.tcp_init_cwnd),
        "tcpi_reordering" => i64::from(p.tcp_dupack_fast_retransmit),
        n => return zero_tcpi(n),
    })
}

/// 0 for a field [`tcpi`] knows (so a socket without a connection answers the same
/// names a connection does), `None` for the others.
fn zero_tcpi(name: &str) -> Option<i64> {
    TCPI_FIELDS.contains(&name).then_some(0)
}

/// The fields [`tcpi`] answers (a test keeps the two in step).
const TCPI_FIELDS: &[&str] = &[
    "tcpi_snd_cwnd",
    "tcpi_snd_ssthresh",
    "tcpi_snd_mss",
    "tcpi_rcv_mss",
    "tcpi_advmss",
    "tcpi_pmtu",
    "tcpi_unacked",
    "tcpi_sacked",
    "tcpi_backoff",
    "tcpi_probes",
    "tcpi_rto",
    "tcpi_rtt",
    "tcpi_rttvar",
    "tcpi_min_rtt",
    "tcpi_snd_wscale",
    "tcpi_rcv_wscale",
    "tcpi_ca_state",
    "tcpi_state",
    "tcpi_options",
    "tcpi_last_data_recv",
    "tcpi_last_data_sent",
    "tcpi_bytes_received",
    "tcpi_segs_in",
    "tcpi_segs_out",
    "tcpi_total_retrans",
    "tcpi_lost",
    "tcpi_retrans",
    "tcpi_reordering",
    "tcpi_delivered",
    "tcpi_busy_time",
    "tcpi_rwnd_limited",
    "tcpi_sndbuf_limited",
    "tcpi_delivered_ce",
];

const TCPI_OPT_TIMESTAMPS: i64 = 1;
const TCPI_OPT_SACK: i64 = 2;
const TCPI_OPT_WSCALE: i64 = 4;

/// Variables a script's code blocks may define (a bound, not a Linux limit).
const MAX_CODE_VARS: usize = 256;

/// Linux's `TCP_*` state numbers (`tcpi_state`).
fn linux_tcp_state(s: State) -> i64 {
    match s {
        State::Established => 1,
        State::SynSent => 2,
        State::SynReceived => 3,
        State::FinWait1 => 4,
        State::FinWait2 => 5,
        State::TimeWait => 6,
        State::Closed => 7,
        State::CloseWait => 8,
        State::LastAck => 9,
        State::Listen => 10,
        State::Closing => 11,
    }
}

/// Names a code block may use without defining them: Linux's `tcpi_ca_state`,
/// `tcpi_options` and `tcpi_state` values (the names packetdrill's code.c defines, with
/// TCPI_OPT_SACK and TCPI_OPT_ECN_SEEN besides; the states are include/net/tcp_states.h's,
/// TCP_ESTABLISHED = 1 to TCP_BOUND_INACTIVE = 13).
fn code_constant(n: &str) -> Option<i64> {
    Some(match n {
        "TCP_CA_Open" => 0,
        "TCP_CA_Disorder" => 1,
        "TCP_CA_CWR" => 2,
        "TCP_CA_Recovery" => 3,
        "TCP_CA_Loss" => 4,
        "TCPI_OPT_TIMESTAMPS" => TCPI_OPT_TIMESTAMPS,
        "TCPI_OPT_SACK" => TCPI_OPT_SACK,
        "TCPI_OPT_WSCALE" => TCPI_OPT_WSCALE,
        "TCPI_OPT_ECN" => 8,
        "TCPI_OPT_ECN_SEEN" => 16,
        "TCPI_OPT_SYN_DATA" => 32,
        "TCP_ESTABLISHED" => 1,
        "TCP_SYN_SENT" => 2,
        "TCP_SYN_RECV" => 3,
        "TCP_FIN_WAIT1" => 4,
        "TCP_FIN_WAIT2" => 5,
        "TCP_TIME_WAIT" => 6,
        "TCP_CLOSE" => 7,
        "TCP_CLOSE_WAIT" => 8,
        "TCP_LAST_ACK" => 9,
        "TCP_LISTEN" => 10,
        "TCP_CLOSING" => 11,
        "TCP_NEW_SYN_RECV" => 12,
        "TCP_BOUND_INACTIVE" => 13,
        _ => return None,
    })
}

pub(crate) fn code_names(e: &CodeExpr) -> Vec<String> {
    match e {
        CodeExpr::Name(n) => vec![n.clone()],
        CodeExpr::Binary(_, a, b) => [code_names(a), code_names(b)].concat(),
        CodeExpr::Compare(a, rest) => {
            let mut v = code_names(a);
            for (_, b) in rest {
                v.extend(code_names(b));
            }
            v
        }
        CodeExpr::Not(a) | CodeExpr::Neg(a) | CodeExpr::Invert(a) => code_names(a),
        _ => Vec::new(),
    }
}

pub(crate) fn code_eval(e: &CodeExpr, i: &dyn Fn(&str) -> Option<i64>) -> R<i64> {
    Ok(match e {
        CodeExpr::Int(v) => *v,
        CodeExpr::Name(n) => match i(n) {
            Some(v) => v,
            None => return unsup(format!("tcp_info field {n}")),
        },
        CodeExpr::Not(a) => i64::from(code_eval(a, i)? == 0),
        CodeExpr::Neg(a) => code_eval(a, i)?.wrapping_neg(),
        CodeExpr::Invert(a) => !code_eval(a, i)?,
        CodeExpr::Binary(op, a, b) => {
            let (x, y) = (code_eval(a, i)?, code_eval(b, i)?);
            match op {
                CodeBinOp::Or => i64::from(x != 0 || y != 0),
                CodeBinOp::And => i64::from(x != 0 && y != 0),
                CodeBinOp::BitOr => x | y,
                CodeBinOp::BitXor => x ^ y,
                CodeBinOp::BitAnd => x & y,
                CodeBinOp::Shl => x.wrapping_shl(y as u32),
                CodeBinOp::Shr => x.wrapping_shr(y as u32),
                CodeBinOp::Add => x.wrapping_add(y),
                CodeBinOp::Sub => x.wrapping_sub(y),
                CodeBinOp::Mul => x.wrapping_mul(y),
                CodeBinOp::Div | CodeBinOp::FloorDiv | CodeBinOp::Mod if y == 0 => {
                    return Err(Stop::Error("division by zero in a code block".into()))
                }
                CodeBinOp::Div | CodeBinOp::FloorDiv => x.div_euclid(y),
                CodeBinOp::Mod => x.rem_euclid(y),
            }
        }
        CodeExpr::Compare(a, rest) => {
            let mut left = code_eval(a, i)?;
            for (op, b) in rest {
                let right = code_eval(b, i)?;
                let ok = match op {
                    CodeCmpOp::Eq => left == right,
                    CodeCmpOp::Ne => left != right,
                    CodeCmpOp::Lt => left < right,
                    CodeCmpOp::Le => left <= right,
                    CodeCmpOp::Gt => left > right,
                    CodeCmpOp::Ge => left >= right,
                };
                if !ok {
                    return Ok(0);
                }
                left = right;
            }
            1
        }
        other => return unsup(format!("code expression {other:?}")),
    })
}

/// The call's return value (and errno) against the script's; `...` accepts anything.
pub(crate) fn check_ret(line: u32, sc: &Syscall, got: Result<i64, &'static str>) -> R<()> {
    let want = eval(&sc.ret)?;
    let want_text = match (&want, &sc.errno) {
        (None, _) => "...".to_string(),
        (Some(v), Some(e)) => format!("{v} {e}"),
        (Some(v), None) => v.to_string(),
    };
    let got_text = match got {
        Ok(v) => v.to_string(),
        Err(e) => format!("-1 {e}"),
    };
    let ok = match (want, got) {
        (None, _) => true,
        (Some(w), Ok(v)) => w == v && sc.errno.is_none(),
        (Some(w), Err(e)) => {
            w == -1 && sc.errno.as_deref().map(errno_canonical) == Some(errno_canonical(e))
        }
    };
    if ok {
        Ok(())
    } else {
        fail(
            line,
            format!("{}() = {want_text}", sc.name),
            format!("{}() = {got_text}", sc.name),
        )
    }
}

/// A poll/epoll mask as `EPOLLIN|EPOLLOUT` (the bits share values).
fn poll_text(m: i64) -> String {
    let names = [
        (EPOLLIN, "IN"),
        (0x2, "PRI"),
        (EPOLLOUT, "OUT"),
        (EPOLLERR, "ERR"),
        (EPOLLHUP, "HUP"),
        (POLLNVAL, "NVAL"),
        (EPOLLRDNORM, "RDNORM"),
        (EPOLLWRNORM, "WRNORM"),
        (EPOLLRDHUP, "RDHUP"),
    ];
    let v: Vec<&str> = names
        .iter()
        .filter(|(b, _)| m & b != 0)
        .map(|(_, n)| *n)
        .collect();
    if v.is_empty() {
        "0".into()
    } else {
        v.join("|")
    }
}

/// The send/receive flags the runner honours.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct MsgFlags {
    dontwait: bool,
    more: bool,
    peek: bool,
}

/// Send/receive flags: MSG_DONTWAIT, MSG_MORE, MSG_PEEK (and MSG_NOSIGNAL, which
/// changes nothing); 0 or `...` is none, anything else is unsupported.
fn msg_flags(sc: &Syscall, a: Option<&Expr>) -> R<MsgFlags> {
    let mut out = MsgFlags::default();
    let Some(a) = a else {
        return Ok(out);
    };
    if a.as_int() == Some(0) || matches!(a.kind, ExprKind::Ellipsis) {
        return Ok(out);
    }
    let words = a
        .or_words()
        .ok_or_else(|| Stop::Unsupported(format!("{}() flags {:?}", sc.name, a.kind)))?;
    for w in words {
        match w {
            "MSG_DONTWAIT" => out.dontwait = true,
            "MSG_MORE" => out.more = true,
            "MSG_PEEK" => out.peek = true,
            // ember raises no signals: MSG_NOSIGNAL changes nothing.
            "MSG_NOSIGNAL" => {}
            other => return unsup(format!("{}() flag {other}", sc.name)),
        }
    }
    Ok(out)
}

/// Is this argument `NULL` (or 0 where a buffer goes)?
fn is_null(a: Option<&Expr>) -> bool {
    a.is_some_and(|a| a.as_word() == Some("NULL"))
}

/// The total length of an iovec array `[{..., n}, ...]` (or `[{iov_base=...,
/// iov_len=n}]`); the buffers must be `...`.
fn iovec_len(a: Option<&Expr>) -> R<usize> {
    let Some(items) = a.and_then(|a| a.as_array()) else {
        return unsup("an iovec that is not an array");
    };
    let mut total = 0usize;
    for it in items {
        let Some(parts) = it.as_struct() else {
            return unsup("an iovec entry that is not a struct");
        };
        let (base, len) = match parts {
            [b, l] if b.assign_name().is_none() => (b, l),
            _ => match (it.field("iov_base"), it.field("iov_len")) {
                (Some(b), Some(l)) => (b, l),
                _ => return unsup("an iovec entry of another form"),
            },
        };
        if !matches!(base.kind, ExprKind::Ellipsis) {
            return unsup(format!("an iovec buffer {:?}", base.kind));
        }
        let n = eval(len)?.ok_or_else(|| Stop::Unsupported("an iovec length of ...".into()))?;
        total = total.saturating_add(n.max(0) as usize);
    }
    Ok(total)
}

/// The data length of a `struct msghdr` argument (argument 1 of sendmsg/recvmsg):
/// `msg_name` must be `...`, `msg_iov` gives the buffers, `msg_flags` must be 0 or
/// `...`; control data is beyond the runner.
fn msghdr_len(sc: &Syscall) -> R<usize> {
    let Some(m) = sc.args.get(1).filter(|m| m.as_struct().is_some()) else {
        return unsup(format!("{}() without a msghdr", sc.name));
    };
    for item in m.as_struct().unwrap_or_default() {
        match item.assign_name() {
            Some("msg_name" | "msg_iov") => {}
            Some("msg_flags") => {
                let v = m.field("msg_flags").map(eval).transpose()?.flatten();
                if v.is_some_and(|v| v != 0) {
                    return unsup(format!("{}() msg_flags {v:?}", sc.name));
                }
            }
            other => return unsup(format!("{}() msghdr field {other:?}", sc.name)),
        }
    }
    if m.field("msg_name")
        .is_some_and(|n| !matches!(n.kind, ExprKind::Ellipsis))
    {
        return unsup(format!("{}() with a msg_name", sc.name));
    }
    iovec_len(m.field("msg_iov"))
}

/// Buffers are `...` (zeros written, contents read not checked); a written buffer
/// (`NULL` for EFAULT, a string) is beyond this runner.
pub(crate) fn buffer_is_ellipsis(sc: &Syscall) -> R<()> {
    match sc.args.get(1).map(|a| &a.kind) {
        None | Some(ExprKind::Ellipsis) => Ok(()),
        Some(k) => unsup(format!("{}() with a buffer argument {k:?}", sc.name)),
    }
}

pub(crate) fn arg_int(sc: &Syscall, i: usize) -> R<Option<i64>> {
    match sc.args.get(i) {
        None => Ok(None),
        Some(e) => eval(e),
    }
}

/// The value of an integer expression; `None` for `...`.
pub(crate) fn eval(e: &Expr) -> R<Option<i64>> {
    Ok(match &e.kind {
        ExprKind::Ellipsis => None,
        ExprKind::Int(v) => Some(*v),
        ExprKind::Word(w) => Some(constant(w)?),
        ExprKind::BitOr(a, b) => match (eval(a)?, eval(b)?) {
            (Some(a), Some(b)) => Some(a | b),
            _ => None,
        },
        other => return unsup(format!("expression {other:?}")),
    })
}

pub(crate) fn constant(w: &str) -> R<i64> {
    Ok(match w {
        "O_RDONLY" => 0,
        "O_WRONLY" => 1,
        "O_RDWR" => 2,
        "O_NONBLOCK" => O_NONBLOCK,
        "F_GETFL" => 3,
        "F_SETFL" => 4,
        "SOL_SOCKET" => 1,
        "SOL_IP" | "IPPROTO_IP" => 0,
        "IPPROTO_TCP" | "SOL_TCP" => 6,
        "AF_INET" => 2,
        "SOCK_STREAM" => 1,
        "SHUT_RD" => 0,
        "SHUT_WR" => 1,
        "SHUT_RDWR" => 2,
        "MSG_DONTWAIT" => 0x40,
        "MSG_MORE" => 0x8000,
        "MSG_NOSIGNAL" => 0x4000,
        "SOCK_NONBLOCK" => O_NONBLOCK,
        "NULL" => 0,
        "EPOLLIN" | "POLLIN" => EPOLLIN,
        "EPOLLPRI" | "POLLPRI" => 0x2,
        "EPOLLOUT" | "POLLOUT" => EPOLLOUT,
        "EPOLLERR" | "POLLERR" => EPOLLERR,
        "EPOLLHUP" | "POLLHUP" => EPOLLHUP,
        "POLLNVAL" => POLLNVAL,
        "EPOLLRDNORM" | "POLLRDNORM" => EPOLLRDNORM,
        "EPOLLWRNORM" | "POLLWRNORM" => EPOLLWRNORM,
        "EPOLLRDHUP" | "POLLRDHUP" => EPOLLRDHUP,
        "EPOLLONESHOT" => EPOLLONESHOT,
        "EPOLLET" => EPOLLET,
        "EPOLLEXCLUSIVE" => 1 << 28,
        "EPOLL_CLOEXEC" => EPOLL_CLOEXEC,
        "EPOLL_CTL_ADD" => 1,
        "EPOLL_CTL_DEL" => 2,
        "EPOLL_CTL_MOD" => 3,
        "SIOCINQ" | "FIONREAD" => 0x541b,
        "SIOCOUTQ" | "TIOCOUTQ" => 0x5411,
        "SIOCOUTQNSD" => 0x894b,
        _ => return unsup(format!("constant {w}")),
    })
}

fn errno_of(e: &std::io::Error) -> &'static str {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::WouldBlock => "EAGAIN",
        K::ConnectionRefused => "ECONNREFUSED",
        K::ConnectionReset => "ECONNRESET",
        K::TimedOut => "ETIMEDOUT",
        K::ConnectionAborted => "ECONNABORTED",
        K::HostUnreachable => "EHOSTUNREACH",
        K::NotConnected => "ENOTCONN",
        K::BrokenPipe => "EPIPE",
        K::InvalidInput => "EINVAL",
        K::AddrInUse => "EADDRINUSE",
        K::AddrNotAvailable => "EADDRNOTAVAIL",
        K::NetworkUnreachable => "ENETUNREACH",
        _ => "EIO",
    }
}

/// The name Linux's errno has when it has two: EWOULDBLOCK is EAGAIN (11),
/// EDEADLOCK is EDEADLK (35), ENOTSUP is EOPNOTSUPP (95) (asm-generic/errno*.h);
/// scripts write either.
pub(crate) fn errno_canonical(name: &str) -> &str {
    match name {
        "EWOULDBLOCK" => "EAGAIN",
        "EDEADLOCK" => "EDEADLK",
        "ENOTSUP" => "EOPNOTSUPP",
        other => other,
    }
}

pub(crate) fn errno_number(name: &str) -> i64 {
    match errno_canonical(name) {
        "EIO" => 5,
        "EBADF" => 9,
        "EAGAIN" => 11,
        "EDEADLK" => 35,
        "EOPNOTSUPP" => 95,
        "EINVAL" => 22,
        "EPIPE" => 32,
        "EFAULT" => 14,
        "EEXIST" => 17,
        "ENOENT" => 2,
        "EADDRINUSE" => 98,
        "EADDRNOTAVAIL" => 99,
        "ENETUNREACH" => 101,
        "ECONNABORTED" => 103,
        "ECONNRESET" => 104,
        "EISCONN" => 106,
        "ENOTCONN" => 107,
        "ETIMEDOUT" => 110,
        "ECONNREFUSED" => 111,
        "EHOSTUNREACH" => 113,
        "EALREADY" => 114,
        "EINPROGRESS" => 115,
        _ => -1,
    }
}

/// A short text of a script packet line.
pub(crate) fn describe(p: &Packet) -> String {
    match &p.body {
        PacketBody::Tcp(t) => {
            let f = t.flags;
            let mut s = String::new();
            for (on, c) in [
                (f.syn, 'S'),
                (f.fin, 'F'),
                (f.rst, 'R'),
                (f.psh, 'P'),
                (f.urg, 'U'),
                (f.ece, 'E'),
                (f.cwr, 'W'),
                (f.ack, '.'),
            ] {
                if on {
                    s.push(c);
                }
            }
            if s.is_empty() {
                s.push('-');
            }
            let mut out = format!("{s} {}:{}({})", t.seq.start, t.seq.end, t.seq.len);
            if let Some(a) = t.ack {
                out += &format!(" ack {a}");
            }
            if let Some(w) = t.win {
                out += &format!(" win {w}");
            }
            out
        }
        PacketBody::Udp(u) => format!("udp ({})", u.len),
        PacketBody::Icmp(i) => format!("icmp {}", i.icmp_type),
    }
}

pub(crate) fn tcp_fields(ip: &[u8]) -> Option<(u32, u32, u8, u16, usize)> {
    let ihl = usize::from(ip.first()? & 0x0f) * 4;
    if ip.get(9) != Some(&6) {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?])).min(ip.len());
    let t = ip.get(ihl..total)?;
    if t.len() < 20 {
        return None;
    }
    let seq = u32::from_be_bytes([t[4], t[5], t[6], t[7]]);
    let ack = u32::from_be_bytes([t[8], t[9], t[10], t[11]]);
    let doff = usize::from(t[12] >> 4) * 4;
    let win = u16::from_be_bytes([t[14], t[15]]);
    Some((seq, ack, t[13], win, t.len().saturating_sub(doff)))
}

/// A TCP datagram taken apart (None if it is not one, or is malformed).
pub(crate) fn raw_segment(ip: &[u8]) -> Option<RawSegment> {
    let ihl = usize::from(ip.first()? & 0x0f) * 4;
    if ip.get(9) != Some(&6) || ihl < 20 {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?])).min(ip.len());
    let t = ip.get(ihl..total)?;
    if t.len() < 20 {
        return None;
    }
    let doff = usize::from(t[12] >> 4) * 4;
    if doff < 20 || doff > t.len() {
        return None;
    }
    let be16 = |i: usize| u16::from_be_bytes([t[i], t[i + 1]]);
    let be32 = |i: usize| u32::from_be_bytes([t[i], t[i + 1], t[i + 2], t[i + 3]]);
    Some(RawSegment {
        src: Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]),
        dst: Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]),
        src_port: be16(0),
        dst_port: be16(2),
        seq: be32(4),
        ack: be32(8),
        flags: t[13],
        window: be16(14),
        urgent: be16(18),
        options: t[20..doff].to_vec(),
        payload: t[doff..].to_vec(),
        tos: ip[1],
        ttl: ip[8],
        ident: u16::from_be_bytes([ip[4], ip[5]]),
    })
}

/// A short text of a datagram the stack sent, in script-relative numbers.
pub(crate) fn summarize(ip: &[u8], flow: &Flow) -> String {
    match tcp_fields(ip) {
        Some((seq, ack, flags, win, len)) => {
            let s = seq.wrapping_sub(flow.stack_base());
            let mut out = format!(
                "{} {}:{}({len})",
                flags_text(flags),
                s,
                s.wrapping_add(len as u32)
            );
            if flags & 0x10 != 0 {
                out += &format!(" ack {}", ack.wrapping_sub(flow.script_isn));
            }
            out + &format!(" win {win}")
        }
        None => format!(
            "non-TCP datagram (protocol {})",
            ip.get(9).copied().unwrap_or(0)
        ),
    }
}

/// A short text of a datagram the script injects, in script-relative numbers.
pub(crate) fn summarize_in(ip: &[u8], flow: &Flow) -> String {
    match tcp_fields(ip) {
        Some((seq, ack, flags, win, len)) => {
            let s = seq.wrapping_sub(flow.script_isn);
            format!(
                "{} {}:{}({len}) ack {} win {win}",
                flags_text(flags),
                s,
                s.wrapping_add(len as u32),
                ack.wrapping_sub(flow.stack_base())
            )
        }
        None => format!(
            "non-TCP datagram (protocol {})",
            ip.get(9).copied().unwrap_or(0)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ember_core::tcp::tcb::ConnSpec;
    use ember_core::tcp::{SeqNum, TcpSettings};

    fn syscall(line: &str) -> Syscall {
        let s = crate::script::parse(line).expect("parses");
        match &s.events[0].action {
            Action::Syscall(sc) => sc.clone(),
            a => panic!("{a:?}"),
        }
    }

    /// EWOULDBLOCK, EDEADLOCK and ENOTSUP are other names of EAGAIN, EDEADLK and
    /// EOPNOTSUPP: a script writing either matches.
    #[test]
    fn errno_aliases_match() {
        for (alias, name, n) in [
            ("EWOULDBLOCK", "EAGAIN", 11),
            ("EDEADLOCK", "EDEADLK", 35),
            ("ENOTSUP", "EOPNOTSUPP", 95),
        ] {
            assert_eq!(errno_canonical(alias), name);
            assert_eq!((errno_number(alias), errno_number(name)), (n, n));
        }
        let sc = syscall("0 read(3, ..., 1) = -1 EWOULDBLOCK (Resource temporarily unavailable)\n");
        assert!(check_ret(1, &sc, Err("EAGAIN")).is_ok());
        assert!(check_ret(1, &sc, Err("EINVAL")).is_err());
        assert!(check_ret(1, &sc, Ok(0)).is_err());
        let sc = syscall("0 read(3, ..., 1) = -1 EAGAIN (Resource temporarily unavailable)\n");
        assert!(check_ret(1, &sc, Err("EAGAIN")).is_ok());
    }

    /// MSG_PEEK is a receive flag the runner honours, alone or with others.
    #[test]
    fn msg_peek_flag() {
        let sc = syscall("0 recv(4, ..., 10, MSG_PEEK|MSG_DONTWAIT) = 1\n");
        let f = msg_flags(&sc, sc.args.get(3)).expect("supported");
        assert_eq!(
            f,
            MsgFlags {
                dontwait: true,
                more: false,
                peek: true
            }
        );
        let sc = syscall("0 recv(4, ..., 10, MSG_PEEK) = 1\n");
        assert!(msg_flags(&sc, sc.args.get(3)).expect("supported").peek);
        let sc = syscall("0 recv(4, ..., 10, MSG_TRUNC) = 1\n");
        assert!(msg_flags(&sc, sc.args.get(3)).is_err());
    }

    /// `TCPI_FIELDS` lists what `tcpi` answers for a connection; a socket with no
    /// connection and a listener answer the same names (but the `tcpi_last_*` times of
    /// a socket Linux counts from boot).
    #[test]
    fn tcpi_fields_in_step() {
        let a = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 1), 40_000);
        let b = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 2), 80);
        let spec = |local, remote, iss| ConnSpec {
            local,
            remote,
            iss: SeqNum(iss),
            ts_offset: 0,
            mtu: 1500,
        };
        let t0 = Instant::from_secs(1);
        let mut c = Tcb::connect(t0, spec(a, b, 1000), TcpSettings::default());
        let syn = c.poll_transmit(t0).expect("SYN").repr;
        let mut s = Tcb::accept(t0, spec(b, a, 5000), TcpSettings::default(), &syn);
        let synack = s.poll_transmit(t0).expect("SYN,ACK").repr;
        let t1 = t0 + Duration::from_millis(10);
        c.on_segment(t1, &synack, &[]);
        let info = c.info();
        for n in TCPI_FIELDS {
            assert!(tcpi(n, &info, t1).is_some(), "{n}");
        }
        for n in ["tcpi_reord_seen", "tcpi_snd_wnd", "tcpi_nonsense"] {
            assert_eq!(tcpi(n, &info, t1), None, "{n}");
        }
        let p = linux_profile();
        for n in TCPI_FIELDS {
            assert!(listen_tcpi(n, 1, 5, &p).is_some(), "{n}");
            assert_eq!(
                closed_tcpi(n, &p).is_some(),
                !n.starts_with("tcpi_last_"),
                "{n}"
            );
        }
        assert_eq!(closed_tcpi("tcpi_state", &p), Some(7));
        assert_eq!(listen_tcpi("tcpi_state", 1, 5, &p), Some(10));
        assert_eq!(listen_tcpi("tcpi_unacked", 1, 5, &p), Some(1));
        assert_eq!(listen_tcpi("tcpi_sacked", 1, 5, &p), Some(5));
        assert_eq!(closed_tcpi("tcpi_reord_seen", &p), None);
    }
}
