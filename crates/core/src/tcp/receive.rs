//! The receive side of a connection's state: RFC 9293's receive sequence variables
//! (§3.3.1), the receive buffer and the data held out of order.
//!
//! # Invariants
//! * `off` is the stream offset of `nxt`; out-of-order data is held in `ooo` at stream
//!   offsets above `off`, never beyond the advertised right edge `adv`.
//! * The receive side never holds more than the advertised window (plus the rounding of
//!   window scaling).

use super::assembler::OutOfOrder;
use super::seq::SeqNum;
use crate::time::Instant;
use std::collections::VecDeque;

/// Receive sequence variables (RFC 9293 §3.3.1), the receive buffer and out-of-order data.
#[derive(Debug)]
pub(super) struct ReceiveSequence {
    /// Initial receive sequence number (IRS).
    pub(super) irs: SeqNum,
    /// Next sequence number expected (RCV.NXT).
    pub(super) nxt: SeqNum,
    /// Right edge of the window last advertised (never moves left, RFC 9293 §3.8.6.2.2).
    pub(super) adv: SeqNum,
    /// The stream offset of `nxt`: data bytes received in order.
    pub(super) off: u64,
    /// In-order data the application has not read yet.
    pub(super) buf: VecDeque<u8>,
    /// The receive buffer's size (SO_RCVBUF).
    pub(super) cap: u32,
    /// Data held out of order, with the offset of a FIN that arrived out of order and
    /// the most recently received out-of-order stream offsets, for SACK block order (RFC
    /// 2018 §4); allocated when the first segment arrives out of order.
    pub(super) ooo: OutOfOrder,
    /// The peer's FIN has been received in order.
    pub(super) fin: bool,
    /// Stream offset one past the last urgent octet announced by the peer.
    pub(super) up: Option<u64>,
    /// When in-order data last arrived (or the handshake completed).
    pub(super) last_data: Instant,
}

impl ReceiveSequence {
    /// Nothing received yet; the buffer empty and sized `cap`.
    pub(super) fn new(now: Instant, cap: u32) -> ReceiveSequence {
        ReceiveSequence {
            irs: SeqNum(0),
            nxt: SeqNum(0),
            adv: SeqNum(0),
            off: 0,
            buf: VecDeque::new(),
            cap,
            ooo: OutOfOrder::default(),
            fin: false,
            up: None,
            last_data: now,
        }
    }
}
