//! Large segments (LSO) from one `Tcb`: sizing by the congestion window, the peer's
//! window and the 1 ms autosizing goal; the sub-MSS tail under Nagle, cork and FIN; PSH;
//! per-piece bookkeeping (counters, RACK); and the TCP Small Queues quota. Each large
//! segment is compared with what the same connection sends with LSO off.

mod common;

use common::*;
use ember_core::tcp::{TcpSettings, LSO_MAX};
use ember_core::wire::{TcpFlags, TcpOptions, TcpRepr};
use std::time::Duration;

const MSS: u32 = 1460;
const BASE: u32 = CLIENT_ISS + 1;

/// A segment as `poll_transmit` gave it, with its piece size.
#[derive(Debug, Clone)]
struct Out {
    repr: TcpRepr,
    len: u32,
    gso: u16,
}

impl Out {
    fn off(&self) -> u32 {
        self.repr.seq.wrapping_sub(BASE)
    }
    /// (offset, length) of each piece it will be cut into.
    fn pieces(&self) -> Vec<(u32, u32)> {
        if self.gso == 0 {
            return vec![(self.off(), self.len)];
        }
        let g = u32::from(self.gso);
        (0..self.len.div_ceil(g))
            .map(|i| (self.off() + i * g, g.min(self.len - i * g)))
            .collect()
    }
}

fn opts() -> TcpOptions {
    let mut o = TcpOptions::default();
    o.mss = Some(MSS as u16);
    o
}

fn sack_opts() -> TcpOptions {
    let mut o = opts();
    o.sack_permitted = true;
    o
}

/// An established client (MSS 1460, no timestamps) with LSO on or off, after a
/// handshake of `rtt`.
fn est(s: TcpSettings, o: TcpOptions, window: u16, rtt: Duration, lso: bool) -> (One, Peer) {
    let (mut one, peer) = One::established_after(s, o, window, rtt);
    one.tcb.set_lso_max(if lso { LSO_MAX } else { 0 });
    (one, peer)
}

/// Everything the `Tcb` sends now, in one round of `poll_transmit`.
fn drain(o: &mut One) -> Vec<Out> {
    let mut v = Vec::new();
    while let Some(out) = o.tcb.poll_transmit(o.now) {
        let len = out.payload_len() as u32;
        if out.gso_size > 0 {
            assert!(
                len > u32::from(out.gso_size),
                "a large segment has >= 2 pieces"
            );
        }
        v.push(Out {
            repr: out.repr,
            len,
            gso: out.gso_size,
        });
        assert!(v.len() < 10_000);
    }
    v
}

fn pieces(v: &[Out]) -> Vec<(u32, u32)> {
    v.iter().flat_map(Out::pieces).collect()
}

fn data_segs(o: &One) -> u64 {
    o.tcb.info().stats.data_segs_out
}

