//! The transmission control block: one connection's state and its application interface.
//!
//! This file holds the `Tcb`, its constructors (active and passive open), the
//! application calls (send, recv, shutdown, close, abort, options) and accessors. Segment
//! arrival is in `input.rs`, segment generation in `output.rs` (with the calls that shape
//! it: LSO size, TCP Small Queues, TCP_NODELAY, MSG_MORE, TCP_CORK), timers in `timers.rs`.
//! The `Tcb`'s state is grouped by concern, each group declared in the file that owns
//! it (see [`Tcb`]); the invariants of the send and receive sides are stated in
//! `send.rs` and `receive.rs`.
//!
//! # Invariants
//! * Memory: the send buffer never exceeds its size, the receive side never holds more
//!   than the advertised window (plus the rounding of window scaling), the scoreboard and
//!   the assembler are bounded by tunables. No input can grow a `Tcb` without bound.

use super::ack::AckState;
use super::cc::{Cc, CcAlgorithm, CongestionControl};
use super::fusion::FusionState;
use super::info::{Chrono, InfoState};
use super::options::Options;
use super::output::Transmit;
use super::prr::Prr;
use super::rack::Rack;
use super::receive::ReceiveSequence;
use super::recovery::{LossRecovery, Recovery};
use super::rtt::RttEstimator;
use super::sack::LazyScoreboard;
use super::send::SendSequence;
use super::seq::SeqNum;
use super::timers::{Retries, Timer, TimerTable};
use super::{Events, State, TcpError, TcpSettings};
use crate::time::Instant;
use crate::wire::{TcpFlags, TcpRepr};
use core::time::Duration;
use std::net::SocketAddrV4;
use std::sync::Arc;

/// Largest window without scaling (RFC 9293 §3.1).
pub(super) const MAX_WINDOW: u32 = 65_535;
/// Largest window-scale shift (RFC 7323 §2.3).
pub(super) const MAX_WSCALE: u8 = 14;
/// IPv4 + TCP fixed header bytes.
pub(super) const IP_TCP_HEADERS: u32 = 40;

/// Per-connection counters (summed by the owner into MIB-II style totals).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcbStats {
    pub segs_in: u64,
    pub segs_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub data_segs_out: u64,
    pub retrans_segs: u64,
    pub retrans_bytes: u64,
    pub fast_retransmits: u64,
    pub timeouts: u64,
    pub dup_acks_in: u64,
    pub ooo_segs_in: u64,
    pub dup_segs_in: u64,
    pub dsacks_sent: u64,
    pub dsacks_in: u64,
    pub challenge_acks: u64,
    pub paws_drops: u64,
    pub rsts_out: u64,
    pub rsts_in: u64,
    pub acks_delayed: u64,
    pub window_probes: u64,
    pub keepalive_probes: u64,
    pub zero_window_adv: u64,
    pub rcv_drops_full: u64,
    pub bad_acks: u64,
    pub recoveries: u64,
    /// Segments sent in SACK fast recovery, paced by PRR (RFC 9937).
    pub prr_segs: u64,
    pub rtt_samples: u64,
    /// SYN-SENT or SYN-RECEIVED went straight to CLOSED (RFC 4022 tcpAttemptFails).
    pub attempt_fails: u64,
    /// ESTABLISHED or CLOSE-WAIT went straight to CLOSED (RFC 4022 tcpEstabResets).
    pub estab_resets: u64,
    /// Segments RACK deemed lost (RFC 8985 §6.2).
    pub rack_losses: u64,
    /// Tail loss probes sent (RFC 8985 §7.3).
    pub tlp_probes: u64,
    /// Losses a tail loss probe repaired (RFC 8985 §7.4).
    pub tlp_recoveries: u64,
    /// Retransmissions a D-SACK showed were not needed (RFC 3708).
    pub spurious_rtx: u64,
    /// Times new data was held back only by the transmit quota (TCP Small Queues,
    /// [`Tcb::set_tx_quota`]).
    pub tsq_throttled: u64,
    /// SACK ranges the scoreboard forgot at its bound (`tcp_sack_max_ranges`).
    pub sack_ranges_forgotten: u64,
    /// Duplicate SYNs in SYN-RECEIVED left unanswered by the `tcp_invalid_ratelimit`
    /// limiter (Linux's TCPACKSkippedSynRecv).
    pub acks_skipped_syn_recv: u64,
    /// Segments in TIME-WAIT left unanswered by the limiter (TCPACKSkippedTimeWait).
    pub acks_skipped_time_wait: u64,
}

/// A `tcp_info`-like snapshot of one connection (for netstat and tests).
#[derive(Debug, Clone, PartialEq)]
pub struct TcbInfo {
    pub state: State,
    pub local: SocketAddrV4,
    pub remote: SocketAddrV4,
    pub snd_una: u32,
    pub snd_nxt: u32,
    pub rcv_nxt: u32,
    pub snd_wnd: u32,
    pub rcv_wnd: u32,
    pub snd_mss: u32,
    pub rcv_mss: u32,
    pub cwnd: u32,
    pub ssthresh: u32,
    pub srtt: Option<Duration>,
    pub rttvar: Duration,
    pub rto: Duration,
    pub min_rtt: Option<Duration>,
    pub unacked: u32,
    pub sacked: u32,
    pub send_queued: usize,
    pub recv_queued: usize,
    pub ooo_bytes: usize,
    pub snd_wscale: u8,
    pub rcv_wscale: u8,
    pub timestamps: bool,
    pub sack: bool,
    pub in_recovery: bool,
    pub backoff: u32,
    pub cc: &'static str,
    pub stats: TcbStats,
    /// The connection is fused with a local peer (TCP Fusion, see `fusion.rs`): data
    /// moves between the two `Tcb`s without segments.
    pub fused: bool,
    /// Where loss recovery stands, in Linux's `tcpi_ca_state` numbering:
    /// [`CA_OPEN`], [`CA_DISORDER`] (duplicate ACKs or SACKed data, no loss repair
    /// yet), [`CA_RECOVERY`] (fast recovery, RFC 6675/6582), [`CA_LOSS`] (after a
    /// retransmission timeout). ember has no ECN, so Linux's CWR (2) never appears.
    pub ca_state: u8,
    /// The MSS ember advertises (the SYN's MSS option).
    pub adv_mss: u32,
    /// The path MTU in IP bytes.
    pub pmtu: u32,
    /// TCP_MAXSEG, if the application set one.
    pub user_mss: Option<u32>,
    /// Window scaling was negotiated (both SYNs carried the option, RFC 7323 §2.2).
    pub window_scaling: bool,
    /// When in-order data last arrived (or the handshake completed), on the clock of
    /// the `now` values given to the core.
    pub last_data_recv: Instant,
    /// When new data was last sent (retransmissions do not count), same clock.
    pub last_data_sent: Instant,
    /// Data bytes received in order (RCV.NXT's stream offset; Linux `tcpi_bytes_received`).
    pub bytes_received: u64,
    /// Zero-window probes sent since the peer last opened its window, or keepalive
    /// probes still unanswered (Linux `tcpi_probes`).
    pub probes: u32,
    /// Segments deemed lost and not yet SACKed or acknowledged (Linux `tcpi_lost`):
    /// RACK's marks (RFC 8985), or after an RTO everything unSACKed below the recovery
    /// point; 0 outside loss recovery.
    pub lost: u32,
    /// Retransmitted segments not yet SACKed or acknowledged (Linux `tcpi_retrans`).
    pub retrans: u32,
    /// Reordering degree in segments (Linux `tcpi_reordering`): DupThresh
    /// (`tcp_dupthresh`, 3) until reordering is seen, then the largest distance between
    /// the highest delivered sequence and a never-retransmitted segment delivered below
    /// it, never lowered (detected from SACK and ACKs by RACK's records, so only when
    /// SACK was negotiated).
    pub reordering: u32,
    /// Segments delivered, i.e. acknowledged or SACKed, each once; the SYN (or SYN,ACK)
    /// counts as one (Linux `tcpi_delivered`).
    pub delivered: u64,
    /// Time busy (data outstanding or unsent) and, of it, limited by the peer's receive
    /// window or by the send buffer (Linux `tcpi_busy_time`, `tcpi_rwnd_limited`,
    /// `tcpi_sndbuf_limited`); the running period is added up to a reader's `now` by
    /// [`Chrono::busy_time`] and its siblings.
    pub chrono: Chrono,
}

