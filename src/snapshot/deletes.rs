//! Position deletes of an incremental snapshot (docs/CONTRACT.md "Incremental snapshots"):
//! per source, the rows of the chain's files that a later segment supersedes, named by
//! file and row position. A reader skips them while it reads each file (a row selection),
//! so the live rows need no join on `recon_key`; the keys files say the same by key, for
//! readers that merge by key (a cluster, `compact`, the shadow check).

// ParquetObjectReader is deprecated in parquet 59 (see reader.rs); it still decodes a
// file from object storage the way every other reader of the crate does.
#![allow(deprecated)]

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use datafusion::parquet::arrow::arrow_reader::{RowSelection, RowSelector};
use datafusion::parquet::arrow::async_reader::ParquetObjectReader;
use datafusion::parquet::arrow::ParquetRecordBatchStreamBuilder;
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::storage::Location;

/// The data file a deleted row lies in, as the manifest that lists the deletes names it.
pub const FILE_COLUMN: &str = "file";
/// The deleted row's position in its file, from 0.
pub const ROW_COLUMN: &str = "row";

/// One source's position deletes file of a manifest (`chain.deletes`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DeletesFile {
    /// Path relative to the manifest's folder.
    pub path: String,
    /// The source label.
    pub source: String,
    /// Rows (deleted positions) listed.
    pub rows: u64,
    /// Its size in bytes.
    pub bytes: u64,
    /// Hex SHA-256 of its bytes.
    pub sha256: String,
}

/// The schema of a position deletes file.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(FILE_COLUMN, DataType::Utf8, false),
        Field::new(ROW_COLUMN, DataType::Int64, false),
    ]))
}

/// Deleted row positions per data file path, ascending.
pub type Positions = BTreeMap<String, Vec<u64>>;

/// The positions of `positions` as one batch, sorted by file and row.
pub fn batch(positions: &Positions) -> Result<RecordBatch> {
    let (mut files, mut rows) = (Vec::new(), Vec::new());
    for (file, deleted) in positions {
        for &row in deleted {
            files.push(file.as_str());
            rows.push(row as i64);
        }
    }
    RecordBatch::try_new(
        schema(),
        vec![Arc::new(StringArray::from(files)), Arc::new(Int64Array::from(rows))],
    )
    .map_err(|e| Error::Internal(format!("position deletes: {e}")))
}

/// Reads the position deletes files `files` (paths relative to `location`); `rename`
/// maps each listed data file path to the name the caller uses for it.
pub async fn read(
    location: &Location,
    files: &[&DeletesFile],
    rename: impl Fn(&str) -> String,
) -> Result<Positions> {
    let mut positions = Positions::new();
    for file in files {
        let shown = location.display(&file.path);
        let bad =
            |message: String| Error::SnapshotFile { file: shown.clone(), message, source: None };
        let reader =
            ParquetObjectReader::new(Arc::clone(location.store()), location.path(&file.path))
                .with_file_size(file.bytes);
        let stream = ParquetRecordBatchStreamBuilder::new(reader)
            .await
            .and_then(|b| b.build())
            .map_err(|e| bad(format!("unreadable position deletes: {e}")))?;
        let batches: Vec<RecordBatch> = stream
            .try_collect()
            .await
            .map_err(|e| bad(format!("unreadable position deletes: {e}")))?;
        let mut listed = 0u64;
        for batch in batches {
            let (Some(paths), Some(rows)) =
                (batch.column_by_name(FILE_COLUMN), batch.column_by_name(ROW_COLUMN))
            else {
                return Err(bad(format!("needs the columns {FILE_COLUMN} and {ROW_COLUMN}")));
            };
            let (Some(paths), Some(rows)) =
                (paths.as_string_opt::<i32>(), rows.as_primitive_opt::<Int64Type>())
            else {
                return Err(bad(format!("{FILE_COLUMN} must be Utf8 and {ROW_COLUMN} Int64")));
            };
            for i in 0..batch.num_rows() {
                if paths.is_null(i) || rows.is_null(i) || rows.value(i) < 0 {
                    return Err(bad(format!("row {} is NULL or negative", listed)));
                }
                positions.entry(rename(paths.value(i))).or_default().push(rows.value(i) as u64);
                listed += 1;
            }
        }
        if listed != file.rows {
            return Err(bad(format!("holds {listed} rows but manifest.json says {}", file.rows)));
        }
    }
    for rows in positions.values_mut() {
        rows.sort_unstable();
        rows.dedup();
    }
    Ok(positions)
}

/// The rows of a file of `rows` rows that are not at the ascending positions `deleted`.
pub fn selection(deleted: &[u64], rows: u64) -> RowSelection {
    let mut selectors = Vec::new();
    let mut next = 0u64;
    for &row in deleted.iter().filter(|&&r| r < rows) {
        if row < next {
            continue;
        }
        if row > next {
            selectors.push(RowSelector::select((row - next) as usize));
        }
        selectors.push(RowSelector::skip(1));
        next = row + 1;
    }
    if next < rows {
        selectors.push(RowSelector::select((rows - next) as usize));
    }
    RowSelection::from(selectors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selection_skips_exactly_the_deleted_rows() {
        let kept = |deleted: &[u64], rows: u64| -> Vec<u64> {
            let selection = selection(deleted, rows);
            let mut at = 0u64;
            let mut kept = Vec::new();
            for s in selection.iter() {
                if !s.skip {
                    kept.extend(at..at + s.row_count as u64);
                }
                at += s.row_count as u64;
            }
            assert_eq!(at, rows, "the selection covers the whole file");
            kept
        };
        assert_eq!(kept(&[], 3), vec![0, 1, 2]);
        assert_eq!(kept(&[0, 2], 4), vec![1, 3]);
        assert_eq!(kept(&[1, 1, 2], 4), vec![0, 3]);
        assert_eq!(kept(&[3], 4), vec![0, 1, 2]);
        assert_eq!(kept(&[0, 1, 2], 3), Vec::<u64>::new());
    }
}
