//! The control socket: `ndd`, `kstat` and `netstat` for a running stack.
//!
//! # Design
//! A stack that should be reachable from outside its process serves a Unix stream socket
//! ([`ControlServer::start`], or [`Stack::serve_control`]). The socket lives in a
//! directory of the stack's user ([`control_dir`]: `$EMBER_CONTROL_DIR`, else
//! `$XDG_RUNTIME_DIR/ember`, else `/tmp/ember-UID`), which is created with mode 0700 and
//! refused if another user owns it or others may write to it; the socket itself has mode
//! 0600. Its name is `PID.N.sock`: the process and the stack's number within it, which
//! together are the stack's ID for `ember ls` and `--stack`.
//!
//! The protocol is one request line (at most [`MAX_REQUEST`] bytes, UTF-8) and one
//! response, after which the server closes the connection. The response's first line is
//! `ok` or `error KIND: MESSAGE` (KIND one of `invalid`, `not-found`, `busy`, `gone`,
//! `timeout`);
//! the rest is text for a person. Requests:
//!
//! | request | answer |
//! |---|---|
//! | `info` | the stack's ID, process, squeues, addresses, connections |
//! | `ndd list` | every tunable: value, default, range, unit, description |
//! | `ndd get NAME` | the value |
//! | `ndd set NAME VALUE` | sets it as [`Stack::set_param`] does |
//! | `kstat [MODULE[:NAME]]` | `module:name value` lines |
//! | `netstat [-f]` | listeners and connections, `-f` adds `ss -ti`-style details |
//!
//! The server runs on a thread of its own, never in a squeue, and holds only a weak
//! reference to the stack, so it neither keeps a dropped stack alive nor can stall one:
//! a request must arrive whole within [`IO_TIMEOUT`] and its answer be taken within
//! [`ANSWER_TIMEOUT`] (deadlines for the whole exchange, not per read), an oversized or
//! malformed request gets an error, at most [`MAX_CLIENTS`] requests run at once (more get
//! `busy`), and requests that visit every squeue (`kstat`, `netstat`) run one at a time.
//! Dropping the [`ControlServer`] stops the thread and removes the socket.

use crate::stack::{Stack, StackInner};
use ember_core::params::{ParamError, Params};
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest request line, in bytes (the newline included).
pub const MAX_REQUEST: usize = 4096;
/// How long a client may take to send its whole request.
pub const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a client may take to read the whole answer.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests served at once; more are answered `busy`.
pub const MAX_CLIENTS: usize = 4;
/// Largest response a client accepts (a netstat of a million connections fits).
const MAX_RESPONSE: u64 = 512 << 20;

/// Numbers the stacks of this process that serve a control socket.
static NEXT_STACK: AtomicU32 = AtomicU32::new(1);

/// The directory control sockets live in, created (mode 0700) if missing.
///
/// `$EMBER_CONTROL_DIR` if set, else `$XDG_RUNTIME_DIR/ember`, else `/tmp/ember-UID`.
/// A directory that another user owns, or that group or others may write to, is refused
/// (`PermissionDenied`): anyone who could put a socket there could answer for a stack.
pub fn control_dir() -> io::Result<PathBuf> {
    let dir = if let Some(d) = std::env::var_os("EMBER_CONTROL_DIR") {
        PathBuf::from(d)
    } else if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR")
        // Not a runtime directory of another user's (root run with `sudo -E`): its
        // `ember` directory would then be root's, and lock the user out of their own.
        .filter(|d| std::fs::metadata(d).is_ok_and(|m| Some(m.uid()) == my_uid().ok()))
    {
        PathBuf::from(d).join("ember")
    } else {
        PathBuf::from(format!("/tmp/ember-{}", my_uid()?))
    };
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!("control directory {}: {e}", dir.display()),
            ))
        }
    }
    let m = std::fs::symlink_metadata(&dir)?;
    if !m.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("control directory {} is not a directory", dir.display()),
        ));
    }
    if m.uid() != my_uid()? || m.mode() & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "control directory {} is not this user's alone (owner {}, mode {:o})",
                dir.display(),
                m.uid(),
                m.mode() & 0o777
            ),
        ));
    }
    Ok(dir)
}

/// This process's effective user: the owner of `/proc/self`.
fn my_uid() -> io::Result<u32> {
    Ok(std::fs::metadata("/proc/self")?.uid())
}

