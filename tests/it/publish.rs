//! `publish`, `reopen` and `explain`: the tools that take a run back into the systems that
//! act on it, against SQLite always and MariaDB/PostgreSQL when
//! `EFFECT_RECON_TEST_MYSQL_URL` / `EFFECT_RECON_TEST_PG_URL` are set (unset: the test
//! prints `SKIPPED ... NOT run` and returns).
//!
//! The first run is `run` on the tiny fixture (17 tasks, no `attempt`, no `resolved`: an
//! older-format run). The "later run" is written here in the §9 shape: the tasks with
//! `attempt = 2`, two of them resolved, one new.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use effect_recon::datafusion::arrow::array::{
    Array, ArrayRef, Int32Array, RecordBatch, StringArray,
};
use effect_recon::datafusion::arrow::compute::{concat_batches, filter_record_batch};
use effect_recon::datafusion::arrow::datatypes::{DataType, Field, Schema};
use effect_recon::datafusion::parquet::arrow::ArrowWriter;
use effect_recon::db::load::{self, LoadOptions};
use effect_recon::db::publish::{self, PublishPlan, PublishReport};
use effect_recon::db::reopen::{self, ItemStatus, ReopenMode, ReopenPlan, ReopenReport};
use effect_recon::db::WriteTarget;
use effect_recon::run_folder::RunManifest;
use effect_recon::snapshot::{FileEntry, TableFiles};
use effect_recon::storage::Location;
use effect_recon::vocabulary::{Class, Lifecycle, Resolution, Verdict};
use sqlx::Connection;

use crate::common;

use super::databases::{env_url, mysql_database, pg_schema, MYSQL_ENV, PG_ENV};
const LATER_RUN: &str = "20261130T160000Z";
const LATER_CUT: &str = "2026-11-30T16:00:00Z";
/// Tasks of the tiny run the tests act on.
const DONE_8821: &str = "0d462f33c3005b0d";
const DONE_1002: &str = "5f3744de672ab965";
const VOIDED_1006: &str = "8d0ffcae31425963";
const NEW_TASK: &str = "feedfacefeedface";

// ---------------------------------------------------------------- runs

/// `run` on the tiny fixture into `dir`; returns the run folder.
async fn tiny_run(dir: &Path) -> Location {
    let out = Location::parse(dir.to_str().unwrap()).unwrap();
    common::run(&common::plan(&common::tiny_snapshot(), &out)).await.unwrap();
    Location::parse(dir.join("run=20261129T160000Z").to_str().unwrap()).unwrap()
}

fn write_parquet(path: &Path, batch: &RecordBatch) -> FileEntry {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let file = std::fs::File::create(path).unwrap();
    let mut writer = ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    writer.write(batch).unwrap();
    writer.close().unwrap();
    let parent = path.parent().unwrap();
    FileEntry {
        path: format!(
            "{}/{}",
            parent.file_name().unwrap().to_str().unwrap(),
            path.file_name().unwrap().to_str().unwrap()
        ),
        rows: batch.num_rows() as u64,
        sha256: "0".repeat(64),
    }
}

/// A later run in the §9 shape next to the tiny run: every tiny task but the two resolved
/// ones, with `attempt = 2`, plus one NEW task; `resolved` names 1002 (RECEIPT) and 1006
/// (VOIDED).
fn later_run(out: &Path, first: &Path) -> Location {
    let folder = out.join(format!("run={LATER_RUN}"));
    let tasks = common::read_output(first, "compensation_tasks");
    let tasks = concat_batches(&tasks[0].schema(), &tasks).unwrap();
    let ids = tasks.column_by_name("task_id").unwrap();
    let ids = ids.as_any().downcast_ref::<StringArray>().unwrap();
    let keep: Vec<bool> =
        (0..ids.len()).map(|i| ![DONE_1002, VOIDED_1006].contains(&ids.value(i))).collect();
    let kept = filter_record_batch(&tasks, &keep.into()).unwrap();
    // The new task: a copy of the first kept row under another id.
    let first_row = kept.slice(0, 1);
    let renamed: Vec<ArrayRef> = first_row
        .schema()
        .fields()
        .iter()
        .zip(first_row.columns())
        .map(|(f, c)| match f.name().as_str() {
            "task_id" | "idempotency_key" => {
                Arc::new(StringArray::from(vec![NEW_TASK])) as ArrayRef
            }
            _ => Arc::clone(c),
        })
        .collect();
    let new_row = RecordBatch::try_new(first_row.schema(), renamed).unwrap();
    let all = concat_batches(&kept.schema(), &[kept.clone(), new_row]).unwrap();
    // The first run may already carry §9's attempt (= 1): it is replaced.
    let schema = all.schema();
    let kept: Vec<usize> =
        (0..schema.fields().len()).filter(|&i| schema.field(i).name() != "attempt").collect();
    let mut fields: Vec<Field> = kept.iter().map(|&i| schema.field(i).clone()).collect();
    fields.push(Field::new("attempt", DataType::Int32, false));
    let mut columns: Vec<ArrayRef> = kept.iter().map(|&i| Arc::clone(all.column(i))).collect();
    let mut attempts = vec![2; all.num_rows()];
    *attempts.last_mut().unwrap() = 1;
    columns.push(Arc::new(Int32Array::from(attempts)));
    let tasks = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();

    let text = |v: Vec<&str>| Arc::new(StringArray::from(v)) as ArrayRef;
    let resolved = RecordBatch::try_from_iter(vec![
        ("finding_id", text(vec![DONE_1002, VOIDED_1006])),
        ("effect", text(vec!["points_grant", "points_grant"])),
        (
            "order_id",
            Arc::new(effect_recon::datafusion::arrow::array::Int64Array::from(vec![1002, 1006]))
                as ArrayRef,
        ),
        ("class", text(vec!["DONE_NO_RECEIPT", "NO_LEDGER_ENTRY"])),
        ("first_seen_run", text(vec!["20261129T160000Z", "20261129T160000Z"])),
        ("runs_open", Arc::new(Int32Array::from(vec![1, 1])) as ArrayRef),
        ("resolution", text(vec!["RECEIPT", "VOIDED"])),
        ("receipt_id", Arc::new(StringArray::from(vec![Some("pt-1002-late"), None])) as ArrayRef),
    ])
    .unwrap();
    let discrepancies = common::read_output(first, "discrepancies");
    let discrepancies = concat_batches(&discrepancies[0].schema(), &discrepancies).unwrap();

    let mut tables = BTreeMap::new();
    for (name, batch) in
        [("compensation_tasks", &tasks), ("discrepancies", &discrepancies), ("resolved", &resolved)]
    {
        let entry = write_parquet(&folder.join(name).join("part-00000.parquet"), batch);
        tables.insert(name.to_string(), TableFiles { files: vec![entry] });
    }
    let manifest = RunManifest {
        format: effect_recon::run_folder::RUN_FORMAT.into(),
        run_id: LATER_RUN.into(),
        cut: LATER_CUT.into(),
        since: common::TINY_CUT.into(),
        snapshot: "test".into(),
        rules_hash: "test".into(),
        version: "test".into(),
        previous_run: None,
        origin: None,
        intraday_run: None,
        status: Default::default(),
        reasons: Vec::new(),
        tables,
        summary: FileEntry { path: "summary.json".into(), rows: 0, sha256: "0".repeat(64) },
    };
    std::fs::write(folder.join("manifest.json"), serde_json::to_vec(&manifest).unwrap()).unwrap();
    Location::parse(folder.to_str().unwrap()).unwrap()
}

