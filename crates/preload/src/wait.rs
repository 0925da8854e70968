//! Readiness: every `epoll` entry point (`epoll_pwait2` included), `poll`, `ppoll`,
//! `select`, `pselect` and the fortified `__poll_chk`, `__ppoll_chk`.
//!
//! All of them are the kernel's today. A fused descriptor's kernel socket never becomes
//! readable with the fused bytes, so these are where its readiness will be served at
//! user level (crossproc.md, "Readiness and waiting").

use crate::real::real;
use libc::{c_int, epoll_event, fd_set, nfds_t, pollfd, sigset_t, size_t, timespec, timeval};

mod next {
    use super::*;
    real! {
        fn epoll_create(size: c_int) -> c_int;
        fn epoll_create1(flags: c_int) -> c_int;
        fn epoll_ctl(epfd: c_int, op: c_int, fd: c_int, ev: *mut epoll_event) -> c_int;
        fn epoll_wait(epfd: c_int, evs: *mut epoll_event, max: c_int, timeout: c_int) -> c_int;
        fn epoll_pwait(epfd: c_int, evs: *mut epoll_event, max: c_int, timeout: c_int, mask: *const sigset_t) -> c_int;
        fn epoll_pwait2(epfd: c_int, evs: *mut epoll_event, max: c_int, timeout: *const timespec, mask: *const sigset_t) -> c_int;
        fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int;
        fn ppoll(fds: *mut pollfd, n: nfds_t, timeout: *const timespec, mask: *const sigset_t) -> c_int;
        fn __poll_chk(fds: *mut pollfd, n: nfds_t, timeout: c_int, fdslen: size_t) -> c_int;
        fn __ppoll_chk(fds: *mut pollfd, n: nfds_t, timeout: *const timespec, mask: *const sigset_t, fdslen: size_t) -> c_int;
        fn select(n: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set, timeout: *mut timeval) -> c_int;
        fn pselect(n: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set, timeout: *const timespec, mask: *const sigset_t) -> c_int;
    }
}

/// Defines interposed functions that pass every call through.
macro_rules! pass {
    ($( fn $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty ; )*) => {
        $(
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
                // SAFETY: the caller's arguments, passed on.
                unsafe { next::$name($($arg),*) }
            }
        )*
    };
}

pass! {
    fn epoll_create(size: c_int) -> c_int;
    fn epoll_create1(flags: c_int) -> c_int;
    fn epoll_ctl(epfd: c_int, op: c_int, fd: c_int, ev: *mut epoll_event) -> c_int;
    fn epoll_wait(epfd: c_int, evs: *mut epoll_event, max: c_int, timeout: c_int) -> c_int;
    fn epoll_pwait(epfd: c_int, evs: *mut epoll_event, max: c_int, timeout: c_int, mask: *const sigset_t) -> c_int;
    fn epoll_pwait2(epfd: c_int, evs: *mut epoll_event, max: c_int, timeout: *const timespec, mask: *const sigset_t) -> c_int;
    fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int;
    fn ppoll(fds: *mut pollfd, n: nfds_t, timeout: *const timespec, mask: *const sigset_t) -> c_int;
    fn __poll_chk(fds: *mut pollfd, n: nfds_t, timeout: c_int, fdslen: size_t) -> c_int;
    fn __ppoll_chk(fds: *mut pollfd, n: nfds_t, timeout: *const timespec, mask: *const sigset_t, fdslen: size_t) -> c_int;
    fn select(n: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set, timeout: *mut timeval) -> c_int;
    fn pselect(n: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set, timeout: *const timespec, mask: *const sigset_t) -> c_int;
}
