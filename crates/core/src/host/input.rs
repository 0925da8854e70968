//! Receive path: Ethernet → ARP or IPv4 → ICMP / UDP / TCP (RFC 1122 §3.2, §3.3).
//!
//! Every check that RFC 1122 asks of a host is made before a datagram reaches a
//! transport: header validity and checksum, a destination that is ours, a source that can
//! be a unicast host, and reassembly of fragments within the memory and time bounds.
//!
//! Frames may come one at a time ([`IpLayer::receive`]) or as a batch
//! ([`IpLayer::receive_batch`]): then, with `ip_gro` on, the batch's TCP segments pass
//! through receive-side coalescing (`ip::gro`) on their way to TCP, so consecutive
//! in-order segments of one flow reach TCP as one. Everything else takes the same path
//! either way, in arrival order.

use super::ip::{IpLayer, SegmentBytes, TcpIcmpError, TcpSegmentIn, TcpSink};
use super::PingReply;
use crate::icmp;
use crate::ip::reassembly::{ReasmKey, ReasmOutcome};
use crate::ip::route::IfaceId;
use crate::ip::{is_invalid_source, subnet_broadcast};
use crate::time::Instant;
use crate::udp::Datagram;
use crate::wire::{
    ethertype, icmp_type, icmp_unreach, ip_proto, ArpOp, ArpRepr, EthernetRepr, Icmpv4Repr,
    Ipv4Repr, UdpRepr, IPV4_HEADER_LEN,
};
use bytes::Bytes;
use std::net::SocketAddrV4;

impl IpLayer {
    /// A frame arrived on interface `iface`; what it carries for TCP goes to `tcp`.
    pub fn receive<S: TcpSink + ?Sized>(
        &mut self,
        now: Instant,
        iface: IfaceId,
        frame: &[u8],
        tcp: &mut S,
    ) {
        self.receive_frame(now, iface, frame, tcp);
        self.run_loopback(now, tcp);
    }

    /// Frames that arrived together on interface `iface` (one receive batch, e.g. one
    /// poll of a device), in arrival order. The same as [`IpLayer::receive`] for each in
    /// turn, except that with `ip_gro` on, the batch's TCP segments go through
    /// receive-side coalescing (`ip::gro`): consecutive in-order segments of one flow
    /// reach `tcp` as one. Each flow's segments keep their order; everything else (ARP,
    /// ICMP, UDP, fragments until reassembled) is handled as it comes. All of the batch's
    /// TCP segments have reached `tcp` when this returns. What the batch sent to our own
    /// addresses waits for [`IpLayer::run_loopback`].
    pub fn receive_batch<I, S>(&mut self, now: Instant, iface: IfaceId, frames: I, tcp: &mut S)
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
        S: TcpSink + ?Sized,
    {
        self.take_batch(now, iface, frames.into_iter().map(|f| (f, None)), tcp);
    }

    /// [`IpLayer::receive_batch`] for frames given as shared buffers: a TCP segment
    /// that reaches `tcp` unmerged is a slice of its frame
    /// ([`SegmentBytes::Shared`](super::ip::SegmentBytes)), which a sink keeps without a
    /// copy.
    pub fn receive_batch_bytes<I, S>(
        &mut self,
        now: Instant,
        iface: IfaceId,
        frames: I,
        tcp: &mut S,
    ) where
        I: IntoIterator<Item = Bytes>,
        S: TcpSink + ?Sized,
    {
        self.take_batch(
            now,
            iface,
            frames.into_iter().map(|f| (f.clone(), Some(f))),
            tcp,
        );
    }

