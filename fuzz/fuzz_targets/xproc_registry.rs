//! The cross-process registry (`ember_xproc::registry`) over arbitrary shared-memory
//! contents and operations (`ember_xproc::registry::fuzz_registry`): nothing panics or
//! reaches outside the region, every result is well-formed, and the records counted live
//! are the ones an independent reading of the documented layout counts.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ember_xproc::registry::fuzz_registry(data);
});
