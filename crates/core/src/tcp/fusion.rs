//! TCP Fusion (Solaris 10 FireEngine), the sans-IO half: two `Tcb`s of one loopback
//! connection exchange data directly, with no segments.
//!
//! # What and why
//! When both ends of a TCP connection live on the same squeue, sending every write
//! through segments, checksums, ACKs and timers only burns cycles. Once both ends are
//! ESTABLISHED and quiescent, the owner (the runtime, which decides admission and holds
//! both `&mut Tcb` at once) *fuses* them: [`Tcb::fused_send`] moves bytes from the
//! writer straight into the reader's receive buffer. Reading is unchanged
//! ([`Tcb::recv`], [`Tcb::peek`], [`Tcb::recv_available`], [`Tcb::at_eof`]).
//!
//! # Life cycle (owner's protocol)
//! 1. [`Tcb::fuse_check`] on each end (or [`Tcb::fuse_check_pair`]); a refusal says why
//!    ([`FuseRefusal`], for the runtime's `tcp_fusion_unqualified` counter and probes).
//! 2. [`Tcb::fuse`] on both ends back to back, each with the other as `peer`
//!    ([`Tcb::fuse_pair`] does both). If the first succeeds the second cannot fail: the
//!    checks do not look at anything fusing changes.
//! 3. While fused: writes through [`Tcb::fused_send`]; after the reader read, call
//!    `reader.fused_sync_window(&mut writer)` so the writer's window follows and a
//!    blocked writer gets [`Events::WRITABLE`]. When a writer must stop (a full buffer,
//!    until the low-water mark; too many unread writes) is decided by the writer's
//!    [`FusedFlow`] ([`Tcb::fused_flow_mut`]): the owner asks it before a write
//!    ([`FusedFlow::admit`]) and tells it of the reader's reads
//!    ([`FusedFlow::reader_read`]).
//! 4. Before anything fusion does not model — shutdown/close (the FIN), urgent data,
//!    an ordinary [`Tcb::send`] — and whenever the owner stops co-locating the two,
//!    [`Tcb::unfuse`] both ends back to back ([`Tcb::unfuse_pair`]). Unfusing is
//!    permanent (the connection becomes unfusable), as in Solaris.
//!
//! # Invariants while fused
//! * Sequence numbers stay exact: `w.snd.una == w.snd.nxt == w.snd.buf_seq ==
//!   r.rcv.nxt` for writer `w` and reader `r`, in both directions; `rcv.off` advances
//!   with `rcv.nxt`. Nothing is ever in flight and the send buffer stays empty.
//! * Windows stay coherent: the reader's right edge is `fused_edge()` (its free space
//!   rounded *down* to its window-scale granularity, RFC 7323 §2.3, but never left of
//!   what it already advertised, RFC 9293 §3.8.6.2.2), stored in `rcv.adv`, and the
//!   writer's `snd.una + snd.wnd` is that same edge, exactly as after an ordinary window
//!   update (RFC 9293 §3.10.7.4, with `snd.wl1`/`snd.wl2` as of that update).
//! * No segments, no timers: `poll_timeout` is `None`, `handle_timeout` and `after_read`
//!   do nothing, `poll_transmit` yields only a RST (abort), `handle_segment` takes only a
//!   RST (anything else is stale or forged and could break the first invariant).
//!   A FIN queued by shutdown/close while fused waits for the unfuse.
//! * Memory: a fused write never makes the receive buffer exceed `rcv.cap`.
//!
//! # Unfusing
//! [`Tcb::unfuse`] returns to ordinary TCP from the exact sequence numbers: data moved
//! into a receive buffer stays there to be read; both windows are set as if a window
//! update had just been exchanged, so no segment is needed to resynchronise them (and
//! none is generated). Everything keyed to sequence numbers that the fused advance may
//! have made stale (SND.WL1/WL2, the recovery point, Last.ACK.sent, HyStart++ rounds)
//! is refreshed; no RTT sample covers the fused period.

use super::cc::CongestionControl;
use super::fused_flow::FusedFlow;
use super::recovery::Recovery;
use super::seq::SeqNum;
use super::tcb::{Tcb, MAX_WINDOW, MAX_WSCALE};
use super::timers::Timer;
use super::{Events, State, TcpError};
use crate::time::Instant;
use core::fmt;

/// The largest single fused move: the largest window TCP can express (RFC 7323 §2.3),
/// which keeps every sequence comparison well inside half the number space.
const MAX_FUSED_MOVE: u32 = MAX_WINDOW << MAX_WSCALE;

/// Why a connection cannot be fused now (for the runtime's `tcp_fusion_unqualified`
/// counter and probes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FuseRefusal {
    /// Not in ESTABLISHED.
    NotEstablished,
    /// Both ends opened actively (RFC 9293 §3.5); such connections are never fused.
    SimultaneousOpen,
    /// Marked unfusable (see [`Tcb::set_unfusable`]; every unfused connection is).
    Unfusable,
    /// Data is buffered, unsent or unacknowledged (SND.UNA != SND.NXT).
    SendQueueNotEmpty,
    /// A segment is owed or data is held that fusion cannot carry: a RST reply, or
    /// out-of-order data (or FIN) in the reassembly queue.
    PendingOutput,
    /// The connection is closing or failed: FIN queued or received, close() called, or
    /// an error pending.
    Closing,
    /// Urgent data is pending in either direction (RFC 9293 §3.8.5).
    Urgent,
    /// The two `Tcb`s are not the two ends of one connection with nothing in flight
    /// between them (addresses do not mirror, or SND.NXT != peer's RCV.NXT).
    NotPeers,
}

impl FuseRefusal {
    /// A short name for counters and probes.
    pub const fn as_str(self) -> &'static str {
        match self {
            FuseRefusal::NotEstablished => "not_established",
            FuseRefusal::SimultaneousOpen => "simultaneous_open",
            FuseRefusal::Unfusable => "unfusable",
            FuseRefusal::SendQueueNotEmpty => "send_queue_not_empty",
            FuseRefusal::PendingOutput => "pending_output",
            FuseRefusal::Closing => "closing",
            FuseRefusal::Urgent => "urgent",
            FuseRefusal::NotPeers => "not_peers",
        }
    }
}

impl fmt::Display for FuseRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The fusion state of one end (`Tcb::fusion`), private to this file: the rest of the
/// `Tcb` asks [`FusionState::is_fused`].
#[derive(Debug, Default)]
pub(super) struct FusionState {
    /// Fused with a local peer: no segments, no timers; data moves by `fused_send`.
    fused: bool,
    /// May never be fused (simultaneous open, or unfused once: unfusing is permanent).
    unfusable: bool,
    /// Flow control of the direction this end writes while fused (`fused_flow.rs`): a
    /// write that could not move everything stops it until the reader drains to the
    /// low-water mark, which the next window synchronisation reports as `WRITABLE`.
    flow: FusedFlow,
}

impl FusionState {
    /// Fused with a local peer.
    #[inline]
    pub(super) fn is_fused(&self) -> bool {
        self.fused
    }
}

impl Tcb {
    /// Checks whether this end may be fused now: ESTABLISHED, not a simultaneous open,
    /// not marked unfusable, nothing buffered or in flight, not closing (no FIN queued
    /// or received, no close(), no error), no urgent data pending in either direction,
    /// no RST owed and nothing held out of order. Whether it is fused already does not
    /// matter (fusing is idempotent).
    pub fn fuse_check(&self) -> Result<(), FuseRefusal> {
        if self.snd.fin_queued || self.app_closed || self.error.is_some() || self.rcv.fin {
            return Err(FuseRefusal::Closing);
        }
        if self.state != State::Established {
            return Err(FuseRefusal::NotEstablished);
        }
        if self.simultaneous {
            return Err(FuseRefusal::SimultaneousOpen);
        }
        if self.fusion.unfusable {
            return Err(FuseRefusal::Unfusable);
        }
        if self.snd.up.is_some() || self.urgent_mark().is_some() {
            return Err(FuseRefusal::Urgent);
        }
        if !self.snd.buf.is_empty() || self.snd.una != self.snd.nxt {
            return Err(FuseRefusal::SendQueueNotEmpty);
        }
        if self.rst_pending
            || self.rst_reply.is_some()
            || !self.rcv.ooo.is_empty()
            || self.rcv.ooo.fin().is_some()
        {
            return Err(FuseRefusal::PendingOutput);
        }
        Ok(())
    }

