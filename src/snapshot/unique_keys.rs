//! The ledger's `msg_id` uniqueness check, in process and in bounded memory.
//!
//! Every msg_id's 64-bit hash (`key_hash`) is routed by value into shards while the
//! ledger is scanned; each shard is then sorted on its own task, and a hash seen twice is
//! a repeat (the caller compares the strings behind repeats only). The hashes take 8
//! bytes per ledger row, 2.7 GB on a 100M-order day, so they are charged to the session's
//! memory pool. When the pool cannot hold them all (`--memory-limit`), the shards go to
//! temporary files of the session's disk manager instead and are read back and sorted
//! `target_partitions` at a time, each small enough to fit.
//!
//! No hash is ever copied in memory: a shard is one vector the scan tasks append to, so
//! the peak is the hashes themselves (concatenating per-task buckets had doubled it).

use std::io::Write;
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::UInt64Type;
use datafusion::error::DataFusionError;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryLimit, MemoryReservation};
use datafusion::execution::{SpillFile, SpillWriter};
use datafusion::prelude::SessionContext;
use futures::{StreamExt, TryStreamExt};

use crate::engine::queries;
use crate::error::{Error, Result};

/// Bytes one hash takes, in memory and on disk (little-endian).
const HASH_BYTES: usize = std::mem::size_of::<u64>();

/// Memory each scan task gathers hashes in before appending them to their shards.
const GATHER_BYTES: usize = 8 << 20;

/// More shards than this means a limit far too small for the day: refused, not crawled.
const MAX_SPILLED_SHARDS: usize = 1024;

/// Where the shards live while the ledger is scanned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Layout {
    /// Every shard in memory (the pool holds all the hashes).
    InMemory { shards: usize },
    /// Every shard in a temporary file, read back and sorted `at_once` at a time.
    Spilled { shards: usize, at_once: usize },
}

impl Layout {
    fn shards(self) -> usize {
        match self {
            Layout::InMemory { shards } | Layout::Spilled { shards, .. } => shards.max(1),
        }
    }

    /// How many shards are read back and sorted at once: all of them when they are
    /// already in memory.
    fn sorted_at_once(self) -> usize {
        match self {
            Layout::InMemory { shards } => shards.max(1),
            Layout::Spilled { at_once, .. } => at_once.max(1),
        }
    }
}

/// Bytes reserved for `bytes` of hashes: a shard may run a little over its even share,
/// as hashes are uniform, not exact.
fn with_slack(bytes: usize) -> usize {
    bytes + bytes / 16 + 1024
}

/// Which layout the check takes for `ledger_rows` rows, and the pool reservation that
/// pays for it (held until the check ends).
pub(super) fn plan(ctx: &SessionContext, ledger_rows: u64) -> Result<(Layout, MemoryReservation)> {
    let parallel = ctx.state().config().target_partitions().max(1);
    let pool = Arc::clone(&ctx.runtime_env().memory_pool);
    let reservation = MemoryConsumer::new("msg_id uniqueness check").register(&pool);
    let total = (ledger_rows as usize).saturating_mul(HASH_BYTES);
    if reservation.try_grow(with_slack(total)).is_ok() {
        return Ok((Layout::InMemory { shards: parallel }, reservation));
    }
    let free = match pool.memory_limit() {
        MemoryLimit::Finite(limit) => limit.saturating_sub(pool.reserved()),
        MemoryLimit::Infinite | MemoryLimit::Unknown => 0,
    };
    // `parallel` shards are read back and sorted at once, each within its share.
    let per_shard = free / parallel;
    let mut shards = total.div_ceil(per_shard.max(1)).max(parallel);
    while shards <= MAX_SPILLED_SHARDS && with_slack(total.div_ceil(shards)) > per_shard {
        shards += 1;
    }
    let refuse = || {
        Error::query(
            "checking that ledger msg_ids are unique",
            DataFusionError::ResourcesExhausted(format!(
                "{ledger_rows} ledger rows take {total} bytes of msg_id hashes, sorted \
                 {parallel} shards at a time in at most {MAX_SPILLED_SHARDS} shards; the pool \
                 has {free} bytes free"
            )),
        )
    };
    if shards > MAX_SPILLED_SHARDS {
        return Err(refuse());
    }
    reservation.try_grow(with_slack(total.div_ceil(shards)) * parallel).map_err(|_| refuse())?;
    Ok((Layout::Spilled { shards, at_once: parallel }, reservation))
}

