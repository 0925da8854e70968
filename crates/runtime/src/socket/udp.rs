//! UDP sockets. UDP has no connection state to serialise, so (as in Solaris 10) it does
//! not go through a squeue: a datagram is built and handed to the IP layer by the
//! calling thread; arriving datagrams are queued (bounded) on the socket by the IP layer
//! and the socket's readiness is raised.

use super::shared::{ready, Waitable};
use super::v4;
use crate::stack::Stack;
use ember_core::host::UdpId;
use std::io;
use std::net::{SocketAddr, SocketAddrV4, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Readiness of one UDP socket (shared with the IP layer's event dispatch).
pub struct UdpShared {
    pub(crate) id: UdpId,
    pub waitable: Waitable,
    nonblocking: AtomicBool,
    read_timeout: Mutex<Option<Duration>>,
}

/// A UDP socket.
pub struct UdpSocket {
    stack: Stack,
    shared: Arc<UdpShared>,
    local: SocketAddrV4,
    connected: Mutex<Option<SocketAddrV4>>,
}

impl core::fmt::Debug for UdpSocket {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("UdpSocket")
            .field("local", &self.local)
            .finish()
    }
}

impl UdpSocket {
    /// bind(); port 0 picks an ephemeral port.
    pub fn bind(stack: &Stack, addr: impl ToSocketAddrs) -> io::Result<UdpSocket> {
        stack.check_open()?;
        let local = v4(addr)?;
        let (id, local) = stack.with_ip(|h, _| {
            let id = h.udp_bind(local)?;
            let l = h.udp_local_addr(id).unwrap_or(local);
            Ok::<_, io::Error>((id, l))
        })?;
        let shared = Arc::new(UdpShared {
            id,
            waitable: Waitable::default(),
            nonblocking: AtomicBool::new(false),
            read_timeout: Mutex::new(None),
        });
        shared.waitable.set(ready::WRITE);
        stack.inner.register_udp(&shared);
        // A datagram that arrived before the registration raised nothing: check once.
        let shared2 = shared.clone();
        stack.with_ip(|h, _| {
            if h.udp_pending(id) > 0 {
                shared2.waitable.raise(ready::READ);
            }
        });
        Ok(UdpSocket {
            stack: stack.clone(),
            shared,
            local,
            connected: Mutex::new(None),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(SocketAddr::V4(self.local))
    }

    /// Sends one datagram to `to`.
    pub fn send_to(&self, data: &[u8], to: impl ToSocketAddrs) -> io::Result<usize> {
        self.stack.check_open()?;
        let to = v4(to)?;
        let id = self.shared.id;
        self.stack
            .with_ip(|h, tcp| h.udp_send_to(crate::clock::now(), id, to, data, tcp))
    }

    /// connect(): fixes the peer for `send`/`recv`.
    pub fn connect(&self, to: impl ToSocketAddrs) -> io::Result<()> {
        *self.connected.lock().unwrap_or_else(|e| e.into_inner()) = Some(v4(to)?);
        Ok(())
    }

    pub fn send(&self, data: &[u8]) -> io::Result<usize> {
        let to = self
            .connected
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))?;
        self.send_to(data, to)
    }

    fn try_recv(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.stack.check_open()?;
        let id = self.shared.id;
        let shared = &self.shared;
        let d = self.stack.with_ip(|h, _| {
            let d = h.udp_recv_from(id);
            // Under the IP layer's lock, like the raise for a new datagram: the readiness
            // word always matches the queue.
            if h.udp_pending(id) == 0 {
                shared.waitable.set(ready::WRITE);
            }
            d
        });
        let d = d?;
        let n = d.data.len().min(buf.len());
        buf[..n].copy_from_slice(&d.data[..n]);
        Ok((n, SocketAddr::V4(d.from)))
    }

    /// Receives one datagram (truncated to `buf`), blocking unless non-blocking.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        let timeout = *self
            .shared
            .read_timeout
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let deadline = super::tcp::deadline(timeout);
        loop {
            match self.try_recv(buf) {
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        && !self.shared.nonblocking.load(Ordering::Relaxed) =>
                {
                    if self
                        .shared
                        .waitable
                        .wait(ready::READ, deadline, Duration::ZERO)
                        == 0
                    {
                        return Err(io::Error::new(io::ErrorKind::WouldBlock, "timed out"));
                    }
                }
                r => return r,
            }
        }
    }

    /// Receives from the connected peer.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let (n, from) = self.recv_from(buf)?;
            let want = *self.connected.lock().unwrap_or_else(|e| e.into_inner());
            if want.is_none_or(|w| SocketAddr::V4(w) == from) {
                return Ok(n);
            }
        }
    }

    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.shared.nonblocking.store(on, Ordering::Relaxed);
        Ok(())
    }

    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        if t == Some(Duration::ZERO) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot set a 0 duration timeout",
            ));
        }
        *self
            .shared
            .read_timeout
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = t;
        Ok(())
    }

    /// IP_TOS.
    pub fn set_tos(&self, tos: u8) -> io::Result<()> {
        let id = self.shared.id;
        self.stack.with_ip(|h, _| h.udp_set_tos(id, tos))
    }

    pub(crate) fn shared(&self) -> &Arc<UdpShared> {
        &self.shared
    }
}

impl Drop for UdpSocket {
    fn drop(&mut self) {
        let id = self.shared.id;
        self.stack.inner.unregister_udp(id);
        self.stack.with_ip(|h, _| h.udp_close(id));
    }
}
