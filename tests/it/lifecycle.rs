//! Across nights (docs/SEMANTICS.md) through `run` itself: chained runs on the tiny fixture, the
//! previous run found by default, overlapping windows, byte-identical reruns, the
//! self-checks that make a run INCOMPLETE, refused previous runs, and `history`.

use std::collections::BTreeSet;
use std::path::Path;

use effect_recon::datafusion::arrow::array::{Array, AsArray};
use effect_recon::datafusion::arrow::datatypes::Int32Type;
use effect_recon::datafusion::arrow::record_batch::RecordBatch;
use effect_recon::inspect::history;
use effect_recon::recon::lifecycle::PreviousChoice;
use effect_recon::recon::RunPlan;
use effect_recon::storage::Location;
use effect_recon::time::parse_instant;
use effect_recon::vocabulary::RunStatus;

use super::common::*;

const NOON: &str = "2026-11-29T12:00:00Z";
const NOON_RUN: &str = "run=20261129T120000Z";
const CUT_RUN: &str = "run=20261129T160000Z";

fn strings(batches: &[RecordBatch], column: &str) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for batch in batches {
        let array = batch.column_by_name(column).unwrap();
        let array = effect_recon::datafusion::arrow::compute::cast(
            array,
            &effect_recon::datafusion::arrow::datatypes::DataType::Utf8,
        )
        .unwrap();
        let array = array.as_string::<i32>();
        out.extend((0..array.len()).map(|i| array.is_valid(i).then(|| array.value(i).to_string())));
    }
    out
}

fn ints(batches: &[RecordBatch], column: &str) -> Vec<i32> {
    batches
        .iter()
        .flat_map(|b| {
            b.column_by_name(column).unwrap().as_primitive::<Int32Type>().values().to_vec()
        })
        .collect()
}

/// Finding ids of the BREAK rows of a run's discrepancies.
fn open_ids(folder: &Path) -> BTreeSet<String> {
    let found = read_output(folder, "discrepancies");
    strings(&found, "finding_id")
        .into_iter()
        .zip(strings(&found, "verdict"))
        .filter(|(_, v)| v.as_deref() == Some("BREAK"))
        .map(|(id, _)| id.unwrap())
        .collect()
}

/// Runs the tiny snapshot at noon, then at its own cut following the noon run.
async fn two_nights(out: &Location) -> (RunPlan, RunPlan) {
    let mut noon = plan(&tiny_snapshot(), out);
    noon.cut = Some(parse_instant(NOON).unwrap());
    run(&noon).await.unwrap();
    let evening = plan(&tiny_snapshot(), out);
    run(&evening).await.unwrap();
    (noon, evening)
}

#[tokio::test]
async fn a_chained_run_re_judges_every_open_finding_of_the_previous_run() {
    let (dir, out) = temp_location();
    two_nights(&out).await;
    let (first, second) = (dir.path().join(NOON_RUN), dir.path().join(CUT_RUN));
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(second.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["previous_run"], "20261129T120000Z");
    assert_eq!(summary["since"], NOON, "the window starts at the previous cut");
    assert_eq!(summary["origin"], "2026-11-28T12:00:00Z", "inherited from the first run");
    assert_eq!(summary["status"], "COMPLETE");

    let open_before = open_ids(&first);
    assert!(!open_before.is_empty());
    let found = read_output(&second, "discrepancies");
    let resolved = read_output(&second, "resolved");
    let listed: BTreeSet<String> = strings(&found, "finding_id").into_iter().flatten().collect();
    let closed: BTreeSet<String> = strings(&resolved, "finding_id").into_iter().flatten().collect();
    for id in &open_before {
        assert!(
            listed.contains(id) ^ closed.contains(id),
            "open finding {id} of the first run must be listed or resolved, exactly once"
        );
    }
    let lifecycle = strings(&found, "lifecycle");
    let ids = strings(&found, "finding_id");
    let runs_open = ints(&found, "runs_open");
    let first_seen = strings(&found, "first_seen_run");
    for row in 0..ids.len() {
        let id = ids[row].as_deref().unwrap();
        match lifecycle[row].as_deref() {
            Some("PERSISTING") => {
                assert!(open_before.contains(id));
                assert_eq!(runs_open[row], 2);
                assert_eq!(first_seen[row].as_deref(), Some("20261129T120000Z"));
            }
            Some("NEW") => {
                assert!(!open_before.contains(id), "{id} was open and is NEW again");
                assert_eq!(
                    (runs_open[row], first_seen[row].as_deref()),
                    (1, Some("20261129T160000Z"))
                );
            }
            _ => assert_eq!(runs_open[row], 0, "PENDING rows have runs_open 0"),
        }
    }
    assert_eq!(summary["persisting"], open_before.intersection(&listed).count());
    let tasks = read_output(&second, "compensation_tasks");
    assert_eq!(ints(&tasks, "attempt").len(), summary["open"].as_u64().unwrap() as usize);
}

