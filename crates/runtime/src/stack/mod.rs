//! A FireEngine stack: squeues, the classifier, the IP layer, devices, tunables,
//! counters and probes, put together.
//!
//! # Design
//! * **Squeues** ([`crate::squeue`]): one per CPU given to the stack, each with a worker
//!   thread pinned to its CPU. Each owns a [`perimeter::TcpPerimeter`]: its TCP
//!   connections and their timer wheel. Connection state is touched only there.
//! * **Classifier** ([`crate::classifier`]): a sharded connected table and a bind table,
//!   read without a global lock; it says which squeue a segment goes to.
//! * **IP layer** (`ip.rs`): for traffic on devices, the protocol core's [`IpLayer`]
//!   (ARP, ICMP, UDP, fragmentation and reassembly, GRO, GSO) behind one mutex. A device
//!   batch takes the lock once; the IP layer hands the batch's TCP segments to a sink
//!   that collects them (`inbound.rs`), and once the lock is let go each goes to its
//!   squeue after one classifier lookup. Established connections cache their next hop
//!   and send frames to the device directly. Loopback TCP (127/8 and the stack's own
//!   addresses) never touches it: a segment goes from one perimeter to the other by a
//!   direct call, without checksums, as on Linux `lo`.
//! * **Binding**: an outbound connection goes to the squeue of the CPU its caller runs on
//!   (and its ephemeral port is chosen so the reply's flow hash lands there); an inbound
//!   one to the squeue of the queue its SYN arrived on; one accepted from a local client
//!   to the client's squeue (the SYN arrives through the client's loopback path), so the
//!   two ends share a squeue and can fuse.
//! * **Probes** (docs/PROBES.md, `probes.rs`): an in-process subscriber API and the same
//!   probes as USDT probes (`usdt.rs`) for bpftrace or DTrace; with no subscriber and no
//!   tracer a probe costs the loads of the subscriber flag and of the probe's USDT
//!   semaphore and one predictable branch.
//! * **Filter** (`filter.rs`): a minimal IP filter (drop rules by protocol, addresses and
//!   ports). Adding a rule unfuses every fused connection it matches, because fused data
//!   would bypass it.
//! * **Counters** (`kstat.rs`): the runtime's counters declared in tables with their
//!   kstat names, summed over the squeues with the core's MIB groups.
//!
//! The other files: `builder.rs` builds a stack (squeues, workers, interfaces, routes);
//! `rx_wakeup.rs` is a device's receive wake-up entering its squeue; `txq.rs` the
//! transmit queues in front of the devices; this file the state all of them share
//! ([`StackInner`]), the [`Stack`] handle, tunables and shutdown.

mod builder;
mod filter;
mod inbound;
mod ip;
mod kstat;
pub(crate) mod perimeter;
mod probes;
mod rx_wakeup;
pub(crate) mod txq;
#[allow(unsafe_code)]
mod usdt;

pub use builder::{IfaceConfig, StackBuilder};
pub use filter::FilterRule;
pub(crate) use inbound::{Inbound, InboundItem};
pub use kstat::{PerimeterStats, StackStats};
pub use probes::{Probe, ProbeEvent};
pub use txq::TxStats;

use crate::classifier::Classifier;
use crate::dev::Device;
use crate::squeue::{Mode, Squeue};
use ember_core::host::{rst_bucket, IpLayer};
use ember_core::icmp::ratelimit::TokenBucket;
use ember_core::params::{ParamError, Params};
use ember_core::tcp::isn::IsnGenerator;
use ember_core::tcp::{TcbInfo, TcpSettings};
use ember_core::time::Instant;
use ember_core::wire::MacAddr;
use perimeter::{Segment, TcpPerimeter};
use probes::Subscriber;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

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
    tcp_set: RwLock<Arc<TcpSettings>>,
    /// The transmit side's settings (`txq.rs`), and a generation the squeues compare
    /// with theirs to pick up a change.
    tx_cfg: RwLock<txq::TxConfig>,
    pub(crate) tx_gen: AtomicU64,
    pub(crate) squeues: Vec<Arc<Squeue<TcpPerimeter>>>,
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
    /// `TcpPerimeter::recharge`).
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

    pub(crate) fn tcp_settings(&self) -> Arc<TcpSettings> {
        Arc::clone(&self.tcp_set.read().unwrap_or_else(|e| e.into_inner()))
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

    /// A segment for a connection on squeue `sq`: enter it (inline when idle and the
    /// thread may nest, queued otherwise).
    pub(crate) fn to_squeue(&self, sq: usize, tag: u64, seg: Segment) {
        if let Some(q) = self.squeues.get(sq) {
            q.enter(Mode::Process, tag, perimeter::seg_work(seg));
        }
    }

    /// Loopback segments one entry could not finish: continue later on the same squeue.
    pub(crate) fn requeue_lo(&self, sq: usize, segs: Vec<Segment>) {
        let Some(q) = self.squeues.get(sq) else {
            return;
        };
        q.enter(Mode::Fill, u64::MAX, move |p: &mut TcpPerimeter| {
            if let Some(st) = p.stack.upgrade() {
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
            if n > 1 && perimeter::rss_queue(&(cand, remote), n) != sq {
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
            .unwrap_or_else(|e| e.into_inner()) = Arc::new(TcpSettings::from_params(&p));
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

    /// Every TCP connection: snapshot, squeue, fused.
    pub fn netstat(&self) -> Vec<(TcbInfo, usize, bool)> {
        let mut v = Vec::new();
        for sq in &self.inner.squeues {
            v.extend(sq.with(|p: &mut TcpPerimeter| p.netstat()));
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
            sq.with(|p: &mut TcpPerimeter| {
                if let Some(st) = p.stack.upgrade() {
                    p.abort_all(&st, crate::clock::now());
                }
                p.rx_devs.clear();
            });
            sq.shutdown();
        }
        // Wake whoever waits on a listener or a UDP socket: their next call fails.
        for l in self.inner.classifier.listeners() {
            l.waitable
                .raise(crate::socket::ready::ACCEPT | crate::socket::ready::HUP);
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
            u.waitable
                .raise(crate::socket::ready::READ | crate::socket::ready::HUP);
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
