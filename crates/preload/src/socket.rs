//! The socket calls: `socket`, `bind`, `listen`, `connect`, `accept`, `accept4`,
//! `shutdown`, `getsockopt`, `setsockopt`.
//!
//! Every one is the kernel's (crossproc.md, principle 1: the kernel socket stays): the
//! library calls the real function and only records, in the descriptor table, which
//! descriptors are inet stream sockets and which of them listen.

use crate::fdtab::{self, Kind};
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

/// A new descriptor `fd` accepted on `listener`: a connection of the listener's kind.
fn accepted(listener: c_int, fd: c_int) {
    if fd >= 0 {
        let k = fdtab::kind(listener) & Kind::INET_STREAM;
        fdtab::track(fd, k);
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
    if r == 0 {
        fdtab::mark(fd, Kind::LISTENER);
    }
    r
}

/// # Safety
/// The C prototype.
#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::connect(fd, addr, len) }
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
    unsafe { next::setsockopt(fd, level, name, val, len) }
}
