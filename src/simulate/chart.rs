//! The charts of `simulate`, as SVG text: lost effects and cost per policy, the
//! distribution of time to correct, and the sweep curves.

use plotters::prelude::*;

use super::PolicyReport;
use crate::error::{Error, Result};
use crate::time::{Micros, SECOND_MICROS};

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// A duration in seconds, for an axis.
fn seconds(t: Micros) -> f64 {
    t as f64 / SECOND_MICROS as f64
}

fn chart_error(e: impl std::fmt::Display) -> Error {
    Error::Output { location: "chart".into(), message: e.to_string(), source: None }
}

/// One panel of horizontal bars: `values` per label, the first label on top.
fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    labels: &[String],
    values: &[f64],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let n = labels.len() as i32;
    let top = values.iter().copied().fold(0.0f64, f64::max).max(1.0) * 1.2;
    // Segment k holds label n - 1 - k, so that the first label is the top bar.
    let label_of = |k: i32| labels.get((n - 1 - k) as usize).cloned().unwrap_or_default();
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 15))
        .margin(8)
        .x_label_area_size(25)
        .y_label_area_size(190)
        .build_cartesian_2d(0.0..top, (0..n).into_segmented())
        .map_err(chart_error)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(labels.len())
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(k) => label_of(*k),
            _ => String::new(),
        })
        .y_label_style(("sans-serif", 12))
        .x_labels(6)
        .x_label_formatter(&|x| format_value(*x))
        .draw()
        .map_err(chart_error)?;
    for (i, v) in values.iter().enumerate() {
        let k = n - 1 - i as i32;
        let color = PALETTE[i % PALETTE.len()];
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(0.0, SegmentValue::Exact(k)), (*v, SegmentValue::Exact(k + 1))],
                color.filled(),
            )))
            .map_err(chart_error)?;
        chart
            .draw_series(std::iter::once(Text::new(
                format_value(*v),
                (*v + top * 0.01, SegmentValue::CenterOf(k)),
                ("sans-serif", 12),
            )))
            .map_err(chart_error)?;
    }
    Ok(())
}

fn format_value(v: f64) -> String {
    if v == v.trunc() || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The height of a panel of `n` bars.
fn panel_height(n: usize) -> u32 {
    70 + 24 * n as u32
}

/// Lost and wrong effects, and database work per 1000 messages, per policy.
pub fn policies_svg(reports: &[PolicyReport], title: &str) -> Result<String> {
    let mut svg = String::new();
    {
        let size = (1000, 40 + 3 * panel_height(reports.len()));
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(chart_error)?;
        let root = root.titled(title, ("sans-serif", 16)).map_err(chart_error)?;
        let panels = root.split_evenly((3, 1));
        let labels: Vec<String> = reports.iter().map(|r| r.label.clone()).collect();
        let lost: Vec<f64> = reports.iter().map(|r| r.outcome.lost as f64).collect();
        let wrong: Vec<f64> = reports.iter().map(|r| r.wrong() as f64).collect();
        let ops: Vec<f64> = reports
            .iter()
            .map(|r| r.per_1000(r.outcome.reads + r.outcome.writes + r.outcome.extra_messages))
            .collect();
        bars(&panels[0], "effects owed and never done", &labels, &lost)?;
        bars(&panels[1], "effects done wrongly (after void / twice)", &labels, &wrong)?;
        bars(&panels[2], "DB reads+writes+extra msgs per 1000 msgs", &labels, &ops)?;
        root.present().map_err(chart_error)?;
    }
    Ok(svg)
}

/// The cumulative distribution of time to correct per policy (log seconds).
pub fn time_to_correct_svg(reports: &[PolicyReport], title: &str) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 520)).into_drawing_area();
        root.fill(&WHITE).map_err(chart_error)?;
        let longest = reports.iter().filter_map(|r| r.ttc_sample.last()).copied().max();
        let max = seconds(longest.unwrap_or(SECOND_MICROS));
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(15)
            .x_label_area_size(50)
            .y_label_area_size(60)
            .build_cartesian_2d((0.1f64..max.max(10.0) * 1.5).log_scale(), 0.0f64..1.0)
            .map_err(chart_error)?;
        chart
            .configure_mesh()
            .x_desc("seconds from the status change to the effect (log)")
            .y_desc("share of corrected messages")
            .draw()
            .map_err(chart_error)?;
        for (i, r) in reports.iter().enumerate().filter(|(_, r)| !r.ttc_sample.is_empty()) {
            let color = PALETTE[i % PALETTE.len()];
            let n = r.ttc_sample.len() as f64;
            let step = (r.ttc_sample.len() / 400).max(1);
            let points: Vec<(f64, f64)> = r
                .ttc_sample
                .iter()
                .enumerate()
                .filter(|(k, _)| k % step == 0 || *k + 1 == r.ttc_sample.len())
                .map(|(k, t)| (seconds(*t).max(0.1), (k + 1) as f64 / n))
                .collect();
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))
                .map_err(chart_error)?
                .label(format!("{} (n={})", r.label, r.ttc.count))
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(chart_error)?;
        root.present().map_err(chart_error)?;
    }
    Ok(svg)
}

/// The sweep: lost effects and database work per policy of the sweep, in sweep order.
pub fn sweep_svg(reports: &[PolicyReport], title: &str) -> Result<String> {
    let mut svg = String::new();
    {
        let size = (1000, 40 + 3 * panel_height(reports.len()));
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(chart_error)?;
        let root = root.titled(title, ("sans-serif", 16)).map_err(chart_error)?;
        let panels = root.split_evenly((3, 1));
        let labels: Vec<String> = reports.iter().map(|r| r.label.clone()).collect();
        let lost: Vec<f64> = reports.iter().map(|r| r.outcome.lost as f64).collect();
        let p99: Vec<f64> = reports.iter().map(|r| seconds(r.ttc.p99)).collect();
        let ops: Vec<f64> = reports
            .iter()
            .map(|r| r.per_1000(r.outcome.reads + r.outcome.writes + r.outcome.extra_messages))
            .collect();
        bars(&panels[0], "effects owed and never done", &labels, &lost)?;
        bars(&panels[1], "time to correct p99 (s)", &labels, &p99)?;
        bars(&panels[2], "DB reads+writes+extra msgs per 1000 msgs", &labels, &ops)?;
        root.present().map_err(chart_error)?;
    }
    Ok(svg)
}
