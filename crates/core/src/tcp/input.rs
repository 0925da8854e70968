//! Segment arrival: RFC 9293 §3.10.7 ("SEGMENT ARRIVES"), step by step, with the
//! RFC 5961 defences (challenge ACKs against blind RST, SYN and data injection), RFC 7323
//! PAWS and timestamps, RFC 2018/2883 SACK and D-SACK, RFC 5681/6582/6675 duplicate-ACK
//! handling and loss-recovery entry, and RFC 6298 RTT sampling.
//!
//! The owner has already verified the checksum and parsed the options; everything else
//! about the segment is untrusted. Every length and sequence number is checked with
//! modular arithmetic; nothing here can panic.

use super::ack::{MAX_OWED_ACKS, QUICKACK_SEGMENTS};
use super::cc::{AckSample, CongestionControl};
use super::recovery::Recovery;
use super::seq::SeqNum;
use super::tcb::Tcb;
use super::timers::Timer;
use super::{Events, State, TcpError};
use crate::tcp::assembler::InsertOutcome;
use crate::time::Instant;
use crate::wire::TcpRepr;
use core::time::Duration;

/// RFC 7323 §5.5: TS.Recent older than 24 days is no longer used for PAWS.
const PAWS_IDLE: Duration = Duration::from_secs(24 * 24 * 3600);

/// The wire segments one arriving segment stands for: `n` pieces of `size` payload
/// bytes, the last possibly shorter (receive-side coalescing, `ip/gro.rs`). Counters,
/// the MSS estimate and the ACK decision go by the pieces, so the peer sees what it
/// would have seen had they arrived one by one, except that they draw one ACK between
/// them where they would have drawn several (as with Linux's GRO).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Pieces {
    n: u32,
    size: u32,
}

impl Pieces {
    const ONE: Pieces = Pieces { n: 1, size: 0 };

    /// `segs` pieces of `gso_size` bytes making up `len` payload bytes; a description
    /// that does not fit `len` (or says one piece) is taken as one segment.
    fn of(segs: u16, gso_size: u16, len: usize) -> Pieces {
        let (n, size) = (usize::from(segs), usize::from(gso_size));
        if n > 1 && size > 0 && len > (n - 1) * size && len <= n * size {
            Pieces {
                n: u32::from(segs),
                size: u32::from(gso_size),
            }
        } else {
            Pieces::ONE
        }
    }

    /// Pieces lying wholly within the first `bytes` bytes of the payload.
    fn within(self, bytes: u32) -> u32 {
        if self.n > 1 {
            (bytes / self.size).min(self.n)
        } else {
            0
        }
    }

    /// Pieces holding some of the payload bytes `from..to` (`from < to`).
    fn overlapping(self, from: u32, to: u32) -> u32 {
        if self.n > 1 {
            to.div_ceil(self.size).min(self.n) - (from / self.size).min(self.n)
        } else {
            1
        }
    }
}

impl Tcb {
    /// A segment for this connection arrived (RFC 9293 §3.10.7.3 SYN-SENT,
    /// §3.10.7.4 other states). `payload` is the segment text. While fused only a RST
    /// is processed.
    pub fn handle_segment(&mut self, now: Instant, seg: &TcpRepr, payload: &[u8]) {
        self.handle_segment_pieces(now, seg, payload, Pieces::ONE);
    }

    /// A segment that stands for `segs` wire segments of the same header, each carrying
    /// `gso_size` bytes of `payload` (the last possibly fewer): what receive-side
    /// coalescing (`ip/gro.rs`) makes of consecutive in-order segments. Processed as
    /// [`Tcb::handle_segment`] processes one segment, except that `segs_in` and the other
    /// receive counters count the wire segments, the peer's MSS is learnt from
    /// `gso_size` (never from the merged length), and the peer gets the ACKs the pieces
    /// would have drawn one by one (RFC 5681 §4.2, RFC 9293 §3.8.6.3, §3.10.7.4): every
    /// second full-sized piece in order, each one while quick ACKs last, each duplicate,
    /// out-of-order or out-of-window piece. All but the last are owed (`ack.owed`) and
    /// leave first from `poll_transmit`, each with the window it would have advertised;
    /// the last is the segment's own ACK decision. A `segs`/`gso_size` pair that does not describe `payload` (e.g.
    /// `segs` = 1) makes this the same as [`Tcb::handle_segment`].
    pub fn handle_segment_gro(
        &mut self,
        now: Instant,
        seg: &TcpRepr,
        payload: &[u8],
        segs: u16,
        gso_size: u16,
    ) {
        let p = Pieces::of(segs, gso_size, payload.len());
        self.handle_segment_pieces(now, seg, payload, p);
    }

    fn handle_segment_pieces(&mut self, now: Instant, seg: &TcpRepr, payload: &[u8], p: Pieces) {
        self.stats.segs_in += u64::from(p.n);
        if self.fusion.is_fused() && !seg.flags.rst() {
            // Fused (see `fusion.rs`): the peer sends no segments, so anything but its
            // RST (an abort) is stale or forged; taking it could break RCV.NXT ==
            // peer's SND.NXT, on which fused writes rely.
            return;
        }
        if self.ack.due
            && !self.settings.gro_stretch_acks
            && matches!(
                self.state,
                State::Established
                    | State::FinWait1
                    | State::FinWait2
                    | State::CloseWait
                    | State::Closing
                    | State::LastAck
            )
        {
            // An ACK decided for an earlier segment has not left yet: the owner takes a
            // whole receive batch in before it sends (`Host::receive_batch`, the
            // runtime's squeues). It is owed, and leaves first, as it would have left
            // before this segment had the owner sent after each one; the receive side's
            // ACK state is what sending it would have made it. The peer sees the ACKs it
            // would have seen (RFC 5681 §4.2, RFC 9293 §3.8.6.3), not one per batch;
            // `tcp_gro_stretch_acks` trades them for one per batch, as for GRO's runs.
            if self.ack.owed.len() < MAX_OWED_ACKS {
                self.ack.owed.push_back(self.rcv.nxt);
            }
            self.ack.due = false;
            self.ack.last_sent = self.rcv.nxt;
            self.timers.stop(Timer::DelayedAck);
            self.ack.unacked_bytes = 0;
        }
        match self.state {
            State::Closed | State::Listen => {}
            State::SynSent => self.handle_segment_syn_sent(now, seg, payload),
            _ => self.handle_segment_synchronized(now, seg, payload, p),
        }
    }

