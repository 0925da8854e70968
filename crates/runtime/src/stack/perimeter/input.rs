//! Input: a segment from the loopback path or a device, through the TCP endpoint, to
//! its connection.

use super::{Connection, Segment, TcpPerimeter};
use crate::classifier::ConnLoc;
use crate::socket::{ConnShared, ListenerShared};
use crate::stack::{Probe, StackInner};
use ember_core::host::TcpIcmpError;
use ember_core::slab::Key;
use ember_core::tcp::endpoint::{self, Action, Arrival, Context, ListenerView, Route};
use ember_core::tcp::isn::IsnGenerator;
use ember_core::tcp::{Tcb, TcpSettings};
use ember_core::time::Instant;
use ember_core::wire::{ip_proto, TcpRepr};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What the TCP endpoint reads of the stack, for a segment one squeue received.
struct SqueueContext<'a> {
    stack: &'a StackInner,
}

impl Context for SqueueContext<'_> {
    type Listener = Arc<ListenerShared>;

    fn listener(&self, local: SocketAddrV4) -> Option<(Arc<ListenerShared>, ListenerView)> {
        let l = self.stack.classifier.listener(local)?;
        let cookie_at = l.cookie_at.load(Ordering::Relaxed);
        let view = ListenerView {
            backlog: l.backlog.load(Ordering::Relaxed),
            accept_queued: l.accept_q.lock().len() as u32,
            syn_queued: l.syn_q.load(Ordering::Relaxed),
            cookie_at: cookie_at.checked_sub(1).map(Instant::from_millis),
            user_mss: l.user_mss(),
            // Being closed, or the whole stack is (`Stack::shutdown`).
            closed: l.closed.load(Ordering::SeqCst) || self.stack.closing.load(Ordering::SeqCst),
        };
        Some((l, view))
    }

    fn route(&self, remote: Ipv4Addr) -> Option<Route> {
        // Large segments for a device (loopback segments are 64 KiB already).
        self.stack
            .source_for(remote)
            .map(|(_, mtu, local)| Route { mtu, lso: !local })
    }

    fn is_local(&self, remote: Ipv4Addr) -> bool {
        self.stack.is_local_addr(remote)
    }

    fn conn_room(&self) -> bool {
        self.stack.conn_room()
    }

    fn mem_full(&self) -> bool {
        self.stack.tcp_mem_full()
    }

    fn rst_allowed(&mut self, now: Instant) -> bool {
        self.stack.rst_allowed(now)
    }

    fn isn(&self) -> &IsnGenerator {
        &self.stack.isn
    }

    fn settings(&self) -> Arc<TcpSettings> {
        self.stack.tcp_settings()
    }

    fn syncookies(&self) -> u32 {
        self.stack.params().tcp_syncookies
    }

    fn syn_queue_max(&self) -> u32 {
        self.stack.params().tcp_conn_req_max_q0
    }
}

impl TcpPerimeter {
    /// A segment for this stack, classified here (this squeue received it). The
    /// endpoint decides what becomes of it ([`Endpoint::handle_segment`]); this carries
    /// that out.
    pub fn input(&mut self, stack: &StackInner, now: Instant, seg: Segment) {
        self.input_at(stack, now, seg, None);
    }

    /// [`TcpPerimeter::input`] for a segment the caller has classified already (the device
    /// path): `key` is the connection the classifier found on this squeue, if any.
    pub fn input_classified(
        &mut self,
        stack: &StackInner,
        now: Instant,
        seg: Segment,
        key: Option<Key>,
    ) {
        self.input_at(stack, now, seg, Some(key));
    }

    /// `classified`: the classifier's answer, when the caller looked it up.
    pub(super) fn input_at(
        &mut self,
        stack: &StackInner,
        now: Instant,
        seg: Segment,
        classified: Option<Option<Key>>,
    ) {
        if seg.lo {
            self.stats.ip_lo_in += 1;
        }
        let Ok((repr, payload)) = TcpRepr::parse(&seg.bytes, seg.src, seg.dst, !seg.csum_ok) else {
            self.endpoint.stats.in_segs += 1;
            self.endpoint.stats.in_errs += 1;
            return;
        };
        let local = SocketAddrV4::new(seg.dst, repr.dst_port);
        let remote = SocketAddrV4::new(seg.src, repr.src_port);
        if stack.filtered(ip_proto::TCP, remote, local) {
            self.stats.filtered += 1;
            return;
        }
        stack.probe(self.id, Probe::IpReceive, local, remote, seg.bytes.len());
        let key = match classified {
            Some(key) => key,
            None => match stack.classifier.lookup(&(local, remote)) {
                Some(loc) if loc.sq != self.id => {
                    // Another squeue's connection (a device queue fans out by flow hash).
                    self.stats.cross_sq += 1;
                    stack.to_squeue(loc.sq, loc.key.as_u64(), seg);
                    return;
                }
                found => found.map(|loc| loc.key),
            },
        };
        let arrival = Arrival {
            local,
            remote,
            seg: &repr,
            payload,
            wire_segs: seg.segs,
        };
        let found = key.and_then(|k| self.conns.get(k)).map(|c| &c.tcb);
        let verdict =
            self.endpoint
                .handle_segment(&mut SqueueContext { stack }, now, found, &arrival);
        if verdict.retire_found {
            if let Some(k) = key {
                self.remove(stack, k);
            }
        }
        if verdict.closed_port && repr.flags.syn() && !repr.flags.ack() {
            stack.probe(self.id, Probe::AcceptRefused, local, remote, 0);
        }
        match verdict.action {
            Action::Deliver { strip_data } => {
                if let Some(k) = key {
                    let pieces = (seg.segs, seg.gso_size);
                    self.deliver(stack, now, k, &arrival, pieces, strip_data);
                }
            }
            Action::Accept {
                listener,
                conn,
                cookie,
            } => {
                let Some(k) = self.add_passive(stack, &listener, conn.into_tcb()) else {
                    return;
                };
                if cookie {
                    // The rebuilt connection has taken the ACK that returned the cookie.
                    self.endpoint.stats.syncookies_recv += 1;
                    stack.probe(self.id, Probe::TcpReceive, local, remote, payload.len());
                }
                self.flush(stack, now, k);
            }
            Action::Reply { repr, cookie_for } => {
                if let Some(l) = cookie_for {
                    l.cookie_at.store(now.as_millis() + 1, Ordering::Relaxed);
                }
                self.send_bare(stack, now, local, remote, &repr);
            }
            Action::Drop => {}
        }
    }

