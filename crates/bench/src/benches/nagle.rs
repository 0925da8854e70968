//! `nagle`: the "earthquaky kernel interfaces" paper's case, small logically related
//! writes under Nagle, `TCP_NODELAY`, `TCP_CORK` and `writev`.
//!
//! The workload is the paper's `tcp_nagle_client`/`tcp_nagle_server` pair: per *logical
//! packet* (a message) the client makes 15 two-byte writes, then reads a 2-byte reply;
//! the server reads the 30 bytes and writes the reply. 10,000 messages (1,000 with
//! `--quick`). The modes are the client's socket options:
//! - `default`: Nagle on (nothing set); the paper measured 400 s for 10,000 messages, each
//!   waiting for the peer's delayed ACK (40 ms).
//! - `nodelay`: `TCP_NODELAY`; each write leaves at once (15 segments per message).
//! - `cork`: `TCP_CORK` set before the 15 writes and cleared after them (one segment).
//! - `writev`: the 15 pieces as one vectored write, Nagle on (one segment).
//!
//! The server sets no option (as in the paper). The reply is not a constant: it is a
//! 16-bit hash of the 30 bytes the server read ([`reply_for`]), which the client checks
//! against the hash of what it wrote, so bytes lost, reordered or corrupted fail the
//! case instead of passing as a fast run.
//!
//! Figures (per measurement): `total_ms` (first write to last reply, for the messages
//! done), `bytes_per_ms` counted as the paper counts it (the 30 request bytes per message,
//! the replies not included), `segments_per_message` (data segments the client sent per
//! message, counted from the wire: the client's [`crate::env::WireTap`] for
//! `ember-wire`, `tcpi_data_segs_out` for `kernel-tcp`; for `ember-fused`, which sends no
//! segments, the fused deliveries: `tcp:send` probe firings of the client's socket),
//! `messages` (messages done), `us_per_message`, `cpu_us_per_op` (process CPU per
//! message), and for `ember-fused` `unread_stops_per_message`: how often per message the
//! unread-writes limit (`tcp_fusion_rcv_unread_min`, Solaris 10's slow-reader guard)
//! stopped the client, whose 15 writes in a row can outrun the server's reads.
//!
//! Each measurement is bounded by the count and by a deadline (2.5 s quick, 20 s full):
//! `default` costs a delayed-ACK timeout per message, so it stops at the deadline with
//! fewer messages done; `us_per_message` compares modes fairly whatever their counts.

use crate::env::{Conn, Env, Variant};
use crate::measure::cpu_time;
use crate::report::{alternate, Case, Outcome, Report};
use crate::Opts;
use ember_runtime::{Probe, ProbeEvent};
use serde_json::{json, Map};
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The client's modes.
pub const MODES: &[&str] = &["default", "nodelay", "cork", "writev"];
/// The variants `nagle` runs.
pub const VARIANTS: &[Variant] = &[Variant::EmberWire, Variant::EmberFused, Variant::KernelTcp];
/// Writes per message.
pub const PIECES: usize = 15;
/// Bytes per write.
pub const PIECE: usize = 2;
/// Request bytes per message.
pub const REQUEST: usize = PIECES * PIECE;
/// Reply bytes.
pub const REPLY: usize = 2;
/// How long one blocking call may wait before the case is reported as stalled.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How close to the ideal a segment count must be: within 10%. The ideal is exact for
/// every message (15 or 1), and the only extra data segments a client could send here
/// are retransmissions, which a loss-free link or loopback does not cause; 10% leaves
/// room for the odd coalesced or split message without hiding a systematic change
/// (2 segments per message for cork would be 100% off).
const SEG_TOLERANCE: f64 = 0.10;

/// The client's socket options for a mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Default,
    Nodelay,
    Cork,
    Writev,
}

