//! One direction of a fused connection between two processes: a single-producer
//! single-consumer byte ring in shared memory (a slot of a memfd arena).
//!
//! # Design
//! The writer's process copies bytes in and the reader's process copies them out: two
//! copies, as kernel loopback. Everything the two sides agree on lives in a `#[repr(C)]`
//! header at the start of the region, on three 64-byte cache lines, followed by the data
//! area (the capacity, a power of two from [`MIN_CAPACITY`] to [`MAX_CAPACITY`]):
//!
//! | offset | word | written by | meaning |
//! |---|---|---|---|
//! | 0 | `magic` | formatter | [`layout`]'s magic and layout version |
//! | 8 | `capacity` | formatter | data-area size in bytes |
//! | 64 | `tail` | writer | ring bytes published (Release after the copy-in) |
//! | 72 | `switch_k` | writer | kernel bytes sent before the first ring byte (`u64::MAX`: not yet) |
//! | 80 | `seal` | writer | unfuse offset m: ring bytes after which the writer went back to the kernel (`u64::MAX`: not sealed) |
//! | 88 | `fin` | writer | shutdown offset: ring bytes after which the reader sees end of file (`u64::MAX`: none) |
//! | 96 | `writer_waiter` | writer arms, reader clears | token of a writer sleeping on flow control (0: none) |
//! | 128 | `head` | reader | ring bytes consumed (Release after the copy-out) |
//! | 136 | `reads` | reader | completed reads that took bytes (for `FusedFlow::reader_read`) |
//! | 144 | `rcv_cap` | reader | the reader's receive-buffer size: the most bytes the writer may leave unread |
//! | 152 | `reader_waiter` | reader arms, writer clears | token of a reader sleeping for data (0: none) |
//! | 192 | data | | `capacity` bytes |
//!
//! Indices are monotonically increasing byte counts (a u64 does not wrap in practice);
//! a byte at index `i` lives at `i & (capacity - 1)`. Each side keeps a *private* copy
//! of its own index and of the capacity it validated at attach: the shared copies of
//! its own words are only ever written by it, never read back as truth. The writer's
//! words and the reader's words are on separate cache lines, so a publish invalidates
//! only the line the other side reads anyway; each sleeper's armed word is on its own
//! side's line (it is written rarely, read by the peer on every publish).
//!
//! # Protocol
//! * Writer: copy the bytes in at `tail..tail+n`, then store `tail + n` (Release).
//!   Reader: load `tail` (Acquire), copy `head..tail` out, then store the new `head`
//!   (Release) and bump `reads`. The writer loads `head` with Acquire before reusing
//!   the bytes below it, so it never overwrites a byte still being copied out. A writer
//!   killed mid-copy leaves nothing visible: `tail` moves only after the copy.
//! * Switch: the writer publishes `switch_k` (Release) before its first ring byte; the
//!   reader takes exactly k kernel bytes, then the ring.
//! * Seal (unfuse): the writer stores `seal = tail` (Release) after its last ring byte
//!   and writes nothing more into the ring; the reader drains to m, then reads the
//!   kernel. Shutdown (FIN) stores `fin = tail` the same way; the reader sees end of
//!   file after draining. The two are distinct: after a seal the bytes go on by kernel.
//! * Flow control: the writer may leave at most `min(capacity, rcv_cap)` bytes unread.
//!   The policy itself (the unread-writes limit, the low-water mark) is the core's
//!   `FusedFlow`, run by the writer from `reads` ([`Producer::take_reader_read`]) and
//!   `rcv_cap` ([`Producer::rcv_cap`], [`Producer::room`]).
//! * Waking: the armed words and the fences are [`crate::wake`]'s; a side that published
//!   calls [`Producer::wake_reader`] or [`Consumer::wake_writer`].
//!
//! # Trust
//! The peer process may be buggy or hostile and may write anything into the region at
//! any time. Nothing read from shared memory is trusted: every call loads each word it
//! needs once, checks it against the private state (`tail - head` must lie in
//! `0..=capacity`, a seal or shutdown offset must match the tail, ...) and returns
//! [`Corrupt`] otherwise. Whatever the peer writes, no call panics and no copy touches
//! memory outside the data area: the capacity is validated against the mapping's length
//! once, at [`RingRef::attach`], and only the private copy is used afterwards. A hostile
//! peer can only corrupt or stall this connection's bytes, which it could do anyway.
//!
//! # Soundness of the raw accesses
//! The header is made of atomics only, so shared references to it are fine while the
//! peer stores into it (aligned 8-byte stores are single-copy atomic on every target
//! ember runs on). The data area is never referenced as `&[u8]`/`&mut [u8]`: it is
//! copied with raw pointers ([`std::ptr::copy`]) and only between indices the protocol
//! says are stable (the writer owns `tail..head+cap`, the reader `head..tail`). A honest
//! peer never touches those bytes concurrently; a hostile one racing them only makes
//! the bytes of this connection garbage — the copy is into or out of a private buffer
//! and its value is never interpreted, so no invariant of this process depends on it.

