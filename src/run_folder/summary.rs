//! `summary.json` of a run and its human-readable rendering.

use std::collections::BTreeMap;

use datafusion::arrow::array::{Array, BooleanArray, StringArray, TimestampMicrosecondArray};
use datafusion::arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::vocabulary::{Lifecycle, RunStatus, SkipVerdict, UnknownName, Verdict};

/// Format tag of `summary.json`.
pub const SUMMARY_FORMAT: &str = "effect-recon/summary@1";

/// Counts of one (effect, class, verdict).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FindingCount {
    /// The rule's effect.
    pub effect: String,
    /// Finding class, as written (the counts sort by its text).
    pub class: String,
    /// BREAK or PENDING.
    pub verdict: Verdict,
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
    /// The run this one follows (docs/SEMANTICS.md), if any.
    #[serde(default)]
    pub previous_run: Option<String>,
    /// Window start of the chain's first run, RFC 3339.
    #[serde(default)]
    pub origin: String,
    /// How far before the window a late row still makes a NEW finding, e.g. `2d`.
    #[serde(default)]
    pub late_horizon: String,
    /// COMPLETE, or INCOMPLETE when a self-check failed (exit 3).
    #[serde(default)]
    pub status: RunStatus,
    /// Why the run is INCOMPLETE.
    #[serde(default)]
    pub reasons: Vec<String>,
    /// The previous run was made with other rules (findings are matched by finding_id).
    #[serde(default)]
    pub rules_changed: bool,
    /// Rule values the snapshot does not contain (likely typos), with the closest value.
    #[serde(default)]
    pub rule_warnings: Vec<String>,
    /// BREAK findings first seen in this run.
    #[serde(default)]
    pub new: u64,
    /// BREAK findings open since an earlier run.
    #[serde(default)]
    pub persisting: u64,
    /// Previous open findings closed by this run, by resolution.
    #[serde(default)]
    pub resolved: BTreeMap<String, u64>,
    /// PERSISTING findings this snapshot could not re-check (kept as they were).
    #[serde(default)]
    pub not_rechecked: u64,
    /// Open backlog: new + persisting.
    #[serde(default)]
    pub open: u64,
    /// The earliest first_break_on among open findings, RFC 3339.
    #[serde(default)]
    pub oldest_open_break_on: Option<String>,
}

impl Summary {
    /// Number of BREAK findings.
    pub fn breaks(&self) -> u64 {
        self.verdicts.get(Verdict::Break.as_str()).copied().unwrap_or(0)
    }

