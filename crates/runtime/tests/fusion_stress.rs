//! Stress of random interleavings on fused pairs (fireengine.md, TCP Fusion,
//! "Robustness"): Solaris 10 once panicked in `tcp_fuse_rcv_drain` when a local user
//! raced closes against reads. Here both ends of many fused pairs run random sequences
//! of write / read (blocking with a timeout, or non-blocking) / shutdown(Write) /
//! shutdown(Read) / close / linger-0 close at once; half the ends also have a second
//! thread that only reads, so closes, shutdowns and linger changes race reads on the same
//! end as well as on the other one.
//!
//! Checked: no panic and no hang (every blocking call has a timeout; the whole batch a
//! deadline); each direction's received bytes are a prefix of what the writer wrote
//! successfully (nothing lost in the middle, duplicated or reordered), and a clean EOF
//! means everything arrived (unless that end's own write was told of a reset first: as on
//! Linux the reset is reported once, and reads see end of file after it); once every
//! handle is gone, only TIME_WAIT connections are left and nothing is fused.
//!
//! The seed is printed on failure; `EMBER_FUSION_STRESS_SEED=<u64>` replays it,
//! `EMBER_FUSION_STRESS_BATCHES=<n>` runs more batches and `EMBER_FUSION_STRESS_OPS=<n>`
//! longer sequences (the summary printed at the end counts the socket calls made).

use ember_core::tcp::State;
use ember_runtime::{Stack, TcpListener, TcpStream};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

/// Pairs running at once in one batch.
const PAIRS_PER_BATCH: usize = 8;
/// Batches (200 pairs in all by default).
const BATCHES: usize = 25;
/// Timeout of one blocking read or write inside the random sequences.
const OP_TIMEOUT: Duration = Duration::from_millis(10);
/// A batch that does not finish within this is a hang.
const BATCH_DEADLINE: Duration = Duration::from_secs(60);
/// Bound of setup calls (connect, accept).
const T: Duration = Duration::from_secs(10);

mod common;
use common::Rng;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Longest random sequence per end (`EMBER_FUSION_STRESS_OPS`, default 40).
fn max_ops() -> usize {
    env_u64("EMBER_FUSION_STRESS_OPS").map_or(40, |n| n.max(2) as usize)
}

/// What one end's reader saw.
#[derive(Debug, Default)]
struct ReadLog {
    read: Vec<u8>,
    /// `read` returned 0 without a shutdown(Read) of our own: the peer's FIN.
    clean_eof: bool,
    error: Option<ErrorKind>,
    /// read() calls made.
    calls: usize,
}

/// What one end's main thread did.
#[derive(Debug, Default)]
struct MainLog {
    wrote: Vec<u8>,
    /// The main thread's reads (ends without a dedicated reader).
    reads: ReadLog,
    trace: Vec<String>,
    /// Operations started (the random sequence's steps).
    ops: usize,
    /// A write on this end reported the connection reset. As on Linux the error is
    /// reported once, to whichever call comes first, and reads see end of file after it:
    /// an EOF read on this end is then not a clean one.
    reset_seen: bool,
}

/// Flags an end's main thread shares with its dedicated reader.
#[derive(Default)]
struct EndFlags {
    /// shutdown(Read) was called (set before the call).
    rd_shut: AtomicBool,
    /// The main thread finished (dropped its handle).
    main_done: AtomicBool,
    /// The main thread shut down writing and wants to drain to EOF.
    graceful: AtomicBool,
}

const READ_ERRORS: &[ErrorKind] = &[
    ErrorKind::ConnectionReset,
    ErrorKind::ConnectionAborted,
    ErrorKind::NotConnected,
];
const WRITE_ERRORS: &[ErrorKind] = &[
    ErrorKind::BrokenPipe,
    ErrorKind::ConnectionReset,
    ErrorKind::ConnectionAborted,
    ErrorKind::NotConnected,
];

