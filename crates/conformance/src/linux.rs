//! The Linux backend: the same scripts against the Linux kernel, to calibrate the
//! interpreter. A script Linux fails here is an interpreter bug (or a kernel that changed
//! since the script was written), not an ember bug; the ember backend's score is read
//! against this one.
//!
//! Design. Each script gets a network namespace of its own (`emberpd-PID-N`, deleted
//! afterwards) with one TUN device, `tun0` (IFF_TUN|IFF_NO_PI|IFF_VNET_HDR with checksum
//! offload and no TSO, so every packet is at most one MSS; a line the corpus writes as a
//! super-segment, `> P. 1:10001(10000)`, is matched by the train of packets that carries
//! it, see `gso_train`). The kernel's side is `198.18.0.1/15` and the script's
//! peer is `198.19.0.1`, reached through `tun0`: every address is inside 198.18.0.0/15
//! and inside the namespace. A thread of the run enters the namespace (setns is per
//! thread) and everything it starts (the system-call worker thread, shell commands)
//! lives there too, so `sysctl` lines change only the namespace's copy of the per-netns
//! TCP settings; a sysctl outside `net.` is refused as unsupported so a script can never
//! change the host.
//!
//! Time is the wall clock: script time 0 is the moment after the untimed set-up command.
//! The main thread waits for each event's time in `ppoll(2)` on the TUN descriptor and an
//! eventfd, stamping every packet the kernel sends as it is read, and
//! * writes an inbound line's datagram (built by [`build_inbound`](crate::packets::build_inbound), behind a zero virtio
//!   header) to the TUN at its time;
//! * matches an outbound line against the next packet within the tolerance window, as the
//!   ember backend does (same [`match_outbound`](crate::packets::match_outbound), same relative numbers), with a
//!   `NEEDS_CSUM` packet's checksum completed first. Packets are matched in order;
//!   packets no outbound line claims are not an error (the corpus's own scripts need
//!   this: `blocking/blocking-write.pkt` never scripts the data its write sends);
//! * hands a system call to the worker thread at its time. A call written with `...end`
//!   may block: the main thread goes on with later lines and checks the call's result and
//!   completion time (stamped by the worker) against `end` ± tolerance before the next
//!   event; a call with no `...` must return within the tolerance of its start;
//! * runs shell lines with `sh -c` in the script's directory (bounded to 30 s). The
//!   corpus's `set_sysctls.py /proc/sys/net/...=V` helper (referenced, not shipped) is
//!   done natively: each value is written to its file under `/proc/sys/net/`;
//! * evaluates `%{ }%` assertions on `getsockopt(TCP_INFO)` of the last socket used
//!   (the fields of `struct tcp_info` in the kernel's UAPI layout).
//!
//! System calls are the kernel's own, on real sockets: script fd numbers are mapped to
//! real ones (a new socket takes the number the script expects when it is a free number
//! from 3). Buffers are `...` (zeros written, bytes read discarded), a string, or `NULL`
//! (the kernel answers EFAULT). Out-values written in the script (`getsockopt`'s value,
//! `ioctl`'s count, `poll`'s `revents`, `epoll_wait`'s event) must equal the kernel's.
//! What the worker cannot express (control messages, `splice`, `sendfile`, files) ends the
//! script as unsupported with the call's name.
//!
//! Safety: every blocking call the worker makes can be woken at the end of the run
//! (`shutdown(2)` on every socket), and the worker is joined before the descriptors are
//! closed, so a descriptor number is never reused under a call still in progress; a run
//! also has a wall-clock budget ([`LinuxOptions::max_seconds`]).

use std::collections::BTreeMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant as WallInstant};

use ember_core::Instant;
use ember_runtime::dev::netns::{self, NetNs};
use ember_runtime::dev::tap::{self, complete_checksum};

use crate::packets::Flow;
use crate::runner::{
    assert_text, check_ret, check_return_time, code_eval, code_names, fail, outcome, run_events,
    still_blocked, summarize, unsup, us, Backend, Core, Outcome, Point, RunResult, Stop,
    DEFAULT_PORT, DEFAULT_TOLERANCE_US, R, REMOTE_PORT,
};
use crate::script::{CodeBlock, CodeExpr, CodeStmtKind, Expr, ExprKind, Script, Syscall};
use crate::syscalls::{poll_text, sockaddr_arg};
use crate::tcp_info::code_constant;

/// The kernel's address in the namespace.
pub const LINUX_LOCAL_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// The script peer's address (routed through `tun0`).
pub const LINUX_REMOTE_IP: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);

const VNET_HDR_LEN: usize = 10;
const MAX_BUFFER: usize = 64 << 20;
/// How long a call written without `...` may take before it counts as blocked.
const UNTIMED_CALL_LIMIT: Duration = Duration::from_secs(1);
/// How long after an outbound packet the rest of a GSO train may arrive.
const GSO_TRAIN_GAP: Duration = Duration::from_millis(1);

/// Bounds on one run.
#[derive(Debug, Clone)]
pub struct LinuxOptions {
    /// Wall-clock seconds a script may take (its events' times, not counting set-up).
    pub max_seconds: u64,
}

impl Default for LinuxOptions {
    fn default() -> Self {
        LinuxOptions { max_seconds: 180 }
    }
}

/// Whether this process can run the Linux backend (root, `ip`, `/dev/net/tun`); `Err`
/// says why not.
pub fn available() -> Result<(), String> {
    netns::privileged()
}

static RUNS: AtomicUsize = AtomicUsize::new(0);

/// A private copy of a corpus tree (deleted on drop) in which the helper scripts
/// (`*.sh`, `*.py`) are executable: the corpus is kept as data, without the execute bits
/// its shell lines rely on (`../common/defaults.sh` is run as a program, and calls
/// others the same way).
///
/// Symbolic links are kept working in both forms the corpus comes in: as Google's
/// repository ships it, `tcp/common/defaults.sh` is a real symlink to
/// `../../common/defaults.sh`; a checkout that cannot hold links (or an archive that
/// flattened them) has a text file holding the target instead ([`flattened_link`]). A
/// link whose target resolves inside the copied tree becomes a relative link to the
/// copy's counterpart; one whose target is outside becomes a copy of the target's
/// contents (a file, or a directory copied the same way). A dangling link, or one in a
/// loop, is left out. Every directory is copied at most once (an outside directory
/// reached through links twice is copied the first time only), at most 32 levels deep,
/// and the whole copy is bounded like the tree itself.
#[derive(Debug)]
pub struct CorpusCopy {
    root: PathBuf,
}

/// Bounds on a [`CorpusCopy`].
const COPY_MAX_ENTRIES: usize = 10_000;
const COPY_MAX_BYTES: u64 = 64 << 20;
const COPY_MAX_DEPTH: usize = 32;

impl CorpusCopy {
    /// Copies the tree under `src` (at most 10,000 entries and 64 MiB).
    pub fn new(src: &Path) -> io::Result<CorpusCopy> {
        let root = std::env::temp_dir().join(format!(
            "ember-pd-corpus-{}-{}",
            std::process::id(),
            RUNS.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root)?;
        let copy = CorpusCopy { root };
        let src = std::fs::canonicalize(src)?;
        let mut w = CopyWalk {
            src: &src,
            dest: &copy.root,
            entries: 0,
            bytes: 0,
            dirs_done: std::collections::HashSet::new(),
            stack: Vec::new(),
        };
        w.dirs_done.insert(src.clone());
        w.stack.push((src.clone(), copy.root.clone(), 0));
        while let Some((dir, dest, depth)) = w.stack.pop() {
            w.copy_dir(&dir, &dest, depth)?;
        }
        Ok(copy)
    }

    /// The copy's root (the counterpart of `src`).
    pub fn path(&self) -> &Path {
        &self.root
    }
}

/// The state of one [`CorpusCopy::new`]: the (canonical) source root, the copy's root,
/// what has been copied so far, and the directories still to copy.
struct CopyWalk<'a> {
    src: &'a Path,
    dest: &'a Path,
    entries: usize,
    bytes: u64,
    /// Canonical source directories already copied (or queued).
    dirs_done: std::collections::HashSet<PathBuf>,
    /// (source directory, its copy, depth)
    stack: Vec<(PathBuf, PathBuf, usize)>,
}

impl CopyWalk<'_> {
    fn count(&mut self, bytes: u64) -> io::Result<()> {
        self.entries += 1;
        self.bytes += bytes;
        if self.entries > COPY_MAX_ENTRIES || self.bytes > COPY_MAX_BYTES {
            return Err(io::Error::other(
                "corpus larger than 10,000 entries or 64 MiB",
            ));
        }
        Ok(())
    }

    fn copy_dir(&mut self, dir: &Path, dest: &Path, depth: usize) -> io::Result<()> {
        if depth > COPY_MAX_DEPTH {
            return Err(io::Error::other(format!(
                "corpus nested deeper than {COPY_MAX_DEPTH} directories at {}",
                dir.display()
            )));
        }
        std::fs::create_dir_all(dest)?;
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            let path = e.path();
            let to = dest.join(e.file_name());
            let ty = e.file_type()?;
            if ty.is_dir() {
                self.count(0)?;
                let real = std::fs::canonicalize(&path)?;
                if self.dirs_done.insert(real) {
                    self.stack.push((path, to, depth + 1));
                }
            } else if ty.is_symlink() {
                // canonicalize follows the whole chain; a dangling link or a loop
                // (ELOOP) has no target and is left out.
                if let Ok(target) = std::fs::canonicalize(&path) {
                    self.copy_link(&target, &to, depth)?;
                }
            } else if ty.is_file() {
                match flattened_link(&path)? {
                    Some(t) => {
                        let target = std::fs::canonicalize(path.parent().unwrap_or(dir).join(t))?;
                        self.copy_link(&target, &to, depth)?;
                    }
                    None => self.copy_file(&path, &to)?,
                }
            }
        }
        Ok(())
    }

    /// A link at `to` (in the copy) whose source resolves to `target` (canonical).
    fn copy_link(&mut self, target: &Path, to: &Path, depth: usize) -> io::Result<()> {
        if let Ok(rel) = target.strip_prefix(self.src) {
            // Inside the tree: a relative link from `to`'s directory to the copy's
            // counterpart of the target.
            self.count(0)?;
            let from = to
                .parent()
                .and_then(|p| p.strip_prefix(self.dest).ok())
                .unwrap_or(Path::new(""));
            let mut link = PathBuf::new();
            for _ in from.components() {
                link.push("..");
            }
            link.push(rel);
            if link.as_os_str().is_empty() {
                link.push(".");
            }
            return std::os::unix::fs::symlink(link, to);
        }
        let meta = std::fs::metadata(target)?;
        if meta.is_dir() {
            self.count(0)?;
            if self.dirs_done.insert(target.to_path_buf()) {
                self.stack
                    .push((target.to_path_buf(), to.to_path_buf(), depth + 1));
            }
            Ok(())
        } else if meta.is_file() {
            self.copy_file(target, to)
        } else {
            Ok(())
        }
    }

    fn copy_file(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        let len = std::fs::metadata(from)?.len();
        self.count(len)?;
        std::fs::copy(from, to)?;
        let name = to.to_string_lossy();
        if name.ends_with(".sh") || name.ends_with(".py") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755))?;
        }
        Ok(())
    }
}

