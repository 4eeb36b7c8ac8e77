//! `effect-recon compact`: rewrites the chain head of a snapshot root into one base segment
//! (docs/CONTRACT.md "Incremental snapshots"), on object storage only, never touching a
//! database.
//!
//! The head is the latest complete `snapshot=<cut>` folder (a compaction of it included).
//! Its live rows, source by source, are written sorted by `order_id` into a new folder
//! `snapshot=<cut>.c<NNN>` beside it, as segment 0 with no keys files; its watermarks,
//! cut and `coverage_from` are the head's, so the next night follows the compacted
//! snapshot exactly as it would have followed the head. Before the manifest is written,
//! each source's rows are counted against the head's live rows. The writer is the
//! snapshot writer: create-only, manifest last, one writer per folder
//! (docs/RELIABILITY.md).

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::prelude::col;
use futures::TryStreamExt;

use crate::error::{Error, Result};
use crate::snapshot::chain::{self, describe_files, live_rows, sibling, Chain, KeysFile, Listed};
use crate::snapshot::{FileEntry, Snapshot, Table, MANIFEST};
use crate::storage::Location;

/// What `compact` did.
#[derive(Debug, Clone)]
pub struct CompactReport {
    /// The head it read.
    pub head: String,
    /// The folder it wrote (`None`: the head was already one base segment).
    pub written: Option<String>,
    /// Files of the head and of the compacted snapshot.
    pub files: (usize, usize),
    /// Live rows per source (equal in both).
    pub rows: BTreeMap<String, u64>,
}

/// The complete snapshot folders under `root`, in name order (a compaction sorts after
/// the snapshot it compacts).
pub async fn snapshot_folders(root: &Location) -> Result<Vec<String>> {
    let mut complete = Vec::new();
    for name in root.list_folders().await? {
        if name.starts_with("snapshot=") && root.join(&name).exists(MANIFEST).await? {
            complete.push(name);
        }
    }
    Ok(complete)
}

/// Compacts the chain head under `root`.
pub async fn compact(root: &Location) -> Result<CompactReport> {
    let folders = snapshot_folders(root).await?;
    let head = folders.last().cloned().ok_or_else(|| Error::Snapshot {
        location: root.to_string(),
        message: "no complete snapshot=<cut> folder to compact".into(),
    })?;
    let snapshot = Snapshot::open(&root.join(&head)).await?;
    let manifest = snapshot.manifest();
    let Some(old) = manifest.chain.clone() else {
        return Err(Error::Snapshot {
            location: root.display(&head),
            message: format!(
                "format {} is not an incremental chain; there is nothing to compact",
                manifest.format
            ),
        });
    };
    let files_before = old.files.len();
    if old.keys.is_empty() && old.files.keys().all(|p| !p.starts_with("../")) {
        return Ok(CompactReport {
            head,
            written: None,
            files: (files_before, files_before),
            rows: old.live_rows,
        });
    }
    let name = next_name(&head);
    let out = root.join(&name);
    let cut = snapshot.cut();
    let lower = snapshot.coverage_from()?.unwrap_or(i64::MIN);
    let mut writer = crate::snapshot::SnapshotWriter::create(&out, cut, "compact").await?;
    writer.set_coverage_from(lower);
    // The crate's one session builder: its memory pool and spilling, not DataFusion's defaults.
    let ctx = crate::engine::session::build(&crate::engine::session::SessionOptions::default())?;
    ctx.register_object_store(out.store_url(), Arc::clone(out.store()));
    let mut chain = Chain {
        seq: 0,
        mode: "compacted".into(),
        reason: None,
        previous: Some(head.clone()),
        files: BTreeMap::new(),
        keys: Vec::new(),
        // One segment: nothing is superseded.
        positions: true,
        deletes: Vec::new(),
        shadow: None,
        ..old.clone()
    };
    let mut by_table: BTreeMap<Table, Vec<FileEntry>> = BTreeMap::new();
    for label in old.sources.keys() {
        let (listed, keys, table) = source_files(&head, manifest, &old, label)?;
        let name = label.split_once('[').map_or(label.as_str(), |(_, r)| r.trim_end_matches(']'));
        let live = live_rows(&ctx, &out, table, &listed, &keys, (lower, cut), true)?
            .sort(vec![col("order_id").sort(true, false), col(chain::KEY_COLUMN).sort(true, false)])
            .map_err(|e| Error::query(format!("compacting {label}"), e))?;
        let mut parts = writer.keyed_table(table, Some(name));
        let schema = chain::file_schema(table);
        let mut stream = live
            .execute_stream()
            .await
            .map_err(|e| Error::query(format!("compacting {label}"), e))?;
        let mut rows = 0u64;
        while let Some(batch) =
            stream.try_next().await.map_err(|e| Error::query(format!("compacting {label}"), e))?
        {
            let batch = RecordBatch::try_new(Arc::clone(&schema), batch.columns().to_vec())
                .map_err(|e| Error::Internal(format!("compacting {label}: {e}")))?;
            rows += batch.num_rows() as u64;
            parts.write(&batch).await?;
        }
        let expected = old.live_rows.get(label).copied().unwrap_or(0);
        if rows != expected {
            return Err(Error::Snapshot {
                location: out.to_string(),
                message: format!(
                    "compacting {label}: {rows} rows written, but {head} holds {expected} live rows"
                ),
            });
        }
        let files = parts.finish().await?;
        for (path, entry, meta) in describe_files(&ctx, &out, &files, label, 0, table).await? {
            chain.files.insert(path, meta);
            by_table.entry(table).or_default().push(entry);
        }
    }
    let files_after = chain.files.len();
    for (table, files) in by_table {
        writer.add(table, files);
    }
    writer.set_chain(chain);
    writer.finish().await?;
    Ok(CompactReport {
        head,
        written: Some(name),
        files: (files_before, files_after),
        rows: old.live_rows,
    })
}

