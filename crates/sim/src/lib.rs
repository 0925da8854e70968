//! # ember-sim: a deterministic network simulator for ember's protocol core
//!
//! Several hosts (each an `ember_core::Host`: ARP, IP, ICMP, UDP, TCP) are joined by
//! in-memory Ethernet links (`ember_netem`) that lose, duplicate, reorder, corrupt
//! and delay frames and limit bandwidth, all from one seed. A virtual clock jumps from
//! one deadline to the next (the earliest frame arrival or host timer), so hours of
//! simulated time take seconds and nothing sleeps. The same seed replays a run exactly:
//! a failing seed is a bug report.
//!
//! A run opens `conns` TCP connections; each moves `bytes` pseudo-random bytes in both
//! directions (or one, with `oneway`), half-closes, reads to end of stream, and closes.
//! The receiver regenerates the stream and checks every byte. A run fails if a byte
//! differs or is missing, a connection reports an error, a close does not complete, the
//! network stalls, virtual time runs past the limit, or the code panics.
//!
//! With `fq` (the default) each host transmits through a fair queue
//! (`ember_netem::Fq`: per-flow DRR, CoDel, new flows first) and a byte-queue
//! limit: frames leave the host's queue for its link only while the link's own transmit
//! backlog is below `max(2 full frames, 1 ms at the link rate)`, as a device driver with
//! BQL does, so the link queue stays short and the fair queue decides who goes next.
//! Optionally host 0 pings host 1 at a fixed interval (`ping_every`), before and during the
//! transfers (`conn_start` delays them), and the report lists every round-trip time.

pub mod stream;
pub mod trace;

use ember_core::host::{ConnId, Interface, ListenerId, SocketEvent};
use ember_core::ip::IfaceId;
use ember_core::tcp::{State, TcpError};
use ember_core::wire::MacAddr;
use ember_core::{Host, Instant, Params};
use ember_netem::{
    byte_queue_limit, frame_flow, End, Fq, FqConfig, FqStats, ImpairConfig, Link, Switch, Wire,
};
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;
use stream::StreamGen;

/// The TCP port every simulated host listens on.
pub const PORT: u16 = 5001;

/// What to simulate.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub seed: u64,
    /// Impairment of every link direction.
    pub impair: ImpairConfig,
    /// Bytes per connection and direction.
    pub bytes: u64,
    pub conns: u32,
    /// Hosts: 2 share a point-to-point link; more share a switch.
    pub hosts: usize,
    /// Data flows only from the connecting side.
    pub oneway: bool,
    /// Tunables for every host, applied after the automatic ones.
    pub params: Vec<(String, String)>,
    /// Vary TCP options, congestion control, Nagle and write sizes per seed.
    pub vary: bool,
    /// Give up (and fail) at this virtual time.
    pub time_limit: Duration,
    /// Raise socket buffers to twice the path's bandwidth-delay product (and the link
    /// queue to one BDP), as an operator raises `tcp_max_buf` for a long fat path.
    pub auto_buffers: bool,
    /// Whether the link queue size was given explicitly (else it follows the BDP).
    pub queue_explicit: bool,
    /// Print every frame sent and delivered to standard error.
    pub trace: bool,
    /// Each host transmits through a fair queue with a byte-queue limit in front of its
    /// link (see the crate documentation); off: straight onto the link's FIFO.
    pub fq: bool,
    /// Host 0 pings host 1 at this interval, from the start until every connection is
    /// finished (the RTTs are in [`RunReport::pings`]).
    pub ping_every: Option<Duration>,
    /// Open the connections at this virtual time instead of at 0 (pings before it see an
    /// idle network).
    pub conn_start: Duration,
    /// Spoofed SYNs at host 1's listener while the connections run (RFC 4987 §2.1).
    pub syn_flood: Option<SynFlood>,
}

/// A flood of SYNs from spoofed addresses at host 1's listener: `count` of them, at
/// `per_sec`, from `start`. Each comes from a random address of the hosts' /16 that no
/// host has (so answers go nowhere, as with a real flood), a random port and ISN, and a
/// random mix of the options a real SYN carries. They are put straight onto host 1's
/// receive path, as if the attacker shared its link, so they cost the link nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SynFlood {
    pub count: u64,
    pub per_sec: u64,
    pub start: Duration,
}

/// What a flood did to host 1.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FloodReport {
    /// Spoofed SYNs delivered.
    pub sent: u64,
    /// The largest figure of each kind host 1 held at any time during the flood
    /// (sampled every 1,000 SYNs and at the end).
    pub peak: ember_core::host::HostMemory,
    /// Host 1's TCP counters at the end.
    pub server: ember_core::host::stats::TcpStats,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 1,
            impair: ImpairConfig {
                delay: Duration::from_millis(5),
                rate_bps: Some(100_000_000),
                ..ImpairConfig::default()
            },
            bytes: 100_000,
            conns: 1,
            hosts: 2,
            oneway: false,
            params: Vec::new(),
            vary: false,
            time_limit: Duration::from_secs(3600),
            auto_buffers: true,
            queue_explicit: false,
            trace: false,
            fq: true,
            ping_every: None,
            conn_start: Duration::ZERO,
            syn_flood: None,
        }
    }
}

