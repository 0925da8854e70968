//! The TCP endpoint: what happens to a segment before a connection takes it.
//!
//! # Design
//! Two owners keep TCP connections: the core [`Host`](crate::host::Host) (one table, one
//! thread) and the runtime's squeues (a concurrent classifier, one table per squeue). Both
//! look a segment's 4-tuple up in their own table, then ask [`Endpoint::handle_segment`]
//! what to do, and carry out the [`Action`] it returns:
//!
//! - [`Action::Deliver`]: give the segment to the connection found (all of it, or, when
//!   the connections hold `tcp_mem_max`, only its header: see [`strip_data`]);
//! - [`Action::Accept`]: a listener takes a SYN (or an ACK that returns a SYN cookie) and
//!   this new `Tcb` joins the owner's table and the listener's SYN queue;
//! - [`Action::Reply`]: send a segment that belongs to no connection (a RST, or a cookie
//!   SYN,ACK);
//! - [`Action::Drop`]: nothing to do; the reason is counted in [`EndpointStats`].
//!
//! Each of these may first retire the connection found ([`Verdict::retire_found`]): a
//! TIME-WAIT connection that a new incarnation replaces (RFC 6191).
//!
//! The endpoint keeps no connection state of its own; it reads what it needs of the
//! owner through [`Context`] (listeners, routes, limits, the ISN generator), only on the
//! paths that need it: a segment for an existing connection costs one TIME-WAIT check
//! and, with data, one look at the memory bound. This is the shape of quinn-proto's
//! `Endpoint::handle` and of illumos's single `tcp_input_listener`.
//!
//! RFC 9293 §3.10.7.1 (CLOSED) and §3.10.7.2 (LISTEN); RFC 6191 (TIME-WAIT reuse);
//! RFC 4987 §3.6 (SYN cookies).

use crate::tcp::isn::IsnGenerator;
use crate::tcp::tcb::ConnSpec;
use crate::tcp::{syncookie, SeqNum, Tcb, TcpSettings};
use crate::time::Instant;
use crate::wire::{TcpFlags, TcpRepr};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

/// How far beyond the old connection's SND.NXT a new incarnation's ISS is put when it
/// takes over a TIME-WAIT connection (RFC 6191 §2): two maximum windows of the old
/// connection's sequence space (65,535 octets unscaled, plus its SYN and FIN), so that no
/// old duplicate can fall inside the new connection's window.
pub const TIME_WAIT_ISS_GAP: u32 = 65_537 * 2;

/// What a listener does with a segment (RFC 9293 §3.10.7.2, LISTEN state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenVerdict {
    /// Drop it: a RST, a segment with neither SYN nor ACK, or SYN+FIN (dropped, as Linux).
    Ignore,
    /// An ACK: answer `<SEQ=SEG.ACK><CTL=RST>`.
    Reset,
    /// A SYN: create a connection in SYN-RECEIVED.
    Open,
}

impl ListenVerdict {
    /// The verdict for `seg` arriving at a listener.
    pub fn of(seg: &TcpRepr) -> ListenVerdict {
        let f = seg.flags;
        if f.rst() {
            ListenVerdict::Ignore
        } else if f.ack() {
            ListenVerdict::Reset
        } else if f.syn() && !f.fin() {
            ListenVerdict::Open
        } else {
            ListenVerdict::Ignore
        }
    }
}

/// What the endpoint reads of a listener.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListenerView {
    /// The accept queue's limit (listen()'s backlog, clamped).
    pub backlog: u32,
    /// Established connections waiting for accept().
    pub accept_queued: u32,
    /// Connections in SYN-RECEIVED.
    pub syn_queued: u32,
    /// When the listener last answered a SYN with a cookie.
    pub cookie_at: Option<Instant>,
    /// TCP_MAXSEG set on the listener: applied to each connection it opens, before its
    /// SYN,ACK is built, cookie SYN,ACKs included (as Linux's `tcp_mss_clamp`).
    pub user_mss: Option<u32>,
    /// The listener is being closed (or the whole stack is): it takes no new connection
    /// and the segment is answered as at a closed port, as Linux answers once a
    /// listener's socket has been unhashed.
    pub closed: bool,
}