/// [`TcbInfo::ca_state`]: no loss or reordering seen.
pub const CA_OPEN: u8 = 0;
/// [`TcbInfo::ca_state`]: duplicate ACKs or SACKs, not (yet) a loss.
pub const CA_DISORDER: u8 = 1;
/// [`TcbInfo::ca_state`]: fast recovery.
pub const CA_RECOVERY: u8 = 3;
/// [`TcbInfo::ca_state`]: recovery after a retransmission timeout.
pub const CA_LOSS: u8 = 4;

/// Which parts of a connection's state that are allocated on first use are held now
/// (see [`Tcb::lazy_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LazyState {
    /// RACK-TLP's per-segment records and busy-period variables (RFC 8985 §5.2): reset
    /// in place when the connection is idle (its deque shrunk to a few records), freed
    /// when it fuses.
    pub rack_records: bool,
    /// RACK's ring of recent retransmissions (RFC 3708 detection), kept once allocated.
    pub rack_rtx_memory: bool,
    /// The undo snapshot of a RACK recovery (RFC 4015 §3), until it expires.
    pub rack_undo: bool,
    /// The SACK scoreboard (RFC 6675 §3), dropped when empty at idle.
    pub sack_scoreboard: bool,
    /// PRR's episode (RFC 9937 §6.1), dropped at idle.
    pub prr_episode: bool,
    /// The out-of-order receive store (RFC 9293 §3.10.7.4), dropped once nothing is held.
    pub out_of_order: bool,
    /// The `tcp_info` chronographs, kept once the connection was busy.
    pub chrono: bool,
    /// The deque of ACKs owed for coalesced segments, kept once allocated.
    pub owed_acks: bool,
}

/// A segment ready to go out: the header to emit and the payload (up to two slices of
/// the send buffer, which is a ring).
#[derive(Debug)]
pub struct Outgoing<'a> {
    pub repr: TcpRepr,
    pub payload: (&'a [u8], &'a [u8]),
    /// 0 for an ordinary segment. Otherwise a large segment (LSO, see
    /// [`Tcb::set_lso_max`]) to be cut into pieces of this many payload bytes each (the
    /// last one may be shorter; `payload_len() > gso_size`), e.g. by
    /// [`crate::ip::gso::gso_split`] or a device that segments (TSO).
    pub gso_size: u16,
}

impl Outgoing<'_> {
    /// Payload bytes.
    pub fn payload_len(&self) -> usize {
        self.payload.0.len() + self.payload.1.len()
    }

    /// Copies the payload into `dst` (which must hold `payload_len()` bytes).
    pub fn copy_payload(&self, dst: &mut [u8]) {
        let a = self.payload.0.len();
        dst[..a].copy_from_slice(self.payload.0);
        dst[a..a + self.payload.1.len()].copy_from_slice(self.payload.1);
    }
}

/// The application's socket options that shape this connection.
#[derive(Debug, Default)]
pub(super) struct SocketOptions {
    /// TCP_NODELAY: Nagle's algorithm off (RFC 9293 §3.7.4).
    pub(super) nodelay: bool,
    /// TCP_CORK: only full segments leave.
    pub(super) cork: bool,
    /// SO_KEEPALIVE (RFC 1122 §4.2.3.6).
    pub(super) keepalive: bool,
    /// TCP_USER_TIMEOUT (RFC 5482): R2 for data.
    pub(super) user_timeout: Option<Duration>,
    /// The DiffServ/ECN byte for our datagrams (IP_TOS, MUST-48).
    pub(super) tos: u8,
}

/// One TCP connection (RFC 9293 §3.3.1 "transmission control block").
///
/// Its state is grouped by concern, each group declared in the file that owns it:
/// `snd` (`send.rs`), `rcv` (`receive.rs`), `opts` (`options.rs`), `ack` (`ack.rs`),
/// `loss` (`recovery.rs`), `tx` (`output.rs`, its fields private there), `timers` and
/// `retry` (`timers.rs`), `fusion` (`fusion.rs`, its fields private there), and the
/// components with files of their own: `cc`, `rtt`, `sb`, `rack`, `prr`, `info_state`.
#[derive(Debug)]
pub struct Tcb {
    pub(super) local: SocketAddrV4,
    pub(super) remote: SocketAddrV4,
    pub(super) state: State,
    /// The tunables this connection started with, shared with every connection made
    /// under the same tunables (copied on the first per-connection change: the
    /// congestion control or keepalive options).
    pub(super) settings: Arc<TcpSettings>,
    /// Opened from a listener.
    pub(super) passive: bool,
    /// Both ends sent SYNs (simultaneous open; such connections are never fused).
    pub(super) simultaneous: bool,

    /// Send sequence variables and the send buffer.
    pub(super) snd: SendSequence,
    /// Receive sequence variables, the receive buffer and out-of-order data.
    pub(super) rcv: ReceiveSequence,
    /// Negotiated options and segment sizes.
    pub(super) opts: Options,
    /// When to acknowledge, and what.
    pub(super) ack: AckState,

    // Congestion control and loss recovery.
    pub(super) cc: Cc,
    /// RTT estimation, the RTO and Karn's timed segment (`rtt.rs`).
    pub(super) rtt: RttEstimator,
    /// The SACK scoreboard (`sack.rs`), allocated at the first SACK block.
    pub(super) sb: LazyScoreboard,
    /// RACK-TLP per-segment state and timers (`rack.rs`).
    pub(super) rack: Rack,
    /// Proportional Rate Reduction in SACK fast recovery (`prr.rs`).
    pub(super) prr: Prr,
    /// Where loss recovery stands.
    pub(super) loss: LossRecovery,
    /// What shapes the segments sent.
    pub(super) tx: Transmit,

    /// Every timer's deadline.
    pub(super) timers: TimerTable,
    /// Retransmission and probing between timer expiries.
    pub(super) retry: Retries,
    /// When the last segment arrived (keepalive idle time, the persist limit).
    pub(super) last_rcv: Instant,
    /// When an invalid ACK was last answered (`tcp_invalid_ratelimit`).
    pub(super) last_invalid_ack: Option<Instant>,

    pub(super) sockopt: SocketOptions,
    /// close() was called: no further reads; data arriving is answered with RST.
    pub(super) app_closed: bool,
    pub(super) rst_pending: bool,
    /// A RST to send in answer to an unacceptable segment: `<SEQ=seq><CTL=RST>`.
    pub(super) rst_reply: Option<SeqNum>,
    /// A soft error (ICMP) reported if the connection later times out (RFC 1122
    /// §4.2.3.9, MUST-56).
    pub(super) soft_error: Option<TcpError>,
    /// R1 was reached: the owner should give IP negative advice (MUST-20).
    pub(super) negative_advice: bool,

    /// TCP Fusion.
    pub(super) fusion: FusionState,

    pub(super) events: Events,
    pub(super) error: Option<TcpError>,
    pub(super) stats: TcbStats,
    /// `tcp_info` counters and chronographs (`info.rs`).
    pub(super) info_state: InfoState,
}

/// The identity and path of a new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnSpec {
    pub local: SocketAddrV4,
    pub remote: SocketAddrV4,
    /// Initial send sequence number (RFC 6528).
    pub iss: SeqNum,
    /// Per-connection timestamp offset (RFC 7323 §7.1).
    pub ts_offset: u32,
    /// MTU of the route to the peer (IP bytes).
    pub mtu: u32,
}