/// A running control socket. Dropping it stops serving and removes the socket file.
#[derive(Debug)]
pub struct ControlServer {
    path: PathBuf,
    id: String,
    /// Shared with the serving thread, so its descriptor stays open until both are done.
    listener: Arc<UnixListener>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ControlServer {
    /// Serves `stack` on a new socket in `dir` (default: [`control_dir`]).
    pub fn start(stack: &Stack, dir: Option<&Path>) -> io::Result<ControlServer> {
        let dir = match dir {
            Some(d) => d.to_path_buf(),
            None => control_dir()?,
        };
        let id = format!(
            "{}.{}",
            std::process::id(),
            NEXT_STACK.fetch_add(1, Ordering::Relaxed)
        );
        let path = dir.join(format!("{id}.sock"));
        // A socket left by a process that had our PID before us.
        let _ = std::fs::remove_file(&path);
        let listener = Arc::new(UnixListener::bind(&path)?);
        let stop = Arc::new(AtomicBool::new(false));
        let ctx = Ctx {
            stack: Arc::downgrade(&stack.inner),
            id: id.clone(),
            started: Instant::now(),
            busy: Arc::new(AtomicUsize::new(0)),
            heavy: Arc::new(std::sync::Mutex::new(())),
        };
        let s2 = stop.clone();
        let l2 = listener.clone();
        let thread = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .and_then(|()| {
                std::thread::Builder::new()
                    .name("ember-control".into())
                    .spawn(move || serve(&l2, ctx, s2))
            });
        let thread = match thread {
            Ok(t) => t,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
        };
        Ok(ControlServer {
            path,
            id,
            listener,
            stop,
            thread: Some(thread),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stack's ID (`PID.N`), as `ember ls` shows it.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        wake_accept(&self.listener);
        if let Some(t) = self.thread.take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

#[derive(Clone)]
struct Ctx {
    stack: Weak<StackInner>,
    id: String,
    started: Instant,
    busy: Arc<AtomicUsize>,
    /// Held by a request that visits every squeue (`kstat`, `netstat`): one at a time.
    heavy: Arc<std::sync::Mutex<()>>,
}

/// Gives a request slot back when its thread ends, however it ends.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Makes a thread blocked in `accept` on `l` return (with `EINVAL`), whether or not the
/// socket's path still exists.
#[allow(unsafe_code)]
fn wake_accept(l: &UnixListener) {
    use std::os::fd::AsRawFd;
    // SAFETY: shutdown(2) takes no pointers; the descriptor is open, because `l` is
    // borrowed from an `Arc` the caller holds, so it cannot have been closed and reused.
    unsafe { libc::shutdown(l.as_raw_fd(), libc::SHUT_RDWR) };
}

fn serve(listener: &UnixListener, ctx: Ctx, stop: Arc<AtomicBool>) {
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let conn = match conn {
            Ok(c) => c,
            // The listener was shut down.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return,
            // Out of descriptors or memory: try again a little later.
            Err(_) => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        let slot = Slot(ctx.busy.clone());
        if ctx.busy.fetch_add(1, Ordering::SeqCst) >= MAX_CLIENTS {
            drop(slot);
            let _ = conn.set_write_timeout(Some(IO_TIMEOUT));
            let _ = (&conn).write_all(b"error busy: too many control requests at once\n");
            continue;
        }
        let c = ctx.clone();
        // A failed spawn drops the closure, and with it the slot.
        let _ = std::thread::Builder::new()
            .name("ember-control-req".into())
            .spawn(move || {
                let _slot = slot;
                answer(&c, conn);
            });
    }
}

/// Reads one request line from `conn` by `deadline`, without its newline (or all the
/// bytes up to end of file). Stops at [`MAX_REQUEST`] bytes: a longer line is returned
/// cut there (at most 512 bytes past the limit), and [`parse_request`] refuses it.
fn read_request(conn: &UnixStream, deadline: Instant) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(err(
                io::ErrorKind::TimedOut,
                "the request did not arrive in time",
            ));
        }
        conn.set_read_timeout(Some(left))?;
        let n = match (&*conn).read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(err(
                    io::ErrorKind::TimedOut,
                    "the request did not arrive in time",
                ))
            }
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Ok(line);
        }
        match buf[..n].iter().position(|&b| b == b'\n') {
            Some(i) => {
                line.extend_from_slice(&buf[..i]);
                return Ok(line);
            }
            None => line.extend_from_slice(&buf[..n]),
        }
        if line.len() >= MAX_REQUEST {
            return Ok(line);
        }
    }
}

