//! The `--plot` SVG: one panel per report, stacked vertically. Each panel has the bench's
//! name and what it measures, its parameters, a chart or a row of charts chosen for what
//! the bench measures, a legend, and under it the spec's targets (met or not), the cases
//! not drawn (skipped, or failed: their figures are partial) and the report's notes.
//!
//! - `rr`, `crr`: the latency distribution of each case (every round's histogram merged):
//!   a CDF on a log time axis beside the tail (latency by percentile up to p99.99 or as
//!   far as the samples reach), p50 and p99 marked on every curve; the legend gives the
//!   table's p50, p99, rate and CPU per operation.
//! - `stream`: throughput bars (median of rounds, the min–max over rounds as a whisker,
//!   the value printed on each bar) beside the CPU time per GB.
//! - `starvation`: the ping RTT over the run (log ms axis; the bulk phase shaded when the
//!   report's params say how long the idle phase was, as `idle_s`) beside the p99 of each
//!   probe in each phase.
//! - `nagle`: the time per message of every variant × mode as grouped bars on a log axis,
//!   above the segments per message.
//! - any other bench: one small bar chart per metric, a bar per case.
//!
//! ember's variants are drawn in warm colours, the kernel's in blues and the physical
//! limits in greys; several modes of one variant are shades of its colour. Text is laid
//! out with an estimate of the width of DejaVu Sans (what `sans-serif` is on Linux), so
//! that labels do not run into each other.

use crate::env::Variant;
use crate::report::{CaseRun, Report};
use hdrhistogram::Histogram;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde_json::Value;
use std::io;
use std::ops::Range;

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<Coord, Coord>>;

/// Width of the whole figure, in pixels.
const WIDTH: i32 = 1200;
/// Left and right padding of every panel.
const PAD: i32 = 24;
/// Title and parameter lines of a panel.
const HEADER_H: i32 = 64;
/// One line of the footer (targets, cases not shown, notes).
const FOOT_LINE_H: i32 = 19;
/// Space after each panel.
const GAP: i32 = 22;
/// One row of a legend strip.
const STRIP_ROW_H: i32 = 26;
/// Margin around each chart.
const M: i32 = 10;
/// Width of the legend column beside the latency charts.
const LEGEND_W: i32 = 300;
/// Height of one case in that legend.
const ENTRY_H: i32 = 56;

const FONT: &str = "sans-serif";
// Font sizes as plotters takes them: its SVG backend writes `font-size` = size / 1.24.
const TITLE: f64 = 25.0;
const CAPTION: f64 = 19.0;
const LABEL: f64 = 17.0;
const TICK: f64 = 15.0;
const SMALL: f64 = 15.0;

const INK: RGBColor = RGBColor(34, 34, 34);
const MUTED: RGBColor = RGBColor(100, 100, 100);
const GRID: RGBColor = RGBColor(222, 222, 222);
const MINOR: RGBColor = RGBColor(242, 242, 242);
const GUIDE: RGBColor = RGBColor(150, 150, 150);
const GOOD: RGBColor = RGBColor(26, 127, 55);
const BAD: RGBColor = RGBColor(196, 30, 30);

fn err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// Draws every report into one SVG file at `path`, one panel per report, stacked.
pub fn write_svg(reports: &[Report], path: &str) -> io::Result<()> {
    let plans: Vec<Plan> = reports.iter().map(plan).collect();
    let total: i32 = plans.iter().map(Plan::height).sum::<i32>().max(80);
    let root = SVGBackend::new(path, (WIDTH as u32, total as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    if reports.is_empty() {
        root.draw_text("no reports", &font(LABEL), (PAD, 30))
            .map_err(err)?;
    }
    let mut rest = root.clone();
    for (i, (r, p)) in reports.iter().zip(&plans).enumerate() {
        let (panel, below) = rest.split_vertically(p.height());
        draw_report(r, p, &panel, i)?;
        rest = below;
    }
    root.present().map_err(err)
}

// ---------------------------------------------------------------------------------------
// Text, numbers and colours.

fn font(size: f64) -> TextStyle<'static> {
    (FONT, size).into_font().color(&INK)
}

fn font_c(size: f64, c: RGBColor) -> TextStyle<'static> {
    (FONT, size).into_font().color(&c)
}

fn bold(size: f64) -> TextStyle<'static> {
    (FONT, size, FontStyle::Bold).into_font().color(&INK)
}

fn anchored(s: TextStyle<'static>, h: HPos, v: VPos) -> TextStyle<'static> {
    s.pos(Pos::new(h, v))
}

/// The width of a character in DejaVu Sans, in ems.
fn char_em(c: char) -> f64 {
    match c {
        'i' | 'l' | 'j' | '.' | ',' | ':' | ';' | '\'' | '|' | '!' => 0.29,
        ' ' => 0.32,
        '-' | '(' | ')' | '[' | ']' | 'f' | 't' | 'I' => 0.40,
        'r' => 0.42,
        's' | 'c' | 'z' | 'y' | 'v' | 'x' | 'k' | 'J' => 0.56,
        'm' | '%' | 'W' => 0.98,
        'w' | 'M' => 0.86,
        '—' | '–' | '·' => 0.55,
        'A'..='Z' => 0.72,
        '0'..='9' => 0.64,
        _ => 0.62,
    }
}

/// The estimated width in pixels of `s` drawn at plotters' font `size`.
fn text_w(s: &str, size: f64) -> i32 {
    let em = size / 1.24;
    (s.chars().map(char_em).sum::<f64>() * em).ceil() as i32
}

/// Greedy word wrap of `s` into lines at most `max_px` wide.
fn wrap(s: &str, size: f64, max_px: i32) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    for word in s.split_whitespace() {
        let cand = if cur.is_empty() {
            word.to_string()
        } else {
            format!("{cur} {word}")
        };
        if text_w(&cand, size) > max_px && !cur.is_empty() {
            lines.push(std::mem::take(&mut cur));
            cur = word.to_string();
        } else {
            cur = cand;
        }
    }
    if !cur.is_empty() {
        lines.push(cur);
    }
    lines
}

/// Three significant digits, without trailing zeros after the point.
fn sig(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return if x == 0.0 { "0".into() } else { "-".into() };
    }
    let mag = x.abs().log10().floor() as i32;
    let dec = (2 - mag).max(0) as usize;
    let s = format!("{x:.dec$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A number with k and M for thousands and millions.
fn num(x: f64) -> String {
    let a = x.abs();
    if a >= 1e6 {
        format!("{}M", sig(x / 1e6))
    } else if a >= 1e4 {
        format!("{}k", sig(x / 1e3))
    } else {
        sig(x)
    }
}

/// A duration given in µs, in the unit that suits it.
fn dur_us(us: f64) -> String {
    let a = us.abs();
    if a >= 1e6 {
        format!("{} s", sig(us / 1e6))
    } else if a >= 1e3 {
        format!("{} ms", sig(us / 1e3))
    } else if a == 0.0 {
        "0".into()
    } else if a >= 1.0 {
        format!("{} µs", sig(us))
    } else {
        format!("{} ns", sig(us * 1e3))
    }
}

/// A duration given in ms, in the unit that suits it.
fn dur_ms(ms: f64) -> String {
    dur_us(ms * 1e3)
}

/// The colour of a variant: ember's warm, the kernel's blue, the limits grey.
fn variant_colour(v: Variant) -> RGBColor {
    match v {
        Variant::EmberFused => RGBColor(214, 48, 30),
        Variant::EmberLoopback => RGBColor(240, 128, 20),
        Variant::EmberWire => RGBColor(190, 145, 0),
        Variant::EmberTap => RGBColor(135, 45, 10),
        Variant::KernelTcp => RGBColor(31, 95, 170),
        Variant::KernelUnix => RGBColor(95, 165, 210),
        Variant::LimitSpin => RGBColor(115, 115, 115),
        Variant::LimitMemcpy => RGBColor(165, 165, 165),
        Variant::EmberXproc => RGBColor(160, 20, 90),
        Variant::EmberXprocOff => RGBColor(200, 110, 160),
    }
}

/// `c` mixed with white (`t` = 0: `c`, 1: white).
fn lighten(c: RGBColor, t: f64) -> RGBColor {
    let f = |x: u8| (x as f64 + (255.0 - x as f64) * t).round() as u8;
    RGBColor(f(c.0), f(c.1), f(c.2))
}

// ---------------------------------------------------------------------------------------
// Which cases are drawn, and the plan of a panel.

/// A case that is drawn, with its colour.
struct Shown<'a> {
    run: &'a CaseRun,
    label: String,
    colour: RGBColor,
}

/// A case is drawn when it was run and every round completed: a failed case's figures
/// are partial, so it is listed under the panel instead.
fn drawn(c: &CaseRun) -> bool {
    c.skipped.is_none() && c.error.is_none() && !c.rounds.is_empty()
}

/// The drawn cases of a report, in report order; a variant with several modes gets one
/// shade of its colour per mode.
fn shown(r: &Report) -> Vec<Shown<'_>> {
    let ok: Vec<&CaseRun> = r.runs.iter().filter(|c| drawn(c)).collect();
    ok.iter()
        .map(|c| {
            let same: Vec<&&CaseRun> = ok
                .iter()
                .filter(|o| o.case.variant == c.case.variant)
                .collect();
            let rank = same.iter().position(|o| std::ptr::eq(**o, *c)).unwrap_or(0);
            let t = if same.len() > 1 {
                0.5 * rank as f64 / (same.len() - 1) as f64
            } else {
                0.0
            };
            Shown {
                run: c,
                label: c.case.label(),
                colour: lighten(variant_colour(c.case.variant), t),
            }
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Latency,
    Throughput,
    Starvation,
    Nagle,
    Generic,
    Empty,
}

struct Plan {
    kind: Kind,
    body_h: i32,
    footer: Vec<(String, RGBColor)>,
}

impl Plan {
    fn height(&self) -> i32 {
        HEADER_H + self.body_h + 8 + self.footer.len() as i32 * FOOT_LINE_H + GAP
    }
}

const INNER_W: i32 = WIDTH - 2 * PAD;

fn kind(r: &Report, s: &[Shown]) -> Kind {
    let has = |m: &str| s.iter().any(|c| c.run.value(m).is_some());
    if s.is_empty() {
        return Kind::Empty;
    }
    match r.bench {
        "rr" | "crr" if s.iter().any(|c| has_latency(c.run)) => Kind::Latency,
        "stream" if has("gbit_per_s") => Kind::Throughput,
        "starvation" if s.iter().any(|c| !c.run.series.is_empty()) || has("ping_bulk_p99_ms") => {
            Kind::Starvation
        }
        "nagle" if has("total_ms") => Kind::Nagle,
        _ => Kind::Generic,
    }
}

fn has_latency(c: &CaseRun) -> bool {
    c.latency.as_ref().is_some_and(|h| !h.is_empty())
}

fn plan(r: &Report) -> Plan {
    let s = shown(r);
    let kind = kind(r, &s);
    let body_h = match kind {
        Kind::Empty => 36,
        Kind::Latency => {
            let n = s.iter().filter(|c| has_latency(c.run)).count() as i32;
            (44 + n * ENTRY_H + 80).max(420)
        }
        Kind::Throughput => {
            let n = s
                .iter()
                .filter(|c| c.run.value("gbit_per_s").is_some())
                .count() as i32;
            strip_h(&throughput_legend(&s)) + hbar_h(n as f64, 32)
        }
        Kind::Starvation => {
            strip_h(&starvation_legend(&s)) + hbar_h(bar_rows(&phase_groups(&s)), 24).max(390)
        }
        Kind::Nagle => {
            let segs = s
                .iter()
                .any(|c| c.run.value("segments_per_message").is_some());
            strip_h(&nagle_legend(&s)) + 360 + if segs { 250 } else { 0 }
        }
        Kind::Generic => {
            let g = generic_grid(&s);
            strip_h(&bar_legend(&s)) + g.rows * g.chart_h
        }
    };
    Plan {
        kind,
        body_h,
        footer: footer_lines(r),
    }
}

/// What each bench measures, for the panel's title.
fn describe(bench: &str) -> &'static str {
    match bench {
        "rr" => "1-byte request, 1-byte response: round-trip latency",
        "crr" => "connect, 1-byte request and response, close: time per transaction",
        "stream" => "one connection, 64 KiB writes: throughput",
        "starvation" => "pings and UDP request/responses beside a bulk transfer (seed 003)",
        "nagle" => "15 two-byte writes and a 2-byte reply per message (seed 002)",
        "slowreader" => "a fused writer against an 8× slower reader (seed 000)",
        "lsofin" => "a 15 KB response then close: how long the FIN waits (seed 001)",
        "libmicro" => "socket call costs (seed 004, Table 5)",
        "scale" => "aggregate crr and rr over squeues and connections",
        _ => "",
    }
}

