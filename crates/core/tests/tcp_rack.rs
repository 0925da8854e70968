//! RACK-TLP (RFC 8985) scripted against one `Tcb` (the test plays the peer) and over a
//! `Pair` with a lossy path: the reorder timer, reordering tolerance, the tail loss probe
//! (its timing, its choice of segment, one probe per episode, the loss it repairs) and the
//! tunables that switch them off.
mod common;
use common::*;

use ember_core::tcp::{LazyState, State, TcpSettings};
use ember_core::wire::TcpOptions;
use std::time::Duration;

const MSS: u32 = 1460;
const BASE: u32 = CLIENT_ISS + 1;
const RTT: Duration = Duration::from_millis(100);
/// The most `size_of::<Tcb>()` may be on 64-bit targets (`tcb_stays_small`).
const TCB_MAX: usize = 1_400;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn m(k: u32) -> u32 {
    k * MSS
}

/// MSS 1460, SACK, no timestamps, window 65535, a handshake RTT sample of 100 ms.
fn sacky(s: TcpSettings) -> (One, Peer) {
    let mut o = TcpOptions::default();
    o.mss = Some(MSS as u16);
    o.sack_permitted = true;
    One::established_after(s, o, 65535, RTT)
}

fn sack_to(o: &mut One, p: &mut Peer, off: u32, blocks: &[(u32, u32)]) {
    p.ack = BASE + off;
    let b: Vec<(u32, u32)> = blocks.iter().map(|&(l, r)| (BASE + l, BASE + r)).collect();
    let seg = p.sack(&b);
    o.input(&seg, &[]);
}

/// (offset from BASE, length) of the data segments sent since the last call.
fn sent(o: &mut One) -> Vec<(u32, usize)> {
    o.take_all()
        .iter()
        .filter(|s| !s.data.is_empty() || s.flags().fin())
        .map(|s| (s.seq().wrapping_sub(BASE), s.len()))
        .collect()
}

/// `k` segments written and sent at once.
fn send_segments(o: &mut One, k: u32) {
    let n = o.write(&pattern(m(k) as usize));
    assert_eq!(n, m(k) as usize);
    assert_eq!(sent(o).len(), k as usize);
}

/// RFC 8985 §6.2, §6.3: a SACK for the last of four segments does not start recovery at
/// once: the reorder timer (min_RTT / 4) fires first, then the three are lost and the first
/// is retransmitted.
#[test]
fn reorder_timer_marks_losses_after_the_reordering_window() {
    let (mut o, mut p) = sacky(TcpSettings::default());
    send_segments(&mut o, 4);
    o.advance(RTT);
    sack_to(&mut o, &mut p, 0, &[(m(3), m(4))]);
    assert!(sent(&mut o).is_empty(), "no fast retransmit on one SACK");
    // The next deadline is the reorder timer, a quarter of the minimum RTT away.
    let d = o.next_timer().expect("reorder timer");
    assert_eq!(d, ms(25));
    // The first lost segment goes first; how many follow is congestion control's call.
    let r = sent(&mut o);
    assert_eq!(r.first(), Some(&(0, MSS as usize)), "{r:?}");
    assert!(r.iter().all(|&(off, _)| off < m(3)), "{r:?}");
    let st = o.tcb.stats();
    assert_eq!(st.rack_losses, 3);
    assert_eq!(st.recoveries, 1);
    assert_eq!(o.tcb.rack_info().0, 3, "three segments deemed lost");
}

/// RFC 8985 §6.2 step 3: the hole filled by its original before the reorder timer fires is
/// reordering, not loss: nothing is retransmitted and reordering is recorded.
#[test]
fn reordering_within_the_window_is_not_loss() {
    let (mut o, mut p) = sacky(TcpSettings::default());
    send_segments(&mut o, 4);
    o.advance(RTT);
    sack_to(&mut o, &mut p, 0, &[(m(3), m(4))]);
    o.advance(ms(10));
    sack_to(&mut o, &mut p, m(4), &[]);
    o.advance(ms(100));
    assert!(sent(&mut o).is_empty());
    let st = o.tcb.stats();
    assert_eq!((st.rack_losses, st.recoveries, st.retrans_segs), (0, 0, 0));
    let (lost, reordering, seen) = o.tcb.rack_info();
    assert_eq!(lost, 0);
    assert!(seen);
    assert!(reordering >= 3);
}

