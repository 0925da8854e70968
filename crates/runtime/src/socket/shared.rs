//! The only state shared between a connection's squeue and application threads.
//!
//! Connection state lives in its squeue and is touched only there. What application
//! threads see is small and explicit: a readiness word ([`Waitable`]) that the squeue
//! sets after every activity, a condition variable to park on, the pollers registered on
//! the socket, and the socket options that never reach TCP (blocking mode, timeouts).
//!
//! # Wake-up protocol (no lost wake-ups)
//! A waiter increments `waiters`, then checks `ready`, then parks, all under `lock`. A
//! setter that raises a bit stores `ready`, then takes `lock` and notifies if anyone
//! waits. Either the setter's lock comes after the waiter parked (it sees the waiter and
//! wakes it) or before the waiter locked (the waiter then sees the new bits): no lost
//! wake-up, with acquire/release alone. (Model-checked in `fusion_loom`.) An earlier
//! version skipped the lock when a SeqCst load of `waiters` read 0; loom, which models
//! SeqCst as acquire/release, reported a lost wake-up there, and the lock costs little.

use crate::sync::{Arc, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Condvar, Mutex, Ordering};
use ember_core::slab::Key;
use std::collections::VecDeque;
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

/// Readiness bits (level-triggered, like `poll(2)`).
pub mod ready {
    /// Data to read, or end of stream, or an error to collect.
    pub const READ: u32 = 1;
    /// Room to write (or an error to collect).
    pub const WRITE: u32 = 2;
    /// An error is pending (`take_error`).
    pub const ERROR: u32 = 4;
    /// The connection is closed both ways, or reset.
    pub const HUP: u32 = 8;
    /// A connection waits in a listener's accept queue.
    pub const ACCEPT: u32 = 16;
    /// Urgent data is pending.
    pub const URGENT: u32 = 32;
    /// The handshake completed (or failed: then ERROR too).
    pub const CONNECTED: u32 = 64;
    /// The peer shut down its sending side.
    pub const RDHUP: u32 = 128;
}

/// The bits that say something arrived for a reader (or an acceptor).
const RD_BITS: u32 = ready::READ | ready::ACCEPT | ready::URGENT | ready::RDHUP;

/// A registration of a socket on a [`crate::socket::Poller`].
#[cfg(not(loom))]
pub(crate) struct PollReg {
    pub poller: std::sync::Weak<crate::socket::poller::PollerInner>,
    pub interest: u32,
}

/// Readiness, waiters and pollers of one socket.
pub struct Waitable {
    ready: AtomicU32,
    waiters: AtomicUsize,
    lock: Mutex<()>,
    cv: Condvar,
    #[cfg(not(loom))]
    pollers: Mutex<Vec<PollReg>>,
    has_pollers: AtomicBool,
    /// Async tasks waiting for bits (mask, waker).
    wakers: Mutex<Vec<(u32, std::task::Waker)>>,
    has_wakers: AtomicBool,
    /// Bits raised inside a squeue whose wake-up waits for the squeue's release.
    pending: AtomicU32,
    /// The CPU of the thread that last made the socket readable (data, a connection to
    /// accept, end of file) and of the one that last made it writable: a waiter spins
    /// only if the producer it waits for ran on another CPU (`sync::spin_may_help`).
    rd_cpu: AtomicU32,
    wr_cpu: AtomicU32,
}

impl Default for Waitable {
    fn default() -> Self {
        Waitable {
            ready: AtomicU32::new(0),
            waiters: AtomicUsize::new(0),
            lock: Mutex::new(()),
            cv: Condvar::new(),
            #[cfg(not(loom))]
            pollers: Mutex::new(Vec::new()),
            has_pollers: AtomicBool::new(false),
            wakers: Mutex::new(Vec::new()),
            has_wakers: AtomicBool::new(false),
            pending: AtomicU32::new(0),
            rd_cpu: AtomicU32::new(u32::MAX),
            wr_cpu: AtomicU32::new(u32::MAX),
        }
    }
}

impl Waitable {
    /// The current readiness bits.
    pub fn ready(&self) -> u32 {
        self.ready.load(Ordering::SeqCst)
    }

