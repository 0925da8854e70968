//! One direction of an in-memory link: a time-driven, seeded impairment model.
//!
//! A [`Wire`] accepts whole Ethernet frames with [`Wire::send`] at an instant and hands them
//! out with [`Wire::recv`] once their arrival instant has come. It never reads a clock and
//! never spawns anything: the driver (the deterministic simulator with a virtual clock, or
//! the runtime's `dev::mem_link` and `dev::Impaired` with a real one) passes `now`, and
//! asks [`Wire::next_arrival`] when to come back.
//!
//! # Timing model
//!
//! For a frame of `len` bytes handed over at `now` (after the MTU check, loss and queue
//! admission, see [`ImpairConfig`]):
//!
//! * serialisation starts when the transmitter is free, `start = max(now, busy_until)`, and
//!   lasts `len × 8 / rate` (zero with an infinite rate). Sub-nanosecond remainders are
//!   carried from frame to frame while the transmitter stays busy, so `N` back-to-back frames
//!   of `L` bytes take exactly `⌊N·L·8/R⌋` ns, not `N` rounding errors more;
//! * the *backlog* at `now` is the total length of accepted frames whose serialisation has
//!   not finished by `now` (waiting, or on the wire); a frame that would take it above
//!   `queue_bytes` is tail-dropped;
//! * `arrival = end_of_serialisation + delay + uniform(0..=jitter)`; a frame not chosen for
//!   reordering is then clamped to arrive no earlier than the previous non-reordered frame,
//!   so FIFO order survives any jitter;
//! * a frame chosen for reordering gets an extra hold-back and is not clamped, nor does it
//!   hold later frames back: they overtake it;
//! * a duplicate arrives at the same instant as its original, immediately after it; with
//!   `dup_delay`, an extra uniform `0..=dup_delay` later, and (unless its original was
//!   reordered) it then moves the FIFO floor: later frames arrive no earlier than it.
//!
//! Frames are delivered by `(arrival, send order)`: ties go to the frame sent first.
//!
//! # Determinism
//!
//! Every decision comes from a `ChaCha8Rng` seeded with [`Wire::new`]'s seed. Each call to
//! `send` consumes one fixed-size block of draws whatever the configuration and whatever
//! becomes of the frame, so a seed plus a sequence of calls determines every outcome bit for
//! bit, and enabling one impairment leaves the decisions of the others unchanged.
//!
//! # Bounds
//!
//! Memory is bounded even for a driver that never lets time pass: besides the configured
//! queue, at most [`MAX_IN_FLIGHT_FRAMES`] frames and [`MAX_IN_FLIGHT_BYTES`] bytes may be in
//! flight (propagating); beyond that frames are tail-dropped and counted as `queue_drops`.

use core::time::Duration;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};

use ember_core::time::Instant;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::impairment::{below, chance, remix, reorder_hold, uniform_upto, Draws, ImpairConfig};

/// Hard cap on frames in flight on one wire (duplicates included).
pub const MAX_IN_FLIGHT_FRAMES: usize = 1 << 16;

/// Hard cap on bytes in flight on one wire (duplicates included): 64 MiB.
pub const MAX_IN_FLIGHT_BYTES: usize = 64 << 20;

/// Counters of one wire. `frames_in`/`bytes_in` count every frame offered to
/// [`Wire::send`]; `frames_out`/`bytes_out` every frame handed out by [`Wire::recv`]
/// (duplicates included).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WireStats {
    /// Frames offered to `send`.
    pub frames_in: u64,
    /// Bytes offered to `send`.
    pub bytes_in: u64,
    /// Frames delivered by `recv`.
    pub frames_out: u64,
    /// Bytes delivered by `recv`.
    pub bytes_out: u64,
    /// Frames dropped by random loss.
    pub lost: u64,
    /// Frames tail-dropped because the transmit queue (or the in-flight cap) was full.
    pub queue_drops: u64,
    /// Frames dropped for being longer than `mtu + 14`.
    pub mtu_drops: u64,
    /// Extra copies created by duplication.
    pub duplicated: u64,
    /// Frames chosen for reordering (held back and taken out of FIFO order).
    pub reordered: u64,
    /// Frames that had one bit flipped.
    pub corrupted: u64,
}

impl WireStats {
    /// kstat-style counters of a wire seen from its sending end (`tx_*`) or its
    /// receiving end (`rx_*`), with the impairments it applied.
    pub fn counters(&self, sending: bool) -> Vec<(&'static str, u64)> {
        if sending {
            vec![
                ("tx_frames", self.frames_in),
                ("tx_bytes", self.bytes_in),
                ("tx_lost", self.lost),
                ("tx_queue_drops", self.queue_drops),
                ("tx_mtu_drops", self.mtu_drops),
                ("tx_duplicated", self.duplicated),
                ("tx_reordered", self.reordered),
                ("tx_corrupted", self.corrupted),
            ]
        } else {
            vec![("rx_frames", self.frames_out), ("rx_bytes", self.bytes_out)]
        }
    }
}