#![allow(unsafe_code)]

use crate::sync::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
    Slot,
};
use crate::wake::{self, Wake};
use std::fmt;
use std::io::{IoSlice, IoSliceMut};
#[cfg(not(loom))]
use std::mem::offset_of;
use std::mem::size_of;
use std::ptr::NonNull;

/// The smallest data area (4 KiB; 8 bytes in loom models, to explore wrap-around).
pub const MIN_CAPACITY: usize = if cfg!(loom) { 8 } else { 4096 };
/// The largest data area (64 MiB).
pub const MAX_CAPACITY: usize = 64 << 20;
/// The alignment a region must have (one cache line).
pub const ALIGN: usize = 64;
/// Bytes of header before the data area (192; more under loom, whose atomics are bigger).
pub const HEADER_SIZE: usize = size_of::<Header>();

/// "Not set" in `switch_k`, `seal` and `fin`.
const UNSET: u64 = u64::MAX;
/// `magic`: ember's ring, layout 1.
const MAGIC: u64 = u64::from_le_bytes(*b"emberRg1");

/// The bytes a ring of `capacity` needs: header plus data area (`capacity` must be a
/// valid capacity, see [`MIN_CAPACITY`] and [`MAX_CAPACITY`]).
pub const fn region_size(capacity: usize) -> usize {
    HEADER_SIZE + capacity * size_of::<Slot>()
}

/// Byte offsets of the header's words in a region (for tools that inspect a ring, and
/// for tests that scribble on one).
pub mod layout {
    use super::{Header, Ident, ReaderLine, WriterLine};
    use std::mem::offset_of;

    /// Magic and layout version.
    pub const MAGIC: usize = offset_of!(Header, ident) + offset_of!(Ident, magic);
    /// Data-area size.
    pub const CAPACITY: usize = offset_of!(Header, ident) + offset_of!(Ident, capacity);
    /// Bytes published by the writer.
    pub const TAIL: usize = offset_of!(Header, w) + offset_of!(WriterLine, tail);
    /// The switch offset k.
    pub const SWITCH: usize = offset_of!(Header, w) + offset_of!(WriterLine, switch_k);
    /// The seal (unfuse) offset m.
    pub const SEAL: usize = offset_of!(Header, w) + offset_of!(WriterLine, seal);
    /// The shutdown (FIN) offset.
    pub const FIN: usize = offset_of!(Header, w) + offset_of!(WriterLine, fin);
    /// The writer's armed word.
    pub const WRITER_WAITER: usize = offset_of!(Header, w) + offset_of!(WriterLine, writer_waiter);
    /// Bytes consumed by the reader.
    pub const HEAD: usize = offset_of!(Header, r) + offset_of!(ReaderLine, head);
    /// The reader's completed reads.
    pub const READS: usize = offset_of!(Header, r) + offset_of!(ReaderLine, reads);
    /// The reader's receive-buffer size.
    pub const RCV_CAP: usize = offset_of!(Header, r) + offset_of!(ReaderLine, rcv_cap);
    /// The reader's armed word.
    pub const READER_WAITER: usize = offset_of!(Header, r) + offset_of!(ReaderLine, reader_waiter);
    /// Every word of the header.
    pub const WORDS: [usize; 11] = [
        MAGIC,
        CAPACITY,
        TAIL,
        SWITCH,
        SEAL,
        FIN,
        WRITER_WAITER,
        HEAD,
        READS,
        RCV_CAP,
        READER_WAITER,
    ];
    /// Where the data area starts.
    pub const DATA: usize = super::HEADER_SIZE;
}

