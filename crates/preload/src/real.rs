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
