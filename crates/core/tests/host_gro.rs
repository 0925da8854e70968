//! `Host::receive_batch` with receive-side coalescing (`ip_gro`, `ip::gro`): a host fed
//! frames by hand, the test playing a peer at 198.18.0.9. Consecutive in-order segments
//! of a batch reach TCP as one (one ACK for them, counters per wire segment); everything
//! else in the batch takes its usual path; `ip_gro = 0` and single frames change nothing;
//! an external TCP gets the merged segment as one upcall that says what it stands for.

use ember_core::host::{
    ConnId, Interface, IpLayer, SegmentBytes, TcpIcmpError, TcpSegmentIn, TcpSink,
};
use ember_core::ip::IfaceId;
use ember_core::time::Instant;
use ember_core::wire::{
    ethertype, ip_proto, ArpOp, ArpRepr, EthernetRepr, Icmpv4Repr, Ipv4Repr, MacAddr, TcpFlags,
    TcpOptions, TcpRepr, UdpRepr, ARP_LEN, ETHERNET_HEADER_LEN, IPV4_HEADER_LEN, UDP_HEADER_LEN,
};
use ember_core::{Host, Params};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

const IF0: IfaceId = IfaceId(0);
const MAC_A: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x0a]);
const MAC_P: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x99]);
const IP_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const IP_P: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 9);
const PORT: u16 = 5001;
const PEER_PORT: u16 = 40_000;
/// Payload of a full segment with timestamps.
const G: usize = 1448;

fn eth(ty: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0; ETHERNET_HEADER_LEN + payload.len()];
    EthernetRepr {
        dst: MAC_A,
        src: MAC_P,
        ethertype: ty,
    }
    .emit(&mut f);
    f[ETHERNET_HEADER_LEN..].copy_from_slice(payload);
    f
}

fn ip_frame(protocol: u8, payload: &[u8]) -> Vec<u8> {
    let r = Ipv4Repr {
        src: IP_P,
        dst: IP_A,
        protocol,
        ttl: 64,
        dscp_ecn: 0,
        ident: 7,
        dont_frag: true,
        more_frags: false,
        frag_offset: 0,
        payload_len: payload.len() as u16,
    };
    let mut p = vec![0; IPV4_HEADER_LEN + payload.len()];
    r.emit(&mut p);
    p[IPV4_HEADER_LEN..].copy_from_slice(payload);
    eth(ethertype::IPV4, &p)
}

/// The test's side of the connection.
struct Peer {
    seq: u32,
    ack: u32,
    tsval: u32,
    tsecr: u32,
}

impl Peer {
    fn frame(&self, seq: u32, flags: TcpFlags, data: &[u8]) -> Vec<u8> {
        let mut options = TcpOptions::default();
        options.timestamps = Some((self.tsval, self.tsecr));
        if flags.syn() {
            options.mss = Some(1460);
            options.sack_permitted = true;
            options.window_scale = Some(7);
        }
        let r = TcpRepr {
            src_port: PEER_PORT,
            dst_port: PORT,
            seq,
            ack: self.ack,
            flags,
            window: 65_535,
            urgent: 0,
            options,
        };
        let hl = r.header_len();
        let mut b = vec![0; hl + data.len()];
        b[hl..].copy_from_slice(data);
        r.emit(&mut b, IP_P, IP_A);
        ip_frame(ip_proto::TCP, &b)
    }

    /// `pieces` data segments from `self.seq` on (advancing it).
    fn data(&mut self, pieces: &[usize]) -> Vec<Vec<u8>> {
        pieces
            .iter()
            .map(|&n| {
                let f = self.frame(self.seq, TcpFlags::ACK, &stream(self.seq, n));
                self.seq = self.seq.wrapping_add(n as u32);
                f
            })
            .collect()
    }
}

fn stream(seq: u32, n: usize) -> Vec<u8> {
    (0..n).map(|i| (seq as usize + i) as u8 ^ 0x5a).collect()
}

struct Lab {
    h: Host,
    now: Instant,
}