/// The outcome of one seed.
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    pub seed: u64,
    pub ok: bool,
    pub error: Option<String>,
    /// Payload bytes delivered and checked (all connections, both directions).
    pub bytes: u64,
    /// Virtual time until the last connection finished (or the failure).
    pub virtual_s: f64,
    pub wall_s: f64,
    pub retransmits: u64,
    pub timeouts: u64,
    pub frames: u64,
    /// Large TCP segments the hosts split in software (GSO), and the pieces made.
    pub gso_splits: u64,
    pub gso_segs: u64,
    /// TCP segments receive-side coalescing absorbed into another (`groMerged`, all
    /// hosts).
    pub gro_merged: u64,
    /// What `vary` chose, for the failure report.
    pub variant: String,
    /// Every ping sent, in order (empty without `ping_every`).
    pub pings: Vec<PingSample>,
    /// The hosts' fair queues' counters, summed (zero without `fq`).
    pub fq: FqStats,
    /// Per connection, the virtual milliseconds from connect to ESTABLISHED at the
    /// client (`None`: never).
    pub connect_ms: Vec<Option<f64>>,
    /// With `syn_flood`: what it did.
    pub flood: Option<FloodReport>,
    /// Receive batches that held a SYN and, after it, the final ACK of the same
    /// connection's handshake (a duplicate or retransmitted SYN taken in together with the
    /// ACK, before the host could answer it: see `ImpairConfig::dup_delay`).
    pub syn_ack_batches: u64,
}

/// One echo request of host 0's pinger.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PingSample {
    /// When it was sent (virtual seconds).
    pub sent_s: f64,
    /// Its round-trip time in milliseconds; `None` if no reply came.
    pub rtt_ms: Option<f64>,
}

/// The `p`-th percentile (0..=100, nearest rank) of the answered pings' RTTs among those
/// sent in `[from_s, to_s)`; `None` if there are none.
pub fn ping_percentile(pings: &[PingSample], from_s: f64, to_s: f64, p: f64) -> Option<f64> {
    let mut v: Vec<f64> = pings
        .iter()
        .filter(|x| x.sent_s >= from_s && x.sent_s < to_s)
        .filter_map(|x| x.rtt_ms)
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0 * v.len() as f64).ceil() as usize).clamp(1, v.len());
    Some(v[rank - 1])
}

/// One direction's application state at one end.
#[derive(Debug)]
struct Side {
    host: usize,
    id: Option<ConnId>,
    tx: StreamGen,
    to_send: u64,
    sent: u64,
    pending: Vec<u8>,
    pend_off: usize,
    chunk: usize,
    shut: bool,
    rx: StreamGen,
    expect: u64,
    got: u64,
    eof: bool,
    closed: bool,
    check: Vec<u8>,
    /// When `connect` was called (clients) and when the handshake completed.
    opened_at: Option<Instant>,
    connected_at: Option<Instant>,
}

impl Side {
    fn new(
        host: usize,
        tx: StreamGen,
        to_send: u64,
        rx: StreamGen,
        expect: u64,
        chunk: usize,
    ) -> Side {
        Side {
            host,
            id: None,
            tx,
            to_send,
            sent: 0,
            pending: Vec::new(),
            pend_off: 0,
            chunk,
            shut: false,
            rx,
            expect,
            got: 0,
            eof: false,
            closed: false,
            check: Vec::new(),
            opened_at: None,
            connected_at: None,
        }
    }
}

#[derive(Debug)]
struct ConnRun {
    client: Side,
    server: Side,
    server_addr: SocketAddrV4,
    finished: bool,
}

enum Net {
    P2p(Box<Link>),
    Switched(Box<Switch>),
}

fn host_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, (i >> 8) as u8, (i & 0xff) as u8 + 1)
}

