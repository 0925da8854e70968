//! Host composition tests: a whole `ember_core::Host` (Ethernet, ARP, IPv4, ICMP, UDP and
//! TCP composed) driven frame by frame on a virtual clock.
//!
//! Two drivers, both written here:
//! * [`Lab`]: one host (198.18.0.1) and a peer (198.18.0.9) that the test plays by hand:
//!   frames are built with `ember_core::wire` types, fed with `Host::receive`, and what the
//!   host sends is taken with `Host::poll_transmit` and parsed back.
//! * [`Net`]: two hosts (198.18.0.1 and 198.18.0.2) on one zero-delay link; every frame
//!   is moved across and logged, and timers run at their deadlines.
//!
//! RFCs: 791 (IPv4), 792 (ICMP), 826 (ARP), 1122 (host requirements), 1191 (PMTU
//! discovery), 5927 (ICMP attacks on TCP), 6191 (TIME-WAIT reuse), 9293 §3.10.7.1-2
//! (segments to CLOSED and LISTEN), 4293/4022/4113 (MIB counters).

use ember_core::host::{ConnId, Interface, ListenerId, SocketEvent};
use ember_core::ip::IfaceId;
use ember_core::tcp::{Events, State};
use ember_core::time::Instant;
use ember_core::wire::{
    ethertype, icmp_type, icmp_unreach, ip_proto, ArpOp, ArpRepr, EthernetRepr, Icmpv4Repr,
    Ipv4Repr, MacAddr, TcpFlags, TcpOptions, TcpRepr, UdpRepr, ARP_LEN, ETHERNET_HEADER_LEN,
    IPV4_HEADER_LEN, UDP_HEADER_LEN,
};
use ember_core::{Host, Params};
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

// -------------------------------------------------------------------------------------
// Addresses.
// -------------------------------------------------------------------------------------

const IF0: IfaceId = IfaceId(0);
const MAC_A: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x0a]);
const MAC_B: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x0b]);
const MAC_P: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x99]);
const MAC_P2: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x98]);
const MAC_OTHER: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x77]);
const IP_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const IP_P: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 9);
const IP_Q: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 10);
const IP_SUBNET_BCAST: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 255);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn sa(ip: Ipv4Addr, port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(ip, port)
}

/// A host with one /24 interface of MTU 1500 and the given tunables.
fn host(mac: MacAddr, ip: Ipv4Addr, tweak: &[(&str, &str)]) -> Host {
    let mut p = Params::default();
    p.set_many(tweak).expect("valid tunables");
    let mut secret = [0x5a; 16];
    secret[15] = ip.octets()[3];
    let mut h = Host::new(p, secret);
    h.add_interface(Interface {
        mac,
        addr: ip,
        prefix_len: 24,
        mtu: 1500,
    })
    .unwrap();
    h
}

// -------------------------------------------------------------------------------------
// Frame builders.
// -------------------------------------------------------------------------------------

fn eth_frame(dst: MacAddr, src: MacAddr, ty: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0; ETHERNET_HEADER_LEN + payload.len()];
    EthernetRepr {
        dst,
        src,
        ethertype: ty,
    }
    .emit(&mut f);
    f[ETHERNET_HEADER_LEN..].copy_from_slice(payload);
    f
}

fn ip_repr(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, payload_len: usize) -> Ipv4Repr {
    Ipv4Repr {
        src,
        dst,
        protocol,
        ttl: 64,
        dscp_ecn: 0,
        ident: 0x1234,
        dont_frag: false,
        more_frags: false,
        frag_offset: 0,
        payload_len: payload_len as u16,
    }
}

fn ip_packet(r: &Ipv4Repr, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0; IPV4_HEADER_LEN + payload.len()];
    r.emit(&mut p);
    p[IPV4_HEADER_LEN..].copy_from_slice(payload);
    p
}

/// Recomputes the IPv4 header checksum of `p` in place (after a test edited the header).
fn fix_ip_checksum(p: &mut [u8]) {
    let hl = usize::from(p[0] & 0x0f) * 4;
    p[10] = 0;
    p[11] = 0;
    let c = ember_core::wire::checksum::checksum(&p[..hl]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
}

fn udp_bytes(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut u = vec![0; UDP_HEADER_LEN + data.len()];
    u[UDP_HEADER_LEN..].copy_from_slice(data);
    UdpRepr {
        src_port: sport,
        dst_port: dport,
    }
    .emit(&mut u, src, dst);
    u
}

fn udp_packet(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let u = udp_bytes(src, dst, sport, dport, data);
    ip_packet(&ip_repr(src, dst, ip_proto::UDP, u.len()), &u)
}

fn icmp_bytes(msg: &Icmpv4Repr) -> Vec<u8> {
    let mut b = vec![0; msg.buffer_len()];
    msg.emit(&mut b);
    b
}

fn icmp_packet(src: Ipv4Addr, dst: Ipv4Addr, msg: &Icmpv4Repr) -> Vec<u8> {
    let b = icmp_bytes(msg);
    ip_packet(&ip_repr(src, dst, ip_proto::ICMP, b.len()), &b)
}

fn echo_packet(src: Ipv4Addr, dst: Ipv4Addr, ident: u16, seq_no: u16, data: &[u8]) -> Vec<u8> {
    icmp_packet(
        src,
        dst,
        &Icmpv4Repr::EchoRequest {
            ident,
            seq_no,
            data,
        },
    )
}

#[allow(clippy::too_many_arguments)]
fn tcp_bytes(
    src: SocketAddrV4,
    dst: SocketAddrV4,
    seq: u32,
    ack: u32,
    flags: TcpFlags,
    options: TcpOptions,
    data: &[u8],
) -> Vec<u8> {
    let r = TcpRepr {
        src_port: src.port(),
        dst_port: dst.port(),
        seq,
        ack,
        flags,
        window: 65_535,
        urgent: 0,
        options,
    };
    let hl = r.header_len();
    let mut b = vec![0; hl + data.len()];
    b[hl..].copy_from_slice(data);
    r.emit(&mut b, *src.ip(), *dst.ip());
    b
}

fn tcp_packet(
    src: SocketAddrV4,
    dst: SocketAddrV4,
    seq: u32,
    ack: u32,
    flags: TcpFlags,
    data: &[u8],
) -> Vec<u8> {
    let t = tcp_bytes(src, dst, seq, ack, flags, TcpOptions::default(), data);
    ip_packet(&ip_repr(*src.ip(), *dst.ip(), ip_proto::TCP, t.len()), &t)
}

fn arp_frame(
    eth_src: MacAddr,
    eth_dst: MacAddr,
    op: ArpOp,
    sha: MacAddr,
    spa: Ipv4Addr,
    tha: MacAddr,
    tpa: Ipv4Addr,
) -> Vec<u8> {
    let mut a = vec![0; ARP_LEN];
    ArpRepr {
        op,
        sender_mac: sha,
        sender_ip: spa,
        target_mac: tha,
        target_ip: tpa,
    }
    .emit(&mut a);
    eth_frame(eth_dst, eth_src, ethertype::ARP, &a)
}

/// An IP packet from the peer to host A, unicast on the link.
fn peer_frame(ip_pkt: &[u8]) -> Vec<u8> {
    eth_frame(MAC_A, MAC_P, ethertype::IPV4, ip_pkt)
}

/// The fragments of an IP datagram (protocol, ident) carrying `payload`, cut at
/// `cuts` (payload offsets, multiples of 8).
fn fragments(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    protocol: u8,
    ident: u16,
    payload: &[u8],
    cuts: &[usize],
) -> Vec<Vec<u8>> {
    let mut bounds = vec![0];
    bounds.extend_from_slice(cuts);
    bounds.push(payload.len());
    bounds
        .windows(2)
        .map(|w| {
            assert_eq!(w[0] % 8, 0);
            let piece = &payload[w[0]..w[1]];
            let r = Ipv4Repr {
                ident,
                frag_offset: w[0] as u16,
                more_frags: w[1] != payload.len(),
                ..ip_repr(src, dst, protocol, piece.len())
            };
            ip_packet(&r, piece)
        })
        .collect()
}

// -------------------------------------------------------------------------------------
// Parsers for what a host sends.
// -------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct IpOut {
    eth: EthernetRepr,
    hdr: Ipv4Repr,
    /// The whole IP datagram as sent.
    raw: Vec<u8>,
    payload: Vec<u8>,
}

fn parse_ip(frame: &[u8]) -> Option<IpOut> {
    let (eth, rest) = EthernetRepr::parse(frame).ok()?;
    if eth.ethertype != ethertype::IPV4 {
        return None;
    }
    let (hdr, payload) = Ipv4Repr::parse(rest, true).ok()?;
    let hl = usize::from(rest[0] & 0x0f) * 4;
    Some(IpOut {
        eth,
        hdr,
        raw: rest[..hl + payload.len()].to_vec(),
        payload: payload.to_vec(),
    })
}

fn parse_arp(frame: &[u8]) -> Option<(EthernetRepr, ArpRepr)> {
    let (eth, rest) = EthernetRepr::parse(frame).ok()?;
    if eth.ethertype != ethertype::ARP {
        return None;
    }
    Some((eth, ArpRepr::parse(rest).ok()?))
}

#[derive(Debug, Clone)]
struct IcmpOut {
    ty: u8,
    code: u8,
    /// Bytes 4..8 of the message (ident/seq, or unused/next-hop MTU).
    word: [u8; 4],
    body: Vec<u8>,
}

fn parse_icmp(frame: &[u8]) -> Option<(IpOut, IcmpOut)> {
    let ip = parse_ip(frame)?;
    if ip.hdr.protocol != ip_proto::ICMP {
        return None;
    }
    Icmpv4Repr::parse(&ip.payload).ok()?; // checksum verified
    let p = &ip.payload;
    let m = IcmpOut {
        ty: p[0],
        code: p[1],
        word: [p[4], p[5], p[6], p[7]],
        body: p[8..].to_vec(),
    };
    Some((ip, m))
}

/// A TCP segment as sent: IP datagram, header, payload.
type Seg = (IpOut, TcpRepr, Vec<u8>);

fn parse_tcp(frame: &[u8]) -> Option<Seg> {
    let ip = parse_ip(frame)?;
    if ip.hdr.protocol != ip_proto::TCP || ip.hdr.is_fragment() {
        return None;
    }
    let (t, data) = TcpRepr::parse(&ip.payload, ip.hdr.src, ip.hdr.dst, true).ok()?;
    let data = data.to_vec();
    Some((ip, t, data))
}

fn icmps(frames: &[Vec<u8>]) -> Vec<(IpOut, IcmpOut)> {
    frames.iter().filter_map(|f| parse_icmp(f)).collect()
}

fn tcps(frames: &[Vec<u8>]) -> Vec<Seg> {
    frames.iter().filter_map(|f| parse_tcp(f)).collect()
}

fn arps(frames: &[Vec<u8>]) -> Vec<ArpRepr> {
    frames
        .iter()
        .filter_map(|f| parse_arp(f))
        .map(|x| x.1)
        .collect()
}

/// Deterministic pseudo-random bytes (xorshift64*, fixed seed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

// -------------------------------------------------------------------------------------
// Lab: one host, the test plays the peer.
// -------------------------------------------------------------------------------------

struct Lab {
    h: Host,
    now: Instant,
}

impl Lab {
    /// Host A with the peer (198.18.0.9, MAC_P) already in its ARP cache.
    fn new(tweak: &[(&str, &str)]) -> Lab {
        let mut l = Lab::bare(tweak);
        l.introduce();
        l
    }

    /// Host A knowing nobody.
    fn bare(tweak: &[(&str, &str)]) -> Lab {
        Lab {
            h: host(MAC_A, IP_A, tweak),
            now: Instant::from_secs(1),
        }
    }

    /// The peer asks who has A: A learns the peer (RFC 826: it is the target) and replies.
    fn introduce(&mut self) {
        self.rx(&arp_frame(
            MAC_P,
            MacAddr::BROADCAST,
            ArpOp::Request,
            MAC_P,
            IP_P,
            MacAddr::ZERO,
            IP_A,
        ));
        let out = self.tx();
        assert_eq!(arps(&out).len(), 1, "ARP reply to the introduction");
    }

    fn rx(&mut self, frame: &[u8]) {
        self.h.receive(self.now, IF0, frame);
    }

    fn rx_ip(&mut self, pkt: &[u8]) {
        self.rx(&peer_frame(pkt));
    }

    fn tx(&mut self) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        while let Some(f) = self.h.poll_transmit() {
            assert_eq!(f.iface, IF0);
            v.push(f.data);
        }
        v
    }

    /// Runs every deadline up to `t`, then sets the clock to `t`.
    fn advance_to(&mut self, t: Instant) {
        for _ in 0..100_000 {
            match self.h.poll_timeout() {
                Some(d) if d <= t => {
                    self.now = d.max(self.now);
                    self.h.handle_timeout(self.now);
                }
                _ => {
                    self.now = t;
                    self.h.handle_timeout(t);
                    return;
                }
            }
        }
        panic!("timers never settled");
    }

    fn advance(&mut self, d: Duration) {
        let t = self.now + d;
        self.advance_to(t);
    }
}

/// The peer's side of one TCP connection to host A.
#[derive(Debug, Clone)]
struct TcpPeer {
    me: SocketAddrV4,
    them: SocketAddrV4,
    seq: u32,
    ack: u32,
    tsval: Option<u32>,
    tsecr: u32,
}

impl TcpPeer {
    fn new(port: u16, their_port: u16) -> TcpPeer {
        TcpPeer {
            me: sa(IP_P, port),
            them: sa(IP_A, their_port),
            seq: 1_000_000,
            ack: 0,
            tsval: None,
            tsecr: 0,
        }
    }

    fn opts(&self) -> TcpOptions {
        let mut o = TcpOptions::default();
        o.timestamps = self.tsval.map(|v| (v, self.tsecr));
        o
    }

    fn frame_with(&self, flags: TcpFlags, opts: TcpOptions, data: &[u8]) -> Vec<u8> {
        let t = tcp_bytes(self.me, self.them, self.seq, self.ack, flags, opts, data);
        peer_frame(&ip_packet(
            &ip_repr(*self.me.ip(), *self.them.ip(), ip_proto::TCP, t.len()),
            &t,
        ))
    }

    fn frame(&self, flags: TcpFlags, data: &[u8]) -> Vec<u8> {
        self.frame_with(flags, self.opts(), data)
    }

    fn syn(&self) -> Vec<u8> {
        let mut o = self.opts();
        o.mss = Some(1460);
        self.frame_with(TcpFlags::SYN, o, &[])
    }

    /// Takes what it needs from a segment host A sent it.
    fn saw(&mut self, t: &TcpRepr) {
        if let Some((v, _)) = t.options.timestamps {
            self.tsecr = v;
        }
    }
}

/// Completes a handshake from `peer` to the listener `lid` of `lab` and accepts it.
fn establish(lab: &mut Lab, lid: ListenerId, peer: &mut TcpPeer) -> ConnId {
    lab.rx(&peer.syn());
    let out = tcps(&lab.tx());
    assert_eq!(out.len(), 1, "one SYN,ACK");
    let (_, synack, _) = &out[0];
    assert_eq!(synack.flags, TcpFlags::SYN | TcpFlags::ACK);
    assert_eq!(synack.ack, peer.seq.wrapping_add(1));
    peer.seq = peer.seq.wrapping_add(1);
    peer.ack = synack.seq.wrapping_add(1);
    peer.saw(synack);
    if let Some(v) = peer.tsval.as_mut() {
        *v += 1;
    }
    lab.rx(&peer.frame(TcpFlags::ACK, &[]));
    assert!(lab.tx().is_empty(), "nothing answers the final ACK");
    let (id, from) = lab.h.tcp_accept(lid).expect("accept");
    assert_eq!(from, peer.me);
    id
}

// -------------------------------------------------------------------------------------
// Net: two hosts on one link.
// -------------------------------------------------------------------------------------

struct Net {
    a: Host,
    b: Host,
    now: Instant,
    /// Every frame moved, with its sender ('a' or 'b').
    log: Vec<(char, Vec<u8>)>,
}

impl Net {
    fn new(ta: &[(&str, &str)], tb: &[(&str, &str)]) -> Net {
        Net {
            a: host(MAC_A, IP_A, ta),
            b: host(MAC_B, IP_B, tb),
            now: Instant::from_secs(1),
            log: Vec::new(),
        }
    }