/// What the host sent: TCP segments (header, payload length) and other frames.
fn sent_tcp(h: &mut Host) -> Vec<(TcpRepr, usize)> {
    let mut v = Vec::new();
    while let Some(f) = h.poll_transmit() {
        let (e, rest) = EthernetRepr::parse(&f.data).unwrap();
        if e.ethertype != ethertype::IPV4 {
            continue;
        }
        let (ip, payload) = Ipv4Repr::parse(rest, true).unwrap();
        if ip.protocol == ip_proto::TCP {
            let (t, d) = TcpRepr::parse(payload, ip.src, ip.dst, true).unwrap();
            v.push((t, d.len()));
        }
    }
    v
}

impl Lab {
    fn new(tweak: &[(&str, &str)]) -> Lab {
        let mut p = Params::default();
        p.set_many(tweak).unwrap();
        let mut h = Host::new(p, [0x5a; 16]);
        h.add_interface(Interface {
            mac: MAC_A,
            addr: IP_A,
            prefix_len: 24,
            mtu: 1500,
        })
        .unwrap();
        let now = Instant::from_secs(1);
        // The peer introduces itself (ARP).
        let mut a = vec![0; ARP_LEN];
        ArpRepr {
            op: ArpOp::Request,
            sender_mac: MAC_P,
            sender_ip: IP_P,
            target_mac: MacAddr::ZERO,
            target_ip: IP_A,
        }
        .emit(&mut a);
        h.receive(now, IF0, &eth(ethertype::ARP, &a));
        while h.poll_transmit().is_some() {}
        Lab { h, now }
    }

    /// A listener and an accepted connection from the peer.
    fn connect(&mut self) -> (ConnId, Peer) {
        let lid = self
            .h
            .tcp_listen(SocketAddrV4::new(IP_A, PORT), 16)
            .unwrap();
        let mut peer = Peer {
            seq: 1_000_000,
            ack: 0,
            tsval: 100,
            tsecr: 0,
        };
        let syn = peer.frame(peer.seq, TcpFlags::SYN, &[]);
        self.h.receive(self.now, IF0, &syn);
        let out = sent_tcp(&mut self.h);
        let synack = out[0].0;
        peer.seq += 1;
        peer.ack = synack.seq.wrapping_add(1);
        peer.tsecr = synack.options.timestamps.unwrap().0;
        peer.tsval += 1;
        let ack = peer.frame(peer.seq, TcpFlags::ACK, &[]);
        self.h.receive(self.now, IF0, &ack);
        assert!(sent_tcp(&mut self.h).is_empty());
        let (id, _) = self.h.tcp_accept(lid).unwrap();
        (id, peer)
    }

    fn read(&mut self, id: ConnId) -> Vec<u8> {
        let mut v = Vec::new();
        let mut buf = vec![0; 65_536];
        while let Ok(n) = self.h.tcp_recv(self.now, id, &mut buf) {
            if n == 0 {
                break;
            }
            v.extend_from_slice(&buf[..n]);
        }
        v
    }

    fn advance(&mut self, d: Duration) {
        let t = self.now + d;
        while let Some(x) = self.h.poll_timeout() {
            if x > t {
                break;
            }
            self.now = self.now.max(x);
            self.h.handle_timeout(self.now);
        }
        self.now = t;
    }
}

