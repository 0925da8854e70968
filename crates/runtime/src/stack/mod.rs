//! A FireEngine stack: squeues, the classifier, the IP layer, devices, tunables,
//! counters and probes, put together.
//!
//! # Design
//! * **Squeues** ([`crate::squeue`]): one per CPU given to the stack, each with a worker
//!   thread pinned to its CPU. Each owns a `perim::Perim`: its TCP connections and their
//!   timer wheel. Connection state is touched only there.
//! * **Classifier** ([`crate::classifier`]): a sharded connected table and a bind table,
//!   read without a global lock; it says which squeue a segment goes to.
//! * **IP layer**: for traffic on devices, the protocol core's [`IpLayer`] (ARP, ICMP,
//!   UDP, fragmentation and reassembly, GRO, GSO) behind one mutex. A device batch takes
//!   the lock once; the IP layer returns the batch's TCP segments (a [`TcpSink`] that
//!   collects them), and once the lock is let go each goes to its squeue after one
//!   classifier lookup (`StackInner::receive_frames`). Established connections cache their
//!   next hop and send frames to the device directly. Loopback TCP (127/8 and the stack's own
//!   addresses) never touches it: a segment goes from one perimeter to the other by a
//!   direct call, without checksums, as on Linux `lo`.
//! * **Binding**: an outbound connection goes to the squeue of the CPU its caller runs on
//!   (and its ephemeral port is chosen so the reply's flow hash lands there); an inbound
//!   one to the squeue of the queue its SYN arrived on; one accepted from a local client
//!   to the client's squeue (the SYN arrives through the client's loopback path), so the
//!   two ends share a squeue and can fuse.
//! * **Probes** (docs/PROBES.md): an in-process subscriber API and the same probes as
//!   USDT probes (`probes.rs`) for bpftrace or DTrace; with no subscriber and no tracer
//!   a probe costs the loads of the subscriber flag and of the probe's USDT semaphore and
//!   one predictable branch.
//! * **Filter**: a minimal IP filter (drop rules by protocol, addresses and ports). Adding
//!   a rule unfuses every fused connection it matches, because fused data would bypass it.

pub(crate) mod perim;
#[allow(unsafe_code)]
mod probes;
pub(crate) mod txq;
pub use txq::TxStats;

use crate::classifier::Classifier;
use crate::dev::Device;
use crate::squeue::{Mode, SqCounters, Squeue};
use ember_core::host::{
    rst_bucket, HostStats, Interface, IpLayer, TcpIcmpError, TcpSegmentIn, TcpSink,
};
use ember_core::icmp::ratelimit::TokenBucket;
use ember_core::ip::route::{IfaceId, Route};
use ember_core::params::{ParamError, Params};
use ember_core::tcp::isn::IsnGenerator;
use ember_core::tcp::{TcbInfo, TcpSettings};
use ember_core::time::Instant;
use ember_core::wire::MacAddr;
use perim::{Perim, PerimStats, Seg};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

pub use perim::PerimStats as SqTcpStats;

/// A probe point (DTrace-style provider:name). Each is also a USDT probe of the same
/// name (bpftrace, DTrace); docs/PROBES.md lists when each fires and its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Probe {
    /// `tcp:send`: TCP passed `len` payload bytes down (a segment, or a fused write).
    TcpSend,
    /// `tcp:receive`: TCP took `len` payload bytes (from a segment, or a fused write).
    TcpReceive,
    /// `tcp:state-change`: a connection changed state; `len` is the new state, `arg`
    /// the old one, each as `ember_core::tcp::State as usize` (CLOSED 0, LISTEN 1,
    /// SYN-SENT 2, SYN-RECEIVED 3, ESTABLISHED 4, FIN-WAIT-1 5, FIN-WAIT-2 6,
    /// CLOSE-WAIT 7, CLOSING 8, LAST-ACK 9, TIME-WAIT 10). A new connection starts from
    /// CLOSED.
    StateChange,
    /// `tcp:connect-request`.
    ConnectRequest,
    /// `tcp:connect-established`.
    ConnectEstablished,
    /// `tcp:connect-refused`: an active open was refused (a RST answered its SYN).
    ConnectRefused,
    /// `tcp:accept-established`.
    AcceptEstablished,
    /// `tcp:accept-pending`: a SYN created a passive connection.
    AcceptEstablishedPending,
    /// `tcp:accept-refused`: a SYN for a port nobody listens on (answered with a RST if
    /// `tcp_rst_sent_rate` allows).
    AcceptRefused,
    /// `ip:send`: a datagram (`len` bytes of TCP) left IP; never for fused data.
    IpSend,
    /// `ip:receive`.
    IpReceive,
    /// `fusion:fuse`.
    Fuse,
    /// `fusion:unfuse`.
    Unfuse,
    /// `fusion:flowctl`: a fused writer stopped (`len` 1 for the unread-writes limit, 0
    /// for a full receive buffer).
    FlowCtl,
    /// `squeue:enter`: a thread took squeue `squeue` to run work; `arg` says how
    /// ([`crate::squeue::Enter`] as a number: 0 inline, 1 queued, 2 worker).
    SqueueEnter,
    /// `squeue:drain`: a drain of queued work ended: `len` entries run in `arg`
    /// nanoseconds (every worker drain; a caller's drain when it ran queued entries).
    SqueueDrain,
}

impl Probe {
    /// Every probe, in declaration order.
    pub const ALL: [Probe; 16] = [
        Probe::TcpSend,
        Probe::TcpReceive,
        Probe::StateChange,
        Probe::ConnectRequest,
        Probe::ConnectEstablished,
        Probe::ConnectRefused,
        Probe::AcceptEstablished,
        Probe::AcceptEstablishedPending,
        Probe::AcceptRefused,
        Probe::IpSend,
        Probe::IpReceive,
        Probe::Fuse,
        Probe::Unfuse,
        Probe::FlowCtl,
        Probe::SqueueEnter,
        Probe::SqueueDrain,
    ];

    /// `provider:name` (the USDT provider and probe names too).
    pub fn name(self) -> &'static str {
        match self {
            Probe::TcpSend => "tcp:send",
            Probe::TcpReceive => "tcp:receive",
            Probe::StateChange => "tcp:state-change",
            Probe::ConnectRequest => "tcp:connect-request",
            Probe::ConnectEstablished => "tcp:connect-established",
            Probe::ConnectRefused => "tcp:connect-refused",
            Probe::AcceptEstablished => "tcp:accept-established",
            Probe::AcceptEstablishedPending => "tcp:accept-pending",
            Probe::AcceptRefused => "tcp:accept-refused",
            Probe::IpSend => "ip:send",
            Probe::IpReceive => "ip:receive",
            Probe::Fuse => "fusion:fuse",
            Probe::Unfuse => "fusion:unfuse",
            Probe::FlowCtl => "fusion:flowctl",
            Probe::SqueueEnter => "squeue:enter",
            Probe::SqueueDrain => "squeue:drain",
        }
    }
}

