//! One pass over a source's chain at export time: where tonight's keys supersede a carried
//! version (the keys file and the position deletes of tonight's manifest), and the live
//! rows before and after tonight (the continuity check). Each file's `recon_key` and event
//! time are read once, with plain Parquet reads, one task per row group.

// ParquetObjectReader is deprecated in parquet 59 (see reader.rs); it still decodes a
// file from object storage the way every other reader of the crate does.
#![allow(deprecated)]

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, AsArray, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, TimeUnit, TimestampMicrosecondType};
use datafusion::common::HashSet;
use datafusion::parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use datafusion::parquet::arrow::async_reader::ParquetObjectReader;
use datafusion::parquet::arrow::async_reader::ParquetRecordBatchStream;
use datafusion::parquet::arrow::{ParquetRecordBatchStreamBuilder, ProjectionMask};
use datafusion::parquet::errors::ParquetError;
use futures::{StreamExt, TryStreamExt};

use crate::error::{Error, Result};
use crate::snapshot::chain::{event_column, KEY_COLUMN};
use crate::snapshot::deletes::Positions;
use crate::snapshot::Table;
use crate::storage::Location;
use crate::time::Micros;

/// What a file is to tonight's manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// Tonight's segment: every row is the newest version of its key.
    Tonight,
    /// An earlier segment's file the lookback still needs.
    Carried,
    /// An earlier segment's file that left the lookback (counted for last night only).
    Dropped,
}

/// One data file of the source.
#[derive(Debug, Clone)]
pub(super) struct ChainFile {
    /// Its path as tonight's manifest names it.
    pub path: String,
    pub bytes: u64,
    pub role: Role,
    /// Its rows superseded before tonight (last night's position deletes), ascending.
    pub deleted_before: Vec<u64>,
}

/// The live-row windows `(lower, cut]` of last night and tonight.
#[derive(Debug, Clone, Copy)]
pub(super) struct Windows {
    pub previous: (Micros, Micros),
    pub tonight: (Micros, Micros),
}

/// What the pass found.
#[derive(Debug, Default)]
pub(super) struct Pass {
    /// Tonight's keys that a carried file also holds, sorted.
    pub superseding: Vec<String>,
    /// Per carried file with superseded rows: all of them, earlier nights' and tonight's.
    pub deleted: Positions,
    /// Rows live under last night's manifest (its window, its deletes).
    pub was_live: u64,
    /// Rows live under tonight's.
    pub live: u64,
    /// Whether tonight's files hold a key twice (bad input).
    pub repeated_key: bool,
    /// The latest event time of each of tonight's files that has rows.
    pub latest: BTreeMap<String, Micros>,
}

/// One file's share of a [`Pass`].
#[derive(Default)]
struct FilePass {
    superseding: Vec<String>,
    deleted_tonight: Vec<u64>,
    was_live: u64,
    live: u64,
}

/// Reads every file of `files` (paths relative to `location`) once; `concurrency` files
/// at a time.
pub(super) async fn pass(
    location: &Location,
    table: Table,
    files: Vec<ChainFile>,
    windows: Windows,
    concurrency: usize,
) -> Result<Pass> {
    // Tonight's keys first: the carried files are matched against them.
    let mut keys: HashSet<String> = HashSet::new();
    let mut result = Pass::default();
    for file in files.iter().filter(|f| f.role == Role::Tonight) {
        let mut batches = read(location, file, table).await?;
        while let Some(batch) = next(&mut batches, location, file).await? {
            let (key, event) = columns(&batch, location, file, table)?;
            for row in 0..batch.num_rows() {
                result.repeated_key |= !keys.insert(key.value(row).to_string());
                result.live += u64::from(within(event.value(row), windows.tonight));
            }
            if let Some(latest) = datafusion::arrow::compute::max(&event) {
                let at = result.latest.entry(file.path.clone()).or_insert(latest);
                *at = (*at).max(latest);
            }
        }
    }
    let keys = Arc::new(keys);
    let earlier: Vec<ChainFile> = files.into_iter().filter(|f| f.role != Role::Tonight).collect();
    // Each earlier file is split into its row groups, so the lookback's one large base
    // file keeps every core busy, not one.
    let mut pieces = Vec::new();
    for (index, file) in earlier.iter().enumerate() {
        let metadata = metadata(location, file).await?;
        let mut first_row = 0u64;
        for (row_group, meta) in metadata.metadata().row_groups().iter().enumerate() {
            pieces.push(Piece { file: index, row_group, first_row, metadata: metadata.clone() });
            first_row += meta.num_rows() as u64;
        }
    }
    let earlier = Arc::new(earlier);
    let passes: Vec<(usize, FilePass)> = futures::stream::iter(pieces)
        .map(|piece| {
            let (location, keys, files) =
                (location.clone(), Arc::clone(&keys), Arc::clone(&earlier));
            async move {
                let task = tokio::spawn(async move {
                    let file = &files[piece.file];
                    let found = pass_piece(&location, table, file, &piece, &keys, windows).await;
                    found.map(|found| (piece.file, found))
                });
                task.await.map_err(|e| Error::Internal(format!("a chain file's pass: {e}")))?
            }
        })
        .buffered(concurrency.max(1))
        .try_collect()
        .await?;
    let mut per_file: Vec<FilePass> = earlier.iter().map(|_| FilePass::default()).collect();
    for (index, found) in passes {
        let into = &mut per_file[index];
        into.was_live += found.was_live;
        into.live += found.live;
        into.superseding.extend(found.superseding);
        into.deleted_tonight.extend(found.deleted_tonight);
    }
    let earlier = Arc::try_unwrap(earlier).unwrap_or_else(|shared| (*shared).clone());
    for (file, found) in earlier.into_iter().zip(per_file) {
        result.was_live += found.was_live;
        result.live += found.live;
        result.superseding.extend(found.superseding);
        if file.role == Role::Carried
            && (!found.deleted_tonight.is_empty() || !file.deleted_before.is_empty())
        {
            let mut all = file.deleted_before;
            all.extend(found.deleted_tonight);
            all.sort_unstable();
            all.dedup();
            result.deleted.insert(file.path, all);
        }
    }
    result.superseding.sort_unstable();
    result.superseding.dedup();
    Ok(result)
}

