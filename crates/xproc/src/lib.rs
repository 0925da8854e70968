//! ember's cross-process fusion (`../shared/spec/crossproc.md`): the parts that live in
//! shared memory between two processes under `ember run`.
//!
//! * [`ring`]: one direction of a fused connection, a single-producer single-consumer
//!   byte ring in shared memory, with its switch, seal and shutdown offsets and what
//!   the writer needs to run the core's `FusedFlow` against a reader in another process;
//! * [`wake`]: the armed-flag wake-up protocol (a sleeper arms, fences and re-checks; a
//!   publisher fences and wakes only an armed sleeper), independent of the transport;
//! * [`registry`]: how processes under `ember run` find each other (listeners,
//!   connection candidates, live processes), one shared file per user and namespace;
//! * [`arena`]: the memfd a pair of processes shares, carved into slots of two rings;
//! * [`fuzz`]: an entry point for fuzzing the ring against a hostile peer.
//!
//! Shared memory is input: a peer process may be buggy or hostile, and nothing it
//! writes can make this crate panic, read or write outside a mapping, or hand one
//! connection's bytes to another.
//!
//! Loom models of both protocols: `RUSTFLAGS="--cfg loom" cargo test --release -p
//! ember-xproc --lib loom`.

// `unsafe` only where shared memory is touched: `ring` (the header and the data copies),
// `mem` (allocation and, in tests, guarded mappings), `fuzz` (attaching a ring to a
// heap block), `registry` and `arena` (mappings, raw system calls) allow it; every block
// has its `SAFETY:` reason, which clippy checks.
#![deny(unsafe_code)]
#![warn(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

#[cfg(not(loom))]
pub mod arena;
#[cfg(not(loom))]
pub mod fuzz;
#[cfg(any(test, not(loom)))]
mod mem;
#[cfg(not(loom))]
#[allow(unsafe_code)]
pub mod registry;
pub mod ring;
mod sync;
pub mod wake;

#[cfg(all(test, loom))]
mod loom_tests;
