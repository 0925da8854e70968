//! Process orchestration: the coordinator of a scenario and the roles it starts.
//!
//! Design: `ember-xproc-check run NAME` is the *coordinator*. It opens no inet socket itself; it
//! starts each end of the scenario as a separate process by re-executing its own binary as
//! `role NAME ROLE key=value...`, so every end is started by `exec` and picks up `LD_PRELOAD`
//! from the environment (or has it removed, `Env::NoPreload`). Synchronisation channels
//! (`Link`) are handed to a role at fixed fds `LINK_BASE + i`. Each role's stdout is a separate
//! pipe; the coordinator prints its own lines as they happen and, at the end, each role's lines
//! under a `== label` header in spawn order, so the transcript does not depend on how the
//! processes interleaved. Role exit statuses are recorded; a role that panicked (a harness
//! failure: lost sync, bad protocol) makes the whole run fail. Everything is bounded by the
//! coordinator's deadline, after which it kills its roles and fails; roles also die with the
//! coordinator (PR_SET_PDEATHSIG).

use crate::link::Link;
use crate::out;
use crate::sys::{self, Fd};
use std::collections::HashMap;
use std::io::Read;
use std::os::unix::io::RawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// The first fd number at which a role finds its links.
pub const LINK_BASE: RawFd = 100;

/// Exit code a role uses for a harness failure it detected itself.
pub const HARNESS_FAIL: i32 = 86;

/// How a role's environment relates to the coordinator's.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Env {
    /// Inherit everything, `LD_PRELOAD` included.
    Inherit,
    /// Remove `LD_PRELOAD` (a peer not under ember).
    NoPreload,
}

/// Arguments of a role (`key=value` words).
pub struct Args {
    kv: HashMap<String, String>,
}

impl Args {
    /// Parses `key=value` words.
    pub fn parse(words: &[String]) -> Args {
        let mut kv = HashMap::new();
        for w in words {
            if let Some((k, v)) = w.split_once('=') {
                kv.insert(k.to_string(), v.to_string());
            }
        }
        Args { kv }
    }
    /// A string argument (panics if missing: a harness bug).
    pub fn get(&self, k: &str) -> &str {
        self.kv
            .get(k)
            .map(|s| s.as_str())
            .unwrap_or_else(|| panic!("role argument {k} missing"))
    }
    /// An optional argument.
    pub fn opt(&self, k: &str) -> Option<&str> {
        self.kv.get(k).map(|s| s.as_str())
    }
    /// A numeric argument.
    pub fn u64(&self, k: &str) -> u64 {
        self.get(k).parse().expect("numeric role argument")
    }
    /// An fd argument.
    pub fn fd(&self, k: &str) -> RawFd {
        self.get(k).parse().expect("fd role argument")
    }
    /// The seed.
    pub fn seed(&self) -> u64 {
        self.opt("seed").and_then(|s| s.parse().ok()).unwrap_or(1)
    }
    /// Link number `i` of this role.
    pub fn link(&self, i: i32) -> Link {
        Link::at(LINK_BASE + i)
    }
}

struct RoleProc {
    label: String,
    child: Child,
    out: Option<Receiver<Vec<u8>>>,
    status: Option<ExitStatus>,
    killed_on_purpose: bool,
}

/// The coordinator of one scenario run.
pub struct Coord {
    /// Scenario name.
    pub name: &'static str,
    /// The seed.
    pub seed: u64,
    procs: Vec<RoleProc>,
    deadline: Instant,
    exe: std::path::PathBuf,
}

/// Renders an exit status without pids or times.
pub fn status_name(s: &ExitStatus) -> String {
    if let Some(c) = s.code() {
        format!("exit {c}")
    } else if let Some(sig) = s.signal() {
        format!("killed by {}", signame(sig))
    } else {
        "unknown status".to_string()
    }
}

