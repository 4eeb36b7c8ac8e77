//! An export under concurrent writes sees each transaction whole or not at all, against
//! MariaDB and PostgreSQL (when `EFFECT_RECON_TEST_MYSQL_URL` / `EFFECT_RECON_TEST_PG_URL`
//! are set). While the export reads, a writer commits numbered transactions; transaction
//! `i` touches one order only: it inserts a ledger row decided one second before the cut
//! (adversarial: inside the window) and one an hour after it, a status change at and one
//! after the cut, updates one of the order's SKIPPED rows to REVOKED and deletes another of
//! its rows. The snapshot is then explained against the writer's log:
//!
//! * every transaction is in the snapshot entirely or not at all (on MariaDB with several
//!   connections: in each table, since a transaction that commits while the connections
//!   start their snapshots is seen by those started after it), rows after the cut never;
//! * `connections = 1` (MariaDB and PostgreSQL), and any `connections` on PostgreSQL
//!   (every worker joins the leader's exported snapshot): the snapshot is exactly the
//!   state after transactions `1..=k` for one `k`;
//! * `connections = 3` on MariaDB: each connection has its own consistent snapshot,
//!   started back to back; the applied transactions are `1..=k_lo` plus some of
//!   `k_lo+1..=k_hi` (those whose order falls in a chunk read by a later-started
//!   connection), with `k_hi - k_lo` the transactions committed while the connections
//!   started. The test prints that spread.
//!
//! And a connection killed mid-stream (`KILL` / `pg_terminate_backend`) fails the export
//! with a clear error and leaves no manifest.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use effect_recon::config::JobConfig;
use effect_recon::datafusion::arrow::array::AsArray;
use effect_recon::datafusion::arrow::datatypes::Int64Type;
use effect_recon::db::export::{self, ExportPlan};
use effect_recon::db::load;
use effect_recon::events::Events;
use effect_recon::storage::Location;
use effect_recon::time::parse_instant;
use sqlx::Connection;

use super::super::common::read_output;
use super::super::databases::{env_url, mysql_database, pg_schema, MYSQL_ENV, PG_ENV};
use super::{job_file, say, CUT};

/// One planned writer transaction.
#[derive(Debug, Clone)]
struct Txn {
    order: i64,
    revoke: Option<String>,
    delete: Option<String>,
}

/// A ledger as exported: `msg_id → (order_id, action)`.
type Ledger = BTreeMap<String, (i64, String)>;

enum Db {
    My(sqlx::MySqlConnection),
    Pg(sqlx::PgConnection),
}

impl Db {
    async fn connect(url: &str) -> Db {
        if url.starts_with("postgres") {
            Db::Pg(sqlx::PgConnection::connect(url).await.unwrap())
        } else {
            Db::My(sqlx::MySqlConnection::connect(url).await.unwrap())
        }
    }

    async fn run(&mut self, sql: &str) -> Result<(), sqlx::Error> {
        match self {
            Db::My(c) => sqlx::raw_sql(sql).execute(c).await.map(drop),
            Db::Pg(c) => sqlx::raw_sql(sql).execute(c).await.map(drop),
        }
    }
}

/// Time literals of the dialect (MySQL DATETIME holds UTC here).
fn at(pg: bool, seconds_from_cut: i64) -> String {
    let cut = chrono::DateTime::parse_from_rfc3339(CUT).unwrap();
    let t = cut + chrono::Duration::seconds(seconds_from_cut);
    if pg {
        format!("'{}'", t.format("%Y-%m-%d %H:%M:%S+00"))
    } else {
        format!("'{}'", t.format("%Y-%m-%d %H:%M:%S"))
    }
}

fn plan_txns(ledger: &Ledger) -> Vec<Txn> {
    let mut by_order: BTreeMap<i64, Vec<(&String, &String)>> = BTreeMap::new();
    for (msg, (order, action)) in ledger {
        by_order.entry(*order).or_default().push((msg, action));
    }
    by_order
        .into_iter()
        .map(|(order, rows)| {
            let revoke = rows.iter().find(|(_, a)| *a == "SKIPPED").map(|(m, _)| (*m).clone());
            let delete =
                rows.iter().find(|(m, _)| Some(*m) != revoke.as_ref()).map(|(m, _)| (*m).clone());
            Txn { order, revoke, delete }
        })
        .collect()
}