    /// Replaces the readiness bits; wakes waiters and pollers if a bit was raised.
    pub fn set(&self, bits: u32) {
        let old = self.ready.swap(bits, Ordering::SeqCst);
        self.note_setter(bits & !old);
        self.notify(bits & !old);
    }

    /// [`Waitable::set`] from inside a squeue: the bits are stored at once (a check of
    /// `ready` sees them), the wake-up is left to [`Waitable::flush_pending`]. Returns
    /// true when the caller must arrange that call on its own way out (every thread that
    /// raises a bit does: a wake-up never waits for another thread's release). Outside
    /// a squeue it is `set`, and returns false.
    #[cfg(not(loom))]
    pub fn set_deferred(&self, bits: u32) -> bool {
        let old = self.ready.swap(bits, Ordering::SeqCst);
        let raised = bits & !old;
        self.note_setter(raised);
        if raised == 0 {
            return false;
        }
        if crate::squeue::depth() == 0 {
            self.notify(raised);
            return false;
        }
        self.pending.fetch_or(raised, Ordering::SeqCst);
        true
    }

    /// Remembers the CPU of a thread that raised bits a waiter waits for (the producer;
    /// a thread lowering bits after consuming, or running another thread's queued work,
    /// or completing its own connection, is not one).
    fn note_setter(&self, raised: u32) {
        if raised & (RD_BITS | ready::WRITE) == 0 || crate::squeue::running_others_work() {
            return;
        }
        let c = crate::sync::current_cpu();
        for (bits, slot) in [(RD_BITS, &self.rd_cpu), (ready::WRITE, &self.wr_cpu)] {
            if raised & bits != 0 && slot.load(Ordering::Relaxed) != c {
                slot.store(c, Ordering::Relaxed);
            }
        }
    }

    /// The CPU of the producer a wait for `mask` waits for (`u32::MAX`: unknown).
    fn producer_cpu(&self, mask: u32) -> u32 {
        if mask & RD_BITS != 0 {
            self.rd_cpu.load(Ordering::Relaxed)
        } else if mask & ready::WRITE != 0 {
            self.wr_cpu.load(Ordering::Relaxed)
        } else {
            u32::MAX
        }
    }

    /// Wakes whoever waits for the bits [`Waitable::set_deferred`] raised.
    pub fn flush_pending(&self) {
        let raised = self.pending.swap(0, Ordering::SeqCst);
        self.notify(raised);
    }

    /// Wakes waiters, async tasks and pollers interested in the `raised` bits.
    fn notify(&self, raised: u32) {
        if raised == 0 {
            return;
        }
        {
            // The waiter count is read under the lock the waiter checks `ready` under, so
            // the check-then-park cannot miss this store (acquire/release suffices; no
            // store-load ordering is relied on). Only when a bit is raised.
            // Notified after the lock is dropped, so the woken thread does not run into
            // a lock still held: a waiter counted under the lock is already parked in
            // the condition variable (it releases the lock only by parking).
            let waiting = {
                let _g = self.lock.lock();
                self.waiters.load(Ordering::SeqCst)
            };
            if waiting > 0 {
                self.cv.notify_all();
            }
        }
        if self.has_wakers.load(Ordering::SeqCst) {
            // Woken after the lock is dropped: an executor may poll the task at once.
            let mut due = Vec::new();
            {
                let mut v = self.wakers.lock();
                let mut i = 0;
                while i < v.len() {
                    if v[i].0 & raised != 0 {
                        due.push(v.swap_remove(i).1);
                    } else {
                        i += 1;
                    }
                }
                self.has_wakers.store(!v.is_empty(), Ordering::SeqCst);
            }
            for w in due {
                w.wake();
            }
        }
        #[cfg(not(loom))]
        if self.has_pollers.load(Ordering::SeqCst) {
            let regs = self.pollers.lock();
            for r in regs.iter() {
                if r.interest & raised != 0 {
                    if let Some(p) = r.poller.upgrade() {
                        p.notify();
                    }
                }
            }
        }
    }

    /// Raises `bits` (keeps the others), atomically: a concurrent `set` is never undone.
    pub fn raise(&self, bits: u32) {
        let old = self.ready.fetch_or(bits, Ordering::SeqCst);
        self.note_setter(bits & !old);
        self.notify(bits & !old);
    }

