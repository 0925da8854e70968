//! Thin wrappers over the socket calls the scenarios make, and the helpers they share.
//!
//! Design: every call goes through libc's public symbol (never a raw syscall unless a scenario
//! is about raw syscalls), so a preload library sees exactly what an unmodified C program would
//! do. Results are `Result<T, i32>` with the errno, which the transcript records by *name*
//! (`errname`). Nothing here prints fds, ports, pids or times. Every wait is bounded: `wait_*`
//! helpers poll a condition with short sleeps until a deadline and return the last observation,
//! so a scenario records "what holds once quiet" and a library that never reaches it shows up
//! as a transcript difference, not a hang.

use sha2::{Digest, Sha256};
use std::ffi::CString;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::io::RawFd;
use std::time::{Duration, Instant};

/// Result of a call: the value, or the errno.
pub type R<T> = Result<T, i32>;

/// The errno of the last failing libc call.
pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The symbolic name of an errno value, as the transcript shows it.
pub fn errname(e: i32) -> String {
    let s = match e {
        libc::EAGAIN => "EAGAIN",
        libc::EINTR => "EINTR",
        libc::ECONNRESET => "ECONNRESET",
        libc::EPIPE => "EPIPE",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::ECONNABORTED => "ECONNABORTED",
        libc::EINVAL => "EINVAL",
        libc::EBADF => "EBADF",
        libc::ENOTCONN => "ENOTCONN",
        libc::ENOENT => "ENOENT",
        libc::EEXIST => "EEXIST",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EINPROGRESS => "EINPROGRESS",
        libc::EALREADY => "EALREADY",
        libc::EISCONN => "EISCONN",
        libc::ENOTSOCK => "ENOTSOCK",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EFAULT => "EFAULT",
        libc::EMSGSIZE => "EMSGSIZE",
        libc::ENOBUFS => "ENOBUFS",
        libc::ENOMEM => "ENOMEM",
        libc::EADDRINUSE => "EADDRINUSE",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        libc::ESPIPE => "ESPIPE",
        libc::ESHUTDOWN => "ESHUTDOWN",
        libc::ENOSYS => "ENOSYS",
        libc::EPERM => "EPERM",
        libc::EACCES => "EACCES",
        libc::EMFILE => "EMFILE",
        libc::ECHILD => "ECHILD",
        libc::ESRCH => "ESRCH",
        libc::ENOPROTOOPT => "ENOPROTOOPT",
        libc::EDESTADDRREQ => "EDESTADDRREQ",
        libc::ELOOP => "ELOOP",
        _ => return format!("E#{e}"),
    };
    s.to_string()
}

/// "ok N" or the errno name: the usual transcript rendering of a byte-count call.
pub fn show(r: &R<usize>) -> String {
    match r {
        Ok(n) => format!("ok {n}"),
        Err(e) => errname(*e),
    }
}

/// Like `show` but names a zero-byte read "EOF".
pub fn show_read(r: &R<usize>) -> String {
    match r {
        Ok(0) => "EOF".to_string(),
        Ok(n) => format!("ok {n}"),
        Err(e) => errname(*e),
    }
}

/// "ok" or the errno name for calls without a useful value.
pub fn show_unit(r: &R<()>) -> String {
    match r {
        Ok(()) => "ok".to_string(),
        Err(e) => errname(*e),
    }
}

fn cvt(r: libc::c_int) -> R<libc::c_int> {
    if r < 0 {
        Err(errno())
    } else {
        Ok(r)
    }
}

fn cvt_sz(r: libc::ssize_t) -> R<usize> {
    if r < 0 {
        Err(errno())
    } else {
        Ok(r as usize)
    }
}

/// An owned file descriptor, closed on drop.
#[derive(Debug)]
pub struct Fd(RawFd);

impl Fd {
    /// Takes ownership of `fd`.
    pub fn own(fd: RawFd) -> Fd {
        Fd(fd)
    }
    /// The raw number (never printed).
    pub fn raw(&self) -> RawFd {
        self.0
    }
    /// Gives up ownership without closing.
    pub fn into_raw(self) -> RawFd {
        let fd = self.0;
        std::mem::forget(self);
        fd
    }
    /// Closes now and reports the result.
    pub fn close(self) -> R<()> {
        let fd = self.into_raw();
        // SAFETY: we owned fd.
        cvt(unsafe { libc::close(fd) }).map(|_| ())
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: we own the fd.
        unsafe { libc::close(self.0) };
    }
}