    /// Moves frames both ways until the link is quiet.
    fn pump(&mut self) {
        for _ in 0..100_000 {
            let mut moved = false;
            while let Some(f) = self.a.poll_transmit() {
                self.b.receive(self.now, IF0, &f.data);
                self.log.push(('a', f.data));
                moved = true;
            }
            while let Some(f) = self.b.poll_transmit() {
                self.a.receive(self.now, IF0, &f.data);
                self.log.push(('b', f.data));
                moved = true;
            }
            if !moved {
                return;
            }
        }
        panic!("the link never went quiet");
    }

    /// Runs both hosts for `d` of virtual time.
    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        self.pump();
        for _ in 0..100_000 {
            let next = [self.a.poll_timeout(), self.b.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) if t <= end => {
                    self.now = t.max(self.now);
                    self.a.handle_timeout(self.now);
                    self.b.handle_timeout(self.now);
                    self.pump();
                }
                _ => {
                    self.now = end;
                    return;
                }
            }
        }
        panic!("timers never settled");
    }

    fn sent_by(&self, who: char) -> Vec<Vec<u8>> {
        self.log
            .iter()
            .filter(|(w, _)| *w == who)
            .map(|(_, f)| f.clone())
            .collect()
    }

    /// A connects to B:port (B listening); returns (A's conn, B's listener, B's conn).
    fn connect(&mut self, port: u16) -> (ConnId, ListenerId, ConnId) {
        let lid = self.b.tcp_listen(sa(IP_B, port), 16).unwrap();
        let c = self.a.tcp_connect(self.now, sa(IP_B, port), None).unwrap();
        self.run(ms(10));
        let (s, peer) = self.b.tcp_accept(lid).expect("accept");
        assert_eq!(peer, self.a.tcb(c).unwrap().local());
        assert_eq!(self.a.tcb(c).unwrap().state(), State::Established);
        (c, lid, s)
    }
}

fn recv_all(h: &mut Host, now: Instant, id: ConnId) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = h.tcp_recv(now, id, &mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

// =====================================================================================
// ARP (RFC 826, RFC 1122 §2.3.2).
// =====================================================================================

/// RFC 826 "Packet Reception": a request whose target protocol address is ours draws a
/// reply to the requester, with our hardware address as sender, swapping the fields.
#[test]
fn arp_request_for_our_address_draws_reply() {
    let mut l = Lab::bare(&[]);
    l.rx(&arp_frame(
        MAC_P,
        MacAddr::BROADCAST,
        ArpOp::Request,
        MAC_P,
        IP_P,
        MacAddr::ZERO,
        IP_A,
    ));
    let out = l.tx();
    assert_eq!(out.len(), 1);
    let (eth, arp) = parse_arp(&out[0]).expect("an ARP frame");
    assert_eq!(eth.dst, MAC_P);
    assert_eq!(eth.src, MAC_A);
    assert_eq!(arp.op, ArpOp::Reply);
    assert_eq!(arp.sender_mac, MAC_A);
    assert_eq!(arp.sender_ip, IP_A);
    assert_eq!(arp.target_mac, MAC_P);
    assert_eq!(arp.target_ip, IP_P);
    let s = l.h.stats().ip;
    assert_eq!((s.arp_in, s.arp_replies_out, s.arp_in_errors), (1, 1, 0));
}

/// RFC 826: a request for someone else's address gets no reply from us.
#[test]
fn arp_request_for_other_address_is_not_answered() {
    let mut l = Lab::bare(&[]);
    l.rx(&arp_frame(
        MAC_P,
        MacAddr::BROADCAST,
        ArpOp::Request,
        MAC_P,
        IP_P,
        MacAddr::ZERO,
        IP_Q,
    ));
    assert!(l.tx().is_empty());
    assert_eq!(l.h.stats().ip.arp_replies_out, 0);
}

/// RFC 826 / RFC 1122 §2.3.2.2: a packet to an unresolved neighbour triggers one
/// broadcast request and waits; a second packet waits without a second request; the
/// reply releases both, in order, to the learned address.
#[test]
fn arp_unresolved_neighbour_queues_until_reply() {
    let mut l = Lab::bare(&[]);
    let u = l.h.udp_bind(sa(IP_A, 7000)).unwrap();
    l.h.udp_send_to(l.now, u, sa(IP_P, 9), b"first").unwrap();
    let out = l.tx();
    assert_eq!(out.len(), 1, "only an ARP request, no IP yet");
    let (eth, req) = parse_arp(&out[0]).expect("ARP request");
    assert_eq!(eth.dst, MacAddr::BROADCAST);
    assert_eq!(req.op, ArpOp::Request);
    assert_eq!((req.sender_mac, req.sender_ip), (MAC_A, IP_A));
    assert_eq!(req.target_ip, IP_P);
    l.h.udp_send_to(l.now, u, sa(IP_P, 9), b"second").unwrap();
    assert!(l.tx().is_empty(), "no second request, no IP frame");

    l.rx(&arp_frame(
        MAC_P,
        MAC_A,
        ArpOp::Reply,
        MAC_P,
        IP_P,
        MAC_A,
        IP_A,
    ));
    let out = l.tx();
    assert_eq!(out.len(), 2);
    let got: Vec<Vec<u8>> = out
        .iter()
        .map(|f| {
            let ip = parse_ip(f).expect("IP frame");
            assert_eq!(ip.eth.dst, MAC_P);
            assert_eq!(ip.eth.src, MAC_A);
            assert_eq!(ip.hdr.dst, IP_P);
            ip.payload[UDP_HEADER_LEN..].to_vec()
        })
        .collect();
    assert_eq!(got, vec![b"first".to_vec(), b"second".to_vec()]);
    assert_eq!(l.h.stats().ip.arp_requests_out, 1);
    // Now resolved: the next packet goes straight out.
    l.h.udp_send_to(l.now, u, sa(IP_P, 9), b"third").unwrap();
    let out = l.tx();
    assert_eq!(out.len(), 1);
    assert_eq!(parse_ip(&out[0]).unwrap().eth.dst, MAC_P);
}

/// RFC 1122 §2.3.2.2 (queue at least one packet, bounded): with `arp_pending_max` 3,
/// the fourth and fifth packets to an unresolved neighbour are dropped (ipOutDiscards).
#[test]
fn arp_pending_queue_is_bounded() {
    let mut l = Lab::bare(&[("arp_pending_max", "3")]);
    let u = l.h.udp_bind(sa(IP_A, 7000)).unwrap();
    for i in 0..5u8 {
        l.h.udp_send_to(l.now, u, sa(IP_P, 9), &[i]).unwrap();
    }
    assert_eq!(arps(&l.tx()).len(), 1);
    assert_eq!(l.h.stats().ip.out_discards, 2);
    l.rx(&arp_frame(
        MAC_P,
        MAC_A,
        ArpOp::Reply,
        MAC_P,
        IP_P,
        MAC_A,
        IP_A,
    ));
    let firsts: Vec<u8> = l
        .tx()
        .iter()
        .map(|f| parse_ip(f).unwrap().payload[UDP_HEADER_LEN])
        .collect();
    assert_eq!(firsts, vec![0, 1, 2], "the first three, in order");
}

/// RFC 1122 §2.3.2.1 (flood prevention, retry bound): `arp_max_retries` requests in all,
/// `arp_retry_interval` apart; then the queued packets are dropped and counted.
#[test]
fn arp_retries_then_drops_queued_packets() {
    let mut l = Lab::bare(&[("arp_max_retries", "3"), ("arp_retry_interval", "500")]);
    let t0 = l.now;
    let u = l.h.udp_bind(sa(IP_A, 7000)).unwrap();
    l.h.udp_send_to(l.now, u, sa(IP_P, 9), b"x").unwrap();
    l.h.udp_send_to(l.now, u, sa(IP_P, 9), b"y").unwrap();
    assert_eq!(arps(&l.tx()).len(), 1, "request 1 at t0");
    assert_eq!(l.h.poll_timeout(), Some(t0 + ms(500)));

    l.advance_to(t0 + ms(499));
    assert!(l.tx().is_empty(), "no retry before the interval");
    l.advance_to(t0 + ms(500));
    let r = arps(&l.tx());
    assert_eq!(r.len(), 1, "request 2");
    assert_eq!((r[0].op, r[0].target_ip), (ArpOp::Request, IP_P));
    l.advance_to(t0 + ms(1000));
    assert_eq!(arps(&l.tx()).len(), 1, "request 3");
    l.advance_to(t0 + ms(1500));
    assert!(l.tx().is_empty(), "no fourth request");
    let s = l.h.stats().ip;
    assert_eq!(s.arp_requests_out, 3);
    assert_eq!(s.arp_resolve_fails, 1);
    assert_eq!(s.out_discards, 2, "both queued packets dropped");
    assert_eq!(l.h.poll_timeout(), None);

    // A late reply finds nothing to release.
    l.rx(&arp_frame(
        MAC_P,
        MAC_A,
        ArpOp::Reply,
        MAC_P,
        IP_P,
        MAC_A,
        IP_A,
    ));
    assert!(l.tx().is_empty());
}

/// RFC 1122 §2.3.2.1 (cache timeout): a resolved entry is used until
/// `arp_cleanup_interval` after it was learned, then resolution starts over.
#[test]
fn arp_entry_expires_after_cleanup_interval() {
    let mut l = Lab::new(&[("arp_cleanup_interval", "10000")]);
    let learned = l.now;
    let u = l.h.udp_bind(sa(IP_A, 7000)).unwrap();
    l.advance_to(learned + ms(9_999));
    l.h.udp_send_to(l.now, u, sa(IP_P, 9), b"a").unwrap();
    let out = l.tx();
    assert_eq!(out.len(), 1);
    assert_eq!(parse_ip(&out[0]).expect("sent directly").eth.dst, MAC_P);

    l.advance_to(learned + ms(10_000));
    l.h.udp_send_to(l.now, u, sa(IP_P, 9), b"b").unwrap();
    let out = l.tx();
    assert_eq!(out.len(), 1);
    let r = arps(&out);
    assert_eq!(r.len(), 1, "expired: a new request instead of the datagram");
    assert_eq!(r[0].target_ip, IP_P);
}

/// ember's check beyond RFC 826 (documented in host/input.rs): an ARP packet whose
/// sender hardware address is not the frame's source is ignored and counted; it
/// neither draws a reply nor creates an entry.
#[test]
fn arp_sender_mac_differing_from_frame_source_is_ignored() {
    let mut l = Lab::bare(&[]);
    l.rx(&arp_frame(
        MAC_OTHER,
        MacAddr::BROADCAST,
        ArpOp::Request,
        MAC_P,
        IP_P,
        MacAddr::ZERO,
        IP_A,
    ));
    assert!(l.tx().is_empty(), "no reply");
    assert_eq!(l.h.stats().ip.arp_in_errors, 1);
    // No entry: a packet to the peer needs a request.
    let u = l.h.udp_bind(sa(IP_A, 7000)).unwrap();
    l.h.udp_send_to(l.now, u, sa(IP_P, 9), b"z").unwrap();
    let r = arps(&l.tx());
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].op, ArpOp::Request);
}

/// RFC 826 "Packet Reception" (a new entry only when we are the target): gratuitous ARP
/// (sender = target = the peer) and a request between two other hosts create no entry.
#[test]
fn unsolicited_arp_creates_no_entry() {
    let mut l = Lab::bare(&[]);
    // Gratuitous request and gratuitous reply, broadcast.
    for op in [ArpOp::Request, ArpOp::Reply] {
        l.rx(&arp_frame(
            MAC_P,
            MacAddr::BROADCAST,
            op,
            MAC_P,
            IP_P,
            MacAddr::ZERO,
            IP_P,
        ));
    }
    // The peer asking for another host.
    l.rx(&arp_frame(
        MAC_P,
        MacAddr::BROADCAST,
        ArpOp::Request,
        MAC_P,
        IP_P,
        MacAddr::ZERO,
        IP_Q,
    ));
    assert!(l.tx().is_empty());
    let u = l.h.udp_bind(sa(IP_A, 7000)).unwrap();
    l.h.udp_send_to(l.now, u, sa(IP_P, 9), b"z").unwrap();
    let out = l.tx();
    assert_eq!(out.len(), 1);
    assert_eq!(arps(&out).len(), 1, "still unresolved: a request goes out");
}

/// RFC 826 "Packet Reception" (merge): an existing entry is updated by any ARP packet
/// from that sender, a gratuitous one included.
#[test]
fn gratuitous_arp_updates_an_existing_entry() {
    let mut l = Lab::new(&[]);
    l.rx(&arp_frame(
        MAC_P2,
        MacAddr::BROADCAST,
        ArpOp::Request,
        MAC_P2,
        IP_P,
        MacAddr::ZERO,
        IP_P,
    ));
    assert!(l.tx().is_empty());
    let u = l.h.udp_bind(sa(IP_A, 7000)).unwrap();
    l.h.udp_send_to(l.now, u, sa(IP_P, 9), b"z").unwrap();
    let out = l.tx();
    assert_eq!(out.len(), 1);
    assert_eq!(parse_ip(&out[0]).unwrap().eth.dst, MAC_P2);
}

/// RFC 5227 §2.4 spirit / ember's check: ARP claiming our own address as sender is
/// ignored and counted (it must not poison our view of ourselves or draw a reply).
#[test]
fn arp_claiming_our_address_is_ignored() {
    let mut l = Lab::bare(&[]);
    l.rx(&arp_frame(
        MAC_P,
        MacAddr::BROADCAST,
        ArpOp::Request,
        MAC_P,
        IP_A,
        MacAddr::ZERO,
        IP_A,
    ));
    assert!(l.tx().is_empty());
    assert_eq!(l.h.stats().ip.arp_in_errors, 1);
}

// =====================================================================================
// Ethernet.
// =====================================================================================

/// RFC 1122 §2.4 (link layer): frames addressed to another station's MAC are not ours.
#[test]
fn frames_for_another_mac_are_ignored() {
    let mut l = Lab::new(&[]);
    let ping = echo_packet(IP_P, IP_A, 1, 1, b"hi");
    l.rx(&eth_frame(MAC_OTHER, MAC_P, ethertype::IPV4, &ping));
    assert!(l.tx().is_empty());
    let s = l.h.stats();
    assert_eq!(s.ip.eth_not_for_us, 1);
    assert_eq!(s.ip.in_receives, 0);
    assert_eq!(s.icmp.in_msgs, 0);
}

/// RFC 1122 §3.3.6: link-layer broadcast frames are accepted (a UDP datagram to our
/// address in a broadcast frame is delivered).
#[test]
fn broadcast_frames_are_accepted() {
    let mut l = Lab::new(&[]);
    let u = l.h.udp_bind(sa(IP_A, 5000)).unwrap();
    let d = udp_packet(IP_P, IP_A, 6000, 5000, b"bcast");
    l.rx(&eth_frame(MacAddr::BROADCAST, MAC_P, ethertype::IPV4, &d));
    let got = l.h.udp_recv_from(u).expect("delivered");
    assert_eq!(got.data, b"bcast");
    assert_eq!(got.from, sa(IP_P, 6000));
    assert_eq!(l.h.stats().udp.in_datagrams, 1);
}