    /// RFC 9293 §3.10.7.3: SYN-SENT.
    fn handle_segment_syn_sent(&mut self, now: Instant, seg: &TcpRepr, payload: &[u8]) {
        let f = seg.flags;
        let ack = SeqNum(seg.ack);
        // First: check the ACK bit.
        if f.ack() && (ack <= self.snd.iss || ack > self.snd.nxt) {
            if !f.rst() {
                self.rst_reply = Some(ack);
            }
            return;
        }
        // Second: the RST bit (acceptable only with an acceptable ACK; RFC 5961 §3.2).
        if f.rst() {
            if f.ack() {
                self.stats.rsts_in += 1;
                self.fail(TcpError::Refused);
            }
            return;
        }
        // Fourth: the SYN bit.
        if !f.syn() {
            return;
        }
        self.last_rcv = now;
        self.rcv.irs = SeqNum(seg.seq);
        self.rcv.nxt = self.rcv.irs + 1;
        // The window our SYN offered (unscaled, RFC 7323 §2.2) now has a left edge: text
        // riding on the SYN,ACK is accepted up to it.
        let offered = self
            .rcv
            .cap
            .saturating_sub(self.rcv.buf.len() as u32)
            .min(super::tcb::MAX_WINDOW);
        self.rcv.adv = self.rcv.nxt + offered;
        self.apply_syn_options(now, seg);
        // The window of a SYN is never scaled (RFC 7323 §2.2).
        self.snd.wnd = u32::from(seg.window);
        self.snd.max_wnd = self.snd.wnd;
        self.snd.wl1 = self.rcv.irs;
        self.snd.wl2 = ack;
        if f.ack() {
            // Our SYN is acknowledged: ESTABLISHED.
            self.snd.una = ack;
            self.take_rtt_sample(now, ack, seg);
            self.timers.stop(Timer::Retransmit);
            self.retry.series_start = None;
            if self.retry.syn_retransmitted {
                self.rtt.syn_retransmitted_no_sample();
            }
            self.establish(now);
            self.ack.due = true;
            // Text or FIN carried by the SYN,ACK (rare, but legal).
            if !payload.is_empty() || f.fin() {
                self.process_text(now, self.rcv.irs + 1, payload, f.fin(), Pieces::ONE);
            }
        } else {
            // Simultaneous open (RFC 9293 §3.5, figure 7): send SYN,ACK from SYN-RECEIVED
            // (our SYN again, now with an ACK; SND.NXT stays at ISS+1).
            self.state = State::SynReceived;
            self.simultaneous = true;
            self.retry.syn_due = true;
            self.ack.due = true;
        }
    }

    /// The handshake completed.
    pub(super) fn establish(&mut self, now: Instant) {
        self.state = State::Established;
        self.retry.syn_due = false;
        // Our SYN was acknowledged: Linux counts it as one segment delivered.
        self.info_state.delivered += 1;
        self.events
            .insert(Events::CONNECTED | Events::WRITABLE | Events::READABLE);
        self.ack.quickack = QUICKACK_SEGMENTS;
        self.rcv.last_data = now;
        if self.sockopt.keepalive {
            self.timers
                .set(Timer::Keepalive, now + self.settings.keepalive_idle);
        }
        if self.snd.fin_queued {
            // shutdown() while the handshake was in progress.
            self.state = State::FinWait1;
        }
    }

