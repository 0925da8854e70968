//! The TCP data path, loss recovery and timers, scripted against one `Tcb` (the test plays
//! the peer) or a `Pair` joined by a lossy path. Each test names the RFC section it checks.
mod common;
use common::*;

use ember_core::tcp::cc::CcAlgorithm;
use ember_core::tcp::{State, TcpError, TcpSettings};
use ember_core::wire::{TcpFlags, TcpOptions, TcpRepr};
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

/// The peer's MSS in most tests (no timestamps: every full segment carries 1460 bytes, and
/// the initial window is 10 of them whichever way ember computes it).
const MSS: u32 = 1460;
/// `MSS` as a length.
const M: usize = MSS as usize;
/// Sequence number of our first data byte.
const BASE: u32 = CLIENT_ISS + 1;
/// Sequence number of the peer's first data byte.
const PBASE: u32 = SERVER_ISS + 1;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `k` segments in bytes.
fn m(k: u32) -> u32 {
    k * MSS
}

/// Test data of `k` full segments.
fn pat(k: u32) -> Vec<u8> {
    pattern(m(k) as usize)
}

/// SYN,ACK options of the peer.
fn opts(mss: u16, sack: bool, ts: bool, ws: Option<u8>) -> TcpOptions {
    let mut o = TcpOptions::default();
    o.mss = Some(mss);
    o.sack_permitted = sack;
    o.timestamps = ts.then_some((5000, 0));
    o.window_scale = ws;
    o
}

/// Like `One::established`, but the SYN,ACK arrives `rtt` after the SYN (so the handshake
/// gives the RTT estimator a sample of `rtt`).
fn est_rtt(s: TcpSettings, o: TcpOptions, window: u16, rtt: Duration) -> (One, Peer) {
    let (one, peer) = One::established_after(s, o, window, rtt);
    assert_eq!((peer.seq, peer.ack), (PBASE, BASE));
    (one, peer)
}

/// MSS 1460, no SACK, no timestamps, no window scaling, window 65535, zero handshake RTT.
fn plain(s: TcpSettings) -> (One, Peer) {
    est_rtt(s, opts(1460, false, false, None), 65535, Duration::ZERO)
}

/// As `plain` but with SACK.
fn sacky(s: TcpSettings) -> (One, Peer) {
    est_rtt(s, opts(1460, true, false, None), 65535, Duration::ZERO)
}

fn newreno() -> TcpSettings {
    settings(|s| s.cc = CcAlgorithm::NewReno)
}

/// `s` with RACK-TLP (RFC 8985) off: the RFC 6675 DupThresh rules decide loss.
fn rfc6675(mut s: TcpSettings) -> TcpSettings {
    s.rack = false;
    s.tlp = false;
    s
}

/// The peer acknowledges up to `BASE + off`.
fn ack_to(o: &mut One, p: &mut Peer, off: u32) {
    p.ack = BASE + off;
    let seg = p.ack_seg();
    o.input(&seg, &[]);
}

/// The peer acknowledges up to `BASE + off` with SACK blocks given as offsets from `BASE`.
fn sack_to(o: &mut One, p: &mut Peer, off: u32, blocks: &[(u32, u32)]) {
    p.ack = BASE + off;
    let b: Vec<(u32, u32)> = blocks.iter().map(|&(l, r)| (BASE + l, BASE + r)).collect();
    let seg = p.sack(&b);
    o.input(&seg, &[]);
}

/// The peer sends `data` in order (advancing its sequence number).
fn peer_send(o: &mut One, p: &mut Peer, data: &[u8]) {
    let seg = p.seg(TcpFlags::ACK, data.len());
    o.input(&seg, data);
    p.seq += data.len() as u32;
}

/// The peer sends `data` at `PBASE + off` (out of order or repeated); its `seq` is unchanged.
fn peer_send_at(o: &mut One, p: &Peer, off: u32, data: &[u8]) {
    let mut seg = p.seg(TcpFlags::ACK, data.len());
    seg.seq = PBASE + off;
    o.input(&seg, data);
}

fn data_of(segs: &[Seg]) -> Vec<&Seg> {
    segs.iter().filter(|s| !s.data.is_empty()).collect()
}

/// (seq offset from BASE, length) of every data segment in `segs`.
fn spans(segs: &[Seg]) -> Vec<(u32, usize)> {
    data_of(segs)
        .iter()
        .map(|s| (s.seq().wrapping_sub(BASE), s.len()))
        .collect()
}

/// SACK blocks of a segment as offsets from PBASE.
fn blocks(s: &Seg) -> Vec<(u32, u32)> {
    s.repr
        .options
        .sack_blocks()
        .iter()
        .map(|b| (b.left.wrapping_sub(PBASE), b.right.wrapping_sub(PBASE)))
        .collect()
}

/// The header as the receiver sees it: emitted to bytes (options that do not fit in 40
/// bytes are left out by the emitter) and parsed back.
fn on_wire(r: &TcpRepr) -> TcpRepr {
    let mut buf = vec![0u8; r.header_len()];
    r.emit_header(&mut buf);
    let (back, _) = TcpRepr::parse(&buf, *CLIENT.ip(), *SERVER.ip(), false).expect("parses");
    back
}

/// Sends 16 in-order full segments from the peer so the quick-ACK budget at connection
/// start is spent, drains the ACKs, and returns the bytes sent.
fn spend_quickacks(o: &mut One, p: &mut Peer) -> u32 {
    let chunk = pattern(1000);
    for _ in 0..16 {
        peer_send(o, p, &chunk);
    }
    let acks = o.take_all();
    assert_eq!(
        acks.len(),
        16,
        "every segment of the quick-ACK budget is acked"
    );
    16_000
}

/// Deterministic pseudo-random numbers (a 64-bit LCG with a fixed seed).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

// =======================================================================================
// Fast retransmit and limited transmit (RFC 5681 §3.2, RFC 3042).
// =======================================================================================

/// RFC 5681 §3.2 steps 1-2: the third duplicate ACK retransmits the first unacknowledged
/// segment, exactly once, however many more duplicates follow.
#[test]
fn fast_retransmit_on_third_dupack_exactly_once() {
    let (mut o, mut p) = plain(newreno());
    let data = pat(10);
    assert_eq!(o.write(&data), data.len());
    assert_eq!(spans(&o.take_all()).len(), 10);
    // Two duplicates: nothing to retransmit yet (and no new data to send).
    for _ in 0..2 {
        ack_to(&mut o, &mut p, 0);
        assert!(o.sent.is_empty());
    }
    ack_to(&mut o, &mut p, 0);
    let r = o.take_all();
    assert_eq!(
        spans(&r),
        vec![(0, M)],
        "third dupack: one retransmission of SND.UNA"
    );
    assert_eq!(r[0].data, data[..M]);
    for _ in 0..6 {
        ack_to(&mut o, &mut p, 0);
    }
    assert!(
        o.take_all().is_empty(),
        "further dupacks do not retransmit again"
    );
    let st = o.tcb.stats();
    assert_eq!(st.fast_retransmits, 1);
    assert_eq!(st.retrans_segs, 1);
    assert_eq!(st.dup_acks_in, 9);
}

/// RFC 5681 §3.2: fewer than DupThresh duplicate ACKs never cause a retransmission or a
/// window reduction.
#[test]
fn two_dupacks_do_not_retransmit() {
    let (mut o, mut p) = plain(newreno());
    o.write(&pat(14));
    assert_eq!(spans(&o.take_all()).len(), 10);
    ack_to(&mut o, &mut p, 0);
    ack_to(&mut o, &mut p, 0);
    let out = o.take_all();
    assert!(
        spans(&out).iter().all(|&(off, _)| off >= m(10)),
        "{:?}",
        spans(&out)
    );
    let i = o.tcb.info();
    assert!(!i.in_recovery);
    assert_eq!(i.ssthresh, u32::MAX);
    assert_eq!(i.cwnd, m(10));
    assert_eq!(i.stats.retrans_segs, 0);
}

/// RFC 3042 §2: each of the first two duplicate ACKs sends one new segment (cwnd itself is
/// unchanged); the third starts fast retransmit and sends only the retransmission.
#[test]
fn limited_transmit_one_new_segment_per_dupack() {
    let (mut o, mut p) = plain(newreno());
    o.write(&pat(20));
    assert_eq!(spans(&o.take_all()).len(), 10);
    ack_to(&mut o, &mut p, 0);
    assert_eq!(spans(&o.take_all()), vec![(m(10), M)]);
    assert_eq!(
        o.tcb.info().cwnd,
        m(10),
        "limited transmit does not change cwnd"
    );
    ack_to(&mut o, &mut p, 0);
    assert_eq!(spans(&o.take_all()), vec![(m(11), M)]);
    ack_to(&mut o, &mut p, 0);
    assert_eq!(spans(&o.take_all()), vec![(0, M)]);
    // FlightSize was 12 segments: ssthresh = 6 segments (RFC 5681 eq. 4).
    assert_eq!(o.tcb.info().ssthresh, m(6));
}

/// RFC 3042 applies with SACK too (RFC 6675 §5: pipe falls as data is SACKed): each SACKing
/// duplicate ACK below the loss threshold releases exactly one new segment.
#[test]
fn limited_transmit_with_sack() {
    let (mut o, mut p) = sacky(rfc6675(newreno()));
    o.write(&pat(20));
    assert_eq!(spans(&o.take_all()).len(), 10);
    sack_to(&mut o, &mut p, 0, &[(m(1), m(2))]);
    assert_eq!(spans(&o.take_all()), vec![(m(10), M)]);
    sack_to(&mut o, &mut p, 0, &[(m(1), m(3))]);
    assert_eq!(spans(&o.take_all()), vec![(m(11), M)]);
    assert!(!o.tcb.info().in_recovery);
}

/// RFC 5681 §2 (DUPLICATE ACKNOWLEDGMENT): an ACK that changes the advertised window or
/// carries data is not a duplicate and never triggers fast retransmit.
#[test]
fn window_updates_and_data_are_not_dupacks() {
    let (mut o, mut p) = plain(newreno());
    o.write(&pat(10));
    o.take_all();
    for w in [65_000u16, 64_000, 63_000] {
        p.window = w;
        ack_to(&mut o, &mut p, 0);
    }
    for _ in 0..3 {
        peer_send(&mut o, &mut p, &pattern(100));
    }
    let out = o.take_all();
    assert!(
        data_of(&out).is_empty(),
        "no retransmission: {:?}",
        spans(&out)
    );
    let st = o.tcb.stats();
    assert_eq!(st.dup_acks_in, 0);
    assert_eq!(st.fast_retransmits, 0);
    assert!(!o.tcb.info().in_recovery);
}

// =======================================================================================
// NewReno (RFC 6582).
// =======================================================================================

/// Sends 10 segments and three duplicate ACKs (fast retransmit of segment 0).
fn into_fast_recovery(o: &mut One, p: &mut Peer) {
    o.write(&pat(10));
    assert_eq!(spans(&o.take_all()).len(), 10);
    for _ in 0..3 {
        ack_to(o, p, 0);
    }
    assert_eq!(spans(&o.take_all()), vec![(0, M)]);
    assert!(o.tcb.info().in_recovery);
}

/// RFC 6582 §3.2 step 4: a partial ACK retransmits the first unacknowledged segment (the
/// next hole) at once and recovery continues.
#[test]
fn newreno_partial_ack_retransmits_next_hole() {
    let (mut o, mut p) = plain(newreno());
    into_fast_recovery(&mut o, &mut p);
    // Segments 0..3 arrive; segment 3 was lost too.
    ack_to(&mut o, &mut p, m(3));
    let r = o.take_all();
    assert_eq!(
        spans(&r),
        vec![(m(3), M)],
        "partial ACK: next hole retransmitted"
    );
    assert_eq!(r[0].data, pat(10)[m(3) as usize..m(4) as usize]);
    assert!(
        o.tcb.info().in_recovery,
        "a partial ACK does not end recovery"
    );
    assert_eq!(o.tcb.stats().retrans_segs, 2);
}

