//! Segment generation: what to send next, and the segment itself.
//!
//! [`Tcb::poll_transmit`] picks, in order: a pending RST; the SYN or SYN,ACK; a
//! retransmission (RFC 6675 §5 NextSeg() rules 1 and 3, RFC 6582 partial-ACK
//! retransmission, RFC 6298 §5 after a timeout); new data (NextSeg() rule 2) within the
//! peer's window (RFC 9293 §3.8.6), the congestion window (RFC 5681, RFC 3042 limited
//! transmit) and the small-segment rules (sender SWS avoidance RFC 9293 §3.8.6.2.1,
//! Nagle RFC 896 with `tcp_naglim_def`, TCP_CORK); a window probe (RFC 9293 §3.8.6.1) or
//! keepalive (§3.8.4); and finally a pure ACK (delayed-ACK rules in `input.rs`).
//!
//! Every segment carries the current ACK, the receive window (receiver SWS avoidance,
//! RFC 9293 §3.8.6.2.2; the right edge never moves left), timestamps (RFC 7323 §3) and,
//! with out-of-order data held, SACK blocks (RFC 2018 §4, D-SACK first, RFC 2883).
//! A FIN goes out as soon as the application closes: on the last data segment or alone,
//! never held by Nagle, cork or the window.

use super::cc::CongestionControl;
use super::recovery::Recovery;
use super::seq::SeqNum;
use super::tcb::{Outgoing, Tcb, MAX_WINDOW};
use super::timers::Timer;
use super::State;
use crate::time::Instant;
use crate::wire::{SackBlock, TcpFlags};

/// What kind of segment a [`Plan`] describes: it decides the bookkeeping `build` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// New data from SND.NXT (or a bare FIN): advances SND.NXT, is timed, arms the
    /// retransmission timer.
    Data,
    /// Data (or the FIN) sent before: Karn's rule, RACK's retransmission record.
    Retransmit,
    /// A pure ACK.
    Ack,
    /// A window probe or keepalive (an old sequence number, no data).
    Probe,
}

/// The segment a planner decided to send next, for [`Tcb::build`] to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Plan {
    /// The sequence number of its first octet.
    pub(super) seq: SeqNum,
    /// Payload bytes, from the send buffer at `seq` (the FIN not counted).
    pub(super) len: u32,
    /// The FIN follows the payload.
    pub(super) fin: bool,
    pub(super) kind: Kind,
    /// 0: one ordinary segment. Else a large segment (LSO) of `len` bytes, to be cut
    /// into pieces of this many payload bytes (one MSS; see [`Tcb::plan_large`]).
    pub(super) piece: u32,
}

impl Plan {
    /// One ordinary segment.
    pub(super) fn segment(kind: Kind, seq: SeqNum, len: u32, fin: bool) -> Plan {
        Plan {
            seq,
            len,
            fin,
            kind,
            piece: 0,
        }
    }

    /// A pure ACK at `seq`.
    fn ack(seq: SeqNum) -> Plan {
        Plan::segment(Kind::Ack, seq, 0, false)
    }
}

/// Transmit-side state of one connection: what shapes the segments `poll_transmit`
/// cuts (Nagle, cork, MSG_MORE, LSO, TCP Small Queues) and the bookkeeping of its
/// bursts and of cwnd validation. Its fields are private to this file; the rest of the
/// `Tcb` goes through the methods below and the transmit-shaping calls at the end of
/// this file (`set_lso_max`, `set_tx_quota`, `set_nodelay`, `set_more`, `set_cork`).
#[derive(Debug)]
pub(super) struct Transmit {
    /// When new data was last sent (retransmissions do not count).
    last_data_sent: Instant,
    /// The current transmit burst (see `build`): its instant and the new-data segments
    /// sent in it so far.
    push_burst: (Instant, u32),
    /// The largest payload of one large segment (LSO); 0 or at most one MSS: off.
    lso_max: u32,
    /// TCP Small Queues: new-data bytes the owner will still take (None: no limit).
    quota: Option<u32>,
    /// New data was held back by `quota` since the owner last asked.
    quota_blocked: bool,
    /// Output was blocked by cwnd since the last ACK (cwnd validation).
    cwnd_blocked: bool,
    /// The largest flight since the round ending at the sequence number beside it was
    /// sent (cwnd validation in slow start, see `cc_on_ack`).
    flight_peak: (u32, SeqNum),
    /// An explicit push (TCP_NODELAY set): the data buffered now leaves despite the cork.
    push_once: bool,
    /// MSG_MORE on the last write: its partial segment is held (see [`Tcb::set_more`]).
    more: bool,
    /// The end of data written with MSG_MORE: the segment ending there carries no PSH.
    nopush_end: Option<SeqNum>,
}

impl Transmit {
    pub(super) fn new(now: Instant, iss: SeqNum) -> Transmit {
        Transmit {
            last_data_sent: now,
            push_burst: (now, 0),
            // Off until the owner, which knows whether its device path takes large
            // segments, turns it on (`set_lso_max`, usually with `settings.lso_max`).
            lso_max: 0,
            quota: None,
            quota_blocked: false,
            cwnd_blocked: false,
            flight_peak: (0, iss),
            push_once: false,
            more: false,
            nopush_end: None,
        }
    }

    /// When new data was last sent.
    pub(super) fn last_data_sent(&self) -> Instant {
        self.last_data_sent
    }

    /// New data left by another path than a segment (a fused write).
    pub(super) fn note_data_sent(&mut self, now: Instant) {
        self.last_data_sent = now;
    }

