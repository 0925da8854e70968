//! The transmit side of one squeue, between TCP and the devices: software segmentation
//! (GSO), the fair queue, the device-queue limit, and the credit that TCP Small Queues
//! counts.
//!
//! # Design
//! A squeue transmits on device queue `i mod queues`; the state in front of each device
//! queue it sends on is the squeue's own and needs no lock: one [`TxQueues`] per squeue,
//! one [`TxQ`] per device it has sent on. (Several squeues on a single-queue device each
//! have their own fair queue feeding the one device FIFO: fairness holds within a
//! squeue, and the device limit can be passed by a frame per squeue.)
//!
//! * **GSO.** TCP hands over segments of up to 64 KiB (`ip_lso_outbound`) without a TCP
//!   checksum. A device that segments itself ([`Device::tso`]: TAP with the virtio-net
//!   header) gets them whole and has the kernel fill each piece's checksum from the
//!   pseudo-header sum; for any other, [`gso_split`] cuts them into MTU-sized frames here,
//!   just before the device, each with its own headers and checksum: every checksum is
//!   computed once, over the frame that carries it.
//! * **Devices with a visible queue** ([`Device::tx_backlog`] is `Some`: an in-memory
//!   link with a rate, the wire model in front of a real device) get a fair queue
//!   ([`Fq`]: deficit round robin over the flow hash, new flows first, CoDel per flow)
//!   and a byte limit on their own queue, like Linux's BQL: frames move from the fair
//!   queue to the device only while the device holds less than `ip_dev_queue_us` of
//!   transmission time (at least two full frames). So the device's FIFO, the one place
//!   where everything waits in order, stays short, and the order in which flows get the
//!   link is decided here, fairly. When the device queue is full, the squeue sets a
//!   deadline for the instant it will have drained below the limit.
//! * **Devices without one** (TAP, AF_PACKET, an in-memory link without a rate: their
//!   transmit hands the frame on synchronously) get frames at once: a queue in front of
//!   them would only add a copy and a delay.
//! * **TCP Small Queues.** Every frame a connection has in a fair queue is counted on the
//!   connection ([`Connection::tsq_bytes`](super::perimeter::Connection)); TCP may add new data only
//!   while that stays under about 1 ms at the link rate or two of its segments
//!   (`tcp_tsq_us`), so a bulk sender keeps its backlog in its own send buffer, not in
//!   front of everyone else's packets. Credit returns when a frame leaves for the device
//!   or is dropped; a connection that TCP held back is flushed again once all of its
//!   credit is back.
//! * The IP layer's own frames (ARP, ICMP, UDP) do not enter the fair queue: they go to
//!   the device at once and wait at most behind the ~1 ms of TCP the device holds (a bulk
//!   transfer must not hold a ping back). UDP does not go through the squeues, so nothing
//!   here holds a UDP bulk sender back.
//! * A FIN is never held here: it rides on the last piece of its segment or goes alone,
//!   and leaves as soon as the data ahead of it in its own flow has (a NIC's LSO buffer
//!   once kept a server's FIN for 3.4 s).

use crate::dev::{feed_device, frame_flow, Device, Fq, FqConfig, FqStats, QItem};
use core::time::Duration;
use ember_core::ip::gso::gso_split;
use ember_core::params::Params;
use ember_core::time::Instant;
use std::sync::Arc;

/// What the transmit side counts (per squeue; summed when read).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TxStats {
    /// Large segments split in software before a device (GSO).
    pub gso_splits: u64,
    /// Frames those splits made.
    pub gso_segs: u64,
    /// Large segments a device took whole (TSO).
    pub tso_sends: u64,
    /// Large segments that could not be split (malformed: never expected) and were dropped.
    pub gso_errors: u64,
    /// Frames handed straight to a device without a queue of its own.
    pub direct: u64,
    /// Times frames were left waiting in a fair queue (the device queue full, or a paced
    /// flow's next departure still ahead).
    pub dev_queue_waits: u64,
    /// Times TCP Small Queues held a connection's new data back.
    pub tsq_throttles: u64,
    /// The fair queues' counters, summed.
    pub fq: FqStats,
}