    /// The batch loop of both: each frame, with its shared buffer when it has one.
    fn take_batch<F, I, S>(&mut self, now: Instant, iface: IfaceId, frames: I, tcp: &mut S)
    where
        F: AsRef<[u8]>,
        I: Iterator<Item = (F, Option<Bytes>)>,
        S: TcpSink + ?Sized,
    {
        let mut frames = frames.peekable();
        while let Some((f, shared)) = frames.next() {
            // A batch of one has nothing to merge with: the plain path.
            if self.params.ip_gro && !self.gro_batch && frames.peek().is_some() {
                self.gro_batch = true;
            }
            self.frame = shared;
            self.receive_frame(now, iface, f.as_ref(), tcp);
            self.frame = None;
        }
        if self.gro_batch {
            self.gro_batch = false;
            self.gro.flush(&mut self.gro_out);
            self.gro_deliver(now, tcp);
        }
    }

    fn receive_frame<S: TcpSink + ?Sized>(
        &mut self,
        now: Instant,
        iface: IfaceId,
        frame: &[u8],
        tcp: &mut S,
    ) {
        let Some(ifc) = self.ifaces.get(usize::from(iface.0)).copied() else {
            return;
        };
        let Ok((eth, payload)) = EthernetRepr::parse(frame) else {
            self.stats.ip.eth_in_errors += 1;
            return;
        };
        let link_bcast = eth.dst.is_broadcast();
        if eth.dst != ifc.mac && !link_bcast {
            self.stats.ip.eth_not_for_us += 1;
            return;
        }
        match eth.ethertype {
            ethertype::ARP => self.arp_input(now, iface, &eth, payload),
            ethertype::IPV4 => self.ip_input(now, iface, payload, link_bcast, tcp),
            _ => self.stats.ip.eth_not_for_us += 1,
        }
    }

    /// Hands what GRO has made ready to TCP, in order.
    fn gro_deliver<S: TcpSink + ?Sized>(&mut self, now: Instant, tcp: &mut S) {
        let mut out = core::mem::take(&mut self.gro_out);
        for s in out.drain(..) {
            let seg = TcpSegmentIn {
                src: s.src,
                dst: s.dst,
                bytes: SegmentBytes::Shared(Bytes::from(s.bytes)),
                csum_ok: s.csum_ok,
                segs: s.segs,
                gso_size: s.gso_size,
            };
            tcp.tcp_segment(self, now, seg);
        }
        // Keep the buffer for the next batch (a nested delivery may have left one).
        if self.gro_out.is_empty() {
            self.gro_out = out;
        }
    }

    /// RFC 826 packet reception, with one check RFC 826 lacks: the sender hardware
    /// address must be the frame's source address. ARP has no checksum; this catches a
    /// corrupted sender address (and some spoofing) before it poisons the cache.
    fn arp_input(&mut self, now: Instant, iface: IfaceId, eth: &EthernetRepr, payload: &[u8]) {
        self.stats.ip.arp_in += 1;
        let Ok(arp) = ArpRepr::parse(payload) else {
            self.stats.ip.arp_in_errors += 1;
            return;
        };
        let ifc = self.ifaces[usize::from(iface.0)];
        if arp.sender_mac != eth.src
            || !arp.sender_mac.is_unicast()
            || is_invalid_source(arp.sender_ip)
            || arp.sender_ip == ifc.addr
        {
            self.stats.ip.arp_in_errors += 1;
            return;
        }
        let for_us = arp.target_ip == ifc.addr;
        let released = self.arp.learn(now, arp.sender_ip, arp.sender_mac, for_us);
        for p in released {
            self.send_framed(p.iface, arp.sender_mac, p.frame, p.gso);
        }
        if for_us && arp.op == ArpOp::Request {
            self.send_arp(iface, ArpOp::Reply, arp.sender_mac, arp.sender_ip);
        }
    }

