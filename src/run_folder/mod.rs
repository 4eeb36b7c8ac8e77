//! The run folder, the output contract of docs/OUTPUTS.md (format `effect-recon/run@1`),
//! mirroring [`crate::snapshot`]: its tables and their schemas ([`tables`]), the summary
//! ([`summary`]), the one writer ([`writer`]: files first, manifest last) and the one
//! reader ([`reader`]) every tool reads a finished run through.

pub mod reader;
pub mod summary;
pub mod tables;
pub(crate) mod writer;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::snapshot::MANIFEST;
use crate::snapshot::{FileEntry, TableFiles};
use crate::vocabulary::RunStatus;
pub use reader::{
    complete_runs, existing_run, read_run_manifest, read_run_summary, CompleteRun, RunOutputs,
};
pub use summary::Summary;
pub use tables::OutputTable;
pub(crate) use writer::RunPublisher;

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
    /// The intraday run whose open findings this night counted as open before
    /// (docs/WATCH.md); absent without a `watch` chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intraday_run: Option<String>,
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
    /// The intraday run whose open findings counted as open before.
    pub intraday_run: Option<String>,
    /// COMPLETE or INCOMPLETE.
    pub status: RunStatus,
    /// Why INCOMPLETE.
    pub reasons: Vec<String>,
}

/// The folder name of a run.
pub fn run_folder(run_id: &str) -> String {
    format!("run={run_id}")
}