    /// [`Tcb::fuse_check`] on both ends, and that they are the two ends of one
    /// connection with nothing in flight between them ([`FuseRefusal::NotPeers`]).
    pub fn fuse_check_pair(&self, peer: &Tcb) -> Result<(), FuseRefusal> {
        self.fuse_check()?;
        peer.fuse_check()?;
        if !self.is_peer_of(peer) {
            return Err(FuseRefusal::NotPeers);
        }
        Ok(())
    }

    /// Fuses this end with `peer` (call on both ends back to back, each with the other
    /// as `peer`; or use [`Tcb::fuse_pair`]). Runs [`Tcb::fuse_check_pair`] first and
    /// changes nothing if it refuses. Stops every timer (retransmission, persist,
    /// delayed ACK, keepalive, cork; the state timer is idle in ESTABLISHED), drops any
    /// ACK owed (the peer learns everything through fusion), and takes the peer's
    /// receive space as the send window (see the module comment). `now` is not used:
    /// fusing does not depend on time.
    pub fn fuse(&mut self, _now: Instant, peer: &Tcb) -> Result<(), FuseRefusal> {
        self.fuse_check_pair(peer)?;
        self.fusion.fused = true;
        self.fusion.flow = FusedFlow::default();
        // Nothing is sent while fused: what only a data flow needs goes.
        self.rack.release_flight(self.snd.una);
        self.sb.release_if_empty();
        self.prr.release();
        self.clear_timers();
        self.retry.series_start = None;
        self.retry.persist_backoff = 0;
        self.retry.keepalive_sent = 0;
        self.ack.due = false;
        self.ack.unacked_bytes = 0;
        self.ack.dsack = None;
        self.ack.last_sent = self.rcv.nxt;
        self.reset_send_recovery();
        self.rcv.adv = self.fused_edge();
        self.take_fused_window(peer.fused_edge());
        Ok(())
    }

    /// Fuses both ends of a connection, or neither.
    pub fn fuse_pair(now: Instant, a: &mut Tcb, b: &mut Tcb) -> Result<(), FuseRefusal> {
        a.fuse(now, b)?;
        if let Err(e) = b.fuse(now, a) {
            // Not reachable (b's checks cannot change by fusing a); stay consistent.
            a.unfuse(now, b);
            return Err(e);
        }
        Ok(())
    }

    /// The connection is fused (data moves by [`Tcb::fused_send`], no segments). A
    /// fused `Tcb` that reaches CLOSED (abort, peer's RST) stays marked fused; the
    /// owner drops it as usual.
    pub fn is_fused(&self) -> bool {
        self.fusion.fused
    }

    /// Marks the connection never fusable again (simultaneous opens, and every
    /// connection after an unfuse: unfusing is permanent). Does not unfuse.
    pub fn set_unfusable(&mut self) {
        self.fusion.unfusable = true;
    }

    /// See [`Tcb::set_unfusable`].
    pub fn is_unfusable(&self) -> bool {
        self.fusion.unfusable
    }

    /// Flow control of the direction this end writes while fused ([`FusedFlow`]).
    pub fn fused_flow(&self) -> &FusedFlow {
        &self.fusion.flow
    }

    /// [`Tcb::fused_flow`], for the owner's own decisions: the unread-writes limit
    /// before a write ([`FusedFlow::admit`]), the reader's reads
    /// ([`FusedFlow::reader_read`]).
    pub fn fused_flow_mut(&mut self) -> &mut FusedFlow {
        &mut self.fusion.flow
    }

    /// A fused write: moves up to `data.len()` bytes from `self` (the writer) straight
    /// into `peer`'s receive buffer and returns how many moved.
    ///
    /// Errors, in this order, like [`Tcb::send`]: the pending error (`WouldBlock` as
    /// `BrokenPipe`); `NotConnected` before ESTABLISHED or when CLOSED; `BrokenPipe`
    /// after shutdown/close or in a closing state. Then `NotConnected` if either end is
    /// not fused or `peer` is not this connection's other end (an owner bug: nothing
    /// changes); `BrokenPipe` if the peer can no longer receive (closed, close() called,
    /// FIN received). Zero-length `data` gives `Ok(0)`. `Err(WouldBlock)` when the
    /// peer's receive buffer is full; the writer then gets [`Events::WRITABLE`] from
    /// [`Tcb::fused_sync_window`] once the reader has made room.
    ///
    /// Accounting: writer `snd.una`, `snd.nxt`, `snd.buf_seq` and reader `rcv.nxt`,
    /// `rcv.off` advance by the bytes moved; both windows stay coherent; the reader gets
    /// [`Events::READABLE`]; each call counts as one data segment out (writer
    /// `segs_out`, `data_segs_out`, `bytes_out`) and one in (reader `segs_in`,
    /// `bytes_in`).
    pub fn fused_send(
        &mut self,
        now: Instant,
        peer: &mut Tcb,
        data: &[u8],
    ) -> Result<usize, TcpError> {
        if let Some(e) = self.error {
            return Err(if e == TcpError::WouldBlock {
                TcpError::BrokenPipe
            } else {
                e
            });
        }
        match self.state {
            State::Established | State::CloseWait => {}
            State::Closed | State::Listen | State::SynSent | State::SynReceived => {
                return Err(TcpError::NotConnected)
            }
            _ => return Err(TcpError::BrokenPipe),
        }
        if self.snd.fin_queued || self.app_closed {
            return Err(TcpError::BrokenPipe);
        }
        if !self.fusion.fused || !peer.fusion.fused || !self.is_peer_of(peer) {
            return Err(TcpError::NotConnected);
        }
        if !peer.fused_can_receive() {
            return Err(TcpError::BrokenPipe);
        }
        if data.is_empty() {
            return Ok(0);
        }
        let space = peer.fused_free().min(MAX_FUSED_MOVE) as usize;
        if space == 0 {
            self.fusion.flow.wrote(data.len(), 0);
            return Err(TcpError::WouldBlock);
        }
        let n = data.len().min(space);
        self.fusion.flow.wrote(data.len(), n);
        let n32 = n as u32;

        // The reader: as if an in-order segment of n octets arrived (RFC 9293
        // §3.10.7.4 seventh step), without the ACK it would owe.
        peer.rcv.buf.extend(&data[..n]);
        peer.rcv.nxt += n32;
        peer.rcv.off += n as u64;
        peer.ack.last_sent = peer.rcv.nxt;
        peer.stats.bytes_in += n as u64;
        peer.stats.segs_in += 1;
        peer.last_rcv = now;
        peer.rcv.last_data = now;
        peer.events.insert(Events::READABLE);
        let edge = peer.fused_edge();
        peer.rcv.adv = edge;

        // The writer: as if those octets were sent and acknowledged at once.
        self.snd.una += n32;
        self.snd.nxt += n32;
        self.snd.buf_seq += n32;
        self.loss.recover = self.snd.una;
        self.loss.high_rxt = self.snd.una;
        self.stats.bytes_out += n as u64;
        self.stats.data_segs_out += 1;
        self.stats.segs_out += 1;
        self.tx.note_data_sent(now);
        self.take_fused_window(edge);
        Ok(n)
    }

    /// Bytes a fused writer could move into this (reader) `Tcb` now: its free receive
    /// space, or 0 if it is not fused or can no longer receive.
    pub fn fused_recv_space(&self) -> usize {
        if !self.fused_can_receive() {
            return 0;
        }
        self.fused_free().min(MAX_FUSED_MOVE) as usize
    }

