//! `verify`: a run's outputs held against a ground truth (the `truth.parquet` of `gen`).
//!
//! Findings are compared on `(effect, order_id)` → `(class, verdict)` and skip verdicts
//! on `msg_id` → `(order_id, verdict)`, exactly. When the truth has the §9 lifecycle
//! columns (`gen --nights`), findings are also compared on `lifecycle, first_seen_run,
//! first_break_on, runs_open, rechecked`, skip verdicts on `lifecycle`, and the run's
//! `resolved` table on `(effect, order_id)` → `(class, first_seen_run, first_break_on,
//! runs_open, resolution, receipt_id)`. The run is read through its manifest (never a
//! directory listing), and the truth must be for the run's own cut, window and rules, or
//! the comparison would be meaningless. [`verify_nights`] walks a whole `gen --nights`
//! root, pairing each `snapshot=<id>` with `run=<id>`.

use std::collections::BTreeMap;

use datafusion::arrow::record_batch::RecordBatch;

mod columns;
mod nights;

pub use nights::{verify_nights, NightVerified, NightsVerifyReport};

use crate::error::{Error, Result};
use crate::run_folder::{read_run_manifest, reader, OutputTable, RunManifest};
use crate::storage::parquet_parts::read_parquet;
use crate::storage::Location;
use crate::vocabulary::RunStatus;
use crate::workload::night_truth::{META_ORIGIN, META_PREVIOUS_RUN, RESOLVED};
use crate::workload::truth::{FINDING, META_CUT, META_RULES_HASH, META_SINCE, SKIP_VERDICT};
use columns::{ints, Columns};

/// How many mismatches a report lists.
pub const LISTED_MISMATCHES: usize = 20;

/// A validated request: a truth file and a run folder.
#[derive(Debug, Clone)]
pub struct VerifyPlan {
    /// The folder holding the truth file.
    pub truth_folder: Location,
    /// The truth file's name in that folder.
    pub truth_file: String,
    /// The run folder (`<out>/run=<id>`).
    pub run: Location,
}

impl VerifyPlan {
    /// A plan from a truth file path or URL and a run folder.
    pub fn parse(truth: &str, run: &str) -> Result<Self> {
        let (folder, file) = match truth.trim_end_matches('/').rsplit_once('/') {
            Some((folder, file))
                if !folder.is_empty() && !folder.ends_with(':') && !folder.ends_with("//") =>
            {
                (folder, file)
            }
            Some(("", file)) => ("/", file),
            _ => (".", truth),
        };
        if file.is_empty() {
            return Err(Error::argument("--truth", format!("'{truth}' does not name a file")));
        }
        Ok(VerifyPlan {
            truth_folder: Location::parse(folder)?,
            truth_file: file.to_string(),
            run: Location::parse(run)?,
        })
    }
}

/// Precision and recall of one class or verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Score {
    /// The class (findings) or verdict (skip verdicts).
    pub label: String,
    /// Rows the truth has.
    pub expected: u64,
    /// Rows the run has.
    pub reported: u64,
    /// Rows equal in both.
    pub matched: u64,
}

impl Score {
    /// matched / reported (1 when nothing was reported).
    pub fn precision(&self) -> f64 {
        if self.reported == 0 {
            1.0
        } else {
            self.matched as f64 / self.reported as f64
        }
    }

    /// matched / expected (1 when nothing was expected).
    pub fn recall(&self) -> f64 {
        if self.expected == 0 {
            1.0
        } else {
            self.matched as f64 / self.expected as f64
        }
    }
}

/// The outcome of a verification.
#[derive(Debug, Clone, Default)]
pub struct VerifyReport {
    /// Per finding class.
    pub classes: Vec<Score>,
    /// Per skip verdict.
    pub verdicts: Vec<Score>,
    /// Per resolution of `resolved` (empty unless the truth has the lifecycle columns).
    pub resolutions: Vec<Score>,
    /// The first [`LISTED_MISMATCHES`] differences.
    pub mismatches: Vec<String>,
    /// How many differences in all.
    pub mismatch_count: usize,
}

impl VerifyReport {
    /// Whether the run equals the truth.
    pub fn is_exact(&self) -> bool {
        self.mismatch_count == 0
    }

