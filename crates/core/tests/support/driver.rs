//! Driver code shared by the robustness property tests (`tests/robustness.rs`) and the
//! cargo-fuzz targets (`fuzz/`, whose `src/lib.rs` includes this file with `#[path]`):
//! two hosts on a virtual Ethernet, frame helpers, and a driver that plays the peer of one
//! `Tcb` and checks its invariants after every step.
//!
//! Plain Rust on `ember_core` and `std` only. How inputs are generated stays with each
//! user: the proptest strategies in `robustness.rs`, the `arbitrary` input types (and the
//! way they are clamped into the ranges below) in `fuzz/src/lib.rs`.
//!
//! Everything here is deterministic: time is virtual, secrets are fixed.

// Each of the two crates that include this file uses a different part of it.
#![allow(dead_code)]

use ember_core::host::{ConnId, Host, Interface, ListenerId};
use ember_core::ip::IfaceId;
use ember_core::params::Params;
use ember_core::tcp::cc::CcAlgorithm;
use ember_core::tcp::tcb::ConnSpec;
use ember_core::tcp::{SeqNum, State, Tcb, TcpSettings};
use ember_core::time::Instant;
use ember_core::wire::{
    checksum, ethertype, ip_proto, EthernetRepr, Icmpv4Repr, Ipv4Repr, MacAddr, SackBlock,
    TcpFlags, TcpOptions, TcpRepr, ETHERNET_HEADER_LEN, IPV4_HEADER_LEN,
};
use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

// ---------------------------------------------------------------------------------------
// Addresses and test data.
// ---------------------------------------------------------------------------------------

pub const A_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
pub const B_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// A third party on the segment (never a real host: its frames are only injected).
pub const C_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 77);
pub const A_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);
pub const B_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x02]);
pub const C_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x4d]);
pub const PORT: u16 = 80;
pub const UDP_PORT: u16 = 7;

/// The two ends of the single-`Tcb` driver (`Drv`).
pub const CLIENT: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 1), 40000);
pub const SERVER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 2), 80);

/// Deterministic test data: the byte at stream offset `i`.
pub fn pat(i: u64) -> u8 {
    (i.wrapping_mul(7) ^ (i >> 9).wrapping_mul(13)) as u8
}

/// `n` bytes of test data starting at stream offset `from`.
pub fn pattern(from: u64, n: usize) -> Vec<u8> {
    (0..n as u64).map(|i| pat(from + i)).collect()
}

// ---------------------------------------------------------------------------------------
// Two hosts on one Ethernet segment, driven on a virtual clock.
// ---------------------------------------------------------------------------------------

/// Host A and host B (B listens on `PORT` and has a UDP socket on `UDP_PORT`) on one
/// Ethernet segment with a fixed one-way delay.
pub struct Net {
    pub a: Host,
    pub b: Host,
    pub now: Instant,
    pub delay: Duration,
    /// (arrival, towards b, frame)
    pub wire: VecDeque<(Instant, bool, Vec<u8>)>,
    pub listener: ListenerId,
    /// Frames that went over the wire, for reports.
    pub frames: u64,
}

fn iface(mac: MacAddr, addr: Ipv4Addr) -> Interface {
    Interface {
        mac,
        addr,
        prefix_len: 24,
        mtu: 1500,
    }
}

impl Net {
    pub fn new(params: Params) -> Net {
        let mut a = Host::new(params.clone(), [1; 16]);
        let mut b = Host::new(params, [2; 16]);
        a.add_interface(iface(A_MAC, A_IP)).expect("iface a");
        b.add_interface(iface(B_MAC, B_IP)).expect("iface b");
        let listener = b
            .tcp_listen(SocketAddrV4::new(B_IP, PORT), 64)
            .expect("listen");
        b.udp_bind(SocketAddrV4::new(B_IP, UDP_PORT)).expect("udp");
        Net {
            a,
            b,
            now: Instant::from_secs(1000),
            delay: Duration::from_millis(1),
            wire: VecDeque::new(),
            listener,
            frames: 0,
        }
    }

    /// Moves everything the hosts want to send onto the wire.
    pub fn pump(&mut self) {
        let at = self.now + self.delay;
        while let Some(f) = self.a.poll_transmit() {
            self.wire.push_back((at, true, f.data));
        }
        while let Some(f) = self.b.poll_transmit() {
            self.wire.push_back((at, false, f.data));
        }
        // Nobody reads readiness events here; keep the queues short.
        while self.a.poll_event().is_some() {}
        while self.b.poll_event().is_some() {}
    }

