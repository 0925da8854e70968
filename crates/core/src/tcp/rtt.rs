//! Round-trip time estimation and the retransmission timeout (RFC 6298).
//!
//! SRTT and RTTVAR follow RFC 6298 §2 with alpha = 1/8 and beta = 1/4; the RTO is
//! SRTT + max(G, 4·RTTVAR), clamped to the `tcp_rexmit_interval_min`/`_max` tunables
//! (§2.4, §2.5); with `tcp_rexmit_min_on_variance` the minimum bounds the variance term
//! instead, RTO = SRTT + max(4·RTTVAR, min) (Linux's choice: RFC 6298 §2.3 with the
//! minimum in the place of G). Exponential backoff (§5.5) multiplies the RTO while a retransmission
//! timer keeps firing; a fresh sample (taken only from segments that were not
//! retransmitted, Karn's algorithm §3, or from timestamps, RFC 7323 §4) clears it.

use super::seq::SeqNum;
use crate::time::Instant;
use core::time::Duration;

/// Clock granularity G of RFC 6298 §2 (ember's timers have 1 ms resolution).
const G: Duration = Duration::from_millis(1);

/// The RTT estimator and RTO of one connection.
#[derive(Debug, Clone)]
pub struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    min_rtt: Option<Duration>,
    latest: Option<Duration>,
    rto_initial: Duration,
    rto_min: Duration,
    rto_max: Duration,
    /// Apply `rto_min` to the variance term rather than to the whole RTO.
    min_on_variance: bool,
    backoff: u32,
    /// The segment being timed for an RTT sample (Karn, RFC 6298 §3): (end sequence,
    /// send time).
    pub(super) timed: Option<(SeqNum, Instant)>,
    /// Our timestamp clock at the last retransmission timeout: echoes of older
    /// timestamps are not RTT samples (they may measure the timeout itself).
    pub(super) ts_floor: Option<u32>,
}

impl RttEstimator {
    /// A new estimator: RTO = `initial` until the first sample (RFC 6298 §2.1).
    pub fn new(initial: Duration, min: Duration, max: Duration) -> Self {
        let max = max.max(min);
        RttEstimator {
            srtt: None,
            rttvar: Duration::ZERO,
            min_rtt: None,
            latest: None,
            rto_initial: initial.clamp(min, max),
            rto_min: min,
            rto_max: max,
            min_on_variance: false,
            backoff: 0,
            timed: None,
            ts_floor: None,
        }
    }

    /// With `on`, the minimum bounds the variance term: RTO = SRTT + max(4·RTTVAR, min)
    /// (as Linux), so the RTO stays at least the minimum above SRTT.
    pub fn set_min_on_variance(&mut self, on: bool) {
        self.min_on_variance = on;
    }

    /// Feeds one RTT measurement (RFC 6298 §2.2, §2.3) and clears the backoff.
    pub fn sample(&mut self, rtt: Duration) {
        // Guard against absurd samples (e.g. a peer echoing a bogus timestamp).
        let rtt = rtt.min(Duration::from_secs(3600));
        self.latest = Some(rtt);
        self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(srtt) => {
                let delta = srtt.abs_diff(rtt);
                self.rttvar = (self.rttvar * 3 + delta) / 4;
                self.srtt = Some((srtt * 7 + rtt) / 8);
            }
        }
        self.backoff = 0;
    }

    /// The RTO before backoff (RFC 6298 §2.4/§2.5 with ember's bounds).
    pub fn base_rto(&self) -> Duration {
        match self.srtt {
            None => self.rto_initial,
            Some(srtt) => {
                let floor = if self.min_on_variance {
                    self.rto_min
                } else {
                    G
                };
                (srtt + (self.rttvar * 4).max(floor)).clamp(self.rto_min, self.rto_max)
            }
        }
    }

    /// The current RTO including exponential backoff (RFC 6298 §5.5).
    pub fn rto(&self) -> Duration {
        let base = self.base_rto();
        let factor = 1u32.checked_shl(self.backoff.min(16)).unwrap_or(u32::MAX);
        base.saturating_mul(factor).min(self.rto_max)
    }

    /// The retransmission timer expired: back off (RFC 6298 §5.5).
    pub fn back_off(&mut self) {
        self.backoff = self.backoff.saturating_add(1).min(31);
    }

    /// Clears the backoff without a sample (new data was acknowledged).
    pub fn reset_backoff(&mut self) {
        self.backoff = 0;
    }

    /// How many times the timer has backed off in a row.
    pub fn backoff(&self) -> u32 {
        self.backoff
    }

    /// Smoothed RTT, if any sample was taken.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// RTT variation.
    pub fn rttvar(&self) -> Duration {
        self.rttvar
    }

    /// The lowest RTT seen.
    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    /// The most recent sample.
    pub fn latest(&self) -> Option<Duration> {
        self.latest
    }

    /// RFC 6298 §5 note: after the SYN handshake was retransmitted with no sample, the RTO
    /// for data is reset to 3 s if it was backed off (RFC 6298 §5.7).
    pub fn syn_retransmitted_no_sample(&mut self) {
        if self.srtt.is_none() {
            self.rto_initial = Duration::from_secs(3).clamp(self.rto_min, self.rto_max);
            self.backoff = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn est() -> RttEstimator {
        RttEstimator::new(
            Duration::from_secs(1),
            Duration::from_millis(200),
            Duration::from_secs(60),
        )
    }

    #[test]
    fn initial_rto_is_one_second() {
        assert_eq!(est().rto(), Duration::from_secs(1));
    }

    #[test]
    fn first_sample_sets_srtt_and_rttvar() {
        let mut e = est();
        e.sample(Duration::from_millis(100));
        assert_eq!(e.srtt(), Some(Duration::from_millis(100)));
        assert_eq!(e.rttvar(), Duration::from_millis(50));
        // 100 + 4*50 = 300 ms.
        assert_eq!(e.rto(), Duration::from_millis(300));
        e.sample(Duration::from_millis(100));
        // rttvar = 3/4*50 = 37.5; srtt = 100; rto = 250 ms.
        assert_eq!(e.rto(), Duration::from_micros(250_000));
    }

    /// `tcp_rexmit_min_on_variance`: two 100 ms samples give 100 + max(4·37.5, 200) =
    /// 300 ms (Linux's RTO), not 250 ms; a tiny RTT still gets at least the minimum.
    #[test]
    fn min_on_variance_bounds_the_variance_term() {
        let mut e = est();
        e.set_min_on_variance(true);
        e.sample(Duration::from_millis(100));
        e.sample(Duration::from_millis(100));
        assert_eq!(e.rto(), Duration::from_millis(300));
        let mut e = est();
        e.set_min_on_variance(true);
        e.sample(Duration::from_millis(1));
        assert_eq!(e.rto(), Duration::from_millis(201));
    }

    #[test]
    fn rto_is_clamped_and_backs_off() {
        let mut e = est();
        e.sample(Duration::from_millis(1));
        assert_eq!(e.rto(), Duration::from_millis(200));
        e.back_off();
        assert_eq!(e.rto(), Duration::from_millis(400));
        e.back_off();
        assert_eq!(e.rto(), Duration::from_millis(800));
        for _ in 0..40 {
            e.back_off();
        }
        assert_eq!(e.rto(), Duration::from_secs(60));
        e.sample(Duration::from_millis(1));
        assert_eq!(e.rto(), Duration::from_millis(200));
    }
}
