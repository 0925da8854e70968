//! The iperf3 server protocol (TCP), so the stock `iperf3 -c` client measures `ember serve`
//! unchanged, and a small client of the same protocol for `ember client`.
//!
//! # The protocol, as iperf3 3.x speaks it
//!
//! iperf3 has no RFC; this follows what its client and server do (`iperf_api.c`,
//! `iperf_server_api.c`, `iperf_client_api.c`, `iperf_tcp.c` of esnet/iperf), written anew:
//!
//! * The client opens the *control* connection and sends a 37-byte cookie (36 printable
//!   characters and a NUL) that names the test.
//! * The server drives the test with one-byte states ([`state`]): `PARAM_EXCHANGE`, on which
//!   the client sends its parameters as JSON (a 4-byte big-endian length, then the text);
//!   `CREATE_STREAMS`, on which the client opens the *data* connections to the same port,
//!   each starting with the same cookie; `TEST_START` and `TEST_RUNNING`, after which the
//!   bytes flow (client to server, or server to client with `-R`, or both with `--bidir`:
//!   there the first `-P` streams carry client to server, the next `-P` server to client).
//! * The client ends the test (its `-t` timer ran out, or `-n`/`-k` bytes or blocks moved) by
//!   sending `TEST_END`. The server answers `EXCHANGE_RESULTS`, reads the client's results
//!   JSON, sends its own (CPU use and, per stream, `id`, `bytes`, `retransmits`, `jitter`,
//!   `errors`, `packets`, `start_time`, `end_time`: the client refuses results without the
//!   first six), then `DISPLAY_RESULTS`; the client closes with `IPERF_DONE`.
//! * A connection that arrives while a test runs (outside stream creation) gets
//!   `ACCESS_DENIED` and is closed unread. A test the server will not run gets
//!   `SERVER_ERROR` followed by iperf3's error number and an errno (4 bytes each, big
//!   endian), which the client prints (`-u` is refused that way: this server is TCP only).
//!
//! Stream ids follow iperf3's quirk: 1, 3, 4, 5, … in connection order, on both sides; the
//! client matches the server's results by id.
//!
//! # Design and invariants
//!
//! * One accept thread owns the listener and dispatches each connection by the server's
//!   phase, never reading from it: idle → it becomes the control connection of a new test
//!   (one test thread); a test waiting for its data streams → handed, in accept order, to
//!   that test (order matters: ids and `--bidir` directions are given by it); a test whose
//!   run is over (results, teardown) → held (at most [`MAX_HELD`]) and served next, as
//!   iperf3's listen backlog would; otherwise → `ACCESS_DENIED`. One test at a time, like
//!   iperf3's own server.
//! * The phase leaves "running" before the control connection closes, and returns to idle
//!   when the test thread has nothing more to serve, whatever the path (a vanished client,
//!   a protocol error; a guard covers a panic), so the server is always ready for the next.
//! * At `TEST_END` the data streams stop (senders within a tick, receivers after counting
//!   what is in flight) and are closed, as iperf3 closes them: its client drains with
//!   blocking whole-block reads, which only an EOF ends if a block was cut short.
//! * Every read has a deadline: the cookie, the JSON messages and stream set-up
//!   ([`Iperf3Options::control_timeout`]); while the test runs the control connection is
//!   read in [`TICK`] slices, and the test ends when no data moved for
//!   [`Iperf3Options::idle_timeout`], or `TEST_END` did not come within
//!   [`Iperf3Options::end_grace`] after `-t` (+ `-O`), or it ran past
//!   [`Iperf3Options::max_duration`].
//! * Bounded sizes: JSON messages ≤ [`MAX_JSON_LEN`] (larger ones end the test), streams ≤
//!   [`Iperf3Options::max_streams`], block length ≤ [`Iperf3Options::max_block_len`] (one
//!   send block per test, shared by its sending streams; receivers use a fixed buffer).
//! * One thread per data stream; each ends on EOF, on an error, or within a tick of the end
//!   of the test (a receiver then drains what is in flight for at most [`DRAIN_MAX`]).
//! * `--get-server-output` gets a one-line summary; `--username` (an auth token) is refused
//!   (`i_errno` 142). Socket tuning the client asks for (`-w`, `-M`, `-S`, `-C`,
//!   `--fq-rate`, flow label, don't-fragment, zero copy) is ignored: the [`Net`] traits
//!   cannot express it. `-N` (no delay) is honoured, `-b` paces the streams this server
//!   sends, `-O` omits the first seconds from the server's counts.

use crate::net::{Conn, Listen, Net};
use crate::server::{Stop, StopGuard, ACCEPT_TICK};
use serde_json::{json, Map, Value};
use std::io;
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// iperf3's well-known port.
pub const DEFAULT_PORT: u16 = 5201;
/// The cookie: 36 characters and a NUL.
pub const COOKIE_SIZE: usize = 37;
/// The largest JSON message either side accepts.
pub const MAX_JSON_LEN: usize = 64 * 1024;
/// iperf3's default TCP block length (`-l`).
pub const DEFAULT_BLOCK_LEN: usize = 128 * 1024;
/// iperf3's own bound on `-l` (`MAX_BLOCKSIZE`).
pub const MAX_BLOCK_LEN: usize = 1024 * 1024;
/// How often blocked reads and writes look at the test's end flag.
pub const TICK: Duration = Duration::from_millis(200);
/// After the test ends, how long a receiving stream keeps counting what is in flight.
pub const DRAIN_MAX: Duration = Duration::from_millis(300);
/// A drain ends early once the stream has been quiet this long.
const DRAIN_QUIET: Duration = Duration::from_millis(20);
/// The read buffer of a receiving stream.
const RECV_BUF: usize = 128 * 1024;
/// Connections with a wrong cookie tolerated while a test gathers its streams.
const MAX_BAD_STREAMS: usize = 16;
/// Control messages a client reads before it gives up on a server that never finishes.
const MAX_CLIENT_MESSAGES: usize = 64;

/// The control states: one signed byte each on the control connection.
pub mod state {
    pub const TEST_START: i8 = 1;
    pub const TEST_RUNNING: i8 = 2;
    pub const TEST_END: i8 = 4;
    pub const PARAM_EXCHANGE: i8 = 9;
    pub const CREATE_STREAMS: i8 = 10;
    pub const SERVER_TERMINATE: i8 = 11;
    pub const CLIENT_TERMINATE: i8 = 12;
    pub const EXCHANGE_RESULTS: i8 = 13;
    pub const DISPLAY_RESULTS: i8 = 14;
    pub const IPERF_DONE: i8 = 16;
    pub const ACCESS_DENIED: i8 = -1;
    pub const SERVER_ERROR: i8 = -2;
}

/// iperf3's error numbers (`i_errno`, `iperf_api.h`) this server sends after `SERVER_ERROR`;
/// the client prints its own text for each.
pub mod ie {
    /// "test duration too long".
    pub const DURATION: i32 = 5;
    /// "number of parallel streams too large".
    pub const NUMSTREAMS: i32 = 6;
    /// "block size too large".
    pub const BLOCKSIZE: i32 = 7;
    /// "bogus value for --omit".
    pub const OMIT: i32 = 12;
    /// "an option you are trying to set is not implemented yet".
    pub const UNIMP: i32 = 13;
    /// "cannot be both reverse and bidirectional".
    pub const REVERSEBIDIR: i32 = 25;
    /// "unable to receive parameters from client".
    pub const RECVPARAMS: i32 = 114;
    /// "test authorization failed".
    pub const AUTHTEST: i32 = 142;
}

/// The server's bounds and timeouts.
#[derive(Debug, Clone)]
pub struct Iperf3Options {
    /// Most parallel streams (`-P`) a test may ask for (each direction, for `--bidir`).
    pub max_streams: usize,
    /// Longest block (`-l`) a test may ask for.
    pub max_block_len: usize,
    /// Longest test: `-t` plus `-O` above it is refused; any test still running after it
    /// (plus [`Self::end_grace`]) is ended.
    pub max_duration: Duration,
    /// Deadline for each step outside the run: the cookie, the parameters, the data
    /// streams' arrival, the client's results, `IPERF_DONE`.
    pub control_timeout: Duration,
    /// A running test in which no data moved for this long is ended.
    pub idle_timeout: Duration,
    /// How long after `-t` (+ `-O`) the server waits for the client's `TEST_END`.
    pub end_grace: Duration,
}

impl Default for Iperf3Options {
    fn default() -> Self {
        Iperf3Options {
            max_streams: 128,
            max_block_len: MAX_BLOCK_LEN,
            max_duration: Duration::from_secs(3600),
            control_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            end_grace: Duration::from_secs(10),
        }
    }
}

