//! The timers of one connection (RFC 9293 §3.8): retransmission (RFC 6298), persist
//! (§3.8.6.1), delayed ACK (§3.8.6.3), keepalive (§3.8.4), TIME-WAIT and the FIN-WAIT-2
//! limit, the TCP_CORK limit, and RACK-TLP's reorder timer and probe timeout (RFC 8985
//! §6.3, §7.2). Each is an optional deadline in one [`TimerTable`] keyed by [`Timer`];
//! [`Tcb::poll_timeout`] returns the earliest and [`Tcb::handle_timeout`] runs every one
//! that is due, in the fixed order of [`Timer::ALL`].

use core::ops::ControlFlow;

use super::cc::CongestionControl;
use super::recovery::Recovery;
use super::tcb::Tcb;
use super::{State, TcpError};
use crate::time::Instant;

/// Window probes an orphaned connection sends before it gives up (Linux's default for
/// `tcp_orphan_retries`).
const ORPHAN_PROBES: u32 = 8;

/// One of a connection's timers.
///
/// The declaration order is the order in which [`Tcb::handle_timeout`] runs the timers due
/// at the same instant, and the order in which [`TimerTable::next`] breaks ties. It
/// matters: a handler may stop or rearm a timer that runs after it (the probe timeout
/// rearms the retransmission timer; a retransmission timeout stops the reorder timer),
/// and the state timer's expiry closes the connection before anything else runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Timer {
    /// TIME-WAIT's 2 MSL (RFC 9293 §3.6, `tcp_time_wait_interval`), or the limit on an
    /// orphan's FIN-WAIT-2 (`tcp_fin_wait_2_flush_interval`).
    State,
    /// The delayed ACK (RFC 9293 §3.8.6.3, RFC 5681 §4.2).
    DelayedAck,
    /// The limit on a TCP_CORK or MSG_MORE hold (`tcp_cork_interval`).
    Cork,
    /// RACK's reorder timer (RFC 8985 §6.3).
    RackReorder,
    /// The tail loss probe's timeout, PTO (RFC 8985 §7.2).
    TailLossProbe,
    /// The retransmission timer (RFC 6298; RFC 9293 §3.8.1, §3.8.3).
    Retransmit,
    /// The persist timer, probing a zero window (RFC 9293 §3.8.6.1).
    Persist,
    /// Keepalive (RFC 9293 §3.8.4).
    Keepalive,
}

impl Timer {
    /// How many timers there are.
    pub const COUNT: usize = 8;

    /// Every timer, in firing order (the declaration order).
    pub const ALL: [Timer; Timer::COUNT] = [
        Timer::State,
        Timer::DelayedAck,
        Timer::Cork,
        Timer::RackReorder,
        Timer::TailLossProbe,
        Timer::Retransmit,
        Timer::Persist,
        Timer::Keepalive,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// A deadline, or none, for each [`Timer`] of a connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimerTable {
    at: [Option<Instant>; Timer::COUNT],
}

impl TimerTable {
    /// A table with every timer stopped.
    pub const fn new() -> TimerTable {
        TimerTable {
            at: [None; Timer::COUNT],
        }
    }

    /// Arms `timer` for `at`, replacing any deadline it had.
    pub fn set(&mut self, timer: Timer, at: Instant) {
        self.at[timer.index()] = Some(at);
    }

    /// Arms `timer` for `at` if it is `Some`, else stops it.
    pub fn set_or_stop(&mut self, timer: Timer, at: Option<Instant>) {
        self.at[timer.index()] = at;
    }

    /// Stops `timer` (nothing if it is not armed).
    pub fn stop(&mut self, timer: Timer) {
        self.at[timer.index()] = None;
    }

    /// Stops every timer.
    pub fn stop_all(&mut self) {
        self.at = [None; Timer::COUNT];
    }

    /// `timer`'s deadline, if armed.
    pub fn get(&self, timer: Timer) -> Option<Instant> {
        self.at[timer.index()]
    }

    /// Whether `timer` is armed.
    pub fn is_armed(&self, timer: Timer) -> bool {
        self.at[timer.index()].is_some()
    }