/// One read into `log`; returns false when reading is over (EOF or error).
fn read_once(s: &TcpStream, g: &mut Rng, flags: &EndFlags, log: &mut ReadLog) -> bool {
    let mut buf = vec![0u8; g.len()];
    log.calls += 1;
    match (&*s).read(&mut buf) {
        Ok(0) => {
            if !flags.rd_shut.load(Ordering::SeqCst) && log.error.is_none() {
                log.clean_eof = true;
            }
            false
        }
        Ok(n) => {
            log.read.extend_from_slice(&buf[..n]);
            true
        }
        Err(e) if e.kind() == ErrorKind::WouldBlock => true,
        Err(e) => {
            assert!(
                READ_ERRORS.contains(&e.kind()),
                "unexpected read error {:?}: {e}",
                e.kind()
            );
            log.error = Some(e.kind());
            false
        }
    }
}

/// The dedicated reader of an end: blocking reads (with `OP_TIMEOUT`) until EOF, an
/// error, or its main thread is done (and, if that one finished gracefully, EOF or
/// half a second more).
fn run_reader(s: Arc<TcpStream>, mut g: Rng, flags: Arc<EndFlags>) -> ReadLog {
    let mut log = ReadLog::default();
    let mut done_at: Option<Instant> = None;
    let hard = Instant::now() + Duration::from_secs(5);
    while read_once(&s, &mut g, &flags, &mut log) {
        if flags.main_done.load(Ordering::SeqCst) {
            let t = *done_at.get_or_insert_with(Instant::now);
            if !flags.graceful.load(Ordering::SeqCst) || t.elapsed() > Duration::from_millis(500) {
                break;
            }
        }
        if Instant::now() > hard {
            break;
        }
    }
    log
}

/// The main thread of an end: a random sequence of operations.
fn run_main(s: Arc<TcpStream>, mut g: Rng, flags: Arc<EndFlags>, dedicated: bool) -> MainLog {
    let mut log = MainLog::default();
    let ops = g.range(1, max_ops());
    let mut linger0 = false;
    for _ in 0..ops {
        log.ops += 1;
        // Longer sequences (`EMBER_FUSION_STRESS_OPS` above 40) make shutdowns, closes
        // and pauses rarer in proportion, so that they do run longer.
        let spread = max_ops().div_ceil(40);
        let op = match g.range(0, 100 * spread - 1) {
            op if op >= 100 => op % 70,
            op => op,
        };
        // Blocking (with OP_TIMEOUT) or not; an end with a dedicated reader stays
        // blocking (the mode is per socket and the reader must not spin).
        let nb = !dedicated && g.chance(40);
        s.set_nonblocking(nb).unwrap();
        match op {
            0..=39 => {
                let n = g.len();
                let data = g.bytes(n);
                match (&*s).write(&data) {
                    Ok(0) => panic!("write of {} bytes returned 0", data.len()),
                    Ok(n) => {
                        log.wrote.extend_from_slice(&data[..n]);
                        log.trace
                            .push(format!("write {}{} -> {n}", data.len(), nb_s(nb)));
                    }
                    Err(e) => {
                        assert!(
                            e.kind() == ErrorKind::WouldBlock || WRITE_ERRORS.contains(&e.kind()),
                            "unexpected write error {:?}: {e}",
                            e.kind()
                        );
                        if matches!(
                            e.kind(),
                            ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
                        ) {
                            log.reset_seen = true;
                        }
                        log.trace.push(format!(
                            "write {}{} -> {:?}",
                            data.len(),
                            nb_s(nb),
                            e.kind()
                        ));
                    }
                }
            }
            40..=69 => {
                if dedicated {
                    // Reading is the other thread's job here: peek instead.
                    let mut b = [0u8; 512];
                    let r = s.peek(&mut b).map_err(|e| e.kind());
                    log.trace.push(format!("peek -> {r:?}"));
                } else {
                    let before = log.reads.read.len();
                    read_once(&s, &mut g, &flags, &mut log.reads);
                    log.trace.push(format!(
                        "read{} -> {} (eof {}, err {:?})",
                        nb_s(nb),
                        log.reads.read.len() - before,
                        log.reads.clean_eof,
                        log.reads.error
                    ));
                }
            }
            70..=72 => {
                let r = s.shutdown(Shutdown::Write).map_err(|e| e.kind());
                log.trace.push(format!("shutdown(Write) -> {r:?}"));
            }
            73..=74 => {
                flags.rd_shut.store(true, Ordering::SeqCst);
                let r = s.shutdown(Shutdown::Read).map_err(|e| e.kind());
                log.trace.push(format!("shutdown(Read) -> {r:?}"));
            }
            75..=76 => {
                log.trace.push("close".into());
                break;
            }
            77..=78 => {
                s.set_linger(Some(Duration::ZERO)).unwrap();
                linger0 = true;
                log.trace.push("linger0 close".into());
                break;
            }
            79..=80 => {
                // Half-close, drain to EOF, close.
                let r = s.shutdown(Shutdown::Write).map_err(|e| e.kind());
                log.trace
                    .push(format!("graceful: shutdown(Write) -> {r:?}"));
                flags.graceful.store(true, Ordering::SeqCst);
                if !dedicated {
                    s.set_nonblocking(false).unwrap();
                    let dl = Instant::now() + Duration::from_millis(500);
                    let before = log.reads.read.len();
                    while read_once(&s, &mut g, &flags, &mut log.reads) && Instant::now() < dl {}
                    log.trace.push(format!(
                        "graceful: drained {} (eof {}, err {:?})",
                        log.reads.read.len() - before,
                        log.reads.clean_eof,
                        log.reads.error
                    ));
                }
                break;
            }
            _ => {
                // A pause: very short or up to 2 ms (a sleep, never a yield loop).
                let us = if g.chance(50) {
                    1
                } else {
                    g.range(1, 2000) as u64
                };
                thread::sleep(Duration::from_micros(us));
            }
        }
    }
    if !linger0 && g.chance(10) {
        // Sometimes linger 0 is set but a normal-looking drop happens from the other
        // thread (dedicated reader) later.
        s.set_linger(Some(Duration::ZERO)).unwrap();
        log.trace.push("linger0 (late)".into());
    }
    drop(s);
    flags.main_done.store(true, Ordering::SeqCst);
    log
}

