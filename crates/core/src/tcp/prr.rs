//! Proportional Rate Reduction (RFC 9937, which obsoletes RFC 6937) for SACK fast
//! recovery.
//!
//! Without PRR, entering fast recovery sets `cwnd = ssthresh` and whatever
//! `ssthresh - pipe` allows leaves at once, in a burst, while nothing at all may be sent
//! as long as `pipe > ssthresh`. PRR instead spreads the window reduction over the
//! recovery round: each ACK releases data in proportion to what it reported delivered.
//!
//! - On entry (RFC 9937 §6.1): `prr_delivered = prr_out = 0` and `RecoverFS`, the bytes
//!   that may be delivered during recovery: outstanding data before the triggering ACK
//!   less what was SACKed before it.
//! - Per ACK (§6.2): `DeliveredData` = change in SND.UNA + change in SACKed bytes; if it
//!   is zero nothing changes. Otherwise `prr_delivered += DeliveredData` and
//!   - while `pipe > ssthresh` (proportional part):
//!     `sndcnt = ceil(prr_delivered * ssthresh / RecoverFS) - prr_out`;
//!   - else the reduction bound: PRR-CRB `sndcnt = max(prr_delivered - prr_out,
//!     DeliveredData)`, plus one SMSS (PRR-SSRB, the slow-start reduction bound) on a
//!     "safe" ACK that advanced SND.UNA and indicated no further loss, capped by
//!     `ssthresh - pipe`;
//!   - `sndcnt` is at least one SMSS while nothing was sent yet (the fast retransmit);
//!   - `cwnd = pipe + sndcnt`.
//! - Every byte sent in recovery, retransmission or new data, adds to `prr_out`.
//! - Recovery ends with `cwnd = ssthresh` (the congestion controller's recovery exit).
//!
//! The controller's `cwnd` (NewReno or CUBIC) stays at `ssthresh` during recovery; PRR
//! only bounds what output may send (`Tcb::prr_allowance`). Linux works in segments and
//! uses the pre-recovery cwnd as RecoverFS; ember follows the RFC in bytes (the two agree
//! when the flight filled the window). Without SACK, ember keeps RFC 6582's inflated
//! window.
//!
//! Memory: the episode's variables are read only during SACK fast recovery and all set
//! when it starts (§6.1), so they are allocated then and dropped once the connection is
//! idle again (`Tcb::release_idle_state`); a connection carries only a pointer and the
//! per-ACK RecoverFS candidate.

use super::cc::CongestionControl;
use super::recovery::Recovery;
use super::seq::SeqNum;
use super::tcb::Tcb;

/// PRR state of one connection: the current fast recovery episode's variables,
/// allocated when it starts (`None`: no episode since the connection was last idle).
#[derive(Debug, Clone, Default)]
pub struct Prr {
    episode: Option<Box<Episode>>,
    /// For the ACK being processed: RecoverFS should it start recovery (outstanding
    /// bytes less those SACKed, both before the ACK).
    ack_fs: Option<u32>,
}

/// PRR state of one fast recovery episode (RFC 9937 §6.1).
#[derive(Debug, Clone, Default)]
struct Episode {
    /// RecoverFS (bytes).
    recover_fs: u32,
    /// prr_delivered: bytes delivered since recovery started.
    delivered: u64,
    /// prr_out: bytes sent since recovery started.
    out: u64,
    /// `cwnd = pipe + sndcnt` from the last ACK that delivered data.
    cwnd: u32,
}

impl Prr {
    /// The episode's variables (as at rest, all zero, if none was started).
    fn episode(&mut self) -> &mut Episode {
        self.episode.get_or_insert_with(Box::default)
    }

    /// Drops the episode's variables (no SACK fast recovery is running: nothing reads
    /// them before the next one sets them all).
    pub(super) fn release(&mut self) {
        self.episode = None;
    }

    /// Whether an episode's variables are allocated.
    pub(super) fn is_allocated(&self) -> bool {
        self.episode.is_some()
    }
}

