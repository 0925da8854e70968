//! `errno` of the calling thread.

/// Sets the calling thread's `errno`.
#[inline]
pub fn set(e: libc::c_int) {
    // SAFETY: glibc's `__errno_location` returns the calling thread's errno, valid for
    // the thread's life.
    unsafe { *libc::__errno_location() = e };
}

/// The calling thread's `errno`.
#[inline]
pub fn get() -> libc::c_int {
    // SAFETY: as in `set`.
    unsafe { *libc::__errno_location() }
}