/// The arguments of one probe firing (a stable struct; fields may be added).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeEvent {
    pub probe: Probe,
    /// The connection's local end (`0.0.0.0:0` for the squeue probes).
    pub local: SocketAddrV4,
    /// The connection's remote end (`0.0.0.0:0` for the squeue probes).
    pub remote: SocketAddrV4,
    /// Bytes for `tcp:send`/`receive` and `ip:send`/`receive`; the new state for
    /// `tcp:state-change`; for `fusion:flowctl` 1 (the unread-writes limit) or 0 (the
    /// reader's buffer is full); entries run for `squeue:drain`; otherwise 0.
    pub len: usize,
    /// The index of the squeue the probe fired in.
    pub squeue: usize,
    /// `tcp:state-change`: the old state; `squeue:enter`: how
    /// ([`crate::squeue::Enter`] as a number); `squeue:drain`: nanoseconds; otherwise 0.
    pub arg: u64,
}

impl ProbeEvent {
    pub(crate) fn new(
        probe: Probe,
        squeue: usize,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        len: usize,
        arg: u64,
    ) -> ProbeEvent {
        ProbeEvent {
            probe,
            local,
            remote,
            len,
            squeue,
            arg,
        }
    }

    /// For `squeue:enter`: how the thread entered.
    pub fn enter_how(&self) -> Option<crate::squeue::Enter> {
        match self.probe {
            Probe::SqueueEnter => crate::squeue::Enter::from_u64(self.arg),
            _ => None,
        }
    }
}

type Subscriber = Arc<dyn Fn(&ProbeEvent) + Send + Sync>;

/// A rule of the IP filter: drop datagrams that match every field given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FilterRule {
    /// IP protocol (6 = TCP, 17 = UDP); `None` = any.
    pub protocol: Option<u8>,
    pub src: Option<Ipv4Addr>,
    pub dst: Option<Ipv4Addr>,
    pub src_port: Option<u16>,
    pub dst_port: Option<u16>,
}

impl FilterRule {
    fn matches(&self, proto: u8, from: SocketAddrV4, to: SocketAddrV4) -> bool {
        self.protocol.is_none_or(|p| p == proto)
            && self.src.is_none_or(|a| a == *from.ip())
            && self.dst.is_none_or(|a| a == *to.ip())
            && self.src_port.is_none_or(|p| p == from.port())
            && self.dst_port.is_none_or(|p| p == to.port())
    }
}

/// Configuration of one interface.
#[derive(Debug, Clone, Copy)]
pub struct IfaceConfig {
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
    /// `None`: a locally administered address derived from `addr`.
    pub mac: Option<MacAddr>,
    /// IP MTU; `None`: 1500.
    pub mtu: Option<u32>,
}

/// Builds a [`Stack`].
pub struct StackBuilder {
    squeues: Option<usize>,
    cpus: Option<Vec<usize>>,
    pin: bool,
    params: Params,
    ifaces: Vec<(IfaceConfig, Vec<Arc<dyn Device>>)>,
    routes: Vec<(Ipv4Addr, u8, Option<Ipv4Addr>)>,
    secret: Option<[u8; 16]>,
}

impl Default for StackBuilder {
    fn default() -> Self {
        StackBuilder {
            squeues: None,
            cpus: None,
            pin: true,
            params: Params::default(),
            ifaces: Vec::new(),
            routes: Vec::new(),
            secret: None,
        }
    }
}

impl StackBuilder {
    /// Number of squeues (default: one per CPU the process may run on).
    pub fn squeues(mut self, n: usize) -> Self {
        self.squeues = Some(n.clamp(1, 1024));
        self
    }

    /// The CPUs the squeues' workers are bound to, in order (default: all).
    pub fn cpus(mut self, cpus: Vec<usize>) -> Self {
        self.cpus = Some(cpus);
        self
    }

    /// Pin workers to their CPUs (default on).
    pub fn pin_workers(mut self, on: bool) -> Self {
        self.pin = on;
        self
    }

    /// Sets a tunable (`ndd` name); a bad name or value is refused.
    pub fn param(mut self, name: &str, value: &str) -> Result<Self, ParamError> {
        self.params.set(name, value)?;
        Ok(self)
    }

    /// Uses these tunables.
    pub fn params(mut self, p: Params) -> Self {
        self.params = p;
        self
    }

    /// Adds an interface on `dev`.
    pub fn interface(mut self, cfg: IfaceConfig, dev: Arc<dyn Device>) -> Self {
        self.ifaces.push((cfg, vec![dev]));
        self
    }

    /// Adds an interface on a multi-queue device: `queues[q]` is one queue pair of the
    /// same link (a multi-queue TAP's queue, a fanout AF_PACKET socket). Queue `q`'s
    /// receive side is serviced by squeue `q mod n`, and squeue `i` transmits on queue
    /// `i mod queues.len()`, so a device that steers a flow's replies to the queue the
    /// flow was last sent on (TAP's automatic queue selection) keeps each connection on
    /// one squeue end to end. An empty list is refused by `build`.
    pub fn interface_queues(mut self, cfg: IfaceConfig, queues: Vec<Arc<dyn Device>>) -> Self {
        self.ifaces.push((cfg, queues));
        self
    }

    /// Adds a route (a default route is `0.0.0.0/0`).
    pub fn route(mut self, dst: Ipv4Addr, prefix_len: u8, gateway: Option<Ipv4Addr>) -> Self {
        self.routes.push((dst, prefix_len, gateway));
        self
    }

    /// Fixes the secret for ISNs and ports (tests); default: from the OS.
    pub fn secret(mut self, s: [u8; 16]) -> Self {
        self.secret = Some(s);
        self
    }