    /// Gives a segment to its connection, which flushes now or at the end of the device
    /// batch. `strip_data`: only its header (`tcp_mem_max`, see
    /// [`endpoint::strip_data`]).
    pub(super) fn deliver(
        &mut self,
        stack: &StackInner,
        now: Instant,
        key: Key,
        a: &Arrival<'_>,
        (segs, gso_size): (u16, u16),
        strip_data: bool,
    ) {
        if self.conns.get(key).is_some_and(|c| c.peer.is_some()) {
            // A real segment for a fused connection: unfuse both ends first.
            self.stats.fusion_aborted += 1;
            self.unfuse(stack, now, key);
        }
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        if strip_data {
            stack.probe(self.id, Probe::TcpReceive, a.local, a.remote, 0);
            c.tcb.handle_segment(now, &endpoint::strip_data(a.seg), &[]);
        } else {
            stack.probe(
                self.id,
                Probe::TcpReceive,
                a.local,
                a.remote,
                a.payload.len(),
            );
            if segs > 1 {
                // Segments coalesced on receive (GRO), or a large loopback segment: the
                // ACK and counters are those of the pieces.
                c.tcb
                    .handle_segment_gro(now, a.seg, a.payload, segs, gso_size);
            } else {
                c.tcb.handle_segment(now, a.seg, a.payload);
            }
        }
        if self.batching {
            if !strip_data && !a.payload.is_empty() {
                // Charged at once, not when the batch ends (`flush` → `after` charges
                // otherwise): `tcp_mem_max` is then overshot by at most one segment per
                // squeue.
                self.recharge(stack, key);
            }
            // A device batch is being taken in: the connection sends once all of the
            // batch's segments for it are in (a run of ACKs opens the window once, and
            // the data that follows goes as one large segment, not one per ACK).
            if !self.touched.contains(&key) {
                self.touched.push(key);
            }
            return;
        }
        self.flush(stack, now, key);
    }

    /// A passive connection in SYN-RECEIVED joins this squeue, the classifier and its
    /// listener's SYN queue; `None` (dropped and counted) when the stack holds
    /// `tcp_max_conns`.
    pub(super) fn add_passive(
        &mut self,
        stack: &StackInner,
        l: &Arc<ListenerShared>,
        tcb: Tcb,
    ) -> Option<Key> {
        if !stack.take_conn_slot() {
            self.endpoint.stats.conn_limit_drops += 1;
            return None;
        }
        let (local, remote) = (tcb.local(), tcb.remote());
        let is_local = stack.is_local_addr(*remote.ip());
        let key = self.conns.next_key();
        let shared = ConnShared::new(self.id, key, local, remote);
        let k = self
            .conns
            .insert(Connection::new(tcb, shared, Some(l.clone()), is_local));
        debug_assert_eq!(k, key);
        if !stack
            .classifier
            .insert((local, remote), ConnLoc { sq: self.id, key })
        {
            stack
                .classifier
                .replace((local, remote), ConnLoc { sq: self.id, key });
        }
        l.syn_q.fetch_add(1, Ordering::Relaxed);
        self.endpoint.stats.passive_opens += 1;
        stack.probe(self.id, Probe::AcceptEstablishedPending, local, remote, 0);
        Some(key)
    }

    /// An ICMP error quoting one of our segments (RFC 5927 §4.1 validation).
    pub fn icmp_error(&mut self, stack: &StackInner, now: Instant, key: Key, err: TcpIcmpError) {
        let TcpIcmpError { seq, code, mtu, .. } = err;
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        if !c.tcb.icmp_quote_valid(seq) {
            return;
        }
        if code == ember_core::wire::icmp_unreach::FRAG_NEEDED {
            if mtu >= 68 {
                c.tcb.on_path_mtu(now, u32::from(mtu));
            }
        } else {
            c.tcb.on_unreachable(now, code);
        }
        self.flush(stack, now, key);
    }
}
