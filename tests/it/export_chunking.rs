//! The fast export paths (pushed chunk ranges, binary COPY, several connections) export
//! what the plain path does and fail as it does, against SQLite (always) and
//! MariaDB/PostgreSQL (when `EFFECT_RECON_TEST_MYSQL_URL` / `EFFECT_RECON_TEST_PG_URL` are set):
//!
//! * a query taking the chunk's `order_id` range itself (four parameters, run unwrapped)
//!   exports the rows of the wrapped two-parameter query, chunked;
//! * the exporter sorts every chunk: rows the database returns in reverse still give files
//!   sorted by `order_id`, and the outputs of the original day;
//! * a chunk whose streamed rows differ from its `COUNT` still fails with no manifest;
//! * PostgreSQL reads with binary COPY, its parameters inlined: markers inside constants
//!   and comments stay as they are, and an infinite timestamp is refused by name;
//! * a NULL `order_id` is named by row in a source read as one chunk, counted in a chunked one;
//! * a column of few values held as a dictionary while its chunk waits to be sorted
//!   (consumer ids) still exports every value as read when it has a distinct one per row;
//! * several connections reading several sources at once give the files of one connection,
//!   byte for byte, and the first failing source in config order is the one reported.

use std::collections::BTreeMap;
use std::path::Path;

use effect_recon::config::JobConfig;
use effect_recon::datafusion::arrow::util::display::array_value_to_string;
use effect_recon::db::export::{self, ExportPlan};
use effect_recon::db::load::{self, LoadOptions};
use effect_recon::events::Events;
use effect_recon::snapshot::{Snapshot, MANIFEST};
use effect_recon::storage::Location;

use super::databases::{env_url, mysql_database, pg_schema, MYSQL_ENV, PG_ENV};
use super::export::{
    assert_sorted_by_order_id, assert_source_error, cut, day, job_text, outputs, run_export,
    write_snapshot,
};

/// The databases of this run: SQLite always, MariaDB and Postgres when set. Each gets the
/// same day loaded; `name` names the database or schema.
async fn databases(dir: &Path, name: &str) -> Vec<String> {
    let mut urls = vec![format!("sqlite://{}", dir.join(format!("{name}.db")).display())];
    if let Some(base) = env_url(MYSQL_ENV) {
        urls.push(mysql_database(&base, name).await);
    }
    if let Some(base) = env_url(PG_ENV) {
        urls.push(pg_schema(&base, name).await);
    }
    for url in &urls {
        load::load_tables(url, &day(1500), &LoadOptions::default()).await.unwrap();
    }
    urls
}

/// The driver's markers of the chunk range, parameters 3 and 4.
fn range_markers(url: &str) -> (&'static str, &'static str) {
    if url.starts_with("postgres") {
        ("$3", "$4")
    } else {
        ("?", "?")
    }
}

/// `query` with the chunk's range pushed into its WHERE, then `tail`. The newline ends the
/// ledger query's trailing comment.
fn pushed(url: &str, query: &str, tail: &str) -> String {
    let (lo, hi) = range_markers(url);
    format!("{query}\nAND order_id BETWEEN {lo} AND {hi}{tail}")
}

/// Every row of every table and source, rendered, as a sorted multiset.
async fn rows(snapshot: &Path) -> BTreeMap<String, Vec<String>> {
    let location = Location::parse(snapshot.to_str().unwrap()).unwrap();
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for t in load::read_snapshot(&location).await.unwrap() {
        let key = format!("{:?}/{:?}", t.table, t.source);
        let entry = out.entry(key).or_default();
        for b in &t.batches {
            for r in 0..b.num_rows() {
                let cells: Vec<String> =
                    b.columns().iter().map(|c| array_value_to_string(c, r).unwrap()).collect();
                entry.push(cells.join("|"));
            }
        }
        entry.sort();
    }
    out
}

/// `(table, path, rows, sha256)` of every file the manifest lists.
async fn files(snapshot: &Path) -> Vec<(String, String, u64, String)> {
    let location = Location::parse(snapshot.to_str().unwrap()).unwrap();
    let opened = Snapshot::open(&location).await.unwrap();
    let mut out = Vec::new();
    for table in effect_recon::snapshot::Table::ALL {
        for f in opened.files(table) {
            out.push((table.name().to_string(), f.path.clone(), f.rows, f.sha256.clone()));
        }
    }
    out
}

#[tokio::test]
async fn a_pushed_chunk_range_exports_the_rows_of_the_wrapped_query() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, url) in databases(tmp.path(), "er_it_speed_push").await.iter().enumerate() {
        let settings = "connections = 3\nchunk_rows = 700";
        let wrapped = tmp.path().join(format!("wrapped-{i}"));
        let job = job_text(url, "UTC", settings, None, |_, q| q);
        let plain = run_export(&job, &wrapped).await.unwrap();
        let job = job_text(url, "UTC", settings, None, |_, q| pushed(url, &q, ""));
        let out = tmp.path().join(format!("pushed-{i}"));
        let report = run_export(&job, &out).await.unwrap();
        assert!(report.sources.iter().any(|s| s.chunks > 1), "{url}: {:?}", report.sources);
        assert_eq!(report.rows, plain.rows, "{url}");
        assert_eq!(
            rows(&out).await,
            rows(&wrapped).await,
            "{url}: other rows than the wrapped query"
        );
        assert_sorted_by_order_id(&out).await;
    }
}

