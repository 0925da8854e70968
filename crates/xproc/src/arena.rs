//! A pair arena: one shared-memory file (a memfd) between two processes under `ember
//! run`, carved into slots, each slot the two rings of one fused connection
//! (crossproc.md, "Arenas").
//!
//! # Design
//! At the first contact between two processes the accepting one makes an arena and
//! passes its descriptor to the other over the other's control socket; later
//! connections of the pair take a free slot, so a connection costs no descriptor and no
//! mapping. An arena is mapped whole by both processes and unmapped when the process
//! exits (or execs).
//!
//! # Layout (version [`VERSION`])
//! | offset | what |
//! |---|---|
//! | 0 | header: `magic u64`, `version u32`, `slots u32`, `slot_size u64`, `ring_capacity u64`, `id u64` |
//! | 64 | slot states: `slots` × `u64` |
//! | 4096 + i × slot_size | slot i: a 64-byte slot header, then ring *up* (client → server), then ring *down* (server → client), each `ring::region_size(ring_capacity)` bytes, 64-aligned |
//!
//! Slot header words: `nonce` (the connection's, from its registry candidate; 0 while
//! free), `attached` (bit 0 the accepting side, bit 1 the connecting side: a side
//! writes into a ring only after the other side has attached, so a ring byte is never
//! left where nobody will read it), `released` (the same bits: a side that is done with
//! the slot sets its bit; the side that sets the second one frees the slot), `unfuse`
//! (the same bits: a reader asks the writer to seal its ring and go back to the kernel),
//! `closed` (the same bits: a side closed its last descriptor of the connection; a
//! writer that sees the reader closed goes back to the kernel, whose shadow connection
//! then behaves as the kernel would).
//!
//! A slot state is `generation << 8 | kind` (kind 0 free, 1 used), changed only by
//! compare-and-swap with the generation incremented, so a stale view never frees a slot
//! that was reused.
//!
//! # Trust
//! The other process may write anything into the arena. The header is validated once, at
//! [`Arena::attach`], against the size of the file this process mapped; after that only
//! this process's validated copies (slot count, slot size, ring capacity) place any
//! access. Slot header words are atomics read as hints: a lying word can stall or unfuse
//! this pair's connections, never make this process read outside the mapping (the rings
//! validate their own words, see `ring.rs`).

#![allow(unsafe_code)]

use crate::ring::{self, RingRef};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// Layout version.
pub const VERSION: u32 = 1;
/// Most slots in an arena.
pub const MAX_SLOTS: usize = 256;
/// Bytes before the first slot.
pub const HEADER_LEN: usize = 4096;
/// Bytes of a slot header.
pub const SLOT_HEADER: usize = 64;
const MAGIC: u64 = u64::from_le_bytes(*b"emberAr1");
const STATES: usize = 64;
const PAGE: usize = 4096;

/// The side of a connection a process is: the one that accepted (the server) or the
/// one that connected (the client).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Accepted,
    Connected,
}

impl Side {
    fn bit(self) -> u64 {
        match self {
            Side::Accepted => 1,
            Side::Connected => 2,
        }
    }

    /// The other side.
    pub fn peer(self) -> Side {
        match self {
            Side::Accepted => Side::Connected,
            Side::Connected => Side::Accepted,
        }
    }
}

/// Bytes of one slot for rings of `capacity`.
pub fn slot_size(capacity: usize) -> usize {
    let ring = ring::region_size(capacity).next_multiple_of(ring::ALIGN);
    (SLOT_HEADER + 2 * ring).next_multiple_of(PAGE)
}

/// One arena, mapped.
#[derive(Debug)]
pub struct Arena {
    base: NonNull<u8>,
    len: usize,
    slots: usize,
    slot_size: usize,
    capacity: usize,
    id: u64,
}

// SAFETY: the mapping is shared memory touched only through atomics and the ring
// protocol; moving or sharing the descriptor between threads adds nothing to what two
// processes already do.
unsafe impl Send for Arena {}
// SAFETY: as for Send.
unsafe impl Sync for Arena {}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: `base..base+len` is this arena's own mapping, made by `map`.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

fn map(fd: &OwnedFd, len: usize) -> io::Result<NonNull<u8>> {
    // SAFETY: a shared mapping of `len` bytes of a file this process holds open.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast()).ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))
}

