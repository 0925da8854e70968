//! Impairment configuration for one direction of an in-memory link.
//!
//! An [`ImpairConfig`] says what a [`Wire`](crate::one_way_link::Wire) does to the frames that cross
//! it: random loss, duplication, reordering and single-bit corruption (each a probability per
//! frame), a fixed one-way propagation delay plus uniform jitter, an optional serialisation
//! rate with a bounded transmit queue (tail drop), and an MTU.
//!
//! The configuration is plain data. [`ImpairConfig::validate`] checks it, but a wire never
//! relies on validation: any value, including NaN probabilities, a zero rate or an MTU of
//! zero, yields well-defined behaviour without panicking (see the field docs for how
//! out-of-range values act). This keeps the simulator robust against fuzzed scenarios while
//! letting user-facing front ends refuse nonsense early with a readable message.
//!
//! This module also holds the small, deterministic random helpers the wires use: every
//! decision is drawn from a `ChaCha8Rng` stream, using fixed-width integer arithmetic only
//! (no float-to-int conversions whose rounding could differ), so a seed and a sequence of
//! calls fully determine every outcome on every platform.

use core::time::Duration;

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

/// Length of an Ethernet II header (destination MAC, source MAC, EtherType); frames carry no
/// FCS.
pub const ETH_HEADER_LEN: usize = 14;

/// Default bound on bytes waiting for serialisation: 256 KiB.
pub const DEFAULT_QUEUE_BYTES: usize = 256 * 1024;

/// Default MTU (largest IP packet carried), as on Ethernet (RFC 894).
pub const DEFAULT_MTU: usize = 1500;

/// Smallest MTU accepted by [`ImpairConfig::validate`]: every IPv4 host must handle 68-octet
/// datagrams without fragmentation (RFC 791, "Fragmentation and Reassembly").
pub const MIN_MTU: usize = 68;

/// Largest MTU accepted by [`ImpairConfig::validate`] (the largest IPv4 total length).
pub const MAX_MTU: usize = 65535;

/// The smallest hold-back base used for reordering: a reordered frame is delayed by an extra
/// uniform `[0.5, 1.5] × max(delay, REORDER_MIN_BASE)`, so that reordering still happens on
/// a zero-delay link.
pub const REORDER_MIN_BASE: Duration = Duration::from_millis(1);

/// Impairments applied by one direction of a link.
///
/// Processing order for a frame handed to a wire: MTU check, loss, queue admission (only when
/// `rate_bps` is set), then corruption, reordering, jitter and duplication of the accepted
/// frame. See [`Wire`](crate::one_way_link::Wire) for the exact timing model.
#[derive(Debug, Clone, PartialEq)]
pub struct ImpairConfig {
    /// Probability that a frame is dropped on entry (it takes no queue space).
    /// Values above 1 act as 1; negative values and NaN act as 0.
    pub loss: f64,
    /// Probability that a second, identical copy of the frame is delivered at the same instant,
    /// right after the original (or later, see `dup_delay`). The copy takes no queue space
    /// (duplication happens beyond the transmitter) and is identical to the delivered
    /// original, corruption included.
    pub dup: f64,
    /// With duplication, the copy arrives an extra uniform `0..=dup_delay` after the
    /// original (zero: at the same instant, right after it). A late copy keeps its place in
    /// line, as a frame held up in a queue does: frames sent after it that would have
    /// arrived before it arrive with it, right after it (one burst). A copy of a reordered
    /// frame holds nothing back. This is how a duplicate SYN ends up in the same receive
    /// batch as the handshake's final ACK.
    pub dup_delay: Duration,
    /// Probability that a frame is held back by an extra uniform
    /// `[0.5, 1.5] × max(delay, 1 ms)` and taken out of FIFO order, so that frames sent after
    /// it may overtake it.
    pub reorder: f64,
    /// Probability that exactly one uniformly chosen bit of the frame is flipped.
    ///
    /// One bit, deliberately: a single-bit error changes one 16-bit word by `±2^k`
    /// (`k < 16`), hence the one's-complement sum by a non-zero amount modulo `0xFFFF`, so
    /// the Internet checksum (RFC 1071) always detects it when the bit lands in a
    /// checksummed part of the frame. Two caveats for tests: the Ethernet header has no
    /// checksum here (no FCS), so a flip there alters addresses or the EtherType silently;
    /// and a flip that turns an IPv4 UDP checksum field into zero makes it read as "no
    /// checksum" (RFC 768).
    pub corrupt: f64,
    /// One-way propagation delay, added after serialisation.
    pub delay: Duration,
    /// Each frame gets an extra uniform `0..=jitter` delay; non-reordered frames are then
    /// clamped so they never arrive before an earlier-sent non-reordered frame (FIFO holds).
    pub jitter: Duration,
    /// Serialisation rate in bits per second; `None` means infinitely fast. `Some(0)` is
    /// refused by [`validate`](Self::validate) and acts as 1 bit/s if used anyway.
    pub rate_bps: Option<u64>,
    /// Bound on bytes waiting for or undergoing serialisation; a frame that would take the
    /// backlog beyond it is tail-dropped. Only meaningful when `rate_bps` is set (with an
    /// infinite rate nothing ever waits).
    pub queue_bytes: usize,
    /// Largest IP packet carried: frames longer than `mtu + 14` bytes are dropped and counted.
    pub mtu: usize,
}