/// One row group of an earlier file, read by one task.
struct Piece {
    /// Its file, an index into the earlier files.
    file: usize,
    row_group: usize,
    /// The file's position of the row group's first row.
    first_row: u64,
    metadata: ArrowReaderMetadata,
}

/// One row group of an earlier file: its rows that tonight's keys supersede, and its
/// live rows before and after tonight.
async fn pass_piece(
    location: &Location,
    table: Table,
    file: &ChainFile,
    piece: &Piece,
    keys: &HashSet<String>,
    windows: Windows,
) -> Result<FilePass> {
    let mut found = FilePass::default();
    let start = file.deleted_before.partition_point(|&p| p < piece.first_row);
    let mut before = file.deleted_before[start..].iter().peekable();
    let mut position = piece.first_row;
    let reader = object_reader(location, file);
    let builder =
        ParquetRecordBatchStreamBuilder::new_with_metadata(reader, piece.metadata.clone())
            .with_row_groups(vec![piece.row_group]);
    let mut batches = project(builder, location, file, table)?;
    while let Some(batch) = next(&mut batches, location, file).await? {
        let (key, event) = columns(&batch, location, file, table)?;
        for row in 0..batch.num_rows() {
            let at = position + row as u64;
            while before.next_if(|&&p| p < at).is_some() {}
            let superseded_before = before.next_if_eq(&&at).is_some();
            if !superseded_before {
                found.was_live += u64::from(within(event.value(row), windows.previous));
            }
            // A key tonight also holds is listed again even when an earlier night already
            // superseded this version (the keys file lists every key an earlier file holds).
            if file.role == Role::Carried {
                if keys.contains(key.value(row)) {
                    found.superseding.push(key.value(row).to_string());
                    found.deleted_tonight.push(at);
                } else if !superseded_before {
                    found.live += u64::from(within(event.value(row), windows.tonight));
                }
            }
        }
        position += batch.num_rows() as u64;
    }
    Ok(found)
}

fn within(event: Micros, (lower, cut): (Micros, Micros)) -> bool {
    event > lower && event <= cut
}

type Batches = ParquetRecordBatchStream<ParquetObjectReader>;

/// Rows per batch of the pass's reads (the reader's default is 1024).
const BATCH_ROWS: usize = 8192;

fn object_reader(location: &Location, file: &ChainFile) -> ParquetObjectReader {
    ParquetObjectReader::new(Arc::clone(location.store()), location.path(&file.path))
        .with_file_size(file.bytes)
}

/// One file's footer.
async fn metadata(location: &Location, file: &ChainFile) -> Result<ArrowReaderMetadata> {
    let mut reader = object_reader(location, file);
    ArrowReaderMetadata::load_async(&mut reader, ArrowReaderOptions::default())
        .await
        .map_err(|e| unreadable(location, file, e))
}

/// The `recon_key` and event-time columns of one file, batch by batch.
async fn read(location: &Location, file: &ChainFile, table: Table) -> Result<Batches> {
    let builder = ParquetRecordBatchStreamBuilder::new(object_reader(location, file))
        .await
        .map_err(|e| unreadable(location, file, e))?;
    project(builder, location, file, table)
}