// ---------------------------------------------------------------- databases

/// Runs one statement on the database at `url` (the test's "executor" or "consumer").
pub(crate) async fn exec(url: &str, sql: &str) {
    match url.split(':').next().unwrap() {
        "mysql" => {
            let mut c = sqlx::MySqlConnection::connect(url).await.unwrap();
            sqlx::raw_sql(sql).execute(&mut c).await.unwrap();
        }
        "postgres" => {
            let mut c = sqlx::PgConnection::connect(url).await.unwrap();
            sqlx::raw_sql(sql).execute(&mut c).await.unwrap();
        }
        _ => {
            let mut c = sqlx::SqliteConnection::connect(url).await.unwrap();
            sqlx::raw_sql(sql).execute(&mut c).await.unwrap();
        }
    }
}

/// Text rows of a query (every column cast to text by the query itself).
pub(crate) async fn query(url: &str, sql: &str) -> Vec<(String, String)> {
    match url.split(':').next().unwrap() {
        "mysql" => {
            let mut c = sqlx::MySqlConnection::connect(url).await.unwrap();
            sqlx::query_as(sql).fetch_all(&mut c).await.unwrap()
        }
        "postgres" => {
            let mut c = sqlx::PgConnection::connect(url).await.unwrap();
            sqlx::query_as(sql).fetch_all(&mut c).await.unwrap()
        }
        _ => {
            let mut c = sqlx::SqliteConnection::connect(url).await.unwrap();
            sqlx::query_as(sql).fetch_all(&mut c).await.unwrap()
        }
    }
}

pub(crate) fn sqlite_url(dir: &Path, name: &str) -> String {
    format!("sqlite://{}?mode=rwc", dir.join(name).display())
}

// ---------------------------------------------------------------- publish

async fn publish_run(url: &str, run: &Location) -> PublishReport {
    publish::publish(&PublishPlan {
        run: run.clone(),
        target: WriteTarget::new("publish", url, None).unwrap(),
        table: "compensation_task".into(),
        create: true,
        batch: 4,
        allow_incomplete: false,
    })
    .await
    .unwrap()
}

async fn states(url: &str) -> BTreeMap<String, String> {
    query(url, "SELECT task_id, CAST(CONCAT(state, '/', last_run, '/', attempt) AS CHAR) FROM compensation_task")
        .await
        .into_iter()
        .collect()
}

async fn states_portable(url: &str) -> BTreeMap<String, String> {
    if url.starts_with("mysql") {
        return states(url).await;
    }
    query(
        url,
        "SELECT task_id, state || '/' || last_run || '/' || CAST(attempt AS VARCHAR(8)) FROM compensation_task",
    )
    .await
    .into_iter()
    .collect()
}

