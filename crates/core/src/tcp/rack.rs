//! RACK-TLP loss detection (RFC 8985).
//!
//! # Design
//!
//! ember's send buffer is a byte stream; RACK needs per-segment transmit times. [`Rack`]
//! keeps one record per segment sent and not yet cumulatively acknowledged (RFC 8985 §5.2
//! "per-segment variables"): its sequence range, its latest transmit time, and whether it
//! was ever retransmitted, is SACKed (as a whole: a partly SACKed segment is not
//! delivered), is deemed lost, and has a retransmission in flight. Running byte counts
//! over the records give the RACK view of the pipe (`in flight - SACKed - lost +
//! retransmitted`) in O(1).
//!
//! * RACK (§6): every ACK calls [`Rack::update_delivered`] (§6.2 steps 1-3: RACK.xmit_ts,
//!   RACK.end_seq, RACK.rtt, RACK.fack, reordering detection), DSACKs feed
//!   [`Rack::on_dsack`] (§6.2 step 4: the reordering window multiplier), and
//!   [`Rack::detect_loss`] (§6.2 step 5) marks segments lost and returns the time after
//!   which the next pending segment would be lost: the reorder timer (§6.3).
//! * TLP (§7): the probe timeout is armed after new data is sent or new data is
//!   cumulatively acknowledged (§7.2), the probe sends one new segment or retransmits the
//!   last one (§7.3), at most one per episode, and `Tcb::tlp_on_ack` tells whether the
//!   probe repaired a loss (§7.4), in which case congestion control reduces once.
//!
//! The Tcb glue (`impl Tcb` below) connects these to input (after every acceptable ACK),
//! output (every segment sent, the probe itself) and the timers. While RACK is on (and
//! SACK was negotiated) it replaces the DupThresh rules of RFC 6675 for entering fast
//! recovery and choosing what to retransmit; without SACK the RFC 5681/6582 rules stay.
//!
//! * Undo (RFC 3708 detection, the RFC 4015 §3 response as Linux does it): a RACK-started
//!   recovery snapshots congestion control; if D-SACKs show every retransmission sent
//!   during that episode spurious, cwnd and ssthresh return to at least their prior
//!   values. The snapshot expires one round trip after the recovery ends.
//!
//! Bounds: at most [`MAX_SEGS`] records (beyond it new segments merge into the last
//! record, and RFC 6675's DupThresh rules decide losses again while any record is
//! merged, since RACK cannot see a loss inside one); at twice that, a retransmission
//! merges another pair of records in the same state to make room for its split;
//! everything is O(records) at worst per ACK and allocation-free after the deque has
//! grown; nothing panics.
//!
//! Memory: what only matters while data is outstanding (the records, RACK.xmit_ts,
//! RACK.end_seq, RACK.fack, the DSACK round and the TLP episode: `Flight`) is
//! allocated when the first segment is recorded and dropped once the connection is idle
//! again (nothing outstanding, no recovery: `Tcb::release_idle_state` after every ACK;
//! [`Rack::release_idle`] says why that changes no behaviour). The ring of recent
//! retransmissions is allocated at the first retransmission and kept (a D-SACK may
//! report one after everything was acknowledged), the undo snapshot lives while its
//! episode may still be undone. What every connection carries is the two timers,
//! RACK.rtt and the reordering state: a connection that never sent data (every fused
//! one) allocates nothing here.

use super::cc::{Cc, CongestionControl};
use super::output::{Kind, Plan};
use super::recovery::Recovery;
use super::sack::Scoreboard;
use super::seq::SeqNum;
use super::tcb::Tcb;
use super::timers::Timer;
use crate::time::Instant;
use core::time::Duration;
use std::collections::VecDeque;

/// Records kept before new segments merge into the last one.
pub const MAX_SEGS: usize = 4096;
/// RFC 8985 §7.2: the worst-case delayed-ACK time added to the PTO when one segment is
/// in flight (WCDelAckT).
const WC_DEL_ACK: Duration = Duration::from_millis(200);
/// RFC 8985 §7.2: the PTO when no RTT sample exists yet.
const PTO_NO_RTT: Duration = Duration::from_secs(1);
/// RFC 8985 §6.2 step 4: recoveries a grown reordering window persists for.
const REO_WND_PERSIST: u32 = 16;
/// Largest reordering degree (in segments) reported.
const MAX_REORDERING: u32 = 300;
/// Records a connection's idle RACK state keeps room for (see [`Rack::release_idle`]).
const KEEP_RECORDS: usize = 16;
/// Retransmitted ranges remembered for DSACK-based spurious retransmission detection.
const RTX_MEMORY: usize = 8;

/// One segment sent and not yet cumulatively acknowledged (RFC 8985 §5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seg {
    start: SeqNum,
    end: SeqNum,
    /// Segment.xmit_ts: the latest (re)transmission.
    xmit: Instant,
    /// Segment.retransmitted: ever retransmitted.
    retrans: bool,
    /// SACKed as a whole (delivered).
    sacked: bool,
    /// Segment.lost: deemed lost and not delivered since.
    lost: bool,
    /// A retransmission of it is in flight (sent after it was marked lost, or forced).
    rxt_out: bool,
    /// Holds several segments merged by the [`MAX_SEGS`] bound: RACK cannot tell a loss
    /// inside it from a delivery.
    merged: bool,
}

impl Seg {
    fn len(&self) -> u64 {
        u64::from(self.end.since(self.start))
    }
}

/// The part of RACK-TLP's state that matters only while data is outstanding: the
/// per-segment records (RFC 8985 §5.2) with their running sums, RACK.xmit_ts,
/// RACK.end_seq, RACK.fack, the DSACK round (§6.2 step 4) and the TLP episode (§7.4).
/// Allocated when the first segment is recorded; dropped by [`Rack::release_idle`] once
/// nothing is outstanding, the connection is not in recovery and what it holds no longer
/// matters (a later allocation starts from values that behave the same).
#[derive(Debug, Clone)]
struct Flight {
    segs: VecDeque<Seg>,
    // Running sums over `segs`.
    b_total: u64,
    b_sacked: u64,
    /// Lost and not SACKed.
    b_lost: u64,
    /// Retransmission in flight and not SACKed.
    b_rxt: u64,
    n_sacked: u32,
    n_lost: u32,
    /// Records with a retransmission in flight and not SACKed (`tcpi_retrans`).
    n_rxt: u32,
    /// Records holding merged segments.
    n_merged: u32,
    /// RACK.xmit_ts / RACK.end_seq: the most recently sent delivered segment.
    xmit_ts: Option<Instant>,
    end_seq: SeqNum,
    /// RACK.fack: the highest sequence number delivered.
    fack: Option<SeqNum>,
    /// The DSACK round (§6.2 step 4): SND.NXT when the reordering window last grew.
    dsack_round: Option<SeqNum>,
    /// TLP.end_seq: an episode is in progress (§7.4.1).
    tlp_end_seq: Option<SeqNum>,
    /// TLP.is_retrans.
    tlp_is_retrans: bool,
    /// The probe's own range, to match a DSACK for it.
    tlp_range: (SeqNum, SeqNum),
}

impl Flight {
    fn new() -> Flight {
        Flight {
            segs: VecDeque::new(),
            b_total: 0,
            b_sacked: 0,
            b_lost: 0,
            b_rxt: 0,
            n_sacked: 0,
            n_lost: 0,
            n_rxt: 0,
            n_merged: 0,
            xmit_ts: None,
            end_seq: SeqNum(0),
            fack: None,
            dsack_round: None,
            tlp_end_seq: None,
            tlp_is_retrans: false,
            tlp_range: (SeqNum(0), SeqNum(0)),
        }
    }

