//! What the two SYNs negotiated and the segment sizes that follow from it: window
//! scaling and timestamps (RFC 7323), SACK (RFC 2018), the MSS (RFC 9293 §3.7.1, RFC
//! 6691) and the path MTU it is cut to (RFC 1191).
//!
//! The options are fixed once the handshake ends; the sizes move with the path MTU
//! and TCP_MAXSEG.

use crate::time::Instant;

/// Negotiated options, timestamp state and segment sizes of one connection.
#[derive(Debug)]
pub(super) struct Options {
    /// The shift of the peer's windows (RFC 7323 §2.3); 0 without window scaling.
    pub(super) snd_wscale: u8,
    /// The shift of the windows ember advertises.
    pub(super) rcv_wscale: u8,
    /// Window scaling was negotiated (both SYNs carried the option).
    pub(super) ws_ok: bool,
    /// Timestamps were negotiated (RFC 7323 §3.2).
    pub(super) ts_ok: bool,
    /// TS.Recent: the timestamp to echo (RFC 7323 §4.3), and when it was taken (§5.5).
    pub(super) ts_recent: u32,
    pub(super) ts_recent_time: Instant,
    /// Per-connection timestamp offset (RFC 7323 §7.1).
    pub(super) ts_offset: u32,
    /// SACK was negotiated (RFC 2018 §2).
    pub(super) sack_ok: bool,
    /// The MSS the peer announced (536 if it announced none, RFC 9293 §3.7.1).
    pub(super) peer_mss: u32,
    /// Path MTU (IP bytes).
    pub(super) pmtu: u32,
    /// MSS we advertise.
    pub(super) adv_mss: u32,
    /// TCP_MAXSEG: the application's cap on both MSS values (`None`: no cap).
    pub(super) user_mss: Option<u32>,
    /// Estimated size of the peer's full segments, for the ACK-every-second-segment rule.
    pub(super) rcv_mss: u32,
}
