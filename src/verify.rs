//! `verify`: a run's outputs held against a ground truth (the `truth.parquet` of `gen`).
//!
//! Findings are compared on `(effect, order_id)` → `(class, verdict)` and skip verdicts
//! on `msg_id` → `(order_id, verdict)`, exactly. The run is read through its manifest
//! (never a directory listing), and the truth must be for the run's own cut, window and
//! rules, or the comparison would be meaningless.

use std::collections::BTreeMap;

use bytes::Bytes;
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::error::{Error, Result};
use crate::output::{read_run_manifest, RunManifest};
use crate::storage::Location;
use crate::workload::truth::{FINDING, META_CUT, META_RULES_HASH, META_SINCE, SKIP_VERDICT};

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
        for (title, scores) in [("finding class", &self.classes), ("skip verdict", &self.verdicts)]
        {
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
type Judged = (String, String);

/// The rows of one side (truth or run).
#[derive(Debug, Default)]
struct Side {
    findings: BTreeMap<FindingKey, Judged>,
    skips: BTreeMap<String, (i64, String)>,
    duplicates: Vec<String>,
}

impl Side {
    fn add_finding(
        &mut self,
        effect: String,
        order_id: i64,
        class: String,
        verdict: String,
        source: &str,
    ) {
        if let Some(previous) =
            self.findings.insert((effect.clone(), order_id), (class.clone(), verdict))
        {
            self.duplicates.push(format!(
                "{source}: two findings for {effect} order {order_id} ({} and {class})",
                previous.0
            ));
        }
    }

    fn add_skip(&mut self, msg_id: String, order_id: i64, verdict: String, source: &str) {
        if self.skips.insert(msg_id.clone(), (order_id, verdict)).is_some() {
            self.duplicates.push(format!("{source}: two skip verdicts for {msg_id}"));
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
            }
        })?;
    let truth_name = plan.truth_folder.display(&plan.truth_file);
    let manifest = read_run_manifest(&plan.run).await?;
    let (truth_batches, metadata) = read_parquet(truth_bytes, &truth_name)?;
    check_context(&metadata, &manifest, &truth_name)?;
    let truth = read_truth(&truth_batches, &truth_name)?;
    let run = read_run(&plan.run, &manifest).await?;
    Ok(compare(&truth, &run))
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
            None => return Err(Error::SnapshotFile { file: truth.into(), message: format!("no '{key}' in the schema metadata: not a truth file of gen") }),
        }
    }
    Ok(())
}

