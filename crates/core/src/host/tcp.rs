//! TCP in the host: demultiplexing (RFC 9293 §3.10.7.1-2 for segments that find no
//! connection), listeners with a SYN queue and an accept queue, active opens with
//! ephemeral ports chosen per RFC 6056 §3.3.3, TIME-WAIT reuse per RFC 6191, ICMP errors
//! validated per RFC 5927, and the application calls.
//!
//! A connection's `Tcb` is flushed (its segments built into frames) after every input
//! that touched it, or once at the end of a receive batch that did
//! ([`Host::receive_batch`]), and its earliest deadline is kept in the host's timer set.

use super::ip::{IpLayer, TcpIcmpError, TcpSegmentIn, TcpSink};
use super::output::{datagram_buffer, plain_header, HEADROOM};
use super::stats::TcpStats;
use super::{ConnId, Host, ListenerId, SocketEvent};
use crate::icmp::ratelimit::TokenBucket;
use crate::slab::Slab;
use crate::tcp::endpoint::{self, Action, Arrival, Context, Endpoint, ListenerView, Route};
use crate::tcp::isn::IsnGenerator;
use crate::tcp::tcb::ConnSpec;
use crate::tcp::{Events, Tcb, TcbInfo, TcbStats, TcpSettings};
use crate::time::Instant;
use crate::wire::{icmp_unreach, ip_proto, Ipv4Repr, TcpRepr, IPV4_HEADER_LEN};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

/// Linux's errno for "no buffer space available" (a connection table that is full).
const ENOBUFS: i32 = 105;

/// One connection as the host keeps it.
#[derive(Debug)]
pub struct Conn {
    pub tcb: Tcb,
    /// The listener whose queues hold this connection (passive, not yet accepted).
    pub(crate) listener: Option<ListenerId>,
    /// The application has given up its handle (close, abort, or never had one).
    pub(crate) released: bool,
    /// The deadline currently in the host's timer set.
    pub(crate) timer: Option<Instant>,
    pub(crate) pending: Events,
    pub(crate) queued: bool,
    /// Bytes of its queues counted in the host's `tcp_mem_used`.
    pub(crate) charged: usize,
}

/// A listening socket (RFC 9293 LISTEN).
#[derive(Debug)]
pub struct Listener {
    pub local: SocketAddrV4,
    pub backlog: u32,
    /// Established connections waiting for accept().
    pub(crate) accept_q: VecDeque<ConnId>,
    /// Connections in SYN-RECEIVED.
    pub(crate) syn_q: u32,
    pub(crate) queued: bool,
    /// TCP_MAXSEG set on the listener: applied to each connection it opens, before
    /// the SYN,ACK is built.
    pub(crate) user_mss: Option<u32>,
    /// When this listener last answered a SYN with a cookie (RFC 4987 §3.6): ACKs are
    /// checked for cookies only within `syncookie::MAX_AGE` ticks of it (or always with
    /// `tcp_syncookies=2`), as Linux does.
    pub(crate) cookie_at: Option<Instant>,
}

/// The host's TCP: its connections, listeners and timers, over the host's IP layer
/// (which it is handed for every call that sends).
#[derive(Debug)]
pub(crate) struct TcpLayer {
    pub(crate) tcp_set: Arc<TcpSettings>,
    pub(crate) rst_bucket: TokenBucket,
    pub(crate) isn: IsnGenerator,
    pub(crate) conns: Slab<Conn>,
    pub(crate) by_tuple: HashMap<(SocketAddrV4, SocketAddrV4), ConnId>,
    pub(crate) listeners: Slab<Listener>,
    pub(crate) listener_by_addr: HashMap<SocketAddrV4, ListenerId>,
    /// Each connection's earliest deadline, with its slab index.
    pub(crate) timers: BTreeSet<(Instant, u32)>,
    /// Connections and listeners that became ready.
    pub(crate) ready: VecDeque<SocketEvent>,
    /// TCP counters that no connection keeps (segments in error, active opens).
    pub(crate) stats: TcpStats,
    /// What happens to segments before a connection takes them, and its counters.
    pub(crate) endpoint: Endpoint,
    pub(crate) gone_tcb_stats: TcbStats,
    /// Bytes the connections' queues hold, as last counted (`tcp_mem_max`).
    pub(crate) mem_used: usize,
    /// A receive batch is being taken in ([`Host::receive_batch`]): connections that
    /// segments reach send once, at its end, as the runtime's squeues do.
    pub(crate) batch: bool,
    /// The connections the batch reached, to flush at its end.
    pub(crate) touched: Vec<ConnId>,
}

