//! The device layer: where Ethernet frames enter and leave ember.
//!
//! Every device implements [`Device`]. In-memory links: [`mem_link`] drives the sans-IO
//! link models of `ember-netem` (a [`Link`] of two seeded, impaired [`Wire`]s) with the
//! real clock, each end a stack device. Real links: [`Tap`] (a Linux TAP interface) and
//! [`AfPacket`] (AF_PACKET sockets on an existing interface), each with a notifier thread
//! per queue (see `tap.rs`); wrappers for any device: [`Capture`] (pcap) and [`Impaired`]
//! (the wire model on a real device); [`netns`] makes the network namespaces tests put
//! them in. In front of a device with a queue of its own the stack puts the fair queue
//! ([`Fq`]) and feeds the device from it under a byte-queue limit ([`feed_device`]).
//!
//! The link models themselves (wire, point-to-point link, learning switch, impairment,
//! fair queue) live in `ember-netem`, so that the deterministic simulator uses them
//! without this threaded runtime; their design rules (time is a parameter, seeded
//! determinism, bounded and total) are in that crate's documentation. What this module
//! exposed of them before they moved is re-exported here unchanged.

#[cfg(all(not(loom), target_os = "linux"))]
#[allow(unsafe_code)]
pub mod afpacket;
#[cfg(not(loom))]
pub mod capture;
pub mod device;
mod feed;
#[cfg(not(loom))]
pub mod impaired;
#[cfg(not(loom))]
pub mod memlink;
#[cfg(all(not(loom), target_os = "linux"))]
#[allow(unsafe_code)]
pub mod netns;
#[cfg(all(not(loom), target_os = "linux"))]
#[allow(unsafe_code)]
pub mod tap;

#[cfg(all(not(loom), target_os = "linux"))]
pub use afpacket::{AfPacket, AfPacketConfig, AfPacketCounters, RingConfig};
#[cfg(not(loom))]
pub use capture::{Capture, CaptureOptions, CaptureStats};
pub use device::{Device, TxBacklog};
pub use feed::feed_device;
#[cfg(not(loom))]
pub use impaired::Impaired;
#[cfg(not(loom))]
pub use memlink::{mem_link, MemLinkEnd};
#[cfg(all(not(loom), target_os = "linux"))]
pub use tap::{Tap, TapConfig, TapCounters};

// The sans-IO link models, moved to `ember-netem`: the names this module exported.
pub use ember_netem::{
    byte_queue_limit, derive_seed, frame_flow, End, Fq, FqConfig, FqStats, ImpairConfig, Link,
    QItem, SendOutcome, Switch, SwitchStats, Wire, WireStats,
};