/// Line 0: written once by whoever formats the region.
#[repr(C, align(64))]
struct Ident {
    magic: AtomicU64,
    capacity: AtomicU64,
}

/// Line 1: the writer's words.
#[repr(C, align(64))]
struct WriterLine {
    tail: AtomicU64,
    switch_k: AtomicU64,
    seal: AtomicU64,
    fin: AtomicU64,
    writer_waiter: AtomicU64,
}

/// Line 2: the reader's words.
#[repr(C, align(64))]
struct ReaderLine {
    head: AtomicU64,
    reads: AtomicU64,
    rcv_cap: AtomicU64,
    reader_waiter: AtomicU64,
}

#[repr(C)]
struct Header {
    ident: Ident,
    w: WriterLine,
    r: ReaderLine,
}

// The layout is a contract between processes (possibly of different builds): pin it.
#[cfg(not(loom))]
const _: () = {
    assert!(size_of::<Header>() == 192);
    assert!(offset_of!(Header, w) == 64 && offset_of!(Header, r) == 128);
    assert!(layout::TAIL == 64 && layout::HEAD == 128 && layout::READER_WAITER == 152);
    assert!(layout::WRITER_WAITER == 96 && layout::RCV_CAP == 144);
};
const _: () = assert!(HEADER_SIZE % ALIGN == 0 && std::mem::align_of::<Header>() == ALIGN);

impl Header {
    /// A fresh header, magic not yet set.
    fn new(capacity: u64) -> Header {
        Header {
            ident: Ident {
                magic: AtomicU64::new(0),
                capacity: AtomicU64::new(capacity),
            },
            w: WriterLine {
                tail: AtomicU64::new(0),
                switch_k: AtomicU64::new(UNSET),
                seal: AtomicU64::new(UNSET),
                fin: AtomicU64::new(UNSET),
                writer_waiter: AtomicU64::new(0),
            },
            r: ReaderLine {
                head: AtomicU64::new(0),
                reads: AtomicU64::new(0),
                rcv_cap: AtomicU64::new(capacity),
                reader_waiter: AtomicU64::new(0),
            },
        }
    }
}

/// The shared header holds a value no honest peer writes (an index out of bounds, an
/// offset that contradicts the tail, ...). The connection cannot go on fused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt;

impl fmt::Display for Corrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("fused ring header corrupt")
    }
}

impl std::error::Error for Corrupt {}

/// Why a [`Producer`] did not write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteError {
    /// The shared header is corrupt.
    Corrupt,
    /// No switch offset was published yet ([`Producer::set_switch`] comes first).
    NotSwitched,
    /// The ring is sealed or shut down: nothing more goes into it.
    Closed,
}

impl From<Corrupt> for WriteError {
    fn from(_: Corrupt) -> WriteError {
        WriteError::Corrupt
    }
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WriteError::Corrupt => "fused ring header corrupt",
            WriteError::NotSwitched => "fused ring written before its switch offset",
            WriteError::Closed => "fused ring written after seal or shutdown",
        })
    }
}

impl std::error::Error for WriteError {}

/// Why a region cannot hold a ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutError {
    /// Not aligned to [`ALIGN`].
    Misaligned,
    /// Shorter than the header plus the data area.
    TooSmall,
    /// Not formatted as a ring (of this layout version).
    BadMagic,
    /// The capacity is not a power of two in `MIN_CAPACITY..=MAX_CAPACITY`.
    BadCapacity,
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LayoutError::Misaligned => "ring region misaligned",
            LayoutError::TooSmall => "ring region too small for its capacity",
            LayoutError::BadMagic => "region is not a ring",
            LayoutError::BadCapacity => "ring capacity invalid",
        })
    }
}

impl std::error::Error for LayoutError {}

/// What a reader finds in the ring now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadState {
    /// This many bytes can be read.
    Data(usize),
    /// Nothing yet: the writer has not written, sealed or shut down.
    Empty,
    /// Drained to the seal at this ring offset: the rest comes by kernel.
    Sealed(u64),
    /// Drained to the writer's shutdown: end of file.
    Eof,
}

/// Where the writer stopped using the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Sealed(u64),
    Fin(u64),
}

/// What the reader may read, validated.
struct Window {
    /// `tail - head`, at most the capacity.
    avail: usize,
    end: Option<End>,
}

