//! NewReno congestion control: RFC 5681 slow start and congestion avoidance with
//! appropriate byte counting (RFC 3465), and the window settings of RFC 6582 fast recovery.
//!
//! The Tcb runs the recovery procedure itself (RFC 6675 / RFC 6582); this type only sets
//! `cwnd` and `ssthresh`:
//!
//! * slow start (`cwnd < ssthresh`): `cwnd += min(acked, L * SMSS)` per ACK with L = 2
//!   (RFC 3465 §2.2; RFC 5681 §3.1 eq. (2) is the L = 1 case), never beyond `ssthresh`;
//! * congestion avoidance: byte counting (RFC 3465 §2.1, RFC 5681 §3.1 eq. (3) variant):
//!   `bytes_acked` accumulates acknowledged bytes and every full `cwnd` of them adds one SMSS,
//!   i.e. +1 SMSS per RTT;
//! * congestion event / RTO: `ssthresh = max(FlightSize / 2, 2 * SMSS)` (RFC 5681 §3.1
//!   eq. (4)); `cwnd = ssthresh` on entering recovery, `cwnd = 1 SMSS` (loss window) on RTO.
//!   A second RTO without any ACK progress in between keeps `ssthresh` (RFC 5681 §3.1:
//!   "the value of ssthresh is held constant" for repeated timeouts of the same segment).
//!
//! Invariants: `SMSS <= cwnd <= MAX_CWND`; `ssthresh` is `u32::MAX` or `>= 2 * SMSS`;
//! `bytes_acked < cwnd` after every ACK; integer arithmetic only, saturating.

use crate::time::Instant;

use super::{
    clamp_window, half_flight_ssthresh, initial_window, sanitize_mss, AckSample, CongestionControl,
    INITIAL_SSTHRESH, MAX_CWND,
};

/// Appropriate byte counting limit L in slow start, in segments (RFC 3465 §2.2).
const ABC_L: u64 = 2;

/// NewReno congestion control state (RFC 5681, RFC 6582, RFC 3465).
#[derive(Debug, Clone)]
pub struct NewReno {
    mss: u32,
    init_segments: u32,
    cwnd: u32,
    ssthresh: u32,
    /// Congestion-avoidance byte counter (RFC 3465 §2.1 `bytes_acked`).
    bytes_acked: u32,
    /// An RTO happened and no ACK has advanced since (for RFC 5681 §3.1 repeated timeouts).
    rto_pending: bool,
}

impl NewReno {
    /// New state: SMSS `mss` (0 treated as 1), initial window `init_cwnd_segments * mss`
    /// (at least one segment), `ssthresh = u32::MAX`.
    pub fn new(mss: u32, init_cwnd_segments: u32) -> Self {
        let mss = sanitize_mss(mss);
        NewReno {
            mss,
            init_segments: init_cwnd_segments,
            cwnd: initial_window(mss, init_cwnd_segments),
            ssthresh: INITIAL_SSTHRESH,
            bytes_acked: 0,
            rto_pending: false,
        }
    }

    /// The SMSS in use.
    pub fn mss(&self) -> u32 {
        self.mss
    }

    /// The initial (and restart) window, RFC 5681 §3.1 / §4.1.
    pub fn initial_window(&self) -> u32 {
        initial_window(self.mss, self.init_segments)
    }
}

impl NewReno {
    /// See [`super::Cc::undo_from`].
    pub(crate) fn undo_from(&mut self, prior: &NewReno) {
        self.cwnd = self.cwnd.max(prior.cwnd);
        self.ssthresh = self.ssthresh.max(prior.ssthresh);
    }
}