    /// RFC 9293 §3.10.7.4: SYN-RECEIVED and the synchronized states.
    fn handle_segment_synchronized(
        &mut self,
        now: Instant,
        seg: &TcpRepr,
        payload: &[u8],
        pieces: Pieces,
    ) {
        let f = seg.flags;
        let seq = SeqNum(seg.seq);
        let seg_len = payload.len() as u32 + u32::from(f.syn()) + u32::from(f.fin());

        // RFC 7323 §5.3 R1: PAWS. A RST bypasses it.
        if self.opts.ts_ok && !f.rst() {
            if let Some((tsval, _)) = seg.options.timestamps {
                let older = (tsval.wrapping_sub(self.opts.ts_recent) as i32) < 0;
                let fresh = now.saturating_duration_since(self.opts.ts_recent_time) < PAWS_IDLE;
                if older && fresh {
                    self.stats.paws_drops += 1;
                    if self.state == State::TimeWait && !f.syn() {
                        self.time_wait_answer(now, seg_len, f.ack() || f.fin());
                    } else {
                        self.send_dupack(now, seg_len, f.syn());
                    }
                    return;
                }
            }
        }

        // First: check the sequence number (the four acceptability cases).
        let wnd = self.rcv.adv.since(self.rcv.nxt);
        let acceptable = match (seg_len, wnd) {
            (0, 0) => seq == self.rcv.nxt,
            (0, _) => seq.in_range(self.rcv.nxt, self.rcv.nxt + wnd),
            (_, 0) => false,
            (_, _) => {
                seq.in_range(self.rcv.nxt, self.rcv.nxt + wnd)
                    || (seq + (seg_len - 1)).in_range(self.rcv.nxt, self.rcv.nxt + wnd)
            }
        };
        let mut payload = payload;
        let mut fin = f.fin();
        if !acceptable {
            if wnd == 0 && seq == self.rcv.nxt && !f.syn() && !f.rst() {
                // RFC 9293 §3.10.7.4: with a zero receive window no text is acceptable,
                // but valid ACKs, URGs and RSTs are still processed (MUST-66). Drop the
                // text, keep the control fields, and answer with our (zero) window.
                payload = &[];
                fin = false;
                self.ack.due = true;
            } else {
                if f.rst() {
                    return;
                }
                if self.state == State::SynReceived && f.syn() && !f.ack() && seq == self.rcv.irs {
                    // A retransmitted SYN: our SYN,ACK may have been lost; send it again
                    // (RFC 9293 §3.8.1), at most one per `tcp_invalid_ratelimit`, as Linux
                    // does (tcp_check_req: a burst of copies draws one answer, not one
                    // each). SND.NXT is not rewound: the peer may have our SYN,ACK
                    // already, and its ACK of ISS+1, perhaps in this very receive batch,
                    // must still be acceptable (rewinding drew a RST for it).
                    if self.invalid_rate_limited(now) {
                        self.stats.acks_skipped_syn_recv += 1;
                    } else {
                        self.retry.syn_due = true;
                    }
                    return;
                }
                let ack = SeqNum(seg.ack);
                if self.state == State::SynReceived
                    && self.simultaneous
                    && f.syn()
                    && f.ack()
                    && seq == self.rcv.irs
                    && ack > self.snd.una
                    && ack <= self.snd.nxt
                {
                    // Simultaneous open: the peer's SYN,ACK acknowledges our SYN. Its
                    // sequence number is below RCV.NXT, so §3.10.7.4 would only ACK it;
                    // taking its ACK (as Linux does, RFC 9293 Appendix A.2) saves a round
                    // trip. The SYN's window is not scaled (RFC 7323 §2.2).
                    self.snd.una = ack;
                    self.snd.wnd = u32::from(seg.window);
                    self.snd.max_wnd = self.snd.max_wnd.max(self.snd.wnd);
                    self.snd.wl1 = seq;
                    self.snd.wl2 = ack;
                    self.timers.stop(Timer::Retransmit);
                    self.retry.series_start = None;
                    self.establish(now);
                    self.ack.due = true;
                    return;
                }
                // Data entirely below RCV.NXT is a duplicate: report it (RFC 2883 §4.1).
                if !payload.is_empty()
                    && self.opts.sack_ok
                    && (seq + payload.len() as u32) <= self.rcv.nxt
                {
                    self.ack.dsack = Some((seq, seq + payload.len() as u32));
                    self.stats.dup_segs_in += u64::from(pieces.n);
                }
                if self.state == State::TimeWait && !f.syn() {
                    // A retransmitted FIN (RFC 9293: restarts the 2 MSL timer), or
                    // anything else outside the window.
                    self.time_wait_answer(now, seg_len, f.ack() || f.fin());
                    return;
                }
                if pieces.n > 1 && !payload.is_empty() && !f.syn() {
                    // Each piece, unacceptable alone, would have drawn this ACK (RFC 9293
                    // §3.10.7.4 first step): all but one are owed.
                    self.owe_duplicate_acks(pieces.n - 1);
                }
                self.send_dupack(now, seg_len, f.syn());
                return;
            }
        }

        self.last_rcv = now;
        if self.sockopt.keepalive && self.state.is_synchronized() {
            self.retry.keepalive_sent = 0;
            self.timers
                .set(Timer::Keepalive, now + self.settings.keepalive_idle);
        }

        // Second: the RST bit (RFC 5961 §3.2).
        if f.rst() {
            if seq == self.rcv.nxt {
                self.stats.rsts_in += 1;
                // The error the application sees is Linux's (tcp_reset()): EPIPE in
                // CLOSE-WAIT (the peer's FIN came first, so reads still end cleanly),
                // ECONNRESET in the other synchronized states, CLOSING and LAST-ACK
                // included (RFC 9293 §3.10.7.4 says only "enter CLOSED" there, but a
                // socket that called shutdown(SHUT_WR) still wants to know). SYN-RECEIVED
                // reached by a simultaneous open reports "connection refused" as RFC 9293
                // says (MUST-11; Linux reports ECONNRESET there); SYN-SENT's ECONNREFUSED
                // is in `handle_segment_syn_sent`. TIME-WAIT has nobody left to tell.
                match self.state {
                    State::SynReceived if self.passive => {
                        // Back to LISTEN: the half-open connection just goes away.
                        self.error = Some(TcpError::Reset);
                        self.enter_closed();
                    }
                    State::SynReceived => self.fail(TcpError::Refused),
                    State::CloseWait => self.fail(TcpError::BrokenPipe),
                    State::TimeWait => self.enter_closed(),
                    _ => self.fail(TcpError::Reset),
                }
            } else {
                self.challenge_ack(now);
            }
            return;
        }

        // Fourth: the SYN bit (RFC 5961 §4.2; RFC 9293 for passive SYN-RECEIVED).
        if f.syn() {
            if self.state == State::SynReceived && self.passive {
                self.error = Some(TcpError::Reset);
                self.enter_closed();
            } else {
                self.challenge_ack(now);
            }
            return;
        }

        // Fifth: the ACK field.
        if !f.ack() {
            return;
        }
        let ack = SeqNum(seg.ack);
        if self.state == State::SynReceived {
            if ack > self.snd.una && ack <= self.snd.nxt {
                // RFC 9293: SND.WND from this segment, now with scaling.
                self.snd.wnd = u32::from(seg.window) << self.opts.snd_wscale;
                self.snd.max_wnd = self.snd.max_wnd.max(self.snd.wnd);
                self.snd.wl1 = seq;
                self.snd.wl2 = ack;
                self.establish(now);
            } else {
                // <SEQ=SEG.ACK><CTL=RST>
                self.rst_reply = Some(ack);
                return;
            }
        }
        // RFC 5961 §5.2: SND.UNA - MAX.SND.WND <= SEG.ACK <= SND.NXT.
        if ack > self.snd.nxt {
            self.stats.bad_acks += 1;
            self.challenge_ack(now);
            return;
        }
        let floor = self.snd.una - self.snd.max_wnd.max(1);
        if ack < floor {
            self.stats.bad_acks += 1;
            self.challenge_ack(now);
            return;
        }
        // Take TS.Recent (RFC 7323 §4.3): only from a segment that covers Last.ACK.sent,
        // and only once the segment is known to be acceptable, ACK field included: a
        // segment dropped for an ACK outside the window (RFC 5961 §5.2) must not move
        // TS.Recent, or one forged segment with a large TSval makes PAWS reject every
        // later genuine segment and stalls the connection.
        if self.opts.ts_ok {
            if let Some((tsval, _)) = seg.options.timestamps {
                if seq <= self.ack.last_sent
                    && (tsval.wrapping_sub(self.opts.ts_recent) as i32) >= 0
                {
                    self.opts.ts_recent = tsval;
                    self.opts.ts_recent_time = now;
                }
            }
        }
        self.process_ack(now, seg, seq, ack, seg_len);
        if self.state == State::Closed {
            return;
        }

        // Sixth: the URG bit (RFC 9293 §3.8.5): the pointer is the offset from SEG.SEQ of
        // the octet following the urgent data. Delivered inline; the owner gets a mark.
        if f.urg()
            && seg.urgent > 0
            && matches!(
                self.state,
                State::Established | State::FinWait1 | State::FinWait2
            )
        {
            let up = seq + u32::from(seg.urgent);
            if up > self.rcv.nxt || up.in_range_inclusive(self.rcv.nxt, self.rcv.adv) {
                let off = self.rcv.off + u64::from(up.since(self.rcv.nxt));
                if self.rcv.up.is_none_or(|cur| off > cur) {
                    self.rcv.up = Some(off);
                    self.events.insert(Events::URGENT);
                }
            }
        }

        // Seventh and eighth: the text and the FIN.
        match self.state {
            State::Established | State::FinWait1 | State::FinWait2 => {
                self.process_text(now, seq, payload, fin, pieces);
            }
            State::TimeWait => {
                if seq == self.rcv.nxt && seg_len == 0 {
                    // The bare ACK at RCV.NXT (e.g. the peer's ACK of our FIN, again):
                    // taken silently, and the 2 MSL wait starts over, as on Linux.
                    self.timers.set(Timer::State, now + self.settings.time_wait);
                } else {
                    self.time_wait_answer(now, seg_len, true);
                }
            }
            _ => {
                // CLOSE-WAIT, CLOSING, LAST-ACK: the FIN was received; any further text
                // is a duplicate. Acknowledge what occupies sequence space.
                if seg_len > 0 {
                    self.ack.due = true;
                }
            }
        }
    }

