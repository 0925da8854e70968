//! `xproc`: TCP between two processes, fused across processes by `ember run`'s preload
//! library, against the same two processes on the kernel (crossproc.md; the issue's
//! `ember bench xproc`).
//!
//! Each measurement starts two processes of the `ember` binary (`ember xproc-peer
//! server` and `ember xproc-peer client`, `crates/cli/src/xproc_peer.rs`): the server
//! listens and serves, the client runs the workload and prints its figures as one JSON
//! line. The variants differ only in the two processes' environment:
//!
//! * `ember-xproc`: both under the preload library (`LD_PRELOAD`), fusion on;
//! * `ember-xproc-off`: both under the library with `do_tcp_fusion=0` (its pass-through
//!   cost);
//! * `kernel-tcp`: neither, TCP over 127.0.0.1;
//! * `kernel-unix`: neither, over a Unix-domain stream socket.
//!
//! Cases, in alternating rounds: `rr` (one connection, 64-byte request and response,
//! back to back: p50 and p99 round trip, operations per second), `stream` (one
//! connection, 64 KiB writes, then a shutdown and an 8-byte acknowledgement: Gbit/s),
//! `crr` (connect, 64-byte request and response, close, one after another:
//! connections per second). The library is found beside the `ember` binary (or its
//! `deps/`), or at `$EMBER_PRELOAD`; without it the `ember-xproc*` variants are skipped
//! with that reason.

