//! The D-SACK table (RFC 2883 §4, RFC 2018 §4): every placement of an arriving segment
//! against RCV.NXT and three blocks held out of order, with the SACK blocks the RFCs
//! say its ACK carries. Shared by the core test (`tests/tcp_dsack.rs`, ember's `Tcb` on
//! virtual time) and the conformance test (`crates/conformance/tests/dsack_table.rs`,
//! which includes this file with `#[path]` and runs the same table as packetdrill
//! scripts against the Linux kernel and ember's packetdrill backend).
//!
//! Plain Rust on `std` only. Sequence numbers are the peer's, relative to its ISN as a
//! packetdrill script writes them: the peer sends `1:100` in order (RCV.NXT = 100), then
//! the blocks `200:300`, `400:500` and `600:700` in that order (each ACKed at once with
//! the RFC 2018 blocks, most recent first), then the arriving segment of the case.
//!
//! The arriving segment's start and end are each put at every position distinguishable
//! against RCV.NXT and the blocks: below RCV.NXT, at it, in each gap, at each block's left
//! edge, inside it, at its right edge, and after the last block (15 points, any
//! `start < end`: 105 cases), plus a segment with both ends in the same open region (below
//! RCV.NXT, in a gap, inside a block, after the last block: 8 cases). 113 cases.
//!
//! [`rfc_expected`] is written from the RFC text alone, not from any stack's code:
//! * RFC 2883 §4: the first block is the D-SACK block, reporting the duplicate data of the
//!   segment that triggered this ACK; a segment with several duplicate runs reports "only
//!   the first such duplicate sub-segment" (§4.2, examples 5 and 6). Data is duplicate if
//!   it is below RCV.NXT or already held out of order.
//! * RFC 2883 §4 rule (4): if the duplicate data is part of a (possibly larger) block held
//!   above the cumulative ACK, the second block is that block.
//! * RFC 2018 §4: unless the segment advanced the cumulative ACK, the first (non-D-SACK)
//!   block is the block holding the segment; then the most recently reported blocks,
//!   leaving out any that is a subset of one already included (or now acknowledged).
//! * RFC 2018 §3 / RFC 7323: 40 bytes of options hold 4 blocks, 3 beside timestamps; the
//!   list is cut to what fits.
#![allow(dead_code)]

/// RCV.NXT before the arriving segment.
pub const RCV_NXT: u32 = 100;
/// The blocks held out of order, in the order they arrived.
pub const HELD: [(u32, u32); 3] = [(200, 300), (400, 500), (600, 700)];

/// The 15 points a segment edge can be at, with names.
pub const POINTS: [(u32, &str); 15] = [
    (50, "below"),
    (100, "rcv_nxt"),
    (150, "gap0"),
    (200, "A.left"),
    (250, "A.in"),
    (300, "A.right"),
    (350, "gap1"),
    (400, "B.left"),
    (450, "B.in"),
    (500, "B.right"),
    (550, "gap2"),
    (600, "C.left"),
    (650, "C.in"),
    (700, "C.right"),
    (750, "after"),
];

/// Segments with both edges inside one open region, with the region's name.
pub const SAME_REGION: [((u32, u32), &str); 8] = [
    ((20, 80), "below"),
    ((120, 180), "gap0"),
    ((220, 280), "A.in"),
    ((320, 380), "gap1"),
    ((420, 480), "B.in"),
    ((520, 580), "gap2"),
    ((620, 680), "C.in"),
    ((720, 780), "after"),
];

/// One row of the table: the arriving segment `[start, end)`.
#[derive(Debug, Clone)]
pub struct Case {
    pub seg: (u32, u32),
    pub name: String,
}

/// Every case, in a fixed order.
pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (i, &(s, sn)) in POINTS.iter().enumerate() {
        for &(e, en) in &POINTS[i + 1..] {
            v.push(Case {
                seg: (s, e),
                name: format!("{s}:{e} ({sn} -> {en})"),
            });
        }
    }
    for &((s, e), r) in &SAME_REGION {
        v.push(Case {
            seg: (s, e),
            name: format!("{s}:{e} ({r} -> {r})"),
        });
    }
    v
}

/// What the ACK of the arriving segment carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expect {
    /// The cumulative ACK.
    pub ack: u32,
    /// The SACK blocks, in order (the D-SACK block first if there is one).
    pub blocks: Vec<(u32, u32)>,
    /// Whether the first block is a D-SACK block.
    pub dsack: bool,
}

/// SACK blocks that fit beside the other options of an ACK (RFC 2018 §3: 40 bytes of
/// options; timestamps take 12 of them with their padding).
pub fn max_blocks(timestamps: bool) -> usize {
    if timestamps {
        3
    } else {
        4
    }
}

