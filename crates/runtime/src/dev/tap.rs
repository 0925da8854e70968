//! TAP: ember on a Linux TAP interface, with the kernel's stack on the other side of it.
//!
//! A TAP interface is an Ethernet link whose far end is a file descriptor: every frame
//! the kernel sends on the interface is a `read(2)` for us, every frame we `write(2)` is a
//! frame the kernel receives on it. ember opens it with `IFF_TAP | IFF_NO_PI` (whole
//! Ethernet frames, no packet-information prefix), optionally with
//!
//! * **several queues** (`IFF_MULTI_QUEUE`): one file descriptor per queue, each a
//!   [`Device`] of its own, handed to the stack with
//!   [`StackBuilder::interface_queues`](crate::StackBuilder::interface_queues): squeue
//!   `i` services queue `i`'s receive side and transmits on it. The kernel's TAP driver
//!   sends a flow's frames to the queue that flow was last written on (its automatic
//!   queue selection hashes both directions alike), so each connection stays on its
//!   squeue end to end;
//! * **offload** (`IFF_VNET_HDR` + `TUNSETOFFLOAD`): every frame carries a virtio-net
//!   header (12 bytes, the `num_buffers` form). Receiving, the kernel may hand us TCP
//!   frames whose checksum is only partial (`NEEDS_CSUM`: we complete it here, in one
//!   pass, before the stack verifies it) and segments of up to 64 KiB that it did not
//!   split (`GSO_TCPV4`: the stack takes them whole; the kernel's GRO/LSO path produced
//!   them). Transmitting, a TCP frame longer than the link MTU leaves as one write with a
//!   `GSO_TCPV4` header, and the kernel segments it (TSO from the kernel's side).
//!
//! The descriptor is non-blocking. Reception has no interrupt to hook, so each queue has a
//! small notifier thread that sleeps in `poll(2)` on the descriptor and, when a frame is
//! waiting, calls the stack's waker once and then sleeps on a condition variable until the
//! squeue has read the queue dry (`EAGAIN`); only then does it poll again. A busy squeue
//! therefore reads in batches of up to its budget per drain without any wake-ups (the
//! device reports "frames pending" through `next_rx`), and an idle one costs nothing.
//! Dropping the last handle of a queue stops its thread (an `eventfd` wakes the poll)
//! and closes the descriptor; a non-persistent interface disappears with its last one.
//!
//! Every `unsafe` block here is a system call on a descriptor this module owns, with
//! pointers to live, correctly sized buffers; each has its own `SAFETY` note.

use super::device::Device;
use ember_core::time::Instant;
use ember_core::wire::checksum;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

// <linux/if_tun.h>
const TUNSETIFF: libc::c_ulong = 0x4004_54ca; // _IOW('T', 202, int)
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0; // _IOW('T', 208, unsigned int)
const TUNSETVNETHDRSZ: libc::c_ulong = 0x4004_54d8; // _IOW('T', 216, int)
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;
const IFF_MULTI_QUEUE: libc::c_short = 0x0100;
const TUN_F_CSUM: libc::c_uint = 0x01;
const TUN_F_TSO4: libc::c_uint = 0x02;

// <linux/virtio_net.h>
/// Size of the virtio-net header we use (`struct virtio_net_hdr_mrg_rxbuf`).
pub const VNET_HDR_LEN: usize = 12;
const VNET_F_NEEDS_CSUM: u8 = 1;
const VNET_GSO_NONE: u8 = 0;
const VNET_GSO_TCPV4: u8 = 1;

/// The most queues one TAP interface gets here (the kernel allows 256).
pub const MAX_QUEUES: usize = 64;
/// Largest frame read or written: a 64 KiB IP packet, its Ethernet header and the
/// virtio-net header.
const MAX_FRAME: usize = 65_535 + 14 + VNET_HDR_LEN;

/// How to open a TAP interface.
#[derive(Debug, Clone)]
pub struct TapConfig {
    /// Interface name (at most 15 bytes). An existing TAP interface is attached to; a
    /// missing one is created (and vanishes when ember closes it, unless it was made
    /// persistent with `ip tuntap add`).
    pub name: String,
    /// Queues (1 ..= [`MAX_QUEUES`]); more than one opens the interface multi-queue.
    pub queues: usize,
    /// virtio-net header with checksum and TCP segmentation offload both ways.
    pub offload: bool,
    /// Set the interface's MTU to this (68 ..= 65535) instead of keeping the current one.
    pub mtu: Option<u32>,
}

