//! A point-to-point Ethernet link: two independent [`Wire`]s, one per direction.
//!
//! End [`End::A`] transmits on the A→B wire and receives from the B→A wire, and vice versa.
//! Each direction has its own [`ImpairConfig`] and its own random stream, derived from the
//! link's seed with [`derive_seed`] (stream 0 for A→B, 1 for B→A), so an asymmetric or a
//! symmetric link is reproducible from one seed and its two directions are uncorrelated.

use ember_core::time::Instant;

use crate::derive_seed;
use crate::impairment::ImpairConfig;
use crate::one_way_link::{SendOutcome, Wire};
use crate::TxBacklog;

/// One end of a [`Link`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The first end.
    A,
    /// The second end.
    B,
}

impl End {
    /// The other end.
    pub fn peer(self) -> End {
        match self {
            End::A => End::B,
            End::B => End::A,
        }
    }
}

/// A point-to-point link made of two impaired wires.
#[derive(Debug, Clone)]
pub struct Link {
    a_to_b: Wire,
    b_to_a: Wire,
}

impl Link {
    /// A link whose A→B direction is impaired by `a_to_b` and B→A by `b_to_a`; each
    /// direction's random stream is derived from `seed`.
    pub fn new(a_to_b: ImpairConfig, b_to_a: ImpairConfig, seed: u64) -> Self {
        Link {
            a_to_b: Wire::new(a_to_b, derive_seed(seed, 0)),
            b_to_a: Wire::new(b_to_a, derive_seed(seed, 1)),
        }
    }

    /// A link with the same impairment both ways (still independent random streams).
    pub fn symmetric(cfg: ImpairConfig, seed: u64) -> Self {
        Link::new(cfg.clone(), cfg, seed)
    }

    /// End `from` transmits `frame` at `now`.
    pub fn send(&mut self, now: Instant, from: End, frame: Vec<u8>) -> SendOutcome {
        self.wire_mut(from).send(now, frame)
    }

    /// End `at` receives one frame that has arrived by `now`, earliest first.
    pub fn recv(&mut self, now: Instant, at: End) -> Option<Vec<u8>> {
        self.wire_mut(at.peer()).recv(now)
    }

    /// The earliest arrival on either direction, if any frame is in flight.
    pub fn next_event(&self) -> Option<Instant> {
        match (self.a_to_b.next_arrival(), self.b_to_a.next_arrival()) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        }
    }

    /// The transmit backlog of end `from` at `now` (its wire's [`Wire::backlog`] and
    /// rate), or `None` when that wire is infinitely fast and so never holds a queue.
    pub fn tx_backlog(&self, now: Instant, from: End) -> Option<TxBacklog> {
        wire_backlog(self.wire(from), now)
    }

    /// The wire carrying frames sent by `from`.
    pub fn wire(&self, from: End) -> &Wire {
        match from {
            End::A => &self.a_to_b,
            End::B => &self.b_to_a,
        }
    }

    /// The wire carrying frames sent by `from`, mutably (e.g. to change its impairment).
    pub fn wire_mut(&mut self, from: End) -> &mut Wire {
        match from {
            End::A => &mut self.a_to_b,
            End::B => &mut self.b_to_a,
        }
    }
}

