//! Receive-side coalescing (GRO, `ember_core::ip::gro`) in the deterministic simulator:
//! with loss, reordering, duplication, corruption and delay on every link, transfers with
//! GRO on and with it off both complete with every byte checked, and GRO really merges.
//!
//! GRO works within a receive batch: the simulator hands a host every frame that has
//! arrived for it at the current instant as one batch. A link with a rate spreads a
//! burst out (one frame per serialisation time, so one frame per instant); a link
//! without a rate limit delivers a burst sent at one instant all at the same later
//! instant, the way one poll of a busy device returns many frames. The runs here use
//! such links, so a window's worth of segments arrives as one batch and merges.

use ember_netem::ImpairConfig;
use ember_sim::{run, RunReport, SimConfig};
use std::time::Duration;

fn cfg(seed: u64, gro: bool, impair: ImpairConfig, conns: u32, hosts: usize) -> SimConfig {
    SimConfig {
        seed,
        impair,
        bytes: 300_000,
        conns,
        hosts,
        params: vec![("ip_gro".into(), if gro { "1" } else { "0" }.into())],
        vary: true,
        ..SimConfig::default()
    }
}

fn impaired(delay_ms: u64) -> ImpairConfig {
    ImpairConfig {
        loss: 0.01,
        reorder: 0.02,
        dup: 0.01,
        corrupt: 0.005,
        delay: Duration::from_millis(delay_ms),
        rate_bps: None,
        ..ImpairConfig::default()
    }
}

fn check(r: &RunReport, what: &str) {
    assert!(
        r.ok,
        "{what} seed {}: {:?} [{}]",
        r.seed,
        r.error,
        r.variant.trim()
    );
}

#[test]
fn gro_on_and_off_both_deliver_every_byte_under_impairment() {
    let mut merged = 0;
    for seed in 1..=12u64 {
        let delay = [1, 5, 20][seed as usize % 3];
        let (conns, hosts) = [(1, 2), (2, 2), (3, 3)][seed as usize % 3];
        let on = run(&cfg(seed, true, impaired(delay), conns, hosts));
        let off = run(&cfg(seed, false, impaired(delay), conns, hosts));
        check(&on, "GRO on");
        check(&off, "GRO off");
        // Both directions of every connection, every byte checked by the receiver.
        let want = 2 * 300_000 * u64::from(conns);
        assert_eq!(on.bytes, want);
        assert_eq!(off.bytes, want);
        assert_eq!(off.gro_merged, 0, "seed {seed}: GRO off merged");
        merged += on.gro_merged;
    }
    eprintln!("{merged} segments merged");
    assert!(merged > 1000, "GRO merged only {merged} segments");
}

/// Without impairment a bulk transfer's windows arrive whole and most segments merge.
/// PSH ends a merged segment, and the sender sets it on every `tcp_push_segs`-th
/// segment of a burst (2 by default, as Linux marks each GSO chunk), so with the default
/// the merged segments are pairs; with PSH only at the end of the data they are whole
/// windows.
#[test]
fn gro_merges_most_of_a_clean_bulk_transfer() {
    let impair = ImpairConfig {
        delay: Duration::from_millis(5),
        rate_bps: None,
        ..ImpairConfig::default()
    };
    // 2 MB in segments of 1448 bytes is 1,382 segments.
    for (push_segs, at_least) in [("2", 600), ("0", 1200)] {
        let mut c = SimConfig {
            bytes: 2_000_000,
            oneway: true,
            vary: false,
            ..cfg(7, true, impair.clone(), 1, 2)
        };
        c.params.push(("tcp_push_segs".into(), push_segs.into()));
        let on = run(&c);
        check(&on, "GRO on");
        eprintln!("tcp_push_segs {push_segs}: {} merged", on.gro_merged);
        assert!(
            on.gro_merged > at_least,
            "tcp_push_segs {push_segs}: merged {}",
            on.gro_merged
        );
    }
}

/// On a rate-limited link frames arrive one per serialisation time: no batches, so
/// nothing merges and nothing changes.
#[test]
fn a_paced_link_gives_nothing_to_merge() {
    let impair = ImpairConfig {
        delay: Duration::from_millis(5),
        rate_bps: Some(100_000_000),
        ..ImpairConfig::default()
    };
    let on = run(&cfg(3, true, impair.clone(), 1, 2));
    let off = run(&cfg(3, false, impair, 1, 2));
    check(&on, "GRO on");
    check(&off, "GRO off");
    assert_eq!(on.gro_merged, 0);
    assert_eq!((on.virtual_s, on.frames), (off.virtual_s, off.frames));
}