    /// After the reader of a fused pair read: moves the reader's right edge and the
    /// writer's send window to the reader's free space (call as
    /// `reader.fused_sync_window(&mut writer)`; it needs `&mut self` to record the
    /// edge in the reader's `rcv.adv`). A writer whose last [`Tcb::fused_send`] could
    /// not move everything gets [`Events::WRITABLE`] once the free space reaches
    /// `min(tcp_xmit_lowat, rcv.cap / 2)` (the reader's buffer may be smaller than the
    /// writer's low-water mark), or at once if the reader can no longer receive (so
    /// that the writer learns the error). Does nothing unless both are fused and are
    /// the two ends of one connection.
    pub fn fused_sync_window(&mut self, writer: &mut Tcb) {
        if !self.fusion.fused || !writer.fusion.fused || !writer.is_peer_of(self) {
            return;
        }
        let edge = self.fused_edge();
        self.rcv.adv = edge;
        writer.take_fused_window(edge);
        if writer.fusion.flow.reader_space(
            self.fused_free() as usize,
            self.rcv.cap as usize,
            writer.settings.sndlowat as usize,
            self.fused_can_receive(),
        ) {
            writer.events.insert(Events::WRITABLE);
        }
    }

    /// Unfuses this end (call on both ends back to back, each with the other as `peer`;
    /// or use [`Tcb::unfuse_pair`]). From now on ordinary TCP continues from the exact
    /// sequence numbers; the connection becomes unfusable.
    ///
    /// * Data already moved into the receive buffer stays there to be read.
    /// * Receive side: `rcv.adv` becomes the fused right edge, which never lies left of
    ///   what was advertised (RFC 9293 §3.8.6.2.2), and is what the next segment's
    ///   window field announces (rounded up, as `select_window` does). Last.ACK.sent
    ///   becomes RCV.NXT: everything received is known to the peer, and its next
    ///   timestamp is taken (RFC 7323 §4.3).
    /// * Send side: SND.WND from the peer's current receive space (its fused edge), with
    ///   SND.WL1 = RCV.NXT and SND.WL2 = SND.UNA so that the peer's next segment, which
    ///   carries exactly those numbers, updates the window (RFC 9293 §3.10.7.4).
    ///   The recovery point, scoreboard and timed segment are reset; timestamp echoes
    ///   from before now are never RTT samples (no RTT sample covers the fused period).
    ///   Congestion control restarts as after idle (RFC 5681 §4.1): no ACK clock ran
    ///   while fused, and this also drops HyStart++ rounds keyed to the old SND.NXT.
    /// * Keepalive (RFC 9293 §3.8.4) is re-armed if on; the peer counts as heard from now.
    /// * A writer blocked in fused mode gets [`Events::WRITABLE`] (it retries by `send`).
    ///
    /// No segment is generated: both windows are already exact (the sender's right edge
    /// equals the receiver's `rcv.adv`), so an ACK would carry no news. A FIN queued
    /// while fused, or data sent from now on, goes out by `poll_transmit` as usual.
    ///
    /// If `peer` is not the other end with matching sequence numbers (an owner error, or
    /// the peer already went back to ordinary TCP and sent), the send window is left as
    /// it was and the next window update from the peer sets it. A `Tcb` that is not
    /// fused is only marked unfusable; a CLOSED one only loses the fused mark.
    pub fn unfuse(&mut self, now: Instant, peer: &Tcb) {
        self.fusion.unfusable = true;
        if !self.fusion.fused {
            return;
        }
        self.fusion.fused = false;
        if core::mem::take(&mut self.fusion.flow).is_stopped_full() {
            self.events.insert(Events::WRITABLE);
        }
        if !self.state.is_synchronized() {
            return;
        }
        // Receive side.
        self.rcv.adv = self.fused_edge();
        self.ack.last_sent = self.rcv.nxt;
        self.ack.due = false;
        self.ack.dsack = None;
        self.ack.unacked_bytes = 0;
        self.timers.stop(Timer::DelayedAck);
        // Send side.
        if self.is_peer_of(peer) {
            self.take_fused_window(peer.fused_edge());
        } else {
            self.snd.wl1 = self.rcv.nxt;
            self.snd.wl2 = self.snd.una;
        }
        self.reset_send_recovery();
        self.rtt.ts_floor = Some(self.ts_now(now));
        self.cc.on_idle_restart(now);
        // Timers: all idle; output arms retransmission, persist and cork as needed.
        self.timers.stop(Timer::Retransmit);
        self.retry.series_start = None;
        self.timers.stop(Timer::Persist);
        self.retry.persist_backoff = 0;
        self.timers.stop(Timer::Cork);
        self.retry.probe_pending = false;
        self.last_rcv = now;
        self.retry.keepalive_sent = 0;
        self.timers.set_or_stop(
            Timer::Keepalive,
            self.sockopt
                .keepalive
                .then(|| now + self.settings.keepalive_idle),
        );
    }

    /// Unfuses both ends of a connection.
    pub fn unfuse_pair(now: Instant, a: &mut Tcb, b: &mut Tcb) {
        a.unfuse(now, b);
        b.unfuse(now, a);
    }

    // ----------------------------------------------------------------------------------
    // Helpers.
    // ----------------------------------------------------------------------------------

    /// `peer` is the other end of this connection with nothing in flight between them.
    fn is_peer_of(&self, peer: &Tcb) -> bool {
        self.local == peer.remote
            && self.remote == peer.local
            && self.snd.nxt == peer.rcv.nxt
            && self.rcv.nxt == peer.snd.nxt
    }

    /// Fused and in a state that takes data (RFC 9293 §3.10.7.4 seventh step: text is
    /// processed in ESTABLISHED, FIN-WAIT-1 and FIN-WAIT-2), with an application that
    /// still reads.
    fn fused_can_receive(&self) -> bool {
        self.fusion.fused
            && matches!(
                self.state,
                State::Established | State::FinWait1 | State::FinWait2
            )
            && !self.app_closed
            && !self.rcv.fin
            && self.error.is_none()
    }

    /// Free space in the receive buffer.
    fn fused_free(&self) -> u32 {
        let used = self.rcv.buf.len().min(u32::MAX as usize) as u32;
        self.rcv.cap.saturating_sub(used)
    }

    /// The receive window's right edge while fused: the free space rounded down to the
    /// window-scale granularity (what a window field can carry, RFC 7323 §2.3), but
    /// never left of the edge already advertised (RFC 9293 §3.8.6.2.2).
    fn fused_edge(&self) -> SeqNum {
        let scale = u32::from(self.opts.rcv_wscale.min(MAX_WSCALE));
        let w = ((self.fused_free() >> scale) << scale).min(MAX_WINDOW << scale);
        self.rcv.adv.max(self.rcv.nxt + w)
    }

    /// Takes `edge` (the peer's fused right edge) as the send window, as an accepted
    /// window update from a segment `<SEQ=RCV.NXT><ACK=SND.UNA>` would (RFC 9293
    /// §3.10.7.4 fifth step).
    fn take_fused_window(&mut self, edge: SeqNum) {
        self.snd.wnd = edge.since(self.snd.una);
        self.snd.max_wnd = self.snd.max_wnd.max(self.snd.wnd);
        self.snd.wl1 = self.rcv.nxt;
        self.snd.wl2 = self.snd.una;
    }

    /// Loss-recovery state back to "nothing outstanding" at SND.UNA.
    fn reset_send_recovery(&mut self) {
        self.rtt.timed = None;
        self.sb.clear();
        self.loss.phase = Recovery::Open;
        self.loss.recover = self.snd.una;
        self.loss.high_rxt = self.snd.una;
        self.loss.dupacks = 0;
        self.loss.reno_cwnd = 0;
        self.loss.rtx_head = false;
        self.tx.forget_cwnd_blocked();
        self.loss.rto_reduced = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::Params;
    use crate::tcp::tcb::ConnSpec;
    use crate::tcp::TcpSettings;
    use crate::wire::{TcpFlags, TcpRepr};
    use core::time::Duration;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, SocketAddrV4};