    /// An aligned report for the terminal.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let tables = [
            ("finding class", &self.classes),
            ("skip verdict", &self.verdicts),
            ("resolution", &self.resolutions),
        ];
        for (title, scores) in tables.into_iter().filter(|(_, s)| !s.is_empty()) {
            out.push_str(&format!(
                "  {title:18} {:>8} {:>8} {:>8} {:>9} {:>7}\n",
                "expected", "reported", "matched", "precision", "recall"
            ));
            for s in scores {
                out.push_str(&format!(
                    "  {:18} {:>8} {:>8} {:>8} {:>9.4} {:>7.4}\n",
                    s.label,
                    s.expected,
                    s.reported,
                    s.matched,
                    s.precision(),
                    s.recall()
                ));
            }
        }
        if self.is_exact() {
            out.push_str("verify: the run equals the truth exactly\n");
        } else {
            out.push_str(&format!(
                "verify: {} mismatches; the first {}:\n",
                self.mismatch_count,
                self.mismatches.len()
            ));
            for m in &self.mismatches {
                out.push_str(&format!("  {m}\n"));
            }
        }
        out
    }
}

type FindingKey = (String, i64);

/// The §9 columns of a finding row.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Life {
    lifecycle: Option<String>,
    first_seen_run: Option<String>,
    first_break_on: Option<i64>,
    runs_open: Option<i32>,
    rechecked: Option<bool>,
}

/// A finding's class, verdict and, when compared, its lifecycle columns.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Judged {
    class: String,
    verdict: String,
    life: Option<Life>,
}

/// A skip verdict's order, verdict and, when compared, its lifecycle.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Skip {
    order_id: i64,
    verdict: String,
    lifecycle: Option<String>,
}

/// A row of `resolved`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Resolved {
    class: String,
    first_seen_run: Option<String>,
    first_break_on: Option<i64>,
    runs_open: Option<i32>,
    resolution: String,
    receipt_id: Option<String>,
}

/// The rows of one side (truth or run).
#[derive(Debug, Default)]
struct Side {
    findings: BTreeMap<FindingKey, Judged>,
    skips: BTreeMap<String, Skip>,
    resolved: BTreeMap<FindingKey, Resolved>,
    duplicates: Vec<String>,
}

impl Side {
    fn add_finding(&mut self, effect: String, order_id: i64, judged: Judged, source: &str) {
        let class = judged.class.clone();
        if let Some(previous) = self.findings.insert((effect.clone(), order_id), judged) {
            self.duplicates.push(format!(
                "{source}: two findings for {effect} order {order_id} ({} and {class})",
                previous.class
            ));
        }
    }

    fn add_skip(&mut self, msg_id: String, skip: Skip, source: &str) {
        if self.skips.insert(msg_id.clone(), skip).is_some() {
            self.duplicates.push(format!("{source}: two skip verdicts for {msg_id}"));
        }
    }

    fn add_resolved(&mut self, effect: String, order_id: i64, row: Resolved, source: &str) {
        if self.resolved.insert((effect.clone(), order_id), row).is_some() {
            self.duplicates
                .push(format!("{source}: two resolved rows for {effect} order {order_id}"));
        }
    }
}

/// Compares the run with the truth.
pub async fn verify(plan: &VerifyPlan) -> Result<VerifyReport> {
    let truth_bytes =
        plan.truth_folder.read_optional(&plan.truth_file).await?.ok_or_else(|| {
            Error::SnapshotFile {
                file: plan.truth_folder.display(&plan.truth_file),
                message: "no such truth file (gen writes <snapshot>/truth.parquet)".into(),
                source: None,
            }
        })?;
    let truth_name = plan.truth_folder.display(&plan.truth_file);
    let manifest = read_run_manifest(&plan.run).await?;
    let (truth_batches, metadata) = read_truth_file(truth_bytes, &truth_name)?;
    check_context(&metadata, &manifest, &truth_name)?;
    let lifecycle = truth_batches.first().is_some_and(|b| b.column_by_name("lifecycle").is_some());
    let truth = read_truth(&truth_batches, &truth_name, lifecycle)?;
    let run = read_run(&plan.run, &manifest, lifecycle).await?;
    Ok(compare(&truth, &run, lifecycle))
}

/// The truth must be for the run's cut, window and rules.
fn check_context(
    metadata: &std::collections::HashMap<String, String>,
    manifest: &RunManifest,
    truth: &str,
) -> Result<()> {
    let pairs = [
        (META_CUT, &manifest.cut, "cut"),
        (META_SINCE, &manifest.since, "window start"),
        (META_RULES_HASH, &manifest.rules_hash, "rules"),
    ];
    for (key, run_value, what) in pairs {
        match metadata.get(key) {
            Some(value) if value == run_value => {}
            Some(value) => {
                return Err(Error::Mismatch(format!(
                    "{truth} is for {what} {value}, but the run used {run_value}; verify compares a run with the truth of the same cut, window and rules (run with the defaults)"
                )))
            }
            None => return Err(Error::SnapshotFile { file: truth.into(), message: format!("no '{key}' in the schema metadata: not a truth file of gen"), source: None }),
        }
    }
    if metadata.contains_key(META_ORIGIN) {
        check_chain(metadata, manifest, truth)?;
    }
    Ok(())
}

