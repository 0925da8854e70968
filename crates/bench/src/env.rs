//! Variants and the environments they run in.
//!
//! A *variant* names one way of carrying a byte stream between two threads of this
//! process (the names are the spec's: `ember-fused`, `ember-loopback`, `ember-wire`,
//! `ember-tap`, `kernel-tcp`, `kernel-unix`, `limit-spin`, `limit-memcpy`). An [`Env`] is a
//! fresh instance of one: for ember, one stack (fused, loopback) or two stacks joined by an
//! in-memory Ethernet link whose ends are wrapped in a [`WireTap`] that counts what crosses
//! it; for the kernel, an address on 127.0.0.1 or a Unix socket path. Benches ask it for a
//! [`Listener`] and [`Conn`]s, which hide the socket type behind one `Read + Write` enum so
//! that every variant runs exactly the same workload code.
//!
//! A fresh `Env` per measured round keeps rounds independent (no TIME_WAIT left over from
//! the previous round, no warmed classifier); dropping it shuts its stacks down.

use ember_runtime::dev::{mem_link, Device, ImpairConfig};
use ember_runtime::{IfaceConfig, Stack, TcpListener, TcpStream};
use std::io::{self, IoSlice, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// One way of carrying the benchmark's traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Variant {
    /// Two sockets of one ember stack, fusion on.
    EmberFused,
    /// The same with `do_tcp_fusion=0`: full TCP/IP over ember's loopback.
    EmberLoopback,
    /// Two ember stacks joined by an in-memory Ethernet link.
    EmberWire,
    /// ember on a TAP device against the kernel's TCP (root only).
    EmberTap,
    /// Linux TCP over 127.0.0.1.
    KernelTcp,
    /// Unix-domain stream sockets.
    KernelUnix,
    /// Two threads handing a flag back and forth, spinning.
    LimitSpin,
    /// memcpy of the stream's writes: the cost of the one copy a stream cannot avoid.
    LimitMemcpy,
    /// Two processes under `ember run` (the preload library), fused across processes.
    EmberXproc,
    /// The same with the library's fusion off (`do_tcp_fusion=0`): its pass-through cost.
    EmberXprocOff,
}

impl Variant {
    /// Every variant, in report order.
    pub const ALL: [Variant; 10] = [
        Variant::EmberFused,
        Variant::EmberLoopback,
        Variant::EmberWire,
        Variant::EmberTap,
        Variant::KernelTcp,
        Variant::KernelUnix,
        Variant::LimitSpin,
        Variant::LimitMemcpy,
        Variant::EmberXproc,
        Variant::EmberXprocOff,
    ];

    /// The variant's name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Variant::EmberFused => "ember-fused",
            Variant::EmberLoopback => "ember-loopback",
            Variant::EmberWire => "ember-wire",
            Variant::EmberTap => "ember-tap",
            Variant::KernelTcp => "kernel-tcp",
            Variant::KernelUnix => "kernel-unix",
            Variant::LimitSpin => "limit-spin",
            Variant::LimitMemcpy => "limit-memcpy",
            Variant::EmberXproc => "ember-xproc",
            Variant::EmberXprocOff => "ember-xproc-off",
        }
    }

    /// Parses a name given on the command line.
    pub fn parse(s: &str) -> Option<Variant> {
        Variant::ALL.into_iter().find(|v| v.name() == s)
    }

    /// ember's own variants (the ones ratios are taken of).
    pub fn is_ember(self) -> bool {
        matches!(
            self,
            Variant::EmberFused
                | Variant::EmberLoopback
                | Variant::EmberWire
                | Variant::EmberTap
                | Variant::EmberXproc
                | Variant::EmberXprocOff
        )
    }

    /// Why this variant cannot run here, if it cannot.
    pub fn unavailable(self) -> Option<String> {
        match self {
            // SAFETY: geteuid has no preconditions and cannot fail.
            Variant::EmberTap => ember_runtime::dev::netns::privileged().err(),
            Variant::EmberXproc | Variant::EmberXprocOff => {
                crate::benches::xproc::library().is_none().then(|| {
                    "libember_preload.so is not beside the ember binary (build the workspace: \
                     cargo build --release) and EMBER_PRELOAD is not set"
                        .to_string()
                })
            }
            _ => None,
        }
    }
}

