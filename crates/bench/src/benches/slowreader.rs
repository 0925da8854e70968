//! `slowreader`: Solaris 10's TCP_FUSION and slow readers (a fast fused writer can starve
//! a slower reader on the same CPU), the fused writer against a reader 8× slower than it,
//! under the three settings of `tcp_fusion_rcv_unread_min` the Solaris note walks
//! through: 8 (the default: the writer stops after 8 writes the reader has not read), 32
//! (its "increase slow reader tolerance") and 0 (the check off: only the
//! buffers stop the writer). Modes `unread8`, `unread32`, `unread0` of `ember-fused`
//! (set through `EnvConfig.params`, after any `--param`, so the mode's value wins);
//! `kernel-tcp` is the baseline (it has no such limit).
//!
//! # The workload, and what "8× slower" means here
//! The client is the writer: non-blocking, it writes fixed-size messages ([`MSG`] bytes)
//! as fast as it can; on `WouldBlock` (EAGAIN) it counts it and waits for the socket to
//! become writable (an ember [`Poller`], `poll(2)` for the kernel), as a non-blocking
//! application does.
//!
//! The server is the reader: a buffered reader that takes whatever is queued in one
//! read (up to 64 KiB), checks every byte, and then busy-works for [`SLOWER`] × `t_w` per
//! message it read (pro rata for partial messages): it processes data at one eighth of
//! the rate the writer produces it when unobstructed. Before each read it samples the
//! receive queue (`FIONREAD`) for `max_queued_bytes`.
//!
//! `t_w` is measured on the connection itself just before the run ([`calibrate`]): 64
//! times, 8 timed writes of one message, read back by the same thread; `t_w` is the
//! median (`write_ns_cal`). Measured alone, not during the run, so that it is the
//! writer's own speed: during the run a write may find the squeue held by the reader's
//! read and wait for it (`write_ns_p50` shows the run's median), and a reader pacing
//! itself on that would be slower in some modes than in others.
//!
//! The achieved ratio is reported as `slow_factor`: the reader's busy time per message
//! (read calls that found data waiting, plus the work) over `t_w`. It is above 8 by what
//! the read calls cost (and what the machine's other load steals from the reader).
//!
//! # Figures
//! - `writer_stops`: times the writer was stopped. ember: the fusion flow-control
//!   counter (`fusion:tcp_fusion_flowctl`: unread-limit stops plus full-buffer stops);
//!   kernel: the writer's stop episodes (a run of `WouldBlock` before the next write).
//! - `unread_stops` (ember): stops by the unread-writes limit alone
//!   (`fusion:tcp_fusion_rrw_stops`).
//! - `would_block`: `WouldBlock` returns the writer saw.
//! - `max_queued_bytes`: the largest receive queue the reader saw.
//! - `reader_mb_per_s`: bytes read per second (10^6 bytes), first byte to end of file.
//! - `read_ns_per_msg`: the reader's time in read calls (that found data) per message.
//! - `cpu_us_per_op`: process CPU per message, the reader's deliberate busy work included.
//! - `slow_factor`, `write_ns_cal`, `write_ns_p50`, `messages` (written in the run, after
//!   the 512 calibration messages), and for ember `recv_hiwat` (the stack's
//!   `tcp_recv_hiwat`, the receive buffer the reader has: it sets no SO_RCVBUF).
//!
//! Each measurement stops at the count (50,000 messages quick, 500,000 full) or the
//! deadline (2 s quick, 10 s full); the reader then drains what is queued (bounded too)
//! and must see every byte written.

use crate::env::{Conn, Env, EnvConfig, Variant};
use crate::measure::{histogram, record};
use crate::report::{alternate, Case, Outcome, Report};
use crate::Opts;
use ember_runtime::socket::ready;
use ember_runtime::Poller;
use serde_json::{json, Map};
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Bytes per message (a small write, where the unread-writes limit bites first).
pub const MSG: usize = 512;
/// How much slower the reader is than the writer.
pub const SLOWER: u64 = 8;
/// The reader's buffer.
const READ_BUF: usize = 64 * 1024;
/// The data pattern's period (a prime, so that shifts show).
const PERIOD: usize = 251;
/// How long the reader may take to drain after the writer's deadline, and the longest
/// any single blocking read may wait.
const GRACE: Duration = Duration::from_secs(10);
/// The modes: `tcp_fusion_rcv_unread_min` values.
pub const MODES: &[(&str, u32)] = &[("unread8", 8), ("unread32", 32), ("unread0", 0)];