/// A truth of `gen --nights` is for one chain of runs: the run must follow the previous
/// night's run, share the chain's origin, and be COMPLETE.
fn check_chain(
    metadata: &std::collections::HashMap<String, String>,
    manifest: &RunManifest,
    truth: &str,
) -> Result<()> {
    let differs = |what: &str, expected: Option<&String>, got: Option<&str>| {
        Error::Mismatch(format!(
            "{truth} is for a run with {what} {}, but the run has {}; run the nights in cut order into one --out, each following the one before",
            expected.map_or("none", String::as_str),
            got.unwrap_or("none")
        ))
    };
    let previous = metadata.get(META_PREVIOUS_RUN);
    if previous.map(String::as_str) != manifest.previous_run.as_deref() {
        return Err(differs("previous run", previous, manifest.previous_run.as_deref()));
    }
    let origin = metadata.get(META_ORIGIN);
    if origin.map(String::as_str) != manifest.origin.as_deref() {
        return Err(differs("origin", origin, manifest.origin.as_deref()));
    }
    if manifest.status != RunStatus::Complete {
        return Err(Error::Mismatch(format!(
            "the run is {} ({}); the truth is for a COMPLETE run",
            manifest.status.as_str(),
            manifest.reasons.join("; ")
        )));
    }
    Ok(())
}

/// The truth file's batches and schema metadata.
fn read_truth_file(
    bytes: bytes::Bytes,
    file: &str,
) -> Result<(Vec<RecordBatch>, std::collections::HashMap<String, String>)> {
    read_parquet(bytes).map_err(|e| Error::SnapshotFile {
        file: file.into(),
        message: format!("unreadable Parquet: {e}"),
        source: Some(Box::new(e)),
    })
}

fn read_truth(batches: &[RecordBatch], file: &str, lifecycle: bool) -> Result<Side> {
    let mut side = Side::default();
    for batch in batches {
        let columns = Columns { batch, file };
        let kind = columns.text("kind")?;
        let effect = columns.text("effect")?;
        let order_id = ints(batch, "order_id", file)?;
        let class = columns.text("class")?;
        let verdict = columns.text("verdict")?;
        let msg_id = columns.text("msg_id")?;
        let (life, resolved) = if lifecycle {
            (Some(columns.life()?), Some(columns.resolved()?))
        } else {
            (None, None)
        };
        for row in 0..batch.num_rows() {
            let text = |column: &Vec<Option<String>>, name: &str| {
                column[row].clone().ok_or_else(|| Error::Column {
                    file: file.into(),
                    column: name.into(),
                    message: format!("row {row} is NULL"),
                    source: None,
                })
            };
            match kind[row].as_deref() {
                Some(FINDING) => {
                    let judged = Judged {
                        class: text(&class, "class")?,
                        verdict: text(&verdict, "verdict")?,
                        life: life.as_ref().map(|l| l[row].clone()),
                    };
                    side.add_finding(text(&effect, "effect")?, order_id[row], judged, "truth")
                }
                Some(SKIP_VERDICT) => {
                    let skip = Skip {
                        order_id: order_id[row],
                        verdict: text(&verdict, "verdict")?,
                        lifecycle: life.as_ref().and_then(|l| l[row].lifecycle.clone()),
                    };
                    side.add_skip(text(&msg_id, "msg_id")?, skip, "truth")
                }
                Some(RESOLVED) if resolved.is_some() => {
                    let value = resolved.as_ref().map(|r| r[row].clone()).unwrap_or_default();
                    side.add_resolved(text(&effect, "effect")?, order_id[row], value, "truth")
                }
                other => {
                    return Err(Error::Column {
                        file: file.into(),
                        column: "kind".into(),
                        message: format!("row {row} has kind {other:?}"),
                        source: None,
                    })
                }
            }
        }
    }
    Ok(side)
}

