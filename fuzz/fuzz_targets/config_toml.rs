//! The `ember serve --config` parser (`ember_config::parse`) fed arbitrary text.
//!
//! * nothing panics, and the parse ends (libFuzzer's `-timeout` catches a slow one);
//! * an accepted file's every `[params]` value is a tunable that reads back through
//!   `Params::get`, and setting all of them together on the defaults succeeds;
//! * the numeric options of an accepted file are inside the ranges `ember serve` checks;
//! * an error's message can be formatted (the `Unknown` tunable error computes the
//!   nearest names when displayed).
#![no_main]

use ember_core::params::Params;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match ember_config::parse(text) {
        Ok(c) => {
            let pairs = c.param_pairs();
            let mut p = Params::default();
            p.set_many(&pairs).expect("accepted params apply");
            for (name, _) in &pairs {
                assert!(p.get(name).is_some(), "{name} does not read back");
            }
            assert!(c.max_conns.is_none_or(|n| (1..=65_536).contains(&n)));
            assert!(c.squeues.is_none_or(|n| (1..=64).contains(&n)));
            assert!(c.queues.is_none_or(|n| (1..=64).contains(&n)));
            assert!(c.mtu.is_none_or(|m| (68..=65_535).contains(&m)));
            assert!(c
                .duration
                .is_none_or(|d| d.is_finite() && d > 0.0 && d <= 86_400.0));
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