/// Clears or sets FD_CLOEXEC.
pub fn set_cloexec(fd: RawFd, on: bool) {
    // SAFETY: fcntl on an fd we hold.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFD);
        let nf = if on {
            fl | libc::FD_CLOEXEC
        } else {
            fl & !libc::FD_CLOEXEC
        };
        libc::fcntl(fd, libc::F_SETFD, nf);
    }
}

/// Sets O_NONBLOCK through fcntl.
pub fn set_nonblock(fd: RawFd, on: bool) {
    // SAFETY: fcntl on an fd we hold.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        let nf = if on {
            fl | libc::O_NONBLOCK
        } else {
            fl & !libc::O_NONBLOCK
        };
        libc::fcntl(fd, libc::F_SETFL, nf);
    }
}

/// Sets non-blocking mode through ioctl(FIONBIO).
pub fn set_fionbio(fd: RawFd, on: bool) {
    let mut v: libc::c_int = on as libc::c_int;
    // SAFETY: FIONBIO takes an int pointer.
    unsafe { libc::ioctl(fd, libc::FIONBIO, &mut v) };
}

/// A pipe (both ends CLOEXEC): (read, write).
pub fn pipe() -> (Fd, Fd) {
    let mut p = [0; 2];
    // SAFETY: p has room for two fds.
    let r = unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(r, 0, "pipe2: {}", errname(errno()));
    (Fd(p[0]), Fd(p[1]))
}

/// The socket address of `ip:port` in C form.
pub fn sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_storage is valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = &mut ss as *mut _ as *mut libc::sockaddr_in;
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
            unsafe {
                (*sin).sin_family = libc::AF_INET as libc::sa_family_t;
                (*sin).sin_port = a.port().to_be();
                (*sin).sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
            }
            (
                ss,
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        }
        SocketAddr::V6(a) => {
            let sin6 = &mut ss as *mut _ as *mut libc::sockaddr_in6;
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in6.
            unsafe {
                (*sin6).sin6_family = libc::AF_INET6 as libc::sa_family_t;
                (*sin6).sin6_port = a.port().to_be();
                (*sin6).sin6_addr.s6_addr = a.ip().octets();
            }
            (
                ss,
                std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            )
        }
    }
}

fn from_sockaddr(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match ss.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: family says sockaddr_in.
            let sin = unsafe { &*(ss as *const _ as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be(sin.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: family says sockaddr_in6.
            let sin6 = unsafe { &*(ss as *const _ as *const libc::sockaddr_in6) };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::new(
                IpAddr::V6(ip),
                u16::from_be(sin6.sin6_port),
            ))
        }
        _ => None,
    }
}

/// A new TCP socket of the family of `ip` (CLOEXEC).
pub fn tcp_socket(ip: IpAddr) -> R<Fd> {
    let dom = if ip.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain socket call.
    cvt(unsafe { libc::socket(dom, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) }).map(Fd)
}

/// Sets an int socket option.
pub fn setsockopt_int(fd: RawFd, level: i32, name: i32, v: i32) -> R<()> {
    // SAFETY: option value is an int.
    cvt(unsafe { libc::setsockopt(fd, level, name, &v as *const i32 as *const libc::c_void, 4) })
        .map(|_| ())
}

/// Reads an int socket option.
pub fn getsockopt_int(fd: RawFd, level: i32, name: i32) -> R<i32> {
    let mut v: i32 = 0;
    let mut len: libc::socklen_t = 4;
    // SAFETY: option value is an int.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            &mut v as *mut i32 as *mut libc::c_void,
            &mut len,
        )
    })
    .map(|_| v)
}