/// A signal's name.
pub fn signame(sig: i32) -> String {
    match sig {
        libc::SIGKILL => "SIGKILL".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGSEGV => "SIGSEGV".into(),
        libc::SIGABRT => "SIGABRT".into(),
        libc::SIGPIPE => "SIGPIPE".into(),
        libc::SIGBUS => "SIGBUS".into(),
        libc::SIGALRM => "SIGALRM".into(),
        libc::SIGUSR1 => "SIGUSR1".into(),
        libc::SIGSTOP => "SIGSTOP".into(),
        _ => format!("signal {sig}"),
    }
}

impl Coord {
    /// A coordinator for `name` with a deadline `budget` from now.
    pub fn new(name: &'static str, seed: u64, budget: Duration) -> Coord {
        Coord {
            name,
            seed,
            procs: Vec::new(),
            deadline: Instant::now() + budget,
            exe: std::env::current_exe().expect("current_exe"),
        }
    }

    /// Starts `role` of this scenario as a new process (by exec of this binary), with `links`
    /// at fds `LINK_BASE..` and the seed added to `args`. Returns the role's index.
    pub fn spawn(
        &mut self,
        label: &str,
        role: &str,
        args: &[String],
        links: Vec<Fd>,
        env: Env,
    ) -> usize {
        let mut cmd = Command::new(&self.exe);
        cmd.arg("role")
            .arg(self.name)
            .arg(role)
            .arg(format!("seed={}", self.seed))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if env == Env::NoPreload {
            cmd.env_remove("LD_PRELOAD");
        }
        let raws: Vec<RawFd> = links.iter().map(|f| f.raw()).collect();
        assert!(raws.iter().all(|&f| f < LINK_BASE), "link fd too high");
        // SAFETY: the closure only calls dup2/fcntl (async-signal-safe) on fds we hold.
        unsafe {
            cmd.pre_exec(move || {
                for (i, &fd) in raws.iter().enumerate() {
                    if libc::dup2(fd, LINK_BASE + i as RawFd) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().expect("spawn role");
        drop(links);
        let mut so = child.stdout.take().expect("stdout");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = so.read_to_end(&mut v);
            let _ = tx.send(v);
        });
        self.procs.push(RoleProc {
            label: label.to_string(),
            child,
            out: Some(rx),
            status: None,
            killed_on_purpose: false,
        });
        self.procs.len() - 1
    }

    /// A role's pid (for signals; never printed).
    pub fn pid(&self, i: usize) -> i32 {
        self.procs[i].child.id() as i32
    }

    /// Sends `sig` to a role; SIGKILL marks it as killed on purpose.
    pub fn signal(&mut self, i: usize, sig: i32) {
        if sig == libc::SIGKILL {
            self.procs[i].killed_on_purpose = true;
        }
        sys::kill(self.pid(i), sig);
    }

    /// Waits (bounded by the deadline) for a role to end and records its status.
    pub fn wait(&mut self, i: usize) -> String {
        if self.procs[i].status.is_none() {
            loop {
                if let Some(s) = self.procs[i].child.try_wait().expect("try_wait") {
                    self.procs[i].status = Some(s);
                    break;
                }
                if Instant::now() >= self.deadline {
                    panic!(
                        "scenario {}: role {} did not finish in time",
                        self.name, self.procs[i].label
                    );
                }
                sys::sleep_ms(2);
            }
        }
        status_name(self.procs[i].status.as_ref().expect("status"))
    }

    /// The time left before the deadline.
    pub fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Waits for every role, prints statuses and each role's section; returns whether the run
    /// had no harness failure.
    pub fn finish(&mut self) -> bool {
        let mut ok = true;
        for i in 0..self.procs.len() {
            let st = self.wait(i);
            out!("role {}: {}", self.procs[i].label, st);
            let s = self.procs[i].status.expect("status");
            let expected = s.code() == Some(0)
                || (self.procs[i].killed_on_purpose && s.signal() == Some(libc::SIGKILL));
            if !expected {
                eprintln!(
                    "scenario {}: role {} ended with {}",
                    self.name, self.procs[i].label, st
                );
                ok = false;
            }
        }
        for i in 0..self.procs.len() {
            let rx = self.procs[i].out.take().expect("output channel");
            let text = match rx.recv_timeout(self.left().max(Duration::from_millis(500))) {
                Ok(v) => String::from_utf8_lossy(&v).into_owned(),
                Err(_) => {
                    eprintln!(
                        "scenario {}: output of {} not closed (a child still holds it)",
                        self.name, self.procs[i].label
                    );
                    ok = false;
                    String::new()
                }
            };
            out!("== {}", self.procs[i].label);
            for l in text.lines() {
                crate::log::line(l);
            }
        }
        ok
    }

    /// The common shape: a server and a client role joined by one link, both inheriting the
    /// environment unless told otherwise. Returns (server, client) indices.
    pub fn server_client(&mut self, args: &[String], s_env: Env, c_env: Env) -> (usize, usize) {
        let (a, b) = Link::pair();
        let s = self.spawn("server", "server", args, vec![a.into_fd()], s_env);
        let c = self.spawn("client", "client", args, vec![b.into_fd()], c_env);
        (s, c)
    }
}

impl Drop for Coord {
    fn drop(&mut self) {
        for p in &mut self.procs {
            if p.status.is_none() {
                let _ = p.child.kill();
                let _ = p.child.wait();
            }
        }
    }
}

/// Run at the start of every role: die with the coordinator, and be sure SIGPIPE is ignored
/// (every send uses MSG_NOSIGNAL anyway; plain write() may meet EPIPE).
pub fn role_prelude() {
    // SAFETY: plain prctl/signal calls.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// The path of this binary (for a role that execs a continuation of itself).
pub fn self_exe() -> std::path::PathBuf {
    std::env::current_exe().expect("current_exe")
}

/// Forks; the child runs `f` with its transcript lines going to a pipe and exits (code 0, or
/// 101 if `f` panicked). Returns the child's pid and the read end of its transcript pipe.
pub fn fork_child(f: impl FnOnce()) -> (i32, Fd) {
    let (r, w) = sys::pipe();
    // SAFETY: the roles are single-threaded when they fork, so the child may run Rust code.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", sys::errname(sys::errno()));
    if pid == 0 {
        // The parent-death signal is not inherited across fork: set it again.
        // SAFETY: plain prctl.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
        drop(r);
        crate::log::set_fd(w.raw());
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let code = if res.is_ok() { 0 } else { 101 };
        // SAFETY: leave without running the parent's atexit handlers or destructors.
        unsafe { libc::_exit(code) };
    }
    drop(w);
    (pid, r)
}

/// Waits (bounded) for a forked child and copies its transcript lines with a prefix. Returns
/// the rendered status. A child that panicked is a harness failure.
pub fn reap_child(pid: i32, log: Fd, prefix: &str) -> String {
    let mut status = 0;
    let done = sys::wait_until(Duration::from_secs(20), || {
        // SAFETY: plain waitpid.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        r == pid
    });
    if !done {
        sys::kill(pid, libc::SIGKILL);
        panic!("forked child did not finish in time");
    }
    let mut text = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match sys::read(log.raw(), &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => text.extend_from_slice(&buf[..n]),
        }
    }
    for l in String::from_utf8_lossy(&text).lines() {
        out!("{prefix}{l}");
    }
    let st = ExitStatus::from_raw(status);
    assert!(st.code() != Some(101), "forked child panicked");
    status_name(&st)
}

/// Waits (bounded) for a child process that is not a forked role (posix_spawn, vfork...).
pub fn wait_pid(pid: i32) -> String {
    let mut status = 0;
    let done = sys::wait_until(Duration::from_secs(20), || {
        // SAFETY: plain waitpid.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        r == pid
    });
    if !done {
        sys::kill(pid, libc::SIGKILL);
        panic!("child process did not finish in time");
    }
    status_name(&ExitStatus::from_raw(status))
}
