//! TCP sockets with the semantics of the kernel's: [`TcpListener`] and [`TcpStream`].
//!
//! Every call enters the connection's squeue in process mode: on an idle squeue the
//! calling thread runs TCP itself (no context switch); on a busy one the call is queued
//! (with its data copied) and the caller spins for `squeue_spin_us` plus the socket's
//! busy-poll time, then parks until the owner has run it. Blocking calls that cannot
//! proceed park on the socket's [`Waitable`](super::shared::Waitable) until the squeue
//! publishes the readiness they need, or their timeout passes (then `WouldBlock`, as
//! `SO_RCVTIMEO`/`SO_SNDTIMEO` give `EAGAIN`).
//!
//! Errors carry the kernel's kinds: `ConnectionRefused`, `ConnectionReset`,
//! `ConnectionAborted`, `AddrInUse`, `AddrNotAvailable`, `NotConnected`, `BrokenPipe`,
//! `TimedOut`, `WouldBlock`, `InvalidInput`.

use super::shared::{ready, ConnShared, ListenerShared};
use super::v4;
use crate::squeue::{Mode, Squeue};
use crate::stack::perimeter::TcpPerimeter;
use crate::stack::{Stack, StackInner};
use ember_core::tcp::cc::CcAlgorithm;
use ember_core::tcp::{State, TcbInfo};
use std::io::{self, IoSlice, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest chunk copied on the queued (slow) path of one read or write.
const QUEUED_CHUNK: usize = 1 << 20;

fn closing(stack: &StackInner) -> io::Result<()> {
    if crate::squeue::depth() > 0 {
        // A socket call from inside a squeue (a probe subscriber) would wait for the
        // squeue it runs in.
        return Err(io::Error::new(
            io::ErrorKind::Deadlock,
            "socket call from inside a squeue (e.g. a probe subscriber)",
        ));
    }
    if stack.closing.load(Ordering::SeqCst) {
        return Err(io::Error::new(
            io::ErrorKind::NotConnected,
            "the stack was shut down",
        ));
    }
    Ok(())
}

/// When a timeout of `t` from now ends; a timeout too long to represent never ends.
pub(crate) fn deadline(t: Option<Duration>) -> Option<Instant> {
    t.and_then(|d| Instant::now().checked_add(d))
}

fn check_timeout(t: Option<Duration>) -> io::Result<()> {
    if t == Some(Duration::ZERO) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "cannot set a 0 duration timeout",
        ));
    }
    Ok(())
}

/// A TCP connection.
pub struct TcpStream {
    stack: Arc<StackInner>,
    shared: Arc<ConnShared>,
}

impl core::fmt::Debug for TcpStream {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TcpStream")
            .field("local", &self.shared.local)
            .field("peer", &self.shared.remote)
            .field("squeue", &self.shared.sq)
            .finish()
    }
}

impl TcpStream {
    /// connect(): an active open from this stack, blocking until established or failed.
    pub fn connect(stack: &Stack, addr: impl ToSocketAddrs) -> io::Result<TcpStream> {
        let s = Self::connect_start(stack, v4(addr)?)?;
        s.finish_connect(None)?;
        Ok(s)
    }

    /// connect() with a timeout (`TimedOut` when it passes).
    pub fn connect_timeout(
        stack: &Stack,
        addr: SocketAddrV4,
        t: Duration,
    ) -> io::Result<TcpStream> {
        check_timeout(Some(t))?;
        let s = Self::connect_start(stack, addr)?;
        s.finish_connect(Some(t))?;
        Ok(s)
    }

    /// A non-blocking connect(): the stream is returned at once (SYN sent); it becomes
    /// writable when established. `take_error` tells a failure.
    pub fn connect_nonblocking(stack: &Stack, addr: SocketAddrV4) -> io::Result<TcpStream> {
        let s = Self::connect_start(stack, addr)?;
        s.shared.opts.lock().nonblocking = true;
        Ok(s)
    }

