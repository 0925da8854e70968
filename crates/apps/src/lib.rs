//! # ember-apps
//!
//! The applications `ember serve` runs and `ember client` is: small network services and
//! clients written once over the [`net`] traits, so each runs unchanged on ember's sockets
//! ([`net::EmberNet`]) and on the kernel's ([`net::StdNet`]). The kernel flavour is what
//! the unit tests use (stock tools such as `curl` and `iperf3` can reach it on loopback
//! without root); the ember flavour is what `ember serve` puts on a TAP device or an
//! AF_PACKET socket.
//!
//! * [`server`]: the accept loop shared by every TCP service: one thread per connection,
//!   a bound on live connections, and a stop flag that closes everything (SIGINT/SIGTERM).
//! * [`simple`]: echo (RFC 862), discard (RFC 863) and chargen (RFC 864).
//! * [`http`]: an HTTP/1.1 server: `/bytes/N` (pseudo-random bytes with their SHA-256 in
//!   `X-SHA256`), files below a root, keep-alive and pipelining, bounded heads and bodies.
//! * [`client`]: `ember client`: an HTTP GET (Content-Length, chunked, or to the close)
//!   and bulk send/receive with SHA-256 on both sides.
//! * [`iperf3`]: the iperf3 server protocol (TCP; one test at a time, `-P`, `-R`, `--bidir`,
//!   `-n`/`-k`/`-t`), so the stock `iperf3 -c` measures ember, and a client of it.

pub mod client;
pub mod http;
pub mod iperf3;
pub mod net;
pub mod server;
pub mod simple;