impl TcpLayer {
    pub(crate) fn new(params: &crate::params::Params, secret: [u8; 16]) -> TcpLayer {
        TcpLayer {
            tcp_set: Arc::new(TcpSettings::from_params(params)),
            rst_bucket: super::rst_bucket(params),
            isn: IsnGenerator::new(secret),
            conns: Slab::default(),
            by_tuple: HashMap::new(),
            listeners: Slab::default(),
            listener_by_addr: HashMap::new(),
            timers: BTreeSet::new(),
            ready: VecDeque::new(),
            stats: TcpStats::default(),
            endpoint: Endpoint::default(),
            gone_tcb_stats: TcbStats::default(),
            mem_used: 0,
            batch: false,
            touched: Vec::new(),
        }
    }
}

/// What the TCP endpoint reads of the host: its listeners, routes and limits, borrowed
/// field by field so that the connection a segment found stays borrowed beside it.
struct HostContext<'a> {
    ip: &'a IpLayer,
    listeners: &'a Slab<Listener>,
    listener_by_addr: &'a HashMap<SocketAddrV4, ListenerId>,
    tcp_set: &'a Arc<TcpSettings>,
    isn: &'a IsnGenerator,
    rst_bucket: &'a mut TokenBucket,
    conns: usize,
    mem_used: usize,
}

impl Context for HostContext<'_> {
    type Listener = ListenerId;

    fn listener(&self, local: SocketAddrV4) -> Option<(ListenerId, ListenerView)> {
        let lid = find_listener(self.listener_by_addr, local)?;
        let l = self.listeners.get(lid.0)?;
        Some((
            lid,
            ListenerView {
                backlog: l.backlog,
                accept_queued: l.accept_q.len() as u32,
                syn_queued: l.syn_q,
                cookie_at: l.cookie_at,
                user_mss: l.user_mss,
                // A closed listener is gone from the host at once.
                closed: false,
            },
        ))
    }

    fn route(&self, remote: Ipv4Addr) -> Option<Route> {
        // Large segments: every interface takes them (split by `gso_split` or by a TSO
        // device), and loopback needs no splitting.
        self.ip
            .source_for(remote)
            .map(|(_, mtu)| Route { mtu, lso: true })
    }

    fn is_local(&self, remote: Ipv4Addr) -> bool {
        self.ip.is_local_addr(remote)
    }

    fn conn_room(&self) -> bool {
        self.conns < self.ip.params.tcp_max_conns as usize
    }

    fn mem_full(&self) -> bool {
        self.mem_used > self.ip.params.tcp_mem_max as usize * 1024
    }

    fn rst_allowed(&mut self, now: Instant) -> bool {
        self.rst_bucket.allow(now)
    }

    fn isn(&self) -> &IsnGenerator {
        self.isn
    }

    fn settings(&self) -> Arc<TcpSettings> {
        self.tcp_set.clone()
    }

    fn syncookies(&self) -> u32 {
        self.ip.params.tcp_syncookies
    }

    fn syn_queue_max(&self) -> u32 {
        self.ip.params.tcp_conn_req_max_q0
    }
}