/// Writes `out` to `conn` by `deadline` (a reader that takes it too slowly is cut off).
fn write_answer(conn: &UnixStream, out: &[u8], deadline: Instant) -> io::Result<()> {
    let mut at = 0;
    while at < out.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(err(io::ErrorKind::TimedOut, "answer not taken in time"));
        }
        conn.set_write_timeout(Some(left))?;
        match (&*conn).write(&out[at..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads one request from `conn`, answers it, closes.
fn answer(ctx: &Ctx, conn: UnixStream) {
    let reply =
        read_request(&conn, Instant::now() + IO_TIMEOUT).and_then(|line| handle(ctx, &line));
    let mut out = Vec::new();
    match reply {
        Ok(body) => {
            out.extend_from_slice(b"ok\n");
            out.extend_from_slice(body.as_bytes());
        }
        Err(e) => {
            let kind = match e.kind() {
                io::ErrorKind::NotFound => "not-found",
                io::ErrorKind::NotConnected => "gone",
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => "timeout",
                _ => "invalid",
            };
            let msg = e.to_string().replace('\n', " ");
            let _ = writeln!(out, "error {kind}: {msg}");
        }
    }
    let _ = write_answer(&conn, &out, Instant::now() + ANSWER_TIMEOUT);
    let _ = conn.shutdown(std::net::Shutdown::Both);
}

fn err(kind: io::ErrorKind, msg: impl Into<String>) -> io::Error {
    io::Error::new(kind, msg.into())
}

/// A parsed control request (the table in the module documentation). Its `Display`
/// form is the canonical request line, which [`parse_request`] reads back as the same
/// request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request<'a> {
    /// `info`
    Info,
    /// `ndd list`
    NddList,
    /// `ndd get NAME`
    NddGet(&'a str),
    /// `ndd set NAME VALUE`
    NddSet(&'a str, &'a str),
    /// `kstat [MODULE[:NAME]]`
    Kstat(Option<&'a str>),
    /// `netstat [-f]`
    Netstat { full: bool },
}

impl std::fmt::Display for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Request::Info => f.write_str("info"),
            Request::NddList => f.write_str("ndd list"),
            Request::NddGet(name) => write!(f, "ndd get {name}"),
            Request::NddSet(name, value) => write!(f, "ndd set {name} {value}"),
            Request::Kstat(None) => f.write_str("kstat"),
            Request::Kstat(Some(filter)) => write!(f, "kstat {filter}"),
            Request::Netstat { full: false } => f.write_str("netstat"),
            Request::Netstat { full: true } => f.write_str("netstat -f"),
        }
    }
}

/// Parses one request as a client sends it: the bytes up to the first newline (anything
/// after it is not part of the request; the server never reads it), which must be fewer
/// than [`MAX_REQUEST`] (the newline makes the limit), non-empty and UTF-8. Whitespace
/// around the request, a `\r` before the newline included, is ignored; words are
/// separated by any whitespace. Every error is `InvalidInput`, with the message the
/// server answers (`error invalid: MESSAGE`).
pub fn parse_request(line: &[u8]) -> io::Result<Request<'_>> {
    parse_words(request_text(line)?)
}

/// The framing checks of [`parse_request`], made before the stack is looked at: the
/// request's text, trimmed.
fn request_text(line: &[u8]) -> io::Result<&str> {
    let line = match line.iter().position(|&b| b == b'\n') {
        Some(i) => &line[..i],
        None => line,
    };
    if line.len() >= MAX_REQUEST {
        return Err(err(
            io::ErrorKind::InvalidInput,
            format!("request longer than {MAX_REQUEST} bytes"),
        ));
    }
    if line.is_empty() {
        return Err(err(io::ErrorKind::InvalidInput, "empty request"));
    }
    match std::str::from_utf8(line) {
        Ok(s) => Ok(s.trim()),
        Err(_) => Err(err(io::ErrorKind::InvalidInput, "request is not UTF-8")),
    }
}

