//! D-SACK (RFC 2883 §4) and SACK block order (RFC 2018 §4) when an arriving segment
//! overlaps RCV.NXT and data held out of order: the table of `support/dsack_table.rs`
//! (113 placements of the segment, with and without timestamps) against one `Tcb` on
//! virtual time. For each case the test checks the ACK the segment draws (cumulative
//! ACK, SACK blocks as emitted on the wire, their order), the `dsacks_sent` counter, that
//! the D-SACK is not repeated on the next ACK (RFC 2883 §4 rule 2), and that the data is
//! delivered exactly once. The same table runs against Linux in
//! `crates/conformance/tests/dsack_table.rs`.
mod common;
#[path = "support/dsack_table.rs"]
mod dsack_table;

use common::*;
use dsack_table::{cases, max_blocks, rfc_expected, HELD, RCV_NXT};
use ember_core::wire::{TcpFlags, TcpOptions, TcpRepr};

/// Bytes the peer sends first, in 1000-byte segments, when a case runs with the quick
/// ACKs of connection start spent: the ACK of the case's segment must then be one the
/// segment draws at once, not one of the 16 quick ACKs.
const SPEND: u32 = 16_000;

/// The absolute sequence number of the peer's relative `x`, the table's numbers starting
/// `base` bytes into the stream (RCV.NXT is at 100 after the table's first in-order data,
/// as in a packetdrill script where the peer's ISN is 0).
fn abs(x: u32, base: u32) -> u32 {
    SERVER_ISS.wrapping_add(base).wrapping_add(x)
}

/// The peer's byte at relative sequence number `x`: duplicates carry the same bytes.
fn byte(x: u32) -> u8 {
    (x.wrapping_mul(7) ^ (x >> 8)) as u8
}

fn data(s: u32, e: u32) -> Vec<u8> {
    (s..e).map(byte).collect()
}

/// The header as the peer sees it (emitted and parsed back: blocks that do not fit in
/// the option space are not sent).
fn on_wire(r: &TcpRepr) -> TcpRepr {
    let mut buf = vec![0u8; r.header_len()];
    r.emit_header(&mut buf);
    let (back, _) = TcpRepr::parse(&buf, *CLIENT.ip(), *SERVER.ip(), false).expect("parses");
    back
}

/// The SACK blocks of `s` as sent, in the table's numbers.
fn blocks(s: &Seg, base: u32) -> Vec<(u32, u32)> {
    let rel = |x: u32| x.wrapping_sub(abs(0, base));
    on_wire(&s.repr)
        .options
        .sack_blocks()
        .iter()
        .map(|b| (rel(b.left), rel(b.right)))
        .collect()
}

/// The peer sends `[s, e)`; what the `Tcb` sends back.
fn send(o: &mut One, p: &Peer, base: u32, (s, e): (u32, u32)) -> Vec<Seg> {
    let mut seg = p.seg(TcpFlags::ACK, (e - s) as usize);
    seg.seq = abs(s, base);
    o.input(&seg, &data(s, e));
    o.take_all()
}

/// The one ACK `out` should be, as (ack, blocks) in the table's numbers, or why not.
fn the_ack(out: &[Seg], base: u32) -> Result<(u32, Vec<(u32, u32)>), String> {
    match out {
        [a] if a.is_pure_ack() => Ok((a.ack().wrapping_sub(abs(0, base)), blocks(a, base))),
        _ => Err(format!(
            "{} segments: {:?}",
            out.len(),
            out.iter()
                .map(|s| (s.flags(), s.seq(), s.len()))
                .collect::<Vec<_>>()
        )),
    }
}

