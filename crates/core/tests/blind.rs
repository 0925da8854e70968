//! Blind attacks on an established connection, seen from the attacker's side: an
//! off-path host that knows the 4-tuple (addresses and ports) but not the sequence
//! numbers injects forged RSTs, SYNs, data segments and ICMP errors while a real
//! transfer (1 MiB each way, checked byte for byte) runs between hosts A and B.
//!
//! Design: the two `Host`s of `support/driver.rs` (`Net`) on a virtual wire and a
//! virtual clock; a `Duplex` drives the transfer in 1 ms steps with paced writes (512
//! bytes per step each way, so the transfer lasts about two virtual seconds and the
//! attack is spread over it) and a fixed-seed SplitMix64 (`Rng`) draws the attacker's
//! guesses. Every forged frame is handed to its victim directly; what the victim emits
//! at that instant is its answer to the frame (parsed and counted here: challenge ACKs,
//! RSTs), and goes on the wire to the real peer as it would. Nothing reads a clock;
//! every run is the same.
//!
//! What the tests check (RFC 5961 §3-§5, §7; RFC 5927 §4.1; RFC 1122 §4.2.3.9; RFC
//! 1191): the connection survives, the data arrives byte-exact with none of the
//! attacker's bytes, challenge ACKs are throttled by `tcp_invalid_ratelimit`, the
//! counters (`TcbStats::challenge_acks`, `bad_acks`, `rsts_in`, `estab_resets`; host
//! `tcpChallengeAck`, `tcpEstabResets`, `icmpInFragNeeded`, `icmpInFragNeededBad`) move
//! as they should, and a RST exactly at RCV.NXT does reset (the control that shows the
//! tests can fail). The single-segment cases live in `tcp_states.rs` and `host.rs`; the
//! mixed random flood in `robustness.rs`.

#[path = "support/driver.rs"]
mod driver;
use driver::*;

use ember_core::host::ConnId;
use ember_core::ip::IfaceId;
use ember_core::params::Params;
use ember_core::tcp::{State, Tcb, TcpError};
use ember_core::wire::{
    ethertype, icmp_unreach, ip_proto, Icmpv4Repr, Ipv4Repr, TcpFlags, TcpOptions, TcpRepr,
    ETHERNET_HEADER_LEN, IPV4_HEADER_LEN,
};
use std::net::Ipv4Addr;
use std::time::Duration;

/// Bytes each way.
const MIB: usize = 1 << 20;
/// Bytes each side writes per 1 ms step.
const PACE: usize = 512;
/// Stream offset of B's data in the test pattern (distinct from A's).
const B_DATA: u64 = 0x5000_0000;

/// The attacker's payload: bytes the real stream never contains in such a run (the
/// check is byte-exact anyway).
const JUNK: [u8; 100] = [0xee; 100];

/// Which host a forged frame is handed to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    A,
    B,
}

/// What a host emitted for the connection in answer to one forged frame.
#[derive(Default, Debug, Clone, Copy)]
struct Answer {
    /// Pure ACKs (challenge ACKs, or ACKs of an out-of-window segment).
    acks: u32,
    rsts: u32,
    /// Segments with data or SYN/FIN.
    other: u32,
    /// The last segment's (seq, ack), RSTs aside.
    last_ack: Option<(u32, u32)>,
}

/// A TCP segment inside an Ethernet frame, if it is one.
fn parse_tcp(f: &[u8]) -> Option<(Ipv4Repr, TcpRepr, usize)> {
    if f.len() < ETHERNET_HEADER_LEN + IPV4_HEADER_LEN
        || u16::from_be_bytes([f[12], f[13]]) != ethertype::IPV4
    {
        return None;
    }
    let (ip, payload) = Ipv4Repr::parse(&f[ETHERNET_HEADER_LEN..], false).ok()?;
    if ip.protocol != ip_proto::TCP {
        return None;
    }
    let (t, data) = TcpRepr::parse(payload, ip.src, ip.dst, false).ok()?;
    Some((ip, t, data.len()))
}

/// A 1 MiB-each-way transfer between A and B on the driver's `Net`.
struct Duplex {
    net: Net,
    aid: ConnId,
    bid: ConnId,
    a_tx: Vec<u8>,
    b_tx: Vec<u8>,
    a_off: usize,
    b_off: usize,
    /// What B's application read (A's data) and what A's read (B's data).
    at_b: Vec<u8>,
    at_a: Vec<u8>,
    buf: Vec<u8>,
    steps: u64,
}

impl Duplex {
    fn new(params: Params, bytes: usize) -> Duplex {
        let mut net = Net::new(params);
        let (aid, bid) = net.connect();
        Duplex {
            net,
            aid,
            bid,
            a_tx: pattern(0, bytes),
            b_tx: pattern(B_DATA, bytes),
            a_off: 0,
            b_off: 0,
            at_b: Vec::new(),
            at_a: Vec::new(),
            buf: vec![0u8; 65536],
            steps: 0,
        }
    }

    fn a_port(&self) -> u16 {
        self.tcb(Side::A).local().port()
    }

    fn tcb(&self, s: Side) -> &Tcb {
        match s {
            Side::A => self.net.a.tcb(self.aid).expect("A's connection"),
            Side::B => self.net.b.tcb(self.bid).expect("B's connection"),
        }
    }

    /// One 1 ms step: each side writes up to `PACE` bytes, the network runs, each side
    /// reads what arrived.
    fn step(&mut self) {
        self.step_for(Duration::from_millis(1));
    }

