//! `ember conformance packetdrill`: runs packetdrill scripts against ember and scores them.
//!
//! Each `*.pkt` under `--corpus DIR/gtests/net` (or under `DIR` itself when it has no
//! `gtests/net`) is parsed and run by `ember_conformance::run` (ember's sans-IO host on a
//! virtual clock) and ends as exactly one of pass, fail (with the first mismatch: line,
//! expected, got), unsupported (with the reason) or error (the script could not be parsed
//! or run). The output is a table per directory, or with `--json -` the JSON
//! document. `--only GLOB` keeps the scripts whose path (relative to the corpus's
//! `gtests/net`) matches a glob with `*` and `?`. The Linux backend (the same script
//! against the kernel through a TUN device) is not built yet: `--backend linux` says so
//! and exits 2.

use clap::Args;
use ember_conformance::run::{run_script, RunOptions, RunResult};
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
    /// Which TCP runs the scripts: `ember` (built) or `linux` (not yet).
    #[arg(long, default_value = "ember")]
    pub backend: String,
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

pub fn main(a: PacketdrillArgs) -> ExitCode {
    if a.backend != "ember" {
        eprintln!(
            "ember conformance: backend {:?}: only `ember` is built; the Linux backend (TUN in a namespace) is not yet",
            a.backend
        );
        return ExitCode::from(2);
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
    let opts = RunOptions::default();
    let mut rows = Vec::new();
    let mut dirs: BTreeMap<String, Tally> = BTreeMap::new();
    let mut total = Tally::default();
    for (rel, path) in scripts {
        if let Some(g) = &a.only {
            if !glob_match(g.as_bytes(), rel.as_bytes()) {
                continue;
            }
        }
        let (result, detail) = match std::fs::read_to_string(&path) {
            Err(e) => ("error", format!("cannot read: {e}")),
            Ok(text) => match script::parse(&text) {
                Err(e) => ("error", format!("parse: {e}")),
                Ok(s) => {
                    // A runner panic is an interpreter bug: reported as an error.
                    let out = std::panic::catch_unwind(|| run_script(&s, &opts));
                    match out {
                        Err(_) => ("error", "the runner panicked".to_string()),
                        Ok(o) => match o.result {
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
                        },
                    }
                }
            },
        };
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
            "backend": "ember",
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
    out.push_str(&format!(
        "{:<34} {:>5} {:>5} {:>5} {:>5}\n",
        "directory (backend ember)", "pass", "fail", "unsup", "error"
    ));
    for (d, t) in &dirs {
        out.push_str(&format!(
            "{:<34} {:>5} {:>5} {:>5} {:>5}\n",
            d, t.pass, t.fail, t.unsupported, t.error
        ));
    }
    let rate = |p: usize, f: usize| {
        if p + f == 0 {
            "-".to_string()
        } else {
            format!("{:.1} %", 100.0 * p as f64 / (p + f) as f64)
        }
    };
    out.push_str(&format!(
        "{:<34} {:>5} {:>5} {:>5} {:>5}\npass / (pass + fail): {}; pass / total: {}\n",
        format!("total ({n} scripts)"),
        total.pass,
        total.fail,
        total.unsupported,
        total.error,
        rate(total.pass, total.fail),
        if n == 0 {
            "-".to_string()
        } else {
            format!("{:.1} %", 100.0 * total.pass as f64 / n as f64)
        }
    ));
    if table_to_stderr {
        eprint!("{out}");
    } else {
        print!("{out}");
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