/// A symbolic link that was stored as a text file holding its target (the corpus's
/// `tcp/common/defaults.sh` is `../../common/defaults.sh`): the target, if the file is
/// one short relative path naming an existing file.
fn flattened_link(path: &Path) -> io::Result<Option<PathBuf>> {
    if std::fs::metadata(path)?.len() > 256 {
        return Ok(None);
    }
    let text = std::fs::read(path)?;
    let Ok(text) = std::str::from_utf8(&text) else {
        return Ok(None);
    };
    let t = text.trim();
    if t.is_empty() || t.contains(char::is_whitespace) || t.starts_with('/') || t.starts_with('#') {
        return Ok(None);
    }
    let target = PathBuf::from(t);
    let resolved = path.parent().unwrap_or(Path::new(".")).join(&target);
    Ok(resolved.is_file().then_some(target))
}

impl Drop for CorpusCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Runs `script` (whose file is in `dir`, the working directory of its shell lines)
/// against the Linux kernel and scores it.
pub fn run_script_linux(script: &Script, dir: &Path, opts: &LinuxOptions) -> Outcome {
    let err = |r: String| Outcome {
        result: RunResult::Error(r),
        detail: String::new(),
    };
    if let Err(e) = available() {
        return err(format!("the Linux backend cannot run here: {e}"));
    }
    let name = format!(
        "emberpd-{}-{}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    );
    let ns = match NetNs::create(&name) {
        Ok(ns) => ns,
        Err(e) => return err(format!("namespace {name}: {e}")),
    };
    let out = std::thread::scope(|s| {
        let h = std::thread::Builder::new()
            .name("pd-linux".into())
            .spawn_scoped(s, || -> Outcome {
                if let Err(e) = ns.enter() {
                    return err(format!("entering namespace {name}: {e}"));
                }
                // Set-up and teardown run at normal priority: they take the kernel's
                // RTNL lock, and a sysctl like disable_ipv6 that finds it held restarts
                // its write until it is free; a real-time thread retrying that way
                // starves the (normal) kworker that holds the lock on its CPU. (Seen: a
                // 226-script run took 18 minutes instead of 7 s, both CPUs busy.)
                let mut r = match Runner::new(script, dir, opts) {
                    Ok(r) => r,
                    Err(s) => {
                        return Outcome {
                            result: stop_to_result(s),
                            detail: String::new(),
                        }
                    }
                };
                realtime();
                let res = run_events(&mut r, script);
                normal_priority();
                r.teardown();
                outcome(res, &r.core.trace)
            });
        match h {
            Err(e) => err(format!("thread: {e}")),
            Ok(h) => h
                .join()
                .unwrap_or_else(|_| err("the Linux runner panicked".into())),
        }
    });
    drop(ns);
    out
}

/// Puts the calling thread in the real-time class (SCHED_FIFO, low priority, reset on
/// fork so shell commands run normally) when allowed: the runner's threads sleep in
/// `ppoll`/`recv` between events, and on a busy machine a normal thread can wake
/// milliseconds late, which a script's 4 ms tolerance cannot absorb. Neither thread ever
/// spins, so this takes no CPU from anyone. Best effort: without the privilege nothing
/// changes.
fn realtime() {
    let p = libc::sched_param { sched_priority: 5 };
    // SAFETY: pid 0 is the calling thread; `p` is a valid sched_param.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &p) };
}

/// Puts the calling thread back in the normal class (see [`realtime`]).
fn normal_priority() {
    let p = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `p` is a valid sched_param.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &p) };
}

fn stop_to_result(s: Stop) -> RunResult {
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

fn os_err(what: &str) -> Stop {
    Stop::Error(format!("{what}: {}", io::Error::last_os_error()))
}

// -------------------------------------------------------------------------------------
// The TUN device.

const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;
const TUN_F_CSUM: libc::c_ulong = 0x01;

/// Opens `tun0` in the calling thread's namespace (the runtime's TUN/TAP opener),
/// non-blocking, with the virtio header and checksum offload only: without TSO the
/// kernel segments its GSO packets before the TUN, so every packet is at most one MSS,
/// as on a wire (see `gso_train`).
fn open_tun() -> R<OwnedFd> {
    tap::open_tun("tun0", IFF_TUN | IFF_NO_PI | IFF_VNET_HDR, TUN_F_CSUM)
        .map_err(|e| Stop::Error(format!("tun0: {e}")))
}

// -------------------------------------------------------------------------------------
// The system-call worker.

/// What the worker reports for one call.
#[derive(Debug)]
struct Done {
    /// When the call returned (script time).
    at: Instant,
    /// The outcome: the return value and errno, an out-value mismatch, or a stop.
    res: CallResult,
    /// Script fds the call created (socket, accept, epoll_create), for `tcp_info`.
    new_fd: Option<i64>,
}

type Fds = Arc<Mutex<BTreeMap<i64, RawFd>>>;

struct Worker {
    fds: Fds,
    t0: WallInstant,
    cc: Arc<Mutex<String>>,
}

fn lock(f: &Fds) -> std::sync::MutexGuard<'_, BTreeMap<i64, RawFd>> {
    f.lock().unwrap_or_else(|p| p.into_inner())
}

fn errno_name() -> &'static str {
    let e = io::Error::last_os_error().raw_os_error().unwrap_or(0);
    match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::EPIPE => "EPIPE",
        libc::ENOTSOCK => "ENOTSOCK",
        libc::EDESTADDRREQ => "EDESTADDRREQ",
        libc::EMSGSIZE => "EMSGSIZE",
        libc::EPROTOTYPE => "EPROTOTYPE",
        libc::ENOPROTOOPT => "ENOPROTOOPT",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::EADDRINUSE => "EADDRINUSE",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::ENETDOWN => "ENETDOWN",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ECONNABORTED => "ECONNABORTED",
        libc::ECONNRESET => "ECONNRESET",
        libc::ENOBUFS => "ENOBUFS",
        libc::EISCONN => "EISCONN",
        libc::ENOTCONN => "ENOTCONN",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        libc::EALREADY => "EALREADY",
        libc::EINPROGRESS => "EINPROGRESS",
        _ => "EUNKNOWN",
    }
}