    /// A step of `dt` of virtual time.
    fn step_for(&mut self, dt: Duration) {
        let now = self.net.now;
        if self.a_off < self.a_tx.len() {
            let end = (self.a_off + PACE).min(self.a_tx.len());
            self.a_off += self
                .net
                .a
                .tcp_send(now, self.aid, &self.a_tx[self.a_off..end])
                .unwrap_or(0);
        }
        if self.b_off < self.b_tx.len() {
            let end = (self.b_off + PACE).min(self.b_tx.len());
            self.b_off += self
                .net
                .b
                .tcp_send(now, self.bid, &self.b_tx[self.b_off..end])
                .unwrap_or(0);
        }
        self.net.run_for(dt);
        let got = self.net.read_b(self.bid, &mut self.buf);
        self.at_b.extend(got);
        while let Ok(n) = self.net.a.tcp_recv(self.net.now, self.aid, &mut self.buf) {
            if n == 0 {
                break;
            }
            self.at_a.extend_from_slice(&self.buf[..n]);
        }
        self.steps += 1;
    }

    fn done(&self) -> bool {
        self.at_b.len() >= self.a_tx.len() && self.at_a.len() >= self.b_tx.len()
    }

    /// Runs until both directions are complete (at most `limit` of virtual time).
    fn finish(&mut self, limit: Duration) {
        let end = self.net.now + limit;
        while !self.done() && self.net.now < end {
            self.step();
        }
    }

    /// Both ends established without error, both streams byte-exact.
    fn check_intact(&self, what: &str) {
        for s in [Side::A, Side::B] {
            let t = self.tcb(s);
            assert_eq!(t.state(), State::Established, "{what}: {s:?}'s state");
            assert_eq!(t.error(), None, "{what}: {s:?}'s error");
        }
        assert_eq!(self.at_b.len(), self.a_tx.len(), "{what}: bytes A->B");
        assert!(self.at_b == self.a_tx, "{what}: stream A->B corrupted");
        assert_eq!(self.at_a.len(), self.b_tx.len(), "{what}: bytes B->A");
        assert!(self.at_a == self.b_tx, "{what}: stream B->A corrupted");
    }

    /// Hands a forged frame to `side` and returns what that host sent for the
    /// connection in answer (the frames then go on the wire as usual).
    fn inject(&mut self, side: Side, frame: &[u8]) -> Answer {
        let now = self.net.now;
        let at = now + self.net.delay;
        let mut ans = Answer::default();
        let host = match side {
            Side::A => &mut self.net.a,
            Side::B => &mut self.net.b,
        };
        host.receive(now, IfaceId(0), frame);
        while let Some(f) = host.poll_transmit() {
            if let Some((_, t, len)) = parse_tcp(&f.data) {
                if t.flags.rst() {
                    ans.rsts += 1;
                } else if len == 0 && t.flags == TcpFlags::ACK {
                    ans.acks += 1;
                    ans.last_ack = Some((t.seq, t.ack));
                } else {
                    ans.other += 1;
                    ans.last_ack = Some((t.seq, t.ack));
                }
            }
            self.net.wire.push_back((at, side == Side::B, f.data));
        }
        self.net.pump();
        ans
    }

    /// A segment from the attacker, spoofing the peer of `victim` on the 4-tuple.
    fn forged(&self, victim: Side, r: &TcpRepr, payload: &[u8]) -> Vec<u8> {
        let mut r = *r;
        let a = (A_MAC, A_IP);
        let b = (B_MAC, B_IP);
        match victim {
            Side::B => {
                r.src_port = self.a_port();
                r.dst_port = PORT;
                tcp_frame(a, b, &r, payload)
            }
            Side::A => {
                r.src_port = PORT;
                r.dst_port = self.a_port();
                tcp_frame(b, a, &r, payload)
            }
        }
    }
}

fn seg(seq: u32, ack: u32, flags: TcpFlags) -> TcpRepr {
    TcpRepr {
        src_port: 0,
        dst_port: 0,
        seq,
        ack,
        flags,
        window: 29_200,
        urgent: 0,
        options: TcpOptions::default(),
    }
}

/// The most challenge ACKs one connection may send in `elapsed` (RFC 5961 §7 with
/// ember's per-connection `tcp_invalid_ratelimit`): one at once, then one per interval.
fn rate_bound(elapsed: Duration, limit_ms: u32) -> u64 {
    (elapsed.as_millis() / u128::from(limit_ms)) as u64 + 1
}

/// Figures of one attack run (printed with `--nocapture`, quoted in the doc comments).
#[derive(Default, Debug)]
struct Figures {
    attempts: u64,
    /// Attempts that landed in the victim's receive window (but not on RCV.NXT).
    in_window: u64,
    exact_hits: u64,
    /// Pure ACKs the victim sent in answer to the forged segments.
    answer_acks: u64,
    answer_rsts: u64,
    answer_other: u64,
    /// Resets of the real connection.
    resets: u64,
    bytes_delivered: u64,
    virtual_ms: u64,
}