impl Arena {
    /// Makes an arena of `slots` slots whose rings hold `capacity` bytes (a power of two
    /// in the ring's range): a memfd, sized and mapped. Returns it with the descriptor
    /// to pass to the peer (close-on-exec).
    pub fn create(slots: usize, capacity: usize, id: u64) -> io::Result<(Arena, OwnedFd)> {
        if slots == 0 || slots > MAX_SLOTS {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "arena slots"));
        }
        if !capacity.is_power_of_two()
            || !(ring::MIN_CAPACITY..=ring::MAX_CAPACITY).contains(&capacity)
        {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "ring capacity"));
        }
        let slot_size = slot_size(capacity);
        let len = HEADER_LEN + slots * slot_size;
        // SAFETY: a NUL-terminated name and flags.
        let raw = unsafe { libc::memfd_create(c"ember-arena".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor this call made and nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sizes the file this call made.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let base = map(&fd, len)?;
        let a = Arena {
            base,
            len,
            slots,
            slot_size,
            capacity,
            id,
        };
        // A fresh memfd is zero: every slot free. The header, magic last.
        a.word(8)
            .store(u64::from(VERSION) | (slots as u64) << 32, Ordering::Relaxed);
        a.word(16).store(slot_size as u64, Ordering::Relaxed);
        a.word(24).store(capacity as u64, Ordering::Relaxed);
        a.word(32).store(id, Ordering::Relaxed);
        a.word(0).store(MAGIC, Ordering::Release);
        Ok((a, fd))
    }

    /// Maps and validates an arena another process made and passed as `fd`.
    pub fn attach(fd: &OwnedFd) -> io::Result<Arena> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("arena: {what}"));
        // SAFETY: an all-zero stat is valid.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is a valid out-parameter.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let len = usize::try_from(st.st_size).map_err(|_| bad("size"))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG || len < HEADER_LEN + PAGE {
            return Err(bad("not an arena file"));
        }
        if len > HEADER_LEN + MAX_SLOTS * slot_size(ring::MAX_CAPACITY) {
            return Err(bad("too large"));
        }
        let base = map(fd, len)?;
        let mut a = Arena {
            base,
            len,
            slots: 0,
            slot_size: 0,
            capacity: 0,
            id: 0,
        };
        if a.word(0).load(Ordering::Acquire) != MAGIC {
            return Err(bad("magic"));
        }
        let v = a.word(8).load(Ordering::Relaxed);
        let (version, slots) = (v as u32, (v >> 32) as usize);
        let capacity = a.word(24).load(Ordering::Relaxed) as usize;
        let size = a.word(16).load(Ordering::Relaxed) as usize;
        if version != VERSION
            || slots == 0
            || slots > MAX_SLOTS
            || !capacity.is_power_of_two()
            || !(ring::MIN_CAPACITY..=ring::MAX_CAPACITY).contains(&capacity)
            || size != slot_size(capacity)
            || HEADER_LEN + slots * size > len
        {
            return Err(bad("header"));
        }
        a.slots = slots;
        a.slot_size = size;
        a.capacity = capacity;
        a.id = a.word(32).load(Ordering::Relaxed);
        Ok(a)
    }

    /// The arena's id (chosen by its maker; names it in messages between the two).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Slots.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Bytes each ring holds.
    pub fn ring_capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes mapped.
    pub fn mapped_len(&self) -> usize {
        self.len
    }

    /// The 8-byte word at `off` (a header offset below HEADER_LEN or a slot header's).
    fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= self.len);
        // SAFETY: `off + 8 <= len` (callers compute offsets from validated counts),
        // 8-aligned (the mapping is page-aligned), and an AtomicU64 may alias memory
        // another process stores into concurrently: all accesses to it are atomic.
        unsafe { &*self.base.as_ptr().add(off).cast::<AtomicU64>() }
    }

    fn state(&self, i: usize) -> &AtomicU64 {
        self.word(STATES + 8 * i)
    }

    fn slot_off(&self, i: usize) -> usize {
        HEADER_LEN + i * self.slot_size
    }

    fn slot_word(&self, i: usize, w: usize) -> &AtomicU64 {
        self.word(self.slot_off(i) + 8 * w)
    }

    /// Takes a free slot for a connection with `nonce` and formats its two rings;
    /// `None` when every slot is in use (the connection stays on the kernel).
    pub fn alloc(&self, nonce: u64) -> Option<usize> {
        for i in 0..self.slots {
            let s = self.state(i).load(Ordering::Acquire);
            if s & 0xff != 0 {
                continue;
            }
            let used = ((s >> 8).wrapping_add(1) << 8) | 1;
            if self
                .state(i)
                .compare_exchange(s, used, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            for w in 1..8 {
                self.slot_word(i, w).store(0, Ordering::Relaxed);
            }
            for dir in [Dir::Up, Dir::Down] {
                let (p, len) = self.ring_region(i, dir);
                // SAFETY: the region lies inside this mapping (validated slot geometry),
                // is 64-aligned, and nobody uses the slot's rings: it was free until the
                // compare-and-swap above made it ours.
                if unsafe { RingRef::init(p, len, self.capacity) }.is_err() {
                    self.state(i).store(s, Ordering::Release);
                    return None;
                }
            }
            self.slot_word(i, 0).store(nonce, Ordering::Release);
            return Some(i);
        }
        None
    }

    fn ring_region(&self, i: usize, dir: Dir) -> (NonNull<u8>, usize) {
        let ring = ring::region_size(self.capacity).next_multiple_of(ring::ALIGN);
        let off = self.slot_off(i)
            + SLOT_HEADER
            + match dir {
                Dir::Up => 0,
                Dir::Down => ring,
            };
        // SAFETY: `off + ring <= slot_off(i) + slot_size <= len`, inside the mapping.
        let p = unsafe { NonNull::new_unchecked(self.base.as_ptr().add(off)) };
        (p, ring)
    }

    /// The slot `i` as the connection with `nonce` sees it, if it is that connection's.
    pub fn slot(&self, i: usize, nonce: u64) -> Option<Slot<'_>> {
        if i >= self.slots || nonce == 0 || self.state(i).load(Ordering::Acquire) & 0xff != 1 {
            return None;
        }
        if self.slot_word(i, 0).load(Ordering::Acquire) != nonce {
            return None;
        }
        Some(Slot { arena: self, i })
    }
}

