//! Connection control and its defences: RFC 9293 §3.5 (establishing), §3.6 (closing),
//! §3.8.3-§3.8.5 (timeouts, keepalive, urgent data), §3.10 (event processing) and the
//! Appendix B MUSTs, with RFC 5961 (blind attacks), RFC 7323 (window scale, timestamps,
//! PAWS), RFC 6191 (TIME-WAIT reuse), RFC 5482 (user timeout), RFC 2883 (D-SACK).
//!
//! LISTEN belongs to the host's listener (`host::Listener`), not to a `Tcb`: a passive
//! `Tcb` is born in SYN-RECEIVED from the SYN the listener received, so LISTEN is not
//! exercised here.
mod common;
use common::*;

use ember_core::tcp::tcb::ConnSpec;
use ember_core::tcp::{Events, SeqNum, State, Tcb, TcpError};
use ember_core::time::Instant;
use ember_core::wire::{TcpFlags, TcpOptions, TcpRepr};
use std::io::ErrorKind;
use std::time::Duration;

const ACK: TcpFlags = TcpFlags::ACK;
const SYN: TcpFlags = TcpFlags::SYN;
const FIN: TcpFlags = TcpFlags::FIN;
const RST: TcpFlags = TcpFlags::RST;
const PSH: TcpFlags = TcpFlags::PSH;
const URG: TcpFlags = TcpFlags::URG;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn opts(mss: Option<u16>, ws: Option<u8>, sack: bool, ts: Option<u32>) -> TcpOptions {
    let mut o = TcpOptions::default();
    o.mss = mss;
    o.window_scale = ws;
    o.sack_permitted = sack;
    o.timestamps = ts.map(|v| (v, 0));
    o
}

/// Every option a Linux peer offers: MSS 1460, wscale 7, SACK, timestamps (TSval 5000).
fn full() -> TcpOptions {
    opts(Some(1460), Some(7), true, Some(5000))
}

/// MSS only.
fn plain() -> TcpOptions {
    opts(Some(1460), None, false, None)
}

fn est_full() -> (One, Peer) {
    One::established(settings(|_| {}), full(), 65535)
}

fn est_plain() -> (One, Peer) {
    One::established(settings(|_| {}), plain(), 65535)
}

/// The peer sends `data` at its next sequence number.
fn peer_data(o: &mut One, p: &mut Peer, data: &[u8]) {
    let r = p.seg(ACK | PSH, data.len());
    o.input(&r, data);
    p.seq += data.len() as u32;
}

/// The peer sends its FIN.
fn peer_fin(o: &mut One, p: &mut Peer) {
    let r = p.seg(FIN | ACK, 0);
    o.input(&r, &[]);
    p.seq += 1;
}

/// The peer acknowledges everything the `Tcb` has sent.
fn peer_ack_all(o: &mut One, p: &mut Peer) {
    p.ack = o.tcb.snd_nxt().raw();
    let r = p.ack_seg();
    o.input(&r, &[]);
}

fn rst_at(p: &Peer, seq: u32) -> TcpRepr {
    let mut r = p.seg(RST, 0);
    r.seq = seq;
    r
}

/// A SYN from the client to a passive `Tcb`.
fn client_syn(o: TcpOptions, window: u16) -> TcpRepr {
    TcpRepr {
        src_port: CLIENT.port(),
        dst_port: SERVER.port(),
        seq: CLIENT_ISS,
        ack: 0,
        flags: SYN,
        window,
        urgent: 0,
        options: o,
    }
}

/// The client's view of a passive `Tcb` (after its SYN,ACK).
fn client_peer(window: u16) -> Peer {
    Peer {
        port: CLIENT.port(),
        our_port: SERVER.port(),
        seq: CLIENT_ISS + 1,
        ack: SERVER_ISS + 1,
        window,
        tsval: None,
        tsecr: 0,
    }
}

/// A SYN,ACK from the server to the client `One` (which sent SYN with ISS `CLIENT_ISS`).
fn synack(o: TcpOptions, window: u16, ack: u32) -> TcpRepr {
    TcpRepr {
        src_port: SERVER.port(),
        dst_port: CLIENT.port(),
        seq: SERVER_ISS,
        ack,
        flags: SYN | ACK,
        window,
        urgent: 0,
        options: o,
    }
}

/// Drives `o` to TIME-WAIT by an active close; returns the peer.
fn to_time_wait(s: ember_core::tcp::TcpSettings, o_: TcpOptions) -> (One, Peer) {
    let (mut o, mut p) = One::established(s, o_, 65535);
    o.tcb.close(o.now);
    o.flush();
    let fin = o.pop();
    assert!(fin.flags().fin());
    p.ack = fin.seq() + 1;
    peer_fin(&mut o, &mut p);
    assert_eq!(o.tcb.state(), State::TimeWait);
    o.take_all();
    (o, p)
}

fn drain(t: &mut Tcb, now: Instant) -> Vec<Seg> {
    let mut v = Vec::new();
    while let Some(out) = t.poll_transmit(now) {
        let mut data = vec![0; out.payload_len()];
        out.copy_payload(&mut data);
        v.push(Seg {
            repr: out.repr,
            data,
        });
        assert!(v.len() < 1000);
    }
    v
}

fn io_kind(e: TcpError) -> ErrorKind {
    std::io::Error::from(e).kind()
}

// ======================================================================================
// Three-way handshake and option negotiation (RFC 9293 §3.5, §3.7.1; RFC 7323; RFC 2018)
// ======================================================================================

/// RFC 9293 §3.5/§3.10.1: the active open sends <SEQ=ISS><CTL=SYN> with MSS (§3.7.1),
/// window scale (RFC 7323 §2.2), SACK-permitted (RFC 2018 §2) and timestamps (RFC 7323
/// §3.2, TSecr 0), in Linux's byte order; the SYN's window is unscaled (RFC 7323 §2.2).
#[test]
fn syn_carries_options_in_linux_order() {
    let mut o = One::client(settings(|_| {}));
    assert_eq!(o.tcb.state(), State::SynSent);
    let syn = o.pop();
    assert!(o.sent.is_empty());
    assert_eq!(syn.flags(), SYN);
    assert_eq!(syn.seq(), CLIENT_ISS);
    assert!(syn.data.is_empty());
    // 1 MiB receive buffer: the field is 65535, not 1 MiB >> 5.
    assert_eq!(syn.repr.window, 65535);
    let op = syn.repr.options;
    assert_eq!(op.mss, Some(1460));
    assert_eq!(op.window_scale, Some(5));
    assert!(op.sack_permitted);
    assert_eq!(op.timestamps, Some((100_000, 0)));
    let mut buf = [0u8; 60];
    syn.repr.emit_header(&mut buf);
    assert_eq!(syn.repr.header_len(), 40);
    let ts = 100_000u32.to_be_bytes();
    let want = [
        2, 4, 0x05, 0xb4, // MSS 1460
        4, 2, // SACK-permitted
        8, 10, ts[0], ts[1], ts[2], ts[3], 0, 0, 0, 0, // TS
        1, 3, 3, 5, // NOP, WS 5
    ];
    assert_eq!(&buf[20..40], &want);
}

/// RFC 9293 §3.7.1 (MUST-14: MSS sent on the SYN); options disabled by the tunables are
/// not offered (RFC 7323 §2.2/§3.2 and RFC 2018 §2 are optional for the active opener).
#[test]
fn syn_without_optional_options_when_disabled() {
    let mut o = One::client(settings(|s| {
        s.wscale = 1;
        s.tstamp = 1;
        s.sack = 1;
    }));
    let syn = o.pop();
    let op = syn.repr.options;
    assert_eq!(op.mss, Some(1460));
    assert_eq!(op.window_scale, None);
    assert!(!op.sack_permitted);
    assert_eq!(op.timestamps, None);
    assert_eq!(syn.repr.header_len(), 24);
}

/// RFC 9293 §3.5: SYN,ACK completes the active open; both windows scaled as negotiated
/// (RFC 7323 §2.2), SACK (RFC 2018 §2) and timestamps (RFC 7323 §3.2) on, send MSS from
/// the option less the 12 bytes of timestamps (RFC 6691).
#[test]
fn active_open_negotiates_all_options() {
    let mut o = One::client(settings(|_| {}));
    o.pop();
    assert!(o.tcb.poll_events().is_empty());
    o.input(
        &synack(
            opts(Some(1200), Some(7), true, Some(5000)),
            65535,
            CLIENT_ISS + 1,
        ),
        &[],
    );
    assert_eq!(o.tcb.state(), State::Established);
    let ack = o.pop();
    assert_eq!(ack.flags(), ACK);
    assert_eq!(ack.seq(), CLIENT_ISS + 1);
    assert_eq!(ack.ack(), SERVER_ISS + 1);
    assert_eq!(ack.repr.options.timestamps, Some((100_000, 5000)));
    // Window scaled by our shift 5: 1 MiB.
    assert_eq!(u32::from(ack.repr.window) << 5, 1 << 20);
    let i = o.tcb.info();
    assert_eq!((i.snd_wscale, i.rcv_wscale), (7, 5));
    assert!(i.sack && i.timestamps);
    assert_eq!(o.tcb.mss(), 1188);
    assert!(!o.tcb.is_simultaneous_open());
    assert!(!o.tcb.is_passive());
}

/// RFC 9293 §3.7.1 MUST-15: without an MSS option the send MSS is 536; without the
/// window-scale option in the SYN,ACK neither direction is scaled (RFC 7323 §2.2), and
/// without SACK-permitted/timestamps they are off.
#[test]
fn active_open_without_peer_options_uses_536_and_no_scaling() {
    let mut o = One::client(settings(|_| {}));
    o.pop();
    o.input(&synack(TcpOptions::default(), 65535, CLIENT_ISS + 1), &[]);
    assert_eq!(o.tcb.state(), State::Established);
    let ack = o.pop();
    assert_eq!(ack.repr.options.timestamps, None);
    assert!(ack.repr.options.sack_blocks().is_empty());
    // Unscaled: the field is the window, at most 65535.
    assert_eq!(ack.repr.window, 65535);
    let i = o.tcb.info();
    assert_eq!((i.snd_wscale, i.rcv_wscale), (0, 0));
    assert!(!i.sack && !i.timestamps);
    assert_eq!(o.tcb.mss(), 536);
    o.tcb.set_nodelay(true);
    o.write(&pattern(2000));
    let segs = o.take_all();
    assert_eq!(
        segs.iter().map(|s| s.len()).collect::<Vec<_>>(),
        vec![536, 536, 536, 392]
    );
}

/// RFC 9293 §3.10.7.2 / §3.5: the passive side answers <SEQ=ISS><ACK=RCV.NXT><CTL=SYN,ACK>,
/// accepting the offered options (RFC 7323 §2.2, §3.2 echoing TSval; RFC 2018 §2) in
/// Linux's option order, and is ESTABLISHED when the ACK of its SYN arrives.
#[test]
fn passive_open_accepts_offered_options() {
    let syn = client_syn(opts(Some(1400), Some(3), true, Some(777)), 29200);
    let mut o = One::server(settings(|_| {}), &syn);
    assert_eq!(o.tcb.state(), State::SynReceived);
    assert!(o.tcb.is_passive());
    let sa = o.pop();
    assert_eq!(sa.flags(), SYN | ACK);
    assert_eq!(sa.seq(), SERVER_ISS);
    assert_eq!(sa.ack(), CLIENT_ISS + 1);
    assert_eq!(sa.repr.window, 65535);
    let op = sa.repr.options;
    assert_eq!(op.mss, Some(1460));
    assert_eq!(op.window_scale, Some(5));
    assert!(op.sack_permitted);
    assert_eq!(op.timestamps, Some((100_000, 777)));
    let mut buf = [0u8; 60];
    sa.repr.emit_header(&mut buf);
    assert_eq!(&buf[20..24], &[2, 4, 0x05, 0xb4]);
    assert_eq!(&buf[24..28], &[4, 2, 8, 10]);
    assert_eq!(&buf[36..40], &[1, 3, 3, 5]);
    assert!(o.tcb.poll_events().is_empty());

    let mut p = client_peer(1000);
    p.tsval = Some(778);
    p.tsecr = 100_000;
    o.input(&p.ack_seg(), &[]);
    assert_eq!(o.tcb.state(), State::Established);
    assert!(o.tcb.poll_events().contains(Events::CONNECTED));
    assert!(o.sent.is_empty(), "the ACK of the SYN,ACK needs no answer");
    let i = o.tcb.info();
    assert_eq!((i.snd_wscale, i.rcv_wscale), (3, 5));
    // The SYN's window (29200) was unscaled; this ACK's window is scaled by 3.
    assert_eq!(i.snd_wnd, 8000);
    assert_eq!(o.tcb.mss(), 1388);
}