/// RFC 6582 §3.2 step 3: a full ACK (covering `recover`) ends fast recovery with
/// cwnd = ssthresh (option 2): the next flight is exactly ssthresh bytes.
#[test]
fn newreno_full_ack_ends_recovery_cwnd_is_ssthresh() {
    let (mut o, mut p) = plain(newreno());
    into_fast_recovery(&mut o, &mut p);
    ack_to(&mut o, &mut p, m(10));
    let i = o.tcb.info();
    assert!(!i.in_recovery);
    assert_eq!(i.ssthresh, m(5));
    assert_eq!(i.cwnd, i.ssthresh);
    o.write(&pat(20));
    assert_eq!(
        spans(&o.take_all()).len(),
        5,
        "no leftover window inflation"
    );
}

/// RFC 5681 §3.2 steps 4-5 / RFC 6582 §3.2 step 3: each duplicate ACK after the third
/// inflates the window by one SMSS; new data goes out once the inflated window exceeds
/// the flight.
#[test]
fn newreno_window_inflation_releases_new_data() {
    let (mut o, mut p) = plain(newreno());
    o.write(&pat(20));
    o.take_all();
    ack_to(&mut o, &mut p, 0);
    ack_to(&mut o, &mut p, 0);
    ack_to(&mut o, &mut p, 0);
    // Two limited-transmit segments and the retransmission; FlightSize 12, so
    // cwnd = ssthresh + 3 SMSS = 9 segments.
    assert_eq!(spans(&o.take_all()), vec![(m(10), M), (m(11), M), (0, M)]);
    for k in 4..=6 {
        ack_to(&mut o, &mut p, 0);
        assert!(
            o.take_all().is_empty(),
            "dupack {k}: inflated window still <= flight"
        );
    }
    ack_to(&mut o, &mut p, 0);
    assert_eq!(spans(&o.take_all()), vec![(m(12), M)]);
    ack_to(&mut o, &mut p, 0);
    assert_eq!(spans(&o.take_all()), vec![(m(13), M)]);
}

/// RFC 6582 §3.2 (step 1 and the partial-ACK rules): losses within the same window are
/// repaired in one recovery episode; duplicate ACKs after a partial ACK do not reduce the
/// window a second time.
#[test]
fn newreno_no_second_reduction_in_same_window() {
    let (mut o, mut p) = plain(newreno());
    into_fast_recovery(&mut o, &mut p);
    let ss = o.tcb.info().ssthresh;
    assert_eq!(ss, m(5));
    ack_to(&mut o, &mut p, m(3));
    o.take_all();
    for _ in 0..4 {
        ack_to(&mut o, &mut p, m(3));
    }
    assert!(
        o.take_all().is_empty(),
        "no new fast retransmit inside recovery"
    );
    let i = o.tcb.info();
    assert_eq!(i.ssthresh, ss);
    assert_eq!(i.stats.recoveries, 1);
    assert_eq!(i.stats.fast_retransmits, 1);
    ack_to(&mut o, &mut p, m(10));
    assert_eq!(o.tcb.info().cwnd, ss);
}

// =======================================================================================
// SACK-based recovery (RFC 6675).
// =======================================================================================

/// RFC 6675 §5 and NextSeg() (§4): with several holes reported, exactly the holes are
/// retransmitted, once each, in order; SACKed data never is.
#[test]
fn sack_recovery_retransmits_only_holes() {
    let (mut o, mut p) = sacky(rfc6675(settings(|_| {})));
    o.write(&pat(10));
    o.take_all();
    let sacked = [(m(1), m(3)), (m(4), m(6)), (m(7), m(10))];
    sack_to(&mut o, &mut p, 0, &sacked);
    let r = o.take_all();
    assert_eq!(spans(&r), vec![(0, M), (m(3), M), (m(6), M)]);
    for (off, len) in spans(&r) {
        let (a, b) = (off, off + len as u32);
        assert!(
            sacked.iter().all(|&(l, r)| b <= l || a >= r),
            "SACKed data resent"
        );
    }
    // The same SACK information again is not a new duplicate ACK and sends nothing.
    sack_to(&mut o, &mut p, 0, &sacked);
    assert!(o.take_all().is_empty());
    assert!(o.tcb.info().in_recovery);
    ack_to(&mut o, &mut p, m(10));
    let i = o.tcb.info();
    assert!(!i.in_recovery);
    assert_eq!(i.cwnd, i.ssthresh);
}

/// RFC 6675 §5 step 4 (IsLost(HighACK + 1)): recovery starts when more than
/// (DupThresh - 1) * SMSS bytes above SND.UNA are SACKed, even after only two duplicates.
#[test]
fn sack_recovery_entered_by_islost_with_two_dupacks() {
    let (mut o, mut p) = sacky(rfc6675(settings(|_| {})));
    o.write(&pat(10));
    o.take_all();
    sack_to(&mut o, &mut p, 0, &[(m(1), m(2))]);
    assert!(o.take_all().is_empty());
    assert!(!o.tcb.info().in_recovery);
    sack_to(&mut o, &mut p, 0, &[(m(1), m(4))]);
    assert_eq!(o.tcb.stats().dup_acks_in, 2);
    assert!(o.tcb.info().in_recovery);
    assert_eq!(spans(&o.take_all()), vec![(0, M)]);
}

/// RFC 9937 (PRR) over RFC 6675's pipe: while pipe > ssthresh each ACK releases its
/// proportional share, ceil(prr_delivered * ssthresh / RecoverFS) - prr_out, instead of
/// RFC 6675 §5 step C sending nothing until pipe falls below cwnd; then packet
/// conservation (PRR-CRB) holds pipe at ssthresh.
#[test]
fn sack_recovery_prr_paces_sending() {
    let (mut o, mut p) = sacky(rfc6675(newreno()));
    o.write(&pat(40));
    assert_eq!(spans(&o.take_all()).len(), 10);
    sack_to(&mut o, &mut p, 0, &[(m(1), m(2))]);
    assert_eq!(spans(&o.take_all()), vec![(m(10), M)]);
    sack_to(&mut o, &mut p, 0, &[(m(1), m(3))]);
    assert_eq!(spans(&o.take_all()), vec![(m(11), M)]);
    sack_to(&mut o, &mut p, 0, &[(m(1), m(4))]);
    assert_eq!(
        spans(&o.take_all()),
        vec![(0, M)],
        "only the retransmission"
    );
    let i = o.tcb.info();
    assert!(i.in_recovery);
    // FlightSize 12 segments: ssthresh = cwnd = 6 segments. RecoverFS = 12 outstanding
    // less the 2 SACKed before recovery = 10 segments.
    assert_eq!((i.cwnd, i.ssthresh), (m(6), m(6)));
    // pipe = 1 (retransmitted) + the unSACKed data above the block. Each ACK SACKs one
    // more segment: prr_delivered = 2, 3, 4, 5 while pipe = 8, 8, 7, 7 > ssthresh gives
    // ceil(6 * k / 10) - prr_out = 1, 0, 1, 0; then pipe = 6 (nothing), and below
    // ssthresh one segment per segment delivered.
    let mut per_ack = Vec::new();
    let mut next_new = 12;
    for hi in 5..=12 {
        sack_to(&mut o, &mut p, 0, &[(m(1), m(hi))]);
        let sent = spans(&o.take_all());
        for (off, len) in &sent {
            assert_eq!((*off, *len), (m(next_new), M), "new data in order");
            next_new += 1;
        }
        per_ack.push(sent.len());
    }
    assert_eq!(per_ack, [1, 0, 1, 0, 0, 1, 1, 1]);
    assert_eq!(o.tcb.stats().prr_segs, 1 + 5);
    // The full ACK ends recovery with cwnd = ssthresh.
    ack_to(&mut o, &mut p, m(next_new));
    let i = o.tcb.info();
    assert!(!i.in_recovery);
    assert_eq!(i.cwnd, i.ssthresh);
}

/// RFC 9937 with RACK (RFC 8985) and CUBIC, several losses (the scenario of the corpus'
/// `prr-ss-30pkt-lost-1_4-11_16.pkt`): 20 segments written, segments 0-3 and 10-15 of
/// the flight lost. The in-flight estimate stays below ssthresh (7 segments), so each
/// ACK releases what it delivered (PRR-CRB), retransmissions first; the first partial
/// ACK that indicates no further loss releases one more (PRR-SSRB).
#[test]
fn prr_rack_cubic_several_losses_per_ack_counts() {
    let o = opts(1460, true, false, None);
    let (mut o, mut p) = est_rtt(settings(|_| {}), o, 65535, ms(10));
    o.write(&pat(20));
    assert_eq!(spans(&o.take_all()).len(), 10);
    o.advance(ms(10));
    let mut got: Vec<Vec<u32>> = Vec::new();
    let mut step = |o: &mut One, p: &mut Peer, ack: u32, blocks: &[(u32, u32)], wait: u64| {
        o.advance(ms(wait));
        sack_to(
            o,
            p,
            m(ack),
            &blocks
                .iter()
                .map(|&(a, b)| (m(a), m(b)))
                .collect::<Vec<_>>(),
        );
        let s: Vec<u32> = spans(&o.take_all())
            .iter()
            .map(|&(off, _)| off / MSS)
            .collect();
        got.push(s);
    };
    // SACKs of 4..10: two new segments (cwnd 10), then recovery retransmits 0..3, one per
    // ACK, then new data.
    for hi in 5..=12 {
        step(&mut o, &mut p, 0, &[(4, hi)], 2);
    }
    assert!(o.tcb.info().in_recovery);
    let i = o.tcb.info();
    assert_eq!(i.ssthresh, m(7));
    // Partial ACK of segment 0, nothing newly lost: CRB 1 + SSRB 1.
    step(&mut o, &mut p, 1, &[(4, 12)], 10);
    // Segments 2..12 SACKed: the retransmission of 1 is lost (RACK); 2 delivered, 2 out:
    // the retransmission first.
    step(&mut o, &mut p, 1, &[(2, 12)], 2);
    step(&mut o, &mut p, 1, &[(2, 13)], 2);
    step(&mut o, &mut p, 1, &[(2, 14)], 2);
    assert_eq!(
        got,
        vec![
            vec![10],
            vec![11],
            vec![0],
            vec![1],
            vec![2],
            vec![3],
            vec![12],
            vec![13],
            vec![14, 15],
            vec![1, 16],
            vec![17],
            vec![18],
        ]
    );
    assert!(o.tcb.info().in_recovery);
    // Everything from the first retransmission on went out under PRR.
    assert_eq!(o.tcb.stats().prr_segs, 14 - 2);
}

// =======================================================================================
// Retransmission timer (RFC 6298) and the RTO congestion response (RFC 5681 §3.1).
// =======================================================================================

/// RFC 6298 §2.1 (initial RTO 1 s) and §5.5 (back off ×2): the SYN is retransmitted after
/// 1 s, then 2 s, then 4 s.
#[test]
fn rto_initial_one_second_then_backoff() {
    let mut o = One::client(settings(|_| {}));
    let syn = o.pop();
    for expect in [1000, 2000, 4000] {
        assert_eq!(o.next_timer(), Some(ms(expect)));
        let r = o.pop();
        assert!(r.flags().syn());
        assert_eq!(r.seq(), syn.seq());
        assert!(o.sent.is_empty());
    }
}