/// Linux's value of a named constant the corpus writes.
fn lconst(w: &str) -> Option<i64> {
    Some(match w {
        "AF_INET" | "PF_INET" => 2,
        "AF_INET6" | "PF_INET6" => 10,
        "AF_UNSPEC" => 0,
        "SOCK_STREAM" => 1,
        "SOCK_DGRAM" => 2,
        "SOCK_NONBLOCK" | "O_NONBLOCK" => 0o4000,
        "SOCK_CLOEXEC" => 0o2_000_000,
        "IPPROTO_IP" | "SOL_IP" => 0,
        "IPPROTO_TCP" | "SOL_TCP" => 6,
        "IPPROTO_UDP" => 17,
        "SOL_SOCKET" => 1,
        "O_RDONLY" => 0,
        "O_WRONLY" => 1,
        "O_RDWR" => 2,
        "F_GETFL" => 3,
        "F_SETFL" => 4,
        "SO_REUSEADDR" => 2,
        "SO_ERROR" => 4,
        "SO_SNDBUF" => 7,
        "SO_RCVBUF" => 8,
        "SO_KEEPALIVE" => 9,
        "SO_LINGER" => 13,
        "SO_REUSEPORT" => 15,
        "SO_RCVLOWAT" => 18,
        "SO_SNDLOWAT" => 19,
        "SO_SNDBUFFORCE" => 32,
        "SO_RCVBUFFORCE" => 33,
        "SO_MAX_PACING_RATE" => 47,
        "SO_ZEROCOPY" => 60,
        "TCP_NODELAY" => 1,
        "TCP_MAXSEG" => 2,
        "TCP_CORK" => 3,
        "TCP_KEEPIDLE" => 4,
        "TCP_KEEPINTVL" => 5,
        "TCP_KEEPCNT" => 6,
        "TCP_SYNCNT" => 7,
        "TCP_LINGER2" => 8,
        "TCP_DEFER_ACCEPT" => 9,
        "TCP_WINDOW_CLAMP" => 10,
        "TCP_INFO" => 11,
        "TCP_QUICKACK" => 12,
        "TCP_CONGESTION" => 13,
        "TCP_USER_TIMEOUT" => 18,
        "TCP_FASTOPEN" => 23,
        "TCP_NOTSENT_LOWAT" => 25,
        "TCP_FASTOPEN_CONNECT" => 30,
        "TCP_FASTOPEN_NO_COOKIE" => 34,
        "TCP_INQ" => 36,
        "IP_TOS" => 1,
        "IP_TTL" => 2,
        "IP_MTU_DISCOVER" => 10,
        "IP_FREEBIND" => 15,
        "IP_PMTUDISC_DONT" => 0,
        "IP_PMTUDISC_WANT" => 1,
        "IP_PMTUDISC_DO" => 2,
        "IP_PMTUDISC_PROBE" => 3,
        "SHUT_RD" => 0,
        "SHUT_WR" => 1,
        "SHUT_RDWR" => 2,
        "MSG_OOB" => 1,
        "MSG_PEEK" => 2,
        "MSG_DONTROUTE" => 4,
        "MSG_TRUNC" => 0x20,
        "MSG_DONTWAIT" => 0x40,
        "MSG_EOR" => 0x80,
        "MSG_WAITALL" => 0x100,
        "MSG_ERRQUEUE" => 0x2000,
        "MSG_NOSIGNAL" => 0x4000,
        "MSG_MORE" => 0x8000,
        "MSG_ZEROCOPY" => 0x400_0000,
        "MSG_FASTOPEN" => 0x2000_0000,
        "POLLIN" | "EPOLLIN" => 0x1,
        "POLLPRI" | "EPOLLPRI" => 0x2,
        "POLLOUT" | "EPOLLOUT" => 0x4,
        "POLLERR" | "EPOLLERR" => 0x8,
        "POLLHUP" | "EPOLLHUP" => 0x10,
        "POLLNVAL" => 0x20,
        "POLLRDNORM" | "EPOLLRDNORM" => 0x40,
        "POLLRDBAND" | "EPOLLRDBAND" => 0x80,
        "POLLWRNORM" | "EPOLLWRNORM" => 0x100,
        "POLLWRBAND" | "EPOLLWRBAND" => 0x200,
        "POLLRDHUP" | "EPOLLRDHUP" => 0x2000,
        "EPOLLEXCLUSIVE" => 1 << 28,
        "EPOLLONESHOT" => 1 << 30,
        "EPOLLET" => 1 << 31,
        "EPOLL_CTL_ADD" => 1,
        "EPOLL_CTL_DEL" => 2,
        "EPOLL_CTL_MOD" => 3,
        "FIONREAD" | "SIOCINQ" => 0x541b,
        "SIOCOUTQ" => 0x5411,
        "SIOCOUTQNSD" => 0x894b,
        // The names code blocks use (TCP_CA_*, TCPI_OPT_*, the TCP_* states).
        _ => return code_constant(w),
    })
}

/// An integer argument: `...` is `None`; words are Linux's constants; `[x]` is `x`.
fn leval(e: &Expr) -> R<Option<i64>> {
    Ok(match &e.kind {
        ExprKind::Ellipsis => None,
        ExprKind::Int(v) => Some(*v),
        ExprKind::Word(w) => match lconst(w) {
            Some(v) => Some(v),
            None => return unsup(format!("constant {w}")),
        },
        ExprKind::BitOr(a, b) => match (leval(a)?, leval(b)?) {
            (Some(a), Some(b)) => Some(a | b),
            _ => None,
        },
        ExprKind::Array(v) if v.len() == 1 => leval(&v[0])?,
        other => return unsup(format!("expression {other:?}")),
    })
}

fn larg(sc: &Syscall, i: usize) -> R<Option<i64>> {
    match sc.args.get(i) {
        None => Ok(None),
        Some(e) => leval(e),
    }
}

/// A buffer argument: zeros for `...`, the bytes of a string, or NULL.
enum Buf {
    Zeros,
    Bytes(Vec<u8>),
    Null,
}

fn buf_arg(sc: &Syscall, i: usize) -> R<Buf> {
    match sc.args.get(i).map(|a| &a.kind) {
        None | Some(ExprKind::Ellipsis) => Ok(Buf::Zeros),
        Some(ExprKind::Str(b)) => Ok(Buf::Bytes(b.clone())),
        Some(ExprKind::Word(w)) if w == "NULL" => Ok(Buf::Null),
        Some(ExprKind::Int(0)) => Ok(Buf::Null),
        Some(k) => unsup(format!("{}() with a buffer argument {k:?}", sc.name)),
    }
}

fn len_arg(sc: &Syscall, i: usize) -> R<usize> {
    let n = larg(sc, i)?
        .ok_or_else(|| Stop::Unsupported(format!("{}() with a length of ...", sc.name)))?;
    let n = usize::try_from(n.max(0)).unwrap_or(usize::MAX);
    if n > MAX_BUFFER {
        return unsup(format!("{}() of more than {MAX_BUFFER} bytes", sc.name));
    }
    Ok(n)
}

type CallResult = R<(Result<i64, &'static str>, Option<(String, String)>)>;

fn ret(v: isize) -> Result<i64, &'static str> {
    if v < 0 {
        Err(errno_name())
    } else {
        Ok(v as i64)
    }
}

/// Compares an out-value the script wrote (`[N]`, `N` or an errno name) with the kernel's.
fn expect_value(e: Option<&Expr>, what: &str, got: i64) -> R<Option<(String, String)>> {
    let Some(e) = e else { return Ok(None) };
    let e = match e.as_array() {
        Some([x]) => x,
        _ => e,
    };
    let want = match e.as_word() {
        Some(n) if n.starts_with('E') && lconst(n).is_none() => {
            Some(crate::syscalls::errno_number(n))
        }
        _ => leval(e)?,
    };
    Ok(match want {
        Some(w) if w != got => Some((format!("{what} {w}"), format!("{what} {got}"))),
        _ => None,
    })
}

impl Worker {
    fn now(&self) -> Instant {
        Instant::from_nanos(self.t0.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64)
    }

    fn real(&self, sfd: i64) -> RawFd {
        // An fd the script never opened maps to a number no process has open, so the
        // kernel answers EBADF as it would.
        lock(&self.fds).get(&sfd).copied().unwrap_or(1 << 29)
    }

    fn fd(&self, sc: &Syscall) -> R<RawFd> {
        let s =
            larg(sc, 0)?.ok_or_else(|| Stop::Unsupported(format!("{}() with fd ...", sc.name)))?;
        Ok(self.real(s))
    }

    /// Maps a new real fd to the number the script expects (when free and ≥ 3), else the
    /// lowest free number from 3.
    fn map_new(&self, real: RawFd, want: Option<i64>) -> i64 {
        let mut m = lock(&self.fds);
        let fd = match want {
            Some(w) if w >= 3 && !m.contains_key(&w) => w,
            _ => (3..).find(|n| !m.contains_key(n)).unwrap_or(3),
        };
        m.insert(fd, real);
        fd
    }

    /// A sockaddr argument; a written address is refused (the script's addresses are
    /// the corpus's, this backend's are its own).
    fn sockaddr(&self, e: Option<&Expr>, default_ip: Ipv4Addr) -> R<SocketAddrV4> {
        let (port, addr) = sockaddr_arg(e)?;
        if addr.is_some() {
            return unsup("a sockaddr with a written address");
        }
        Ok(SocketAddrV4::new(default_ip, port))
    }

    /// Whether `sc` surely returns at once: it never blocks, its socket is
    /// non-blocking or the call says MSG_DONTWAIT, a poll's timeout is 0, or (reads and
    /// accepts) the socket is readable already.
    fn cannot_block(&self, sc: &Syscall) -> bool {
        let name = sc.name.as_str();
        let fd = || larg(sc, 0).ok().flatten().map(|s| self.real(s));
        let nonblocking = |fd: Option<RawFd>| {
            fd.is_some_and(|fd| {
                // SAFETY: F_GETFL takes no argument.
                let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
                fl >= 0 && fl & libc::O_NONBLOCK != 0
            })
        };
        let flag_arg = match name {
            "send" | "sendto" | "recv" | "recvfrom" => 3,
            "sendmsg" | "recvmsg" => 2,
            _ => usize::MAX,
        };
        let dontwait = larg(sc, flag_arg)
            .ok()
            .flatten()
            .is_some_and(|f| f & 0x40 != 0);
        match name {
            "socket" | "bind" | "listen" | "setsockopt" | "getsockopt" | "fcntl" | "shutdown"
            | "ioctl" | "epoll_create" | "epoll_create1" | "epoll_ctl" | "close" => true,
            "poll" => larg(sc, 2).ok().flatten() == Some(0),
            "epoll_wait" => larg(sc, 3).ok().flatten() == Some(0),
            "accept" | "accept4" | "read" | "recv" | "recvfrom" | "recvmsg" | "readv" => {
                let fd = fd();
                dontwait
                    || nonblocking(fd)
                    || fd.is_some_and(|fd| {
                        let mut p = [libc::pollfd {
                            fd,
                            events: libc::POLLIN,
                            revents: 0,
                        }];
                        // SAFETY: one pollfd, zero timeout.
                        unsafe { libc::poll(p.as_mut_ptr(), 1, 0) == 1 }
                    })
            }
            "write" | "send" | "sendto" | "sendmsg" | "writev" | "connect" => {
                dontwait || nonblocking(fd())
            }
            _ => false,
        }
    }

    fn exec(&self, sc: &Syscall) -> (CallResult, Option<i64>) {
        let mut new_fd = None;
        let r = self.exec_inner(sc, &mut new_fd);
        (r, new_fd)
    }

