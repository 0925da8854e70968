//! `tcp_info` counters that need state of their own: segments delivered and the
//! busy / receive-window-limited / send-buffer-limited chronographs, plus the loss
//! counts (`lost`, `retrans`) read from RACK's per-segment records or, where the
//! connection keeps none, from the RFC 6675 / RFC 6582 recovery variables.
//!
//! # Design
//!
//! Linux reports in `tcp_info` how long a connection was *busy* (had data sent and not
//! yet acknowledged, or written and not yet sent) and, of that time, how long the
//! sender was held back by the peer's receive window or by the size of the send
//! buffer. ember keeps one chronograph per connection: at most one state runs at a time
//! (priority send-buffer-limited > receive-window-limited > busy), and the time spent in
//! each is summed. The state is decided once per transmit pass, when
//! [`Tcb::poll_transmit`] has nothing more to send, from what stopped it:
//! * send-buffer-limited: everything the application wrote has been sent, the
//!   application is waiting for buffer space (its last write did not fit), and
//!   neither the congestion window nor the peer's window is full: the sender could
//!   send more if the buffer held more;
//! * receive-window-limited: data (or a FIN) is waiting and the peer's window, not the
//!   congestion window, keeps it back (RFC 9293 §3.8.6.2.1 sender SWS avoidance
//!   included: a runt the window would allow is not worth sending);
//! * busy: anything else with data outstanding or unsent (congestion window, Nagle,
//!   cork, waiting for ACKs);
//! * idle: nothing outstanding and nothing to send.
//!
//! The snapshot ([`Chrono`]) carries the running state's start instant, so a reader
//! adds the running interval up to its own clock (the core reads no clock).
//!
//! `delivered` counts segments acknowledged or SACKed, each once, with the SYN (or
//! SYN,ACK) counted as one, as Linux does. With SACK the RACK records give exact
//! segment boundaries; without them each ACK adds the bytes it acknowledged in
//! segments of the current MSS, rounded up.

use super::cc::CongestionControl;
use super::recovery::Recovery;
use super::seq::SeqNum;
use super::tcb::Tcb;
use crate::time::Instant;
use core::time::Duration;

/// What the sender is doing, for the chronographs (Linux's `tcp_chrono` types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChronoState {
    /// Data outstanding or waiting to be sent.
    Busy,
    /// Data waiting, held back by the peer's receive window.
    RwndLimited,
    /// Everything written was sent and the application waits for send-buffer space.
    SndbufLimited,
}

/// Time spent in each [`ChronoState`] (Linux `tcpi_busy_time`, `tcpi_rwnd_limited`,
/// `tcpi_sndbuf_limited`), with the running state's start so the reader can add the
/// interval up to its own clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Chrono {
    /// Closed intervals spent [`ChronoState::Busy`] (not limited).
    pub busy: Duration,
    /// Closed intervals spent [`ChronoState::RwndLimited`].
    pub rwnd_limited: Duration,
    /// Closed intervals spent [`ChronoState::SndbufLimited`].
    pub sndbuf_limited: Duration,
    /// The state running now and since when (`None`: idle).
    pub current: Option<(ChronoState, Instant)>,
}

impl Chrono {
    fn running(&self, state: ChronoState, now: Instant) -> Duration {
        match self.current {
            Some((s, since)) if s == state => now.saturating_duration_since(since),
            _ => Duration::ZERO,
        }
    }

    /// Total busy time up to `now`, limited periods included (`tcpi_busy_time`).
    pub fn busy_time(&self, now: Instant) -> Duration {
        let run = self.current.map_or(Duration::ZERO, |(_, since)| {
            now.saturating_duration_since(since)
        });
        self.busy + self.rwnd_limited + self.sndbuf_limited + run
    }

    /// Time limited by the peer's receive window up to `now` (`tcpi_rwnd_limited`).
    pub fn rwnd_limited_time(&self, now: Instant) -> Duration {
        self.rwnd_limited + self.running(ChronoState::RwndLimited, now)
    }

    /// Time limited by the send buffer up to `now` (`tcpi_sndbuf_limited`).
    pub fn sndbuf_limited_time(&self, now: Instant) -> Duration {
        self.sndbuf_limited + self.running(ChronoState::SndbufLimited, now)
    }

    /// Moves to `next` at `now`, closing the running interval.
    fn set(&mut self, now: Instant, next: Option<ChronoState>) {
        if self.current.map(|(s, _)| s) == next {
            return;
        }
        if let Some((s, since)) = self.current {
            let d = now.saturating_duration_since(since);
            let acc = match s {
                ChronoState::Busy => &mut self.busy,
                ChronoState::RwndLimited => &mut self.rwnd_limited,
                ChronoState::SndbufLimited => &mut self.sndbuf_limited,
            };
            *acc = acc.saturating_add(d);
        }
        self.current = next.map(|s| (s, now));
    }
}

