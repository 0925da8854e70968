//! Memory to put rings in when there is no arena: a zeroed, cache-line-aligned heap
//! block (for the fuzz entry point and tests), and, in tests, a mapping fenced by
//! `PROT_NONE` guard pages so that any access outside a region faults at once.

#![allow(unsafe_code)]

use std::alloc::Layout;
use std::ptr::NonNull;

/// A zeroed heap block aligned to [`crate::ring::ALIGN`], freed on drop. Nothing ever
/// makes a reference to its bytes: they are used through raw pointers, as a shared
/// mapping would be.
#[derive(Debug)]
pub(crate) struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the block is owned memory with no thread affinity; its bytes are only touched
// through raw pointers under the ring protocol, by whoever holds the ring handles.
unsafe impl Send for AlignedBuf {}
// SAFETY: `&self` gives out only the address.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// `len` zero bytes (at least one is allocated).
    pub(crate) fn zeroed(len: usize) -> AlignedBuf {
        let layout = Layout::from_size_align(len.max(1), crate::ring::ALIGN)
            .expect("a ring region's size fits a Layout");
        // SAFETY: the layout's size is non-zero.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, layout }
    }

    pub(crate) fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }

    /// Stores `v` into the 8-byte word at `offset`, as another process scribbling on
    /// shared memory would. Offsets outside the block or not 8-aligned are ignored.
    #[cfg(not(loom))]
    pub(crate) fn scribble(&self, offset: usize, v: u64) {
        // SAFETY: the block is `len` bytes, alive while self is.
        unsafe { store_word(self.ptr, self.len(), offset, v) }
    }
}

/// Stores `v` atomically into the 8-byte word at `offset` of `len` bytes at `base`
/// does nothing if the word is not inside or not 8-aligned.
///
/// # Safety
/// `base` points to `len` bytes, readable and writable, whose 8-byte words are only
/// accessed atomically by others (as a ring header's are).
#[cfg(not(loom))]
pub(crate) unsafe fn store_word(base: NonNull<u8>, len: usize, offset: usize, v: u64) {
    let addr = (base.as_ptr() as usize).wrapping_add(offset);
    if addr % 8 != 0 || offset.checked_add(8).is_none_or(|end| end > len) {
        return;
    }
    // SAFETY: the word lies inside the caller's `len` bytes and is 8-aligned (checked
    // above); any bit pattern is a valid AtomicU64, and the caller promises that
    // others access it atomically too.
    let word = unsafe {
        &*base
            .as_ptr()
            .add(offset)
            .cast::<std::sync::atomic::AtomicU64>()
    };
    word.store(v, std::sync::atomic::Ordering::SeqCst);
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this very layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// A region of `len` bytes inside an anonymous mapping with an inaccessible page on
/// each side; the region touches one guard: the upper one (`at_end`, so an overrun
/// faults) or the lower one (so an underrun faults).
#[cfg(all(test, not(loom)))]
pub(crate) struct Guarded {
    base: *mut u8,
    total: usize,
    region: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned and has no thread affinity; `&self` only gives out its
// address and stores into header words atomically (`scribble`).
#[cfg(all(test, not(loom)))]
unsafe impl Sync for Guarded {}

#[cfg(all(test, not(loom)))]
impl Guarded {
    pub(crate) fn new(len: usize, at_end: bool) -> Guarded {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let pages = len.div_ceil(page).max(1);
        let total = (pages + 2) * page;
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED, "mmap");
        let base = base.cast::<u8>();
        // SAFETY: the middle pages lie inside the mapping just made.
        let r = unsafe {
            libc::mprotect(
                base.add(page).cast(),
                pages * page,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        assert_eq!(r, 0, "mprotect");
        let offset = if at_end {
            page + pages * page - len
        } else {
            page
        };
        // SAFETY: `offset + len <= page + pages * page < total`: inside the mapping.
        let region = NonNull::new(unsafe { base.add(offset) }).expect("mmap is not null");
        Guarded {
            base,
            total,
            region,
            len,
        }
    }

    pub(crate) fn ptr(&self) -> NonNull<u8> {
        self.region
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Stores `v` into the 8-byte word at `offset` of the region, as another process
    /// scribbling on shared memory would (atomically: the ring's words are atomics).
    pub(crate) fn scribble(&self, offset: usize, v: u64) {
        assert!(offset % 8 == 0 && offset + 8 <= self.len);
        // SAFETY: the region is `len` bytes inside the mapping, alive while self is.
        unsafe { store_word(self.region, self.len, offset, v) }
    }
}

#[cfg(all(test, not(loom)))]
impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; nothing refers to it now.
        unsafe { libc::munmap(self.base.cast(), self.total) };
    }
}