/// The byte at stream offset `i`.
fn byte_at(i: u64) -> u8 {
    (i % PERIOD as u64) as u8
}

/// Runs the bench.
pub fn run(o: &Opts) -> io::Result<Report> {
    let count: u64 = o.size(50_000, 500_000);
    let limit = Duration::from_secs_f64(o.size(2.0, 10.0));
    let rounds = o.rounds(3, 5);
    let cfg = o.env();
    let names: Vec<&str> = MODES.iter().map(|(m, _)| *m).collect();
    let mut cases: Vec<Case> = o.mode_cases(Variant::EmberFused, &names);
    cases.extend(o.cases(&[Variant::KernelTcp]));
    let runs = alternate("slowreader", cases, rounds, o.progress, |c, _| {
        let unread = match c.mode.as_deref() {
            Some(m) => Some(
                MODES
                    .iter()
                    .find(|(n, _)| *n == m)
                    .map(|(_, v)| *v)
                    .ok_or_else(|| io::Error::other(format!("unknown mode {m}")))?,
            ),
            None => None,
        };
        measure(c.variant, &cfg, unread, count, limit)
    });
    let mut params = Map::new();
    params.insert("rounds".into(), json!(rounds));
    params.insert("messages".into(), json!(count));
    params.insert("message_size".into(), json!(MSG));
    params.insert("slower".into(), json!(SLOWER));
    params.insert("deadline_s".into(), json!(limit.as_secs_f64()));
    let mut r = Report::new("slowreader", params, runs);
    checks(&mut r);
    r.notes.push(format!(
        "the writer writes {MSG}-byte messages non-blocking as fast as it can; the reader \
         reads what is queued and busy-works {SLOWER}× the writer's write time per message \
         (write_ns_cal, measured alone before the run); slow_factor is the achieved ratio \
         of the reader's busy time per message to write_ns_cal; write_ns_p50 is the \
         writer's median write during the run"
    ));
    r.notes.push(
        "writer_stops: ember's fusion flow-control counter (unread-limit and full-buffer \
         stops; unread_stops is the unread-limit part); kernel-tcp: the writer's stop \
         episodes (runs of WouldBlock)"
            .into(),
    );
    r.notes.push(format!(
        "each measurement stops at {count} messages or after {} s; `messages` is the \
         number written (and read back, every byte checked)",
        limit.as_secs_f64()
    ));
    Ok(r)
}

/// Every round's value of a metric of a case.
fn per_round(r: &Report, label: &str, metric: &str) -> Option<Vec<f64>> {
    let run = r.run(label)?;
    let v: Vec<f64> = run
        .rounds
        .iter()
        .filter_map(|m| m.iter().find(|(n, _)| *n == metric).map(|(_, x)| *x))
        .collect();
    (!v.is_empty()).then_some(v)
}

