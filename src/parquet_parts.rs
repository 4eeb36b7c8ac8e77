//! Parquet tables written as numbered parts (`part-00000.parquet`, ...) through a
//! [`Location`], so file-name order is row order and every part carries its row count
//! and SHA-256 for a manifest.
//!
//! Parts are built in memory up to `rows_per_file` rows and written with one put each:
//! an object appears whole or not at all.

use bytes::Bytes;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::basic::{Compression, ZstdLevel};
use datafusion::parquet::file::properties::{EnabledStatistics, WriterProperties};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::storage::Location;
use serde::{Deserialize, Serialize};

/// One listed file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileEntry {
    /// Path relative to the folder the manifest is in.
    pub path: String,
    /// Number of rows.
    pub rows: u64,
    /// Hex SHA-256 of the file's bytes.
    pub sha256: String,
}

/// Rows per row group: small enough for statistics to prune by `order_id`, large enough to scan fast.
pub const ROW_GROUP_ROWS: usize = 128 * 1024;

/// Rows per file before a new part starts.
pub const ROWS_PER_FILE: usize = 4 * 1024 * 1024;

/// Writes one table as numbered Parquet parts under `folder`.
pub struct PartWriter {
    location: Location,
    folder: String,
    stem: String,
    schema: SchemaRef,
    rows_per_file: usize,
    row_group_rows: usize,
    current: Option<ArrowWriter<Vec<u8>>>,
    current_rows: usize,
    files: Vec<FileEntry>,
}

impl PartWriter {
    /// A writer of `folder` (relative to `location`) with the given schema.
    pub fn new(location: &Location, folder: &str, schema: SchemaRef) -> Self {
        PartWriter {
            location: location.clone(),
            folder: folder.trim_matches('/').to_string(),
            stem: "part".to_string(),
            schema,
            rows_per_file: ROWS_PER_FILE,
            row_group_rows: ROW_GROUP_ROWS,
            current: None,
            current_rows: 0,
            files: Vec::new(),
        }
    }

    /// Changes how many rows go in one file (tests use tiny values).
    pub fn with_rows_per_file(mut self, rows: usize) -> Self {
        self.rows_per_file = rows.max(1);
        self
    }

    /// Changes how many rows go in one row group (tests of scans over many row groups).
    pub fn with_row_group_rows(mut self, rows: usize) -> Self {
        self.row_group_rows = rows.max(1);
        self
    }

    /// Names files `<stem>-00000.parquet` instead of `part-00000.parquet`, for several
    /// writers sharing one folder.
    pub fn with_file_stem(mut self, stem: &str) -> Self {
        self.stem = format!("{stem}-part");
        self
    }

    /// The schema every batch must have.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Appends a batch, starting new parts as files fill up.
    pub async fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let mut offset = 0;
        while offset < batch.num_rows() {
            if self.current_rows >= self.rows_per_file {
                self.flush_part().await?;
            }
            let take = (self.rows_per_file - self.current_rows).min(batch.num_rows() - offset);
            let slice = batch.slice(offset, take);
            let writer = match self.current.as_mut() {
                Some(writer) => writer,
                None => self.current.insert(new_writer(
                    &self.schema,
                    self.row_group_rows,
                    &self.location.display(&self.folder),
                )?),
            };
            writer.write(&slice).map_err(|e| self.error(e))?;
            self.current_rows += take;
            offset += take;
        }
        Ok(())
    }

    /// Writes the last part (an empty one if the table has no rows) and returns every file.
    pub async fn finish(mut self) -> Result<Vec<FileEntry>> {
        if self.current.is_some() || self.files.is_empty() {
            self.flush_part().await?;
        }
        Ok(self.files)
    }

    async fn flush_part(&mut self) -> Result<()> {
        let writer = match self.current.take() {
            Some(writer) => writer,
            None => {
                new_writer(&self.schema, self.row_group_rows, &self.location.display(&self.folder))?
            }
        };
        let bytes = writer.into_inner().map_err(|e| self.error(e))?;
        let path = format!("{}/{}-{:05}.parquet", self.folder, self.stem, self.files.len());
        let sha256 = hex::encode(Sha256::digest(&bytes));
        self.location.write(&path, Bytes::from(bytes)).await?;
        crate::faults::crash_point("part-written");
        self.files.push(FileEntry { path, rows: self.current_rows as u64, sha256 });
        self.current_rows = 0;
        Ok(())
    }

    fn error(&self, e: impl std::fmt::Display) -> Error {
        Error::Output {
            location: self.location.display(&self.folder),
            message: format!("writing Parquet: {e}"),
        }
    }
}

/// The writer settings of every Parquet file effect-recon produces: zstd, page statistics,
/// fixed row-group size, and a `created_by` without a build-specific part, so the same
/// rows give the same bytes.
pub fn writer_properties() -> WriterProperties {
    properties(ROW_GROUP_ROWS)
}

fn properties(row_group_rows: usize) -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_max_row_group_row_count(Some(row_group_rows))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_created_by(format!("effect-recon {}", env!("CARGO_PKG_VERSION")))
        .build()
}

fn new_writer(
    schema: &SchemaRef,
    row_group_rows: usize,
    what: &str,
) -> Result<ArrowWriter<Vec<u8>>> {
    ArrowWriter::try_new(
        Vec::new(),
        std::sync::Arc::clone(schema),
        Some(properties(row_group_rows)),
    )
    .map_err(|e| Error::Output {
        location: what.to_string(),
        message: format!("creating Parquet writer: {e}"),
    })
}