/// The way to a peer, as the owner's routing sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// The path MTU.
    pub mtu: u32,
    /// The owner's output path cuts large segments (GSO or TSO): the connection may
    /// build them (`Tcb::set_lso_max`).
    pub lso: bool,
}

/// What the endpoint asks of the owner of the connections.
pub trait Context {
    /// The owner's handle on a listener, handed back in [`Action::Accept`] and
    /// [`Action::Reply`].
    type Listener;

    /// The listener for `local`: the exact address first, then the wildcard.
    fn listener(&self, local: SocketAddrV4) -> Option<(Self::Listener, ListenerView)>;
    /// The route to `remote` (`None`: unreachable).
    fn route(&self, remote: Ipv4Addr) -> Option<Route>;
    /// `remote` is an address of this stack (its RSTs are not rate-limited).
    fn is_local(&self, remote: Ipv4Addr) -> bool;
    /// Another connection fits under `tcp_max_conns`.
    fn conn_room(&self) -> bool;
    /// The connections hold `tcp_mem_max` (data is dropped unacknowledged).
    fn mem_full(&self) -> bool;
    /// Takes a token of `tcp_rst_sent_rate`.
    fn rst_allowed(&mut self, now: Instant) -> bool;
    /// The ISN and timestamp-offset generator (RFC 6528, RFC 7323 §5.4).
    fn isn(&self) -> &IsnGenerator;
    /// The settings new connections start with.
    fn settings(&self) -> Arc<TcpSettings>;
    /// `tcp_syncookies`: 0 never, 1 when the SYN queue is full, 2 always.
    fn syncookies(&self) -> u32;
    /// `tcp_conn_req_max_q0`: the SYN queue's limit.
    fn syn_queue_max(&self) -> u32;
}

/// A segment as the owner hands it to the endpoint.
#[derive(Debug, Clone, Copy)]
pub struct Arrival<'a> {
    /// Our end (the segment's destination).
    pub local: SocketAddrV4,
    /// The peer's end (the segment's source).
    pub remote: SocketAddrV4,
    pub seg: &'a TcpRepr,
    pub payload: &'a [u8],
    /// Wire segments it stands for (more than 1 when coalesced on receive).
    pub wire_segs: u16,
}

/// What to do with a segment.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Action<L> {
    /// Give it to the connection found; `strip_data`: only its header (see [`strip_data`]).
    Deliver { strip_data: bool },
    /// A new connection in SYN-RECEIVED for `listener`: build it
    /// ([`NewConn::into_tcb`]), add it to the owner's table and the listener's SYN queue,
    /// count a passive open, and flush it. `cookie`: it was rebuilt from a SYN cookie and
    /// has already taken the segment (the ACK that completes it), so the owner counts
    /// `tcpSynCookiesRecv`.
    Accept {
        listener: L,
        conn: NewConn,
        cookie: bool,
    },
    /// Send `repr` (no payload), which belongs to no connection. `cookie_for`: it is a
    /// cookie SYN,ACK of this listener, which notes when it last sent one.
    Reply {
        repr: TcpRepr,
        cookie_for: Option<L>,
    },
    /// Nothing to do; counted.
    Drop,
}

/// A passive connection the endpoint decided to make. A `Tcb` is large: the one a SYN opens
/// is built by the owner where it stores it ([`NewConn::into_tcb`]), not moved through the
/// verdict (a SYN's parameters are moved instead: boxing them, or the `Tcb`, cost more,
/// measured with callgrind).
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum NewConn {
    /// From a SYN: `Tcb::accept` with these, then the route's and listener's settings.
    Syn(PassiveOpen),
    /// Rebuilt from a SYN cookie (RFC 4987 §3.6), the completing ACK taken.
    Cookie(Box<Tcb>),
}

/// What `Tcb::accept` needs for a SYN at a listener, and what the route and the listener
/// add.
#[derive(Debug)]
pub struct PassiveOpen {
    now: Instant,
    spec: ConnSpec,
    settings: Arc<TcpSettings>,
    syn: TcpRepr,
    route: Route,
    user_mss: Option<u32>,
}

