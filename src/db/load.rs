//! The loader: contract-typed Arrow batches (or a whole snapshot folder) bulk-inserted into
//! a database that uses the recommended schema of `sql/schema/`. Used by the tests, the
//! demo (generated day → SQLite → export → run) and the bench script.
//!
//! Tables: `ledger` → `idempotent_msg`, `status_history` → `order_status_history`,
//! `receipts/<source>` → `<source>_receipt` (`points_receipt`, `wms_receipt`,
//! `logistics_receipt` exist in the schema). Rows go in multi-row INSERTs, one transaction
//! per table; timestamps are stored as the schema stores them: MySQL `DATETIME(6)` and
//! SQLite text as wall time in `utc_offset_secs`, Postgres `timestamptz` as the instant.

use std::time::{Duration, Instant};

use bytes::Bytes;
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{Int32Type, Int64Type, TimestampMicrosecondType};
use datafusion::arrow::error::ArrowError;
use sqlx::Connection;

use super::conn::{self, Conn, Target};
use super::dialect;
use crate::config::job::Driver;
use crate::error::{Error, Result};
use crate::snapshot::{ColumnKind, Snapshot, Table};
use crate::storage::{parquet_parts, Location};

/// How to load.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Zone of the stored wall times (MySQL DATETIME, SQLite text), seconds east of UTC.
    pub utc_offset_secs: i32,
    /// Rows per INSERT statement.
    pub rows_per_insert: usize,
    /// Run the recommended schema's DDL first (`CREATE TABLE IF NOT EXISTS ...`).
    pub create_schema: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions { utc_offset_secs: 0, rows_per_insert: 500, create_schema: true }
    }
}

/// The batches of one snapshot table (one receipt source).
#[derive(Debug, Clone)]
pub struct LoadTable {
    /// The snapshot table.
    pub table: Table,
    /// The receipt source (`points`, ...); `None` for ledger and status history.
    pub source: Option<String>,
    /// Rows with the contract's columns (other accepted types are cast).
    pub batches: Vec<RecordBatch>,
}

/// What was loaded.
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    /// Rows per database table, in load order.
    pub tables: Vec<(String, u64)>,
    /// Total time.
    pub elapsed: Duration,
}

impl LoadReport {
    /// Total rows.
    pub fn rows(&self) -> u64 {
        self.tables.iter().map(|(_, n)| n).sum()
    }
}

/// The database table of a snapshot table in the recommended schema.
pub fn table_name(table: Table, source: Option<&str>) -> Result<String> {
    match table {
        Table::Ledger => Ok("idempotent_msg".into()),
        Table::StatusHistory => Ok("order_status_history".into()),
        Table::Receipts => {
            let source = source.unwrap_or("default");
            if source.is_empty() || !source.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(Error::argument(
                    "receipt source",
                    format!("'{source}' cannot name a table (letters, digits, '_')"),
                ));
            }
            Ok(format!("{source}_receipt"))
        }
    }
}

/// Reads every table of a snapshot (the files its manifest lists) into memory.
pub async fn read_snapshot(snapshot: &Location) -> Result<Vec<LoadTable>> {
    let opened = Snapshot::open(snapshot).await?;
    let mut tables: Vec<LoadTable> = Vec::new();
    for table in Table::ALL {
        for file in opened.files(table) {
            let source = (table == Table::Receipts)
                .then(|| file.path.split('/').nth(1).unwrap_or("default").to_string());
            let bytes =
                snapshot.read_optional(&file.path).await?.ok_or_else(|| Error::SnapshotFile {
                    file: snapshot.display(&file.path),
                    message: "listed in manifest.json but absent".into(),
                    source: None,
                })?;
            let batches = read_parquet(bytes, table).map_err(|e| Error::SnapshotFile {
                file: snapshot.display(&file.path),
                message: e.to_string(),
                source: Some(Box::new(e)),
            })?;
            match tables.iter_mut().find(|t| t.table == table && t.source == source) {
                Some(existing) => existing.batches.extend(batches),
                None => tables.push(LoadTable { table, source, batches }),
            }
        }
    }
    Ok(tables)
}

