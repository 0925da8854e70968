//! What the library knows about each file descriptor of the process.
//!
//! # Design
//! A non-socket `read` or `write` must cost one table lookup, and the library must map
//! nothing before the program's first inet socket. So the table does not exist until an
//! `AF_INET`/`AF_INET6` stream socket is made ([`track`] allocates it); until then every
//! lookup is one atomic load that finds no table. The table has two levels: a directory
//! of [`DIR_LEN`] pointers, each to a chunk of [`CHUNK_LEN`] entries, a chunk being
//! mapped the first time one of its descriptors is tracked. That covers descriptors
//! below 2^20 (`DIR_LEN * CHUNK_LEN`); a program with a higher descriptor limit gets its
//! higher sockets passed through, untracked, exactly as without the library.
//!
//! An entry is one atomic word of [`Kind`] bits. The kernel reuses a descriptor number
//! as soon as it is closed, so the entry follows the calls that make, copy and close
//! descriptors (`socket`, `accept*`, `dup*`, `fcntl(F_DUPFD*)`, `close`, `close_range`).
//! A descriptor closed behind the library's back (glibc's internal `close`, a raw
//! system call) keeps a stale entry until its number is reused; every call that makes a
//! descriptor overwrites the entry of the number it returns, so staleness never outlives
//! the number's next use.
//!
//! Memory comes from `mmap` directly: the table is made from inside interposed calls,
//! which may run in a signal handler or between `fork` and `exec`, where `malloc` is
//! not safe. It is never freed (it lives as long as the process image).

use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

/// Entries per chunk.
pub const CHUNK_LEN: usize = 1024;
/// Chunks in the directory.
pub const DIR_LEN: usize = 1024;

/// Bits of an entry: the low 8 are [`Kind`] bits, the rest the index + 1 of the
/// descriptor's fusable connection (`fuse::Proc::conns`), 0 for none.
pub struct Kind;

impl Kind {
    /// An `AF_INET` or `AF_INET6` stream socket (TCP).
    pub const INET_STREAM: u32 = 1;
    /// `listen` was called on it.
    pub const LISTENER: u32 = 2;
    /// An epoll set with a user-level list (`fuse::epoll`).
    pub const EPOLL: u32 = 4;
}

type Chunk = [AtomicU32; CHUNK_LEN];
type Dir = [AtomicPtr<Chunk>; DIR_LEN];

/// The directory, null until the first tracked descriptor.
static DIR: AtomicPtr<Dir> = AtomicPtr::new(ptr::null_mut());

/// Fresh zeroed memory of `len` bytes from the kernel, or null.
fn map_zeroed(len: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping, owned by nobody else; zero-filled by the
    // kernel, which is the all-empty state of `Dir` and `Chunk` (atomics of 0, null
    // pointers).
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        ptr::null_mut()
    } else {
        p.cast()
    }
}

fn unmap(p: *mut u8, len: usize) {
    // SAFETY: `p` is a mapping of `len` bytes this module made and never published.
    unsafe { libc::munmap(p.cast(), len) };
}

/// Maps `slot`'s object if it is null, racing other threads: the loser unmaps its own.
fn get_or_map<T>(slot: &AtomicPtr<T>) -> Option<&'static T> {
    let mut p = slot.load(Ordering::Acquire);
    if p.is_null() {
        let fresh = map_zeroed(core::mem::size_of::<T>()).cast::<T>();
        if fresh.is_null() {
            return None;
        }
        match slot.compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => p = fresh,
            Err(other) => {
                unmap(fresh.cast(), core::mem::size_of::<T>());
                p = other;
            }
        }
    }
    // SAFETY: published mappings are never unmapped, and a zeroed `T` is valid.
    Some(unsafe { &*p })
}

/// The entry of `fd`, if the table and its chunk exist.
#[inline]
fn entry(fd: libc::c_int) -> Option<&'static AtomicU32> {
    let dir = DIR.load(Ordering::Acquire);
    if dir.is_null() {
        return None;
    }
    let fd = usize::try_from(fd).ok()?;
    // SAFETY: a published directory is never unmapped.
    let dir = unsafe { &*dir };
    let chunk = dir.get(fd / CHUNK_LEN)?.load(Ordering::Acquire);
    if chunk.is_null() {
        return None;
    }
    // SAFETY: a published chunk is never unmapped.
    Some(unsafe { &(*chunk)[fd % CHUNK_LEN] })
}

/// The entry of `fd`, making the table and the chunk if needed (`None` if `fd` is out
/// of the table's range or the memory could not be mapped: then `fd` stays untracked).
fn entry_or_make(fd: libc::c_int) -> Option<&'static AtomicU32> {
    let fd = usize::try_from(fd).ok()?;
    if fd >= CHUNK_LEN * DIR_LEN {
        return None;
    }
    let dir = get_or_map(&DIR)?;
    let chunk = get_or_map(&dir[fd / CHUNK_LEN])?;
    Some(&chunk[fd % CHUNK_LEN])
}

