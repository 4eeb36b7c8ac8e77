//! Reading every source of one database over its connections at once.
//!
//! Each connection is a worker taking work from one queue: a chunk waiting to be read
//! first, else the next source in config order, which it plans (describe, `COUNT`,
//! `MIN/MAX(order_id)`, key ranges), whose first chunk it then reads itself (in the
//! transaction that counted it) and whose other chunks it queues for any worker. So with
//! `connections = 4` four sources are read at a time even when none is large enough to be
//! chunked, and one source's chunks spread over every connection.
//!
//! Every planned source gets a writer task of its own: it takes the source's chunks in key
//! order, sorts each one by `order_id` once it is complete ([`super::sort`]) and encodes it
//! as Parquet, while the workers go on decoding rows. A chunk is written only once its
//! rows are all there and checked against its `COUNT`, so a short chunk never reaches a
//! file. The first failure stops the workers from taking more work.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use datafusion::arrow::record_batch::RecordBatch;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinSet;

use super::dialect::{self, Chunking};
use super::error::ExportError;
use super::progress::SourceProgress;
use super::source::{Binds, ChunkRead, ColumnRead, Conn, Piece, ReadError};
use super::{match_columns, sort, split};
use crate::config::job::{Driver, ExportSettings, SourceConfig};
use crate::events::Events;
use crate::snapshot::{FileEntry, Table, TableWriter};

/// Batches buffered per chunk between a reader and the table's writer.
const CHANNEL_BATCHES: usize = 8;

/// One source to export, with the writer of its files.
pub(super) struct SourceJob {
    /// Its index in the config (errors are reported for the first failing source).
    pub index: usize,
    /// The source.
    pub source: SourceConfig,
    /// Its bound parameters.
    pub binds: Binds,
    /// Where its files go.
    pub writer: TableWriter,
}

/// What one source ended with.
pub(super) struct SourceOutcome {
    /// Its index in the config.
    pub index: usize,
    /// Its files, rows and chunks, or why it failed.
    pub result: Result<Written, ExportError>,
}

/// A source's files as written.
pub(super) struct Written {
    /// The Parquet files, in key order.
    pub files: Vec<FileEntry>,
    /// Rows written.
    pub rows: u64,
    /// Key-range chunks read.
    pub chunks: usize,
    /// From planning to the last file.
    pub elapsed: std::time::Duration,
}

/// Reads `jobs` over `conns` (every one inside its read transaction); returns the
/// connections (for rollback) and one outcome per source planned.
pub(super) async fn read_sources(
    conns: Vec<Conn>,
    jobs: Vec<SourceJob>,
    settings: &ExportSettings,
    events: &Events,
) -> (Vec<Conn>, Vec<SourceOutcome>) {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue {
            sources: jobs.into(),
            chunks: VecDeque::new(),
            planning: 0,
            stopped: false,
        }),
        changed: Notify::new(),
        writers: Mutex::new(JoinSet::new()),
        failures: Mutex::new(Vec::new()),
        settings: settings.clone(),
        events: events.clone(),
    });
    let mut workers = JoinSet::new();
    for (w, conn) in conns.into_iter().enumerate() {
        workers.spawn(worker(w, conn, Arc::clone(&shared)));
    }
    let mut returned = Vec::new();
    let mut outcomes = Vec::new();
    while let Some(joined) = workers.join_next().await {
        match joined {
            Ok(conn) => returned.push(conn),
            Err(e) => outcomes.push(SourceOutcome {
                index: usize::MAX,
                result: Err(ExportError::Internal(format!("a chunk reader stopped: {e}"))),
            }),
        }
    }
    returned.sort_by_key(|(w, _)| *w);
    // Workers lost to a panic may have left chunks no one will read.
    shared.stop();
    let mut writers = std::mem::take(&mut *lock(&shared.writers));
    while let Some(joined) = writers.join_next().await {
        outcomes.push(joined.unwrap_or_else(|e| SourceOutcome {
            index: usize::MAX,
            result: Err(ExportError::Internal(format!("a table writer stopped: {e}"))),
        }));
    }
    outcomes.append(&mut lock(&shared.failures));
    (returned.into_iter().map(|(_, conn)| conn).collect(), outcomes)
}

/// The work queue shared by the workers of one database.
struct Shared {
    queue: Mutex<Queue>,
    /// Chunks were queued, a plan ended, or the export stopped.
    changed: Notify,
    writers: Mutex<JoinSet<SourceOutcome>>,
    /// Sources that failed before they had a writer.
    failures: Mutex<Vec<SourceOutcome>>,
    settings: ExportSettings,
    events: Events,
}

struct Queue {
    sources: VecDeque<SourceJob>,
    chunks: VecDeque<Chunk>,
    /// Sources being planned: they may still queue chunks.
    planning: usize,
    stopped: bool,
}

enum Work {
    Chunk(Chunk),
    Plan(Box<SourceJob>),
    Wait,
    Done,
}

