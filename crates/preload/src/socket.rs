//! The socket calls: `socket`, `bind`, `listen`, `connect`, `accept`, `accept4`,
//! `shutdown`, `getsockopt`, `setsockopt`.
//!
//! Every one is the kernel's (crossproc.md, principle 1: the kernel socket stays): the
//! library calls the real function and only records, in the descriptor table, which
//! descriptors are inet stream sockets and which of them listen.

use crate::fdtab::{self, Kind};
use crate::fuse::{self, sys};
use crate::real::real;
use libc::{c_int, c_void, sockaddr, socklen_t};

mod next {
    use super::*;
    real! {
        fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int;
        fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int;
        fn listen(fd: c_int, backlog: c_int) -> c_int;
        fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int;
        fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int;
        fn accept4(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int;
        fn shutdown(fd: c_int, how: c_int) -> c_int;
        fn getsockopt(fd: c_int, level: c_int, name: c_int, val: *mut c_void, len: *mut socklen_t) -> c_int;
        fn setsockopt(fd: c_int, level: c_int, name: c_int, val: *const c_void, len: socklen_t) -> c_int;
    }
}

/// Whether `socket(domain, ty, protocol)` made a TCP socket over IPv4 or IPv6.
pub fn is_inet_stream(domain: c_int, ty: c_int, protocol: c_int) -> bool {
    (domain == libc::AF_INET || domain == libc::AF_INET6)
        && ty & 0xf == libc::SOCK_STREAM
        && (protocol == 0 || protocol == libc::IPPROTO_TCP)
}

/// A new descriptor `fd` from `socket`: tracked if it is an inet stream socket; the
/// number's old entry is forgotten otherwise.
pub fn made_socket(fd: c_int, domain: c_int, ty: c_int, protocol: c_int) {
    if fd >= 0 {
        if is_inet_stream(domain, ty, protocol) {
            fdtab::track(fd, Kind::INET_STREAM);
        } else {
            fdtab::forget(fd);
        }
    }
}

/// A new descriptor `fd` accepted on `listener`: a connection of the listener's kind,
/// fused if its client is an ember process that published a candidate.
fn accepted(listener: c_int, fd: c_int) {
    if fd >= 0 {
        let lk = fdtab::kind(listener);
        fdtab::track(fd, lk & Kind::INET_STREAM);
        if lk & Kind::LISTENER != 0 {
            if let Some(p) = fuse::proc() {
                fuse::keep_errno(|| {
                    if let (Some(l), Some(r)) =
                        (sys::sock_addr(fd, false), sys::sock_addr(fd, true))
                    {
                        p.accepted(fd, l, r);
                    }
                });
            }
        }
    }
}

/// # Safety
/// The C prototype.
#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let fd = unsafe { next::socket(domain, ty, protocol) };
    made_socket(fd, domain, ty, protocol);
    fd
}

/// # Safety
/// The C prototype.
#[no_mangle]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::bind(fd, addr, len) }
}

/// # Safety
/// The C prototype.
#[no_mangle]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { next::listen(fd, backlog) };
    if r == 0 && fdtab::kind(fd) & Kind::INET_STREAM != 0 {
        if fdtab::kind(fd) & Kind::LISTENER == 0 {
            fuse::keep_errno(|| fuse::listening(fd));
        }
        fdtab::mark(fd, Kind::LISTENER);
    }
    r
}

/// # Safety
/// The C prototype.
#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // Whether an ember listener is there is asked before the connect: once connected,
    // the server may have accepted and closed its listener before we could look.
    let fusable = fdtab::kind(fd) & Kind::INET_STREAM != 0
        && fdtab::conn_index(fd).is_none()
        && !addr.is_null();
    let target = if fusable {
        fuse::keep_errno(|| {
            let p = fuse::proc()?;
            // SAFETY: the caller's address of `len` bytes; at most a sockaddr_storage
            // of it is copied.
            let remote = unsafe {
                let mut ss: libc::sockaddr_storage = std::mem::zeroed();
                let n = (len as usize).min(std::mem::size_of::<libc::sockaddr_storage>());
                std::ptr::copy_nonoverlapping(
                    addr.cast::<u8>(),
                    (&mut ss as *mut libc::sockaddr_storage).cast::<u8>(),
                    n,
                );
                sys::from_storage(&ss)
            }?;
            Some((p, remote, p.reg.has_listener(remote)))
        })
    } else {
        None
    };
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { next::connect(fd, addr, len) };
    if let Some((p, remote, listener)) = target {
        if r == 0 || crate::errno::get() == libc::EINPROGRESS {
            fuse::keep_errno(|| {
                if let Some(l) = sys::sock_addr(fd, false) {
                    p.connected(fd, l, remote, listener);
                }
            });
        }
    }
    r
}

/// # Safety
/// The C prototype.
#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let new = unsafe { next::accept(fd, addr, len) };
    accepted(fd, new);
    new
}

/// # Safety
/// The C prototype.
#[no_mangle]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let new = unsafe { next::accept4(fd, addr, len, flags) };
    accepted(fd, new);
    new
}

/// # Safety
/// The C prototype.
#[no_mangle]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    if let Some(c) = fuse::conn_of(fd) {
        if how == libc::SHUT_WR || how == libc::SHUT_RDWR {
            c.shutdown_wr();
        }
        if how == libc::SHUT_RD || how == libc::SHUT_RDWR {
            c.shutdown_rd();
        }
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::shutdown(fd, how) }
}

/// # Safety
/// The C prototype.
#[no_mangle]
pub unsafe extern "C" fn getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::getsockopt(fd, level, name, val, len) }
}

/// # Safety
/// The C prototype.
#[no_mangle]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { next::setsockopt(fd, level, name, val, len) };
    if r == 0
        && level == libc::SOL_SOCKET
        && (name == libc::SO_RCVTIMEO || name == libc::SO_SNDTIMEO)
    {
        if let Some(c) = fuse::conn_of(fd) {
            if len as usize >= std::mem::size_of::<libc::timeval>() {
                // SAFETY: the kernel accepted a timeval of `len` bytes at `val`.
                let tv = unsafe { std::ptr::read_unaligned(val.cast::<libc::timeval>()) };
                let us =
                    (tv.tv_sec.max(0) as u64).saturating_mul(1_000_000) + tv.tv_usec.max(0) as u64;
                let slot = if name == libc::SO_RCVTIMEO {
                    &c.rcvtimeo_us
                } else {
                    &c.sndtimeo_us
                };
                slot.store(us, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
    r
}