    /// TIME-WAIT's answer to a segment other than the bare ACK at RCV.NXT, a RST or a SYN
    /// (as Linux's tcp_timewait_state_process; RFC 9293 §3.10.7.4 asks the same of a
    /// retransmitted FIN): an ACK of RCV.NXT, so a peer that lost our last ACK, or
    /// probes with a segment beside RCV.NXT, learns where we are. Segments that occupy
    /// sequence space are always answered; pure ACKs at most once per
    /// `tcp_invalid_ratelimit` (an ACK loop between two confused ends stays slow), the
    /// rest counted. `restart`: the segment carries an ACK or FIN, so the 2 MSL wait starts
    /// over (the peer is still there).
    fn time_wait_answer(&mut self, now: Instant, seg_len: u32, restart: bool) {
        if restart {
            self.timers.set(Timer::State, now + self.settings.time_wait);
        }
        if seg_len > 0 {
            self.ack.due = true;
        } else if self.invalid_rate_limited(now) {
            self.stats.acks_skipped_time_wait += 1;
        } else {
            self.ack.due = true;
        }
    }

    /// RFC 5961 §7 ACK throttling: a challenge ACK, at most one per
    /// `tcp_invalid_ratelimit` per connection.
    pub(super) fn challenge_ack(&mut self, now: Instant) {
        if self.invalid_rate_limited(now) {
            return;
        }
        self.stats.challenge_acks += 1;
        self.ack.due = true;
    }

    /// The ACK owed to an unacceptable segment (RFC 9293 §3.10.7.4 first step). Pure
    /// ACKs are rate-limited (they may be part of an ACK loop); segments with data, SYN
    /// or FIN are always answered at once.
    fn send_dupack(&mut self, now: Instant, seg_len: u32, syn: bool) {
        if syn {
            self.challenge_ack(now);
        } else if seg_len > 0 || !self.invalid_rate_limited(now) {
            self.ack.due = true;
        }
    }

    fn invalid_rate_limited(&mut self, now: Instant) -> bool {
        let gap = self.settings.invalid_ratelimit;
        if let Some(last) = self.last_invalid_ack {
            if !gap.is_zero() && now.saturating_duration_since(last) < gap && now >= last {
                return true;
            }
        }
        self.last_invalid_ack = Some(now);
        false
    }