/// The whole publish story on one database.
async fn publish_story(url: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let first = tiny_run(tmp.path()).await;
    let first_dir = tmp.path().join("run=20261129T160000Z");

    let once = publish_run(url, &first).await;
    assert_eq!((once.tasks, once.inserted, once.updated), (17, 17, 0), "{once:?}");
    // A run without a previous run has no resolved table, or (§9) an empty one.
    let twice = publish_run(url, &first).await;
    assert_eq!(twice.counts(), "0 inserted, 0 updated");
    assert!(twice.done_but_missing.is_empty());

    // The executor ran two tasks.
    exec(
        url,
        &format!("UPDATE compensation_task SET state = 'DONE' WHERE task_id IN ('{DONE_8821}', '{DONE_1002}')"),
    )
    .await;
    // The key is the effect's (DESIGN §10.2), not the task's.
    let key_and_command = |task: &'static str| {
        let sql = format!(
            "SELECT idempotency_key, command FROM compensation_task WHERE task_id = '{task}'"
        );
        async move { query(url, &sql).await }
    };
    assert_eq!(
        key_and_command(DONE_8821).await,
        [("points_grant:8821".to_string(), "GRANT_POINTS".to_string())]
    );
    // A row as an older version (key = task_id) or an older rule set left it: publish
    // brings key and command up to date when a later run lists the task again.
    exec(
        url,
        "UPDATE compensation_task SET idempotency_key = task_id, command = 'OLD_COMMAND' \
         WHERE task_id = 'd488c66aa02bd9e8'",
    )
    .await;

    let later = later_run(tmp.path(), &first_dir);
    let report = publish_run(url, &later).await;
    // 15 listed again + the 2 resolved are updated; 1 new task inserted.
    assert_eq!((report.inserted, report.updated, report.resolved), (1, 17, 2), "{report:?}");
    let missing: Vec<&str> = report.done_but_missing.iter().map(|t| t.task_id.as_str()).collect();
    assert_eq!(missing, [DONE_8821], "DONE but still listed: the case to look at first");
    let after = states_portable(url).await;
    assert_eq!(after[DONE_8821], format!("DONE/{LATER_RUN}/2"), "DONE is never reopened");
    assert_eq!(after[DONE_1002], format!("RESOLVED/{LATER_RUN}/1"));
    assert_eq!(after[VOIDED_1006], format!("RESOLVED/{LATER_RUN}/1"));
    assert_eq!(after[NEW_TASK], format!("OPEN/{LATER_RUN}/1"));
    assert_eq!(after["d488c66aa02bd9e8"], format!("OPEN/{LATER_RUN}/2"), "PERSISTING");
    assert_eq!(
        key_and_command("d488c66aa02bd9e8").await,
        [("wms_lock:8821".to_string(), "LOCK_WMS_STOCK".to_string())],
        "publish refreshes the key and the command of a task listed again"
    );

    let again = publish_run(url, &later).await;
    assert_eq!(again.counts(), "0 inserted, 0 updated");
    assert_eq!(again.done_but_missing.len(), 1);
    let older = publish_run(url, &first).await;
    assert_eq!(older.counts(), "0 inserted, 0 updated", "an older run never overwrites a newer");
    assert_eq!(states_portable(url).await, after);
}

#[tokio::test]
async fn sqlite_publish_is_idempotent_follows_later_runs_and_never_reopens_done() {
    let tmp = tempfile::tempdir().unwrap();
    publish_story(&sqlite_url(tmp.path(), "tasks.db")).await;
}

#[tokio::test]
async fn mysql_publish_is_idempotent_follows_later_runs_and_never_reopens_done() {
    let Some(base) = env_url(MYSQL_ENV) else { return };
    publish_story(&mysql_database(&base, "er_it_publish").await).await;
}

#[tokio::test]
async fn postgres_publish_is_idempotent_follows_later_runs_and_never_reopens_done() {
    let Some(base) = env_url(PG_ENV) else { return };
    publish_story(&pg_schema(&base, "er_it_publish").await).await;
}

// ---------------------------------------------------------------- reopen

fn reopen_plan(url: &str, mode: ReopenMode, apply: bool) -> ReopenPlan {
    ReopenPlan {
        mode,
        target: WriteTarget::new("reopen", url, None).unwrap(),
        table: "idempotent_msg".into(),
        columns: Default::default(),
        audit_table: "recon_reopen_audit".into(),
        apply,
        create_audit: true,
        batch: 1,
        max_rows_per_second: None,
        by: "it-test".into(),
        republish: None,
        allow_incomplete: false,
        only: None,
    }
}

async fn ledger(url: &str) -> Vec<(String, String)> {
    query(url, "SELECT msg_id, action FROM idempotent_msg ORDER BY msg_id").await
}

fn statuses(report: &ReopenReport) -> Vec<(String, ItemStatus)> {
    report.items.iter().map(|i| (i.msg_id.clone(), i.status)).collect()
}