#[tokio::test]
async fn overlapping_windows_never_make_a_finding_new_twice() {
    let (dir, out) = temp_location();
    let mut noon = plan(&tiny_snapshot(), &out);
    noon.cut = Some(parse_instant(NOON).unwrap());
    run(&noon).await.unwrap();
    let mut evening = plan(&tiny_snapshot(), &out);
    evening.since = Some(parse_instant("2026-11-29T08:00:00Z").unwrap());
    run(&evening).await.unwrap();
    let open_before = open_ids(&dir.path().join(NOON_RUN));
    let found = read_output(&dir.path().join(CUT_RUN), "discrepancies");
    for (id, lifecycle) in
        strings(&found, "finding_id").into_iter().zip(strings(&found, "lifecycle"))
    {
        if open_before.contains(id.as_deref().unwrap()) {
            assert_eq!(lifecycle.as_deref(), Some("PERSISTING"), "{id:?}");
        }
    }
}

#[tokio::test]
async fn a_chained_run_repeated_with_replace_is_byte_identical() {
    let (dir, out) = temp_location();
    let (_, mut evening) = two_nights(&out).await;
    let tables = |root: &Path| {
        ["discrepancies", "compensation_tasks", "skip_verdicts", "resolved"]
            .map(|t| tree_bytes(&root.join(CUT_RUN).join(t)))
    };
    let before = tables(dir.path());
    evening.replace = true;
    let report = run(&evening).await.unwrap();
    assert_eq!(report.summary.previous_run.as_deref(), Some("20261129T120000Z"));
    assert!(before == tables(dir.path()), "a replaced run must write the same bytes");
}

/// The tiny fixture's CSV files, changed by `edit`, as a snapshot at `cut`.
async fn tiny_variant(
    edit: impl Fn(&Path),
    cut: &str,
    coverage_from: Option<&str>,
) -> (tempfile::TempDir, Location) {
    let csv = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(repo("fixtures/tiny/csv")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, csv.path().join(path.file_name().unwrap())).unwrap();
    }
    edit(csv.path());
    let (dir, location) = temp_location();
    snapshot_from_csv(csv.path(), &location, cut).await;
    if let Some(from) = coverage_from {
        // Rewrite the manifest with the exporter's lower bound, as export writes it.
        let manifest_path = dir.path().join("manifest.json");
        let mut manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
        manifest["coverage_from"] = from.into();
        std::fs::write(&manifest_path, serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();
    }
    (dir, location)
}

fn remove(name: &'static str) -> impl Fn(&Path) {
    move |dir: &Path| std::fs::remove_file(dir.join(name)).unwrap()
}

fn keep_lines(name: &'static str, lines: usize) -> impl Fn(&Path) {
    move |dir: &Path| {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        let kept: Vec<&str> = text.lines().take(lines + 1).collect();
        std::fs::write(dir.join(name), kept.join("\n") + "\n").unwrap();
    }
}