/// ember invariant ("no input can panic"): short, truncated and random frames are
/// counted and dropped; nothing panics and the host still works afterwards.
#[test]
fn garbage_and_truncated_frames_are_counted_never_panic() {
    let mut l = Lab::new(&[]);
    let _lid = l.h.tcp_listen(sa(IP_A, 80), 8).unwrap();
    let _u = l.h.udp_bind(sa(IP_A, 5000)).unwrap();
    // Frames shorter than an Ethernet header.
    for n in 0..ETHERNET_HEADER_LEN {
        l.rx(&vec![0xff; n]);
    }
    assert_eq!(l.h.stats().ip.eth_in_errors, ETHERNET_HEADER_LEN as u64);
    // Unknown ethertype.
    l.rx(&eth_frame(MAC_A, MAC_P, 0x86dd, &[0; 40]));
    assert_eq!(l.h.stats().ip.eth_not_for_us, 1);
    // Every prefix of valid frames of each kind.
    let mut p = TcpPeer::new(4000, 80);
    p.tsval = Some(1);
    let valid = vec![
        peer_frame(&udp_packet(IP_P, IP_A, 1, 5000, &[7; 100])),
        peer_frame(&echo_packet(IP_P, IP_A, 1, 2, &[9; 64])),
        p.syn(),
        arp_frame(
            MAC_P,
            MAC_A,
            ArpOp::Request,
            MAC_P,
            IP_P,
            MacAddr::ZERO,
            IP_A,
        ),
    ];
    let before = l.h.stats().ip;
    for f in &valid {
        for n in ETHERNET_HEADER_LEN..f.len() {
            l.rx(&f[..n]);
        }
    }
    let after = l.h.stats().ip;
    assert!(after.in_hdr_errors > before.in_hdr_errors);
    assert!(after.arp_in_errors > before.arp_in_errors);
    let _ = l.tx();
    // Random mutations of valid frames, and random bytes.
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for i in 0..3000 {
        let mut f = valid[i % valid.len()].clone();
        for _ in 0..1 + rng.below(4) {
            let at =
                ETHERNET_HEADER_LEN + rng.below((f.len() - ETHERNET_HEADER_LEN) as u64) as usize;
            f[at] = rng.next() as u8;
        }
        if rng.below(4) == 0 {
            let n = rng.below(f.len() as u64) as usize;
            f.truncate(n.max(ETHERNET_HEADER_LEN));
        }
        l.rx(&f);
        let junk: Vec<u8> = (0..rng.below(120)).map(|_| rng.next() as u8).collect();
        let ty = if rng.below(2) == 0 {
            ethertype::IPV4
        } else {
            ethertype::ARP
        };
        l.rx(&eth_frame(MAC_A, MAC_P, ty, &junk));
        let _ = l.tx();
    }
    // Still alive: a ping is answered.
    l.rx_ip(&echo_packet(IP_P, IP_A, 77, 1, b"alive"));
    let replies: Vec<_> = icmps(&l.tx())
        .into_iter()
        .filter(|(_, m)| m.ty == icmp_type::ECHO_REPLY && m.word[..2] == 77u16.to_be_bytes())
        .collect();
    assert_eq!(replies.len(), 1);
}

// =====================================================================================
// IPv4 input (RFC 791, RFC 1122 §3.2.1).
// =====================================================================================

/// Sends `pkt` (an echo request, presumably damaged) and says whether an echo reply came.
fn ping_answered(l: &mut Lab, frame: &[u8]) -> bool {
    l.rx(frame);
    icmps(&l.tx())
        .iter()
        .any(|(_, m)| m.ty == icmp_type::ECHO_REPLY)
}

/// RFC 1122 §3.2.1.2: a datagram whose header checksum fails MUST be silently discarded
/// (ipInHdrErrors).
#[test]
fn ip_bad_header_checksum_dropped_and_counted() {
    let mut l = Lab::new(&[]);
    let mut p = echo_packet(IP_P, IP_A, 1, 1, b"x");
    p[10] ^= 0x01;
    assert!(!ping_answered(&mut l, &peer_frame(&p)));
    let s = l.h.stats();
    assert_eq!(s.ip.in_hdr_errors, 1);
    assert_eq!(s.ip.in_delivers, 0);
    assert_eq!(s.icmp.in_msgs, 0);
}

/// RFC 1122 §3.2.1.1 (version MUST be 4) and RFC 791 (IHL >= 5): otherwise discarded
/// (ipInHdrErrors).
#[test]
fn ip_bad_version_or_ihl_dropped_and_counted() {
    let mut l = Lab::new(&[]);
    let mut v6 = echo_packet(IP_P, IP_A, 1, 1, b"x");
    v6[0] = 0x65;
    fix_ip_checksum(&mut v6);
    let mut ihl4 = echo_packet(IP_P, IP_A, 1, 1, b"x");
    ihl4[0] = 0x44;
    let mut ihl_long = echo_packet(IP_P, IP_A, 1, 1, b"x");
    ihl_long[0] = 0x4f; // 60-byte header in a 29-byte datagram
    for p in [v6, ihl4, ihl_long] {
        assert!(!ping_answered(&mut l, &peer_frame(&p)));
    }
    assert_eq!(l.h.stats().ip.in_hdr_errors, 3);
    assert_eq!(l.h.stats().ip.in_delivers, 0);
}

/// RFC 791 / RFC 1122 §3.2.1: a total length beyond the received frame is a truncated
/// datagram and is discarded (ipInHdrErrors); so is a total length below the header.
#[test]
fn ip_total_length_beyond_frame_dropped_and_counted() {
    let mut l = Lab::new(&[]);
    let mut long = echo_packet(IP_P, IP_A, 1, 1, b"0123456789");
    let tl = u16::from_be_bytes([long[2], long[3]]) + 1;
    long[2..4].copy_from_slice(&tl.to_be_bytes());
    fix_ip_checksum(&mut long);
    let mut short = echo_packet(IP_P, IP_A, 1, 1, b"0123456789");
    short[2..4].copy_from_slice(&19u16.to_be_bytes());
    fix_ip_checksum(&mut short);
    assert!(!ping_answered(&mut l, &peer_frame(&long)));
    assert!(!ping_answered(&mut l, &peer_frame(&short)));
    assert_eq!(l.h.stats().ip.in_hdr_errors, 2);
}

/// RFC 1122 §3.2.1.3 (a host MUST silently discard datagrams not addressed to it) and
/// ember does not forward: counted as ipInAddrErrors.
#[test]
fn ip_not_for_us_dropped_as_addr_error() {
    let mut l = Lab::new(&[]);
    let u = l.h.udp_bind(sa(Ipv4Addr::UNSPECIFIED, 5000)).unwrap();
    l.rx_ip(&udp_packet(IP_P, IP_Q, 1000, 5000, b"not yours"));
    l.rx_ip(&udp_packet(
        IP_P,
        Ipv4Addr::new(10, 9, 9, 9),
        1000,
        5000,
        b"x",
    ));
    assert!(l.tx().is_empty(), "no forwarding, no ICMP");
    assert_eq!(
        l.h.udp_recv_from(u).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    let s = l.h.stats().ip;
    assert_eq!(s.in_addr_errors, 2);
    assert_eq!(s.in_delivers, 0);
}

/// RFC 791 §3.1 / RFC 1122 §3.2.1.8: IP options (IHL > 5) are skipped; the payload
/// starts after them.
#[test]
fn ip_options_are_skipped() {
    let mut l = Lab::new(&[]);
    let icmp = icmp_bytes(&Icmpv4Repr::EchoRequest {
        ident: 0x4242,
        seq_no: 3,
        data: b"with options",
    });
    let mut p = vec![0u8; 24 + icmp.len()];
    ip_repr(IP_P, IP_A, ip_proto::ICMP, icmp.len() + 4).emit(&mut p[..20]);
    p[0] = 0x46;
    p[20..24].copy_from_slice(&[1, 1, 1, 0]); // NOP NOP NOP EOL
    p[24..].copy_from_slice(&icmp);
    fix_ip_checksum(&mut p);
    l.rx_ip(&p);
    let out = icmps(&l.tx());
    assert_eq!(out.len(), 1);
    let (ip, m) = &out[0];
    assert_eq!(m.ty, icmp_type::ECHO_REPLY);
    assert_eq!(m.word, [0x42, 0x42, 0, 3]);
    assert_eq!(m.body, b"with options");
    assert_eq!(ip.hdr.dst, IP_P);
}

/// RFC 894 / RFC 1122 §3.2.1: bytes beyond the IP total length (Ethernet padding) are not
/// part of the datagram.
#[test]
fn ethernet_padding_beyond_total_length_is_ignored() {
    let mut l = Lab::new(&[]);
    let u = l.h.udp_bind(sa(IP_A, 5000)).unwrap();
    let mut f = peer_frame(&udp_packet(IP_P, IP_A, 6000, 5000, b"ab"));
    f.resize(60, 0xee); // minimum Ethernet frame, padded with junk
    l.rx(&f);
    assert_eq!(l.h.udp_recv_from(u).unwrap().data, b"ab");
    let mut e = peer_frame(&echo_packet(IP_P, IP_A, 5, 6, b"pad"));
    e.resize(60, 0xee);
    l.rx(&e);
    let out = icmps(&l.tx());
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1.body, b"pad");
    assert_eq!(out[0].0.hdr.payload_len, 8 + 3);
    assert_eq!(l.h.stats().ip.in_hdr_errors, 0);
}

/// RFC 1122 §3.2.1.3: a datagram whose source is broadcast, multicast or 0.0.0.0 (not a
/// unicast host) MUST be discarded; nothing answers it.
#[test]
fn ip_invalid_sources_dropped() {
    let mut l = Lab::new(&[]);
    let u = l.h.udp_bind(sa(IP_A, 5000)).unwrap();
    for src in [
        Ipv4Addr::BROADCAST,
        Ipv4Addr::new(224, 0, 0, 1),
        Ipv4Addr::UNSPECIFIED,
    ] {
        l.rx_ip(&udp_packet(src, IP_A, 6000, 5000, b"bad src"));
        l.rx_ip(&udp_packet(src, IP_A, 6000, 5001, b"closed port"));
        l.rx_ip(&echo_packet(src, IP_A, 1, 1, b"ping"));
    }
    assert!(l.tx().is_empty(), "no reply, no ICMP error");
    assert!(l.h.udp_recv_from(u).is_err());
    let s = l.h.stats();
    assert_eq!(s.ip.in_addr_errors, 9);
    assert_eq!(s.udp.in_datagrams, 0);
    assert_eq!(s.icmp.in_echos, 0);
}

// =====================================================================================
// Reassembly (RFC 791 §3.2, RFC 815, RFC 1122 §3.3.2).
// =====================================================================================

fn big_payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// RFC 791 §3.2: fragments arriving in any order reassemble into the datagram.
#[test]
fn reassembly_in_any_order() {
    let mut l = Lab::new(&[]);
    let u = l.h.udp_bind(sa(IP_A, 5000)).unwrap();
    let data = big_payload(3000);
    let dgram = udp_bytes(IP_P, IP_A, 6000, 5000, &data);
    for (n, order) in [[2usize, 0, 1], [1, 2, 0], [0, 1, 2]].iter().enumerate() {
        let frags = fragments(
            IP_P,
            IP_A,
            ip_proto::UDP,
            100 + n as u16,
            &dgram,
            &[1480, 2960],
        );
        for &i in order {
            l.rx_ip(&frags[i]);
        }
        let got = l.h.udp_recv_from(u).expect("reassembled");
        assert_eq!(got.data, data);
    }
    let s = l.h.stats().ip;
    assert_eq!(s.reasm_reqds, 9);
    assert_eq!(s.reasm_oks, 3);
    assert_eq!(s.reasm_fails, 0);
}

/// RFC 791 §3.2 / RFC 815: a duplicate fragment (network duplication) is tolerated; the
/// datagram is delivered once.
#[test]
fn reassembly_tolerates_duplicates() {
    let mut l = Lab::new(&[]);
    let u = l.h.udp_bind(sa(IP_A, 5000)).unwrap();
    let data = big_payload(2000);
    let dgram = udp_bytes(IP_P, IP_A, 6000, 5000, &data);
    let frags = fragments(IP_P, IP_A, ip_proto::UDP, 7, &dgram, &[1000]);
    l.rx_ip(&frags[0]);
    l.rx_ip(&frags[0]);
    l.rx_ip(&frags[1]);
    assert_eq!(l.h.udp_recv_from(u).unwrap().data, data);
    // A late duplicate of a finished datagram starts a new, incomplete one: no delivery.
    l.rx_ip(&frags[1]);
    assert!(l.h.udp_recv_from(u).is_err());
    assert_eq!(l.h.stats().ip.reasm_oks, 1);
}

/// RFC 5722 spirit for IPv4 / ember's documented policy (reassembly.rs): a fragment that
/// overlaps another without being an exact duplicate discards the whole datagram.
#[test]
fn reassembly_overlap_discards_datagram() {
    let mut l = Lab::new(&[]);
    let u = l.h.udp_bind(sa(IP_A, 5000)).unwrap();
    let data = big_payload(2000);
    let dgram = udp_bytes(IP_P, IP_A, 6000, 5000, &data);
    let frags = fragments(IP_P, IP_A, ip_proto::UDP, 9, &dgram, &[1000]);
    // An overlapping fragment: bytes 992..1504 with MF.
    let r = Ipv4Repr {
        ident: 9,
        frag_offset: 992,
        more_frags: true,
        ..ip_repr(IP_P, IP_A, ip_proto::UDP, 512)
    };
    let overlap = ip_packet(&r, &dgram[992..1504]);
    l.rx_ip(&frags[0]);
    l.rx_ip(&overlap);
    assert_eq!(l.h.stats().ip.reasm_fails, 1);
    l.rx_ip(&frags[1]);
    assert!(l.h.udp_recv_from(u).is_err(), "nothing delivered");
    assert_eq!(l.h.stats().ip.reasm_oks, 0);
}

/// RFC 792 (time exceeded, code 1) / RFC 1122 §3.3.2: when reassembly times out and
/// fragment zero had arrived, an ICMP time exceeded code 1 quoting it is sent.
#[test]
fn reassembly_timeout_sends_time_exceeded_when_first_fragment_arrived() {
    let mut l = Lab::new(&[("ip_reass_timeout", "1000")]);
    let _u = l.h.udp_bind(sa(IP_A, 5000)).unwrap();
    let dgram = udp_bytes(IP_P, IP_A, 6000, 5000, &big_payload(2000));
    let frags = fragments(IP_P, IP_A, ip_proto::UDP, 0x0bad, &dgram, &[1000]);
    let t0 = l.now;
    l.rx_ip(&frags[0]);
    assert_eq!(l.h.poll_timeout(), Some(t0 + ms(1000)));
    l.advance_to(t0 + ms(999));
    assert!(l.tx().is_empty());
    l.advance_to(t0 + ms(1000));
    let out = icmps(&l.tx());
    assert_eq!(out.len(), 1);
    let (ip, m) = &out[0];
    assert_eq!((m.ty, m.code), (icmp_type::TIME_EXCEEDED, 1));
    assert_eq!(ip.hdr.dst, IP_P);
    assert_eq!(ip.hdr.src, IP_A);
    // The quote: fragment zero's header and its first 8 payload bytes (the UDP header).
    assert_eq!(m.body, frags[0][..IPV4_HEADER_LEN + 8].to_vec());
    let s = l.h.stats();
    assert_eq!(s.ip.reasm_fails, 1);
    assert_eq!(s.icmp.out_time_excds, 1);
}

/// RFC 792 / RFC 1122 §3.2.2: without fragment zero there is nothing to quote and no
/// time exceeded is sent.
#[test]
fn reassembly_timeout_without_first_fragment_is_silent() {
    let mut l = Lab::new(&[("ip_reass_timeout", "1000")]);
    let dgram = udp_bytes(IP_P, IP_A, 6000, 5000, &big_payload(2000));
    let frags = fragments(IP_P, IP_A, ip_proto::UDP, 0x0bae, &dgram, &[1000]);
    let t0 = l.now;
    l.rx_ip(&frags[1]);
    l.advance_to(t0 + ms(2000));
    assert!(l.tx().is_empty());
    assert_eq!(l.h.stats().ip.reasm_fails, 1);
    assert_eq!(l.h.stats().icmp.out_time_excds, 0);
}

/// RFC 1122 §3.2.2: no ICMP error about an ICMP error message, even when it timed out
/// in reassembly with fragment zero present.
#[test]
fn reassembly_timeout_of_icmp_error_draws_no_error() {
    let mut l = Lab::new(&[("ip_reass_timeout", "1000")]);
    let quoted = udp_packet(IP_A, IP_P, 5000, 6000, &[0; 600]);
    let err = icmp_bytes(&Icmpv4Repr::DestUnreachable {
        code: icmp_unreach::PORT,
        next_hop_mtu: 0,
        original: &quoted,
    });
    let frags = fragments(IP_P, IP_A, ip_proto::ICMP, 0x0c0c, &err, &[304]);
    let t0 = l.now;
    l.rx_ip(&frags[0]);
    l.advance_to(t0 + ms(2000));
    assert!(icmps(&l.tx()).is_empty(), "no ICMP about an ICMP error");
    assert_eq!(l.h.stats().icmp.out_time_excds, 0);
}

/// RFC 1122 §3.2.2: no ICMP error about a datagram sent to a broadcast address, also
/// when it is a fragmented one that timed out.
#[test]
fn reassembly_timeout_of_broadcast_datagram_draws_no_error() {
    let mut l = Lab::new(&[("ip_reass_timeout", "1000")]);
    let dgram = udp_bytes(IP_P, IP_SUBNET_BCAST, 6000, 5000, &big_payload(2000));
    let frags = fragments(
        IP_P,
        IP_SUBNET_BCAST,
        ip_proto::UDP,
        0x0d0d,
        &dgram,
        &[1000],
    );
    let t0 = l.now;
    l.rx(&eth_frame(
        MacAddr::BROADCAST,
        MAC_P,
        ethertype::IPV4,
        &frags[0],
    ));
    l.advance_to(t0 + ms(2000));
    assert!(icmps(&l.tx()).is_empty(), "no ICMP about a broadcast");
    assert_eq!(l.h.stats().icmp.out_time_excds, 0);
}