/// RFC 6298 §5.4-§5.6 and §2.5: each expiry retransmits the segment at SND.UNA (only it,
/// since cwnd is one segment) and doubles the RTO, up to the maximum.
#[test]
fn rto_retransmits_snd_una_and_backs_off_to_max() {
    let s = settings(|s| s.rto_max = ms(2000));
    let (mut o, _p) = est_rtt(s, opts(1460, false, false, None), 65535, ms(100));
    assert_eq!(o.tcb.info().rto, ms(300));
    o.write(&pat(3));
    assert_eq!(spans(&o.take_all()).len(), 3);
    for (k, expect) in [300u64, 600, 1200, 2000, 2000, 2000]
        .into_iter()
        .enumerate()
    {
        assert_eq!(o.next_timer(), Some(ms(expect)), "timeout {k}");
        let r = o.take_all();
        assert_eq!(spans(&r), vec![(0, M)], "timeout {k}");
        assert_eq!(o.tcb.info().backoff, k as u32 + 1);
    }
    assert_eq!(o.tcb.stats().timeouts, 6);
}

/// RFC 5681 §3.1: on a timeout cwnd = 1 SMSS (loss window) and
/// ssthresh = max(FlightSize / 2, 2 * SMSS) (eq. 4), held on a repeated timeout.
#[test]
fn rto_sets_loss_window_and_ssthresh_eq4() {
    let (mut o, _p) = plain(newreno());
    o.write(&pat(10));
    o.take_all();
    o.next_timer();
    let i = o.tcb.info();
    assert_eq!(i.cwnd, MSS);
    assert_eq!(i.ssthresh, m(5));
    o.take_all();
    o.next_timer();
    let i = o.tcb.info();
    assert_eq!(i.cwnd, MSS);
    assert_eq!(
        i.ssthresh,
        m(5),
        "held for the same segment's repeated timeout"
    );

    // A one-segment flight: the 2 * SMSS floor.
    let (mut o, _p) = plain(newreno());
    o.write(&pat(1));
    o.take_all();
    o.next_timer();
    assert_eq!(o.tcb.info().ssthresh, m(2));
    assert_eq!(o.tcb.info().cwnd, MSS);
}

/// RFC 6298 §3 (Karn): the ACK of a retransmitted segment gives no RTT sample; the backed-off
/// RTO stays until a segment that was not retransmitted is acknowledged, and that sample
/// recomputes RTO per §2.3.
#[test]
fn karn_no_sample_from_retransmitted_segment() {
    let (mut o, mut p) = est_rtt(
        settings(|_| {}),
        opts(1460, false, false, None),
        65535,
        ms(100),
    );
    let samples = o.tcb.stats().rtt_samples;
    o.write(&pat(1));
    o.take_all();
    assert_eq!(o.next_timer(), Some(ms(300)));
    assert_eq!(spans(&o.take_all()), vec![(0, M)]);
    o.advance(ms(20));
    ack_to(&mut o, &mut p, m(1));
    let i = o.tcb.info();
    assert_eq!(
        i.stats.rtt_samples, samples,
        "no sample from a retransmitted segment"
    );
    assert_eq!(i.srtt, Some(ms(100)));
    assert_eq!(i.backoff, 1);
    // The next segment is timed with the backed-off RTO.
    o.write(&pat(1));
    o.take_all();
    assert_eq!(o.tcb.poll_timeout(), Some(o.now + ms(600)));
    o.advance(ms(100));
    ack_to(&mut o, &mut p, m(2));
    let i = o.tcb.info();
    assert_eq!(i.stats.rtt_samples, samples + 1);
    assert_eq!(i.backoff, 0);
    // srtt = 100, rttvar = 3/4 * 50 = 37.5 ms: RTO = 250 ms.
    assert_eq!(i.rto, Duration::from_micros(250_000));
}

/// RFC 7323 §3.2: a TSopt on a connection that did not negotiate timestamps MUST be
/// ignored, so it cannot give an RTT sample for a retransmitted segment either (RFC 6298
/// §3, Karn).
#[test]
fn karn_ignores_unnegotiated_timestamp_echo() {
    let (mut o, mut p) = est_rtt(
        settings(|_| {}),
        opts(1460, false, false, None),
        65535,
        ms(100),
    );
    assert!(!o.tcb.info().timestamps);
    let samples = o.tcb.stats().rtt_samples;
    o.write(&pat(1));
    o.take_all();
    o.next_timer();
    o.take_all();
    o.advance(ms(20));
    p.ack = BASE + MSS;
    let mut a = p.ack_seg();
    a.options.timestamps = Some((77, 1));
    o.input(&a, &[]);
    let i = o.tcb.info();
    assert_eq!(
        i.stats.rtt_samples, samples,
        "sample taken from a bogus TSecr"
    );
    assert_eq!(i.srtt, Some(ms(100)));
}

/// RFC 6298 §2.3: a clean sample R' updates RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R'| and
/// SRTT = 7/8 SRTT + 1/8 R', and RTO = SRTT + 4 RTTVAR is used for the next timer.
#[test]
fn rto_recomputed_after_clean_sample() {
    let (mut o, mut p) = est_rtt(
        settings(|_| {}),
        opts(1460, false, false, None),
        65535,
        ms(100),
    );
    // §2.2 first sample: SRTT = R, RTTVAR = R/2, RTO = R + 4 * R/2.
    let i = o.tcb.info();
    assert_eq!((i.srtt, i.rttvar, i.rto), (Some(ms(100)), ms(50), ms(300)));
    o.write(&pat(1));
    o.take_all();
    o.advance(ms(200));
    assert!(o.sent.is_empty(), "RTO is 300 ms, not yet expired");
    ack_to(&mut o, &mut p, m(1));
    let i = o.tcb.info();
    assert_eq!(i.srtt, Some(Duration::from_micros(112_500)));
    assert_eq!(i.rttvar, Duration::from_micros(62_500));
    assert_eq!(i.rto, Duration::from_micros(362_500));
    o.write(&pat(1));
    o.take_all();
    assert_eq!(
        o.tcb.poll_timeout(),
        Some(o.now + Duration::from_micros(362_500))
    );
}

/// RFC 6298 §2.4 with ember's `tcp_rexmit_interval_min` (200 ms, as Linux): a tiny RTT
/// never gives an RTO below the minimum.
#[test]
fn rto_minimum_200ms() {
    let (mut o, _p) = est_rtt(
        settings(|_| {}),
        opts(1460, false, false, None),
        65535,
        ms(1),
    );
    assert_eq!(o.tcb.info().rto, ms(200));
    o.write(&pat(1));
    o.take_all();
    assert_eq!(o.next_timer(), Some(ms(200)));
    assert_eq!(spans(&o.take_all()), vec![(0, M)]);
}

/// RFC 6298 §5.3 and §5.2: an ACK of new data restarts the timer with the current RTO; when
/// everything is acknowledged the timer stops.
#[test]
fn rto_timer_restarted_on_new_ack_and_stopped_when_all_acked() {
    let (mut o, mut p) = est_rtt(
        settings(|_| {}),
        opts(1460, false, false, None),
        65535,
        ms(100),
    );
    o.write(&pat(3));
    o.take_all();
    assert_eq!(o.tcb.poll_timeout(), Some(o.now + ms(300)));
    o.advance(ms(100));
    ack_to(&mut o, &mut p, m(1));
    let rto = o.tcb.info().rto;
    assert_eq!(rto, Duration::from_micros(250_000));
    assert_eq!(
        o.tcb.poll_timeout(),
        Some(o.now + rto),
        "restarted from this ACK"
    );
    o.advance(ms(50));
    ack_to(&mut o, &mut p, m(3));
    assert_eq!(
        o.tcb.poll_timeout(),
        None,
        "all data acknowledged: timer off"
    );
}

/// RFC 6298 §5.7: when the SYN was retransmitted and no RTT sample could be taken, the RTO
/// for data is re-initialized to 3 s.
#[test]
fn rto_three_seconds_after_syn_retransmission() {
    let mut o = One::client(settings(|_| {}));
    let syn = o.pop();
    assert_eq!(o.next_timer(), Some(ms(1000)));
    assert!(o.pop().flags().syn());
    o.advance(ms(50));
    let synack = TcpRepr {
        src_port: SERVER.port(),
        dst_port: CLIENT.port(),
        seq: SERVER_ISS,
        ack: syn.seq() + 1,
        flags: TcpFlags::SYN | TcpFlags::ACK,
        window: 65535,
        urgent: 0,
        options: opts(1460, false, false, None),
    };
    o.input(&synack, &[]);
    assert_eq!(o.tcb.state(), State::Established);
    o.take_all();
    assert_eq!(
        o.tcb.info().srtt,
        None,
        "Karn: no sample from the retransmitted SYN"
    );
    o.write(&pat(1));
    o.take_all();
    assert_eq!(o.tcb.poll_timeout(), Some(o.now + ms(3000)));
}

/// RFC 5681 §3.1 and RFC 6298 §5: after a timeout the sender slow-starts from one segment,
/// retransmitting the rest of the window (go-back-N) before any new data.
#[test]
fn after_rto_slow_start_retransmits_before_new_data() {
    let (mut o, mut p) = plain(newreno());
    o.write(&pat(20));
    assert_eq!(spans(&o.take_all()).len(), 10);
    o.next_timer();
    assert_eq!(spans(&o.take_all()), vec![(0, M)]);
    ack_to(&mut o, &mut p, m(1));
    assert_eq!(o.tcb.info().cwnd, m(2));
    assert_eq!(spans(&o.take_all()), vec![(m(1), M), (m(2), M)]);
    ack_to(&mut o, &mut p, m(3));
    assert_eq!(o.tcb.info().cwnd, m(4));
    assert_eq!(
        spans(&o.take_all()),
        vec![(m(3), M), (m(4), M), (m(5), M), (m(6), M)]
    );
    assert_eq!(o.tcb.stats().retrans_segs, 7);
}

// =======================================================================================
// Congestion control (RFC 6928, RFC 5681, RFC 9438).
// =======================================================================================

/// RFC 6928 §2: the initial window is 10 segments of the 1460-byte MSS, and the
/// `tcp_init_cwnd` tunable sets it.
#[test]
fn initial_window_ten_segments() {
    let (mut o, _p) = plain(settings(|_| {}));
    o.write(&pat(30));
    let s = spans(&o.take_all());
    assert_eq!(s, (0..10).map(|i| (m(i), M)).collect::<Vec<_>>());
    assert_eq!(o.tcb.info().cwnd, m(10));

    let (mut o, _p) = plain(settings(|s| s.init_cwnd = 4));
    o.write(&pat(30));
    assert_eq!(spans(&o.take_all()).len(), 4);
}

/// RFC 6928 §2: IW = min(10 * MSS, max(2 * MSS, 14600)) with the MSS actually in use, so a
/// peer with a smaller MSS gets 10 (smaller) segments, not 14600 bytes of them
/// (RFC 5681 §3.1: IW is counted in SMSS).
#[test]
fn initial_window_uses_negotiated_mss() {
    for (peer, mss) in [(Some(1000u16), 1000u32), (None, 536)] {
        let mut op = opts(1000, false, false, None);
        op.mss = peer;
        let (mut o, _p) = est_rtt(settings(|_| {}), op, 65535, Duration::ZERO);
        assert_eq!(o.tcb.info().snd_mss, mss);
        assert_eq!(o.tcb.info().cwnd, 10 * mss, "peer MSS {peer:?}");
        o.write(&pattern(40_000));
        assert_eq!(spans(&o.take_all()).len(), 10, "peer MSS {peer:?}");
    }
}

/// RFC 5681 §3.1 slow start: each ACK of one full segment grows cwnd by one SMSS, so each
/// ACK releases two new segments.
#[test]
fn slow_start_grows_cwnd_per_ack() {
    let (mut o, mut p) = plain(newreno());
    o.write(&pat(60));
    assert_eq!(spans(&o.take_all()).len(), 10);
    let mut next = m(10);
    for k in 1..=10u32 {
        ack_to(&mut o, &mut p, m(k));
        assert_eq!(o.tcb.info().cwnd, m(10 + k));
        assert_eq!(spans(&o.take_all()), vec![(next, M), (next + MSS, M)]);
        next += m(2);
    }
}

