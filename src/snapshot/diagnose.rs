//! Naming the corrupt file behind a failed query. The query engine reports a Parquet page
//! it cannot decode without saying which file it came from; when a query over a snapshot
//! fails so, every listed file is decoded in turn (only then: the cost falls on failures)
//! and the first that does not decode is named in the error.

// ParquetObjectReader is deprecated in parquet 59 (see reader.rs); it still decodes a
// whole file through object_store, which is all this needs.
#![allow(deprecated)]

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type, TimeUnit};
use datafusion::parquet::arrow::arrow_reader::ArrowReaderOptions;
use datafusion::parquet::arrow::async_reader::ParquetObjectReader;
use datafusion::parquet::arrow::ParquetRecordBatchStreamBuilder;
use datafusion::parquet::file::metadata::ParquetMetaData;
use datafusion::parquet::file::page_index::column_index::ColumnIndexMetaData;
use datafusion::parquet::file::statistics::Statistics;
use futures::{FutureExt, TryStreamExt};
use object_store::ObjectStoreExt;

use super::{Snapshot, Table};
use crate::error::Error;
use crate::storage::Location;

/// `error` (a failed query over `snapshot`) with the corrupt file named, when a listed file
/// does not decode; otherwise `error` unchanged.
pub(crate) async fn name_corrupt_file(snapshot: &Location, error: Error) -> Error {
    if !matches!(error, Error::Query { .. }) {
        return error;
    }
    let Ok(opened) = Snapshot::open(snapshot).await else { return error };
    for table in Table::ALL {
        for file in opened.files(table) {
            if let Err(problem) = decode(snapshot, &file.path).await {
                return Error::SnapshotFile {
                    file: snapshot.display(&file.path),
                    message: format!("corrupt Parquet: {problem} (the query failed with: {error})"),
                    source: Some(Box::new(problem)),
                };
            }
        }
    }
    error
}