async fn read_run(folder: &Location, manifest: &RunManifest, lifecycle: bool) -> Result<Side> {
    let mut side = Side::default();
    for batch in &reader::read_table(folder, manifest, OutputTable::Discrepancies).await? {
        let shown = folder.display(OutputTable::Discrepancies.name());
        let columns = Columns { batch, file: &shown };
        let (effect, order_id, class, verdict) = (
            columns.text("effect")?,
            ints(batch, "order_id", &shown)?,
            columns.text("class")?,
            columns.text("verdict")?,
        );
        let life = if lifecycle { Some(columns.life()?) } else { None };
        for row in 0..batch.num_rows() {
            let get = |c: &Vec<Option<String>>| c[row].clone().unwrap_or_default();
            let judged = Judged {
                class: get(&class),
                verdict: get(&verdict),
                life: life.as_ref().map(|l| l[row].clone()),
            };
            side.add_finding(get(&effect), order_id[row], judged, "run");
        }
    }
    for batch in &reader::read_table(folder, manifest, OutputTable::SkipVerdicts).await? {
        let shown = folder.display(OutputTable::SkipVerdicts.name());
        let columns = Columns { batch, file: &shown };
        let (msg_id, order_id, verdict) =
            (columns.text("msg_id")?, ints(batch, "order_id", &shown)?, columns.text("verdict")?);
        let skip_lifecycle = if lifecycle { Some(columns.text("lifecycle")?) } else { None };
        for row in 0..batch.num_rows() {
            let get = |c: &Vec<Option<String>>| c[row].clone().unwrap_or_default();
            let skip = Skip {
                order_id: order_id[row],
                verdict: get(&verdict),
                lifecycle: skip_lifecycle.as_ref().and_then(|l| l[row].clone()),
            };
            side.add_skip(get(&msg_id), skip, "run");
        }
    }
    if lifecycle {
        if !manifest.tables.contains_key(OutputTable::Resolved.name()) {
            return Err(Error::Mismatch(format!(
                "{} has no 'resolved' table, but the truth has the lifecycle of docs/SEMANTICS.md",
                folder.display("manifest.json")
            )));
        }
        for batch in &reader::read_table(folder, manifest, OutputTable::Resolved).await? {
            let shown = folder.display(OutputTable::Resolved.name());
            let columns = Columns { batch, file: &shown };
            let (effect, order_id) = (columns.text("effect")?, ints(batch, "order_id", &shown)?);
            for (row, resolved) in columns.resolved()?.into_iter().enumerate() {
                let effect = effect[row].clone().unwrap_or_default();
                side.add_resolved(effect, order_id[row], resolved, "run");
            }
        }
    }
    Ok(side)
}

fn compare(truth: &Side, run: &Side, lifecycle: bool) -> VerifyReport {
    let mut mismatches: Vec<String> =
        truth.duplicates.iter().chain(&run.duplicates).cloned().collect();
    let classes = compare_maps(
        &truth.findings,
        &run.findings,
        |j| j.class.clone(),
        |(effect, order_id), j| match &j.life {
            Some(life) => {
                format!("finding {effect} order {order_id}: {}/{} {life:?}", j.class, j.verdict)
            }
            None => format!("finding {effect} order {order_id}: {}/{}", j.class, j.verdict),
        },
        &mut mismatches,
    );
    let verdicts = compare_maps(
        &truth.skips,
        &run.skips,
        |s| s.verdict.clone(),
        |msg_id, s| match &s.lifecycle {
            Some(l) => format!("skip {msg_id} (order {}): {} {l}", s.order_id, s.verdict),
            None => format!("skip {msg_id} (order {}): {}", s.order_id, s.verdict),
        },
        &mut mismatches,
    );
    let resolutions = if lifecycle {
        compare_maps(
            &truth.resolved,
            &run.resolved,
            |r| r.resolution.clone(),
            |(effect, order_id), r| format!("resolved {effect} order {order_id}: {r:?}"),
            &mut mismatches,
        )
    } else {
        Vec::new()
    };
    let mismatch_count = mismatches.len();
    mismatches.truncate(LISTED_MISMATCHES);
    VerifyReport { classes, verdicts, resolutions, mismatches, mismatch_count }
}

/// Compares one kind of row by key; scores by `label`, lists differences with `show`.
fn compare_maps<K: Ord, V: PartialEq>(
    truth: &BTreeMap<K, V>,
    run: &BTreeMap<K, V>,
    label: impl Fn(&V) -> String,
    show: impl Fn(&K, &V) -> String,
    mismatches: &mut Vec<String>,
) -> Vec<Score> {
    let mut scores: BTreeMap<String, Score> = BTreeMap::new();
    for (key, expected) in truth {
        entry(&mut scores, &label(expected)).expected += 1;
        match run.get(key) {
            Some(got) if got == expected => entry(&mut scores, &label(expected)).matched += 1,
            Some(got) => mismatches.push(format!(
                "expected {}; run has {}",
                show(key, expected),
                show(key, got)
            )),
            None => mismatches.push(format!("expected {}; run has none", show(key, expected))),
        }
    }
    for (key, got) in run {
        entry(&mut scores, &label(got)).reported += 1;
        if !truth.contains_key(key) {
            mismatches.push(format!("run has {}; truth has none", show(key, got)));
        }
    }
    scores.into_values().collect()
}

