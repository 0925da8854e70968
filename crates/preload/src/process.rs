//! The process model: `fork`, `exec*`, `posix_spawn*`, `sigaction`, `signal`,
//! `siginterrupt`, the uid and gid changes, and `syscall()` for the socket calls'
//! numbers. (`vfork` and the variadic `execl*` and `syscall` entry points are in
//! `varargs.c`.)
//!
//! Everything passes through to the C library today; `syscall()` with the number of a
//! call the library interposes is routed to that interposer, so a program that makes
//! its socket calls through `syscall()` is seen like one that calls the functions.

use crate::real::real;
use libc::{
    c_char, c_int, c_long, c_void, gid_t, pid_t, posix_spawn_file_actions_t, posix_spawnattr_t,
    size_t, uid_t,
};

mod next {
    use super::*;
    real! {
        fn fork() -> pid_t;
        fn system(cmd: *const c_char) -> c_int;
        fn execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
        fn execv(path: *const c_char, argv: *const *const c_char) -> c_int;
        fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int;
        fn execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
        fn fexecve(fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
        fn posix_spawn(pid: *mut pid_t, path: *const c_char, fa: *const posix_spawn_file_actions_t, attr: *const posix_spawnattr_t, argv: *const *mut c_char, envp: *const *mut c_char) -> c_int;
        fn posix_spawnp(pid: *mut pid_t, file: *const c_char, fa: *const posix_spawn_file_actions_t, attr: *const posix_spawnattr_t, argv: *const *mut c_char, envp: *const *mut c_char) -> c_int;
        fn sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int;
        fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t;
        fn siginterrupt(sig: c_int, flag: c_int) -> c_int;
        fn setuid(uid: uid_t) -> c_int;
        fn setgid(gid: gid_t) -> c_int;
        fn seteuid(uid: uid_t) -> c_int;
        fn setegid(gid: gid_t) -> c_int;
        fn setreuid(r: uid_t, e: uid_t) -> c_int;
        fn setregid(r: gid_t, e: gid_t) -> c_int;
        fn setresuid(r: uid_t, e: uid_t, s: uid_t) -> c_int;
        fn setresgid(r: gid_t, e: gid_t, s: gid_t) -> c_int;
        fn setgroups(n: size_t, list: *const gid_t) -> c_int;
    }
}

/// Defines interposed functions that hand every fused connection over to the kernel
/// (`fuse::hand_over_all`) and then call the C library's: a `fork` child, an `exec`'d
/// image or a spawned program then finds every byte in the kernel.
macro_rules! hand_over {
    ($( fn $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty ; )*) => {
        $(
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
                crate::fuse::keep_errno(crate::fuse::hand_over_all);
                // SAFETY: the caller's arguments, passed on.
                unsafe { next::$name($($arg),*) }
            }
        )*
    };
}