/// A formatted ring region: where it is and its validated capacity. Make one with
/// [`RingRef::init`] or [`RingRef::attach`], then take its [`Producer`] (in the writer's
/// process) or [`Consumer`] (in the reader's).
#[derive(Debug, Clone, Copy)]
pub struct RingRef {
    hdr: NonNull<Header>,
    /// Validated at init or attach; never read from shared memory again.
    cap: u64,
}

// SAFETY: a RingRef is an address and a number. Through it, this module touches the
// header only with atomic operations, and the data area only in Producer and Consumer
// under the ring protocol, which is exactly what threads of two processes do; moving or
// sharing the descriptor between threads of one process adds nothing to that.
unsafe impl Send for RingRef {}
// SAFETY: as for Send: its `&self` methods only load header atomics.
unsafe impl Sync for RingRef {}

fn valid_capacity(cap: u64) -> bool {
    cap.is_power_of_two() && (MIN_CAPACITY as u64..=MAX_CAPACITY as u64).contains(&cap)
}

fn check_region(mem: NonNull<u8>, len: usize) -> Result<(), LayoutError> {
    if mem.as_ptr() as usize % ALIGN != 0 {
        return Err(LayoutError::Misaligned);
    }
    if len < HEADER_SIZE {
        return Err(LayoutError::TooSmall);
    }
    Ok(())
}

impl RingRef {
    /// Formats `len` bytes at `mem` as an empty ring of `capacity` bytes (a power of two
    /// in `MIN_CAPACITY..=MAX_CAPACITY`; `rcv_cap` starts at the capacity), publishing
    /// the magic last (Release) so that an attach that sees it sees the rest.
    ///
    /// # Safety
    /// `mem` must point to `len` bytes, readable and writable, that stay mapped while
    /// this `RingRef` or anything made from it lives. Other processes may map them too,
    /// but nobody else formats or uses them as a ring during this call. At most one
    /// [`Producer`] and one [`Consumer`] of the ring may exist at a time, across all
    /// processes (the owner words of the runtime see to it).
    pub unsafe fn init(
        mem: NonNull<u8>,
        len: usize,
        capacity: usize,
    ) -> Result<RingRef, LayoutError> {
        check_region(mem, len)?;
        if !valid_capacity(capacity as u64) {
            return Err(LayoutError::BadCapacity);
        }
        if region_size(capacity) > len {
            return Err(LayoutError::TooSmall);
        }
        let hdr = mem.cast::<Header>();
        // SAFETY: the caller gives `len >= region_size(capacity) >= HEADER_SIZE`
        // writable bytes at `mem`, which check_region found aligned to ALIGN, the
        // header's alignment; nobody uses them as a ring meanwhile. `write` does not
        // read or drop what was there (any bytes; atomics need no drop).
        unsafe { hdr.as_ptr().write(Header::new(capacity as u64)) };
        let ring = RingRef {
            hdr,
            cap: capacity as u64,
        };
        #[cfg(loom)]
        for i in 0..capacity {
            // SAFETY: slot `i < capacity` is inside the region (checked above); loom's
            // cells must be constructed before use, and nobody uses them yet.
            unsafe { ring.data().add(i).write(Slot::new(0)) };
        }
        ring.hdr().ident.magic.store(MAGIC, Release);
        Ok(ring)
    }

    /// Validates a region formatted by [`RingRef::init`], maybe in another process: the
    /// magic, and the capacity against `len`, the length of *this* process's mapping (a
    /// peer that lies about the capacity gets [`LayoutError`], never an access beyond
    /// `len`). The capacity is read once, here.
    ///
    /// # Safety
    /// As for [`RingRef::init`]: `len` readable and writable bytes at `mem`, mapped for
    /// as long as this `RingRef` or anything made from it lives, and at most one
    /// producer and one consumer at a time. Any bytes are acceptable. (Under loom the
    /// region must have been formatted by `init` in the same execution.)
    pub unsafe fn attach(mem: NonNull<u8>, len: usize) -> Result<RingRef, LayoutError> {
        check_region(mem, len)?;
        let probe = RingRef {
            hdr: mem.cast(),
            cap: 0,
        };
        let id = &probe.hdr().ident;
        if id.magic.load(Acquire) != MAGIC {
            return Err(LayoutError::BadMagic);
        }
        let cap = id.capacity.load(Relaxed);
        if !valid_capacity(cap) {
            return Err(LayoutError::BadCapacity);
        }
        if region_size(cap as usize) > len {
            return Err(LayoutError::TooSmall);
        }
        Ok(RingRef {
            hdr: mem.cast(),
            cap,
        })
    }

