//! A hierarchical hashed timing wheel: the timer store of a squeue.
//!
//! # What
//! Each squeue keeps one deadline per connection (the protocol core folds retransmit,
//! delayed ACK, persist, keepalive and TIME_WAIT into one `Option<Instant>`), tens of
//! thousands of them, re-armed on almost every ACK and mostly cancelled before they fire.
//! [`TimerWheel`] stores those deadlines with O(1) insert, cancel and re-arm, fires them in
//! [`TimerWheel::advance`], and tells the worker when to wake up next
//! ([`TimerWheel::next_deadline`]).
//!
//! # Time in ticks
//! Time is cut into ticks of `tick` nanoseconds from `start`. A deadline `d` *expires at
//! tick* `e(d) = ⌈(d − start) / tick⌉` (0 if `d` is before `start`), i.e. at the first tick
//! boundary `b(d) = start + e(d)·tick` at or after `d`. `advance(now)` brings the wheel to
//! tick `T(now) = ⌊(now − start) / tick⌋` and fires every timer with `e ≤ T(now)`, which is
//! exactly the timers with `b(d) ≤ now`. The last partial tick before `u64::MAX` has no
//! boundary in range, so `advance(Instant::MAX)` is defined to reach the final tick and fire
//! everything.
//!
//! ## Guarantee (exact)
//! The wheel's clock `t_w` is the latest `now` given to `advance` (initially `start`).
//! For a timer armed (inserted or re-armed) for deadline `d` while the clock read `t_w`:
//! * It never fires in a call `advance(now)` with `now < d` (never early).
//! * It fires exactly once, during the first call `advance(now)` with
//!   `now ≥ max(b(d), t_w)` or `now == Instant::MAX`, unless cancelled or re-armed first.
//!   Since `b(d) < d + tick`, any such `advance(now)` with `now ≥ d + tick` fires it: at
//!   most one tick late. A deadline on a tick boundary fires exactly at it. A deadline at
//!   or before `t_w` (in the past) fires at the next `advance` that does not go back in
//!   time (`now ≥ t_w`, equality included).
//! * `advance(now)` with `now < t_w` is a no-op (the wheel's clock never goes back).
//! * [`TimerWheel::next_deadline`] is never late: no `advance(now)` with `now` earlier than
//!   it fires anything. It is exact (`b(d)` of the earliest timer) when that timer sits in
//!   level 0, and the start of its slot (early) when it sits in a higher level; it is never
//!   earlier than `t_w`.
//!
//! # Why hierarchical
//! A single wheel with per-entry round counts (Varghese & Lauck scheme 6) revisits every
//! long timer (keepalive: hours) once per revolution, and an occupied-slot bitmap cannot
//! say whether a slot's entries are due in this revolution, so the worker would wake up
//! for far timers every revolution. Instead the wheel has `L` levels of `slots` buckets
//! (scheme 7): level `l` buckets span `slots^l` ticks. A timer is placed by the highest
//! base-`slots` digit in which its expiry tick differs from the current tick: level `l`,
//! slot = that digit of `e`. Invariant: a timer in level `l`, slot `i` agrees with the
//! current tick on every digit above `l`, and `i` is greater than the current tick's digit
//! `l`. Hence occupied slots at a lower level always come before those at a higher level,
//! and the next event is the first occupied slot after the current digit of the lowest
//! non-empty level (a bitmap search). When time reaches the start of a level-`l` slot, its
//! timers fire (if due) or move to a lower level (cascade): each timer moves at most
//! `L − 1` times in its life, and the many timers cancelled early never move. `L` is the
//! smallest number of levels covering every tick up to `u64::MAX` nanoseconds, so no
//! deadline needs an overflow list (5 levels for 1 ms × 1024 slots).
//!
//! # Handles and re-arming
//! Timers live in a slab (`Vec` of entries with an intrusive free list); buckets are
//! intrusive doubly linked lists threaded through the slab, so unlinking is O(1). A
//! [`TimerHandle`] is the slab index plus a serial number unique to the insert (a 64-bit
//! counter that never repeats in practice), so a stale handle (fired, cancelled, or slot
//! reused) is recognised and ignored: [`TimerWheel::cancel`] returns `false`. Re-arming is
//! O(1) and keeps the handle: [`TimerWheel::reschedule`] moves a live timer in place (just
//! rewrites its expiry if it stays in the same bucket). [`TimerWheel::update`] is the
//! whole per-connection pattern: the connection keeps an `Option<TimerHandle>`, and
//! after each event passes its new `Option<Instant>` deadline. Handles are meaningful only
//! to the wheel that issued them.
//!
//! # Complexity and memory
//! * `insert`, `cancel`, `reschedule`, `update`: O(1) (amortised for slab growth).
//! * `advance`: O(1) when nothing is due; otherwise O(fired + cascaded) plus one bitmap
//!   search (O(L + slots/64) word operations) per occupied bucket reached.
//! * `next_deadline`: O(L + slots/64) word operations, no per-timer work; `len`: O(1).
//! * Memory: O(peak live timers + L·slots). Freed slab entries are reused (LIFO) before the
//!   slab grows, so cancelled or fired timers never accumulate; the slab's length is the
//!   peak number of simultaneously live timers ([`TimerWheel::capacity`]), and
//!   [`TimerWheel::shrink_to_fit`] releases free entries at its end.
//!
//! No input panics: `slots` is rounded to a power of two in `[2, 65536]`, a zero `tick`
//! counts as 1 ns, instants anywhere in `u64` are handled with saturating or widened
//! arithmetic.

use core::fmt;
use core::time::Duration;
use ember_core::time::Instant;

/// "No entry" in links and bucket heads.
const NIL: usize = usize::MAX;
/// The bucket field of a free slab entry.
const FREE: usize = usize::MAX;
/// Bounds of the (rounded) number of slots per level.
const MIN_SLOTS: usize = 2;
const MAX_SLOTS: usize = 1 << 16;