/// RFC 1122 §3.3.2 (reassembly resources are bounded) with `ip_reass_queue_bytes`: a
/// flood of first fragments with distinct idents never blocks new datagrams, and the
/// oldest incomplete datagrams are the ones given up.
#[test]
fn reassembly_memory_bound_holds_under_flood() {
    let mut l = Lab::new(&[("ip_reass_queue_bytes", "65536")]);
    let u = l.h.udp_bind(sa(IP_A, 5000)).unwrap();
    let data = big_payload(2000);
    let dgram = udp_bytes(IP_P, IP_A, 6000, 5000, &data);
    // 1000 datagrams' first fragments: ~1.5 MB, far beyond the 64 KiB bound.
    for ident in 0..1000u16 {
        let f = fragments(IP_P, IP_A, ip_proto::UDP, ident, &dgram, &[1480]);
        l.rx_ip(&f[0]);
    }
    // The newest ones are still held: their second fragments complete them.
    for ident in 990..1000u16 {
        let f = fragments(IP_P, IP_A, ip_proto::UDP, ident, &dgram, &[1480]);
        l.rx_ip(&f[1]);
        assert_eq!(l.h.udp_recv_from(u).expect("newest kept").data, data);
    }
    // The oldest ones were given up: their second fragments complete nothing.
    for ident in 0..10u16 {
        let f = fragments(IP_P, IP_A, ip_proto::UDP, ident, &dgram, &[1480]);
        l.rx_ip(&f[1]);
        assert!(l.h.udp_recv_from(u).is_err(), "ident {ident} was evicted");
    }
    // A fresh datagram still reassembles.
    let f = fragments(IP_P, IP_A, ip_proto::UDP, 5000, &dgram, &[1480]);
    l.rx_ip(&f[1]);
    l.rx_ip(&f[0]);
    assert_eq!(l.h.udp_recv_from(u).unwrap().data, data);
    assert_eq!(l.h.stats().ip.reasm_oks, 11);
}

// =====================================================================================
// Fragmentation on send (RFC 791 §3.2, RFC 1122 §3.3.3).
// =====================================================================================

/// RFC 791 §3.2: a 4000-byte UDP datagram (DF clear) on an MTU-1500 link leaves as three
/// fragments (1480, 1480, 1048 payload bytes; MF on all but the last; offsets in 8-byte
/// units; one ident) that the other host reassembles.
#[test]
fn udp_4000_bytes_fragments_in_three_and_reassembles() {
    let mut n = Net::new(&[], &[]);
    let ub = n.b.udp_bind(sa(IP_B, 5000)).unwrap();
    let ua = n.a.udp_bind(sa(IP_A, 6000)).unwrap();
    let data = big_payload(4000);
    assert_eq!(
        n.a.udp_send_to(n.now, ua, sa(IP_B, 5000), &data).unwrap(),
        4000
    );
    n.pump();
    let frags: Vec<IpOut> = n.sent_by('a').iter().filter_map(|f| parse_ip(f)).collect();
    assert_eq!(frags.len(), 3);
    let shape: Vec<(u16, u16, bool)> = frags
        .iter()
        .map(|f| (f.hdr.frag_offset, f.hdr.payload_len, f.hdr.more_frags))
        .collect();
    assert_eq!(
        shape,
        vec![(0, 1480, true), (1480, 1480, true), (2960, 1048, false)]
    );
    assert!(frags.iter().all(|f| f.hdr.ident == frags[0].hdr.ident));
    assert!(frags.iter().all(|f| !f.hdr.dont_frag));
    assert!(frags.iter().all(|f| f.raw.len() <= 1500));
    let got = n.b.udp_recv_from(ub).expect("reassembled at B");
    assert_eq!(got.data, data);
    assert_eq!(got.from, sa(IP_A, 6000));
    let sa_ = n.a.stats().ip;
    assert_eq!((sa_.frag_oks, sa_.frag_creates), (1, 3));
    let sb = n.b.stats().ip;
    assert_eq!((sb.reasm_reqds, sb.reasm_oks), (3, 1));
}

/// RFC 1191 §3 / RFC 9293 §3.7.2 (PMTUD): every TCP segment ember sends carries DF and
/// fits the MTU unfragmented.
#[test]
fn tcp_segments_carry_df() {
    let mut n = Net::new(&[], &[]);
    let (c, _lid, s) = n.connect(80);
    let data = big_payload(20_000);
    let mut off = 0;
    while off < data.len() {
        off += n.a.tcp_send(n.now, c, &data[off..]).unwrap();
        n.run(ms(5));
    }
    n.run(ms(100));
    assert_eq!(recv_all(&mut n.b, n.now, s), data);
    let segs: Vec<_> = n.log.iter().filter_map(|(_, f)| parse_ip(f)).collect();
    assert!(segs.len() > 10);
    for ip in &segs {
        assert_eq!(ip.hdr.protocol, ip_proto::TCP);
        assert!(ip.hdr.dont_frag, "DF set");
        assert!(!ip.hdr.is_fragment());
        assert!(ip.raw.len() <= 1500);
    }
}

// =====================================================================================
// ICMP (RFC 792, RFC 1122 §3.2.2).
// =====================================================================================

/// RFC 792 (echo) / RFC 1122 §3.2.2.6: an echo request draws an echo reply with the same
/// identifier, sequence number and data, from the address it was sent to.
#[test]
fn echo_request_draws_echo_reply() {
    let mut l = Lab::new(&[]);
    let data: Vec<u8> = (0..100).collect();
    l.rx_ip(&echo_packet(IP_P, IP_A, 0xbeef, 0x0102, &data));
    let out = icmps(&l.tx());
    assert_eq!(out.len(), 1);
    let (ip, m) = &out[0];
    assert_eq!((m.ty, m.code), (icmp_type::ECHO_REPLY, 0));
    assert_eq!(m.word, [0xbe, 0xef, 0x01, 0x02]);
    assert_eq!(m.body, data);
    assert_eq!((ip.hdr.src, ip.hdr.dst), (IP_A, IP_P));
    assert_eq!(ip.eth.dst, MAC_P);
    let s = l.h.stats().icmp;
    assert_eq!(
        (s.in_msgs, s.in_echos, s.out_echo_reps, s.out_msgs),
        (1, 1, 1, 1)
    );
}

/// RFC 792 echo between two hosts through the API: `ping` sends the request and
/// `take_ping_replies` yields (and drains) the replies.
#[test]
fn ping_and_take_ping_replies_between_hosts() {
    let mut n = Net::new(&[], &[]);
    n.a.ping(n.now, IP_B, 0x77, 1, b"0123456789").unwrap();
    n.a.ping(n.now, IP_B, 0x77, 2, b"abc").unwrap();
    n.pump();
    let r = n.a.take_ping_replies();
    assert_eq!(r.len(), 2);
    assert_eq!(
        (r[0].from, r[0].ident, r[0].seq_no, r[0].len),
        (IP_B, 0x77, 1, 10)
    );
    assert_eq!((r[1].seq_no, r[1].len), (2, 3));
    assert_eq!(r[0].at, n.now);
    assert!(n.a.take_ping_replies().is_empty(), "drained");
    assert_eq!(n.b.stats().icmp.out_echo_reps, 2);
    assert_eq!(n.a.stats().icmp.in_echo_reps, 2);
}

/// RFC 1122 §3.2.2.6: ICMP echo requests to a broadcast address may be silently
/// discarded; ember does (no smurf amplification).
#[test]
fn broadcast_echo_request_is_not_answered() {
    let mut l = Lab::new(&[]);
    let p = echo_packet(IP_P, IP_SUBNET_BCAST, 1, 1, b"smurf");
    l.rx(&eth_frame(MacAddr::BROADCAST, MAC_P, ethertype::IPV4, &p));
    assert!(l.tx().is_empty());
    assert_eq!(l.h.stats().icmp.in_echos, 1);
}

/// RFC 792 / RFC 1122 §4.1.3.1: UDP to a port with no socket draws port unreachable
/// (type 3 code 3) quoting the offending datagram's IP header and data.
#[test]
fn udp_closed_port_draws_port_unreachable_quoting_datagram() {
    let mut l = Lab::new(&[]);
    let d = udp_packet(IP_P, IP_A, 6000, 5555, b"anyone?");
    l.rx_ip(&d);
    let out = icmps(&l.tx());
    assert_eq!(out.len(), 1);
    let (ip, m) = &out[0];
    assert_eq!(
        (m.ty, m.code),
        (icmp_type::DEST_UNREACHABLE, icmp_unreach::PORT)
    );
    assert_eq!(m.word, [0; 4], "unused field zero");
    assert_eq!(m.body, d, "the whole small datagram is quoted");
    assert_eq!((ip.hdr.src, ip.hdr.dst), (IP_A, IP_P));
    let s = l.h.stats();
    assert_eq!(s.udp.no_ports, 1);
    assert_eq!(s.icmp.out_dest_unreachs, 1);
}

/// RFC 1812 §4.3.2.3 (and RFC 1122 §3.2.2: at least header + 8 bytes): the quote of a
/// large datagram is its beginning, and the error stays within 576 bytes.
#[test]
fn icmp_error_quote_is_bounded_to_576_bytes() {
    let mut l = Lab::new(&[]);
    let d = udp_packet(IP_P, IP_A, 6000, 5555, &big_payload(1200));
    l.rx_ip(&d);
    let out = icmps(&l.tx());
    assert_eq!(out.len(), 1);
    let (ip, m) = &out[0];
    assert!(ip.raw.len() <= 576, "{} bytes", ip.raw.len());
    assert!(m.body.len() >= IPV4_HEADER_LEN + 8);
    assert_eq!(m.body[..], d[..m.body.len()]);
}

/// RFC 1122 §3.2.2.1 / RFC 792: a datagram for a protocol we do not implement draws
/// protocol unreachable (code 2) and is counted (ipInUnknownProtos).
#[test]
fn unknown_protocol_draws_protocol_unreachable() {
    let mut l = Lab::new(&[]);
    let p = ip_packet(&ip_repr(IP_P, IP_A, 253, 12), &[0x11; 12]);
    l.rx_ip(&p);
    let out = icmps(&l.tx());
    assert_eq!(out.len(), 1);
    let (_, m) = &out[0];
    assert_eq!(
        (m.ty, m.code),
        (icmp_type::DEST_UNREACHABLE, icmp_unreach::PROTOCOL)
    );
    assert_eq!(m.body, p);
    assert_eq!(l.h.stats().ip.in_unknown_protos, 1);
}

/// RFC 1122 §3.2.2: received ICMP errors (here naming nothing of ours) never draw an
/// ICMP message in answer, and unknown ICMP types MUST be silently discarded.
#[test]
fn icmp_errors_and_unknown_types_draw_nothing() {
    let mut l = Lab::new(&[]);
    let quoted = udp_packet(IP_A, IP_Q, 5000, 53, b"q");
    l.rx_ip(&icmp_packet(
        IP_P,
        IP_A,
        &Icmpv4Repr::DestUnreachable {
            code: icmp_unreach::PORT,
            next_hop_mtu: 0,
            original: &quoted,
        },
    ));
    l.rx_ip(&icmp_packet(
        IP_P,
        IP_A,
        &Icmpv4Repr::TimeExceeded {
            code: 0,
            original: &quoted,
        },
    ));
    // Type 42 (unknown): RFC 1122 §3.2.2 MUST silently discard.
    let mut unk = icmp_bytes(&Icmpv4Repr::EchoRequest {
        ident: 1,
        seq_no: 1,
        data: b"",
    });
    unk[0] = 42;
    unk[2] = 0;
    unk[3] = 0;
    let c = ember_core::wire::checksum::checksum(&unk);
    unk[2..4].copy_from_slice(&c.to_be_bytes());
    l.rx_ip(&ip_packet(
        &ip_repr(IP_P, IP_A, ip_proto::ICMP, unk.len()),
        &unk,
    ));
    assert!(l.tx().is_empty());
    let s = l.h.stats().icmp;
    assert_eq!(s.in_msgs, 3);
    assert_eq!(s.out_msgs, 0);
    assert_eq!((s.in_dest_unreachs, s.in_time_excds), (1, 1));
}

/// RFC 1122 §3.2.2: no ICMP error for a datagram to a broadcast address or sent as a
/// link-layer broadcast (UDP to a closed port in each case).
#[test]
fn no_icmp_error_for_broadcasts() {
    let mut l = Lab::new(&[]);
    // Limited broadcast, link broadcast.
    let d1 = udp_packet(IP_P, Ipv4Addr::BROADCAST, 6000, 5555, b"1");
    l.rx(&eth_frame(MacAddr::BROADCAST, MAC_P, ethertype::IPV4, &d1));
    // Subnet broadcast in a unicast frame.
    l.rx_ip(&udp_packet(IP_P, IP_SUBNET_BCAST, 6000, 5555, b"2"));
    // Our unicast address in a link-layer broadcast frame.
    let d3 = udp_packet(IP_P, IP_A, 6000, 5555, b"3");
    l.rx(&eth_frame(MacAddr::BROADCAST, MAC_P, ethertype::IPV4, &d3));
    // Unknown protocol to the subnet broadcast.
    l.rx_ip(&ip_packet(&ip_repr(IP_P, IP_SUBNET_BCAST, 253, 4), &[0; 4]));
    assert!(l.tx().is_empty(), "no ICMP error");
    let s = l.h.stats();
    assert_eq!(s.udp.no_ports, 3);
    assert_eq!(s.icmp.out_msgs, 0);
}

/// RFC 1122 §3.2.2 (no error about a non-initial fragment) and RFC 792 (the quote is the
/// datagram's header + its first 64 data bits): a reassembled UDP datagram to a closed
/// port whose last arriving fragment is non-initial draws a port unreachable that quotes
/// the beginning of the datagram (the UDP header), never the non-initial fragment.
#[test]
fn icmp_error_about_reassembled_datagram_quotes_its_start() {
    let mut l = Lab::new(&[]);
    let data = big_payload(2000);
    let dgram = udp_bytes(IP_P, IP_A, 6000, 5555, &data);
    let frags = fragments(IP_P, IP_A, ip_proto::UDP, 0x4444, &dgram, &[1000]);
    l.rx_ip(&frags[0]);
    l.rx_ip(&frags[1]);
    let out = icmps(&l.tx());
    for (_, m) in &out {
        assert_eq!(m.ty, icmp_type::DEST_UNREACHABLE);
        let (q, rest) = Ipv4Repr::parse_quoted(&m.body).expect("quoted header");
        assert_eq!(q.frag_offset, 0, "quote must not be a non-initial fragment");
        assert_eq!(&rest[..8], &dgram[..8], "quote must hold the UDP header");
    }
    assert_eq!(out.len(), 1, "one port unreachable");
}

/// RFC 1122 §3.2.2 (no error about a non-initial fragment): a lone non-initial fragment
/// of an unknown protocol that times out draws no protocol unreachable nor time exceeded.
#[test]
fn lone_non_initial_fragment_draws_no_error() {
    let mut l = Lab::new(&[("ip_reass_timeout", "1000")]);
    let r = Ipv4Repr {
        ident: 0x5151,
        frag_offset: 1480,
        more_frags: false,
        ..ip_repr(IP_P, IP_A, 253, 40)
    };
    l.rx_ip(&ip_packet(&r, &[0; 40]));
    l.advance(ms(2000));
    assert!(l.tx().is_empty());
    assert_eq!(l.h.stats().icmp.out_msgs, 0);
}

/// RFC 1812 §4.3.2.8 / RFC 1122 §3.2.2 (rate limiting): at most `icmp_err_burst` errors
/// at once, then one per `icmp_err_interval`; the rest are counted as icmpOutDrops.
#[test]
fn icmp_errors_are_rate_limited() {
    let mut l = Lab::new(&[("icmp_err_burst", "3"), ("icmp_err_interval", "1000")]);
    for i in 0..5u16 {
        l.rx_ip(&udp_packet(IP_P, IP_A, 6000, 5000 + i, b"x"));
    }
    assert_eq!(icmps(&l.tx()).len(), 3);
    assert_eq!(l.h.stats().icmp.out_rate_limited, 2);
    l.advance(ms(999));
    l.rx_ip(&udp_packet(IP_P, IP_A, 6000, 5100, b"x"));
    assert!(icmps(&l.tx()).is_empty(), "no token yet");
    l.advance(ms(1));
    l.rx_ip(&udp_packet(IP_P, IP_A, 6000, 5101, b"x"));
    l.rx_ip(&udp_packet(IP_P, IP_A, 6000, 5102, b"x"));
    assert_eq!(icmps(&l.tx()).len(), 1, "one token per interval");
    assert_eq!(l.h.stats().icmp.out_rate_limited, 4);
    assert_eq!(l.h.stats().udp.no_ports, 8);
}