    /// RFC 9293 §3.10.7.4 fifth step for an acceptable ACK: SND.UNA, the send window
    /// (SND.WL1/WL2), SACK, RTT, congestion control, loss detection, FIN acknowledgment.
    /// `seg_len` is the segment's length in sequence space as it arrived (text dropped
    /// for a zero window still counts: such a segment is not a duplicate ACK).
    fn process_ack(&mut self, now: Instant, seg: &TcpRepr, seq: SeqNum, ack: SeqNum, seg_len: u32) {
        let prior_in_flight = self.in_flight();
        let acked = ack.since(self.snd.una);
        // RFC 9937 §6: RecoverFS should this ACK start recovery, and what it delivers.
        self.prr_ack_start();
        let prior_losses = self.stats.rack_losses;
        let old_wnd = self.snd.wnd;

        // SACK (RFC 2018 §4, RFC 6675 §5 Update()).
        let mut newly_sacked = 0;
        // Of what this ACK covers, the part already reported delivered (SACKed, or one
        // segment per duplicate ACK without SACK): cwnd grew for none of it then and
        // grows only for the rest now.
        let mut delivered_before = 0;
        let mut dsack = None;
        if acked > 0 {
            delivered_before = if self.opts.sack_ok {
                let una = self.snd.una;
                self.sb
                    .ranges()
                    .filter_map(|(a, b)| {
                        let (lo, hi) = (a.max(una), b.min(ack));
                        (hi > lo).then(|| hi.since(lo))
                    })
                    .fold(0u32, u32::saturating_add)
            } else {
                self.loss.dupacks.saturating_mul(self.mss())
            };
            self.sb.advance(ack);
        }
        if self.opts.sack_ok && !seg.options.sack_blocks().is_empty() {
            let mut blocks = [(SeqNum(0), SeqNum(0)); 4];
            let mut n = 0;
            for b in seg.options.sack_blocks() {
                blocks[n] = (SeqNum(b.left), SeqNum(b.right));
                n += 1;
            }
            let (una, nxt) = (ack.max(self.snd.una), self.snd.nxt);
            let sb = self.sb.get_mut(self.settings.sack_max_ranges as usize);
            let forgotten = sb.forgotten();
            let d = sb.update(una, nxt, &blocks[..n]);
            newly_sacked = d.newly_sacked;
            // The scoreboard is dropped when idle: the statistic sums what each forgot.
            self.stats.sack_ranges_forgotten += sb.forgotten() - forgotten;
            if d.dsack {
                self.stats.dsacks_in += 1;
                dsack = Some(blocks[0]);
            }
        }

        // The send window (RFC 9293 §3.10.7.4: only from newer segments).
        let wnd = u32::from(seg.window) << self.opts.snd_wscale;
        if self.snd.wl1 < seq || (self.snd.wl1 == seq && self.snd.wl2 <= ack) {
            self.snd.wnd = wnd;
            self.snd.wl1 = seq;
            self.snd.wl2 = ack;
            self.snd.max_wnd = self.snd.max_wnd.max(wnd);
            if wnd > 0 {
                self.timers.stop(Timer::Persist);
                self.retry.persist_backoff = 0;
            }
        }

        if acked > 0 {
            // A transmit opportunity outside the write: MSG_MORE's hold ends here.
            self.tx.end_more_hold();
            let delivered = acked.saturating_sub(delivered_before);
            self.on_new_ack(now, seg, ack, (acked, delivered), prior_in_flight);
        } else if ack == self.snd.una && self.snd.una != self.snd.nxt {
            // RFC 5681 §2 duplicate ACK (with SACK: one that SACKs new data, RFC 6675 §2).
            let is_dup = seg_len == 0
                && if self.opts.sack_ok {
                    newly_sacked > 0 || (seg.options.sack_blocks().is_empty() && wnd == old_wnd)
                } else {
                    wnd == old_wnd
                };
            if is_dup {
                self.loss.dupacks = self.loss.dupacks.saturating_add(1);
                self.stats.dup_acks_in += 1;
                self.on_dupack(now, prior_in_flight);
            }
        }
        // RACK-TLP (RFC 8985): delivery, reordering, loss detection, probe episode.
        self.rack_on_ack(now, ack, dsack, acked);
        // RFC 9937 §6.2: DeliveredData = change in SND.UNA + change in SACKed bytes.
        let delivered_data = acked
            .saturating_sub(delivered_before)
            .saturating_add(newly_sacked);
        let new_loss = if self.rack_loss_detection() {
            self.stats.rack_losses > prior_losses
        } else {
            self.sb
                .is_lost(self.snd.una, self.mss(), self.settings.dupthresh)
        };
        self.prr_on_ack(delivered_data, acked > 0, new_loss);
        // Idle again: RACK's records, the scoreboard and PRR's episode go.
        self.release_idle_state();

        // Our FIN acknowledged?
        if self.snd.fin_queued && self.snd.una == self.fin_seq() + 1 {
            match self.state {
                State::FinWait1 => {
                    self.state = State::FinWait2;
                    if self.app_closed {
                        self.timers
                            .set(Timer::State, now + self.settings.fin_wait_2);
                    }
                }
                State::Closing => self.enter_time_wait(now),
                State::LastAck => self.enter_closed(),
                _ => {}
            }
        }
    }

    /// Bytes in flight by the simple measure (sent, not acknowledged).
    pub(super) fn in_flight(&self) -> u32 {
        self.snd.nxt.since(self.snd.una)
    }

    /// The sequence number the FIN has (or will have) once queued.
    pub(super) fn fin_seq(&self) -> SeqNum {
        self.snd.buf_seq + self.snd.buf.len() as u32
    }

    /// An ACK that advanced SND.UNA.
    fn on_new_ack(
        &mut self,
        now: Instant,
        seg: &TcpRepr,
        ack: SeqNum,
        (acked, delivered): (u32, u32),
        prior_in_flight: u32,
    ) {
        // Release acknowledged data (the SYN and FIN occupy no buffer).
        let n = (ack.since(self.snd.buf_seq) as usize).min(self.snd.buf.len());
        self.snd.buf.drain(..n);
        self.snd.buf_seq += n as u32;
        self.snd.una = ack;
        if self.snd.up.is_some_and(|up| ack >= up) {
            self.snd.up = None;
        }
        self.stats.bytes_out += n as u64;
        self.take_rtt_sample(now, ack, seg);
        self.loss.rto_reduced = false;
        self.retry.keepalive_sent = 0;

        // RFC 6298 §5.2, §5.3: stop or restart the retransmission timer. What is still
        // outstanding was sent no earlier than now-ish: the unacknowledged-time clock of
        // R2 and the user timeout restarts (RFC 5482 counts from transmission).
        if self.snd.una == self.snd.nxt {
            self.timers.stop(Timer::Retransmit);
            self.retry.series_start = None;
        } else {
            self.retry.series_start = Some(now);
            self.timers.set(Timer::Retransmit, self.rtx_due(now));
        }

        let mss = self.mss();
        match self.loss.phase {
            Recovery::Fast => {
                if ack >= self.loss.recover {
                    // RFC 6582 §3.2 step 3 (full ACK) / RFC 6675 §5: recovery ends.
                    self.loss.phase = Recovery::Open;
                    self.loss.dupacks = 0;
                    self.cc.on_recovery_exit(now);
                } else {
                    // Partial ACK.
                    self.loss.high_rxt = self.loss.high_rxt.max(self.snd.una);
                    if !self.opts.sack_ok {
                        // RFC 6582 §3.2 step 4: retransmit the first unacknowledged
                        // segment, deflate by the amount acknowledged, add back one SMSS.
                        self.loss.rtx_head = true;
                        self.loss.reno_cwnd = self.loss.reno_cwnd.saturating_sub(acked);
                        if acked >= mss {
                            self.loss.reno_cwnd = self.loss.reno_cwnd.saturating_add(mss);
                        }
                        self.loss.dupacks = 0;
                    }
                }
            }
            Recovery::Loss => {
                if ack >= self.loss.recover {
                    self.loss.phase = Recovery::Open;
                }
                self.loss.high_rxt = self.loss.high_rxt.max(self.snd.una);
                self.loss.dupacks = 0;
                self.cc_on_ack(now, delivered, prior_in_flight, ack);
            }
            Recovery::Open => {
                self.loss.dupacks = 0;
                self.cc_on_ack(now, delivered, prior_in_flight, ack);
            }
        }
        self.loss.high_rxt = self.loss.high_rxt.max(self.snd.una);

        if self.send_space() >= self.settings.sndlowat as usize && n > 0 {
            self.events.insert(Events::WRITABLE);
            self.info_state.snd_nospace = false;
        }
    }

