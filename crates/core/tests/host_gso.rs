//! Large TCP segments through a whole `Host` (RFC 9293 over RFC 791/826): split in
//! software (GSO) before an interface that cannot segment, handed whole to one that can
//! (TSO), kept in order through ARP's pending queue, and never fragmented.

use ember_core::host::{ConnId, Frame, Interface};
use ember_core::ip::gso::gso_split;
use ember_core::ip::IfaceId;
use ember_core::time::Instant;
use ember_core::wire::{ethertype, EthernetRepr, Ipv4Repr, MacAddr, TcpRepr};
use ember_core::{Host, Params};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

const IF0: IfaceId = IfaceId(0);
const IP_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

fn host(last: u8, ip: Ipv4Addr, tweak: &[(&str, &str)]) -> Host {
    let mut p = Params::default();
    p.set_many(tweak).unwrap();
    let mut h = Host::new(p, [last; 16]);
    h.add_interface(Interface {
        mac: MacAddr([2, 0, 0, 0, 0, last]),
        addr: ip,
        prefix_len: 24,
        mtu: 1500,
    })
    .unwrap();
    h
}

/// Two hosts on one zero-delay link; frames from `a` are logged. A frame for a TSO
/// interface is split here, as the device would.
struct Net {
    a: Host,
    b: Host,
    now: Instant,
    from_a: Vec<Frame>,
}

impl Net {
    fn new(ta: &[(&str, &str)]) -> Net {
        Net {
            a: host(0x0a, IP_A, ta),
            b: host(0x0b, IP_B, &[]),
            now: Instant::from_secs(1),
            from_a: Vec::new(),
        }
    }

    fn pump(&mut self) {
        for _ in 0..1_000_000 {
            let mut moved = false;
            while let Some(f) = self.a.poll_transmit() {
                if f.gso_size > 0 {
                    let mut pieces = Vec::new();
                    gso_split(&f.data, usize::from(f.gso_size), &mut pieces).unwrap();
                    for p in pieces {
                        self.b.receive(self.now, IF0, &p);
                    }
                } else {
                    self.b.receive(self.now, IF0, &f.data);
                }
                self.from_a.push(f);
                moved = true;
            }
            while let Some(f) = self.b.poll_transmit() {
                self.a.receive(self.now, IF0, &f.data);
                moved = true;
            }
            if !moved {
                return;
            }
        }
        panic!("the link never went quiet");
    }

    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        self.pump();
        loop {
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
    }

    /// Connects a to b; returns (a's connection, b's accepted connection).
    fn connect(&mut self) -> (ConnId, ConnId) {
        let l = self.b.tcp_listen(SocketAddrV4::new(IP_B, 80), 8).unwrap();
        let c = self
            .a
            .tcp_connect(self.now, SocketAddrV4::new(IP_B, 80), None)
            .unwrap();
        self.run(Duration::from_millis(10));
        let (s, _) = self.b.tcp_accept(l).unwrap();
        (c, s)
    }

    /// Sends `data` from a, closes, and returns what b read until end of stream.
    fn transfer(&mut self, c: ConnId, s: ConnId, data: &[u8]) -> Vec<u8> {
        let mut off = 0;
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65536];
        let mut closed = false;
        for _ in 0..10_000 {
            while off < data.len() {
                match self.a.tcp_send(self.now, c, &data[off..]) {
                    Ok(n) if n > 0 => off += n,
                    _ => break,
                }
            }
            if off == data.len() && !closed {
                self.a.tcp_close(self.now, c);
                closed = true;
            }
            self.run(Duration::from_millis(1));
            loop {
                match self.b.tcp_recv(self.now, s, &mut buf) {
                    Ok(0) => return got,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(_) => break,
                }
            }
            self.run(Duration::from_millis(1));
        }
        panic!(
            "transfer did not finish: {} of {} bytes",
            got.len(),
            data.len()
        );
    }
}

fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 13 + i / 251) as u8).collect()
}

/// (IP identification, TCP seq, payload length) of a's TCP frames.
fn tcp_frames(frames: &[Frame]) -> Vec<(u16, u32, usize)> {
    let mut v = Vec::new();
    for f in frames {
        let Ok(eth) = EthernetRepr::parse(&f.data) else {
            continue;
        };
        if eth.0.ethertype != ethertype::IPV4 {
            continue;
        }
        let (ip, seg) = Ipv4Repr::parse(&f.data[14..], true).unwrap();
        let (tcp, payload) = TcpRepr::parse(seg, ip.src, ip.dst, f.gso_size == 0).unwrap();
        v.push((ip.ident, tcp.seq, payload.len()));
    }
    v
}

