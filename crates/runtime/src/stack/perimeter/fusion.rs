//! TCP Fusion, the runtime half: admission, the fused write, the reader's side of flow
//! control, and unfusing. The sequence-number work is the core's (`Tcb::fused_send`,
//! `Tcb::unfuse_pair`), and so are the flow-control decisions (`FusedFlow`, kept in
//! the writer's `Tcb`): this file carries them out, counts them and fires the probes.

use super::{Connection, TcpPerimeter};
use crate::stack::{Probe, StackInner};
use ember_core::slab::Key;
use ember_core::tcp::{Tcb, TcpError};
use ember_core::time::Instant;
use std::io;
use std::sync::atomic::Ordering;

impl Connection {
    /// Forgets its fused peer (the core resets the fused flow control on unfusing).
    pub(super) fn leave_fusion(&mut self) {
        self.peer = None;
    }
}

impl TcpPerimeter {
    /// Admission (passive end, on SYN-RECEIVED → ESTABLISHED): the peer is the reverse
    /// 4-tuple, ESTABLISHED, on this squeue, both local, neither unfusable, and the
    /// peer's send queue empty.
    pub(super) fn try_fuse(&mut self, stack: &StackInner, now: Instant, key: Key) {
        let Some(c) = self.conns.get(key) else {
            return;
        };
        if !c.local || !stack.hot.do_tcp_fusion.load(Ordering::Relaxed) {
            return;
        }
        let (l, r) = (c.tcb.local(), c.tcb.remote());
        let Some(loc) = stack.classifier.lookup(&(r, l)) else {
            return;
        };
        if loc.sq != self.id {
            self.stats.fusion_unqualified += 1;
            return;
        }
        let Some((a, b)) = self.conns.get2_mut(key, loc.key) else {
            self.stats.fusion_unqualified += 1;
            return;
        };
        if !b.local {
            self.stats.fusion_unqualified += 1;
            return;
        }
        match Tcb::fuse_pair(now, &mut a.tcb, &mut b.tcb) {
            Ok(()) => {
                a.peer = Some(loc.key);
                b.peer = Some(key);
                self.wheel.update(&mut a.timer, key, None);
                self.wheel.update(&mut b.timer, loc.key, None);
                self.stats.fusion_fused_total += 1;
                self.stats.fusion_fused_now += 1;
                stack.probe(self.id, Probe::Fuse, l, r, 0);
                // Fused pairs' queues are not charged to `tcp_mem_max`.
                self.recharge(stack, key);
                self.recharge(stack, loc.key);
            }
            Err(ember_core::tcp::FuseRefusal::SimultaneousOpen)
            | Err(ember_core::tcp::FuseRefusal::Unfusable) => {
                a.tcb.set_unfusable();
                b.tcb.set_unfusable();
                self.stats.fusion_unfusable += 1;
            }
            Err(_) => self.stats.fusion_unqualified += 1,
        }
    }

    /// Unfuses `key` and its peer (both, permanently). Nothing is lost: what was moved
    /// into a receive buffer stays there; both continue as ordinary TCP.
    pub fn unfuse(&mut self, stack: &StackInner, now: Instant, key: Key) {
        if let Some(peer) = self.conns.get(key).and_then(|c| c.peer) {
            self.unfuse_keys(stack, now, key, peer);
            self.after(stack, now, peer);
        }
    }

    pub(super) fn unfuse_keys(&mut self, stack: &StackInner, now: Instant, key: Key, peer: Key) {
        let Some((a, b)) = self.conns.get2_mut(key, peer) else {
            if let Some(a) = self.conns.get_mut(key) {
                a.peer = None;
            }
            return;
        };
        Tcb::unfuse_pair(now, &mut a.tcb, &mut b.tcb);
        a.leave_fusion();
        b.leave_fusion();
        self.stats.fusion_fused_now = self.stats.fusion_fused_now.saturating_sub(1);
        stack.probe(self.id, Probe::Unfuse, a.tcb.local(), a.tcb.remote(), 0);
    }

    pub(super) fn fused_send(
        &mut self,
        stack: &StackInner,
        now: Instant,
        key: Key,
        peer: Key,
        data: &[u8],
    ) -> io::Result<usize> {
        let limit = stack.hot.tcp_fusion_rcv_unread_min.load(Ordering::Relaxed);
        let Some((w, r)) = self.conns.get2_mut(key, peer) else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        if data.is_empty() {
            return Ok(0);
        }
        if let Err(stop) = w.tcb.fused_flow_mut().admit(limit) {
            // The reader has not read the last `limit` writes: stop the writer so that it
            // cannot starve a slower reader sharing its CPU (Solaris 10).
            if stop.newly {
                self.stats.fusion_flowctl += 1;
                self.stats.fusion_rrw_stops += 1;
                stack.probe(self.id, Probe::FlowCtl, w.tcb.local(), w.tcb.remote(), 1);
            }
            self.publish(key);
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let was_full = w.tcb.fused_flow().is_stopped_full();
        let res = w.tcb.fused_send(now, &mut r.tcb, data);
        if let Ok(n) = res {
            self.stats.fusion_putnext += 1;
            self.stats.fusion_bytes += n as u64;
            stack.probe(self.id, Probe::TcpSend, w.tcb.local(), w.tcb.remote(), n);
            stack.probe(self.id, Probe::TcpReceive, r.tcb.local(), r.tcb.remote(), n);
            let _ = r.tcb.poll_events();
        }
        // The reader's buffer took less than offered, or nothing: the writer is stopped
        // until the reader drains to the low-water mark.
        if !was_full && w.tcb.fused_flow().is_stopped_full() {
            self.stats.fusion_flowctl += 1;
            stack.probe(self.id, Probe::FlowCtl, w.tcb.local(), w.tcb.remote(), 0);
        }
        match res {
            Ok(n) => {
                self.publish(peer);
                self.publish(key);
                Ok(n)
            }
            Err(TcpError::WouldBlock) => {
                self.publish(key);
                Err(io::ErrorKind::WouldBlock.into())
            }
            Err(e) => {
                self.flush(stack, now, key);
                Err(e.into())
            }
        }
    }

    /// A fused reader's receive space changed (it read, or its buffer size changed): the
    /// writer's window follows it. A read (`read`) resumes a writer stopped by the
    /// unread-writes limit; a writer stopped by a full buffer resumes only at the
    /// low-water mark (both decided by the writer's `FusedFlow`). Publishes the writer.
    pub(super) fn reader_space_changed(&mut self, reader: Key, writer: Key, read: bool) {
        if let Some((rd, wr)) = self.conns.get2_mut(reader, writer) {
            let was_stopped = wr.tcb.fused_flow().is_stopped();
            if read {
                wr.tcb.fused_flow_mut().reader_read();
            }
            rd.tcb.fused_sync_window(&mut wr.tcb);
            let _ = wr.tcb.poll_events();
            if was_stopped && !wr.tcb.fused_flow().is_stopped() {
                self.stats.fusion_backenabled += 1;
            }
        }
        self.publish(writer);
    }
}