    /// `acked`: bytes this ACK newly delivered (not already SACKed or counted by a
    /// duplicate ACK).
    fn cc_on_ack(&mut self, now: Instant, acked: u32, prior_in_flight: u32, ack: SeqNum) {
        let cwnd = self.cc.cwnd();
        let mss = self.mss();
        let cwnd_limited =
            self.tx
                .take_cwnd_limited(prior_in_flight, mss, cwnd, self.cc.in_slow_start());
        let sample = AckSample {
            now,
            acked,
            prior_in_flight,
            rtt: self.rtt.latest(),
            srtt: self.rtt.srtt(),
            min_rtt: self.rtt.min_rtt(),
            cwnd_limited,
            ack_seq: ack,
            snd_nxt: self.snd.nxt,
        };
        self.cc.on_ack(&sample);
    }

    /// RTT measurement (RFC 6298 §3 Karn; RFC 7323 §4 RTTM with timestamps).
    fn take_rtt_sample(&mut self, now: Instant, ack: SeqNum, seg: &TcpRepr) {
        if let Some((end, sent)) = self.rtt.timed {
            if ack >= end {
                self.rtt.timed = None;
                self.rtt.sample(now.saturating_duration_since(sent));
                self.stats.rtt_samples += 1;
                return;
            }
        }
        // Without a timed segment (e.g. after retransmissions, where Karn forbids
        // sequence-based samples) take the echoed timestamp (RFC 7323 §4.1). After a
        // timeout, an echo of a timestamp sent before it is not taken: a lost ACK answered
        // later (its duplicate echoes the old TS.Recent) would measure the timeout itself,
        // and feeding that into the RTO inflates the next timeout without bound.
        let need = self.loss.phase != Recovery::Open || self.rtt.backoff() > 0;
        if self.opts.ts_ok && self.rtt.timed.is_none() && need {
            if let Some((_, tsecr)) = seg.options.timestamps {
                let fresh = self
                    .rtt
                    .ts_floor
                    .is_none_or(|floor| (tsecr.wrapping_sub(floor) as i32) >= 0);
                if tsecr != 0 && fresh {
                    let d = self.ts_now(now).wrapping_sub(tsecr);
                    if (d as i32) >= 0 {
                        self.rtt.sample(Duration::from_millis(u64::from(d)));
                        self.stats.rtt_samples += 1;
                    }
                }
            }
        }
    }

    /// A duplicate ACK: limited transmit, loss-recovery entry, NewReno inflation.
    fn on_dupack(&mut self, now: Instant, prior_in_flight: u32) {
        let mss = self.mss();
        match self.loss.phase {
            Recovery::Open => {
                if self.rack_loss_detection() {
                    // RACK (RFC 8985, `rack.rs`) decides what is lost instead.
                    return;
                }
                let lost_head = self.opts.sack_ok
                    && self.sb.is_lost(self.snd.una, mss, self.settings.dupthresh);
                // RFC 6675 §5 / RFC 6582 §3.2 step 1: no new recovery until the previous
                // recovery point was acknowledged.
                if (self.loss.dupacks >= self.settings.dupthresh || lost_head)
                    && self.snd.una >= self.loss.recover
                {
                    self.enter_fast_recovery(now, prior_in_flight);
                }
                // Otherwise RFC 3042 limited transmit happens in output.
            }
            Recovery::Fast if !self.opts.sack_ok => {
                // RFC 6582 §3.2 step 3: inflate by one SMSS per further duplicate ACK.
                self.loss.reno_cwnd = self.loss.reno_cwnd.saturating_add(mss);
            }
            _ => {}
        }
    }

    /// RFC 6675 §5 steps 4.1-4.3 / RFC 6582 §3.2 step 2: fast retransmit.
    pub(super) fn enter_fast_recovery(&mut self, now: Instant, prior_in_flight: u32) {
        let mss = self.mss();
        self.loss.phase = Recovery::Fast;
        self.loss.recover = self.snd.nxt;
        self.loss.high_rxt = self.snd.una;
        self.cc.on_congestion_event(now, prior_in_flight);
        self.stats.recoveries += 1;
        self.stats.fast_retransmits += 1;
        self.loss.rtx_head = true;
        self.prr_init();
        if !self.opts.sack_ok {
            self.loss.reno_cwnd = self
                .cc
                .ssthresh()
                .saturating_add(self.settings.dupthresh.saturating_mul(mss));
        }
    }

    /// RFC 9293 §3.10.7.4 seventh and eighth steps: segment text and FIN, for
    /// ESTABLISHED, FIN-WAIT-1 and FIN-WAIT-2.
    /// `pieces`: the wire segments `payload` stands for (see [`Pieces`]).
    /// In-order data `n` bytes from `seq`, starting `from` bytes into a coalesced segment
    /// of `pieces`: records as owed the ACKs its pieces before the last would have drawn
    /// arriving one by one (RFC 9293 §3.8.6.3, RFC 5681 §4.2: while quick ACKs last, one
    /// per piece; after that, one whenever more than one MSS is unacknowledged, i.e. every
    /// second full-sized piece), and leaves in `ack.unacked_bytes` what the last ACK point
    /// leaves unacknowledged, so the ACK decision for the last piece is the one it would
    /// have had alone. The owed ACKs leave first (`poll_transmit`), in order.
    fn owe_in_order_acks(&mut self, seq: SeqNum, from: u32, n: u32, pieces: Pieces) {
        let size = pieces.size.max(1);
        let end = seq + n;
        // Piece boundaries after `seq` (pieces start at multiples of `size` from the
        // segment's first byte); each one is where a piece would have been taken alone.
        let mut at = seq + (size - from % size);
        let mut prev = seq;
        let mut acc = self.ack.unacked_bytes;
        let mut quick = self.ack.quickack;
        while at < end && self.ack.owed.len() < MAX_OWED_ACKS {
            acc = acc.saturating_add(at.since(prev));
            prev = at;
            if quick > 0 || acc > self.opts.rcv_mss {
                quick = quick.saturating_sub(1);
                self.ack.owed.push_back(at);
                acc = 0;
            }
            at += size;
        }
        self.ack.unacked_bytes = acc.saturating_add(end.since(prev));
    }

