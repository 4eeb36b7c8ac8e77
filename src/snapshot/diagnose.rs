//! Naming the corrupt file behind a failed query. The query engine reports a Parquet page
//! it cannot decode without saying which file it came from; when a query over a snapshot
//! fails so, every listed file is decoded in turn (only then: the cost falls on failures)
//! and the first that does not decode is named in the error.

// ParquetObjectReader is deprecated in parquet 59 (see reader.rs); it still decodes a
// whole file through object_store, which is all this needs.
#![allow(deprecated)]

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use datafusion::parquet::arrow::arrow_reader::ArrowReaderOptions;
use datafusion::parquet::arrow::async_reader::ParquetObjectReader;
use datafusion::parquet::arrow::ParquetRecordBatchStreamBuilder;
use futures::{FutureExt, TryStreamExt};
use object_store::ObjectStoreExt;

use super::{Snapshot, Table};
use crate::error::Error;
use crate::storage::Location;

/// `error` (a failed query over `snapshot`) with the corrupt file named, when a listed file
/// does not decode; otherwise `error` unchanged.
pub async fn name_corrupt_file(snapshot: &Location, error: Error) -> Error {
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
                };
            }
        }
    }
    error
}

/// Decodes every row of one file; the reader's panics on hostile bytes are errors here.
async fn decode(location: &Location, relative: &str) -> Result<(), String> {
    let path = location.path(relative);
    let meta = location.store().head(&path).await.map_err(|e| e.to_string())?;
    let reader =
        ParquetObjectReader::new(Arc::clone(location.store()), path).with_file_size(meta.size);
    let work = async move {
        // With the page index, which the engine reads to prune pages.
        let options = ArrowReaderOptions::new().with_page_index(true);
        let builder = ParquetRecordBatchStreamBuilder::new_with_options(reader, options).await?;
        let mut stream = builder.build()?;
        while stream.try_next().await?.is_some() {}
        Ok::<_, datafusion::parquet::errors::ParquetError>(())
    };
    match AssertUnwindSafe(work).catch_unwind().await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err("the Parquet reader cannot decode it".into()),
    }
}