/// The request named by the (trimmed) text `req`.
fn parse_words(req: &str) -> io::Result<Request<'_>> {
    let mut words = req.split_whitespace();
    let first = [words.next(), words.next(), words.next(), words.next()];
    let parsed = if words.next().is_some() {
        None
    } else {
        match first {
            [Some("info"), None, ..] => Some(Request::Info),
            [Some("ndd"), Some("list"), None, _] => Some(Request::NddList),
            [Some("ndd"), Some("get"), Some(name), None] => Some(Request::NddGet(name)),
            [Some("ndd"), Some("set"), Some(name), Some(value)] => {
                Some(Request::NddSet(name, value))
            }
            [Some("kstat"), None, ..] => Some(Request::Kstat(None)),
            [Some("kstat"), Some(filter), None, _] => Some(Request::Kstat(Some(filter))),
            [Some("netstat"), None, ..] => Some(Request::Netstat { full: false }),
            [Some("netstat"), Some("-f"), None, _] => Some(Request::Netstat { full: true }),
            _ => None,
        }
    };
    parsed.ok_or_else(|| {
        err(
            io::ErrorKind::InvalidInput,
            format!(
                "unknown request '{}'; requests: info, ndd list, ndd get NAME, \
                 ndd set NAME VALUE, kstat [MODULE[:NAME]], netstat [-f]",
                req.chars().take(80).collect::<String>()
            ),
        )
    })
}

/// Answers one request line (as [`read_request`] returns it).
fn handle(ctx: &Ctx, line: &[u8]) -> io::Result<String> {
    // The order of the checks is the answer's: framing, then the stack, then the words.
    let req = request_text(line)?;
    let Some(inner) = ctx.stack.upgrade() else {
        return Err(err(io::ErrorKind::NotConnected, "the stack has gone"));
    };
    let stack = Stack { inner };
    if stack.inner.closing.load(Ordering::SeqCst) && req.split_whitespace().next() != Some("info") {
        return Err(err(io::ErrorKind::NotConnected, "the stack has shut down"));
    }
    match parse_words(req)? {
        Request::Info => Ok(info(ctx, &stack)),
        Request::NddList => Ok(ndd_list(&stack.params())),
        Request::NddGet(name) => stack
            .params()
            .get(name)
            .map(|v| format!("{v}\n"))
            .ok_or_else(|| {
                err(
                    io::ErrorKind::NotFound,
                    ParamError::Unknown(name.to_string()).to_string(),
                )
            }),
        Request::NddSet(name, value) => {
            stack.set_param(name, value).map_err(|e| match e {
                ParamError::Unknown(_) => err(io::ErrorKind::NotFound, e.to_string()),
                e => e.into(),
            })?;
            Ok(format!(
                "{name} {}\n",
                stack.params().get(name).unwrap_or_default()
            ))
        }
        Request::Kstat(filter) => heavy(ctx, || kstat(&stack, filter)),
        Request::Netstat { full } => heavy(ctx, || Ok(netstat(&stack, full))),
    }
}

/// Runs a request that visits every squeue, one at a time: however many clients ask, the
/// squeues serve at most one of them at once.
fn heavy(ctx: &Ctx, f: impl FnOnce() -> io::Result<String>) -> io::Result<String> {
    let _one = ctx.heavy.lock().unwrap_or_else(|e| e.into_inner());
    f()
}

fn info(ctx: &Ctx, stack: &Stack) -> String {
    let addrs: Vec<String> = stack.addrs().iter().map(|a| a.to_string()).collect();
    let comm = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
    let conns = stack.inner.classifier.len();
    format!(
        "id {}\npid {}\ncommand {}\nsqueues {}\naddrs {}\nconnections {}\nuptime_s {}\nstate {}\n",
        ctx.id,
        std::process::id(),
        comm.trim(),
        stack.squeue_count(),
        if addrs.is_empty() {
            "lo".to_string()
        } else {
            addrs.join(",")
        },
        conns,
        ctx.started.elapsed().as_secs(),
        if stack.inner.closing.load(Ordering::SeqCst) {
            "shut-down"
        } else {
            "running"
        }
    )
}

/// The `ndd` listing: one line per tunable (also what `ember ndd -list` prints without
/// a running stack, from the defaults).
pub fn ndd_list(p: &Params) -> String {
    let mut s = String::new();
    for i in p.describe() {
        let _ = writeln!(
            s,
            "{:<30} {:>12} (default {}, {} {}) {}",
            i.name, i.value, i.default, i.range, i.unit, i.description
        );
    }
    s
}

