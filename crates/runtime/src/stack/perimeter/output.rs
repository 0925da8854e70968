//! Output: a connection's segments to the loopback path or to a device, through the
//! fair queues and TCP Small Queues (`txq.rs`).

use super::{Connection, Segment, TcpPerimeter};
use crate::classifier::Tuple;
use crate::stack::txq::TxFrame;
use crate::stack::{Probe, StackInner};
use ember_core::host::HEADROOM;
use ember_core::ip::route::IfaceId;
use ember_core::slab::Key;
use ember_core::slab::Slab;
use ember_core::time::Instant;
use ember_core::wire::{
    ethertype, ip_proto, EthernetRepr, Ipv4Repr, MacAddr, TcpRepr, ETHERNET_HEADER_LEN,
    IPV4_HEADER_LEN,
};
use std::net::SocketAddrV4;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Loopback segments one entry processes before it queues the rest on its own squeue.
const LO_BUDGET: usize = 4096;

/// Room in front of a TCP segment bound for a device: the Ethernet header (the IP
/// layer's headroom) and the IP header.
const FRAME_FRONT: usize = HEADROOM + IPV4_HEADER_LEN;

/// What a TCP segment on its way to a device carries besides its bytes.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Tx {
    /// The connection's key (`Key::as_u64`), for TCP Small Queues; 0 for none.
    owner: u64,
    /// Payload per piece of a large segment (0: an ordinary one).
    gso: u16,
    /// Pacing rate (bits/s), if the connection is paced.
    pace: Option<u64>,
}

/// A connection's key as a fair-queue owner tag (0 is "no owner").
fn owner_tag(key: Key) -> u64 {
    key.as_u64().wrapping_add(1)
}

/// The connection an owner tag names.
fn owner_key(tag: u64) -> Option<Key> {
    tag.checked_sub(1).map(Key::from_u64)
}

impl TcpPerimeter {
    /// Sends a segment that belongs to no connection (a RST, a cookie SYN,ACK).
    pub(super) fn send_bare(
        &mut self,
        stack: &StackInner,
        now: Instant,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        r: &TcpRepr,
    ) {
        let mut bytes = vec![0u8; r.header_len()];
        r.emit_header(&mut bytes);
        self.output(
            stack,
            now,
            None,
            local,
            remote,
            0,
            bytes,
            false,
            Tx::default(),
        );
    }

    /// Starts taking in one device batch: connections flush at `end_batch`.
    pub fn begin_batch(&mut self) {
        self.batching = true;
    }

    /// Ends a device batch: every connection it touched sends what it has.
    pub fn end_batch(&mut self, stack: &StackInner, now: Instant) {
        self.batching = false;
        let keys = std::mem::take(&mut self.touched);
        for &k in &keys {
            self.flush(stack, now, k);
        }
        let mut keys = keys;
        keys.clear();
        if self.touched.is_empty() {
            self.touched = keys;
        }
    }

