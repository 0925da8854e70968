//! The sender's SACK scoreboard (RFC 2018, RFC 2883 D-SACK detection, RFC 6675 loss
//! recovery helpers).
//!
//! The scoreboard remembers which octets above `SND.UNA` the receiver has reported in SACK
//! blocks, as a sorted list of disjoint, non-adjacent half-open ranges `[start, end)` of
//! sequence numbers. From it the Tcb asks the RFC 6675 §4 questions: `IsLost()`, `NextSeg()`
//! (rules 1 and 3) and `SetPipe()`.
//!
//! Invariants (for any sequence of calls with any values):
//! * ranges are sorted in sequence order, non-empty, disjoint and separated by at least one
//!   unSACKed octet; after `update(snd_una, snd_max, ..)` they all lie in
//!   `[snd_una, snd_max)`, and `advance(snd_una)` drops or trims what lies below `snd_una`;
//! * at most `max_ranges` ranges are stored (memory is allocated once, at the first range); when a
//!   new range would exceed that, the highest ranges are forgotten. Forgetting SACK
//!   information is always safe: the sender never discards data because it was SACKed
//!   (RFC 2018 §8), it may only retransmit more than necessary;
//! * `sacked_bytes()` is the sum of the range lengths;
//! * every query is O(number of ranges) or better and allocation-free; nothing panics.
//!
//! Sequence numbers are compared modulo 2^32 ([`SeqNum`]); all ranges of one scoreboard
//! lie within one window (less than 2^31 octets), which keeps that order consistent.
//!
//! ## `high_rxt`
//!
//! RFC 6675 keeps `HighRxt`, "the highest sequence number which has been retransmitted
//! during the current loss recovery phase". ember passes the END of the last retransmitted
//! range instead: every unSACKed octet in `[snd_una, high_rxt)` has been retransmitted in
//! this recovery episode, nothing at or above `high_rxt` has. It starts at `snd_una` when
//! recovery begins (nothing retransmitted) and never needs to be below `snd_una` (values
//! below `snd_una` are treated as `snd_una`). So RFC 6675's "S1 <= HighRxt" is `s < high_rxt`
//! here, and NextSeg()'s "S2 > HighRxt" is `s >= high_rxt`.

use crate::tcp::seq::SeqNum;

/// Largest `max_ranges` a scoreboard accepts (larger requests are clamped).
pub const MAX_RANGES_LIMIT: usize = 4096;

/// What an unallocated [`LazyScoreboard`] reads as.
static EMPTY: Scoreboard = Scoreboard {
    ranges: Vec::new(),
    max_ranges: 1,
    sacked: 0,
    forgotten: 0,
};

/// A connection's [`Scoreboard`], allocated on first use: until the first SACK block is
/// recorded it reads (through `Deref`) as an empty scoreboard, and
/// [`release_if_empty`](Self::release_if_empty) drops it again once it holds no range.
/// An empty scoreboard behaves as a fresh one (its count of forgotten ranges is the
/// only thing it keeps, and the connection sums that into its statistics), so dropping
/// it changes nothing; a connection that never saw a SACK block (every fused one, every
/// one without loss or reordering) carries a null pointer.
#[derive(Debug, Clone, Default)]
pub struct LazyScoreboard(Option<Box<Scoreboard>>);

impl LazyScoreboard {
    /// The scoreboard, allocated now (holding at most `max_ranges` ranges) if it was not.
    pub fn get_mut(&mut self, max_ranges: usize) -> &mut Scoreboard {
        self.0
            .get_or_insert_with(|| Box::new(Scoreboard::new(max_ranges)))
    }

    /// [`Scoreboard::advance`]; nothing to do while unallocated.
    pub fn advance(&mut self, snd_una: SeqNum) {
        if let Some(sb) = self.0.as_deref_mut() {
            sb.advance(snd_una);
        }
    }

    /// [`Scoreboard::clear`]; nothing to do while unallocated.
    pub fn clear(&mut self) {
        if let Some(sb) = self.0.as_deref_mut() {
            sb.clear();
        }
    }

    /// Drops the scoreboard if it holds no range.
    pub fn release_if_empty(&mut self) {
        if self.0.as_deref().is_some_and(Scoreboard::is_empty) {
            self.0 = None;
        }
    }

    /// Whether a scoreboard is allocated.
    pub fn is_allocated(&self) -> bool {
        self.0.is_some()
    }
}

impl core::ops::Deref for LazyScoreboard {
    type Target = Scoreboard;

    fn deref(&self) -> &Scoreboard {
        self.0.as_deref().unwrap_or(&EMPTY)
    }
}

/// What one ACK's SACK blocks changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SackDelta {
    /// Octets SACKed by this ACK that were not SACKed before (each octet counted once,
    /// D-SACK blocks excluded). If the range bound forces the scoreboard to forget
    /// information, bytes may be reported again when they are SACKed again.
    pub newly_sacked: u32,
    /// The first block was a D-SACK (RFC 2883): it reported a duplicate segment and was not
    /// recorded.
    pub dsack: bool,
}

/// The SACK scoreboard: SACKed ranges above `SND.UNA` (RFC 6675 §3, §5 "Update()").
#[derive(Debug, Clone)]
pub struct Scoreboard {
    /// Sorted, disjoint, non-adjacent `[start, end)` ranges.
    ranges: Vec<(SeqNum, SeqNum)>,
    max_ranges: usize,
    /// Sum of the range lengths.
    sacked: u32,
    /// Ranges forgotten because the bound was reached.
    forgotten: u64,
}

