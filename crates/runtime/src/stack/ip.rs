//! The bridge to the core's IP layer (ARP, IPv4, ICMP, UDP, reassembly, GRO, GSO),
//! which the stack holds behind one mutex for its devices.
//!
//! A device batch takes the lock once (`receive_frames`); the IP layer hands the
//! batch's TCP segments to an `Inbound` sink (`inbound.rs`), and once the lock is let go
//! each goes to its squeue after one classifier lookup (`deliver_inbound`): the
//! receiving squeue takes its own at once, as one batch. Frames the IP layer makes
//! leave before the lock is let go; its next deadline is published for squeue 0, which
//! runs its timers.

use super::perimeter::{self, TcpPerimeter};
use super::{Inbound, InboundItem, Stack, StackInner};
use crate::dev::Device;
use crate::squeue::Mode;
use ember_core::host::IpLayer;
use ember_core::ip::route::IfaceId;
use ember_core::time::Instant;
use ember_core::wire::MacAddr;
use std::io;
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl StackInner {
    pub(super) fn ip(&self) -> std::sync::MutexGuard<'_, IpLayer> {
        self.ip.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the IP layer, then sends the frames it produced, publishes its next
    /// deadline and, with the IP layer let go, gives what it received for TCP to the
    /// squeues (`p`: the squeue this thread runs, which takes its own segments at once).
    pub(crate) fn with_ip<R>(
        &self,
        now: Instant,
        mut p: Option<&mut TcpPerimeter>,
        f: impl FnOnce(&mut IpLayer, &mut Inbound) -> R,
    ) -> R {
        // The squeue's own buffer, kept from batch to batch (no allocation per batch).
        let mut inbound = p
            .as_deref_mut()
            .map(|p| std::mem::take(&mut p.inbound))
            .unwrap_or_default();
        let r = {
            let mut ip = self.ip();
            let r = f(&mut ip, &mut inbound);
            self.drain_host_tx(&mut ip);
            self.publish_host_deadline(&ip);
            r
        };
        let p = if inbound.0.is_empty() {
            p
        } else {
            self.deliver_inbound(p, now, &mut inbound)
        };
        if let Some(p) = p {
            inbound.0.clear();
            p.inbound = inbound;
        }
        r
    }

    fn drain_host_tx(&self, h: &mut IpLayer) {
        let mut last: Option<&Arc<dyn Device>> = None;
        while let Some(f) = h.poll_transmit() {
            // The IP layer's own frames (ARP, ICMP, UDP) leave on the first queue.
            if let Some((_, dev)) = self.device(f.iface, 0) {
                dev.transmit(f.data);
                if let Some(l) = last {
                    if !Arc::ptr_eq(l, dev) {
                        l.flush();
                    }
                }
                last = Some(dev);
            }
        }
        if let Some(l) = last {
            l.flush();
        }
        while let Some(id) = h.poll_udp_event() {
            let u = self
                .udp_socks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&id)
                .and_then(std::sync::Weak::upgrade);
            if let Some(u) = u {
                u.waitable.raise(crate::socket::ready::READ);
            }
        }
    }

    fn publish_host_deadline(&self, h: &IpLayer) {
        let t = h.poll_timeout().map_or(u64::MAX, |t| t.as_nanos());
        let old = self.host_deadline_ns.swap(t, Ordering::Relaxed);
        if t < old {
            if let Some(sq) = self.squeues.first() {
                sq.kick();
            }
        }
    }

    pub(crate) fn host_deadline(&self) -> Option<Instant> {
        match self.host_deadline_ns.load(Ordering::Relaxed) {
            u64::MAX => None,
            t => Some(Instant::from_nanos(t)),
        }
    }

    /// Runs the IP layer's timers if due.
    pub(crate) fn host_timers(&self, p: &mut TcpPerimeter, now: Instant) -> bool {
        if self.host_deadline().is_none_or(|t| t > now) {
            return false;
        }
        self.with_ip(now, Some(p), |ip, tcp| ip.handle_timeout(now, tcp));
        true
    }

    /// Frames from a device, taken in as one batch by the IP layer (one lock): with
    /// `ip_gro`, a flow's consecutive in-order segments reach TCP as one. Then, with the
    /// IP layer let go, each TCP segment goes to its squeue: this one (`p`) takes its own
    /// at once, as one batch.
    pub(crate) fn receive_frames(
        &self,
        p: &mut TcpPerimeter,
        now: Instant,
        iface: IfaceId,
        frames: &mut Vec<Vec<u8>>,
    ) {
        self.with_ip(now, Some(p), |ip, tcp| {
            // Frames lent, not shared: a TCP segment reaches its squeue as a copy
            // (`inbound.rs`). `receive_batch_bytes` would make it a slice
            // of its frame instead, but for the small segments of request/response
            // traffic the shared buffer's allocation and reference counts cost more than
            // the copy (callgrind, ember-wire: +1.9 % per rr round trip, +2.6 % per crr
            // cycle); which to use by segment size is the copy-count work's to decide.
            ip.receive_batch(now, iface, frames.drain(..), tcp);
            ip.run_loopback(now, tcp);
        });
    }

    /// Gives what the IP layer received for TCP to the squeues, one classifier lookup per
    /// segment: a segment for `p`'s squeue is taken in here (as one batch), one for
    /// another squeue enters that squeue; a segment for no connection goes to the squeue
    /// its flow hashes to, where the endpoint answers it.
    fn deliver_inbound<'p>(
        &self,
        mut p: Option<&'p mut TcpPerimeter>,
        now: Instant,
        inbound: &mut Inbound,
    ) -> Option<&'p mut TcpPerimeter> {
        let n = self.squeues.len();
        if let Some(p) = p.as_deref_mut() {
            p.begin_batch();
        }
        for item in inbound.0.drain(..) {
            match item {
                InboundItem::Segment(seg) => {
                    let Some(t) = seg.tuple() else {
                        continue;
                    };
                    let loc = self.classifier.lookup(&t);
                    let target = loc.map_or_else(|| perimeter::rss_queue(&t, n), |l| l.sq);
                    match p.as_deref_mut() {
                        Some(p) if p.id == target => {
                            p.input_classified(self, now, seg, loc.map(|l| l.key));
                        }
                        _ => self.to_squeue(target, 0, seg),
                    }
                }
                InboundItem::IcmpError(e) => {
                    let Some(loc) = self.classifier.lookup(&(e.local, e.remote)) else {
                        continue;
                    };
                    match p.as_deref_mut() {
                        Some(p) if p.id == loc.sq => p.icmp_error(self, now, loc.key, e),
                        _ => {
                            if let Some(sq) = self.squeues.get(loc.sq) {
                                sq.enter(
                                    Mode::Fill,
                                    loc.key.as_u64(),
                                    move |q: &mut TcpPerimeter| {
                                        if let Some(st) = q.stack.upgrade() {
                                            q.icmp_error(&st, crate::clock::now(), loc.key, e);
                                        }
                                    },
                                );
                            }
                        }
                    }
                }
            }
        }
        if let Some(p) = p.as_deref_mut() {
            p.end_batch(self, now);
        }
        p
    }

    /// The interface's MAC and the device queue squeue `sq` transmits on.
    pub(crate) fn device(&self, iface: IfaceId, sq: usize) -> Option<(MacAddr, &Arc<dyn Device>)> {
        let (mac, queues) = self.devices.get(usize::from(iface.0))?;
        Some((*mac, queues.get(sq % queues.len().max(1))?))
    }

    pub(crate) fn forget_next_hop(&self, dst: Ipv4Addr) {
        self.ip().forget_next_hop(dst);
    }

    pub(crate) fn next_hop(&self, now: Instant, dst: Ipv4Addr) -> Option<(IfaceId, MacAddr)> {
        match self.ip().next_hop(now, dst) {
            Some((iface, Some(mac), _)) => Some((iface, mac)),
            _ => None,
        }
    }

    /// Hands a TCP datagram (with Ethernet headroom; `gso` > 0 for a large segment) to the
    /// IP layer, then sends the frames it produced.
    pub(crate) fn send_via_host(&self, now: Instant, frame: Vec<u8>, gso: u16) {
        self.with_ip(now, None, |ip, tcp| {
            let _ = ip.send_tcp_gso(now, frame, gso, tcp);
        });
    }
}

impl Stack {
    /// Sends an ICMP echo request (ping) from this stack.
    pub fn ping(&self, dst: Ipv4Addr, ident: u16, seq_no: u16, payload: &[u8]) -> io::Result<()> {
        let now = crate::clock::now();
        self.inner.with_ip(now, None, |ip, tcp| {
            ip.ping(now, dst, ident, seq_no, payload, tcp)
        })
    }

    /// Echo replies received so far (drained).
    pub fn ping_replies(&self) -> Vec<ember_core::host::PingReply> {
        self.inner.ip().take_ping_replies()
    }

    /// Runs `f` with the IP layer locked (UDP sockets use it); what it hands TCP goes to
    /// the squeues.
    pub(crate) fn with_ip<R>(&self, f: impl FnOnce(&mut IpLayer, &mut Inbound) -> R) -> R {
        self.inner.with_ip(crate::clock::now(), None, f)
    }
}