/// Runs the transfer with `per_step` forged frames every 1 ms step until `total` were
/// sent and the transfer is complete; `forge` builds each frame from the victim's
/// current `Tcb` and tells whether it landed in the window / on RCV.NXT.
fn attack_run(
    d: &mut Duplex,
    victim: Side,
    total: u64,
    per_step: u64,
    mut forge: impl FnMut(&Duplex, &mut Rng) -> (Vec<u8>, bool, bool),
    seed: u64,
) -> Figures {
    let mut rng = Rng(seed);
    let mut f = Figures::default();
    let t0 = d.net.now;
    let end = d.net.now + Duration::from_secs(120);
    while (f.attempts < total || !d.done()) && d.net.now < end {
        for _ in 0..per_step {
            if f.attempts >= total {
                break;
            }
            let (frame, in_window, exact) = forge(d, &mut rng);
            f.attempts += 1;
            f.in_window += u64::from(in_window);
            f.exact_hits += u64::from(exact);
            let ans = d.inject(victim, &frame);
            f.answer_acks += u64::from(ans.acks);
            f.answer_rsts += u64::from(ans.rsts);
            f.answer_other += u64::from(ans.other);
        }
        d.step();
    }
    f.virtual_ms = (d.net.now.saturating_duration_since(t0)).as_millis() as u64;
    f.bytes_delivered = (d.at_a.len() + d.at_b.len()) as u64;
    f.resets = d.net.b.stats().tcp.estab_resets + d.net.a.stats().tcp.estab_resets;
    eprintln!("{victim:?}: {f:?}");
    f
}

/// Is `seq` strictly inside the receive window, i.e. in (RCV.NXT, RCV.NXT + RCV.WND)?
fn in_window_not_nxt(t: &Tcb, seq: u32) -> (bool, bool) {
    let i = t.info();
    let off = seq.wrapping_sub(i.rcv_nxt);
    (off != 0 && off < i.rcv_wnd, off == 0)
}

// ---------------------------------------------------------------------------------------
// RFC 5961 §3: blind RST.
// ---------------------------------------------------------------------------------------

/// RFC 5961 §3.2: 20,000 RSTs with sequence numbers spread over the whole 2^32 space
/// (fixed seed) at B during the 1 MiB-each-way transfer. Out-of-window RSTs are dropped
/// silently (RFC 9293 §3.10.7.4 first check); the few that land in the window draw a
/// challenge ACK (throttled); none is at RCV.NXT with this seed; the connection survives.
///
/// Figures at the time of writing: 20,000 attempts in 2,088 virtual ms, 3 in the
/// window (about 1 MiB of 2^32), 0 exact hits, 2 challenge ACKs sent (the third
/// in-window RST was throttled), 0 RSTs sent, 0 resets, 2 MiB delivered byte-exact.
#[test]
fn rst_spread_over_sequence_space() {
    let mut d = Duplex::new(Params::default(), MIB);
    let ca0 = d.tcb(Side::B).stats().challenge_acks;
    let f = attack_run(
        &mut d,
        Side::B,
        20_000,
        10,
        |d, rng| {
            let seq = rng.u32();
            let (inw, exact) = in_window_not_nxt(d.tcb(Side::B), seq);
            let r = seg(seq, 0, TcpFlags::RST);
            (d.forged(Side::B, &r, &[]), inw, exact)
        },
        0x5961_0001,
    );
    d.check_intact("2^32 RST spray");
    assert_eq!(f.attempts, 20_000);
    assert_eq!(f.exact_hits, 0, "the seed hit RCV.NXT: choose another");
    assert_eq!(f.resets, 0);
    assert_eq!(
        f.answer_rsts + f.answer_other,
        0,
        "B answered a RST with {f:?}"
    );
    // Only RSTs in the window are answered, each by at most one challenge ACK.
    assert!(f.answer_acks <= f.in_window, "{f:?}");
    assert!(
        f.in_window > 0,
        "no RST landed in the window: the run proves little"
    );
    assert!(f.answer_acks > 0, "no challenge ACK: {f:?}");
    let st = d.tcb(Side::B).stats();
    assert_eq!(
        st.challenge_acks - ca0,
        f.answer_acks,
        "tcb counter vs wire"
    );
    assert_eq!(st.rsts_in, 0, "an accepted RST was counted");
    assert_eq!(st.estab_resets, 0);
    let hs = d.net.b.stats().tcp;
    assert_eq!(hs.challenge_acks, st.challenge_acks, "host tcpChallengeAck");
    assert_eq!(hs.estab_resets, 0);
    assert_eq!(f.bytes_delivered, 2 * MIB as u64);
}