/// RFC 9937 §6.2: the bytes an ACK may release (`sndcnt`).
///
/// `delivered` is this ACK's DeliveredData, already added to `prr_delivered`;
/// `safe_ack` says SND.UNA advanced and no further loss was indicated.
#[allow(clippy::too_many_arguments)]
pub fn sndcnt(
    recover_fs: u32,
    ssthresh: u32,
    prr_delivered: u64,
    prr_out: u64,
    pipe: u32,
    delivered: u32,
    safe_ack: bool,
    mss: u32,
) -> u32 {
    let cnt = if pipe > ssthresh {
        // Proportional rate reduction, rounded up to whole segments (as the RFC's
        // segment-counting form and Linux: the first delivered segment already lets one
        // go out).
        let fs = u64::from(recover_fs.max(1));
        let smss = u64::from(mss.max(1));
        let target = prr_delivered
            .saturating_mul(u64::from(ssthresh))
            .div_ceil(fs)
            .div_ceil(smss)
            .saturating_mul(smss);
        target.saturating_sub(prr_out)
    } else {
        // PRR-CRB, or PRR-SSRB on a safe ACK, limited by ssthresh - pipe.
        let mut cnt = prr_delivered
            .saturating_sub(prr_out)
            .max(u64::from(delivered));
        if safe_ack {
            cnt += u64::from(mss);
        }
        cnt.min(u64::from(ssthresh - pipe))
    };
    let mut cnt = cnt.min(u64::from(u32::MAX)) as u32;
    if prr_out == 0 && cnt == 0 {
        // Force the fast retransmit when recovery starts.
        cnt = mss;
    }
    cnt
}

impl Tcb {
    /// PRR governs output: SACK fast recovery.
    pub(super) fn prr_active(&self) -> bool {
        self.loss.phase == Recovery::Fast && self.opts.sack_ok
    }

    /// Before an acceptable ACK is processed: remember RecoverFS should it start
    /// recovery.
    pub(super) fn prr_ack_start(&mut self) {
        let fs = self.in_flight().saturating_sub(self.sb.sacked_bytes());
        self.prr.ack_fs = Some(fs);
    }

    /// RFC 9937 §6.1: fast recovery starts (from an ACK or from a timer).
    pub(super) fn prr_init(&mut self) {
        let fs = self
            .prr
            .ack_fs
            .unwrap_or_else(|| self.in_flight().saturating_sub(self.sb.sacked_bytes()));
        let ep = Episode {
            recover_fs: fs,
            delivered: 0,
            out: 0,
            // Until an ACK delivers data: only the fast retransmit.
            cwnd: self.pipe().saturating_add(self.mss()),
        };
        self.prr.ack_fs = None;
        *self.prr.episode() = ep;
    }

    /// RFC 9937 §6.2, after the ACK was processed (SND.UNA, SACK, loss marks, recovery
    /// state). `delivered` is the ACK's DeliveredData, `una_advanced` whether it moved
    /// SND.UNA, `new_loss` whether it marked further data lost.
    pub(super) fn prr_on_ack(&mut self, delivered: u32, una_advanced: bool, new_loss: bool) {
        self.prr.ack_fs = None;
        if !self.prr_active() || delivered == 0 {
            return;
        }
        let pipe = self.pipe();
        let (ssthresh, mss) = (self.cc.ssthresh(), self.mss());
        let ep = self.prr.episode();
        ep.delivered = ep.delivered.saturating_add(u64::from(delivered));
        let cnt = sndcnt(
            ep.recover_fs,
            ssthresh,
            ep.delivered,
            ep.out,
            pipe,
            delivered,
            una_advanced && !new_loss,
            mss,
        );
        ep.cwnd = pipe.saturating_add(cnt);
    }

    /// Bytes output may send now under PRR (`cwnd - pipe`); `None` outside SACK fast
    /// recovery.
    pub(super) fn prr_allowance(&self) -> Option<u32> {
        self.prr_active().then(|| {
            let cwnd = self.prr.episode.as_deref().map_or(0, |e| e.cwnd);
            cwnd.saturating_sub(self.pipe())
        })
    }

