//! `ember sim`: seeds through the simulator, a JSON or text summary, and a non-zero exit
//! status if any seed fails.

use clap::Args;
use ember_runtime::dev::ImpairConfig;
use ember_sim::{run_seeds, SimConfig};
use serde_json::json;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct SimArgs {
    /// Number of seeds to run.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// First seed (a single failing seed replays exactly with --seed S --seeds 1).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Frame loss probability per link direction.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Probability that a frame is held back and overtaken.
    #[arg(long, default_value_t = 0.0)]
    reorder: f64,
    /// Probability that a frame is duplicated.
    #[arg(long, default_value_t = 0.0)]
    dup: f64,
    /// A duplicate arrives up to this many ms after its original (uniform), holding the
    /// frames sent after it (0: at the same instant).
    #[arg(long = "dup-delay-ms", default_value_t = 0.0)]
    dup_delay_ms: f64,
    /// Probability that one bit of a frame is flipped.
    #[arg(long, default_value_t = 0.0)]
    corrupt: f64,
    /// One-way propagation delay (the RTT is twice this plus serialisation).
    #[arg(long = "delay-ms", default_value_t = 5.0)]
    delay_ms: f64,
    /// Extra random delay per frame, 0..=J ms (order kept unless reordered).
    #[arg(long = "jitter-ms", default_value_t = 0.0)]
    jitter_ms: f64,
    /// Link rate in Mbit/s (0 = unlimited).
    #[arg(long = "rate-mbit", default_value_t = 100.0)]
    rate_mbit: f64,
    /// Link queue in KiB (default: one bandwidth-delay product, at least 256 KiB).
    #[arg(long = "queue-kb")]
    queue_kb: Option<usize>,
    /// IP MTU of the links.
    #[arg(long, default_value_t = 1500)]
    mtu: usize,
    /// Bytes each connection moves in each direction.
    #[arg(long, default_value_t = 1_000_000)]
    bytes: u64,
    /// Connections per seed.
    #[arg(long, default_value_t = 1)]
    conns: u32,
    /// Hosts (2 = one point-to-point link; more share a switch).
    #[arg(long, default_value_t = 2)]
    hosts: usize,
    /// Data flows only from the connecting side.
    #[arg(long)]
    oneway: bool,
    /// Vary TCP options, congestion control, Nagle and write sizes per seed.
    #[arg(long)]
    vary: bool,
    /// Set a tunable on every host (repeatable), e.g. --set tcp_congestion_control=newreno.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    set: Vec<String>,
    /// Do not size socket buffers to the bandwidth-delay product.
    #[arg(long = "no-auto-buffers")]
    no_auto_buffers: bool,
    /// Virtual-time limit per seed, in seconds.
    #[arg(long = "time-limit-s", default_value_t = 3600)]
    time_limit_s: u64,
    /// Write the summary as JSON to FILE ("-" for standard output).
    #[arg(long)]
    json: Option<String>,
    /// Print every frame sent and received (to standard error).
    #[arg(long)]
    trace: bool,
    /// Print one line per seed.
    #[arg(long, short)]
    verbose: bool,
    /// Transmit straight onto each link's FIFO instead of through a fair queue (fq,
    /// CoDel) with a byte-queue limit.
    #[arg(long = "no-fq")]
    no_fq: bool,
}

fn ms(v: f64) -> Duration {
    Duration::from_secs_f64((v.max(0.0)) / 1000.0)
}