    /// The data area's size in bytes.
    pub fn capacity(&self) -> usize {
        self.cap as usize
    }

    /// The switch offset if the writer published one (any value: the reader checks it
    /// against what it read by kernel).
    pub fn switch_k(&self) -> Option<u64> {
        match self.hdr().w.switch_k.load(Acquire) {
            UNSET => None,
            k => Some(k),
        }
    }

    /// The writer's end, resuming at the shared tail (a fresh ring: 0; a ring re-attached
    /// after `exec` or handed to a new owner: where the last owner stopped). The tail is
    /// checked against the head at every call, as any shared word.
    pub fn producer(self) -> Producer {
        let w = &self.hdr().w;
        let tail = w.tail.load(Acquire);
        let switch_k = self.switch_k();
        let closed = match (w.seal.load(Acquire), w.fin.load(Acquire)) {
            (UNSET, UNSET) => None,
            (UNSET, at) | (at, _) => Some(at),
        };
        let seen_reads = self.hdr().r.reads.load(Acquire);
        Producer {
            ring: self,
            tail,
            switch_k,
            closed,
            seen_reads,
        }
    }

    /// The reader's end, resuming at the shared head (0 on a fresh ring).
    pub fn consumer(self) -> Consumer {
        let r = &self.hdr().r;
        Consumer {
            ring: self,
            head: r.head.load(Acquire),
            reads: r.reads.load(Acquire),
        }
    }

    fn hdr(&self) -> &Header {
        // SAFETY: `hdr` points to at least HEADER_SIZE bytes, aligned, mapped while self
        // lives (init/attach's contract, checked there). Every field of Header is an
        // atomic, so a shared reference allows the concurrent stores of the peer, and
        // any bit pattern is a valid AtomicU64. (Under loom, init constructed them.)
        unsafe { self.hdr.as_ref() }
    }

    /// The first slot of the data area.
    fn data(&self) -> *mut Slot {
        self.hdr
            .as_ptr()
            .cast::<u8>()
            .wrapping_add(HEADER_SIZE)
            .cast::<Slot>()
    }

    /// `to - from` if it is a possible number of unread bytes (`from <= to`, at most the
    /// capacity).
    fn span(&self, from: u64, to: u64) -> Result<usize, Corrupt> {
        match to.checked_sub(from) {
            Some(n) if n <= self.cap => Ok(n as usize),
            _ => Err(Corrupt),
        }
    }

    /// Copies `src` into the data area from ring index `at` on, wrapping. At most the
    /// capacity is copied whatever the caller passes, so no index can leave the area.
    #[cfg(not(loom))]
    fn put(&self, at: u64, src: &[u8]) {
        let cap = self.cap as usize;
        debug_assert!(src.len() <= cap);
        let src = &src[..src.len().min(cap)];
        let pos = (at & (self.cap - 1)) as usize;
        let first = src.len().min(cap - pos);
        let data = self.data();
        // SAFETY: `pos < cap` and `pos + first <= cap`, and `src.len() - first <= cap`
        // (src.len() <= cap), so both destinations lie in the data area, which the
        // region holds (capacity validated against its length at init/attach). The
        // source is the caller's own slice. `ptr::copy` allows overlap, so even a
        // source that happens to alias the mapping is defined. The protocol gives these
        // bytes to the writer (see the module's Soundness section).
        unsafe {
            std::ptr::copy(src.as_ptr(), data.add(pos), first);
            std::ptr::copy(src.as_ptr().add(first), data, src.len() - first);
        }
    }

    /// Copies ring bytes from index `at` on into `dst`, wrapping; at most the capacity.
    #[cfg(not(loom))]
    fn get(&self, at: u64, dst: &mut [u8]) {
        let cap = self.cap as usize;
        debug_assert!(dst.len() <= cap);
        let len = dst.len().min(cap);
        let dst = &mut dst[..len];
        let pos = (at & (self.cap - 1)) as usize;
        let first = len.min(cap - pos);
        let data = self.data();
        // SAFETY: as in `put`, both sources lie in the data area; the destination is
        // the caller's own slice of `len` bytes. The bytes are read through raw
        // pointers only, never as a reference to shared memory.
        unsafe {
            std::ptr::copy(data.add(pos), dst.as_mut_ptr(), first);
            std::ptr::copy(data, dst.as_mut_ptr().add(first), len - first);
        }
    }