#[tokio::test]
async fn chunks_are_sorted_by_the_exporter_whatever_order_the_database_returns() {
    let tmp = tempfile::tempdir().unwrap();
    let original = write_snapshot(&tmp.path().join("original"), &day(1500)).await;
    let expected = outputs(&original).await;
    for (i, url) in databases(tmp.path(), "er_it_speed_sort").await.iter().enumerate() {
        for (settings, what) in [("chunk_rows = 700", "chunked"), ("", "one chunk per source")] {
            // Descending by order_id, and by time within an order: the reverse of the files.
            let job = job_text(url, "UTC", settings, None, |name, q| {
                let time = match name {
                    "fulfilment" => "decided_at",
                    "orders" => "changed_at",
                    _ => "created_at",
                };
                pushed(url, &q, &format!("\nORDER BY order_id DESC, {time} DESC"))
            });
            let out = tmp.path().join(format!("out-{i}-{}", what.len()));
            run_export(&job, &out).await.unwrap();
            assert_sorted_by_order_id(&out).await;
            let actual = outputs(&Location::parse(out.to_str().unwrap()).unwrap()).await;
            assert_eq!(actual.discrepancies, expected.discrepancies, "{url} {what}");
            assert_eq!(actual.skip_verdicts, expected.skip_verdicts, "{url} {what}");
        }
    }
}

#[tokio::test]
async fn a_chunk_whose_rows_differ_from_its_count_fails_without_a_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, url) in databases(tmp.path(), "er_it_speed_count").await.iter().enumerate() {
        // Every statement keeps another random half of the rows: the COUNT of a chunk and
        // its rows disagree (all eight chunks agreeing by chance: about 1e-13).
        let random = if url.starts_with("sqlite") {
            "abs(random()) % 2 = 0"
        } else if url.starts_with("postgres") {
            "random() < 0.5"
        } else {
            "RAND() < 0.5"
        };
        let job = job_text(url, "UTC", "connections = 2\nchunk_rows = 200", None, |name, q| {
            if name == "orders" {
                q.replace("WHERE changed_at", &format!("WHERE {random} AND changed_at"))
            } else {
                q
            }
        });
        let out = tmp.path().join(format!("out-{i}"));
        let message = assert_source_error(
            run_export(&job, &out).await,
            "orders",
            &["status_history", "streamed", "COUNT in the same transaction says"],
            &out,
        );
        eprintln!("expected error: {message}");
    }
}

#[tokio::test]
async fn several_connections_give_the_files_of_one_and_report_the_first_failing_source() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, url) in databases(tmp.path(), "er_it_speed_conns").await.iter().enumerate() {
        let mut seen = Vec::new();
        for connections in [1, 4] {
            let settings = format!("connections = {connections}\nchunk_rows = 900");
            let out = tmp.path().join(format!("out-{i}-{connections}"));
            run_export(&job_text(url, "UTC", &settings, None, |_, q| q), &out).await.unwrap();
            seen.push(files(&out).await);
        }
        assert_eq!(seen[0], seen[1], "{url}: connections = 4 wrote other files than 1");

        // Two broken sources read at once: the first in config order is reported.
        let broken = job_text(url, "UTC", "connections = 4", None, |name, q| match name {
            "orders" | "logistics" => q.replace(" FROM ", ", no_such_column FROM "),
            _ => q,
        });
        let out = tmp.path().join(format!("broken-{i}"));
        let message = assert_source_error(
            run_export(&broken, &out).await,
            "orders",
            &["no_such_column"],
            &out,
        );
        assert!(!message.contains("logistics"), "{message}");
        assert!(!out.join(MANIFEST).exists());
    }
}

#[tokio::test]
async fn a_query_with_another_number_of_parameters_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", tmp.path().join("day.db").display());
    load::load_tables(&url, &day(50), &LoadOptions::default()).await.unwrap();
    let job = job_text(&url, "UTC", "", None, |name, q| {
        if name == "wms" {
            format!("{q} AND order_id > ?")
        } else {
            q
        }
    });
    let out = tmp.path().join("out");
    assert_source_error(run_export(&job, &out).await, "wms", &["takes 3 parameters"], &out);
}

