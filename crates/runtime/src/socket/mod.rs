//! Sockets that behave like the kernel's: [`TcpListener`], [`TcpStream`], [`UdpSocket`],
//! an epoll-like [`Poller`], and (feature `tokio`) async adapters.

#[cfg(all(feature = "tokio", not(loom)))]
pub mod async_io;
#[cfg(not(loom))]
pub mod poller;
pub mod shared;
#[cfg(not(loom))]
pub mod tcp;
#[cfg(not(loom))]
pub mod udp;

#[cfg(all(feature = "tokio", not(loom)))]
pub use async_io::{AsyncTcpListener, AsyncTcpStream};
#[cfg(not(loom))]
pub use poller::{Event, Poller};
pub use shared::{ready, ConnShared, ListenerShared, SockOpts, Waitable};
#[cfg(not(loom))]
pub use tcp::{localhost, TcpListener, TcpStream};
#[cfg(not(loom))]
pub use udp::UdpSocket;

/// The first IPv4 address `addr` resolves to (ember speaks IPv4).
#[cfg(not(loom))]
pub(crate) fn v4(addr: impl std::net::ToSocketAddrs) -> std::io::Result<std::net::SocketAddrV4> {
    for a in addr.to_socket_addrs()? {
        if let std::net::SocketAddr::V4(a) = a {
            return Ok(a);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        "no IPv4 address (ember speaks IPv4)",
    ))
}