    /// Starts the stack: its squeues and their workers.
    pub fn build(self) -> io::Result<Stack> {
        let all_cpus: Vec<usize> = core_affinity::get_core_ids()
            .map(|v| v.into_iter().map(|c| c.id).collect())
            .unwrap_or_default();
        let cpus = self.cpus.clone().unwrap_or_else(|| all_cpus.clone());
        let n = self.squeues.unwrap_or(cpus.len().max(1));
        let secret = self.secret.unwrap_or_else(random_secret);
        let mut host = IpLayer::new(self.params.clone(), secret);
        let mut devices = Vec::new();
        let mut addrs = Vec::new();
        for (cfg, queues) in &self.ifaces {
            if queues.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "an interface needs at least one device queue",
                ));
            }
            let mac = cfg.mac.unwrap_or_else(|| {
                let o = cfg.addr.octets();
                MacAddr([0x02, 0x65, o[0], o[1], o[2], o[3]])
            });
            let dev_mtu = queues.iter().map(|q| q.mtu()).min().unwrap_or(1500);
            let mtu = cfg.mtu.unwrap_or(1500).min(dev_mtu);
            host.add_interface(Interface {
                mac,
                addr: cfg.addr,
                prefix_len: cfg.prefix_len,
                mtu,
            })
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{e:?}")))?;
            devices.push((mac, queues.clone()));
            addrs.push(cfg.addr);
        }
        for (dst, plen, gw) in &self.routes {
            let iface = match gw {
                Some(g) => host.routes().lookup(*g).map(|r| r.iface).ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidInput, "gateway unreachable")
                })?,
                None => IfaceId(0),
            };
            host.add_route(Route {
                dst: *dst,
                prefix_len: *plen,
                gateway: *gw,
                iface,
                mtu: None,
                metric: 0,
            })
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{e:?}")))?;
        }
        let p = &self.params;
        let host_deadline = Arc::new(AtomicU64::new(u64::MAX));
        let inner = Arc::new_cyclic(|weak| {
            let start = crate::clock::now();
            let squeues = (0..n)
                .map(|i| {
                    let mut perim = Perim::new(i, weak.clone(), start);
                    if i == 0 {
                        perim.host_deadline = Some(host_deadline.clone());
                    }
                    Squeue::new(
                        i,
                        perim,
                        Duration::from_millis(u64::from(p.squeue_drain_ms)),
                        Duration::from_micros(u64::from(p.squeue_spin_us)),
                    )
                })
                .collect();
            StackInner {
                params: RwLock::new(self.params.clone()),
                hot: {
                    let h = HotParams::default();
                    h.refresh(&self.params);
                    h
                },
                tcp_set: RwLock::new(TcpSettings::from_params(&self.params)),
                tx_cfg: RwLock::new(txq::TxConfig::from_params(&self.params)),
                tx_gen: AtomicU64::new(0),
                squeues,
                cpus: cpus.clone(),
                classifier: Classifier::default(),
                ip: Mutex::new(host),
                host_deadline_ns: host_deadline.clone(),
                addrs,
                devices,
                isn: IsnGenerator::new(secret),
                ident: AtomicU16::new(u16::from_be_bytes([secret[2], secret[3]])),
                next_port: AtomicU32::new(0),
                rst_bucket: Mutex::new(rst_bucket(&self.params)),
                subscribers: RwLock::new(Vec::new()),
                probes_on: AtomicBool::new(false),
                filter: RwLock::new(Vec::new()),
                filter_on: AtomicBool::new(false),
                closing: AtomicBool::new(false),
                conns_now: AtomicU32::new(0),
                tcp_mem_used: AtomicU64::new(0),
                workers: Mutex::new(Vec::new()),
                udp_socks: Mutex::new(std::collections::HashMap::new()),
            }
        });
        // Device receive queues belong to squeues: queue q of a multi-queue interface to
        // squeue q mod n (the squeue that transmits on it); the single-queue interfaces,
        // counted in order with every queue before them (k), to squeue k mod n, so that
        // they spread over the squeues.
        let mut k = 0usize;
        for (i, (_, queues)) in inner.devices.iter().enumerate() {
            let iface = IfaceId(i as u16);
            for (q, dev) in queues.iter().enumerate() {
                let sq_index = if queues.len() > 1 { q % n } else { k % n };
                k += 1;
                let sq = inner.squeues[sq_index].clone();
                let dev2 = dev.clone();
                sq.with(move |p: &mut Perim| p.rx_devs.push((iface, dev2)));
                // Weak: the squeue owns the device (rx_devs), the device owns the waker.
                let entry = Arc::new(RxEntry {
                    sq: Arc::downgrade(&sq),
                });
                dev.set_rx_waker(Box::new(move || entry.wake()));
            }
        }
        let mut handles = Vec::new();
        for (i, sq) in inner.squeues.iter().enumerate() {
            let sq = sq.clone();
            let cpu = if self.pin && !cpus.is_empty() {
                Some(cpus[i % cpus.len()])
            } else {
                None
            };
            let h = std::thread::Builder::new()
                .name(format!("ember-sq{i}"))
                .spawn(move || {
                    if let Some(c) = cpu {
                        core_affinity::set_for_current(core_affinity::CoreId { id: c });
                    }
                    sq.run_worker();
                })?;
            handles.push(h);
        }
        *inner.workers.lock().unwrap_or_else(|e| e.into_inner()) = handles;
        probes::register();
        Ok(Stack { inner })
    }
}

/// 16 bytes from the OS's random source (falls back to a clock-and-address mix only if
/// `/dev/urandom` cannot be read).
fn random_secret() -> [u8; 16] {
    use std::io::Read;
    let mut s = [0u8; 16];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut s))
        .is_ok()
    {
        return s;
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let a = &s as *const _ as usize as u128;
    (t ^ a.rotate_left(64)).to_le_bytes()
}

/// Tunables read on the data path, as atomics.
#[derive(Debug, Default)]
pub(crate) struct HotParams {
    pub do_tcp_fusion: AtomicBool,
    pub tcp_fusion_rcv_unread_min: AtomicU32,
    pub ip_def_ttl: AtomicU32,
    pub tcp_max_conns: AtomicU32,
    /// `tcp_mem_max` in bytes.
    pub tcp_mem_max: AtomicU64,
}

impl HotParams {
    fn refresh(&self, p: &Params) {
        self.do_tcp_fusion.store(p.do_tcp_fusion, Ordering::Relaxed);
        self.tcp_fusion_rcv_unread_min
            .store(p.tcp_fusion_rcv_unread_min, Ordering::Relaxed);
        self.ip_def_ttl.store(p.ip_def_ttl, Ordering::Relaxed);
        self.tcp_max_conns.store(p.tcp_max_conns, Ordering::Relaxed);
        self.tcp_mem_max
            .store(u64::from(p.tcp_mem_max) * 1024, Ordering::Relaxed);
    }
}