#[tokio::test]
async fn parameter_markers_inside_constants_and_comments_are_left_alone() {
    // PostgreSQL reads with COPY, which takes no bound parameters: the exporter inlines
    // `$n` itself and must skip the ones the server would not read as parameters.
    let tmp = tempfile::tempdir().unwrap();
    for (i, url) in databases(tmp.path(), "er_it_speed_markers").await.iter().enumerate() {
        let plain = tmp.path().join(format!("plain-{i}"));
        run_export(&job_text(url, "UTC", "", None, |_, q| q), &plain).await.unwrap();
        let marker = range_markers(url).0;
        for (settings, what) in [("", "one chunk"), ("chunk_rows = 700", "chunked")] {
            let job = job_text(url, "UTC", settings, None, |name, q| match name {
                "orders" => format!(
                    "{q}\nAND status <> '{marker} -- not a parameter' /* {marker} */ -- {marker}\n"
                ),
                _ => q,
            });
            let out = tmp.path().join(format!("marked-{i}-{}", what.len()));
            let report = run_export(&job, &out).await.unwrap();
            let chunked = report.sources.iter().any(|s| s.chunks > 1);
            assert_eq!(chunked, what == "chunked", "{url}: {:?}", report.sources);
            assert_eq!(rows(&out).await, rows(&plain).await, "{url} {what}");
        }
    }
}

#[tokio::test]
async fn a_repeated_column_with_a_value_per_row_exports_every_value_as_read() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, url) in databases(tmp.path(), "er_it_speed_many").await.iter().enumerate() {
        // Thousands of consumer ids, more than a chunk keeps as a dictionary, in batches of
        // 100: the column turns plain part-way through a chunk.
        let job =
            job_text(
                url,
                "UTC",
                "chunk_rows = 2500\nbatch_rows = 100",
                None,
                |name, q| match name {
                    "fulfilment" => q.replacen(
                        "consumer_id, decided_at",
                        "msg_id AS consumer_id, decided_at",
                        1,
                    ),
                    _ => q,
                },
            );
        let out = tmp.path().join(format!("out-{i}"));
        let report = run_export(&job, &out).await.unwrap();
        let exported = rows(&out).await;
        let (_, ledger) = exported.iter().find(|(k, _)| k.starts_with("Ledger")).unwrap();
        assert_eq!(ledger.len() as u64, report.sources[0].rows, "{url}");
        assert!(ledger.len() > 1500, "{url}: {} ledger rows", ledger.len());
        for row in ledger {
            let cells: Vec<&str> = row.split('|').collect();
            assert_eq!(cells[9], cells[0], "{url}: consumer_id is not the msg_id read: {row}");
        }
        assert_sorted_by_order_id(&out).await;
    }
}

#[tokio::test]
async fn a_null_order_id_is_named_in_one_chunk_and_counted_in_many() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, url) in databases(tmp.path(), "er_it_speed_null").await.iter().enumerate() {
        let job = |settings: &str| {
            job_text(url, "UTC", settings, None, |name, q| match name {
                "orders" => q.replacen(
                    "SELECT order_id",
                    "SELECT CASE WHEN order_id % 97 = 0 THEN NULL ELSE order_id END AS order_id",
                    1,
                ),
                _ => q,
            })
        };
        // One chunk reads the query as written: the row itself is refused by name.
        let out = tmp.path().join(format!("one-{i}"));
        let message = assert_source_error(
            run_export(&job(""), &out).await,
            "orders",
            &["status_history", "column order_id is NULL; the contract says it must not be"],
            &out,
        );
        eprintln!("expected error (one chunk): {message}");
        // A source the previous snapshot beside it held more than `chunk_rows` rows of is
        // counted and chunked from the start, and finds the NULL keys when it looks for
        // its key range.
        let root = tmp.path().join(format!("many-{i}"));
        let clean = job_text(url, "UTC", "chunk_rows = 700", None, |_, q| q);
        let earlier = ExportPlan {
            job: JobConfig::parse(&clean, Path::new("job.toml"), Path::new("/")).unwrap(),
            out: Location::parse(root.join("snapshot=earlier").to_str().unwrap()).unwrap(),
            cut: cut() - 3_600_000_000,
        };
        let report = export::export(&earlier, &Events::none()).await.unwrap();
        assert!(report.sources.iter().any(|s| s.chunks > 1), "{:?}", report.sources);
        let out = root.join("snapshot=tonight");
        let message = assert_source_error(
            run_export(&job("chunk_rows = 700"), &out).await,
            "orders",
            &["status_history", "column order_id is NULL in"],
            &out,
        );
        eprintln!("expected error (chunked): {message}");
    }
}

#[tokio::test]
async fn an_infinite_postgres_timestamp_is_refused_by_name() {
    let Some(base) = env_url(PG_ENV) else { return };
    let url = pg_schema(&base, "er_it_speed_infinity").await;
    load::load_tables(&url, &day(200), &LoadOptions::default()).await.unwrap();
    let job = job_text(&url, "UTC", "", None, |name, q| {
        match name {
        "orders" => q.replacen(
            "SELECT order_id, status, changed_at",
            "SELECT order_id, status, \
             CASE WHEN order_id % 97 = 0 THEN 'infinity'::timestamptz ELSE changed_at END AS changed_at",
            1,
        ),
        _ => q,
    }
    });
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    assert_source_error(
        run_export(&job, &out).await,
        "orders",
        &["row ", "column changed_at is infinity; the contract needs a finite instant"],
        &out,
    );
}
