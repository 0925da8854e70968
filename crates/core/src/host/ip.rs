//! The IP layer of a host: interfaces, routes, ARP, IPv4 input and output with
//! reassembly and fragmentation, receive-side coalescing (GRO) and segmentation (GSO),
//! ICMP, UDP sockets, and the loopback queue.
//!
//! # Design
//! The IP layer owns no TCP state. What it receives for TCP it hands on by a direct call
//! to a [`TcpSink`] that its caller passes in: the core [`Host`](super::Host)'s own TCP
//! (which takes each segment at once, so a host behaves as one merged TCP/IP stack), or
//! the runtime, which collects a receive batch's segments and, once it has let go of the
//! IP layer, gives each to its squeue (one lock per batch, one classifier lookup per
//! segment). There is no queue between IP and TCP: a segment is delivered while the
//! datagram that carried it is being taken in (or, with GRO, when its run of segments is
//! complete), in one direction, IP to TCP.
//!
//! TCP sends a datagram it built with Ethernet headroom through `IpLayer::ip_output_gso`
//! (the host's own TCP) or [`IpLayer::send_tcp_gso`] (the runtime's) and is told about
//! ICMP errors quoting its segments ([`TcpSink::tcp_icmp_error`], RFC 5927 validation is
//! TCP's).
//!
//! # Bounds
//! ARP's pending packets (`arp_pending_max`), reassembly (`ip_reass_queue_bytes`), UDP
//! receive queues, the loopback queue (`MAX_LOOPBACK_QUEUE`)
//! and the transmit queue ([`MAX_TX_QUEUE`](super::MAX_TX_QUEUE)): frames are dropped and
//! counted when the driver does not drain it.

use super::stats::HostStats;
use super::{Frame, Interface, Pending, PingReply, UdpId};
use crate::icmp::ratelimit::TokenBucket;
use crate::ip::arp::{ArpCache, ArpConfig};
use crate::ip::gro::{Gro, GroSeg};
use crate::ip::reassembly::{ReasmConfig, Reassembler};
use crate::ip::route::{IfaceId, Route, RouteError, RouteTable};
use crate::params::{ParamError, Params};
use crate::slab::Slab;
use crate::time::Instant;
use crate::udp::UdpEndpoint;
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};

/// A TCP segment the IP layer received for one of our addresses (a complete datagram,
/// not a broadcast).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpSegmentIn<'a> {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    /// TCP header and payload: borrowed from the datagram, or a shared buffer (a slice
    /// of a frame given as [`Bytes`], or a segment receive-side coalescing built), which
    /// a sink that keeps the segment takes without a copy ([`SegmentBytes::into_bytes`]).
    pub bytes: SegmentBytes<'a>,
    /// The checksum was verified (then the checksum field of a merged segment is stale
    /// and must not be checked); `false`: verify it.
    pub csum_ok: bool,
    /// Wire segments it stands for (1 unless merged by GRO): give it to
    /// [`crate::tcp::Tcb::handle_segment_gro`] with `segs` and `gso_size`.
    pub segs: u16,
    /// Payload bytes of each piece but the last (0 unless merged).
    pub gso_size: u16,
}

/// The bytes of a [`TcpSegmentIn`]: read them through `Deref`; keep them with
/// [`SegmentBytes::into_bytes`], which copies only what was borrowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SegmentBytes<'a> {
    /// Part of a datagram the caller lent (`IpLayer::receive`, `receive_batch`).
    Borrowed(&'a [u8]),
    /// A shared buffer: part of a frame given as `Bytes`
    /// (`IpLayer::receive_batch_bytes`), or a segment GRO built.
    Shared(Bytes),
}

impl core::ops::Deref for SegmentBytes<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            SegmentBytes::Borrowed(b) => b,
            SegmentBytes::Shared(b) => b,
        }
    }
}

impl SegmentBytes<'_> {
    /// The bytes as a shared buffer: a shared one as it is, a borrowed one copied.
    pub fn into_bytes(self) -> Bytes {
        match self {
            SegmentBytes::Borrowed(b) => Bytes::copy_from_slice(b),
            SegmentBytes::Shared(b) => b,
        }
    }
}

/// An ICMP destination unreachable quoting one of our TCP segments (RFC 5927: TCP
/// validates `seq` against the connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpIcmpError {
    pub local: SocketAddrV4,
    pub remote: SocketAddrV4,
    /// The quoted segment's sequence number.
    pub seq: u32,
    /// The ICMP code (`icmp_unreach`).
    pub code: u8,
    /// The next-hop MTU of a "fragmentation needed" (RFC 1191), else 0.
    pub mtu: u16,
}