/// RFC 5961 §3.2 and §7: 20,000 RSTs inside B's receive window but never at RCV.NXT
/// (an attacker who guessed the window) during the transfer. Every one draws a
/// challenge ACK <SEQ=SND.NXT><ACK=RCV.NXT><CTL=ACK>, throttled to one per
/// `tcp_invalid_ratelimit` (500 ms); no reset; the data arrives byte-exact. Then the
/// control: one RST exactly at RCV.NXT resets B (`rsts_in`, `tcpEstabResets`).
///
/// Figures at the time of writing: 20,000 attempts in 2,088 virtual ms, all in the
/// window, 4 challenge ACKs sent (bound: 2,088 / 500 + 1 = 5), 0 RSTs, 0 resets,
/// 2 MiB delivered byte-exact; the exact-hit RST then resets the connection (1 reset).
#[test]
fn rst_in_window_challenged_and_throttled_exact_hit_resets() {
    let p = Params::default();
    let limit_ms = p.tcp_invalid_ratelimit;
    let mut d = Duplex::new(p, MIB);
    let ca0 = d.tcb(Side::B).stats().challenge_acks;
    let t0 = d.net.now;
    let f = attack_run(
        &mut d,
        Side::B,
        20_000,
        10,
        |d, rng| {
            let i = d.tcb(Side::B).info();
            let seq = i
                .rcv_nxt
                .wrapping_add(1 + rng.below(u64::from(i.rcv_wnd.max(2) - 1)) as u32);
            let r = seg(seq, 0, TcpFlags::RST);
            (d.forged(Side::B, &r, &[]), true, false)
        },
        0x5961_0002,
    );
    let elapsed = d.net.now.saturating_duration_since(t0);
    d.check_intact("in-window RSTs");
    assert_eq!(f.attempts, 20_000);
    assert_eq!(f.resets, 0);
    assert_eq!(f.answer_rsts + f.answer_other, 0, "{f:?}");
    assert!(f.answer_acks >= 2, "challenge ACKs not sent: {f:?}");
    let bound = rate_bound(elapsed, limit_ms);
    assert!(
        f.answer_acks <= bound,
        "challenge ACKs not throttled: {} in {elapsed:?} (bound {bound})",
        f.answer_acks
    );
    let st = *d.tcb(Side::B).stats();
    assert_eq!(
        st.challenge_acks - ca0,
        f.answer_acks,
        "tcb counter vs wire"
    );
    assert_eq!(st.rsts_in, 0);
    assert_eq!(d.net.b.stats().tcp.challenge_acks, st.challenge_acks);

    // The challenge ACK carries B's real SND.NXT and RCV.NXT (RFC 5961 §3.2): let the
    // rate limit expire and look at one.
    d.net
        .run_for(Duration::from_millis(u64::from(limit_ms) + 1));
    let i = d.tcb(Side::B).info();
    let r = seg(i.rcv_nxt.wrapping_add(1), 0, TcpFlags::RST);
    let frame = d.forged(Side::B, &r, &[]);
    let ans = d.inject(Side::B, &frame);
    assert_eq!(ans.acks, 1);
    assert_eq!(
        ans.last_ack,
        Some((i.snd_nxt, i.rcv_nxt)),
        "challenge ACK vs {i:?}"
    );

    // Control: the exact hit resets (so the test above could have failed).
    let rcv_nxt = d.tcb(Side::B).rcv_nxt().raw();
    let r = seg(rcv_nxt, 0, TcpFlags::RST);
    let frame = d.forged(Side::B, &r, &[]);
    let ans = d.inject(Side::B, &frame);
    assert_eq!(
        ans.acks + ans.rsts + ans.other,
        0,
        "a RST is never answered"
    );
    let t = d.tcb(Side::B);
    assert_eq!(t.error(), Some(TcpError::Reset));
    assert_eq!(t.state(), State::Closed);
    assert_eq!(t.stats().rsts_in, 1);
    assert_eq!(d.net.b.stats().tcp.estab_resets, 1);
}

// ---------------------------------------------------------------------------------------
// RFC 5961 §4: blind SYN.
// ---------------------------------------------------------------------------------------

/// RFC 5961 §4.2: SYNs (and SYN,ACKs) with guessed sequence numbers, anywhere in 2^32,
/// on the established 4-tuple, 10,000 at B and 10,000 at A during the transfer. None
/// resets the connection (no RST is sent, nothing is aborted); each is answered by a
/// challenge ACK only, throttled per connection; B's listener does not take any of them
/// as a new connection.
///
/// Figures at the time of writing: 10,000 attempts at each end in 2,088 virtual ms,
/// 4 challenge ACKs from each (bound 5), 0 RSTs, 0 resets, 2 MiB delivered
/// byte-exact.
#[test]
fn syn_with_guessed_sequence_numbers() {
    let p = Params::default();
    let limit_ms = p.tcp_invalid_ratelimit;
    let mut d = Duplex::new(p, MIB);
    let ca0 = [Side::A, Side::B].map(|s| d.tcb(s).stats().challenge_acks);
    let opens0 = d.net.b.stats().tcp.passive_opens;
    let t0 = d.net.now;
    let mut rng = Rng(0x5961_0004);
    let mut f = [Figures::default(), Figures::default()];
    while (f[0].attempts < 10_000 || !d.done()) && d.net.now < t0 + Duration::from_secs(120) {
        for k in 0..10 {
            if f[0].attempts >= 10_000 {
                break;
            }
            let (victim, fi) = if k % 2 == 0 {
                (Side::B, 1)
            } else {
                (Side::A, 0)
            };
            let flags = if rng.below(2) == 0 {
                TcpFlags::SYN
            } else {
                TcpFlags::SYN | TcpFlags::ACK
            };
            let mut r = seg(rng.u32(), rng.u32(), flags);
            r.options = opts(Some(1460), Some(7), true, None);
            let frame = d.forged(victim, &r, &[]);
            let ans = d.inject(victim, &frame);
            f[fi].attempts += 1;
            f[fi].answer_acks += u64::from(ans.acks);
            f[fi].answer_rsts += u64::from(ans.rsts);
            f[fi].answer_other += u64::from(ans.other);
        }
        d.step();
    }
    let elapsed = d.net.now.saturating_duration_since(t0);
    eprintln!("SYN: A {:?} B {:?} in {elapsed:?}", f[0], f[1]);
    d.check_intact("blind SYNs");
    let bound = rate_bound(elapsed, limit_ms);
    for (i, s) in [Side::A, Side::B].into_iter().enumerate() {
        let fi = &f[i];
        assert_eq!(fi.attempts, 10_000, "{s:?}");
        assert_eq!(fi.answer_rsts + fi.answer_other, 0, "{s:?} answered {fi:?}");
        assert!(fi.answer_acks >= 2, "{s:?}: no challenge ACKs: {fi:?}");
        assert!(
            fi.answer_acks <= bound,
            "{s:?}: not throttled: {fi:?} bound {bound}"
        );
        let st = d.tcb(s).stats();
        assert_eq!(
            st.challenge_acks - ca0[i],
            fi.answer_acks,
            "{s:?} counter vs wire"
        );
        assert_eq!(st.rsts_in + st.estab_resets, 0, "{s:?}");
    }
    let hs = d.net.b.stats().tcp;
    assert_eq!(hs.estab_resets + d.net.a.stats().tcp.estab_resets, 0);
    assert_eq!(hs.passive_opens, opens0, "a forged SYN opened a connection");
    assert!(d.net.b.tcp_accept(d.net.listener).is_err(), "accept queue");
}

