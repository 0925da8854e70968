//! After a connection was touched: readiness, timers, the accept queue, fusion
//! admission, memory accounting and reaping; and the squeue-wide walks.

use super::{Connection, TcpPerimeter};
use crate::classifier::ConnLoc;
use crate::socket::shared::ready;
use crate::socket::ListenerShared;
use crate::stack::{Probe, StackInner};
use ember_core::slab::Key;
use ember_core::tcp::{Events, State, TcbInfo, TcbStats, TcpError};
use ember_core::time::Instant;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

impl TcpPerimeter {
    /// After a connection was touched: readiness, timer, accept queue, fusion, reaping.
    pub fn after(&mut self, stack: &StackInner, now: Instant, key: Key) {
        self.recharge(stack, key);
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        let ev = c.tcb.poll_events();
        let closed = c.tcb.is_closed();
        let state = c.tcb.state();
        if state != c.last_state {
            // Rare (a few times per connection): the probe check is behind this branch.
            let old = std::mem::replace(&mut c.last_state, state);
            let (l, r) = (c.tcb.local(), c.tcb.remote());
            stack.probe_arg(
                self.id,
                Probe::StateChange,
                l,
                r,
                state as usize,
                old as u64,
            );
            if state == State::Closed
                && old == State::SynSent
                && c.tcb.error() == Some(TcpError::Refused)
            {
                stack.probe(self.id, Probe::ConnectRefused, l, r, 0);
            }
        }
        let deadline = if closed { None } else { c.tcb.poll_timeout() };
        self.wheel.update(&mut c.timer, key, deadline);
        if ev.contains(Events::CONNECTED) {
            let (l, r) = (c.tcb.local(), c.tcb.remote());
            let passive = c.tcb.is_passive();
            stack.probe(
                self.id,
                if passive {
                    Probe::AcceptEstablished
                } else {
                    Probe::ConnectEstablished
                },
                l,
                r,
                0,
            );
        }
        if c.listener.is_some() {
            if ev.contains(Events::CONNECTED) && !closed {
                let l = c.listener.take().expect("checked");
                l.syn_q.fetch_sub(1, Ordering::Relaxed);
                if l.closed.load(Ordering::SeqCst) {
                    c.tcb.abort(now);
                    c.released = true;
                    self.flush(stack, now, key);
                    return;
                }
                c.queued_in = Some(Arc::downgrade(&l));
                let shared = c.shared.clone();
                self.publish(key);
                self.try_fuse(stack, now, key);
                {
                    let mut q = l.accept_q.lock();
                    q.push_back(shared);
                    l.update_ready(q.len());
                }
                return;
            }
            if closed {
                let l = c.listener.take().expect("checked");
                l.syn_q.fetch_sub(1, Ordering::Relaxed);
                c.released = true;
                self.remove(stack, key);
                return;
            }
        }
        if closed && c.released {
            self.remove(stack, key);
            return;
        }
        if closed {
            // CLOSED but still held by the application: it no longer owns its 4-tuple (a
            // new connection may reuse it), as Linux unhashes a closed socket.
            let t = (c.tcb.local(), c.tcb.remote());
            stack.classifier.remove(&t, ConnLoc { sq: self.id, key });
        }
        self.publish(key);
    }

    /// Brings the stack's `tcp_mem_used` up to date with what connection `key` holds in
    /// its receive queue: data the network delivered in order that the application has
    /// not read, which reading frees. Send queues and fused pairs' queues are filled by
    /// this process's own applications, and out-of-order queues by peers that may never
    /// fill the hole; all three are bounded per connection (buffer sizes,
    /// `tcp_reass_max_segs`). Counting them would let a local writer to peers that never
    /// open their windows, or peers that never fill their holes, pin the bound and starve
    /// every connection's receive side. Runs in `after` (every input and output), after
    /// each data segment, after reads and after fusing; the atomic is touched only on a
    /// change.
    pub(crate) fn recharge(&mut self, stack: &StackInner, key: Key) {
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        let held = if c.peer.is_some() {
            0
        } else {
            c.tcb.rcv_queued_bytes()
        };
        if held != c.charged {
            let delta = held as i64 - c.charged as i64;
            stack
                .tcp_mem_used
                .fetch_add(delta as u64, Ordering::Relaxed);
            c.charged = held;
        }
    }

    /// Publishes a connection's readiness (and its fused peer's) to application threads.
    pub fn publish(&mut self, key: Key) {
        let Some(c) = self.conns.get(key) else {
            return;
        };
        let bits = self.readiness(c);
        c.shared
            .rx_avail
            .store(c.tcb.recv_available() as u64, Ordering::Relaxed);
        // Woken when this thread leaves the squeue, so that the woken thread finds it
        // free (see `squeue::defer`).
        if c.shared.waitable.set_deferred(bits) {
            crate::squeue::defer(c.shared.clone());
        }
    }