/// RFC 9438 §4.6: CUBIC sets ssthresh = cwnd * 0.7 and cwnd = ssthresh on fast retransmit.
#[test]
fn cubic_reduces_to_07_on_fast_retransmit() {
    let (mut o, mut p) = plain(settings(|s| s.cc = CcAlgorithm::Cubic));
    assert_eq!(o.tcb.info().cc, "cubic");
    into_fast_recovery(&mut o, &mut p);
    let i = o.tcb.info();
    assert!(
        i.ssthresh.abs_diff(m(10) * 7 / 10) <= 1,
        "ssthresh {}",
        i.ssthresh
    );
    assert_eq!(i.cwnd, i.ssthresh);
}

/// RFC 5681 §3.2 step 2 / RFC 6582: NewReno sets ssthresh = FlightSize / 2 and cwnd =
/// ssthresh (ember keeps the window inflation separately).
#[test]
fn newreno_halves_on_fast_retransmit() {
    let (mut o, mut p) = plain(newreno());
    assert_eq!(o.tcb.info().cc, "newreno");
    into_fast_recovery(&mut o, &mut p);
    let i = o.tcb.info();
    assert_eq!(i.ssthresh, m(5));
    assert_eq!(i.cwnd, m(5));
}

/// RFC 7661 §4.1 / RFC 5681 §3.1 (cwnd must reflect what the network carried): an
/// application-limited sender does not grow cwnd, whichever algorithm.
#[test]
fn cwnd_not_grown_when_application_limited() {
    for cc in [CcAlgorithm::Cubic, CcAlgorithm::NewReno] {
        let (mut o, mut p) = plain(settings(|s| s.cc = cc));
        for k in 1..=40u32 {
            o.write(&pat(1));
            assert_eq!(spans(&o.take_all()).len(), 1);
            ack_to(&mut o, &mut p, m(k));
        }
        assert_eq!(o.tcb.info().cwnd, m(10), "{cc}");
    }
}

/// RFC 7661 idea as Linux applies it in slow start: cwnd grows while it is below twice the
/// largest flight of the round, however the ACKs thin the flight out. Half a window sent
/// (5 of 10 segments) earns nothing; 9 segments take cwnd to 18 and no further; a full
/// window of 10 doubles it. Either algorithm.
#[test]
fn slow_start_grows_while_cwnd_below_twice_the_flight_peak() {
    for cc in [CcAlgorithm::Cubic, CcAlgorithm::NewReno] {
        for (k, want) in [(5u32, 10u32), (9, 18), (10, 20)] {
            let (mut o, mut p) = plain(settings(|s| s.cc = cc));
            o.write(&pat(k));
            assert_eq!(spans(&o.take_all()).len(), k as usize);
            // One ACK per two segments, the last for what is left.
            let mut acked = 0;
            while acked < k {
                acked = (acked + 2).min(k);
                ack_to(&mut o, &mut p, m(acked));
            }
            assert_eq!(o.tcb.info().cwnd, m(want), "{cc}: {k} segments");
        }
    }
}

/// A cumulative ACK over data already SACKed (or, without SACK, already reported by
/// duplicate ACKs) grows cwnd in slow start only by what it newly delivers: after two
/// limited-transmit dupacks, the ACK of three segments adds one (cwnd 10 -> 11).
#[test]
fn slow_start_counts_only_newly_delivered_data() {
    for sack in [false, true] {
        // RFC 6675's rules: with this helper's zero RTT, RACK's reordering window is 0
        // and the first SACK would already mark segment 1 lost; this test is about cwnd.
        let (mut o, mut p) = if sack {
            sacky(rfc6675(newreno()))
        } else {
            plain(rfc6675(newreno()))
        };
        o.write(&pat(15));
        assert_eq!(spans(&o.take_all()).len(), 10);
        for k in 2..=3 {
            if sack {
                sack_to(&mut o, &mut p, 0, &[(m(1), m(k))]);
            } else {
                ack_to(&mut o, &mut p, 0);
            }
            assert_eq!(spans(&o.take_all()).len(), 1, "limited transmit");
        }
        ack_to(&mut o, &mut p, m(3));
        assert_eq!(o.tcb.info().cwnd, m(11), "sack {sack}");
        // 9 in flight, cwnd 11: two new segments, the second with PSH.
        let out = o.take_all();
        assert_eq!(spans(&out), vec![(m(12), M), (m(13), M)], "sack {sack}");
        assert!(data_of(&out)[1].flags().psh());
    }
}

// =======================================================================================
// Nagle (RFC 896, RFC 9293 §3.7.4).
// =======================================================================================

/// RFC 896 / RFC 9293 §3.7.4: a small segment waits while data is unacknowledged; small
/// writes accumulate and go out together when the ACK arrives.
#[test]
fn nagle_holds_small_segment_until_ack() {
    let (mut o, mut p) = plain(settings(|_| {}));
    o.write(&pattern(100));
    assert_eq!(
        spans(&o.take_all()),
        vec![(0, 100)],
        "nothing in flight: sent at once"
    );
    o.write(&[1; 100]);
    o.write(&[2; 50]);
    assert!(o.sent.is_empty(), "held while 100 bytes are unacknowledged");
    o.advance(ms(150));
    assert!(o.sent.is_empty(), "Nagle has no timer");
    ack_to(&mut o, &mut p, 100);
    let r = o.take_all();
    assert_eq!(spans(&r), vec![(100, 150)]);
    assert!(r[0].flags().psh());
}

/// TCP_NODELAY disables Nagle (RFC 9293 §3.7.4 MUST-17: the application can turn it off).
#[test]
fn nodelay_sends_small_segments_at_once() {
    let (mut o, _p) = plain(settings(|_| {}));
    o.tcb.set_nodelay(true);
    o.write(&pattern(100));
    o.write(&pattern(100));
    o.write(&pattern(10));
    assert_eq!(spans(&o.take_all()), vec![(0, 100), (100, 100), (200, 10)]);
}

/// RFC 896: Nagle applies to small segments only; a full-sized segment is never held.
#[test]
fn nagle_never_holds_full_segment() {
    let (mut o, _p) = plain(settings(|_| {}));
    o.write(&pattern(100));
    o.take_all();
    o.write(&pattern(M + 500));
    assert_eq!(
        spans(&o.take_all()),
        vec![(100, M)],
        "full segment out, 500 held"
    );
}

/// `tcp_naglim_def`: only segments smaller than min(naglim, MSS) are subject to Nagle.
#[test]
fn naglim_tunable_respected() {
    let (mut o, _p) = plain(settings(|s| s.naglim = 50));
    o.write(&pattern(100));
    o.write(&pattern(60));
    assert_eq!(spans(&o.take_all()), vec![(0, 100), (100, 60)]);
    o.write(&pattern(40));
    assert!(o.sent.is_empty(), "40 < naglim 50 is held");
    // With the default limit the 60-byte write would have waited.
    let (mut o, _p) = plain(settings(|_| {}));
    o.write(&pattern(100));
    o.write(&pattern(60));
    assert_eq!(spans(&o.take_all()), vec![(0, 100)]);
}

// =======================================================================================
// TCP_CORK (Linux semantics).
// =======================================================================================

/// TCP_CORK: a partial segment is held while corked (even with nothing in flight) and sent
/// when the cork is removed.
#[test]
fn cork_holds_partial_segment_until_uncork() {
    let (mut o, _p) = plain(settings(|_| {}));
    let now = o.now;
    o.tcb.set_cork(now, true);
    o.write(&pattern(100));
    o.write(&pattern(100));
    assert!(o.sent.is_empty());
    let now = o.now;
    o.tcb.set_cork(now, false);
    o.flush();
    assert_eq!(spans(&o.take_all()), vec![(0, 200)]);
}

/// TCP_CORK: the partial segment goes out after `tcp_cork_interval` (200 ms) even while
/// still corked.
#[test]
fn cork_interval_releases_partial_segment() {
    let (mut o, _p) = plain(settings(|_| {}));
    let now = o.now;
    o.tcb.set_cork(now, true);
    o.write(&pattern(100));
    assert_eq!(o.tcb.poll_timeout(), Some(o.now + ms(200)));
    o.advance(ms(199));
    assert!(o.sent.is_empty());
    o.advance(ms(1));
    assert_eq!(spans(&o.take_all()), vec![(0, 100)]);
}

/// TCP_CORK holds only partial segments: full segments go out while corked.
#[test]
fn cork_sends_full_segments() {
    let (mut o, _p) = plain(settings(|_| {}));
    o.tcb.set_nodelay(true);
    let now = o.now;
    o.tcb.set_cork(now, true);
    o.write(&pattern(2 * M + 500));
    assert_eq!(spans(&o.take_all()), vec![(0, M), (MSS, M)]);
    let now = o.now;
    o.tcb.set_cork(now, false);
    o.flush();
    assert_eq!(spans(&o.take_all()), vec![(m(2), 500)]);
}

/// Setting TCP_NODELAY is an explicit push (Linux): what a cork holds leaves at once,
/// and the cork stays for later writes.
#[test]
fn nodelay_pushes_corked_data_once() {
    let (mut o, _p) = plain(settings(|_| {}));
    let now = o.now;
    o.tcb.set_cork(now, true);
    o.write(&pattern(80));
    assert!(o.sent.is_empty(), "corked");
    o.tcb.set_nodelay(true);
    o.flush();
    let out = o.take_all();
    assert_eq!(spans(&out), vec![(0, 80)]);
    assert!(data_of(&out)[0].flags().psh());
    o.write(&pattern(40));
    assert!(o.sent.is_empty(), "still corked for the next write");
}

/// MSG_MORE (Linux): the partial segment is held, even with TCP_NODELAY; a write
/// without it releases everything with PSH; an ACK of new data releases what is held
/// without PSH; the cork timer releases it with PSH.
#[test]
fn msg_more_holds_until_a_write_without_it_an_ack_or_the_timer() {
    let (mut o, mut p) = plain(settings(|_| {}));
    o.tcb.set_nodelay(true);
    let now = o.now;
    o.tcb.set_more(now, true);
    o.write(&pattern(100));
    o.write(&pattern(60));
    assert!(o.sent.is_empty(), "held despite TCP_NODELAY");
    o.write(&pattern(5));
    let now = o.now;
    o.tcb.set_more(now, false);
    o.flush();
    let out = o.take_all();
    assert_eq!(spans(&out), vec![(0, 165)]);
    assert!(
        data_of(&out)[0].flags().psh(),
        "the write without MSG_MORE pushes"
    );
    ack_to(&mut o, &mut p, 165);
    o.take_all();

    // A full segment leaves; the rest waits for the ACK and then goes without PSH.
    let now = o.now;
    o.tcb.set_more(now, true);
    o.write(&pattern(M + 150));
    assert_eq!(spans(&o.take_all()), vec![(165, M)]);
    ack_to(&mut o, &mut p, 165 + MSS);
    let out = o.take_all();
    assert_eq!(spans(&out), vec![(165 + MSS, 150)]);
    assert!(!data_of(&out)[0].flags().psh(), "no PSH on MSG_MORE data");
    ack_to(&mut o, &mut p, 165 + MSS + 150);
    o.take_all();

    // Nothing in flight, nothing else written: the cork interval releases it, pushed.
    let now = o.now;
    o.tcb.set_more(now, true);
    o.write(&pattern(40));
    assert!(o.sent.is_empty());
    o.advance(ms(200));
    let out = o.take_all();
    assert_eq!(spans(&out), vec![(165 + MSS + 150, 40)]);
    assert!(
        data_of(&out)[0].flags().psh(),
        "the timer's release is a push"
    );
}

// =======================================================================================
// FIN is never held (RFC 9293 §3.10.4).
// =======================================================================================

