//! Transmit path: route lookup, fragmentation when DF is clear (RFC 791 §3.2), ARP
//! resolution with a bounded pending queue (RFC 826), Ethernet framing, and the ICMP,
//! ARP, UDP and ping senders.
//!
//! Packets are built directly in a frame buffer with 14 bytes of headroom for the
//! Ethernet header, so a packet is written once and only its link header is filled in
//! after ARP answers.

use super::ip::{IpLayer, TcpSink};
use super::{Frame, Pending, MAX_LOOPBACK_QUEUE, MAX_TX_QUEUE};
use crate::icmp;
use crate::ip::arp::Resolve;
use crate::ip::fragment::fragment_plan;
use crate::ip::gso::gso_split;
use crate::ip::route::IfaceId;
use crate::time::Instant;
use crate::wire::{
    ethertype, icmp_type, ip_proto, ArpOp, ArpRepr, EthernetRepr, Icmpv4Repr, Ipv4Repr, MacAddr,
    TcpRepr, ARP_LEN, ETHERNET_HEADER_LEN, IPV4_HEADER_LEN, TCP_HEADER_LEN,
};
use std::io;
use std::net::Ipv4Addr;

/// Ethernet header room at the front of every packet buffer.
pub const HEADROOM: usize = ETHERNET_HEADER_LEN;

/// The header of a datagram ember originates (RFC 1122 §3.2.1.7): no options, not a
/// fragment, DiffServ 0, DF clear; callers adjust with struct update syntax.
pub(crate) fn plain_header(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    protocol: u8,
    ttl: u8,
    ident: u16,
    payload_len: usize,
) -> Ipv4Repr {
    Ipv4Repr {
        src,
        dst,
        protocol,
        ttl,
        dscp_ecn: 0,
        ident,
        dont_frag: false,
        more_frags: false,
        frag_offset: 0,
        payload_len: payload_len as u16,
    }
}

/// A frame buffer (Ethernet headroom first) with `hdr` written in it; the payload goes
/// at `HEADROOM + IPV4_HEADER_LEN`.
pub(crate) fn datagram_buffer(hdr: &Ipv4Repr) -> Vec<u8> {
    let mut f = vec![0u8; HEADROOM + hdr.total_len()];
    hdr.emit(&mut f[HEADROOM..HEADROOM + IPV4_HEADER_LEN]);
    f
}

impl IpLayer {
    /// [`plain_header`] with this host's TTL and a fresh identification.
    pub(crate) fn header(
        &mut self,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        protocol: u8,
        payload_len: usize,
    ) -> Ipv4Repr {
        let ident = self.next_ident();
        plain_header(
            src,
            dst,
            protocol,
            self.params.ip_def_ttl as u8,
            ident,
            payload_len,
        )
    }