/// The state shared by a stack's squeues and sockets.
pub struct StackInner {
    params: RwLock<Params>,
    /// The tunables the data path reads (per write, per segment), mirrored from `params`
    /// by `set_param` so that path never takes the params lock.
    pub(crate) hot: HotParams,
    tcp_set: RwLock<TcpSettings>,
    /// The transmit side's settings (`txq.rs`), and a generation the squeues compare
    /// with theirs to pick up a change.
    tx_cfg: RwLock<txq::TxConfig>,
    pub(crate) tx_gen: AtomicU64,
    pub(crate) squeues: Vec<Arc<Squeue<Perim>>>,
    cpus: Vec<usize>,
    pub(crate) classifier: Classifier,
    /// The IP layer (ARP, IPv4, ICMP, UDP, reassembly, GRO, GSO) of the devices.
    ip: Mutex<IpLayer>,
    host_deadline_ns: Arc<AtomicU64>,
    addrs: Vec<Ipv4Addr>,
    /// Per interface: its MAC and its device queues (one for most devices).
    devices: Vec<(MacAddr, Vec<Arc<dyn Device>>)>,
    pub(crate) isn: IsnGenerator,
    ident: AtomicU16,
    next_port: AtomicU32,
    rst_bucket: Mutex<TokenBucket>,
    subscribers: RwLock<Vec<Subscriber>>,
    probes_on: AtomicBool,
    filter: RwLock<Vec<FilterRule>>,
    filter_on: AtomicBool,
    pub(crate) closing: AtomicBool,
    /// TCP connections in the squeues (bounded by `tcp_max_conns`).
    pub(crate) conns_now: AtomicU32,
    /// Bytes the connections hold in their queues (bounded by `tcp_mem_max`; see
    /// `Perim::recharge`).
    pub(crate) tcp_mem_used: AtomicU64,
    workers: Mutex<Vec<std::thread::JoinHandle<()>>>,
    udp_socks: Mutex<
        std::collections::HashMap<
            ember_core::host::UdpId,
            std::sync::Weak<crate::socket::udp::UdpShared>,
        >,
    >,
}

impl StackInner {
    /// Takes a connection slot (`tcp_max_conns`); false when the stack is full.
    pub(crate) fn take_conn_slot(&self) -> bool {
        let max = self.hot.tcp_max_conns.load(Ordering::Relaxed);
        self.conns_now
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }

    /// Whether a connection slot is free now (no slot is taken).
    pub(crate) fn conn_room(&self) -> bool {
        self.conns_now.load(Ordering::Relaxed) < self.hot.tcp_max_conns.load(Ordering::Relaxed)
    }