    /// Number of PENDING findings.
    pub fn pending(&self) -> u64 {
        self.verdicts.get(Verdict::Pending.as_str()).copied().unwrap_or(0)
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
                "effect",
                "class",
                Verdict::Break,
                Verdict::Pending
            ));
            let mut rows: BTreeMap<(&str, &str), (u64, u64)> = BTreeMap::new();
            for f in &self.findings {
                let entry = rows.entry((&f.effect, &f.class)).or_default();
                if f.verdict == Verdict::Break {
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
        let skips: Vec<String> = SkipVerdict::ALL
            .iter()
            .map(|v| format!("{v} {}", self.skip_verdicts.get(v.as_str()).copied().unwrap_or(0)))
            .collect();
        out.push_str(&format!("skip verdicts: {}\n", skips.join(", ")));
        out.push_str(&format!("compensation tasks: {}\n", self.compensation_tasks));
        out.push_str(&self.render_lifecycle());
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
    /// The chain, the backlog and the status, e.g.
    /// `lifecycle: NEW 3, PERSISTING 2 (1 not re-checked), RESOLVED 4 (RECEIPT 3, VOIDED 1); open 5, oldest 2026-11-27T16:30:00Z`.
    fn render_lifecycle(&self) -> String {
        let mut out = String::new();
        match &self.previous_run {
            Some(previous) => out.push_str(&format!(
                "follows: run {previous} (chain origin {}){}\n",
                self.origin,
                if self.rules_changed { "; the rules changed since" } else { "" }
            )),
            None => {
                out.push_str(&format!("follows: no previous run (chain origin {})\n", self.origin))
            }
        }
        let resolved: u64 = self.resolved.values().sum();
        let by_resolution: Vec<String> =
            self.resolved.iter().map(|(k, v)| format!("{k} {v}")).collect();
        out.push_str(&format!(
            "lifecycle: NEW {}, PERSISTING {} ({} not re-checked), RESOLVED {}{}; open {}{}\n",
            self.new,
            self.persisting,
            self.not_rechecked,
            resolved,
            if by_resolution.is_empty() {
                String::new()
            } else {
                format!(" ({})", by_resolution.join(", "))
            },
            self.open,
            self.oldest_open_break_on
                .as_deref()
                .map(|t| format!(", oldest broke {t}"))
                .unwrap_or_default()
        ));
        for warning in &self.rule_warnings {
            out.push_str(&format!("warning: {warning}\n"));
        }
        out.push_str(&format!("status: {}\n", self.status.as_str()));
        for reason in &self.reasons {
            out.push_str(&format!("  - {reason}\n"));
        }
        out
    }

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
    let mut counts: BTreeMap<(String, String, Verdict), u64> = BTreeMap::new();
    let mut verdicts = BTreeMap::new();
    for row in 0..discrepancies.num_rows() {
        let verdict: Verdict = parsed(verdict.value(row))?;
        *counts.entry((effect.value(row).into(), class.value(row).into(), verdict)).or_default() +=
            1;
        *verdicts.entry(verdict.as_str().to_string()).or_default() += 1;
    }
    let findings = counts
        .into_iter()
        .map(|((effect, class, verdict), count)| FindingCount { effect, class, verdict, count })
        .collect();
    Ok((findings, verdicts))
}

/// The lifecycle counts of a run (docs/SEMANTICS.md).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LifecycleCounts {
    /// BREAK findings first seen in this run.
    pub new: u64,
    /// BREAK findings open since an earlier run.
    pub persisting: u64,
    /// Of the persisting, those this snapshot could not re-check.
    pub not_rechecked: u64,
    /// Closed findings by resolution.
    pub resolved: BTreeMap<String, u64>,
    /// The earliest first_break_on among open findings, µs.
    pub oldest_open_break_on: Option<i64>,
}

/// Counts NEW, PERSISTING, not re-checked and resolved findings, and the oldest open one.
pub fn count_lifecycle(
    discrepancies: &RecordBatch,
    resolved: &RecordBatch,
) -> Result<LifecycleCounts> {
    let lifecycle = column(discrepancies, "lifecycle")?;
    let rechecked = typed::<BooleanArray>(discrepancies, "rechecked")?;
    let first_break_on = typed::<TimestampMicrosecondArray>(discrepancies, "first_break_on")?;
    let mut counts = LifecycleCounts::default();
    for row in 0..discrepancies.num_rows() {
        if lifecycle.is_null(row) {
            continue;
        }
        match parsed(lifecycle.value(row))? {
            Lifecycle::New => counts.new += 1,
            Lifecycle::Persisting => {
                counts.persisting += 1;
                if !rechecked.value(row) {
                    counts.not_rechecked += 1;
                }
            }
        }
        if !first_break_on.is_null(row) {
            let at = first_break_on.value(row);
            counts.oldest_open_break_on =
                Some(counts.oldest_open_break_on.map_or(at, |oldest| oldest.min(at)));
        }
    }
    let resolution = column(resolved, "resolution")?;
    for row in 0..resolved.num_rows() {
        *counts.resolved.entry(resolution.value(row).to_string()).or_default() += 1;
    }
    Ok(counts)
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

/// A vocabulary value the run's own SQL wrote; anything else is a broken invariant.
fn parsed<T: std::str::FromStr<Err = UnknownName>>(text: &str) -> Result<T> {
    text.parse().map_err(|e: UnknownName| Error::Internal(format!("summary: {e}")))
}

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a StringArray> {
    typed(batch, name)
}

fn typed<'a, T: Array + 'static>(batch: &'a RecordBatch, name: &str) -> Result<&'a T> {
    batch.column_by_name(name).and_then(|c| c.as_any().downcast_ref::<T>()).ok_or_else(|| {
        Error::Internal(format!("summary: output column {name} missing or of another type"))
    })
}