impl CongestionControl for NewReno {
    fn name(&self) -> &'static str {
        "newreno"
    }

    fn cwnd(&self) -> u32 {
        self.cwnd
    }

    fn ssthresh(&self) -> u32 {
        self.ssthresh
    }

    fn on_ack(&mut self, s: &AckSample) {
        if s.acked == 0 {
            return;
        }
        self.rto_pending = false;
        if !s.cwnd_limited {
            // RFC 7661 idea: an under-used window must not grow.
            return;
        }
        let mss = u64::from(self.mss);
        let cwnd = u64::from(self.cwnd);
        if self.cwnd < self.ssthresh {
            // RFC 5681 §3.1 slow start with RFC 3465 §2.2 byte counting, L = 2 SMSS; the
            // window stops at ssthresh (the remainder of this ACK is not carried over).
            let inc = u64::from(s.acked).min(ABC_L * mss);
            let limit = u64::from(self.ssthresh).min(u64::from(MAX_CWND));
            self.cwnd = clamp_window((cwnd + inc).min(limit).max(cwnd), self.mss);
        } else {
            // RFC 3465 §2.1 / RFC 5681 §3.1: one SMSS per cwnd bytes acknowledged.
            let total = u64::from(self.bytes_acked) + u64::from(s.acked);
            let steps = total / cwnd;
            let rest = total - steps * cwnd;
            self.cwnd = clamp_window(cwnd.saturating_add(steps.saturating_mul(mss)), self.mss);
            // Keep the counter below the (possibly larger) new window.
            self.bytes_acked = rest.min(u64::from(self.cwnd) - 1) as u32;
        }
    }

    fn on_congestion_event(&mut self, _now: Instant, prior_in_flight: u32) {
        // RFC 5681 §3.2 step 2 / RFC 6582 §3.2 step 2: ssthresh = max(FlightSize/2, 2*SMSS);
        // the Tcb runs recovery with cwnd = ssthresh (no window inflation here).
        self.ssthresh = half_flight_ssthresh(prior_in_flight, self.mss);
        self.cwnd = clamp_window(u64::from(self.ssthresh), self.mss);
        self.bytes_acked = 0;
        self.rto_pending = false;
    }

    fn on_recovery_exit(&mut self, _now: Instant) {
        // RFC 6582 §3.2 step 3, option (2): cwnd = ssthresh on a full ACK. Without a
        // preceding congestion event ssthresh is still "infinite": keep cwnd.
        if self.ssthresh != INITIAL_SSTHRESH {
            self.cwnd = clamp_window(u64::from(self.ssthresh), self.mss);
        }
        self.bytes_acked = 0;
    }

    fn on_rto(&mut self, _now: Instant, prior_in_flight: u32) {
        // RFC 5681 §3.1 eq. (4); held constant on repeated timeouts without progress.
        if !self.rto_pending {
            self.ssthresh = half_flight_ssthresh(prior_in_flight, self.mss);
        }
        self.rto_pending = true;
        // Loss window: one segment.
        self.cwnd = self.mss;
        self.bytes_acked = 0;
    }

    fn on_idle_restart(&mut self, _now: Instant) {
        // RFC 5681 §4.1: RW = min(IW, cwnd).
        self.cwnd = self.cwnd.min(self.initial_window());
        self.bytes_acked = 0;
    }

    fn set_mss(&mut self, mss: u32) {
        self.mss = sanitize_mss(mss);
        self.cwnd = clamp_window(u64::from(self.cwnd), self.mss);
        if self.ssthresh != INITIAL_SSTHRESH {
            self.ssthresh = self.ssthresh.max(2 * self.mss);
        }
        self.bytes_acked = self.bytes_acked.min(self.cwnd - 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::seq::SeqNum;
    use core::time::Duration;

    const MSS: u32 = 1000;

    fn ack(now_ms: u64, acked: u32, limited: bool) -> AckSample {
        AckSample {
            now: Instant::from_millis(now_ms),
            acked,
            prior_in_flight: 0,
            rtt: Some(Duration::from_millis(50)),
            srtt: Some(Duration::from_millis(50)),
            min_rtt: Some(Duration::from_millis(50)),
            cwnd_limited: limited,
            ack_seq: SeqNum(0),
            snd_nxt: SeqNum(0),
        }
    }

    /// Acknowledges one full window, one SMSS per ACK, and returns the new cwnd.
    fn ack_one_window(cc: &mut NewReno, now_ms: u64) -> u32 {
        let segs = cc.cwnd() / MSS;
        for _ in 0..segs {
            cc.on_ack(&ack(now_ms, MSS, true));
        }
        cc.cwnd()
    }

    #[test]
    fn slow_start_doubles_per_rtt() {
        let mut cc = NewReno::new(MSS, 10);
        assert_eq!(cc.cwnd(), 10 * MSS);
        let mut expect = 10 * MSS;
        for rtt in 0..6 {
            let w = ack_one_window(&mut cc, rtt * 50);
            expect *= 2;
            assert_eq!(w, expect);
            assert!(cc.in_slow_start());
        }
    }

    #[test]
    fn slow_start_byte_counting_limit() {
        // One stretch ACK covering 10 segments grows cwnd by at most L = 2 SMSS.
        let mut cc = NewReno::new(MSS, 10);
        cc.on_ack(&ack(0, 10 * MSS, true));
        assert_eq!(cc.cwnd(), 12 * MSS);
        // Partial segment: grows by exactly the acked bytes.
        cc.on_ack(&ack(0, 100, true));
        assert_eq!(cc.cwnd(), 12 * MSS + 100);
    }

    #[test]
    fn slow_start_stops_at_ssthresh() {
        let mut cc = NewReno::new(MSS, 10);
        cc.on_congestion_event(Instant::ZERO, 40 * MSS); // ssthresh 20 segments
        assert_eq!(cc.ssthresh(), 20 * MSS);
        cc.on_rto(Instant::ZERO, 40 * MSS); // loss window; ssthresh from the same flight
        assert_eq!(cc.cwnd(), MSS);
        assert_eq!(cc.ssthresh(), 20 * MSS);
        let mut now = 0;
        while cc.in_slow_start() {
            now += 50;
            ack_one_window(&mut cc, now);
            assert!(cc.cwnd() <= 20 * MSS);
        }
        assert_eq!(cc.cwnd(), 20 * MSS);
    }

    #[test]
    fn congestion_avoidance_one_mss_per_rtt() {
        let mut cc = NewReno::new(MSS, 10);
        cc.on_congestion_event(Instant::ZERO, 40 * MSS);
        cc.on_recovery_exit(Instant::ZERO);
        assert_eq!(cc.cwnd(), 20 * MSS);
        assert!(!cc.in_slow_start());
        for i in 1..=10u32 {
            let w = ack_one_window(&mut cc, u64::from(i) * 50);
            assert_eq!(w, (20 + i) * MSS);
        }
        // Many small ACKs (byte counting) give the same growth.
        let before = cc.cwnd();
        let mut left = before;
        while left > 0 {
            let a = left.min(333);
            cc.on_ack(&ack(1000, a, true));
            left -= a;
        }
        assert_eq!(cc.cwnd(), before + MSS);
    }

    #[test]
    fn multiplicative_decrease_halves_flight() {
        let mut cc = NewReno::new(MSS, 10);
        for i in 0..4 {
            ack_one_window(&mut cc, i * 50);
        }
        assert_eq!(cc.cwnd(), 160 * MSS);
        cc.on_congestion_event(Instant::from_millis(300), 160 * MSS);
        assert_eq!(cc.ssthresh(), 80 * MSS);
        assert_eq!(cc.cwnd(), 80 * MSS);
        cc.on_recovery_exit(Instant::from_millis(400));
        assert_eq!(cc.cwnd(), 80 * MSS);
        // Tiny flight: floor of 2 SMSS.
        cc.on_congestion_event(Instant::from_millis(500), MSS);
        assert_eq!(cc.ssthresh(), 2 * MSS);
        assert_eq!(cc.cwnd(), 2 * MSS);
    }

    #[test]
    fn rto_sets_loss_window_and_holds_ssthresh_on_repeat() {
        let mut cc = NewReno::new(MSS, 10);
        ack_one_window(&mut cc, 0);
        cc.on_rto(Instant::from_secs(1), 20 * MSS);
        assert_eq!(cc.cwnd(), MSS);
        assert_eq!(cc.ssthresh(), 10 * MSS);
        // Backed-off retransmission of the same segment times out again: flight is now one
        // segment, but ssthresh must not collapse (RFC 5681 §3.1).
        cc.on_rto(Instant::from_secs(3), MSS);
        assert_eq!(cc.cwnd(), MSS);
        assert_eq!(cc.ssthresh(), 10 * MSS);
        // After progress a new timeout recomputes it.
        cc.on_ack(&ack(3100, MSS, true));
        cc.on_rto(Instant::from_secs(5), 4 * MSS);
        assert_eq!(cc.ssthresh(), 2 * MSS);
    }

    #[test]
    fn no_growth_when_not_cwnd_limited() {
        let mut cc = NewReno::new(MSS, 10);
        for _ in 0..100 {
            cc.on_ack(&ack(0, MSS, false));
        }
        assert_eq!(cc.cwnd(), 10 * MSS);
        cc.on_congestion_event(Instant::ZERO, 20 * MSS);
        for _ in 0..100 {
            cc.on_ack(&ack(0, MSS, false));
        }
        assert_eq!(cc.cwnd(), 10 * MSS);
    }

    #[test]
    fn idle_restart_and_mss_change() {
        let mut cc = NewReno::new(MSS, 4);
        ack_one_window(&mut cc, 0);
        assert_eq!(cc.cwnd(), 8 * MSS);
        cc.on_idle_restart(Instant::from_secs(10));
        assert_eq!(cc.cwnd(), 4 * MSS);
        cc.on_rto(Instant::from_secs(11), 0);
        cc.on_idle_restart(Instant::from_secs(20));
        assert_eq!(cc.cwnd(), MSS, "restart window never raises cwnd");
        cc.set_mss(3000);
        assert_eq!(cc.mss(), 3000);
        assert_eq!(cc.cwnd(), 3000);
        assert!(cc.ssthresh() >= 6000);
        assert_eq!(cc.initial_window(), 12_000);
        cc.set_mss(0);
        assert_eq!(cc.mss(), 1);
    }

    #[test]
    fn huge_values_saturate() {
        let mut cc = NewReno::new(u32::MAX, u32::MAX);
        cc.on_ack(&ack(0, u32::MAX, true));
        assert_eq!(cc.cwnd(), MAX_CWND);
        cc.on_congestion_event(Instant::ZERO, u32::MAX);
        cc.on_recovery_exit(Instant::ZERO);
        for _ in 0..10 {
            cc.on_ack(&ack(0, u32::MAX, true));
        }
        assert!(cc.cwnd() <= MAX_CWND);
        let mut cc = NewReno::new(1, 1);
        cc.on_congestion_event(Instant::ZERO, 0);
        cc.on_recovery_exit(Instant::ZERO);
        cc.on_ack(&ack(0, u32::MAX, true));
        assert!(cc.cwnd() <= MAX_CWND && cc.cwnd() >= 1);
    }
}