/// Runs one case; `Err` describes how ember's answer differs from the RFC's.
fn run_case(seg: (u32, u32), ts: bool, spent: bool) -> Result<(), String> {
    let mut peer_opts = TcpOptions::default();
    peer_opts.mss = Some(1000);
    peer_opts.sack_permitted = true;
    peer_opts.timestamps = ts.then_some((5000, 0));
    let (mut o, p) = One::established(settings(|_| {}), peer_opts, 65535);
    assert_eq!(p.seq, abs(1, 0));
    let base = if spent { SPEND } else { 0 };
    for k in 0..base / 1000 {
        let at = 1 + k * 1000;
        let acks = send(&mut o, &p, 0, (at, at + 1000));
        assert_eq!(acks.len(), 1, "set-up: quick ACK {k}");
    }
    o.read_all();
    // (A window update, if reading opened the window enough.)
    o.take_all();
    // In order up to RCV.NXT, then the held blocks, each ACKed at once with the blocks
    // of RFC 2018 §4 (the newest first).
    let mut out = send(&mut o, &p, base, (1, RCV_NXT));
    if spent {
        // Under two segments, without quick ACKs: the delayed-ACK timer answers.
        assert!(out.is_empty(), "set-up: the quick ACKs are spent");
        o.next_timer();
        out = o.take_all();
    }
    let (ack, b) = the_ack(&out, base)?;
    assert_eq!((ack, b), (RCV_NXT, vec![]), "set-up: in-order data");
    for (i, &h) in HELD.iter().enumerate() {
        let (ack, b) = the_ack(&send(&mut o, &p, base, h), base)?;
        let want: Vec<_> = HELD[..=i].iter().rev().copied().collect();
        assert_eq!((ack, b), (RCV_NXT, want), "set-up: block {h:?}");
    }
    let dsacks = o.tcb.stats().dsacks_sent;

    let want = rfc_expected(seg, ts);
    let got = the_ack(&send(&mut o, &p, base, seg), base)?;
    let sent = o.tcb.stats().dsacks_sent - dsacks;
    let mut why = Vec::new();
    if got != (want.ack, want.blocks.clone()) {
        why.push(format!(
            "ack {} sack {:?}, want ack {} sack {:?}",
            got.0, got.1, want.ack, want.blocks
        ));
    }
    if sent != u64::from(want.dsack) {
        why.push(format!(
            "dsacks_sent +{sent}, want +{}",
            u64::from(want.dsack)
        ));
    }
    // RFC 2883 §4 rule (2): the duplicate is reported once; the next ACK (for new data
    // beyond everything) leads with the block of that data.
    let next = the_ack(&send(&mut o, &p, base, (900, 950)), base)?;
    if next.1.first() != Some(&(900, 950)) || next.1.len() > max_blocks(ts) {
        why.push(format!("the next ACK's blocks are {:?}", next.1));
    }
    if o.tcb.stats().dsacks_sent != dsacks + sent {
        why.push("the next ACK counts a D-SACK".into());
    }
    // Exactly once, in order (the set-up read everything before the table's byte 1).
    let read = o.read_all();
    if read != data(1, want.ack) {
        why.push(format!(
            "read {} bytes, want the {} bytes below the ACK",
            read.len(),
            want.ack - 1
        ));
    }
    if why.is_empty() {
        Ok(())
    } else {
        Err(why.join("; "))
    }
}

