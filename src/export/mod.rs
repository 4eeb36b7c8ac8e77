//! `export`: database sources → contract-typed Arrow batches → a Parquet snapshot on
//! object_store (docs/CONTRACT.md, docs/JOB_CONFIG.md). The only module that talks to databases (sqlx).
//!
//! Per database (sources with the same URL, password variable and timezone):
//!
//! * `connections` connections are opened and each starts a read-only REPEATABLE READ
//!   transaction. Postgres workers join the leader's exported snapshot, so every chunk of
//!   every table of that database is read in one snapshot. MySQL cannot share a snapshot
//!   between connections: each starts `WITH CONSISTENT SNAPSHOT` back to back before any
//!   read, so they differ only by rows changed in those milliseconds; `connections = 1`
//!   reads everything in one snapshot. SQLite always uses one connection.
//! * Each source query is checked (columns by name, types) by preparing it, then planned on
//!   the leader (`COUNT`, `MIN/MAX(order_id)`) and split into `order_id` key ranges of about
//!   `chunk_rows` rows, read in parallel and written in key order, so every table is sorted
//!   by `order_id`. Each chunk's streamed rows are checked against a `COUNT` of the same range
//!   in the same transaction.
//! * Any failure stops the export before `manifest.json` is written: a snapshot without a
//!   manifest is incomplete and no reader uses it. No error text carries a password.

mod batch;
pub mod db;
mod dialect;
mod error;
pub mod load;
mod progress;
pub mod publish;
pub mod reopen;
mod source;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::record_batch::RecordBatch;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::config::job::{Driver, ExportSettings, JobConfig, SourceConfig};
use crate::error::{Error, Result};
use crate::events::Events;
use crate::snapshot::{
    ColumnKind, FileEntry, SnapshotManifest, SnapshotWriter, Table, TableWriter,
};
use crate::storage::Location;
use crate::time::Micros;
pub use error::{ExportError, WriteError};
use progress::SourceProgress;
use source::{Binds, ChunkRead, ColumnRead, Conn, Decoder, ReadError, ResultColumn, Target};

/// Batches buffered per chunk between a reader and the Parquet writer.
const CHANNEL_BATCHES: usize = 8;

/// A validated export request.
#[derive(Debug, Clone)]
pub struct ExportPlan {
    /// The job config (sources and settings).
    pub job: JobConfig,
    /// The snapshot folder to write.
    pub out: Location,
    /// The logical cut: every row is filtered to `<= cut`.
    pub cut: Micros,
}

/// What one source contributed.
#[derive(Debug, Clone)]
pub struct SourceReport {
    /// `table[name]`.
    pub label: String,
    /// Rows written.
    pub rows: u64,
    /// Key-range chunks read.
    pub chunks: usize,
    /// Time spent on it.
    pub elapsed: Duration,
}

/// What a finished export reports.
#[derive(Debug, Clone)]
pub struct ExportReport {
    /// The snapshot folder.
    pub location: String,
    /// The manifest written last.
    pub manifest: SnapshotManifest,
    /// One entry per source, in config order.
    pub sources: Vec<SourceReport>,
    /// Total rows.
    pub rows: u64,
    /// Total time.
    pub elapsed: Duration,
}

/// Exports every source of the job into a snapshot at `plan.out`; the manifest is written last.
pub async fn export(plan: &ExportPlan, events: &Events) -> Result<ExportReport> {
    let started = Instant::now();
    let mut writer = SnapshotWriter::create(&plan.out, plan.cut, "export").await?;
    let (lower, cut) = plan.job.bounds(plan.cut);
    writer.set_coverage_from(lower);
    let settings = &plan.job.export;
    let mut reports = BTreeMap::new();
    for group in group_by_database(&plan.job.sources) {
        let mut session = Session::open(&group, settings).await?;
        for &(index, source) in &group {
            let binds = Binds { lower, cut, offset_secs: source.utc_offset_secs };
            let table_writer = writer
                .table(source.table, file_stem(&plan.job, source))
                .with_rows_per_file(settings.rows_per_file);
            match session.export_source(source, table_writer, binds, settings, events).await {
                Ok((files, report)) => {
                    writer.add(source.table, files);
                    reports.insert(index, report);
                }
                Err(e) => {
                    session.close().await;
                    return Err(e);
                }
            }
        }
        session.close().await;
    }
    let manifest = writer.finish().await?;
    let sources: Vec<SourceReport> = reports.into_values().collect();
    let rows = sources.iter().map(|s| s.rows).sum();
    Ok(ExportReport {
        location: plan.out.display(""),
        manifest,
        sources,
        rows,
        elapsed: started.elapsed(),
    })
}