/// What became of a frame handed to a wire, link or switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOutcome {
    /// Accepted: it will arrive (possibly corrupted, duplicated or late).
    Queued,
    /// Dropped by random loss.
    Lost,
    /// Tail-dropped: the transmit queue or the in-flight bound was full.
    QueueFull,
    /// Dropped: longer than `mtu + 14` bytes.
    TooBig,
    /// The port index does not exist (switch only).
    NoSuchPort,
}

/// A frame propagating on the wire, ordered by `(arrival, send order)`.
#[derive(Debug, Clone)]
struct InFlight {
    at: Instant,
    seq: u64,
    frame: Vec<u8>,
    /// The frame was corrupted on this wire: a receiver that checks the Ethernet FCS
    /// (a store-and-forward switch) would discard it.
    fcs_bad: bool,
}

impl PartialEq for InFlight {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for InFlight {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// One direction of a link: frames in at one end, impaired, out at the other.
#[derive(Debug, Clone)]
pub struct Wire {
    cfg: ImpairConfig,
    rng: ChaCha8Rng,
    stats: WireStats,
    /// Frames propagating, earliest arrival first.
    flight: BinaryHeap<Reverse<InFlight>>,
    flight_bytes: usize,
    next_seq: u64,
    /// When the transmitter finishes the last accepted frame.
    busy_until: Instant,
    /// Remainder of `busy_until`, in units of 1/rate ns (exact serialisation arithmetic).
    busy_frac: u128,
    /// `(end of serialisation, len)` of accepted frames, in send order, not yet known to be
    /// fully serialised.
    txq: VecDeque<(Instant, usize)>,
    /// Sum of the lengths in `txq`.
    txq_bytes: usize,
    /// Latest arrival given to a non-reordered frame (the FIFO floor).
    fifo_tail: Instant,
}

impl Wire {
    /// A wire with the given impairments, its random decisions seeded by `seed`.
    ///
    /// The configuration need not be validated: out-of-range values act as documented on
    /// [`ImpairConfig`].
    pub fn new(cfg: ImpairConfig, seed: u64) -> Self {
        Wire {
            cfg,
            rng: ChaCha8Rng::seed_from_u64(seed),
            stats: WireStats::default(),
            flight: BinaryHeap::new(),
            flight_bytes: 0,
            next_seq: 0,
            busy_until: Instant::ZERO,
            busy_frac: 0,
            txq: VecDeque::new(),
            txq_bytes: 0,
            fifo_tail: Instant::ZERO,
        }
    }

    /// Hands `frame` to the wire at `now`. See the module documentation for what happens.
    pub fn send(&mut self, now: Instant, mut frame: Vec<u8>) -> SendOutcome {
        let len = frame.len();
        self.stats.frames_in += 1;
        self.stats.bytes_in = self.stats.bytes_in.saturating_add(len as u64);
        // One fixed block of draws per offered frame, whatever happens next.
        let d = Draws::draw(&mut self.rng);

        if len > self.cfg.max_frame_len() {
            self.stats.mtu_drops += 1;
            return SendOutcome::TooBig;
        }
        if chance(d.loss, self.cfg.loss) {
            self.stats.lost += 1;
            return SendOutcome::Lost;
        }
        self.prune_txq(now);
        if self.cfg.rate_bps.is_some() && self.txq_bytes.saturating_add(len) > self.cfg.queue_bytes
        {
            self.stats.queue_drops += 1;
            return SendOutcome::QueueFull;
        }
        let copies = if chance(d.dup, self.cfg.dup) { 2 } else { 1 };
        if self.flight.len() + copies > MAX_IN_FLIGHT_FRAMES
            || self.flight_bytes.saturating_add(len.saturating_mul(copies)) > MAX_IN_FLIGHT_BYTES
        {
            self.stats.queue_drops += 1;
            return SendOutcome::QueueFull;
        }

        // Serialisation.
        let start = if now > self.busy_until {
            self.busy_frac = 0;
            now
        } else {
            self.busy_until
        };
        let end = match self.cfg.rate_bps {
            Some(rate) => {
                let rate = u128::from(rate.max(1));
                let num = (len as u128) * 8 * 1_000_000_000 + self.busy_frac;
                self.busy_frac = num % rate;
                let ns = u64::try_from(num / rate).unwrap_or(u64::MAX);
                start.saturating_add(Duration::from_nanos(ns))
            }
            None => start,
        };
        self.busy_until = end;
        if self.cfg.rate_bps.is_some() {
            self.txq.push_back((end, len));
            self.txq_bytes += len;
        }

        // Corruption: exactly one uniformly chosen bit.
        let mut fcs_bad = false;
        if len > 0 && chance(d.corrupt, self.cfg.corrupt) {
            let bit = below(d.corrupt_bit, (len as u128) * 8) as usize;
            frame[bit / 8] ^= 1 << (bit % 8);
            self.stats.corrupted += 1;
            fcs_bad = true;
        }

        // Arrival.
        let base = end
            .saturating_add(self.cfg.delay)
            .saturating_add(uniform_upto(d.jitter, self.cfg.jitter));
        let reordered = chance(d.reorder, self.cfg.reorder);
        let at = if reordered {
            self.stats.reordered += 1;
            base.saturating_add(reorder_hold(d.reorder_amount, self.cfg.delay))
        } else {
            let at = base.max(self.fifo_tail);
            self.fifo_tail = at;
            at
        };

        if copies == 2 {
            self.stats.duplicated += 1;
            if self.cfg.dup_delay.is_zero() {
                self.push(at, frame.clone(), fcs_bad);
            } else {
                // The copy's lateness comes from the duplication draw itself (remixed), so
                // the block of draws per frame keeps its size.
                let late = at.saturating_add(uniform_upto(remix(d.dup), self.cfg.dup_delay));
                if !reordered {
                    self.fifo_tail = self.fifo_tail.max(late);
                }
                self.push(at, frame.clone(), fcs_bad);
                self.push(late, frame, fcs_bad);
                return SendOutcome::Queued;
            }
        }
        // When duplicated, the first pushed copy gets the lower sequence number; both are
        // identical, so "original first" holds either way.
        self.push(at, frame, fcs_bad);
        SendOutcome::Queued
    }

