//! The `ember` command.
//!
//! * `ember bench` — the benchmark suite: ember against the kernel's sockets in one run.
//! * `ember sim` — run TCP connections through the deterministic network simulator
//!   (impaired in-memory links, virtual time) and check every byte.
//! * `ember serve` — ember on a real link (TAP or AF_PACKET), serving ICMP echo, echo,
//!   discard, chargen, HTTP/1.1 and iperf3 to the kernel's tools.
//! * `ember client` — ember's HTTP and bulk clients on a real link.
//! * `ember conformance packetdrill` — the packetdrill corpus against ember, scored.
//! * `ember ndd` — list the tunables with their defaults, ranges and meanings, or check
//!   a setting.

mod bench;
mod client;
mod conformance;
mod link;
mod serve;
mod sim;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "ember",
    version,
    about = "ember: a user-space TCP/IP stack on the FireEngine architecture"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Benchmarks: ember's variants against the kernel's sockets, in one run.
    Bench(bench::BenchArgs),
    /// Run TCP connections through the deterministic network simulator.
    Sim(sim::SimArgs),
    /// Run ember on a TAP interface or an AF_PACKET socket, serving echo, discard,
    /// chargen, HTTP and iperf3.
    Serve(serve::ServeArgs),
    /// ember's clients on a real link: an HTTP GET, bulk send or receive.
    Client(client::ClientArgs),
    /// Conformance suites run against ember.
    Conformance {
        #[command(subcommand)]
        suite: Suite,
    },
    /// List tunables (ndd-style), or validate NAME=VALUE settings.
    Ndd {
        /// Show only this tunable, or check NAME=VALUE.
        names: Vec<String>,
    },
}

#[derive(Subcommand)]
enum Suite {
    /// Google's packetdrill scripts: pass, fail, unsupported or error per script.
    Packetdrill(conformance::PacketdrillArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Bench(a) => bench::main(a),
        Cmd::Sim(a) => sim::main(a),
        Cmd::Serve(a) => serve::main(a),
        Cmd::Client(a) => client::main(a),
        Cmd::Conformance {
            suite: Suite::Packetdrill(a),
        } => conformance::main(a),
        Cmd::Ndd { names } => ndd(&names),
    }
}

fn ndd(names: &[String]) -> ExitCode {
    let mut p = ember_core::Params::default();
    for n in names {
        if let Some((k, v)) = n.split_once('=') {
            if let Err(e) = p.set(k, v) {
                eprintln!("ember ndd: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let only: Vec<&str> = names
        .iter()
        .map(|n| n.split('=').next().unwrap_or(""))
        .collect();
    for i in p.describe() {
        if !only.is_empty() && !only.contains(&i.name) {
            continue;
        }
        println!(
            "{:<30} {:>12} (default {}, {} {}) {}",
            i.name, i.value, i.default, i.range, i.unit, i.description
        );
    }
    if !only.is_empty() && !only.iter().all(|n| ember_core::Params::NAMES.contains(n)) {
        eprintln!("ember ndd: unknown tunable");
        return ExitCode::from(2);
    }
    ExitCode::SUCCESS
}
