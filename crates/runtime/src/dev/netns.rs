//! Network namespaces for tests, benchmarks and the interop suite: ember's real devices
//! (TAP, AF_PACKET) are exercised against the kernel only inside namespaces made for the
//! purpose, with addresses from 198.18.0.0/15 (RFC 2544), never on the host's own links.
//!
//! [`NetNs::create`] makes a namespace with `ip netns add` (its loopback up), and deletes
//! it when dropped, also when a test panics. [`NetNs::enter`] moves the *calling thread*
//! into it (`setns(2)` is per thread): a TAP interface opened afterwards from that thread
//! is created inside the namespace, and the thread's own kernel sockets live there too,
//! while ember's squeue threads need no namespace at all (they only use the descriptor).
//! [`NetNs::run`] runs a command inside with a time bound.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Whether this process may create namespaces and TAP devices (root, `ip`, `/dev/net/tun`).
/// `Err` carries the reason to print when skipping.
pub fn privileged() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root (network namespaces and TAP need CAP_NET_ADMIN)".into());
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Err("/dev/net/tun is missing".into());
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err("the `ip` command (iproute2) is missing".into()),
    }
}

/// Whether the program `name` is installed: an executable file of that name in a directory
/// of `PATH`, where `Command::new(name)` (and `ip netns exec NS name`) would find it. `Err`
/// carries the reason to print when skipping, naming the Debian `package` that has it.
pub fn need_tool(name: &str, package: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = !name.is_empty()
        && !name.contains('/')
        && std::env::split_paths(&path).any(|d| {
            std::fs::metadata(d.join(name))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        });
    if found {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not installed (Debian package {package}; \
             tests/interop/install-tools installs it as root)"
        ))
    }
}

/// A network namespace that is deleted on drop.
#[derive(Debug)]
pub struct NetNs {
    name: String,
}