impl Tcb {
    fn new(now: Instant, spec: ConnSpec, set: Arc<TcpSettings>, passive: bool) -> Tcb {
        let pmtu = spec.mtu.clamp(68, 65_535);
        let adv_mss = pmtu
            .saturating_sub(IP_TCP_HEADERS)
            .clamp(set.mss_min.min(65_495), 65_495);
        let rcv_cap = set.rcvbuf.clamp(2048, set.max_buf.max(2048));
        let snd_cap = set.sndbuf.clamp(2048, set.max_buf.max(2048));
        // RFC 7323 §2.3: the smallest shift that lets the window cover the buffer.
        let wanted = rcv_cap.max(set.max_buf);
        let mut rcv_wscale = 0u8;
        while rcv_wscale < MAX_WSCALE && (wanted >> rcv_wscale) > MAX_WINDOW {
            rcv_wscale += 1;
        }
        let mss = adv_mss;
        let cc = Cc::new(set.cc, mss, set.init_cwnd);
        let mut rtt = RttEstimator::new(set.rto_initial, set.rto_min, set.rto_max);
        rtt.set_min_on_variance(set.rto_min_on_variance);
        Tcb {
            local: spec.local,
            remote: spec.remote,
            state: State::Closed,
            passive,
            simultaneous: false,
            snd: SendSequence::new(spec.iss, snd_cap),
            rcv: ReceiveSequence::new(now, rcv_cap),
            opts: Options {
                snd_wscale: 0,
                rcv_wscale: if set.accepts(set.wscale, passive) {
                    rcv_wscale
                } else {
                    0
                },
                ws_ok: false,
                ts_ok: false,
                ts_recent: 0,
                ts_recent_time: now,
                ts_offset: spec.ts_offset,
                sack_ok: false,
                peer_mss: set.mss_def,
                pmtu,
                adv_mss,
                user_mss: None,
                rcv_mss: set.mss_def.min(adv_mss),
            },
            ack: AckState::new(),
            cc,
            rtt,
            sb: LazyScoreboard::default(),
            rack: Rack::new(),
            prr: Prr::default(),
            loss: LossRecovery::new(spec.iss),
            tx: Transmit::new(now, spec.iss),
            timers: TimerTable::new(),
            retry: Retries::default(),
            last_rcv: now,
            last_invalid_ack: None,
            sockopt: SocketOptions::default(),
            app_closed: false,
            rst_pending: false,
            rst_reply: None,
            soft_error: None,
            negative_advice: false,
            fusion: FusionState::default(),
            events: Events::default(),
            error: None,
            stats: TcbStats::default(),
            info_state: InfoState::default(),
            settings: set,
        }
    }

    /// Active open (RFC 9293 §3.10.1): the `Tcb` starts in SYN-SENT and its first
    /// `poll_transmit` yields the SYN.
    pub fn connect(now: Instant, spec: ConnSpec, set: impl Into<Arc<TcpSettings>>) -> Tcb {
        let mut t = Tcb::new(now, spec, set.into(), false);
        t.state = State::SynSent;
        t.opts.sack_ok = t.settings.sack >= 2;
        t.opts.ts_ok = t.settings.tstamp >= 2;
        t
    }

    /// Passive open from a listener (RFC 9293 §3.10.7.2): `syn` is the SYN that arrived
    /// in LISTEN. The `Tcb` starts in SYN-RECEIVED and its first `poll_transmit` yields
    /// the SYN,ACK. Options are accepted as offered (RFC 7323 §2.2, §3.2; RFC 2018 §2).
    pub fn accept(
        now: Instant,
        spec: ConnSpec,
        set: impl Into<Arc<TcpSettings>>,
        syn: &TcpRepr,
    ) -> Tcb {
        let mut t = Tcb::new(now, spec, set.into(), true);
        t.state = State::SynReceived;
        t.rcv.irs = SeqNum(syn.seq);
        t.rcv.nxt = t.rcv.irs + 1;
        t.rcv.adv = t.rcv.nxt;
        t.ack.last_sent = t.rcv.nxt;
        t.apply_syn_options(now, syn);
        // The SYN's window is never scaled (RFC 7323 §2.2).
        t.snd.wnd = u32::from(syn.window);
        t.snd.max_wnd = t.snd.wnd;
        t.snd.wl1 = t.rcv.irs;
        t.snd.wl2 = t.snd.iss;
        t.ack.due = true;
        t
    }

    /// Applies the options of a received SYN (RFC 9293 §3.7.1 MSS; RFC 7323 §2.2, §3.2;
    /// RFC 2018 §2).
    pub(super) fn apply_syn_options(&mut self, now: Instant, syn: &TcpRepr) {
        let o = &syn.options;
        // MSS (RFC 9293 §3.7.1, MUST-14/15): default 536 when absent; RFC 6691: it
        // excludes options.
        self.opts.peer_mss = o.mss.map(u32::from).unwrap_or(self.settings.mss_def);
        // RFC 7323 §2.2, §3.2, RFC 2018 §2: an option is in use when both SYNs carry it:
        // the active side takes it only if it offered it (setting 2), the passive side
        // answers an offer unless the option is off (setting 0).
        match o.window_scale {
            Some(ws) if self.settings.accepts(self.settings.wscale, self.passive) => {
                // RFC 7323 §2.3: a shift above 14 is used as 14.
                self.opts.snd_wscale = ws.min(MAX_WSCALE);
                self.opts.ws_ok = true;
            }
            _ => {
                self.opts.snd_wscale = 0;
                self.opts.rcv_wscale = 0;
                self.opts.ws_ok = false;
            }
        }
        self.opts.sack_ok =
            o.sack_permitted && self.settings.accepts(self.settings.sack, self.passive);
        match o.timestamps {
            Some((tsval, _)) if self.settings.accepts(self.settings.tstamp, self.passive) => {
                self.opts.ts_ok = true;
                self.opts.ts_recent = tsval;
                self.opts.ts_recent_time = now;
            }
            _ => self.opts.ts_ok = false,
        }
        self.update_mss();
        if self.stats.data_segs_out == 0 {
            // RFC 6928 §2 / RFC 5681 §3.1: the initial window counts segments of the MSS
            // actually used, known only now.
            self.cc = Cc::new(self.settings.cc, self.mss(), self.settings.init_cwnd);
        }
    }

    /// Tells congestion control the send MSS after the peer's MSS or the path MTU changed.
    pub(super) fn update_mss(&mut self) {
        let mss = self.mss();
        self.cc.set_mss(mss);
    }

    /// Payload bytes per full segment: the peer's MSS and the path MTU (RFC 9293
    /// §3.7.1), no less than `tcp_mss_min`, minus the options every segment carries
    /// (RFC 6691).
    pub fn mss(&self) -> u32 {
        let by_path = self.opts.pmtu.saturating_sub(IP_TCP_HEADERS);
        let mss = self.opts.peer_mss.min(by_path).max(self.settings.mss_min);
        let mss = self.opts.user_mss.map_or(mss, |u| mss.min(u));
        let opts = if self.opts.ts_ok { 12 } else { 0 };
        mss.saturating_sub(opts).max(1)
    }

    // ----------------------------------------------------------------------------------
    // Application interface.
    // ----------------------------------------------------------------------------------

    /// Appends data to the send buffer (RFC 9293 §3.10.2 SEND). Returns how many bytes
    /// were taken; `Err(WouldBlock)` when the buffer is full. Data is sent by the next
    /// `poll_transmit` calls, subject to the windows, Nagle and cork.
    ///
    /// On a fused connection ([`Tcb::is_fused`]) this takes nothing and returns
    /// `Err(WouldBlock)` (after the usual error checks): fused writes go through
    /// [`Tcb::fused_send`], and the owner unfuses before using the ordinary path.
    pub fn send(&mut self, now: Instant, data: &[u8]) -> Result<usize, TcpError> {
        self.send_inner(now, data, false)
    }

    /// Sends data with the urgent flag (RFC 9293 §3.8.5): the urgent pointer marks the
    /// octet after the last byte taken.
    pub fn send_urgent(&mut self, now: Instant, data: &[u8]) -> Result<usize, TcpError> {
        self.send_inner(now, data, true)
    }

