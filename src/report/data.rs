//! What the morning report shows, read from run folders only: the run's `manifest.json`,
//! `summary.json` and output Parquet (the files its manifest lists), and the summaries and
//! findings of the complete runs before it under the same root.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::recon::publish::{complete_runs, read_run_summary, CompleteRun, RunManifest};
use crate::recon::summary::Summary;
use crate::run_outputs::{output_error, read_table, rows, task_row, TaskRow, Typed};
use crate::storage::Location;
use crate::time::Micros;

/// How many runs the charts over time cover (the chosen run and those before it).
pub const HISTORY_RUNS: usize = 30;

/// One finding of the run (docs/OUTPUTS.md `discrepancies`), the columns the report uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The finding (= task_id of its task).
    pub finding_id: String,
    /// The rule's effect.
    pub effect: String,
    /// The order.
    pub order_id: i64,
    /// Finding class.
    pub class: String,
    /// BREAK or PENDING.
    pub verdict: String,
    /// When the order reached the rule's due status.
    pub due_at: Option<Micros>,
    /// Evidence: the partition of the deciding message.
    pub kafka_partition: Option<i32>,
    /// Evidence: the consumer that decided.
    pub consumer_id: Option<String>,
    /// A later offset of the same partition was decided earlier.
    pub reorder_suspected: bool,
    /// NEW or PERSISTING (BREAK rows only).
    pub lifecycle: Option<String>,
    /// Its `break_on` in the run that first listed it (BREAK rows only).
    pub first_break_on: Option<Micros>,
}

/// One skip verdict (docs/OUTPUTS.md `skip_verdicts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkipRow {
    /// The skipped message.
    pub msg_id: String,
    /// The order.
    pub order_id: i64,
    /// Its event type.
    pub event_type: String,
    /// When it was skipped.
    pub decided_at: Option<Micros>,
    /// WRONG, PENDING, HARMLESS or CORRECT.
    pub verdict: String,
    /// NEW or CARRIED.
    pub lifecycle: Option<String>,
}

/// One complete run of the history the charts over time draw.
#[derive(Debug, Clone, PartialEq)]
pub struct RunPoint {
    /// The run id.
    pub run_id: String,
    /// Its cut.
    pub cut: Micros,
    /// COMPLETE or INCOMPLETE.
    pub status: String,
    /// BREAK findings first seen.
    pub new: u64,
    /// Open backlog.
    pub open: u64,
    /// Findings (BREAK and PENDING) of the run.
    pub findings: u64,
    /// Of those, the ones with `reorder_suspected`.
    pub reorder_suspected: u64,
}

/// Everything the report shows about one run.
#[derive(Debug, Clone)]
pub struct ReportData {
    /// The run folder.
    pub folder: Location,
    /// Its manifest.
    pub manifest: RunManifest,
    /// Its `summary.json`, the source of every count the report prints.
    pub summary: Summary,
    /// Its cut.
    pub cut: Micros,
    /// Its discrepancies.
    pub findings: Vec<Finding>,
    /// Its compensation tasks.
    pub tasks: Vec<TaskRow>,
    /// Its skip verdicts.
    pub skips: Vec<SkipRow>,
    /// The last [`HISTORY_RUNS`] complete runs up to and including this one, in cut order.
    pub history: Vec<RunPoint>,
}

/// The run a report is about: `run` (an id, or `run=<id>`) or, by default, the latest
/// run under `out` (complete runs only: a folder without `manifest.json` is not a run).
pub async fn choose_run(
    out: &Location,
    run: Option<&str>,
) -> Result<(CompleteRun, Vec<CompleteRun>)> {
    let runs = complete_runs(out).await?;
    let chosen = match run {
        Some(id) => {
            let id = id.strip_prefix("run=").unwrap_or(id);
            runs.iter().find(|r| r.manifest.run_id == id).cloned().ok_or_else(|| {
                Error::argument(
                    "--run",
                    format!(
                        "no complete run '{id}' under {} (a folder without manifest.json is a run that did not finish)",
                        out.display("")
                    ),
                )
            })?
        }
        None => runs.last().cloned().ok_or_else(|| {
            Error::argument(
                "--out",
                format!(
                    "{}: no complete run (run=<id>/ with a manifest.json) to report on",
                    out.display("")
                ),
            )
        })?,
    };
    Ok((chosen, runs))
}

