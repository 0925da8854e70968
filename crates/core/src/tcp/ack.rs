//! When to acknowledge (RFC 9293 §3.8.6.3, RFC 1122 §4.2.3.2, RFC 5681 §4.2): the
//! ACK owed now, the bytes received since the last ACK, Linux's quick-ACK budget, the
//! ACKs owed for the pieces of a coalesced segment, and the D-SACK to report (RFC 2883).

use super::seq::SeqNum;
use std::collections::VecDeque;

/// Linux's quick-ACK budget at connection start and after idle.
pub(super) const QUICKACK_SEGMENTS: u32 = 16;

/// Most ACKs one coalesced segment can leave owed (`AckState::owed`); 64 KiB of
/// 1448-byte pieces owe at most 44.
pub(super) const MAX_OWED_ACKS: usize = 64;

/// Acknowledgment state of one connection.
#[derive(Debug)]
pub(super) struct AckState {
    /// An ACK is owed now (not delayed).
    pub(super) due: bool,
    /// Data bytes received since the last ACK was sent.
    pub(super) unacked_bytes: u32,
    /// Segments still to be acknowledged at once (Linux's quick-ACK mode).
    pub(super) quickack: u32,
    /// ACKs the pieces of a coalesced segment (`handle_segment_gro`) would have drawn
    /// before its last one, still to be sent (acknowledgment numbers, in order), so the
    /// peer sees the ACKs it would have seen. At most [`MAX_OWED_ACKS`]; unallocated
    /// until a coalesced segment arrives.
    pub(super) owed: OwedAcks,
    /// The acknowledgment number of the last segment sent (RFC 7323 §4.3 Last.ACK.sent).
    pub(super) last_sent: SeqNum,
    /// A duplicate range to report as D-SACK in the next ACK (RFC 2883).
    pub(super) dsack: Option<(SeqNum, SeqNum)>,
}

impl AckState {
    pub(super) fn new() -> AckState {
        AckState {
            due: false,
            unacked_bytes: 0,
            quickack: QUICKACK_SEGMENTS,
            owed: OwedAcks::default(),
            last_sent: SeqNum(0),
            dsack: None,
        }
    }
}

/// The ACKs owed for the pieces of coalesced segments (`AckState::owed`), in order: a
/// deque allocated at the first one (and kept, as its buffer would be), so that a
/// connection that never received a coalesced segment carries a null pointer.
/// (Boxed so that the field is one pointer, not a deque's four words.)
#[derive(Debug, Default)]
#[allow(clippy::box_collection)]
pub(super) struct OwedAcks(Option<Box<VecDeque<SeqNum>>>);

impl OwedAcks {
    pub(super) fn len(&self) -> usize {
        self.0.as_deref().map_or(0, VecDeque::len)
    }

    pub(super) fn push_back(&mut self, ack: SeqNum) {
        self.0.get_or_insert_with(Box::default).push_back(ack);
    }

    pub(super) fn pop_front(&mut self) -> Option<SeqNum> {
        self.0.as_deref_mut()?.pop_front()
    }

    pub(super) fn is_allocated(&self) -> bool {
        self.0.is_some()
    }
}