    /// Whether the congestion window limited output since the last ACK, for cwnd
    /// validation (RFC 7661 §4.1 idea, as Linux): output was blocked by it, the flight
    /// before this ACK nearly filled it, or in slow start it is below twice the largest
    /// flight of the current round (an application that sent 5 segments of a 10-segment
    /// window does not earn a larger one). Starts the next ACK's record.
    pub(super) fn take_cwnd_limited(
        &mut self,
        prior_in_flight: u32,
        mss: u32,
        cwnd: u32,
        in_slow_start: bool,
    ) -> bool {
        let limited = self.cwnd_blocked
            || prior_in_flight.saturating_add(2 * mss) >= cwnd
            || (in_slow_start && self.flight_peak.0.saturating_mul(2) > cwnd);
        self.cwnd_blocked = false;
        limited
    }

    /// Forgets that cwnd blocked output (the recovery variables are being reset).
    pub(super) fn forget_cwnd_blocked(&mut self) {
        self.cwnd_blocked = false;
    }

    /// The writes are marked MSG_MORE: their partial segment is held.
    pub(super) fn more(&self) -> bool {
        self.more
    }

    /// A transmit opportunity outside the write (new data acknowledged): MSG_MORE's
    /// hold ends.
    pub(super) fn end_more_hold(&mut self) {
        self.more = false;
    }

    /// A write ended at sequence `end`: under MSG_MORE the segment ending there carries
    /// no PSH.
    pub(super) fn note_write_end(&mut self, end: SeqNum) {
        self.nopush_end = self.more.then_some(end);
    }

    /// The cork limit passed: the held segment goes out pushed.
    pub(super) fn cork_expired(&mut self) {
        self.nopush_end = None;
    }
}