pub fn main(a: SimArgs) -> ExitCode {
    let rate = if a.rate_mbit > 0.0 {
        Some((a.rate_mbit * 1e6) as u64)
    } else {
        None
    };
    let mut impair = ImpairConfig {
        loss: a.loss,
        dup: a.dup,
        dup_delay: ms(a.dup_delay_ms),
        reorder: a.reorder,
        corrupt: a.corrupt,
        delay: ms(a.delay_ms),
        jitter: ms(a.jitter_ms),
        rate_bps: rate,
        mtu: a.mtu,
        ..ImpairConfig::default()
    };
    if let Some(q) = a.queue_kb {
        impair.queue_bytes = q.saturating_mul(1024);
    }
    if let Err(e) = impair.validate() {
        eprintln!("ember sim: {e}");
        return ExitCode::from(2);
    }
    let mut params = Vec::new();
    for s in &a.set {
        let Some((k, v)) = s.split_once('=') else {
            eprintln!("ember sim: --set wants NAME=VALUE, got '{s}'");
            return ExitCode::from(2);
        };
        let mut probe = ember_core::Params::default();
        if let Err(e) = probe.set_many(&[("tcp_max_buf", "1073741824"), (k, v)]) {
            eprintln!("ember sim: {e}");
            return ExitCode::from(2);
        }
        params.push((k.to_string(), v.to_string()));
    }
    let cfg = SimConfig {
        seed: a.seed,
        impair,
        bytes: a.bytes,
        conns: a.conns.max(1),
        hosts: a.hosts.clamp(2, 1024),
        oneway: a.oneway,
        params,
        vary: a.vary,
        time_limit: Duration::from_secs(a.time_limit_s),
        auto_buffers: !a.no_auto_buffers,
        queue_explicit: a.queue_kb.is_some(),
        trace: a.trace,
        fq: !a.no_fq,
        ..SimConfig::default()
    };
    let s = run_seeds(&cfg, a.seed, a.seeds);
    if a.verbose || a.json.is_none() {
        for r in &s.reports {
            let mut line = format!(
                "seed {:>6}  {}  {:>12} B  {:>9.3} s virtual  {:>7.3} s wall  {:>6} rexmit  {:>4} rto",
                r.seed,
                if r.ok { "ok  " } else { "FAIL" },
                r.bytes,
                r.virtual_s,
                r.wall_s,
                r.retransmits,
                r.timeouts
            );
            if !r.variant.is_empty() {
                line.push_str(&format!("  [{}]", r.variant.trim()));
            }
            if let Some(e) = &r.error {
                line.push_str(&format!("\n    {e}"));
            }
            eprintln!("{line}");
        }
    }
    // The Mathis et al. estimate for this path (MSS/RTT * 1.22/sqrt(p)), with the MSS of a
    // timestamped connection (MTU - 52) and the RTT of the propagation delay plus one
    // full frame's serialisation each way; only meaningful for random loss.
    let mathis_mbit = (a.loss > 0.0 && a.delay_ms > 0.0).then(|| {
        let mss = a.mtu.saturating_sub(52) as f64;
        let ser = rate.map_or(0.0, |r| (a.mtu + 14) as f64 * 8.0 / r as f64);
        let rtt = 2.0 * (a.delay_ms / 1000.0 + ser);
        mss * 8.0 / rtt * 1.22 / a.loss.sqrt() / 1e6
    });
    let summary = json!({
        "runs": s.runs,
        "ok": s.ok,
        "failed": s.failed,
        "bytes": s.bytes,
        "virtual_s": s.virtual_s,
        "wall_s": s.wall_s,
        "goodput_mbit": s.goodput_mbit,
        "retransmits": s.retransmits,
        "syn_ack_batches": s.syn_ack_batches,
        "mathis_mbit": mathis_mbit,
        "errors": s.reports.iter().filter(|r| !r.ok).map(|r| json!({
            "seed": r.seed, "error": r.error, "variant": r.variant.trim()
        })).collect::<Vec<_>>(),
    });
    match a.json.as_deref() {
        Some("-") => println!("{summary}"),
        Some(path) => {
            let r = std::fs::File::create(path).and_then(|mut f| writeln!(f, "{summary}"));
            if let Err(e) = r {
                eprintln!("ember sim: {path}: {e}");
                return ExitCode::from(2);
            }
        }
        None => {
            eprintln!(
                "{} of {} ok; {} bytes in {:.3} s virtual ({:.1} Mbit/s), {:.3} s wall, {} retransmits, {} batches with a SYN and its final ACK",
                s.ok, s.runs, s.bytes, s.virtual_s, s.goodput_mbit, s.wall_s, s.retransmits, s.syn_ack_batches
            );
            if let Some(m) = mathis_mbit {
                eprintln!("Mathis estimate for this path: {m:.1} Mbit/s per connection");
            }
        }
    }
    if s.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