impl NewConn {
    /// The connection, in SYN-RECEIVED.
    #[inline]
    pub fn into_tcb(self) -> Tcb {
        match self {
            NewConn::Syn(o) => {
                let PassiveOpen {
                    now,
                    spec,
                    settings,
                    syn,
                    route,
                    user_mss,
                } = o;
                let lso_max = settings.lso_max;
                // Any text on the SYN is not taken (no TCP Fast Open); the peer
                // retransmits it.
                let mut tcb = Tcb::accept(now, spec, settings, &syn);
                finish(&mut tcb, route, lso_max, user_mss);
                tcb
            }
            NewConn::Cookie(t) => *t,
        }
    }
}

/// [`Endpoint::handle_segment`]'s answer.
#[derive(Debug)]
pub struct Verdict<L> {
    /// Remove the connection found before carrying out `action` (RFC 6191: a SYN took
    /// over its TIME-WAIT).
    pub retire_found: bool,
    /// The segment met a closed port: no connection and no listener (tcpInClosed).
    pub closed_port: bool,
    pub action: Action<L>,
}

impl<L> Verdict<L> {
    fn of(action: Action<L>) -> Self {
        Verdict {
            retire_found: false,
            closed_port: false,
            action,
        }
    }
}

/// Counters of what reached no connection, or changed which connection a segment
/// reaches (kstat names in `host::stats::TcpStats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// Segments that reached no connection (part of tcpInSegs).
    pub in_segs: u64,
    /// Of those, malformed ones (port 0).
    pub in_errs: u64,
    /// Segments to a port nobody listens on (tcpInClosed).
    pub in_closed: u64,
    /// RSTs sent for segments that reached no connection.
    pub out_rsts: u64,
    /// RSTs not sent: `tcp_rst_sent_rate` (tcpRstDropped).
    pub rst_rate_limited: u64,
    pub passive_opens: u64,
    /// SYNs dropped: accept queue full (tcpListenDrop).
    pub listen_drop: u64,
    /// SYNs dropped: SYN queue full and no cookies (tcpListenDropQ0).
    pub listen_drop_q0: u64,
    pub syncookies_sent: u64,
    pub syncookies_recv: u64,
    pub syncookies_failed: u64,
    /// Connections not made: `tcp_max_conns` (tcpConnLimitDrops).
    pub conn_limit_drops: u64,
    /// Data segments taken without their data: `tcp_mem_max` (tcpRcvMemDrops).
    pub mem_drops: u64,
    /// TIME-WAIT connections a new incarnation took over (RFC 6191).
    pub time_wait_reuse: u64,
}

impl EndpointStats {
    /// Adds `o` into `self` (totals over squeues).
    pub fn accumulate(&mut self, o: &EndpointStats) {
        let EndpointStats {
            in_segs,
            in_errs,
            in_closed,
            out_rsts,
            rst_rate_limited,
            passive_opens,
            listen_drop,
            listen_drop_q0,
            syncookies_sent,
            syncookies_recv,
            syncookies_failed,
            conn_limit_drops,
            mem_drops,
            time_wait_reuse,
        } = *o;
        self.in_segs += in_segs;
        self.in_errs += in_errs;
        self.in_closed += in_closed;
        self.out_rsts += out_rsts;
        self.rst_rate_limited += rst_rate_limited;
        self.passive_opens += passive_opens;
        self.listen_drop += listen_drop;
        self.listen_drop_q0 += listen_drop_q0;
        self.syncookies_sent += syncookies_sent;
        self.syncookies_recv += syncookies_recv;
        self.syncookies_failed += syncookies_failed;
        self.conn_limit_drops += conn_limit_drops;
        self.mem_drops += mem_drops;
        self.time_wait_reuse += time_wait_reuse;
    }
}

