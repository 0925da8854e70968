//! Where loss recovery stands (RFC 6675 §5, RFC 6582, RFC 6298 §5): the phase, its
//! recovery point, how far retransmission has reached, and the duplicate-ACK count.
//! The decisions are in `input.rs` (entering and leaving recovery on ACKs), `output.rs`
//! (what to retransmit) and `timers.rs` (the RTO); RACK-TLP's records are in `rack.rs`.

use super::seq::SeqNum;

/// Where loss recovery stands (RFC 6675 §5, RFC 6582, RFC 6298 §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Recovery {
    /// No loss being repaired.
    Open,
    /// Fast recovery after duplicate ACKs or SACK loss detection, until `recover` is acked.
    Fast,
    /// Retransmitting after an RTO, until `recover` is acked.
    Loss,
}

/// Loss-recovery state of one connection.
#[derive(Debug)]
pub(super) struct LossRecovery {
    pub(super) phase: Recovery,
    /// RFC 6675 RecoveryPoint / RFC 6582 "recover".
    pub(super) recover: SeqNum,
    /// Everything in [snd.una, high_rxt) has been retransmitted in this episode.
    pub(super) high_rxt: SeqNum,
    /// Duplicate ACKs in a row (RFC 5681 §3.2).
    pub(super) dupacks: u32,
    /// NewReno (no SACK) fast-recovery window (RFC 6582 §3.2, with inflation).
    pub(super) reno_cwnd: u32,
    /// Retransmit the first unacknowledged segment at the next chance, whatever the
    /// congestion window says (fast retransmit, NewReno partial ACK, RTO, path MTU).
    pub(super) rtx_head: bool,
    /// ssthresh was already lowered for the current run of RTOs.
    pub(super) rto_reduced: bool,
}

impl LossRecovery {
    pub(super) fn new(iss: SeqNum) -> LossRecovery {
        LossRecovery {
            phase: Recovery::Open,
            recover: iss,
            high_rxt: iss,
            dupacks: 0,
            reno_cwnd: 0,
            rtx_head: false,
            rto_reduced: false,
        }
    }
}
