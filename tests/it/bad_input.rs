//! Every kind of bad input gets its own clear error naming the file, column or rule,
//! and no run manifest is written.

use std::path::Path;

use effect_recon::config::RuleSet;
use effect_recon::datafusion::arrow::array::{
    ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray,
};
use effect_recon::datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use effect_recon::datafusion::parquet::arrow::ArrowWriter;
use std::sync::Arc;

use super::common::*;

/// A writable copy of the tiny snapshot.
pub(crate) fn copy_tiny() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("snapshot");
    for (name, bytes) in tree_bytes(&repo("fixtures/tiny/snapshot")) {
        let path = target.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    (dir, target)
}

/// Runs on `snapshot` and returns the error text; asserts no run manifest appeared.
async fn run_error(snapshot: &Path) -> String {
    run_error_with(snapshot, |_| {}).await
}

async fn run_error_with(
    snapshot: &Path,
    adjust: impl FnOnce(&mut effect_recon::recon::RunPlan),
) -> String {
    let out_dir = tempfile::tempdir().unwrap();
    let out = effect_recon::storage::Location::parse(out_dir.path().to_str().unwrap()).unwrap();
    let location = effect_recon::storage::Location::parse(snapshot.to_str().unwrap()).unwrap();
    let mut plan = plan(&location, &out);
    adjust(&mut plan);
    let err = run(&plan).await.expect_err("bad input must fail");
    let manifests: Vec<_> = tree_bytes(out_dir.path())
        .into_iter()
        .filter(|(n, _)| n.ends_with("manifest.json"))
        .collect();
    assert!(manifests.is_empty(), "a failed run wrote a manifest");
    err.to_string()
}

/// Rewrites the ledger file with one batch and fixes the manifest's row count and hash.
pub(crate) fn replace_ledger(snapshot: &Path, batch: &RecordBatch) {
    let path = snapshot.join("ledger/part-00000.parquet");
    let mut bytes = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut bytes, batch.schema(), None).unwrap();
    writer.write(batch).unwrap();
    writer.close().unwrap();
    std::fs::write(&path, &bytes).unwrap();
    let manifest_path = snapshot.join("manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    manifest["tables"]["ledger"]["files"][0]["rows"] = serde_json::json!(batch.num_rows());
    std::fs::write(&manifest_path, serde_json::to_vec(&manifest).unwrap()).unwrap();
}

/// A one-row ledger batch; `change` may swap columns and fields.
pub(crate) fn ledger_batch(
    change: impl FnOnce(&mut Vec<Field>, &mut Vec<ArrayRef>),
) -> RecordBatch {
    let schema = effect_recon::snapshot::Table::Ledger.schema();
    let mut fields: Vec<Field> =
        schema.fields().iter().map(|f| f.as_ref().clone().with_nullable(true)).collect();
    let text = |v: &str| Arc::new(StringArray::from(vec![Some(v), Some(v)])) as ArrayRef;
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec!["m-1", "m-2"])),
        Arc::new(Int64Array::from(vec![1, 2])),
        text("ORDER_PAID"),
        text("PAID"),
        text("DONE"),
        text("PAID"),
        text("order-event"),
        Arc::new(Int32Array::from(vec![1, 1])),
        Arc::new(Int64Array::from(vec![10, 11])),
        text("consumer-0"),
        Arc::new(TimestampMillisecondArray::from(vec![1_764_400_000_000, 1_764_400_000_000])),
    ];
    fields[10] = Field::new("decided_at", DataType::Timestamp(TimeUnit::Millisecond, None), true);
    change(&mut fields, &mut columns);
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
}

#[tokio::test]
async fn missing_manifest() {
    let (_dir, snapshot) = copy_tiny();
    std::fs::remove_file(snapshot.join("manifest.json")).unwrap();
    let err = run_error(&snapshot).await;
    assert!(err.contains("no manifest.json"), "{err}");
}

#[tokio::test]
async fn listed_file_absent() {
    let (_dir, snapshot) = copy_tiny();
    std::fs::remove_file(snapshot.join("status_history/part-00000.parquet")).unwrap();
    let err = run_error(&snapshot).await;
    assert!(err.contains("status_history/part-00000.parquet") && err.contains("absent"), "{err}");
}

