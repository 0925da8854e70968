//! One squeue's perimeter: the TCP connections bound to it, their timer wheel, and the
//! merged TCP/IP glue that runs inside the squeue.
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
//! After anything touches a connection, `after` publishes its readiness to the socket,
//! re-arms its timer in the wheel, moves it to its listener's accept queue once
//! established, tries to fuse it, and reaps it once closed and released.
//!
//! # TCP Fusion
//! Admission, the fused data path and unfusing follow `fireengine.md` (TCP Fusion): see
//! [`Perim::try_fuse`], [`Perim::send`], [`Perim::recv`] and [`Perim::unfuse`]. The
//! sequence-number work is in the core (`Tcb::fused_send`, `Tcb::unfuse_pair`).

use super::txq::{TxConfig, TxFrame, TxQueues};
use super::{probes, Probe, ProbeEvent, StackInner};
use crate::classifier::{flow_hash, ConnLoc, Tuple};
use crate::socket::shared::ready;
use crate::socket::{ConnShared, ListenerShared};
use crate::squeue::wheel::{TimerHandle, TimerWheel};
use crate::squeue::Perimeter;
use ember_core::host::slab::Slab;
use ember_core::host::{Key, TcpIcmpError, HEADROOM};
use ember_core::ip::route::IfaceId;
use ember_core::tcp::endpoint::{self, Action, Arrival, Context, Endpoint, ListenerView, Route};
use ember_core::tcp::isn::IsnGenerator;
use ember_core::tcp::tcb::ConnSpec;
use ember_core::tcp::{Events, State, Tcb, TcbInfo, TcbStats, TcpError, TcpSettings};
use ember_core::time::Instant;
use ember_core::wire::{
    ethertype, ip_proto, EthernetRepr, Ipv4Repr, MacAddr, TcpRepr, ETHERNET_HEADER_LEN,
    IPV4_HEADER_LEN,
};
use std::collections::VecDeque;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

/// Loopback segments one entry processes before it queues the rest on its own squeue.
const LO_BUDGET: usize = 4096;

/// Room in front of a TCP segment bound for a device: the Ethernet header (the IP
/// layer's headroom) and the IP header.
const FRAME_FRONT: usize = HEADROOM + IPV4_HEADER_LEN;

/// What a TCP segment on its way to a device carries besides its bytes.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Tx {
    /// The connection's key (`Key::as_u64`), for TCP Small Queues; 0 for none.
    owner: u64,
    /// Payload per piece of a large segment (0: an ordinary one).
    gso: u16,
    /// Pacing rate (bits/s), if the connection is paced.
    pace: Option<u64>,
}

/// A connection's key as a fair-queue owner tag (0 is "no owner").
fn owner_tag(key: Key) -> u64 {
    key.as_u64().wrapping_add(1)
}

/// The connection an owner tag names.
fn owner_key(tag: u64) -> Option<Key> {
    tag.checked_sub(1).map(Key::from_u64)
}