// =====================================================================================
// TCP demultiplexing (RFC 9293 §3.10.7.1 CLOSED, §3.10.7.2 LISTEN).
// =====================================================================================

/// RFC 9293 §3.10.7.1: a segment with ACK to a closed port draws <SEQ=SEG.ACK><CTL=RST>.
#[test]
fn closed_port_ack_segment_draws_rst_seq_seg_ack() {
    let mut l = Lab::new(&[]);
    l.rx_ip(&tcp_packet(
        sa(IP_P, 4000),
        sa(IP_A, 81),
        5000,
        0xdead_beef,
        TcpFlags::ACK | TcpFlags::PSH,
        b"data",
    ));
    let out = tcps(&l.tx());
    assert_eq!(out.len(), 1);
    let (ip, t, data) = &out[0];
    assert_eq!(t.flags, TcpFlags::RST);
    assert_eq!(t.seq, 0xdead_beef);
    assert_eq!((t.src_port, t.dst_port), (81, 4000));
    assert!(data.is_empty());
    assert_eq!((ip.hdr.src, ip.hdr.dst), (IP_A, IP_P));
    assert!(ip.hdr.dont_frag);
    let s = l.h.stats().tcp;
    assert_eq!((s.in_closed, s.out_rsts), (1, 1));
}

/// RFC 9293 §3.10.7.1: without ACK, the reply is <SEQ=0><ACK=SEG.SEQ+SEG.LEN><RST,ACK>,
/// SEG.LEN counting SYN, data and FIN.
#[test]
fn closed_port_non_ack_segment_draws_rst_ack() {
    let mut l = Lab::new(&[]);
    l.rx_ip(&tcp_packet(
        sa(IP_P, 4000),
        sa(IP_A, 81),
        0xffff_fff0,
        0,
        TcpFlags::SYN,
        &[],
    ));
    l.rx_ip(&tcp_packet(
        sa(IP_P, 4001),
        sa(IP_A, 81),
        7000,
        0,
        TcpFlags::SYN | TcpFlags::FIN,
        b"hello",
    ));
    l.rx_ip(&tcp_packet(
        sa(IP_P, 4002),
        sa(IP_A, 81),
        9000,
        0,
        TcpFlags::empty(),
        b"abc",
    ));
    let out = tcps(&l.tx());
    assert_eq!(out.len(), 3);
    let got: Vec<(TcpFlags, u32, u32, u16)> = out
        .iter()
        .map(|(_, t, _)| (t.flags, t.seq, t.ack, t.dst_port))
        .collect();
    assert_eq!(
        got,
        vec![
            (TcpFlags::RST | TcpFlags::ACK, 0, 0xffff_fff1, 4000),
            (TcpFlags::RST | TcpFlags::ACK, 0, 7007, 4001),
            (TcpFlags::RST | TcpFlags::ACK, 0, 9003, 4002),
        ]
    );
}

/// RFC 9293 §3.10.7.1: an incoming RST to a closed port is discarded, never answered.
#[test]
fn closed_port_rst_draws_nothing() {
    let mut l = Lab::new(&[]);
    for flags in [TcpFlags::RST, TcpFlags::RST | TcpFlags::ACK] {
        l.rx_ip(&tcp_packet(sa(IP_P, 4000), sa(IP_A, 81), 1, 2, flags, &[]));
    }
    assert!(l.tx().is_empty());
    assert_eq!(l.h.stats().tcp.out_rsts, 0);
}

/// FireEngine classifier behaviour (brief; not in RFC 9293): a segment with URG to a
/// closed port draws no RST.
#[test]
fn closed_port_urg_draws_nothing() {
    let mut l = Lab::new(&[]);
    l.rx_ip(&tcp_packet(
        sa(IP_P, 4000),
        sa(IP_A, 81),
        1,
        2,
        TcpFlags::ACK | TcpFlags::URG,
        b"!",
    ));
    l.rx_ip(&tcp_packet(
        sa(IP_P, 4000),
        sa(IP_A, 81),
        1,
        0,
        TcpFlags::SYN | TcpFlags::URG,
        &[],
    ));
    assert!(l.tx().is_empty());
}

/// `tcp_rst_sent_rate` limits RSTs to the network, not to our own addresses: every
/// local connect to a closed port is refused at once (Linux limits no RST), as in the
/// runtime (`loopback_refusals_are_not_rate_limited` there).
#[test]
fn loopback_refusals_are_not_rate_limited() {
    let mut l = Lab::new(&[("tcp_rst_sent_rate", "5")]);
    for _ in 0..20 {
        let c = l.h.tcp_connect(l.now, sa(IP_A, 81), None).unwrap();
        let t =
            l.h.tcb(c)
                .expect("a connection that was refused is kept until closed");
        assert_eq!(
            (t.state(), t.error()),
            (State::Closed, Some(ember_core::tcp::TcpError::Refused))
        );
        l.h.tcp_close(l.now, c);
    }
    let s = l.h.stats().tcp;
    assert_eq!((s.out_rsts, s.rst_rate_limited, s.in_closed), (20, 0, 20));
}

/// RFC 9293 §3.10.7.1 with `tcp_rst_sent_rate` (Solaris): RSTs for segments to no
/// connection are limited per second; the rest are counted (tcpRstDropped).
#[test]
fn closed_port_rsts_are_rate_limited() {
    let mut l = Lab::new(&[("tcp_rst_sent_rate", "5")]);
    for i in 0..10u16 {
        l.rx_ip(&tcp_packet(
            sa(IP_P, 4000 + i),
            sa(IP_A, 81),
            1,
            0,
            TcpFlags::SYN,
            &[],
        ));
    }
    assert_eq!(tcps(&l.tx()).len(), 5);
    let s = l.h.stats().tcp;
    assert_eq!((s.out_rsts, s.rst_rate_limited, s.in_closed), (5, 5, 10));
    l.advance(Duration::from_secs(1));
    for i in 0..10u16 {
        l.rx_ip(&tcp_packet(
            sa(IP_P, 5000 + i),
            sa(IP_A, 81),
            1,
            0,
            TcpFlags::SYN,
            &[],
        ));
    }
    assert_eq!(tcps(&l.tx()).len(), 5, "refilled after a second");
}

/// RFC 9293 §3.10.7.2 (LISTEN, SYN) and §3.3.2: a SYN to a listener draws SYN,ACK
/// acknowledging SEG.SEQ+1; the third segment completes the handshake and accept()
/// returns the connection with the peer's address.
#[test]
fn listen_accept_returns_peer_address() {
    let mut l = Lab::new(&[]);
    let lid = l.h.tcp_listen(sa(Ipv4Addr::UNSPECIFIED, 80), 8).unwrap();
    assert_eq!(
        l.h.tcp_accept(lid).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    let mut p = TcpPeer::new(40_123, 80);
    let id = establish(&mut l, lid, &mut p);
    let tcb = l.h.tcb(id).unwrap();
    assert_eq!(tcb.state(), State::Established);
    assert_eq!(tcb.remote(), sa(IP_P, 40_123));
    assert_eq!(tcb.local(), sa(IP_A, 80));
    assert!(matches!(l.h.poll_event(), Some(SocketEvent::Listener(x)) if x == lid));
    // Data flows to the accepted connection.
    l.rx(&p.frame(TcpFlags::ACK | TcpFlags::PSH, b"GET /"));
    assert_eq!(recv_all(&mut l.h, l.now, id), b"GET /");
    assert_eq!(l.h.stats().tcp.passive_opens, 1);
}

/// RFC 9293 §3.10.7.2 / listen(2) backlog: when the accept queue is full, new SYNs are
/// dropped without answer (tcpListenDrop).
#[test]
fn listen_backlog_overflow_drops_syns() {
    let mut l = Lab::new(&[]);
    let lid = l.h.tcp_listen(sa(IP_A, 80), 1).unwrap();
    // p2 completes a handshake and is not accepted: the accept queue (backlog 1) is full.
    let mut p2 = TcpPeer::new(40_002, 80);
    l.rx(&p2.syn());
    let out = tcps(&l.tx());
    assert_eq!(out.len(), 1, "SYN,ACK to p2");
    p2.seq += 1;
    p2.ack = out[0].1.seq.wrapping_add(1);
    l.rx(&p2.frame(TcpFlags::ACK, &[]));
    // p2 now waits in the accept queue (backlog 1): p3's SYN is dropped.
    let p3 = TcpPeer::new(40_003, 80);
    l.rx(&p3.syn());
    assert!(l.tx().is_empty(), "SYN dropped, no SYN,ACK, no RST");
    assert_eq!(l.h.stats().tcp.listen_drop, 1);
    // Accepting frees the slot; a retransmitted SYN then succeeds.
    let (_, from) = l.h.tcp_accept(lid).unwrap();
    assert_eq!(from, p2.me);
    l.rx(&p3.syn());
    let out = tcps(&l.tx());
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1.flags, TcpFlags::SYN | TcpFlags::ACK);
}

/// RFC 9293 §3.10.7.2 with `tcp_conn_req_max_q0` (RFC 4987 §3.1): the queue of
/// half-open connections is bounded; SYNs beyond it are dropped (tcpListenDropQ0).
#[test]
fn syn_queue_is_bounded() {
    let mut l = Lab::new(&[("tcp_conn_req_max_q0", "2"), ("tcp_syncookies", "0")]);
    let _lid = l.h.tcp_listen(sa(IP_A, 80), 16).unwrap();
    for port in 1..=3u16 {
        l.rx(&TcpPeer::new(41_000 + port, 80).syn());
    }
    let out = tcps(&l.tx());
    assert_eq!(out.len(), 2, "two SYN,ACKs");
    assert!(out
        .iter()
        .all(|(_, t, _)| t.flags == TcpFlags::SYN | TcpFlags::ACK));
    assert_eq!(l.h.stats().tcp.listen_drop_q0, 1);
    assert_eq!(l.h.conn_count(), 2);
}

/// RFC 4987 §3.6 with `tcp_syncookies=1`: once the half-open queue is full, a SYN is
/// answered with a cookie and no state; the ACK that returns it makes the connection,
/// which the listener accepts like any other. An ACK with a wrong cookie draws the
/// usual RST.
#[test]
fn syn_cookies_when_syn_queue_is_full() {
    let mut l = Lab::new(&[("tcp_conn_req_max_q0", "2")]);
    let lid = l.h.tcp_listen(sa(IP_A, 80), 16).unwrap();
    for port in 1..=2u16 {
        l.rx(&TcpPeer::new(41_000 + port, 80).syn());
    }
    assert_eq!(tcps(&l.tx()).len(), 2);
    let mut p = TcpPeer::new(41_003, 80);
    p.tsval = Some(777);
    l.rx(&p.syn());
    let out = tcps(&l.tx());
    assert_eq!(out.len(), 1, "a SYN,ACK for the third SYN too");
    let (_, synack, _) = &out[0];
    assert_eq!(synack.flags, TcpFlags::SYN | TcpFlags::ACK);
    assert_eq!(synack.ack, p.seq.wrapping_add(1));
    assert_eq!(synack.options.mss, Some(1460));
    assert_eq!(l.h.conn_count(), 2, "the cookie kept no state");
    assert_eq!(l.h.stats().tcp.syncookies_sent, 1);
    assert_eq!(l.h.stats().tcp.listen_drop_q0, 0);

    // A forged ACK (the cookie off by one) is refused with a RST.
    let mut forged = p.clone();
    forged.seq = forged.seq.wrapping_add(1);
    forged.ack = synack.seq.wrapping_add(2);
    forged.saw(synack);
    l.rx(&forged.frame(TcpFlags::ACK, &[]));
    let out2 = tcps(&l.tx());
    assert_eq!(out2.len(), 1);
    assert!(out2[0].1.flags.rst());
    assert_eq!(l.h.stats().tcp.syncookies_failed, 1);
    assert_eq!(l.h.conn_count(), 2);

    // The real ACK, with data on it: the connection exists, is accepted, and reads.
    p.seq = p.seq.wrapping_add(1);
    p.ack = synack.seq.wrapping_add(1);
    p.saw(synack);
    p.tsval = Some(778);
    l.rx(&p.frame(TcpFlags::ACK | TcpFlags::PSH, b"hello"));
    let (id, from) =
        l.h.tcp_accept(lid)
            .expect("the cookie connection is accepted");
    assert_eq!(from, p.me);
    let t = l.h.tcb(id).unwrap().info();
    assert_eq!(t.state, State::Established);
    assert!(t.timestamps, "timestamps kept through the cookie");
    assert_eq!(l.h.stats().tcp.syncookies_recv, 1);
    assert_eq!(recv_all(&mut l.h, l.now, id), b"hello");
    // It answers with data acknowledged at the right place.
    l.h.tcp_send(l.now, id, b"world").unwrap();
    let out3 = tcps(&l.tx());
    let data: Vec<_> = out3.iter().filter(|(_, _, d)| !d.is_empty()).collect();
    assert_eq!(data.len(), 1);
    assert_eq!(data[0].1.seq, synack.seq.wrapping_add(1));
    assert_eq!(data[0].1.ack, p.seq.wrapping_add(5));
    assert_eq!(&data[0].2[..], b"world");
}

/// `tcp_max_conns` reached: a SYN gets no answer at all, not even a cookie (its ACK
/// would find no room), and is counted.
#[test]
fn full_host_sends_no_cookie() {
    let mut l = Lab::new(&[("tcp_max_conns", "1"), ("tcp_syncookies", "2")]);
    let lid = l.h.tcp_listen(sa(IP_A, 80), 16).unwrap();
    let mut p = TcpPeer::new(42_001, 80);
    l.rx(&p.syn());
    let out = tcps(&l.tx());
    assert_eq!(out.len(), 1, "a cookie SYN,ACK while there is room");
    p.seq = p.seq.wrapping_add(1);
    p.ack = out[0].1.seq.wrapping_add(1);
    l.rx(&p.frame(TcpFlags::ACK, &[]));
    assert!(l.h.tcp_accept(lid).is_ok());
    assert_eq!(l.h.conn_count(), 1);
    l.rx(&TcpPeer::new(42_002, 80).syn());
    assert!(l.tx().is_empty(), "no SYN,ACK from a full host");
    assert_eq!(l.h.stats().tcp.conn_limit_drops, 1);
    assert_eq!(l.h.stats().tcp.syncookies_sent, 1);
}

/// TCP_MAXSEG on a listener shapes its cookie SYN,ACKs as it shapes its ordinary ones
/// (Linux clamps both with `tcp_mss_clamp`), and the connection rebuilt from the cookie
/// sends no larger segments; as the runtime's listener
/// (`listener_max_segment_shapes_plain_and_cookie_synacks` there).
#[test]
fn listener_max_segment_shapes_cookie_synacks() {
    for cookies in ["0", "2"] {
        let mut l = Lab::new(&[("tcp_syncookies", cookies)]);
        let lid = l.h.tcp_listen(sa(IP_A, 80), 8).unwrap();
        l.h.tcp_listener_set_max_segment(lid, 536).unwrap();
        let mut peer = TcpPeer::new(4000, 80);
        l.rx(&peer.syn());
        let out = tcps(&l.tx());
        assert_eq!(out.len(), 1, "one SYN,ACK");
        let (_, synack, _) = &out[0];
        assert_eq!(synack.options.mss, Some(536), "tcp_syncookies={cookies}");
        peer.seq = peer.seq.wrapping_add(1);
        peer.ack = synack.seq.wrapping_add(1);
        peer.saw(synack);
        l.rx(&peer.frame(TcpFlags::ACK, &[]));
        let (id, _) = l.h.tcp_accept(lid).expect("accept");
        assert!(l.h.tcb(id).unwrap().info().snd_mss <= 536);
        let s = l.h.stats().tcp;
        assert_eq!(s.syncookies_recv, u64::from(cookies == "2"));
    }
}