/// How to build an environment.
#[derive(Debug, Clone)]
pub struct EnvConfig {
    /// IP MTU of the `ember-wire` link.
    pub mtu: u32,
    /// Squeues per ember stack.
    pub squeues: usize,
    /// Tunables applied to every ember stack (after the variant's own).
    pub params: Vec<(String, String)>,
    /// Impairment of the `ember-wire` link (each direction); rate, delay, queue.
    pub link: ImpairConfig,
}

impl Default for EnvConfig {
    fn default() -> Self {
        EnvConfig {
            mtu: 1500,
            squeues: 1,
            params: Vec::new(),
            link: ImpairConfig::default(),
        }
    }
}

/// The client stack's address on the `ember-wire` link.
pub const WIRE_CLIENT: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// The server stack's address on the `ember-wire` link.
pub const WIRE_SERVER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// The port every bench server listens on.
pub const PORT: u16 = 5001;

/// A fresh instance of a variant.
pub struct Env {
    pub variant: Variant,
    /// The stack the server side lives in (ember variants).
    pub server: Option<Stack>,
    /// The stack the client side lives in (the same stack unless `ember-wire`).
    pub client: Option<Stack>,
    /// `ember-wire`: the taps on the client's and the server's link ends.
    pub taps: Option<(Arc<WireTap>, Arc<WireTap>)>,
    /// `ember-tap`: the namespace with the TAP, the kernel's side, and the tap on ember's
    /// end of it.
    tap_side: Option<TapSide>,
    addr: SocketAddrV4,
    unix_path: Option<PathBuf>,
    /// The ember stacks' control sockets (`ember ls`, `ndd`, `kstat`, `netstat` reach a
    /// bench while it runs).
    _controls: Vec<ember_runtime::control::ControlServer>,
}

fn stack_builder(cfg: &EnvConfig, fusion: bool) -> io::Result<ember_runtime::StackBuilder> {
    // All at once: relations between tunables are checked after the last, so the order
    // of the settings does not matter.
    let mut p = ember_core::Params {
        do_tcp_fusion: fusion,
        ..ember_core::Params::default()
    };
    p.set_many(&cfg.params).map_err(param_err)?;
    Ok(Stack::builder().squeues(cfg.squeues.max(1)).params(p))
}

fn param_err(e: ember_core::params::ParamError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e.to_string())
}

static UNIX_SEQ: AtomicU64 = AtomicU64::new(0);