impl Mode {
    /// Parses a mode name.
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "default" => Some(Mode::Default),
            "nodelay" => Some(Mode::Nodelay),
            "cork" => Some(Mode::Cork),
            "writev" => Some(Mode::Writev),
            _ => None,
        }
    }
}

/// Runs the bench.
pub fn run(o: &Opts) -> io::Result<Report> {
    let count: usize = o.size(1_000, 10_000);
    let limit = Duration::from_secs_f64(o.size(2.5, 20.0));
    let rounds = o.rounds(2, 3);
    let cfg = o.env();
    let mut cases: Vec<Case> = Vec::new();
    for v in VARIANTS {
        cases.extend(o.mode_cases(*v, MODES));
    }
    let runs = alternate("nagle", cases, rounds, o.progress, |c, _| {
        let mode = c
            .mode
            .as_deref()
            .and_then(Mode::parse)
            .ok_or_else(|| io::Error::other("nagle case without a mode"))?;
        let mut env = Env::new(c.variant, &cfg)?;
        messages(&mut env, mode, count, limit)
    });
    let mut params = Map::new();
    params.insert("rounds".into(), json!(rounds));
    params.insert("messages".into(), json!(count));
    params.insert("deadline_s".into(), json!(limit.as_secs_f64()));
    params.insert("writes_per_message".into(), json!(PIECES));
    params.insert("write_size".into(), json!(PIECE));
    params.insert("mtu".into(), json!(cfg.mtu));
    let mut r = Report::new("nagle", params, runs);
    checks(&mut r);
    r.notes.push(format!(
        "each measurement stops at {count} messages or after {} s, whichever comes first; \
         `messages` is the number done and total_ms is for those; `default` (Nagle waiting \
         for the delayed ACK) is time-bounded, so the ordering is judged on us_per_message",
        limit.as_secs_f64()
    ));
    r.notes.push(
        "bytes_per_ms counts as the seed does: the 30 request bytes per message (replies \
         not counted)"
            .into(),
    );
    r.notes.push(
        "ember-fused sends no segments: its segments_per_message is the number of fused \
         deliveries per message (tcp:send probe firings of the client socket). Fusion moves \
         each write straight into the peer's receive buffer, so Nagle and TCP_CORK do not \
         apply (15 per message in every mode but writev), and there is no delayed ACK to \
         wait for; its ordering targets are shown as n/a with the figures. \
         unread_stops_per_message: the 15 writes in a row often reach the unread-writes \
         limit (8) before the server has read, and the client waits for that read"
            .into(),
    );
    Ok(r)
}

/// The spec's targets, per ember variant: `default` ≫ `nodelay` (≥ 10× per message),
/// `nodelay` > `cork`, and segments per message 15 / 1 / 1 within [`SEG_TOLERANCE`]; the
/// kernel's same figures go into a note, for reference.
fn checks(r: &mut Report) {
    for v in VARIANTS {
        let l = |m: &str| format!("{}[{m}]", v.name());
        if !v.is_ember() {
            // The targets are ember's; the kernel's figures are the reference.
            let f = |x: Option<f64>| x.map_or("-".to_string(), crate::report::fmt_num);
            let seg = |m: &str| f(r.value(&l(m), "segments_per_message"));
            let note = format!(
                "{} for reference: default/nodelay per message {}, nodelay/cork {}, \
                 segments per message {} / {} / {} (nodelay / cork / writev)",
                v.name(),
                f(r.ratio(&l("default"), &l("nodelay"), "us_per_message")),
                f(r.ratio(&l("nodelay"), &l("cork"), "us_per_message")),
                seg("nodelay"),
                seg("cork"),
                seg("writev"),
            );
            r.notes.push(note);
            continue;
        }
        let fused = *v == Variant::EmberFused;
        let ordered = |r: &mut Report, a: &str, b: &str, factor: f64, rel: &str| {
            let target = format!("{} us_per_message {rel} {factor} × {}", l(a), l(b));
            let ratio = r.ratio(&l(a), &l(b), "us_per_message");
            let (met, detail) = match ratio {
                Some(x) if fused => (
                    None,
                    format!(
                        "ratio {}; not applicable: fused data bypasses Nagle and cork",
                        crate::report::fmt_num(x)
                    ),
                ),
                Some(x) => (
                    Some(if rel == ">" { x > factor } else { x >= factor }),
                    format!("ratio {}", crate::report::fmt_num(x)),
                ),
                None => (None, "not measured in this run".into()),
            };
            r.check(target, met, detail);
        };
        ordered(r, "default", "nodelay", 10.0, "≥");
        ordered(r, "nodelay", "cork", 1.0, ">");
        if fused {
            continue;
        }
        for (m, want) in [("nodelay", 15.0), ("cork", 1.0), ("writev", 1.0)] {
            let target = format!("{} segments_per_message ≈ {want} (±10%)", l(m));
            let (met, detail) = match r.value(&l(m), "segments_per_message") {
                Some(x) => (
                    Some((x - want).abs() <= want * SEG_TOLERANCE),
                    format!("median {}", crate::report::fmt_num(x)),
                ),
                None => (None, "not measured in this run".into()),
            };
            r.check(target, met, detail);
        }
    }
}