    /// Whether `timer` is armed and due at `now` (its deadline is `now` or earlier).
    pub fn is_expired(&self, timer: Timer, now: Instant) -> bool {
        self.at[timer.index()].is_some_and(|t| now >= t)
    }

    /// If `timer` is due at `now`, stops it and returns true.
    pub fn expire(&mut self, timer: Timer, now: Instant) -> bool {
        let due = self.is_expired(timer, now);
        if due {
            self.stop(timer);
        }
        due
    }

    /// The earliest armed timer and its deadline; of several due at the same instant,
    /// the first in firing order ([`Timer::ALL`]).
    pub fn next(&self) -> Option<(Timer, Instant)> {
        let mut best: Option<(Timer, Instant)> = None;
        for timer in Timer::ALL {
            if let Some(at) = self.get(timer) {
                if best.is_none_or(|(_, b)| at < b) {
                    best = Some((timer, at));
                }
            }
        }
        best
    }

    /// The timers due at `now`, in firing order: a snapshot, as the table is now.
    /// ([`Tcb::handle_timeout`] looks at each timer only when its turn comes, since the
    /// handlers before it may have stopped or rearmed it.)
    pub fn expired(&self, now: Instant) -> impl Iterator<Item = Timer> + '_ {
        Timer::ALL
            .into_iter()
            .filter(move |&timer| self.is_expired(timer, now))
    }
}

/// The state of retransmission and probing between timer expiries: the series of
/// unanswered retransmissions (R1/R2, RFC 9293 §3.8.3), the persist backoff (§3.8.6.1),
/// keepalives (RFC 1122 §4.2.3.6) and the SYN's retransmission.
#[derive(Debug, Default)]
pub(super) struct Retries {
    /// When the current series of unanswered retransmissions began (for R2).
    pub(super) series_start: Option<Instant>,
    /// Zero-window probes sent since the peer last opened its window.
    pub(super) persist_backoff: u32,
    /// A zero-window probe is to be sent.
    pub(super) probe_pending: bool,
    /// Keepalive probes still unanswered.
    pub(super) keepalive_sent: u32,
    /// The SYN or SYN,ACK was retransmitted (its ACK is no RTT sample, RFC 6298 §3).
    pub(super) syn_retransmitted: bool,
    /// The SYN (SYN-SENT) or SYN,ACK (SYN-RECEIVED) is to be sent again: by the
    /// retransmission timer, for a duplicate of the peer's SYN, or on entering SYN-RECEIVED
    /// from SYN-SENT. SND.NXT is never rewound for it: an ACK of ISS+1 may be on its way
    /// (or already in the same receive batch) and must stay acceptable.
    pub(super) syn_due: bool,
}