impl Env {
    /// Builds a fresh environment for `variant`.
    pub fn new(variant: Variant, cfg: &EnvConfig) -> io::Result<Env> {
        if let Some(why) = variant.unavailable() {
            return Err(io::Error::new(io::ErrorKind::Unsupported, why));
        }
        let lo = SocketAddrV4::new(Ipv4Addr::LOCALHOST, PORT);
        let mut env = Env {
            variant,
            server: None,
            client: None,
            taps: None,
            tap_side: None,
            addr: lo,
            unix_path: None,
            _controls: Vec::new(),
        };
        match variant {
            Variant::EmberFused | Variant::EmberLoopback => {
                let s = stack_builder(cfg, variant == Variant::EmberFused)?.build()?;
                env.client = Some(s.clone());
                env.server = Some(s);
            }
            Variant::EmberWire => {
                let mut link = cfg.link.clone();
                link.mtu = cfg.mtu as usize;
                let (ea, eb) = mem_link(link.clone(), link, 1);
                let ta = Arc::new(WireTap::new(ea));
                let tb = Arc::new(WireTap::new(eb));
                let iface = |addr| IfaceConfig {
                    addr,
                    prefix_len: 24,
                    mac: None,
                    mtu: Some(cfg.mtu),
                };
                let a = stack_builder(cfg, true)?
                    .interface(iface(WIRE_CLIENT), ta.clone())
                    .build()?;
                let b = stack_builder(cfg, true)?
                    .interface(iface(WIRE_SERVER), tb.clone())
                    .build()?;
                env.client = Some(a);
                env.server = Some(b);
                env.taps = Some((ta, tb));
                env.addr = SocketAddrV4::new(WIRE_SERVER, PORT);
            }
            Variant::KernelTcp => {
                // The kernel picks the port (0) at listen time; see `listen`.
                env.addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
            }
            Variant::KernelUnix => {
                let n = UNIX_SEQ.fetch_add(1, Ordering::Relaxed);
                let p = std::env::temp_dir()
                    .join(format!("ember-bench-{}-{n}.sock", std::process::id()));
                let _ = std::fs::remove_file(&p);
                env.unix_path = Some(p);
            }
            Variant::EmberTap => {
                let side = TapSide::new(cfg)?;
                let iface = IfaceConfig {
                    addr: WIRE_SERVER,
                    prefix_len: 24,
                    mac: None,
                    mtu: Some(cfg.mtu),
                };
                let b = stack_builder(cfg, true)?
                    .interface(iface, side.wiretap.clone())
                    .build()?;
                env.server = Some(b);
                env.tap_side = Some(side);
                env.addr = SocketAddrV4::new(WIRE_SERVER, PORT);
            }
            Variant::LimitSpin | Variant::LimitMemcpy => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("{} carries no sockets", variant.name()),
                ));
            }
            Variant::EmberXproc | Variant::EmberXprocOff => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!(
                        "{} runs two processes: only `bench xproc` runs it",
                        variant.name()
                    ),
                ));
            }
        }
        // Best effort: a bench runs the same without (e.g. no writable control directory).
        let mut stacks: Vec<&Stack> = env.server.iter().collect();
        if let Some(c) = &env.client {
            if env.server.as_ref().is_none_or(|s| !s.same_stack(c)) {
                stacks.push(c);
            }
        }
        let controls = stacks
            .into_iter()
            .filter_map(|s| s.serve_control().ok())
            .collect();
        env._controls = controls;
        Ok(env)
    }

    /// The server's address (TCP variants).
    pub fn addr(&self) -> SocketAddrV4 {
        self.addr
    }

    /// The Unix socket path of a `kernel-unix` environment (`None` for the others), for
    /// a bench that connects with its own calls (`libmicro` times `socket()` apart from
    /// `connect()`).
    pub fn unix_path(&self) -> Option<&std::path::Path> {
        self.unix_path.as_deref()
    }

    /// Opens the server's listening socket. For `kernel-tcp` this fixes the port.
    pub fn listen(&mut self) -> io::Result<Listener> {
        match self.variant {
            Variant::KernelTcp => {
                let l = std::net::TcpListener::bind(self.addr)?;
                if let SocketAddr::V4(a) = l.local_addr()? {
                    self.addr = a;
                }
                Ok(Listener::Tcp(l))
            }
            Variant::KernelUnix => {
                let p = self.unix_path.as_ref().expect("unix env has a path");
                Ok(Listener::Unix(UnixListener::bind(p)?))
            }
            _ => {
                let s = self.server.as_ref().expect("ember env has a server stack");
                Ok(Listener::Ember(TcpListener::bind(s, self.addr)?))
            }
        }
    }

    /// The tap on the server's link end (`ember-wire`, `ember-tap`).
    pub fn server_tap(&self) -> Option<Arc<WireTap>> {
        match (&self.taps, &self.tap_side) {
            (Some((_, s)), _) => Some(s.clone()),
            (None, Some(t)) => Some(t.wiretap.clone()),
            _ => None,
        }
    }

    /// Connects a client to the listener.
    pub fn connect(&self) -> io::Result<Conn> {
        match self.variant {
            Variant::EmberTap => {
                let side = self.tap_side.as_ref().expect("ember-tap env has its side");
                Ok(Conn::Tcp(side.connect(self.addr)?))
            }
            Variant::KernelTcp => Ok(Conn::Tcp(std::net::TcpStream::connect(self.addr)?)),
            Variant::KernelUnix => {
                let p = self.unix_path.as_ref().expect("unix env has a path");
                Ok(Conn::Unix(UnixStream::connect(p)?))
            }
            _ => {
                let s = self.client.as_ref().expect("ember env has a client stack");
                Ok(Conn::Ember(TcpStream::connect(s, self.addr)?))
            }
        }
    }

    /// A connected pair `(client, server)` on a fresh listener (closed afterwards).
    pub fn pair(&mut self) -> io::Result<(Conn, Conn)> {
        let l = self.listen()?;
        let c = self.connect()?;
        let s = l.accept()?;
        Ok((c, s))
    }

    /// A counter of the client's ember stack (`kstat` name), 0 if absent.
    pub fn kstat(&self, stack: &Stack, name: &str) -> u64 {
        stack
            .kstat()
            .into_iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, v)| v)
    }
}