/// Request piece `j` of message `i`: two bytes that differ from message to message.
pub fn piece(i: usize, j: usize) -> [u8; PIECE] {
    ((i * PIECES + j) as u16 ^ 0x5a3c).to_be_bytes()
}

/// The server's reply to a request: a 16-bit hash of its 30 bytes.
pub fn reply_for(req: &[u8]) -> [u8; REPLY] {
    let mut h: u16 = 0x1d0f;
    for &b in req {
        h = h.rotate_left(5) ^ u16::from(b);
        h = h.wrapping_mul(0x9e37);
    }
    h.to_be_bytes()
}

/// Counts the data the client sends: a closure giving "segments so far".
fn segment_counter(env: &Env, client: &Conn) -> io::Result<Box<dyn Fn() -> u64>> {
    match env.variant {
        Variant::EmberWire => {
            let tap = env
                .taps
                .as_ref()
                .map(|t| t.0.clone())
                .ok_or_else(|| io::Error::other("ember-wire without taps"))?;
            Ok(Box::new(move || tap.data_segments.load(Ordering::Relaxed)))
        }
        Variant::EmberFused | Variant::EmberLoopback => {
            let local = match client.ember().map(|s| s.local_addr()).transpose()? {
                Some(SocketAddr::V4(a)) => a,
                _ => return Err(io::Error::other("ember client without an IPv4 address")),
            };
            let n = Arc::new(AtomicU64::new(0));
            let n2 = n.clone();
            let stack = env
                .client
                .as_ref()
                .ok_or_else(|| io::Error::other("ember env without a stack"))?;
            stack.subscribe(move |ev: &ProbeEvent| {
                if ev.probe == Probe::TcpSend && ev.local == local && ev.len > 0 {
                    n2.fetch_add(1, Ordering::Relaxed);
                }
            });
            Ok(Box::new(move || n.load(Ordering::Relaxed)))
        }
        Variant::KernelTcp => {
            client
                .kernel_data_segs_out()
                .ok_or_else(|| io::Error::other("no TCP_INFO for the kernel socket"))?;
            let fd = match client {
                Conn::Tcp(s) => s.try_clone()?,
                _ => return Err(io::Error::other("kernel-tcp without a TCP socket")),
            };
            let c = Conn::Tcp(fd);
            Ok(Box::new(move || c.kernel_data_segs_out().unwrap_or(0)))
        }
        v => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("nagle does not count segments on {}", v.name()),
        )),
    }
}