/// One connection in its squeue.
pub(crate) struct Conn {
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
    /// Fused writes this end (as reader) has not read yet.
    pub unread: u32,
    /// This end (as fused writer) is stopped by the unread-writes limit
    /// (`tcp_fusion_rcv_unread_min`); a read by the peer resumes it.
    pub flowctl_rrw: bool,
    /// This end (as fused writer) is stopped by the peer's full receive buffer; it
    /// resumes when the reader has drained to the low-water mark (the core's WRITABLE).
    pub flowctl_full: bool,
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

impl Conn {
    fn new(
        tcb: Tcb,
        shared: Arc<ConnShared>,
        listener: Option<Arc<ListenerShared>>,
        local: bool,
    ) -> Conn {
        Conn {
            tcb,
            shared,
            listener,
            queued_in: None,
            released: false,
            timer: None,
            local,
            peer: None,
            unread: 0,
            flowctl_rrw: false,
            flowctl_full: false,
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

impl Conn {
    /// Forgets its fused peer and the fused flow control that stopped it.
    fn leave_fusion(&mut self) {
        self.peer = None;
        self.flowctl_rrw = false;
        self.flowctl_full = false;
    }
}

/// A TCP segment in flight inside the stack (loopback) or from a device.
pub(crate) struct Seg {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    /// TCP header and payload.
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

impl Seg {
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

/// Fusion and squeue-level TCP counters of one squeue.
#[derive(Debug, Default, Clone, Copy)]
pub struct PerimStats {
    pub fusion_flowctl: u64,
    pub fusion_backenabled: u64,
    pub fusion_urg: u64,
    pub fusion_putnext: u64,
    pub fusion_unfusable: u64,
    pub fusion_aborted: u64,
    pub fusion_unqualified: u64,
    pub fusion_fused_total: u64,
    pub fusion_fused_now: u64,
    pub fusion_bytes: u64,
    pub fusion_rrw_stops: u64,
    pub active_opens: u64,
    pub lo_segs: u64,
    /// Loopback datagrams through IP (counted into ipOutRequests / ipInReceives /
    /// ipInDelivers: the loopback path has no IP header, but it is IP traffic).
    pub ip_lo_out: u64,
    pub ip_lo_in: u64,
    pub lo_requeued: u64,
    pub cross_sq: u64,
    pub filtered: u64,
}

/// What the TCP endpoint reads of the stack, for a segment one squeue received.
struct SquContext<'a> {
    st: &'a StackInner,
}

impl Context for SquContext<'_> {
    type Listener = Arc<ListenerShared>;

    fn listener(&self, local: SocketAddrV4) -> Option<(Arc<ListenerShared>, ListenerView)> {
        let l = self.st.classifier.listener(local)?;
        let cookie_at = l.cookie_at.load(Ordering::Relaxed);
        let view = ListenerView {
            backlog: l.backlog.load(Ordering::Relaxed),
            accept_queued: l.accept_q.lock().len() as u32,
            syn_queued: l.syn_q.load(Ordering::Relaxed),
            cookie_at: cookie_at.checked_sub(1).map(Instant::from_millis),
            user_mss: l.user_mss(),
            // Being closed, or the whole stack is (`Stack::shutdown`).
            closed: l.closed.load(Ordering::SeqCst) || self.st.closing.load(Ordering::SeqCst),
        };
        Some((l, view))
    }

    fn route(&self, remote: Ipv4Addr) -> Option<Route> {
        // Large segments for a device (loopback segments are 64 KiB already).
        self.st
            .source_for(remote)
            .map(|(_, mtu, local)| Route { mtu, lso: !local })
    }

    fn is_local(&self, remote: Ipv4Addr) -> bool {
        self.st.is_local_addr(remote)
    }

    fn conn_room(&self) -> bool {
        self.st.conn_room()
    }

    fn mem_full(&self) -> bool {
        self.st.tcp_mem_full()
    }

    fn rst_allowed(&mut self, now: Instant) -> bool {
        self.st.rst_allowed(now)
    }

    fn isn(&self) -> &IsnGenerator {
        &self.st.isn
    }

    fn settings(&self) -> TcpSettings {
        self.st.tcp_settings()
    }

    fn syncookies(&self) -> u32 {
        self.st.params().tcp_syncookies
    }

    fn syn_queue_max(&self) -> u32 {
        self.st.params().tcp_conn_req_max_q0
    }
}

pub(crate) struct Perim {
    pub id: usize,
    pub st: Weak<StackInner>,
    pub conns: Slab<Conn>,
    pub wheel: TimerWheel<Key>,
    fired: Vec<Key>,
    lo: VecDeque<Seg>,
    pub stats: PerimStats,
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
    pub inbound: super::Inbound,
    /// Squeue 0 runs the IP layer's own timers (ARP, reassembly): this is the IP
    /// layer's next deadline (ns, `u64::MAX` for none), shared with the stack so that
    /// reading it never touches the stack's reference count.
    pub host_deadline: Option<Arc<std::sync::atomic::AtomicU64>>,
    /// An in-process probe subscriber listens (set by `Stack::subscribe`): the squeue
    /// probes, which fire with no stack reference at hand, read this.
    pub probing: bool,
}

impl Perim {
    pub fn new(id: usize, st: Weak<StackInner>, start: Instant) -> Self {
        Perim {
            id,
            st,
            conns: Slab::default(),
            wheel: TimerWheel::new(start, core::time::Duration::from_millis(1), 1024),
            fired: Vec::new(),
            lo: VecDeque::new(),
            stats: PerimStats::default(),
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
            inbound: super::Inbound::default(),
            host_deadline: None,
            probing: false,
        }
    }

    fn stack(&self) -> Option<Arc<StackInner>> {
        self.st.upgrade()
    }

    /// Fires a squeue probe (someone listens: out of line).
    #[cold]
    #[inline(never)]
    fn fire_sq(&self, p: Probe, sq: usize, len: usize, arg: u64) {
        let any = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0);
        let ev = ProbeEvent::new(p, sq, any, any, len, arg);
        match self.stack() {
            Some(st) => st.fire(&ev),
            None => probes::fire(&ev),
        }
    }

    // ---------------------------------------------------------------------------------
    // Input.
    // ---------------------------------------------------------------------------------

    /// A segment for this stack, classified here (this squeue received it). The
    /// endpoint decides what becomes of it ([`Endpoint::handle_segment`]); this carries
    /// that out.
    pub fn input(&mut self, st: &StackInner, now: Instant, seg: Seg) {
        self.input_at(st, now, seg, None);
    }

    /// [`Perim::input`] for a segment the caller has classified already (the device
    /// path): `key` is the connection the classifier found on this squeue, if any.
    pub fn input_classified(&mut self, st: &StackInner, now: Instant, seg: Seg, key: Option<Key>) {
        self.input_at(st, now, seg, Some(key));
    }

    /// `classified`: the classifier's answer, when the caller looked it up.
    fn input_at(
        &mut self,
        st: &StackInner,
        now: Instant,
        seg: Seg,
        classified: Option<Option<Key>>,
    ) {
        if seg.lo {
            self.stats.ip_lo_in += 1;
        }
        let Ok((repr, payload)) = TcpRepr::parse(&seg.bytes, seg.src, seg.dst, !seg.csum_ok) else {
            self.endpoint.stats.in_segs += 1;
            self.endpoint.stats.in_errs += 1;
            return;
        };
        let local = SocketAddrV4::new(seg.dst, repr.dst_port);
        let remote = SocketAddrV4::new(seg.src, repr.src_port);
        if st.filtered(ip_proto::TCP, remote, local) {
            self.stats.filtered += 1;
            return;
        }
        st.probe(self.id, Probe::IpReceive, local, remote, seg.bytes.len());
        let key = match classified {
            Some(key) => key,
            None => match st.classifier.lookup(&(local, remote)) {
                Some(loc) if loc.sq != self.id => {
                    // Another squeue's connection (a device queue fans out by flow hash).
                    self.stats.cross_sq += 1;
                    st.to_squeue(loc.sq, loc.key.as_u64(), seg);
                    return;
                }
                found => found.map(|loc| loc.key),
            },
        };
        let arrival = Arrival {
            local,
            remote,
            seg: &repr,
            payload,
            wire_segs: seg.segs,
        };
        let found = key.and_then(|k| self.conns.get(k)).map(|c| &c.tcb);
        let verdict = self
            .endpoint
            .handle_segment(&mut SquContext { st }, now, found, &arrival);
        if verdict.retire_found {
            if let Some(k) = key {
                self.remove(st, k);
            }
        }
        if verdict.closed_port && repr.flags.syn() && !repr.flags.ack() {
            st.probe(self.id, Probe::AcceptRefused, local, remote, 0);
        }
        match verdict.action {
            Action::Deliver { strip_data } => {
                if let Some(k) = key {
                    let pieces = (seg.segs, seg.gso_size);
                    self.deliver(st, now, k, &arrival, pieces, strip_data);
                }
            }
            Action::Accept {
                listener,
                conn,
                cookie,
            } => {
                let Some(k) = self.add_passive(st, &listener, conn.into_tcb()) else {
                    return;
                };
                if cookie {
                    // The rebuilt connection has taken the ACK that returned the cookie.
                    self.endpoint.stats.syncookies_recv += 1;
                    st.probe(self.id, Probe::TcpReceive, local, remote, payload.len());
                }
                self.flush(st, now, k);
            }
            Action::Reply { repr, cookie_for } => {
                if let Some(l) = cookie_for {
                    l.cookie_at.store(now.as_millis() + 1, Ordering::Relaxed);
                }
                self.send_bare(st, now, local, remote, &repr);
            }
            Action::Drop => {}
        }
    }

    /// Gives a segment to its connection, which flushes now or at the end of the device
    /// batch. `strip_data`: only its header (`tcp_mem_max`, see
    /// [`endpoint::strip_data`]).
    fn deliver(
        &mut self,
        st: &StackInner,
        now: Instant,
        key: Key,
        a: &Arrival<'_>,
        (segs, gso_size): (u16, u16),
        strip_data: bool,
    ) {
        if self.conns.get(key).is_some_and(|c| c.peer.is_some()) {
            // A real segment for a fused connection: unfuse both ends first.
            self.stats.fusion_aborted += 1;
            self.unfuse(st, now, key);
        }
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        if strip_data {
            st.probe(self.id, Probe::TcpReceive, a.local, a.remote, 0);
            c.tcb.on_segment(now, &endpoint::strip_data(a.seg), &[]);
        } else {
            st.probe(
                self.id,
                Probe::TcpReceive,
                a.local,
                a.remote,
                a.payload.len(),
            );
            if segs > 1 {
                // Segments coalesced on receive (GRO), or a large loopback segment: the
                // ACK and counters are those of the pieces.
                c.tcb.on_segment_gro(now, a.seg, a.payload, segs, gso_size);
            } else {
                c.tcb.on_segment(now, a.seg, a.payload);
            }
        }
        if self.batching {
            if !strip_data && !a.payload.is_empty() {
                // Charged at once, not when the batch ends (`flush` → `after` charges
                // otherwise): `tcp_mem_max` is then overshot by at most one segment per
                // squeue.
                self.recharge(st, key);
            }
            // A device batch is being taken in: the connection sends once all of the
            // batch's segments for it are in (a run of ACKs opens the window once, and
            // the data that follows goes as one large segment, not one per ACK).
            if !self.touched.contains(&key) {
                self.touched.push(key);
            }
            return;
        }
        self.flush(st, now, key);
    }

    /// Starts taking in one device batch: connections flush at `end_batch`.
    pub fn begin_batch(&mut self) {
        self.batching = true;
    }

    /// Ends a device batch: every connection it touched sends what it has.
    pub fn end_batch(&mut self, st: &StackInner, now: Instant) {
        self.batching = false;
        let keys = std::mem::take(&mut self.touched);
        for &k in &keys {
            self.flush(st, now, k);
        }
        let mut keys = keys;
        keys.clear();
        if self.touched.is_empty() {
            self.touched = keys;
        }
    }

    /// Sends a segment that belongs to no connection (a RST, a cookie SYN,ACK).
    fn send_bare(
        &mut self,
        st: &StackInner,
        now: Instant,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        r: &TcpRepr,
    ) {
        let mut bytes = vec![0u8; r.header_len()];
        r.emit_header(&mut bytes);
        self.output(st, now, None, local, remote, 0, bytes, false, Tx::default());
    }

    /// A passive connection in SYN-RECEIVED joins this squeue, the classifier and its
    /// listener's SYN queue; `None` (dropped and counted) when the stack holds
    /// `tcp_max_conns`.
    fn add_passive(&mut self, st: &StackInner, l: &Arc<ListenerShared>, tcb: Tcb) -> Option<Key> {
        if !st.take_conn_slot() {
            self.endpoint.stats.conn_limit_drops += 1;
            return None;
        }
        let (local, remote) = (tcb.local(), tcb.remote());
        let is_local = st.is_local_addr(*remote.ip());
        let key = self.conns.next_key();
        let shared = ConnShared::new(self.id, key, local, remote);
        let k = self
            .conns
            .insert(Conn::new(tcb, shared, Some(l.clone()), is_local));
        debug_assert_eq!(k, key);
        if !st
            .classifier
            .insert((local, remote), ConnLoc { sq: self.id, key })
        {
            st.classifier
                .replace((local, remote), ConnLoc { sq: self.id, key });
        }
        l.syn_q.fetch_add(1, Ordering::Relaxed);
        self.endpoint.stats.passive_opens += 1;
        st.probe(self.id, Probe::AcceptEstablishedPending, local, remote, 0);
        Some(key)
    }

    // ---------------------------------------------------------------------------------
    // Output.
    // ---------------------------------------------------------------------------------

    /// Sends what connection `key` has to send, then runs [`Perim::after`].
    pub fn flush(&mut self, st: &StackInner, now: Instant, key: Key) {
        self.sync_tx(st);
        loop {
            let Some(c) = self.conns.get_mut(key) else {
                return;
            };
            if c.tcb.take_negative_advice() {
                c.hop = None;
                st.forget_next_hop(*c.tcb.remote().ip());
            }
            let local = c.tcb.local();
            let remote = c.tcb.remote();
            let tos = c.tcb.tos();
            let hop = c.hop;
            // TCP Small Queues: while this connection's frames wait in a fair queue, TCP
            // adds new data only up to the limit (`txq.rs`).
            let quota = if c.tsq_bytes > 0 {
                self.tx
                    .tsq_limit(c.last_seg, c.tsq_rate)
                    .map(|l| l.saturating_sub(c.tsq_bytes))
            } else {
                None
            };
            c.tcb.set_tx_quota(quota);
            let pace = if self.tx.cfg.pacing {
                c.tcb.pacing_rate()
            } else {
                None
            };
            let Some(out) = c.tcb.poll_transmit(now) else {
                break;
            };
            let hl = out.repr.header_len();
            let n = out.payload_len();
            let gso = out.gso_size;
            // A segment for a device is built where the frame will carry it, behind room
            // for the Ethernet and IP headers: one buffer and one payload copy per
            // segment (a loopback segment carries no headers).
            let framed = !st.is_local_addr(*remote.ip());
            let front = if framed { FRAME_FRONT } else { 0 };
            let mut bytes = vec![0u8; front + hl + n];
            out.repr.emit_header(&mut bytes[front..front + hl]);
            out.copy_payload(&mut bytes[front + hl..]);
            st.probe(self.id, Probe::TcpSend, local, remote, n);
            let tx = Tx {
                owner: owner_tag(key),
                gso,
                pace,
            };
            if n > 0 {
                if let Some(c) = self.conns.get_mut(key) {
                    c.last_seg = n as u32;
                }
            }
            let learned = self.output(st, now, hop, local, remote, tos, bytes, framed, tx);
            if let (Some(h), Some(c)) = (learned, self.conns.get_mut(key)) {
                c.hop = Some(h);
            }
        }
        // What this flush sent to devices without a queue of their own leaves now, as one
        // batch per device (its GSO pieces, its ACKs).
        self.tx.flush_batches();
        if let Some(c) = self.conns.get_mut(key) {
            if c.tcb.take_tx_quota_blocked() {
                self.tx.stats.tsq_throttles += 1;
                c.tsq_throttled = true;
                if c.tsq_bytes == 0 {
                    // Its credit came back within this flush: go round again.
                    c.tsq_throttled = false;
                    self.tsq_ready.push(key);
                }
            }
        }
        self.after(st, now, key);
        self.run_tsq_ready(st, now);
    }

    /// Flushes the connections whose TCP Small Queues credit has returned.
    fn run_tsq_ready(&mut self, st: &StackInner, now: Instant) {
        if self.tsq_running {
            return;
        }
        self.tsq_running = true;
        // Bounded: a connection is queued here once per return of credit, and credit
        // returns only as its frames leave a fair queue.
        let mut rounds = 0;
        while !self.tsq_ready.is_empty() && rounds < 64 {
            rounds += 1;
            let keys = std::mem::take(&mut self.tsq_ready);
            for k in keys {
                self.flush(st, now, k);
            }
        }
        self.tsq_running = false;
    }

    /// Applies the stack's transmit settings if they changed since this squeue last looked.
    fn sync_tx(&mut self, st: &StackInner) {
        let g = st.tx_gen.load(Ordering::Relaxed);
        if g != self.tx_gen {
            self.tx_gen = g;
            self.tx.set_config(st.tx_config());
        }
    }

    /// A device queue's fair queue took (`delta` > 0) or released (< 0) bytes of
    /// connection `owner`: TCP Small Queues accounting.
    fn tsq_credit(conns: &mut Slab<Conn>, ready: &mut Vec<Key>, owner: u64, delta: isize) {
        let Some(key) = owner_key(owner) else {
            return;
        };
        let Some(c) = conns.get_mut(key) else {
            return;
        };
        if delta >= 0 {
            c.tsq_bytes = c.tsq_bytes.saturating_add(delta as u32);
            return;
        }
        c.tsq_bytes = c.tsq_bytes.saturating_sub(delta.unsigned_abs() as u32);
        if c.tsq_throttled && c.tsq_bytes == 0 {
            c.tsq_throttled = false;
            ready.push(key);
        }
    }

    /// Sends one TCP segment (header + payload, checksum not filled) from `local` to
    /// `remote`: loopback when the destination is ours, else IP to a device. `framed`:
    /// the segment sits behind [`FRAME_FRONT`] bytes of room for the headers (built for
    /// a device by a caller that checked the destination is not local). Returns the next
    /// hop learned, for the connection to cache.
    #[allow(clippy::too_many_arguments)]
    fn output(
        &mut self,
        st: &StackInner,
        now: Instant,
        hop: Option<(IfaceId, MacAddr)>,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        tos: u8,
        bytes: Vec<u8>,
        framed: bool,
        tx: Tx,
    ) -> Option<(IfaceId, MacAddr)> {
        let front = if framed { FRAME_FRONT } else { 0 };
        if st.filtered(ip_proto::TCP, local, remote) {
            self.stats.filtered += 1;
            return None;
        }
        st.probe(self.id, Probe::IpSend, local, remote, bytes.len() - front);
        // A framed segment was built for a device: its caller has found the destination
        // not local already.
        if !framed && st.is_local_addr(*remote.ip()) {
            self.stats.lo_segs += 1;
            self.stats.ip_lo_out += 1;
            let hl = bytes.get(12).map_or(0, |b| usize::from(b >> 4) * 4);
            let n = bytes.len().saturating_sub(hl);
            let segs = match tx.gso {
                0 => 1,
                g => n.div_ceil(usize::from(g)).clamp(1, usize::from(u16::MAX)) as u16,
            };
            let seg = Seg {
                src: *local.ip(),
                dst: *remote.ip(),
                bytes,
                csum_ok: true,
                lo: true,
                segs,
                gso_size: if segs > 1 { tx.gso } else { 0 },
            };
            // A segment for another squeue's connection goes there (with one squeue,
            // everything stays here and `input` classifies it).
            let elsewhere = if st.squeues.len() > 1 {
                let tuple: Tuple = (remote, local);
                st.classifier.lookup(&tuple).filter(|loc| loc.sq != self.id)
            } else {
                None
            };
            match elsewhere {
                Some(loc) => {
                    self.stats.cross_sq += 1;
                    st.to_squeue(loc.sq, loc.key.as_u64(), seg);
                }
                None => self.lo.push_back(seg),
            }
            return None;
        }
        // A datagram to a device: IP header, TCP checksum.
        let ident = st.next_ident();
        let ip = Ipv4Repr {
            src: *local.ip(),
            dst: *remote.ip(),
            protocol: ip_proto::TCP,
            ttl: st.hot.ip_def_ttl.load(Ordering::Relaxed) as u8,
            dscp_ecn: tos,
            ident,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
            payload_len: (bytes.len() - front) as u16,
        };
        let mut f = if framed {
            bytes
        } else {
            let mut f = vec![0u8; FRAME_FRONT + bytes.len()];
            f[FRAME_FRONT..].copy_from_slice(&bytes);
            f
        };
        ip.emit(&mut f[HEADROOM..HEADROOM + IPV4_HEADER_LEN]);
        if tx.gso == 0 {
            TcpRepr::fill_checksum(
                &mut f[HEADROOM + IPV4_HEADER_LEN..],
                *local.ip(),
                *remote.ip(),
            );
        }
        // A large segment's checksum is filled where it is cut: per piece by GSO, or by
        // the device that segments it (TSO), never over the whole 64 KiB first.
        if let Some((iface, mac)) = hop {
            if let Some((src, dev)) = st.device(iface, self.id) {
                let eth = EthernetRepr {
                    dst: mac,
                    src,
                    ethertype: ethertype::IPV4,
                };
                eth.emit(&mut f[..ETHERNET_HEADER_LEN]);
                let frame = TxFrame {
                    frame: f,
                    gso_size: tx.gso,
                    owner: tx.owner,
                    pace_bps: tx.pace,
                };
                let (conns, ready) = (&mut self.conns, &mut self.tsq_ready);
                let rate = self.tx.send(now, dev, frame, &mut |o, d| {
                    Self::tsq_credit(conns, ready, o, d)
                });
                if let (Some(r), Some(k)) = (rate, owner_key(tx.owner)) {
                    if let Some(c) = self.conns.get_mut(k) {
                        c.tsq_rate = r;
                    }
                }
                if !self.tx_dirty.iter().any(|d| Arc::ptr_eq(d, dev)) {
                    self.tx_dirty.push(dev.clone());
                }
                return None;
            }
        }
        // No next hop cached (the first segments, or after negative advice): the IP
        // layer resolves it, and cuts a large segment after ARP as it does its own.
        st.send_via_host(now, f, tx.gso);
        st.next_hop(now, *remote.ip())
    }

    /// Runs the loopback segments queued on this squeue (bounded; the rest is queued on
    /// the squeue itself).
    pub fn run_lo(&mut self, st: &StackInner, now: Instant) {
        let mut budget = LO_BUDGET;
        while let Some(seg) = self.lo.pop_front() {
            if budget == 0 {
                self.lo.push_front(seg);
                self.stats.lo_requeued += 1;
                let rest: Vec<Seg> = self.lo.drain(..).collect();
                st.requeue_lo(self.id, rest);
                return;
            }
            budget -= 1;
            self.input(st, now, seg);
        }
    }

    /// After a connection was touched: readiness, timer, accept queue, fusion, reaping.
    pub fn after(&mut self, st: &StackInner, now: Instant, key: Key) {
        self.recharge(st, key);
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        let ev = c.tcb.take_events();
        let closed = c.tcb.is_closed();
        let state = c.tcb.state();
        if state != c.last_state {
            // Rare (a few times per connection): the probe check is behind this branch.
            let old = std::mem::replace(&mut c.last_state, state);
            let (l, r) = (c.tcb.local(), c.tcb.remote());
            st.probe_arg(
                self.id,
                Probe::StateChange,
                l,
                r,
                state as usize,
                old as u64,
            );
            if state == State::Closed
                && old == State::SynSent
                && c.tcb.error() == Some(TcpError::Refused)
            {
                st.probe(self.id, Probe::ConnectRefused, l, r, 0);
            }
        }
        let deadline = if closed { None } else { c.tcb.poll_timeout() };
        self.wheel.update(&mut c.timer, key, deadline);
        if ev.contains(Events::CONNECTED) {
            let (l, r) = (c.tcb.local(), c.tcb.remote());
            let passive = c.tcb.is_passive();
            st.probe(
                self.id,
                if passive {
                    Probe::AcceptEstablished
                } else {
                    Probe::ConnectEstablished
                },
                l,
                r,
                0,
            );
        }
        if c.listener.is_some() {
            if ev.contains(Events::CONNECTED) && !closed {
                let l = c.listener.take().expect("checked");
                l.syn_q.fetch_sub(1, Ordering::Relaxed);
                if l.closed.load(Ordering::SeqCst) {
                    c.tcb.abort(now);
                    c.released = true;
                    self.flush(st, now, key);
                    return;
                }
                c.queued_in = Some(Arc::downgrade(&l));
                let shared = c.shared.clone();
                self.publish(key);
                self.try_fuse(st, now, key);
                {
                    let mut q = l.accept_q.lock();
                    q.push_back(shared);
                    l.update_ready(q.len());
                }
                return;
            }
            if closed {
                let l = c.listener.take().expect("checked");
                l.syn_q.fetch_sub(1, Ordering::Relaxed);
                c.released = true;
                self.remove(st, key);
                return;
            }
        }
        if closed && c.released {
            self.remove(st, key);
            return;
        }
        if closed {
            // CLOSED but still held by the application: it no longer owns its 4-tuple (a
            // new connection may reuse it), as Linux unhashes a closed socket.
            let t = (c.tcb.local(), c.tcb.remote());
            st.classifier.remove(&t, ConnLoc { sq: self.id, key });
        }
        self.publish(key);
    }

    /// Brings the stack's `tcp_mem_used` up to date with what connection `key` holds in
    /// its receive queue: data the network delivered in order that the application has
    /// not read, which reading frees. Send queues and fused pairs' queues are filled by
    /// this process's own applications, and out-of-order queues by peers that may never
    /// fill the hole; all three are bounded per connection (buffer sizes,
    /// `tcp_reass_max_segs`). Counting them would let a local writer to peers that never
    /// open their windows, or peers that never fill their holes, pin the bound and starve
    /// every connection's receive side. Runs in `after` (every input and output), after
    /// each data segment, after reads and after fusing; the atomic is touched only on a
    /// change.
    pub(crate) fn recharge(&mut self, st: &StackInner, key: Key) {
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        let held = if c.peer.is_some() {
            0
        } else {
            c.tcb.rcv_queued_bytes()
        };
        if held != c.charged {
            let delta = held as i64 - c.charged as i64;
            st.tcp_mem_used.fetch_add(delta as u64, Ordering::Relaxed);
            c.charged = held;
        }
    }

    /// Publishes a connection's readiness (and its fused peer's) to application threads.
    pub fn publish(&mut self, key: Key) {
        let Some(c) = self.conns.get(key) else {
            return;
        };
        let bits = self.readiness(c);
        c.shared
            .rx_avail
            .store(c.tcb.recv_available() as u64, Ordering::Relaxed);
        // Woken when this thread leaves the squeue, so that the woken thread finds it
        // free (see `squeue::defer`).
        if c.shared.w.set_deferred(bits) {
            crate::squeue::defer(c.shared.clone());
        }
    }

    fn readiness(&self, c: &Conn) -> u32 {
        let t = &c.tcb;
        let mut b = 0;
        let st = t.state();
        let err = t.error().is_some_and(|e| e != TcpError::WouldBlock);
        if t.recv_available() > 0 || t.at_eof() || err || st == State::Closed {
            b |= ready::READ;
        }
        if t.at_eof()
            || matches!(
                st,
                State::CloseWait | State::LastAck | State::Closing | State::TimeWait
            )
        {
            b |= ready::RDHUP;
        }
        if st.is_synchronized() || st == State::Closed {
            b |= ready::CONNECTED;
        }
        if err {
            b |= ready::ERROR;
        }
        if st == State::Closed {
            b |= ready::HUP;
        }
        if t.urgent_mark().is_some() {
            b |= ready::URGENT;
        }
        if c.shared.rd_shut.load(Ordering::SeqCst) {
            // shutdown(SHUT_RD): reads return end of file at once.
            b |= ready::READ;
        }
        let writable = match c.peer.and_then(|p| self.conns.get(p)) {
            Some(p) => !c.flowctl_rrw && !c.flowctl_full && p.tcb.fused_recv_space() > 0,
            None => {
                (t.send_space() >= t.send_lowat() || (t.send_queued() == 0 && t.send_space() > 0))
                    && matches!(st, State::Established | State::CloseWait)
            }
        };
        // Once the sending side is shut (FIN queued or sent, or closed), a write fails at
        // once (EPIPE): report it writable, as Linux's poll does, so a parked writer wakes.
        let send_shut = matches!(
            st,
            State::FinWait1
                | State::FinWait2
                | State::Closing
                | State::LastAck
                | State::TimeWait
                | State::Closed
        );
        if writable || err || send_shut {
            b |= ready::WRITE;
        }
        b
    }

    fn remove(&mut self, st: &StackInner, key: Key) {
        if let Some(peer) = self.conns.get(key).and_then(|c| c.peer) {
            // Not reached today (every closing path unfuses first), but a fused peer left
            // behind must go on as TCP: readiness published, timers armed.
            let now = crate::clock::now();
            self.unfuse_keys(st, now, key, peer);
            self.after(st, now, peer);
        }
        if let Some(mut c) = self.conns.remove(key) {
            st.give_conn_slot();
            if c.charged > 0 {
                st.tcp_mem_used
                    .fetch_sub(c.charged as u64, Ordering::Relaxed);
            }
            self.wheel.update(&mut c.timer, key, None);
            st.classifier.remove(
                &(c.tcb.local(), c.tcb.remote()),
                ConnLoc { sq: self.id, key },
            );
            self.gone.accumulate(c.tcb.stats());
            c.shared.w.set(ready::READ | ready::WRITE | ready::HUP);
        }
    }

    // ---------------------------------------------------------------------------------
    // Fusion.
    // ---------------------------------------------------------------------------------

    /// Admission (passive end, on SYN-RECEIVED → ESTABLISHED): the peer is the reverse
    /// 4-tuple, ESTABLISHED, on this squeue, both local, neither unfusable, and the
    /// peer's send queue empty.
    fn try_fuse(&mut self, st: &StackInner, now: Instant, key: Key) {
        let Some(c) = self.conns.get(key) else {
            return;
        };
        if !c.local || !st.hot.do_tcp_fusion.load(Ordering::Relaxed) {
            return;
        }
        let (l, r) = (c.tcb.local(), c.tcb.remote());
        let Some(loc) = st.classifier.lookup(&(r, l)) else {
            return;
        };
        if loc.sq != self.id {
            self.stats.fusion_unqualified += 1;
            return;
        }
        let Some((a, b)) = self.conns.get2_mut(key, loc.key) else {
            self.stats.fusion_unqualified += 1;
            return;
        };
        if !b.local {
            self.stats.fusion_unqualified += 1;
            return;
        }
        match Tcb::fuse_pair(now, &mut a.tcb, &mut b.tcb) {
            Ok(()) => {
                a.peer = Some(loc.key);
                b.peer = Some(key);
                a.unread = 0;
                b.unread = 0;
                self.wheel.update(&mut a.timer, key, None);
                self.wheel.update(&mut b.timer, loc.key, None);
                self.stats.fusion_fused_total += 1;
                self.stats.fusion_fused_now += 1;
                st.probe(self.id, Probe::Fuse, l, r, 0);
                // Fused pairs' queues are not charged to `tcp_mem_max`.
                self.recharge(st, key);
                self.recharge(st, loc.key);
            }
            Err(ember_core::tcp::FuseRefusal::SimultaneousOpen)
            | Err(ember_core::tcp::FuseRefusal::Unfusable) => {
                a.tcb.set_unfusable();
                b.tcb.set_unfusable();
                self.stats.fusion_unfusable += 1;
            }
            Err(_) => self.stats.fusion_unqualified += 1,
        }
    }

    /// Unfuses `key` and its peer (both, permanently). Nothing is lost: what was moved
    /// into a receive buffer stays there; both continue as ordinary TCP.
    pub fn unfuse(&mut self, st: &StackInner, now: Instant, key: Key) {
        if let Some(peer) = self.conns.get(key).and_then(|c| c.peer) {
            self.unfuse_keys(st, now, key, peer);
            self.after(st, now, peer);
        }
    }

    fn unfuse_keys(&mut self, st: &StackInner, now: Instant, key: Key, peer: Key) {
        let Some((a, b)) = self.conns.get2_mut(key, peer) else {
            if let Some(a) = self.conns.get_mut(key) {
                a.peer = None;
            }
            return;
        };
        Tcb::unfuse_pair(now, &mut a.tcb, &mut b.tcb);
        a.leave_fusion();
        b.leave_fusion();
        self.stats.fusion_fused_now = self.stats.fusion_fused_now.saturating_sub(1);
        st.probe(self.id, Probe::Unfuse, a.tcb.local(), a.tcb.remote(), 0);
    }

    // ---------------------------------------------------------------------------------
    // Application calls (run inside the squeue).
    // ---------------------------------------------------------------------------------

    /// write(): fused or ordinary. `WouldBlock` when the writer must wait.
    pub fn send(
        &mut self,
        st: &StackInner,
        now: Instant,
        key: Key,
        data: &[u8],
        oob: bool,
    ) -> io::Result<usize> {
        let Some(c) = self.conns.get(key) else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        if let Some(peer) = c.peer {
            if oob {
                // Urgent data is not carried fused: unfuse, then send it as TCP.
                self.stats.fusion_urg += 1;
                self.unfuse(st, now, key);
            } else {
                return self.fused_send(st, now, key, peer, data);
            }
        }
        let c = self.conns.get_mut(key).expect("checked");
        let r = if oob {
            c.tcb.send_urgent(now, data)
        } else {
            c.tcb.send(now, data)
        };
        // A connection error is reported once, by whichever call comes first (Linux
        // sock_error clears sk_err); after that, writes fail with EPIPE.
        let r = match r {
            Err(e) if e != TcpError::WouldBlock && c.tcb.error() == Some(e) => {
                let _ = c.tcb.take_error();
                c.err_reported = true;
                Err(e)
            }
            Err(TcpError::NotConnected) if c.err_reported => Err(TcpError::BrokenPipe),
            r => r,
        };
        self.flush(st, now, key);
        self.run_lo(st, now);
        r.map_err(Into::into)
    }

    fn fused_send(
        &mut self,
        st: &StackInner,
        now: Instant,
        key: Key,
        peer: Key,
        data: &[u8],
    ) -> io::Result<usize> {
        let limit = st.hot.tcp_fusion_rcv_unread_min.load(Ordering::Relaxed);
        let Some((w, r)) = self.conns.get2_mut(key, peer) else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        if data.is_empty() {
            return Ok(0);
        }
        if limit > 0 && r.unread >= limit {
            // The reader has not read the last `limit` writes: stop the writer so that it
            // cannot starve a slower reader sharing its CPU (Solaris 10).
            if !w.flowctl_rrw {
                w.flowctl_rrw = true;
                self.stats.fusion_flowctl += 1;
                self.stats.fusion_rrw_stops += 1;
                st.probe(self.id, Probe::FlowCtl, w.tcb.local(), w.tcb.remote(), 1);
            }
            self.publish(key);
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let res = w.tcb.fused_send(now, &mut r.tcb, data);
        if let Ok(n) = res {
            r.unread = r.unread.saturating_add(1);
            self.stats.fusion_putnext += 1;
            self.stats.fusion_bytes += n as u64;
            st.probe(self.id, Probe::TcpSend, w.tcb.local(), w.tcb.remote(), n);
            st.probe(self.id, Probe::TcpReceive, r.tcb.local(), r.tcb.remote(), n);
            let _ = r.tcb.take_events();
        }
        // The reader's buffer took less than offered, or nothing: the writer is stopped
        // until the reader drains to the low-water mark.
        let full = match res {
            Ok(n) => n < data.len(),
            Err(e) => e == TcpError::WouldBlock,
        };
        if full && !w.flowctl_full {
            w.flowctl_full = true;
            self.stats.fusion_flowctl += 1;
            st.probe(self.id, Probe::FlowCtl, w.tcb.local(), w.tcb.remote(), 0);
        }
        match res {
            Ok(n) => {
                self.publish(peer);
                self.publish(key);
                Ok(n)
            }
            Err(TcpError::WouldBlock) => {
                self.publish(key);
                Err(io::ErrorKind::WouldBlock.into())
            }
            Err(e) => {
                self.flush(st, now, key);
                Err(e.into())
            }
        }
    }

    /// A fused reader's receive space changed (it read, or its buffer size changed): the
    /// writer's window follows it. A read (`read`) resumes a writer stopped by the
    /// unread-writes limit; a writer stopped by a full buffer resumes only at the
    /// low-water mark, which the core signals as WRITABLE. Publishes the writer.
    fn reader_space_changed(&mut self, reader: Key, writer: Key, read: bool) {
        if let Some((rd, wr)) = self.conns.get2_mut(reader, writer) {
            rd.tcb.fused_sync_window(&mut wr.tcb);
            let ev = wr.tcb.take_events();
            let was_stopped = wr.flowctl_rrw || wr.flowctl_full;
            if read {
                wr.flowctl_rrw = false;
            }
            if wr.flowctl_full && ev.contains(Events::WRITABLE) {
                wr.flowctl_full = false;
            }
            if was_stopped && !wr.flowctl_rrw && !wr.flowctl_full {
                self.stats.fusion_backenabled += 1;
            }
        }
        self.publish(writer);
    }

    /// read() / peek().
    pub fn recv(
        &mut self,
        st: &StackInner,
        now: Instant,
        key: Key,
        buf: &mut [u8],
        peek: bool,
    ) -> io::Result<usize> {
        let Some(c) = self.conns.get_mut(key) else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        // A read stops at the urgent mark (as Linux's does), so the application can tell
        // with `at_mark` (SIOCATMARK) where the urgent data ends (RFC 6093: inline).
        let lim = match c.tcb.urgent_mark() {
            Some(m) if m > 0 => buf.len().min(m),
            _ => buf.len(),
        };
        let buf = &mut buf[..lim];
        let r = if peek {
            c.tcb.peek(buf)
        } else {
            c.tcb.recv(now, buf)
        };
        // A connection error is reported once (ECONNRESET...), then reads see end of
        // file, as on Linux; a never-connected socket keeps saying NotConnected.
        let r = match r {
            Err(e) if e != TcpError::WouldBlock && c.tcb.error() == Some(e) => {
                let _ = c.tcb.take_error();
                c.err_reported = true;
                Err(e)
            }
            Err(TcpError::NotConnected) if c.err_reported => Ok(0),
            r => r,
        };
        if !peek {
            if let (Ok(n), Some(peer)) = (&r, c.peer) {
                if *n > 0 {
                    c.unread = 0;
                    self.reader_space_changed(key, peer, true);
                    self.publish(key);
                    return r.map_err(Into::into);
                }
            }
        }
        self.flush(st, now, key);
        self.run_lo(st, now);
        r.map_err(Into::into)
    }

    /// SO_ERROR: the pending connection error, cleared (then reads see end of file and
    /// writes EPIPE, as after any call that reported it).
    pub fn take_error(&mut self, key: Key) -> io::Result<Option<TcpError>> {
        let c = self
            .conns
            .get_mut(key)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))?;
        let e = c.tcb.take_error();
        c.err_reported |= e.is_some();
        Ok(e)
    }

    /// shutdown(SHUT_WR): unfuses first (a FIN is a real segment).
    pub fn shutdown_write(&mut self, st: &StackInner, now: Instant, key: Key) -> io::Result<()> {
        self.unfuse(st, now, key);
        let Some(c) = self.conns.get_mut(key) else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        let r = c.tcb.shutdown_write(now);
        self.flush(st, now, key);
        self.run_lo(st, now);
        r.map_err(Into::into)
    }

    /// close(): linger 0 resets; otherwise the connection finishes on its own (a
    /// close with unread data resets, as the core decides).
    pub fn close(&mut self, st: &StackInner, now: Instant, key: Key, abort: bool) {
        self.unfuse(st, now, key);
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        c.released = true;
        c.queued_in = None;
        if abort {
            c.tcb.abort(now);
        } else {
            c.tcb.close(now);
        }
        self.flush(st, now, key);
        self.run_lo(st, now);
    }

    /// Runs `f` on a connection's Tcb (socket options) and sends what that caused. On a
    /// fused connection the peer's send window then follows this end's receive space
    /// (a larger SO_RCVBUF lets a writer stopped on a full buffer go on).
    pub fn with_tcb<R>(
        &mut self,
        st: &StackInner,
        now: Instant,
        key: Key,
        f: impl FnOnce(&mut Tcb) -> R,
    ) -> io::Result<R> {
        let c = self
            .conns
            .get_mut(key)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))?;
        let r = f(&mut c.tcb);
        if let Some(peer) = c.peer {
            self.reader_space_changed(key, peer, false);
        }
        self.flush(st, now, key);
        self.run_lo(st, now);
        Ok(r)
    }