    fn connect_start(stack: &Stack, remote: SocketAddrV4) -> io::Result<TcpStream> {
        let inner = stack.inner.clone();
        closing(&inner)?;
        ember_core::ip::check_destination(remote)?;
        let Some((src, mtu, is_local)) = inner.source_for(*remote.ip()) else {
            return Err(io::Error::new(
                io::ErrorKind::NetworkUnreachable,
                "no route to the destination",
            ));
        };
        let sq = inner.caller_squeue();
        for _ in 0..16 {
            let local = inner.ephemeral(src, remote, sq)?;
            let inner2 = inner.clone();
            let r = inner.squeues[sq].call(u64::MAX, move |p: &mut TcpPerimeter| {
                p.connect(&inner2, crate::clock::now(), local, remote, mtu, is_local)
            });
            match r {
                Ok(shared) => {
                    return Ok(TcpStream {
                        stack: inner,
                        shared,
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            "no ephemeral port free",
        ))
    }

    fn finish_connect(&self, t: Option<Duration>) -> io::Result<()> {
        let spin = self.spin();
        let got = self.shared.waitable.wait(
            ready::CONNECTED | ready::ERROR | ready::HUP,
            deadline(t),
            spin,
        );
        if got == 0 {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out"));
        }
        // CONNECTED without ERROR or HUP is published only for a synchronized state: no
        // need to enter the squeue to ask (the common case).
        if got & (ready::ERROR | ready::HUP) == 0 && got & ready::CONNECTED != 0 {
            return Ok(());
        }
        let (state, err) = self.with(|t, _| (t.state(), t.take_error()))?;
        if state.is_synchronized() {
            return Ok(());
        }
        Err(match err {
            Some(e) => e.into(),
            None => io::Error::new(io::ErrorKind::ConnectionRefused, "connection failed"),
        })
    }

    fn sq(&self) -> &Arc<Squeue<TcpPerimeter>> {
        &self.stack.squeues[self.shared.sq]
    }

    fn tag(&self) -> u64 {
        self.shared.key.as_u64()
    }

    /// The socket's options (one lock, then a copy).
    fn opts(&self) -> super::SockOpts {
        *self.shared.opts.lock()
    }

    /// How long a waiting call busy-polls: `squeue_spin_us` plus SO_BUSY_POLL.
    fn spin_with(&self, o: &super::SockOpts) -> Duration {
        self.sq().spin() + o.busy_poll
    }

    fn spin(&self) -> Duration {
        self.spin_with(&self.opts())
    }

    /// Runs `f` in the connection's squeue.
    fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut TcpPerimeter, &StackInner, ember_core::time::Instant) -> R + Send + 'static,
    ) -> io::Result<R> {
        closing(&self.stack)?;
        let stack = self.stack.clone();
        Ok(self.sq().call(self.tag(), move |p: &mut TcpPerimeter| {
            f(p, &stack, crate::clock::now())
        }))
    }

    /// Runs `f` on the connection's `Tcb`, with the time, and sends what that caused.
    fn with<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut ember_core::tcp::Tcb, ember_core::time::Instant) -> R + Send + 'static,
    ) -> io::Result<R> {
        let key = self.shared.key;
        self.call(move |p, stack, now| p.with_tcb(stack, now, key, |t| f(t, now)))?
    }

    fn recv_once(&self, buf: &mut [u8], peek: bool, spin: Duration) -> io::Result<usize> {
        closing(&self.stack)?;
        let key = self.shared.key;
        let stack = &*self.stack;
        match self.sq().try_process_spin(
            |p: &mut TcpPerimeter| p.recv(stack, crate::clock::now(), key, buf, peek),
            spin,
        ) {
            Ok(r) => r,
            Err(_) => {
                let len = buf.len().min(QUEUED_CHUNK);
                let (r, v) = self.call(move |p, stack, now| {
                    let mut v = vec![0u8; len];
                    let r = p.recv(stack, now, key, &mut v, peek);
                    (r, v)
                })?;
                if let Ok(n) = r {
                    buf[..n].copy_from_slice(&v[..n]);
                }
                r
            }
        }
    }

    fn send_once(&self, data: &[u8], oob: bool, spin: Duration) -> io::Result<usize> {
        closing(&self.stack)?;
        let key = self.shared.key;
        let stack = &*self.stack;
        match self.sq().try_process_spin(
            |p: &mut TcpPerimeter| p.send(stack, crate::clock::now(), key, data, oob),
            spin,
        ) {
            Ok(r) => r,
            Err(_) => {
                let v = data[..data.len().min(QUEUED_CHUNK)].to_vec();
                self.call(move |p, stack, now| p.send(stack, now, key, &v, oob))?
            }
        }
    }

    fn read_inner(&self, buf: &mut [u8], peek: bool) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.shared.rd_shut.load(Ordering::SeqCst) {
            return Ok(0);
        }
        let opts = self.opts();
        let spin = self.spin_with(&opts);
        let dl = deadline(opts.read_timeout);
        loop {
            if self.shared.rd_shut.load(Ordering::SeqCst) {
                return Ok(0);
            }
            match self.recv_once(buf, peek, spin) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && !opts.nonblocking => {
                    let got = self.shared.waitable.wait(
                        ready::READ | ready::ERROR | ready::HUP,
                        dl,
                        spin,
                    );
                    if got == 0 {
                        return Err(io::Error::new(io::ErrorKind::WouldBlock, "read timed out"));
                    }
                }
                r => return r,
            }
        }
    }

    /// The connection's state, or `NotConnected` once it is gone.
    fn tcb_state(&self) -> io::Result<State> {
        let key = self.shared.key;
        self.call(move |p, _, _| p.info(key).map(|(i, _)| i.state))?
            .ok_or_else(|| io::ErrorKind::NotConnected.into())
    }

    /// Is the handshake still in progress? The readiness word answers at no cost for a
    /// connection that completed (CONNECTED is published for synchronized and closed
    /// states); otherwise the squeue is asked.
    fn connecting(&self) -> io::Result<bool> {
        if self.shared.waitable.ready() & ready::CONNECTED != 0 {
            return Ok(false);
        }
        Ok(matches!(
            self.tcb_state()?,
            State::SynSent | State::SynReceived
        ))
    }

    fn write_inner(&self, data: &[u8], oob: bool) -> io::Result<usize> {
        let opts = self.opts();
        let spin = self.spin_with(&opts);
        let dl = deadline(opts.write_timeout);
        // send(2) on a connection still opening waits for it (Linux
        // sk_stream_wait_connect): EAGAIN when non-blocking. The core would queue the
        // data in SYN-SENT (RFC 9293 §3.10.2), which a non-blocking caller, told by
        // poll that the socket is not writable yet, does not expect.
        while self.connecting()? {
            if opts.nonblocking {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let got =
                self.shared
                    .waitable
                    .wait(ready::CONNECTED | ready::ERROR | ready::HUP, dl, spin);
            if got == 0 {
                return Err(io::Error::new(io::ErrorKind::WouldBlock, "write timed out"));
            }
        }
        if data.is_empty() {
            // A 0-byte send still reports EPIPE, ECONNRESET... (Linux checks the
            // socket before the length); with room or without, it sends nothing.
            return match self.send_once(data, oob, spin) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
                r => r,
            };
        }
        loop {
            match self.send_once(data, oob, spin) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && !opts.nonblocking => {
                    let got = self.shared.waitable.wait(
                        ready::WRITE | ready::ERROR | ready::HUP,
                        dl,
                        spin,
                    );
                    if got == 0 {
                        return Err(io::Error::new(io::ErrorKind::WouldBlock, "write timed out"));
                    }
                }
                r => return r,
            }
        }
    }

    /// Reads without consuming (MSG_PEEK).
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_inner(buf, true)
    }

    /// Sends `data` as urgent data (MSG_OOB): the urgent pointer marks its last byte.
    /// Fused connections unfuse first (ember does not carry urgent data fused).
    pub fn send_urgent(&self, data: &[u8]) -> io::Result<usize> {
        self.write_inner(data, true)
    }

    /// SIOCATMARK: is the next byte to read the last urgent byte's successor... that
    /// is, does the read position sit at the urgent mark? Reads stop at the mark.
    pub fn at_mark(&self) -> io::Result<bool> {
        self.with(|t, _| t.urgent_mark() == Some(0))
    }

    /// shutdown(2).
    pub fn shutdown(&self, how: std::net::Shutdown) -> io::Result<()> {
        use std::net::Shutdown::*;
        if matches!(how, Read | Both) {
            self.shared.rd_shut.store(true, Ordering::SeqCst);
            // Published from inside the squeue, like every other readiness change, so it
            // cannot race the squeue's own publication.
            let key = self.shared.key;
            let state = self.call(move |p, _, _| {
                p.publish(key);
                p.info(key).map(|(i, _)| i.state)
            })?;
            // Linux inet_shutdown: a closed socket (reset, or gone) is ENOTCONN.
            if state.is_none_or(|s| s == State::Closed) {
                return Err(io::ErrorKind::NotConnected.into());
            }
        }
        if matches!(how, Write | Both) {
            let key = self.shared.key;
            self.call(move |p, stack, now| p.shutdown_write(stack, now, key))??;
        }
        Ok(())
    }

    /// TCP_NODELAY.
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.with(move |t, _| t.set_nodelay(on))
    }

    /// TCP_MAXSEG: cap the MSS advertised (if the SYN has not gone yet) and the size of
    /// the segments sent; `InvalidInput` outside 88..=32767, as Linux's EINVAL.
    pub fn set_max_segment(&self, mss: u32) -> io::Result<()> {
        self.with(move |t, _| t.set_user_mss(mss))?
            .map_err(io::Error::from)
    }

    /// TCP_CORK: hold partial segments until uncorked or `tcp_cork_interval`.
    pub fn set_cork(&self, on: bool) -> io::Result<()> {
        self.with(move |t, now| t.set_cork(now, on))
    }

    /// SO_LINGER: `Some(Duration::ZERO)` makes close reset the connection.
    pub fn set_linger(&self, l: Option<Duration>) -> io::Result<()> {
        self.shared.opts.lock().linger = l;
        Ok(())
    }

    pub fn linger(&self) -> io::Result<Option<Duration>> {
        Ok(self.shared.opts.lock().linger)
    }

    /// SO_KEEPALIVE.
    pub fn set_keepalive(&self, on: bool) -> io::Result<()> {
        self.with(move |t, now| t.set_keepalive(now, on))
    }

    /// TCP_KEEPIDLE: the idle time before the first keepalive probe, in whole seconds
    /// (a fraction is dropped, as the option's integer seconds have none), 1..=32767 s
    /// as on Linux, else `InvalidInput` (EINVAL). On a connection with keepalive on, the
    /// timer is re-armed for the new time counted from the last segment received.
    pub fn set_keepalive_idle(&self, idle: Duration) -> io::Result<()> {
        let idle = keepalive_secs(idle, MAX_TCP_KEEPIDLE, "TCP_KEEPIDLE")?;
        self.with(move |t, now| t.set_keepalive_idle(now, idle))
    }

    /// TCP_KEEPIDLE as in use: the value set, else `tcp_keepalive_interval` as the
    /// connection was created.
    pub fn keepalive_idle(&self) -> io::Result<Duration> {
        self.with(|t, _| t.keepalive_params().0)
    }

    /// TCP_KEEPINTVL: the time between unanswered keepalive probes, in whole seconds,
    /// 1..=32767 s, else `InvalidInput` (EINVAL).
    pub fn set_keepalive_interval(&self, intvl: Duration) -> io::Result<()> {
        let intvl = keepalive_secs(intvl, MAX_TCP_KEEPINTVL, "TCP_KEEPINTVL")?;
        self.with(move |t, _| t.set_keepalive_intvl(intvl))
    }

    /// TCP_KEEPINTVL as in use: the value set, else `tcp_keepalive_intvl`.
    pub fn keepalive_interval(&self) -> io::Result<Duration> {
        self.with(|t, _| t.keepalive_params().1)
    }

    /// TCP_KEEPCNT: unanswered probes before the connection is dropped, 1..=127, else
    /// `InvalidInput` (EINVAL).
    pub fn set_keepalive_count(&self, probes: u32) -> io::Result<()> {
        if !(1..=MAX_TCP_KEEPCNT).contains(&probes) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "TCP_KEEPCNT must be 1..=127",
            ));
        }
        self.with(move |t, _| t.set_keepalive_probes(probes))
    }

    /// TCP_KEEPCNT as in use: the value set, else `tcp_keepalive_probes`.
    pub fn keepalive_count(&self) -> io::Result<u32> {
        self.with(|t, _| t.keepalive_params().2)
    }

    /// SO_KEEPALIVE as set.
    pub fn keepalive(&self) -> io::Result<bool> {
        self.with(|t, _| t.keepalive())
    }

    /// TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT at once (any positive values; the timer
    /// runs on as armed). [`TcpStream::set_keepalive_idle`] and its siblings are the
    /// socket options one by one, with Linux's ranges.
    pub fn set_keepalive_params(
        &self,
        idle: Duration,
        intvl: Duration,
        probes: u32,
    ) -> io::Result<()> {
        if idle.is_zero() || intvl.is_zero() || probes == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "keepalive values must be positive",
            ));
        }
        self.with(move |t, _| t.set_keepalive_params(idle, intvl, probes))
    }

    /// TCP_USER_TIMEOUT.
    pub fn set_user_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.with(move |x, _| x.set_user_timeout(t))
    }

    /// TCP_CONGESTION.
    pub fn set_congestion_control(&self, alg: CcAlgorithm) -> io::Result<()> {
        self.with(move |t, _| t.set_congestion_control(alg))
    }

    /// SO_SNDBUF (clamped to `tcp_max_buf`, and from below to the core's minimum: as
    /// on Linux, 0 or `usize::MAX` are not errors).
    pub fn set_send_buffer_size(&self, bytes: usize) -> io::Result<()> {
        self.with(move |t, _| t.set_send_buffer(bytes))
    }

    /// SO_RCVBUF (clamped as SO_SNDBUF is).
    pub fn set_recv_buffer_size(&self, bytes: usize) -> io::Result<()> {
        self.with(move |t, _| t.set_recv_buffer(bytes))
    }

    /// IP_TOS.
    pub fn set_tos(&self, tos: u8) -> io::Result<()> {
        self.with(move |t, _| t.set_tos(tos))
    }

    /// O_NONBLOCK.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.shared.opts.lock().nonblocking = on;
        Ok(())
    }

    /// SO_RCVTIMEO (`None` = block forever; zero is refused, as std does).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        check_timeout(t)?;
        self.shared.opts.lock().read_timeout = t;
        Ok(())
    }

    /// SO_SNDTIMEO.
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        check_timeout(t)?;
        self.shared.opts.lock().write_timeout = t;
        Ok(())
    }

    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.shared.opts.lock().read_timeout)
    }

    pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.shared.opts.lock().write_timeout)
    }

    /// SO_BUSY_POLL: spin this long (plus `squeue_spin_us`) before parking.
    pub fn set_busy_poll(&self, d: Duration) -> io::Result<()> {
        self.shared.opts.lock().busy_poll = d.min(Duration::from_millis(100));
        Ok(())
    }

    /// SO_ERROR: the pending error, cleared.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        let key = self.shared.key;
        Ok(self
            .call(move |p, _, _| p.take_error(key))??
            .map(Into::into))
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(SocketAddr::V4(self.shared.local))
    }

    /// getpeername(2): `NotConnected` while the handshake is in progress and once the
    /// connection is closed (reset, or the stack shut down), as Linux's.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        let r = self.shared.waitable.ready();
        if r & ready::CONNECTED == 0
            || r & ready::HUP != 0
            || self.stack.closing.load(Ordering::SeqCst)
        {
            // Not plainly connected: ask the squeue (which refuses after a shutdown).
            let s = self.tcb_state()?;
            if matches!(s, State::SynSent | State::Closed) {
                return Err(io::ErrorKind::NotConnected.into());
            }
        }
        Ok(SocketAddr::V4(self.shared.remote))
    }

    /// FIONREAD: bytes ready to read (as last published by the squeue).
    pub fn recv_available(&self) -> usize {
        self.shared.rx_avail.load(Ordering::Relaxed) as usize
    }

    /// A `tcp_info`-like snapshot of the connection ([`TcbInfo`]): state, sequence
    /// variables, windows and MSS values (`snd_mss`, `rcv_mss`, `adv_mss`, `user_mss`,
    /// `pmtu`), congestion control (`cwnd`/`ssthresh` in bytes, `ca_state` in Linux's
    /// `tcpi_ca_state` numbering: 0 open, 1 disorder, 3 recovery, 4 loss), the RTT
    /// estimator (`srtt`, `rttvar`, `rto`, `min_rtt`, `backoff`), negotiated options
    /// (`timestamps`, `sack`, `window_scaling`, the shifts), byte and segment counters
    /// (`bytes_received`, `stats`), `probes`, and whether TCP Fusion carries the data
    /// (`fused`). `last_data_recv`/`last_data_sent` are instants on the runtime's clock
    /// ([`crate::clock::now`] gives the current one; the difference is the idle time,
    /// Linux's `tcpi_last_data_recv`/`tcpi_last_data_sent`). Loss recovery counts, in
    /// segments: `lost` (deemed lost, not yet SACKed or acknowledged), `retrans`
    /// (retransmissions not yet SACKed or acknowledged), both 0 outside recovery;
    /// `reordering` (3 until reordering is seen, then the largest distance observed);
    /// `delivered` (acknowledged or SACKed, the SYN counted). `chrono` holds the time the
    /// connection was busy with data and, of it, limited by the peer's receive window
    /// or by the send buffer; its methods (`busy_time`, `rwnd_limited_time`,
    /// `sndbuf_limited_time`) add the running period up to a `now` from
    /// [`crate::clock::now`] (Linux's `tcpi_busy_time`, `tcpi_rwnd_limited`,
    /// `tcpi_sndbuf_limited`).
    pub fn tcp_info(&self) -> io::Result<TcbInfo> {
        let key = self.shared.key;
        self.call(move |p, _, _| p.info(key))?
            .map(|(i, _)| i)
            .ok_or_else(|| io::ErrorKind::NotConnected.into())
    }

    /// Is the connection fused with a local peer right now?
    pub fn is_fused(&self) -> io::Result<bool> {
        Ok(self.tcp_info()?.fused)
    }

    /// The connection's state.
    pub fn state(&self) -> io::Result<State> {
        Ok(self.tcp_info()?.state)
    }

    /// The squeue this connection is bound to.
    pub fn squeue(&self) -> usize {
        self.shared.sq
    }

    /// sendfile(2): sends `len` bytes of `file` from `offset` (positional reads: the
    /// file's cursor does not move). Returns bytes sent; stops early on `WouldBlock`
    /// for a non-blocking socket.
    pub fn sendfile(&self, file: &std::fs::File, offset: u64, len: usize) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; len.min(256 * 1024)];
        let mut sent = 0usize;
        while sent < len {
            let want = (len - sent).min(buf.len());
            let n = file.read_at(&mut buf[..want], offset + sent as u64)?;
            if n == 0 {
                break;
            }
            let mut off = 0;
            while off < n {
                match self.write_inner(&buf[off..n], false) {
                    Ok(w) => off += w,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock && sent + off > 0 => {
                        return Ok(sent + off)
                    }
                    Err(e) => return Err(e),
                }
            }
            sent += n;
        }
        Ok(sent)
    }

    /// The readiness word (for pollers and async adapters).
    pub fn readiness(&self) -> u32 {
        self.shared.waitable.ready()
    }

    pub(crate) fn shared(&self) -> &Arc<ConnShared> {
        &self.shared
    }
}

