//! Large segments (LSO) split in software (GSO) before each simulated link: with loss,
//! reordering, duplication, corruption and delay, transfers complete with every byte
//! checked whether `ip_lso_outbound` is on or off, and with it on large segments were
//! really built and split.

use ember_netem::ImpairConfig;
use ember_sim::{run, RunReport, SimConfig};
use std::time::Duration;

fn impaired(seed: u64, lso: bool) -> RunReport {
    let cfg = SimConfig {
        seed,
        impair: ImpairConfig {
            loss: 0.01,
            reorder: 0.02,
            dup: 0.01,
            corrupt: 0.001,
            delay: Duration::from_millis(2),
            jitter: Duration::from_millis(1),
            rate_bps: Some(1_000_000_000),
            ..ImpairConfig::default()
        },
        bytes: 2_000_000,
        conns: 2,
        vary: true,
        params: vec![("ip_lso_outbound".into(), if lso { "1" } else { "0" }.into())],
        ..SimConfig::default()
    };
    let r = run(&cfg);
    assert!(r.ok, "seed {seed} lso={lso}: {:?} [{}]", r.error, r.variant);
    r
}

#[test]
fn impaired_paths_deliver_everything_with_lso_on_and_off() {
    let mut splits = 0;
    for seed in 1..=4 {
        let on = impaired(seed, true);
        let off = impaired(seed, false);
        assert_eq!(on.bytes, off.bytes);
        assert_eq!(on.bytes, 2 * 2 * 2_000_000);
        assert_eq!((off.gso_splits, off.gso_segs), (0, 0), "seed {seed}");
        // Every split made at least two pieces.
        assert!(on.gso_segs >= 2 * on.gso_splits, "seed {seed}: {on:?}");
        splits += on.gso_splits;
        eprintln!(
            "seed {seed}: LSO on {} frames, {} splits into {} pieces, {} rexmit; off {} frames, {} rexmit",
            on.frames, on.gso_splits, on.gso_segs, on.retransmits, off.frames, off.retransmits
        );
    }
    assert!(splits > 0, "no large segment was ever sent");
}

/// A clean fast path: large segments carry the bulk of the data.
#[test]
fn clean_path_sends_mostly_large_segments() {
    let cfg = SimConfig {
        seed: 7,
        impair: ImpairConfig {
            delay: Duration::from_millis(1),
            rate_bps: Some(1_000_000_000),
            ..ImpairConfig::default()
        },
        bytes: 4_000_000,
        oneway: true,
        ..SimConfig::default()
    };
    let r = run(&cfg);
    assert!(r.ok, "{:?}", r.error);
    let data_frames = 4_000_000 / 1448;
    assert!(r.gso_splits > 0);
    assert!(
        r.gso_segs > data_frames / 2,
        "{} of ~{data_frames} data frames came from large segments",
        r.gso_segs
    );
}