    fn send_inner(&mut self, now: Instant, data: &[u8], urgent: bool) -> Result<usize, TcpError> {
        if let Some(e) = self.error {
            return Err(if e == TcpError::WouldBlock {
                TcpError::BrokenPipe
            } else {
                e
            });
        }
        match self.state {
            State::SynSent | State::SynReceived | State::Established | State::CloseWait => {}
            State::Closed | State::Listen => return Err(TcpError::NotConnected),
            _ => return Err(TcpError::BrokenPipe),
        }
        if self.snd.fin_queued || self.app_closed {
            return Err(TcpError::BrokenPipe);
        }
        if self.fusion.is_fused() {
            // A fused connection sends only through `fused_send` (which needs the peer);
            // the ordinary path takes nothing, so no byte can overtake fused data.
            return Err(TcpError::WouldBlock);
        }
        let space = (self.snd.cap as usize).saturating_sub(self.snd.buf.len());
        // The writer now waits for buffer space (or no longer does), for the
        // send-buffer-limited chronograph (`info.rs`).
        self.info_state.snd_nospace = space < data.len();
        if space == 0 {
            return Err(TcpError::WouldBlock);
        }
        let n = space.min(data.len());
        if n == 0 {
            return Ok(0);
        }
        // RFC 5681 §4.1: restart from the initial window after an idle period.
        if self.settings.slow_start_after_idle
            && self.snd.una == self.snd.nxt
            && self.state.is_synchronized()
            && now.saturating_duration_since(self.tx.last_data_sent()) > self.rtt.rto()
            && self.stats.data_segs_out > 0
        {
            self.cc.on_idle_restart(now);
        }
        self.snd.buf.extend(&data[..n]);
        if urgent {
            self.snd.up = Some(self.snd.buf_seq + self.snd.buf.len() as u32);
        }
        if (self.sockopt.cork || self.tx.more()) && !self.timers.is_armed(Timer::Cork) {
            self.timers
                .set(Timer::Cork, now + self.settings.cork_interval);
        }
        self.tx
            .note_write_end(self.snd.buf_seq + self.snd.buf.len() as u32);
        Ok(n)
    }

    /// Free space in the send buffer.
    pub fn send_space(&self) -> usize {
        if self.snd.fin_queued || self.app_closed {
            return 0;
        }
        (self.snd.cap as usize).saturating_sub(self.snd.buf.len())
    }

    /// Bytes written but not yet acknowledged (or not yet sent).
    /// Free send-buffer space that makes a blocked writer writable again
    /// (`tcp_xmit_lowat`, at most half the buffer).
    pub fn send_lowat(&self) -> usize {
        (self.settings.sndlowat as usize)
            .min(self.snd.cap as usize / 2)
            .max(1)
    }

    /// RFC 5927 §4.1: does an ICMP error quoting sequence number `seq` name one of our
    /// segments in flight (`SND.UNA <= seq < SND.NXT`; in SYN-SENT exactly the ISS)?
    pub fn icmp_quote_valid(&self, seq: u32) -> bool {
        let s = SeqNum(seq);
        if self.state == State::SynSent {
            s == self.snd.una
        } else {
            s.in_range(self.snd.una, self.snd.nxt)
        }
    }

    pub fn send_queued(&self) -> usize {
        self.snd.buf.len()
    }

    /// Bytes of the send buffer not yet sent at all.
    pub fn send_unsent(&self) -> usize {
        let sent = self.snd.nxt.since(self.snd.buf_seq) as usize;
        self.snd.buf.len().saturating_sub(sent)
    }

    /// Reads in-order data (RFC 9293 §3.10.3 RECEIVE). `Ok(0)` means end of stream (the
    /// peer's FIN was received and everything before it read). `Err(WouldBlock)` when
    /// nothing is available yet.
    pub fn recv(&mut self, _now: Instant, buf: &mut [u8]) -> Result<usize, TcpError> {
        let n = self.peek(buf)?;
        if n > 0 {
            self.rcv.buf.drain(..n);
            self.after_read();
        }
        Ok(n)
    }

    /// Like [`Tcb::recv`] but leaves the data in the buffer (MSG_PEEK).
    pub fn peek(&self, buf: &mut [u8]) -> Result<usize, TcpError> {
        if self.rcv.buf.is_empty() {
            if self.rcv.fin || buf.is_empty() {
                return Ok(0);
            }
            if let Some(e) = self.error {
                return Err(e);
            }
            return match self.state {
                State::Closed | State::Listen => Err(TcpError::NotConnected),
                State::TimeWait | State::Closing | State::LastAck | State::CloseWait => Ok(0),
                _ => Err(TcpError::WouldBlock),
            };
        }
        let n = buf.len().min(self.rcv.buf.len());
        let (a, b) = self.rcv.buf.as_slices();
        let na = n.min(a.len());
        buf[..na].copy_from_slice(&a[..na]);
        if n > na {
            buf[na..n].copy_from_slice(&b[..n - na]);
        }
        Ok(n)
    }

    /// In-order bytes ready to read.
    pub fn recv_available(&self) -> usize {
        self.rcv.buf.len()
    }

    /// The peer's FIN has been received (data before it may still be unread).
    pub fn fin_received(&self) -> bool {
        self.rcv.fin
    }

    /// The peer's FIN has been received and all data before it read (EOF).
    pub fn at_eof(&self) -> bool {
        self.rcv.fin && self.rcv.buf.is_empty()
    }

    /// Bytes of unread data before the urgent mark, if urgent data is pending
    /// (for `SIOCATMARK`-style queries).
    pub fn urgent_mark(&self) -> Option<usize> {
        let up = self.rcv.up?;
        let read_upto = self.rcv.off - self.rcv.buf.len() as u64;
        if up <= read_upto {
            return None;
        }
        Some((up - 1 - read_upto) as usize)
    }

    /// After the application read: maybe send a window update (RFC 9293 §3.8.6.2.2).
    fn after_read(&mut self) {
        // Fused: no segments; the owner moves the window with `fused_sync_window`.
        if !self.state.is_synchronized() || self.rcv.fin || self.fusion.is_fused() {
            return;
        }
        let adv = self.rcv.adv.since(self.rcv.nxt);
        // What an ACK could announce: the free buffer, but no more than the window field
        // can carry at our scale (65,535 bytes when the peer did not take window scaling,
        // RFC 7323 §2.3), or the update would repeat the window the peer already has.
        let free = self
            .rcv
            .cap
            .saturating_sub(self.rcv.buf.len() as u32)
            .min(MAX_WINDOW << self.opts.rcv_wscale);
        let threshold = (self.rcv.cap / 2).min(self.opts.rcv_mss.max(1));
        // Announce the opening once it is worth a segment and at least doubles what the
        // peer believes, or whenever the peer sees (nearly) no window at all.
        if free >= adv + threshold && (free >= 2 * adv || adv < self.opts.rcv_mss) {
            self.ack.due = true;
        }
    }

    /// shutdown(SHUT_WR) (RFC 9293 §3.10.4 CLOSE of the sending side): queue a FIN after
    /// the buffered data. The FIN goes out at once (on the last data segment or alone);
    /// it is never held for Nagle or cork.
    pub fn shutdown_write(&mut self, _now: Instant) -> Result<(), TcpError> {
        match self.state {
            State::SynSent => {
                // Nothing was sent: the connection simply goes away.
                self.enter_closed();
                Ok(())
            }
            State::SynReceived | State::Established => {
                self.snd.fin_queued = true;
                self.state = if self.state == State::SynReceived {
                    // RFC 9293: queue the FIN until ESTABLISHED.
                    State::SynReceived
                } else {
                    State::FinWait1
                };
                Ok(())
            }
            State::CloseWait => {
                self.snd.fin_queued = true;
                self.state = State::LastAck;
                Ok(())
            }
            State::Closed | State::Listen => Err(TcpError::NotConnected),
            // Already closing.
            _ => Ok(()),
        }
    }

    /// close(): the application gives up the connection. Unread data makes it a reset
    /// (RFC 2525 §2.17, as Linux does); otherwise a FIN as in [`Tcb::shutdown_write`].
    /// The `Tcb` lives on (FIN_WAIT_2 is bounded by `tcp_fin_wait_2_flush_interval`,
    /// TIME_WAIT by `tcp_time_wait_interval`) until it reports [`Events::CLOSED`].
    pub fn close(&mut self, now: Instant) {
        self.app_closed = true;
        if !self.rcv.buf.is_empty() && self.state.is_synchronized() {
            self.abort(now);
            return;
        }
        self.rcv.buf.clear();
        let _ = self.shutdown_write(now);
        if self.state == State::FinWait2 {
            self.timers
                .set(Timer::State, now + self.settings.fin_wait_2);
        }
    }

