//! The runner shared by both backends: verdicts, script time, the packet text of
//! failure reports, code-block evaluation and the result checks of system calls.

use std::collections::VecDeque;
use std::fmt;
use std::net::Ipv4Addr;
use std::time::Duration;

use ember_core::Instant;

use crate::packets::{build_inbound, flags_text, match_outbound, BuildError, Flow, RawSegment};
use crate::script::{
    Action, CodeBinOp, CodeBlock, CodeCmpOp, CodeExpr, CodeStmt, CodeStmtKind, Direction,
    EventTime, Packet, PacketBody, Script, Syscall,
};
use crate::syscalls::{errno_canonical, eval};

/// The port `bind(fd, ..., ...)` binds and `connect(fd, ..., ...)` connects to.
pub const DEFAULT_PORT: u16 = 8080;
/// The peer's port in a passive open.
pub const REMOTE_PORT: u16 = 48_213;
/// packetdrill's default timing tolerance, µs.
pub const DEFAULT_TOLERANCE_US: u64 = 4_000;

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

pub(crate) fn us(t: Instant) -> String {
    let u = t.as_micros();
    format!("{}.{:06}", u / 1_000_000, u % 1_000_000)
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

// -------------------------------------------------------------------------------------
// The loop (packetdrill's run.c and run_packet.c; the backends are its netdev and its
// system-call layer).

/// The state the loop keeps for either backend: the script's flow (relative sequence
/// numbers and timestamps), the tolerance, the packets the stack sent (stamped with
/// script time) that no outbound line has claimed yet, the time budget and the trace.
pub(crate) struct Core {
    pub(crate) flow: Flow,
    pub(crate) tol: Duration,
    pub(crate) captured: VecDeque<(Instant, Vec<u8>)>,
    pub(crate) max_time: Instant,
    pub(crate) trace: Vec<String>,
}

impl Core {
    pub(crate) fn new(flow: Flow, tol: Duration, max_time: Instant) -> Core {
        Core {
            flow,
            tol,
            captured: VecDeque::new(),
            max_time,
            trace: Vec::new(),
        }
    }

    /// A trace line stamped with script time `t` (the trace keeps its last lines).
    pub(crate) fn log_at(&mut self, t: Instant, s: String) {
        if self.trace.len() > 4096 {
            self.trace.drain(..2048);
        }
        self.trace.push(format!("{} {s}", us(t)));
    }
}

/// Where the loop is when it asks the backend about the blocked system call (see
/// [`Backend::settle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Point {
    /// Before an outbound line (time has not been advanced for it).
    Outbound,
    /// At the time of an inbound line, a shell line or a code block.
    Event,
    /// At the time of a system call.
    Syscall,
    /// After the last line.
    End,
}

/// What a backend does for the loop: its clock, its link (inject a datagram, capture
/// what the stack sends into [`Core::captured`]), its system calls, shell lines and
/// `tcp_info`. Script parsing, timing windows, packet building and matching, GSO trains,
/// return-value checks and the verdict are the loop's.
pub(crate) trait Backend {
    fn core(&self) -> &Core;
    fn core_mut(&mut self) -> &mut Core;
    /// Script time now: virtual time, or the wall clock since script time 0.
    fn now(&self) -> Instant;
    /// Lets script time pass until `target`, capturing what the stack sends; returns
    /// early once more than `stop_after` packets are captured.
    fn advance(&mut self, target: Instant, stop_after: Option<usize>) -> R<()>;
    /// Settles the system call still blocked, if any, before the next line at `point`
    /// (its result, or a failure once it is later than its tolerance).
    fn settle(&mut self, point: Point) -> R<()>;
    /// Hands the stack an inbound IPv4 datagram at script time now.
    fn inject(&mut self, line: u32, ip: Vec<u8>) -> R<()>;
    /// Performs a system call scripted at `start`, to return at `end` (`...end`) or at
    /// once.
    fn syscall(&mut self, line: u32, sc: &Syscall, start: Instant, end: Option<Instant>) -> R<()>;
    /// A shell line.
    fn shell(&mut self, line: u32, text: &str) -> R<()>;
    /// A `%{ }%` code block.
    fn code(&mut self, block: &CodeBlock) -> R<()>;
    /// How far apart the packets of one GSO train may leave (see [`gso_train`]).
    fn gso_gap(&self) -> Duration;
    /// The packet an outbound line is about to be matched against.
    fn claimed(&mut self, _ip: &[u8]) {}

    /// A trace line at script time now.
    fn log(&mut self, s: String) {
        let t = self.now();
        self.core_mut().log_at(t, s);
    }
}