/// With RACK off, DupThresh rules apply: one SACKed segment above a hole is not enough,
/// and no reorder timer runs; the tail waits for the probe or the RTO.
#[test]
fn rack_off_keeps_dupthresh() {
    let (mut o, mut p) = sacky(settings(|s| {
        s.rack = false;
        s.tlp = false
    }));
    send_segments(&mut o, 4);
    o.advance(RTT);
    sack_to(&mut o, &mut p, 0, &[(m(3), m(4))]);
    assert!(sent(&mut o).is_empty());
    // Only the RTO is left (it was armed at the send, RTT + 4 * RTT/2 = 300 ms).
    let d = o.next_timer().expect("RTO");
    assert_eq!(d, ms(200));
    assert_eq!(o.tcb.stats().timeouts, 1);
}

/// RFC 8985 §7.2, §7.3: with no ACK for the tail, the probe goes out 2 SRTT after the last
/// ACK of new data, before the RTO, and retransmits the last segment (no new data); the
/// RTO is re-armed from the probe, and no second probe follows (§7.4: one per episode).
#[test]
fn tail_loss_probe_retransmits_the_last_segment_once() {
    let (mut o, mut p) = sacky(TcpSettings::default());
    send_segments(&mut o, 5);
    o.advance(RTT);
    // The first three arrive; the last two are lost.
    sack_to(&mut o, &mut p, m(3), &[]);
    assert!(sent(&mut o).is_empty());
    let srtt = o.tcb.info().srtt.expect("srtt");
    let d = o.next_timer().expect("PTO");
    assert_eq!(d, srtt * 2);
    assert_eq!(sent(&mut o), vec![(m(4), MSS as usize)]);
    assert_eq!(o.tcb.stats().tlp_probes, 1);
    assert_eq!(o.tcb.stats().timeouts, 0);
    // The next timer is the RTO, from the probe; no second probe.
    let rto = o.tcb.info().rto;
    let d = o.next_timer().expect("RTO");
    assert_eq!(d, rto);
    assert_eq!(o.tcb.stats().tlp_probes, 1);
    assert_eq!(o.tcb.stats().timeouts, 1);
}

/// RFC 8985 §7.3: with unsent data the receive window allows, the probe sends one new
/// segment (even beyond the congestion window).
#[test]
fn tail_loss_probe_prefers_new_data() {
    let (mut o, mut p) = sacky(TcpSettings::default());
    // Fill the initial window (10 segments) and queue two more.
    let n = o.write(&pattern(m(12) as usize));
    assert_eq!(n, m(12) as usize);
    assert_eq!(sent(&mut o).len(), 10);
    o.advance(RTT);
    // Nothing is acknowledged: the PTO, 2 SRTT after the sends, fires.
    let _ = &mut p;
    let d = o.next_timer().expect("PTO");
    assert_eq!(d, o.tcb.info().srtt.unwrap() * 2 - RTT);
    assert_eq!(sent(&mut o), vec![(m(10), MSS as usize)]);
    assert_eq!(o.tcb.stats().tlp_probes, 1);
    assert_eq!(o.tcb.stats().retrans_segs, 0);
}

/// RFC 8985 §7.2: one segment in flight adds the worst-case delayed-ACK time to the PTO,
/// which is then capped by the RTO: the probe goes out at the RTO's time, in its place.
#[test]
fn pto_with_one_segment_in_flight_is_capped_by_the_rto() {
    let (mut o, _p) = sacky(TcpSettings::default());
    send_segments(&mut o, 1);
    let rto = o.tcb.info().rto;
    // 2 * 100 ms + 200 ms > RTO (300 ms): the probe comes at the RTO time.
    let d = o.next_timer().expect("PTO");
    assert_eq!(d, rto);
    assert_eq!(sent(&mut o), vec![(0, MSS as usize)]);
    let st = o.tcb.stats();
    assert_eq!((st.tlp_probes, st.timeouts), (1, 0));
}

