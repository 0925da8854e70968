//! `lsofin`: a NIC's LSO buffer that held a server's final FIN for 3.4 s (a Solaris IGB
//! driver report). A client that reads until end of file (nagios' `check_http`, not curl,
//! which counts Content-Length) waited those 3.4 s on its last `read()`; only responses
//! larger than a few KB (large enough to go through LSO) were hit, and
//! `ip_lso_outbound=0` cured it.
//!
//! The workload, per connection, as in the report's HTTP exchange: the client connects and
//! sends a 120-byte request (the report's client sequence number after its request is 121);
//! the server (with `TCP_NODELAY`, as Apache sets it) reads it, writes a 15 KiB response in
//! one write and calls `close()`; the client reads until `read()` returns 0. Connections
//! run one after another, a tenth as many untimed ones first. Per connection:
//!
//! * `close → FIN`: from the instant just before the server's `close()` to the instant the
//!   server's interface transmits the FIN (the server-side [`WireTap`](crate::env::WireTap)'s
//!   `last_fin()`, read after the client saw end of file, so the FIN has certainly left).
//!   `ember-wire` and `ember-tap` only: the kernel's FIN on 127.0.0.1 cannot be watched
//!   without root, and a fused connection has no wire.
//! * `close → EOF`: from the same instant to the client's `read()` returning 0.
//!
//! Cases: `ember-wire[lso-on]` and `ember-wire[lso-off]` (`ip_lso_outbound` = 1 / 0 on both
//! stacks, after any `--param`), the same two on `ember-tap` (as root: the server stack's
//! TAP, with the virtio-net header, hands large segments to the kernel whole), `ember-fused`
//! and `kernel-tcp`. On `ember-fused` the
//! response is carried fused; `close()` unfuses both ends and the FIN is then a real
//! segment over ember's loopback, so its `close → EOF` is unfuse + FIN through ember's
//! loopback path + waking the reader.

use crate::env::{Env, Listener, Variant};
use crate::measure::{cpu_time, histogram, quantile, quantile_us, record};
use crate::report::{alternate, Case, Outcome, Report};
use crate::Opts;
use serde_json::{json, Map};
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Request size: the report's client had sent 120 bytes (its ACKs carry Seq=121).
pub const REQUEST: usize = 120;
/// Response size: 15 KiB, about the report's (its client acknowledged 15,516 bytes).
pub const RESPONSE: usize = 15 * 1024;
/// The `ember-wire` modes: `ip_lso_outbound` on and off.
pub const MODES: &[&str] = &["lso-on", "lso-off"];
/// The spec's target: `close_to_fin_p99_us` at most this, with LSO on and off.
pub const FIN_P99_TARGET_US: f64 = 1000.0;
/// Longest wait for any one step (accept, read, the server's close instant).
const STEP_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs the bench.
pub fn run(o: &Opts) -> io::Result<Report> {
    let conns: usize = o.size(300, 3_000);
    let rounds = o.rounds(3, 5);
    let budget = Duration::from_secs(o.size(20, 120));
    let cfg = o.env();
    let mut cases = o.mode_cases(Variant::EmberWire, MODES);
    cases.extend(o.mode_cases(Variant::EmberTap, MODES));
    cases.extend(o.cases(&[Variant::EmberFused, Variant::KernelTcp]));
    let runs = alternate("lsofin", cases, rounds, o.progress, |c, _| {
        let mut cfg = cfg.clone();
        if let Some(v) = lso_value(c) {
            cfg.params.push(("ip_lso_outbound".into(), v.into()));
        }
        let mut env = Env::new(c.variant, &cfg)?;
        connections(&mut env, conns, budget)
    });
    let mut params = Map::new();
    params.insert("rounds".into(), json!(rounds));
    params.insert("conns".into(), json!(conns));
    params.insert("request_bytes".into(), json!(REQUEST));
    params.insert("response_bytes".into(), json!(RESPONSE));
    params.insert("mtu".into(), json!(cfg.mtu));
    let mut r = Report::new("lsofin", params, runs);
    for label in ["ember-wire", "ember-tap"]
        .iter()
        .flat_map(|v| MODES.iter().map(move |m| format!("{v}[{m}]")))
    {
        if label.starts_with("ember-tap") && r.value(&label, "close_to_eof_p99_us").is_none() {
            // Not run (not root, or not asked for): no check to report.
            continue;
        }
        let (met, detail) = match r.value(&label, "close_to_fin_p99_us") {
            Some(v) => (
                Some(v <= FIN_P99_TARGET_US),
                format!("{} µs", crate::report::fmt_num(v)),
            ),
            None => (None, "not measured in this run".to_string()),
        };
        r.check(
            format!("{label} close_to_fin_p99_us ≤ {FIN_P99_TARGET_US}"),
            met,
            detail,
        );
    }
    r.notes.push(
        "lso-on: TCP builds segments of up to 64 KiB; on ember-wire they are split into \
         MTU-sized frames just before the link (GSO), on ember-tap the TAP device hands them \
         to the kernel whole (virtio-net GSO_TCPV4, TSO); lso-off: MTU-sized segments"
            .into(),
    );
    r.notes.push(
        "close_to_fin is measured on ember-wire only (the server's WireTap); on kernel-tcp the \
         FIN on 127.0.0.1 is not observable without root, so it reports close_to_eof only"
            .into(),
    );
    r.notes.push(
        "ember-fused: the response is carried fused; close() unfuses both ends and sends the \
         FIN as a real segment over ember's loopback, so close_to_eof there is unfuse + FIN + \
         waking the reader"
            .into(),
    );
    Ok(r)
}

