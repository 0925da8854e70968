//! # ember-bench
//!
//! `ember bench`: the FireEngine metrics (throughput, connection rate, request/response
//! latency, scalability, CPU per operation) and the field reports' scenarios (Nagle and
//! small writes, the fused slow reader, the FIN held in a buffer, bulk traffic starving
//! pings), each measured for ember and for the Linux kernel's own sockets in the same
//! process run, alternating round by round. `../shared/spec/benchmarks.md` is the
//! contract: the variant names, the metrics, the JSON shape and the targets.
//!
//! Layout: [`env`] builds a fresh instance of each variant (ember stacks, kernel sockets)
//! behind one stream type; [`report`] alternates cases over rounds, takes medians and
//! per-round ratios and renders the JSON and the tables; [`measure`] reads CPU time,
//! memory and latency histograms; [`plot`] draws the SVG; `benches/` holds one file per
//! bench, each a workload written once and run on every variant.
//!
//! Benchmarks report; they never assert. A target the spec sets is printed as met or not
//! met beside the figures it was judged on.

pub mod benches;
pub mod env;
pub mod measure;
pub mod plot;
pub mod report;

use env::{EnvConfig, Variant};
use report::{Case, Report};
use std::io;

/// Options every bench takes.
#[derive(Debug, Clone, Default)]
pub struct Opts {
    /// Sizes for a first look or CI: seconds per bench, not minutes.
    pub quick: bool,
    /// Only these variants (all of the bench's when `None`).
    pub variants: Option<Vec<Variant>>,
    /// Rounds per variant (the bench's default when `None`).
    pub rounds: Option<usize>,
    /// IP MTU of `ember-wire` links (the bench's default when `None`).
    pub mtu: Option<u32>,
    /// Tunables for every ember stack, `NAME=VALUE`.
    pub params: Vec<(String, String)>,
    /// Draw progress bars on stderr.
    pub progress: bool,
}

impl Opts {
    /// Whether `v` is to be run.
    pub fn wants(&self, v: Variant) -> bool {
        self.variants.as_ref().is_none_or(|l| l.contains(&v))
    }

    /// The number of rounds: the user's, or the bench's default for the mode.
    pub fn rounds(&self, quick: usize, full: usize) -> usize {
        self.rounds
            .unwrap_or(if self.quick { quick } else { full })
            .max(1)
    }

    /// A size for the mode.
    pub fn size<T>(&self, quick: T, full: T) -> T {
        if self.quick {
            quick
        } else {
            full
        }
    }

    /// The environment configuration these options give.
    pub fn env(&self) -> EnvConfig {
        EnvConfig {
            mtu: self.mtu.unwrap_or(1500),
            params: self.params.clone(),
            ..EnvConfig::default()
        }
    }

    /// The cases for these variants that the user asked for.
    pub fn cases(&self, variants: &[Variant]) -> Vec<Case> {
        variants
            .iter()
            .filter(|v| self.wants(**v))
            .map(|v| Case::plain(*v))
            .collect()
    }

    /// The cases for `variant × modes`, if the user asked for the variant.
    pub fn mode_cases(&self, variant: Variant, modes: &[&str]) -> Vec<Case> {
        if !self.wants(variant) {
            return Vec::new();
        }
        modes.iter().map(|m| Case::mode(variant, *m)).collect()
    }

    /// Checks the tunables by building a stack with them, so that a bad `--param` is
    /// refused before anything runs.
    pub fn validate(&self) -> io::Result<()> {
        let mut p = ember_core::params::Params::default();
        // All at once, as the stacks take them (relations checked after the last).
        p.set_many(&self.params)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        if let Some(m) = self.mtu {
            if !(576..=65_535).contains(&m) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("--mtu {m}: must be 576..=65535"),
                ));
            }
        }
        Ok(())
    }
}

/// The benches, in the order `all` runs them.
pub const BENCHES: &[&str] = &[
    "rr",
    "stream",
    "crr",
    "nagle",
    "slowreader",
    "lsofin",
    "starvation",
    "libmicro",
    "scale",
    "xproc",
];

/// Runs one bench by name, or every bench (`all`, always with quick sizes).
pub fn run(name: &str, opts: &Opts) -> io::Result<Vec<Report>> {
    opts.validate()?;
    if name == "all" {
        let o = Opts {
            quick: true,
            ..opts.clone()
        };
        return BENCHES.iter().map(|b| run_one(b, &o)).collect();
    }
    Ok(vec![run_one(name, opts)?])
}

fn run_one(name: &str, o: &Opts) -> io::Result<Report> {
    match name {
        "rr" => benches::rr::run(o),
        "stream" => benches::stream::run(o),
        "crr" => benches::crr::run(o),
        "nagle" => benches::nagle::run(o),
        "slowreader" => benches::slowreader::run(o),
        "libmicro" => benches::libmicro::run(o),
        "scale" => benches::scale::run(o),
        "lsofin" => benches::lsofin::run(o),
        "starvation" => benches::starvation::run(o),
        "xproc" => benches::xproc::run(o),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("no bench named {name:?}; the benches are {BENCHES:?} and all"),
        )),
    }
}
