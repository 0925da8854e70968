//! The atomics the shared-memory protocols use, swapped for `loom`'s model-checked
//! versions under `--cfg loom` (as `ember-runtime`'s `sync` does), so that the ring's
//! publish/consume and the armed-flag wake-up can be checked exhaustively:
//! `RUSTFLAGS="--cfg loom" cargo test --release -p ember-xproc --lib loom`.
//!
//! Under loom the ring's data area is made of [`Slot`]s that are loom-tracked cells, so
//! loom also checks that every byte the reader copies out was written before the tail
//! that published it, and that the writer never overwrites a byte the reader has not
//! released (see `ring`'s copy functions). Outside loom a slot is a plain byte.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU64, Ordering};

/// One byte of a ring's data area.
#[cfg(not(loom))]
pub(crate) type Slot = u8;
/// One byte of a ring's data area, as a loom-tracked cell (test builds only).
#[cfg(loom)]
pub(crate) type Slot = loom::cell::UnsafeCell<u8>;