/// Receipts always live in `receipts/<name>/`; ledger and history files are prefixed with
/// the source name only when several sources share the table.
fn file_stem<'a>(job: &JobConfig, source: &'a SourceConfig) -> Option<&'a str> {
    let shared = job.sources.iter().filter(|s| s.table == source.table).count() > 1;
    (source.table == Table::Receipts || shared).then_some(source.name.as_str())
}

/// Sources of one database, with their index in the config.
type Group<'a> = Vec<(usize, &'a SourceConfig)>;

fn group_by_database(sources: &[SourceConfig]) -> Vec<Group<'_>> {
    let mut groups: Vec<Group<'_>> = Vec::new();
    for (index, source) in sources.iter().enumerate() {
        let same = |s: &SourceConfig| {
            s.driver == source.driver
                && s.url == source.url
                && s.password_env == source.password_env
                && s.utc_offset_secs == source.utc_offset_secs
        };
        match groups.iter_mut().find(|g| same(g[0].1)) {
            Some(group) => group.push((index, source)),
            None => groups.push(vec![(index, source)]),
        }
    }
    groups
}

/// The one place an [`ExportError`] becomes the crate's error, scrubbed of the password.
fn source_error(source: &SourceConfig, target: &Target, e: ExportError) -> Error {
    e.into_error(&source.name, source.table.name(), |m| target.scrub(m))
}

/// The connections to one database, each inside the read transaction.
struct Session {
    conns: Vec<Conn>,
    target: Target,
}

impl Session {
    async fn open(group: &Group<'_>, settings: &ExportSettings) -> Result<Session> {
        let first = group[0].1;
        let password = match &first.password_env {
            Some(var) => Some(std::env::var(var).map_err(|_| Error::Source {
                source_name: first.name.clone(),
                table: first.table.name().to_string(),
                message: format!("environment variable {var} (password_env) is not set"),
            })?),
            None => None,
        };
        let target = Target {
            driver: first.driver,
            url: first.url.clone(),
            password,
            offset_secs: first.utc_offset_secs,
            read_only: true,
        };
        let wanted = if first.driver == Driver::Sqlite { 1 } else { settings.connections };
        let mut conns = Vec::with_capacity(wanted);
        for _ in 0..wanted {
            conns.push(
                source::connect(&target, settings.connect_timeout)
                    .await
                    .map_err(|e| source_error(first, &target, e))?,
            );
        }
        let mut session = Session { conns, target };
        if let Err(message) = session.begin().await {
            let error = source_error(first, &session.target, message);
            session.close().await;
            return Err(error);
        }
        Ok(session)
    }