/// One batch of in-order segments: with GRO they reach TCP as one, and the peer sees the
/// same ACKs as without it (the pieces' owed ACKs, then the last), the same data and the
/// same counters of wire segments.
#[test]
fn a_batch_of_in_order_segments_reaches_tcp_as_one() {
    let mut results = Vec::new();
    let mut acked = Vec::new();
    for gro in ["1", "0"] {
        let mut l = Lab::new(&[("ip_gro", gro)]);
        let (id, mut peer) = l.connect();
        let start = peer.seq;
        let batch = peer.data(&[G; 10]);
        l.h.receive_batch(l.now, IF0, &batch);
        let acks = sent_tcp(&mut l.h);
        assert!(!acks.is_empty(), "ip_gro={gro}: an ACK at once");
        let last = acks.last().unwrap().0;
        assert_eq!(last.ack, peer.seq, "ip_gro={gro}: everything acknowledged");
        let data = l.read(id);
        assert_eq!(data, stream(start, 10 * G));
        let s = l.h.stats();
        let info = l.h.tcb(id).unwrap().info();
        let numbers: Vec<(u32, u16)> = acks.iter().map(|a| (a.0.ack, a.0.window)).collect();
        acked.push(numbers);
        results.push((
            acks.len(),
            s.ip.gro_merged,
            s.ip.gro_segs_out,
            info.stats.segs_in,
        ));
        assert_eq!(info.rcv_mss, G as u32, "ip_gro={gro}");
        let names: Vec<_> = s.ip.kstat().into_iter().map(|(k, _)| k).collect();
        assert!(names.contains(&"groMerged") && names.contains(&"groSegsOut"));
    }
    let (on, off) = (results[0], results[1]);
    assert_eq!(off.0, 10, "quick ACKs: one per segment without GRO");
    assert_eq!(on.0, 10, "the same ACKs with GRO");
    assert_eq!(
        acked[0], acked[1],
        "acknowledgment numbers and windows as without GRO"
    );
    assert_eq!((on.1, on.2), (9, 1), "9 merged into 1");
    assert_eq!((off.1, off.2), (0, 0));
    assert_eq!(on.3, off.3, "segs_in counts wire segments");
}

/// Non-TCP frames of the batch are handled as they come and in their order; TCP
/// segments of the flow still reach TCP in order around them.
#[test]
fn other_frames_in_a_batch_keep_their_path() {
    let mut l = Lab::new(&[]);
    let (id, mut peer) = l.connect();
    let start = peer.seq;
    let u = l.h.udp_bind(SocketAddrV4::new(IP_A, 53)).unwrap();
    let udp = |data: &[u8]| {
        let mut b = vec![0; UDP_HEADER_LEN + data.len()];
        b[UDP_HEADER_LEN..].copy_from_slice(data);
        UdpRepr {
            src_port: 9999,
            dst_port: 53,
        }
        .emit(&mut b, IP_P, IP_A);
        ip_frame(ip_proto::UDP, &b)
    };
    let echo = {
        let m = Icmpv4Repr::EchoRequest {
            ident: 1,
            seq_no: 2,
            data: b"ping",
        };
        let mut b = vec![0; m.buffer_len()];
        m.emit(&mut b);
        ip_frame(ip_proto::ICMP, &b)
    };
    let d = peer.data(&[G; 4]);
    let batch = vec![
        d[0].clone(),
        udp(b"one"),
        d[1].clone(),
        echo,
        d[2].clone(),
        udp(b"two"),
        d[3].clone(),
    ];
    l.h.receive_batch(l.now, IF0, &batch);
    assert_eq!(l.h.udp_recv_from(u).unwrap().data, b"one");
    assert_eq!(l.h.udp_recv_from(u).unwrap().data, b"two");
    assert_eq!(l.read(id), stream(start, 4 * G));
    let s = l.h.stats();
    assert_eq!(s.icmp.out_echo_reps, 1);
    assert_eq!(s.ip.gro_merged, 3);
}

/// A corrupted segment in a batch is counted as a checksum error (tcpInErrs) as
/// without GRO, is never merged, and the segments around it still arrive once it is
/// sent again.
#[test]
fn a_corrupted_segment_is_counted_as_without_gro() {
    for gro in ["1", "0"] {
        let mut l = Lab::new(&[("ip_gro", gro)]);
        let (id, mut peer) = l.connect();
        let start = peer.seq;
        let mut batch = peer.data(&[G; 5]);
        let good = batch[2].clone();
        let k = batch[2].len() - 1;
        batch[2][k] ^= 0x01;
        l.h.receive_batch(l.now, IF0, &batch);
        assert_eq!(l.h.stats().tcp.in_errs, 1, "ip_gro={gro}");
        assert_eq!(l.read(id), stream(start, 2 * G));
        l.h.receive_batch(l.now, IF0, [&good]);
        assert_eq!(l.read(id), stream(start + 2 * G as u32, 3 * G));
        sent_tcp(&mut l.h);
        l.advance(Duration::from_millis(500));
    }
}

