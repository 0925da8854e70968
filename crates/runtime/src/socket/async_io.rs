//! Async adapters (feature `tokio`): [`AsyncTcpStream`] implements tokio's `AsyncRead`
//! and `AsyncWrite`, [`AsyncTcpListener`] accepts asynchronously, so an async HTTP server
//! (hyper, through `hyper-util`'s `TokioIo`) can serve on an ember listener.
//!
//! Readiness comes from ember itself, not from an OS reactor: a pending operation
//! registers its task's waker on the socket's [`Waitable`](super::Waitable), and the
//! squeue wakes it when it raises the bit. So these types work under any executor.
//! A call may briefly wait for a busy squeue to run it (the squeue's queued path); it
//! never waits for the network.

use super::shared::ready;
use super::{TcpListener, TcpStream};
use crate::stack::Stack;
use std::future::poll_fn;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, SocketAddrV4};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// An async ember TCP stream.
#[derive(Debug)]
pub struct AsyncTcpStream {
    inner: TcpStream,
}

impl AsyncTcpStream {
    /// Wraps a stream (made non-blocking).
    pub fn new(s: TcpStream) -> io::Result<Self> {
        s.set_nonblocking(true)?;
        Ok(AsyncTcpStream { inner: s })
    }

    /// connect() without blocking the executor.
    pub async fn connect(stack: &Stack, addr: SocketAddrV4) -> io::Result<Self> {
        let s = TcpStream::connect_nonblocking(stack, addr)?;
        poll_fn(|cx| {
            s.shared()
                .waitable
                .poll_ready(ready::CONNECTED | ready::ERROR | ready::HUP, cx)
        })
        .await;
        if let Some(e) = s.take_error()? {
            return Err(e);
        }
        if !s.state()?.is_synchronized() {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                "connection failed",
            ));
        }
        Ok(AsyncTcpStream { inner: s })
    }

    /// The blocking-API stream (options, `tcp_info`, ...).
    pub fn get_ref(&self) -> &TcpStream {
        &self.inner
    }
}

impl AsyncRead for AsyncTcpStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            match (&self.inner).read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    match self
                        .inner
                        .shared()
                        .waitable
                        .poll_ready(ready::READ | ready::ERROR | ready::HUP, cx)
                    {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(_) => continue,
                    }
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for AsyncTcpStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            match (&self.inner).write(data) {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    match self
                        .inner
                        .shared()
                        .waitable
                        .poll_ready(ready::WRITE | ready::ERROR | ready::HUP, cx)
                    {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(_) => continue,
                    }
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.inner.shutdown(std::net::Shutdown::Write))
    }
}

/// An async ember TCP listener.
#[derive(Debug)]
pub struct AsyncTcpListener {
    inner: TcpListener,
}

impl AsyncTcpListener {
    /// bind() + listen().
    pub fn bind(stack: &Stack, addr: SocketAddrV4) -> io::Result<Self> {
        let l = TcpListener::bind(stack, addr)?;
        l.set_nonblocking(true)?;
        Ok(AsyncTcpListener { inner: l })
    }

    /// accept() without blocking the executor.
    pub async fn accept(&self) -> io::Result<(AsyncTcpStream, SocketAddr)> {
        poll_fn(|cx| loop {
            match self.inner.accept() {
                Ok((s, a)) => return Poll::Ready(AsyncTcpStream::new(s).map(|s| (s, a))),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    match self
                        .inner
                        .shared()
                        .waitable
                        .poll_ready(ready::ACCEPT | ready::HUP, cx)
                    {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(_) => continue,
                    }
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        })
        .await
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}