/// RFC 9293 §3.7.1 MUST-15 (default send MSS 536) on the passive side; options not offered
/// in the SYN are not sent in the SYN,ACK (RFC 7323 §1.3, RFC 2018 §2).
#[test]
fn passive_open_without_options() {
    let syn = client_syn(TcpOptions::default(), 8192);
    let mut o = One::server(settings(|_| {}), &syn);
    let sa = o.pop();
    let op = sa.repr.options;
    assert_eq!(op.mss, Some(1460));
    assert_eq!(op.window_scale, None);
    assert!(!op.sack_permitted);
    assert_eq!(op.timestamps, None);
    assert_eq!(sa.repr.header_len(), 24);
    assert_eq!(o.tcb.mss(), 536);
    let p = client_peer(8192);
    o.input(&p.ack_seg(), &[]);
    assert_eq!(o.tcb.state(), State::Established);
    let i = o.tcb.info();
    assert_eq!((i.snd_wscale, i.rcv_wscale, i.snd_wnd), (0, 0, 8192));
}

/// RFC 7323 §2.3: a shift count above 14 is used as 14.
#[test]
fn window_scale_above_14_is_used_as_14() {
    let (mut o, p) = One::established(
        settings(|_| {}),
        opts(Some(1460), Some(15), false, None),
        65535,
    );
    assert_eq!(o.tcb.info().snd_wscale, 14);
    let mut r = p.ack_seg();
    r.window = 3;
    o.input(&r, &[]);
    assert_eq!(o.tcb.info().snd_wnd, 3 << 14);
}

/// RFC 7323 §2.2: the window field of a SYN (or SYN,ACK) is never scaled; later
/// segments' windows are shifted by the peer's scale.
#[test]
fn syn_window_is_never_scaled() {
    let (mut o, p) = One::established(
        settings(|_| {}),
        opts(Some(1460), Some(7), false, None),
        1000,
    );
    assert_eq!(o.tcb.info().snd_wnd, 1000);
    let r = p.ack_seg();
    o.input(&r, &[]);
    assert_eq!(o.tcb.info().snd_wnd, 128_000);
}

/// RFC 9293 §3.10.7.4 (SYN-RECEIVED, ACK acceptable → ESTABLISHED, then process the
/// text): the ACK completing the handshake may carry data.
#[test]
fn handshake_ack_may_carry_data() {
    let mut o = One::server(settings(|_| {}), &client_syn(plain(), 65535));
    o.pop();
    let mut p = client_peer(65535);
    peer_data(&mut o, &mut p, b"hello");
    assert_eq!(o.tcb.state(), State::Established);
    assert_eq!(o.read_all(), b"hello");
    let a = o.take_all();
    assert!(a
        .iter()
        .any(|s| s.flags().ack() && s.ack() == CLIENT_ISS + 6));
}

/// RFC 9293 §3.10.7.4 SYN-RECEIVED, fifth check: an unacceptable ACK draws
/// <SEQ=SEG.ACK><CTL=RST> and the state stays.
#[test]
fn syn_received_bad_ack_draws_rst() {
    let mut o = One::server(settings(|_| {}), &client_syn(plain(), 65535));
    o.pop();
    let mut p = client_peer(65535);
    p.ack = SERVER_ISS + 5;
    o.input(&p.ack_seg(), &[]);
    let r = o.pop();
    assert_eq!(r.flags(), RST);
    assert_eq!(r.seq(), SERVER_ISS + 5);
    assert!(o.sent.is_empty());
    assert_eq!(o.tcb.state(), State::SynReceived);
}

/// RFC 9293 §3.10.7.4 SYN-RECEIVED, second check: a RST on a passively opened connection
/// returns it to LISTEN (here: the `Tcb` goes away) and "the user need not be informed".
#[test]
fn syn_received_rst_closes_quietly() {
    let mut o = One::server(settings(|_| {}), &client_syn(plain(), 65535));
    o.pop();
    let p = client_peer(65535);
    o.input(&rst_at(&p, CLIENT_ISS + 1), &[]);
    assert!(o.tcb.is_closed());
    assert!(o.sent.is_empty());
    let ev = o.tcb.poll_events();
    assert!(ev.contains(Events::CLOSED));
    assert!(!ev.contains(Events::ERROR));
}

/// RFC 9293 §3.5 / §3.8.1: a retransmitted SYN in SYN-RECEIVED (our SYN,ACK was lost)
/// makes us send the SYN,ACK again; the SYN,ACK is also retransmitted on timeout.
#[test]
fn syn_ack_retransmitted_on_duplicate_syn_and_on_timeout() {
    let syn = client_syn(plain(), 65535);
    let mut o = One::server(settings(|_| {}), &syn);
    let first = o.pop();
    o.now += ms(300);
    o.input(&syn, &[]);
    let again = o.pop();
    assert_eq!(again.flags(), SYN | ACK);
    assert_eq!((again.seq(), again.ack()), (first.seq(), first.ack()));
    assert_eq!(o.tcb.state(), State::SynReceived);
    let d = o.next_timer().expect("SYN,ACK timer");
    assert!(d <= secs(1), "{d:?}");
    let third = o.pop();
    assert_eq!(third.flags(), SYN | ACK);
    assert_eq!(third.seq(), SERVER_ISS);
}

// ======================================================================================
// States and transitions (RFC 9293 figure 5, §3.6)
// ======================================================================================

/// RFC 9293 §3.6 case 1 / figure 5 (active side): ESTABLISHED -close/FIN-> FIN-WAIT-1
/// -ACK-> FIN-WAIT-2 -FIN/ACK-> TIME-WAIT.
#[test]
fn active_close_fin_wait_1_fin_wait_2_time_wait() {
    let (mut o, mut p) = est_plain();
    o.tcb.close(o.now);
    o.flush();
    assert_eq!(o.tcb.state(), State::FinWait1);
    let fin = o.pop();
    assert_eq!(fin.flags(), FIN | ACK);
    assert_eq!(fin.seq(), CLIENT_ISS + 1);
    assert_eq!(fin.ack(), SERVER_ISS + 1);
    p.ack = CLIENT_ISS + 2;
    o.input(&p.ack_seg(), &[]);
    assert_eq!(o.tcb.state(), State::FinWait2);
    assert!(o.sent.is_empty());
    peer_fin(&mut o, &mut p);
    assert_eq!(o.tcb.state(), State::TimeWait);
    let a = o.pop();
    assert_eq!(a.flags(), ACK);
    assert_eq!((a.seq(), a.ack()), (CLIENT_ISS + 2, SERVER_ISS + 2));
}

/// RFC 9293 §3.6 case 1 / figure 5 (passive side): ESTABLISHED -FIN/ACK-> CLOSE-WAIT
/// -close/FIN-> LAST-ACK -ACK-> CLOSED, with READABLE/EOF on the FIN and CLOSED at the end.
#[test]
fn passive_close_close_wait_last_ack_closed() {
    let (mut o, mut p) = est_plain();
    o.tcb.poll_events();
    peer_fin(&mut o, &mut p);
    assert_eq!(o.tcb.state(), State::CloseWait);
    let a = o.pop();
    assert_eq!(a.ack(), SERVER_ISS + 2);
    assert!(o.tcb.poll_events().contains(Events::READABLE));
    let mut buf = [0u8; 16];
    assert_eq!(o.tcb.recv(o.now, &mut buf), Ok(0));
    assert!(o.tcb.at_eof());
    // Still allowed to send in CLOSE-WAIT.
    o.tcb.set_nodelay(true);
    assert_eq!(o.write(b"bye"), 3);
    assert_eq!(o.pop().len(), 3);
    o.tcb.close(o.now);
    o.flush();
    assert_eq!(o.tcb.state(), State::LastAck);
    let fin = o.pop();
    assert!(fin.flags().fin());
    assert_eq!(fin.seq(), CLIENT_ISS + 4);
    p.ack = CLIENT_ISS + 5;
    o.input(&p.ack_seg(), &[]);
    assert_eq!(o.tcb.state(), State::Closed);
    assert!(o.tcb.is_closed());
    assert!(o.tcb.poll_events().contains(Events::CLOSED));
    assert_eq!(o.tcb.error(), None);
}

/// RFC 9293 §3.6 case 2 / figure 5: FIN-WAIT-1 -FIN (our FIN not acked)-> CLOSING
/// -ACK of FIN-> TIME-WAIT.
#[test]
fn simultaneous_close_goes_through_closing() {
    let (mut o, mut p) = est_plain();
    o.tcb.close(o.now);
    o.flush();
    let fin = o.pop();
    // The peer's FIN crossed ours: it acknowledges only up to our FIN.
    peer_fin(&mut o, &mut p);
    assert_eq!(o.tcb.state(), State::Closing);
    let a = o.pop();
    assert_eq!(a.ack(), SERVER_ISS + 2);
    p.ack = fin.seq() + 1;
    o.input(&p.ack_seg(), &[]);
    assert_eq!(o.tcb.state(), State::TimeWait);
}

/// RFC 9293 §3.10.7.4 FIN-WAIT-1, eighth step: a FIN that also acknowledges our FIN goes
/// straight to TIME-WAIT.
#[test]
fn fin_acking_our_fin_goes_from_fin_wait_1_to_time_wait() {
    let (mut o, mut p) = est_plain();
    o.tcb.close(o.now);
    o.flush();
    let fin = o.pop();
    p.ack = fin.seq() + 1;
    peer_fin(&mut o, &mut p);
    assert_eq!(o.tcb.state(), State::TimeWait);
    assert_eq!(o.pop().ack(), SERVER_ISS + 2);
}

/// RFC 9293 §3.6 case 2 with two real ends: both close at once, both pass through
/// CLOSING to TIME-WAIT, then to CLOSED after 2 MSL.
#[test]
fn simultaneous_close_pair() {
    let tw = settings(|s| s.time_wait = secs(5));
    let mut pr = Pair::new(tw.clone(), tw, ms(10));
    pr.run_for(ms(100));
    assert_eq!(pr.b().state(), State::Established);
    let now = pr.now;
    pr.a.close(now);
    pr.b().close(now);
    pr.run_for(ms(5));
    assert_eq!(pr.a.state(), State::FinWait1);
    assert_eq!(pr.b().state(), State::FinWait1);
    pr.run_for(ms(8));
    // Each has the other's FIN but not yet the ACK of its own.
    assert_eq!(pr.a.state(), State::Closing);
    assert_eq!(pr.b().state(), State::Closing);
    pr.run_for(ms(20));
    assert_eq!(pr.a.state(), State::TimeWait);
    assert_eq!(pr.b().state(), State::TimeWait);
    assert!(pr.log.iter().all(|(_, _, s)| !s.flags().rst()));
    pr.run_for(secs(6));
    assert!(pr.a.is_closed());
    assert!(pr.b().is_closed());
}

/// RFC 9293 §3.10.4 CLOSE in SYN-SENT: delete the TCB; nothing is sent.
#[test]
fn close_in_syn_sent_just_closes() {
    let mut o = One::client(settings(|_| {}));
    o.pop();
    o.tcb.close(o.now);
    o.flush();
    assert!(o.tcb.is_closed());
    assert!(o.sent.is_empty());
    assert!(o.tcb.poll_events().contains(Events::CLOSED));
    assert_eq!(o.tcb.poll_timeout(), None);
}

/// RFC 9293 §3.10.4 CLOSE in SYN-RECEIVED: the FIN is queued until ESTABLISHED and then
/// sent (FIN-WAIT-1).
#[test]
fn close_in_syn_received_sends_fin_once_established() {
    let mut o = One::server(settings(|_| {}), &client_syn(plain(), 65535));
    o.pop();
    o.tcb.shutdown_write(o.now).unwrap();
    o.flush();
    assert_eq!(o.tcb.state(), State::SynReceived);
    assert!(o.sent.is_empty());
    let p = client_peer(65535);
    o.input(&p.ack_seg(), &[]);
    assert_eq!(o.tcb.state(), State::FinWait1);
    let fin = o.pop();
    assert_eq!(fin.flags(), FIN | ACK);
    assert_eq!(fin.seq(), SERVER_ISS + 1);
}

// ======================================================================================
// Simultaneous open, half-close, reset on close and abort
// ======================================================================================