fn checks(r: &mut Report) {
    let l = |m: &str| format!("{}[{m}]", Variant::EmberFused.name());
    let fmt = |v: &[f64]| {
        v.iter()
            .map(|x| crate::report::fmt_num(*x))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (met, detail) = match per_round(r, &l("unread8"), "unread_stops") {
        Some(v) => (
            Some(v.iter().all(|x| *x > 0.0)),
            format!("unread_stops per round: {}", fmt(&v)),
        ),
        None => (None, "not measured in this run".into()),
    };
    r.check(
        "ember-fused[unread8]: the writer stops (unread-limit stops > 0 in every round)",
        met,
        detail,
    );
    let q = per_round(r, &l("unread8"), "max_queued_bytes");
    let h = per_round(r, &l("unread8"), "recv_hiwat");
    let (met, detail) = match (q, h) {
        (Some(q), Some(h)) => (
            Some(q.iter().zip(&h).all(|(q, h)| q <= h)),
            format!(
                "max_queued_bytes per round: {}; tcp_recv_hiwat {}",
                fmt(&q),
                fmt(&h[..1])
            ),
        ),
        _ => (None, "not measured in this run".into()),
    };
    r.check(
        "ember-fused[unread8]: queued bytes ≤ the receive buffer (tcp_recv_hiwat)",
        met,
        detail,
    );
    let (met, detail) = match per_round(r, &l("unread0"), "unread_stops") {
        Some(v) => (
            Some(v.iter().all(|x| *x == 0.0)),
            format!("unread_stops per round: {}", fmt(&v)),
        ),
        None => (None, "not measured in this run".into()),
    };
    r.check(
        "ember-fused[unread0]: the writer never stops for the count (unread-limit stops = 0)",
        met,
        detail,
    );
}

/// Waits until a socket is writable (or the timeout passes).
enum Waiter {
    Ember(Poller),
    Kernel(libc::c_int),
}

impl Waiter {
    fn new(c: &Conn) -> io::Result<Waiter> {
        match c {
            Conn::Ember(s) => {
                let p = Poller::new();
                p.add_stream(s, 0, ready::WRITE | ready::ERROR | ready::HUP)?;
                Ok(Waiter::Ember(p))
            }
            Conn::Tcp(s) => Ok(Waiter::Kernel(s.as_raw_fd())),
            Conn::Unix(s) => Ok(Waiter::Kernel(s.as_raw_fd())),
        }
    }

    /// Whether the socket became writable within `t`.
    fn wait(&self, t: Duration) -> io::Result<bool> {
        match self {
            Waiter::Ember(p) => {
                let mut ev = Vec::new();
                Ok(p.wait(&mut ev, Some(t))? > 0)
            }
            Waiter::Kernel(fd) => poll_out(*fd, t),
        }
    }
}

/// `poll(2)` for POLLOUT on one descriptor.
fn poll_out(fd: libc::c_int, t: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    let ms = t.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `p` is one live pollfd and the count passed is 1; poll only writes its
    // `revents`. The descriptor is owned by the caller's socket for the whole call.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    match r {
        0 => Ok(false),
        n if n > 0 => Ok(p.revents & (libc::POLLOUT | libc::POLLERR | libc::POLLHUP) != 0),
        _ => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            }
        }
    }
}

/// What the reader saw.
struct ReadSide {
    bytes: u64,
    max_queued: usize,
    /// Read calls that found data waiting, plus the work.
    busy: Duration,
    /// The read calls alone.
    reading: Duration,
    elapsed: Duration,
}

/// The slow reader: reads until end of file (or `until`), checks every byte (the stream
/// continues at offset `off`), works [`SLOWER`] × `t_w` ns per message read.
fn slow_read(mut s: Conn, t_w: u64, mut off: u64, until: Instant) -> io::Result<ReadSide> {
    let mut buf = vec![0u8; READ_BUF];
    let pattern = stream_bytes(0, PERIOD + READ_BUF);
    let start = off;
    let mut max_queued = 0usize;
    let mut busy = Duration::ZERO;
    let mut reading = Duration::ZERO;
    let mut first: Option<Instant> = None;
    loop {
        if Instant::now() > until {
            return Err(io::Error::other(format!(
                "the reader had not reached end of file by its deadline ({off} bytes read)"
            )));
        }
        let queued = s.recv_queued()?;
        max_queued = max_queued.max(queued);
        let t = Instant::now();
        let n = match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if queued > 0 {
            let d = t.elapsed();
            busy += d;
            reading += d;
        }
        first.get_or_insert(t);
        let w = Instant::now();
        let p = (off % PERIOD as u64) as usize;
        if buf[..n] != pattern[p..p + n] {
            let k = (0..n).find(|k| buf[*k] != pattern[p + k]).unwrap_or(0);
            return Err(io::Error::other(format!(
                "byte {} is {}, expected {}",
                off + k as u64,
                buf[k],
                pattern[p + k]
            )));
        }
        off += n as u64;
        let work = Duration::from_nanos(SLOWER * t_w * n as u64 / MSG as u64);
        while w.elapsed() < work {
            std::hint::spin_loop();
        }
        busy += w.elapsed();
    }
    let elapsed = first.map_or(Duration::ZERO, |f| f.elapsed());
    Ok(ReadSide {
        bytes: off - start,
        max_queued,
        busy,
        reading,
        elapsed,
    })
}

/// What the writer saw.
struct WriteSide {
    bytes: u64,
    /// Median time of a successful write in the run, ns.
    p50_ns: u64,
    would_block: u64,
    episodes: u64,
}

/// `len` bytes of the stream from offset `off`.
fn stream_bytes(off: u64, len: usize) -> Vec<u8> {
    (off..off + len as u64).map(byte_at).collect()
}

