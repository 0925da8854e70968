//! `crr`: connect, 1-byte request, 1-byte response, close, repeated: the connection
//! set-up and tear-down metric. The client (the bench thread) closes first, after reading
//! the response, so TIME_WAIT lands on the client as in a real request/response client;
//! the server thread accepts, echoes, waits for the client's FIN and closes.

use crate::env::{Conn, Env, Variant};
use crate::measure::{cpu_time, histogram, quantile_us, record};
use crate::report::{alternate, Outcome, Report};
use crate::Opts;
use hdrhistogram::Histogram;
use serde_json::{json, Map};
use std::io::{self, Read, Write};
use std::time::Instant;

/// The variants `crr` runs.
pub const VARIANTS: &[Variant] = &[
    Variant::EmberFused,
    Variant::EmberLoopback,
    Variant::EmberWire,
    Variant::EmberTap,
    Variant::KernelTcp,
    Variant::KernelUnix,
];

/// Runs the bench.
pub fn run(o: &Opts) -> io::Result<Report> {
    let ops: usize = o.size(1_000, 10_000);
    let rounds = o.rounds(3, 5);
    let cfg = o.env();
    let runs = alternate("crr", o.cases(VARIANTS), rounds, o.progress, |c, _| {
        let mut env = Env::new(c.variant, &cfg)?;
        cycles(&mut env, ops)
    });
    let mut params = Map::new();
    params.insert("rounds".into(), json!(rounds));
    params.insert("ops".into(), json!(ops));
    let mut r = Report::new("crr", params, runs);
    r.check_ratio("ember-fused", "kernel-tcp", "ops_per_s", false, 5.0);
    r.check_ratio("ember-wire", "kernel-tcp", "ops_per_s", false, 1.0);
    Ok(r)
}

fn one(env: &Env) -> io::Result<()> {
    let mut c = env.connect()?;
    c.set_nodelay(true)?;
    let mut b = [1u8];
    c.write_all(&b)?;
    c.read_exact(&mut b)?;
    Ok(())
}

/// `ops` timed cycles after a tenth as many untimed ones.
pub fn cycles(env: &mut Env, ops: usize) -> io::Result<Outcome> {
    let warm = ops / 10;
    let l = env.listen()?;
    let server = std::thread::spawn(move || -> io::Result<()> {
        for _ in 0..warm + ops {
            let mut s: Conn = l.accept()?;
            s.set_nodelay(true)?;
            let mut b = [0u8; 1];
            s.read_exact(&mut b)?;
            s.write_all(&b)?;
            // Wait for the client's close, then close.
            let _ = s.read(&mut b);
        }
        Ok(())
    });
    let mut h = histogram();
    let mut res = Ok(());
    for _ in 0..warm {
        res = res.and_then(|_| one(env));
    }
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    for _ in 0..ops {
        if res.is_err() {
            break;
        }
        let t = Instant::now();
        res = one(env);
        record(&mut h, t.elapsed());
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = (cpu_time() - cpu0).as_secs_f64();
    if let Err(e) = res {
        // The server may be blocked in accept or read: shutting ember's stacks down wakes
        // it; a kernel server thread is left to the process's exit (it holds nothing).
        env.shutdown();
        if env.variant.is_ember() {
            let _ = server.join();
        }
        return Err(e);
    }
    server
        .join()
        .map_err(|_| io::Error::other("server panicked"))??;
    Ok(outcome(h, ops, wall, cpu))
}

/// crr's figures from the cycles' latencies, their count, the wall-clock seconds and the
/// process CPU seconds they took.
pub fn outcome(h: Histogram<u64>, ops: usize, wall: f64, cpu: f64) -> Outcome {
    Outcome {
        metrics: vec![
            ("ops_per_s", ops as f64 / wall),
            ("p50_us", quantile_us(&h, 0.5)),
            ("p99_us", quantile_us(&h, 0.99)),
            ("cpu_us_per_op", cpu * 1e6 / ops as f64),
        ],
        latency: Some(h),
        series: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycles_complete_on_ember_and_kernel() {
        for v in [Variant::EmberFused, Variant::KernelTcp, Variant::KernelUnix] {
            let mut env = Env::new(v, &Default::default()).unwrap();
            let o = cycles(&mut env, 50).unwrap();
            assert!(o.metrics[0].1 > 0.0, "{v:?}");
        }
    }
}