    /// Async readiness: the bits of `mask` that are set now, or registers `cx`'s waker
    /// to be woken when one is raised (then re-checks, so a bit raised meanwhile is not
    /// missed) and returns `Pending`.
    pub fn poll_ready(&self, mask: u32, cx: &mut std::task::Context<'_>) -> std::task::Poll<u32> {
        let r = self.ready() & mask;
        if r != 0 {
            return std::task::Poll::Ready(r);
        }
        let mut stale: Vec<std::task::Waker> = Vec::new();
        {
            let mut v = self.wakers.lock();
            if !v.iter().any(|(m, w)| *m == mask && w.will_wake(cx.waker())) {
                // Bounded: a task re-polling replaces nothing but adds at most one entry
                // per distinct (mask, waker); stale ones are woken and dropped on the
                // next raise.
                if v.len() >= 64 {
                    // Woken after the lock is dropped (below).
                    stale = v.drain(..).map(|(_, w)| w).collect();
                }
                v.push((mask, cx.waker().clone()));
            }
            self.has_wakers.store(true, Ordering::SeqCst);
        }
        for w in stale {
            w.wake();
        }
        let r = self.ready() & mask;
        if r != 0 {
            return std::task::Poll::Ready(r);
        }
        std::task::Poll::Pending
    }

    /// Parks until one of `mask` is set, or `deadline` passes. Returns the bits of `mask`
    /// that are set (0 on timeout). `spin` is busy-polled first.
    pub fn wait(&self, mask: u32, deadline: Option<Instant>, spin: Duration) -> u32 {
        let now = self.ready() & mask;
        if now != 0 {
            return now;
        }
        if !spin.is_zero() && crate::sync::spin_may_help(self.producer_cpu(mask)) {
            let t0 = Instant::now();
            while t0.elapsed() < spin {
                let r = self.ready() & mask;
                if r != 0 {
                    return r;
                }
                core::hint::spin_loop();
            }
        }
        let mut g = self.lock.lock();
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let r = loop {
            let r = self.ready() & mask;
            if r != 0 {
                break r;
            }
            match deadline {
                None => g = self.cv.wait(g),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break 0;
                    }
                    g = self.cv.wait_timeout(g, left);
                }
            }
        };
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        drop(g);
        r
    }

    #[cfg(not(loom))]
    pub(crate) fn register(&self, reg: PollReg) {
        let mut v = self.pollers.lock();
        v.retain(|r| r.poller.strong_count() > 0);
        v.push(reg);
        self.has_pollers.store(true, Ordering::SeqCst);
    }

    #[cfg(not(loom))]
    pub(crate) fn deregister(&self, poller: &std::sync::Weak<crate::socket::poller::PollerInner>) {
        let mut v = self.pollers.lock();
        v.retain(|r| !r.poller.ptr_eq(poller) && r.poller.strong_count() > 0);
        self.has_pollers.store(!v.is_empty(), Ordering::SeqCst);
    }
}

/// Options that live with the socket handle, not in TCP.
#[derive(Debug, Clone, Copy, Default)]
pub struct SockOpts {
    pub nonblocking: bool,
    pub read_timeout: Option<Duration>,
    pub write_timeout: Option<Duration>,
    /// SO_LINGER: `Some(0)` resets on close.
    pub linger: Option<Duration>,
    /// Per-socket busy poll (`SO_BUSY_POLL`), added to `squeue_spin_us`.
    pub busy_poll: Duration,
}

/// What application threads share with a TCP connection in its squeue.
pub struct ConnShared {
    pub sq: usize,
    pub key: Key,
    pub local: SocketAddrV4,
    pub remote: SocketAddrV4,
    pub waitable: Waitable,
    pub(crate) opts: Mutex<SockOpts>,
    /// Bytes readable, as last published by the squeue (FIONREAD without entering it).
    pub rx_avail: AtomicU64,
    /// The application closed its handle.
    pub closed: AtomicBool,
    /// shutdown(SHUT_RD): reads return end of file.
    pub rd_shut: AtomicBool,
}