    /// The `tcp_info`-like snapshot of a connection.
    pub fn info(&self, key: Key) -> Option<(TcbInfo, bool)> {
        self.conns
            .get(key)
            .map(|c| (c.tcb.info(), c.peer.is_some()))
    }

    /// connect(): creates the connection on this squeue and sends the SYN.
    pub fn connect(
        &mut self,
        st: &StackInner,
        now: Instant,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        mtu: u32,
        is_local: bool,
    ) -> io::Result<Arc<ConnShared>> {
        let spec = ConnSpec {
            local,
            remote,
            iss: st.isn.isn(now, local, remote),
            ts_offset: st.isn.ts_offset(local, remote),
            mtu,
        };
        if st.closing.load(Ordering::SeqCst) {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the stack was shut down",
            ));
        }
        let set = st.tcp_settings();
        let lso = set.lso_max;
        let mut tcb = Tcb::connect(now, spec, set);
        if !is_local {
            tcb.set_lso_max(lso);
        }
        let key = self.conns.next_key();
        if !st.take_conn_slot() {
            // `tcp_max_conns`: as Linux when it cannot allocate a socket's memory.
            self.endpoint.stats.conn_limit_drops += 1;
            return Err(io::Error::from_raw_os_error(libc::ENOBUFS));
        }
        if !st
            .classifier
            .insert((local, remote), ConnLoc { sq: self.id, key })
        {
            st.give_conn_slot();
            return Err(io::ErrorKind::AddrInUse.into());
        }
        let shared = ConnShared::new(self.id, key, local, remote);
        let k = self
            .conns
            .insert(Conn::new(tcb, shared.clone(), None, is_local));
        debug_assert_eq!(k, key);
        self.stats.active_opens += 1;
        st.probe(self.id, Probe::ConnectRequest, local, remote, 0);
        self.flush(st, now, key);
        self.run_lo(st, now);
        Ok(shared)
    }

    /// An ICMP error quoting one of our segments (RFC 5927 §4.1 validation).
    pub fn icmp_error(&mut self, st: &StackInner, now: Instant, key: Key, err: TcpIcmpError) {
        let TcpIcmpError { seq, code, mtu, .. } = err;
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        if !c.tcb.icmp_quote_valid(seq) {
            return;
        }
        if code == ember_core::wire::icmp_unreach::FRAG_NEEDED {
            if mtu >= 68 {
                c.tcb.on_path_mtu(now, u32::from(mtu));
            }
        } else {
            c.tcb.on_unreachable(now, code);
        }
        self.flush(st, now, key);
    }

    /// Every connection's snapshot (netstat).
    pub fn netstat(&self) -> Vec<(TcbInfo, usize, bool)> {
        self.conns
            .iter()
            .map(|(_, c)| (c.tcb.info(), self.id, c.peer.is_some()))
            .collect()
    }

    /// TCP counters: finished connections plus live ones.
    pub fn tcb_stats(&self) -> (TcbStats, u64) {
        let mut s = self.gone;
        let mut estab = 0;
        for (_, c) in self.conns.iter() {
            s.accumulate(c.tcb.stats());
            if matches!(c.tcb.state(), State::Established | State::CloseWait) {
                estab += 1;
            }
        }
        (s, estab)
    }

    /// Resets every connection (stack shutdown).
    pub fn abort_all(&mut self, st: &StackInner, now: Instant) {
        let keys: Vec<Key> = self.conns.iter().map(|(k, _)| k).collect();
        for k in keys {
            self.unfuse(st, now, k);
            if let Some(c) = self.conns.get_mut(k) {
                c.released = true;
                c.tcb.abort(now);
            }
            self.flush(st, now, k);
        }
        self.run_lo(st, now);
        let keys: Vec<Key> = self.conns.iter().map(|(k, _)| k).collect();
        for k in keys {
            self.remove(st, k);
        }
        self.lo.clear();
    }

    /// Called when a listener closes: resets the connections of its queues that live here.
    pub fn listener_closed(&mut self, st: &StackInner, now: Instant, l: &Arc<ListenerShared>) {
        let keys: Vec<Key> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                c.listener.as_ref().is_some_and(|x| Arc::ptr_eq(x, l))
                    || c.queued_in
                        .as_ref()
                        .and_then(Weak::upgrade)
                        .is_some_and(|x| Arc::ptr_eq(&x, l))
            })
            .map(|(k, _)| k)
            .collect();
        for k in keys {
            self.close(st, now, k, true);
        }
    }

    /// The handle of an accepted connection: it is the application's now.
    pub fn accepted(&mut self, key: Key) {
        if let Some(c) = self.conns.get_mut(key) {
            c.queued_in = None;
        }
    }
}