fn nb_s(nb: bool) -> &'static str {
    if nb {
        " nb"
    } else {
        ""
    }
}

enum Done {
    Main(usize, usize, MainLog),
    Reader(usize, usize, ReadLog),
    Panic(usize, usize, &'static str, String),
}

fn panic_msg(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic".into()
    }
}

/// Checks one direction: `wrote` by one end, `reads` by the other; `reset` says the
/// reading end's writes saw the reset (so its reads' EOF may follow lost data).
fn check_dir(what: &str, wrote: &[u8], reads: &ReadLog, reset: bool) -> Result<(), String> {
    let r = &reads.read;
    if r.len() > wrote.len() {
        return Err(format!(
            "{what}: read {} bytes, only {} written",
            r.len(),
            wrote.len()
        ));
    }
    if let Some(i) = r.iter().zip(wrote).position(|(a, b)| a != b) {
        return Err(format!(
            "{what}: byte {i} of {} read differs from what was written ({} written)",
            r.len(),
            wrote.len()
        ));
    }
    if reads.clean_eof && !reset && r.len() != wrote.len() {
        return Err(format!(
            "{what}: clean EOF after {} of {} bytes written",
            r.len(),
            wrote.len()
        ));
    }
    Ok(())
}

/// What the batches saw, for the summary line (the stress is only as good as the
/// interleavings it reaches).
#[derive(Debug, Default)]
struct Summary {
    /// Socket calls made: the main threads' random steps and every read() of the
    /// dedicated readers.
    ops: usize,
    directions: usize,
    clean_eofs: usize,
    read_errors: usize,
    complete: usize,
    bytes_written: usize,
    bytes_read: usize,
}

