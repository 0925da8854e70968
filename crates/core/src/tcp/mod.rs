//! TCP (RFC 9293) as a pure state machine.
//!
//! # Design
//! One [`Tcb`] (transmission control block) per connection holds everything about that
//! connection: the RFC 9293 state, send and receive sequence variables, the send buffer,
//! the receive buffer and out-of-order [`assembler::Assembler`], the RTT estimator
//! ([`rtt`]), congestion control ([`cc`]), the SACK [`sack::Scoreboard`] and all of the
//! connection's timers. A `Tcb` is driven by exactly three kinds of input and nothing
//! else:
//!
//! * a segment that IP has already validated and demultiplexed to it
//!   ([`Tcb::handle_segment`]),
//! * an application call ([`Tcb::send`], [`Tcb::recv`], [`Tcb::shutdown_write`],
//!   [`Tcb::close`], [`Tcb::abort`], socket options),
//! * the passage of time ([`Tcb::handle_timeout`] once `now` reaches [`Tcb::poll_timeout`]).
//!
//! and produces segments ([`Tcb::poll_transmit`]), events ([`Tcb::poll_events`]) and its
//! next deadline. It never reads a clock, never allocates per segment on the receive fast
//! path beyond buffering data, and never panics whatever the input: sequence arithmetic is
//! modular ([`seq::SeqNum`]) and every length taken from the wire is checked.
//!
//! A `Tcb` knows nothing of threads, demultiplexing tables or IP routing. The owner (the
//! single-threaded [`crate::host::Host`] in the core, or a squeue in the runtime) finds
//! the `Tcb` for a segment, passes the segment in, and wraps what comes out in IP.
//!
//! # Counters
//! Each `Tcb` counts its own traffic in [`TcbStats`]; owners add those into MIB-II style
//! totals when they report or when the `Tcb` goes away. No counter is shared between
//! connections, so no TCP work touches shared state.

pub mod assembler;
pub mod cc;
pub mod endpoint;
pub mod isn;
pub mod rtt;
pub mod sack;
pub mod seq;
pub mod syncookie;

mod ack;
pub mod fused_flow;
mod fusion;
mod info;
mod input;
mod options;
mod output;
mod prr;
pub mod rack;
mod receive;
mod recovery;
mod send;
pub mod tcb;
pub mod timers;

pub use endpoint::{Endpoint, EndpointStats, ListenVerdict};
pub use fused_flow::FusedFlow;
pub use fusion::FuseRefusal;
pub use info::{Chrono, ChronoState};
pub use seq::SeqNum;
pub use tcb::{
    LazyState, Outgoing, Tcb, TcbInfo, TcbStats, CA_DISORDER, CA_LOSS, CA_OPEN, CA_RECOVERY,
};
pub use timers::{Timer, TimerTable};

use crate::params::Params;
use crate::tcp::cc::CcAlgorithm;
use core::fmt;
use core::time::Duration;

/// The connection states of RFC 9293 §3.3.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    Closed,
    Listen,
    SynSent,
    SynReceived,
    Established,
    FinWait1,
    FinWait2,
    CloseWait,
    Closing,
    LastAck,
    TimeWait,
}