    const ADDR_A: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 40_000);
    const ADDR_B: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 80);
    const T0: Instant = Instant::from_secs(1_000);

    type Seg = (TcpRepr, Vec<u8>);

    fn settings() -> TcpSettings {
        TcpSettings::from_params(&Params::default())
    }

    fn spec(local: SocketAddrV4, remote: SocketAddrV4, iss: u32) -> ConnSpec {
        ConnSpec {
            local,
            remote,
            iss: SeqNum(iss),
            ts_offset: iss.wrapping_mul(7),
            mtu: 65_535,
        }
    }

    /// The next segment `t` sends, copied out.
    fn take(t: &mut Tcb, now: Instant) -> Option<Seg> {
        let o = t.poll_transmit(now)?;
        let mut v = vec![0; o.payload_len()];
        o.copy_payload(&mut v);
        Some((o.repr, v))
    }

    fn drain(t: &mut Tcb, now: Instant) -> Vec<Seg> {
        let mut out = Vec::new();
        while let Some(s) = take(t, now) {
            out.push(s);
            assert!(out.len() < 100_000, "poll_transmit never ends");
        }
        out
    }

    /// Delivers segments both ways until neither end has anything to send; returns how
    /// many segments moved.
    fn shuttle(a: &mut Tcb, b: &mut Tcb, now: Instant) -> usize {
        let mut moved = 0;
        for _ in 0..10_000 {
            let from_a = drain(a, now);
            let from_b = drain(b, now);
            if from_a.is_empty() && from_b.is_empty() {
                return moved;
            }
            moved += from_a.len() + from_b.len();
            for (r, p) in &from_a {
                b.handle_segment(now, r, p);
            }
            for (r, p) in &from_b {
                a.handle_segment(now, r, p);
            }
        }
        panic!("segments never stop");
    }

    /// A (active) and B (passive) after a handshake run in memory, with settings `sa`
    /// and `sb`.
    fn pair_with(sa: TcpSettings, sb: TcpSettings, iss_a: u32, iss_b: u32) -> (Tcb, Tcb) {
        let mut a = Tcb::connect(T0, spec(ADDR_A, ADDR_B, iss_a), sa);
        let (syn, _) = take(&mut a, T0).expect("SYN");
        assert!(syn.flags.syn() && !syn.flags.ack());
        let mut b = Tcb::accept(T0, spec(ADDR_B, ADDR_A, iss_b), sb, &syn);
        let (synack, p) = take(&mut b, T0).expect("SYN,ACK");
        assert!(synack.flags.syn() && synack.flags.ack());
        a.handle_segment(T0, &synack, &p);
        let (ack, p) = take(&mut a, T0).expect("ACK");
        b.handle_segment(T0, &ack, &p);
        assert_eq!(a.state(), State::Established);
        assert_eq!(b.state(), State::Established);
        assert!(take(&mut a, T0).is_none() && take(&mut b, T0).is_none());
        assert!(
            a.opts.ts_ok
                && b.opts.ts_ok
                && a.opts.sack_ok
                && b.opts.sack_ok
                && a.opts.ws_ok
                && b.opts.ws_ok
        );
        a.poll_events();
        b.poll_events();
        (a, b)
    }

    fn pair() -> (Tcb, Tcb) {
        pair_with(settings(), settings(), 1_000_000, 3_000_000)
    }

    fn fused_pair() -> (Tcb, Tcb) {
        let (mut a, mut b) = pair();
        Tcb::fuse_pair(T0, &mut a, &mut b).expect("fusable");
        (a, b)
    }

    /// Settings with a receive buffer of `rcvbuf` bytes; `coarse` makes the window scale
    /// large (granularity 512) compared with the buffer.
    fn small_buf(rcvbuf: u32, coarse: bool) -> TcpSettings {
        let mut s = settings();
        s.rcvbuf = rcvbuf;
        s.max_buf = if coarse { 1 << 24 } else { rcvbuf.max(8192) };
        s
    }

    /// Byte `i` of the stream in direction `dir`.
    fn byte(dir: u8, i: usize) -> u8 {
        let x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(dir) << 40;
        (x >> 29) as u8 ^ (i as u8).wrapping_mul(31)
    }

    fn stream(dir: u8, from: usize, len: usize) -> Vec<u8> {
        (from..from + len).map(|i| byte(dir, i)).collect()
    }

    /// One direction of a test transfer.
    #[derive(Default)]
    struct Flow {
        dir: u8,
        /// Bytes the writer has had accepted (by fused_send or send).
        written: usize,
        /// Bytes the writer wants to write in total (ordinary phase).
        target: usize,
        /// What the reader read.
        got: Vec<u8>,
    }

    impl Flow {
        fn new(dir: u8) -> Flow {
            Flow {
                dir,
                ..Flow::default()
            }
        }

        fn check(&self) {
            assert_eq!(self.got.len(), self.written);
            assert!(
                self.got == stream(self.dir, 0, self.written),
                "stream {} corrupted",
                self.dir
            );
        }
    }

    /// Reads up to `max` bytes from `t` into `f`; returns whether anything was read.
    fn read(t: &mut Tcb, now: Instant, f: &mut Flow, max: usize) -> bool {
        if max == 0 {
            return false;
        }
        let mut buf = vec![0; max];
        match t.recv(now, &mut buf) {
            Ok(n) => {
                f.got.extend_from_slice(&buf[..n]);
                n > 0
            }
            Err(TcpError::WouldBlock) => false,
            Err(e) => panic!("recv: {e}"),
        }
    }

    /// The invariants of a fused pair (module comment).
    fn check_fused(a: &mut Tcb, b: &mut Tcb, now: Instant) {
        for (w, r) in [(&*a, &*b), (&*b, &*a)] {
            assert!(w.fusion.fused && r.fusion.fused);
            assert_eq!(w.snd.nxt, r.rcv.nxt);
            assert_eq!(w.snd.una, w.snd.nxt);
            assert_eq!(w.snd.buf_seq, w.snd.una);
            assert!(w.snd.buf.is_empty());
            assert_eq!(w.snd.una + w.snd.wnd, r.rcv.adv, "right edges differ");
            assert_eq!(r.rcv.adv, r.fused_edge());
            assert!(r.rcv.adv >= r.rcv.nxt);
            assert!(r.rcv.buf.len() <= r.rcv.cap as usize);
            assert_eq!(w.poll_timeout(), None);
            assert!(!w.ack.due && !w.timers.is_armed(Timer::DelayedAck) && w.ack.dsack.is_none());
            assert_eq!(w.info().rcv_wnd, w.rcv.adv.since(w.rcv.nxt));
            assert_eq!(r.info().rcv_wnd, w.info().snd_wnd);
            assert!(w.info().fused);
        }
        assert!(a.poll_transmit(now).is_none());
        assert!(b.poll_transmit(now).is_none());
    }

    /// The reader's receive sequence variables account for exactly the bytes of `f`
    /// written so far.
    fn check_flow(r: &Tcb, f: &Flow) {
        assert_eq!(r.rcv.off, f.written as u64);
        assert_eq!(r.rcv.nxt, r.rcv.irs + 1 + f.written as u32);
        assert_eq!(r.rcv.buf.len() + f.got.len(), f.written);
    }

    /// Writes from `f`'s stream via fused_send and checks the result against the free
    /// space the reader had.
    fn fused_write(w: &mut Tcb, r: &mut Tcb, now: Instant, f: &mut Flow, len: usize) {
        let free = r.fused_recv_space();
        let chunk = stream(f.dir, f.written, len);
        let before = (w.stats, r.stats);
        match w.fused_send(now, r, &chunk) {
            Ok(n) => {
                assert_eq!(n, len.min(free));
                f.written += n;
                if n > 0 {
                    assert_eq!(w.stats.bytes_out, before.0.bytes_out + n as u64);
                    assert_eq!(w.stats.data_segs_out, before.0.data_segs_out + 1);
                    assert_eq!(w.stats.segs_out, before.0.segs_out + 1);
                    assert_eq!(r.stats.bytes_in, before.1.bytes_in + n as u64);
                    assert_eq!(r.stats.segs_in, before.1.segs_in + 1);
                    assert!(r.poll_events().contains(Events::READABLE));
                    assert_eq!(w.tx.last_data_sent(), now);
                    assert_eq!(r.rcv.last_data, now);
                }
            }
            Err(TcpError::WouldBlock) => assert!(free == 0 && len > 0),
            Err(e) => panic!("fused_send: {e}"),
        }
    }

    /// Runs ordinary TCP between `a` and `b` until both flows reached their targets and
    /// everything was read, advancing the clock only when nothing else can progress.
    fn finish_ordinary(
        a: &mut Tcb,
        b: &mut Tcb,
        now: &mut Instant,
        ab: &mut Flow,
        ba: &mut Flow,
        chunk: usize,
    ) {
        for _ in 0..200_000 {
            let mut progress = false;
            for (t, f) in [(&mut *a, &mut *ab), (&mut *b, &mut *ba)] {
                if f.written < f.target {
                    let data = stream(f.dir, f.written, (f.target - f.written).min(50_000));
                    match t.send(*now, &data) {
                        Ok(n) => {
                            f.written += n;
                            progress |= n > 0;
                        }
                        Err(TcpError::WouldBlock) => {}
                        Err(e) => panic!("send: {e}"),
                    }
                }
            }
            progress |= shuttle(a, b, *now) > 0;
            progress |= read(b, *now, ab, chunk);
            progress |= read(a, *now, ba, chunk);
            let done = |f: &Flow| f.written == f.target && f.got.len() == f.target;
            if done(ab) && done(ba) && a.send_queued() == 0 && b.send_queued() == 0 {
                return;
            }
            if !progress {
                let t = [a.poll_timeout(), b.poll_timeout()]
                    .into_iter()
                    .flatten()
                    .min()
                    .expect("stalled without a timer");
                *now = t.max(*now);
                a.handle_timeout(*now);
                b.handle_timeout(*now);
            }
        }
        panic!("ordinary transfer never finished");
    }

    fn assert_clean(t: &Tcb) {
        let s = t.stats();
        assert_eq!(s.paws_drops, 0, "PAWS drops");
        assert_eq!(s.challenge_acks, 0, "challenge ACKs");
        assert_eq!(s.dup_segs_in, 0, "duplicate segments");
        assert_eq!(s.bad_acks, 0, "bad ACKs");
        assert_eq!(s.retrans_segs, 0, "retransmissions");
        assert_eq!(s.timeouts, 0, "timeouts");
        assert_eq!(s.rsts_in + s.rsts_out, 0, "resets");
    }

    // ----------------------------------------------------------------------------------
    // Admission.
    // ----------------------------------------------------------------------------------

    #[test]
    fn fresh_connection_is_fusable() {
        let (mut a, mut b) = pair();
        assert_eq!(a.fuse_check(), Ok(()));
        assert_eq!(b.fuse_check(), Ok(()));
        assert_eq!(a.fuse_check_pair(&b), Ok(()));
        Tcb::fuse_pair(T0, &mut a, &mut b).unwrap();
        assert!(a.is_fused() && b.is_fused());
        assert!(!a.is_unfusable());
        // Idempotent, and fusing does not change what the checks look at.
        assert_eq!(a.fuse(T0, &b), Ok(()));
        check_fused(&mut a, &mut b, T0);
    }

    #[test]
    fn refuses_simultaneous_open() {
        let mut a = Tcb::connect(T0, spec(ADDR_A, ADDR_B, 10), settings());
        let mut b = Tcb::connect(T0, spec(ADDR_B, ADDR_A, 20), settings());
        let (sa, pa) = take(&mut a, T0).unwrap();
        let (sb, pb) = take(&mut b, T0).unwrap();
        a.handle_segment(T0, &sb, &pb);
        b.handle_segment(T0, &sa, &pa);
        shuttle(&mut a, &mut b, T0);
        assert_eq!(a.state(), State::Established);
        assert_eq!(b.state(), State::Established);
        assert!(a.is_simultaneous_open() && b.is_simultaneous_open());
        assert_eq!(a.fuse_check(), Err(FuseRefusal::SimultaneousOpen));
        assert_eq!(
            Tcb::fuse_pair(T0, &mut a, &mut b),
            Err(FuseRefusal::SimultaneousOpen)
        );
        assert!(!a.is_fused() && !b.is_fused());
    }

    #[test]
    fn refuses_data_in_flight_and_buffered() {
        let (mut a, mut b) = pair();
        a.send(T0, b"hello").unwrap();
        // Buffered, not yet sent.
        assert_eq!(a.fuse_check(), Err(FuseRefusal::SendQueueNotEmpty));
        let (seg, p) = take(&mut a, T0).unwrap();
        assert_eq!(p, b"hello");
        // In flight.
        assert_eq!(a.fuse_check(), Err(FuseRefusal::SendQueueNotEmpty));
        assert_eq!(
            Tcb::fuse_pair(T0, &mut b, &mut a),
            Err(FuseRefusal::SendQueueNotEmpty)
        );
        assert!(!a.is_fused() && !b.is_fused());
        // Delivered but not yet acknowledged: B's RCV.NXT is ahead of what A knows.
        b.handle_segment(T0, &seg, &p);
        assert_eq!(a.fuse_check(), Err(FuseRefusal::SendQueueNotEmpty));
        shuttle(&mut a, &mut b, T0);
        assert_eq!(Tcb::fuse_pair(T0, &mut a, &mut b), Ok(()));
        // Unread data from before fusion stays readable.
        let mut buf = [0; 16];
        assert_eq!(b.recv(T0, &mut buf), Ok(5));
        assert_eq!(&buf[..5], b"hello");
    }

    #[test]
    fn refuses_fin_queued_and_closing() {
        let (mut a, b) = pair();
        a.shutdown_write(T0).unwrap();
        assert_eq!(a.fuse_check(), Err(FuseRefusal::Closing));
        assert_eq!(b.fuse_check_pair(&a), Err(FuseRefusal::Closing));
        // The peer's FIN received (CLOSE-WAIT).
        let (mut a, mut b) = pair();
        a.shutdown_write(T0).unwrap();
        shuttle(&mut a, &mut b, T0);
        assert_eq!(b.state(), State::CloseWait);
        assert_eq!(b.fuse_check(), Err(FuseRefusal::Closing));
        assert_eq!(a.fuse_check(), Err(FuseRefusal::Closing));
        // Not yet established.
        let c = Tcb::connect(T0, spec(ADDR_A, ADDR_B, 5), settings());
        assert_eq!(c.fuse_check(), Err(FuseRefusal::NotEstablished));
    }

    #[test]
    fn refuses_urgent_until_read() {
        let (mut a, mut b) = pair();
        a.send_urgent(T0, b"!").unwrap();
        assert_eq!(a.fuse_check(), Err(FuseRefusal::Urgent));
        shuttle(&mut a, &mut b, T0);
        assert_eq!(a.fuse_check(), Ok(()));
        assert!(b.poll_events().contains(Events::URGENT));
        assert_eq!(b.fuse_check(), Err(FuseRefusal::Urgent));
        let mut buf = [0; 4];
        assert_eq!(b.recv(T0, &mut buf), Ok(1));
        assert_eq!(b.fuse_check(), Ok(()));
    }

    #[test]
    fn refuses_out_of_order_data() {
        let (mut a, mut b) = pair();
        a.set_nodelay(true);
        a.send(T0, b"0123456789").unwrap();
        let (mut seg, p) = take(&mut a, T0).unwrap();
        seg.seq = seg.seq.wrapping_add(5);
        b.handle_segment(T0, &seg, &p[5..]);
        assert_eq!(b.ooo_bytes_for_test(), 5);
        assert_eq!(b.fuse_check(), Err(FuseRefusal::PendingOutput));
    }

    impl Tcb {
        fn ooo_bytes_for_test(&self) -> usize {
            self.info().ooo_bytes
        }
    }

    #[test]
    fn refuses_strangers_and_the_unfusable() {
        let (mut a1, b1) = pair();
        let (_a2, b2) = pair_with(settings(), settings(), 7, 9);
        assert_eq!(a1.fuse_check_pair(&b2), Err(FuseRefusal::NotPeers));
        assert_eq!(a1.fuse(T0, &b2), Err(FuseRefusal::NotPeers));
        assert!(!a1.is_fused());
        // Same addresses, different sequence numbers: still not peers.
        let (_a3, b3) = pair_with(settings(), settings(), 1_000_000, 3_000_001);
        assert_eq!(a1.fuse_check_pair(&b3), Err(FuseRefusal::NotPeers));
        assert_eq!(a1.fuse_check_pair(&b1), Ok(()));
        a1.set_unfusable();
        assert!(a1.is_unfusable());
        assert_eq!(a1.fuse_check(), Err(FuseRefusal::Unfusable));
        assert_eq!(a1.fuse(T0, &b1), Err(FuseRefusal::Unfusable));
        assert_eq!(FuseRefusal::Unfusable.to_string(), "unfusable");
    }

    // ----------------------------------------------------------------------------------
    // Fused operation.
    // ----------------------------------------------------------------------------------

    #[test]
    fn fused_send_moves_bytes_and_keeps_sequence_numbers() {
        let (mut a, mut b) = fused_pair();
        let (a_nxt, b_rcv) = (a.snd_nxt(), b.rcv_nxt());
        let now = T0 + Duration::from_secs(1);
        assert_eq!(a.fused_send(now, &mut b, b"hello, world"), Ok(12));
        assert_eq!(a.snd_nxt(), a_nxt + 12);
        assert_eq!(a.snd_una(), a_nxt + 12);
        assert_eq!(b.rcv_nxt(), b_rcv + 12);
        assert_eq!(b.recv_available(), 12);
        assert!(b.poll_events().contains(Events::READABLE));
        let mut buf = [0; 5];
        assert_eq!(b.peek(&mut buf), Ok(5));
        assert_eq!(&buf, b"hello");
        assert_eq!(b.recv(now, &mut buf), Ok(5));
        // Reading never asks for a segment while fused.
        let mut big = [0; 64];
        assert_eq!(b.recv(now, &mut big), Ok(7));
        assert!(!b.ack.due);
        b.fused_sync_window(&mut a);
        check_fused(&mut a, &mut b, now);
        assert_eq!(b.recv(now, &mut big), Err(TcpError::WouldBlock));
        assert!(!b.at_eof());
        assert_eq!(a.fused_send(now, &mut b, b""), Ok(0));
    }

    #[test]
    fn fused_send_errors() {
        let (mut a, mut b) = pair();
        // Not fused.
        assert_eq!(a.fused_send(T0, &mut b, b"x"), Err(TcpError::NotConnected));
        let (mut a, mut b) = fused_pair();
        let (mut c, _d) = pair_with(settings(), settings(), 77, 99);
        // Not the peer.
        assert_eq!(a.fused_send(T0, &mut c, b"x"), Err(TcpError::NotConnected));
        // The ordinary path takes nothing while fused.
        assert_eq!(a.send(T0, b"x"), Err(TcpError::WouldBlock));
        assert_eq!(a.send_urgent(T0, b"x"), Err(TcpError::WouldBlock));
        assert_eq!(a.send_queued(), 0);
        // Shutdown while fused: further writes are a broken pipe, the FIN waits.
        a.shutdown_write(T0).unwrap();
        assert_eq!(a.state(), State::FinWait1);
        assert_eq!(a.fused_send(T0, &mut b, b"x"), Err(TcpError::BrokenPipe));
        assert!(a.poll_transmit(T0).is_none());
        assert_eq!(a.poll_timeout(), None);
        // The other direction still works (A is in FIN-WAIT-1 and reads).
        assert_eq!(b.fused_send(T0, &mut a, b"yz"), Ok(2));
        // A reader that called close() can no longer receive.
        let (mut a, mut b) = fused_pair();
        b.close(T0);
        assert_eq!(a.fused_send(T0, &mut b, b"x"), Err(TcpError::BrokenPipe));
        assert_eq!(b.fused_recv_space(), 0);
    }

    #[test]
    fn flow_control_blocks_and_reopens() {
        let s = small_buf(4096, false);
        let (mut a, mut b) = pair_with(s.clone(), s, 1, 2);
        Tcb::fuse_pair(T0, &mut a, &mut b).unwrap();
        a.poll_events();
        let mut f = Flow::new(0);
        let cap = b.fused_recv_space();
        assert_eq!(cap, 4096);
        fused_write(&mut a, &mut b, T0, &mut f, 3000);
        fused_write(&mut a, &mut b, T0, &mut f, 3000);
        assert_eq!(f.written, 4096);
        assert_eq!(a.info().snd_wnd, 0);
        assert_eq!(a.fused_send(T0, &mut b, b"more"), Err(TcpError::WouldBlock));
        // A small read reopens a little, not enough to wake the writer.
        let mut g = Flow::new(0);
        read(&mut b, T0, &mut g, 100);
        b.fused_sync_window(&mut a);
        assert!(!a.poll_events().contains(Events::WRITABLE));
        check_fused(&mut a, &mut b, T0);
        assert_eq!(b.fused_recv_space(), 100);
        // Reading half the buffer reaches the mark: the writer is woken once.
        read(&mut b, T0, &mut g, 2000);
        b.fused_sync_window(&mut a);
        assert!(a.poll_events().contains(Events::WRITABLE));
        b.fused_sync_window(&mut a);
        assert!(!a.poll_events().contains(Events::WRITABLE));
        fused_write(&mut a, &mut b, T0, &mut f, 10_000);
        assert_eq!(f.written, 4096 + 2100);
        while read(&mut b, T0, &mut g, 999) {}
        b.fused_sync_window(&mut a);
        check_fused(&mut a, &mut b, T0);
        assert_eq!(g.got, stream(0, 0, f.written));
    }

    #[test]
    fn coarse_window_scale_never_deadlocks() {
        // A buffer smaller than the window-scale unit: the rounded window is zero, but
        // the writer still moves whatever space there is.
        let s = small_buf(3000, true);
        let (mut a, mut b) = pair_with(s.clone(), s, 1, 2);
        assert!(b.opts.rcv_wscale >= 9);
        Tcb::fuse_pair(T0, &mut a, &mut b).unwrap();
        let mut f = Flow::new(0);
        let mut g = Flow::new(0);
        for _ in 0..20 {
            fused_write(&mut a, &mut b, T0, &mut f, 1234);
            read(&mut b, T0, &mut g, 1000);
            b.fused_sync_window(&mut a);
            check_fused(&mut a, &mut b, T0);
        }
        assert!(f.written >= 20_000);
        while read(&mut b, T0, &mut g, 4096) {}
        assert_eq!(g.got, stream(0, 0, f.written));
    }

    #[test]
    fn no_timers_and_no_segments_while_fused() {
        let (mut a, mut b) = fused_pair();
        a.set_keepalive(T0, true);
        a.set_cork(T0, true);
        assert_eq!(a.poll_timeout(), None);
        let later = T0 + Duration::from_secs(10 * 3600);
        a.handle_timeout(later);
        assert!(a.poll_transmit(later).is_none());
        assert_eq!(a.stats().keepalive_probes, 0);
        // A stray (old or forged) segment is ignored, even in-window data.
        let stray = TcpRepr {
            src_port: ADDR_B.port(),
            dst_port: ADDR_A.port(),
            seq: a.rcv_nxt().raw(),
            ack: a.snd_nxt().raw(),
            flags: TcpFlags::ACK | TcpFlags::PSH,
            window: 1000,
            ..TcpRepr::default()
        };
        a.handle_segment(later, &stray, b"forged");
        assert_eq!(a.recv_available(), 0);
        assert_eq!(a.rcv_nxt(), b.snd_nxt());
        check_fused(&mut a, &mut b, later);
        // After unfusing, keepalive runs again.
        Tcb::unfuse_pair(later, &mut a, &mut b);
        assert_eq!(
            a.poll_timeout(),
            Some(later + a.settings.keepalive_idle),
            "keepalive re-armed"
        );
        assert_eq!(b.poll_timeout(), None);
    }

    #[test]
    fn abort_while_fused_resets_the_peer() {
        let (mut a, mut b) = fused_pair();
        a.fused_send(T0, &mut b, b"abc").unwrap();
        a.abort(T0);
        let (rst, p) = take(&mut a, T0).expect("RST");
        assert!(rst.flags.rst());
        b.handle_segment(T0, &rst, &p);
        assert_eq!(b.state(), State::Closed);
        assert_eq!(b.error(), Some(TcpError::Reset));
        assert_eq!(b.fused_send(T0, &mut a, b"x"), Err(TcpError::Reset));
        assert_eq!(a.fused_send(T0, &mut b, b"x"), Err(TcpError::Aborted));
        // Unfusing closed ends only drops the mark.
        Tcb::unfuse_pair(T0, &mut a, &mut b);
        assert!(!a.is_fused() && !b.is_fused());
        assert!(a.is_closed() && b.is_closed());
    }

    #[test]
    fn blocked_writer_is_woken_by_a_closing_reader() {
        let s = small_buf(2048, false);
        let (mut a, mut b) = pair_with(s.clone(), s, 1, 2);
        Tcb::fuse_pair(T0, &mut a, &mut b).unwrap();
        let mut f = Flow::new(0);
        fused_write(&mut a, &mut b, T0, &mut f, 5000);
        assert_eq!(f.written, 2048);
        a.poll_events();
        b.abort(T0);
        // The reader can no longer receive: the blocked writer is woken at once...
        b.fused_sync_window(&mut a);
        assert!(a.poll_events().contains(Events::WRITABLE));
        assert_eq!(a.fused_send(T0, &mut b, b"x"), Err(TcpError::BrokenPipe));
        // ...and the RST then tells it why.
        let rst = take(&mut b, T0).expect("RST");
        a.handle_segment(T0, &rst.0, &rst.1);
        assert!(a.poll_events().contains(Events::ERROR));
        assert_eq!(a.fused_send(T0, &mut b, b"x"), Err(TcpError::Reset));
    }

    // ----------------------------------------------------------------------------------
    // Unfusing.
    // ----------------------------------------------------------------------------------

    #[test]
    fn unfuse_with_unread_data_then_ordinary_tcp() {
        let (mut a, mut b) = fused_pair();
        let mut now = T0 + Duration::from_millis(500);
        let (mut ab, mut ba) = (Flow::new(0), Flow::new(1));
        fused_write(&mut a, &mut b, now, &mut ab, 70_000);
        fused_write(&mut b, &mut a, now, &mut ba, 1_000);
        read(&mut b, now, &mut ab, 10_000);
        b.fused_sync_window(&mut a);
        now += Duration::from_secs(3);
        Tcb::unfuse_pair(now, &mut a, &mut b);
        assert!(!a.is_fused() && a.is_unfusable());
        assert_eq!(a.fuse_check(), Err(FuseRefusal::Unfusable));
        // Windows exact, nothing to say.
        assert_eq!(a.snd.una + a.snd.wnd, b.rcv.adv);
        assert_eq!(b.snd.una + b.snd.wnd, a.rcv.adv);
        assert!(a.poll_transmit(now).is_none() && b.poll_transmit(now).is_none());
        // Unread data is still there.
        assert_eq!(b.recv_available(), 60_000);
        assert_eq!(a.recv_available(), 1_000);
        // The first ordinary segment is accepted at once, and its timestamp taken
        // (RFC 7323 §4.3: it covers Last.ACK.sent).
        let data = stream(0, ab.written, 100);
        ab.written += a.send(now, &data).unwrap();
        let (seg, p) = take(&mut a, now).expect("first ordinary segment");
        assert_eq!(seg.seq, b.rcv_nxt().raw());
        assert_eq!(seg.ack, b.snd_nxt().raw());
        b.handle_segment(now, &seg, &p);
        assert_eq!(b.rcv_nxt(), SeqNum(seg.seq) + 100);
        assert_eq!(Some(b.opts.ts_recent), seg.options.timestamps.map(|t| t.0));
        ab.target = ab.written + 200_000;
        ba.target = ba.written + 30_000;
        finish_ordinary(&mut a, &mut b, &mut now, &mut ab, &mut ba, 7_000);
        ab.check();
        ba.check();
        assert_clean(&a);
        assert_clean(&b);
        assert!(a.stats().rtt_samples > 0);
        assert!(a.info().srtt.is_some_and(|d| d < Duration::from_secs(1)));
    }

    #[test]
    fn unfuse_with_full_receive_buffer() {
        let s = small_buf(4096, false);
        let (mut a, mut b) = pair_with(s.clone(), s, 1, 2);
        Tcb::fuse_pair(T0, &mut a, &mut b).unwrap();
        let mut now = T0;
        let (mut ab, mut ba) = (Flow::new(0), Flow::new(1));
        fused_write(&mut a, &mut b, now, &mut ab, 10_000);
        assert_eq!(a.snd.wnd, 0);
        Tcb::unfuse_pair(now, &mut a, &mut b);
        assert!(a.poll_events().contains(Events::WRITABLE));
        assert_eq!(a.snd.wnd, 0);
        ab.target = 20_000;
        // The writer queues data against a zero window; nothing may be lost.
        let data = stream(0, ab.written, 3000);
        ab.written += a.send(now, &data).unwrap();
        assert_eq!(shuttle(&mut a, &mut b, now), 0);
        finish_ordinary(&mut a, &mut b, &mut now, &mut ab, &mut ba, 1_500);
        ab.check();
        assert_clean(&a);
        assert_clean(&b);
    }

    #[test]
    fn fin_queued_while_fused_goes_out_at_unfuse() {
        let (mut a, mut b) = fused_pair();
        let mut now = T0;
        let mut ab = Flow::new(0);
        fused_write(&mut a, &mut b, now, &mut ab, 500);
        a.shutdown_write(now).unwrap();
        assert!(a.poll_transmit(now).is_none());
        Tcb::unfuse_pair(now, &mut a, &mut b);
        let (fin, p) = take(&mut a, now).expect("FIN");
        assert!(fin.flags.fin() && p.is_empty());
        assert_eq!(fin.seq, a.snd_una().raw());
        b.handle_segment(now, &fin, &p);
        assert_eq!(b.state(), State::CloseWait);
        shuttle(&mut a, &mut b, now);
        assert_eq!(a.state(), State::FinWait2);
        while read(&mut b, now, &mut ab, 100) {}
        ab.check();
        assert!(b.at_eof());
        let mut buf = [0; 8];
        assert_eq!(b.recv(now, &mut buf), Ok(0));
        b.close(now);
        shuttle(&mut a, &mut b, now);
        assert_eq!(a.state(), State::TimeWait);
        assert!(b.is_closed());
        now += a.settings.time_wait;
        a.handle_timeout(now);
        assert!(a.is_closed());
        assert_clean(&a);
        assert_clean(&b);
    }

    #[test]
    fn unfuse_then_close_both_ends() {
        let (mut a, mut b) = fused_pair();
        let mut now = T0;
        let (mut ab, mut ba) = (Flow::new(0), Flow::new(1));
        fused_write(&mut a, &mut b, now, &mut ab, 12_345);
        fused_write(&mut b, &mut a, now, &mut ba, 54_321);
        while read(&mut b, now, &mut ab, 5000) {}
        while read(&mut a, now, &mut ba, 5000) {}
        now += Duration::from_millis(10);
        Tcb::unfuse_pair(now, &mut a, &mut b);
        a.close(now);
        b.close(now);
        assert_eq!(a.state(), State::FinWait1);
        shuttle(&mut a, &mut b, now);
        // Simultaneous close: both pass through CLOSING to TIME-WAIT.
        assert_eq!(a.state(), State::TimeWait);
        assert_eq!(b.state(), State::TimeWait);
        now += a.settings.time_wait;
        a.handle_timeout(now);
        b.handle_timeout(now);
        assert!(a.is_closed() && b.is_closed());
        ab.check();
        ba.check();
        assert_clean(&a);
        assert_clean(&b);
    }

    #[test]
    fn sequence_numbers_wrap_while_fused() {
        let (mut a, mut b) = pair_with(settings(), settings(), u32::MAX - 100, u32::MAX - 9);
        Tcb::fuse_pair(T0, &mut a, &mut b).unwrap();
        let mut now = T0;
        let (mut ab, mut ba) = (Flow::new(0), Flow::new(1));
        for _ in 0..4 {
            fused_write(&mut a, &mut b, now, &mut ab, 30_000);
            fused_write(&mut b, &mut a, now, &mut ba, 30_000);
            while read(&mut b, now, &mut ab, 8192) {}
            while read(&mut a, now, &mut ba, 8192) {}
            b.fused_sync_window(&mut a);
            a.fused_sync_window(&mut b);
            check_fused(&mut a, &mut b, now);
        }
        assert!(a.snd_nxt().raw() < 1_000_000, "wrapped");
        Tcb::unfuse_pair(now, &mut a, &mut b);
        ab.target = ab.written + 100_000;
        ba.target = ba.written + 100_000;
        finish_ordinary(&mut a, &mut b, &mut now, &mut ab, &mut ba, 16_384);
        ab.check();
        ba.check();
        assert_clean(&a);
        assert_clean(&b);
    }

    /// Moves every sequence variable of one direction of a fused pair by `k`, as
    /// `fused_send` and the reader's reads would after `k` octets, without copying them.
    fn teleport(w: &mut Tcb, r: &mut Tcb, k: u32) {
        assert!(r.rcv.buf.is_empty());
        w.snd.una += k;
        w.snd.nxt += k;
        w.snd.buf_seq += k;
        r.rcv.nxt += k;
        r.rcv.off += u64::from(k);
        r.rcv.adv += k;
        r.fused_sync_window(w);
    }

    #[test]
    fn long_fused_history_leaves_no_stale_state() {
        // More than 2^31 octets each way while fused: every sequence number remembered
        // from before the fusion now compares the wrong way round.
        let s = small_buf(4096, false);
        let (mut a, mut b) = pair_with(s.clone(), s, 1_000, 2_000);
        Tcb::fuse_pair(T0, &mut a, &mut b).unwrap();
        let old = (a.snd.wl1, a.loss.recover, a.ack.last_sent);
        teleport(&mut a, &mut b, 0x8000_1234);
        teleport(&mut b, &mut a, 0x9000_4321);
        let mut now = T0;
        check_fused(&mut a, &mut b, now);
        assert!(a.rcv.nxt < old.0 && a.snd.una < old.1 && a.rcv.nxt < old.2);
        Tcb::unfuse_pair(now, &mut a, &mut b);
        for t in [&a, &b] {
            assert_eq!(t.snd.wl1, t.rcv.nxt);
            assert_eq!(t.snd.wl2, t.snd.una);
            assert_eq!(t.loss.recover, t.snd.una);
            assert_eq!(t.loss.high_rxt, t.snd.una);
            assert_eq!(t.ack.last_sent, t.rcv.nxt);
            assert!(t.rtt.timed.is_none());
        }
        // Many window updates are needed (4 KiB buffers): each must be accepted.
        let (mut ab, mut ba) = (Flow::new(0), Flow::new(1));
        ab.target = 60_000;
        ba.target = 60_000;
        finish_ordinary(&mut a, &mut b, &mut now, &mut ab, &mut ba, 1_000);
        ab.check();
        ba.check();
        assert_clean(&a);
        assert_clean(&b);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Random fused writes and reads both ways: the reader gets exactly the bytes
        /// written, and the invariants hold after every step.
        #[test]
        fn fused_transfer_is_exact(
            rcvbuf in 2048u32..40_000,
            coarse in any::<bool>(),
            iss in (any::<u32>(), any::<u32>()),
            ops in proptest::collection::vec((any::<bool>(), 0usize..9_000, 0usize..9_000), 1..50),
        ) {
            let s = small_buf(rcvbuf, coarse);
            let (mut a, mut b) = pair_with(s.clone(), s, iss.0, iss.1);
            let mut edges = (a.rcv.adv, b.rcv.adv);
            Tcb::fuse_pair(T0, &mut a, &mut b).unwrap();
            let mut now = T0;
            let (mut ab, mut ba) = (Flow::new(0), Flow::new(1));
            for (dir, w, r) in ops {
                // RFC 9293 §3.8.6.2.2: no right edge ever moves left.
                prop_assert!(a.rcv.adv >= edges.0 && b.rcv.adv >= edges.1);
                edges = (a.rcv.adv, b.rcv.adv);
                now += Duration::from_micros(137);
                let (wr, rd, f) = if dir {
                    (&mut a, &mut b, &mut ab)
                } else {
                    (&mut b, &mut a, &mut ba)
                };
                fused_write(wr, rd, now, f, w);
                read(rd, now, f, r);
                rd.fused_sync_window(wr);
                check_flow(rd, f);
                check_fused(&mut a, &mut b, now);
            }
            while read(&mut b, now, &mut ab, 4096) {}
            while read(&mut a, now, &mut ba, 4096) {}
            ab.check();
            ba.check();
        }

        /// Fused phase, unfuse at an arbitrary point (with unread data, possibly a full
        /// buffer), then ordinary TCP: every byte arrives exactly once, in order, and
        /// the first ordinary segments are accepted.
        #[test]
        fn unfuse_anywhere_loses_nothing(
            rcvbuf in 2048u32..40_000,
            coarse in any::<bool>(),
            iss in (any::<u32>(), any::<u32>()),
            ops in proptest::collection::vec((any::<bool>(), 0usize..9_000, 0usize..9_000), 0..20),
            extra in (0usize..30_000, 0usize..30_000),
            chunk in 1usize..5_000,
        ) {
            let s = small_buf(rcvbuf, coarse);
            let (mut a, mut b) = pair_with(s.clone(), s, iss.0, iss.1);
            Tcb::fuse_pair(T0, &mut a, &mut b).unwrap();
            let mut now = T0;
            let (mut ab, mut ba) = (Flow::new(0), Flow::new(1));
            for (dir, w, r) in ops {
                now += Duration::from_millis(3);
                let (wr, rd, f) = if dir {
                    (&mut a, &mut b, &mut ab)
                } else {
                    (&mut b, &mut a, &mut ba)
                };
                fused_write(wr, rd, now, f, w);
                read(rd, now, f, r);
                rd.fused_sync_window(wr);
            }
            Tcb::unfuse_pair(now, &mut a, &mut b);
            prop_assert_eq!(a.snd.una + a.snd.wnd, b.rcv.adv);
            prop_assert_eq!(b.snd.una + b.snd.wnd, a.rcv.adv);
            prop_assert!(a.poll_transmit(now).is_none());
            prop_assert!(b.poll_transmit(now).is_none());
            ab.target = ab.written + extra.0;
            ba.target = ba.written + extra.1;
            finish_ordinary(&mut a, &mut b, &mut now, &mut ab, &mut ba, chunk);
            ab.check();
            ba.check();
            assert_clean(&a);
            assert_clean(&b);
        }
    }
}
