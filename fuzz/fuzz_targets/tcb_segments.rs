//! A `Tcb` fed arbitrary segments (any sequence, acknowledgment, flags, window, urgent
//! pointer, options and payload, relative to the real sequence numbers or absolute,
//! including values near the 2^32 wrap), application calls and timeouts.
//!
//! Invariants checked after every step (see `Drv::check` in
//! `crates/core/tests/support/driver.rs`, shared with the property tests): no panic,
//! `poll_transmit` stops, timers make progress, the send buffer never exceeds its size,
//! the receive side never holds more than the receive buffer plus the window-scale
//! rounding, SND.UNA <= SND.NXT <= SND.UNA + queued + SYN + FIN, and SACKed octets never
//! exceed those in flight.
#![no_main]

use arbitrary::Arbitrary;
use ember_fuzz::input::{Knobs, Op, Start};
use libfuzzer_sys::fuzz_target;
use std::time::Duration;

#[derive(Arbitrary, Debug)]
struct Input {
    knobs: Knobs,
    start: Start,
    ops: Vec<Op>,
}

fuzz_target!(|input: Input| {
    let mut d = input.knobs.drv(&input.start);
    for op in input.ops.iter().take(200) {
        d.step(&op.to_driver());
    }
    // Time still makes progress to the end of the connection.
    d.advance(Duration::from_secs(4 * 3600));
});
