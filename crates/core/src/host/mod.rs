//! A whole protocol-core host: interfaces, IP, ARP, ICMP, UDP and TCP in one sans-IO
//! state machine.
//!
//! # Design
//! `Host` composes the core's layers the way a single-threaded stack would: a frame
//! comes in ([`Host::receive`]), Ethernet hands it to ARP or IP, IP validates and
//! reassembles and hands the datagram to ICMP, UDP or TCP by a direct call (TCP and IP
//! are merged: no queue between them), and whatever the layers want to send is routed,
//! resolved through ARP, framed, and queued for [`Host::poll_transmit`]. Application
//! calls (`tcp_*`, `udp_*`, [`Host::ping`]) and the passage of time
//! ([`Host::handle_timeout`] when `now` reaches [`Host::poll_timeout`]) are the other
//! inputs. Nothing here reads a clock, starts a thread or calls the OS: the simulator
//! drives hosts with a virtual clock, tests drive them by hand.
//!
//! The FireEngine runtime uses the same layers but splits this composition across its
//! classifier and squeues; `Host` is the reference composition, used by the simulator and
//! by the protocol tests.
//!
//! # Bounds
//! Every queue is bounded: ARP's pending packets (`arp_pending_max`), reassembly
//! (`ip_reass_queue_bytes`), listen queues (`tcp_conn_req_max_q`/`_q0`), UDP receive
//! queues, the loopback queue, and the transmit queue (frames are dropped and counted when
//! the driver does not drain it). Readiness events are coalesced per socket.

mod input;
mod output;
pub mod slab;
pub mod stats;
mod tcp;

pub use slab::Key;
pub use stats::HostStats;

use crate::icmp::ratelimit::TokenBucket;
use crate::ip::arp::{ArpCache, ArpConfig};
use crate::ip::gro::{Gro, GroSeg};
use crate::ip::reassembly::{ReasmConfig, Reassembler};
use crate::ip::route::{IfaceId, Route, RouteError, RouteTable};
use crate::params::{ParamError, Params};
use crate::tcp::isn::IsnGenerator;
use crate::tcp::{Endpoint, Events, TcbStats, TcpSettings};
use crate::time::Instant;
use crate::udp::UdpEndpoint;
use crate::wire::MacAddr;
use core::time::Duration;
use slab::Slab;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};

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

/// What a host with external TCP ([`Host::set_tcp_external`]) hands to its owner instead
/// of running TCP itself: the FireEngine runtime keeps connections in its squeues and
/// uses `Host` for IP, ARP, ICMP, UDP and reassembly only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TcpUpcall {
    /// A TCP segment for one of our addresses (complete datagram, not broadcast). From
    /// [`Host::receive_batch`] with `ip_gro` on it may stand for several wire segments
    /// joined by receive-side coalescing (`ip::gro`): give it to
    /// [`crate::tcp::Tcb::on_segment_gro`] with `segs` and `gso_size`.
    Segment {
        src: Ipv4Addr,
        dst: Ipv4Addr,
        /// TCP header and payload.
        segment: Vec<u8>,
        /// The checksum was verified (then the checksum field of a merged segment is
        /// stale and must not be checked); `false`: verify it.
        csum_ok: bool,
        /// Wire segments it stands for (1 unless merged).
        segs: u16,
        /// Payload bytes of each piece but the last (0 unless merged).
        gso_size: u16,
    },
    /// An ICMP destination unreachable quoting one of our TCP segments (RFC 5927: the
    /// owner validates `seq` against the connection).
    IcmpError {
        local: SocketAddrV4,
        remote: SocketAddrV4,
        seq: u32,
        code: u8,
        mtu: u16,
    },
}

/// Upcalls waiting for the owner beyond this are dropped (counted as ipInDiscards).
pub const MAX_TCP_UPCALLS: usize = 65_536;

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