fn kstat(stack: &Stack, filter: Option<&str>) -> io::Result<String> {
    let all = stack.kstat();
    let (module, name) = match filter {
        None => (None, None),
        Some(f) => match f.split_once(':') {
            Some((m, n)) => (Some(m), Some(n)),
            None => (Some(f), None),
        },
    };
    let mut s = String::new();
    let mut modules: Vec<&str> = Vec::new();
    for (k, v) in &all {
        let (m, n) = k.split_once(':').unwrap_or((k.as_str(), ""));
        if !modules.contains(&m) {
            modules.push(m);
        }
        if module.is_some_and(|x| x != m) || name.is_some_and(|x| x != n) {
            continue;
        }
        let _ = writeln!(s, "{k} {v}");
    }
    if s.is_empty() {
        let what = filter.unwrap_or_default();
        return Err(err(
            io::ErrorKind::NotFound,
            match module {
                Some(m) if !modules.contains(&m) => {
                    format!("no kstat module '{m}'; modules: {}", modules.join(", "))
                }
                _ => {
                    let want = name.unwrap_or_default().to_ascii_lowercase();
                    let near: Vec<&str> = all
                        .iter()
                        .map(|(k, _)| k.as_str())
                        .filter(|k| {
                            let (m, n) = k.split_once(':').unwrap_or((k, ""));
                            Some(m) == module
                                && !want.is_empty()
                                && n.to_ascii_lowercase().contains(&want)
                        })
                        .take(5)
                        .collect();
                    if near.is_empty() {
                        format!("no kstat '{what}'")
                    } else {
                        format!("no kstat '{what}'; nearest: {}", near.join(", "))
                    }
                }
            },
        ));
    }
    Ok(s)
}

fn netstat(stack: &Stack, full: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<21} {:<21} {:<11} {:>2} {:>5} {:>8} {:>8} {:>7} {:>9} {:>7}",
        "Local Address",
        "Remote Address",
        "State",
        "Sq",
        "Fused",
        "Send-Q",
        "Recv-Q",
        "cwnd",
        "srtt(us)",
        "retrans"
    );
    let mut ls = stack.inner.classifier.listeners();
    ls.sort_by_key(|l| (u32::from(*l.local.ip()), l.local.port()));
    for l in ls {
        if l.closed.load(Ordering::Relaxed) {
            continue;
        }
        let queued = l.accept_q.lock().len();
        let _ = writeln!(
            s,
            "{:<21} {:<21} {:<11} {:>2} {:>5} {:>8} {:>8} {:>7} {:>9} {:>7}",
            l.local.to_string(),
            "*:*",
            "LISTEN",
            "-",
            "-",
            l.backlog.load(Ordering::Relaxed),
            queued,
            "-",
            "-",
            "-"
        );
        if full {
            let _ = writeln!(s, "\t syn_queue:{}", l.syn_q.load(Ordering::Relaxed));
        }
    }
    let mut conns = stack.netstat();
    conns.sort_by_key(|(i, _, _)| {
        (
            u32::from(*i.local.ip()),
            i.local.port(),
            u32::from(*i.remote.ip()),
            i.remote.port(),
        )
    });
    for (i, sq, fused) in conns {
        let srtt = i
            .srtt
            .map_or_else(|| "-".to_string(), |d| d.as_micros().to_string());
        let _ = writeln!(
            s,
            "{:<21} {:<21} {:<11} {:>2} {:>5} {:>8} {:>8} {:>7} {:>9} {:>7}",
            i.local.to_string(),
            i.remote.to_string(),
            i.state.name(),
            sq,
            if fused { "yes" } else { "no" },
            i.send_queued,
            i.recv_queued,
            i.cwnd,
            srtt,
            i.stats.retrans_segs
        );
        if full {
            let stats = &i.stats;
            let _ = writeln!(
                s,
                "\t {} wscale:{},{} rto:{}ms rttvar:{}us mss:{} pmtu:{} rcvmss:{} ssthresh:{} \
                 snd_wnd:{} rcv_wnd:{} unacked:{} sacked:{} lost:{} ooo_bytes:{} \
                 bytes_sent:{} bytes_retrans:{} bytes_received:{} segs_out:{} segs_in:{} \
                 fast_retrans:{} timeouts:{} backoff:{}{}{}",
                i.cc,
                i.snd_wscale,
                i.rcv_wscale,
                i.rto.as_millis(),
                i.rttvar.as_micros(),
                i.snd_mss,
                i.pmtu,
                i.rcv_mss,
                i.ssthresh,
                i.snd_wnd,
                i.rcv_wnd,
                i.unacked,
                i.sacked,
                i.lost,
                i.ooo_bytes,
                stats.bytes_out,
                stats.retrans_bytes,
                i.bytes_received,
                stats.segs_out,
                stats.segs_in,
                stats.fast_retransmits,
                stats.timeouts,
                i.backoff,
                if i.sack { " sack" } else { "" },
                if i.timestamps { " ts" } else { "" },
            );
        }
    }
    s
}

