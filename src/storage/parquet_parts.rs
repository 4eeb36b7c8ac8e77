//! Parquet tables written as numbered parts (`part-00000.parquet`, ...) through a
//! [`Location`], so file-name order is row order and every part carries its row count
//! and SHA-256 for a manifest.
//!
//! Parts are built in memory up to `rows_per_file` rows and written with one put each:
//! an object appears whole or not at all. Rows come in batches (buffered into row groups
//! by the Arrow writer) or, for rows already all in memory, as whole row groups encoded
//! on several threads at once ([`PartWriter::write_row_groups`]).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use datafusion::parquet::arrow::arrow_writer::{
    compute_leaves, ArrowColumnChunk, ArrowColumnWriter, ArrowRowGroupWriterFactory,
};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::basic::{Compression, ZstdLevel};
use datafusion::parquet::errors::ParquetError;
use datafusion::parquet::file::properties::{EnabledStatistics, WriterProperties};
use datafusion::parquet::file::writer::SerializedFileWriter;
use datafusion::parquet::schema::types::ColumnPath;
use sha2::{Digest, Sha256};

use crate::error::{BoxError, Error, Result};
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
    current: Option<Part>,
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
            let writer = match self.part()? {
                Part::Buffered(writer) => writer,
                Part::RowGroups(..) => {
                    return Err(self.error("batches appended after whole row groups"));
                }
            };
            writer.write(&slice).map_err(|e| self.error(e))?;
            self.current_rows += take;
            offset += take;
        }
        Ok(())
    }

    /// Appends `rows` rows as whole row groups (at most the row-group size each, never
    /// across a part), encoding up to `threads` of them at once, each on its own thread.
    /// `rows_of(range)` gives the rows of a range of `0..rows` as batches, in order; it is
    /// called from those threads. The same rows give the same bytes; a row group never
    /// spans two calls. `appended` is told the rows of each row group once it is in the part.
    pub async fn write_row_groups(
        &mut self,
        rows: usize,
        threads: usize,
        rows_of: RowsOf,
        appended: &mut dyn FnMut(usize),
    ) -> Result<()> {
        let mut offset = 0;
        while offset < rows {
            if self.current_rows >= self.rows_per_file {
                self.flush_part().await?;
            }
            let take = (self.rows_per_file - self.current_rows).min(rows - offset);
            let groups = row_groups(offset..offset + take, self.row_group_rows);
            for wave in groups.chunks(threads.max(1)) {
                let encoded = self.encode_wave(wave, &rows_of).await?;
                for (group, chunks) in wave.iter().zip(encoded) {
                    let (file, _) = self.row_group_writers()?;
                    let result = append_row_group(file, chunks);
                    result.map_err(|e| self.error(e))?;
                    self.current_rows += group.len();
                    appended(group.len());
                }
            }
            offset += take;
        }
        Ok(())
    }

    /// Encodes each row group of `wave` on a thread of its own, from the runtime's pool of
    /// blocking threads (reused from one row group to the next, not started for each).
    async fn encode_wave(
        &mut self,
        wave: &[Range<usize>],
        rows_of: &RowsOf,
    ) -> Result<Vec<Vec<ArrowColumnChunk>>> {
        let schema = SchemaRef::clone(&self.schema);
        let (_, factory) = self.row_group_writers()?;
        let mut jobs = Vec::with_capacity(wave.len());
        for group in wave {
            let writers = factory.create_column_writers(0);
            let (schema, rows_of, group) =
                (SchemaRef::clone(&schema), Arc::clone(rows_of), group.clone());
            jobs.push(tokio::task::spawn_blocking(move || {
                encode_row_group(writers?, &schema, rows_of(group)?)
            }));
        }
        let mut encoded = Vec::with_capacity(jobs.len());
        for job in jobs {
            let result =
                job.await.map_err(|e| self.error(format!("a row-group encoder stopped: {e}")))?;
            encoded.push(result.map_err(|e| self.error(e))?);
        }
        Ok(encoded)
    }

    /// Writes the last part (an empty one if the table has no rows) and returns every file.
    pub async fn finish(mut self) -> Result<Vec<FileEntry>> {
        if self.current.is_some() || self.files.is_empty() {
            self.flush_part().await?;
        }
        Ok(self.files)
    }

    /// The part being built, started when there is none.
    fn part(&mut self) -> Result<&mut Part> {
        if self.current.is_none() {
            let writer = new_writer(
                &self.schema,
                self.row_group_rows,
                &self.location.display(&self.folder),
            )?;
            self.current = Some(Part::Buffered(writer));
        }
        self.current.as_mut().ok_or_else(|| Error::Internal("no Parquet part".into()))
    }

    /// The current part as a file writer taking whole row groups.
    fn row_group_writers(
        &mut self,
    ) -> Result<(&mut SerializedFileWriter<Vec<u8>>, &ArrowRowGroupWriterFactory)> {
        if let Part::Buffered(_) = self.part()? {
            let Some(Part::Buffered(writer)) = self.current.take() else {
                return Err(Error::Internal("no Parquet part".into()));
            };
            let (file, factory) = writer.into_serialized_writer().map_err(|e| self.error(e))?;
            self.current = Some(Part::RowGroups(file, factory));
        }
        match self.current.as_mut() {
            Some(Part::RowGroups(file, factory)) => Ok((file, &*factory)),
            _ => Err(Error::Internal("no Parquet part".into())),
        }
    }

    async fn flush_part(&mut self) -> Result<()> {
        let part = match self.current.take() {
            Some(part) => part,
            None => Part::Buffered(new_writer(
                &self.schema,
                self.row_group_rows,
                &self.location.display(&self.folder),
            )?),
        };
        let bytes = match part {
            Part::Buffered(writer) => writer.into_inner(),
            Part::RowGroups(file, _) => file.into_inner(),
        }
        .map_err(|e| self.error(e))?;
        let path = format!("{}/{}-{:05}.parquet", self.folder, self.stem, self.files.len());
        let sha256 = hex::encode(Sha256::digest(&bytes));
        self.location.write(&path, Bytes::from(bytes)).await?;
        crate::testing::crash_point(crate::testing::Stage::PartWritten);
        self.files.push(FileEntry { path, rows: self.current_rows as u64, sha256 });
        self.current_rows = 0;
        Ok(())
    }

    fn error(&self, e: impl std::fmt::Display + Into<BoxError>) -> Error {
        Error::Output {
            location: self.location.display(&self.folder),
            message: format!("writing Parquet: {e}"),
            source: Some(e.into()),
        }
    }
}

