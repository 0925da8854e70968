//! Receive-side coalescing (GRO): consecutive in-order TCP segments of one flow in a
//! receive batch are joined into one segment before TCP sees them, so TCP runs its input
//! path once per batch and flow instead of once per wire segment.
//!
//! Sans-IO and bounded: the owner feeds every TCP segment of a batch (IP already checked
//! and stripped) to [`Gro::push`] and calls [`Gro::flush`] at the end of the batch; what
//! comes out (in `out`) goes to TCP in that order. At most [`GRO_MAX_FLOWS`] flows are
//! held, each at most `max_len` bytes, whatever the input.
//!
//! # Merge rules, and why
//!
//! A segment `s` is appended to the segment `h` held for its flow only if all hold:
//!
//! 1. **Same flow**: same source and destination address and ports. Segments of other
//!    flows are never mixed.
//! 2. **Contiguous**: `s.seq` is exactly where `h` ends (`h.seq + len(h.payload)`). A gap
//!    or an overlap ends `h`, so a merged segment is one contiguous run of sequence
//!    space. GRO does not know RCV.NXT: the run may still be out of order, a duplicate or
//!    partly beyond the window for TCP, which then owes the ACKs each piece would have
//!    drawn (`Tcb::handle_segment_gro`: duplicate ACKs for out-of-order pieces, RFC 5681 §4.2,
//!    one per unacceptable piece, every second full piece in order), so the peer's
//!    duplicate-ACK counting and ACK clock stay as without GRO.
//! 3. **Checksum verified** (RFC 9293 §3.1): every segment is verified once, here, unless
//!    the input says it is already known good (`csum_ok`, e.g. from a device that checked
//!    it). A segment that fails is never merged and is passed on, unchanged, with
//!    `csum_ok = false`, so TCP verifies it again and counts it as a checksum error just
//!    as without GRO. Bytes of the merged segment are therefore all verified; its
//!    checksum field (the first segment's) is not recomputed, and `csum_ok = true` is
//!    what tells TCP not to check it.
//! 4. **Same header apart from SEQ, flags and checksum**: identical ACK number, window,
//!    data offset (and reserved bits), urgent pointer and option bytes. Identical options
//!    mean identical timestamps, so TS.Recent, RTT samples and PAWS see what they would
//!    have seen for each piece (RFC 7323); identical ACK and window mean the pieces
//!    carry one ACK between them (the 2nd..nth would have acknowledged nothing new).
//!    SACK blocks, which a data segment rarely carries, must be identical too.
//! 5. **Flags**: `h` has exactly ACK; `s` has ACK, or ACK and PSH. PSH ends the merged
//!    segment (it may be the last piece, and the merged segment then carries PSH, so the
//!    receiver still delivers promptly). FIN, SYN, RST, URG, ECE and CWR are never merged
//!    in either position: each changes TCP state or signals something per segment, and
//!    such a segment is passed on alone (after the flow's held segment, to keep order).
//! 6. **Text**: `s` carries at least one byte (pure ACKs are passed on: each one may be
//!    a duplicate ACK that loss recovery counts, RFC 5681 §3.2).
//! 7. **Sizes**: every piece but the last has the size of the first, and the last is no
//!    larger. The merged segment is then fully described by `segs` and `gso_size`, TCP can
//!    learn the peer's MSS from `gso_size` and count the pieces, and the segment can be
//!    cut back into the original wire segments exactly. A smaller piece ends the segment.
//! 8. **Length**: the merged TCP segment (header and payload) is at most `max_len` bytes
//!    (64 KiB - 1 by default, the most an IPv4 datagram's length field, and the TCP
//!    pseudo-header's length, can describe).
//! 9. **One wire segment in**: an input that already stands for several (`segs > 1`) is
//!    passed on as it is.
//!
//! The IP header is not compared (GRO sees the TCP segment only): nothing in it but the
//! addresses reaches TCP, and ember does no ECN, so a CE mark would be ignored anyway.
//!
//! Segments that cannot be merged pass straight through, but always after the segment
//! held for their own flow, so order within a flow is preserved; segments of different
//! flows may be reordered with respect to each other (as with any per-flow queueing). A
//! segment too short to name its flow flushes every flow before it passes. Up to
//! [`GRO_MAX_FLOWS`] flows are held at once, so interleaved flows merge too; a new flow
//! beyond that evicts (emits) the oldest held one.
//!
//! # Cost
//!
//! One pass over each segment's bytes (the checksum, [`checksum::sum`]) and, for a
//! merged piece, one copy of its payload onto the end of the held segment's buffer. The
//! held buffer is sized once, on its first merge, for `max_len`, so a merged piece never
//! allocates. With [`Gro::push_slice`] (segments still in the receive buffer) that copy
//! is the only one a merged piece costs; a segment held or given out whole is copied
//! once into a buffer of its own.