    /// RFC 791 / RFC 1122 §3.2.1: IPv4 input.
    pub(crate) fn ip_input<S: TcpSink + ?Sized>(
        &mut self,
        now: Instant,
        iface: IfaceId,
        packet: &[u8],
        link_bcast: bool,
        tcp: &mut S,
    ) {
        self.stats.ip.in_receives += 1;
        let Ok((ip, payload)) = Ipv4Repr::parse(packet, true) else {
            self.stats.ip.in_hdr_errors += 1;
            return;
        };
        // Loopback datagrams of a host without interfaces come with no interface.
        let bcast = ip.dst.is_broadcast()
            || self
                .ifaces
                .get(usize::from(iface.0))
                .is_some_and(|ifc| subnet_broadcast(ifc.addr, ifc.prefix_len) == Some(ip.dst));
        if !bcast && !self.is_local_addr(ip.dst) {
            // Not ours, and ember does not forward.
            self.stats.ip.in_addr_errors += 1;
            return;
        }
        if is_invalid_source(ip.src) || (ip.src.is_loopback() && !ip.dst.is_loopback()) {
            self.stats.ip.in_addr_errors += 1;
            return;
        }
        if ip.is_fragment() {
            self.stats.ip.reasm_reqds += 1;
            // The header length is valid: parse() checked it.
            let hdr_len = usize::from(packet[0] & 0x0f) * 4;
            // A datagram that arrived as a link or IP broadcast never draws an ICMP error
            // (RFC 1122 §3.2.2), so its first fragment leaves no quote to answer with.
            let quote: &[u8] = if link_bcast || bcast {
                &[]
            } else {
                &packet[..hdr_len + payload.len().min(8)]
            };
            let key = ReasmKey {
                src: ip.src,
                dst: ip.dst,
                protocol: ip.protocol,
                ident: ip.ident,
            };
            match self
                .reasm
                .insert(now, key, ip.frag_offset, ip.more_frags, payload, quote)
            {
                ReasmOutcome::Incomplete => {}
                ReasmOutcome::Complete(data) => {
                    self.stats.ip.reasm_oks += 1;
                    if data.len() > usize::from(u16::MAX) - IPV4_HEADER_LEN {
                        self.stats.ip.reasm_fails += 1;
                        return;
                    }
                    let whole = Ipv4Repr {
                        more_frags: false,
                        frag_offset: 0,
                        payload_len: data.len() as u16,
                        ..ip
                    };
                    // An ICMP error about the datagram quotes its header and the start of
                    // its data (RFC 792), not the fragment that happened to complete it.
                    let qlen = icmp::quote_len(IPV4_HEADER_LEN + data.len());
                    let mut original = vec![0u8; qlen];
                    whole.emit(&mut original[..IPV4_HEADER_LEN]);
                    original[IPV4_HEADER_LEN..].copy_from_slice(&data[..qlen - IPV4_HEADER_LEN]);
                    self.deliver(
                        now,
                        iface,
                        &whole,
                        &data,
                        link_bcast || bcast,
                        &original,
                        tcp,
                    );
                }
                ReasmOutcome::Dropped(_) => self.stats.ip.reasm_fails += 1,
            }
            return;
        }
        self.deliver(now, iface, &ip, payload, link_bcast || bcast, packet, tcp);
    }

    /// Hands a complete datagram to its transport. `original` is the datagram as it
    /// arrived (for ICMP quotes).
    #[allow(clippy::too_many_arguments)]
    fn deliver<S: TcpSink + ?Sized>(
        &mut self,
        now: Instant,
        iface: IfaceId,
        ip: &Ipv4Repr,
        payload: &[u8],
        broadcast: bool,
        original: &[u8],
        tcp: &mut S,
    ) {
        self.stats.ip.in_delivers += 1;
        match ip.protocol {
            ip_proto::ICMP => self.icmp_input(now, iface, ip, payload, broadcast, tcp),
            ip_proto::UDP => self.udp_input(now, ip, payload, broadcast, original),
            ip_proto::TCP => {
                if broadcast {
                    // TCP never accepts broadcast or multicast (RFC 1122 §4.2.3.10).
                    return;
                }
                if self.gro_batch {
                    self.gro
                        .push_slice(ip.src, ip.dst, payload, false, &mut self.gro_out);
                    self.gro_deliver(now, tcp);
                    return;
                }
                // Part of a frame given as a shared buffer: a slice of it, no copy.
                let bytes = match self.frame.as_ref().filter(|f| holds(f, payload)) {
                    Some(f) => SegmentBytes::Shared(f.slice_ref(payload)),
                    None => SegmentBytes::Borrowed(payload),
                };
                let seg = TcpSegmentIn {
                    src: ip.src,
                    dst: ip.dst,
                    bytes,
                    csum_ok: false,
                    segs: 1,
                    gso_size: 0,
                };
                tcp.tcp_segment(self, now, seg);
            }
            _ => {
                self.stats.ip.in_unknown_protos += 1;
                if icmp::error_allowed(ip, payload, broadcast, broadcast) {
                    self.send_icmp_error(
                        now,
                        ip.src,
                        icmp_type::DEST_UNREACHABLE,
                        icmp_unreach::PROTOCOL,
                        0,
                        original,
                    );
                }
            }
        }
    }

