//! The data calls: `read`, `write`, `readv`, `writev`, `recv`, `recvfrom`, `recvmsg`,
//! `recvmmsg`, `send`, `sendto`, `sendmsg`, `sendmmsg`, `sendfile`, `sendfile64`,
//! `splice`, and the fortified `__read_chk`, `__recv_chk`, `__recvfrom_chk`.
//!
//! All of them pass through to the kernel today; the fused data path branches here on
//! the descriptor's entry in `fdtab`.

use crate::real::real;
use libc::{
    c_int, c_uint, c_void, iovec, mmsghdr, msghdr, off64_t, off_t, size_t, sockaddr, socklen_t,
    ssize_t, timespec,
};

mod next {
    use super::*;
    real! {
        fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t;
        fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t;
        fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t;
        fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t;
        fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t;
        fn recvfrom(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> ssize_t;
        fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t;
        fn recvmmsg(fd: c_int, vec: *mut mmsghdr, vlen: c_uint, flags: c_int, timeout: *mut timespec) -> c_int;
        fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t;
        fn sendto(fd: c_int, buf: *const c_void, n: size_t, flags: c_int, addr: *const sockaddr, len: socklen_t) -> ssize_t;
        fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t;
        fn sendmmsg(fd: c_int, vec: *mut mmsghdr, vlen: c_uint, flags: c_int) -> c_int;
        fn sendfile(out: c_int, inp: c_int, off: *mut off_t, n: size_t) -> ssize_t;
        fn sendfile64(out: c_int, inp: c_int, off: *mut off64_t, n: size_t) -> ssize_t;
        fn splice(fd_in: c_int, off_in: *mut off64_t, fd_out: c_int, off_out: *mut off64_t, n: size_t, flags: c_uint) -> ssize_t;
        fn __read_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t) -> ssize_t;
        fn __recv_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t, flags: c_int) -> ssize_t;
        fn __recvfrom_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t, flags: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> ssize_t;
    }
}

/// Defines interposed functions that pass every call through.
macro_rules! pass {
    ($( fn $name:ident ( $fd:ident : c_int $(, $arg:ident : $ty:ty)* ) -> $ret:ty ; )*) => {
        $(
            #[no_mangle]
            pub unsafe extern "C" fn $name($fd: c_int $(, $arg: $ty)*) -> $ret {
                // SAFETY: the caller's arguments, passed on.
                unsafe { next::$name($fd $(, $arg)*) }
            }
        )*
    };
}

pass! {
    fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t;
    fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t;
    fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t;
    fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t;
    fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t;
    fn recvfrom(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> ssize_t;
    fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t;
    fn recvmmsg(fd: c_int, vec: *mut mmsghdr, vlen: c_uint, flags: c_int, timeout: *mut timespec) -> c_int;
    fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t;
    fn sendto(fd: c_int, buf: *const c_void, n: size_t, flags: c_int, addr: *const sockaddr, len: socklen_t) -> ssize_t;
    fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t;
    fn sendmmsg(fd: c_int, vec: *mut mmsghdr, vlen: c_uint, flags: c_int) -> c_int;
    fn sendfile(out: c_int, inp: c_int, off: *mut off_t, n: size_t) -> ssize_t;
    fn sendfile64(out: c_int, inp: c_int, off: *mut off64_t, n: size_t) -> ssize_t;
    fn __read_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t) -> ssize_t;
    fn __recv_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t, flags: c_int) -> ssize_t;
    fn __recvfrom_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t, flags: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> ssize_t;
}

#[no_mangle]
pub unsafe extern "C" fn splice(
    fd_in: c_int,
    off_in: *mut off64_t,
    fd_out: c_int,
    off_out: *mut off64_t,
    n: size_t,
    flags: c_uint,
) -> ssize_t {
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::splice(fd_in, off_in, fd_out, off_out, n, flags) }
}