/// One host's protocol core.
#[derive(Debug)]
pub struct Host {
    pub(crate) params: Params,
    pub(crate) tcp_set: TcpSettings,
    pub(crate) ifaces: Vec<Interface>,
    /// Per interface: it segments large TCP segments itself (TSO).
    pub(crate) iface_tso: Vec<bool>,
    pub(crate) routes: RouteTable,
    pub(crate) arp: ArpCache<MacAddr, Pending>,
    pub(crate) reasm: Reassembler,
    pub(crate) icmp_bucket: TokenBucket,
    pub(crate) rst_bucket: TokenBucket,
    pub(crate) isn: IsnGenerator,
    pub(crate) next_ident: u16,
    pub(crate) tx: VecDeque<Frame>,
    pub(crate) lo: VecDeque<Vec<u8>>,
    pub(crate) conns: Slab<Conn>,
    pub(crate) by_tuple: HashMap<(SocketAddrV4, SocketAddrV4), ConnId>,
    pub(crate) listeners: Slab<Listener>,
    pub(crate) listener_by_addr: HashMap<SocketAddrV4, ListenerId>,
    pub(crate) udp: Slab<UdpEndpoint>,
    pub(crate) udp_by_addr: HashMap<SocketAddrV4, UdpId>,
    pub(crate) timers: BTreeSet<(Instant, u32)>,
    pub(crate) ready: VecDeque<SocketEvent>,
    pub(crate) pings: VecDeque<PingReply>,
    pub(crate) next_port: u32,
    pub(crate) stats: HostStats,
    /// What happens to segments before a connection takes them, and its counters.
    pub(crate) endpoint: Endpoint,
    pub(crate) gone_tcb_stats: TcbStats,
    /// TCP runs outside (see [`TcpUpcall`]).
    pub(crate) tcp_external: bool,
    pub(crate) tcp_up: VecDeque<TcpUpcall>,
    /// Receive-side coalescing of the batch being received (`ip_gro`).
    pub(crate) gro: Gro,
    /// A batch with GRO is being received: TCP segments go through `gro`.
    pub(crate) gro_batch: bool,
    /// GRO's output, reused from batch to batch.
    pub(crate) gro_out: Vec<GroSeg>,
    /// Bytes the connections' queues hold, as last counted (`tcp_mem_max`).
    pub(crate) tcp_mem_used: usize,
    /// A receive batch is being taken in ([`Host::receive_batch`]): connections that
    /// segments reach send once, at its end, as the runtime's squeues do.
    pub(crate) tcp_batch: bool,
    /// The connections the batch reached, to flush at its end.
    pub(crate) tcp_touched: Vec<ConnId>,
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
            tcp_set: TcpSettings::from_params(&params),
            ifaces: Vec::new(),
            iface_tso: Vec::new(),
            routes: RouteTable::new(4096),
            arp: ArpCache::new(arp_config(&params)),
            reasm: Reassembler::new(reasm_config(&params)),
            icmp_bucket: TokenBucket::new(
                Params::ms(params.icmp_err_interval),
                params.icmp_err_burst,
            ),
            rst_bucket: rst_bucket(&params),
            isn: IsnGenerator::new(secret),
            next_ident: u16::from_be_bytes([secret[0], secret[1]]),
            tx: VecDeque::new(),
            lo: VecDeque::new(),
            conns: Slab::default(),
            by_tuple: HashMap::new(),
            listeners: Slab::default(),
            listener_by_addr: HashMap::new(),
            udp: Slab::default(),
            udp_by_addr: HashMap::new(),
            timers: BTreeSet::new(),
            ready: VecDeque::new(),
            pings: VecDeque::new(),
            next_port: 0,
            stats: HostStats::default(),
            endpoint: Endpoint::default(),
            gone_tcb_stats: TcbStats::default(),
            tcp_external: false,
            tcp_up: VecDeque::new(),
            gro: Gro::default(),
            gro_batch: false,
            gro_out: Vec::new(),
            tcp_mem_used: 0,
            tcp_batch: false,
            tcp_touched: Vec::new(),
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

    /// Sets a tunable at run time (`ember ndd -set`). New TCP connections use the new
    /// values; IP, ARP and ICMP limits apply at once.
    pub fn set_param(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        self.set_params(&[(name, value)])
    }

    /// Sets several tunables at once (see [`Params::set_many`]).
    pub fn set_params(&mut self, pairs: &[(&str, &str)]) -> Result<(), ParamError> {
        self.params.set_many(pairs)?;
        self.tcp_set = TcpSettings::from_params(&self.params);
        self.arp.set_config(arp_config(&self.params));
        self.reasm.set_config(reasm_config(&self.params));
        self.icmp_bucket.set(
            Params::ms(self.params.icmp_err_interval),
            self.params.icmp_err_burst,
        );
        self.rst_bucket = rst_bucket(&self.params);
        Ok(())
    }

    /// Hands TCP to the owner: segments and ICMP errors for TCP become [`TcpUpcall`]s
    /// (read them with [`Host::poll_tcp_upcall`]) instead of reaching this host's own
    /// connections. The owner sends its segments with [`Host::send_datagram`].
    pub fn set_tcp_external(&mut self, on: bool) {
        self.tcp_external = on;
    }

