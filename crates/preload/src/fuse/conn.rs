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

/// The ring's view of a fused connection's readiness. The kernel's view of the shadow
/// socket still counts: its `POLLIN` means kernel bytes before the switch, or a FIN;
/// its `POLLHUP`, `POLLERR`, `POLLRDHUP` and `POLLPRI` are the connection's. While this
/// side writes into the ring (`ring_tx`), the kernel's `POLLOUT` means nothing and
/// `writable` replaces it.
#[derive(Debug, Default, Clone, Copy)]
pub struct Ready {
    pub readable: bool,
    pub writable: bool,
    pub ring_tx: bool,
    /// Bytes published into the ring this side reads (an edge when it moves).
    pub in_seq: u64,
    /// The reader's reads of the ring this side writes (an edge when it moves).
    pub out_seq: u64,
}

/// Where a connection's slot is.
pub struct Fused {
    pub arena: Arc<Arena>,
    pub slot: usize,
    /// The connection's nonce (from its registry candidate): the slot's owner check.
    pub nonce: u64,
    /// The peer's process.
    pub peer_pid: u32,
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
    /// The reader's reads when the flow control last heard of them.
    seen_reads: u64,
}

fn tx_seen_reads(tx: &Tx) -> u64 {
    tx.seen_reads
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
    /// Their numbers (for the service thread, which has none of its own).
    pub fds: Mutex<Vec<c_int>>,
    /// Handed over to the kernel for good (before fork, exec, SCM_RIGHTS): both
    /// directions by kernel.
    pub handed_over: AtomicBool,
    pub nonblock: AtomicBool,
    pub candidate: Mutex<Option<ember_xproc::registry::CandidateId>>,
    pub fused: OnceLock<Fused>,
    /// An accepted connection whose client's candidate is not claimed yet: (local,
    /// remote, until when to keep trying).
    pub claim: Mutex<Option<(std::net::SocketAddr, std::net::SocketAddr, Instant)>>,
    tx: Mutex<Tx>,
    rx: Mutex<Rx>,
    /// Tokens of this process's threads sleeping in a read and in a write (0: none),
    /// for a wake-up by this process (the slot arrived, the connection unfused).
    sleeping: [AtomicU64; 2],
    /// `SO_RCVTIMEO` and `SO_SNDTIMEO`, in microseconds (0: none).
    pub rcvtimeo_us: AtomicU64,
    pub sndtimeo_us: AtomicU64,
}

/// All signals blocked for the rest of a blocking call, the old mask kept for the
/// `ppoll`s that sleep: a signal that comes between two sleeps of one call stays
/// pending and interrupts the next sleep, as it would interrupt the kernel's `recv`
/// (which has no such gaps). Dropping it restores the mask.
pub struct SigBlock {
    old: libc::sigset_t,
}

impl SigBlock {
    fn new() -> SigBlock {
        // SAFETY: a full set applied to this thread; the old mask is kept to restore.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            crate::real::sc!(
                libc::SYS_rt_sigprocmask,
                libc::SIG_BLOCK,
                &all as *const libc::sigset_t,
                &mut old as *mut libc::sigset_t,
                8usize
            );
            SigBlock { old }
        }
    }
}

