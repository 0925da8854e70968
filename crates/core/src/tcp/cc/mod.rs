//! TCP congestion control behind one trait (RFC 5681, RFC 6582, RFC 9438, RFC 9406).
//!
//! The TCP control block (Tcb) owns loss detection and loss recovery (RFC 6675 pipe algorithm
//! with SACK, RFC 6582 NewReno without); a congestion controller only decides the congestion
//! window (`cwnd`) and the slow-start threshold (`ssthresh`). The Tcb tells it about:
//!
//! * cumulative ACKs outside recovery ([`CongestionControl::on_ack`]),
//! * the start of fast recovery ([`CongestionControl::on_congestion_event`]),
//! * the end of fast recovery ([`CongestionControl::on_recovery_exit`]),
//! * retransmission timeouts ([`CongestionControl::on_rto`]),
//! * restarts after idle ([`CongestionControl::on_idle_restart`]),
//! * path MTU changes ([`CongestionControl::set_mss`]).
//!
//! Two algorithms are provided, [`Cubic`] (the default, RFC 9438 with HyStart++ RFC 9406) and
//! [`NewReno`] (RFC 5681 + RFC 3465 byte counting), dispatched statically through [`Cc`].
//!
//! Invariants shared by every implementation, for any sequence of calls with any values:
//! * all windows are in bytes; the sender maximum segment size (SMSS) is clamped to
//!   `1..=MAX_MSS` (an MSS of 0 is treated as 1);
//! * `MSS <= cwnd <= MAX_CWND` (`u32::MAX / 2`) at all times;
//! * `ssthresh` is `u32::MAX` ("arbitrarily high", RFC 5681 §3.1) until the first congestion
//!   event, and at least `2 * SMSS` afterwards;
//! * `cwnd` never grows on an ACK whose sample says the sender was not cwnd-limited
//!   (RFC 7661 idea, Linux `tcp_is_cwnd_limited`);
//! * no clock is read: time comes in as `now` and may even go backwards (treated as no time
//!   passing); nothing panics and no floating-point value can become NaN or infinite.

use core::fmt;
use core::str::FromStr;
use core::time::Duration;

use crate::tcp::seq::SeqNum;
use crate::time::Instant;

pub mod cubic;
pub mod newreno;

pub use cubic::Cubic;
pub use newreno::NewReno;

/// Upper bound on the congestion window, in bytes (`u32::MAX / 2`).
pub const MAX_CWND: u32 = u32::MAX / 2;

/// Upper bound on the SMSS a controller accepts (1 MiB; larger values are clamped).
pub const MAX_MSS: u32 = 1 << 20;

/// The value of `ssthresh` before the first congestion event (RFC 5681 §3.1: "arbitrarily
/// high").
pub const INITIAL_SSTHRESH: u32 = u32::MAX;

/// Which congestion control algorithm a connection uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CcAlgorithm {
    /// CUBIC (RFC 9438) with HyStart++ (RFC 9406). The default.
    #[default]
    Cubic,
    /// NewReno (RFC 5681, RFC 6582, RFC 3465).
    NewReno,
}

impl CcAlgorithm {
    /// The canonical lower-case name (`"cubic"` or `"newreno"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            CcAlgorithm::Cubic => "cubic",
            CcAlgorithm::NewReno => "newreno",
        }
    }
}

impl fmt::Display for CcAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error returned when parsing an unknown congestion control name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseCcAlgorithmError;

impl fmt::Display for ParseCcAlgorithmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("unknown congestion control algorithm (expected \"cubic\" or \"newreno\")")
    }
}

impl std::error::Error for ParseCcAlgorithmError {}

impl FromStr for CcAlgorithm {
    type Err = ParseCcAlgorithmError;

    /// Accepts `"cubic"` and `"newreno"`, ignoring ASCII case and surrounding whitespace.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("cubic") {
            Ok(CcAlgorithm::Cubic)
        } else if s.eq_ignore_ascii_case("newreno") {
            Ok(CcAlgorithm::NewReno)
        } else {
            Err(ParseCcAlgorithmError)
        }
    }
}

