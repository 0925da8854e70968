//! `ember conformance packetdrill`: runs packetdrill scripts against ember and scores them.
//!
//! Each `*.pkt` under `--corpus DIR/gtests/net` (or under `DIR` itself when it has no
//! `gtests/net`) is parsed and run by `ember_conformance::run` (ember's sans-IO host on a
//! virtual clock) and ends as exactly one of pass, fail (with the first mismatch: line,
//! expected, got), unsupported (with the reason) or error (the script could not be parsed
//! or run). The output is a table per directory, or with `--json -` a JSON document (the
//! totals, and each script's path, result and detail). `--only GLOB` keeps the scripts
//! whose path (relative to the corpus's `gtests/net`) matches a glob with `*` and `?`.
//! `--backend linux` runs the same scripts against the Linux kernel through a TUN device
//! in a network namespace per script (`ember_conformance::linux`; root only, wall-clock
//! time, `--jobs N` scripts at once). `--min-pass N` (or `--ratchet FILE` holding a line
//! `BACKEND N`) makes the command exit 1 when fewer than N scripts pass: `.ci/run`'s
//! ratchet.

use clap::Args;
use ember_conformance::linux::{run_script_linux, CorpusCopy, LinuxOptions};
use ember_conformance::run::{run_script, Outcome, RunOptions, RunResult};
use ember_conformance::script;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `ember conformance packetdrill` options.
#[derive(Args, Debug)]
pub struct PacketdrillArgs {
    /// The packetdrill corpus (the directory holding `gtests/net`).
    #[arg(long, default_value = "../shared/conformance/packetdrill")]
    pub corpus: PathBuf,
    /// Which TCP runs the scripts: `ember` (in-process, virtual time) or `linux` (the
    /// kernel through a TUN device in a namespace; root only).
    #[arg(long, default_value = "ember", value_parser = ["ember", "linux"])]
    pub backend: String,
    /// Scripts run at once by the Linux backend (each in its own namespace; they mostly
    /// sleep, but timing tolerances are a few ms, so keep this small).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=32))]
    pub jobs: u16,
    /// Exit 1 if fewer than this many scripts pass.
    #[arg(long)]
    pub min_pass: Option<usize>,
    /// A file of `BACKEND N` lines (`#` comments): the minimum passes for this backend.
    #[arg(long)]
    pub ratchet: Option<PathBuf>,
    /// The JSON document of a Linux-backend run: report how many of the scripts Linux
    /// passes this run passes, leaving out those unsupported for a feature ember lacks.
    #[arg(long)]
    pub against: Option<PathBuf>,
    /// Only scripts whose path matches this glob (`*`, `?`), e.g. `tcp/shutdown/*`.
    #[arg(long)]
    pub only: Option<String>,
    /// Write the JSON document here (`-` for standard output).
    #[arg(long)]
    pub json: Option<String>,
}

/// Whether `text` matches `glob` (`*` any run, `?` one character).
fn glob_match(glob: &[u8], text: &[u8]) -> bool {
    // Iterative with one back-track point: linear in practice, no recursion.
    let (mut g, mut t) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if g < glob.len() && (glob[g] == b'?' || glob[g] == text[t]) {
            g += 1;
            t += 1;
        } else if g < glob.len() && glob[g] == b'*' {
            star = Some((g, t));
            g += 1;
        } else if let Some((sg, st)) = star {
            g = sg + 1;
            t = st + 1;
            star = Some((sg, st + 1));
        } else {
            return false;
        }
    }
    while g < glob.len() && glob[g] == b'*' {
        g += 1;
    }
    g == glob.len()
}

/// The scripts under `root`, sorted, as (path relative to root, full path).
fn find_scripts(root: &Path) -> std::io::Result<Vec<(String, PathBuf)>> {
    Ok(ember_conformance::corpus::scripts_under(root)?
        .into_iter()
        .map(|(rel, full)| (rel.to_string_lossy().to_string(), full))
        .collect())
}

#[derive(Default, Clone, Copy)]
struct Tally {
    pass: usize,
    fail: usize,
    unsupported: usize,
    error: usize,
}