#[cfg(not(loom))]
impl crate::squeue::Deferred for ConnShared {
    fn run_deferred(&self) {
        self.waitable.flush_pending();
    }
}

impl ConnShared {
    pub fn new(sq: usize, key: Key, local: SocketAddrV4, remote: SocketAddrV4) -> Arc<Self> {
        Arc::new(ConnShared {
            sq,
            key,
            local,
            remote,
            waitable: Waitable::default(),
            opts: Mutex::new(SockOpts::default()),
            rx_avail: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            rd_shut: AtomicBool::new(false),
        })
    }
}

/// A listening socket, shared by the squeues that create its connections and the
/// threads that accept them.
pub struct ListenerShared {
    pub local: SocketAddrV4,
    /// Largest accept queue (`listen(backlog)` clamped to `tcp_conn_req_max_q`).
    pub backlog: std::sync::atomic::AtomicU32,
    /// Established connections waiting for `accept`.
    pub(crate) accept_q: Mutex<VecDeque<Arc<ConnShared>>>,
    /// Connections in SYN-RECEIVED (the SYN queue).
    pub syn_q: std::sync::atomic::AtomicU32,
    /// When this listener last answered a SYN with a cookie (RFC 4987 §3.6), in
    /// milliseconds of the stack's clock plus one; 0 = never.
    pub cookie_at: std::sync::atomic::AtomicU64,
    /// TCP_MAXSEG set on the listener (0: not set): each connection it opens advertises
    /// and sends at most this, cookie SYN,ACKs included.
    pub user_mss: std::sync::atomic::AtomicU32,
    pub waitable: Waitable,
    pub(crate) opts: Mutex<SockOpts>,
    pub closed: AtomicBool,
}

impl ListenerShared {
    pub fn new(local: SocketAddrV4, backlog: u32) -> std::sync::Arc<Self> {
        std::sync::Arc::new(ListenerShared {
            local,
            backlog: std::sync::atomic::AtomicU32::new(backlog),
            accept_q: Mutex::new(VecDeque::new()),
            syn_q: std::sync::atomic::AtomicU32::new(0),
            cookie_at: std::sync::atomic::AtomicU64::new(0),
            user_mss: std::sync::atomic::AtomicU32::new(0),
            waitable: Waitable::default(),
            opts: Mutex::new(SockOpts::default()),
            closed: AtomicBool::new(false),
        })
    }

    /// The listener's TCP_MAXSEG, if set.
    pub fn user_mss(&self) -> Option<u32> {
        Some(self.user_mss.load(Ordering::Relaxed)).filter(|&m| m != 0)
    }

    /// Publishes whether the accept queue is non-empty.
    pub fn update_ready(&self, queued: usize) {
        let closed = self.closed.load(Ordering::SeqCst);
        let bits = if queued > 0 {
            ready::ACCEPT | ready::READ
        } else {
            0
        } | if closed { ready::HUP } else { 0 };
        self.waitable.set(bits);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_producer_cpu_is_kept_per_direction_and_only_for_raised_bits() {
        let w = Waitable::default();
        assert_eq!(w.producer_cpu(ready::READ), u32::MAX, "unknown at first");
        // Lowering bits notes nothing.
        w.set(0);
        assert_eq!(w.producer_cpu(ready::READ), u32::MAX);
        // Completing a connection (CONNECTED) is not producing data.
        w.set(ready::CONNECTED);
        assert_eq!(w.producer_cpu(ready::READ), u32::MAX);
        assert_eq!(w.producer_cpu(ready::WRITE), u32::MAX);
        // Raising WRITE notes the writer side only; READ the reader side only.
        w.set(ready::CONNECTED | ready::WRITE);
        assert!(w.producer_cpu(ready::WRITE) < 4096);
        assert_eq!(w.producer_cpu(ready::READ), u32::MAX);
        w.raise(ready::READ);
        assert!(w.producer_cpu(ready::READ) < 4096);
        assert_eq!(
            w.producer_cpu(ready::READ | ready::WRITE),
            w.rd_cpu.load(Ordering::Relaxed)
        );
        assert_eq!(w.producer_cpu(ready::HUP), u32::MAX);
    }
}
