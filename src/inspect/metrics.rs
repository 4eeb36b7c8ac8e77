//! `--metrics-file`: a run's [`Summary`] as a Prometheus textfile (the format node_exporter's
//! textfile collector and most agents read), written atomically.
//!
//! Every value is the summary's own number (stage durations and times converted to
//! seconds), so a dashboard and `summary.json` never disagree. Gauges carry labels
//! (effect, class, verdict, resolution, table, stage) so a dashboard can pivot on them.
//! The exposition format is `prometheus-client`'s; the file is written to a temporary
//! file in the same folder and renamed, so a scraper never reads half a file.

use std::io::Write;
use std::path::Path;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::error::{Error, Result};
use crate::run_folder::summary::Summary;
use crate::time::{parse_instant, Micros};
use crate::vocabulary::{Resolution, RunStatus, SkipVerdict};

/// Prefix of every metric name.
pub const PREFIX: &str = "effect_recon";

type Labels = Vec<(&'static str, String)>;

/// A gauge's value: a count, or seconds.
#[derive(Debug, Clone, Copy)]
enum Value {
    Count(i64),
    Seconds(f64),
}

impl Value {
    fn encode(self, sample: MetricEncoder) -> Result<(), std::fmt::Error> {
        match self {
            Value::Count(n) => ConstGauge::new(n).encode(sample),
            Value::Seconds(s) => ConstGauge::new(s).encode(sample),
        }
    }
}

/// One gauge and its samples, in the order they are written.
#[derive(Debug)]
struct GaugeFamily {
    name: &'static str,
    help: &'static str,
    samples: Vec<(Labels, Value)>,
}

/// The run's gauges, written in a fixed order (the summary's own, sorted) so two files
/// of the same run differ only where the run did; `prometheus-client`'s `Family` keeps
/// its samples in hash order.
#[derive(Debug, Default)]
struct Gauges(Vec<GaugeFamily>);

impl Gauges {
    fn labelled(&mut self, name: &'static str, help: &'static str, samples: Vec<(Labels, Value)>) {
        self.0.push(GaugeFamily { name, help, samples });
    }

    fn single(&mut self, name: &'static str, help: &'static str, value: Value) {
        self.labelled(name, help, vec![(Vec::new(), value)]);
    }
}

impl Collector for Gauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for family in &self.0 {
            let mut metric = encoder.encode_descriptor(
                family.name,
                family.help,
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?;
            match family.samples.as_slice() {
                // A gauge without labels is written `name value`, not `name{} value`.
                [(labels, value)] if labels.is_empty() => value.encode(metric)?,
                samples => {
                    for (labels, value) in samples {
                        value.encode(metric.encode_family(labels)?)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// The summary as Prometheus text. `last_complete_cut` is the cut of the latest COMPLETE
/// run under the same output root (this run's cut when it is COMPLETE itself).
pub fn render(summary: &Summary, last_complete_cut: Option<Micros>) -> Result<String> {
    let cut = instant(&summary.cut, "cut")?;
    let mut gauges = Gauges::default();
    findings(&mut gauges, summary)?;
    lifecycle(&mut gauges, summary, cut)?;
    run(&mut gauges, summary, cut, last_complete_cut)?;
    let mut registry = Registry::with_prefix(PREFIX);
    registry.register_collector(Box::new(gauges));
    let mut text = String::new();
    encode(&mut text, &registry)
        .map_err(|_| Error::Internal("metrics: the exposition encoder failed".into()))?;
    Ok(text)
}

fn findings(gauges: &mut Gauges, summary: &Summary) -> Result<()> {
    let mut samples = Vec::new();
    for f in &summary.findings {
        let labels = vec![
            ("effect", f.effect.clone()),
            ("class", f.class.clone()),
            ("verdict", f.verdict.as_str().to_string()),
        ];
        samples.push((labels, count(f.count)?));
    }
    gauges.labelled("findings", "Findings of the run by effect, class and verdict", samples);
    let mut samples = Vec::new();
    for verdict in
        known_and_present(SkipVerdict::ALL.iter().map(|v| v.as_str()), summary.skip_verdicts.keys())
    {
        let value = summary.skip_verdicts.get(&verdict).copied().unwrap_or(0);
        samples.push((vec![("verdict", verdict)], count(value)?));
    }
    gauges.labelled("skip_verdicts", "Skip verdicts of the run by verdict", samples);
    let tasks = count(summary.compensation_tasks)?;
    gauges.single("compensation_tasks", "Compensation tasks written by the run", tasks);
    Ok(())
}

fn lifecycle(gauges: &mut Gauges, summary: &Summary, cut: Micros) -> Result<()> {
    for (name, help, value) in [
        ("new_findings", "BREAK findings first seen in this run", summary.new),
        ("persisting_findings", "BREAK findings open since an earlier run", summary.persisting),
        ("not_rechecked_findings", "Persisting findings this snapshot could not re-check", {
            summary.not_rechecked
        }),
        ("open_findings", "Open backlog: new plus persisting BREAK findings", summary.open),
    ] {
        gauges.single(name, help, count(value)?);
    }
    let mut samples = Vec::new();
    for resolution in
        known_and_present(Resolution::ALL.iter().map(|r| r.as_str()), summary.resolved.keys())
    {
        let value = summary.resolved.get(&resolution).copied().unwrap_or(0);
        samples.push((vec![("resolution", resolution)], count(value)?));
    }
    gauges.labelled("resolved_findings", "Earlier open findings closed by this run", samples);
    let oldest = match &summary.oldest_open_break_on {
        Some(at) => cut - instant(at, "oldest_open_break_on")?,
        None => 0,
    };
    gauges.single(
        "oldest_open_age_seconds",
        "Cut minus the first BREAK of the oldest open finding (0 when none is open)",
        micros_to_seconds(oldest),
    );
    Ok(())
}

fn run(
    gauges: &mut Gauges,
    summary: &Summary,
    cut: Micros,
    last_complete_cut: Option<Micros>,
) -> Result<()> {
    let status = RunStatus::ALL
        .iter()
        .copied()
        .map(|s| {
            (vec![("status", s.as_str().to_string())], Value::Count((s == summary.status).into()))
        })
        .collect();
    gauges.labelled("run_status", "1 for the status of the run (COMPLETE or INCOMPLETE)", status);
    let previous = summary.previous_run.clone().unwrap_or_default();
    let info = vec![("run_id", summary.run_id.clone()), ("previous_run", previous)];
    gauges.labelled(
        "run_info",
        "The run id and the run it follows, as labels",
        vec![(info, Value::Count(1))],
    );
    let mut samples = Vec::new();
    for (table, rows) in &summary.inputs {
        samples.push((vec![("table", table.clone())], count(*rows)?));
    }
    gauges.labelled("input_rows", "Rows read per input table and receipts source", samples);
    let samples = summary
        .timings_ms
        .iter()
        .map(|(stage, ms)| (vec![("stage", stage.clone())], Value::Seconds(*ms as f64 / 1000.0)))
        .collect();
    gauges.labelled("stage_duration_seconds", "Wall time of each stage of the run", samples);
    gauges.single(
        "last_run_timestamp_seconds",
        "The cut of this run, in seconds since the Unix epoch",
        micros_to_seconds(cut),
    );
    if let Some(last) = last_complete_cut {
        gauges.single(
            "last_complete_run_timestamp_seconds",
            "The cut of the latest COMPLETE run under the output root, in seconds since the Unix epoch",
            micros_to_seconds(last),
        );
    }
    Ok(())
}

/// Writes `text` to `path` through a temporary file in the same folder and a rename, so a
/// reader sees the old file or the new one, never a part.
pub fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let io = |source| Error::Io { path: path.display().to_string(), source };
    let name = path.file_name().ok_or_else(|| Error::Argument {
        name: "--metrics-file",
        message: format!("{} names no file", path.display()),
    })?;
    let mut temporary = name.to_os_string();
    temporary.push(format!(".{}.tmp", std::process::id()));
    let temporary = path.with_file_name(temporary);
    let written = (|| {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written.map_err(io)
}

/// The known values in their order, then any other value the summary holds.
/// Every value of a vocabulary (always exported, 0 when absent), then any other present.
fn known_and_present<'a>(
    known: impl Iterator<Item = &'static str>,
    present: impl Iterator<Item = &'a String>,
) -> Vec<String> {
    let mut values: Vec<String> = known.map(str::to_string).collect();
    for value in present {
        if !values.contains(value) {
            values.push(value.clone());
        }
    }
    values
}

fn count(value: u64) -> Result<Value> {
    i64::try_from(value)
        .map(Value::Count)
        .map_err(|_| Error::Internal(format!("metrics: count {value} overflows")))
}

fn micros_to_seconds(micros: Micros) -> Value {
    Value::Seconds(micros as f64 / 1e6)
}

fn instant(text: &str, field: &str) -> Result<Micros> {
    parse_instant(text).map_err(|e| Error::Internal(format!("metrics: summary {field}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("recon.prom");
        write_atomically(&path, "a 1\n").unwrap();
        write_atomically(&path, "a 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a 2\n");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
