//! A whole protocol-core host: interfaces, IP, ARP, ICMP, UDP and TCP in one sans-IO
//! state machine.
//!
//! # Design
//! `Host` is an IP layer ([`IpLayer`], `ip.rs`: ARP, IPv4, ICMP, UDP, reassembly, GRO,
//! GSO) and TCP (`TcpLayer`, `tcp.rs`: connections, listeners, timers, over the
//! TCP endpoint of `crate::tcp::endpoint`). A frame comes in ([`Host::receive`]);
//! Ethernet hands it to ARP or IP; IP validates and reassembles and hands the datagram to
//! ICMP, UDP or TCP by a direct call (TCP and IP are merged: the IP layer calls TCP, a
//! [`TcpSink`], while it takes the datagram in, with no queue between them); and whatever
//! the layers want to send is routed, resolved through ARP, framed, and queued for
//! [`Host::poll_transmit`]. Application calls (`tcp_*`, `udp_*`, [`Host::ping`]) and the
//! passage of time ([`Host::handle_timeout`] when `now` reaches [`Host::poll_timeout`])
//! are the other inputs. Nothing here reads a clock, starts a thread or calls the OS: the
//! simulator drives hosts with a virtual clock, tests drive them by hand.
//!
//! The FireEngine runtime drives an [`IpLayer`] of its own and keeps TCP in its squeues:
//! it collects what a receive batch carries for TCP and gives each segment to its squeue.
//! `Host` is the reference composition, used by the simulator and by the protocol tests.
//!
//! # Bounds
//! Every queue is bounded: ARP's pending packets (`arp_pending_max`), reassembly
//! (`ip_reass_queue_bytes`), listen queues (`tcp_conn_req_max_q`/`_q0`), UDP receive
//! queues, the loopback queue, and the transmit queue (frames are dropped and counted when
//! the driver does not drain it). Readiness events are coalesced per socket.

mod input;
pub mod ip;
mod output;
pub mod stats;
mod tcp;
mod udp;

pub use ip::{IpLayer, SegmentBytes, TcpIcmpError, TcpSegmentIn, TcpSink};
pub use stats::HostStats;

use crate::icmp::ratelimit::TokenBucket;
use crate::ip::route::{IfaceId, Route, RouteError, RouteTable};
use crate::params::{ParamError, Params};
use crate::slab::Key;
use crate::tcp::{Events, TcpSettings};
use crate::time::Instant;
use crate::wire::MacAddr;
use core::time::Duration;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

pub use output::HEADROOM;
pub use tcp::{Conn, Listener};

/// Frames waiting for the driver beyond this are dropped (counted as ipOutDiscards).
pub const MAX_TX_QUEUE: usize = 65_536;
/// Datagrams to our own addresses waiting for delivery.
const MAX_LOOPBACK_QUEUE: usize = 4096;

/// A network interface of a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interface {
    pub mac: MacAddr,
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
    /// IP MTU.
    pub mtu: u32,
}

/// A TCP connection handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub Key);
/// A TCP listener handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListenerId(pub Key);
/// A UDP socket handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UdpId(pub Key);

/// Something became ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketEvent {
    Tcp(ConnId, Events),
    /// A connection waits in the accept queue.
    Listener(ListenerId),
    /// A datagram arrived.
    Udp(UdpId),
}

/// A frame for the driver to put on interface `iface`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub iface: IfaceId,
    pub data: Vec<u8>,
    /// 0: an ordinary frame. Otherwise a large TCP segment for an interface that segments
    /// by itself ([`Host::set_iface_tso`]), to be cut into pieces of this many payload
    /// bytes (as [`crate::ip::gso::gso_split`] would).
    pub gso_size: u16,
}

/// An ICMP echo reply that arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PingReply {
    pub from: Ipv4Addr,
    pub ident: u16,
    pub seq_no: u16,
    pub len: usize,
    pub at: Instant,
}

