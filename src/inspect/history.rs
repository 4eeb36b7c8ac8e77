//! `effect-recon history`: one line per complete run under an output root, in cut order,
//! so the on-call sees whether the backlog shrinks. Reads only manifests and summaries.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::run_folder::summary::Summary;
use crate::run_folder::{complete_runs, read_run_summary};
use crate::storage::Location;
use crate::text::{csv_row, text_table};
use crate::vocabulary::Resolution;

/// One complete run as the history shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HistoryLine {
    /// The run id.
    pub run_id: String,
    /// Window start (exclusive), RFC 3339.
    pub since: String,
    /// Cut, RFC 3339.
    pub cut: String,
    /// COMPLETE or INCOMPLETE.
    pub status: String,
    /// The run it followed.
    pub previous_run: Option<String>,
    /// BREAK findings first seen.
    pub new: u64,
    /// BREAK findings still open.
    pub persisting: u64,
    /// Closed findings by resolution.
    pub resolved: BTreeMap<String, u64>,
    /// Open backlog (new + persisting).
    pub open: u64,
    /// The earliest first_break_on among open findings.
    pub oldest_open_break_on: Option<String>,
}

/// Every complete run under `out`, in cut order (ties by run id). Folders without a
/// manifest (runs that did not finish) are left out.
pub async fn read(out: &Location) -> Result<Vec<HistoryLine>> {
    let mut lines = Vec::new();
    for run in complete_runs(out).await? {
        lines.push(line_of(read_run_summary(&run.folder).await?));
    }
    Ok(lines)
}

fn line_of(summary: Summary) -> HistoryLine {
    HistoryLine {
        status: summary.status.as_str().to_string(),
        run_id: summary.run_id,
        since: summary.since,
        cut: summary.cut,
        previous_run: summary.previous_run,
        new: summary.new,
        persisting: summary.persisting,
        resolved: summary.resolved,
        open: summary.open,
        oldest_open_break_on: summary.oldest_open_break_on,
    }
}

impl HistoryLine {
    /// The count of one resolution (0 when absent).
    pub fn resolved_as(&self, resolution: &str) -> u64 {
        self.resolved.get(resolution).copied().unwrap_or(0)
    }

    /// Findings closed, all resolutions together.
    pub fn resolved_total(&self) -> u64 {
        self.resolved.values().sum()
    }
}

/// The history as an aligned table.
pub fn render_table(lines: &[HistoryLine]) -> String {
    let mut header = vec!["run_id", "since", "cut", "status", "new", "persisting", "resolved"];
    header.extend(Resolution::ALL.iter().map(|r| short(*r)));
    header.extend(["open", "oldest_open_break_on"]);
    let rows: Vec<Vec<String>> = lines.iter().map(cells).collect();
    // The counts are right-aligned: every column from `new` up to the last, a date.
    let counts = 4..header.len() - 1;
    text_table(&header, &rows, |column| counts.contains(&column))
}

/// The history as CSV with a header.
pub fn render_csv(lines: &[HistoryLine]) -> String {
    let mut header = vec!["run_id", "since", "cut", "status", "new", "persisting", "resolved"];
    header.extend(Resolution::ALL.iter().map(|r| r.as_str()));
    header.extend(["open", "oldest_open_break_on"]);
    let mut out = csv_row(&header);
    for line in lines {
        out.push_str(&csv_row(&cells(line)));
    }
    out
}

/// The history as a JSON array.
pub fn render_json(lines: &[HistoryLine]) -> Result<String> {
    serde_json::to_string_pretty(lines)
        .map(|mut json| {
            json.push('\n');
            json
        })
        .map_err(|e| Error::Internal(format!("history as JSON: {e}")))
}

fn cells(line: &HistoryLine) -> Vec<String> {
    let mut cells = vec![
        line.run_id.clone(),
        line.since.clone(),
        line.cut.clone(),
        line.status.clone(),
        line.new.to_string(),
        line.persisting.to_string(),
        line.resolved_total().to_string(),
    ];
    cells.extend(Resolution::ALL.iter().map(|r| line.resolved_as(r.as_str()).to_string()));
    cells.push(line.open.to_string());
    cells.push(line.oldest_open_break_on.clone().unwrap_or_default());
    cells
}

/// Column headings short enough for a terminal.
fn short(resolution: Resolution) -> &'static str {
    match resolution {
        Resolution::Receipt => "receipt",
        Resolution::Voided => "voided",
        Resolution::Reversed => "reversed",
        Resolution::NowDue => "now_due",
        Resolution::Reclassified => "reclass",
        Resolution::Expired => "expired",
    }
}