/// The segment a connection takes when the connections hold `tcp_mem_max`: its data and
/// FIN are dropped unacknowledged (the peer sends them again); its ACK, window and other
/// fields are still taken, so that connections keep sending.
pub fn strip_data(seg: &TcpRepr) -> TcpRepr {
    let mut bare = *seg;
    bare.flags = TcpFlags(seg.flags.0 & !TcpFlags::FIN.0);
    bare
}

/// The TCP endpoint of one owner of connections: its decisions and their counters.
#[derive(Debug, Default, Clone)]
pub struct Endpoint {
    pub stats: EndpointStats,
}

impl Endpoint {
    /// What to do with `a`, which the owner's table maps to `found` (or to nothing).
    pub fn handle_segment<C: Context>(
        &mut self,
        ctx: &mut C,
        now: Instant,
        found: Option<&Tcb>,
        a: &Arrival<'_>,
    ) -> Verdict<C::Listener> {
        let seg = a.seg;
        let wire_segs = u64::from(a.wire_segs.max(1));
        if seg.src_port == 0 || seg.dst_port == 0 {
            self.stats.in_segs += wire_segs;
            self.stats.in_errs += wire_segs;
            return Verdict::of(Action::Drop);
        }
        let Some(tcb) = found else {
            // Segments that reach no connection are counted here; a Tcb counts its own
            // (RFC 4022 tcpInSegs).
            self.stats.in_segs += wire_segs;
            return match ctx.listener(a.local) {
                Some((l, view)) if !view.closed => {
                    Verdict::of(self.listen(ctx, now, l, view, a, None))
                }
                _ => {
                    self.stats.in_closed += 1;
                    Verdict {
                        closed_port: true,
                        ..Verdict::of(self.reset(ctx, now, a))
                    }
                }
            };
        };
        if tcb.time_wait_accepts_syn(seg) {
            if let Some((l, view)) = ctx.listener(a.local).filter(|(_, v)| !v.closed) {
                // RFC 6191: a new incarnation may take over a TIME-WAIT connection; its
                // ISN lies well beyond the old connection's sequence space.
                let iss = tcb.snd_nxt() + TIME_WAIT_ISS_GAP;
                self.stats.in_segs += 1;
                self.stats.time_wait_reuse += 1;
                return Verdict {
                    retire_found: true,
                    ..Verdict::of(self.listen(ctx, now, l, view, a, Some(iss)))
                };
            }
        }
        let strip_data = !a.payload.is_empty() && ctx.mem_full();
        if strip_data {
            self.stats.mem_drops += 1;
        }
        Verdict::of(Action::Deliver { strip_data })
    }

    /// RFC 9293 §3.10.7.1 (CLOSED): a RST unless the segment is a RST (or, as FireEngine's
    /// classifier does, carries URG). RSTs to this stack's own addresses are always sent
    /// (a local connect() to a closed port is refused at once, as on Linux, which limits
    /// no RST); others are limited by `tcp_rst_sent_rate`, as Solaris's
    /// `tcp_rst_sent_rate` limits them, and the suppressed ones counted.
    fn reset<C: Context>(
        &mut self,
        ctx: &mut C,
        now: Instant,
        a: &Arrival<'_>,
    ) -> Action<C::Listener> {
        let Some(repr) = a.seg.reset_reply(a.payload.len()) else {
            return Action::Drop;
        };
        if !ctx.is_local(*a.remote.ip()) && !ctx.rst_allowed(now) {
            self.stats.rst_rate_limited += 1;
            return Action::Drop;
        }
        self.stats.out_rsts += 1;
        Action::Reply {
            repr,
            cookie_for: None,
        }
    }