/// RFC 8985 §7.4: a probe that repaired a loss (no D-SACK for it before data beyond the
/// episode is acknowledged) reduces the congestion window once.
#[test]
fn tlp_repairing_a_loss_reduces_cwnd_once() {
    let (mut o, mut p) = sacky(TcpSettings::default());
    send_segments(&mut o, 4);
    o.advance(RTT);
    sack_to(&mut o, &mut p, m(3), &[]);
    o.next_timer().expect("PTO");
    assert_eq!(sent(&mut o), vec![(m(3), MSS as usize)]);
    o.advance(RTT);
    // The probe repaired the tail: everything acknowledged, no D-SACK.
    sack_to(&mut o, &mut p, m(4), &[]);
    let before = o.tcb.info().cwnd;
    send_segments(&mut o, 1);
    o.advance(RTT);
    sack_to(&mut o, &mut p, m(5), &[]);
    let st = o.tcb.stats();
    assert_eq!((st.tlp_recoveries, st.timeouts), (1, 0));
    assert!(o.tcb.info().cwnd < before, "cwnd reduced");
}

/// RFC 8985 §7.4 with RFC 2883: a D-SACK for the probe shows the original arrived: no
/// loss, no reduction; the retransmission is counted as spurious (RFC 3708).
#[test]
fn dsacked_probe_is_not_a_loss() {
    let (mut o, mut p) = sacky(TcpSettings::default());
    send_segments(&mut o, 4);
    o.advance(RTT);
    sack_to(&mut o, &mut p, m(3), &[]);
    o.next_timer().expect("PTO");
    assert_eq!(sent(&mut o), vec![(m(3), MSS as usize)]);
    // The original arrived late; then the probe, reported as a duplicate.
    sack_to(&mut o, &mut p, m(4), &[]);
    sack_to(&mut o, &mut p, m(4), &[(m(3), m(4))]);
    let cwnd = o.tcb.info().cwnd;
    send_segments(&mut o, 1);
    o.advance(RTT);
    sack_to(&mut o, &mut p, m(5), &[]);
    let st = o.tcb.stats();
    assert_eq!(st.tlp_recoveries, 0);
    assert_eq!(st.spurious_rtx, 1);
    assert!(o.tcb.info().cwnd >= cwnd);
}

/// TLP off: the tail waits for the RTO.
#[test]
fn tlp_off_waits_for_the_rto() {
    let (mut o, mut p) = sacky(settings(|s| s.tlp = false));
    send_segments(&mut o, 4);
    o.advance(RTT);
    sack_to(&mut o, &mut p, m(3), &[]);
    o.next_timer().expect("RTO");
    assert_eq!(sent(&mut o), vec![(m(3), MSS as usize)]);
    let st = o.tcb.stats();
    assert_eq!((st.tlp_probes, st.timeouts), (0, 1));
}

/// Over a path that drops the last data segment once: TLP repairs the tail without an RTO,
/// and every byte arrives.
#[test]
fn pair_tail_loss_repaired_without_rto() {
    let mut pair = Pair::new(
        TcpSettings::default(),
        TcpSettings::default(),
        Duration::from_millis(20),
    );
    pair.run_for(ms(200));
    let data = pattern(20 * 1000);
    let end = CLIENT_ISS + 1 + data.len() as u32;
    let mut dropped = false;
    pair.filter = Box::new(move |_, dir, s| {
        if dir == Dir::AtoB && !dropped && s.seq().wrapping_add(s.len() as u32) == end {
            dropped = true;
            return false;
        }
        true
    });
    let n = pair.a.send(pair.now, &data).expect("send");
    assert_eq!(n, data.len());
    pair.run_for(ms(600));
    let got = pair.read_b();
    assert_eq!(got, data);
    let st = pair.a.stats();
    assert_eq!(st.timeouts, 0, "{st:?}");
    assert_eq!(st.tlp_probes, 1, "{st:?}");
    assert_eq!(st.retrans_segs, 1, "{st:?}");
}