    /// Owes `k` more ACKs of RCV.NXT as it is now (duplicate ACKs), within the bound.
    fn owe_duplicate_acks(&mut self, k: u32) {
        let room = MAX_OWED_ACKS.saturating_sub(self.ack.owed.len());
        for _ in 0..(k as usize).min(room) {
            self.ack.owed.push_back(self.rcv.nxt);
        }
    }

    pub(super) fn process_text(
        &mut self,
        now: Instant,
        seq: SeqNum,
        payload: &[u8],
        fin: bool,
        pieces: Pieces,
    ) {
        if payload.is_empty() && !fin {
            return;
        }
        if self.app_closed && !payload.is_empty() {
            // Data for a connection nobody will read: reset it (as Linux does).
            let end = seq + payload.len() as u32;
            if end > self.rcv.nxt {
                self.abort(now);
                return;
            }
        }
        let seg_seq = seq;
        let mut seq = seq;
        let mut data = payload;
        let mut fin = fin;
        // Trim what we already have (RFC 9293: "trim ... to the window"). What lies below
        // RCV.NXT is the segment's first duplicate run: its D-SACK (RFC 2883 §4.2).
        if seq < self.rcv.nxt {
            let skip = self.rcv.nxt.since(seq) as usize;
            if skip >= data.len() {
                if !data.is_empty() && self.opts.sack_ok {
                    self.ack.dsack = Some((seq, seq + data.len() as u32));
                    self.stats.dup_segs_in += u64::from(pieces.n);
                }
                if skip > data.len() {
                    // Even the FIN (if any) is old.
                    fin = false;
                }
                data = &[];
            } else {
                if self.opts.sack_ok {
                    self.ack.dsack = Some((seq, self.rcv.nxt));
                }
                // Pieces wholly below RCV.NXT would each have been an unacceptable
                // duplicate, answered at once (RFC 9293 §3.10.7.4 first step).
                let dups = pieces.within(skip as u32);
                if dups > 0 {
                    if self.opts.sack_ok {
                        self.stats.dup_segs_in += u64::from(dups);
                    }
                    // Each whole duplicate piece was answered at once: those answers
                    // are owed ahead of what the new data after them draws.
                    self.owe_duplicate_acks(dups);
                    self.ack.due = true;
                }
                data = &data[skip..];
            }
            seq = self.rcv.nxt;
        }
        // Trim what lies beyond the advertised right edge.
        let mut beyond = 0u32;
        let right = self.rcv.adv.max(self.rcv.nxt);
        let room = right.since(seq) as usize;
        if data.len() > room {
            data = &data[..room];
            fin = false;
            // A piece wholly beyond the right edge would have been unacceptable and
            // answered at once (RFC 9293 §3.10.7.4 first step); all but one of those
            // answers are owed after what the data in the window draws.
            let last_start = u64::from(pieces.n - 1) * u64::from(pieces.size);
            let edge = u64::from(right.since(seg_seq));
            if pieces.n > 1 && last_start >= edge {
                self.ack.due = true;
                let first_beyond = edge.div_ceil(u64::from(pieces.size.max(1)));
                beyond = (u64::from(pieces.n) - first_beyond.min(u64::from(pieces.n))) as u32;
            }
        }
        if seq == self.rcv.nxt {
            if !data.is_empty() {
                if self.opts.sack_ok && seq == seg_seq && !self.rcv.ooo.is_empty() {
                    // RFC 2883 §4, §4.2: in-order data that overlaps data held out of
                    // order is a duplicate there; its first duplicate run is reported,
                    // though the cumulative ACK now covers it (a segment that began
                    // below RCV.NXT has reported its first run above).
                    let off = self.rcv.off;
                    let run = self.rcv.ooo.first_overlap(off, off + data.len() as u64);
                    self.note_dsack(seq, off, run);
                }
                if now.saturating_duration_since(self.rcv.last_data) > self.rtt.rto() {
                    // Quick ACKs after idle, as Linux.
                    self.ack.quickack = QUICKACK_SEGMENTS;
                }
                self.rcv.last_data = now;
                self.rcv.buf.extend(data);
                let n = data.len() as u32;
                self.rcv.nxt += n;
                self.rcv.off += u64::from(n);
                self.stats.bytes_in += u64::from(n);
                // The peer's segment size: a merged segment's pieces, never its length.
                let piece = if pieces.n > 1 { pieces.size } else { n };
                self.opts.rcv_mss = self.opts.rcv_mss.max(piece.min(self.opts.adv_mss));
                if pieces.n > 1 && !self.settings.gro_stretch_acks {
                    // The ACKs the pieces before the last would have drawn, owed to the
                    // peer; what the last piece draws is decided below as for any segment.
                    self.owe_in_order_acks(seq, seq.since(seg_seq), n, pieces);
                } else {
                    self.ack.unacked_bytes = self.ack.unacked_bytes.saturating_add(n);
                }
                // In-order data with data held out of order fills all or part of the gap
                // before it (RFC 5681 §4.2: ACK at once), also when it covers the held
                // data, which is then dropped rather than moved (its D-SACK is above).
                let filled = !self.rcv.ooo.is_empty();
                if filled {
                    let moved = self.rcv.ooo.drain_into(self.rcv.off, &mut self.rcv.buf) as u32;
                    if moved > 0 {
                        self.rcv.nxt += moved;
                        self.rcv.off += u64::from(moved);
                        self.stats.bytes_in += u64::from(moved);
                    }
                }
                if self.rcv.ooo.fin() == Some(self.rcv.off) {
                    fin = true;
                    let limits = self.ooo_limits();
                    self.rcv.ooo.set_fin(None, limits);
                }
                // Nothing held out of order any more: the store goes.
                self.rcv.ooo.release_if_idle(self.rcv.off);
                self.events.insert(Events::READABLE);
                // RFC 5681 §4.2 / RFC 9293 §3.8.6.3: ACK at least every second full-sized
                // segment, at once when a hole is filled, within the delayed-ACK timer
                // otherwise; quick ACKs at connection start and after idle. "Second
                // full-sized segment" is counted in bytes, as Linux does: more than one
                // MSS unacknowledged is acknowledged at once, so a full segment followed
                // by a partial one (a sender whose buffer is under two segments, e.g. on
                // loopback with its 64 KB MSS) does not wait for the delayed-ACK timer.
                let ack_before = core::mem::take(&mut self.ack.due);
                if filled {
                    self.ack.due = true;
                } else if self.ack.quickack > 0 {
                    // Each piece that brought new data uses one quick ACK, as it would
                    // have arriving alone.
                    let from = seq.since(seg_seq);
                    let used = pieces.overlapping(from, from + n);
                    self.ack.quickack = self.ack.quickack.saturating_sub(used);
                    self.ack.due = true;
                } else if self.ack.unacked_bytes > self.opts.rcv_mss {
                    self.ack.due = true;
                } else if !self.timers.is_armed(Timer::DelayedAck) {
                    self.timers
                        .set(Timer::DelayedAck, now + self.settings.delack);
                }
                if beyond > 0 {
                    // The pieces beyond the window each drew an ACK of what the window
                    // took; the last of them is the ACK sent now, unless the last piece
                    // in the window already drew it.
                    let owed = if self.ack.due { beyond } else { beyond - 1 };
                    self.owe_duplicate_acks(owed);
                }
                self.ack.due |= ack_before;
            }
        } else {
            // Out of order: hold it and send a duplicate ACK at once (RFC 5681 §4.2).
            let off = self.rcv.off + u64::from(seq.since(self.rcv.nxt));
            self.stats.ooo_segs_in += u64::from(pieces.n);
            if pieces.n > 1 && !data.is_empty() {
                // Each piece would have drawn its own duplicate ACK (RFC 5681 §4.2): the
                // peer counts them (DupThresh), so the pieces before the last are owed.
                let from = seq.since(seg_seq);
                let k = pieces.overlapping(from, from + data.len() as u32);
                self.owe_duplicate_acks(k.saturating_sub(1));
            }
            if !data.is_empty() {
                // RFC 2883 §4: the first run of the segment held already is its D-SACK
                // (before the insertion merges it away).
                let dup = self.rcv.ooo.first_overlap(off, off + data.len() as u64);
                let limits = self.ooo_limits();
                match self.rcv.ooo.insert(off, data, limits) {
                    InsertOutcome::Stored { .. } => {
                        self.note_sack_recent(off);
                        self.note_dsack(seq, off, dup);
                    }
                    InsertOutcome::Duplicate => {
                        // RFC 2018 §4: the block holding the segment is reported first
                        // after the D-SACK, which is RFC 2883 §4 rule (4)'s second block.
                        self.note_sack_recent(off);
                        if self.opts.sack_ok {
                            self.ack.dsack = Some((seq, seq + data.len() as u32));
                            self.stats.dup_segs_in += 1;
                        }
                    }
                    InsertOutcome::Full => {
                        self.stats.rcv_drops_full += 1;
                        fin = false;
                    }
                }
            }
            if fin {
                let limits = self.ooo_limits();
                self.rcv.ooo.set_fin(Some(off + data.len() as u64), limits);
            }
            self.ack.due = true;
            return;
        }
        if fin {
            self.rcv.nxt += 1;
            self.rcv.fin = true;
            self.rcv.ooo.clear();
            let limits = self.ooo_limits();
            self.rcv.ooo.set_fin(None, limits);
            self.rcv.ooo.release_if_idle(self.rcv.off);
            self.ack.due = true;
            self.timers.stop(Timer::DelayedAck);
            self.events.insert(Events::READABLE);
            match self.state {
                State::Established => self.state = State::CloseWait,
                State::FinWait1 => {
                    if self.snd.fin_queued && self.snd.una == self.fin_seq() + 1 {
                        self.enter_time_wait(now);
                    } else {
                        self.state = State::Closing;
                    }
                }
                State::FinWait2 => self.enter_time_wait(now),
                _ => {}
            }
        }
    }