    fn push(&mut self, at: Instant, frame: Vec<u8>, fcs_bad: bool) {
        self.flight_bytes += frame.len();
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        self.flight.push(Reverse(InFlight {
            at,
            seq,
            frame,
            fcs_bad,
        }));
    }

    /// Forgets serialisation records of frames fully serialised by `now`.
    fn prune_txq(&mut self, now: Instant) {
        while let Some(&(end, len)) = self.txq.front() {
            if end > now {
                break;
            }
            self.txq.pop_front();
            self.txq_bytes -= len;
        }
    }

    /// Arrival instant of the earliest frame not yet received, if any.
    pub fn next_arrival(&self) -> Option<Instant> {
        self.flight.peek().map(|Reverse(f)| f.at)
    }

    /// One frame whose arrival is `<= now`, earliest first (ties: send order), or `None`.
    pub fn recv(&mut self, now: Instant) -> Option<Vec<u8>> {
        self.recv_checked(now).map(|(f, _)| f)
    }

    /// Like [`Wire::recv`], and also says whether the frame was corrupted on this wire —
    /// what a receiver checking the Ethernet FCS would find. Hosts take frames as they
    /// come (so the IP, TCP and UDP checksums are exercised); a store-and-forward switch
    /// drops the bad ones, as a real one does.
    pub fn recv_checked(&mut self, now: Instant) -> Option<(Vec<u8>, bool)> {
        self.prune_txq(now);
        if self.next_arrival()? > now {
            return None;
        }
        let Reverse(f) = self.flight.pop()?;
        self.flight_bytes -= f.frame.len();
        self.stats.frames_out += 1;
        self.stats.bytes_out = self.stats.bytes_out.saturating_add(f.frame.len() as u64);
        Some((f.frame, f.fcs_bad))
    }

    /// The counters.
    pub fn stats(&self) -> &WireStats {
        &self.stats
    }

    /// The impairment configuration in force for frames sent from now on.
    pub fn config(&self) -> &ImpairConfig {
        &self.cfg
    }

    /// Replaces the configuration. Frames already accepted keep the fate and timing they were
    /// given; frames sent afterwards use `cfg`. The transmitter's busy time and the FIFO floor
    /// carry over, so a later frame never overtakes an earlier non-reordered one even if the
    /// delay shrinks.
    pub fn set_config(&mut self, cfg: ImpairConfig) {
        self.cfg = cfg;
    }

    /// Frames in flight (accepted, not yet received), duplicates included.
    pub fn in_flight(&self) -> usize {
        self.flight.len()
    }

    /// Bytes waiting for or undergoing serialisation at `now` (the quantity bounded by
    /// `queue_bytes`).
    pub fn backlog_bytes(&self, now: Instant) -> usize {
        self.txq
            .iter()
            .filter(|&&(end, _)| end > now)
            .map(|&(_, len)| len)
            .sum()
    }

    /// The backlog at `now` as the module documentation defines it: bytes of accepted
    /// frames whose serialisation has not finished by `now` (waiting, or on the wire). Zero
    /// with an infinite rate. Cheap: serialisation ends in send order, so only the frames
    /// already finished at the front of the queue are looked at.
    pub fn backlog(&self, now: Instant) -> usize {
        let mut done = 0;
        for &(end, len) in &self.txq {
            if end > now {
                break;
            }
            done += len;
        }
        self.txq_bytes - done
    }

    /// The serialisation rate, `None` for an infinitely fast wire.
    pub fn rate_bps(&self) -> Option<u64> {
        self.cfg.rate_bps
    }

    /// The earliest instant `>= now` at which [`Wire::backlog`] is below `limit` (at
    /// least 1): when a byte-queue-limited sender may hand over its next frame.
    pub fn backlog_below_at(&self, now: Instant, limit: usize) -> Instant {
        let limit = limit.max(1);
        let mut left = self.backlog(now);
        if left < limit {
            return now;
        }
        for &(end, len) in &self.txq {
            if end <= now {
                continue;
            }
            left -= len;
            if left < limit {
                return end;
            }
        }
        // Unreachable with a consistent queue (it drains to zero); stay total.
        self.busy_until.max(now)
    }