/// The whole reopen story on one database.
async fn reopen_story(url: &str) {
    let tmp = tempfile::tempdir().unwrap();
    load::load_snapshot(&common::tiny_snapshot(), url, &LoadOptions::default()).await.unwrap();
    let run = tiny_run(tmp.path()).await;
    let revoke = || ReopenMode::Revoke { run: run.clone() };

    let before = ledger(url).await;
    let dry = reopen::reopen(&reopen_plan(url, revoke(), false)).await.unwrap();
    assert_eq!(ledger(url).await, before, "a dry run changes nothing");
    assert_eq!(
        statuses(&dry),
        [
            ("msg-1003-p".to_string(), ItemStatus::Changed),
            ("msg-1013-p".to_string(), ItemStatus::AlreadyDone),
            ("msg-1014-a".to_string(), ItemStatus::Changed),
            ("msg-7391".to_string(), ItemStatus::Changed),
        ]
    );
    let incident = dry.items.iter().find(|i| i.msg_id == "msg-7391").unwrap();
    assert_eq!(incident.task_ids, "0d462f33c3005b0d,d488c66aa02bd9e8", "one message, two tasks");
    assert_eq!(dry.items[0].from, "PENDING_REVIEW");

    // The consumer decides msg-1014-a meanwhile: it must be left alone.
    exec(url, "UPDATE idempotent_msg SET action = 'DONE' WHERE msg_id = 'msg-1014-a'").await;
    let moved = ledger(url).await;
    let applied = reopen::reopen(&reopen_plan(url, revoke(), true)).await.unwrap();
    assert_eq!(applied.count(ItemStatus::Changed), 2, "{applied:?}");
    assert_eq!(applied.count(ItemStatus::Moved), 1);
    assert_eq!(applied.batches.len(), 2, "--batch 1");
    let expected: Vec<(String, String)> = moved
        .iter()
        .map(|(m, a)| match m.as_str() {
            "msg-1003-p" | "msg-7391" => (m.clone(), "REVOKED".to_string()),
            _ => (m.clone(), a.clone()),
        })
        .collect();
    assert_eq!(ledger(url).await, expected, "exactly the rows named, nothing else");
    let audit =
        query(url, "SELECT msg_id, old_action FROM recon_reopen_audit ORDER BY msg_id").await;
    assert_eq!(
        audit,
        [
            ("msg-1003-p".to_string(), "PENDING_REVIEW".to_string()),
            ("msg-7391".to_string(), "SKIPPED".to_string())
        ]
    );

    let second = reopen::reopen(&reopen_plan(url, revoke(), true)).await.unwrap();
    assert_eq!(second.count(ItemStatus::Changed), 0, "apply twice: nothing the second time");
    assert_eq!(second.count(ItemStatus::AlreadyDone), 3);
    assert_eq!(ledger(url).await, expected);

    let apply_id = applied.apply_id.clone().unwrap();
    let undo_dry =
        reopen::reopen(&reopen_plan(url, ReopenMode::Undo { id: apply_id.clone() }, false))
            .await
            .unwrap();
    assert_eq!(undo_dry.count(ItemStatus::Changed), 2);
    assert_eq!(ledger(url).await, expected, "an undo without --apply changes nothing");
    let undo = reopen::reopen(&reopen_plan(url, ReopenMode::Undo { id: apply_id.clone() }, true))
        .await
        .unwrap();
    assert_eq!(undo.count(ItemStatus::Changed), 2);
    assert_eq!(ledger(url).await, moved, "undo restores exactly");
    let undo_again =
        reopen::reopen(&reopen_plan(url, ReopenMode::Undo { id: apply_id }, true)).await.unwrap();
    assert_eq!(undo_again.count(ItemStatus::Changed), 0);
    assert_eq!(query(url, "SELECT msg_id, new_action FROM recon_reopen_audit").await.len(), 4);
}

#[tokio::test]
async fn sqlite_reopen_dry_run_apply_twice_and_undo() {
    let tmp = tempfile::tempdir().unwrap();
    reopen_story(&sqlite_url(tmp.path(), "ledger.db")).await;
}

#[tokio::test]
async fn mysql_reopen_dry_run_apply_twice_and_undo() {
    let Some(base) = env_url(MYSQL_ENV) else { return };
    reopen_story(&mysql_database(&base, "er_it_reopen").await).await;
}

#[tokio::test]
async fn postgres_reopen_dry_run_apply_twice_and_undo() {
    let Some(base) = env_url(PG_ENV) else { return };
    reopen_story(&pg_schema(&base, "er_it_reopen").await).await;
}

// ---------------------------------------------------------------- bad input

#[tokio::test]
async fn bad_input_gets_clear_errors_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let url = sqlite_url(tmp.path(), "db.sqlite");
    let nowhere = Location::parse(tmp.path().join("run=nope").to_str().unwrap()).unwrap();
    let message = publish::publish(&PublishPlan {
        run: nowhere.clone(),
        target: WriteTarget::new("publish", &url, None).unwrap(),
        table: "compensation_task".into(),
        create: true,
        batch: 10,
        allow_incomplete: false,
    })
    .await
    .unwrap_err()
    .to_string();
    assert!(message.contains("no manifest.json"), "{message}");

    let run = tiny_run(tmp.path()).await;
    exec(&url, "CREATE TABLE idempotent_msg (id INTEGER, msg_key TEXT)").await;
    let message = reopen::reopen(&reopen_plan(&url, ReopenMode::Revoke { run: run.clone() }, true))
        .await
        .unwrap_err()
        .to_string();
    assert!(message.contains("msg_id/action"), "{message}");
    let message = publish::publish(&PublishPlan {
        run,
        target: WriteTarget::new("publish", &url, None).unwrap(),
        table: "idempotent_msg".into(),
        create: false,
        batch: 10,
        allow_incomplete: false,
    })
    .await
    .unwrap_err()
    .to_string();
    assert!(message.contains("--create"), "{message}");
    let message = WriteTarget::new("publish", "mysql://u:s3cret-Pw@127.0.0.1:1/x", None)
        .unwrap_err()
        .to_string();
    assert!(message.contains("--password-env") && !message.contains("s3cret-Pw"), "{message}");
    std::env::set_var("EFFECT_RECON_IT_PUBLISH_PW", "s3cret-Pw-991");
    let target =
        WriteTarget::new("publish", "mysql://u@127.0.0.1:1/x", Some("EFFECT_RECON_IT_PUBLISH_PW"))
            .unwrap();
    let message = publish::publish(&PublishPlan {
        run: Location::parse(tmp.path().join("run=20261129T160000Z").to_str().unwrap()).unwrap(),
        target,
        table: "compensation_task".into(),
        create: true,
        batch: 10,
        allow_incomplete: false,
    })
    .await
    .unwrap_err()
    .to_string();
    assert!(message.contains("cannot connect") && !message.contains("s3cret-Pw-991"), "{message}");
}

