//! Running cases round by round, and reporting them.
//!
//! A bench is a list of [`Case`]s (a variant, and a mode where the bench has several) and
//! a closure that measures one case once. [`alternate`] runs them A B C A B C … for the
//! requested rounds, so that slow drifts of a shared machine (another tenant, frequency
//! changes) hit every variant alike. A [`Report`] then gives, for each case, the median
//! over rounds of each metric, and for each pair (ember case, baseline case) the median of
//! the per-round ratios: the figure the spec's targets are written against. Reports
//! render as the spec's JSON object and as a table for people.

use crate::env::Variant;
use crate::measure::median;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Map, Value};
use std::fmt::Write as _;
use std::io;

/// Named figures of one measurement, in report order.
pub type Metrics = Vec<(&'static str, f64)>;

/// What is measured: a variant, and the bench's mode or setting if it has several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    pub variant: Variant,
    pub mode: Option<String>,
}

impl Case {
    /// A case without a mode.
    pub fn plain(variant: Variant) -> Case {
        Case {
            variant,
            mode: None,
        }
    }

    /// A case with a mode.
    pub fn mode(variant: Variant, mode: impl Into<String>) -> Case {
        Case {
            variant,
            mode: Some(mode.into()),
        }
    }

    /// `variant` or `variant[mode]`.
    pub fn label(&self) -> String {
        match &self.mode {
            Some(m) => format!("{}[{m}]", self.variant.name()),
            None => self.variant.name().to_string(),
        }
    }
}

/// The result of measuring a case once.
#[derive(Default)]
pub struct Outcome {
    pub metrics: Metrics,
    /// Per-operation latencies (for distributions in the plot).
    pub latency: Option<Histogram<u64>>,
    /// A time series `(seconds, value)` (for plots over time).
    pub series: Vec<(f64, f64)>,
}

/// Every round of one case.
pub struct CaseRun {
    pub case: Case,
    /// The metrics of each completed round.
    pub rounds: Vec<Metrics>,
    /// Latencies of all rounds merged.
    pub latency: Option<Histogram<u64>>,
    /// The last round's time series.
    pub series: Vec<(f64, f64)>,
    /// The error that stopped this case, if one did.
    pub error: Option<String>,
    /// Why this case was not run, if it was not.
    pub skipped: Option<String>,
}

impl CaseRun {
    /// The median over rounds of one metric.
    pub fn value(&self, metric: &str) -> Option<f64> {
        let v: Vec<f64> = self
            .rounds
            .iter()
            .filter_map(|r| r.iter().find(|(n, _)| *n == metric).map(|(_, x)| *x))
            .collect();
        (!v.is_empty()).then(|| median(&v))
    }

    /// The metric names, in the order the first round gave them.
    pub fn metric_names(&self) -> Vec<&'static str> {
        self.rounds
            .first()
            .map(|r| r.iter().map(|(n, _)| *n).collect())
            .unwrap_or_default()
    }
}

/// A target of the spec, checked against a report.
#[derive(Debug, Clone)]
pub struct Check {
    /// The target as the spec words it.
    pub target: String,
    /// Met, not met, or not measurable in this run (a variant missing or failed).
    pub met: Option<bool>,
    /// The figure it was judged on.
    pub detail: String,
}

/// One bench's results.
pub struct Report {
    pub bench: &'static str,
    pub params: Map<String, Value>,
    pub runs: Vec<CaseRun>,
    pub checks: Vec<Check>,
    /// Plain remarks printed under the table and kept in the JSON.
    pub notes: Vec<String>,
}