impl NetNs {
    /// Creates namespace `name` (any stale one of that name is deleted first), with its
    /// loopback interface up.
    pub fn create(name: &str) -> io::Result<NetNs> {
        if name.is_empty()
            || name.len() > 64
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("bad namespace name {name:?}"),
            ));
        }
        let _ = Command::new("ip")
            .args(["netns", "del", name])
            .stderr(Stdio::null())
            .status();
        let ns = NetNs {
            name: name.to_string(),
        };
        ip(&["netns", "add", name])?;
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n NAME ARGS...`.
    pub fn ip(&self, args: &[&str]) -> io::Result<()> {
        let mut a = vec!["-n", self.name.as_str()];
        a.extend_from_slice(args);
        ip(&a)
    }

    /// Moves the calling thread into the namespace (for good: use a thread of its own).
    pub fn enter(&self) -> io::Result<()> {
        enter(&self.name)
    }

    /// A command that runs inside the namespace (`ip netns exec NAME PROGRAM`).
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Runs `cmd` to completion within `limit` (killed after it), capturing its output.
    pub fn run(cmd: &mut Command, limit: Duration) -> io::Result<Output> {
        run_bounded(cmd, limit)
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .stderr(Stdio::null())
            .status();
    }
}

/// Moves the calling thread into the namespace called `name` (made by `ip netns add`).
pub fn enter(name: &str) -> io::Result<()> {
    let f = std::fs::File::open(format!("/var/run/netns/{name}"))?;
    let fd: OwnedFd = f.into();
    // SAFETY: `fd` is an open namespace file we own for the whole call.
    let rc = unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs `f` with the calling thread moved into the namespace whose file is `target` (an
/// open `/var/run/netns/NAME`), and moves it back afterwards (also if `f` panics). Sockets
/// `f` creates belong to the target namespace for their whole life: this is how a thread
/// makes a kernel socket inside a test namespace without handing the work to a thread
/// that lives there (a hand-off costs two thread wake-ups).
pub fn within<R>(target: &std::fs::File, f: impl FnOnce() -> R) -> io::Result<R> {
    let home = std::fs::File::open("/proc/thread-self/ns/net")?;
    // SAFETY: setns(2) with a namespace file we hold open for the call.
    if unsafe { libc::setns(target.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    struct Back(std::fs::File);
    impl Drop for Back {
        fn drop(&mut self) {
            // SAFETY: as above, with the thread's own namespace file.
            if unsafe { libc::setns(self.0.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                // A thread left in the wrong namespace would make every later socket of
                // it in the wrong place, silently: stop instead.
                eprintln!(
                    "netns::within: cannot return to the thread's own namespace: {}",
                    io::Error::last_os_error()
                );
                std::process::abort();
            }
        }
    }
    let _back = Back(home);
    Ok(f())
}

fn ip(args: &[&str]) -> io::Result<()> {
    let o = Command::new("ip").args(args).output()?;
    if !o.status.success() {
        return Err(io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        )));
    }
    Ok(())
}

/// Runs `cmd` with its output captured, killing it if it is still running after `limit`
/// (the result then says `TimedOut`).
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> io::Result<Output> {
    use std::os::unix::process::CommandExt;
    // Its own process group, so that the deadline kills its children too (a shell's
    // children would otherwise keep the output pipes open past the kill).
    let mut child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    // Drain the pipes on threads so a chatty child cannot block on a full pipe.
    let mut so = child.stdout.take();
    let mut se = child.stderr.take();
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(s) = so.as_mut() {
            let _ = io::Read::read_to_end(s, &mut v);
        }
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(s) = se.as_mut() {
            let _ = io::Read::read_to_end(s, &mut v);
        }
        v
    });
    // A thread waits for the child; this one waits for that thread's word or the deadline,
    // and kills the child at the deadline (no polling).
    let pid = child.id() as libc::pid_t;
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = match rx.recv_timeout(limit) {
        Ok(s) => Some(s?),
        Err(_) => {
            // SAFETY: kill(2) takes no pointers. The pid is our child's; the waiter may
            // have reaped it an instant ago, and only in that instant could the pid have
            // been reused, which the kernel's pid allocation (cycling through the pid
            // space) makes practically impossible.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            let _ = rx.recv();
            None
        }
    };
    let _ = waiter.join();
    let stdout = t_out.join().unwrap_or_default();
    let stderr = t_err.join().unwrap_or_default();
    match status {
        Some(status) => Ok(Output {
            status,
            stdout,
            stderr,
        }),
        None => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "{:?} still running after {limit:?}; killed (stderr: {})",
                cmd,
                String::from_utf8_lossy(&stderr).trim()
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_names_are_refused() {
        for n in ["", "a b", "../x", &"x".repeat(65)] {
            assert_eq!(
                NetNs::create(n).unwrap_err().kind(),
                io::ErrorKind::InvalidInput
            );
        }
    }

    #[test]
    fn within_steps_in_and_back_out() {
        if let Err(why) = privileged() {
            eprintln!("skipped: {why}");
            return;
        }
        let me = || std::fs::read_link("/proc/thread-self/ns/net").unwrap();
        let home = me();
        let ns = NetNs::create(&format!("ember-within-{}", std::process::id())).unwrap();
        let f = std::fs::File::open(format!("/var/run/netns/{}", ns.name())).unwrap();
        let (inside, sock) =
            within(&f, || (me(), std::net::TcpListener::bind("127.0.0.1:0"))).unwrap();
        assert_ne!(inside, home);
        assert_eq!(me(), home);
        // The socket made inside stays there: the namespace's loopback, not ours.
        let port = sock.unwrap().local_addr().unwrap().port();
        assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
        // Back home even when the closure panics.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            within(&f, || panic!("inside")).ok();
        }));
        assert!(r.is_err());
        assert_eq!(me(), home);
    }

    #[test]
    fn need_tool_finds_programs_on_path_only() {
        assert_eq!(need_tool("sh", "dash"), Ok(()));
        let e = need_tool("ember-no-such-tool", "none").unwrap_err();
        assert!(e.contains("`ember-no-such-tool` is not installed"), "{e}");
        assert!(e.contains("Debian package none"), "{e}");
        // A path is not a tool name; neither is nothing.
        assert!(need_tool("/bin/sh", "dash").is_err());
        assert!(need_tool("", "none").is_err());
    }

    #[test]
    fn bounded_runs_end() {
        let o = run_bounded(Command::new("true").arg("x"), Duration::from_secs(5)).unwrap();
        assert!(o.status.success());
        let e =
            run_bounded(Command::new("sleep").arg("10"), Duration::from_millis(100)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }
}