/// Where the IP layer delivers what it received for TCP.
pub trait TcpSink {
    /// A TCP segment for one of our addresses. `ip` is the IP layer, for what TCP sends
    /// in answer.
    fn tcp_segment(&mut self, ip: &mut IpLayer, now: Instant, seg: TcpSegmentIn<'_>);
    /// An ICMP error quoting one of our TCP segments.
    fn tcp_icmp_error(&mut self, ip: &mut IpLayer, now: Instant, err: TcpIcmpError);
}

/// The IP layer of one host (see the module's design).
#[derive(Debug)]
pub struct IpLayer {
    pub(crate) params: Params,
    pub(crate) ifaces: Vec<Interface>,
    /// Per interface: it segments large TCP segments itself (TSO).
    pub(crate) iface_tso: Vec<bool>,
    pub(crate) routes: RouteTable,
    pub(crate) arp: ArpCache<crate::wire::MacAddr, Pending>,
    pub(crate) reasm: Reassembler,
    pub(crate) icmp_bucket: TokenBucket,
    pub(crate) next_ident: u16,
    pub(crate) tx: VecDeque<Frame>,
    /// Datagrams to our own addresses, waiting for delivery.
    pub(crate) lo: VecDeque<Vec<u8>>,
    pub(crate) udp: Slab<UdpEndpoint>,
    pub(crate) udp_by_addr: HashMap<SocketAddrV4, UdpId>,
    /// UDP sockets that became readable.
    pub(crate) udp_ready: VecDeque<UdpId>,
    pub(crate) pings: VecDeque<PingReply>,
    /// The ephemeral-port cursor (RFC 6056 §3.3.3), shared by UDP and TCP.
    pub(crate) next_port: u32,
    /// IP, ICMP and UDP counters (the TCP group stays zero: TCP counts its own).
    pub(crate) stats: HostStats,
    /// Receive-side coalescing of the batch being received (`ip_gro`).
    pub(crate) gro: Gro,
    /// A batch with GRO is being received: TCP segments go through `gro`.
    pub(crate) gro_batch: bool,
    /// GRO's output, reused from batch to batch.
    pub(crate) gro_out: Vec<GroSeg>,
    /// The frame being taken in, when its owner gave it as a shared buffer
    /// (`receive_batch_bytes`): a TCP segment in it reaches TCP as a slice of it.
    pub(crate) frame: Option<Bytes>,
}

fn arp_config(p: &Params) -> ArpConfig {
    ArpConfig {
        reachable_time: Params::ms(p.arp_cleanup_interval),
        retry_interval: Params::ms(p.arp_retry_interval),
        max_retries: p.arp_max_retries,
        max_pending: p.arp_pending_max as usize,
        max_entries: 1024,
    }
}

fn reasm_config(p: &Params) -> ReasmConfig {
    ReasmConfig {
        timeout: Params::ms(p.ip_reass_timeout),
        max_bytes: p.ip_reass_queue_bytes as usize,
        max_datagrams: 1024,
        max_fragments: 64,
    }
}

impl IpLayer {
    /// An IP layer with no interfaces. `secret` seeds the IP identification (pass the
    /// host's secret, see [`super::Host::new`]).
    pub fn new(params: Params, secret: [u8; 16]) -> IpLayer {
        IpLayer {
            ifaces: Vec::new(),
            iface_tso: Vec::new(),
            routes: RouteTable::new(4096),
            arp: ArpCache::new(arp_config(&params)),
            reasm: Reassembler::new(reasm_config(&params)),
            icmp_bucket: TokenBucket::new(
                Params::ms(params.icmp_err_interval),
                params.icmp_err_burst,
            ),
            next_ident: u16::from_be_bytes([secret[0], secret[1]]),
            tx: VecDeque::new(),
            lo: VecDeque::new(),
            udp: Slab::default(),
            udp_by_addr: HashMap::new(),
            udp_ready: VecDeque::new(),
            pings: VecDeque::new(),
            next_port: 0,
            stats: HostStats::default(),
            gro: Gro::default(),
            gro_batch: false,
            gro_out: Vec::new(),
            frame: None,
            params,
        }
    }