impl TapConfig {
    /// One queue, no offload, the interface's own MTU.
    pub fn new(name: &str) -> TapConfig {
        TapConfig {
            name: name.to_string(),
            queues: 1,
            offload: false,
            mtu: None,
        }
    }
}

/// Counters of one TAP queue.
#[derive(Debug, Default)]
pub struct TapStats {
    pub rx_frames: AtomicU64,
    pub rx_bytes: AtomicU64,
    /// Frames the kernel handed over as one large TCP segment (`GSO_TCPV4`).
    pub rx_gso: AtomicU64,
    /// Checksums completed here for the kernel (`NEEDS_CSUM`).
    pub rx_csum_filled: AtomicU64,
    /// Reads that failed or frames dropped as malformed (bad virtio-net header).
    pub rx_errors: AtomicU64,
    pub tx_frames: AtomicU64,
    pub tx_bytes: AtomicU64,
    /// Frames longer than the MTU sent for the kernel to segment.
    pub tx_gso: AtomicU64,
    /// Frames the kernel refused or that could not be sent (too long without offload).
    pub tx_errors: AtomicU64,
    /// Times the notifier thread woke the stack.
    pub wakeups: AtomicU64,
}

/// A snapshot of [`TapStats`] summed over queues.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TapCounters {
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub rx_gso: u64,
    pub rx_csum_filled: u64,
    pub rx_errors: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
    pub tx_gso: u64,
    pub tx_errors: u64,
    pub wakeups: u64,
}

/// An open TAP interface: its queues.
pub struct Tap {
    name: String,
    mtu: u32,
    queues: Vec<Arc<TapQueue>>,
}

impl core::fmt::Debug for Tap {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Tap")
            .field("name", &self.name)
            .field("queues", &self.queues.len())
            .field("mtu", &self.mtu)
            .finish()
    }
}

/// The `struct ifreq` fields we use: the name and one 16-bit or 32-bit value (shared with
/// the AF_PACKET device).
#[repr(C)]
pub(super) struct IfReq {
    pub(super) name: [u8; libc::IFNAMSIZ],
    /// `ifr_flags` (short) or `ifr_mtu` (int), as the ioctl wants.
    pub(super) value: i32,
    pub(super) _pad: [u8; 20],
}

impl IfReq {
    pub(super) fn new(name: &str) -> io::Result<IfReq> {
        let b = name.as_bytes();
        if b.is_empty() || b.len() >= libc::IFNAMSIZ || b.contains(&0) || b.contains(&b'/') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("bad interface name {name:?}: 1 to 15 bytes, no '/' or NUL"),
            ));
        }
        let mut r = IfReq {
            name: [0; libc::IFNAMSIZ],
            value: 0,
            _pad: [0; 20],
        };
        r.name[..b.len()].copy_from_slice(b);
        Ok(r)
    }
}