    pub(super) fn readiness(&self, c: &Connection) -> u32 {
        let t = &c.tcb;
        let mut b = 0;
        let state = t.state();
        let err = t.error().is_some_and(|e| e != TcpError::WouldBlock);
        if t.recv_available() > 0 || t.at_eof() || err || state == State::Closed {
            b |= ready::READ;
        }
        if t.at_eof()
            || matches!(
                state,
                State::CloseWait | State::LastAck | State::Closing | State::TimeWait
            )
        {
            b |= ready::RDHUP;
        }
        if state.is_synchronized() || state == State::Closed {
            b |= ready::CONNECTED;
        }
        if err {
            b |= ready::ERROR;
        }
        if state == State::Closed {
            b |= ready::HUP;
        }
        if t.urgent_mark().is_some() {
            b |= ready::URGENT;
        }
        if c.shared.rd_shut.load(Ordering::SeqCst) {
            // shutdown(SHUT_RD): reads return end of file at once.
            b |= ready::READ;
        }
        let writable = match c.peer.and_then(|p| self.conns.get(p)) {
            Some(p) => c.tcb.fused_flow().writable(p.tcb.fused_recv_space()),
            None => {
                (t.send_space() >= t.send_lowat() || (t.send_queued() == 0 && t.send_space() > 0))
                    && matches!(state, State::Established | State::CloseWait)
            }
        };
        // Once the sending side is shut (FIN queued or sent, or closed), a write fails at
        // once (EPIPE): report it writable, as Linux's poll does, so a parked writer wakes.
        let send_shut = matches!(
            state,
            State::FinWait1
                | State::FinWait2
                | State::Closing
                | State::LastAck
                | State::TimeWait
                | State::Closed
        );
        if writable || err || send_shut {
            b |= ready::WRITE;
        }
        b
    }

    pub(super) fn remove(&mut self, stack: &StackInner, key: Key) {
        if let Some(peer) = self.conns.get(key).and_then(|c| c.peer) {
            // Not reached today (every closing path unfuses first), but a fused peer left
            // behind must go on as TCP: readiness published, timers armed.
            let now = crate::clock::now();
            self.unfuse_keys(stack, now, key, peer);
            self.after(stack, now, peer);
        }
        if let Some(mut c) = self.conns.remove(key) {
            stack.give_conn_slot();
            if c.charged > 0 {
                stack
                    .tcp_mem_used
                    .fetch_sub(c.charged as u64, Ordering::Relaxed);
            }
            self.wheel.update(&mut c.timer, key, None);
            stack.classifier.remove(
                &(c.tcb.local(), c.tcb.remote()),
                ConnLoc { sq: self.id, key },
            );
            self.gone.accumulate(c.tcb.stats());
            c.shared
                .waitable
                .set(ready::READ | ready::WRITE | ready::HUP);
        }
    }

    /// Every connection's snapshot (netstat).
    pub fn netstat(&self) -> Vec<(TcbInfo, usize, bool)> {
        self.conns
            .iter()
            .map(|(_, c)| (c.tcb.info(), self.id, c.peer.is_some()))
            .collect()
    }

    /// TCP counters: finished connections plus live ones.
    pub fn tcb_stats(&self) -> (TcbStats, u64) {
        let mut s = self.gone;
        let mut estab = 0;
        for (_, c) in self.conns.iter() {
            s.accumulate(c.tcb.stats());
            if matches!(c.tcb.state(), State::Established | State::CloseWait) {
                estab += 1;
            }
        }
        (s, estab)
    }

    /// Resets every connection (stack shutdown).
    pub fn abort_all(&mut self, stack: &StackInner, now: Instant) {
        let keys: Vec<Key> = self.conns.iter().map(|(k, _)| k).collect();
        for k in keys {
            self.unfuse(stack, now, k);
            if let Some(c) = self.conns.get_mut(k) {
                c.released = true;
                c.tcb.abort(now);
            }
            self.flush(stack, now, k);
        }
        self.run_lo(stack, now);
        let keys: Vec<Key> = self.conns.iter().map(|(k, _)| k).collect();
        for k in keys {
            self.remove(stack, k);
        }
        self.lo.clear();
    }

    /// Called when a listener closes: resets the connections of its queues that live here.
    pub fn listener_closed(&mut self, stack: &StackInner, now: Instant, l: &Arc<ListenerShared>) {
        let keys: Vec<Key> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                c.listener.as_ref().is_some_and(|x| Arc::ptr_eq(x, l))
                    || c.queued_in
                        .as_ref()
                        .and_then(Weak::upgrade)
                        .is_some_and(|x| Arc::ptr_eq(&x, l))
            })
            .map(|(k, _)| k)
            .collect();
        for k in keys {
            self.close(stack, now, k, true);
        }
    }
}