use crate::wire::checksum;
use crate::wire::ip_proto;
use crate::wire::TCP_HEADER_LEN;
use std::net::Ipv4Addr;

/// Largest merged TCP segment (header and payload) by default: the largest length the
/// TCP pseudo-header (RFC 9293 §3.1) and the IPv4 total length can carry.
pub const GRO_MAX_LEN: usize = 65_535;

/// Flows held at once.
pub const GRO_MAX_FLOWS: usize = 8;

const PSH: u8 = 0x08;
const ACK: u8 = 0x10;

/// One TCP segment going into or out of GRO.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroSeg {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    /// TCP header and payload.
    pub bytes: Vec<u8>,
    /// The checksum is known good (verified by GRO, or by whoever made the segment).
    /// After GRO, `false` means not verified or failed: TCP verifies it.
    pub csum_ok: bool,
    /// Wire segments this stands for (at least 1).
    pub segs: u16,
    /// Payload bytes of each piece but the last (which may be shorter); 0 when
    /// `segs == 1`.
    pub gso_size: u16,
}

impl GroSeg {
    /// A single wire segment whose checksum has not been verified.
    pub fn new(src: Ipv4Addr, dst: Ipv4Addr, bytes: Vec<u8>) -> GroSeg {
        GroSeg {
            src,
            dst,
            bytes,
            csum_ok: false,
            segs: 1,
            gso_size: 0,
        }
    }
}

/// GRO counters. Every segment pushed is counted in exactly one of `merged`, `held` and
/// `passed`; every segment given out is counted in `flushed` or `passed`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroStats {
    /// Segments absorbed into another (held) segment.
    pub merged: u64,
    /// Segments that started a held segment.
    pub held: u64,
    /// Held segments given out (merged or not).
    pub flushed: u64,
    /// Segments given out at once, without being held.
    pub passed: u64,
    /// Segments whose checksum failed (passed on with `csum_ok = false`).
    pub bad_csum: u64,
    /// Held segments given out early because a new flow needed the slot.
    pub evicted: u64,
}

/// (source address, destination address, source port << 16 | destination port).
type FlowKey = (u32, u32, u32);

/// A held segment: the head of a merged segment still open for appends.
#[derive(Debug)]
struct Held {
    key: FlowKey,
    seg: GroSeg,
    /// Its TCP header length.
    hlen: usize,
    /// The sequence number right after its payload.
    next_seq: u32,
    /// The payload size of its first piece.
    gso: usize,
}

/// Receive-side coalescing over one batch at a time (see the module comment).
#[derive(Debug)]
pub struct Gro {
    max_len: usize,
    table: Vec<Held>,
    stats: GroStats,
}

impl Default for Gro {
    fn default() -> Self {
        Gro::new(GRO_MAX_LEN)
    }
}

/// The fields GRO reads from a TCP header.
struct Hdr {
    seq: u32,
    hlen: usize,
    flags: u8,
}

/// A segment as pushed: owned ([`Gro::push`]) or borrowed ([`Gro::push_slice`], copied
/// only where it is kept whole).
struct Input<'a> {
    src: Ipv4Addr,
    dst: Ipv4Addr,
    owned: Option<Vec<u8>>,
    borrowed: &'a [u8],
    csum_ok: bool,
    segs: u16,
    gso_size: u16,
}

impl Input<'_> {
    fn bytes(&self) -> &[u8] {
        self.owned.as_deref().unwrap_or(self.borrowed)
    }

    fn into_seg(self) -> GroSeg {
        let bytes = match self.owned {
            Some(v) => v,
            None => self.borrowed.to_vec(),
        };
        GroSeg {
            src: self.src,
            dst: self.dst,
            bytes,
            csum_ok: self.csum_ok,
            segs: self.segs,
            gso_size: self.gso_size,
        }
    }
}

fn flow_key(src: Ipv4Addr, dst: Ipv4Addr, bytes: &[u8]) -> Option<FlowKey> {
    let b = bytes.get(..4)?;
    Some((
        u32::from(src),
        u32::from(dst),
        u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
    ))
}

