//! Building a stack: its squeues and their workers, interfaces and devices, routes,
//! tunables and secret.

use super::perimeter::TcpPerimeter;
use super::rx_wakeup::RxEntry;
use super::{txq, usdt, HotParams, Stack, StackInner};
use crate::classifier::Classifier;
use crate::dev::Device;
use crate::squeue::Squeue;
use ember_core::host::{rst_bucket, Interface, IpLayer};
use ember_core::ip::route::{IfaceId, Route};
use ember_core::params::{ParamError, Params};
use ember_core::tcp::isn::IsnGenerator;
use ember_core::tcp::TcpSettings;
use ember_core::wire::MacAddr;
use std::io;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

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
                    let mut perim = TcpPerimeter::new(i, weak.clone(), start);
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
                tcp_set: RwLock::new(Arc::new(TcpSettings::from_params(&self.params))),
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
                sq.with(move |p: &mut TcpPerimeter| p.rx_devs.push((iface, dev2)));
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
        usdt::register();
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