/// RFC 4987 §3.6 with `tcp_syncookies=2` between two hosts: every SYN gets a cookie,
/// and the connection still has the window scale, SACK and timestamps the client
/// offered (carried in the timestamp, as Linux does) and carries data both ways.
#[test]
fn syn_cookie_connection_keeps_options_and_carries_data() {
    let mut n = Net::new(&[], &[("tcp_syncookies", "2")]);
    let (c, _lid, s) = n.connect(8080);
    assert_eq!(n.b.stats().tcp.syncookies_sent, 1);
    assert_eq!(n.b.stats().tcp.syncookies_recv, 1);
    let server = n.b.tcb(s).unwrap().info();
    let client = n.a.tcb(c).unwrap().info();
    assert!(server.timestamps && server.sack, "{server:?}");
    assert_eq!(server.snd_wscale, client.rcv_wscale);
    assert_eq!(server.rcv_wscale, client.snd_wscale);
    assert!(client.rcv_wscale > 0);
    let a_data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let b_data: Vec<u8> = (0..300_000u32).map(|i| (i * 13 % 241) as u8).collect();
    let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
    let (mut sa_, mut sb_) = (0, 0);
    for _ in 0..10_000 {
        if sa_ < a_data.len() {
            sa_ += n.a.tcp_send(n.now, c, &a_data[sa_..]).unwrap_or(0);
        }
        if sb_ < b_data.len() {
            sb_ += n.b.tcp_send(n.now, s, &b_data[sb_..]).unwrap_or(0);
        }
        n.run(ms(1));
        got_b.extend(recv_all(&mut n.b, n.now, s));
        got_a.extend(recv_all(&mut n.a, n.now, c));
        if got_a.len() == b_data.len() && got_b.len() == a_data.len() {
            break;
        }
    }
    assert!(got_b == a_data, "A to B byte-exact");
    assert!(got_a == b_data, "B to A byte-exact");
}

/// Whether a segment carries the option `tunable` governs (window scale or timestamps).
fn has_option(t: &TcpRepr, tunable: &str) -> bool {
    if tunable == "tcp_wscale_always" {
        t.options.window_scale.is_some()
    } else {
        t.options.timestamps.is_some()
    }
}

/// RFC 7323 §2.2, §3.2 (an option is in use only if both SYNs carry it): with
/// `tcp_wscale_always` or `tcp_tstamp_always` 0 a stack neither offers nor accepts the
/// option. B has it off; A (defaults) offers it. A's SYN gets a SYN,ACK without it, also
/// when that SYN,ACK is a cookie (`tcp_syncookies=2`); the connection runs without it and
/// carries data both ways; B's own active open does not offer it, and A's answer then
/// does not carry it either.
#[test]
fn window_scaling_and_timestamps_off_are_neither_offered_nor_accepted() {
    for tunable in ["tcp_wscale_always", "tcp_tstamp_always"] {
        for cookies in ["1", "2"] {
            let what = format!("{tunable}=0 tcp_syncookies={cookies}");
            let mut n = Net::new(&[], &[(tunable, "0"), ("tcp_syncookies", cookies)]);
            let (c, _lid, s) = n.connect(8080);
            let from_a = tcps(&n.sent_by('a'));
            let from_b = tcps(&n.sent_by('b'));
            let syn = &from_a[0].1;
            assert_eq!(syn.flags, TcpFlags::SYN, "{what}");
            assert!(has_option(syn, tunable), "{what}: A offers it: {syn:?}");
            let synack = &from_b[0].1;
            assert_eq!(synack.flags, TcpFlags::SYN | TcpFlags::ACK, "{what}");
            assert!(
                !has_option(synack, tunable),
                "{what}: B's SYN,ACK must not carry it: {synack:?}"
            );
            let expect_cookie = u64::from(cookies == "2");
            assert_eq!(n.b.stats().tcp.syncookies_recv, expect_cookie, "{what}");
            for (side, i) in [
                ("A", n.a.tcb(c).unwrap().info()),
                ("B", n.b.tcb(s).unwrap().info()),
            ] {
                assert_eq!(i.state, State::Established, "{what} {side}");
                if tunable == "tcp_wscale_always" {
                    assert!(!i.window_scaling, "{what} {side}: {i:?}");
                    assert_eq!((i.snd_wscale, i.rcv_wscale), (0, 0), "{what} {side}");
                } else {
                    assert!(!i.timestamps, "{what} {side}: {i:?}");
                }
            }
            // Data both ways; no later segment carries the option.
            let a_data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
            let b_data: Vec<u8> = (0..100_000u32).map(|i| (i * 13 % 241) as u8).collect();
            let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
            let (mut sent_a, mut sent_b) = (0, 0);
            for _ in 0..10_000 {
                if sent_a < a_data.len() {
                    sent_a += n.a.tcp_send(n.now, c, &a_data[sent_a..]).unwrap_or(0);
                }
                if sent_b < b_data.len() {
                    sent_b += n.b.tcp_send(n.now, s, &b_data[sent_b..]).unwrap_or(0);
                }
                n.run(ms(1));
                got_b.extend(recv_all(&mut n.b, n.now, s));
                got_a.extend(recv_all(&mut n.a, n.now, c));
                if got_a.len() == b_data.len() && got_b.len() == a_data.len() {
                    break;
                }
            }
            assert!(got_b == a_data, "{what}: A to B byte-exact");
            assert!(got_a == b_data, "{what}: B to A byte-exact");
            let all = tcps(&n.sent_by('a'))
                .into_iter()
                .chain(tcps(&n.sent_by('b')))
                .filter(|(_, t, _)| !t.flags.syn());
            for (_, t, _) in all {
                assert!(!has_option(&t, tunable), "{what}: {t:?}");
            }

            // B opens actively: its SYN has no such option, so A's SYN,ACK has none.
            let before_a = n.sent_by('a').len();
            let before_b = n.sent_by('b').len();
            let lid = n.a.tcp_listen(sa(IP_A, 9090), 16).unwrap();
            let c2 = n.b.tcp_connect(n.now, sa(IP_A, 9090), None).unwrap();
            n.run(ms(10));
            let (s2, _) = n.a.tcp_accept(lid).expect("accept");
            let syn = tcps(&n.sent_by('b')[before_b..])
                .into_iter()
                .find(|(_, t, _)| t.flags == TcpFlags::SYN)
                .expect("B's SYN");
            assert!(!has_option(&syn.1, tunable), "{what}: B's SYN: {:?}", syn.1);
            let synack = tcps(&n.sent_by('a')[before_a..])
                .into_iter()
                .find(|(_, t, _)| t.flags == TcpFlags::SYN | TcpFlags::ACK)
                .expect("A's SYN,ACK");
            assert!(!has_option(&synack.1, tunable), "{what}: {:?}", synack.1);
            let (i, j) = (n.b.tcb(c2).unwrap().info(), n.a.tcb(s2).unwrap().info());
            assert_eq!((i.state, j.state), (State::Established, State::Established));
            assert!(
                !i.window_scaling || tunable != "tcp_wscale_always",
                "{what}"
            );
            assert!(!i.timestamps || tunable != "tcp_tstamp_always", "{what}");
        }
    }
}

/// RFC 9293 §3.10.7.2: in LISTEN, any ACK is bad: <SEQ=SEG.ACK><CTL=RST>.
#[test]
fn ack_to_listener_draws_rst() {
    let mut l = Lab::new(&[]);
    let _lid = l.h.tcp_listen(sa(IP_A, 80), 8).unwrap();
    l.rx_ip(&tcp_packet(
        sa(IP_P, 4000),
        sa(IP_A, 80),
        100,
        0x1234_5678,
        TcpFlags::ACK,
        &[],
    ));
    let out = tcps(&l.tx());
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1.flags, TcpFlags::RST);
    assert_eq!(out[0].1.seq, 0x1234_5678);
    // An RST to a listener is ignored.
    l.rx_ip(&tcp_packet(
        sa(IP_P, 4000),
        sa(IP_A, 80),
        100,
        0,
        TcpFlags::RST,
        &[],
    ));
    assert!(l.tx().is_empty());
    assert_eq!(l.h.conn_count(), 0);
}

/// RFC 9293 §3.10.7.3 (SYN-SENT, RST with acceptable ACK: "error: connection reset"),
/// surfaced as ECONNREFUSED: connecting to a host with no listener fails with
/// `ConnectionRefused`.
#[test]
fn connect_without_listener_is_refused() {
    let mut n = Net::new(&[], &[]);
    let c = n.a.tcp_connect(n.now, sa(IP_B, 81), None).unwrap();
    n.run(ms(10));
    let mut evs = Vec::new();
    while let Some(e) = n.a.poll_event() {
        evs.push(e);
    }
    assert!(evs
        .iter()
        .any(|e| matches!(e, SocketEvent::Tcp(id, ev) if *id == c && ev.contains(Events::ERROR))));
    let mut buf = [0u8; 8];
    let err = n.a.tcp_recv(n.now, c, &mut buf).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused);
    assert_eq!(n.b.stats().tcp.out_rsts, 1);
    // B's RST was <SEQ=0><ACK=ISS+1><RST,ACK>.
    let syn = tcps(&n.sent_by('a'))[0].1;
    let rst = tcps(&n.sent_by('b'))[0].1;
    assert_eq!(rst.flags, TcpFlags::RST | TcpFlags::ACK);
    assert_eq!(rst.ack, syn.seq.wrapping_add(1));
}

/// RFC 4022 tcpAttemptFails: a connection that goes from SYN-SENT straight to CLOSED
/// (refused) is counted.
#[test]
fn refused_connect_counts_attempt_fail() {
    let mut n = Net::new(&[], &[]);
    let _c = n.a.tcp_connect(n.now, sa(IP_B, 81), None).unwrap();
    n.run(ms(10));
    assert_eq!(n.a.stats().tcp.attempt_fails, 1);
}

/// RFC 4022 tcpEstabResets: an established connection reset by the peer (ESTABLISHED →
/// CLOSED) is counted.
#[test]
fn reset_established_counts_estab_reset() {
    let mut l = Lab::new(&[]);
    let lid = l.h.tcp_listen(sa(IP_A, 80), 8).unwrap();
    let mut p = TcpPeer::new(40_000, 80);
    let id = establish(&mut l, lid, &mut p);
    l.rx(&p.frame(TcpFlags::RST, &[]));
    let mut buf = [0u8; 4];
    assert_eq!(
        l.h.tcp_recv(l.now, id, &mut buf).unwrap_err().kind(),
        ErrorKind::ConnectionReset
    );
    assert_eq!(l.h.stats().tcp.estab_resets, 1);
}

/// Drives A (server, port 80) through an active close into TIME-WAIT with the peer
/// using timestamps. Returns the peer and A's ISN and final SND.NXT.
fn into_time_wait(l: &mut Lab, lid: ListenerId) -> (TcpPeer, u32, u32) {
    let mut p = TcpPeer::new(40_500, 80);
    p.tsval = Some(1000);
    l.rx(&p.syn());
    let synack = tcps(&l.tx())[0].1;
    let iss = synack.seq;
    p.seq += 1;
    p.ack = iss.wrapping_add(1);
    p.saw(&synack);
    p.tsval = Some(1001);
    l.rx(&p.frame(TcpFlags::ACK, &[]));
    let (id, _) = l.h.tcp_accept(lid).unwrap();
    l.h.tcp_close(l.now, id);
    let fin = tcps(&l.tx());
    assert_eq!(fin.len(), 1);
    assert!(fin[0].1.flags.fin());
    p.saw(&fin[0].1);
    p.ack = p.ack.wrapping_add(1);
    p.tsval = Some(1002);
    l.rx(&p.frame(TcpFlags::FIN | TcpFlags::ACK, &[]));
    let ack = tcps(&l.tx());
    assert_eq!(ack.len(), 1);
    assert_eq!(ack[0].1.ack, p.seq.wrapping_add(1));
    p.seq = p.seq.wrapping_add(1);
    assert_eq!(l.h.tcb(id).unwrap().state(), State::TimeWait);
    let nxt = l.h.tcb(id).unwrap().snd_nxt().0;
    (p, iss, nxt)
}

/// RFC 6191 §2: a SYN for a connection in TIME-WAIT whose timestamp is newer than the
/// last one seen reopens it; the new incarnation gets a new ISN.
#[test]
fn time_wait_reuse_with_newer_timestamp() {
    let mut l = Lab::new(&[]);
    let lid = l.h.tcp_listen(sa(IP_A, 80), 8).unwrap();
    let (mut p, old_iss, old_nxt) = into_time_wait(&mut l, lid);
    l.advance(ms(500));
    // A new SYN with a sequence number BELOW RCV.NXT: only the timestamp allows it.
    p.seq = p.seq.wrapping_sub(10_000);
    p.tsval = Some(5000);
    l.rx(&p.syn());
    let out = tcps(&l.tx());
    assert_eq!(out.len(), 1);
    let synack = out[0].1;
    assert_eq!(synack.flags, TcpFlags::SYN | TcpFlags::ACK);
    assert_eq!(synack.ack, p.seq.wrapping_add(1));
    assert_ne!(synack.seq, old_iss, "new ISN");
    assert!(
        (synack.seq.wrapping_sub(old_nxt) as i32) > 0,
        "new ISN beyond the old incarnation's sequence space"
    );
    assert_eq!(l.h.stats().tcp.time_wait_reuse, 1);
    // The handshake completes into a fresh connection.
    p.seq = p.seq.wrapping_add(1);
    p.ack = synack.seq.wrapping_add(1);
    p.saw(&synack);
    p.tsval = Some(5001);
    l.rx(&p.frame(TcpFlags::ACK, &[]));
    let (id, from) = l.h.tcp_accept(lid).unwrap();
    assert_eq!(from, p.me);
    assert_eq!(l.h.tcb(id).unwrap().state(), State::Established);
}

/// RFC 6191 §2 (otherwise RFC 9293 TIME-WAIT processing): a SYN with an older timestamp
/// does not reopen the connection.
#[test]
fn time_wait_not_reused_with_older_timestamp() {
    let mut l = Lab::new(&[]);
    let lid = l.h.tcp_listen(sa(IP_A, 80), 8).unwrap();
    let (mut p, _, _) = into_time_wait(&mut l, lid);
    l.advance(ms(500));
    p.seq = p.seq.wrapping_add(100_000);
    p.tsval = Some(900);
    l.rx(&p.syn());
    let out = tcps(&l.tx());
    assert!(out.iter().all(|(_, t, _)| !t.flags.syn()), "no SYN,ACK");
    assert_eq!(l.h.stats().tcp.time_wait_reuse, 0);
    assert_eq!(
        l.h.tcp_accept(lid).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
}

/// RFC 6056 §3.3.3 (and §2.1 range): ephemeral ports differ across simultaneous
/// connections to the same destination and stay within the configured range; when the
/// range is exhausted, connect fails.
#[test]
fn ephemeral_ports_distinct_and_in_range() {
    let mut l = Lab::new(&[
        ("tcp_smallest_anon_port", "50000"),
        ("tcp_largest_anon_port", "50007"),
    ]);
    let mut ports = Vec::new();
    for _ in 0..8 {
        let c = l.h.tcp_connect(l.now, sa(IP_P, 80), None).unwrap();
        ports.push(l.h.tcb(c).unwrap().local().port());
    }
    let syn_ports: Vec<u16> = tcps(&l.tx()).iter().map(|(_, t, _)| t.src_port).collect();
    assert_eq!(syn_ports, ports, "each SYN from its own port");
    let mut sorted = ports.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 8, "distinct: {ports:?}");
    assert!(ports.iter().all(|p| (50_000..=50_007).contains(p)));
    let e = l.h.tcp_connect(l.now, sa(IP_P, 80), None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AddrNotAvailable);
    // Another destination may reuse them.
    let c = l.h.tcp_connect(l.now, sa(IP_P, 81), None).unwrap();
    assert!((50_000..=50_007).contains(&l.h.tcb(c).unwrap().local().port()));
}

/// RFC 6056 §2.1: with the default range, ephemeral ports are within 32768..=65535 and
/// differ between connections.
#[test]
fn ephemeral_ports_default_range() {
    let mut n = Net::new(&[], &[]);
    let _lid = n.b.tcp_listen(sa(IP_B, 80), 64).unwrap();
    let mut ports = Vec::new();
    for _ in 0..20 {
        let c = n.a.tcp_connect(n.now, sa(IP_B, 80), None).unwrap();
        ports.push(n.a.tcb(c).unwrap().local().port());
        n.run(ms(1));
    }
    let mut sorted = ports.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 20);
    assert!(ports.iter().all(|p| *p >= 32_768));
}