impl Default for ImpairConfig {
    /// No impairment: no loss, duplication, reordering or corruption, zero delay and jitter,
    /// infinite rate, a 256 KiB queue and an MTU of 1500.
    fn default() -> Self {
        ImpairConfig {
            loss: 0.0,
            dup: 0.0,
            dup_delay: Duration::ZERO,
            reorder: 0.0,
            corrupt: 0.0,
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            rate_bps: None,
            queue_bytes: DEFAULT_QUEUE_BYTES,
            mtu: DEFAULT_MTU,
        }
    }
}

impl ImpairConfig {
    /// Checks that the configuration is meaningful.
    ///
    /// Probabilities must be finite and within `[0, 1]`; `mtu` within `68..=65535`; a set
    /// `rate_bps` must be positive and then `queue_bytes` must hold at least one full-size
    /// frame (`mtu + 14`). The error message names the field and its valid range.
    pub fn validate(&self) -> Result<(), String> {
        for (name, p) in [
            ("loss", self.loss),
            ("dup", self.dup),
            ("reorder", self.reorder),
            ("corrupt", self.corrupt),
        ] {
            if !p.is_finite() || !(0.0..=1.0).contains(&p) {
                return Err(format!(
                    "{name} = {p} is not a probability: must be finite and within [0, 1]"
                ));
            }
        }
        if !(MIN_MTU..=MAX_MTU).contains(&self.mtu) {
            return Err(format!(
                "mtu = {} is out of range: must be within {MIN_MTU}..={MAX_MTU}",
                self.mtu
            ));
        }
        if let Some(rate) = self.rate_bps {
            if rate == 0 {
                return Err(
                    "rate_bps = 0 is invalid: must be > 0 bits/s (or None for an \
                            infinitely fast wire)"
                        .to_string(),
                );
            }
            let min_queue = self.mtu + ETH_HEADER_LEN;
            if self.queue_bytes < min_queue {
                return Err(format!(
                    "queue_bytes = {} is too small: must be >= mtu + 14 = {min_queue} when \
                     rate_bps is set",
                    self.queue_bytes
                ));
            }
        }
        Ok(())
    }

    /// Largest frame (header included) this configuration carries: `mtu + 14`, saturating.
    pub fn max_frame_len(&self) -> usize {
        self.mtu.saturating_add(ETH_HEADER_LEN)
    }
}

/// The random draws made for one frame.
///
/// A wire draws exactly one `Draws` (a fixed number of 64-bit words) for every frame handed
/// to it, whatever the configuration and whatever happens to the frame. Frame `k` of a wire
/// therefore always consumes the `k`-th block of the stream: switching one impairment on or
/// off never changes the decisions made for the others.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Draws {
    pub loss: u64,
    pub corrupt: u64,
    pub corrupt_bit: u64,
    pub reorder: u64,
    pub reorder_amount: u64,
    pub jitter: u64,
    pub dup: u64,
}

