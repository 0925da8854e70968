//! The real functions behind the interposed ones: the next definition of each symbol in
//! the dynamic linker's search order (`dlsym(RTLD_NEXT, name)`), normally glibc's.
//!
//! # Design
//! Each symbol is resolved the first time it is called and cached in an atomic word, so
//! the library needs no constructor to pass calls through: a call made before the
//! library's constructor ran (another library's constructor calling `read`, say) works.
//! A symbol that cannot be resolved (a C library without it) makes the call fail with
//! `ENOSYS`, as a kernel without the system call would.
//!
//! `dlsym` itself may allocate; nothing here is called from inside `malloc`, which the
//! library does not interpose.

use core::sync::atomic::{AtomicUsize, Ordering};
use std::ffi::CStr;

/// One resolved symbol: 0 not resolved yet, 1 not found, otherwise the address.
pub struct Sym {
    name: &'static CStr,
    addr: AtomicUsize,
}

const MISSING: usize = 1;

impl Sym {
    pub const fn new(name: &'static CStr) -> Self {
        Sym {
            name,
            addr: AtomicUsize::new(0),
        }
    }

    /// The symbol's address, or `None` if the C library has no such function.
    #[inline]
    pub fn get(&self) -> Option<usize> {
        let a = self.addr.load(Ordering::Acquire);
        if a > MISSING {
            return Some(a);
        }
        if a == MISSING {
            return None;
        }
        self.resolve()
    }

    #[cold]
    fn resolve(&self) -> Option<usize> {
        // SAFETY: `name` is NUL-terminated; RTLD_NEXT asks for the next definition after
        // this library, which is never the interposer itself.
        let p = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) } as usize;
        // Two threads may resolve at once; both store the same value.
        self.addr
            .store(if p == 0 { MISSING } else { p }, Ordering::Release);
        (p != 0).then_some(p)
    }
}

/// Declares the real functions: `real! { fn read(fd: c_int, ...) -> ssize_t; ... }`
/// makes `real::read(...)`, which calls the next definition, or fails with `ENOSYS`
/// (returning `-1` cast to the return type) when there is none.
macro_rules! real {
    ($( fn $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty ; )*) => {
        $(
            #[allow(clippy::missing_safety_doc)]
            #[inline]
            pub unsafe fn $name($($arg: $ty),*) -> $ret {
                static SYM: $crate::real::Sym = $crate::real::Sym::new(
                    match ::std::ffi::CStr::from_bytes_with_nul(
                        concat!(stringify!($name), "\0").as_bytes()
                    ) {
                        Ok(c) => c,
                        Err(_) => panic!("symbol name"),
                    }
                );
                match SYM.get() {
                    Some(a) => {
                        // SAFETY: the address is glibc's definition of this very symbol,
                        // whose C prototype the declaration above copies.
                        let f: unsafe extern "C" fn($($ty),*) -> $ret =
                            unsafe { ::core::mem::transmute(a) };
                        unsafe { f($($arg),*) }
                    }
                    None => {
                        $crate::errno::set(libc::ENOSYS);
                        (-1i64) as $ret
                    }
                }
            }
        )*
    };
}
pub(crate) use real;

type SyscallFn = unsafe extern "C" fn(libc::c_long, ...) -> libc::c_long;
static SYSCALL: Sym = Sym::new(c"syscall");

/// The C library's `syscall`, with up to six argument words. The library's own system
/// calls go through here: `libc::syscall` from inside the library would find the
/// library's own interposed `syscall` first, and come back into the interposers.
///
/// # Safety
/// The arguments must be what system call `n` expects.
pub unsafe fn syscall(n: libc::c_long, args: &[libc::c_long]) -> libc::c_long {
    let mut a = [0 as libc::c_long; 6];
    for (d, s) in a.iter_mut().zip(args) {
        *d = *s;
    }
    let Some(addr) = SYSCALL.get() else {
        crate::errno::set(libc::ENOSYS);
        return -1;
    };
    // SAFETY: the C library's variadic `syscall`, given a number and six argument
    // words (the kernel reads only those the call has); the caller vouches for them.
    let f: SyscallFn = unsafe { core::mem::transmute::<usize, SyscallFn>(addr) };
    unsafe { f(n, a[0], a[1], a[2], a[3], a[4], a[5]) }
}

/// `sc!(SYS_x, a, b, ...)`: [`syscall`] with each argument cast to a word.
macro_rules! sc {
    ($n:expr $(, $a:expr)* $(,)?) => {
        $crate::real::syscall($n as libc::c_long, &[$($a as libc::c_long),*])
    };
}
pub(crate) use sc;