fn run_table(ts: bool, spent: bool) {
    let all = cases();
    assert!(all.len() >= 96);
    let mut bad = Vec::new();
    for c in &all {
        if let Err(e) = run_case(c.seg, ts, spent) {
            bad.push(format!("  {}: {e}", c.name));
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {} cases (timestamps {ts}, quick ACKs spent {spent}) differ from RFC \
         2883/2018:\n{}",
        bad.len(),
        all.len(),
        bad.join("\n")
    );
}

/// RFC 2883 §4 and RFC 2018 §4, without timestamps: up to 4 blocks.
#[test]
fn dsack_table_without_timestamps() {
    run_table(false, false);
}

/// The same with timestamps: up to 3 blocks (RFC 2018 §3, RFC 7323).
#[test]
fn dsack_table_with_timestamps() {
    run_table(true, false);
}

/// The same once the quick ACKs of connection start are spent: every case's segment
/// still draws its ACK at once (RFC 5681 §4.2: out of order, a duplicate, or filling
/// all or part of the gap before held data, also when it covers all of that data).
#[test]
fn dsack_table_after_quick_acks() {
    run_table(false, true);
    run_table(true, true);
}

/// RFC 5681 §4.2 (an immediate ACK for a segment that fills all or part of a gap): in-order
/// data that covers all the data held out of order empties the queue without moving a
/// byte from it (the held bytes are duplicates), and is still acknowledged at once, as
/// Linux does when its out-of-order queue empties. Without SACK there is no D-SACK to
/// send, so nothing else makes the ACK leave before the delayed-ACK timer.
#[test]
fn in_order_data_covering_held_data_is_acked_at_once() {
    let mut peer_opts = TcpOptions::default();
    peer_opts.mss = Some(1000);
    let (mut o, p) = One::established(settings(|_| {}), peer_opts, 65535);
    for k in 0..SPEND / 1000 {
        let at = 1 + k * 1000;
        assert_eq!(send(&mut o, &p, 0, (at, at + 1000)).len(), 1);
    }
    o.read_all();
    o.take_all();
    let base = SPEND;
    assert!(send(&mut o, &p, base, (1, RCV_NXT)).is_empty(), "delayed");
    o.next_timer();
    assert_eq!(the_ack(&o.take_all(), base), Ok((RCV_NXT, vec![])));
    assert_eq!(
        the_ack(&send(&mut o, &p, base, (200, 300)), base),
        Ok((RCV_NXT, vec![])),
        "out of order: a duplicate ACK at once"
    );
    // 100:350 covers 200:300: RCV.NXT moves to 350, nothing is moved from the queue.
    assert_eq!(
        the_ack(&send(&mut o, &p, base, (RCV_NXT, 350)), base),
        Ok((350, vec![])),
        "the gap is filled: ACK at once"
    );
    assert_eq!(o.read_all(), data(1, 350));
}

/// RFC 2883 §4 rule (4) when two segments arrive before an ACK can leave (one device
/// batch): a duplicate inside a held block, then new data in a gap. The first segment's
/// ACK is owed and leaves first (the peer sees an ACK per segment, as without batching);
/// the ACK that carries the D-SACK has it first and the block holding it second, then the
/// block of the most recent arrival (RFC 2018 §4).
#[test]
fn dsack_block_second_when_a_later_segment_arrived_first() {
    let mut peer_opts = TcpOptions::default();
    peer_opts.mss = Some(1000);
    peer_opts.sack_permitted = true;
    let (mut o, p) = One::established(settings(|_| {}), peer_opts, 65535);
    assert_eq!(
        the_ack(&send(&mut o, &p, 0, (1, RCV_NXT)), 0),
        Ok((RCV_NXT, vec![]))
    );
    send(&mut o, &p, 0, (200, 300));
    send(&mut o, &p, 0, (400, 500));
    for (s, e) in [(220, 280), (600, 700)] {
        let mut seg = p.seg(TcpFlags::ACK, (e - s) as usize);
        seg.seq = abs(s, 0);
        o.tcb.handle_segment(o.now, &seg, &data(s, e));
    }
    o.flush();
    let out = o.take_all();
    assert_eq!(out.len(), 2, "one ACK per segment");
    let owed = the_ack(&out[..1], 0).expect("the owed ACK");
    assert_eq!(owed.0, RCV_NXT);
    assert!(!owed.1.contains(&(220, 280)), "no D-SACK twice: {owed:?}");
    assert_eq!(
        the_ack(&out[1..], 0),
        Ok((
            RCV_NXT,
            vec![(220, 280), (200, 300), (600, 700), (400, 500)]
        ))
    );
    assert_eq!(o.tcb.stats().dsacks_sent, 1);
}