/// Shows progress on the terminal (nothing when stderr is not a terminal or when off).
pub fn progress(bench: &str, total: u64, on: bool) -> ProgressBar {
    let pb = if on {
        ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    pb.set_style(
        ProgressStyle::with_template("{prefix:>12} [{bar:30}] {pos}/{len} {msg} ({elapsed})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_prefix(bench.to_string());
    pb
}

/// Runs every case once per round, alternating them within each round. A case whose
/// variant is unavailable, or whose measurement returns `ErrorKind::Unsupported`, is
/// recorded as skipped; one whose measurement fails otherwise stops there (its completed
/// rounds are kept) and records the error.
pub fn alternate(
    bench: &str,
    cases: Vec<Case>,
    rounds: usize,
    show_progress: bool,
    mut measure: impl FnMut(&Case, usize) -> io::Result<Outcome>,
) -> Vec<CaseRun> {
    let mut runs: Vec<CaseRun> = cases
        .into_iter()
        .map(|case| CaseRun {
            skipped: case.variant.unavailable(),
            case,
            rounds: Vec::new(),
            latency: None,
            series: Vec::new(),
            error: None,
        })
        .collect();
    let active = runs.iter().filter(|r| r.skipped.is_none()).count();
    let pb = progress(bench, (active * rounds) as u64, show_progress);
    for round in 0..rounds {
        for run in runs.iter_mut() {
            if run.skipped.is_some() || run.error.is_some() {
                continue;
            }
            pb.set_message(format!("{} round {}/{rounds}", run.case.label(), round + 1));
            match measure(&run.case, round) {
                Ok(o) => {
                    run.rounds.push(o.metrics);
                    if let Some(h) = o.latency {
                        match &mut run.latency {
                            Some(acc) => {
                                let _ = acc.add(&h);
                            }
                            None => run.latency = Some(h),
                        }
                    }
                    if !o.series.is_empty() {
                        run.series = o.series;
                    }
                }
                // A workload the variant has no equivalent of is reported as skipped.
                Err(e) if e.kind() == io::ErrorKind::Unsupported => {
                    run.skipped = Some(e.to_string())
                }
                Err(e) => run.error = Some(e.to_string()),
            }
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    runs
}

/// Baselines ratios are taken against.
fn is_baseline(v: Variant) -> bool {
    !v.is_ember()
}

/// The host the report was made on.
pub fn host() -> Value {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    json!({"cpus": cpus, "kernel": kernel, "rustc": env!("EMBER_RUSTC_VERSION")})
}

impl Report {
    /// A report with no checks or notes yet.
    pub fn new(bench: &'static str, params: Map<String, Value>, runs: Vec<CaseRun>) -> Report {
        Report {
            bench,
            params,
            runs,
            checks: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// The run of a case by label (`variant` or `variant[mode]`).
    pub fn run(&self, label: &str) -> Option<&CaseRun> {
        self.runs.iter().find(|r| r.case.label() == label)
    }

    /// The median of one metric of one case.
    pub fn value(&self, label: &str, metric: &str) -> Option<f64> {
        self.run(label)?.value(metric)
    }

    /// The median over rounds of `a`'s metric divided by `b`'s in the same round.
    pub fn ratio(&self, a: &str, b: &str, metric: &str) -> Option<f64> {
        let (a, b) = (self.run(a)?, self.run(b)?);
        let get = |r: &Metrics| r.iter().find(|(n, _)| *n == metric).map(|(_, x)| *x);
        let v: Vec<f64> = a
            .rounds
            .iter()
            .zip(&b.rounds)
            .filter_map(|(x, y)| match (get(x), get(y)) {
                (Some(x), Some(y)) if y != 0.0 && x.is_finite() && y.is_finite() => Some(x / y),
                _ => None,
            })
            .collect();
        (!v.is_empty()).then(|| median(&v))
    }

    /// Adds a check "`a`'s `metric` ≤ (or ≥) `factor` × `b`'s", judged on the median
    /// per-round ratio.
    pub fn check_ratio(&mut self, a: &str, b: &str, metric: &str, at_most: bool, factor: f64) {
        let rel = if at_most { "≤" } else { "≥" };
        let target = format!("{a} {metric} {rel} {factor} × {b}");
        let (met, detail) = match self.ratio(a, b, metric) {
            Some(r) => (
                Some(if at_most { r <= factor } else { r >= factor }),
                format!("ratio {}", fmt_num(r)),
            ),
            None => (None, "not measured in this run".to_string()),
        };
        self.checks.push(Check {
            target,
            met,
            detail,
        });
    }

    /// Adds a check computed by the bench.
    pub fn check(
        &mut self,
        target: impl Into<String>,
        met: Option<bool>,
        detail: impl Into<String>,
    ) {
        self.checks.push(Check {
            target: target.into(),
            met,
            detail: detail.into(),
        });
    }

    /// Every (ember case, baseline case) pair with the same mode (or a baseline without
    /// one), and the metrics both have.
    fn ratio_pairs(&self) -> Vec<(String, String, Vec<&'static str>)> {
        let mut out = Vec::new();
        for a in self
            .runs
            .iter()
            .filter(|r| r.case.variant.is_ember() && !r.rounds.is_empty())
        {
            for b in self
                .runs
                .iter()
                .filter(|r| is_baseline(r.case.variant) && !r.rounds.is_empty())
            {
                if b.case.mode.is_some() && b.case.mode != a.case.mode {
                    continue;
                }
                let bn = b.metric_names();
                let common: Vec<&'static str> = a
                    .metric_names()
                    .into_iter()
                    .filter(|m| bn.contains(m))
                    .collect();
                if !common.is_empty() {
                    out.push((a.case.label(), b.case.label(), common));
                }
            }
        }
        out
    }

    /// The spec's JSON object.
    pub fn to_json(&self) -> Value {
        let results: Vec<Value> = self
            .runs
            .iter()
            .map(|r| {
                let mut o = Map::new();
                o.insert("variant".into(), r.case.variant.name().into());
                if let Some(m) = &r.case.mode {
                    o.insert("mode".into(), m.clone().into());
                }
                for name in r.metric_names() {
                    if let Some(v) = r.value(name) {
                        o.insert(name.into(), num(v));
                    }
                }
                if !r.rounds.is_empty() {
                    o.insert("rounds".into(), r.rounds.len().into());
                }
                if let Some(e) = &r.error {
                    o.insert("error".into(), e.clone().into());
                }
                if let Some(s) = &r.skipped {
                    o.insert("skipped".into(), s.clone().into());
                }
                Value::Object(o)
            })
            .collect();
        let mut ratios = Map::new();
        for (a, b, metrics) in self.ratio_pairs() {
            let mut m = Map::new();
            for metric in metrics {
                if let Some(r) = self.ratio(&a, &b, metric) {
                    m.insert(metric.into(), num(r));
                }
            }
            ratios.insert(format!("{a}/{b}"), Value::Object(m));
        }
        let checks: Vec<Value> = self
            .checks
            .iter()
            .map(|c| json!({"target": c.target, "met": c.met, "detail": c.detail}))
            .collect();
        json!({
            "bench": self.bench,
            "ember_version": env!("CARGO_PKG_VERSION"),
            "host": host(),
            "params": Value::Object(self.params.clone()),
            "results": results,
            "ratios": Value::Object(ratios),
            "targets": checks,
            "notes": self.notes,
        })
    }

    /// The report as text: a table of medians, the ratios to the baselines, the targets.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let params: Vec<String> = self
            .params
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(s, "== {} ({})", self.bench, params.join(", "));
        let mut cols: Vec<&'static str> = Vec::new();
        for r in &self.runs {
            for n in r.metric_names() {
                if !cols.contains(&n) {
                    cols.push(n);
                }
            }
        }
        let label_w = self
            .runs
            .iter()
            .map(|r| r.case.label().len())
            .max()
            .unwrap_or(7)
            .max(7);
        let col_w: Vec<usize> = cols.iter().map(|c| c.len().max(9)).collect();
        let _ = write!(s, "{:<label_w$}", "variant");
        for (c, w) in cols.iter().zip(&col_w) {
            let _ = write!(s, "  {c:>w$}");
        }
        s.push('\n');
        for r in &self.runs {
            let _ = write!(s, "{:<label_w$}", r.case.label());
            if let Some(why) = &r.skipped {
                let _ = writeln!(s, "  skipped: {why}");
                continue;
            }
            for (c, w) in cols.iter().zip(&col_w) {
                let v = r.value(c).map_or("-".to_string(), fmt_num);
                let _ = write!(s, "  {v:>w$}");
            }
            if let Some(e) = &r.error {
                let _ = write!(s, "  error: {e}");
            }
            s.push('\n');
        }
        let pairs = self.ratio_pairs();
        if !pairs.is_empty() {
            let _ = writeln!(s, "ratios (median of per-round ratios):");
            for (a, b, metrics) in pairs {
                let _ = write!(s, "  {a} / {b}:");
                for m in metrics {
                    if let Some(r) = self.ratio(&a, &b, m) {
                        let _ = write!(s, "  {m} {}", fmt_num(r));
                    }
                }
                s.push('\n');
            }
        }
        if !self.checks.is_empty() {
            let _ = writeln!(s, "targets:");
            for c in &self.checks {
                let mark = match c.met {
                    Some(true) => "met    ",
                    Some(false) => "NOT MET",
                    None => "n/a    ",
                };
                let _ = writeln!(s, "  [{mark}] {} ({})", c.target, c.detail);
            }
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        s
    }
}

/// A JSON number rounded to 4 significant digits, but never coarser than a whole number
/// (counts and byte sizes stay exact); NaN and infinities become null.
fn num(x: f64) -> Value {
    if !x.is_finite() {
        return Value::Null;
    }
    let r = if x == 0.0 {
        0.0
    } else if x.abs() >= 1000.0 {
        x.round()
    } else {
        let mag = x.abs().log10().floor() as i32;
        let scale = 10f64.powi(3 - mag);
        (x * scale).round() / scale
    };
    json!(r)
}

/// A number for a table cell: integers above 1000, otherwise three or four significant
/// digits.
pub fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let a = x.abs();
    if a >= 1000.0 {
        format!("{x:.0}")
    } else if a >= 100.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else if a == 0.0 {
        "0".into()
    } else {
        format!("{x:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_runs() -> Vec<CaseRun> {
        let cases = vec![
            Case::plain(Variant::EmberFused),
            Case::plain(Variant::KernelTcp),
            Case::plain(Variant::EmberTap),
            Case::plain(Variant::KernelUnix),
        ];
        alternate("t", cases, 3, false, |c, r| {
            let base = match c.variant {
                Variant::EmberFused => 2.0,
                _ => 10.0,
            };
            if c.variant == Variant::KernelTcp && r == 2 {
                return Err(io::Error::other("boom"));
            }
            if c.variant == Variant::KernelUnix {
                return Err(io::Error::new(io::ErrorKind::Unsupported, "no such call"));
            }
            // Skipped as without root, whatever this process may do.
            if c.variant == Variant::EmberTap {
                return Err(io::Error::new(io::ErrorKind::Unsupported, "needs root"));
            }
            Ok(Outcome {
                metrics: vec![("p50_us", base + r as f64), ("ops_per_s", 1e6 / base)],
                ..Outcome::default()
            })
        })
    }

    #[test]
    fn alternate_collects_rounds_skips_and_errors() {
        let runs = fake_runs();
        assert_eq!(runs[0].rounds.len(), 3);
        assert_eq!(runs[1].rounds.len(), 2);
        assert_eq!(runs[1].error.as_deref(), Some("boom"));
        assert!(runs[2].skipped.is_some());
        assert_eq!(runs[3].skipped.as_deref(), Some("no such call"));
        assert!(runs[3].rounds.is_empty() && runs[3].error.is_none());
        assert_eq!(runs[0].value("p50_us"), Some(3.0));
        assert_eq!(runs[1].value("p50_us"), Some(10.5));
    }

    #[test]
    fn ratios_pair_rounds_and_json_has_the_spec_shape() {
        let mut rep = Report::new("rr", Map::new(), fake_runs());
        // Rounds 0 and 1 pair: 2/10 and 3/11.
        let r = rep.ratio("ember-fused", "kernel-tcp", "p50_us").unwrap();
        assert!((r - (0.2 + 3.0 / 11.0) / 2.0).abs() < 1e-9);
        rep.check_ratio("ember-fused", "kernel-tcp", "p50_us", true, 0.5);
        rep.check_ratio("ember-fused", "kernel-unix", "p50_us", true, 0.5);
        assert_eq!(rep.checks[0].met, Some(true));
        assert_eq!(rep.checks[1].met, None);
        let j = rep.to_json();
        assert_eq!(j["bench"], "rr");
        assert_eq!(j["results"].as_array().unwrap().len(), 4);
        assert_eq!(j["results"][1]["error"], "boom");
        assert!(j["results"][2]["skipped"].is_string());
        assert!(j["ratios"]["ember-fused/kernel-tcp"]["ops_per_s"].is_number());
        assert!(j["host"]["cpus"].as_u64().unwrap() >= 1);
        let text = rep.render();
        assert!(text.contains("ember-fused / kernel-tcp"));
        assert!(text.contains("skipped"));
        assert!(text.contains("[met    ]"));
    }

    #[test]
    fn numbers_are_rounded_for_json_and_tables() {
        assert_eq!(num(1234.5678), json!(1235.0));
        assert_eq!(num(1048576.0), json!(1048576.0));
        assert_eq!(num(0.0123456), json!(0.01235));
        assert_eq!(num(f64::NAN), Value::Null);
        assert_eq!(fmt_num(12345.6), "12346");
        assert_eq!(fmt_num(0.01234), "0.012");
        assert_eq!(fmt_num(5.0), "5.00");
    }
}