fn read_parquet(
    bytes: Bytes,
    file: &str,
) -> Result<(Vec<RecordBatch>, std::collections::HashMap<String, String>)> {
    let fail = |e: &dyn std::fmt::Display| Error::SnapshotFile {
        file: file.into(),
        message: format!("unreadable Parquet: {e}"),
    };
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(|e| fail(&e))?;
    let metadata = builder.schema().metadata().clone();
    let batches = builder
        .build()
        .map_err(|e| fail(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(&e))?;
    Ok((batches, metadata))
}

fn read_truth(batches: &[RecordBatch], file: &str) -> Result<Side> {
    let mut side = Side::default();
    for batch in batches {
        let kind = strings(batch, "kind", file)?;
        let effect = strings(batch, "effect", file)?;
        let order_id = ints(batch, "order_id", file)?;
        let class = strings(batch, "class", file)?;
        let verdict = strings(batch, "verdict", file)?;
        let msg_id = strings(batch, "msg_id", file)?;
        for row in 0..batch.num_rows() {
            let text = |column: &Vec<Option<String>>, name: &str| {
                column[row].clone().ok_or_else(|| Error::Column {
                    file: file.into(),
                    column: name.into(),
                    message: format!("row {row} is NULL"),
                })
            };
            match kind[row].as_deref() {
                Some(FINDING) => side.add_finding(
                    text(&effect, "effect")?,
                    order_id[row],
                    text(&class, "class")?,
                    text(&verdict, "verdict")?,
                    "truth",
                ),
                Some(SKIP_VERDICT) => side.add_skip(
                    text(&msg_id, "msg_id")?,
                    order_id[row],
                    text(&verdict, "verdict")?,
                    "truth",
                ),
                other => {
                    return Err(Error::Column {
                        file: file.into(),
                        column: "kind".into(),
                        message: format!("row {row} has kind {other:?}"),
                    })
                }
            }
        }
    }
    Ok(side)
}

async fn read_run(folder: &Location, manifest: &RunManifest) -> Result<Side> {
    let mut side = Side::default();
    for batch in &read_table(folder, manifest, "discrepancies").await? {
        let shown = folder.display("discrepancies");
        let (effect, order_id, class, verdict) = (
            strings(batch, "effect", &shown)?,
            ints(batch, "order_id", &shown)?,
            strings(batch, "class", &shown)?,
            strings(batch, "verdict", &shown)?,
        );
        for row in 0..batch.num_rows() {
            let get = |c: &Vec<Option<String>>| c[row].clone().unwrap_or_default();
            side.add_finding(get(&effect), order_id[row], get(&class), get(&verdict), "run");
        }
    }
    for batch in &read_table(folder, manifest, "skip_verdicts").await? {
        let shown = folder.display("skip_verdicts");
        let (msg_id, order_id, verdict) = (
            strings(batch, "msg_id", &shown)?,
            ints(batch, "order_id", &shown)?,
            strings(batch, "verdict", &shown)?,
        );
        for row in 0..batch.num_rows() {
            let get = |c: &Vec<Option<String>>| c[row].clone().unwrap_or_default();
            side.add_skip(get(&msg_id), order_id[row], get(&verdict), "run");
        }
    }
    Ok(side)
}

/// Every file the run manifest lists for `table`, with its row count checked.
async fn read_table(
    folder: &Location,
    manifest: &RunManifest,
    table: &str,
) -> Result<Vec<RecordBatch>> {
    let files = manifest.tables.get(table).map(|t| t.files.as_slice()).unwrap_or_default();
    let mut batches = Vec::new();
    for file in files {
        let shown = folder.display(&file.path);
        let bytes = folder.read_optional(&file.path).await?.ok_or_else(|| Error::SnapshotFile {
            file: shown.clone(),
            message: "listed in manifest.json but absent".into(),
        })?;
        let (mut read, _) = read_parquet(bytes, &shown)?;
        let rows: usize = read.iter().map(RecordBatch::num_rows).sum();
        if rows as u64 != file.rows {
            return Err(Error::SnapshotFile {
                file: shown,
                message: format!("holds {rows} rows but manifest.json says {}", file.rows),
            });
        }
        batches.append(&mut read);
    }
    Ok(batches)
}

fn strings(batch: &RecordBatch, name: &str, file: &str) -> Result<Vec<Option<String>>> {
    let fail = |message: String| Error::Column { file: file.into(), column: name.into(), message };
    let column = batch.column_by_name(name).ok_or_else(|| fail("missing".into()))?;
    let column = cast(column, &DataType::Utf8).map_err(|e| fail(format!("not text: {e}")))?;
    Ok(column.as_string::<i32>().iter().map(|v| v.map(str::to_string)).collect())
}

fn ints(batch: &RecordBatch, name: &str, file: &str) -> Result<Vec<i64>> {
    let fail = |message: String| Error::Column { file: file.into(), column: name.into(), message };
    let column = batch.column_by_name(name).ok_or_else(|| fail("missing".into()))?;
    let column = column
        .as_primitive_opt::<Int64Type>()
        .ok_or_else(|| fail(format!("has type {}, expected Int64", column.data_type())))?;
    if column.null_count() > 0 {
        return Err(fail("holds NULLs".into()));
    }
    Ok(column.values().to_vec())
}

fn compare(truth: &Side, run: &Side) -> VerifyReport {
    let mut mismatches: Vec<String> =
        truth.duplicates.iter().chain(&run.duplicates).cloned().collect();
    let mut classes: BTreeMap<String, Score> = BTreeMap::new();
    for ((effect, order_id), expected) in &truth.findings {
        entry(&mut classes, &expected.0).expected += 1;
        match run.findings.get(&(effect.clone(), *order_id)) {
            Some(got) if got == expected => entry(&mut classes, &expected.0).matched += 1,
            Some(got) => mismatches.push(format!(
                "finding {effect} order {order_id}: expected {}/{}, run has {}/{}",
                expected.0, expected.1, got.0, got.1
            )),
            None => mismatches.push(format!(
                "finding {effect} order {order_id}: expected {}/{}, run has none",
                expected.0, expected.1
            )),
        }
    }
    for ((effect, order_id), got) in &run.findings {
        entry(&mut classes, &got.0).reported += 1;
        if !truth.findings.contains_key(&(effect.clone(), *order_id)) {
            mismatches.push(format!(
                "finding {effect} order {order_id}: run has {}/{}, truth has none",
                got.0, got.1
            ));
        }
    }
    let mut verdicts: BTreeMap<String, Score> = BTreeMap::new();
    for (msg_id, expected) in &truth.skips {
        entry(&mut verdicts, &expected.1).expected += 1;
        match run.skips.get(msg_id) {
            Some(got) if got == expected => entry(&mut verdicts, &expected.1).matched += 1,
            Some(got) => mismatches.push(format!(
                "skip {msg_id} (order {}): expected {}, run has {} (order {})",
                expected.0, expected.1, got.1, got.0
            )),
            None => mismatches.push(format!(
                "skip {msg_id} (order {}): expected {}, run has none",
                expected.0, expected.1
            )),
        }
    }
    for (msg_id, got) in &run.skips {
        entry(&mut verdicts, &got.1).reported += 1;
        if !truth.skips.contains_key(msg_id) {
            mismatches.push(format!(
                "skip {msg_id} (order {}): run has {}, truth has none",
                got.0, got.1
            ));
        }
    }
    let mismatch_count = mismatches.len();
    mismatches.truncate(LISTED_MISMATCHES);
    VerifyReport {
        classes: classes.into_values().collect(),
        verdicts: verdicts.into_values().collect(),
        mismatches,
        mismatch_count,
    }
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
            s.add_finding(e.to_string(), *o, c.to_string(), v.to_string(), "t")
        });
        skips.iter().for_each(|(m, o, v)| s.add_skip(m.to_string(), *o, v.to_string(), "t"));
        s
    }

    #[test]
    fn equal_sides_are_exact() {
        let a = side(&[("points_grant", 1, "SKIPPED_BUT_DUE", "BREAK")], &[("m1", 1, "WRONG")]);
        let b = side(&[("points_grant", 1, "SKIPPED_BUT_DUE", "BREAK")], &[("m1", 1, "WRONG")]);
        let report = compare(&a, &b);
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
        let report = compare(&truth, &run);
        assert_eq!(report.mismatch_count, 4, "{:#?}", report.mismatches);
        let skipped = report.classes.iter().find(|s| s.label == "SKIPPED_BUT_DUE").unwrap();
        assert_eq!((skipped.expected, skipped.reported, skipped.matched), (1, 1, 0));
        assert_eq!(report.verdicts[0].recall(), 0.0);
    }

    #[test]
    fn truth_paths_split_into_folder_and_file() {
        let plan = VerifyPlan::parse("/tmp/snap/truth.parquet", "/tmp/out/run=x").unwrap();
        assert_eq!(plan.truth_file, "truth.parquet");
        assert!(plan.truth_folder.display("").ends_with("/tmp/snap"));
        assert_eq!(
            VerifyPlan::parse("truth.parquet", "/tmp/r").unwrap().truth_file,
            "truth.parquet"
        );
    }
}