fn ack(o: &mut One, p: &Peer, off: u32) {
    let mut p = p.clone();
    p.ack = BASE + off;
    o.tcb.handle_segment(o.now, &p.ack_seg(), &[]);
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn congestion_window_bounds_a_large_segment_before_an_rtt_sample() {
    // A zero-time handshake gives no usable rate: the goal is lso_max, so the whole
    // initial window (10 segments) leaves as one large segment.
    let (mut on, _) = est(TcpSettings::default(), opts(), 65535, Duration::ZERO, true);
    let (mut off, _) = est(TcpSettings::default(), opts(), 65535, Duration::ZERO, false);
    let data = pattern(100_000);
    on.tcb.send(on.now, &data).unwrap();
    off.tcb.send(off.now, &data).unwrap();
    let a = drain(&mut on);
    let b = drain(&mut off);
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!((a[0].len, a[0].gso), (10 * MSS, MSS as u16));
    assert_eq!(b.len(), 10);
    assert_eq!(pieces(&a), pieces(&b));
    // Counters see ten segments either way.
    assert_eq!(data_segs(&on), data_segs(&off));
    assert_eq!(on.tcb.info().stats.segs_out, off.tcb.info().stats.segs_out);
}

#[test]
fn autosizing_aims_at_one_millisecond_of_the_delivery_rate() {
    // SRTT 100 ms, cwnd 14600: 1 ms is 146 bytes, so the floor of two pieces applies.
    let (mut slow, _) = est(TcpSettings::default(), opts(), 65535, ms(100), true);
    slow.tcb.send(slow.now, &pattern(100_000)).unwrap();
    let a = drain(&mut slow);
    assert_eq!(a.len(), 5, "{a:?}");
    assert!(a.iter().all(|s| s.len == 2 * MSS && s.gso == MSS as u16));
    // SRTT 2 ms: 1 ms is half the window, five pieces.
    let (mut fast, _) = est(TcpSettings::default(), opts(), 65535, ms(2), true);
    fast.tcb.send(fast.now, &pattern(100_000)).unwrap();
    let b = drain(&mut fast);
    assert_eq!(b.len(), 2, "{b:?}");
    assert!(b.iter().all(|s| s.len == 5 * MSS));
    assert_eq!(pieces(&a), pieces(&b));
}

#[test]
fn peer_window_and_lso_max_bound_a_large_segment() {
    // A 5000-byte window: three whole pieces; the 620 left over is a sender-SWS runt and
    // waits, as it does with LSO off.
    for lso in [true, false] {
        let (mut o, _) = est(TcpSettings::default(), opts(), 5000, Duration::ZERO, lso);
        o.tcb.send(o.now, &pattern(20_000)).unwrap();
        let v = drain(&mut o);
        assert_eq!(pieces(&v), vec![(0, MSS), (MSS, MSS), (2 * MSS, MSS)]);
        assert_eq!(v.len(), if lso { 1 } else { 3 });
    }
    // lso_max of 3 pieces and a bit: three whole pieces per large segment.
    let (mut o, _) = est(TcpSettings::default(), opts(), 65535, Duration::ZERO, true);
    o.tcb.set_lso_max(3 * MSS + 100);
    o.tcb.send(o.now, &pattern(100_000)).unwrap();
    let v = drain(&mut o);
    assert_eq!(
        v.iter().map(|s| s.len).collect::<Vec<_>>(),
        [4380, 4380, 4380, 1460]
    );
    // lso_max below two pieces: off.
    let (mut o, _) = est(TcpSettings::default(), opts(), 65535, Duration::ZERO, true);
    o.tcb.set_lso_max(2 * MSS - 1);
    o.tcb.send(o.now, &pattern(10_000)).unwrap();
    assert!(drain(&mut o).iter().all(|s| s.gso == 0 && s.len <= MSS));
}

#[test]
fn nagle_and_cork_keep_the_tail_out_of_a_large_segment() {
    let n = (3 * MSS + 100) as usize;
    // Nagle: the 100-byte tail waits for the ACK, with LSO on and off alike.
    let (mut on, p) = est(TcpSettings::default(), opts(), 65535, Duration::ZERO, true);
    let (mut off, _) = est(TcpSettings::default(), opts(), 65535, Duration::ZERO, false);
    on.tcb.send(on.now, &pattern(n)).unwrap();
    off.tcb.send(off.now, &pattern(n)).unwrap();
    let a = drain(&mut on);
    let b = drain(&mut off);
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].len, 3 * MSS);
    assert_eq!(pieces(&a), pieces(&b));
    ack(&mut on, &p, 3 * MSS);
    let t = drain(&mut on);
    assert_eq!(pieces(&t), vec![(3 * MSS, 100)]);
    // TCP_NODELAY: the tail would go at once, so it rides on the large segment.
    let (mut nd, _) = est(TcpSettings::default(), opts(), 65535, Duration::ZERO, true);
    nd.tcb.set_nodelay(true);
    nd.tcb.send(nd.now, &pattern(n)).unwrap();
    let v = drain(&mut nd);
    assert_eq!(v.len(), 1);
    assert_eq!((v[0].len, v[0].gso), (3 * MSS + 100, MSS as u16));
    assert_eq!(pieces(&v).last(), Some(&(3 * MSS, 100)));
    assert_eq!(data_segs(&nd), 4);
    // Cork (with TCP_NODELAY): the tail stays corked.
    let (mut c, _) = est(TcpSettings::default(), opts(), 65535, Duration::ZERO, true);
    c.tcb.set_nodelay(true);
    c.tcb.set_cork(c.now, true);
    c.tcb.send(c.now, &pattern(n)).unwrap();
    let v = drain(&mut c);
    assert_eq!(pieces(&v), vec![(0, MSS), (MSS, MSS), (2 * MSS, MSS)]);
}

