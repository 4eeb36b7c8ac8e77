//! Incremental nights against a real database changed in place night by night (SQLite
//! always; MariaDB and PostgreSQL when their URLs are set): every night, the chain's live
//! rows equal a full re-export of the same database state, cut and coverage, after a
//! total sort, and `run` over both gives byte-identical outputs. The history mixes new
//! rows, a late insert with an old event time, in-place updates (SKIPPED → REVOKED,
//! PENDING_REVIEW → DONE, a receipt → REVERSED), an event time moved out of the lookback
//! and one moved past the cut (it comes back the next night), and a transaction opened
//! before one export and committed after it.
//!
//! The same history with the watermark's open-transaction term and margin removed
//! (`EFFECT_RECON_TEST_WATERMARK=naive`) must lose that transaction's update; a hard
//! delete and an update that wrote an old `updated_at` back are caught by the shadow check
//! (`nightly --verify-full`: INCOMPLETE, exit 3, naming the table, key and column).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use effect_recon::config::{JobConfig, RuleSet};
use effect_recon::db::export::{self, ExportMode, ExportPlan};
use effect_recon::db::load;
use effect_recon::events::{Event, Events};
use effect_recon::recon::{self, RunPlan};
use effect_recon::snapshot::{Snapshot, SnapshotManifest, Table};
use effect_recon::storage::Location;
use effect_recon::time::{format_compact, parse_instant, Micros, DAY_MICROS};
use sqlx::Connection;

use super::common::{command, psv, text, tree_bytes};
use super::databases::{env_url, mysql_database, pg_schema, MYSQL_ENV, PG_ENV};
use super::reliability::{job_file, CUT};

const HOUR: Micros = 3_600_000_000;