    /// Sends what connection `key` has to send, then runs [`TcpPerimeter::after`].
    pub fn flush(&mut self, stack: &StackInner, now: Instant, key: Key) {
        self.sync_tx(stack);
        loop {
            let Some(c) = self.conns.get_mut(key) else {
                return;
            };
            if c.tcb.take_negative_advice() {
                c.hop = None;
                stack.forget_next_hop(*c.tcb.remote().ip());
            }
            let local = c.tcb.local();
            let remote = c.tcb.remote();
            let tos = c.tcb.tos();
            let hop = c.hop;
            // TCP Small Queues: while this connection's frames wait in a fair queue, TCP
            // adds new data only up to the limit (`txq.rs`).
            let quota = if c.tsq_bytes > 0 {
                self.tx
                    .tsq_limit(c.last_seg, c.tsq_rate)
                    .map(|l| l.saturating_sub(c.tsq_bytes))
            } else {
                None
            };
            c.tcb.set_tx_quota(quota);
            let pace = if self.tx.cfg.pacing {
                c.tcb.pacing_rate()
            } else {
                None
            };
            let Some(out) = c.tcb.poll_transmit(now) else {
                break;
            };
            let hl = out.repr.header_len();
            let n = out.payload_len();
            let gso = out.gso_size;
            // A segment for a device is built where the frame will carry it, behind room
            // for the Ethernet and IP headers: one buffer and one payload copy per
            // segment (a loopback segment carries no headers).
            let framed = !stack.is_local_addr(*remote.ip());
            let front = if framed { FRAME_FRONT } else { 0 };
            let mut bytes = vec![0u8; front + hl + n];
            out.repr.emit_header(&mut bytes[front..front + hl]);
            out.copy_payload(&mut bytes[front + hl..]);
            stack.probe(self.id, Probe::TcpSend, local, remote, n);
            let tx = Tx {
                owner: owner_tag(key),
                gso,
                pace,
            };
            if n > 0 {
                if let Some(c) = self.conns.get_mut(key) {
                    c.last_seg = n as u32;
                }
            }
            let learned = self.output(stack, now, hop, local, remote, tos, bytes, framed, tx);
            if let (Some(h), Some(c)) = (learned, self.conns.get_mut(key)) {
                c.hop = Some(h);
            }
        }
        // What this flush sent to devices without a queue of their own leaves now, as one
        // batch per device (its GSO pieces, its ACKs).
        self.tx.flush_batches();
        if let Some(c) = self.conns.get_mut(key) {
            if c.tcb.take_tx_quota_blocked() {
                self.tx.stats.tsq_throttles += 1;
                c.tsq_throttled = true;
                if c.tsq_bytes == 0 {
                    // Its credit came back within this flush: go round again.
                    c.tsq_throttled = false;
                    self.tsq_ready.push(key);
                }
            }
        }
        self.after(stack, now, key);
        self.run_tsq_ready(stack, now);
    }

    /// Flushes the connections whose TCP Small Queues credit has returned.
    pub(super) fn run_tsq_ready(&mut self, stack: &StackInner, now: Instant) {
        if self.tsq_running {
            return;
        }
        self.tsq_running = true;
        // Bounded: a connection is queued here once per return of credit, and credit
        // returns only as its frames leave a fair queue.
        let mut rounds = 0;
        while !self.tsq_ready.is_empty() && rounds < 64 {
            rounds += 1;
            let keys = std::mem::take(&mut self.tsq_ready);
            for k in keys {
                self.flush(stack, now, k);
            }
        }
        self.tsq_running = false;
    }

    /// Applies the stack's transmit settings if they changed since this squeue last looked.
    pub(super) fn sync_tx(&mut self, stack: &StackInner) {
        let g = stack.tx_gen.load(Ordering::Relaxed);
        if g != self.tx_gen {
            self.tx_gen = g;
            self.tx.set_config(stack.tx_config());
        }
    }

    /// A device queue's fair queue took (`delta` > 0) or released (< 0) bytes of
    /// connection `owner`: TCP Small Queues accounting.
    pub(super) fn tsq_credit(
        conns: &mut Slab<Connection>,
        ready: &mut Vec<Key>,
        owner: u64,
        delta: isize,
    ) {
        let Some(key) = owner_key(owner) else {
            return;
        };
        let Some(c) = conns.get_mut(key) else {
            return;
        };
        if delta >= 0 {
            c.tsq_bytes = c.tsq_bytes.saturating_add(delta as u32);
            return;
        }
        c.tsq_bytes = c.tsq_bytes.saturating_sub(delta.unsigned_abs() as u32);
        if c.tsq_throttled && c.tsq_bytes == 0 {
            c.tsq_throttled = false;
            ready.push(key);
        }
    }