/// `ioctl(fd, req, &mut r)`.
pub(super) fn ifr_ioctl(fd: RawFd, req: libc::c_ulong, r: &mut IfReq) -> io::Result<()> {
    // SAFETY: `r` is a live, exclusively borrowed `struct ifreq`-sized (40 bytes) buffer;
    // the TUN and SIOC*IF* requests used here read and write only within it.
    let rc = unsafe { libc::ioctl(fd, req as _, r as *mut IfReq) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `ioctl(fd, req, value)` for requests that take an integer argument.
fn int_ioctl(fd: RawFd, req: libc::c_ulong, value: libc::c_ulong) -> io::Result<()> {
    // SAFETY: the request takes its argument by value (TUNSETOFFLOAD) or reads an int
    // through the pointer we pass (TUNSETVNETHDRSZ, below); no memory is written.
    let rc = unsafe { libc::ioctl(fd, req as _, value) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A socket for the SIOC*IF* requests (interface flags and MTU).
pub(super) fn ctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the descriptor is owned at once.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens (or creates) the TUN or TAP interface `name` with `flags` (`IFF_TUN` or
/// `IFF_TAP`, with `IFF_NO_PI`, `IFF_VNET_HDR`, ...), non-blocking and close-on-exec, and
/// sets its offloads (`TUN_F_*` bits) — the device the packetdrill interpreter's Linux
/// backend talks to the kernel through.
pub fn open_tun(name: &str, flags: libc::c_short, offloads: libc::c_ulong) -> io::Result<OwnedFd> {
    let fd = open_queue(name, flags)?;
    int_ioctl(fd.as_raw_fd(), TUNSETOFFLOAD, offloads)?;
    Ok(fd)
}

fn open_queue(name: &str, flags: libc::c_short) -> io::Result<OwnedFd> {
    let path = c"/dev/net/tun";
    // SAFETY: `path` is NUL-terminated; the descriptor is owned at once below.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("cannot open /dev/net/tun: {e} (TUN/TAP needs CAP_NET_ADMIN)"),
        ));
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut r = IfReq::new(name)?;
    r.value = i32::from(flags);
    ifr_ioctl(fd.as_raw_fd(), TUNSETIFF, &mut r).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("TUNSETIFF {name}: {e} (an existing interface must be a TAP with the same queue mode)"),
        )
    })?;
    Ok(fd)
}

impl Tap {
    /// Opens (or creates) the TAP interface, sets it up, and starts each queue's
    /// notifier thread.
    pub fn open(cfg: &TapConfig) -> io::Result<Tap> {
        if cfg.queues == 0 || cfg.queues > MAX_QUEUES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("TAP queues {}: must be 1 ..= {MAX_QUEUES}", cfg.queues),
            ));
        }
        if let Some(m) = cfg.mtu {
            if !(68..=65_535).contains(&m) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("TAP MTU {m}: must be 68 ..= 65535"),
                ));
            }
        }
        IfReq::new(&cfg.name)?;
        let mut flags = IFF_TAP | IFF_NO_PI;
        if cfg.queues > 1 {
            flags |= IFF_MULTI_QUEUE;
        }
        if cfg.offload {
            flags |= IFF_VNET_HDR;
        }
        let mut fds = Vec::with_capacity(cfg.queues);
        for _ in 0..cfg.queues {
            let fd = open_queue(&cfg.name, flags)?;
            // The offload features stay on the interface after their last user closes
            // it (a persistent TAP): set them every time, to nothing when offload is off,
            // or the kernel would go on handing over partial checksums we cannot see.
            if !cfg.offload {
                int_ioctl(fd.as_raw_fd(), TUNSETOFFLOAD, 0)?;
            }
            if cfg.offload {
                let sz: libc::c_int = VNET_HDR_LEN as libc::c_int;
                int_ioctl(
                    fd.as_raw_fd(),
                    TUNSETVNETHDRSZ,
                    &sz as *const libc::c_int as libc::c_ulong,
                )?;
                int_ioctl(
                    fd.as_raw_fd(),
                    TUNSETOFFLOAD,
                    libc::c_ulong::from(TUN_F_CSUM | TUN_F_TSO4),
                )?;
            }
            fds.push(fd);
        }
        // Interface MTU and flags, through an ordinary socket.
        let ctl = ctl_socket()?;
        if let Some(m) = cfg.mtu {
            let mut r = IfReq::new(&cfg.name)?;
            r.value = m as i32;
            ifr_ioctl(ctl.as_raw_fd(), libc::SIOCSIFMTU, &mut r)?;
        }
        let mut r = IfReq::new(&cfg.name)?;
        ifr_ioctl(ctl.as_raw_fd(), libc::SIOCGIFMTU, &mut r)?;
        let mtu = (r.value as u32).clamp(68, 65_535);
        let mut r = IfReq::new(&cfg.name)?;
        ifr_ioctl(ctl.as_raw_fd(), libc::SIOCGIFFLAGS, &mut r)?;
        let up = libc::IFF_UP;
        if r.value & up == 0 {
            // `ifr_flags` is a short: keep the upper half of the int as it came.
            r.value |= up;
            ifr_ioctl(ctl.as_raw_fd(), libc::SIOCSIFFLAGS, &mut r)?;
        }
        let mut queues = Vec::with_capacity(fds.len());
        for (i, fd) in fds.into_iter().enumerate() {
            queues.push(TapQueue::start(&cfg.name, i, fd, cfg.offload, mtu)?);
        }
        Ok(Tap {
            name: cfg.name.clone(),
            mtu,
            queues,
        })
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The interface MTU when it was opened.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// The queues as devices, for [`StackBuilder::interface_queues`](crate::StackBuilder::interface_queues).
    pub fn devices(&self) -> Vec<Arc<dyn Device>> {
        self.queues
            .iter()
            .map(|q| q.clone() as Arc<dyn Device>)
            .collect()
    }

    /// The queues themselves.
    pub fn queues(&self) -> &[Arc<TapQueue>] {
        &self.queues
    }

    /// Counters summed over the queues.
    pub fn counters(&self) -> TapCounters {
        let mut c = TapCounters::default();
        for q in &self.queues {
            let s = &q.stats;
            let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
            c.rx_frames += g(&s.rx_frames);
            c.rx_bytes += g(&s.rx_bytes);
            c.rx_gso += g(&s.rx_gso);
            c.rx_csum_filled += g(&s.rx_csum_filled);
            c.rx_errors += g(&s.rx_errors);
            c.tx_frames += g(&s.tx_frames);
            c.tx_bytes += g(&s.tx_bytes);
            c.tx_gso += g(&s.tx_gso);
            c.tx_errors += g(&s.tx_errors);
            c.wakeups += g(&s.wakeups);
        }
        c
    }
}