fn run_batch(st: &Stack, seed: u64, batch: usize, sum: &mut Summary) -> Result<(), String> {
    let mut g = Rng(seed ^ (batch as u64).wrapping_mul(0xA24B_AED4_963E_E407));
    // Vary the tunables per batch: the unread-writes limit (0 = off) and the receive
    // buffer (small ones fill, so writers stop on a full buffer too).
    let unread = [0, 1, 3, 8][g.range(0, 3)];
    let rcvbuf = [8192, 65_536, 1_048_576][g.range(0, 2)];
    st.set_param("tcp_fusion_rcv_unread_min", &unread.to_string())
        .unwrap();
    st.set_param("tcp_recv_hiwat", &rcvbuf.to_string()).unwrap();
    let l = TcpListener::bind(st, "127.0.0.1:0").map_err(|e| e.to_string())?;
    l.set_accept_timeout(Some(T)).unwrap();
    let addr = match l.local_addr().unwrap() {
        SocketAddr::V4(a) => a,
        SocketAddr::V6(_) => unreachable!(),
    };
    let (tx, rx) = mpsc::channel::<Done>();
    let mut expected = 0;
    let mut handles = Vec::new();
    let mut dedicated = [[false; 2]; PAIRS_PER_BATCH];
    for (p, ded) in dedicated.iter_mut().enumerate() {
        let c = TcpStream::connect_timeout(st, addr, T).map_err(|e| format!("connect: {e}"))?;
        let (s, peer) = l.accept().map_err(|e| format!("accept: {e}"))?;
        if peer != c.local_addr().unwrap() {
            return Err("accepted the wrong connection".into());
        }
        if !c.is_fused().unwrap() || !s.is_fused().unwrap() {
            return Err(format!("pair {p} did not fuse"));
        }
        for (e, end) in [c, s].into_iter().enumerate() {
            end.set_read_timeout(Some(OP_TIMEOUT)).unwrap();
            end.set_write_timeout(Some(OP_TIMEOUT)).unwrap();
            let end = Arc::new(end);
            let flags = Arc::new(EndFlags::default());
            ded[e] = g.chance(50);
            if ded[e] {
                let (end, flags, tx, rg) = (end.clone(), flags.clone(), tx.clone(), Rng(g.next()));
                expected += 1;
                handles.push(thread::spawn(move || {
                    let r = catch_unwind(AssertUnwindSafe(|| run_reader(end, rg, flags)));
                    let _ = tx.send(match r {
                        Ok(log) => Done::Reader(p, e, log),
                        Err(x) => Done::Panic(p, e, "reader", panic_msg(x)),
                    });
                }));
            }
            let (tx, mg, d) = (tx.clone(), Rng(g.next()), ded[e]);
            expected += 1;
            handles.push(thread::spawn(move || {
                let r = catch_unwind(AssertUnwindSafe(|| run_main(end, mg, flags, d)));
                let _ = tx.send(match r {
                    Ok(log) => Done::Main(p, e, log),
                    Err(x) => Done::Panic(p, e, "main", panic_msg(x)),
                });
            }));
        }
    }
    drop(tx);
    let mut mains: Vec<[Option<MainLog>; 2]> = (0..PAIRS_PER_BATCH).map(|_| [None, None]).collect();
    let mut readers: Vec<[Option<ReadLog>; 2]> =
        (0..PAIRS_PER_BATCH).map(|_| [None, None]).collect();
    let deadline = Instant::now() + BATCH_DEADLINE;
    for _ in 0..expected {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Done::Main(p, e, log)) => mains[p][e] = Some(log),
            Ok(Done::Reader(p, e, log)) => readers[p][e] = Some(log),
            Ok(Done::Panic(p, e, who, msg)) => {
                return Err(format!("pair {p} end {e} {who} thread panicked: {msg}"))
            }
            Err(_) => {
                return Err(format!(
                    "hang: a thread did not finish in {BATCH_DEADLINE:?}"
                ))
            }
        }
    }
    for h in handles {
        h.join().map_err(|_| "thread panicked".to_string())?;
    }
    drop(l);
    // Check the streams.
    for p in 0..PAIRS_PER_BATCH {
        let m = [mains[p][0].take().unwrap(), mains[p][1].take().unwrap()];
        let r0 = if dedicated[p][0] {
            readers[p][0].as_ref().unwrap()
        } else {
            &m[0].reads
        };
        let r1 = if dedicated[p][1] {
            readers[p][1].as_ref().unwrap()
        } else {
            &m[1].reads
        };
        sum.ops += m[0].ops + m[1].ops;
        for d in 0..2 {
            if dedicated[p][d] {
                sum.ops += readers[p][d].as_ref().map_or(0, |r| r.calls);
            }
        }
        for (w, r) in [(&m[0].wrote, r1), (&m[1].wrote, r0)] {
            sum.directions += 1;
            sum.clean_eofs += usize::from(r.clean_eof);
            sum.read_errors += usize::from(r.error.is_some());
            sum.complete += usize::from(r.read.len() == w.len() && !w.is_empty());
            sum.bytes_written += w.len();
            sum.bytes_read += r.read.len();
        }
        let res = check_dir("client→server", &m[0].wrote, r1, m[1].reset_seen)
            .and_then(|()| check_dir("server→client", &m[1].wrote, r0, m[0].reset_seen));
        if let Err(e) = res {
            return Err(format!(
                "pair {p}: {e}\n  client (dedicated reader {}): {:?}\n  server (dedicated reader {}): {:?}\n  client reads: {} bytes eof {} err {:?}\n  server reads: {} bytes eof {} err {:?}",
                dedicated[p][0],
                m[0].trace,
                dedicated[p][1],
                m[1].trace,
                r0.read.len(),
                r0.clean_eof,
                r0.error,
                r1.read.len(),
                r1.clean_eof,
                r1.error,
            ));
        }
    }
    // Every handle is gone: only TIME_WAIT may remain, nothing fused.
    let dl = Instant::now() + Duration::from_secs(5);
    loop {
        let ns = st.netstat();
        let left: Vec<_> = ns
            .iter()
            .filter(|(i, _, _)| i.state != State::TimeWait)
            .map(|(i, sq, fused)| {
                format!(
                    "{}→{} {:?} sq{sq} fused={fused}",
                    i.local, i.remote, i.state
                )
            })
            .collect();
        if left.is_empty() {
            break;
        }
        if Instant::now() > dl {
            return Err(format!(
                "connections left after every handle was dropped: {left:?}"
            ));
        }
        thread::sleep(Duration::from_millis(5));
    }
    let now = st.stats().tcp.fusion_fused_now;
    if now != 0 {
        return Err(format!("fusion_fused_now = {now} with no connection left"));
    }
    Ok(())
}