impl Drop for SigBlock {
    fn drop(&mut self) {
        // SAFETY: restores the mask this guard saved.
        unsafe {
            crate::real::sc!(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK,
                &self.old as *const libc::sigset_t,
                0usize,
                8usize
            );
        }
    }
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
            fds: Mutex::new(Vec::new()),
            handed_over: AtomicBool::new(false),
            nonblock: AtomicBool::new(nonblock),
            candidate: Mutex::new(None),
            fused: OnceLock::new(),
            claim: Mutex::new(None),
            tx: Mutex::new(Tx {
                path: Path::Kernel,
                kernel_sent: 0,
                prod: None,
                flow: FusedFlow::default(),
                seen_reads: 0,
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

    /// An accepted connection still looking for its client's candidate looks again
    /// (until it finds it or its window closes).
    #[inline]
    pub fn poke(&self) {
        if self.fused.get().is_some()
            || self.side != Side::Accepted
            || self.handed_over.load(Ordering::Relaxed)
        {
            return;
        }
        let mut g = lock(&self.claim);
        let Some((local, remote, until)) = *g else {
            return;
        };
        let Some(p) = proc_if_active() else {
            *g = None;
            return;
        };
        if p.claim(self, local, remote) || Instant::now() >= until {
            *g = None;
        }
    }

    /// Wakes this process's threads sleeping on the connection.
    pub fn wake_local(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
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
    #[allow(clippy::too_many_arguments)]
    fn sleep(
        &self,
        fd: c_int,
        events: i16,
        which: usize,
        deadline: Option<Instant>,
        word: Option<&AtomicU64>,
        ready: impl Fn() -> bool,
        block: &mut Option<SigBlock>,
    ) -> io::Result<i16> {
        let mask = &block.get_or_insert_with(SigBlock::new).old as *const libc::sigset_t;
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
        let mut shadow = 0;
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
            let r = sys::ppoll_mask(&mut fds[..n], timeout, mask);
            if wfd >= 0 && fds[1].revents != 0 {
                wake::drain(wfd);
            }
            shadow = fds[0].revents;
            r
        };
        if let Some(w) = word {
            ember_xproc::wake::disarm(w, token);
        }
        self.sleeping[which].store(0, Ordering::Relaxed);
        match r {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Err(e),
            _ => Ok(shadow),
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
        // A blocking write moves everything (TCP's send blocks until the last byte is
        // queued), unless a signal, a timeout or an error stops it after some bytes:
        // then it returns what it moved.
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let nonblock = self.nonblock.load(Ordering::Relaxed) || flags & libc::MSG_DONTWAIT != 0;
        let mut done = 0;
        loop {
            // The first try takes the caller's buffers as they are (no allocation on
            // the common path); a blocking write that moved part builds what is left.
            let r = if done == 0 {
                self.write_once(fd, bufs, flags)
            } else {
                let mut rest: Vec<&[u8]> = Vec::with_capacity(bufs.len());
                let mut skip = done;
                for b in bufs {
                    if skip >= b.len() {
                        skip -= b.len();
                        continue;
                    }
                    rest.push(&b[skip..]);
                    skip = 0;
                }
                self.write_once(fd, &rest, flags)
            };
            match r {
                Ok(n) => {
                    done += n;
                    if nonblock || done >= total || n == 0 {
                        return Ok(done);
                    }
                }
                Err(_) if done > 0 => return Ok(done),
                Err(e) => return Err(e),
            }
        }
    }

    fn write_once(&self, fd: c_int, bufs: &[&[u8]], flags: c_int) -> io::Result<usize> {
        self.poke();
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let nonblock = self.nonblock.load(Ordering::Relaxed) || flags & libc::MSG_DONTWAIT != 0;
        let deadline = Self::deadline(&self.sndtimeo_us);
        let mut block = None;
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
            let slot = f.arena.slot(f.slot, f.nonce);
            // The peer gone from the ring (closed, or asked to unfuse): back to the
            // kernel, which then answers as it would.
            if slot.is_some_and(|s| s.unfuse_asked(self.side.peer())) {
                self.take_back_locked(&mut tx, fd);
                continue;
            }
            if slot.is_none_or(|s| s.closed(self.side.peer())) {
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
            let reads = prod.reader_reads();
            let room = prod.room().map_err(|_| errno(libc::ECONNRESET))?;
            if read {
                tx.flow.reader_read();
                tx.seen_reads = reads;
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
            // Stopped by the unread-writes limit: only a read lets it go on.
            let unread_min = proc_if_active().map_or(8, |p| p.cfg.unread_min);
            let for_read = unread_min > 0 && tx.flow.unread_writes() >= unread_min;
            let f = self.fused.get().expect("ring path has a slot");
            let Some(view) = f
                .arena
                .slot(f.slot, f.nonce)
                .and_then(|s| s.ring(self.dirs().0).ok())
            else {
                continue;
            };
            drop(tx);
            let check = || {
                let p = view.producer();
                p.reader_reads() != seen || (!for_read && p.room().map_or(true, |r| r >= mark))
            };
            let spin = Self::spin_us();
            if spin > 0 {
                let until = Instant::now() + Duration::from_micros(spin);
                while Instant::now() < until && !check() {
                    std::hint::spin_loop();
                }
            }
            let v = view.producer();
            let r = self.sleep(
                fd,
                libc::POLLRDHUP,
                1,
                deadline,
                Some(v.waiter()),
                check,
                &mut block,
            );
            tx = lock(&self.tx);
            if let Some(p) = tx.prod.as_ref() {
                let (free, cap) = (p.room().unwrap_or(0), p.rcv_cap());
                tx.flow.reader_space(free, cap, lowat, true);
            }
            match r {
                // The reader's process closed the connection or died (its kernel
                // socket sent a FIN or RST): what it had not read is lost, as with the
                // kernel, and the rest goes by kernel, which answers as it would.
                Ok(ev) if ev & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0 => {
                    self.seal(&mut tx);
                    if let Some(p) = proc_if_active() {
                        p.stats.unfused_peer_closed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(_) => {}
                Err(e)
                    if e.kind() == io::ErrorKind::Interrupted
                        && super::restarts(deadline.is_some()) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Switches this side's writes to the ring, if both ends have attached.
    fn try_switch_tx(&self, tx: &mut Tx) {
        let Some(f) = self.fused.get() else { return };
        let Some(slot) = f.arena.slot(f.slot, f.nonce) else {
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

    /// The reader asked for the ring's bytes back (it hands the connection to the
    /// kernel before a fork, an exec or an SCM_RIGHTS): seal the ring, send what the
    /// reader has not read of it by kernel, in order, and write by kernel from then on.
    /// The reader reads only the kernel once it asked, so it gets every byte once.
    pub fn take_back(&self) {
        let fd = lock(&self.fds).first().copied();
        let Some(fd) = fd else { return };
        let mut tx = lock(&self.tx);
        self.take_back_locked(&mut tx, fd);
    }

    fn take_back_locked(&self, tx: &mut Tx, fd: c_int) {
        if tx.path == Path::After {
            return;
        }
        let was_ring = tx.path == Path::Ring;
        self.seal(tx);
        if !was_ring {
            return;
        }
        let Some(f) = self.fused.get() else { return };
        let Some(ring) = f
            .arena
            .slot(f.slot, f.nonce)
            .and_then(|s| s.ring(self.dirs().0).ok())
        else {
            return;
        };
        // The reader froze its head: read the rest on its behalf and resend it.
        let mut c = ring.consumer();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = match c.read(&mut buf) {
                Ok(n) if n > 0 => n,
                _ => break,
            };
            let mut off = 0;
            while off < n {
                match sys::send(fd, buf[off..n].as_ptr(), n - off, libc::MSG_NOSIGNAL) {
                    Ok(k) => off += k,
                    Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                        let mut p = [libc::pollfd {
                            fd,
                            events: libc::POLLOUT,
                            revents: 0,
                        }];
                        let _ = sys::ppoll(&mut p, Some(Duration::from_millis(100)));
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return,
                }
            }
        }
    }

    /// Hands the connection over to the kernel for good, before this process forks,
    /// execs or passes the descriptor away: this side's writes seal the ring, and the
    /// writer toward this side is asked to take back what this side has not read and
    /// send it by kernel (through its service thread, so it happens even if the writer
    /// is idle). From then on both directions are the kernel's, whoever holds the
    /// descriptor.
    pub fn hand_over(&self) {
        if self.handed_over.swap(true, Ordering::AcqRel) {
            return;
        }
        *lock(&self.claim) = None;

        {
            let mut tx = lock(&self.tx);
            self.seal(&mut tx);
        }
        {
            let mut rx = lock(&self.rx);
            rx.path = Path::After;
            rx.cons = None;
        }
        let Some(f) = self.fused.get() else { return };
        let Some(slot) = f.arena.slot(f.slot, f.nonce) else {
            return;
        };
        slot.ask_unfuse(self.side);
        if let Some(p) = proc_if_active() {
            p.send_take_back(f.peer_pid, f.nonce);
        }
        // Wake the peer's writer if it sleeps on a full ring, so it sees the request.
        if let Ok(r) = slot.ring(self.dirs().1) {
            r.consumer().wake_writer(&wake::wake);
        }
    }

    /// The kernel says the peer shut its side (`POLLRDHUP`, `POLLHUP`, `POLLERR` on the
    /// shadow): this side's writes leave the ring (sealed) and go by kernel, which
    /// answers as it would (a reader that died or closed resets the connection; one
    /// that only half-closed still gets every byte, the ring's first).
    pub fn peer_shut(&self) {
        let mut tx = lock(&self.tx);
        if tx.path == Path::Ring {
            self.seal(&mut tx);
            if let Some(p) = proc_if_active() {
                p.stats.unfused_peer_closed.fetch_add(1, Ordering::Relaxed);
            }
        }
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
        // Later writes meet the kernel's shut socket: EPIPE (and SIGPIPE), as without
        // fusion.
        tx.path = Path::After;
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
            // MSG_WAITALL: read on into the rest of the buffers (built only then).
            let r = if got == 0 {
                self.read_once(fd, bufs, flags)
            } else {
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
                self.read_once(fd, &mut rest, flags)
            };
            match r {
                Ok(0) => return Ok(got),
                Ok(n) => {
                    got += n;
                    if !waitall || got >= total {
                        return Ok(got);
                    }
                }
                // Bytes already read are the result, whatever stopped the rest.
                Err(_) if got > 0 => return Ok(got),
                Err(e) => return Err(e),
            }
        }
    }

    /// Makes the reader's consumer once the slot is known.
    fn attach_rx(&self, rx: &mut Rx) {
        if rx.cons.is_none() {
            if let Some(f) = self.fused.get() {
                if let Some(ring) = f
                    .arena
                    .slot(f.slot, f.nonce)
                    .and_then(|s| s.ring(self.dirs().1).ok())
                {
                    rx.cons = Some(ring.consumer());
                }
            }
        }
    }

    /// Unread bytes in the ring (the reader's side), for `SIOCATMARK`: the kernel's
    /// urgent mark lies after them.
    pub fn ring_unread(&self) -> usize {
        self.poke();
        let mut rx = lock(&self.rx);
        self.attach_rx(&mut rx);
        rx.cons
            .as_ref()
            .and_then(|c| c.available().ok())
            .unwrap_or(0)
    }

    fn read_once(&self, fd: c_int, bufs: &mut [&mut [u8]], flags: c_int) -> io::Result<usize> {
        self.poke();
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let peek = flags & libc::MSG_PEEK != 0;
        let nonblock = self.nonblock.load(Ordering::Relaxed) || flags & libc::MSG_DONTWAIT != 0;
        let deadline = Self::deadline(&self.rcvtimeo_us);
        let mut block = None;
        let mut rx = lock(&self.rx);
        loop {
            if rx.shut_rd {
                return Ok(0);
            }
            if total == 0 {
                return Ok(0);
            }
            self.attach_rx(&mut rx);
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
                let kflags = (flags & (libc::MSG_PEEK | libc::MSG_TRUNC)) | libc::MSG_DONTWAIT;
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
                let n = if flags & libc::MSG_TRUNC != 0 && !peek {
                    // TCP's MSG_TRUNC: the bytes are taken and thrown away.
                    let mut scratch = [0u8; 4096];
                    let want = total.min(scratch.len());
                    cons.read(&mut scratch[..want])
                } else if peek {
                    let b = bufs.iter_mut().find(|b| !b.is_empty()).expect("total > 0");
                    cons.peek(b)
                } else if let [b] = bufs {
                    // One buffer (read, recv): no list to build.
                    cons.read(b)
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
            if nonblock {
                return Err(errno(libc::EAGAIN));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(errno(libc::EAGAIN));
            }
            // Spin a little, then sleep until the writer publishes or the shadow speaks.
            let view = self.fused.get().and_then(|f| {
                f.arena
                    .slot(f.slot, f.nonce)
                    .and_then(|s| s.ring(self.dirs().1).ok())
            });
            let path = rx.path;
            drop(rx);
            let check = || {
                // No slot when the sleep began: the slot's arrival is a reason to look
                // again (the service thread sets it, then wakes this thread's token:
                // whichever of the two sees the other's store, no wake-up is lost).
                let Some(v) = view.as_ref() else {
                    return self.fused.get().is_some();
                };
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
                &mut block,
            );
            rx = lock(&self.rx);
            match r {
                Ok(_) => {}
                Err(e)
                    if e.kind() == io::ErrorKind::Interrupted
                        && super::restarts(deadline.is_some()) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// What the ring says of readiness, beside the kernel's view of the shadow socket:
    /// see [`Ready`].
    pub fn ready(&self) -> Ready {
        self.poke();
        let mut r = Ready::default();
        if self.handed_over.load(Ordering::Acquire) {
            return r;
        }
        {
            let mut rx = lock(&self.rx);
            self.attach_rx(&mut rx);
            if rx.shut_rd {
                r.readable = true;
            } else if let Some(c) = rx.cons.as_ref() {
                let past_k = c.switch_k().is_some_and(|k| rx.kernel_read >= k);
                if rx.path == Path::Ring || (rx.path == Path::Kernel && past_k) {
                    r.readable =
                        c.available().map_or(true, |a| a > 0) || c.is_shutdown().unwrap_or(true);
                    r.in_seq = c.head().wrapping_add(c.available().unwrap_or(0) as u64);
                }
            } else if let Some(f) = self.fused.get() {
                // Attached but not read from yet: the ring may hold bytes already.
                if let Some(c) = f
                    .arena
                    .slot(f.slot, f.nonce)
                    .and_then(|s| s.ring(self.dirs().1).ok())
                    .map(|v| v.consumer())
                {
                    if c.switch_k() == Some(0) {
                        r.readable = c.available().map_or(true, |a| a > 0)
                            || c.is_shutdown().unwrap_or(true);
                        r.in_seq = c.available().unwrap_or(0) as u64;
                    }
                }
            }
        }
        let tx = lock(&self.tx);
        if tx.path == Path::Ring {
            r.ring_tx = true;
            if let Some(p) = tx.prod.as_ref() {
                let lowat = proc_if_active().map_or(4096, |p| p.cfg.xmit_lowat);
                let mark = lowat.min(p.rcv_cap() / 2).max(1);
                let unread_min = proc_if_active().map_or(8, |p| p.cfg.unread_min);
                let stopped_unread = unread_min > 0
                    && tx.flow.unread_writes() >= unread_min
                    && p.reader_reads() == tx_seen_reads(&tx);
                r.writable = p.room().is_ok_and(|room| room >= mark) && !stopped_unread;
                r.out_seq = p.reader_reads();
            }
        }
        r
    }

    /// Arms this thread's `token` on the rings a poller waits on: the ring it reads
    /// (for `readable`) and the one it writes (for `writable`).
    pub fn arm(&self, token: NonZeroU64, readable: bool, writable: bool) -> bool {
        let Some(f) = self.fused.get() else {
            return false;
        };
        let Some(s) = f.arena.slot(f.slot, f.nonce) else {
            return false;
        };
        if readable {
            if let Ok(v) = s.ring(self.dirs().1) {
                ember_xproc::wake::arm(v.consumer().waiter(), token);
            }
        }
        if writable {
            if let Ok(v) = s.ring(self.dirs().0) {
                ember_xproc::wake::arm(v.producer().waiter(), token);
            }
        }
        true
    }

    /// Undoes [`Conn::arm`].
    pub fn disarm(&self, token: NonZeroU64) {
        let _ =
            self.sleeping[0].compare_exchange(token.get(), 0, Ordering::AcqRel, Ordering::Relaxed);
        let Some(f) = self.fused.get() else { return };
        let Some(s) = f.arena.slot(f.slot, f.nonce) else {
            return;
        };
        if let Ok(v) = s.ring(self.dirs().1) {
            ember_xproc::wake::disarm(v.consumer().waiter(), token);
        }
        if let Ok(v) = s.ring(self.dirs().0) {
            ember_xproc::wake::disarm(v.producer().waiter(), token);
        }
    }

    /// Bytes ready to read without blocking (`FIONREAD`), kernel and ring.
    pub fn readable(&self, fd: c_int) -> usize {
        self.poke();
        let mut rx = lock(&self.rx);
        self.attach_rx(&mut rx);
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
        let Some(slot) = f.arena.slot(f.slot, f.nonce) else {
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