// ---------------------------------------------------------------------------------------
// RFC 5961 §5: blind data injection.
// ---------------------------------------------------------------------------------------

/// RFC 5961 §5.2: 20,000 data segments (100 bytes of 0xEE, ACK|PSH) at B with the
/// sequence number in B's receive window (an attacker who guessed it) and the ACK
/// number outside SND.UNA - MAX.SND.WND ..= SND.NXT; one in eight has no ACK bit at all.
/// Each is dropped: RCV.NXT and the out-of-order queue do not move, `bad_acks` counts
/// every segment with an ACK, challenge ACKs are throttled, and the application reads
/// exactly A's stream.
///
/// Figures at the time of writing: 20,000 attempts in 2,088 virtual ms, 17,482 with an
/// unacceptable ACK (all counted in `bad_acks`), 4 challenge ACKs (bound 5), 0 RSTs,
/// 0 resets, 0 attacker bytes taken, 2 MiB delivered byte-exact.
#[test]
fn data_in_window_with_unacceptable_ack_is_dropped() {
    let p = Params::default();
    let limit_ms = p.tcp_invalid_ratelimit;
    let mut d = Duplex::new(p, MIB);
    let st0 = *d.tcb(Side::B).stats();
    let t0 = d.net.now;
    let mut rng = Rng(0x5961_0005);
    let mut f = Figures::default();
    let mut with_ack = 0u64;
    let mut moved = 0u64;
    while (f.attempts < 20_000 || !d.done()) && d.net.now < t0 + Duration::from_secs(120) {
        for _ in 0..10 {
            if f.attempts >= 20_000 {
                break;
            }
            let i = d.tcb(Side::B).info();
            let seq = i
                .rcv_nxt
                .wrapping_add(rng.below(u64::from(i.rcv_wnd.saturating_sub(100).max(1))) as u32);
            // MAX.SND.WND is at most 65535 << SND.WSCALE: keep clear of the whole
            // acceptable range, above SND.NXT or below SND.UNA - that.
            let max_wnd = 65_535u64 << i.snd_wscale;
            let ack = if rng.below(2) == 0 {
                i.snd_nxt.wrapping_add(1 + rng.below((1 << 31) - 1) as u32)
            } else {
                let room = (1u64 << 31) - max_wnd - 2;
                i.snd_una
                    .wrapping_sub(max_wnd as u32 + 1 + rng.below(room) as u32)
            };
            let ack_bit = rng.below(8) != 0;
            let flags = if ack_bit {
                TcpFlags::ACK | TcpFlags::PSH
            } else {
                TcpFlags::PSH
            };
            let r = seg(seq, ack, flags);
            let frame = d.forged(Side::B, &r, &JUNK);
            let ans = d.inject(Side::B, &frame);
            let j = d.tcb(Side::B).info();
            if (j.rcv_nxt, j.ooo_bytes, j.recv_queued) != (i.rcv_nxt, i.ooo_bytes, i.recv_queued) {
                moved += 1;
            }
            f.attempts += 1;
            with_ack += u64::from(ack_bit);
            f.answer_acks += u64::from(ans.acks);
            f.answer_rsts += u64::from(ans.rsts);
            f.answer_other += u64::from(ans.other);
        }
        d.step();
    }
    let elapsed = d.net.now.saturating_duration_since(t0);
    f.bytes_delivered = (d.at_a.len() + d.at_b.len()) as u64;
    eprintln!("data: {f:?}, with ACK {with_ack}, in {elapsed:?}");
    d.check_intact("in-window data, bad ACK");
    assert_eq!(moved, 0, "forged data changed B's receive side");
    assert_eq!(f.answer_rsts + f.answer_other, 0, "{f:?}");
    let st = d.tcb(Side::B).stats();
    assert_eq!(st.bad_acks - st0.bad_acks, with_ack, "bad_acks");
    assert_eq!(st.challenge_acks - st0.challenge_acks, f.answer_acks);
    assert!(f.answer_acks >= 2, "{f:?}");
    assert!(f.answer_acks <= rate_bound(elapsed, limit_ms), "{f:?}");
    assert_eq!(st.estab_resets, 0);
    assert!(
        !d.at_b.windows(8).any(|w| w == [0xee; 8]),
        "attacker bytes read"
    );
}