impl Scoreboard {
    /// An empty scoreboard holding at most `max_ranges` ranges (clamped to
    /// `1..=MAX_RANGES_LIMIT`; 64 is plenty in practice since an ACK carries at most 4
    /// blocks). Its memory is allocated once, when the first range is recorded: most
    /// connections (every fused one, every one without loss) never record one, and an
    /// idle connection should cost little memory.
    pub fn new(max_ranges: usize) -> Self {
        let max_ranges = max_ranges.clamp(1, MAX_RANGES_LIMIT);
        Scoreboard {
            ranges: Vec::new(),
            max_ranges,
            sacked: 0,
            forgotten: 0,
        }
    }

    /// Ranges forgotten so far because `max_ranges` was reached.
    pub fn forgotten(&self) -> u64 {
        self.forgotten
    }

    /// The range bound this scoreboard was built with (after clamping).
    pub fn max_ranges(&self) -> usize {
        self.max_ranges
    }

    /// Records the SACK blocks of one ACK (RFC 6675 §5 "Update()", RFC 2018 §4).
    ///
    /// `snd_una` is the cumulative ACK after processing this ACK (call
    /// [`advance`](Self::advance) first) and `snd_max` the highest sequence number sent
    /// plus one. Each block `(left, right)` is clamped to `[snd_una, snd_max)`; inverted,
    /// empty and entirely out-of-window blocks are ignored.
    ///
    /// D-SACK (RFC 2883 §4, §5): the first block is a D-SACK when its left edge is below the
    /// cumulative ACK (`snd_una`), or when it lies within the second block. It is then
    /// reported (`dsack = true`) and not recorded.
    pub fn update(
        &mut self,
        snd_una: SeqNum,
        snd_max: SeqNum,
        blocks: &[(SeqNum, SeqNum)],
    ) -> SackDelta {
        self.normalize(snd_una, snd_max);
        let win = snd_max.since(snd_una);
        let mut delta = SackDelta::default();
        let mut rest = blocks;
        if let Some(&(l0, r0)) = blocks.first() {
            if r0 > l0 {
                let below_ack = l0 < snd_una && r0 <= snd_max;
                let in_second = blocks
                    .get(1)
                    .is_some_and(|&(l1, r1)| r1 > l1 && l0 >= l1 && r0 <= r1);
                if below_ack || in_second {
                    delta.dsack = true;
                    rest = &blocks[1..];
                }
            }
        }
        for &(l, r) in rest {
            // Offsets from snd_una (signed, so that blocks below snd_una clamp to 0).
            let lo = i64::from(l.diff(snd_una));
            let hi = i64::from(r.diff(snd_una));
            if hi <= lo {
                continue;
            }
            let lo = lo.max(0);
            let hi = hi.min(i64::from(win));
            if hi <= lo {
                continue;
            }
            let added = self.insert(snd_una, lo as u32, hi as u32);
            delta.newly_sacked = delta.newly_sacked.saturating_add(added);
        }
        delta
    }

    /// Cumulative ACK (RFC 6675 §5: SACK information below `SND.UNA` is discarded): forgets
    /// ranges below `snd_una` and trims a range that straddles it.
    pub fn advance(&mut self, snd_una: SeqNum) {
        let k = self.ranges.partition_point(|&(_, e)| e <= snd_una);
        if k > 0 {
            for &(s, e) in &self.ranges[..k] {
                self.sacked = self.sacked.saturating_sub(e.since(s));
            }
            self.ranges.drain(..k);
        }
        // Only reachable when snd_una jumped by 2^31 or more (garbage input): keep the
        // structure valid; update() re-clips everything to its window anyway.
        while let Some(&(s, e)) = self.ranges.first() {
            if e > snd_una {
                break;
            }
            self.sacked = self.sacked.saturating_sub(e.since(s));
            self.ranges.remove(0);
        }
        if let Some(first) = self.ranges.first_mut() {
            if first.0 < snd_una {
                self.sacked = self.sacked.saturating_sub(snd_una.since(first.0));
                first.0 = snd_una;
            }
        }
    }

    /// Forgets everything (after an RTO, RFC 2018 §8 / RFC 6675 §5.1, or when SACK
    /// information may have been reneged).
    pub fn clear(&mut self) {
        self.ranges.clear();
        self.sacked = 0;
    }

    /// No SACKed ranges.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Total SACKed octets.
    pub fn sacked_bytes(&self) -> u32 {
        self.sacked
    }

    /// Whether octet `seq` has been SACKed.
    pub fn is_sacked(&self, seq: SeqNum) -> bool {
        let Some(&(base, _)) = self.ranges.first() else {
            return false;
        };
        // Offsets from the lowest range are monotone along the list (it spans < 2^31).
        let off = |x: SeqNum| x.0.wrapping_sub(base.0);
        let o = off(seq);
        let i = self.ranges.partition_point(|&(_, e)| off(e) <= o);
        self.ranges.get(i).is_some_and(|&(s, _)| off(s) <= o)
    }

    /// The end of the highest SACKed range ("the highest octet covered by any received SACK"
    /// plus one).
    pub fn highest_sacked(&self) -> Option<SeqNum> {
        self.ranges.last().map(|&(_, e)| e)
    }

