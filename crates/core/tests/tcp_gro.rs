//! A segment merged by receive-side coalescing (`Tcb::handle_segment_gro`, `ip::gro`) against
//! the same wire segments arriving one by one: the peer sees the same ACKs (ACK behaviour
//! unchanged from the peer's point of view): as many, in the same order, with the same
//! cumulative ACKs and timestamps, windows within a segment of theirs, and the
//! same SACK information on the last (the pieces' owed ACKs, `Tcb::owed_acks`, carry the
//! SACK blocks but leave the D-SACK to the last). RFC 5681 §4.2 and RFC 9293 §3.8.6.3 (ACK every second
//! full-sized segment, at once for out-of-order data and for filling a hole), RFC 9293
//! §3.10.7.4 (acceptability and trimming to the window), RFC 2018 / RFC 2883 (SACK,
//! D-SACK).
mod common;
use common::*;

use ember_core::tcp::TcpSettings;
use ember_core::wire::{TcpFlags, TcpOptions};
use std::time::Duration;

/// Payload of a full segment with timestamps (MSS 1460 - 12).
const G: usize = 1448;
/// Sequence number of the peer's first data byte.
const PBASE: u32 = SERVER_ISS + 1;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Two identical established connections (SACK, timestamps, window scaling), the test
/// playing their peer.
fn twins(s: impl Fn(&mut TcpSettings)) -> (One, One, Peer) {
    let mut o = TcpOptions::default();
    o.mss = Some(1460);
    o.sack_permitted = true;
    o.timestamps = Some((5000, 0));
    o.window_scale = Some(7);
    let (a, peer) = One::established(settings(&s), o, 65535);
    let (b, peer_b) = One::established(settings(&s), o, 65535);
    assert_eq!((peer.seq, peer.tsecr), (peer_b.seq, peer_b.tsecr));
    if a.tcb.info().rcv_wnd > 65535 {
        assert_eq!(a.tcb.info().rcv_wscale, SCALE);
    }
    (a, b, peer)
}

/// The peer's bytes from `seq` on.
fn bytes(seq: u32, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (seq.wrapping_sub(PBASE) as usize + i) as u8)
        .map(|x| x.wrapping_mul(7))
        .collect()
}

/// `pieces` (payload lengths) starting at `seq`, one segment each; returns what the Tcb
/// sent in answer, all of it.
fn singles(o: &mut One, peer: &Peer, seq: u32, pieces: &[usize]) -> Vec<Seg> {
    let mut at = seq;
    for &n in pieces {
        let mut p = peer.clone();
        p.seq = at;
        o.input(&p.seg(TcpFlags::ACK, n), &bytes(at, n));
        at = at.wrapping_add(n as u32);
    }
    o.take_all()
}

/// The same pieces as one merged segment.
fn merged(o: &mut One, peer: &Peer, seq: u32, pieces: &[usize]) -> Vec<Seg> {
    let total: usize = pieces.iter().sum();
    let mut p = peer.clone();
    p.seq = seq;
    let repr = p.seg(TcpFlags::ACK, total);
    let now = o.now;
    o.tcb.handle_segment_gro(
        now,
        &repr,
        &bytes(seq, total),
        pieces.len() as u16,
        pieces[0] as u16,
    );
    o.flush();
    o.take_all()
}

fn sack_blocks(s: &Seg) -> Vec<(u32, u32)> {
    s.repr
        .options
        .sack_blocks()
        .iter()
        .map(|b| (b.left, b.right))
        .collect()
}

/// Our window scale in these tests (receive buffer 1 MB by default, or the one set).
fn right_edge(s: &Seg, scale: u8) -> u32 {
    s.ack().wrapping_add(u32::from(s.repr.window) << scale)
}

