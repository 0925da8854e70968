//! The `ember` command.
//!
//! * `ember bench` — the benchmark suite: ember against the kernel's sockets in one run.
//! * `ember sim` — run TCP connections through the deterministic network simulator
//!   (impaired in-memory links, virtual time) and check every byte.
//! * `ember serve` — ember on a real link (TAP or AF_PACKET), serving ICMP echo, echo,
//!   discard, chargen, HTTP/1.1 and iperf3 to the kernel's tools.
//! * `ember client` — ember's HTTP and bulk clients on a real link.
//! * `ember run -- PROGRAM` — an unmodified program with ember's preload library.
//! * `ember conformance packetdrill` — the packetdrill corpus against ember, scored.
//! * `ember ndd`, `ember kstat`, `ember netstat`, `ember ls` — tunables, counters and
//!   connections of running stacks, through their control sockets (`ctl.rs`).

mod bench;
mod client;
mod conformance;
mod ctl;
mod link;
mod run;
mod serve;
mod sim;
mod xproc_peer;

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
    /// Tunables of a running stack: `ndd -list`, `ndd NAME`, `ndd -set NAME VALUE`; without
    /// a running stack the defaults; `ndd NAME=VALUE...` checks settings.
    Ndd(ctl::NddArgs),
    /// Counters of a running stack (kstat-style `module:name value`).
    Kstat(ctl::KstatArgs),
    /// Listeners and connections of a running stack, with squeue and fusion.
    Netstat(ctl::NetstatArgs),
    /// The running ember stacks (their control sockets).
    Ls,
    /// Run a program with ember's preload library: its TCP connections to other
    /// programs under `ember run` on this host are fused.
    Run(run::RunArgs),
    /// One of the two processes of `ember bench xproc` (internal).
    #[command(hide = true, name = "xproc-peer")]
    XprocPeer {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
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
        Cmd::Ndd(a) => ctl::ndd(a),
        Cmd::Kstat(a) => ctl::kstat(a),
        Cmd::Netstat(a) => ctl::netstat(a),
        Cmd::Ls => ctl::ls(),
        Cmd::Run(a) => run::main(a),
        Cmd::XprocPeer { args } => xproc_peer::main(args),
    }
}