/// What one latency sample is, by bench.
fn op_name(bench: &str) -> &'static str {
    match bench {
        "rr" => "round trips",
        "crr" => "transactions",
        _ => "operations",
    }
}

fn param_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn footer_lines(r: &Report) -> Vec<(String, RGBColor)> {
    let mut raw: Vec<(String, RGBColor)> = Vec::new();
    for c in r.runs.iter().filter(|c| !drawn(c)) {
        let why = if let Some(s) = &c.skipped {
            format!("skipped: {s}")
        } else if let Some(e) = &c.error {
            format!("failed after {} completed round(s): {e}", c.rounds.len())
        } else {
            "no round completed".into()
        };
        raw.push((format!("not shown: {}: {why}", c.case.label()), MUTED));
    }
    for ch in &r.checks {
        let (mark, colour) = match ch.met {
            Some(true) => ("✓ target met:", GOOD),
            Some(false) => ("✗ target not met:", BAD),
            None => ("– target not measured:", MUTED),
        };
        raw.push((format!("{mark} {} ({})", ch.target, ch.detail), colour));
    }
    for n in &r.notes {
        raw.push((format!("note: {n}"), MUTED));
    }
    let mut out = Vec::new();
    for (text, colour) in raw {
        for (i, line) in wrap(&text, SMALL, INNER_W).into_iter().enumerate() {
            out.push((if i == 0 { line } else { format!("    {line}") }, colour));
        }
    }
    out
}

fn dims(a: &Area) -> (i32, i32) {
    let (w, h) = a.dim_in_pixel();
    (w as i32, h as i32)
}

fn draw_report(r: &Report, p: &Plan, area: &Area, index: usize) -> io::Result<()> {
    if index > 0 {
        area.draw(&PathElement::new(
            vec![(PAD, 2), (WIDTH - PAD, 2)],
            GRID.stroke_width(2),
        ))
        .map_err(err)?;
    }
    let d = describe(r.bench);
    let title = if d.is_empty() {
        r.bench.to_string()
    } else {
        format!("{}: {d}", r.bench)
    };
    area.draw_text(
        &title,
        &anchored(bold(TITLE), HPos::Left, VPos::Top),
        (PAD, 12),
    )
    .map_err(err)?;
    let params: Vec<String> = r
        .params
        .iter()
        .map(|(k, v)| format!("{k} {}", param_text(v)))
        .collect();
    let mut sub = params.join(" · ");
    while text_w(&sub, SMALL) > INNER_W && sub.chars().count() > 4 {
        sub = sub
            .chars()
            .take(sub.chars().count() - 4)
            .collect::<String>()
            + "…";
    }
    area.draw_text(
        &sub,
        &anchored(font_c(SMALL, MUTED), HPos::Left, VPos::Top),
        (PAD, 40),
    )
    .map_err(err)?;
    let (_, h) = dims(area);
    let body = area
        .clone()
        .shrink((PAD, HEADER_H), (INNER_W as u32, p.body_h as u32));
    let s = shown(r);
    match p.kind {
        Kind::Empty => {
            body.draw_text(
                "no case completed: see below",
                &anchored(font_c(LABEL, MUTED), HPos::Left, VPos::Top),
                (0, 8),
            )
            .map_err(err)?;
        }
        Kind::Latency => latency_body(&body, r, &s)?,
        Kind::Throughput => throughput_body(&body, &s)?,
        Kind::Starvation => starvation_body(&body, r, &s)?,
        Kind::Nagle => nagle_body(&body, &s)?,
        Kind::Generic => generic_body(&body, &s)?,
    }
    let mut y = HEADER_H + p.body_h + 8;
    for (line, colour) in &p.footer {
        area.draw_text(
            line,
            &anchored(font_c(SMALL, *colour), HPos::Left, VPos::Top),
            (PAD, y),
        )
        .map_err(err)?;
        y += FOOT_LINE_H;
    }
    debug_assert!(y <= h);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Axes and charts.

/// One axis: its bounds in data units, whether it is logarithmic, the labelled points
/// and the light grid. Log axes are drawn as linear axes over log10 of the values, so
/// that every chart has one coordinate type and chosen tick positions.
#[derive(Debug, Clone)]
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    ticks: Vec<f64>,
    minor: Vec<f64>,
}

/// A step of 1, 2, 2.5 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let raw = if raw > 0.0 && raw.is_finite() {
        raw
    } else {
        1.0
    };
    let mag = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * mag >= raw * (1.0 - 1e-9) {
            return m * mag;
        }
    }
    10.0 * mag
}

/// The power of ten to start a log bar axis at, so that the smallest bar has length.
fn decade_below(v: f64) -> f64 {
    let p = 10f64.powf(v.log10().floor());
    if v / p < 1.5 {
        p / 10.0
    } else {
        p
    }
}

impl Axis {
    fn fixed(lo: f64, hi: f64, ticks: Vec<f64>) -> Axis {
        Axis {
            lo,
            hi,
            log: false,
            ticks,
            minor: Vec::new(),
        }
    }

    /// A linear axis over `lo..hi` with at most `max_labels` round ticks.
    fn linear(lo: f64, hi: f64, max_labels: usize) -> Axis {
        let hi = if hi > lo { hi } else { lo + 1.0 };
        let step = nice_step((hi - lo) / max_labels.max(2) as f64);
        let first = (lo / step - 1e-9).ceil() as i64;
        let last = (hi / step + 1e-9).floor() as i64;
        let ticks = (first..=last).map(|k| k as f64 * step).collect();
        Axis::fixed(lo, hi, ticks)
    }

    /// A log axis over `lo..hi` (both > 0) labelled at every multiple, at 1-2-5, 1-3,
    /// every power of ten or every few powers, whichever is the finest that gives at most
    /// `max_labels` labels.
    fn log(lo: f64, hi: f64, max_labels: usize) -> Axis {
        let lo = if lo > 0.0 && lo.is_finite() { lo } else { 1e-3 };
        let hi = if hi > lo && hi.is_finite() {
            hi
        } else {
            lo * 10.0
        };
        let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
        let inside = |v: f64| v >= lo * (1.0 - 1e-9) && v <= hi * (1.0 + 1e-9);
        let points = |mults: &[f64], every: i32| -> Vec<f64> {
            let mut v = Vec::new();
            for e in a..=b {
                if (e - a) % every != 0 && mults.len() == 1 {
                    continue;
                }
                for m in mults {
                    let x = m * 10f64.powi(e);
                    if inside(x) {
                        v.push(x);
                    }
                }
            }
            v
        };
        let all: Vec<f64> = (1..=9).map(|m| m as f64).collect();
        let mut ticks = Vec::new();
        for mults in [&all[..], &[1.0, 2.0, 5.0], &[1.0, 3.0], &[1.0]] {
            ticks = points(mults, 1);
            if ticks.len() <= max_labels.max(2) && ticks.len() >= 2.min(max_labels) {
                break;
            }
        }
        let mut every = 2;
        while ticks.len() > max_labels.max(2) && every < 10 {
            ticks = points(&[1.0], every);
            every += 1;
        }
        let minor = if b - a <= 8 {
            points(&all, 1)
        } else {
            Vec::new()
        };
        Axis {
            lo,
            hi,
            log: true,
            ticks,
            minor,
        }
    }

    /// Data value to chart coordinate.
    fn t(&self, v: f64) -> f64 {
        if self.log {
            v.max(1e-300).log10()
        } else {
            v
        }
    }

    /// Chart coordinate to data value.
    fn value(&self, c: f64) -> f64 {
        if self.log {
            10f64.powf(c)
        } else {
            c
        }
    }

    fn coord(&self) -> Coord {
        Coord {
            lo: self.t(self.lo),
            hi: self.t(self.hi),
            ticks: self.ticks.iter().map(|v| self.t(*v)).collect(),
            minor: self.minor.iter().map(|v| self.t(*v)).collect(),
        }
    }
}

/// A linear chart coordinate with the labelled points and light grid chosen by an
/// [`Axis`] (plotters' own picks its points itself).
#[derive(Clone)]
struct Coord {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
    minor: Vec<f64>,
}

impl Ranged for Coord {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let f = if self.hi > self.lo {
            (v - self.lo) / (self.hi - self.lo)
        } else {
            0.5
        };
        let f = if f.is_finite() {
            f.clamp(-1.0, 2.0)
        } else {
            0.0
        };
        limit.0 + ((limit.1 - limit.0) as f64 * f).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            self.minor.clone()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

/// How many labels of about `label_px` fit along `len_px`.
fn fit(len_px: i32, label_px: i32) -> usize {
    (len_px / (label_px + 18)).max(2) as usize
}

/// The frame of one chart: caption, axes, tick labels and their descriptions.
struct Frame<'f> {
    caption: String,
    x: &'f Axis,
    y: &'f Axis,
    x_desc: String,
    y_desc: String,
    x_fmt: &'f dyn Fn(f64) -> String,
    y_fmt: &'f dyn Fn(f64) -> String,
    /// Pixels for the y tick labels.
    y_label_w: i32,
    x_grid: bool,
    y_grid: bool,
}

/// The pixels a frame takes left of its plotting area.
fn y_area(y_label_w: i32, y_desc: &str) -> i32 {
    y_label_w + if y_desc.is_empty() { 12 } else { 36 }
}

fn x_area(x_desc: &str) -> i32 {
    if x_desc.is_empty() {
        30
    } else {
        54
    }
}

/// The pixels above the plotting area (margin and caption).
fn top_area(caption: &str) -> i32 {
    M + if caption.is_empty() { 0 } else { 30 }
}