#[tokio::test]
async fn mysql_wrong_password_is_never_printed() {
    let Some(base) = env_url(MYSQL_ENV) else { return };
    let url = mysql_database(&base, "er_it_publish_pw").await;
    let mut user = url::Url::parse(&url).unwrap();
    user.set_username("er_it_nobody").unwrap();
    std::env::set_var("EFFECT_RECON_IT_PUBLISH_MYSQL_PW", "wr0ng-Publish-pw");
    let tmp = tempfile::tempdir().unwrap();
    let message = publish::publish(&PublishPlan {
        run: tiny_run(tmp.path()).await,
        target: WriteTarget::new(
            "publish",
            user.as_str(),
            Some("EFFECT_RECON_IT_PUBLISH_MYSQL_PW"),
        )
        .unwrap(),
        table: "compensation_task".into(),
        create: true,
        batch: 10,
        allow_incomplete: false,
    })
    .await
    .unwrap_err()
    .to_string();
    eprintln!("expected error: {message}");
    assert!(
        message.contains("Access denied") && !message.contains("wr0ng-Publish-pw"),
        "{message}"
    );
}

// ---------------------------------------------------------------- the binary

/// The exit code, stdout and stderr of the binary run with `args`.
pub(crate) fn outcome(args: &[&str]) -> (Option<i32>, String, String) {
    let output = common::effect_recon(args);
    let (stdout, stderr) = common::text(&output);
    (output.status.code(), stdout, stderr)
}

#[tokio::test]
async fn the_binary_publishes_reopens_and_explains() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tiny_run(tmp.path()).await;
    let run_dir = tmp.path().join("run=20261129T160000Z");
    let run_arg = run_dir.to_str().unwrap();
    let url = sqlite_url(tmp.path(), "ops.db");
    let publish = ["publish", "--run", run_arg, "--to", &url, "--create"];
    let (code, out, err) = outcome(&publish);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("17 inserted, 0 updated"), "{out}");
    let (code, out, _) = outcome(&publish);
    assert_eq!(code, Some(0));
    assert!(out.contains("0 inserted, 0 updated"), "{out}");
    exec(
        &url,
        &format!("UPDATE compensation_task SET state = 'DONE' WHERE task_id = '{DONE_8821}'"),
    )
    .await;
    let later = later_run(tmp.path(), &run_dir);
    let later_arg = later.to_string();
    let (code, out, err) =
        outcome(&["publish", "--run", &later_arg, "--to", &url, "--fail-on-breaks"]);
    assert_eq!(code, Some(1), "done but still missing + --fail-on-breaks: {out}{err}");
    assert!(out.contains("done but still missing") && out.contains(DONE_8821), "{out}");

    load::load_snapshot(&common::tiny_snapshot(), &url, &LoadOptions::default()).await.unwrap();
    let (code, out, _) = outcome(&["reopen", "--run", run_arg, "--ledger", &url]);
    assert_eq!(code, Some(0));
    assert!(out.contains("dry run, nothing changed: 3 would change"), "{out}");
    let replay = tmp.path().join("replay.jsonl");
    let (code, out, err) = outcome(&[
        "reopen",
        "--run",
        run_arg,
        "--ledger",
        &url,
        "--apply",
        "--create",
        "--by",
        "alice",
        "--republish",
        replay.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("3 changed"), "{out}");
    let lines = std::fs::read_to_string(&replay).unwrap();
    assert_eq!(lines.lines().count(), 4, "3 revoked now + 1 already REVOKED: {lines}");
    assert!(
        lines.contains("\"msg_id\":\"msg-7391\"") && lines.contains("\"offset\":1001"),
        "{lines}"
    );
    let who = query(&url, "SELECT DISTINCT changed_by, new_action FROM recon_reopen_audit").await;
    assert_eq!(who, [("alice".to_string(), "REVOKED".to_string())]);

    let snapshot = common::repo("fixtures/tiny/snapshot");
    let snapshot = snapshot.to_str().unwrap();
    let (code, out, err) =
        outcome(&["explain", "--snapshot", snapshot, "--run", run_arg, "--order", "8821"]);
    assert_eq!(code, Some(0), "{err}");
    eprintln!("{out}");
    assert!(
        out.contains("msg-7392 (offset 1002) was decided at 10:05:30 by consumer-3, before msg-7391 (offset 1001) at 10:06:00 by consumer-3"),
        "{out}"
    );
    assert!(out.contains("SKIPPED_BUT_DUE BREAK") && out.contains("WRONG"), "{out}");
    let (code, out, _) = outcome(&[
        "explain",
        "--snapshot",
        snapshot,
        "--run",
        run_arg,
        "--order",
        "8821",
        "--format",
        "json",
    ]);
    assert_eq!(code, Some(0));
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["order_id"], 8821);
    assert!(json["events"].as_array().unwrap().len() >= 8, "{json}");

    let (code, _, err) =
        outcome(&["publish", "--run", tmp.path().join("nope").to_str().unwrap(), "--to", &url]);
    assert_eq!(code, Some(2));
    assert!(err.contains("no manifest.json"), "{err}");
    drop(run);
}

// ---------------------------------------------------------------- a killed connection

