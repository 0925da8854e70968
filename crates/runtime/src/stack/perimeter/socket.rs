//! The socket calls, run inside the squeue that owns the connection.

use super::{Connection, TcpPerimeter};
use crate::classifier::ConnLoc;
use crate::socket::ConnShared;
use crate::stack::{Probe, StackInner};
use ember_core::slab::Key;
use ember_core::tcp::tcb::ConnSpec;
use ember_core::tcp::{Tcb, TcbInfo, TcpError};
use ember_core::time::Instant;
use std::io;
use std::net::SocketAddrV4;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl TcpPerimeter {
    /// write(): fused or ordinary. `WouldBlock` when the writer must wait.
    pub fn send(
        &mut self,
        stack: &StackInner,
        now: Instant,
        key: Key,
        data: &[u8],
        oob: bool,
    ) -> io::Result<usize> {
        let Some(c) = self.conns.get(key) else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        if let Some(peer) = c.peer {
            if oob {
                // Urgent data is not carried fused: unfuse, then send it as TCP.
                self.stats.fusion_urg += 1;
                self.unfuse(stack, now, key);
            } else {
                return self.fused_send(stack, now, key, peer, data);
            }
        }
        let c = self.conns.get_mut(key).expect("checked");
        let r = if oob {
            c.tcb.send_urgent(now, data)
        } else {
            c.tcb.send(now, data)
        };
        // A connection error is reported once, by whichever call comes first (Linux
        // sock_error clears sk_err); after that, writes fail with EPIPE.
        let r = match r {
            Err(e) if e != TcpError::WouldBlock && c.tcb.error() == Some(e) => {
                let _ = c.tcb.take_error();
                c.err_reported = true;
                Err(e)
            }
            Err(TcpError::NotConnected) if c.err_reported => Err(TcpError::BrokenPipe),
            r => r,
        };
        self.flush(stack, now, key);
        self.run_lo(stack, now);
        r.map_err(Into::into)
    }

    /// read() / peek().
    pub fn recv(
        &mut self,
        stack: &StackInner,
        now: Instant,
        key: Key,
        buf: &mut [u8],
        peek: bool,
    ) -> io::Result<usize> {
        let Some(c) = self.conns.get_mut(key) else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        // A read stops at the urgent mark (as Linux's does), so the application can tell
        // with `at_mark` (SIOCATMARK) where the urgent data ends (RFC 6093: inline).
        let lim = match c.tcb.urgent_mark() {
            Some(m) if m > 0 => buf.len().min(m),
            _ => buf.len(),
        };
        let buf = &mut buf[..lim];
        let r = if peek {
            c.tcb.peek(buf)
        } else {
            c.tcb.recv(now, buf)
        };
        // A connection error is reported once (ECONNRESET...), then reads see end of
        // file, as on Linux; a never-connected socket keeps saying NotConnected.
        let r = match r {
            Err(e) if e != TcpError::WouldBlock && c.tcb.error() == Some(e) => {
                let _ = c.tcb.take_error();
                c.err_reported = true;
                Err(e)
            }
            Err(TcpError::NotConnected) if c.err_reported => Ok(0),
            r => r,
        };
        if !peek {
            if let (Ok(n), Some(peer)) = (&r, c.peer) {
                if *n > 0 {
                    self.reader_space_changed(key, peer, true);
                    self.publish(key);
                    return r.map_err(Into::into);
                }
            }
        }
        self.flush(stack, now, key);
        self.run_lo(stack, now);
        r.map_err(Into::into)
    }

    /// SO_ERROR: the pending connection error, cleared (then reads see end of file and
    /// writes EPIPE, as after any call that reported it).
    pub fn take_error(&mut self, key: Key) -> io::Result<Option<TcpError>> {
        let c = self
            .conns
            .get_mut(key)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))?;
        let e = c.tcb.take_error();
        c.err_reported |= e.is_some();
        Ok(e)
    }

    /// shutdown(SHUT_WR): unfuses first (a FIN is a real segment).
    pub fn shutdown_write(&mut self, stack: &StackInner, now: Instant, key: Key) -> io::Result<()> {
        self.unfuse(stack, now, key);
        let Some(c) = self.conns.get_mut(key) else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        let r = c.tcb.shutdown_write(now);
        self.flush(stack, now, key);
        self.run_lo(stack, now);
        r.map_err(Into::into)
    }

    /// close(): linger 0 resets; otherwise the connection finishes on its own (a
    /// close with unread data resets, as the core decides).
    pub fn close(&mut self, stack: &StackInner, now: Instant, key: Key, abort: bool) {
        self.unfuse(stack, now, key);
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        c.released = true;
        c.queued_in = None;
        if abort {
            c.tcb.abort(now);
        } else {
            c.tcb.close(now);
        }
        self.flush(stack, now, key);
        self.run_lo(stack, now);
    }

    /// Runs `f` on a connection's Tcb (socket options) and sends what that caused. On a
    /// fused connection the peer's send window then follows this end's receive space
    /// (a larger SO_RCVBUF lets a writer stopped on a full buffer go on).
    pub fn with_tcb<R>(
        &mut self,
        stack: &StackInner,
        now: Instant,
        key: Key,
        f: impl FnOnce(&mut Tcb) -> R,
    ) -> io::Result<R> {
        let c = self
            .conns
            .get_mut(key)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))?;
        let r = f(&mut c.tcb);
        if let Some(peer) = c.peer {
            self.reader_space_changed(key, peer, false);
        }
        self.flush(stack, now, key);
        self.run_lo(stack, now);
        Ok(r)
    }

    /// The `tcp_info`-like snapshot of a connection.
    pub fn info(&self, key: Key) -> Option<(TcbInfo, bool)> {
        self.conns
            .get(key)
            .map(|c| (c.tcb.info(), c.peer.is_some()))
    }

    /// connect(): creates the connection on this squeue and sends the SYN.
    pub fn connect(
        &mut self,
        stack: &StackInner,
        now: Instant,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        mtu: u32,
        is_local: bool,
    ) -> io::Result<Arc<ConnShared>> {
        let spec = ConnSpec {
            local,
            remote,
            iss: stack.isn.isn(now, local, remote),
            ts_offset: stack.isn.ts_offset(local, remote),
            mtu,
        };
        if stack.closing.load(Ordering::SeqCst) {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the stack was shut down",
            ));
        }
        let set = stack.tcp_settings();
        let lso = set.lso_max;
        let mut tcb = Tcb::connect(now, spec, set);
        if !is_local {
            tcb.set_lso_max(lso);
        }
        let key = self.conns.next_key();
        if !stack.take_conn_slot() {
            // `tcp_max_conns`: as Linux when it cannot allocate a socket's memory.
            self.endpoint.stats.conn_limit_drops += 1;
            return Err(io::Error::from_raw_os_error(libc::ENOBUFS));
        }
        if !stack
            .classifier
            .insert((local, remote), ConnLoc { sq: self.id, key })
        {
            stack.give_conn_slot();
            return Err(io::ErrorKind::AddrInUse.into());
        }
        let shared = ConnShared::new(self.id, key, local, remote);
        let k = self
            .conns
            .insert(Connection::new(tcb, shared.clone(), None, is_local));
        debug_assert_eq!(k, key);
        self.stats.active_opens += 1;
        stack.probe(self.id, Probe::ConnectRequest, local, remote, 0);
        self.flush(stack, now, key);
        self.run_lo(stack, now);
        Ok(shared)
    }

    /// The handle of an accepted connection: it is the application's now.
    pub fn accepted(&mut self, key: Key) {
        if let Some(c) = self.conns.get_mut(key) {
            c.queued_in = None;
        }
    }
}