/// RFC 9293 §3.5 figure 7: both ends send SYN; each goes SYN-SENT → SYN-RECEIVED and
/// answers <SEQ=ISS><ACK=peer ISS+1><CTL=SYN,ACK>; both end ESTABLISHED.
#[test]
fn simultaneous_open() {
    let now = Instant::from_secs(100);
    let spec = |local, remote, iss| ConnSpec {
        local,
        remote,
        iss: SeqNum(iss),
        ts_offset: 0,
        mtu: 1500,
    };
    let mut a = Tcb::connect(now, spec(CLIENT, SERVER, CLIENT_ISS), settings(|_| {}));
    let mut b = Tcb::connect(now, spec(SERVER, CLIENT, SERVER_ISS), settings(|_| {}));
    let sa = drain(&mut a, now);
    let sb = drain(&mut b, now);
    assert_eq!((sa.len(), sb.len()), (1, 1));
    assert_eq!(sa[0].flags(), SYN);
    assert_eq!(sb[0].flags(), SYN);
    a.handle_segment(now, &sb[0].repr, &[]);
    b.handle_segment(now, &sa[0].repr, &[]);
    assert_eq!(a.state(), State::SynReceived);
    assert_eq!(b.state(), State::SynReceived);
    assert!(a.is_simultaneous_open() && b.is_simultaneous_open());
    let xa = drain(&mut a, now);
    let xb = drain(&mut b, now);
    assert_eq!(xa[0].flags(), SYN | ACK);
    assert_eq!((xa[0].seq(), xa[0].ack()), (CLIENT_ISS, SERVER_ISS + 1));
    assert_eq!(xb[0].flags(), SYN | ACK);
    assert_eq!((xb[0].seq(), xb[0].ack()), (SERVER_ISS, CLIENT_ISS + 1));
    let (mut to_a, mut to_b) = (xb, xa);
    for _ in 0..5 {
        for s in to_a.drain(..) {
            a.handle_segment(now, &s.repr, &s.data);
        }
        for s in to_b.drain(..) {
            b.handle_segment(now, &s.repr, &s.data);
        }
        to_b = drain(&mut a, now);
        to_a = drain(&mut b, now);
        assert!(to_a.iter().chain(&to_b).all(|s| !s.flags().rst()));
    }
    assert_eq!(a.state(), State::Established);
    assert_eq!(b.state(), State::Established);
    assert!(a.poll_events().contains(Events::CONNECTED));
    assert!(b.poll_events().contains(Events::CONNECTED));
    assert!(!a.is_passive() && !b.is_passive());
    // The connection works: sequence numbers agree.
    assert_eq!(a.send(now, b"ping"), Ok(4));
    for s in drain(&mut a, now) {
        b.handle_segment(now, &s.repr, &s.data);
    }
    let mut buf = [0u8; 8];
    assert_eq!(b.recv(now, &mut buf), Ok(4));
    assert_eq!(&buf[..4], b"ping");
}

/// RFC 9293 §3.6 / §3.10.4: after shutdown(SHUT_WR) the other side may keep sending
/// (half-close); FIN-WAIT-2 keeps receiving, and the writer gets EPIPE.
#[test]
fn half_close_data_keeps_flowing() {
    let mut pr = Pair::new(settings(|_| {}), settings(|_| {}), ms(5));
    pr.run_for(ms(50));
    let now = pr.now;
    pr.a.shutdown_write(now).unwrap();
    pr.run_for(ms(50));
    assert_eq!(pr.a.state(), State::FinWait2);
    assert_eq!(pr.b().state(), State::CloseWait);
    let mut buf = [0u8; 8];
    assert_eq!(pr.b().recv(now, &mut buf), Ok(0));
    let e = pr.a.send(pr.now, b"x").unwrap_err();
    assert_eq!(e, TcpError::BrokenPipe);
    assert_eq!(io_kind(e), ErrorKind::BrokenPipe);
    let data = pattern(50_000);
    let mut off = 0;
    let mut got = Vec::new();
    for _ in 0..200 {
        let now = pr.now;
        if off < data.len() {
            off += pr.b().send(now, &data[off..]).unwrap_or(0);
        }
        pr.run_for(ms(10));
        got.extend(pr.read_a());
        if got.len() == data.len() {
            break;
        }
    }
    assert_eq!(got, data);
    assert_eq!(pr.a.state(), State::FinWait2);
    let now = pr.now;
    pr.b().close(now);
    pr.run_for(ms(50));
    assert_eq!(pr.a.state(), State::TimeWait);
    assert!(pr.b().is_closed());
}

/// RFC 2525 §2.17 (as Linux): close() with unread received data sends a RST, not a FIN.
#[test]
fn close_with_unread_data_sends_rst() {
    let (mut o, mut p) = est_plain();
    peer_data(&mut o, &mut p, b"unread!");
    o.take_all();
    o.tcb.close(o.now);
    o.flush();
    let r = o.pop();
    assert!(o.sent.is_empty());
    assert!(r.flags().rst());
    assert!(!r.flags().fin());
    assert_eq!(r.seq(), CLIENT_ISS + 1);
    assert_eq!(r.ack(), SERVER_ISS + 1 + 7);
    assert!(o.tcb.is_closed());
    assert_eq!(o.tcb.stats().rsts_out, 1);
}

/// RFC 9293 §3.10.5 ABORT in ESTABLISHED: send <SEQ=SND.NXT><CTL=RST>, drop queued data,
/// CLOSED; the application sees ECONNABORTED.
#[test]
fn abort_sends_rst() {
    let (mut o, _p) = est_plain();
    o.tcb.send(o.now, &pattern(100_000)).unwrap();
    o.tcb.abort(o.now);
    o.flush();
    let r = o.pop();
    assert!(o.sent.is_empty(), "nothing but the RST");
    assert!(r.flags().rst());
    assert_eq!(r.seq(), CLIENT_ISS + 1);
    assert!(o.tcb.is_closed());
    let ev = o.tcb.poll_events();
    assert!(ev.contains(Events::CLOSED));
    assert_eq!(o.tcb.error(), Some(TcpError::Aborted));
    assert_eq!(io_kind(TcpError::Aborted), ErrorKind::ConnectionAborted);
    assert_eq!(o.tcb.send_queued(), 0);
}

/// RFC 9293 §3.10.5 ABORT in SYN-SENT: no RST (nothing is synchronized), just CLOSED.
#[test]
fn abort_in_syn_sent_sends_nothing() {
    let mut o = One::client(settings(|_| {}));
    o.pop();
    o.tcb.abort(o.now);
    o.flush();
    assert!(o.sent.is_empty());
    assert!(o.tcb.is_closed());
}

/// Linux (tcp_rcv_state_process, RCV_SHUTDOWN): data arriving after close() has no
/// reader, so it is answered with a RST and the connection is gone (RFC 2525 §2.17).
#[test]
fn data_after_close_draws_rst() {
    let (mut o, mut p) = est_plain();
    o.tcb.close(o.now);
    o.flush();
    let fin = o.pop();
    p.ack = fin.seq() + 1;
    o.input(&p.ack_seg(), &[]);
    assert_eq!(o.tcb.state(), State::FinWait2);
    peer_data(&mut o, &mut p, b"too late");
    let r = o.pop();
    assert!(r.flags().rst());
    assert_eq!(r.seq(), fin.seq() + 1);
    assert!(o.tcb.is_closed());
}

// ======================================================================================
// SYN-SENT: retransmission, refusal, bad ACKs (RFC 9293 §3.8.1, §3.8.3, §3.10.7.3)
// ======================================================================================

/// RFC 6298 §5.5 / RFC 9293 §3.8.1: the SYN is retransmitted with exponential backoff
/// from the initial RTO (1 s).
#[test]
fn syn_retransmitted_with_backoff() {
    let mut o = One::client(settings(|_| {}));
    let first = o.pop();
    let mut gaps = Vec::new();
    for _ in 0..5 {
        gaps.push(o.next_timer().expect("SYN timer"));
        let s = o.pop();
        assert!(o.sent.is_empty());
        assert_eq!(s.flags(), SYN);
        assert_eq!(s.seq(), first.seq());
        assert_eq!(s.repr.options.mss, first.repr.options.mss);
    }
    assert_eq!(gaps, vec![secs(1), secs(2), secs(4), secs(8), secs(16)]);
    assert_eq!(o.tcb.state(), State::SynSent);
}

/// RFC 9293 §3.8.3 (MUST-20/21, R2 for a SYN): the connection attempt gives up with
/// ETIMEDOUT once `abort_cinterval` has passed since the first SYN.
#[test]
fn syn_gives_up_after_abort_cinterval() {
    let mut o = One::client(settings(|s| s.abort_cinterval = secs(10)));
    o.pop();
    let start = o.now;
    let mut syns = 0;
    while o.tcb.state() == State::SynSent {
        let d = o.next_timer().expect("timer while SYN-SENT");
        syns += o.take_all().iter().filter(|s| s.flags().syn()).count();
        assert!(d <= secs(16));
    }
    let t = o.now.saturating_duration_since(start);
    assert!(t >= secs(10) && t <= secs(10) + secs(8), "{t:?}");
    assert_eq!(syns, 3);
    assert!(o.tcb.is_closed());
    assert_eq!(o.tcb.error(), Some(TcpError::TimedOut));
    assert_eq!(io_kind(TcpError::TimedOut), ErrorKind::TimedOut);
    let ev = o.tcb.poll_events();
    assert!(ev.contains(Events::ERROR | Events::CLOSED));
    assert_eq!(o.tcb.poll_timeout(), None);
}

/// RFC 9293 §3.10.7.3 SYN-SENT, second check: RST with an acceptable ACK → "connection
/// reset" (ECONNREFUSED), CLOSED.
#[test]
fn rst_answering_syn_is_refused() {
    let mut o = One::client(settings(|_| {}));
    o.pop();
    let mut r = synack(TcpOptions::default(), 0, CLIENT_ISS + 1);
    r.flags = RST | ACK;
    r.seq = 0;
    o.input(&r, &[]);
    assert!(o.sent.is_empty());
    assert!(o.tcb.is_closed());
    assert_eq!(o.tcb.error(), Some(TcpError::Refused));
    assert!(o.tcb.poll_events().contains(Events::ERROR | Events::CLOSED));
    let mut buf = [0u8; 4];
    let e = o.tcb.recv(o.now, &mut buf).unwrap_err();
    assert_eq!(e, TcpError::Refused);
    assert_eq!(io_kind(e), ErrorKind::ConnectionRefused);
}

/// RFC 9293 §3.10.7.3 SYN-SENT: a RST without ACK is dropped; a RST whose ACK is
/// unacceptable is dropped without an answer (RFC 5961 §3.2 for SYN-SENT).
#[test]
fn syn_sent_ignores_rst_without_acceptable_ack() {
    let mut o = One::client(settings(|_| {}));
    o.pop();
    let mut r = synack(TcpOptions::default(), 0, 0);
    r.flags = RST;
    o.input(&r, &[]);
    assert_eq!(o.tcb.state(), State::SynSent);
    r.flags = RST | ACK;
    r.ack = CLIENT_ISS + 7;
    o.input(&r, &[]);
    assert_eq!(o.tcb.state(), State::SynSent);
    assert!(o.sent.is_empty());
    assert_eq!(o.tcb.error(), None);
}

/// RFC 9293 §3.10.7.3 SYN-SENT, first check: SEG.ACK =< ISS or SEG.ACK > SND.NXT →
/// <SEQ=SEG.ACK><CTL=RST>, segment dropped; a correct SYN,ACK still completes the open.
#[test]
fn syn_sent_bad_ack_answered_with_rst() {
    let mut o = One::client(settings(|_| {}));
    o.pop();
    for bad in [CLIENT_ISS, CLIENT_ISS - 100, CLIENT_ISS + 2] {
        o.input(&synack(plain(), 65535, bad), &[]);
        let r = o.pop();
        assert_eq!(r.flags(), RST, "ack {bad}");
        assert_eq!(r.seq(), bad);
        assert!(o.sent.is_empty());
        assert_eq!(o.tcb.state(), State::SynSent);
    }
    o.input(&synack(plain(), 65535, CLIENT_ISS + 1), &[]);
    assert_eq!(o.tcb.state(), State::Established);
}

// ======================================================================================
// RFC 5961: blind reset, SYN and data injection
// ======================================================================================

/// RFC 5961 §3.2: a RST in the window but not at RCV.NXT draws a challenge ACK
/// <SEQ=SND.NXT><ACK=RCV.NXT><CTL=ACK>; the connection stays.
#[test]
fn in_window_rst_draws_challenge_ack() {
    let (mut o, p) = est_plain();
    o.input(&rst_at(&p, p.seq + 100), &[]);
    let a = o.pop();
    assert!(o.sent.is_empty());
    assert_eq!(a.flags(), ACK);
    assert_eq!((a.seq(), a.ack()), (CLIENT_ISS + 1, SERVER_ISS + 1));
    assert_eq!(o.tcb.state(), State::Established);
    assert_eq!(o.tcb.error(), None);
    assert_eq!(o.tcb.stats().challenge_acks, 1);
}

/// RFC 5961 §3.2 / RFC 9293 §3.10.7.4: a RST exactly at RCV.NXT resets the connection
/// (ECONNRESET), with ERROR and CLOSED events and no answer.
#[test]
fn exact_rst_resets() {
    let (mut o, p) = est_plain();
    o.tcb.poll_events();
    o.input(&rst_at(&p, p.seq), &[]);
    assert!(o.sent.is_empty());
    assert!(o.tcb.is_closed());
    assert!(o.tcb.poll_events().contains(Events::ERROR | Events::CLOSED));
    let mut buf = [0u8; 4];
    let e = o.tcb.recv(o.now, &mut buf).unwrap_err();
    assert_eq!(e, TcpError::Reset);
    assert_eq!(io_kind(e), ErrorKind::ConnectionReset);
    assert_eq!(o.tcb.send(o.now, b"x"), Err(TcpError::Reset));
}