/// Why a listed file does not decode.
#[derive(Debug, thiserror::Error)]
enum Corrupt {
    /// The store cannot say how big the file is.
    #[error("{0}")]
    Store(#[from] object_store::Error),
    /// The Parquet reader refuses it.
    #[error("{0}")]
    Parquet(#[from] datafusion::parquet::errors::ParquetError),
    /// It decodes, but breaks what the engine relies on (page index, statistics,
    /// timestamps).
    #[error("{0}")]
    Check(String),
    /// The reader panicked on it.
    #[error("the Parquet reader cannot decode it")]
    Panic,
}

/// Decodes every row of one file and checks what the engine relies on beyond decoding:
/// a page index whose pages start at increasing rows inside their row group, and
/// timestamps the engine can compute with (representable in nanoseconds). The reader's
/// panics on hostile bytes are errors here.
async fn decode(location: &Location, relative: &str) -> Result<(), Corrupt> {
    let path = location.path(relative);
    let meta = location.store().head(&path).await?;
    let reader =
        ParquetObjectReader::new(Arc::clone(location.store()), path).with_file_size(meta.size);
    let work = async move {
        // With the page index, which the engine reads to prune pages.
        let options = ArrowReaderOptions::new().with_page_index(true);
        let builder = ParquetRecordBatchStreamBuilder::new_with_options(reader, options).await?;
        check_page_index(builder.metadata()).map_err(Corrupt::Check)?;
        check_statistics(builder.metadata()).map_err(Corrupt::Check)?;
        let mut stream = builder.build()?;
        let mut row = 0;
        while let Some(batch) = stream.try_next().await? {
            check_timestamps(&batch, row).map_err(Corrupt::Check)?;
            row += batch.num_rows();
        }
        Ok::<_, Corrupt>(())
    };
    match AssertUnwindSafe(work).catch_unwind().await {
        Ok(result) => result,
        Err(_) => Err(Corrupt::Panic),
    }
}

fn check_page_index(metadata: &ParquetMetaData) -> Result<(), String> {
    let Some(index) = metadata.offset_index() else { return Ok(()) };
    for (group, (columns, row_group)) in index.iter().zip(metadata.row_groups()).enumerate() {
        for (column, offsets) in columns.iter().enumerate() {
            let firsts: Vec<i64> =
                offsets.page_locations().iter().map(|p| p.first_row_index).collect();
            let ordered = firsts.first().is_none_or(|f| *f == 0)
                && firsts.windows(2).all(|w| w[0] < w[1])
                && firsts.iter().all(|f| *f < row_group.num_rows().max(1));
            if !ordered {
                return Err(format!(
                    "row group {group}, column {column}: the page index does not match the \
                     row group's {} rows",
                    row_group.num_rows()
                ));
            }
        }
    }
    Ok(())
}

/// Statistics whose minimum exceeds their maximum (row group or page): the engine prunes
/// with them and stops on an internal assertion instead of naming the file.
fn check_statistics(metadata: &ParquetMetaData) -> Result<(), String> {
    let inverted = |group: usize, column: usize, page: Option<usize>| {
        let page = page.map(|p| format!(", page {p}")).unwrap_or_default();
        Err(format!("row group {group}, column {column}{page}: statistics say min > max"))
    };
    for (group, row_group) in metadata.row_groups().iter().enumerate() {
        for (column, chunk) in row_group.columns().iter().enumerate() {
            let ordered = match chunk.statistics() {
                Some(Statistics::Int32(s)) => ordered(s.min_opt(), s.max_opt()),
                Some(Statistics::Int64(s)) => ordered(s.min_opt(), s.max_opt()),
                Some(Statistics::ByteArray(s)) => {
                    ordered(s.min_opt().map(|v| v.data()), s.max_opt().map(|v| v.data()))
                }
                _ => true,
            };
            if !ordered {
                return inverted(group, column, None);
            }
        }
    }
    let Some(index) = metadata.column_index() else { return Ok(()) };
    for (group, columns) in index.iter().enumerate() {
        for (column, pages) in columns.iter().enumerate() {
            let page_ordered = |page: usize| match pages {
                ColumnIndexMetaData::INT32(i) => ordered(i.min_value(page), i.max_value(page)),
                ColumnIndexMetaData::INT64(i) => ordered(i.min_value(page), i.max_value(page)),
                ColumnIndexMetaData::BYTE_ARRAY(i) => ordered(i.min_value(page), i.max_value(page)),
                _ => true,
            };
            let count = match pages {
                ColumnIndexMetaData::INT32(i) => i.num_pages(),
                ColumnIndexMetaData::INT64(i) => i.num_pages(),
                ColumnIndexMetaData::BYTE_ARRAY(i) => i.num_pages(),
                _ => 0,
            };
            if let Some(page) = (0..count as usize).find(|&p| !page_ordered(p)) {
                return inverted(group, column, Some(page));
            }
        }
    }
    Ok(())
}

/// `min <= max`, or either is absent.
fn ordered<T: PartialOrd + ?Sized>(min: Option<&T>, max: Option<&T>) -> bool {
    match (min, max) {
        (Some(min), Some(max)) => min <= max,
        _ => true,
    }
}

fn check_timestamps(batch: &RecordBatch, first_row: usize) -> Result<(), String> {
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        let DataType::Timestamp(unit, _) = field.data_type() else { continue };
        let per_nano: i64 = match unit {
            TimeUnit::Second => 1_000_000_000,
            TimeUnit::Millisecond => 1_000_000,
            TimeUnit::Microsecond => 1_000,
            TimeUnit::Nanosecond => 1,
        };
        let values = cast(column, &DataType::Int64).map_err(|e| e.to_string())?;
        let values = values.as_primitive::<Int64Type>();
        for (offset, value) in values.iter().enumerate() {
            if value.is_some_and(|v| v.checked_mul(per_nano).is_none()) {
                return Err(format!(
                    "column {}, row {}: timestamp out of range",
                    field.name(),
                    first_row + offset
                ));
            }
        }
    }
    Ok(())
}
