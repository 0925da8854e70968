//! One squeue's perimeter: the TCP connections bound to it, their timer wheel, and the
//! merged TCP/IP glue that runs inside the squeue ([`TcpPerimeter`]).
//!
//! # Design
//! Everything here runs with the squeue owned, so it takes `&mut self` and no locks of
//! its own. A segment reaches a connection by a direct call (IP and TCP are merged); a
//! connection's segments leave by a direct call too: to a device, or, for a destination
//! in this stack, to the loopback path. Loopback segments for a connection on this same
//! squeue go to `lo`, a local FIFO drained before the current entry ends (that is the
//! "one nested entry" of FireEngine, done iteratively so it can never recurse); segments
//! for a connection on another squeue enter that squeue (inline if it is idle and the
//! thread may nest, queued otherwise).
//!
//! One file per concern, as illumos splits `tcp_input.c`, `tcp_output.c`,
//! `tcp_fusion.c` and `tcp_socket.c`:
//! * `input.rs`: a segment through the core's TCP endpoint to its connection (or to a
//!   new one, or a reply, or a drop); ICMP errors for a connection.
//! * `output.rs`: a connection's segments out, to the loopback path or, with an IP
//!   header, through the fair queues and TCP Small Queues (`txq.rs`) to a device.
//! * `fusion.rs`: TCP Fusion's runtime half: admission, the fused write, unfusing. The
//!   flow-control decisions are the core's (`ember_core::tcp::FusedFlow`), so a second
//!   fused data path follows the same rules.
//! * `socket.rs`: the socket calls (connect, write, read, shutdown, close, options).
//! * `lifecycle.rs`: after anything touches a connection, `after` publishes its
//!   readiness to the socket, re-arms its timer in the wheel, moves it to its listener's
//!   accept queue once established, tries to fuse it, and reaps it once closed and
//!   released; memory accounting; the walks over every connection.
//! * this file: the connection record, the perimeter, and the squeue's service loop.
//!
//! # TCP Fusion
//! Admission, the fused data path and unfusing follow `fireengine.md` (TCP Fusion): see
//! [`TcpPerimeter::try_fuse`], [`TcpPerimeter::send`], [`TcpPerimeter::recv`] and
//! [`TcpPerimeter::unfuse`]. The sequence-number work is in the core
//! (`Tcb::fused_send`, `Tcb::unfuse_pair`).

mod fusion;
mod input;
mod lifecycle;
mod output;
mod socket;

use crate::classifier::{flow_hash, Tuple};
use crate::socket::{ConnShared, ListenerShared};
use crate::squeue::wheel::{TimerHandle, TimerWheel};
use crate::squeue::Perimeter;
use crate::stack::txq::{TxConfig, TxQueues};
use crate::stack::{usdt, PerimeterStats, Probe, ProbeEvent, StackInner};
use ember_core::ip::route::IfaceId;
use ember_core::slab::Key;
use ember_core::slab::Slab;
use ember_core::tcp::endpoint::Endpoint;
use ember_core::tcp::{State, Tcb, TcbStats};
use ember_core::time::Instant;
use ember_core::wire::MacAddr;
use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

/// One connection in its squeue.
pub(crate) struct Connection {
    pub tcb: Tcb,
    pub shared: Arc<ConnShared>,
    /// Passive and not yet in the accept queue.
    pub listener: Option<Arc<ListenerShared>>,
    /// In a listener's accept queue, not yet accepted (reset if the listener closes).
    pub queued_in: Option<Weak<ListenerShared>>,
    /// Nobody holds a handle any more.
    pub released: bool,
    pub timer: Option<TimerHandle>,
    /// The peer is a socket of this stack.
    pub local: bool,
    /// The fused peer (same squeue).
    pub peer: Option<Key>,
    /// Cached next hop towards a remote peer.
    pub hop: Option<(IfaceId, MacAddr)>,
    /// The connection's error was reported to the application (once, as Linux).
    pub err_reported: bool,
    /// TCP Small Queues: bytes of this connection's frames waiting in this squeue's fair
    /// queues (see `txq.rs`).
    pub tsq_bytes: u32,
    /// TCP held new data back for `tsq_bytes`; flush again when credit returns.
    pub tsq_throttled: bool,
    /// The link rate of the device queue its frames last waited for.
    pub tsq_rate: u64,
    /// Payload of its latest data segment (TSQ allows two of them).
    pub last_seg: u32,
    /// The state `after` last saw (for `tcp:state-change`; a new connection starts from
    /// CLOSED).
    pub last_state: State,
    /// Bytes of its queues counted in the stack's `tcp_mem_used` (see `recharge`).
    pub charged: usize,
}