/// A packet waiting for ARP: a whole frame with the Ethernet header still to be filled.
#[derive(Debug)]
pub(crate) struct Pending {
    iface: IfaceId,
    frame: Vec<u8>,
    /// A large TCP segment's piece size (see [`Frame::gso_size`]); 0 otherwise.
    gso: u16,
}

/// What a host holds (see [`Host::memory`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostMemory {
    /// TCP connections, in every state.
    pub conns: usize,
    /// Connections in SYN-RECEIVED, over all listeners.
    pub half_open: usize,
    /// Established connections waiting for accept, over all listeners.
    pub accept_queued: usize,
    /// Bytes in TCP send, receive and out-of-order queues.
    pub tcp_bytes: usize,
    pub arp_entries: usize,
    /// Packets waiting for ARP resolution.
    pub arp_pending: usize,
    /// Bytes of datagrams under reassembly.
    pub reasm_bytes: usize,
    /// Frames waiting for the driver.
    pub tx_frames: usize,
}

impl HostMemory {
    /// Raises each figure to `m`'s where that is larger (the peak of a series).
    pub fn raise_to(&mut self, m: &HostMemory) {
        self.conns = self.conns.max(m.conns);
        self.half_open = self.half_open.max(m.half_open);
        self.accept_queued = self.accept_queued.max(m.accept_queued);
        self.tcp_bytes = self.tcp_bytes.max(m.tcp_bytes);
        self.arp_entries = self.arp_entries.max(m.arp_entries);
        self.arp_pending = self.arp_pending.max(m.arp_pending);
        self.reasm_bytes = self.reasm_bytes.max(m.reasm_bytes);
        self.tx_frames = self.tx_frames.max(m.tx_frames);
    }
}

/// One host's protocol core: an IP layer and TCP over it.
#[derive(Debug)]
pub struct Host {
    pub(crate) ip: IpLayer,
    pub(crate) tcp: tcp::TcpLayer,
}

/// The token bucket of `tcp_rst_sent_rate` (RSTs per second; 0 = unlimited).
pub fn rst_bucket(p: &Params) -> TokenBucket {
    if p.tcp_rst_sent_rate == 0 {
        TokenBucket::new(Duration::ZERO, 1)
    } else {
        TokenBucket::new(
            Duration::from_nanos(1_000_000_000 / u64::from(p.tcp_rst_sent_rate)),
            p.tcp_rst_sent_rate,
        )
    }
}

impl Host {
    /// A host with no interfaces. `secret` keys ISNs, timestamp offsets and ephemeral
    /// ports (RFC 6528, RFC 6056): pass 16 bytes from a good random source (a fixed value
    /// in the simulator, for replay).
    pub fn new(params: Params, secret: [u8; 16]) -> Host {
        Host {
            tcp: tcp::TcpLayer::new(&params, secret),
            ip: IpLayer::new(params, secret),
        }
    }

    /// The IP layer.
    pub fn ip(&self) -> &IpLayer {
        &self.ip
    }

    /// Adds an interface with an address and its connected route. Returns its id.
    pub fn add_interface(&mut self, iface: Interface) -> Result<IfaceId, RouteError> {
        self.ip.add_interface(iface)
    }

    /// Adds a route (e.g. a default route via a gateway).
    pub fn add_route(&mut self, route: Route) -> Result<(), RouteError> {
        self.ip.add_route(route)
    }

    /// The routing table.
    pub fn routes(&self) -> &RouteTable {
        self.ip.routes()
    }

    /// Removes a route.
    pub fn remove_route(&mut self, dst: Ipv4Addr, prefix_len: u8) -> Result<Route, RouteError> {
        self.ip.remove_route(dst, prefix_len)
    }

    /// The interfaces.
    pub fn interfaces(&self) -> &[Interface] {
        self.ip.interfaces()
    }

    /// The tunables.
    pub fn params(&self) -> &Params {
        self.ip.params()
    }

    /// Sets a tunable at run time (`ember ndd -set`). New TCP connections use the new
    /// values; IP, ARP and ICMP limits apply at once.
    pub fn set_param(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        self.set_params(&[(name, value)])
    }