/// RFC 3708 detection with an Eifel-style response (RFC 4015 §3): when D-SACKs show that
/// every retransmission of a RACK recovery was spurious, the congestion state from before
/// the recovery comes back, and the reordering makes RACK wait from then on.
#[test]
fn spurious_rack_recovery_is_undone() {
    let (mut o, mut p) = sacky(TcpSettings::default());
    let before = o.tcb.info();
    send_segments(&mut o, 4);
    o.advance(RTT);
    sack_to(&mut o, &mut p, 0, &[(m(3), m(4))]);
    o.next_timer().expect("reorder timer");
    let rtx = sent(&mut o);
    assert!(!rtx.is_empty());
    assert!(o.tcb.info().ssthresh < before.ssthresh, "recovery reduced");
    // The originals were only late: everything is acknowledged, then each retransmission
    // is reported as a duplicate.
    sack_to(&mut o, &mut p, m(4), &[]);
    assert!(!o.tcb.info().in_recovery);
    for (i, &(off, len)) in rtx.iter().enumerate() {
        assert!(
            o.tcb.info().ssthresh < before.ssthresh,
            "not yet undone ({i})"
        );
        sack_to(&mut o, &mut p, m(4), &[(off, off + len as u32)]);
    }
    let after = o.tcb.info();
    assert_eq!(after.stats.spurious_rtx, rtx.len() as u64);
    assert_eq!((after.cwnd, after.ssthresh), (before.cwnd, before.ssthresh));
    assert!(o.tcb.rack_info().2, "reordering recorded");
}

/// RFC 3708 §3 counts only the episode's own retransmissions: a D-SACK for a loss probe
/// sent before a RACK recovery began (its original arrived late) does not show that the
/// recovery's retransmission of a genuinely lost segment was spurious.
#[test]
fn dsack_of_an_earlier_probe_does_not_undo_a_genuine_recovery() {
    let (mut o, mut p) = sacky(TcpSettings::default());
    send_segments(&mut o, 10);
    let before = o.tcb.info();
    // Nothing comes back: the PTO probes the tail (segment 10 again).
    o.next_timer().expect("PTO");
    assert_eq!(sent(&mut o), vec![(m(9), MSS as usize)]);
    o.advance(ms(5));
    // Segments 1-2 acknowledged, 4-10 SACKed: segment 3 was really lost.
    sack_to(&mut o, &mut p, m(2), &[(m(3), m(10))]);
    if !o.tcb.info().in_recovery {
        o.next_timer().expect("reorder timer");
    }
    assert!(o.tcb.info().in_recovery);
    assert!(sent(&mut o).contains(&(m(2), MSS as usize)));
    // The probe's D-SACK, then the retransmission of segment 3 arrives.
    sack_to(&mut o, &mut p, m(2), &[(m(9), m(10)), (m(3), m(10))]);
    assert_eq!(o.tcb.stats().spurious_rtx, 1, "the probe was spurious");
    o.advance(RTT);
    sack_to(&mut o, &mut p, m(10), &[]);
    let after = o.tcb.info();
    assert!(!after.in_recovery);
    assert!(
        after.ssthresh < before.ssthresh,
        "a genuine loss was undone: ssthresh {} before {}",
        after.ssthresh,
        before.ssthresh
    );
}

