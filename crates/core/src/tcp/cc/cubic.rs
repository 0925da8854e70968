//! CUBIC congestion control (RFC 9438) with HyStart++ slow start (RFC 9406).
//!
//! Window growth in congestion avoidance follows the cubic function of RFC 9438 §4.2
//! (in segments, t in seconds since the start of the congestion-avoidance epoch):
//!
//! ```text
//! W_cubic(t) = C * (t - K)^3 + W_max,   K = cbrt((W_max - cwnd_epoch) / C)
//! ```
//!
//! with C = 0.4 and beta_cubic = 0.7. Per ACK the window moves towards
//! `target = clamp(W_cubic(t + RTT), cwnd, 1.5 * cwnd)` by `(target - cwnd) / cwnd` per
//! acknowledged segment (§4.4 concave, §4.5 convex region), unless the Reno-friendly estimate
//! `W_est` (§4.3, alpha_cubic = 3(1 - beta)/(1 + beta), switching to 1 once W_est reaches
//! `cwnd_prior`) is larger, in which case cwnd follows W_est. A congestion event applies
//! fast convergence (§4.7) and the multiplicative decrease (§4.6); an RTO sets the loss
//! window and starts the next epoch with K = 0 and W_max = cwnd_epoch (§4.8), as does leaving
//! the first slow start through HyStart++ without a loss (§4.10). Time spent not
//! cwnd-limited is cut out of the epoch (the curve is frozen, §5.8) and an idle restart
//! begins a new epoch.
//!
//! The initial slow start uses HyStart++ (RFC 9406 §4.2): rounds are delimited by
//! `snd_nxt` at the start of each round and end when the cumulative ACK reaches it; after
//! `N_RTT_SAMPLE` RTT samples in a round, a rise of the round's minimum RTT by
//! `clamp(lastRoundMinRTT / 8, 4 ms, 16 ms)` moves to Conservative Slow Start (CSS), which
//! grows 1/CSS_GROWTH_DIVISOR as fast and ends in congestion avoidance after CSS_ROUNDS
//! rounds (or returns to slow start if the RTT falls back below the CSS baseline). Later
//! slow starts (after an RTO) are standard ones bounded by ssthresh (RFC 9406 §4.2).
//!
//! **ACK-train extension** (beyond RFC 9406, from the original HyStart and Linux CUBIC;
//! `hystart_ack_train`, on by default): slow start also ends, straight into congestion
//! avoidance, once ACKs arriving at most 2 ms apart have formed a train longer than half the
//! minimum RTT while cwnd-limited (and cwnd >= 16 segments). Reason: ember does not pace, so
//! a slow-start window leaves in a burst at twice the bottleneck rate, and the queue that
//! burst builds is only seen in RTT samples a round later; by then the doubling round has
//! already overflowed a buffer of about one BDP, and CSS's further 1.25^5 ~ 3x growth
//! overflows it again. In a packet-level model of a 1 Gbit/s, 10 ms path with a one-BDP
//! drop-tail buffer (test `no_loss_burst_on_gigabit_10ms_path`), plain slow start loses
//! ~1670 packets before it can react, RFC 9406 alone ~700-900, and with the ACK train 0
//! (slow start ends at ~1.3 BDP). An ACK train measures the bottleneck directly: while cwnd
//! is below the BDP each window's ACKs come back as a train as long as the window took to
//! cross the bottleneck, separated by idle time.
//!
//! Units: everything is kept in bytes (f64) internally and converted to segments only inside
//! the RFC formulas, so an MSS change never rescales the state. Invariants: the internal
//! cwnd is finite and within `[SMSS, MAX_CWND]` after every call; no clock is read.

use core::time::Duration;

use crate::tcp::seq::SeqNum;
use crate::time::Instant;

use super::{
    clamp_window, initial_window, sanitize_mss, AckSample, CongestionControl, INITIAL_SSTHRESH,
    MAX_CWND,
};

/// CUBIC scaling constant C (RFC 9438 §4.2, §5), segments / s^3.
pub const C: f64 = 0.4;
/// CUBIC multiplicative decrease factor beta_cubic (RFC 9438 §4.6).
pub const BETA: f64 = 0.7;
/// Reno-friendly additive increase factor alpha_cubic = 3(1 - beta)/(1 + beta) (RFC 9438 §4.3).
pub const ALPHA: f64 = 3.0 * (1.0 - BETA) / (1.0 + BETA);

/// HyStart++ lower bound of the RTT increase threshold (RFC 9406 §4.3).
pub const MIN_RTT_THRESH: Duration = Duration::from_millis(4);
/// HyStart++ upper bound of the RTT increase threshold (RFC 9406 §4.3).
pub const MAX_RTT_THRESH: Duration = Duration::from_millis(16);
/// HyStart++ divisor of the last round's minimum RTT giving the threshold (RFC 9406 §4.3).
pub const MIN_RTT_DIVISOR: u32 = 8;
/// HyStart++ RTT samples needed per round before deciding (RFC 9406 §4.3).
pub const N_RTT_SAMPLE: u32 = 8;
/// HyStart++ growth divisor in Conservative Slow Start (RFC 9406 §4.3).
pub const CSS_GROWTH_DIVISOR: u32 = 4;
/// HyStart++ number of CSS rounds before congestion avoidance (RFC 9406 §4.3).
pub const CSS_ROUNDS: u32 = 5;
/// ACK-train extension: ACKs at most this far apart form a train.
pub const ACK_TRAIN_DELTA: Duration = Duration::from_millis(2);
/// ACK-train extension: only checked once cwnd is at least this many segments.
pub const ACK_TRAIN_LOW_WINDOW: u32 = 16;
/// Default per-ACK slow-start growth limit L, in segments, for a non-paced sender
/// (RFC 9406 §4.3).
pub const DEFAULT_SS_ACK_LIMIT: u32 = 8;

/// Where HyStart++ is within the initial slow start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HyStartPhase {
    /// Standard slow start, watching the RTT (RFC 9406 §4.2).
    SlowStart,
    /// Conservative Slow Start after an RTT increase (RFC 9406 §4.2).
    ConservativeSlowStart,
    /// HyStart++ is over (slow start ended, a congestion event or RTO happened); later slow
    /// starts are standard ones bounded by ssthresh (RFC 9406 §4).
    Done,
}