/// RFC 5961 §3.2 (and RFC 9293 §3.10.7.4 first check): a RST outside the window is
/// dropped silently.
#[test]
fn out_of_window_rst_ignored_silently() {
    let (mut o, p) = est_plain();
    // Our window is 65535 (no scaling).
    for seq in [p.seq.wrapping_sub(1), p.seq + 65535, p.seq + 1_000_000] {
        o.input(&rst_at(&p, seq), &[]);
        assert!(o.sent.is_empty(), "seq {seq}");
        assert_eq!(o.tcb.state(), State::Established);
    }
    assert_eq!(o.tcb.stats().challenge_acks, 0);
}

/// RFC 5961 §4.2 / RFC 9293 §3.10.7.4 fourth check: a SYN in a synchronized state (in
/// the window or not) draws a challenge ACK; the connection stays and no data is taken.
#[test]
fn syn_in_synchronized_state_draws_challenge_ack() {
    let s = settings(|s| s.invalid_ratelimit = Duration::ZERO);
    let (mut o, p) = One::established(s, plain(), 65535);
    for seq in [p.seq, p.seq + 500, SERVER_ISS, p.seq + 2_000_000] {
        let mut r = p.seg(SYN, 0);
        r.seq = seq;
        o.input(&r, b"xyz");
        let a = o.pop();
        assert!(o.sent.is_empty());
        assert_eq!(a.flags(), ACK, "seq {seq}");
        assert_eq!((a.seq(), a.ack()), (CLIENT_ISS + 1, SERVER_ISS + 1));
        assert_eq!(o.tcb.state(), State::Established);
    }
    assert_eq!(o.tcb.recv_available(), 0);
}

/// RFC 5961 §4.2 also in TIME-WAIT: a SYN the owner did not use to reopen draws an ACK
/// and the state stays.
#[test]
fn syn_in_time_wait_draws_challenge_ack() {
    let (mut o, p) = to_time_wait(settings(|_| {}), plain());
    let mut r = p.seg(SYN, 0);
    r.seq = p.seq + 10;
    o.input(&r, &[]);
    let a = o.pop();
    assert_eq!(a.flags(), ACK);
    assert_eq!(a.ack(), p.seq);
    assert_eq!(o.tcb.state(), State::TimeWait);
}

/// RFC 9293 §3.10.7.4 fifth check / RFC 5961 §5.2: SEG.ACK > SND.NXT → send an ACK,
/// drop the segment (its data is not taken, SND.UNA does not move).
#[test]
fn ack_beyond_snd_nxt_is_acked_and_dropped() {
    let (mut o, mut p) = est_plain();
    o.write(b"0123456789");
    o.take_all();
    p.ack = CLIENT_ISS + 1 + 10 + 1000;
    let r = p.seg(ACK | PSH, 3);
    o.input(&r, b"abc");
    let a = o.pop();
    assert!(o.sent.is_empty());
    assert_eq!(a.flags(), ACK);
    assert_eq!(a.ack(), SERVER_ISS + 1);
    assert_eq!(o.tcb.snd_una().raw(), CLIENT_ISS + 1);
    assert_eq!(o.tcb.recv_available(), 0);
    assert_eq!(o.tcb.stats().bad_acks, 1);
}

/// RFC 5961 §5.2: SEG.ACK < SND.UNA - MAX.SND.WND draws a challenge ACK and the
/// segment is dropped; an old ACK within MAX.SND.WND is acceptable (its data is taken).
#[test]
fn ack_older_than_max_snd_wnd_is_challenged() {
    let (mut o, mut p) = One::established(settings(|_| {}), plain(), 1000);
    o.write(&pattern(3000));
    for _ in 0..3 {
        let s = o.pop();
        assert_eq!(s.len(), 1000);
        p.ack = s.seq() + 1000;
        o.input(&p.ack_seg(), &[]);
    }
    assert_eq!(o.tcb.snd_una().raw(), CLIENT_ISS + 3001);
    assert!(o.sent.is_empty());
    // 3000 below SND.UNA, MAX.SND.WND is 1000.
    p.ack = CLIENT_ISS + 1;
    o.input(&p.seg(ACK | PSH, 1), b"q");
    let a = o.pop();
    assert_eq!(a.flags(), ACK);
    assert_eq!(a.ack(), SERVER_ISS + 1);
    assert_eq!(o.tcb.recv_available(), 0);
    assert_eq!(o.tcb.stats().challenge_acks, 1);
    // 500 below SND.UNA: acceptable.
    p.ack = CLIENT_ISS + 2501;
    peer_data(&mut o, &mut p, b"q");
    assert_eq!(o.tcb.recv_available(), 1);
    assert_eq!(o.tcb.snd_una().raw(), CLIENT_ISS + 3001);
    assert_eq!(o.tcb.stats().challenge_acks, 1);
}

/// RFC 5961 §7: challenge ACKs are rate-limited (`invalid_ratelimit` per connection).
#[test]
fn challenge_acks_are_rate_limited() {
    let (mut o, p) = est_plain();
    for k in 0..3 {
        o.input(&rst_at(&p, p.seq + 10 + k), &[]);
    }
    assert_eq!(o.take_all().len(), 1);
    o.advance(ms(499));
    o.input(&rst_at(&p, p.seq + 20), &[]);
    assert!(o.sent.is_empty());
    o.advance(ms(1));
    o.input(&rst_at(&p, p.seq + 21), &[]);
    assert_eq!(o.take_all().len(), 1);
    assert_eq!(o.tcb.stats().challenge_acks, 2);
    assert_eq!(o.tcb.state(), State::Established);
}

/// RFC 5961 §7 with the limit off (`invalid_ratelimit` = 0): every invalid RST is answered.
#[test]
fn challenge_ack_limit_zero_answers_every_time() {
    let s = settings(|s| s.invalid_ratelimit = Duration::ZERO);
    let (mut o, p) = One::established(s, plain(), 65535);
    for k in 0..4 {
        o.input(&rst_at(&p, p.seq + 10 + k), &[]);
    }
    assert_eq!(o.take_all().len(), 4);
}

// ======================================================================================
// Sequence acceptability (RFC 9293 §3.10.7.4 first check)
// ======================================================================================

/// A client with a 4096-byte receive buffer (no scaling) and its peer.
fn est_small_rcvbuf() -> (One, Peer) {
    let s = settings(|s| {
        s.rcvbuf = 4096;
        s.max_buf = 4096;
        s.invalid_ratelimit = Duration::ZERO;
    });
    let (o, p) = One::established(s, plain(), 65535);
    assert_eq!(o.tcb.info().rcv_wnd, 4096);
    (o, p)
}

/// RFC 9293 §3.10.7.4 case SEG.LEN = 0, RCV.WND > 0: acceptable iff
/// RCV.NXT =< SEG.SEQ < RCV.NXT+RCV.WND; an unacceptable one draws an ACK.
#[test]
fn acceptability_empty_segment_open_window() {
    let (mut o, mut p) = est_small_rcvbuf();
    o.tcb.set_nodelay(true);
    o.write(b"abc");
    o.take_all();
    // In the window (not at RCV.NXT): accepted, its ACK processed, nothing sent.
    let mut r = p.seg(ACK, 0);
    r.seq = p.seq + 4095;
    r.ack = CLIENT_ISS + 4;
    o.input(&r, &[]);
    assert!(o.sent.is_empty());
    assert_eq!(o.tcb.snd_una().raw(), CLIENT_ISS + 4);
    // Just right of the window, or left of RCV.NXT: unacceptable → ACK.
    for seq in [p.seq + 4096, p.seq - 1] {
        p.ack = CLIENT_ISS + 4;
        let mut r = p.ack_seg();
        r.seq = seq;
        o.input(&r, &[]);
        let a = o.pop();
        assert_eq!(a.flags(), ACK, "seq {seq}");
        assert_eq!(
            (a.seq(), a.ack(), a.repr.window),
            (CLIENT_ISS + 4, p.seq, 4096)
        );
    }
}

/// RFC 9293 §3.10.7.4 case SEG.LEN > 0, RCV.WND > 0: acceptable if the first or the
/// last octet is in the window. A segment starting before RCV.NXT is trimmed; a segment
/// entirely right of the window draws an ACK and is not kept.
#[test]
fn acceptability_data_open_window() {
    let (mut o, mut p) = est_small_rcvbuf();
    peer_data(&mut o, &mut p, b"0123456789");
    o.take_all();
    // Overlaps the left edge: the last 5 octets are new.
    let mut r = p.seg(ACK, 10);
    r.seq = p.seq - 5;
    o.input(&r, b"56789abcde");
    p.seq += 5;
    assert_eq!(o.read_all(), b"0123456789abcde");
    o.take_all();
    // Beyond the right edge entirely.
    let wnd = o.tcb.info().rcv_wnd;
    let mut r = p.seg(ACK, 10);
    r.seq = p.seq + wnd;
    o.input(&r, b"ZZZZZZZZZZ");
    let a = o.pop();
    assert_eq!(a.flags(), ACK);
    assert_eq!(a.ack(), p.seq);
    assert_eq!(o.tcb.info().ooo_bytes, 0);
    // First octet inside, the rest beyond the right edge: acceptable, trimmed to the
    // window and held out of order.
    let mut r = p.seg(ACK, 10);
    r.seq = p.seq + wnd - 4;
    o.input(&r, b"YYYYYYYYYY");
    assert_eq!(o.tcb.info().ooo_bytes, 4);
    let a = o.pop();
    assert_eq!(a.ack(), p.seq);
}

/// Fills the 4096-byte window of `est_small_rcvbuf` without reading.
fn fill_window(o: &mut One, p: &mut Peer) {
    for _ in 0..4 {
        peer_data(o, p, &[7u8; 1024]);
    }
    let last = o.take_all().pop().expect("ACK");
    assert_eq!(last.repr.window, 0);
    assert_eq!(o.tcb.info().rcv_wnd, 0);
}

/// RFC 9293 §3.10.7.4 zero receive window: an empty segment is acceptable only at
/// RCV.NXT (case 1); any segment with data is unacceptable (case 3) and draws an ACK
/// advertising the zero window; a RST at RCV.NXT is still honoured.
#[test]
fn acceptability_zero_window() {
    let (mut o, mut p) = est_small_rcvbuf();
    fill_window(&mut o, &mut p);
    // Case 3: data at RCV.NXT is not acceptable.
    o.input(&p.seg(ACK | PSH, 10), b"0123456789");
    let a = o.pop();
    assert_eq!((a.ack(), a.repr.window), (p.seq, 0));
    assert_eq!(o.tcb.recv_available(), 4096);
    // Case 1: an empty segment at RCV.NXT is acceptable (no answer) ...
    o.input(&p.ack_seg(), &[]);
    assert!(o.sent.is_empty());
    // ... anywhere else it is not (zero-window probe style, SEQ = RCV.NXT - 1).
    let mut r = p.ack_seg();
    r.seq = p.seq - 1;
    o.input(&r, &[]);
    let a = o.pop();
    assert_eq!((a.ack(), a.repr.window), (p.seq, 0));
    o.input(&rst_at(&p, p.seq), &[]);
    assert_eq!(o.tcb.error(), Some(TcpError::Reset));
}

/// RFC 9293 §3.10.7.4: "If the RCV.WND is zero, no segments will be acceptable, but
/// special allowance should be made to accept valid ACKs, URGs, and RSTs." A data
/// segment arriving on a zero window still carries a valid ACK that should be used.
#[test]
fn zero_window_still_takes_ack_and_urg_from_data_segment() {
    let (mut o, mut p) = est_small_rcvbuf();
    o.tcb.set_nodelay(true);
    o.write(b"our data");
    o.take_all();
    fill_window(&mut o, &mut p);
    o.tcb.poll_events();
    p.ack = CLIENT_ISS + 9;
    let mut r = p.seg(ACK | PSH | URG, 2);
    r.urgent = 2;
    o.input(&r, b"!!");
    assert_eq!(o.tcb.recv_available(), 4096);
    assert_eq!(o.tcb.snd_una().raw(), CLIENT_ISS + 9);
    assert!(o.tcb.poll_events().contains(Events::URGENT));
    // The text is not taken: the answer still acknowledges RCV.NXT with a zero window.
    let a = o.pop();
    assert_eq!((a.ack(), a.repr.window), (p.seq, 0));
}

/// RFC 9293 §3.10.7.4: an old duplicate draws an ACK; with SACK it carries a D-SACK
/// block for the duplicate (RFC 2883 §4).
#[test]
fn old_duplicate_draws_ack_and_dsack() {
    let (mut o, mut p) = est_full();
    let start = p.seq;
    peer_data(&mut o, &mut p, &pattern(100));
    o.take_all();
    let mut r = p.seg(ACK | PSH, 100);
    r.seq = start;
    o.input(&r, &pattern(100));
    let a = o.pop();
    assert!(o.sent.is_empty());
    assert_eq!(a.ack(), start + 100);
    let b = a.repr.options.sack_blocks();
    assert_eq!(b.len(), 1);
    assert_eq!((b[0].left, b[0].right), (start, start + 100));
    assert_eq!(o.tcb.stats().dsacks_sent, 1);
    assert_eq!(o.read_all(), pattern(100));
}