/// The undo snapshot of a RACK recovery expires a round trip after the recovery ends: a
/// D-SACK arriving many rounds later leaves the congestion state alone.
#[test]
fn late_dsack_does_not_restore_a_stale_snapshot() {
    let (mut o, mut p) = sacky(TcpSettings::default());
    send_segments(&mut o, 10);
    o.advance(RTT);
    sack_to(&mut o, &mut p, m(2), &[(m(3), m(10))]);
    assert!(o.tcb.info().in_recovery);
    assert!(sent(&mut o).contains(&(m(2), MSS as usize)));
    o.advance(RTT);
    sack_to(&mut o, &mut p, m(10), &[]);
    assert!(!o.tcb.info().in_recovery);
    // Many clean rounds.
    let mut off = m(10);
    for _ in 0..40 {
        let w = (o.tcb.info().cwnd / MSS).max(1);
        o.write(&pattern(m(w) as usize));
        let s = sent(&mut o);
        o.advance(RTT);
        off += s.iter().map(|x| x.1 as u32).sum::<u32>();
        sack_to(&mut o, &mut p, off, &[]);
    }
    let grown = o.tcb.info();
    sack_to(&mut o, &mut p, off, &[(m(2), m(3))]);
    let after = o.tcb.info();
    assert_eq!(
        (after.cwnd, after.ssthresh),
        (grown.cwnd, grown.ssthresh),
        "state rewound by a stale snapshot"
    );
}

/// The undo within the episode's round trip raises cwnd and ssthresh back to at least
/// their prior values (as Linux does) and keeps what grew since.
#[test]
fn undo_keeps_a_larger_current_window() {
    let (mut o, mut p) = sacky(TcpSettings::default());
    let before = o.tcb.info();
    send_segments(&mut o, 4);
    o.advance(RTT);
    sack_to(&mut o, &mut p, 0, &[(m(3), m(4))]);
    o.next_timer().expect("reorder timer");
    let rtx = sent(&mut o);
    assert_eq!(rtx.len(), 1, "{rtx:?}");
    sack_to(&mut o, &mut p, m(4), &[]);
    assert!(!o.tcb.info().in_recovery);
    assert!(o.tcb.info().ssthresh < before.ssthresh);
    let (off, len) = rtx[0];
    sack_to(&mut o, &mut p, m(4), &[(off, off + len as u32)]);
    let after = o.tcb.info();
    assert_eq!(after.stats.spurious_rtx, 1);
    assert!(after.cwnd >= before.cwnd && after.ssthresh == before.ssthresh);
}

/// RFC 2018 §8: after a second timeout in a row the SACK information is discarded, and
/// RACK's per-segment SACK marks with it, so every outstanding segment is retransmitted
/// (RFC 8985 §6.3) and a receiver that reneged gets its data without a third timeout.
#[test]
fn second_rto_forgets_racks_sack_marks() {
    let (mut o, mut p) = sacky(TcpSettings::default());
    send_segments(&mut o, 10);
    o.advance(RTT);
    // Segment 1 lost, 2-10 SACKed: RACK retransmits segment 1.
    sack_to(&mut o, &mut p, 0, &[(m(1), m(10))]);
    if !o.tcb.info().in_recovery {
        o.next_timer().expect("reorder timer");
    }
    assert_eq!(sent(&mut o), vec![(0, MSS as usize)]);
    // Nothing more arrives: two timeouts, each retransmitting the head.
    for k in 1..=2 {
        o.next_timer().expect("RTO");
        assert_eq!(o.tcb.stats().timeouts, k);
        let s = sent(&mut o);
        assert_eq!(s.first(), Some(&(0, MSS as usize)), "{s:?}");
    }
    // RFC 8985 §6.3: every outstanding segment is now deemed lost.
    assert_eq!(
        o.tcb.info().lost,
        10,
        "SACK marks survived the second timeout"
    );
    // The receiver reneged: it acknowledges segment 1 and reports no SACK block.
    sack_to(&mut o, &mut p, m(1), &[]);
    let mut off = m(1);
    let mut rounds = 0;
    while off < m(10) && rounds < 20 {
        let s = sent(&mut o);
        if let Some(&(first, _)) = s.first() {
            assert_eq!(first, off, "{s:?}");
            off += s.iter().map(|x| x.1 as u32).sum::<u32>();
        } else {
            // Wait for a timer; a third timeout means the segments were stranded.
            o.next_timer().expect("timer");
            continue;
        }
        o.advance(ms(10));
        sack_to(&mut o, &mut p, off, &[]);
        rounds += 1;
    }
    assert_eq!(off, m(10));
    assert_eq!(o.tcb.stats().timeouts, 2, "stranded until a third RTO");
}