impl core::ops::AddAssign for TxStats {
    fn add_assign(&mut self, o: TxStats) {
        self.gso_splits += o.gso_splits;
        self.gso_segs += o.gso_segs;
        self.tso_sends += o.tso_sends;
        self.gso_errors += o.gso_errors;
        self.direct += o.direct;
        self.dev_queue_waits += o.dev_queue_waits;
        self.tsq_throttles += o.tsq_throttles;
        self.fq += o.fq;
    }
}

/// The settings the transmit side takes from the tunables.
#[derive(Debug, Clone)]
pub(crate) struct TxConfig {
    pub fq: bool,
    pub fq_cfg: FqConfig,
    pub tsq: Duration,
    pub pacing: bool,
}

impl TxConfig {
    pub fn from_params(p: &Params) -> TxConfig {
        let fq_cfg = FqConfig {
            quantum: p.ip_fq_quantum,
            limit_pkts: p.ip_fq_limit,
            codel_target: Duration::from_micros(u64::from(p.ip_fq_codel_target)),
            codel_interval: Duration::from_micros(u64::from(p.ip_fq_codel_interval)),
            ..FqConfig::default()
        };
        TxConfig {
            fq: p.ip_fq,
            fq_cfg,
            tsq: Duration::from_micros(u64::from(p.tcp_tsq_us)),
            pacing: p.tcp_pacing,
        }
    }
}

/// The fair queue in front of one device queue.
struct TxQ {
    dev: Arc<dyn Device>,
    fq: Fq,
    /// When frames wait: the instant the device queue will have room again, or a paced
    /// flow's next departure.
    wake: Option<Instant>,
    /// The device queue's rate when the fair queue was set up for it.
    rate_bps: u64,
}

/// The tunables' fair-queue settings for a link of `rate_bps`, with CoDel's target at
/// least one full frame's transmission time (RFC 8289 §4.3: on a slow link one frame
/// already waits that long).
fn link_config(base: &FqConfig, rate_bps: u64, mtu: usize) -> FqConfig {
    let l = FqConfig::for_link(Some(rate_bps), mtu + ember_core::wire::ETHERNET_HEADER_LEN);
    let mut c = base.clone();
    c.codel_target = c.codel_target.max(l.codel_target);
    c.codel_interval = c.codel_interval.max(l.codel_interval);
    c
}

/// The payload per piece a segmenting device cuts `frame` into: its MTU less the IP and
/// TCP headers (the TAP device tells the kernel exactly that). TCP's pieces may be
/// smaller (the peer's MSS, SACK blocks): such a segment is split here instead.
fn device_cuts_at(frame: &[u8], mtu: usize) -> usize {
    let eth = ember_core::wire::ETHERNET_HEADER_LEN;
    let ihl = frame.get(eth).map_or(0, |b| usize::from(b & 0x0f) * 4);
    let thl = frame
        .get(eth + ihl + 12)
        .map_or(0, |b| usize::from(b >> 4) * 4);
    mtu.saturating_sub(ihl + thl)
}

/// Bytes `rate_bps` moves in `d` (saturating).
pub(crate) fn bytes_in(rate_bps: u64, d: Duration) -> u64 {
    let b = u128::from(rate_bps) * d.as_nanos() / 8_000_000_000;
    u64::try_from(b).unwrap_or(u64::MAX)
}

/// Frames gathered for one device.
type DeviceBatch = (Arc<dyn Device>, Vec<Vec<u8>>);

/// The transmit side of one squeue.
pub(crate) struct TxQueues {
    qs: Vec<TxQ>,
    pub stats: TxStats,
    pub cfg: TxConfig,
    pieces: Vec<Vec<u8>>,
    dropped: Vec<QItem>,
    /// Frames for devices without a queue of their own, gathered until the connection's
    /// flush ends (or the squeue leaves, for frames sent outside a flush): one
    /// `transmit_batch` per device per flush, so a run of ACKs or GSO pieces costs the
    /// device one lock and the peer one wake-up.
    batches: Vec<DeviceBatch>,
    /// The flow-hash seed (per stack, so flows cannot be steered into one bucket).
    seed: u64,
}