/// What the Tcb knows about one cumulative ACK that advanced `SND.UNA`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AckSample {
    /// When the ACK was processed.
    pub now: Instant,
    /// Bytes newly acknowledged cumulatively by this ACK (> 0 when `on_ack` is called;
    /// an ACK with 0 is ignored).
    pub acked: u32,
    /// Bytes in flight before this ACK.
    pub prior_in_flight: u32,
    /// A fresh, Karn-valid RTT sample taken from this ACK.
    pub rtt: Option<Duration>,
    /// Smoothed RTT (RFC 6298), `None` before the first sample.
    pub srtt: Option<Duration>,
    /// Minimum RTT observed.
    pub min_rtt: Option<Duration>,
    /// The sender was limited by cwnd (not by the application or the peer's window)
    /// recently; cwnd must not grow when false.
    pub cwnd_limited: bool,
    /// The cumulative ACK number.
    pub ack_seq: SeqNum,
    /// Highest sequence number sent + 1 (for round tracking, e.g. HyStart++).
    pub snd_nxt: SeqNum,
}

/// A congestion controller: sets `cwnd` and `ssthresh` (bytes) in response to events
/// reported by the Tcb, which runs loss recovery itself.
pub trait CongestionControl {
    /// Short name of the algorithm (`"cubic"`, `"newreno"`).
    fn name(&self) -> &'static str;
    /// The congestion window in bytes, within `[SMSS, MAX_CWND]`.
    fn cwnd(&self) -> u32;
    /// The slow-start threshold in bytes; `u32::MAX` initially (RFC 5681 §3.1).
    fn ssthresh(&self) -> u32;
    /// Whether the controller is in slow start (`cwnd < ssthresh`, RFC 5681 §3.1).
    fn in_slow_start(&self) -> bool {
        self.cwnd() < self.ssthresh()
    }
    /// A cumulative ACK arrived outside loss recovery.
    fn on_ack(&mut self, s: &AckSample);
    /// Fast recovery starts (RFC 5681 §3.2 step 2, RFC 6582 §3.2 step 2, RFC 9438 §4.6):
    /// set `ssthresh` and `cwnd = ssthresh`.
    fn on_congestion_event(&mut self, now: Instant, prior_in_flight: u32);
    /// The recovery point was acknowledged (RFC 6582 §3.2 step 3, "full ACK"):
    /// `cwnd = ssthresh`.
    fn on_recovery_exit(&mut self, now: Instant);
    /// The retransmission timer expired (RFC 5681 §3.1 eq. (4); CUBIC: RFC 9438 §4.8):
    /// reduce `ssthresh` and set `cwnd` to the loss window (1 SMSS).
    fn on_rto(&mut self, now: Instant, prior_in_flight: u32);
    /// Sending restarts after an idle period (RFC 5681 §4.1): `cwnd = min(IW, cwnd)`.
    fn on_idle_restart(&mut self, now: Instant);
    /// The sender MSS changed (path MTU change).
    fn set_mss(&mut self, mss: u32);
}

/// Statically dispatched congestion controller.
#[derive(Debug, Clone)]
pub enum Cc {
    /// CUBIC with HyStart++.
    Cubic(Cubic),
    /// NewReno.
    NewReno(NewReno),
}

impl Cc {
    /// A controller of kind `alg` with SMSS `mss` and an initial window of
    /// `init_cwnd_segments * mss` bytes (clamped to at least one segment and `MAX_CWND`).
    pub fn new(alg: CcAlgorithm, mss: u32, init_cwnd_segments: u32) -> Cc {
        match alg {
            CcAlgorithm::Cubic => Cc::Cubic(Cubic::new(mss, init_cwnd_segments)),
            CcAlgorithm::NewReno => Cc::NewReno(NewReno::new(mss, init_cwnd_segments)),
        }
    }