impl Tcb {
    /// The next segment to send, if any. Call until it returns `None` after every input.
    /// While fused only a RST (abort) can come out.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Outgoing<'_>> {
        // A RST answering an unacceptable segment (<SEQ=SEG.ACK><CTL=RST>).
        if let Some(seq) = self.rst_reply.take() {
            return Some(self.build_rst(seq, None));
        }
        if self.rst_pending {
            self.rst_pending = false;
            let ts = self
                .opts
                .ts_ok
                .then(|| (self.ts_now(now), self.opts.ts_recent));
            self.stats.rsts_out += 1;
            let seq = self.snd.nxt;
            let ack = self.rcv.nxt;
            self.enter_closed();
            self.events.insert(super::Events::ERROR);
            let mut rst = self.build_rst(seq, Some(ack));
            if ts.is_some() {
                // RFC 7323 §3.2 allows TSopt on a RST; Linux sends it on its aborts.
                rst.repr.options.timestamps = ts;
            }
            return Some(rst);
        }
        if self.fusion.is_fused() {
            // Fused (see `fusion.rs`): nothing but a RST ever leaves; a queued FIN waits
            // for the unfuse.
            return None;
        }
        match self.state {
            State::Closed | State::Listen => {
                self.chrono_update(now);
                return None;
            }
            State::SynSent | State::SynReceived => {
                if self.snd.nxt == self.snd.iss || self.retry.syn_due {
                    return Some(self.build_syn(now));
                }
                if self.state == State::SynSent {
                    return None;
                }
                // SYN-RECEIVED: only ACKs (e.g. a challenge ACK) besides the SYN,ACK.
                if self.ack.due {
                    return Some(self.build(now, Plan::ack(self.snd.nxt)));
                }
                return None;
            }
            State::TimeWait => {
                if self.ack.due {
                    return Some(self.build(now, Plan::ack(self.snd.nxt)));
                }
                self.chrono_update(now);
                return None;
            }
            _ => {}
        }
        // The ACKs a coalesced segment's pieces would have drawn (`handle_segment_gro`), in
        // order, before anything that acknowledges more.
        if let Some(point) = self.ack.owed.pop_front() {
            return Some(self.build_owed_ack(now, point));
        }
        // RFC 8985 §7.3: a tail loss probe (`rack.rs`).
        if let Some(plan) = self.plan_tlp(now) {
            return Some(self.build(now, plan));
        }
        if let Some(plan) = self.plan_retransmission(false) {
            return Some(self.build(now, plan));
        }
        if let Some(plan) = self.plan_new_data(now) {
            return Some(self.build(now, plan));
        }
        if let Some(plan) = self.plan_retransmission(true) {
            return Some(self.build(now, plan));
        }
        if self.retry.probe_pending {
            self.retry.probe_pending = false;
            // Linux-style probe: an old sequence number with no data, which the peer must
            // answer with an ACK carrying its current window.
            let seq = self.snd.una - 1;
            return Some(self.build(now, Plan::segment(Kind::Probe, seq, 0, false)));
        }
        if self.ack.due || self.ack.dsack.is_some() {
            return Some(self.build(now, Plan::ack(self.snd.nxt)));
        }
        // Nothing more to send: the transmit burst is over.
        self.tx.push_burst.1 = 0;
        self.chrono_update(now);
        None
    }

    /// Payload bytes the next segment may carry: the MSS less the options it will carry
    /// beyond timestamps, i.e. SACK blocks (RFC 6691: the MSS excludes all options).
    fn seg_max(&self) -> u32 {
        let mss = self.mss();
        if !self.opts.sack_ok || (self.rcv.ooo.is_empty() && self.ack.dsack.is_none()) {
            return mss;
        }
        let cap = if self.opts.ts_ok { 3 } else { 4 };
        let n = (self.rcv.ooo.ranges().take(cap).count() + usize::from(self.ack.dsack.is_some()))
            .min(cap);
        mss.saturating_sub(4 + 8 * n as u32).max(1)
    }

    /// The end of the send buffer in sequence space.
    fn data_end(&self) -> SeqNum {
        self.snd.buf_seq + self.snd.buf.len() as u32
    }

    fn fin_sent(&self) -> bool {
        self.snd.fin_queued && self.snd.nxt > self.fin_seq()
    }

    /// Bytes that may still be sent under the congestion window (RFC 5681 §3, RFC 6675
    /// §5 step C, RFC 6582 with window inflation, RFC 3042 limited transmit).
    fn cwnd_allowance(&self) -> u32 {
        let mss = self.mss();
        match self.loss.phase {
            Recovery::Fast if !self.opts.sack_ok => {
                self.loss.reno_cwnd.saturating_sub(self.in_flight())
            }
            // RFC 9937 (`prr.rs`): PRR paces SACK fast recovery.
            Recovery::Fast => self.prr_allowance().unwrap_or(0),
            _ => {
                let mut cwnd = self.cc.cwnd();
                if self.loss.phase == Recovery::Open && !self.opts.sack_ok && self.loss.dupacks > 0
                {
                    // RFC 3042: one new segment per duplicate ACK below DupThresh.
                    cwnd = cwnd.saturating_add(self.loss.dupacks.min(2) * mss);
                }
                cwnd.saturating_sub(self.pipe())
            }
        }
    }

    /// RFC 6675 §4 SetPipe(): the sender's estimate of bytes in the network.
    pub(super) fn pipe(&self) -> u32 {
        let mss = self.mss();
        match self.loss.phase {
            Recovery::Open => self.in_flight().saturating_sub(self.sb.sacked_bytes()),
            // RACK's marks (RFC 8985, `rack.rs`).
            Recovery::Fast if self.rack_loss_detection() => self.rack.pipe(),
            Recovery::Fast => self.sb.pipe(
                self.snd.una,
                self.snd.nxt,
                self.loss.high_rxt,
                mss,
                self.settings.dupthresh,
            ),
            Recovery::Loss => {
                // After an RTO everything below the recovery point is presumed lost: only
                // what was retransmitted since counts, plus what was sent after it.
                let rtx_end = self.loss.high_rxt.min(self.loss.recover).max(self.snd.una);
                let retransmitted =
                    rtx_end.since(self.snd.una) - self.sacked_between(self.snd.una, rtx_end);
                let above = if self.snd.nxt > self.loss.recover {
                    self.snd.nxt.since(self.loss.recover)
                        - self.sacked_between(self.loss.recover, self.snd.nxt)
                } else {
                    0
                };
                retransmitted.saturating_add(above)
            }
        }
    }

    fn sacked_between(&self, lo: SeqNum, hi: SeqNum) -> u32 {
        let mut n = 0u32;
        for (s, e) in self.sb.ranges() {
            let a = s.max(lo);
            let b = e.min(hi);
            if b > a {
                n = n.saturating_add(b.since(a));
            }
        }
        n.min(hi.since(lo))
    }

    /// A retransmission to send now (one ordinary segment). `rule3` selects RFC 6675
    /// NextSeg() rule 3 (unSACKed data that is not yet deemed lost), used only when no new
    /// data could be sent.
    fn plan_retransmission(&mut self, rule3: bool) -> Option<Plan> {
        if self.snd.una == self.snd.nxt {
            self.loss.rtx_head = false;
            return None;
        }
        let mss = self.seg_max();
        let (seq, span) = if self.loss.rtx_head && !rule3 {
            // Fast retransmit, NewReno partial ACK, RTO, or path MTU: the first
            // unacknowledged segment, regardless of the congestion window.
            self.loss.rtx_head = false;
            let s = self.snd.una;
            (s, self.snd.nxt.since(s).min(mss))
        } else {
            let allowance = self.cwnd_allowance();
            let cand = match self.loss.phase {
                Recovery::Open => None,
                Recovery::Fast if !self.opts.sack_ok => None,
                // RACK (RFC 8985 §6.2) marks what is lost; no RFC 6675 rule 3.
                Recovery::Fast if self.rack_loss_detection() => {
                    if rule3 {
                        None
                    } else {
                        self.rack.next_lost(mss)
                    }
                }
                Recovery::Fast => {
                    if rule3 {
                        self.sb.next_unsacked(self.snd.una, self.loss.high_rxt, mss)
                    } else {
                        self.sb.next_lost(
                            self.snd.una,
                            self.loss.high_rxt,
                            mss,
                            self.settings.dupthresh,
                        )
                    }
                }
                Recovery::Loss if rule3 => None,
                Recovery::Loss => self
                    .rack_active()
                    .then(|| self.rack.next_lost(mss))
                    .flatten()
                    .or_else(|| {
                        self.next_unsacked_below(
                            self.loss.high_rxt.max(self.snd.una),
                            self.loss.recover,
                            mss,
                        )
                    }),
            }?;
            if allowance < cand.1.min(mss) {
                self.tx.cwnd_blocked = true;
                return None;
            }
            cand
        };
        // A hole smaller than `tcp_mss_min` (a peer that SACKs all but a byte or two of
        // every segment, the "SACK comb" of CVE-2019-11478) goes out with the SACKed
        // octets after it, up to `tcp_mss_min`: one runt per hole would let the peer
        // choose the segment size. RFC 6675 §4 NextSeg() sends "up to SMSS" from the
        // hole; re-sending SACKed octets is harmless (SACK is advisory, RFC 2018 §8).
        let span = if span > 0 {
            span.max(self.settings.mss_min.min(mss).min(self.snd.nxt.since(seq)))
        } else {
            span
        };
        if span == 0 {
            return None;
        }
        let end = seq + span;
        let data_end = self.data_end();
        let data_len = if seq < data_end {
            data_end.since(seq).min(span)
        } else {
            0
        };
        let fin = self.fin_sent() && end > self.fin_seq();
        if data_len == 0 && !fin {
            return None;
        }
        self.loss.high_rxt = self.loss.high_rxt.max(seq + data_len + u32::from(fin));
        // Karn: a retransmitted range cannot be timed.
        if let Some((tend, _)) = self.rtt.timed {
            if tend > seq {
                self.rtt.timed = None;
            }
        }
        self.stats.retrans_segs += 1;
        self.stats.retrans_bytes += u64::from(data_len);
        Some(Plan::segment(Kind::Retransmit, seq, data_len, fin))
    }

    /// The first unSACKed range in [from, to), up to one MSS.
    fn next_unsacked_below(&self, from: SeqNum, to: SeqNum, mss: u32) -> Option<(SeqNum, u32)> {
        let mut s = from;
        if s >= to {
            return None;
        }
        for (a, b) in self.sb.ranges() {
            if b <= s {
                continue;
            }
            if a <= s {
                s = b;
                if s >= to {
                    return None;
                }
                continue;
            }
            // Hole [s, a).
            let end = a.min(to);
            return Some((s, end.since(s).min(mss)));
        }
        Some((s, to.since(s).min(mss)))
    }

    /// New data to send from SND.NXT: one ordinary segment, or a large one (LSO, see
    /// [`Tcb::plan_large`]).
    fn plan_new_data(&mut self, now: Instant) -> Option<Plan> {
        self.info_state.rwnd_blocked = false;
        let data_end = self.data_end();
        let unsent = data_end.since(self.snd.nxt);
        let fin_pending = self.snd.fin_queued && !self.fin_sent();
        if unsent == 0 && !fin_pending {
            return None;
        }
        let mss = self.seg_max();
        // After an RTO, retransmissions come first (RFC 6675 §5.1): new data waits while
        // anything unSACKed below the recovery point is still to be resent.
        if self.loss.phase == Recovery::Loss
            && self
                .next_unsacked_below(self.loss.high_rxt.max(self.snd.una), self.loss.recover, mss)
                .is_some()
        {
            return None;
        }
        let wnd_right = self.snd.una + self.snd.wnd;
        let wnd_avail = wnd_right.since(self.snd.nxt);
        let cwnd_avail = self.cwnd_allowance();
        let nothing_in_flight = self.snd.una == self.snd.nxt;
        if unsent == 0 && wnd_avail == 0 {
            // A bare FIN needs one octet of window, like data (as Linux): with the window
            // closed it waits, and the persist timer probes (RFC 9293 §3.8.6.1) instead of
            // the retransmission timer counting a peer that answers as unresponsive.
            if nothing_in_flight && !self.timers.is_armed(Timer::Persist) {
                self.arm_persist(now);
            }
            self.info_state.rwnd_blocked = true;
            return None;
        }
        let force = self.retry.probe_pending && self.snd.wnd > 0;
        let len = unsent.min(mss).min(wnd_avail).min(cwnd_avail);

        if len < unsent.min(mss) {
            if cwnd_avail < wnd_avail {
                // Congestion-limited: wait for ACKs rather than send a runt.
                self.tx.cwnd_blocked = true;
                return None;
            }
            // Limited by the peer's window: sender SWS avoidance (RFC 9293 §3.8.6.2.1)
            // sends only a full segment or at least half the largest window offered;
            // the persist timer overrides it (and probes a zero window).
            let sws_ok = len > 0 && len >= self.snd.max_wnd / 2;
            if !sws_ok && !force {
                if nothing_in_flight && !self.timers.is_armed(Timer::Persist) {
                    self.arm_persist(now);
                }
                self.info_state.rwnd_blocked = true;
                return None;
            }
            if force {
                self.retry.probe_pending = false;
                if len == 0 {
                    return None;
                }
            }
        } else if len < mss && len == unsent && !fin_pending {
            // Everything buffered fits in one small segment: Nagle and cork.
            let corked = (self.sockopt.cork || self.tx.more)
                && self.timers.get(Timer::Cork).is_some_and(|d| now < d)
                && !self.tx.push_once;
            if corked {
                return None;
            }
            let nagle_limit = mss.min(self.settings.naglim);
            if !self.sockopt.nodelay && !nothing_in_flight && len < nagle_limit && !force {
                return None;
            }
        }
        let mut fin = fin_pending && len == unsent;
        if len == 0 && !fin {
            return None;
        }
        let (mut len, mut piece) = (len, 0);
        if len == mss && !force && self.tx.lso_max >= 2 * mss {
            if let Some(l) = self.plan_large(now, unsent, wnd_avail.min(cwnd_avail), mss) {
                (len, piece) = (l, mss);
                fin = fin_pending && len == unsent;
            }
        }
        if let (Some(q), true) = (self.tx.quota, len > 0) {
            // TCP Small Queues: the owner's queue holds enough of this connection's data.
            if q == 0 {
                self.stats.tsq_throttled += 1;
                self.tx.quota_blocked = true;
                return None;
            }
            let cap = q.max(mss);
            if len > cap {
                // Whole pieces only; a single piece is an ordinary segment.
                len = cap / mss * mss;
                fin = false;
                if len <= mss {
                    (len, piece) = (mss, 0);
                }
            }
            self.tx.quota = Some(q.saturating_sub(len));
        }
        if (self.sockopt.cork || self.tx.more) && len == unsent {
            if self.timers.is_expired(Timer::Cork, now) {
                // Released by the cork timer: a push (see `handle_timeout`).
                self.tx.nopush_end = None;
            }
            self.timers.stop(Timer::Cork);
        }
        if len == unsent {
            self.tx.push_once = false;
        }
        self.retry.probe_pending = self.retry.probe_pending && !force;
        Some(Plan {
            seq: self.snd.nxt,
            len,
            fin,
            kind: Kind::Data,
            piece,
        })
    }

    /// The payload of a large segment (LSO) starting at SND.NXT whose first piece, a full
    /// `mss`, may go now: k >= 2 pieces of `mss` bytes within the unsent data, `avail`
    /// (the peer's window and the congestion allowance), `tx.lso_max` and a size goal of
    /// about 1 ms at the connection's delivery rate (cwnd/SRTT; before an RTT sample,
    /// `tx.lso_max`), as Linux sizes its TSO segments. A sub-MSS tail joins only when it
    /// ends the buffered data and would leave now anyway as a segment of its own: with
    /// the FIN, or neither corked nor held by Nagle (with the pieces before it in flight).
    /// `None`: one ordinary segment.
    fn plan_large(&self, now: Instant, unsent: u32, avail: u32, mss: u32) -> Option<u32> {
        if mss > u32::from(u16::MAX) {
            return None;
        }
        if let Some(up) = self.snd.up {
            // Urgent data ahead: ordinary segments keep the pointer exact per segment.
            if up > self.snd.nxt {
                return None;
            }
        }
        let hard = unsent.min(avail).min(self.tx.lso_max);
        let goal = match self.rtt.srtt() {
            Some(srtt) if !srtt.is_zero() => {
                let per_ms = u128::from(self.cc.cwnd()) * 1_000_000 / srtt.as_nanos().max(1);
                u32::try_from(per_ms).unwrap_or(u32::MAX)
            }
            _ => self.tx.lso_max,
        }
        .max(2 * mss);
        let k = hard.min(goal) / mss;
        if k < 2 {
            return None;
        }
        let full = k * mss;
        let tail = unsent - full;
        if tail > 0 && tail < mss && unsent <= hard {
            let fin_pending = self.snd.fin_queued && !self.fin_sent();
            let corked = (self.sockopt.cork || self.tx.more)
                && self.timers.get(Timer::Cork).is_some_and(|d| now < d)
                && !self.tx.push_once;
            let nagle = !self.sockopt.nodelay && tail < mss.min(self.settings.naglim);
            if fin_pending || (!corked && !nagle) {
                return Some(unsent);
            }
        }
        Some(full)
    }

    /// Arms the persist timer (RFC 9293 §3.8.6.1) with exponential backoff.
    pub(super) fn arm_persist(&mut self, now: Instant) {
        let base = self.rtt.base_rto();
        let factor = 1u32 << self.retry.persist_backoff.min(12);
        let t = base.saturating_mul(factor).min(self.settings.rto_max);
        self.timers.set(Timer::Persist, now + t);
    }

    /// The window to advertise now, as the 16-bit field (RFC 7323 §2.3 scaling;
    /// receiver SWS avoidance, RFC 9293 §3.8.6.2.2; the right edge never moves left).
    pub(super) fn select_window(&mut self, syn: bool) -> u16 {
        let free = self.rcv.cap.saturating_sub(self.rcv.buf.len() as u32);
        if syn {
            // The window of a SYN is never scaled (RFC 7323 §2.2), so a retransmitted
            // SYN,ACK may show less than was advertised since; the right edge we accept
            // data up to still never moves left.
            let w = free.min(MAX_WINDOW);
            let edge = self.rcv.nxt + w;
            if self.rcv.adv < edge || self.rcv.adv.since(self.rcv.nxt) == 0 {
                self.rcv.adv = edge;
            }
            return w as u16;
        }
        self.window_at(self.rcv.nxt, free)
    }

    /// The window field for an ACK of `ack` when `free` bytes of the receive buffer are
    /// free (RFC 9293 §3.8.6.2.2 receiver SWS avoidance; RFC 7323 §2.3 scaling), moving
    /// the advertised right edge (never left).
    fn window_at(&mut self, ack: SeqNum, free: u32) -> u16 {
        let cur = self.rcv.adv.max(ack).since(ack);
        let mut wnd = free;
        let step = (self.rcv.cap / 2).min(self.opts.rcv_mss.max(1));
        if wnd <= cur {
            wnd = cur;
        } else if wnd - cur < step {
            // Not worth moving the right edge yet.
            wnd = cur;
        }
        let scale = u32::from(self.opts.rcv_wscale);
        let max = MAX_WINDOW << scale;
        wnd = wnd.min(max);
        // Round up so the right edge never moves left because of the scaling.
        let field = (wnd.saturating_add((1u32 << scale) - 1) >> scale).min(MAX_WINDOW);
        let adv = field << scale;
        self.rcv.adv = ack + adv;
        if field == 0 {
            self.stats.zero_window_adv += 1;
        }
        field as u16
    }

    /// SACK blocks for the next ACK: D-SACK first (RFC 2883 §4); if it lies above the
    /// cumulative ACK, the block holding it second (§4 rule 4); then the block holding the
    /// most recent out-of-order arrival, other recently reported ones, and the rest (RFC
    /// 2018 §4). The D-SACK's block is the most recent arrival's too unless a later
    /// segment arrived before this ACK left.
    fn sack_blocks(&mut self, out: &mut [SackBlock; 4]) -> usize {
        let mut n = 0;
        let dsack = self.ack.dsack.take();
        if let Some((l, r)) = dsack {
            out[0] = SackBlock {
                left: l.raw(),
                right: r.raw(),
            };
            n = 1;
            self.stats.dsacks_sent += 1;
        }
        if self.rcv.ooo.is_empty() {
            return n;
        }
        let base_seq = self.rcv.nxt;
        let base_off = self.rcv.off;
        let to_block = |(s, e): (u64, u64)| SackBlock {
            left: (base_seq + (s - base_off) as u32).raw(),
            right: (base_seq + (e - base_off) as u32).raw(),
        };
        // Each used block is also in `out` (at most 4, the first possibly the D-SACK).
        let mut used: [Option<(u64, u64)>; 4] = [None; 4];
        let mut u = 0;
        if let Some((l, _)) = dsack.filter(|&(l, _)| l > base_seq) {
            let off = base_off + u64::from(l.since(base_seq));
            if let Some(r) = self.rcv.ooo.range_containing(off) {
                out[n] = to_block(r);
                n += 1;
                used[u] = Some(r);
                u += 1;
            }
        }
        for off in self.rcv.ooo.recent().into_iter().flatten() {
            if n == out.len() {
                return n;
            }
            if let Some(r) = self.rcv.ooo.range_containing(off) {
                if r.0 > base_off && !used[..u].contains(&Some(r)) {
                    out[n] = to_block(r);
                    n += 1;
                    used[u] = Some(r);
                    u += 1;
                }
            }
        }
        for r in self.rcv.ooo.ranges() {
            if n == out.len() {
                break;
            }
            if r.0 > base_off && !used[..u].contains(&Some(r)) {
                out[n] = to_block(r);
                n += 1;
            }
        }
        n
    }

    /// A pure ACK of `point` (at most RCV.NXT) owed for a piece of a coalesced segment,
    /// with the window it would have advertised then and the current SACK blocks (without
    /// the D-SACK, which the last ACK carries).
    /// Leaves the delayed-ACK state alone: the segment's own ACK decision still stands.
    fn build_owed_ack(&mut self, now: Instant, point: SeqNum) -> Outgoing<'_> {
        let point = if point > self.rcv.nxt {
            self.rcv.nxt
        } else {
            point
        };
        let mut repr = self.base_repr(self.snd.nxt, TcpFlags::ACK);
        repr.ack = point.raw();
        // The window as it would have been then: the bytes after `point` were not yet
        // in the receive buffer.
        let buffered = (self.rcv.buf.len() as u32).saturating_sub(self.rcv.nxt.since(point));
        let free = self.rcv.cap.saturating_sub(buffered);
        repr.window = self.window_at(point, free);
        if self.opts.ts_ok {
            repr.options.timestamps = Some((self.ts_now(now), self.opts.ts_recent));
        }
        if self.opts.sack_ok && !self.rcv.ooo.is_empty() {
            let dsack = self.ack.dsack.take();
            let mut blocks = [SackBlock::default(); 4];
            let n = self.sack_blocks(&mut blocks);
            self.ack.dsack = dsack;
            if n > 0 {
                repr.options.set_sack_blocks(&blocks[..n]);
            }
        }
        self.stats.segs_out += 1;
        Outgoing {
            repr,
            payload: (&[], &[]),
            gso_size: 0,
        }
    }

    /// A RST: `<SEQ=seq><CTL=RST>`, or `<SEQ=seq><ACK=ack><CTL=RST,ACK>`.
    fn build_rst(&mut self, seq: SeqNum, ack: Option<SeqNum>) -> Outgoing<'_> {
        let mut flags = TcpFlags::RST;
        let mut repr = self.base_repr(seq, flags);
        if let Some(a) = ack {
            flags |= TcpFlags::ACK;
            repr.flags = flags;
            repr.ack = a.raw();
        }
        self.stats.segs_out += 1;
        Outgoing {
            repr,
            payload: (&[], &[]),
            gso_size: 0,
        }
    }

    /// The SYN (SYN-SENT) or SYN,ACK (SYN-RECEIVED) with our options (RFC 9293 §3.7.1,
    /// RFC 7323 §2.2/§3.2, RFC 2018 §2), in Linux's order.
    fn build_syn(&mut self, now: Instant) -> Outgoing<'_> {
        let passive_side = self.state == State::SynReceived;
        let mut flags = TcpFlags::SYN;
        if passive_side {
            flags |= TcpFlags::ACK;
        }
        let mut repr = self.base_repr(self.snd.iss, flags);
        let o = &mut repr.options;
        o.mss = Some(self.opts.adv_mss.min(65_535) as u16);
        if passive_side {
            o.window_scale = self.opts.ws_ok.then_some(self.opts.rcv_wscale);
            o.sack_permitted = self.opts.sack_ok;
            o.timestamps = self
                .opts
                .ts_ok
                .then(|| (self.ts_now(now), self.opts.ts_recent));
            repr.ack = self.rcv.nxt.raw();
        } else {
            o.window_scale = (self.settings.wscale >= 2).then_some(self.opts.rcv_wscale);
            o.sack_permitted = self.settings.sack >= 2;
            o.timestamps = (self.settings.tstamp >= 2).then(|| (self.ts_now(now), 0));
        }
        repr.window = self.select_window(true);
        // Sent before (SND.NXT is past ISS): a retransmission, which also ends RTT timing
        // by sequence number (RFC 6298 §3, Karn: an ACK may answer either copy).
        let again = self.snd.nxt != self.snd.iss;
        if again {
            self.stats.retrans_segs += 1;
        }
        self.snd.nxt = self.snd.iss + 1;
        self.retry.syn_due = false;
        if self.retry.series_start.is_none() {
            self.retry.series_start = Some(now);
        }
        self.rtt.timed = if self.retry.syn_retransmitted || again {
            None
        } else {
            Some((self.snd.iss + 1, now))
        };
        self.timers.set(Timer::Retransmit, now + self.rtt.rto());
        self.ack.due = false;
        self.ack.last_sent = self.rcv.nxt;
        self.stats.segs_out += 1;
        Outgoing {
            repr,
            payload: (&[], &[]),
            gso_size: 0,
        }
    }

    /// Builds the segment `plan` describes, in a synchronized state, and updates the
    /// send-side bookkeeping.
    fn build(&mut self, now: Instant, plan: Plan) -> Outgoing<'_> {
        let Plan {
            seq,
            len,
            fin,
            kind,
            piece,
        } = plan;
        // A large segment (LSO) counts as the pieces it will be cut into: every counter,
        // RACK record and PSH rule below sees what one-MSS segments would have made.
        let pieces = if piece > 0 && len > piece {
            len.div_ceil(piece)
        } else {
            1
        };
        let mut flags = TcpFlags::ACK;
        if fin {
            flags |= TcpFlags::FIN;
        }
        if len > 0 && seq + len == self.data_end() && self.tx.nopush_end != Some(seq + len) {
            // RFC 1122 §4.2.2.2: PSH on the last buffered segment (not on the end of a
            // write that said MSG_MORE: more is coming).
            flags |= TcpFlags::PSH;
        }
        if kind == Kind::Data && len > 0 {
            // Also PSH on every `tcp_push_segs`-th new-data segment of a burst (the
            // segments sent back to back at one instant), as Linux marks the end of each
            // GSO chunk it transmits; RFC 9293 §3.9.1 leaves the choice to the sender.
            // A large segment carries PSH if any of its pieces would have (GSO keeps it
            // on the last piece only).
            if self.tx.push_burst.0 != now {
                self.tx.push_burst = (now, 0);
            }
            let before = self.tx.push_burst.1;
            self.tx.push_burst.1 = before.saturating_add(pieces);
            let every = self.settings.push_segs;
            if every > 0 && self.tx.push_burst.1 / every > before / every {
                flags |= TcpFlags::PSH;
            }
        }
        let mut repr = self.base_repr(seq, flags);
        repr.ack = self.rcv.nxt.raw();
        repr.window = self.select_window(false);
        if self.opts.ts_ok {
            repr.options.timestamps = Some((self.ts_now(now), self.opts.ts_recent));
        }
        if self.opts.sack_ok {
            let mut blocks = [SackBlock::default(); 4];
            let n = self.sack_blocks(&mut blocks);
            if n > 0 {
                repr.options.set_sack_blocks(&blocks[..n]);
            }
        }
        // Urgent pointer (RFC 9293 §3.8.5): offset of the octet after the urgent data.
        if let Some(up) = self.snd.up {
            if up > seq {
                repr.flags |= TcpFlags::URG;
                repr.urgent = up.since(seq).min(65_535) as u16;
            }
        }
        // Every segment acknowledges everything received.
        self.ack.last_sent = self.rcv.nxt;
        self.ack.due = false;
        self.timers.stop(Timer::DelayedAck);
        self.ack.unacked_bytes = 0;
        self.stats.segs_out += u64::from(pieces);
        if matches!(kind, Kind::Data | Kind::Retransmit) {
            self.prr_on_send(seq, seq + len + u32::from(fin));
            if pieces > 1 && self.prr_active() {
                self.stats.prr_segs += u64::from(pieces - 1);
            }
        }

        match kind {
            Kind::Data => {
                let end = seq + len + u32::from(fin);
                if self.rtt.timed.is_none() && end > seq {
                    // The first piece is timed, as it would be alone.
                    let first_end = if pieces > 1 { seq + piece } else { end };
                    self.rtt.timed = Some((first_end, now));
                }
                if self.snd.una == self.snd.nxt {
                    // The oldest unacknowledged data is sent now (R2, user timeout).
                    self.retry.series_start = Some(now);
                }
                self.snd.nxt = end;
                // The flight peak of this round (a new round once the last peak's data
                // is acknowledged).
                let flight = self.in_flight();
                if flight > self.tx.flight_peak.0 || self.snd.una >= self.tx.flight_peak.1 {
                    self.tx.flight_peak = (flight, end);
                }
                if len > 0 {
                    self.stats.data_segs_out += u64::from(pieces);
                    self.tx.last_data_sent = now;
                }
                if !self.timers.is_armed(Timer::Retransmit) {
                    self.timers.set(Timer::Retransmit, self.rtx_due(now));
                }
                self.timers.stop(Timer::Persist);
                // RACK records stay one piece each (RFC 8985 §6.1: per segment).
                let mut s = seq;
                for _ in 1..pieces {
                    self.rack_on_send(now, s, s + piece, false);
                    s += piece;
                }
                self.rack_on_send(now, s, end, false);
            }
            Kind::Retransmit => {
                self.rack_on_send(now, seq, seq + len + u32::from(fin), true);
                self.tx.last_data_sent = now;
                if self.retry.series_start.is_none() {
                    self.retry.series_start = Some(now);
                }
                if !self.timers.is_armed(Timer::Retransmit) {
                    self.timers.set(Timer::Retransmit, self.rtx_due(now));
                }
            }
            Kind::Probe => {
                if self.retry.keepalive_sent > 0 && self.snd.wnd > 0 {
                    self.stats.keepalive_probes += 1;
                } else {
                    self.stats.window_probes += 1;
                }
            }
            Kind::Ack => {}
        }
        let start = seq.since(self.snd.buf_seq) as usize;
        let payload = if len == 0 || seq < self.snd.buf_seq {
            (&[][..], &[][..])
        } else {
            let (a, b) = self.snd.buf.as_slices();
            let end = (start + len as usize).min(self.snd.buf.len());
            if end <= a.len() {
                (&a[start..end], &[][..])
            } else if start >= a.len() {
                (&b[start - a.len()..end - a.len()], &[][..])
            } else {
                (&a[start..], &b[..end - a.len()])
            }
        };
        let gso_size = if pieces > 1 { piece as u16 } else { 0 };
        Outgoing {
            repr,
            payload,
            gso_size,
        }
    }
}