    /// Runs the network for `d` of virtual time. Panics if the hosts keep asking to run
    /// at the same instant (a livelock).
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        let mut same_instant = 0u32;
        loop {
            self.pump();
            let next = [
                self.wire.front().map(|w| w.0),
                self.a.poll_timeout(),
                self.b.poll_timeout(),
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(next) = next else { break };
            if next > end {
                break;
            }
            if next <= self.now {
                same_instant += 1;
                assert!(same_instant < 100_000, "hosts livelock at {:?}", self.now);
            } else {
                same_instant = 0;
            }
            self.now = self.now.max(next);
            while self.wire.front().is_some_and(|w| w.0 <= self.now) {
                let (_, to_b, f) = self.wire.pop_front().expect("checked");
                self.frames += 1;
                if to_b {
                    self.b.receive(self.now, IfaceId(0), &f);
                } else {
                    self.a.receive(self.now, IfaceId(0), &f);
                }
            }
            if self.a.poll_timeout().is_some_and(|t| t <= self.now) {
                self.a.handle_timeout(self.now);
            }
            if self.b.poll_timeout().is_some_and(|t| t <= self.now) {
                self.b.handle_timeout(self.now);
            }
        }
        self.pump();
        self.now = self.now.max(end);
    }

    /// A connects to B's listener; returns (A's handle, B's handle).
    pub fn connect(&mut self) -> (ConnId, ConnId) {
        let aid = self
            .a
            .tcp_connect(self.now, SocketAddrV4::new(B_IP, PORT), None)
            .expect("connect");
        for _ in 0..100 {
            self.run_for(Duration::from_millis(10));
            if let Ok((bid, _)) = self.b.tcp_accept(self.listener) {
                assert_eq!(self.a.tcb(aid).map(Tcb::state), Some(State::Established));
                return (aid, bid);
            }
        }
        panic!("handshake did not complete");
    }

    /// Sends `data` from A over `aid` and reads at B over `bid` until B has as many bytes
    /// or `limit` of virtual time passed. Returns what B read.
    pub fn transfer(&mut self, aid: ConnId, bid: ConnId, data: &[u8], limit: Duration) -> Vec<u8> {
        let end = self.now + limit;
        let mut off = 0;
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65536];
        while got.len() < data.len() && self.now < end {
            if off < data.len() {
                if let Ok(n) = self.a.tcp_send(self.now, aid, &data[off..]) {
                    off += n;
                }
            }
            self.run_for(Duration::from_millis(5));
            got.extend(self.read_b(bid, &mut buf));
        }
        got
    }

    /// A writes all of `data` over `aid` (the network runs 5 ms after each write), then
    /// the network runs 300 ms more, time for B to acknowledge it all. B does not read.
    pub fn send_all(&mut self, aid: ConnId, data: &[u8]) {
        let mut off = 0;
        while off < data.len() {
            off += self.a.tcp_send(self.now, aid, &data[off..]).unwrap_or(0);
            self.run_for(Duration::from_millis(5));
        }
        self.run_for(Duration::from_millis(300));
    }

    /// Everything B can read now over `bid` (through `buf`).
    pub fn read_b(&mut self, bid: ConnId, buf: &mut [u8]) -> Vec<u8> {
        let mut got = Vec::new();
        while let Ok(n) = self.b.tcp_recv(self.now, bid, buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        got
    }

    /// Hands a frame to B as if it arrived on its interface, then lets the hosts react.
    pub fn inject_b(&mut self, frame: &[u8]) {
        self.b.receive(self.now, IfaceId(0), frame);
        self.pump();
    }

    /// Hands a frame to A as if it arrived on its interface, then lets the hosts react.
    pub fn inject_a(&mut self, frame: &[u8]) {
        self.a.receive(self.now, IfaceId(0), frame);
        self.pump();
    }
}

// ---------------------------------------------------------------------------------------
// Frames.
// ---------------------------------------------------------------------------------------

/// An Ethernet frame.
pub fn eth(dst: MacAddr, src: MacAddr, ty: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; ETHERNET_HEADER_LEN + payload.len()];
    EthernetRepr {
        dst,
        src,
        ethertype: ty,
    }
    .emit(&mut f);
    f[ETHERNET_HEADER_LEN..].copy_from_slice(payload);
    f
}

/// An IPv4 datagram (no options, TTL 64) carrying `payload`, with a correct header
/// checksum.
pub fn ipv4_frag(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    ident: u16,
    frag_offset: u16,
    more_frags: bool,
    payload: &[u8],
) -> Vec<u8> {
    let mut p = vec![0u8; IPV4_HEADER_LEN + payload.len()];
    Ipv4Repr {
        src,
        dst,
        protocol: proto,
        ttl: 64,
        dscp_ecn: 0,
        ident,
        dont_frag: false,
        more_frags,
        frag_offset,
        payload_len: payload.len() as u16,
    }
    .emit(&mut p);
    p[IPV4_HEADER_LEN..].copy_from_slice(payload);
    p
}