#[tokio::test]
async fn listed_file_unreadable() {
    let (_dir, snapshot) = copy_tiny();
    std::fs::write(snapshot.join("receipts/wms/part-00000.parquet"), b"not parquet at all")
        .unwrap();
    let err = run_error(&snapshot).await;
    assert!(
        err.contains("receipts/wms/part-00000.parquet") && err.contains("unreadable Parquet"),
        "{err}"
    );
}

#[tokio::test]
async fn row_count_differs_from_manifest() {
    let (_dir, snapshot) = copy_tiny();
    let manifest_path = snapshot.join("manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    manifest["tables"]["status_history"]["files"][0]["rows"] = serde_json::json!(999);
    std::fs::write(&manifest_path, serde_json::to_vec(&manifest).unwrap()).unwrap();
    let err = run_error(&snapshot).await;
    assert!(
        err.contains("status_history/part-00000.parquet") && err.contains("manifest.json says 999"),
        "{err}"
    );
}

#[tokio::test]
async fn column_with_wrong_type() {
    let (_dir, snapshot) = copy_tiny();
    replace_ledger(
        &snapshot,
        &ledger_batch(|fields, columns| {
            fields[1] = Field::new("order_id", DataType::Utf8, true);
            columns[1] = Arc::new(StringArray::from(vec!["1", "2"]));
        }),
    );
    let err = run_error(&snapshot).await;
    assert!(
        err.contains("ledger/part-00000.parquet")
            && err.contains("column order_id")
            && err.contains("expected Int64"),
        "{err}"
    );
}

#[tokio::test]
async fn column_missing() {
    let (_dir, snapshot) = copy_tiny();
    replace_ledger(
        &snapshot,
        &ledger_batch(|fields, columns| {
            fields.remove(4);
            columns.remove(4);
        }),
    );
    let err = run_error(&snapshot).await;
    assert!(err.contains("column action") && err.contains("missing"), "{err}");
}

#[tokio::test]
async fn null_order_id() {
    let (_dir, snapshot) = copy_tiny();
    replace_ledger(
        &snapshot,
        &ledger_batch(|_, columns| columns[1] = Arc::new(Int64Array::from(vec![Some(1), None]))),
    );
    let err = run_error(&snapshot).await;
    assert!(err.contains("column order_id") && err.contains("row 1 is NULL"), "{err}");
}

#[tokio::test]
async fn null_msg_id() {
    let (_dir, snapshot) = copy_tiny();
    replace_ledger(
        &snapshot,
        &ledger_batch(|_, columns| {
            columns[0] = Arc::new(StringArray::from(vec![None, Some("m-2")]))
        }),
    );
    let err = run_error(&snapshot).await;
    assert!(err.contains("column msg_id") && err.contains("row 0 is NULL"), "{err}");
}

#[tokio::test]
async fn duplicate_msg_id() {
    let (_dir, snapshot) = copy_tiny();
    replace_ledger(
        &snapshot,
        &ledger_batch(|_, columns| columns[0] = Arc::new(StringArray::from(vec!["m-1", "m-1"]))),
    );
    let err = run_error(&snapshot).await;
    assert!(err.contains("duplicate msg_id 'm-1'") && err.contains("2 rows"), "{err}");
}

#[tokio::test]
async fn duplicate_msg_id_is_found_when_its_hashes_spill_to_disk() {
    // 400,000 ledger rows (the tiny ledger's rows repeated, each with a msg_id of its own
    // but two) take 3.2 MB of msg_id hashes: under a 1 MiB limit they are sorted in shards
    // spilled to disk (src/snapshot/unique_keys.rs), and the duplicate is still found.
    use effect_recon::datafusion::arrow::compute::take;
    use effect_recon::datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let (_dir, snapshot) = copy_tiny();
    let file = std::fs::File::open(snapshot.join("ledger/part-00000.parquet")).unwrap();
    let tiny = ParquetRecordBatchReaderBuilder::try_new(file).unwrap().build().unwrap();
    let tiny = tiny.map(Result::unwrap).next().unwrap();
    let rows = 400_000u32;
    let indices = effect_recon::datafusion::arrow::array::UInt32Array::from_iter_values(
        (0..rows).map(|i| i % tiny.num_rows() as u32),
    );
    let mut columns: Vec<ArrayRef> =
        tiny.columns().iter().map(|c| take(c, &indices, None).unwrap()).collect();
    let ids = (0..rows).map(|i| if i == 70_001 { "m-dup-7".into() } else { format!("m-dup-{i}") });
    columns[0] = Arc::new(StringArray::from_iter_values(ids));
    replace_ledger(&snapshot, &RecordBatch::try_new(tiny.schema(), columns).unwrap());
    let err = run_error_with(&snapshot, |plan| {
        plan.session = plan.session.clone().with_memory_limit(1 << 20)
    })
    .await;
    assert!(err.contains("duplicate msg_id 'm-dup-7' (2 rows)"), "{err}");
}

#[tokio::test]
async fn other_timestamp_units_and_naive_zones_are_accepted() {
    // The helper writes decided_at as a naive millisecond timestamp: accepted, read as UTC.
    let (_dir, snapshot) = copy_tiny();
    replace_ledger(&snapshot, &ledger_batch(|_, _| {}));
    let out_dir = tempfile::tempdir().unwrap();
    let out = effect_recon::storage::Location::parse(out_dir.path().to_str().unwrap()).unwrap();
    let location = effect_recon::storage::Location::parse(snapshot.to_str().unwrap()).unwrap();
    run(&plan(&location, &out)).await.unwrap();
}

fn rules_error(text: &str) -> String {
    RuleSet::parse(text, "bad-rules.toml").unwrap_err().to_string()
}

const GOOD_RULE: &str = "[[rule]]\neffect='points_grant'\ntrigger_event='ORDER_PAID'\ndue_status='PAID'\ngrace='30m'\ncompensation='GRANT_POINTS'\npriority=1\n";

#[test]
fn unknown_rule_field() {
    let err = rules_error(&format!("{GOOD_RULE}colour='red'\n"));
    assert!(
        err.contains("bad-rules.toml") && err.contains("unknown field") && err.contains("colour"),
        "{err}"
    );
}

#[test]
fn bad_grace() {
    let err = rules_error(&GOOD_RULE.replace("30m", "30 minutes"));
    assert!(err.contains("rule 1") && err.contains("grace") && err.contains("30 minutes"), "{err}");
}

#[test]
fn two_rules_for_one_effect() {
    let err = rules_error(&format!("{GOOD_RULE}{GOOD_RULE}"));
    assert!(
        err.contains("rule 2") && err.contains("points_grant") && err.contains("two rules"),
        "{err}"
    );
}

#[test]
fn reverse_on_void_without_a_reversal() {
    let err = rules_error(&format!("{GOOD_RULE}reverse_on_void=true\n"));
    assert!(
        err.contains("bad-rules.toml")
            && err.contains("rule 1")
            && err.contains("(points_grant) reverse_on_void = true needs 'reversal'"),
        "{err}"
    );
}

#[test]
fn a_reversal_without_receipts_of_its_effect_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.toml");
    let coupon = GOOD_RULE.replace("points_grant", "coupon_refund").replace("GRANT_POINTS", "X");
    std::fs::write(&rules, format!("{GOOD_RULE}{coupon}reversal='REVOKE_COUPON'\n")).unwrap();
    let snapshot = repo("fixtures/tiny/snapshot");
    let output = crate::common::effect_recon(&[
        "run",
        "--snapshot",
        snapshot.to_str().unwrap(),
        "--out",
        dir.path().join("out").to_str().unwrap(),
        "--rules",
        rules.to_str().unwrap(),
    ]);
    let (_, stderr) = crate::common::text(&output);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(
            "rule coupon_refund: reversal \"REVOKE_COUPON\" can never be asked for: no receipts source delivers effect \"coupon_refund\""
        ),
        "{stderr}"
    );
}

