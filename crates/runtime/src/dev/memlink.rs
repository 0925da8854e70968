//! The in-memory link in real time: `ember-netem`'s impaired [`Link`] (two wires with
//! loss, duplication, reordering, corruption, delay, rate and queue), driven by the
//! process clock, with each end a [`Device`] whose receive side feeds a squeue.
//!
//! Transmitting on one end puts the frame on its wire and wakes the other end's squeue;
//! that squeue polls the wire at the arrival instants the wire announces. Both ends share
//! one mutex around the link: the wire model is tiny, and a frame crosses it twice (send,
//! receive), so contention is bounded by the frame rate.

use super::device::{Device, TxBacklog};
use ember_core::time::Instant;
use ember_netem::{End, ImpairConfig, Link, WireStats};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

struct Shared {
    link: Mutex<Link>,
    wakers: [OnceLock<Box<dyn Fn() + Send + Sync>>; 2],
    mtu: u32,
    /// Per end: its transmit wire has a finite rate (so a backlog worth reporting). Read
    /// without the link's lock, so a device without one costs the stack nothing to ask.
    rated: [AtomicBool; 2],
}

/// One end of an in-memory link.
pub struct MemLinkEnd {
    shared: Arc<Shared>,
    end: End,
}

impl core::fmt::Debug for MemLinkEnd {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MemLinkEnd")
            .field("end", &self.end)
            .finish()
    }
}

fn idx(e: End) -> usize {
    match e {
        End::A => 0,
        End::B => 1,
    }
}

/// A real-time in-memory link: `a_to_b` impairs frames from the first end to the
/// second, `b_to_a` the other way; `seed` makes the impairment reproducible.
pub fn mem_link(
    a_to_b: ImpairConfig,
    b_to_a: ImpairConfig,
    seed: u64,
) -> (Arc<MemLinkEnd>, Arc<MemLinkEnd>) {
    let mtu = (a_to_b.mtu.min(b_to_a.mtu) as u32).clamp(68, 65_535);
    let rated = [
        AtomicBool::new(a_to_b.rate_bps.is_some()),
        AtomicBool::new(b_to_a.rate_bps.is_some()),
    ];
    let shared = Arc::new(Shared {
        link: Mutex::new(Link::new(a_to_b, b_to_a, seed)),
        wakers: [OnceLock::new(), OnceLock::new()],
        mtu,
        rated,
    });
    (
        Arc::new(MemLinkEnd {
            shared: shared.clone(),
            end: End::A,
        }),
        Arc::new(MemLinkEnd {
            shared,
            end: End::B,
        }),
    )
}

impl MemLinkEnd {
    fn link(&self) -> std::sync::MutexGuard<'_, Link> {
        self.shared.link.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counters of the wire this end transmits on.
    pub fn tx_stats(&self) -> WireStats {
        self.link().wire(self.end).stats().clone()
    }

    /// Changes the impairment of the wire this end transmits on.
    pub fn set_tx_impairment(&self, cfg: ImpairConfig) {
        let mut l = self.link();
        self.shared.rated[idx(self.end)].store(cfg.rate_bps.is_some(), Ordering::Relaxed);
        l.wire_mut(self.end).set_config(cfg);
    }
}

impl Device for MemLinkEnd {
    fn transmit(&self, frame: Vec<u8>) {
        let now = crate::clock::now();
        {
            let mut l = self.link();
            let _ = l.send(now, self.end, frame);
        }
        if let Some(w) = self.shared.wakers[idx(self.end.peer())].get() {
            w();
        }
    }

    fn transmit_batch(&self, frames: &mut Vec<Vec<u8>>) {
        if frames.is_empty() {
            return;
        }
        // One clock read, one lock and one wake-up for the whole batch.
        let now = crate::clock::now();
        {
            let mut l = self.link();
            for f in frames.drain(..) {
                let _ = l.send(now, self.end, f);
            }
        }
        if let Some(w) = self.shared.wakers[idx(self.end.peer())].get() {
            w();
        }
    }

    fn poll_rx(&self, now: Instant, out: &mut Vec<Vec<u8>>, budget: usize) {
        let mut l = self.link();
        for _ in 0..budget {
            match l.recv(now, self.end) {
                Some(f) => out.push(f),
                None => break,
            }
        }
    }

    fn next_rx(&self) -> Option<Instant> {
        self.link().wire(self.end.peer()).next_arrival()
    }

    fn set_rx_waker(&self, waker: Box<dyn Fn() + Send + Sync>) {
        let _ = self.shared.wakers[idx(self.end)].set(waker);
    }

    fn mtu(&self) -> u32 {
        self.shared.mtu
    }

    fn tx_backlog(&self, now: Instant) -> Option<TxBacklog> {
        if !self.shared.rated[idx(self.end)].load(Ordering::Relaxed) {
            return None;
        }
        self.link().tx_backlog(now, self.end)
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let l = self.link();
        let mut v = l.wire(self.end.peer()).stats().counters(false);
        v.extend(l.wire(self.end).stats().counters(true));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_end_reports_its_own_transmit_backlog() {
        let slow = ImpairConfig {
            rate_bps: Some(1_000_000),
            queue_bytes: 100_000,
            ..ImpairConfig::default()
        };
        let (a, b) = mem_link(slow, ImpairConfig::default(), 1);
        let t0 = crate::clock::now();
        for _ in 0..10 {
            a.transmit(vec![0u8; 1000]);
        }
        // 10,000 bytes at 1 Mbit/s take 80 ms; only the first few can be gone by now.
        let bl = a.tx_backlog(crate::clock::now()).expect("a finite rate");
        assert_eq!(bl.rate_bps, 1_000_000);
        assert!(bl.bytes > 5000 && bl.bytes <= 10_000, "{bl:?}");
        assert_eq!(
            a.tx_backlog(t0 + std::time::Duration::from_secs(1))
                .unwrap()
                .bytes,
            0
        );
        assert_eq!(b.tx_backlog(crate::clock::now()), None);
        assert!(!a.tso() && !b.tso());
    }

    #[test]
    fn a_batch_arrives_in_order_with_one_wake_up() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let (a, b) = mem_link(ImpairConfig::default(), ImpairConfig::default(), 1);
        let wakes = Arc::new(AtomicUsize::new(0));
        let w = wakes.clone();
        b.set_rx_waker(Box::new(move || {
            w.fetch_add(1, Ordering::SeqCst);
        }));
        let mut batch: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 60]).collect();
        a.transmit_batch(&mut batch);
        assert!(batch.is_empty());
        assert_eq!(wakes.load(Ordering::SeqCst), 1);
        a.transmit_batch(&mut Vec::new());
        assert_eq!(
            wakes.load(Ordering::SeqCst),
            1,
            "an empty batch wakes nobody"
        );
        let mut out = Vec::new();
        b.poll_rx(crate::clock::now(), &mut out, 16);
        let firsts: Vec<u8> = out.iter().map(|f| f[0]).collect();
        assert_eq!(firsts, vec![0, 1, 2, 3, 4]);
    }
}