fn build<'a, 'b>(area: &'a Area<'b>, f: &Frame) -> io::Result<Chart<'a, 'b>> {
    let mut b = ChartBuilder::on(area);
    b.margin(M)
        .margin_right(M + 8)
        .x_label_area_size(x_area(&f.x_desc))
        .y_label_area_size(y_area(f.y_label_w, &f.y_desc));
    if !f.caption.is_empty() {
        b.caption(&f.caption, anchored(font(CAPTION), HPos::Center, VPos::Top));
    }
    let mut chart = b
        .build_cartesian_2d(f.x.coord(), f.y.coord())
        .map_err(err)?;
    let xf = |c: &f64| (f.x_fmt)(f.x.value(*c));
    let yf = |c: &f64| (f.y_fmt)(f.y.value(*c));
    let mut mesh = chart.configure_mesh();
    mesh.x_label_formatter(&xf)
        .y_label_formatter(&yf)
        .label_style(font(TICK))
        .axis_desc_style(font(LABEL))
        .bold_line_style(GRID)
        .light_line_style(MINOR)
        .axis_style(MUTED);
    if !f.x_desc.is_empty() {
        mesh.x_desc(f.x_desc.clone());
    }
    if !f.y_desc.is_empty() {
        mesh.y_desc(f.y_desc.clone());
    }
    if !f.x_grid {
        mesh.disable_x_mesh();
    }
    if !f.y_grid {
        mesh.disable_y_mesh();
    }
    mesh.draw().map_err(err)?;
    Ok(chart)
}

/// Text at a point of the chart, moved by `off` pixels.
fn label_at(
    chart: &mut Chart,
    at: (f64, f64),
    off: (i32, i32),
    text: &str,
    style: TextStyle<'static>,
) -> io::Result<()> {
    chart
        .draw_series(std::iter::once(
            EmptyElement::at(at) + Text::new(text.to_string(), off, style),
        ))
        .map_err(err)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Legend strips: a row (or rows) of swatches and labels above a chart.

#[derive(Clone, Copy)]
enum Swatch {
    Bar(RGBColor),
    Line(RGBColor),
    Whisker,
}

type Legend = Vec<(String, Swatch)>;

fn strip_entry_w(label: &str) -> i32 {
    30 + text_w(label, SMALL) + 22
}

fn strip_rows(entries: &Legend) -> Vec<Vec<usize>> {
    let mut rows: Vec<Vec<usize>> = Vec::new();
    let mut x = 0;
    for (i, (label, _)) in entries.iter().enumerate() {
        let w = strip_entry_w(label);
        if rows.is_empty() || (x + w > INNER_W && x > 0) {
            rows.push(Vec::new());
            x = 0;
        }
        rows.last_mut().expect("a row").push(i);
        x += w;
    }
    rows
}

fn strip_h(entries: &Legend) -> i32 {
    strip_rows(entries).len() as i32 * STRIP_ROW_H + 6
}

/// Draws a legend strip at the top of `area`; returns the area below it.
fn draw_strip<'b>(area: &Area<'b>, entries: &Legend) -> io::Result<Area<'b>> {
    let rows = strip_rows(entries);
    for (r, row) in rows.iter().enumerate() {
        let y = r as i32 * STRIP_ROW_H + STRIP_ROW_H / 2;
        let mut x = 4;
        for &i in row {
            let (label, sw) = &entries[i];
            match *sw {
                Swatch::Bar(c) => {
                    area.draw(&Rectangle::new([(x, y - 7), (x + 22, y + 7)], c.filled()))
                        .map_err(err)?;
                }
                Swatch::Line(c) => {
                    area.draw(&PathElement::new(
                        vec![(x, y), (x + 22, y)],
                        c.stroke_width(3),
                    ))
                    .map_err(err)?;
                }
                Swatch::Whisker => {
                    let s = INK.stroke_width(2);
                    area.draw(&PathElement::new(vec![(x, y), (x + 22, y)], s))
                        .map_err(err)?;
                    area.draw(&PathElement::new(vec![(x, y - 6), (x, y + 6)], s))
                        .map_err(err)?;
                    area.draw(&PathElement::new(vec![(x + 22, y - 6), (x + 22, y + 6)], s))
                        .map_err(err)?;
                }
            }
            area.draw_text(
                label,
                &anchored(font(SMALL), HPos::Left, VPos::Center),
                (x + 30, y),
            )
            .map_err(err)?;
            x += strip_entry_w(label);
        }
    }
    let h = strip_h(entries);
    let (_, below) = area.split_vertically(h);
    Ok(below)
}

/// Whether any metric of any drawn case differs between rounds (and so has a whisker).
fn any_spread(s: &[Shown]) -> bool {
    s.iter().any(|c| {
        c.run
            .metric_names()
            .iter()
            .any(|m| round_range(c.run, m).is_some())
    })
}

/// One entry per variant drawn (the colours of its modes are shades of the first), and
/// the whisker's meaning when there are whiskers.
fn bar_legend(s: &[Shown]) -> Legend {
    let whisker = any_spread(s);
    let mut seen: Vec<Variant> = Vec::new();
    let mut out = Vec::new();
    for c in s {
        let v = c.run.case.variant;
        if seen.contains(&v) {
            continue;
        }
        seen.push(v);
        let modes = s.iter().filter(|o| o.run.case.variant == v).count();
        let label = if modes > 1 {
            format!("{} (one shade per mode)", v.name())
        } else {
            c.label.clone()
        };
        out.push((label, Swatch::Bar(c.colour)));
    }
    if whisker {
        out.push(("min–max over rounds".into(), Swatch::Whisker));
    }
    out
}

// ---------------------------------------------------------------------------------------
// Horizontal bars: stream, the starvation phases and the generic panels.

struct Bar {
    label: String,
    value: f64,
    range: Option<(f64, f64)>,
    colour: RGBColor,
    /// A reference (a physical limit) whose bar may be cut short when it is far longer
    /// than the others, so that they stay readable; its value is still printed.
    cut_ok: bool,
}

/// Bars drawn together. A group without a name labels each bar with its own label; a
/// named group is labelled once, beside its bars, and set apart from the next group.
struct BarGroup {
    name: String,
    bars: Vec<Bar>,
}

fn one_group(bars: Vec<Bar>) -> Vec<BarGroup> {
    vec![BarGroup {
        name: String::new(),
        bars,
    }]
}

/// The min and max of a metric over a case's rounds, when there are several.
fn round_range(c: &CaseRun, metric: &str) -> Option<(f64, f64)> {
    let v: Vec<f64> = c
        .rounds
        .iter()
        .filter_map(|r| r.iter().find(|(n, _)| *n == metric).map(|(_, x)| *x))
        .filter(|x| x.is_finite())
        .collect();
    if v.len() < 2 {
        return None;
    }
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    // Rounds that all agree get no whisker.
    (hi - lo > hi.abs().max(lo.abs()) * 1e-6).then_some((lo, hi))
}

/// Space between two named groups, in rows.
const GROUP_GAP: f64 = 0.6;

/// The rows a set of groups takes, gaps included.
fn bar_rows(groups: &[BarGroup]) -> f64 {
    let n: usize = groups.iter().map(|g| g.bars.len()).sum();
    let gaps = groups.iter().filter(|g| !g.bars.is_empty()).count().max(1) - 1;
    n.max(1) as f64 + GROUP_GAP * gaps as f64
}

/// Height of a horizontal bar chart of `rows` rows.
fn hbar_h(rows: f64, row_h: i32) -> i32 {
    top_area("x") + (rows * row_h as f64).ceil() as i32 + x_area("x") + M + 6
}

struct HBar<'f> {
    caption: String,
    x_desc: String,
    /// The value printed beside each bar.
    fmt: &'f dyn Fn(f64) -> String,
    /// The axis's tick labels.
    tick: &'f dyn Fn(f64) -> String,
    log: bool,
}

fn hbar(area: &Area, groups: &[BarGroup], spec: &HBar) -> io::Result<()> {
    let ok = |b: &&Bar| b.value.is_finite() && (!spec.log || b.value > 0.0);
    let groups: Vec<(&str, Vec<&Bar>)> = groups
        .iter()
        .map(|g| {
            (
                g.name.as_str(),
                g.bars.iter().filter(ok).collect::<Vec<_>>(),
            )
        })
        .filter(|(_, b)| !b.is_empty())
        .collect();
    if groups.is_empty() {
        return Ok(());
    }
    // Rows from the top: each bar's centre, and the labels on the y axis.
    let n_bars: usize = groups.iter().map(|g| g.1.len()).sum();
    let rows = n_bars as f64 + GROUP_GAP * (groups.len() - 1) as f64;
    let mut pos = rows;
    let mut bars: Vec<(f64, &Bar)> = Vec::new();
    let mut labels: Vec<(f64, String)> = Vec::new();
    for (i, (name, list)) in groups.iter().enumerate() {
        if i > 0 {
            pos -= GROUP_GAP;
        }
        let top = pos;
        for b in list {
            bars.push((pos - 0.5, b));
            if name.is_empty() {
                labels.push((pos - 0.5, b.label.clone()));
            }
            pos -= 1.0;
        }
        if !name.is_empty() {
            labels.push(((top + pos) / 2.0, name.to_string()));
        }
    }
    let (w, _) = dims(area);
    let label_w = labels
        .iter()
        .map(|(_, l)| text_w(l, TICK))
        .max()
        .unwrap_or(40)
        + 6;
    let plot_w = (w - 2 * M - 8 - y_area(label_w, "")).max(80);
    let texts: Vec<String> = bars.iter().map(|(_, b)| (spec.fmt)(b.value)).collect();
    let end = |b: &Bar| b.range.map_or(b.value, |r| r.1.max(b.value));
    let x = if spec.log {
        let min = bars
            .iter()
            .flat_map(|(_, b)| [Some(b.value), b.range.map(|r| r.0)])
            .flatten()
            .filter(|v| *v > 0.0)
            .fold(f64::INFINITY, f64::min);
        let lo = decade_below(min);
        let mut span: f64 = 0.5;
        for ((_, b), t) in bars.iter().zip(&texts) {
            let room = (plot_w - text_w(t, SMALL) - 12).max(20) as f64;
            span = span.max((end(b) / lo).log10() * plot_w as f64 / room);
        }
        let hi = lo * 10f64.powf(span);
        let widest = text_w(&(spec.tick)(hi), TICK);
        Axis::log(lo, hi, fit(plot_w, widest))
    } else {
        // The axis reaches the end of each bar and its printed value, but a limit more
        // than twice as far as that is cut.
        let need = |b: &Bar, t: &str| {
            let room = (plot_w - text_w(t, SMALL) - 12).max(20) as f64;
            end(b).max(0.0) * plot_w as f64 / room
        };
        let mut hi = 0.0;
        for ((_, b), t) in bars.iter().zip(&texts) {
            if !b.cut_ok {
                hi = f64::max(hi, need(b, t));
            }
        }
        for ((_, b), t) in bars.iter().zip(&texts) {
            if b.cut_ok && (hi == 0.0 || need(b, t) <= 2.0 * hi) {
                hi = f64::max(hi, need(b, t));
            }
        }
        if hi <= 0.0 {
            hi = 1.0;
        }
        // Negative values (none of the spec's metrics has them) still stay in the frame.
        let lo = bars
            .iter()
            .map(|(_, b)| b.range.map_or(b.value, |r| r.0.min(b.value)))
            .fold(0.0, f64::min);
        let lo = if lo < 0.0 { lo - 0.05 * (hi - lo) } else { 0.0 };
        let widest = (text_w(&(spec.tick)(hi), TICK) + 6).max(36);
        Axis::linear(lo, hi, fit(plot_w, widest))
    };
    let y = Axis::fixed(0.0, rows, labels.iter().map(|l| l.0).collect());
    let yfmt = |c: f64| {
        labels
            .iter()
            .find(|(p, _)| (p - c).abs() < 0.01)
            .map(|(_, l)| l.clone())
            .unwrap_or_default()
    };
    let mut chart = build(
        area,
        &Frame {
            caption: spec.caption.clone(),
            x: &x,
            y: &y,
            x_desc: spec.x_desc.clone(),
            y_desc: String::new(),
            x_fmt: spec.tick,
            y_fmt: &yfmt,
            y_label_w: label_w,
            x_grid: true,
            y_grid: false,
        },
    )?;
    let base = x.t(if spec.log { x.lo } else { 0.0 });
    let px = (x.t(x.hi) - x.t(x.lo)) / plot_w as f64;
    for ((yc, b), t) in bars.iter().zip(&texts) {
        let yc = *yc;
        // Where a bar too long for the axis is cut: its value still fits after it.
        let cap = x.hi - (text_w(t, SMALL) + 12) as f64 * px;
        let cut = !spec.log && end(b) > x.hi;
        let bar_end = if cut { cap } else { x.t(b.value) };
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(base, yc - 0.34), (bar_end, yc + 0.34)],
                b.colour.filled(),
            )))
            .map_err(err)?;
        if cut {
            // Two white slashes across the bar: it is longer than drawn.
            let s = WHITE.stroke_width(3);
            let at = cap - 26.0 * px;
            chart
                .draw_series([0.0, 7.0].map(|d| {
                    let x0 = at + d * px;
                    PathElement::new(
                        vec![(x0 - 3.0 * px, yc - 0.42), (x0 + 3.0 * px, yc + 0.42)],
                        s,
                    )
                }))
                .map_err(err)?;
            label_at(
                &mut chart,
                (cap, yc),
                (6, 0),
                t,
                anchored(font(SMALL), HPos::Left, VPos::Center),
            )?;
            continue;
        }
        if let Some((lo, hi)) = b.range {
            let s = INK.stroke_width(1);
            let (l, h) = (x.t(lo.max(x.lo)), x.t(hi));
            chart
                .draw_series([
                    PathElement::new(vec![(l, yc), (h, yc)], s),
                    PathElement::new(vec![(l, yc - 0.16), (l, yc + 0.16)], s),
                    PathElement::new(vec![(h, yc - 0.16), (h, yc + 0.16)], s),
                ])
                .map_err(err)?;
        }
        label_at(
            &mut chart,
            (x.t(end(b)), yc),
            (6, 0),
            t,
            anchored(font(SMALL), HPos::Left, VPos::Center),
        )?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Latency distributions: rr and crr.