#[test]
fn fin_rides_on_the_last_piece_and_never_waits() {
    // A NIC's LSO buffer once kept a server's FIN for 3.4 s. Here 15 KB are buffered,
    // then close(): the FIN leaves in the same round, on the large segment's last piece
    // (Nagle does not hold a tail that ends with the FIN).
    let s = TcpSettings {
        init_cwnd: 20,
        ..TcpSettings::default()
    };
    for lso in [true, false] {
        let (mut o, _) = est(s.clone(), opts(), 65535, Duration::ZERO, lso);
        o.tcb.send(o.now, &pattern(15 * 1024)).unwrap();
        let first = drain(&mut o);
        o.tcb.close(o.now);
        let mut v = first;
        v.extend(drain(&mut o));
        let fins: Vec<_> = v.iter().filter(|s| s.repr.flags.fin()).collect();
        assert_eq!(fins.len(), 1, "lso={lso}: {v:?}");
        let last = v.last().unwrap();
        assert!(last.repr.flags.fin());
        assert_eq!(last.off() + last.len, 15 * 1024);
        if lso {
            // All but the 760-byte tail went before close(); after it the tail (held by
            // Nagle) and the FIN go together.
            assert!(v.iter().any(|s| s.gso > 0));
        }
    }
    // close() before the first transmission: one large segment with the FIN on it.
    let (mut o, _) = est(s, opts(), 65535, Duration::ZERO, true);
    o.tcb.send(o.now, &pattern(15 * 1024)).unwrap();
    o.tcb.close(o.now);
    let v = drain(&mut o);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].repr.flags.fin() && v[0].gso == MSS as u16);
    assert_eq!(v[0].len, 15 * 1024);
}

#[test]
fn psh_marks_a_large_segment_when_any_piece_would_have_it() {
    // tcp_push_segs 2 (default): with LSO off every second segment has PSH; a large
    // segment of two or more pieces therefore always has it.
    let (mut o, _) = est(TcpSettings::default(), opts(), 65535, ms(100), true);
    o.tcb.send(o.now, &pattern(100_000)).unwrap();
    let v = drain(&mut o);
    assert!(v.iter().all(|s| s.repr.flags.psh()), "{v:?}");
    // tcp_push_segs 0: PSH only where the buffered data ends.
    let s = TcpSettings {
        push_segs: 0,
        ..TcpSettings::default()
    };
    let (mut o, _) = est(s.clone(), opts(), 65535, ms(100), true);
    o.tcb.send(o.now, &pattern(100_000)).unwrap();
    assert!(drain(&mut o).iter().all(|s| !s.repr.flags.psh()));
    let (mut o, _) = est(s, opts(), 65535, Duration::ZERO, true);
    o.tcb.send(o.now, &pattern(4 * MSS as usize)).unwrap();
    let v = drain(&mut o);
    assert_eq!(v.len(), 1);
    assert!(v[0].repr.flags.psh());
    // tcp_push_segs 3 and two-piece segments: PSH on the large segments holding the 3rd,
    // 6th, 9th piece.
    let s = TcpSettings {
        push_segs: 3,
        ..TcpSettings::default()
    };
    let (mut o, _) = est(s, opts(), 65535, ms(100), true);
    o.tcb.send(o.now, &pattern(100_000)).unwrap();
    let v = drain(&mut o);
    let psh: Vec<bool> = v.iter().map(|s| s.repr.flags.psh()).collect();
    assert_eq!(psh, [false, true, true, false, true]);
}

#[test]
fn rack_records_pieces_and_retransmits_one_piece() {
    let (mut o, p) = est(
        TcpSettings::default(),
        sack_opts(),
        65535,
        Duration::ZERO,
        true,
    );
    o.tcb.send(o.now, &pattern(10 * MSS as usize)).unwrap();
    let v = drain(&mut o);
    assert_eq!(v.len(), 1);
    o.now += ms(50);
    // The peer got pieces 2..10 (SACK) but not the first: after three SACKed pieces RACK
    // (or DupThresh) marks only the first piece lost, and its retransmission is one MSS.
    for k in 2..=4 {
        let mut q = p.clone();
        q.ack = BASE;
        let seg = q.sack(&[(BASE + MSS, BASE + k * MSS)]);
        o.tcb.handle_segment(o.now, &seg, &[]);
    }
    let r = drain(&mut o);
    let rtx: Vec<_> = r.iter().filter(|s| s.len > 0).collect();
    assert!(!rtx.is_empty(), "{r:?}");
    assert_eq!((rtx[0].off(), rtx[0].len, rtx[0].gso), (0, MSS, 0));
    assert_eq!(o.tcb.info().stats.retrans_segs, 1);
}

