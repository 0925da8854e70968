//! The send side of a connection's state: RFC 9293's send sequence variables (§3.3.1)
//! and the send buffer they index.
//!
//! # Invariants
//! * `una <= nxt`; `buf[0]` is the octet with sequence `buf_seq`, and `buf_seq == una`
//!   once the SYN is acknowledged (before that `iss + 1`).
//! * The FIN, once queued (`fin_queued`), has sequence `buf_seq + buf.len()`.
//! * `buf.len() <= cap` (the application's writes stop at the send buffer's size).

use super::seq::SeqNum;
use std::collections::VecDeque;

/// Send sequence variables (RFC 9293 §3.3.1) and the send buffer.
#[derive(Debug)]
pub(super) struct SendSequence {
    /// Initial send sequence number (ISS).
    pub(super) iss: SeqNum,
    /// Oldest unacknowledged sequence number (SND.UNA).
    pub(super) una: SeqNum,
    /// Next new sequence number to send (SND.NXT; retransmissions do not move it).
    pub(super) nxt: SeqNum,
    /// The peer's window, unscaled (SND.WND).
    pub(super) wnd: u32,
    /// Segment sequence number used for the last window update (SND.WL1).
    pub(super) wl1: SeqNum,
    /// Segment acknowledgment number used for the last window update (SND.WL2).
    pub(super) wl2: SeqNum,
    /// The largest window the peer has offered (RFC 9293 §3.8.6.2.1, for SWS avoidance).
    pub(super) max_wnd: u32,
    /// Urgent pointer to send: the sequence number of the octet after the urgent data.
    pub(super) up: Option<SeqNum>,
    /// Written, not yet acknowledged data; `buf[0]` has sequence `buf_seq`.
    pub(super) buf: VecDeque<u8>,
    pub(super) buf_seq: SeqNum,
    /// The send buffer's size (SO_SNDBUF).
    pub(super) cap: u32,
    /// The application shut down writing: a FIN follows the buffered data.
    pub(super) fin_queued: bool,
}

impl SendSequence {
    /// Nothing sent yet: every variable at `iss`, the buffer empty and sized `cap`.
    pub(super) fn new(iss: SeqNum, cap: u32) -> SendSequence {
        SendSequence {
            iss,
            una: iss,
            nxt: iss,
            wnd: 0,
            wl1: SeqNum(0),
            wl2: iss,
            max_wnd: 0,
            up: None,
            buf: VecDeque::new(),
            buf_seq: iss + 1,
            cap,
            fin_queued: false,
        }
    }
}