/// The hashes of the ledger's msg_ids that occur more than once, each once, ascending.
pub(super) async fn repeated_key_hashes(
    ctx: &SessionContext,
    ledger_rows: u64,
) -> Result<Vec<u64>> {
    let (layout, _reservation) = plan(ctx, ledger_rows)?;
    // Hashes gathered per shard before an append: 8 MiB per scan task in all.
    let gather = (GATHER_BYTES / HASH_BYTES / layout.shards()).clamp(256, 8192);
    repeated_in(ctx, layout, ledger_rows, gather).await
}

/// [`repeated_key_hashes`] with the layout chosen by the caller, each scan task appending
/// to a shard once it gathered `gather` hashes of it.
pub(super) async fn repeated_in(
    ctx: &SessionContext,
    layout: Layout,
    ledger_rows: u64,
    gather: usize,
) -> Result<Vec<u64>> {
    let context = |e| Error::query("checking that ledger msg_ids are unique", e);
    let shards = Arc::new(open_shards(ctx, layout, ledger_rows).map_err(context)?);
    let streams = queries::frame(ctx, queries::LEDGER_KEY_HASHES, &[])
        .await?
        .execute_stream_partitioned()
        .await
        .map_err(context)?;
    let gather = gather.max(1);
    let routing: Vec<_> = streams
        .into_iter()
        .map(|mut stream| {
            let shards = Arc::clone(&shards);
            tokio::spawn(async move {
                let mut gathered = vec![Vec::with_capacity(gather); shards.len()];
                while let Some(batch) = stream.try_next().await? {
                    for &hash in batch.column(0).as_primitive::<UInt64Type>().values() {
                        let shard = shard_of(hash, shards.len());
                        gathered[shard].push(hash);
                        if gathered[shard].len() == gather {
                            shards[shard].append(&gathered[shard])?;
                            gathered[shard].clear();
                        }
                    }
                }
                for (shard, hashes) in shards.iter().zip(&gathered) {
                    shard.append(hashes)?;
                }
                Ok::<_, DataFusionError>(())
            })
        })
        .collect();
    for task in routing {
        task.await.map_err(|e| Error::Internal(format!("msg_id check: {e}")))?.map_err(context)?;
    }
    let shards = Arc::into_inner(shards)
        .ok_or_else(|| Error::Internal("msg_id check: a scan task outlived the scan".into()))?;
    // A shard's vector is dropped as soon as it is sorted.
    let mut repeated: Vec<u64> = futures::stream::iter(shards)
        .map(|shard| async move {
            let hashes = shard.into_hashes().await?;
            tokio::task::spawn_blocking(move || repeats(hashes))
                .await
                .map_err(|e| DataFusionError::External(Box::new(e)))
        })
        .buffer_unordered(layout.sorted_at_once())
        .try_concat()
        .await
        .map_err(context)?;
    repeated.sort_unstable();
    Ok(repeated)
}

/// The shards of `layout`, empty.
fn open_shards(
    ctx: &SessionContext,
    layout: Layout,
    ledger_rows: u64,
) -> datafusion::error::Result<Vec<Shard>> {
    match layout {
        Layout::InMemory { .. } => {
            let shards = layout.shards();
            let capacity = with_slack((ledger_rows as usize).div_ceil(shards) * HASH_BYTES);
            Ok((0..shards)
                .map(|_| Shard::InMemory(Mutex::new(Vec::with_capacity(capacity / HASH_BYTES))))
                .collect())
        }
        Layout::Spilled { .. } => {
            let disk = &ctx.runtime_env().disk_manager;
            (0..layout.shards())
                .map(|_| {
                    let file = disk.create_tmp_file("msg_id uniqueness check")?;
                    let writer = Mutex::new(file.open_writer()?);
                    Ok(Shard::Spilled { file, writer })
                })
                .collect()
        }
    }
}

/// One shard: the hashes of one slice of the hash space.
enum Shard {
    InMemory(Mutex<Vec<u64>>),
    Spilled { file: Arc<dyn SpillFile>, writer: Mutex<Box<dyn SpillWriter>> },
}