#[test]
fn tx_quota_limits_new_data_only() {
    let (mut o, p) = est(TcpSettings::default(), opts(), 65535, Duration::ZERO, true);
    o.tcb.set_nodelay(true);
    o.tcb.set_tx_quota(Some(3000));
    o.tcb.send(o.now, &pattern(20_000)).unwrap();
    let v = drain(&mut o);
    // 3000 bytes: two whole pieces (2920), then 80 left: one more segment of one MSS.
    assert_eq!(
        v.iter().map(|s| (s.len, s.gso)).collect::<Vec<_>>(),
        [(2 * MSS, MSS as u16), (MSS, 0)]
    );
    assert_eq!(o.tcb.tx_quota(), Some(0));
    assert_eq!(o.tcb.info().stats.tsq_throttled, 1);
    assert!(o.tcb.take_tx_quota_blocked());
    assert!(!o.tcb.take_tx_quota_blocked());
    // Still held: counted again, but no pure ACK or anything else leaves.
    assert!(drain(&mut o).is_empty());
    assert_eq!(o.tcb.info().stats.tsq_throttled, 2);
    // A pure ACK is never held: the peer's data is acknowledged.
    let mut q = p.clone();
    q.ack = BASE;
    o.tcb
        .handle_segment(o.now, &q.seg(TcpFlags::ACK | TcpFlags::PSH, 10), &[7; 10]);
    let a = drain(&mut o);
    assert!(
        a.iter().any(|s| s.len == 0 && s.repr.ack == q.seq + 10),
        "{a:?}"
    );
    // A retransmission after a timeout is never held either.
    o.now += Duration::from_secs(2);
    o.tcb.handle_timeout(o.now);
    let r = drain(&mut o);
    assert_eq!(pieces(&r), vec![(0, MSS)]);
    // A larger quota lets a large segment out, in whole pieces of what fits.
    let mut q = p.clone();
    q.seq += 10;
    q.ack = BASE + 3 * MSS;
    o.tcb.handle_segment(o.now, &q.ack_seg(), &[]);
    o.tcb.set_tx_quota(Some(10_000));
    let v = drain(&mut o);
    assert!(
        v.iter().all(|s| s.len % MSS == 0 && s.len <= 10_000),
        "{v:?}"
    );
    assert!(v.iter().any(|s| s.gso > 0));
    // None: no limit.
    o.tcb.set_tx_quota(None);
    let _ = drain(&mut o);
    assert!(!o.tcb.take_tx_quota_blocked() || o.tcb.tx_quota().is_none());
}

#[test]
fn tx_quota_never_holds_a_bare_fin() {
    let (mut o, p) = est(TcpSettings::default(), opts(), 65535, Duration::ZERO, true);
    o.tcb.send(o.now, &pattern(1000)).unwrap();
    assert_eq!(drain(&mut o).len(), 1);
    ack(&mut o, &p, 1000);
    o.tcb.set_tx_quota(Some(0));
    o.tcb.close(o.now);
    let v = drain(&mut o);
    assert_eq!(v.len(), 1);
    assert!(v[0].repr.flags.fin() && v[0].len == 0);
    assert_eq!(o.tcb.info().stats.tsq_throttled, 0);
}

#[test]
fn lso_on_and_off_send_the_same_pieces_through_a_transfer() {
    // A transfer acknowledged every other piece as it arrives: the pieces of LSO on
    // equal LSO off's segments, and every counter agrees.
    let run = |lso: bool| {
        let (mut o, p) = est(TcpSettings::default(), opts(), 65535, ms(10), lso);
        let total = 300_000u32;
        o.tcb.send(o.now, &pattern(total as usize)).unwrap();
        o.tcb.close(o.now);
        let mut all = Vec::new();
        let mut acked = 0;
        let mut large = 0;
        for _ in 0..1000 {
            let v = drain(&mut o);
            large += v.iter().filter(|s| s.gso > 0).count();
            all.extend(pieces(&v));
            let sent = o.tcb.snd_nxt().0.wrapping_sub(BASE);
            if acked >= sent {
                break;
            }
            o.now += ms(10);
            while acked < sent {
                acked = (acked + 2 * MSS).min(sent);
                ack(&mut o, &p, acked);
            }
        }
        let st = o.tcb.info().stats;
        assert_eq!(large > 0, lso);
        (all, st.segs_out, st.data_segs_out, st.retrans_segs)
    };
    let on = run(true);
    let off = run(false);
    assert_eq!(on, off);
}
