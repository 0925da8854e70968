//! Out-of-order reassembly for the receive side (RFC 9293 §3.10.7.4: segments beyond
//! `RCV.NXT` are "held for later processing"), bounded in bytes and pieces.
//!
//! The Tcb keeps a 64-bit offset of the receive stream, so the assembler works on `u64`
//! offsets and never has to deal with sequence-number wraparound. It stores the data it is
//! given as *pieces*: maximal runs of contiguous stored bytes, kept in a `BTreeMap` keyed by
//! their start offset. Overlapping or adjacent data merges into one piece, so the number of
//! pieces is the number of disjoint ranges (holes + 1 at most) whatever the segment pattern.
//!
//! Invariants:
//! * pieces are non-empty, disjoint and non-adjacent (a gap of at least one byte separates
//!   two pieces); `bytes()` is the sum of their lengths;
//! * the bytes of an offset never change once stored ("first copy wins", as the data of a
//!   retransmission must equal the original anyway);
//! * an insertion either stores all of its new bytes or nothing: it is refused (`Full`) when
//!   the stored bytes would exceed `max_bytes` or the pieces `max_segments`;
//! * no range ends beyond `u64::MAX` (data that would is truncated).
//!
//! Cost: an insertion is O(log n) plus the bytes copied. Pieces are `VecDeque<u8>`s so that
//! they can grow at both ends; when an insertion joins several pieces, the largest one (or a
//! new buffer, if the new data is larger still) absorbs the others, so every stored byte is
//! copied O(log(max_bytes)) times in total (small-into-large merging), even for
//! adversarial segment orders. The common cases, appending to or prepending to a piece,
//! copy only the new bytes. No allocation happens except to hold data.

use std::collections::{BTreeMap, VecDeque};

/// Result of [`Assembler::insert`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertOutcome {
    /// The data was stored; `new_bytes` of it were not held before.
    Stored {
        /// Bytes newly held (the rest was already present).
        new_bytes: usize,
    },
    /// Every byte was already held (or the data was empty); nothing changed.
    Duplicate,
    /// Storing the new bytes would exceed a bound; nothing was stored.
    Full,
}

/// What an unallocated [`OutOfOrder`] reads as.
static EMPTY: Assembler = Assembler {
    pieces: BTreeMap::new(),
    bytes: 0,
    max_bytes: 0,
    max_segments: 0,
};

/// A connection's out-of-order receive state, allocated on first use: the [`Assembler`]
/// holding data above `RCV.NXT`, the stream offset of a FIN that arrived out of order,
/// and the offsets of the most recently received out-of-order segments (the SACK block
/// order of RFC 2018 §4). Until something is held it reads (through `Deref`) as an empty
/// assembler; [`release_if_idle`](Self::release_if_idle) drops it once it holds nothing
/// that can matter again. The bounds are the caller's (`limits` on the allocating
/// calls), so that an unallocated one carries none: a connection that never received a
/// segment out of order (every fused one) carries a null pointer.
#[derive(Debug, Clone, Default)]
pub struct OutOfOrder(Option<Box<Held>>);

/// What [`OutOfOrder`] holds once allocated.
#[derive(Debug, Clone)]
struct Held {
    asm: Assembler,
    fin: Option<u64>,
    recent: [Option<u64>; 4],
}

impl OutOfOrder {
    /// The state, allocated now (with bounds `limits`: bytes, pieces) if it was not.
    fn held(&mut self, limits: (usize, usize)) -> &mut Held {
        self.0.get_or_insert_with(|| {
            Box::new(Held {
                asm: Assembler::new(limits.0, limits.1),
                fin: None,
                recent: [None; 4],
            })
        })
    }

    /// [`Assembler::insert`], allocating with bounds `limits` if needed.
    pub fn insert(&mut self, offset: u64, data: &[u8], limits: (usize, usize)) -> InsertOutcome {
        self.held(limits).asm.insert(offset, data)
    }