/// Identifies one armed timer of a [`TimerWheel`]. Stale handles (the timer fired or was
/// cancelled) are detected, never confused with a later timer.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct TimerHandle {
    index: usize,
    serial: u64,
}

/// One slab entry: a live timer, or a free entry (serial 0) on the free list.
#[derive(Clone)]
struct Entry<K> {
    key: K,
    /// Expiry tick `e(d)`.
    expiry: u64,
    /// Serial of the insert that armed it; 0 when free.
    serial: u64,
    prev: usize,
    /// Next in the bucket list, or in the free list when free.
    next: usize,
    /// Bucket index (`level * slots + slot`, or the overdue bucket), or [`FREE`].
    bucket: usize,
}

/// A hierarchical timing wheel mapping deadlines to keys (see the module documentation).
#[derive(Clone)]
pub struct TimerWheel<K> {
    /// `start` in nanoseconds.
    start: u64,
    /// Tick length in nanoseconds (≥ 1).
    tick: u64,
    /// log2(slots).
    bits: u32,
    /// Slots per level, a power of two.
    slots: usize,
    /// Number of levels.
    levels: usize,
    /// The last tick: `⌈(u64::MAX − start) / tick⌉`, reached by `advance(Instant::MAX)`.
    end_tick: u64,
    /// Latest `now` given to `advance` (≥ `start`), in nanoseconds.
    now: u64,
    /// Current tick: `T(now)`.
    elapsed: u64,
    /// Bucket list heads: `levels * slots` wheel buckets, then the overdue bucket.
    heads: Vec<usize>,
    /// Occupancy bitmap, `words` words per level.
    occupied: Vec<u64>,
    /// Bitmap words per level.
    words: usize,
    /// Number of timers in each level.
    level_len: Vec<usize>,
    /// Bit `l` set iff `level_len[l] > 0`.
    level_mask: u64,
    /// The slab.
    entries: Vec<Entry<K>>,
    /// Head of the free list.
    free: usize,
    /// Live timers.
    len: usize,
    /// Serial of the next insert (never 0).
    next_serial: u64,
}

impl<K> fmt::Debug for TimerWheel<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerWheel")
            .field("start_ns", &self.start)
            .field("tick_ns", &self.tick)
            .field("slots", &self.slots)
            .field("levels", &self.levels)
            .field("now_ns", &self.now)
            .field("elapsed_ticks", &self.elapsed)
            .field("len", &self.len)
            .field("capacity", &self.entries.len())
            .finish()
    }
}

impl<K: Copy + Eq> TimerWheel<K> {
    /// Creates an empty wheel whose tick 0 begins at `start`.
    ///
    /// `tick` is the slot granularity (a zero tick counts as 1 ns; longer than `u64::MAX`
    /// ns saturates); `slots` is the number of slots per level, rounded up to a power of
    /// two and clamped to `[2, 65536]` (1024 is a good default). The wheel's clock starts
    /// at `start`: deadlines at or before it fire at the first `advance`.
    pub fn new(start: Instant, tick: Duration, slots: usize) -> Self {
        let tick = u64::try_from(tick.as_nanos()).unwrap_or(u64::MAX).max(1);
        let slots = slots.clamp(MIN_SLOTS, MAX_SLOTS).next_power_of_two();
        let bits = slots.trailing_zeros();
        let start = start.as_nanos();
        let end_tick = (u64::MAX - start).div_ceil(tick);
        let needed_bits = u64::BITS - end_tick.leading_zeros();
        let levels = (needed_bits.div_ceil(bits) as usize).max(1);
        let words = slots.div_ceil(64);
        TimerWheel {
            start,
            tick,
            bits,
            slots,
            levels,
            end_tick,
            now: start,
            elapsed: 0,
            heads: vec![NIL; levels * slots + 1],
            occupied: vec![0; levels * words],
            words,
            level_len: vec![0; levels],
            level_mask: 0,
            entries: Vec::new(),
            free: NIL,
            len: 0,
            next_serial: 1,
        }
    }

    /// Arms a timer for `key` at `deadline` and returns its handle. Any deadline is
    /// accepted: one at or before the wheel's clock fires at the next `advance`, one
    /// beyond a revolution sits in a higher level. Several timers may share a key.
    /// To re-arm, prefer [`TimerWheel::reschedule`] / [`TimerWheel::update`] (O(1), keeps
    /// the handle); a caller that inserts again must `cancel` the old handle itself.
    pub fn insert(&mut self, key: K, deadline: Instant) -> TimerHandle {
        let expiry = self.expiry_tick(deadline);
        let serial = self.next_serial;
        self.next_serial = self.next_serial.wrapping_add(1).max(1);
        let entry = Entry {
            key,
            expiry,
            serial,
            prev: NIL,
            next: NIL,
            bucket: FREE,
        };
        let index = if self.free != NIL {
            let index = self.free;
            self.free = self.entries[index].next;
            self.entries[index] = entry;
            index
        } else {
            self.entries.push(entry);
            self.entries.len() - 1
        };
        self.len += 1;
        let bucket = self.bucket_for(expiry);
        self.link(index, bucket);
        TimerHandle { index, serial }
    }

    /// Cancels the timer of `h`. Returns `false` (and does nothing) if `h` is stale: the
    /// timer already fired or was cancelled.
    pub fn cancel(&mut self, h: TimerHandle) -> bool {
        match self.lookup(h) {
            Some(index) => {
                self.unlink(index);
                self.release(index);
                true
            }
            None => false,
        }
    }

    /// Moves the live timer of `h` to `deadline`, in O(1); `h` stays valid. Returns
    /// `false` (and does nothing) if `h` is stale.
    pub fn reschedule(&mut self, h: TimerHandle, deadline: Instant) -> bool {
        match self.lookup(h) {
            Some(index) => {
                self.move_to(index, deadline);
                true
            }
            None => false,
        }
    }