    pub(crate) fn give_conn_slot(&self) {
        let _ = self
            .conns_now
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// The connections' queues are over `tcp_mem_max`.
    pub(crate) fn tcp_mem_full(&self) -> bool {
        self.tcp_mem_used.load(Ordering::Relaxed) > self.hot.tcp_mem_max.load(Ordering::Relaxed)
    }

    pub(crate) fn register_udp(&self, u: &Arc<crate::socket::udp::UdpShared>) {
        self.udp_socks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(u.id, Arc::downgrade(u));
    }

    pub(crate) fn unregister_udp(&self, id: ember_core::host::UdpId) {
        self.udp_socks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }

    pub(crate) fn params(&self) -> std::sync::RwLockReadGuard<'_, Params> {
        self.params.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn tx_config(&self) -> txq::TxConfig {
        self.tx_cfg
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn tcp_settings(&self) -> TcpSettings {
        self.tcp_set
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn ip(&self) -> std::sync::MutexGuard<'_, IpLayer> {
        self.ip.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fires probe `p` in squeue `sq`. When nobody listens (no in-process subscriber, no
    /// tracer attached to this USDT probe) this is the flag's load, the semaphore's (via
    /// the GOT) and one predictable branch.
    #[inline]
    pub(crate) fn probe(
        &self,
        sq: usize,
        p: Probe,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        len: usize,
    ) {
        self.probe_arg(sq, p, local, remote, len, 0);
    }

    /// [`StackInner::probe`] with the event's `arg`.
    #[inline]
    pub(crate) fn probe_arg(
        &self,
        sq: usize,
        p: Probe,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        len: usize,
        arg: u64,
    ) {
        if (u16::from(self.probes_on.load(Ordering::Relaxed)) | probes::semaphore(p)) == 0 {
            return;
        }
        self.fire(&ProbeEvent::new(p, sq, local, remote, len, arg));
    }

    /// Hands `ev` to its USDT probe and to the in-process subscribers (out of line: only
    /// when someone listens).
    #[cold]
    #[inline(never)]
    pub(crate) fn fire(&self, ev: &ProbeEvent) {
        probes::fire(ev);
        if !self.probes_on.load(Ordering::Relaxed) {
            return;
        }
        for s in self
            .subscribers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            s(ev);
        }
    }

    /// Would the filter drop a datagram of `proto` from `from` to `to`?
    #[inline]
    pub(crate) fn filtered(&self, proto: u8, from: SocketAddrV4, to: SocketAddrV4) -> bool {
        if !self.filter_on.load(Ordering::Relaxed) {
            return false;
        }
        self.filter
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|r| r.matches(proto, from, to))
    }

    /// Is `a` loopback or one of our addresses?
    pub(crate) fn is_local_addr(&self, a: Ipv4Addr) -> bool {
        a.is_loopback() || self.addrs.contains(&a)
    }

    /// The source address, path MTU and locality for a connection to `dst`.
    pub(crate) fn source_for(&self, dst: Ipv4Addr) -> Option<(Ipv4Addr, u32, bool)> {
        if dst.is_loopback() {
            return Some((dst, 65_535, true));
        }
        if self.addrs.contains(&dst) {
            return Some((dst, 65_535, true));
        }
        self.ip().source_for(dst).map(|(s, m)| (s, m, false))
    }

    pub(crate) fn next_ident(&self) -> u16 {
        self.ident.fetch_add(1, Ordering::Relaxed).wrapping_add(1)
    }

    pub(crate) fn rst_allowed(&self, now: Instant) -> bool {
        self.rst_bucket
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .allow(now)
    }

    /// The interface's MAC and the device queue squeue `sq` transmits on.
    pub(crate) fn device(&self, iface: IfaceId, sq: usize) -> Option<(MacAddr, &Arc<dyn Device>)> {
        let (mac, queues) = self.devices.get(usize::from(iface.0))?;
        Some((*mac, queues.get(sq % queues.len().max(1))?))
    }

    pub(crate) fn forget_next_hop(&self, dst: Ipv4Addr) {
        self.ip().forget_next_hop(dst);
    }

    pub(crate) fn next_hop(&self, now: Instant, dst: Ipv4Addr) -> Option<(IfaceId, MacAddr)> {
        match self.ip().next_hop(now, dst) {
            Some((iface, Some(mac), _)) => Some((iface, mac)),
            _ => None,
        }
    }

    /// Hands a TCP datagram (with Ethernet headroom; `gso` > 0 for a large segment) to the
    /// IP layer, then sends the frames it produced.
    pub(crate) fn send_via_host(&self, now: Instant, frame: Vec<u8>, gso: u16) {
        self.with_ip(now, None, |ip, tcp| {
            let _ = ip.send_tcp_gso(now, frame, gso, tcp);
        });
    }

    /// Runs `f` on the IP layer, then sends the frames it produced, publishes its next
    /// deadline and, with the IP layer let go, gives what it received for TCP to the
    /// squeues (`p`: the squeue this thread runs, which takes its own segments at once).
    pub(crate) fn with_ip<R>(
        &self,
        now: Instant,
        mut p: Option<&mut Perim>,
        f: impl FnOnce(&mut IpLayer, &mut Inbound) -> R,
    ) -> R {
        // The squeue's own buffer, kept from batch to batch (no allocation per batch).
        let mut inbound = p
            .as_deref_mut()
            .map(|p| std::mem::take(&mut p.inbound))
            .unwrap_or_default();
        let r = {
            let mut ip = self.ip();
            let r = f(&mut ip, &mut inbound);
            self.drain_host_tx(&mut ip);
            self.publish_host_deadline(&ip);
            r
        };
        let p = if inbound.0.is_empty() {
            p
        } else {
            self.deliver_inbound(p, now, &mut inbound)
        };
        if let Some(p) = p {
            inbound.0.clear();
            p.inbound = inbound;
        }
        r
    }

    fn drain_host_tx(&self, h: &mut IpLayer) {
        let mut last: Option<&Arc<dyn Device>> = None;
        while let Some(f) = h.poll_transmit() {
            // The IP layer's own frames (ARP, ICMP, UDP) leave on the first queue.
            if let Some((_, dev)) = self.device(f.iface, 0) {
                dev.transmit(f.data);
                if let Some(l) = last {
                    if !Arc::ptr_eq(l, dev) {
                        l.flush();
                    }
                }
                last = Some(dev);
            }
        }
        if let Some(l) = last {
            l.flush();
        }
        while let Some(id) = h.poll_udp_event() {
            let u = self
                .udp_socks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&id)
                .and_then(std::sync::Weak::upgrade);
            if let Some(u) = u {
                u.w.raise(crate::socket::ready::READ);
            }
        }
    }

    fn publish_host_deadline(&self, h: &IpLayer) {
        let t = h.poll_timeout().map_or(u64::MAX, |t| t.as_nanos());
        let old = self.host_deadline_ns.swap(t, Ordering::Relaxed);
        if t < old {
            if let Some(sq) = self.squeues.first() {
                sq.kick();
            }
        }
    }

    pub(crate) fn host_deadline(&self) -> Option<Instant> {
        match self.host_deadline_ns.load(Ordering::Relaxed) {
            u64::MAX => None,
            t => Some(Instant::from_nanos(t)),
        }
    }

    /// Runs the IP layer's timers if due.
    pub(crate) fn host_timers(&self, p: &mut Perim, now: Instant) -> bool {
        if self.host_deadline().is_none_or(|t| t > now) {
            return false;
        }
        self.with_ip(now, Some(p), |ip, tcp| ip.handle_timeout(now, tcp));
        true
    }

    /// Frames from a device, taken in as one batch by the IP layer (one lock): with
    /// `ip_gro`, a flow's consecutive in-order segments reach TCP as one. Then, with the
    /// IP layer let go, each TCP segment goes to its squeue: this one (`p`) takes its own
    /// at once, as one batch.
    pub(crate) fn receive_frames(
        &self,
        p: &mut Perim,
        now: Instant,
        iface: IfaceId,
        frames: &mut Vec<Vec<u8>>,
    ) {
        self.with_ip(now, Some(p), |ip, tcp| {
            ip.receive_batch(now, iface, frames.drain(..), tcp);
            ip.run_loopback(now, tcp);
        });
    }

    /// Gives what the IP layer received for TCP to the squeues, one classifier lookup per
    /// segment: a segment for `p`'s squeue is taken in here (as one batch), one for
    /// another squeue enters that squeue; a segment for no connection goes to the squeue
    /// its flow hashes to, where the endpoint answers it.
    fn deliver_inbound<'p>(
        &self,
        mut p: Option<&'p mut Perim>,
        now: Instant,
        inbound: &mut Inbound,
    ) -> Option<&'p mut Perim> {
        let n = self.squeues.len();
        if let Some(p) = p.as_deref_mut() {
            p.begin_batch();
        }
        for item in inbound.0.drain(..) {
            match item {
                InboundItem::Segment(seg) => {
                    let Some(t) = seg.tuple() else {
                        continue;
                    };
                    let loc = self.classifier.lookup(&t);
                    let target = loc.map_or_else(|| perim::rss_queue(&t, n), |l| l.sq);
                    match p.as_deref_mut() {
                        Some(p) if p.id == target => {
                            p.input_classified(self, now, seg, loc.map(|l| l.key));
                        }
                        _ => self.to_squeue(target, 0, seg),
                    }
                }
                InboundItem::IcmpError(e) => {
                    let Some(loc) = self.classifier.lookup(&(e.local, e.remote)) else {
                        continue;
                    };
                    match p.as_deref_mut() {
                        Some(p) if p.id == loc.sq => p.icmp_error(self, now, loc.key, e),
                        _ => {
                            if let Some(sq) = self.squeues.get(loc.sq) {
                                sq.enter(Mode::Fill, loc.key.as_u64(), move |q: &mut Perim| {
                                    if let Some(st) = q.st.upgrade() {
                                        q.icmp_error(&st, crate::clock::now(), loc.key, e);
                                    }
                                });
                            }
                        }
                    }
                }
            }
        }
        if let Some(p) = p.as_deref_mut() {
            p.end_batch(self, now);
        }
        p
    }

    /// A segment for a connection on squeue `sq`: enter it (inline when idle and the
    /// thread may nest, queued otherwise).
    pub(crate) fn to_squeue(&self, sq: usize, tag: u64, seg: Seg) {
        if let Some(q) = self.squeues.get(sq) {
            q.enter(Mode::Process, tag, perim::seg_work(seg));
        }
    }

    /// Loopback segments one entry could not finish: continue later on the same squeue.
    pub(crate) fn requeue_lo(&self, sq: usize, segs: Vec<Seg>) {
        let Some(q) = self.squeues.get(sq) else {
            return;
        };
        q.enter(Mode::Fill, u64::MAX, move |p: &mut Perim| {
            if let Some(st) = p.st.upgrade() {
                let now = crate::clock::now();
                for s in segs {
                    p.input(&st, now, s);
                }
                p.run_lo(&st, now);
            }
        });
    }

    /// The squeue of the CPU the caller runs on.
    pub(crate) fn caller_squeue(&self) -> usize {
        let n = self.squeues.len();
        if n == 1 {
            return 0;
        }
        let cpu = match crate::sync::current_cpu() {
            u32::MAX => None,
            c => Some(c as usize),
        };
        self.cpus
            .iter()
            .position(|&c| Some(c) == cpu)
            .map_or_else(|| cpu.unwrap_or(0) % n, |i| i % n)
    }

    /// RFC 6056 §3.3.3 (algorithm 3), restricted to ports whose reply tuple hashes to
    /// squeue `sq` (when there are several squeues), skipping tuples in use and ports
    /// with a listener.
    pub(crate) fn ephemeral(
        &self,
        src: Ipv4Addr,
        remote: SocketAddrV4,
        sq: usize,
    ) -> io::Result<SocketAddrV4> {
        let (lo, hi) = {
            let p = self.params();
            (p.tcp_smallest_anon_port, p.tcp_largest_anon_port)
        };
        let range = hi.saturating_sub(lo) + 1;
        let offset = self.isn.port_offset(src, remote);
        let start = self.next_port.load(Ordering::Relaxed);
        let n = self.squeues.len();
        let mut fallback = None;
        for i in 0..range {
            let port = (lo + offset.wrapping_add(start).wrapping_add(i) % range) as u16;
            let cand = SocketAddrV4::new(src, port);
            if self.classifier.lookup(&(cand, remote)).is_some()
                || self.classifier.listening(src, port)
                || (self.is_local_addr(*remote.ip())
                    && self.classifier.lookup(&(remote, cand)).is_some())
            {
                // In use; or, towards ourselves, the server side of this tuple is still
                // in use (TIME-WAIT of an accepted connection).
                continue;
            }
            if n > 1 && perim::rss_queue(&(cand, remote), n) != sq {
                fallback.get_or_insert(cand);
                if i < 64 * n as u32 {
                    continue;
                }
            }
            self.next_port.fetch_add(i + 1, Ordering::Relaxed);
            return Ok(cand);
        }
        fallback.ok_or_else(|| {
            io::Error::new(io::ErrorKind::AddrNotAvailable, "no ephemeral port free")
        })
    }
}

