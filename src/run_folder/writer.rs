//! The one writer of a run folder: table files first, `summary.json`, then
//! `manifest.json` last and create-only. A reader that finds no manifest must treat the
//! folder as absent, so a run that fails midway is never taken for a result.

use std::collections::BTreeMap;

use bytes::Bytes;
use datafusion::arrow::record_batch::RecordBatch;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{
    run_folder, OutputTable, RunIdentity, RunManifest, Summary, MANIFEST, RUN_FORMAT, SUMMARY,
};
use crate::error::{Error, Result};
use crate::snapshot::{FileEntry, TableFiles};
use crate::storage::claim::{self, Claim};
use crate::storage::parquet_parts::PartWriter;
use crate::storage::Location;
use crate::testing::{crash_point, Stage};

/// A run folder to write: one writer at a time per run id (crate::storage::claim).
pub(crate) struct RunPublisher {
    folder: Location,
    replace: bool,
}

impl RunPublisher {
    /// Checks `<out>/run=<id>/` before any work: refuses an existing complete run unless
    /// `replace`. The folder is claimed and cleared only when publishing.
    pub(crate) async fn prepare(out: &Location, run_id: &str, replace: bool) -> Result<Self> {
        let folder = out.join(&run_folder(run_id));
        if folder.exists(MANIFEST).await? && !replace {
            return Err(already_exists(&folder));
        }
        Ok(RunPublisher { folder, replace })
    }

    /// Where the run is written.
    pub(crate) fn folder(&self) -> &Location {
        &self.folder
    }

    /// Claims the folder (refusing a run another live process is writing, and a complete
    /// run that appeared meanwhile unless `replace`), clears the leftovers of a failed,
    /// killed or replaced run (its manifest first), writes the tables and summary, then the
    /// manifest (create-only); returns the manifest.
    pub(crate) async fn publish(
        self,
        identity: &RunIdentity,
        tables: &[(OutputTable, &RecordBatch)],
        summary: &Summary,
    ) -> Result<RunManifest> {
        let claim = Claim::acquire(&self.folder, "run").await?;
        if !self.replace && self.folder.exists(MANIFEST).await? {
            claim.release().await?;
            return Err(already_exists(&self.folder));
        }
        crash_point(Stage::Claimed);
        match self.write(identity, tables, summary, &claim).await {
            Ok(manifest) => {
                crash_point(Stage::RunAfterManifest);
                // The run is published; a claim left behind is stale to every reader.
                let _ = claim.release().await;
                Ok(manifest)
            }
            Err(e) => {
                // The partial files stay until the next writer clears them; no manifest
                // lists them.
                let _ = claim.release().await;
                Err(e)
            }
        }
    }

    async fn write(
        &self,
        identity: &RunIdentity,
        tables: &[(OutputTable, &RecordBatch)],
        summary: &Summary,
        claim: &Claim,
    ) -> Result<RunManifest> {
        claim::clear_leftovers(&self.folder, &[], claim).await?;
        let files = write_tables(&self.folder, tables).await?;
        let summary_json = to_json(summary, &self.folder.display(SUMMARY))?;
        crash_point(Stage::RunBeforeSummary);
        let summary_entry = FileEntry {
            path: SUMMARY.into(),
            rows: 0,
            sha256: hex::encode(Sha256::digest(&summary_json)),
        };
        self.folder.write(SUMMARY, Bytes::from(summary_json)).await?;
        let manifest = RunManifest {
            format: RUN_FORMAT.into(),
            run_id: identity.run_id.clone(),
            cut: identity.cut.clone(),
            since: identity.since.clone(),
            snapshot: identity.snapshot.clone(),
            rules_hash: identity.rules_hash.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            previous_run: identity.previous_run.clone(),
            origin: Some(identity.origin.clone()),
            intraday_run: identity.intraday_run.clone(),
            status: identity.status,
            reasons: identity.reasons.clone(),
            tables: files,
            summary: summary_entry,
        };
        let json = to_json(&manifest, &self.folder.display(MANIFEST))?;
        crash_point(Stage::RunBeforeManifest);
        if !self.folder.create(MANIFEST, Bytes::from(json)).await? {
            return Err(Error::Output {
                location: self.folder.display(MANIFEST),
                message: "another run with this id finished first; nothing was overwritten".into(),
                source: None,
            });
        }
        Ok(manifest)
    }
}

/// Writes every table into `folder`, each on a task of its own so that they encode on
/// all the runtime's threads at once. Returns once every task has stopped, so that no file
/// is still being written after a failure is reported.
async fn write_tables(
    folder: &Location,
    tables: &[(OutputTable, &RecordBatch)],
) -> Result<BTreeMap<String, TableFiles>> {
    let writes: Vec<_> = tables
        .iter()
        .map(|&(table, batch)| {
            let (folder, batch) = (folder.clone(), batch.clone());
            tokio::spawn(async move {
                let mut writer = PartWriter::new(&folder, table.name(), table.schema());
                writer.write(&batch).await?;
                Ok((table.name().to_string(), TableFiles { files: writer.finish().await? }))
            })
        })
        .collect();
    let mut files = BTreeMap::new();
    let mut first_error = None;
    for write in writes {
        let written = write.await.unwrap_or_else(|e| {
            Err(Error::Internal(format!("writing {}: a table writer stopped: {e}", folder)))
        });
        match written {
            Ok((name, table_files)) => {
                files.insert(name, table_files);
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(files),
    }
}

fn already_exists(folder: &Location) -> Error {
    let run_id = folder.to_string();
    let run_id = run_id.rsplit("run=").next().unwrap_or_default();
    Error::Output {
        location: folder.to_string(),
        message: format!("run '{run_id}' already exists; pass --replace to overwrite it (or, with `run`, --run-id to choose another id)"), source: None
    }
}

fn to_json<T: Serialize>(value: &T, location: &str) -> Result<Vec<u8>> {
    let mut json = serde_json::to_vec_pretty(value).map_err(|e| Error::Output {
        location: location.into(),
        message: e.to_string(),
        source: Some(Box::new(e)),
    })?;
    json.push(b'\n');
    Ok(json)
}