    fn exec_inner(&self, sc: &Syscall, new_fd: &mut Option<i64>) -> CallResult {
        let name = sc.name.as_str();
        let none = |r: Result<i64, &'static str>| -> CallResult { Ok((r, None)) };
        match name {
            "socket" => {
                let dom = larg(sc, 0)?.unwrap_or(2);
                if dom != 2 {
                    return unsup("socket() of a family other than AF_INET");
                }
                let ty = larg(sc, 1)?.unwrap_or(1);
                let proto = larg(sc, 2)?.unwrap_or(0);
                // SAFETY: plain integer arguments.
                let fd = unsafe { libc::socket(2, ty as i32 | libc::SOCK_CLOEXEC, proto as i32) };
                if fd < 0 {
                    return none(Err(errno_name()));
                }
                // The congestion control the script's configuration names (see
                // `Runner::shell`): set per socket, which root may do for any algorithm.
                let cc = self.cc.lock().unwrap_or_else(|p| p.into_inner()).clone();
                // SAFETY: `cc` is readable for its length across the call.
                unsafe {
                    libc::setsockopt(
                        fd,
                        libc::IPPROTO_TCP,
                        libc::TCP_CONGESTION,
                        cc.as_ptr().cast(),
                        cc.len() as libc::socklen_t,
                    )
                };
                let want = crate::syscalls::eval(&sc.ret).ok().flatten();
                let s = self.map_new(fd, want);
                *new_fd = Some(s);
                none(Ok(s))
            }
            "bind" | "connect" => {
                let fd = self.fd(sc)?;
                let ip = if name == "bind" {
                    LINUX_LOCAL_IP
                } else {
                    LINUX_REMOTE_IP
                };
                let a = self.sockaddr(sc.args.get(1), ip)?;
                let sa = sockaddr_in(a);
                let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
                // SAFETY: `sa` is a valid sockaddr_in of `len` bytes for the call.
                let r = unsafe {
                    if name == "bind" {
                        libc::bind(fd, std::ptr::addr_of!(sa).cast(), len)
                    } else {
                        libc::connect(fd, std::ptr::addr_of!(sa).cast(), len)
                    }
                };
                none(ret(r as isize).map(|_| 0))
            }
            "listen" => {
                let fd = self.fd(sc)?;
                let n = larg(sc, 1)?.unwrap_or(128);
                // SAFETY: plain integer arguments.
                none(ret(unsafe { libc::listen(fd, n as i32) } as isize))
            }
            "accept" | "accept4" => {
                let fd = self.fd(sc)?;
                let flags = if name == "accept4" {
                    larg(sc, 3)?.unwrap_or(0) as i32
                } else {
                    0
                };
                // SAFETY: NULL address and length are allowed (the peer is not wanted).
                let r = unsafe {
                    libc::accept4(
                        fd,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                        flags | libc::SOCK_CLOEXEC,
                    )
                };
                if r < 0 {
                    return none(Err(errno_name()));
                }
                let want = crate::syscalls::eval(&sc.ret).ok().flatten();
                let s = self.map_new(r, want);
                *new_fd = Some(s);
                none(Ok(s))
            }
            "write" | "send" | "sendto" => {
                let fd = self.fd(sc)?;
                let len = len_arg(sc, 2)?;
                let flags = if name == "write" {
                    0
                } else {
                    larg(sc, 3)?.unwrap_or(0) as i32
                };
                // sendto's `...` address is the script peer's (what MSG_FASTOPEN needs; a
                // connected TCP socket ignores it).
                let to = if name == "sendto" {
                    match sc.args.get(4).map(|a| &a.kind) {
                        None | Some(ExprKind::Int(0)) => None,
                        Some(ExprKind::Word(w)) if w == "NULL" => None,
                        _ => Some(self.sockaddr(sc.args.get(4), LINUX_REMOTE_IP)?),
                    }
                } else {
                    None
                };
                let data = match buf_arg(sc, 1)? {
                    Buf::Zeros => Some(vec![0u8; len]),
                    Buf::Bytes(mut b) => {
                        b.resize(len, 0);
                        Some(b)
                    }
                    Buf::Null => None,
                };
                let p = data
                    .as_ref()
                    .map_or(std::ptr::null(), |d| d.as_ptr().cast::<libc::c_void>());
                // SAFETY: `p` is NULL (the script asks for EFAULT) or points to `len`
                // bytes that live across the call; `sa` likewise.
                let r = unsafe {
                    match to {
                        None if name == "write" => libc::write(fd, p, len),
                        None => libc::send(fd, p, len, flags),
                        Some(a) => {
                            let sa = sockaddr_in(a);
                            libc::sendto(
                                fd,
                                p,
                                len,
                                flags,
                                std::ptr::addr_of!(sa).cast(),
                                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                            )
                        }
                    }
                };
                none(ret(r))
            }
            "read" | "recv" | "recvfrom" => {
                let fd = self.fd(sc)?;
                let len = len_arg(sc, 2)?;
                let flags = if name == "read" {
                    0
                } else {
                    larg(sc, 3)?.unwrap_or(0) as i32
                };
                let mut data = match buf_arg(sc, 1)? {
                    Buf::Null => None,
                    _ => Some(vec![0u8; len]),
                };
                let p = data.as_mut().map_or(std::ptr::null_mut(), |d| {
                    d.as_mut_ptr().cast::<libc::c_void>()
                });
                // SAFETY: `p` is NULL (EFAULT wanted) or `len` writable bytes.
                let r = unsafe {
                    if name == "read" {
                        libc::read(fd, p, len)
                    } else {
                        libc::recv(fd, p, len, flags)
                    }
                };
                none(ret(r))
            }
            "writev" | "readv" => {
                let fd = self.fd(sc)?;
                let lens = iov_lens(sc.args.get(1))?;
                let mut bufs: Vec<Vec<u8>> = lens.iter().map(|&n| vec![0u8; n]).collect();
                let iov = iovecs(&mut bufs);
                // SAFETY: `iov` points into `bufs`, both alive across the call.
                let r = unsafe {
                    if name == "writev" {
                        libc::writev(fd, iov.as_ptr(), iov.len() as i32)
                    } else {
                        libc::readv(fd, iov.as_ptr(), iov.len() as i32)
                    }
                };
                none(ret(r))
            }
            "sendmsg" | "recvmsg" => {
                let fd = self.fd(sc)?;
                let m = sc
                    .args
                    .get(1)
                    .ok_or_else(|| Stop::Unsupported(format!("{name}() without a msghdr")))?;
                if let Some(c) = m.field("msg_control") {
                    if !matches!(c.as_array(), Some([])) && !matches!(c.kind, ExprKind::Ellipsis) {
                        return unsup(format!("{name}() with control messages"));
                    }
                }
                let iov_e = m.as_struct().and_then(|items| {
                    items.iter().find_map(|it| match &it.kind {
                        ExprKind::Assign(l, r)
                            if matches!(&l.kind, ExprKind::Call(n, _) if n == "msg_iov")
                                || l.as_word() == Some("msg_iov") =>
                        {
                            Some(&**r)
                        }
                        _ => None,
                    })
                });
                let lens = iov_lens(iov_e)?;
                let flags = larg(sc, 2)?.unwrap_or(0) as i32;
                let mut bufs: Vec<Vec<u8>> = lens.iter().map(|&n| vec![0u8; n]).collect();
                let mut iov = iovecs(&mut bufs);
                // SAFETY: an all-zero msghdr is valid (no name, no control).
                let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
                mh.msg_iov = iov.as_mut_ptr();
                mh.msg_iovlen = iov.len();
                // SAFETY: `mh` points at `iov`, which points into `bufs`; all alive.
                let r = unsafe {
                    if name == "sendmsg" {
                        libc::sendmsg(fd, &mh, flags)
                    } else {
                        libc::recvmsg(fd, &mut mh, flags)
                    }
                };
                let mut mismatch = None;
                if name == "recvmsg" && r >= 0 {
                    if let Some(f) = m.field("msg_flags") {
                        if let Some(w) = leval(f)? {
                            if w != i64::from(mh.msg_flags) {
                                mismatch = Some((
                                    format!("msg_flags {w}"),
                                    format!("msg_flags {}", mh.msg_flags),
                                ));
                            }
                        }
                    }
                }
                Ok((ret(r), mismatch))
            }
            "setsockopt" => {
                let fd = self.fd(sc)?;
                let level = larg(sc, 1)?.unwrap_or(0) as i32;
                let opt = larg(sc, 2)?.unwrap_or(0) as i32;
                let v = sc.args.get(3);
                let bytes: Vec<u8> = match v.map(|e| &e.kind) {
                    Some(ExprKind::Str(s)) => s.clone(),
                    Some(ExprKind::Struct(_)) => {
                        let e = v.expect("some");
                        let on = e.field("l_onoff").map(leval).transpose()?.flatten();
                        let l = e.field("l_linger").map(leval).transpose()?.flatten();
                        match (on, l) {
                            (Some(on), Some(l)) => {
                                let mut b = (on as i32).to_ne_bytes().to_vec();
                                b.extend_from_slice(&(l as i32).to_ne_bytes());
                                b
                            }
                            _ => return unsup(format!("setsockopt() struct {:?}", e.kind)),
                        }
                    }
                    Some(_) => {
                        let x = leval(v.expect("some"))?.unwrap_or(0);
                        (x as i32).to_ne_bytes().to_vec()
                    }
                    None => Vec::new(),
                };
                // SAFETY: `bytes` is the option value, alive across the call.
                let r = unsafe {
                    libc::setsockopt(
                        fd,
                        level,
                        opt,
                        bytes.as_ptr().cast(),
                        bytes.len() as libc::socklen_t,
                    )
                };
                none(ret(r as isize))
            }
            "getsockopt" => {
                let fd = self.fd(sc)?;
                let level = larg(sc, 1)?.unwrap_or(0) as i32;
                let opt = larg(sc, 2)?.unwrap_or(0) as i32;
                let mut v = [0u8; 8];
                let mut len: libc::socklen_t = 4;
                // SAFETY: `v` has room for the 4 bytes `len` announces.
                let r =
                    unsafe { libc::getsockopt(fd, level, opt, v.as_mut_ptr().cast(), &mut len) };
                if r < 0 {
                    return none(Err(errno_name()));
                }
                let got = i64::from(u32::from_ne_bytes([v[0], v[1], v[2], v[3]]));
                let got = if opt == libc::SO_ERROR && level == libc::SOL_SOCKET {
                    got
                } else if got > i64::from(i32::MAX)
                    && !matches!(sc.args.get(3).and_then(|e| e.as_array()), Some([x]) if x.as_int().is_some_and(|v| v > i64::from(i32::MAX)))
                {
                    got - (1i64 << 32)
                } else {
                    got
                };
                Ok((Ok(0), expect_value(sc.args.get(3), "value", got)?))
            }
            "fcntl" => {
                let fd = self.fd(sc)?;
                let cmd = larg(sc, 1)?.unwrap_or(0) as i32;
                let arg = larg(sc, 2)?.unwrap_or(0);
                // SAFETY: F_GETFL/F_SETFL take an integer argument.
                let r = unsafe { libc::fcntl(fd, cmd, arg as libc::c_long) };
                let r = if cmd == libc::F_GETFL && r >= 0 {
                    // Only the access mode and O_NONBLOCK are the script's business.
                    r & (0o3 | libc::O_NONBLOCK)
                } else {
                    r
                };
                none(ret(r as isize))
            }
            "close" => {
                let s = larg(sc, 0)?.unwrap_or(-1);
                let real = lock(&self.fds).remove(&s);
                match real {
                    None => none(Err("EBADF")),
                    // SAFETY: the fd was ours and is closed once (removed from the map).
                    Some(fd) => none(ret(unsafe { libc::close(fd) } as isize)),
                }
            }
            "shutdown" => {
                let fd = self.fd(sc)?;
                let how = larg(sc, 1)?.unwrap_or(0) as i32;
                // SAFETY: plain integer arguments.
                none(ret(unsafe { libc::shutdown(fd, how) } as isize))
            }
            "poll" => {
                let items = sc
                    .args
                    .first()
                    .and_then(|a| a.as_array())
                    .ok_or_else(|| Stop::Unsupported("poll() without a pollfd array".into()))?;
                let mut pfds = Vec::new();
                for it in items {
                    let s = it
                        .field("fd")
                        .map(leval)
                        .transpose()?
                        .flatten()
                        .unwrap_or(-1);
                    let ev = it
                        .field("events")
                        .map(leval)
                        .transpose()?
                        .flatten()
                        .unwrap_or(0);
                    pfds.push(libc::pollfd {
                        fd: self.real(s),
                        events: ev as i16,
                        revents: 0,
                    });
                }
                let timeout = larg(sc, 2)?.unwrap_or(0) as i32;
                // SAFETY: `pfds` holds `len` pollfds for the call.
                let r =
                    unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout) };
                let mut mismatch = None;
                if r >= 0 {
                    for (it, p) in items.iter().zip(&pfds) {
                        if let Some(w) = it.field("revents").map(leval).transpose()?.flatten() {
                            let got = i64::from(p.revents as u16);
                            if w != got && mismatch.is_none() {
                                mismatch = Some((
                                    format!("revents {}", poll_text_hex(w)),
                                    format!("revents {}", poll_text_hex(got)),
                                ));
                            }
                        }
                    }
                }
                Ok((ret(r as isize), mismatch))
            }
            "epoll_create" | "epoll_create1" => {
                let a = larg(sc, 0)?.unwrap_or(1) as i32;
                // SAFETY: plain integer arguments.
                let r = unsafe {
                    if name == "epoll_create" {
                        libc::epoll_create(a)
                    } else {
                        libc::epoll_create1(a)
                    }
                };
                if r < 0 {
                    return none(Err(errno_name()));
                }
                // SAFETY: F_SETFD on the descriptor just created (close-on-exec, so shell
                // lines never inherit it).
                unsafe { libc::fcntl(r, libc::F_SETFD, libc::FD_CLOEXEC) };
                let want = crate::syscalls::eval(&sc.ret).ok().flatten();
                let s = self.map_new(r, want);
                none(Ok(s))
            }
            "epoll_ctl" => {
                let ep = self.fd(sc)?;
                let op = larg(sc, 1)?.unwrap_or(0) as i32;
                let target = larg(sc, 2)?.unwrap_or(-1);
                let (events, data) = epoll_ev(sc.args.get(3))?;
                let mut ev = libc::epoll_event {
                    events: events as u32,
                    u64: data.unwrap_or(target) as u64,
                };
                // SAFETY: `ev` is a valid epoll_event for the call.
                let r = unsafe { libc::epoll_ctl(ep, op, self.real(target), &mut ev) };
                none(ret(r as isize))
            }
            "epoll_wait" => {
                let ep = self.fd(sc)?;
                let max = larg(sc, 2)?.unwrap_or(1).clamp(1, 64) as usize;
                let timeout = larg(sc, 3)?.unwrap_or(0) as i32;
                let mut evs = vec![libc::epoll_event { events: 0, u64: 0 }; max];
                // SAFETY: `evs` has room for `max` events.
                let r = unsafe { libc::epoll_wait(ep, evs.as_mut_ptr(), max as i32, timeout) };
                let mut mismatch = None;
                if r >= 1 {
                    let (want_ev, want_data) = epoll_ev(sc.args.get(1))?;
                    let got_ev = i64::from(evs[0].events);
                    let got_data = evs[0].u64 as i64;
                    if want_ev != got_ev || want_data.is_some_and(|d| d != got_data) {
                        mismatch = Some((
                            format!("event {} data {want_data:?}", poll_text_hex(want_ev)),
                            format!("event {} data {got_data}", poll_text_hex(got_ev)),
                        ));
                    }
                }
                Ok((ret(r as isize), mismatch))
            }
            "ioctl" => {
                let fd = self.fd(sc)?;
                let req = larg(sc, 1)?.unwrap_or(0);
                if !matches!(req, 0x541b | 0x5411 | 0x894b) {
                    return unsup(format!("ioctl({req:#x})"));
                }
                let mut v: libc::c_int = 0;
                // SAFETY: these requests write one int through the pointer.
                let r = unsafe { libc::ioctl(fd, req as libc::c_ulong, &mut v) };
                if r < 0 {
                    return none(Err(errno_name()));
                }
                Ok((Ok(0), expect_value(sc.args.get(2), "value", i64::from(v))?))
            }
            other => unsup(format!("system call {other}()")),
        }
    }
}

