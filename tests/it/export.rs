//! `export` and `nightly` against real databases.
//!
//! SQLite always runs. MariaDB/MySQL and PostgreSQL run only when
//! `EFFECT_RECON_TEST_MYSQL_URL` / `EFFECT_RECON_TEST_PG_URL` are set (e.g.
//! `mysql://root@127.0.0.1:3306/test`, `postgres://postgres@127.0.0.1:5432/test`); unset,
//! each such test prints `SKIPPED: ...` and returns; set but unreachable, it fails.
//! Every database test works in its own database (MySQL) or schema (Postgres).
//!
//! The round trip: a day built here → loaded with the recommended schema → exported →
//! `reconcile` gives exactly the outputs of `reconcile` on the original snapshot.

use std::path::Path;

use datafusion::arrow::array::{
    Array, AsArray, Int32Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use datafusion::arrow::datatypes::Int64Type;
use effect_recon::config::{JobConfig, RuleSet};
use effect_recon::db::export::{self, ExportPlan, ExportReport};
use effect_recon::db::load::{self, LoadOptions, LoadTable};
use effect_recon::engine::session::{self, SessionOptions};
use effect_recon::events::Events;
use effect_recon::recon::{self, Outputs, Window};
use effect_recon::snapshot::{Snapshot, SnapshotWriter, Table, MANIFEST, UTC};
use effect_recon::storage::Location;
use effect_recon::time::{parse_instant, Micros};
use effect_recon::Error;
use sqlx::Connection;

use super::common::command;
use super::databases::{env_url, mysql_database, pg_schema, MYSQL_ENV, PG_ENV};
const MINUTE: Micros = 60_000_000;

pub(super) fn cut() -> Micros {
    parse_instant("2026-11-29T16:00:00Z").unwrap()
}

// ---------------------------------------------------------------- the day

/// A small deterministic PRNG (xorshift), so the day is the same in every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

type LedgerRow = (
    String,
    i64,
    String,
    Option<String>,
    String,
    Option<String>,
    Option<String>,
    Option<i32>,
    Option<i64>,
    Option<String>,
    Micros,
);
/// `(source, receipt_id, order_id, effect, msg_id, status, created_at)`.
type ReceiptRow = (String, String, i64, String, Option<String>, String, Micros);
/// A source to break, how to edit its query, and what the error must say.
type Case = (&'static str, Box<dyn Fn(String) -> String>, &'static [&'static str]);

#[derive(Default)]
struct Rows {
    ledger: Vec<LedgerRow>,
    history: Vec<(i64, String, Micros)>,
    receipts: Vec<ReceiptRow>,
}

/// `orders` orders over the two days before the cut (some after it), with the incident
/// (PAID skipped after SHIPPED), missing and duplicate receipts, orphans, voids, reviews,
/// NULLs in every nullable column and microsecond timestamps.
pub(super) fn day(orders: i64) -> Vec<LoadTable> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut rows = Rows::default();
    let start = cut() - 2 * 24 * 60 * MINUTE;
    let mut offsets = [0i64; 24];
    for order in 1..=orders {
        let order_id = 1_000_000 + order * 7 + (order % 5);
        let placed = start
            + rng.below((2 * 24 * 60 + 120) as u64 * MINUTE as u64) as i64
            + rng.below(1_000_000) as i64;
        let paid = placed + (1 + rng.below(20) as i64) * MINUTE + 123;
        let shipped = paid + (10 + rng.below(120) as i64) * MINUTE + 7;
        rows.history.push((order_id, "CREATED".into(), placed));
        let pays = rng.chance(90);
        let ships = pays && rng.chance(60);
        let cancelled = pays && !ships && rng.chance(5);
        if pays {
            rows.history.push((order_id, "PAID".into(), paid));
        }
        if ships {
            rows.history.push((order_id, "SHIPPED".into(), shipped));
        }
        if cancelled {
            rows.history.push((order_id, "CANCELLED".into(), paid + 3 * MINUTE));
        }
        let partition = (order_id % 24) as usize;
        let mut ledger = |event: &str, action: &str, observed: &str, at: Micros, rng: &mut Rng| {
            offsets[partition] += 1 + rng.below(3) as i64;
            let nulls = rng.chance(3);
            rows.ledger.push((
                format!("m-{order_id}-{event}"),
                order_id,
                event.into(),
                (!nulls)
                    .then(|| if event == "ORDER_PAID" { "CREATED".into() } else { "PAID".into() }),
                action.into(),
                (!nulls).then(|| observed.to_string()),
                (!nulls).then(|| "order-event".to_string()),
                (!nulls).then_some(partition as i32),
                (!nulls).then_some(offsets[partition]),
                (!nulls).then(|| format!("consumer-{}", partition % 8)),
                at,
            ));
        };
        if pays {
            let roll = rng.below(100);
            let (action, observed) = match roll {
                0..=79 => ("DONE", "CREATED"),
                80..=89 => ("SKIPPED", "SHIPPED"),
                90..=93 => ("PENDING_REVIEW", "CREATED"),
                94..=95 => ("REVOKED", "SHIPPED"),
                _ => ("", ""),
            };
            if !action.is_empty() {
                ledger("ORDER_PAID", action, observed, paid + 1_500, &mut rng);
            }
            let done = action == "DONE";
            for (source, effect) in [("points", "points_grant"), ("wms", "wms_lock")] {
                if done && rng.chance(93) {
                    let status = if rng.chance(3) { "FAILED" } else { "SUCCEEDED" };
                    rows.receipts.push((
                        source.into(),
                        format!("r-{source}-{order_id}"),
                        order_id,
                        effect.into(),
                        Some(format!("m-{order_id}-ORDER_PAID")),
                        status.into(),
                        paid + 2_000,
                    ));
                    if rng.chance(3) {
                        rows.receipts.push((
                            source.into(),
                            format!("r-{source}-{order_id}-dup"),
                            order_id,
                            effect.into(),
                            None,
                            "SUCCEEDED".into(),
                            paid + 5 * MINUTE,
                        ));
                    }
                }
            }
        } else if rng.chance(10) {
            rows.receipts.push((
                "points".into(),
                format!("r-points-{order_id}-orphan"),
                order_id,
                "points_grant".into(),
                None,
                "SUCCEEDED".into(),
                placed + MINUTE,
            ));
        }
        if ships {
            let action = if rng.chance(90) { "DONE" } else { "SKIPPED" };
            ledger("ORDER_SHIPPED", action, "PAID", shipped + 900, &mut rng);
            if action == "DONE" && rng.chance(95) {
                rows.receipts.push((
                    "logistics".into(),
                    format!("r-logistics-{order_id}"),
                    order_id,
                    "logistics_waybill".into(),
                    Some(format!("m-{order_id}-ORDER_SHIPPED")),
                    "SUCCEEDED".into(),
                    shipped + 1_000,
                ));
            }
        }
    }
    tables(rows)
}

fn tables(rows: Rows) -> Vec<LoadTable> {
    let text = |v: Vec<Option<String>>| -> std::sync::Arc<dyn Array> {
        std::sync::Arc::new(StringArray::from(v))
    };
    let ts = |v: Vec<Micros>| -> std::sync::Arc<dyn Array> {
        std::sync::Arc::new(TimestampMicrosecondArray::from(v).with_timezone(UTC))
    };
    let l = &rows.ledger;
    let ledger = RecordBatch::try_new(
        Table::Ledger.schema(),
        vec![
            text(l.iter().map(|r| Some(r.0.clone())).collect()),
            std::sync::Arc::new(Int64Array::from(l.iter().map(|r| r.1).collect::<Vec<_>>())),
            text(l.iter().map(|r| Some(r.2.clone())).collect()),
            text(l.iter().map(|r| r.3.clone()).collect()),
            text(l.iter().map(|r| Some(r.4.clone())).collect()),
            text(l.iter().map(|r| r.5.clone()).collect()),
            text(l.iter().map(|r| r.6.clone()).collect()),
            std::sync::Arc::new(Int32Array::from(l.iter().map(|r| r.7).collect::<Vec<_>>())),
            std::sync::Arc::new(Int64Array::from(l.iter().map(|r| r.8).collect::<Vec<_>>())),
            text(l.iter().map(|r| r.9.clone()).collect()),
            ts(l.iter().map(|r| r.10).collect()),
        ],
    )
    .unwrap();
    let h = &rows.history;
    let history = RecordBatch::try_new(
        Table::StatusHistory.schema(),
        vec![
            std::sync::Arc::new(Int64Array::from(h.iter().map(|r| r.0).collect::<Vec<_>>())),
            text(h.iter().map(|r| Some(r.1.clone())).collect()),
            ts(h.iter().map(|r| r.2).collect()),
        ],
    )
    .unwrap();
    let mut out = vec![
        LoadTable { table: Table::Ledger, source: None, batches: vec![ledger] },
        LoadTable { table: Table::StatusHistory, source: None, batches: vec![history] },
    ];
    for source in ["points", "wms", "logistics"] {
        let r: Vec<_> = rows.receipts.iter().filter(|r| r.0 == source).collect();
        let batch = RecordBatch::try_new(
            Table::Receipts.schema(),
            vec![
                text(r.iter().map(|r| Some(r.1.clone())).collect()),
                std::sync::Arc::new(Int64Array::from(r.iter().map(|r| r.2).collect::<Vec<_>>())),
                text(r.iter().map(|r| Some(r.3.clone())).collect()),
                text(r.iter().map(|r| r.4.clone()).collect()),
                text(r.iter().map(|r| Some(r.5.clone())).collect()),
                ts(r.iter().map(|r| r.6).collect()),
            ],
        )
        .unwrap();
        out.push(LoadTable {
            table: Table::Receipts,
            source: Some(source.into()),
            batches: vec![batch],
        });
    }
    out
}

pub(super) async fn write_snapshot(dir: &Path, tables: &[LoadTable]) -> Location {
    let location = Location::parse(dir.to_str().unwrap()).unwrap();
    let mut writer = SnapshotWriter::create(&location, cut(), "test").await.unwrap();
    for t in tables {
        let mut table_writer = writer.table(t.table, t.source.as_deref());
        for batch in &t.batches {
            table_writer.write(batch).await.unwrap();
        }
        let files = table_writer.finish().await.unwrap();
        writer.add(t.table, files);
    }
    writer.finish().await.unwrap();
    location
}

pub(super) async fn outputs(snapshot: &Location) -> Outputs {
    let ctx = session::build(&SessionOptions::default()).unwrap();
    let opened = Snapshot::open(snapshot).await.unwrap();
    opened.register(&ctx).await.unwrap();
    let window = Window::resolve(opened.cut(), None, None).unwrap();
    recon::reconcile(
        &ctx,
        &RuleSet::default_rules().unwrap(),
        &recon::Bounds::standalone(window, "export-test"),
        effect_recon::engine::session::ROWS_PER_PASS,
        false,
    )
    .await
    .unwrap()
}

// ---------------------------------------------------------------- job configs

fn queries(marker: (&str, &str)) -> [(&'static str, &'static str, String); 5] {
    let (a, b) = marker;
    let receipts = |table: &str| {
        format!("SELECT receipt_id, order_id, effect, msg_id, status, created_at FROM {table} WHERE created_at > {a} AND created_at <= {b}")
    };
    [
        (
            "ledger",
            "fulfilment",
            format!(
                "SELECT msg_id, order_id, event_type, expected_status, action, observed_status, topic, kafka_partition, kafka_offset, consumer_id, decided_at\n\
                 FROM idempotent_msg WHERE decided_at > {a} AND decided_at <= {b} -- the window"
            ),
        ),
        ("status_history", "orders", format!("SELECT order_id, status, changed_at FROM order_status_history WHERE changed_at > {a} AND changed_at <= {b}")),
        ("receipts", "points", receipts("points_receipt")),
        ("receipts", "wms", receipts("wms_receipt")),
        ("receipts", "logistics", receipts("logistics_receipt")),
    ]
}

/// A job whose five sources all read the database at `url`; `edit` may replace a query.
pub(super) fn job_text(
    url: &str,
    timezone: &str,
    export: &str,
    password_env: Option<&str>,
    edit: impl Fn(&str, String) -> String,
) -> String {
    let marker = if url.starts_with("postgres") { ("$1", "$2") } else { ("?", "?") };
    let mut text = format!("root = \"/unused\"\nlookback = \"30d\"\n[export]\n{export}\n");
    for (table, name, query) in queries(marker) {
        let query = edit(name, query);
        text.push_str(&format!("\n[[source]]\ntable = \"{table}\"\nname = \"{name}\"\nurl = \"{url}\"\ntimezone = \"{timezone}\"\nquery = \"\"\"\n{query}\n\"\"\"\n"));
        if let Some(var) = password_env {
            text.push_str(&format!("password_env = \"{var}\"\n"));
        }
    }
    text
}

pub(super) async fn run_export(job: &str, out: &Path) -> Result<ExportReport, Error> {
    let job = JobConfig::parse(job, Path::new("job.toml"), Path::new("/"))?;
    let plan = ExportPlan { job, out: Location::parse(out.to_str().unwrap())?, cut: cut() };
    export::export(&plan, &Events::none()).await
}

/// Exports `url` and demands the outputs of the original day.
async fn round_trip(url: &str, timezone_offset: i32, timezone: &str, export_settings: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let day = day(1500);
    let original = write_snapshot(&tmp.path().join("original"), &day).await;
    let report = load::load_tables(
        url,
        &day,
        &LoadOptions { utc_offset_secs: timezone_offset, ..LoadOptions::default() },
    )
    .await
    .unwrap();
    assert!(report.rows() > 3000, "{:?}", report.tables);

    let out = tmp.path().join("exported");
    let job = job_text(url, timezone, export_settings, None, |_, q| q);
    let exported = run_export(&job, &out).await.unwrap();
    assert!(
        exported.sources.iter().any(|s| s.chunks > 1),
        "chunking not exercised: {:?}",
        exported.sources
    );

    let expected = outputs(&original).await;
    let actual = outputs(&Location::parse(out.to_str().unwrap()).unwrap()).await;
    assert!(expected.discrepancies.num_rows() > 20, "the day must have findings");
    assert!(expected.skip_verdicts.num_rows() > 20, "the day must have skip verdicts");
    assert_eq!(actual.discrepancies, expected.discrepancies);
    assert_eq!(actual.compensation_tasks, expected.compensation_tasks);
    assert_eq!(actual.skip_verdicts, expected.skip_verdicts);

    // Rows after the cut are not exported; everything up to it is.
    let ledger_total = day[0].batches[0].num_rows() as u64;
    let ledger_exported = exported.sources[0].rows;
    assert!(
        ledger_exported < ledger_total && ledger_exported > ledger_total * 9 / 10,
        "{ledger_exported} of {ledger_total}"
    );
    assert_sorted_by_order_id(&out).await;
}

pub(super) async fn assert_sorted_by_order_id(snapshot: &Path) {
    let location = Location::parse(snapshot.to_str().unwrap()).unwrap();
    for t in load::read_snapshot(&location).await.unwrap() {
        let ids: Vec<i64> = t
            .batches
            .iter()
            .flat_map(|b| {
                b.column_by_name("order_id").unwrap().as_primitive::<Int64Type>().values().to_vec()
            })
            .collect();
        assert!(
            ids.windows(2).all(|w| w[0] <= w[1]),
            "{:?}/{:?} not sorted by order_id",
            t.table,
            t.source
        );
    }
}

pub(super) fn assert_source_error(
    result: Result<ExportReport, Error>,
    source: &str,
    needles: &[&str],
    out: &Path,
) -> String {
    let error = result.expect_err("the export must fail");
    let message = error.to_string();
    assert!(
        matches!(error, Error::Source { ref source_name, .. } if source_name == source),
        "wrong error: {message}"
    );
    for needle in needles {
        assert!(message.contains(needle), "'{needle}' not in: {message}");
    }
    assert!(!out.join(MANIFEST).exists(), "a failed export must not write manifest.json");
    message
}

/// A SQLite database with the day loaded.
pub(super) async fn sqlite_day(dir: &Path, offset: i32) -> String {
    let url = format!("sqlite://{}", dir.join("source.db").display());
    load::load_tables(
        &url,
        &day(300),
        &LoadOptions { utc_offset_secs: offset, ..LoadOptions::default() },
    )
    .await
    .unwrap();
    url
}

// ---------------------------------------------------------------- SQLite (always)

#[tokio::test]
async fn sqlite_round_trip_gives_the_outputs_of_the_original_day() {
    let tmp = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", tmp.path().join("day.db").display());
    round_trip(&url, 5 * 3600 + 1800, "+05:30", "chunk_rows = 500").await;
}

#[tokio::test]
async fn sqlite_query_errors_name_the_source_and_table() {
    let tmp = tempfile::tempdir().unwrap();
    let url = sqlite_day(tmp.path(), 0).await;
    let cases: [Case; 4] = [
        (
            "fulfilment",
            Box::new(|q| q.replace(", consumer_id", "")),
            &["fulfilment", "ledger", "no column 'consumer_id'"],
        ),
        (
            "orders",
            Box::new(|q| {
                q.replace("SELECT order_id, status", "SELECT 'x' || order_id AS order_id, status")
            }),
            &["orders", "status_history", "order_id"],
        ),
        (
            "points",
            Box::new(|q| {
                q.replace(
                    "SELECT receipt_id, order_id, effect",
                    "SELECT receipt_id, order_id, NULL AS effect",
                )
            }),
            &["points", "receipts", "effect", "NULL"],
        ),
        (
            "wms",
            Box::new(|q| q.replace("created_at FROM", "1234 AS created_at FROM")),
            &["wms", "receipts", "created_at", "INTEGER"],
        ),
    ];
    for (i, (name, edit, needles)) in cases.into_iter().enumerate() {
        let job = job_text(&url, "UTC", "", None, |n, q| if n == name { edit(q) } else { q });
        let out = tmp.path().join(format!("out-{i}"));
        let message = assert_source_error(run_export(&job, &out).await, name, needles, &out);
        eprintln!("expected error: {message}");
    }
}

#[tokio::test]
async fn unreachable_databases_fail_with_the_source_named() {
    let tmp = tempfile::tempdir().unwrap();
    for url in ["mysql://root@127.0.0.1:1/test", "postgres://postgres@127.0.0.1:1/test"] {
        let out = tmp.path().join("out");
        let job = job_text(url, "UTC", "connect_timeout = \"5s\"", None, |_, q| q);
        let message = assert_source_error(
            run_export(&job, &out).await,
            "fulfilment",
            &["cannot connect", "127.0.0.1:1"],
            &out,
        );
        eprintln!("expected error: {message}");
    }
    let missing = tmp.path().join("missing.db");
    let job = job_text(&format!("sqlite://{}", missing.display()), "UTC", "", None, |_, q| q);
    assert_source_error(
        run_export(&job, &tmp.path().join("out")).await,
        "fulfilment",
        &["cannot connect"],
        &tmp.path().join("out"),
    );
}

#[tokio::test]
async fn a_missing_password_variable_is_named_not_guessed() {
    let tmp = tempfile::tempdir().unwrap();
    let job = job_text(
        "mysql://reader@127.0.0.1:1/test",
        "UTC",
        "",
        Some("EFFECT_RECON_IT_UNSET_PW"),
        |_, q| q,
    );
    assert_source_error(
        run_export(&job, tmp.path()).await,
        "fulfilment",
        &["EFFECT_RECON_IT_UNSET_PW", "not set"],
        tmp.path(),
    );
}

#[tokio::test]
async fn the_binary_exports_and_nightly_runs_with_exit_codes() {
    let tmp = tempfile::tempdir().unwrap();
    let url = sqlite_day(tmp.path(), 0).await;
    let root = tmp.path().join("root");
    let job = job_text(&url, "UTC", "", None, |_, q| q)
        .replace("root = \"/unused\"", &format!("root = \"{}\"", root.display()));
    let config = tmp.path().join("job.toml");
    std::fs::write(&config, &job).unwrap();

    let out = tmp.path().join("snap");
    let export = command(&["export", "--config"])
        .arg(&config)
        .arg("--out")
        .arg(&out)
        .args(["--cut", "2026-11-29T16:00:00Z"])
        .output()
        .unwrap();
    assert!(export.status.success(), "{}", String::from_utf8_lossy(&export.stderr));
    assert!(out.join(MANIFEST).exists());

    let metrics = tmp.path().join("nightly.prom");
    let nightly = command(&["nightly", "--config"])
        .arg(&config)
        .args(["--cut", "2026-11-29T16:00:00Z", "--fail-on-breaks", "--metrics-file"])
        .arg(&metrics)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&nightly.stderr);
    eprintln!("{stderr}");
    assert_eq!(
        nightly.status.code(),
        Some(1),
        "BREAK findings with --fail-on-breaks exit 1: {stderr}"
    );
    assert!(root.join("snapshot=20261129T160000Z").join(MANIFEST).exists());
    assert!(root.join("run=20261129T160000Z").join(MANIFEST).exists());
    assert!(
        stderr.contains("nightly: export done") && stderr.contains("nightly: run done"),
        "{stderr}"
    );
    // --metrics-file works on nightly as on run (tests/it/notify.rs checks every value).
    let metrics = std::fs::read_to_string(&metrics).unwrap();
    assert!(metrics.contains("effect_recon_run_status{status=\"COMPLETE\"} 1\n"), "{metrics}");
    assert!(
        metrics.contains("effect_recon_last_run_timestamp_seconds 1795968000.0\n"),
        "{metrics}"
    );

    let broken = job.replace("FROM idempotent_msg", "FROM no_such_table");
    std::fs::write(&config, broken).unwrap();
    let failed = command(&["export", "--config"])
        .arg(&config)
        .arg("--out")
        .arg(tmp.path().join("snap2"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(failed.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("source fulfilment (ledger)") && stderr.contains("no_such_table"),
        "{stderr}"
    );
    assert!(!tmp.path().join("snap2").join(MANIFEST).exists());
}

// ---------------------------------------------------------------- MariaDB / MySQL

#[tokio::test]
async fn mysql_round_trip_gives_the_outputs_of_the_original_day() {
    let Some(base) = env_url(MYSQL_ENV) else { return };
    let url = mysql_database(&base, "er_it_export_rt").await;
    round_trip(&url, 8 * 3600, "+08:00", "connections = 3\nchunk_rows = 700").await;
}

#[tokio::test]
async fn mysql_wrong_password_and_bad_queries_are_named_without_the_password() {
    let Some(base) = env_url(MYSQL_ENV) else { return };
    let url = mysql_database(&base, "er_it_export_err").await;
    let tmp = tempfile::tempdir().unwrap();
    load::load_tables(&url, &day(200), &LoadOptions::default()).await.unwrap();

    let mut admin = sqlx::MySqlConnection::connect(&base).await.unwrap();
    for host in ["%", "localhost"] {
        sqlx::raw_sql(&format!(
            "DROP USER IF EXISTS 'er_it_reader'@'{host}'; CREATE USER 'er_it_reader'@'{host}' IDENTIFIED BY 'right-Pw-4711'; GRANT SELECT ON er_it_export_err.* TO 'er_it_reader'@'{host}'"
        ))
        .execute(&mut admin)
        .await
        .unwrap();
    }
    let mut reader = url::Url::parse(&url).unwrap();
    reader.set_username("er_it_reader").unwrap();
    let _ = reader.set_password(None);
    std::env::set_var("EFFECT_RECON_IT_MYSQL_WRONG_PW", "wr0ng-S3cret-pw");
    std::env::set_var("EFFECT_RECON_IT_MYSQL_RIGHT_PW", "right-Pw-4711");
    let job =
        job_text(reader.as_str(), "UTC", "", Some("EFFECT_RECON_IT_MYSQL_WRONG_PW"), |_, q| q);
    let out = tmp.path().join("wrong");
    let message =
        assert_source_error(run_export(&job, &out).await, "fulfilment", &["Access denied"], &out);
    assert!(!message.contains("wr0ng-S3cret-pw"), "{message}");
    eprintln!("expected error: {message}");
    let job =
        job_text(reader.as_str(), "UTC", "", Some("EFFECT_RECON_IT_MYSQL_RIGHT_PW"), |_, q| q);
    run_export(&job, &tmp.path().join("right")).await.expect("the right password works");

    let cases: [Case; 3] = [
        ("fulfilment", Box::new(|q| q.replace(", consumer_id", "")), &["no column 'consumer_id'"]),
        (
            "orders",
            Box::new(|q| {
                q.replace(
                    "SELECT order_id, status",
                    "SELECT CONCAT('x', order_id) AS order_id, status",
                )
            }),
            &["order_id", "VARCHAR"],
        ),
        (
            "points",
            Box::new(|q| {
                q.replace("effect, msg_id", "IF(order_id % 2 = 0, NULL, effect) AS effect, msg_id")
            }),
            &["effect", "NULL"],
        ),
    ];
    for (i, (name, edit, needles)) in cases.into_iter().enumerate() {
        let job = job_text(&url, "UTC", "", None, |n, q| if n == name { edit(q) } else { q });
        let out = tmp.path().join(format!("out-{i}"));
        eprintln!(
            "expected error: {}",
            assert_source_error(run_export(&job, &out).await, name, needles, &out)
        );
    }
}

#[tokio::test]
async fn mysql_connection_killed_mid_stream_fails_without_manifest() {
    let Some(base) = env_url(MYSQL_ENV) else { return };
    let url = mysql_database(&base, "er_it_export_kill").await;
    let tmp = tempfile::tempdir().unwrap();
    load::load_tables(&url, &day(300), &LoadOptions::default()).await.unwrap();
    // SLEEP per row keeps the ledger query streaming long enough to be killed.
    let job = job_text(&url, "UTC", "connections = 1\nbatch_rows = 16", None, |n, q| {
        if n == "fulfilment" {
            q.replace(
                "FROM idempotent_msg",
                "FROM idempotent_msg FORCE INDEX (ix_idempotent_msg_order)",
            )
            .replace("-- the window", "AND SLEEP(0.01) = 0 -- slow")
        } else {
            q
        }
    });
    let out = tmp.path().join("out");
    let export = tokio::spawn({
        let out = out.clone();
        async move { run_export(&job, &out).await }
    });
    let mut admin = sqlx::MySqlConnection::connect(&base).await.unwrap();
    let mut killed = false;
    for _ in 0..600 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        // The read itself (a source expected to fit one chunk: its query as written,
        // limited to one row more than `chunk_rows`), not a COUNT.
        let ids: Vec<(i64,)> = sqlx::query_as(
            "SELECT CAST(ID AS SIGNED) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT * FROM (%SELECT msg_id%SLEEP(0.01)%LIMIT %' AND INFO NOT LIKE '%PROCESSLIST%' AND TIME >= 1",
        )
        .fetch_all(&mut admin)
        .await
        .unwrap();
        if let Some((id,)) = ids.first() {
            sqlx::raw_sql(&format!("KILL {id}")).execute(&mut admin).await.unwrap();
            killed = true;
            break;
        }
    }
    assert!(killed, "the streaming query was never seen in the process list");
    let message = assert_source_error(
        export.await.unwrap(),
        "fulfilment",
        &["ledger", "reading chunk"],
        &out,
    );
    eprintln!("expected error: {message}");
}

// ---------------------------------------------------------------- PostgreSQL

#[tokio::test]
async fn postgres_round_trip_gives_the_outputs_of_the_original_day() {
    let Some(base) = env_url(PG_ENV) else { return };
    let url = pg_schema(&base, "er_it_export_rt").await;
    round_trip(&url, 0, "-03:00", "connections = 3\nchunk_rows = 700").await;
}

#[tokio::test]
async fn postgres_bad_credentials_and_queries_are_named_without_the_password() {
    let Some(base) = env_url(PG_ENV) else { return };
    let url = pg_schema(&base, "er_it_export_err").await;
    let tmp = tempfile::tempdir().unwrap();
    load::load_tables(&url, &day(200), &LoadOptions::default()).await.unwrap();

    // The local server trusts every login, so a wrong password alone cannot fail here:
    // an unknown role with a password from the environment stands in for bad credentials.
    let mut nobody = url::Url::parse(&url).unwrap();
    nobody.set_username("er_it_nobody").unwrap();
    std::env::set_var("EFFECT_RECON_IT_PG_PW", "pg-S3cret-pw");
    let job = job_text(nobody.as_str(), "UTC", "", Some("EFFECT_RECON_IT_PG_PW"), |_, q| q);
    let out = tmp.path().join("nobody");
    let message =
        assert_source_error(run_export(&job, &out).await, "fulfilment", &["er_it_nobody"], &out);
    assert!(!message.contains("pg-S3cret-pw"), "{message}");
    eprintln!("expected error: {message}");

    let cases: [Case; 3] = [
        ("fulfilment", Box::new(|q| q.replace(", consumer_id", "")), &["no column 'consumer_id'"]),
        (
            "orders",
            Box::new(|q| {
                q.replace("SELECT order_id, status", "SELECT order_id::text AS order_id, status")
            }),
            &["order_id", "TEXT"],
        ),
        (
            "points",
            Box::new(|q| {
                q.replace(
                    "effect, msg_id",
                    "CASE WHEN order_id % 2 = 0 THEN NULL ELSE effect END AS effect, msg_id",
                )
            }),
            &["effect", "NULL"],
        ),
    ];
    for (i, (name, edit, needles)) in cases.into_iter().enumerate() {
        let job = job_text(&url, "UTC", "", None, |n, q| if n == name { edit(q) } else { q });
        let out = tmp.path().join(format!("out-{i}"));
        eprintln!(
            "expected error: {}",
            assert_source_error(run_export(&job, &out).await, name, needles, &out)
        );
    }
}

/// The demo loads a generated day into SQLite; it must take seconds, not minutes.
/// Run by hand: `cargo test --test it export::sqlite_loader -- --ignored --nocapture`.
#[tokio::test]
#[ignore = "timing; about 650k rows"]
async fn sqlite_loader_takes_a_100k_order_day_in_seconds() {
    let tmp = tempfile::tempdir().unwrap();
    let day = day(100_000);
    let url = format!("sqlite://{}", tmp.path().join("big.db").display());
    let started = std::time::Instant::now();
    let report = load::load_tables(&url, &day, &LoadOptions::default()).await.unwrap();
    eprintln!("loaded {} rows ({:?}) in {:?}", report.rows(), report.tables, started.elapsed());
    let started = std::time::Instant::now();
    let job = job_text(&url, "UTC", "", None, |_, q| q);
    let exported = run_export(&job, &tmp.path().join("out")).await.unwrap();
    eprintln!("exported {} rows in {:?}", exported.rows, started.elapsed());
}
