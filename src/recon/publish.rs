//! Atomic publishing of a run: table files first, `summary.json`, then `manifest.json`
//! last and create-only. A reader that finds no manifest must treat the folder as
//! absent, so a run that fails midway is never taken for a result.

use std::collections::BTreeMap;

use bytes::Bytes;
use datafusion::arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::lifecycle::RunStatus;
use super::outputs::OutputTable;
use super::summary::Summary;
use crate::claim::{self, Claim};
use crate::error::{Error, Result};
use crate::faults::crash_point;
use crate::parquet_parts::PartWriter;
use crate::snapshot::{FileEntry, TableFiles, MANIFEST};
use crate::storage::Location;
use crate::time::{parse_instant, Micros};

/// Format tag of a run manifest.
pub const RUN_FORMAT: &str = "effect-recon/run@1";

/// File name of the summary.
pub const SUMMARY: &str = "summary.json";

/// `manifest.json` of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunManifest {
    /// Always [`RUN_FORMAT`].
    pub format: String,
    /// The run id (folder `run=<id>`).
    pub run_id: String,
    /// The cut, RFC 3339.
    pub cut: String,
    /// Window start (exclusive), RFC 3339.
    pub since: String,
    /// The snapshot judged.
    pub snapshot: String,
    /// SHA-256 of the canonical rules.
    pub rules_hash: String,
    /// effect-recon version that wrote it.
    pub version: String,
    /// The run this one follows (docs/SEMANTICS.md), if any.
    #[serde(default)]
    pub previous_run: Option<String>,
    /// Window start of the first run of the chain, RFC 3339 (absent in runs made before
    /// the lifecycle).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// COMPLETE, or INCOMPLETE when a self-check failed.
    #[serde(default)]
    pub status: RunStatus,
    /// Why the run is INCOMPLETE (empty when COMPLETE).
    #[serde(default)]
    pub reasons: Vec<String>,
    /// Output files per table.
    pub tables: BTreeMap<String, TableFiles>,
    /// The summary file.
    pub summary: FileEntry,
}

/// Identity of a run, recorded in its manifest.
#[derive(Debug, Clone)]
pub struct RunIdentity {
    /// The run id.
    pub run_id: String,
    /// The cut, RFC 3339.
    pub cut: String,
    /// Window start, RFC 3339.
    pub since: String,
    /// The snapshot judged.
    pub snapshot: String,
    /// SHA-256 of the canonical rules.
    pub rules_hash: String,
    /// The run this one follows.
    pub previous_run: Option<String>,
    /// The chain's origin, RFC 3339.
    pub origin: String,
    /// COMPLETE or INCOMPLETE.
    pub status: RunStatus,
    /// Why INCOMPLETE.
    pub reasons: Vec<String>,
}

/// The folder name of a run.
pub fn run_folder(run_id: &str) -> String {
    format!("run={run_id}")
}

/// A run folder to write: one writer at a time per run id (crate::claim).
pub struct RunPublisher {
    folder: Location,
    replace: bool,
}

impl RunPublisher {
    /// Checks `<out>/run=<id>/` before any work: refuses an existing complete run unless
    /// `replace`. The folder is claimed and cleared only when publishing.
    pub async fn prepare(out: &Location, run_id: &str, replace: bool) -> Result<Self> {
        let folder = out.join(&run_folder(run_id));
        if folder.exists(MANIFEST).await? && !replace {
            return Err(already_exists(&folder));
        }
        Ok(RunPublisher { folder, replace })
    }

    /// Where the run is written.
    pub fn folder(&self) -> &Location {
        &self.folder
    }