impl Env {
    /// Shuts the environment's ember stacks down (blocked calls on them return errors).
    pub fn shutdown(&self) {
        if let Some(s) = &self.client {
            s.shutdown();
        }
        if let Some(s) = &self.server {
            s.shutdown();
        }
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        self.shutdown();
        // Then the TAP, its namespace thread and the namespace (in that order).
        self.tap_side = None;
        if let Some(p) = &self.unix_path {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The kernel's side of `ember-tap`: a network namespace with a TAP interface in it
/// (kernel 198.18.0.1/24, ember 198.18.0.2/24 on the descriptor). The TAP is opened by a
/// short-lived thread that enters the namespace (so the interface is created there); the
/// kernel's client sockets are made by the bench's own threads, each stepping into the
/// namespace for the `connect` (a socket belongs to the namespace it was made in). One TAP
/// queue, with the virtio-net header and offload on; the interface MTU is the bench's
/// `--mtu`.
struct TapSide {
    wiretap: Arc<WireTap>,
    tap: Option<ember_runtime::dev::Tap>,
    ns_file: std::fs::File,
    _ns: ember_runtime::dev::netns::NetNs,
}

static TAP_SEQ: AtomicU64 = AtomicU64::new(0);

impl TapSide {
    fn new(cfg: &EnvConfig) -> io::Result<TapSide> {
        use ember_runtime::dev::netns::NetNs;
        use ember_runtime::dev::{Tap, TapConfig};
        let n = TAP_SEQ.fetch_add(1, Ordering::Relaxed);
        let ns = NetNs::create(&format!("ember-bench-{}-{n}", std::process::id()))?;
        let name = ns.name().to_string();
        let mtu = cfg.mtu;
        let tap = std::thread::Builder::new()
            .name("bench-tap-ns".into())
            .spawn(move || {
                ember_runtime::dev::netns::enter(&name).and_then(|()| {
                    let mut c = TapConfig::new("ebench0");
                    c.offload = true;
                    c.mtu = Some(mtu);
                    Tap::open(&c)
                })
            })?
            .join()
            .map_err(|_| io::Error::other("the namespace thread panicked"))??;
        let ns_file = std::fs::File::open(format!("/var/run/netns/{}", ns.name()))?;
        ns.ip(&["addr", "add", "198.18.0.1/24", "dev", "ebench0"])?;
        ns.ip(&["link", "set", "ebench0", "up"])?;
        let dev = tap.devices().pop().expect("one queue");
        Ok(TapSide {
            wiretap: Arc::new(WireTap::new(dev)),
            tap: Some(tap),
            ns_file,
            _ns: ns,
        })
    }

    fn connect(&self, addr: SocketAddrV4) -> io::Result<std::net::TcpStream> {
        ember_runtime::dev::netns::within(&self.ns_file, || {
            std::net::TcpStream::connect_timeout(
                &SocketAddr::V4(addr),
                std::time::Duration::from_secs(5),
            )
        })?
    }
}

impl Drop for TapSide {
    fn drop(&mut self) {
        // Our handle on the TAP goes before the namespace is deleted; the stack still
        // holds its queue until the environment's stacks drop, and the namespace lingers
        // (unnamed) until that last descriptor closes.
        self.tap = None;
    }
}

/// A listening socket of any variant.
pub enum Listener {
    Ember(TcpListener),
    Tcp(std::net::TcpListener),
    Unix(UnixListener),
}

impl Listener {
    /// Accepts one connection.
    pub fn accept(&self) -> io::Result<Conn> {
        Ok(match self {
            Listener::Ember(l) => Conn::Ember(l.accept()?.0),
            Listener::Tcp(l) => Conn::Tcp(l.accept()?.0),
            Listener::Unix(l) => Conn::Unix(l.accept()?.0),
        })
    }
}

/// A connected stream of any variant.
pub enum Conn {
    Ember(TcpStream),
    Tcp(std::net::TcpStream),
    Unix(UnixStream),
}

impl Conn {
    /// `TCP_NODELAY` (a no-op for Unix sockets, which have no Nagle).
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        match self {
            Conn::Ember(s) => s.set_nodelay(on),
            Conn::Tcp(s) => s.set_nodelay(on),
            Conn::Unix(_) => Ok(()),
        }
    }

    /// `TCP_CORK`.
    pub fn set_cork(&self, on: bool) -> io::Result<()> {
        match self {
            Conn::Ember(s) => s.set_cork(on),
            Conn::Tcp(s) => setsockopt_int(s.as_raw_fd(), libc::TCP_CORK, on as libc::c_int),
            Conn::Unix(_) => Ok(()),
        }
    }

    /// `SO_RCVTIMEO`.
    pub fn set_read_timeout(&self, t: Option<std::time::Duration>) -> io::Result<()> {
        match self {
            Conn::Ember(s) => s.set_read_timeout(t),
            Conn::Tcp(s) => s.set_read_timeout(t),
            Conn::Unix(s) => s.set_read_timeout(t),
        }
    }

    /// `SO_RCVTIMEO` and `SO_SNDTIMEO`.
    pub fn set_timeouts(&self, t: Option<std::time::Duration>) -> io::Result<()> {
        self.set_read_timeout(t)?;
        match self {
            Conn::Ember(s) => s.set_write_timeout(t),
            Conn::Tcp(s) => s.set_write_timeout(t),
            Conn::Unix(s) => s.set_write_timeout(t),
        }
    }

    /// `O_NONBLOCK`.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Conn::Ember(s) => s.set_nonblocking(on),
            Conn::Tcp(s) => s.set_nonblocking(on),
            Conn::Unix(s) => s.set_nonblocking(on),
        }
    }