/// Why a snapshot file cannot be loaded.
#[derive(Debug, thiserror::Error)]
enum FileError {
    /// The file is not readable Parquet, or a batch of it does not decode.
    #[error("unreadable Parquet: {0}")]
    Read(#[from] parquet_parts::ReadError),
    /// A contract column is absent.
    #[error("column {0} is missing")]
    MissingColumn(String),
    /// A column cannot be cast to its contract type.
    #[error("column {column}: {source}")]
    Cast {
        /// The column.
        column: String,
        /// Arrow's error.
        #[source]
        source: ArrowError,
    },
    /// The conformed columns do not make a batch of the contract schema.
    #[error("{0}")]
    Conform(#[source] ArrowError),
}

fn read_parquet(bytes: Bytes, table: Table) -> Result<Vec<RecordBatch>, FileError> {
    let (batches, _) = parquet_parts::read_parquet(bytes)?;
    batches.into_iter().map(|batch| conform(&batch, table)).collect()
}

/// The batch with exactly the contract's columns and types.
fn conform(batch: &RecordBatch, table: Table) -> Result<RecordBatch, FileError> {
    let schema = table.schema();
    let mut columns = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let column = batch
            .column_by_name(field.name())
            .ok_or_else(|| FileError::MissingColumn(field.name().clone()))?;
        let cast = cast(column, field.data_type())
            .map_err(|source| FileError::Cast { column: field.name().clone(), source })?;
        columns.push(cast);
    }
    RecordBatch::try_new(schema, columns).map_err(FileError::Conform)
}

/// Loads a snapshot folder into the database at `url`.
pub async fn load_snapshot(
    snapshot: &Location,
    url: &str,
    options: &LoadOptions,
) -> Result<LoadReport> {
    let tables = read_snapshot(snapshot).await?;
    load_tables(url, &tables, options).await
}

/// Loads tables of batches into the database at `url` (which may carry a password: this is
/// a test and demo tool; it is scrubbed from errors all the same).
pub async fn load_tables(
    url: &str,
    tables: &[LoadTable],
    options: &LoadOptions,
) -> Result<LoadReport> {
    let started = Instant::now();
    let target = load_target(url, options.utc_offset_secs)?;
    let fail = |what: &str, message: String| load_error(&target, what, message);
    let mut conn =
        conn::connect(&target, 30_000_000).await.map_err(|e| fail("connect", e.to_string()))?;
    if options.create_schema {
        conn.execute(dialect::schema_ddl(target.driver))
            .await
            .map_err(|e| fail("schema", format!("creating the recommended schema: {e}")))?;
    }
    let mut report = LoadReport::default();
    for load in tables {
        let name = table_name(load.table, load.source.as_deref())?;
        let batches = load
            .batches
            .iter()
            .map(|b| conform(b, load.table))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| fail(&name, e.to_string()))?;
        let rows = insert(&mut conn, &name, load.table, &batches, options)
            .await
            .map_err(|e| fail(&name, format!("inserting: {e}")))?;
        report.tables.push((name, rows));
    }
    conn.close().await;
    report.elapsed = started.elapsed();
    Ok(report)
}

/// One column of a batch, typed for binding.
enum Values<'a> {
    Text(&'a datafusion::arrow::array::StringArray),
    Int64(&'a datafusion::arrow::array::Int64Array),
    Int32(&'a datafusion::arrow::array::Int32Array),
    Timestamp(&'a datafusion::arrow::array::TimestampMicrosecondArray),
}

fn values<'a>(batch: &'a RecordBatch, table: Table) -> Vec<Values<'a>> {
    table
        .columns()
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let column = batch.column(i);
            match spec.kind {
                ColumnKind::Text => Values::Text(column.as_string::<i32>()),
                ColumnKind::Int64 => Values::Int64(column.as_primitive::<Int64Type>()),
                ColumnKind::Int32 => Values::Int32(column.as_primitive::<Int32Type>()),
                ColumnKind::Timestamp => {
                    Values::Timestamp(column.as_primitive::<TimestampMicrosecondType>())
                }
            }
        })
        .collect()
}

fn opt<T: Array + ?Sized, V>(array: &T, i: usize, value: impl FnOnce() -> V) -> Option<V> {
    if array.is_null(i) {
        None
    } else {
        Some(value())
    }
}