/// Counters of one iperf3 server.
#[derive(Debug, Default)]
pub struct Iperf3Stats {
    /// Tests whose parameters were accepted.
    pub tests_started: AtomicU64,
    /// Tests that reached `DISPLAY_RESULTS`.
    pub tests_completed: AtomicU64,
    /// Tests refused with `SERVER_ERROR` (UDP, bounds, …).
    pub refused: AtomicU64,
    /// Connections refused with `ACCESS_DENIED` (a test was running).
    pub denied: AtomicU64,
    /// Tests that ended on an error: a vanished or silent client, a malformed message.
    pub errors: AtomicU64,
    /// Data bytes received, all tests.
    pub bytes_received: AtomicU64,
    /// Data bytes sent, all tests.
    pub bytes_sent: AtomicU64,
}

// ---------------------------------------------------------------------------------------
// The server.

/// What the accept thread does with a new connection.
enum Phase<C> {
    /// No test: the next connection is a control connection.
    Idle,
    /// A test runs and takes no connection.
    Busy,
    /// A test gathers its data streams: connections go to it, in accept order.
    Streams(mpsc::SyncSender<C>),
    /// The test's run is over (results, teardown): new connections wait here, as they
    /// would in iperf3's listen backlog, and the first becomes the next test.
    Ending(Vec<(C, SocketAddr)>),
}

/// Connections held while a test ends; more are denied.
pub const MAX_HELD: usize = 4;

/// The run is over: from now on new connections are held for the next test.
fn enter_ending<C>(phase: &Mutex<Phase<C>>) {
    let mut ph = lock(phase);
    if !matches!(*ph, Phase::Ending(_)) {
        *ph = Phase::Ending(Vec::new());
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Serves iperf3 tests on `listener`, one at a time, until `stop` is raised. Returns the
/// accept thread, which joins the running test (if any) before it ends.
pub fn spawn_iperf3<N: Net>(
    listener: N::Listener,
    stop: Arc<Stop>,
    opts: Iperf3Options,
    stats: Arc<Iperf3Stats>,
) -> io::Result<JoinHandle<()>> {
    listener.set_accept_timeout(Some(ACCEPT_TICK))?;
    let phase: Arc<Mutex<Phase<N::Conn>>> = Arc::new(Mutex::new(Phase::Idle));
    let opts = Arc::new(opts);
    std::thread::Builder::new()
        .name("svc-iperf3".into())
        .spawn(move || {
            let mut test: Option<JoinHandle<()>> = None;
            while !stop.is_stopped() {
                let (c, peer) = match listener.accept() {
                    Ok(x) => x,
                    Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {
                        continue
                    }
                    Err(e) => {
                        if !stop.is_stopped() {
                            tracing::warn!(service = "iperf3", error = %e, "accept failed; service ends");
                        }
                        break;
                    }
                };
                enum Dispatch<C> {
                    Control(C),
                    Denied(C),
                    Queued,
                }
                let d = {
                    let mut ph = lock(&phase);
                    match &*ph {
                        Phase::Idle => {
                            *ph = Phase::Busy;
                            Dispatch::Control(c)
                        }
                        Phase::Busy => Dispatch::Denied(c),
                        Phase::Ending(held) if held.len() >= MAX_HELD => Dispatch::Denied(c),
                        Phase::Ending(_) => {
                            if let Phase::Ending(held) = &mut *ph {
                                held.push((c, peer));
                            }
                            Dispatch::Queued
                        }
                        Phase::Streams(tx) => match tx.try_send(c) {
                            Ok(()) => Dispatch::Queued,
                            Err(
                                mpsc::TrySendError::Full(c) | mpsc::TrySendError::Disconnected(c),
                            ) => Dispatch::Denied(c),
                        },
                    }
                };
                match d {
                    Dispatch::Queued => tracing::debug!(service = "iperf3", %peer, "queued"),
                    Dispatch::Denied(c) => {
                        stats.denied.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(service = "iperf3", %peer, "a test is running: access denied");
                        deny(c);
                    }
                    Dispatch::Control(c) => {
                        // The previous test set the phase to idle as its last act.
                        if let Some(h) = test.take() {
                            let _ = h.join();
                        }
                        let (ph, st, o, stp) =
                            (phase.clone(), stats.clone(), opts.clone(), stop.clone());
                        let spawned = std::thread::Builder::new()
                            .name("iperf3-test".into())
                            .spawn(move || serve_tests(c, peer, ph, stp, &o, &st));
                        match spawned {
                            Ok(h) => test = Some(h),
                            Err(e) => {
                                *lock(&phase) = Phase::Idle;
                                stats.errors.fetch_add(1, Ordering::Relaxed);
                                tracing::warn!(service = "iperf3", error = %e, "cannot start a test thread");
                            }
                        }
                    }
                }
            }
            if let Some(h) = test.take() {
                let _ = h.join();
            }
        })
}

/// `ACCESS_DENIED`, then close (the connection is not read: like iperf3, so a busy server
/// never waits on a stranger).
fn deny<C: Conn>(c: C) {
    let _ = c.set_write_timeout(Some(Duration::from_millis(100)));
    let _ = c.write_all(&[state::ACCESS_DENIED as u8]);
    let _ = c.shutdown(Shutdown::Write);
}

/// Sets the phase back to idle if a test thread panics (it never should), so the server
/// cannot stay busy forever.
struct IdleOnPanic<'a, C>(&'a Mutex<Phase<C>>);

impl<C> Drop for IdleOnPanic<'_, C> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            *lock(self.0) = Phase::Idle;
        }
    }
}

enum Outcome {
    Completed,
    Refused,
}

/// The test thread: serves `ctrl`'s test, then any connection held while it ended, then
/// sets the phase back to idle.
fn serve_tests<C: Conn>(
    ctrl: C,
    peer: SocketAddr,
    phase: Arc<Mutex<Phase<C>>>,
    stop: Arc<Stop>,
    opts: &Iperf3Options,
    stats: &Iperf3Stats,
) {
    let _guard = IdleOnPanic(&phase);
    let mut next = Some((ctrl, peer));
    while let Some((ctrl, peer)) = next.take() {
        serve_test(ctrl, peer, &phase, &stop, opts, stats);
        let mut ph = lock(&phase);
        let held = match std::mem::replace(&mut *ph, Phase::Idle) {
            Phase::Ending(held) => held,
            _ => Vec::new(),
        };
        let mut held = held.into_iter();
        if !stop.is_stopped() {
            if let Some(first) = held.next() {
                *ph = Phase::Busy;
                next = Some(first);
            }
        }
        drop(ph);
        for (c, _) in held {
            stats.denied.fetch_add(1, Ordering::Relaxed);
            deny(c);
        }
    }
}

/// One test, from the cookie to `IPERF_DONE`.
fn serve_test<C: Conn>(
    ctrl: C,
    peer: SocketAddr,
    phase: &Mutex<Phase<C>>,
    stop: &Arc<Stop>,
    opts: &Iperf3Options,
    stats: &Iperf3Stats,
) {
    tracing::debug!(service = "iperf3", %peer, "new test");
    let ctrl = Arc::new(ctrl);
    let _reg = stop.register(&ctrl);
    let r = run_test(&ctrl, phase, stop, opts, stats);
    // Before the control connection closes: a client that reconnects at once is held.
    enter_ending(phase);
    match r {
        Ok(Outcome::Completed) => {
            stats.tests_completed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(service = "iperf3", %peer, "test completed");
        }
        Ok(Outcome::Refused) => {
            stats.refused.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => {
            stats.errors.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(service = "iperf3", %peer, error = %e, "test ended with an error");
        }
    }
}

/// The parameters of one test, from the client's JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TestParams {
    streams: usize,
    reverse: bool,
    bidir: bool,
    block_len: usize,
    /// `-t`, seconds; 0 when the test ends by bytes or blocks.
    time: u64,
    /// `-n`, bytes; 0 for none.
    bytes: u64,
    /// `-k`, blocks; 0 for none.
    blocks: u64,
    /// `-O`, seconds.
    omit: u64,
    /// `-b`, bits per second per stream; 0 for unlimited.
    rate: u64,
    nodelay: bool,
    server_output: bool,
}

/// Why the server refuses a test: iperf3's `i_errno` and an errno, sent after
/// `SERVER_ERROR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Refusal {
    ie: i32,
    errno: i32,
}

const fn refuse(ie: i32, errno: i32) -> Refusal {
    Refusal { ie, errno }
}

/// iperf3 sets a flag by the key's presence; `false` and 0 are read as unset as well.
fn flag(m: &Map<String, Value>, key: &str) -> bool {
    match m.get(key) {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(_) => true,
    }
}