fn tunables(st: &Stack) -> String {
    let p = st.params();
    format!(
        "tcp_fusion_rcv_unread_min={} tcp_recv_hiwat={}",
        p.tcp_fusion_rcv_unread_min, p.tcp_recv_hiwat
    )
}

#[test]
fn random_interleavings_on_fused_pairs() {
    let seed = env_u64("EMBER_FUSION_STRESS_SEED").unwrap_or(0x5eed_f05e_2024_0001);
    let batches = env_u64("EMBER_FUSION_STRESS_BATCHES").map_or(BATCHES, |b| b as usize);
    let st = Stack::builder().squeues(2).build().expect("stack");
    let t0 = Instant::now();
    let mut sum = Summary::default();
    for b in 0..batches {
        if let Err(e) = run_batch(&st, seed, b, &mut sum) {
            panic!(
                "seed {seed:#x} (EMBER_FUSION_STRESS_SEED={seed}), batch {b} ({}): {e}",
                tunables(&st)
            );
        }
    }
    let s = st.stats().tcp;
    eprintln!("{sum:?}");
    eprintln!(
        "{} pairs in {:?}: fused_total {} aborted {} flowctl {} rrw_stops {} bytes {} time_wait {}",
        batches * PAIRS_PER_BATCH,
        t0.elapsed(),
        s.fusion_fused_total,
        s.fusion_aborted,
        s.fusion_flowctl,
        s.fusion_rrw_stops,
        s.fusion_bytes,
        st.netstat().len(),
    );
    assert_eq!(s.fusion_fused_total, (batches * PAIRS_PER_BATCH) as u64);
    st.shutdown();
}