/// A run folder holding `n` SKIPPED_BUT_DUE tasks whose reopen_msg_id are `m-0000`...
fn fake_run(out: &Path, n: usize) -> Location {
    let folder = out.join("run=20261129T160000Z");
    let text = |v: Vec<String>| Arc::new(StringArray::from(v)) as ArrayRef;
    let ids: Vec<String> = (0..n).map(|i| format!("{i:016x}")).collect();
    let msgs: Vec<String> = (0..n).map(|i| format!("m-{i:04}")).collect();
    let orders = Arc::new(effect_recon::datafusion::arrow::array::Int64Array::from(
        (0..n as i64).collect::<Vec<_>>(),
    )) as ArrayRef;
    let same = |v: &str| text(vec![v.to_string(); n]);
    let tasks = RecordBatch::try_from_iter(vec![
        ("task_id", text(ids.clone())),
        ("effect", same("points_grant")),
        ("order_id", Arc::clone(&orders)),
        ("class", same("SKIPPED_BUT_DUE")),
        ("action", same("EXECUTE_EFFECT")),
        ("command", same("GRANT_POINTS")),
        ("reopen_msg_id", text(msgs.clone())),
        ("priority", Arc::new(Int32Array::from(vec![1; n])) as ArrayRef),
        ("idempotency_key", text(ids.clone())),
    ])
    .unwrap();
    let findings = RecordBatch::try_from_iter(vec![
        ("finding_id", text(ids)),
        ("effect", same("points_grant")),
        ("order_id", orders),
        ("class", same("SKIPPED_BUT_DUE")),
        ("verdict", same("BREAK")),
        ("msg_id", text(msgs)),
    ])
    .unwrap();
    let mut tables = BTreeMap::new();
    for (name, batch) in [("compensation_tasks", &tasks), ("discrepancies", &findings)] {
        let entry = write_parquet(&folder.join(name).join("part-00000.parquet"), batch);
        tables.insert(name.to_string(), TableFiles { files: vec![entry] });
    }
    let manifest = RunManifest {
        format: effect_recon::run_folder::RUN_FORMAT.into(),
        run_id: "20261129T160000Z".into(),
        cut: common::TINY_CUT.into(),
        since: "2026-11-28T16:00:00Z".into(),
        snapshot: "test".into(),
        rules_hash: "test".into(),
        version: "test".into(),
        previous_run: None,
        origin: None,
        intraday_run: None,
        status: Default::default(),
        reasons: Vec::new(),
        tables,
        summary: FileEntry { path: "summary.json".into(), rows: 0, sha256: "0".repeat(64) },
    };
    std::fs::write(folder.join("manifest.json"), serde_json::to_vec(&manifest).unwrap()).unwrap();
    Location::parse(folder.to_str().unwrap()).unwrap()
}

#[tokio::test]
async fn mysql_killed_connection_mid_apply_leaves_whole_batches_with_their_audit_rows() {
    let Some(base) = env_url(MYSQL_ENV) else { return };
    let url = mysql_database(&base, "er_it_reopen_kill").await;
    load::create_schema(&url).await.unwrap();
    let n = 300;
    let values: Vec<String> = (0..n)
        .map(|i| format!("('m-{i:04}', {i}, 'ORDER_PAID', 'SKIPPED', '2026-11-29 10:00:00')"))
        .collect();
    exec(
        &url,
        &format!(
            "INSERT INTO idempotent_msg (msg_id, order_id, event_type, action, decided_at) VALUES {}",
            values.join(", ")
        ),
    )
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let run = fake_run(tmp.path(), n);
    let mut plan = reopen_plan(&url, ReopenMode::Revoke { run }, true);
    plan.batch = 10;
    plan.max_rows_per_second = Some(100.0);
    let apply = tokio::spawn(async move { reopen::reopen(&plan).await });
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let mut admin = sqlx::MySqlConnection::connect(&base).await.unwrap();
    let ids: Vec<(i64,)> = sqlx::query_as(
        "SELECT CAST(ID AS SIGNED) FROM information_schema.PROCESSLIST WHERE DB = 'er_it_reopen_kill'",
    )
    .fetch_all(&mut admin)
    .await
    .unwrap();
    assert_eq!(ids.len(), 1, "the apply's one connection: {ids:?}");
    sqlx::raw_sql(&format!("KILL {}", ids[0].0)).execute(&mut admin).await.unwrap();
    let message = apply.await.unwrap().expect_err("the apply must fail").to_string();
    eprintln!("expected error: {message}");
    assert!(message.contains("rolled back") && message.contains("--undo"), "{message}");
    let revoked: Vec<(String, String)> = query(
        &url,
        "SELECT msg_id, action FROM idempotent_msg WHERE action = 'REVOKED' ORDER BY msg_id",
    )
    .await;
    let audited: Vec<(String, String)> =
        query(&url, "SELECT msg_id, new_action FROM recon_reopen_audit ORDER BY msg_id").await;
    assert_eq!(
        revoked, audited,
        "every change has its audit row and no audit row lacks its change"
    );
    assert!(!revoked.is_empty() && revoked.len() < n, "killed midway: {}", revoked.len());
    assert_eq!(revoked.len() % 10, 0, "whole batches only: {}", revoked.len());
}

#[tokio::test]
async fn reopen_takes_the_ledger_table_and_columns_from_the_job_config() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tiny_run(tmp.path()).await;
    let url = sqlite_url(tmp.path(), "team.db");
    exec(
        &url,
        "CREATE TABLE consumer_ledger (message_key TEXT PRIMARY KEY, decision TEXT NOT NULL, order_no INTEGER);\
         INSERT INTO consumer_ledger VALUES ('msg-7391', 'SKIPPED', 8821), ('msg-7392', 'DONE', 8821)",
    )
    .await;
    let ledger_query =
        "SELECT l.message_key AS msg_id, order_no AS order_id, 'ORDER_PAID' AS event_type, \
         NULL AS expected_status, l.decision AS action FROM consumer_ledger l WHERE 1 = 1";
    let job = format!(
        "[[source]]\ntable = \"ledger\"\nname = \"team\"\nurl = \"{url}\"\nquery = \"{ledger_query}\"\n\
         [[source]]\ntable = \"status_history\"\nname = \"orders\"\nurl = \"{url}\"\nquery = \"SELECT 1\"\n\
         [[source]]\ntable = \"receipts\"\nname = \"points\"\nurl = \"{url}\"\nquery = \"SELECT 1\"\n"
    );
    let config = tmp.path().join("job.toml");
    std::fs::write(&config, job).unwrap();
    let run_arg = run.to_string();
    let (code, out, err) = outcome(&[
        "reopen",
        "--run",
        &run_arg,
        "--config",
        config.to_str().unwrap(),
        "--apply",
        "--create",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("1 changed") && out.contains("3 without a ledger row"), "{out}");
    let rows =
        query(&url, "SELECT message_key, decision FROM consumer_ledger ORDER BY message_key").await;
    assert_eq!(
        rows,
        [
            ("msg-7391".to_string(), "REVOKED".to_string()),
            ("msg-7392".to_string(), "DONE".to_string())
        ]
    );
}