    /// Sets several tunables at once (see [`Params::set_many`]).
    pub fn set_params(&mut self, pairs: &[(&str, &str)]) -> Result<(), ParamError> {
        self.ip.set_params(pairs)?;
        self.tcp.tcp_set = Arc::new(TcpSettings::from_params(&self.ip.params));
        self.tcp.rst_bucket = rst_bucket(&self.ip.params);
        Ok(())
    }

    /// The next frame to transmit.
    pub fn poll_transmit(&mut self) -> Option<Frame> {
        self.ip.poll_transmit()
    }

    /// Whether interface `iface` segments large TCP segments itself (TSO, default off):
    /// it then gets them whole ([`Frame::gso_size`]); otherwise the host splits them in
    /// software ([`crate::ip::gso::gso_split`]) right before the interface.
    pub fn set_iface_tso(&mut self, iface: IfaceId, on: bool) {
        self.ip.set_iface_tso(iface, on);
    }

    /// Frames waiting in the transmit queue.
    pub fn tx_queue_len(&self) -> usize {
        self.ip.tx_queue_len()
    }

    /// A frame arrived on interface `iface`.
    pub fn receive(&mut self, now: Instant, iface: IfaceId, frame: &[u8]) {
        self.ip.receive(now, iface, frame, &mut self.tcp);
    }

