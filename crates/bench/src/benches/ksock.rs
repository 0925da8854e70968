//! Kernel calls that `std` does not offer and that `libmicro` and `scale` need: a socket
//! on its own (`socket(2)` without `connect`, as libMicro's `socket` times it), a
//! non-blocking `connect(2)` on such a socket, `poll(2)` on one descriptor with a timeout
//! (libMicro waits with it; it bounds every wait here), `SO_LINGER` 0 (a teardown that
//! leaves no TIME_WAIT behind), `RLIMIT_NOFILE` (100,000 connections need 200,000
//! descriptors), `malloc_trim` (so that a memory baseline is not flattered by memory a
//! previous round freed) and the kernel's socket-memory counters from `/proc`.

use crate::env::{Conn, Listener};
use std::io;
use std::net::SocketAddrV4;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use std::time::{Duration, Instant};

/// `socket(domain, SOCK_STREAM | SOCK_CLOEXEC [| SOCK_NONBLOCK], 0)`.
pub fn socket(domain: libc::c_int, nonblocking: bool) -> io::Result<OwnedFd> {
    let mut ty = libc::SOCK_STREAM | libc::SOCK_CLOEXEC;
    if nonblocking {
        ty |= libc::SOCK_NONBLOCK;
    }
    // SAFETY: socket(2) takes plain integers and touches no memory of ours.
    let fd = unsafe { libc::socket(domain, ty, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by socket(2), is open, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Where a kernel socket connects.
#[derive(Debug, Clone)]
pub enum Target {
    Inet(SocketAddrV4),
    Unix(std::path::PathBuf),
}

/// One `connect(2)` call. A non-blocking TCP socket gives `EINPROGRESS` (as an error
/// whose `raw_os_error` says so) while the handshake is under way.
pub fn connect(fd: BorrowedFd<'_>, to: &Target) -> io::Result<()> {
    let r = match to {
        Target::Inet(a) => {
            let sa = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: `sa` is a live, initialised sockaddr_in and its size is passed
            // with it; the kernel only reads it.
            unsafe {
                libc::connect(
                    fd.as_raw_fd(),
                    (&sa as *const libc::sockaddr_in).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                )
            }
        }
        Target::Unix(p) => {
            // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
            let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
            sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
            let bytes = p.as_os_str().as_bytes();
            if bytes.len() >= sa.sun_path.len() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "unix socket path too long",
                ));
            }
            for (d, s) in sa.sun_path.iter_mut().zip(bytes) {
                *d = *s as libc::c_char;
            }
            let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
            // SAFETY: `sa` is a live sockaddr_un, NUL-terminated within its path array,
            // and `len` does not exceed its size; the kernel only reads it.
            unsafe {
                libc::connect(
                    fd.as_raw_fd(),
                    (&sa as *const libc::sockaddr_un).cast(),
                    len as libc::socklen_t,
                )
            }
        }
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether an error of a non-blocking `connect` means "under way, wait for writable".
pub fn in_progress(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINPROGRESS) | Some(libc::EALREADY) | Some(libc::EAGAIN)
    )
}

/// A non-blocking `connect` carried to its end as libMicro does: connect, and while it
/// is under way wait for writable (`poll`) and connect again, until it succeeds
/// (`EISCONN` counts as success), fails, or `deadline` passes (`TimedOut`).
pub fn connect_wait(fd: BorrowedFd<'_>, to: &Target, deadline: Instant) -> io::Result<()> {
    loop {
        match connect(fd, to) {
            Ok(()) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EISCONN) => return Ok(()),
            Err(e) if in_progress(&e) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out"));
                }
                wait_fd(fd, libc::POLLOUT, left)?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// `poll(2)` on one descriptor for `events`, at most `t`. `Ok(true)` if it is ready.
pub fn wait_fd(fd: BorrowedFd<'_>, events: libc::c_short, t: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    };
    let ms = t.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
    // SAFETY: `p` is one live pollfd and the count passed is 1.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    match r {
        0 => Ok(false),
        r if r > 0 => Ok(true),
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

/// Accepts one connection on any variant's listener, waiting at most `wait` (ember: its
/// accept timeout must be set; kernel: the listener must be non-blocking, and the wait is
/// `poll`, as libMicro's). `TimedOut` when nothing came.
pub fn accept_within(l: &Listener, wait: Duration) -> io::Result<Conn> {
    let deadline = Instant::now() + wait;
    loop {
        let (r, fd) = match l {
            Listener::Tcp(t) => (t.accept().map(|(s, _)| Conn::Tcp(s)), t.as_fd()),
            Listener::Unix(u) => (u.accept().map(|(s, _)| Conn::Unix(s)), u.as_fd()),
            Listener::Ember(e) => {
                return e.accept().map(|(s, _)| Conn::Ember(s)).map_err(|e| {
                    if e.kind() == io::ErrorKind::WouldBlock {
                        io::Error::new(io::ErrorKind::TimedOut, "accept timed out")
                    } else {
                        e
                    }
                })
            }
        };
        match r {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "accept timed out"));
                }
                wait_fd(fd, libc::POLLIN, left)?;
            }
            r => return r,
        }
    }
}