/// RFC 9293 §3.10.4 (CLOSE: "queue ... then form a FIN segment"): data held by Nagle goes
/// out at once with the FIN on the last data segment.
#[test]
fn fin_not_held_by_nagle() {
    let (mut o, _p) = plain(settings(|_| {}));
    o.write(&pattern(100));
    o.take_all();
    o.write(&pattern(100));
    assert!(o.sent.is_empty());
    let now = o.now;
    o.tcb.shutdown_write(now).unwrap();
    o.flush();
    let r = o.take_all();
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!((r[0].seq(), r[0].len()), (BASE + 100, 100));
    assert!(r[0].flags().fin());
    assert_eq!(o.tcb.state(), State::FinWait1);
}

/// As above for close() with TCP_CORK set: the FIN is not held by the cork.
#[test]
fn fin_not_held_by_cork() {
    let (mut o, _p) = plain(settings(|_| {}));
    let now = o.now;
    o.tcb.set_cork(now, true);
    o.write(&pattern(300));
    assert!(o.sent.is_empty());
    let now = o.now;
    o.tcb.close(now);
    o.flush();
    let r = o.take_all();
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!((r[0].seq(), r[0].len()), (BASE, 300));
    assert!(r[0].flags().fin());
}

// =======================================================================================
// Delayed ACK (RFC 9293 §3.8.6.3, RFC 5681 §4.2).
// =======================================================================================

/// Quick ACKs at connection start (Linux; allowed by RFC 5681 §4.2 "SHOULD" delay): the
/// first data segments are acknowledged at once, with no timer pending.
#[test]
fn quick_acks_at_connection_start() {
    let (mut o, mut p) = plain(settings(|_| {}));
    peer_send(&mut o, &mut p, &pattern(500));
    let a = o.pop();
    assert!(a.is_pure_ack());
    assert_eq!(a.ack(), PBASE + 500);
    assert_eq!(o.tcb.poll_timeout(), None);
}

/// RFC 9293 §3.8.6.3 / RFC 5681 §4.2: after the quick-ACK budget a single segment is
/// acknowledged after the delayed-ACK timer (`tcp_deferred_ack_interval`, 40 ms).
#[test]
fn delayed_ack_single_segment_after_40ms() {
    let (mut o, mut p) = plain(settings(|_| {}));
    let off = spend_quickacks(&mut o, &mut p);
    peer_send(&mut o, &mut p, &pattern(1000));
    assert!(o.sent.is_empty());
    assert_eq!(o.next_timer(), Some(ms(40)));
    let a = o.pop();
    assert!(a.is_pure_ack());
    assert_eq!(a.ack(), PBASE + off + 1000);
    assert_eq!(o.tcb.stats().acks_delayed, 1);
}

/// RFC 5681 §4.2 / RFC 9293 §3.8.6.3 (MUST-58): an ACK for at least every second
/// full-sized segment, sent at once.
#[test]
fn delayed_ack_two_full_segments_acked_at_once() {
    let (mut o, mut p) = plain(settings(|_| {}));
    let off = spend_quickacks(&mut o, &mut p);
    peer_send(&mut o, &mut p, &pattern(1000));
    assert!(o.sent.is_empty());
    peer_send(&mut o, &mut p, &pattern(1000));
    let a = o.pop();
    assert_eq!(a.ack(), PBASE + off + 2000);
    assert!(o.sent.is_empty());
    assert_eq!(o.tcb.poll_timeout(), None, "delayed-ACK timer cancelled");
}

/// RFC 5681 §4.2, counted in bytes as Linux does: a full segment and a partial one
/// (more than one MSS unacknowledged) are acknowledged at once, so a sender whose buffer
/// holds less than two segments never waits for the delayed-ACK timer; two small
/// segments (less than one MSS together) still wait for it.
#[test]
fn delayed_ack_more_than_one_mss_of_bytes_acked_at_once() {
    let (mut o, mut p) = plain(settings(|_| {}));
    let off = spend_quickacks(&mut o, &mut p);
    peer_send(&mut o, &mut p, &pattern(300));
    peer_send(&mut o, &mut p, &pattern(300));
    assert!(o.sent.is_empty(), "600 bytes < one MSS: delayed");
    assert_eq!(o.next_timer(), Some(ms(40)));
    let a = o.pop();
    assert_eq!(a.ack(), PBASE + off + 600);
    peer_send(&mut o, &mut p, &pattern(1000));
    assert!(o.sent.is_empty());
    peer_send(&mut o, &mut p, &pattern(600));
    let a = o.pop();
    assert_eq!(a.ack(), PBASE + off + 2200, "1600 bytes > one MSS: at once");
    assert_eq!(o.tcb.poll_timeout(), None, "delayed-ACK timer cancelled");
}

/// RFC 5681 §4.2 / RFC 2018 §4: an out-of-order segment is acknowledged at once (a
/// duplicate ACK) carrying a SACK block for it.
#[test]
fn out_of_order_segment_acked_at_once_with_sack() {
    let (mut o, mut p) = sacky(settings(|_| {}));
    let off = spend_quickacks(&mut o, &mut p);
    peer_send_at(&mut o, &p, off + 1000, &pattern(1000));
    let a = o.pop();
    assert_eq!(a.ack(), PBASE + off);
    assert_eq!(blocks(&a), vec![(off + 1000, off + 2000)]);
}

/// Memory: the out-of-order store (RFC 9293 §3.10.7.4: segments beyond
/// RCV.NXT "held for later processing"), with an out-of-order FIN and the SACK block
/// order of RFC 2018 §4, is allocated by the first segment held and dropped once the
/// holes are filled; the data reads back exactly, and the next hole allocates it again.
#[test]
fn out_of_order_store_is_dropped_once_the_holes_are_filled() {
    let (mut o, mut p) = sacky(settings(|_| {}));
    let off = spend_quickacks(&mut o, &mut p);
    o.read_all();
    assert!(!o.tcb.lazy_state().out_of_order);
    let data = pattern(4000);
    peer_send_at(&mut o, &p, off + 3000, &data[3000..]);
    peer_send_at(&mut o, &p, off + 1000, &data[1000..2000]);
    assert!(o.tcb.lazy_state().out_of_order);
    let a = o.take_all().pop().expect("duplicate ACK");
    assert_eq!(
        blocks(&a),
        vec![(off + 1000, off + 2000), (off + 3000, off + 4000)],
        "the most recent block first (RFC 2018 §4)"
    );
    // The first hole filled: the second is still held.
    peer_send(&mut o, &mut p, &data[..1000]);
    assert!(o.tcb.lazy_state().out_of_order);
    p.seq += 1000;
    // The last hole filled: nothing held, the store goes.
    peer_send_at(&mut o, &p, off + 2000, &data[2000..3000]);
    p.seq += 2000;
    assert!(!o.tcb.lazy_state().out_of_order);
    let a = o.take_all().pop().expect("ACK");
    assert_eq!(a.ack(), PBASE + off + 4000);
    assert!(blocks(&a).is_empty());
    assert_eq!(o.read_all(), data);
    // A FIN out of order is held too, until the data before it arrives.
    let mut fin = p.seg(TcpFlags::ACK | TcpFlags::FIN, 500);
    fin.seq = PBASE + off + 4500;
    o.input(&fin, &data[..500]);
    assert!(o.tcb.lazy_state().out_of_order);
    peer_send(&mut o, &mut p, &data[500..1000]);
    assert!(!o.tcb.lazy_state().out_of_order);
    assert_eq!(o.tcb.state(), State::CloseWait);
    assert_eq!(o.read_all(), [&data[500..1000], &data[..500]].concat());
}

/// RFC 5681 §4.2: a segment that fills a hole is acknowledged at once.
#[test]
fn filling_a_hole_acked_at_once() {
    let (mut o, mut p) = sacky(settings(|_| {}));
    let off = spend_quickacks(&mut o, &mut p);
    peer_send_at(&mut o, &p, off + 1000, &pattern(1000));
    o.take_all();
    peer_send(&mut o, &mut p, &pattern(1000));
    let a = o.pop();
    assert_eq!(a.ack(), PBASE + off + 2000);
    assert!(blocks(&a).is_empty());
}

// =======================================================================================
// Receiver SWS avoidance and zero window (RFC 9293 §3.8.6.2.2, §3.8.6.1).
// =======================================================================================

/// RFC 9293 §3.8.6.2.2: the window is not advertised in increments smaller than
/// min(RCV.BUFF / 2, Eff.snd.MSS); small reads send no update.
#[test]
fn receiver_sws_no_small_window_increments() {
    let (mut o, mut p) = plain(settings(|s| s.rcvbuf = 8192));
    for _ in 0..8 {
        peer_send(&mut o, &mut p, &pattern(1000));
    }
    let acks = o.take_all();
    assert_eq!(acks.last().unwrap().repr.window, 192);
    let mut buf = [0u8; 500];
    assert_eq!(o.tcb.recv(o.now, &mut buf), Ok(500));
    o.flush();
    assert!(o.sent.is_empty(), "a 500-byte opening is not advertised");
    // Data arriving now is acknowledged with the old right edge.
    peer_send(&mut o, &mut p, &pattern(100));
    let a = o.pop();
    assert_eq!(
        u32::from(a.repr.window),
        92,
        "right edge unchanged: 192 - 100"
    );
    assert_eq!(o.tcb.recv(o.now, &mut buf), Ok(500));
    o.flush();
    // 1000 bytes read: free 1092, one MSS above the advertised 92.
    let u = o.pop();
    assert!(u.is_pure_ack());
    assert_eq!(u32::from(u.repr.window), 1092);
}

/// RFC 9293 §3.8.6.2.2 / RFC 7323 §2.4: the right edge of the advertised window never moves
/// left, across arrivals, reads, delayed ACKs and window-scale rounding.
#[test]
fn advertised_right_edge_never_moves_left() {
    let s = settings(|s| s.rcvbuf = 16_384);
    let (mut o, mut p) = est_rtt(s, opts(1000, false, false, Some(2)), 65535, Duration::ZERO);
    let shift = o.tcb.info().rcv_wscale;
    assert!(shift > 0);
    let mut rng = Lcg(7);
    // The highest right edge advertised so far.
    let mut right = PBASE + o.tcb.info().rcv_wnd;
    let mut got = Vec::new();
    let mut sent: Vec<u8> = Vec::new();
    let mut buf = [0u8; 4096];
    for _ in 0..400 {
        // The peer sends what fits in the last advertised window.
        let n = 1 + rng.below(997) as u32;
        if p.seq + n <= right {
            let d: Vec<u8> = (0..n as usize)
                .map(|i| (sent.len() + i) as u8 ^ 0x5a)
                .collect();
            sent.extend_from_slice(&d);
            peer_send(&mut o, &mut p, &d);
        } else {
            let want = 1 + rng.below(3000) as usize;
            if let Ok(k) = o.tcb.recv(o.now, &mut buf[..want]) {
                got.extend_from_slice(&buf[..k]);
            }
            o.flush();
        }
        o.advance(ms(rng.below(30)));
        for a in o.take_all() {
            let edge = a.ack().wrapping_add(u32::from(a.repr.window) << shift);
            assert!(
                (edge.wrapping_sub(right) as i32) >= 0,
                "right edge moved left: {edge} < {right}"
            );
            right = edge;
        }
    }
    got.extend(o.read_all());
    assert_eq!(got, sent);
    assert!(
        sent.len() > 50_000,
        "the window was exercised: {}",
        sent.len()
    );
}