    /// Whether dropping this state changes nothing once the connection is idle with
    /// SND.UNA = SND.NXT = `snd.una` (see [`Rack::release_idle`]).
    fn idle(&self, snd_una: SeqNum) -> bool {
        self.segs.is_empty()
            && self.b_total == 0
            && self.b_sacked == 0
            && self.b_lost == 0
            && self.b_rxt == 0
            && self.n_sacked == 0
            && self.n_lost == 0
            && self.n_rxt == 0
            && self.n_merged == 0
            && self.tlp_end_seq.is_none()
            && self.dsack_round.is_none_or(|r| snd_una >= r)
    }

    /// Adds (`add`) or removes a record's contribution to the running sums.
    fn account(&mut self, s: &Seg, add: bool) {
        let len = s.len();
        let upd = |v: &mut u64, on: bool| {
            if on {
                *v = if add {
                    v.saturating_add(len)
                } else {
                    v.saturating_sub(len)
                };
            }
        };
        upd(&mut self.b_total, true);
        upd(&mut self.b_sacked, s.sacked);
        upd(&mut self.b_lost, s.lost && !s.sacked);
        upd(&mut self.b_rxt, s.rxt_out && !s.sacked);
        let cnt = |v: &mut u32, on: bool| {
            if on {
                *v = if add {
                    v.saturating_add(1)
                } else {
                    v.saturating_sub(1)
                };
            }
        };
        cnt(&mut self.n_sacked, s.sacked);
        cnt(&mut self.n_lost, s.lost && !s.sacked);
        cnt(&mut self.n_rxt, s.rxt_out && !s.sacked);
        cnt(&mut self.n_merged, s.merged);
    }

    /// Replaces record `i` (keeping the sums right).
    fn set(&mut self, i: usize, new: Seg) {
        if let Some(old) = self.segs.get(i).copied() {
            self.account(&old, false);
            self.account(&new, true);
            self.segs[i] = new;
        }
    }

    /// Records new data `[start, end)` sent at `now` (not overlapping what was sent).
    fn push(&mut self, start: SeqNum, end: SeqNum, now: Instant) {
        let seg = Seg {
            start,
            end,
            xmit: now,
            retrans: false,
            sacked: false,
            lost: false,
            rxt_out: false,
            merged: false,
        };
        if self.segs.len() >= MAX_SEGS {
            // Bound: extend the last record instead (its transmit time becomes now).
            if let Some(i) = self.segs.len().checked_sub(1) {
                let mut last = self.segs[i];
                if last.end == start && !last.sacked && !last.lost {
                    last.end = end;
                    last.xmit = now;
                    last.merged = true;
                    self.set(i, last);
                    return;
                }
            }
            if self.segs.len() >= 2 * MAX_SEGS {
                return;
            }
        }
        self.account(&seg, true);
        self.segs.push_back(seg);
    }

    /// Splits record `i` at `at` (strictly inside it); false if the bound forbids it.
    fn split(&mut self, i: usize, at: SeqNum) -> bool {
        if self.segs.len() >= 2 * MAX_SEGS {
            return false;
        }
        let Some(s) = self.segs.get(i).copied() else {
            return false;
        };
        if !(at > s.start && at < s.end) {
            return false;
        }
        self.account(&s, false);
        let lo = Seg { end: at, ..s };
        let hi = Seg { start: at, ..s };
        self.account(&lo, true);
        self.account(&hi, true);
        self.segs[i] = lo;
        self.segs.insert(i + 1, hi);
        true
    }

    /// Index of the first record ending after `seq`.
    fn find(&self, seq: SeqNum) -> usize {
        self.segs.partition_point(|s| s.end <= seq)
    }

    /// Merges one pair of adjacent records in the same state (preferring SACKed ones,
    /// whose transmit times no longer matter), neither of them record `keep`, to make
    /// room at the bound. Returns `keep`'s index afterwards, or `None` if no pair fits.
    fn compact(&mut self, keep: usize) -> Option<usize> {
        // Two SACKed records merge whatever their other marks (delivered: those no
        // longer count).
        let same = |a: &Seg, b: &Seg| {
            a.end == b.start
                && a.sacked == b.sacked
                && (a.sacked
                    || (a.lost == b.lost && a.rxt_out == b.rxt_out && a.retrans == b.retrans))
        };
        let n = self.segs.len();
        let pick = |want_sacked: bool| {
            (0..n.saturating_sub(1)).find(|&j| {
                j != keep
                    && j + 1 != keep
                    && self.segs[j].sacked == want_sacked
                    && same(&self.segs[j], &self.segs[j + 1])
            })
        };
        let j = pick(true).or_else(|| pick(false))?;
        let (a, b) = (self.segs[j], self.segs[j + 1]);
        let m = Seg {
            end: b.end,
            xmit: a.xmit.max(b.xmit),
            // Conservative marks should the receiver renege on the SACK.
            retrans: a.retrans || b.retrans,
            lost: a.lost || b.lost,
            rxt_out: a.rxt_out && b.rxt_out,
            // A loss hides in a merged record unless all of it was delivered.
            merged: a.merged || b.merged || !a.sacked,
            ..a
        };
        self.account(&b, false);
        self.segs.remove(j + 1);
        self.set(j, m);
        Some(if j + 1 < keep { keep - 1 } else { keep })
    }

    /// Splits record `i` at `at`, merging another pair of records first if the bound
    /// requires. Returns record `i`'s (lower part's) index and whether it was split.
    fn split_room(&mut self, i: usize, at: SeqNum) -> (usize, bool) {
        if self.split(i, at) {
            return (i, true);
        }
        let inside = self.segs.get(i).is_some_and(|s| at > s.start && at < s.end);
        if !inside {
            return (i, false);
        }
        match self.compact(i) {
            Some(k) => (k, self.split(k, at)),
            None => (i, false),
        }
    }

    /// Marks `[start, end)` retransmitted at `now` (splitting records at its edges).
    fn retransmitted(&mut self, start: SeqNum, end: SeqNum, now: Instant) {
        let mut i = self.find(start);
        if self.segs.get(i).is_some_and(|s| s.start < start) {
            let (k, ok) = self.split_room(i, start);
            i = if ok { k + 1 } else { k };
        }
        while let Some(s) = self.segs.get(i).copied() {
            if s.start >= end {
                break;
            }
            if s.end > end {
                i = self.split_room(i, end).0;
            }
            let s = self.segs[i];
            self.set(
                i,
                Seg {
                    xmit: now,
                    retrans: true,
                    rxt_out: true,
                    ..s
                },
            );
            i += 1;
        }
    }
}

/// Recently retransmitted ranges, for DSACK-based spurious retransmission detection
/// (RFC 3708): a ring of [`RTX_MEMORY`] entries `(start, end, sent during the undo
/// episode)`, allocated at the first retransmission and kept (a DSACK for a
/// retransmission may arrive after everything was acknowledged).
#[derive(Debug, Clone)]
struct RtxMemory {
    ranges: [(SeqNum, SeqNum, bool); RTX_MEMORY],
    /// Entries in use (the first `len`).
    len: u8,
    /// The entry the next retransmission overwrites once all are in use.
    next: u8,
}

impl RtxMemory {
    fn new() -> RtxMemory {
        RtxMemory {
            ranges: [(SeqNum(0), SeqNum(0), false); RTX_MEMORY],
            len: 0,
            next: 0,
        }
    }

    fn used(&mut self) -> &mut [(SeqNum, SeqNum, bool)] {
        &mut self.ranges[..usize::from(self.len)]
    }

    fn push(&mut self, entry: (SeqNum, SeqNum, bool)) {
        if usize::from(self.len) < RTX_MEMORY {
            self.ranges[usize::from(self.len)] = entry;
            self.len += 1;
        } else {
            self.ranges[usize::from(self.next) % RTX_MEMORY] = entry;
        }
        self.next = ((usize::from(self.next) + 1) % RTX_MEMORY) as u8;
    }
}