/// `SO_LINGER` {on, 0}: the close that follows resets the connection (no FIN, no
/// TIME_WAIT). Used only for untimed teardown.
pub fn set_linger_zero(fd: BorrowedFd<'_>) -> io::Result<()> {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `l` is a live linger struct and its size is passed with it.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `RLIMIT_NOFILE` as (soft, hard).
pub fn nofile() -> io::Result<(u64, u64)> {
    // SAFETY: rlimit is plain old data; all-zero is a valid value.
    let mut r: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: getrlimit writes one rlimit through the pointer, which points at `r`.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((r.rlim_cur as u64, r.rlim_max as u64))
}

/// Makes at least `need` descriptors available: the soft limit goes up to `need` if the
/// hard limit allows it; past the hard limit it asks for a higher hard limit too, which
/// only a process with `CAP_SYS_RESOURCE` gets. Returns the soft limit now in force;
/// an error names the limit when `need` cannot be had.
pub fn raise_nofile(need: u64) -> io::Result<u64> {
    let (soft, hard) = nofile()?;
    if soft >= need {
        return Ok(soft);
    }
    let set = |cur: u64, max: u64| {
        let r = libc::rlimit {
            rlim_cur: cur as libc::rlim_t,
            rlim_max: max as libc::rlim_t,
        };
        // SAFETY: setrlimit reads one rlimit through the pointer, which points at `r`.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    if need <= hard {
        set(need, hard)?;
        return Ok(need);
    }
    match set(need, need) {
        Ok(()) => Ok(need),
        Err(e) => {
            // At least take what the hard limit gives (the caller may fit in it later).
            let _ = set(hard, hard);
            Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "needs {need} file descriptors; RLIMIT_NOFILE hard limit is {hard} \
                     and raising it was refused ({e})"
                ),
            ))
        }
    }
}

/// Gives the allocator's free memory back to the OS (glibc `malloc_trim(0)`), so that
/// a resident-size baseline taken next is not flattered by pages a previous round
/// freed and the allocator kept. A no-op elsewhere.
pub fn malloc_trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it has no
    // preconditions and may be called at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Kernel memory that sockets use, in bytes: slab memory (`Slab` of `/proc/meminfo`:
/// the `TCP`, socket-inode, file and dentry objects of every socket) plus the pages TCP
/// has charged for socket buffers (`TCP: ... mem` of `/proc/net/sockstat`). System-wide:
/// other processes' activity is noise in a delta.
pub fn kernel_socket_memory() -> io::Result<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo")?;
    let sockstat = std::fs::read_to_string("/proc/net/sockstat")?;
    let slab_kb = meminfo_field(&meminfo, "Slab")
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no Slab in /proc/meminfo"))?;
    let tcp_pages = sockstat_tcp_mem(&sockstat).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    Ok(slab_kb * 1024 + tcp_pages * page)
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
pub fn mem_available() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    meminfo_field(&meminfo, "MemAvailable").map(|kb| kb * 1024)
}

/// A `Name:   123 kB` field of `/proc/meminfo`, in kB.
fn meminfo_field(s: &str, name: &str) -> Option<u64> {
    s.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == name).then(|| v.split_whitespace().next()?.parse().ok())?
    })
}