    async fn begin(&mut self) -> Result<(), ExportError> {
        let driver = self.target.driver;
        let fail = ExportError::Begin;
        let Some((leader, workers)) = self.conns.split_first_mut() else { return Ok(()) };
        if driver == Driver::MySql {
            // Every connection's snapshot is started before any of them reads.
            let [set_level, start] = dialect::begin_leader(driver) else {
                return Err(ExportError::Internal("MySQL begin".into()));
            };
            for conn in std::iter::once(&mut *leader).chain(workers.iter_mut()) {
                conn.execute(set_level).await.map_err(fail)?;
            }
            for conn in std::iter::once(leader).chain(workers.iter_mut()) {
                conn.execute(start).await.map_err(fail)?;
            }
            return Ok(());
        }
        for statement in dialect::begin_leader(driver) {
            leader.execute(statement).await.map_err(fail)?;
        }
        if driver == Driver::Postgres && !workers.is_empty() {
            let id = leader.query_text(dialect::PG_EXPORT_SNAPSHOT).await.map_err(fail)?;
            if !id.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
                return Err(ExportError::SnapshotId(id));
            }
            for conn in workers {
                for statement in dialect::begin_leader(driver) {
                    conn.execute(statement).await.map_err(fail)?;
                }
                conn.execute(&dialect::pg_set_snapshot(&id)).await.map_err(fail)?;
            }
        }
        Ok(())
    }

    async fn close(&mut self) {
        for mut conn in self.conns.drain(..) {
            let _ = conn.execute(dialect::ROLLBACK).await;
            conn.close().await;
        }
    }

    async fn export_source(
        &mut self,
        source: &SourceConfig,
        table_writer: TableWriter,
        binds: Binds,
        settings: &ExportSettings,
        events: &Events,
    ) -> Result<(Vec<FileEntry>, SourceReport)> {
        let target = self.target.clone();
        let fail = |e: ExportError| source_error(source, &target, e);
        let wrapped = dialect::wrap(source.driver, &source.query);
        let no_connection = || fail(ExportError::Internal("no open connection".into()));
        let leader = self.conns.first_mut().ok_or_else(no_connection)?;
        let described =
            leader.columns(&wrapped.data).await.map_err(|e| fail(ExportError::Describe(e)))?;
        let columns = match_columns(source.table, &described).map_err(fail)?;
        let (count, keyed, min, max) =
            leader.plan(&wrapped.plan, binds).await.map_err(|e| fail(ExportError::Plan(e)))?;
        if count != keyed {
            return Err(fail(ExportError::NullKeys(count - keyed)));
        }
        let chunks = split(min, max, count, settings.chunk_rows);
        let job = Arc::new(ChunkJob {
            data_sql: wrapped.data,
            count_sql: wrapped.count,
            columns,
            binds,
            table: source.table,
            batch_rows: settings.batch_rows,
            // One chunk is read on the leader, in the transaction that counted it.
            expected_single: (chunks.len() == 1).then_some(count),
            verify: settings.verify_counts && chunks.len() > 1,
            chunks: chunks.len(),
        });
        let mut table_progress = SourceProgress::start(events, &source.label());
        let (files, rows) = self
            .read_chunks(job, &chunks, table_writer, &mut table_progress)
            .await
            .map_err(fail)?;
        if rows != count as u64 && job_shares_snapshot(source.driver) {
            return Err(fail(ExportError::SourceRows { written: rows, counted: count }));
        }
        let elapsed = table_progress.finish(chunks.len());
        Ok((files, SourceReport { label: source.label(), rows, chunks: chunks.len(), elapsed }))
    }

    /// Reads the chunks over the session's connections and writes them in key order.
    async fn read_chunks(
        &mut self,
        job: Arc<ChunkJob>,
        chunks: &[(i64, i64)],
        mut table_writer: TableWriter,
        progress: &mut SourceProgress,
    ) -> Result<(Vec<FileEntry>, u64), ExportError> {
        let workers = chunks.len().min(self.conns.len());
        let mut receivers = Vec::with_capacity(chunks.len());
        let mut assigned: Vec<Vec<Assignment>> = (0..workers).map(|_| Vec::new()).collect();
        for (i, &range) in chunks.iter().enumerate() {
            let (tx, rx) = mpsc::channel(CHANNEL_BATCHES);
            receivers.push(rx);
            assigned[i % workers].push(Assignment { index: i, range, tx });
        }
        let mut set = JoinSet::new();
        for (w, (conn, chunks)) in self.conns.drain(..workers).zip(assigned).enumerate() {
            set.spawn(read_worker(w, conn, Arc::clone(&job), chunks));
        }
        let mut rows = 0u64;
        for mut rx in receivers {
            while let Some(message) = rx.recv().await {
                let batch = message?;
                table_writer.write(&batch).await.map_err(|e| ExportError::Write(Box::new(e)))?;
                rows += batch.num_rows() as u64;
                progress.add(batch.num_rows() as u64);
                crate::faults::crash_point("export-batch");
            }
        }
        let mut returned: Vec<Option<Conn>> = (0..workers).map(|_| None).collect();
        while let Some(joined) = set.join_next().await {
            let (w, conn, result) = joined
                .map_err(|e| ExportError::Internal(format!("a chunk reader stopped: {e}")))?;
            returned[w] = Some(conn);
            result?;
        }
        let conns: Vec<Conn> = returned.into_iter().flatten().collect();
        self.conns.splice(0..0, conns);
        let files = table_writer.finish().await.map_err(|e| ExportError::Write(Box::new(e)))?;
        Ok((files, rows))
    }
}

/// Postgres and SQLite read every chunk in the leader's snapshot, so the total must match.
fn job_shares_snapshot(driver: Driver) -> bool {
    driver != Driver::MySql
}

/// What every chunk of one source shares.
struct ChunkJob {
    data_sql: String,
    count_sql: String,
    columns: Vec<ColumnRead>,
    binds: Binds,
    table: Table,
    batch_rows: usize,
    expected_single: Option<i64>,
    verify: bool,
    chunks: usize,
}

struct Assignment {
    index: usize,
    range: (i64, i64),
    tx: mpsc::Sender<Result<RecordBatch, ExportError>>,
}

/// Reads its chunks in order; an error is sent on the failing chunk's channel (the writer
/// reaches it in key order), or returned when the writer no longer listens.
async fn read_worker(
    w: usize,
    mut conn: Conn,
    job: Arc<ChunkJob>,
    chunks: Vec<Assignment>,
) -> (usize, Conn, Result<(), ExportError>) {
    for chunk in chunks {
        let result = read_one(&mut conn, &job, &chunk).await;
        match result {
            Ok(()) => {}
            Err(None) => return (w, conn, Ok(())),
            Err(Some(error)) => {
                let unsent = chunk.tx.send(Err(error)).await.err().and_then(|e| e.0.err());
                return (w, conn, unsent.map_or(Ok(()), Err));
            }
        }
    }
    (w, conn, Ok(()))
}