/// Disjoint, non-adjacent intervals covering `v` (each `[l, r)`, `l < r`), ascending.
fn merge(mut v: Vec<(u32, u32)>) -> Vec<(u32, u32)> {
    v.sort();
    let mut out: Vec<(u32, u32)> = Vec::new();
    for (l, r) in v {
        match out.last_mut() {
            // Overlapping or adjacent: one block (RFC 2018 §3: a block's edges are
            // bytes not received).
            Some(last) if l <= last.1 => last.1 = last.1.max(r),
            _ => out.push((l, r)),
        }
    }
    out
}

fn within(inner: (u32, u32), outer: (u32, u32)) -> bool {
    outer.0 <= inner.0 && inner.1 <= outer.1
}

/// The ACK RFC 2883 §4 and RFC 2018 §4 ask for when `seg` arrives (see the module
/// comment for the rules).
pub fn rfc_expected(seg: (u32, u32), timestamps: bool) -> Expect {
    let (s, e) = seg;
    assert!(s < e, "a segment carries data");
    // Duplicate runs of the segment, lowest first: below RCV.NXT, then each held block
    // (the blocks are separated by gaps, so each overlap is a run of its own).
    let mut dups = Vec::new();
    if s < RCV_NXT {
        dups.push((s, e.min(RCV_NXT)));
    }
    let mut held = HELD.to_vec();
    held.sort();
    for &(l, r) in &held {
        let (a, b) = (s.max(l), e.min(r));
        if a < b {
            dups.push((a, b));
        }
    }
    // RFC 2883 §4.2: only the first duplicate sub-segment is reported.
    let dsack = dups.first().copied();

    // What is held afterwards: everything received, as disjoint blocks; the cumulative
    // ACK is the end of the block reaching RCV.NXT.
    let mut all = vec![(0, RCV_NXT)];
    all.extend(HELD);
    all.push(seg);
    let all = merge(all);
    let ack = all[0].1;
    let above: Vec<(u32, u32)> = all[1..].to_vec();

    let mut blocks = Vec::new();
    if let Some(d) = dsack {
        blocks.push(d);
    }
    let mut included: Vec<(u32, u32)> = Vec::new();
    // RFC 2018 §4 first block: the block holding the segment, unless the segment moved
    // the cumulative ACK (it then lies below it). When the D-SACK lies above the
    // cumulative ACK, this is also RFC 2883 §4 rule (4)'s second block: the duplicate
    // data is part of the segment.
    if ack == RCV_NXT && s >= RCV_NXT {
        let b = *above
            .iter()
            .find(|&&b| within(seg, b))
            .expect("an unacknowledged segment is held");
        blocks.push(b);
        included.push(b);
    }
    if let Some(d) = dsack {
        if d.0 >= ack {
            // Rule (4), checked independently of the RFC 2018 rule above.
            let b = *above
                .iter()
                .find(|&&b| within(d, b))
                .expect("duplicate data above the ACK is held");
            assert_eq!(blocks.get(1), Some(&b), "rule (4): the second block");
        }
    }
    // Then the most recently reported blocks (the held blocks, newest first), not
    // subsets of a block included already and not acknowledged now.
    for &b in HELD.iter().rev() {
        if b.0 < ack || included.iter().any(|&i| within(b, i)) {
            continue;
        }
        let cur = *above.iter().find(|&&c| within(b, c)).expect("still held");
        blocks.push(cur);
        included.push(cur);
    }
    // As many distinct blocks as fit (RFC 2018 §4): any block not reported yet.
    for &c in &above {
        if !included.contains(&c) {
            blocks.push(c);
            included.push(c);
        }
    }
    blocks.truncate(max_blocks(timestamps));
    Expect {
        ack,
        blocks,
        dsack: dsack.is_some(),
    }
}

#[cfg(test)]
mod self_check {
    use super::*;

    #[test]
    fn the_issues_examples() {
        assert_eq!(cases().len(), 113);
        // A segment partly over a held block, one inside a held block and in-order data
        // running into a held block; and RFC 2883 §4.1.3 / §4.2.3 in the table's numbers.
        let x = rfc_expected((250, 350), false);
        assert_eq!(x.ack, 100);
        assert_eq!(
            x.blocks,
            vec![(250, 300), (200, 350), (600, 700), (400, 500)]
        );
        let x = rfc_expected((420, 480), false);
        assert_eq!(
            x.blocks,
            vec![(420, 480), (400, 500), (600, 700), (200, 300)]
        );
        let x = rfc_expected((100, 250), true);
        assert_eq!(x.ack, 300);
        assert_eq!(x.blocks, vec![(200, 250), (600, 700), (400, 500)]);
    }
}