/// The header, if the data offset is sane (20 <= offset <= length).
fn header(b: &[u8]) -> Option<Hdr> {
    if b.len() < TCP_HEADER_LEN {
        return None;
    }
    let hlen = usize::from(b[12] >> 4) * 4;
    if hlen < TCP_HEADER_LEN || hlen > b.len() {
        return None;
    }
    Some(Hdr {
        seq: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        hlen,
        flags: b[13],
    })
}

/// RFC 9293 §3.1: the checksum over the pseudo-header and the whole segment.
fn checksum_ok(src: Ipv4Addr, dst: Ipv4Addr, bytes: &[u8]) -> bool {
    let Ok(len) = u16::try_from(bytes.len()) else {
        return false;
    };
    let s = checksum::combine(
        checksum::pseudo_header(src, dst, ip_proto::TCP, len),
        checksum::sum(bytes),
    );
    checksum::finish(s) == 0
}

impl Gro {
    /// GRO that builds merged segments of at most `max_len` bytes (TCP header and
    /// payload; clamped to `TCP_HEADER_LEN + 1 ..= GRO_MAX_LEN`).
    pub fn new(max_len: usize) -> Gro {
        Gro {
            max_len: max_len.clamp(TCP_HEADER_LEN + 1, GRO_MAX_LEN),
            table: Vec::with_capacity(GRO_MAX_FLOWS),
            stats: GroStats::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> GroStats {
        self.stats
    }

    /// Flows currently held.
    pub fn held_flows(&self) -> usize {
        self.table.len()
    }

    /// Takes one segment of the batch. Whatever is ready (a segment that cannot be
    /// merged, a held segment it ends) is appended to `out`, in the order TCP must see it.
    pub fn push(&mut self, seg: GroSeg, out: &mut Vec<GroSeg>) {
        self.push_input(
            Input {
                src: seg.src,
                dst: seg.dst,
                owned: Some(seg.bytes),
                borrowed: &[],
                csum_ok: seg.csum_ok,
                segs: seg.segs,
                gso_size: seg.gso_size,
            },
            out,
        );
    }

    /// [`Gro::push`] for one wire segment (`bytes`: TCP header and payload) still in the
    /// receive buffer: a piece appended to a held segment is copied onto its end and
    /// nothing is allocated; only a segment that is held or given out whole is copied
    /// into a new buffer.
    pub fn push_slice(
        &mut self,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        bytes: &[u8],
        csum_ok: bool,
        out: &mut Vec<GroSeg>,
    ) {
        self.push_input(
            Input {
                src,
                dst,
                owned: None,
                borrowed: bytes,
                csum_ok,
                segs: 1,
                gso_size: 0,
            },
            out,
        );
    }

    fn push_input(&mut self, mut seg: Input<'_>, out: &mut Vec<GroSeg>) {
        seg.segs = seg.segs.max(1);
        let Some(key) = flow_key(seg.src, seg.dst, seg.bytes()) else {
            // Cannot name its flow: keep every flow's order by emptying the table.
            self.flush(out);
            self.pass(seg, out);
            return;
        };
        let Some(h) = header(seg.bytes()) else {
            self.flush_flow(key, out);
            self.pass(seg, out);
            return;
        };
        // Rule 3: verify once, here.
        if !seg.csum_ok {
            if checksum_ok(seg.src, seg.dst, seg.bytes()) {
                seg.csum_ok = true;
            } else {
                self.stats.bad_csum += 1;
                self.flush_flow(key, out);
                self.pass(seg, out);
                return;
            }
        }
        let plen = seg.bytes().len() - h.hlen;
        // Rules 5, 6, 9: only single segments with text and ACK (+ PSH) take part.
        if plen == 0 || seg.segs > 1 || (h.flags != ACK && h.flags != ACK | PSH) {
            self.flush_flow(key, out);
            self.pass(seg, out);
            return;
        }
        if let Some(i) = self.table.iter().position(|e| e.key == key) {
            if self.extends(&self.table[i], seg.bytes(), &h, plen) {
                let max_len = self.max_len;
                let e = &mut self.table[i];
                if e.seg.segs == 1 {
                    // The only allocation of a merged segment: room for all its pieces.
                    let room = max_len.saturating_sub(e.seg.bytes.len());
                    e.seg.bytes.reserve(room);
                }
                e.seg.bytes.extend_from_slice(&seg.bytes()[h.hlen..]);
                e.seg.segs += 1;
                e.next_seq = e.next_seq.wrapping_add(plen as u32);
                let psh = h.flags & PSH != 0;
                if psh {
                    // The merged segment carries the last piece's PSH.
                    e.seg.bytes[13] |= PSH;
                }
                self.stats.merged += 1;
                // Closed: PSH, a short last piece, or no room for another full piece.
                let full = e.seg.bytes.len() + e.gso > max_len || e.seg.segs == u16::MAX;
                if psh || plen < e.gso || full {
                    self.emit(i, out);
                }
                return;
            }
            // Not a continuation: what is held goes first.
            self.emit(i, out);
        }
        // A segment that could not take even one more piece is not held.
        if h.flags & PSH != 0 || seg.bytes().len() + plen > self.max_len {
            self.pass(seg, out);
            return;
        }
        if self.table.len() >= GRO_MAX_FLOWS {
            self.stats.evicted += 1;
            self.emit(0, out);
        }
        self.stats.held += 1;
        self.table.push(Held {
            key,
            next_seq: h.seq.wrapping_add(plen as u32),
            hlen: h.hlen,
            gso: plen,
            seg: seg.into_seg(),
        });
    }

    /// Ends the batch: every held segment goes out, oldest first.
    pub fn flush(&mut self, out: &mut Vec<GroSeg>) {
        while !self.table.is_empty() {
            self.emit(0, out);
        }
    }

    /// Rules 1, 2, 4, 7 and 8 for appending `seg` (a verified ACK or ACK+PSH segment
    /// with `plen` bytes of text, of the same flow) to `e`.
    fn extends(&self, e: &Held, b: &[u8], h: &Hdr, plen: usize) -> bool {
        let a = &e.seg.bytes;
        h.seq == e.next_seq
            && h.hlen == e.hlen
            && plen <= e.gso
            && a.len() + plen <= self.max_len
            // ACK number, data offset and reserved bits.
            && a[8..13] == b[8..13]
            // Window.
            && a[14..16] == b[14..16]
            // Urgent pointer and options.
            && a[18..e.hlen] == b[18..h.hlen]
    }

    fn flush_flow(&mut self, key: FlowKey, out: &mut Vec<GroSeg>) {
        if let Some(i) = self.table.iter().position(|e| e.key == key) {
            self.emit(i, out);
        }
    }

    fn emit(&mut self, i: usize, out: &mut Vec<GroSeg>) {
        let mut e = self.table.remove(i);
        e.seg.gso_size = if e.seg.segs > 1 { e.gso as u16 } else { 0 };
        self.stats.flushed += 1;
        out.push(e.seg);
    }

    fn pass(&mut self, mut seg: Input<'_>, out: &mut Vec<GroSeg>) {
        if seg.segs <= 1 {
            seg.gso_size = 0;
        }
        self.stats.passed += 1;
        out.push(seg.into_seg());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::TcpRepr;
    use proptest::prelude::*;

    const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 9);
    const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
    const SYN: u8 = 0x02;
    const FIN: u8 = 0x01;
    const RST: u8 = 0x04;
    const URG: u8 = 0x20;
    const ECE: u8 = 0x40;
    const CWR: u8 = 0x80;

    /// The header fields a test varies.
    #[derive(Debug, Clone, Copy)]
    struct H {
        sport: u16,
        seq: u32,
        ack: u32,
        flags: u8,
        window: u16,
        /// TSval of a timestamps option (NOP NOP TS); `None`: no options.
        ts: Option<u32>,
    }

    fn h(seq: u32) -> H {
        H {
            sport: 40_000,
            seq,
            ack: 7,
            flags: ACK,
            window: 512,
            ts: Some(100),
        }
    }

    /// A segment from A to B with a correct checksum.
    fn mk(h: H, payload: &[u8]) -> GroSeg {
        let hlen = if h.ts.is_some() { 32 } else { 20 };
        let mut b = vec![0u8; hlen + payload.len()];
        b[0..2].copy_from_slice(&h.sport.to_be_bytes());
        b[2..4].copy_from_slice(&5001u16.to_be_bytes());
        b[4..8].copy_from_slice(&h.seq.to_be_bytes());
        b[8..12].copy_from_slice(&h.ack.to_be_bytes());
        b[12] = ((hlen / 4) as u8) << 4;
        b[13] = h.flags;
        b[14..16].copy_from_slice(&h.window.to_be_bytes());
        if let Some(ts) = h.ts {
            b[20..24].copy_from_slice(&[1, 1, 8, 10]);
            b[24..28].copy_from_slice(&ts.to_be_bytes());
            b[28..32].copy_from_slice(&9u32.to_be_bytes());
        }
        b[hlen..].copy_from_slice(payload);
        TcpRepr::fill_checksum(&mut b, A, B);
        GroSeg::new(A, B, b)
    }

    fn data(n: usize, fill: u8) -> Vec<u8> {
        (0..n).map(|i| fill.wrapping_add(i as u8)).collect()
    }

    fn run(segs: Vec<GroSeg>) -> (Vec<GroSeg>, GroStats) {
        run_with(Gro::default(), segs)
    }

    fn run_with(mut g: Gro, segs: Vec<GroSeg>) -> (Vec<GroSeg>, GroStats) {
        let mut out = Vec::new();
        for s in segs {
            g.push(s, &mut out);
            assert!(g.held_flows() <= GRO_MAX_FLOWS);
        }
        g.flush(&mut out);
        assert_eq!(g.held_flows(), 0);
        (out, g.stats())
    }

    fn seq_of(s: &GroSeg) -> u32 {
        u32::from_be_bytes([s.bytes[4], s.bytes[5], s.bytes[6], s.bytes[7]])
    }

    fn payload(s: &GroSeg) -> &[u8] {
        let hlen = usize::from(s.bytes[12] >> 4) * 4;
        &s.bytes[hlen..]
    }

    #[test]
    fn in_order_segments_merge() {
        let (out, st) = run(vec![
            mk(h(1000), &data(100, 0)),
            mk(h(1100), &data(100, 100)),
            mk(h(1200), &data(40, 200)),
        ]);
        assert_eq!(out.len(), 1);
        let m = &out[0];
        assert_eq!((m.segs, m.gso_size, m.csum_ok), (3, 100, true));
        assert_eq!(seq_of(m), 1000);
        assert_eq!(payload(m), &data(240, 0)[..]);
        assert_eq!(m.bytes[13], ACK);
        assert_eq!((st.merged, st.held, st.flushed, st.passed), (2, 1, 1, 0));
        // A single segment comes out as it went in, verified.
        let one = mk(h(5), b"abc");
        let (out, _) = run(vec![one.clone()]);
        assert_eq!(out[0].bytes, one.bytes);
        assert_eq!((out[0].segs, out[0].gso_size, out[0].csum_ok), (1, 0, true));
    }

    #[test]
    fn flows_are_kept_apart_and_interleaved_flows_both_merge() {
        let other = |seq| H {
            sport: 40_001,
            ..h(seq)
        };
        let (out, st) = run(vec![
            mk(h(0), &data(10, 0)),
            mk(other(500), &data(10, 1)),
            mk(h(10), &data(10, 2)),
            mk(other(510), &data(10, 3)),
        ]);
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|s| s.segs == 2));
        assert_eq!(seq_of(&out[0]), 0);
        assert_eq!(seq_of(&out[1]), 500);
        assert_eq!(st.merged, 2);
        // Another destination address is another flow too.
        let mut x = mk(h(20), &data(10, 0));
        x.dst = Ipv4Addr::new(198, 18, 0, 2);
        TcpRepr::fill_checksum(&mut x.bytes, x.src, x.dst);
        let (out, _) = run(vec![mk(h(10), &data(10, 0)), x]);
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn gaps_and_overlaps_are_not_merged() {
        let (out, st) = run(vec![
            mk(h(0), &data(10, 0)),
            mk(h(20), &data(10, 0)),
            mk(h(25), &data(10, 0)),
        ]);
        assert_eq!(out.iter().map(seq_of).collect::<Vec<_>>(), [0, 20, 25]);
        assert!(out.iter().all(|s| s.segs == 1));
        assert_eq!(st.merged, 0);
    }

    #[test]
    fn a_bad_checksum_is_never_merged_and_keeps_its_place() {
        let mut bad = mk(h(10), &data(10, 0));
        bad.bytes[40] ^= 0x10;
        let (out, st) = run(vec![
            mk(h(0), &data(10, 0)),
            bad.clone(),
            mk(h(20), &data(10, 0)),
        ]);
        assert_eq!(out.len(), 3);
        assert_eq!(out[1].bytes, bad.bytes);
        assert!(!out[1].csum_ok);
        assert!(out[0].csum_ok && out[2].csum_ok);
        assert_eq!(st.bad_csum, 1);
        // A checksum the caller vouches for is not checked again.
        let mut trusted = bad;
        trusted.csum_ok = true;
        let (out, _) = run(vec![mk(h(0), &data(10, 0)), trusted]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].segs, 2);
    }