// -------------------------------------------------------------------------------------
// Wake-ups: a parked reader or writer must be woken by whatever the other side does,
// however that races with its parking. The random sequences above use short timeouts,
// which would hide a lost wake-up; here every wait has a long one, so a lost wake-up
// fails the test.
// -------------------------------------------------------------------------------------

/// What the other side does to a parked end.
#[derive(Debug, Clone, Copy)]
enum Action {
    /// Peer writes (wakes a reader) or reads (wakes a writer).
    Serve,
    PeerShutdownWrite,
    PeerClose,
    PeerLinger0,
    /// shutdown(Read) of the parked end itself, from another thread (wakes a reader).
    OwnShutdownRead,
}

/// The actions of the random rounds. `OwnShutdownRead` is left out: it has its own
/// (ignored) test below, because ember does not wake a parked reader on it.
const ACTIONS: [Action; 4] = [
    Action::Serve,
    Action::PeerShutdownWrite,
    Action::PeerClose,
    Action::PeerLinger0,
];

fn wake_round(
    st: &Stack,
    l: &TcpListener,
    g: &mut Rng,
    force: Option<(bool, Action, usize)>,
) -> Result<String, String> {
    let addr = match l.local_addr().unwrap() {
        SocketAddr::V4(a) => a,
        SocketAddr::V6(_) => unreachable!(),
    };
    let unread = [0u32, 8][g.range(0, 1)];
    st.set_param("tcp_fusion_rcv_unread_min", &unread.to_string())
        .unwrap();
    let c = TcpStream::connect_timeout(st, addr, T).map_err(|e| format!("connect: {e}"))?;
    let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
    if !c.is_fused().unwrap() || !s.is_fused().unwrap() {
        return Err("pair did not fuse".into());
    }
    let (x, y) = if g.chance(50) { (c, s) } else { (s, c) };
    for e in [&x, &y] {
        e.set_read_timeout(Some(T)).unwrap();
        e.set_write_timeout(Some(T)).unwrap();
    }
    let mut writer = g.chance(50);
    let mut action = ACTIONS[g.range(0, ACTIONS.len() - 1)];
    let mut delay = g.range(0, 3);
    if let Some(f) = force {
        (writer, action, delay) = f;
    }
    let y_unread = g.chance(30) && !writer;
    if y_unread {
        // Y holds unread data: its close becomes a reset.
        (&x).write_all(b"unread")
            .map_err(|e| format!("pre-write: {e}"))?;
    }
    let mut filled = 0usize;
    if writer {
        // Fill until X is stopped (unread-writes limit or full buffer).
        x.set_nonblocking(true).unwrap();
        loop {
            match (&x).write(&[1u8; 3000]) {
                Ok(n) => filled += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => return Err(format!("fill: {e}")),
            }
            if filled > 1 << 22 {
                return Err("the writer is never stopped".into());
            }
        }
        x.set_nonblocking(false).unwrap();
    }
    let desc = format!(
        "{} parked, action {action:?}, delay {delay}, unread_min {unread}, filled {filled}, y_unread {y_unread}",
        if writer { "writer" } else { "reader" }
    );
    let x = Arc::new(x);
    let xs = x.clone();
    let waiter = thread::spawn(move || {
        let t0 = Instant::now();
        let r = if writer {
            (&*xs).write(&[2u8; 100])
        } else {
            let mut b = [0u8; 64];
            (&*xs).read(&mut b)
        };
        (r.map_err(|e| e.kind()), t0.elapsed())
    });
    match delay {
        0 => {}
        1 => thread::sleep(Duration::from_micros(1)),
        2 => thread::sleep(Duration::from_micros(g.range(1, 300) as u64)),
        _ => thread::sleep(Duration::from_millis(2)),
    }
    let mut y = Some(y);
    match action {
        Action::Serve => {
            let y = y.as_ref().unwrap();
            if writer {
                let mut b = vec![0u8; 1 << 20];
                let n = (&*y).read(&mut b).map_err(|e| format!("serve read: {e}"))?;
                if n == 0 {
                    return Err("serve read got EOF".into());
                }
            } else {
                (&*y)
                    .write_all(b"data")
                    .map_err(|e| format!("serve write: {e}"))?;
            }
        }
        Action::PeerShutdownWrite => {
            let _ = y.as_ref().unwrap().shutdown(Shutdown::Write);
        }
        Action::PeerClose => drop(y.take()),
        Action::PeerLinger0 => {
            let yy = y.take().unwrap();
            yy.set_linger(Some(Duration::ZERO)).unwrap();
            drop(yy);
        }
        Action::OwnShutdownRead => x.shutdown(Shutdown::Read).unwrap(),
    }
    let (r, waited) = waiter.join().map_err(|_| "waiter panicked".to_string())?;
    let ok = match (writer, action, r) {
        (_, _, Err(ErrorKind::WouldBlock)) => false,
        (true, Action::Serve | Action::PeerShutdownWrite, r) => r.is_ok(),
        (true, _, r) => matches!(
            r,
            Err(ErrorKind::ConnectionReset) | Err(ErrorKind::BrokenPipe)
        ),
        (false, Action::Serve, r) => matches!(r, Ok(n) if n > 0),
        // Closing with unread data (or linger 0) resets (RFC 2525 §2.17, as Linux).
        (false, Action::PeerClose, r) if y_unread => r == Err(ErrorKind::ConnectionReset),
        (false, Action::PeerLinger0, r) => r == Err(ErrorKind::ConnectionReset),
        (false, _, r) => r == Ok(0),
    };
    drop(y);
    drop(x);
    if ok {
        Ok(desc)
    } else {
        Err(format!(
            "{desc}: parked call returned {r:?} after {waited:?}"
        ))
    }
}