/// A batch of one frame, or `ip_gro = 0`, is exactly `receive`.
#[test]
fn single_frames_take_the_plain_path() {
    let mut l = Lab::new(&[]);
    let (id, mut peer) = l.connect();
    for f in peer.data(&[G; 3]) {
        l.h.receive_batch(l.now, IF0, [f]);
    }
    assert_eq!(sent_tcp(&mut l.h).len(), 3);
    assert_eq!(l.read(id).len(), 3 * G);
    let s = l.h.stats();
    assert_eq!((s.ip.gro_merged, s.ip.gro_segs_out), (0, 0));
}

/// What an IP layer hands to a TCP of its own (the runtime's squeues): each segment with
/// what it stands for, collected.
#[derive(Default)]
struct Collect(Vec<(Ipv4Addr, Ipv4Addr, Vec<u8>, bool, u16, u16)>);

impl TcpSink for Collect {
    fn tcp_segment(&mut self, _ip: &mut IpLayer, _now: Instant, s: TcpSegmentIn<'_>) {
        let bytes = s.bytes.to_vec();
        self.0
            .push((s.src, s.dst, bytes, s.csum_ok, s.segs, s.gso_size));
    }

    fn tcp_icmp_error(&mut self, _ip: &mut IpLayer, _now: Instant, e: TcpIcmpError) {
        panic!("no ICMP error expected: {e:?}");
    }
}

/// An IP layer driven without the host's TCP gets the merged segment as one delivery
/// that says what it stands for; a single frame's segment is unverified and stands for
/// itself.
#[test]
fn an_ip_layer_delivers_the_merged_segment_with_its_description() {
    let now = Instant::from_secs(1);
    let mut ip = ip_layer();
    let mut tcp = Collect::default();
    let mut peer = Peer {
        seq: 5000,
        ack: 1,
        tsval: 1,
        tsecr: 1,
    };
    let batch = peer.data(&[G, G, G, 100]);
    ip.receive_batch(now, IF0, &batch, &mut tcp);
    assert_eq!(tcp.0.len(), 1);
    let (src, dst, segment, csum_ok, segs, gso_size) = &tcp.0[0];
    assert_eq!((*src, *dst), (IP_P, IP_A));
    assert_eq!((*csum_ok, *segs, *gso_size), (true, 4, G as u16));
    let (t, data) = TcpRepr::parse(segment, IP_P, IP_A, false).unwrap();
    assert_eq!(t.seq, 5000);
    assert_eq!(data, &stream(5000, 3 * G + 100)[..]);
    let one = peer.data(&[10]);
    ip.receive(now, IF0, &one[0], &mut tcp);
    assert_eq!(tcp.0.len(), 2);
    let (_, _, _, csum_ok, segs, gso_size) = &tcp.0[1];
    assert_eq!((*csum_ok, *segs, *gso_size), (false, 1, 0));
}

/// An IP layer with one interface (MAC_A, IP_A/24), driven without the host's TCP.
fn ip_layer() -> IpLayer {
    let mut ip = IpLayer::new(Params::default(), [0x5a; 16]);
    ip.add_interface(Interface {
        mac: MAC_A,
        addr: IP_A,
        prefix_len: 24,
        mtu: 1500,
    })
    .unwrap();
    ip
}

/// What keeps a segment's bytes (the runtime's squeues): a frame given as a shared
/// buffer reaches it as a slice of that buffer, with no copy; a borrowed frame, and a
/// segment GRO merged, as what they are.
#[derive(Default)]
struct Keep(Vec<(bool, bytes::Bytes)>);

impl TcpSink for Keep {
    fn tcp_segment(&mut self, _ip: &mut IpLayer, _now: Instant, s: TcpSegmentIn<'_>) {
        let shared = matches!(s.bytes, SegmentBytes::Shared(_));
        self.0.push((shared, s.bytes.into_bytes()));
    }