/// What is known about `fd` (0: nothing; the library passes its calls through).
#[inline]
pub fn kind(fd: libc::c_int) -> u32 {
    match entry(fd) {
        Some(e) => e.load(Ordering::Relaxed),
        None => 0,
    }
}

/// Records that `fd` is a new descriptor of kind `k` (0 forgets it).
pub fn track(fd: libc::c_int, k: u32) {
    if k == 0 {
        forget(fd);
    } else if let Some(e) = entry_or_make(fd) {
        e.store(k, Ordering::Relaxed);
    }
}

/// Adds bits to what is known of `fd`, if it is tracked.
pub fn mark(fd: libc::c_int, bits: u32) {
    if let Some(e) = entry(fd) {
        if e.load(Ordering::Relaxed) != 0 {
            e.fetch_or(bits, Ordering::Relaxed);
        }
    }
}

/// `fd` was closed (or is a new descriptor of a kind the library ignores).
#[inline]
pub fn forget(fd: libc::c_int) {
    if let Some(e) = entry(fd) {
        e.store(0, Ordering::Relaxed);
    }
}

/// Records that `fd`'s connection is number `i` of the process's connections.
pub fn set_conn(fd: libc::c_int, i: usize) {
    if let Some(e) = entry(fd) {
        let k = e.load(Ordering::Relaxed) & 0xff;
        let i = u32::try_from(i + 1).unwrap_or(0);
        if i < 1 << 24 {
            e.store(k | i << 8, Ordering::Relaxed);
        }
    }
}

/// The index of `fd`'s connection, if it has one.
#[inline]
pub fn conn_index(fd: libc::c_int) -> Option<usize> {
    match kind(fd) >> 8 {
        0 => None,
        i => Some(i as usize - 1),
    }
}

/// `new` is a copy of `old` (`dup*`, `fcntl(F_DUPFD*)`).
pub fn copy(old: libc::c_int, new: libc::c_int) {
    track(new, kind(old));
}

/// Descriptors `first..=last` were closed.
pub fn forget_range(first: u32, last: u32) {
    if DIR.load(Ordering::Acquire).is_null() || first > last {
        return;
    }
    let end = (last as usize).min(CHUNK_LEN * DIR_LEN - 1);
    let mut fd = first as usize;
    while fd <= end {
        if fd % CHUNK_LEN == 0 && entry(fd as libc::c_int).is_none() {
            // A whole chunk that was never made: nothing to forget there.
            fd += CHUNK_LEN;
            continue;
        }
        forget(fd as libc::c_int);
        fd += 1;
    }
}

/// True once any descriptor was ever tracked (the library has left its dormant state).
pub fn active() -> bool {
    !DIR.load(Ordering::Acquire).is_null()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untracked_until_tracked_then_copied_and_forgotten() {
        assert_eq!(kind(5), 0);
        assert_eq!(kind(-1), 0);
        track(5, Kind::INET_STREAM);
        assert!(active());
        assert_eq!(kind(5), Kind::INET_STREAM);
        mark(5, Kind::LISTENER);
        assert_eq!(kind(5), Kind::INET_STREAM | Kind::LISTENER);
        // Marking an untracked descriptor does nothing.
        mark(6, Kind::LISTENER);
        assert_eq!(kind(6), 0);
        copy(5, 3000);
        assert_eq!(kind(3000), Kind::INET_STREAM | Kind::LISTENER);
        forget(5);
        assert_eq!(kind(5), 0);
        track(2999, Kind::INET_STREAM);
        track(3001, Kind::INET_STREAM);
        forget_range(2999, 3000);
        assert_eq!(
            (kind(2999), kind(3000), kind(3001)),
            (0, 0, Kind::INET_STREAM)
        );
        // The whole range, including chunks never made, in a bounded walk.
        forget_range(0, u32::MAX);
        assert_eq!(kind(3001), 0);
        // A connection index rides above the kind bits and is copied with them.
        track(7, Kind::INET_STREAM);
        assert_eq!(conn_index(7), None);
        set_conn(7, 41);
        assert_eq!(
            (conn_index(7), kind(7) & 0xff),
            (Some(41), Kind::INET_STREAM)
        );
        copy(7, 8);
        assert_eq!(conn_index(8), Some(41));
        forget(7);
        assert_eq!(conn_index(7), None);
        // Out of the table's range: never tracked, never a fault.
        track(i32::MAX, Kind::INET_STREAM);
        assert_eq!(kind(i32::MAX), 0);
    }
}
