//! Impairment of any device: the in-memory link's model (loss, duplication, reordering,
//! single-bit corruption, delay, jitter, serialisation rate with a tail-drop queue, MTU)
//! put in front of a real device, one impaired wire per direction, so that a real link
//! can be made lossy or slow from ember's side (this kernel has no netem).
//!
//! A transmitted frame enters the transmit wire and reaches the inner device when the
//! wire says it arrives; a frame the inner device received enters the receive wire and
//! reaches the stack when that wire says so. Nothing here runs a thread or a timer: the
//! wrapper reports the earliest pending arrival of either wire through `next_rx`, so the
//! squeue that services the device comes back then, and every `poll_rx` first hands the
//! due transmit frames to the inner device. The model is seeded; with the same frames at
//! the same instants, a seed decides the same fate for each.

use super::device::{Device, TxBacklog};
use ember_core::time::Instant;
use ember_netem::point_to_point_link::wire_backlog;
use ember_netem::{derive_seed, ImpairConfig, Wire, WireStats};
use std::io;
use std::sync::{Arc, Mutex, OnceLock};

/// A device behind two impaired wires.
pub struct Impaired {
    inner: Arc<dyn Device>,
    tx: Mutex<Wire>,
    rx: Mutex<Wire>,
    /// The stack's waker (also given to the inner device): a frame held on the transmit
    /// wire asks the squeue to come back for it.
    waker: OnceLock<Arc<dyn Fn() + Send + Sync>>,
}

fn lock(w: &Mutex<Wire>) -> std::sync::MutexGuard<'_, Wire> {
    w.lock().unwrap_or_else(|e| e.into_inner())
}

impl Impaired {
    /// Wraps `inner`: `tx` impairs what the stack transmits, `rx` what it receives;
    /// `seed` makes the impairment reproducible. A configuration the model refuses
    /// (a probability outside 0..=1, a zero rate, an MTU out of range) is an
    /// `InvalidInput` error naming the field.
    pub fn new(
        inner: Arc<dyn Device>,
        tx: ImpairConfig,
        rx: ImpairConfig,
        seed: u64,
    ) -> io::Result<Impaired> {
        for (dir, c) in [("transmit", &tx), ("receive", &rx)] {
            c.validate().map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{dir} impairment: {e}"),
                )
            })?;
        }
        Ok(Impaired {
            inner,
            tx: Mutex::new(Wire::new(tx, derive_seed(seed, 0))),
            rx: Mutex::new(Wire::new(rx, derive_seed(seed, 1))),
            waker: OnceLock::new(),
        })
    }

    /// Counters of the transmit wire (frames dropped, duplicated, corrupted, …).
    pub fn tx_stats(&self) -> WireStats {
        lock(&self.tx).stats().clone()
    }

    /// Counters of the receive wire.
    pub fn rx_stats(&self) -> WireStats {
        lock(&self.rx).stats().clone()
    }

    /// Changes both directions' impairment (validated as in [`Impaired::new`]).
    pub fn set_impairment(&self, tx: ImpairConfig, rx: ImpairConfig) -> io::Result<()> {
        for (dir, c) in [("transmit", &tx), ("receive", &rx)] {
            c.validate().map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{dir} impairment: {e}"),
                )
            })?;
        }
        lock(&self.tx).set_config(tx);
        lock(&self.rx).set_config(rx);
        Ok(())
    }

    /// Hands the transmit frames that have arrived by `now` to the inner device; whether
    /// there were any.
    fn release_tx(&self, now: Instant) -> bool {
        let mut any = false;
        loop {
            // One at a time, so the inner device is never called under our lock.
            let f = lock(&self.tx).recv(now);
            match f {
                Some(f) => {
                    self.inner.transmit(f);
                    any = true;
                }
                None => return any,
            }
        }
    }
}

impl Device for Impaired {
    fn transmit(&self, frame: Vec<u8>) {
        let now = crate::clock::now();
        let _ = lock(&self.tx).send(now, frame);
        // Frames without delay go at once; later ones when the squeue polls at
        // `next_rx`, which a kick makes it look at (a transmit from outside the squeue,
        // a ping say, would not otherwise move its deadline).
        self.release_tx(now);
        if lock(&self.tx).next_arrival().is_some() {
            if let Some(w) = self.waker.get() {
                w();
            }
        }
    }

    fn poll_rx(&self, now: Instant, out: &mut Vec<Vec<u8>>, budget: usize) {
        // Held frames released here leave from the receive path, which the perimeter
        // does not flush: flush them now (a batching inner device would hold them).
        if self.release_tx(now) {
            self.inner.flush();
        }
        let mut fresh = Vec::new();
        self.inner.poll_rx(now, &mut fresh, budget);
        let mut rx = lock(&self.rx);
        for f in fresh {
            let _ = rx.send(now, f);
        }
        for _ in 0..budget {
            match rx.recv(now) {
                Some(f) => out.push(f),
                None => break,
            }
        }
    }

