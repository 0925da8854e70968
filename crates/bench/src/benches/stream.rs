//! `stream`: one connection, one direction, 64 KiB writes, at least 1 GiB (a quarter of
//! that with `--quick`): the throughput metric. The writer is the bench thread; a reader
//! thread drains into a 256 KiB buffer. The time runs from the first write to the reader's
//! end of file, so bytes still queued when the writer finishes are counted.
//! `ember-wire` runs at the MTU given (1500 by default) and at 65535, the spec's two
//! wire targets, with the stack's defaults (large segments split just before the link,
//! GSO, and coalesced on receive, GRO); `ember-wire[mtu1500-nooffload]` runs the same link
//! with `ip_lso_outbound=0 ip_gro=0` on both stacks: one MTU-sized segment per trip
//! through TCP, IP and the link, which is what LSO/GSO/GRO must at least halve the cost
//! of. `limit-memcpy` copies the same writes once into a 1 MiB ring on one
//! thread: the one copy a socket stream cannot avoid, without any protocol.

use crate::env::{Env, EnvConfig, Variant};
use crate::measure::cpu_time;
use crate::report::{alternate, Case, Outcome, Report};
use crate::Opts;
use serde_json::{json, Map};
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::time::Instant;

const CHUNK: usize = 64 * 1024;
/// The mode suffix for the `ember-wire` case with large segments and receive coalescing
/// off.
const NO_OFFLOAD: &str = "-nooffload";

/// Runs the bench.
pub fn run(o: &Opts) -> io::Result<Report> {
    let bytes: u64 = o.size(256 << 20, 1 << 30);
    let rounds = o.rounds(3, 5);
    let cfg = o.env();
    let mut cases = o.cases(&[Variant::EmberFused, Variant::EmberLoopback]);
    let mtus = [cfg.mtu, 65_535];
    if o.wants(Variant::EmberWire) {
        for m in mtus {
            cases.push(Case::mode(Variant::EmberWire, format!("mtu{m}")));
        }
        cases.push(Case::mode(
            Variant::EmberWire,
            format!("mtu{}{NO_OFFLOAD}", cfg.mtu),
        ));
    }
    cases.extend(o.cases(&[
        Variant::EmberTap,
        Variant::KernelTcp,
        Variant::KernelUnix,
        Variant::LimitMemcpy,
    ]));
    let runs = alternate("stream", cases, rounds, o.progress, |c, _| {
        if c.variant == Variant::LimitMemcpy {
            return Ok(memcpy(bytes));
        }
        let mut cfg = cfg.clone();
        if let Some(m) = c.mode.as_deref().and_then(|m| m.strip_prefix("mtu")) {
            let (m, off) = match m.strip_suffix(NO_OFFLOAD) {
                Some(m) => (m, true),
                None => (m, false),
            };
            cfg.mtu = m.parse().unwrap_or(1500);
            if off {
                cfg.params.push(("ip_lso_outbound".into(), "0".into()));
                cfg.params.push(("ip_gro".into(), "0".into()));
            }
        }
        transfer(c.variant, &cfg, bytes)
    });
    let mut params = Map::new();
    params.insert("rounds".into(), json!(rounds));
    params.insert("bytes".into(), json!(bytes));
    params.insert("write_size".into(), json!(CHUNK));
    let mut r = Report::new("stream", params, runs);
    let wire = |m: u32| format!("ember-wire[mtu{m}]");
    r.check_ratio("ember-fused", "kernel-tcp", "gbit_per_s", false, 3.0);
    r.check_ratio(&wire(65_535), "kernel-tcp", "gbit_per_s", false, 1.0);
    r.check_ratio(&wire(1500), "kernel-tcp", "gbit_per_s", false, 0.5);
    // The offload target: LSO/GSO/GRO at least double ember-wire at MTU 1500.
    r.check_ratio(
        &wire(1500),
        &format!("ember-wire[mtu1500{NO_OFFLOAD}]"),
        "gbit_per_s",
        false,
        2.0,
    );
    let off = |k: &str| o.params.iter().any(|(n, v)| n == k && v == "0");
    if off("ip_lso_outbound") || off("ip_gro") {
        r.notes.push(
            "--param turned LSO or GRO off for every case: the offload comparison compares \
             like with like"
                .into(),
        );
    }
    Ok(r)
}

fn transfer(v: Variant, cfg: &EnvConfig, bytes: u64) -> io::Result<Outcome> {
    let mut env = Env::new(v, cfg)?;
    let (mut client, server) = env.pair()?;
    let buf: Vec<u8> = (0..CHUNK).map(|i| (i * 7 + 3) as u8).collect();
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    let reader = std::thread::spawn(move || {
        let mut s = server;
        let mut b = vec![0u8; 256 * 1024];
        let mut n = 0u64;
        loop {
            match s.read(&mut b) {
                Ok(0) => return Ok(n),
                Ok(k) => n += k as u64,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    });
    let mut left = bytes;
    while left > 0 {
        let k = (left as usize).min(CHUNK);
        client.write_all(&buf[..k])?;
        left -= k as u64;
    }
    client.shutdown(Shutdown::Write)?;
    let got = reader
        .join()
        .map_err(|_| io::Error::other("reader panicked"))??;
    let secs = t0.elapsed().as_secs_f64();
    let cpu = (cpu_time() - cpu0).as_secs_f64();
    drop(client);
    if got != bytes {
        return Err(io::Error::other(format!("{got} of {bytes} bytes arrived")));
    }
    Ok(outcome(bytes, secs, cpu))
}

fn outcome(bytes: u64, secs: f64, cpu: f64) -> Outcome {
    Outcome {
        metrics: vec![
            ("gbit_per_s", bytes as f64 * 8.0 / secs / 1e9),
            ("cpu_us_per_gb", cpu * 1e6 / (bytes as f64 / 1e9)),
        ],
        ..Outcome::default()
    }
}

fn memcpy(bytes: u64) -> Outcome {
    let src: Vec<u8> = (0..CHUNK).map(|i| (i * 7 + 3) as u8).collect();
    let mut ring = vec![0u8; 1 << 20];
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    let mut off = 0usize;
    let mut left = bytes;
    while left > 0 {
        let k = (left as usize).min(CHUNK);
        ring[off..off + k].copy_from_slice(&src[..k]);
        std::hint::black_box(&mut ring);
        off = (off + k) % ring.len();
        left -= k as u64;
    }
    let secs = t0.elapsed().as_secs_f64();
    outcome(bytes, secs, (cpu_time() - cpu0).as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_transfer_on_each_socket_variant_delivers_every_byte() {
        for v in [
            Variant::EmberFused,
            Variant::EmberWire,
            Variant::KernelTcp,
            Variant::KernelUnix,
        ] {
            let o = transfer(v, &EnvConfig::default(), 3 << 20).unwrap();
            assert!(o.metrics[0].1 > 0.0, "{v:?}");
        }
    }
}