    /// RFC 9293 §3.10.7.2 (LISTEN): a SYN makes a connection, or, when the SYN queue is
    /// full (`tcp_syncookies`), draws a cookie SYN,ACK (RFC 4987 §3.6); an ACK that
    /// returns a cookie makes the connection; other ACKs draw a RST. `iss`: the ISS of a
    /// new incarnation of a TIME-WAIT connection.
    fn listen<C: Context>(
        &mut self,
        ctx: &mut C,
        now: Instant,
        l: C::Listener,
        view: ListenerView,
        a: &Arrival<'_>,
        iss: Option<SeqNum>,
    ) -> Action<C::Listener> {
        match ListenVerdict::of(a.seg) {
            ListenVerdict::Ignore => return Action::Drop,
            ListenVerdict::Reset => {
                return match self.cookie_ack(ctx, now, &view, a) {
                    Some(Some(tcb)) => Action::Accept {
                        listener: l,
                        conn: NewConn::Cookie(Box::new(tcb)),
                        cookie: true,
                    },
                    Some(None) => Action::Drop,
                    None => self.reset(ctx, now, a),
                };
            }
            ListenVerdict::Open => {}
        }
        if view.accept_queued >= view.backlog {
            self.stats.listen_drop += 1;
            return Action::Drop;
        }
        let cookies = ctx.syncookies();
        let q0_full = view.syn_queued >= ctx.syn_queue_max();
        if q0_full && cookies == 0 {
            self.stats.listen_drop_q0 += 1;
            return Action::Drop;
        }
        let Some(route) = ctx.route(*a.remote.ip()) else {
            return Action::Drop;
        };
        if !ctx.conn_room() {
            // `tcp_max_conns`: not even a cookie (its ACK would find no room either).
            self.stats.conn_limit_drops += 1;
            return Action::Drop;
        }
        let set = ctx.settings();
        if (q0_full || cookies == 2) && iss.is_none() {
            let g = ctx.isn();
            let Some(repr) = syncookie::syn_ack(
                g,
                now,
                a.local,
                a.remote,
                a.seg,
                &set,
                route.mtu,
                view.user_mss,
            ) else {
                return Action::Drop;
            };
            self.stats.syncookies_sent += 1;
            return Action::Reply {
                repr,
                cookie_for: Some(l),
            };
        }
        let g = ctx.isn();
        let spec = ConnSpec {
            local: a.local,
            remote: a.remote,
            iss: iss.unwrap_or_else(|| g.isn(now, a.local, a.remote)),
            ts_offset: g.ts_offset(a.local, a.remote),
            mtu: route.mtu,
        };
        Action::Accept {
            listener: l,
            conn: NewConn::Syn(PassiveOpen {
                now,
                spec,
                settings: set,
                syn: *a.seg,
                route,
                user_mss: view.user_mss,
            }),
            cookie: false,
        }
    }

    /// RFC 4987 §3.6: an ACK at a listener that may return a cookie. `None`: not a cookie
    /// (answer as any ACK at a listener); `Some(None)`: a valid cookie that finds no room
    /// (dropped, as Linux does: the peer's retransmission tries again); `Some(Some)`: the
    /// connection, rebuilt in SYN-RECEIVED, which has taken the ACK.
    fn cookie_ack<C: Context>(
        &mut self,
        ctx: &mut C,
        now: Instant,
        view: &ListenerView,
        a: &Arrival<'_>,
    ) -> Option<Option<Tcb>> {
        if !syncookie::checks_acks(ctx.syncookies(), view.cookie_at, now) {
            return None;
        }
        let route = ctx.route(*a.remote.ip())?;
        let set = ctx.settings();
        let lso_max = set.lso_max;
        let Some(tcb) =
            syncookie::rebuild(ctx.isn(), now, a.local, a.remote, a.seg, &set, route.mtu)
        else {
            self.stats.syncookies_failed += 1;
            return None;
        };
        if view.accept_queued >= view.backlog {
            self.stats.listen_drop += 1;
            return Some(None);
        }
        if !ctx.conn_room() {
            self.stats.conn_limit_drops += 1;
            return Some(None);
        }
        let mut tcb = tcb;
        finish(&mut tcb, route, lso_max, view.user_mss);
        tcb.handle_segment(now, a.seg, a.payload);
        Some(Some(tcb))
    }
}

/// What every passive connection gets from its route and its listener.
fn finish(tcb: &mut Tcb, route: Route, lso_max: u32, user_mss: Option<u32>) {
    if route.lso {
        tcb.set_lso_max(lso_max);
    }
    if let Some(m) = user_mss {
        // Range-checked when it was set on the listener.
        let _ = tcb.set_user_mss(m);
    }
}