/// The `ip_lso_outbound` value a case sets, if it sets one.
fn lso_value(c: &Case) -> Option<&'static str> {
    match c.mode.as_deref() {
        Some("lso-on") => Some("1"),
        Some("lso-off") => Some("0"),
        _ => None,
    }
}

/// What one connection measured.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub close_to_eof: Duration,
    /// `ember-wire` only.
    pub close_to_fin: Option<Duration>,
}

/// The server side of every connection: accept, read the request, write the response,
/// note the instant, close. Sends each close instant to the client.
fn serve(
    l: Listener,
    total: usize,
    stop: Arc<AtomicBool>,
    tx: mpsc::Sender<Instant>,
) -> io::Result<()> {
    let response: Vec<u8> = (0..RESPONSE).map(|i| (i % 251) as u8).collect();
    let mut req = [0u8; REQUEST];
    for _ in 0..total {
        let mut s = l.accept()?;
        if stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        s.set_timeouts(Some(STEP_TIMEOUT))?;
        s.set_nodelay(true)?;
        s.read_exact(&mut req)?;
        s.write_all(&response)?;
        let t = Instant::now();
        drop(s);
        if tx.send(t).is_err() {
            return Ok(());
        }
    }
    Ok(())
}

/// One connection, client side.
fn one(env: &Env, rx: &mpsc::Receiver<Instant>, buf: &mut [u8]) -> io::Result<Sample> {
    let tap = env.server_tap();
    let fins0 = tap.as_ref().map(|t| t.fins.load(Ordering::SeqCst));
    let mut c = env.connect()?;
    c.set_timeouts(Some(STEP_TIMEOUT))?;
    let req = [b'G'; REQUEST];
    c.write_all(&req)?;
    let mut got = 0usize;
    loop {
        match c.read(buf) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let eof = Instant::now();
    if got != RESPONSE {
        return Err(io::Error::other(format!(
            "{got} of {RESPONSE} response bytes before end of file"
        )));
    }
    let closed = rx
        .recv_timeout(STEP_TIMEOUT)
        .map_err(|_| io::Error::other("the server reported no close"))?;
    let close_to_fin = match (tap, fins0) {
        (Some(t), Some(f0)) => {
            if t.fins.load(Ordering::SeqCst) <= f0 {
                return Err(io::Error::other("end of file without a FIN on the wire"));
            }
            let fin = t
                .last_fin()
                .ok_or_else(|| io::Error::other("the tap has no FIN instant"))?;
            Some(fin.saturating_duration_since(closed))
        }
        _ => None,
    };
    drop(c);
    Ok(Sample {
        close_to_eof: eof.saturating_duration_since(closed),
        close_to_fin,
    })
}

/// `n` timed connections after `n / 10` untimed ones, all within `budget`.
pub fn connections(env: &mut Env, n: usize, budget: Duration) -> io::Result<Outcome> {
    let warm = n / 10;
    let total = warm + n;
    let l = env.listen()?;
    if let Listener::Ember(el) = &l {
        el.set_accept_timeout(Some(STEP_TIMEOUT))?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let server = {
        let stop = stop.clone();
        std::thread::spawn(move || serve(l, total, stop, tx))
    };
    let deadline = Instant::now() + budget;
    let mut buf = vec![0u8; 64 * 1024];
    let mut samples = Vec::with_capacity(n);
    let mut res = Ok(());
    let mut cpu0 = cpu_time();
    let mut t0 = Instant::now();
    for i in 0..total {
        if i == warm {
            cpu0 = cpu_time();
            t0 = Instant::now();
        }
        if Instant::now() > deadline {
            res = Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{i} of {total} connections in {budget:?}"),
            ));
            break;
        }
        match one(env, &rx, &mut buf) {
            Ok(s) if i >= warm => samples.push(s),
            Ok(_) => {}
            Err(e) => {
                res = Err(e);
                break;
            }
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = (cpu_time() - cpu0).as_secs_f64();
    if let Err(e) = res {
        // Wake a server blocked in accept: ember's by shutting its stack down, the
        // kernel's with one more connection (it sees the stop flag and returns).
        stop.store(true, Ordering::SeqCst);
        drop(rx);
        if env.variant.is_ember() {
            env.shutdown();
        } else {
            let _ = env.connect();
        }
        let _ = server.join();
        return Err(e);
    }
    drop(rx);
    server
        .join()
        .map_err(|_| io::Error::other("server panicked"))??;
    Ok(outcome(&samples, wall, cpu))
}

/// The metrics of a round's samples.
fn outcome(samples: &[Sample], wall: f64, cpu: f64) -> Outcome {
    let mut h = histogram();
    for s in samples {
        record(&mut h, s.close_to_eof);
    }
    let fin: Vec<f64> = samples
        .iter()
        .filter_map(|s| s.close_to_fin.map(|d| d.as_secs_f64() * 1e6))
        .collect();
    let n = samples.len().max(1) as f64;
    let mut metrics = Vec::new();
    if !fin.is_empty() {
        metrics.push(("close_to_fin_p50_us", quantile(&fin, 0.5)));
        metrics.push(("close_to_fin_p99_us", quantile(&fin, 0.99)));
        metrics.push(("close_to_fin_max_us", quantile(&fin, 1.0)));
    }
    metrics.push(("close_to_eof_p50_us", quantile_us(&h, 0.5)));
    metrics.push(("close_to_eof_p99_us", quantile_us(&h, 0.99)));
    metrics.push(("conns_per_s", samples.len() as f64 / wall.max(1e-9)));
    metrics.push(("cpu_us_per_op", cpu * 1e6 / n));
    Outcome {
        metrics,
        latency: Some(h),
        series: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::EnvConfig;

    fn metric(o: &Outcome, name: &str) -> Option<f64> {
        o.metrics.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }

    #[test]
    fn wire_connections_see_every_fin_and_byte() {
        for lso in ["1", "0"] {
            let cfg = EnvConfig {
                params: vec![("ip_lso_outbound".into(), lso.into())],
                ..EnvConfig::default()
            };
            let mut env = Env::new(Variant::EmberWire, &cfg).unwrap();
            let o = connections(&mut env, 20, Duration::from_secs(20)).unwrap();
            let (_, server_tap) = env.taps.as_ref().unwrap();
            // 22 connections (2 warm-up), one FIN each from the server, and the 15 KiB of
            // every response crossed the server's interface.
            assert_eq!(server_tap.fins.load(Ordering::SeqCst), 22);
            assert!(server_tap.payload_bytes.load(Ordering::SeqCst) >= 22 * RESPONSE as u64);
            let p50 = metric(&o, "close_to_fin_p50_us").unwrap();
            let p99 = metric(&o, "close_to_fin_p99_us").unwrap();
            let eof = metric(&o, "close_to_eof_p50_us").unwrap();
            assert!(p50 > 0.0 && p50 <= p99, "{p50} {p99}");
            // Each client's end of file comes after its FIN left the server.
            assert!(eof >= p50, "eof {eof} fin {p50}");
            assert_eq!(o.latency.as_ref().unwrap().len(), 20);
        }
    }

    #[test]
    fn fused_and_kernel_report_close_to_eof_only() {
        for v in [Variant::EmberFused, Variant::KernelTcp] {
            let mut env = Env::new(v, &EnvConfig::default()).unwrap();
            let o = connections(&mut env, 20, Duration::from_secs(20)).unwrap();
            assert!(metric(&o, "close_to_fin_p99_us").is_none(), "{v:?}");
            assert!(metric(&o, "close_to_eof_p99_us").unwrap() > 0.0, "{v:?}");
        }
    }

    #[test]
    fn a_budget_that_is_too_short_fails_the_round_instead_of_hanging() {
        let mut env = Env::new(Variant::EmberWire, &EnvConfig::default()).unwrap();
        let r = connections(&mut env, 1_000_000, Duration::from_millis(200));
        assert_eq!(r.err().map(|e| e.kind()), Some(io::ErrorKind::TimedOut));
        let mut env = Env::new(Variant::KernelTcp, &EnvConfig::default()).unwrap();
        let r = connections(&mut env, 1_000_000, Duration::from_millis(200));
        assert_eq!(r.err().map(|e| e.kind()), Some(io::ErrorKind::TimedOut));
    }

    #[test]
    fn modes_set_the_lso_tunable() {
        assert_eq!(
            lso_value(&Case::mode(Variant::EmberWire, "lso-on")),
            Some("1")
        );
        assert_eq!(
            lso_value(&Case::mode(Variant::EmberWire, "lso-off")),
            Some("0")
        );
        assert_eq!(lso_value(&Case::plain(Variant::KernelTcp)), None);
    }
}