fn latency_cases<'a>(s: &'a [Shown<'a>]) -> Vec<(&'a Shown<'a>, &'a Histogram<u64>)> {
    s.iter()
        .filter_map(|c| {
            c.run
                .latency
                .as_ref()
                .filter(|h| !h.is_empty())
                .map(|h| (c, h))
        })
        .collect()
}

fn q_us(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1e3
}

fn latency_body(area: &Area, r: &Report, s: &[Shown]) -> io::Result<()> {
    let cases = latency_cases(s);
    let (w, _) = dims(area);
    let (charts, legend) = area.split_horizontally(w - LEGEND_W);
    let (left, right) = charts.split_horizontally((w - LEGEND_W) / 2);
    cdf_chart(&left, r, &cases)?;
    tail_chart(&right, &cases)?;
    latency_legend(&legend, &cases)
}

/// A dot (p50) or a triangle (p99) in the curve's colour, ringed in white.
fn marker(chart: &mut Chart, at: (f64, f64), colour: RGBColor, p99: bool) -> io::Result<()> {
    if p99 {
        chart
            .draw_series([
                TriangleMarker::new(at, 7, WHITE.filled()),
                TriangleMarker::new(at, 5, colour.filled()),
            ])
            .map_err(err)?;
    } else {
        chart
            .draw_series([
                Circle::new(at, 6, WHITE.filled()),
                Circle::new(at, 4, colour.filled()),
            ])
            .map_err(err)?;
    }
    Ok(())
}

fn cdf_chart(area: &Area, r: &Report, cases: &[(&Shown, &Histogram<u64>)]) -> io::Result<()> {
    let lo = cases.iter().map(|(_, h)| h.min().max(1)).min().unwrap_or(1) as f64 / 1e3;
    let hi = cases
        .iter()
        .map(|(_, h)| h.value_at_quantile(0.999))
        .max()
        .unwrap_or(1) as f64
        / 1e3;
    let (w, _) = dims(area);
    let y_desc = format!("share of {} ≤ x", op_name(r.bench));
    let y_label_w = text_w("100%", TICK) + 4;
    let plot_w = w - 2 * M - 8 - y_area(y_label_w, &y_desc);
    let x = Axis::log(lo / 1.6, hi.max(lo * 1.5) * 1.6, fit(plot_w, 44));
    let y = Axis::fixed(0.0, 1.0, vec![0.0, 0.25, 0.5, 0.75, 1.0]);
    let pct = |v: f64| format!("{}%", (v * 100.0).round());
    let mut chart = build(
        area,
        &Frame {
            caption: "Latency CDF (every round merged)".into(),
            x: &x,
            y: &y,
            x_desc: "latency (log scale)".into(),
            y_desc,
            x_fmt: &dur_us,
            y_fmt: &pct,
            y_label_w,
            x_grid: true,
            y_grid: true,
        },
    )?;
    let (a, b) = (x.t(x.lo), x.t(x.hi));
    for q in [0.5, 0.99] {
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(a, q), (b, q)],
                GUIDE.stroke_width(1),
            )))
            .map_err(err)?;
    }
    // At the right, where every curve has passed p50 and nearly all p99.
    label_at(
        &mut chart,
        (b, 0.5),
        (-5, -3),
        "p50",
        anchored(font_c(SMALL, MUTED), HPos::Right, VPos::Bottom),
    )?;
    label_at(
        &mut chart,
        (b, 0.99),
        (-5, 3),
        "p99",
        anchored(font_c(SMALL, MUTED), HPos::Right, VPos::Top),
    )?;
    const N: usize = 240;
    // Baselines first, so that ember's curves are drawn over them.
    for (c, h) in cases.iter().rev() {
        let pts: Vec<(f64, f64)> = (0..=N)
            .map(|i| {
                let xc = a + (b - a) * i as f64 / N as f64;
                let ns = (x.value(xc) * 1e3).round().max(1.0) as u64;
                (xc, h.quantile_below(ns))
            })
            .collect();
        chart
            .draw_series(LineSeries::new(pts, c.colour.stroke_width(2)))
            .map_err(err)?;
    }
    for (c, h) in cases.iter().rev() {
        marker(&mut chart, (x.t(q_us(h, 0.5)), 0.5), c.colour, false)?;
        marker(&mut chart, (x.t(q_us(h, 0.99)), 0.99), c.colour, true)?;
    }
    Ok(())
}

/// Percentile `q` as a chart coordinate: -log10(1 - q) (p50 0.3, p90 1, p99 2, ...).
fn q_coord(q: f64) -> f64 {
    -(1.0 - q).max(1e-12).log10()
}

fn tail_chart(area: &Area, cases: &[(&Shown, &Histogram<u64>)]) -> io::Result<()> {
    let reach = |h: &Histogram<u64>| (h.len() as f64).log10().clamp(0.5, 5.0);
    let xmax = cases
        .iter()
        .map(|(_, h)| reach(h))
        .fold(0.0, f64::max)
        .floor()
        .clamp(2.0, 5.0);
    let mut ticks = vec![q_coord(0.5)];
    ticks.extend((1..=xmax as i32).map(f64::from));
    let x = Axis::fixed(0.0, xmax, ticks);
    let end = |h: &Histogram<u64>| reach(h).min(xmax);
    let lo = cases.iter().map(|(_, h)| h.min().max(1)).min().unwrap_or(1) as f64 / 1e3;
    let hi = cases
        .iter()
        .map(|(_, h)| q_us(h, 1.0 - 10f64.powf(-end(h))))
        .fold(0.0, f64::max);
    let (_, hgt) = dims(area);
    let plot_h = hgt - top_area("x") - x_area("x") - M;
    let y = Axis::log(lo / 1.15, hi.max(lo * 1.5) * 1.15, fit(plot_h, 14));
    let y_label_w = y
        .ticks
        .iter()
        .map(|v| text_w(&dur_us(*v), TICK))
        .max()
        .unwrap_or(40)
        + 4;
    let pct = |c: f64| {
        let p = 100.0 * (1.0 - 10f64.powf(-c));
        let dec = (c.round() as i32 - 2).max(0) as usize;
        format!("p{p:.dec$}")
    };
    let mut chart = build(
        area,
        &Frame {
            caption: "Latency by percentile (the tail)".into(),
            x: &x,
            y: &y,
            x_desc: "percentile (log scale toward 100%)".into(),
            y_desc: "latency (log scale)".into(),
            x_fmt: &pct,
            y_fmt: &dur_us,
            y_label_w,
            x_grid: true,
            y_grid: true,
        },
    )?;
    const N: usize = 240;
    for (c, h) in cases.iter().rev() {
        let e = end(h);
        let pts: Vec<(f64, f64)> = (0..=N)
            .map(|i| {
                let xc = e * i as f64 / N as f64;
                (xc, y.t(q_us(h, 1.0 - 10f64.powf(-xc))))
            })
            .collect();
        chart
            .draw_series(LineSeries::new(pts, c.colour.stroke_width(2)))
            .map_err(err)?;
    }
    for (c, h) in cases.iter().rev() {
        marker(
            &mut chart,
            (q_coord(0.5), y.t(q_us(h, 0.5))),
            c.colour,
            false,
        )?;
        if end(h) >= 2.0 {
            marker(&mut chart, (2.0, y.t(q_us(h, 0.99))), c.colour, true)?;
        }
    }
    Ok(())
}