    /// Loom: the same copy byte by byte through loom's cells, so loom checks that the
    /// writer's stores happen after the reader's loads of the bytes it reuses.
    #[cfg(loom)]
    fn put(&self, at: u64, src: &[u8]) {
        for (i, &b) in src.iter().take(self.cap as usize).enumerate() {
            let pos = (at.wrapping_add(i as u64) & (self.cap - 1)) as usize;
            // SAFETY: `pos < cap`: the slot is in the data area, constructed by init.
            let cell = unsafe { &*self.data().add(pos) };
            // SAFETY: loom checks the access; the pointer is the cell's own.
            cell.with_mut(|p| unsafe { *p = b });
        }
    }

    #[cfg(loom)]
    fn get(&self, at: u64, dst: &mut [u8]) {
        let cap = self.cap as usize;
        for (i, d) in dst.iter_mut().take(cap).enumerate() {
            let pos = (at.wrapping_add(i as u64) & (self.cap - 1)) as usize;
            // SAFETY: `pos < cap`: the slot is in the data area, constructed by init.
            let cell = unsafe { &*self.data().add(pos) };
            // SAFETY: loom checks the access; the pointer is the cell's own.
            *d = cell.with(|p| unsafe { *p });
        }
    }
}

/// The writer's end of a ring. It keeps its own tail; the shared `tail` is only ever
/// stored.
#[derive(Debug)]
pub struct Producer {
    ring: RingRef,
    /// Bytes published (private copy).
    tail: u64,
    /// The switch offset this producer published or found.
    switch_k: Option<u64>,
    /// Sealed or shut down at this ring offset.
    closed: Option<u64>,
    /// The reader's `reads` when last looked at.
    seen_reads: u64,
}

impl Producer {
    /// The data area's size.
    pub fn capacity(&self) -> usize {
        self.ring.capacity()
    }

    /// Ring bytes published so far.
    pub fn tail(&self) -> u64 {
        self.tail
    }

    /// The switch offset published, if any.
    pub fn switch_k(&self) -> Option<u64> {
        self.switch_k
    }

    /// The offset at which the ring was sealed or shut down, if it was.
    pub fn closed_at(&self) -> Option<u64> {
        self.closed
    }

    /// Bytes written and not yet consumed (for `SIOCOUTQ`).
    pub fn unread(&self) -> Result<usize, Corrupt> {
        let head = self.ring.hdr().r.head.load(Acquire);
        self.ring.span(head, self.tail)
    }

    /// The reader's receive-buffer size, at most the capacity (for the low-water mark:
    /// `FusedFlow::reader_space(room, rcv_cap, ...)`).
    pub fn rcv_cap(&self) -> usize {
        self.ring.hdr().r.rcv_cap.load(Acquire).min(self.ring.cap) as usize
    }

    /// Bytes a write would take now: `min(capacity, rcv_cap) - unread`, 0 if the reader
    /// shrank its buffer below what is unread. (Flow control only: a closed or not yet
    /// switched producer still reports its room.)
    pub fn room(&self) -> Result<usize, Corrupt> {
        Ok(self.rcv_cap().saturating_sub(self.unread()?))
    }

    /// Publishes the switch offset `k` (Release): the reader takes exactly `k` kernel
    /// bytes before the first ring byte. Returns false, publishing nothing, if a switch
    /// offset is already set or `k` is `u64::MAX` (the "unset" value).
    pub fn set_switch(&mut self, k: u64) -> bool {
        if self.switch_k.is_some() || k == UNSET {
            return false;
        }
        self.ring.hdr().w.switch_k.store(k, Release);
        self.switch_k = Some(k);
        true
    }

    fn open(&self) -> Result<(), WriteError> {
        if self.switch_k.is_none() {
            return Err(WriteError::NotSwitched);
        }
        if self.closed.is_some() {
            return Err(WriteError::Closed);
        }
        Ok(())
    }

    /// Copies as much of `src` as there is room for and publishes it (Release); returns
    /// the bytes moved (0 when full: the caller stops, per `FusedFlow::wrote`). Then the
    /// caller wakes the reader ([`Producer::wake_reader`]), once per batch of writes.
    pub fn write(&mut self, src: &[u8]) -> Result<usize, WriteError> {
        self.write_vectored(&[IoSlice::new(src)])
    }