impl Draws {
    /// Draws the block for the next frame.
    pub(crate) fn draw(rng: &mut ChaCha8Rng) -> Self {
        Draws {
            loss: rng.random(),
            corrupt: rng.random(),
            corrupt_bit: rng.random(),
            reorder: rng.random(),
            reorder_amount: rng.random(),
            jitter: rng.random(),
            dup: rng.random(),
        }
    }
}

/// `true` with probability `p`, decided by the 64-bit draw `x`.
///
/// Uses the top 53 bits of `x` as a uniform `u ∈ [0, 1)` and returns `u < p`: exact for
/// `p = 0` (never) and `p = 1` (always); values above 1 act as 1, negative values and NaN as
/// 0. Never panics.
pub(crate) fn chance(x: u64, p: f64) -> bool {
    let u = (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
    u < p
}

/// A uniform integer in `0..n` from the 64-bit draw `x` (0 when `n == 0`).
///
/// Multiply-shift ("fixed-point") reduction: one draw, no rejection loop, so the number of
/// draws per frame stays fixed. The bias is at most `n / 2^64`, negligible for our ranges.
pub(crate) fn below(x: u64, n: u128) -> u128 {
    // x < 2^64 and n is capped at 2^64 (every caller passes at most that), so the product
    // stays below 2^128.
    (u128::from(x) * n.min(1 << 64)) >> 64
}

/// Nanoseconds of a duration, saturating at `u64::MAX`.
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A second 64-bit value from the draw `x`, independent of it for every purpose here
/// (SplitMix64's finaliser): a decision that needs one more random number takes it from
/// a draw already in the block, so the block's size, and every other decision, stays the
/// same.
pub(crate) fn remix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform duration in `0..=max`, from the draw `x`.
pub(crate) fn uniform_upto(x: u64, max: Duration) -> Duration {
    let m = u128::from(nanos(max));
    let v = below(x, m + 1);
    Duration::from_nanos(u64::try_from(v).unwrap_or(u64::MAX))
}

/// The extra hold-back of a reordered frame: uniform in `[0.5, 1.5] × max(delay, 1 ms)`,
/// from the draw `x`.
pub(crate) fn reorder_hold(x: u64, delay: Duration) -> Duration {
    let base = u128::from(nanos(delay.max(REORDER_MIN_BASE)));
    let v = base / 2 + below(x, base + 1);
    Duration::from_nanos(u64::try_from(v).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;

    #[test]
    fn default_is_valid_and_unimpaired() {
        let c = ImpairConfig::default();
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.loss, 0.0);
        assert_eq!(c.dup, 0.0);
        assert_eq!(c.reorder, 0.0);
        assert_eq!(c.corrupt, 0.0);
        assert_eq!(c.delay, Duration::ZERO);
        assert_eq!(c.jitter, Duration::ZERO);
        assert_eq!(c.rate_bps, None);
        assert_eq!(c.queue_bytes, 256 * 1024);
        assert_eq!(c.mtu, 1500);
        assert_eq!(c.max_frame_len(), 1514);
    }

    #[test]
    fn validate_refuses_bad_probabilities_naming_the_field() {
        let bad = [f64::NAN, -0.1, 1.0001, f64::INFINITY, f64::NEG_INFINITY];
        for v in bad {
            for field in ["loss", "dup", "reorder", "corrupt"] {
                let mut c = ImpairConfig::default();
                match field {
                    "loss" => c.loss = v,
                    "dup" => c.dup = v,
                    "reorder" => c.reorder = v,
                    _ => c.corrupt = v,
                }
                let e = c.validate().unwrap_err();
                assert!(e.starts_with(field), "{e}");
                assert!(e.contains("[0, 1]"), "{e}");
            }
        }
        let c = ImpairConfig {
            loss: 1.0,
            dup: 0.0,
            reorder: 0.5,
            corrupt: 1.0,
            ..Default::default()
        };
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn validate_checks_mtu_rate_and_queue() {
        let mut c = ImpairConfig {
            mtu: 67,
            ..Default::default()
        };
        assert!(c.validate().unwrap_err().contains("mtu"));
        c.mtu = 65536;
        assert!(c.validate().unwrap_err().contains("68..=65535"));
        c.mtu = 68;
        assert_eq!(c.validate(), Ok(()));
        c.mtu = 65535;
        assert_eq!(c.validate(), Ok(()));

        c.mtu = 1500;
        c.rate_bps = Some(0);
        assert!(c.validate().unwrap_err().contains("rate_bps"));
        c.rate_bps = Some(1);
        c.queue_bytes = 1513;
        let e = c.validate().unwrap_err();
        assert!(e.contains("queue_bytes") && e.contains("1514"), "{e}");
        c.queue_bytes = 1514;
        assert_eq!(c.validate(), Ok(()));
        // Without a rate the queue bound is irrelevant.
        c.rate_bps = None;
        c.queue_bytes = 0;
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn chance_is_exact_at_the_ends_and_total() {
        for x in [0, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
            assert!(!chance(x, 0.0));
            assert!(chance(x, 1.0));
            assert!(chance(x, 7.0));
            assert!(!chance(x, -1.0));
            assert!(!chance(x, f64::NAN));
        }
        assert!(chance(0, 1e-300));
        assert!(!chance(u64::MAX, 0.999_999));
    }

    #[test]
    fn helpers_stay_in_range() {
        assert_eq!(below(u64::MAX, 0), 0);
        assert_eq!(below(u64::MAX, 10), 9);
        assert_eq!(below(0, 10), 0);
        assert_eq!(
            uniform_upto(u64::MAX, Duration::from_nanos(5)).as_nanos(),
            5
        );
        assert_eq!(uniform_upto(0, Duration::from_nanos(5)).as_nanos(), 0);
        assert_eq!(uniform_upto(u64::MAX, Duration::ZERO), Duration::ZERO);
        assert_eq!(
            uniform_upto(u64::MAX, Duration::MAX).as_nanos(),
            u128::from(u64::MAX)
        );
        let d = Duration::from_millis(10);
        assert_eq!(reorder_hold(0, d), Duration::from_millis(5));
        assert_eq!(reorder_hold(u64::MAX, d), Duration::from_millis(15));
        assert_eq!(reorder_hold(0, Duration::ZERO), Duration::from_micros(500));
        // Saturates rather than overflowing.
        assert!(reorder_hold(u64::MAX, Duration::MAX) >= Duration::from_nanos(u64::MAX / 2));
    }

    #[test]
    fn draws_are_a_fixed_block_per_frame() {
        let mut a = ChaCha8Rng::seed_from_u64(7);
        let mut b = ChaCha8Rng::seed_from_u64(7);
        let d1 = Draws::draw(&mut a);
        let d2 = Draws::draw(&mut b);
        assert_eq!(d1.loss, d2.loss);
        assert_eq!(d1.dup, d2.dup);
        // Seven words per block.
        let mut c = ChaCha8Rng::seed_from_u64(7);
        for _ in 0..7 {
            let _: u64 = c.random();
        }
        assert_eq!(Draws::draw(&mut a).loss, c.random::<u64>());
    }

    proptest! {
        #[test]
        fn validate_never_panics_and_accepts_exactly_the_valid(
            loss in any::<f64>(), dup in any::<f64>(), reorder in any::<f64>(),
            corrupt in any::<f64>(), rate in proptest::option::of(any::<u64>()),
            queue in any::<usize>(), mtu in any::<usize>(),
        ) {
            let c = ImpairConfig {
                loss, dup, reorder, corrupt, rate_bps: rate, queue_bytes: queue, mtu,
                ..Default::default()
            };
            let prob_ok = |p: f64| p.is_finite() && (0.0..=1.0).contains(&p);
            let expect = prob_ok(loss) && prob_ok(dup) && prob_ok(reorder) && prob_ok(corrupt)
                && (68..=65535).contains(&mtu)
                && rate.is_none_or(|r| r > 0 && queue >= mtu + 14);
            prop_assert_eq!(c.validate().is_ok(), expect);
        }

        #[test]
        fn uniform_helpers_in_bounds(x in any::<u64>(), ns in any::<u64>()) {
            let d = Duration::from_nanos(ns);
            prop_assert!(uniform_upto(x, d) <= d);
            let h = reorder_hold(x, d);
            let base = d.max(REORDER_MIN_BASE).as_nanos();
            prop_assert!(h.as_nanos() >= base / 2);
            prop_assert!(h.as_nanos() <= (base / 2 + base).min(u128::from(u64::MAX)));
        }
    }
}
