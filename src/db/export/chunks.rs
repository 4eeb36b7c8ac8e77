//! Reading every source of one database over its connections at once.
//!
//! Each connection is a worker taking work from one queue: a chunk waiting to be read
//! first, else the next source in config order, which it plans (describe, `COUNT`, and
//! for a source of more than `chunk_rows` rows `MIN/MAX(order_id)` and key ranges; a
//! source expected to fit one chunk is read before any `COUNT`, see [`plan`]), whose
//! first chunk it then reads itself (in the transaction that counted it) and whose other
//! chunks it queues for any worker. So with `connections = 4` four sources are read at a
//! time even when none is large enough to be chunked, and one source's chunks spread over
//! every connection.
//!
//! Every planned source gets a writer task of its own: it takes the source's chunks in key
//! order, sorts each one by `order_id` once it is complete ([`super::sort`]) and encodes it
//! as Parquet, its row groups on one thread per core, off the runtime's workers, which go
//! on decoding rows. A chunk is written only once its rows are all there (and checked
//! against its `COUNT` where it was counted), so a short chunk never reaches a file, nor
//! the rows of a capped read that found more than one chunk's. The first failure stops
//! the workers from taking more work.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use datafusion::arrow::record_batch::RecordBatch;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinSet;

use super::progress::SourceProgress;
use super::{match_columns, sort, split};
use crate::config::job::{Driver, ExportSettings, SourceConfig};
use crate::db::conn::{Binds, ChunkRead, ColumnRead, Conn, Piece, ReadError};
use crate::db::dialect::{self, Chunking};
use crate::db::error::ExportError;
use crate::events::Events;
use crate::snapshot::{FileEntry, Table, TableWriter};
use crate::storage::parquet_parts::RowsOf;

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
    /// The query returns `recon_key` too (an incremental snapshot's files).
    pub keyed: bool,
    /// Expected to fit one chunk (an incremental night's delta, a table the previous
    /// snapshot held few rows of): read before it is counted, and counted and chunked
    /// only when it holds more than `chunk_rows` rows.
    pub capped: bool,
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
    keyed: bool,
    batch_rows: usize,
    verify: bool,
    chunks: usize,
}

impl ChunkJob {
    fn read(&self) -> ChunkRead<'_> {
        ChunkRead {
            sql: &self.data_sql,
            columns: &self.columns,
            binds: self.binds,
            table: self.table,
            keyed: self.keyed,
            batch_rows: self.batch_rows,
        }
    }
}

/// What one chunk reads.
#[derive(Debug, Clone, Copy)]
enum Keys {
    /// Every row of the source, with the statement's own parameters (`Some`: a pushed
    /// query, bound the whole `i64` range).
    Whole(Option<(i64, i64)>),
    /// One `order_id` range, bound as parameters 3 and 4.
    Range(i64, i64),
}

impl Keys {
    /// Parameters 3 and 4, where the statement takes them.
    fn bound(self) -> Option<(i64, i64)> {
        match self {
            Keys::Whole(range) => range,
            Keys::Range(lo, hi) => Some((lo, hi)),
        }
    }
}

/// One key range of a source, and where its rows go.
struct Chunk {
    job: Arc<ChunkJob>,
    index: usize,
    keys: Keys,
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
    let SourceJob { index, source, binds, keyed, capped, writer } = job;
    let started = std::time::Instant::now();
    let planned = plan(conn, &source, binds, keyed, capped, &shared.settings).await;
    let (chunk_job, keys, first) = match planned {
        Ok(p) => p,
        Err(e) => {
            lock(&shared.failures).push(SourceOutcome { index, result: Err(e) });
            shared.planned(Vec::new());
            return true;
        }
    };
    let counted = match &first {
        First::Counted(count) => Some(*count),
        First::Held(..) => None,
    };
    let mut receivers = Vec::with_capacity(keys.len());
    let mut chunks: Vec<Chunk> = Vec::with_capacity(keys.len());
    for (i, &keys_i) in keys.iter().enumerate() {
        let (tx, rx) = mpsc::channel(CHANNEL_BATCHES);
        receivers.push(rx);
        // One chunk is read here, in the transaction that counted it.
        let expected = (keys.len() == 1).then_some(counted).flatten();
        chunks.push(Chunk { job: Arc::clone(&chunk_job), index: i, keys: keys_i, expected, tx });
    }
    let writer = TableWrite {
        index,
        label: source.label(),
        writer,
        receivers,
        counted: counted.filter(|_| source.driver != Driver::MySql),
        batch_rows: shared.settings.batch_rows,
        started,
    };
    lock(&shared.writers).spawn(writer.run(shared.events.clone()));
    let mut chunks = chunks.into_iter();
    let first_chunk = chunks.next();
    shared.planned(chunks.collect());
    match (first_chunk, first) {
        (Some(chunk), First::Held(batches, rows)) => hand_over(&chunk, batches, rows).await,
        (Some(chunk), First::Counted(_)) => read_chunk(conn, &chunk).await,
        (None, _) => false,
    }
}