/// Recomputes the IPv4 header checksum and the TCP/UDP/ICMP checksum of a frame that
/// looks like Ethernet + IPv4 (so that a mutated frame reaches the transports).
pub fn fix_checksums(f: &mut [u8]) {
    if f.len() < ETHERNET_HEADER_LEN + IPV4_HEADER_LEN
        || u16::from_be_bytes([f[12], f[13]]) != ethertype::IPV4
        || f[14] >> 4 != 4
    {
        return;
    }
    let ip = &mut f[ETHERNET_HEADER_LEN..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    if ihl < IPV4_HEADER_LEN || ihl > ip.len() {
        return;
    }
    ip[10] = 0;
    ip[11] = 0;
    let c = checksum::checksum(&ip[..ihl]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    if total < ihl || total > ip.len() {
        return;
    }
    let frag = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff;
    if frag != 0 {
        return;
    }
    let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let proto = ip[9];
    let t = &mut ip[ihl..total];
    match proto {
        ip_proto::TCP if t.len() >= 20 => TcpRepr::fill_checksum(t, src, dst),
        ip_proto::UDP if t.len() >= 8 => {
            let len = usize::from(u16::from_be_bytes([t[4], t[5]]));
            if (8..=t.len()).contains(&len) {
                t[6] = 0;
                t[7] = 0;
                let s = checksum::combine(
                    checksum::pseudo_header(src, dst, ip_proto::UDP, len as u16),
                    checksum::sum(&t[..len]),
                );
                let c = match checksum::finish(s) {
                    0 => 0xffff,
                    c => c,
                };
                t[6..8].copy_from_slice(&c.to_be_bytes());
            }
        }
        ip_proto::ICMP if t.len() >= 8 => {
            t[2] = 0;
            t[3] = 0;
            let c = checksum::checksum(t);
            t[2..4].copy_from_slice(&c.to_be_bytes());
        }
        _ => {}
    }
}

/// An IPv4 datagram (no options, not fragmented) carrying `payload`.
pub fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, payload: &[u8]) -> Vec<u8> {
    ipv4_frag(src, dst, proto, 0x1234, 0, false, payload)
}

/// A TCP segment (header from `r`, correct checksum) carrying `payload`.
pub fn tcp_bytes(src: Ipv4Addr, dst: Ipv4Addr, r: &TcpRepr, payload: &[u8]) -> Vec<u8> {
    let hl = r.header_len();
    let mut t = vec![0u8; hl + payload.len()];
    t[hl..].copy_from_slice(payload);
    r.emit(&mut t, src, dst);
    t
}

/// A whole Ethernet frame carrying a TCP segment.
pub fn tcp_frame(
    (smac, sip): (MacAddr, Ipv4Addr),
    (dmac, dip): (MacAddr, Ipv4Addr),
    r: &TcpRepr,
    payload: &[u8],
) -> Vec<u8> {
    let t = tcp_bytes(sip, dip, r, payload);
    eth(
        dmac,
        smac,
        ethertype::IPV4,
        &ipv4(sip, dip, ip_proto::TCP, &t),
    )
}

/// An ICMP message (correct checksum).
pub fn icmp_bytes(m: &Icmpv4Repr<'_>) -> Vec<u8> {
    let mut v = vec![0u8; m.buffer_len()];
    m.emit(&mut v);
    v
}

/// SplitMix64: a deterministic generator for the non-proptest loops.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn u32(&mut self) -> u32 {
        self.next_u64() as u32
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// Does this frame speak for A (Ethernet source A, ARP sender A, or IP source A)? The
/// "B still works" checks leave those out: an unauthenticated ARP reply or a datagram
/// from A's own address with the right ports and sequence numbers can legitimately
/// hijack A's traffic, which no stack can prevent; the properties are about everything
/// else.
pub fn impersonates_a(f: &[u8]) -> bool {
    if f.len() < ETHERNET_HEADER_LEN {
        return false;
    }
    let ty = u16::from_be_bytes([f[12], f[13]]);
    let p = &f[ETHERNET_HEADER_LEN..];
    let a = A_IP.octets();
    (ty == ethertype::ARP && p.len() >= 18 && p[14..18] == a)
        || (ty == ethertype::IPV4 && p.len() >= 16 && p[12..16] == a)
        || f[6..12] == A_MAC.0
}

/// TCP options with the given fields (and no SACK blocks).
pub fn opts(
    mss: Option<u16>,
    window_scale: Option<u8>,
    sack_permitted: bool,
    timestamps: Option<(u32, u32)>,
) -> TcpOptions {
    let mut o = TcpOptions::default();
    o.mss = mss;
    o.window_scale = window_scale;
    o.sack_permitted = sack_permitted;
    o.timestamps = timestamps;
    o
}

// ---------------------------------------------------------------------------------------
// One Tcb under arbitrary segments, application calls and timeouts.
// ---------------------------------------------------------------------------------------

/// The bounds of the send and receive buffers: `Tcb::new` and the `set_*_buffer`
/// calls clamp to [2048, max(max_buf, 2048)].
pub fn clamp_buf(bytes: usize, max_buf: u32) -> usize {
    (bytes.min(u32::MAX as usize) as u32).clamp(2048, max_buf.max(2048)) as usize
}

/// The tunables of a driven connection. Each value must already lie inside its
/// documented range (`Params::describe`): the property tests draw them so, the fuzz
/// targets clamp them.
#[derive(Debug, Clone)]
pub struct Knobs {
    pub sack: u32,
    pub ts: bool,
    pub ws: bool,
    pub newreno: bool,
    pub init_cwnd: u32,
    pub sndbuf: u32,
    pub rcvbuf: u32,
    pub small_max_buf: bool,
    pub dupthresh: u32,
    pub reass_max_segs: u32,
    pub sack_max_ranges: u32,
    pub no_ratelimit: bool,
    pub mss_min: u32,
    pub rto_min: u32,
    pub naglim: u32,
}

impl Knobs {
    /// Valid tunables (every value inside its documented range) built from the knobs.
    pub fn settings(&self) -> TcpSettings {
        let mut p = Params::default();
        p.tcp_max_buf = if self.small_max_buf { 8192 } else { 262_144 };
        p.tcp_xmit_hiwat = self.sndbuf.clamp(4096, p.tcp_max_buf);
        p.tcp_recv_hiwat = self.rcvbuf.min(p.tcp_max_buf);
        p.tcp_xmit_lowat = p.tcp_xmit_lowat.min(p.tcp_xmit_hiwat);
        p.tcp_sack_permitted = self.sack;
        // `ts`/`ws`: offered on active opens (2) or only accepted (1).
        p.tcp_tstamp_always = if self.ts { 2 } else { 1 };
        p.tcp_wscale_always = if self.ws { 2 } else { 1 };
        p.tcp_congestion_control = if self.newreno {
            CcAlgorithm::NewReno
        } else {
            CcAlgorithm::Cubic
        };
        p.tcp_init_cwnd = self.init_cwnd;
        p.tcp_dupack_fast_retransmit = self.dupthresh;
        p.tcp_reass_max_segs = self.reass_max_segs;
        p.tcp_sack_max_ranges = self.sack_max_ranges;
        if self.no_ratelimit {
            p.tcp_invalid_ratelimit = 0;
        }
        p.tcp_mss_min = self.mss_min;
        p.tcp_rexmit_interval_min = self.rto_min;
        p.tcp_naglim_def = self.naglim;
        TcpSettings::from_params(&p)
    }
}

/// Where the driven `Tcb` starts.
#[derive(Debug, Clone)]
pub enum Start {
    /// An active opener in SYN-SENT.
    Client,
    /// A passive opener in SYN-RECEIVED after a SYN with these options.
    Server {
        mss: Option<u16>,
        ws: Option<u8>,
        sack: bool,
        ts: bool,
    },
    /// A client that completed the handshake with a peer offering these options and
    /// this window.
    Established {
        mss: Option<u16>,
        ws: Option<u8>,
        sack: bool,
        ts: bool,
        window: u16,
    },
}

/// The sequence number of a crafted segment.
#[derive(Debug, Clone, Copy)]
pub enum SeqSel {
    /// Relative to the Tcb's real RCV.NXT.
    RcvNxt(i32),
    /// Relative to the peer's ISN.
    Irs(i32),
    Abs(u32),
}

/// The acknowledgment number of a crafted segment.
#[derive(Debug, Clone, Copy)]
pub enum AckSel {
    /// Acceptable: SND.UNA plus this fraction (of 255) of the octets in flight.
    Valid(u8),
    /// Relative to the Tcb's real SND.UNA.
    Una(i32),
    /// Relative to the Tcb's real SND.NXT.
    Nxt(i32),
    Abs(u32),
}

/// The timestamp option of a crafted segment.
#[derive(Debug, Clone, Copy)]
pub enum TsSel {
    None,
    /// The peer's current clock.
    Cur,
    /// An older value (PAWS).
    Old(u32),
    Abs(u32, u32),
}

/// A crafted segment from the peer.
#[derive(Debug, Clone)]
pub struct SegSpec {
    pub seq: SeqSel,
    pub ack: AckSel,
    pub flags: u8,
    pub window: u16,
    pub urgent: u16,
    pub ts: TsSel,
    /// SACK blocks: (relative to SND.UNA?, left, length).
    pub sack: Vec<(bool, u32, u32)>,
    pub syn_opts: Option<(Option<u16>, Option<u8>, bool)>,
    /// Payload length.
    pub len: usize,
}

/// One step of the driver: a segment from the peer, an application call, or time.
#[derive(Debug, Clone)]
pub enum Op {
    Seg(SegSpec),
    /// An honest cumulative ACK of `frac`/255 of the data in flight.
    PeerAck(u8, u16),
    /// In-order data from the peer (and maybe its FIN).
    PeerData(u16, bool),
    /// Out-of-order data from the peer: (gap above RCV.NXT, length).
    PeerOoo(u32, u16),
    /// A duplicate ACK SACKing blocks at these offsets (in segments of 1000) above SND.UNA.
    PeerSack(Vec<(u8, u8)>),
    Send(usize),
    SendUrgent(usize),
    Recv(usize),
    Peek(usize),
    Shutdown,
    Close,
    Abort,
    Nodelay(bool),
    Cork(bool),
    Keepalive(bool),
    KeepaliveParams(u32, u32, u32),
    UserTimeout(u32),
    SndBuf(usize),
    RcvBuf(usize),
    PathMtu(u32),
    Unreachable(u8),
    Tos(u8),
    Advance(u32),
    NextTimer,
}

/// The property tests' additional checks (the fuzz targets run without them): the
/// accounting of `send_urgent` as well as `send`, `info().unacked` equal to
/// SND.NXT - SND.UNA, a send MSS of at least 1, and a bound on the heap the `Tcb` holds.
#[derive(Clone, Copy)]
pub struct Strict {
    /// Live heap bytes allocated by this thread (a counting global allocator).
    pub live_bytes: fn() -> isize,
}

/// Drives one `Tcb`, playing its peer, and checks the robustness invariants after every
/// step (panics on a violation).
pub struct Drv {
    pub tcb: Tcb,
    pub now: Instant,
    max_buf: u32,
    /// The send buffer size the Tcb must respect (SO_SNDBUF semantics: never below what
    /// is already queued).
    snd_cap: usize,
    snd_cap_max: usize,
    rcv_cap_max: usize,
    reass_max_segs: usize,
    peer_isn: u32,
    /// The peer's timestamp clock.
    peer_ts: u32,
    /// Bytes the peer has sent in order (for `PeerData`).
    peer_off: u64,
    /// Our ISS, and the stream octets the application has written.
    iss: u32,
    written: u64,
    /// The right edge of the last window advertised (after the handshake).
    right_edge: Option<u32>,
    strict: Option<Strict>,
    /// Heap bytes live when the Tcb was made (the driver's own allocations are freed
    /// before each check); only with `strict`.
    mem_base: isize,
    mem_peak: isize,
}

impl Drv {
    /// A `Tcb` with the knobs' settings, our ISS `iss` and the peer's ISN `irs`, brought
    /// to `st`, then checked once.
    pub fn new(k: &Knobs, st: &Start, iss: u32, irs: u32, strict: Option<Strict>) -> Drv {
        let set = k.settings();
        let max_buf = set.max_buf;
        let snd_cap = clamp_buf(set.sndbuf as usize, max_buf);
        let rcv_cap = clamp_buf(set.rcvbuf as usize, max_buf);
        let reass_max_segs = set.reass_max_segs as usize;
        let now = Instant::from_secs(100);
        let mem_base = strict.map_or(0, |s| (s.live_bytes)());
        let spec = ConnSpec {
            local: CLIENT,
            remote: SERVER,
            iss: SeqNum(iss),
            ts_offset: 0x1000,
            mtu: 1500,
        };
        let peer_syn = |m: Option<u16>, w: Option<u8>, s: bool, t: bool, flags, ack| TcpRepr {
            src_port: SERVER.port(),
            dst_port: CLIENT.port(),
            seq: irs,
            ack,
            flags,
            window: 65535,
            urgent: 0,
            options: opts(m, w, s, t.then_some((50_000, 0))),
        };
        let tcb = match st {
            Start::Client | Start::Established { .. } => Tcb::connect(now, spec, set),
            Start::Server { mss, ws, sack, ts } => {
                let syn = peer_syn(*mss, *ws, *sack, *ts, TcpFlags::SYN, 0);
                Tcb::accept(now, spec, set, &syn)
            }
        };
        let mut d = Drv {
            tcb,
            now,
            max_buf,
            snd_cap,
            snd_cap_max: snd_cap,
            rcv_cap_max: rcv_cap,
            reass_max_segs,
            peer_isn: irs,
            peer_ts: 50_001,
            peer_off: 0,
            iss,
            written: 0,
            right_edge: None,
            strict,
            mem_base,
            mem_peak: 0,
        };
        d.flush();
        if let Start::Established {
            mss,
            ws,
            sack,
            ts,
            window,
        } = st
        {
            let mut sa = peer_syn(
                *mss,
                *ws,
                *sack,
                *ts,
                TcpFlags::SYN | TcpFlags::ACK,
                iss.wrapping_add(1),
            );
            sa.window = *window;
            d.tcb.handle_segment(d.now, &sa, &[]);
            d.flush();
        }
        d.check(&"start");
        d
    }

    /// Collects everything the Tcb wants to send; `poll_transmit` must stop.
    pub fn flush(&mut self) -> usize {
        // Every segment but a handful carries at least one octet of the send buffer, and
        // no octet goes out more than twice in one flush (new, then retransmitted at most
        // once per call); so this bound is generous.
        let limit = 3 * self.snd_cap_max + 64;
        let mut n = 0;
        while let Some(out) = self.tcb.poll_transmit(self.now) {
            let r = out.repr;
            let mut data = vec![0u8; out.payload_len()];
            out.copy_payload(&mut data);
            n += 1;
            assert!(
                n <= limit,
                "poll_transmit does not terminate ({n} segments)"
            );
            self.check_segment(&r, &data);
        }
        n
    }

    /// Checks one emitted segment: its payload is exactly the octets the application
    /// wrote at that place of the stream (RFC 9293 §3.10.2 SEND), never beyond what was
    /// written, never larger than the send MSS (§3.7.1), acknowledges RCV.NXT, and the
    /// right edge of the advertised window never moves left (§3.8.6.2.2, as `tcb.rs`
    /// promises; SYN segments carry unscaled windows and are not compared).
    fn check_segment(&mut self, r: &TcpRepr, data: &[u8]) {
        let i = self.tcb.info();
        if r.flags.rst() {
            return;
        }
        if !data.is_empty() {
            let off = u64::from(r.seq.wrapping_sub(self.iss.wrapping_add(1)));
            let end = off + data.len() as u64;
            assert!(
                end <= self.written,
                "segment carries stream octets [{off}, {end}) but only {} were written",
                self.written
            );
            assert!(
                data == pattern(off, data.len()).as_slice(),
                "segment payload at stream offset {off} is not what was written"
            );
            assert!(
                data.len() as u32 <= i.snd_mss,
                "{}-byte segment above the send MSS {}",
                data.len(),
                i.snd_mss
            );
        }
        if r.flags.ack() {
            assert_eq!(r.ack, i.rcv_nxt, "ACK field is not RCV.NXT");
        }
        if r.flags.ack() && !r.flags.syn() {
            let edge = r.ack.wrapping_add(u32::from(r.window) << i.rcv_wscale);
            if let Some(prev) = self.right_edge {
                assert!(
                    (edge.wrapping_sub(prev) as i32) >= 0,
                    "advertised right edge moved left: {prev} -> {edge} ({r:?})"
                );
            }
            self.right_edge = Some(edge);
        }
    }

    /// Advances virtual time by `d`, running every timer on the way.
    pub fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        let mut same = 0u32;
        let mut fired = 0u32;
        while let Some(t) = self.tcb.poll_timeout() {
            if t > end || fired > 200_000 {
                break;
            }
            if t <= self.now {
                same += 1;
                assert!(
                    same < 1000,
                    "timer livelock at {:?}: deadline {t:?}",
                    self.now
                );
            } else {
                same = 0;
            }
            self.now = self.now.max(t);
            self.tcb.handle_timeout(self.now);
            self.flush();
            fired += 1;
        }
        self.now = self.now.max(end);
    }

    fn seg(&mut self, s: &SegSpec) {
        let i = self.tcb.info();
        let seq = match s.seq {
            SeqSel::RcvNxt(d) => i.rcv_nxt.wrapping_add(d as u32),
            SeqSel::Irs(d) => self.peer_isn.wrapping_add(d as u32),
            SeqSel::Abs(v) => v,
        };
        let ack = match s.ack {
            AckSel::Valid(f) => {
                let flight = u64::from(i.snd_nxt.wrapping_sub(i.snd_una));
                i.snd_una.wrapping_add((flight * u64::from(f) / 255) as u32)
            }
            AckSel::Una(d) => i.snd_una.wrapping_add(d as u32),
            AckSel::Nxt(d) => i.snd_nxt.wrapping_add(d as u32),
            AckSel::Abs(v) => v,
        };
        let ts = match s.ts {
            TsSel::None => None,
            TsSel::Cur => Some((self.peer_ts, 0x1000)),
            TsSel::Old(d) => Some((self.peer_ts.wrapping_sub(d), 0)),
            TsSel::Abs(a, b) => Some((a, b)),
        };
        let mut o = opts(None, None, false, ts);
        if let Some((m, w, sp)) = s.syn_opts {
            o.mss = m;
            o.window_scale = w;
            o.sack_permitted = sp;
        }
        let blocks: Vec<SackBlock> = s
            .sack
            .iter()
            .map(|&(rel, l, len)| {
                let left = if rel {
                    i.snd_una.wrapping_add(l % 400_000)
                } else {
                    l
                };
                SackBlock {
                    left,
                    right: left.wrapping_add(len),
                }
            })
            .collect();
        o.set_sack_blocks(&blocks);
        let r = TcpRepr {
            src_port: SERVER.port(),
            dst_port: CLIENT.port(),
            seq,
            ack,
            flags: TcpFlags(s.flags),
            window: s.window,
            urgent: s.urgent,
            options: o,
        };
        let payload = vec![0xa5u8; s.len];
        self.peer_ts = self.peer_ts.wrapping_add(1);
        self.tcb.handle_segment(self.now, &r, &payload);
    }

    fn peer_repr(&mut self, flags: TcpFlags, ack: u32, window: u16) -> TcpRepr {
        let i = self.tcb.info();
        self.peer_ts = self.peer_ts.wrapping_add(1);
        TcpRepr {
            src_port: SERVER.port(),
            dst_port: CLIENT.port(),
            seq: i.rcv_nxt,
            ack,
            flags,
            window,
            urgent: 0,
            options: opts(
                None,
                None,
                false,
                i.timestamps.then_some((self.peer_ts, 0x1000)),
            ),
        }
    }

    /// Applies `op`, collects what the Tcb sends, and checks the invariants.
    pub fn step(&mut self, op: &Op) {
        let now = self.now;
        match op {
            Op::Seg(s) => self.seg(s),
            Op::PeerAck(frac, win) => {
                let i = self.tcb.info();
                let inflight = i.snd_nxt.wrapping_sub(i.snd_una);
                let adv = (u64::from(inflight) * u64::from(*frac) / 255) as u32;
                let r = self.peer_repr(TcpFlags::ACK, i.snd_una.wrapping_add(adv), *win);
                self.tcb.handle_segment(now, &r, &[]);
            }
            Op::PeerData(n, fin) => {
                let i = self.tcb.info();
                let mut flags = TcpFlags::ACK | TcpFlags::PSH;
                if *fin {
                    flags |= TcpFlags::FIN;
                }
                let r = self.peer_repr(flags, i.snd_una, 65535);
                let data = pattern(self.peer_off, usize::from(*n));
                self.peer_off += u64::from(*n);
                self.tcb.handle_segment(now, &r, &data);
            }
            Op::PeerOoo(gap, n) => {
                let i = self.tcb.info();
                let mut r = self.peer_repr(TcpFlags::ACK, i.snd_una, 65535);
                r.seq = r.seq.wrapping_add(*gap);
                let data = vec![0x3c; usize::from(*n)];
                self.tcb.handle_segment(now, &r, &data);
            }
            Op::PeerSack(blocks) => {
                let i = self.tcb.info();
                let mut r = self.peer_repr(TcpFlags::ACK, i.snd_una, 65535);
                let b: Vec<SackBlock> = blocks
                    .iter()
                    .map(|&(at, len)| {
                        let left = i.snd_una.wrapping_add(u32::from(at) * 1000);
                        SackBlock {
                            left,
                            right: left.wrapping_add(u32::from(len) * 1000),
                        }
                    })
                    .collect();
                r.options.set_sack_blocks(&b);
                self.tcb.handle_segment(now, &r, &[]);
            }
            Op::Send(n) | Op::SendUrgent(n) => {
                let urgent = matches!(op, Op::SendUrgent(_));
                let before = self.tcb.send_queued();
                let data = pattern(self.written, *n);
                let r = if urgent {
                    self.tcb.send_urgent(now, &data)
                } else {
                    self.tcb.send(now, &data)
                };
                if let Ok(k) = r {
                    if !urgent || self.strict.is_some() {
                        assert!(k <= *n, "send took more than it was given");
                        assert_eq!(self.tcb.send_queued(), before + k);
                    }
                    self.written += k as u64;
                }
            }
            Op::Recv(n) => {
                let mut buf = vec![0u8; *n];
                let avail = self.tcb.recv_available();
                if let Ok(k) = self.tcb.recv(now, &mut buf) {
                    assert!(k <= *n && k <= avail, "recv returned {k} of {avail}");
                }
            }
            Op::Peek(n) => {
                let mut buf = vec![0u8; *n];
                let _ = self.tcb.peek(&mut buf);
            }
            Op::Shutdown => {
                let _ = self.tcb.shutdown_write(now);
            }
            Op::Close => self.tcb.close(now),
            Op::Abort => self.tcb.abort(now),
            Op::Nodelay(b) => self.tcb.set_nodelay(*b),
            Op::Cork(b) => self.tcb.set_cork(now, *b),
            Op::Keepalive(b) => self.tcb.set_keepalive(now, *b),
            Op::KeepaliveParams(a, b, c) => self.tcb.set_keepalive_params(
                Duration::from_millis(u64::from(*a)),
                Duration::from_millis(u64::from(*b)),
                *c,
            ),
            Op::UserTimeout(ms) => self
                .tcb
                .set_user_timeout(Some(Duration::from_millis(u64::from(*ms)))),
            Op::SndBuf(n) => {
                self.tcb.set_send_buffer(*n);
                self.snd_cap = clamp_buf(*n, self.max_buf).max(self.tcb.send_queued());
                self.snd_cap_max = self.snd_cap_max.max(self.snd_cap);
            }
            Op::RcvBuf(n) => {
                self.tcb.set_recv_buffer(*n);
                self.rcv_cap_max = self.rcv_cap_max.max(clamp_buf(*n, self.max_buf));
            }
            Op::PathMtu(m) => self.tcb.on_path_mtu(now, *m),
            Op::Unreachable(h) => self.tcb.on_unreachable(now, *h),
            Op::Tos(t) => self.tcb.set_tos(*t),
            Op::Advance(ms) => self.advance(Duration::from_millis(u64::from(*ms))),
            Op::NextTimer => {
                if let Some(t) = self.tcb.poll_timeout() {
                    self.now = self.now.max(t);
                    self.tcb.handle_timeout(self.now);
                }
            }
        }
        self.flush();
        self.check(op);
    }

    /// The robustness invariants (module `tcb.rs` "Invariants"; RFC 9293 §3.3.1) that an
    /// observer can check; `op` names what came before, for the panic message.
    pub fn check(&mut self, op: &dyn core::fmt::Debug) {
        let i = self.tcb.info();
        let _ = (
            self.tcb.urgent_mark(),
            self.tcb.send_space(),
            self.tcb.at_eof(),
            self.tcb.is_closed(),
            self.tcb.poll_events(),
            self.tcb.poll_timeout(),
        );
        assert!(
            self.tcb.send_unsent() <= i.send_queued,
            "unsent > queued after {op:?}: {i:?}"
        );
        assert!(
            i.send_queued <= self.snd_cap,
            "send buffer {} above its size {} after {op:?}",
            i.send_queued,
            self.snd_cap
        );
        assert!(
            i.recv_queued + i.ooo_bytes <= self.rcv_cap_max + 16 * 1024,
            "receive side holds {} + {} bytes, buffer {} after {op:?}",
            i.recv_queued,
            i.ooo_bytes,
            self.rcv_cap_max
        );
        if i.state != State::Closed {
            let unacked = i.snd_nxt.wrapping_sub(i.snd_una);
            assert!(
                u64::from(unacked) <= i.send_queued as u64 + 2,
                "SND.NXT - SND.UNA = {unacked} but only {} bytes queued (+SYN+FIN) after {op:?}: {i:?}",
                i.send_queued
            );
            assert!(
                i.sacked <= unacked,
                "{} bytes SACKed of {unacked} in flight after {op:?}",
                i.sacked
            );
        }
        let Some(strict) = self.strict else { return };
        let _ = self.tcb.mss();
        if i.state != State::Closed {
            assert_eq!(i.snd_nxt.wrapping_sub(i.snd_una), i.unacked);
        }
        assert!(i.snd_mss >= 1);
        // Memory: buffers (ring buffers at most double their contents), the assembler's
        // pieces and fixed overhead.
        let mem = (strict.live_bytes)() - self.mem_base;
        self.mem_peak = self.mem_peak.max(mem);
        let bound = 4 * (self.snd_cap_max + self.rcv_cap_max + 16 * 1024)
            + 512 * self.reass_max_segs
            + 256 * 1024;
        assert!(
            mem <= bound as isize,
            "Tcb holds {mem} heap bytes (bound {bound}) after {op:?}: {i:?}"
        );
    }
}