    /// Which algorithm this is.
    pub fn algorithm(&self) -> CcAlgorithm {
        match self {
            Cc::Cubic(_) => CcAlgorithm::Cubic,
            Cc::NewReno(_) => CcAlgorithm::NewReno,
        }
    }

    /// Undoes a congestion response shown spurious (RFC 3708 detection; RFC 4015 §3
    /// response, as Linux does it): cwnd = max(cwnd, prior cwnd) and ssthresh =
    /// max(ssthresh, prior ssthresh), where `prior` is the controller as it was before
    /// the response. The rest of the current state is kept.
    pub fn undo_from(&mut self, prior: &Cc) {
        match (self, prior) {
            (Cc::Cubic(c), Cc::Cubic(p)) => c.undo_from(p),
            (Cc::NewReno(c), Cc::NewReno(p)) => c.undo_from(p),
            _ => {}
        }
    }
}

impl CongestionControl for Cc {
    fn name(&self) -> &'static str {
        match self {
            Cc::Cubic(c) => c.name(),
            Cc::NewReno(c) => c.name(),
        }
    }
    fn cwnd(&self) -> u32 {
        match self {
            Cc::Cubic(c) => c.cwnd(),
            Cc::NewReno(c) => c.cwnd(),
        }
    }
    fn ssthresh(&self) -> u32 {
        match self {
            Cc::Cubic(c) => c.ssthresh(),
            Cc::NewReno(c) => c.ssthresh(),
        }
    }
    fn in_slow_start(&self) -> bool {
        match self {
            Cc::Cubic(c) => c.in_slow_start(),
            Cc::NewReno(c) => c.in_slow_start(),
        }
    }
    fn on_ack(&mut self, s: &AckSample) {
        match self {
            Cc::Cubic(c) => c.on_ack(s),
            Cc::NewReno(c) => c.on_ack(s),
        }
    }
    fn on_congestion_event(&mut self, now: Instant, prior_in_flight: u32) {
        match self {
            Cc::Cubic(c) => c.on_congestion_event(now, prior_in_flight),
            Cc::NewReno(c) => c.on_congestion_event(now, prior_in_flight),
        }
    }
    fn on_recovery_exit(&mut self, now: Instant) {
        match self {
            Cc::Cubic(c) => c.on_recovery_exit(now),
            Cc::NewReno(c) => c.on_recovery_exit(now),
        }
    }
    fn on_rto(&mut self, now: Instant, prior_in_flight: u32) {
        match self {
            Cc::Cubic(c) => c.on_rto(now, prior_in_flight),
            Cc::NewReno(c) => c.on_rto(now, prior_in_flight),
        }
    }
    fn on_idle_restart(&mut self, now: Instant) {
        match self {
            Cc::Cubic(c) => c.on_idle_restart(now),
            Cc::NewReno(c) => c.on_idle_restart(now),
        }
    }
    fn set_mss(&mut self, mss: u32) {
        match self {
            Cc::Cubic(c) => c.set_mss(mss),
            Cc::NewReno(c) => c.set_mss(mss),
        }
    }
}

/// SMSS as used by the controllers: 0 becomes 1, huge values are capped at [`MAX_MSS`].
pub(crate) fn sanitize_mss(mss: u32) -> u32 {
    mss.clamp(1, MAX_MSS)
}

/// Initial window `segments * mss`, at least one segment, at most [`MAX_CWND`] (RFC 5681 §3.1
/// IW; ember uses exactly the configured number of segments, cf. RFC 6928).
pub(crate) fn initial_window(mss: u32, segments: u32) -> u32 {
    let iw = u64::from(segments.max(1)) * u64::from(mss);
    clamp_window(iw, mss)
}

/// Clamps a byte count to `[mss, MAX_CWND]`.
pub(crate) fn clamp_window(bytes: u64, mss: u32) -> u32 {
    // `mss <= MAX_MSS < MAX_CWND`, so the bounds are ordered.
    bytes.clamp(u64::from(mss), u64::from(MAX_CWND)) as u32
}