/// The writer's unobstructed write time: [`CAL_ROUNDS`] times, [`CAL_WRITES`] timed
/// non-blocking writes of one message each, then the same thread reads them back (so no
/// thread contends and no limit is reached: every `tcp_fusion_rcv_unread_min` the bench
/// uses is 0 or at least [`CAL_WRITES`]). Returns the median write time (ns) and the
/// bytes written.
fn calibrate(w: &mut Conn, r: &mut Conn) -> io::Result<(u64, u64)> {
    let mut h = histogram();
    let mut off = 0u64;
    let mut back = vec![0u8; CAL_WRITES * MSG];
    for _ in 0..CAL_ROUNDS {
        for _ in 0..CAL_WRITES {
            let msg = stream_bytes(off, MSG);
            let t = Instant::now();
            let n = w.write(&msg)?;
            record(&mut h, t.elapsed());
            if n != MSG {
                return Err(io::Error::other(format!(
                    "calibration: a {MSG}-byte write took {n}"
                )));
            }
            off += MSG as u64;
        }
        r.read_exact(&mut back)?;
    }
    Ok((h.value_at_quantile(0.5).max(1), off))
}

/// Timed writes per calibration round.
const CAL_WRITES: usize = 8;
/// Calibration rounds.
const CAL_ROUNDS: usize = 64;

