//! Probes: the probe points, their events, the in-process subscribers, and firing (the
//! USDT side is `usdt.rs`).

use super::perimeter::TcpPerimeter;
use super::{usdt, Stack, StackInner};
use crate::squeue::Mode;
use std::net::SocketAddrV4;
use std::sync::atomic::Ordering;
use std::sync::Arc;

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

pub(super) type Subscriber = Arc<dyn Fn(&ProbeEvent) + Send + Sync>;

impl StackInner {
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
        if (u16::from(self.probes_on.load(Ordering::Relaxed)) | usdt::semaphore(p)) == 0 {
            return;
        }
        self.fire(&ProbeEvent::new(p, sq, local, remote, len, arg));
    }

    /// Hands `ev` to its USDT probe and to the in-process subscribers (out of line: only
    /// when someone listens).
    #[cold]
    #[inline(never)]
    pub(crate) fn fire(&self, ev: &ProbeEvent) {
        usdt::fire(ev);
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
}

impl Stack {
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
                sq.with(|p: &mut TcpPerimeter| p.probing = true);
            } else {
                sq.enter(Mode::Fill, u64::MAX, |p: &mut TcpPerimeter| {
                    p.probing = true
                });
            }
        }
    }
}