    /// The SACKed ranges `[start, end)`, in ascending order.
    pub fn ranges(&self) -> impl Iterator<Item = (SeqNum, SeqNum)> + '_ {
        self.ranges.iter().copied()
    }

    /// RFC 6675 §4 `IsLost(seq)`: true when at least `dupthresh` discontiguous SACKed
    /// ranges lie (at least partly) above octet `seq`, or more than `(dupthresh - 1) * mss`
    /// SACKed octets lie above it. `mss` 0 is treated as 1, `dupthresh` 0 as 1.
    pub fn is_lost(&self, seq: SeqNum, mss: u32, dupthresh: u32) -> bool {
        let dupthresh = dupthresh.max(1);
        let limit = u64::from(dupthresh - 1) * u64::from(mss.max(1));
        let above = seq + 1; // first octet after seq
        let mut count = 0u32;
        let mut bytes = 0u64;
        for &(s, e) in self.ranges.iter().rev() {
            if e <= above {
                break;
            }
            count += 1;
            bytes += u64::from(e.since(s.max(above)));
            if count >= dupthresh || bytes > limit {
                return true;
            }
        }
        false
    }

    /// RFC 6675 §4 `NextSeg()` rule 1: the first range `[s, s + len)` of unSACKed octets
    /// with `s >= max(high_rxt, snd_una)` (not yet retransmitted in this recovery, see the
    /// module documentation), below [`highest_sacked`](Self::highest_sacked), for which
    /// `IsLost(s)` holds. `len` is at most `mss` and stops at the next SACKed range.
    /// `None` when there is no such octet.
    pub fn next_lost(
        &self,
        snd_una: SeqNum,
        high_rxt: SeqNum,
        mss: u32,
        dupthresh: u32,
    ) -> Option<(SeqNum, u32)> {
        // Holes below range i are lost iff i <= last_lost (IsLost is constant within a
        // hole and can only turn false going up).
        let last_lost = self.last_lost_hole(snd_una, u32::MAX, mss, dupthresh)?;
        self.first_hole_from(snd_una, high_rxt, mss, last_lost + 1)
    }

    /// RFC 6675 §4 `NextSeg()` rule 3: like [`next_lost`](Self::next_lost) without the
    /// `IsLost()` condition (used when no new data can be sent): the first unSACKed range
    /// at or above `max(high_rxt, snd_una)` and below the highest SACKed octet, at most
    /// `mss` long.
    pub fn next_unsacked(
        &self,
        snd_una: SeqNum,
        high_rxt: SeqNum,
        mss: u32,
    ) -> Option<(SeqNum, u32)> {
        self.first_hole_from(snd_una, high_rxt, mss, self.ranges.len())
    }

    /// RFC 6675 §4 `SetPipe()`: the octets in `[snd_una, snd_max)` presumed in flight. Each
    /// unSACKed octet counts once unless `IsLost()`, and once more if it was retransmitted
    /// (below `high_rxt`). Computed per hole, O(ranges).
    pub fn pipe(
        &self,
        snd_una: SeqNum,
        snd_max: SeqNum,
        high_rxt: SeqNum,
        mss: u32,
        dupthresh: u32,
    ) -> u32 {
        let win = snd_max.since(snd_una);
        let rx = high_rxt.since(snd_una).min(win);
        let last_lost = self.last_lost_hole(snd_una, win, mss, dupthresh);
        let mut pipe = 0u64;
        let mut prev = 0u32; // end of the previous range, as an offset
        let hole = |a: u32, b: u32, lost: bool, pipe: &mut u64| {
            if b > a {
                if !lost {
                    *pipe += u64::from(b - a);
                }
                // Retransmitted part of the hole: [a, b) ∩ [0, rx).
                *pipe += u64::from(b.min(rx).saturating_sub(a));
            }
        };
        for (i, &(s, e)) in self.ranges.iter().enumerate() {
            let so = clip(s, snd_una, win);
            let eo = clip(e, snd_una, win);
            let lost = last_lost.is_some_and(|l| i <= l);
            hole(prev, so, lost, &mut pipe);
            prev = prev.max(eo);
        }
        // Above the highest SACKed octet nothing is lost (dupthresh >= 1).
        hole(prev, win, false, &mut pipe);
        pipe.min(u64::from(u32::MAX)) as u32
    }

    /// Drops what lies outside `[snd_una, snd_max)` (cheap when nothing does).
    fn normalize(&mut self, snd_una: SeqNum, snd_max: SeqNum) {
        let (Some(&(first, _)), Some(&(_, last))) = (self.ranges.first(), self.ranges.last())
        else {
            return;
        };
        let win = snd_max.since(snd_una);
        if first >= snd_una && last.0.wrapping_sub(snd_una.0) <= win && last.since(first) > 0 {
            return;
        }
        // Clip every range to the window, keeping order; rebuild the byte count.
        let mut sacked = 0u32;
        self.ranges.retain_mut(|r| {
            let so = clip(r.0, snd_una, win);
            let eo = clip(r.1, snd_una, win);
            if eo > so {
                *r = (snd_una + so, snd_una + eo);
                sacked = sacked.saturating_add(eo - so);
                true
            } else {
                false
            }
        });
        self.sacked = sacked;
    }

    /// Inserts `[lo, hi)` (offsets from `snd_una`, within the window) and returns the
    /// number of octets that were not SACKed before. Enforces the range bound.
    fn insert(&mut self, snd_una: SeqNum, lo: u32, hi: u32) -> u32 {
        let off = |x: SeqNum| x.0.wrapping_sub(snd_una.0);
        // First range ending at or after lo (adjacent ranges merge).
        let i = self.ranges.partition_point(|&(_, e)| off(e) < lo);
        let mut j = i;
        let mut covered = 0u32;
        let (mut nlo, mut nhi) = (lo, hi);
        while let Some(&(s, e)) = self.ranges.get(j) {
            let (so, eo) = (off(s), off(e));
            if so > hi {
                break;
            }
            covered += eo.min(hi).saturating_sub(so.max(lo));
            nlo = nlo.min(so);
            nhi = nhi.max(eo);
            j += 1;
        }
        let added = (hi - lo) - covered;
        let merged = (snd_una + nlo, snd_una + nhi);
        if j == i {
            if self.ranges.capacity() == 0 {
                self.ranges.reserve_exact(self.max_ranges + 1);
            }
            self.ranges.insert(i, merged);
        } else {
            self.ranges[i] = merged;
            self.ranges.drain(i + 1..j);
        }
        self.sacked = self.sacked.saturating_add(added);
        // Bound: forget the highest ranges (RFC 2018 §8 makes that safe).
        while self.ranges.len() > self.max_ranges {
            if let Some((s, e)) = self.ranges.pop() {
                self.sacked = self.sacked.saturating_sub(e.since(s));
                self.forgotten += 1;
            }
        }
        added
    }

    /// Index of the highest range whose hole below it is lost (RFC 6675 `IsLost()` for the
    /// octets of that hole: all ranges from it upwards lie above them), with range ends
    /// clipped to `snd_una + win`; `None` if no hole is lost.
    fn last_lost_hole(&self, snd_una: SeqNum, win: u32, mss: u32, dupthresh: u32) -> Option<usize> {
        let dupthresh = dupthresh.max(1);
        let limit = u64::from(dupthresh - 1) * u64::from(mss.max(1));
        let mut count = 0u32;
        let mut bytes = 0u64;
        for (i, &(s, e)) in self.ranges.iter().enumerate().rev() {
            let so = clip(s, snd_una, win);
            let eo = clip(e, snd_una, win);
            if eo > so {
                count += 1;
                bytes += u64::from(eo - so);
            }
            if count >= dupthresh || bytes > limit {
                return Some(i);
            }
        }
        None
    }

    /// The first unSACKed span at or above `max(snd_una, high_rxt)` in the holes below
    /// ranges `0..holes`, at most `mss` octets.
    fn first_hole_from(
        &self,
        snd_una: SeqNum,
        high_rxt: SeqNum,
        mss: u32,
        holes: usize,
    ) -> Option<(SeqNum, u32)> {
        let mss = mss.max(1);
        let from = high_rxt.since(snd_una);
        let mut prev = 0u32;
        for &(s, e) in self.ranges.iter().take(holes) {
            let so = clip(s, snd_una, u32::MAX);
            let eo = clip(e, snd_una, u32::MAX);
            let a = prev.max(from);
            if so > a {
                return Some((snd_una + a, (so - a).min(mss)));
            }
            prev = prev.max(eo);
        }
        None
    }
}