fn latency_legend(area: &Area, cases: &[(&Shown, &Histogram<u64>)]) -> io::Result<()> {
    let (w, _) = dims(area);
    let top = 40;
    area.draw_text(
        "Cases",
        &anchored(bold(LABEL), HPos::Left, VPos::Top),
        (14, top - 26),
    )
    .map_err(err)?;
    let bottom = top + cases.len() as i32 * ENTRY_H + 70;
    area.draw(&Rectangle::new(
        [(4, top - 34), (w - 4, bottom)],
        GRID.stroke_width(1),
    ))
    .map_err(err)?;
    for (i, (c, h)) in cases.iter().enumerate() {
        let y = top + i as i32 * ENTRY_H;
        area.draw(&PathElement::new(
            vec![(14, y + 9), (42, y + 9)],
            c.colour.stroke_width(3),
        ))
        .map_err(err)?;
        area.draw(&Circle::new((28, y + 9), 4, c.colour.filled()))
            .map_err(err)?;
        area.draw_text(
            &c.label,
            &anchored(font(LABEL), HPos::Left, VPos::Top),
            (52, y),
        )
        .map_err(err)?;
        // The percentiles the markers show; the table's are medians of each round's.
        let line2 = format!(
            "p50 {} · p99 {}",
            dur_us(q_us(h, 0.5)),
            dur_us(q_us(h, 0.99))
        );
        area.draw_text(
            &line2,
            &anchored(font_c(SMALL, MUTED), HPos::Left, VPos::Top),
            (52, y + 19),
        )
        .map_err(err)?;
        let mut parts = Vec::new();
        if let Some(v) = c.run.value("ops_per_s") {
            parts.push(format!("{} per s", num(v)));
        }
        if let Some(v) = c.run.value("cpu_us_per_op") {
            parts.push(format!("CPU {} per op", dur_us(v)));
        }
        if !parts.is_empty() {
            area.draw_text(
                &parts.join(" · "),
                &anchored(font_c(SMALL, MUTED), HPos::Left, VPos::Top),
                (52, y + 36),
            )
            .map_err(err)?;
        }
    }
    let y = top + cases.len() as i32 * ENTRY_H + 8;
    area.draw(&Circle::new((20, y + 8), 4, INK.filled()))
        .map_err(err)?;
    area.draw_text(
        "p50",
        &anchored(font(SMALL), HPos::Left, VPos::Center),
        (30, y + 8),
    )
    .map_err(err)?;
    area.draw(&TriangleMarker::new((78, y + 8), 5, INK.filled()))
        .map_err(err)?;
    area.draw_text(
        "p99",
        &anchored(font(SMALL), HPos::Left, VPos::Center),
        (88, y + 8),
    )
    .map_err(err)?;
    for (i, line) in [
        "percentiles: every round merged",
        "rate, CPU: median of rounds",
    ]
    .iter()
    .enumerate()
    {
        area.draw_text(
            line,
            &anchored(font_c(SMALL, MUTED), HPos::Left, VPos::Top),
            (14, y + 22 + 18 * i as i32),
        )
        .map_err(err)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// stream.

fn throughput_legend(s: &[Shown]) -> Legend {
    bar_legend(s)
}

fn metric_bars(s: &[Shown], metric: &str) -> Vec<Bar> {
    s.iter()
        .filter_map(|c| {
            Some(Bar {
                label: c.label.clone(),
                value: c.run.value(metric)?,
                range: round_range(c.run, metric),
                colour: c.colour,
                cut_ok: matches!(
                    c.run.case.variant,
                    Variant::LimitSpin | Variant::LimitMemcpy
                ),
            })
        })
        .collect()
}

fn throughput_body(area: &Area, s: &[Shown]) -> io::Result<()> {
    let area = draw_strip(area, &throughput_legend(s))?;
    let (w, _) = dims(&area);
    let tput = metric_bars(s, "gbit_per_s");
    let cpu = metric_bars(s, "cpu_us_per_gb");
    let gbit = |v: f64| format!("{} Gbit/s", sig(v));
    let (left, right) = if cpu.is_empty() {
        (area.clone(), None)
    } else {
        let (l, r) = area.split_horizontally(w * 58 / 100);
        (l, Some(r))
    };
    hbar(
        &left,
        &one_group(tput),
        &HBar {
            caption: "Throughput (median of rounds)".into(),
            x_desc: "throughput (Gbit/s)".into(),
            fmt: &gbit,
            tick: &num,
            log: false,
        },
    )?;
    if let Some(right) = right {
        hbar(
            &right,
            &one_group(cpu),
            &HBar {
                caption: "CPU time per GB moved".into(),
                x_desc: "process CPU time per GB".into(),
                fmt: &dur_us,
                tick: &dur_us,
                log: false,
            },
        )?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// starvation.

const PHASES: [(&str, &str); 4] = [
    ("ping_idle_p99_ms", "ping, idle"),
    ("ping_bulk_p99_ms", "ping, bulk"),
    ("udp_idle_p99_ms", "UDP, idle"),
    ("udp_bulk_p99_ms", "UDP, bulk"),
];

fn starvation_legend(s: &[Shown]) -> Legend {
    s.iter()
        .map(|c| {
            let label = match c.run.value("bulk_mbit_per_s") {
                Some(m) => format!("{} (bulk {} Mbit/s)", c.label, sig(m)),
                None => c.label.clone(),
            };
            (label, Swatch::Line(c.colour))
        })
        .collect()
}

/// The length of the idle phase, when the report's params give it (`idle_s`,
/// `idle_secs`, `idle_seconds` or `idle_ms`).
fn idle_secs(r: &Report) -> Option<f64> {
    for k in ["idle_s", "idle_secs", "idle_seconds"] {
        if let Some(v) = r.params.get(k).and_then(Value::as_f64) {
            return Some(v);
        }
    }
    r.params
        .get("idle_ms")
        .and_then(Value::as_f64)
        .map(|ms| ms / 1e3)
}

fn starvation_body(area: &Area, r: &Report, s: &[Shown]) -> io::Result<()> {
    let area = draw_strip(area, &starvation_legend(s))?;
    let (w, _) = dims(&area);
    let (left, right) = area.split_horizontally(w * 60 / 100);
    rtt_series(&left, r, s)?;
    phase_bars(&right, s)
}

fn rtt_series(area: &Area, r: &Report, s: &[Shown]) -> io::Result<()> {
    let series: Vec<(&Shown, Vec<(f64, f64)>)> = s
        .iter()
        .map(|c| {
            let pts = c
                .run
                .series
                .iter()
                .copied()
                .filter(|(t, v)| t.is_finite() && v.is_finite() && *v > 0.0)
                .collect();
            (c, pts)
        })
        .filter(|(_, p): &(_, Vec<_>)| !p.is_empty())
        .collect();
    if series.is_empty() {
        area.draw_text(
            "no RTT series recorded",
            &anchored(font_c(LABEL, MUTED), HPos::Left, VPos::Top),
            (M, 40),
        )
        .map_err(err)?;
        return Ok(());
    }
    let all = || series.iter().flat_map(|(_, p)| p.iter());
    let tmax = all().map(|p| p.0).fold(0.0, f64::max).max(1e-3);
    let vmin = all().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let vmax = all().map(|p| p.1).fold(0.0, f64::max);
    let (w, h) = dims(area);
    let plot_h = h - top_area("x") - x_area("x") - M;
    let y = Axis::log(vmin / 1.3, vmax.max(vmin * 2.0) * 1.6, fit(plot_h, 14));
    let y_label_w = y
        .ticks
        .iter()
        .map(|v| text_w(&dur_ms(*v), TICK))
        .max()
        .unwrap_or(40)
        + 4;
    let plot_w = w - 2 * M - 8 - y_area(y_label_w, "x");
    let x = Axis::linear(0.0, tmax * 1.02, fit(plot_w, 36));
    let secs = |v: f64| format!("{} s", sig(v));
    let mut chart = build(
        area,
        &Frame {
            caption: "Ping round-trip time during the run".into(),
            x: &x,
            y: &y,
            x_desc: "time since the start of the run (s)".into(),
            y_desc: "ping RTT (log scale)".into(),
            x_fmt: &secs,
            y_fmt: &dur_ms,
            y_label_w,
            x_grid: true,
            y_grid: true,
        },
    )?;
    let (yb, yt) = (y.t(y.lo), y.t(y.hi));
    if let Some(idle) = idle_secs(r).filter(|t| *t > 0.0 && *t < x.hi) {
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(idle, yb), (x.hi, yt)],
                RGBColor(250, 232, 215).mix(0.6).filled(),
            )))
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(idle, yb), (idle, yt)],
                GUIDE.stroke_width(1),
            )))
            .map_err(err)?;
        let style = anchored(font_c(SMALL, MUTED), HPos::Center, VPos::Top);
        label_at(&mut chart, (idle / 2.0, yt), (0, 4), "idle", style.clone())?;
        label_at(
            &mut chart,
            ((idle + x.hi) / 2.0, yt),
            (0, 4),
            "bulk transfer running",
            style,
        )?;
    }
    for (c, pts) in series.iter().rev() {
        let coords: Vec<(f64, f64)> = pts.iter().map(|(t, v)| (*t, y.t(*v))).collect();
        chart
            .draw_series(LineSeries::new(
                coords.clone(),
                c.colour.mix(0.8).stroke_width(1),
            ))
            .map_err(err)?;
        if coords.len() <= 2000 {
            chart
                .draw_series(coords.iter().map(|p| Circle::new(*p, 2, c.colour.filled())))
                .map_err(err)?;
        }
    }
    Ok(())
}

/// The p99 of each probe in each phase: a group per phase, a bar per case.
fn phase_groups(s: &[Shown]) -> Vec<BarGroup> {
    PHASES
        .iter()
        .map(|(m, name)| BarGroup {
            name: name.to_string(),
            bars: s
                .iter()
                .filter_map(|c| {
                    Some(Bar {
                        label: c.label.clone(),
                        value: c.run.value(m).filter(|v| *v > 0.0)?,
                        range: round_range(c.run, m),
                        colour: c.colour,
                        cut_ok: false,
                    })
                })
                .collect(),
        })
        .filter(|g| !g.bars.is_empty())
        .collect()
}

fn phase_bars(area: &Area, s: &[Shown]) -> io::Result<()> {
    hbar(
        area,
        &phase_groups(s),
        &HBar {
            caption: "p99 round-trip time by phase".into(),
            x_desc: "p99 RTT (log scale)".into(),
            fmt: &dur_ms,
            tick: &dur_ms,
            log: true,
        },
    )
}

// ---------------------------------------------------------------------------------------
// nagle.

/// The variants of the drawn cases, in order, each with its cases.
fn by_variant<'a, 'b>(s: &'b [Shown<'a>]) -> Vec<(Variant, Vec<&'b Shown<'a>>)> {
    let mut out: Vec<(Variant, Vec<&Shown>)> = Vec::new();
    for c in s {
        let v = c.run.case.variant;
        match out.iter_mut().find(|(o, _)| *o == v) {
            Some((_, list)) => list.push(c),
            None => out.push((v, vec![c])),
        }
    }
    out
}

fn nagle_legend(s: &[Shown]) -> Legend {
    by_variant(s)
        .iter()
        .map(|(v, _)| (v.name().to_string(), Swatch::Bar(variant_colour(*v))))
        .collect()
}

/// Where the bars of the grouped bar charts go: each case's centre, each variant's
/// centre and the gaps between variants.
struct Groups<'a, 'b> {
    bars: Vec<(f64, &'b Shown<'a>)>,
    centres: Vec<(f64, Variant)>,
    seps: Vec<f64>,
    width: f64,
}