    /// Abort (RFC 9293 §3.10.5 ABORT, SO_LINGER 0): send a RST if synchronized and drop
    /// everything.
    pub fn abort(&mut self, _now: Instant) {
        self.app_closed = true;
        match self.state {
            State::SynReceived
            | State::Established
            | State::FinWait1
            | State::FinWait2
            | State::CloseWait => {
                self.rst_pending = true;
            }
            _ => {}
        }
        if self.error.is_none() {
            self.error = Some(TcpError::Aborted);
        }
        self.snd.buf.clear();
        self.rcv.buf.clear();
        self.rcv.ooo.clear();
        if !self.rst_pending {
            self.enter_closed();
        } else {
            self.count_close_transition();
            self.state = State::Closed;
            self.clear_timers();
        }
    }

    /// Moves to CLOSED, stops every timer and tells the owner the `Tcb` can go.
    pub(super) fn enter_closed(&mut self) {
        self.count_close_transition();
        self.state = State::Closed;
        self.clear_timers();
        self.events
            .insert(Events::CLOSED | Events::READABLE | Events::WRITABLE);
    }

    /// Counts a direct transition to CLOSED for the RFC 4022 MIB (call before the state
    /// changes).
    pub(super) fn count_close_transition(&mut self) {
        match self.state {
            State::SynSent | State::SynReceived => self.stats.attempt_fails += 1,
            State::Established | State::CloseWait => self.stats.estab_resets += 1,
            _ => {}
        }
    }

    /// Stops every timer (RACK's two as well) and forgets RACK's records.
    pub(super) fn clear_timers(&mut self) {
        self.timers.stop_all();
        self.retry.probe_pending = false;
        self.rack.clear();
    }

    /// The connection failed with `e` (reported to the application) and is gone.
    pub(super) fn fail(&mut self, e: TcpError) {
        self.error = Some(e);
        self.events.insert(Events::ERROR);
        self.snd.buf.clear();
        self.rcv.ooo.clear();
        self.enter_closed();
    }

    /// The rate to pace this connection at, bits per second: cwnd per smoothed RTT,
    /// twice that in slow start and 1.2 times after, so pacing never holds the window
    /// back (the factors Linux uses). `None` before the first RTT sample.
    pub fn pacing_rate(&self) -> Option<u64> {
        let srtt = self.rtt.srtt().filter(|d| !d.is_zero())?;
        let cwnd = u128::from(self.cc.cwnd());
        let pct: u128 = if self.cc.cwnd() < self.cc.ssthresh() {
            200
        } else {
            120
        };
        let bps = cwnd * 8 * 1_000_000_000 * pct / 100 / srtt.as_nanos().max(1);
        Some(u64::try_from(bps).unwrap_or(u64::MAX).max(1))
    }

    /// TCP_CONGESTION: choose this connection's congestion control (the
    /// `tcp_congestion_control` tunable gives the default). The new algorithm starts from
    /// the initial window: no state is carried between algorithms, so a change
    /// mid-transfer is a conservative restart, like a restart after idle.
    pub fn set_congestion_control(&mut self, alg: CcAlgorithm) {
        if alg == self.settings.cc {
            return;
        }
        Arc::make_mut(&mut self.settings).cc = alg;
        self.cc = Cc::new(alg, self.mss(), self.settings.init_cwnd);
    }

    /// SO_KEEPALIVE (RFC 9293 §3.8.4): probe an idle connection.
    pub fn set_keepalive(&mut self, now: Instant, on: bool) {
        self.sockopt.keepalive = on;
        self.retry.keepalive_sent = 0;
        self.timers.set_or_stop(
            Timer::Keepalive,
            (on && self.state.is_synchronized()).then(|| now + self.settings.keepalive_idle),
        );
    }

    /// Keepalive timing (TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT) all at once; the
    /// timer runs on as it was armed (see [`Tcb::set_keepalive_idle`] for Linux's
    /// TCP_KEEPIDLE).
    pub fn set_keepalive_params(&mut self, idle: Duration, intvl: Duration, probes: u32) {
        let settings = Arc::make_mut(&mut self.settings);
        settings.keepalive_idle = idle.max(Duration::from_millis(1));
        settings.keepalive_intvl = intvl.max(Duration::from_millis(1));
        settings.keepalive_probes = probes.max(1);
    }

    /// TCP_KEEPIDLE (RFC 9293 §3.8.4): the idle time before the first keepalive probe.
    /// With keepalive on and the connection synchronized, the timer is re-armed at once
    /// for the new time, counted from the last segment received (due now if that is
    /// already past), as Linux's `tcp_sock_set_keepidle_locked` does; probes already
    /// sent still count.
    pub fn set_keepalive_idle(&mut self, now: Instant, idle: Duration) {
        Arc::make_mut(&mut self.settings).keepalive_idle = idle.max(Duration::from_millis(1));
        if self.sockopt.keepalive && self.state.is_synchronized() {
            self.timers.set(
                Timer::Keepalive,
                (self.last_rcv + self.settings.keepalive_idle).max(now),
            );
        }
    }

    /// TCP_KEEPINTVL: the time between unanswered keepalive probes (from the next probe
    /// on).
    pub fn set_keepalive_intvl(&mut self, intvl: Duration) {
        Arc::make_mut(&mut self.settings).keepalive_intvl = intvl.max(Duration::from_millis(1));
    }

    /// TCP_KEEPCNT: unanswered probes before the connection is dropped.
    pub fn set_keepalive_probes(&mut self, probes: u32) {
        Arc::make_mut(&mut self.settings).keepalive_probes = probes.max(1);
    }

    /// Keepalive timing in use: (idle, interval, probes); the stack's tunables
    /// (`tcp_keepalive_interval`, `tcp_keepalive_intvl`, `tcp_keepalive_probes`) as the
    /// connection was created unless set on it.
    pub fn keepalive_params(&self) -> (Duration, Duration, u32) {
        (
            self.settings.keepalive_idle,
            self.settings.keepalive_intvl,
            self.settings.keepalive_probes,
        )
    }

    /// SO_KEEPALIVE as set.
    pub fn keepalive(&self) -> bool {
        self.sockopt.keepalive
    }

    /// TCP_USER_TIMEOUT (RFC 9293 §3.8.3 USER TIMEOUT, RFC 5482): abort when sent data
    /// stays unacknowledged this long. `None` uses R2 (`tcp_ip_abort_interval`).
    pub fn set_user_timeout(&mut self, t: Option<Duration>) {
        self.sockopt.user_timeout = t.filter(|d| !d.is_zero());
    }

    /// TCP_MAXSEG (Linux semantics): cap the MSS this end advertises and the segments
    /// it sends at `mss` bytes (RFC 9293 §3.7.1 lets the sender use less than the
    /// peer's MSS). Takes effect on the SYN or SYN,ACK if set before it is sent. Values outside
    /// 88..=32767 are refused with `InvalidInput`, as Linux answers EINVAL.
    pub fn set_user_mss(&mut self, mss: u32) -> Result<(), TcpError> {
        if !(88..=32_767).contains(&mss) {
            return Err(TcpError::InvalidInput);
        }
        self.opts.user_mss = Some(mss);
        if self.stats.segs_out == 0 {
            // Nothing sent yet: the SYN (or SYN,ACK) will carry the lower MSS.
            self.opts.adv_mss = self.opts.adv_mss.min(mss);
        }
        self.update_mss();
        Ok(())
    }

    /// SO_SNDBUF: resize the send buffer (bounded by `tcp_max_buf`).
    pub fn set_send_buffer(&mut self, bytes: usize) {
        let b = (bytes.min(u32::MAX as usize) as u32).clamp(2048, self.settings.max_buf.max(2048));
        self.snd.cap = b.max(self.snd.buf.len().min(u32::MAX as usize) as u32);
    }

    /// The bounds of the out-of-order store, as `set_recv_buffer` sets them: the receive
    /// buffer plus one unit of the largest window scale, `tcp_reass_max_segs` pieces.
    pub(super) fn ooo_limits(&self) -> (usize, usize) {
        (
            self.rcv.cap as usize + (1 << MAX_WSCALE),
            self.settings.reass_max_segs as usize,
        )
    }