/// Congestion control as it was before the last RACK-started recovery, the
/// retransmissions of that episode not yet shown spurious by a DSACK, and SND.UNA when
/// it began (older DSACKs belong to earlier episodes). RFC 3708 detection; the response
/// restores the state, as RFC 4015 §3 does for Eifel.
#[derive(Debug, Clone)]
struct Undo {
    cc: Cc,
    retrans: u32,
    floor: SeqNum,
    /// When the snapshot expires: one round trip after its recovery ended (a D-SACK
    /// later than that no longer says anything about the episode's response).
    expiry: Option<Instant>,
}

/// RACK-TLP state of one connection (RFC 8985 §5.2, §7).
///
/// What every connection carries is small: the two timers, RACK.rtt, the reordering
/// history (§6.2 step 3 and 4) and three pointers. The per-segment records and the
/// per-busy-period variables (`Flight`) are allocated when the first segment is
/// recorded and dropped when the connection is idle again ([`Rack::release_idle`]);
/// the ring of recent retransmissions at the first retransmission; the undo snapshot
/// while a recovery and the round trip after it last. A connection that never sent
/// data (every fused one) allocates none of them.
#[derive(Debug, Clone)]
pub struct Rack {
    /// Records and the state of the current busy period (`None`: idle, as fresh).
    flight: Option<Box<Flight>>,
    /// Recently retransmitted ranges (`None`: nothing retransmitted yet).
    rtx: Option<Box<RtxMemory>>,
    /// The undo snapshot of the last RACK-started recovery (RFC 3708, RFC 4015 §3).
    undo: Option<Box<Undo>>,
    /// RACK.rtt.
    rtt: Duration,
    /// Reordering degree in segments (at least DupThresh), for `tcp_info`.
    reordering: u32,
    reo_wnd_mult: u32,
    reo_wnd_persist: u32,
    /// The connection was in recovery at the last ACK (to count recoveries, §6.2 step 4).
    was_in_recovery: bool,
    reordering_seen: bool,
    /// The PTO fired: output sends the probe.
    pub(super) tlp_pending: bool,
}

impl Default for Rack {
    fn default() -> Self {
        Rack::new()
    }
}

/// RFC 8985 §6.2: was segment (t1, s1) sent after segment (t2, s2)?
fn sent_after(t1: Instant, s1: SeqNum, t2: Instant, s2: SeqNum) -> bool {
    t1 > t2 || (t1 == t2 && s1 > s2)
}

impl Rack {
    pub fn new() -> Rack {
        Rack {
            flight: None,
            rtx: None,
            undo: None,
            rtt: Duration::ZERO,
            reordering: 3,
            reo_wnd_mult: 1,
            reo_wnd_persist: 0,
            was_in_recovery: false,
            reordering_seen: false,
            tlp_pending: false,
        }
    }

    /// The busy period's state, allocated on first use.
    fn flight(&mut self) -> &mut Flight {
        self.flight.get_or_insert_with(|| Box::new(Flight::new()))
    }

    /// Forgets every record (e.g. the connection closed).
    pub fn clear(&mut self) {
        *self = Rack {
            reordering_seen: self.reordering_seen,
            reordering: self.reordering,
            ..Rack::new()
        };
    }

    /// The connection is idle: SND.UNA = SND.NXT = `snd.una` and no recovery. Drops the
    /// per-segment state if it holds nothing that matters any more; returns whether
    /// none is held now. Nothing changes in behaviour: no record is left (all were
    /// acknowledged); no TLP episode is open (§7.4); the DSACK round is over (the next
    /// ACK's SND.UNA is at least `snd.una`, which ends it before any DSACK is
    /// considered, §6.2 step 4). RACK.fack (at most `snd.una` now) and RACK.xmit_ts /
    /// RACK.end_seq may go: every segment sent from now on ends above the former and
    /// is sent after the latter, so until a new segment is delivered no segment can be
    /// deemed lost either way (§6.2 step 5 considers only segments sent before
    /// RACK.xmit_ts), and that delivery sets all three as from a fresh start.
    /// RACK.rtt and the reordering state stay.
    ///
    /// "Drops" is done in place: the box is reset to its fresh values and kept, its
    /// record deque shrunk to room for [`KEEP_RECORDS`] records. A request/response
    /// connection is idle after every exchange, and freeing the box there would cost an
    /// allocation and a free per round trip on both ends. A connection that fuses frees
    /// it ([`Rack::release_flight`]).
    pub fn release_idle(&mut self, snd_una: SeqNum) -> bool {
        if let Some(f) = self.flight.as_deref_mut().filter(|f| f.idle(snd_una)) {
            let mut segs = core::mem::take(&mut f.segs);
            segs.shrink_to(KEEP_RECORDS);
            *f = Flight::new();
            f.segs = segs;
        }
        self.flight.is_none()
    }

    /// [`Rack::release_idle`], freeing the box whatever its size (the connection fuses:
    /// no segment will be sent until it unfuses).
    pub fn release_flight(&mut self, snd_una: SeqNum) -> bool {
        if self.flight.as_deref().is_some_and(|f| f.idle(snd_una)) {
            self.flight = None;
        }
        self.flight.is_none()
    }

    /// What is allocated: (the busy period's state, the retransmission ring, the undo
    /// snapshot).
    pub fn allocated(&self) -> (bool, bool, bool) {
        (
            self.flight.is_some(),
            self.rtx.is_some(),
            self.undo.is_some(),
        )
    }

    /// New data `[start, end)` sent at `now` (RFC 8985 §6.1: record the transmit time).
    pub fn on_send(&mut self, start: SeqNum, end: SeqNum, now: Instant) {
        let mut start = start;
        if let Some(last) = self.flight.as_deref().and_then(|f| f.segs.back().copied()) {
            if start < last.end {
                // Overlaps what was sent: that part is a retransmission.
                self.on_retransmit(start, last.end.min(end), now);
                start = last.end;
            }
        }
        if end <= start {
            return;
        }
        self.flight().push(start, end, now);
    }

    /// `[start, end)` was retransmitted at `now`: its records get the new transmit time
    /// and a retransmission in flight (splitting records at the range's edges; at the
    /// bound another pair of records is merged to make room, so bytes outside the range
    /// are not marked, unless no pair can be merged).
    pub fn on_retransmit(&mut self, start: SeqNum, end: SeqNum, now: Instant) {
        if end <= start {
            return;
        }
        if let Some(f) = self.flight.as_deref_mut() {
            f.retransmitted(start, end, now);
        }
        let entry = (start, end, self.undo.is_some());
        self.rtx
            .get_or_insert_with(|| Box::new(RtxMemory::new()))
            .push(entry);
    }