    /// RFC 792 / RFC 1122 §3.2.2.
    fn icmp_input<S: TcpSink + ?Sized>(
        &mut self,
        now: Instant,
        _iface: IfaceId,
        ip: &Ipv4Repr,
        payload: &[u8],
        broadcast: bool,
        tcp: &mut S,
    ) {
        self.stats.icmp.in_msgs += 1;
        let Ok(msg) = Icmpv4Repr::parse(payload) else {
            self.stats.icmp.in_errors += 1;
            return;
        };
        match msg {
            Icmpv4Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } => {
                self.stats.icmp.in_echos += 1;
                if broadcast {
                    // RFC 1122 §3.2.2.6 allows silence for broadcast echoes (smurf).
                    return;
                }
                let reply = Icmpv4Repr::EchoReply {
                    ident,
                    seq_no,
                    data,
                };
                self.stats.icmp.out_echo_reps += 1;
                self.send_icmp(now, ip.dst, ip.src, &reply);
            }
            Icmpv4Repr::EchoReply {
                ident,
                seq_no,
                data,
            } => {
                self.stats.icmp.in_echo_reps += 1;
                if self.pings.len() < 4096 {
                    self.pings.push_back(PingReply {
                        from: ip.src,
                        ident,
                        seq_no,
                        len: data.len(),
                        at: now,
                    });
                }
            }
            Icmpv4Repr::DestUnreachable {
                code,
                next_hop_mtu,
                original,
            } => {
                self.stats.icmp.in_dest_unreachs += 1;
                self.icmp_error_input(now, code, next_hop_mtu, original, tcp);
            }
            Icmpv4Repr::TimeExceeded { .. } => {
                // Soft error for TCP (RFC 1122 §4.2.3.9): nothing to do.
                self.stats.icmp.in_time_excds += 1;
            }
            Icmpv4Repr::Other { .. } => {}
        }
    }

    /// An ICMP destination unreachable names one of our datagrams: tell the transport
    /// (RFC 1122 §4.2.3.9; RFC 5927 validation for TCP; RFC 1191 path MTU).
    fn icmp_error_input<S: TcpSink + ?Sized>(
        &mut self,
        now: Instant,
        code: u8,
        mtu: u16,
        original: &[u8],
        tcp: &mut S,
    ) {
        let Ok((q, transport)) = Ipv4Repr::parse_quoted(original) else {
            self.stats.icmp.in_errors += 1;
            return;
        };
        if q.protocol != ip_proto::TCP || transport.len() < 8 || !self.is_local_addr(q.src) {
            return;
        }
        let sport = u16::from_be_bytes([transport[0], transport[1]]);
        let dport = u16::from_be_bytes([transport[2], transport[3]]);
        let seq = u32::from_be_bytes([transport[4], transport[5], transport[6], transport[7]]);
        let local = SocketAddrV4::new(q.src, sport);
        let remote = SocketAddrV4::new(q.dst, dport);
        let err = TcpIcmpError {
            local,
            remote,
            seq,
            code,
            mtu,
        };
        tcp.tcp_icmp_error(self, now, err);
    }

    /// RFC 768 / RFC 1122 §4.1.3.
    fn udp_input(
        &mut self,
        now: Instant,
        ip: &Ipv4Repr,
        payload: &[u8],
        broadcast: bool,
        original: &[u8],
    ) {
        let Ok((udp, data)) = UdpRepr::parse(payload, ip.src, ip.dst, true) else {
            self.stats.udp.in_errors += 1;
            return;
        };
        let exact = SocketAddrV4::new(ip.dst, udp.dst_port);
        let wild = SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, udp.dst_port);
        let id = self
            .udp_by_addr
            .get(&exact)
            .or_else(|| self.udp_by_addr.get(&wild))
            .copied();
        let Some(id) = id else {
            self.stats.udp.no_ports += 1;
            if icmp::error_allowed(ip, payload, broadcast, broadcast) {
                self.send_icmp_error(
                    now,
                    ip.src,
                    icmp_type::DEST_UNREACHABLE,
                    icmp_unreach::PORT,
                    0,
                    original,
                );
            }
            return;
        };
        let Some(sock) = self.udp.get_mut(id.0) else {
            return;
        };
        let d = Datagram {
            from: SocketAddrV4::new(ip.src, udp.src_port),
            to: exact,
            data: data.to_vec(),
        };
        if sock.push(d) {
            self.stats.udp.in_datagrams += 1;
            if sock.len() == 1 {
                self.udp_ready.push_back(id);
            }
        } else {
            self.stats.udp.rcvbuf_errors += 1;
        }
    }

    /// Takes in the datagrams we sent to ourselves; what they carry for TCP goes to
    /// `tcp`.
    pub fn run_loopback<S: TcpSink + ?Sized>(&mut self, now: Instant, tcp: &mut S) {
        // Bounded: each round can queue more, so cap the work per call.
        let mut budget = super::MAX_LOOPBACK_QUEUE;
        while budget > 0 {
            let Some(pkt) = self.lo.pop_front() else {
                break;
            };
            budget -= 1;
            let Ok((ip, _)) = Ipv4Repr::parse(&pkt, false) else {
                continue;
            };
            let iface = self.iface_by_addr(ip.dst).unwrap_or(IfaceId(0));
            self.ip_input(now, iface, &pkt, false, tcp);
        }
    }

    pub(crate) fn arp_timeouts(&mut self, now: Instant) {
        if self.arp.poll_timeout().is_none_or(|t| t > now) {
            return;
        }
        let t = self.arp.on_timeout(now);
        for ip in t.requests {
            if let Some(route) = self.routes.lookup(ip) {
                let iface = route.iface;
                self.send_arp(iface, ArpOp::Request, crate::wire::MacAddr::BROADCAST, ip);
            }
        }
        for (_, pkts) in t.failed {
            self.stats.ip.arp_resolve_fails += 1;
            self.stats.ip.out_discards += pkts.len() as u64;
        }
    }

    pub(crate) fn reasm_timeouts(&mut self, now: Instant) {
        if self.reasm.poll_timeout().is_none_or(|t| t > now) {
            return;
        }
        for e in self.reasm.on_timeout(now) {
            self.stats.ip.reasm_fails += 1;
            // RFC 792: time exceeded, code 1, only if the first fragment arrived, and only
            // where RFC 1122 §3.2.2 allows an error at all (not about an ICMP error, not
            // about a broadcast).
            let Some(q) = e.quote else { continue };
            let Ok((qip, transport)) = Ipv4Repr::parse_quoted(&q) else {
                continue;
            };
            let bcast = self.is_broadcast_addr(qip.dst);
            let whole = Ipv4Repr {
                frag_offset: 0,
                ..qip
            };
            if icmp::error_allowed(&whole, transport, false, bcast) {
                self.send_icmp_error(now, e.key.src, icmp_type::TIME_EXCEEDED, 1, 0, &q);
            }
        }
    }
}

/// Does `part` lie within `buf` (so that `buf.slice_ref(part)` is a slice of it)?
fn holds(buf: &Bytes, part: &[u8]) -> bool {
    let start = buf.as_ptr() as usize;
    let p = part.as_ptr() as usize;
    p >= start && p + part.len() <= start + buf.len()
}