    /// `shutdown(2)`.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        match self {
            Conn::Ember(s) => s.shutdown(how),
            Conn::Tcp(s) => s.shutdown(how),
            Conn::Unix(s) => s.shutdown(how),
        }
    }

    /// Bytes waiting to be read (`FIONREAD`).
    pub fn recv_queued(&self) -> io::Result<usize> {
        match self {
            Conn::Ember(s) => Ok(s.recv_available()),
            Conn::Tcp(s) => fionread(s.as_raw_fd()),
            Conn::Unix(s) => fionread(s.as_raw_fd()),
        }
    }

    /// TCP segments carrying data that this socket has sent, where the variant can count
    /// them: the kernel's `tcpi_data_segs_out`. ember-wire counts from the wire instead
    /// ([`WireTap`]); fused connections send none.
    pub fn kernel_data_segs_out(&self) -> Option<u64> {
        match self {
            Conn::Tcp(s) => kernel_tcp_info(s.as_raw_fd())
                .ok()
                .map(|i| u64::from(i.tcpi_data_segs_out)),
            _ => None,
        }
    }

    /// The ember socket, if this is one.
    pub fn ember(&self) -> Option<&TcpStream> {
        match self {
            Conn::Ember(s) => Some(s),
            _ => None,
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Ember(s) => s.read(buf),
            Conn::Tcp(s) => s.read(buf),
            Conn::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Ember(s) => s.write(buf),
            Conn::Tcp(s) => s.write(buf),
            Conn::Unix(s) => s.write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Conn::Ember(s) => s.write_vectored(bufs),
            Conn::Tcp(s) => s.write_vectored(bufs),
            Conn::Unix(s) => s.write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn setsockopt_int(fd: libc::c_int, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: `fd` is an open socket owned by the caller's stream for the duration of the
    // call; the option value is a live c_int whose size is passed alongside it.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn fionread(fd: libc::c_int) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the pointer, which points at `n`.
    let r = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n as *mut libc::c_int) };
    if r == 0 {
        Ok(n.max(0) as usize)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The kernel's `TCP_INFO` for a socket.
pub fn kernel_tcp_info(fd: libc::c_int) -> io::Result<libc::tcp_info> {
    // SAFETY: tcp_info is plain old data (integers only); all-zero is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `info`, which is that large and
    // lives across the call; `len` is updated in place.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if r == 0 {
        Ok(info)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A device wrapper that counts the TCP traffic an interface transmits: segments with
/// data, payload bytes, and the instant of the latest FIN. It is how `nagle` counts
/// segments per message and how `lsofin` times a FIN "on the wire".
pub struct WireTap {
    inner: Arc<dyn Device>,
    /// Frames transmitted.
    pub frames: AtomicU64,
    /// TCP segments with a payload.
    pub data_segments: AtomicU64,
    /// TCP payload bytes.
    pub payload_bytes: AtomicU64,
    /// TCP segments with FIN.
    pub fins: AtomicU64,
    last_fin: Mutex<Option<Instant>>,
}

/// What [`WireTap`] sees in one frame: `(payload length, FIN)` of a TCP segment over
/// IPv4 over Ethernet (checksums not verified: the tap counts, the stack judges).
pub fn tcp_in_frame(f: &[u8]) -> Option<(usize, bool)> {
    use ember_core::wire::{ethertype, ip_proto, EthernetRepr, Ipv4Repr, TcpRepr};
    let (eth, ip) = EthernetRepr::parse(f).ok()?;
    if eth.ethertype != ethertype::IPV4 {
        return None;
    }
    let (ipr, seg) = Ipv4Repr::parse(ip, false).ok()?;
    if ipr.protocol != ip_proto::TCP {
        return None;
    }
    let (tcp, payload) = TcpRepr::parse(seg, ipr.src, ipr.dst, false).ok()?;
    Some((payload.len(), tcp.flags.fin()))
}

impl WireTap {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Device>) -> WireTap {
        WireTap {
            inner,
            frames: AtomicU64::new(0),
            data_segments: AtomicU64::new(0),
            payload_bytes: AtomicU64::new(0),
            fins: AtomicU64::new(0),
            last_fin: Mutex::new(None),
        }
    }

    /// When the latest FIN left (if one has).
    pub fn last_fin(&self) -> Option<Instant> {
        *self.last_fin.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl WireTap {
    fn look(&self, frame: &[u8]) {
        self.frames.fetch_add(1, Ordering::Relaxed);
        if let Some((len, fin)) = tcp_in_frame(frame) {
            if len > 0 {
                self.data_segments.fetch_add(1, Ordering::Relaxed);
                self.payload_bytes.fetch_add(len as u64, Ordering::Relaxed);
            }
            if fin {
                *self.last_fin.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
                self.fins.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl Device for WireTap {
    fn transmit_batch(&self, frames: &mut Vec<Vec<u8>>) {
        for f in frames.iter() {
            self.look(f);
        }
        self.inner.transmit_batch(frames);
    }

    fn transmit(&self, frame: Vec<u8>) {
        self.look(&frame);
        self.inner.transmit(frame);
    }

    fn poll_rx(&self, now: ember_core::time::Instant, out: &mut Vec<Vec<u8>>, budget: usize) {
        self.inner.poll_rx(now, out, budget)
    }

    fn next_rx(&self) -> Option<ember_core::time::Instant> {
        self.inner.next_rx()
    }

    fn set_rx_waker(&self, waker: Box<dyn Fn() + Send + Sync>) {
        self.inner.set_rx_waker(waker)
    }

    fn mtu(&self) -> u32 {
        self.inner.mtu()
    }

    fn flush(&self) {
        self.inner.flush()
    }

    fn tx_backlog(&self, now: ember_core::time::Instant) -> Option<ember_runtime::dev::TxBacklog> {
        self.inner.tx_backlog(now)
    }

    fn tso(&self) -> bool {
        self.inner.tso()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.inner.counters()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_names_round_trip() {
        for v in Variant::ALL {
            assert_eq!(Variant::parse(v.name()), Some(v));
        }
        assert_eq!(Variant::parse("ember"), None);
    }

    #[test]
    fn unix_path_is_the_listeners_path_and_only_for_kernel_unix() {
        let mut env = Env::new(Variant::KernelUnix, &EnvConfig::default()).unwrap();
        let p = env.unix_path().unwrap().to_path_buf();
        let _l = env.listen().unwrap();
        assert!(UnixStream::connect(&p).is_ok());
        let tcp = Env::new(Variant::KernelTcp, &EnvConfig::default()).unwrap();
        assert!(tcp.unix_path().is_none());
    }

    #[test]
    fn tap_parses_tcp_frames_and_ignores_the_rest() {
        let mut f = vec![0u8; 14 + 20 + 32 + 5];
        f[12] = 8;
        f[14] = 0x45;
        let total = (20 + 32 + 5) as u16;
        f[16..18].copy_from_slice(&total.to_be_bytes());
        f[23] = 6;
        f[14 + 20 + 12] = 8 << 4; // 32-byte TCP header
        f[14 + 20 + 13] = 0x11; // FIN|ACK
        assert_eq!(tcp_in_frame(&f), Some((5, true)));
        f[23] = 17;
        assert_eq!(tcp_in_frame(&f), None);
        assert_eq!(tcp_in_frame(&f[..20]), None);
        f[23] = 6;
        f[14] = 0x4f; // IHL 60 > what is there
        assert_eq!(tcp_in_frame(&f[..14 + 40]), None);
    }

    #[test]
    fn kernel_unsafe_helpers_work_on_real_sockets() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        setsockopt_int(c.as_raw_fd(), libc::TCP_CORK, 1).unwrap();
        setsockopt_int(c.as_raw_fd(), libc::TCP_CORK, 0).unwrap();
        c.write_all(b"abc").unwrap();
        let info = kernel_tcp_info(c.as_raw_fd()).unwrap();
        assert!(info.tcpi_data_segs_out >= 1);
        let mut b = [0u8; 3];
        (&s).read_exact(&mut b).unwrap();
        c.write_all(b"de").unwrap();
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        while fionread(s.as_raw_fd()).unwrap() < 2 && Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(fionread(s.as_raw_fd()).unwrap(), 2);
        assert!(kernel_tcp_info(-1).is_err());
        assert!(fionread(-1).is_err());
    }
}