/// Runs one script file with the chosen backend: (result, detail).
fn run_one(backend: &str, path: &Path, shell_dir: &Path) -> (&'static str, String) {
    let text = match std::fs::read_to_string(path) {
        Err(e) => return ("error", format!("cannot read: {e}")),
        Ok(t) => t,
    };
    let s = match script::parse(&text) {
        Err(e) => return ("error", format!("parse: {e}")),
        Ok(s) => s,
    };
    // A runner panic is an interpreter bug: reported as an error.
    let out = std::panic::catch_unwind(|| -> Outcome {
        if backend == "linux" {
            run_script_linux(&s, shell_dir, &LinuxOptions::default())
        } else {
            run_script(&s, &RunOptions::default())
        }
    });
    match out {
        Err(_) => ("error", "the runner panicked".to_string()),
        Ok(o) => match o.result {
            _ if std::env::var_os("EMBER_PD_TRACE").is_some_and(|v| {
                path.to_string_lossy()
                    .contains(v.to_string_lossy().as_ref())
            }) && !o.detail.is_empty() =>
            {
                eprintln!("== {}: {}\n{}", path.display(), o.result, o.detail);
                classify(o.result)
            }
            r => classify(r),
        },
    }
}

/// (result, detail) of a verdict.
fn classify(r: RunResult) -> (&'static str, String) {
    match r {
        RunResult::Pass => ("pass", String::new()),
        RunResult::Fail {
            line,
            expected,
            got,
        } => (
            "fail",
            format!("line {line}: expected {expected}, got {got}"),
        ),
        RunResult::Unsupported(r) => ("unsupported", r),
        RunResult::Error(r) => ("error", r),
    }
}

/// Features ember does not have, as they appear in the ember backend's unsupported
/// reasons: a script unsupported for one of these is left out of the comparison with
/// Linux. Anything else unsupported counts as not passed.
const MISSING_FEATURES: &[(&str, &str)] = &[
    ("Fast Open", "TCP Fast Open"),
    ("fastopen", "TCP Fast Open"),
    ("ZEROCOPY", "MSG_ZEROCOPY"),
    ("TIMESTAMPING", "SO_TIMESTAMPING"),
    ("MD5", "TCP_MD5SIG"),
    ("IPv6", "IPv6"),
    ("ECN", "ECN"),
    ("tcp_ecn", "ECN"),
    ("MSG_EOR", "MSG_EOR record boundaries"),
    ("NOTSENT_LOWAT", "TCP_NOTSENT_LOWAT"),
    ("notsent_lowat", "TCP_NOTSENT_LOWAT"),
    ("TCP_INQ", "TCP_INQ"),
    ("qdisc", "a queueing discipline on the device"),
    ("IP_MTU_DISCOVER", "path MTU discovery control"),
    ("mtu_probing", "packetization-layer PMTU probing"),
    ("IP_FREEBIND", "IP_FREEBIND"),
    ("splice", "splice"),
    ("sendfile", "sendfile"),
    ("open()", "files"),
    ("pipe()", "pipes"),
];