/// A frame leaving TCP for a device.
pub(crate) struct TxFrame {
    /// Ethernet header, IP header, TCP header and payload; checksums filled.
    pub frame: Vec<u8>,
    /// Payload bytes per piece if the segment is larger than one (0: not).
    pub gso_size: u16,
    /// The connection's key, for TCP Small Queues credit (0: none).
    pub owner: u64,
    /// The flow's pacing rate, if it is paced.
    pub pace_bps: Option<u64>,
}

impl TxQueues {
    pub fn new(cfg: TxConfig, seed: u64) -> TxQueues {
        TxQueues {
            qs: Vec::new(),
            stats: TxStats::default(),
            cfg,
            pieces: Vec::new(),
            dropped: Vec::new(),
            batches: Vec::new(),
            seed,
        }
    }

    /// Applies changed tunables (new fair-queue settings take effect at once).
    pub fn set_config(&mut self, cfg: TxConfig) {
        for q in &mut self.qs {
            let mtu = q.dev.mtu() as usize;
            q.fq.set_config(link_config(&cfg.fq_cfg, q.rate_bps, mtu));
        }
        self.cfg = cfg;
    }

    /// Counters, with the fair queues' summed in.
    pub fn stats(&self) -> TxStats {
        let mut s = self.stats.clone();
        s.fq = FqStats::default();
        for q in &self.qs {
            s.fq += q.fq.stats();
        }
        s
    }

    /// The earliest instant a queue needs the squeue again.
    pub fn next_wake(&self) -> Option<Instant> {
        self.qs.iter().filter_map(|q| q.wake).min()
    }

    /// Sends `f` on `dev`: split if needed, then straight to the device or through its
    /// fair queue. `credit(owner, delta)` is called with `+len` for every frame that
    /// enters a fair queue and `-len` for every one that leaves it (for the device, or
    /// dropped); owner 0 (no connection) is the callee's to ignore. Returns the device
    /// queue's rate if the frames went through a fair queue.
    pub fn send(
        &mut self,
        now: Instant,
        dev: &Arc<dyn Device>,
        f: TxFrame,
        credit: &mut dyn FnMut(u64, isize),
    ) -> Option<u64> {
        let mtu = dev.mtu() as usize;
        let ip_len = f
            .frame
            .len()
            .saturating_sub(ember_core::wire::ETHERNET_HEADER_LEN);
        self.pieces.clear();
        if f.gso_size > 0 {
            // A large segment comes without its TCP checksum: the device that segments
            // it fills each piece's (TSO), or GSO does here.
            if dev.tso() && ip_len > mtu && device_cuts_at(&f.frame, mtu) == usize::from(f.gso_size)
            {
                self.stats.tso_sends += 1;
                self.pieces.push(f.frame);
            } else {
                match gso_split(&f.frame, usize::from(f.gso_size), &mut self.pieces) {
                    Ok(n) => {
                        self.stats.gso_splits += 1;
                        self.stats.gso_segs += n as u64;
                    }
                    Err(_) => {
                        self.stats.gso_errors += 1;
                        return None;
                    }
                }
            }
        } else {
            self.pieces.push(f.frame);
        }
        let backlog = if self.cfg.fq {
            dev.tx_backlog(now)
        } else {
            None
        };
        let qi = self.qs.iter().position(|q| Arc::ptr_eq(&q.dev, dev));
        let queued_before = qi.is_some_and(|i| !self.qs[i].fq.is_empty());
        if backlog.is_none() && !queued_before {
            // No queue ember can see and nothing waiting here: to the device at the end
            // of this flush, with the rest of its frames for it.
            self.stats.direct += self.pieces.len() as u64;
            self.batch(dev);
            return None;
        }
        // Frames still waiting here (fair queueing was just switched off, or the device
        // lost its rate) keep these behind them, so a flow never overtakes itself; the
        // queue drains as the device takes frames, then frames go direct again.
        let i = match qi {
            Some(i) => i,
            None => {
                let Some(b) = backlog else {
                    // (Not reached: no queue means nothing waited.)
                    self.batch(dev);
                    return None;
                };
                self.qs.push(TxQ {
                    dev: dev.clone(),
                    fq: Fq::new(link_config(&self.cfg.fq_cfg, b.rate_bps, mtu)),
                    wake: None,
                    rate_bps: b.rate_bps,
                });
                self.qs.len() - 1
            }
        };
        let rate = backlog.map_or(self.qs[i].rate_bps, |b| b.rate_bps);
        let mut dropped = std::mem::take(&mut self.dropped);
        {
            let q = &mut self.qs[i];
            for p in self.pieces.drain(..) {
                let flow = frame_flow(&p, self.seed);
                credit(f.owner, p.len() as isize);
                q.fq.enqueue(now, flow, p, f.owner, f.pace_bps, &mut |it: QItem| {
                    dropped.push(it)
                });
            }
        }
        for it in dropped.drain(..) {
            credit(it.owner, -(it.frame.len() as isize));
        }
        self.dropped = dropped;
        self.run(now, i, credit);
        Some(rate)
    }