/// Builds and sends one segment that belongs to no `Tcb` (a RST, a cookie SYN,ACK).
fn send_bare(ip: &mut IpLayer, now: Instant, src: Ipv4Addr, dst: Ipv4Addr, r: &TcpRepr) {
    let hdr = Ipv4Repr {
        dont_frag: true,
        ..ip.header(src, dst, ip_proto::TCP, r.header_len())
    };
    let mut f = datagram_buffer(&hdr);
    r.emit(&mut f[HEADROOM + IPV4_HEADER_LEN..], src, dst);
    let _ = ip.ip_output(now, f);
}

/// A listener for `local`: the exact address first, then the wildcard.
fn find_listener(
    by_addr: &HashMap<SocketAddrV4, ListenerId>,
    local: SocketAddrV4,
) -> Option<ListenerId> {
    by_addr
        .get(&local)
        .or_else(|| by_addr.get(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, local.port())))
        .copied()
}

impl TcpLayer {
    /// A TCP segment arrived (checksum verified) for one of our addresses. `gro`: the
    /// wire segments it stands for and their payload size (`(1, 0)` unless merged by
    /// receive-side coalescing, see [`Tcb::handle_segment_gro`]). The endpoint decides what
    /// becomes of it ([`Endpoint::handle_segment`]); this carries that out.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn tcp_input(
        &mut self,
        ip: &mut IpLayer,
        now: Instant,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        seg: &TcpRepr,
        payload: &[u8],
        gro: (u16, u16),
    ) {
        let local = SocketAddrV4::new(dst, seg.dst_port);
        let remote = SocketAddrV4::new(src, seg.src_port);
        let id = self.by_tuple.get(&(local, remote)).copied();
        let arrival = Arrival {
            local,
            remote,
            seg,
            payload,
            wire_segs: gro.0,
        };
        let verdict = {
            let found = id.and_then(|id| self.conns.get(id.0)).map(|c| &c.tcb);
            let mut ctx = HostContext {
                ip,
                listeners: &self.listeners,
                listener_by_addr: &self.listener_by_addr,
                tcp_set: &self.tcp_set,
                isn: &self.isn,
                rst_bucket: &mut self.rst_bucket,
                conns: self.conns.len(),
                mem_used: self.mem_used,
            };
            self.endpoint.handle_segment(&mut ctx, now, found, &arrival)
        };
        if verdict.retire_found {
            if let Some(id) = id {
                self.remove_conn(id);
            }
        }
        match verdict.action {
            Action::Deliver { strip_data } => {
                if let Some(id) = id {
                    self.deliver(ip, now, id, seg, payload, gro, strip_data);
                }
            }
            Action::Accept {
                listener,
                conn,
                cookie,
            } => {
                let id = self.add_passive(listener, local, remote, conn.into_tcb());
                if cookie {
                    self.endpoint.stats.syncookies_recv += 1;
                }
                self.flush_conn(ip, now, id);
            }
            Action::Reply { repr, cookie_for } => {
                if let Some(l) = cookie_for.and_then(|lid| self.listeners.get_mut(lid.0)) {
                    l.cookie_at = Some(now);
                }
                send_bare(ip, now, dst, src, &repr);
            }
            Action::Drop => {}
        }
    }

    /// Gives a segment to its connection; `strip_data`: only its header (`tcp_mem_max`,
    /// see [`endpoint::strip_data`]).
    #[allow(clippy::too_many_arguments)]
    fn deliver(
        &mut self,
        ip: &mut IpLayer,
        now: Instant,
        id: ConnId,
        seg: &TcpRepr,
        payload: &[u8],
        gro: (u16, u16),
        strip_data: bool,
    ) {
        let Some(c) = self.conns.get_mut(id.0) else {
            return;
        };
        if strip_data {
            c.tcb.handle_segment(now, &endpoint::strip_data(seg), &[]);
        } else {
            c.tcb.handle_segment_gro(now, seg, payload, gro.0, gro.1);
        }
        if self.batch {
            // A receive batch is being taken in: the connection sends at its end.
            if !payload.is_empty() {
                // Charged at once (`tcp_mem_max` is then overshot by at most one
                // segment), not only when the batch ends.
                self.recharge(id);
            }
            if !self.touched.contains(&id) {
                self.touched.push(id);
            }
            return;
        }
        self.flush_conn(ip, now, id);
    }

    /// A passive connection in SYN-RECEIVED joins the host and its listener's SYN queue.
    fn add_passive(
        &mut self,
        lid: ListenerId,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        tcb: Tcb,
    ) -> ConnId {
        let id = ConnId(self.conns.insert(Conn {
            tcb,
            listener: Some(lid),
            released: true,
            timer: None,
            pending: Events::default(),
            queued: false,
            charged: 0,
        }));
        if let Some(l) = self.listeners.get_mut(lid.0) {
            l.syn_q += 1;
        }
        self.by_tuple.insert((local, remote), id);
        self.endpoint.stats.passive_opens += 1;
        id
    }

    /// An ICMP destination unreachable quoting one of our segments (RFC 5927 §4.1: the
    /// quoted sequence number must be in [SND.UNA, SND.NXT)).
    fn icmp_error(&mut self, ip: &mut IpLayer, now: Instant, err: TcpIcmpError) {
        let TcpIcmpError {
            local,
            remote,
            seq,
            code,
            mtu,
        } = err;
        let Some(&id) = self.by_tuple.get(&(local, remote)) else {
            return;
        };
        let Some(c) = self.conns.get_mut(id.0) else {
            return;
        };
        if !c.tcb.icmp_quote_valid(seq) {
            if code == icmp_unreach::FRAG_NEEDED {
                ip.stats.icmp.pmtu_rejected += 1;
            }
            return;
        }
        if code == icmp_unreach::FRAG_NEEDED {
            if mtu >= 68 {
                ip.stats.icmp.pmtu_updates += 1;
                c.tcb.on_path_mtu(now, u32::from(mtu));
            } else {
                ip.stats.icmp.pmtu_rejected += 1;
            }
        } else {
            c.tcb.on_unreachable(now, code);
        }
        self.flush_conn(ip, now, id);
    }

    /// Sends what a connection has to send, reports its events, keeps its timer, and
    /// drops it once it is closed and nobody holds it.
    pub(crate) fn flush_conn(&mut self, ip: &mut IpLayer, now: Instant, id: ConnId) {
        let ttl = ip.params.ip_def_ttl as u8;
        if let Some(c) = self.conns.get_mut(id.0) {
            if c.tcb.take_negative_advice() {
                // MUST-20 (RFC 1122 §2.3.2.1 "higher-layer advice"): R1 reached, so forget the
                // next hop's link address; the next segment re-resolves it (the path, or a
                // stale or poisoned ARP entry, may be the problem).
                ip.forget_next_hop(*c.tcb.remote().ip());
            }
        }
        loop {
            let Some(c) = self.conns.get_mut(id.0) else {
                return;
            };
            let local = c.tcb.local();
            let remote = c.tcb.remote();
            let tos = c.tcb.tos();
            let Some(out) = c.tcb.poll_transmit(now) else {
                break;
            };
            let hl = out.repr.header_len();
            let tcp_len = hl + out.payload_len();
            let gso = out.gso_size;
            // `out` borrows the connection, so the identification is taken field by field.
            let ident = ip.next_ident();
            let hdr = Ipv4Repr {
                dscp_ecn: tos,
                dont_frag: true,
                ..plain_header(
                    *local.ip(),
                    *remote.ip(),
                    ip_proto::TCP,
                    ttl,
                    ident,
                    tcp_len,
                )
            };
            let mut f = datagram_buffer(&hdr);
            let t = &mut f[HEADROOM + IPV4_HEADER_LEN..];
            out.repr.emit_header(&mut t[..hl]);
            out.copy_payload(&mut t[hl..]);
            if gso == 0 {
                // A large segment's checksum is filled where it is cut (`send_framed`).
                TcpRepr::fill_checksum(t, *local.ip(), *remote.ip());
            }
            if gso > 0 {
                // The pieces take the identifications after this one (`gso_split`).
                let pieces = (tcp_len - hl).div_ceil(usize::from(gso));
                ip.next_ident = ip.next_ident.wrapping_add(pieces as u16 - 1);
            }
            let _ = ip.ip_output_gso(now, f, gso, IPV4_HEADER_LEN + hl);
        }
        self.after_conn_activity(id);
    }

    /// Events, accept-queue moves, timers and reaping after a connection was touched.
    fn after_conn_activity(&mut self, id: ConnId) {
        self.recharge(id);
        let Some(c) = self.conns.get_mut(id.0) else {
            return;
        };
        let ev = c.tcb.poll_events();
        let closed = c.tcb.is_closed();
        let listener = c.listener;
        let deadline = if closed { None } else { c.tcb.poll_timeout() };
        if c.timer != deadline {
            if let Some(t) = c.timer {
                self.timers.remove(&(t, id.0.idx));
            }
            if let Some(t) = deadline {
                self.timers.insert((t, id.0.idx));
            }
            c.timer = deadline;
        }
        if let Some(lid) = listener {
            // Passive connection not yet accepted.
            if ev.contains(Events::CONNECTED) && !closed {
                if let Some(l) = self.listeners.get_mut(lid.0) {
                    l.syn_q = l.syn_q.saturating_sub(1);
                    l.accept_q.push_back(id);
                    if !l.queued {
                        l.queued = true;
                        self.ready.push_back(SocketEvent::Listener(lid));
                    }
                }
                if let Some(c) = self.conns.get_mut(id.0) {
                    // From now on the listener's accept queue holds it.
                    c.pending.insert(ev);
                }
            } else if closed {
                let in_accept_q = self
                    .listeners
                    .get(lid.0)
                    .is_some_and(|l| l.accept_q.contains(&id));
                if let Some(l) = self.listeners.get_mut(lid.0) {
                    if in_accept_q {
                        l.accept_q.retain(|&x| x != id);
                    } else {
                        l.syn_q = l.syn_q.saturating_sub(1);
                    }
                }
                self.remove_conn(id);
            } else if !ev.is_empty() {
                if let Some(c) = self.conns.get_mut(id.0) {
                    c.pending.insert(ev);
                }
            }
            return;
        }
        let released = c.released;
        if closed && released {
            self.remove_conn(id);
            return;
        }
        if !ev.is_empty() {
            c.pending.insert(ev);
            if !c.queued {
                c.queued = true;
                self.ready
                    .push_back(SocketEvent::Tcp(id, Events::default()));
            }
        }
    }

    /// Brings the connection's charge in `tcp_mem_used` up to what it holds now.
    fn recharge(&mut self, id: ConnId) {
        if let Some(c) = self.conns.get_mut(id.0) {
            let held = c.tcb.rcv_queued_bytes();
            self.mem_used = (self.mem_used + held).saturating_sub(c.charged);
            c.charged = held;
        }
    }

    pub(crate) fn remove_conn(&mut self, id: ConnId) {
        if let Some(c) = self.conns.remove(id.0) {
            self.mem_used = self.mem_used.saturating_sub(c.charged);
            if let Some(t) = c.timer {
                self.timers.remove(&(t, id.0.idx));
            }
            if self.by_tuple.get(&(c.tcb.local(), c.tcb.remote())) == Some(&id) {
                self.by_tuple.remove(&(c.tcb.local(), c.tcb.remote()));
            }
            let s = c.tcb.stats();
            self.gone_tcb_stats.accumulate(s);
        }
    }
}