#[tokio::test]
async fn since_not_before_cut() {
    let err = run_error_with(&repo("fixtures/tiny/snapshot"), |plan| {
        plan.since = Some(effect_recon::time::parse_instant(TINY_CUT).unwrap());
    })
    .await;
    assert!(err.contains("--since") && err.contains("must be earlier than the cut"), "{err}");
}

#[tokio::test]
async fn cut_after_the_snapshot_cut() {
    let err = run_error_with(&repo("fixtures/tiny/snapshot"), |plan| {
        plan.cut = Some(effect_recon::time::parse_instant("2026-11-30T00:00:00Z").unwrap());
    })
    .await;
    assert!(err.contains("--cut") && err.contains("after the snapshot's cut"), "{err}");
}

#[tokio::test]
async fn memory_limit_too_small_is_a_clear_error_not_an_abort() {
    let err = run_error_with(&repo("fixtures/tiny/snapshot"), |plan| {
        plan.session.memory_limit = Some(1024)
    })
    .await;
    assert!(
        err.contains("out of memory under --memory-limit")
            && err.contains("hint: raise --memory-limit"),
        "{err}"
    );
}

#[tokio::test]
async fn files_the_manifest_does_not_list_are_never_read() {
    // A half-written part from a crashed writer sits beside the listed ones.
    let (_dir, snapshot) = copy_tiny();
    std::fs::write(snapshot.join("ledger/part-00001.parquet"), b"half-written garbage").unwrap();
    std::fs::write(snapshot.join("ledger/part-00000.parquet.tmp"), b"more garbage").unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    let out = effect_recon::storage::Location::parse(out_dir.path().to_str().unwrap()).unwrap();
    let location = effect_recon::storage::Location::parse(snapshot.to_str().unwrap()).unwrap();
    let report = run(&plan(&location, &out)).await.unwrap();
    assert_eq!(report.summary.inputs.get("ledger"), Some(&25));
    assert_eq!(report.summary.breaks(), 17);
}