/// RFC 2883 §4.1.1: a segment that is partly old reports the duplicate part in a D-SACK
/// block and delivers the new part.
#[test]
fn partial_duplicate_draws_dsack_for_old_part() {
    let (mut o, mut p) = est_full();
    let start = p.seq;
    peer_data(&mut o, &mut p, &[1u8; 100]);
    o.take_all();
    let mut r = p.seg(ACK | PSH, 100);
    r.seq = start + 50;
    o.input(&r, &[2u8; 100]);
    let a = o.take_all().pop().expect("ACK");
    assert_eq!(a.ack(), start + 150);
    let b = a.repr.options.sack_blocks();
    assert_eq!((b[0].left, b[0].right), (start + 50, start + 100));
    assert_eq!(o.read_all().len(), 150);
}

/// RFC 9293 §3.10.7.4: without SACK an old duplicate draws a plain ACK.
#[test]
fn old_duplicate_without_sack_draws_plain_ack() {
    let (mut o, mut p) = est_plain();
    let start = p.seq;
    peer_data(&mut o, &mut p, b"abcdef");
    o.take_all();
    let mut r = p.seg(ACK | PSH, 6);
    r.seq = start;
    o.input(&r, b"abcdef");
    let a = o.pop();
    assert_eq!(a.flags(), ACK);
    assert_eq!(a.ack(), start + 6);
    assert!(a.repr.options.sack_blocks().is_empty());
    assert_eq!(o.read_all(), b"abcdef");
}

// ======================================================================================
// Timestamps and PAWS (RFC 7323 §3, §4.3, §5)
// ======================================================================================

/// RFC 7323 §5.3 R1: a segment whose TSval is older than TS.Recent is dropped and
/// answered with an ACK (echoing TS.Recent).
#[test]
fn paws_drops_older_tsval_with_ack() {
    let (mut o, mut p) = est_full();
    p.tsval = Some(6000);
    peer_data(&mut o, &mut p, b"new");
    let a = o.pop();
    assert_eq!(a.repr.options.timestamps.map(|t| t.1), Some(6000));
    p.tsval = Some(5999);
    o.input(&p.seg(ACK | PSH, 3), b"old");
    let a = o.pop();
    assert!(o.sent.is_empty());
    assert_eq!(a.flags(), ACK);
    assert_eq!(a.ack(), p.seq);
    assert_eq!(a.repr.options.timestamps.map(|t| t.1), Some(6000));
    assert_eq!(o.tcb.stats().paws_drops, 1);
    assert_eq!(o.read_all(), b"new");
}

/// RFC 7323 §5.3 R1 ("and the RST bit is not set"): a RST with an old TSval bypasses PAWS.
#[test]
fn rst_bypasses_paws() {
    let (mut o, mut p) = est_full();
    p.tsval = Some(9000);
    peer_data(&mut o, &mut p, b"x");
    o.take_all();
    p.tsval = Some(10);
    o.input(&rst_at(&p, p.seq), &[]);
    assert!(o.tcb.is_closed());
    assert_eq!(o.tcb.error(), Some(TcpError::Reset));
}

/// RFC 7323 §4.3 (2)-(3): TS.Recent is taken only from a segment with
/// SEG.SEQ =< Last.ACK.sent; an out-of-order segment does not update it, the segment
/// filling the hole does.
#[test]
fn ts_recent_updated_only_by_segment_covering_last_ack_sent() {
    let (mut o, mut p) = est_full();
    // Out of order, newer TSval.
    let mut r = p.seg(ACK, 100);
    r.seq = p.seq + 100;
    r.options.timestamps = Some((7000, p.tsecr));
    o.input(&r, &[1u8; 100]);
    let a = o.pop();
    assert_eq!(a.ack(), p.seq);
    assert_eq!(a.repr.options.timestamps.map(|t| t.1), Some(5000));
    // The hole is filled by a segment with an older (but not PAWS-old) TSval.
    p.tsval = Some(6000);
    peer_data(&mut o, &mut p, &[2u8; 100]);
    let a = o.take_all().pop().expect("ACK");
    assert_eq!(a.ack(), p.seq + 100);
    assert_eq!(a.repr.options.timestamps.map(|t| t.1), Some(6000));
}

/// RFC 5961 §5.2 with RFC 7323 §4.3: a segment dropped for acknowledging data never
/// sent does not move TS.Recent. Otherwise its (possibly forged) large TSval would make
/// PAWS drop every later genuine segment (packetdrill's ts_recent/invalid_ack.pkt).
#[test]
fn ack_above_snd_nxt_does_not_take_ts_recent() {
    let (mut o, mut p) = est_full();
    // A FIN acknowledging 9999 bytes never sent, with a TSval far ahead.
    let mut bad = p.seg(ACK | FIN, 0);
    bad.ack = bad.ack.wrapping_add(9999);
    bad.options.timestamps = Some((200_000, p.tsecr));
    o.input(&bad, &[]);
    let a = o.pop();
    assert_eq!(a.flags(), ACK, "answered with an ACK (RFC 9293 §3.10.7.4)");
    assert_eq!(a.ack(), p.seq, "the FIN was dropped");
    assert_eq!(
        a.repr.options.timestamps.map(|t| t.1),
        Some(5000),
        "TS.Recent unchanged by the dropped segment"
    );
    // The peer's next genuine segment, with its own clock, is accepted.
    p.tsval = Some(5001);
    peer_data(&mut o, &mut p, b"hello");
    let a = o.take_all().pop().expect("ACK");
    assert_eq!(a.ack(), p.seq, "data accepted, not PAWS-dropped");
    assert_eq!(o.tcb.stats().paws_drops, 0);
    assert_eq!(o.read_all(), b"hello");
}

/// RFC 7323 §3.2 allows TSopt on a RST; like Linux, ember's own aborts carry it, TSval
/// from the clock now and TSecr = TS.Recent (packetdrill's ts_recent/reset_tsval.pkt).
#[test]
fn abort_rst_carries_timestamps() {
    let (mut o, mut p) = est_full();
    p.tsval = Some(6000);
    peer_data(&mut o, &mut p, b"unread");
    o.take_all();
    o.advance(Duration::from_secs(1));
    let now = o.now;
    o.tcb.abort(now);
    o.flush();
    let r = o.pop();
    assert!(r.flags().rst());
    let (val, ecr) = r.repr.options.timestamps.expect("TSopt on the RST");
    assert_eq!(ecr, 6000, "TSecr = TS.Recent");
    assert!(val >= 1000, "TSval from the clock one second on: {val}");
}

/// RFC 7323 §3.2: once negotiated, every non-RST segment carries TSopt, TSval from our
/// clock (1 ms ticks) and TSecr = TS.Recent.
#[test]
fn timestamps_on_every_segment() {
    let (mut o, mut p) = est_full();
    o.tcb.set_nodelay(true);
    p.tsval = Some(5555);
    peer_data(&mut o, &mut p, b"hi");
    let a = o.pop();
    assert_eq!(a.repr.options.timestamps, Some((100_000, 5555)));
    o.now += ms(250);
    o.write(b"data");
    let d = o.pop();
    assert_eq!(d.len(), 4);
    assert_eq!(d.repr.options.timestamps, Some((100_250, 5555)));
    o.now += ms(10);
    o.read_all();
    o.tcb.close(o.now);
    o.flush();
    let f = o.pop();
    assert!(f.flags().fin());
    assert_eq!(f.repr.options.timestamps, Some((100_260, 5555)));
}

// ======================================================================================
// TIME-WAIT (RFC 9293 §3.6, §3.10.7.4; RFC 6191)
// ======================================================================================

/// RFC 9293 §3.6 / §3.10.8: TIME-WAIT lasts 2 MSL (`time_wait`), then CLOSED.
#[test]
fn time_wait_lasts_time_wait_then_closed() {
    let (mut o, _p) = to_time_wait(settings(|s| s.time_wait = secs(30)), plain());
    o.tcb.poll_events();
    let t0 = o.now;
    assert_eq!(o.tcb.poll_timeout(), Some(t0 + secs(30)));
    o.advance(secs(30) - ms(1));
    assert_eq!(o.tcb.state(), State::TimeWait);
    o.advance(ms(1));
    assert!(o.tcb.is_closed());
    assert!(o.tcb.poll_events().contains(Events::CLOSED));
    assert!(o.sent.is_empty());
}

/// RFC 9293 §3.10.7.4 TIME-WAIT: a retransmitted FIN is acknowledged and restarts the
/// 2 MSL timeout.
#[test]
fn time_wait_acks_retransmitted_fin_and_restarts_timer() {
    let (mut o, p) = to_time_wait(settings(|s| s.time_wait = secs(30)), plain());
    let t0 = o.now;
    o.advance(secs(20));
    let mut r = p.seg(FIN | ACK, 0);
    r.seq = p.seq - 1;
    o.input(&r, &[]);
    let a = o.pop();
    assert_eq!(a.flags(), ACK);
    assert_eq!(a.ack(), p.seq);
    assert_eq!(o.tcb.poll_timeout(), Some(t0 + secs(50)));
    o.advance(secs(29));
    assert_eq!(o.tcb.state(), State::TimeWait);
    o.advance(secs(1));
    assert!(o.tcb.is_closed());
}

/// RFC 6191 §2 with timestamps: a SYN may reopen a TIME-WAIT connection only if its
/// TSval is newer than TS.Recent; without TSopt in the SYN, its sequence number must be
/// above RCV.NXT.
#[test]
fn time_wait_accepts_syn_with_timestamps() {
    let s = settings(|_| {});
    let (mut o, mut p) = One::established(s, full(), 65535);
    o.tcb.close(o.now);
    o.flush();
    let fin = o.pop();
    p.ack = fin.seq() + 1;
    p.tsval = Some(5100);
    peer_fin(&mut o, &mut p);
    assert_eq!(o.tcb.state(), State::TimeWait);
    let syn = |seq: u32, ts: Option<u32>| TcpRepr {
        flags: SYN,
        seq,
        ack: 0,
        options: opts(Some(1460), None, false, ts),
        ..p.seg(SYN, 0)
    };
    assert!(o.tcb.time_wait_accepts_syn(&syn(p.seq - 1000, Some(5101))));
    assert!(!o.tcb.time_wait_accepts_syn(&syn(p.seq + 1000, Some(5100))));
    assert!(!o.tcb.time_wait_accepts_syn(&syn(p.seq + 1000, Some(5099))));
    assert!(o.tcb.time_wait_accepts_syn(&syn(p.seq + 1, None)));
    assert!(!o.tcb.time_wait_accepts_syn(&syn(p.seq, None)));
    let mut sa = syn(p.seq + 1000, Some(6000));
    sa.flags = SYN | ACK;
    assert!(!o.tcb.time_wait_accepts_syn(&sa));
}

/// RFC 6191 §2 without timestamps (RFC 1122 §4.2.2.13): SEG.SEQ > RCV.NXT.
#[test]
fn time_wait_accepts_syn_by_sequence() {
    let (o, p) = to_time_wait(settings(|_| {}), plain());
    let syn = |seq: u32| TcpRepr {
        seq,
        ..p.seg(SYN, 0)
    };
    assert!(o.tcb.time_wait_accepts_syn(&syn(p.seq + 1)));
    assert!(o.tcb.time_wait_accepts_syn(&syn(p.seq + 1_000_000)));
    assert!(!o.tcb.time_wait_accepts_syn(&syn(p.seq)));
    assert!(!o.tcb.time_wait_accepts_syn(&syn(p.seq - 1)));
    // Not in TIME-WAIT: never.
    let (e, ep) = est_plain();
    assert!(!e.tcb.time_wait_accepts_syn(&syn(ep.seq + 1)));
}

// ======================================================================================
// FIN-WAIT-2 limit, keepalive, R2 and the user timeout (RFC 9293 §3.8.3, §3.8.4)
// ======================================================================================

/// Linux/Solaris `tcp_fin_wait_2_flush_interval`: after close() the connection waits
/// `fin_wait_2` for the peer's FIN, then goes to CLOSED.
#[test]
fn fin_wait_2_after_close_times_out() {
    let (mut o, mut p) = One::established(settings(|s| s.fin_wait_2 = secs(20)), plain(), 65535);
    o.tcb.close(o.now);
    o.flush();
    let fin = o.pop();
    o.advance(ms(50));
    p.ack = fin.seq() + 1;
    o.input(&p.ack_seg(), &[]);
    assert_eq!(o.tcb.state(), State::FinWait2);
    let t1 = o.now;
    assert_eq!(o.tcb.poll_timeout(), Some(t1 + secs(20)));
    o.advance(secs(20) - ms(1));
    assert_eq!(o.tcb.state(), State::FinWait2);
    o.advance(ms(1));
    assert!(o.tcb.is_closed());
    assert!(o.tcb.poll_events().contains(Events::CLOSED));
}