impl State {
    /// The name netstat prints.
    pub fn name(self) -> &'static str {
        match self {
            State::Closed => "CLOSED",
            State::Listen => "LISTEN",
            State::SynSent => "SYN_SENT",
            State::SynReceived => "SYN_RCVD",
            State::Established => "ESTABLISHED",
            State::FinWait1 => "FIN_WAIT_1",
            State::FinWait2 => "FIN_WAIT_2",
            State::CloseWait => "CLOSE_WAIT",
            State::Closing => "CLOSING",
            State::LastAck => "LAST_ACK",
            State::TimeWait => "TIME_WAIT",
        }
    }

    /// The states in which data or our FIN may be outstanding: ESTABLISHED and
    /// CLOSE-WAIT (we may still send), FIN-WAIT-1, CLOSING and LAST-ACK (our FIN not yet
    /// acknowledged).
    pub fn may_have_outstanding(self) -> bool {
        matches!(
            self,
            State::Established
                | State::CloseWait
                | State::FinWait1
                | State::Closing
                | State::LastAck
        )
    }

    /// The states of RFC 9293 in which both ISNs are known ("synchronized states").
    pub fn is_synchronized(self) -> bool {
        !matches!(
            self,
            State::Closed | State::Listen | State::SynSent | State::SynReceived
        )
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a connection failed, as the application sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpError {
    /// The peer answered the SYN with a RST (ECONNREFUSED).
    Refused,
    /// The peer reset an established connection (ECONNRESET).
    Reset,
    /// Retransmissions or keepalives went unanswered (ETIMEDOUT).
    TimedOut,
    /// The local side aborted (ECONNABORTED).
    Aborted,
    /// An ICMP error made the destination unreachable (EHOSTUNREACH).
    Unreachable,
    /// The call is not valid in the current state (ENOTCONN).
    NotConnected,
    /// Writing after shutdown(Write) or after the connection closed (EPIPE).
    BrokenPipe,
    /// No buffer space now; try again later (EAGAIN).
    WouldBlock,
    /// An argument is invalid (EINVAL).
    InvalidInput,
}

impl TcpError {
    /// The `std::io::ErrorKind` the kernel's errno maps to.
    pub fn kind(self) -> std::io::ErrorKind {
        use std::io::ErrorKind as K;
        match self {
            TcpError::Refused => K::ConnectionRefused,
            TcpError::Reset => K::ConnectionReset,
            TcpError::TimedOut => K::TimedOut,
            TcpError::Aborted => K::ConnectionAborted,
            TcpError::Unreachable => K::HostUnreachable,
            TcpError::NotConnected => K::NotConnected,
            TcpError::BrokenPipe => K::BrokenPipe,
            TcpError::WouldBlock => K::WouldBlock,
            TcpError::InvalidInput => K::InvalidInput,
        }
    }
}

impl fmt::Display for TcpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            TcpError::Refused => "connection refused",
            TcpError::Reset => "connection reset by peer",
            TcpError::TimedOut => "connection timed out",
            TcpError::Aborted => "connection aborted",
            TcpError::Unreachable => "host unreachable",
            TcpError::NotConnected => "not connected",
            TcpError::BrokenPipe => "broken pipe",
            TcpError::WouldBlock => "operation would block",
            TcpError::InvalidInput => "invalid argument",
        };
        f.write_str(s)
    }
}

impl std::error::Error for TcpError {}

impl From<TcpError> for std::io::Error {
    fn from(e: TcpError) -> Self {
        std::io::Error::new(e.kind(), e)
    }
}

/// Readiness and life-cycle events a `Tcb` reports to its owner (a bit set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Events(pub u32);

impl Events {
    /// The handshake completed (ESTABLISHED).
    pub const CONNECTED: Events = Events(1);
    /// Data (or EOF) can be read.
    pub const READABLE: Events = Events(2);
    /// Send-buffer space crossed the low-water mark.
    pub const WRITABLE: Events = Events(4);
    /// The connection failed; see [`Tcb::error`].
    pub const ERROR: Events = Events(8);
    /// The `Tcb` reached CLOSED and can be dropped by its owner.
    pub const CLOSED: Events = Events(16);
    /// Urgent data was announced (RFC 9293 §3.8.5).
    pub const URGENT: Events = Events(32);

