//! Readiness: every `epoll` entry point (`epoll_pwait2` included), `poll`, `ppoll`,
//! `select`, `pselect` and the fortified `__poll_chk`, `__ppoll_chk`.
//!
//! A call with no fused descriptor is the kernel's. A fused descriptor's kernel socket
//! never becomes readable with the fused bytes, so a call with one is served at user
//! level (crossproc.md, "Readiness and waiting"): `fuse::ready` for poll and select,
//! `fuse::epoll` for epoll.

use crate::fuse::{self, epoll, ready};
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
}

fn ret(r: std::io::Result<usize>) -> c_int {
    fuse::c_ret(r) as c_int
}

/// The caller's pollfd array as a slice.
///
/// # Safety
/// `fds` must point to `n` pollfds (or `n` be 0).
unsafe fn pollfds<'a>(fds: *mut pollfd, n: nfds_t) -> &'a mut [pollfd] {
    if fds.is_null() || n == 0 {
        &mut []
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(fds, n as usize) }
    }
}

fn ts_duration(t: *const timespec) -> Option<Option<std::time::Duration>> {
    if t.is_null() {
        return Some(None);
    }
    // SAFETY: the caller's timespec.
    let t = unsafe { &*t };
    if t.tv_sec < 0 || !(0..1_000_000_000).contains(&t.tv_nsec) {
        return None;
    }
    Some(Some(std::time::Duration::new(
        t.tv_sec as u64,
        t.tv_nsec as u32,
    )))
}

#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    if n <= 1 << 16 {
        // SAFETY: the caller's array.
        let s = unsafe { pollfds(fds, n) };
        if let Some(conns) = ready::fused_among(s) {
            return ret(ready::poll(s, &conns, ready::ms(timeout), std::ptr::null()));
        }
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::poll(fds, n, timeout) }
}

#[no_mangle]
pub unsafe extern "C" fn __poll_chk(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: c_int,
    fdslen: size_t,
) -> c_int {
    if (n as usize).saturating_mul(std::mem::size_of::<pollfd>()) <= fdslen {
        // SAFETY: the caller's arguments.
        return unsafe { poll(fds, n, timeout) };
    }
    // SAFETY: the caller's arguments, passed on (glibc aborts).
    unsafe { next::__poll_chk(fds, n, timeout, fdslen) }
}

#[no_mangle]
pub unsafe extern "C" fn ppoll(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    if n <= 1 << 16 {
        // SAFETY: the caller's array.
        let s = unsafe { pollfds(fds, n) };
        if let (Some(conns), Some(t)) = (ready::fused_among(s), ts_duration(timeout)) {
            return ret(ready::poll(s, &conns, t, mask));
        }
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::ppoll(fds, n, timeout, mask) }
}

#[no_mangle]
pub unsafe extern "C" fn __ppoll_chk(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: *const timespec,
    mask: *const sigset_t,
    fdslen: size_t,
) -> c_int {
    if (n as usize).saturating_mul(std::mem::size_of::<pollfd>()) <= fdslen {
        // SAFETY: the caller's arguments.
        return unsafe { ppoll(fds, n, timeout, mask) };
    }
    // SAFETY: the caller's arguments, passed on (glibc aborts).
    unsafe { next::__ppoll_chk(fds, n, timeout, mask, fdslen) }
}

fn any_fused(n: c_int, sets: [*mut fd_set; 3]) -> bool {
    if !crate::fdtab::active() {
        return false;
    }
    for fd in 0..n.clamp(0, libc::FD_SETSIZE as c_int) {
        // SAFETY: the caller's sets cover `n` descriptors.
        if sets
            .iter()
            .any(|s| !s.is_null() && unsafe { libc::FD_ISSET(fd, *s) })
            && crate::fdtab::conn_index(fd).is_some()
        {
            return true;
        }
    }
    false
}

#[no_mangle]
pub unsafe extern "C" fn select(
    n: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    timeout: *mut timeval,
) -> c_int {
    if any_fused(n, [r, w, e]) {
        let t = if timeout.is_null() {
            Some(None)
        } else {
            // SAFETY: the caller's timeval.
            let tv = unsafe { &*timeout };
            (tv.tv_sec >= 0 && (0..1_000_000).contains(&tv.tv_usec)).then(|| {
                Some(std::time::Duration::new(
                    tv.tv_sec as u64,
                    tv.tv_usec as u32 * 1000,
                ))
            })
        };
        if let Some(t) = t {
            // SAFETY: the caller's sets.
            if let Some(res) = unsafe { ready::select(n, r, w, e, t, std::ptr::null()) } {
                return ret(res);
            }
        }
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::select(n, r, w, e, timeout) }
}

#[no_mangle]
pub unsafe extern "C" fn pselect(
    n: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    timeout: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    if any_fused(n, [r, w, e]) {
        if let Some(t) = ts_duration(timeout) {
            // SAFETY: the caller's sets.
            if let Some(res) = unsafe { ready::select(n, r, w, e, t, mask) } {
                return ret(res);
            }
        }
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::pselect(n, r, w, e, timeout, mask) }
}

#[no_mangle]
pub unsafe extern "C" fn epoll_ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    ev: *mut epoll_event,
) -> c_int {
    // Fused, or still able to be: a slot that comes after the registration must find
    // the socket already in the user-level list.
    if let Some(c) =
        fuse::conn_of(fd).filter(|c| !c.handed_over.load(std::sync::atomic::Ordering::Acquire))
    {
        // SAFETY: the caller's event.
        if let Some(r) = unsafe { epoll::ctl(epfd, op, fd, ev, &c) } {
            return ret(r.map(|()| 0));
        }
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::epoll_ctl(epfd, op, fd, ev) }
}

/// The caller's event array as a slice (`max` checked as the kernel checks it).
///
/// # Safety
/// `evs` must point to `max` events.
unsafe fn events<'a>(evs: *mut epoll_event, max: c_int) -> Option<&'a mut [epoll_event]> {
    if evs.is_null()
        || max <= 0
        || max as usize > (i32::MAX as usize) / std::mem::size_of::<epoll_event>()
    {
        return None;
    }
    // SAFETY: the caller's contract.
    Some(unsafe { std::slice::from_raw_parts_mut(evs, max as usize) })
}

#[no_mangle]
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    evs: *mut epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    if epoll::has_fused(epfd) {
        // SAFETY: the caller's array.
        if let Some(out) = unsafe { events(evs, max) } {
            return ret(epoll::wait(epfd, out, ready::ms(timeout), std::ptr::null()));
        }
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::epoll_wait(epfd, evs, max, timeout) }
}

#[no_mangle]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    evs: *mut epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const sigset_t,
) -> c_int {
    if epoll::has_fused(epfd) {
        // SAFETY: the caller's array.
        if let Some(out) = unsafe { events(evs, max) } {
            return ret(epoll::wait(epfd, out, ready::ms(timeout), mask));
        }
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::epoll_pwait(epfd, evs, max, timeout, mask) }
}

#[no_mangle]
pub unsafe extern "C" fn epoll_pwait2(
    epfd: c_int,
    evs: *mut epoll_event,
    max: c_int,
    timeout: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    if epoll::has_fused(epfd) {
        // SAFETY: the caller's array.
        if let (Some(out), Some(t)) = (unsafe { events(evs, max) }, ts_duration(timeout)) {
            return ret(epoll::wait(epfd, out, t, mask));
        }
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::epoll_pwait2(epfd, evs, max, timeout, mask) }
}