/// Runs the events of `script` against `b`.
pub(crate) fn run_events<B: Backend>(b: &mut B, script: &Script) -> R<()> {
    let mut prev = Instant::ZERO;
    for ev in &script.events {
        let max_time = b.core().max_time;
        let (lo, hi, start) = event_times(ev.time, prev, max_time)?;
        let base = prev;
        prev = start;
        if let Action::Packet(p) = &ev.action {
            if p.direction == Direction::Outbound {
                let tol = b.core().tol;
                let (wlo, whi) = outbound_window(ev.time, (lo, hi), base, tol, max_time);
                b.settle(Point::Outbound)?;
                outbound(b, ev.line, p, wlo, whi)?;
                continue;
            }
        }
        b.advance(start, None)?;
        b.settle(match ev.action {
            Action::Syscall(_) => Point::Syscall,
            _ => Point::Event,
        })?;
        match &ev.action {
            Action::Packet(p) => inbound(b, ev.line, p)?,
            Action::Syscall(sc) => {
                let end = call_end(ev.time, sc, base)?;
                b.log(format!("{}() line {}", sc.name, ev.line));
                b.syscall(ev.line, sc, start, end)?;
            }
            Action::Command(c) => b.shell(c.line, &c.text)?,
            Action::Code(block) => b.code(block)?,
        }
    }
    b.settle(Point::End)
}

/// The verdict of a run and the last lines of its trace.
pub(crate) fn outcome(r: R<()>, trace: &[String]) -> Outcome {
    let result = match r {
        Ok(()) => RunResult::Pass,
        Err(s) => stop_result(s),
    };
    let n = trace.len();
    Outcome {
        result,
        detail: trace[n.saturating_sub(12)..].join("\n"),
    }
}

/// An inbound line: its datagram, built in the script's flow, goes to the stack now.
fn inbound<B: Backend>(b: &mut B, line: u32, p: &Packet) -> R<()> {
    let ip = match build_inbound(p, &mut b.core_mut().flow) {
        Ok(ip) => ip,
        Err(BuildError::Unsupported(r)) => return unsup(format!("line {line}: {r}")),
        Err(e) => return Err(Stop::Error(format!("line {line}: {e}"))),
    };
    let s = summarize_in(&ip, &b.core().flow);
    b.log(format!("< {s}"));
    b.inject(line, ip)
}

/// An outbound line: the next packet the stack sent (waiting for one up to `hi`) must
/// have left in `[lo, hi]` and match the line field by field.
fn outbound<B: Backend>(b: &mut B, line: u32, p: &Packet, lo: Instant, hi: Instant) -> R<()> {
    if b.core().captured.is_empty() {
        b.advance(hi, Some(0))?;
    }
    let Some((t, mut bytes)) = b.core_mut().captured.pop_front() else {
        return fail(
            line,
            format!("{} by {}", describe(p), us(hi)),
            "nothing sent",
        );
    };
    if let PacketBody::Tcp(tp) = &p.body {
        gso_merge(b, t, &mut bytes, tp.seq.len as usize, hi)?;
    }
    b.claimed(&bytes);
    let flow = &mut b.core_mut().flow;
    let seen = summarize(&bytes, flow);
    if t < lo || t > hi {
        return fail(
            line,
            format!("{} in [{}, {}]", describe(p), us(lo), us(hi)),
            format!("{seen} at {}", us(t)),
        );
    }
    if let Err(m) = match_outbound(p, &bytes, flow) {
        return fail(
            line,
            format!("{} ({}: {})", describe(p), m.field, m.expected),
            format!("{seen} ({}: {})", m.field, m.actual),
        );
    }
    Ok(())
}

/// The GSO-train rule ([`gso_train`]) on the packet `first` (sent at `t`) for a line
/// wanting `want` payload bytes: the packets that continue it, each within the backend's
/// [`Backend::gso_gap`] of the one before, are merged into it; while the train may still
/// be arriving (not after `hi`), the loop waits for the rest.
fn gso_merge<B: Backend>(
    b: &mut B,
    t: Instant,
    first: &mut Vec<u8>,
    want: usize,
    hi: Instant,
) -> R<()> {
    let gap = b.gso_gap();
    let same_train = |prev: Instant, next: Instant| next.saturating_duration_since(prev) <= gap;
    loop {
        match gso_train(t, first, want, &b.core().captured, same_train) {
            Train::Merged(used, merged) => {
                b.core_mut().captured.drain(..used);
                b.log(format!(
                    "  (merged {} packets as one GSO segment)",
                    used + 1
                ));
                *first = merged;
                return Ok(());
            }
            // The rest of the train may still be on its way.
            Train::Partial(last_t) => {
                let until = last_t.saturating_add(gap).min(hi);
                let have = b.core().captured.len();
                if b.now() >= until {
                    return Ok(());
                }
                b.advance(until, Some(have))?;
                if b.core().captured.len() == have {
                    return Ok(());
                }
            }
            Train::No => return Ok(()),
        }
    }
}

/// A call that returned at `at` against its scripted end: within the tolerance `tol`.
pub(crate) fn check_return_time(
    line: u32,
    sc: &Syscall,
    end: Instant,
    at: Instant,
    tol: Duration,
) -> R<()> {
    let lo = end.as_nanos().saturating_sub(tol.as_nanos() as u64);
    if at.as_nanos() < lo || at > end.saturating_add(tol) {
        return fail(
            line,
            format!("{}() to return at {}", sc.name, us(end)),
            format!("returned at {}", us(at)),
        );
    }
    Ok(())
}

/// A call still blocked at `now`, past its scripted end (and tolerance).
pub(crate) fn still_blocked<T>(line: u32, sc: &Syscall, end: Instant, now: Instant) -> R<T> {
    fail(
        line,
        format!("{}() to return by {}", sc.name, us(end)),
        format!("still blocked at {}", us(now)),
    )
}