/// Binds `ip:0` and listens; returns the socket and the port the kernel chose.
pub fn listen_on(ip: IpAddr, v6only: Option<bool>) -> (Fd, u16) {
    let fd = tcp_socket(ip).expect("socket");
    if let Some(v) = v6only {
        setsockopt_int(fd.raw(), libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, v as i32)
            .expect("IPV6_V6ONLY");
    }
    let (ss, len) = sockaddr(SocketAddr::new(ip, 0));
    // SAFETY: ss/len describe a valid address.
    let r = unsafe { libc::bind(fd.raw(), &ss as *const _ as *const libc::sockaddr, len) };
    assert_eq!(r, 0, "bind {ip}: {}", errname(errno()));
    // SAFETY: plain listen.
    let r = unsafe { libc::listen(fd.raw(), 64) };
    assert_eq!(r, 0, "listen: {}", errname(errno()));
    let port = local_addr(fd.raw()).expect("getsockname").port();
    (fd, port)
}

/// getsockname.
pub fn local_addr(fd: RawFd) -> Option<SocketAddr> {
    // SAFETY: zeroed storage is valid; the kernel fills it.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: ss/len are valid out-parameters.
    let r = unsafe { libc::getsockname(fd, &mut ss as *mut _ as *mut libc::sockaddr, &mut len) };
    if r != 0 {
        return None;
    }
    from_sockaddr(&ss)
}

/// getpeername.
pub fn peer_addr(fd: RawFd) -> R<SocketAddr> {
    // SAFETY: zeroed storage is valid; the kernel fills it.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: ss/len are valid out-parameters.
    let r = unsafe { libc::getpeername(fd, &mut ss as *mut _ as *mut libc::sockaddr, &mut len) };
    if r != 0 {
        return Err(errno());
    }
    from_sockaddr(&ss).ok_or(libc::EAFNOSUPPORT)
}

/// Describes an address without its port: family and whether it is loopback / v4-mapped.
pub fn addr_kind(a: &SocketAddr) -> String {
    match a.ip() {
        IpAddr::V4(ip) => format!("inet {ip}"),
        IpAddr::V6(ip) => match ip.to_ipv4_mapped() {
            Some(v4) => format!("inet6 mapped {v4}"),
            None => format!("inet6 {ip}"),
        },
    }
}

/// Connects a new blocking socket to `ip:port`.
pub fn connect_to(ip: IpAddr, port: u16) -> R<Fd> {
    let fd = tcp_socket(ip)?;
    let (ss, len) = sockaddr(SocketAddr::new(ip, port));
    // SAFETY: ss/len describe a valid address.
    cvt(unsafe { libc::connect(fd.raw(), &ss as *const _ as *const libc::sockaddr, len) })?;
    Ok(fd)
}

/// Accepts one connection (CLOEXEC), blocking.
pub fn accept(l: RawFd) -> R<Fd> {
    // SAFETY: null address pointers are allowed.
    cvt(unsafe {
        libc::accept4(
            l,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC,
        )
    })
    .map(Fd)
}

/// Accepts with a bounded wait; panics (harness failure) if nothing comes.
pub fn accept_within(l: RawFd, t: Duration) -> Fd {
    let rev = poll1(l, libc::POLLIN, t.as_millis() as i32).expect("poll listener");
    assert!(
        rev & libc::POLLIN != 0,
        "no connection to accept within {t:?}"
    );
    accept(l).expect("accept")
}

/// send(2).
pub fn send(fd: RawFd, b: &[u8], flags: i32) -> R<usize> {
    // SAFETY: b is a valid buffer.
    cvt_sz(unsafe { libc::send(fd, b.as_ptr() as *const libc::c_void, b.len(), flags) })
}

/// recv(2).
pub fn recv(fd: RawFd, b: &mut [u8], flags: i32) -> R<usize> {
    // SAFETY: b is a valid buffer.
    cvt_sz(unsafe { libc::recv(fd, b.as_mut_ptr() as *mut libc::c_void, b.len(), flags) })
}

/// write(2).
pub fn write(fd: RawFd, b: &[u8]) -> R<usize> {
    // SAFETY: b is a valid buffer.
    cvt_sz(unsafe { libc::write(fd, b.as_ptr() as *const libc::c_void, b.len()) })
}

/// read(2).
pub fn read(fd: RawFd, b: &mut [u8]) -> R<usize> {
    // SAFETY: b is a valid buffer.
    cvt_sz(unsafe { libc::read(fd, b.as_mut_ptr() as *mut libc::c_void, b.len()) })
}

