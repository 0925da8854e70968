//! The `--plot` SVG: one panel per bench, stacked vertically. Each panel draws the
//! bench's first metric as one bar per case (the median over rounds), so the variants
//! compare at a glance.

use crate::report::Report;
use plotters::prelude::*;
use std::io;

const PANEL_H: u32 = 360;
const WIDTH: u32 = 960;

fn err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// Draws every report into one SVG file at `path`.
pub fn write_svg(reports: &[Report], path: &str) -> io::Result<()> {
    let n = reports.len().max(1) as u32;
    let root = SVGBackend::new(path, (WIDTH, PANEL_H * n)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let panels = root.split_evenly((n as usize, 1));
    for (r, area) in reports.iter().zip(panels.iter()) {
        bars(r, area)?;
    }
    root.present().map_err(err)
}

fn bars(r: &Report, area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>) -> io::Result<()> {
    let Some(metric) = r
        .runs
        .iter()
        .find_map(|c| c.metric_names().first().copied())
    else {
        return Ok(());
    };
    let data: Vec<(String, f64)> = r
        .runs
        .iter()
        .filter_map(|c| Some((c.case.label(), c.value(metric)?)))
        .collect();
    if data.is_empty() {
        return Ok(());
    }
    let max = data.iter().map(|d| d.1).fold(0.0f64, f64::max).max(1e-9) * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{}: {metric} (median)", r.bench),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(170)
        .build_cartesian_2d(0.0..max, (0..data.len()).into_segmented())
        .map_err(err)?;
    let labels: Vec<String> = data.iter().map(|d| d.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .x_desc(metric)
        .draw()
        .map_err(err)?;
    chart
        .draw_series(data.iter().enumerate().map(|(i, (label, v))| {
            let color = if label.starts_with("ember") {
                RGBColor(214, 96, 30)
            } else {
                RGBColor(90, 110, 140)
            };
            Rectangle::new(
                [
                    (0.0, SegmentValue::Exact(i)),
                    (*v, SegmentValue::Exact(i + 1)),
                ],
                color.filled(),
            )
        }))
        .map_err(err)?;
    Ok(())
}