/// A non-negative integer parameter (`default` when absent).
fn uint(m: &Map<String, Value>, key: &str, default: u64) -> Result<u64, Refusal> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Number(n)) => {
            if let Some(u) = n.as_u64() {
                return Ok(u);
            }
            match n.as_f64() {
                // `as` saturates: 1e30 bytes is u64::MAX, which the bounds then judge.
                Some(f) if f.is_finite() && f >= 0.0 => Ok(f as u64),
                _ => Err(refuse(ie::RECVPARAMS, libc::EINVAL)),
            }
        }
        Some(_) => Err(refuse(ie::RECVPARAMS, libc::EINVAL)),
    }
}

fn parse_params(v: &Value, o: &Iperf3Options) -> Result<TestParams, Refusal> {
    let m = v.as_object().ok_or(refuse(ie::RECVPARAMS, libc::EINVAL))?;
    if flag(m, "udp") || flag(m, "sctp") {
        return Err(refuse(ie::UNIMP, libc::EPROTONOSUPPORT));
    }
    if m.contains_key("authtoken") {
        return Err(refuse(ie::AUTHTEST, 0));
    }
    let streams = uint(m, "parallel", 1)?;
    if streams == 0 || streams > o.max_streams as u64 {
        return Err(refuse(ie::NUMSTREAMS, 0));
    }
    let block_len = uint(m, "len", DEFAULT_BLOCK_LEN as u64)?;
    if block_len == 0 || block_len > o.max_block_len as u64 {
        return Err(refuse(ie::BLOCKSIZE, 0));
    }
    let max = o.max_duration.as_secs();
    let omit = uint(m, "omit", 0)?;
    if omit > max {
        return Err(refuse(ie::OMIT, 0));
    }
    let time = uint(m, "time", 0)?;
    let bytes = uint(m, "num", 0)?;
    let blocks = uint(m, "blockcount", 0)?;
    // No end condition is a test without end: refused like one too long.
    if time.saturating_add(omit) > max || (time == 0 && bytes == 0 && blocks == 0) {
        return Err(refuse(ie::DURATION, 0));
    }
    let (reverse, bidir) = (flag(m, "reverse"), flag(m, "bidirectional"));
    if reverse && bidir {
        return Err(refuse(ie::REVERSEBIDIR, 0));
    }
    Ok(TestParams {
        streams: streams as usize,
        reverse,
        bidir,
        block_len: block_len as usize,
        time,
        bytes,
        blocks,
        omit,
        rate: uint(m, "bandwidth", 0)?,
        nodelay: flag(m, "nodelay"),
        server_output: flag(m, "get_server_output"),
    })
}

fn run_test<C: Conn>(
    ctrl: &Arc<C>,
    phase: &Mutex<Phase<C>>,
    stop: &Arc<Stop>,
    o: &Iperf3Options,
    stats: &Iperf3Stats,
) -> io::Result<Outcome> {
    let ctrl = &**ctrl;
    let _ = ctrl.set_nodelay(true);
    ctrl.set_write_timeout(Some(o.control_timeout))?;
    let mut cookie = [0u8; COOKIE_SIZE];
    read_exact_until(ctrl, &mut cookie, Instant::now() + o.control_timeout)
        .map_err(|e| at("the cookie", e))?;
    send_state(ctrl, state::PARAM_EXCHANGE)?;
    let v =
        read_json(ctrl, Instant::now() + o.control_timeout).map_err(|e| at("the parameters", e))?;
    let p = match parse_params(&v, o) {
        Ok(p) => p,
        Err(r) => {
            tracing::debug!(
                service = "iperf3",
                i_errno = r.ie,
                errno = r.errno,
                "test refused"
            );
            send_server_error(ctrl, r)?;
            return Ok(Outcome::Refused);
        }
    };
    stats.tests_started.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(service = "iperf3", params = ?p, "test parameters");

    // Gather the data streams: connections now come to this thread, in accept order.
    let n = p.streams * if p.bidir { 2 } else { 1 };
    let (tx, rx) = mpsc::sync_channel(n + MAX_BAD_STREAMS);
    *lock(phase) = Phase::Streams(tx);
    let gathered = send_state(ctrl, state::CREATE_STREAMS)
        .and_then(|()| gather_streams(&rx, &cookie, n, Instant::now() + o.control_timeout, stop));
    *lock(phase) = Phase::Busy;
    drop(rx); // closes whatever else queued up
    let conns = gathered.map_err(|e| at("the data streams", e))?;

    let server_sends = p.reverse || p.bidir;
    let run = Arc::new(Run::new(
        Some(stop.clone()),
        p.bytes,
        p.blocks,
        p.rate,
        if server_sends { p.block_len } else { 0 },
    ));
    let mut streams = Streams::new(run.clone());
    for (i, c) in conns.into_iter().enumerate() {
        let sender = if p.bidir { i >= p.streams } else { p.reverse };
        if p.nodelay {
            let _ = c.set_nodelay(true);
        }
        streams.push(c, sender, Some(stop));
    }

    send_state(ctrl, state::TEST_START)?;
    send_state(ctrl, state::TEST_RUNNING)?;
    let cpu0 = cpu_times();
    let t0 = Instant::now();
    streams.start(AfterEnd::Drain)?;
    let ended = await_test_end(ctrl, &streams, &p, o, t0, stop);
    let t_end = Instant::now();
    enter_ending(phase);
    streams.finish(ended.is_err());
    // Close the data streams now, as iperf3 does at TEST_END: its client, draining with
    // blocking reads of whole blocks, waits for the rest of a block or an EOF.
    streams.close();
    for s in &streams.list {
        let b = s.counter.bytes.load(Ordering::Relaxed);
        let total = if s.sender {
            &stats.bytes_sent
        } else {
            &stats.bytes_received
        };
        total.fetch_add(b, Ordering::Relaxed);
    }
    ended.map_err(|e| at("the run", e))?;

    let start = t0 + Duration::from_secs(p.omit).min(t_end - t0);
    let secs = (t_end - start).as_secs_f64();
    let cpu = cpu_util(cpu0, cpu_times(), t_end - t0);
    send_state(ctrl, state::EXCHANGE_RESULTS)?;
    let theirs = read_json(ctrl, Instant::now() + o.control_timeout)
        .map_err(|e| at("the client's results", e))?;
    if !theirs.is_object() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the client's results are not a JSON object",
        ));
    }
    let per_stream: Vec<(u32, u64)> = streams
        .list
        .iter()
        .map(|s| (s.id, s.counter.counted()))
        .collect();
    let output = p.server_output.then(|| {
        let (rx, tx) = streams.list.iter().fold((0u64, 0u64), |(r, t), s| {
            if s.sender {
                (r, t + s.counter.counted())
            } else {
                (r + s.counter.counted(), t)
            }
        });
        format!(
            "ember iperf3 server: {} stream(s), {rx} bytes received, {tx} bytes sent in {secs:.2} s\n",
            streams.list.len()
        )
    });
    write_json(
        ctrl,
        &results_json(&per_stream, secs, cpu, server_sends, output),
    )?;
    send_state(ctrl, state::DISPLAY_RESULTS)?;
    // IPERF_DONE, or the client just closes: either way the test is over.
    let mut b = [0u8; 1];
    let _ = read_exact_until(ctrl, &mut b, Instant::now() + o.control_timeout);
    Ok(Outcome::Completed)
}

/// Names the step an error happened at, for the logs.
fn at(step: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{step}: {e}"))
}

/// Takes `n` data connections from `rx`, each opening with `cookie`; others get
/// `ACCESS_DENIED` (at most [`MAX_BAD_STREAMS`] of them).
fn gather_streams<C: Conn>(
    rx: &mpsc::Receiver<C>,
    cookie: &[u8; COOKIE_SIZE],
    n: usize,
    deadline: Instant,
    stop: &Stop,
) -> io::Result<Vec<C>> {
    let mut out = Vec::with_capacity(n);
    let mut bad = 0;
    while out.len() < n {
        if stop.is_stopped() {
            return Err(io::Error::new(
                io::ErrorKind::Interrupted,
                "server stopping",
            ));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{} of {n} data streams arrived in time", out.len()),
            ));
        }
        let c = match rx.recv_timeout(left.min(TICK)) {
            Ok(c) => c,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(io::Error::other("stream queue closed"))
            }
        };
        let mut got = [0u8; COOKIE_SIZE];
        match read_exact_until(&c, &mut got, deadline) {
            Ok(()) if got == *cookie => out.push(c),
            _ => {
                deny(c);
                bad += 1;
                if bad > MAX_BAD_STREAMS {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "too many data connections with a wrong cookie",
                    ));
                }
            }
        }
    }
    Ok(out)
}