#[test]
fn parked_ends_are_woken_by_racing_peers() {
    let seed = env_u64("EMBER_FUSION_STRESS_SEED").unwrap_or(0x3a4e_0f05_0000_0002);
    let rounds = env_u64("EMBER_FUSION_WAKE_ROUNDS").map_or(300, |r| r as usize);
    let st = Stack::builder()
        .squeues(2)
        .param("tcp_recv_hiwat", "16384")
        .unwrap()
        .build()
        .expect("stack");
    let l = TcpListener::bind(&st, "127.0.0.1:0").unwrap();
    l.set_accept_timeout(Some(T)).unwrap();
    let mut g = Rng(seed);
    let t0 = Instant::now();
    for round in 0..rounds {
        if let Err(e) = wake_round(&st, &l, &mut g, None) {
            panic!("seed {seed:#x} (EMBER_FUSION_STRESS_SEED={seed}), round {round}: {e}");
        }
    }
    drop(l);
    let dl = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<_> = st
            .netstat()
            .into_iter()
            .filter(|(i, _, _)| i.state != State::TimeWait)
            .map(|(i, _, f)| format!("{}→{} {:?} fused={f}", i.local, i.remote, i.state))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < dl, "connections left: {left:?}");
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(st.stats().tcp.fusion_fused_now, 0);
    eprintln!("{rounds} wake-up rounds in {:?}", t0.elapsed());
    st.shutdown();
}

#[test]
fn own_shutdown_read_wakes_a_parked_reader() {
    // Linux: shutdown(SHUT_RD) wakes a blocked recv(), which returns 0. The reader here
    // parks first (a 2 ms sleep before the shutdown makes that all but certain; if it
    // has not parked yet, the round passes trivially).
    let st = Stack::loopback(2).unwrap();
    let l = TcpListener::bind(&st, "127.0.0.1:0").unwrap();
    l.set_accept_timeout(Some(T)).unwrap();
    let mut g = Rng(7);
    for round in 0..5 {
        if let Err(e) = wake_round(&st, &l, &mut g, Some((false, Action::OwnShutdownRead, 3))) {
            panic!("round {round}: {e}");
        }
    }
    drop(l);
    st.shutdown();
}