/// RFC 9293 §3.6 half-close: after shutdown(SHUT_WR) (the application still reads)
/// FIN-WAIT-2 is not limited; data from the peer is still received.
#[test]
fn fin_wait_2_after_shutdown_does_not_time_out() {
    let (mut o, mut p) = One::established(settings(|s| s.fin_wait_2 = secs(20)), plain(), 65535);
    o.tcb.shutdown_write(o.now).unwrap();
    o.flush();
    let fin = o.pop();
    p.ack = fin.seq() + 1;
    o.input(&p.ack_seg(), &[]);
    assert_eq!(o.tcb.state(), State::FinWait2);
    o.advance(secs(200));
    assert_eq!(o.tcb.state(), State::FinWait2);
    peer_data(&mut o, &mut p, b"late but fine");
    assert_eq!(o.read_all(), b"late but fine");
}

/// RFC 9293 §3.8.4 MUST-24/MUST-26: keepalives are off by default, and the default idle
/// time is at least two hours.
#[test]
fn keepalive_off_by_default() {
    assert!(settings(|_| {}).keepalive_idle >= secs(7200));
    let (mut o, _p) = est_plain();
    assert_eq!(o.tcb.poll_timeout(), None);
    o.advance(secs(5 * 3600));
    assert!(o.sent.is_empty());
    assert_eq!(o.tcb.state(), State::Established);
}

/// RFC 9293 §3.8.4: with SO_KEEPALIVE the first probe goes after the idle time, then
/// every `keepalive_intvl`; after `keepalive_probes` unanswered the connection is
/// dropped with ETIMEDOUT and, as Linux does, a RST (`<SEQ=SND.NXT><ACK=RCV.NXT>`) tells a
/// peer that is alive after all. The probe is <SEQ=SND.UNA-1><ACK=RCV.NXT><CTL=ACK>, no
/// data.
#[test]
fn keepalive_probes_then_drops() {
    let (mut o, _p) = est_plain();
    o.tcb.set_keepalive_params(secs(60), secs(10), 3);
    o.tcb.set_keepalive(o.now, true);
    let start = o.now;
    let mut times = Vec::new();
    let mut rsts = Vec::new();
    while !o.tcb.is_closed() {
        o.next_timer().expect("keepalive timer");
        for s in o.take_all() {
            assert!(!s.flags().rst() || o.tcb.is_closed());
            if s.flags().rst() {
                rsts.push((s.flags(), s.seq(), s.ack()));
                continue;
            }
            assert_eq!(s.flags(), ACK);
            assert_eq!((s.seq(), s.ack(), s.len()), (CLIENT_ISS, SERVER_ISS + 1, 0));
            times.push(o.now.saturating_duration_since(start));
        }
        assert!(times.len() <= 3);
    }
    assert_eq!(times, vec![secs(60), secs(70), secs(80)]);
    assert_eq!(o.now.saturating_duration_since(start), secs(90));
    assert_eq!(rsts, vec![(RST | ACK, CLIENT_ISS + 1, SERVER_ISS + 1)]);
    assert_eq!(o.tcb.error(), Some(TcpError::TimedOut));
    assert!(o.tcb.poll_events().contains(Events::ERROR | Events::CLOSED));
    assert_eq!(o.tcb.poll_timeout(), None);
}

/// RFC 9293 §3.8.4: an answer to a probe resets the count; probing starts over after a
/// full idle period measured from the answer.
#[test]
fn keepalive_answer_resets() {
    let (mut o, p) = est_plain();
    o.tcb.set_keepalive_params(secs(60), secs(10), 3);
    o.tcb.set_keepalive(o.now, true);
    let start = o.now;
    o.advance(secs(75));
    assert_eq!(o.take_all().len(), 2);
    o.input(&p.ack_seg(), &[]);
    assert!(o.sent.is_empty());
    let mut times = Vec::new();
    while !o.tcb.is_closed() {
        o.next_timer().expect("keepalive timer");
        for s in o.take_all() {
            if !s.flags().rst() {
                times.push(o.now.saturating_duration_since(start));
            }
        }
        assert!(times.len() <= 3);
    }
    assert_eq!(times, vec![secs(135), secs(145), secs(155)]);
    assert_eq!(o.now.saturating_duration_since(start), secs(165));
    assert_eq!(o.tcb.error(), Some(TcpError::TimedOut));
}

/// TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT one at a time, as Linux: unset they are the
/// tunables' (`tcp_keepalive_interval` 7200 s, `tcp_keepalive_intvl` 75 s,
/// `tcp_keepalive_probes` 9); a new idle time on a connection with keepalive on re-arms
/// the timer from the last segment received, firing at once if that is past; the
/// interval and count apply from the next probe on.
#[test]
fn keepalive_options_one_at_a_time() {
    let (mut o, _p) = est_plain();
    assert_eq!(o.tcb.keepalive_params(), (secs(7200), secs(75), 9));
    assert!(!o.tcb.keepalive());
    o.tcb.set_keepalive(o.now, true);
    assert!(o.tcb.keepalive());
    let start = o.now;
    o.advance(secs(100));
    assert!(o.sent.is_empty());
    // 60 s idle, but 100 s have passed since the last segment: a probe now.
    o.tcb.set_keepalive_idle(o.now, secs(60));
    o.tcb.set_keepalive_intvl(secs(5));
    o.tcb.set_keepalive_probes(2);
    assert_eq!(o.tcb.keepalive_params(), (secs(60), secs(5), 2));
    assert_eq!(o.tcb.poll_timeout(), Some(o.now), "re-armed for now");
    let mut times = Vec::new();
    while !o.tcb.is_closed() {
        o.next_timer().expect("keepalive timer");
        for s in o.take_all() {
            if !s.flags().rst() {
                times.push(o.now.saturating_duration_since(start));
            }
        }
        assert!(times.len() <= 2);
    }
    assert_eq!(times, vec![secs(100), secs(105)]);
    assert_eq!(o.now.saturating_duration_since(start), secs(110));
    assert_eq!(o.tcb.error(), Some(TcpError::TimedOut));

    // A longer idle time re-arms from the last segment received, not from now.
    let (mut o, p2) = est_plain();
    o.tcb.set_keepalive(o.now, true);
    let start = o.now;
    o.advance(secs(30));
    o.input(&p2.ack_seg(), &[]);
    o.advance(secs(20));
    o.tcb.set_keepalive_idle(o.now, secs(300));
    assert_eq!(o.tcb.poll_timeout(), Some(start + secs(330)));
    // Without keepalive the idle time is only remembered.
    let (mut o, _p) = est_plain();
    o.tcb.set_keepalive_idle(o.now, secs(1));
    assert_eq!(o.tcb.poll_timeout(), None);
    assert_eq!(o.tcb.keepalive_params().0, secs(1));
}

/// Retransmits `o`'s unacknowledged data until the connection dies; returns the times
/// (since the data was first sent) of each retransmission and of the death.
fn run_until_dead(o: &mut One) -> (Vec<Duration>, Duration) {
    let start = o.now;
    let mut rtx = Vec::new();
    for _ in 0..100 {
        if o.tcb.is_closed() {
            break;
        }
        o.next_timer().expect("retransmission timer");
        for s in o.take_all() {
            if s.len() > 0 {
                assert_eq!(s.seq(), CLIENT_ISS + 1);
                rtx.push(o.now.saturating_duration_since(start));
            }
        }
    }
    assert!(o.tcb.is_closed());
    (rtx, o.now.saturating_duration_since(start))
}

/// RFC 9293 §3.8.3 (MUST-20, R2): unacknowledged data is retransmitted with backoff and
/// the connection is dropped with ETIMEDOUT after `abort_interval`.
#[test]
fn r2_abort_interval_times_out() {
    let (mut o, _p) = One::established(settings(|s| s.abort_interval = secs(5)), plain(), 65535);
    o.tcb.poll_events();
    o.write(b"never acked");
    assert_eq!(o.pop().len(), 11);
    let (rtx, dead) = run_until_dead(&mut o);
    assert!(rtx.len() >= 3);
    for w in rtx.windows(3) {
        // Exponential backoff: each gap doubles.
        assert_eq!((w[2] - w[1]), (w[1] - w[0]) * 2);
    }
    assert!(dead >= secs(5) && dead <= secs(15), "{dead:?}");
    assert_eq!(o.tcb.error(), Some(TcpError::TimedOut));
    assert!(o.tcb.poll_events().contains(Events::ERROR | Events::CLOSED));
}

/// RFC 5482 / RFC 9293 §3.8.3 USER TIMEOUT: `set_user_timeout` replaces R2; the
/// connection dies with ETIMEDOUT long before the default R2 (480 s).
#[test]
fn user_timeout_gives_timed_out() {
    let (mut o, _p) = est_plain();
    o.tcb.set_user_timeout(Some(secs(2)));
    o.write(b"never acked");
    o.pop();
    let (_, dead) = run_until_dead(&mut o);
    assert!(dead >= secs(2) && dead <= secs(5), "{dead:?}");
    assert_eq!(o.tcb.error(), Some(TcpError::TimedOut));
}

/// RFC 5482 §1: the user timeout is "the maximum amount of time that transmitted data
/// may remain unacknowledged". With an RTO of 200 ms, timeouts fire 0.2, 0.6, 1.4, 3.0 s
/// after the data was sent; with a 1.3 s user timeout the timer is clamped to the
/// deadline (as Linux clamps the RTO to the user timeout) and the connection ends at
/// 1.3 s, counted from the first transmission, without a third retransmission.
#[test]
fn user_timeout_counts_from_first_transmission() {
    let (mut o, _p) = est_plain();
    assert_eq!(o.tcb.info().rto, ms(200));
    o.tcb.set_user_timeout(Some(ms(1300)));
    o.write(b"never acked");
    o.pop();
    let (rtx, dead) = run_until_dead(&mut o);
    assert_eq!(rtx, vec![ms(200), ms(600)]);
    assert_eq!(dead, ms(1300));
}

// ======================================================================================
// Urgent data (RFC 9293 §3.8.5, MUST-30/31)
// ======================================================================================

/// RFC 9293 §3.8.5 MUST-31: the urgent pointer is the offset from SEG.SEQ of the octet
/// following the urgent data; URG is set.
#[test]
fn send_urgent_points_after_urgent_data() {
    let (mut o, mut p) = est_plain();
    o.tcb.set_nodelay(true);
    o.tcb.send(o.now, b"hello").unwrap();
    o.tcb.send_urgent(o.now, b"abc").unwrap();
    o.flush();
    let s = o.pop();
    assert_eq!(s.data, b"helloabc");
    assert!(s.flags().urg());
    assert_eq!(s.repr.urgent, 8);
    peer_ack_all(&mut o, &mut p);
    // After the urgent data is acknowledged, ordinary data has no URG.
    o.write(b"plain");
    let s = o.pop();
    assert!(!s.flags().urg());
    assert_eq!(s.repr.urgent, 0);
}

/// RFC 9293 §3.8.5 MUST-30: urgent data of any length; every segment before the mark
/// carries URG with the pointer relative to its own sequence number.
#[test]
fn urgent_pointer_spans_segments() {
    let (mut o, _p) = est_plain();
    o.tcb.set_nodelay(true);
    o.tcb.send_urgent(o.now, &pattern(3000)).unwrap();
    o.flush();
    let segs = o.take_all();
    let v: Vec<_> = segs
        .iter()
        .map(|s| (s.len(), s.flags().urg(), s.repr.urgent))
        .collect();
    assert_eq!(
        v,
        vec![(1460, true, 3000), (1460, true, 1540), (80, true, 80)]
    );
    for s in &segs {
        assert_eq!(s.seq() + u32::from(s.repr.urgent), CLIENT_ISS + 1 + 3000);
    }
}

/// RFC 9293 §3.8.5 / §3.10.7.4 sixth step: received urgent data is announced
/// (Events::URGENT), delivered inline, and `urgent_mark()` reports how many bytes come
/// before the last urgent octet.
#[test]
fn received_urgent_data_is_inline_and_marked() {
    let (mut o, mut p) = est_plain();
    peer_data(&mut o, &mut p, b"0123456789");
    let ev = o.tcb.poll_events();
    assert!(!ev.contains(Events::URGENT));
    assert_eq!(o.tcb.urgent_mark(), None);
    let mut r = p.seg(ACK | PSH | URG, 5);
    r.urgent = 5;
    o.input(&r, b"ABCDE");
    let ev = o.tcb.poll_events();
    assert!(ev.contains(Events::URGENT | Events::READABLE));
    assert_eq!(o.tcb.urgent_mark(), Some(14));
    let mut buf = [0u8; 14];
    assert_eq!(o.tcb.recv(o.now, &mut buf), Ok(14));
    assert_eq!(&buf, b"0123456789ABCD");
    assert_eq!(o.tcb.urgent_mark(), Some(0));
    assert_eq!(o.read_all(), b"E");
    assert_eq!(o.tcb.urgent_mark(), None);
}