    /// Adds an interface with an address and its connected route. Returns its id.
    pub fn add_interface(&mut self, iface: Interface) -> Result<IfaceId, RouteError> {
        if iface.prefix_len > 32 {
            return Err(RouteError::InvalidPrefix);
        }
        let id = IfaceId(self.ifaces.len() as u16);
        let mask = if iface.prefix_len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(iface.prefix_len))
        };
        let net = Ipv4Addr::from(u32::from(iface.addr) & mask);
        self.routes.add(Route {
            dst: net,
            prefix_len: iface.prefix_len,
            gateway: None,
            iface: id,
            mtu: None,
            metric: 0,
        })?;
        self.ifaces.push(Interface {
            mtu: iface.mtu.clamp(68, 65_535),
            ..iface
        });
        Ok(id)
    }

    /// Adds a route (e.g. a default route via a gateway).
    pub fn add_route(&mut self, route: Route) -> Result<(), RouteError> {
        if usize::from(route.iface.0) >= self.ifaces.len() {
            return Err(RouteError::NotFound);
        }
        self.routes.add(route)
    }

    /// The routing table.
    pub fn routes(&self) -> &RouteTable {
        &self.routes
    }

    /// Removes a route.
    pub fn remove_route(&mut self, dst: Ipv4Addr, prefix_len: u8) -> Result<Route, RouteError> {
        self.routes.remove(dst, prefix_len)
    }

    /// The interfaces.
    pub fn interfaces(&self) -> &[Interface] {
        &self.ifaces
    }

    /// The tunables.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Sets several tunables at once (see [`Params::set_many`]): IP, ARP and ICMP
    /// limits apply at once.
    pub fn set_params(&mut self, pairs: &[(&str, &str)]) -> Result<(), ParamError> {
        self.params.set_many(pairs)?;
        self.arp.set_config(arp_config(&self.params));
        self.reasm.set_config(reasm_config(&self.params));
        self.icmp_bucket.set(
            Params::ms(self.params.icmp_err_interval),
            self.params.icmp_err_burst,
        );
        Ok(())
    }

    /// The next frame to transmit.
    pub fn poll_transmit(&mut self) -> Option<Frame> {
        self.tx.pop_front()
    }

    /// Whether interface `iface` segments large TCP segments itself (TSO, default off):
    /// it then gets them whole ([`Frame::gso_size`]); otherwise the IP layer splits them
    /// in software ([`crate::ip::gso::gso_split`]) right before the interface.
    pub fn set_iface_tso(&mut self, iface: IfaceId, on: bool) {
        let i = usize::from(iface.0);
        if i < self.ifaces.len() {
            if self.iface_tso.len() <= i {
                self.iface_tso.resize(i + 1, false);
            }
            self.iface_tso[i] = on;
        }
    }

    /// Frames waiting in the transmit queue.
    pub fn tx_queue_len(&self) -> usize {
        self.tx.len()
    }

    /// The earliest instant at which [`IpLayer::handle_timeout`] has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [self.arp.poll_timeout(), self.reasm.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Runs everything due at `now`: ARP retries, reassembly expiry; then what was sent
    /// to our own addresses.
    pub fn handle_timeout<S: TcpSink + ?Sized>(&mut self, now: Instant, tcp: &mut S) {
        self.arp_timeouts(now);
        self.reasm_timeouts(now);
        self.run_loopback(now, tcp);
    }

    /// The next UDP socket that became readable.
    pub fn poll_udp_event(&mut self) -> Option<UdpId> {
        while let Some(id) = self.udp_ready.pop_front() {
            if self.udp.get(id.0).is_some() {
                return Some(id);
            }
        }
        None
    }

    /// Echo replies received so far (drained).
    pub fn take_ping_replies(&mut self) -> Vec<PingReply> {
        self.pings.drain(..).collect()
    }

    /// The IP, ICMP and UDP counters (the TCP group is zero).
    pub fn stats(&self) -> HostStats {
        let mut s = self.stats;
        // Packets lost with unresolved neighbours evicted from a full ARP table.
        s.ip.out_discards += self.arp.evicted_packets();
        let g = self.gro.stats();
        s.ip.gro_merged = g.merged;
        s.ip.gro_segs_out = g.flushed + g.passed;
        s
    }

    /// Our interface with address `a`.
    pub(crate) fn iface_by_addr(&self, a: Ipv4Addr) -> Option<IfaceId> {
        self.ifaces
            .iter()
            .position(|i| i.addr == a)
            .map(|i| IfaceId(i as u16))
    }

    /// Is `a` the limited broadcast or the directed broadcast of one of our subnets?
    pub(crate) fn is_broadcast_addr(&self, a: Ipv4Addr) -> bool {
        a.is_broadcast()
            || self
                .ifaces
                .iter()
                .any(|i| crate::ip::subnet_broadcast(i.addr, i.prefix_len) == Some(a))
    }

    /// Is `a` one of our addresses (or loopback)?
    pub fn is_local_addr(&self, a: Ipv4Addr) -> bool {
        a.is_loopback() || self.ifaces.iter().any(|i| i.addr == a)
    }

    pub(crate) fn next_ident(&mut self) -> u16 {
        self.next_ident = self.next_ident.wrapping_add(1);
        self.next_ident
    }
}