/// shutdown(2).
pub fn shutdown(fd: RawFd, how: i32) -> R<()> {
    // SAFETY: plain call.
    cvt(unsafe { libc::shutdown(fd, how) }).map(|_| ())
}

/// Sends all of `b` (blocking socket), restarting on short writes.
pub fn send_all(fd: RawFd, b: &[u8]) -> R<()> {
    let mut off = 0;
    while off < b.len() {
        off += send(fd, &b[off..], libc::MSG_NOSIGNAL)?;
    }
    Ok(())
}

/// Reads exactly `n` bytes from a blocking socket; stops early at EOF or error.
pub fn recv_exact(fd: RawFd, n: usize) -> (Vec<u8>, R<usize>) {
    let mut v = vec![0u8; n];
    let mut got = 0;
    while got < n {
        match recv(fd, &mut v[got..], 0) {
            Ok(0) => {
                v.truncate(got);
                return (v, Ok(0));
            }
            Ok(k) => got += k,
            Err(e) => {
                v.truncate(got);
                return (v, Err(e));
            }
        }
    }
    (v, Ok(n))
}

/// Reads until EOF or error from a blocking socket; returns the bytes and how it ended.
pub fn recv_to_end(fd: RawFd) -> (Vec<u8>, R<usize>) {
    let mut v = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        match recv(fd, &mut buf, 0) {
            Ok(0) => return (v, Ok(0)),
            Ok(k) => v.extend_from_slice(&buf[..k]),
            Err(e) => return (v, Err(e)),
        }
    }
}

/// An int ioctl (FIONREAD, SIOCOUTQ, SIOCATMARK...).
pub fn ioctl_int(fd: RawFd, req: libc::Ioctl) -> R<i32> {
    let mut v: libc::c_int = 0;
    // SAFETY: these requests write one int.
    cvt(unsafe { libc::ioctl(fd, req, &mut v) }).map(|_| v)
}

/// SIOCINQ (same number as FIONREAD on Linux).
pub const SIOCINQ: libc::Ioctl = libc::FIONREAD;
/// SIOCOUTQ (same number as TIOCOUTQ on Linux).
pub const SIOCOUTQ: libc::Ioctl = libc::TIOCOUTQ;
/// SIOCOUTQNSD: bytes not yet sent.
pub const SIOCOUTQNSD: libc::Ioctl = 0x894B;
/// SIOCATMARK.
pub const SIOCATMARK: libc::Ioctl = 0x8905;

/// FIONREAD.
pub fn fionread(fd: RawFd) -> R<i32> {
    ioctl_int(fd, libc::FIONREAD)
}

/// SO_ERROR, rendered.
pub fn so_error(fd: RawFd) -> String {
    match getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_ERROR) {
        Ok(0) => "0".to_string(),
        Ok(e) => errname(e),
        Err(e) => format!("getsockopt {}", errname(e)),
    }
}

/// The TCP state from TCP_INFO, by name.
pub fn tcp_state(fd: RawFd) -> String {
    // SAFETY: zeroed tcp_info is valid; the kernel fills it.
    let mut ti: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: ti/len are valid out-parameters.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            &mut ti as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    if r != 0 {
        return format!("TCP_INFO {}", errname(errno()));
    }
    let names = [
        "?",
        "ESTABLISHED",
        "SYN_SENT",
        "SYN_RECV",
        "FIN_WAIT1",
        "FIN_WAIT2",
        "TIME_WAIT",
        "CLOSE",
        "CLOSE_WAIT",
        "LAST_ACK",
        "LISTEN",
        "CLOSING",
    ];
    names
        .get(ti.tcpi_state as usize)
        .map(|s| s.to_string())
        .unwrap_or_else(|| format!("state#{}", ti.tcpi_state))
}