    /// RFC 8985 §6.2 steps 1-3 for one ACK: drops cumulatively acknowledged records,
    /// marks records SACKed as a whole, and for the segments newly delivered updates
    /// RACK.rtt, RACK.xmit_ts/end_seq (skipping ambiguous retransmissions whose RTT is
    /// below the minimum RTT) and RACK.fack, and detects reordering (a segment never
    /// retransmitted delivered below RACK.fack). Returns the number newly delivered.
    pub fn update_delivered(
        &mut self,
        now: Instant,
        snd_una: SeqNum,
        sb: &Scoreboard,
        min_rtt: Option<Duration>,
        mss: u32,
        dupthresh: u32,
    ) -> u32 {
        let Rack {
            flight,
            rtt: rack_rtt,
            reordering,
            reordering_seen,
            ..
        } = self;
        // No records: nothing to deliver, and nothing else changes.
        let Some(f) = flight.as_deref_mut() else {
            return 0;
        };
        let mut newest: Option<(Instant, SeqNum)> = None;
        // RACK.rtt (RFC 8985 §6.2 step 2): of the last unambiguous segment in sequence
        // order (cumulatively acknowledged ones, then SACKed ones), as Linux takes it,
        // rather than of the most recently sent one (the segment that sets
        // RACK.xmit_ts). On an ACK that covers both a retransmission and older original
        // segments (a partial ACK in recovery) this gives the longer RTT, so originals
        // sent with those are not deemed lost on the same ACK.
        let mut last_rtt: Option<Duration> = None;
        let mut delivered = 0u32;
        let mut deliver =
            |fack: &mut Option<SeqNum>, s: &Seg, newest: &mut Option<(Instant, SeqNum)>| {
                delivered += 1;
                // Step 3: reordering.
                let fa = fack.unwrap_or(s.end);
                if s.end >= fa {
                    *fack = Some(s.end);
                } else if !s.retrans {
                    *reordering_seen = true;
                    let degree = fa.since(s.start).div_ceil(mss.max(1));
                    *reordering = (*reordering)
                        .max(degree.min(MAX_REORDERING))
                        .max(dupthresh.min(MAX_REORDERING));
                }
                // Step 2: RACK.rtt from segments whose RTT is unambiguous.
                let rtt = now.saturating_duration_since(s.xmit);
                if s.retrans && min_rtt.is_some_and(|m| rtt < m) {
                    return;
                }
                last_rtt = Some(rtt);
                if newest.is_none_or(|(t, e)| sent_after(s.xmit, s.end, t, e)) {
                    *newest = Some((s.xmit, s.end));
                }
            };
        // Cumulatively acknowledged records.
        while let Some(s) = f.segs.front().copied() {
            if s.end <= snd_una {
                f.segs.pop_front();
                f.account(&s, false);
                if !s.sacked {
                    deliver(&mut f.fack, &s, &mut newest);
                }
            } else {
                if s.start < snd_una {
                    // Partly acknowledged: not delivered yet; trim.
                    f.set(
                        0,
                        Seg {
                            start: snd_una,
                            ..s
                        },
                    );
                }
                break;
            }
        }
        // SACKed records (a merge walk over both sorted lists).
        if !sb.is_empty() || f.n_sacked > 0 {
            let mut ranges = sb.ranges().peekable();
            for i in 0..f.segs.len() {
                let s = f.segs[i];
                while ranges.peek().is_some_and(|&(_, e)| e <= s.start) {
                    ranges.next();
                }
                let covered = ranges
                    .peek()
                    .is_some_and(|&(a, e)| a <= s.start && e >= s.end);
                if covered != s.sacked {
                    f.set(
                        i,
                        Seg {
                            sacked: covered,
                            ..s
                        },
                    );
                    if covered {
                        deliver(&mut f.fack, &s, &mut newest);
                    }
                }
            }
        }
        if f.fack.is_some_and(|fa| fa < snd_una) {
            f.fack = Some(snd_una);
        }
        if let Some(rtt) = last_rtt {
            *rack_rtt = rtt;
        }
        if let Some((t, e)) = newest {
            if f.xmit_ts.is_none_or(|rt| sent_after(t, e, rt, f.end_seq)) {
                f.xmit_ts = Some(t);
                f.end_seq = e;
            }
        }
        delivered
    }

    /// RFC 8985 §6.2 step 4, DSACK part: a DSACK block `d` arrived. Grows the reordering
    /// window multiplier once per round trip, and tells whether the block reports a
    /// retransmission we made recently (a spurious retransmission, RFC 3708 §3): `None`
    /// if not, else whether that retransmission was sent during the current undo
    /// episode (only those can show the episode's response spurious).
    pub fn on_dsack(&mut self, d: (SeqNum, SeqNum), snd_nxt: SeqNum) -> Option<bool> {
        let f = self.flight();
        if f.dsack_round.is_none() {
            f.dsack_round = Some(snd_nxt);
            self.reo_wnd_mult = self.reo_wnd_mult.saturating_add(1).min(64);
            self.reo_wnd_persist = REO_WND_PERSIST;
        }
        for r in self.rtx.as_deref_mut().map_or(&mut [][..], |m| m.used()) {
            if r.1 > r.0 && d.0 >= r.0 && d.1 <= r.1 && d.1 > d.0 {
                let in_episode = r.2;
                *r = (SeqNum(0), SeqNum(0), false);
                // The original arrived after all: the network reorders (a spurious
                // retransmission is the reordering §6.2 step 3 cannot see, because the
                // segment was retransmitted before its original was delivered).
                self.reordering_seen = true;
                return Some(in_episode);
            }
        }
        None
    }

    /// Takes the undo snapshot `cc` as a recovery starts. Retransmissions sent before
    /// belong to no episode: a D-SACK for one of them (e.g. a loss probe whose original
    /// arrived late) says nothing about this episode's retransmissions.
    fn start_undo_episode(&mut self, cc: Cc, snd_una: SeqNum) {
        if let Some(m) = self.rtx.as_deref_mut() {
            for r in m.used() {
                r.2 = false;
            }
        }
        self.undo = Some(Box::new(Undo {
            cc,
            retrans: 0,
            floor: snd_una,
            expiry: None,
        }));
    }

    /// Forgets the undo snapshot.
    fn drop_undo(&mut self) {
        self.undo = None;
    }

    /// RACK's tracking is saturated: some records hold several merged segments (more
    /// than [`MAX_SEGS`] in flight), within which it cannot see a loss.
    pub fn saturated(&self) -> bool {
        self.flight.as_deref().is_some_and(|f| f.n_merged > 0)
    }

    /// The receiver may have reneged (RFC 2018 §8): nothing counts as SACKed any more.
    pub fn clear_sacked(&mut self) {
        let Some(f) = self.flight.as_deref_mut() else {
            return;
        };
        if f.n_sacked == 0 {
            return;
        }
        for i in 0..f.segs.len() {
            let s = f.segs[i];
            if s.sacked {
                f.set(i, Seg { sacked: false, ..s });
            }
        }
    }

    /// RFC 8985 §6.2 step 4: the DSACK round ends once SND.UNA passes it.
    pub fn end_dsack_round(&mut self, snd_una: SeqNum) {
        if let Some(f) = self.flight.as_deref_mut() {
            if f.dsack_round.is_some_and(|r| snd_una >= r) {
                f.dsack_round = None;
            }
        }
    }

    /// RFC 8985 §6.2 step 4: a recovery ended; after 16 without DSACK the reordering
    /// window multiplier returns to 1.
    pub fn on_recovery_end(&mut self) {
        if self.reo_wnd_persist > 0 {
            self.reo_wnd_persist -= 1;
            if self.reo_wnd_persist == 0 {
                self.reo_wnd_mult = 1;
            }
        }
    }

    /// RFC 8985 §6.2 step 4: RACK.reo_wnd. Zero while no reordering was seen and the
    /// sender is in recovery or DupThresh segments are SACKed; otherwise
    /// `min(min_RTT / 4 * reo_wnd_mult, SRTT)`.
    pub fn reo_wnd(
        &self,
        in_recovery: bool,
        dupthresh: u32,
        min_rtt: Option<Duration>,
        srtt: Option<Duration>,
    ) -> Duration {
        if !self.reordering_seen && (in_recovery || self.sacked_segments() >= dupthresh.max(1)) {
            return Duration::ZERO;
        }
        let base = min_rtt.unwrap_or(Duration::ZERO) / 4 * self.reo_wnd_mult;
        match srtt {
            Some(s) => base.min(s),
            None => base,
        }
    }