impl Shard {
    fn append(&self, hashes: &[u64]) -> datafusion::error::Result<()> {
        if hashes.is_empty() {
            return Ok(());
        }
        match self {
            Shard::InMemory(vector) => {
                lock(vector)?.extend_from_slice(hashes);
                Ok(())
            }
            Shard::Spilled { writer, .. } => {
                let bytes: Vec<u8> = hashes.iter().flat_map(|hash| hash.to_le_bytes()).collect();
                // A page-cache write of at most 64 KiB: brief enough for a runtime thread.
                lock(writer)?.write_all(&bytes).map_err(DataFusionError::IoError)
            }
        }
    }

    /// The shard's hashes, read back from its file when it spilled (the file is deleted
    /// when the shard is dropped).
    async fn into_hashes(self) -> datafusion::error::Result<Vec<u64>> {
        match self {
            Shard::InMemory(vector) => vector.into_inner().map_err(|_| poisoned()),
            Shard::Spilled { file, writer } => {
                writer.into_inner().map_err(|_| poisoned())?.finish()?;
                let size = file.size().unwrap_or(0) as usize;
                let mut hashes = Decoded::with_capacity(size / HASH_BYTES);
                let mut chunks = file.read_stream()?;
                while let Some(chunk) = chunks.try_next().await? {
                    hashes.feed(&chunk);
                }
                hashes.finish().map_err(|partial| {
                    DataFusionError::Execution(format!(
                        "msg_id check: spill file {:?} ends {partial} bytes into a hash",
                        file.path()
                    ))
                })
            }
        }
    }
}

/// Hashes read back from a spill file's bytes, whatever the chunks' sizes.
struct Decoded {
    hashes: Vec<u64>,
    /// The bytes of a hash a chunk ended inside.
    carry: Vec<u8>,
}

impl Decoded {
    fn with_capacity(hashes: usize) -> Self {
        Decoded { hashes: Vec::with_capacity(hashes), carry: Vec::with_capacity(HASH_BYTES) }
    }

    fn feed(&mut self, mut bytes: &[u8]) {
        if !self.carry.is_empty() {
            let take = (HASH_BYTES - self.carry.len()).min(bytes.len());
            self.carry.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if let Ok(whole) = <[u8; HASH_BYTES]>::try_from(&self.carry[..]) {
                self.hashes.push(u64::from_le_bytes(whole));
                self.carry.clear();
            }
        }
        let mut exact = bytes.chunks_exact(HASH_BYTES);
        self.hashes.extend(exact.by_ref().map(|b| {
            let mut word = [0u8; HASH_BYTES];
            word.copy_from_slice(b);
            u64::from_le_bytes(word)
        }));
        self.carry.extend_from_slice(exact.remainder());
    }

