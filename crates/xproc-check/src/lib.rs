//! Scenarios for `ember run`: each runs with and without the preload library.
//!
//! Design. The contract of `ember run` is that every scenario gives the same outcome with and
//! without the library. A scenario is a small multi-process program (`scen::*`): a coordinator
//! (`harness::Coord`) starts each end as a separate process by exec of this binary, so each end
//! picks up `LD_PRELOAD` from its environment (or is started without it, for the "peer not under
//! ember" cases). The ends talk over real TCP on 127.0.0.1 / ::1 with ephemeral ports, and
//! synchronise over `AF_UNIX` links (passed through by the library) to create *quiet points*.
//!
//! Each run prints a *transcript*: deterministic text with one line per observable event: byte
//! totals and SHA-256 of streams, errno names, at which logical step EOF or RST appears, and
//! readiness sets only at quiet points. No timings, pids, ports or fd numbers. A correct TCP
//! implementation yields the same transcript every time, so the library is checked by running
//! each scenario with and without it and comparing transcripts (`run`, `compare`).
//!
//! Plugging in the library: `run(.., preload: Some(path), ..)`, or for the test suite
//! `EMBER_XPROC_PRELOAD=/path/to/lib.so cargo test --release -p ember-xproc-check`
//! (`EMBER_XPROC_SEED=N` picks another seed for the random scenarios). By hand:
//! `LD_PRELOAD=/path/to/lib.so ember-xproc-check run NAME --seed N` against the same command
//! without it; `ember-xproc-check list -v` says what each scenario checks.

pub mod harness;
pub mod link;
pub mod log;
pub mod scen;
pub mod sys;

use std::io::{self, Read};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The names of all scenarios, in a fixed order.
pub fn scenarios() -> &'static [&'static str] {
    static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
    NAMES.get_or_init(|| scen::ALL.iter().map(|s| s.name).collect())
}

/// One-line descriptions, parallel to `scenarios()`.
pub fn describe(name: &str) -> Option<&'static str> {
    scen::ALL.iter().find(|s| s.name == name).map(|s| s.about)
}

/// The transcript of one run: the text the scenario printed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transcript {
    /// The whole text.
    pub text: String,
}

impl Transcript {
    /// Wraps a text.
    pub fn new(text: impl Into<String>) -> Transcript {
        Transcript { text: text.into() }
    }
    /// Its lines.
    pub fn lines(&self) -> Vec<&str> {
        self.text.lines().collect()
    }
}

fn kill_group(pgid: i32) {
    // SAFETY: signalling our own child's process group.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
}

/// Runs scenario `name` with `seed` by starting `exe run NAME --seed SEED` in its own process
/// group. With `preload`, the environment gets `LD_PRELOAD=<preload>`; without, `LD_PRELOAD` is
/// removed. `extra_env` is added. Past `timeout` the whole group is killed and this fails. A
/// non-zero exit (harness failure) is an error that carries the scenario's stderr and stdout.
pub fn run(
    exe: &Path,
    name: &str,
    seed: u64,
    preload: Option<&Path>,
    extra_env: &[(&str, &str)],
    timeout: Duration,
) -> io::Result<Transcript> {
    let mut cmd = Command::new(exe);
    let inner = timeout.mul_f64(0.8).as_millis().max(1000);
    cmd.arg("run")
        .arg(name)
        .arg("--seed")
        .arg(seed.to_string())
        .arg("--deadline-ms")
        .arg(inner.to_string())
        .env_remove("LD_PRELOAD")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(p) = preload {
        cmd.env("LD_PRELOAD", p);
    }
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn()?;
    let pgid = child.id() as i32;
    let mut so = child.stdout.take().expect("stdout");
    let mut se = child.stderr.take().expect("stderr");
    let (to, ro) = std::sync::mpsc::channel();
    let (te, re) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = so.read_to_end(&mut v);
        let _ = to.send(v);
    });
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = se.read_to_end(&mut v);
        let _ = te.send(v);
    });
    let end = Instant::now() + timeout;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break Some(s);
        }
        if Instant::now() >= end {
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    // Stragglers (a forked grandchild) die with the group either way.
    kill_group(pgid);
    let status = match status {
        Some(s) => s,
        None => {
            let _ = child.wait();
            let stdout = ro.recv_timeout(Duration::from_secs(2)).unwrap_or_default();
            let stderr = re.recv_timeout(Duration::from_secs(2)).unwrap_or_default();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "scenario {name} (seed {seed}) timed out after {timeout:?}\n--- stderr\n{}--- stdout so far\n{}",
                    String::from_utf8_lossy(&stderr),
                    String::from_utf8_lossy(&stdout)
                ),
            ));
        }
    };
    let stdout = ro.recv_timeout(Duration::from_secs(5)).unwrap_or_default();
    let stderr = re.recv_timeout(Duration::from_secs(5)).unwrap_or_default();
    if !status.success() {
        return Err(io::Error::other(format!(
            "scenario {name} (seed {seed}) failed: {}\n--- stderr\n{}--- stdout\n{}",
            harness::status_name(&status),
            String::from_utf8_lossy(&stderr),
            String::from_utf8_lossy(&stdout)
        )));
    }
    Ok(Transcript::new(
        String::from_utf8_lossy(&stdout).into_owned(),
    ))
}

