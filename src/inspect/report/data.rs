//! What the morning report shows, read from run folders only: the run's `manifest.json`,
//! `summary.json` and output Parquet (the files its manifest lists), and the summaries and
//! findings of the complete runs before it under the same root.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::run_folder::reader::{
    finding_row, read_table_if_listed, rows, run_error, skip_row, task_row, RowError, TaskRow,
    Typed,
};
use crate::run_folder::summary::Summary;
use crate::run_folder::OutputTable;
use crate::run_folder::{complete_runs, read_run_summary, CompleteRun, RunManifest};
use crate::storage::Location;
use crate::time::Micros;
use crate::vocabulary::{RunStatus, Verdict};

/// How many runs the charts over time cover (the chosen run and those before it).
pub const HISTORY_RUNS: usize = 30;

/// One finding of the run, as the one run reader reads it.
pub use crate::run_folder::reader::FindingRow as Finding;
/// One skip verdict of the run.
pub use crate::run_folder::reader::SkipRow;

/// One complete run of the history the charts over time draw.
#[derive(Debug, Clone, PartialEq)]
pub struct RunPoint {
    /// The run id.
    pub run_id: String,
    /// Its cut.
    pub cut: Micros,
    /// COMPLETE or INCOMPLETE.
    pub status: RunStatus,
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
                        out
                    ),
                )
            })?
        }
        None => runs.last().cloned().ok_or_else(|| {
            Error::argument(
                "--out",
                format!("{}: no complete run (run=<id>/ with a manifest.json) to report on", out),
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
    let tasks = read_rows(folder, manifest, OutputTable::CompensationTasks, task_row).await?;
    let skips = read_rows(folder, manifest, OutputTable::SkipVerdicts, skip_row).await?;
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
        status: summary.status,
        new: summary.new,
        open: summary.open,
        findings: findings.len() as u64,
        reorder_suspected: findings.iter().filter(|f| f.reorder_suspected).count() as u64,
    })
}

async fn findings_of(folder: &Location, manifest: &RunManifest) -> Result<Vec<Finding>> {
    read_rows(folder, manifest, OutputTable::Discrepancies, finding_row).await
}

/// The rows of a table the manifest lists (none when it lists no such table).
async fn read_rows<T>(
    folder: &Location,
    manifest: &RunManifest,
    table: OutputTable,
    row: fn(&Typed, usize) -> Result<T, RowError>,
) -> Result<Vec<T>> {
    let batches = read_table_if_listed(folder, manifest, table).await?.unwrap_or_default();
    rows(&batches, row).map_err(|m| run_error(folder.display(table.name()), m))
}

impl ReportData {
    /// The open findings (BREAK rows) by finding id.
    pub fn open_by_id(&self) -> BTreeMap<&str, &Finding> {
        self.findings
            .iter()
            .filter(|f| f.verdict == Verdict::Break)
            .map(|f| (f.finding_id.as_str(), f))
            .collect()
    }
}
