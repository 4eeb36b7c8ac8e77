//! `run` on the committed tiny snapshot gives exactly the hand-checked outputs of
//! `fixtures/tiny/expected/` (see `fixtures/tiny/README.md` for what each order pins).

use super::common::*;

#[tokio::test]
async fn committed_snapshot_is_the_csv_fixture() {
    let (_dir, out) = temp_location();
    snapshot_from_csv(&repo("fixtures/tiny/csv"), &out, TINY_CUT).await;
    let rebuilt = tree_bytes(std::path::Path::new(&out.to_string()));
    let committed = tree_bytes(&repo("fixtures/tiny/snapshot"));
    let names = |t: &[(String, Vec<u8>)]| t.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&rebuilt), names(&committed));
    assert!(rebuilt == committed, "fixtures/tiny/snapshot is stale: run `cargo test --test it -- --ignored regenerate_tiny_snapshot`");
}

#[tokio::test]
#[ignore = "rewrites fixtures/tiny/snapshot from fixtures/tiny/csv"]
async fn regenerate_tiny_snapshot() {
    let target = repo("fixtures/tiny/snapshot");
    let _ = std::fs::remove_dir_all(&target);
    std::fs::create_dir_all(&target).unwrap();
    let out = effect_recon::storage::Location::parse(target.to_str().unwrap()).unwrap();
    snapshot_from_csv(&repo("fixtures/tiny/csv"), &out, TINY_CUT).await;
}

#[tokio::test]
async fn tiny_day_gives_the_hand_checked_outputs() {
    let (dir, out) = temp_location();
    let report = run(&plan(&tiny_snapshot(), &out)).await.unwrap();
    let folder = dir.path().join("run=20261129T160000Z");
    for table in ["discrepancies", "compensation_tasks", "skip_verdicts", "resolved"] {
        let expected_path = repo(&format!("fixtures/tiny/expected/{table}.psv"));
        let got = psv(&read_output(&folder, table));
        if std::env::var_os("EFFECT_RECON_BLESS").is_some() {
            // Rewrites the expected files after a reviewed change of the outputs.
            std::fs::write(&expected_path, &got).unwrap();
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap();
        assert_eq!(got, expected, "{table} differs from fixtures/tiny/expected/{table}.psv");
    }
    assert_eq!(report.summary.breaks(), 17);
    assert_eq!(report.summary.pending(), 3);
    assert_eq!(report.summary.compensation_tasks, 17);
    assert_eq!(report.summary.skip_verdicts.get("WRONG"), Some(&3));
    assert!(folder.join("manifest.json").exists() && folder.join("summary.json").exists());
}

/// The incident of order 8821: after a rebalance consumer-3 handled msg-7392 (SHIPPED)
/// before msg-7391 (PAID); the PAID message was skipped and its points were never granted.
#[tokio::test]
async fn incident_8821_paid_skipped_after_rebalance_is_found_with_reorder_suspected() {
    let (dir, out) = temp_location();
    run(&plan(&tiny_snapshot(), &out)).await.unwrap();
    let found = psv(&read_output(&dir.path().join("run=20261129T160000Z"), "discrepancies"));
    let incident: Vec<&str> = found.lines().filter(|l| l.contains("|8821|")).collect();
    assert_eq!(incident.len(), 2, "points_grant and wms_lock: {incident:?}");
    for line in incident {
        let cells: Vec<&str> = line.split('|').collect();
        assert_eq!(cells[3], "SKIPPED_BUT_DUE");
        assert_eq!(cells[4], "BREAK");
        assert_eq!(cells[8], "msg-7391");
        assert_eq!(cells[16], "true", "reorder_suspected");
    }
}

#[tokio::test]
async fn same_inputs_give_byte_identical_tables() {
    let (first_dir, first) = temp_location();
    let (second_dir, second) = temp_location();
    run(&plan(&tiny_snapshot(), &first)).await.unwrap();
    run(&plan(&tiny_snapshot(), &second)).await.unwrap();
    for table in ["discrepancies", "compensation_tasks", "skip_verdicts"] {
        let a = tree_bytes(&first_dir.path().join("run=20261129T160000Z").join(table));
        let b = tree_bytes(&second_dir.path().join("run=20261129T160000Z").join(table));
        assert!(!a.is_empty() && a == b, "{table} differs between identical runs");
    }
}

#[tokio::test]
async fn second_run_with_same_id_is_refused_unless_replace() {
    let (_dir, out) = temp_location();
    let mut plan = plan(&tiny_snapshot(), &out);
    let first = run(&plan).await.unwrap();
    // The same inputs again: the published run is the answer, nothing is written.
    let again = run(&plan).await.unwrap();
    assert_eq!(again.manifest.summary, first.manifest.summary);
    assert!(again.plans.is_empty());
    // Other inputs under the same id are refused.
    plan.since = Some(effect_recon::time::parse_instant("2026-11-29T00:00:00Z").unwrap());
    let err = run(&plan).await.unwrap_err().to_string();
    assert!(err.contains("already exists") && err.contains("--replace"), "{err}");
    plan.replace = true;
    run(&plan).await.unwrap();
}

#[tokio::test]
async fn an_earlier_cut_ignores_later_rows_and_names_the_run_after_it() {
    let (dir, out) = temp_location();
    let mut plan = plan(&tiny_snapshot(), &out);
    plan.cut = Some(effect_recon::time::parse_instant("2026-11-29T12:00:00Z").unwrap());
    let report = run(&plan).await.unwrap();
    assert_eq!(report.manifest.run_id, "20261129T120000Z");
    let found = psv(&read_output(&dir.path().join("run=20261129T120000Z"), "discrepancies"));
    // Order 1004 became due at 13:00, after this cut.
    assert!(!found.contains("|1004|"), "{found}");
    // Order 1003 became due at 12:00 and its PENDING_REVIEW row came at 12:00:09, after
    // this cut: no ledger entry yet, grace still running.
    assert!(found.lines().any(|l| l.contains("|1003|NO_LEDGER_ENTRY|PENDING|")), "{found}");
}

#[tokio::test]
async fn an_empty_day_gives_empty_tables_with_the_full_schema() {
    let csv = tempfile::tempdir().unwrap();
    for (name, header) in [
        ("ledger", "msg_id,order_id,event_type,expected_status,action,observed_status,topic,kafka_partition,kafka_offset,consumer_id,decided_at"),
        ("status_history", "order_id,status,changed_at"),
        ("receipts_points", "receipt_id,order_id,effect,msg_id,status,created_at"),
    ] {
        std::fs::write(csv.path().join(format!("{name}.csv")), format!("{header}\n")).unwrap();
    }
    let (_snapshot_dir, snapshot) = temp_location();
    snapshot_from_csv(csv.path(), &snapshot, TINY_CUT).await;
    let (out_dir, out) = temp_location();
    let report = run(&plan(&snapshot, &out)).await.unwrap();
    assert_eq!(
        (report.summary.breaks(), report.summary.pending(), report.summary.compensation_tasks),
        (0, 0, 0)
    );
    let folder = out_dir.path().join("run=20261129T160000Z");
    for table in effect_recon::run_folder::tables::OutputTable::ALL {
        let batches = read_output(&folder, table.name());
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        assert_eq!(rows, 0, "{}", table.name());
        let file =
            std::fs::File::open(folder.join(table.name()).join("part-00000.parquet")).unwrap();
        let reader = effect_recon::datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
        assert_eq!(reader.schema().fields(), table.schema().fields(), "{}", table.name());
    }
}