/// Compares two transcripts; on a difference, returns a readable line diff (`-` only in `a`,
/// `+` only in `b`, with up to 3 lines of context around each change).
pub fn compare(a: &Transcript, b: &Transcript) -> Result<(), String> {
    if a.text == b.text {
        return Ok(());
    }
    let x = a.lines();
    let y = b.lines();
    // Longest common subsequence table (transcripts are small).
    let (n, m) = (x.len(), y.len());
    let mut t = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            t[i][j] = if x[i] == y[j] {
                t[i + 1][j + 1] + 1
            } else {
                t[i + 1][j].max(t[i][j + 1])
            };
        }
    }
    let mut ops: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && x[i] == y[j] {
            ops.push((' ', x[i]));
            i += 1;
            j += 1;
        } else if i < n && (j == m || t[i + 1][j] >= t[i][j + 1]) {
            ops.push(('-', x[i]));
            i += 1;
        } else {
            ops.push(('+', y[j]));
            j += 1;
        }
    }
    if ops.iter().all(|(c, _)| *c == ' ') {
        // Same lines, different line endings or a missing final newline.
        return Err("transcripts differ only in line endings".to_string());
    }
    let changed: Vec<usize> = (0..ops.len()).filter(|&k| ops[k].0 != ' ').collect();
    let keep = |k: usize| changed.iter().any(|&c| c.abs_diff(k) <= 3);
    let mut outp = format!("transcripts differ ({} changed lines):\n", changed.len());
    let mut skipped = false;
    for (k, (c, l)) in ops.iter().enumerate() {
        if keep(k) {
            if skipped {
                outp.push_str("   ...\n");
                skipped = false;
            }
            outp.push_str(&format!(" {c} {l}\n"));
        } else {
            skipped = true;
        }
    }
    Err(outp)
}

fn usage() -> i32 {
    eprintln!(
        "usage: ember-xproc-check list [-v]\n       ember-xproc-check run NAME [--seed N] [--deadline-ms MS]\n       ember-xproc-check role NAME ROLE [key=value...]"
    );
    2
}

/// The command line of the binary; returns the exit code.
pub fn cli_main(args: Vec<String>) -> i32 {
    match args.get(1).map(|s| s.as_str()) {
        Some("list") => {
            let verbose = args.get(2).map(|s| s == "-v").unwrap_or(false);
            for s in scen::ALL {
                if verbose {
                    println!("{:<22} {}", s.name, s.about);
                } else {
                    println!("{}", s.name);
                }
            }
            0
        }
        Some("run") => {
            let Some(name) = args.get(2) else {
                return usage();
            };
            let mut seed = 1u64;
            let mut deadline = Duration::from_secs(20);
            let mut k = 3;
            while k < args.len() {
                match args[k].as_str() {
                    "--seed" if k + 1 < args.len() => {
                        seed = args[k + 1].parse().unwrap_or(1);
                        k += 2;
                    }
                    "--deadline-ms" if k + 1 < args.len() => {
                        deadline = Duration::from_millis(args[k + 1].parse().unwrap_or(20_000));
                        k += 2;
                    }
                    _ => return usage(),
                }
            }
            let Some(sc) = scen::ALL.iter().find(|s| s.name == name) else {
                eprintln!("unknown scenario {name}");
                return 2;
            };
            let mut c = harness::Coord::new(sc.name, seed, deadline);
            out!("scenario {} seed {}", sc.name, seed);
            (sc.coord)(&mut c);
            if c.finish() {
                0
            } else {
                eprintln!("scenario {name}: harness failure (see above)");
                1
            }
        }
        Some("role") => {
            let (Some(name), Some(role)) = (args.get(2), args.get(3)) else {
                return usage();
            };
            let Some(sc) = scen::ALL.iter().find(|s| s.name == name) else {
                eprintln!("unknown scenario {name}");
                return 2;
            };
            harness::role_prelude();
            let a = harness::Args::parse(&args[4..]);
            (sc.role)(role, &a);
            0
        }
        _ => usage(),
    }
}