/// RFC 5961 §5 and RFC 9293 §3.10.7.4: 20,000 data segments at B with both numbers
/// guessed over the whole 2^32 space. Those outside the window are each answered by one
/// duplicate ACK (segments with data are not throttled, RFC 5961 §7 leaves them to
/// RFC 9293, as Linux does); those inside it with an unacceptable ACK draw throttled
/// challenge ACKs; none is taken, the streams stay byte-exact.
///
/// Figures at the time of writing: 20,000 attempts in 2,050 virtual ms; 19,992 out of
/// the window, each answered by one ACK (one of them riding on a data segment B had
/// ready); 8 in the window, answered by 3 (throttled) challenge ACKs; 0 RSTs, 0
/// resets, 2 MiB delivered byte-exact.
#[test]
fn data_with_guessed_numbers_is_not_taken() {
    let mut d = Duplex::new(Params::default(), MIB);
    let mut oow_answers = 0u64;
    let mut oow = 0u64;
    let mut iw_answers = 0u64;
    let mut rng = Rng(0x5961_0006);
    let t0 = d.net.now;
    let mut f = Figures::default();
    while (f.attempts < 20_000 || !d.done()) && d.net.now < t0 + Duration::from_secs(120) {
        for _ in 0..10 {
            if f.attempts >= 20_000 {
                break;
            }
            let i = d.tcb(Side::B).info();
            let seq = rng.u32();
            let r = seg(seq, rng.u32(), TcpFlags::ACK | TcpFlags::PSH);
            // In the window if any of its octets is (RFC 9293 §3.10.7.4).
            let first = seq.wrapping_sub(i.rcv_nxt);
            let last = seq
                .wrapping_add(JUNK.len() as u32 - 1)
                .wrapping_sub(i.rcv_nxt);
            let inw = first < i.rcv_wnd || last < i.rcv_wnd;
            let frame = d.forged(Side::B, &r, &JUNK);
            let ans = d.inject(Side::B, &frame);
            f.attempts += 1;
            f.in_window += u64::from(inw);
            if !inw {
                // The ACK may ride on a data segment B had ready to go.
                oow += 1;
                oow_answers += u64::from(ans.acks + ans.other > 0);
                assert_eq!(
                    ans.last_ack.map(|a| a.1),
                    Some(i.rcv_nxt),
                    "dup ACK of RCV.NXT"
                );
            } else {
                iw_answers += u64::from(ans.acks + ans.other);
            }
            f.answer_acks += u64::from(ans.acks);
            f.answer_rsts += u64::from(ans.rsts);
            f.answer_other += u64::from(ans.other);
            assert!(ans.acks <= 1, "{ans:?}");
        }
        d.step();
    }
    let elapsed = d.net.now.saturating_duration_since(t0);
    eprintln!(
        "guessed data: {f:?}, out of window {oow} answered {oow_answers}, \
         in the window answered {iw_answers}, in {elapsed:?}"
    );
    d.check_intact("guessed data");
    assert_eq!(f.answer_rsts, 0, "{f:?}");
    assert_eq!(
        oow_answers, oow,
        "one duplicate ACK per out-of-window data segment"
    );
    let limit_ms = Params::default().tcp_invalid_ratelimit;
    assert!(
        iw_answers <= rate_bound(elapsed, limit_ms),
        "challenge ACKs not throttled: {iw_answers}"
    );
    assert_eq!(d.tcb(Side::B).stats().estab_resets, 0);
}

// ---------------------------------------------------------------------------------------
// RFC 5927: ICMP errors about the connection.
// ---------------------------------------------------------------------------------------

/// An ICMP destination unreachable from `from` to A quoting A's segment to B on the
/// connection, with sequence number `seq`.
fn icmp_to_a(d: &Duplex, from: Ipv4Addr, code: u8, mtu: u16, seq: u32) -> Vec<u8> {
    icmp_quoting(d, from, code, mtu, seq, B_IP)
}

fn icmp_quoting(
    d: &Duplex,
    from: Ipv4Addr,
    code: u8,
    mtu: u16,
    seq: u32,
    quoted_dst: Ipv4Addr,
) -> Vec<u8> {
    let r = TcpRepr {
        src_port: d.a_port(),
        dst_port: PORT,
        ..seg(seq, 0, TcpFlags::ACK)
    };
    // The quote: the IP header and the first 8 octets of the TCP header (RFC 792).
    let t = tcp_bytes(A_IP, quoted_dst, &r, &[0u8; 1000]);
    let q = ipv4(A_IP, quoted_dst, ip_proto::TCP, &t);
    let quote = &q[..IPV4_HEADER_LEN + 8];
    let m = icmp_bytes(&Icmpv4Repr::DestUnreachable {
        code,
        next_hop_mtu: if code == icmp_unreach::FRAG_NEEDED {
            mtu
        } else {
            0
        },
        original: quote,
    });
    eth(
        A_MAC,
        B_MAC,
        ethertype::IPV4,
        &ipv4(from, A_IP, ip_proto::ICMP, &m),
    )
}

/// A sequence number A has in flight (SND.UNA <= seq < SND.NXT), stepping the transfer
/// until there is one.
fn in_flight_seq(d: &mut Duplex) -> u32 {
    for _ in 0..1000 {
        let i = d.tcb(Side::A).info();
        if i.snd_nxt != i.snd_una {
            return i.snd_una;
        }
        d.step();
    }
    panic!("A never had data in flight");
}