    /// The next TCP upcall (external TCP only).
    pub fn poll_tcp_upcall(&mut self) -> Option<TcpUpcall> {
        self.tcp_up.pop_front()
    }

    pub(crate) fn push_upcall(&mut self, u: TcpUpcall) {
        if self.tcp_up.len() >= MAX_TCP_UPCALLS {
            self.stats.ip.in_discards += 1;
            return;
        }
        self.tcp_up.push_back(u);
    }

    /// The next frame to transmit.
    pub fn poll_transmit(&mut self) -> Option<Frame> {
        self.tx.pop_front()
    }

    /// Whether interface `iface` segments large TCP segments itself (TSO, default off):
    /// it then gets them whole ([`Frame::gso_size`]); otherwise the host splits them in
    /// software ([`crate::ip::gso::gso_split`]) right before the interface.
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

    /// What the host holds now, for checking its bounds (see the module's "Bounds").
    pub fn memory(&self) -> HostMemory {
        let mut m = HostMemory {
            conns: self.conns.len(),
            arp_entries: self.arp.len(),
            arp_pending: self.arp.pending_packets(),
            reasm_bytes: self.reasm.bytes_held(),
            tx_frames: self.tx.len(),
            ..HostMemory::default()
        };
        for (_, l) in self.listeners.iter() {
            m.half_open += l.syn_q as usize;
            m.accept_queued += l.accept_q.len();
        }
        for (_, c) in self.conns.iter() {
            let i = c.tcb.info();
            m.tcp_bytes += i.send_queued + i.recv_queued + i.ooo_bytes;
        }
        m
    }

    /// The earliest instant at which [`Host::handle_timeout`] has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.timers.first().map(|&(t, _)| t),
            self.arp.poll_timeout(),
            self.reasm.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Runs everything due at `now`: TCP timers, ARP retries, reassembly expiry.
    pub fn handle_timeout(&mut self, now: Instant) {
        // TCP timers.
        while let Some(&(t, idx)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.pop_first();
            let Some(key) = self.conns.key_at(idx) else {
                continue;
            };
            let id = ConnId(key);
            if let Some(c) = self.conns.get_mut(key) {
                c.timer = None;
                c.tcb.on_timeout(now);
            }
            self.flush_conn(now, id);
        }
        self.arp_timeouts(now);
        self.reasm_timeouts(now);
        self.run_loopback(now);
    }

    /// The next readiness event.
    pub fn poll_event(&mut self) -> Option<SocketEvent> {
        loop {
            let ev = self.ready.pop_front()?;
            match ev {
                SocketEvent::Tcp(id, _) => {
                    if let Some(c) = self.conns.get_mut(id.0) {
                        c.queued = false;
                        let e = core::mem::take(&mut c.pending);
                        return Some(SocketEvent::Tcp(id, e));
                    }
                }
                SocketEvent::Listener(id) => {
                    if let Some(l) = self.listeners.get_mut(id.0) {
                        l.queued = false;
                        return Some(ev);
                    }
                }
                SocketEvent::Udp(id) => {
                    if self.udp.get(id.0).is_some() {
                        return Some(ev);
                    }
                }
            }
        }
    }

    /// Echo replies received so far (drained).
    pub fn take_ping_replies(&mut self) -> Vec<PingReply> {
        self.pings.drain(..).collect()
    }

    /// All counters; TCP ones summed over live and finished connections.
    pub fn stats(&self) -> HostStats {
        let mut s = self.stats;
        let mut all = self.gone_tcb_stats;
        s.tcp.conns_now = self.conns.len() as u64;
        s.tcp.mem_bytes = self.tcp_mem_used as u64;
        for (_, c) in self.conns.iter() {
            all.accumulate(c.tcb.stats());
            if matches!(
                c.tcb.state(),
                crate::tcp::State::Established | crate::tcp::State::CloseWait
            ) {
                s.tcp.curr_estab += 1;
            }
        }
        s.tcp.add_tcb(&all);
        s.tcp.add_endpoint(&self.endpoint.stats);
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
    pub(crate) fn is_local_addr(&self, a: Ipv4Addr) -> bool {
        a.is_loopback() || self.ifaces.iter().any(|i| i.addr == a)
    }

    pub(crate) fn next_ident(&mut self) -> u16 {
        self.next_ident = self.next_ident.wrapping_add(1);
        self.next_ident
    }
}