/// Waits for the client's `TEST_END`, reading the control connection in ticks; takes the
/// `-O` snapshot on the way. Errors end the test.
fn await_test_end<C: Conn>(
    ctrl: &C,
    streams: &Streams<C>,
    p: &TestParams,
    o: &Iperf3Options,
    t0: Instant,
    stop: &Stop,
) -> io::Result<()> {
    let omit = Duration::from_secs(p.omit);
    let longest = o.max_duration + o.end_grace;
    let limit = if p.time > 0 {
        (omit + Duration::from_secs(p.time) + o.end_grace).min(longest)
    } else {
        longest
    };
    let hard_end = t0 + limit;
    let mut omit_pending = p.omit > 0;
    let (mut last_total, mut last_move) = (0u64, t0);
    loop {
        if stop.is_stopped() {
            return Err(io::Error::new(
                io::ErrorKind::Interrupted,
                "server stopping",
            ));
        }
        let now = Instant::now();
        if now >= hard_end {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client did not end the test in time",
            ));
        }
        let total = streams.bytes(None);
        if total != last_total {
            (last_total, last_move) = (total, now);
        } else if now.duration_since(last_move) >= o.idle_timeout {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no data moved on the test's streams",
            ));
        }
        let mut wait = TICK;
        if omit_pending {
            if now >= t0 + omit {
                for s in &streams.list {
                    let b = s.counter.bytes.load(Ordering::Relaxed);
                    s.counter.omitted.store(b, Ordering::Relaxed);
                }
                omit_pending = false;
            } else {
                wait = wait.min(t0 + omit - now);
            }
        }
        ctrl.set_read_timeout(Some(wait.max(Duration::from_millis(1))))?;
        let mut b = [0u8; 1];
        match ctrl.read(&mut b) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the client closed the control connection",
                ))
            }
            Ok(_) => {
                return match b[0] as i8 {
                    state::TEST_END => Ok(()),
                    state::CLIENT_TERMINATE => Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "the client terminated the test",
                    )),
                    s => Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("unexpected control message {s} while running"),
                    )),
                }
            }
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The server's results message (what the client's `get_results` reads).
fn results_json(
    streams: &[(u32, u64)],
    secs: f64,
    cpu: [f64; 3],
    server_sends: bool,
    output: Option<String>,
) -> Value {
    let list: Vec<Value> = streams
        .iter()
        .map(|&(id, bytes)| {
            json!({
                "id": id,
                "bytes": bytes,
                // TCP_INFO is out of the Net traits' reach: no retransmit counts.
                "retransmits": -1,
                "jitter": 0.0,
                "errors": 0,
                "packets": 0,
                "start_time": 0.0,
                "end_time": secs,
            })
        })
        .collect();
    let mut v = json!({
        "cpu_util_total": cpu[0],
        "cpu_util_user": cpu[1],
        "cpu_util_system": cpu[2],
        // -1: this side does not send; 0: it sends but cannot count retransmits.
        "sender_has_retransmits": if server_sends { 0 } else { -1 },
        "streams": list,
    });
    if let Some(text) = output {
        v["server_output_text"] = Value::String(text);
    }
    v
}

// ---------------------------------------------------------------------------------------
// Data streams (both sides).

/// What one test's streams share: the end flag, the `-n`/`-k` budget, the pacing rate and
/// the block senders send.
struct Run {
    done: AtomicBool,
    /// Set when the owner is about to close the streams: receivers stop draining.
    closing: AtomicBool,
    stop: Option<Arc<Stop>>,
    limit_bytes: u64,
    limit_blocks: u64,
    reserved_bytes: AtomicU64,
    reserved_blocks: AtomicU64,
    rate: u64,
    block: Vec<u8>,
}

impl Run {
    fn new(stop: Option<Arc<Stop>>, bytes: u64, blocks: u64, rate: u64, block_len: usize) -> Run {
        // A repeating pattern, like iperf3's `--repeating-payload`.
        let block = (0..block_len).map(|i| b'0' + (i % 10) as u8).collect();
        Run {
            done: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            stop,
            limit_bytes: bytes,
            limit_blocks: blocks,
            reserved_bytes: AtomicU64::new(0),
            reserved_blocks: AtomicU64::new(0),
            rate,
            block,
        }
    }

    fn is_done(&self) -> bool {
        self.done.load(Ordering::SeqCst) || self.stop.as_ref().is_some_and(|s| s.is_stopped())
    }

    /// Takes one block from the `-n`/`-k` budget shared by all sending streams.
    fn reserve_block(&self) -> bool {
        let len = self.block.len() as u64;
        if self.limit_bytes > 0
            && self.reserved_bytes.fetch_add(len, Ordering::Relaxed) >= self.limit_bytes
        {
            return false;
        }
        if self.limit_blocks > 0
            && self.reserved_blocks.fetch_add(1, Ordering::Relaxed) >= self.limit_blocks
        {
            return false;
        }
        true
    }
}

/// Bytes one stream moved; `omitted` is the count at the end of `-O`.
#[derive(Debug, Default)]
struct Counter {
    bytes: AtomicU64,
    omitted: AtomicU64,
}

impl Counter {
    fn counted(&self) -> u64 {
        self.bytes
            .load(Ordering::Relaxed)
            .saturating_sub(self.omitted.load(Ordering::Relaxed))
    }
}

/// What a receiving stream does once the test has ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterEnd {
    /// Count what is still in flight, for at most [`DRAIN_MAX`] (server).
    Drain,
    /// Read and discard until the streams close, so the sender never blocks (client).
    Discard,
}

struct Stream<C: Conn> {
    id: u32,
    sender: bool,
    conn: Arc<C>,
    counter: Arc<Counter>,
    thread: Option<JoinHandle<()>>,
    _reg: Option<StopGuard>,
}

/// The data streams of one test. Dropping it ends and joins their threads.
struct Streams<C: Conn> {
    list: Vec<Stream<C>>,
    run: Arc<Run>,
}

/// iperf3's stream ids: 1, then 3, 4, 5, … (its list code skips 2), in connection order.
fn stream_id(index: usize) -> u32 {
    if index == 0 {
        1
    } else {
        (index as u32).saturating_add(2)
    }
}

impl<C: Conn> Streams<C> {
    fn new(run: Arc<Run>) -> Self {
        Streams {
            list: Vec::new(),
            run,
        }
    }

    fn push(&mut self, c: C, sender: bool, stop: Option<&Arc<Stop>>) {
        let conn = Arc::new(c);
        let reg = stop.map(|s| s.register(&conn));
        self.list.push(Stream {
            id: stream_id(self.list.len()),
            sender,
            conn,
            counter: Arc::default(),
            thread: None,
            _reg: reg,
        });
    }

    /// Bytes moved so far, by senders (`Some(true)`), receivers or all.
    fn bytes(&self, sender: Option<bool>) -> u64 {
        self.list
            .iter()
            .filter(|s| sender.is_none_or(|x| x == s.sender))
            .map(|s| s.counter.bytes.load(Ordering::Relaxed))
            .sum()
    }