// ======================================================================================
// Events and errors
// ======================================================================================

/// RFC 9293 §3.10.7.3: CONNECTED (and WRITABLE) once the handshake completes, not before.
#[test]
fn connected_event_on_handshake() {
    let mut o = One::client(settings(|_| {}));
    assert!(!o.tcb.poll_events().contains(Events::CONNECTED));
    o.input(&synack(plain(), 65535, CLIENT_ISS + 1), &[]);
    let ev = o.tcb.poll_events();
    assert!(ev.contains(Events::CONNECTED | Events::WRITABLE));
    assert!(!ev.contains(Events::ERROR));
    assert!(o.tcb.poll_events().is_empty(), "events are taken once");
}

/// READABLE on data and again on FIN (EOF); recv returns WouldBlock before data.
#[test]
fn readable_on_data_and_fin() {
    let (mut o, mut p) = est_plain();
    o.tcb.poll_events();
    let mut buf = [0u8; 8];
    let e = o.tcb.recv(o.now, &mut buf).unwrap_err();
    assert_eq!(e, TcpError::WouldBlock);
    assert_eq!(io_kind(e), ErrorKind::WouldBlock);
    peer_data(&mut o, &mut p, b"abc");
    assert!(o.tcb.poll_events().contains(Events::READABLE));
    assert_eq!(o.read_all(), b"abc");
    o.tcb.poll_events();
    peer_fin(&mut o, &mut p);
    assert!(o.tcb.poll_events().contains(Events::READABLE));
    assert_eq!(o.tcb.recv(o.now, &mut buf), Ok(0));
}

/// WRITABLE when an ACK frees send-buffer space past the low-water mark; a full buffer
/// gives WouldBlock.
#[test]
fn writable_after_ack_frees_space() {
    let s = settings(|s| {
        s.sndbuf = 8192;
        s.sndlowat = 4096;
    });
    let (mut o, mut p) = One::established(s, plain(), 65535);
    o.tcb.poll_events();
    assert_eq!(o.write(&pattern(10_000)), 8192);
    let e = o.tcb.send(o.now, b"more").unwrap_err();
    assert_eq!(e, TcpError::WouldBlock);
    o.take_all();
    assert!(!o.tcb.poll_events().contains(Events::WRITABLE));
    p.ack = CLIENT_ISS + 1 + 2000;
    o.input(&p.ack_seg(), &[]);
    assert!(!o.tcb.poll_events().contains(Events::WRITABLE));
    p.ack = CLIENT_ISS + 1 + 5000;
    o.input(&p.ack_seg(), &[]);
    assert!(o.tcb.poll_events().contains(Events::WRITABLE));
    assert_eq!(o.tcb.send_space(), 5000);
}

/// Every `TcpError` maps to the `io::ErrorKind` of its errno.
#[test]
fn errors_map_to_io_error_kinds() {
    let table = [
        (TcpError::Refused, ErrorKind::ConnectionRefused),
        (TcpError::Reset, ErrorKind::ConnectionReset),
        (TcpError::TimedOut, ErrorKind::TimedOut),
        (TcpError::Aborted, ErrorKind::ConnectionAborted),
        (TcpError::NotConnected, ErrorKind::NotConnected),
        (TcpError::BrokenPipe, ErrorKind::BrokenPipe),
        (TcpError::WouldBlock, ErrorKind::WouldBlock),
        (TcpError::InvalidInput, ErrorKind::InvalidInput),
    ];
    for (e, k) in table {
        assert_eq!(e.kind(), k);
        assert_eq!(io_kind(e), k);
    }
    // A closed `Tcb` answers reads with NotConnected.
    let mut o = One::client(settings(|_| {}));
    o.tcb.close(o.now);
    let mut buf = [0u8; 4];
    assert_eq!(o.tcb.recv(o.now, &mut buf), Err(TcpError::NotConnected));
    assert_eq!(o.tcb.send(o.now, b"x"), Err(TcpError::NotConnected));
}

// ======================================================================================
// More transitions and edge cases
// ======================================================================================

/// RFC 7323 §2.2 / §3.2, RFC 2018 §2: options in a SYN,ACK that the active opener did not
/// offer are ignored (no scaling, no SACK, no timestamps on later segments).
#[test]
fn unoffered_options_in_synack_are_ignored() {
    let mut o = One::client(settings(|s| {
        s.wscale = 1;
        s.tstamp = 1;
        s.sack = 1;
    }));
    o.pop();
    o.input(&synack(full(), 1000, CLIENT_ISS + 1), &[]);
    assert_eq!(o.tcb.state(), State::Established);
    let a = o.pop();
    assert_eq!(a.repr.options.timestamps, None);
    assert_eq!(a.repr.window, 65535);
    let i = o.tcb.info();
    assert_eq!((i.snd_wscale, i.rcv_wscale), (0, 0));
    assert!(!i.sack && !i.timestamps);
    assert_eq!(o.tcb.mss(), 1460);
    // The peer's later windows are not scaled either.
    let p = Peer {
        port: SERVER.port(),
        our_port: CLIENT.port(),
        seq: SERVER_ISS + 1,
        ack: CLIENT_ISS + 1,
        window: 1000,
        tsval: None,
        tsecr: 0,
    };
    o.input(&p.ack_seg(), &[]);
    assert_eq!(o.tcb.info().snd_wnd, 1000);
}

/// RFC 2018 §2: with SACK disabled (`sack` = 0) the passive side does not answer
/// SACK-permitted.
#[test]
fn passive_open_with_sack_disabled_does_not_permit_sack() {
    let syn = client_syn(full(), 65535);
    let mut o = One::server(settings(|s| s.sack = 0), &syn);
    let sa = o.pop();
    assert!(!sa.repr.options.sack_permitted);
    assert!(sa.repr.options.timestamps.is_some());
    assert!(!o.tcb.info().sack);
}

/// RFC 9293 §3.10.7.4 SYN-RECEIVED fourth check: a new SYN in the window on a passively
/// opened connection returns it to LISTEN (the `Tcb` goes); an out-of-window SYN draws a
/// challenge ACK (RFC 5961 §4.2).
#[test]
fn syn_received_new_syn() {
    let mut o = One::server(settings(|_| {}), &client_syn(plain(), 65535));
    o.pop();
    let mut r = client_syn(plain(), 65535);
    r.seq = CLIENT_ISS + 5_000_000;
    o.input(&r, &[]);
    let a = o.pop();
    assert_eq!(a.flags(), ACK);
    assert_eq!(a.ack(), CLIENT_ISS + 1);
    assert_eq!(o.tcb.state(), State::SynReceived);
    r.seq = CLIENT_ISS + 100;
    o.input(&r, &[]);
    assert!(o.tcb.is_closed());
    assert!(o.sent.is_empty());
}

/// RFC 9293 §3.10.7.4 SYN-RECEIVED second check: on a connection that came from
/// SYN-SENT (simultaneous open) a RST means "connection refused".
#[test]
fn simultaneous_open_rst_in_syn_received_is_refused() {
    let mut o = One::client(settings(|_| {}));
    o.pop();
    let mut syn = synack(plain(), 65535, 0);
    syn.flags = SYN;
    o.input(&syn, &[]);
    assert_eq!(o.tcb.state(), State::SynReceived);
    assert!(o.tcb.is_simultaneous_open());
    let sa = o.pop();
    assert_eq!(sa.flags(), SYN | ACK);
    assert_eq!((sa.seq(), sa.ack()), (CLIENT_ISS, SERVER_ISS + 1));
    let p = Peer {
        port: SERVER.port(),
        our_port: CLIENT.port(),
        seq: SERVER_ISS + 1,
        ack: CLIENT_ISS + 1,
        window: 65535,
        tsval: None,
        tsecr: 0,
    };
    o.input(&rst_at(&p, SERVER_ISS + 1), &[]);
    assert!(o.tcb.is_closed());
    assert_eq!(o.tcb.error(), Some(TcpError::Refused));
    assert!(o.tcb.poll_events().contains(Events::ERROR));
}

/// RFC 9293 §3.10.7.4 fifth check: "if the ACK bit is off, drop the segment".
#[test]
fn segment_without_ack_is_dropped() {
    let (mut o, p) = est_plain();
    o.input(&p.seg(PSH, 4), b"nope");
    assert_eq!(o.tcb.recv_available(), 0);
    assert!(o.sent.is_empty());
    assert_eq!(o.tcb.rcv_nxt().raw(), p.seq);
}

/// RFC 9293 §3.10.7.4 (ESTABLISHED: duplicate SYN,ACK is unacceptable → ACK): when our
/// ACK of the SYN,ACK was lost, the retransmitted SYN,ACK is acknowledged again.
#[test]
fn retransmitted_synack_in_established_is_acked() {
    let mut o = One::client(settings(|_| {}));
    o.pop();
    let sa = synack(plain(), 65535, CLIENT_ISS + 1);
    o.input(&sa, &[]);
    o.take_all();
    o.now += secs(1);
    o.input(&sa, &[]);
    let a = o.pop();
    assert_eq!(a.flags(), ACK);
    assert_eq!((a.seq(), a.ack()), (CLIENT_ISS + 1, SERVER_ISS + 1));
    assert_eq!(o.tcb.state(), State::Established);
}

/// RFC 9293 §3.10.7.4 seventh step, CLOSE-WAIT: text after the peer's FIN "should not
/// occur"; it is ignored (not delivered) and acknowledged.
#[test]
fn text_after_fin_is_ignored_in_close_wait() {
    let (mut o, mut p) = est_plain();
    peer_fin(&mut o, &mut p);
    o.take_all();
    o.input(&p.seg(ACK | PSH, 3), b"bad");
    assert_eq!(o.tcb.recv_available(), 0);
    let a = o.pop();
    assert_eq!(a.ack(), p.seq);
    assert_eq!(o.tcb.state(), State::CloseWait);
}

/// RFC 9293 §3.10.7.4 second check, CLOSING/LAST-ACK/TIME-WAIT: an exact RST enters
/// CLOSED (no error for the application: its side was already closed).
#[test]
fn exact_rst_in_last_ack_and_time_wait_closes() {
    let (mut o, mut p) = est_plain();
    peer_fin(&mut o, &mut p);
    o.tcb.close(o.now);
    o.flush();
    assert_eq!(o.tcb.state(), State::LastAck);
    o.take_all();
    o.input(&rst_at(&p, p.seq), &[]);
    assert!(o.tcb.is_closed());
    assert!(o.sent.is_empty());

    let (mut o, p) = to_time_wait(settings(|_| {}), plain());
    o.input(&rst_at(&p, p.seq + 100), &[]);
    assert_eq!(o.tcb.state(), State::TimeWait, "in-window RST: challenge");
    o.take_all();
    o.input(&rst_at(&p, p.seq), &[]);
    assert!(o.tcb.is_closed());
}

/// RFC 9293 §3.10.4 CLOSE: the FIN follows all queued data; it is sent at once on the
/// last data segment (not held back by Nagle).
#[test]
fn close_sends_fin_after_queued_data() {
    let (mut o, _p) = est_plain();
    o.write(&pattern(5000));
    let sent: u32 = o.take_all().iter().map(|s| s.len() as u32).sum();
    assert!(sent < 5000, "Nagle holds the tail");
    o.tcb.close(o.now);
    o.flush();
    let last = o.take_all().pop().expect("tail with FIN");
    assert!(last.flags().fin());
    assert_eq!(last.seq() + last.len() as u32, CLIENT_ISS + 1 + 5000);
    assert_eq!(o.tcb.snd_nxt().raw(), CLIENT_ISS + 1 + 5001);
    assert_eq!(o.tcb.state(), State::FinWait1);
}

/// RFC 9293 §3.8.1 / RFC 6298 §5.4: an unacknowledged FIN (LAST-ACK) is retransmitted on
/// timeout with the same sequence number.
#[test]
fn fin_retransmitted_in_last_ack() {
    let (mut o, mut p) = est_plain();
    peer_fin(&mut o, &mut p);
    o.tcb.close(o.now);
    o.flush();
    let fin = o.take_all().pop().expect("FIN");
    assert!(fin.flags().fin());
    let d = o.next_timer().expect("RTO");
    assert_eq!(d, ms(200));
    let again = o.pop();
    assert!(again.flags().fin());
    assert_eq!(again.seq(), fin.seq());
    assert_eq!(o.tcb.state(), State::LastAck);
    p.ack = fin.seq() + 1;
    o.input(&p.ack_seg(), &[]);
    assert!(o.tcb.is_closed());
}

