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