/// RFC 5927 §4.1: 20,000 ICMP destination unreachables (codes 0-4 and 13; "fragmentation
/// needed" with a next-hop MTU drawn from 0-1499) quoting A's 4-tuple with sequence
/// numbers outside SND.UNA..SND.NXT, from B's address, during the transfer. All are
/// ignored: no MTU or MSS change, no abort, every "fragmentation needed" counted in
/// `icmpInFragNeededBad`, none in `icmpInFragNeeded`; the data arrives byte-exact.
///
/// Figures at the time of writing: 20,000 attempts, 3,236 of them "fragmentation
/// needed", 0 taken; 0 resets; 2 MiB delivered byte-exact.
#[test]
fn icmp_errors_quoting_sequence_outside_flight_are_ignored() {
    let mut d = Duplex::new(Params::default(), MIB);
    let pmtu0 = d.tcb(Side::A).info().pmtu;
    let mss0 = d.tcb(Side::A).mss();
    let icmp0 = d.net.a.stats().icmp;
    let codes = [0u8, 1, 2, 3, icmp_unreach::FRAG_NEEDED, 13];
    let mut rng = Rng(0x5927_0001);
    let mut frag = 0u64;
    let mut n = 0u64;
    let t0 = d.net.now;
    while (n < 20_000 || !d.done()) && d.net.now < t0 + Duration::from_secs(120) {
        for _ in 0..10 {
            if n >= 20_000 {
                break;
            }
            let i = d.tcb(Side::A).info();
            let flight = i.snd_nxt.wrapping_sub(i.snd_una);
            let seq = loop {
                let s = rng.u32();
                if s.wrapping_sub(i.snd_una) >= flight {
                    break s;
                }
            };
            let code = codes[rng.below(codes.len() as u64) as usize];
            frag += u64::from(code == icmp_unreach::FRAG_NEEDED);
            let f = icmp_to_a(&d, B_IP, code, rng.below(1500) as u16, seq);
            let ans = d.inject(Side::A, &f);
            assert_eq!(ans.rsts, 0);
            n += 1;
        }
        d.step();
        let t = d.tcb(Side::A);
        assert_eq!((t.info().pmtu, t.mss()), (pmtu0, mss0), "forged ICMP taken");
    }
    eprintln!("ICMP outside flight: {n} attempts, {frag} frag-needed");
    d.check_intact("forged ICMP");
    let s = d.net.a.stats().icmp;
    assert_eq!(s.in_dest_unreachs - icmp0.in_dest_unreachs, n);
    assert_eq!(s.pmtu_rejected - icmp0.pmtu_rejected, frag);
    assert_eq!(s.pmtu_updates, icmp0.pmtu_updates);
    assert_eq!(d.net.a.stats().tcp.estab_resets, 0);
}

/// RFC 1191 §3-4 with RFC 5927 §4.1 (valid quotes): "fragmentation needed" announcing
/// an absurd MTU. Below 68 (0, 1, 67) is rejected and counted; above the current path
/// MTU (1501, 9000, 65535) changes nothing (only decreases are taken); 68 is taken but
/// the MSS is clamped at `tcp_mss_min` (before the option bytes every segment carries,
/// RFC 6691), checked with the default (108) and with 536. The transfer then completes
/// byte-exact at that MSS, no segment larger than it.
#[test]
fn frag_needed_with_absurd_mtu_never_goes_below_mss_min() {
    for mss_min in [None, Some(536u32)] {
        let mut p = Params::default();
        if let Some(m) = mss_min {
            p.tcp_mss_min = m;
        }
        let floor = p.tcp_mss_min;
        let mut d = Duplex::new(p, 256 * 1024);
        for _ in 0..20 {
            d.step();
        }
        let pmtu0 = d.tcb(Side::A).info().pmtu;
        let mss0 = d.tcb(Side::A).mss();
        let opt_bytes = if d.tcb(Side::A).info().timestamps {
            12
        } else {
            0
        };
        let s0 = d.net.a.stats().icmp;
        for mtu in [0u16, 1, 67] {
            let seq = in_flight_seq(&mut d);
            let f = icmp_to_a(&d, B_IP, icmp_unreach::FRAG_NEEDED, mtu, seq);
            d.inject(Side::A, &f);
            assert_eq!(d.tcb(Side::A).info().pmtu, pmtu0, "MTU {mtu} taken");
        }
        for mtu in [pmtu0 as u16 + 1, 9000, 65535] {
            let seq = in_flight_seq(&mut d);
            let f = icmp_to_a(&d, B_IP, icmp_unreach::FRAG_NEEDED, mtu, seq);
            d.inject(Side::A, &f);
            let t = d.tcb(Side::A);
            assert_eq!(
                (t.info().pmtu, t.mss()),
                (pmtu0, mss0),
                "MTU {mtu} raised it"
            );
        }
        let s1 = d.net.a.stats().icmp;
        assert_eq!(s1.pmtu_rejected - s0.pmtu_rejected, 3);
        let seq = in_flight_seq(&mut d);
        let f = icmp_to_a(&d, B_IP, icmp_unreach::FRAG_NEEDED, 68, seq);
        // Frames already on the wire were sent before the ICMP arrived.
        let before = d.net.wire.len();
        let sent_after = d.net.now + d.net.delay;
        d.inject(Side::A, &f);
        let len_to_b = |w: &(ember_core::time::Instant, bool, Vec<u8>)| {
            if w.1 {
                parse_tcp(&w.2).map_or(0, |(_, _, len)| len)
            } else {
                0
            }
        };
        let mut biggest = d
            .net
            .wire
            .iter()
            .skip(before)
            .map(len_to_b)
            .max()
            .unwrap_or(0);
        let t = d.tcb(Side::A);
        assert_eq!(t.info().pmtu, 68);
        assert_eq!(
            t.mss() + opt_bytes,
            floor,
            "MSS after MTU 68 with tcp_mss_min {floor}"
        );
        let mss = t.mss();
        // The rest of the transfer goes at that MSS and arrives intact. Steps of half
        // the wire's delay: every frame is still on the wire after one of them.
        let end = d.net.now + Duration::from_secs(300);
        while !d.done() && d.net.now < end {
            d.step_for(d.net.delay / 2);
            let later = d.net.wire.iter().filter(|w| w.0 > sent_after);
            biggest = biggest.max(later.map(len_to_b).max().unwrap_or(0));
        }
        eprintln!("mss_min {floor}: mss {mss}, biggest segment A->B {biggest}");
        d.check_intact("tiny path MTU");
        assert!(
            biggest <= mss as usize && biggest > 0,
            "segment of {biggest} > {mss}"
        );
        assert_eq!(d.tcb(Side::A).mss(), mss);
    }
}

