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
//!   No relative (percentage) rule is applied: syntax.md does not define one.
//! * Outbound lines. The next captured IPv4 frame must match the line, field by field
//!   ([`match_outbound`]); a frame that leaves before the window, or a different
//!   frame, fails with what was seen; nothing by the end of the window fails with
//!   "nothing sent". A frame nobody expects fails the script when a later
//!   non-outbound event is processed more than the tolerance after the frame left.
//!   Frames left over after the last event are not checked.
//! * System calls. The subset ember's core has: `socket` (AF_INET stream sockets only;
//!   fds are the lowest free number from 3, like a fresh process), `setsockopt`
//!   (SO_REUSEADDR accepted and ignored; TCP_NODELAY, TCP_CORK, SO_SNDBUF, SO_RCVBUF,
//!   SO_KEEPALIVE, TCP_USER_TIMEOUT applied to the connection, remembered on a socket
//!   that has none yet and inherited by accepted connections), `getsockopt(SO_ERROR)`,
//!   `fcntl` (F_GETFL/F_SETFL with O_NONBLOCK), `bind`, `listen`, `accept`, `connect`
//!   (blocking, or EINPROGRESS when non-blocking), `write`/`send`/`sendto` (flags 0 or
//!   MSG_DONTWAIT; the buffer must be `...`, zeros are written), `read`/`recv`/
//!   `recvfrom` (same flags; the buffer must be `...`, contents are not checked),
//!   `close`, `shutdown`
//!   (SHUT_WR; SHUT_RD and SHUT_RDWR also mark the socket so a read with nothing
//!   buffered returns 0 instead of blocking). `socket()` returns the fd the script
//!   expects when that is a free number from 3 (fd numbering belongs to the harness,
//!   not the stack; the corpus has a script starting at 4). Anything
//!   else is `Unsupported` with the call's (or option's) name. Return values and errno
//!   names must equal the script's (`...` accepts anything).
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
//!   the connection the last system call used (an accept or socket call counts for the
//!   fd it returned). Fields come from ember's `TcbInfo` in Linux's units:
//!   `tcpi_snd_cwnd` = cwnd / MSS, `tcpi_snd_ssthresh` = ssthresh / MSS (0x7fffffff
//!   while unset), `tcpi_unacked`/`tcpi_sacked` = bytes / MSS rounded up,
//!   `tcpi_snd_mss`, `tcpi_rcv_mss`, `tcpi_backoff`, `tcpi_rto`/`tcpi_rtt`/
//!   `tcpi_rttvar`/`tcpi_min_rtt` in µs, the window scales. Any other field, name,
//!   assignment or print is `Unsupported`.
//! * Budgets: at most [`RunOptions::max_steps`] host steps (frames in, timer firings)
//!   and virtual time up to [`RunOptions::max_virtual_us`]; beyond them the run is an
//!   `Error`, so no script can hang the runner.
//! * Script options other than `tolerance_usecs`, `local_ip`, `remote_ip`,
//!   `gateway_ip` and `ip_version=ipv4` are `Unsupported`.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use ember_core::host::{ConnId, Interface, ListenerId};
use ember_core::ip::IfaceId;
use ember_core::tcp::{State, TcbInfo};
use ember_core::wire::{ethertype, ArpOp, ArpRepr, EthernetRepr, MacAddr, ARP_LEN};
use ember_core::{Host, Instant};

use crate::packets::{build_inbound, flags_text, match_outbound, BuildError, Flow, RawSegment};
use crate::profile::{apply_shell, linux_profile, unsupported_features, ShellOutcome};
use crate::script::{
    Action, CodeBinOp, CodeBlock, CodeCmpOp, CodeExpr, CodeStmtKind, Direction, EventTime, Expr,
    ExprKind, Packet, PacketBody, Script, Syscall,
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
}

