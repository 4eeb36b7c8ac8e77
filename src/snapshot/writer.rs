//! Writing a snapshot: table parts first, `manifest.json` last and create-only.
//!
//! Both `gen` and `export` write through this module, which is what makes their
//! snapshots indistinguishable to `run`.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::record_batch::RecordBatch;

use super::chain::{self, Chain, CHAIN_FORMAT};
use super::{FileEntry, SnapshotManifest, Table, TableFiles, MANIFEST, SNAPSHOT_FORMAT};
use crate::error::{Error, Result};
use crate::storage::claim::{self, Claim};
use crate::storage::parquet_parts::{PartWriter, RowsOf};
use crate::storage::Location;
use crate::testing::{crash_point, Stage};
use crate::time::{format_instant, Micros};

/// A snapshot being written. Nothing is visible to readers until [`SnapshotWriter::finish`].
pub struct SnapshotWriter {
    location: Location,
    cut: Micros,
    created_by: String,
    coverage_from: Option<Micros>,
    files: BTreeMap<Table, Vec<FileEntry>>,
    chain: Option<Chain>,
    claim: Claim,
}

impl SnapshotWriter {
    /// Starts a snapshot at `location`; refuses a folder that already holds a complete one
    /// or that another live writer has claimed (crate::storage::claim), and clears the table files a
    /// failed or killed writer left there.
    pub async fn create(location: &Location, cut: Micros, created_by: &str) -> Result<Self> {
        let complete = || Error::Snapshot {
            location: location.to_string(),
            message:
                "already holds a complete snapshot (manifest.json exists); choose another folder"
                    .into(),
        };
        if location.exists(MANIFEST).await? {
            return Err(complete());
        }
        let claim = Claim::acquire(location, "snapshot writer").await?;
        if location.exists(MANIFEST).await? {
            claim.release().await?;
            return Err(complete());
        }
        crash_point(Stage::Claimed);
        let tables: Vec<&str> = Table::ALL.iter().map(|t| t.name()).collect();
        claim::clear_leftovers(location, &tables, &claim).await?;
        Ok(SnapshotWriter {
            claim,
            location: location.clone(),
            cut,
            created_by: created_by.to_string(),
            coverage_from: None,
            files: BTreeMap::new(),
            chain: None,
        })
    }

    /// Records the lower bound of the rows the snapshot holds (docs/CONTRACT.md `coverage_from`).
    pub fn set_coverage_from(&mut self, from: Micros) {
        self.coverage_from = Some(from);
    }

    /// The folder being written.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// The logical cut of the snapshot.
    pub fn cut(&self) -> Micros {
        self.cut
    }

    /// A writer for one table. Receipts need a `source` (`points`, `wms`, ...), which names
    /// their folder `receipts/<source>/`; for the other tables a `source` only prefixes the
    /// file names (`ledger/<source>-part-00000.parquet`) so several sources can share a table.
    pub fn table(&self, table: Table, source: Option<&str>) -> TableWriter {
        self.table_with_schema(table, source, table.schema())
    }

    /// [`SnapshotWriter::table`] for an incremental snapshot: the files also carry the
    /// source's key ([`chain::file_schema`]).
    pub fn keyed_table(&self, table: Table, source: Option<&str>) -> TableWriter {
        self.table_with_schema(table, source, chain::file_schema(table))
    }

    /// The writer of one source's keys file in this snapshot's folder.
    pub fn keys_writer(&self, table: Table, source: &str) -> PartWriter {
        let folder = match table {
            Table::Receipts => format!("receipts/{source}"),
            other => other.name().to_string(),
        };
        PartWriter::new(&self.location, &folder, chain::keys_schema())
            .with_file_stem(&format!("{source}-keys"))
    }

    /// The writer of one source's position deletes file in this snapshot's folder.
    pub fn deletes_writer(&self, table: Table, source: &str) -> PartWriter {
        let folder = match table {
            Table::Receipts => format!("receipts/{source}"),
            other => other.name().to_string(),
        };
        PartWriter::new(&self.location, &folder, super::deletes::schema())
            .with_file_stem(&format!("{source}-deleted"))
    }