    /// RFC 8985 §6.2 step 5: marks lost every undelivered segment sent before RACK's
    /// segment whose time `xmit + RACK.rtt + reo_wnd` has passed. Returns how many were
    /// newly marked and the time until the next pending segment would be (the reorder
    /// timer, §6.3), if any.
    pub fn detect_loss(&mut self, now: Instant, reo_wnd: Duration) -> (u32, Option<Duration>) {
        let rack_rtt = self.rtt;
        let Some(f) = self.flight.as_deref_mut() else {
            return (0, None);
        };
        let Some(rx) = f.xmit_ts else {
            return (0, None);
        };
        let mut newly = 0;
        let mut timeout: Option<Duration> = None;
        for i in 0..f.segs.len() {
            let s = f.segs[i];
            if s.sacked || (s.lost && !s.rxt_out) {
                continue;
            }
            if f.b_rxt == 0 && s.xmit >= rx && s.end > f.end_seq {
                // No retransmission in flight: the records left are new data sent in
                // sequence order, none of them before RACK's segment.
                break;
            }
            if !sent_after(rx, f.end_seq, s.xmit, s.end) {
                continue;
            }
            let due = s.xmit + rack_rtt + reo_wnd;
            if due <= now {
                f.set(
                    i,
                    Seg {
                        lost: true,
                        rxt_out: false,
                        ..s
                    },
                );
                newly += 1;
            } else {
                let left = due.saturating_duration_since(now);
                timeout = Some(timeout.map_or(left, |t| t.max(left)));
            }
        }
        (newly, timeout)
    }

    /// RFC 8985 §6.3 on a retransmission timeout: every outstanding segment not SACKed
    /// is lost; nothing of them is in flight any more.
    pub fn mark_all_lost(&mut self) {
        if let Some(f) = self.flight.as_deref_mut() {
            for i in 0..f.segs.len() {
                let s = f.segs[i];
                if !s.sacked {
                    f.set(
                        i,
                        Seg {
                            lost: true,
                            rxt_out: false,
                            ..s
                        },
                    );
                }
            }
        }
    }

    /// The first segment to retransmit: lost, not SACKed, no retransmission in flight;
    /// as (start, length of at most `mss`).
    pub fn next_lost(&self, mss: u32) -> Option<(SeqNum, u32)> {
        let f = self.flight.as_deref()?;
        if f.n_lost == 0 {
            return None;
        }
        f.segs
            .iter()
            .find(|s| s.lost && !s.sacked && !s.rxt_out)
            .map(|s| (s.start, s.end.since(s.start).min(mss.max(1))))
    }

    /// The last segment sent (for the loss probe, §7.3), at most `mss` long at its end.
    pub fn last_segment(&self, mss: u32) -> Option<(SeqNum, u32)> {
        self.flight.as_deref()?.segs.back().map(|s| {
            let len = s.end.since(s.start).min(mss.max(1));
            (s.end - len, len)
        })
    }

    /// The pipe by RACK's marks: bytes outstanding, less SACKed and lost ones, plus
    /// retransmissions in flight (RFC 8985 §9.3 with RFC 6675's pipe idea).
    pub fn pipe(&self) -> u32 {
        self.flight.as_deref().map_or(0, |f| {
            (f.b_total - f.b_sacked.min(f.b_total))
                .saturating_sub(f.b_lost)
                .saturating_add(f.b_rxt)
                .min(u64::from(u32::MAX)) as u32
        })
    }

    /// Segments deemed lost and not delivered (`tcpi_lost`).
    pub fn lost_segments(&self) -> u32 {
        self.flight.as_deref().map_or(0, |f| f.n_lost)
    }

    /// Segments with a retransmission in flight, not SACKed or acknowledged yet
    /// (`tcpi_retrans`).
    pub fn retrans_segments(&self) -> u32 {
        self.flight.as_deref().map_or(0, |f| f.n_rxt)
    }

    /// Segments SACKed as a whole.
    pub fn sacked_segments(&self) -> u32 {
        self.flight.as_deref().map_or(0, |f| f.n_sacked)
    }

    /// Reordering was observed on this connection.
    pub fn reordering_seen(&self) -> bool {
        self.reordering_seen
    }

    /// The reordering degree in segments (at least DupThresh; `tcpi_reordering`).
    pub fn reordering(&self) -> u32 {
        self.reordering
    }

    /// RACK.reo_wnd_mult.
    pub fn reo_wnd_mult(&self) -> u32 {
        self.reo_wnd_mult
    }

    /// Records held.
    pub fn len(&self) -> usize {
        self.flight.as_deref().map_or(0, |f| f.segs.len())
    }

    /// No record held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The open TLP episode (§7.4.1): TLP.end_seq.
    fn tlp_end_seq(&self) -> Option<SeqNum> {
        self.flight.as_deref().and_then(|f| f.tlp_end_seq)
    }

    /// Ends the TLP episode.
    fn end_tlp_episode(&mut self) {
        if let Some(f) = self.flight.as_deref_mut() {
            f.tlp_end_seq = None;
        }
    }
}

impl Tcb {
    /// RACK runs on this connection: enabled and SACK negotiated (RFC 8985 §4 needs
    /// SACK to learn what was delivered).
    pub(super) fn rack_active(&self) -> bool {
        self.settings.rack && self.opts.sack_ok
    }

    /// RACK decides what is lost (replacing RFC 6675's DupThresh rules): it runs and its
    /// records are not merged. With more than [`MAX_SEGS`] segments in flight a loss
    /// inside a merged record is invisible to it, so RFC 6675 (which the SACK
    /// scoreboard keeps exact) decides again until the merged records are gone.
    pub(super) fn rack_loss_detection(&self) -> bool {
        self.rack_active() && !self.rack.saturated()
    }

    fn tlp_active(&self) -> bool {
        self.settings.tlp && self.opts.sack_ok
    }

    pub(super) fn rack_tracking(&self) -> bool {
        self.opts.sack_ok && (self.settings.rack || self.settings.tlp)
    }

    /// Output sent `[seq, end)` (sequence space, FIN included).
    pub(super) fn rack_on_send(&mut self, now: Instant, seq: SeqNum, end: SeqNum, retrans: bool) {
        if !self.rack_tracking() || end <= seq {
            return;
        }
        if retrans {
            self.rack.on_retransmit(seq, end, now);
            if let Some(u) = self.rack.undo.as_deref_mut() {
                u.retrans = u.retrans.saturating_add(1);
            }
        } else {
            self.rack.on_send(seq, end, now);
            // RFC 8985 §7.2: (re)start the PTO after sending new data.
            self.tlp_arm(now);
        }
    }

    /// After an acceptable ACK was processed (SND.UNA, SACK scoreboard, recovery state
    /// already updated). `dsack` is the ACK's D-SACK block, `acked` the bytes it
    /// cumulatively acknowledged.
    pub(super) fn rack_on_ack(
        &mut self,
        now: Instant,
        ack: SeqNum,
        dsack: Option<(SeqNum, SeqNum)>,
        acked: u32,
    ) {
        if !self.rack_tracking() || !self.state.is_synchronized() {
            // No per-segment records: `tcpi_delivered` from the bytes acknowledged.
            if acked > 0 {
                self.count_delivered_bytes(ack - acked);
            }
            return;
        }
        let mss = self.mss();
        let min_rtt = self.rtt.min_rtt();
        let delivered = self.rack.update_delivered(
            now,
            self.snd.una,
            &self.sb,
            min_rtt,
            mss,
            self.settings.dupthresh,
        );
        self.info_state.delivered = self
            .info_state
            .delivered
            .saturating_add(u64::from(delivered));
        self.rack.end_dsack_round(self.snd.una);
        if let Some(d) = dsack {
            if let Some(in_episode) = self.rack.on_dsack(d, self.snd.nxt) {
                self.stats.spurious_rtx += 1;
                if let Some(u) = self.rack.undo.as_deref_mut() {
                    if in_episode && d.0 >= u.floor {
                        u.retrans = u.retrans.saturating_sub(1);
                    }
                }
            }
        }
        self.tlp_on_ack(now, ack, dsack);
        let in_rec = self.loss.phase != Recovery::Open;
        if self.rack.was_in_recovery && !in_rec {
            self.rack.on_recovery_end();
            if self.rack.undo.is_some() {
                // D-SACKs for the episode's retransmissions arrive within a round trip
                // of its end; the snapshot is not kept longer.
                let rtt = self.rtt.srtt().unwrap_or(self.rack.rtt).max(self.rack.rtt);
                if let Some(u) = self.rack.undo.as_deref_mut() {
                    u.expiry = Some(now + rtt);
                }
            }
        }
        self.rack.was_in_recovery = in_rec;
        if self
            .rack
            .undo
            .as_deref()
            .is_some_and(|u| u.expiry.is_some_and(|t| now > t))
        {
            self.rack.drop_undo();
        }
        // Every retransmission of the last RACK recovery was spurious: undo its
        // congestion response once the episode is over (RFC 3708 §3; the response of
        // RFC 4015 §3 as Linux does it: cwnd and ssthresh back to at least their prior
        // values, the rest of the controller's state kept).
        if self.loss.phase == Recovery::Open
            && self.rack.undo.as_ref().is_some_and(|u| u.retrans == 0)
        {
            if let Some(u) = self.rack.undo.take() {
                self.cc.undo_from(&u.cc);
                self.rack.reordering_seen = true;
            }
        }
        if self.rack_active() {
            self.rack_detect(now);
        }
        if acked > 0 {
            // RFC 8985 §7.2: restart the PTO on an ACK of new data.
            self.tlp_arm(now);
        }
    }