/// A device's receive wake-up, FireEngine's interrupt entering the squeue. Called from
/// inside a squeue (a transmit on the other end of an in-memory link, say), it runs the
/// squeue's device service inline on the calling thread once that thread has left every
/// squeue and released every lock (`squeue::defer`), if the squeue is idle then: no worker
/// wake-up and no context switch between a frame's transmission and its processing.
/// Otherwise, and when called outside any squeue (where the caller may hold the IP
/// layer's lock), it kicks the squeue's worker. A thread runs at most
/// `squeue::INLINE_SERVICE_BUDGET` such services on one way out (two stacks bouncing
/// frames would otherwise keep it), and none while unwinding from a panic.
struct RxEntry {
    sq: std::sync::Weak<Squeue<Perim>>,
}

impl RxEntry {
    fn wake(self: &Arc<Self>) {
        if crate::squeue::depth() == 0 {
            let Some(sq) = self.sq.upgrade() else {
                return;
            };
            // A device's interrupt thread (no lock held, no squeue entered) receives
            // inline when the squeue is free; anyone else wakes the worker.
            if crate::squeue::is_interrupt_thread() {
                let ran = sq.try_process(|p: &mut Perim| {
                    use crate::squeue::Perimeter;
                    p.service(std::time::Instant::now());
                });
                if ran.is_ok() {
                    return;
                }
            }
            sq.kick();
            return;
        }
        crate::squeue::defer(self.clone());
    }
}

impl crate::squeue::Deferred for RxEntry {
    fn run_deferred(&self) {
        let Some(sq) = self.sq.upgrade() else {
            return;
        };
        if std::thread::panicking() || !crate::squeue::take_inline_service() {
            sq.kick();
            return;
        }
        let ran = sq.try_process(|p: &mut Perim| {
            use crate::squeue::Perimeter;
            p.service(std::time::Instant::now());
        });
        if ran.is_err() {
            sq.kick();
        }
    }
}

/// What the IP layer received for TCP while the runtime held it, collected to be given
/// to the squeues once it has let go (see [`StackInner::with_ip`]).
#[derive(Default)]
pub(crate) struct Inbound(Vec<InboundItem>);

pub(crate) enum InboundItem {
    Segment(Seg),
    IcmpError(TcpIcmpError),
}

impl TcpSink for Inbound {
    fn tcp_segment(&mut self, _ip: &mut IpLayer, _now: Instant, s: TcpSegmentIn<'_>) {
        self.0.push(InboundItem::Segment(Seg {
            src: s.src,
            dst: s.dst,
            bytes: s.bytes.into_owned(),
            csum_ok: s.csum_ok,
            lo: false,
            segs: s.segs,
            gso_size: s.gso_size,
        }));
    }

    fn tcp_icmp_error(&mut self, _ip: &mut IpLayer, _now: Instant, err: TcpIcmpError) {
        self.0.push(InboundItem::IcmpError(err));
    }
}

/// A running stack. Cloning gives another handle to the same stack; the stack stops
/// when [`Stack::shutdown`] is called or the last handle (including sockets) is gone.
#[derive(Clone)]
pub struct Stack {
    pub(crate) inner: Arc<StackInner>,
}

impl core::fmt::Debug for Stack {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Stack")
            .field("squeues", &self.inner.squeues.len())
            .field("addrs", &self.inner.addrs)
            .finish()
    }
}

/// All counters of a stack.
#[derive(Debug, Clone, Default)]
pub struct StackStats {
    /// IP, ICMP, UDP counters of the IP layer; TCP counters summed over squeues.
    pub host: HostStats,
    /// Fusion and classifier counters, summed over squeues.
    pub tcp: PerimStats,
    /// Squeue counters, summed.
    pub squeue: SqCounters,
    /// Per squeue.
    pub per_squeue: Vec<SqCounters>,
    /// The transmit side (GSO, fair queues, TCP Small Queues), summed over squeues.
    pub tx: TxStats,
}

impl Stack {
    pub fn builder() -> StackBuilder {
        StackBuilder::default()
    }

    /// A stack with only the loopback device, `n` squeues.
    pub fn loopback(n: usize) -> io::Result<Stack> {
        Stack::builder().squeues(n).build()
    }

    /// Number of squeues.
    pub fn squeue_count(&self) -> usize {
        self.inner.squeues.len()
    }

    /// The tunables now.
    pub fn params(&self) -> Params {
        self.inner.params().clone()
    }

