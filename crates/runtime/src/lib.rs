//! # ember-runtime
//!
//! The runtime layer of ember, Solaris 10 FireEngine's architecture in user space:
//!
//! * [`squeue`]: vertical perimeters (serialisation queues), one per CPU, with entry
//!   modes process / nodrain / fill, a worker thread each and a timer wheel, and what
//!   each thread knows of the squeues it is in (depth, deferred wake-ups);
//! * [`classifier`]: the connected and bind tables that send each segment to its
//!   connection's squeue;
//! * [`stack`]: the stack itself (squeues, classifier, the core's IP layer, devices,
//!   tunables, counters, probes, filter), each squeue's perimeter (its connections and
//!   their TCP/IP glue) and transmit queues, with TCP Fusion for connections between two
//!   of its own sockets;
//! * [`socket`]: `TcpListener`, `TcpStream`, `UdpSocket` and a `Poller`, with the
//!   kernel's semantics and error kinds;
//! * [`dev`]: devices: TAP, AF_PACKET, pcap capture, and the in-memory link and
//!   impairment models of `ember-netem` (which the simulator drives in virtual time)
//!   in real time as stack devices; the fair queue's feeding of a device; the network
//!   namespaces tests put devices in;
//! * [`control`]: the control socket that `ember ndd`, `kstat`, `netstat` and `ls` talk
//!   to on a running stack; [`clock`]: the process-wide time base.
//!
//! The protocol core (`ember-core`) never touches a thread or a clock; this crate is
//! where they live.

// Under loom only the squeue and the readiness protocol are built; what the full stack
// uses of them is unused there.
#![cfg_attr(loom, allow(dead_code))]
// `unsafe` only where the operating system is called: the device modules that are FFI
// through and through (`dev::tap`, `dev::afpacket`, `dev::netns`) allow it as a whole, and
// so does `stack::usdt` (the `usdt` provider macros expand to unsafe blocks and extern
// blocks, besides its own semaphore reads); the few system calls elsewhere (`sync`'s CPU
// and affinity queries, `control`'s wake-up of its accept loop) allow it on the one
// function that makes them. Every block written here has its `SAFETY:` reason. The
// squeue has none, by design: it is built from `sync`'s safe wrappers.
#![deny(unsafe_code)]

#[macro_use]
mod counters;

#[cfg(not(loom))]
pub mod classifier;
pub mod clock;
#[cfg(not(loom))]
pub mod control;
pub mod dev;
pub mod socket;
pub mod squeue;
#[cfg(not(loom))]
pub mod stack;
mod sync;

#[cfg(all(test, loom))]
mod fusion_loom;

#[cfg(not(loom))]
pub use socket::{Poller, TcpListener, TcpStream, UdpSocket};
#[cfg(not(loom))]
pub use stack::{FilterRule, IfaceConfig, Probe, ProbeEvent, Stack, StackBuilder};