    #[test]
    fn header_differences_end_a_merge() {
        for other in [
            H { ack: 8, ..h(10) },
            H {
                window: 511,
                ..h(10)
            },
            H {
                ts: Some(101),
                ..h(10)
            },
            H { ts: None, ..h(10) },
        ] {
            let (out, st) = run(vec![mk(h(0), &data(10, 0)), mk(other, &data(10, 0))]);
            assert_eq!(out.len(), 2, "{other:?}");
            assert_eq!(st.merged, 0);
        }
    }

    #[test]
    fn psh_closes_and_rides_on_the_merged_segment() {
        let psh = |seq| H {
            flags: ACK | PSH,
            ..h(seq)
        };
        let (out, st) = run(vec![
            mk(h(0), &data(10, 0)),
            mk(psh(10), &data(10, 0)),
            mk(h(20), &data(10, 0)),
        ]);
        assert_eq!(out.len(), 2);
        assert_eq!((out[0].segs, out[0].bytes[13]), (2, ACK | PSH));
        assert_eq!(seq_of(&out[1]), 20);
        assert_eq!(st.merged, 1);
        // A PSH segment is never a head: it goes straight out.
        let (out, st) = run(vec![mk(psh(0), &data(10, 0)), mk(h(10), &data(10, 0))]);
        assert_eq!(out.len(), 2);
        assert_eq!((st.passed, st.merged), (1, 0));
    }