/// Sets SO_LINGER.
pub fn set_linger(fd: RawFd, on: bool, secs: i32) -> R<()> {
    let l = libc::linger {
        l_onoff: on as i32,
        l_linger: secs,
    };
    // SAFETY: option value is a struct linger.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &l as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// Sets SO_RCVTIMEO or SO_SNDTIMEO.
pub fn set_timeo(fd: RawFd, name: i32, t: Duration) -> R<()> {
    let tv = libc::timeval {
        tv_sec: t.as_secs() as libc::time_t,
        tv_usec: t.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: option value is a struct timeval.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            name,
            &tv as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// poll(2) on one fd.
pub fn poll1(fd: RawFd, events: i16, timeout_ms: i32) -> R<i16> {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    cvt(unsafe { libc::poll(&mut p, 1, timeout_ms) }).map(|_| p.revents)
}

/// The usual interest set for readiness records.
pub const ALL_EV: i16 = libc::POLLIN | libc::POLLOUT | libc::POLLPRI | libc::POLLRDHUP;

/// Renders a poll/epoll event mask by name, in a fixed order.
pub fn evname(ev: u32) -> String {
    let table: [(u32, &str); 9] = [
        (libc::POLLIN as u32, "IN"),
        (libc::POLLPRI as u32, "PRI"),
        (libc::POLLOUT as u32, "OUT"),
        (libc::POLLERR as u32, "ERR"),
        (libc::POLLHUP as u32, "HUP"),
        (libc::POLLNVAL as u32, "NVAL"),
        (libc::POLLRDHUP as u32, "RDHUP"),
        (libc::POLLRDNORM as u32, "RDNORM"),
        (libc::POLLWRNORM as u32, "WRNORM"),
    ];
    let mut parts = Vec::new();
    let mut rest = ev;
    for (bit, name) in table {
        if ev & bit != 0 {
            parts.push(name.to_string());
            rest &= !bit;
        }
    }
    if rest != 0 {
        parts.push(format!("{rest:#x}"));
    }
    if parts.is_empty() {
        "none".to_string()
    } else {
        parts.join("|")
    }
}

/// Polls `fd` for `events` until every bit of `want` is reported (or `t` passes); returns the
/// last revents. With `want == 0` it polls once without waiting.
pub fn wait_revents(fd: RawFd, events: i16, want: i16, t: Duration) -> i16 {
    let end = Instant::now() + t;
    loop {
        let rev = poll1(fd, events, 10).unwrap_or(libc::POLLNVAL);
        if rev & want == want || Instant::now() >= end {
            return rev;
        }
    }
}

/// Calls `f` until it returns true or `t` passes (sleeping 1–10 ms between tries).
pub fn wait_until(t: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + t;
    let mut nap = 1;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        sleep_ms(nap);
        nap = (nap * 2).min(10);
    }
}

/// Waits until FIONREAD reports at least `n` (bounded); returns the last value.
pub fn wait_inq(fd: RawFd, n: i32, t: Duration) -> i32 {
    let mut last = -1;
    wait_until(t, || {
        last = fionread(fd).unwrap_or(-1);
        last >= n
    });
    last
}

/// The default bound of a wait for something that must happen.
pub const QUIET: Duration = Duration::from_secs(5);

/// Sleeps.
pub fn sleep_ms(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

/// The scheduler state letter of a process (`/proc/PID/stat`), '?' if unknown.
pub fn proc_state(pid: i32) -> char {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the parenthesised command name, which may hold spaces.
    s.rfind(')')
        .and_then(|i| s[i + 1..].trim_start().chars().next())
        .unwrap_or('?')
}

/// CPU time used by a process, in nanoseconds (`/proc/PID/schedstat`, else ticks of stat).
pub fn proc_cpu_ns(pid: i32) -> u64 {
    if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/schedstat")) {
        if let Some(v) = s.split_whitespace().next().and_then(|x| x.parse().ok()) {
            return v;
        }
    }
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = s.rfind(')').map(|i| &s[i + 1..]).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11).and_then(|x| x.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|x| x.parse().ok()).unwrap_or(0);
    ticks * 10_000_000
}

/// Waits until process `pid` is sleeping ('S') in the kernel; returns whether it was seen.
pub fn wait_sleeping(pid: i32, t: Duration) -> bool {
    wait_until(t, || proc_state(pid) == 'S')
}

/// SHA-256 in hex.
pub fn sha_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

/// Lower-case hex of bytes.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A streaming SHA-256 with a byte count.
#[derive(Default)]
pub struct Hash {
    h: Sha256,
    n: u64,
}

impl Hash {
    /// Adds bytes.
    pub fn add(&mut self, b: &[u8]) {
        self.h.update(b);
        self.n += b.len() as u64;
    }
    /// Bytes so far.
    pub fn len(&self) -> u64 {
        self.n
    }
    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
    /// "N bytes sha256=..." and consumes.
    pub fn done(self) -> String {
        format!("{} bytes sha256={}", self.n, hex(&self.h.finalize()))
    }
}

/// splitmix64: the scenarios' seeded generator (same sequence on every platform).
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` and a stream label.
    pub fn new(seed: u64, stream: u64) -> Rng {
        Rng(seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5DEE_CE66_D1CE_4E5B)
    }
    /// Next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
    /// A size spread over orders of magnitude in `1..=max`.
    pub fn size(&mut self, max: usize) -> usize {
        let bits = self.range(0, 63 - (max as u64).leading_zeros() as u64);
        let v = (self.next_u64() % (1u64 << bits)) as usize + 1;
        v.min(max)
    }
    /// True with probability `num/den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.next_u64() % den < num
    }
}