    fn table_with_schema(
        &self,
        table: Table,
        source: Option<&str>,
        schema: datafusion::arrow::datatypes::SchemaRef,
    ) -> TableWriter {
        let parts = match (table, source) {
            (Table::Receipts, source) => PartWriter::new(
                &self.location,
                &format!("receipts/{}", source.unwrap_or("default")),
                schema,
            ),
            (other, None) => PartWriter::new(&self.location, other.name(), schema),
            (other, Some(source)) => {
                PartWriter::new(&self.location, other.name(), schema).with_file_stem(source)
            }
        };
        TableWriter { table, parts }
    }

    /// Makes this an incremental snapshot (format `@2`) with the chain block `chain`.
    pub fn set_chain(&mut self, chain: Chain) {
        self.chain = Some(chain);
    }

    /// Records the files a finished [`TableWriter`] wrote.
    pub fn add(&mut self, table: Table, files: Vec<FileEntry>) {
        self.files.entry(table).or_default().extend(files);
    }

    /// Writes `manifest.json` (create-only) and returns it; the snapshot is complete.
    pub async fn finish(self) -> Result<SnapshotManifest> {
        let mut tables = BTreeMap::new();
        for table in Table::ALL {
            let files = self.files.get(&table).cloned().unwrap_or_default();
            tables.insert(table.name().to_string(), TableFiles { files });
        }
        let format = if self.chain.is_some() { CHAIN_FORMAT } else { SNAPSHOT_FORMAT };
        let manifest = SnapshotManifest {
            format: format.to_string(),
            cut: format_instant(self.cut),
            coverage_from: self.coverage_from.map(format_instant),
            tables,
            created_by: Some(self.created_by.clone()),
            chain: self.chain.clone(),
        };
        let json = serde_json::to_vec_pretty(&manifest).map_err(|e| Error::Output {
            location: self.location.display(MANIFEST),
            message: e.to_string(),
            source: Some(Box::new(e)),
        })?;
        crash_point(Stage::SnapshotBeforeManifest);
        if !self.location.create(MANIFEST, Bytes::from(json)).await? {
            return Err(Error::Snapshot {
                location: self.location.to_string(),
                message:
                    "manifest.json appeared while writing; another writer is using this folder"
                        .into(),
            });
        }
        crash_point(Stage::SnapshotAfterManifest);
        // The snapshot is complete; a claim left behind is stale to every reader.
        let _ = self.claim.release().await;
        Ok(manifest)
    }
}

/// Streams batches of one table into Parquet parts with the contract schema.
pub struct TableWriter {
    table: Table,
    parts: PartWriter,
}

impl TableWriter {
    /// Smaller files (tests, chunked exports).
    pub fn with_rows_per_file(mut self, rows: usize) -> Self {
        self.parts = self.parts.with_rows_per_file(rows);
        self
    }

    /// Smaller row groups (tests of scans over many row groups).
    pub fn with_row_group_rows(mut self, rows: usize) -> Self {
        self.parts = self.parts.with_row_group_rows(rows);
        self
    }

    /// The table written.
    pub fn table(&self) -> Table {
        self.table
    }

    /// Appends a batch; its schema must be the contract's.
    pub async fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        if batch.schema().fields() != self.parts.schema().fields() {
            return Err(Error::Output {
                location: self.table.name().to_string(),
                message: format!("batch schema {:?} is not the contract schema", batch.schema()),
                source: None,
            });
        }
        self.parts.write(batch).await
    }

    /// Appends `rows` rows as whole row groups encoded on up to `threads` threads at once
    /// ([`crate::storage::parquet_parts::PartWriter::write_row_groups`]); every batch `rows_of` gives
    /// must have the contract schema.
    pub async fn write_row_groups(
        &mut self,
        rows: usize,
        threads: usize,
        rows_of: RowsOf,
        appended: &mut dyn FnMut(usize),
    ) -> Result<()> {
        let expected = self.parts.schema().fields().clone();
        let checked: RowsOf = Arc::new(move |range| {
            let batches = rows_of(range)?;
            match batches.iter().find(|b| b.schema().fields() != &expected) {
                Some(b) => Err(ArrowError::SchemaError(format!(
                    "batch schema {:?} is not the contract schema",
                    b.schema()
                ))),
                None => Ok(batches),
            }
        });
        self.parts.write_row_groups(rows, threads, checked, appended).await
    }

    /// Closes the last part and returns the files for the manifest.
    pub async fn finish(self) -> Result<Vec<FileEntry>> {
        self.parts.finish().await
    }
}