    /// Claims the folder (refusing a run another live process is writing, and a complete
    /// run that appeared meanwhile unless `replace`), clears the leftovers of a failed,
    /// killed or replaced run (its manifest first), writes the tables and summary, then the
    /// manifest (create-only); returns the manifest.
    pub async fn publish(
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
        crash_point("claimed");
        match self.write(identity, tables, summary, &claim).await {
            Ok(manifest) => {
                crash_point("run-after-manifest");
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
        let mut files = BTreeMap::new();
        for (table, batch) in tables {
            let mut writer = PartWriter::new(&self.folder, table.name(), table.schema());
            writer.write(batch).await?;
            files.insert(table.name().to_string(), TableFiles { files: writer.finish().await? });
        }
        let summary_json = to_json(summary, &self.folder.display(SUMMARY))?;
        crash_point("run-before-summary");
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
            status: identity.status,
            reasons: identity.reasons.clone(),
            tables: files,
            summary: summary_entry,
        };
        let json = to_json(&manifest, &self.folder.display(MANIFEST))?;
        crash_point("run-before-manifest");
        if !self.folder.create(MANIFEST, Bytes::from(json)).await? {
            return Err(Error::Output {
                location: self.folder.display(MANIFEST),
                message: "another run with this id finished first; nothing was overwritten".into(),
            });
        }
        Ok(manifest)
    }
}

fn already_exists(folder: &Location) -> Error {
    let run_id = folder.display("");
    let run_id = run_id.rsplit("run=").next().unwrap_or_default();
    Error::Output {
        location: folder.display(""),
        message: format!("run '{run_id}' already exists; pass --replace to overwrite it (or, with `run`, --run-id to choose another id)"),
    }
}

/// The manifest of the run in `folder`, or `None` when the folder holds no complete run.
pub async fn existing_run(folder: &Location) -> Result<Option<RunManifest>> {
    if !folder.exists(MANIFEST).await? {
        return Ok(None);
    }
    read_run_manifest(folder).await.map(Some)
}

/// Reads a run's manifest; a folder without one is not a (complete) run.
pub async fn read_run_manifest(folder: &Location) -> Result<RunManifest> {
    let bytes = folder.read_optional(MANIFEST).await?.ok_or_else(|| Error::Output {
        location: folder.display(""),
        message: "no manifest.json: not a run folder, or a run that did not finish".into(),
    })?;
    let manifest: RunManifest = serde_json::from_slice(&bytes).map_err(|e| Error::Output {
        location: folder.display(MANIFEST),
        message: format!("not a run manifest: {e}"),
    })?;
    if manifest.format != RUN_FORMAT {
        return Err(Error::Output {
            location: folder.display(MANIFEST),
            message: format!("format '{}', expected '{RUN_FORMAT}'", manifest.format),
        });
    }
    let listed = manifest.tables.values().flat_map(|t| &t.files).chain([&manifest.summary]);
    for file in listed {
        if !inside_folder(&file.path) {
            return Err(Error::Output {
                location: folder.display(MANIFEST),
                message: format!(
                    "lists '{}': a path must be relative to the run folder, without '.', '..', \
                     empty parts or a URL scheme",
                    file.path
                ),
            });
        }
    }
    Ok(manifest)
}

/// Whether a listed path stays inside the folder of its manifest.
fn inside_folder(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && !path.contains("://")
        && !path.contains('\\')
        && path.split('/').all(|part| !part.is_empty() && part != "." && part != "..")
}

fn to_json<T: Serialize>(value: &T, location: &str) -> Result<Vec<u8>> {
    let mut json = serde_json::to_vec_pretty(value)
        .map_err(|e| Error::Output { location: location.into(), message: e.to_string() })?;
    json.push(b'\n');
    Ok(json)
}

/// Reads a run's `summary.json` (every complete run has one).
pub async fn read_run_summary(folder: &Location) -> Result<Summary> {
    let fail = |message: String| Error::Output { location: folder.display(SUMMARY), message };
    let bytes = folder
        .read_optional(SUMMARY)
        .await?
        .ok_or_else(|| fail("a complete run without its summary".into()))?;
    serde_json::from_slice(&bytes).map_err(|e| fail(format!("not a run summary: {e}")))
}

/// A complete run found under an output root.
#[derive(Debug, Clone)]
pub struct CompleteRun {
    /// Its folder, `<out>/run=<id>`.
    pub folder: Location,
    /// Its manifest.
    pub manifest: RunManifest,
    /// Its cut.
    pub cut: Micros,
}

/// Every complete run under `out`, in cut order (ties: run id). Folders without a
/// readable manifest (runs that did not finish) are left out; a manifest whose cut is
/// not an instant is an error naming it.
pub async fn complete_runs(out: &Location) -> Result<Vec<CompleteRun>> {
    let mut runs = Vec::new();
    for name in out.list_folders().await? {
        if !name.starts_with("run=") {
            continue;
        }
        let folder = out.join(&name);
        let Ok(manifest) = read_run_manifest(&folder).await else { continue };
        let cut = parse_instant(&manifest.cut).map_err(|e| Error::Output {
            location: folder.display(MANIFEST),
            message: format!("cut: {e}"),
        })?;
        runs.push(CompleteRun { folder, manifest, cut });
    }
    runs.sort_by(|a, b| (a.cut, &a.manifest.run_id).cmp(&(b.cut, &b.manifest.run_id)));
    Ok(runs)
}
