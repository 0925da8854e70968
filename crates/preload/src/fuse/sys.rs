//! The library's own system calls, made raw: through libc's functions they would come
//! back into the library's interposers.

use libc::{c_int, c_long, c_void, sockaddr, socklen_t};
use std::io;

fn ret(r: c_long) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// `recvfrom(fd, buf, len, flags, NULL, NULL)`.
pub fn recv(fd: c_int, buf: *mut u8, len: usize, flags: c_int) -> io::Result<usize> {
    // SAFETY: the caller's buffer of `len` bytes; null address arguments.
    ret(unsafe { crate::real::sc!(libc::SYS_recvfrom, fd, buf, len, flags, 0usize, 0usize) })
}

/// `sendto(fd, buf, len, flags, NULL, 0)`.
pub fn send(fd: c_int, buf: *const u8, len: usize, flags: c_int) -> io::Result<usize> {
    // SAFETY: the caller's buffer of `len` bytes; no address.
    ret(unsafe { crate::real::sc!(libc::SYS_sendto, fd, buf, len, flags, 0usize, 0usize) })
}

/// `sendto` with an address.
pub fn sendto(
    fd: c_int,
    buf: &[u8],
    flags: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> io::Result<usize> {
    // SAFETY: `buf` is valid; the caller's address of `len` bytes.
    ret(unsafe {
        crate::real::sc!(
            libc::SYS_sendto,
            fd,
            buf.as_ptr(),
            buf.len(),
            flags,
            addr,
            len
        )
    })
}

/// `close(fd)`.
pub fn close(fd: c_int) {
    // SAFETY: closes a descriptor the library owns.
    unsafe { crate::real::sc!(libc::SYS_close, fd) };
}

/// `fcntl(fd, F_DUPFD_CLOEXEC, min)`, closing `fd`: moves one of the library's own
/// descriptors high, out of the numbers a program expects to get (crossproc.md: internal
/// descriptors are close-on-exec and placed high).
pub fn move_high(fd: c_int) -> c_int {
    // SAFETY: integer arguments.
    let hi = unsafe { crate::real::sc!(libc::SYS_fcntl, fd, libc::F_DUPFD_CLOEXEC, 900) } as c_int;
    if hi < 0 {
        return fd;
    }
    close(fd);
    hi
}

/// `fcntl(fd, F_GETFL)`.
pub fn getfl(fd: c_int) -> c_int {
    // SAFETY: integer arguments.
    unsafe { crate::real::sc!(libc::SYS_fcntl, fd, libc::F_GETFL) as c_int }
}

/// `ppoll` on `fds` for at most `timeout` (None: forever); EINTR is returned.
pub fn ppoll(fds: &mut [libc::pollfd], timeout: Option<std::time::Duration>) -> io::Result<usize> {
    ppoll_mask(fds, timeout, std::ptr::null())
}

/// `ppoll` with a signal mask for the sleep (null: the thread's own).
pub fn ppoll_mask(
    fds: &mut [libc::pollfd],
    timeout: Option<std::time::Duration>,
    mask: *const libc::sigset_t,
) -> io::Result<usize> {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let tp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `fds` is valid for its length; the timespec lives across the call; the
    // mask is the caller's (or null: none).
    ret(unsafe {
        crate::real::sc!(
            libc::SYS_ppoll,
            fds.as_mut_ptr(),
            fds.len(),
            tp,
            mask,
            8usize
        )
    })
}

/// An abstract `AF_UNIX` address (`sun_path[0]` is 0) for `name` (cut to fit), and its
/// length.
pub fn abstract_addr(name: &[u8]) -> (libc::sockaddr_un, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_un is valid.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let n = name.len().min(a.sun_path.len() - 1);
    for (d, s) in a.sun_path[1..].iter_mut().zip(&name[..n]) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + n;
    (a, len as libc::socklen_t)
}

/// `getsockname`/`getpeername` as a `SocketAddr`.
pub fn sock_addr(fd: c_int, peer: bool) -> Option<std::net::SocketAddr> {
    // SAFETY: a zeroed sockaddr_storage and its size as the out-parameters.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as socklen_t;
    let nr = if peer {
        libc::SYS_getpeername
    } else {
        libc::SYS_getsockname
    };
    let r = unsafe {
        crate::real::sc!(
            nr,
            fd,
            &mut ss as *mut _ as *mut c_void,
            &mut len as *mut socklen_t
        )
    };
    if r < 0 {
        return None;
    }
    from_storage(&ss)
}

/// A `sockaddr_storage` holding an IPv4 or IPv6 address as a `SocketAddr`.
pub fn from_storage(ss: &libc::sockaddr_storage) -> Option<std::net::SocketAddr> {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
    match c_int::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let a = unsafe { &*(ss as *const _ as *const libc::sockaddr_in) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let a = unsafe { &*(ss as *const _ as *const libc::sockaddr_in6) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// `getsockopt` of an int option.
pub fn sockopt_int(fd: c_int, level: c_int, name: c_int) -> Option<c_int> {
    let mut v: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as socklen_t;
    // SAFETY: an int and its size as the out-parameters.
    let r = unsafe {
        crate::real::sc!(
            libc::SYS_getsockopt,
            fd,
            level,
            name,
            &mut v as *mut c_int,
            &mut len as *mut socklen_t
        )
    };
    (r == 0).then_some(v)
}

/// Random bytes from the kernel (a token, a nonce): never zero.
pub fn random_u64() -> u64 {
    let mut v: u64 = 0;
    // SAFETY: 8 writable bytes.
    unsafe { crate::real::sc!(libc::SYS_getrandom, &mut v as *mut u64, 8usize, 0) };
    if v == 0 {
        // getrandom cannot fail for 8 bytes once the pool is ready; if it did, the
        // address of a stack word and the time still make a usable token.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        v = t ^ (&v as *const u64 as u64) | 1;
    }
    v
}
