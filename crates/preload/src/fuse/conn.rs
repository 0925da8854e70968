//! One fusable connection in this process and its data path.
//!
//! # Switch offsets (crossproc.md, principle 3)
//! Each direction changes path at a byte count both ends agree on. The writer, once
//! both ends have attached, publishes k (the bytes it sent by kernel) and then writes
//! into the ring; the reader takes exactly k kernel bytes, then the ring. Unfusing is
//! the reverse: the writer seals the ring at m and sends later bytes by kernel; the
//! reader drains the ring to m, then reads the kernel. No timeout and no guess decides
//! where a byte goes, so the byte order is the writer's.
//!
//! # Waiting
//! A reader with nothing to read, or a writer stopped by flow control, arms its ring's
//! waiter word with its thread's token (`wake.rs`), re-checks, and sleeps in `ppoll` on
//! its wake socket and the shadow kernel socket, so a FIN, an RST or the peer's death
//! wakes it as well. The other side wakes it after publishing (`ember_xproc::wake`).
//!
//! # Flow control
//! The writer runs the core's `FusedFlow` (the Solaris rules of fireengine.md, the same
//! code as in-process fusion): at most `rcv_cap` unread bytes (the reader's receive
//! buffer), stopped until the low-water mark once full, and stopped after
//! `tcp_fusion_rcv_unread_min` writes the reader has not read.
//!
//! # Ends
//! `shutdown(SHUT_WR)` marks the ring's end, then shuts the kernel socket. A kernel EOF
//! is a fence: the reader drains the ring first. A writer whose reader closed its last
//! descriptor seals the ring and goes back to the kernel, whose shadow connection then
//! answers as the kernel would (RST, EPIPE). Closing with unread ring bytes sets
//! `SO_LINGER{1,0}` on the shadow first, so the peer gets the RST the kernel sends when
//! a socket is closed with unread data.

use super::{proc_if_active, sys, wake};
use ember_core::tcp::FusedFlow;
use ember_xproc::arena::{Arena, Dir, Side};
use ember_xproc::ring::{Consumer, Producer};
use libc::c_int;
use std::io;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// Where a connection's slot is.
pub struct Fused {
    pub arena: Arc<Arena>,
    pub slot: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// Bytes go by kernel (before the switch).
    Kernel,
    /// Bytes go by the ring.
    Ring,
    /// The ring was sealed (unfused): by kernel for good.
    After,
}

struct Tx {
    path: Path,
    kernel_sent: u64,
    prod: Option<Producer>,
    flow: FusedFlow,
}

struct Rx {
    path: Path,
    kernel_read: u64,
    cons: Option<Consumer>,
    /// `shutdown(SHUT_RD)` was called: reads return end of file.
    shut_rd: bool,
}

/// A fusable connection.
pub struct Conn {
    pub side: Side,
    pub nonce: u64,
    /// The process that made it (a child of `fork` changes no shared state).
    pub pid: u32,
    /// Descriptors of this process that refer to it.
    pub refs: AtomicUsize,
    pub nonblock: AtomicBool,
    pub candidate: Mutex<Option<ember_xproc::registry::CandidateId>>,
    pub fused: OnceLock<Fused>,
    tx: Mutex<Tx>,
    rx: Mutex<Rx>,
    /// Tokens of this process's threads sleeping in a read and in a write (0: none),
    /// for a wake-up by this process (the slot arrived, the connection unfused).
    sleeping: [AtomicU64; 2],
    /// `SO_RCVTIMEO` and `SO_SNDTIMEO`, in microseconds (0: none).
    pub rcvtimeo_us: AtomicU64,
    pub sndtimeo_us: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn errno(e: c_int) -> io::Error {
    io::Error::from_raw_os_error(e)
}

impl Conn {
    pub fn new(side: Side, nonce: u64, pid: u32, nonblock: bool) -> Conn {
        Conn {
            side,
            nonce,
            pid,
            refs: AtomicUsize::new(1),
            nonblock: AtomicBool::new(nonblock),
            candidate: Mutex::new(None),
            fused: OnceLock::new(),
            tx: Mutex::new(Tx {
                path: Path::Kernel,
                kernel_sent: 0,
                prod: None,
                flow: FusedFlow::default(),
            }),
            rx: Mutex::new(Rx {
                path: Path::Kernel,
                kernel_read: 0,
                cons: None,
                shut_rd: false,
            }),
            sleeping: [AtomicU64::new(0), AtomicU64::new(0)],
            rcvtimeo_us: AtomicU64::new(0),
            sndtimeo_us: AtomicU64::new(0),
        }
    }

