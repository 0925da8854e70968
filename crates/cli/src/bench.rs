//! `ember bench`: runs the benchmark suite (`ember-bench`) and prints its tables, its
//! JSON (`--json FILE`, `-` for stdout) and its plot (`--plot FILE.svg`). With `--json -`
//! the tables go to stderr so that stdout is pure JSON.

use clap::Args;
use ember_bench::env::Variant;
use ember_bench::Opts;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// The bench: rr, stream, crr, nagle, slowreader, lsofin, starvation, libmicro, scale,
    /// or all (every bench with --quick sizes).
    name: String,
    /// Sizes for a first look or CI (seconds per bench).
    #[arg(long)]
    quick: bool,
    /// Only these variants, comma-separated (ember-fused, ember-loopback, ember-wire,
    /// ember-tap, kernel-tcp, kernel-unix, limit-spin, limit-memcpy).
    #[arg(long, value_delimiter = ',')]
    variants: Option<Vec<String>>,
    /// Rounds per variant (variants alternate within each round).
    #[arg(long)]
    rounds: Option<usize>,
    /// Write the JSON report to FILE (`-` for stdout).
    #[arg(long, value_name = "FILE")]
    json: Option<String>,
    /// Draw the figures into an SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<String>,
    /// IP MTU of the ember-wire link (576..=65535; default 1500).
    #[arg(long)]
    mtu: Option<u32>,
    /// Set a tunable on every ember stack, NAME=VALUE (repeatable), e.g.
    /// --param squeue_spin_us=50.
    #[arg(long = "param", value_name = "NAME=VALUE")]
    params: Vec<String>,
}

pub fn main(a: BenchArgs) -> ExitCode {
    let variants = match &a.variants {
        None => None,
        Some(list) => {
            let mut v = Vec::new();
            for n in list {
                match Variant::parse(n.trim()) {
                    Some(x) => v.push(x),
                    None => {
                        let names: Vec<&str> = Variant::ALL.iter().map(|v| v.name()).collect();
                        eprintln!(
                            "ember bench: unknown variant {n:?}; the variants are {}",
                            names.join(", ")
                        );
                        return ExitCode::from(2);
                    }
                }
            }
            Some(v)
        }
    };
    // EMBER_<NAME> environment settings first, the command line's --param after them.
    let mut params = match crate::link::env_params() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("ember bench: {e}");
            return ExitCode::from(2);
        }
    };
    for p in &a.params {
        match p.split_once('=') {
            Some((k, v)) => params.push((k.trim().to_string(), v.trim().to_string())),
            None => {
                eprintln!("ember bench: --param {p:?}: expected NAME=VALUE");
                return ExitCode::from(2);
            }
        }
    }
    let json_stdout = a.json.as_deref() == Some("-");
    let opts = Opts {
        quick: a.quick,
        variants,
        rounds: a.rounds,
        mtu: a.mtu,
        params,
        progress: std::io::stderr().is_terminal(),
    };
    let reports = match ember_bench::run(&a.name, &opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ember bench: {e}");
            return ExitCode::from(2);
        }
    };
    for r in &reports {
        let text = r.render();
        if json_stdout {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    }
    if let Some(path) = &a.json {
        let v: Vec<serde_json::Value> = reports.iter().map(|r| r.to_json()).collect();
        let doc = if a.name == "all" {
            serde_json::Value::Array(v)
        } else {
            v.into_iter().next().unwrap_or(serde_json::Value::Null)
        };
        let text = serde_json::to_string_pretty(&doc).expect("JSON values serialise");
        let res = if path == "-" {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{text}")
        } else {
            std::fs::write(path, text + "\n")
        };
        if let Err(e) = res {
            eprintln!("ember bench: writing {path}: {e}");
            return ExitCode::FAILURE;
        }
    }
    if let Some(path) = &a.plot {
        if let Err(e) = ember_bench::plot::write_svg(&reports, path) {
            eprintln!("ember bench: plotting to {path}: {e}");
            return ExitCode::FAILURE;
        }
        eprintln!("ember bench: plot written to {path}");
    }
    ExitCode::SUCCESS
}