/// A row the consumer changes after the plan was read and before its batch runs is left
/// alone and reported; every other row is changed with its audit row.
async fn race_story(url: &str) {
    load::create_schema(url).await.unwrap();
    let n = 60;
    let values: Vec<String> = (0..n)
        .map(|i| format!("('m-{i:04}', {i}, 'ORDER_PAID', 'SKIPPED', '2026-11-29 10:00:00')"))
        .collect();
    exec(
        url,
        &format!(
            "INSERT INTO idempotent_msg (msg_id, order_id, event_type, action, decided_at) VALUES {}",
            values.join(", ")
        ),
    )
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let mut plan = reopen_plan(url, ReopenMode::Revoke { run: fake_run(tmp.path(), n) }, true);
    plan.batch = 5;
    plan.max_rows_per_second = Some(40.0);
    let apply = tokio::spawn(async move { reopen::reopen(&plan).await });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    // The second connection: the consumer decides m-0055 meanwhile.
    exec(url, "UPDATE idempotent_msg SET action = 'DONE' WHERE msg_id = 'm-0055'").await;
    let report = apply.await.unwrap().unwrap();
    let raced = report.items.iter().find(|i| i.msg_id == "m-0055").unwrap();
    assert_eq!(raced.status, ItemStatus::Moved, "{raced:?}");
    assert_eq!(raced.current.as_deref(), Some("DONE"));
    assert_eq!(report.count(ItemStatus::Changed), n - 1);
    let done = query(url, "SELECT msg_id, action FROM idempotent_msg WHERE action = 'DONE'").await;
    assert_eq!(done, [("m-0055".to_string(), "DONE".to_string())], "never forced");
    let audited = query(url, "SELECT msg_id, new_action FROM recon_reopen_audit").await;
    assert_eq!(audited.len(), n - 1);
}

#[tokio::test]
async fn sqlite_a_row_changed_between_plan_and_apply_is_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    race_story(&sqlite_url(tmp.path(), "race.db")).await;
}

#[tokio::test]
async fn mysql_a_row_changed_between_plan_and_apply_is_left_alone() {
    let Some(base) = env_url(MYSQL_ENV) else { return };
    race_story(&mysql_database(&base, "er_it_reopen_race").await).await;
}

#[tokio::test]
async fn postgres_a_row_changed_between_plan_and_apply_is_left_alone() {
    let Some(base) = env_url(PG_ENV) else { return };
    race_story(&pg_schema(&base, "er_it_reopen_race").await).await;
}

// ---------------------------------------------------------------- end to end

/// gen → load into the database → export → run → reopen --apply → a stand-in consumer
/// that honours REVOKED processes the republished messages (grants with a receipt, marks
/// the row DONE) → the next night, over both days, no longer finds those findings.
/// The demo's job config (fixtures/demo/job.toml) reading the database at `url`.
pub(crate) fn demo_job(url: &str) -> String {
    let mut job = std::fs::read_to_string(common::repo("fixtures/demo/job.toml")).unwrap();
    if url.starts_with("postgres") {
        // Postgres numbers its parameters: each query's two `?` become `$1`, `$2`.
        let mut second = false;
        job = job
            .split('?')
            .enumerate()
            .map(|(i, part)| {
                if i == 0 {
                    return part.to_string();
                }
                second = !second;
                format!("{}{part}", if second { "$1" } else { "$2" })
            })
            .collect();
    }
    job.replace("sqlite:fulfilment.db", url)
}

