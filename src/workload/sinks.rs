//! The writers a generated snapshot is streamed into, shared by a single day and by the
//! nights: one column builder and table writer per snapshot table (receipts per
//! provider), the in-memory `truth.parquet`, and the row counts of the finished manifest.

use std::collections::BTreeMap;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::ArrowWriter;

use super::columns::{HistoryColumns, LedgerColumns, ReceiptColumns};
use super::truth::TRUTH_FILE;
use super::world::{OrderRows, Provider};
use crate::error::{Error, Result};
use crate::snapshot::{SnapshotManifest, SnapshotWriter, Table, TableWriter};
use crate::storage::parquet_parts::writer_properties;
use crate::storage::Location;

/// The three snapshot tables of one generated snapshot, block by block.
pub(crate) struct TableSinks {
    ledger: (LedgerColumns, TableWriter),
    history: (HistoryColumns, TableWriter),
    receipts: Vec<(ReceiptColumns, TableWriter)>,
}

impl TableSinks {
    /// One writer per snapshot table of `snapshot`, with empty column builders.
    pub(crate) fn open(snapshot: &SnapshotWriter) -> Self {
        TableSinks {
            ledger: (LedgerColumns::default(), snapshot.table(Table::Ledger, None)),
            history: (HistoryColumns::default(), snapshot.table(Table::StatusHistory, None)),
            receipts: Provider::ALL
                .iter()
                .map(|&p| {
                    (ReceiptColumns::new(p), snapshot.table(Table::Receipts, Some(p.source())))
                })
                .collect(),
        }
    }

    /// Adds one order's rows to the builders.
    pub(crate) fn push(&mut self, order: &OrderRows) {
        self.ledger.0.push(order);
        self.history.0.push(order);
        self.receipts.iter_mut().for_each(|(columns, _)| columns.push(order));
    }

    /// Writes the block held in the builders.
    pub(crate) async fn flush(&mut self) -> Result<()> {
        self.ledger.1.write(&self.ledger.0.finish()?).await?;
        self.history.1.write(&self.history.0.finish()?).await?;
        for (columns, writer) in &mut self.receipts {
            writer.write(&columns.finish()?).await?;
        }
        Ok(())
    }

    /// Closes every table into `snapshot`.
    pub(crate) async fn close(self, snapshot: &mut SnapshotWriter) -> Result<()> {
        snapshot.add(Table::Ledger, self.ledger.1.finish().await?);
        snapshot.add(Table::StatusHistory, self.history.1.finish().await?);
        for (_, writer) in self.receipts {
            snapshot.add(Table::Receipts, writer.finish().await?);
        }
        Ok(())
    }
}

/// `truth.parquet`, written in memory and stored beside the snapshot (not in its manifest).
pub(crate) struct TruthSink {
    writer: ArrowWriter<Vec<u8>>,
    schema: SchemaRef,
}

impl TruthSink {
    /// A writer of `<folder>/truth.parquet` with `schema`.
    pub(crate) fn open(schema: SchemaRef, folder: &Location) -> Result<Self> {
        let writer =
            ArrowWriter::try_new(Vec::new(), SchemaRef::clone(&schema), Some(writer_properties()))
                .map_err(|e| Error::Output {
                    location: folder.display(TRUTH_FILE),
                    message: e.to_string(),
                    source: Some(Box::new(e)),
                })?;
        Ok(TruthSink { writer, schema })
    }

    /// The schema batches must have.
    pub(crate) fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Writes one block of truth rows.
    pub(crate) fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        self.writer.write(batch).map_err(truth_error)
    }

    /// Finishes the file and stores it as `<folder>/truth.parquet`.
    pub(crate) async fn store(self, folder: &Location) -> Result<()> {
        let bytes = self.writer.into_inner().map_err(truth_error)?;
        folder.write(TRUTH_FILE, bytes::Bytes::from(bytes)).await
    }
}

fn truth_error(e: datafusion::parquet::errors::ParquetError) -> Error {
    Error::Output { location: TRUTH_FILE.into(), message: e.to_string(), source: Some(Box::new(e)) }
}

/// Rows per table and per receipt source (`receipts/<source>`), and the number of files,
/// of a finished snapshot.
pub(crate) fn rows_by_table(manifest: &SnapshotManifest) -> (BTreeMap<String, u64>, usize) {
    let mut rows = BTreeMap::new();
    let mut files = 0;
    for (table, listed) in &manifest.tables {
        for file in &listed.files {
            let key = if table == Table::Receipts.name() {
                file.path.rsplit_once('/').map_or(table.as_str(), |(folder, _)| folder)
            } else {
                table.as_str()
            };
            *rows.entry(key.to_string()).or_default() += file.rows;
            files += 1;
        }
    }
    (rows, files)
}