/// RFC 9293 §3.8.6.2.2 and §3.8.6.1: a full buffer is advertised as a zero window; when the
/// application drains it a window update is sent at once.
#[test]
fn zero_window_advertised_and_update_after_drain() {
    let (mut o, mut p) = plain(settings(|s| s.rcvbuf = 8192));
    for _ in 0..8 {
        peer_send(&mut o, &mut p, &pattern(1000));
    }
    peer_send(&mut o, &mut p, &pattern(192));
    let acks = o.take_all();
    let last = acks.last().unwrap();
    assert_eq!(last.ack(), PBASE + 8192);
    assert_eq!(last.repr.window, 0);
    assert!(o.tcb.stats().zero_window_adv >= 1);
    // Data beyond the zero window is not accepted.
    peer_send_at(&mut o, &p, 8192, &pattern(100));
    let a = o.pop();
    assert_eq!((a.ack(), a.repr.window), (PBASE + 8192, 0));
    assert_eq!(o.tcb.recv_available(), 8192);
    assert_eq!(o.read_all().len(), 8192);
    let u = o.pop();
    assert!(u.is_pure_ack());
    assert_eq!(u.ack(), PBASE + 8192);
    assert_eq!(u.repr.window, 8192);
}

// =======================================================================================
// Sender SWS avoidance and the persist timer (RFC 9293 §3.8.6.2.1, §3.8.6.1).
// =======================================================================================

/// RFC 9293 §3.8.6.2.1: no segment smaller than min(MSS, Max(SND.WND)/2) into a small
/// usable window; the override (persist) timer then sends what the window allows.
#[test]
fn sender_sws_no_tiny_segment_then_override() {
    let (mut o, mut p) = est_rtt(
        settings(|_| {}),
        opts(1460, false, false, None),
        m(4) as u16,
        Duration::ZERO,
    );
    o.write(&pat(8));
    assert_eq!(spans(&o.take_all()).len(), 4, "window-limited");
    p.window = 300;
    ack_to(&mut o, &mut p, m(4));
    assert!(
        o.sent.is_empty(),
        "no 300-byte segment into a 300-byte window"
    );
    let d = o.next_timer().unwrap();
    assert!(d >= ms(100) && d <= ms(1000), "override timeout {d:?}");
    let r = o.take_all();
    assert_eq!(spans(&r), vec![(m(4), 300)]);
    assert_eq!(r[0].data, pat(8)[m(4) as usize..m(4) as usize + 300]);
}

/// RFC 9293 §3.8.6.1: with a zero window the sender stops, probes on the persist timer with
/// exponential backoff, and resumes when the window opens.
#[test]
fn zero_window_probe_backoff_and_resume() {
    let (mut o, mut p) = est_rtt(
        settings(|_| {}),
        opts(1460, false, false, None),
        m(4) as u16,
        Duration::ZERO,
    );
    o.write(&pat(8));
    assert_eq!(spans(&o.take_all()).len(), 4);
    p.window = 0;
    ack_to(&mut o, &mut p, m(4));
    assert!(o.sent.is_empty());
    for expect in [200, 400, 800, 1600] {
        assert_eq!(o.next_timer(), Some(ms(expect)));
        let r = o.take_all();
        assert_eq!(r.len(), 1, "one probe: {r:?}");
        assert!(r[0].flags().ack() && !r[0].flags().syn());
        assert!(r[0].len() <= 1);
        ack_to(&mut o, &mut p, m(4));
        assert!(o.sent.is_empty());
    }
    assert_eq!(o.tcb.stats().window_probes, 4);
    p.window = m(4) as u16;
    ack_to(&mut o, &mut p, m(4));
    let r = spans(&o.take_all());
    assert_eq!(r, (4..8).map(|i| (m(i), M)).collect::<Vec<_>>());
}

/// RFC 9293 §3.8.6.1 (MUST-67, RFC 1122 §4.2.2.17): a connection probing a zero window
/// is kept open as long as the probes are answered; only an unresponsive peer times out.
#[test]
fn zero_window_never_gives_up_while_answered() {
    let s = settings(|s| {
        s.rto_max = ms(1000);
        s.abort_interval = ms(3000);
    });
    let (mut o, mut p) = est_rtt(s, opts(1460, false, false, None), 4000, Duration::ZERO);
    o.write(&pat(8));
    o.take_all();
    p.window = 0;
    ack_to(&mut o, &mut p, m(2));
    let start = o.now;
    while o.now < start + Duration::from_secs(60) {
        o.next_timer().expect("persist timer armed");
        assert!(!o.take_all().is_empty());
        ack_to(&mut o, &mut p, m(2));
    }
    assert_eq!(o.tcb.state(), State::Established);
    assert!(o.tcb.stats().window_probes > 50);
    // The same connection with the peer gone: it gives up after the abort interval.
    o.advance(Duration::from_secs(10));
    assert_eq!(o.tcb.state(), State::Closed);
    assert_eq!(o.tcb.error(), Some(TcpError::TimedOut));
}

/// RFC 9293 §3.8.6.1 (MUST-67; RFC 1122 §4.2.2.17): a FIN waiting for a zero window to
/// open must not make the connection time out while the peer keeps acknowledging.
#[test]
fn zero_window_fin_never_gives_up_while_answered() {
    let s = settings(|s| {
        s.rto_max = ms(1000);
        s.abort_interval = ms(3000);
    });
    let (mut o, mut p) = est_rtt(s, opts(1460, false, false, None), 65535, Duration::ZERO);
    o.write(&pat(2));
    o.take_all();
    p.window = 0;
    ack_to(&mut o, &mut p, m(2));
    let now = o.now;
    o.tcb.shutdown_write(now).unwrap();
    o.flush();
    let start = o.now;
    while o.now < start + Duration::from_secs(30) {
        if o.next_timer().is_none() {
            break;
        }
        o.take_all();
        // The receiver's buffer is still full: it answers with the same zero window.
        ack_to(&mut o, &mut p, m(2));
        o.take_all();
    }
    assert_eq!(o.tcb.error(), None, "after {:?}", o.now - start);
    assert_eq!(o.tcb.state(), State::FinWait1);
    // The window opens: the FIN is (re)sent and acknowledged.
    p.window = 65535;
    ack_to(&mut o, &mut p, m(2));
    let r = o.take_all();
    assert!(r.iter().any(|s| s.flags().fin()), "{r:?}");
    ack_to(&mut o, &mut p, m(2) + 1);
    assert_eq!(o.tcb.state(), State::FinWait2);
}

/// RFC 9293 §3.8.6.1: a receiving application that stops reading closes the window; the
/// sender probes, and when the window update that reopens it is lost, a probe discovers
/// the open window and the transfer completes byte-exact.
#[test]
fn pair_zero_window_lost_update_recovered_by_probe() {
    let b_set = settings(|s| s.rcvbuf = 16_384);
    let mut pr = Pair::new(settings(|_| {}), b_set, ms(10));
    let drop_next = Rc::new(Cell::new(0u32));
    let dn = drop_next.clone();
    pr.filter = Box::new(move |_, d, _| {
        if d == Dir::BtoA && dn.get() > 0 {
            dn.set(dn.get() - 1);
            return false;
        }
        true
    });
    pr.run_for(ms(100));
    let data = pattern(200_000);
    let mut off = pr.a.send(pr.now, &data).unwrap();
    pr.run_for(Duration::from_secs(3));
    assert_eq!(pr.b().info().rcv_wnd, 0, "the receiver's window is closed");
    let probes = pr.a.stats().window_probes;
    assert!(probes >= 2, "sender probes the zero window: {probes}");
    assert_eq!(pr.a.state(), State::Established);
    // The application reads; its window update is lost.
    drop_next.set(1);
    let mut got = pr.read_b();
    // The whole buffer, plus at most the rounding of window scaling (RFC 7323 §2.3): each
    // ACK that keeps the right edge rounds the window up to the scale's unit, as Linux's
    // tcp_select_window does (ALIGN(cur_win)), so the edge may creep by less than one
    // unit per ACK that B sent while its window closed.
    let unit = 1usize << pr.b().info().rcv_wscale;
    let acks = pr.log.iter().filter(|(_, d, _)| *d == Dir::BtoA).count();
    let most = 16_384 + acks * (unit - 1);
    assert!(
        (16_384..=most).contains(&got.len()),
        "{} (at most {most}: {acks} ACKs, unit {unit})",
        got.len()
    );
    let deadline = pr.now + Duration::from_secs(60);
    while got.len() < data.len() {
        assert!(pr.now < deadline, "stalled at {}", got.len());
        let now = pr.now;
        if off < data.len() {
            off += pr.a.send(now, &data[off..]).unwrap_or(0);
        }
        pr.run_for(ms(10));
        got.extend(pr.read_b());
    }
    assert!(got == data);
    assert_eq!(drop_next.get(), 0, "the window update was dropped");
    assert!(
        pr.a.stats().window_probes > probes,
        "a probe found the open window"
    );
}

// =======================================================================================
// Window scaling (RFC 7323 §2).
// =======================================================================================

/// RFC 7323 §2.2/§2.3: the peer's window field is scaled by its shift, so more than 64 KB
/// can be in flight; the sender fills exactly the scaled window.
#[test]
fn window_scaling_large_send_window() {
    let s = settings(|s| {
        s.init_cwnd = 300;
        s.sndbuf = 400_000;
    });
    let (mut o, mut p) = est_rtt(s, opts(1460, false, false, Some(7)), 65535, Duration::ZERO);
    assert_eq!(o.tcb.info().snd_wscale, 7);
    assert_eq!(
        o.tcb.info().snd_wnd,
        65535,
        "the SYN,ACK window is not scaled"
    );
    p.window = 730; // 730 << 7 = 93440 = 64 segments
    ack_to(&mut o, &mut p, 0);
    assert_eq!(o.tcb.info().snd_wnd, m(64));
    assert_eq!(o.write(&pattern(300_000)), 300_000);
    let s = spans(&o.take_all());
    assert_eq!(s.len(), 64);
    assert_eq!(o.tcb.info().unacked, m(64));
}

/// RFC 7323 §2.2/§2.3: our SYN carries the shift and an unscaled window; later segments
/// carry the window right-shifted, so a 1 MB buffer is advertised in full.
#[test]
fn window_scaling_advertised_field_uses_shift() {
    let mut o = One::client(settings(|_| {}));
    let syn = o.pop();
    assert_eq!(syn.repr.options.window_scale, Some(5));
    assert_eq!(syn.repr.window, 65535);
    let (mut o, mut p) = est_rtt(
        settings(|_| {}),
        opts(1460, false, false, Some(3)),
        65535,
        Duration::ZERO,
    );
    assert_eq!(o.tcb.info().rcv_wscale, 5);
    assert_eq!(o.tcb.info().rcv_wnd, 1_048_576);
    peer_send(&mut o, &mut p, &pattern(1000));
    let a = o.pop();
    // 1 MB - 1000 bytes, rounded up to the scale unit (never moving the edge left).
    assert_eq!(a.repr.window, 32_737);
    let edge = a.ack() + (u32::from(a.repr.window) << 5);
    assert!(edge >= PBASE + 1_048_576);
}

/// RFC 7323 §2: large windows work in both directions at once: each side has more than
/// 64 KB in flight, and both transfers are byte-exact.
#[test]
fn pair_large_windows_both_directions() {
    let mut pr = Pair::new(settings(|_| {}), settings(|_| {}), ms(20));
    pr.run_for(ms(100));
    assert_eq!(pr.a.state(), State::Established);
    assert!(pr.a.info().snd_wscale > 0 && pr.a.info().rcv_wscale > 0);
    let da = pattern(600_000);
    let db: Vec<u8> = pattern(600_003).into_iter().rev().collect();
    let (mut oa, mut ob) = (0, 0);
    let (mut ga, mut gb) = (Vec::new(), Vec::new());
    let (mut max_a, mut max_b) = (0, 0);
    let deadline = pr.now + Duration::from_secs(60);
    while ga.len() < db.len() || gb.len() < da.len() {
        assert!(pr.now < deadline, "transfer stalled");
        let now = pr.now;
        if oa < da.len() {
            oa += pr.a.send(now, &da[oa..]).unwrap_or(0);
        }
        if ob < db.len() {
            ob += pr.b().send(now, &db[ob..]).unwrap_or(0);
        }
        pr.run_for(ms(5));
        max_a = max_a.max(pr.a.info().unacked);
        max_b = max_b.max(pr.b().info().unacked);
        gb.extend(pr.read_b());
        ga.extend(pr.read_a());
    }
    assert!(gb == da && ga == db);
    assert!(max_a > 65_535, "a in flight at most {max_a}");
    assert!(max_b > 65_535, "b in flight at most {max_b}");
}