/// RFC 9293 §3.8.3 R2 for SYN,ACK: a passive connection whose SYN,ACK is never
/// acknowledged is dropped after `abort_cinterval`.
#[test]
fn syn_received_gives_up_after_abort_cinterval() {
    let s = settings(|s| s.abort_cinterval = secs(5));
    let mut o = One::server(s, &client_syn(plain(), 65535));
    o.pop();
    let start = o.now;
    for _ in 0..20 {
        if o.tcb.is_closed() {
            break;
        }
        o.next_timer();
        for s in o.take_all() {
            assert_eq!(s.flags(), SYN | ACK);
        }
    }
    assert!(o.tcb.is_closed());
    let t = o.now.saturating_duration_since(start);
    assert!(t >= secs(5) && t <= secs(5) + secs(4), "{t:?}");
    assert_eq!(o.tcb.error(), Some(TcpError::TimedOut));
}

// ======================================================================================
// Behaviours that differed from Linux, each found by tests ember's authors
// did not write.
// ======================================================================================

/// A duplicate of the client's SYN and its final ACK (ISS+1) taken in before the
/// connection flushes (one receive batch): the ACK completes the handshake and nothing
/// answers it with a RST. Before, the duplicate SYN rewound SND.NXT to ISS so that output
/// would resend the SYN,ACK, the ACK then failed `SEG.ACK <= SND.NXT` and drew
/// `<SEQ=SEG.ACK><CTL=RST>`, which killed the client, already ESTABLISHED.
#[test]
fn duplicate_syn_and_final_ack_in_one_batch_establish() {
    let syn = client_syn(plain(), 65535);
    let mut o = One::server(settings(|_| {}), &syn);
    let sa = o.pop();
    assert_eq!(sa.flags(), SYN | ACK);
    o.now += ms(10);
    let p = client_peer(65535);
    // Both before any poll_transmit, as a device batch delivers them.
    o.tcb.handle_segment(o.now, &syn, &[]);
    o.tcb.handle_segment(o.now, &p.ack_seg(), &[]);
    o.flush();
    assert_eq!(o.tcb.state(), State::Established);
    for s in o.take_all() {
        assert!(!s.flags().rst(), "RST {:?}", s.repr);
        assert!(
            !s.flags().syn(),
            "no SYN,ACK once established: {:?}",
            s.repr
        );
    }
    assert_eq!(o.tcb.snd_nxt().raw(), SERVER_ISS + 1);
}

/// The retransmission timer resends the SYN,ACK without rewinding SND.NXT either: an ACK
/// of the first SYN,ACK taken in after the timeout but before the flush is still good.
#[test]
fn final_ack_after_synack_timeout_before_its_flush_establishes() {
    let mut o = One::server(settings(|_| {}), &client_syn(plain(), 65535));
    o.pop();
    let t = o.tcb.poll_timeout().expect("SYN,ACK timer");
    o.now = t;
    o.tcb.handle_timeout(o.now);
    o.tcb
        .handle_segment(o.now, &client_peer(65535).ack_seg(), &[]);
    o.flush();
    assert_eq!(o.tcb.state(), State::Established);
    assert!(o
        .take_all()
        .iter()
        .all(|s| !s.flags().rst() && !s.flags().syn()));
    // Likewise for the active side's SYN.
    let mut c = One::client(settings(|_| {}));
    c.pop();
    let t = c.tcb.poll_timeout().expect("SYN timer");
    c.now = t;
    c.tcb.handle_timeout(c.now);
    c.tcb
        .handle_segment(c.now, &synack(plain(), 65535, CLIENT_ISS + 1), &[]);
    c.flush();
    assert_eq!(c.tcb.state(), State::Established);
    assert!(c
        .take_all()
        .iter()
        .all(|s| !s.flags().rst() && !s.flags().syn()));
}

/// Duplicate SYNs in SYN-RECEIVED are answered through the `tcp_invalid_ratelimit`
/// limiter, as Linux's tcp_check_req does: 30 identical SYNs within 50 ms draw one more
/// SYN,ACK (two in all, as Linux sends), the rest are counted
/// (`tcpAckSkippedSynRecv`); once the limiter's 500 ms have passed, the next duplicate is
/// answered again. Before, every copy drew its own SYN,ACK (30 in all).
#[test]
fn a_burst_of_duplicate_syns_draws_one_more_synack() {
    let syn = client_syn(plain(), 65535);
    let mut o = One::server(settings(|_| {}), &syn);
    let mut synacks = o.take_all().len();
    for _ in 1..30 {
        o.now += Duration::from_micros(1700);
        o.input(&syn, &[]);
        synacks += o
            .take_all()
            .iter()
            .filter(|s| s.flags() == SYN | ACK)
            .count();
    }
    assert_eq!(synacks, 2);
    assert_eq!(o.tcb.stats().acks_skipped_syn_recv, 28);
    assert_eq!(o.tcb.state(), State::SynReceived);
    o.now += ms(500);
    o.input(&syn, &[]);
    let s = o.pop();
    assert_eq!(
        (s.flags(), s.seq(), s.ack()),
        (SYN | ACK, SERVER_ISS, CLIENT_ISS + 1)
    );
    // The handshake still completes.
    o.input(&client_peer(65535).ack_seg(), &[]);
    assert_eq!(o.tcb.state(), State::Established);
}

/// A peer without window scaling sees at most 65,535 bytes of window. Reading from a
/// 1 MiB buffer must not draw a "window update" that repeats the 65,535 it has: before,
/// `after_read` compared the free buffer (1 MiB) with the window the peer had and sent
/// `win 65535` again after every read.
#[test]
fn no_window_update_that_the_unscaled_field_cannot_show() {
    let s = settings(|s| {
        s.rcvbuf = 1 << 20;
        s.max_buf = 1 << 20;
    });
    let (mut o, mut p) = One::established(s, plain(), 65535);
    assert_eq!(o.tcb.info().rcv_wscale, 0);
    for _ in 0..20 {
        peer_data(&mut o, &mut p, &pattern(1000));
        o.advance(ms(500));
        let acks = o.take_all();
        assert!(acks.iter().all(|a| a.repr.window == 65535));
        assert_eq!(o.read_all().len(), 1000);
        assert!(
            o.sent.is_empty(),
            "an update that repeats win 65535: {:?}",
            o.sent
        );
    }
    // With a small buffer the update that opens the window still goes out.
    let s = settings(|s| {
        s.rcvbuf = 8192;
        s.max_buf = 8192;
    });
    let (mut o, mut p) = One::established(s, plain(), 65535);
    peer_data(&mut o, &mut p, &pattern(4000));
    peer_data(&mut o, &mut p, &pattern(4000));
    o.advance(ms(500));
    let last = o.take_all().pop().expect("ACK");
    assert!(last.repr.window < 1000, "window {}", last.repr.window);
    o.read_all();
    let up = o.pop();
    assert_eq!(up.flags(), ACK);
    assert!(up.repr.window >= 8000, "window update {}", up.repr.window);
}

/// The error a RST leaves for the application, per state, as Linux's tcp_reset() sets
/// it: this is what SO_ERROR, the next read and the next write report.
fn rst_error_after(setup: impl FnOnce(&mut One, &mut Peer), want: State) -> Option<TcpError> {
    let (mut o, mut p) = est_plain();
    setup(&mut o, &mut p);
    assert_eq!(o.tcb.state(), want);
    o.take_all();
    o.input(&rst_at(&p, p.seq), &[]);
    assert!(o.tcb.is_closed(), "{want:?}: closed");
    assert!(o.sent.is_empty(), "{want:?}: nothing answers a RST");
    o.tcb.error()
}

#[test]
fn rst_in_syn_sent_is_econnrefused() {
    let mut o = One::client(settings(|_| {}));
    o.pop();
    let mut r = synack(plain(), 65535, CLIENT_ISS + 1);
    r.flags = RST | ACK;
    r.seq = 0;
    o.input(&r, &[]);
    assert_eq!(o.tcb.error(), Some(TcpError::Refused));
    assert_eq!(io_kind(TcpError::Refused), ErrorKind::ConnectionRefused);
}

#[test]
fn rst_in_established_is_econnreset() {
    assert_eq!(
        rst_error_after(|_, _| {}, State::Established),
        Some(TcpError::Reset)
    );
}

#[test]
fn rst_in_fin_wait_1_is_econnreset() {
    let e = rst_error_after(
        |o, _| {
            o.tcb.shutdown_write(o.now).unwrap();
            o.flush();
        },
        State::FinWait1,
    );
    assert_eq!(e, Some(TcpError::Reset));
}

#[test]
fn rst_in_fin_wait_2_is_econnreset() {
    let e = rst_error_after(
        |o, p| {
            o.tcb.shutdown_write(o.now).unwrap();
            o.flush();
            peer_ack_all(o, p);
        },
        State::FinWait2,
    );
    assert_eq!(e, Some(TcpError::Reset));
}

/// CLOSE-WAIT: the peer's FIN came first. Linux sets EPIPE: reads still end cleanly
/// (EOF), writes and SO_ERROR say EPIPE. Before, ember said ECONNRESET.
#[test]
fn rst_in_close_wait_is_epipe() {
    let (mut o, mut p) = est_plain();
    peer_fin(&mut o, &mut p);
    assert_eq!(o.tcb.state(), State::CloseWait);
    o.take_all();
    o.input(&rst_at(&p, p.seq), &[]);
    assert!(o.tcb.is_closed());
    assert_eq!(o.tcb.error(), Some(TcpError::BrokenPipe));
    let mut buf = [0u8; 4];
    assert_eq!(o.tcb.recv(o.now, &mut buf), Ok(0), "EOF");
    let e = o.tcb.send(o.now, b"x").unwrap_err();
    assert_eq!(io_kind(e), ErrorKind::BrokenPipe);
    assert_eq!(o.tcb.take_error(), Some(TcpError::BrokenPipe));
}

/// CLOSING (both sides closed at once, our FIN not yet acknowledged): ECONNRESET. Before,
/// SO_ERROR stayed 0.
#[test]
fn rst_in_closing_is_econnreset() {
    let e = rst_error_after(
        |o, p| {
            o.tcb.shutdown_write(o.now).unwrap();
            o.flush();
            // The peer's FIN, not acknowledging ours.
            peer_fin(o, p);
        },
        State::Closing,
    );
    assert_eq!(e, Some(TcpError::Reset));
}

/// LAST-ACK after shutdown(SHUT_WR) and the peer's FIN: ECONNRESET. Before, SO_ERROR
/// stayed 0.
#[test]
fn rst_in_last_ack_is_econnreset() {
    let e = rst_error_after(
        |o, p| {
            peer_fin(o, p);
            o.tcb.shutdown_write(o.now).unwrap();
            o.flush();
        },
        State::LastAck,
    );
    assert_eq!(e, Some(TcpError::Reset));
    assert_eq!(io_kind(TcpError::Reset), ErrorKind::ConnectionReset);
}

/// TIME-WAIT: the exact RST ends the wait (RFC 1337's assassination, as Linux does with
/// `tcp_rfc1337=0`), and there is nobody to tell.
#[test]
fn rst_in_time_wait_closes_without_error() {
    let (mut o, p) = to_time_wait(settings(|_| {}), plain());
    o.input(&rst_at(&p, p.seq), &[]);
    assert!(o.tcb.is_closed());
    assert_eq!(o.tcb.error(), None);
}

/// TIME-WAIT, a segment beside RCV.NXT (`< . 3:3(0) ack 2` with RCV.NXT = 2): Linux
/// answers with an ACK of RCV.NXT (`. 2:2(0) ack 2`) and starts the 2 MSL wait over;
/// pure ACKs are answered at most once per `tcp_invalid_ratelimit` (the rest counted in
/// `tcpAckSkippedTimeWait`). The bare ACK at RCV.NXT is taken silently and also restarts
/// the wait. Before, ember sent nothing and kept its timer.
#[test]
fn time_wait_answers_an_ack_beside_rcv_nxt() {
    let (mut o, p) = to_time_wait(settings(|s| s.time_wait = secs(30)), plain());
    let our_nxt = o.tcb.snd_nxt().raw();
    o.advance(secs(10));
    let mut r = p.ack_seg();
    r.seq = p.seq + 1;
    o.input(&r, &[]);
    let a = o.pop();
    assert_eq!(a.flags(), ACK);
    assert_eq!((a.seq(), a.ack()), (our_nxt, p.seq));
    assert_eq!(o.tcb.poll_timeout(), Some(o.now + secs(30)));
    // Again within the limiter's 500 ms: counted, not answered.
    o.now += ms(100);
    o.input(&r, &[]);
    assert!(o.sent.is_empty());
    assert_eq!(o.tcb.stats().acks_skipped_time_wait, 1);
    // Past it: answered.
    o.now += ms(500);
    o.input(&r, &[]);
    assert_eq!(o.pop().ack(), p.seq);
    // The bare ACK at RCV.NXT: silent, and the wait starts over.
    o.now += secs(5);
    o.input(&p.ack_seg(), &[]);
    assert!(o.sent.is_empty());
    assert_eq!(o.tcb.poll_timeout(), Some(o.now + secs(30)));
    assert_eq!(o.tcb.state(), State::TimeWait);
    o.advance(secs(30));
    assert!(o.tcb.is_closed());
}