    /// [`Producer::write`] from several buffers, in order, published once.
    pub fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> Result<usize, WriteError> {
        self.open()?;
        let room = self.room()?;
        let mut at = self.tail;
        let mut left = room;
        for b in bufs {
            if left == 0 {
                break;
            }
            let n = b.len().min(left);
            let end = at.checked_add(n as u64).ok_or(Corrupt)?;
            self.ring.put(at, &b[..n]);
            at = end;
            left -= n;
        }
        let moved = room - left;
        if moved > 0 {
            self.tail = at;
            self.ring.hdr().w.tail.store(at, Release);
        }
        Ok(moved)
    }

    /// Seals the ring (unfuse): stores `seal = tail` (Release) and returns it, m. The
    /// producer writes nothing more; later bytes go by kernel. The caller then wakes the
    /// reader, which drains to m and then reads the kernel.
    pub fn seal(&mut self) -> Result<u64, WriteError> {
        self.close(|w| &w.seal)
    }

    /// Shuts the ring down (the writer's FIN): stores `fin = tail` (Release) and returns
    /// it. The reader sees end of file after draining. The caller then wakes the reader.
    pub fn shutdown(&mut self) -> Result<u64, WriteError> {
        self.close(|w| &w.fin)
    }

    fn close(&mut self, word: impl Fn(&WriterLine) -> &AtomicU64) -> Result<u64, WriteError> {
        self.open()?;
        word(&self.ring.hdr().w).store(self.tail, Release);
        self.closed = Some(self.tail);
        Ok(self.tail)
    }

    /// The reader's count of completed reads, as it published it.
    pub fn reader_reads(&self) -> u64 {
        self.ring.hdr().r.reads.load(Acquire)
    }

    /// Whether the reader completed a read since the last call (then the writer calls
    /// `FusedFlow::reader_read`, which lifts the unread-writes limit).
    pub fn take_reader_read(&mut self) -> bool {
        let r = self.reader_reads();
        let changed = r != self.seen_reads;
        self.seen_reads = r;
        changed
    }

    /// The word a writer blocked on flow control arms ([`wake::arm`], [`wake::wait`]).
    pub fn waiter(&self) -> &AtomicU64 {
        &self.ring.hdr().w.writer_waiter
    }

    /// After publishing (a write, a seal, a shutdown): wakes the reader if it is armed
    /// ([`wake::notify`]). Returns whether a wake-up was sent.
    pub fn wake_reader<W: Wake + ?Sized>(&self, w: &W) -> bool {
        wake::notify(&self.ring.hdr().r.reader_waiter, w)
    }
}

// SAFETY: a Producer owns its private indices and points into a region that init/
// attach's contract keeps mapped; it uses it as a writer in another process would, so
// moving it to another thread is sound.
unsafe impl Send for Producer {}

/// The reader's end of a ring. It keeps its own head; the shared `head` is only ever
/// stored.
#[derive(Debug)]
pub struct Consumer {
    ring: RingRef,
    /// Bytes consumed (private copy).
    head: u64,
    /// Completed reads (private copy).
    reads: u64,
}

impl Consumer {
    /// The data area's size.
    pub fn capacity(&self) -> usize {
        self.ring.capacity()
    }

    /// Ring bytes consumed so far.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Completed reads that took bytes.
    pub fn reads(&self) -> u64 {
        self.reads
    }

    /// Loads and checks what the writer published. The seal and shutdown words are
    /// loaded before the tail: a writer stores them after its last tail, so a reader
    /// that sees one must then find the tail equal to it.
    fn window(&self) -> Result<Window, Corrupt> {
        let w = &self.ring.hdr().w;
        let seal = w.seal.load(Acquire);
        let fin = w.fin.load(Acquire);
        let tail = w.tail.load(Acquire);
        let avail = self.ring.span(self.head, tail)?;
        let end = match (seal, fin) {
            (UNSET, UNSET) => None,
            (m, UNSET) => Some(End::Sealed(m)),
            (UNSET, f) => Some(End::Fin(f)),
            _ => return Err(Corrupt),
        };
        if let Some(End::Sealed(at) | End::Fin(at)) = end {
            if at != tail {
                return Err(Corrupt);
            }
        }
        // The switch is published before the first ring byte.
        if avail > 0 && w.switch_k.load(Acquire) == UNSET {
            return Err(Corrupt);
        }
        Ok(Window { avail, end })
    }