    /// [`Assembler::drain_into`]; nothing while unallocated.
    pub fn drain_into(&mut self, next: u64, out: &mut VecDeque<u8>) -> usize {
        self.0
            .as_deref_mut()
            .map_or(0, |h| h.asm.drain_into(next, out))
    }

    /// [`Assembler::clear`] (the FIN offset and the recent offsets stay).
    pub fn clear(&mut self) {
        if let Some(h) = self.0.as_deref_mut() {
            h.asm.clear();
        }
    }

    /// [`Assembler::set_limits`]; an unallocated one takes the caller's bounds when it is
    /// allocated.
    pub fn set_limits(&mut self, max_bytes: usize, max_segments: usize) {
        if let Some(h) = self.0.as_deref_mut() {
            h.asm.set_limits(max_bytes, max_segments);
        }
    }

    /// The stream offset of a FIN that arrived out of order.
    pub fn fin(&self) -> Option<u64> {
        self.0.as_deref().and_then(|h| h.fin)
    }

    /// Sets the out-of-order FIN's offset (allocating with `limits` if needed).
    pub fn set_fin(&mut self, fin: Option<u64>, limits: (usize, usize)) {
        if fin.is_some() || self.0.is_some() {
            self.held(limits).fin = fin;
        }
    }

    /// The most recently received out-of-order offsets, most recent first.
    pub fn recent(&self) -> [Option<u64>; 4] {
        self.0.as_deref().map_or([None; 4], |h| h.recent)
    }

    /// Replaces the recent offsets (allocating with `limits` if needed).
    pub fn set_recent(&mut self, recent: [Option<u64>; 4], limits: (usize, usize)) {
        if recent.iter().any(Option::is_some) || self.0.is_some() {
            self.held(limits).recent = recent;
        }
    }

    /// Drops the state if nothing is held, no FIN is waiting and no recent offset lies
    /// above `next` (the next in-order offset): data is held only above `next`, which
    /// never decreases, so an offset at or below it never finds a range again and is as
    /// good as none. Returns whether nothing is allocated now.
    pub fn release_if_idle(&mut self, next: u64) -> bool {
        let idle = self.0.as_deref().is_some_and(|h| {
            h.asm.is_empty() && h.fin.is_none() && h.recent.iter().flatten().all(|&o| o <= next)
        });
        if idle {
            self.0 = None;
        }
        self.0.is_none()
    }

    /// Whether the state is allocated.
    pub fn is_allocated(&self) -> bool {
        self.0.is_some()
    }
}

impl core::ops::Deref for OutOfOrder {
    type Target = Assembler;

    fn deref(&self) -> &Assembler {
        self.0.as_deref().map_or(&EMPTY, |h| &h.asm)
    }
}

/// Bounded out-of-order segment store keyed by 64-bit stream offsets.
#[derive(Debug, Clone)]
pub struct Assembler {
    /// Start offset -> contiguous bytes from there.
    pieces: BTreeMap<u64, VecDeque<u8>>,
    bytes: usize,
    max_bytes: usize,
    max_segments: usize,
}

impl Assembler {
    /// An empty assembler holding at most `max_bytes` bytes in at most `max_segments`
    /// disjoint ranges.
    pub fn new(max_bytes: usize, max_segments: usize) -> Self {
        Assembler {
            pieces: BTreeMap::new(),
            bytes: 0,
            max_bytes,
            max_segments,
        }
    }

    /// Changes the bounds (e.g. after the receive buffer was resized). Data already held is
    /// kept even if it exceeds the new bounds (dropping it would renege on data that may
    /// have been SACKed); further insertions are refused until it fits again.
    pub fn set_limits(&mut self, max_bytes: usize, max_segments: usize) {
        self.max_bytes = max_bytes;
        self.max_segments = max_segments;
    }

    /// The byte bound.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// The range (piece) bound.
    pub fn max_segments(&self) -> usize {
        self.max_segments
    }