/// The application's calls that shape what is sent (LSO size, TCP Small Queues,
/// TCP_NODELAY, MSG_MORE, TCP_CORK).
impl Tcb {
    /// The largest payload of one large segment this connection may emit (LSO, per route
    /// or device; [`crate::tcp::LSO_MAX`] at most). 0, or no more than one MSS, turns
    /// large segments off: every segment carries at most one MSS.
    pub fn set_lso_max(&mut self, bytes: u32) {
        self.tx.lso_max = bytes.min(super::LSO_MAX);
    }

    /// TCP Small Queues: `Some(q)` lets new-data segments out only while `q > 0`, each
    /// carrying at most `max(q, one MSS)` bytes, and takes each one's payload off `q`;
    /// retransmissions, ACKs, SYN, RST, probes and a FIN without data are never held.
    /// `None`: no limit.
    pub fn set_tx_quota(&mut self, quota: Option<u32>) {
        self.tx.quota = quota;
    }

    /// The quota left ([`Tcb::set_tx_quota`]).
    pub fn tx_quota(&self) -> Option<u32> {
        self.tx.quota
    }

    /// True once after new data was held back by the transmit quota: the owner should
    /// raise the quota and flush again when its queue drains.
    pub fn take_tx_quota_blocked(&mut self) -> bool {
        core::mem::take(&mut self.tx.quota_blocked)
    }