    /// Adds `pieces` to `dev`'s batch.
    fn batch(&mut self, dev: &Arc<dyn Device>) {
        match self.batches.iter_mut().find(|(d, _)| Arc::ptr_eq(d, dev)) {
            Some((_, b)) => b.append(&mut self.pieces),
            None => {
                let b = std::mem::take(&mut self.pieces);
                self.batches.push((dev.clone(), b));
            }
        }
    }

    /// Hands every gathered batch to its device (a flush ended, or the squeue leaves).
    pub fn flush_batches(&mut self) {
        for (dev, b) in &mut self.batches {
            if !b.is_empty() {
                dev.transmit_batch(b);
            }
        }
    }

    /// Moves frames from queue `i` to its device while the device has room.
    fn run(&mut self, now: Instant, i: usize, credit: &mut dyn FnMut(u64, isize)) {
        let Some(q) = self.qs.get_mut(i) else {
            return;
        };
        let mut dropped = std::mem::take(&mut self.dropped);
        q.wake = feed_device(
            &mut q.fq,
            &*q.dev,
            now,
            &mut |owner, len| {
                credit(owner, -(len as isize));
            },
            &mut |it: QItem| dropped.push(it),
        );
        if q.wake.is_some() {
            self.stats.dev_queue_waits += 1;
        }
        for it in dropped.drain(..) {
            credit(it.owner, -(it.frame.len() as isize));
        }
        self.dropped = dropped;
    }

    /// Runs every queue whose wake-up time has come; returns the devices it transmitted
    /// on (for the squeue to flush when it leaves).
    pub fn service(
        &mut self,
        now: Instant,
        credit: &mut dyn FnMut(u64, isize),
        dirty: &mut Vec<Arc<dyn Device>>,
    ) -> bool {
        let mut did = false;
        for i in 0..self.qs.len() {
            if self.qs[i].wake.is_some_and(|t| t <= now) {
                did = true;
                self.run(now, i, credit);
                let d = &self.qs[i].dev;
                if !dirty.iter().any(|x| Arc::ptr_eq(x, d)) {
                    dirty.push(d.clone());
                }
            }
        }
        did
    }

    /// The TCP Small Queues limit for a connection whose latest data segment carried
    /// `seg` bytes, on a link of `rate_bps`: two segments, or `tcp_tsq_us` at the link
    /// rate, whichever is larger; `None` when the limit is off.
    pub fn tsq_limit(&self, seg: u32, rate_bps: u64) -> Option<u32> {
        if self.cfg.tsq.is_zero() {
            return None;
        }
        let t = bytes_in(rate_bps, self.cfg.tsq);
        Some(u32::try_from(t.max(2 * u64::from(seg))).unwrap_or(u32::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_times() {
        assert_eq!(bytes_in(100_000_000, Duration::from_millis(1)), 12_500);
        assert_eq!(bytes_in(u64::MAX, Duration::from_secs(1_000_000)), u64::MAX);
    }
}