    fn tcp_icmp_error(&mut self, _ip: &mut IpLayer, _now: Instant, e: TcpIcmpError) {
        panic!("no ICMP error expected: {e:?}");
    }
}

#[test]
fn a_shared_frame_reaches_tcp_as_a_slice_of_itself() {
    let now = Instant::from_secs(1);
    let mut ip = ip_layer();
    let mut peer = Peer {
        seq: 5000,
        ack: 1,
        tsval: 1,
        tsecr: 1,
    };
    // One frame, as a shared buffer: a slice of it.
    let frame = bytes::Bytes::from(peer.data(&[100]).remove(0));
    let mut tcp = Keep::default();
    ip.receive_batch_bytes(now, IF0, [frame.clone()], &mut tcp);
    assert_eq!(tcp.0.len(), 1);
    let (shared, seg) = &tcp.0[0];
    assert!(*shared);
    let (start, end) = (
        frame.as_ptr() as usize,
        frame.as_ptr() as usize + frame.len(),
    );
    assert!(seg.as_ptr() as usize >= start && seg.as_ptr() as usize + seg.len() <= end);
    assert_eq!(&frame[frame.len() - seg.len()..], &seg[..]);
    let (t, data) = TcpRepr::parse(seg, IP_P, IP_A, true).unwrap();
    assert_eq!((t.seq, data), (5000, &stream(5000, 100)[..]));
    // The same frame lent as a slice: borrowed, kept as a copy with the same bytes.
    let mut lent = Keep::default();
    ip.receive_batch(now, IF0, [&frame[..]], &mut lent);
    assert!(!lent.0[0].0);
    assert_eq!(lent.0[0].1, *seg);
    // Several frames: GRO merges them into a buffer of its own, shared as it is.
    let mut merged = Keep::default();
    let batch: Vec<bytes::Bytes> = peer
        .data(&[G, G, 100])
        .into_iter()
        .map(Into::into)
        .collect();
    ip.receive_batch_bytes(now, IF0, batch, &mut merged);
    assert_eq!(merged.0.len(), 1);
    assert!(merged.0[0].0);
    let (_, data) = TcpRepr::parse(&merged.0[0].1, IP_P, IP_A, false).unwrap();
    assert_eq!(data.len(), 2 * G + 100);
}

/// A duplicate of the peer's SYN and its final ACK in one receive batch (as a device poll
/// returns them, and as the simulator's `dup_delay` makes them arrive): the connection is
/// established and queued for accept, and nothing answers with a RST. Before, the host
/// flushed after every segment, so the duplicate's rewound SND.NXT never met the ACK here
/// (the runtime, flushing once per batch, reset the peer).
#[test]
fn a_duplicate_syn_and_the_final_ack_in_one_batch_establish() {
    for gro in ["1", "0"] {
        let mut l = Lab::new(&[("ip_gro", gro)]);
        let lid = l.h.tcp_listen(SocketAddrV4::new(IP_A, PORT), 16).unwrap();
        let mut peer = Peer {
            seq: 1_000_000,
            ack: 0,
            tsval: 100,
            tsecr: 0,
        };
        let syn = peer.frame(peer.seq, TcpFlags::SYN, &[]);
        l.h.receive_batch(l.now, IF0, [&syn]);
        let synack = sent_tcp(&mut l.h)[0].0;
        peer.seq += 1;
        peer.ack = synack.seq.wrapping_add(1);
        peer.tsecr = synack.options.timestamps.unwrap().0;
        l.now += Duration::from_millis(3);
        peer.tsval += 3;
        let ack = peer.frame(peer.seq, TcpFlags::ACK, &[]);
        l.h.receive_batch(l.now, IF0, [&syn, &ack]);
        let out = sent_tcp(&mut l.h);
        assert!(
            out.iter().all(|(t, _)| !t.flags.rst()),
            "ip_gro={gro}: {out:?}"
        );
        let (id, _) = l.h.tcp_accept(lid).expect("established");
        assert_eq!(
            l.h.tcb(id).unwrap().state(),
            ember_core::tcp::State::Established
        );
        assert_eq!(l.h.stats().tcp.out_rsts, 0);
    }
}