/// The merged segment drew the ACKs the singles drew: as many, in order, each with the
/// same cumulative ACK and timestamps and a window whose right edge is within one segment
/// of theirs. (Receiver SWS avoidance, RFC 9293 §3.8.6.2.2, moves the right edge in steps
/// of a segment; the owed ACKs compute it as it would have been, which can differ by
/// rounding, never by a segment or more.)
fn same_answer_scaled(one: &[Seg], many: &[Seg], scale: u8) {
    assert_eq!(
        one.len(),
        many.len(),
        "as many ACKs: {one:?} against {many:?}"
    );
    for (m, s) in one.iter().zip(many) {
        assert!(m.is_pure_ack() && s.is_pure_ack());
        assert_eq!(m.ack(), s.ack(), "cumulative ACK");
        let (em, es) = (right_edge(m, scale), right_edge(s, scale));
        assert!(
            em.abs_diff(es) < G as u32,
            "window right edges {em} and {es} (fields {} and {})",
            m.repr.window,
            s.repr.window
        );
        assert_eq!(m.repr.options.timestamps, s.repr.options.timestamps);
    }
}

fn same_answer(one: &[Seg], many: &[Seg]) {
    same_answer_scaled(one, many, SCALE);
}

/// Our window scale with the default 1 MB receive buffer.
const SCALE: u8 = 5;

/// Quick-ACK phase (connection start): every single segment is ACKed at once; the merged
/// one draws one immediate ACK for all of them, and both use up the same quick-ACK budget:
/// after 16 pieces, either way, the next lone segment waits for the delayed-ACK timer.
#[test]
fn quick_acks_are_counted_per_piece() {
    let (mut a, mut b, peer) = twins(|_| {});
    let pieces = [G; 8];
    let many = singles(&mut a, &peer, PBASE, &pieces);
    let one = merged(&mut b, &peer, PBASE, &pieces);
    assert_eq!(many.len(), 8, "quick ACKs: one per segment");
    same_answer(&one, &many);
    assert_eq!(one.last().unwrap().ack(), PBASE + 8 * G as u32);
    // Eight more pieces: the quick-ACK budget (16) is spent either way.
    let seq = PBASE + 8 * G as u32;
    let many = singles(&mut a, &peer, seq, &pieces);
    let one = merged(&mut b, &peer, seq, &pieces);
    same_answer(&one, &many);
    // A lone full segment now waits (RFC 9293 §3.8.6.3), in both.
    let seq = seq + 8 * G as u32;
    assert!(singles(&mut a, &peer, seq, &[G]).is_empty());
    assert!(singles(&mut b, &peer, seq, &[G]).is_empty());
    a.advance(ms(200));
    b.advance(ms(200));
    same_answer(&b.take_all(), &a.take_all());
    assert_eq!(a.read_all(), b.read_all());
    let (ia, ib) = (a.tcb.info(), b.tcb.info());
    assert_eq!(ia.stats.segs_in, ib.stats.segs_in, "wire segments counted");
    assert_eq!(ia.rcv_mss, G as u32);
    assert_eq!(ib.rcv_mss, G as u32, "MSS learnt from the pieces");
    assert_eq!(ia.rcv_nxt, ib.rcv_nxt);
}

/// Past the quick-ACK phase: the singles' ACKs (every second full segment at once, RFC
/// 5681 §4.2; the rest to the delayed-ACK timer) are what the merged segment draws too,
/// at once and after the timer alike.
#[test]
fn every_second_full_segment_is_still_acked_at_once() {
    let (mut a, mut b, peer) = twins(|_| {});
    let warm = [G; 16];
    singles(&mut a, &peer, PBASE, &warm);
    merged(&mut b, &peer, PBASE, &warm);
    let mut seq = PBASE + 16 * G as u32;
    for pieces in [vec![G, G], vec![G, G, G], vec![G, 100], vec![G; 45]] {
        let many = singles(&mut a, &peer, seq, &pieces);
        let one = merged(&mut b, &peer, seq, &pieces);
        assert!(
            !many.is_empty(),
            "{pieces:?}: the singles drew an immediate ACK"
        );
        same_answer(&one, &many);
        if pieces.len() == 45 {
            assert_eq!(one.len(), 22, "every second of 45 full pieces");
        }
        // What the singles left to the timer, the merged segment left too.
        a.advance(ms(200));
        b.advance(ms(200));
        same_answer(&b.take_all(), &a.take_all());
        let total: u32 = pieces.iter().map(|&n| n as u32).sum();
        seq += total;
        assert_eq!(a.read_all(), b.read_all());
    }
    assert_eq!(a.tcb.info().stats.segs_in, b.tcb.info().stats.segs_in);
    assert_eq!(a.tcb.info().rcv_nxt, b.tcb.info().rcv_nxt);
}