    /// Sets a tunable at run time (`ndd -set`). New connections use the new values;
    /// squeue timing applies at once; `do_tcp_fusion=0` leaves fused pairs fused.
    pub fn set_param(&self, name: &str, value: &str) -> Result<(), ParamError> {
        let mut p = self.inner.params.write().unwrap_or_else(|e| e.into_inner());
        p.set(name, value)?;
        self.inner.hot.refresh(&p);
        *self
            .inner
            .tcp_set
            .write()
            .unwrap_or_else(|e| e.into_inner()) = TcpSettings::from_params(&p);
        *self.inner.tx_cfg.write().unwrap_or_else(|e| e.into_inner()) =
            txq::TxConfig::from_params(&p);
        self.inner.tx_gen.fetch_add(1, Ordering::Relaxed);
        for sq in &self.inner.squeues {
            sq.set_drain_limit(Duration::from_millis(u64::from(p.squeue_drain_ms)));
            sq.set_spin(Duration::from_micros(u64::from(p.squeue_spin_us)));
        }
        self.inner.ip().set_params(&[(name, value)])?;
        *self
            .inner
            .rst_bucket
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = rst_bucket(&p);
        Ok(())
    }

    /// Subscribes to every probe (in-process). Returns nothing to unsubscribe with: the
    /// subscriber lives as long as the stack. Every probe fires for it from the return
    /// of this call on (the squeue probes too, unless this is called from inside a
    /// squeue, where they start at each squeue's next entry).
    ///
    /// The subscriber runs where the probe fires: inside a squeue, with that squeue
    /// owned. It must be quick and must not call back into the stack (sockets, `stats`,
    /// `netstat`, `set_param`...): such a call would wait for the squeue it is running
    /// in. Record the event and return, as a DTrace action does.
    pub fn subscribe(&self, f: impl Fn(&ProbeEvent) + Send + Sync + 'static) {
        self.inner
            .subscribers
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::new(f));
        self.inner.probes_on.store(true, Ordering::SeqCst);
        // The squeue probes read a flag of their perimeter's (no stack reference needed
        // on entry). Set it in each squeue: waiting for it from outside, queued (never
        // waiting for a squeue this thread may own) from inside.
        for sq in &self.inner.squeues {
            if crate::squeue::depth() == 0 {
                sq.with(|p: &mut Perim| p.probing = true);
            } else {
                sq.enter(Mode::Fill, u64::MAX, |p: &mut Perim| p.probing = true);
            }
        }
    }

    /// Adds a drop rule to the IP filter. Fused connections the rule matches are unfused
    /// first (their data would otherwise bypass the filter).
    pub fn add_filter_rule(&self, rule: FilterRule) {
        self.inner
            .filter
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(rule);
        self.inner.filter_on.store(true, Ordering::SeqCst);
        for sq in &self.inner.squeues {
            sq.with(move |p: &mut Perim| {
                let Some(st) = p.st.upgrade() else { return };
                let now = crate::clock::now();
                let keys: Vec<_> = p
                    .conns
                    .iter()
                    .filter(|(_, c)| {
                        c.peer.is_some()
                            && (rule.matches(6, c.tcb.local(), c.tcb.remote())
                                || rule.matches(6, c.tcb.remote(), c.tcb.local()))
                    })
                    .map(|(k, _)| k)
                    .collect();
                for k in keys {
                    if p.conns.get(k).is_some_and(|c| c.peer.is_some()) {
                        p.stats.fusion_aborted += 1;
                        p.unfuse(&st, now, k);
                        p.after(&st, now, k);
                    }
                }
            });
        }
    }

    /// Removes every filter rule.
    pub fn clear_filter(&self) {
        self.inner
            .filter
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.inner.filter_on.store(false, Ordering::SeqCst);
    }

    /// Every counter.
    pub fn stats(&self) -> StackStats {
        let mut out = StackStats {
            host: self.inner.ip().stats(),
            ..StackStats::default()
        };
        let mut all_tcb = ember_core::tcp::TcbStats::default();
        let mut endpoint = ember_core::tcp::EndpointStats::default();
        for sq in &self.inner.squeues {
            let (tcbs, estab, ps, es, tx) = sq.with(|p: &mut Perim| {
                let (s, e) = p.tcb_stats();
                (s, e, p.stats, p.endpoint.stats, p.tx.stats())
            });
            out.tx += tx;
            all_tcb.accumulate(&tcbs);
            endpoint.accumulate(&es);
            out.host.tcp.curr_estab += estab;
            let t = &mut out.tcp;
            macro_rules! add {
                ($($f:ident),*) => { $( t.$f += ps.$f; )* };
            }
            add!(
                fusion_flowctl,
                fusion_backenabled,
                fusion_urg,
                fusion_putnext,
                fusion_unfusable,
                fusion_aborted,
                fusion_unqualified,
                fusion_fused_total,
                fusion_fused_now,
                fusion_bytes,
                fusion_rrw_stops,
                active_opens,
                lo_segs,
                ip_lo_out,
                ip_lo_in,
                lo_requeued,
                cross_sq,
                filtered
            );
            let c = sq.stats().snapshot();
            out.squeue += c;
            out.per_squeue.push(c);
        }
        out.host.ip.out_requests += out.tcp.ip_lo_out;
        out.host.ip.in_receives += out.tcp.ip_lo_in;
        out.host.ip.in_delivers += out.tcp.ip_lo_in;
        let h = &mut out.host.tcp;
        h.add_tcb(&all_tcb);
        h.active_opens += out.tcp.active_opens;
        h.add_endpoint(&endpoint);
        h.conns_now = u64::from(self.inner.conns_now.load(Ordering::Relaxed));
        h.mem_bytes = self.inner.tcp_mem_used.load(Ordering::Relaxed);
        out
    }

    /// kstat-style `(module:name, value)` pairs.
    pub fn kstat(&self) -> Vec<(String, u64)> {
        let s = self.stats();
        let mut v = Vec::new();
        for (k, x) in s.host.ip.kstat() {
            v.push((format!("ip:{k}"), x));
        }
        for (k, x) in s.host.icmp.kstat() {
            v.push((format!("icmp:{k}"), x));
        }
        for (k, x) in s.host.udp.kstat() {
            v.push((format!("udp:{k}"), x));
        }
        for (k, x) in s.host.tcp.kstat() {
            v.push((format!("tcp:{k}"), x));
        }
        let t = &s.tcp;
        for (k, x) in [
            ("tcp_fusion_flowctl", t.fusion_flowctl),
            ("tcp_fusion_backenabled", t.fusion_backenabled),
            ("tcp_fusion_urg", t.fusion_urg),
            ("tcp_fusion_putnext", t.fusion_putnext),
            ("tcp_fusion_unfusable", t.fusion_unfusable),
            ("tcp_fusion_aborted", t.fusion_aborted),
            ("tcp_fusion_unqualified", t.fusion_unqualified),
            ("tcp_fusion_fused", t.fusion_fused_now),
            ("tcp_fusion_fused_total", t.fusion_fused_total),
            ("tcp_fusion_bytes", t.fusion_bytes),
            ("tcp_fusion_rrw_stops", t.fusion_rrw_stops),
        ] {
            v.push((format!("fusion:{k}"), x));
        }
        let q = &s.squeue;
        for (k, x) in [
            ("inline", q.inline),
            ("queued", q.queued),
            ("nested", q.nested),
            ("drained_by_caller", q.drained_by_caller),
            ("drain_handoffs", q.drain_handoffs),
            ("worker_drains", q.worker_drains),
            ("wakeups", q.wakeups),
            ("poll_switches", q.poll_switches),
            ("kicks_by_caller", q.kicks_by_caller),
            ("drain_ns", q.drain_ns),
        ] {
            v.push((format!("squeue:{k}"), x));
        }
        let x = &s.tx;
        for (k, val) in [
            ("gso_splits", x.gso_splits),
            ("gso_segs", x.gso_segs),
            ("gso_errors", x.gso_errors),
            ("tso_sends", x.tso_sends),
            ("direct", x.direct),
            ("dev_queue_waits", x.dev_queue_waits),
            ("tsq_throttles", x.tsq_throttles),
            ("fq_enqueued", x.fq.enqueued),
            ("fq_dequeued", x.fq.dequeued),
            ("fq_drops_overlimit", x.fq.drops_overlimit),
            ("fq_codel_drops", x.fq.codel_drops),
            ("fq_new_flows", x.fq.new_flows),
            ("fq_paced_waits", x.fq.paced_waits),
        ] {
            v.push((format!("txq:{k}"), val));
        }
        for (k, x) in [
            ("conns", self.inner.classifier.len() as u64),
            ("cross_squeue", t.cross_sq),
            ("loopback_segs", t.lo_segs),
            ("loopback_requeued", t.lo_requeued),
            ("filtered", t.filtered),
        ] {
            v.push((format!("classifier:{k}"), x));
        }
        // Devices: module `devN` per interface, each counter summed over its queues.
        for (i, (_, queues)) in self.inner.devices.iter().enumerate() {
            let mut sum: Vec<(&'static str, u64)> = Vec::new();
            for q in queues {
                for (k, x) in q.counters() {
                    match sum.iter_mut().find(|(n, _)| *n == k) {
                        Some((_, t)) => *t += x,
                        None => sum.push((k, x)),
                    }
                }
            }
            v.push((format!("dev{i}:queues"), queues.len() as u64));
            for (k, x) in sum {
                v.push((format!("dev{i}:{k}"), x));
            }
        }
        v
    }

    /// Every TCP connection: snapshot, squeue, fused.
    pub fn netstat(&self) -> Vec<(TcbInfo, usize, bool)> {
        let mut v = Vec::new();
        for sq in &self.inner.squeues {
            v.extend(sq.with(|p: &mut Perim| p.netstat()));
        }
        v
    }

    /// Stops the stack: resets every connection, stops the workers. Sockets still held
    /// get `NotConnected`/`ConnectionAborted` afterwards.
    pub fn shutdown(&self) {
        if self.inner.closing.swap(true, Ordering::SeqCst) {
            return;
        }
        for sq in &self.inner.squeues {
            sq.with(|p: &mut Perim| {
                if let Some(st) = p.st.upgrade() {
                    p.abort_all(&st, crate::clock::now());
                }
                p.rx_devs.clear();
            });
            sq.shutdown();
        }
        // Wake whoever waits on a listener or a UDP socket: their next call fails.
        for l in self.inner.classifier.listeners() {
            l.w.raise(crate::socket::ready::ACCEPT | crate::socket::ready::HUP);
        }
        let udp: Vec<_> = self
            .inner
            .udp_socks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter_map(std::sync::Weak::upgrade)
            .collect();
        for u in udp {
            u.w.raise(crate::socket::ready::READ | crate::socket::ready::HUP);
        }
        let hs: Vec<_> = self
            .inner
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect();
        let me = std::thread::current().id();
        for h in hs {
            if h.thread().id() != me {
                let _ = h.join();
            }
        }
    }

    /// Sends an ICMP echo request (ping) from this stack.
    pub fn ping(&self, dst: Ipv4Addr, ident: u16, seq_no: u16, payload: &[u8]) -> io::Result<()> {
        let now = crate::clock::now();
        self.inner.with_ip(now, None, |ip, tcp| {
            ip.ping(now, dst, ident, seq_no, payload, tcp)
        })
    }

    /// Echo replies received so far (drained).
    pub fn ping_replies(&self) -> Vec<ember_core::host::PingReply> {
        self.inner.ip().take_ping_replies()
    }

    /// Runs `f` with the IP layer locked (UDP sockets use it); what it hands TCP goes to
    /// the squeues.
    pub(crate) fn with_ip<R>(&self, f: impl FnOnce(&mut IpLayer, &mut Inbound) -> R) -> R {
        self.inner.with_ip(crate::clock::now(), None, f)
    }

    /// `NotConnected` once the stack was shut down.
    pub(crate) fn check_open(&self) -> io::Result<()> {
        if self.inner.closing.load(Ordering::SeqCst) {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the stack was shut down",
            ));
        }
        Ok(())
    }

    /// Our interface addresses.
    pub fn addrs(&self) -> &[Ipv4Addr] {
        &self.inner.addrs
    }
}