    fn dirs(&self) -> (Dir, Dir) {
        // (the ring this side writes, the ring it reads)
        match self.side {
            Side::Connected => (Dir::Up, Dir::Down),
            Side::Accepted => (Dir::Down, Dir::Up),
        }
    }

    /// Wakes this process's threads sleeping on the connection.
    pub fn wake_local(&self) {
        for s in &self.sleeping {
            if let Some(t) = NonZeroU64::new(s.load(Ordering::Acquire)) {
                wake::wake(t);
            }
        }
    }

    fn spin_us() -> u64 {
        proc_if_active().map_or(0, |p| p.cfg.spin_us)
    }

    /// Sleeps until woken through `word` (a ring's waiter word: armed with this
    /// thread's token, then `ready` re-checked, the Dekker order of
    /// `ember_xproc::wake`), the shadow socket `fd` shows `events`, or `deadline`.
    /// `which` is 0 for a reader, 1 for a writer (this process's own wake-ups).
    fn sleep(
        &self,
        fd: c_int,
        events: i16,
        which: usize,
        deadline: Option<Instant>,
        word: Option<&AtomicU64>,
        ready: impl Fn() -> bool,
    ) -> io::Result<()> {
        let (wfd, token) = match wake::mine() {
            Some(m) => m,
            None => (-1, NonZeroU64::MIN),
        };
        self.sleeping[which].store(token.get(), Ordering::Release);
        if let Some(w) = word {
            ember_xproc::wake::arm(w, token);
        } else {
            std::sync::atomic::fence(Ordering::SeqCst);
        }
        let r = if ready() {
            Ok(0)
        } else {
            let mut fds = [
                libc::pollfd {
                    fd,
                    events,
                    revents: 0,
                },
                libc::pollfd {
                    fd: wfd,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let n = if wfd < 0 { 1 } else { 2 };
            let timeout = match deadline {
                Some(d) => Some(d.saturating_duration_since(Instant::now())),
                // Without a wake socket, look again every 10 ms.
                None if wfd < 0 => Some(Duration::from_millis(10)),
                None => None,
            };
            let r = sys::ppoll(&mut fds[..n], timeout);
            if wfd >= 0 && fds[1].revents != 0 {
                wake::drain(wfd);
            }
            r
        };
        if let Some(w) = word {
            ember_xproc::wake::disarm(w, token);
        }
        self.sleeping[which].store(0, Ordering::Relaxed);
        match r {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Err(e),
            _ => Ok(()),
        }
    }

    fn deadline(us: &AtomicU64) -> Option<Instant> {
        match us.load(Ordering::Relaxed) {
            0 => None,
            t => Some(Instant::now() + Duration::from_micros(t)),
        }
    }

    // ---- writing ----

    /// Writes `bufs` (a gather list) on `fd`: by kernel before the switch, by the ring
    /// after it. `flags` are send flags (`MSG_DONTWAIT`, `MSG_NOSIGNAL`, `MSG_MORE`;
    /// `MSG_OOB` unfuses first).
    pub fn write(&self, fd: c_int, bufs: &[&[u8]], flags: c_int) -> io::Result<usize> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let nonblock = self.nonblock.load(Ordering::Relaxed) || flags & libc::MSG_DONTWAIT != 0;
        let deadline = Self::deadline(&self.sndtimeo_us);
        let mut tx = lock(&self.tx);
        if flags & libc::MSG_OOB != 0 {
            self.seal(&mut tx);
            if let Some(p) = proc_if_active() {
                p.stats.unfused_oob.fetch_add(1, Ordering::Relaxed);
            }
        }
        loop {
            if tx.path == Path::Kernel {
                self.try_switch_tx(&mut tx);
            }
            if tx.path != Path::Ring {
                let n = kernel_writev(fd, bufs, flags)?;
                if tx.path == Path::Kernel {
                    tx.kernel_sent += n as u64;
                }
                return Ok(n);
            }
            let f = self.fused.get().expect("ring path has a slot");
            let slot = f.arena.slot(f.slot, self.nonce);
            // The peer gone from the ring (closed, or asked to unfuse): back to the
            // kernel, which then answers as it would.
            if slot.is_none_or(|s| s.closed(self.side.peer()) || s.unfuse_asked(self.side.peer())) {
                self.seal(&mut tx);
                if let Some(p) = proc_if_active() {
                    p.stats.unfused_peer_closed.fetch_add(1, Ordering::Relaxed);
                }
                continue;
            }
            if total == 0 {
                return Ok(0);
            }
            let unread_min = proc_if_active().map_or(8, |p| p.cfg.unread_min);
            let prod = tx.prod.as_mut().expect("ring path has a producer");
            let read = prod.take_reader_read();
            let room = prod.room().map_err(|_| errno(libc::ECONNRESET))?;
            if read {
                tx.flow.reader_read();
            }
            let admitted = tx.flow.admit(unread_min);
            if room > 0 && admitted.is_ok() {
                let mut done = 0;
                let prod = tx.prod.as_mut().expect("ring path has a producer");
                for b in bufs {
                    if done >= room {
                        break;
                    }
                    let n = prod
                        .write(&b[..b.len().min(room - done)])
                        .map_err(|_| errno(libc::ECONNRESET))?;
                    done += n;
                    if n < b.len() {
                        break;
                    }
                }
                let stop = tx.flow.wrote(total, done);
                let prod = tx.prod.as_ref().expect("ring path has a producer");
                prod.wake_reader(&wake::wake);
                if let Some(p) = proc_if_active() {
                    p.stats.bytes_out.fetch_add(done as u64, Ordering::Relaxed);
                    if stop.is_some_and(|s| s.newly) {
                        p.stats.flow_stops.fetch_add(1, Ordering::Relaxed);
                    }
                }
                return Ok(done);
            }
            if let Err(s) = admitted {
                if s.newly {
                    if let Some(p) = proc_if_active() {
                        p.stats.flow_stops.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            if nonblock {
                return Err(errno(libc::EAGAIN));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(errno(libc::EAGAIN));
            }
            // Sleep until the reader reads (which resumes an unread-writes stop, or
            // frees room), or the peer goes. A writer stopped by a full ring waits
            // for the low-water mark.
            let lowat = proc_if_active().map_or(4096, |p| p.cfg.xmit_lowat);
            let prod = tx.prod.as_ref().expect("ring path has a producer");
            let seen = prod.reader_reads();
            let mark = if tx.flow.is_stopped_full() {
                lowat.min(prod.rcv_cap() / 2).max(1)
            } else {
                1
            };
            let f = self.fused.get().expect("ring path has a slot");
            let Some(view) = f
                .arena
                .slot(f.slot, self.nonce)
                .and_then(|s| s.ring(self.dirs().0).ok())
            else {
                continue;
            };
            drop(tx);
            let check = || {
                let p = view.producer();
                p.reader_reads() != seen || p.room().map_or(true, |r| r >= mark)
            };
            let spin = Self::spin_us();
            if spin > 0 {
                let until = Instant::now() + Duration::from_micros(spin);
                while Instant::now() < until && !check() {
                    std::hint::spin_loop();
                }
            }
            let v = view.producer();
            let r = self.sleep(fd, libc::POLLRDHUP, 1, deadline, Some(v.waiter()), check);
            tx = lock(&self.tx);
            if let Some(p) = tx.prod.as_ref() {
                let (free, cap) = (p.room().unwrap_or(0), p.rcv_cap());
                tx.flow.reader_space(free, cap, lowat, true);
            }
            r?;
        }
    }

    /// Switches this side's writes to the ring, if both ends have attached.
    fn try_switch_tx(&self, tx: &mut Tx) {
        let Some(f) = self.fused.get() else { return };
        let Some(slot) = f.arena.slot(f.slot, self.nonce) else {
            return;
        };
        if !slot.attached(self.side.peer()) || !slot.attached(self.side) {
            return;
        }
        let Ok(ring) = slot.ring(self.dirs().0) else {
            return;
        };
        let mut prod = ring.producer();
        if !prod.set_switch(tx.kernel_sent) {
            return;
        }
        prod.wake_reader(&wake::wake);
        tx.prod = Some(prod);
        tx.path = Path::Ring;
    }

    /// Unfuses this side's writes: seal the ring (the reader drains it, then reads the
    /// kernel) and go back to the kernel for good.
    fn seal(&self, tx: &mut Tx) {
        if tx.path == Path::Ring {
            if let Some(p) = tx.prod.as_mut() {
                let _ = p.seal();
                p.wake_reader(&wake::wake);
            }
        }
        if tx.path == Path::Kernel && self.fused.get().is_some() {
            // Never switched: publish k with an immediate seal, so the reader knows
            // the ring will carry nothing.
            self.try_switch_tx(tx);
            if let Some(p) = tx.prod.as_mut() {
                let _ = p.seal();
                p.wake_reader(&wake::wake);
            }
        }
        tx.path = Path::After;
    }

    /// `shutdown(fd, SHUT_WR)` (or `SHUT_RDWR`) on the fused path: the ring's end, then
    /// the kernel's.
    pub fn shutdown_wr(&self) {
        let mut tx = lock(&self.tx);
        if tx.path == Path::Ring {
            if let Some(p) = tx.prod.as_mut() {
                let _ = p.shutdown();
                p.wake_reader(&wake::wake);
            }
        }
    }

    /// `shutdown(fd, SHUT_RD)`.
    pub fn shutdown_rd(&self) {
        lock(&self.rx).shut_rd = true;
        self.wake_local();
    }

    // ---- reading ----

    /// Reads into `bufs` (a scatter list) from `fd`. `flags`: `MSG_PEEK`,
    /// `MSG_DONTWAIT`, `MSG_WAITALL`.
    pub fn read(&self, fd: c_int, bufs: &mut [&mut [u8]], flags: c_int) -> io::Result<usize> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let waitall = flags & libc::MSG_WAITALL != 0 && flags & libc::MSG_PEEK == 0;
        let mut got = 0;
        loop {
            // MSG_WAITALL: read on into the rest of the buffers.
            let r = {
                let mut rest: Vec<&mut [u8]> = Vec::new();
                let mut skip = got;
                for b in bufs.iter_mut() {
                    if skip >= b.len() {
                        skip -= b.len();
                        continue;
                    }
                    rest.push(&mut b[skip..]);
                    skip = 0;
                }
                self.read_once(fd, &mut rest, flags, got > 0)
            };
            match r {
                Ok(0) => return Ok(got),
                Ok(n) => {
                    got += n;
                    if !waitall || got >= total {
                        return Ok(got);
                    }
                }
                Err(e) if got > 0 && e.raw_os_error() != Some(libc::EINTR) => return Ok(got),
                Err(e) if got > 0 => {
                    let _ = e;
                    return Ok(got);
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn read_once(
        &self,
        fd: c_int,
        bufs: &mut [&mut [u8]],
        flags: c_int,
        partial: bool,
    ) -> io::Result<usize> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let peek = flags & libc::MSG_PEEK != 0;
        let nonblock = self.nonblock.load(Ordering::Relaxed) || flags & libc::MSG_DONTWAIT != 0;
        let deadline = Self::deadline(&self.rcvtimeo_us);
        let mut rx = lock(&self.rx);
        loop {
            if rx.shut_rd {
                return Ok(0);
            }
            if total == 0 {
                return Ok(0);
            }
            if rx.cons.is_none() {
                if let Some(f) = self.fused.get() {
                    if let Some(ring) = f
                        .arena
                        .slot(f.slot, self.nonce)
                        .and_then(|s| s.ring(self.dirs().1).ok())
                    {
                        rx.cons = Some(ring.consumer());
                    }
                }
            }
            // The kernel part: before the switch (up to k), and after a seal.
            if rx.path == Path::Kernel {
                let k = rx.cons.as_ref().and_then(Consumer::switch_k);
                if let Some(k) = k {
                    if rx.kernel_read >= k {
                        rx.path = Path::Ring;
                        continue;
                    }
                }
                let limit = k.map_or(total, |k| total.min((k - rx.kernel_read) as usize));
                let kflags = (flags & (libc::MSG_PEEK)) | libc::MSG_DONTWAIT;
                match kernel_readv(fd, bufs, limit, kflags) {
                    Ok(0) => {
                        // Kernel end of file. If the writer switched meanwhile, its ring
                        // bytes come first (a FIN is a fence).
                        if rx.cons.as_ref().and_then(Consumer::switch_k).is_some() {
                            rx.path = Path::Ring;
                            continue;
                        }
                        return Ok(0);
                    }
                    Ok(n) => {
                        if !peek {
                            rx.kernel_read += n as u64;
                        }
                        return Ok(n);
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
                    Err(e) => return Err(e),
                }
            } else if rx.path == Path::After {
                let kflags = flags & !libc::MSG_WAITALL;
                return kernel_readv(
                    fd,
                    bufs,
                    total,
                    if nonblock {
                        kflags | libc::MSG_DONTWAIT
                    } else {
                        kflags
                    },
                );
            } else {
                let cons = rx.cons.as_mut().expect("ring path has a consumer");
                let n = if peek {
                    let b = bufs.iter_mut().find(|b| !b.is_empty()).expect("total > 0");
                    cons.peek(b)
                } else {
                    let mut v: Vec<std::io::IoSliceMut<'_>> = bufs
                        .iter_mut()
                        .map(|b| std::io::IoSliceMut::new(b))
                        .collect();
                    cons.read_vectored(&mut v)
                }
                .map_err(|_| errno(libc::ECONNRESET))?;
                if n > 0 {
                    if !peek {
                        cons.wake_writer(&wake::wake);
                        if let Some(p) = proc_if_active() {
                            p.stats.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
                        }
                    }
                    return Ok(n);
                }
                // Empty. Sealed and drained: the kernel from here on.
                if let Ok(Some(m)) = cons.sealed_at() {
                    if cons.head() >= m {
                        rx.path = Path::After;
                        continue;
                    }
                }
                if cons.is_shutdown().unwrap_or(false) {
                    return Ok(0);
                }
                // The shadow: a FIN (the writer's process closed or died) ends the
                // stream once the ring is drained; an RST is its error.
                let mut b = [0u8; 1];
                match sys::recv(fd, b.as_mut_ptr(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) {
                    Ok(0) => return Ok(0),
                    Ok(_) => {
                        // Kernel bytes after the switch with no seal: something wrote
                        // to the socket behind the library (io_uring, a raw system
                        // call). Never interleave: the connection is reset.
                        return Err(errno(libc::ECONNRESET));
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
                    Err(e) => return Err(e),
                }
            }
            if nonblock || partial {
                return Err(errno(libc::EAGAIN));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(errno(libc::EAGAIN));
            }
            // Spin a little, then sleep until the writer publishes or the shadow speaks.
            let view = self.fused.get().and_then(|f| {
                f.arena
                    .slot(f.slot, self.nonce)
                    .and_then(|s| s.ring(self.dirs().1).ok())
            });
            let path = rx.path;
            drop(rx);
            let check = || {
                let Some(v) = view.as_ref() else { return false };
                let c = v.consumer();
                match path {
                    Path::Ring => {
                        c.available().map_or(true, |a| a > 0)
                            || c.sealed_at().map_or(true, |s| s.is_some())
                            || c.is_shutdown().unwrap_or(true)
                    }
                    _ => c.switch_k().is_some(),
                }
            };
            let spin = Self::spin_us();
            if spin > 0 && view.is_some() {
                let until = Instant::now() + Duration::from_micros(spin);
                while Instant::now() < until && !check() {
                    std::hint::spin_loop();
                }
            }
            let c = view.as_ref().map(|v| v.consumer());
            let r = self.sleep(
                fd,
                libc::POLLIN | libc::POLLRDHUP,
                0,
                deadline,
                c.as_ref().map(|c| c.waiter()),
                check,
            );
            rx = lock(&self.rx);
            r?;
        }
    }

    /// Bytes ready to read without blocking (`FIONREAD`), kernel and ring.
    pub fn readable(&self, fd: c_int) -> usize {
        let rx = lock(&self.rx);
        let ring = rx
            .cons
            .as_ref()
            .and_then(|c| c.available().ok())
            .unwrap_or(0);
        let mut k: c_int = 0;
        // SAFETY: an int out-parameter.
        unsafe { crate::real::sc!(libc::SYS_ioctl, fd, libc::FIONREAD, &mut k as *mut c_int) };
        ring + k.max(0) as usize
    }

    /// Bytes sent and not yet acknowledged (`SIOCOUTQ`): the kernel's count. A byte in
    /// the ring is in the peer's receive buffer, which for TCP is acknowledged, so the
    /// ring adds nothing (the kernel's loopback likewise reports 0 for data the peer
    /// has not read yet).
    pub fn unsent(&self, fd: c_int) -> usize {
        let ring = 0;
        let mut k: c_int = 0;
        // SAFETY: an int out-parameter.
        unsafe { crate::real::sc!(libc::SYS_ioctl, fd, libc::TIOCOUTQ, &mut k as *mut c_int) };
        ring + k.max(0) as usize
    }

    /// Reads the socket's `SO_RCVTIMEO` and `SO_SNDTIMEO` (set before the connection
    /// existed, on the listener, say).
    pub fn load_timeouts(&self, fd: c_int) {
        for (name, slot) in [
            (libc::SO_RCVTIMEO, &self.rcvtimeo_us),
            (libc::SO_SNDTIMEO, &self.sndtimeo_us),
        ] {
            // SAFETY: a zeroed timeval and its size as the out-parameters.
            let mut tv: libc::timeval = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
            let r = unsafe {
                crate::real::sc!(
                    libc::SYS_getsockopt,
                    fd,
                    libc::SOL_SOCKET,
                    name,
                    &mut tv as *mut libc::timeval,
                    &mut len as *mut libc::socklen_t
                )
            };
            if r == 0 {
                let us =
                    (tv.tv_sec.max(0) as u64).saturating_mul(1_000_000) + tv.tv_usec.max(0) as u64;
                slot.store(us, Ordering::Relaxed);
            }
        }
    }

    /// The last descriptor of the connection in this process is being closed.
    pub fn closing(&self, fd: c_int) {
        // SAFETY: getpid has no preconditions.
        if unsafe { libc::getpid() } as u32 != self.pid {
            return;
        }
        if let Some(cand) = lock(&self.candidate).take() {
            if let Some(p) = proc_if_active() {
                let _ = p.reg.withdraw_candidate(cand);
            }
        }
        let Some(f) = self.fused.get() else { return };
        let Some(slot) = f.arena.slot(f.slot, self.nonce) else {
            return;
        };
        let unread = lock(&self.rx)
            .cons
            .as_ref()
            .and_then(|c| c.available().ok())
            .unwrap_or(0);
        if unread > 0 {
            // Closed with unread data: the kernel resets the connection; so must the
            // shadow.
            let l = libc::linger {
                l_onoff: 1,
                l_linger: 0,
            };
            // SAFETY: a linger option on our socket.
            unsafe {
                crate::real::sc!(
                    libc::SYS_setsockopt,
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_LINGER,
                    &l as *const libc::linger,
                    std::mem::size_of::<libc::linger>(),
                )
            };
        }
        slot.close(self.side);
        // Wake the peer's sleepers so they see it.
        if let Ok(r) = slot.ring(self.dirs().0) {
            r.producer().wake_reader(&wake::wake);
        }
        if let Ok(r) = slot.ring(self.dirs().1) {
            r.consumer().wake_writer(&wake::wake);
        }
        if !slot.attached(self.side.peer()) {
            slot.release(self.side.peer());
        }
        slot.release(self.side);
    }
}

/// `writev` on the kernel socket (`sendmsg` with the caller's flags).
fn kernel_writev(fd: c_int, bufs: &[&[u8]], flags: c_int) -> io::Result<usize> {
    let iov: Vec<libc::iovec> = bufs
        .iter()
        .map(|b| libc::iovec {
            iov_base: b.as_ptr() as *mut libc::c_void,
            iov_len: b.len(),
        })
        .collect();
    // SAFETY: an all-zero msghdr is valid.
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = iov.as_ptr() as *mut libc::iovec;
    m.msg_iovlen = iov.len();
    // SAFETY: the msghdr points at the caller's buffers, valid for their lengths.
    let r = unsafe { crate::real::sc!(libc::SYS_sendmsg, fd, &m as *const libc::msghdr, flags) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// `readv` of at most `limit` bytes from the kernel socket (`recvmsg`).
fn kernel_readv(
    fd: c_int,
    bufs: &mut [&mut [u8]],
    limit: usize,
    flags: c_int,
) -> io::Result<usize> {
    let mut left = limit;
    let mut iov: Vec<libc::iovec> = Vec::with_capacity(bufs.len());
    for b in bufs.iter_mut() {
        if left == 0 {
            break;
        }
        let n = b.len().min(left);
        iov.push(libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: n,
        });
        left -= n;
    }
    // SAFETY: an all-zero msghdr is valid.
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = iov.as_mut_ptr();
    m.msg_iovlen = iov.len();
    // SAFETY: the msghdr points at the caller's buffers, valid for the lengths given.
    let r = unsafe { crate::real::sc!(libc::SYS_recvmsg, fd, &mut m as *mut libc::msghdr, flags) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}
