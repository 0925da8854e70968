//! # ember-runtime
//!
//! The runtime layer of ember: devices today (in-memory Ethernet links and a switch with
//! seeded impairment, [`dev`]); vertical perimeters (squeues), the connection
//! classifier, TCP fusion, sockets, tunables, counters and probes next. The protocol core
//! (`ember-core`) never touches a thread or a clock; this crate is where they live.

pub mod dev;