    /// Records as the D-SACK (RFC 2883 §4) `run`, the stream offsets of the first
    /// duplicate run of data at `seq` (stream offset `off`), if any (with SACK only).
    fn note_dsack(&mut self, seq: SeqNum, off: u64, run: Option<(u64, u64)>) {
        if let (true, Some((a, b))) = (self.opts.sack_ok, run) {
            self.ack.dsack = Some((seq + (a - off) as u32, seq + (b - off) as u32));
        }
    }

    /// Remembers the most recently received out-of-order block (RFC 2018 §4: the first
    /// SACK block reports it; then the most recently reported others).
    fn note_sack_recent(&mut self, off: u64) {
        let mut next = [Some(off), None, None, None];
        let mut k = 1;
        for o in self.rcv.ooo.recent().into_iter().flatten() {
            if k == next.len() {
                break;
            }
            let same = match (
                self.rcv.ooo.range_containing(o),
                self.rcv.ooo.range_containing(off),
            ) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            };
            if !same {
                next[k] = Some(o);
                k += 1;
            }
        }
        let limits = self.ooo_limits();
        self.rcv.ooo.set_recent(next, limits);
    }

    /// TIME-WAIT (RFC 9293 §3.6): wait 2 MSL (`tcp_time_wait_interval`), answering only
    /// retransmitted FINs.
    pub(super) fn enter_time_wait(&mut self, now: Instant) {
        self.state = State::TimeWait;
        self.timers.stop(Timer::Retransmit);
        self.timers.stop(Timer::Persist);
        self.timers.stop(Timer::Keepalive);
        self.timers.stop(Timer::Cork);
        self.retry.probe_pending = false;
        self.timers.set(Timer::State, now + self.settings.time_wait);
        self.events.insert(Events::READABLE);
    }
}