fn entry<'a>(map: &'a mut BTreeMap<String, Score>, label: &str) -> &'a mut Score {
    map.entry(label.to_string()).or_insert_with(|| Score {
        label: label.to_string(),
        expected: 0,
        reported: 0,
        matched: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(findings: &[(&str, i64, &str, &str)], skips: &[(&str, i64, &str)]) -> Side {
        let mut s = Side::default();
        findings.iter().for_each(|(e, o, c, v)| {
            let judged = Judged { class: c.to_string(), verdict: v.to_string(), life: None };
            s.add_finding(e.to_string(), *o, judged, "t")
        });
        skips.iter().for_each(|(m, o, v)| {
            let skip = Skip { order_id: *o, verdict: v.to_string(), lifecycle: None };
            s.add_skip(m.to_string(), skip, "t")
        });
        s
    }

    #[test]
    fn equal_sides_are_exact() {
        let a = side(&[("points_grant", 1, "SKIPPED_BUT_DUE", "BREAK")], &[("m1", 1, "WRONG")]);
        let b = side(&[("points_grant", 1, "SKIPPED_BUT_DUE", "BREAK")], &[("m1", 1, "WRONG")]);
        let report = compare(&a, &b, false);
        assert!(report.is_exact(), "{}", report.render());
        assert_eq!(report.classes[0].precision(), 1.0);
    }

    #[test]
    fn differences_are_counted_and_listed() {
        let truth = side(
            &[
                ("points_grant", 1, "SKIPPED_BUT_DUE", "BREAK"),
                ("wms_lock", 2, "DONE_NO_RECEIPT", "PENDING"),
            ],
            &[("m1", 1, "WRONG")],
        );
        let run = side(
            &[
                ("points_grant", 1, "SKIPPED_BUT_DUE", "PENDING"),
                ("wms_lock", 3, "ORPHAN_EFFECT", "BREAK"),
            ],
            &[],
        );
        let report = compare(&truth, &run, false);
        assert_eq!(report.mismatch_count, 4, "{:#?}", report.mismatches);
        let skipped = report.classes.iter().find(|s| s.label == "SKIPPED_BUT_DUE").unwrap();
        assert_eq!((skipped.expected, skipped.reported, skipped.matched), (1, 1, 0));
        assert_eq!(report.verdicts[0].recall(), 0.0);
    }

    #[test]
    fn lifecycle_columns_and_resolved_rows_are_compared_when_the_truth_has_them() {
        let life = |runs_open| Life {
            lifecycle: Some("PERSISTING".into()),
            first_seen_run: Some("20261128T160000Z".into()),
            first_break_on: Some(1),
            runs_open: Some(runs_open),
            rechecked: Some(true),
        };
        let lived = |runs_open, resolution: &str| {
            let mut s = side(&[], &[]);
            let judged = Judged {
                class: "SKIPPED_BUT_DUE".into(),
                verdict: "BREAK".into(),
                life: Some(life(runs_open)),
            };
            s.add_finding("points_grant".into(), 1, judged, "t");
            let resolved = Resolved { resolution: resolution.into(), ..Resolved::default() };
            s.add_resolved("wms_lock".into(), 1, resolved, "t");
            s
        };
        assert!(compare(&lived(2, "RECEIPT"), &lived(2, "RECEIPT"), true).is_exact());
        let report = compare(&lived(2, "RECEIPT"), &lived(3, "VOIDED"), true);
        assert_eq!(report.mismatch_count, 2, "{:#?}", report.mismatches);
        assert_eq!(report.resolutions.len(), 2);
    }

    #[test]
    fn truth_paths_split_into_folder_and_file() {
        let plan = VerifyPlan::parse("/tmp/snap/truth.parquet", "/tmp/out/run=x").unwrap();
        assert_eq!(plan.truth_file, "truth.parquet");
        assert!(plan.truth_folder.to_string().ends_with("/tmp/snap"));
        assert_eq!(
            VerifyPlan::parse("truth.parquet", "/tmp/r").unwrap().truth_file,
            "truth.parquet"
        );
    }
}