    /// One thread per stream.
    fn start(&mut self, after: AfterEnd) -> io::Result<()> {
        for s in &mut self.list {
            let (c, ctr, run, sender) = (
                s.conn.clone(),
                s.counter.clone(),
                self.run.clone(),
                s.sender,
            );
            let h = std::thread::Builder::new()
                .name(format!("iperf3-stream-{}", s.id))
                .spawn(move || {
                    if sender {
                        send_loop(&*c, &ctr, &run);
                    } else {
                        receive_loop(&*c, &ctr, &run, after);
                    }
                });
            match h {
                Ok(h) => s.thread = Some(h),
                Err(e) => {
                    self.finish(true);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Shuts every connection down both ways.
    fn close(&self) {
        self.run.closing.store(true, Ordering::SeqCst);
        for s in &self.list {
            let _ = s.conn.shutdown(Shutdown::Both);
        }
    }

    fn all_finished(&self) -> bool {
        self.list
            .iter()
            .all(|s| s.thread.as_ref().is_none_or(|h| h.is_finished()))
    }

    /// Ends the test for every stream and joins their threads; `close` also shuts the
    /// connections down (for an abort: nothing more is to be counted).
    fn finish(&mut self, close: bool) {
        self.run.done.store(true, Ordering::SeqCst);
        if close {
            self.close();
        }
        for s in &mut self.list {
            if let Some(h) = s.thread.take() {
                let _ = h.join();
            }
        }
    }
}

impl<C: Conn> Drop for Streams<C> {
    fn drop(&mut self) {
        self.finish(true);
    }
}

/// Sends blocks until the test ends, the `-n`/`-k` budget is spent, or the peer goes;
/// paced to `run.rate` bits/s when set.
fn send_loop<C: Conn>(c: &C, ctr: &Counter, run: &Run) {
    let _ = c.set_write_timeout(Some(TICK));
    let t0 = Instant::now();
    'blocks: while !run.is_done() && !run.block.is_empty() && run.reserve_block() {
        let mut off = 0;
        while off < run.block.len() {
            if run.is_done() {
                break 'blocks;
            }
            match c.write(&run.block[off..]) {
                Ok(0) => break 'blocks,
                Ok(n) => {
                    off += n;
                    ctr.bytes.fetch_add(n as u64, Ordering::Relaxed);
                }
                Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break 'blocks,
            }
        }
        if run.rate > 0 {
            pace(ctr, run, t0);
        }
    }
}

/// Sleeps until the bytes sent are due at `run.rate`, in slices of at most a tick.
fn pace(ctr: &Counter, run: &Run, t0: Instant) {
    loop {
        let bits = ctr.bytes.load(Ordering::Relaxed) as f64 * 8.0;
        let due = Duration::try_from_secs_f64(bits / run.rate as f64).unwrap_or(Duration::MAX);
        let elapsed = t0.elapsed();
        if elapsed >= due || run.is_done() {
            return;
        }
        std::thread::sleep((due - elapsed).min(TICK));
    }
}

/// Reads and counts until the test ends (or EOF, or an error), then drains or discards.
fn receive_loop<C: Conn>(c: &C, ctr: &Counter, run: &Run, after: AfterEnd) {
    let mut buf = vec![0u8; RECV_BUF];
    let _ = c.set_read_timeout(Some(TICK));
    while !run.is_done() {
        match c.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                ctr.bytes.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
    match after {
        AfterEnd::Drain => {
            let end = Instant::now() + DRAIN_MAX;
            if c.set_read_timeout(Some(DRAIN_QUIET)).is_err() {
                return;
            }
            while Instant::now() < end && !run.closing.load(Ordering::SeqCst) {
                match c.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => {
                        ctr.bytes.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return, // quiet for DRAIN_QUIET, or gone
                }
            }
        }
        AfterEnd::Discard => {
            // Bounded by the owner: it sets `closing` and shuts the connection down.
            while !run.closing.load(Ordering::SeqCst) {
                match c.read(&mut buf) {
                    Ok(0) => return,
                    Ok(_) => {}
                    Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return,
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Control messages.

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Fills `buf` before `deadline` (`TimedOut` after it, `UnexpectedEof` if the peer closes).
fn read_exact_until<C: Conn>(c: &C, mut buf: &mut [u8], deadline: Instant) -> io::Result<()> {
    while !buf.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "read timed out"));
        }
        c.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
        match c.read(buf) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => buf = &mut buf[n..],
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn send_state<C: Conn>(c: &C, s: i8) -> io::Result<()> {
    c.write_all(&[s as u8])
}

fn send_server_error<C: Conn>(c: &C, r: Refusal) -> io::Result<()> {
    let mut m = [0u8; 9];
    m[0] = state::SERVER_ERROR as u8;
    m[1..5].copy_from_slice(&r.ie.to_be_bytes());
    m[5..9].copy_from_slice(&r.errno.to_be_bytes());
    c.write_all(&m)
}

/// A JSON message: 4-byte big-endian length, then the text.
fn write_json<C: Conn>(c: &C, v: &Value) -> io::Result<()> {
    let text = serde_json::to_vec(v).map_err(io::Error::other)?;
    if text.len() > MAX_JSON_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "JSON message too long",
        ));
    }
    let mut m = Vec::with_capacity(4 + text.len());
    m.extend_from_slice(&(text.len() as u32).to_be_bytes());
    m.extend_from_slice(&text);
    c.write_all(&m)
}

/// Reads one JSON message of at most [`MAX_JSON_LEN`] bytes before `deadline`.
fn read_json<C: Conn>(c: &C, deadline: Instant) -> io::Result<Value> {
    let mut len = [0u8; 4];
    read_exact_until(c, &mut len, deadline)?;
    let n = u32::from_be_bytes(len) as usize;
    if n == 0 || n > MAX_JSON_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("JSON message of {n} bytes"),
        ));
    }
    let mut text = vec![0u8; n];
    read_exact_until(c, &mut text, deadline)?;
    serde_json::from_slice(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// A SERVER_ERROR's payload, as an error.
fn server_error(m: [u8; 8]) -> io::Error {
    let ie = i32::from_be_bytes([m[0], m[1], m[2], m[3]]);
    let errno = i32::from_be_bytes([m[4], m[5], m[6], m[7]]);
    io::Error::other(format!(
        "the iperf3 server refused the test (i_errno {ie}, errno {errno})"
    ))
}

// ---------------------------------------------------------------------------------------
// CPU use (the results' cpu_util_* fields).

/// User and system CPU time of this process so far.
fn cpu_times() -> Option<(Duration, Duration)> {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage(2) writes one `struct rusage` through a valid, exclusively owned
    // pointer to one; RUSAGE_SELF is a valid `who`.
    let r = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    if r != 0 {
        return None;
    }
    // SAFETY: all-zero bytes are a valid `rusage` (plain integers), and the successful
    // call above filled it.
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    Some((tv(ru.ru_utime), tv(ru.ru_stime)))
}

/// Percent of `wall` spent on CPU between two [`cpu_times`]: total, user, system.
fn cpu_util(
    before: Option<(Duration, Duration)>,
    after: Option<(Duration, Duration)>,
    wall: Duration,
) -> [f64; 3] {
    let (Some((u0, s0)), Some((u1, s1))) = (before, after) else {
        return [0.0; 3];
    };
    let w = wall.as_secs_f64();
    if w <= 0.0 {
        return [0.0; 3];
    }
    let u = u1.saturating_sub(u0).as_secs_f64() / w * 100.0;
    let s = s1.saturating_sub(s0).as_secs_f64() / w * 100.0;
    [u + s, u, s]
}

// ---------------------------------------------------------------------------------------
// The client.

/// How an [`iperf3_client`] test ends (iperf3's `-t`, `-n`, `-k`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Iperf3End {
    /// After this many seconds.
    Secs(u32),
    /// Once this many bytes moved (each direction counts on its own, as in iperf3).
    Bytes(u64),
    /// Once this many blocks were sent (or their bytes received).
    Blocks(u64),
}

/// An [`iperf3_client`] test.
#[derive(Debug, Clone)]
pub struct Iperf3ClientOptions {
    pub end: Iperf3End,
    /// Parallel streams (`-P`), 1..=128.
    pub streams: usize,
    /// The server sends (`-R`).
    pub reverse: bool,
    /// Both send (`--bidir`): `streams` each way.
    pub bidir: bool,
    /// Block length (`-l`), 1..=[`MAX_BLOCK_LEN`].
    pub block_len: usize,
    /// Connect timeout, deadline of each control step, and how long data may stall.
    pub timeout: Duration,
}

impl Default for Iperf3ClientOptions {
    fn default() -> Self {
        Iperf3ClientOptions {
            end: Iperf3End::Secs(10),
            streams: 1,
            reverse: false,
            bidir: false,
            block_len: DEFAULT_BLOCK_LEN,
            timeout: Duration::from_secs(10),
        }
    }
}

/// What an [`iperf3_client`] test measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Iperf3Report {
    /// Bytes this client sent (until `TEST_END`).
    pub sent: u64,
    /// Bytes this client received (until `TEST_END`).
    pub received: u64,
    /// Bytes the server says it received on the client's sending streams.
    pub peer_received: u64,
    /// Bytes the server says it sent on the client's receiving streams.
    pub peer_sent: u64,
    /// From `TEST_RUNNING` to `TEST_END`.
    pub elapsed: Duration,
    /// Data streams.
    pub streams: usize,
}

/// A random 36-character cookie (iperf3's base32 alphabet) and its NUL.
fn make_cookie() -> [u8; COOKIE_SIZE] {
    use std::hash::{BuildHasher, Hasher};
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let rs = std::collections::hash_map::RandomState::new();
    let mut cookie = [0u8; COOKIE_SIZE];
    let mut bits = 0u64;
    for (i, ch) in cookie[..COOKIE_SIZE - 1].iter_mut().enumerate() {
        if i % 12 == 0 {
            let mut h = rs.build_hasher();
            h.write_usize(i);
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0),
            );
            bits = h.finish();
        }
        *ch = ALPHABET[(bits & 31) as usize];
        bits >>= 5;
    }
    cookie
}

