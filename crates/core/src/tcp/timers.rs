//! The timers of one connection (RFC 9293 §3.8): retransmission (RFC 6298), persist
//! (§3.8.6.1), delayed ACK (§3.8.6.3), keepalive (§3.8.4), TIME-WAIT and the FIN-WAIT-2
//! limit, and the TCP_CORK limit. Each is an optional deadline; [`Tcb::poll_timeout`]
//! returns the earliest and [`Tcb::on_timeout`] runs every one that is due.

use super::cc::CongestionControl;
use super::tcb::{Recovery, Tcb};
use super::{State, TcpError};
use crate::time::Instant;

/// Window probes an orphaned connection sends before it gives up (Linux's default for
/// `tcp_orphan_retries`).
const ORPHAN_PROBES: u32 = 8;

impl Tcb {
    /// The earliest instant at which [`Tcb::on_timeout`] has work to do. `None` while
    /// fused: a fused connection runs no timer at all (see `fusion.rs`).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.fused {
            return None;
        }
        [
            self.rtx_deadline,
            self.persist_deadline,
            self.delack_deadline,
            self.keepalive_deadline,
            self.state_deadline,
            self.cork_deadline,
            self.rack.reo_deadline,
            self.rack.pto_deadline,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Runs every timer that is due at `now`. Does nothing while fused.
    pub fn on_timeout(&mut self, now: Instant) {
        if self.fused {
            return;
        }
        if self.state_deadline.is_some_and(|t| now >= t) {
            self.state_deadline = None;
            match self.state {
                // RFC 9293 §3.6: 2 MSL passed.
                State::TimeWait => {
                    self.enter_closed();
                    return;
                }
                // The application is gone and the peer never sent its FIN.
                State::FinWait2 | State::FinWait1 | State::Closing | State::LastAck => {
                    self.enter_closed();
                    return;
                }
                _ => {}
            }
        }
        if self.delack_deadline.is_some_and(|t| now >= t) {
            self.delack_deadline = None;
            self.ack_now = true;
            self.stats.acks_delayed += 1;
        }
        if self.cork_deadline.is_some_and(|t| now >= t) {
            // The cork limit passed: output sends the held partial segment, pushed
            // (Linux's probe path marks PSH, MSG_MORE or not).
            self.cork_deadline = None;
            self.nopush_end = None;
        }
        // RFC 8985 §6.3 reorder timer and §7.2 probe timeout (`rack.rs`); a probe due
        // with the RTO goes first and rearms it.
        self.rack_on_timeout(now);
        if self.rtx_deadline.is_some_and(|t| now >= t) {
            self.rtx_deadline = None;
            self.on_retransmit_timeout(now);
            if self.state == State::Closed {
                return;
            }
        }
        if self.persist_deadline.is_some_and(|t| now >= t) {
            self.persist_deadline = None;
            self.on_persist_timeout(now);
            if self.state == State::Closed {
                return;
            }
        }
        if self.keepalive_deadline.is_some_and(|t| now >= t) {
            self.keepalive_deadline = None;
            self.on_keepalive_timeout(now);
        }
    }

    /// When the retransmission timer should fire if armed at `now`: one RTO, but never
    /// past the user timeout's deadline (RFC 5482), so that the connection is dropped on
    /// time rather than at the next backed-off timeout.
    pub(super) fn rtx_due(&self, now: Instant) -> Instant {
        let t = now + self.rtt.rto();
        match (self.user_timeout, self.rtx_series_start) {
            (Some(limit), Some(start)) => t.min((start + limit).max(now)),
            _ => t,
        }
    }

    /// RFC 6298 §5.4-5.7 and RFC 5681 §3.1: the retransmission timer expired.
    fn on_retransmit_timeout(&mut self, now: Instant) {
        let series_start = *self.rtx_series_start.get_or_insert(now);
        let elapsed = now.saturating_duration_since(series_start);
        match self.state {
            State::SynSent | State::SynReceived => {
                // R2 for a SYN (RFC 9293 §3.8.3, MUST-20/21).
                let limit = self.user_timeout.unwrap_or(self.set.abort_cinterval);
                if elapsed >= limit {
                    let e = self.soft_error.unwrap_or(TcpError::TimedOut);
                    self.fail(e);
                    return;
                }
                self.rtt.back_off();
                // R1 for the handshake too: a SYN or SYN,ACK unanswered three times may be
                // going to a stale or poisoned link address (RFC 1122 §2.3.2.1, MUST-20).
                if self.rtt.backoff() == 3 {
                    self.negative_advice = true;
                }
                self.stats.timeouts += 1;
                self.syn_retransmitted = true;
                self.rtt_timed = None;
                // Output resends the SYN (or SYN,ACK); SND.NXT stays at ISS+1, so an ACK
                // of the first one that crosses the retransmission is still acceptable.
                self.syn_due = true;
            }
            State::Closed | State::Listen | State::TimeWait => {}
            _ => {
                if self.snd_una == self.snd_nxt {
                    return;
                }
                // R2 (RFC 9293 §3.8.3) or TCP_USER_TIMEOUT (RFC 5482).
                let limit = self.user_timeout.unwrap_or(self.set.abort_interval);
                if elapsed >= limit {
                    // A soft error seen meanwhile explains the timeout better.
                    let e = self.soft_error.unwrap_or(TcpError::TimedOut);
                    self.fail(e);
                    return;
                }
                self.stats.timeouts += 1;
                // RFC 5681 §3.1 eq. (4): ssthresh only on the first timeout of a series
                // (a later one finds cwnd still at the loss window: no ACK came since).
                if !self.rto_reduced {
                    let flight = self.in_flight();
                    self.cc.on_rto(now, flight);
                    self.rto_reduced = true;
                }
                self.rtt.back_off();
                // R1 (RFC 9293 §3.8.3, RFC 1122 §4.2.3.5): three retransmissions.
                if self.rtt.backoff() == 3 {
                    self.negative_advice = true;
                }
                // A second timeout in a row may mean the receiver reneged on what it
                // SACKed (RFC 2018 §8): forget the scoreboard.
                if self.rtt.backoff() > 1 {
                    self.sb.clear();
                    // RACK's per-segment SACK marks too, so that `rack_on_rto` deems
                    // those segments lost as well (RFC 8985 §6.3).
                    self.rack.clear_sacked();
                }
                self.ts_rtt_floor = Some(self.ts_now(now));
                self.recovery = Recovery::Loss;
                self.rack_on_rto();
                self.recover = self.snd_nxt;
                self.high_rxt = self.snd_una;
                self.dupacks = 0;
                self.rtt_timed = None;
                self.rtx_head = true;
            }
        }
        // Output retransmits and rearms the timer with the backed-off RTO.
    }

    /// RFC 9293 §3.8.6.1: probe a zero window, backing off; give up only if the peer
    /// stops answering for R2.
    fn on_persist_timeout(&mut self, now: Instant) {
        if !self.state.may_have_outstanding() {
            return;
        }
        let limit = self.user_timeout.unwrap_or(self.set.abort_interval);
        if self.persist_backoff > 0 && now.saturating_duration_since(self.last_rcv) >= limit {
            self.fail(TcpError::TimedOut);
            return;
        }
        // An orphan (the application closed it) may not hold its buffers forever against
        // a peer that answers probes but never opens its window (Linux: tcp_orphan_retries).
        if self.app_closed && self.persist_backoff >= ORPHAN_PROBES {
            self.fail(TcpError::TimedOut);
            return;
        }
        self.probe_pending = true;
        self.persist_backoff = self.persist_backoff.saturating_add(1);
        // Re-armed by output while the window stays closed.
        self.arm_persist(now);
    }

    /// RFC 9293 §3.8.4 (MUST-24..26: off by default, at least two hours idle).
    fn on_keepalive_timeout(&mut self, now: Instant) {
        if !self.keepalive
            || !matches!(
                self.state,
                State::Established | State::CloseWait | State::FinWait2
            )
        {
            return;
        }
        let idle = now.saturating_duration_since(self.last_rcv);
        if self.keepalive_sent == 0 && idle < self.set.keepalive_idle {
            self.keepalive_deadline = Some(self.last_rcv + self.set.keepalive_idle);
            return;
        }
        if self.snd_una != self.snd_nxt {
            // Data is outstanding: the retransmission timer watches the connection.
            self.keepalive_deadline = Some(now + self.set.keepalive_idle);
            return;
        }
        if self.keepalive_sent >= self.set.keepalive_probes {
            // Given up: ETIMEDOUT, and a RST to the peer in case it is alive after all
            // but cannot answer (as Linux's tcp_keepalive_timer: tcp_send_active_reset,
            // then tcp_write_err). The RST leaves from output, as an abort's does.
            self.error = Some(TcpError::TimedOut);
            self.events.insert(super::Events::ERROR);
            self.snd_buf.clear();
            self.ooo.clear();
            self.rst_pending = true;
            self.count_close_transition();
            self.state = State::Closed;
            self.clear_timers();
            return;
        }
        self.keepalive_sent += 1;
        self.probe_pending = true;
        self.keepalive_deadline = Some(now + self.set.keepalive_intvl);
    }
}
