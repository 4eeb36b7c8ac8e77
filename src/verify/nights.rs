//! `verify --nights`: every night of a `gen --nights` root against its chained run.

use object_store::ObjectStore;

use super::{verify, VerifyPlan, VerifyReport};
use crate::error::{Error, Result};
use crate::storage::Location;
use crate::workload::truth::TRUTH_FILE;

/// The verification of one night of a `gen --nights` root.
#[derive(Debug, Clone)]
pub struct NightVerified {
    /// The id shared by `snapshot=<id>` and `run=<id>`.
    pub id: String,
    /// Its report; `Err` holds why the night could not be compared (no run, wrong run).
    pub report: std::result::Result<VerifyReport, String>,
}

/// Every night of a `gen --nights` root, in cut order.
#[derive(Debug, Clone, Default)]
pub struct NightsVerifyReport {
    /// Per night.
    pub nights: Vec<NightVerified>,
}

impl NightsVerifyReport {
    /// Whether every night's run equals its truth.
    pub fn is_exact(&self) -> bool {
        !self.nights.is_empty()
            && self.nights.iter().all(|n| n.report.as_ref().is_ok_and(VerifyReport::is_exact))
    }

    /// One section per night, then a line per night.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for night in &self.nights {
            out.push_str(&format!("night {}\n", night.id));
            match &night.report {
                Ok(report) => out.push_str(&report.render()),
                Err(message) => out.push_str(&format!("  cannot compare: {message}\n")),
            }
        }
        out.push_str("nights:\n");
        for night in &self.nights {
            let status = match &night.report {
                Ok(r) if r.is_exact() => "exact".to_string(),
                Ok(r) => format!("{} mismatches", r.mismatch_count),
                Err(_) => "not compared".to_string(),
            };
            out.push_str(&format!("  {} {status}\n", night.id));
        }
        if self.nights.is_empty() {
            out.push_str("  no snapshot=<id> folder found\n");
        }
        out
    }
}

/// Verifies each `snapshot=<id>` under `root` (in id order, which is cut order) against
/// `run=<id>` under `runs`.
pub async fn verify_nights(root: &Location, runs: &Location) -> Result<NightsVerifyReport> {
    let mut report = NightsVerifyReport::default();
    for id in snapshot_ids(root).await? {
        let plan = VerifyPlan {
            truth_folder: root.join(&format!("snapshot={id}")),
            truth_file: TRUTH_FILE.to_string(),
            run: runs.join(&format!("run={id}")),
        };
        let verified = verify(&plan).await.map_err(|e| e.to_string());
        report.nights.push(NightVerified { id, report: verified });
    }
    Ok(report)
}

/// The ids of the `snapshot=<id>` folders directly under `root`, sorted.
async fn snapshot_ids(root: &Location) -> Result<Vec<String>> {
    let prefix = root.path("");
    let listing = root
        .store()
        .list_with_delimiter(Some(&prefix))
        .await
        .map_err(|e| Error::store(root.to_string(), e))?;
    let mut ids: Vec<String> = listing
        .common_prefixes
        .iter()
        .filter_map(|p| p.filename().and_then(|name| name.strip_prefix("snapshot=")))
        .map(str::to_string)
        .collect();
    ids.sort();
    Ok(ids)
}
