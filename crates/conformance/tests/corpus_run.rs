//! Every corpus script run against ember: a table per directory of pass, fail,
//! unsupported and error, and the first failures with their detail.
//!
//! Design. The corpus is found as `tests/corpus.rs` finds it (`$EMBER_PACKETDRILL_CORPUS`,
//! else `../shared/conformance/packetdrill` beside the workspace root; absent → the test
//! prints why and passes). What is asserted: the pass count is at least the ratchet
//! recorded in `crates/conformance/ratchet.txt`; no script panics the runner (each run is caught), no
//! script hangs it (each run is bounded by the runner's step and virtual-time budgets,
//! and the wall time of each run is checked), and `Error` outcomes (a script the runner
//! could not run at all: a budget exceeded, a value the packet builder calls invalid)
//! stay below [`MAX_ERRORS`]. Errors are runner or script-reading problems, not ember
//! verdicts; a handful are expected from inbound lines the packet builder rejects as
//! invalid, so the bound is 5% of the corpus.
//!
//! `EMBER_PDRUN_TRACE=substring` prints the verdict and the trace of every script whose
//! path contains the substring.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ember_conformance::run::{run_script, RunOptions, RunResult};
use ember_conformance::script::parse;

/// At most this many `Error` outcomes over the 162 scripts (5%).
const MAX_ERRORS: usize = 8;

fn scripts() -> Option<Vec<(PathBuf, String)>> {
    ember_conformance::corpus::load(&ember_conformance::corpus::default_root())
}

#[derive(Default)]
struct Tally {
    pass: usize,
    fail: usize,
    unsupported: usize,
    error: usize,
}

#[test]
fn every_corpus_script_runs_to_a_verdict() {
    let Some(scripts) = scripts() else { return };
    let opts = RunOptions::default();
    // `EMBER_PDRUN_TRACE=substring`: print the verdict and trace of matching scripts.
    let trace_filter = std::env::var("EMBER_PDRUN_TRACE").ok();
    let mut per_dir: BTreeMap<String, Tally> = BTreeMap::new();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut errors = Vec::new();
    let mut panics = Vec::new();
    let mut slow = Vec::new();
    for (path, text) in &scripts {
        let dir = path
            .parent()
            .map(|d| d.display().to_string())
            .unwrap_or_default();
        let t = per_dir.entry(dir).or_default();
        let script = parse(text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let started = Instant::now();
        let out = catch_unwind(AssertUnwindSafe(|| run_script(&script, &opts)));
        if started.elapsed() > Duration::from_secs(20) {
            slow.push(format!("{} took {:?}", path.display(), started.elapsed()));
        }
        let Ok(out) = out else {
            panics.push(path.display().to_string());
            continue;
        };
        if let Some(f) = &trace_filter {
            if path.display().to_string().contains(f.as_str()) {
                println!("== {}: {}\n{}\n", path.display(), out.result, out.detail);
            }
        }
        match &out.result {
            RunResult::Pass => t.pass += 1,
            RunResult::Fail { .. } => {
                t.fail += 1;
                failures.push(format!(
                    "{}: {}\n    trace:\n      {}",
                    path.display(),
                    out.result,
                    out.detail.replace('\n', "\n      ")
                ));
            }
            RunResult::Unsupported(r) => {
                t.unsupported += 1;
                // Group reasons without their line numbers.
                let r = r.split_once(": ").map_or(r.as_str(), |(a, b)| {
                    if a.starts_with("line ") {
                        b
                    } else {
                        r
                    }
                });
                *reasons.entry(r.to_string()).or_default() += 1;
            }
            RunResult::Error(r) => {
                t.error += 1;
                errors.push(format!("{}: {r}", path.display()));
            }
        }
    }
    println!(
        "{:>4} {:>4} {:>4} {:>4}  directory",
        "pass", "fail", "uns", "err"
    );
    let mut total = Tally::default();
    for (dir, t) in &per_dir {
        println!(
            "{:>4} {:>4} {:>4} {:>4}  {dir}",
            t.pass, t.fail, t.unsupported, t.error
        );
        total.pass += t.pass;
        total.fail += t.fail;
        total.unsupported += t.unsupported;
        total.error += t.error;
    }
    println!(
        "{:>4} {:>4} {:>4} {:>4}  total ({} scripts)",
        total.pass,
        total.fail,
        total.unsupported,
        total.error,
        scripts.len()
    );
    let mut reasons: Vec<_> = reasons.into_iter().collect();
    reasons.sort_by_key(|r| std::cmp::Reverse(r.1));
    println!("\nunsupported, by reason:");
    for (r, n) in &reasons {
        println!("{n:4} {r}");
    }
    println!("\nerrors:");
    for e in &errors {
        println!("  {e}");
    }
    println!("\nall failures:");
    for f in &failures {
        println!("  {}", f.lines().next().unwrap_or(""));
    }
    println!("\nfirst failures, with their trace:");
    for f in failures.iter().take(12) {
        println!("  {f}");
    }
    assert!(panics.is_empty(), "runner panicked on: {panics:?}");
    assert!(slow.is_empty(), "runs too slow (a hang?): {slow:?}");
    assert!(
        errors.len() < MAX_ERRORS,
        "{} errors (bound {MAX_ERRORS}): {errors:#?}",
        errors.len()
    );
    // The ratchet recorded in the repository: the pass count may only rise.
    let ratchet = ratchet();
    println!("ratchet: at least {ratchet} passes; {} now", total.pass);
    assert!(
        total.pass >= ratchet,
        "{} scripts pass, fewer than the ratchet's {ratchet} (crates/conformance/ratchet.txt)",
        total.pass
    );
}

/// The pass count recorded in `crates/conformance/ratchet.txt` (`ember N`).
fn ratchet() -> usize {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ratchet.txt");
    let text = std::fs::read_to_string(&p).expect("crates/conformance/ratchet.txt");
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .find_map(|l| l.strip_prefix("ember "))
        .and_then(|n| n.trim().parse().ok())
        .expect("a line `ember N` in ratchet.txt")
}