    /// SO_RCVBUF: resize the receive buffer (bounded by `tcp_max_buf`; the window never
    /// shrinks below what was already advertised).
    pub fn set_recv_buffer(&mut self, bytes: usize) {
        let b = (bytes.min(u32::MAX as usize) as u32).clamp(2048, self.settings.max_buf.max(2048));
        self.rcv.cap = b;
        self.rcv.ooo.set_limits(
            b as usize + (1 << MAX_WSCALE),
            self.settings.reass_max_segs as usize,
        );
    }

    /// Path MTU reported by ICMP "fragmentation needed" (RFC 1191, RFC 5927 §4.1: the
    /// owner has already checked the quoted sequence number). Only decreases are taken;
    /// outstanding data is resent at the new size without a congestion response.
    pub fn on_path_mtu(&mut self, _now: Instant, mtu: u32) {
        let mtu = mtu.max(68);
        if mtu >= self.opts.pmtu {
            return;
        }
        self.opts.pmtu = mtu;
        self.update_mss();
        if self.snd.una != self.snd.nxt && self.state.is_synchronized() {
            // Resend from snd_una at the new size (Linux tcp_simple_retransmit).
            self.loss.high_rxt = self.snd.una;
            if self.loss.phase == Recovery::Open {
                self.loss.phase = Recovery::Loss;
                self.loss.recover = self.snd.nxt;
            }
            self.rtt.timed = None;
        }
    }

    /// An ICMP destination unreachable (other than "fragmentation needed") names this
    /// connection (RFC 9293 §3.9.2.2, RFC 1122 §4.2.3.9). Protocol and port
    /// unreachable (codes 2, 3) abort a connection that is still opening; every other
    /// code, and any code once established, is a soft error (MUST-56: no abort on codes
    /// 0, 1, 5): it is reported only if the connection later times out, as Linux does.
    pub fn on_unreachable(&mut self, _now: Instant, code: u8) {
        let hard = matches!(code, 2 | 3);
        let opening = matches!(self.state, State::SynSent | State::SynReceived);
        if hard && opening {
            self.fail(TcpError::Refused);
        } else {
            self.soft_error = Some(if hard {
                TcpError::Refused
            } else {
                TcpError::Unreachable
            });
        }
    }

    /// IP_TOS: the DiffServ/ECN byte of the connection's datagrams (MUST-48).
    pub fn set_tos(&mut self, tos: u8) {
        self.sockopt.tos = tos;
    }

    /// The DiffServ/ECN byte for this connection's datagrams.
    pub fn tos(&self) -> u8 {
        self.sockopt.tos
    }

    /// True once after retransmissions reached R1 (three RTOs in a row): the owner should
    /// give the IP layer negative advice, e.g. re-resolve the next hop (MUST-20).
    pub fn take_negative_advice(&mut self) -> bool {
        core::mem::take(&mut self.negative_advice)
    }

    // ----------------------------------------------------------------------------------
    // Accessors.
    // ----------------------------------------------------------------------------------

    /// Events since the last call.
    pub fn poll_events(&mut self) -> Events {
        core::mem::take(&mut self.events)
    }

    /// The pending error, if the connection failed.
    pub fn error(&self) -> Option<TcpError> {
        self.error
    }

    /// Takes the pending error (SO_ERROR).
    pub fn take_error(&mut self) -> Option<TcpError> {
        self.error.take()
    }

    pub fn state(&self) -> State {
        self.state
    }

    pub fn local(&self) -> SocketAddrV4 {
        self.local
    }

    pub fn remote(&self) -> SocketAddrV4 {
        self.remote
    }