    /// The per-connection pattern: `handle` is the connection's slot for its timer,
    /// `deadline` its new (folded) deadline. `None` cancels the timer (if any) and clears
    /// `handle`; `Some(d)` re-arms the live timer in place (also setting its key to `key`)
    /// or, if `handle` is empty or stale, inserts a new one and stores its handle.
    pub fn update(&mut self, handle: &mut Option<TimerHandle>, key: K, deadline: Option<Instant>) {
        match deadline {
            None => {
                if let Some(h) = handle.take() {
                    self.cancel(h);
                }
            }
            Some(d) => {
                if let Some(index) = handle.and_then(|h| self.lookup(h)) {
                    self.entries[index].key = key;
                    self.move_to(index, d);
                } else {
                    *handle = Some(self.insert(key, d));
                }
            }
        }
    }

    /// Whether `h` names a timer that is still armed.
    pub fn contains(&self, h: TimerHandle) -> bool {
        self.lookup(h).is_some()
    }

    /// Fires every timer due at `now` (those whose deadline rounded up to a tick boundary
    /// is at or before `now`, see the module documentation), pushing their keys into
    /// `out` in no particular order, and advances the wheel's clock to `now`. Fired
    /// handles become stale. A `now` earlier than a previous one is a no-op.
    pub fn advance(&mut self, now: Instant, out: &mut Vec<K>) {
        let now = now.as_nanos();
        if now < self.now {
            return;
        }
        self.now = now;
        // Timers armed in the past: due by construction (deadline ≤ previous now ≤ now).
        let overdue = self.overdue_bucket();
        let mut cur = core::mem::replace(&mut self.heads[overdue], NIL);
        while cur != NIL {
            let next = self.entries[cur].next;
            out.push(self.entries[cur].key);
            self.release(cur);
            cur = next;
        }
        let target = self.now_tick(now);
        while let Some((level, slot, tick)) = self.next_event() {
            if tick > target {
                break;
            }
            self.elapsed = tick;
            self.expire_bucket(level, slot, out);
        }
        self.elapsed = self.elapsed.max(target);
    }

