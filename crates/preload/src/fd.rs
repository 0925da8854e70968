//! Descriptor calls: `fcntl`, `fcntl64`, `ioctl` (variadic in C: their entry points are
//! in `varargs.c`, which calls [`ember_fcntl`], [`ember_fcntl64`], [`ember_ioctl`]),
//! `dup`, `dup2`, `dup3`, `close`, `close_range`, `closefrom`.
//!
//! They keep the descriptor table (`fdtab`) in step with the kernel's: a copy inherits
//! its original's entry, a closed number loses its entry (before the kernel frees the
//! number, so that a socket made at once under that number by another thread is not
//! forgotten after it was tracked).

use crate::fdtab;
use crate::fuse;
use crate::real::{real, Sym};
use libc::{c_int, c_uint, c_ulong, c_void};
use std::sync::atomic::Ordering;

mod next {
    use super::*;
    real! {
        fn dup(fd: c_int) -> c_int;
        fn dup2(old: c_int, new: c_int) -> c_int;
        fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int;
        fn close(fd: c_int) -> c_int;
        fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int;
    }
}

type Variadic2 = unsafe extern "C" fn(c_int, c_int, ...) -> c_int;
type Ioctl = unsafe extern "C" fn(c_int, c_ulong, ...) -> c_int;

/// `SIOCATMARK` (asm-generic/sockios.h), which the libc crate does not name.
const SIOCATMARK: c_ulong = 0x8905;

static FCNTL: Sym = Sym::new(c"fcntl");
static FCNTL64: Sym = Sym::new(c"fcntl64");
static IOCTL: Sym = Sym::new(c"ioctl");
static CLOSEFROM: Sym = Sym::new(c"closefrom");

fn fcntl_copies(cmd: c_int) -> bool {
    cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC
}

fn call_fcntl(sym: &Sym, fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    let Some(a) = sym.get() else {
        crate::errno::set(libc::ENOSYS);
        return -1;
    };
    // SAFETY: `a` is the C library's variadic `fcntl`/`fcntl64`, called with the
    // caller's three arguments (the third read as the widest integer; glibc reads it
    // with `va_arg` as the command requires).
    let f: Variadic2 = unsafe { core::mem::transmute::<usize, Variadic2>(a) };
    let r = unsafe { f(fd, cmd, arg) };
    if r >= 0 && fcntl_copies(cmd) {
        fdtab::copy(fd, r);
        fuse::duplicated(r);
    }
    if r >= 0 && cmd == libc::F_SETFL {
        if let Some(c) = fuse::conn_of(fd) {
            c.nonblock
                .store(arg as c_int & libc::O_NONBLOCK != 0, Ordering::Relaxed);
        }
    }
    r
}

/// `fcntl`'s body (its variadic entry point is in `varargs.c`).
#[no_mangle]
pub extern "C" fn ember_fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    call_fcntl(&FCNTL, fd, cmd, arg)
}

/// `fcntl64`'s body (its variadic entry point is in `varargs.c`).
#[no_mangle]
pub extern "C" fn ember_fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    call_fcntl(&FCNTL64, fd, cmd, arg)
}

/// `ioctl`'s body (its variadic entry point is in `varargs.c`).
#[no_mangle]
pub unsafe extern "C" fn ember_ioctl(fd: c_int, req: c_ulong, arg: *mut c_void) -> c_int {
    if !arg.is_null() {
        if let Some(c) = fuse::conn_of(fd) {
            // FIONREAD (= SIOCINQ) and SIOCOUTQ count the ring's bytes too.
            if req == libc::FIONREAD as c_ulong {
                let n = c.readable(fd);
                // SAFETY: FIONREAD's argument is an int the caller provides.
                unsafe { *arg.cast::<c_int>() = n.min(c_int::MAX as usize) as c_int };
                return 0;
            }
            if req == libc::TIOCOUTQ as c_ulong {
                let n = c.unsent(fd);
                // SAFETY: SIOCOUTQ's argument is an int the caller provides.
                unsafe { *arg.cast::<c_int>() = n.min(c_int::MAX as usize) as c_int };
                return 0;
            }
            if req == SIOCATMARK && c.ring_unread() > 0 {
                // The urgent byte went by kernel after the ring's bytes: not at the
                // mark while they are unread.
                // SAFETY: SIOCATMARK's argument is an int the caller provides.
                unsafe { *arg.cast::<c_int>() = 0 };
                return 0;
            }
            if req == libc::FIONBIO as c_ulong {
                // SAFETY: FIONBIO's argument is an int the caller provides.
                let on = unsafe { *arg.cast::<c_int>() } != 0;
                c.nonblock.store(on, Ordering::Relaxed);
            }
        }
    }
    let Some(a) = IOCTL.get() else {
        crate::errno::set(libc::ENOSYS);
        return -1;
    };
    // SAFETY: `a` is the C library's variadic `ioctl`, called with the caller's three
    // arguments.
    let f: Ioctl = unsafe { core::mem::transmute::<usize, Ioctl>(a) };
    unsafe { f(fd, req, arg) }
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: the caller's argument, passed on.
    let r = unsafe { next::dup(fd) };
    if r >= 0 {
        fdtab::copy(fd, r);
        fuse::duplicated(r);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if old != new && fdtab::kind(old) != 0 {
        // `new` is closed by the dup: its connection loses a descriptor.
        forget_closing(new);
    }
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { next::dup2(old, new) };
    if r >= 0 && old != new {
        fdtab::copy(old, r);
        fuse::duplicated(r);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if old != new {
        forget_closing(new);
    }
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { next::dup3(old, new, flags) };
    if r >= 0 {
        fdtab::copy(old, r);
        fuse::duplicated(r);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    forget_closing(fd);
    // SAFETY: the caller's argument, passed on.
    unsafe { next::close(fd) }
}

/// `fd` is about to be closed: its connection (if any) loses a descriptor, a listener
/// its registry record, and the table forgets it.
fn forget_closing(fd: c_int) {
    let k = fdtab::kind(fd);
    if k != 0 {
        crate::fuse::keep_errno(|| {
            if let Some(i) = fdtab::conn_index(fd) {
                fuse::closing(fd, i);
            }
            if k & fdtab::Kind::LISTENER != 0 {
                fuse::listener_closing(fd);
            }
        });
    }
    fdtab::forget(fd);
    if k & fdtab::Kind::EPOLL != 0 {
        crate::fuse::keep_errno(|| fuse::epoll::closed(fd));
    }
}

#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    if flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
        fdtab::forget_range(first, last);
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::close_range(first, last, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn closefrom(low: c_int) {
    if let Ok(first) = u32::try_from(low) {
        fdtab::forget_range(first, u32::MAX);
    }
    if let Some(a) = CLOSEFROM.get() {
        // SAFETY: glibc's `void closefrom(int)`.
        let f: unsafe extern "C" fn(c_int) = unsafe { core::mem::transmute(a) };
        unsafe { f(low) }
    } else {
        // A C library without closefrom (before glibc 2.34): the kernel's close_range.
        // SAFETY: a raw system call with integer arguments.
        unsafe { crate::real::sc!(libc::SYS_close_range, low.max(0) as c_uint, c_uint::MAX, 0) };
    }
}
