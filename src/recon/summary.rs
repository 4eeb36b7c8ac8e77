//! `summary.json` of a run and its human-readable rendering.

use std::collections::BTreeMap;

use datafusion::arrow::array::{Array, StringArray};
use datafusion::arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Format tag of `summary.json`.
pub const SUMMARY_FORMAT: &str = "effect-recon/summary@1";

/// Counts of one (effect, class, verdict).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FindingCount {
    /// The rule's effect.
    pub effect: String,
    /// Finding class.
    pub class: String,
    /// BREAK or PENDING.
    pub verdict: String,
    /// How many findings.
    pub count: u64,
}

/// What a run found, read and spent; written as `summary.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    /// Always [`SUMMARY_FORMAT`].
    pub format: String,
    /// The run id.
    pub run_id: String,
    /// Window start (exclusive), RFC 3339.
    pub since: String,
    /// Window end and cut (inclusive), RFC 3339.
    pub cut: String,
    /// Findings by effect × class × verdict, sorted.
    pub findings: Vec<FindingCount>,
    /// Findings by verdict.
    pub verdicts: BTreeMap<String, u64>,
    /// Skip verdicts by verdict.
    pub skip_verdicts: BTreeMap<String, u64>,
    /// Number of compensation tasks.
    pub compensation_tasks: u64,
    /// Rows read per input table (and per receipt source).
    pub inputs: BTreeMap<String, u64>,
    /// Wall time per stage in milliseconds (the only part that changes between identical runs).
    pub timings_ms: BTreeMap<String, u64>,
}

impl Summary {
    /// Number of BREAK findings.
    pub fn breaks(&self) -> u64 {
        self.verdicts.get("BREAK").copied().unwrap_or(0)
    }

    /// Number of PENDING findings.
    pub fn pending(&self) -> u64 {
        self.verdicts.get("PENDING").copied().unwrap_or(0)
    }

    /// A short, aligned report for the terminal.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!("run {}  window ({}, {}]\n", self.run_id, self.since, self.cut));
        out.push_str(&format!("rows read: {}\n", self.render_inputs()));
        if self.findings.is_empty() {
            out.push_str("findings: none\n");
        } else {
            let effect_width =
                self.findings.iter().map(|f| f.effect.len()).max().unwrap_or(6).max(6);
            let class_width = self.findings.iter().map(|f| f.class.len()).max().unwrap_or(5).max(5);
            out.push_str(&format!(
                "findings:\n  {:effect_width$}  {:class_width$}  {:>7}  {:>7}\n",
                "effect", "class", "BREAK", "PENDING"
            ));
            let mut rows: BTreeMap<(&str, &str), (u64, u64)> = BTreeMap::new();
            for f in &self.findings {
                let entry = rows.entry((&f.effect, &f.class)).or_default();
                if f.verdict == "BREAK" {
                    entry.0 += f.count
                } else {
                    entry.1 += f.count
                }
            }
            for ((effect, class), (breaks, pending)) in rows {
                out.push_str(&format!(
                    "  {effect:effect_width$}  {class:class_width$}  {breaks:>7}  {pending:>7}\n"
                ));
            }
            out.push_str(&format!(
                "  {:effect_width$}  {:class_width$}  {:>7}  {:>7}\n",
                "total",
                "",
                self.breaks(),
                self.pending()
            ));
        }
        let skips: Vec<String> = ["WRONG", "PENDING", "HARMLESS", "CORRECT"]
            .iter()
            .map(|v| format!("{v} {}", self.skip_verdicts.get(*v).copied().unwrap_or(0)))
            .collect();
        out.push_str(&format!("skip verdicts: {}\n", skips.join(", ")));
        out.push_str(&format!("compensation tasks: {}\n", self.compensation_tasks));
        let timings: Vec<String> = STAGES
            .iter()
            .filter_map(|stage| self.timings_ms.get(*stage).map(|ms| format!("{stage} {ms}ms")))
            .collect();
        out.push_str(&format!("time: {}\n", timings.join(", ")));
        out
    }
}

/// The stages of a run, in the order they happen.
pub const STAGES: [&str; 3] = ["validate", "reconcile", "write"];

impl Summary {
    /// `ledger 25, status_history 33, receipts 31 (logistics 3, points 15, wms 13)`.
    fn render_inputs(&self) -> String {
        let rows = |name: &str| self.inputs.get(name).copied().unwrap_or(0);
        let sources: Vec<String> = self
            .inputs
            .iter()
            .filter_map(|(name, rows)| {
                name.strip_prefix("receipts/").map(|source| format!("{source} {rows}"))
            })
            .collect();
        format!(
            "ledger {}, status_history {}, receipts {} ({})",
            rows("ledger"),
            rows("status_history"),
            rows("receipts"),
            sources.join(", ")
        )
    }
}

/// Counts findings by (effect, class, verdict) and by verdict.
pub fn count_findings(
    discrepancies: &RecordBatch,
) -> Result<(Vec<FindingCount>, BTreeMap<String, u64>)> {
    let effect = column(discrepancies, "effect")?;
    let class = column(discrepancies, "class")?;
    let verdict = column(discrepancies, "verdict")?;
    let mut counts: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    let mut verdicts = BTreeMap::new();
    for row in 0..discrepancies.num_rows() {
        *counts
            .entry((effect.value(row).into(), class.value(row).into(), verdict.value(row).into()))
            .or_default() += 1;
        *verdicts.entry(verdict.value(row).to_string()).or_default() += 1;
    }
    let findings = counts
        .into_iter()
        .map(|((effect, class, verdict), count)| FindingCount { effect, class, verdict, count })
        .collect();
    Ok((findings, verdicts))
}

/// Counts skip verdicts by verdict.
pub fn count_skip_verdicts(skip_verdicts: &RecordBatch) -> Result<BTreeMap<String, u64>> {
    let verdict = column(skip_verdicts, "verdict")?;
    let mut counts = BTreeMap::new();
    for row in 0..verdict.len() {
        *counts.entry(verdict.value(row).to_string()).or_default() += 1;
    }
    Ok(counts)
}

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a StringArray> {
    batch.column_by_name(name).and_then(|c| c.as_any().downcast_ref::<StringArray>()).ok_or_else(
        || Error::Output { location: "summary".into(), message: format!("column {name} missing") },
    )
}