/// Out-of-order pieces beyond a hole draw an immediate duplicate ACK with a SACK block
/// covering them (RFC 5681 §4.2, RFC 2018 §4), and the merged segment that fills the hole
/// draws an immediate ACK of everything, as the singles do.
#[test]
fn out_of_order_and_hole_filling_answers_match() {
    let (mut a, mut b, peer) = twins(|_| {});
    let hole = PBASE;
    let beyond = PBASE + 3 * G as u32;
    let many = singles(&mut a, &peer, beyond, &[G; 4]);
    let one = merged(&mut b, &peer, beyond, &[G; 4]);
    same_answer(&one, &many);
    assert_eq!(one.last().unwrap().ack(), hole);
    assert_eq!(
        sack_blocks(one.last().unwrap()),
        sack_blocks(many.last().unwrap())
    );
    assert_eq!(
        sack_blocks(one.last().unwrap()),
        [(beyond, beyond + 4 * G as u32)]
    );
    assert_eq!(
        a.tcb.info().stats.ooo_segs_in,
        b.tcb.info().stats.ooo_segs_in,
        "out-of-order wire segments counted"
    );
    // Fill the hole with three pieces.
    let many = singles(&mut a, &peer, hole, &[G; 3]);
    let one = merged(&mut b, &peer, hole, &[G; 3]);
    same_answer(&one, &many);
    assert_eq!(one.last().unwrap().ack(), beyond + 4 * G as u32);
    assert!(sack_blocks(one.last().unwrap()).is_empty());
    assert_eq!(a.read_all(), b.read_all());
}

/// A merged segment wholly below RCV.NXT is a duplicate: an immediate ACK with a D-SACK
/// block (RFC 2883 §4.1) covering what the singles' D-SACKs covered together; one that
/// starts below RCV.NXT and goes beyond it is trimmed, its whole duplicate pieces counted
/// and answered at once, as the singles were.
#[test]
fn duplicates_are_reported_as_the_pieces_were() {
    let (mut a, mut b, peer) = twins(|_| {});
    singles(&mut a, &peer, PBASE, &[G; 20]);
    merged(&mut b, &peer, PBASE, &[G; 20]);
    a.advance(ms(200));
    b.advance(ms(200));
    a.take_all();
    b.take_all();
    let dup = PBASE + 2 * G as u32;
    let many = singles(&mut a, &peer, dup, &[G; 3]);
    let one = merged(&mut b, &peer, dup, &[G; 3]);
    assert_eq!(many.len(), 3, "each duplicate answered at once");
    same_answer(&one, &many);
    assert_eq!(
        sack_blocks(one.last().unwrap()),
        [(dup, dup + 3 * G as u32)]
    );
    let (sa, sb) = (a.tcb.info().stats, b.tcb.info().stats);
    assert_eq!(sa.dup_segs_in, sb.dup_segs_in);
    // Straddling RCV.NXT: two duplicate pieces, then two new ones.
    let nxt = PBASE + 20 * G as u32;
    let start = nxt - 2 * G as u32;
    let many = singles(&mut a, &peer, start, &[G; 4]);
    let one = merged(&mut b, &peer, start, &[G; 4]);
    same_answer(&one, &many);
    assert_eq!(one.last().unwrap().ack(), nxt + 2 * G as u32);
    assert_eq!(
        a.tcb.info().stats.dup_segs_in,
        b.tcb.info().stats.dup_segs_in
    );
    assert_eq!(a.read_all(), b.read_all());
}