impl Perimeter for Perim {
    fn service(&mut self, now_std: std::time::Instant) -> bool {
        let _ = now_std;
        let Some(st) = self.stack() else {
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
                c.tcb.on_timeout(now);
            }
            self.flush(&st, now, k);
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
                st.receive_frames(self, now, iface, &mut buf);
            }
            self.rx_buf = buf;
        }
        if self.host_deadline.is_some() && st.host_timers(self, now) {
            did = true;
        }
        self.run_lo(&st, now);
        // Fair queues whose device has room again (or whose paced flow may send).
        self.sync_tx(&st);
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
            self.run_tsq_ready(&st, now);
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
        if (u16::from(self.probing) | probes::semaphore(Probe::SqueueEnter)) != 0 {
            self.fire_sq(Probe::SqueueEnter, sq, 0, how as u64);
        }
    }

    #[inline]
    fn drained(&mut self, sq: usize, ran: u64, since: std::time::Instant) {
        if (u16::from(self.probing) | probes::semaphore(Probe::SqueueDrain)) != 0 {
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
pub(crate) fn seg_work(seg: Seg) -> impl FnOnce(&mut Perim) + Send + 'static {
    move |p: &mut Perim| {
        if let Some(st) = p.stack() {
            let now = crate::clock::now();
            p.input(&st, now, seg);
            p.run_lo(&st, now);
        }
    }
}