impl Drop for StackInner {
    fn drop(&mut self) {
        for sq in &self.squeues {
            sq.shutdown();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::{mem_link, ImpairConfig};
    use crate::{IfaceConfig, TcpListener, TcpStream};

    /// A stack that is shutting down answers a SYN for one of its listeners as at a
    /// closed port, with a RST (Linux: a closed listener is unhashed first), as the core
    /// `Host` does once a listener is closed (`tcp_listen_conflicts` in its tests). The
    /// closing flag is set here without stopping the workers, to hold the stack in the
    /// window `Stack::shutdown` passes through.
    #[test]
    fn a_closing_stack_refuses_syns() {
        let iface = |addr| IfaceConfig {
            addr,
            prefix_len: 24,
            mac: None,
            mtu: None,
        };
        let (ea, eb) = mem_link(ImpairConfig::default(), ImpairConfig::default(), 5);
        let a = Stack::builder()
            .squeues(1)
            .interface(iface(Ipv4Addr::new(198, 18, 0, 1)), ea)
            .build()
            .unwrap();
        let b = Stack::builder()
            .squeues(1)
            .interface(iface(Ipv4Addr::new(198, 18, 0, 2)), eb)
            .build()
            .unwrap();
        let addr = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 2), 8080);
        let _l = TcpListener::bind(&b, addr).unwrap();
        b.inner.closing.store(true, Ordering::SeqCst);
        let e = TcpStream::connect_timeout(&a, addr, Duration::from_millis(1500)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
        assert_eq!(b.stats().host.tcp.in_closed, 1);
        b.inner.closing.store(false, Ordering::SeqCst);
        a.shutdown();
        b.shutdown();
    }
}