    /// Bytes that can be read now (for `FIONREAD`).
    pub fn available(&self) -> Result<usize, Corrupt> {
        Ok(self.window()?.avail)
    }

    /// Data, nothing yet, drained to a seal, or end of file.
    pub fn status(&self) -> Result<ReadState, Corrupt> {
        let win = self.window()?;
        Ok(match (win.avail, win.end) {
            (0, None) => ReadState::Empty,
            (0, Some(End::Sealed(m))) => ReadState::Sealed(m),
            (0, Some(End::Fin(_))) => ReadState::Eof,
            (n, _) => ReadState::Data(n),
        })
    }

    /// The switch offset k, once the writer published it: read exactly k kernel bytes,
    /// then the ring.
    pub fn switch_k(&self) -> Option<u64> {
        self.ring.switch_k()
    }

    /// The seal offset m, once the writer sealed: read the ring to m, then the kernel.
    pub fn sealed_at(&self) -> Result<Option<u64>, Corrupt> {
        Ok(match self.window()?.end {
            Some(End::Sealed(m)) => Some(m),
            _ => None,
        })
    }

    /// Whether the writer shut down (end of file once [`Consumer::status`] says
    /// [`ReadState::Eof`], after the bytes before it).
    pub fn is_shutdown(&self) -> Result<bool, Corrupt> {
        Ok(matches!(self.window()?.end, Some(End::Fin(_))))
    }

    /// Copies up to `dst.len()` bytes out and releases them to the writer (Release), and
    /// counts a completed read if any byte moved. Returns 0 when there is nothing (see
    /// [`Consumer::status`] for why). Then the caller wakes the writer
    /// ([`Consumer::wake_writer`]).
    pub fn read(&mut self, dst: &mut [u8]) -> Result<usize, Corrupt> {
        self.read_vectored(&mut [IoSliceMut::new(dst)])
    }

    /// [`Consumer::read`] into several buffers, in order: one read.
    pub fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> Result<usize, Corrupt> {
        let avail = self.window()?.avail;
        let mut at = self.head;
        let mut left = avail;
        for b in bufs.iter_mut() {
            if left == 0 {
                break;
            }
            let n = b.len().min(left);
            self.ring.get(at, &mut b[..n]);
            // `at + n <= tail`: no overflow.
            at += n as u64;
            left -= n;
        }
        if left < avail {
            self.head = at;
            let r = &self.ring.hdr().r;
            r.head.store(at, Release);
            self.reads = self.reads.wrapping_add(1);
            r.reads.store(self.reads, Release);
        }
        Ok(avail - left)
    }

    /// Copies up to `dst.len()` bytes without consuming them (`MSG_PEEK`).
    pub fn peek(&self, dst: &mut [u8]) -> Result<usize, Corrupt> {
        let n = self.window()?.avail.min(dst.len());
        self.ring.get(self.head, &mut dst[..n]);
        Ok(n)
    }

    /// Publishes the reader's receive-buffer size (`SO_RCVBUF`), clamped to
    /// `1..=capacity`; returns the value stored. A larger one lets a blocked writer go
    /// on: the caller then wakes it.
    pub fn set_rcv_cap(&mut self, bytes: usize) -> usize {
        let v = bytes.clamp(1, self.ring.capacity());
        self.ring.hdr().r.rcv_cap.store(v as u64, Release);
        v
    }

    /// The word a reader waiting for data arms ([`wake::arm`], [`wake::wait`]).
    pub fn waiter(&self) -> &AtomicU64 {
        &self.ring.hdr().r.reader_waiter
    }

    /// After freeing room (a read, a larger `rcv_cap`): wakes the writer if it is armed.
    /// Returns whether a wake-up was sent.
    pub fn wake_writer<W: Wake + ?Sized>(&self, w: &W) -> bool {
        wake::notify(&self.ring.hdr().w.writer_waiter, w)
    }
}

// SAFETY: as for Producer: private indices and a pointer into a region kept mapped by
// init/attach's contract, used as a reader in another process would.
unsafe impl Send for Consumer {}

#[cfg(all(test, not(loom)))]
mod tests;