/// Reads what the report of `run` shows; `runs` are the complete runs under its root.
pub async fn gather(run: &CompleteRun, runs: &[CompleteRun]) -> Result<ReportData> {
    let folder = &run.folder;
    let manifest = &run.manifest;
    let summary = read_run_summary(folder).await?;
    let findings = findings_of(folder, manifest).await?;
    let tasks = read_rows(folder, manifest, "compensation_tasks", task_row).await?;
    let skips = read_rows(folder, manifest, "skip_verdicts", skip_row).await?;
    let upto = runs.iter().position(|r| r.manifest.run_id == manifest.run_id).map_or(0, |i| i + 1);
    let mut history = Vec::new();
    for earlier in &runs[upto.saturating_sub(HISTORY_RUNS)..upto] {
        history.push(point_of(earlier).await?);
    }
    Ok(ReportData {
        folder: folder.clone(),
        manifest: manifest.clone(),
        summary,
        cut: run.cut,
        findings,
        tasks,
        skips,
        history,
    })
}

async fn point_of(run: &CompleteRun) -> Result<RunPoint> {
    let summary = read_run_summary(&run.folder).await?;
    let findings = findings_of(&run.folder, &run.manifest).await?;
    Ok(RunPoint {
        run_id: summary.run_id.clone(),
        cut: run.cut,
        status: summary.status.as_str().to_string(),
        new: summary.new,
        open: summary.open,
        findings: findings.len() as u64,
        reorder_suspected: findings.iter().filter(|f| f.reorder_suspected).count() as u64,
    })
}

async fn findings_of(folder: &Location, manifest: &RunManifest) -> Result<Vec<Finding>> {
    read_rows(folder, manifest, "discrepancies", finding_row).await
}

/// The rows of a table the manifest lists (none when it lists no such table).
async fn read_rows<T>(
    folder: &Location,
    manifest: &RunManifest,
    table: &'static str,
    row: fn(&Typed, usize) -> Result<T, String>,
) -> Result<Vec<T>> {
    let batches = read_table(folder, manifest, table, false).await?;
    rows(&batches, row).map_err(|m| output_error(folder.display(table), m))
}

fn finding_row(t: &Typed, i: usize) -> Result<Finding, String> {
    Ok(Finding {
        finding_id: t.req_text("finding_id", i)?,
        effect: t.req_text("effect", i)?,
        order_id: t.req_int64("order_id", i)?,
        class: t.req_text("class", i)?,
        verdict: t.req_text("verdict", i)?,
        due_at: t.int64("due_at", i),
        kafka_partition: t.int32("kafka_partition", i),
        consumer_id: t.text("consumer_id", i),
        reorder_suspected: t.boolean("reorder_suspected", i).unwrap_or(false),
        lifecycle: t.text("lifecycle", i),
        first_break_on: t.int64("first_break_on", i),
    })
}

fn skip_row(t: &Typed, i: usize) -> Result<SkipRow, String> {
    Ok(SkipRow {
        msg_id: t.req_text("msg_id", i)?,
        order_id: t.req_int64("order_id", i)?,
        event_type: t.text("event_type", i).unwrap_or_default(),
        decided_at: t.int64("decided_at", i),
        verdict: t.req_text("verdict", i)?,
        lifecycle: t.text("lifecycle", i),
    })
}

impl ReportData {
    /// The open findings (BREAK rows) by finding id.
    pub fn open_by_id(&self) -> BTreeMap<&str, &Finding> {
        self.findings
            .iter()
            .filter(|f| f.verdict == "BREAK")
            .map(|f| (f.finding_id.as_str(), f))
            .collect()
    }
}