fn txn_sql(i: usize, t: &Txn, pg: bool) -> String {
    let begin = if pg { "BEGIN" } else { "START TRANSACTION" };
    let o = t.order;
    let ledger = |suffix: &str, secs: i64| {
        format!(
            "INSERT INTO idempotent_msg (msg_id, order_id, event_type, expected_status, action, \
             observed_status, topic, kafka_partition, kafka_offset, consumer_id, decided_at) \
             VALUES ('w{i}-{suffix}', {o}, 'ORDER_PAID', 'PAID', 'DONE', 'PAID', 'order-event', 0, 0, 'writer', {})",
            at(pg, secs)
        )
    };
    let mut sql = vec![begin.to_string(), ledger("early", -1), ledger("late", 3600)];
    for (status, secs) in [("AUDITED", 0), ("AUDITED_LATE", 3600)] {
        sql.push(format!(
            "INSERT INTO order_status_history (order_id, status, changed_at) VALUES ({o}, '{status}', {})",
            at(pg, secs)
        ));
    }
    if let Some(m) = &t.revoke {
        sql.push(format!("UPDATE idempotent_msg SET action = 'REVOKED' WHERE msg_id = '{m}'"));
    }
    if let Some(m) = &t.delete {
        sql.push(format!("DELETE FROM idempotent_msg WHERE msg_id = '{m}'"));
    }
    sql.push("COMMIT".into());
    sql.join(";\n")
}

/// The exported ledger (`msg_id → action`) and the orders with an AUDITED status row.
fn exported(snapshot: &Path) -> (Ledger, BTreeSet<i64>, usize) {
    let mut ledger = BTreeMap::new();
    for batch in read_output(snapshot, "ledger") {
        let msg = batch.column_by_name("msg_id").unwrap().as_string::<i32>().clone();
        let order = batch.column_by_name("order_id").unwrap().as_primitive::<Int64Type>().clone();
        let action = batch.column_by_name("action").unwrap().as_string::<i32>().clone();
        for row in 0..batch.num_rows() {
            ledger.insert(
                msg.value(row).to_string(),
                (order.value(row), action.value(row).to_string()),
            );
        }
    }
    let mut audited = BTreeSet::new();
    let mut late = 0;
    for batch in read_output(snapshot, "status_history") {
        let order = batch.column_by_name("order_id").unwrap().as_primitive::<Int64Type>().clone();
        let status = batch.column_by_name("status").unwrap().as_string::<i32>().clone();
        for row in 0..batch.num_rows() {
            match status.value(row) {
                "AUDITED" => {
                    audited.insert(order.value(row));
                }
                "AUDITED_LATE" => late += 1,
                _ => {}
            }
        }
    }
    (ledger, audited, late)
}

/// Which transactions the snapshot holds; asserts each is whole or absent (`exact`; else
/// returns the split ones: committed while the connections' snapshots started, they are
/// in the tables read after it and not in the others) and no row after the cut or
/// untouched row is wrong. Returns the applied indexes (1-based) and the split ones.
fn applied(
    base: &Ledger,
    txns: &[Txn],
    committed: usize,
    snapshot: &Path,
    exact: bool,
) -> (Vec<usize>, Vec<usize>) {
    let (ledger, audited, late) = exported(snapshot);
    assert_eq!(late, 0, "a status change after the cut was exported");
    let mut touched = BTreeSet::new();
    let mut applied = Vec::new();
    let mut split = Vec::new();
    for (index, t) in txns.iter().enumerate().take(committed) {
        let i = index + 1;
        assert!(
            !ledger.contains_key(&format!("w{i}-late")),
            "a ledger row after the cut was exported"
        );
        let mut effects =
            vec![ledger.contains_key(&format!("w{i}-early")), audited.contains(&t.order)];
        if let Some(m) = &t.revoke {
            touched.insert(m.clone());
            effects.push(ledger.get(m).map(|r| r.1.as_str()) == Some("REVOKED"));
        }
        if let Some(m) = &t.delete {
            touched.insert(m.clone());
            effects.push(!ledger.contains_key(m));
        }
        let whole = effects.iter().all(|e| *e) || effects.iter().all(|e| !*e);
        assert!(whole || !exact, "transaction {i} is half in the snapshot: {effects:?}");
        if !whole {
            split.push(i);
        }
        if effects[0] {
            applied.push(i);
        }
    }
    for (msg, row) in base {
        if !touched.contains(msg) {
            assert_eq!(ledger.get(msg), Some(row), "{msg}: an untouched row changed or vanished");
        }
    }
    let written: usize = ledger.keys().filter(|m| m.starts_with('w')).count();
    assert_eq!(written, applied.len(), "rows of uncommitted transactions were exported");
    (applied, split)
}