type Plan = (Arc<ChunkJob>, Vec<Keys>, First);

/// How a source's first chunk comes.
enum First {
    /// Read after the plan, checked against this count.
    Counted(i64),
    /// Already read whole by a capped read: its batches and rows.
    Held(Vec<RecordBatch>, u64),
}

/// Checks the query's columns, counts its rows and splits it into chunks. A source of at
/// most `chunk_rows` rows is one chunk read with the query as written; only a larger one
/// pays for the scan that finds its `order_id` range. A `capped` source, expected to fit
/// one chunk, is read first, at most `chunk_rows + 1` rows of it, and only counted and
/// chunked when it holds more: its `COUNT` would only check what the read in the same
/// transaction returns, at the cost of another pass (an incremental night's `COUNT` has
/// no single index to answer it, and cost MariaDB as much as the read).
async fn plan(
    conn: &mut Conn,
    source: &SourceConfig,
    binds: Binds,
    keyed: bool,
    capped: bool,
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
    let columns = match_columns(source.table, &described, keyed)?;
    let everything = (chunking == Chunking::Pushed).then_some((i64::MIN, i64::MAX));
    let chunk_job = |data_sql: String, chunks: usize| {
        Arc::new(ChunkJob {
            data_sql,
            count_sql: wrapped.count.clone(),
            columns: columns.clone(),
            binds,
            table: source.table,
            keyed,
            batch_rows: settings.batch_rows,
            verify: settings.verify_counts && chunks > 1,
            chunks,
        })
    };
    if capped && settings.only_orders.is_none() {
        let job = chunk_job(wrapped.capped(settings.chunk_rows), 1);
        let (batches, rows) = read_whole(conn, &job, everything).await?;
        if rows <= settings.chunk_rows {
            let keys = if rows == 0 { Vec::new() } else { vec![Keys::Whole(everything)] };
            return Ok((job, keys, First::Held(batches, rows)));
        }
    }
    let (data_sql, keys, count) = match settings.only_orders {
        // A few orders (the one-order path): one range read through the order_id index,
        // never a count of the whole source.
        Some((lo, hi)) => {
            let count = conn
                .count(&wrapped.count, binds, Some((lo, hi)))
                .await
                .map_err(ExportError::Plan)?;
            let keys = if count == 0 { Vec::new() } else { vec![Keys::Range(lo, hi)] };
            (wrapped.data.clone(), keys, count)
        }
        None => whole_or_chunked(conn, &wrapped, binds, everything, settings).await?,
    };
    Ok((chunk_job(data_sql, keys.len()), keys, First::Counted(count)))
}

/// Every row `job` reads, held in memory (a capped read: at most one more than the cap).
async fn read_whole(
    conn: &mut Conn,
    job: &ChunkJob,
    everything: Option<(i64, i64)>,
) -> Result<(Vec<RecordBatch>, u64), ExportError> {
    let (tx, mut rx) = mpsc::channel(CHANNEL_BATCHES);
    let read = job.read();
    let reading = async move { conn.read(&read, everything, &tx).await };
    let holding = async {
        let mut batches = Vec::new();
        while let Some(Ok(Piece::Batch(batch))) = rx.recv().await {
            batches.push(batch);
        }
        batches
    };
    let (rows, batches) = tokio::join!(reading, holding);
    let rows = rows.map_err(|e| {
        read_failed("chunk 1/1".into(), e)
            .unwrap_or_else(|| ExportError::Internal("a capped read lost its batches".into()))
    })?;
    Ok((batches, rows))
}

/// Hands a chunk already read whole to its writer; `true` when the writer stopped.
async fn hand_over(chunk: &Chunk, batches: Vec<RecordBatch>, rows: u64) -> bool {
    for batch in batches {
        if chunk.tx.send(Ok(Piece::Batch(batch))).await.is_err() {
            return true;
        }
    }
    chunk.tx.send(Ok(Piece::End(rows))).await.is_err()
}