impl Read for TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_inner(buf, false)
    }
}

impl Read for &TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_inner(buf, false)
    }
}

impl Write for TcpStream {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.write_inner(data, false)
    }

    /// writev(2): the vector goes to TCP as one send (one segment when it fits).
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        (&*self).write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for &TcpStream {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.write_inner(data, false)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if bufs.len() == 1 {
            return self.write_inner(&bufs[0], false);
        }
        let mut v = Vec::with_capacity(total.min(QUEUED_CHUNK));
        for b in bufs {
            let room = QUEUED_CHUNK - v.len();
            v.extend_from_slice(&b[..b.len().min(room)]);
            if v.len() == QUEUED_CHUNK {
                break;
            }
        }
        self.write_inner(&v, false)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for TcpStream {
    fn drop(&mut self) {
        if self.shared.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        let o = self.opts();
        let abort = o.linger == Some(Duration::ZERO);
        let key = self.shared.key;
        let close = move |p: &mut TcpPerimeter| {
            if let Some(stack) = p.stack.upgrade() {
                p.close(&stack, crate::clock::now(), key, abort);
            }
        };
        // Like any socket call, wait a little for a busy squeue and close here rather
        // than leave the work (unfusing, the FIN) to whichever thread owns it.
        if let Err(close) = self.sq().try_process_spin(close, self.spin_with(&o)) {
            self.sq().enter(Mode::Fill, self.tag(), close);
        }
    }
}

/// A listening socket.
pub struct TcpListener {
    stack: Arc<StackInner>,
    l: Arc<ListenerShared>,
}

impl core::fmt::Debug for TcpListener {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TcpListener")
            .field("local", &self.l.local)
            .finish()
    }
}