/// Loads a generated day into `url`, runs the writer during an export with `connections`,
/// and returns `(applied, split, committed during the export, committed)`.
async fn export_while_writing(
    url: &str,
    connections: usize,
) -> (Vec<usize>, Vec<usize>, usize, usize) {
    let pg = url.starts_with("postgres");
    let dir = tempfile::tempdir().unwrap();
    let job_path = job_file(dir.path(), url, None);
    let mut text = std::fs::read_to_string(&job_path).unwrap();
    text.push_str(&format!(
        "\n[export]\nconnections = {connections}\nchunk_rows = 150\nbatch_rows = 64\n"
    ));
    std::fs::write(&job_path, text).unwrap();
    let job = JobConfig::load(&job_path).unwrap();

    // The export of the state before the writer starts: what the writer changes is
    // explained against it.
    let reference = dir.path().join("reference");
    let plan = ExportPlan {
        job: job.clone(),
        out: Location::parse(reference.to_str().unwrap()).unwrap(),
        cut: parse_instant(CUT).unwrap(),
    };
    export::export(&plan, &Events::none()).await.expect("the reference export");
    let base = exported(&reference).0;
    let txns = plan_txns(&base);
    let committed = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let writer = async {
        let mut db = Db::connect(url).await;
        for (index, t) in txns.iter().enumerate() {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            db.run(&txn_sql(index + 1, t, pg)).await.unwrap();
            committed.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    let out = dir.path().join("snapshot");
    let exporter = async {
        while committed.load(Ordering::SeqCst) < 3 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let before = committed.load(Ordering::SeqCst) as usize;
        let plan = ExportPlan {
            job,
            out: Location::parse(out.to_str().unwrap()).unwrap(),
            cut: parse_instant(CUT).unwrap(),
        };
        export::export(&plan, &Events::none()).await.expect("the export under writes");
        let after = committed.load(Ordering::SeqCst) as usize;
        stop.store(true, Ordering::SeqCst);
        (before, after)
    };
    let ((), (before, after)) = futures::join!(writer, exporter);
    let total = committed.load(Ordering::SeqCst) as usize;
    assert!(after > before, "no transaction committed during the export: nothing was tested");
    let exact = connections == 1 || pg;
    let (applied, split) = applied(&base, &txns, total, &out, exact);
    (applied, split, after - before, total)
}

/// A prefix `1..=k`?
fn prefix(applied: &[usize]) -> Option<usize> {
    applied.iter().enumerate().all(|(n, i)| *i == n + 1).then_some(applied.len())
}

/// Kills the export's connection while it streams a chunk; the export must fail, clearly,
/// without a manifest. An export that finished before a chunk query could be seen (a
/// loaded machine) is tried again, up to five times.
async fn killed_connection(url: &str) {
    for _ in 0..5 {
        if kill_one_export(url).await {
            return;
        }
    }
    panic!("five exports finished before their connection could be killed");
}

/// One attempt; `false` when the export finished before its connection was killed.
async fn kill_one_export(url: &str) -> bool {
    let pg = url.starts_with("postgres");
    let dir = tempfile::tempdir().unwrap();
    let job_path = job_file(dir.path(), url, None);
    let mut text = std::fs::read_to_string(&job_path).unwrap();
    text.push_str("\n[export]\nconnections = 1\nchunk_rows = 50\nbatch_rows = 16\n");
    std::fs::write(&job_path, text).unwrap();
    let job = JobConfig::load(&job_path).unwrap();
    let out = dir.path().join("snapshot");
    let plan = ExportPlan {
        job,
        out: Location::parse(out.to_str().unwrap()).unwrap(),
        cut: parse_instant(CUT).unwrap(),
    };
    let export = tokio::spawn(async move { export::export(&plan, &Events::none()).await });
    let mut admin = Db::connect(url).await;
    let find = if pg {
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND query LIKE '%recon_src.order_id BETWEEN%'"
    } else {
        ""
    };
    let mut killed = false;
    for _ in 0..2000 {
        if export.is_finished() {
            break;
        }
        if pg {
            let n: Vec<(bool,)> = match &mut admin {
                Db::Pg(c) => sqlx::query_as(find).fetch_all(c).await.unwrap(),
                Db::My(_) => unreachable!(),
            };
            killed = !n.is_empty();
        } else if let Db::My(c) = &mut admin {
            let ids: Vec<(i64,)> = sqlx::query_as(
                "SELECT id FROM information_schema.processlist WHERE info LIKE '%recon_src.order_id BETWEEN%' AND id <> CONNECTION_ID()",
            )
            .fetch_all(&mut *c)
            .await
            .unwrap();
            for (id,) in &ids {
                let _ = sqlx::raw_sql(&format!("KILL {id}")).execute(&mut *c).await;
            }
            killed = !ids.is_empty();
        }
        if killed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let result = export.await.unwrap();
    if !killed {
        return false;
    }
    let message = result.expect_err("a killed connection must fail the export").to_string();
    assert!(!out.join("manifest.json").exists(), "a manifest after a killed connection");
    assert!(
        message.contains("fulfilment")
            || message.contains("orders")
            || message.contains("points")
            || message.contains("wms")
            || message.contains("logistics"),
        "{message}"
    );
    true
}

async fn suite(url: &str, name: &str) {
    let mut lines = Vec::new();
    for connections in [1, 3] {
        let (applied, split, during, total) = export_while_writing(url, connections).await;
        let exact = connections == 1 || name == "PostgreSQL";
        match prefix(&applied) {
            Some(k) if split.is_empty() => lines.push(format!("connections={connections}: exactly the state after transaction {k} of {total} ({during} committed during the export)")),
            _ if exact => panic!("{name} connections={connections}: not one consistent state: {applied:?}"),
            _ => {
                // The whole prefix: a split transaction whose ledger row is in the snapshot
                // is in `applied` too, yet it ends the prefix.
                let k_lo = (1..=applied.len())
                    .take_while(|i| applied.contains(i) && !split.contains(i))
                    .count();
                let k_hi = applied.iter().chain(&split).max().copied().unwrap_or(0);
                // Only a transaction committed after the first snapshot started may differ
                // between the connections' snapshots.
                assert!(split.iter().all(|&i| i > k_lo), "{name}: split before {k_lo}: {split:?}");
                lines.push(format!("connections={connections}: transactions 1..={k_lo} and {} of {}..={k_hi}, {} split between tables read on connections that started apart (spread {}; {during} committed during the export)", applied.len() - k_lo, k_lo + 1, split.len(), k_hi - k_lo));
            }
        }
        // Reset for the next pass: a fresh load.
        reload(url).await;
    }
    killed_connection(url).await;
    say(&format!("concurrent writes {name}: every writer transaction whole or absent, nothing after the cut; {}; a killed connection left no manifest", lines.join("; ")));
}

/// The generated day loaded into `url` (dropping what the writer added).
async fn reload(url: &str) {
    let mut db = Db::connect(url).await;
    for table in [
        "idempotent_msg",
        "order_status_history",
        "points_receipt",
        "wms_receipt",
        "logistics_receipt",
    ] {
        let _ = db.run(&format!("DROP TABLE IF EXISTS {table}")).await;
    }
    let snapshot = day().await;
    load::load_snapshot(&snapshot, url, &Default::default()).await.unwrap();
}

/// A generated day of 1200 orders, made once per call site.
async fn day() -> Location {
    let dir = tempfile::tempdir().unwrap().keep().join("day");
    let location = Location::parse(dir.to_str().unwrap()).unwrap();
    let plan = effect_recon::workload::WorkloadPlan::new(location.clone(), 1200).unwrap();
    effect_recon::workload::generate(&plan).await.unwrap();
    location
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_export_under_concurrent_writes_is_one_consistent_state() {
    let Some(base) = env_url(MYSQL_ENV) else { return };
    let url = mysql_database(&base, "reliab_writes").await;
    reload(&url).await;
    suite(&url, "MariaDB").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_export_under_concurrent_writes_is_one_consistent_state() {
    let Some(base) = env_url(PG_ENV) else { return };
    let url = pg_schema(&base, "reliab_writes").await;
    reload(&url).await;
    suite(&url, "PostgreSQL").await;
}
