//! The report's charts as inline SVG, drawn by plotters' SVG backend: text stays text
//! (selectable, searchable) and nothing is fetched from anywhere.

use plotters::prelude::*;

use crate::error::{Error, Result};

/// Width and height of every chart, in CSS pixels.
const SIZE: (u32, u32) = (580, 270);

/// BREAK findings, NEW findings.
pub(crate) const RED: RGBColor = RGBColor(0xc0, 0x39, 0x2b);
/// PENDING findings.
pub(crate) const AMBER: RGBColor = RGBColor(0xe0, 0x9a, 0x1a);
/// Lines over the runs.
pub(crate) const BLUE: RGBColor = RGBColor(0x1f, 0x5f, 0xa8);
const GREY: RGBColor = RGBColor(0x55, 0x55, 0x55);

/// One stack of a bar chart: a label, a colour, one value per category.
pub(crate) struct Bars<'a> {
    /// Legend text.
    pub(crate) label: &'a str,
    /// Fill.
    pub(crate) colour: RGBColor,
    /// One value per category.
    pub(crate) values: Vec<u64>,
}

/// One line over the runs.
pub(crate) struct Line<'a> {
    /// Legend text.
    pub(crate) label: &'a str,
    /// Stroke.
    pub(crate) colour: RGBColor,
    /// One value per run.
    pub(crate) values: Vec<f64>,
}

type Drawn = std::result::Result<(), Box<dyn std::error::Error>>;

/// A drawn chart: its SVG and how many data marks (bars, points) it holds.
pub(crate) struct Svg {
    /// The `<svg>` element.
    pub(crate) svg: String,
    /// Bars and points drawn from data (legend and axes not counted).
    pub(crate) marks: usize,
}

fn svg(
    name: &str,
    marks: usize,
    draw: impl FnOnce(DrawingArea<SVGBackend, plotters::coord::Shift>) -> Drawn,
) -> Result<Svg> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
        draw(root).map_err(|e| Error::Internal(format!("report chart {name}: {e}")))?;
    }
    Ok(Svg { svg: out, marks })
}

/// The label of category `x` when `x` is one (a whole number in range), else nothing.
fn category(labels: &[String], x: f64) -> String {
    let i = x.round();
    if (x - i).abs() > 1e-6 || i < 0.0 {
        return String::new();
    }
    labels.get(i as usize).cloned().unwrap_or_default()
}

/// A stacked bar chart: one bar per category, the stacks in the order given.
pub(crate) fn stacked_bars(
    name: &str,
    x_desc: &str,
    categories: &[String],
    stacks: &[Bars],
) -> Result<Svg> {
    let totals: Vec<u64> =
        (0..categories.len()).map(|i| stacks.iter().map(|s| s.values[i]).sum()).collect();
    let top = totals.iter().copied().max().unwrap_or(0).max(1);
    let top = top + top.div_ceil(8);
    let n = categories.len().max(1) as f64;
    let marks = stacks.iter().flat_map(|s| &s.values).filter(|v| **v > 0).count();
    svg(name, marks, |root| {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(8)
            .x_label_area_size(34)
            .y_label_area_size(44)
            .build_cartesian_2d(-0.6f64..n - 0.4, 0u64..top)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(WHITE)
            .bold_line_style(RGBColor(0xe4, 0xe4, 0xe4))
            .x_labels(categories.len().min(24))
            .x_label_formatter(&|x| category(categories, *x))
            .x_desc(x_desc)
            .y_desc("findings")
            .axis_desc_style(("sans-serif", 13).into_font().color(&GREY))
            .label_style(("sans-serif", 12))
            .draw()?;
        let mut base = vec![0u64; categories.len()];
        for stack in stacks {
            let colour = stack.colour;
            let bars: Vec<Rectangle<(f64, u64)>> = stack
                .values
                .iter()
                .enumerate()
                .filter(|(_, v)| **v > 0)
                .map(|(i, v)| {
                    let x = i as f64;
                    Rectangle::new([(x - 0.38, base[i]), (x + 0.38, base[i] + v)], colour.filled())
                })
                .collect();
            for (i, v) in stack.values.iter().enumerate() {
                base[i] += v;
            }
            chart.draw_series(bars)?.label(stack.label).legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled())
            });
        }
        legend(&mut chart)?;
        root.present()?;
        Ok(())
    })
}

/// Values over the runs: optional bars (counts) and lines, one x position per run.
pub(crate) fn over_runs(
    name: &str,
    y_desc: &str,
    runs: &[String],
    bars: Option<Bars>,
    lines: &[Line],
    y_max: Option<f64>,
) -> Result<Svg> {
    let highest = lines
        .iter()
        .flat_map(|l| l.values.iter().copied())
        .chain(bars.iter().flat_map(|b| b.values.iter().map(|v| *v as f64)))
        .fold(0.0f64, f64::max);
    // Whole numbers on the axis: a top of whole numbers, a label per step when few.
    let top = y_max.unwrap_or_else(|| (highest * 1.12).ceil().max(1.0));
    let y_labels = (top as usize + 1).min(11);
    // A few runs are drawn at the left of a wider axis rather than as one huge bar.
    let n = runs.len().max(4) as f64;
    let marks = bars.iter().flat_map(|b| &b.values).filter(|v| **v > 0).count()
        + lines.iter().map(|l| l.values.len()).sum::<usize>();
    svg(name, marks, |root| {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(8)
            .x_label_area_size(34)
            .y_label_area_size(44)
            .build_cartesian_2d(-0.6f64..n - 0.4, 0f64..top)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(WHITE)
            .bold_line_style(RGBColor(0xe4, 0xe4, 0xe4))
            // A label per run while they fit; fewer, evenly spaced, beyond.
            .x_labels(if runs.len() <= 12 { runs.len().max(4) + 1 } else { 10 })
            .x_label_formatter(&|x| category(runs, *x))
            .y_labels(y_labels)
            .y_label_formatter(&|y| format!("{y:.0}"))
            .x_desc("run (cut, UTC)")
            .y_desc(y_desc)
            .axis_desc_style(("sans-serif", 13).into_font().color(&GREY))
            .label_style(("sans-serif", 12))
            .draw()?;
        if let Some(bars) = bars {
            let colour = bars.colour;
            let rects: Vec<Rectangle<(f64, f64)>> = bars
                .values
                .iter()
                .enumerate()
                .filter(|(_, v)| **v > 0)
                .map(|(i, v)| {
                    let x = i as f64;
                    Rectangle::new(
                        [(x - 0.3, 0.0), (x + 0.3, *v as f64)],
                        colour.mix(0.75).filled(),
                    )
                })
                .collect();
            chart.draw_series(rects)?.label(bars.label).legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.mix(0.75).filled())
            });
        }
        for line in lines {
            let colour = line.colour;
            let points: Vec<(f64, f64)> =
                line.values.iter().enumerate().map(|(i, v)| (i as f64, *v)).collect();
            chart
                .draw_series(LineSeries::new(points.clone(), colour.stroke_width(2)))?
                .label(line.label)
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 12, y)], colour.stroke_width(2))
                });
            chart.draw_series(points.into_iter().map(|p| Circle::new(p, 3, colour.filled())))?;
        }
        legend(&mut chart)?;
        root.present()?;
        Ok(())
    })
}

fn legend<'a, 'b: 'a, X, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'b>, Cartesian2d<X, Y>>,
) -> Drawn
where
    X: plotters::coord::ranged1d::Ranged,
    Y: plotters::coord::ranged1d::Ranged,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(0xcc, 0xcc, 0xcc))
        .label_font(("sans-serif", 12))
        .draw()?;
    Ok(())
}