    /// Stores `data` at stream offset `offset`. Bytes already held are kept (first copy
    /// wins) and only new bytes are added; adjacent and overlapping ranges merge. Returns
    /// `Full` (storing nothing) if the new bytes would exceed `max_bytes` or the resulting
    /// number of ranges `max_segments`; `Duplicate` if nothing is new (including empty
    /// data). Data extending beyond offset `u64::MAX` is truncated there.
    pub fn insert(&mut self, offset: u64, data: &[u8]) -> InsertOutcome {
        let room = u64::MAX - offset;
        let len = (data.len() as u64).min(room) as usize;
        let data = &data[..len];
        if data.is_empty() {
            return InsertOutcome::Duplicate;
        }
        let s = offset;
        let e = offset + len as u64;

        // The pieces this data touches (overlapping or adjacent): start <= e, end >= s.
        // Duplicates lie inside one piece, so this loop is short unless pieces merge.
        let mut covered = 0u64;
        let mut touched = 0usize;
        let mut lo = s;
        let mut hi = e;
        let mut largest: Option<(u64, usize)> = None;
        for (&k, v) in self.pieces.range(..=e).rev() {
            let pe = k + v.len() as u64;
            if pe < s {
                break;
            }
            touched += 1;
            covered += pe.min(e).saturating_sub(k.max(s));
            lo = lo.min(k);
            hi = hi.max(pe);
            if largest.is_none_or(|(_, l)| v.len() > l) {
                largest = Some((k, v.len()));
            }
        }
        let new_bytes = (len as u64 - covered) as usize;
        if new_bytes == 0 {
            return InsertOutcome::Duplicate;
        }
        let pieces_after = self.pieces.len() - touched + 1;
        if self.bytes.saturating_add(new_bytes) > self.max_bytes || pieces_after > self.max_segments
        {
            return InsertOutcome::Full;
        }

        let merged = match largest {
            Some((k, l)) if l >= len => self.grow_piece(k, s, data),
            _ => self.fresh_piece(lo, hi, s, data),
        };
        self.pieces.insert(lo, merged);
        self.bytes += new_bytes;
        InsertOutcome::Stored { new_bytes }
    }

    /// Builds the merged piece for `[lo, hi)` in a new buffer, in order, taking bytes from
    /// the touched pieces (removed from the map) and the gaps from `data` (at `s`).
    fn fresh_piece(&mut self, lo: u64, hi: u64, s: u64, data: &[u8]) -> VecDeque<u8> {
        let mut buf = VecDeque::with_capacity((hi - lo) as usize);
        let mut cur = lo;
        while cur < hi {
            let Some((&k, _)) = self.pieces.range(cur..hi).next() else {
                break;
            };
            let Some(mut piece) = self.pieces.remove(&k) else {
                break;
            };
            // The gap [cur, k) lies inside the new data.
            if k > cur {
                buf.extend(&data[(cur - s) as usize..(k - s) as usize]);
            }
            cur = k + piece.len() as u64;
            buf.append(&mut piece);
        }
        if hi > cur {
            buf.extend(&data[(cur - s) as usize..(hi - s) as usize]);
        }
        buf
    }

    /// Merges the touched pieces and the new data (at `s`) into the piece starting at `base`
    /// (the largest touched one), growing it at both ends.
    fn grow_piece(&mut self, base: u64, s: u64, data: &[u8]) -> VecDeque<u8> {
        let e = s + data.len() as u64;
        let Some(mut buf) = self.pieces.remove(&base) else {
            return VecDeque::new(); // unreachable: `base` was just found in the map
        };
        // Downwards: pieces below `base` that touch the data, highest first.
        let mut front = base;
        loop {
            let next = self
                .pieces
                .range(..front)
                .next_back()
                .map(|(&k, v)| (k, k + v.len() as u64));
            let Some((k, pe)) = next.filter(|&(_, pe)| pe >= s) else {
                break;
            };
            let Some(piece) = self.pieces.remove(&k) else {
                break;
            };
            // Gap [pe, front) from the data, then the piece, both prepended.
            let gap = &data[(pe - s) as usize..(front - s) as usize];
            buf.reserve(gap.len() + piece.len());
            for &b in gap.iter().rev() {
                buf.push_front(b);
            }
            for &b in piece.iter().rev() {
                buf.push_front(b);
            }
            front = k;
        }
        if front > s {
            let gap = &data[..(front - s) as usize];
            buf.reserve(gap.len());
            for &b in gap.iter().rev() {
                buf.push_front(b);
            }
            front = s;
        }
        // Upwards: pieces above `base` that touch the data, lowest first. `buf` now starts
        // at `front`.
        let mut end = front + buf.len() as u64;
        while end <= e {
            let Some(k) = self.pieces.range(end..=e).next().map(|(&k, _)| k) else {
                break;
            };
            let Some(mut piece) = self.pieces.remove(&k) else {
                break;
            };
            // Gap [end, k) from the data, then the piece.
            buf.extend(&data[(end - s) as usize..(k - s) as usize]);
            end = k + piece.len() as u64;
            buf.append(&mut piece);
        }
        if e > end {
            buf.extend(&data[(end - s) as usize..]);
        }
        buf
    }