/// Sends one request line to the control socket at `path` and returns the body of an
/// `ok` answer; an `error` answer becomes an `io::Error` of the matching kind.
pub fn request(path: &Path, line: &str) -> io::Result<String> {
    // Counters are summed across squeues and netstat visits each: allow the stack time.
    request_within(path, line, Duration::from_secs(30))
}

/// [`request`], waiting at most `wait` for each read of the answer.
pub fn request_within(path: &Path, line: &str, wait: Duration) -> io::Result<String> {
    if line.contains('\n') || line.len() >= MAX_REQUEST {
        return Err(err(
            io::ErrorKind::InvalidInput,
            "a request is one line shorter than 4096 bytes",
        ));
    }
    let mut c = UnixStream::connect(path)?;
    c.set_write_timeout(Some(IO_TIMEOUT))?;
    c.set_read_timeout(Some(wait))?;
    // A server that answers without reading (`busy`) may close before the request is
    // written: its answer still counts.
    let sent = c
        .write_all(line.as_bytes())
        .and_then(|()| c.write_all(b"\n"));
    let mut out = String::new();
    let got = (&c).take(MAX_RESPONSE).read_to_string(&mut out);
    if out.is_empty() {
        sent?;
        got?;
    }
    let (head, body) = out.split_once('\n').unwrap_or((out.as_str(), ""));
    if head == "ok" {
        return Ok(body.to_string());
    }
    let Some(rest) = head.strip_prefix("error ") else {
        return Err(err(
            io::ErrorKind::InvalidData,
            format!("not an ember control socket answer: {head:?}"),
        ));
    };
    let (kind, msg) = rest.split_once(": ").unwrap_or(("invalid", rest));
    let kind = match kind {
        "not-found" => io::ErrorKind::NotFound,
        "gone" => io::ErrorKind::NotConnected,
        "busy" => io::ErrorKind::ResourceBusy,
        "timeout" => io::ErrorKind::TimedOut,
        _ => io::ErrorKind::InvalidInput,
    };
    Err(err(kind, msg))
}

/// A stack found in the control directory.
#[derive(Debug, Clone)]
pub struct StackRef {
    /// `PID.N`.
    pub id: String,
    pub path: PathBuf,
}

/// The control sockets in `dir` (default: [`control_dir`]) whose process is alive, by
/// ID. Sockets of processes that have exited are removed.
pub fn list_stacks(dir: Option<&Path>) -> io::Result<Vec<StackRef>> {
    let dir = match dir {
        Some(d) => d.to_path_buf(),
        None => control_dir()?,
    };
    let mut v = Vec::new();
    for e in std::fs::read_dir(&dir)? {
        let e = e?;
        let name = e.file_name();
        let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".sock")) else {
            continue;
        };
        if !is_stack_id(id) || !e.file_type().is_ok_and(|t| t.is_socket()) {
            continue;
        }
        // Nobody listens any more (its process ended without removing it): clean up.
        // Any other outcome (a live stack, a permission problem) keeps the entry.
        if let Err(x) = UnixStream::connect(e.path()) {
            if x.kind() == io::ErrorKind::ConnectionRefused {
                let _ = std::fs::remove_file(e.path());
                continue;
            }
        }
        v.push(StackRef {
            id: id.to_string(),
            path: e.path(),
        });
    }
    v.sort_by_key(|s| {
        let mut it = s.id.split('.').map(|x| x.parse::<u64>().unwrap_or(0));
        (it.next().unwrap_or(0), it.next().unwrap_or(0))
    });
    Ok(v)
}

/// `PID.N`, both decimal numbers.
fn is_stack_id(id: &str) -> bool {
    let mut it = id.split('.');
    let num =
        |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    num(it.next()) && num(it.next()) && it.next().is_none()
}