/// Offset of `x` from `base`, clamped to `[0, win]` (values below `base` give 0).
fn clip(x: SeqNum, base: SeqNum, win: u32) -> u32 {
    x.since(base).min(win)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MSS: u32 = 1000;

    fn s(n: u32) -> SeqNum {
        SeqNum(n)
    }

    fn ranges(sb: &Scoreboard) -> Vec<(u32, u32)> {
        sb.ranges().map(|(a, b)| (a.0, b.0)).collect()
    }

    fn check_invariants(sb: &Scoreboard) {
        let r: Vec<_> = sb.ranges().collect();
        let mut sum = 0u32;
        for (i, &(a, b)) in r.iter().enumerate() {
            assert!(b > a, "empty range {r:?}");
            sum += b.since(a);
            if i > 0 {
                assert!(a > r[i - 1].1, "unsorted or adjacent {r:?}");
            }
        }
        assert_eq!(sum, sb.sacked_bytes());
        assert!(r.len() <= sb.max_ranges());
    }

    #[test]
    fn basic_update_and_merge() {
        let mut sb = Scoreboard::new(64);
        assert!(sb.is_empty());
        let d = sb.update(s(1000), s(10_000), &[(s(3000), s(4000))]);
        assert_eq!(
            d,
            SackDelta {
                newly_sacked: 1000,
                dsack: false
            }
        );
        let d = sb.update(
            s(1000),
            s(10_000),
            &[(s(5000), s(6000)), (s(3000), s(4000))],
        );
        assert_eq!(d.newly_sacked, 1000);
        assert_eq!(ranges(&sb), vec![(3000, 4000), (5000, 6000)]);
        // Filling the gap merges everything (adjacent ranges join).
        let d = sb.update(s(1000), s(10_000), &[(s(3000), s(6000))]);
        assert_eq!(d.newly_sacked, 1000);
        assert_eq!(ranges(&sb), vec![(3000, 6000)]);
        let d = sb.update(s(1000), s(10_000), &[(s(6000), s(7000))]);
        assert_eq!(d.newly_sacked, 1000);
        assert_eq!(ranges(&sb), vec![(3000, 7000)]);
        assert_eq!(sb.sacked_bytes(), 4000);
        assert!(sb.is_sacked(s(3000)) && sb.is_sacked(s(6999)));
        assert!(!sb.is_sacked(s(2999)) && !sb.is_sacked(s(7000)));
        assert_eq!(sb.highest_sacked(), Some(s(7000)));
        // Cumulative ACK into the range trims it.
        sb.advance(s(4000));
        assert_eq!(ranges(&sb), vec![(4000, 7000)]);
        assert_eq!(sb.sacked_bytes(), 3000);
        sb.advance(s(8000));
        assert!(sb.is_empty());
        assert_eq!(sb.sacked_bytes(), 0);
        sb.update(s(8000), s(10_000), &[(s(9000), s(9500))]);
        sb.clear();
        assert!(sb.is_empty());
        assert_eq!(sb.highest_sacked(), None);
        check_invariants(&sb);
    }

    #[test]
    fn invalid_blocks_are_ignored_or_clamped() {
        let mut sb = Scoreboard::new(64);
        let una = s(1000);
        let max = s(10_000);
        let d = sb.update(una, max, &[(s(2000), s(2500))]);
        assert_eq!(d.newly_sacked, 500);
        // Inverted, empty, beyond snd_max, far away: ignored, alone or not.
        for b in [
            (s(4000), s(3000)),
            (s(4000), s(4000)),
            (s(10_000), s(12_000)),
            (s(2_000_000_000), s(2_000_001_000)),
        ] {
            assert_eq!(sb.update(una, max, &[b]), SackDelta::default());
            assert_eq!(
                sb.update(una, max, &[(s(2000), s(2500)), b]),
                SackDelta::default()
            );
            assert_eq!(
                sb.update(una, max, &[b, (s(2000), s(2500))]),
                SackDelta::default()
            );
        }
        assert_eq!(ranges(&sb), vec![(2000, 2500)]);
        // Straddling snd_max: clamped.
        let d = sb.update(una, max, &[(s(2000), s(2500)), (s(9000), s(11_000))]);
        assert_eq!(d.newly_sacked, 1000);
        assert_eq!(ranges(&sb), vec![(2000, 2500), (9000, 10_000)]);
        // Straddling snd_una as a non-first block: clamped.
        let d = sb.update(una, max, &[(s(2000), s(2500)), (s(500), s(1500))]);
        assert_eq!(d.newly_sacked, 500);
        assert_eq!(
            ranges(&sb),
            vec![(1000, 1500), (2000, 2500), (9000, 10_000)]
        );
        // snd_max before snd_una: empty window, nothing recorded, stale ranges dropped.
        let d = sb.update(s(5000), s(4000), &[(s(5000), s(6000))]);
        assert_eq!(d.newly_sacked, 0);
        assert!(sb.is_empty());
        check_invariants(&sb);
    }

    /// RFC 2883 §4.1.1: a duplicate segment because an ACK was lost.
    #[test]
    fn dsack_below_cumulative_ack() {
        let mut sb = Scoreboard::new(64);
        // 3000-3499 and 3500-3999 arrive, both ACKs are lost; 3000-3499 is retransmitted:
        // ACK 4000, SACK=3000-3500.
        sb.advance(s(4000));
        let d = sb.update(s(4000), s(5000), &[(s(3000), s(3500))]);
        assert_eq!(
            d,
            SackDelta {
                newly_sacked: 0,
                dsack: true
            }
        );
        assert!(sb.is_empty());
    }

    /// RFC 2883 §4.1.2: an out-of-order segment and a duplicate one.
    #[test]
    fn dsack_with_sack_block() {
        let mut sb = Scoreboard::new(64);
        // 4000-4499 dropped, 4500-4999 arrives: ACK 4000, SACK=4500-5000 (lost);
        // 3000-3499 retransmitted arrives: ACK 4000, SACK=3000-3500, 4500-5000.
        sb.advance(s(4000));
        let d = sb.update(s(4000), s(5000), &[(s(3000), s(3500)), (s(4500), s(5000))]);
        assert_eq!(
            d,
            SackDelta {
                newly_sacked: 500,
                dsack: true
            }
        );
        assert_eq!(ranges(&sb), vec![(4500, 5000)]);
    }

    /// RFC 2883 §4.1.3: a duplicate of an out-of-order segment (first block inside the
    /// second).
    #[test]
    fn dsack_inside_second_block() {
        let mut sb = Scoreboard::new(64);
        let una = s(4000);
        let max = s(7000);
        // 4000-4499 dropped; 4500-4999, 5000-5499 arrive; 5500-5999 dropped; 6000-6499
        // arrives: ACK 4000, SACK=6000-6500, 4500-5500.
        let d = sb.update(una, max, &[(s(4500), s(5000))]);
        assert_eq!(d.newly_sacked, 500);
        let d = sb.update(una, max, &[(s(4500), s(5500))]);
        assert_eq!(d.newly_sacked, 500);
        let d = sb.update(una, max, &[(s(6000), s(6500)), (s(4500), s(5500))]);
        assert_eq!(
            d,
            SackDelta {
                newly_sacked: 500,
                dsack: false
            }
        );
        // 5000-5499 is duplicated by the network: ACK 4000, SACK=5000-5500, 4500-5500,
        // 6000-6500.
        let d = sb.update(
            una,
            max,
            &[(s(5000), s(5500)), (s(4500), s(5500)), (s(6000), s(6500))],
        );
        assert_eq!(
            d,
            SackDelta {
                newly_sacked: 0,
                dsack: true
            }
        );
        assert_eq!(ranges(&sb), vec![(4500, 5500), (6000, 6500)]);
        // A first block that merely overlaps the second is a normal SACK block.
        let d = sb.update(una, max, &[(s(5200), s(5800)), (s(4500), s(5500))]);
        assert_eq!(
            d,
            SackDelta {
                newly_sacked: 300,
                dsack: false
            }
        );
    }

    /// RFC 2883 §4.2-style: a D-SACK for a retransmission that arrived after the original
    /// (the ACK of the original advanced SND.UNA past it).
    #[test]
    fn dsack_after_cumulative_ack_advance() {
        let mut sb = Scoreboard::new(64);
        sb.update(s(1000), s(5000), &[(s(2000), s(3000))]);
        sb.advance(s(3000));
        let d = sb.update(s(3000), s(5000), &[(s(1000), s(2000))]);
        assert!(d.dsack);
        assert_eq!(d.newly_sacked, 0);
        assert!(sb.is_empty());
    }

    /// RFC 6675 scenario built by hand: 10 segments of 1000 octets sent (1000..11000),
    /// segment 2 (2000..3000) lost, later segments SACKed one ACK at a time.
    #[test]
    fn rfc6675_single_loss() {
        let mut sb = Scoreboard::new(64);
        let una = s(2000);
        let max = s(11_000);
        sb.advance(una);
        // First duplicate ACK: SACK 3000-4000.
        sb.update(una, max, &[(s(3000), s(4000))]);
        assert!(!sb.is_lost(s(2000), MSS, 3));
        assert_eq!(sb.next_lost(una, una, MSS, 3), None);
        // Limited transmit territory: segment 2 not lost yet; rule 3 finds it.
        assert_eq!(sb.next_unsacked(una, una, MSS), Some((s(2000), 1000)));
        // pipe = all unSACKed octets (9000 - 1000).
        assert_eq!(sb.pipe(una, max, una, MSS, 3), 8000);
        // Second: SACK 3000-5000. 2000 octets above: not > (3-1)*1000.
        sb.update(una, max, &[(s(3000), s(5000))]);
        assert!(!sb.is_lost(s(2000), MSS, 3));
        // Third: SACK 3000-6000: more than 2 * SMSS SACKed above -> lost.
        sb.update(una, max, &[(s(3000), s(6000))]);
        assert!(sb.is_lost(s(2000), MSS, 3));
        assert!(!sb.is_lost(s(6000), MSS, 3));
        assert_eq!(sb.next_lost(una, una, MSS, 3), Some((s(2000), 1000)));
        // pipe: the lost hole does not count, 6000..11000 does.
        assert_eq!(sb.pipe(una, max, una, MSS, 3), 5000);
        // Retransmit 2000-3000: high_rxt = 3000. It counts once more.
        let high_rxt = s(3000);
        assert_eq!(sb.pipe(una, max, high_rxt, MSS, 3), 6000);
        assert_eq!(sb.next_lost(una, high_rxt, MSS, 3), None);
        // Rule 3 from high_rxt: nothing unSACKed below the highest SACKed octet.
        assert_eq!(sb.next_unsacked(una, high_rxt, MSS), None);
        // The retransmission arrives: ACK 6000; nothing left on the scoreboard.
        sb.advance(s(6000));
        assert!(sb.is_empty());
        assert_eq!(sb.pipe(s(6000), max, high_rxt, MSS, 3), 5000);
    }

    /// Multiple losses: holes 2000-3000 and 5000-7000 with SACKed 3000-5000, 7000-8000,
    /// 9000-10000; 1000..12000 outstanding.
    #[test]
    fn rfc6675_multiple_holes() {
        let mut sb = Scoreboard::new(64);
        let una = s(2000);
        let max = s(12_000);
        sb.update(
            una,
            max,
            &[(s(9000), s(10_000)), (s(7000), s(8000)), (s(3000), s(5000))],
        );
        assert_eq!(
            ranges(&sb),
            vec![(3000, 5000), (7000, 8000), (9000, 10_000)]
        );
        // Above 2000: 3 ranges (>= DupThresh) -> lost. Above 5000: 2 ranges, 2000 octets
        // (not > 2000) -> not lost. Above 8000: 1 range.
        assert!(sb.is_lost(s(2000), MSS, 3));
        assert!(!sb.is_lost(s(5000), MSS, 3));
        assert!(!sb.is_lost(s(8000), MSS, 3));
        // With DupThresh 2 the middle hole is lost too.
        assert!(sb.is_lost(s(5000), MSS, 2));
        assert!(!sb.is_lost(s(8000), MSS, 2) || 1000 > MSS);
        // NextSeg rule 1 walks the lost holes in MSS-sized pieces.
        assert_eq!(sb.next_lost(una, una, MSS, 2), Some((s(2000), 1000)));
        assert_eq!(sb.next_lost(una, s(3000), MSS, 2), Some((s(5000), 1000)));
        assert_eq!(sb.next_lost(una, s(6000), MSS, 2), Some((s(6000), 1000)));
        assert_eq!(sb.next_lost(una, s(6500), MSS, 2), Some((s(6500), 500)));
        assert_eq!(sb.next_lost(una, s(7000), MSS, 2), None);
        assert_eq!(sb.next_lost(una, s(3000), MSS, 3), None);
        // Rule 3 also offers the not-yet-lost hole 8000-9000, never above 10000.
        assert_eq!(sb.next_unsacked(una, s(7000), MSS), Some((s(8000), 1000)));
        assert_eq!(sb.next_unsacked(una, s(9000), MSS), None);
        // pipe with DupThresh 3: hole 2000-3000 lost (0), 5000-7000 not lost (2000),
        // 8000-9000 (1000), 10000-12000 (2000); nothing retransmitted.
        assert_eq!(sb.pipe(una, max, una, MSS, 3), 5000);
        // Retransmitted up to 6000: +1000 for 2000-3000 and +1000 for 5000-6000.
        assert_eq!(sb.pipe(una, max, s(6000), MSS, 3), 7000);
        // DupThresh 2: the middle hole is lost as well.
        assert_eq!(sb.pipe(una, max, s(6000), MSS, 2), 5000);
        // high_rxt below snd_una counts as snd_una.
        assert_eq!(sb.pipe(una, max, s(1000), MSS, 3), 5000);
        assert_eq!(sb.next_lost(una, s(1000), MSS, 3), Some((s(2000), 1000)));
        // mss larger than a hole: the segment stops at the SACKed range.
        assert_eq!(sb.next_lost(una, una, 5000, 2), Some((s(2000), 1000)));
    }

    #[test]
    fn is_lost_counts_partial_range_above() {
        let mut sb = Scoreboard::new(64);
        sb.update(s(0), s(100_000), &[(s(10_000), s(13_000))]);
        // Octet inside a range: only the octets above it count.
        assert!(sb.is_lost(s(10_000), MSS, 3)); // 2999 above > 2000
        assert!(!sb.is_lost(s(11_000), MSS, 3)); // 1999 above
        assert!(!sb.is_lost(s(12_999), MSS, 1)); // nothing above
        assert!(sb.is_lost(s(12_998), MSS, 1)); // one range above
                                                // dupthresh 0 behaves as 1, mss 0 as 1.
        assert!(sb.is_lost(s(5000), 0, 0));
        assert!(!sb.is_lost(s(13_000), 0, 0));
    }

    #[test]
    fn wraparound() {
        let mut sb = Scoreboard::new(64);
        let una = SeqNum(u32::MAX - 4999); // una + 5000 == 0
        let max = una + 20_000;
        let d = sb.update(
            una,
            max,
            &[(una + 3000, una + 8000), (una + 9000, una + 10_000)],
        );
        assert_eq!(d.newly_sacked, 6000);
        assert_eq!(ranges(&sb), vec![(u32::MAX - 1999, 3000), (4000, 5000)]);
        assert!(sb.is_sacked(SeqNum(u32::MAX)));
        assert!(sb.is_sacked(SeqNum(0)));
        assert!(sb.is_sacked(SeqNum(2999)));
        assert!(!sb.is_sacked(SeqNum(3000)));
        assert!(!sb.is_sacked(una));
        assert_eq!(sb.highest_sacked(), Some(SeqNum(5000)));
        assert!(sb.is_lost(una, MSS, 2));
        assert_eq!(sb.next_lost(una, una, MSS, 2), Some((una, 1000)));
        assert_eq!(
            sb.next_lost(una, una + 2500, MSS, 2),
            Some((una + 2500, 500))
        );
        assert_eq!(sb.pipe(una, max, una, MSS, 2), 20_000 - 6000 - 3000);
        // D-SACK below snd_una across the wrap.
        let d = sb.update(una, max, &[(una - 100, una - 50)]);
        assert!(d.dsack);
        sb.advance(SeqNum(1000));
        assert_eq!(ranges(&sb), vec![(1000, 3000), (4000, 5000)]);
        assert_eq!(sb.sacked_bytes(), 3000);
        check_invariants(&sb);
    }

    #[test]
    fn bounded_under_adversarial_blocks() {
        let mut sb = Scoreboard::new(64);
        let una = s(1);
        let max = una + 1_000_000;
        assert_eq!(sb.ranges.capacity(), 0, "nothing allocated before a SACK");
        sb.update(una, max, &[(una + 10, una + 20)]);
        let cap = sb.ranges.capacity();
        assert!(cap >= 65);
        // Thousands of disjoint one-octet blocks, in random-ish order.
        let mut x = 12345u32;
        for _ in 0..5000 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let start = una + (x % 500_000) * 2;
            let d = sb.update(una, max, &[(start, start + 1), (start + 4, start + 5)]);
            assert!(d.newly_sacked <= 2);
            check_invariants(&sb);
        }
        assert_eq!(sb.ranges().count(), 64);
        assert_eq!(sb.ranges.capacity(), cap, "no reallocation");
        // The lowest ranges are the ones kept.
        let lowest = sb.ranges().next().map(|r| r.0).unwrap_or(max);
        assert!(lowest.since(una) < 100_000);
        // One huge block collapses them.
        let d = sb.update(una, max, &[(una, max)]);
        assert_eq!(sb.ranges().count(), 1);
        assert_eq!(sb.sacked_bytes(), 1_000_000);
        assert!(d.newly_sacked > 900_000);
        // max_ranges is clamped.
        assert_eq!(Scoreboard::new(0).max_ranges(), 1);
        assert_eq!(Scoreboard::new(usize::MAX).max_ranges(), MAX_RANGES_LIMIT);
        let mut one = Scoreboard::new(0);
        one.update(s(0), s(100), &[(s(50), s(60)), (s(10), s(20))]);
        assert_eq!(ranges(&one), vec![(10, 20)]);
    }

    /// Per-octet reference model over a small window.
    struct Model {
        una: u32,
        sacked: Vec<bool>, // index = offset from the base below
    }

    const BASE: u32 = u32::MAX - 300; // windows straddle the wrap
    const SPAN: u32 = 600;

    impl Model {
        fn off(x: SeqNum) -> u32 {
            x.0.wrapping_sub(BASE)
        }
        fn is_lost(&self, o: u32, mss: u32, dt: u32) -> bool {
            let dt = dt.max(1);
            let mut count = 0;
            let mut bytes = 0u64;
            let mut prev = false;
            for k in o + 1..SPAN {
                let v = self.sacked[k as usize];
                if v {
                    bytes += 1;
                    if !prev {
                        count += 1;
                    }
                }
                prev = v;
            }
            count >= dt || bytes > u64::from(dt - 1) * u64::from(mss.max(1))
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn matches_per_octet_model(
            steps in proptest::collection::vec(
                (0u32..60, proptest::collection::vec((0u32..SPAN, 0u32..80), 0..5), any::<bool>()),
                1..12,
            ),
            mss in 0u32..120,
            dt in 0u32..5,
            rx in 0u32..SPAN,
            max_ranges in prop_oneof![Just(64usize), 1usize..6],
        ) {
            let mut sb = Scoreboard::new(max_ranges);
            let bounded = max_ranges >= 64;
            let mut m = Model { una: 0, sacked: vec![false; SPAN as usize] };
            let snd_max = 500u32; // offset
            for (adv, blocks, dsack_first) in steps {
                m.una = (m.una + adv).min(snd_max);
                let una = SeqNum(BASE) + m.una;
                let max = SeqNum(BASE) + snd_max;
                sb.advance(una);
                for k in 0..m.una {
                    m.sacked[k as usize] = false;
                }
                let mut bl: Vec<(SeqNum, SeqNum)> = blocks
                    .iter()
                    .map(|&(a, l)| (SeqNum(BASE) + a, SeqNum(BASE) + a + l))
                    .collect();
                if dsack_first && m.una > 10 {
                    bl.insert(0, (una - 10, una - 5));
                }
                let before: u32 = m.sacked.iter().filter(|&&v| v).count() as u32;
                let d = sb.update(una, max, &bl);
                let mut dsack = false;
                for (i, &(l, r)) in bl.iter().enumerate() {
                    let (lo, hi) = (Model::off(l), Model::off(r));
                    if i == 0 && hi > lo {
                        let in_second = bl.get(1).is_some_and(|&(l1, r1)| {
                            let (a, b) = (Model::off(l1), Model::off(r1));
                            b > a && lo >= a && hi <= b
                        });
                        if (lo < m.una && hi <= snd_max) || in_second {
                            dsack = true;
                            continue;
                        }
                    }
                    for k in lo.max(m.una)..hi.min(snd_max) {
                        m.sacked[k as usize] = true;
                    }
                }
                let after: u32 = m.sacked.iter().filter(|&&v| v).count() as u32;
                prop_assert_eq!(d.dsack, dsack);
                check_invariants(&sb);
                if !bounded {
                    // Forgetting is allowed: the scoreboard is a subset of the model.
                    for k in 0..SPAN {
                        if sb.is_sacked(SeqNum(BASE) + k) {
                            prop_assert!(m.sacked[k as usize]);
                        }
                    }
                    continue;
                }
                prop_assert_eq!(d.newly_sacked, after - before);
                prop_assert_eq!(sb.sacked_bytes(), after);
                for k in 0..SPAN {
                    prop_assert_eq!(sb.is_sacked(SeqNum(BASE) + k), m.sacked[k as usize], "octet {}", k);
                }
                // IsLost for unSACKed octets.
                for k in m.una..snd_max {
                    if !m.sacked[k as usize] {
                        prop_assert_eq!(
                            sb.is_lost(SeqNum(BASE) + k, mss, dt),
                            m.is_lost(k, mss, dt),
                            "IsLost({})", k
                        );
                    }
                }
                // SetPipe, octet by octet.
                let hr = m.una.max(rx.min(snd_max));
                let mut pipe = 0u32;
                for k in m.una..snd_max {
                    if m.sacked[k as usize] {
                        continue;
                    }
                    if !m.is_lost(k, mss, dt) {
                        pipe += 1;
                    }
                    if k < hr {
                        pipe += 1;
                    }
                }
                prop_assert_eq!(sb.pipe(una, max, SeqNum(BASE) + rx, mss, dt), pipe);
                // NextSeg rules 1 and 3.
                let highest = (0..SPAN).rev().find(|&k| m.sacked[k as usize]).map(|k| k + 1);
                let mut want1 = None;
                let mut want3 = None;
                if let Some(h) = highest {
                    for k in hr..h {
                        if m.sacked[k as usize] {
                            continue;
                        }
                        let mut len = 0;
                        while k + len < h && !m.sacked[(k + len) as usize] && len < mss.max(1) {
                            len += 1;
                        }
                        if want3.is_none() {
                            want3 = Some((SeqNum(BASE) + k, len));
                        }
                        if want1.is_none() && m.is_lost(k, mss, dt) {
                            want1 = Some((SeqNum(BASE) + k, len));
                        }
                    }
                }
                prop_assert_eq!(sb.next_lost(una, SeqNum(BASE) + rx, mss, dt), want1);
                prop_assert_eq!(sb.next_unsacked(una, SeqNum(BASE) + rx, mss), want3);
            }
        }

        #[test]
        fn arbitrary_inputs_never_panic(
            ops in proptest::collection::vec(
                (any::<u32>(), any::<u32>(), proptest::collection::vec((any::<u32>(), any::<u32>()), 0..6), any::<u8>()),
                0..40,
            ),
            max_ranges in 0usize..10,
        ) {
            let mut sb = Scoreboard::new(max_ranges);
            for (a, b, blocks, op) in ops {
                let bl: Vec<_> = blocks.into_iter().map(|(l, r)| (SeqNum(l), SeqNum(r))).collect();
                match op % 8 {
                    0 => sb.advance(SeqNum(a)),
                    1 => sb.clear(),
                    2 => {
                        let _ = sb.pipe(SeqNum(a), SeqNum(b), SeqNum(a ^ b), b % 3000, a % 5);
                    }
                    3 => {
                        let _ = sb.next_lost(SeqNum(a), SeqNum(b), a % 3000, b % 5);
                        let _ = sb.next_unsacked(SeqNum(a), SeqNum(b), b);
                    }
                    4 => {
                        let _ = sb.is_lost(SeqNum(a), b, a);
                        let _ = sb.is_sacked(SeqNum(b));
                    }
                    _ => {
                        let _ = sb.update(SeqNum(a), SeqNum(b), &bl);
                    }
                }
                prop_assert!(sb.ranges().count() <= sb.max_ranges());
                let sum: u64 = sb.ranges().map(|(x, y)| u64::from(y.since(x))).sum();
                prop_assert_eq!(sum, u64::from(sb.sacked_bytes()));
            }
        }
    }
}