    /// TCP_NODELAY: disable Nagle (RFC 896). Turning it on also pushes what is buffered
    /// now, even while corked (Linux semantics: setting TCP_NODELAY is an explicit push;
    /// the cork stays for later writes).
    pub fn set_nodelay(&mut self, on: bool) {
        self.sockopt.nodelay = on;
        if on && self.send_unsent() > 0 {
            self.tx.push_once = true;
        }
    }

    /// MSG_MORE (Linux semantics) for the writes that follow while `on`: the partial
    /// segment they leave is held like a corked one, until a write without MSG_MORE, the
    /// next acknowledgment of new data (the next transmit opportunity outside the write
    /// itself, where Nagle's rule applies again), an explicit push, or
    /// `tcp_cork_interval`; the segment ending such a write carries no PSH.
    pub fn set_more(&mut self, now: Instant, on: bool) {
        self.tx.more = on;
        if on && self.send_unsent() > 0 && !self.timers.is_armed(Timer::Cork) {
            self.timers
                .set(Timer::Cork, now + self.settings.cork_interval);
        }
        if !on {
            // The writer's data is complete: its end is a push point again.
            self.tx.nopush_end = None;
            if !self.sockopt.cork {
                self.timers.stop(Timer::Cork);
            }
        }
    }

    /// TCP_CORK (Linux semantics): while on, partial segments wait until the cork is
    /// removed or `tcp_cork_interval` passes.
    pub fn set_cork(&mut self, now: Instant, on: bool) {
        self.sockopt.cork = on;
        if on {
            // A new cork holds what comes next; an earlier TCP_NODELAY push that the
            // window has not let out yet does not carry over to it.
            self.tx.push_once = false;
            if self.send_unsent() > 0 && !self.timers.is_armed(Timer::Cork) {
                self.timers
                    .set(Timer::Cork, now + self.settings.cork_interval);
            }
        } else {
            self.timers.stop(Timer::Cork);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::Params;
    use crate::tcp::TcpSettings;
    use core::time::Duration;
    use std::net::{Ipv4Addr, SocketAddrV4};

    const A: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 40_000);
    const B: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 80);
    const T0: Instant = Instant::from_secs(10);