#[test]
fn large_segments_are_split_before_an_interface_without_tso() {
    let mut net = Net::new(&[]);
    let (c, s) = net.connect();
    let d = data(300_000);
    assert_eq!(net.transfer(c, s, &d), d);
    let st = net.a.stats();
    assert!(st.ip.gso_splits > 0, "{:?}", st.ip);
    assert!(st.ip.gso_segs >= 2 * st.ip.gso_splits);
    assert_eq!((st.ip.frag_oks, st.ip.frag_fails), (0, 0));
    let kstat = st.ip.kstat();
    assert!(kstat.contains(&("gsoSplits", st.ip.gso_splits)));
    assert!(kstat.contains(&("gsoSegs", st.ip.gso_segs)));
    // Every frame fits the MTU and every checksum holds (`tcp_frames` verifies).
    assert!(net
        .from_a
        .iter()
        .all(|f| f.gso_size == 0 && f.data.len() <= 1514));
    let frames = tcp_frames(&net.from_a);
    // Identifications are not reused by the pieces: a's datagrams number consecutively.
    for w in frames.windows(2) {
        assert_eq!(w[1].0, w[0].0.wrapping_add(1), "{w:?}");
    }
    // A's counters count what went on the wire.
    let info = net.a.tcb(c).map(|t| t.info());
    if let Some(i) = info {
        assert_eq!(i.stats.segs_out as usize, frames.len());
    }
}

#[test]
fn a_tso_interface_gets_large_segments_whole() {
    let mut net = Net::new(&[]);
    net.a.set_iface_tso(IF0, true);
    let (c, s) = net.connect();
    let d = data(200_000);
    assert_eq!(net.transfer(c, s, &d), d);
    assert_eq!(net.a.stats().ip.gso_splits, 0);
    let large: Vec<_> = net.from_a.iter().filter(|f| f.gso_size > 0).collect();
    assert!(!large.is_empty());
    assert!(large
        .iter()
        .all(|f| f.data.len() > 1514 && f.gso_size <= 1460));
}

#[test]
fn lso_off_sends_no_large_segment() {
    let mut net = Net::new(&[("ip_lso_outbound", "0")]);
    net.a.set_iface_tso(IF0, true);
    let (c, s) = net.connect();
    let d = data(100_000);
    assert_eq!(net.transfer(c, s, &d), d);
    assert!(net
        .from_a
        .iter()
        .all(|f| f.gso_size == 0 && f.data.len() <= 1514));
    assert_eq!(net.a.stats().ip.gso_splits, 0);
}

#[test]
fn pieces_stay_in_order_behind_arp() {
    // One pending packet per unresolved neighbour, and the ARP entry expires after 1 s:
    // the first flight after an idle second waits for ARP as one large segment, then
    // leaves as its pieces in order, with nothing lost.
    let mut net = Net::new(&[("arp_cleanup_interval", "1000"), ("arp_pending_max", "1")]);
    let (c, s) = net.connect();
    net.run(Duration::from_secs(2));
    let before = net.from_a.len();
    let mss = net.a.tcb(c).unwrap().mss() as usize;
    let d = data(10 * mss);
    assert_eq!(net.transfer(c, s, &d), d);
    let after = &net.from_a[before..];
    assert_eq!(
        EthernetRepr::parse(&after[0].data).unwrap().0.ethertype,
        ethertype::ARP
    );
    let segs = tcp_frames(after);
    let data_segs: Vec<_> = segs.iter().filter(|x| x.2 > 0).collect();
    assert_eq!(data_segs.len(), 10, "{segs:?}");
    for w in data_segs.windows(2) {
        assert_eq!(w[1].1, w[0].1.wrapping_add(w[0].2 as u32));
    }
    let st = net.a.stats();
    assert!(st.ip.gso_splits >= 1);
    // Only the bare FIN written right after the data can have found the one pending slot
    // taken (and been retransmitted); each data piece left exactly once (above).
    assert!(st.tcp.retrans_segs <= 1, "{:?}", st.tcp);
}