impl TcpListener {
    /// bind() + listen(128) with SO_REUSEADDR (as Rust's std does): listening on a port
    /// that only TIME-WAIT or other connections use is allowed; another listener on the
    /// same address (or a wildcard overlap) is `AddrInUse`. Port 0 picks a free port.
    pub fn bind(stack: &Stack, addr: impl ToSocketAddrs) -> io::Result<TcpListener> {
        Self::bind_with(stack, v4(addr)?, 128, true)
    }

    /// bind() + listen(`backlog`); without `reuse_addr`, a port any connection still
    /// uses (TIME-WAIT included) is `AddrInUse`, as Linux without SO_REUSEADDR.
    pub fn bind_with(
        stack: &Stack,
        local: SocketAddrV4,
        backlog: u32,
        reuse_addr: bool,
    ) -> io::Result<TcpListener> {
        let inner = stack.inner.clone();
        closing(&inner)?;
        if !local.ip().is_unspecified() && !inner.is_local_addr(*local.ip()) {
            return Err(io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                "address not available",
            ));
        }
        let max_q = inner.params().tcp_conn_req_max_q;
        let backlog = backlog.clamp(1, max_q);
        let local = if local.port() == 0 {
            let (lo, hi) = {
                let p = inner.params();
                (p.tcp_smallest_anon_port, p.tcp_largest_anon_port)
            };
            let mut found = None;
            for p in lo..=hi {
                let p = p as u16;
                if !inner.classifier.listening(*local.ip(), p) && !inner.classifier.port_in_use(p) {
                    found = Some(SocketAddrV4::new(*local.ip(), p));
                    break;
                }
            }
            found.ok_or_else(|| io::Error::new(io::ErrorKind::AddrInUse, "no free port"))?
        } else {
            if !reuse_addr && inner.classifier.port_in_use(local.port()) {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "address already in use",
                ));
            }
            local
        };
        let l = ListenerShared::new(local, backlog);
        inner.classifier.add_listener(l.clone())?;
        Ok(TcpListener { stack: inner, l })
    }

    /// accept(): the next established connection (blocking unless non-blocking).
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        loop {
            closing(&self.stack)?;
            let popped = {
                // Readiness is published under the queue lock, so it always matches the
                // queue (a concurrent enqueue cannot have its ACCEPT cleared).
                let mut q = self.l.accept_q.lock();
                let c = q.pop_front();
                self.l.update_ready(q.len());
                c
            };
            if let Some(shared) = popped {
                let key = shared.key;
                self.stack.squeues[shared.sq].enter(
                    Mode::Process,
                    key.as_u64(),
                    move |p: &mut TcpPerimeter| p.accepted(key),
                );
                let peer = SocketAddr::V4(shared.remote);
                return Ok((
                    TcpStream {
                        stack: self.stack.clone(),
                        shared,
                    },
                    peer,
                ));
            }
            let opts = *self.l.opts.lock();
            if opts.nonblocking {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let got = self.l.waitable.wait(
                ready::ACCEPT | ready::HUP,
                deadline(opts.read_timeout),
                Duration::ZERO,
            );
            if got == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "accept timed out",
                ));
            }
        }
    }

    /// Iterates over accepted connections.
    pub fn incoming(&self) -> impl Iterator<Item = io::Result<TcpStream>> + '_ {
        std::iter::from_fn(move || Some(self.accept().map(|(s, _)| s)))
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(SocketAddr::V4(self.l.local))
    }

    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.l.opts.lock().nonblocking = on;
        Ok(())
    }

    /// A timeout for blocking `accept` (`WouldBlock` when it passes).
    pub fn set_accept_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        check_timeout(t)?;
        self.l.opts.lock().read_timeout = t;
        Ok(())
    }

    /// TCP_MAXSEG on a listener: connections it opens from now on advertise at most
    /// `mss` in their SYN,ACK (cookie SYN,ACKs included) and send segments no larger;
    /// `InvalidInput` outside 88..=32767, as Linux's EINVAL.
    pub fn set_max_segment(&self, mss: u32) -> io::Result<()> {
        if !(88..=32_767).contains(&mss) {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        self.l.user_mss.store(mss, Ordering::Relaxed);
        Ok(())
    }

    /// The listener's TCP_MAXSEG, if set.
    pub fn max_segment(&self) -> Option<u32> {
        self.l.user_mss()
    }

    /// Connections waiting to be accepted.
    pub fn pending(&self) -> usize {
        self.l.accept_q.lock().len()
    }

    /// The readiness word.
    pub fn readiness(&self) -> u32 {
        self.l.waitable.ready()
    }

    pub(crate) fn shared(&self) -> &Arc<ListenerShared> {
        &self.l
    }
}