/// Multi-row INSERTs of one table inside one transaction. The macro keeps one loop for the
/// three drivers, which differ only in how a timestamp is bound.
macro_rules! insert_rows {
    ($conn:expr, $db:ty, $name:expr, $table:expr, $batches:expr, $per:expr, $ts:expr) => {{
        let column_list: Vec<&str> = $table.columns().iter().map(|c| c.name).collect();
        let head = dialect::insert_head($name, &column_list);
        let mut tx = $conn.begin().await?;
        let mut total = 0u64;
        for batch in $batches {
            let columns = values(batch, $table);
            let mut start = 0;
            while start < batch.num_rows() {
                let end = (start + $per).min(batch.num_rows());
                let mut builder = sqlx::QueryBuilder::<$db>::new(&head);
                builder.push_values(start..end, |mut row, i| {
                    for column in &columns {
                        match column {
                            Values::Text(a) => row.push_bind(opt(*a, i, || a.value(i))),
                            Values::Int64(a) => row.push_bind(opt(*a, i, || a.value(i))),
                            Values::Int32(a) => row.push_bind(opt(*a, i, || a.value(i))),
                            Values::Timestamp(a) => row.push_bind(opt(*a, i, || ($ts)(a.value(i)))),
                        };
                    }
                });
                builder.build().execute(&mut *tx).await?;
                start = end;
            }
            total += batch.num_rows() as u64;
        }
        tx.commit().await?;
        total
    }};
}

async fn insert(
    conn: &mut Conn,
    name: &str,
    table: Table,
    batches: &[RecordBatch],
    options: &LoadOptions,
) -> Result<u64, sqlx::Error> {
    let per = options.rows_per_insert.max(1);
    let offset = options.utc_offset_secs;
    Ok(match conn {
        Conn::MySql(c) => {
            insert_rows!(c, sqlx::MySql, name, table, batches, per, |m| conn::naive(m, offset))
        }
        Conn::Postgres(c) => {
            insert_rows!(c, sqlx::Postgres, name, table, batches, per, conn::utc)
        }
        Conn::Sqlite(c) => {
            insert_rows!(c, sqlx::Sqlite, name, table, batches, per, |m| conn::sqlite_text(
                conn::naive(m, offset)
            ))
        }
    })
}

/// Sets the receipts `receipt_ids` of the database table `name` REVERSED, as a void
/// handler does (`gen --live`); the schema's `updated_at` marks the change.
pub async fn mark_reversed(url: &str, name: &str, receipt_ids: &[String]) -> Result<()> {
    if receipt_ids.is_empty() {
        return Ok(());
    }
    let target = load_target(url, 0)?;
    let fail = |message: String| load_error(&target, name, message);
    let mut conn = conn::connect(&target, 30_000_000).await.map_err(|e| fail(e.to_string()))?;
    let ids: Vec<String> =
        receipt_ids.iter().map(|id| format!("'{}'", id.replace('\'', "''"))).collect();
    let sql = format!(
        "UPDATE {name} SET status = 'REVERSED' WHERE status = 'SUCCEEDED' AND receipt_id IN ({})",
        ids.join(", ")
    );
    let changed = conn.execute(&sql).await.map_err(|e| fail(format!("marking REVERSED: {e}")));
    conn.close().await;
    changed
}

/// The database at `url` as a write target (its password kept only to scrub errors).
fn load_target(url: &str, offset_secs: i32) -> Result<Target> {
    let driver = Driver::of_url(url).ok_or_else(|| {
        Error::argument("url", "must start with mysql://, postgres:// or sqlite:")
    })?;
    let password = url::Url::parse(url).ok().and_then(|u| u.password().map(str::to_string));
    Ok(Target { driver, url: url.to_string(), password, offset_secs, read_only: false })
}

/// A load error about `what` (a table, `connect`, `schema`), without the password.
fn load_error(target: &Target, what: &str, message: String) -> Error {
    Error::Source {
        source_name: "load".into(),
        table: what.to_string(),
        message: target.scrub(&message),
    }
}

/// Runs the recommended schema's DDL on the database at `url` (idempotent).
pub async fn create_schema(url: &str) -> Result<()> {
    load_tables(url, &[], &LoadOptions::default()).await.map(drop)
}