    /// Removes everything below `next`; if a stored range starts at or below `next` and
    /// extends past it, appends its bytes from `next` onwards to `out` and removes them.
    /// Returns the number of bytes moved.
    pub fn drain_into(&mut self, next: u64, out: &mut VecDeque<u8>) -> usize {
        let mut moved = 0;
        while let Some(entry) = self.pieces.first_entry() {
            if *entry.key() > next {
                break;
            }
            let (k, mut piece) = entry.remove_entry();
            self.bytes -= piece.len();
            let end = k + piece.len() as u64;
            if end > next {
                piece.drain(..(next - k) as usize);
                moved = piece.len();
                out.append(&mut piece);
                // Pieces are non-adjacent: the next one starts beyond `end > next`.
                break;
            }
        }
        moved
    }

    /// The stored ranges `[start, end)`, ascending, merged (non-adjacent).
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.pieces.iter().map(|(&k, v)| (k, k + v.len() as u64))
    }

    /// The stored range containing `offset`, if any.
    pub fn range_containing(&self, offset: u64) -> Option<(u64, u64)> {
        let (&k, v) = self.pieces.range(..=offset).next_back()?;
        let end = k + v.len() as u64;
        (offset < end).then_some((k, end))
    }

    /// The lowest run of `[start, end)` that is already held, if any: the first
    /// "duplicate sub-segment" of data covering `[start, end)` (RFC 2883 §4.2). Ranges
    /// are separated by gaps, so the run lies in one range.
    pub fn first_overlap(&self, start: u64, end: u64) -> Option<(u64, u64)> {
        if start >= end {
            return None;
        }
        // The range holding `start`, else the first range starting inside the span.
        let (k, pe) = match self.range_containing(start) {
            Some(r) => r,
            None => self
                .pieces
                .range(start..end)
                .next()
                .map(|(&k, v)| (k, k + v.len() as u64))?,
        };
        Some((k.max(start), pe.min(end)))
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Nothing held.
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// Drops everything.
    pub fn clear(&mut self) {
        self.pieces.clear();
        self.bytes = 0;
    }

    /// Start of the lowest stored range.
    pub fn first_offset(&self) -> Option<u64> {
        self.pieces.keys().next().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check_invariants(a: &Assembler) {
        let r: Vec<_> = a.ranges().collect();
        let mut sum = 0;
        for (i, &(s, e)) in r.iter().enumerate() {
            assert!(e > s, "empty piece {r:?}");
            sum += (e - s) as usize;
            if i > 0 {
                assert!(s > r[i - 1].1, "overlapping or adjacent {r:?}");
            }
        }
        assert_eq!(sum, a.bytes());
        assert_eq!(a.is_empty(), r.is_empty());
        assert_eq!(a.first_offset(), r.first().map(|x| x.0));
    }

    fn drain_all(a: &mut Assembler, next: u64) -> Vec<u8> {
        let mut out = VecDeque::new();
        a.drain_into(next, &mut out);
        out.into_iter().collect()
    }

    #[test]
    fn insert_merge_and_drain() {
        let mut a = Assembler::new(1 << 20, 16);
        assert!(a.is_empty());
        assert_eq!(a.insert(10, b"klm"), InsertOutcome::Stored { new_bytes: 3 });
        assert_eq!(a.insert(20, b"uvw"), InsertOutcome::Stored { new_bytes: 3 });
        assert_eq!(a.ranges().collect::<Vec<_>>(), vec![(10, 13), (20, 23)]);
        assert_eq!(a.insert(10, b"kl"), InsertOutcome::Duplicate);
        assert_eq!(a.insert(11, b""), InsertOutcome::Duplicate);
        // Adjacent: merges.
        assert_eq!(a.insert(13, b"nop"), InsertOutcome::Stored { new_bytes: 3 });
        assert_eq!(a.ranges().collect::<Vec<_>>(), vec![(10, 16), (20, 23)]);
        // Bridging with overlap on both sides; first copy wins.
        assert_eq!(
            a.insert(14, b"XXqrstXX"),
            InsertOutcome::Stored { new_bytes: 4 }
        );
        assert_eq!(a.ranges().collect::<Vec<_>>(), vec![(10, 23)]);
        assert_eq!(a.bytes(), 13);
        assert_eq!(a.range_containing(15), Some((10, 23)));
        assert_eq!(a.range_containing(23), None);
        assert_eq!(a.range_containing(9), None);
        // Nothing to deliver before offset 10.
        assert_eq!(drain_all(&mut a, 5), b"");
        assert_eq!(a.bytes(), 13);
        assert_eq!(drain_all(&mut a, 12), b"mnopqrstuvw");
        assert!(a.is_empty());
        assert_eq!(a.bytes(), 0);
        check_invariants(&a);
    }

    #[test]
    fn first_overlap_is_the_lowest_held_run() {
        let mut a = Assembler::new(1000, 16);
        assert_eq!(a.first_overlap(0, 100), None);
        a.insert(10, &[1; 10]); // 10..20
        a.insert(30, &[1; 10]); // 30..40
        assert_eq!(a.first_overlap(0, 10), None, "adjacent is not overlapping");
        assert_eq!(a.first_overlap(20, 30), None, "a gap");
        assert_eq!(a.first_overlap(5, 15), Some((10, 15)));
        assert_eq!(a.first_overlap(12, 18), Some((12, 18)));
        assert_eq!(
            a.first_overlap(15, 35),
            Some((15, 20)),
            "the first of two runs"
        );
        assert_eq!(a.first_overlap(20, 45), Some((30, 40)));
        assert_eq!(a.first_overlap(0, 100), Some((10, 20)));
        assert_eq!(a.first_overlap(39, 40), Some((39, 40)));
        assert_eq!(a.first_overlap(40, 100), None);
        assert_eq!(a.first_overlap(15, 15), None, "empty");
        assert_eq!(a.first_overlap(u64::MAX - 1, u64::MAX), None);
    }

    #[test]
    fn drain_drops_stale_data() {
        let mut a = Assembler::new(1000, 16);
        a.insert(0, b"abc");
        a.insert(5, b"fg");
        a.insert(10, b"kl");
        // Everything below 6 goes; the piece containing 6 delivers from 6.
        assert_eq!(drain_all(&mut a, 6), b"g");
        assert_eq!(a.ranges().collect::<Vec<_>>(), vec![(10, 12)]);
        // A piece ending exactly at `next` is dropped, nothing is delivered.
        a.insert(20, b"uv");
        assert_eq!(drain_all(&mut a, 12), b"");
        assert_eq!(a.ranges().collect::<Vec<_>>(), vec![(20, 22)]);
        assert_eq!(drain_all(&mut a, 100), b"");
        assert!(a.is_empty());
        // Appends to what is already in `out`.
        a.insert(3, b"de");
        let mut out: VecDeque<u8> = b"abc".iter().copied().collect();
        assert_eq!(a.drain_into(3, &mut out), 2);
        assert_eq!(out, b"abcde".iter().copied().collect::<VecDeque<_>>());
    }

    #[test]
    fn bounds() {
        let mut a = Assembler::new(10, 2);
        assert_eq!(a.insert(0, b"0123456789A"), InsertOutcome::Full);
        assert!(a.is_empty());
        assert_eq!(
            a.insert(0, b"01234"),
            InsertOutcome::Stored { new_bytes: 5 }
        );
        assert_eq!(a.insert(10, b"ab"), InsertOutcome::Stored { new_bytes: 2 });
        // A third range is refused...
        assert_eq!(a.insert(20, b"x"), InsertOutcome::Full);
        // ...but data joining existing ranges is fine.
        assert_eq!(
            a.insert(5, b"56789"),
            InsertOutcome::Full,
            "byte bound: 12 > 10"
        );
        assert_eq!(a.insert(5, b"567"), InsertOutcome::Stored { new_bytes: 3 });
        assert_eq!(a.ranges().collect::<Vec<_>>(), vec![(0, 8), (10, 12)]);
        // Overlapping data counts only its new bytes: 8..10 bridges, 2 new bytes = 12 > 10.
        assert_eq!(a.insert(6, b"XX89ab"), InsertOutcome::Full);
        assert_eq!(a.bytes(), 10);
        a.set_limits(12, 1);
        assert_eq!(a.max_bytes(), 12);
        assert_eq!(a.max_segments(), 1);
        assert_eq!(
            a.insert(6, b"XX89ab"),
            InsertOutcome::Stored { new_bytes: 2 }
        );
        assert_eq!(a.ranges().collect::<Vec<_>>(), vec![(0, 12)]);
        assert_eq!(
            drain_all(&mut a, 0),
            b"01234567"
                .iter()
                .chain(b"89ab")
                .copied()
                .collect::<Vec<_>>()
        );
        // Shrinking below what is held keeps the data and refuses more.
        a.insert(100, b"0123456789");
        a.set_limits(4, 4);
        assert_eq!(a.bytes(), 10);
        assert_eq!(a.insert(200, b"z"), InsertOutcome::Full);
        assert_eq!(a.insert(100, b"01"), InsertOutcome::Duplicate);
        // Zero limits store nothing.
        let mut z = Assembler::new(0, 0);
        assert_eq!(z.insert(0, b"a"), InsertOutcome::Full);
        let mut z = Assembler::new(100, 0);
        assert_eq!(z.insert(0, b"a"), InsertOutcome::Full);
        a.clear();
        assert!(a.is_empty());
        assert_eq!(a.bytes(), 0);
    }

    #[test]
    fn offsets_near_u64_max() {
        let mut a = Assembler::new(100, 4);
        assert_eq!(
            a.insert(u64::MAX - 3, b"abcdef"),
            InsertOutcome::Stored { new_bytes: 3 }
        );
        assert_eq!(
            a.ranges().collect::<Vec<_>>(),
            vec![(u64::MAX - 3, u64::MAX)]
        );
        assert_eq!(a.insert(u64::MAX, b"z"), InsertOutcome::Duplicate);
        assert_eq!(
            a.insert(u64::MAX - 5, b"01"),
            InsertOutcome::Stored { new_bytes: 2 }
        );
        assert_eq!(
            a.ranges().collect::<Vec<_>>(),
            vec![(u64::MAX - 5, u64::MAX)]
        );
        assert_eq!(drain_all(&mut a, u64::MAX - 5), b"01abc");
        assert_eq!(drain_all(&mut a, u64::MAX), b"");
    }

    #[test]
    fn merge_directions_keep_content() {
        // Descending arrival (prepending), ascending (appending), and a big segment that
        // swallows many small pieces.
        let stream: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut a = Assembler::new(1 << 20, 10_000);
        for i in (1..100).rev() {
            let o = i * 100;
            a.insert(o as u64, &stream[o..o + 100]);
        }
        assert_eq!(a.ranges().collect::<Vec<_>>(), vec![(100, 10_000)]);
        let mut b = Assembler::new(1 << 20, 10_000);
        for i in (0..10_000).step_by(20) {
            b.insert(i as u64, &stream[i..i + 10]);
        }
        assert_eq!(b.ranges().count(), 500);
        // [5, 9995) holds 9990 bytes, 5 + 499 * 10 of them already stored.
        assert_eq!(
            b.insert(5, &stream[5..9_995]),
            InsertOutcome::Stored { new_bytes: 4_995 }
        );
        check_invariants(&b);
        assert_eq!(b.ranges().collect::<Vec<_>>(), vec![(0, 9_995)]);
        assert_eq!(drain_all(&mut b, 0), stream[..9_995].to_vec());
        a.insert(0, &stream[..100]);
        assert_eq!(drain_all(&mut a, 0), stream);
    }

    #[test]
    fn adversarial_tiny_segments_are_bounded() {
        let mut a = Assembler::new(64 * 1024, 64);
        let mut full = 0;
        for i in 0..100_000u64 {
            // One byte every other offset: each would be its own range.
            match a.insert(i * 2, b"x") {
                InsertOutcome::Full => full += 1,
                InsertOutcome::Stored { .. } => {}
                InsertOutcome::Duplicate => panic!("no duplicates here"),
            }
        }
        assert_eq!(a.ranges().count(), 64);
        assert_eq!(full, 100_000 - 64);
        check_invariants(&a);
        // Filling the gaps one byte at a time merges ranges and is accepted.
        for i in 0..63u64 {
            assert_eq!(
                a.insert(i * 2 + 1, b"y"),
                InsertOutcome::Stored { new_bytes: 1 }
            );
        }
        assert_eq!(a.ranges().collect::<Vec<_>>(), vec![(0, 127)]);
        // Many overlapping retransmissions of one big range cost nothing.
        for _ in 0..10_000 {
            assert_eq!(a.insert(0, &[0u8; 127]), InsertOutcome::Duplicate);
        }
    }

    #[test]
    fn descending_large_window_is_not_quadratic() {
        // 16 MiB arriving in reverse 1460-byte segments: with small-into-large merging
        // each insertion only prepends its own bytes.
        let seg = [7u8; 1460];
        let n = 8_000u64;
        let mut a = Assembler::new(64 << 20, 16);
        for i in (1..=n).rev() {
            assert!(matches!(
                a.insert(i * 1460, &seg),
                InsertOutcome::Stored { new_bytes: 1460 }
            ));
        }
        assert_eq!(a.ranges().count(), 1);
        assert_eq!(a.bytes(), (n * 1460) as usize);
    }

    /// Reference model: one Option<u8> per offset, first write wins.
    fn model_insert(m: &mut [Option<u8>], off: usize, data: &[u8]) -> usize {
        let mut new = 0;
        for (i, &b) in data.iter().enumerate() {
            if let Some(slot) = m.get_mut(off + i) {
                if slot.is_none() {
                    *slot = Some(b);
                    new += 1;
                }
            }
        }
        new
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn reassembles_any_order(
            len in 1usize..3000,
            cuts in proptest::collection::vec((0usize..3000, 1usize..400), 1..60),
            seed in any::<u64>(),
        ) {
            // The stream, cut into random (overlapping) segments that cover it, shuffled
            // and partly duplicated; delivered in order, the output equals the stream.
            let stream: Vec<u8> = (0..len).map(|i| (i as u64 ^ seed).wrapping_mul(31) as u8).collect();
            let mut segs: Vec<(usize, usize)> = cuts
                .iter()
                .map(|&(o, l)| (o % len, l.min(len - o % len)))
                .collect();
            // Guarantee coverage.
            let mut o = 0;
            while o < len {
                let l = ((seed as usize >> (o % 13)) % 300 + 1).min(len - o);
                segs.push((o, l));
                o += l;
            }
            // Deterministic shuffle.
            let mut x = seed | 1;
            for i in (1..segs.len()).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                segs.swap(i, (x % (i as u64 + 1)) as usize);
            }
            let mut a = Assembler::new(usize::MAX, usize::MAX);
            let mut out = VecDeque::new();
            let mut next = 0u64;
            for &(o, l) in &segs {
                let r = a.insert(o as u64, &stream[o..o + l]);
                prop_assert_ne!(r, InsertOutcome::Full);
                if (x ^ o as u64) & 3 == 0 {
                    next += a.drain_into(next, &mut out) as u64;
                }
                check_invariants(&a);
            }
            next += a.drain_into(next, &mut out) as u64;
            prop_assert_eq!(next as usize, len);
            prop_assert!(a.is_empty());
            prop_assert_eq!(out.into_iter().collect::<Vec<_>>(), stream);
        }

        #[test]
        fn matches_first_write_wins_model(
            ops in proptest::collection::vec(
                (0usize..500, proptest::collection::vec(any::<u8>(), 0..60), 0u8..8),
                1..80,
            ),
            max_bytes in prop_oneof![Just(usize::MAX), 0usize..400],
            max_segs in prop_oneof![Just(usize::MAX), 0usize..8],
        ) {
            let mut a = Assembler::new(max_bytes, max_segs);
            let mut m: Vec<Option<u8>> = vec![None; 600];
            let mut next = 0usize;
            for (off, data, op) in ops {
                if op == 0 {
                    // Deliver from a point at or after `next`.
                    let at = (next + off % 50).min(600);
                    let mut out = VecDeque::new();
                    let moved = a.drain_into(at as u64, &mut out);
                    let mut want = Vec::new();
                    let mut k = at;
                    while k < 600 && m[k].is_some() {
                        want.push(m[k].unwrap_or(0));
                        k += 1;
                    }
                    prop_assert_eq!(moved, want.len());
                    prop_assert_eq!(out.into_iter().collect::<Vec<_>>(), want);
                    for slot in m.iter_mut().take(k) {
                        *slot = None;
                    }
                    next = k;
                } else {
                    let mut trial = m.clone();
                    let new = model_insert(&mut trial, off, &data);
                    let r = a.insert(off as u64, &data);
                    if new == 0 {
                        prop_assert_eq!(r, InsertOutcome::Duplicate);
                    } else {
                        // Would the model exceed a bound?
                        let held = trial.iter().filter(|s| s.is_some()).count();
                        let runs = trial
                            .iter()
                            .enumerate()
                            .filter(|&(i, s)| s.is_some() && (i == 0 || trial[i - 1].is_none()))
                            .count();
                        if held > max_bytes || runs > max_segs {
                            prop_assert_eq!(r, InsertOutcome::Full);
                        } else {
                            prop_assert_eq!(r, InsertOutcome::Stored { new_bytes: new });
                            m = trial;
                        }
                    }
                }
                check_invariants(&a);
                // Same content, same ranges.
                let mut runs = Vec::new();
                let mut k = 0;
                while k < 600 {
                    if m[k].is_some() {
                        let st = k;
                        while k < 600 && m[k].is_some() {
                            k += 1;
                        }
                        runs.push((st as u64, k as u64));
                    } else {
                        k += 1;
                    }
                }
                prop_assert_eq!(a.ranges().collect::<Vec<_>>(), runs.clone());
                prop_assert_eq!(a.bytes(), m.iter().filter(|s| s.is_some()).count());
                for probe in [0usize, 1, 17, 99, 250, 499, 599] {
                    let want = runs.iter().copied().find(|&(s, e)| s <= probe as u64 && (probe as u64) < e);
                    prop_assert_eq!(a.range_containing(probe as u64), want);
                    for len in [1u64, 7, 60, 300] {
                        let (s, e) = (probe as u64, probe as u64 + len);
                        let want = runs
                            .iter()
                            .map(|&(l, r)| (l.max(s), r.min(e)))
                            .find(|&(l, r)| l < r);
                        prop_assert_eq!(a.first_overlap(s, e), want);
                    }
                }
            }
            // Content check: drain everything from the lowest offset, range by range.
            while let Some(first) = a.first_offset() {
                let mut out = VecDeque::new();
                a.drain_into(first, &mut out);
                for (i, b) in out.into_iter().enumerate() {
                    prop_assert_eq!(Some(b), m[first as usize + i]);
                }
            }
        }
    }
}