impl Shared {
    async fn next(&self) -> Option<Work> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let work = {
                let mut q = lock(&self.queue);
                if q.stopped {
                    Work::Done
                } else if let Some(chunk) = q.chunks.pop_front() {
                    Work::Chunk(chunk)
                } else if let Some(job) = q.sources.pop_front() {
                    q.planning += 1;
                    Work::Plan(Box::new(job))
                } else if q.planning > 0 {
                    Work::Wait
                } else {
                    Work::Done
                }
            };
            match work {
                Work::Wait => changed.await,
                Work::Done => return None,
                work => return Some(work),
            }
        }
    }

    /// A plan ended, with `chunks` to queue.
    fn planned(&self, chunks: Vec<Chunk>) {
        let mut q = lock(&self.queue);
        q.planning -= 1;
        if !q.stopped {
            q.chunks.extend(chunks);
        }
        drop(q);
        self.changed.notify_waiters();
    }

    /// Something failed: no worker takes more work, and the writers waiting for queued
    /// chunks see them end (their senders dropped).
    fn stop(&self) {
        let mut q = lock(&self.queue);
        q.stopped = true;
        let dropped = (std::mem::take(&mut q.chunks), std::mem::take(&mut q.sources));
        drop(q);
        drop(dropped);
        self.changed.notify_waiters();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What every chunk of one source shares.
struct ChunkJob {
    data_sql: String,
    count_sql: String,
    columns: Vec<ColumnRead>,
    binds: Binds,
    table: Table,
    batch_rows: usize,
    verify: bool,
    chunks: usize,
}

/// One key range of a source, and where its rows go.
struct Chunk {
    job: Arc<ChunkJob>,
    index: usize,
    range: (i64, i64),
    /// The rows the planning transaction counted, for a chunk read in it.
    expected: Option<i64>,
    tx: mpsc::Sender<Result<Piece, ExportError>>,
}

async fn worker(w: usize, mut conn: Conn, shared: Arc<Shared>) -> (usize, Conn) {
    while let Some(work) = shared.next().await {
        let failed = match work {
            Work::Chunk(chunk) => read_chunk(&mut conn, &chunk).await,
            Work::Plan(job) => plan_and_read(&mut conn, *job, &shared).await,
            Work::Wait | Work::Done => false,
        };
        if failed {
            shared.stop();
        }
    }
    (w, conn)
}

/// Plans a source, starts its writer, queues its other chunks and reads the first;
/// `true` when something failed.
async fn plan_and_read(conn: &mut Conn, job: SourceJob, shared: &Shared) -> bool {
    // The writer is Send, not Sync: it is held by value, never borrowed across an await.
    let SourceJob { index, source, binds, writer } = job;
    let started = std::time::Instant::now();
    let planned = plan(conn, &source, binds, &shared.settings).await;
    let (chunk_job, ranges, count) = match planned {
        Ok(p) => p,
        Err(e) => {
            lock(&shared.failures).push(SourceOutcome { index, result: Err(e) });
            shared.planned(Vec::new());
            return true;
        }
    };
    let mut receivers = Vec::with_capacity(ranges.len());
    let mut chunks: Vec<Chunk> = Vec::with_capacity(ranges.len());
    for (i, &range) in ranges.iter().enumerate() {
        let (tx, rx) = mpsc::channel(CHANNEL_BATCHES);
        receivers.push(rx);
        // One chunk is read here, in the transaction that counted it.
        let expected = (ranges.len() == 1).then_some(count);
        chunks.push(Chunk { job: Arc::clone(&chunk_job), index: i, range, expected, tx });
    }
    let writer = TableWrite {
        index,
        label: source.label(),
        writer,
        receivers,
        counted: (source.driver != Driver::MySql).then_some(count),
        batch_rows: shared.settings.batch_rows,
        started,
    };
    lock(&shared.writers).spawn(writer.run(shared.events.clone()));
    let mut chunks = chunks.into_iter();
    let first = chunks.next();
    shared.planned(chunks.collect());
    match first {
        Some(chunk) => read_chunk(conn, &chunk).await,
        None => false,
    }
}

type Plan = (Arc<ChunkJob>, Vec<(i64, i64)>, i64);

async fn plan(
    conn: &mut Conn,
    source: &SourceConfig,
    binds: Binds,
    settings: &ExportSettings,
) -> Result<Plan, ExportError> {
    let (raw, parameters) = conn.describe(&source.query).await.map_err(ExportError::Describe)?;
    let chunking = match parameters {
        Some(4) => Chunking::Pushed,
        Some(n) if n != 2 => return Err(ExportError::Parameters(n)),
        _ => Chunking::Wrapped,
    };
    let wrapped = dialect::wrap(source.driver, &source.query, chunking);
    let described = match chunking {
        Chunking::Pushed => raw,
        Chunking::Wrapped => conn.columns(&wrapped.data).await.map_err(ExportError::Describe)?,
    };
    let columns = match_columns(source.table, &described)?;
    let everything = (chunking == Chunking::Pushed).then_some((i64::MIN, i64::MAX));
    let (count, keyed, min, max) =
        conn.plan(&wrapped.plan, binds, everything).await.map_err(ExportError::Plan)?;
    if count != keyed {
        return Err(ExportError::NullKeys(count - keyed));
    }
    let ranges = split(min, max, count, settings.chunk_rows);
    let chunk_job = Arc::new(ChunkJob {
        data_sql: wrapped.data,
        count_sql: wrapped.count,
        columns,
        binds,
        table: source.table,
        batch_rows: settings.batch_rows,
        verify: settings.verify_counts && ranges.len() > 1,
        chunks: ranges.len(),
    });
    Ok((chunk_job, ranges, count))
}

/// Reads one chunk; its outcome goes to the writer, an error included. `true` when it failed.
async fn read_chunk(conn: &mut Conn, chunk: &Chunk) -> bool {
    match read_one(conn, chunk).await {
        Ok(rows) => chunk.tx.send(Ok(Piece::End(rows))).await.is_err(),
        // The writer stopped listening: it failed first and reports why.
        Err(None) => true,
        Err(Some(error)) => {
            let _ = chunk.tx.send(Err(error)).await;
            true
        }
    }
}

/// `Err(None)`: the writer stopped listening.
async fn read_one(conn: &mut Conn, chunk: &Chunk) -> Result<u64, Option<ExportError>> {
    let job = &chunk.job;
    let (lo, hi) = chunk.range;
    let what = format!("chunk {}/{} (order_id {lo}..={hi})", chunk.index + 1, job.chunks);
    let expected = if job.verify {
        let n = conn
            .count(&job.count_sql, job.binds, lo, hi)
            .await
            .map_err(|source| Some(ExportError::CountChunk { chunk: what.clone(), source }))?;
        Some(n)
    } else {
        chunk.expected
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
        _ => Ok(rows),
    }
}

/// The writer of one source: its chunks in key order, each sorted, into Parquet.
struct TableWrite {
    index: usize,
    label: String,
    writer: TableWriter,
    receivers: Vec<mpsc::Receiver<Result<Piece, ExportError>>>,
    /// The plan's count, where every chunk is read in the planning snapshot.
    counted: Option<i64>,
    batch_rows: usize,
    started: std::time::Instant,
}

impl TableWrite {
    async fn run(self, events: Events) -> SourceOutcome {
        let index = self.index;
        let result = self.write(&events).await;
        SourceOutcome { index, result }
    }

    async fn write(mut self, events: &Events) -> Result<Written, ExportError> {
        let mut progress = SourceProgress::start(events, &self.label);
        let table = self.writer.table();
        let key = table.columns().iter().position(|c| c.name == "order_id").ok_or_else(|| {
            ExportError::Internal(format!("{} has no order_id column", table.name()))
        })?;
        let chunks = self.receivers.len();
        let mut rows = 0u64;
        for rx in &mut self.receivers {
            let sorted = sort::Sorted::new(collect_chunk(rx).await?, key, self.batch_rows);
            for batch in sorted.batches() {
                let batch =
                    batch.map_err(|e| ExportError::Internal(format!("sorting a chunk: {e}")))?;
                self.writer.write(&batch).await.map_err(|e| ExportError::Write(Box::new(e)))?;
                rows += batch.num_rows() as u64;
                progress.add(batch.num_rows() as u64);
                crate::faults::crash_point("export-batch");
            }
        }
        drop(self.receivers);
        let files = self.writer.finish().await.map_err(|e| ExportError::Write(Box::new(e)))?;
        if let Some(counted) = self.counted.filter(|&n| n != rows as i64) {
            return Err(ExportError::SourceRows { written: rows, counted });
        }
        progress.finish(chunks);
        Ok(Written { files, rows, chunks, elapsed: self.started.elapsed() })
    }
}

/// Every batch of one chunk, once its reader says it is complete.
async fn collect_chunk(
    rx: &mut mpsc::Receiver<Result<Piece, ExportError>>,
) -> Result<Vec<RecordBatch>, ExportError> {
    let mut batches: Vec<RecordBatch> = Vec::new();
    loop {
        match rx.recv().await {
            Some(Ok(Piece::Batch(batch))) => batches.push(batch),
            Some(Ok(Piece::End(rows))) => {
                let got: usize = batches.iter().map(|b| b.num_rows()).sum();
                if got as u64 != rows {
                    let message = format!("a chunk of {rows} rows arrived with {got}");
                    return Err(ExportError::Internal(message));
                }
                return Ok(batches);
            }
            Some(Err(e)) => return Err(e),
            // Its reader was stopped by another source's failure.
            None => return Err(ExportError::Stopped),
        }
    }
}