#[tokio::test]
async fn large_and_view_strings_and_zoned_nanosecond_timestamps_are_accepted() {
    use effect_recon::datafusion::arrow::array::{
        LargeStringArray, StringViewArray, TimestampNanosecondArray,
    };
    let (_dir, snapshot) = copy_tiny();
    replace_ledger(
        &snapshot,
        &ledger_batch(|fields, columns| {
            fields[0] = Field::new("msg_id", DataType::LargeUtf8, false);
            columns[0] = Arc::new(LargeStringArray::from(vec!["m-1", "m-2"]));
            fields[2] = Field::new("event_type", DataType::Utf8View, false);
            columns[2] = Arc::new(StringViewArray::from(vec!["ORDER_PAID", "ORDER_PAID"]));
            columns[4] = Arc::new(StringArray::from(vec!["SKIPPED", "SKIPPED"]));
            // 2026-11-29T23:50+08:00 = 15:50Z (10 minutes before the cut: PENDING) and
            // 2026-11-29T18:00+08:00 = 10:00Z (CORRECT). Read as wall times in UTC, the first
            // would fall after the cut and get no verdict.
            fields[10] = Field::new(
                "decided_at",
                DataType::Timestamp(TimeUnit::Nanosecond, Some("+08:00".into())),
                false,
            );
            columns[10] = Arc::new(
                TimestampNanosecondArray::from(vec![
                    1_795_967_400_000_000_000,
                    1_795_946_400_000_000_001,
                ])
                .with_timezone("+08:00"),
            );
        }),
    );
    let out_dir = tempfile::tempdir().unwrap();
    let out = effect_recon::storage::Location::parse(out_dir.path().to_str().unwrap()).unwrap();
    let location = effect_recon::storage::Location::parse(snapshot.to_str().unwrap()).unwrap();
    let report = run(&plan(&location, &out)).await.unwrap();
    assert_eq!(report.summary.inputs.get("ledger"), Some(&2));
    assert_eq!(report.summary.skip_verdicts.get("PENDING"), Some(&1));
    assert_eq!(report.summary.skip_verdicts.get("CORRECT"), Some(&1));
}