    #[test]
    fn control_flags_are_never_merged() {
        for f in [FIN, SYN, RST, URG, ECE, CWR] {
            let odd = H {
                flags: ACK | f,
                ..h(10)
            };
            let (out, st) = run(vec![
                mk(h(0), &data(10, 0)),
                mk(odd, &data(10, 0)),
                mk(h(20), &data(10, 0)),
            ]);
            assert_eq!(out.len(), 3, "flag {f:#x}");
            assert_eq!(out[1].bytes[13], ACK | f);
            assert_eq!(st.merged, 0);
            // Nor is anything appended to such a segment.
            let (out, _) = run(vec![mk(odd, &data(10, 0)), mk(h(20), &data(10, 0))]);
            assert_eq!(out.len(), 2);
        }
        // Without ACK: not merged either.
        let bare = H { flags: 0, ..h(10) };
        let (out, _) = run(vec![mk(h(0), &data(10, 0)), mk(bare, &data(10, 0))]);
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn pure_acks_pass_after_the_held_data() {
        let (out, st) = run(vec![
            mk(h(0), &data(10, 0)),
            mk(h(10), &[]),
            mk(h(10), &data(10, 0)),
        ]);
        assert_eq!(out.len(), 3);
        assert_eq!(payload(&out[0]).len(), 10);
        assert!(payload(&out[1]).is_empty());
        assert_eq!(st.merged, 0);
    }

    #[test]
    fn piece_sizes() {
        // A larger piece is not merged; a smaller one is merged and ends the segment.
        let (out, _) = run(vec![mk(h(0), &data(10, 0)), mk(h(10), &data(11, 0))]);
        assert_eq!(out.len(), 2);
        let (out, _) = run(vec![
            mk(h(0), &data(10, 0)),
            mk(h(10), &data(5, 0)),
            mk(h(15), &data(5, 0)),
        ]);
        assert_eq!(out.len(), 2);
        assert_eq!((out[0].segs, out[0].gso_size), (2, 10));
        assert_eq!(seq_of(&out[1]), 15);
    }

    #[test]
    fn max_len_is_respected() {
        // 32-byte header + 3 x 100 fits in 340, a fourth piece does not.
        let segs = (0..8).map(|i| mk(h(i * 100), &data(100, 0))).collect();
        let (out, _) = run_with(Gro::new(340), segs);
        assert!(out.iter().all(|s| s.bytes.len() <= 340));
        assert_eq!(out.iter().map(|s| s.segs).collect::<Vec<_>>(), [3, 3, 2]);
        // The default: one 64 KiB segment from 45 of 1448 bytes, then the rest.
        let segs = (0..50).map(|i| mk(h(i * 1448), &data(1448, 0))).collect();
        let (out, _) = run(segs);
        assert!(out.iter().all(|s| s.bytes.len() <= GRO_MAX_LEN));
        assert_eq!(out.iter().map(|s| s.segs).collect::<Vec<_>>(), [45, 5]);
        // A segment that leaves no room for a second piece is not held.
        let (_, st) = run_with(Gro::new(100), vec![mk(h(0), &data(60, 0))]);
        assert_eq!((st.held, st.passed), (0, 1));
    }

    #[test]
    fn the_table_is_bounded() {
        let segs = (0..GRO_MAX_FLOWS as u16 + 3)
            .map(|p| {
                mk(
                    H {
                        sport: 1000 + p,
                        ..h(0)
                    },
                    &data(10, 0),
                )
            })
            .collect();
        let (out, st) = run(segs);
        assert_eq!(out.len(), GRO_MAX_FLOWS + 3);
        assert_eq!(st.evicted, 3);
        // Oldest out first.
        assert_eq!(&out[0].bytes[0..2], &1000u16.to_be_bytes());
    }

    #[test]
    fn odd_inputs_pass_through_in_order() {
        // Already coalesced: passed as it is.
        let mut big = mk(h(10), &data(20, 0));
        big.segs = 2;
        big.gso_size = 10;
        let (out, _) = run(vec![mk(h(0), &data(10, 0)), big.clone()]);
        assert_eq!(out.len(), 2);
        assert_eq!(
            out[1],
            GroSeg {
                csum_ok: true,
                ..big
            }
        );
        // Too short to name a flow: every held flow goes first.
        let short = GroSeg::new(A, B, vec![1, 2, 3]);
        let (out, _) = run(vec![mk(h(0), &data(10, 0)), short.clone()]);
        assert_eq!(out.len(), 2);
        assert_eq!(out[1], short);
        // A bad data offset: not merged, not verified.
        let mut bad = mk(h(10), &data(10, 0));
        bad.bytes[12] = 0x40;
        let (out, _) = run(vec![mk(h(0), &data(10, 0)), bad.clone()]);
        assert_eq!(out[1], bad);
        // Longer than any TCP segment can be: refused, never verified as good.
        let huge = GroSeg::new(A, B, vec![0; 70_000]);
        let (out, _) = run(vec![huge]);
        assert!(!out[0].csum_ok);
    }

    // ---------------------------------------------------------------------------------
    // Properties.
    // ---------------------------------------------------------------------------------

    /// One input the property test makes.
    #[derive(Debug, Clone)]
    enum Op {
        /// Flow, step of the flow's sequence (0 = in order, >0 gap, <0 back), length,
        /// flags, option variant, ack variant, corrupt.
        Seg {
            flow: u8,
            step: i16,
            len: u16,
            flags: u8,
            ts: u8,
            ack: u8,
            corrupt: bool,
        },
        /// Bytes that are no proper TCP segment.
        Junk { flow: u8, len: u8 },
    }

    fn op() -> impl Strategy<Value = Op> {
        let flags = prop_oneof![
            8 => Just(ACK),
            2 => Just(ACK | PSH),
            1 => Just(ACK | FIN),
            1 => Just(ACK | RST),
            1 => Just(SYN),
            1 => Just(ACK | URG),
            1 => Just(ACK | ECE | CWR),
        ];
        let len =
            prop_oneof![6 => Just(100u16), 2 => 0u16..120, 1 => Just(0u16), 1 => 1000u16..1460];
        let step = prop_oneof![8 => Just(0i16), 1 => 1i16..300, 1 => -300i16..0];
        prop_oneof![
            20 => (0u8..10, step, len, flags, 0u8..8, 0u8..8, prop::bool::weighted(0.05)).prop_map(
                |(flow, step, len, flags, ts, ack, corrupt)| Op::Seg {
                    flow,
                    step,
                    len,
                    flags,
                    ts,
                    ack,
                    corrupt
                }
            ),
            1 => (0u8..10, 0u8..24).prop_map(|(flow, len)| Op::Junk { flow, len }),
        ]
    }

    /// (header without its checksum field, payload, checksum verified good).
    type Piece = (Vec<u8>, Vec<u8>, bool);

    fn header_wo_csum(b: &[u8], hlen: usize) -> Vec<u8> {
        let mut v = b[..hlen].to_vec();
        v[16] = 0;
        v[17] = 0;
        v
    }

    /// The wire segments a GRO output stands for.
    fn expand(s: &GroSeg) -> Vec<Piece> {
        let Some(hd) = header(&s.bytes) else {
            return vec![(s.bytes.clone(), Vec::new(), s.csum_ok)];
        };
        if s.segs <= 1 {
            return vec![(
                header_wo_csum(&s.bytes, hd.hlen),
                s.bytes[hd.hlen..].to_vec(),
                s.csum_ok,
            )];
        }
        let gso = usize::from(s.gso_size);
        let pay = &s.bytes[hd.hlen..];
        let n = usize::from(s.segs);
        assert!(gso > 0 && pay.len() > (n - 1) * gso && pay.len() <= n * gso);
        (0..n)
            .map(|k| {
                let mut hdr = header_wo_csum(&s.bytes, hd.hlen);
                hdr[4..8].copy_from_slice(&hd.seq.wrapping_add((k * gso) as u32).to_be_bytes());
                if k + 1 < n {
                    hdr[13] = ACK;
                }
                let end = ((k + 1) * gso).min(pay.len());
                (hdr, pay[k * gso..end].to_vec(), s.csum_ok)
            })
            .collect()
    }

    fn flow_of(s: &GroSeg) -> Option<u16> {
        (s.bytes.len() >= 2).then(|| u16::from_be_bytes([s.bytes[0], s.bytes[1]]))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]
        #[test]
        fn gro_preserves_every_flow(ops in prop::collection::vec(op(), 0..160), max_len in prop_oneof![Just(GRO_MAX_LEN), 60usize..3000]) {
            let mut g = Gro::new(max_len);
            let mut seqs = [0u32; 10];
            let mut inputs: Vec<(Option<u16>, Piece, GroSeg)> = Vec::new();
            let mut out = Vec::new();
            for (i, o) in ops.iter().enumerate() {
                let seg = match *o {
                    Op::Seg { flow, step, len, flags, ts, ack, corrupt } => {
                        let f = usize::from(flow);
                        seqs[f] = seqs[f].wrapping_add(step as i32 as u32);
                        let hd = H {
                            sport: 2000 + u16::from(flow),
                            seq: seqs[f],
                            ack: u32::from(ack / 6),
                            flags,
                            window: 1000,
                            ts: (ts != 7).then_some(u32::from(ts / 4)),
                        };
                        let mut s = mk(hd, &data(usize::from(len), i as u8));
                        seqs[f] = seqs[f].wrapping_add(u32::from(len));
                        if corrupt {
                            let k = s.bytes.len() - 1;
                            s.bytes[k] ^= 0x01;
                        }
                        s
                    }
                    Op::Junk { flow, len } => {
                        let mut b = vec![0u8; usize::from(len)];
                        let sport = (2000 + u16::from(flow)).to_be_bytes();
                        let dport = 5001u16.to_be_bytes();
                        let ports = [sport[0], sport[1], dport[0], dport[1]];
                        for (x, p) in b.iter_mut().zip(ports) {
                            *x = p;
                        }
                        GroSeg::new(A, B, b)
                    }
                };
                let good = checksum_ok(seg.src, seg.dst, &seg.bytes);
                let piece = match header(&seg.bytes) {
                    Some(hd) => (header_wo_csum(&seg.bytes, hd.hlen), seg.bytes[hd.hlen..].to_vec(), good),
                    None => (seg.bytes.clone(), Vec::new(), false),
                };
                inputs.push((flow_of(&seg), piece, seg.clone()));
                // Both ways in: owned and borrowed.
                if i % 2 == 0 {
                    g.push(seg, &mut out);
                } else {
                    g.push_slice(seg.src, seg.dst, &seg.bytes, seg.csum_ok, &mut out);
                }
                prop_assert!(g.held_flows() <= GRO_MAX_FLOWS);
            }
            g.flush(&mut out);
            let st = g.stats();
            prop_assert_eq!(st.merged + st.held + st.passed, inputs.len() as u64);
            prop_assert_eq!(st.flushed + st.passed, out.len() as u64);
            let total_segs: u64 = out.iter().map(|s| u64::from(s.segs)).sum();
            prop_assert_eq!(total_segs, inputs.len() as u64);

            let mut flows: Vec<Option<u16>> = inputs.iter().map(|x| x.0).collect();
            flows.sort();
            flows.dedup();
            for f in flows {
                let want: Vec<Piece> = inputs.iter().filter(|x| x.0 == f).map(|x| x.1.clone()).collect();
                let got: Vec<Piece> = out.iter().filter(|s| flow_of(s) == f).flat_map(expand).collect();
                prop_assert_eq!(got, want);
            }
            for s in &out {
                prop_assert!(s.segs >= 1);
                if s.segs > 1 {
                    // Merged: bounded, all pieces verified, only ACK (+PSH).
                    prop_assert!(s.bytes.len() <= max_len);
                    prop_assert!(s.csum_ok);
                    prop_assert!(s.bytes[13] == ACK || s.bytes[13] == ACK | PSH);
                } else {
                    prop_assert_eq!(s.gso_size, 0);
                    // A single segment goes out byte for byte as it came in.
                    prop_assert!(inputs.iter().any(|x| x.2.bytes == s.bytes));
                }
            }
        }
    }
}
