//! Feeding a device from its fair queue under a byte-queue limit.
//!
//! The fair queue itself ([`Fq`], `ember_netem::fair_queue`) is a sans-IO link model the
//! simulator uses too; what is here is the glue between it and the runtime's [`Device`]
//! trait: hand a device frames only while its own transmit backlog is short, so that the
//! fair queue, not the device's FIFO, decides who goes next (like Linux's byte-queue
//! limits). Sans-IO as well: `now` is a parameter.

use ember_core::time::Instant;
use ember_netem::fair_queue::pace_gap;
use ember_netem::{byte_queue_limit, Fq, QItem};

use super::device::Device;

/// Hands frames from `fq` to `dev` at `now` while the device's own backlog
/// ([`Device::tx_backlog`]) is below its [`byte_queue_limit`] (a device that reports none is
/// never held back). `sent(owner, len)` is told of each frame just before it goes, so TCP
/// Small Queues credit can be returned; CoDel's drops go to `dropped`. Returns when to call
/// again: when the device's backlog will have drained below the limit (estimated from its
/// rate), or when a paced frame becomes eligible; `None` when the queue is empty.
pub fn feed_device(
    fq: &mut Fq,
    dev: &dyn Device,
    now: Instant,
    sent: &mut dyn FnMut(u64, usize),
    dropped: &mut dyn FnMut(QItem),
) -> Option<Instant> {
    let max_frame = (dev.mtu() as usize).saturating_add(14);
    loop {
        if fq.is_empty() {
            return None;
        }
        if let Some(b) = dev.tx_backlog(now) {
            // Never more than the device's queue can take with a full frame more (it
            // would tail-drop what the fair queue should have held).
            let limit = byte_queue_limit(b.rate_bps, max_frame)
                .min(b.capacity.saturating_sub(max_frame))
                .max(1);
            if b.bytes >= limit {
                // The backlog counts a frame until its last bit has left: wait for the
                // excess and one whole frame more, so that one wake-up is enough (a
                // wake at the excess alone can come before the frame in progress ends,
                // and repeat until it does).
                let excess = b.bytes - limit + 1 + max_frame;
                return Some(now.saturating_add(pace_gap(excess, b.rate_bps)));
            }
        }
        match fq.dequeue(now, dropped) {
            Some(it) => {
                sent(it.owner, it.frame.len());
                dev.transmit(it.frame);
            }
            None => return fq.next_time(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::TxBacklog;
    use super::*;
    use core::time::Duration;
    use ember_netem::FqConfig;

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    /// A frame of `len` bytes (at least 16) tagged with flow `f` and sequence number `s`.
    fn tagged(f: u8, s: u32, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len.max(16)];
        v[0] = f;
        v[1..5].copy_from_slice(&s.to_be_bytes());
        v
    }

    fn no_drop(_: QItem) {
        panic!("unexpected drop");
    }

    fn cfg_nocodel() -> FqConfig {
        FqConfig {
            codel: false,
            ..FqConfig::default()
        }
    }

    /// A device with a settable backlog that keeps what it is given.
    struct Sink {
        backlog: std::sync::Mutex<Option<usize>>,
        got: std::sync::Mutex<Vec<Vec<u8>>>,
    }

    impl Device for Sink {
        fn transmit(&self, f: Vec<u8>) {
            let mut b = self.backlog.lock().unwrap();
            if let Some(b) = b.as_mut() {
                *b += f.len();
            }
            self.got.lock().unwrap().push(f);
        }
        fn poll_rx(&self, _: Instant, _: &mut Vec<Vec<u8>>, _: usize) {}
        fn next_rx(&self) -> Option<Instant> {
            None
        }
        fn set_rx_waker(&self, _: Box<dyn Fn() + Send + Sync>) {}
        fn mtu(&self) -> u32 {
            1500
        }
        fn tx_backlog(&self, _: Instant) -> Option<TxBacklog> {
            self.backlog.lock().unwrap().map(|bytes| TxBacklog {
                bytes,
                rate_bps: 100_000_000,
                capacity: usize::MAX,
            })
        }
    }

    #[test]
    fn feeding_a_device_stops_at_its_byte_queue_limit() {
        let dev = Sink {
            backlog: std::sync::Mutex::new(Some(0)),
            got: std::sync::Mutex::new(Vec::new()),
        };
        let mut q = Fq::new(cfg_nocodel());
        for s in 0..20 {
            q.enqueue(ms(0), 1, tagged(1, s, 1514), 77, None, &mut no_drop);
        }
        let mut credit = Vec::new();
        // 100 Mbit/s: the limit is 12,500 bytes; frames go while the backlog is below it.
        let next = feed_device(
            &mut q,
            &dev,
            ms(0),
            &mut |o, l| credit.push((o, l)),
            &mut no_drop,
        );
        assert_eq!(dev.got.lock().unwrap().len(), 9);
        assert_eq!(credit, vec![(77, 1514); 9]);
        // 13,626 bytes held: 1127 bytes over; back when those and one whole frame more
        // have gone (2641 bytes, 211.28 µs at 100 Mbit/s), so one wake-up is enough.
        assert_eq!(next, Some(ms(0) + Duration::from_nanos(211_280)));
        // The device drained: the rest goes.
        *dev.backlog.lock().unwrap() = Some(0);
        let next = feed_device(&mut q, &dev, ms(1), &mut |_, _| {}, &mut no_drop);
        assert_eq!(dev.got.lock().unwrap().len(), 18);
        assert!(next.is_some());
        // A device without a visible queue takes everything at once.
        *dev.backlog.lock().unwrap() = None;
        assert_eq!(
            feed_device(&mut q, &dev, ms(2), &mut |_, _| {}, &mut no_drop),
            None
        );
        assert_eq!(dev.got.lock().unwrap().len(), 20);
        // Paced frames: come back at their time.
        q.enqueue(
            ms(3),
            2,
            tagged(2, 0, 1500),
            0,
            Some(12_000_000),
            &mut no_drop,
        );
        q.enqueue(
            ms(3),
            2,
            tagged(2, 1, 1500),
            0,
            Some(12_000_000),
            &mut no_drop,
        );
        assert_eq!(
            feed_device(&mut q, &dev, ms(3), &mut |_, _| {}, &mut no_drop),
            Some(ms(4))
        );
        assert_eq!(
            feed_device(&mut q, &dev, ms(4), &mut |_, _| {}, &mut no_drop),
            None
        );
        assert_eq!(dev.got.lock().unwrap().len(), 22);
    }
}