/// A wire's backlog as a device reports it: `None` with an infinite rate. Public for the
/// runtime's `Impaired` device, which wraps a wire per direction.
pub fn wire_backlog(w: &Wire, now: Instant) -> Option<TxBacklog> {
    let rate_bps = w.rate_bps()?;
    Some(TxBacklog {
        bytes: w.backlog(now),
        rate_bps: rate_bps.max(1),
        capacity: w.config().queue_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;
    use proptest::prelude::*;

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    #[test]
    fn tx_backlog_is_the_senders_wire_with_a_finite_rate() {
        let mut l = Link::new(
            ImpairConfig {
                rate_bps: Some(8_000_000),
                ..Default::default()
            },
            ImpairConfig::default(),
            3,
        );
        assert_eq!(
            l.tx_backlog(ms(0), End::A),
            Some(TxBacklog {
                bytes: 0,
                rate_bps: 8_000_000,
                capacity: ImpairConfig::default().queue_bytes,
            })
        );
        l.send(ms(0), End::A, vec![0; 1000]);
        l.send(ms(0), End::A, vec![0; 1000]);
        assert_eq!(l.tx_backlog(ms(1), End::A).unwrap().bytes, 1000);
        assert_eq!(l.tx_backlog(ms(2), End::A).unwrap().bytes, 0);
        // B's wire is infinitely fast: no queue to report.
        l.send(ms(0), End::B, vec![0; 1000]);
        assert_eq!(l.tx_backlog(ms(0), End::B), None);
    }

    #[test]
    fn directions_are_separate() {
        let mut l = Link::new(
            ImpairConfig {
                delay: Duration::from_millis(2),
                ..Default::default()
            },
            ImpairConfig {
                delay: Duration::from_millis(9),
                ..Default::default()
            },
            1,
        );
        assert_eq!(l.next_event(), None);
        assert_eq!(l.send(ms(0), End::A, vec![0xA; 20]), SendOutcome::Queued);
        assert_eq!(l.send(ms(0), End::B, vec![0xB; 20]), SendOutcome::Queued);
        assert_eq!(l.next_event(), Some(ms(2)));
        // Nothing arrives back at the sender.
        assert_eq!(l.recv(ms(2), End::A), None);
        assert_eq!(l.recv(ms(2), End::B), Some(vec![0xA; 20]));
        assert_eq!(l.next_event(), Some(ms(9)));
        assert_eq!(l.recv(ms(8), End::A), None);
        assert_eq!(l.recv(ms(9), End::A), Some(vec![0xB; 20]));
        assert_eq!(l.next_event(), None);
        assert_eq!(l.wire(End::A).stats().frames_out, 1);
        assert_eq!(l.wire(End::B).config().delay, Duration::from_millis(9));
        l.wire_mut(End::A).set_config(ImpairConfig {
            loss: 1.0,
            ..Default::default()
        });
        assert_eq!(l.send(ms(10), End::A, vec![1]), SendOutcome::Lost);
        assert_eq!(l.send(ms(10), End::B, vec![1]), SendOutcome::Queued);
        assert_eq!(End::A.peer(), End::B);
        assert_eq!(End::B.peer(), End::A);
    }

    fn pattern(l: &mut Link, from: End) -> Vec<SendOutcome> {
        (0..256).map(|_| l.send(ms(0), from, vec![0; 60])).collect()
    }

    #[test]
    fn symmetric_uses_independent_streams_per_direction() {
        let cfg = ImpairConfig {
            loss: 0.5,
            ..Default::default()
        };
        let mut l = Link::symmetric(cfg.clone(), 7);
        let a = pattern(&mut l, End::A);
        let b = pattern(&mut l, End::B);
        assert_ne!(a, b);
        // Reproducible per seed, different across seeds.
        let mut l2 = Link::symmetric(cfg.clone(), 7);
        assert_eq!(pattern(&mut l2, End::A), a);
        assert_eq!(pattern(&mut l2, End::B), b);
        let mut l3 = Link::symmetric(cfg, 8);
        assert_ne!(pattern(&mut l3, End::A), a);
    }

    fn run(seed: u64) -> Vec<(Instant, End, Vec<u8>)> {
        let cfg = ImpairConfig {
            loss: 0.05,
            dup: 0.05,
            reorder: 0.05,
            corrupt: 0.05,
            delay: Duration::from_millis(3),
            jitter: Duration::from_millis(1),
            rate_bps: Some(100_000_000),
            ..Default::default()
        };
        let mut l = Link::symmetric(cfg, seed);
        for i in 0..300u32 {
            let t = Instant::from_micros(u64::from(i) * 100);
            l.send(t, End::A, i.to_be_bytes().repeat(20));
            l.send(t, End::B, (i + 1000).to_be_bytes().repeat(20));
        }
        let mut out = Vec::new();
        while let Some(t) = l.next_event() {
            for at in [End::A, End::B] {
                while let Some(f) = l.recv(t, at) {
                    out.push((t, at, f));
                }
            }
        }
        out
    }

    #[test]
    fn deterministic_per_seed() {
        let a = run(3);
        assert_eq!(a, run(3));
        assert_ne!(a, run(4));
        assert!(a.iter().any(|(_, at, _)| *at == End::A));
        assert!(a.iter().any(|(_, at, _)| *at == End::B));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn arbitrary_traffic_never_panics(
            seed in any::<u64>(), loss in any::<f64>(), mtu in any::<usize>(),
            ops in proptest::collection::vec(
                (any::<bool>(), any::<u32>(), proptest::collection::vec(any::<u8>(), 0..100)),
                0..50),
        ) {
            let cfg = ImpairConfig { loss, mtu, rate_bps: Some(1_000), queue_bytes: 300,
                                     ..Default::default() };
            let mut l = Link::symmetric(cfg, seed);
            for (a, t, f) in ops {
                let end = if a { End::A } else { End::B };
                let now = Instant::from_micros(u64::from(t));
                if t % 3 == 0 {
                    let _ = l.recv(now, end);
                } else {
                    let _ = l.send(now, end, f);
                }
            }
            let _ = l.next_event();
        }
    }
}