async fn end_to_end(url: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let path = |p: &str| tmp.path().join(p).to_str().unwrap().to_string();
    let (code, _, err) = outcome(&["gen", "--orders", "3000", "--seed", "3", "--out", &path("g")]);
    assert_eq!(code, Some(0), "{err}");
    let g = Location::parse(&path("g")).unwrap();
    load::load_snapshot(&g, url, &LoadOptions::default()).await.unwrap();
    std::fs::write(path("job.toml"), demo_job(url)).unwrap();
    let night = |cut: &str, since: &str, name: &str| {
        let (code, _, err) = outcome(&[
            "export",
            "--config",
            &path("job.toml"),
            "--out",
            &path(&format!("snap-{name}")),
            "--cut",
            cut,
            "-q",
        ]);
        assert_eq!(code, Some(0), "{err}");
        let (code, out, err) = outcome(&[
            "run",
            "--snapshot",
            &path(&format!("snap-{name}")),
            "--out",
            &path("out"),
            "--since",
            since,
            "--run-id",
            name,
            "-q",
        ]);
        assert_eq!(code, Some(0), "{out}{err}");
        Location::parse(&path(&format!("out/run={name}"))).unwrap()
    };
    let since = "2026-11-28T16:00:00Z";
    let first = night(common::TINY_CUT, since, "night1");
    let replay = path("replay.jsonl");
    let (code, out, err) = outcome(&[
        "reopen",
        "--run",
        &first.to_string(),
        "--ledger",
        url,
        "--apply",
        "--create",
        "--republish",
        &replay,
    ]);
    assert_eq!(code, Some(0), "{out}{err}");

    // The stand-in consumer: each republished message finds its row REVOKED, so it is
    // decided again; the order reached the due status, so the effects are granted.
    let run1 = effect_recon::run_folder::reader::RunOutputs::read(&first).await.unwrap();
    let lines = std::fs::read_to_string(&replay).unwrap();
    let mut granted = Vec::new();
    let at = if url.starts_with("postgres") {
        "2026-11-30 09:00:00+00"
    } else {
        "2026-11-30 09:00:00.000000"
    };
    for line in lines.lines() {
        let message: serde_json::Value = serde_json::from_str(line).unwrap();
        let msg_id = message["msg_id"].as_str().unwrap();
        let mut sql = String::new();
        for task in run1.tasks.iter().filter(|t| t.reopen_msg_id.as_deref() == Some(msg_id)) {
            let table = match task.effect.as_str() {
                "points_grant" => "points_receipt",
                "wms_lock" => "wms_receipt",
                _ => "logistics_receipt",
            };
            sql.push_str(&format!(
                "INSERT INTO {table} (receipt_id, order_id, effect, msg_id, status, created_at) \
                 VALUES ('comp-{}', {}, '{}', '{msg_id}', 'SUCCEEDED', '{at}');",
                task.task_id, task.order_id, task.effect
            ));
            granted.push((task.effect.clone(), task.order_id));
        }
        sql.push_str(&format!(
            "UPDATE idempotent_msg SET action = 'DONE' WHERE msg_id = '{msg_id}' AND action = 'REVOKED'"
        ));
        exec(url, &sql).await;
    }
    assert!(granted.len() >= 10, "the day has wrong skips and stalled reviews: {granted:?}");

    let second = night("2026-11-30T16:00:00Z", since, "night2");
    let run2 = effect_recon::run_folder::reader::RunOutputs::read(&second).await.unwrap();
    let still: Vec<(String, i64)> = run2
        .findings
        .iter()
        .map(|f| (f.effect.clone(), f.order_id))
        .filter(|k| granted.contains(k))
        .collect();
    assert!(still.is_empty(), "compensated findings are gone the next night: {still:?}");
    let breaks = |r: &effect_recon::run_folder::reader::RunOutputs| {
        r.findings
            .iter()
            .filter(|f| f.verdict == Verdict::Break && f.class == Class::DoneNoReceipt)
            .count()
    };
    assert!(breaks(&run1) > 0);
    assert_eq!(breaks(&run1), breaks(&run2), "uncompensated findings are still found");
    // The lifecycle (§9): night2 follows night1, so the compensated findings are in its
    // `resolved` table with RECEIPT, and publish marks exactly their tasks RESOLVED.
    let resolved: Vec<(String, i64)> = run2
        .resolved
        .iter()
        .flatten()
        .filter(|r| r.resolution == Resolution::Receipt)
        .map(|r| (r.effect.clone(), r.order_id))
        .collect();
    let mut missing: Vec<_> = granted.iter().filter(|g| !resolved.contains(g)).collect();
    missing.sort();
    assert!(missing.is_empty(), "resolved by RECEIPT the next night: {missing:?}");
    let persisting = run2
        .findings
        .iter()
        .filter(|f| f.class == Class::DoneNoReceipt && f.lifecycle == Some(Lifecycle::Persisting))
        .count();
    assert_eq!(persisting, breaks(&run1), "still open, PERSISTING");
    let target = |u: &str| WriteTarget::new("publish", u, None).unwrap();
    let plan = |run: &Location| PublishPlan {
        run: run.clone(),
        target: target(url),
        table: "compensation_task".into(),
        create: true,
        batch: 100,
        allow_incomplete: false,
    };
    let one = publish::publish(&plan(&first)).await.unwrap();
    assert_eq!(one.inserted as usize, run1.tasks.len());
    let two = publish::publish(&plan(&second)).await.unwrap();
    let granted_tasks: std::collections::BTreeSet<_> = granted.iter().collect();
    assert!(two.resolved as usize >= granted_tasks.len(), "{two:?}");
    let resolved_rows = query(
        url,
        "SELECT task_id, resolution FROM compensation_task WHERE state = 'RESOLVED' AND resolution = 'RECEIPT'",
    )
    .await;
    assert!(resolved_rows.len() >= granted_tasks.len(), "{resolved_rows:?}");
    eprintln!(
        "end to end: {} effects granted after reopen; next night: {} resolved by RECEIPT; publish: {}, {} resolved",
        granted.len(),
        resolved.len(),
        two.counts(),
        two.resolved
    );
    let revoked =
        query(url, "SELECT msg_id, action FROM idempotent_msg WHERE action = 'REVOKED'").await;
    let left: Vec<_> =
        revoked.iter().filter(|(m, _)| lines.contains(&format!("\"{m}\""))).collect();
    assert!(left.is_empty(), "every republished message was processed: {left:?}");
}

#[tokio::test]
async fn sqlite_end_to_end_reopen_then_the_consumer_then_the_next_night() {
    let tmp = tempfile::tempdir().unwrap();
    end_to_end(&format!("sqlite://{}", tmp.path().join("fulfilment.db").display())).await;
}

#[tokio::test]
async fn mysql_end_to_end_reopen_then_the_consumer_then_the_next_night() {
    let Some(base) = env_url(MYSQL_ENV) else { return };
    end_to_end(&mysql_database(&base, "er_it_e2e").await).await;
}

#[tokio::test]
async fn postgres_end_to_end_reopen_then_the_consumer_then_the_next_night() {
    let Some(base) = env_url(PG_ENV) else { return };
    end_to_end(&pg_schema(&base, "er_it_e2e").await).await;
}