fn nagle_groups<'a, 'b>(s: &'b [Shown<'a>]) -> Groups<'a, 'b> {
    let mut g = Groups {
        bars: Vec::new(),
        centres: Vec::new(),
        seps: Vec::new(),
        width: 0.0,
    };
    let mut x = 0.0;
    for (i, (v, cases)) in by_variant(s).into_iter().enumerate() {
        if i > 0 {
            g.seps.push(x + 0.35);
            x += 0.7;
        }
        let start = x;
        for c in cases {
            g.bars.push((x + 0.5, c));
            x += 1.0;
        }
        g.centres.push(((start + x) / 2.0, v));
    }
    g.width = x;
    g
}

fn mode_of(c: &Shown) -> String {
    c.run
        .case
        .mode
        .clone()
        .unwrap_or_else(|| c.run.case.variant.name().to_string())
}

fn nagle_body(area: &Area, s: &[Shown]) -> io::Result<()> {
    let area = draw_strip(area, &nagle_legend(s))?;
    let s: Vec<&Shown> = s
        .iter()
        .filter(|c| c.run.value("total_ms").is_some())
        .collect();
    let owned: Vec<Shown> = s
        .iter()
        .map(|c| Shown {
            run: c.run,
            label: c.label.clone(),
            colour: c.colour,
        })
        .collect();
    let g = nagle_groups(&owned);
    let per_message = owned
        .iter()
        .all(|c| c.run.value("messages").is_some_and(|m| m > 0.0));
    let time = |c: &Shown| -> f64 {
        let t = c.run.value("total_ms").unwrap_or(0.0);
        if per_message {
            t / c.run.value("messages").unwrap_or(1.0)
        } else {
            t
        }
    };
    let segs = owned
        .iter()
        .any(|c| c.run.value("segments_per_message").is_some());
    let (top, bottom) = if segs {
        let (_, h) = dims(&area);
        let (t, b) = area.split_vertically(h - 250);
        (t, Some(b))
    } else {
        (area.clone(), None)
    };
    let x = Axis::fixed(
        -0.3,
        g.width + 0.3,
        g.bars.iter().map(|(c, _)| *c).collect(),
    );
    let modes: Vec<(f64, String)> = g.bars.iter().map(|(c, s)| (*c, mode_of(s))).collect();
    let mfmt = |v: f64| {
        modes
            .iter()
            .find(|(c, _)| (c - v).abs() < 0.25)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    };
    // The y labels of both charts get the same width, so that their bars line up.
    let vals: Vec<f64> = owned.iter().map(time).filter(|v| *v > 0.0).collect();
    let vmin = vals.iter().copied().fold(f64::INFINITY, f64::min);
    let vmax = vals.iter().copied().fold(0.0, f64::max);
    let (_, h) = dims(&top);
    let plot_h = h - top_area("x") - x_area("x") - M;
    let lo = decade_below(vmin.min(vmax));
    // Room above the tallest bar for its value and the variant's name.
    let span = (vmax / lo).log10().max(0.5) * plot_h as f64 / (plot_h - 52).max(20) as f64;
    let y = Axis::log(lo, lo * 10f64.powf(span), fit(plot_h, 14));
    let y_label_w = y
        .ticks
        .iter()
        .map(|v| text_w(&dur_ms(*v), TICK))
        .max()
        .unwrap_or(40)
        + 4;
    let (y_desc, caption) = if per_message {
        (
            "time per message (log scale)",
            "Time per message (total time / messages)",
        )
    } else {
        ("total time (log scale)", "Total time")
    };
    let mut chart = build(
        &top,
        &Frame {
            caption: caption.into(),
            x: &x,
            y: &y,
            x_desc: "mode, by variant".into(),
            y_desc: y_desc.into(),
            x_fmt: &mfmt,
            y_fmt: &dur_ms,
            y_label_w,
            x_grid: false,
            y_grid: true,
        },
    )?;
    grouped_bars(&mut chart, &g, &y, &|c| Some(time(c)), &dur_ms)?;
    if let Some(bottom) = bottom {
        let sv: Vec<f64> = owned
            .iter()
            .filter_map(|c| c.run.value("segments_per_message"))
            .collect();
        let smax = sv.iter().copied().fold(0.0, f64::max).max(1.0);
        let (_, h2) = dims(&bottom);
        let plot_h2 = h2 - top_area("x") - x_area("x") - M;
        // Room above the tallest bar for its value and the variant's name.
        let hi = smax * plot_h2 as f64 / (plot_h2 - 52).max(20) as f64;
        let ys = Axis::linear(0.0, hi, fit(plot_h2, 14));
        let mut chart = build(
            &bottom,
            &Frame {
                caption: "Segments per message".into(),
                x: &x,
                y: &ys,
                x_desc: "mode, by variant".into(),
                y_desc: "data segments".into(),
                x_fmt: &mfmt,
                y_fmt: &num,
                y_label_w,
                x_grid: false,
                y_grid: true,
            },
        )?;
        grouped_bars(
            &mut chart,
            &g,
            &ys,
            &|c| c.run.value("segments_per_message"),
            &sig,
        )?;
    }
    Ok(())
}

fn grouped_bars(
    chart: &mut Chart,
    g: &Groups,
    y: &Axis,
    value: &dyn Fn(&Shown) -> Option<f64>,
    fmt: &dyn Fn(f64) -> String,
) -> io::Result<()> {
    let (yb, yt) = (y.t(y.lo), y.t(y.hi));
    for sep in &g.seps {
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(*sep, yb), (*sep, yt)],
                GRID.stroke_width(1),
            )))
            .map_err(err)?;
    }
    for (c, v) in &g.centres {
        label_at(
            chart,
            (*c, yt),
            (0, 5),
            v.name(),
            anchored(bold(LABEL), HPos::Center, VPos::Top),
        )?;
    }
    for (c, s) in &g.bars {
        let Some(v) = value(s).filter(|v| v.is_finite() && (!y.log || *v > 0.0)) else {
            continue;
        };
        let base = variant_colour(s.run.case.variant);
        chart
            .draw_series([
                Rectangle::new([(c - 0.38, yb), (c + 0.38, y.t(v))], s.colour.filled()),
                Rectangle::new([(c - 0.38, yb), (c + 0.38, y.t(v))], base.stroke_width(1)),
            ])
            .map_err(err)?;
        label_at(
            chart,
            (*c, y.t(v)),
            (0, -3),
            &fmt(v),
            anchored(font(SMALL), HPos::Center, VPos::Bottom),
        )?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Any other bench: a small bar chart per metric.

/// The unit of a metric, from its name.
fn unit(metric: &str) -> &'static str {
    let m = metric;
    if m == "cpu_us_per_op" {
        "µs of CPU per operation"
    } else if m == "cpu_us_per_gb" {
        "µs of CPU per GB"
    } else if m.ends_with("us_per_op") {
        "µs per operation"
    } else if m.ends_with("gbit_per_s") {
        "Gbit/s"
    } else if m.ends_with("mbit_per_s") {
        "Mbit/s"
    } else if m.ends_with("mb_per_s") {
        "MB/s"
    } else if m.ends_with("bytes_per_ms") {
        "bytes per ms"
    } else if m.ends_with("ops_per_s") {
        "operations per second"
    } else if m.ends_with("_per_s") {
        "per second"
    } else if m.ends_with("bytes_per_conn") {
        "bytes per connection"
    } else if m.ends_with("_us") {
        "µs"
    } else if m.ends_with("_ms") {
        "ms"
    } else if m.ends_with("_s") {
        "s"
    } else if m.contains("bytes") {
        "bytes"
    } else if m == "segments_per_message" {
        "segments per message"
    } else {
        "count"
    }
}

struct Grid {
    metrics: Vec<&'static str>,
    cols: i32,
    rows: i32,
    chart_h: i32,
}

fn generic_grid(s: &[Shown]) -> Grid {
    let mut metrics: Vec<&'static str> = Vec::new();
    for c in s {
        for m in c.run.metric_names() {
            if !metrics.contains(&m) {
                metrics.push(m);
            }
        }
    }
    let label_px = s.iter().map(|c| text_w(&c.label, TICK)).max().unwrap_or(0);
    let cols = if label_px > 200 { 2 } else { 3 }.min(metrics.len().max(1)) as i32;
    let rows = (metrics.len() as i32 + cols - 1) / cols;
    Grid {
        metrics,
        cols,
        rows,
        chart_h: hbar_h(s.len() as f64, 26),
    }
}