/// Chooses the stack a command talks to: `which` is an ID (`PID.N`, or a PID with one
/// stack), or a socket path; without it, the only stack running.
pub fn find_stack(which: Option<&str>, dir: Option<&Path>) -> io::Result<PathBuf> {
    if let Some(w) = which {
        if w.contains('/') {
            return Ok(PathBuf::from(w));
        }
    }
    let which = which.map(|w| w.strip_suffix(".sock").unwrap_or(w));
    let all = list_stacks(dir)?;
    let pick: Vec<&StackRef> = match which {
        None => all.iter().collect(),
        Some(w) if w.contains('.') => all.iter().filter(|s| s.id == w).collect(),
        Some(w) => all
            .iter()
            .filter(|s| s.id.split('.').next() == Some(w))
            .collect(),
    };
    let ids = || {
        all.iter()
            .map(|s| s.id.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match pick.as_slice() {
        [one] => Ok(one.path.clone()),
        [] if all.is_empty() => Err(err(
            io::ErrorKind::NotFound,
            "no ember stack is running (none serves a control socket)",
        )),
        [] => Err(err(
            io::ErrorKind::NotFound,
            format!("no stack '{}'; running: {}", which.unwrap_or(""), ids()),
        )),
        _ => Err(err(
            io::ErrorKind::InvalidInput,
            format!(
                "several stacks are running ({}); choose one with --stack",
                ids()
            ),
        )),
    }
}

impl Stack {
    /// Whether `self` and `other` are handles of the same stack.
    pub fn same_stack(&self, other: &Stack) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Serves this stack's control socket in the default directory ([`control_dir`])
    /// until the returned server is dropped.
    pub fn serve_control(&self) -> io::Result<ControlServer> {
        ControlServer::start(self, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid(line: &[u8]) -> String {
        let e = parse_request(line).expect_err("an error");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        e.to_string()
    }

    #[test]
    fn parses_every_request() {
        let cases: [(&[u8], Request); 9] = [
            (b"info", Request::Info),
            (b"ndd list\n", Request::NddList),
            (b"ndd get tcp_mss\r\n", Request::NddGet("tcp_mss")),
            (b"  ndd\tset  a b ", Request::NddSet("a", "b")),
            (b"kstat", Request::Kstat(None)),
            (b"kstat tcp:conns", Request::Kstat(Some("tcp:conns"))),
            (b"netstat", Request::Netstat { full: false }),
            (b"netstat -f\nignored \xff", Request::Netstat { full: true }),
            (b"info\n\n", Request::Info),
        ];
        for (line, want) in cases {
            let got = parse_request(line).expect("parses");
            assert_eq!(got, want, "{:?}", String::from_utf8_lossy(line));
            // The canonical text reads back as the same request.
            assert_eq!(parse_request(got.to_string().as_bytes()).unwrap(), want);
        }
    }

    #[test]
    fn unknown_requests_are_invalid_input() {
        for line in [
            &b"bogus"[..],
            b"info extra",
            b"ndd",
            b"ndd get",
            b"ndd set a",
            b"ndd set a b c",
            b"kstat a b",
            b"netstat -x",
            b"netstat -f -f",
            b"NDD list",
            b"   ",
            b"\r",
        ] {
            let msg = invalid(line);
            assert!(msg.starts_with("unknown request '"), "{msg}");
        }
        // The echo of the request is cut at 80 characters.
        let long = format!("x{}", "é".repeat(200));
        let msg = invalid(long.as_bytes());
        assert!(msg.starts_with(&format!("unknown request 'x{}';", "é".repeat(79))));
    }

    #[test]
    fn framing_errors() {
        assert_eq!(invalid(b""), "empty request");
        assert_eq!(invalid(b"\n"), "empty request");
        assert_eq!(invalid(b"info\xff"), "request is not UTF-8");
        assert_eq!(invalid(b"\xc3"), "request is not UTF-8");
        // MAX_REQUEST counts the newline: MAX_REQUEST - 1 bytes of text is the longest.
        let mut ok = b"kstat ".to_vec();
        ok.resize(MAX_REQUEST - 1, b'a');
        assert!(parse_request(&ok).is_ok());
        ok.push(b'\n');
        assert!(parse_request(&ok).is_ok());
        let mut long = ok.clone();
        long.pop();
        long.push(b'a');
        let too_long = format!("request longer than {MAX_REQUEST} bytes");
        assert_eq!(invalid(&long), too_long);
        long.push(b'\n');
        assert_eq!(invalid(&long), too_long);
        assert_eq!(invalid(&vec![0xff; 1 << 20]), too_long);
    }
}