// =====================================================================================
// ICMP fragmentation needed (RFC 1191, RFC 5927 §4.1).
// =====================================================================================

/// An established connection from the peer to A:80 with `n` bytes A sent and the peer
/// has not acknowledged. Returns the connection, the peer and A's data segments.
fn with_unacked(l: &mut Lab, n: usize) -> (ConnId, TcpPeer, Vec<Seg>) {
    let lid = l.h.tcp_listen(sa(IP_A, 80), 8).unwrap();
    let mut p = TcpPeer::new(40_000, 80);
    let id = establish(l, lid, &mut p);
    l.h.tcp_send(l.now, id, &big_payload(n)).unwrap();
    let segs = tcps(&l.tx());
    assert!(!segs.is_empty());
    (id, p, segs)
}

fn frag_needed(quote_of: &IpOut, mtu: u16, seq: Option<u32>) -> Vec<u8> {
    let mut q = quote_of.raw[..IPV4_HEADER_LEN + 8].to_vec();
    if let Some(s) = seq {
        q[IPV4_HEADER_LEN + 4..IPV4_HEADER_LEN + 8].copy_from_slice(&s.to_be_bytes());
    }
    peer_frame(&icmp_packet(
        IP_Q,
        IP_A,
        &Icmpv4Repr::DestUnreachable {
            code: icmp_unreach::FRAG_NEEDED,
            next_hop_mtu: mtu,
            original: &q,
        },
    ))
}

/// RFC 1191 §3/§6.1 and RFC 5927 §4.1: a "fragmentation needed" whose quoted sequence
/// number lies in [SND.UNA, SND.NXT) lowers the connection's MSS and the unacknowledged
/// data is resent in segments that fit the new MTU.
#[test]
fn frag_needed_lowers_mss_and_resends_smaller() {
    let mut l = Lab::new(&[]);
    let (id, _p, segs) = with_unacked(&mut l, 3000);
    let first = &segs[0];
    assert_eq!(first.2.len(), 1460);
    let una = l.h.tcb(id).unwrap().snd_una().0;
    assert_eq!(first.1.seq, una);
    l.rx(&frag_needed(&first.0, 1000, None));
    let info = l.h.tcp_info(id).unwrap();
    assert_eq!(info.snd_mss, 960);
    assert_eq!(l.h.stats().icmp.pmtu_updates, 1);
    let resent = tcps(&l.tx());
    assert!(!resent.is_empty(), "resends at once");
    assert_eq!(resent[0].1.seq, una, "from SND.UNA");
    for (ip, _, data) in &resent {
        assert!(ip.raw.len() <= 1000, "{} > 1000", ip.raw.len());
        assert!(data.len() <= 960);
    }
    assert_eq!(resent[0].2.len(), 960);
}

/// RFC 5927 §4.1 (and §5.2): an ICMP error quoting a sequence number outside
/// [SND.UNA, SND.NXT) is ignored (and counted); the MSS stays and nothing is resent.
#[test]
fn frag_needed_outside_window_is_ignored() {
    let mut l = Lab::new(&[]);
    let (id, _p, segs) = with_unacked(&mut l, 3000);
    let nxt = l.h.tcb(id).unwrap().snd_nxt().0;
    let una = l.h.tcb(id).unwrap().snd_una().0;
    for bad in [nxt, nxt.wrapping_add(5000), una.wrapping_sub(1)] {
        l.rx(&frag_needed(&segs[0].0, 1000, Some(bad)));
    }
    assert!(l.tx().is_empty());
    assert_eq!(l.h.tcp_info(id).unwrap().snd_mss, 1460);
    let s = l.h.stats().icmp;
    assert_eq!((s.pmtu_rejected, s.pmtu_updates), (3, 0));
}

/// RFC 1191 §4 (68 is the minimum MTU): a "fragmentation needed" announcing less than 68
/// is not taken.
#[test]
fn frag_needed_below_68_is_rejected() {
    let mut l = Lab::new(&[]);
    let (id, _p, segs) = with_unacked(&mut l, 3000);
    l.rx(&frag_needed(&segs[0].0, 40, None));
    assert_eq!(l.h.tcp_info(id).unwrap().snd_mss, 1460);
    assert_eq!(l.h.stats().icmp.pmtu_rejected, 1);
}

/// The peer's ICMP destination unreachable (`code`) quoting `seg` with its sequence
/// number replaced by `seq`.
fn unreachable_about(seg: &IpOut, code: u8, seq: u32) -> Vec<u8> {
    let mut q = seg.raw[..IPV4_HEADER_LEN + 8].to_vec();
    q[IPV4_HEADER_LEN + 4..IPV4_HEADER_LEN + 8].copy_from_slice(&seq.to_be_bytes());
    peer_frame(&icmp_packet(
        IP_P,
        IP_A,
        &Icmpv4Repr::DestUnreachable {
            code,
            next_hop_mtu: 0,
            original: &q,
        },
    ))
}

/// RFC 1122 §4.2.3.9 (port unreachable is a hard error: abort the connection) with
/// RFC 5927 §4.1 (in SYN-SENT the quoted sequence number must be the ISS): a forged
/// error with another sequence number is ignored, a valid one fails the connect.
#[test]
fn port_unreachable_fails_syn_sent_only_with_valid_seq() {
    let mut l = Lab::new(&[]);
    let c = l.h.tcp_connect(l.now, sa(IP_P, 80), None).unwrap();
    let syn = tcps(&l.tx()).remove(0);
    assert_eq!(syn.1.flags, TcpFlags::SYN);
    l.rx(&unreachable_about(
        &syn.0,
        icmp_unreach::PORT,
        syn.1.seq.wrapping_add(1),
    ));
    assert_eq!(
        l.h.tcb(c).unwrap().state(),
        State::SynSent,
        "forged: ignored"
    );
    l.rx(&unreachable_about(&syn.0, icmp_unreach::PORT, syn.1.seq));
    assert_eq!(l.h.tcb(c).unwrap().state(), State::Closed);
    let mut buf = [0u8; 4];
    let kind = l.h.tcp_recv(l.now, c, &mut buf).unwrap_err().kind();
    assert!(
        matches!(
            kind,
            ErrorKind::HostUnreachable | ErrorKind::ConnectionRefused
        ),
        "{kind:?}"
    );
    assert_eq!(l.h.stats().icmp.in_dest_unreachs, 2);
}

/// RFC 1122 §4.2.3.9: net and host unreachable are soft errors: an established
/// connection MUST NOT be aborted by them.
#[test]
fn soft_unreachable_does_not_abort_established() {
    let mut l = Lab::new(&[]);
    let (id, mut p, segs) = with_unacked(&mut l, 1000);
    for code in [icmp_unreach::NET, icmp_unreach::HOST] {
        l.rx(&unreachable_about(&segs[0].0, code, segs[0].1.seq));
    }
    assert_eq!(l.h.tcb(id).unwrap().state(), State::Established);
    // The connection still works: the peer's ACK and data are taken.
    p.ack = p.ack.wrapping_add(1000);
    l.rx(&p.frame(TcpFlags::ACK | TcpFlags::PSH, b"still here"));
    assert_eq!(recv_all(&mut l.h, l.now, id), b"still here");
}

/// RFC 1122 §4.2.3.10: a SYN addressed to a broadcast address is discarded, even with a
/// listener on the port.
#[test]
fn tcp_syn_to_broadcast_is_discarded() {
    let mut l = Lab::new(&[]);
    let _lid = l.h.tcp_listen(sa(Ipv4Addr::UNSPECIFIED, 80), 8).unwrap();
    let mut p = TcpPeer::new(40_000, 80);
    p.them = sa(IP_SUBNET_BCAST, 80);
    l.rx(&p.syn());
    p.them = sa(IP_A, 80);
    let f = p.syn();
    l.rx(&eth_frame(
        MacAddr::BROADCAST,
        MAC_P,
        ethertype::IPV4,
        &f[ETHERNET_HEADER_LEN..],
    ));
    assert!(l.tx().is_empty(), "no SYN,ACK and no RST");
    assert_eq!(l.h.conn_count(), 0);
}

/// bind(2)/listen(2) semantics: a second listener on the same port (specific or
/// wildcard) fails with EADDRINUSE; port 0 is refused; a foreign address is refused.
#[test]
fn tcp_listen_conflicts() {
    let mut l = Lab::new(&[]);
    let lid = l.h.tcp_listen(sa(IP_A, 80), 8).unwrap();
    for a in [sa(IP_A, 80), sa(Ipv4Addr::UNSPECIFIED, 80)] {
        assert_eq!(
            l.h.tcp_listen(a, 8).unwrap_err().kind(),
            ErrorKind::AddrInUse
        );
    }
    assert_eq!(
        l.h.tcp_listen(sa(IP_A, 0), 8).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        l.h.tcp_listen(sa(IP_Q, 81), 8).unwrap_err().kind(),
        ErrorKind::AddrNotAvailable
    );
    // Closing the listener frees the port; SYNs then meet a closed port (RST).
    l.h.tcp_close_listener(l.now, lid);
    l.rx(&TcpPeer::new(40_000, 80).syn());
    let out = tcps(&l.tx());
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1.flags, TcpFlags::RST | TcpFlags::ACK);
    assert!(l.h.tcp_listen(sa(Ipv4Addr::UNSPECIFIED, 80), 8).is_ok());
}

// =====================================================================================
// UDP (RFC 768, RFC 1122 §4.1).
// =====================================================================================

/// RFC 768: bind, send_to and recv_from between two hosts; the receiver sees the
/// sender's address and port; replies travel back.
#[test]
fn udp_between_two_hosts() {
    let mut n = Net::new(&[], &[]);
    let ub = n.b.udp_bind(sa(Ipv4Addr::UNSPECIFIED, 53)).unwrap();
    let ua = n.a.udp_bind(sa(Ipv4Addr::UNSPECIFIED, 0)).unwrap();
    let a_port = n.a.udp_local_addr(ua).unwrap().port();
    assert_ne!(a_port, 0);
    n.a.udp_send_to(n.now, ua, sa(IP_B, 53), b"query").unwrap();
    n.pump();
    assert!(matches!(n.b.poll_event(), Some(SocketEvent::Udp(x)) if x == ub));
    let d = n.b.udp_recv_from(ub).unwrap();
    assert_eq!(d.data, b"query");
    assert_eq!(d.from, sa(IP_A, a_port));
    assert_eq!(d.to, sa(IP_B, 53));
    n.b.udp_send_to(n.now, ub, d.from, b"answer").unwrap();
    n.pump();
    let r = n.a.udp_recv_from(ua).unwrap();
    assert_eq!((r.data.as_slice(), r.from), (&b"answer"[..], sa(IP_B, 53)));
    assert_eq!(
        n.a.udp_recv_from(ua).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    assert_eq!(n.a.stats().udp.out_datagrams, 1);
    assert_eq!(n.a.stats().udp.in_datagrams, 1);
    assert_eq!(n.b.stats().udp.in_datagrams, 1);
}

/// bind(2) semantics (EADDRINUSE, EADDRNOTAVAIL): the same address twice, a wildcard over
/// a specific one and a specific one over a wildcard conflict; another port does not; a
/// foreign address cannot be bound.
#[test]
fn udp_bind_conflicts() {
    let mut l = Lab::new(&[]);
    let _a = l.h.udp_bind(sa(IP_A, 5000)).unwrap();
    assert_eq!(
        l.h.udp_bind(sa(IP_A, 5000)).unwrap_err().kind(),
        ErrorKind::AddrInUse
    );
    assert_eq!(
        l.h.udp_bind(sa(Ipv4Addr::UNSPECIFIED, 5000))
            .unwrap_err()
            .kind(),
        ErrorKind::AddrInUse
    );
    let _w = l.h.udp_bind(sa(Ipv4Addr::UNSPECIFIED, 5001)).unwrap();
    assert_eq!(
        l.h.udp_bind(sa(IP_A, 5001)).unwrap_err().kind(),
        ErrorKind::AddrInUse
    );
    assert!(l.h.udp_bind(sa(IP_A, 5002)).is_ok());
    assert_eq!(
        l.h.udp_bind(sa(IP_Q, 5003)).unwrap_err().kind(),
        ErrorKind::AddrNotAvailable
    );
    // Closing frees the address.
    l.h.udp_close(_a);
    assert!(l.h.udp_bind(sa(IP_A, 5000)).is_ok());
}

/// RFC 1122 §4.1.3.5 / Linux UDP_MIB_RCVBUFERRORS: a socket's receive queue is bounded;
/// datagrams that do not fit are dropped and counted (udpInOverflows).
#[test]
fn udp_receive_queue_is_bounded() {
    let mut l = Lab::new(&[]);
    let u = l.h.udp_bind(sa(IP_A, 5000)).unwrap();
    let payload = vec![0x5a; 1400];
    let fit = ember_core::udp::DEFAULT_RCVBUF / 1400;
    for _ in 0..fit + 20 {
        l.rx_ip(&udp_packet(IP_P, IP_A, 6000, 5000, &payload));
    }
    let s = l.h.stats().udp;
    assert_eq!(s.in_datagrams, fit as u64);
    assert_eq!(s.rcvbuf_errors, 20);
    assert!(l.tx().is_empty(), "overflow is not a port unreachable");
    let mut n = 0;
    while l.h.udp_recv_from(u).is_ok() {
        n += 1;
    }
    assert_eq!(n, fit);
    // Room again after reading.
    l.rx_ip(&udp_packet(IP_P, IP_A, 6000, 5000, &payload));
    assert!(l.h.udp_recv_from(u).is_ok());
}

/// RFC 768 / RFC 1122 §4.1.3.4: over IPv4 a checksum field of 0 means "no checksum" and
/// the datagram is accepted.
#[test]
fn udp_checksum_zero_accepted() {
    let mut l = Lab::new(&[]);
    let u = l.h.udp_bind(sa(IP_A, 5000)).unwrap();
    let mut d = udp_packet(IP_P, IP_A, 6000, 5000, b"nocsum");
    d[IPV4_HEADER_LEN + 6] = 0;
    d[IPV4_HEADER_LEN + 7] = 0;
    l.rx_ip(&d);
    assert_eq!(l.h.udp_recv_from(u).unwrap().data, b"nocsum");
}

/// RFC 1122 §4.1.3.4: a UDP datagram whose checksum fails MUST be silently discarded
/// (udpInErrors), without a port unreachable even when no socket listens.
#[test]
fn udp_bad_checksum_dropped_silently() {
    let mut l = Lab::new(&[]);
    let u = l.h.udp_bind(sa(IP_A, 5000)).unwrap();
    let mut d = udp_packet(IP_P, IP_A, 6000, 5000, b"corrupt");
    *d.last_mut().unwrap() ^= 0x40;
    l.rx_ip(&d);
    let mut d2 = udp_packet(IP_P, IP_A, 6000, 5999, b"corrupt");
    *d2.last_mut().unwrap() ^= 0x40;
    l.rx_ip(&d2);
    assert!(l.h.udp_recv_from(u).is_err());
    assert!(l.tx().is_empty());
    let s = l.h.stats().udp;
    assert_eq!((s.in_errors, s.in_datagrams, s.no_ports), (2, 0, 0));
}

// =====================================================================================
// Counters (RFC 4293 IP-MIB, RFC 4022 TCP-MIB, RFC 4113 UDP-MIB).
// =====================================================================================

/// RFC 4293 / RFC 4022 counters over a ping exchange: each side's IP, ICMP and ARP
/// counters move by exactly what crossed the link; the kstat view reports them by name.
#[test]
fn counters_move_for_a_ping_exchange() {
    let mut n = Net::new(&[], &[]);
    n.a.ping(n.now, IP_B, 1, 1, b"count me").unwrap();
    n.pump();
    let a = n.a.stats();
    let b = n.b.stats();
    assert_eq!((a.ip.arp_requests_out, a.ip.arp_in), (1, 1));
    assert_eq!((b.ip.arp_replies_out, b.ip.arp_in), (1, 1));
    assert_eq!(
        (a.ip.out_requests, a.ip.in_receives, a.ip.in_delivers),
        (1, 1, 1)
    );
    assert_eq!(
        (b.ip.out_requests, b.ip.in_receives, b.ip.in_delivers),
        (1, 1, 1)
    );
    assert_eq!((a.icmp.out_echos, a.icmp.in_echo_reps), (1, 1));
    assert_eq!((a.icmp.out_msgs, a.icmp.in_msgs), (1, 1));
    assert_eq!((b.icmp.in_echos, b.icmp.out_echo_reps), (1, 1));
    let k = b.icmp.kstat();
    assert!(k.contains(&("icmpInEchos", 1)));
    assert!(k.contains(&("icmpOutEchoReps", 1)));
    assert!(a.ip.kstat().contains(&("ipOutRequests", 1)));
}

/// RFC 4022: tcpActiveOpens / tcpPassiveOpens / tcpCurrEstab over a connection's life,
/// and tcpOutSegs on one side equals tcpInSegs on the other on a lossless link.
#[test]
fn tcp_counters_over_a_connection() {
    let mut n = Net::new(&[], &[]);
    let (c, _lid, s) = n.connect(80);
    assert_eq!(n.a.stats().tcp.active_opens, 1);
    assert_eq!(n.b.stats().tcp.passive_opens, 1);
    assert_eq!(n.a.stats().tcp.curr_estab, 1);
    assert_eq!(n.b.stats().tcp.curr_estab, 1);
    n.a.tcp_send(n.now, c, b"hello").unwrap();
    n.run(ms(100));
    assert_eq!(recv_all(&mut n.b, n.now, s), b"hello");
    n.a.tcp_close(n.now, c);
    n.run(ms(100));
    n.b.tcp_close(n.now, s);
    n.run(ms(100));
    assert_eq!(n.a.stats().tcp.curr_estab, 0);
    assert_eq!(n.b.stats().tcp.curr_estab, 0);
    let a = n.a.stats().tcp;
    let b = n.b.stats().tcp;
    let a_tcp = tcps(&n.sent_by('a')).len() as u64;
    let b_tcp = tcps(&n.sent_by('b')).len() as u64;
    assert_eq!(a.out_segs, a_tcp);
    assert_eq!(b.out_segs, b_tcp);
    assert_eq!(a.in_segs, b_tcp);
}

/// RFC 4022 tcpInSegs ("total number of segments received, including those received in
/// error"): segments to a closed port and a SYN to a listener are received segments too.
#[test]
fn tcp_in_segs_counts_every_received_segment() {
    let mut l = Lab::new(&[]);
    l.rx_ip(&tcp_packet(
        sa(IP_P, 4000),
        sa(IP_A, 81),
        1,
        0,
        TcpFlags::SYN,
        &[],
    ));
    assert_eq!(l.h.stats().tcp.in_segs, 1, "segment to a closed port");
    let _lid = l.h.tcp_listen(sa(IP_A, 80), 8).unwrap();
    l.rx(&TcpPeer::new(4001, 80).syn());
    assert_eq!(l.h.stats().tcp.in_segs, 2, "SYN to a listener");
}

/// RFC 4022 tcpInErrs (RFC 9293 §3.1: a bad checksum MUST be discarded): a segment with
/// a bad checksum draws nothing and is counted.
#[test]
fn tcp_bad_checksum_counted_and_dropped() {
    let mut l = Lab::new(&[]);
    let _lid = l.h.tcp_listen(sa(IP_A, 80), 8).unwrap();
    let mut f = TcpPeer::new(4001, 80).syn();
    let n = f.len();
    f[n - 1] ^= 0x01; // last option byte
    l.rx(&f);
    assert!(l.tx().is_empty(), "no SYN,ACK, no RST");
    assert_eq!(l.h.stats().tcp.in_errs, 1);
    assert_eq!(l.h.conn_count(), 0);
}

/// RFC 4293 ipOutNoRoutes: a datagram from a bound socket with no route is refused with
/// ENETUNREACH and counted.
#[test]
fn no_route_from_bound_socket_is_counted() {
    let mut l = Lab::new(&[]);
    let bound = l.h.udp_bind(sa(IP_A, 5000)).unwrap();
    let e =
        l.h.udp_send_to(l.now, bound, sa(Ipv4Addr::new(10, 1, 1, 1), 9), b"x")
            .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NetworkUnreachable);
    assert_eq!(l.h.stats().ip.out_no_routes, 1);
    assert_eq!(l.h.stats().udp.out_datagrams, 0);
    assert!(l.tx().is_empty());
}