impl Connection {
    fn new(
        tcb: Tcb,
        shared: Arc<ConnShared>,
        listener: Option<Arc<ListenerShared>>,
        local: bool,
    ) -> Connection {
        Connection {
            tcb,
            shared,
            listener,
            queued_in: None,
            released: false,
            timer: None,
            local,
            peer: None,
            hop: None,
            err_reported: false,
            tsq_bytes: 0,
            tsq_throttled: false,
            tsq_rate: 0,
            last_seg: 0,
            last_state: State::Closed,
            charged: 0,
        }
    }
}

/// A TCP segment in flight inside the stack (loopback) or from a device.
pub(crate) struct Segment {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    /// TCP header and payload. A `Vec`, not a shared buffer: measured on the bench's
    /// two-thread rr, a `bytes::Bytes` here cost 13-19 % of the p50 over loopback and
    /// the wire (see docs/PERFORMANCE.md, "What the runtime's new layout ... cost").
    pub bytes: Vec<u8>,
    /// Checksum known good (loopback: never computed, as Linux `lo`; device segments
    /// coalesced on receive: verified piece by piece).
    pub csum_ok: bool,
    /// Came over the loopback path (no IP header).
    pub lo: bool,
    /// Wire segments it stands for (a large loopback segment, or segments coalesced on
    /// receive); 1 for an ordinary one.
    pub segs: u16,
    /// Payload of each of those segments but the last (0 when `segs` is 1).
    pub gso_size: u16,
}

impl Segment {
    /// The 4-tuple (our end, the peer's end) its ports name, read without parsing the
    /// segment (`None`: too short to hold them).
    pub fn tuple(&self) -> Option<Tuple> {
        let b = self.bytes.get(..4)?;
        let sport = u16::from_be_bytes([b[0], b[1]]);
        let dport = u16::from_be_bytes([b[2], b[3]]);
        Some((
            SocketAddrV4::new(self.dst, dport),
            SocketAddrV4::new(self.src, sport),
        ))
    }
}

pub(crate) struct TcpPerimeter {
    pub id: usize,
    pub stack: Weak<StackInner>,
    pub conns: Slab<Connection>,
    pub wheel: TimerWheel<Key>,
    fired: Vec<Key>,
    lo: VecDeque<Segment>,
    pub stats: PerimeterStats,
    /// What happens to segments before a connection takes them, and its counters.
    pub endpoint: Endpoint,
    pub gone: TcbStats,
    /// Devices whose receive side this squeue services.
    pub rx_devs: Vec<(IfaceId, Arc<dyn crate::dev::Device>)>,
    rx_buf: Vec<Vec<u8>>,
    /// Devices this squeue transmitted on since it last left: flushed on leaving.
    tx_dirty: Vec<Arc<dyn crate::dev::Device>>,
    /// GSO, fair queues and TCP Small Queues credit in front of its devices.
    pub tx: TxQueues,
    /// The generation of the stack's transmit settings `tx` was built from.
    tx_gen: u64,
    /// Connections TCP Small Queues held back whose credit has returned: flushed next.
    tsq_ready: Vec<Key>,
    /// `tsq_ready` is being flushed (a flush it causes does not start another round).
    tsq_running: bool,
    /// A device batch is being taken in (`begin_batch`): connections flush at its end.
    batching: bool,
    /// Connections the batch touched, to flush at its end.
    touched: Vec<Key>,
    /// What the IP layer last received for TCP, kept as a buffer for the next batch.
    pub inbound: crate::stack::Inbound,
    /// Squeue 0 runs the IP layer's own timers (ARP, reassembly): this is the IP
    /// layer's next deadline (ns, `u64::MAX` for none), shared with the stack so that
    /// reading it never touches the stack's reference count.
    pub host_deadline: Option<Arc<std::sync::atomic::AtomicU64>>,
    /// An in-process probe subscriber listens (set by `Stack::subscribe`): the squeue
    /// probes, which fire with no stack reference at hand, read this.
    pub probing: bool,
}

impl TcpPerimeter {
    pub fn new(id: usize, stack: Weak<StackInner>, start: Instant) -> Self {
        TcpPerimeter {
            id,
            stack,
            conns: Slab::default(),
            wheel: TimerWheel::new(start, core::time::Duration::from_millis(1), 1024),
            fired: Vec::new(),
            lo: VecDeque::new(),
            stats: PerimeterStats::default(),
            endpoint: Endpoint::default(),
            gone: TcbStats::default(),
            rx_devs: Vec::new(),
            rx_buf: Vec::new(),
            tx_dirty: Vec::new(),
            tx: TxQueues::new(
                TxConfig::from_params(&ember_core::params::Params::default()),
                crate::dev::derive_seed(id as u64, 0x7478),
            ),
            tx_gen: u64::MAX,
            tsq_ready: Vec::new(),
            tsq_running: false,
            batching: false,
            touched: Vec::new(),
            inbound: crate::stack::Inbound::default(),
            host_deadline: None,
            probing: false,
        }
    }