use crate::env::Variant;
use crate::report::{alternate, Case, Outcome, Report};
use crate::Opts;
use serde_json::{json, Map, Value};
use std::io::{self, BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// The longest one client may run.
const CLIENT_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// The workloads, as case modes.
pub const MODES: &[&str] = &["rr", "stream", "crr"];

/// The preload library, if it can be found.
pub fn library() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("EMBER_PRELOAD").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let exe = std::fs::canonicalize(std::env::current_exe().ok()?).ok()?;
    let dir = exe.parent()?;
    [
        dir.join("libember_preload.so"),
        dir.join("deps/libember_preload.so"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn peer(
    variant: Variant,
    lib: Option<&PathBuf>,
    args: &[String],
    regdir: &str,
) -> io::Result<Command> {
    let exe = std::env::current_exe()?;
    let mut c = Command::new(exe);
    c.arg("xproc-peer").args(args);
    c.env_remove("LD_PRELOAD");
    c.env("EMBER_XPROC_DIR", regdir);
    match variant {
        Variant::EmberXproc | Variant::EmberXprocOff => {
            let lib =
                lib.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no preload library"))?;
            c.env("LD_PRELOAD", lib);
            if variant == Variant::EmberXprocOff {
                c.env("EMBER_DO_TCP_FUSION", "0");
            }
        }
        _ => {}
    }
    Ok(c)
}

/// Runs one measurement: a server, a client, the client's JSON figures.
fn measure(
    variant: Variant,
    lib: Option<&PathBuf>,
    mode: &str,
    size: usize,
    count: usize,
    regdir: &str,
) -> io::Result<Outcome> {
    let addr = match variant {
        Variant::KernelUnix => format!(
            "unix:{}",
            std::env::temp_dir()
                .join(format!("ember-xproc-bench-{}.sock", std::process::id()))
                .display()
        ),
        _ => "127.0.0.1:0".to_string(),
    };
    let mut srv = peer(variant, lib, &["server".into(), addr.clone()], regdir)?;
    srv.stdout(Stdio::piped()).stderr(Stdio::inherit());
    let mut srv = Kill(srv.spawn()?);
    let mut line = String::new();
    BufReader::new(srv.0.stdout.take().expect("piped"))
        .read_line(&mut line)
        .map_err(|e| io::Error::other(format!("server: {e}")))?;
    let at = line
        .trim()
        .strip_prefix("listening ")
        .ok_or_else(|| io::Error::other(format!("server said {line:?}")))?;
    let mut cl = peer(
        variant,
        lib,
        &[
            "client".into(),
            at.into(),
            mode.into(),
            size.to_string(),
            count.to_string(),
        ],
        regdir,
    )?;
    cl.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = Kill(cl.spawn()?);
    // Bounded: a client that has not finished in CLIENT_LIMIT is killed and the round
    // is an error.
    let until = std::time::Instant::now() + CLIENT_LIMIT;
    loop {
        if child.0.try_wait()?.is_some() {
            break;
        }
        if std::time::Instant::now() >= until {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{mode} client did not finish within {CLIENT_LIMIT:?}"),
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let mut out = Vec::new();
    let mut err = Vec::new();
    if let Some(mut o) = child.0.stdout.take() {
        std::io::Read::read_to_end(&mut o, &mut out)?;
    }
    if let Some(mut e) = child.0.stderr.take() {
        std::io::Read::read_to_end(&mut e, &mut err)?;
    }
    let status = child.0.wait()?;
    drop(srv);
    let cl = std::process::Output {
        status,
        stdout: out,
        stderr: err,
    };
    if !cl.status.success() {
        return Err(io::Error::other(format!(
            "client: {}: {}",
            cl.status,
            String::from_utf8_lossy(&cl.stderr).trim()
        )));
    }
    let v: Value = serde_json::from_slice(&cl.stdout)
        .map_err(|e| io::Error::other(format!("client output: {e}")))?;
    let mut m = Vec::new();
    for k in ["p50_us", "p99_us", "ops_per_s", "gbit_per_s", "conns_per_s"] {
        if let Some(x) = v.get(k).and_then(Value::as_f64) {
            m.push((metric(k), x));
        }
    }
    Ok(Outcome {
        metrics: m,
        ..Default::default()
    })
}

fn metric(k: &str) -> &'static str {
    match k {
        "p50_us" => "p50_us",
        "p99_us" => "p99_us",
        "ops_per_s" => "ops_per_s",
        "gbit_per_s" => "gbit_per_s",
        _ => "conns_per_s",
    }
}

/// Runs the bench.
pub fn run(o: &Opts) -> io::Result<Report> {
    let rounds = o.rounds(3, 8);
    let rr_count = o.size(2_000, 20_000);
    let stream_bytes = o.size(64 << 20, 1 << 30);
    let crr_count = o.size(300, 3_000);
    let lib = library();
    let variants = [
        Variant::EmberXproc,
        Variant::EmberXprocOff,
        Variant::KernelTcp,
        Variant::KernelUnix,
    ];
    let mut cases = Vec::new();
    for v in variants {
        cases.extend(o.mode_cases(v, MODES));
    }
    let regdir = std::env::temp_dir().join(format!("ember-xproc-bench-reg-{}", std::process::id()));
    std::fs::create_dir_all(&regdir)?;
    let reg = regdir.to_string_lossy().into_owned();
    let runs = alternate("xproc", cases, rounds, o.progress, |c: &Case, _| {
        let mode = c.mode.as_deref().unwrap_or("rr");
        let (size, count) = match mode {
            "stream" => (64 << 10, stream_bytes),
            "crr" => (64, crr_count),
            _ => (64, rr_count),
        };
        measure(c.variant, lib.as_ref(), mode, size, count, &reg)
    });
    let _ = std::fs::remove_dir_all(&regdir);
    let mut params = Map::new();
    params.insert("rounds".into(), json!(rounds));
    params.insert("rr_round_trips".into(), json!(rr_count));
    params.insert("stream_bytes".into(), json!(stream_bytes));
    params.insert("crr_connections".into(), json!(crr_count));
    params.insert(
        "library".into(),
        json!(lib.map(|p| p.display().to_string())),
    );
    let mut r = Report::new("xproc", params, runs);
    // The targets (must meet).
    r.check_ratio(
        "ember-xproc-off[rr]",
        "kernel-tcp[rr]",
        "p50_us",
        true,
        1.05,
    );
    r.check_ratio(
        "ember-xproc-off[crr]",
        "kernel-tcp[crr]",
        "conns_per_s",
        false,
        0.95,
    );
    r.check_ratio("ember-xproc[rr]", "kernel-unix[rr]", "p50_us", true, 0.5);
    r.check_ratio(
        "ember-xproc[stream]",
        "kernel-tcp[stream]",
        "gbit_per_s",
        false,
        1.5,
    );
    r.check_ratio(
        "ember-xproc[crr]",
        "kernel-tcp[crr]",
        "conns_per_s",
        false,
        0.9,
    );
    // Its goals (reported).
    r.check_ratio("ember-xproc[rr]", "kernel-tcp[rr]", "p50_us", true, 0.1);
    r.check_ratio(
        "ember-xproc[stream]",
        "kernel-tcp[stream]",
        "gbit_per_s",
        false,
        2.0,
    );
    Ok(r)
}