/// Runs one iperf3 test (TCP) against `server` over `net`: the stock `iperf3 -s` or
/// [`spawn_iperf3`]. Errors: `InvalidInput` for bad options, `ConnectionRefused` if the
/// server is busy (`ACCESS_DENIED`), `Other` if it refused the test (`SERVER_ERROR`),
/// `ConnectionAborted` if it terminated, `TimedOut`/`UnexpectedEof`/`InvalidData` for a
/// server that stalls, vanishes or breaks the protocol.
pub fn iperf3_client<N: Net>(
    net: &N,
    server: SocketAddr,
    o: &Iperf3ClientOptions,
) -> io::Result<Iperf3Report> {
    let bad = |m: &str| Err(io::Error::new(io::ErrorKind::InvalidInput, m.to_string()));
    if o.streams == 0 || o.streams > 128 {
        return bad("streams must be 1..=128");
    }
    if o.block_len == 0 || o.block_len > MAX_BLOCK_LEN {
        return bad("block_len must be 1..=1 MiB");
    }
    if o.reverse && o.bidir {
        return bad("reverse and bidir exclude each other");
    }
    if matches!(
        o.end,
        Iperf3End::Secs(0) | Iperf3End::Bytes(0) | Iperf3End::Blocks(0)
    ) {
        return bad("the test needs an end");
    }
    if o.timeout.is_zero() {
        return bad("timeout must be positive");
    }
    let ctrl = net.connect(server, Some(o.timeout))?;
    let _ = ctrl.set_nodelay(true);
    ctrl.set_write_timeout(Some(o.timeout))?;
    let cookie = make_cookie();
    ctrl.write_all(&cookie)?;

    let (limit_bytes, limit_blocks) = match o.end {
        Iperf3End::Secs(_) => (0, 0),
        Iperf3End::Bytes(b) => (b, 0),
        Iperf3End::Blocks(k) => (0, k),
    };
    let client_sends = !o.reverse;
    let run = Arc::new(Run::new(
        None,
        limit_bytes,
        limit_blocks,
        0,
        if client_sends { o.block_len } else { 0 },
    ));
    let mut streams: Streams<N::Conn> = Streams::new(run);
    let n = o.streams * if o.bidir { 2 } else { 1 };
    let mut report = Iperf3Report {
        streams: n,
        ..Iperf3Report::default()
    };
    for _ in 0..MAX_CLIENT_MESSAGES {
        let mut b = [0u8; 1];
        read_exact_until(&ctrl, &mut b, Instant::now() + o.timeout)?;
        match b[0] as i8 {
            state::PARAM_EXCHANGE => write_json(&ctrl, &client_params(o))?,
            state::CREATE_STREAMS => {
                if !streams.list.is_empty() {
                    return Err(protocol_error("CREATE_STREAMS twice"));
                }
                for i in 0..n {
                    let c = net.connect(server, Some(o.timeout))?;
                    c.set_write_timeout(Some(o.timeout))?;
                    c.write_all(&cookie)?;
                    let sender = if o.bidir { i < o.streams } else { !o.reverse };
                    streams.push(c, sender, None);
                }
            }
            state::TEST_START => {}
            state::TEST_RUNNING => {
                if streams.list.len() != n || streams.list.iter().any(|s| s.thread.is_some()) {
                    return Err(protocol_error("TEST_RUNNING out of turn"));
                }
                streams.start(AfterEnd::Discard)?;
                let t0 = Instant::now();
                client_await_end(&ctrl, &streams, o, t0)?;
                streams.run.done.store(true, Ordering::SeqCst);
                report.elapsed = t0.elapsed();
                report.sent = streams.bytes(Some(true));
                report.received = streams.bytes(Some(false));
                send_state(&ctrl, state::TEST_END)?;
            }
            state::EXCHANGE_RESULTS => {
                streams.finish(true);
                let secs = report.elapsed.as_secs_f64();
                let mine: Vec<(u32, u64)> = streams
                    .list
                    .iter()
                    .map(|s| (s.id, s.counter.bytes.load(Ordering::Relaxed)))
                    .collect();
                write_json(
                    &ctrl,
                    &results_json(&mine, secs, [0.0; 3], client_sends, None),
                )?;
                let theirs = read_json(&ctrl, Instant::now() + o.timeout)?;
                read_server_results(&theirs, &streams, &mut report)?;
            }
            state::DISPLAY_RESULTS => {
                send_state(&ctrl, state::IPERF_DONE)?;
                return Ok(report);
            }
            state::IPERF_DONE => return Ok(report),
            state::SERVER_TERMINATE => {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "the iperf3 server terminated the test",
                ))
            }
            state::ACCESS_DENIED => {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    "the iperf3 server is busy running a test",
                ))
            }
            state::SERVER_ERROR => {
                let mut m = [0u8; 8];
                read_exact_until(&ctrl, &mut m, Instant::now() + o.timeout)?;
                return Err(server_error(m));
            }
            s => return Err(protocol_error(&format!("unexpected control message {s}"))),
        }
    }
    Err(protocol_error("the server never finished the test"))
}

fn protocol_error(m: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, m.to_string())
}

/// The parameters message, as iperf3's client writes it (the keys a server reads).
fn client_params(o: &Iperf3ClientOptions) -> Value {
    let mut m = Map::new();
    m.insert("tcp".into(), Value::Bool(true));
    m.insert("omit".into(), json!(0));
    match o.end {
        Iperf3End::Secs(s) => m.insert("time".into(), json!(s)),
        Iperf3End::Bytes(b) => m.insert("num".into(), json!(b)),
        Iperf3End::Blocks(k) => m.insert("blockcount".into(), json!(k)),
    };
    m.insert("parallel".into(), json!(o.streams));
    if o.reverse {
        m.insert("reverse".into(), Value::Bool(true));
    }
    if o.bidir {
        m.insert("bidirectional".into(), Value::Bool(true));
    }
    m.insert("len".into(), json!(o.block_len));
    m.insert("pacing_timer".into(), json!(1000));
    m.insert("client_version".into(), json!("ember"));
    Value::Object(m)
}