#[tokio::test]
async fn an_empty_table_makes_the_run_incomplete() {
    let empty = |dir: &Path| {
        for source in ["logistics", "points", "wms"] {
            keep_lines(Box::leak(format!("receipts_{source}.csv").into_boxed_str()), 0)(dir);
        }
    };
    let (_snap, snapshot) = tiny_variant(empty, TINY_CUT, None).await;
    let (dir, out) = temp_location();
    let report = run(&plan(&snapshot, &out)).await.unwrap();
    assert_eq!(report.summary.status, RunStatus::Incomplete);
    assert_eq!(report.summary.reasons, vec!["table receipts has no rows".to_string()]);
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.path().join(CUT_RUN).join("manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["status"], "INCOMPLETE", "published, but never green");
    assert_eq!(manifest["reasons"][0], "table receipts has no rows");
}

#[tokio::test]
async fn a_vanished_receipts_source_and_a_shrunk_table_make_the_run_incomplete() {
    let (_dir, out) = temp_location();
    let mut noon = plan(&tiny_snapshot(), &out);
    noon.cut = Some(parse_instant(NOON).unwrap());
    run(&noon).await.unwrap();

    let (_snap, without_logistics) =
        tiny_variant(remove("receipts_logistics.csv"), TINY_CUT, None).await;
    let mut evening = plan(&without_logistics, &out);
    evening.run_id = Some("no-logistics".into());
    let report = run(&evening).await.unwrap();
    assert_eq!(report.summary.status, RunStatus::Incomplete);
    assert_eq!(report.summary.reasons.len(), 1, "{:?}", report.summary.reasons);
    assert!(
        report.summary.reasons[0].starts_with("receipts source logistics was in the previous run")
    );

    let (_snap, few_ledger_rows) = tiny_variant(keep_lines("ledger.csv", 5), TINY_CUT, None).await;
    let mut shrunk = plan(&few_ledger_rows, &out);
    shrunk.run_id = Some("shrunk".into());
    shrunk.previous = PreviousChoice::Folder(out.join(NOON_RUN));
    let report = run(&shrunk).await.unwrap();
    assert_eq!(report.summary.status, RunStatus::Incomplete);
    assert!(
        report.summary.reasons.iter().any(|r| r.starts_with("table ledger has 5 rows, below 50%")),
        "{:?}",
        report.summary.reasons
    );
    shrunk.max_drop = 1.0;
    shrunk.replace = true;
    assert_eq!(run(&shrunk).await.unwrap().summary.status, RunStatus::Complete);
}

#[tokio::test]
async fn a_snapshot_that_does_not_reach_back_to_the_listing_bound_is_incomplete() {
    let (_snap, short) = tiny_variant(|_| {}, TINY_CUT, Some("2026-11-29T00:00:00Z")).await;
    let (_dir, out) = temp_location();
    let report = run(&plan(&short, &out)).await.unwrap();
    assert_eq!(report.summary.status, RunStatus::Incomplete);
    assert!(report.summary.reasons[0].contains("later than the listing bound 2026-11-28T16:00:00Z"));

    let (_snap, covered) = tiny_variant(|_| {}, TINY_CUT, Some("2026-10-28T16:00:00Z")).await;
    let (_dir, out) = temp_location();
    assert_eq!(run(&plan(&covered, &out)).await.unwrap().summary.status, RunStatus::Complete);
}

#[tokio::test]
async fn unusable_previous_runs_are_refused_by_name_and_publish_nothing() {
    let (dir, out) = temp_location();
    let mut noon = plan(&tiny_snapshot(), &out);
    noon.cut = Some(parse_instant(NOON).unwrap());
    run(&noon).await.unwrap();

    let mut evening = plan(&tiny_snapshot(), &out);
    evening.previous = PreviousChoice::Folder(out.join("run=nowhere"));
    let error = run(&evening).await.unwrap_err().to_string();
    assert!(error.starts_with("previous run ") && error.contains("run=nowhere"), "{error}");
    assert!(!dir.path().join(CUT_RUN).join("manifest.json").exists());

    // A previous run whose cut is not before this cut.
    let mut early = plan(&tiny_snapshot(), &out);
    early.cut = Some(parse_instant("2026-11-29T10:00:00Z").unwrap());
    early.previous = PreviousChoice::Folder(out.join(NOON_RUN));
    let error = run(&early).await.unwrap_err().to_string();
    assert!(error.contains("is not before this run's cut"), "{error}");

    // A run made before the lifecycle: no origin in its manifest.
    let manifest_path = dir.path().join(NOON_RUN).join("manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    manifest.as_object_mut().unwrap().remove("origin");
    std::fs::write(&manifest_path, serde_json::to_vec(&manifest).unwrap()).unwrap();
    let error = run(&plan(&tiny_snapshot(), &out)).await.unwrap_err().to_string();
    assert!(error.contains("no origin") && error.contains("--no-previous"), "{error}");
    assert!(!dir.path().join(CUT_RUN).join("manifest.json").exists());

    let mut fresh = plan(&tiny_snapshot(), &out);
    fresh.previous = PreviousChoice::None;
    let report = run(&fresh).await.unwrap();
    assert_eq!(report.summary.previous_run, None);
    assert_eq!(report.summary.origin, "2026-11-28T16:00:00Z");
}

#[tokio::test]
async fn history_lists_complete_runs_in_cut_order() {
    let (dir, out) = temp_location();
    two_nights(&out).await;
    std::fs::create_dir_all(dir.path().join("run=unfinished/discrepancies")).unwrap();
    let lines = history::read(&out).await.unwrap();
    let ids: Vec<&str> = lines.iter().map(|l| l.run_id.as_str()).collect();
    assert_eq!(ids, ["20261129T120000Z", "20261129T160000Z"]);
    assert_eq!(lines[1].previous_run.as_deref(), Some("20261129T120000Z"));
    assert_eq!(lines[1].open, lines[1].new + lines[1].persisting);
    let csv = history::render_csv(&lines);
    assert!(csv.starts_with("run_id,since,cut,status,new,persisting,resolved,RECEIPT,"));
    assert_eq!(csv.lines().count(), 3);
}

#[test]
fn demo_nights_shows_the_lifecycle_through_sqlite_and_equals_every_night_truth() {
    let dir = tempfile::tempdir().unwrap();
    let output = command(&["demo", "--nights", "3", "--orders", "3000", "--dir"])
        .arg(dir.path())
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(stdout.matches("verify: the run equals the truth exactly").count(), 3, "{stdout}");
    assert!(stdout.contains("follows: run 20261128T160000Z"), "{stdout}");
    let history: Vec<&str> =
        stdout.lines().skip_while(|l| !l.starts_with("history")).skip(2).collect();
    assert_eq!(history.len(), 3, "{stdout}");
    for (line, run) in
        history.iter().zip(["20261127T160000Z", "20261128T160000Z", "20261129T160000Z"])
    {
        assert!(line.starts_with(run) && line.contains("COMPLETE"), "{line}");
    }
}

#[tokio::test]
async fn a_rule_value_with_a_typo_is_named_with_the_closest_value_and_makes_the_run_incomplete() {
    let rules_dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(repo("fixtures/rules.toml"))
        .unwrap()
        .replace("due_status    = \"SHIPPED\"", "due_status    = \"SHIPED\"");
    assert!(text.contains("SHIPED"));
    let path = rules_dir.path().join("rules.toml");
    std::fs::write(&path, text).unwrap();
    let (_dir, out) = temp_location();
    let mut plan = plan(&tiny_snapshot(), &out);
    plan.rules = effect_recon::config::RuleSet::load(Some(&path)).unwrap();
    let report = run(&plan).await.unwrap();
    assert_eq!(report.summary.status, RunStatus::Incomplete);
    let expected =
        "rule logistics_waybill: due_status \"SHIPED\" matches no status_history.status \
                    value in the snapshot (did you mean SHIPPED?)";
    assert_eq!(report.summary.reasons, vec![expected.to_string()]);
    assert!(report.summary.rule_warnings.contains(&expected.to_string()));
}