    fn live_stack(&self) -> Option<Arc<StackInner>> {
        self.stack.upgrade()
    }

    /// Fires a squeue probe (someone listens: out of line).
    #[cold]
    #[inline(never)]
    fn fire_sq(&self, p: Probe, sq: usize, len: usize, arg: u64) {
        let any = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0);
        let ev = ProbeEvent::new(p, sq, any, any, len, arg);
        match self.live_stack() {
            Some(stack) => stack.fire(&ev),
            None => usdt::fire(&ev),
        }
    }
}

impl Perimeter for TcpPerimeter {
    fn service(&mut self, now_std: std::time::Instant) -> bool {
        let _ = now_std;
        let Some(stack) = self.live_stack() else {
            return false;
        };
        let now = crate::clock::now();
        let mut did = false;
        // Timers.
        self.fired.clear();
        let mut fired = std::mem::take(&mut self.fired);
        self.wheel.advance(now, &mut fired);
        for &k in &fired {
            did = true;
            if let Some(c) = self.conns.get_mut(k) {
                c.timer = None;
                c.tcb.handle_timeout(now);
            }
            self.flush(&stack, now, k);
        }
        self.fired = fired;
        // Device receive queues.
        for i in 0..self.rx_devs.len() {
            let (iface, dev) = self.rx_devs[i].clone();
            let mut buf = std::mem::take(&mut self.rx_buf);
            buf.clear();
            dev.poll_rx(now, &mut buf, 256);
            if !buf.is_empty() {
                did = true;
                stack.receive_frames(self, now, iface, &mut buf);
            }
            self.rx_buf = buf;
        }
        if self.host_deadline.is_some() && stack.host_timers(self, now) {
            did = true;
        }
        self.run_lo(&stack, now);
        // Fair queues whose device has room again (or whose paced flow may send).
        self.sync_tx(&stack);
        let (conns, ready) = (&mut self.conns, &mut self.tsq_ready);
        if self.tx.service(
            now,
            &mut |o, d| Self::tsq_credit(conns, ready, o, d),
            &mut self.tx_dirty,
        ) {
            did = true;
        }
        if !self.tsq_ready.is_empty() {
            did = true;
            self.run_tsq_ready(&stack, now);
        }
        did
    }

    fn next_deadline(&self) -> Option<std::time::Instant> {
        let mut d = self.wheel.next_deadline();
        for (_, dev) in &self.rx_devs {
            if let Some(t) = dev.next_rx() {
                d = Some(d.map_or(t, |x| x.min(t)));
            }
        }
        if let Some(h) = &self.host_deadline {
            let t = h.load(Ordering::Relaxed);
            if t != u64::MAX {
                let t = Instant::from_nanos(t);
                d = Some(d.map_or(t, |x| x.min(t)));
            }
        }
        if let Some(t) = self.tx.next_wake() {
            d = Some(d.map_or(t, |x| x.min(t)));
        }
        if !self.tsq_ready.is_empty() {
            return Some(std::time::Instant::now());
        }
        d.map(crate::clock::to_std)
    }

    #[inline]
    fn entered(&mut self, sq: usize, how: crate::squeue::Enter) {
        if (u16::from(self.probing) | usdt::semaphore(Probe::SqueueEnter)) != 0 {
            self.fire_sq(Probe::SqueueEnter, sq, 0, how as u64);
        }
    }

    #[inline]
    fn drained(&mut self, sq: usize, ran: u64, since: std::time::Instant) {
        if (u16::from(self.probing) | usdt::semaphore(Probe::SqueueDrain)) != 0 {
            let ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.fire_sq(
                Probe::SqueueDrain,
                sq,
                usize::try_from(ran).unwrap_or(usize::MAX),
                ns,
            );
        }
    }

    fn leave(&mut self) {
        self.tx.flush_batches();
        for d in self.tx_dirty.drain(..) {
            d.flush();
        }
    }
}

/// The squeue a flow's segments land on when a device spreads them by hash.
pub(crate) fn rss_queue(t: &Tuple, n: usize) -> usize {
    (flow_hash(t) % n.max(1) as u64) as usize
}

/// Convenience: entering a squeue for a segment.
pub(crate) fn seg_work(seg: Segment) -> impl FnOnce(&mut TcpPerimeter) + Send + 'static {
    move |p: &mut TcpPerimeter| {
        if let Some(stack) = p.live_stack() {
            let now = crate::clock::now();
            p.input(&stack, now, seg);
            p.run_lo(&stack, now);
        }
    }
}