/// `Err(None)`: the writer stopped listening (it failed first and reports why).
async fn read_one(
    conn: &mut Conn,
    job: &ChunkJob,
    chunk: &Assignment,
) -> Result<(), Option<ExportError>> {
    let (lo, hi) = chunk.range;
    let what = format!("chunk {}/{} (order_id {lo}..={hi})", chunk.index + 1, job.chunks);
    let expected = if job.verify {
        let n = conn
            .count(&job.count_sql, job.binds, lo, hi)
            .await
            .map_err(|source| Some(ExportError::CountChunk { chunk: what.clone(), source }))?;
        Some(n)
    } else {
        job.expected_single
    };
    let read = ChunkRead {
        sql: &job.data_sql,
        columns: &job.columns,
        binds: job.binds,
        table: job.table,
        batch_rows: job.batch_rows,
    };
    let rows = match conn.read(&read, lo, hi, &chunk.tx).await {
        Ok(rows) => rows,
        Err(ReadError::Closed) => return Err(None),
        Err(ReadError::Value(message)) => {
            return Err(Some(ExportError::Value { chunk: what, message }))
        }
        Err(ReadError::Internal(message)) => {
            return Err(Some(ExportError::Internal(format!("{what}, {message}"))))
        }
        Err(ReadError::Database(source)) => {
            return Err(Some(ExportError::ReadChunk { chunk: what, source }))
        }
    };
    match expected {
        Some(n) if n != rows as i64 => {
            Err(Some(ExportError::ChunkRows { chunk: what, streamed: rows, counted: n }))
        }
        _ => Ok(()),
    }
}

/// The contract columns found in the query's result, with a decoder each.
fn match_columns(table: Table, described: &[ResultColumn]) -> Result<Vec<ColumnRead>, ExportError> {
    let mut reads = Vec::with_capacity(table.columns().len());
    for spec in table.columns() {
        let found =
            described.iter().enumerate().find(|(_, c)| c.name.eq_ignore_ascii_case(spec.name));
        let Some((ordinal, column)) = found else {
            let names: Vec<&str> = described.iter().map(|c| c.name.as_str()).collect();
            return Err(ExportError::MissingColumn {
                column: spec.name,
                returned: names.join(", "),
            });
        };
        let decoder = column.decoder(spec.kind).ok_or_else(|| ExportError::ColumnType {
            column: spec.name,
            type_name: column.type_name.clone(),
            expected: expected_type(spec.kind),
        })?;
        if decoder == Decoder::Null && !spec.nullable {
            return Err(ExportError::AlwaysNull(spec.name));
        }
        reads.push(ColumnRead { ordinal, kind: spec.kind, decoder });
    }
    Ok(reads)
}

fn expected_type(kind: ColumnKind) -> &'static str {
    match kind {
        ColumnKind::Text => "a text type (VARCHAR, TEXT)",
        ColumnKind::Int64 => "an integer type (BIGINT)",
        ColumnKind::Int32 => "an integer type (INT)",
        ColumnKind::Timestamp => "a timestamp type (DATETIME, TIMESTAMP, timestamptz)",
    }
}

/// Splits `[min, max]` into ranges of roughly `chunk_rows` rows (equal key widths).
fn split(min: Option<i64>, max: Option<i64>, count: i64, chunk_rows: u64) -> Vec<(i64, i64)> {
    let (Some(min), Some(max)) = (min, max) else { return Vec::new() };
    let span = i128::from(max) - i128::from(min) + 1;
    let wanted = (count.max(1) as u64).div_ceil(chunk_rows.max(1)).max(1);
    let n = i128::from(wanted).min(span).max(1);
    (0..n)
        .map(|i| {
            let lo = i128::from(min) + span * i / n;
            let hi = i128::from(min) + span * (i + 1) / n - 1;
            (lo as i64, hi as i64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_the_keys_without_gaps() {
        assert!(split(None, None, 0, 10).is_empty());
        assert_eq!(split(Some(5), Some(5), 1, 10), vec![(5, 5)]);
        let ranges = split(Some(1), Some(100), 1000, 300);
        assert_eq!(ranges.len(), 4);
        assert_eq!(ranges.first().unwrap().0, 1);
        assert_eq!(ranges.last().unwrap().1, 100);
        assert!(ranges.windows(2).all(|w| w[0].1 + 1 == w[1].0));
        assert_eq!(split(Some(i64::MIN), Some(i64::MAX), 10, 5).last().unwrap().1, i64::MAX);
        assert_eq!(split(Some(1), Some(3), 100, 1).len(), 3);
    }
}