/// A ring's direction within a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// Client (connected side) to server (accepted side).
    Up,
    /// Server to client.
    Down,
}

/// One connection's slot.
#[derive(Debug, Clone, Copy)]
pub struct Slot<'a> {
    arena: &'a Arena,
    i: usize,
}

/// Words of a slot header, by index.
const NONCE: usize = 0;
const ATTACHED: usize = 1;
const RELEASED: usize = 2;
const UNFUSE: usize = 3;
const CLOSED: usize = 4;

impl Slot<'_> {
    /// The slot's index.
    pub fn index(&self) -> usize {
        self.i
    }

    /// The ring `dir`, validated (it was formatted by `alloc`, maybe in the other
    /// process; a peer that scribbled over it gets an error here).
    pub fn ring(&self, dir: Dir) -> Result<RingRef, ring::LayoutError> {
        let (p, len) = self.arena.ring_region(self.i, dir);
        // SAFETY: the region is inside the arena's mapping, which lives as long as the
        // arena; the runtime keeps the arena alive as long as any ring of it is used,
        // and uses one producer and one consumer per ring.
        unsafe { RingRef::attach(p, len) }
    }

    fn bits(&self, w: usize) -> u64 {
        self.arena.slot_word(self.i, w).load(Ordering::Acquire)
    }

    fn set(&self, w: usize, side: Side) -> u64 {
        self.arena
            .slot_word(self.i, w)
            .fetch_or(side.bit(), Ordering::AcqRel)
            | side.bit()
    }

    /// `side` mapped the slot and uses its rings.
    pub fn attach(&self, side: Side) {
        self.set(ATTACHED, side);
    }

    /// Has `side` attached?
    pub fn attached(&self, side: Side) -> bool {
        self.bits(ATTACHED) & side.bit() != 0
    }

    /// `side` asks the writer toward it to seal its ring and go back to the kernel.
    pub fn ask_unfuse(&self, side: Side) {
        self.set(UNFUSE, side);
    }

    /// Has `side` asked to unfuse?
    pub fn unfuse_asked(&self, side: Side) -> bool {
        self.bits(UNFUSE) & side.bit() != 0
    }

    /// `side` closed its last descriptor of the connection.
    pub fn close(&self, side: Side) {
        self.set(CLOSED, side);
    }

    /// Has `side` closed?
    pub fn closed(&self, side: Side) -> bool {
        self.bits(CLOSED) & side.bit() != 0
    }

    /// `side` is done with the slot; the second side to say so frees it. Returns true
    /// if this call freed it.
    pub fn release(&self, side: Side) -> bool {
        let both = Side::Accepted.bit() | Side::Connected.bit();
        if self.set(RELEASED, side) & both != both {
            return false;
        }
        let st = self.arena.state(self.i);
        let s = st.load(Ordering::Acquire);
        if s & 0xff != 1 {
            return false;
        }
        self.arena
            .slot_word(self.i, NONCE)
            .store(0, Ordering::Relaxed);
        let free = (s >> 8).wrapping_add(1) << 8;
        st.compare_exchange(s, free, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_taken_used_by_both_sides_and_freed_by_the_second_release() {
        let (a, fd) = Arena::create(2, ring::MIN_CAPACITY, 77).unwrap();
        let b = Arena::attach(&fd).unwrap();
        assert_eq!(
            (b.id(), b.slots(), b.ring_capacity()),
            (77, 2, ring::MIN_CAPACITY)
        );
        let s0 = a.alloc(11).unwrap();
        let s1 = a.alloc(12).unwrap();
        assert_eq!(a.alloc(13), None, "two slots only");
        // The other process's view: the slot by index and nonce.
        assert!(b.slot(s0, 12).is_none(), "wrong nonce");
        let (x, y) = (a.slot(s0, 11).unwrap(), b.slot(s0, 11).unwrap());
        x.attach(Side::Accepted);
        assert!(!y.attached(Side::Connected) && y.attached(Side::Accepted));
        y.attach(Side::Connected);
        // Bytes up: written in one mapping, read in the other.
        let mut p = y.ring(Dir::Up).unwrap().producer();
        let mut c = x.ring(Dir::Up).unwrap().consumer();
        assert!(p.set_switch(0));
        assert_eq!(p.write(b"hello").unwrap(), 5);
        let mut buf = [0u8; 8];
        assert_eq!(c.read(&mut buf).unwrap(), 5);
        assert_eq!(&buf[..5], b"hello");
        y.ask_unfuse(Side::Connected);
        assert!(x.unfuse_asked(Side::Connected));
        x.close(Side::Accepted);
        assert!(y.closed(Side::Accepted));
        assert!(!x.release(Side::Accepted));
        assert!(y.release(Side::Connected));
        assert!(a.slot(s0, 11).is_none(), "freed");
        // Reused with fresh words and rings.
        let again = a.alloc(14).unwrap();
        assert_eq!(again, s0);
        let z = a.slot(again, 14).unwrap();
        assert!(!z.attached(Side::Accepted) && !z.closed(Side::Accepted));
        assert_eq!(z.ring(Dir::Up).unwrap().consumer().available().unwrap(), 0);
        let _ = s1;
    }

    #[test]
    fn a_lying_header_is_refused() {
        let (a, fd) = Arena::create(1, ring::MIN_CAPACITY, 1).unwrap();
        for (off, val) in [(0, 0u64), (8, u64::MAX), (16, 1), (24, 3), (24, 1 << 40)] {
            let old = a.word(off).swap(val, Ordering::Relaxed);
            assert_eq!(
                Arena::attach(&fd).unwrap_err().kind(),
                io::ErrorKind::InvalidData,
                "word {off}"
            );
            a.word(off).store(old, Ordering::Relaxed);
        }
        assert!(Arena::attach(&fd).is_ok());
        // A slot count larger than the file.
        a.word(8)
            .store(u64::from(VERSION) | 200 << 32, Ordering::Relaxed);
        assert!(Arena::attach(&fd).is_err());
        // Not an arena at all.
        // SAFETY: a NUL-terminated name.
        let raw = unsafe { libc::memfd_create(c"x".as_ptr(), libc::MFD_CLOEXEC) };
        // SAFETY: a fresh descriptor of an empty memfd, owned by nobody else.
        let empty = unsafe { OwnedFd::from_raw_fd(raw) };
        assert!(Arena::attach(&empty).is_err());
        assert!(Arena::create(0, ring::MIN_CAPACITY, 1).is_err());
        assert!(Arena::create(1, 3000, 1).is_err());
    }
}