/// The fast writer: non-blocking, `count` messages or until `deadline`; the stream
/// continues at offset `start`.
fn fast_write(c: &mut Conn, start: u64, count: u64, deadline: Instant) -> io::Result<WriteSide> {
    let pattern: Vec<u8> = (0..(PERIOD + MSG) as u64).map(byte_at).collect();
    let waiter = Waiter::new(c)?;
    let mut h = histogram();
    let total = count * MSG as u64;
    let mut sent = 0u64;
    let mut would_block = 0u64;
    let mut episodes = 0u64;
    let mut stopped = false;
    while sent < total && Instant::now() < deadline {
        // The rest of the current message, its bytes as the stream offset says.
        let left = MSG - (sent % MSG as u64) as usize;
        let p = ((start + sent) % PERIOD as u64) as usize;
        let t = Instant::now();
        match c.write(&pattern[p..p + left]) {
            Ok(n) => {
                record(&mut h, t.elapsed());
                sent += n as u64;
                stopped = false;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                would_block += 1;
                if !stopped {
                    episodes += 1;
                    stopped = true;
                }
                waiter.wait(Duration::from_millis(100))?;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(WriteSide {
        bytes: sent,
        p50_ns: h.value_at_quantile(0.5),
        would_block,
        episodes,
    })
}

/// One measurement: a fresh pair, calibration, then the fast writer on this thread and
/// the slow reader on another. `unread` sets `tcp_fusion_rcv_unread_min` (ember).
pub fn measure(
    v: Variant,
    cfg: &EnvConfig,
    unread: Option<u32>,
    count: u64,
    limit: Duration,
) -> io::Result<Outcome> {
    let mut cfg = cfg.clone();
    if let Some(u) = unread {
        cfg.params
            .push(("tcp_fusion_rcv_unread_min".into(), u.to_string()));
    }
    let mut env = Env::new(v, &cfg)?;
    let (mut writer, mut reader) = env.pair()?;
    if let Some(s) = writer.ember() {
        if v == Variant::EmberFused && !s.is_fused()? {
            return Err(io::Error::other("the ember-fused pair did not fuse"));
        }
    }
    reader.set_timeouts(Some(GRACE))?;
    writer.set_nonblocking(true)?;
    let (t_w, start) = calibrate(&mut writer, &mut reader)?;
    let stack = env.client.clone();
    let stat = |name: &str| stack.as_ref().map_or(0, |s| env.kstat(s, name));
    let hiwat = stack.as_ref().map(|s| s.params().tcp_recv_hiwat);
    let flowctl0 = stat("fusion:tcp_fusion_flowctl");
    let rrw0 = stat("fusion:tcp_fusion_rrw_stops");
    let deadline = Instant::now() + limit;
    let cpu0 = crate::measure::cpu_time();
    let rd = std::thread::spawn(move || slow_read(reader, t_w, start, deadline + GRACE));
    let w = fast_write(&mut writer, start, count, deadline);
    let flowctl = stat("fusion:tcp_fusion_flowctl") - flowctl0;
    let rrw = stat("fusion:tcp_fusion_rrw_stops") - rrw0;
    let w = match w.and_then(|w| writer.shutdown(Shutdown::Write).map(|_| w)) {
        Ok(w) => w,
        Err(e) => {
            env.shutdown();
            let _ = writer.shutdown(Shutdown::Both);
            let _ = rd.join();
            return Err(e);
        }
    };
    let r = rd
        .join()
        .map_err(|_| io::Error::other("reader panicked"))??;
    let cpu = (crate::measure::cpu_time() - cpu0).as_secs_f64();
    drop(writer);
    if r.bytes != w.bytes {
        return Err(io::Error::other(format!(
            "{} bytes written, {} read",
            w.bytes, r.bytes
        )));
    }
    if w.bytes == 0 {
        return Err(io::Error::other("nothing was written"));
    }
    let msgs = w.bytes as f64 / MSG as f64;
    let mut m = vec![
        (
            "writer_stops",
            if v.is_ember() { flowctl } else { w.episodes } as f64,
        ),
        ("would_block", w.would_block as f64),
        ("max_queued_bytes", r.max_queued as f64),
        (
            "reader_mb_per_s",
            r.bytes as f64 / r.elapsed.as_secs_f64().max(1e-9) / 1e6,
        ),
        ("slow_factor", r.busy.as_nanos() as f64 / msgs / t_w as f64),
        ("read_ns_per_msg", r.reading.as_nanos() as f64 / msgs),
        ("write_ns_cal", t_w as f64),
        ("write_ns_p50", w.p50_ns as f64),
        ("messages", msgs),
        // Both threads, the reader's deliberate busy work included.
        ("cpu_us_per_op", cpu * 1e6 / msgs),
    ];
    if let Some(h) = hiwat {
        m.insert(1, ("unread_stops", rrw as f64));
        m.push(("recv_hiwat", f64::from(h)));
    }
    Ok(Outcome {
        metrics: m,
        ..Outcome::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metric(o: &Outcome, name: &str) -> f64 {
        o.metrics.iter().find(|(n, _)| *n == name).unwrap().1
    }

    #[test]
    fn the_unread_limit_stops_the_writer_and_zero_does_not() {
        let cfg = EnvConfig::default();
        let o = measure(
            Variant::EmberFused,
            &cfg,
            Some(8),
            3_000,
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(metric(&o, "messages"), 3_000.0);
        assert!(metric(&o, "unread_stops") > 0.0);
        assert!(metric(&o, "would_block") >= metric(&o, "unread_stops"));
        assert!(metric(&o, "max_queued_bytes") <= metric(&o, "recv_hiwat"));
        let s = metric(&o, "slow_factor");
        assert!(s >= 4.0, "slow factor {s}");
        let o = measure(
            Variant::EmberFused,
            &cfg,
            Some(0),
            3_000,
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(metric(&o, "unread_stops"), 0.0);
        assert!(metric(&o, "max_queued_bytes") > (8 * MSG) as f64);
    }

    #[test]
    fn the_kernel_baseline_delivers_every_byte() {
        let o = measure(
            Variant::KernelTcp,
            &EnvConfig::default(),
            None,
            2_000,
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(metric(&o, "messages"), 2_000.0);
        assert!(metric(&o, "reader_mb_per_s") > 0.0);
        assert!(o.metrics.iter().all(|(n, _)| *n != "unread_stops"));
    }

    #[test]
    fn poll_out_reports_a_writable_socket_and_a_bad_descriptor() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let _s = l.accept().unwrap();
        assert!(poll_out(c.as_raw_fd(), Duration::from_millis(100)).unwrap());
        // A negative descriptor is ignored by poll(2): the wait times out.
        assert!(!poll_out(-1, Duration::from_millis(10)).unwrap());
    }

    #[test]
    fn the_reader_refuses_a_wrong_byte() {
        let mut env = Env::new(Variant::EmberFused, &EnvConfig::default()).unwrap();
        let (mut w, r) = env.pair().unwrap();
        let mut data: Vec<u8> = (0..1000).map(byte_at).collect();
        data[700] ^= 0x40;
        w.write_all(&data).unwrap();
        w.shutdown(Shutdown::Write).unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        let e = slow_read(r, 100, 0, until)
            .err()
            .expect("a wrong byte is an error");
        assert!(e.to_string().contains("byte 700"), "{e}");
    }
}
