//! `rr`: 1-byte request, 1-byte response on one connection between two threads, the
//! first-byte latency of the FireEngine metrics. The client thread times each round trip;
//! the server thread echoes. `limit-spin` is the same hand-off done by two threads
//! spinning on one shared flag: the floor no socket can beat.

use crate::env::{Conn, Env, Variant};
use crate::measure::{cpu_time, histogram, quantile_us, record};
use crate::report::{alternate, Outcome, Report};
use crate::Opts;
use hdrhistogram::Histogram;
use serde_json::{json, Map};
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// The variants `rr` runs.
pub const VARIANTS: &[Variant] = &[
    Variant::EmberFused,
    Variant::EmberLoopback,
    Variant::EmberWire,
    Variant::EmberTap,
    Variant::KernelTcp,
    Variant::KernelUnix,
    Variant::LimitSpin,
];

/// Runs the bench.
pub fn run(o: &Opts) -> io::Result<Report> {
    let ops: usize = o.size(5_000, 50_000);
    let rounds = o.rounds(3, 5);
    let cfg = o.env();
    let runs = alternate("rr", o.cases(VARIANTS), rounds, o.progress, |c, _| {
        if c.variant == Variant::LimitSpin {
            return Ok(spin(ops));
        }
        let mut env = Env::new(c.variant, &cfg)?;
        let (client, server) = env.pair()?;
        round_trips(client, server, ops)
    });
    let mut params = Map::new();
    params.insert("rounds".into(), json!(rounds));
    params.insert("ops".into(), json!(ops));
    params.insert("mtu".into(), json!(cfg.mtu));
    let mut r = Report::new("rr", params, runs);
    r.check_ratio("ember-fused", "kernel-tcp", "p50_us", true, 0.1);
    r.check_ratio("ember-fused", "kernel-unix", "p50_us", true, 0.5);
    r.check_ratio("ember-wire", "kernel-tcp", "p50_us", true, 1.0);
    Ok(r)
}

/// `ops` timed round trips (after a tenth as many untimed ones).
pub fn round_trips(mut client: Conn, server: Conn, ops: usize) -> io::Result<Outcome> {
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let echo = std::thread::spawn(move || {
        let mut s = server;
        let mut b = [0u8; 1];
        loop {
            match s.read(&mut b) {
                Ok(1) => {
                    if s.write_all(&b).is_err() {
                        return;
                    }
                }
                _ => return,
            }
        }
    });
    let mut b = [7u8; 1];
    for _ in 0..ops / 10 {
        client.write_all(&b)?;
        client.read_exact(&mut b)?;
    }
    let mut h = histogram();
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    for _ in 0..ops {
        let t = Instant::now();
        client.write_all(&b)?;
        client.read_exact(&mut b)?;
        record(&mut h, t.elapsed());
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = (cpu_time() - cpu0).as_secs_f64();
    drop(client);
    let _ = echo.join();
    Ok(outcome(h, ops, wall, cpu))
}

/// rr's figures from the round trips' latencies, their count, the wall-clock seconds
/// and the process CPU seconds they took.
pub fn outcome(h: Histogram<u64>, ops: usize, wall: f64, cpu: f64) -> Outcome {
    Outcome {
        metrics: vec![
            ("p50_us", quantile_us(&h, 0.5)),
            ("p99_us", quantile_us(&h, 0.99)),
            ("ops_per_s", ops as f64 / wall),
            ("cpu_us_per_op", cpu * 1e6 / ops as f64),
        ],
        latency: Some(h),
        series: Vec::new(),
    }
}

/// Two threads hand a flag back and forth by spinning on it: 1 = request, 2 = response.
fn spin(ops: usize) -> Outcome {
    let flag = Arc::new(AtomicU32::new(0));
    let f2 = flag.clone();
    let total = ops + ops / 10;
    let peer = std::thread::spawn(move || {
        for _ in 0..total {
            while f2.load(Ordering::Acquire) != 1 {
                std::hint::spin_loop();
            }
            f2.store(2, Ordering::Release);
        }
    });
    let mut h = histogram();
    let one = || {
        flag.store(1, Ordering::Release);
        while flag.load(Ordering::Acquire) != 2 {
            std::hint::spin_loop();
        }
    };
    for _ in 0..ops / 10 {
        one();
    }
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    for _ in 0..ops {
        let t = Instant::now();
        one();
        record(&mut h, t.elapsed());
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = (cpu_time() - cpu0).as_secs_f64();
    let _ = peer.join();
    outcome(h, ops, wall, cpu)
}
