//! Token-bucket rate limiter, used for ICMP error messages and other rate limits.
//!
//! What: a bucket of at most `burst` tokens that gains one token per `interval`; each
//! allowed event takes one. With Solaris' defaults for ICMP errors (`icmp_err_interval`
//! 100 ms, `icmp_err_burst` 10) a host sends at most 10 errors at once and 10 per second
//! sustained. RFC 1812 §4.3.2.8 and RFC 4443 §2.4(f) ask for exactly this kind of limit on
//! ICMP errors.
//!
//! Why integer nanoseconds: the refill is computed from the time elapsed since the last
//! refill point, with the remainder kept (the refill point advances by whole intervals), so
//! no rounding drift accumulates and no floating point is involved.
//!
//! Invariants:
//! - `1 <= burst` and `tokens <= burst`;
//! - tokens are minted only for time that has passed since `last`; `last` never moves
//!   backwards, so a clock going backwards (or repeating instants) mints nothing, and
//!   after a backwards jump tokens resume only once time passes `last` again;
//! - a zero interval means "unlimited": `allow` always succeeds.

use crate::time::Instant;
use core::time::Duration;

/// A token bucket: at most `burst` events at once, one more per `interval`.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    interval: Duration,
    burst: u32,
    tokens: u32,
    /// Refill point: tokens have been credited for all time up to `last`.
    last: Instant,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens (at least 1) gaining one token per `interval`;
    /// a zero `interval` disables the limit.
    pub fn new(interval: Duration, burst: u32) -> Self {
        let burst = burst.max(1);
        TokenBucket {
            interval,
            burst,
            tokens: burst,
            last: Instant::ZERO,
        }
    }

    /// Takes a token if one is available (after crediting the time elapsed up to `now`).
    pub fn allow(&mut self, now: Instant) -> bool {
        if self.interval.is_zero() {
            return true;
        }
        self.refill(now);
        if self.tokens > 0 {
            self.tokens -= 1;
            true
        } else {
            false
        }
    }

    /// Changes the rate and bucket size (burst at least 1). Tokens above the new burst are
    /// discarded and none are added, except that leaving the unlimited mode (zero interval)
    /// starts from a full bucket.
    pub fn set(&mut self, interval: Duration, burst: u32) {
        let was_unlimited = self.interval.is_zero();
        self.interval = interval;
        self.burst = burst.max(1);
        self.tokens = if was_unlimited {
            self.burst
        } else {
            self.tokens.min(self.burst)
        };
    }

    /// Tokens available at `now`, without taking one (`u32::MAX` when unlimited).
    pub fn available(&self, now: Instant) -> u32 {
        if self.interval.is_zero() {
            return u32::MAX;
        }
        let mut copy = self.clone();
        copy.refill(now);
        copy.tokens
    }

    /// The configured interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// The configured bucket size.
    pub fn burst(&self) -> u32 {
        self.burst
    }

    fn refill(&mut self, now: Instant) {
        if now <= self.last {
            // Time stood still or went backwards: nothing to credit.
            return;
        }
        if self.tokens >= self.burst {
            // Full: time spent full earns nothing, so restart the refill point here.
            self.last = now;
            return;
        }
        let elapsed = u128::from(now.as_nanos() - self.last.as_nanos());
        let step = self.interval.as_nanos().max(1);
        let earned = elapsed / step;
        let missing = u128::from(self.burst - self.tokens);
        if earned >= missing {
            self.tokens = self.burst;
            self.last = now;
        } else {
            // earned < missing <= u32::MAX, and earned * step <= elapsed < 2^64.
            self.tokens += earned as u32;
            let advance = u64::try_from(earned * step).unwrap_or(u64::MAX);
            self.last = Instant::from_nanos(self.last.as_nanos().saturating_add(advance));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    #[test]
    fn solaris_defaults() {
        let mut b = TokenBucket::new(Duration::from_millis(100), 10);
        let start = ms(5_000);
        for _ in 0..10 {
            assert!(b.allow(start));
        }
        assert!(!b.allow(start));
        assert!(!b.allow(start + Duration::from_millis(99)));
        assert!(b.allow(start + Duration::from_millis(100)));
        assert!(!b.allow(start + Duration::from_millis(150)));
        // Remainder is kept: the next token is due at 200 ms, not 250 ms.
        assert!(b.allow(start + Duration::from_millis(200)));
        // Over one second at most 10 more.
        let allowed = (201..=1200)
            .filter(|&t| b.allow(start + Duration::from_millis(t)))
            .count();
        assert_eq!(allowed, 10);
    }

    #[test]
    fn starts_full_even_at_time_zero() {
        let mut b = TokenBucket::new(Duration::from_secs(1), 3);
        assert_eq!(b.available(Instant::ZERO), 3);
        assert!(b.allow(Instant::ZERO));
        assert!(b.allow(Instant::ZERO));
        assert!(b.allow(Instant::ZERO));
        assert!(!b.allow(Instant::ZERO));
        assert!(b.allow(Instant::from_secs(1)));
    }

    #[test]
    fn time_going_backwards_mints_nothing() {
        let mut b = TokenBucket::new(Duration::from_millis(100), 2);
        assert!(b.allow(ms(1_000)));
        assert!(b.allow(ms(1_000)));
        assert!(!b.allow(ms(1_000)));
        // Backwards, repeatedly, and forwards again to the same point.
        for t in [500, 0, 999, 0, 1_000, 1_050] {
            assert!(!b.allow(ms(t)), "t = {t}");
        }
        assert!(b.allow(ms(1_100)));
        assert!(!b.allow(ms(1_100)));
        assert!(!b.allow(ms(0)));
        assert!(b.allow(ms(1_200)));
    }

    #[test]
    fn huge_gaps_saturate() {
        let mut b = TokenBucket::new(Duration::from_nanos(1), u32::MAX);
        assert!(b.allow(Instant::ZERO));
        assert!(b.allow(Instant::MAX));
        assert_eq!(b.available(Instant::MAX), u32::MAX - 1);
        let mut b = TokenBucket::new(Duration::MAX, 1);
        assert!(b.allow(Instant::ZERO));
        assert!(!b.allow(Instant::MAX));
        let mut b = TokenBucket::new(Duration::from_millis(100), 5);
        for _ in 0..5 {
            assert!(b.allow(ms(0)));
        }
        assert_eq!(b.available(Instant::MAX), 5);
        for _ in 0..5 {
            assert!(b.allow(Instant::MAX));
        }
        assert!(!b.allow(Instant::MAX));
    }

    #[test]
    fn zero_interval_is_unlimited() {
        let mut b = TokenBucket::new(Duration::ZERO, 1);
        for i in 0..1000 {
            assert!(b.allow(ms(i % 3)));
        }
        assert_eq!(b.available(Instant::ZERO), u32::MAX);
        // Switching to a limit starts from a full bucket.
        b.set(Duration::from_secs(1), 2);
        assert!(b.allow(ms(0)));
        assert!(b.allow(ms(0)));
        assert!(!b.allow(ms(0)));
    }

    #[test]
    fn zero_burst_is_one() {
        let mut b = TokenBucket::new(Duration::from_secs(1), 0);
        assert_eq!(b.burst(), 1);
        assert!(b.allow(ms(0)));
        assert!(!b.allow(ms(0)));
        b.set(Duration::from_secs(1), 0);
        assert_eq!(b.burst(), 1);
    }

    #[test]
    fn set_clamps_tokens() {
        let mut b = TokenBucket::new(Duration::from_secs(1), 10);
        b.set(Duration::from_secs(1), 2);
        assert!(b.allow(ms(0)));
        assert!(b.allow(ms(0)));
        assert!(!b.allow(ms(0)));
        b.set(Duration::from_millis(10), 100);
        assert_eq!(b.interval(), Duration::from_millis(10));
        assert!(!b.allow(ms(9)));
        assert!(b.allow(ms(10)));
    }

    proptest! {
        /// Whatever the sequence of instants, the number of allowed events never exceeds
        /// burst + (max instant seen - first instant) / interval: the bucket starts full, so
        /// only time after the first call earns tokens, and going backwards earns nothing.
        #[test]
        fn never_exceeds_rate(interval_ms in 1u64..1000, burst in 0u32..20,
                              times in proptest::collection::vec(0u64..100_000, 1..300)) {
            let mut b = TokenBucket::new(Duration::from_millis(interval_ms), burst);
            let first = times[0];
            let mut hi = first;
            let mut allowed = 0u64;
            for &t in &times {
                hi = hi.max(t);
                if b.allow(ms(t)) {
                    allowed += 1;
                }
                let bound = u64::from(burst.max(1)) + (hi - first) / interval_ms;
                prop_assert!(allowed <= bound);
            }
        }

        #[test]
        fn steady_rate_is_granted(interval_ms in 1u64..100, burst in 1u32..10, n in 1u64..50) {
            // Asking exactly once per interval is always allowed.
            let mut b = TokenBucket::new(Duration::from_millis(interval_ms), burst);
            for i in 0..n {
                prop_assert!(b.allow(ms(1_000 + i * interval_ms)));
            }
        }
    }
}