    /// RFC 8985 §6.2 step 5 and §6.3: detect losses, arm the reorder timer, and enter
    /// fast recovery when something is lost.
    fn rack_detect(&mut self, now: Instant) {
        let in_rec = self.loss.phase != Recovery::Open;
        let reo = self.rack.reo_wnd(
            in_rec,
            self.settings.dupthresh,
            self.rtt.min_rtt(),
            self.rtt.srtt(),
        );
        let (n, timeout) = self.rack.detect_loss(now, reo);
        self.timers
            .set_or_stop(Timer::RackReorder, timeout.map(|t| now + t));
        if n > 0 {
            self.stats.rack_losses += u64::from(n);
        }
        if self.rack.lost_segments() > 0 && self.loss.phase == Recovery::Open {
            // RFC 8985 §6.2 / RFC 6675 §5: start fast recovery; no probe in recovery.
            let flight = self.in_flight();
            let snapshot = self.cc.clone();
            self.rack.start_undo_episode(snapshot, self.snd.una);
            self.enter_fast_recovery(now, flight);
            // Seen by the next ACK's recovery-end check even if entered on this one.
            self.rack.was_in_recovery = true;
            self.timers.stop(Timer::TailLossProbe);
            self.rack.tlp_pending = false;
        }
    }

    /// RFC 8985 §7.2: schedule a PTO if SACK is on, nothing is SACKed, the connection is
    /// not in recovery, data is in flight and no probe episode is open: 2 SRTT (plus the
    /// worst-case delayed ACK with one segment in flight; 1 s without an RTT sample),
    /// never later than the RTO.
    pub(super) fn tlp_arm(&mut self, now: Instant) {
        self.timers.stop(Timer::TailLossProbe);
        let data_state = self.state.may_have_outstanding();
        if !self.tlp_active()
            || !data_state
            || self.loss.phase != Recovery::Open
            || self.rack.sacked_segments() > 0
            || self.rack.tlp_end_seq().is_some()
            || self.snd.una == self.snd.nxt
        {
            return;
        }
        let pto = match self.rtt.srtt() {
            Some(srtt) => {
                let mut p = srtt * 2;
                if self.in_flight() <= self.mss() {
                    p += WC_DEL_ACK;
                }
                p
            }
            None => PTO_NO_RTT,
        };
        // RFC 8985 §7.2: never later than the RTO would fire; the probe then goes out in
        // its place (and the RTO is rearmed from the probe, §7.3).
        let at = match self.timers.get(Timer::Retransmit) {
            Some(r) => (now + pto).min(r),
            None => now + pto,
        };
        self.timers.set(Timer::TailLossProbe, at);
    }

    /// Data is outstanding on a synchronized connection: the RACK timers have work.
    fn rack_timers_live(&self) -> bool {
        self.state.is_synchronized() && self.snd.una != self.snd.nxt
    }

    /// The reorder timer expired (run by `handle_timeout`).
    pub(super) fn rack_on_reorder_timeout(&mut self, now: Instant) {
        if self.rack_timers_live() && self.rack_active() {
            // RFC 8985 §6.3: RACK_detect_loss_and_arm_timer().
            self.rack_detect(now);
        }
    }

    /// The probe timeout expired (run by `handle_timeout`).
    pub(super) fn rack_on_probe_timeout(&mut self, now: Instant) {
        if self.rack_timers_live()
            && self.tlp_active()
            && self.loss.phase == Recovery::Open
            && self.rack.tlp_end_seq().is_none()
        {
            self.rack.tlp_pending = true;
            // The probe replaces an RTO due now (§7.2); output rearms it (§7.3).
            self.timers.set(Timer::Retransmit, self.rtx_due(now));
        }
    }

    /// RFC 8985 §7.3: the loss probe to send now (one ordinary segment of new data or a
    /// retransmission). New data if any is available and the peer's window allows it
    /// (the congestion window does not apply), else the last segment again. Arms the
    /// RTO, not another PTO.
    pub(super) fn plan_tlp(&mut self, now: Instant) -> Option<Plan> {
        if !core::mem::take(&mut self.rack.tlp_pending) {
            return None;
        }
        if self.snd.una == self.snd.nxt || self.loss.phase != Recovery::Open {
            return None;
        }
        let mss = self.mss();
        let data_end = self.snd.buf_seq + self.snd.buf.len() as u32;
        let unsent = if data_end > self.snd.nxt {
            data_end.since(self.snd.nxt)
        } else {
            0
        };
        let wnd_avail = (self.snd.una + self.snd.wnd).since(self.snd.nxt);
        let fin_seq = data_end;
        let fin_sent = self.snd.fin_queued && self.snd.nxt > fin_seq;
        let plan = if unsent > 0 && wnd_avail > 0 && self.snd.wnd > 0 {
            let len = unsent.min(mss).min(wnd_avail);
            let fin = self.snd.fin_queued && len == unsent;
            let end_seq = self.snd.nxt + len + u32::from(fin);
            let f = self.rack.flight();
            f.tlp_is_retrans = false;
            f.tlp_end_seq = Some(end_seq);
            Plan::segment(Kind::Data, self.snd.nxt, len, fin)
        } else {
            let (seq, span) = self.rack.last_segment(mss).unwrap_or_else(|| {
                let span = self.snd.nxt.since(self.snd.una).min(mss);
                (self.snd.nxt - span, span)
            });
            let end = seq + span;
            let data_len = if seq < data_end {
                data_end.since(seq).min(span)
            } else {
                0
            };
            let fin = fin_sent && end > fin_seq;
            if data_len == 0 && !fin {
                return None;
            }
            if let Some((tend, _)) = self.rtt.timed {
                if tend > seq {
                    self.rtt.timed = None;
                }
            }
            self.stats.retrans_segs += 1;
            self.stats.retrans_bytes += u64::from(data_len);
            let snd_nxt = self.snd.nxt;
            let f = self.rack.flight();
            f.tlp_is_retrans = true;
            f.tlp_end_seq = Some(snd_nxt);
            f.tlp_range = (seq, seq + data_len + u32::from(fin));
            Plan::segment(Kind::Retransmit, seq, data_len, fin)
        };
        self.stats.tlp_probes += 1;
        self.timers.stop(Timer::TailLossProbe);
        // RFC 8985 §7.3: after the probe, the RTO (from now) guards the connection.
        self.timers.set(Timer::Retransmit, self.rtx_due(now));
        Some(plan)
    }