/// More than `rack::MAX_SEGS` segments in flight merge RACK's records; a loss inside a
/// merged record is invisible to RACK, so RFC 6675's DupThresh rule starts recovery and
/// the hole is repaired without a timeout.
#[test]
fn loss_inside_merged_records_is_repaired_without_rto() {
    const SMALL: u32 = 100;
    let mut opts = TcpOptions::default();
    opts.mss = Some(SMALL as u16);
    opts.sack_permitted = true;
    opts.window_scale = Some(8);
    // An initial window big enough for the whole flight.
    let set = TcpSettings {
        init_cwnd: 7000,
        ..TcpSettings::default()
    };
    let (mut o, mut p) = One::established_after(set, opts, 65535, RTT);
    o.tcb.set_send_buffer(16 << 20);
    let off = 0u32;
    let want = 5000u32;
    sack_to(&mut o, &mut p, off, &[]);
    o.take_all();
    o.write(&pattern((want * SMALL) as usize));
    let segs: Vec<_> = o.take_all().into_iter().filter(|x| x.len() > 0).collect();
    // Full-sized segments (the MSS option's 100 is raised to ember's minimum).
    let seg = segs[0].len() as u32;
    assert!(segs.iter().all(|x| x.len() as u32 == seg));
    // Well beyond `rack::MAX_SEGS` (4096) in flight.
    let n = segs.len() as u32;
    assert!(n >= 4600, "sent {n}");
    let h = n - 100;
    let base = off;
    o.advance(RTT);
    // All below segment h acknowledged; h lost (inside the merged tail); the rest SACKed, ACK by ACK.
    sack_to(&mut o, &mut p, base + h * seg, &[]);
    for k in (h + 1)..n {
        sack_to(
            &mut o,
            &mut p,
            base + h * seg,
            &[(base + (h + 1) * seg, base + (k + 1) * seg)],
        );
    }
    let hole = base + h * seg;
    let mut repaired = o
        .take_all()
        .iter()
        .any(|x| x.len() > 0 && x.seq().wrapping_sub(BASE) == hole);
    for _ in 0..20 {
        if repaired {
            break;
        }
        o.next_timer();
        repaired = o
            .take_all()
            .iter()
            .any(|x| x.len() > 0 && x.seq().wrapping_sub(BASE) == hole);
    }
    assert!(repaired);
    assert_eq!(o.tcb.stats().timeouts, 0, "needed an RTO");
}

/// Memory: an established connection that has sent no data holds none of the
/// state allocated on first use: RACK's per-segment records (RFC 8985 §5.2), the SACK
/// scoreboard (RFC 6675 §3), PRR's episode (RFC 9937 §6.1), the out-of-order store, the
/// chronographs.
#[test]
fn established_connection_holds_no_lazy_state() {
    let (o, _) = sacky(TcpSettings::default());
    assert!(o.tcb.info().sack);
    assert_eq!(o.tcb.lazy_state(), LazyState::default());
    let mut pair = Pair::new(TcpSettings::default(), TcpSettings::default(), ms(20));
    pair.run_for(ms(200));
    assert_eq!(pair.a.state(), State::Established);
    assert!(pair.a.info().sack, "SACK negotiated");
    assert_eq!(pair.a.lazy_state(), LazyState::default());
    assert_eq!(pair.b().lazy_state(), LazyState::default());
}