/// Every row of a source: the query as written when it is small, else `order_id` range
/// chunks of at most `chunk_rows` rows.
async fn whole_or_chunked(
    conn: &mut Conn,
    wrapped: &dialect::Wrapped,
    binds: Binds,
    everything: Option<(i64, i64)>,
    settings: &ExportSettings,
) -> Result<(String, Vec<Keys>, i64), ExportError> {
    let count =
        conn.count(&wrapped.count_whole, binds, everything).await.map_err(ExportError::Plan)?;
    let plan = if count == 0 {
        (wrapped.whole.clone(), Vec::new(), count)
    } else if count as u64 <= settings.chunk_rows {
        (wrapped.whole.clone(), vec![Keys::Whole(everything)], count)
    } else {
        let (count, keyed, min, max) =
            conn.keys(&wrapped.keys, binds, everything).await.map_err(ExportError::Plan)?;
        if count != keyed {
            return Err(ExportError::NullKeys(count - keyed));
        }
        let ranges = split(min, max, count, settings.chunk_rows);
        (
            wrapped.data.clone(),
            ranges.into_iter().map(|(lo, hi)| Keys::Range(lo, hi)).collect(),
            count,
        )
    };
    Ok(plan)
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
    let what = match chunk.keys {
        Keys::Range(lo, hi) => {
            format!("chunk {}/{} (order_id {lo}..={hi})", chunk.index + 1, job.chunks)
        }
        Keys::Whole(_) => format!("chunk {}/{}", chunk.index + 1, job.chunks),
    };
    let expected = if job.verify {
        let n = conn
            .count(&job.count_sql, job.binds, chunk.keys.bound())
            .await
            .map_err(|source| Some(ExportError::CountChunk { chunk: what.clone(), source }))?;
        Some(n)
    } else {
        chunk.expected
    };
    let read = job.read();
    let rows = match conn.read(&read, chunk.keys.bound(), &chunk.tx).await {
        Ok(rows) => rows,
        Err(e) => return Err(read_failed(what, e)),
    };
    match expected {
        Some(n) if n != rows as i64 => {
            Err(Some(ExportError::ChunkRows { chunk: what, streamed: rows, counted: n }))
        }
        _ => Ok(rows),
    }
}

/// The error of a failed chunk read; `None` when the writer stopped listening.
fn read_failed(what: String, error: ReadError) -> Option<ExportError> {
    match error {
        ReadError::Closed => None,
        ReadError::Value(message) => Some(ExportError::Value { chunk: what, message }),
        ReadError::Internal(message) => Some(ExportError::Internal(format!("{what}, {message}"))),
        ReadError::Database(source) => Some(ExportError::ReadChunk { chunk: what, source }),
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

    async fn write(self, events: &Events) -> Result<Written, ExportError> {
        let TableWrite { label, mut writer, mut receivers, counted, batch_rows, started, .. } =
            self;
        let mut progress = SourceProgress::start(events, &label);
        let table = writer.table();
        let key = table.columns().iter().position(|c| c.name == "order_id").ok_or_else(|| {
            ExportError::Internal(format!("{} has no order_id column", table.name()))
        })?;
        let chunks = receivers.len();
        let mut rows = 0u64;
        for rx in &mut receivers {
            let batches = collect_chunk(rx).await?;
            let encode = move || -> Result<_, ExportError> {
                let sorted = sort::Sorted::new(batches, key, batch_rows)
                    .map_err(|e| ExportError::Internal(format!("sorting a chunk: {e}")))?;
                let sorted = Arc::new(sorted);
                let rows = sorted.len();
                let rows_of: RowsOf = Arc::new(move |range| sorted.rows(range));
                let mut appended = |rows: usize| {
                    progress.add(rows as u64);
                    crate::testing::crash_point(crate::testing::Stage::ExportBatch);
                };
                let threads = encoder_threads();
                block_on(writer.write_row_groups(rows, threads, rows_of, &mut appended))?;
                Ok((writer, progress, rows as u64))
            };
            let chunk_rows;
            (writer, progress, chunk_rows) = on_blocking_thread(encode).await?;
            rows += chunk_rows;
        }
        drop(receivers);
        let files = on_blocking_thread(move || block_on(writer.finish())).await?;
        if let Some(counted) = counted.filter(|&n| n != rows as i64) {
            return Err(ExportError::SourceRows { written: rows, counted });
        }
        progress.finish(chunks);
        Ok(Written { files, rows, chunks, elapsed: started.elapsed() })
    }
}

/// Runs the CPU-bound part of a table's writer (sorting a chunk, encoding Parquet) on a
/// blocking thread, so the runtime's workers go on reading rows from the database while
/// it runs instead of stalling behind it.
async fn on_blocking_thread<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ExportError> + Send + 'static,
) -> Result<T, ExportError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ExportError::Internal(format!("a chunk encoder stopped: {e}")))?
}

/// Row groups of one chunk encoded at once: one per core. Several sources' chunks may be
/// encoded at the same time; the largest, read last to finish, then has every core.
fn encoder_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Waits on the writer's object-store I/O from the blocking thread.
fn block_on<T>(
    io: impl std::future::Future<Output = crate::error::Result<T>>,
) -> Result<T, ExportError> {
    tokio::runtime::Handle::current().block_on(io).map_err(|e| ExportError::Write(Box::new(e)))
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