/// RFC 1122 §4.2.3.9, RFC 9293 §3.9 (MUST-56) and RFC 5927 §4.1: destination
/// unreachables with valid quotes for an established connection are soft errors:
/// protocol and port unreachable (which abort a connection still opening, `host.rs`)
/// and net, host and administratively prohibited alike, 100 of each during the
/// transfer: nothing is aborted, the transfer completes byte-exact, no error is reported.
#[test]
fn unreachable_with_valid_quote_is_soft_for_established() {
    let mut d = Duplex::new(Params::default(), MIB);
    let codes = [
        icmp_unreach::PROTOCOL,
        icmp_unreach::PORT,
        icmp_unreach::NET,
        icmp_unreach::HOST,
        icmp_unreach::ADMIN_PROHIBITED,
    ];
    let mut sent = 0;
    for round in 0..100 {
        for code in codes {
            let seq = in_flight_seq(&mut d);
            let f = icmp_to_a(&d, B_IP, code, 0, seq);
            let ans = d.inject(Side::A, &f);
            assert_eq!(ans.rsts, 0);
            assert_eq!(d.tcb(Side::A).error(), None, "code {code} round {round}");
            sent += 1;
        }
        d.step();
    }
    d.finish(Duration::from_secs(120));
    d.check_intact("unreachables");
    assert_eq!(sent, 500);
    assert_eq!(d.net.a.stats().tcp.estab_resets, 0);
}

/// RFC 5927 §4.1 and §5.1: the ICMP's own source address is not checked (any router on
/// the path may send one; ember, like Linux, does not know the path's routers), so a
/// "fragmentation needed" from a third party C on the segment with a valid quote is
/// taken. What protects the connection is the quote: the same message with a sequence
/// number outside the flight, or quoting another destination (not B: no connection has
/// that 4-tuple), or quoting a source that is not A's address, changes nothing.
#[test]
fn icmp_from_third_party_is_judged_by_its_quote() {
    let mut d = Duplex::new(Params::default(), MIB);
    for _ in 0..20 {
        d.step();
    }
    let pmtu0 = d.tcb(Side::A).info().pmtu;
    let seq = in_flight_seq(&mut d);
    let una = d.tcb(Side::A).info().snd_una;
    // Invalid quotes from C: outside the flight, another destination, another source.
    let f = icmp_to_a(
        &d,
        C_IP,
        icmp_unreach::FRAG_NEEDED,
        1000,
        una.wrapping_sub(1),
    );
    d.inject(Side::A, &f);
    let f = icmp_quoting(&d, C_IP, icmp_unreach::FRAG_NEEDED, 1000, seq, C_IP);
    d.inject(Side::A, &f);
    let mut f = icmp_to_a(&d, C_IP, icmp_unreach::FRAG_NEEDED, 1000, seq);
    // The quoted IP source (inside the ICMP body) becomes C, checksums fixed.
    let q_src = ETHERNET_HEADER_LEN + IPV4_HEADER_LEN + 8 + 12;
    f[q_src..q_src + 4].copy_from_slice(&C_IP.octets());
    let q_ip = ETHERNET_HEADER_LEN + IPV4_HEADER_LEN + 8;
    f[q_ip + 10] = 0;
    f[q_ip + 11] = 0;
    let c = ember_core::wire::checksum::checksum(&f[q_ip..q_ip + IPV4_HEADER_LEN]);
    f[q_ip + 10..q_ip + 12].copy_from_slice(&c.to_be_bytes());
    fix_checksums(&mut f);
    d.inject(Side::A, &f);
    assert_eq!(
        d.tcb(Side::A).info().pmtu,
        pmtu0,
        "an invalid quote was taken"
    );
    // Port unreachable from C with a valid quote: soft (no abort).
    let f = icmp_to_a(&d, C_IP, icmp_unreach::PORT, 0, seq);
    d.inject(Side::A, &f);
    assert_eq!(d.tcb(Side::A).error(), None);
    // A valid quote from C is believed.
    let seq = in_flight_seq(&mut d);
    let f = icmp_to_a(&d, C_IP, icmp_unreach::FRAG_NEEDED, 1000, seq);
    d.inject(Side::A, &f);
    assert_eq!(d.tcb(Side::A).info().pmtu, 1000, "a valid quote from C");
    d.finish(Duration::from_secs(120));
    d.check_intact("ICMP from a third party");
}