    /// The earliest instant at which [`TimerWheel::advance`] could fire something, or
    /// `None` if the wheel is empty. Never late; possibly early (the start of a
    /// higher-level slot, from which the wheel only cascades); never before the latest
    /// `now` given to `advance` (returned when a past deadline is pending).
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.len == 0 {
            return None;
        }
        if self.heads[self.overdue_bucket()] != NIL {
            return Some(Instant::from_nanos(self.now));
        }
        match self.next_event() {
            Some((_, _, tick)) => Some(self.tick_instant(tick)),
            // Unreachable by the invariants; "now" is a safe (early) answer.
            None => Some(Instant::from_nanos(self.now)),
        }
    }

    /// Number of armed timers.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no timer is armed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slab entries allocated (live + free): the peak number of simultaneously armed
    /// timers since creation (or the last [`TimerWheel::shrink_to_fit`]).
    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// Releases the free slab entries at the end of the slab and the spare `Vec`
    /// capacity. O(capacity); outstanding handles stay valid (or stale) as before.
    pub fn shrink_to_fit(&mut self) {
        while self.entries.last().is_some_and(|e| e.serial == 0) {
            self.entries.pop();
        }
        self.free = NIL;
        for index in (0..self.entries.len()).rev() {
            if self.entries[index].serial == 0 {
                self.entries[index].next = self.free;
                self.free = index;
            }
        }
        self.entries.shrink_to_fit();
    }

    /// The effective tick length.
    pub fn tick(&self) -> Duration {
        Duration::from_nanos(self.tick)
    }

    /// The effective number of slots per level (a power of two).
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// The number of levels (enough to hold any deadline up to `Instant::MAX`).
    pub fn levels(&self) -> usize {
        self.levels
    }

    /// The wheel's clock: the latest `now` given to `advance` (initially `start`).
    pub fn now(&self) -> Instant {
        Instant::from_nanos(self.now)
    }

    // ----- internals -----

    fn overdue_bucket(&self) -> usize {
        self.levels * self.slots
    }

    /// `e(d)`: the first tick whose boundary is at or after `d`.
    fn expiry_tick(&self, deadline: Instant) -> u64 {
        deadline
            .as_nanos()
            .saturating_sub(self.start)
            .div_ceil(self.tick)
    }

    /// `T(now)` for `now ≥ start`; `Instant::MAX` reaches the last tick.
    fn now_tick(&self, now: u64) -> u64 {
        if now == u64::MAX {
            self.end_tick
        } else {
            (now - self.start) / self.tick
        }
    }

    /// The boundary of `tick` (`start + tick·tick_len`), saturating at `Instant::MAX`.
    fn tick_instant(&self, tick: u64) -> Instant {
        let ns = u128::from(self.start) + u128::from(tick) * u128::from(self.tick);
        Instant::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// Digit `level` (base `slots`) of `tick`.
    fn digit(&self, tick: u64, level: usize) -> usize {
        let shift = self.bits.saturating_mul(level as u32);
        (tick.checked_shr(shift).unwrap_or(0) as usize) & (self.slots - 1)
    }

    /// Where a timer expiring at `expiry` goes, relative to the current tick.
    fn bucket_for(&self, expiry: u64) -> usize {
        if expiry <= self.elapsed {
            return self.overdue_bucket();
        }
        let high_bit = u64::BITS - 1 - (expiry ^ self.elapsed).leading_zeros();
        let level = (high_bit / self.bits) as usize;
        debug_assert!(level < self.levels, "expiry beyond the last level");
        let level = level.min(self.levels - 1);
        level * self.slots + self.digit(expiry, level)
    }

    /// The slab index of `h`'s timer, if `h` is live.
    fn lookup(&self, h: TimerHandle) -> Option<usize> {
        match self.entries.get(h.index) {
            Some(e) if e.serial != 0 && e.serial == h.serial => Some(h.index),
            _ => None,
        }
    }

    /// Re-arms live entry `index` at `deadline`.
    fn move_to(&mut self, index: usize, deadline: Instant) {
        let expiry = self.expiry_tick(deadline);
        let bucket = self.bucket_for(expiry);
        self.entries[index].expiry = expiry;
        if bucket != self.entries[index].bucket {
            self.unlink(index);
            self.link(index, bucket);
        }
    }

    /// Pushes entry `index` onto the front of `bucket`.
    fn link(&mut self, index: usize, bucket: usize) {
        let head = self.heads[bucket];
        {
            let e = &mut self.entries[index];
            e.bucket = bucket;
            e.prev = NIL;
            e.next = head;
        }
        if head != NIL {
            self.entries[head].prev = index;
        }
        self.heads[bucket] = index;
        if bucket != self.overdue_bucket() {
            let (level, slot) = (bucket / self.slots, bucket % self.slots);
            if head == NIL {
                self.occupied[level * self.words + slot / 64] |= 1 << (slot % 64);
            }
            self.level_len[level] += 1;
            self.level_mask |= 1 << level;
        }
    }

    /// Removes live entry `index` from its bucket.
    fn unlink(&mut self, index: usize) {
        let Entry {
            prev, next, bucket, ..
        } = self.entries[index];
        if prev != NIL {
            self.entries[prev].next = next;
        } else {
            self.heads[bucket] = next;
        }
        if next != NIL {
            self.entries[next].prev = prev;
        }
        if bucket != self.overdue_bucket() {
            let (level, slot) = (bucket / self.slots, bucket % self.slots);
            if self.heads[bucket] == NIL {
                self.occupied[level * self.words + slot / 64] &= !(1 << (slot % 64));
            }
            self.level_len[level] -= 1;
            if self.level_len[level] == 0 {
                self.level_mask &= !(1 << level);
            }
        }
    }

    /// Returns unlinked entry `index` to the free list.
    fn release(&mut self, index: usize) {
        let free = self.free;
        let e = &mut self.entries[index];
        e.serial = 0;
        e.bucket = FREE;
        e.prev = NIL;
        e.next = free;
        self.free = index;
        self.len -= 1;
    }

    /// The next occupied bucket: `(level, slot, start tick of the slot)`. By the
    /// invariant it is the first occupied slot after the current digit of the lowest
    /// non-empty level, and its start tick is after the current tick.
    fn next_event(&self) -> Option<(usize, usize, u64)> {
        if self.level_mask == 0 {
            return None;
        }
        let level = self.level_mask.trailing_zeros() as usize;
        let slot = self.first_occupied(level, self.digit(self.elapsed, level) + 1)?;
        let shift = self.bits.saturating_mul(level as u32 + 1);
        let high = match self.elapsed.checked_shr(shift) {
            Some(h) => h.checked_shl(shift).unwrap_or(0),
            None => 0,
        };
        let low = (slot as u64)
            .checked_shl(self.bits.saturating_mul(level as u32))
            .unwrap_or(0);
        Some((level, slot, high | low))
    }

    /// The first occupied slot `≥ from` of `level`.
    fn first_occupied(&self, level: usize, from: usize) -> Option<usize> {
        if from >= self.slots {
            return None;
        }
        let base = level * self.words;
        let mut w = from / 64;
        let mut word = self.occupied[base + w] & (u64::MAX << (from % 64));
        loop {
            if word != 0 {
                return Some(w * 64 + word.trailing_zeros() as usize);
            }
            w += 1;
            if w >= self.words {
                return None;
            }
            word = self.occupied[base + w];
        }
    }

    /// The wheel has reached the start of `(level, slot)`: fire its due timers and move
    /// the others (cascade) to lower levels.
    fn expire_bucket(&mut self, level: usize, slot: usize, out: &mut Vec<K>) {
        let bucket = level * self.slots + slot;
        let mut cur = core::mem::replace(&mut self.heads[bucket], NIL);
        self.occupied[level * self.words + slot / 64] &= !(1 << (slot % 64));
        while cur != NIL {
            let next = self.entries[cur].next;
            self.level_len[level] -= 1;
            let expiry = self.entries[cur].expiry;
            if expiry <= self.elapsed {
                out.push(self.entries[cur].key);
                self.release(cur);
            } else {
                let to = self.bucket_for(expiry);
                debug_assert!(to < bucket, "a cascade must go down");
                self.link(cur, to);
            }
            cur = next;
        }
        if self.level_len[level] == 0 {
            self.level_mask &= !(1 << level);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    const MS: u64 = 1_000_000;

    fn ms(n: u64) -> Instant {
        Instant::from_nanos(n * MS)
    }

    fn wheel() -> TimerWheel<u32> {
        TimerWheel::new(Instant::ZERO, Duration::from_millis(1), 1024)
    }

    fn fire(w: &mut TimerWheel<u32>, now: Instant) -> Vec<u32> {
        let mut out = Vec::new();
        w.advance(now, &mut out);
        out.sort_unstable();
        out
    }

    /// Checks the internal invariants (test-only): lists, bitmap, counts, placement.
    fn check_invariants<K: Copy + Eq>(w: &TimerWheel<K>) {
        let mut live = 0;
        let mut per_level = vec![0usize; w.levels];
        for bucket in 0..w.heads.len() {
            let mut cur = w.heads[bucket];
            let mut prev = NIL;
            let mut n = 0;
            while cur != NIL {
                let e = &w.entries[cur];
                assert_eq!(e.bucket, bucket);
                assert_eq!(e.prev, prev);
                assert_ne!(e.serial, 0);
                if bucket == w.overdue_bucket() {
                    assert!(e.expiry <= w.elapsed);
                } else {
                    assert!(e.expiry > w.elapsed);
                    assert_eq!(w.bucket_for(e.expiry), bucket);
                }
                prev = cur;
                cur = e.next;
                n += 1;
            }
            live += n;
            if bucket < w.overdue_bucket() {
                let (level, slot) = (bucket / w.slots, bucket % w.slots);
                per_level[level] += n;
                let bit = w.occupied[level * w.words + slot / 64] >> (slot % 64) & 1;
                assert_eq!(bit == 1, n > 0, "bitmap of bucket {bucket}");
            }
        }
        assert_eq!(live, w.len);
        assert_eq!(per_level, w.level_len);
        for (level, &n) in w.level_len.iter().enumerate() {
            assert_eq!(w.level_mask >> level & 1 == 1, n > 0);
        }
        let mut free = 0;
        let mut cur = w.free;
        while cur != NIL {
            assert_eq!(w.entries[cur].serial, 0);
            cur = w.entries[cur].next;
            free += 1;
        }
        assert_eq!(free + w.len, w.entries.len());
        assert_eq!(w.elapsed, w.now_tick(w.now));
    }

    #[test]
    fn fires_at_the_first_tick_boundary_not_before() {
        let mut w = wheel();
        w.insert(1, Instant::from_nanos(5 * MS + MS / 2)); // 5.5 ms
        w.insert(2, ms(7)); // on a boundary
        assert_eq!(w.next_deadline(), Some(ms(6)));
        assert!(fire(&mut w, Instant::from_nanos(5 * MS + MS / 2)).is_empty());
        assert!(fire(&mut w, Instant::from_nanos(6 * MS - 1)).is_empty());
        assert_eq!(fire(&mut w, ms(6)), vec![1]);
        assert_eq!(w.next_deadline(), Some(ms(7)));
        assert!(fire(&mut w, Instant::from_nanos(7 * MS - 1)).is_empty());
        assert_eq!(fire(&mut w, ms(7)), vec![2]);
        assert_eq!(w.next_deadline(), None);
        assert!(w.is_empty());
    }

    #[test]
    fn one_advance_fires_many_ticks_and_levels() {
        let mut w = wheel();
        for i in 0..3000u32 {
            w.insert(i, ms(u64::from(i) * 7));
        }
        check_invariants(&w);
        let fired = fire(&mut w, ms(10_000));
        assert_eq!(fired, (0..1429).collect::<Vec<_>>()); // 1428 * 7 = 9996 ≤ 10000
        check_invariants(&w);
        assert_eq!(w.len(), 3000 - 1429);
        assert_eq!(w.next_deadline(), Some(ms(1429 * 7)));
    }

    #[test]
    fn past_deadlines_fire_at_the_next_advance() {
        let mut w = wheel();
        w.advance(ms(100), &mut Vec::new());
        w.insert(1, ms(50));
        w.insert(2, Instant::ZERO);
        w.insert(3, Instant::from_nanos(100 * MS)); // exactly now
        assert_eq!(w.next_deadline(), Some(ms(100)));
        check_invariants(&w);
        assert_eq!(fire(&mut w, ms(100)), vec![1, 2, 3]);
        assert!(w.is_empty());
        // A deadline inside the current tick is not due until its boundary.
        w.insert(4, Instant::from_nanos(100 * MS + 1));
        assert!(fire(&mut w, Instant::from_nanos(100 * MS + 2)).is_empty());
        assert_eq!(fire(&mut w, ms(101)), vec![4]);
    }

    #[test]
    fn backwards_advance_is_a_no_op() {
        let mut w = wheel();
        w.advance(ms(50), &mut Vec::new());
        w.insert(1, ms(10)); // overdue
        w.insert(2, ms(60));
        assert!(fire(&mut w, ms(20)).is_empty());
        assert_eq!(w.now(), ms(50));
        assert_eq!(w.len(), 2);
        assert_eq!(fire(&mut w, ms(50)), vec![1]);
        assert_eq!(fire(&mut w, ms(60)), vec![2]);
    }

    #[test]
    fn far_future_deadlines_cascade_and_are_never_early() {
        let mut w = wheel();
        let hour = 3_600_000;
        let h = w.insert(1, ms(2 * hour) + Duration::from_nanos(1));
        w.insert(2, ms(1500)); // beyond one revolution (1.024 s)
        let mut now = 0;
        let mut wakeups = 0;
        let mut got = Vec::new();
        while let Some(nd) = w.next_deadline() {
            assert!(nd.as_nanos() >= now * MS);
            now = nd.as_millis();
            let fired = fire(&mut w, nd);
            for &k in &fired {
                let due = if k == 1 { 2 * hour * MS + 1 } else { 1500 * MS };
                assert!(nd.as_nanos() >= due, "early");
                assert!(nd.as_nanos() < due + MS, "late");
            }
            got.extend(fired);
            wakeups += 1;
            check_invariants(&w);
        }
        assert_eq!(got, vec![2, 1]);
        // Spurious wake-ups are bounded by the number of levels per timer.
        assert!(wakeups <= 2 * w.levels(), "{wakeups} wakeups");
        assert!(!w.contains(h));
    }

    #[test]
    fn cancel_and_stale_handles() {
        let mut w = wheel();
        let a = w.insert(1, ms(10));
        let b = w.insert(2, ms(10));
        assert!(w.cancel(a));
        assert!(!w.cancel(a));
        assert!(!w.contains(a));
        // a's slab entry is reused: the stale handle must not touch the new timer.
        let c = w.insert(3, ms(20));
        assert_eq!(c.index, a.index);
        assert!(!w.cancel(a));
        assert!(!w.reschedule(a, ms(1)));
        assert_eq!(w.len(), 2);
        assert_eq!(fire(&mut w, ms(10)), vec![2]);
        assert!(!w.cancel(b), "fired handle is stale");
        assert!(w.contains(c));
        assert!(w.cancel(c));
        assert!(w.is_empty());
        assert_eq!(w.next_deadline(), None);
        check_invariants(&w);
    }

    #[test]
    fn reschedule_moves_in_place() {
        let mut w = wheel();
        let h = w.insert(7, ms(5000));
        assert!(w.reschedule(h, ms(3)));
        assert_eq!(w.next_deadline(), Some(ms(3)));
        assert!(w.reschedule(h, Instant::from_nanos(3 * MS - 5))); // same slot
        assert_eq!(w.next_deadline(), Some(ms(3)));
        assert!(w.reschedule(h, ms(9)));
        assert!(fire(&mut w, ms(8)).is_empty());
        assert!(w.contains(h));
        assert!(w.reschedule(h, ms(1))); // now in the past: overdue
        assert_eq!(w.next_deadline(), Some(ms(8)));
        assert_eq!(fire(&mut w, ms(8)), vec![7]);
        assert!(!w.contains(h));
        assert_eq!(w.capacity(), 1);
    }

    #[test]
    fn update_follows_an_option_deadline() {
        let mut w = wheel();
        let mut slot = None;
        w.update(&mut slot, 9, None);
        assert_eq!(slot, None);
        w.update(&mut slot, 9, Some(ms(100)));
        let h = slot.unwrap();
        w.update(&mut slot, 9, Some(ms(50)));
        assert_eq!(slot, Some(h), "re-arm keeps the handle");
        assert_eq!(w.len(), 1);
        assert_eq!(w.next_deadline(), Some(ms(50)));
        assert_eq!(fire(&mut w, ms(50)), vec![9]);
        // The stored handle is now stale: update inserts afresh.
        w.update(&mut slot, 9, Some(ms(70)));
        assert_ne!(slot, Some(h));
        assert_eq!(w.len(), 1);
        w.update(&mut slot, 9, None);
        assert_eq!(slot, None);
        assert!(w.is_empty());
        assert!(fire(&mut w, ms(1000)).is_empty());
    }

    #[test]
    fn odd_parameters_do_not_panic() {
        for &(start, tick, slots) in &[
            (0, Duration::ZERO, 0usize),
            (0, Duration::MAX, 1),
            (u64::MAX, Duration::from_millis(1), 1024),
            (u64::MAX - 1, Duration::from_nanos(3), 3),
            (1 << 63, Duration::from_nanos(1), usize::MAX),
            (12345, Duration::from_secs(u64::MAX), 64),
        ] {
            let mut w: TimerWheel<u32> = TimerWheel::new(Instant::from_nanos(start), tick, slots);
            assert!(w.slots().is_power_of_two() && w.slots() >= 2 && w.slots() <= MAX_SLOTS);
            assert!(w.tick() >= Duration::from_nanos(1));
            let deadlines = [0, 1, start, start.saturating_add(1), u64::MAX - 1, u64::MAX];
            for (i, &d) in deadlines.iter().enumerate() {
                w.insert(i as u32, Instant::from_nanos(d));
            }
            check_invariants(&w);
            let mut out = Vec::new();
            for now in [
                0,
                start,
                start.saturating_add(7),
                u64::MAX / 2,
                u64::MAX - 1,
            ] {
                w.advance(Instant::from_nanos(now), &mut out);
                check_invariants(&w);
                let _ = w.next_deadline();
            }
            w.advance(Instant::MAX, &mut out);
            assert_eq!(out.len(), deadlines.len(), "all fired at MAX");
            assert!(w.is_empty());
            check_invariants(&w);
            // After MAX everything is overdue and still fires.
            w.insert(99, Instant::from_nanos(5));
            assert_eq!(w.next_deadline(), Some(Instant::MAX));
            out.clear();
            w.advance(Instant::MAX, &mut out);
            assert_eq!(out, vec![99]);
        }
    }

    #[test]
    fn last_partial_tick_fires_only_at_max() {
        // tick 10 ns from 0: u64::MAX = ...15 is mid-tick; the tick boundary after
        // u64::MAX - 3 is not representable, so the timer waits for advance(MAX).
        let mut w: TimerWheel<u32> = TimerWheel::new(Instant::ZERO, Duration::from_nanos(10), 4);
        w.insert(1, Instant::from_nanos(u64::MAX - 3));
        // Following next_deadline cascades the timer down the levels without firing it.
        let mut steps = 0;
        while let Some(nd) = w.next_deadline().filter(|&nd| nd < Instant::MAX) {
            assert!(fire_u(&mut w, nd).is_empty());
            steps += 1;
            assert!(steps <= w.levels());
        }
        assert_eq!(w.next_deadline(), Some(Instant::MAX));
        assert!(fire_u(&mut w, Instant::from_nanos(u64::MAX - 1)).is_empty());
        assert_eq!(fire_u(&mut w, Instant::MAX), vec![1]);
    }

    fn fire_u(w: &mut TimerWheel<u32>, now: Instant) -> Vec<u32> {
        let mut out = Vec::new();
        w.advance(now, &mut out);
        out
    }

    #[test]
    fn shrink_to_fit_releases_trailing_free_entries() {
        let mut w = wheel();
        let hs: Vec<_> = (0..100)
            .map(|i| w.insert(i, ms(10 + u64::from(i))))
            .collect();
        for h in &hs[10..] {
            assert!(w.cancel(*h));
        }
        assert!(w.cancel(hs[3]));
        assert_eq!(w.capacity(), 100);
        w.shrink_to_fit();
        assert_eq!(w.capacity(), 10);
        check_invariants(&w);
        for h in &hs[10..] {
            assert!(!w.contains(*h));
        }
        let n = w.insert(500, ms(5));
        assert_eq!(n.index, 3, "free hole reused first");
        let m = w.insert(501, ms(5));
        assert_eq!(m.index, 10);
        assert!(
            !w.contains(hs[10]),
            "old handle of a reused index stays stale"
        );
        assert_eq!(fire(&mut w, ms(1000)).len(), 11);
    }

    /// 100k connections re-arming on every "ACK": memory stays at the peak live count.
    #[test]
    fn rearming_100k_timers_keeps_memory_bounded() {
        const N: u32 = 100_000;
        let mut w: TimerWheel<u32> = wheel();
        let mut handles: Vec<Option<TimerHandle>> = vec![None; N as usize];
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut now = 0u64;
        let mut out = Vec::new();
        let mut fired_total = 0;
        for round in 0..8 {
            for key in 0..N {
                // RTO-like deadlines 200 ms..1.2 s out; sometimes a 2 h keepalive.
                let r = next();
                let d = if r % 16 == 0 {
                    now + 7_200_000 * MS
                } else {
                    now + (200 + r % 1000) * MS
                };
                let slot = &mut handles[key as usize];
                if round % 2 == 0 {
                    w.update(slot, key, Some(Instant::from_nanos(d)));
                } else {
                    // The cancel + insert pattern must reuse the freed entries too.
                    if let Some(h) = slot.take() {
                        w.cancel(h);
                    }
                    *slot = Some(w.insert(key, Instant::from_nanos(d)));
                }
            }
            now += 150 * MS;
            out.clear();
            w.advance(Instant::from_nanos(now), &mut out);
            fired_total += out.len();
            assert_eq!(w.len(), N as usize - out.len());
            for &k in &out {
                handles[k as usize] = None;
            }
            assert!(w.capacity() <= N as usize, "capacity {}", w.capacity());
        }
        assert_eq!(fired_total, 0, "every timer was re-armed before it was due");
        out.clear();
        w.advance(Instant::MAX, &mut out);
        assert_eq!(out.len(), N as usize);
        assert_eq!(w.capacity(), N as usize);
        assert!(w.is_empty());
    }

    // ----- property test against a reference model -----

    #[derive(Clone, Debug)]
    enum When {
        /// `now - x` (saturating).
        Past(u64),
        /// `now + ticks·tick + frac` (frac < tick).
        Near(u64, u64),
        /// `now + x`, any x.
        Far(u64),
        /// An absolute instant.
        Abs(u64),
        Max,
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(When),
        Cancel(usize),
        Reschedule(usize, When),
        Update(usize, Option<When>),
        /// Advance by `ticks·tick + frac`.
        Step(u64, u64),
        Jump(u64),
        Back(u64),
        ToNextDeadline,
        ToMax,
    }

    fn when() -> impl Strategy<Value = When> {
        prop_oneof![
            1 => any::<u64>().prop_map(When::Past),
            4 => (0u64..3000, any::<u64>()).prop_map(|(t, f)| When::Near(t, f)),
            1 => any::<u64>().prop_map(When::Far),
            1 => (0u64..1 << 45).prop_map(When::Far),
            1 => any::<u64>().prop_map(When::Abs),
            1 => Just(When::Max),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => when().prop_map(Op::Insert),
            2 => any::<usize>().prop_map(Op::Cancel),
            2 => (any::<usize>(), when()).prop_map(|(i, w)| Op::Reschedule(i, w)),
            2 => (any::<usize>(), proptest::option::of(when())).prop_map(|(i, w)| Op::Update(i, w)),
            4 => (0u64..40, any::<u64>()).prop_map(|(t, f)| Op::Step(t, f)),
            1 => (0u64..1 << 40).prop_map(Op::Jump),
            1 => any::<u64>().prop_map(Op::Jump),
            1 => any::<u64>().prop_map(Op::Back),
            2 => Just(Op::ToNextDeadline),
            1 => Just(Op::ToMax),
        ]
    }

    fn config() -> impl Strategy<Value = (u64, u64, usize)> {
        let start = prop_oneof![
            Just(0u64),
            any::<u64>(),
            (0u64..1000).prop_map(|x| u64::MAX - x)
        ];
        let tick = prop_oneof![
            Just(1u64),
            Just(1_000_000),
            1u64..5000,
            any::<u64>().prop_map(|x| x.max(1)),
        ];
        let slots = prop_oneof![
            Just(1usize),
            Just(2),
            Just(3),
            Just(16),
            Just(64),
            Just(1024)
        ];
        (start, tick, slots)
    }

    /// The documented firing rule, computed independently in u128: a timer with
    /// deadline `d` is due at `now` iff the first tick boundary ≥ d is ≤ now, or now is
    /// `Instant::MAX`.
    fn due(start: u64, tick: u64, d: u64, now: u64) -> bool {
        if now == u64::MAX {
            return true;
        }
        let (s, t) = (u128::from(start), u128::from(tick));
        let x = u128::from(d.max(start)) - s;
        s + x.div_ceil(t) * t <= u128::from(now)
    }

    struct Model {
        tick: u64,
        now: u64,
        /// (deadline, key) -> handle: the reference BTreeMap ordered by deadline.
        timers: BTreeMap<(u64, u32), TimerHandle>,
        /// key -> deadline of live timers.
        by_key: BTreeMap<u32, u64>,
        /// Every handle ever issued, with its key.
        handles: Vec<(TimerHandle, u32)>,
        next_key: u32,
    }

    impl Model {
        fn resolve(&self, w: &When) -> u64 {
            match *w {
                When::Past(x) => self.now.saturating_sub(x),
                When::Near(t, f) => self
                    .now
                    .saturating_add(t.saturating_mul(self.tick))
                    .saturating_add(f % self.tick),
                When::Far(x) => self.now.saturating_add(x),
                When::Abs(x) => x,
                When::Max => u64::MAX,
            }
        }
        fn arm(&mut self, key: u32, d: u64, h: TimerHandle) {
            if let Some(old) = self.by_key.insert(key, d) {
                self.timers.remove(&(old, key));
            }
            self.timers.insert((d, key), h);
        }
        fn disarm(&mut self, key: u32) -> bool {
            match self.by_key.remove(&key) {
                Some(d) => {
                    self.timers.remove(&(d, key));
                    true
                }
                None => false,
            }
        }
        fn is_live(&self, h: TimerHandle, key: u32) -> bool {
            self.by_key
                .get(&key)
                .is_some_and(|&d| self.timers.get(&(d, key)) == Some(&h))
        }
    }

    fn run(config: (u64, u64, usize), ops: Vec<Op>) -> Result<(), TestCaseError> {
        let (start, tick, slots) = config;
        let mut w: TimerWheel<u32> = TimerWheel::new(
            Instant::from_nanos(start),
            Duration::from_nanos(tick),
            slots,
        );
        let mut m = Model {
            tick,
            now: start,
            timers: BTreeMap::new(),
            by_key: BTreeMap::new(),
            handles: Vec::new(),
            next_key: 0,
        };
        let mut out = Vec::new();
        for op in ops {
            let target = match &op {
                Op::Insert(when) => {
                    let d = m.resolve(when);
                    let key = m.next_key;
                    m.next_key += 1;
                    let h = w.insert(key, Instant::from_nanos(d));
                    m.arm(key, d, h);
                    m.handles.push((h, key));
                    None
                }
                Op::Cancel(i) if !m.handles.is_empty() => {
                    let (h, key) = m.handles[i % m.handles.len()];
                    let live = m.is_live(h, key);
                    prop_assert_eq!(w.cancel(h), live);
                    if live {
                        m.disarm(key);
                    }
                    None
                }
                Op::Reschedule(i, when) if !m.handles.is_empty() => {
                    let (h, key) = m.handles[i % m.handles.len()];
                    let d = m.resolve(when);
                    let live = m.is_live(h, key);
                    prop_assert_eq!(w.reschedule(h, Instant::from_nanos(d)), live);
                    if live {
                        m.arm(key, d, h);
                    }
                    None
                }
                Op::Update(i, when) if !m.handles.is_empty() => {
                    let (h, key) = m.handles[i % m.handles.len()];
                    let live = m.is_live(h, key);
                    // A stale handle makes `update` insert: give that timer a fresh key so
                    // keys stay unique among live timers.
                    let key = if live {
                        key
                    } else {
                        m.next_key += 1;
                        m.next_key - 1
                    };
                    let mut slot = Some(h);
                    let d = when.as_ref().map(|x| m.resolve(x));
                    w.update(&mut slot, key, d.map(Instant::from_nanos));
                    match d {
                        None => {
                            prop_assert_eq!(slot, None);
                            if live {
                                m.disarm(key);
                            }
                        }
                        Some(d) => {
                            let nh = slot.expect("armed");
                            prop_assert_eq!(nh == h, live);
                            m.arm(key, d, nh);
                            m.handles.push((nh, key));
                        }
                    }
                    None
                }
                Op::Cancel(_) | Op::Reschedule(..) | Op::Update(..) => None,
                Op::Step(t, f) => Some(
                    m.now
                        .saturating_add(t.saturating_mul(tick))
                        .saturating_add(f % tick),
                ),
                Op::Jump(x) => Some(m.now.saturating_add(*x)),
                Op::Back(x) => Some(m.now.saturating_sub(*x)),
                Op::ToNextDeadline => w.next_deadline().map(Instant::as_nanos),
                Op::ToMax => Some(u64::MAX),
            };
            if let Some(now) = target {
                out.clear();
                w.advance(Instant::from_nanos(now), &mut out);
                out.sort_unstable();
                let expected: Vec<u32> = if now < m.now {
                    Vec::new()
                } else {
                    let mut v: Vec<u32> = m
                        .timers
                        .keys()
                        .filter(|&&(d, _)| due(start, tick, d, now))
                        .map(|&(_, k)| k)
                        .collect();
                    v.sort_unstable();
                    v
                };
                prop_assert_eq!(&out, &expected);
                for &k in &out {
                    let d = m.by_key[&k];
                    prop_assert!(d <= now, "fired early: d={} now={}", d, now);
                    m.disarm(k);
                }
                if now >= m.now {
                    m.now = now;
                    // At most one tick late: nothing with d + tick ≤ now is left.
                    if let Some(&(d, _)) = m.timers.keys().next() {
                        prop_assert!(d.checked_add(tick).is_none_or(|late| late > now));
                    }
                }
            }
            prop_assert_eq!(w.len(), m.timers.len());
            prop_assert_eq!(w.is_empty(), m.timers.is_empty());
            prop_assert_eq!(w.now().as_nanos(), m.now);
            // next_deadline: None iff empty; never late; never before the clock.
            match w.next_deadline() {
                None => prop_assert!(m.timers.is_empty()),
                Some(nd) => {
                    let nd = nd.as_nanos();
                    prop_assert!(nd >= m.now);
                    let earliest = m
                        .timers
                        .keys()
                        .map(|&(d, _)| {
                            let x = u128::from(d.max(start)) - u128::from(start);
                            let b =
                                u128::from(start) + x.div_ceil(u128::from(tick)) * u128::from(tick);
                            u64::try_from(b).unwrap_or(u64::MAX).max(m.now)
                        })
                        .min();
                    prop_assert!(earliest.is_some());
                    prop_assert!(nd <= earliest.unwrap_or(0), "late next_deadline {}", nd);
                }
            }
            prop_assert!(w.capacity() <= m.handles.len());
        }
        check_invariants(&w);
        // Draining at MAX fires exactly the remaining timers.
        out.clear();
        w.advance(Instant::MAX, &mut out);
        prop_assert_eq!(out.len(), m.timers.len());
        prop_assert!(w.is_empty());
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
        #[test]
        fn matches_reference_model(config in config(), ops in proptest::collection::vec(op(), 1..120)) {
            run(config, ops)?;
        }
    }
}