/// The server: reads 30-byte requests and answers each with [`reply_for`] until the
/// client closes. Returns the requests answered.
fn serve(mut s: Conn) -> io::Result<usize> {
    let mut req = [0u8; REQUEST];
    let mut n = 0;
    loop {
        match s.read_exact(&mut req) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(n),
            Err(e) => return Err(e),
        }
        s.write_all(&reply_for(&req))?;
        n += 1;
    }
}

/// One message from the client's side: the request in the mode's way, then the reply,
/// checked.
fn one(c: &mut Conn, mode: Mode, i: usize) -> io::Result<()> {
    let pieces: [[u8; PIECE]; PIECES] = std::array::from_fn(|j| piece(i, j));
    match mode {
        Mode::Writev => {
            let iov: [IoSlice<'_>; PIECES] = std::array::from_fn(|j| IoSlice::new(&pieces[j]));
            let n = c.write_vectored(&iov)?;
            if n < REQUEST {
                // A short vectored write: the rest as plain writes (not expected here).
                let flat = pieces.concat();
                c.write_all(&flat[n..])?;
            }
        }
        _ => {
            if mode == Mode::Cork {
                c.set_cork(true)?;
            }
            for p in &pieces {
                c.write_all(p)?;
            }
            if mode == Mode::Cork {
                c.set_cork(false)?;
            }
        }
    }
    let mut reply = [0u8; REPLY];
    c.read_exact(&mut reply)?;
    let want = reply_for(&pieces.concat());
    if reply != want {
        return Err(io::Error::other(format!(
            "message {i}: reply {reply:02x?}, expected {want:02x?}"
        )));
    }
    Ok(())
}

/// Up to `count` messages (stopping at `limit`) on a fresh pair of `env`.
pub fn messages(env: &mut Env, mode: Mode, count: usize, limit: Duration) -> io::Result<Outcome> {
    let (mut client, server) = env.pair()?;
    client.set_timeouts(Some(CALL_TIMEOUT))?;
    // The server waits for the client's close for as long as the client may run.
    server.set_timeouts(Some(limit + CALL_TIMEOUT))?;
    if mode == Mode::Nodelay {
        client.set_nodelay(true)?;
    }
    let segs = segment_counter(env, &client)?;
    let stops = || {
        env.client
            .as_ref()
            .map(|s| env.kstat(s, "fusion:tcp_fusion_rrw_stops"))
    };
    let srv = std::thread::spawn(move || serve(server));
    let stops0 = stops();
    let seg0 = segs();
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    let deadline = t0 + limit;
    let mut done = 0usize;
    let mut res = Ok(());
    while done < count && Instant::now() < deadline {
        res = one(&mut client, mode, done);
        if res.is_err() {
            break;
        }
        done += 1;
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = (cpu_time() - cpu0).as_secs_f64();
    let sent = segs() - seg0;
    let stopped = stops().zip(stops0).map(|(a, b)| a - b);
    if let Err(e) = res {
        // Wake a server blocked in read: shut the stacks down (ember), or the socket.
        env.shutdown();
        let _ = client.shutdown(Shutdown::Both);
        let _ = srv.join();
        return Err(e);
    }
    client.shutdown(Shutdown::Write)?;
    let answered = srv
        .join()
        .map_err(|_| io::Error::other("server panicked"))??;
    if answered != done {
        return Err(io::Error::other(format!(
            "server answered {answered} of {done} messages"
        )));
    }
    if done == 0 {
        return Err(io::Error::other("no message completed before the deadline"));
    }
    let n = done as f64;
    let total_ms = wall * 1e3;
    let mut metrics = vec![
        ("total_ms", total_ms),
        ("bytes_per_ms", (done * REQUEST) as f64 / total_ms),
        ("segments_per_message", sent as f64 / n),
        ("messages", n),
        ("us_per_message", wall * 1e6 / n),
        ("cpu_us_per_op", cpu * 1e6 / n),
    ];
    if env.variant == Variant::EmberFused {
        if let Some(s) = stopped {
            metrics.push(("unread_stops_per_message", s as f64 / n));
        }
    }
    Ok(Outcome {
        metrics,
        ..Outcome::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::EnvConfig;

    fn metric(o: &Outcome, name: &str) -> f64 {
        o.metrics.iter().find(|(n, _)| *n == name).unwrap().1
    }

    #[test]
    fn replies_depend_on_every_request_byte() {
        let req: Vec<u8> = (0..PIECES).flat_map(|j| piece(3, j)).collect();
        let r = reply_for(&req);
        for k in 0..REQUEST {
            let mut bad = req.clone();
            bad[k] ^= 1;
            assert_ne!(reply_for(&bad), r, "byte {k}");
        }
        // Two pieces of one message exchanged (they differ in their second byte).
        let mut swapped = req.clone();
        swapped.swap(1, 3);
        assert_ne!(swapped, req);
        assert_ne!(reply_for(&swapped), r);
        assert_ne!(piece(0, 1), piece(1, 1));
    }

    #[test]
    fn segments_per_message_match_the_mode_on_the_wire() {
        let cfg = EnvConfig::default();
        for (mode, want) in [
            (Mode::Nodelay, 15.0),
            (Mode::Cork, 1.0),
            (Mode::Writev, 1.0),
        ] {
            let mut env = Env::new(Variant::EmberWire, &cfg).unwrap();
            let o = messages(&mut env, mode, 40, Duration::from_secs(5)).unwrap();
            assert_eq!(metric(&o, "messages"), 40.0);
            let s = metric(&o, "segments_per_message");
            assert!((s - want).abs() <= want * SEG_TOLERANCE, "{mode:?}: {s}");
        }
    }

    #[test]
    fn kernel_and_fused_count_their_sends() {
        let cfg = EnvConfig::default();
        let mut env = Env::new(Variant::KernelTcp, &cfg).unwrap();
        let o = messages(&mut env, Mode::Writev, 30, Duration::from_secs(5)).unwrap();
        let s = metric(&o, "segments_per_message");
        assert!((0.9..=1.1).contains(&s), "kernel writev {s}");
        let mut env = Env::new(Variant::EmberFused, &cfg).unwrap();
        let o = messages(&mut env, Mode::Nodelay, 30, Duration::from_secs(5)).unwrap();
        assert_eq!(metric(&o, "segments_per_message"), 15.0);
        // 30 messages of 30 request bytes.
        let bytes = metric(&o, "bytes_per_ms") * metric(&o, "total_ms");
        assert!((bytes - 900.0).abs() < 1e-6, "{bytes}");
    }

    #[test]
    fn the_deadline_bounds_a_nagle_run() {
        // Nagle against delayed ACK: far fewer than the count within a short deadline.
        let mut env = Env::new(Variant::EmberWire, &EnvConfig::default()).unwrap();
        let t = Instant::now();
        let o = messages(&mut env, Mode::Default, 10_000, Duration::from_millis(400)).unwrap();
        assert!(t.elapsed() < Duration::from_secs(3));
        let n = metric(&o, "messages");
        assert!((1.0..10_000.0).contains(&n), "{n}");
    }

    #[test]
    fn a_wrong_reply_fails_the_case() {
        let mut env = Env::new(Variant::EmberFused, &EnvConfig::default()).unwrap();
        let (mut c, mut s) = env.pair().unwrap();
        c.set_timeouts(Some(Duration::from_secs(5))).unwrap();
        let liar = std::thread::spawn(move || {
            let mut req = [0u8; REQUEST];
            s.read_exact(&mut req).unwrap();
            let mut r = reply_for(&req);
            r[1] ^= 1;
            s.write_all(&r).unwrap();
            s
        });
        let e = one(&mut c, Mode::Nodelay, 0).unwrap_err();
        assert!(e.to_string().contains("expected"), "{e}");
        drop(liar.join().unwrap());
    }
}