// =======================================================================================
// Out-of-order reassembly, SACK and D-SACK generation (RFC 9293 §3.10.7.4, RFC 2018,
// RFC 2883).
// =======================================================================================

/// RFC 9293 §3.10.7.4 (seventh step) and §3.4: segments arriving in any order, with
/// duplicates and overlaps, are delivered exactly once and in order.
#[test]
fn out_of_order_reassembly_exactly_once() {
    let (mut o, mut p) = sacky(settings(|_| {}));
    let data = pattern(50_000);
    let mut pieces: Vec<(u32, u32)> = (0..50).map(|i| (i * 1000, 1000)).collect();
    let mut rng = Lcg(42);
    // Some overlapping pieces and exact duplicates.
    for _ in 0..15 {
        let a = rng.below(49_000) as u32;
        pieces.push((a, 1 + rng.below(1500) as u32));
    }
    for i in (1..pieces.len()).rev() {
        pieces.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut got = Vec::new();
    for (off, len) in pieces {
        let end = (off + len).min(50_000) as usize;
        peer_send_at(&mut o, &p, off, &data[off as usize..end]);
        got.extend(o.read_all());
    }
    got.extend(o.read_all());
    assert_eq!(got.len(), data.len());
    assert_eq!(got, data);
    assert_eq!(o.tcb.info().ooo_bytes, 0);
    p.seq += 50_000;
    assert_eq!(o.tcb.rcv_nxt().0, p.seq);
}

/// RFC 2883 §4 (use of the first block; example §4.1.1): a duplicate of data already
/// acknowledged is reported in a D-SACK block, the first block of the next ACK.
#[test]
fn dsack_for_duplicate_below_rcv_nxt() {
    let (mut o, mut p) = sacky(settings(|_| {}));
    let d = pattern(1000);
    peer_send(&mut o, &mut p, &d);
    o.take_all();
    peer_send_at(&mut o, &p, 0, &d);
    let a = o.pop();
    assert_eq!(a.ack(), PBASE + 1000);
    assert_eq!(blocks(&a), vec![(0, 1000)]);
    assert_eq!(o.tcb.stats().dsacks_sent, 1);
    // The D-SACK is reported once only.
    peer_send(&mut o, &mut p, &d);
    let b = o.pop();
    assert!(blocks(&b).is_empty());
}

/// RFC 2883 §4 (each duplicate contiguous sequence is reported; example §4.1.3): the D-SACK
/// block reports only the part that was already received.
#[test]
fn dsack_for_partially_duplicate_segment() {
    let (mut o, mut p) = sacky(settings(|_| {}));
    let d = pattern(1500);
    peer_send(&mut o, &mut p, &d[..1000]);
    o.take_all();
    peer_send_at(&mut o, &p, 500, &d[500..1500]);
    let a = o.pop();
    assert_eq!(a.ack(), PBASE + 1500);
    assert_eq!(blocks(&a), vec![(500, 1000)]);
    assert_eq!(o.read_all(), d);
}

/// RFC 2883 §4 (second block rule; example §4.2.1): a duplicate of out-of-order data gives
/// a D-SACK block followed by the SACK block that contains it.
#[test]
fn dsack_for_duplicate_out_of_order_data() {
    let (mut o, p) = sacky(settings(|_| {}));
    peer_send_at(&mut o, &p, 2000, &pattern(1000));
    peer_send_at(&mut o, &p, 3000, &pattern(1000));
    o.take_all();
    peer_send_at(&mut o, &p, 2000, &pattern(1000));
    let a = o.pop();
    assert_eq!(a.ack(), PBASE);
    assert_eq!(blocks(&a), vec![(2000, 3000), (2000, 4000)]);
}

/// RFC 2018 §4: the first SACK block holds the most recently received segment; the others
/// repeat the most recently reported blocks.
#[test]
fn sack_first_block_is_most_recent() {
    let (mut o, p) = sacky(settings(|_| {}));
    let d = pattern(1000);
    peer_send_at(&mut o, &p, 2000, &d);
    assert_eq!(blocks(&o.pop()), vec![(2000, 3000)]);
    peer_send_at(&mut o, &p, 6000, &d);
    assert_eq!(blocks(&o.pop()), vec![(6000, 7000), (2000, 3000)]);
    peer_send_at(&mut o, &p, 4000, &d);
    assert_eq!(
        blocks(&o.pop()),
        vec![(4000, 5000), (6000, 7000), (2000, 3000)]
    );
    // Joining 2000..3000 and 4000..5000: the merged block comes first.
    peer_send_at(&mut o, &p, 3000, &d);
    assert_eq!(blocks(&o.pop()), vec![(2000, 5000), (6000, 7000)]);
}

/// RFC 2018 §3: with timestamps (12 option bytes) at most 3 SACK blocks fit in the 40-byte
/// option space; without, 4.
#[test]
fn sack_at_most_three_blocks_with_timestamps() {
    let (mut o, p) = est_rtt(
        settings(|_| {}),
        opts(1000, true, true, None),
        65535,
        Duration::ZERO,
    );
    assert!(o.tcb.info().timestamps);
    for k in [1u32, 3, 5, 7, 9] {
        peer_send_at(&mut o, &p, k * 1000, &pattern(1000));
    }
    let mut a = o.take_all().pop().unwrap();
    a.repr = on_wire(&a.repr);
    assert_eq!(blocks(&a), vec![(9000, 10_000), (7000, 8000), (5000, 6000)]);
    assert!(a.repr.options.timestamps.is_some());

    let (mut o, p) = sacky(settings(|_| {}));
    for k in [1u32, 3, 5, 7, 9] {
        peer_send_at(&mut o, &p, k * 1000, &pattern(1000));
    }
    let mut a = o.take_all().pop().unwrap();
    a.repr = on_wire(&a.repr);
    assert_eq!(blocks(&a).len(), 4);
    assert_eq!(blocks(&a)[0], (9000, 10_000));
}

/// `tcp_reass_max_segs`: out-of-order pieces beyond the limit are dropped (and not SACKed);
/// memory stays bounded.
#[test]
fn ooo_bounded_by_reass_max_segs() {
    let (mut o, p) = sacky(settings(|s| s.reass_max_segs = 4));
    for k in [1u32, 3, 5, 7, 9, 11] {
        peer_send_at(&mut o, &p, k * 1000, &pattern(1000));
    }
    let i = o.tcb.info();
    assert_eq!(i.ooo_bytes, 4000);
    assert_eq!(i.stats.rcv_drops_full, 2);
    let a = o.take_all().pop().unwrap();
    assert!(
        blocks(&a).iter().all(|&(_, r)| r <= 8000),
        "{:?}",
        blocks(&a)
    );
    // Filling the holes delivers what was kept.
    for k in [0u32, 2, 4, 6] {
        peer_send_at(&mut o, &p, k * 1000, &pattern(1000));
    }
    assert_eq!(o.read_all().len(), 8000);
}

/// RFC 9293 §3.10.7.4 (first step, trimming to the window): out-of-order data is held only
/// within the advertised window.
#[test]
fn ooo_bounded_by_window() {
    let (mut o, p) = sacky(settings(|s| s.rcvbuf = 8192));
    peer_send_at(&mut o, &p, 7000, &pattern(2000));
    assert_eq!(o.tcb.info().ooo_bytes, 1192, "trimmed at the right edge");
    let a = o.pop();
    assert_eq!(blocks(&a), vec![(7000, 8192)]);
    peer_send_at(&mut o, &p, 9000, &pattern(1000));
    assert_eq!(
        o.tcb.info().ooo_bytes,
        1192,
        "beyond the window: not stored"
    );
    assert_eq!(o.pop().ack(), PBASE, "answered with an ACK");
}

// =======================================================================================
// MSS (RFC 9293 §3.7.1, RFC 6691, RFC 1191).
// =======================================================================================

/// RFC 9293 §3.7.1: segments are sized by the peer's MSS option, bounded by the path MTU;
/// without the option the default 536 is used (MUST-15).
#[test]
fn mss_from_peer_option_and_path() {
    let cases: [(Option<u16>, usize); 3] = [(Some(536), 536), (Some(9000), 1460), (None, 536)];
    for (peer_mss, expect) in cases {
        let mut op = opts(1000, false, false, None);
        op.mss = peer_mss;
        let (mut o, _p) = est_rtt(settings(|_| {}), op, 65535, Duration::ZERO);
        assert_eq!(o.tcb.info().snd_mss as usize, expect);
        o.write(&pattern(5000));
        let s = spans(&o.take_all());
        assert_eq!(s[0].1, expect, "{peer_mss:?}");
        assert!(s.iter().all(|x| x.1 <= expect));
    }
}

/// RFC 6691 §2 / RFC 7323 §3: the MSS excludes options, so with timestamps a full segment
/// carries MSS - 12 bytes.
#[test]
fn mss_less_timestamp_option() {
    let (mut o, _p) = est_rtt(
        settings(|_| {}),
        opts(1460, false, true, None),
        65535,
        Duration::ZERO,
    );
    o.write(&pattern(5000));
    let r = o.take_all();
    assert_eq!(r[0].len(), 1448);
    assert!(r
        .iter()
        .all(|s| s.len() + s.repr.options.encoded_len() <= 1460));
}

/// RFC 1191 §6.3 / RFC 5927 §4.1: a lower path MTU lowers the MSS and outstanding data is
/// resent at the new size without a congestion response; a higher value is ignored.
#[test]
fn path_mtu_lowers_mss_and_resends() {
    let (mut o, _p) = est_rtt(
        settings(|_| {}),
        opts(1460, false, false, None),
        65535,
        Duration::ZERO,
    );
    o.write(&pattern(14_600));
    assert_eq!(spans(&o.take_all()).len(), 10);
    let ss = o.tcb.info().ssthresh;
    let now = o.now;
    o.tcb.on_path_mtu(now, 1000);
    o.flush();
    assert_eq!(o.tcb.info().snd_mss, 960);
    let r = spans(&o.take_all());
    assert!(!r.is_empty());
    assert_eq!(r[0], (0, 960));
    assert!(r.iter().all(|x| x.1 <= 960));
    for w in r.windows(2) {
        assert_eq!(
            w[1].0,
            w[0].0 + w[0].1 as u32,
            "contiguous resend from SND.UNA"
        );
    }
    assert_eq!(o.tcb.info().ssthresh, ss, "no congestion response");
    let now = o.now;
    o.tcb.on_path_mtu(now, 1500);
    o.tcb.on_path_mtu(now, 1200);
    assert_eq!(o.tcb.info().snd_mss, 960, "increases are ignored");
}

/// RFC 6691 §2: data plus all TCP options never exceed the peer's MSS, including SACK
/// blocks carried while we hold out-of-order data.
#[test]
fn segments_fit_mss_minus_sack_options() {
    let (mut o, mut p) = est_rtt(
        settings(|_| {}),
        opts(1000, true, true, None),
        65535,
        Duration::ZERO,
    );
    assert_eq!(o.tcb.info().snd_mss, 988);
    peer_send(&mut o, &mut p, &pattern(10));
    peer_send_at(&mut o, &p, 2000, &pattern(100));
    o.take_all();
    o.write(&pattern(5000));
    let r = o.take_all();
    let d = data_of(&r);
    assert!(d.len() >= 5);
    for s in &d {
        assert_eq!(s.repr.options.sack_blocks().len(), 1);
        assert!(
            s.len() + s.repr.options.encoded_len() <= 1000,
            "{} bytes",
            s.len()
        );
    }
    assert_eq!(d[0].len(), 976, "a full segment uses all the room there is");
    // Two islands: two blocks, 8 more option bytes.
    peer_send_at(&mut o, &p, 4000, &pattern(100));
    o.take_all();
    p.ack = o.tcb.snd_nxt().0;
    let a = p.ack_seg();
    o.input(&a, &[]);
    o.take_all(); // the Nagle-held tail of the first write
    p.ack = o.tcb.snd_nxt().0;
    let a = p.ack_seg();
    o.input(&a, &[]);
    assert!(o.sent.is_empty());
    o.write(&pattern(3000));
    let r = o.take_all();
    let d = data_of(&r);
    assert_eq!(d[0].repr.options.sack_blocks().len(), 2);
    assert_eq!(d[0].len(), 968);
    assert!(d
        .iter()
        .all(|s| s.len() + on_wire(&s.repr).options.encoded_len() <= 1000));
}

// =======================================================================================
// Whole transfers over a lossy path.
// =======================================================================================

/// Runs a 1 MB transfer a -> b over `pr` and returns what b received.
fn transfer(pr: &mut Pair, data: &[u8], limit: Duration) -> Vec<u8> {
    pr.run_for(ms(100));
    assert_eq!(pr.a.state(), State::Established);
    let deadline = pr.now + limit;
    let mut off = 0;
    let mut got = Vec::new();
    while got.len() < data.len() {
        assert!(pr.now < deadline, "stalled at {} bytes", got.len());
        let now = pr.now;
        if off < data.len() {
            off += pr.a.send(now, &data[off..]).unwrap_or(0);
        }
        pr.run_for(ms(10));
        got.extend(pr.read_b());
    }
    got
}

/// RFC 5681 / RFC 6675: with every 7th data segment dropped (retransmissions included) a
/// 1 MB transfer completes byte-exact.
#[test]
fn pair_transfer_drop_every_7th_data_segment() {
    let mut pr = Pair::new(settings(|_| {}), settings(|_| {}), ms(10));
    let mut n = 0u32;
    pr.filter = Box::new(move |_, d, s| {
        if d == Dir::AtoB && !s.data.is_empty() {
            n += 1;
            return n % 7 != 0;
        }
        true
    });
    let data = pattern(1 << 20);
    let got = transfer(&mut pr, &data, Duration::from_secs(120));
    assert!(got == data, "byte-exact");
    let st = pr.a.stats();
    assert!(st.retrans_segs > 100, "{st:?}");
    assert!(st.fast_retransmits > 0);
}

/// RFC 6298 §5: a 3 s blackout of the path (both directions) is survived through RTO
/// backoff; the 1 MB transfer completes byte-exact.
#[test]
fn pair_transfer_survives_3s_blackout() {
    let mut pr = Pair::new(settings(|_| {}), settings(|_| {}), ms(10));
    let t0 = pr.now + ms(300);
    pr.filter = Box::new(move |now, _, _| now < t0 || now >= t0 + Duration::from_secs(3));
    let data = pattern(1 << 20);
    let got = transfer(&mut pr, &data, Duration::from_secs(120));
    assert!(got == data, "byte-exact");
    assert!(pr.a.stats().timeouts >= 2, "{:?}", pr.a.stats());
    assert!(pr.now > t0 + Duration::from_secs(3));
}

/// RFC 6582 / RFC 5681 without SACK: NewReno recovery alone completes a 1 MB transfer with
/// every 7th data segment dropped.
#[test]
fn pair_transfer_drop_every_7th_without_sack() {
    let s = settings(|s| {
        s.sack = 0;
        s.cc = CcAlgorithm::NewReno;
    });
    let mut pr = Pair::new(s.clone(), s, ms(10));
    let mut n = 0u32;
    pr.filter = Box::new(move |_, d, s| {
        if d == Dir::AtoB && !s.data.is_empty() {
            n += 1;
            return n % 7 != 0;
        }
        true
    });
    let data = pattern(1 << 20);
    let got = transfer(&mut pr, &data, Duration::from_secs(300));
    assert!(!pr.a.info().sack);
    assert!(got == data, "byte-exact");
    assert!(pr.a.stats().retrans_segs > 100);
}

// ======================================================================================
// RFC 9293 Appendix B rows not covered above.
// ======================================================================================

/// MUST-60/61: without a PUSH flag in the SEND call, data is never buffered
/// indefinitely and the last segment of what is buffered carries PSH; earlier full
/// segments do not.
#[test]
fn psh_on_the_last_segment_of_buffered_data() {
    // `tcp_push_segs` 0: PSH only where RFC 1122 requires it.
    let (mut o, mut p) = plain(settings(|s| s.push_segs = 0));
    o.write(&pattern(3 * M + 100));
    let segs = data_of_owned(o.take_all());
    // Nagle holds the 100-byte tail while data is unacknowledged...
    assert_eq!(segs.len(), 3);
    for s in &segs {
        assert!(!s.flags().psh(), "not the end of the buffered data");
    }
    // ...but not indefinitely: the ACK releases it, with PSH (MUST-60, MUST-61).
    ack_to(&mut o, &mut p, 3 * MSS);
    let tail = data_of_owned(o.take_all());
    assert_eq!(tail.len(), 1);
    assert_eq!(tail[0].len(), 100);
    assert!(tail[0].flags().psh());
    // Without Nagle the last segment of one write carries PSH at once.
    o.tcb.set_nodelay(true);
    o.write(&pattern(2 * M + 7));
    let segs = data_of_owned(o.take_all());
    assert_eq!(segs.len(), 3);
    assert!(!segs[0].flags().psh() && !segs[1].flags().psh());
    assert!(segs[2].flags().psh());
}

/// `tcp_push_segs` (default 2, as Linux marks the end of each GSO chunk): every second
/// new-data segment of a burst carries PSH as well as the one that empties the queue;
/// a lone segment (limited transmit, one per ACK) does not, and the count starts
/// again with each burst.
#[test]
fn psh_every_second_segment_of_a_burst() {
    let (mut o, _) = plain(settings(|_| {}));
    o.tcb.set_nodelay(true);
    // 3 full segments and a tail: PSH on the 2nd and on the 4th (the last buffered).
    o.write(&pattern(3 * M + 54));
    let segs = data_of_owned(o.take_all());
    let psh: Vec<bool> = segs.iter().map(|s| s.flags().psh()).collect();
    assert_eq!(psh, [false, true, false, true]);
    // A 20-segment write with cwnd 10: PSH on every second, so the burst ends with it.
    let (mut o, mut p) = plain(newreno());
    o.write(&pat(20));
    let segs = data_of_owned(o.take_all());
    assert_eq!(segs.len(), 10);
    for (i, s) in segs.iter().enumerate() {
        assert_eq!(s.flags().psh(), i % 2 == 1, "segment {i}");
    }
    // Limited transmit (RFC 3042): one lone segment per duplicate ACK, each without
    // PSH (the count starts again with each burst).
    for k in 0..2 {
        ack_to(&mut o, &mut p, 0);
        let segs = data_of_owned(o.take_all());
        assert_eq!(segs.len(), 1);
        assert!(!segs[0].flags().psh(), "dupack {k}");
    }
    let mut o2 = plain(settings(|s| s.push_segs = 0)).0;
    o2.tcb.set_nodelay(true);
    o2.write(&pattern(3 * M + 54));
    let psh: Vec<bool> = data_of_owned(o2.take_all())
        .iter()
        .map(|s| s.flags().psh())
        .collect();
    assert_eq!(psh, [false, false, false, true], "tcp_push_segs 0");
}

fn data_of_owned(segs: Vec<Seg>) -> Vec<Seg> {
    segs.into_iter().filter(|s| !s.data.is_empty()).collect()
}

/// MUST-65: the MSS option is sent only on SYN segments.
#[test]
fn mss_option_only_on_syn() {
    let mut o = One::client(settings(|_| {}));
    let syn = o.pop();
    assert!(syn.flags().syn() && syn.repr.options.mss.is_some());
    let (mut o, mut p) = est_rtt(
        settings(|_| {}),
        opts(1460, true, true, Some(7)),
        65535,
        Duration::ZERO,
    );
    o.write(&pattern(5 * M));
    for s in o.take_all() {
        assert_eq!(
            on_wire(&s.repr).options.mss,
            None,
            "no MSS on {:?}",
            s.flags()
        );
    }
    ack_to(&mut o, &mut p, 5 * MSS);
    for s in o.take_all() {
        assert_eq!(on_wire(&s.repr).options.mss, None);
    }
}

/// MUST-34 (robust against a shrinking window), SHLD-14/15: the peer moves the right
/// edge of its window to the left. ember sends nothing beyond the new edge, keeps the
/// data it already sent, and continues byte-exact once the window opens again.
#[test]
fn shrinking_window_is_survived() {
    let (mut o, mut p) = plain(settings(|_| {}));
    let data = pattern(20 * M);
    o.write(&data);
    let first = data_of_owned(o.take_all());
    assert!(!first.is_empty());
    let sent: u32 = first.iter().map(|s| s.len() as u32).sum();
    // The peer acknowledges one segment and shrinks its window to a single segment:
    // SND.UNA + SND.WND now lies far left of SND.NXT.
    p.ack = BASE + MSS;
    p.window = MSS as u16;
    let seg = p.ack_seg();
    o.input(&seg, &[]);
    assert!(
        data_of_owned(o.take_all()).is_empty(),
        "no new data beyond the shrunken window"
    );
    assert_eq!(o.tcb.state(), State::Established);
    // The window opens again and everything is acknowledged bit by bit: the rest flows.
    let mut acked = MSS;
    let mut got: Vec<u8> = data[..sent as usize].to_vec();
    p.window = 65535;
    for _ in 0..100 {
        if acked as usize >= data.len() {
            break;
        }
        acked = (acked + 4 * MSS).min(got.len() as u32);
        ack_to(&mut o, &mut p, acked);
        for s in data_of_owned(o.take_all()) {
            let off = s.seq().wrapping_sub(BASE) as usize;
            if off == got.len() {
                got.extend_from_slice(&s.data);
            } else {
                assert_eq!(
                    &got[off..off + s.len()],
                    &s.data[..],
                    "resent bytes are the same"
                );
            }
        }
        if acked as usize == got.len() && got.len() < data.len() {
            o.advance(Duration::from_secs(2));
        }
    }
    assert_eq!(got, data);
}

/// Congestion control is selectable per connection (TCP_CONGESTION): a NewReno
/// connection on a stack whose default is CUBIC halves its window on fast retransmit
/// (RFC 5681 §3.2) where the CUBIC one takes 0.7 (RFC 9438 §4.6).
#[test]
fn congestion_control_is_selectable_per_connection() {
    let reduce = |per_conn: Option<CcAlgorithm>| {
        let (mut o, mut p) = plain(settings(|s| s.cc = CcAlgorithm::Cubic));
        if let Some(a) = per_conn {
            o.tcb.set_congestion_control(a);
        }
        let name = o.tcb.info().cc;
        o.write(&pattern(10 * M));
        o.take_all();
        let before = o.tcb.info().cwnd;
        p.ack = BASE;
        for _ in 0..3 {
            let seg = p.ack_seg();
            o.input(&seg, &[]);
        }
        (name, before, o.tcb.info().ssthresh)
    };
    let (name, cwnd, ssthresh) = reduce(None);
    assert_eq!(name, "cubic");
    assert_eq!(ssthresh, cwnd * 7 / 10);
    let (name, cwnd, ssthresh) = reduce(Some(CcAlgorithm::NewReno));
    assert_eq!(name, "newreno");
    assert_eq!(ssthresh, cwnd / 2);
}