#[no_mangle]
pub unsafe extern "C" fn fork() -> pid_t {
    crate::fuse::keep_errno(crate::fuse::hand_over_all);
    // SAFETY: no arguments.
    let pid = unsafe { next::fork() };
    if pid > 0 && crate::fuse::proc_if_active().is_some() {
        crate::fuse::FORKED.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    pid
}

hand_over! {
    fn execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    fn execv(path: *const c_char, argv: *const *const c_char) -> c_int;
    fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int;
    fn execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    fn fexecve(fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    fn posix_spawn(pid: *mut pid_t, path: *const c_char, fa: *const posix_spawn_file_actions_t, attr: *const posix_spawnattr_t, argv: *const *mut c_char, envp: *const *mut c_char) -> c_int;
    fn posix_spawnp(pid: *mut pid_t, file: *const c_char, fa: *const posix_spawn_file_actions_t, attr: *const posix_spawnattr_t, argv: *const *mut c_char, envp: *const *mut c_char) -> c_int;
    fn system(cmd: *const c_char) -> c_int;
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
    fn setuid(uid: uid_t) -> c_int;
    fn setgid(gid: gid_t) -> c_int;
    fn seteuid(uid: uid_t) -> c_int;
    fn setegid(gid: gid_t) -> c_int;
    fn setreuid(r: uid_t, e: uid_t) -> c_int;
    fn setregid(r: gid_t, e: gid_t) -> c_int;
    fn setresuid(r: uid_t, e: uid_t, s: uid_t) -> c_int;
    fn setresgid(r: gid_t, e: gid_t, s: gid_t) -> c_int;
    fn setgroups(n: size_t, list: *const gid_t) -> c_int;
}

fn record(sig: c_int, handler: libc::sighandler_t, restart: bool) {
    if let Some(slot) = usize::try_from(sig)
        .ok()
        .and_then(|i| crate::fuse::SIG_RESTART.get(i))
    {
        let v = if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
            0
        } else if restart {
            1
        } else {
            2
        };
        slot.store(v, std::sync::atomic::Ordering::Relaxed);
    }
}

#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { next::sigaction(sig, act, old) };
    if r == 0 && !act.is_null() {
        // SAFETY: the caller's action, which the C library just accepted.
        let a = unsafe { &*act };
        record(sig, a.sa_sigaction, a.sa_flags & libc::SA_RESTART != 0);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { next::signal(sig, handler) };
    if r != libc::SIG_ERR {
        // glibc's signal() has BSD semantics: SA_RESTART.
        record(sig, handler, true);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn siginterrupt(sig: c_int, flag: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { next::siginterrupt(sig, flag) };
    if r == 0 {
        if let Some(slot) = usize::try_from(sig)
            .ok()
            .and_then(|i| crate::fuse::SIG_RESTART.get(i))
        {
            let _ = slot.fetch_update(
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
                |v| (v != 0).then_some(if flag != 0 { 2 } else { 1 }),
            );
        }
    }
    r
}

/// `vfork` run as `fork` with the parent waiting until the child has called `exec` or
/// exited (what `vfork` guarantees the parent), for when the child must go through the
/// library's `fork` handling. `varargs.c`'s `vfork` jumps here or to the C library's.
#[no_mangle]
pub extern "C" fn ember_vfork_as_fork() -> pid_t {
    let mut p = [0 as c_int; 2];
    // SAFETY: `p` has room for the two descriptors.
    let piped = unsafe { crate::real::sc!(libc::SYS_pipe2, p.as_mut_ptr(), libc::O_CLOEXEC) } == 0;
    // SAFETY: no arguments.
    let pid = unsafe { fork() };
    if !piped {
        return pid;
    }
    if pid == 0 {
        // The child keeps the write end: it closes at exec (O_CLOEXEC) or exit.
        raw_close(p[0]);
        return 0;
    }
    raw_close(p[1]);
    if pid > 0 {
        let mut b = 0u8;
        loop {
            // SAFETY: a one-byte read into `b`.
            let n = unsafe { crate::real::sc!(libc::SYS_read, p[0], &mut b as *mut u8, 1usize) };
            if n < 0 && crate::errno::get() == libc::EINTR {
                continue;
            }
            break;
        }
    }
    raw_close(p[0]);
    pid
}

fn raw_close(fd: c_int) {
    // SAFETY: closes a descriptor this module made.
    unsafe { crate::real::sc!(libc::SYS_close, fd) };
}

/// `syscall()`'s body (its variadic entry point is in `varargs.c`): the socket calls'
/// numbers go to their interposers, every other number to the C library's `syscall`.
#[no_mangle]
pub unsafe extern "C" fn ember_syscall(
    n: c_long,
    a: c_long,
    b: c_long,
    c: c_long,
    d: c_long,
    e: c_long,
    f: c_long,
) -> c_long {
    use crate::{fd, io, socket, wait};
    // SAFETY (all arms): the caller's raw system call arguments, reinterpreted as the
    // call's C prototype, exactly as the kernel would read them.
    unsafe {
        let i = |x: c_long| x as c_int;
        let p = |x: c_long| x as *mut c_void;
        match n {
            libc::SYS_socket => socket::socket(i(a), i(b), i(c)) as c_long,
            libc::SYS_bind => socket::bind(i(a), p(b).cast(), b_len(c)) as c_long,
            libc::SYS_listen => socket::listen(i(a), i(b)) as c_long,
            libc::SYS_connect => socket::connect(i(a), p(b).cast(), b_len(c)) as c_long,
            libc::SYS_accept => socket::accept(i(a), p(b).cast(), p(c).cast()) as c_long,
            libc::SYS_accept4 => socket::accept4(i(a), p(b).cast(), p(c).cast(), i(d)) as c_long,
            libc::SYS_shutdown => socket::shutdown(i(a), i(b)) as c_long,
            libc::SYS_getsockopt => {
                socket::getsockopt(i(a), i(b), i(c), p(d), p(e).cast()) as c_long
            }
            libc::SYS_setsockopt => socket::setsockopt(i(a), i(b), i(c), p(d), b_len(e)) as c_long,
            libc::SYS_read => io::read(i(a), p(b), c as usize) as c_long,
            libc::SYS_write => io::write(i(a), p(b), c as usize) as c_long,
            libc::SYS_readv => io::readv(i(a), p(b).cast(), i(c)) as c_long,
            libc::SYS_writev => io::writev(i(a), p(b).cast(), i(c)) as c_long,
            libc::SYS_recvfrom => {
                io::recvfrom(i(a), p(b), c as usize, i(d), p(e).cast(), p(f).cast()) as c_long
            }
            libc::SYS_sendto => {
                io::sendto(i(a), p(b), c as usize, i(d), p(e).cast(), b_len(f)) as c_long
            }
            libc::SYS_recvmsg => io::recvmsg(i(a), p(b).cast(), i(c)) as c_long,
            libc::SYS_sendmsg => io::sendmsg(i(a), p(b).cast(), i(c)) as c_long,
            libc::SYS_recvmmsg => {
                io::recvmmsg(i(a), p(b).cast(), c as u32, i(d), p(e).cast()) as c_long
            }
            libc::SYS_sendmmsg => io::sendmmsg(i(a), p(b).cast(), c as u32, i(d)) as c_long,
            libc::SYS_sendfile => io::sendfile64(i(a), i(b), p(c).cast(), d as usize) as c_long,
            libc::SYS_splice => {
                io::splice(i(a), p(b).cast(), i(c), p(d).cast(), e as usize, f as u32) as c_long
            }
            libc::SYS_close => fd::close(i(a)) as c_long,
            libc::SYS_close_range => fd::close_range(a as u32, b as u32, i(c)) as c_long,
            libc::SYS_dup => fd::dup(i(a)) as c_long,
            #[cfg(target_arch = "x86_64")]
            libc::SYS_dup2 => fd::dup2(i(a), i(b)) as c_long,
            libc::SYS_dup3 => fd::dup3(i(a), i(b), i(c)) as c_long,
            libc::SYS_fcntl => fd::ember_fcntl(i(a), i(b), c as libc::c_ulong) as c_long,
            libc::SYS_ioctl => fd::ember_ioctl(i(a), b as libc::c_ulong, p(c)) as c_long,
            libc::SYS_epoll_ctl => wait::epoll_ctl(i(a), i(b), i(c), p(d).cast()) as c_long,
            libc::SYS_epoll_pwait => {
                wait::epoll_pwait(i(a), p(b).cast(), i(c), i(d), p(e).cast()) as c_long
            }
            #[cfg(target_arch = "x86_64")]
            libc::SYS_epoll_wait => wait::epoll_wait(i(a), p(b).cast(), i(c), i(d)) as c_long,
            _ => raw_syscall(n, a, b, c, d, e, f),
        }
    }
}

fn b_len(x: c_long) -> libc::socklen_t {
    x as libc::socklen_t
}

fn raw_syscall(
    n: c_long,
    a: c_long,
    b: c_long,
    c: c_long,
    d: c_long,
    e: c_long,
    f: c_long,
) -> c_long {
    // SAFETY: the caller's raw system call, passed on.
    unsafe { crate::real::syscall(n, &[a, b, c, d, e, f]) }
}