    /// Frames that arrived together on interface `iface` (one receive batch, e.g. one
    /// poll of a device), in arrival order: [`IpLayer::receive_batch`], with TCP taking
    /// each segment as it comes (or, with `ip_gro`, each coalesced run).
    ///
    /// As in the runtime (one device poll), a connection the batch's segments reach sends
    /// once, after all of them are in: a run of ACKs opens the window once, and what a
    /// segment asked for (an ACK, a retransmitted SYN,ACK) may be overtaken by what a
    /// later segment of the batch did. New connections (a SYN at a listener) and answers
    /// from no connection leave at once.
    pub fn receive_batch<I>(&mut self, now: Instant, iface: IfaceId, frames: I)
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        // Nested calls (none today) would flush with the outer batch.
        let outer = !self.tcp.batch;
        self.tcp.batch = true;
        self.ip.receive_batch(now, iface, frames, &mut self.tcp);
        if outer {
            self.tcp.batch = false;
            let mut touched = core::mem::take(&mut self.tcp.touched);
            for &id in &touched {
                self.tcp.flush_conn(&mut self.ip, now, id);
            }
            touched.clear();
            if self.tcp.touched.is_empty() {
                self.tcp.touched = touched;
            }
        }
        self.ip.run_loopback(now, &mut self.tcp);
    }

    /// What the host holds now, for checking its bounds (see the module's "Bounds").
    pub fn memory(&self) -> HostMemory {
        let mut m = HostMemory {
            conns: self.tcp.conns.len(),
            arp_entries: self.ip.arp.len(),
            arp_pending: self.ip.arp.pending_packets(),
            reasm_bytes: self.ip.reasm.bytes_held(),
            tx_frames: self.ip.tx.len(),
            ..HostMemory::default()
        };
        for (_, l) in self.tcp.listeners.iter() {
            m.half_open += l.syn_q as usize;
            m.accept_queued += l.accept_q.len();
        }
        for (_, c) in self.tcp.conns.iter() {
            let i = c.tcb.info();
            m.tcp_bytes += i.send_queued + i.recv_queued + i.ooo_bytes;
        }
        m
    }

    /// The earliest instant at which [`Host::handle_timeout`] has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.tcp.timers.first().map(|&(t, _)| t),
            self.ip.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Runs everything due at `now`: TCP timers, ARP retries, reassembly expiry.
    pub fn handle_timeout(&mut self, now: Instant) {
        // TCP timers.
        while let Some(&(t, idx)) = self.tcp.timers.first() {
            if t > now {
                break;
            }
            self.tcp.timers.pop_first();
            let Some(key) = self.tcp.conns.key_at(idx) else {
                continue;
            };
            let id = ConnId(key);
            if let Some(c) = self.tcp.conns.get_mut(key) {
                c.timer = None;
                c.tcb.handle_timeout(now);
            }
            self.tcp.flush_conn(&mut self.ip, now, id);
        }
        self.ip.handle_timeout(now, &mut self.tcp);
    }

    /// The next readiness event: connections and listeners first, then UDP sockets.
    pub fn poll_event(&mut self) -> Option<SocketEvent> {
        while let Some(ev) = self.tcp.ready.pop_front() {
            match ev {
                SocketEvent::Tcp(id, _) => {
                    if let Some(c) = self.tcp.conns.get_mut(id.0) {
                        c.queued = false;
                        let e = core::mem::take(&mut c.pending);
                        return Some(SocketEvent::Tcp(id, e));
                    }
                }
                SocketEvent::Listener(id) => {
                    if let Some(l) = self.tcp.listeners.get_mut(id.0) {
                        l.queued = false;
                        return Some(ev);
                    }
                }
                SocketEvent::Udp(_) => return Some(ev),
            }
        }
        self.ip.poll_udp_event().map(SocketEvent::Udp)
    }

    /// Echo replies received so far (drained).
    pub fn take_ping_replies(&mut self) -> Vec<PingReply> {
        self.ip.take_ping_replies()
    }

    /// All counters; TCP ones summed over live and finished connections.
    pub fn stats(&self) -> HostStats {
        let mut s = self.ip.stats();
        let t = &self.tcp;
        s.tcp = t.stats;
        let mut all = t.gone_tcb_stats;
        s.tcp.conns_now = t.conns.len() as u64;
        s.tcp.mem_bytes = t.mem_used as u64;
        for (_, c) in t.conns.iter() {
            all.accumulate(c.tcb.stats());
            if matches!(
                c.tcb.state(),
                crate::tcp::State::Established | crate::tcp::State::CloseWait
            ) {
                s.tcp.curr_estab += 1;
            }
        }
        s.tcp.add_tcb(&all);
        s.tcp.add_endpoint(&t.endpoint.stats);
        s
    }

    /// Sends an ICMP echo request (ping).
    pub fn ping(
        &mut self,
        now: Instant,
        dst: Ipv4Addr,
        ident: u16,
        seq_no: u16,
        data: &[u8],
    ) -> std::io::Result<()> {
        self.ip.ping(now, dst, ident, seq_no, data, &mut self.tcp)
    }

    /// The source address to use towards `dst`, and the path MTU.
    pub fn source_for(&self, dst: Ipv4Addr) -> Option<(Ipv4Addr, u32)> {
        self.ip.source_for(dst)
    }

    /// Binds a UDP socket (port 0 picks an ephemeral port).
    pub fn udp_bind(&mut self, local: SocketAddrV4) -> std::io::Result<UdpId> {
        self.ip.udp_bind(local)
    }

    /// The local address of a UDP socket.
    pub fn udp_local_addr(&self, id: UdpId) -> Option<SocketAddrV4> {
        self.ip.udp_local_addr(id)
    }

    /// Sends a datagram (fragmented if larger than the path MTU).
    pub fn udp_send_to(
        &mut self,
        now: Instant,
        id: UdpId,
        to: SocketAddrV4,
        data: &[u8],
    ) -> std::io::Result<usize> {
        self.ip.udp_send_to(now, id, to, data, &mut self.tcp)
    }

    /// IP_TOS for a UDP socket (RFC 1122 §4.1.4: the application can set the TOS).
    pub fn udp_set_tos(&mut self, id: UdpId, tos: u8) -> std::io::Result<()> {
        self.ip.udp_set_tos(id, tos)
    }

    /// Receives a datagram, if one is queued.
    pub fn udp_recv_from(&mut self, id: UdpId) -> std::io::Result<crate::udp::Datagram> {
        self.ip.udp_recv_from(id)
    }

    /// Datagrams waiting on a UDP socket.
    pub fn udp_pending(&self, id: UdpId) -> usize {
        self.ip.udp_pending(id)
    }

    /// Closes a UDP socket.
    pub fn udp_close(&mut self, id: UdpId) {
        self.ip.udp_close(id);
    }
}