/// Waits for the end condition while watching the control connection (the server only
/// speaks there during the run to abort the test).
fn client_await_end<C: Conn>(
    ctrl: &C,
    streams: &Streams<C>,
    o: &Iperf3ClientOptions,
    t0: Instant,
) -> io::Result<()> {
    let (until, goal) = match o.end {
        Iperf3End::Secs(s) => (Some(t0 + Duration::from_secs(s.into())), u64::MAX),
        Iperf3End::Bytes(b) => (None, b),
        Iperf3End::Blocks(k) => (None, k.saturating_mul(o.block_len as u64)),
    };
    let (mut last_total, mut last_move) = (0u64, t0);
    loop {
        let now = Instant::now();
        if until.is_some_and(|u| now >= u) {
            return Ok(());
        }
        let (sent, received) = (streams.bytes(Some(true)), streams.bytes(Some(false)));
        if sent >= goal || received >= goal {
            return Ok(());
        }
        if sent + received != last_total {
            (last_total, last_move) = (sent + received, now);
        } else if now.duration_since(last_move) >= o.timeout {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "no data moved"));
        }
        if streams.all_finished() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the data streams ended before the test",
            ));
        }
        let wait = until.map_or(TICK, |u| u.saturating_duration_since(now).min(TICK));
        ctrl.set_read_timeout(Some(wait.max(Duration::from_millis(1))))?;
        let mut b = [0u8; 1];
        match ctrl.read(&mut b) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the control connection",
                ))
            }
            Ok(_) => {
                return Err(match b[0] as i8 {
                    state::SERVER_TERMINATE => io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "the iperf3 server terminated the test",
                    ),
                    state::SERVER_ERROR => {
                        let mut m = [0u8; 8];
                        read_exact_until(ctrl, &mut m, Instant::now() + o.timeout)?;
                        server_error(m)
                    }
                    s => protocol_error(&format!("unexpected control message {s} while running")),
                })
            }
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Reads the server's per-stream byte counts into `report` (by stream id).
fn read_server_results<C: Conn>(
    v: &Value,
    streams: &Streams<C>,
    report: &mut Iperf3Report,
) -> io::Result<()> {
    let list = v
        .get("streams")
        .and_then(Value::as_array)
        .ok_or_else(|| protocol_error("the server's results have no streams"))?;
    for item in list {
        let id = item.get("id").and_then(Value::as_u64);
        let bytes = item.get("bytes").and_then(Value::as_u64);
        let (Some(id), Some(bytes)) = (id, bytes) else {
            return Err(protocol_error("a result stream without id or bytes"));
        };
        let s = streams
            .list
            .iter()
            .find(|s| u64::from(s.id) == id)
            .ok_or_else(|| protocol_error(&format!("the server reported unknown stream {id}")))?;
        if s.sender {
            report.peer_received = report.peer_received.saturating_add(bytes);
        } else {
            report.peer_sent += bytes;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::{EmberNet, StdNet};
    use std::process::{Command, Stdio};

    fn start_server(
        opts: Iperf3Options,
    ) -> (SocketAddr, Arc<Stop>, Arc<Iperf3Stats>, JoinHandle<()>) {
        let l = StdNet.listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
        let stop = Stop::new();
        let stats = Arc::new(Iperf3Stats::default());
        let h = spawn_iperf3::<StdNet>(l, stop.clone(), opts, stats.clone()).unwrap();
        (addr, stop, stats, h)
    }

    fn have_iperf3() -> bool {
        let ok = Command::new("iperf3")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("skipped: the iperf3 tool is not installed (apt-get install iperf3)");
        }
        ok
    }

    struct Finished {
        ok: bool,
        json: Option<Value>,
        out: String,
        took: Duration,
    }

    /// Starts the stock client (with `-J` unless `text`); `wait` bounds it.
    fn spawn_iperf3_client(port: u16, args: &[&str], text: bool) -> std::process::Child {
        Command::new("iperf3")
            .args(["-c", "127.0.0.1", "-p", &port.to_string()])
            .args(if text { None } else { Some("-J") })
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn iperf3")
    }

    fn wait(mut child: std::process::Child, limit: Duration) -> Finished {
        use std::io::Read;
        let t0 = Instant::now();
        let mut so = child.stdout.take().unwrap();
        let mut se = child.stderr.take().unwrap();
        let ro = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = so.read_to_string(&mut s);
            s
        });
        let re = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = se.read_to_string(&mut s);
            s
        });
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break Some(st);
            }
            if t0.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let took = t0.elapsed();
        let stdout = ro.join().unwrap();
        let json = serde_json::from_str::<Value>(&stdout).ok();
        let out = stdout + &re.join().unwrap();
        assert!(status.is_some(), "iperf3 ran past {limit:?}: {out}");
        Finished {
            ok: status.unwrap().success(),
            json,
            out,
            took,
        }
    }

    fn run_stock(port: u16, args: &[&str]) -> Finished {
        wait(
            spawn_iperf3_client(port, args, false),
            Duration::from_secs(20),
        )
    }

    /// Without `-J`: iperf3 3.12 exits 0 after an error when `-J` is given, 1 without.
    fn run_stock_text(port: u16, args: &[&str]) -> Finished {
        wait(
            spawn_iperf3_client(port, args, true),
            Duration::from_secs(20),
        )
    }

    fn count(c: &AtomicU64, n: u64) -> bool {
        wait_for(Duration::from_secs(5), || c.load(Ordering::Relaxed) == n)
    }

    fn sum_bytes(j: &Value, key: &str) -> u64 {
        j["end"][key]["bytes"].as_u64().unwrap_or(0)
    }

    /// A successful stock run with bytes counted on both ends.
    fn check_ok(f: &Finished, what: &str) -> Value {
        assert!(f.ok, "{what}: iperf3 failed: {}", f.out);
        let j = f
            .json
            .clone()
            .unwrap_or_else(|| panic!("{what}: no JSON: {}", f.out));
        assert!(j.get("error").is_none(), "{what}: {}", f.out);
        assert!(sum_bytes(&j, "sum_sent") > 0, "{what}: {}", f.out);
        assert!(sum_bytes(&j, "sum_received") > 0, "{what}: {}", f.out);
        j
    }

    fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if cond() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        cond()
    }

    fn shut(stop: Arc<Stop>, h: JoinHandle<()>) {
        stop.stop();
        h.join().unwrap();
    }

    #[test]
    fn stock_client_plain_reverse_parallel() {
        if !have_iperf3() {
            return;
        }
        let (addr, stop, stats, h) = start_server(Iperf3Options::default());
        let p = addr.port();
        check_ok(&run_stock(p, &["-t", "1"]), "plain");
        let j = check_ok(&run_stock(p, &["-t", "1", "-R"]), "reverse");
        assert_eq!(j["start"]["test_start"]["reverse"], 1, "{j}");
        let j = check_ok(&run_stock(p, &["-t", "1", "-P", "4"]), "-P 4");
        assert_eq!(j["end"]["streams"].as_array().map(Vec::len), Some(4));
        assert!(count(&stats.tests_completed, 3));
        assert!(stats.bytes_received.load(Ordering::Relaxed) > 0);
        assert!(stats.bytes_sent.load(Ordering::Relaxed) > 0);
        assert_eq!(stats.errors.load(Ordering::Relaxed), 0);
        shut(stop, h);
    }

    #[test]
    fn stock_client_bytes_bidir_and_udp_refused() {
        if !have_iperf3() {
            return;
        }
        let (addr, stop, stats, h) = start_server(Iperf3Options::default());
        let p = addr.port();
        let j = check_ok(&run_stock(p, &["-n", "10M"]), "-n 10M");
        assert!(sum_bytes(&j, "sum_sent") >= 10 << 20, "{j}");
        let j = check_ok(&run_stock(p, &["-n", "4M", "-R", "-l", "64K"]), "-n 4M -R");
        assert!(sum_bytes(&j, "sum_received") >= 4 << 20, "{j}");
        let j = check_ok(&run_stock(p, &["-t", "1", "--bidir"]), "--bidir");
        assert!(sum_bytes(&j, "sum_sent_bidir_reverse") > 0, "{j}");
        assert!(sum_bytes(&j, "sum_received_bidir_reverse") > 0, "{j}");
        // UDP: refused with SERVER_ERROR, quickly, and the server takes the next test.
        let f = run_stock_text(p, &["-u", "-t", "1"]);
        assert!(!f.ok, "UDP must be refused: {}", f.out);
        assert!(f.took < Duration::from_secs(5), "took {:?}", f.took);
        assert!(f.out.contains("not implemented"), "{}", f.out);
        check_ok(&run_stock(p, &["-t", "1"]), "after UDP");
        assert!(count(&stats.refused, 1));
        assert!(count(&stats.tests_completed, 4));
        shut(stop, h);
    }

    #[test]
    fn stock_client_busy_and_killed() {
        if !have_iperf3() {
            return;
        }
        let (addr, stop, stats, h) = start_server(Iperf3Options::default());
        let p = addr.port();
        // A second client while a test runs is denied; the first one finishes.
        let a = spawn_iperf3_client(p, &["-t", "2"], false);
        assert!(wait_for(Duration::from_secs(5), || stats
            .tests_started
            .load(Ordering::Relaxed)
            == 1));
        let b = run_stock_text(p, &["-t", "1"]);
        assert!(!b.ok, "second client must be denied: {}", b.out);
        assert!(b.out.contains("busy"), "{}", b.out);
        check_ok(&wait(a, Duration::from_secs(20)), "first client");
        assert!(stats.denied.load(Ordering::Relaxed) >= 1);
        // A client killed mid-test (server sending) leaves the server usable.
        let mut k = spawn_iperf3_client(p, &["-t", "5", "-R"], false);
        assert!(wait_for(Duration::from_secs(5), || stats
            .tests_started
            .load(Ordering::Relaxed)
            == 2));
        std::thread::sleep(Duration::from_millis(300));
        k.kill().unwrap();
        k.wait().unwrap();
        check_ok(&run_stock(p, &["-t", "1"]), "after a killed client");
        assert!(count(&stats.errors, 1));
        assert!(count(&stats.tests_completed, 2));
        shut(stop, h);
    }

    /// Raw protocol abuse: a silent client, an oversized JSON length, garbage JSON. Each
    /// returns the server to idle; our own client then runs a test.
    #[test]
    fn malformed_and_silent_clients() {
        use std::io::Read;
        use std::net::TcpStream;
        let opts = Iperf3Options {
            control_timeout: Duration::from_millis(500),
            ..Iperf3Options::default()
        };
        let (addr, stop, stats, h) = start_server(opts);
        let t = Duration::from_secs(5);
        let open = || {
            let s = TcpStream::connect_timeout(&addr, t).unwrap();
            s.set_read_timeout(Some(t)).unwrap();
            s
        };
        let cookie = make_cookie();
        // Silent: says nothing; the server gives up after control_timeout.
        let silent = open();
        // Meanwhile another client is denied.
        let mut other = open();
        let mut b = [0u8; 1];
        other.read_exact(&mut b).unwrap();
        assert_eq!(b[0] as i8, state::ACCESS_DENIED);
        let mut rest = Vec::new();
        let _ = other.read_to_end(&mut rest);
        drop(silent);
        assert!(wait_for(t, || stats.errors.load(Ordering::Relaxed) == 1));
        // Oversized JSON length.
        let s = open();
        s.write_all(&cookie).unwrap();
        s.read_exact(&mut b).unwrap();
        assert_eq!(b[0] as i8, state::PARAM_EXCHANGE);
        s.write_all(&u32::MAX.to_be_bytes()).unwrap();
        assert_eq!(s.read(&mut b).unwrap_or(0), 0, "closed after a bad length");
        // Garbage JSON.
        let s = open();
        s.write_all(&cookie).unwrap();
        s.read_exact(&mut b).unwrap();
        s.write_all(&5u32.to_be_bytes()).unwrap();
        s.write_all(b"{nope").unwrap();
        assert_eq!(s.read(&mut b).unwrap_or(0), 0, "closed after bad JSON");
        // A valid object with bad values is refused with SERVER_ERROR.
        let s = open();
        s.write_all(&cookie).unwrap();
        s.read_exact(&mut b).unwrap();
        let j = br#"{"tcp":true,"time":1,"parallel":100000,"len":131072}"#;
        s.write_all(&(j.len() as u32).to_be_bytes()).unwrap();
        s.write_all(j).unwrap();
        let mut m = [0u8; 9];
        s.read_exact(&mut m).unwrap();
        assert_eq!(m[0] as i8, state::SERVER_ERROR);
        assert_eq!(i32::from_be_bytes([m[1], m[2], m[3], m[4]]), ie::NUMSTREAMS);
        assert!(count(&stats.errors, 3));
        assert!(count(&stats.refused, 1));
        // Streams that never come: the test ends after control_timeout.
        let s = open();
        s.write_all(&cookie).unwrap();
        s.read_exact(&mut b).unwrap();
        let j = br#"{"tcp":true,"time":1,"parallel":2,"len":1000}"#;
        s.write_all(&(j.len() as u32).to_be_bytes()).unwrap();
        s.write_all(j).unwrap();
        s.read_exact(&mut b).unwrap();
        assert_eq!(b[0] as i8, state::CREATE_STREAMS);
        assert_eq!(s.read(&mut b).unwrap_or(0), 0, "closed: no streams came");
        assert!(wait_for(t, || stats.errors.load(Ordering::Relaxed) == 4));
        // The server is idle again: a full test with our client.
        let o = Iperf3ClientOptions {
            end: Iperf3End::Bytes(1 << 20),
            streams: 2,
            timeout: t,
            ..Iperf3ClientOptions::default()
        };
        let r = iperf3_client(&StdNet, addr, &o).unwrap();
        assert!(r.sent >= 1 << 20 && r.peer_received > 0, "{r:?}");
        shut(stop, h);
    }

    /// Stop while a test runs: the server ends the test and its thread promptly, and the
    /// client gets an error rather than a hang.
    #[test]
    fn stop_ends_a_running_test() {
        let (addr, stop, stats, h) = start_server(Iperf3Options::default());
        let client = std::thread::spawn(move || {
            let o = Iperf3ClientOptions {
                end: Iperf3End::Secs(30),
                reverse: true,
                timeout: Duration::from_secs(5),
                ..Iperf3ClientOptions::default()
            };
            iperf3_client(&StdNet, addr, &o)
        });
        assert!(count(&stats.tests_started, 1));
        std::thread::sleep(Duration::from_millis(300));
        let t0 = Instant::now();
        shut(stop, h);
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
        assert!(client.join().unwrap().is_err());
        assert!(count(&stats.errors, 1));
    }

    #[test]
    fn params_are_bounded() {
        let o = Iperf3Options::default();
        let p = |s: &str| parse_params(&serde_json::from_str(s).unwrap(), &o);
        let ok = p(r#"{"tcp":true,"omit":0,"time":10,"parallel":1,"len":131072,"pacing_timer":1000,"client_version":"3.12"}"#).unwrap();
        assert_eq!(
            (ok.streams, ok.block_len, ok.time, ok.reverse),
            (1, 131072, 10, false)
        );
        let b = p(r#"{"tcp":true,"num":10485760,"parallel":4,"bidirectional":true,"len":1000,"nodelay":true}"#).unwrap();
        assert!(b.bidir && b.nodelay && b.bytes == 10 << 20 && b.time == 0);
        let e = |s: &str| p(s).unwrap_err().ie;
        assert_eq!(e(r#"{"udp":true,"time":1}"#), ie::UNIMP);
        assert_eq!(e(r#"{"sctp":true,"time":1}"#), ie::UNIMP);
        assert_eq!(e(r#"{"tcp":true,"time":1,"parallel":129}"#), ie::NUMSTREAMS);
        assert_eq!(e(r#"{"tcp":true,"time":1,"parallel":0}"#), ie::NUMSTREAMS);
        assert_eq!(e(r#"{"tcp":true,"time":1,"len":2000000}"#), ie::BLOCKSIZE);
        assert_eq!(e(r#"{"tcp":true,"time":100000}"#), ie::DURATION);
        assert_eq!(e(r#"{"tcp":true}"#), ie::DURATION);
        assert_eq!(e(r#"{"tcp":true,"time":1e300}"#), ie::DURATION);
        assert_eq!(e(r#"{"tcp":true,"time":-1}"#), ie::RECVPARAMS);
        assert_eq!(e(r#"{"tcp":true,"time":"x"}"#), ie::RECVPARAMS);
        assert_eq!(e(r#"[1,2]"#), ie::RECVPARAMS);
        assert_eq!(
            e(r#"{"time":1,"reverse":true,"bidirectional":true}"#),
            ie::REVERSEBIDIR
        );
        assert_eq!(e(r#"{"time":1,"authtoken":"x"}"#), ie::AUTHTEST);
        assert_eq!((0..4).map(stream_id).collect::<Vec<_>>(), [1, 3, 4, 5]);
        let c = make_cookie();
        assert_eq!(c[36], 0);
        assert!(c[..36]
            .iter()
            .all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(b)));
    }

    /// The one unsafe call: getrusage gives sane, growing times.
    #[test]
    fn cpu_times_are_sane() {
        let a = cpu_times().expect("getrusage");
        let mut x = 0u64;
        for i in 0..3_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(std::hint::black_box(i));
        }
        std::hint::black_box(x);
        let b = cpu_times().expect("getrusage");
        assert!(b.0 + b.1 >= a.0 + a.1);
        let u = cpu_util(Some(a), Some(b), Duration::from_secs(1));
        assert!(u[0] >= 0.0 && (u[0] - u[1] - u[2]).abs() < 1e-9);
        assert_eq!(cpu_util(None, Some(b), Duration::from_secs(1)), [0.0; 3]);
    }

    /// Our client against the stock server (`iperf3 -s -1`).
    #[test]
    fn own_client_against_stock_server() {
        if !have_iperf3() {
            return;
        }
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let server = Command::new("iperf3")
            .args(["-s", "-1", "-B", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn iperf3 -s");
        // No probe connection (it would be the one-off server's test): retry the client
        // while the port refuses.
        let o = Iperf3ClientOptions {
            end: Iperf3End::Secs(1),
            streams: 2,
            reverse: true,
            timeout: Duration::from_secs(5),
            ..Iperf3ClientOptions::default()
        };
        let mut r = Err(io::ErrorKind::NotConnected.into());
        for _ in 0..50 {
            r = iperf3_client(&StdNet, addr, &o);
            if !matches!(&r, Err(e) if e.kind() == io::ErrorKind::ConnectionRefused) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut server = server;
        if r.is_err() {
            let _ = server.kill();
        }
        // A one-off server (-1) exits after its test; `wait` kills it past the limit.
        let f = wait(server, Duration::from_secs(10));
        let r = r.unwrap_or_else(|e| panic!("{e}; iperf3 -s said: {}", f.out));
        assert!(r.received > 0 && r.peer_sent > 0, "{r:?}");
        assert!(r.peer_sent >= r.received, "{r:?}");
    }

    /// The server and our client, both on an in-process ember stack.
    #[test]
    fn ember_server_and_client() {
        let stack = Arc::new(ember_runtime::Stack::loopback(2).unwrap());
        let net = EmberNet(stack.clone());
        let l = net.listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
        let stop = Stop::new();
        let stats = Arc::new(Iperf3Stats::default());
        let h = spawn_iperf3::<EmberNet>(l, stop.clone(), Iperf3Options::default(), stats.clone())
            .unwrap();
        let t = Duration::from_secs(10);
        let o = Iperf3ClientOptions {
            end: Iperf3End::Bytes(4 << 20),
            streams: 2,
            timeout: t,
            ..Iperf3ClientOptions::default()
        };
        let r = iperf3_client(&net, addr, &o).unwrap();
        assert!(r.sent >= 4 << 20, "{r:?}");
        assert!(r.peer_received > 0 && r.peer_received <= r.sent, "{r:?}");
        let o = Iperf3ClientOptions {
            end: Iperf3End::Secs(1),
            reverse: true,
            timeout: t,
            ..Iperf3ClientOptions::default()
        };
        let r = iperf3_client(&net, addr, &o).unwrap();
        assert!(r.received > 0 && r.peer_sent >= r.received, "{r:?}");
        assert!(count(&stats.tests_completed, 2));
        assert_eq!(stats.errors.load(Ordering::Relaxed), 0);
        shut(stop, h);
        stack.shutdown();
    }
}