    /// Output sent `[seq, end)` (data, retransmitted or new, FIN included).
    pub(super) fn prr_on_send(&mut self, seq: SeqNum, end: SeqNum) {
        if self.prr_active() && end > seq {
            let ep = self.prr.episode();
            ep.out = ep.out.saturating_add(u64::from(end.since(seq)));
            self.stats.prr_segs += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u32 = 1000;

    #[test]
    fn proportional_part_releases_ssthresh_over_recover_fs() {
        // RFC 9937 §6.2 with RecoverFS = 20 segments and ssthresh = 10 (Reno's halving):
        // one segment out for every two delivered while pipe > ssthresh.
        let (fs, ss) = (20 * MSS, 10 * MSS);
        let mut out = 0u64;
        let mut delivered = 0u64;
        let mut sent = Vec::new();
        for _ in 0..6 {
            delivered += u64::from(MSS);
            let pipe = 19 * MSS; // well above ssthresh
            let n = sndcnt(fs, ss, delivered, out, pipe, MSS, false, MSS);
            out += u64::from(n);
            sent.push(n / MSS);
        }
        assert_eq!(sent, [1, 0, 1, 0, 1, 0]);
        assert_eq!(out, 3 * u64::from(MSS));
    }

    #[test]
    fn proportional_part_rounds_up_cubic() {
        // CUBIC's 0.7: RecoverFS 10, ssthresh 7: ceil(1*7/10) = 1, ceil(2*7/10) = 2,
        // ceil(3*7/10) = 3, ceil(4*7/10) = 3.
        let (fs, ss) = (10 * MSS, 7 * MSS);
        let mut out = 0u64;
        let mut sent = Vec::new();
        for k in 1..=4u64 {
            let n = sndcnt(fs, ss, k * u64::from(MSS), out, 9 * MSS, MSS, false, MSS);
            out += u64::from(n);
            sent.push(n / MSS);
        }
        assert_eq!(sent, [1, 1, 1, 0]);
    }

    #[test]
    fn crb_conserves_packets_and_ssrb_adds_one_on_a_safe_ack() {
        let (fs, ss) = (10 * MSS, 7 * MSS);
        // pipe <= ssthresh, catching up: prr_delivered - prr_out = 3 segments, but
        // ssthresh - pipe allows only 2.
        assert_eq!(
            sndcnt(fs, ss, 5 * 1000, 2 * 1000, 5 * MSS, MSS, false, MSS),
            2 * MSS
        );
        // In step: CRB sends what was delivered (2 segments)...
        assert_eq!(
            sndcnt(fs, ss, 3 * 1000, 1000, 2 * MSS, 2 * MSS, false, MSS),
            2 * MSS
        );
        // ...SSRB one more when SND.UNA advanced without new loss.
        assert_eq!(
            sndcnt(fs, ss, 3 * 1000, 1000, 2 * MSS, 2 * MSS, true, MSS),
            3 * MSS
        );
        // At ssthresh nothing more goes out.
        assert_eq!(sndcnt(fs, ss, 3 * 1000, 1000, 7 * MSS, MSS, true, MSS), 0);
    }

    #[test]
    fn first_ack_forces_the_fast_retransmit() {
        // An ACK whose proportional share is nothing: with nothing sent yet PRR still
        // allows one SMSS.
        assert_eq!(
            sndcnt(100 * MSS, 7 * MSS, 0, 0, 50 * MSS, 0, false, MSS),
            MSS
        );
        // Not once something was sent.
        assert_eq!(
            sndcnt(
                100 * MSS,
                7 * MSS,
                0,
                u64::from(MSS),
                50 * MSS,
                0,
                false,
                MSS
            ),
            0
        );
    }

    #[test]
    fn rfc_example_reno_halving_with_one_loss() {
        // RFC 9937 §5's example: 20 segments outstanding, the first lost, Reno
        // (ssthresh = 10 segments). Each of the 19 ACKs that follow delivers one segment.
        // PRR sends one segment per two ACKs (the retransmission first) while pipe is
        // above ssthresh, so sending never stops and pipe ends at ssthresh with about
        // ssthresh sent in the round.
        let (fs, ss) = (20 * MSS, 10 * MSS);
        let mut delivered = 0u64;
        let mut out = 0u64;
        let mut pipe = 19 * MSS; // the lost segment is not in the pipe
        let mut pattern = Vec::new();
        for _ in 0..19 {
            delivered += u64::from(MSS);
            pipe -= MSS; // this ACK's segment left the network
            let n = sndcnt(fs, ss, delivered, out, pipe, MSS, false, MSS);
            out += u64::from(n);
            pipe += n;
            pattern.push(n / MSS);
        }
        assert_eq!(&pattern[..6], &[1, 0, 1, 0, 1, 0]);
        assert!(pattern.iter().all(|&n| n <= 1));
        assert_eq!(pattern.iter().filter(|&&n| n == 0).count(), 9);
        assert_eq!(pipe, ss);
        assert_eq!(out, 10 * u64::from(MSS));
    }
}