    /// When the transmitter finishes serialising the frames accepted so far.
    pub fn busy_until(&self) -> Instant {
        self.busy_until
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    /// A frame carrying its index in the first four payload bytes.
    fn frame(i: u32, len: usize) -> Vec<u8> {
        let mut f = vec![0u8; len.max(18)];
        f[14..18].copy_from_slice(&i.to_be_bytes());
        f
    }

    fn idx(f: &[u8]) -> u32 {
        u32::from_be_bytes([f[14], f[15], f[16], f[17]])
    }

    /// Frames with their delivery instants.
    type Delivered = Vec<(Instant, Vec<u8>)>;

    /// Receives everything, each frame at its own arrival instant.
    fn drain(w: &mut Wire) -> Delivered {
        let mut out = Vec::new();
        while let Some(t) = w.next_arrival() {
            let f = w.recv(t).expect("due frame");
            out.push((t, f));
        }
        out
    }

    fn all_impairments() -> ImpairConfig {
        ImpairConfig {
            loss: 0.1,
            dup: 0.1,
            dup_delay: Duration::ZERO,
            reorder: 0.1,
            corrupt: 0.1,
            delay: Duration::from_millis(5),
            jitter: Duration::from_millis(2),
            rate_bps: Some(10_000_000),
            queue_bytes: 20_000,
            mtu: 1500,
        }
    }

    fn scenario(seed: u64) -> (Vec<SendOutcome>, Delivered, WireStats) {
        let mut w = Wire::new(all_impairments(), seed);
        let mut outcomes = Vec::new();
        for i in 0..500u32 {
            outcomes.push(w.send(Instant::from_micros(u64::from(i) * 300), frame(i, 1000)));
        }
        let got = drain(&mut w);
        (outcomes, got, w.stats().clone())
    }

    #[test]
    fn unimpaired_wire_delivers_immediately_in_order() {
        let mut w = Wire::new(ImpairConfig::default(), 1);
        for i in 0..10 {
            assert_eq!(w.send(ms(3), frame(i, 60)), SendOutcome::Queued);
        }
        assert_eq!(w.in_flight(), 10);
        assert_eq!(w.next_arrival(), Some(ms(3)));
        assert_eq!(w.recv(ms(2)), None);
        for i in 0..10 {
            assert_eq!(idx(&w.recv(ms(3)).unwrap()), i);
        }
        assert_eq!(w.recv(ms(3)), None);
        assert_eq!(w.next_arrival(), None);
        let s = w.stats();
        assert_eq!(
            (s.frames_in, s.frames_out, s.bytes_in, s.bytes_out),
            (10, 10, 600, 600)
        );
        assert_eq!(w.in_flight(), 0);
    }

    #[test]
    fn delay_is_applied() {
        let cfg = ImpairConfig {
            delay: Duration::from_millis(7),
            ..Default::default()
        };
        let mut w = Wire::new(cfg, 1);
        w.send(ms(1), frame(0, 60));
        assert_eq!(w.next_arrival(), Some(ms(8)));
        assert_eq!(w.recv(ms(8) - Duration::from_nanos(1)), None);
        assert!(w.recv(ms(8)).is_some());
    }

    #[test]
    fn same_seed_same_everything_different_seed_differs() {
        let a = scenario(42);
        let b = scenario(42);
        assert_eq!(a, b);
        let c = scenario(43);
        assert_ne!(a.1, c.1);
        // Sanity: the scenario exercises every impairment.
        let s = &a.2;
        assert!(s.lost > 0 && s.duplicated > 0 && s.reordered > 0 && s.corrupted > 0);
        assert!(s.queue_drops > 0, "{s:?}");
    }

    fn rate_of(count: u64, n: u64) -> f64 {
        count as f64 / n as f64
    }

    const N: u32 = 10_000;

    fn run(cfg: ImpairConfig, seed: u64) -> (Wire, Delivered) {
        let mut w = Wire::new(cfg, seed);
        for i in 0..N {
            w.send(Instant::from_micros(u64::from(i)), frame(i, 64));
        }
        let got = drain(&mut w);
        (w, got)
    }

    #[test]
    fn loss_at_zero_one_and_p() {
        for (p, lo, hi) in [(0.0, 0.0, 0.0), (1.0, 1.0, 1.0), (0.1, 0.08, 0.12)] {
            let cfg = ImpairConfig {
                loss: p,
                ..Default::default()
            };
            let (w, got) = run(cfg, 5);
            let r = rate_of(w.stats().lost, u64::from(N));
            assert!((lo..=hi).contains(&r), "loss {p}: {r}");
            assert_eq!(got.len() as u64, u64::from(N) - w.stats().lost);
        }
    }

    #[test]
    fn dup_at_zero_one_and_p() {
        for (p, lo, hi) in [(0.0, 0.0, 0.0), (1.0, 1.0, 1.0), (0.1, 0.08, 0.12)] {
            let cfg = ImpairConfig {
                dup: p,
                ..Default::default()
            };
            let (w, got) = run(cfg, 6);
            let r = rate_of(w.stats().duplicated, u64::from(N));
            assert!((lo..=hi).contains(&r), "dup {p}: {r}");
            assert_eq!(got.len() as u64, u64::from(N) + w.stats().duplicated);
            // Copies come right after their original, at the same instant, in order.
            let order: Vec<u32> = got.iter().map(|(_, f)| idx(f)).collect();
            assert!(order.windows(2).all(|w| w[0] <= w[1]));
            for pair in got.windows(2) {
                if idx(&pair[0].1) == idx(&pair[1].1) {
                    assert_eq!(pair[0], pair[1]);
                }
            }
        }
    }

    #[test]
    fn late_copies_hold_later_frames_and_leave_other_draws_alone() {
        let spread = Duration::from_micros(500);
        let cfg = ImpairConfig {
            dup: 0.1,
            dup_delay: spread,
            ..Default::default()
        };
        // One frame a microsecond (`run`): a copy up to 500 µs late holds up to ~500
        // frames sent after it.
        let (w, got) = run(cfg.clone(), 6);
        let dups = w.stats().duplicated;
        assert!(dups > 0);
        assert_eq!(got.len() as u64, u64::from(N) + dups);
        // The same frames are duplicated as without the delay: the copy's lateness
        // comes from the duplication draw, not from a new one.
        let (w0, _) = run(
            ImpairConfig {
                dup_delay: Duration::ZERO,
                ..cfg
            },
            6,
        );
        assert_eq!(w0.stats().duplicated, dups);
        let mut seen = std::collections::HashMap::new();
        let mut late = 0u32;
        let mut burst_after_copy = 0u32;
        for (k, (t, f)) in got.iter().enumerate() {
            let i = idx(f);
            let sent = Instant::from_micros(u64::from(i));
            assert!(*t >= sent);
            if let Some(&first) = seen.get(&i) {
                // The copy: within the spread of its original, never before it.
                assert!(*t >= first && *t <= first + spread, "copy of {i} at {t:?}");
                late += u32::from(*t > first);
                // Whatever comes next (if sent after it) arrives with it or later: it
                // held the line.
                if let Some((t2, f2)) = got.get(k + 1) {
                    assert!(*t2 >= *t);
                    burst_after_copy += u32::from(*t2 == *t && idx(f2) > i);
                }
            } else {
                seen.insert(i, *t);
            }
        }
        // Originals stay in order (no reordering configured).
        let firsts: Vec<u32> = {
            let mut s = std::collections::HashSet::new();
            got.iter()
                .map(|(_, f)| idx(f))
                .filter(|i| s.insert(*i))
                .collect()
        };
        assert!(firsts.windows(2).all(|p| p[0] < p[1]));
        assert!(late as u64 > dups * 9 / 10, "late copies {late} of {dups}");
        assert!(
            burst_after_copy > 0,
            "no frame arrived in a burst right after a copy"
        );
    }

    #[test]
    fn corrupt_flips_exactly_one_bit() {
        for (p, lo, hi) in [(0.0, 0.0, 0.0), (1.0, 1.0, 1.0), (0.1, 0.08, 0.12)] {
            let cfg = ImpairConfig {
                corrupt: p,
                ..Default::default()
            };
            let mut w = Wire::new(cfg, 7);
            let mut flipped = 0u64;
            let mut positions = std::collections::BTreeSet::new();
            for i in 0..N {
                let orig: Vec<u8> = (0..64).map(|b| (b as u8).wrapping_mul(i as u8)).collect();
                w.send(ms(0), orig.clone());
                let got = w.recv(ms(0)).unwrap();
                let bits: u32 = orig
                    .iter()
                    .zip(&got)
                    .map(|(a, b)| (a ^ b).count_ones())
                    .sum();
                assert!(bits <= 1);
                if bits == 1 {
                    flipped += 1;
                    let pos = orig.iter().zip(&got).position(|(a, b)| a != b).unwrap();
                    positions.insert(pos);
                }
            }
            assert_eq!(flipped, w.stats().corrupted);
            let r = rate_of(flipped, u64::from(N));
            assert!((lo..=hi).contains(&r), "corrupt {p}: {r}");
            if p == 1.0 {
                // Uniform over the frame: every byte gets hit at some point.
                assert_eq!(positions.len(), 64);
            }
        }
        // An empty frame has no bit to flip.
        let mut w = Wire::new(
            ImpairConfig {
                corrupt: 1.0,
                ..Default::default()
            },
            1,
        );
        w.send(ms(0), Vec::new());
        assert_eq!(w.recv(ms(0)), Some(Vec::new()));
        assert_eq!(w.stats().corrupted, 0);
    }

    fn inversions(order: &[u32]) -> usize {
        let mut n = 0;
        for i in 0..order.len() {
            for j in i + 1..order.len() {
                if order[i] > order[j] {
                    n += 1;
                }
            }
        }
        n
    }

    #[test]
    fn reorder_at_zero_one_and_p() {
        for (p, lo, hi) in [(0.0, 0.0, 0.0), (1.0, 1.0, 1.0), (0.1, 0.08, 0.12)] {
            let cfg = ImpairConfig {
                reorder: p,
                ..Default::default()
            };
            let (w, got) = run(cfg, 8);
            let r = rate_of(w.stats().reordered, u64::from(N));
            assert!((lo..=hi).contains(&r), "reorder {p}: {r}");
            assert_eq!(got.len(), N as usize);
            let order: Vec<u32> = got.iter().map(|(_, f)| idx(f)).collect();
            let sorted = order.windows(2).all(|w| w[0] < w[1]);
            assert_eq!(sorted, p == 0.0, "reorder {p}");
        }
    }

    #[test]
    fn reordered_frames_are_overtaken_and_held_within_bounds() {
        let cfg = ImpairConfig {
            reorder: 0.2,
            delay: Duration::from_millis(10),
            ..Default::default()
        };
        let mut w = Wire::new(cfg, 9);
        let n = 200u32;
        for i in 0..n {
            w.send(ms(u64::from(i)), frame(i, 64));
        }
        let got = drain(&mut w);
        let order: Vec<u32> = got.iter().map(|(_, f)| idx(f)).collect();
        assert!(inversions(&order) > 0);
        let mut held = 0;
        for (t, f) in &got {
            let i = idx(f);
            let sent = ms(u64::from(i));
            let extra = *t - (sent + Duration::from_millis(10));
            if extra > Duration::ZERO {
                // Held back by [0.5, 1.5] × 10 ms, and some later frame overtook it.
                held += 1;
                assert!(extra >= Duration::from_millis(5) && extra <= Duration::from_millis(15));
                let pos = order.iter().position(|&x| x == i).unwrap();
                assert!(
                    order[..pos].iter().any(|&x| x > i),
                    "frame {i} not overtaken"
                );
            }
        }
        assert_eq!(held, w.stats().reordered);
        assert!(held > 20);
    }

    #[test]
    fn fifo_holds_with_jitter_without_reorder() {
        let cfg = ImpairConfig {
            delay: Duration::from_millis(5),
            jitter: Duration::from_millis(20),
            ..Default::default()
        };
        let mut w = Wire::new(cfg, 10);
        for i in 0..1000u32 {
            w.send(Instant::from_micros(u64::from(i) * 500), frame(i, 64));
        }
        let got = drain(&mut w);
        let order: Vec<u32> = got.iter().map(|(_, f)| idx(f)).collect();
        assert_eq!(order, (0..1000).collect::<Vec<_>>());
        // Jitter really varies the latency, within [delay, delay + jitter] before clamping.
        let lat: Vec<Duration> = got
            .iter()
            .map(|(t, f)| *t - Instant::from_micros(u64::from(idx(f)) * 500))
            .collect();
        assert!(lat.iter().all(|&l| l >= Duration::from_millis(5)));
        let distinct: std::collections::BTreeSet<_> = lat.iter().collect();
        assert!(distinct.len() > 100);
        // The first frame is never clamped.
        assert!(lat[0] <= Duration::from_millis(25));
    }

    #[test]
    fn rate_serialises_exactly() {
        // 100 frames of 1000 bytes at 1 Mbit/s: 0.8 s, then 3 ms of propagation.
        let cfg = ImpairConfig {
            rate_bps: Some(1_000_000),
            queue_bytes: 1_000_000,
            delay: Duration::from_millis(3),
            ..Default::default()
        };
        let mut w = Wire::new(cfg, 11);
        for i in 0..100 {
            assert_eq!(w.send(ms(0), frame(i, 1000)), SendOutcome::Queued);
        }
        assert_eq!(w.busy_until(), ms(800));
        assert_eq!(w.next_arrival(), Some(ms(8 + 3)));
        let got = drain(&mut w);
        for (k, (t, f)) in got.iter().enumerate() {
            assert_eq!(idx(f) as usize, k);
            assert_eq!(*t, ms(8 * (k as u64 + 1) + 3));
        }
        // Non-integral per-frame times do not accumulate rounding: 3 bytes at 7 bit/s.
        let cfg = ImpairConfig {
            rate_bps: Some(7),
            queue_bytes: 1_000,
            mtu: 68,
            ..Default::default()
        };
        let mut w = Wire::new(cfg, 1);
        for _ in 0..7 {
            w.send(ms(0), vec![0; 3]);
        }
        // 7 × 24 bits / 7 bit/s = 24 s exactly.
        assert_eq!(w.busy_until(), Instant::from_secs(24));
        // An idle wire starts afresh at `now`.
        w.send(Instant::from_secs(100), vec![0; 7]);
        assert_eq!(w.busy_until(), Instant::from_secs(108));
    }

    #[test]
    fn queue_tail_drops_a_burst_then_drains() {
        let cfg = ImpairConfig {
            rate_bps: Some(8_000_000), // 1 byte per µs
            queue_bytes: 10_000,
            ..Default::default()
        };
        let mut w = Wire::new(cfg, 12);
        let outcomes: Vec<_> = (0..100).map(|i| w.send(ms(0), frame(i, 1000))).collect();
        assert!(outcomes[..10].iter().all(|&o| o == SendOutcome::Queued));
        assert!(outcomes[10..].iter().all(|&o| o == SendOutcome::QueueFull));
        assert_eq!(w.stats().queue_drops, 90);
        assert_eq!(w.backlog_bytes(ms(0)), 10_000);
        // After 1 ms the first frame is fully serialised: room for exactly one more.
        assert_eq!(w.backlog_bytes(ms(1)), 9_000);
        assert_eq!(w.send(ms(1), frame(100, 1000)), SendOutcome::Queued);
        assert_eq!(w.send(ms(1), frame(101, 1000)), SendOutcome::QueueFull);
        // A smaller frame can still fit? No: the queue is exactly full.
        assert_eq!(w.send(ms(1), frame(102, 18)), SendOutcome::QueueFull);
        // Once drained, everything accepted arrives in order.
        let got = drain(&mut w);
        let order: Vec<u32> = got.iter().map(|(_, f)| idx(f)).collect();
        assert_eq!(order, (0..10).chain([100]).collect::<Vec<_>>());
        assert_eq!(got.last().unwrap().0, ms(11));
        assert_eq!(w.send(ms(20), frame(103, 1000)), SendOutcome::Queued);
    }

    #[test]
    fn backlog_rate_and_when_it_drains_below_a_limit() {
        let cfg = ImpairConfig {
            rate_bps: Some(8_000_000), // 1 byte per µs
            queue_bytes: 100_000,
            delay: Duration::from_millis(3),
            ..Default::default()
        };
        let mut w = Wire::new(cfg, 12);
        assert_eq!(w.rate_bps(), Some(8_000_000));
        assert_eq!(w.backlog(ms(0)), 0);
        assert_eq!(w.backlog_below_at(ms(0), 1), ms(0));
        for i in 0..10 {
            w.send(ms(0), frame(i, 1000));
        }
        for t in 0..12 {
            // The same quantity as `backlog_bytes`, without walking the whole queue.
            assert_eq!(w.backlog(ms(t)), w.backlog_bytes(ms(t)));
            assert_eq!(w.backlog(ms(t)), 1000 * (10 - t.min(10) as usize));
        }
        assert_eq!(w.backlog(Instant::from_micros(1500)), 9000);
        // Below 3000 bytes once eight frames are out (at 7 ms it is exactly 3000).
        assert_eq!(w.backlog_below_at(ms(0), 3000), ms(8));
        assert_eq!(w.backlog_below_at(ms(9), 3000), ms(9));
        assert_eq!(w.backlog_below_at(ms(0), 1), ms(10));
        assert_eq!(w.backlog_below_at(ms(0), 0), ms(10));
        assert_eq!(w.backlog_below_at(ms(0), 1_000_000), ms(0));
        // Receiving prunes the queue; the answers stay the same.
        while w.recv(ms(20)).is_some() {}
        assert_eq!(w.backlog(ms(5)), 0);
        // An infinitely fast wire never holds a backlog.
        let mut w = Wire::new(ImpairConfig::default(), 1);
        assert_eq!(w.rate_bps(), None);
        w.send(ms(0), frame(0, 1000));
        assert_eq!(w.backlog(ms(0)), 0);
        assert_eq!(w.backlog_below_at(ms(0), 1), ms(0));
    }

    #[test]
    fn loss_takes_no_queue_space() {
        let cfg = ImpairConfig {
            loss: 1.0,
            rate_bps: Some(1000),
            queue_bytes: 1514,
            ..Default::default()
        };
        let mut w = Wire::new(cfg, 1);
        for i in 0..10 {
            assert_eq!(w.send(ms(0), frame(i, 1000)), SendOutcome::Lost);
        }
        assert_eq!(w.backlog_bytes(ms(0)), 0);
        assert_eq!(w.busy_until(), Instant::ZERO);
    }

    #[test]
    fn mtu_drop() {
        let mut w = Wire::new(ImpairConfig::default(), 13);
        assert_eq!(w.send(ms(0), vec![0; 1514]), SendOutcome::Queued);
        assert_eq!(w.send(ms(0), vec![0; 1515]), SendOutcome::TooBig);
        assert_eq!(w.stats().mtu_drops, 1);
        assert_eq!(w.in_flight(), 1);
        // Short frames (even empty) are carried by a wire.
        assert_eq!(w.send(ms(0), vec![1; 3]), SendOutcome::Queued);
        assert_eq!(w.send(ms(0), Vec::new()), SendOutcome::Queued);
        assert_eq!(w.in_flight(), 3);
    }

    #[test]
    fn set_config_affects_later_frames_only() {
        let mut w = Wire::new(
            ImpairConfig {
                delay: Duration::from_millis(100),
                ..Default::default()
            },
            14,
        );
        w.send(ms(0), frame(0, 64));
        w.set_config(ImpairConfig {
            delay: Duration::from_millis(1),
            ..Default::default()
        });
        assert_eq!(w.config().delay, Duration::from_millis(1));
        w.send(ms(0), frame(1, 64));
        let got = drain(&mut w);
        // The first keeps its 100 ms; the second is not allowed to overtake it (FIFO).
        assert_eq!(got[0].0, ms(100));
        assert_eq!(got[1].0, ms(100));
        assert_eq!((idx(&got[0].1), idx(&got[1].1)), (0, 1));
        w.send(ms(200), frame(2, 64));
        assert_eq!(w.next_arrival(), Some(ms(201)));
        w.set_config(ImpairConfig {
            loss: 1.0,
            ..Default::default()
        });
        assert_eq!(w.send(ms(200), frame(3, 64)), SendOutcome::Lost);
        assert!(w.recv(ms(201)).is_some());
    }

    #[test]
    fn impairment_decisions_are_independent_streams() {
        // The same frames are lost whether or not other impairments are enabled.
        let lost_set = |cfg: ImpairConfig| -> Vec<bool> {
            let mut w = Wire::new(cfg, 99);
            (0..2000)
                .map(|i| w.send(ms(0), frame(i, 64)) == SendOutcome::Lost)
                .collect()
        };
        let base = ImpairConfig {
            loss: 0.3,
            ..Default::default()
        };
        let busy = ImpairConfig {
            dup: 0.5,
            corrupt: 0.5,
            reorder: 0.5,
            jitter: Duration::from_millis(3),
            ..base.clone()
        };
        assert_eq!(lost_set(base), lost_set(busy));
    }

    #[test]
    fn in_flight_is_bounded() {
        let cfg = ImpairConfig {
            delay: Duration::from_secs(1),
            dup: 1.0,
            ..Default::default()
        };
        let mut w = Wire::new(cfg, 15);
        let mut full = 0;
        for _ in 0..(MAX_IN_FLIGHT_FRAMES / 2 + 10) {
            if w.send(ms(0), Vec::new()) == SendOutcome::QueueFull {
                full += 1;
            }
        }
        assert_eq!(full, 10);
        assert_eq!(w.in_flight(), MAX_IN_FLIGHT_FRAMES);
        // Bytes too: 64 MiB of 1514-byte frames.
        let mut w = Wire::new(
            ImpairConfig {
                delay: Duration::from_secs(1),
                ..Default::default()
            },
            16,
        );
        let mut accepted = 0usize;
        for _ in 0..MAX_IN_FLIGHT_FRAMES {
            if w.send(ms(0), vec![0; 1514]) == SendOutcome::Queued {
                accepted += 1;
            }
        }
        assert_eq!(accepted, MAX_IN_FLIGHT_BYTES / 1514);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Send(u64, Vec<u8>),
        Recv(u64),
        Config(ImpairConfig),
    }

    fn any_config() -> impl Strategy<Value = ImpairConfig> {
        let p = prop_oneof![any::<f64>(), 0.0..=1.0f64, Just(0.0), Just(1.0)];
        (
            (p.clone(), p.clone(), p.clone(), p),
            (0u64..50_000_000, 0u64..50_000_000, any::<u64>()),
            proptest::option::of(prop_oneof![any::<u64>(), 0u64..100_000, Just(0)]),
            (0usize..10_000, prop_oneof![any::<usize>(), 0usize..2000]),
        )
            .prop_map(
                |((loss, dup, reorder, corrupt), (delay, jitter, big), rate, (q, mtu))| {
                    ImpairConfig {
                        loss,
                        dup,
                        // Sometimes late copies, up to ~16 ms, or (rarely) without bound.
                        dup_delay: match big % 13 {
                            0 => Duration::MAX,
                            1..=6 => Duration::from_nanos(big % 16_000_000),
                            _ => Duration::ZERO,
                        },
                        reorder,
                        corrupt,
                        delay: if big % 7 == 0 {
                            Duration::MAX
                        } else {
                            Duration::from_nanos(delay)
                        },
                        jitter: if big % 11 == 0 {
                            Duration::from_nanos(big)
                        } else {
                            Duration::from_nanos(jitter)
                        },
                        rate_bps: rate,
                        queue_bytes: q,
                        mtu,
                    }
                },
            )
    }

    fn any_op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (any::<u64>(), proptest::collection::vec(any::<u8>(), 0..200))
                .prop_map(|(t, f)| Op::Send(t % 1_000_000_000, f)),
            3 => any::<u64>().prop_map(|t| Op::Recv(t % 2_000_000_000)),
            1 => Just(Op::Recv(u64::MAX)),
            1 => any_config().prop_map(Op::Config),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn arbitrary_calls_never_panic_and_keep_invariants(
            cfg in any_config(), seed in any::<u64>(),
            ops in proptest::collection::vec(any_op(), 0..60),
        ) {
            let mut w = Wire::new(cfg, seed);
            for op in ops {
                match op {
                    Op::Send(t, f) => { w.send(Instant::from_nanos(t), f); }
                    Op::Recv(t) => {
                        let now = Instant::from_nanos(t);
                        let next = w.next_arrival();
                        let got = w.recv(now);
                        prop_assert_eq!(got.is_some(), next.is_some_and(|n| n <= now));
                    }
                    Op::Config(c) => w.set_config(c),
                }
                let s = w.stats();
                let accepted = s.frames_in - s.lost - s.queue_drops - s.mtu_drops;
                prop_assert_eq!(
                    accepted + s.duplicated,
                    s.frames_out + w.in_flight() as u64
                );
                prop_assert!(w.in_flight() <= MAX_IN_FLIGHT_FRAMES);
            }
        }

        #[test]
        fn fifo_with_any_jitter(seed in any::<u64>(), jitter in 0u64..10_000_000,
                                gaps in proptest::collection::vec(0u64..1_000_000, 1..100)) {
            let cfg = ImpairConfig { jitter: Duration::from_nanos(jitter), ..Default::default() };
            let mut w = Wire::new(cfg, seed);
            let mut t = 0;
            for (i, g) in gaps.iter().enumerate() {
                t += g;
                w.send(Instant::from_nanos(t), frame(i as u32, 20));
            }
            let order: Vec<u32> = drain(&mut w).iter().map(|(_, f)| idx(f)).collect();
            prop_assert_eq!(order, (0..gaps.len() as u32).collect::<Vec<_>>());
        }
    }
}