/// The application interface.
impl Host {
    /// listen() on `local` (address 0.0.0.0 = all; port 0 is refused). `backlog` is
    /// clamped to `tcp_conn_req_max_q`.
    pub fn tcp_listen(&mut self, local: SocketAddrV4, backlog: u32) -> io::Result<ListenerId> {
        if local.port() == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "port 0"));
        }
        if !local.ip().is_unspecified() && !self.ip.is_local_addr(*local.ip()) {
            return Err(io::ErrorKind::AddrNotAvailable.into());
        }
        let clash = self.tcp.listener_by_addr.contains_key(&local)
            || (local.ip().is_unspecified()
                && self
                    .tcp
                    .listener_by_addr
                    .keys()
                    .any(|a| a.port() == local.port()))
            || self
                .tcp
                .listener_by_addr
                .contains_key(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, local.port()));
        if clash {
            return Err(io::ErrorKind::AddrInUse.into());
        }
        let backlog = backlog.clamp(1, self.ip.params.tcp_conn_req_max_q);
        let id = ListenerId(self.tcp.listeners.insert(Listener {
            local,
            backlog,
            accept_q: VecDeque::new(),
            syn_q: 0,
            cookie_at: None,
            queued: false,
            user_mss: None,
        }));
        self.tcp.listener_by_addr.insert(local, id);
        Ok(id)
    }

    /// Connections waiting in a listener's accept queue (`None`: no such listener).
    pub fn tcp_listener_queued(&self, lid: ListenerId) -> Option<usize> {
        self.tcp.listeners.get(lid.0).map(|l| l.accept_q.len())
    }

    /// TCP_MAXSEG on a listener: connections it opens from now on advertise at most
    /// `mss` in their SYN,ACK and send segments no larger (see [`Tcb::set_user_mss`]);
    /// `InvalidInput` outside 88..=32767, as Linux's EINVAL.
    pub fn tcp_listener_set_max_segment(&mut self, lid: ListenerId, mss: u32) -> io::Result<()> {
        if !(88..=32_767).contains(&mss) {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        let l = self
            .tcp
            .listeners
            .get_mut(lid.0)
            .ok_or(io::ErrorKind::NotConnected)?;
        l.user_mss = Some(mss);
        Ok(())
    }

    /// accept(): an established connection and its peer, or `WouldBlock`.
    pub fn tcp_accept(&mut self, lid: ListenerId) -> io::Result<(ConnId, SocketAddrV4)> {
        let l = self
            .tcp
            .listeners
            .get_mut(lid.0)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let id = l
            .accept_q
            .pop_front()
            .ok_or_else(|| io::Error::from(io::ErrorKind::WouldBlock))?;
        let c = self
            .tcp
            .conns
            .get_mut(id.0)
            .ok_or_else(|| io::Error::from(io::ErrorKind::ConnectionAborted))?;
        c.listener = None;
        c.released = false;
        let peer = c.tcb.remote();
        if !c.pending.is_empty() && !c.queued {
            c.queued = true;
            self.tcp
                .ready
                .push_back(SocketEvent::Tcp(id, Events::default()));
        }
        Ok((id, peer))
    }

    /// Closes a listener; connections not yet accepted are reset.
    pub fn tcp_close_listener(&mut self, now: Instant, lid: ListenerId) {
        let Some(l) = self.tcp.listeners.remove(lid.0) else {
            return;
        };
        self.tcp.listener_by_addr.remove(&l.local);
        let orphans: Vec<ConnId> = self
            .tcp
            .conns
            .iter()
            .filter(|(_, c)| c.listener == Some(lid))
            .map(|(k, _)| ConnId(k))
            .collect();
        for id in orphans {
            if let Some(c) = self.tcp.conns.get_mut(id.0) {
                c.listener = None;
                c.released = true;
                c.tcb.abort(now);
            }
            self.tcp.flush_conn(&mut self.ip, now, id);
        }
    }

    /// connect(): an active open to `remote`, from `local` if given (else an address
    /// chosen by route and an ephemeral port, RFC 6056 §3.3.3).
    pub fn tcp_connect(
        &mut self,
        now: Instant,
        remote: SocketAddrV4,
        local: Option<SocketAddrV4>,
    ) -> io::Result<ConnId> {
        self.tcp_connect_with(now, remote, local, |_| {})
    }

    /// [`Host::tcp_connect`], with `setup` run on the new `Tcb` before its SYN is
    /// built: options that shape the SYN (TCP_MAXSEG, buffer sizes) set before
    /// connect() take effect on it.
    pub fn tcp_connect_with(
        &mut self,
        now: Instant,
        remote: SocketAddrV4,
        local: Option<SocketAddrV4>,
        setup: impl FnOnce(&mut Tcb),
    ) -> io::Result<ConnId> {
        crate::ip::check_destination(remote)?;
        if self.tcp.conns.len() >= self.ip.params.tcp_max_conns as usize {
            // `tcp_max_conns`: as Linux when it cannot allocate a socket's memory.
            self.tcp.stats.conn_limit_drops += 1;
            return Err(io::Error::from_raw_os_error(ENOBUFS));
        }
        let Some((src, mtu)) = self.ip.source_for(*remote.ip()) else {
            self.ip.stats.ip.out_no_routes += 1;
            return Err(io::ErrorKind::NetworkUnreachable.into());
        };
        let local = match local {
            Some(l) if l.port() != 0 => {
                let ip = if l.ip().is_unspecified() {
                    src
                } else {
                    *l.ip()
                };
                if !self.ip.is_local_addr(ip) {
                    return Err(io::ErrorKind::AddrNotAvailable.into());
                }
                let l = SocketAddrV4::new(ip, l.port());
                if self.tcp.by_tuple.contains_key(&(l, remote)) {
                    return Err(io::ErrorKind::AddrInUse.into());
                }
                l
            }
            Some(l) => self.ephemeral(
                if l.ip().is_unspecified() {
                    src
                } else {
                    *l.ip()
                },
                remote,
            )?,
            None => self.ephemeral(src, remote)?,
        };
        let spec = ConnSpec {
            local,
            remote,
            iss: self.tcp.isn.isn(now, local, remote),
            ts_offset: self.tcp.isn.ts_offset(local, remote),
            mtu,
        };
        let mut tcb = Tcb::connect(now, spec, Arc::clone(&self.tcp.tcp_set));
        tcb.set_lso_max(self.tcp.tcp_set.lso_max);
        setup(&mut tcb);
        let id = ConnId(self.tcp.conns.insert(Conn {
            tcb,
            listener: None,
            released: false,
            timer: None,
            pending: Events::default(),
            queued: false,
            charged: 0,
        }));
        self.tcp.by_tuple.insert((local, remote), id);
        self.tcp.stats.active_opens += 1;
        self.tcp.flush_conn(&mut self.ip, now, id);
        self.ip.run_loopback(now, &mut self.tcp);
        Ok(id)
    }

    /// RFC 6056 §3.3.3 (algorithm 3): start the search at a keyed hash of the
    /// destination plus a counter; skip ports in use for this destination or listening.
    fn ephemeral(&mut self, src: Ipv4Addr, remote: SocketAddrV4) -> io::Result<SocketAddrV4> {
        let lo = self.ip.params.tcp_smallest_anon_port;
        let hi = self.ip.params.tcp_largest_anon_port;
        let range = hi - lo + 1;
        let offset = self.tcp.isn.port_offset(src, remote);
        for i in 0..range {
            let port = (lo + offset.wrapping_add(self.ip.next_port).wrapping_add(i) % range) as u16;
            let cand = SocketAddrV4::new(src, port);
            if self.tcp.by_tuple.contains_key(&(cand, remote))
                || find_listener(&self.tcp.listener_by_addr, cand).is_some()
            {
                continue;
            }
            self.ip.next_port = self.ip.next_port.wrapping_add(i + 1);
            return Ok(cand);
        }
        Err(io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            "no ephemeral port free",
        ))
    }

    fn conn_mut(&mut self, id: ConnId) -> io::Result<&mut Conn> {
        self.tcp
            .conns
            .get_mut(id.0)
            .filter(|c| !c.released)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "no such connection"))
    }

    /// write(): bytes taken, or `WouldBlock` when the send buffer is full.
    pub fn tcp_send(&mut self, now: Instant, id: ConnId, data: &[u8]) -> io::Result<usize> {
        let r = self.conn_mut(id)?.tcb.send(now, data);
        self.tcp.flush_conn(&mut self.ip, now, id);
        self.ip.run_loopback(now, &mut self.tcp);
        r.map_err(Into::into)
    }

    /// read(): `Ok(0)` at end of stream, `WouldBlock` when nothing is there yet.
    pub fn tcp_recv(&mut self, now: Instant, id: ConnId, buf: &mut [u8]) -> io::Result<usize> {
        let r = self.conn_mut(id)?.tcb.recv(now, buf);
        self.tcp.flush_conn(&mut self.ip, now, id);
        self.ip.run_loopback(now, &mut self.tcp);
        r.map_err(Into::into)
    }

    /// Runs `f` on the connection's `Tcb` (socket options) and flushes.
    pub fn tcp_with<R>(
        &mut self,
        now: Instant,
        id: ConnId,
        f: impl FnOnce(&mut Tcb) -> R,
    ) -> io::Result<R> {
        let r = f(&mut self.conn_mut(id)?.tcb);
        self.tcp.flush_conn(&mut self.ip, now, id);
        self.ip.run_loopback(now, &mut self.tcp);
        Ok(r)
    }

    /// shutdown(SHUT_WR).
    pub fn tcp_shutdown_write(&mut self, now: Instant, id: ConnId) -> io::Result<()> {
        let r = self.conn_mut(id)?.tcb.shutdown_write(now);
        self.tcp.flush_conn(&mut self.ip, now, id);
        self.ip.run_loopback(now, &mut self.tcp);
        r.map_err(Into::into)
    }

    /// close(): the handle is gone; the connection finishes on its own.
    pub fn tcp_close(&mut self, now: Instant, id: ConnId) {
        if let Ok(c) = self.conn_mut(id) {
            c.released = true;
            c.tcb.close(now);
            self.tcp.flush_conn(&mut self.ip, now, id);
            self.ip.run_loopback(now, &mut self.tcp);
        }
    }

    /// close() with SO_LINGER 0: reset the connection.
    pub fn tcp_abort(&mut self, now: Instant, id: ConnId) {
        if let Ok(c) = self.conn_mut(id) {
            c.released = true;
            c.tcb.abort(now);
            self.tcp.flush_conn(&mut self.ip, now, id);
            self.ip.run_loopback(now, &mut self.tcp);
        }
    }

    /// The connection's `Tcb`, read-only.
    pub fn tcb(&self, id: ConnId) -> Option<&Tcb> {
        self.tcp.conns.get(id.0).map(|c| &c.tcb)
    }

    /// A `tcp_info`-like snapshot.
    pub fn tcp_info(&self, id: ConnId) -> Option<TcbInfo> {
        self.tcb(id).map(Tcb::info)
    }

    /// Every connection (netstat).
    pub fn netstat(&self) -> Vec<TcbInfo> {
        self.tcp.conns.iter().map(|(_, c)| c.tcb.info()).collect()
    }

    /// Number of connections the host holds (any state).
    pub fn conn_count(&self) -> usize {
        self.tcp.conns.len()
    }
}

/// The IP layer hands the host's TCP what it received, at once (merged TCP/IP).
impl TcpSink for TcpLayer {
    fn tcp_segment(&mut self, ip: &mut IpLayer, now: Instant, s: TcpSegmentIn<'_>) {
        let Ok((seg, data)) = TcpRepr::parse(&s.bytes, s.src, s.dst, !s.csum_ok) else {
            // RFC 4022: tcpInSegs counts segments received in error too.
            self.stats.in_segs += u64::from(s.segs);
            self.stats.in_errs += u64::from(s.segs);
            return;
        };
        self.tcp_input(ip, now, s.src, s.dst, &seg, data, (s.segs, s.gso_size));
    }

    fn tcp_icmp_error(&mut self, ip: &mut IpLayer, now: Instant, err: TcpIcmpError) {
        self.icmp_error(ip, now, err);
    }
}