fn host_mac(i: usize) -> MacAddr {
    MacAddr([0x02, 0, 0, 0, (i >> 8) as u8, i as u8 + 1])
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The bandwidth-delay product of the configured path, in bytes.
pub fn bdp_bytes(impair: &ImpairConfig) -> u64 {
    let rtt = impair.delay * 2 + impair.jitter;
    match impair.rate_bps {
        Some(r) => (r as f64 / 8.0 * rtt.as_secs_f64()) as u64,
        None => 0,
    }
}

/// Runs one seed.
pub fn run(cfg: &SimConfig) -> RunReport {
    let wall = std::time::Instant::now();
    let mut sim = match Sim::new(cfg) {
        Ok(s) => s,
        Err(e) => return failed_report(cfg.seed, e),
    };
    let res = sim.run_inner();
    sim.report(res.err(), wall.elapsed().as_secs_f64())
}

fn failed_report(seed: u64, error: String) -> RunReport {
    RunReport {
        seed,
        ok: false,
        error: Some(error),
        bytes: 0,
        virtual_s: 0.0,
        wall_s: 0.0,
        retransmits: 0,
        timeouts: 0,
        frames: 0,
        gso_splits: 0,
        gso_segs: 0,
        gro_merged: 0,
        variant: String::new(),
        pings: Vec::new(),
        fq: FqStats::default(),
        connect_ms: Vec::new(),
        flood: None,
        syn_ack_batches: 0,
    }
}

/// The ICMP identifier of the simulator's pinger.
const PING_IDENT: u16 = 0x7e57;

/// A host's transmit queue in front of its link: a fair queue and a byte-queue limit.
struct TxQueue {
    fq: Fq,
    /// Frames leave for the link while its backlog is below this many bytes.
    limit: usize,
    flow_seed: u64,
}

impl TxQueue {
    /// `max(2 full frames, 1 ms at the rate)`, but leaving room for one more frame in the
    /// link's queue, so the link itself never tail-drops; unbounded with an infinite rate.
    fn limit(impair: &ImpairConfig) -> usize {
        let Some(rate) = impair.rate_bps else {
            return usize::MAX;
        };
        let frame = impair.mtu.saturating_add(14);
        byte_queue_limit(rate, frame)
            .min(impair.queue_bytes.saturating_sub(frame))
            .max(1)
    }
}

struct Sim {
    cfg: SimConfig,
    now: Instant,
    hosts: Vec<Host>,
    net: Net,
    conns: Vec<ConnRun>,
    /// (host, conn handle) → (conn index, is_server)
    by_handle: HashMap<(usize, ConnId), (usize, bool)>,
    /// (server host, client address) → conn index
    by_peer: HashMap<(usize, SocketAddrV4), usize>,
    listeners: Vec<ListenerId>,
    frames: u64,
    variant: String,
    done_at: Option<Instant>,
    buf: Vec<u8>,
    /// The receive batch being assembled (kept for its capacity).
    batch: Vec<Vec<u8>>,
    /// One per host with `fq`, else empty.
    txq: Vec<TxQueue>,
    /// The pinger: the next send, and every ping sent (sent at, reply at).
    next_ping: Option<Instant>,
    pings: Vec<(Instant, Option<Instant>)>,
    opened: bool,
    /// The SYN flood: when the next spoofed SYN is due, its generator, its record.
    flood_next: Option<Instant>,
    flood_rng: Rng,
    flood: FloodReport,
    /// See [`RunReport::syn_ack_batches`].
    syn_ack_batches: u64,
}

impl Sim {
    fn new(cfg: &SimConfig) -> Result<Sim, String> {
        let mut cfg = cfg.clone();
        cfg.hosts = cfg.hosts.max(2);
        let mut rng = Rng(cfg.seed ^ 0x005e_ed0f_e1ba_u64);
        let bdp = bdp_bytes(&cfg.impair);
        if !cfg.queue_explicit && cfg.impair.rate_bps.is_some() {
            cfg.impair.queue_bytes = cfg
                .impair
                .queue_bytes
                .max(bdp as usize)
                .max(cfg.impair.mtu * 4 + 64);
        }
        let mut base: Vec<(String, String)> = Vec::new();
        if cfg.auto_buffers {
            let want = (2 * bdp).max(1_048_576);
            if want > 1_048_576 {
                let max = want.next_power_of_two().min(1 << 30);
                base.push(("tcp_max_buf".into(), max.to_string()));
                base.push(("tcp_recv_hiwat".into(), want.min(max).to_string()));
                base.push(("tcp_xmit_hiwat".into(), want.min(max).to_string()));
            }
        }
        let mut variant = String::new();
        let mut per_host: Vec<Vec<(String, String)>> = vec![Vec::new(); cfg.hosts];
        if cfg.vary {
            for (h, v) in per_host.iter_mut().enumerate() {
                let sack = ["0", "1", "2"][rng.below(3) as usize];
                let ts = ["1", "2"][rng.below(2) as usize];
                let ws = ["1", "2"][rng.below(2) as usize];
                let cc = ["cubic", "newreno"][rng.below(2) as usize];
                variant.push_str(&format!("h{h}:sack={sack},ts={ts},ws={ws},cc={cc} "));
                v.push(("tcp_sack_permitted".into(), sack.into()));
                v.push(("tcp_tstamp_always".into(), ts.into()));
                v.push(("tcp_wscale_always".into(), ws.into()));
                v.push(("tcp_congestion_control".into(), cc.into()));
            }
        }
        let mut hosts = Vec::new();
        for (h, extra) in per_host.iter().enumerate() {
            let mut params = Params::default();
            let pairs: Vec<(&str, &str)> = base
                .iter()
                .chain(extra.iter())
                .chain(cfg.params.iter())
                .map(|(a, b)| (a.as_str(), b.as_str()))
                .collect();
            if let Err(e) = params.set_many(&pairs) {
                return Err(format!("bad tunables: {e}"));
            }
            let mut secret = [0u8; 16];
            secret[..8].copy_from_slice(&rng.next().to_le_bytes());
            secret[8..].copy_from_slice(&(h as u64).to_le_bytes());
            let mut host = Host::new(params, secret);
            let mtu = cfg.impair.mtu as u32;
            host.add_interface(Interface {
                mac: host_mac(h),
                addr: host_addr(h),
                prefix_len: 16,
                mtu,
            })
            .map_err(|e| format!("interface: {e}"))?;
            hosts.push(host);
        }
        let net = if cfg.hosts == 2 {
            Net::P2p(Box::new(Link::symmetric(cfg.impair.clone(), cfg.seed)))
        } else {
            Net::Switched(Box::new(Switch::new(
                cfg.hosts,
                cfg.impair.clone(),
                cfg.seed,
            )))
        };
        let mut listeners = Vec::new();
        for (h, host) in hosts.iter_mut().enumerate() {
            let l = host
                .tcp_listen(SocketAddrV4::new(host_addr(h), PORT), 1024)
                .map_err(|e| format!("listen: {e}"))?;
            listeners.push(l);
        }
        let mut conns = Vec::new();
        for c in 0..cfg.conns {
            let (a, b) = if cfg.hosts == 2 {
                (0, 1)
            } else {
                let a = c as usize % cfg.hosts;
                (a, (a + 1 + c as usize / cfg.hosts) % cfg.hosts)
            };
            let b = if a == b { (b + 1) % cfg.hosts } else { b };
            let chunk = if cfg.vary {
                [1460usize, 7000, 65_536, 1 + rng.below(3000) as usize][rng.below(4) as usize]
            } else {
                65_536
            };
            let back = if cfg.oneway { 0 } else { cfg.bytes };
            conns.push(ConnRun {
                client: Side::new(
                    a,
                    StreamGen::new(cfg.seed, c, 0),
                    cfg.bytes,
                    StreamGen::new(cfg.seed, c, 1),
                    back,
                    chunk,
                ),
                server: Side::new(
                    b,
                    StreamGen::new(cfg.seed, c, 1),
                    back,
                    StreamGen::new(cfg.seed, c, 0),
                    cfg.bytes,
                    chunk,
                ),
                server_addr: SocketAddrV4::new(host_addr(b), PORT),
                finished: false,
            });
        }
        Ok(Sim {
            now: Instant::ZERO,
            hosts,
            net,
            conns,
            by_handle: HashMap::new(),
            by_peer: HashMap::new(),
            listeners,
            frames: 0,
            variant,
            done_at: None,
            buf: vec![0; 65_536],
            batch: Vec::new(),
            txq: if cfg.fq {
                (0..cfg.hosts)
                    .map(|h| TxQueue {
                        fq: Fq::new(FqConfig::for_link(
                            cfg.impair.rate_bps,
                            cfg.impair.mtu.saturating_add(14),
                        )),
                        limit: TxQueue::limit(&cfg.impair),
                        flow_seed: cfg.seed ^ h as u64,
                    })
                    .collect()
            } else {
                Vec::new()
            },
            next_ping: cfg.ping_every.map(|_| Instant::ZERO),
            pings: Vec::new(),
            opened: false,
            flood_next: cfg.syn_flood.map(|f| Instant::ZERO + f.start),
            flood_rng: Rng(cfg.seed ^ 0xf100_d5ee_d000),
            flood: FloodReport::default(),
            syn_ack_batches: 0,
            cfg,
        })
    }

    fn report(&self, error: Option<String>, wall_s: f64) -> RunReport {
        let mut retransmits = 0;
        let mut timeouts = 0;
        let (mut gso_splits, mut gso_segs) = (0, 0);
        let mut gro_merged = 0;
        for h in &self.hosts {
            let s = h.stats();
            retransmits += s.tcp.retrans_segs;
            timeouts += s.tcp.tim_retrans;
            gso_splits += s.ip.gso_splits;
            gso_segs += s.ip.gso_segs;
            gro_merged += s.ip.gro_merged;
        }
        let bytes = self.conns.iter().map(|c| c.client.got + c.server.got).sum();
        let end = self.done_at.unwrap_or(self.now);
        RunReport {
            seed: self.cfg.seed,
            ok: error.is_none(),
            error,
            bytes,
            virtual_s: end.as_secs_f64(),
            wall_s,
            retransmits,
            timeouts,
            frames: self.frames,
            gso_splits,
            gso_segs,
            gro_merged,
            variant: self.variant.clone(),
            pings: self
                .pings
                .iter()
                .map(|&(sent, got)| PingSample {
                    sent_s: sent.as_secs_f64(),
                    rtt_ms: got.map(|g| (g - sent).as_secs_f64() * 1e3),
                })
                .collect(),
            fq: self.txq.iter().fold(FqStats::default(), |mut a, q| {
                a += q.fq.stats();
                a
            }),
            connect_ms: self
                .conns
                .iter()
                .map(|c| {
                    let (o, e) = (c.client.opened_at?, c.client.connected_at?);
                    Some((e - o).as_secs_f64() * 1e3)
                })
                .collect(),
            flood: self.cfg.syn_flood.map(|_| {
                let mut f = self.flood.clone();
                f.server = self.hosts[1].stats().tcp;
                f
            }),
            syn_ack_batches: self.syn_ack_batches,
        }
    }

    fn run_inner(&mut self) -> Result<(), String> {
        loop {
            if !self.opened && self.now >= Instant::ZERO + self.cfg.conn_start {
                self.open_conns()?;
                self.opened = true;
            }
            self.send_ping();
            self.inject_flood();
            self.move_frames();
            self.collect_pings();
            self.handle_events()?;
            self.check_finished()?;
            if self.opened && self.flood_next.is_none() && self.conns.iter().all(|c| c.finished) {
                self.done_at.get_or_insert(self.now);
                self.next_ping = None;
                if self.ping_wait().is_none() {
                    return Ok(());
                }
            }
            let next = self.next_event();
            let Some(next) = next else {
                return Err(self.describe("stalled: no frame in flight and no timer pending"));
            };
            if next.saturating_duration_since(Instant::ZERO) > self.cfg.time_limit {
                self.now = Instant::ZERO + self.cfg.time_limit;
                return Err(self.describe("virtual time limit reached"));
            }
            self.now = self.now.max(next);
            for h in &mut self.hosts {
                if h.poll_timeout().is_some_and(|t| t <= self.now) {
                    h.handle_timeout(self.now);
                }
            }
        }
    }

    /// Host 0 pings host 1 when the pinger is due.
    fn send_ping(&mut self) {
        let (Some(at), Some(every)) = (self.next_ping, self.cfg.ping_every) else {
            return;
        };
        if at > self.now {
            return;
        }
        let seq = self.pings.len() as u16;
        if self.hosts[0]
            .ping(self.now, host_addr(1), PING_IDENT, seq, &[0x55; 56])
            .is_ok()
        {
            self.pings.push((self.now, None));
        }
        self.next_ping = Some(at + every.max(Duration::from_micros(1)));
    }

    /// Matches host 0's echo replies to the pings sent.
    fn collect_pings(&mut self) {
        for r in self.hosts[0].take_ping_replies() {
            let n = self.pings.len();
            if r.ident != PING_IDENT || n == 0 {
                continue;
            }
            // The latest ping with this (wrapping) sequence number.
            let mut i = ((n - 1) & !0xffff) | usize::from(r.seq_no);
            if i >= n {
                let Some(j) = i.checked_sub(0x1_0000) else {
                    continue;
                };
                i = j;
            }
            if self.pings[i].1.is_none() {
                self.pings[i].1 = Some(r.at);
            }
        }
    }

    /// After the transfers: until when to wait for the oldest unanswered ping (2 s after
    /// it was sent), if any may still come back.
    fn ping_wait(&self) -> Option<Instant> {
        self.pings
            .iter()
            .filter(|p| p.1.is_none())
            .map(|p| p.0 + Duration::from_secs(2))
            .find(|&t| t > self.now)
    }

    /// Delivers the spoofed SYNs due by now to host 1 (see [`SynFlood`]).
    fn inject_flood(&mut self) {
        let Some(f) = self.cfg.syn_flood else {
            return;
        };
        let gap = Duration::from_nanos(1_000_000_000 / f.per_sec.max(1));
        let mut frame = Vec::with_capacity(128);
        while let Some(at) = self.flood_next.filter(|&t| t <= self.now) {
            let r = self.flood_rng.next();
            // 198.18.0.0/16 outside the hosts' own addresses (host_addr: 198.18.h>>8.h+1).
            let src = Ipv4Addr::new(198, 18, 128 | (r >> 8) as u8 & 0x7f, r as u8);
            let sport = 1024 + (r >> 16) as u16 % 64_000;
            let isn = (r >> 32) as u32;
            let mut o = ember_core::wire::TcpOptions::default();
            let kind = (r >> 28) & 3;
            o.mss = (kind != 0).then_some([536, 1460, 1400, 8960][((r >> 24) & 3) as usize]);
            if kind >= 2 {
                o.window_scale = Some(7);
                o.sack_permitted = true;
            }
            if kind == 3 {
                o.timestamps = Some((isn ^ 0x5555, 0));
            }
            let tcp = ember_core::wire::TcpRepr {
                src_port: sport,
                dst_port: PORT,
                seq: isn,
                ack: 0,
                flags: ember_core::wire::TcpFlags::SYN,
                window: 64_240,
                urgent: 0,
                options: o,
            };
            let dst = host_addr(1);
            let tl = tcp.header_len();
            let ip = ember_core::wire::Ipv4Repr {
                src,
                dst,
                protocol: ember_core::wire::ip_proto::TCP,
                ttl: 64,
                dscp_ecn: 0,
                ident: r as u16,
                dont_frag: true,
                more_frags: false,
                frag_offset: 0,
                payload_len: tl as u16,
            };
            frame.clear();
            frame.resize(ember_core::wire::ETHERNET_HEADER_LEN + 20 + tl, 0);
            ember_core::wire::EthernetRepr {
                dst: host_mac(1),
                src: MacAddr([0x02, 0xba, 0xd0, 0, (r >> 40) as u8, (r >> 48) as u8]),
                ethertype: ember_core::wire::ethertype::IPV4,
            }
            .emit(&mut frame);
            let (_, rest) = frame.split_at_mut(ember_core::wire::ETHERNET_HEADER_LEN);
            ip.emit(&mut rest[..20]);
            tcp.emit(&mut rest[20..], src, dst);
            self.hosts[1].receive(self.now, IfaceId(0), &frame);
            self.flood.sent += 1;
            if self.flood.sent % 1000 == 0 || self.flood.sent == f.count {
                self.sample_flood_memory();
            }
            self.flood_next = (self.flood.sent < f.count).then_some(at + gap);
        }
    }

    fn sample_flood_memory(&mut self) {
        let m = self.hosts[1].memory();
        self.flood.peak.raise_to(&m);
    }

    fn open_conns(&mut self) -> Result<(), String> {
        for i in 0..self.conns.len() {
            let (h, to) = (self.conns[i].client.host, self.conns[i].server_addr);
            let id = self.hosts[h]
                .tcp_connect(self.now, to, None)
                .map_err(|e| format!("connect {i}: {e}"))?;
            if self.cfg.vary && self.cfg.seed % 3 == 0 {
                self.hosts[h]
                    .tcp_with(self.now, id, |t| t.set_nodelay(true))
                    .ok();
            }
            let local = self.hosts[h]
                .tcb(id)
                .map(|t| t.local())
                .ok_or("connect: no tcb")?;
            self.conns[i].client.id = Some(id);
            self.conns[i].client.opened_at = Some(self.now);
            self.by_handle.insert((h, id), (i, false));
            let sh = self.conns[i].server.host;
            self.by_peer.insert((sh, local), i);
        }
        Ok(())
    }

    fn next_event(&self) -> Option<Instant> {
        let net = match &self.net {
            Net::P2p(l) => l.next_event(),
            Net::Switched(s) => s.next_event(),
        };
        let start = (!self.opened).then(|| Instant::ZERO + self.cfg.conn_start);
        let pinger = self.next_ping.into_iter().chain(self.ping_wait());
        self.hosts
            .iter()
            .filter_map(|h| h.poll_timeout())
            .chain(net)
            .chain((0..self.txq.len()).filter_map(|h| self.tx_ready_at(h)))
            .chain(start)
            .chain(pinger)
            .chain(self.flood_next)
            .min()
    }

    /// The wire host `h` transmits on.
    fn tx_wire(&self, h: usize) -> Option<&Wire> {
        match &self.net {
            Net::P2p(l) => Some(l.wire(if h == 0 { End::A } else { End::B })),
            Net::Switched(s) => s.port(h).map(|p| p.0),
        }
    }

    /// When host `h`'s fair queue can next move a frame to its link: once the link's
    /// backlog is below the limit and a frame is eligible (pacing). `None` when empty.
    fn tx_ready_at(&self, h: usize) -> Option<Instant> {
        let q = self.txq.get(h)?;
        if q.fq.is_empty() {
            return None;
        }
        let gate = self
            .tx_wire(h)
            .map_or(self.now, |w| w.backlog_below_at(self.now, q.limit));
        Some(gate.max(q.fq.next_time().unwrap_or(self.now)))
    }

    /// Moves frames from host `h`'s fair queue to its link while the link's backlog is
    /// under the limit; whether any moved.
    fn drain_txq(&mut self, h: usize) -> bool {
        let mut moved = false;
        while let Some(q) = self.txq.get(h) {
            let open = self
                .tx_wire(h)
                .is_none_or(|w| w.backlog(self.now) < q.limit);
            if !open {
                break;
            }
            let now = self.now;
            let trace = self.cfg.trace;
            let Some(item) = self.txq[h].fq.dequeue(now, &mut |d| {
                if trace {
                    eprintln!(
                        "{:>12.6} h{h} fq drop {}",
                        now.as_secs_f64(),
                        trace::describe(&d.frame)
                    );
                }
            }) else {
                break;
            };
            moved = true;
            self.net_send(h, item.frame);
        }
        moved
    }

    fn net_send(&mut self, h: usize, frame: Vec<u8>) {
        match &mut self.net {
            Net::P2p(l) => {
                let end = if h == 0 { End::A } else { End::B };
                l.send(self.now, end, frame);
            }
            Net::Switched(s) => {
                s.send(self.now, h, frame);
            }
        }
    }

    /// Delivers every frame due now and puts every frame the hosts queued on the wire,
    /// until nothing moves.
    fn move_frames(&mut self) {
        loop {
            let mut moved = false;
            for h in 0..self.hosts.len() {
                while let Some(f) = self.hosts[h].poll_transmit() {
                    moved = true;
                    self.frames += 1;
                    if self.cfg.trace {
                        eprintln!(
                            "{:>12.6} h{h} send {}",
                            self.now.as_secs_f64(),
                            trace::describe(&f.data)
                        );
                    }
                    if let Some(q) = self.txq.get_mut(h) {
                        let flow = frame_flow(&f.data, q.flow_seed);
                        let (now, trace) = (self.now, self.cfg.trace);
                        q.fq.enqueue(now, flow, f.data, 0, None, &mut |d| {
                            if trace {
                                eprintln!(
                                    "{:>12.6} h{h} fq drop {}",
                                    now.as_secs_f64(),
                                    trace::describe(&d.frame)
                                );
                            }
                        });
                        // A driver hands a frame on as soon as its device has room.
                        self.drain_txq(h);
                    } else {
                        self.net_send(h, f.data);
                    }
                }
                moved |= self.drain_txq(h);
            }
            // Every frame that has arrived for a host by now is one receive batch, as
            // one poll of a device would return it (receive-side coalescing works
            // within a batch).
            for h in 0..self.hosts.len() {
                let mut batch = core::mem::take(&mut self.batch);
                loop {
                    let frame = match &mut self.net {
                        Net::P2p(l) => l.recv(self.now, if h == 0 { End::A } else { End::B }),
                        Net::Switched(s) => s.recv(self.now, h),
                    };
                    let Some(frame) = frame else { break };
                    moved = true;
                    if self.cfg.trace {
                        eprintln!(
                            "{:>12.6} h{h} recv {}",
                            self.now.as_secs_f64(),
                            trace::describe(&frame)
                        );
                    }
                    batch.push(frame);
                }
                if batch.len() > 1 && syn_then_final_ack(&batch) {
                    self.syn_ack_batches += 1;
                }
                self.hosts[h].receive_batch(self.now, IfaceId(0), &batch);
                batch.clear();
                self.batch = batch;
            }
            if !moved {
                break;
            }
        }
    }

    fn handle_events(&mut self) -> Result<(), String> {
        for h in 0..self.hosts.len() {
            while let Some(ev) = self.hosts[h].poll_event() {
                match ev {
                    SocketEvent::Listener(l) => {
                        while let Ok((id, peer)) = self.hosts[h].tcp_accept(l) {
                            let Some(&i) = self.by_peer.get(&(h, peer)) else {
                                return Err(format!("host {h} accepted unknown peer {peer}"));
                            };
                            if self.conns[i].server.id.is_some() {
                                return Err(format!("conn {i} accepted twice"));
                            }
                            self.conns[i].server.id = Some(id);
                            self.by_handle.insert((h, id), (i, true));
                            self.drive(i, true)?;
                        }
                    }
                    SocketEvent::Tcp(id, _) => {
                        if let Some(&(i, server)) = self.by_handle.get(&(h, id)) {
                            self.drive(i, server)?;
                        }
                    }
                    SocketEvent::Udp(_) => {}
                }
            }
        }
        let _ = &self.listeners;
        Ok(())
    }

    /// The application at one end: write what fits, half-close when done, read and check
    /// everything, close after end of stream.
    fn drive(&mut self, i: usize, server: bool) -> Result<(), String> {
        let now = self.now;
        let side = if server {
            &mut self.conns[i].server
        } else {
            &mut self.conns[i].client
        };
        let Some(id) = side.id else { return Ok(()) };
        if side.closed {
            return Ok(());
        }
        let host = &mut self.hosts[side.host];
        let who = if server { "server" } else { "client" };
        if side.connected_at.is_none()
            && host
                .tcb(id)
                .is_some_and(|t| t.state().is_synchronized() && t.state() != State::SynReceived)
        {
            side.connected_at = Some(now);
        }
        if let Some(e) = host.tcb(id).and_then(|t| t.error()) {
            if e != TcpError::WouldBlock {
                return Err(format!("conn {i} {who}: connection error: {e}"));
            }
        }
        while side.sent < side.to_send {
            if side.pend_off == side.pending.len() {
                let n = (side.to_send - side.sent).min(side.chunk as u64) as usize;
                side.pending.resize(n, 0);
                side.tx.fill(&mut side.pending);
                side.pend_off = 0;
            }
            match host.tcp_send(now, id, &side.pending[side.pend_off..]) {
                Ok(n) => {
                    side.pend_off += n;
                    side.sent += n as u64;
                    if n == 0 {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(format!("conn {i} {who}: send: {e}")),
            }
        }
        if side.sent == side.to_send && !side.shut {
            host.tcp_shutdown_write(now, id)
                .map_err(|e| format!("conn {i} {who}: shutdown: {e}"))?;
            side.shut = true;
        }
        loop {
            match host.tcp_recv(now, id, &mut self.buf) {
                Ok(0) => {
                    side.eof = true;
                    break;
                }
                Ok(n) => {
                    side.check.resize(n, 0);
                    side.rx.fill(&mut side.check);
                    if side.check[..] != self.buf[..n] {
                        let at = side
                            .check
                            .iter()
                            .zip(&self.buf[..n])
                            .position(|(a, b)| a != b)
                            .unwrap_or(0);
                        return Err(format!(
                            "conn {i} {who}: byte {} differs",
                            side.got + at as u64
                        ));
                    }
                    side.got += n as u64;
                    if side.got > side.expect {
                        return Err(format!(
                            "conn {i} {who}: received {} bytes, expected {}",
                            side.got, side.expect
                        ));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(format!("conn {i} {who}: recv: {e}")),
            }
        }
        if side.eof && side.got != side.expect {
            return Err(format!(
                "conn {i} {who}: end of stream after {} of {} bytes",
                side.got, side.expect
            ));
        }
        if side.eof && side.shut {
            host.tcp_close(now, id);
            side.closed = true;
        }
        Ok(())
    }

    /// A connection is finished when both applications closed and each end's TCP has
    /// completed its close (reaped, CLOSED, or waiting in TIME-WAIT).
    fn check_finished(&mut self) -> Result<(), String> {
        for c in &mut self.conns {
            if c.finished || !c.client.closed || !c.server.closed {
                continue;
            }
            let done = |s: &Side, hosts: &[Host]| match s.id.and_then(|id| hosts[s.host].tcb(id)) {
                None => true,
                Some(t) => matches!(t.state(), State::TimeWait | State::Closed),
            };
            if done(&c.client, &self.hosts) && done(&c.server, &self.hosts) {
                c.finished = true;
            }
        }
        Ok(())
    }

    fn describe(&self, what: &str) -> String {
        let mut s = format!("{what} at {:.3}s;", self.now.as_secs_f64());
        if std::env::var_os("EMBER_SIM_DEBUG").is_some() {
            for (i, h) in self.hosts.iter().enumerate() {
                s.push_str(&format!("\n host {i}: {:?}\n", h.stats()));
            }
        }
        for (i, c) in self
            .conns
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.finished)
            .take(4)
        {
            let st = |side: &Side| {
                side.id
                    .and_then(|id| self.hosts[side.host].tcb(id))
                    .map(|t| {
                        let inf = t.info();
                        format!(
                            "{} una={} nxt={} rcv={} cwnd={} ssthresh={} sndq={} rcvq={} ooo={} backoff={} srtt={:?} rto={:?} rexmit={} rtos={}",
                            inf.state,
                            inf.snd_una,
                            inf.snd_nxt,
                            inf.rcv_nxt,
                            inf.cwnd,
                            inf.ssthresh,
                            inf.send_queued,
                            inf.recv_queued,
                            inf.ooo_bytes,
                            inf.backoff,
                            inf.srtt,
                            inf.rto,
                            inf.stats.retrans_segs,
                            inf.stats.timeouts
                        )
                    })
                    .unwrap_or_else(|| "gone".into())
            };
            s.push_str(&format!(
                " conn {i}: client[sent {}/{} got {}/{} {}] server[sent {}/{} got {}/{} {}];",
                c.client.sent,
                c.client.to_send,
                c.client.got,
                c.client.expect,
                st(&c.client),
                c.server.sent,
                c.server.to_send,
                c.server.got,
                c.server.expect,
                st(&c.server)
            ));
        }
        s
    }
}

/// Many seeds.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub runs: usize,
    pub ok: usize,
    pub failed: Vec<u64>,
    pub bytes: u64,
    pub virtual_s: f64,
    pub wall_s: f64,
    pub goodput_mbit: f64,
    pub retransmits: u64,
    /// [`RunReport::syn_ack_batches`], summed.
    pub syn_ack_batches: u64,
    pub reports: Vec<RunReport>,
}

/// Runs seeds `first..first+n`, each in isolation; a panic fails its seed only.
pub fn run_seeds(base: &SimConfig, first: u64, n: u64) -> Summary {
    let mut reports = Vec::new();
    for seed in first..first.saturating_add(n) {
        let cfg = SimConfig {
            seed,
            ..base.clone()
        };
        let r = std::panic::catch_unwind(|| run(&cfg)).unwrap_or_else(|p| {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            failed_report(seed, format!("panic: {msg}"))
        });
        reports.push(r);
    }
    summarize(reports)
}

/// Whether `batch` holds a SYN (no ACK) and, after it, the final ACK of the same
/// handshake: a segment of the same connection with ACK only, at the SYN's sequence
/// number plus one.
fn syn_then_final_ack(batch: &[Vec<u8>]) -> bool {
    use ember_core::wire::{ethertype, ip_proto, EthernetRepr, Ipv4Repr, TcpRepr};
    let mut syns: Vec<(Ipv4Addr, u16, Ipv4Addr, u16, u32)> = Vec::new();
    for f in batch {
        let Ok((eth, p)) = EthernetRepr::parse(f) else {
            continue;
        };
        if eth.ethertype != ethertype::IPV4 {
            continue;
        }
        let Ok((ip, p)) = Ipv4Repr::parse(p, true) else {
            continue;
        };
        if ip.protocol != ip_proto::TCP {
            continue;
        }
        let Ok((t, _)) = TcpRepr::parse(p, ip.src, ip.dst, true) else {
            continue;
        };
        let key = (ip.src, t.src_port, ip.dst, t.dst_port);
        if t.flags.syn() && !t.flags.ack() {
            syns.push((key.0, key.1, key.2, key.3, t.seq.wrapping_add(1)));
        } else if t.flags.ack()
            && !t.flags.syn()
            && !t.flags.rst()
            && syns.contains(&(key.0, key.1, key.2, key.3, t.seq))
        {
            return true;
        }
    }
    false
}

pub fn summarize(reports: Vec<RunReport>) -> Summary {
    let bytes: u64 = reports.iter().map(|r| r.bytes).sum();
    let virtual_s: f64 = reports.iter().map(|r| r.virtual_s).sum();
    Summary {
        runs: reports.len(),
        ok: reports.iter().filter(|r| r.ok).count(),
        failed: reports.iter().filter(|r| !r.ok).map(|r| r.seed).collect(),
        bytes,
        virtual_s,
        wall_s: reports.iter().map(|r| r.wall_s).sum(),
        goodput_mbit: if virtual_s > 0.0 {
            bytes as f64 * 8.0 / virtual_s / 1e6
        } else {
            0.0
        },
        retransmits: reports.iter().map(|r| r.retransmits).sum(),
        syn_ack_batches: reports.iter().map(|r| r.syn_ack_batches).sum(),
        reports,
    }
}