fn sockaddr_in(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// The lengths of an iovec array written `[{..., N}, {iov_base=..., iov_len=N}]`.
fn iov_lens(e: Option<&Expr>) -> R<Vec<usize>> {
    let Some(items) = e.and_then(|e| e.as_array()) else {
        return unsup("an iovec that is not an array");
    };
    let mut out = Vec::new();
    let mut total = 0usize;
    for it in items {
        let n = match it.field("iov_len") {
            Some(l) => leval(l)?,
            None => match it.as_struct() {
                Some([_, l]) => leval(l)?,
                _ => return unsup("an iovec entry form"),
            },
        };
        let n = usize::try_from(n.unwrap_or(0).max(0)).unwrap_or(usize::MAX);
        total = total.saturating_add(n);
        if total > MAX_BUFFER {
            return unsup("iovecs of more than 64 MiB");
        }
        out.push(n);
    }
    Ok(out)
}

fn iovecs(bufs: &mut [Vec<u8>]) -> Vec<libc::iovec> {
    bufs.iter_mut()
        .map(|b| libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        })
        .collect()
}

/// `{events=X, fd=N}` or `{events=X, ptr=N}`.
fn epoll_ev(e: Option<&Expr>) -> R<(i64, Option<i64>)> {
    let Some(e) = e else {
        return unsup("an epoll_event form");
    };
    let events = e
        .field("events")
        .map(leval)
        .transpose()?
        .flatten()
        .unwrap_or(0);
    let data = match (e.field("fd"), e.field("ptr")) {
        (Some(f), _) | (None, Some(f)) => leval(f)?,
        _ => None,
    };
    Ok((events, data))
}

/// A mask as the kernel's number and its names: `0x5 (IN|OUT)`.
fn poll_text_hex(v: i64) -> String {
    format!("{v:#x} ({})", poll_text(v))
}

// -------------------------------------------------------------------------------------
// The runner.

struct Job {
    sc: Syscall,
}

struct Pending {
    line: u32,
    sc: Syscall,
    /// Script end time (`...end`), or the start for a call expected to return at once.
    end: Instant,
    timed: bool,
}

struct Runner {
    t0: WallInstant,
    tun: OwnedFd,
    /// Shared with the worker, which writes to it after each call: it stays open as long
    /// as either holds it.
    ev: Arc<OwnedFd>,
    /// The loop's state: the flow, the tolerance, the packets captured, the trace.
    core: Core,
    fds: Fds,
    jobs: Option<mpsc::Sender<Job>>,
    done: mpsc::Receiver<Done>,
    worker: Option<std::thread::JoinHandle<()>>,
    pending: Option<Pending>,
    last_fd: Option<i64>,
    dir: PathBuf,
    cc: Arc<Mutex<String>>,
    /// The system calls that cannot block, run on this thread.
    inline: Worker,
    /// The worker was left in a call teardown could not wake: its descriptors stay open.
    abandoned: bool,
    buf: Vec<u8>,
}