/// RFC 4293 ipOutNoRoutes ("IP datagrams discarded because no route could be found"):
/// also counted when the lookup fails while choosing the source address (unbound
/// socket, ping, connect).
#[test]
fn no_route_during_source_selection_is_counted() {
    let mut l = Lab::new(&[]);
    let far = Ipv4Addr::new(10, 1, 1, 1);
    let wild = l.h.udp_bind(sa(Ipv4Addr::UNSPECIFIED, 5001)).unwrap();
    let e = l.h.udp_send_to(l.now, wild, sa(far, 9), b"x").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NetworkUnreachable);
    assert_eq!(l.h.stats().ip.out_no_routes, 1);
    let e = l.h.ping(l.now, far, 1, 1, b"x").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NetworkUnreachable);
    assert_eq!(l.h.stats().ip.out_no_routes, 2);
    let e = l.h.tcp_connect(l.now, sa(far, 80), None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NetworkUnreachable);
    assert_eq!(l.h.stats().ip.out_no_routes, 3);
}

// =====================================================================================
// Loopback (RFC 1122 §3.2.1.3: datagrams to our own addresses stay inside).
// =====================================================================================

/// RFC 1122 §3.3.5 spirit / ember (like Linux `lo`): a TCP connection from a host to its
/// own address works without a single frame on the wire.
#[test]
fn loopback_tcp_to_own_address() {
    let mut l = Lab::bare(&[]);
    let lid = l.h.tcp_listen(sa(IP_A, 7000), 8).unwrap();
    let c = l.h.tcp_connect(l.now, sa(IP_A, 7000), None).unwrap();
    assert_eq!(l.h.tcb(c).unwrap().state(), State::Established);
    let (s, peer) = l.h.tcp_accept(lid).unwrap();
    assert_eq!(peer, l.h.tcb(c).unwrap().local());
    assert_eq!(*peer.ip(), IP_A);
    let data = big_payload(100_000);
    let mut off = 0;
    let mut got = Vec::new();
    for _ in 0..1000 {
        if off < data.len() {
            off += l.h.tcp_send(l.now, c, &data[off..]).unwrap_or(0);
        }
        got.extend(recv_all(&mut l.h, l.now, s));
        l.advance(ms(1));
        if got.len() == data.len() {
            break;
        }
    }
    assert_eq!(got, data);
    l.h.tcp_send(l.now, s, b"pong").unwrap();
    assert_eq!(recv_all(&mut l.h, l.now, c), b"pong");
    assert!(l.tx().is_empty(), "nothing on the wire");
}

/// Loopback through 127.0.0.1: connect, exchange and close cleanly.
#[test]
fn loopback_tcp_via_127_0_0_1() {
    let mut l = Lab::bare(&[]);
    let lid = l.h.tcp_listen(sa(Ipv4Addr::UNSPECIFIED, 7001), 8).unwrap();
    let c =
        l.h.tcp_connect(l.now, sa(Ipv4Addr::LOCALHOST, 7001), None)
            .unwrap();
    let (s, peer) = l.h.tcp_accept(lid).unwrap();
    assert_eq!(*peer.ip(), Ipv4Addr::LOCALHOST);
    l.h.tcp_send(l.now, c, b"ping").unwrap();
    assert_eq!(recv_all(&mut l.h, l.now, s), b"ping");
    l.h.tcp_close(l.now, c);
    l.advance(ms(10));
    let mut buf = [0u8; 4];
    assert_eq!(l.h.tcp_recv(l.now, s, &mut buf).unwrap(), 0, "EOF");
    l.h.tcp_close(l.now, s);
    l.advance(Duration::from_secs(120));
    assert_eq!(l.h.conn_count(), 0, "both ends gone after TIME-WAIT");
    assert!(l.tx().is_empty());
}

/// RFC 1122 §2.3.2.1 (flush stale ARP entries on higher-layer advice) and RFC 9293
/// MUST-20 (negative advice to IP at R1): a poisoned ARP entry sends our SYNs to the
/// wrong station; after the third retransmission timeout the entry is dropped and the
/// next SYN is preceded by a fresh ARP request, whose answer lets the SYN reach the peer.
#[test]
fn r1_negative_advice_re_resolves_a_poisoned_neighbour() {
    let mut l = Lab::new(&[]);
    // An unsolicited update (e.g. a corrupted or spoofed ARP packet) repoints the peer.
    l.rx(&arp_frame(
        MAC_P2,
        MacAddr::BROADCAST,
        ArpOp::Request,
        MAC_P2,
        IP_P,
        MacAddr::ZERO,
        IP_P,
    ));
    assert!(l.tx().is_empty());
    let _c = l.h.tcp_connect(l.now, sa(IP_P, 80), None).unwrap();
    let first = l.tx();
    assert_eq!(tcps(&first).len(), 1);
    assert_eq!(
        parse_ip(&first[0]).unwrap().eth.dst,
        MAC_P2,
        "SYN follows the poisoned entry"
    );
    // RTOs at 1 s, 3 s (2 s later): still sent to the wrong station, no ARP.
    for step in [1, 2] {
        l.advance(Duration::from_secs(step));
        let out = l.tx();
        assert!(arps(&out).is_empty(), "no re-resolution before R1");
        assert_eq!(parse_ip(&out[0]).unwrap().eth.dst, MAC_P2);
    }
    // The third RTO (4 s later) reaches R1: the entry is forgotten and re-resolved.
    l.advance(Duration::from_secs(4));
    let out = l.tx();
    let req = arps(&out);
    assert_eq!(
        req.len(),
        1,
        "an ARP request after negative advice: {out:?}"
    );
    assert_eq!(req[0].target_ip, IP_P);
    assert!(tcps(&out).is_empty(), "the SYN waits for the answer");
    // The real peer answers; the held SYN goes to it.
    l.rx(&arp_frame(
        MAC_P,
        MAC_A,
        ArpOp::Reply,
        MAC_P,
        IP_P,
        MAC_A,
        IP_A,
    ));
    let out = l.tx();
    assert_eq!(tcps(&out).len(), 1);
    assert_eq!(parse_ip(&out[0]).unwrap().eth.dst, MAC_P);
}

// -------------------------------------------------------------------------------------
// RFC 9293 Appendix B rows not covered above.
// -------------------------------------------------------------------------------------

/// MUST-48: the application can specify the DiffServ field of what it sends (IP_TOS),
/// for TCP and for UDP.
#[test]
fn tos_is_carried_on_tcp_and_udp() {
    let mut l = Lab::new(&[]);
    let c = l.h.tcp_connect(l.now, sa(IP_P, 80), None).unwrap();
    let syn = tcps(&l.tx());
    assert_eq!(syn[0].0.hdr.dscp_ecn, 0, "default DiffServ field is 0");
    l.h.tcp_with(l.now, c, |t| t.set_tos(0xb8)).unwrap();
    l.advance(Duration::from_secs(1));
    let again = tcps(&l.tx());
    assert_eq!(again.len(), 1, "the retransmitted SYN");
    assert_eq!(again[0].0.hdr.dscp_ecn, 0xb8);
    let u = l.h.udp_bind(sa(IP_A, 7000)).unwrap();
    l.h.udp_set_tos(u, 0x28).unwrap();
    l.h.udp_send_to(l.now, u, sa(IP_P, 9), b"x").unwrap();
    let out = l.tx();
    assert_eq!(parse_ip(&out[0]).unwrap().hdr.dscp_ecn, 0x28);
}

/// MUST-46: an OPEN to a broadcast or multicast address is refused (and nothing is sent).
#[test]
fn connect_to_broadcast_or_multicast_is_refused() {
    let mut l = Lab::new(&[]);
    for dst in [
        Ipv4Addr::BROADCAST,
        Ipv4Addr::new(224, 0, 0, 1),
        Ipv4Addr::UNSPECIFIED,
    ] {
        let e = l.h.tcp_connect(l.now, sa(dst, 80), None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{dst}");
    }
    assert!(l.tx().is_empty());
}

/// MUST-43: an OPEN may name the local address (and port); the SYN comes from it. A
/// local address that is not ours is refused (MUST-46 "reject OPEN to invalid address").
#[test]
fn connect_from_explicit_local_address() {
    let mut l = Lab::new(&[]);
    l.h.tcp_connect(l.now, sa(IP_P, 80), Some(sa(IP_A, 4444)))
        .unwrap();
    let syn = tcps(&l.tx());
    assert_eq!(syn[0].0.hdr.src, IP_A);
    assert_eq!(syn[0].1.src_port, 4444);
    let e =
        l.h.tcp_connect(l.now, sa(IP_P, 81), Some(sa(IP_Q, 4444)))
            .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AddrNotAvailable);
    // The same local port towards another remote socket is a different connection.
    l.h.tcp_connect(l.now, sa(IP_P, 81), Some(sa(IP_A, 4444)))
        .unwrap();
    assert_eq!(tcps(&l.tx()).len(), 1);
}

/// MUST-41, MUST-42: several LISTENs on one port (one per local address) coexist and a
/// passive OPEN does not interfere with others: one listener serves two peers at once.
#[test]
fn listens_on_one_port_coexist_and_serve_several_peers() {
    let mut l = Lab::new(&[]);
    let ip2 = Ipv4Addr::new(198, 18, 1, 1);
    l.h.add_interface(Interface {
        mac: MAC_B,
        addr: ip2,
        prefix_len: 24,
        mtu: 1500,
    })
    .unwrap();
    let l1 = l.h.tcp_listen(sa(IP_A, 80), 8).unwrap();
    let _l2 = l.h.tcp_listen(sa(ip2, 80), 8).unwrap();
    let mut p1 = TcpPeer::new(40_001, 80);
    let mut p2 = TcpPeer::new(40_002, 80);
    let c1 = establish(&mut l, l1, &mut p1);
    let c2 = establish(&mut l, l1, &mut p2);
    assert_ne!(c1, c2);
    l.rx(&p1.frame(TcpFlags::ACK | TcpFlags::PSH, b"one"));
    l.rx(&p2.frame(TcpFlags::ACK | TcpFlags::PSH, b"two"));
    assert_eq!(recv_all(&mut l.h, l.now, c1), b"one");
    assert_eq!(recv_all(&mut l.h, l.now, c2), b"two");
}

/// MUST-49: the TTL of what ember sends is configurable (`ip_def_ttl`).
#[test]
fn ttl_is_configurable() {
    let mut l = Lab::new(&[("ip_def_ttl", "17")]);
    l.h.tcp_connect(l.now, sa(IP_P, 80), None).unwrap();
    assert_eq!(tcps(&l.tx())[0].0.hdr.ttl, 17);
    l.h.set_param("ip_def_ttl", "200").unwrap();
    let u = l.h.udp_bind(sa(IP_A, 7000)).unwrap();
    l.h.udp_send_to(l.now, u, sa(IP_P, 9), b"x").unwrap();
    assert_eq!(parse_ip(&l.tx()[0]).unwrap().hdr.ttl, 200);
}

/// MUST-55 (source quench is silently discarded) and MUST-56 (no abort on time
/// exceeded or parameter problem): the connection carries on untouched.
#[test]
fn source_quench_time_exceeded_and_param_problem_do_not_abort() {
    let mut l = Lab::new(&[]);
    let (id, mut p, segs) = with_unacked(&mut l, 1000);
    let before = l.h.tcp_info(id).unwrap();
    let q = segs[0].0.raw[..IPV4_HEADER_LEN + 8].to_vec();
    let mut msgs = Vec::new();
    for (ty, code) in [(4u8, 0u8), (11, 0), (12, 0)] {
        // type, code, checksum, unused/pointer, then the quote
        let mut m = vec![ty, code, 0, 0, 0, 0, 0, 0];
        m.extend_from_slice(&q);
        let c = ember_core::wire::checksum::checksum(&m);
        m[2..4].copy_from_slice(&c.to_be_bytes());
        msgs.push(m);
    }
    for m in msgs {
        let mut r = ip_repr(IP_Q, IP_A, ip_proto::ICMP, m.len());
        r.ttl = 64;
        l.rx(&peer_frame(&ip_packet(&r, &m)));
    }
    assert!(l.tx().is_empty(), "nothing answers an ICMP error");
    let after = l.h.tcp_info(id).unwrap();
    assert_eq!(after.state, State::Established);
    assert_eq!((after.cwnd, after.ssthresh), (before.cwnd, before.ssthresh));
    p.ack = p.ack.wrapping_add(1000);
    l.rx(&p.frame(TcpFlags::ACK | TcpFlags::PSH, b"fine"));
    assert_eq!(recv_all(&mut l.h, l.now, id), b"fine");
}