/// `max(flight_size / 2, 2 * SMSS)` (RFC 5681 §3.1 eq. (4)), capped at [`MAX_CWND`].
pub(crate) fn half_flight_ssthresh(flight: u32, mss: u32) -> u32 {
    let v = (u64::from(flight) / 2).max(2 * u64::from(mss));
    v.min(u64::from(MAX_CWND)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn undo_takes_the_larger_cwnd_and_ssthresh() {
        for alg in [CcAlgorithm::Cubic, CcAlgorithm::NewReno] {
            let now = Instant::from_millis(1000);
            let prior = Cc::new(alg, 1000, 10);
            let mut reduced = prior.clone();
            reduced.on_congestion_event(now, 10_000);
            assert!(reduced.cwnd() < prior.cwnd() && reduced.ssthresh() < prior.ssthresh());
            // Undoing the reduction restores both.
            let mut cur = reduced.clone();
            cur.undo_from(&prior);
            assert_eq!(
                (cur.cwnd(), cur.ssthresh()),
                (prior.cwnd(), prior.ssthresh())
            );
            // A prior state smaller than the current one changes nothing.
            let mut cur = prior.clone();
            cur.undo_from(&reduced);
            assert_eq!(
                (cur.cwnd(), cur.ssthresh()),
                (prior.cwnd(), prior.ssthresh())
            );
        }
    }

    #[test]
    fn algorithm_names_round_trip() {
        assert_eq!(CcAlgorithm::default(), CcAlgorithm::Cubic);
        for alg in [CcAlgorithm::Cubic, CcAlgorithm::NewReno] {
            let s = alg.to_string();
            assert_eq!(s.parse::<CcAlgorithm>(), Ok(alg));
            assert_eq!(Cc::new(alg, 1460, 10).algorithm(), alg);
            assert_eq!(Cc::new(alg, 1460, 10).name(), s);
        }
        assert_eq!(" NewReno ".parse::<CcAlgorithm>(), Ok(CcAlgorithm::NewReno));
        assert_eq!("CUBIC".parse::<CcAlgorithm>(), Ok(CcAlgorithm::Cubic));
        assert_eq!("bbr".parse::<CcAlgorithm>(), Err(ParseCcAlgorithmError));
        assert_eq!("".parse::<CcAlgorithm>(), Err(ParseCcAlgorithmError));
        assert!(!ParseCcAlgorithmError.to_string().is_empty());
    }

    #[test]
    fn initial_state() {
        for alg in [CcAlgorithm::Cubic, CcAlgorithm::NewReno] {
            let cc = Cc::new(alg, 1000, 10);
            assert_eq!(cc.cwnd(), 10_000);
            assert_eq!(cc.ssthresh(), u32::MAX);
            assert!(cc.in_slow_start());
            // Zero segments: clamped to one segment; zero MSS: treated as 1.
            assert_eq!(Cc::new(alg, 1000, 0).cwnd(), 1000);
            assert_eq!(Cc::new(alg, 0, 0).cwnd(), 1);
            assert_eq!(Cc::new(alg, 0, 10).cwnd(), 10);
            // Huge values saturate.
            assert_eq!(Cc::new(alg, u32::MAX, u32::MAX).cwnd(), MAX_CWND);
        }
    }

    #[test]
    fn helpers() {
        assert_eq!(sanitize_mss(0), 1);
        assert_eq!(sanitize_mss(u32::MAX), MAX_MSS);
        assert_eq!(initial_window(1460, 10), 14_600);
        assert_eq!(half_flight_ssthresh(100_000, 1000), 50_000);
        assert_eq!(half_flight_ssthresh(1000, 1000), 2000);
        assert_eq!(half_flight_ssthresh(u32::MAX, 1), MAX_CWND);
        assert_eq!(clamp_window(0, 5), 5);
        assert_eq!(clamp_window(u64::MAX, 5), MAX_CWND);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Ack {
            dt_us: u64,
            back: bool,
            acked: u32,
            in_flight: u32,
            rtt_us: Option<u64>,
            limited: bool,
            seq_step: u32,
            nxt_ahead: u32,
        },
        Congestion(u32),
        RecoveryExit,
        Rto(u32),
        Idle,
        Mss(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (
                0u64..2_000_000,
                any::<bool>(),
                prop_oneof![1u32..10_000, any::<u32>()],
                any::<u32>(),
                proptest::option::of(prop_oneof![0u64..200_000, any::<u64>()]),
                any::<bool>(),
                any::<u32>(),
                any::<u32>(),
            )
                .prop_map(|(dt_us, back, acked, in_flight, rtt_us, limited, seq_step, nxt_ahead)| Op::Ack {
                    dt_us,
                    back,
                    acked,
                    in_flight,
                    rtt_us,
                    limited,
                    seq_step,
                    nxt_ahead,
                }),
            1 => any::<u32>().prop_map(Op::Congestion),
            1 => Just(Op::RecoveryExit),
            1 => any::<u32>().prop_map(Op::Rto),
            1 => Just(Op::Idle),
            1 => prop_oneof![0u32..2000, any::<u32>()].prop_map(Op::Mss),
        ]
    }

    fn check_invariants(cc: &Cc, mss: u32) {
        let mss = sanitize_mss(mss);
        assert!(cc.cwnd() >= mss, "cwnd {} < mss {}", cc.cwnd(), mss);
        assert!(cc.cwnd() <= MAX_CWND);
        let ss = cc.ssthresh();
        assert!(ss == u32::MAX || ss >= 2 * mss, "ssthresh {ss} mss {mss}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn random_calls_keep_invariants(
            cubic in any::<bool>(),
            mss in prop_oneof![0u32..3000, any::<u32>()],
            iw in prop_oneof![0u32..100, any::<u32>()],
            hystart in any::<bool>(),
            ops in proptest::collection::vec(op(), 0..200),
        ) {
            let alg = if cubic { CcAlgorithm::Cubic } else { CcAlgorithm::NewReno };
            let mut cc = Cc::new(alg, mss, iw);
            if let Cc::Cubic(c) = &mut cc {
                c.hystart_enabled = hystart;
            }
            let mut mss = mss;
            let mut now = Instant::from_secs(1);
            let mut ack = SeqNum(12345);
            check_invariants(&cc, mss);
            for op in ops {
                match op {
                    Op::Ack { dt_us, back, acked, in_flight, rtt_us, limited, seq_step, nxt_ahead } => {
                        let d = Duration::from_micros(dt_us);
                        now = if back { now - d } else { now + d };
                        ack += seq_step;
                        let rtt = rtt_us.map(Duration::from_micros);
                        let before = cc.cwnd();
                        cc.on_ack(&AckSample {
                            now,
                            acked,
                            prior_in_flight: in_flight,
                            rtt,
                            srtt: rtt,
                            min_rtt: rtt,
                            cwnd_limited: limited,
                            ack_seq: ack,
                            snd_nxt: ack + nxt_ahead,
                        });
                        if !limited {
                            prop_assert!(cc.cwnd() <= before, "grew while not cwnd-limited");
                        }
                    }
                    Op::Congestion(f) => cc.on_congestion_event(now, f),
                    Op::RecoveryExit => cc.on_recovery_exit(now),
                    Op::Rto(f) => {
                        cc.on_rto(now, f);
                        prop_assert_eq!(cc.cwnd(), sanitize_mss(mss));
                    }
                    Op::Idle => {
                        let before = cc.cwnd();
                        cc.on_idle_restart(now);
                        prop_assert!(cc.cwnd() <= before);
                    }
                    Op::Mss(m) => {
                        mss = m;
                        cc.set_mss(m);
                    }
                }
                check_invariants(&cc, mss);
            }
        }
    }
}