/// Memory: after a SACK loss recovery (RACK detects the loss, PRR paces the
/// repair), once everything is acknowledged the sender drops the scoreboard and PRR's
/// episode (RACK's records box is reset in place: `racks_box_is_reset_in_place_when_idle`),
/// and the receiver its out-of-order store; the next data needs no scoreboard. Every byte
/// arrives, in order, both times.
#[test]
fn loss_state_is_dropped_when_idle_and_allocated_again_when_data_flows() {
    let mut pair = Pair::new(TcpSettings::default(), TcpSettings::default(), ms(20));
    pair.run_for(ms(200));
    // The first data segment at or beyond 5000 bytes is lost, once.
    let mut dropped = false;
    pair.filter = Box::new(move |_, dir, s| {
        let off = s.seq().wrapping_sub(BASE);
        if dir == Dir::AtoB && !dropped && !s.data.is_empty() && off >= 5000 {
            dropped = true;
            return false;
        }
        true
    });
    let data = pattern(100_000);
    assert_eq!(pair.a.send(pair.now, &data).expect("send"), data.len());
    let mut got = Vec::new();
    let (mut sender_all, mut receiver_ooo) = (false, false);
    for _ in 0..2000 {
        pair.run_for(ms(1));
        got.extend(pair.read_b());
        let l = pair.a.lazy_state();
        sender_all |= l.rack_records && l.sack_scoreboard && l.prr_episode;
        receiver_ooo |= pair.b().lazy_state().out_of_order;
    }
    assert_eq!(got, data);
    let st = *pair.a.stats();
    assert!(st.recoveries >= 1 && st.rack_losses >= 1, "{st:?}");
    assert_eq!(st.timeouts, 0, "{st:?}");
    assert!(
        sender_all,
        "records, scoreboard and PRR in use during the recovery"
    );
    assert!(receiver_ooo, "the receiver held data out of order");
    let info = pair.a.info();
    assert!(!info.in_recovery && info.unacked == 0, "{info:?}");
    let idle = pair.a.lazy_state();
    assert!(!idle.sack_scoreboard && !idle.prr_episode, "{idle:?}");
    assert!(
        idle.rack_rtx_memory,
        "the retransmission stays remembered (RFC 3708)"
    );
    assert!(!pair.b().lazy_state().out_of_order);

    // Data flows again: the records come back, and go once it is all acknowledged.
    let more = pattern(30_000);
    assert_eq!(pair.a.send(pair.now, &more).expect("send"), more.len());
    pair.run_for(ms(1));
    assert!(
        pair.a.lazy_state().rack_records,
        "records while data is in flight"
    );
    pair.run_for(ms(500));
    assert_eq!(pair.read_b(), more);
    assert_eq!(pair.a.info().unacked, 0);
    assert!(!pair.a.lazy_state().sack_scoreboard);
    assert_eq!(
        pair.a.stats().recoveries,
        st.recoveries,
        "no loss the second time"
    );
}

/// Cost: once everything is acknowledged RACK's busy-period box stays, reset
/// in place (a request/response connection is idle after every exchange, and freeing
/// the box would cost an allocation and a free per round trip on both ends).
#[test]
fn racks_box_is_reset_in_place_when_idle() {
    let mut pair = Pair::new(TcpSettings::default(), TcpSettings::default(), ms(20));
    pair.run_for(ms(200));
    assert!(!pair.a.lazy_state().rack_records);
    let mut got = Vec::new();
    for round in 0..3u8 {
        let small = vec![round; 100];
        assert_eq!(pair.a.send(pair.now, &small).expect("send"), 100);
        pair.run_for(ms(200));
        got.extend(pair.read_b());
        assert_eq!(pair.a.info().unacked, 0);
        assert!(
            pair.a.lazy_state().rack_records,
            "kept after a short exchange"
        );
    }
    assert_eq!(got, [vec![0u8; 100], vec![1; 100], vec![2; 100]].concat());
}

/// Memory: what every connection carries stays small (it was 2,024 bytes
/// before the state used only while data flows was allocated on first use, and 1,600
/// before the tunables were shared between connections).
#[cfg(target_pointer_width = "64")]
#[test]
fn tcb_stays_small() {
    let size = core::mem::size_of::<ember_core::tcp::Tcb>();
    assert!(size <= TCB_MAX, "size_of::<Tcb>() = {size} > {TCB_MAX}");
}