fn run_cmd(args: &[&str]) -> R<()> {
    let out = netns::run_bounded(
        Command::new(args[0]).args(&args[1..]),
        Duration::from_secs(10),
    )
    .map_err(|e| Stop::Error(format!("{}: {e}", args.join(" "))))?;
    if !out.status.success() {
        return Err(Stop::Error(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

impl Runner {
    fn new(script: &Script, dir: &Path, opts: &LinuxOptions) -> R<Runner> {
        let mut tol = DEFAULT_TOLERANCE_US;
        for o in &script.options {
            let v = o.value.as_deref().unwrap_or("");
            match o.name.as_str() {
                "tolerance_usecs" => {
                    tol = v
                        .parse()
                        .map_err(|_| Stop::Error(format!("bad --tolerance_usecs={v}")))?
                }
                // Addresses are this backend's own (198.18.0.0/15); the outbound TS val
                // is never compared, so its tick does not matter.
                "local_ip" | "remote_ip" | "gateway_ip" | "tcp_ts_tick_usecs" => {}
                "ip_version" if v == "ipv4" => {}
                other => return unsup(format!("script option --{other}")),
            }
        }
        // Quiet namespace: no IPv6 chatter on tun0.
        let _ = std::fs::write("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1");
        let _ = std::fs::write("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1");
        let tun = open_tun()?;
        run_cmd(&["ip", "link", "set", "tun0", "up"])?;
        run_cmd(&["ip", "addr", "add", "198.18.0.1/16", "dev", "tun0"])?;
        run_cmd(&["ip", "route", "add", "198.19.0.0/16", "dev", "tun0"])?;
        // SAFETY: plain flags.
        let ev = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if ev < 0 {
            return Err(os_err("eventfd"));
        }
        // SAFETY: just created, owned by nobody else.
        let ev = Arc::new(unsafe { OwnedFd::from_raw_fd(ev) });
        let fds: Fds = Arc::new(Mutex::new(BTreeMap::new()));
        let cc = Arc::new(Mutex::new(String::from("cubic")));
        let (jtx, jrx) = mpsc::channel::<Job>();
        let (dtx, drx) = mpsc::channel::<Done>();
        let mut r = Runner {
            t0: WallInstant::now(),
            tun,
            ev,
            core: Core::new(
                Flow::new(
                    (LINUX_LOCAL_IP, DEFAULT_PORT),
                    (LINUX_REMOTE_IP, REMOTE_PORT),
                ),
                Duration::from_micros(tol),
                Instant::from_micros(opts.max_seconds.saturating_mul(1_000_000)),
            ),
            fds: fds.clone(),
            jobs: Some(jtx),
            done: drx,
            worker: None,
            pending: None,
            last_fd: None,
            dir: dir.to_path_buf(),
            cc: cc.clone(),
            abandoned: false,
            inline: Worker {
                fds: fds.clone(),
                t0: WallInstant::now(),
                cc,
            },
            buf: vec![0u8; 65_536 + 256],
        };
        if let Some(c) = &script.init_command {
            r.run_shell(c.line, &c.text)?;
        }
        // Anything the set-up made the kernel send is not the script's business.
        r.read_tun()?;
        r.core.captured.clear();
        r.t0 = WallInstant::now();
        r.inline.t0 = r.t0;
        let t0 = r.t0;
        let evfd = r.ev.clone();
        let w = Worker {
            fds,
            t0,
            cc: r.cc.clone(),
        };
        r.worker = Some(
            std::thread::Builder::new()
                .name("pd-syscalls".into())
                .spawn(move || {
                    realtime();
                    while let Ok(job) = jrx.recv() {
                        let (res, new_fd) = w.exec(&job.sc);
                        let at = w.now();
                        if dtx.send(Done { at, res, new_fd }).is_err() {
                            break;
                        }
                        let one: u64 = 1;
                        // SAFETY: an 8-byte write to the eventfd, which this thread keeps
                        // open through its own `Arc` (also if the runner gives up on it).
                        unsafe { libc::write(evfd.as_raw_fd(), std::ptr::addr_of!(one).cast(), 8) };
                    }
                })
                .map_err(|e| Stop::Error(format!("worker thread: {e}")))?,
        );
        Ok(r)
    }

    /// Reads every packet the kernel has handed the TUN, stamping each with the time now.
    fn read_tun(&mut self) -> R<()> {
        loop {
            // SAFETY: `buf` is writable for its length.
            let n = unsafe {
                libc::read(
                    self.tun.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted {
                    return Ok(());
                }
                return Err(Stop::Error(format!("reading tun0: {e}")));
            }
            let n = n as usize;
            if n <= VNET_HDR_LEN {
                continue;
            }
            let t = self.now();
            let hdr = &self.buf[..VNET_HDR_LEN];
            let needs_csum = hdr[0] & 1 != 0;
            let cstart = usize::from(u16::from_le_bytes([hdr[6], hdr[7]]));
            let coff = usize::from(u16::from_le_bytes([hdr[8], hdr[9]]));
            let mut ip = self.buf[VNET_HDR_LEN..n].to_vec();
            if ip[0] >> 4 != 4 {
                continue;
            }
            if needs_csum {
                complete_checksum(&mut ip, cstart, coff);
            }
            let s = summarize(&ip, &self.core.flow);
            self.core.log_at(t, format!("> {s}"));
            self.core.captured.push_back((t, ip));
        }
    }

    /// Waits (reading the TUN) until `target`, or until more than `stop_after` packets
    /// are captured, or until the worker reports with `stop_on_done`.
    fn wait_until(
        &mut self,
        target: Instant,
        stop_after: Option<usize>,
        stop_on_done: bool,
    ) -> R<()> {
        if target > self.core.max_time {
            return Err(Stop::Error(format!(
                "wall-clock limit exceeded ({})",
                us(target)
            )));
        }
        loop {
            self.read_tun()?;
            if stop_after.is_some_and(|n| self.core.captured.len() > n) {
                return Ok(());
            }
            let now = self.now();
            if now >= target {
                return Ok(());
            }
            let left = target.saturating_duration_since(now);
            let mut p = [
                libc::pollfd {
                    fd: self.tun.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.ev.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let ts = libc::timespec {
                tv_sec: left.as_secs() as libc::time_t,
                tv_nsec: left.subsec_nanos() as libc::c_long,
            };
            // SAFETY: two pollfds and a timespec, alive across the call.
            unsafe { libc::ppoll(p.as_mut_ptr(), 2, &ts, std::ptr::null()) };
            if p[1].revents & libc::POLLIN != 0 {
                let mut v = [0u8; 8];
                // SAFETY: an 8-byte read from our eventfd into `v`.
                unsafe { libc::read(self.ev.as_raw_fd(), v.as_mut_ptr().cast(), 8) };
                if stop_on_done {
                    return Ok(());
                }
            }
        }
    }

    /// Settles the pending call: its result if the worker has reported, a failure if its
    /// deadline has passed; with `wait`, waits for one or the other.
    fn settle_pending(&mut self, wait: bool) -> R<()> {
        loop {
            let Some(p) = &self.pending else {
                return Ok(());
            };
            // A call written without `...` is expected back at once; how long the kernel
            // and this machine take to run it is not the script's business (a loaded
            // machine can take milliseconds to schedule the worker), so only a call
            // still blocked a second later fails.
            let grace = if p.timed {
                self.core.tol
            } else {
                self.core.tol.max(UNTIMED_CALL_LIMIT)
            };
            let deadline = p.end.saturating_add(grace);
            if let Ok(d) = self.done.try_recv() {
                let p = self.pending.take().expect("pending");
                return self.finish(p, d);
            }
            if self.now() > deadline {
                return still_blocked(p.line, &p.sc, p.end, self.now());
            }
            if !wait {
                return Ok(());
            }
            self.wait_until(
                deadline.saturating_add(Duration::from_micros(1)),
                None,
                true,
            )?;
        }
    }

    fn finish(&mut self, p: Pending, d: Done) -> R<()> {
        self.log(format!("{}() line {} returns", p.sc.name, p.line));
        if let Some(fd) = d.new_fd {
            self.last_fd = Some(fd);
        }
        let (got, mismatch) = d.res?;
        if p.timed {
            check_return_time(p.line, &p.sc, p.end, d.at, self.core.tol)?;
        }
        if let Some((want, got)) = mismatch {
            return fail(p.line, format!("{}(): {want}", p.sc.name), got);
        }
        check_ret(p.line, &p.sc, got)
    }

    /// A system call (the loop has logged it): run here when it cannot block, else
    /// handed to the worker (and waited for when it has no `...end`).
    fn call(&mut self, line: u32, sc: &Syscall, start: Instant, end: Option<Instant>) -> R<()> {
        if let Some(fd) = larg(sc, 0).ok().flatten() {
            if lock(&self.fds).contains_key(&fd) && sc.name != "close" {
                self.last_fd = Some(fd);
            }
        }
        if sc.name == "listen" {
            self.core.flow.local_port = DEFAULT_PORT;
            self.core.flow.remote_port = REMOTE_PORT;
        }
        if end.is_none() && self.inline.cannot_block(sc) {
            // A call that cannot block runs here, as the script's own thread would run
            // it: handing it to the worker would add two thread wake-ups of delay.
            let (res, new_fd) = self.inline.exec(sc);
            let done = Done {
                at: self.now(),
                res,
                new_fd,
            };
            let p = Pending {
                line,
                sc: sc.clone(),
                end: start,
                timed: false,
            };
            return self.finish(p, done);
        }
        let Some(tx) = &self.jobs else {
            return Err(Stop::Error("the worker has stopped".into()));
        };
        if tx.send(Job { sc: sc.clone() }).is_err() {
            return Err(Stop::Error("the worker has stopped".into()));
        }
        self.pending = Some(Pending {
            line,
            sc: sc.clone(),
            end: end.unwrap_or(start),
            timed: end.is_some(),
        });
        if end.is_none() {
            self.settle_pending(true)?;
        }
        Ok(())
    }

    /// Runs a shell line in the script's directory, inside the namespace.
    fn run_shell(&mut self, line: u32, text: &str) -> R<()> {
        self.log(format!("shell `{}`", text.trim()));
        let joined = text.replace("\\\n", " ");
        let mut rest = String::new();
        for l in joined.lines() {
            // A namespace may not select a congestion control the host restricts
            // (`tcp_allowed_congestion_control`), so `tcp_congestion_control=X` is taken
            // out of the line and applied to every socket the script makes instead (the
            // default is the corpus's defaults.sh choice, CUBIC).
            let mut kept = Vec::new();
            for w in shell_words(l) {
                match w.strip_prefix("net.ipv4.tcp_congestion_control=") {
                    Some(cc) => *self.cc.lock().unwrap_or_else(|p| p.into_inner()) = cc.into(),
                    None => kept.push(w),
                }
            }
            if kept.len() <= 2 && kept.first().is_some_and(|w| w == "sysctl") {
                continue;
            }
            let owned;
            let l = if kept.len() == shell_words(l).len() {
                l
            } else {
                owned = kept
                    .iter()
                    .map(|w| {
                        if w.contains(char::is_whitespace) {
                            format!("\"{w}\"")
                        } else {
                            w.clone()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" ");
                owned.as_str()
            };
            let words: Vec<&str> = l.split_whitespace().collect();
            if words.first().is_some_and(|w| w.ends_with("set_sysctls.py")) {
                for kv in &shell_words(l)[1..] {
                    let Some((path, v)) = kv.split_once('=') else {
                        return Err(Stop::Error(format!("line {line}: set_sysctls.py {kv}")));
                    };
                    if !path.starts_with("/proc/sys/net/") || path.contains("..") {
                        return unsup(format!("line {line}: a sysctl outside net.: {path}"));
                    }
                    std::fs::write(path, v).map_err(|e| {
                        Stop::Error(format!("line {line}: writing {v} to {path}: {e}"))
                    })?;
                }
            } else if words
                .first()
                .is_some_and(|w| w.starts_with("/tmp/sysctl_restore_"))
            {
                // set_sysctls.py's undo script: the namespace, and every value set in
                // it, is deleted after the run instead.
            } else {
                rest.push_str(l);
                rest.push('\n');
            }
        }
        // A sysctl outside net.* would change the host, not the namespace, and a command
        // that enters another namespace would leave this one. The corpus is trusted data;
        // this is a guard against mistakes, not a sandbox.
        for w in rest.split(|c: char| c.is_whitespace() || c == '`' || c == '"' || c == ';') {
            let key = w.split('=').next().unwrap_or("");
            let proc_outside_net =
                key.starts_with("/proc/sys/") && !key.starts_with("/proc/sys/net/");
            let dotted = [
                "kernel", "vm", "fs", "dev", "user", "abi", "debug", "crypto",
            ]
            .iter()
            .any(|p| {
                key.strip_prefix(p)
                    .is_some_and(|r| r.starts_with('.') || r.starts_with('/'))
            });
            if proc_outside_net || dotted {
                return unsup(format!("line {line}: a sysctl outside net.: {key}"));
            }
            if ["nsenter", "unshare", "chroot"].contains(&w) {
                return unsup(format!("line {line}: `{w}` would leave the namespace"));
            }
        }
        if rest.contains("netns exec") {
            return unsup(format!(
                "line {line}: `ip netns exec` would leave the namespace"
            ));
        }
        if rest.trim().is_empty() {
            return Ok(());
        }
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(&rest).current_dir(&self.dir);
        let out = netns::run_bounded(&mut cmd, Duration::from_secs(30))
            .map_err(|e| Stop::Error(format!("line {line}: shell: {e}")))?;
        if !out.status.success() {
            return Err(Stop::Error(format!(
                "line {line}: shell command failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }

    fn code_block(&mut self, block: &CodeBlock) -> R<()> {
        let Some(stmts) = &block.statements else {
            return unsup("a code block outside the assertion subset");
        };
        let Some(real) = self
            .last_fd
            .and_then(|fd| lock(&self.fds).get(&fd).copied())
        else {
            return unsup("a code block with no socket");
        };
        let mut info = [0u8; 256];
        let mut len = info.len() as libc::socklen_t;
        // SAFETY: `info` has room for `len` bytes.
        let r = unsafe {
            libc::getsockopt(
                real,
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                info.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if r < 0 {
            return Err(os_err("getsockopt(TCP_INFO)"));
        }
        let info = &info[..(len as usize).min(info.len())];
        let field = |n: &str| tcp_info_field(info, n).or_else(|| lconst(n));
        for (i, st) in stmts.iter().enumerate() {
            let test = match &st.kind {
                CodeStmtKind::Assert { test, .. } => test,
                // `print(...)` only reports; its values go to the trace.
                CodeStmtKind::Expr(CodeExpr::Call(f, args)) if f == "print" => {
                    let vals: Vec<String> = args
                        .iter()
                        .map(|a| match code_eval(a, &field) {
                            Ok(v) => v.to_string(),
                            Err(_) => format!("{a:?}"),
                        })
                        .collect();
                    self.log(format!("print line {}: {}", st.line, vals.join(" ")));
                    continue;
                }
                _ => return unsup("code statements other than assert and print"),
            };
            let v = code_eval(test, &field)?;
            self.log(format!("assert line {}: {}", st.line, v != 0));
            if v == 0 {
                let vals = code_names(test)
                    .into_iter()
                    .filter(|n| n.starts_with("tcpi_"))
                    .map(|n| format!("{n} = {}", field(&n).unwrap_or(-1)))
                    .collect::<Vec<_>>()
                    .join(", ");
                let text = assert_text(block, stmts, i);
                return fail(st.line, format!("`{text}` to hold"), vals);
            }
        }
        Ok(())
    }

    /// Wakes any call still blocked (shutdown of every socket), stops and joins the
    /// worker, then closes every descriptor the script left open.
    fn teardown(&mut self) {
        if self.abandoned {
            // The worker may still be in a call on one of these descriptors.
            return;
        }
        let fds: Vec<RawFd> = lock(&self.fds).values().copied().collect();
        for &fd in &fds {
            // SAFETY: shutdown on an fd we own; harmless on a non-socket.
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        }
        self.jobs = None;
        if let Some(w) = self.worker.take() {
            let deadline = WallInstant::now() + Duration::from_secs(5);
            while !w.is_finished() && WallInstant::now() < deadline {
                // Drain reports so the worker never blocks on a send; wait on the eventfd.
                while self.done.try_recv().is_ok() {}
                let mut p = [libc::pollfd {
                    fd: self.ev.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                }];
                // SAFETY: one pollfd for the call.
                unsafe { libc::poll(p.as_mut_ptr(), 1, 50) };
            }
            if w.is_finished() {
                let _ = w.join();
            } else {
                // A call that shutdown cannot wake (an epoll_wait with a long timeout):
                // leave the worker and its descriptors (the fds stay open, so no number
                // is reused under it); it ends when the call does.
                std::mem::forget(w);
                self.abandoned = true;
                return;
            }
        }
        for fd in lock(&self.fds).values() {
            // SAFETY: each fd is ours and closed once (the map is cleared below).
            unsafe { libc::close(*fd) };
        }
        lock(&self.fds).clear();
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
        Instant::from_nanos(self.t0.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64)
    }

    fn advance(&mut self, target: Instant, stop_after: Option<usize>) -> R<()> {
        self.wait_until(target, stop_after, false)
    }

    /// The worker's report is taken when it has come; a system call (and the end of the
    /// script) waits for it, or for its deadline.
    fn settle(&mut self, point: Point) -> R<()> {
        self.settle_pending(matches!(point, Point::Syscall | Point::End))
    }

    /// The datagram behind a zero virtio header, written to the TUN.
    fn inject(&mut self, line: u32, ip: Vec<u8>) -> R<()> {
        let mut frame = vec![0u8; VNET_HDR_LEN];
        frame.extend_from_slice(&ip);
        // SAFETY: `frame` is readable for its length.
        let n = unsafe { libc::write(self.tun.as_raw_fd(), frame.as_ptr().cast(), frame.len()) };
        if n < 0 {
            return Err(os_err(&format!("line {line}: writing to tun0")));
        }
        Ok(())
    }

    fn syscall(&mut self, line: u32, sc: &Syscall, start: Instant, end: Option<Instant>) -> R<()> {
        self.call(line, sc, start, end)
    }

    fn shell(&mut self, line: u32, text: &str) -> R<()> {
        self.run_shell(line, text)
    }

    fn code(&mut self, block: &CodeBlock) -> R<()> {
        self.code_block(block)
    }

    /// The kernel hands the TUN a GSO packet's segments back to back.
    fn gso_gap(&self) -> Duration {
        GSO_TRAIN_GAP
    }

    /// An active open: the kernel's SYN names the ephemeral port.
    fn claimed(&mut self, bytes: &[u8]) {
        if bytes.len() >= 40 && bytes[9] == 6 {
            let ihl = usize::from(bytes[0] & 0x0f) * 4;
            if let Some(t) = bytes.get(ihl..ihl + 20) {
                if t[13] & 0x12 == 0x02 {
                    self.core.flow.local_port = u16::from_be_bytes([t[0], t[1]]);
                    self.core.flow.remote_port = u16::from_be_bytes([t[2], t[3]]);
                }
            }
        }
    }
}

/// Splits a command line into words, honouring double quotes (`a="1 2 3"` is one word,
/// `a=1 2 3`).
fn shell_words(l: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in l.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

impl Drop for Runner {
    /// Also on a panic: wake and stop the worker, close the script's descriptors.
    fn drop(&mut self) {
        self.teardown();
    }
}

/// A field of the kernel's `struct tcp_info` (UAPI layout) by its name.
fn tcp_info_field(b: &[u8], name: &str) -> Option<i64> {
    let u8_at = |o: usize| b.get(o).map(|v| i64::from(*v));
    let u32_at = |o: usize| {
        b.get(o..o + 4)
            .map(|s| i64::from(u32::from_ne_bytes([s[0], s[1], s[2], s[3]])))
    };
    let u64_at = |o: usize| {
        b.get(o..o + 8).map(|s| {
            let mut a = [0u8; 8];
            a.copy_from_slice(s);
            u64::from_ne_bytes(a).min(i64::MAX as u64) as i64
        })
    };
    match name {
        "tcpi_state" => u8_at(0),
        "tcpi_ca_state" => u8_at(1),
        "tcpi_retransmits" => u8_at(2),
        "tcpi_probes" => u8_at(3),
        "tcpi_backoff" => u8_at(4),
        "tcpi_options" => u8_at(5),
        "tcpi_snd_wscale" => u8_at(6).map(|v| v & 0x0f),
        "tcpi_rcv_wscale" => u8_at(6).map(|v| v >> 4),
        "tcpi_rto" => u32_at(8),
        "tcpi_ato" => u32_at(12),
        "tcpi_snd_mss" => u32_at(16),
        "tcpi_rcv_mss" => u32_at(20),
        "tcpi_unacked" => u32_at(24),
        "tcpi_sacked" => u32_at(28),
        "tcpi_lost" => u32_at(32),
        "tcpi_retrans" => u32_at(36),
        "tcpi_fackets" => u32_at(40),
        "tcpi_last_data_sent" => u32_at(44),
        "tcpi_last_ack_sent" => u32_at(48),
        "tcpi_last_data_recv" => u32_at(52),
        "tcpi_last_ack_recv" => u32_at(56),
        "tcpi_pmtu" => u32_at(60),
        "tcpi_rcv_ssthresh" => u32_at(64),
        "tcpi_rtt" => u32_at(68),
        "tcpi_rttvar" => u32_at(72),
        "tcpi_snd_ssthresh" => u32_at(76),
        "tcpi_snd_cwnd" => u32_at(80),
        "tcpi_advmss" => u32_at(84),
        "tcpi_reordering" => u32_at(88),
        "tcpi_rcv_rtt" => u32_at(92),
        "tcpi_rcv_space" => u32_at(96),
        "tcpi_total_retrans" => u32_at(100),
        "tcpi_pacing_rate" => u64_at(104),
        "tcpi_max_pacing_rate" => u64_at(112),
        "tcpi_bytes_acked" => u64_at(120),
        "tcpi_bytes_received" => u64_at(128),
        "tcpi_segs_out" => u32_at(136),
        "tcpi_segs_in" => u32_at(140),
        "tcpi_notsent_bytes" => u32_at(144),
        "tcpi_min_rtt" => u32_at(148),
        "tcpi_data_segs_in" => u32_at(152),
        "tcpi_data_segs_out" => u32_at(156),
        "tcpi_delivery_rate" => u64_at(160),
        "tcpi_busy_time" => u64_at(168),
        "tcpi_rwnd_limited" => u64_at(176),
        "tcpi_sndbuf_limited" => u64_at(184),
        "tcpi_delivered" => u32_at(192),
        "tcpi_delivered_ce" => u32_at(196),
        "tcpi_bytes_sent" => u64_at(200),
        "tcpi_bytes_retrans" => u64_at(208),
        "tcpi_dsack_dups" => u32_at(216),
        "tcpi_reord_seen" => u32_at(220),
        "tcpi_rcv_ooopack" => u32_at(224),
        "tcpi_snd_wnd" => u32_at(228),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_info_layout() {
        let mut b = vec![0u8; 232];
        b[1] = 3;
        b[6] = 0x87;
        b[80..84].copy_from_slice(&10u32.to_ne_bytes());
        b[192..196].copy_from_slice(&42u32.to_ne_bytes());
        assert_eq!(tcp_info_field(&b, "tcpi_ca_state"), Some(3));
        assert_eq!(tcp_info_field(&b, "tcpi_snd_wscale"), Some(7));
        assert_eq!(tcp_info_field(&b, "tcpi_rcv_wscale"), Some(8));
        assert_eq!(tcp_info_field(&b, "tcpi_snd_cwnd"), Some(10));
        assert_eq!(tcp_info_field(&b, "tcpi_delivered"), Some(42));
        assert_eq!(
            tcp_info_field(&b[..100], "tcpi_delivered"),
            None,
            "short struct"
        );
        assert_eq!(tcp_info_field(&b, "tcpi_nonsense"), None);
    }

    /// A corpus tree as Google ships it (a real symlink), as a flattened checkout has it
    /// (a text file naming the target), with links out of the tree, a link loop, a
    /// dangling link and a link to the tree's own parent: the copy has working links or
    /// contents for all and terminates.
    #[test]
    fn corpus_copy_keeps_links_in_both_forms() {
        use std::os::unix::fs::{symlink, PermissionsExt};
        let base = std::env::temp_dir().join(format!(
            "ember-pd-copy-test-{}-{}",
            std::process::id(),
            RUNS.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&base);
        let tree = base.join("net");
        let w = |p: &str, text: &str| {
            let p = base.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        w("net/common/defaults.sh", "#!/bin/sh\necho defaults\n");
        w(
            "net/tcp/a/x.pkt",
            "0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n",
        );
        w("outside/helper.sh", "#!/bin/sh\necho outside\n");
        w("outside/dir/inner.py", "print(1)\n");
        std::fs::create_dir_all(tree.join("tcp/common")).unwrap();
        std::fs::create_dir_all(tree.join("flat/common")).unwrap();
        // Real symlink (relative), and the flattened form.
        symlink(
            "../../common/defaults.sh",
            tree.join("tcp/common/defaults.sh"),
        )
        .unwrap();
        w("net/flat/common/defaults.sh", "../../common/defaults.sh\n");
        // An absolute link to a file inside the tree, a link to a directory inside.
        symlink(tree.join("common/defaults.sh"), tree.join("tcp/abs.sh")).unwrap();
        symlink("../common", tree.join("tcp/common2")).unwrap();
        // Links out of the tree: a file and a directory.
        symlink(base.join("outside/helper.sh"), tree.join("tcp/helper.sh")).unwrap();
        symlink("../../outside/dir", tree.join("tcp/outdir")).unwrap();
        // A loop, a dangling link, a link to the tree's parent (which holds the tree).
        symlink("loop2", tree.join("tcp/loop1")).unwrap();
        symlink("loop1", tree.join("tcp/loop2")).unwrap();
        symlink("nowhere", tree.join("tcp/dangling")).unwrap();
        symlink("../..", tree.join("tcp/up")).unwrap();

        let copy = CorpusCopy::new(&tree).expect("copy");
        let c = copy.path().to_path_buf();
        let croot = std::fs::canonicalize(&c).unwrap();
        let read = |p: &str| std::fs::read_to_string(c.join(p));
        for (p, want) in [
            ("tcp/common/defaults.sh", "#!/bin/sh\necho defaults\n"),
            ("flat/common/defaults.sh", "#!/bin/sh\necho defaults\n"),
            ("tcp/abs.sh", "#!/bin/sh\necho defaults\n"),
            ("tcp/common2/defaults.sh", "#!/bin/sh\necho defaults\n"),
            ("tcp/helper.sh", "#!/bin/sh\necho outside\n"),
            ("tcp/outdir/inner.py", "print(1)\n"),
        ] {
            assert_eq!(read(p).as_deref().ok(), Some(want), "{p} in the copy");
        }
        // Links into the tree stay links, and point into the copy, not the source.
        for p in [
            "tcp/common/defaults.sh",
            "flat/common/defaults.sh",
            "tcp/abs.sh",
            "tcp/common2",
        ] {
            let meta = std::fs::symlink_metadata(c.join(p)).unwrap();
            assert!(meta.file_type().is_symlink(), "{p} is a link");
            let real = std::fs::canonicalize(c.join(p)).unwrap();
            assert!(real.starts_with(&croot), "{p} -> {}", real.display());
        }
        assert_eq!(
            std::fs::read_link(c.join("tcp/common/defaults.sh")).unwrap(),
            Path::new("../../common/defaults.sh")
        );
        // Links out of the tree are copies; helpers are executable.
        assert!(std::fs::symlink_metadata(c.join("tcp/helper.sh"))
            .unwrap()
            .is_file());
        let mode = std::fs::metadata(c.join("common/defaults.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o111, 0o111, "{mode:o}");
        // The loop and the dangling link are left out; the link to the parent is a
        // bounded copy that does not contain itself again.
        for p in ["tcp/loop1", "tcp/loop2", "tcp/dangling"] {
            assert!(std::fs::symlink_metadata(c.join(p)).is_err(), "{p}");
        }
        assert!(c.join("tcp/up/outside/helper.sh").is_file());
        assert!(
            !c.join("tcp/up/net").exists(),
            "the tree is not copied into itself"
        );
        drop(copy);
        assert!(!c.exists(), "removed on drop");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn constants_and_arguments() {
        assert_eq!(lconst("MSG_FASTOPEN"), Some(0x2000_0000));
        assert_eq!(lconst("EPOLLET"), Some(1 << 31));
        assert_eq!(lconst("NOT_A_CONSTANT"), None);
        // include/net/tcp_states.h
        for (i, n) in [
            "TCP_ESTABLISHED",
            "TCP_SYN_SENT",
            "TCP_SYN_RECV",
            "TCP_FIN_WAIT1",
            "TCP_FIN_WAIT2",
            "TCP_TIME_WAIT",
            "TCP_CLOSE",
            "TCP_CLOSE_WAIT",
            "TCP_LAST_ACK",
            "TCP_LISTEN",
            "TCP_CLOSING",
            "TCP_NEW_SYN_RECV",
            "TCP_BOUND_INACTIVE",
        ]
        .iter()
        .enumerate()
        {
            assert_eq!(lconst(n), Some(i as i64 + 1), "{n}");
        }
        assert_eq!(poll_text_hex(0x5), "0x5 (IN|OUT)");
        assert_eq!(poll_text_hex(0), "0x0 (0)");
    }
}
