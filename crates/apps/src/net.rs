//! The network a service runs on: listeners and connections, on ember or on the kernel.
//!
//! Connections are shared between threads by reference (`&self` reads and writes), like
//! `&std::net::TcpStream`, so a service can read on one thread and write on another.

use std::io;
use std::net::{Shutdown, SocketAddr};
use std::time::Duration;

/// A connected TCP stream.
pub trait Conn: Send + Sync + 'static {
    fn read(&self, buf: &mut [u8]) -> io::Result<usize>;
    fn write(&self, buf: &[u8]) -> io::Result<usize>;
    fn shutdown(&self, how: Shutdown) -> io::Result<()>;
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()>;
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()>;
    fn set_nodelay(&self, on: bool) -> io::Result<()>;
    fn peer_addr(&self) -> io::Result<SocketAddr>;
    fn local_addr(&self) -> io::Result<SocketAddr>;

    /// Writes all of `buf` (retrying on `Interrupted`).
    fn write_all(&self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            match self.write(buf) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Fills `buf` exactly; `UnexpectedEof` if the peer closes first.
    fn read_exact(&self, mut buf: &mut [u8]) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read(buf) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => buf = &mut buf[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// A listening TCP socket.
pub trait Listen: Send + Sync + 'static {
    type Conn: Conn;
    fn accept(&self) -> io::Result<(Self::Conn, SocketAddr)>;
    fn local_addr(&self) -> io::Result<SocketAddr>;
    /// `accept` fails with `WouldBlock`/`TimedOut` after `t` with nothing pending.
    fn set_accept_timeout(&self, t: Option<Duration>) -> io::Result<()>;
}

/// A network: how to listen and connect.
pub trait Net: Clone + Send + Sync + 'static {
    type Conn: Conn;
    type Listener: Listen<Conn = Self::Conn>;
    fn listen(&self, addr: SocketAddr) -> io::Result<Self::Listener>;
    fn connect(&self, addr: SocketAddr, timeout: Option<Duration>) -> io::Result<Self::Conn>;
}

// ---------------------------------------------------------------------------------------
// The kernel's sockets.

/// The kernel's TCP (`std::net`).
#[derive(Debug, Clone, Copy, Default)]
pub struct StdNet;

/// A kernel listener with an accept timeout (poll(2) before accept).
#[derive(Debug)]
pub struct StdListener {
    l: std::net::TcpListener,
    timeout: std::sync::Mutex<Option<Duration>>,
}

impl Conn for std::net::TcpStream {
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        io::Read::read(&mut &*self, buf)
    }
    fn write(&self, buf: &[u8]) -> io::Result<usize> {
        io::Write::write(&mut &*self, buf)
    }
    fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        std::net::TcpStream::shutdown(self, how)
    }
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        std::net::TcpStream::set_read_timeout(self, t)
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        std::net::TcpStream::set_write_timeout(self, t)
    }
    fn set_nodelay(&self, on: bool) -> io::Result<()> {
        std::net::TcpStream::set_nodelay(self, on)
    }
    fn peer_addr(&self) -> io::Result<SocketAddr> {
        std::net::TcpStream::peer_addr(self)
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        std::net::TcpStream::local_addr(self)
    }
}

impl Listen for StdListener {
    type Conn = std::net::TcpStream;
    fn accept(&self) -> io::Result<(Self::Conn, SocketAddr)> {
        use std::os::fd::AsRawFd;
        let t = *self.timeout.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = t {
            let mut pfd = libc::pollfd {
                fd: self.l.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = t.as_millis().min(i32::MAX as u128) as i32;
            // SAFETY: `pfd` is a valid pollfd for the duration of the call, and nfds is 1.
            let r = unsafe { libc::poll(&mut pfd, 1, ms) };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
            if r == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
        let (s, a) = self.l.accept()?;
        s.set_nonblocking(false)?;
        Ok((s, a))
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.l.local_addr()
    }
    fn set_accept_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        *self.timeout.lock().unwrap_or_else(|e| e.into_inner()) = t;
        Ok(())
    }
}

impl Net for StdNet {
    type Conn = std::net::TcpStream;
    type Listener = StdListener;
    fn listen(&self, addr: SocketAddr) -> io::Result<StdListener> {
        Ok(StdListener {
            l: std::net::TcpListener::bind(addr)?,
            timeout: std::sync::Mutex::new(None),
        })
    }
    fn connect(&self, addr: SocketAddr, timeout: Option<Duration>) -> io::Result<Self::Conn> {
        match timeout {
            Some(t) => std::net::TcpStream::connect_timeout(&addr, t),
            None => std::net::TcpStream::connect(addr),
        }
    }
}

// ---------------------------------------------------------------------------------------
// ember's sockets.

/// ember's TCP on a running [`ember_runtime::Stack`].
#[derive(Clone)]
pub struct EmberNet(pub std::sync::Arc<ember_runtime::Stack>);

impl core::fmt::Debug for EmberNet {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("EmberNet")
    }
}

impl Conn for ember_runtime::TcpStream {
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        io::Read::read(&mut &*self, buf)
    }
    fn write(&self, buf: &[u8]) -> io::Result<usize> {
        io::Write::write(&mut &*self, buf)
    }
    fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        ember_runtime::TcpStream::shutdown(self, how)
    }
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        ember_runtime::TcpStream::set_read_timeout(self, t)
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        ember_runtime::TcpStream::set_write_timeout(self, t)
    }
    fn set_nodelay(&self, on: bool) -> io::Result<()> {
        ember_runtime::TcpStream::set_nodelay(self, on)
    }
    fn peer_addr(&self) -> io::Result<SocketAddr> {
        ember_runtime::TcpStream::peer_addr(self)
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        ember_runtime::TcpStream::local_addr(self)
    }
}

impl Listen for ember_runtime::TcpListener {
    type Conn = ember_runtime::TcpStream;
    fn accept(&self) -> io::Result<(Self::Conn, SocketAddr)> {
        ember_runtime::TcpListener::accept(self)
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        ember_runtime::TcpListener::local_addr(self)
    }
    fn set_accept_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        ember_runtime::TcpListener::set_accept_timeout(self, t)
    }
}

impl Net for EmberNet {
    type Conn = ember_runtime::TcpStream;
    type Listener = ember_runtime::TcpListener;
    fn listen(&self, addr: SocketAddr) -> io::Result<Self::Listener> {
        ember_runtime::TcpListener::bind(&self.0, addr)
    }
    fn connect(&self, addr: SocketAddr, timeout: Option<Duration>) -> io::Result<Self::Conn> {
        match timeout {
            Some(t) => {
                let SocketAddr::V4(a) = addr else {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "ember speaks IPv4 only",
                    ));
                };
                ember_runtime::TcpStream::connect_timeout(&self.0, a, t)
            }
            None => ember_runtime::TcpStream::connect(&self.0, addr),
        }
    }
}