fn generic_body(area: &Area, s: &[Shown]) -> io::Result<()> {
    let area = draw_strip(area, &bar_legend(s))?;
    let g = generic_grid(s);
    let (w, _) = dims(&area);
    let cw = w / g.cols;
    for (i, m) in g.metrics.iter().enumerate() {
        let (row, col) = (i as i32 / g.cols, i as i32 % g.cols);
        let cell = area
            .clone()
            .shrink((col * cw, row * g.chart_h), (cw as u32, g.chart_h as u32));
        let bars = metric_bars(s, m);
        let pos: Vec<f64> = bars.iter().map(|b| b.value).filter(|v| *v > 0.0).collect();
        let log = pos.len() == bars.len()
            && pos.len() > 1
            && pos.iter().copied().fold(0.0, f64::max)
                / pos.iter().copied().fold(f64::INFINITY, f64::min)
                > 300.0;
        let u = unit(m);
        hbar(
            &cell,
            &one_group(bars),
            &HBar {
                caption: m.to_string(),
                x_desc: if log {
                    format!("{u} (log scale)")
                } else {
                    u.to_string()
                },
                fmt: &num,
                tick: &num,
                log,
            },
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figures' tests show `ember-tap` as skipped whether or not this process could
    /// run it (as root it can).
    fn skip_tap(c: &Case) -> io::Result<()> {
        if c.variant == Variant::EmberTap {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "needs root to create a TAP device",
            ));
        }
        Ok(())
    }
    use crate::measure::{histogram, quantile_us, record};
    use crate::report::{alternate, Case, Check, Outcome};
    use serde_json::{json, Map};
    use std::time::Duration;

    /// A small deterministic generator of uniform numbers in (0, 1).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            ((self.0 >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        }

        /// A standard normal number (Box–Muller).
        fn normal(&mut self) -> f64 {
            let (a, b) = (self.next(), self.next());
            (-2.0 * a.ln()).sqrt() * (2.0 * std::f64::consts::PI * b).cos()
        }
    }

    /// `n` latencies around `median_us`, log-normally spread, one in a hundred in a tail
    /// 3 to 20 times slower.
    fn latencies(median_us: f64, n: usize, seed: u64) -> Histogram<u64> {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut h = histogram();
        for _ in 0..n {
            let mut us = median_us * (0.25 * rng.normal()).exp();
            if rng.next() < 0.01 {
                us *= 3.0 + 17.0 * rng.next();
            }
            record(&mut h, Duration::from_secs_f64(us / 1e6));
        }
        h
    }

    fn params(kv: &[(&str, Value)]) -> Map<String, Value> {
        kv.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }

    fn rr_report(bench: &'static str) -> Report {
        let cases = [
            (Variant::EmberFused, 4.9),
            (Variant::EmberLoopback, 11.0),
            (Variant::EmberWire, 22.0),
            (Variant::EmberTap, 30.0),
            (Variant::KernelTcp, 48.0),
            (Variant::KernelUnix, 14.0),
            (Variant::LimitSpin, 0.21),
        ];
        let runs = alternate(
            bench,
            cases.iter().map(|c| Case::plain(c.0)).collect(),
            3,
            false,
            |c, round| {
                skip_tap(c)?;
                let med = cases.iter().find(|x| x.0 == c.variant).expect("a case").1;
                let h = latencies(med, 2000, c.variant as u64 * 10 + round as u64);
                Ok(Outcome {
                    metrics: vec![
                        ("p50_us", quantile_us(&h, 0.5)),
                        ("p99_us", quantile_us(&h, 0.99)),
                        ("ops_per_s", 1e6 / med),
                        ("cpu_us_per_op", med * 1.6),
                    ],
                    latency: Some(h),
                    series: Vec::new(),
                })
            },
        );
        let mut r = Report::new(
            bench,
            params(&[
                ("rounds", json!(3)),
                ("ops", json!(2000)),
                ("mtu", json!(1500)),
            ]),
            runs,
        );
        r.check_ratio("ember-fused", "kernel-tcp", "p50_us", true, 0.1);
        r.check_ratio("ember-fused", "kernel-unix", "p50_us", true, 0.5);
        r
    }

    fn stream_report() -> Report {
        let mut cases = vec![
            (Case::plain(Variant::EmberFused), 41.0),
            (Case::plain(Variant::EmberLoopback), 7.9),
            (Case::mode(Variant::EmberWire, "mtu1500"), 3.1),
            (Case::mode(Variant::EmberWire, "mtu65535"), 9.4),
            (Case::plain(Variant::EmberTap), 1.0),
            (Case::plain(Variant::KernelTcp), 12.8),
            (Case::plain(Variant::KernelUnix), 29.0),
        ];
        cases.push((Case::plain(Variant::LimitMemcpy), 290.0));
        let runs = alternate(
            "stream",
            cases.iter().map(|c| c.0.clone()).collect(),
            3,
            false,
            |c, round| {
                skip_tap(c)?;
                let g = cases.iter().find(|x| x.0 == *c).expect("a case").1;
                let g = g * (0.92 + 0.08 * round as f64);
                let mut metrics = vec![("gbit_per_s", g)];
                if c.variant != Variant::LimitMemcpy {
                    metrics.push(("cpu_us_per_gb", 8e6 / g * 1.7));
                }
                Ok(Outcome {
                    metrics,
                    ..Outcome::default()
                })
            },
        );
        let mut r = Report::new(
            "stream",
            params(&[("rounds", json!(3)), ("bytes", json!(268435456))]),
            runs,
        );
        r.check_ratio("ember-fused", "kernel-tcp", "gbit_per_s", false, 3.0);
        r.notes.push(
            "--param turned LSO or GRO off for every case: the offload comparison compares \
             like with like"
                .into(),
        );
        r
    }

    fn starvation_report() -> Report {
        let cases = vec![
            Case::plain(Variant::EmberWire),
            Case::plain(Variant::KernelTcp),
        ];
        let runs = alternate("starvation", cases, 2, false, |c, round| {
            let mut rng = Rng(7 + round as u64 + c.variant as u64);
            let ember = c.variant.is_ember();
            let mut series = Vec::new();
            let mut t = 0.0;
            while t < 6.0 {
                let rtt = if t < 2.0 {
                    4.7 + 0.3 * rng.next()
                } else if ember {
                    5.5 + 3.0 * rng.next()
                } else {
                    (40.0 + 700.0 * (t - 2.0) / 4.0) * (0.8 + 0.4 * rng.next())
                };
                series.push((t, rtt));
                t += 0.05;
            }
            Ok(Outcome {
                metrics: vec![
                    ("ping_idle_p99_ms", 5.0),
                    ("ping_bulk_p99_ms", if ember { 8.4 } else { 780.0 }),
                    ("udp_idle_p99_ms", 5.1),
                    ("udp_bulk_p99_ms", if ember { 8.9 } else { 810.0 }),
                    ("bulk_mbit_per_s", if ember { 94.1 } else { 95.3 }),
                ],
                latency: None,
                series,
            })
        });
        let mut r = Report::new(
            "starvation",
            params(&[("rounds", json!(2)), ("idle_s", json!(2.0))]),
            runs,
        );
        r.check(
            "ping_bulk_p99_ms ≤ ping_idle_p99_ms + 5",
            Some(true),
            "ember-wire 8.4 ≤ 10.0",
        );
        r
    }

    const MODES: [&str; 4] = ["default", "nodelay", "cork", "writev"];

    fn nagle_report() -> Report {
        let mut cases = Vec::new();
        for v in [Variant::EmberWire, Variant::EmberFused, Variant::KernelTcp] {
            for m in MODES {
                cases.push(Case::mode(v, m));
            }
        }
        let runs = alternate("nagle", cases, 2, false, |c, _| {
            let (ms, segs) = match c.mode.as_deref() {
                Some("default") => (400_000.0, 2.0),
                Some("nodelay") => (1_650.0, 15.0),
                Some("cork") => (850.0, 1.0),
                _ => (700.0, 1.0),
            };
            let f = match c.variant {
                Variant::EmberFused => 0.05,
                Variant::EmberWire => 0.6,
                _ => 1.0,
            };
            Ok(Outcome {
                metrics: vec![
                    ("total_ms", ms * f),
                    ("messages", 10_000.0),
                    ("bytes_per_ms", 320_000.0 / (ms * f)),
                    ("segments_per_message", segs),
                ],
                ..Outcome::default()
            })
        });
        Report::new(
            "nagle",
            params(&[("rounds", json!(2)), ("messages", json!(10000))]),
            runs,
        )
    }

    fn slowreader_report() -> Report {
        let mut cases: Vec<Case> = ["unread8", "unread32", "unread0"]
            .iter()
            .map(|m| Case::mode(Variant::EmberFused, *m))
            .collect();
        cases.push(Case::plain(Variant::EmberTap));
        cases.push(Case::plain(Variant::KernelTcp));
        cases.push(Case::plain(Variant::KernelUnix));
        let runs = alternate("slowreader", cases, 3, false, |c, round| {
            skip_tap(c)?;
            if c.variant == Variant::KernelUnix && round == 1 {
                return Err(io::Error::other("reader stalled for 10 s"));
            }
            let stops = match c.mode.as_deref() {
                Some("unread8") => 1250.0,
                Some("unread32") => 310.0,
                _ => 0.0,
            };
            Ok(Outcome {
                metrics: vec![
                    ("writer_stops", stops),
                    ("would_block", stops * 3.0 + round as f64),
                    ("max_queued_bytes", 65536.0 + stops * 10.0),
                    ("reader_mb_per_s", 120.0 + 10.0 * round as f64),
                ],
                ..Outcome::default()
            })
        });
        let mut r = Report::new("slowreader", params(&[("rounds", json!(3))]), runs);
        r.checks.push(Check {
            target: "with 8 the writer stops".into(),
            met: Some(false),
            detail: "writer_stops 0".into(),
        });
        r
    }

    fn libmicro_report() -> Report {
        let cases = vec![
            Case::plain(Variant::EmberFused),
            Case::plain(Variant::EmberLoopback),
            Case::plain(Variant::KernelTcp),
        ];
        let runs = alternate("libmicro", cases, 2, false, |c, _| {
            let f = if c.variant.is_ember() { 0.1 } else { 1.0 };
            Ok(Outcome {
                metrics: vec![
                    ("connect_accept_us_per_op", 60.0 * f),
                    ("connect_us_per_op", 35.0 * f),
                    ("accept_us_per_op", 20.0 * f),
                    ("socket_us_per_op", 2.5),
                    ("close_us_per_op", 9000.0 * f),
                ],
                ..Outcome::default()
            })
        });
        Report::new("libmicro", params(&[("rounds", json!(2))]), runs)
    }

    fn scale_report() -> Report {
        let mut cases = Vec::new();
        for v in [Variant::EmberFused, Variant::KernelTcp] {
            for sq in [1, 2] {
                for conns in [1, 1000, 100_000] {
                    cases.push(Case::mode(v, format!("crr squeues={sq} conns={conns}")));
                }
            }
        }
        let runs = alternate("scale", cases, 1, false, |c, _| {
            let m = c.mode.as_deref().unwrap_or_default();
            let sq = if m.contains("squeues=2") { 1.8 } else { 1.0 };
            let f = if c.variant.is_ember() { 3.0 } else { 1.0 };
            Ok(Outcome {
                metrics: vec![
                    ("ops_per_s", 25_000.0 * sq * f),
                    (
                        "bytes_per_conn",
                        if c.variant.is_ember() { 3900.0 } else { 2300.0 },
                    ),
                    (
                        "p99_us",
                        60.0 / f * if m.ends_with("100000") { 1.2 } else { 1.0 },
                    ),
                ],
                ..Outcome::default()
            })
        });
        Report::new("scale", params(&[("rounds", json!(1))]), runs)
    }

    /// Draws `reports` and returns the SVG's text (the file is removed, or kept under
    /// `$EMBER_PLOT_KEEP/NAME.svg` when that variable names a directory, to look at).
    fn render(name: &str, reports: &[Report]) -> String {
        let keep = std::env::var("EMBER_PLOT_KEEP").ok();
        let path = match &keep {
            Some(dir) => format!("{dir}/{name}.svg"),
            None => std::env::temp_dir()
                .join(format!("ember-plot-{name}-{}.svg", std::process::id()))
                .display()
                .to_string(),
        };
        write_svg(reports, &path).expect("write the SVG");
        let text = std::fs::read_to_string(&path).expect("read it back");
        if keep.is_none() {
            let _ = std::fs::remove_file(&path);
        }
        text
    }

    /// Checks that `svg` is well-formed XML: one `svg` root, tags nested and closed,
    /// attributes quoted, and `&` only in entities. Returns the tag names in order.
    fn well_formed(svg: &str) -> Vec<String> {
        let mut stack: Vec<String> = Vec::new();
        let mut seen = Vec::new();
        let mut roots = 0;
        let mut rest = svg;
        while let Some(i) = rest.find(['<', '&']) {
            let (text, at) = rest.split_at(i);
            assert!(!text.contains('>'), "stray '>' in text {text:?}");
            if at.starts_with('&') {
                let end = at.find(';').expect("an entity ends with ';'");
                let ent = &at[1..end];
                assert!(
                    ["lt", "gt", "amp", "quot", "apos"].contains(&ent) || ent.starts_with('#'),
                    "unknown entity &{ent};"
                );
                rest = &at[end + 1..];
                continue;
            }
            if let Some(r) = at.strip_prefix("<?") {
                rest = &r[r.find("?>").expect("'<?' closes") + 2..];
                continue;
            }
            if let Some(r) = at.strip_prefix("<!--") {
                rest = &r[r.find("-->").expect("comment closes") + 3..];
                continue;
            }
            let end = at.find('>').expect("a tag closes");
            let tag = &at[1..end];
            assert!(!tag.contains('<'), "'<' inside tag {tag:?}");
            assert_eq!(
                tag.matches('"').count() % 2,
                0,
                "unbalanced quotes in {tag:?}"
            );
            if let Some(name) = tag.strip_prefix('/') {
                let open = stack.pop().expect("a closing tag has an opening one");
                assert_eq!(open, name.trim(), "tags cross");
            } else {
                let name: String = tag
                    .chars()
                    .take_while(|c| !c.is_whitespace() && *c != '/')
                    .collect();
                assert!(!name.is_empty(), "a tag has a name: {tag:?}");
                if stack.is_empty() {
                    roots += 1;
                    assert_eq!(name, "svg", "the root is <svg>");
                }
                seen.push(name.clone());
                if !tag.ends_with('/') {
                    stack.push(name);
                }
            }
            rest = &at[end + 1..];
        }
        assert!(rest.trim().is_empty(), "text after the root");
        assert!(stack.is_empty(), "unclosed tags {stack:?}");
        assert_eq!(roots, 1);
        seen
    }

    fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
        let key = format!(" {name}=\"");
        let i = tag.find(&key)? + key.len();
        Some(&tag[i..i + tag[i..].find('"')?])
    }

    fn unescape(s: &str) -> String {
        s.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&amp;", "&")
    }

    /// Every unrotated text of the SVG with its estimated box `(x0, y0, x1, y1)`.
    fn text_boxes(svg: &str) -> Vec<(String, (f64, f64, f64, f64))> {
        let mut out = Vec::new();
        let mut rest = svg;
        while let Some(i) = rest.find("<text") {
            let at = &rest[i..];
            let open_end = at.find('>').expect("tag end");
            let tag = &at[..open_end];
            let close = at.find("</text>").expect("text closes");
            let content = unescape(at[open_end + 1..close].trim());
            rest = &at[close..];
            if attr(tag, "transform").is_some() || content.trim().is_empty() {
                continue;
            }
            let num = |n: &str| attr(tag, n).and_then(|v| v.parse::<f64>().ok());
            let (x, y, fs) = (
                num("x").unwrap(),
                num("y").unwrap(),
                num("font-size").unwrap(),
            );
            let dy = match attr(tag, "dy") {
                Some("0.76em") => 0.76 * fs,
                Some("0.5ex") => 0.27 * fs,
                Some("-0.5ex") => -0.27 * fs,
                _ => 0.0,
            };
            let w: f64 = content.chars().map(char_em).sum::<f64>() * fs;
            let x0 = match attr(tag, "text-anchor") {
                Some("middle") => x - w / 2.0,
                Some("end") => x - w,
                _ => x,
            };
            let base = y + dy;
            out.push((content, (x0, base - 0.72 * fs, x0 + w, base + 0.2 * fs)));
        }
        out
    }

    /// Every text of the SVG, rotated or not.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .map(|t| {
                let body = &t[t.find('>').expect("tag end") + 1..];
                unescape(body[..body.find("</text>").expect("text closes")].trim())
            })
            .collect()
    }

    /// Pairs of texts whose boxes overlap (by more than a pixel each way).
    fn overlaps(svg: &str) -> Vec<(String, String)> {
        let b = text_boxes(svg);
        let mut out = Vec::new();
        for i in 0..b.len() {
            for j in i + 1..b.len() {
                let (p, q) = (b[i].1, b[j].1);
                let ox = p.2.min(q.2) - p.0.max(q.0);
                let oy = p.3.min(q.3) - p.1.max(q.1);
                if ox > 1.0 && oy > 1.0 {
                    out.push((b[i].0.clone(), b[j].0.clone()));
                }
            }
        }
        out
    }

    fn check(name: &str, reports: &[Report], expect: &[&str]) -> String {
        let svg = render(name, reports);
        let tags = well_formed(&svg);
        assert!(tags.iter().any(|t| t == "text"), "{name}: no text");
        for e in expect {
            assert!(svg.contains(e), "{name}: no {e:?} in the SVG");
        }
        let o = overlaps(&svg);
        assert!(o.is_empty(), "{name}: texts overlap: {o:?}");
        // Every text inside the figure.
        let w = WIDTH as f64;
        for (t, (x0, _, x1, _)) in text_boxes(&svg) {
            assert!(
                x0 >= -1.0 && x1 <= w + 1.0,
                "{name}: {t:?} leaves the figure"
            );
        }
        svg
    }

    #[test]
    fn rr_and_crr_draw_latency_distributions() {
        let r = rr_report("rr");
        assert_eq!(kind(&r, &shown(&r)), Kind::Latency);
        let svg = check(
            "rr",
            &[r],
            &[
                "rr: 1-byte request",
                "Latency CDF",
                "Latency by percentile",
                "latency (log scale)",
                "share of round trips",
                "ember-fused",
                "kernel-tcp",
                "limit-spin",
                "p50",
                "p99.9",
                "µs",
                "target met",
                "not shown: ember-tap: skipped",
            ],
        );
        // ember in red, the kernel in blue.
        assert!(svg.contains("#D6301E") || svg.contains("#d6301e"));
        assert!(svg.contains("#1F5FAA") || svg.contains("#1f5faa"));
        let c = check(
            "crr",
            &[rr_report("crr")],
            &["crr: connect", "share of transactions"],
        );
        assert!(c.contains("Latency CDF"));
    }

    #[test]
    fn stream_draws_throughput_bars_with_their_values() {
        let r = stream_report();
        assert_eq!(kind(&r, &shown(&r)), Kind::Throughput);
        let svg = check(
            "stream",
            &[r],
            &[
                "Throughput (median of rounds)",
                "41 Gbit/s",
                "12.8 Gbit/s",
                "ember-wire[mtu65535]",
                "min–max over rounds",
                "CPU time per GB",
                "note: --param turned LSO",
                "290 Gbit/s",
            ],
        );
        // limit-memcpy's bar, seven times the longest other, is cut (white slashes).
        assert_eq!(
            svg.matches("stroke=\"#FFFFFF\" stroke-width=\"3\"").count(),
            2
        );
    }

    #[test]
    fn starvation_draws_rtt_over_time_and_phases() {
        let r = starvation_report();
        assert_eq!(kind(&r, &shown(&r)), Kind::Starvation);
        let svg = check(
            "starvation",
            &[r],
            &[
                "Ping round-trip time",
                "ping RTT (log scale)",
                "bulk transfer running",
                "idle",
                "ping, bulk",
                "UDP, idle",
                "bulk 94.1 Mbit/s",
                "780 ms",
            ],
        );
        // One polyline per case, at least.
        assert!(svg.matches("<polyline").count() >= 2);
    }

    #[test]
    fn nagle_draws_modes_grouped_by_variant() {
        let r = nagle_report();
        assert_eq!(kind(&r, &shown(&r)), Kind::Nagle);
        let svg = check(
            "nagle",
            &[r],
            &[
                "Time per message",
                "Segments per message",
                "time per message (log scale)",
                "40 ms",
                "165 µs",
                "ember-wire",
                "ember-fused",
                "kernel-tcp",
            ],
        );
        let t = texts(&svg);
        for m in MODES {
            // Under the bars of both charts, for each of the three variants.
            assert_eq!(t.iter().filter(|x| *x == m).count(), 6, "mode {m}");
        }
        for v in ["ember-wire", "ember-fused", "kernel-tcp"] {
            // In the legend and over each chart's group.
            assert_eq!(t.iter().filter(|x| *x == v).count(), 3, "variant {v}");
        }
    }

    #[test]
    fn other_benches_get_a_bar_chart_per_metric_without_failed_cases() {
        let r = slowreader_report();
        assert_eq!(kind(&r, &shown(&r)), Kind::Generic);
        let svg = check(
            "slowreader",
            &[r],
            &[
                "MB/s",
                "bytes",
                "ember-fused[unread8]",
                "not shown: kernel-unix: failed after 1 completed round(s): reader stalled",
                "target not met",
            ],
        );
        let t = texts(&svg);
        for m in [
            "writer_stops",
            "would_block",
            "max_queued_bytes",
            "reader_mb_per_s",
        ] {
            assert!(t.iter().any(|x| x == m), "no chart titled {m}");
        }
        // A bar per drawn case in each of the four charts.
        assert_eq!(t.iter().filter(|x| *x == "ember-fused[unread8]").count(), 4);
        assert_eq!(t.iter().filter(|x| *x == "kernel-tcp").count(), 5);
        // The failed case is in the footer only, not among the bars' labels.
        assert_eq!(svg.matches("kernel-unix").count(), 1);
        let svg = check(
            "scale",
            &[scale_report()],
            &["operations per second", "bytes per connection", "135k"],
        );
        // Labels this long get two charts a row: the third starts a second row.
        assert_eq!(generic_grid(&shown(&scale_report())).cols, 2);
        assert!(texts(&svg)
            .iter()
            .any(|x| x == "ember-fused[crr squeues=2 conns=100000]"));
        let svg = check("libmicro", &[libmicro_report()], &["µs per operation"]);
        assert!(texts(&svg).iter().any(|x| x == "connect_accept_us_per_op"));
    }

    #[test]
    fn reports_stack_into_one_figure() {
        let reports = vec![stream_report(), nagle_report(), libmicro_report()];
        let heights: i32 = reports.iter().map(|r| plan(r).height()).sum();
        let svg = check("all", &reports, &["stream:", "nagle:", "libmicro:"]);
        assert!(svg.contains(&format!("height=\"{heights}\"")));
        let empty = Report::new(
            "scale",
            Map::new(),
            alternate(
                "scale",
                vec![Case::plain(Variant::EmberTap)],
                1,
                false,
                |c, _| skip_tap(c).map(|()| Outcome::default()),
            ),
        );
        check(
            "empty",
            &[empty],
            &["no case completed", "not shown: ember-tap"],
        );
        check("none", &[], &["no reports"]);
    }

    #[test]
    fn an_unwritable_path_is_an_error() {
        let r = vec![libmicro_report()];
        assert!(write_svg(&r, "/nonexistent-dir/x/plot.svg").is_err());
    }

    #[test]
    fn axes_and_numbers() {
        let a = Axis::log(3.0, 800.0, 10);
        assert_eq!(a.ticks, vec![5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0]);
        let a = Axis::log(0.2, 2e6, 5);
        assert!(a.ticks.len() <= 5 && a.ticks.len() >= 2, "{:?}", a.ticks);
        let l = Axis::linear(0.0, 47.0, 6);
        assert_eq!(l.ticks, vec![0.0, 10.0, 20.0, 30.0, 40.0]);
        assert!((a.value(a.t(123.0)) - 123.0).abs() < 1e-9);
        assert_eq!(dur_us(0.21), "210 ns");
        assert_eq!(dur_us(48.04), "48 µs");
        assert_eq!(dur_ms(9870.0), "9.87 s");
        assert_eq!(num(1_520_000.0), "1.52M");
        assert_eq!(num(25_000.0), "25k");
        assert_eq!(sig(0.012345), "0.0123");
        assert_eq!(
            wrap("aaa bbb ccc", SMALL, text_w("aaa bbb", SMALL)),
            ["aaa bbb", "ccc"]
        );
        assert_eq!(unit("close_to_fin_p99_us"), "µs");
        assert_eq!(unit("bulk_mbit_per_s"), "Mbit/s");
        assert_eq!(unit("bytes_per_conn"), "bytes per connection");
    }
}