/// `n` pseudo-random bytes for `(seed, stream)`: the content the scenarios send.
pub fn pattern(seed: u64, stream: u64, n: usize) -> Vec<u8> {
    let mut r = Rng::new(seed, stream ^ 0xA5A5);
    let mut v = Vec::with_capacity(n + 8);
    while v.len() < n {
        v.extend_from_slice(&r.next_u64().to_le_bytes());
    }
    v.truncate(n);
    v
}

/// A C string (panics on interior NUL, which the harness never builds).
pub fn cstr(s: &str) -> CString {
    CString::new(s).expect("nul in string")
}

/// Installs a handler for `sig`, with or without SA_RESTART.
pub fn sigaction(sig: i32, handler: extern "C" fn(i32), restart: bool) {
    // SAFETY: a zeroed sigaction is valid; we fill the handler and flags.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as *const () as usize;
        sa.sa_flags = if restart { libc::SA_RESTART } else { 0 };
        libc::sigemptyset(&mut sa.sa_mask);
        let r = libc::sigaction(sig, &sa, std::ptr::null_mut());
        assert_eq!(r, 0, "sigaction");
    }
}

/// Sends a signal to a process.
pub fn kill(pid: i32, sig: i32) {
    // SAFETY: plain call.
    unsafe { libc::kill(pid, sig) };
}

/// Our pid.
pub fn getpid() -> i32 {
    // SAFETY: plain call.
    unsafe { libc::getpid() }
}

/// Binds `ip:port` (port 0: the kernel picks) and listens.
pub fn listen_on_port(ip: IpAddr, port: u16, v6only: Option<bool>) -> Fd {
    let fd = tcp_socket(ip).expect("socket");
    if let Some(v) = v6only {
        setsockopt_int(fd.raw(), libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, v as i32)
            .expect("IPV6_V6ONLY");
    }
    let (ss, len) = sockaddr(SocketAddr::new(ip, port));
    // SAFETY: ss/len describe a valid address.
    let r = unsafe { libc::bind(fd.raw(), &ss as *const _ as *const libc::sockaddr, len) };
    assert_eq!(r, 0, "bind {ip}:{port}: {}", errname(errno()));
    // SAFETY: plain listen.
    let r = unsafe { libc::listen(fd.raw(), 64) };
    assert_eq!(r, 0, "listen: {}", errname(errno()));
    fd
}

/// Binds `ip:0` without listening (a port that refuses connections and that nobody else can
/// take while we hold it); returns the socket and the port.
pub fn listen_on_bound_only(ip: IpAddr) -> (Fd, u16) {
    let fd = tcp_socket(ip).expect("socket");
    let (ss, len) = sockaddr(SocketAddr::new(ip, 0));
    // SAFETY: ss/len describe a valid address.
    let r = unsafe { libc::bind(fd.raw(), &ss as *const _ as *const libc::sockaddr, len) };
    assert_eq!(r, 0, "bind {ip}: {}", errname(errno()));
    let port = local_addr(fd.raw()).expect("getsockname").port();
    (fd, port)
}