/// HyStart++ round and RTT tracking (RFC 9406 §4.2).
#[derive(Debug, Clone)]
struct HyStart {
    phase: HyStartPhase,
    /// `windowEnd`: the round ends when the cumulative ACK reaches it.
    window_end: Option<SeqNum>,
    /// `lastRoundMinRTT` (`None` = infinity).
    last_round_min: Option<Duration>,
    /// `currentRoundMinRTT` (`None` = infinity).
    cur_round_min: Option<Duration>,
    /// `rttSampleCount` of the current round.
    samples: u32,
    /// `cssBaselineMinRtt`.
    css_baseline: Duration,
    /// CSS rounds completed (the partial round in which CSS started counts).
    css_rounds: u32,
    /// ACK-train extension: first and latest ACK of the current train (ACKs at most
    /// [`ACK_TRAIN_DELTA`] apart while cwnd-limited); `train_last` is `None` when no train
    /// is running.
    train_start: Instant,
    train_last: Option<Instant>,
    /// Smallest RTT sample seen in slow start.
    min_rtt: Option<Duration>,
}

impl HyStart {
    fn new() -> Self {
        HyStart {
            phase: HyStartPhase::SlowStart,
            window_end: None,
            last_round_min: None,
            cur_round_min: None,
            samples: 0,
            css_baseline: Duration::ZERO,
            css_rounds: 0,
            train_start: Instant::ZERO,
            train_last: None,
            min_rtt: None,
        }
    }

    fn reset_rounds(&mut self) {
        self.window_end = None;
        self.last_round_min = None;
        self.cur_round_min = None;
        self.samples = 0;
        self.train_last = None;
    }

    /// Round bookkeeping at the arrival of an ACK. Returns `true` when CSS has run for
    /// CSS_ROUNDS rounds and slow start must end.
    fn on_ack_round(&mut self, ack_seq: SeqNum, snd_nxt: SeqNum) -> bool {
        let round_over = match self.window_end {
            None => true,
            Some(end) => ack_seq >= end,
        };
        if round_over {
            // RFC 9406 §4.2: at the start of each round.
            self.last_round_min = self.cur_round_min;
            self.cur_round_min = None;
            self.samples = 0;
            self.window_end = Some(snd_nxt);
            if self.phase == HyStartPhase::ConservativeSlowStart {
                self.css_rounds = self.css_rounds.saturating_add(1);
                if self.css_rounds >= CSS_ROUNDS {
                    return true;
                }
            }
        }
        false
    }

    /// RTT sampling and the delay-increase / spurious-exit checks (RFC 9406 §4.2).
    fn on_rtt(&mut self, rtt: Option<Duration>) {
        if let Some(rtt) = rtt {
            self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
            self.cur_round_min = Some(self.cur_round_min.map_or(rtt, |m| m.min(rtt)));
            self.samples = self.samples.saturating_add(1);
        }
        if self.samples < N_RTT_SAMPLE {
            return;
        }
        let Some(cur) = self.cur_round_min else {
            return;
        };
        match self.phase {
            HyStartPhase::SlowStart => {
                let Some(last) = self.last_round_min else {
                    return;
                };
                let thresh = (last / MIN_RTT_DIVISOR).clamp(MIN_RTT_THRESH, MAX_RTT_THRESH);
                if last.checked_add(thresh).is_some_and(|lim| cur >= lim) {
                    self.css_baseline = cur;
                    self.css_rounds = 0;
                    self.phase = HyStartPhase::ConservativeSlowStart;
                }
            }
            HyStartPhase::ConservativeSlowStart => {
                if cur < self.css_baseline {
                    // The RTT increase was spurious: back to standard slow start.
                    self.css_baseline = Duration::ZERO;
                    self.phase = HyStartPhase::SlowStart;
                }
            }
            HyStartPhase::Done => {}
        }
    }

    /// ACK-train extension (after HyStart, Ha & Rhee 2008): returns `true` once a train
    /// of ACKs arriving at most [`ACK_TRAIN_DELTA`] apart while the sender is cwnd-limited
    /// has lasted more than half the minimum RTT. While cwnd is below the bandwidth-delay
    /// product, each window's ACKs come back as a train as long as the window took to
    /// cross the bottleneck, separated by idle gaps; a train of half an RTT therefore
    /// means cwnd has reached about one BDP (and a queue is about to build).
    fn ack_train_full(
        &mut self,
        now: Instant,
        min_rtt: Option<Duration>,
        cwnd_limited: bool,
    ) -> bool {
        if !cwnd_limited {
            // ACK spacing then reflects the application, not the bottleneck.
            self.train_last = None;
            return false;
        }
        match self.train_last {
            Some(last) if now >= last && now - last <= ACK_TRAIN_DELTA => {}
            _ => self.train_start = now,
        }
        self.train_last = Some(now);
        let Some(min_rtt) = min_rtt.or(self.min_rtt) else {
            return false;
        };
        !min_rtt.is_zero() && now.saturating_duration_since(self.train_start) > min_rtt / 2
    }
}

/// CUBIC congestion control state (RFC 9438) with HyStart++ (RFC 9406).
#[derive(Debug, Clone)]
pub struct Cubic {
    /// Use HyStart++ in the initial slow start (default `true`). When `false`, slow start
    /// runs until the first loss (or ssthresh).
    pub hystart_enabled: bool,
    /// Also leave slow start when an ACK train spans half the minimum RTT (an extension to
    /// RFC 9406 taken from the original HyStart, default `true`; needs `hystart_enabled`).
    /// Without it, a burst-sending (unpaced) flow notices the queue only a round after it
    /// formed and overshoots shallow buffers; see the module documentation.
    pub hystart_ack_train: bool,
    /// Apply fast convergence on congestion events (RFC 9438 §4.7, default `true`).
    pub fast_convergence: bool,
    /// Per-ACK slow-start growth limit L in segments: `cwnd += min(acked, L * SMSS)`
    /// (RFC 9406 §4.3: 8 for a non-paced sender, the default; `u32::MAX` for a paced one).
    pub ss_ack_limit: u32,
    mss: u32,
    init_segments: u32,
    /// Congestion window, bytes.
    cwnd: f64,
    ssthresh: u32,
    /// W_max, bytes (0 = undefined: the next epoch uses W_max = cwnd_epoch, K = 0).
    w_max: f64,
    /// cwnd_prior, bytes: cwnd when ssthresh was last set (RFC 9438 §4.3, §4.6).
    cwnd_prior: f64,
    /// K, seconds.
    k: f64,
    /// Start of the current congestion-avoidance epoch (`None`: none started).
    epoch_start: Option<Instant>,
    /// cwnd_epoch, bytes.
    cwnd_epoch: f64,
    /// W_est, bytes.
    w_est: f64,
    /// Time of the previous ACK (for freezing the epoch while not cwnd-limited).
    last_ack: Option<Instant>,
    /// An RTO happened and no ACK has advanced since (RFC 5681 §3.1 repeated timeouts).
    rto_pending: bool,
    hystart: HyStart,
}