thread_local! {
    /// Rows read per night by this thread's test: `(chain, full)`.
    static READ: std::cell::RefCell<Vec<(u64, u64)>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Orders judged per night by the run over the chain (`None`: every order).
    static JUDGED: std::cell::RefCell<Vec<Option<u64>>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Per night, the chunks each source of the chain's export was read in.
    static CHUNKS: std::cell::RefCell<Vec<Vec<usize>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A connection that runs statements and reads one text column.
enum Db {
    /// MariaDB, with the session zone its DATETIMEs are written in (hours east of UTC).
    My(sqlx::MySqlConnection, i64),
    Pg(sqlx::PgConnection),
    Lite(sqlx::SqliteConnection),
}

impl Db {
    async fn connect(url: &str) -> Db {
        Db::connect_zoned(url, 0).await
    }

    /// A connection writing zone-less times as wall time `hours` east of UTC (MariaDB).
    async fn connect_zoned(url: &str, hours: i64) -> Db {
        if url.starts_with("postgres") {
            Db::Pg(sqlx::PgConnection::connect(url).await.unwrap())
        } else if url.starts_with("mysql") {
            let mut conn = sqlx::MySqlConnection::connect(url).await.unwrap();
            let zone = format!("SET time_zone = '{:+03}:00'", hours);
            sqlx::raw_sql(&zone).execute(&mut conn).await.unwrap();
            Db::My(conn, hours)
        } else {
            Db::Lite(sqlx::SqliteConnection::connect(url).await.unwrap())
        }
    }

    async fn run(&mut self, sql: &str) {
        let result = match self {
            Db::My(c, _) => sqlx::raw_sql(sql).execute(c).await.map(drop),
            Db::Pg(c) => sqlx::raw_sql(sql).execute(c).await.map(drop),
            Db::Lite(c) => sqlx::raw_sql(sql).execute(c).await.map(drop),
        };
        result.unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    async fn strings(&mut self, sql: &str) -> Vec<String> {
        let rows: Vec<(String,)> = match self {
            Db::My(c, _) => sqlx::query_as(sql).fetch_all(c).await,
            Db::Pg(c) => sqlx::query_as(sql).fetch_all(c).await,
            Db::Lite(c) => sqlx::query_as(sql).fetch_all(c).await,
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
        rows.into_iter().map(|(s,)| s).collect()
    }

    /// A time literal of the family (SQLite text holds UTC here, MariaDB its zone's wall time).
    fn at(&self, micros: Micros) -> String {
        let t = chrono::DateTime::from_timestamp_micros(micros).unwrap();
        match self {
            Db::Pg(_) => format!("'{}+00'", t.format("%Y-%m-%d %H:%M:%S%.6f")),
            Db::My(_, hours) => {
                let wall = t + chrono::Duration::hours(*hours);
                format!("'{}'", wall.format("%Y-%m-%d %H:%M:%S%.6f"))
            }
            Db::Lite(_) => format!("'{}'", t.format("%Y-%m-%d %H:%M:%S%.6f")),
        }
    }
}

/// One database, its job and two roots: the chain's and the full exports'.
struct Bench {
    url: String,
    /// Hours east of UTC of the zone-less times (MariaDB), 0 elsewhere.
    hours: i64,
    job: PathBuf,
    chain_root: PathBuf,
    full_root: PathBuf,
    _dir: tempfile::TempDir,
}

impl Bench {
    async fn new(url: String, margin: &str) -> Bench {
        Bench::zoned(url, margin, 0).await
    }

    /// A source whose zone-less DATETIMEs are wall times `hours` east of UTC (`timezone` on
    /// every source, the loader and the history writing in that zone).
    async fn zoned(url: String, margin: &str, hours: i64) -> Bench {
        let dir = tempfile::tempdir().unwrap();
        let job = job_file(dir.path(), &url, None);
        let mut text = std::fs::read_to_string(&job).unwrap();
        if hours != 0 {
            let zone = format!("url   = \"{url}\"\ntimezone = \"{:+03}:00\"", hours);
            text = text.replace(&format!("url   = \"{url}\""), &zone);
        }
        text.push_str(&format!("\n[incremental]\nmargin = \"{margin}\"\nverify_full_every = 0\n"));
        std::fs::write(&job, text).unwrap();
        let day = tempfile::tempdir().unwrap().keep().join("day");
        let location = Location::parse(day.to_str().unwrap()).unwrap();
        let plan = effect_recon::workload::WorkloadPlan::new(location.clone(), 300).unwrap();
        effect_recon::workload::generate(&plan).await.unwrap();
        let options =
            load::LoadOptions { utc_offset_secs: (hours * 3600) as i32, ..Default::default() };
        load::load_snapshot(&location, &url, &options).await.unwrap();
        age_change_columns(&url).await;
        Bench {
            url,
            hours,
            job,
            chain_root: dir.path().join("recon"),
            full_root: dir.path().join("full"),
            _dir: dir,
        }
    }

    async fn db(&self) -> Db {
        Db::connect_zoned(&self.url, self.hours).await
    }

    /// Sources of more than `rows` rows are read in key-range chunks: an incremental
    /// night's delta is then sometimes more than its capped read may hold.
    fn with_chunk_rows(self, rows: u64) -> Bench {
        let mut text = std::fs::read_to_string(&self.job).unwrap();
        text.push_str(&format!("\n[export]\nchunk_rows = {rows}\n"));
        std::fs::write(&self.job, text).unwrap();
        self
    }

    fn job(&self) -> JobConfig {
        JobConfig::load(&self.job).unwrap()
    }

    /// Tonight's export into the chain's root (automatic) and a full one beside it; the
    /// rows each read go into [`READ`].
    async fn export_both(&self, cut: Micros) -> (PathBuf, PathBuf, SnapshotManifest) {
        let name = format!("snapshot={}", format_compact(cut));
        let chained = self.chain_root.join(&name);
        let plan = |out: &Path| ExportPlan {
            job: self.job(),
            out: Location::parse(out.to_str().unwrap()).unwrap(),
            cut,
        };
        let report = export::export(&plan(&chained), &Events::none()).await.unwrap();
        let full = self.full_root.join(&name);
        let full_report =
            export::export_with(&plan(&full), ExportMode::Full, &Events::none()).await.unwrap();
        READ.with(|r| r.borrow_mut().push((report.rows, full_report.rows)));
        let chunks = report.sources.iter().map(|s| s.chunks).collect();
        CHUNKS.with(|c| c.borrow_mut().push(chunks));
        (chained, full, report.manifest)
    }
}

/// The tables of the recommended schema.
const TABLES: [&str; 5] = [
    "idempotent_msg",
    "order_status_history",
    "points_receipt",
    "wms_receipt",
    "logistics_receipt",
];

/// Moves every loaded row's change column back to January: a loaded day is then as old
/// as a real one, so a night re-reads only what the history changes (and the carried
/// files, not a full re-read, hold the rest). PostgreSQL's triggers would stamp now().
async fn age_change_columns(url: &str) {
    let mut db = Db::connect(url).await;
    for table in TABLES {
        let sql = match db {
            Db::Pg(_) => format!(
                "ALTER TABLE {table} DISABLE TRIGGER USER; UPDATE {table} SET updated_at = '2026-01-01 00:00:00+00'; ALTER TABLE {table} ENABLE TRIGGER USER"
            ),
            Db::Lite(_) => format!("UPDATE {table} SET updated_at = '2026-01-01 00:00:00.000'"),
            Db::My(..) => format!("UPDATE {table} SET updated_at = '2026-01-01 00:00:00'"),
        };
        db.run(&sql).await;
    }
}

/// Every live row of a snapshot, per table, totally sorted.
async fn live_rows(snapshot: &Path) -> BTreeMap<&'static str, String> {
    let ctx = effect_recon::engine::session::build(&Default::default()).unwrap();
    let location = Location::parse(snapshot.to_str().unwrap()).unwrap();
    Snapshot::open(&location).await.unwrap().register(&ctx).await.unwrap();
    let mut out = BTreeMap::new();
    for table in Table::ALL {
        let columns: Vec<&str> = table.columns().iter().map(|c| c.name).collect();
        let sql = format!("SELECT * FROM {} ORDER BY {}", table.name(), columns.join(", "));
        let batches = ctx.sql(&sql).await.unwrap().collect().await.unwrap();
        out.insert(table.name(), psv(&batches));
    }
    out
}

/// Runs `snapshot` into `root` (following the latest earlier run there, judging every
/// order when `judge_all`); the run folder and the orders it judged (`None`: all).
async fn run(snapshot: &Path, root: &Path, judge_all: bool) -> (PathBuf, Option<u64>) {
    let mut plan = RunPlan::new(
        Location::parse(snapshot.to_str().unwrap()).unwrap(),
        Location::parse(root.to_str().unwrap()).unwrap(),
        RuleSet::load(None).unwrap(),
    );
    plan.judge_all = judge_all;
    let judged = std::sync::Arc::new(std::sync::Mutex::new(None));
    let seen = std::sync::Arc::clone(&judged);
    let events = Events::new(move |event| {
        if let Event::RunJudged { orders, .. } = event {
            *seen.lock().unwrap() = Some(*orders);
        }
    });
    let report = recon::run(&plan, &events).await.unwrap();
    let judged = *judged.lock().unwrap();
    (PathBuf::from(report.folder), judged)
}

/// A run's output tables and its summary without the clock-dependent timings.
fn outputs(run: &Path) -> Vec<(String, Vec<u8>)> {
    tree_bytes(run)
        .into_iter()
        .filter(|(path, _)| path.ends_with(".parquet") || path == "summary.json")
        .map(|(path, bytes)| {
            if path == "summary.json" {
                let mut json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
                json.as_object_mut().unwrap().remove("timings_ms");
                return (path, serde_json::to_vec_pretty(&json).unwrap());
            }
            (path, bytes)
        })
        .collect()
}

/// One night: export both ways, compare the live rows and the runs' outputs. Returns
/// whether the live rows were equal (the runs are compared only then).
async fn night(bench: &Bench, cut: Micros, expect_mode: &str) -> bool {
    let (chained, full, manifest) = bench.export_both(cut).await;
    let chain = manifest.chain.expect("an incremental-ready job writes snapshot@2");
    assert_eq!(chain.mode, expect_mode, "night {}: {:?}", format_compact(cut), chain.reason);
    let (a, b) = (live_rows(&chained).await, live_rows(&full).await);
    if a != b {
        return false;
    }
    let (ra, judged) = run(&chained, &bench.chain_root, false).await;
    let (rb, _) = run(&full, &bench.full_root, false).await;
    assert_eq!(outputs(&ra), outputs(&rb), "night {}: run outputs differ", format_compact(cut));
    // The same night judging every order: what the judged orders leave out changes nothing.
    let (rc, all) = run(&full, &bench.full_root.with_file_name("all"), true).await;
    assert_eq!(all, None, "--judge-all judged some orders only");
    assert_eq!(
        outputs(&ra),
        outputs(&rc),
        "night {}: judging {judged:?} orders differs from judging every order",
        format_compact(cut)
    );
    JUDGED.with(|j| j.borrow_mut().push(judged));
    true
}

/// The rows the history changes: a few of the loaded day's and some of its own, so every
/// kind of change has a row to change whatever the generator planted.
struct Picks {
    skipped: Vec<String>,
    pending: Vec<String>,
    receipts: Vec<String>,
    done: Vec<String>,
}

async fn picks(db: &mut Db, cut0: Micros) -> Picks {
    for (i, action) in ["SKIPPED", "SKIPPED", "PENDING_REVIEW"].iter().enumerate() {
        let order = 800_001 + i as i64;
        db.run(&format!(
            "INSERT INTO idempotent_msg (msg_id, order_id, event_type, expected_status, action, observed_status, topic, kafka_partition, kafka_offset, consumer_id, decided_at) \
             VALUES ('own-{i}', {order}, 'ORDER_PAID', 'PAID', '{action}', 'SHIPPED', 'order-event', 3, {order}, 'c3', {at});\n\
             INSERT INTO order_status_history (order_id, status, changed_at) VALUES ({order}, 'PAID', {at})",
            at = db.at(cut0 - 5 * HOUR)
        ))
        .await;
    }
    let q = |action: &str| {
        format!("SELECT msg_id FROM idempotent_msg WHERE action = '{action}' ORDER BY msg_id")
    };
    Picks {
        skipped: db.strings(&q("SKIPPED")).await,
        pending: db.strings(&q("PENDING_REVIEW")).await,
        receipts: db
            .strings("SELECT receipt_id FROM points_receipt WHERE status = 'SUCCEEDED' ORDER BY receipt_id")
            .await,
        done: db.strings(&q("DONE")).await,
    }
}

fn new_order(db: &Db, order: i64, at: Micros) -> String {
    format!(
        "INSERT INTO idempotent_msg (msg_id, order_id, event_type, expected_status, action, observed_status, topic, kafka_partition, kafka_offset, consumer_id, decided_at) \
         VALUES ('new-{order}', {order}, 'ORDER_PAID', 'PAID', 'DONE', 'PAID', 'order-event', 1, {order}, 'c1', {at});\n\
         INSERT INTO order_status_history (order_id, status, changed_at) VALUES ({order}, 'PAID', {at});\n\
         INSERT INTO points_receipt (receipt_id, order_id, effect, msg_id, status, created_at) VALUES ('r-new-{order}', {order}, 'points_grant', 'new-{order}', 'SUCCEEDED', {at})",
        at = db.at(at)
    )
}

/// The history of nights 2..=4, applied in place; night 3 exports while a transaction
/// that updated a row before it is still open, and commits it afterwards.
async fn history(bench: &Bench, naive: bool) -> Vec<bool> {
    let cut0 = parse_instant(CUT).unwrap();
    let mut db = bench.db().await;
    let p = picks(&mut db, cut0).await;
    let counts = (p.skipped.len(), p.pending.len(), p.receipts.len(), p.done.len());
    assert!(counts.0 >= 2 && counts.1 >= 1 && counts.2 >= 2 && counts.3 >= 2, "{counts:?}");
    let mut equal = Vec::new();
    equal.push(night(bench, cut0, "full").await);

    // Night 2: new rows, a late row with an old event time, updates in place, an event
    // time moved out of the lookback and one moved past tonight's cut.
    let cut = cut0 + DAY_MICROS;
    let statements = [
        new_order(&db, 900_001, cut - HOUR),
        format!(
            "INSERT INTO idempotent_msg (msg_id, order_id, event_type, expected_status, action, observed_status, topic, kafka_partition, kafka_offset, consumer_id, decided_at) \
             VALUES ('late-1', 900_002, 'ORDER_SHIPPED', 'PAID', 'SKIPPED', 'CREATED', 'order-event', 2, 7, 'c2', {})",
            db.at(cut0 - 3 * HOUR)
        )
        .replace("900_002", "900002"),
        format!("UPDATE idempotent_msg SET action = 'REVOKED' WHERE msg_id = '{}'", p.skipped[0]),
        format!("UPDATE idempotent_msg SET action = 'DONE' WHERE msg_id = '{}'", p.pending[0]),
        format!("UPDATE points_receipt SET status = 'REVERSED' WHERE receipt_id = '{}'", p.receipts[0]),
        format!("UPDATE idempotent_msg SET decided_at = {} WHERE msg_id = '{}'", db.at(cut0 - 60 * DAY_MICROS), p.done[0]),
        format!("UPDATE idempotent_msg SET decided_at = {} WHERE msg_id = '{}'", db.at(cut + 5 * HOUR), p.done[1]),
    ];
    for sql in &statements {
        db.run(sql).await;
    }
    equal.push(night(bench, cut, "incremental").await);

    // Night 3: a transaction updates a row, stays open over the export, commits after it.
    let cut = cut0 + 2 * DAY_MICROS;
    db.run(&new_order(&db, 900_003, cut - 2 * HOUR)).await;
    let mut open = bench.db().await;
    open.run("BEGIN").await;
    open.run(&format!(
        "UPDATE idempotent_msg SET action = 'REVOKED' WHERE msg_id = '{}'",
        p.skipped[1]
    ))
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    if naive {
        equal.push(naive_night(bench, cut).await);
    } else {
        equal.push(night(bench, cut, "incremental").await);
    }
    open.run("COMMIT").await;

    // Night 4: the committed update must be in the chain now. A late status change, ten
    // minutes before the listing bound (cut0), is an order's only row: its missing points
    // break after the bound, so the run must judge it although the row is older.
    let cut = cut0 + 3 * DAY_MICROS;
    db.run(&format!(
        "UPDATE points_receipt SET status = 'REVERSED' WHERE receipt_id = '{}'",
        p.receipts[1]
    ))
    .await;
    db.run(&format!(
        "INSERT INTO order_status_history (order_id, status, changed_at) VALUES (900004, 'PAID', {})",
        db.at(cut0 - HOUR / 6)
    ))
    .await;
    if naive {
        equal.push(naive_night(bench, cut).await);
    } else {
        equal.push(night(bench, cut, "incremental").await);
    }
    equal
}

/// A night exported by the binary with the watermark's safety terms removed; the live
/// rows compared with a full export as [`night`] does.
async fn naive_night(bench: &Bench, cut: Micros) -> bool {
    let name = format!("snapshot={}", format_compact(cut));
    let chained = bench.chain_root.join(&name);
    let cut_text = effect_recon::time::format_instant(cut);
    let output = command(&[
        "export",
        "--config",
        bench.job.to_str().unwrap(),
        "--out",
        chained.to_str().unwrap(),
        "--cut",
        &cut_text,
    ])
    .env("EFFECT_RECON_TEST_WATERMARK", "naive")
    .output()
    .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", text(&output).1);
    let full = bench.full_root.join(&name);
    let plan =
        ExportPlan { job: bench.job(), out: Location::parse(full.to_str().unwrap()).unwrap(), cut };
    export::export_with(&plan, ExportMode::Full, &Events::none()).await.unwrap();
    live_rows(&chained).await == live_rows(&full).await
}

async fn chain_equals_full_every_night(url: String, margin: &str, name: &str) {
    let bench = Bench::new(url, margin).await;
    chain_equals_full(bench, name).await;
}

async fn chain_equals_full(bench: Bench, name: &str) {
    let equal = history(&bench, false).await;
    assert_eq!(equal, vec![true; 4], "{name}: a night's chain differs from its full export");
    let read = READ.with(|r| r.borrow().clone());
    // The first night starts a chain and judges every order; by the last the loaded day
    // lies mostly before the listing bound's reach, so fewer are judged than it holds.
    let judged = JUDGED.with(|j| j.borrow().clone());
    assert_eq!(judged[0], None, "{name}: a run that follows none judged some orders only");
    let last = judged[3].unwrap_or(u64::MAX);
    assert!(
        last < 300,
        "{name}: the last night judged {last} orders, not fewer than the day's 300"
    );
    let chunks = CHUNKS.with(|c| c.borrow().clone());
    super::reliability::say(&format!(
        "incremental {name}: 4 nights, every chain equal to a full re-export (live rows and run outputs, also judging every order); rows read per night, chain vs full: {read:?}; orders judged: {judged:?}; chunks per source: {chunks:?}"
    ));
}

async fn naive_watermark_loses_the_open_transaction(url: String, name: &str) {
    let bench = Bench::new(url, "0s").await;
    let equal = history(&bench, true).await;
    assert_eq!(equal[..2], [true, true], "{name}: the nights before the open transaction");
    assert!(
        equal[3..].contains(&false),
        "{name}: without the open-transaction term and the margin, the update committed after night 3's export must be lost: {equal:?}"
    );
}

fn sqlite_url(dir: &Path) -> String {
    format!("sqlite:{}", dir.join("fulfilment.db").display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_chain_equals_a_full_export_every_night() {
    let dir = tempfile::tempdir().unwrap().keep();
    // Deltas of at most 4 rows are read whole (capped, no COUNT), larger ones counted
    // and chunked after the capped read found a fifth row: both must give the same chain.
    let bench = Bench::new(sqlite_url(&dir), "5m").await.with_chunk_rows(4);
    chain_equals_full(bench, "SQLite").await;
    let chunks = CHUNKS.with(|c| c.borrow().clone());
    let nights = &chunks[1..];
    assert!(
        nights.iter().flatten().any(|&n| n == 1) && nights.iter().flatten().any(|&n| n > 1),
        "the incremental nights must read some delta whole and chunk another: {chunks:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_chain_without_margin_loses_a_late_commit() {
    let dir = tempfile::tempdir().unwrap().keep();
    naive_watermark_loses_the_open_transaction(sqlite_url(&dir), "SQLite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_chain_equals_a_full_export_every_night() {
    let Some(base) = env_url(MYSQL_ENV) else { return };
    let url = mysql_database(&base, "incremental_chain").await;
    // One second of margin: the open-transaction term must do the rest.
    chain_equals_full_every_night(url, "1s", "MariaDB").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_chain_without_the_open_transaction_term_loses_a_late_commit() {
    let Some(base) = env_url(MYSQL_ENV) else { return };
    let url = mysql_database(&base, "incremental_naive").await;
    naive_watermark_loses_the_open_transaction(url, "MariaDB").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_chain_equals_a_full_export_every_night() {
    let Some(base) = env_url(PG_ENV) else { return };
    let url = pg_schema(&base, "incremental_chain").await;
    chain_equals_full_every_night(url, "1s", "PostgreSQL").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_chain_without_the_open_transaction_term_loses_a_late_commit() {
    let Some(base) = env_url(PG_ENV) else { return };
    let url = pg_schema(&base, "incremental_naive").await;
    naive_watermark_loses_the_open_transaction(url, "PostgreSQL").await;
}

/// `nightly` through the binary for `cut`; `(exit code, stderr)`.
fn nightly(bench: &Bench, cut: Micros, extra: &[&str]) -> (Option<i32>, String) {
    let cut = effect_recon::time::format_instant(cut);
    let mut args = vec!["nightly", "--config", bench.job.to_str().unwrap(), "--cut", &cut];
    args.extend(extra);
    let output = command(&args).output().unwrap();
    (output.status.code(), text(&output).1)
}

fn manifest(root: &Path, cut: Micros) -> SnapshotManifest {
    let path = root.join(format!("snapshot={}", format_compact(cut))).join("manifest.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_shadow_check_catches_a_hard_delete_and_a_stale_change_column() {
    let dir = tempfile::tempdir().unwrap().keep();
    let bench = Bench::new(sqlite_url(&dir), "5m").await;
    let cut0 = parse_instant(CUT).unwrap();
    let mut db = Db::connect(&bench.url).await;
    let p = picks(&mut db, cut0).await;
    for night in 0..2 {
        let (code, err) = nightly(&bench, cut0 + night * DAY_MICROS, &[]);
        assert_eq!(code, Some(0), "{err}");
    }
    assert_eq!(manifest(&bench.chain_root, cut0 + DAY_MICROS).chain.unwrap().mode, "incremental");

    // A hard delete inside the lookback: no change column can show it.
    db.run(&format!("DELETE FROM points_receipt WHERE receipt_id = '{}'", p.receipts[0])).await;
    let cut = cut0 + 2 * DAY_MICROS;
    let (code, err) = nightly(&bench, cut, &["--verify-full"]);
    assert_eq!(code, Some(3), "{err}");
    let named = format!(
        "receipts[points] key '{}': live in the chain, not in the full export",
        p.receipts[0]
    );
    assert!(err.contains("shadow check FAILED") && err.contains(&named), "{err}");
    let rebased = manifest(&bench.chain_root, cut).chain.unwrap();
    assert_eq!(
        (rebased.seq, rebased.mode.as_str()),
        (0, "full"),
        "the chain rebases on the full export"
    );
    assert_eq!(rebased.shadow.unwrap().result, "differs");

    // The next night follows the rebased chain and is COMPLETE.
    let cut = cut0 + 3 * DAY_MICROS;
    let (code, err) = nightly(&bench, cut, &[]);
    assert_eq!(code, Some(0), "{err}");
    let chain = manifest(&bench.chain_root, cut).chain.unwrap();
    assert_eq!((chain.seq, chain.mode.as_str()), (1, "incremental"), "{err}");

    // An update that wrote an old change column back.
    db.run(&format!(
        "UPDATE idempotent_msg SET action = 'REVOKED', updated_at = '2000-01-01 00:00:00.000' WHERE msg_id = '{}'",
        p.skipped[0]
    ))
    .await;
    let cut = cut0 + 4 * DAY_MICROS;
    let (code, err) = nightly(&bench, cut, &["--verify-full"]);
    assert_eq!(code, Some(3), "{err}");
    let named = format!(
        "ledger[fulfilment] key '{}': column action is REVOKED in the full export, SKIPPED in the chain",
        p.skipped[0]
    );
    assert!(err.contains(&named), "{err}");

    // With nothing wrong, a shadow check passes and the run is COMPLETE.
    let cut = cut0 + 5 * DAY_MICROS;
    let (code, err) = nightly(&bench, cut, &["--verify-full"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("shadow check: the incremental chain equals a full export"), "{err}");
}

/// The bench's job with `edit` applied to its text.
fn edited_job(bench: &Bench, edit: impl Fn(String) -> String) -> PathBuf {
    let text = edit(std::fs::read_to_string(&bench.job).unwrap());
    let path = bench.job.with_file_name("edited.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn export_cli(job: &Path, out: &Path, cut: Micros) -> (Option<i32>, String) {
    let cut = effect_recon::time::format_instant(cut);
    let output = command(&[
        "export",
        "--config",
        job.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--cut",
        &cut,
    ])
    .output()
    .unwrap();
    (output.status.code(), text(&output).1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_change_columns_and_broken_previous_snapshots_are_refused_or_exported_in_full() {
    let dir = tempfile::tempdir().unwrap().keep();
    let bench = Bench::new(sqlite_url(&dir), "5m").await;
    let cut0 = parse_instant(CUT).unwrap();
    let out = |name: &str| bench.chain_root.join(name);

    // A change column the query does not return: named, exit 2, no manifest.
    let job = edited_job(&bench, |t| {
        t.replacen(
            "changed_column = \"updated_at\"\nquery = \"\"\"\nSELECT id,",
            "changed_column = \"modified_at\"\nquery = \"\"\"\nSELECT id,",
            1,
        )
    });
    let (code, err) = export_cli(&job, &out("bad-column"), cut0);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("orders") && err.contains("'modified_at'") && err.contains("changed_column"),
        "{err}"
    );
    assert!(!out("bad-column").join("manifest.json").exists());

    // A key that is not unique: the value is named.
    let job = edited_job(&bench, |t| {
        t.replacen("key            = \"msg_id\"", "key            = \"order_id\"", 1)
    });
    let (code, err) = export_cli(&job, &out("bad-key"), cut0);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("fulfilment") && err.contains("key column order_id is not unique"),
        "{err}"
    );
    assert!(!out("bad-key").join("manifest.json").exists());

    // A key without its change column is a config error.
    let job = edited_job(&bench, |t| t.replacen("changed_column = \"updated_at\"\n", "", 1));
    let (code, err) = export_cli(&job, &out("half"), cut0);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("key and changed_column go together"), "{err}");

    // A previous snapshot with a file gone (or altered): tonight is a full export, said in
    // one line and in the manifest.
    let first = bench.chain_root.join(format!("snapshot={}", format_compact(cut0)));
    let (code, err) = export_cli(&bench.job, &first, cut0);
    assert_eq!(code, Some(0), "{err}");
    let victim = first.join("receipts/points/part-00000.parquet");
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes[10] ^= 0xff;
    std::fs::write(&victim, bytes).unwrap();
    let second = bench.chain_root.join(format!("snapshot={}", format_compact(cut0 + DAY_MICROS)));
    let (code, err) = export_cli(&bench.job, &second, cut0 + DAY_MICROS);
    assert_eq!(code, Some(0), "{err}");
    let line = "export: full export (the previous snapshot snapshot=20261129T160000Z: file receipts/points/part-00000.parquet does not match its SHA-256 in the manifest)";
    assert!(err.contains(line), "{err}");
    let chain = manifest(&bench.chain_root, cut0 + DAY_MICROS).chain.unwrap();
    assert_eq!(chain.mode, "full");
    assert!(chain.reason.unwrap().contains("does not match its SHA-256"));
    std::fs::remove_file(&victim).unwrap();
    let third =
        bench.chain_root.join(format!("snapshot={}", format_compact(cut0 + 2 * DAY_MICROS)));
    let (code, err) = export_cli(&bench.job, &third, cut0 + 2 * DAY_MICROS);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("export: incremental, segment 1 on snapshot=20261130T160000Z"), "{err}");

    // A previous snapshot that names superseded rows by key only (an older effect-recon
    // wrote it): a full export, said in one line.
    let third_manifest = third.join("manifest.json");
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&third_manifest).unwrap()).unwrap();
    json["chain"].as_object_mut().unwrap().remove("positions");
    std::fs::write(&third_manifest, serde_json::to_vec_pretty(&json).unwrap()).unwrap();
    let fourth =
        bench.chain_root.join(format!("snapshot={}", format_compact(cut0 + 3 * DAY_MICROS)));
    let (code, err) = export_cli(&bench.job, &fourth, cut0 + 3 * DAY_MICROS);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("export: full export (the previous snapshot snapshot=20261201T160000Z names superseded rows by key only"), "{err}");
}

fn copy_tree(from: &Path, to: &Path) {
    for (path, bytes) in tree_bytes(from) {
        let target = to.join(path);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::write(target, bytes).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_compaction_keeps_every_live_row_and_gc_keeps_every_referenced_file() {
    let dir = tempfile::tempdir().unwrap().keep();
    let bench = Bench::new(sqlite_url(&dir), "5m").await;
    assert_eq!(history(&bench, false).await, vec![true; 4]);
    let cut0 = parse_instant(CUT).unwrap();
    let head = bench.chain_root.join(format!("snapshot={}", format_compact(cut0 + 3 * DAY_MICROS)));
    let compacted =
        head.with_file_name(format!("{}.c001", head.file_name().unwrap().to_str().unwrap()));
    let root = bench.chain_root.to_str().unwrap();

    // A clean compaction of a copy, then one killed at its first Parquet part and rerun.
    let copy = dir.join("copy");
    copy_tree(&bench.chain_root, &copy);
    let clean = command(&["compact", "--root", copy.to_str().unwrap()]).output().unwrap();
    assert_eq!(clean.status.code(), Some(0), "{}", text(&clean).1);
    let killed = command(&["compact", "--root", root])
        .env("EFFECT_RECON_CRASH_AT", "part-written")
        .output()
        .unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&killed.status), Some(9));
    assert!(!compacted.join("manifest.json").exists(), "a manifest after a killed compaction");
    let rerun = command(&["compact", "--root", root]).output().unwrap();
    assert_eq!(rerun.status.code(), Some(0), "{}", text(&rerun).1);
    assert!(text(&rerun).0.contains("each source counted equal"), "{}", text(&rerun).0);
    let same = std::fs::read(compacted.join("manifest.json")).unwrap();
    let copy_manifest = copy.join(compacted.file_name().unwrap()).join("manifest.json");
    assert_eq!(same, std::fs::read(copy_manifest).unwrap(), "the rerun wrote another manifest");
    let chain = manifest(&bench.chain_root, cut0 + 3 * DAY_MICROS);
    let head_chain = chain.chain.as_ref().unwrap();
    assert!(head_chain.positions, "this version names superseded rows by position");
    let deleted: u64 = head_chain.deletes.iter().map(|d| d.rows).sum();
    let superseding: u64 = head_chain.keys.iter().map(|k| k.rows).sum();
    assert!(deleted > 0 && superseding > 0, "the history superseded rows: {head_chain:?}");
    // A position deletes file that does not hold what the manifest says is bad input
    // naming it (on a copy: the chain itself goes on).
    let broken = dir.join("broken");
    copy_tree(&bench.chain_root, &broken);
    let broken_head = broken.join(head.file_name().unwrap());
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(broken_head.join("manifest.json")).unwrap()).unwrap();
    let listed = json["chain"]["deletes"][0]["rows"].as_u64().unwrap();
    json["chain"]["deletes"][0]["rows"] = (listed + 1).into();
    std::fs::write(broken_head.join("manifest.json"), serde_json::to_vec(&json).unwrap()).unwrap();
    let out = dir.join("broken-run");
    let (snapshot, out) = (broken_head.to_str().unwrap(), out.to_str().unwrap());
    let refused = command(&["run", "--snapshot", snapshot, "--out", out]).output().unwrap();
    let (_, err) = text(&refused);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    let named = head_chain.deletes[0].path.as_str();
    assert!(
        err.contains(named) && err.contains(&format!("manifest.json says {}", listed + 1)),
        "{err}"
    );
    let compact_chain: SnapshotManifest = serde_json::from_slice(&same).unwrap();
    assert!(compact_chain.chain.as_ref().unwrap().keys.is_empty());
    assert!(compact_chain
        .tables
        .values()
        .flat_map(|t| &t.files)
        .all(|f| !f.path.starts_with("../")));
    assert!(
        chain.chain.unwrap().files.keys().any(|p| p.starts_with("../")),
        "the head was a chain"
    );
    assert_eq!(
        live_rows(&head).await,
        live_rows(&compacted).await,
        "compaction changed a live row"
    );

    // The next night follows the compaction and still equals a full export.
    let cut = cut0 + 4 * DAY_MICROS;
    let mut db = Db::connect(&bench.url).await;
    db.run(&new_order(&db, 900_005, cut - HOUR)).await;
    assert!(night(&bench, cut, "incremental").await);
    let next = manifest(&bench.chain_root, cut).chain.unwrap();
    assert_eq!(next.previous.as_deref(), compacted.file_name().unwrap().to_str());

    // gc: a dry run deletes nothing; applied, every retained snapshot still reads whole.
    let before = tree_bytes(&bench.chain_root).len();
    let dry =
        command(&["gc", "--root", root, "--keep-runs", "1", "--grace", "0s"]).output().unwrap();
    assert_eq!(dry.status.code(), Some(0), "{}", text(&dry).1);
    assert_eq!(tree_bytes(&bench.chain_root).len(), before, "a dry run deleted something");
    let applied = command(&["gc", "--root", root, "--keep-runs", "1", "--grace", "0s", "--apply"])
        .output()
        .unwrap();
    assert_eq!(applied.status.code(), Some(0), "{}", text(&applied).1);
    let after = tree_bytes(&bench.chain_root).len();
    assert!(after < before, "gc deleted nothing: {}", text(&applied).0);
    for name in
        effect_recon::compact::snapshot_folders(&Location::parse(root).unwrap()).await.unwrap()
    {
        live_rows(&bench.chain_root.join(name)).await;
    }
    assert_eq!(
        live_rows(&bench.chain_root.join(format!("snapshot={}", format_compact(cut)))).await,
        live_rows(&bench.full_root.join(format!("snapshot={}", format_compact(cut)))).await
    );
    super::reliability::say(&format!(
        "incremental compact/gc: a killed compaction reran to the same manifest; gc kept {after} of {before} files, every retained snapshot whole"
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_chain_in_plus_eight_hours_equals_the_utc_chain() {
    let Some(base) = env_url(MYSQL_ENV) else { return };
    let utc = Bench::new(mysql_database(&base, "incremental_utc").await, "1s").await;
    let east = Bench::zoned(mysql_database(&base, "incremental_east").await, "1s", 8).await;
    assert_eq!(history(&utc, false).await, vec![true; 4]);
    assert_eq!(history(&east, false).await, vec![true; 4]);
    let cut0 = parse_instant(CUT).unwrap();
    for night in 0..4 {
        let name = format!("snapshot={}", format_compact(cut0 + night * DAY_MICROS));
        assert_eq!(
            live_rows(&utc.chain_root.join(&name)).await,
            live_rows(&east.chain_root.join(&name)).await,
            "night {night}: the +08:00 chain differs from the UTC chain"
        );
    }
    super::reliability::say("incremental MariaDB +08:00: 4 nights, the chain of zone-less +08:00 DATETIMEs equals the UTC chain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_chain_over_two_databases_keeps_a_watermark_per_database() {
    let dir = tempfile::tempdir().unwrap().keep();
    let bench = Bench::new(sqlite_url(&dir), "5m").await;
    // The logistics receipts come from a second database with its own probe.
    let second = format!("sqlite:{}", dir.join("logistics.db").display());
    let day = tempfile::tempdir().unwrap().keep().join("day");
    let location = Location::parse(day.to_str().unwrap()).unwrap();
    let plan = effect_recon::workload::WorkloadPlan::new(location.clone(), 300).unwrap();
    effect_recon::workload::generate(&plan).await.unwrap();
    load::load_snapshot(&location, &second, &Default::default()).await.unwrap();
    age_change_columns(&second).await;
    let text = std::fs::read_to_string(&bench.job).unwrap();
    let (head, logistics) = text.split_once("name  = \"logistics\"").unwrap();
    let logistics = logistics.replacen(&bench.url, &second, 1);
    std::fs::write(&bench.job, format!("{head}name  = \"logistics\"{logistics}")).unwrap();

    let cut0 = parse_instant(CUT).unwrap();
    assert!(night(&bench, cut0, "full").await);
    let mut db2 = Db::connect(&second).await;
    let receipt = db2
        .strings("SELECT receipt_id FROM logistics_receipt WHERE status = 'SUCCEEDED' ORDER BY receipt_id")
        .await
        .remove(0);
    db2.run(&format!(
        "UPDATE logistics_receipt SET status = 'REVERSED' WHERE receipt_id = '{receipt}'"
    ))
    .await;
    let mut db1 = Db::connect(&bench.url).await;
    db1.run(&new_order(&db1, 900_011, cut0 + DAY_MICROS - HOUR)).await;
    assert!(
        night(&bench, cut0 + DAY_MICROS, "incremental").await,
        "the chain over two databases differs"
    );
    let chain = manifest(&bench.chain_root, cut0 + DAY_MICROS).chain.unwrap();
    let (ledger, logistics) =
        (&chain.sources["ledger[fulfilment]"], &chain.sources["receipts[logistics]"]);
    assert!(ledger.watermark.is_some() && logistics.watermark.is_some());
    assert_ne!(ledger.probe_time, logistics.probe_time, "one probe per database");
    assert_eq!(
        chain.sources["receipts[points]"].probe_time, ledger.probe_time,
        "one probe per database"
    );
}

/// A reader without the privilege the probe needs: the night is exported, its watermark
/// is missing with the privilege named, and the next night is a full export saying why.
async fn without_probe_privilege(bench: &Bench, reader_url: &str, privilege: &str, name: &str) {
    let text = std::fs::read_to_string(&bench.job).unwrap().replace(&bench.url, reader_url);
    std::fs::write(&bench.job, text).unwrap();
    let cut0 = parse_instant(CUT).unwrap();
    let (_, _, first) = bench.export_both(cut0).await;
    let mark = &first.chain.unwrap().sources["ledger[fulfilment]"];
    assert!(mark.watermark.is_none(), "{name}: a watermark without seeing open transactions");
    assert!(mark.probe_note.as_deref().unwrap_or("").contains(privilege), "{name}: {mark:?}");
    let (_, _, second) = bench.export_both(cut0 + DAY_MICROS).await;
    let chain = second.chain.unwrap();
    assert_eq!(chain.mode, "full", "{name}");
    let reason = chain.reason.unwrap();
    assert!(reason.contains("has no watermark") && reason.contains(privilege), "{name}: {reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_reader_without_process_gets_full_nights_naming_the_privilege() {
    let Some(base) = env_url(MYSQL_ENV) else { return };
    let url = mysql_database(&base, "incremental_reader").await;
    let bench = Bench::new(url.clone(), "1s").await;
    let mut admin = Db::connect(&url).await;
    admin
        .run("DROP USER IF EXISTS 'recon_probe'@'%'; CREATE USER 'recon_probe'@'%'; GRANT SELECT ON incremental_reader.* TO 'recon_probe'@'%'")
        .await;
    let mut reader = url::Url::parse(&url).unwrap();
    reader.set_username("recon_probe").unwrap();
    without_probe_privilege(&bench, reader.as_str(), "PROCESS", "MariaDB").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_reader_without_read_all_stats_gets_full_nights_naming_the_privilege() {
    let Some(base) = env_url(PG_ENV) else { return };
    let url = pg_schema(&base, "incremental_reader").await;
    let bench = Bench::new(url.clone(), "1s").await;
    let mut admin = Db::connect(&url).await;
    admin
        .run("DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'recon_probe') THEN CREATE ROLE recon_probe LOGIN; END IF; END $$; GRANT USAGE ON SCHEMA incremental_reader TO recon_probe; GRANT SELECT ON ALL TABLES IN SCHEMA incremental_reader TO recon_probe")
        .await;
    let mut reader = url::Url::parse(&url).unwrap();
    reader.set_username("recon_probe").unwrap();
    without_probe_privilege(&bench, reader.as_str(), "pg_read_all_stats", "PostgreSQL").await;
}