    /// Sends one TCP segment (header + payload, checksum not filled) from `local` to
    /// `remote`: loopback when the destination is ours, else IP to a device. `framed`:
    /// the segment sits behind [`FRAME_FRONT`] bytes of room for the headers (built for
    /// a device by a caller that checked the destination is not local). Returns the next
    /// hop learned, for the connection to cache.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn output(
        &mut self,
        stack: &StackInner,
        now: Instant,
        hop: Option<(IfaceId, MacAddr)>,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        tos: u8,
        bytes: Vec<u8>,
        framed: bool,
        tx: Tx,
    ) -> Option<(IfaceId, MacAddr)> {
        let front = if framed { FRAME_FRONT } else { 0 };
        if stack.filtered(ip_proto::TCP, local, remote) {
            self.stats.filtered += 1;
            return None;
        }
        stack.probe(self.id, Probe::IpSend, local, remote, bytes.len() - front);
        // A framed segment was built for a device: its caller has found the destination
        // not local already.
        if !framed && stack.is_local_addr(*remote.ip()) {
            self.stats.lo_segs += 1;
            self.stats.ip_lo_out += 1;
            let hl = bytes.get(12).map_or(0, |b| usize::from(b >> 4) * 4);
            let n = bytes.len().saturating_sub(hl);
            let segs = match tx.gso {
                0 => 1,
                g => n.div_ceil(usize::from(g)).clamp(1, usize::from(u16::MAX)) as u16,
            };
            let seg = Segment {
                src: *local.ip(),
                dst: *remote.ip(),
                bytes,
                csum_ok: true,
                lo: true,
                segs,
                gso_size: if segs > 1 { tx.gso } else { 0 },
            };
            // A segment for another squeue's connection goes there (with one squeue,
            // everything stays here and `input` classifies it).
            let elsewhere = if stack.squeues.len() > 1 {
                let tuple: Tuple = (remote, local);
                stack
                    .classifier
                    .lookup(&tuple)
                    .filter(|loc| loc.sq != self.id)
            } else {
                None
            };
            match elsewhere {
                Some(loc) => {
                    self.stats.cross_sq += 1;
                    stack.to_squeue(loc.sq, loc.key.as_u64(), seg);
                }
                None => self.lo.push_back(seg),
            }
            return None;
        }
        // A datagram to a device: IP header, TCP checksum.
        let ident = stack.next_ident();
        let ip = Ipv4Repr {
            src: *local.ip(),
            dst: *remote.ip(),
            protocol: ip_proto::TCP,
            ttl: stack.hot.ip_def_ttl.load(Ordering::Relaxed) as u8,
            dscp_ecn: tos,
            ident,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
            payload_len: (bytes.len() - front) as u16,
        };
        let mut f = if framed {
            bytes
        } else {
            let mut f = vec![0u8; FRAME_FRONT + bytes.len()];
            f[FRAME_FRONT..].copy_from_slice(&bytes);
            f
        };
        ip.emit(&mut f[HEADROOM..HEADROOM + IPV4_HEADER_LEN]);
        if tx.gso == 0 {
            TcpRepr::fill_checksum(
                &mut f[HEADROOM + IPV4_HEADER_LEN..],
                *local.ip(),
                *remote.ip(),
            );
        }
        // A large segment's checksum is filled where it is cut: per piece by GSO, or by
        // the device that segments it (TSO), never over the whole 64 KiB first.
        if let Some((iface, mac)) = hop {
            if let Some((src, dev)) = stack.device(iface, self.id) {
                let eth = EthernetRepr {
                    dst: mac,
                    src,
                    ethertype: ethertype::IPV4,
                };
                eth.emit(&mut f[..ETHERNET_HEADER_LEN]);
                let frame = TxFrame {
                    frame: f,
                    gso_size: tx.gso,
                    owner: tx.owner,
                    pace_bps: tx.pace,
                };
                let (conns, ready) = (&mut self.conns, &mut self.tsq_ready);
                let rate = self.tx.send(now, dev, frame, &mut |o, d| {
                    Self::tsq_credit(conns, ready, o, d)
                });
                if let (Some(r), Some(k)) = (rate, owner_key(tx.owner)) {
                    if let Some(c) = self.conns.get_mut(k) {
                        c.tsq_rate = r;
                    }
                }
                if !self.tx_dirty.iter().any(|d| Arc::ptr_eq(d, dev)) {
                    self.tx_dirty.push(dev.clone());
                }
                return None;
            }
        }
        // No next hop cached (the first segments, or after negative advice): the IP
        // layer resolves it, and cuts a large segment after ARP as it does its own.
        stack.send_via_host(now, f, tx.gso);
        stack.next_hop(now, *remote.ip())
    }

    /// Runs the loopback segments queued on this squeue (bounded; the rest is queued on
    /// the squeue itself).
    pub fn run_lo(&mut self, stack: &StackInner, now: Instant) {
        let mut budget = LO_BUDGET;
        while let Some(seg) = self.lo.pop_front() {
            if budget == 0 {
                self.lo.push_front(seg);
                self.stats.lo_requeued += 1;
                let rest: Vec<Segment> = self.lo.drain(..).collect();
                stack.requeue_lo(self.id, rest);
                return;
            }
            budget -= 1;
            self.input(stack, now, seg);
        }
    }
}