/// Per-connection `tcp_info` state (one field of the `Tcb`).
#[derive(Debug, Clone, Default)]
pub(super) struct InfoState {
    /// Segments delivered (acknowledged or SACKed), the SYN counted as one.
    pub(super) delivered: u64,
    /// The chronographs, allocated when the connection is first busy (a connection
    /// that never sent data, e.g. every fused one, carries a null pointer; all-zero
    /// chronographs read as such).
    pub(super) chrono: Option<Box<Chrono>>,
    /// The application's last write did not fit in the send buffer; cleared when an
    /// ACK frees enough space to report the socket writable again.
    pub(super) snd_nospace: bool,
    /// The last new-data decision was held back by the peer's window.
    pub(super) rwnd_blocked: bool,
}

impl Tcb {
    /// Updates the chronograph at the end of a transmit pass (see the module comment).
    pub(super) fn chrono_update(&mut self, now: Instant) {
        let data_state = self.state.may_have_outstanding();
        let unsent = self.send_unsent();
        let fin_pending = self.snd.fin_queued && self.snd.nxt <= self.fin_seq();
        let outstanding = self.snd.una != self.snd.nxt;
        let next = if !data_state
            || self.fusion.is_fused()
            || (!outstanding && unsent == 0 && !fin_pending)
        {
            None
        } else if self.info_state.snd_nospace && unsent == 0 && self.could_send_more() {
            Some(ChronoState::SndbufLimited)
        } else if self.info_state.rwnd_blocked && (unsent > 0 || fin_pending) {
            Some(ChronoState::RwndLimited)
        } else {
            Some(ChronoState::Busy)
        };
        match (self.info_state.chrono.as_deref_mut(), next) {
            // Idle and never busy: nothing to record (`Chrono::set` would change nothing).
            (None, None) => {}
            (Some(c), _) => c.set(now, next),
            (None, Some(_)) => {
                let mut c = Box::<Chrono>::default();
                c.set(now, next);
                self.info_state.chrono = Some(c);
            }
        }
    }

    /// Neither the congestion window nor the peer's window is full: a sender with
    /// nothing left to send is held back only by what the application could write.
    fn could_send_more(&self) -> bool {
        let wnd_right = self.snd.una + self.snd.wnd;
        self.cc.cwnd() > self.pipe() && wnd_right > self.snd.nxt
    }

    /// Segments deemed lost and not yet SACKed or acknowledged (`tcpi_lost`): RACK's
    /// marks where it runs (and after an RTO, which marks every record lost); otherwise
    /// the RFC 6675 `IsLost()` holes in fast recovery with SACK, the one head segment
    /// NewReno repairs at a time (RFC 6582 §3.2), or everything unSACKed below the
    /// recovery point after an RTO.
    pub(super) fn lost_segments(&self) -> u32 {
        if self.rack_tracking() && (self.rack_active() || self.loss.phase == Recovery::Loss) {
            return self.rack.lost_segments();
        }
        let mss = self.mss().max(1);
        match self.loss.phase {
            Recovery::Open => 0,
            Recovery::Fast if !self.opts.sack_ok => u32::from(self.snd.una != self.snd.nxt),
            Recovery::Fast => {
                let mut n = 0u32;
                let mut s = self.snd.una;
                for (a, b) in self.sb.ranges() {
                    if a > s && self.sb.is_lost(s, mss, self.settings.dupthresh) {
                        n = n.saturating_add(a.since(s).div_ceil(mss));
                    }
                    s = s.max(b);
                }
                n
            }
            Recovery::Loss => {
                let end = self.loss.recover.min(self.snd.nxt).max(self.snd.una);
                let mut bytes = end.since(self.snd.una);
                for (a, b) in self.sb.ranges() {
                    let (lo, hi) = (a.max(self.snd.una), b.min(end));
                    if hi > lo {
                        bytes = bytes.saturating_sub(hi.since(lo));
                    }
                }
                bytes.div_ceil(mss)
            }
        }
    }

    /// Retransmitted segments not yet SACKed or acknowledged (`tcpi_retrans`): RACK's
    /// records where they are kept, else the retransmitted part of the current
    /// recovery (`[SND.UNA, HighRxt)` less what was SACKed).
    pub(super) fn retrans_segments(&self) -> u32 {
        if self.rack_tracking() {
            return self.rack.retrans_segments();
        }
        if self.loss.phase == Recovery::Open || self.loss.high_rxt <= self.snd.una {
            return 0;
        }
        let end = self.loss.high_rxt.min(self.snd.nxt);
        let mut bytes = end.since(self.snd.una);
        for (a, b) in self.sb.ranges() {
            let (lo, hi) = (a.max(self.snd.una), b.min(end));
            if hi > lo {
                bytes = bytes.saturating_sub(hi.since(lo));
            }
        }
        bytes.div_ceil(self.mss().max(1))
    }

    /// Counts segments an ACK delivered where no RACK records are kept: the sequence
    /// space from `prior_una` to SND.UNA in segments of the current MSS, rounded up
    /// (the SYN is not data: [`Tcb::establish`] counted it).
    pub(super) fn count_delivered_bytes(&mut self, prior_una: SeqNum) {
        let from = if prior_una == self.snd.iss {
            prior_una + 1
        } else {
            prior_una
        };
        if self.snd.una <= from {
            return;
        }
        let n = self.snd.una.since(from).div_ceil(self.mss().max(1));
        self.info_state.delivered = self.info_state.delivered.saturating_add(u64::from(n));
    }
}