    /// [`IpLayer::send_datagram`] for a TCP segment built outside this host (the runtime's
    /// squeues) that may be large (`gso` > 0, LSO): as `ip_output_gso`, after ARP it is
    /// split into pieces of `gso` payload bytes (or handed whole to a TSO interface), and
    /// its TCP checksum, which a large segment arrives without, is filled where it is cut.
    pub fn send_tcp_gso<S: TcpSink + ?Sized>(
        &mut self,
        now: Instant,
        frame: Vec<u8>,
        gso: u16,
        tcp: &mut S,
    ) -> io::Result<()> {
        if frame.len() < HEADROOM + IPV4_HEADER_LEN {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        let ihl = usize::from(frame[HEADROOM] & 0x0f) * 4;
        let doff = frame
            .get(HEADROOM + ihl + 12)
            .map_or(0, |b| usize::from(b >> 4) * 4);
        let r = self.ip_output_gso(now, frame, gso, ihl + doff);
        self.run_loopback(now, tcp);
        r
    }

    /// Routes and sends a frame whose IP packet (after the headroom) is complete.
    /// Fragments it if it exceeds the route MTU and DF is clear.
    pub(crate) fn ip_output(&mut self, now: Instant, frame: Vec<u8>) -> io::Result<()> {
        self.ip_output_gso(now, frame, 0, 0)
    }

    /// [`IpLayer::ip_output`] for a TCP segment that may be large (`gso` > 0: pieces of
    /// `gso` payload bytes behind `hdrs` bytes of IPv4 and TCP header). A large segment is
    /// never fragmented: its pieces must fit the MTU, and it is split (or handed whole to
    /// a TSO interface) after ARP, so its pieces stay in order.
    pub(crate) fn ip_output_gso(
        &mut self,
        now: Instant,
        mut frame: Vec<u8>,
        gso: u16,
        hdrs: usize,
    ) -> io::Result<()> {
        self.stats.ip.out_requests += 1;
        let Ok((ip, _)) = Ipv4Repr::parse(&frame[HEADROOM..], false) else {
            self.stats.ip.out_discards += 1;
            return Err(io::ErrorKind::InvalidInput.into());
        };
        if self.is_local_addr(ip.dst) {
            if self.lo.len() >= MAX_LOOPBACK_QUEUE {
                self.stats.ip.out_discards += 1;
                return Err(io::ErrorKind::WouldBlock.into());
            }
            if gso > 0 {
                // Not cut: its checksum is filled here, once.
                fill_tcp_checksum(&mut frame);
            }
            frame.drain(..HEADROOM);
            self.lo.push_back(frame);
            return Ok(());
        }
        let Some(route) = self.routes.lookup(ip.dst).copied() else {
            self.stats.ip.out_no_routes += 1;
            return Err(io::ErrorKind::NetworkUnreachable.into());
        };
        let iface = route.iface;
        let Some(ifc) = self.ifaces.get(usize::from(iface.0)).copied() else {
            self.stats.ip.out_no_routes += 1;
            return Err(io::ErrorKind::NetworkUnreachable.into());
        };
        let mtu = route.mtu.map_or(ifc.mtu, u32::from).min(ifc.mtu) as usize;
        let next_hop = route.gateway.unwrap_or(ip.dst);
        let ip_len = frame.len() - HEADROOM;
        if gso > 0 && hdrs + usize::from(gso) <= mtu {
            self.resolve_and_send(now, iface, next_hop, frame, gso);
            return Ok(());
        }
        if ip_len <= mtu {
            self.resolve_and_send(now, iface, next_hop, frame, 0);
            return Ok(());
        }
        if ip.dont_frag {
            self.stats.ip.frag_fails += 1;
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "message too long",
            ));
        }
        // RFC 791 §3.2 fragmentation.
        let payload = &frame[HEADROOM + IPV4_HEADER_LEN..];
        let plan = match fragment_plan(
            payload.len(),
            IPV4_HEADER_LEN,
            mtu,
            ip.frag_offset,
            ip.more_frags,
        ) {
            Ok(p) => p,
            Err(_) => {
                self.stats.ip.frag_fails += 1;
                return Err(io::ErrorKind::InvalidInput.into());
            }
        };
        let mut pieces = Vec::new();
        for piece in plan {
            let start = (piece.offset - ip.frag_offset) as usize;
            let end = start + piece.len as usize;
            let hdr = Ipv4Repr {
                frag_offset: piece.offset,
                more_frags: piece.more_frags,
                payload_len: piece.len,
                ..ip
            };
            let mut f = datagram_buffer(&hdr);
            f[HEADROOM + IPV4_HEADER_LEN..].copy_from_slice(&payload[start..end]);
            pieces.push(f);
        }
        self.stats.ip.frag_oks += 1;
        self.stats.ip.frag_creates += pieces.len() as u64;
        for f in pieces {
            self.resolve_and_send(now, iface, next_hop, f, 0);
        }
        Ok(())
    }

    /// ARP resolution, then framing.
    fn resolve_and_send(
        &mut self,
        now: Instant,
        iface: IfaceId,
        next_hop: Ipv4Addr,
        frame: Vec<u8>,
        gso: u16,
    ) {
        let ifc = self.ifaces[usize::from(iface.0)];
        let bcast = next_hop.is_broadcast()
            || crate::ip::subnet_broadcast(ifc.addr, ifc.prefix_len) == Some(next_hop);
        if bcast {
            self.send_framed(iface, MacAddr::BROADCAST, frame, gso);
            return;
        }
        match self
            .arp
            .resolve(now, next_hop, Pending { iface, frame, gso })
        {
            Resolve::Resolved(mac, p) => self.send_framed(p.iface, mac, p.frame, p.gso),
            Resolve::Queued { send_request } => {
                if send_request {
                    self.send_arp(iface, ArpOp::Request, MacAddr::BROADCAST, next_hop);
                }
            }
            Resolve::Dropped(_) => self.stats.ip.out_discards += 1,
        }
    }

    /// Fills in the Ethernet header and queues the frame for the driver. A large TCP
    /// segment (`gso` > 0) goes whole to a TSO interface and is split into its pieces
    /// ([`crate::ip::gso::gso_split`]) for any other.
    pub(crate) fn send_framed(
        &mut self,
        iface: IfaceId,
        dst: MacAddr,
        mut frame: Vec<u8>,
        gso: u16,
    ) {
        let Some(ifc) = self.ifaces.get(usize::from(iface.0)) else {
            return;
        };
        let eth = EthernetRepr {
            dst,
            src: ifc.mac,
            ethertype: ethertype::IPV4,
        };
        eth.emit(&mut frame[..ETHERNET_HEADER_LEN]);
        let tso = self
            .iface_tso
            .get(usize::from(iface.0))
            .copied()
            .unwrap_or(false);
        if gso == 0 || tso {
            if gso > 0 {
                // A large segment arrives without its TCP checksum (it is filled where the
                // segment is cut); whole, it is filled here.
                fill_tcp_checksum(&mut frame);
            }
            self.push_tx(iface, frame, gso);
            return;
        }
        let mut pieces = Vec::new();
        match gso_split(&frame, usize::from(gso), &mut pieces) {
            Ok(n) => {
                self.stats.ip.gso_splits += 1;
                self.stats.ip.gso_segs += n as u64;
                for p in pieces {
                    self.push_tx(iface, p, 0);
                }
            }
            Err(_) => self.stats.ip.out_discards += 1,
        }
    }

    fn push_tx(&mut self, iface: IfaceId, data: Vec<u8>, gso_size: u16) {
        if self.tx.len() >= MAX_TX_QUEUE {
            self.stats.ip.out_discards += 1;
            return;
        }
        self.tx.push_back(Frame {
            iface,
            data,
            gso_size,
        });
    }

    /// An ARP request (broadcast) or reply (to `dst_mac`) about `target_ip`.
    pub(crate) fn send_arp(
        &mut self,
        iface: IfaceId,
        op: ArpOp,
        dst_mac: MacAddr,
        target_ip: Ipv4Addr,
    ) {
        let Some(ifc) = self.ifaces.get(usize::from(iface.0)).copied() else {
            return;
        };
        let mut f = vec![0u8; ETHERNET_HEADER_LEN + ARP_LEN];
        EthernetRepr {
            dst: dst_mac,
            src: ifc.mac,
            ethertype: ethertype::ARP,
        }
        .emit(&mut f[..ETHERNET_HEADER_LEN]);
        let target_mac = if op == ArpOp::Reply {
            dst_mac
        } else {
            MacAddr::ZERO
        };
        ArpRepr {
            op,
            sender_mac: ifc.mac,
            sender_ip: ifc.addr,
            target_mac,
            target_ip,
        }
        .emit(&mut f[ETHERNET_HEADER_LEN..]);
        match op {
            ArpOp::Request => self.stats.ip.arp_requests_out += 1,
            ArpOp::Reply => self.stats.ip.arp_replies_out += 1,
        }
        self.push_tx(iface, f, 0);
    }

    /// Sends an IP datagram built by the owner (external TCP): `frame` holds
    /// [`HEADROOM`] bytes for the Ethernet header, then a complete IPv4 datagram. It is
    /// routed, fragmented if DF is clear and it exceeds the MTU, resolved through ARP and
    /// queued for the driver ([`IpLayer::poll_transmit`]); to our own address it goes to the
    /// loopback queue.
    pub fn send_datagram<S: TcpSink + ?Sized>(
        &mut self,
        now: Instant,
        frame: Vec<u8>,
        tcp: &mut S,
    ) -> io::Result<()> {
        if frame.len() < HEADROOM + IPV4_HEADER_LEN {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        let r = self.ip_output(now, frame);
        self.run_loopback(now, tcp);
        r
    }

    /// Where a datagram to `dst` leaves: the interface, the next hop's link address if
    /// ARP knows it, and the path MTU. `None` when there is no route, `dst` is one of
    /// ours, or it is a broadcast address (those take [`IpLayer::send_datagram`]).
    pub fn next_hop(&self, now: Instant, dst: Ipv4Addr) -> Option<(IfaceId, Option<MacAddr>, u32)> {
        if self.is_local_addr(dst) || self.is_broadcast_addr(dst) {
            return None;
        }
        let r = self.routes.lookup(dst)?;
        let ifc = self.ifaces.get(usize::from(r.iface.0))?;
        let mtu = r.mtu.map_or(ifc.mtu, u32::from).min(ifc.mtu);
        let hop = r.gateway.unwrap_or(dst);
        Some((r.iface, self.arp.lookup(now, hop), mtu))
    }

    /// Forgets the link address of the next hop towards `dst` (MUST-20 negative
    /// advice). Queued packets for it are dropped and counted.
    pub fn forget_next_hop(&mut self, dst: Ipv4Addr) {
        if let Some(r) = self.routes.lookup(dst) {
            let hop = r.gateway.unwrap_or(dst);
            let dropped = self.arp.remove(hop).len();
            self.stats.ip.out_discards += dropped as u64;
        }
    }

    /// The source address to use towards `dst`, and the path MTU.
    pub fn source_for(&self, dst: Ipv4Addr) -> Option<(Ipv4Addr, u32)> {
        if dst.is_loopback() {
            return Some((Ipv4Addr::LOCALHOST, 65_535));
        }
        if let Some(i) = self.ifaces.iter().find(|i| i.addr == dst) {
            // Our own address: delivered internally, like Linux's `lo`.
            return Some((i.addr, 65_535));
        }
        let r = self.routes.lookup(dst)?;
        let ifc = self.ifaces.get(usize::from(r.iface.0))?;
        let mtu = r.mtu.map_or(ifc.mtu, u32::from).min(ifc.mtu);
        Some((ifc.addr, mtu))
    }

    /// Sends an ICMP message from `src` to `dst`.
    pub(crate) fn send_icmp(
        &mut self,
        now: Instant,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        msg: &Icmpv4Repr,
    ) {
        let len = msg.buffer_len();
        if len > usize::from(u16::MAX) - IPV4_HEADER_LEN {
            return;
        }
        let ip = self.header(src, dst, ip_proto::ICMP, len);
        let mut f = datagram_buffer(&ip);
        msg.emit(&mut f[HEADROOM + IPV4_HEADER_LEN..]);
        self.stats.icmp.out_msgs += 1;
        let _ = self.ip_output(now, f);
    }

    /// Sends a rate-limited ICMP error about `original` to `dst` (RFC 1122 §3.2.2; the
    /// caller checked `icmp::error_allowed`).
    pub(crate) fn send_icmp_error(
        &mut self,
        now: Instant,
        dst: Ipv4Addr,
        ty: u8,
        code: u8,
        mtu: u16,
        original: &[u8],
    ) {
        if !self.icmp_bucket.allow(now) {
            self.stats.icmp.out_rate_limited += 1;
            return;
        }
        let Some((src, _)) = self.source_for(dst) else {
            return;
        };
        let quote = &original[..icmp::quote_len(original.len())];
        let msg = if ty == icmp_type::TIME_EXCEEDED {
            self.stats.icmp.out_time_excds += 1;
            Icmpv4Repr::TimeExceeded {
                code,
                original: quote,
            }
        } else {
            self.stats.icmp.out_dest_unreachs += 1;
            Icmpv4Repr::DestUnreachable {
                code,
                next_hop_mtu: mtu,
                original: quote,
            }
        };
        self.send_icmp(now, src, dst, &msg);
    }

    /// Sends an ICMP echo request (ping).
    pub fn ping<S: TcpSink + ?Sized>(
        &mut self,
        now: Instant,
        dst: Ipv4Addr,
        ident: u16,
        seq_no: u16,
        data: &[u8],
        tcp: &mut S,
    ) -> io::Result<()> {
        if data.len() > usize::from(u16::MAX) - IPV4_HEADER_LEN - 8 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ping payload too large",
            ));
        }
        let Some((src, _)) = self.source_for(dst) else {
            self.stats.ip.out_no_routes += 1;
            return Err(io::ErrorKind::NetworkUnreachable.into());
        };
        self.stats.icmp.out_echos += 1;
        self.send_icmp(
            now,
            src,
            dst,
            &Icmpv4Repr::EchoRequest {
                ident,
                seq_no,
                data,
            },
        );
        self.run_loopback(now, tcp);
        Ok(())
    }
}

/// Fills the TCP checksum of a frame (Ethernet headroom, IPv4 header, TCP segment) that
/// left TCP without one (a large segment, see `IpLayer::ip_output_gso`). Frames that are not
/// TCP over IPv4 are left as they are.
fn fill_tcp_checksum(frame: &mut [u8]) {
    let Ok((ip, _)) = Ipv4Repr::parse(&frame[HEADROOM.min(frame.len())..], false) else {
        return;
    };
    let ihl = usize::from(frame[HEADROOM] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([
        frame[HEADROOM + 2],
        frame[HEADROOM + 3],
    ]));
    let end = (HEADROOM + total).min(frame.len());
    let start = HEADROOM + ihl;
    if ip.protocol == ip_proto::TCP && end >= start + TCP_HEADER_LEN {
        TcpRepr::fill_checksum(&mut frame[start..end], ip.src, ip.dst);
    }
}