    /// The hashes; `Err(n)` when the bytes ended `n` bytes into a hash.
    fn finish(self) -> std::result::Result<Vec<u64>, usize> {
        if self.carry.is_empty() {
            Ok(self.hashes)
        } else {
            Err(self.carry.len())
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> datafusion::error::Result<std::sync::MutexGuard<'_, T>> {
    mutex.lock().map_err(|_| poisoned())
}

fn poisoned() -> DataFusionError {
    DataFusionError::Internal("msg_id check: a scan task panicked while appending".into())
}

/// The values of `hashes` that occur more than once, each once, ascending.
fn repeats(mut hashes: Vec<u64>) -> Vec<u64> {
    hashes.sort_unstable();
    let mut repeated: Vec<u64> =
        hashes.windows(2).filter(|pair| pair[0] == pair[1]).map(|pair| pair[0]).collect();
    repeated.dedup();
    repeated
}

/// The shard of a hash: its high bits scaled onto `0..shards` (hashes are uniform).
fn shard_of(hash: u64, shards: usize) -> usize {
    (((hash >> 32) * shards as u64) >> 32) as usize
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{RecordBatch, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::MemTable;

    use super::*;
    use crate::engine::session::{self, SessionOptions};

    /// A session over a `ledger` of `ids` split over `partitions` partitions, in batches
    /// of 1,000 rows, under `limit` bytes of pool when one is given.
    fn ledger(ids: &[String], partitions: usize, limit: Option<usize>) -> SessionContext {
        let mut options = SessionOptions { target_partitions: 2, ..SessionOptions::default() };
        if let Some(limit) = limit {
            options = options.with_memory_limit(limit);
        }
        let ctx = session::build(&options).unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("msg_id", DataType::Utf8, false)]));
        let per_partition = ids.len().div_ceil(partitions);
        let data = ids
            .chunks(per_partition)
            .map(|part| {
                part.chunks(1000)
                    .map(|rows| {
                        let column = StringArray::from_iter_values(rows.iter());
                        RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(column)]).unwrap()
                    })
                    .collect()
            })
            .collect();
        ctx.register_table("ledger", Arc::new(MemTable::try_new(schema, data).unwrap())).unwrap();
        ctx
    }

    async fn hash_of(ctx: &SessionContext, id: &str) -> u64 {
        let sql = format!("SELECT key_hash('{id}') AS h");
        let batches = ctx.sql(&sql).await.unwrap().collect().await.unwrap();
        batches[0].column(0).as_primitive::<UInt64Type>().value(0)
    }

    /// 20,000 distinct ids, then three of them again (one of them twice more), spread so
    /// that copies sit in different partitions and batches.
    fn ids_with_repeats() -> (Vec<String>, [&'static str; 3]) {
        let mut ids: Vec<String> = (0..20_000).map(|i| format!("m-{i}")).collect();
        let repeated = ["m-7", "m-12345", "m-19999"];
        ids.insert(3, "m-12345".into());
        ids.push("m-7".into());
        ids.insert(15_000, "m-19999".into());
        ids.push("m-19999".into());
        (ids, repeated)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn repeats_are_found_in_memory_and_spilled_alike() {
        let (ids, repeated) = ids_with_repeats();
        let rows = ids.len() as u64;

        let unbounded = ledger(&ids, 3, None);
        let (layout, _held) = plan(&unbounded, rows).unwrap();
        assert_eq!(layout, Layout::InMemory { shards: 2 });
        let mut expected = Vec::new();
        for id in repeated {
            expected.push(hash_of(&unbounded, id).await);
        }
        expected.sort_unstable();
        assert_eq!(repeated_key_hashes(&unbounded, rows).await.unwrap(), expected);

        // 160 KB of hashes against a 64 KiB pool: spilled, in several shards.
        let bounded = ledger(&ids, 3, Some(64 * 1024));
        let (layout, held) = plan(&bounded, rows).unwrap();
        let Layout::Spilled { shards, at_once } = layout else { panic!("{layout:?}") };
        assert!(shards >= 4, "{shards} shards");
        assert_eq!(at_once, 2);
        assert!(held.size() <= 64 * 1024, "reserved {} of 65536", held.size());
        drop(held);
        assert_eq!(repeated_key_hashes(&bounded, rows).await.unwrap(), expected);

        let distinct: Vec<String> = (0..20_000).map(|i| format!("m-{i}")).collect();
        // Appends both while the ledger is scanned and at its end.
        let clean = ledger(&distinct, 2, None);
        for layout in [Layout::InMemory { shards: 5 }, Layout::Spilled { shards: 7, at_once: 3 }] {
            let found = repeated_in(&bounded, layout, rows, 100).await.unwrap();
            assert_eq!(found, expected, "{layout:?}");
            assert!(
                repeated_in(&clean, layout, 20_000, 100).await.unwrap().is_empty(),
                "{layout:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_pool_too_small_for_any_shard_is_refused_with_the_hint() {
        let ids: Vec<String> = (0..50_000).map(|i| format!("m-{i}")).collect();
        let ctx = ledger(&ids, 2, Some(16 * 1024));
        let message = plan(&ctx, 50_000_000_000).unwrap_err().to_string();
        assert!(message.contains("out of memory under --memory-limit"), "{message}");
        assert!(message.contains("50000000000 ledger rows"), "{message}");
    }

    #[test]
    fn hashes_split_across_chunks_are_read_back_whole() {
        let hashes: Vec<u64> =
            (0..1000u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
        let bytes: Vec<u8> = hashes.iter().flat_map(|h| h.to_le_bytes()).collect();
        for chunk in [1, 3, 7, 8, 13, 4096] {
            let mut decoded = Decoded::with_capacity(0);
            bytes.chunks(chunk).for_each(|c| decoded.feed(c));
            assert_eq!(decoded.finish().unwrap(), hashes, "chunks of {chunk} bytes");
        }
        let mut torn = Decoded::with_capacity(0);
        torn.feed(&bytes[..8 * 5 + 3]);
        assert_eq!(torn.finish().unwrap_err(), 3);
    }

    #[test]
    fn repeats_are_each_reported_once() {
        assert_eq!(repeats(vec![5, 1, 5, 9, 5, 1, 3]), vec![1, 5]);
        assert!(repeats(vec![4, 2, 8]).is_empty());
        assert!(repeats(Vec::new()).is_empty());
    }
}