    use crate::tcp::tcb::tests::spec;

    /// Hands everything `from` sends at `now` to `to`.
    fn pass(from: &mut Tcb, to: &mut Tcb, now: Instant) {
        while let Some(o) = from.poll_transmit(now) {
            let mut p = vec![0; o.payload_len()];
            o.copy_payload(&mut p);
            let r = o.repr;
            to.handle_segment(now, &r, &p);
        }
    }

    /// A connected client, handshake over at T0 + 10 ms.
    fn client() -> Tcb {
        let set = TcpSettings::from_params(&Params::default());
        let mut a = Tcb::connect(T0, spec(A, B, 1000), set.clone());
        let syn = a.poll_transmit(T0).expect("SYN").repr;
        let mut b = Tcb::accept(T0, spec(B, A, 5000), set, &syn);
        let t1 = T0 + Duration::from_millis(10);
        pass(&mut b, &mut a, t1);
        pass(&mut a, &mut b, t1);
        assert_eq!(a.state(), State::Established);
        a
    }

    /// Each planner's `Plan` says what `build` then makes: new data from SND.NXT (one
    /// segment, or a large one cut into MSS pieces), a retransmission of SND.UNA, a tail
    /// loss probe resending the last segment.
    #[test]
    fn planners_describe_the_segment_built_from_them() {
        let mut a = client();
        let mss = a.mss();
        let t = T0 + Duration::from_millis(20);
        assert_eq!(a.send(t, &vec![7; 3 * mss as usize]), Ok(3 * mss as usize));
        let nxt = a.snd.nxt;
        let plan = a.plan_new_data(t).expect("new data");
        assert_eq!(plan, Plan::segment(Kind::Data, nxt, mss, false));
        let out = a.build(t, plan);
        assert_eq!(
            (SeqNum(out.repr.seq), out.payload_len()),
            (nxt, mss as usize)
        );
        assert_eq!(out.gso_size, 0);
        assert_eq!(a.snd.nxt, nxt + mss);

        // Large segments: whole MSS pieces.
        a.set_lso_max(64 * 1024);
        let plan = a.plan_new_data(t).expect("large segment");
        assert_eq!(
            (plan.seq, plan.kind, plan.piece),
            (nxt + mss, Kind::Data, mss)
        );
        assert_eq!(plan.len, 2 * mss);
        let out = a.build(t, plan);
        assert_eq!(out.payload_len(), 2 * mss as usize);
        assert_eq!(u32::from(out.gso_size), mss);
        assert_eq!(a.snd.nxt, nxt + 3 * mss);

        // The first unacknowledged segment again (as after an RTO).
        a.loss.rtx_head = true;
        let plan = a.plan_retransmission(false).expect("retransmission");
        assert_eq!(plan, Plan::segment(Kind::Retransmit, nxt, mss, false));

        // The loss probe, with no new data to send: the last segment again.
        a.rack.tlp_pending = true;
        let plan = a.plan_tlp(t).expect("probe");
        assert_eq!(
            plan,
            Plan::segment(Kind::Retransmit, nxt + 2 * mss, mss, false)
        );
    }
}