/// A blocking call waiting to complete.
#[derive(Debug, Clone, Copy)]
enum Blocked {
    Accept { fd: i64 },
    Connect { fd: i64 },
    Read { fd: i64, len: usize },
    Write { fd: i64, len: usize, done: usize },
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
    /// The connection of the last system call on a connected socket (code blocks read
    /// its `tcp_info`).
    last_conn: Option<ConnId>,
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
        let mut r = Runner {
            host,
            iface,
            now: Instant::ZERO,
            flow: Flow::new((local, DEFAULT_PORT), (remote, REMOTE_PORT)),
            tol: Duration::from_micros(tol),
            local,
            remote,
            captured: VecDeque::new(),
            socks: BTreeMap::new(),
            pending: None,
            last_conn: None,
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
            while self.host.poll_event().is_some() {}
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
            match self.host.poll_timeout() {
                Some(d) if d <= target => {
                    self.now = self.now.max(d);
                    self.step()?;
                    self.host.handle_timeout(self.now);
                }
                _ => break,
            }
        }
        self.now = self.now.max(target);
        self.pump()
    }

    fn check_unexpected(&mut self, line: u32) -> R<()> {
        if let Some((t, bytes)) = self.captured.front() {
            if self.now > t.saturating_add(self.tol) {
                return fail(
                    line,
                    "no packet from the stack before this event",
                    format!(
                        "unexpected packet at {}: {}",
                        us(*t),
                        summarize(bytes, &self.flow)
                    ),
                );
            }
        }
        Ok(())
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
            let (lo, hi, start) = match ev.time {
                EventTime::Absolute(t) => {
                    let t = inst(t.micros)?;
                    (t, t, t)
                }
                EventTime::Relative(t) => {
                    let t = add(prev, t.micros)?;
                    (t, t, t)
                }
                EventTime::AbsoluteRange(a, b) => {
                    (inst(a.micros)?, inst(b.micros)?, inst(a.micros)?)
                }
                EventTime::RelativeRange(a, b) => (
                    add(prev, a.micros)?,
                    add(prev, b.micros)?,
                    add(prev, a.micros)?,
                ),
                EventTime::Any => (prev, self.max_time, prev),
            };
            let base = prev;
            prev = start;
            match &ev.action {
                Action::Packet(p) if p.direction == Direction::Outbound => {
                    let wlo = lo.saturating_duration_since(Instant::ZERO);
                    let wlo = Instant::from_nanos(
                        wlo.saturating_sub(self.tol)
                            .as_nanos()
                            .min(u64::MAX as u128) as u64,
                    );
                    let whi = if matches!(ev.time, EventTime::Any) {
                        self.max_time
                    } else {
                        hi.saturating_add(self.tol)
                    };
                    self.outbound(ev.line, p, wlo, whi)?;
                }
                Action::Packet(p) => {
                    self.advance_to(start, false)?;
                    self.check_unexpected(ev.line)?;
                    self.check_pending_deadline()?;
                    self.inbound(ev.line, p)?;
                }
                Action::Syscall(sc) => {
                    self.advance_to(start, false)?;
                    self.check_unexpected(ev.line)?;
                    self.check_pending_deadline()?;
                    let end = match sc.end_time {
                        None => None,
                        Some(e) => Some(match ev.time {
                            EventTime::Absolute(_) | EventTime::AbsoluteRange(..) => {
                                inst(e.micros)?
                            }
                            _ => add(base, e.micros)?,
                        }),
                    };
                    self.syscall(ev.line, sc, end)?;
                }
                Action::Command(c) => {
                    self.advance_to(start, false)?;
                    self.check_unexpected(ev.line)?;
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
                    self.check_unexpected(ev.line)?;
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
        let Some(mut seg) = raw_segment(first) else {
            return;
        };
        if seg.payload.is_empty() || seg.payload.len() >= want || seg.flags & 0x07 != 0 {
            return;
        }
        let mut used = 0;
        let mut last_flags = seg.flags;
        for (ft, fb) in &self.captured {
            if *ft != t || last_flags & 0x07 != 0 || seg.payload.len() >= want {
                break;
            }
            let Some(next) = raw_segment(fb) else { break };
            let expect_seq = seg.seq.wrapping_add(seg.payload.len() as u32);
            if next.seq != expect_seq
                || next.ack != seg.ack
                || next.src_port != seg.src_port
                || next.dst_port != seg.dst_port
                || next.flags & 0x02 != 0
            {
                break;
            }
            seg.payload.extend_from_slice(&next.payload);
            last_flags = next.flags;
            used += 1;
        }
        if used == 0 || seg.payload.len() != want {
            return;
        }
        seg.flags = (seg.flags & !0x09) | (last_flags & 0x09);
        if let Ok(merged) = seg.emit() {
            self.captured.drain(..used);
            self.log(format!("  (merged {} segments as GSO)", used + 1));
            *first = merged;
        }
    }

    // ---------------------------------------------------------------------------------
    // Code blocks.

    /// Evaluates a block of `assert` statements against the `tcp_info` of the last
    /// connection a system call used.
    fn code(&mut self, block: &CodeBlock) -> R<()> {
        let Some(stmts) = &block.statements else {
            return unsup("a code block outside the assertion subset");
        };
        let info = self
            .last_conn
            .and_then(|id| self.host.tcp_info(id))
            .ok_or_else(|| Stop::Unsupported("a code block with no connection".into()))?;
        for st in stmts {
            let CodeStmtKind::Assert { test, .. } = &st.kind else {
                return unsup("code statements other than assert");
            };
            let v = code_eval(test, &|n| tcpi(n, &info))?;
            self.log(format!("assert line {}: {}", st.line, v != 0));
            if v == 0 {
                let vals = code_names(test)
                    .into_iter()
                    .map(|n| format!("{n} = {}", tcpi(&n, &info).unwrap_or(-1)))
                    .collect::<Vec<_>>()
                    .join(", ");
                let text = block
                    .text
                    .lines()
                    .map(str::trim)
                    .filter(|l| l.starts_with("assert"))
                    .nth(stmts.iter().take_while(|x| x.line < st.line).count())
                    .unwrap_or("assertion");
                return fail(st.line, format!("`{text}` to hold"), vals);
            }
        }
        Ok(())
    }

    // ---------------------------------------------------------------------------------
    // System calls.

    fn sock(&self, fd: i64) -> Option<&Sock> {
        self.socks.get(&fd)
    }

    fn new_fd(&self) -> i64 {
        let mut fd = 3;
        while self.socks.contains_key(&fd) {
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
        // The connection this call touched (for code blocks): its fd, or the new fd.
        for fd in [
            arg_int(sc, 0).ok().flatten(),
            self.socks.keys().max().copied(),
        ]
        .into_iter()
        .flatten()
        {
            if let Some(SockKind::Conn(id)) = self.sock(fd).map(|s| s.kind) {
                self.last_conn = Some(id);
                break;
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
        match self.attempt_blocked(p.what)? {
            Attempt::Block(what) => {
                self.pending = Some(Pending { what, ..p });
                Ok(false)
            }
            Attempt::Done(got) => {
                self.log(format!("{}() line {} returns", p.call.name, p.line));
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
                    Some(want) if want >= 3 && !self.socks.contains_key(&want) => want,
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
                let backlog = arg_int(sc, 1)?.unwrap_or(128).max(0) as u32;
                let Some(s) = self.socks.get(&fd).cloned() else {
                    return Ok(Attempt::Done(Err("EBADF")));
                };
                match s.kind {
                    SockKind::Listener(_) => Attempt::Done(Ok(0)),
                    SockKind::Conn(_) => Attempt::Done(Err("EINVAL")),
                    SockKind::Fresh => {
                        let addr = s
                            .bound
                            .unwrap_or(SocketAddrV4::new(self.local, DEFAULT_PORT));
                        match self.host.tcp_listen(addr, backlog) {
                            Ok(lid) => {
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
                if name == "accept4" {
                    return unsup("accept4()");
                }
                let fd = self.fd_arg(sc)?;
                self.attempt_blocked(Blocked::Accept { fd })?
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
                    SockKind::Fresh => match self.host.tcp_connect(self.now, remote, s.bound) {
                        Err(e) => Attempt::Done(Err(errno_of(&e))),
                        Ok(id) => {
                            let info = self.host.tcp_info(id).expect("new connection");
                            self.flow.local_port = info.local.port();
                            self.flow.remote_port = remote.port();
                            self.socks.get_mut(&fd).expect("fd").kind = SockKind::Conn(id);
                            self.apply_opts(id, &s.opts);
                            if s.nonblock {
                                Attempt::Done(Err("EINPROGRESS"))
                            } else {
                                self.attempt_blocked(Blocked::Connect { fd })?
                            }
                        }
                    },
                }
            }
            "write" | "send" | "sendto" => {
                let fd = self.fd_arg(sc)?;
                buffer_is_ellipsis(sc)?;
                let len = arg_int(sc, 2)?
                    .ok_or_else(|| Stop::Unsupported(format!("{name}() with a length of ...")))?;
                let dontwait = if name == "write" {
                    false
                } else {
                    self.msg_flags(sc)?
                };
                if name == "sendto"
                    && sc
                        .args
                        .get(4)
                        .is_some_and(|a| !matches!(a.kind, ExprKind::Ellipsis | ExprKind::Int(0)))
                {
                    return unsup("sendto() with an address");
                }
                let len = len.max(0) as usize;
                if dontwait {
                    return Ok(self.write_once(fd, len, 0, true));
                }
                self.attempt_blocked(Blocked::Write { fd, len, done: 0 })?
            }
            "read" | "recv" | "recvfrom" => {
                let fd = self.fd_arg(sc)?;
                buffer_is_ellipsis(sc)?;
                let len = arg_int(sc, 2)?.unwrap_or(65_536).max(0) as usize;
                let dontwait = if name == "read" {
                    false
                } else {
                    self.msg_flags(sc)?
                };
                if dontwait {
                    return Ok(match self.read_once(fd, len) {
                        Attempt::Block(_) => Attempt::Done(Err("EAGAIN")),
                        a => a,
                    });
                }
                self.attempt_blocked(Blocked::Read { fd, len })?
            }
            "close" => {
                let fd = self.fd_arg(sc)?;
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

    /// `MSG_DONTWAIT` or no flags; anything else is unsupported.
    fn msg_flags(&self, sc: &Syscall) -> R<bool> {
        let Some(a) = sc.args.get(3) else {
            return Ok(false);
        };
        if a.as_int() == Some(0) || matches!(a.kind, ExprKind::Ellipsis) {
            return Ok(false);
        }
        match a.or_words().as_deref() {
            Some(["MSG_DONTWAIT"]) => Ok(true),
            _ => unsup(format!("{}() flags {:?}", sc.name, a.kind)),
        }
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
            other => return unsup(format!("setsockopt({other})")),
        };
        let Some(s) = self.socks.get_mut(&fd) else {
            return Ok(Attempt::Done(Err("EBADF")));
        };
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
        for o in opts {
            let _ = self.host.tcp_with(now, id, |t| match *o {
                SockOpt::NoDelay(on) => t.set_nodelay(on),
                SockOpt::Cork(on) => t.set_cork(now, on),
                SockOpt::SndBuf(b) => t.set_send_buffer(b),
                SockOpt::RcvBuf(b) => t.set_recv_buffer(b),
                SockOpt::KeepAlive(on) => t.set_keepalive(now, on),
                SockOpt::UserTimeout(ms) => {
                    t.set_user_timeout((ms > 0).then(|| Duration::from_millis(ms)))
                }
            });
        }
    }

    fn getsockopt(&mut self, line: u32, sc: &Syscall) -> R<Attempt> {
        let fd = self.fd_arg(sc)?;
        let opt = sc.args.get(2).and_then(|a| a.as_word()).unwrap_or("?");
        if opt != "SO_ERROR" {
            return unsup(format!("getsockopt({opt})"));
        }
        let Some(s) = self.sock(fd).cloned() else {
            return Ok(Attempt::Done(Err("EBADF")));
        };
        let err = match s.kind {
            SockKind::Conn(id) => self
                .host
                .tcp_with(self.now, id, |t| t.take_error())
                .ok()
                .flatten()
                .map(|e| errno_of(&e.into())),
            _ => None,
        };
        let got = err.map_or(0, errno_number);
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
                    return fail(
                        line,
                        format!("SO_ERROR {w}"),
                        format!("SO_ERROR {got} ({})", err.unwrap_or("0")),
                    );
                }
            }
        }
        Ok(Attempt::Done(Ok(0)))
    }

    fn attempt_blocked(&mut self, what: Blocked) -> R<Attempt> {
        Ok(match what {
            Blocked::Accept { fd } => {
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
                                nonblock: false,
                                opts: s.opts.clone(),
                                rd_shut: false,
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
            Blocked::Read { fd, len } => {
                let a = self.read_once(fd, len);
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
        })
    }

    fn read_once(&mut self, fd: i64, len: usize) -> Attempt {
        let Some(s) = self.sock(fd).cloned() else {
            return Attempt::Done(Err("EBADF"));
        };
        let SockKind::Conn(id) = s.kind else {
            return Attempt::Done(Err("ENOTCONN"));
        };
        let mut buf = vec![0u8; len];
        match self.host.tcp_recv(self.now, id, &mut buf) {
            Ok(n) => Attempt::Done(Ok(n as i64)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && s.rd_shut => {
                Attempt::Done(Ok(0))
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                Attempt::Block(Blocked::Read { fd, len })
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
/// windows, µs for times); `None` for fields ember does not have.
fn tcpi(name: &str, i: &TcbInfo) -> Option<i64> {
    let mss = i64::from(i.snd_mss.max(1));
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
        "tcpi_unacked" => (i64::from(i.unacked) + mss - 1) / mss,
        "tcpi_sacked" => (i64::from(i.sacked) + mss - 1) / mss,
        "tcpi_backoff" => i64::from(i.backoff),
        "tcpi_rto" => i.rto.as_micros() as i64,
        "tcpi_rtt" => i.srtt?.as_micros() as i64,
        "tcpi_rttvar" => i.rttvar.as_micros() as i64,
        "tcpi_min_rtt" => i.min_rtt?.as_micros() as i64,
        "tcpi_snd_wscale" => i64::from(i.snd_wscale),
        "tcpi_rcv_wscale" => i64::from(i.rcv_wscale),
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
        (Some(w), Err(e)) => w == -1 && sc.errno.as_deref() == Some(e),
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
        "IPPROTO_TCP" | "SOL_TCP" => 6,
        "AF_INET" => 2,
        "SOCK_STREAM" => 1,
        "SHUT_RD" => 0,
        "SHUT_WR" => 1,
        "SHUT_RDWR" => 2,
        "MSG_DONTWAIT" => 0x40,
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

pub(crate) fn errno_number(name: &str) -> i64 {
    match name {
        "EIO" => 5,
        "EBADF" => 9,
        "EAGAIN" => 11,
        "EINVAL" => 22,
        "EPIPE" => 32,
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