/// A memfd of one page (CLOEXEC), to share a counter between processes.
pub fn memfd_page() -> Fd {
    let name = cstr("ember-xproc-counter");
    // SAFETY: valid name.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", errname(errno()));
    // SAFETY: plain ftruncate on our memfd.
    let r = unsafe { libc::ftruncate(fd, 4096) };
    assert_eq!(r, 0, "ftruncate");
    Fd(fd)
}

/// Maps the first word of a shared page as an atomic counter (the mapping is never unmapped).
pub fn shared_counter(fd: RawFd) -> &'static std::sync::atomic::AtomicU64 {
    // SAFETY: mapping one page of a memfd we hold, shared, read-write.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    assert!(p != libc::MAP_FAILED, "mmap: {}", errname(errno()));
    // SAFETY: the page is zero-initialised, aligned and lives for the rest of the process.
    unsafe { &*(p as *const std::sync::atomic::AtomicU64) }
}

/// dup with CLOEXEC (at the lowest free number).
pub fn dup_cloexec(fd: RawFd) -> Fd {
    // SAFETY: plain fcntl.
    let n = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    assert!(n >= 0, "dup: {}", errname(errno()));
    Fd(n)
}

/// Sends `fd` with a one-byte message over a unix socket (SCM_RIGHTS).
pub fn send_fd(sock: RawFd, fd: RawFd) -> R<()> {
    let byte = [b'F'];
    let iov = libc::iovec {
        iov_base: byte.as_ptr() as *mut libc::c_void,
        iov_len: 1,
    };
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: a zeroed msghdr is valid; we point it at live buffers.
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = &iov as *const _ as *mut libc::iovec;
    m.msg_iovlen = 1;
    m.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
    m.msg_controllen = space as _;
    // SAFETY: the control buffer holds one cmsg with one fd.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&m);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut RawFd, fd);
    }
    // SAFETY: m is a valid msghdr.
    cvt_sz(unsafe { libc::sendmsg(sock, &m, libc::MSG_NOSIGNAL) }).map(|_| ())
}

/// Receives an fd sent by `send_fd` (bounded wait); the fd is CLOEXEC.
pub fn recv_fd(sock: RawFd, t: Duration) -> R<Fd> {
    let rev = poll1(sock, libc::POLLIN, t.as_millis() as i32)?;
    if rev & libc::POLLIN == 0 {
        return Err(libc::ETIMEDOUT);
    }
    let mut byte = [0u8; 1];
    let iov = libc::iovec {
        iov_base: byte.as_mut_ptr() as *mut libc::c_void,
        iov_len: 1,
    };
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: a zeroed msghdr is valid; we point it at live buffers.
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = &iov as *const _ as *mut libc::iovec;
    m.msg_iovlen = 1;
    m.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
    m.msg_controllen = space as _;
    // SAFETY: m is a valid msghdr.
    cvt_sz(unsafe { libc::recvmsg(sock, &mut m, libc::MSG_CMSG_CLOEXEC) })?;
    // SAFETY: we read the cmsg the kernel wrote, if any.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&m);
        if c.is_null() || (*c).cmsg_type != libc::SCM_RIGHTS {
            return Err(libc::EBADMSG);
        }
        Ok(Fd(std::ptr::read_unaligned(
            libc::CMSG_DATA(c) as *const RawFd
        )))
    }
}

/// Binds `ip:port` with SO_REUSEADDR (port 0: the kernel picks) and listens; returns the
/// socket and its port.
pub fn listen_reuse(ip: IpAddr, port: u16) -> (Fd, u16) {
    let fd = tcp_socket(ip).expect("socket");
    setsockopt_int(fd.raw(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 1).expect("SO_REUSEADDR");
    let (ss, len) = sockaddr(SocketAddr::new(ip, port));
    // SAFETY: ss/len describe a valid address.
    let r = unsafe { libc::bind(fd.raw(), &ss as *const _ as *const libc::sockaddr, len) };
    assert_eq!(r, 0, "bind {ip}:{port}: {}", errname(errno()));
    // SAFETY: plain listen.
    let r = unsafe { libc::listen(fd.raw(), 64) };
    assert_eq!(r, 0, "listen: {}", errname(errno()));
    let port = local_addr(fd.raw()).expect("getsockname").port();
    (fd, port)
}
