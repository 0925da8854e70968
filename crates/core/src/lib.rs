//! # ember-core: the sans-IO protocol core of ember
//!
//! ember is a user-space TCP/IP stack built on the architecture of Solaris 10's
//! FireEngine. This crate is its first layer: wire formats ([`wire`]), IPv4 with routing,
//! ARP, reassembly and fragmentation ([`ip`]), ICMP policy ([`icmp`]), UDP endpoints
//! ([`udp`]) and a complete TCP ([`tcp`]), each a pure state machine driven by
//! (frame in, application call, time now) and producing (frames out, events, next
//! deadline). Nothing here starts a thread, reads a clock or calls the operating
//! system: time is always a parameter ([`time::Instant`]), so the same code runs under a
//! real clock in the runtime and under the simulator's virtual clock, deterministically.
//!
//! [`host::Host`] composes the layers into one single-threaded host, an IP layer
//! ([`host::IpLayer`]) and TCP over it (merged TCP/IP: IP hands TCP a segment by a direct
//! call, through a [`host::TcpSink`]); the runtime crate drives an `IpLayer` of its own
//! and keeps TCP (the `Tcb`s and the [`tcp::endpoint`]) in its squeues, behind a
//! classifier. Tunables live in one table ([`params::Params`]) under their
//! ndd names.
//!
//! No input can panic this crate or grow its memory without bound: every parser returns
//! errors, every queue has a limit, and sequence arithmetic is modular.

#![forbid(unsafe_code)]

pub mod host;
pub mod icmp;
pub mod ip;
pub mod params;
pub mod slab;
pub mod tcp;
pub mod time;
pub mod udp;
pub mod wire;

pub use host::Host;
pub use params::Params;
pub use time::Instant;