    fn next_rx(&self) -> Option<Instant> {
        [
            self.inner.next_rx(),
            lock(&self.tx).next_arrival(),
            lock(&self.rx).next_arrival(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn set_rx_waker(&self, waker: Box<dyn Fn() + Send + Sync>) {
        let w: Arc<dyn Fn() + Send + Sync> = Arc::from(waker);
        if self.waker.set(w.clone()).is_ok() {
            self.inner.set_rx_waker(Box::new(move || w()));
        }
    }

    fn mtu(&self) -> u32 {
        let cfg = lock(&self.tx).config().mtu.min(lock(&self.rx).config().mtu);
        self.inner.mtu().min(u32::try_from(cfg).unwrap_or(u32::MAX))
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut v = self.inner.counters();
        let (t, r) = (
            lock(&self.tx).stats().clone(),
            lock(&self.rx).stats().clone(),
        );
        v.extend([
            ("impair_tx_lost", t.lost),
            ("impair_tx_queue_drops", t.queue_drops),
            ("impair_tx_duplicated", t.duplicated),
            ("impair_tx_reordered", t.reordered),
            ("impair_tx_corrupted", t.corrupted),
            ("impair_rx_lost", r.lost),
            ("impair_rx_queue_drops", r.queue_drops),
            ("impair_rx_duplicated", r.duplicated),
            ("impair_rx_reordered", r.reordered),
            ("impair_rx_corrupted", r.corrupted),
        ]);
        v
    }

    fn flush(&self) {
        self.inner.flush()
    }

    /// The transmit wire's backlog when it has a finite rate (what the impairment holds
    /// back beyond that, its propagation delay, is not a queue the stack can shorten).
    fn tx_backlog(&self, now: Instant) -> Option<TxBacklog> {
        wire_backlog(&lock(&self.tx), now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::mem_link;
    use std::time::Duration;

    #[test]
    fn delay_holds_frames_until_their_time_both_ways() {
        let (a, b) = mem_link(ImpairConfig::default(), ImpairConfig::default(), 1);
        let d = ImpairConfig {
            delay: Duration::from_millis(5),
            ..ImpairConfig::default()
        };
        let imp = Impaired::new(a, d.clone(), d, 9).unwrap();
        // Transmit: held in the wrapper, announced through next_rx, released by a poll.
        let t0 = crate::clock::now();
        imp.transmit(vec![1u8; 64]);
        let mut got = Vec::new();
        b.poll_rx(crate::clock::now(), &mut got, 8);
        assert!(got.is_empty() || crate::clock::now() >= t0 + Duration::from_millis(5));
        let due = imp.next_rx().expect("a frame is pending");
        assert!(due >= t0 + Duration::from_millis(5));
        let mut out = Vec::new();
        imp.poll_rx(due, &mut out, 8);
        b.poll_rx(crate::clock::now().max(due), &mut got, 8);
        assert_eq!(got.len(), 1, "released to the inner device at its time");
        // Receive: a frame from the other end waits 5 ms in the receive wire.
        b.transmit(vec![2u8; 64]);
        let now = crate::clock::now();
        imp.poll_rx(now, &mut out, 8);
        assert!(out.is_empty(), "not before its delay");
        let due = imp.next_rx().expect("pending on the receive wire");
        assert!(due >= now + Duration::from_millis(5) - Duration::from_micros(1));
        imp.poll_rx(due, &mut out, 8);
        assert_eq!(out, vec![vec![2u8; 64]]);
        assert_eq!(imp.next_rx(), None);
    }

    #[test]
    fn the_transmit_wire_backlog_is_reported_with_a_finite_rate() {
        let (a, _b) = mem_link(ImpairConfig::default(), ImpairConfig::default(), 1);
        let plain = Impaired::new(
            a.clone(),
            ImpairConfig::default(),
            ImpairConfig::default(),
            1,
        )
        .unwrap();
        plain.transmit(vec![0u8; 1000]);
        assert_eq!(plain.tx_backlog(crate::clock::now()), None);
        let slow = ImpairConfig {
            rate_bps: Some(1_000_000),
            queue_bytes: 100_000,
            ..ImpairConfig::default()
        };
        let imp = Impaired::new(a, slow, ImpairConfig::default(), 1).unwrap();
        let t0 = crate::clock::now();
        for _ in 0..10 {
            imp.transmit(vec![0u8; 1000]);
        }
        let bl = imp.tx_backlog(crate::clock::now()).expect("finite rate");
        assert_eq!(bl.rate_bps, 1_000_000);
        assert!(bl.bytes > 5000 && bl.bytes <= 10_000, "{bl:?}");
        assert_eq!(
            imp.tx_backlog(t0 + Duration::from_secs(1)).unwrap().bytes,
            0
        );
        // It checks the MTU itself, so it never takes over-MTU frames for the inner device.
        assert!(!imp.tso());
    }

    #[test]
    fn loss_is_seeded_and_counted_and_bad_configs_are_refused() {
        let loss = ImpairConfig {
            loss: 0.5,
            ..ImpairConfig::default()
        };
        let run = |seed| {
            let (a, b) = mem_link(ImpairConfig::default(), ImpairConfig::default(), 1);
            let imp = Impaired::new(a, loss.clone(), ImpairConfig::default(), seed).unwrap();
            for i in 0..1000u32 {
                imp.transmit(i.to_be_bytes().repeat(16));
            }
            let mut got = Vec::new();
            b.poll_rx(crate::clock::now(), &mut got, 2000);
            (got, imp.tx_stats())
        };
        let (g1, s1) = run(5);
        let (g2, _) = run(5);
        let (g3, _) = run(6);
        assert_eq!(g1, g2, "a seed decides the same losses");
        assert_ne!(g1, g3);
        assert!(
            (350..650).contains(&g1.len()),
            "{} of 1000 delivered",
            g1.len()
        );
        assert_eq!(s1.lost as usize + g1.len(), 1000);
        let (a, _) = mem_link(ImpairConfig::default(), ImpairConfig::default(), 1);
        let bad = ImpairConfig {
            loss: 2.0,
            ..ImpairConfig::default()
        };
        let e = Impaired::new(a.clone(), bad.clone(), ImpairConfig::default(), 1)
            .err()
            .unwrap();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("transmit"), "{e}");
        let ok = Impaired::new(a, ImpairConfig::default(), ImpairConfig::default(), 1).unwrap();
        assert!(ok.set_impairment(ImpairConfig::default(), bad).is_err());
    }
}