/// A Parquet part being built in memory.
enum Part {
    /// Batches buffered into row groups by the Arrow writer.
    Buffered(ArrowWriter<Vec<u8>>),
    /// Whole row groups encoded elsewhere, appended in order.
    RowGroups(SerializedFileWriter<Vec<u8>>, ArrowRowGroupWriterFactory),
}

/// `rows` cut into consecutive ranges of at most `size` rows.
fn row_groups(rows: Range<usize>, size: usize) -> Vec<Range<usize>> {
    let size = size.max(1);
    (rows.start..rows.end).step_by(size).map(|start| start..(start + size).min(rows.end)).collect()
}

/// The rows of a range of rows, as batches in order ([`PartWriter::write_row_groups`]).
pub type RowsOf = Arc<dyn Fn(Range<usize>) -> Result<Vec<RecordBatch>, ArrowError> + Send + Sync>;

/// Encodes one row group's batches into its column chunks.
fn encode_row_group(
    mut writers: Vec<ArrowColumnWriter>,
    schema: &SchemaRef,
    batches: Vec<RecordBatch>,
) -> Result<Vec<ArrowColumnChunk>, ParquetError> {
    for batch in &batches {
        let mut leaves = writers.iter_mut();
        for (field, column) in schema.fields().iter().zip(batch.columns()) {
            for leaf in compute_leaves(field, column)? {
                let writer = leaves.next().ok_or_else(|| {
                    ParquetError::General("more leaves than column writers".into())
                })?;
                writer.write(&leaf)?;
            }
        }
    }
    writers.into_iter().map(|w| w.close()).collect()
}

fn append_row_group(
    file: &mut SerializedFileWriter<Vec<u8>>,
    chunks: Vec<ArrowColumnChunk>,
) -> Result<(), ParquetError> {
    let mut row_group = file.next_row_group()?;
    for chunk in chunks {
        chunk.append_to_row_group(&mut row_group)?;
    }
    row_group.close()?;
    Ok(())
}

/// The writer settings of every Parquet file effect-recon produces: zstd, page statistics,
/// no dictionary for the unique id columns, fixed row-group size, and a `created_by` without a build-specific part, so the same
/// rows give the same bytes.
pub fn writer_properties() -> WriterProperties {
    properties(ROW_GROUP_ROWS)
}

/// Columns with (nearly) a distinct value per row or per order: a dictionary of them never
/// pays off, and building one per row group until it overflowed was a fifth of an
/// export's CPU (hashing and interning). Low-cardinality columns (statuses, event types,
/// topic, consumer, partition, effect) keep theirs.
const UNIQUE_COLUMNS: [&str; 7] =
    ["msg_id", "receipt_id", "order_id", "kafka_offset", "decided_at", "changed_at", "created_at"];

fn properties(row_group_rows: usize) -> WriterProperties {
    let builder = UNIQUE_COLUMNS.iter().fold(WriterProperties::builder(), |b, column| {
        b.set_column_dictionary_enabled(ColumnPath::from(*column), false)
    });
    builder
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
        source: Some(Box::new(e)),
    })
}

/// Why [`read_parquet`] could not read a file; its text is the reader's own.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// The footer or a page is not readable Parquet.
    #[error(transparent)]
    Parquet(#[from] ParquetError),
    /// A batch does not decode into Arrow.
    #[error(transparent)]
    Batch(#[from] ArrowError),
}

/// Every batch of one Parquet file held in memory, and its schema's key-value metadata
/// (the eager reader of the tools that read a whole table: run outputs, truth files, the
/// loader).
pub(crate) fn read_parquet(
    bytes: Bytes,
) -> Result<(Vec<RecordBatch>, HashMap<String, String>), ReadError> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes)?.with_batch_size(8192);
    let metadata = builder.schema().metadata().clone();
    let batches = builder.build()?.collect::<Result<Vec<_>, ArrowError>>()?;
    Ok((batches, metadata))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_error_says_what_the_reader_said() {
        // The callers prefix "unreadable Parquet: "; a wrapper's own words (ParquetError's
        // "External: ") would change the messages of the run reader, verify and load.
        let batch = ArrowError::ParseError("bad page".into());
        assert_eq!(ReadError::from(batch).to_string(), "Parser error: bad page");
        let file = ParquetError::General("bad footer".into());
        assert_eq!(ReadError::from(file).to_string(), "Parquet error: bad footer");
    }
}
