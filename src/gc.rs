//! `effect-recon gc`: deletes the snapshot files nothing needs any more, a dry run unless
//! told to apply.
//!
//! Retained snapshots: the chain head (the latest complete `snapshot=` folder, which the
//! next night follows) and every snapshot a retained run judged (the `keep_runs` latest
//! complete runs: `sql --run`, `explain` and `history` read them). A file is kept when a
//! retained snapshot's manifest lists it (as a data, keys or position deletes file, in its
//! own folder or, for a chain, in an earlier one), when it is younger than the grace
//! period, or when its folder has a writer's claim younger than it. Everything else
//! under `snapshot=` folders goes: manifests of snapshots no longer retained first (a
//! snapshot then stops being complete before any of its files disappear, so a crash
//! leaves nothing that looks whole), then their files, then leftovers of exports that
//! never finished (a shadow check's full export, a killed writer's parts). Run folders are
//! never touched.

use std::collections::BTreeSet;

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::ObjectStoreExt;

use crate::compact::snapshot_folders;
use crate::error::{Error, Result};
use crate::run_folder::reader::complete_runs;
use crate::snapshot::{Snapshot, MANIFEST};
use crate::storage::Location;
use crate::time::Micros;

/// A validated `gc` request.
#[derive(Debug, Clone)]
pub struct GcPlan {
    /// The root holding `snapshot=` and `run=` folders.
    pub root: Location,
    /// Snapshots judged by this many of the latest runs are retained.
    pub keep_runs: usize,
    /// Nothing younger than this is deleted (microseconds).
    pub grace: Micros,
    /// Delete (otherwise only say what would go).
    pub apply: bool,
}

/// What `gc` found (and deleted, when applied).
#[derive(Debug, Clone, Default)]
pub struct GcReport {
    /// The retained snapshot folders.
    pub retained: Vec<String>,
    /// The objects deleted (or to delete), relative to the root, manifests first.
    pub deleted: Vec<String>,
    /// Their bytes.
    pub bytes: u64,
    /// Objects kept only because they are younger than the grace period.
    pub young: usize,
    /// Whether the deletions were applied.
    pub applied: bool,
}

/// Collects (or lists) what nothing retained references.
pub async fn gc(plan: &GcPlan) -> Result<GcReport> {
    let root = &plan.root;
    let folders = snapshot_folders(root).await?;
    let mut retained: BTreeSet<String> = folders.last().cloned().into_iter().collect();
    let runs = complete_runs(root).await?;
    for run in runs.iter().rev().take(plan.keep_runs) {
        let judged = run.manifest.snapshot.trim_end_matches('/');
        if let Some(name) = judged.rsplit('/').next().filter(|n| n.starts_with("snapshot=")) {
            if folders.iter().any(|f| f == name) {
                retained.insert(name.to_string());
            }
        }
    }
    let mut referenced: BTreeSet<Path> = BTreeSet::new();
    for name in &retained {
        let location = root.join(name);
        let snapshot = Snapshot::open(&location).await?;
        let manifest = snapshot.manifest();
        referenced.insert(location.path(MANIFEST));
        for file in manifest.tables.values().flat_map(|t| &t.files) {
            referenced.insert(location.path(&file.path));
        }
        for keys in manifest.chain.iter().flat_map(|c| &c.keys) {
            referenced.insert(location.path(&keys.path));
        }
        for deletes in manifest.chain.iter().flat_map(|c| &c.deletes) {
            referenced.insert(location.path(&deletes.path));
        }
    }

    let now = crate::time::now_micros();
    let prefix = root.path("");
    let objects: Vec<object_store::ObjectMeta> = root
        .store()
        .list(Some(&prefix))
        .try_collect()
        .await
        .map_err(|e| Error::store(root.to_string(), e))?;
    let relative = |p: &Path| -> String {
        p.as_ref()
            .strip_prefix(prefix.as_ref())
            .unwrap_or(p.as_ref())
            .trim_start_matches('/')
            .to_string()
    };
    let age = |o: &object_store::ObjectMeta| now - o.last_modified.timestamp_micros();
    // Folders a writer is writing now: a claim younger than the grace period.
    let claimed: BTreeSet<String> = objects
        .iter()
        .filter(|o| {
            o.location.filename().is_some_and(|f| f.starts_with("_writing.")) && age(o) < plan.grace
        })
        .filter_map(|o| relative(&o.location).split('/').next().map(str::to_string))
        .collect();
    let mut manifests = Vec::new();
    let mut others = Vec::new();
    let mut report =
        GcReport { retained: retained.iter().cloned().collect(), ..GcReport::default() };
    for object in &objects {
        let path = relative(&object.location);
        let folder = path.split('/').next().unwrap_or("");
        if !folder.starts_with("snapshot=") || referenced.contains(&object.location) {
            continue;
        }
        if claimed.contains(folder) || age(object) < plan.grace {
            report.young += 1;
            continue;
        }
        report.bytes += object.size;
        if object.location.filename() == Some(MANIFEST) {
            manifests.push((path, object.location.clone()));
        } else {
            others.push((path, object.location.clone()));
        }
    }
    manifests.sort();
    others.sort();
    for (path, object) in manifests.into_iter().chain(others) {
        if plan.apply {
            match root.store().delete(&object).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(Error::store(root.display(&path), e)),
            }
        }
        report.deleted.push(path);
    }
    report.applied = plan.apply;
    Ok(report)
}
