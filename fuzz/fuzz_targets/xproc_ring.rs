//! The cross-process ring (`ember_xproc::ring`) against a hostile peer: arbitrary header
//! contents and operations on both ends mixed with arbitrary stores into the shared
//! words (`ember_xproc::fuzz::fuzz_consume`). No input may panic the reader, make it read
//! or write outside the region, or, while nobody scribbled, give other bytes than the
//! writer wrote.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ember_xproc::fuzz::fuzz_consume(data);
});