impl Drop for TcpListener {
    fn drop(&mut self) {
        self.l.closed.store(true, Ordering::SeqCst);
        self.stack.classifier.remove_listener(&self.l);
        let queued: Vec<Arc<ConnShared>> = self.l.accept_q.lock().drain(..).collect();
        drop(queued);
        for sq in &self.stack.squeues {
            let l = self.l.clone();
            sq.enter(Mode::Process, u64::MAX, move |p: &mut TcpPerimeter| {
                if let Some(stack) = p.stack.upgrade() {
                    p.listener_closed(&stack, crate::clock::now(), &l);
                }
            });
        }
        self.l.update_ready(0);
    }
}

/// Linux's upper bounds (include/net/tcp.h): `MAX_TCP_KEEPIDLE`, `MAX_TCP_KEEPINTVL`
/// (seconds) and `MAX_TCP_KEEPCNT`.
const MAX_TCP_KEEPIDLE: u64 = 32_767;
const MAX_TCP_KEEPINTVL: u64 = 32_767;
const MAX_TCP_KEEPCNT: u32 = 127;

/// A keepalive time in whole seconds within 1..=`max`, as Linux's setsockopt checks it.
fn keepalive_secs(d: Duration, max: u64, what: &str) -> io::Result<Duration> {
    let s = d.as_secs();
    if !(1..=max).contains(&s) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} must be 1..={max} seconds"),
        ));
    }
    Ok(Duration::from_secs(s))
}

/// `127.0.0.1:port`.
pub fn localhost(port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)
}