/// The notifier thread's state, shared between it and its [`Notifier`].
struct Notify {
    /// True while the notifier may poll: the squeue has read the queue dry since the
    /// last wake-up.
    armed: Mutex<bool>,
    cv: Condvar,
    stop: AtomicBool,
    waker: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

/// A queue's notifier thread and its controls (the TAP and AF_PACKET queues each own
/// one): [`Notifier::arm`] once the queue is read dry, [`Notifier::next_rx`] and
/// [`Notifier::set_waker`] for the `Device` methods of the same names, and
/// [`Notifier::stop`] (also on drop) before the watched descriptor closes.
pub(super) struct Notifier {
    notify: Arc<Notify>,
    /// Wakes the notifier's poll at shutdown.
    stop_fd: OwnedFd,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Notifier {
    /// Starts the thread `name` watching `fd` (which must outlive the notifier, or be
    /// closed only after [`Notifier::stop`]); `counted` runs on every wake-up it gives.
    pub(super) fn start(
        name: String,
        fd: RawFd,
        on_error: OnError,
        counted: impl Fn() + Send + 'static,
    ) -> io::Result<Notifier> {
        // SAFETY: plain eventfd(2); the descriptor is owned at once.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `efd` is a fresh descriptor nobody else owns.
        let stop_fd = unsafe { OwnedFd::from_raw_fd(efd) };
        let notify = Arc::new(Notify {
            armed: Mutex::new(true),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
            waker: OnceLock::new(),
        });
        let n2 = notify.clone();
        let raw_stop = stop_fd.as_raw_fd();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || notifier(fd, raw_stop, &n2, &counted, on_error))?;
        Ok(Notifier {
            notify,
            stop_fd,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// The queue was read dry: the notifier may poll again.
    pub(super) fn arm(&self) {
        let mut a = self.notify.armed.lock().unwrap_or_else(|e| e.into_inner());
        if !*a {
            *a = true;
            self.notify.cv.notify_one();
        }
    }

    fn armed(&self) -> bool {
        *self.notify.armed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `Device::next_rx`: not armed = frames were seen and not yet read dry, so come
    /// back at once.
    pub(super) fn next_rx(&self) -> Option<Instant> {
        if self.armed() {
            None
        } else {
            Some(crate::clock::now())
        }
    }

    /// `Device::set_rx_waker`.
    pub(super) fn set_waker(&self, waker: Box<dyn Fn() + Send + Sync>) {
        let _ = self.notify.waker.set(waker);
        // Frames that arrived before the waker was set: make sure someone looks.
        if !self.armed() {
            if let Some(w) = self.notify.waker.get() {
                w();
            }
        }
    }

    /// Stops the thread and waits for it (idempotent).
    pub(super) fn stop(&self) {
        self.notify.stop.store(true, Ordering::Release);
        {
            let _a = self.notify.armed.lock().unwrap_or_else(|e| e.into_inner());
            self.notify.cv.notify_all();
        }
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd.
        let _ = unsafe {
            libc::write(
                self.stop_fd.as_raw_fd(),
                &one as *const u64 as *const libc::c_void,
                8,
            )
        };
        let h = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = h {
            // The notifier itself may drop the last handle of its queue (its inline
            // receive can hold the last reference to the squeue or the stack at
            // teardown): it then finds `stop` set as soon as the waker returns and
            // touches nothing of the queue again, so it is not joined (a thread cannot
            // join itself).
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One queue of a TAP interface: a [`Device`].
pub struct TapQueue {
    fd: OwnedFd,
    vnet: bool,
    mtu: u32,
    notifier: Notifier,
    /// Receive scratch buffer (only the owning squeue reads; the lock is uncontended).
    rx_buf: Mutex<Vec<u8>>,
    /// Counters.
    pub stats: Arc<TapStats>,
}

impl core::fmt::Debug for TapQueue {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TapQueue")
            .field("fd", &self.fd.as_raw_fd())
            .field("vnet", &self.vnet)
            .field("mtu", &self.mtu)
            .finish()
    }
}

impl TapQueue {
    fn start(name: &str, i: usize, fd: OwnedFd, vnet: bool, mtu: u32) -> io::Result<Arc<TapQueue>> {
        let stats = Arc::new(TapStats::default());
        let s2 = stats.clone();
        let notifier = Notifier::start(
            format!("tap-{name}-q{i}"),
            fd.as_raw_fd(),
            OnError::Stop,
            move || {
                s2.wakeups.fetch_add(1, Ordering::Relaxed);
            },
        )?;
        Ok(Arc::new(TapQueue {
            fd,
            vnet,
            mtu,
            notifier,
            rx_buf: Mutex::new(vec![0u8; MAX_FRAME]),
            stats,
        }))
    }

    /// Writes `parts` as one frame.
    fn writev(&self, parts: &[&[u8]]) -> io::Result<usize> {
        let iov: Vec<libc::iovec> = parts
            .iter()
            .map(|p| libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            })
            .collect();
        // SAFETY: every iovec points into a slice borrowed for the whole call; the
        // kernel only reads them.
        let n = unsafe { libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), iov.len() as i32) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

/// What the notifier does when the descriptor reports an error and nothing to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OnError {
    /// Stop (a TAP whose interface was deleted never comes back).
    Stop,
    /// Read and clear the socket error (`SO_ERROR`) and go on polling: an AF_PACKET
    /// socket reports `ENETDOWN` when its interface goes down and receives again once it
    /// is up.
    ClearAndGoOn,
}

/// Error-only wake-ups in a row after which the notifier gives up (an error that
/// clearing does not clear would otherwise make it spin).
const MAX_ERROR_WAKEUPS: u32 = 64;

/// The notifier thread: wait until armed, poll for a readable descriptor, wake the stack,
/// disarm; until stopped. `counted` runs on each wake-up.
fn notifier(fd: RawFd, stop_fd: RawFd, n: &Notify, counted: &dyn Fn(), on_error: OnError) {
    crate::squeue::set_interrupt_thread();
    let mut errors_in_a_row = 0u32;
    loop {
        {
            let mut a = n.armed.lock().unwrap_or_else(|e| e.into_inner());
            while !*a && !n.stop.load(Ordering::Acquire) {
                a = n.cv.wait(a).unwrap_or_else(|e| e.into_inner());
            }
        }
        if n.stop.load(Ordering::Acquire) {
            return;
        }
        let mut pfd = [
            libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop_fd,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `pfd` is a live array of two pollfds for the whole call.
        let r = unsafe { libc::poll(pfd.as_mut_ptr(), 2, -1) };
        if n.stop.load(Ordering::Acquire) {
            return;
        }
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // An unusable descriptor: nothing more will arrive.
            return;
        }
        if pfd[0].revents & (libc::POLLERR | libc::POLLNVAL | libc::POLLHUP) != 0
            && pfd[0].revents & libc::POLLIN == 0
        {
            errors_in_a_row += 1;
            if on_error == OnError::Stop
                || pfd[0].revents & libc::POLLNVAL != 0
                || errors_in_a_row > MAX_ERROR_WAKEUPS
            {
                // The interface went away (deleted under us): stop quietly.
                return;
            }
            let mut err: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: getsockopt(SO_ERROR) writes one int into `err` and its size into
            // `len`, both live for the call.
            unsafe {
                libc::getsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_ERROR,
                    &mut err as *mut libc::c_int as *mut libc::c_void,
                    &mut len,
                )
            };
            continue;
        }
        errors_in_a_row = 0;
        if pfd[0].revents & libc::POLLIN != 0 {
            *n.armed.lock().unwrap_or_else(|e| e.into_inner()) = false;
            counted();
            if let Some(w) = n.waker.get() {
                w();
            }
        }
    }
}

impl Drop for TapQueue {
    fn drop(&mut self) {
        // The notifier stops before the descriptor it watches closes.
        self.notifier.stop();
    }
}

/// What a received virtio-net header asks of us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VnetHdr {
    pub flags: u8,
    pub gso_type: u8,
    pub hdr_len: u16,
    pub gso_size: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
}

impl VnetHdr {
    /// Parses the first [`VNET_HDR_LEN`] bytes (little-endian fields, as the kernel
    /// writes them for a little-endian host; `TUNSETVNETLE` is not used).
    pub fn parse(b: &[u8]) -> Option<VnetHdr> {
        if b.len() < VNET_HDR_LEN {
            return None;
        }
        let u = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        Some(VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u(2),
            gso_size: u(4),
            csum_start: u(6),
            csum_offset: u(8),
        })
    }

    /// The header's bytes.
    pub fn emit(&self) -> [u8; VNET_HDR_LEN] {
        let mut b = [0u8; VNET_HDR_LEN];
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
        b
    }
}

/// Completes a partial checksum as `NEEDS_CSUM` asks: the ones'-complement sum of
/// `frame[csum_start..]` (whose checksum field holds the pseudo-header's sum) stored at
/// `csum_start + csum_offset`. False if the offsets do not fit the frame.
pub fn complete_checksum(frame: &mut [u8], csum_start: usize, csum_offset: usize) -> bool {
    let Some(at) = csum_start.checked_add(csum_offset) else {
        return false;
    };
    if csum_start >= frame.len() || at.saturating_add(2) > frame.len() {
        return false;
    }
    let c = checksum::checksum(&frame[csum_start..]);
    frame[at..at + 2].copy_from_slice(&c.to_be_bytes());
    true
}

/// For a frame longer than the MTU: the virtio-net header that has the kernel segment
/// it (TCP over IPv4 only), with the TCP checksum field set to the pseudo-header's sum as
/// checksum offload wants. `None` if it is not a TCP/IPv4 frame we can describe.
pub fn gso_header(frame: &mut [u8], mtu: u32) -> Option<VnetHdr> {
    if frame.len() < 14 + 20 + 20 || frame[12..14] != [0x08, 0x00] {
        return None;
    }
    let ip = &frame[14..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    if ip[0] >> 4 != 4 || ihl < 20 || ip[9] != 6 || ip.len() < ihl + 20 {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    if total > ip.len() || total < ihl + 20 {
        return None;
    }
    let thl = usize::from(ip[ihl + 12] >> 4) * 4;
    if thl < 20 || ihl + thl > total {
        return None;
    }
    let mss = (mtu as usize).checked_sub(ihl + thl)?;
    if mss == 0 {
        return None;
    }
    let src = std::net::Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let dst = std::net::Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let tcp_len = (total - ihl) as u16;
    let partial = !checksum::finish(checksum::pseudo_header(src, dst, 6, tcp_len));
    let at = 14 + ihl + 16;
    frame[at..at + 2].copy_from_slice(&partial.to_be_bytes());
    Some(VnetHdr {
        flags: VNET_F_NEEDS_CSUM,
        gso_type: VNET_GSO_TCPV4,
        hdr_len: (14 + ihl + thl) as u16,
        gso_size: mss as u16,
        csum_start: (14 + ihl) as u16,
        csum_offset: 16,
    })
}

impl Device for TapQueue {
    fn transmit(&self, mut frame: Vec<u8>) {
        let max = self.mtu as usize + 14;
        let r = if self.vnet {
            let hdr = if frame.len() > max {
                match gso_header(&mut frame, self.mtu) {
                    Some(h) => {
                        self.stats.tx_gso.fetch_add(1, Ordering::Relaxed);
                        h
                    }
                    None => {
                        self.stats.tx_errors.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                }
            } else {
                VnetHdr {
                    flags: 0,
                    gso_type: VNET_GSO_NONE,
                    hdr_len: 0,
                    gso_size: 0,
                    csum_start: 0,
                    csum_offset: 0,
                }
            };
            let h = hdr.emit();
            self.writev(&[&h, &frame])
        } else if frame.len() > max {
            self.stats.tx_errors.fetch_add(1, Ordering::Relaxed);
            return;
        } else {
            self.writev(&[&frame])
        };
        match r {
            Ok(_) => {
                self.stats.tx_frames.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .tx_bytes
                    .fetch_add(frame.len() as u64, Ordering::Relaxed);
            }
            Err(_) => {
                self.stats.tx_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn poll_rx(&self, _now: Instant, out: &mut Vec<Vec<u8>>, budget: usize) {
        let mut buf = self.rx_buf.lock().unwrap_or_else(|e| e.into_inner());
        let mut drained = false;
        for _ in 0..budget {
            // SAFETY: reads at most `buf.len()` bytes into our own live buffer.
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock => {}
                    _ => {
                        self.stats.rx_errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                drained = true;
                break;
            }
            let n = n as usize;
            let frame = if self.vnet {
                let Some(h) = VnetHdr::parse(&buf[..n]) else {
                    self.stats.rx_errors.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let mut f = buf[VNET_HDR_LEN..n].to_vec();
                if h.flags & VNET_F_NEEDS_CSUM != 0 {
                    if !complete_checksum(
                        &mut f,
                        usize::from(h.csum_start),
                        usize::from(h.csum_offset),
                    ) {
                        self.stats.rx_errors.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    self.stats.rx_csum_filled.fetch_add(1, Ordering::Relaxed);
                }
                if h.gso_type != VNET_GSO_NONE {
                    self.stats.rx_gso.fetch_add(1, Ordering::Relaxed);
                }
                f
            } else {
                buf[..n].to_vec()
            };
            self.stats.rx_frames.fetch_add(1, Ordering::Relaxed);
            self.stats
                .rx_bytes
                .fetch_add(frame.len() as u64, Ordering::Relaxed);
            out.push(frame);
        }
        drop(buf);
        if drained {
            self.notifier.arm();
        }
    }

    fn next_rx(&self) -> Option<Instant> {
        self.notifier.next_rx()
    }

    fn set_rx_waker(&self, waker: Box<dyn Fn() + Send + Sync>) {
        self.notifier.set_waker(waker)
    }

    fn mtu(&self) -> u32 {
        self.mtu
    }

    /// With the virtio-net header (offload on), a TCP/IPv4 frame longer than the MTU
    /// leaves whole with a `GSO_TCPV4` header and the kernel segments it.
    fn tso(&self) -> bool {
        self.vnet
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = &self.stats;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            ("rx_frames", g(&s.rx_frames)),
            ("rx_bytes", g(&s.rx_bytes)),
            ("rx_gso", g(&s.rx_gso)),
            ("rx_csum_filled", g(&s.rx_csum_filled)),
            ("rx_errors", g(&s.rx_errors)),
            ("tx_frames", g(&s.tx_frames)),
            ("tx_bytes", g(&s.tx_bytes)),
            ("tx_gso", g(&s.tx_gso)),
            ("tx_errors", g(&s.tx_errors)),
            ("wakeups", g(&s.wakeups)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for bad in ["", "0123456789abcdef", "a/b", "a\0b"] {
            let e = IfReq::new(bad).err().expect(bad);
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        }
        assert!(IfReq::new("ember0").is_ok());
        assert_eq!(std::mem::size_of::<IfReq>(), 40);
    }

    #[test]
    fn bad_configs_are_refused_before_any_system_call() {
        let mut c = TapConfig::new("ember-x");
        c.queues = 0;
        assert_eq!(
            Tap::open(&c).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        c.queues = MAX_QUEUES + 1;
        assert_eq!(
            Tap::open(&c).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        c.queues = 1;
        c.mtu = Some(20);
        assert_eq!(
            Tap::open(&c).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn vnet_header_round_trips() {
        let h = VnetHdr {
            flags: 1,
            gso_type: 1,
            hdr_len: 54,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
        };
        assert_eq!(VnetHdr::parse(&h.emit()), Some(h));
        assert_eq!(VnetHdr::parse(&[0u8; 11]), None);
    }

    /// A TCP/IPv4 frame with `payload` bytes and a correct checksum.
    fn tcp_frame(payload: usize) -> Vec<u8> {
        let total = 20 + 20 + payload;
        let mut f = vec![0u8; 14 + total];
        f[12] = 0x08;
        f[14] = 0x45;
        f[16..18].copy_from_slice(&(total as u16).to_be_bytes());
        f[22] = 64;
        f[23] = 6;
        f[26..30].copy_from_slice(&[198, 18, 0, 1]);
        f[30..34].copy_from_slice(&[198, 18, 0, 2]);
        let ipc = checksum::checksum(&f[14..34]);
        f[24..26].copy_from_slice(&ipc.to_be_bytes());
        f[34..36].copy_from_slice(&1234u16.to_be_bytes());
        f[36..38].copy_from_slice(&80u16.to_be_bytes());
        f[46] = 5 << 4;
        f[47] = 0x18;
        for (i, b) in f[54..].iter_mut().enumerate() {
            *b = (i * 7) as u8;
        }
        let ph = checksum::pseudo_header(
            std::net::Ipv4Addr::new(198, 18, 0, 1),
            std::net::Ipv4Addr::new(198, 18, 0, 2),
            6,
            (20 + payload) as u16,
        );
        let c = checksum::finish(checksum::combine(ph, checksum::sum(&f[34..])));
        f[50..52].copy_from_slice(&c.to_be_bytes());
        f
    }

    #[test]
    fn partial_checksums_are_completed_like_the_kernel_wants() {
        let good = tcp_frame(1001);
        // What the kernel hands over with NEEDS_CSUM: the pseudo-header sum in place.
        let mut f = good.clone();
        let ph = checksum::pseudo_header(
            std::net::Ipv4Addr::new(198, 18, 0, 1),
            std::net::Ipv4Addr::new(198, 18, 0, 2),
            6,
            1021,
        );
        f[50..52].copy_from_slice(&(!checksum::finish(ph)).to_be_bytes());
        assert!(complete_checksum(&mut f, 34, 16));
        assert_eq!(f, good);
        // Offsets outside the frame are refused, never a panic.
        let n = f.len();
        assert!(!complete_checksum(&mut f, n, 0));
        assert!(!complete_checksum(&mut f, 34, n));
        assert!(!complete_checksum(&mut f, usize::MAX, usize::MAX));
    }

    #[test]
    fn gso_headers_describe_large_tcp_frames() {
        let mut f = tcp_frame(60_000);
        let h = gso_header(&mut f, 1500).expect("tcp");
        assert_eq!(h.gso_type, VNET_GSO_TCPV4);
        assert_eq!(h.gso_size, 1460);
        assert_eq!(h.hdr_len, 54);
        assert_eq!((h.csum_start, h.csum_offset), (34, 16));
        // Completing the checksum as the kernel would gives the correct one back.
        let mut g = f.clone();
        assert!(complete_checksum(&mut g, 34, 16));
        assert_eq!(g, tcp_frame(60_000));
        // Not TCP/IPv4, or cut short: no header.
        let mut arp = vec![0u8; 100];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert!(gso_header(&mut arp, 1500).is_none());
        let mut short = tcp_frame(10);
        short.truncate(40);
        assert!(gso_header(&mut short, 1500).is_none());
    }
}