impl Tcb {
    /// The earliest instant at which [`Tcb::handle_timeout`] has work to do. `None` while
    /// fused: a fused connection runs no timer at all (see `fusion.rs`).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.fusion.is_fused() {
            return None;
        }
        self.timers.next().map(|(_, at)| at)
    }

    /// The connection's timers (what [`Tcb::poll_timeout`] summarises; it alone counts
    /// while fused).
    pub fn timers(&self) -> &TimerTable {
        &self.timers
    }

    /// Runs every timer that is due at `now`, in the order of [`Timer::ALL`]; each is
    /// looked at only when its turn comes, after the handlers before it ran. Does
    /// nothing while fused.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.fusion.is_fused() {
            return;
        }
        for timer in Timer::ALL {
            if self.timers.expire(timer, now) && self.on_timer(timer, now).is_break() {
                return;
            }
        }
    }

    /// Runs `timer`, which expired at `now` (and is stopped). `Break`: the connection
    /// closed, no later timer runs.
    fn on_timer(&mut self, timer: Timer, now: Instant) -> ControlFlow<()> {
        match timer {
            Timer::State => match self.state {
                // RFC 9293 §3.6: 2 MSL passed.
                State::TimeWait => {
                    self.enter_closed();
                    return ControlFlow::Break(());
                }
                // The application is gone and the peer never sent its FIN.
                State::FinWait2 | State::FinWait1 | State::Closing | State::LastAck => {
                    self.enter_closed();
                    return ControlFlow::Break(());
                }
                _ => {}
            },
            // RFC 9293 §3.8.6.3: the delayed ACK goes now.
            Timer::DelayedAck => {
                self.ack.due = true;
                self.stats.acks_delayed += 1;
            }
            // The cork limit passed: output sends the held partial segment, pushed
            // (Linux's probe path marks PSH, MSG_MORE or not).
            Timer::Cork => self.tx.cork_expired(),
            // RFC 8985 §6.3 reorder timer and §7.2 probe timeout (`rack.rs`); a probe due
            // with the RTO goes first and rearms it.
            Timer::RackReorder => self.rack_on_reorder_timeout(now),
            Timer::TailLossProbe => self.rack_on_probe_timeout(now),
            // RFC 6298 §5.4-5.7, RFC 5681 §3.1.
            Timer::Retransmit => {
                self.on_retransmit_timeout(now);
                if self.state == State::Closed {
                    return ControlFlow::Break(());
                }
            }
            // RFC 9293 §3.8.6.1.
            Timer::Persist => {
                self.on_persist_timeout(now);
                if self.state == State::Closed {
                    return ControlFlow::Break(());
                }
            }
            // RFC 9293 §3.8.4.
            Timer::Keepalive => self.on_keepalive_timeout(now),
        }
        ControlFlow::Continue(())
    }

    /// When the retransmission timer should fire if armed at `now`: one RTO, but never
    /// past the user timeout's deadline (RFC 5482), so that the connection is dropped on
    /// time rather than at the next backed-off timeout.
    pub(super) fn rtx_due(&self, now: Instant) -> Instant {
        let t = now + self.rtt.rto();
        match (self.sockopt.user_timeout, self.retry.series_start) {
            (Some(limit), Some(start)) => t.min((start + limit).max(now)),
            _ => t,
        }
    }

    /// RFC 6298 §5.4-5.7 and RFC 5681 §3.1: the retransmission timer expired.
    fn on_retransmit_timeout(&mut self, now: Instant) {
        let series_start = *self.retry.series_start.get_or_insert(now);
        let elapsed = now.saturating_duration_since(series_start);
        match self.state {
            State::SynSent | State::SynReceived => {
                // R2 for a SYN (RFC 9293 §3.8.3, MUST-20/21).
                let limit = self
                    .sockopt
                    .user_timeout
                    .unwrap_or(self.settings.abort_cinterval);
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
                self.retry.syn_retransmitted = true;
                self.rtt.timed = None;
                // Output resends the SYN (or SYN,ACK); SND.NXT stays at ISS+1, so an ACK
                // of the first one that crosses the retransmission is still acceptable.
                self.retry.syn_due = true;
            }
            State::Closed | State::Listen | State::TimeWait => {}
            _ => {
                if self.snd.una == self.snd.nxt {
                    return;
                }
                // R2 (RFC 9293 §3.8.3) or TCP_USER_TIMEOUT (RFC 5482).
                let limit = self
                    .sockopt
                    .user_timeout
                    .unwrap_or(self.settings.abort_interval);
                if elapsed >= limit {
                    // A soft error seen meanwhile explains the timeout better.
                    let e = self.soft_error.unwrap_or(TcpError::TimedOut);
                    self.fail(e);
                    return;
                }
                self.stats.timeouts += 1;
                // RFC 5681 §3.1 eq. (4): ssthresh only on the first timeout of a series
                // (a later one finds cwnd still at the loss window: no ACK came since).
                if !self.loss.rto_reduced {
                    let flight = self.in_flight();
                    self.cc.on_rto(now, flight);
                    self.loss.rto_reduced = true;
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
                self.rtt.ts_floor = Some(self.ts_now(now));
                self.loss.phase = Recovery::Loss;
                self.rack_on_rto();
                self.loss.recover = self.snd.nxt;
                self.loss.high_rxt = self.snd.una;
                self.loss.dupacks = 0;
                self.rtt.timed = None;
                self.loss.rtx_head = true;
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
        let limit = self
            .sockopt
            .user_timeout
            .unwrap_or(self.settings.abort_interval);
        if self.retry.persist_backoff > 0 && now.saturating_duration_since(self.last_rcv) >= limit {
            self.fail(TcpError::TimedOut);
            return;
        }
        // An orphan (the application closed it) may not hold its buffers forever against
        // a peer that answers probes but never opens its window (Linux: tcp_orphan_retries).
        if self.app_closed && self.retry.persist_backoff >= ORPHAN_PROBES {
            self.fail(TcpError::TimedOut);
            return;
        }
        self.retry.probe_pending = true;
        self.retry.persist_backoff = self.retry.persist_backoff.saturating_add(1);
        // Re-armed by output while the window stays closed.
        self.arm_persist(now);
    }

    /// RFC 9293 §3.8.4 (MUST-24..26: off by default, at least two hours idle).
    fn on_keepalive_timeout(&mut self, now: Instant) {
        if !self.sockopt.keepalive
            || !matches!(
                self.state,
                State::Established | State::CloseWait | State::FinWait2
            )
        {
            return;
        }
        let idle = now.saturating_duration_since(self.last_rcv);
        if self.retry.keepalive_sent == 0 && idle < self.settings.keepalive_idle {
            self.timers.set(
                Timer::Keepalive,
                self.last_rcv + self.settings.keepalive_idle,
            );
            return;
        }
        if self.snd.una != self.snd.nxt {
            // Data is outstanding: the retransmission timer watches the connection.
            self.timers
                .set(Timer::Keepalive, now + self.settings.keepalive_idle);
            return;
        }
        if self.retry.keepalive_sent >= self.settings.keepalive_probes {
            // Given up: ETIMEDOUT, and a RST to the peer in case it is alive after all
            // but cannot answer (as Linux's tcp_keepalive_timer: tcp_send_active_reset,
            // then tcp_write_err). The RST leaves from output, as an abort's does.
            self.error = Some(TcpError::TimedOut);
            self.events.insert(super::Events::ERROR);
            self.snd.buf.clear();
            self.rcv.ooo.clear();
            self.rst_pending = true;
            self.count_close_transition();
            self.state = State::Closed;
            self.clear_timers();
            return;
        }
        self.retry.keepalive_sent += 1;
        self.retry.probe_pending = true;
        self.timers
            .set(Timer::Keepalive, now + self.settings.keepalive_intvl);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::Params;
    use crate::tcp::{Events, TcpSettings};
    use core::time::Duration;
    use std::net::{Ipv4Addr, SocketAddrV4};

    const A: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 40_000);
    const B: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 80);
    const T0: Instant = Instant::from_secs(10);

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn all_lists_every_timer_once_in_declaration_order() {
        for (i, t) in Timer::ALL.into_iter().enumerate() {
            assert_eq!(t.index(), i, "{t:?}");
        }
        let mut sorted = Timer::ALL;
        sorted.sort();
        assert_eq!(sorted, Timer::ALL);
    }

    #[test]
    fn set_stop_get_and_is_armed() {
        let mut t = TimerTable::new();
        assert_eq!(t, TimerTable::default());
        assert!(Timer::ALL
            .into_iter()
            .all(|x| !t.is_armed(x) && t.get(x).is_none()));
        assert_eq!(t.next(), None);
        t.set(Timer::Persist, at(5));
        assert!(t.is_armed(Timer::Persist));
        assert_eq!(t.get(Timer::Persist), Some(at(5)));
        assert!(!t.is_armed(Timer::Keepalive), "only the one set");
        // Setting again replaces the deadline, earlier or later.
        t.set(Timer::Persist, at(9));
        assert_eq!(t.get(Timer::Persist), Some(at(9)));
        t.set(Timer::Persist, at(2));
        assert_eq!(t.next(), Some((Timer::Persist, at(2))));
        t.stop(Timer::Persist);
        assert!(!t.is_armed(Timer::Persist));
        t.stop(Timer::Persist);
        assert_eq!(t.next(), None);
        t.set_or_stop(Timer::Cork, Some(at(3)));
        assert_eq!(t.get(Timer::Cork), Some(at(3)));
        t.set_or_stop(Timer::Cork, None);
        assert!(!t.is_armed(Timer::Cork));
        for (i, x) in Timer::ALL.into_iter().enumerate() {
            t.set(x, at(i as u64));
        }
        t.stop_all();
        assert_eq!(t, TimerTable::new());
    }

    #[test]
    fn next_is_the_earliest_and_a_tie_goes_to_the_first_in_firing_order() {
        let mut t = TimerTable::new();
        t.set(Timer::Keepalive, at(5));
        t.set(Timer::State, at(7));
        assert_eq!(t.next(), Some((Timer::Keepalive, at(5))));
        t.set(Timer::Retransmit, at(3));
        t.set(Timer::TailLossProbe, at(3));
        assert_eq!(t.next(), Some((Timer::TailLossProbe, at(3))));
        t.stop(Timer::TailLossProbe);
        assert_eq!(t.next(), Some((Timer::Retransmit, at(3))));
        t.set(Timer::DelayedAck, at(3));
        assert_eq!(t.next(), Some((Timer::DelayedAck, at(3))));
        // Every pair at the same instant, armed in either order: the earlier in ALL wins.
        for (i, &a) in Timer::ALL.iter().enumerate() {
            for &b in &Timer::ALL[i + 1..] {
                for (first, second) in [(a, b), (b, a)] {
                    let mut t = TimerTable::new();
                    t.set(first, at(4));
                    t.set(second, at(4));
                    assert_eq!(t.next(), Some((a, at(4))), "{a:?} and {b:?}");
                }
            }
        }
    }

    #[test]
    fn expired_yields_the_due_timers_in_firing_order() {
        let mut t = TimerTable::new();
        // Armed in reverse order, at assorted instants.
        t.set(Timer::Keepalive, at(1));
        t.set(Timer::Persist, at(20));
        t.set(Timer::Retransmit, at(10));
        t.set(Timer::TailLossProbe, at(10));
        t.set(Timer::RackReorder, at(11));
        t.set(Timer::DelayedAck, at(3));
        t.set(Timer::State, at(10));
        assert_eq!(t.expired(at(0)).count(), 0);
        let due: Vec<Timer> = t.expired(at(10)).collect();
        assert_eq!(
            due,
            [
                Timer::State,
                Timer::DelayedAck,
                Timer::TailLossProbe,
                Timer::Retransmit,
                Timer::Keepalive
            ],
            "a deadline equal to now is due; later ones are not"
        );
        assert!(due.iter().all(|&x| t.is_expired(x, at(10))));
        assert!(!t.is_expired(Timer::RackReorder, at(10)));
        assert!(!t.is_expired(Timer::Cork, at(10)), "not armed");
        // `expire` stops only a due timer.
        assert!(!t.expire(Timer::Persist, at(10)));
        assert_eq!(t.get(Timer::Persist), Some(at(20)));
        assert!(t.expire(Timer::Keepalive, at(10)));
        assert!(!t.is_armed(Timer::Keepalive));
        assert!(!t.expire(Timer::Keepalive, at(10)), "once");
        assert_eq!(t.expired(at(100)).count(), 6);
    }

    use crate::tcp::tcb::tests::{drain, feed, spec};

    /// Two connected `Tcb`s (SACK and TLP on, the defaults), handshake over at T0 + 10 ms.
    fn pair() -> (Tcb, Tcb) {
        let set = TcpSettings::from_params(&Params::default());
        let mut a = Tcb::connect(T0, spec(A, B, 1000), set.clone());
        let syn = drain(&mut a, T0);
        let mut b = Tcb::accept(T0, spec(B, A, 5000), set, &syn[0].0);
        let synack = drain(&mut b, T0);
        let t1 = T0 + Duration::from_millis(10);
        let ack = feed(&mut a, t1, &synack);
        feed(&mut b, t1, &ack);
        assert_eq!(
            (a.state(), b.state()),
            (State::Established, State::Established)
        );
        assert!(
            a.opts.sack_ok && a.settings.tlp,
            "the test needs the probe timeout"
        );
        (a, b)
    }

    /// Every timer due at once on a connection with data outstanding: the delayed ACK
    /// runs, the probe timeout runs before the retransmission timer and rearms it (so
    /// no RTO happens: the probe goes in its place, RFC 8985 §7.2), and the persist
    /// timer still runs after them. Run in another order, the RTO would fire first and
    /// cancel the probe (`timeouts` 1, no probe).
    #[test]
    fn handle_timeout_runs_the_due_timers_in_firing_order() {
        let (mut a, _b) = pair();
        let t = T0 + Duration::from_millis(20);
        assert_eq!(a.send(t, &[7; 100]), Ok(100));
        assert_eq!(drain(&mut a, t).len(), 1);
        a.set_keepalive(t, true);
        let due = t + Duration::from_millis(50);
        for timer in Timer::ALL {
            if timer != Timer::State {
                a.timers.set(timer, due);
            }
        }
        a.timers.set(Timer::State, due + Duration::from_secs(1));
        // A snapshot of what is due now: everything but the state timer.
        assert_eq!(a.timers().expired(due).count(), Timer::COUNT - 1);
        a.handle_timeout(due);
        let st = a.stats();
        assert_eq!(st.acks_delayed, 1, "the delayed ACK ran");
        assert_eq!(st.timeouts, 0, "the probe replaced the RTO");
        assert!(a.rack.tlp_pending, "the probe timeout ran");
        assert_eq!(a.timers.get(Timer::Retransmit), Some(a.rtx_due(due)));
        assert!(a.timers.get(Timer::Retransmit) > Some(due));
        assert_eq!(a.retry.persist_backoff, 1, "the persist timer ran");
        assert!(a.retry.probe_pending);
        assert!(
            a.timers.get(Timer::Persist) > Some(due),
            "and rearmed itself"
        );
        assert!(
            a.timers.get(Timer::Keepalive) > Some(due),
            "keepalive rearmed"
        );
        assert!(!a.timers.is_armed(Timer::Cork) && !a.timers.is_armed(Timer::DelayedAck));
        assert_eq!(
            a.timers.get(Timer::State),
            Some(due + Duration::from_secs(1))
        );
        assert_eq!(a.state(), State::Established);
        let out = drain(&mut a, due);
        assert_eq!(a.stats().tlp_probes, 1, "{out:?}");
        assert_eq!(a.stats().timeouts, 0);
    }

    /// The state timer runs first: an orphan's FIN-WAIT-2 limit closes the connection
    /// and no timer due with it runs (no delayed ACK counted, no window probe).
    #[test]
    fn the_state_timer_closes_before_any_other_timer_runs() {
        let (mut a, mut b) = pair();
        let t = T0 + Duration::from_millis(20);
        a.close(t);
        let fin = drain(&mut a, t);
        let ack = feed(&mut b, t, &fin);
        feed(&mut a, t, &ack);
        assert_eq!(a.state(), State::FinWait2);
        let due = a.timers.get(Timer::State).expect("FIN-WAIT-2 limit");
        a.timers.set(Timer::DelayedAck, due);
        a.timers.set(Timer::Persist, due);
        a.poll_events();
        a.handle_timeout(due);
        assert_eq!(a.state(), State::Closed);
        assert!(a.poll_events().contains(Events::CLOSED));
        assert_eq!(a.stats().acks_delayed, 0, "the delayed ACK did not run");
        assert_eq!(a.retry.persist_backoff, 0, "the persist timer did not run");
        assert_eq!(a.poll_timeout(), None);
    }

    /// A retransmission timeout that gives up (TCP_USER_TIMEOUT, RFC 5482) closes the
    /// connection before the persist timer due with it runs.
    #[test]
    fn a_fatal_retransmission_timeout_runs_before_the_persist_timer() {
        let (mut a, _b) = pair();
        a.set_user_timeout(Some(Duration::from_millis(50)));
        let t = T0 + Duration::from_millis(20);
        assert_eq!(a.send(t, &[7; 100]), Ok(100));
        assert_eq!(drain(&mut a, t).len(), 1);
        let due = t + Duration::from_millis(100);
        a.timers.stop(Timer::TailLossProbe);
        a.timers.set(Timer::Retransmit, due);
        a.timers.set(Timer::Persist, due);
        a.handle_timeout(due);
        assert_eq!(a.state(), State::Closed);
        assert_eq!(a.error, Some(TcpError::TimedOut));
        assert_eq!(a.retry.persist_backoff, 0, "the persist timer did not run");
        assert!(!a.retry.probe_pending);
    }
}
