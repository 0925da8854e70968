//! RACK-TLP (RFC 8985) in the deterministic simulator: reordering alone must not be taken
//! for loss on a long fat path, and loss recovery still delivers every byte.

use ember_netem::ImpairConfig;
use ember_sim::{run, RunReport, SimConfig};
use std::time::Duration;

/// 1 Gbit/s, 10 ms each way (20 ms RTT), 1 % of frames reordered, no loss, one
/// connection moving `bytes` one way; `rack` switches RACK-TLP.
fn reordering(bytes: u64, rack: bool) -> RunReport {
    let on = if rack { "1" } else { "0" };
    let cfg = SimConfig {
        seed: 1,
        impair: ImpairConfig {
            reorder: 0.01,
            delay: Duration::from_millis(10),
            rate_bps: Some(1_000_000_000),
            ..ImpairConfig::default()
        },
        bytes,
        oneway: true,
        params: vec![
            ("tcp_recovery".into(), on.into()),
            ("tcp_tlp".into(), on.into()),
        ],
        ..SimConfig::default()
    };
    let r = run(&cfg);
    assert!(r.ok, "{:?}", r.error);
    r
}

fn mbit(r: &RunReport) -> f64 {
    r.bytes as f64 * 8.0 / r.virtual_s / 1e6
}

/// With RACK, 1 % reordering costs a few spurious retransmissions at first (undone when
/// their D-SACKs arrive) and then none: throughput stays in the hundreds of Mbit/s. With
/// DupThresh alone every reordering is a loss and the transfer crawls.
#[test]
fn reordering_is_not_loss() {
    let bytes = 20_000_000;
    let with = reordering(bytes, true);
    let without = reordering(bytes, false);
    eprintln!(
        "1% reordering, 1 Gbit/s, 20 ms: RACK {:.1} Mbit/s ({} rexmit), DupThresh {:.1} Mbit/s ({} rexmit)",
        mbit(&with),
        with.retransmits,
        mbit(&without),
        without.retransmits
    );
    assert!(mbit(&with) > 150.0, "RACK: {:.1} Mbit/s", mbit(&with));
    assert!(
        with.retransmits < 20,
        "{} retransmissions",
        with.retransmits
    );
    assert!(mbit(&with) > 10.0 * mbit(&without));
    assert_eq!(with.timeouts, 0);
}

/// Loss, duplication, reordering and corruption together, RACK-TLP on (the default):
/// every byte arrives exactly once, over several seeds.
#[test]
fn lossy_paths_deliver_everything() {
    for seed in 1..=6 {
        let cfg = SimConfig {
            seed,
            impair: ImpairConfig {
                loss: 0.02,
                reorder: 0.02,
                dup: 0.01,
                corrupt: 0.001,
                delay: Duration::from_millis(5),
                rate_bps: Some(100_000_000),
                ..ImpairConfig::default()
            },
            bytes: 300_000,
            conns: 2,
            vary: true,
            ..SimConfig::default()
        };
        let r = run(&cfg);
        assert!(r.ok, "seed {seed}: {:?} [{}]", r.error, r.variant);
    }
}