    pub fn contains(self, e: Events) -> bool {
        self.0 & e.0 == e.0
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    pub fn insert(&mut self, e: Events) {
        self.0 |= e.0;
    }
}

impl core::ops::BitOr for Events {
    type Output = Events;
    fn bitor(self, o: Events) -> Events {
        Events(self.0 | o.0)
    }
}

/// The largest TCP payload of one large segment: its IPv4 datagram (20-byte header, the
/// largest TCP header of 60 bytes) still fits the 65,535 bytes of the total-length field
/// (RFC 791 §3.1).
pub const LSO_MAX: u32 = 65_535 - 20 - 60;

/// The tunables a connection uses, copied from [`Params`] when it is created.
#[derive(Debug, Clone, PartialEq)]
pub struct TcpSettings {
    pub rto_initial: Duration,
    pub rto_min: Duration,
    pub rto_max: Duration,
    /// `rto_min` bounds 4·RTTVAR rather than the whole RTO (Linux).
    pub rto_min_on_variance: bool,
    /// R2 for established connections (RFC 9293 §3.8.3).
    pub abort_interval: Duration,
    /// R2 for SYNs.
    pub abort_cinterval: Duration,
    pub delack: Duration,
    pub time_wait: Duration,
    pub fin_wait_2: Duration,
    pub keepalive_idle: Duration,
    pub keepalive_intvl: Duration,
    pub keepalive_probes: u32,
    pub init_cwnd: u32,
    pub cc: CcAlgorithm,
    pub slow_start_after_idle: bool,
    /// 0 never, 1 when offered, 2 offer too.
    pub sack: u32,
    /// Window scaling (RFC 7323 §2): 0 never, 1 when offered, 2 offer too.
    pub wscale: u32,
    /// Timestamps (RFC 7323 §3): 0 never, 1 when offered, 2 offer too.
    pub tstamp: u32,
    pub dupthresh: u32,
    /// RACK loss detection (RFC 8985 §6, `tcp_recovery`).
    pub rack: bool,
    /// Tail loss probes (RFC 8985 §7, `tcp_tlp`).
    pub tlp: bool,
    pub mss_def: u32,
    pub mss_min: u32,
    pub cork_interval: Duration,
    pub naglim: u32,
    /// PSH every this many new-data segments of a burst (0: only when the queue empties).
    pub push_segs: u32,
    /// A coalesced run of in-order segments draws one ACK (Linux's GRO "stretch ACK")
    /// instead of the ones its segments would have drawn (`tcp_gro_stretch_acks`).
    pub gro_stretch_acks: bool,
    /// The largest payload of one large segment (LSO, `ip_lso_outbound`): 0 = off, one
    /// MSS per segment; otherwise [`LSO_MAX`]. A connection starts with large segments
    /// off: its owner turns them on with [`Tcb::set_lso_max`] (this value, or less per
    /// route or device) where its device path splits them (GSO) or passes them whole
    /// (TSO).
    pub lso_max: u32,
    pub invalid_ratelimit: Duration,
    pub reass_max_segs: u32,
    pub sack_max_ranges: u32,
    pub sndbuf: u32,
    pub sndlowat: u32,
    pub rcvbuf: u32,
    pub max_buf: u32,
}

impl TcpSettings {
    /// Whether a SYN option with setting `level` (`sack`, `wscale`, `tstamp`: 0 never,
    /// 1 when offered, 2 offer too) is taken from the peer's SYN: on a passive open when
    /// it is not off, on an active open only when we offered it (RFC 7323 §2.2, §3.2;
    /// RFC 2018 §2: an option is used only if both SYNs carry it).
    pub fn accepts(&self, level: u32, passive: bool) -> bool {
        if passive {
            level >= 1
        } else {
            level >= 2
        }
    }

    /// The TCP settings of a stack's current tunables.
    pub fn from_params(p: &Params) -> Self {
        let ms = Params::ms;
        TcpSettings {
            rto_initial: ms(p.tcp_rexmit_interval_initial),
            rto_min: ms(p.tcp_rexmit_interval_min),
            rto_max: ms(p.tcp_rexmit_interval_max),
            rto_min_on_variance: p.tcp_rexmit_min_on_variance,
            abort_interval: ms(p.tcp_ip_abort_interval),
            abort_cinterval: ms(p.tcp_ip_abort_cinterval),
            delack: ms(p.tcp_deferred_ack_interval),
            time_wait: ms(p.tcp_time_wait_interval),
            fin_wait_2: ms(p.tcp_fin_wait_2_flush_interval),
            keepalive_idle: ms(p.tcp_keepalive_interval),
            keepalive_intvl: ms(p.tcp_keepalive_intvl),
            keepalive_probes: p.tcp_keepalive_probes,
            init_cwnd: p.tcp_init_cwnd,
            cc: p.tcp_congestion_control,
            slow_start_after_idle: p.tcp_slow_start_after_idle,
            sack: p.tcp_sack_permitted,
            wscale: p.tcp_wscale_always,
            tstamp: p.tcp_tstamp_always,
            dupthresh: p.tcp_dupack_fast_retransmit,
            rack: p.tcp_recovery,
            tlp: p.tcp_tlp,
            mss_def: p.tcp_mss_def_ipv4,
            mss_min: p.tcp_mss_min,
            cork_interval: ms(p.tcp_cork_interval),
            naglim: p.tcp_naglim_def,
            push_segs: p.tcp_push_segs,
            gro_stretch_acks: p.tcp_gro_stretch_acks,
            lso_max: if p.ip_lso_outbound { LSO_MAX } else { 0 },
            invalid_ratelimit: ms(p.tcp_invalid_ratelimit),
            reass_max_segs: p.tcp_reass_max_segs,
            sack_max_ranges: p.tcp_sack_max_ranges,
            sndbuf: p.tcp_xmit_hiwat,
            sndlowat: p.tcp_xmit_lowat,
            rcvbuf: p.tcp_recv_hiwat,
            max_buf: p.tcp_max_buf,
        }
    }
}

impl Default for TcpSettings {
    fn default() -> Self {
        TcpSettings::from_params(&Params::default())
    }
}
