//! Property test over the simulator: at least 200 seeds across a grid of loss 0-10 %,
//! reordering, duplication, corruption, delay 0-100 ms, jitter, rates 1 Mbit/s-10 Gbit/s,
//! MTUs 576-65535, one to three connections, point-to-point and switched topologies, and
//! varied TCP options (SACK, timestamps, window scaling, CUBIC/NewReno, Nagle, write
//! sizes). Every byte must arrive exactly once and in order, and every connection must
//! close on both ends. A failure names its seed and parameters; replay it with
//! `ember sim --seed S --seeds 1 --vary ...` (the parameters are printed).

use ember_netem::ImpairConfig;
use ember_sim::{run, SimConfig};
use std::time::Duration;

const LOSS: [f64; 5] = [0.0, 0.005, 0.02, 0.05, 0.10];
const REORDER: [f64; 3] = [0.0, 0.02, 0.10];
const DUP: [f64; 3] = [0.0, 0.01, 0.05];
const CORRUPT: [f64; 3] = [0.0, 0.001, 0.01];
const DELAY_MS: [u64; 5] = [0, 1, 10, 50, 100];
const JITTER_MS: [u64; 2] = [0, 5];
const RATE_BPS: [u64; 5] = [
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
    10_000_000_000,
];
const MTU: [usize; 4] = [576, 1500, 9000, 65535];

fn pick<T: Copy>(xs: &[T], seed: u64, salt: u64) -> T {
    let mut z = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z ^= z >> 31;
    z = z.wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 29;
    xs[(z % xs.len() as u64) as usize]
}

fn config(seed: u64) -> SimConfig {
    let rate = pick(&RATE_BPS, seed, 6);
    let mtu = pick(&MTU, seed, 7);
    // Enough data for many windows, little enough that slow links stay quick in wall time.
    let bytes = if rate <= 10_000_000 { 60_000 } else { 400_000 };
    SimConfig {
        seed,
        impair: ImpairConfig {
            loss: pick(&LOSS, seed, 1),
            reorder: pick(&REORDER, seed, 2),
            dup: pick(&DUP, seed, 3),
            corrupt: pick(&CORRUPT, seed, 4),
            delay: Duration::from_millis(pick(&DELAY_MS, seed, 5)),
            jitter: Duration::from_millis(pick(&JITTER_MS, seed, 8)),
            rate_bps: Some(rate),
            mtu,
            ..ImpairConfig::default()
        },
        bytes,
        conns: pick(&[1, 2, 3], seed, 9),
        hosts: pick(&[2, 2, 3], seed, 10),
        oneway: pick(&[false, false, true], seed, 11),
        vary: true,
        ..SimConfig::default()
    }
}

/// With `EMBER_SIM_REPORTS=DIR`, each seed's whole report (wall time zeroed) is written
/// to `DIR/SEED`, so that two builds can be shown to behave identically seed by seed.
fn keep_report(r: &ember_sim::RunReport) {
    if let Some(dir) = std::env::var_os("EMBER_SIM_REPORTS") {
        let mut r = r.clone();
        r.wall_s = 0.0;
        let path = std::path::Path::new(&dir).join(r.seed.to_string());
        std::fs::write(path, format!("{r:#?}\n")).expect("write the seed's report");
    }
}

fn run_range(seeds: std::ops::Range<u64>) {
    let mut failures = Vec::new();
    for seed in seeds {
        let cfg = config(seed);
        let r = run(&cfg);
        keep_report(&r);
        if !r.ok {
            failures.push(format!(
                "seed {seed}: {} [{}]\n    impair {:?} bytes {} conns {} hosts {} oneway {}",
                r.error.unwrap_or_default(),
                r.variant.trim(),
                cfg.impair,
                cfg.bytes,
                cfg.conns,
                cfg.hosts,
                cfg.oneway
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn grid_seeds_1_to_50() {
    run_range(1..51);
}

#[test]
fn grid_seeds_51_to_100() {
    run_range(51..101);
}

#[test]
fn grid_seeds_101_to_150() {
    run_range(101..151);
}

#[test]
fn grid_seeds_151_to_200() {
    run_range(151..201);
}

#[test]
fn grid_seeds_201_to_250() {
    run_range(201..251);
}

/// The same seed gives the same run, to the frame (replayability).
#[test]
fn a_seed_replays_exactly() {
    let cfg = config(42);
    let a = run(&cfg);
    let b = run(&cfg);
    assert_eq!(
        (a.ok, a.bytes, a.frames, a.retransmits, a.virtual_s),
        (b.ok, b.bytes, b.frames, b.retransmits, b.virtual_s)
    );
    let other = run(&SimConfig { seed: 43, ..cfg });
    assert_ne!(a.frames, other.frames);
}