fn project(
    builder: ParquetRecordBatchStreamBuilder<ParquetObjectReader>,
    location: &Location,
    file: &ChainFile,
    table: Table,
) -> Result<Batches> {
    let mask = ProjectionMask::columns(builder.parquet_schema(), [KEY_COLUMN, event_column(table)]);
    builder
        .with_projection(mask)
        .with_batch_size(BATCH_ROWS)
        .build()
        .map_err(|e| unreadable(location, file, e))
}

async fn next(
    batches: &mut Batches,
    location: &Location,
    file: &ChainFile,
) -> Result<Option<RecordBatch>> {
    batches.try_next().await.map_err(|e| unreadable(location, file, e))
}

fn unreadable(location: &Location, file: &ChainFile, e: ParquetError) -> Error {
    Error::SnapshotFile {
        file: location.display(&file.path),
        message: format!("unreadable Parquet: {e}"),
        source: None,
    }
}

/// The key (Utf8) and the event time (µs) of a batch [`read`] returned.
fn columns(
    batch: &RecordBatch,
    location: &Location,
    file: &ChainFile,
    table: Table,
) -> Result<(StringArray, TimestampMicrosecondArray)> {
    let column = |name: &str, to: DataType| {
        let bad = || Error::Column {
            file: location.display(&file.path),
            column: name.to_string(),
            message: format!("missing, NULL or not castable to {to}"),
            source: None,
        };
        let values = batch.column_by_name(name).ok_or_else(bad)?;
        let values = cast(values, &to).map_err(|_| bad())?;
        if values.null_count() > 0 {
            return Err(bad());
        }
        Ok(values)
    };
    let key = column(KEY_COLUMN, DataType::Utf8)?.as_string::<i32>().clone();
    let event = column(event_column(table), DataType::Timestamp(TimeUnit::Microsecond, None))?
        .as_primitive::<TimestampMicrosecondType>()
        .clone();
    Ok((key, event))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::parquet::arrow::ArrowWriter;
    use datafusion::parquet::file::properties::WriterProperties;

    /// A ledger file of `keys`, their event times `1..=n`, row groups of `group` rows.
    fn write(dir: &std::path::Path, name: &str, keys: &[String], group: usize) -> ChainFile {
        let schema = Arc::new(Schema::new(vec![
            Field::new(KEY_COLUMN, DataType::Utf8, false),
            Field::new("decided_at", DataType::Timestamp(TimeUnit::Microsecond, None), false),
        ]));
        let events: Vec<i64> = (1..=keys.len() as i64).collect();
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(StringArray::from(keys.to_vec())),
                Arc::new(TimestampMicrosecondArray::from(events)),
            ],
        )
        .unwrap();
        let path = dir.join(name);
        let props = WriterProperties::builder().set_max_row_group_size(group).build();
        let mut writer =
            ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), schema, Some(props))
                .unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let bytes = std::fs::metadata(&path).unwrap().len();
        ChainFile { path: name.into(), bytes, role: Role::Carried, deleted_before: Vec::new() }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn positions_are_the_files_own_across_its_row_groups() {
        let dir = tempfile::tempdir().unwrap();
        let location = Location::parse(dir.path().to_str().unwrap()).unwrap();
        let old: Vec<String> = (0..25).map(|i| format!("k{i}")).collect();
        // Row groups of 4 rows: keys k5, k13 and k24 lie in the 2nd, 4th and 7th.
        let mut carried = write(dir.path(), "old.parquet", &old, 4);
        carried.deleted_before = vec![2, 13, 20];
        let tonight: Vec<String> = ["k5", "k13", "k24", "new"].map(String::from).to_vec();
        let mut own = write(dir.path(), "new.parquet", &tonight, 4);
        own.role = Role::Tonight;
        let windows = Windows { previous: (0, 25), tonight: (10, 100) };
        let found = pass(&location, Table::Ledger, vec![own, carried], windows, 2).await.unwrap();
        assert_eq!(found.superseding, vec!["k13", "k24", "k5"]);
        // Earlier nights' positions and tonight's, in the file's own numbering.
        assert_eq!(found.deleted.get("old.parquet"), Some(&vec![2, 5, 13, 20, 24]));
        // Last night: 25 rows less 3 deleted. Tonight: the carried rows with events in
        // (10, 25] not deleted (11..=25 less positions 13, 20, 24: events 14, 21, 25),
        // and tonight's 4 rows (events 1..=4 lie outside (10, 100]).
        assert_eq!(found.was_live, 22);
        assert_eq!(found.live, 12);
        assert!(!found.repeated_key);
    }
}