    /// RFC 8985 §7.4.2: did the episode's probe repair a loss? A new-data probe ends the
    /// episode quietly once acknowledged; a retransmitted probe reported by a DSACK was
    /// not needed; an ACK beyond the episode without such a DSACK means the probe
    /// repaired a loss: congestion control reduces once (enter and leave recovery).
    fn tlp_on_ack(&mut self, now: Instant, ack: SeqNum, dsack: Option<(SeqNum, SeqNum)>) {
        let Some((end, is_retrans, (ps, pe))) = self
            .rack
            .flight
            .as_deref()
            .and_then(|f| Some((f.tlp_end_seq?, f.tlp_is_retrans, f.tlp_range)))
        else {
            return;
        };
        if is_retrans && dsack.is_some_and(|(l, r)| l >= ps && r <= pe && r > l) {
            // The probe was a duplicate: the original arrived, no loss.
            self.rack.end_tlp_episode();
            return;
        }
        if ack < end {
            return;
        }
        if !is_retrans {
            self.rack.end_tlp_episode();
            return;
        }
        if ack > end {
            self.rack.end_tlp_episode();
            self.stats.tlp_recoveries += 1;
            let flight = self.in_flight();
            self.cc.on_congestion_event(now, flight);
            self.cc.on_recovery_exit(now);
        }
    }

    /// A retransmission timeout (RFC 8985 §6.3, §7): every outstanding segment is lost,
    /// the probe episode and both RACK timers end.
    pub(super) fn rack_on_rto(&mut self) {
        self.rack.mark_all_lost();
        self.timers.stop(Timer::RackReorder);
        self.rack.drop_undo();
        self.timers.stop(Timer::TailLossProbe);
        self.rack.tlp_pending = false;
        self.rack.end_tlp_episode();
    }

    /// Drops the state that matters only while data flows, once the connection is
    /// idle: nothing outstanding (SND.UNA = SND.NXT) and no loss recovery. RACK's
    /// records and busy-period variables ([`Rack::release_idle`] says when that changes
    /// nothing), the SACK scoreboard once empty (RFC 6675 §5: SACK information below
    /// SND.UNA is discarded, so nothing is left of it) and PRR's episode (RFC 9937
    /// §6.1: the next recovery starts it afresh). Run after every acceptable ACK; each
    /// is allocated again on first use.
    pub(super) fn release_idle_state(&mut self) {
        if self.snd.una != self.snd.nxt || self.loss.phase != Recovery::Open {
            return;
        }
        self.rack.release_idle(self.snd.una);
        self.sb.release_if_empty();
        self.prr.release();
    }