    /// True once the `Tcb` is CLOSED and has nothing left to send: the owner may drop it.
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed && !self.rst_pending
    }

    /// Both ends opened actively at once (RFC 9293 §3.5).
    pub fn is_simultaneous_open(&self) -> bool {
        self.simultaneous
    }

    /// The connection was opened by a listener.
    pub fn is_passive(&self) -> bool {
        self.passive
    }

    pub fn stats(&self) -> &TcbStats {
        &self.stats
    }

    /// Which parts of the state that are allocated on first use are held now (an idle
    /// connection, and every fused one, carries only null pointers for most of them).
    /// For tests and memory accounting.
    pub fn lazy_state(&self) -> LazyState {
        let (rack_records, rack_rtx_memory, rack_undo) = self.rack.allocated();
        LazyState {
            rack_records,
            rack_rtx_memory,
            rack_undo,
            sack_scoreboard: self.sb.is_allocated(),
            prr_episode: self.prr.is_allocated(),
            out_of_order: self.rcv.ooo.is_allocated(),
            chrono: self.info_state.chrono.is_some(),
            owed_acks: self.ack.owed.is_allocated(),
        }
    }

    /// `snd.una`, for ICMP validation (RFC 5927 §4.1) and for the fusion hand-off.
    pub fn snd_una(&self) -> SeqNum {
        self.snd.una
    }

    pub fn snd_nxt(&self) -> SeqNum {
        self.snd.nxt
    }

    pub fn rcv_nxt(&self) -> SeqNum {
        self.rcv.nxt
    }

    /// RFC 6191: may a SYN with this sequence number and timestamp reopen the
    /// connection while it is in TIME_WAIT? (Timestamps newer than the last seen, or,
    /// without timestamps, a sequence number above RCV.NXT.)
    pub fn time_wait_accepts_syn(&self, syn: &TcpRepr) -> bool {
        if self.state != State::TimeWait || !syn.flags.syn() || syn.flags.ack() {
            return false;
        }
        match (self.opts.ts_ok, syn.options.timestamps) {
            (true, Some((tsval, _))) => (tsval.wrapping_sub(self.opts.ts_recent) as i32) > 0,
            (true, None) | (false, _) => SeqNum(syn.seq) > self.rcv.nxt,
        }
    }

    /// Bytes received in order and not yet read by the application (the receive queue;
    /// out-of-order data is in [`TcbInfo::ooo_bytes`]).
    pub fn rcv_queued_bytes(&self) -> usize {
        self.rcv.buf.len()
    }

    /// SACKed ranges the scoreboard (RFC 6675 §3) holds now, at most
    /// `tcp_sack_max_ranges`: for tests of crafted SACK blocks.
    pub fn sack_ranges(&self) -> usize {
        self.sb.ranges().count()
    }

    /// A `tcp_info`-like snapshot.
    pub fn info(&self) -> TcbInfo {
        TcbInfo {
            state: self.state,
            local: self.local,
            remote: self.remote,
            snd_una: self.snd.una.raw(),
            snd_nxt: self.snd.nxt.raw(),
            rcv_nxt: self.rcv.nxt.raw(),
            snd_wnd: self.snd.wnd,
            rcv_wnd: self.rcv.adv.since(self.rcv.nxt),
            snd_mss: self.mss(),
            rcv_mss: self.opts.rcv_mss,
            cwnd: self.cc.cwnd(),
            ssthresh: self.cc.ssthresh(),
            srtt: self.rtt.srtt(),
            rttvar: self.rtt.rttvar(),
            rto: self.rtt.rto(),
            min_rtt: self.rtt.min_rtt(),
            unacked: self.snd.nxt.since(self.snd.una),
            sacked: self.sb.sacked_bytes(),
            send_queued: self.snd.buf.len(),
            recv_queued: self.rcv.buf.len(),
            ooo_bytes: self.rcv.ooo.bytes(),
            snd_wscale: self.opts.snd_wscale,
            rcv_wscale: self.opts.rcv_wscale,
            timestamps: self.opts.ts_ok,
            sack: self.opts.sack_ok,
            in_recovery: self.loss.phase != Recovery::Open,
            backoff: self.rtt.backoff(),
            cc: self.cc.name(),
            stats: self.stats,
            fused: self.fusion.is_fused(),
            ca_state: match self.loss.phase {
                Recovery::Fast => CA_RECOVERY,
                Recovery::Loss => CA_LOSS,
                Recovery::Open if self.loss.dupacks > 0 || !self.sb.is_empty() => CA_DISORDER,
                Recovery::Open => CA_OPEN,
            },
            adv_mss: self.opts.adv_mss,
            pmtu: self.opts.pmtu,
            user_mss: self.opts.user_mss,
            window_scaling: self.opts.ws_ok,
            last_data_recv: self.rcv.last_data,
            last_data_sent: self.tx.last_data_sent(),
            bytes_received: self.rcv.off,
            probes: self.retry.persist_backoff.max(self.retry.keepalive_sent),
            lost: self.lost_segments(),
            retrans: self.retrans_segments(),
            reordering: self.rack_info().1,
            delivered: self.info_state.delivered,
            chrono: self
                .info_state
                .chrono
                .as_deref()
                .copied()
                .unwrap_or_default(),
        }
    }

    /// Timestamp clock value for `now` (RFC 7323 §5.4: 1 ms ticks plus the offset).
    pub(super) fn ts_now(&self, now: Instant) -> u32 {
        (now.as_millis() as u32).wrapping_add(self.opts.ts_offset)
    }

    /// The header fields common to every segment this `Tcb` sends.
    pub(super) fn base_repr(&self, seq: SeqNum, flags: TcpFlags) -> TcpRepr {
        TcpRepr {
            src_port: self.local.port(),
            dst_port: self.remote.port(),
            seq: seq.raw(),
            ack: 0,
            flags,
            window: 0,
            urgent: 0,
            options: Default::default(),
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::params::Params;
    use crate::tcp::ChronoState;
    use std::net::Ipv4Addr;

    const A: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 40_000);
    const B: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 80);
    const T0: Instant = Instant::from_secs(10);

    pub(in crate::tcp) fn spec(local: SocketAddrV4, remote: SocketAddrV4, iss: u32) -> ConnSpec {
        ConnSpec {
            local,
            remote,
            iss: SeqNum(iss),
            ts_offset: 0,
            mtu: 1500,
        }
    }

    fn settings() -> TcpSettings {
        TcpSettings::from_params(&Params::default())
    }

    #[test]
    fn user_mss_caps_the_syn_and_the_send_mss() {
        let mut a = Tcb::connect(T0, spec(A, B, 1000), settings());
        assert_eq!(a.set_user_mss(87), Err(TcpError::InvalidInput));
        assert_eq!(a.set_user_mss(32_768), Err(TcpError::InvalidInput));
        assert_eq!(a.info().user_mss, None);
        a.set_user_mss(1100).unwrap();
        let syn = a.poll_transmit(T0).expect("SYN").repr;
        assert_eq!(syn.options.mss, Some(1100));
        let mut b = Tcb::accept(T0, spec(B, A, 5000), settings(), &syn);
        let synack = b.poll_transmit(T0).expect("SYN,ACK").repr;
        assert_eq!(synack.options.mss, Some(1460), "the peer's own MSS");
        a.handle_segment(T0, &synack, &[]);
        let i = a.info();
        assert_eq!((i.adv_mss, i.user_mss, i.pmtu), (1100, Some(1100), 1500));
        // Timestamps were negotiated: 12 option bytes come off every segment.
        assert_eq!(i.snd_mss, 1100 - 12);
        assert!(i.window_scaling && i.timestamps);
        // Once connected the cap still lowers the send MSS (not the advertised one).
        a.set_user_mss(600).unwrap();
        assert_eq!((a.info().snd_mss, a.info().adv_mss), (600 - 12, 1100));
    }

    #[test]
    fn info_reports_ca_state_idle_times_and_bytes_received() {
        let mut a = Tcb::connect(T0, spec(A, B, 1000), settings());
        let syn = a.poll_transmit(T0).expect("SYN").repr;
        let mut b = Tcb::accept(T0, spec(B, A, 5000), settings(), &syn);
        let synack = b.poll_transmit(T0).expect("SYN,ACK").repr;
        a.handle_segment(T0, &synack, &[]);
        let ack = a.poll_transmit(T0).expect("ACK").repr;
        b.handle_segment(T0, &ack, &[]);
        let t1 = T0 + Duration::from_millis(30);
        assert_eq!(a.send(t1, &[7; 300]), Ok(300));
        let (seg, data) = {
            let o = a.poll_transmit(t1).expect("data");
            let mut v = vec![0; o.payload_len()];
            o.copy_payload(&mut v);
            (o.repr, v)
        };
        b.handle_segment(t1, &seg, &data);
        let ia = a.info();
        let ib = b.info();
        assert_eq!((ia.ca_state, ib.ca_state), (CA_OPEN, CA_OPEN));
        assert_eq!(ia.last_data_sent, t1);
        assert_eq!(ib.last_data_recv, t1);
        assert_eq!((ib.bytes_received, ia.bytes_received), (300, 0));
        assert_eq!(ib.probes, 0);
    }

    pub(in crate::tcp) type Seg = (TcpRepr, Vec<u8>);

    /// Everything `t` sends now.
    pub(in crate::tcp) fn drain(t: &mut Tcb, now: Instant) -> Vec<Seg> {
        let mut v = Vec::new();
        while let Some(o) = t.poll_transmit(now) {
            let mut p = vec![0; o.payload_len()];
            o.copy_payload(&mut p);
            v.push((o.repr, p));
            assert!(v.len() < 10_000, "poll_transmit never ends");
        }
        v
    }

    /// Hands `segs` to `t` one by one, collecting what it answers.
    pub(in crate::tcp) fn feed(t: &mut Tcb, now: Instant, segs: &[Seg]) -> Vec<Seg> {
        let mut out = Vec::new();
        for (r, p) in segs {
            t.handle_segment(now, r, p);
            out.extend(drain(t, now));
        }
        out
    }

    /// Two connected `Tcb`s, `a` the client, handshake over at T0 + 10 ms.
    fn pair(set: TcpSettings) -> (Tcb, Tcb) {
        let mut a = Tcb::connect(T0, spec(A, B, 1000), set.clone());
        let syn = drain(&mut a, T0);
        let mut b = Tcb::accept(T0, spec(B, A, 5000), set, &syn[0].0);
        let synack = drain(&mut b, T0);
        let t1 = T0 + Duration::from_millis(10);
        let ack = feed(&mut a, t1, &synack);
        feed(&mut b, t1, &ack);
        (a, b)
    }

    /// `a` writes ten full segments at `t` and sends them.
    fn ten_segments(a: &mut Tcb, t: Instant) -> Vec<Seg> {
        let mss = a.mss() as usize;
        assert_eq!(a.send(t, &vec![7; 10 * mss]), Ok(10 * mss));
        let segs = drain(a, t);
        assert_eq!(segs.len(), 10);
        segs
    }

    #[test]
    fn lost_retrans_and_delivered_with_sack_return_to_zero_after_recovery() {
        let (mut a, mut b) = pair(settings());
        assert!(a.info().sack);
        let i = a.info();
        assert_eq!((i.delivered, i.lost, i.retrans, i.reordering), (1, 0, 0, 3));
        let t = T0 + Duration::from_millis(20);
        let segs = ten_segments(&mut a, t);
        // The first segment is lost; the other nine arrive and are SACKed.
        let t2 = t + Duration::from_millis(10);
        let acks = feed(&mut b, t2, &segs[1..]);
        for (r, p) in &acks {
            a.handle_segment(t2, r, p);
        }
        let i = a.info();
        assert_eq!(i.ca_state, CA_RECOVERY);
        assert_eq!((i.lost, i.retrans), (1, 0), "deemed lost, not yet resent");
        assert_eq!(i.delivered, 1 + 9);
        let rtx = drain(&mut a, t2);
        assert_eq!(rtx.len(), 1);
        assert_eq!(rtx[0].0.seq, segs[0].0.seq);
        let i = a.info();
        assert_eq!((i.lost, i.retrans, i.stats.retrans_segs), (1, 1, 1));
        // The retransmission arrives: everything acknowledged, recovery over.
        let t3 = t2 + Duration::from_millis(10);
        let acks = feed(&mut b, t3, &rtx);
        feed(&mut a, t3, &acks);
        let i = a.info();
        assert_eq!(i.ca_state, CA_OPEN);
        assert_eq!((i.lost, i.retrans, i.delivered), (0, 0, 11));
        assert_eq!(i.reordering, 3, "a retransmitted segment is not reordering");
    }

    #[test]
    fn reordering_grows_with_the_distance_below_the_highest_delivered() {
        let (mut a, mut b) = pair(settings());
        let t = T0 + Duration::from_millis(20);
        let segs = ten_segments(&mut a, t);
        let t2 = t + Duration::from_millis(10);
        // Segment 6 overtakes segments 1-5 (none retransmitted): 6 segments of
        // reordering, and no loss.
        let mut order: Vec<Seg> = vec![segs[5].clone()];
        order.extend(segs[..5].iter().cloned());
        order.extend(segs[6..].iter().cloned());
        let acks = feed(&mut b, t2, &order);
        feed(&mut a, t2, &acks);
        let i = a.info();
        assert_eq!(i.reordering, 6);
        assert_eq!((i.lost, i.retrans, i.ca_state), (0, 0, CA_OPEN));
        assert_eq!(i.delivered, 11);
    }

    #[test]
    fn lost_retrans_and_delivered_without_sack() {
        let mut set = settings();
        set.sack = 0;
        let (mut a, mut b) = pair(set);
        assert!(!a.info().sack);
        let t = T0 + Duration::from_millis(20);
        let segs = ten_segments(&mut a, t);
        let t2 = t + Duration::from_millis(10);
        let dupacks = feed(&mut b, t2, &segs[1..]);
        let mut rtx = Vec::new();
        for (r, p) in &dupacks {
            a.handle_segment(t2, r, p);
            rtx.extend(
                drain(&mut a, t2)
                    .into_iter()
                    .filter(|s| s.0.seq == segs[0].0.seq),
            );
        }
        // NewReno (RFC 6582) repairs the head segment: one lost, one retransmitted.
        let i = a.info();
        assert_eq!(i.ca_state, CA_RECOVERY);
        assert_eq!((i.lost, i.retrans, i.delivered), (1, 1, 1));
        assert_eq!(rtx.len(), 1);
        let t3 = t2 + Duration::from_millis(10);
        let acks = feed(&mut b, t3, &rtx);
        feed(&mut a, t3, &acks);
        let i = a.info();
        assert_eq!(i.ca_state, CA_OPEN);
        assert_eq!((i.lost, i.retrans, i.delivered), (0, 0, 11));
    }

    #[test]
    fn after_a_timeout_everything_outstanding_is_lost_until_acknowledged() {
        let (mut a, mut b) = pair(settings());
        let t = T0 + Duration::from_millis(20);
        let segs = ten_segments(&mut a, t);
        // Nothing is answered: the probe timeout, then the RTO (RFC 6298 §5.4).
        let mut now = t;
        let mut sent = Vec::new();
        for _ in 0..10 {
            if a.info().ca_state == CA_LOSS {
                break;
            }
            now = a.poll_timeout().expect("a timer runs");
            a.handle_timeout(now);
            if a.info().ca_state != CA_LOSS {
                sent.extend(drain(&mut a, now));
            }
        }
        let i = a.info();
        assert_eq!(i.ca_state, CA_LOSS);
        assert_eq!(
            (i.lost, i.retrans),
            (10, 0),
            "every segment lost, none in flight"
        );
        let rtx = drain(&mut a, now);
        assert_eq!(rtx.len(), 1, "a congestion window of one segment");
        assert_eq!((a.info().lost, a.info().retrans), (10, 1));
        // Everything arrives at last.
        let later = now + Duration::from_millis(10);
        let mut all = segs.clone();
        all.extend(sent);
        all.extend(rtx);
        let acks = feed(&mut b, later, &all);
        feed(&mut a, later, &acks);
        let i = a.info();
        assert_eq!(i.ca_state, CA_OPEN);
        assert_eq!((i.lost, i.retrans, i.delivered), (0, 0, 11));
    }

    /// A client `Tcb` (no timestamps, MSS 1000) whose peer's SYN,ACK offered `win`.
    fn client(win: u16) -> Tcb {
        let mut set = settings();
        set.tstamp = 1;
        let mut a = Tcb::connect(T0, spec(A, B, 1000), set);
        drain(&mut a, T0);
        let mut synack = a.base_repr(SeqNum(5000), TcpFlags::SYN | TcpFlags::ACK);
        (synack.src_port, synack.dst_port) = (B.port(), A.port());
        synack.ack = 1001;
        synack.window = win;
        synack.options.mss = Some(1000);
        a.handle_segment(T0, &synack, &[]);
        drain(&mut a, T0);
        assert_eq!(a.state(), State::Established);
        a
    }

    /// The peer acknowledges up to `ack` and offers `win`.
    fn peer_ack(a: &mut Tcb, now: Instant, ack: u32, win: u16) -> Vec<Seg> {
        let mut r = a.base_repr(SeqNum(5001), TcpFlags::ACK);
        (r.src_port, r.dst_port) = (B.port(), A.port());
        r.ack = ack;
        r.window = win;
        a.handle_segment(now, &r, &[]);
        drain(a, now)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn chrono_counts_receive_window_limited_and_busy_time() {
        let mut a = client(0);
        let t1 = T0 + ms(10);
        assert_eq!(a.info().chrono.busy_time(t1), Duration::ZERO);
        assert_eq!(a.send(t1, &[1; 1000]), Ok(1000));
        assert!(drain(&mut a, t1).is_empty(), "the window is closed");
        let c = a.info().chrono;
        assert_eq!(c.rwnd_limited_time(t1 + ms(100)), ms(100));
        assert_eq!(c.busy_time(t1 + ms(100)), ms(100));
        // The window opens: the data goes out and waits 30 ms for its ACK.
        let t2 = t1 + ms(100);
        assert_eq!(peer_ack(&mut a, t2, 1001, 2000).len(), 1);
        let t3 = t2 + ms(30);
        assert!(peer_ack(&mut a, t3, 2001, 2000).is_empty());
        // Idle from then on: the totals stay.
        let c = a.info().chrono;
        let later = t3 + ms(500);
        assert_eq!(c.current, None);
        assert_eq!(c.rwnd_limited_time(later), ms(100));
        assert_eq!(c.busy_time(later), ms(130));
        assert_eq!(c.sndbuf_limited_time(later), Duration::ZERO);
    }

    #[test]
    fn chrono_counts_send_buffer_limited_time_only_with_room_to_send() {
        let mut a = client(60_000);
        a.set_nodelay(true);
        a.set_send_buffer(2048);
        let t1 = T0 + ms(10);
        // All 2048 bytes fit in the congestion window: the writer waits for space
        // with nothing left to send.
        assert_eq!(a.send(t1, &[1; 4000]), Ok(2048));
        assert_eq!(drain(&mut a, t1).len(), 3);
        assert_eq!(
            a.info().chrono.current.map(|c| c.0),
            Some(ChronoState::SndbufLimited)
        );
        let t2 = t1 + ms(50);
        assert!(peer_ack(&mut a, t2, 1001 + 2048, 60_000).is_empty());
        let c = a.info().chrono;
        assert_eq!(c.current, None);
        assert_eq!(c.sndbuf_limited_time(t2 + ms(100)), ms(50));
        assert_eq!(c.busy_time(t2 + ms(100)), ms(50));
        // A write that fits is not limited by the buffer: busy only.
        assert_eq!(a.send(t2, &[1; 1000]), Ok(1000));
        drain(&mut a, t2);
        assert_eq!(
            a.info().chrono.current.map(|c| c.0),
            Some(ChronoState::Busy)
        );
    }

    #[test]
    fn chrono_is_busy_not_buffer_limited_when_the_congestion_window_is_full() {
        let mut a = client(60_000);
        a.set_nodelay(true);
        a.set_send_buffer(2048);
        // A congestion window of one segment (after an RTO, RFC 5681 §3.1).
        a.cc = Cc::new(a.settings.cc, a.mss(), 1);
        let t1 = T0 + ms(10);
        assert_eq!(a.send(t1, &[1; 4000]), Ok(2048));
        assert_eq!(drain(&mut a, t1).len(), 1);
        assert_eq!(
            a.info().chrono.current.map(|c| c.0),
            Some(ChronoState::Busy)
        );
    }
}