/// A merged segment partly beyond the receive window is trimmed exactly as one large
/// segment would be (RFC 9293 §3.10.7.4): what fits is taken, and the pieces wholly
/// beyond the window, which alone would each have been answered at once, draw an
/// immediate ACK.
#[test]
fn the_window_edge_trims_as_for_a_big_segment() {
    let (mut a, mut b, peer) = twins(|s| {
        s.rcvbuf = 8192;
        s.max_buf = 8192;
    });
    assert_eq!(a.tcb.info().rcv_wscale, b.tcb.info().rcv_wscale);
    let wnd = a.tcb.info().rcv_wnd as usize;
    assert_eq!(wnd, b.tcb.info().rcv_wnd as usize);
    let n = wnd / G + 3;
    let pieces = vec![G; n];
    let many = singles(&mut a, &peer, PBASE, &pieces);
    let one = merged(&mut b, &peer, PBASE, &pieces);
    let scale = a.tcb.info().rcv_wscale;
    same_answer_scaled(&one, &many, scale);
    assert_eq!(
        one.last().unwrap().ack(),
        PBASE + wnd as u32,
        "exactly the window taken"
    );
    assert_eq!(a.tcb.info().rcv_nxt, b.tcb.info().rcv_nxt);
    assert_eq!(a.read_all(), b.read_all());
    a.take_all();
    b.take_all();
    // Spend the rest of the quick ACKs with small segments, reading as they come: the
    // pieces beyond the window used none, so both have the same left and answer alike.
    let mut seq = PBASE + wnd as u32;
    for i in 0..16 {
        let answers = [&mut a, &mut b].map(|o| {
            let n = singles(o, &peer, seq, &[100]).len();
            o.read_all();
            o.take_all();
            n
        });
        assert_eq!(answers[0], answers[1], "small segment {i}");
        seq += 100;
    }
    // Fill the window, unread, until less than a segment is left; let the delayed ACKs
    // go (they may open the window a little).
    let room = loop {
        let room = a.tcb.info().rcv_wnd;
        assert_eq!(room, b.tcb.info().rcv_wnd);
        if room < G as u32 {
            break room;
        }
        let fill = room as usize - 300;
        let mut chunks = vec![G; fill / G];
        chunks.push(fill % G);
        for o in [&mut a, &mut b] {
            singles(o, &peer, seq, &chunks);
            o.advance(ms(200));
            o.take_all();
        }
        seq += fill as u32;
    };
    assert!(room > 0);
    // Two pieces: `room` bytes of the first fit, which alone would wait for the
    // delayed-ACK timer; the second lies wholly beyond the window and alone draws an ACK
    // at once.
    let many = singles(&mut a, &peer, seq, &[G, G]);
    let one = merged(&mut b, &peer, seq, &[G, G]);
    assert_eq!(
        many.len(),
        1,
        "the piece beyond the window is answered at once"
    );
    same_answer_scaled(&one, &many, scale);
    assert_eq!(one.last().unwrap().ack(), seq + room);
    assert_eq!(a.read_all(), b.read_all());
}

/// `segs` = 1 or a description that does not fit the payload is one segment.
#[test]
fn a_description_that_does_not_fit_is_one_segment() {
    let (mut a, mut b, peer) = twins(|_| {});
    let repr = peer.seg(TcpFlags::ACK, 3000);
    let data = bytes(PBASE, 3000);
    let now = a.now;
    a.tcb.handle_segment(now, &repr, &data);
    // 3 x 100 cannot make 3000 bytes.
    b.tcb.handle_segment_gro(now, &repr, &data, 3, 100);
    a.flush();
    b.flush();
    let (ia, ib) = (a.tcb.info(), b.tcb.info());
    assert_eq!(ia.stats.segs_in, ib.stats.segs_in);
    assert_eq!(ia.rcv_mss, ib.rcv_mss);
    same_answer(&b.take_all(), &a.take_all());
}

/// `tcp_gro_stretch_acks`: a coalesced in-order run draws one ACK of all of it, as with
/// Linux's GRO, where the singles draw one per two full segments.
#[test]
fn stretch_acks_when_asked_for() {
    let (mut a, mut b, peer) = twins(|s| s.gro_stretch_acks = true);
    let warm = [G; 16];
    singles(&mut a, &peer, PBASE, &warm);
    merged(&mut b, &peer, PBASE, &warm);
    let seq = PBASE + 16 * G as u32;
    let pieces = [G; 45];
    let many = singles(&mut a, &peer, seq, &pieces);
    let one = merged(&mut b, &peer, seq, &pieces);
    assert_eq!(many.len(), 22);
    assert_eq!(one.len(), 1, "one stretch ACK");
    assert_eq!(one[0].ack(), seq + 45 * G as u32);
}