/// The comparison with a Linux-backend run (`--against`).
fn against(path: &Path, rows: &[(String, &'static str, String)]) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let doc: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let linux: BTreeMap<String, String> = doc["scripts"]
        .as_array()
        .ok_or_else(|| format!("{}: no scripts array", path.display()))?
        .iter()
        .filter_map(|s| {
            Some((
                s["path"].as_str()?.to_string(),
                s["result"].as_str()?.to_string(),
            ))
        })
        .collect();
    let mut out = String::new();
    let (mut denom, mut pass) = (0usize, 0usize);
    let mut left_out = Vec::new();
    let mut missed = Vec::new();
    for (p, r, d) in rows {
        if linux.get(p).map(String::as_str) != Some("pass") {
            continue;
        }
        if *r == "unsupported" {
            if let Some((_, f)) = MISSING_FEATURES.iter().find(|(k, _)| d.contains(k)) {
                left_out.push(format!("  {p}: {f} ({d})"));
                continue;
            }
        }
        denom += 1;
        if *r == "pass" {
            pass += 1;
        } else {
            missed.push(format!("  {p}: {r}: {d}"));
        }
    }
    let linux_pass = linux.values().filter(|r| *r == "pass").count();
    out.push_str(&format!(
        "against Linux ({}): Linux passes {linux_pass}; {} left out as unsupported for a feature ember lacks; \
         this run passes {pass} of the other {denom} ({})\n",
        path.display(),
        left_out.len(),
        if denom == 0 {
            "-".to_string()
        } else {
            format!("{:.1}%", 100.0 * pass as f64 / denom as f64)
        }
    ));
    if !left_out.is_empty() {
        out.push_str("left out:\n");
        out.push_str(&left_out.join("\n"));
        out.push('\n');
    }
    if !missed.is_empty() {
        out.push_str("Linux passes, this run does not:\n");
        out.push_str(&missed.join("\n"));
        out.push('\n');
    }
    Ok(out)
}

/// The minimum pass count for `backend` in a ratchet file (`BACKEND N` lines).
fn ratchet_min(path: &Path, backend: &str) -> Result<Option<usize>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    for l in text.lines() {
        let l = l.split('#').next().unwrap_or("").trim();
        let mut w = l.split_whitespace();
        if w.next() == Some(backend) {
            return w
                .next()
                .and_then(|n| n.parse().ok())
                .map(Some)
                .ok_or_else(|| format!("{}: bad line {l:?}", path.display()));
        }
    }
    Ok(None)
}

pub fn main(a: PacketdrillArgs) -> ExitCode {
    if a.backend == "linux" {
        if let Err(e) = ember_conformance::linux::available() {
            eprintln!("ember conformance: the Linux backend needs root: {e}");
            return ExitCode::from(2);
        }
    }
    let mut min_pass = a.min_pass;
    if let Some(f) = &a.ratchet {
        match ratchet_min(f, &a.backend) {
            Ok(Some(n)) => min_pass = Some(min_pass.map_or(n, |m| m.max(n))),
            Ok(None) => {}
            Err(e) => {
                eprintln!("ember conformance: --ratchet {e}");
                return ExitCode::from(2);
            }
        }
    }
    let net = a.corpus.join("gtests/net");
    let root = if net.is_dir() { net } else { a.corpus.clone() };
    let scripts = match find_scripts(&root) {
        Ok(s) if !s.is_empty() => s,
        Ok(_) => {
            eprintln!("ember conformance: no *.pkt under {}", root.display());
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("ember conformance: --corpus {}: {e}", a.corpus.display());
            return ExitCode::from(2);
        }
    };
    let scripts: Vec<(String, PathBuf)> = scripts
        .into_iter()
        .filter(|(rel, _)| {
            a.only
                .as_ref()
                .is_none_or(|g| glob_match(g.as_bytes(), rel.as_bytes()))
        })
        .collect();
    // The ember backend is deterministic and quick: one at a time. The Linux backend's
    // scripts mostly wait on the wall clock: --jobs of them at once.
    let jobs = if a.backend == "linux" {
        usize::from(a.jobs)
    } else {
        1
    };
    // The Linux backend runs the scripts' shell lines in a copy of the corpus whose
    // helper scripts are executable.
    let copy = if a.backend == "linux" {
        match CorpusCopy::new(&root) {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!("ember conformance: copying {}: {e}", root.display());
                return ExitCode::from(2);
            }
        }
    } else {
        None
    };
    let results: Vec<std::sync::Mutex<Option<(&'static str, String)>>> = scripts
        .iter()
        .map(|_| std::sync::Mutex::new(None))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((rel, path)) = scripts.get(i) else {
                    break;
                };
                let in_copy = copy.as_ref().map(|c| c.path().join(rel));
                let shell_dir = in_copy
                    .as_deref()
                    .unwrap_or(path)
                    .parent()
                    .unwrap_or(Path::new("."));
                let r = run_one(&a.backend, path, shell_dir);
                *results[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
            });
        }
    });
    let mut rows = Vec::new();
    let mut dirs: BTreeMap<String, Tally> = BTreeMap::new();
    let mut total = Tally::default();
    for ((rel, _), r) in scripts.into_iter().zip(results) {
        let (result, detail) = r
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .unwrap_or(("error", "not run".to_string()));
        let dir = Path::new(&rel)
            .parent()
            .map(|p| p.to_string_lossy().to_string())
            .unwrap_or_default();
        let t = dirs.entry(dir).or_default();
        for tally in [t, &mut total] {
            match result {
                "pass" => tally.pass += 1,
                "fail" => tally.fail += 1,
                "unsupported" => tally.unsupported += 1,
                _ => tally.error += 1,
            }
        }
        rows.push((rel, result, detail));
    }
    let n = rows.len();
    if let Some(dest) = &a.json {
        let doc = serde_json::json!({
            "backend": a.backend,
            "total": n,
            "pass": total.pass,
            "fail": total.fail,
            "unsupported": total.unsupported,
            "error": total.error,
            "scripts": rows.iter().map(|(p, r, d)| serde_json::json!({"path": p, "result": r, "detail": d})).collect::<Vec<_>>(),
        });
        let text = serde_json::to_string_pretty(&doc).unwrap_or_default();
        if dest == "-" {
            println!("{text}");
        } else if let Err(e) = std::fs::write(dest, text + "\n") {
            eprintln!("ember conformance: --json {dest}: {e}");
            return ExitCode::FAILURE;
        }
    }
    // The table goes to stdout unless the JSON does.
    let table_to_stderr = a.json.as_deref() == Some("-");
    let mut out = String::new();
    let pct = |p: usize, d: usize| {
        if d == 0 {
            "-".to_string()
        } else {
            format!("{:.1}%", 100.0 * p as f64 / d as f64)
        }
    };
    let row = |name: &str, t: &Tally| {
        let all = t.pass + t.fail + t.unsupported + t.error;
        format!(
            "{:<34} {:>5} {:>5} {:>5} {:>5} {:>8} {:>8}\n",
            name,
            t.pass,
            t.fail,
            t.unsupported,
            t.error,
            pct(t.pass, t.pass + t.fail),
            pct(t.pass, all)
        )
    };
    out.push_str(&format!(
        "{:<34} {:>5} {:>5} {:>5} {:>5} {:>8} {:>8}\n",
        format!("directory (backend {})", a.backend),
        "pass",
        "fail",
        "unsup",
        "error",
        "p/(p+f)",
        "p/total"
    ));
    for (d, t) in &dirs {
        out.push_str(&row(d, t));
    }
    out.push_str(&row(&format!("total ({n} scripts)"), &total));
    if table_to_stderr {
        eprint!("{out}");
    } else {
        print!("{out}");
    }
    if let Some(f) = &a.against {
        match against(f, &rows) {
            Ok(text) => {
                if table_to_stderr {
                    eprint!("{text}");
                } else {
                    print!("{text}");
                }
            }
            Err(e) => {
                eprintln!("ember conformance: --against {e}");
                return ExitCode::from(2);
            }
        }
    }
    if let Some(m) = min_pass {
        if total.pass < m {
            eprintln!(
                "ember conformance: {} scripts pass on the {} backend, fewer than the {m} recorded",
                total.pass, a.backend
            );
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs() {
        let m = |g: &str, t: &str| glob_match(g.as_bytes(), t.as_bytes());
        assert!(m("tcp/shutdown/*", "tcp/shutdown/shutdown-rd.pkt"));
        assert!(m("*", ""));
        assert!(m("*.pkt", "a/b/c.pkt"));
        assert!(m("tcp/*/fr-?pkt*", "tcp/fast_retransmit/fr-4pkt-sack.pkt"));
        assert!(!m("tcp/shutdown/*", "tcp/close/close.pkt"));
        assert!(!m("a?", "a"));
        assert!(!m("", "a"));
        // Many stars against a long text: linear back-tracking, no blow-up.
        let long = "a".repeat(5000);
        assert!(!m(&"*a".repeat(50).to_string().replace("a", "b"), &long));
    }
}