/// `snapshot=<cut>` → `snapshot=<cut>.c001`; `….c001` → `….c002`.
fn next_name(head: &str) -> String {
    match head.rsplit_once(".c") {
        Some((base, n)) if n.len() == 3 && n.bytes().all(|b| b.is_ascii_digit()) => {
            let n: u32 = n.parse().unwrap_or(0);
            format!("{base}.c{:03}", n + 1)
        }
        _ => format!("{head}.c001"),
    }
}

/// One source's files and keys of the head, as paths from a sibling folder.
fn source_files(
    head: &str,
    manifest: &crate::snapshot::SnapshotManifest,
    chain: &Chain,
    label: &str,
) -> Result<(Listed, Vec<KeysFile>, Table)> {
    let mut listed = Listed::new();
    let mut table = None;
    for (name, files) in &manifest.tables {
        for file in &files.files {
            let Some(meta) = chain.files.get(&file.path).filter(|m| m.source == label) else {
                continue;
            };
            table = Table::from_name(name);
            let path = sibling(head, &file.path);
            listed.push((path.clone(), FileEntry { path, ..file.clone() }, meta.clone()));
        }
    }
    let keys = chain
        .keys
        .iter()
        .filter(|k| k.source == label)
        .map(|k| KeysFile { path: sibling(head, &k.path), ..k.clone() })
        .collect();
    let table = table
        .or_else(|| label.split('[').next().and_then(Table::from_name))
        .ok_or_else(|| Error::Internal(format!("no table for {label}")))?;
    Ok((listed, keys, table))
}

#[cfg(test)]
mod tests {
    use super::next_name;

    #[test]
    fn compactions_are_numbered_after_their_snapshot() {
        assert_eq!(next_name("snapshot=20261129T160000Z"), "snapshot=20261129T160000Z.c001");
        assert_eq!(next_name("snapshot=20261129T160000Z.c001"), "snapshot=20261129T160000Z.c002");
        assert!("snapshot=20261129T160000Z" < "snapshot=20261129T160000Z.c001");
    }
}