/// The `mem` figure (pages) of the `TCP:` line of `/proc/net/sockstat`.
fn sockstat_tcp_mem(s: &str) -> Option<u64> {
    let line = s.lines().find(|l| l.starts_with("TCP:"))?;
    let mut it = line.split_whitespace().skip(1);
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        if k == "mem" {
            return v.parse().ok();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn nonblocking_connect_reaches_a_kernel_listener_and_carries_bytes() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let std::net::SocketAddr::V4(a) = l.local_addr().unwrap() else {
            panic!("v4 listener");
        };
        let fd = socket(libc::AF_INET, true).unwrap();
        let to = Target::Inet(a);
        connect_wait(fd.as_fd(), &to, Instant::now() + Duration::from_secs(5)).unwrap();
        // A second connect on a connected socket is EISCONN, which counts as done.
        connect_wait(fd.as_fd(), &to, Instant::now() + Duration::from_secs(5)).unwrap();
        let mut c = std::net::TcpStream::from(fd);
        c.set_nonblocking(false).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.write_all(b"hi").unwrap();
        let mut b = [0u8; 2];
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"hi");
        set_linger_zero(c.as_fd()).unwrap();
        drop(c);
        // The reset reaches the peer: a read fails or sees the end.
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert!(matches!(s.read(&mut b), Ok(0) | Err(_)));
    }

    #[test]
    fn unix_connect_and_refusal() {
        let dir = std::env::temp_dir().join(format!("ember-ksock-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let l = std::os::unix::net::UnixListener::bind(&dir).unwrap();
        let fd = socket(libc::AF_UNIX, false).unwrap();
        connect_wait(
            fd.as_fd(),
            &Target::Unix(dir.clone()),
            Instant::now() + Duration::from_secs(5),
        )
        .unwrap();
        assert!(l.accept().is_ok());
        drop(l);
        let _ = std::fs::remove_file(&dir);
        let fd = socket(libc::AF_UNIX, false).unwrap();
        let e = connect(fd.as_fd(), &Target::Unix(dir)).unwrap_err();
        assert!(!in_progress(&e), "{e}");
        let long = Target::Unix(std::path::PathBuf::from("x".repeat(200)));
        assert_eq!(
            connect(fd.as_fd(), &long).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn poll_times_out_on_an_idle_listener_and_fires_on_a_connection() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let t0 = Instant::now();
        assert!(!wait_fd(l.as_fd(), libc::POLLIN, Duration::from_millis(20)).unwrap());
        assert!(t0.elapsed() >= Duration::from_millis(15));
        let _c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        assert!(wait_fd(l.as_fd(), libc::POLLIN, Duration::from_secs(5)).unwrap());
    }

    #[test]
    fn accept_within_takes_a_queued_connection_and_times_out_on_none() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let a = l.local_addr().unwrap();
        let l = Listener::Tcp(l);
        let t0 = Instant::now();
        let e = accept_within(&l, Duration::from_millis(30)).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(t0.elapsed() >= Duration::from_millis(25));
        let _c = std::net::TcpStream::connect(a).unwrap();
        assert!(matches!(
            accept_within(&l, Duration::from_secs(5)),
            Ok(Conn::Tcp(_))
        ));
        let s = ember_runtime::Stack::builder().squeues(1).build().unwrap();
        let el = ember_runtime::TcpListener::bind(&s, "127.0.0.1:7001").unwrap();
        el.set_accept_timeout(Some(Duration::from_millis(30)))
            .unwrap();
        let el = Listener::Ember(el);
        let e = accept_within(&el, Duration::from_millis(30)).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        let _c = ember_runtime::TcpStream::connect(&s, "127.0.0.1:7001").unwrap();
        assert!(matches!(
            accept_within(&el, Duration::from_secs(5)),
            Ok(Conn::Ember(_))
        ));
        s.shutdown();
    }

    #[test]
    fn nofile_limits_and_proc_parsers() {
        let (soft, hard) = nofile().unwrap();
        assert!(soft <= hard);
        assert_eq!(raise_nofile(soft.min(16)).unwrap(), soft);
        assert_eq!(
            meminfo_field("MemTotal: 10 kB\nSlab:    2048 kB\n", "Slab"),
            Some(2048)
        );
        assert_eq!(meminfo_field("Slab: x kB\n", "Slab"), None);
        let ss = "sockets: used 5\nTCP: inuse 3 orphan 0 tw 1 alloc 4 mem 7\nUDP: inuse 0 mem 9\n";
        assert_eq!(sockstat_tcp_mem(ss), Some(7));
        assert!(kernel_socket_memory().unwrap() > 0);
        assert!(mem_available().unwrap() > 0);
        malloc_trim();
    }
}