impl Cubic {
    /// New state: SMSS `mss` (0 treated as 1), initial window `init_cwnd_segments * mss`
    /// (at least one segment), `ssthresh = u32::MAX`, HyStart++ and fast convergence on.
    pub fn new(mss: u32, init_cwnd_segments: u32) -> Self {
        let mss = sanitize_mss(mss);
        Cubic {
            hystart_enabled: true,
            hystart_ack_train: true,
            fast_convergence: true,
            ss_ack_limit: DEFAULT_SS_ACK_LIMIT,
            mss,
            init_segments: init_cwnd_segments,
            cwnd: f64::from(initial_window(mss, init_cwnd_segments)),
            ssthresh: INITIAL_SSTHRESH,
            w_max: 0.0,
            cwnd_prior: 0.0,
            k: 0.0,
            epoch_start: None,
            cwnd_epoch: 0.0,
            w_est: 0.0,
            last_ack: None,
            rto_pending: false,
            hystart: HyStart::new(),
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

    /// W_max in bytes (0 while undefined).
    pub fn w_max(&self) -> u32 {
        self.w_max.clamp(0.0, f64::from(MAX_CWND)) as u32
    }

    /// K of the current epoch (zero when no epoch is running).
    pub fn k(&self) -> Duration {
        Duration::try_from_secs_f64(self.k).unwrap_or(Duration::ZERO)
    }

    /// The HyStart++ phase.
    pub fn hystart_phase(&self) -> HyStartPhase {
        self.hystart.phase
    }

    fn mss_f(&self) -> f64 {
        f64::from(self.mss)
    }

    /// Sets cwnd (bytes), clamped to `[SMSS, MAX_CWND]`; a non-finite value (which the
    /// arithmetic below cannot produce) leaves cwnd unchanged.
    /// See [`super::Cc::undo_from`]. W_max returns to at least its prior value too, and
    /// the congestion-avoidance epoch restarts from the restored window.
    pub(crate) fn undo_from(&mut self, prior: &Cubic) {
        self.set_cwnd(self.cwnd.max(prior.cwnd));
        self.ssthresh = self.ssthresh.max(prior.ssthresh);
        self.w_max = self.w_max.max(prior.w_max);
        self.epoch_start = None;
        self.k = 0.0;
    }

    fn set_cwnd(&mut self, bytes: f64) {
        if bytes.is_finite() {
            self.cwnd = bytes.clamp(self.mss_f(), f64::from(MAX_CWND));
        } else {
            self.cwnd = self.cwnd.clamp(self.mss_f(), f64::from(MAX_CWND));
        }
    }

    /// RFC 9438 §4.2 eq. (1), in bytes: `(C * (t - K)^3 + W_max/SMSS) * SMSS`.
    fn w_cubic(&self, t: f64) -> f64 {
        let d = t - self.k;
        C * d * d * d * self.mss_f() + self.w_max
    }

    /// Starts a congestion-avoidance epoch at `now` (RFC 9438 §4.2, §4.3, §4.8, §4.10).
    fn start_epoch(&mut self, now: Instant) {
        self.epoch_start = Some(now);
        self.cwnd_epoch = self.cwnd;
        self.w_est = self.cwnd;
        if self.w_max <= self.cwnd_epoch {
            // W_max undefined (after HyStart++ or an RTO) or already passed: the curve
            // starts at its inflection point, in the convex region.
            self.w_max = self.cwnd_epoch;
            self.k = 0.0;
        } else {
            let segs = (self.w_max - self.cwnd_epoch) / self.mss_f();
            self.k = (segs / C).cbrt();
        }
    }

    /// Ends slow start without a congestion event (HyStart++ CSS completed, RFC 9406
    /// §4.2 / RFC 9438 §4.10).
    fn exit_slow_start(&mut self) {
        self.hystart.phase = HyStartPhase::Done;
        self.ssthresh = clamp_window(self.cwnd as u64, self.mss).max(2 * self.mss);
        self.cwnd_prior = self.cwnd;
        self.w_max = 0.0;
        self.epoch_start = None;
    }

    fn slow_start_ack(&mut self, s: &AckSample) {
        let hystart = self.hystart_enabled
            && self.ssthresh == INITIAL_SSTHRESH
            && self.hystart.phase != HyStartPhase::Done;
        let mut divisor = 1.0;
        if hystart {
            if self.hystart.on_ack_round(s.ack_seq, s.snd_nxt) {
                self.exit_slow_start();
                return;
            }
            if self.hystart.phase == HyStartPhase::ConservativeSlowStart {
                divisor = f64::from(CSS_GROWTH_DIVISOR);
            }
        }
        if s.cwnd_limited {
            // RFC 9406 §4.2: cwnd += min(N, L * SMSS) (divided in CSS); RFC 5681 §3.1.
            let limit = f64::from(self.ss_ack_limit.max(1)) * self.mss_f();
            let inc = f64::from(s.acked).min(limit) / divisor;
            let cap = f64::from(self.ssthresh.min(MAX_CWND));
            let new = (self.cwnd + inc).min(cap).max(self.cwnd);
            self.set_cwnd(new);
        }
        if hystart {
            self.hystart.on_rtt(s.rtt);
            if self.hystart_ack_train
                && self.cwnd >= f64::from(ACK_TRAIN_LOW_WINDOW) * self.mss_f()
                && self
                    .hystart
                    .ack_train_full(s.now, s.min_rtt, s.cwnd_limited)
            {
                self.exit_slow_start();
            }
        }
    }

    fn congestion_avoidance_ack(&mut self, s: &AckSample) {
        if !s.cwnd_limited {
            // RFC 9438 §5.8: no growth while the window is not used, and the time is cut
            // out of the epoch so that the curve does not jump afterwards.
            if let (Some(epoch), Some(last)) = (self.epoch_start, self.last_ack) {
                self.epoch_start = Some(epoch + s.now.saturating_duration_since(last));
            }
            return;
        }
        let epoch = match self.epoch_start {
            Some(e) => e,
            None => {
                self.start_epoch(s.now);
                s.now
            }
        };
        let t = s.now.saturating_duration_since(epoch).as_secs_f64();
        let rtt = s
            .srtt
            .or(s.min_rtt)
            .or(s.rtt)
            .unwrap_or(Duration::ZERO)
            .as_secs_f64();
        let acked = f64::from(s.acked);
        let cwnd = self.cwnd;
        let mss = self.mss_f();

        // §4.3 Reno-friendly region: W_est += alpha * segments_acked / cwnd (segments).
        let alpha = if self.w_est >= self.cwnd_prior {
            1.0
        } else {
            ALPHA
        };
        self.w_est = (self.w_est + alpha * (acked / cwnd) * mss).min(f64::from(MAX_CWND));

        let new = if self.w_cubic(t) < self.w_est {
            // Reno-friendly region: cwnd = W_est (never a decrease).
            cwnd.max(self.w_est)
        } else {
            // §4.4 concave / §4.5 convex: move towards the target, clamped to
            // [cwnd, 1.5 cwnd] (§4.2), by (target - cwnd)/cwnd per acknowledged segment.
            let target = self.w_cubic(t + rtt).clamp(cwnd, 1.5 * cwnd);
            let inc = (target - cwnd) / cwnd * acked;
            (cwnd + inc).min(target)
        };
        self.set_cwnd(new);
    }
}

impl CongestionControl for Cubic {
    fn name(&self) -> &'static str {
        "cubic"
    }

    fn cwnd(&self) -> u32 {
        // Always finite and within [mss, MAX_CWND]; `as` truncates the fraction.
        self.cwnd as u32
    }

    fn ssthresh(&self) -> u32 {
        self.ssthresh
    }

    fn on_ack(&mut self, s: &AckSample) {
        if s.acked == 0 {
            return;
        }
        self.rto_pending = false;
        if self.cwnd() < self.ssthresh {
            self.slow_start_ack(s);
        } else {
            self.congestion_avoidance_ack(s);
        }
        self.last_ack = Some(s.now);
    }

    fn on_congestion_event(&mut self, _now: Instant, _prior_in_flight: u32) {
        // RFC 9438 §4.6 permits basing the reduction on cwnd instead of the flight size when
        // cwnd cannot grow while under-used (`cwnd_limited`), as here; this is also what
        // long-deployed CUBIC implementations do and is robust for application-limited flows.
        self.hystart.phase = HyStartPhase::Done;
        self.rto_pending = false;
        let cwnd = self.cwnd;
        // §4.7 fast convergence.
        self.w_max = if self.fast_convergence && cwnd < self.w_max {
            cwnd * (1.0 + BETA) / 2.0
        } else {
            cwnd
        };
        self.cwnd_prior = cwnd;
        // §4.6: ssthresh = cwnd * beta_cubic, at least 2 SMSS; cwnd = ssthresh.
        let ss = (cwnd * BETA).max(2.0 * self.mss_f());
        self.ssthresh = clamp_window(ss as u64, self.mss);
        self.set_cwnd(f64::from(self.ssthresh));
        self.epoch_start = None;
        self.k = 0.0;
    }

    fn on_recovery_exit(&mut self, _now: Instant) {
        // RFC 6582 §3.2 step 3 (cwnd = ssthresh); the congestion-avoidance epoch starts at
        // the next ACK. Without a preceding congestion event, keep cwnd.
        if self.ssthresh != INITIAL_SSTHRESH {
            self.set_cwnd(f64::from(self.ssthresh));
        }
        self.epoch_start = None;
    }

    fn on_rto(&mut self, _now: Instant, _prior_in_flight: u32) {
        // §4.8: ssthresh as in §4.6 (held on a repeated timeout without progress, RFC 5681
        // §3.1), cwnd = loss window; the next epoch uses K = 0 and W_max = cwnd_epoch.
        self.hystart.phase = HyStartPhase::Done;
        if !self.rto_pending {
            let cwnd = self.cwnd;
            self.cwnd_prior = cwnd;
            let ss = (cwnd * BETA).max(2.0 * self.mss_f());
            self.ssthresh = clamp_window(ss as u64, self.mss);
        }
        self.rto_pending = true;
        self.w_max = 0.0;
        self.k = 0.0;
        self.epoch_start = None;
        self.set_cwnd(self.mss_f());
    }

    fn on_idle_restart(&mut self, _now: Instant) {
        // RFC 5681 §4.1 restart window; RFC 9438 §5.8: a new epoch begins with the next ACK.
        let rw = self.cwnd.min(f64::from(self.initial_window()));
        self.set_cwnd(rw);
        self.epoch_start = None;
        self.last_ack = None;
        self.hystart.reset_rounds();
    }

    fn set_mss(&mut self, mss: u32) {
        self.mss = sanitize_mss(mss);
        self.set_cwnd(self.cwnd);
        if self.ssthresh != INITIAL_SSTHRESH {
            self.ssthresh = self.ssthresh.max(2 * self.mss);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    const MSS: u32 = 1000;

    fn sample(now: Instant, acked: u32, rtt: Duration, limited: bool) -> AckSample {
        AckSample {
            now,
            acked,
            prior_in_flight: 0,
            rtt: Some(rtt),
            srtt: Some(rtt),
            min_rtt: Some(rtt),
            cwnd_limited: limited,
            ack_seq: SeqNum(0),
            snd_nxt: SeqNum(0),
        }
    }

    /// A sender that always fills cwnd. Each call to `round` delivers the ACKs for the
    /// window in flight, one per SMSS, and advances time by one RTT.
    struct Flow {
        now: Instant,
        una: SeqNum,
        nxt: SeqNum,
    }

    impl Flow {
        fn new(now: Instant, cc: &Cubic) -> Self {
            let una = SeqNum(1);
            Flow {
                now,
                una,
                nxt: una + cc.cwnd(),
            }
        }

        /// ACKs arrive `spacing` apart from the start of the round (`None`: evenly spread
        /// over the RTT, i.e. the pipe is full).
        fn round(&mut self, cc: &mut Cubic, rtt: Duration, spacing: Option<Duration>) {
            let start = self.now;
            let segs = (self.nxt.since(self.una) / MSS).max(1);
            let spacing = spacing.unwrap_or(rtt / segs);
            for i in 0..segs {
                let mut s = sample(start + spacing * i, MSS, rtt, true);
                self.una += MSS;
                s.ack_seq = self.una;
                s.snd_nxt = self.nxt;
                cc.on_ack(&s);
                // Refill the window.
                self.nxt = self.nxt.max(self.una + cc.cwnd());
            }
            self.now = start + rtt;
        }
    }

    /// ACK spacing of a window crossing a fast bottleneck with idle time in between.
    const BURST: Option<Duration> = Some(Duration::from_micros(1));

    fn segs(cc: &Cubic) -> f64 {
        f64::from(cc.cwnd()) / f64::from(MSS)
    }

    #[test]
    fn slow_start_doubles_per_rtt() {
        for hystart in [false, true] {
            let mut cc = Cubic::new(MSS, 10);
            cc.hystart_enabled = hystart;
            let mut f = Flow::new(Instant::from_secs(1), &cc);
            let mut expect = 10;
            for _ in 0..8 {
                f.round(&mut cc, Duration::from_millis(50), BURST);
                expect *= 2;
                assert_eq!(cc.cwnd(), expect * MSS, "hystart={hystart}");
            }
            // Constant RTT and short ACK trains: HyStart++ never leaves slow start.
            assert_eq!(cc.ssthresh(), u32::MAX);
            assert_eq!(cc.hystart_phase(), HyStartPhase::SlowStart);
        }
    }

    #[test]
    fn slow_start_ack_limit() {
        let mut cc = Cubic::new(MSS, 10);
        let s = sample(Instant::ZERO, 100 * MSS, Duration::from_millis(10), true);
        cc.on_ack(&s);
        assert_eq!(cc.cwnd(), (10 + DEFAULT_SS_ACK_LIMIT) * MSS);
        cc.ss_ack_limit = u32::MAX;
        cc.on_ack(&s);
        assert_eq!(cc.cwnd(), (110 + DEFAULT_SS_ACK_LIMIT) * MSS);
    }

    #[test]
    fn multiplicative_decrease_is_0_7() {
        let mut cc = Cubic::new(MSS, 100);
        cc.on_congestion_event(Instant::from_secs(1), 0);
        assert_eq!(cc.cwnd(), 70 * MSS);
        assert_eq!(cc.ssthresh(), 70 * MSS);
        assert_eq!(cc.w_max(), 100 * MSS);
        assert!(!cc.in_slow_start());
        cc.on_recovery_exit(Instant::from_secs(2));
        assert_eq!(cc.cwnd(), 70 * MSS);
        // Floor of 2 SMSS.
        let mut cc = Cubic::new(MSS, 2);
        cc.on_congestion_event(Instant::ZERO, 0);
        assert_eq!(cc.cwnd(), 2 * MSS);
        assert_eq!(cc.ssthresh(), 2 * MSS);
    }

    #[test]
    fn fast_convergence() {
        let mut cc = Cubic::new(MSS, 100);
        cc.on_congestion_event(Instant::ZERO, 0);
        assert_eq!(cc.w_max(), 100 * MSS);
        // A second loss below W_max releases bandwidth: W_max = cwnd * (1 + beta) / 2.
        cc.on_congestion_event(Instant::ZERO, 0);
        assert_eq!(cc.w_max(), 59_500);
        assert_eq!(cc.cwnd(), 49 * MSS);

        let mut cc = Cubic::new(MSS, 100);
        cc.fast_convergence = false;
        cc.on_congestion_event(Instant::ZERO, 0);
        cc.on_congestion_event(Instant::ZERO, 0);
        assert_eq!(cc.w_max(), 70 * MSS);
    }

    /// W_cubic(t) of RFC 9438 §4.2, segments, computed independently of the implementation.
    fn rfc_w_cubic(t: f64, w_max: f64, cwnd_epoch: f64) -> f64 {
        let k = ((w_max - cwnd_epoch) / 0.4).cbrt();
        0.4 * (t - k).powi(3) + w_max
    }

    #[test]
    fn cubic_curve_follows_rfc_formula() {
        // W_max = 100 segments, cwnd_epoch = 70 segments; RTT 200 ms keeps the Reno-friendly
        // estimate below the curve for the sampled times.
        let mut cc = Cubic::new(MSS, 100);
        let start = Instant::from_secs(10);
        cc.on_congestion_event(start, 0);
        cc.on_recovery_exit(start);
        let rtt = Duration::from_millis(200);
        let mut now = start;
        let probes = [0.5, 1.0, 2.0, 3.0, 4.0, 4.2, 5.0, 6.0, 7.0, 8.0];
        let mut next = 0;
        // The first ACK (at `start`) starts the epoch; ACKs arrive evenly, a window per RTT.
        while next < probes.len() {
            let t = (now - start).as_secs_f64();
            if t >= probes[next] {
                let want = rfc_w_cubic(t, 100.0, 70.0);
                let got = segs(&cc);
                assert!(
                    (got - want).abs() <= 0.03 * want + 1.0,
                    "t={t:.2}: cwnd {got:.2} segments, W_cubic {want:.2}"
                );
                next += 1;
            }
            cc.on_ack(&sample(now, MSS, rtt, true));
            now += rtt / (cc.cwnd() / MSS);
        }
        let k = cc.k().as_secs_f64();
        assert!((k - (30.0f64 / 0.4).cbrt()).abs() < 1e-6, "K = {k}");
        assert_eq!(cc.w_max(), 100 * MSS);
    }

    #[test]
    fn reno_friendly_region() {
        // Short RTT: Reno-style growth (alpha_cubic per RTT below cwnd_prior, 1 above)
        // outpaces the cubic curve, so cwnd follows W_est (RFC 9438 §4.3).
        let mut cc = Cubic::new(MSS, 100);
        cc.on_congestion_event(Instant::ZERO, 0);
        cc.on_recovery_exit(Instant::ZERO);
        let rtt = Duration::from_millis(10);
        let mut f = Flow::new(Instant::ZERO, &cc);
        let mut w_est: f64 = 70.0;
        for _ in 0..100 {
            f.round(&mut cc, rtt, None);
            let alpha = if w_est >= 100.0 { 1.0 } else { ALPHA };
            w_est += alpha;
        }
        let t = (f.now - Instant::ZERO).as_secs_f64();
        assert!(rfc_w_cubic(t, 100.0, 70.0) + 10.0 < segs(&cc));
        assert!(
            (segs(&cc) - w_est).abs() < 3.0,
            "cwnd {} W_est {w_est}",
            segs(&cc)
        );
    }

    #[test]
    fn target_is_clamped_to_one_and_a_half() {
        // Long after the epoch started the cubic target is huge; growth per RTT stays <= 1.5x.
        let mut cc = Cubic::new(MSS, 100);
        cc.on_congestion_event(Instant::ZERO, 0);
        cc.on_recovery_exit(Instant::ZERO);
        let rtt = Duration::from_millis(100);
        cc.on_ack(&sample(Instant::ZERO, MSS, rtt, true)); // the epoch starts at 0
        let mut f = Flow::new(Instant::from_secs(60), &cc);
        for _ in 0..5 {
            let before = segs(&cc);
            f.round(&mut cc, rtt, None);
            let after = segs(&cc);
            assert!(after <= 1.5 * before + 1.0, "{before} -> {after}");
            assert!(after > 1.3 * before, "{before} -> {after}");
        }
    }

    #[test]
    fn rto_sets_loss_window() {
        let mut cc = Cubic::new(MSS, 100);
        cc.on_rto(Instant::from_secs(1), 50 * MSS);
        assert_eq!(cc.cwnd(), MSS);
        assert_eq!(cc.ssthresh(), 70 * MSS);
        assert_eq!(cc.hystart_phase(), HyStartPhase::Done);
        // Repeated timeout without progress keeps ssthresh.
        cc.on_rto(Instant::from_secs(3), MSS);
        assert_eq!(cc.ssthresh(), 70 * MSS);
        assert_eq!(cc.cwnd(), MSS);
        // Slow start back to ssthresh (no HyStart++ after an RTO), then a congestion
        // avoidance epoch with K = 0 and W_max = cwnd_epoch (RFC 9438 §4.8).
        let rtt = Duration::from_millis(100);
        let mut now = Instant::from_secs(3);
        while cc.in_slow_start() {
            now += Duration::from_millis(1);
            cc.on_ack(&sample(now, MSS, rtt, true));
        }
        assert_eq!(cc.cwnd(), 70 * MSS);
        cc.on_ack(&sample(now, MSS, rtt, true));
        assert_eq!(cc.k(), Duration::ZERO);
        assert_eq!(cc.w_max(), 70 * MSS);
        // Convex growth from the epoch start: close to cwnd_epoch + C t^3 after 3 s.
        for _ in 0..30 {
            now += rtt;
            for _ in 0..cc.cwnd() / MSS {
                cc.on_ack(&sample(now, MSS, rtt, true));
            }
        }
        assert!(
            segs(&cc) > 70.0 && segs(&cc) < 70.0 + 0.4 * 27.0 + 6.0,
            "{}",
            segs(&cc)
        );
        // Progress, then a new timeout recomputes ssthresh from the current cwnd.
        let w = f64::from(cc.cwnd());
        cc.on_rto(now, 0);
        assert!((f64::from(cc.ssthresh()) - w * BETA).abs() <= 1.0);
    }

    #[test]
    fn no_growth_when_not_cwnd_limited() {
        let rtt = Duration::from_millis(100);
        // Slow start.
        let mut cc = Cubic::new(MSS, 10);
        for i in 0..100 {
            cc.on_ack(&sample(Instant::from_millis(i), MSS, rtt, false));
        }
        assert_eq!(cc.cwnd(), 10 * MSS);
        // Congestion avoidance: an application-limited minute neither grows cwnd nor
        // advances the cubic curve.
        let mut cc = Cubic::new(MSS, 100);
        cc.on_congestion_event(Instant::ZERO, 0);
        cc.on_recovery_exit(Instant::ZERO);
        cc.on_ack(&sample(Instant::ZERO, MSS, rtt, true));
        let base = cc.cwnd();
        let mut now = Instant::ZERO;
        for _ in 0..600 {
            now += Duration::from_millis(100);
            cc.on_ack(&sample(now, MSS, rtt, false));
        }
        assert_eq!(cc.cwnd(), base);
        // Back to cwnd-limited: growth resumes from the frozen point of the curve (t ~ 0,
        // the concave start), not 60 s later on it (which would allow 1.5x per RTT).
        let mut f = Flow::new(now, &cc);
        f.round(&mut cc, rtt, None);
        assert!(segs(&cc) < 75.0, "cwnd jumped to {}", segs(&cc));
        assert!(segs(&cc) > 70.0);
    }

    #[test]
    fn idle_restart() {
        let mut cc = Cubic::new(MSS, 10);
        let mut f = Flow::new(Instant::ZERO, &cc);
        f.round(&mut cc, Duration::from_millis(10), BURST);
        f.round(&mut cc, Duration::from_millis(10), BURST);
        assert_eq!(cc.cwnd(), 40 * MSS);
        cc.on_idle_restart(Instant::from_secs(5));
        assert_eq!(cc.cwnd(), 10 * MSS);
        assert!(cc.in_slow_start());
        // In congestion avoidance the restart also begins a new epoch: after 100 s of
        // silence the curve restarts at t = 0 instead of allowing a 1.5x jump.
        let mut cc = Cubic::new(MSS, 100);
        cc.on_congestion_event(Instant::ZERO, 0);
        cc.on_recovery_exit(Instant::ZERO);
        let mut f = Flow::new(Instant::ZERO, &cc);
        f.round(&mut cc, Duration::from_millis(100), None);
        let w = segs(&cc);
        cc.on_idle_restart(Instant::from_secs(100));
        assert_eq!(
            segs(&cc),
            w,
            "the restart window min(IW, cwnd) keeps cwnd below IW"
        );
        let mut f = Flow::new(Instant::from_secs(100), &cc);
        f.round(&mut cc, Duration::from_millis(100), None);
        assert!(segs(&cc) < w + 5.0, "{} after {w}", segs(&cc));
    }

    #[test]
    fn mss_change_and_extremes() {
        let mut cc = Cubic::new(0, 0);
        assert_eq!(cc.cwnd(), 1);
        cc.set_mss(9000);
        assert_eq!(cc.mss(), 9000);
        assert_eq!(cc.cwnd(), 9000);
        assert_eq!(cc.initial_window(), 9000);
        let mut cc = Cubic::new(u32::MAX, u32::MAX);
        assert_eq!(cc.cwnd(), MAX_CWND);
        let huge = AckSample {
            now: Instant::MAX,
            acked: u32::MAX,
            prior_in_flight: u32::MAX,
            rtt: Some(Duration::MAX),
            srtt: Some(Duration::MAX),
            min_rtt: Some(Duration::MAX),
            cwnd_limited: true,
            ack_seq: SeqNum(u32::MAX),
            snd_nxt: SeqNum(0),
        };
        cc.on_ack(&huge);
        cc.on_congestion_event(Instant::MAX, u32::MAX);
        cc.on_ack(&huge);
        cc.on_ack(&AckSample {
            now: Instant::ZERO,
            ..huge
        });
        assert!(cc.cwnd() <= MAX_CWND && cc.cwnd() >= cc.mss());
        let zero = AckSample {
            rtt: Some(Duration::ZERO),
            srtt: Some(Duration::ZERO),
            min_rtt: Some(Duration::ZERO),
            ..huge
        };
        let mut cc = Cubic::new(1, 1);
        for _ in 0..100 {
            cc.on_ack(&zero);
        }
        cc.on_congestion_event(Instant::ZERO, 0);
        for _ in 0..100 {
            cc.on_ack(&zero);
        }
        assert!(cc.cwnd() <= MAX_CWND && cc.cwnd() >= 1);
    }

    /// Drives slow start (ACKs in short trains, a window per RTT) with the RTT rising from
    /// `base` to `high` at round `rise_round` (and back to `base` from round `fall_round`).
    /// Returns the phase after each round and the round in which ssthresh became finite.
    fn hystart_run(
        cc: &mut Cubic,
        base: Duration,
        high: Duration,
        rise_round: u32,
        fall_round: u32,
    ) -> (Vec<HyStartPhase>, Option<u32>) {
        let mut f = Flow::new(Instant::from_secs(1), cc);
        let mut phases = Vec::new();
        for round in 0..10 {
            let rtt = if round >= rise_round && round < fall_round {
                high
            } else {
                base
            };
            f.round(cc, rtt, BURST);
            phases.push(cc.hystart_phase());
            if cc.ssthresh() != u32::MAX {
                return (phases, Some(round));
            }
        }
        (phases, None)
    }

    /// The first round in CSS; before `rise` every round is in standard slow start.
    fn first_css(phases: &[HyStartPhase], rise: u32) -> u32 {
        let rise = rise as usize;
        assert!(
            phases[..rise].iter().all(|&p| p == HyStartPhase::SlowStart),
            "{phases:?}"
        );
        let css = phases
            .iter()
            .position(|&p| p == HyStartPhase::ConservativeSlowStart)
            .expect("entered CSS");
        assert!(
            css == rise || css == rise + 1,
            "CSS in round {css}, RTT rose in {rise}"
        );
        css as u32
    }

    #[test]
    fn hystart_exits_on_rtt_increase() {
        let base = Duration::from_millis(40);
        let mut cc = Cubic::new(MSS, 10);
        // 40 ms base RTT: threshold = max(4 ms, min(40/8 = 5 ms, 16 ms)) = 5 ms.
        let (phases, exit) = hystart_run(&mut cc, base, base + Duration::from_millis(6), 4, 99);
        let css = first_css(&phases, 4);
        // CSS lasts CSS_ROUNDS rounds (the partial first one counts); rounds are delimited
        // by sequence numbers, so allow one round of slack against the RTT schedule.
        let exit = exit.expect("left slow start");
        assert!(
            (css + CSS_ROUNDS - 1..=css + CSS_ROUNDS).contains(&exit),
            "CSS {css}, exit {exit}"
        );
        assert!(phases[css as usize..exit as usize]
            .iter()
            .all(|&p| p == HyStartPhase::ConservativeSlowStart));
        assert_eq!(cc.hystart_phase(), HyStartPhase::Done);
        assert!(!cc.in_slow_start());
        // (The rest of the round after the exit was congestion avoidance.)
        assert!(
            cc.ssthresh() <= cc.cwnd() && f64::from(cc.cwnd()) < 1.05 * f64::from(cc.ssthresh())
        );
        // CSS grows by a quarter per round instead of doubling (1.25^5 ~ 3x over CSS):
        // slow start would be at 10 * 2^10 segments by now.
        assert!(
            segs(&cc) > 300.0 && segs(&cc) < 1500.0,
            "cwnd {}",
            segs(&cc)
        );
        // Congestion avoidance follows, with K = 0 and W_max = cwnd_epoch (RFC 9438 §4.10).
        let w = f64::from(cc.cwnd());
        let mut f = Flow::new(Instant::from_secs(100), &cc);
        f.round(&mut cc, base, None);
        assert!(
            (f64::from(cc.w_max()) - w).abs() < 0.01 * w,
            "{} vs {w}",
            cc.w_max()
        );
        assert_eq!(cc.k(), Duration::ZERO);

        // An increase below the threshold does not trigger.
        let mut cc = Cubic::new(MSS, 10);
        let (phases, exit) = hystart_run(&mut cc, base, base + Duration::from_millis(4), 4, 99);
        assert!(exit.is_none());
        assert!(phases.iter().all(|&p| p == HyStartPhase::SlowStart));

        // Disabled: no delay-based exit.
        let mut cc = Cubic::new(MSS, 10);
        cc.hystart_enabled = false;
        let (_, exit) = hystart_run(&mut cc, base, base + Duration::from_millis(20), 4, 99);
        assert!(exit.is_none());
    }

    #[test]
    fn hystart_threshold_bounds() {
        // 200 ms base RTT: 200/8 = 25 ms is capped at MAX_RTT_THRESH = 16 ms.
        let base = Duration::from_millis(200);
        let mut cc = Cubic::new(MSS, 10);
        let (phases, _) = hystart_run(&mut cc, base, base + Duration::from_millis(15), 3, 99);
        assert!(
            phases.iter().all(|&p| p == HyStartPhase::SlowStart),
            "{phases:?}"
        );
        let mut cc = Cubic::new(MSS, 10);
        let (phases, _) = hystart_run(&mut cc, base, base + Duration::from_millis(17), 3, 99);
        first_css(&phases, 3);
        // 8 ms base RTT: 1 ms is raised to MIN_RTT_THRESH = 4 ms.
        let base = Duration::from_millis(8);
        let mut cc = Cubic::new(MSS, 10);
        let (phases, _) = hystart_run(&mut cc, base, base + Duration::from_millis(3), 3, 99);
        assert!(phases.iter().all(|&p| p == HyStartPhase::SlowStart));
        let mut cc = Cubic::new(MSS, 10);
        let (phases, _) = hystart_run(&mut cc, base, base + Duration::from_millis(5), 3, 99);
        first_css(&phases, 3);
    }

    #[test]
    fn hystart_spurious_css_resumes_slow_start() {
        // One round with a 10 ms spike, then back to the base RTT.
        let base = Duration::from_millis(40);
        let mut cc = Cubic::new(MSS, 10);
        let (phases, exit) = hystart_run(&mut cc, base, base + Duration::from_millis(10), 3, 4);
        let css = first_css(&phases, 3) as usize;
        assert!(
            phases[css + 1..]
                .iter()
                .all(|&p| p == HyStartPhase::SlowStart),
            "{phases:?}"
        );
        assert!(exit.is_none());
        assert_eq!(cc.ssthresh(), u32::MAX);
    }

    #[test]
    fn loss_during_css_ends_hystart() {
        let base = Duration::from_millis(40);
        let mut cc = Cubic::new(MSS, 10);
        let mut f = Flow::new(Instant::ZERO, &cc);
        for round in 0..5 {
            let rtt = if round >= 2 {
                base + Duration::from_millis(8)
            } else {
                base
            };
            f.round(&mut cc, rtt, BURST);
        }
        assert_eq!(cc.hystart_phase(), HyStartPhase::ConservativeSlowStart);
        let w = cc.cwnd();
        cc.on_congestion_event(f.now, w);
        assert_eq!(cc.hystart_phase(), HyStartPhase::Done);
        assert_eq!(cc.cwnd(), (f64::from(w) * BETA) as u32);
        // Later slow starts (after an RTO) are standard ones up to ssthresh.
        cc.on_rto(f.now, 0);
        let (phases, _) = hystart_run(&mut cc, base, base + Duration::from_millis(30), 0, 99);
        assert!(phases.iter().all(|&p| p == HyStartPhase::Done));
    }

    #[test]
    fn ack_train_exits_near_bdp() {
        // A full pipe returns ACKs back to back: once a train lasts half the minimum RTT
        // slow start ends, even without any RTT increase.
        let rtt = Duration::from_millis(20);
        let mut cc = Cubic::new(MSS, 10);
        let mut f = Flow::new(Instant::ZERO, &cc);
        // A 100 us per segment bottleneck: BDP = 200 segments. Trains last segs * 100 us.
        for _ in 0..10 {
            f.round(&mut cc, rtt, Some(Duration::from_micros(100)));
            if !cc.in_slow_start() {
                break;
            }
        }
        assert_eq!(cc.hystart_phase(), HyStartPhase::Done);
        let w = segs(&cc);
        assert!(
            (150.0..=300.0).contains(&w),
            "left slow start at {w} segments"
        );
        // Disabled: the same ACK pattern does not end slow start.
        let mut cc = Cubic::new(MSS, 10);
        cc.hystart_ack_train = false;
        let mut f = Flow::new(Instant::ZERO, &cc);
        for _ in 0..6 {
            f.round(&mut cc, rtt, Some(Duration::from_micros(100)));
        }
        assert!(cc.in_slow_start());
        // An application-limited sender's ACK stream is no evidence of a full pipe.
        let mut cc = Cubic::new(MSS, 100);
        for i in 0..10_000 {
            cc.on_ack(&sample(Instant::from_micros(100 * i), MSS, rtt, false));
        }
        assert!(cc.in_slow_start());
    }

    /// Packet-level model of one bottleneck: a drop-tail queue of `buffer` packets in front
    /// of a `rate_mbps` link, `rtt_ms` base RTT, an unpaced sender that fills cwnd, and an
    /// ACK for every `ack_every` packets. Runs until the sender would see the first drop
    /// (one RTT after it) and returns the packets dropped until then.
    fn startup_drops(
        cc: &mut Cubic,
        rate_mbps: u64,
        rtt_ms: u64,
        buffer: usize,
        ack_every: u32,
    ) -> u32 {
        const PKT: u32 = 1500;
        let ser = Duration::from_nanos(u64::from(PKT) * 8 * 1000 / rate_mbps);
        let prop = Duration::from_millis(rtt_ms);
        // In flight, in order: (sequence end, ACK arrival, send time).
        let mut inflight: VecDeque<(SeqNum, Instant, Instant)> = VecDeque::new();
        let mut queue: VecDeque<Instant> = VecDeque::new(); // departure times
        let mut last_departure = Instant::ZERO;
        let (mut nxt, mut una) = (SeqNum(0), SeqNum(0));
        let mut now = Instant::ZERO;
        let mut drops = 0u32;
        let mut react_by: Option<Instant> = None;
        let mut unacked = 0;
        loop {
            while nxt.since(una) + PKT <= cc.cwnd() {
                while queue.front().is_some_and(|&d| d <= now) {
                    queue.pop_front();
                }
                nxt += PKT;
                if queue.len() >= buffer {
                    drops += 1;
                    react_by.get_or_insert(now + prop + ser * buffer as u32);
                    // Accounted as if delivered: only the count matters here.
                    inflight.push_back((nxt, now + prop, now));
                    continue;
                }
                let dep = last_departure.max(now) + ser;
                last_departure = dep;
                queue.push_back(dep);
                inflight.push_back((nxt, dep + prop, now));
            }
            let Some((seq_end, at, sent)) = inflight.pop_front() else {
                break;
            };
            now = at.max(now);
            if react_by.is_some_and(|r| now >= r) || now >= Instant::from_millis(500) {
                break;
            }
            unacked += 1;
            if unacked < ack_every {
                continue;
            }
            unacked = 0;
            let acked = seq_end.since(una);
            una = seq_end;
            cc.on_ack(&AckSample {
                now,
                acked,
                prior_in_flight: nxt.since(una) + acked,
                rtt: Some(now - sent),
                srtt: Some(now - sent),
                min_rtt: Some(prop),
                cwnd_limited: true,
                ack_seq: una,
                snd_nxt: nxt,
            });
        }
        drops
    }

    #[test]
    fn no_loss_burst_on_gigabit_10ms_path() {
        // 1 Gbit/s, 10 ms: BDP = 833 packets of 1500 bytes.
        for (buffer, ack_every) in [(833, 1), (833, 2), (1666, 2), (416, 2)] {
            let mut classic = Cubic::new(1500, 10);
            classic.hystart_enabled = false;
            let classic_drops = startup_drops(&mut classic, 1000, 10, buffer, ack_every);
            let mut cc = Cubic::new(1500, 10);
            let drops = startup_drops(&mut cc, 1000, 10, buffer, ack_every);
            assert!(
                classic_drops > 500,
                "model: slow start overshoots ({classic_drops})"
            );
            assert!(
                drops <= 10,
                "buffer {buffer}: {drops} drops (slow start: {classic_drops})"
            );
            assert!(!cc.in_slow_start());
            let w = cc.cwnd() / 1500;
            assert!((600..=1700).contains(&w), "cwnd {w} packets after startup");
        }
    }
}
