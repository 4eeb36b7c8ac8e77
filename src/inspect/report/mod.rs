//! `effect-recon report`: the morning report of a run as one self-contained HTML file —
//! the status and what it means, counts by effect × class × verdict, the lifecycle,
//! charts over the last runs and of this run's findings, the tasks to do first with
//! their `explain` line, and the skip verdicts.
//!
//! It reads run folders only (`manifest.json`, `summary.json`, the Parquet the manifest
//! lists), never the snapshot or a database, so it can be rendered anywhere the runs are.
//! The page fetches nothing: styles are inline and the charts are inline SVG, so it opens
//! from a mail attachment or an archive. Rendering is deterministic for a run and the runs
//! before it: a later run does not change an earlier run's report.

mod charts;
pub mod data;
mod page;

use std::path::{Path, PathBuf};

use bytes::Bytes;

pub use data::{ReportData, HISTORY_RUNS};

use crate::error::{Error, Result};
use crate::storage::Location;
use crate::vocabulary::RunStatus;

/// The report's file name inside a run folder.
pub const REPORT_FILE: &str = "report.html";

/// A validated `report` request.
#[derive(Debug, Clone)]
pub struct ReportPlan {
    /// The output root (`run=<id>/` folders under it).
    pub out: Location,
    /// The run (an id or `run=<id>`); `None`: the latest complete run under `out`.
    pub run: Option<String>,
    /// Where to write; `None`: `<run folder>/report.html`.
    pub output: Option<PathBuf>,
}

/// A written report.
#[derive(Debug, Clone)]
pub struct ReportWritten {
    /// The run reported on.
    pub run_id: String,
    /// Its status.
    pub status: RunStatus,
    /// Where the report was written.
    pub location: String,
    /// Its size.
    pub bytes: usize,
}

/// Reads the run and renders its report; returns the data and the HTML.
pub async fn render(out: &Location, run: Option<&str>) -> Result<(ReportData, String)> {
    let (chosen, runs) = data::choose_run(out, run).await?;
    let data = data::gather(&chosen, &runs).await?;
    let html = page::render(&data, "effect-recon")?;
    Ok((data, html))
}

/// Renders the report of the plan's run and writes it.
pub async fn write(plan: &ReportPlan) -> Result<ReportWritten> {
    let (data, html) = render(&plan.out, plan.run.as_deref()).await?;
    let bytes = html.len();
    let location = match &plan.output {
        Some(path) => {
            write_file(path, html.as_bytes())?;
            path.display().to_string()
        }
        None => {
            data.folder.write(REPORT_FILE, Bytes::from(html)).await?;
            data.folder.display(REPORT_FILE)
        }
    };
    Ok(ReportWritten {
        run_id: data.summary.run_id.clone(),
        status: data.summary.status,
        location,
        bytes,
    })
}

/// Writes `path` through a temporary file in the same folder and a rename, so a reader
/// never sees half a page.
fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let io = |source| Error::Io { path: path.display().to_string(), source };
    let name = path.file_name().ok_or_else(|| Error::argument("-o", "names no file"))?;
    let mut temporary = name.to_os_string();
    temporary.push(format!(".{}.tmp", std::process::id()));
    let temporary = path.with_file_name(temporary);
    std::fs::write(&temporary, bytes).map_err(io)?;
    std::fs::rename(&temporary, path).map_err(|e| {
        let _ = std::fs::remove_file(&temporary);
        io(e)
    })
}