    /// RACK-TLP's view of the connection: (segments deemed lost, reordering degree,
    /// reordering seen).
    pub fn rack_info(&self) -> (u32, u32, bool) {
        (
            self.rack.lost_segments(),
            self.rack.reordering().max(self.settings.dupthresh),
            self.rack.reordering_seen(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u32 = 1000;

    fn t(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    fn s(n: u32) -> SeqNum {
        SeqNum(n)
    }

    /// `n` segments of MSS from 1, all sent at `at`.
    fn flight(n: u32, at: Instant) -> Rack {
        let mut r = Rack::new();
        for i in 0..n {
            r.on_send(s(1 + i * MSS), s(1 + (i + 1) * MSS), at);
        }
        r
    }

    fn sacked(blocks: &[(u32, u32)], una: u32, nxt: u32) -> Scoreboard {
        let mut sb = Scoreboard::new(64);
        let b: Vec<_> = blocks.iter().map(|&(a, e)| (s(a), s(e))).collect();
        sb.update(s(una), s(nxt), &b);
        sb
    }

    const RTT: Option<Duration> = Some(Duration::from_millis(100));

    #[test]
    fn sent_after_orders_by_time_then_sequence() {
        assert!(sent_after(t(2), s(1), t(1), s(5)));
        assert!(sent_after(t(1), s(6), t(1), s(5)));
        assert!(!sent_after(t(1), s(5), t(1), s(5)));
        assert!(!sent_after(t(0), s(9), t(1), s(5)));
    }

    #[test]
    fn sack_of_last_segment_arms_reorder_timer_then_marks_lost() {
        // Four segments at 0; the last SACKed at 100 ms (RACK.rtt = 100 ms).
        let mut r = flight(4, t(0));
        let sb = sacked(&[(3001, 4001)], 1, 4001);
        assert_eq!(r.update_delivered(t(100), s(1), &sb, RTT, MSS, 3), 1);
        assert_eq!(r.sacked_segments(), 1);
        // One segment SACKed, no reordering yet: reo_wnd = min_rtt / 4.
        let reo = r.reo_wnd(false, 3, RTT, RTT);
        assert_eq!(reo, Duration::from_millis(25));
        let (n, timer) = r.detect_loss(t(100), reo);
        assert_eq!(n, 0);
        assert_eq!(timer, Some(Duration::from_millis(25)));
        // The reorder timer fires: the three earlier segments are lost.
        let (n, timer) = r.detect_loss(t(125), reo);
        assert_eq!((n, timer), (3, None));
        assert_eq!(r.lost_segments(), 3);
        assert_eq!(r.next_lost(MSS), Some((s(1), MSS)));
        // Pipe: nothing in flight but... 4 outstanding - 1 SACKed - 3 lost.
        assert_eq!(r.pipe(), 0);
        r.on_retransmit(s(1), s(1001), t(126));
        assert_eq!(r.pipe(), 1000);
        assert_eq!(r.next_lost(MSS), Some((s(1001), MSS)));
    }

    #[test]
    fn partly_sacked_segment_is_not_delivered() {
        let mut r = flight(4, t(0));
        let sb = sacked(&[(4000, 4001)], 1, 4001);
        assert_eq!(r.update_delivered(t(100), s(1), &sb, RTT, MSS, 3), 0);
        assert_eq!(r.detect_loss(t(500), Duration::ZERO), (0, None));
    }

    #[test]
    fn reo_wnd_is_zero_without_reordering_once_dupthresh_segments_are_sacked() {
        let mut r = flight(6, t(0));
        let sb = sacked(&[(3001, 6001)], 1, 6001);
        r.update_delivered(t(100), s(1), &sb, RTT, MSS, 3);
        assert_eq!(r.reo_wnd(false, 3, RTT, RTT), Duration::ZERO);
        assert_eq!(r.reo_wnd(true, 10, RTT, RTT), Duration::ZERO);
        // Segments sent at the same time but lower are lost at once.
        assert_eq!(r.detect_loss(t(100), Duration::ZERO).0, 3);
    }

    #[test]
    fn reordering_is_detected_and_widens_nothing_until_dsack() {
        let mut r = flight(10, t(0));
        let sb = sacked(&[(7001, 8001)], 1, 10001);
        r.update_delivered(t(100), s(1), &sb, RTT, MSS, 3);
        assert!(!r.reordering_seen());
        // 3001:4001 delivered after 7001:8001, never retransmitted: reordering.
        let sb = sacked(&[(3001, 4001), (7001, 8001)], 1, 10001);
        r.update_delivered(t(102), s(1), &sb, RTT, MSS, 3);
        assert!(r.reordering_seen());
        assert_eq!(r.reordering(), 5);
        // Reordering seen: the window stays min_rtt/4 even in recovery.
        assert_eq!(r.reo_wnd(true, 3, RTT, RTT), Duration::from_millis(25));
    }

    #[test]
    fn dsack_grows_the_window_once_per_round_and_persists_16_recoveries() {
        let mut r = flight(4, t(0));
        r.reordering_seen = true;
        r.on_retransmit(s(1), s(1001), t(50));
        assert!(
            r.on_dsack((s(1), s(1001)), s(4001)).is_some(),
            "spurious retransmission"
        );
        assert_eq!(r.reo_wnd_mult(), 2);
        // Same round: no further growth, and the range is reported once.
        assert!(r.on_dsack((s(1), s(1001)), s(4001)).is_none());
        assert_eq!(r.reo_wnd_mult(), 2);
        assert_eq!(r.reo_wnd(false, 3, RTT, RTT), Duration::from_millis(50));
        // Capped by SRTT.
        assert_eq!(
            r.reo_wnd(false, 3, RTT, Some(Duration::from_millis(30))),
            Duration::from_millis(30)
        );
        r.end_dsack_round(s(4001));
        r.on_dsack((s(2001), s(3001)), s(4001));
        assert_eq!(r.reo_wnd_mult(), 3);
        for _ in 0..15 {
            r.on_recovery_end();
            assert_eq!(r.reo_wnd_mult(), 3);
        }
        r.on_recovery_end();
        assert_eq!(r.reo_wnd_mult(), 1);
    }

    #[test]
    fn ambiguous_retransmission_does_not_update_rack_rtt() {
        let mut r = flight(2, t(0));
        r.on_retransmit(s(1), s(1001), t(150));
        // Acked 10 ms after the retransmission: below min_rtt, so it was the original.
        let sb = Scoreboard::new(4);
        r.update_delivered(t(160), s(1001), &sb, RTT, MSS, 3);
        assert_eq!(r.flight().xmit_ts, None);
        // The second segment is delivered unambiguously.
        r.update_delivered(t(170), s(2001), &sb, RTT, MSS, 3);
        assert_eq!(r.flight().xmit_ts, Some(t(0)));
        assert_eq!(r.rtt, Duration::from_millis(170));
        assert!(r.is_empty());
    }

    #[test]
    fn rack_rtt_is_the_last_segment_in_sequence_order() {
        // Five segments at 0; the first retransmitted at 200. At 320 a partial ACK covers
        // the retransmission (RTT 120 ms) and the original second segment (320 ms):
        // RACK.xmit_ts is the retransmission's, RACK.rtt the second segment's (Linux),
        // so the originals sent at 0 are not yet overdue.
        let mut r = flight(5, t(0));
        r.on_retransmit(s(1), s(1001), t(200));
        let sb = Scoreboard::new(4);
        r.update_delivered(t(320), s(2001), &sb, RTT, MSS, 3);
        assert_eq!(r.flight().xmit_ts, Some(t(200)));
        assert_eq!(r.rtt, Duration::from_millis(320));
        // With a reordering window of a quarter min_rtt the remaining originals are due
        // 25 ms from now; with the newest segment's RTT (120 ms) they would be overdue by
        // 175 ms.
        let reo = Duration::from_millis(25);
        let (n, timer) = r.detect_loss(t(320), reo);
        assert_eq!((n, timer), (0, Some(reo)));
    }

    #[test]
    fn lost_retransmission_is_detected() {
        let mut r = flight(3, t(0));
        r.mark_all_lost();
        r.on_retransmit(s(1), s(1001), t(300));
        r.on_retransmit(s(1001), s(2001), t(310));
        // The second retransmission is delivered (SACKed) at 410: the first is lost again.
        let sb = sacked(&[(1001, 2001)], 1, 3001);
        r.update_delivered(t(410), s(1), &sb, RTT, MSS, 3);
        let (n, _) = r.detect_loss(t(410), Duration::ZERO);
        assert_eq!(n, 1);
        assert_eq!(r.next_lost(MSS), Some((s(1), MSS)));
    }

    #[test]
    fn retransmission_splits_records() {
        let mut r = Rack::new();
        r.on_send(s(1), s(3001), t(0));
        r.mark_all_lost();
        assert_eq!(r.next_lost(1000), Some((s(1), 1000)));
        r.on_retransmit(s(1), s(1001), t(10));
        assert_eq!(r.len(), 2);
        assert_eq!(r.next_lost(1000), Some((s(1001), 1000)));
        assert_eq!(r.pipe(), 1000);
    }

    #[test]
    fn merged_records_saturate_tracking_until_acknowledged() {
        let mut r = flight(MAX_SEGS as u32 + 10, t(0));
        assert_eq!(r.len(), MAX_SEGS);
        assert!(r.saturated());
        let sb = Scoreboard::new(4);
        r.update_delivered(
            t(100),
            s(1 + (MAX_SEGS as u32 + 10) * MSS),
            &sb,
            RTT,
            MSS,
            3,
        );
        assert!(r.is_empty());
        assert!(!r.saturated());
    }

    #[test]
    fn clear_sacked_lets_an_rto_mark_everything_lost() {
        let mut r = flight(4, t(0));
        let sb = sacked(&[(1001, 4001)], 1, 4001);
        r.update_delivered(t(100), s(1), &sb, RTT, MSS, 3);
        assert_eq!(r.sacked_segments(), 3);
        r.clear_sacked();
        assert_eq!(r.sacked_segments(), 0);
        r.mark_all_lost();
        assert_eq!(r.lost_segments(), 4);
        assert_eq!(r.pipe(), 0);
    }

    #[test]
    fn dsack_tells_whether_the_retransmission_belongs_to_the_episode() {
        let mut r = flight(4, t(0));
        r.on_retransmit(s(3001), s(4001), t(50));
        let cc = Cc::new(super::super::cc::CcAlgorithm::NewReno, MSS, 10);
        r.start_undo_episode(cc, s(1));
        r.on_retransmit(s(1), s(1001), t(60));
        assert_eq!(r.on_dsack((s(3001), s(4001)), s(4001)), Some(false));
        assert_eq!(r.on_dsack((s(1), s(1001)), s(4001)), Some(true));
        assert_eq!(r.on_dsack((s(1001), s(2001)), s(4001)), None);
    }

    #[test]
    fn retransmission_at_the_bound_marks_only_its_range() {
        // 10-byte segments; the tail beyond MAX_SEGS merges into the last record.
        let mut r = Rack::new();
        let n = MAX_SEGS as u32 + 5000;
        for i in 0..n {
            r.on_send(s(1 + i * 10), s(11 + i * 10), t(0));
        }
        r.mark_all_lost();
        // Splitting the first byte off every record reaches twice the bound.
        for i in 0..MAX_SEGS as u32 {
            r.on_retransmit(s(1 + i * 10), s(2 + i * 10), t(10));
        }
        assert_eq!(r.len(), 2 * MAX_SEGS);
        // Some records delivered (a pair of adjacent SACKed records can merge).
        let sb = sacked(&[(1001, 2001)], 1, 1 + n * 10);
        r.update_delivered(t(100), s(1), &sb, RTT, MSS, 3);
        // Retransmit the next 10 bytes of the merged tail record.
        let tail = 2 + (MAX_SEGS as u32 - 1) * 10;
        let (seq, len) = r.next_lost(10).unwrap();
        assert_eq!((seq, len), (s(2), 9));
        r.on_retransmit(s(tail), s(tail + 10), t(110));
        assert!(r.len() <= 2 * MAX_SEGS);
        // The bytes after the retransmitted range are still lost, not in flight.
        let after = r
            .flight()
            .segs
            .iter()
            .find(|x| x.start <= s(tail + 10) && x.end > s(tail + 10));
        let after = after.copied().unwrap();
        assert!(after.lost && !after.rxt_out, "{after:?}");
    }

    #[test]
    fn records_are_bounded() {
        let mut r = Rack::new();
        for i in 0..(MAX_SEGS as u32 + 100) {
            r.on_send(s(1 + i * 10), s(11 + i * 10), t(u64::from(i)));
        }
        assert_eq!(r.len(), MAX_SEGS);
        assert_eq!(
            r.last_segment(u32::MAX).map(|x| x.0 + x.1),
            Some(s(11 + (MAX_SEGS as u32 + 99) * 10))
        );
        // Retransmissions split at most up to twice the bound.
        for i in 0..(3 * MAX_SEGS as u32) {
            r.on_retransmit(s(1 + i * 3), s(2 + i * 3), t(1_000_000));
        }
        assert!(r.len() <= 2 * MAX_SEGS);
    }
}
