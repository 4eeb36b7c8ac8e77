//! Writer claims: one writer at a time per run or snapshot folder, on any object store.
//!
//! Before writing a folder, a writer creates `_writing.<n>` with a create-only put
//! (`PutMode::Create`, a conditional put on S3), naming its process. A second writer finds
//! the claim and stops with a clear message instead of mixing its files with the first's
//! or deleting them. A claim whose process is gone (killed, crashed: same host and boot,
//! no such process any more, or one that a dropped writer of this very process left) is
//! stale: the next writer takes the folder over by creating `_writing.<n+1>`, again
//! create-only, so of two writers taking over at once exactly one wins. A claim of a live
//! process, or of another host, is honoured; its message names the object to delete when
//! that writer is known to be gone.
//!
//! Readers never look at claims: a folder is complete when its `manifest.json` exists, and
//! the manifest lists every file that belongs to it.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::ObjectStoreExt;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::storage::Location;

/// Prefix of the claim objects in a folder being written.
pub(crate) const CLAIM_PREFIX: &str = "_writing.";

/// Who holds a claim.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct Holder {
    /// What is being written (`run`, `snapshot`).
    what: String,
    host: String,
    boot_id: String,
    pid: u32,
    /// The process's start time (clock ticks after boot), to tell a reused pid apart.
    start_ticks: u64,
    /// Unique per claim.
    token: String,
}

/// Tokens of the claims this process holds right now (a claim of this process that is not
/// here was left by a writer that failed or was dropped).
fn held() -> &'static Mutex<HashSet<String>> {
    static HELD: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    HELD.get_or_init(|| Mutex::new(HashSet::new()))
}

/// A folder claimed for writing; dropping it without [`Claim::release`] leaves the claim
/// object, which this and other processes then see as stale.
#[derive(Debug)]
pub(crate) struct Claim {
    folder: Location,
    number: u64,
    token: String,
}

impl Claim {
    /// Claims `folder` for writing `what` (`run`, `snapshot`); refuses when a live writer
    /// holds it.
    pub(crate) async fn acquire(folder: &Location, what: &str) -> Result<Claim> {
        for _ in 0..8 {
            let existing = claims(folder).await?;
            let next = match existing.last() {
                None => 0,
                Some(&(number, _)) => {
                    let name = claim_name(number);
                    match folder.read_optional(&name).await? {
                        // Released between the listing and the read: look again.
                        None => continue,
                        Some(bytes) => {
                            let holder: Option<Holder> = serde_json::from_slice(&bytes).ok();
                            if let Some(holder) = holder.filter(|h| !is_stale(h)) {
                                return Err(busy(folder, &name, &holder));
                            }
                        }
                    }
                    number + 1
                }
            };
            let holder = me(what);
            let json = serde_json::to_vec(&holder).map_err(|e| Error::Internal(e.to_string()))?;
            held().lock().unwrap_or_else(|e| e.into_inner()).insert(holder.token.clone());
            if folder.create(&claim_name(next), Bytes::from(json)).await? {
                let claim = Claim { folder: folder.clone(), number: next, token: holder.token };
                // The stale claims below ours are history now.
                for &(number, _) in &existing {
                    claim.delete(number).await?;
                }
                return Ok(claim);
            }
            held().lock().unwrap_or_else(|e| e.into_inner()).remove(&holder.token);
        }
        Err(Error::Output {
            location: folder.to_string(),
            message: "could not claim the folder: other writers keep claiming it".into(),
            source: None,
        })
    }

    /// Removes the claim object (after the manifest is written, or after a failure).
    pub(crate) async fn release(self) -> Result<()> {
        // A staging file of this claim's own number still there now was left by a writer
        // killed while putting it, before this one claimed the number (a writer racing
        // this one had its put fail, and its staging file removed, long ago).
        if let Some(dir) = self.folder.local_dir() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if is_claim(&name) && is_leftover_staging(&name, self.number + 1) {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        self.delete(self.number).await
    }

    async fn delete(&self, number: u64) -> Result<()> {
        let path = self.folder.path(&claim_name(number));
        match self.folder.store().delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(Error::store(self.folder.display(&claim_name(number)), e)),
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        held().lock().unwrap_or_else(|e| e.into_inner()).remove(&self.token);
    }
}

fn claim_name(number: u64) -> String {
    format!("{CLAIM_PREFIX}{number:06}")
}

/// Whether `name` (a file name inside a folder) is a claim object.
pub(crate) fn is_claim(name: &str) -> bool {
    name.starts_with(CLAIM_PREFIX)
}

/// The claim number of a local staging file of a claim (`_writing.000003#1` -> 3).
fn staged_claim_number(name: &str) -> Option<u64> {
    let (claim, _suffix) = name.split_once('#')?;
    claim.strip_prefix(CLAIM_PREFIX)?.parse().ok()
}

/// The claims in `folder`, by number.
async fn claims(folder: &Location) -> Result<Vec<(u64, String)>> {
    let listing = match folder.store().list_with_delimiter(Some(&folder.path(""))).await {
        Ok(listing) => listing,
        Err(object_store::Error::NotFound { .. }) => return Ok(Vec::new()),
        Err(e) => return Err(Error::store(folder.to_string(), e)),
    };
    let mut found: Vec<(u64, String)> = listing
        .objects
        .iter()
        .filter_map(|o| {
            let name = o.location.filename()?;
            let number = name.strip_prefix(CLAIM_PREFIX)?.parse().ok()?;
            Some((number, name.to_string()))
        })
        .collect();
    found.sort();
    Ok(found)
}

fn busy(folder: &Location, name: &str, holder: &Holder) -> Error {
    Error::Output {
        location: folder.to_string(),
        message: format!(
            "another {} is writing this folder (process {} on host {}); nothing was written. \
             If that process is gone, delete {} and retry",
            holder.what,
            holder.pid,
            holder.host,
            folder.display(name)
        ),
        source: None,
    }
}

fn me(what: &str) -> Holder {
    static TOKENS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let pid = std::process::id();
    let count = TOKENS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    Holder {
        what: what.to_string(),
        host: host(),
        boot_id: boot_id(),
        pid,
        start_ticks: start_ticks(pid).unwrap_or(0),
        token: format!("{pid}-{nanos}-{count}"),
    }
}

/// A claim is stale when its process is provably gone: same host and boot, and no process
/// with its pid and start time; a claim of this process is stale unless a live [`Claim`]
/// holds it. Claims of other hosts (or unreadable ones on another host) are never stale.
fn is_stale(holder: &Holder) -> bool {
    if holder.host != host() {
        return false;
    }
    if holder.boot_id != boot_id() {
        return true;
    }
    if start_ticks(std::process::id()).is_none() {
        // No process table to ask (not Linux): only a claim of this process can be judged.
        return holder.pid == std::process::id()
            && !held().lock().unwrap_or_else(|e| e.into_inner()).contains(&holder.token);
    }
    if holder.pid == std::process::id() {
        return !held().lock().unwrap_or_else(|e| e.into_inner()).contains(&holder.token);
    }
    match start_ticks(holder.pid) {
        None => true,
        Some(ticks) => holder.start_ticks != 0 && ticks != holder.start_ticks,
    }
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::env::var("HOSTNAME"))
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|b| b.trim().to_string())
        .unwrap_or_default()
}

/// Field 22 of `/proc/<pid>/stat`; `None` when no such process exists (or, off Linux,
/// always: then only claims of this process can be found stale).
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let after = &stat[stat.rfind(')')? + 1..];
    // Fields 3.. follow; the start time is field 22, the 20th after the name.
    after.split_whitespace().nth(19)?.parse().ok()
}

fn roots_to_clear<'a>(subfolders: &[&'a str]) -> Vec<&'a str> {
    if subfolders.is_empty() {
        vec![""]
    } else {
        subfolders.to_vec()
    }
}

/// Whether `name` is a staging file of object_store's local puts (`name#n`) that a writer
/// which did not finish left. Staging files of claims numbered `claim_number` and above
/// are not: they belong to writers racing the claim's holder right now (their create-only
/// put fails once it finds the claim), and deleting one under them would turn their clear
/// "busy" into an I/O error.
fn is_leftover_staging(name: &str, claim_number: u64) -> bool {
    name.contains('#') && staged_claim_number(name).is_none_or(|n| n < claim_number)
}

/// Removes, under `dir`, the leftover staging files ([`is_leftover_staging`]).
fn remove_staging_files(dir: &std::path::Path, claim_number: u64) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            remove_staging_files(&path, claim_number);
        } else if is_leftover_staging(&entry.file_name().to_string_lossy(), claim_number) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Deletes the leftovers of a writer that did not finish, once the folder is claimed:
/// `manifest.json` first (so no reader sees a manifest over missing files), then every
/// object under `subfolders` (all of `folder` when empty) except claim objects.
pub(crate) async fn clear_leftovers(
    folder: &Location,
    subfolders: &[&str],
    claim: &Claim,
) -> Result<()> {
    let manifest = folder.path(crate::snapshot::MANIFEST);
    match folder.store().delete(&manifest).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => return Err(Error::store(folder.display(crate::snapshot::MANIFEST), e)),
    }
    let mut objects = Vec::new();
    let roots = roots_to_clear(subfolders);
    for root in roots {
        let found: Vec<_> = match folder.store().list(Some(&folder.path(root))).try_collect().await
        {
            Ok(found) => found,
            Err(object_store::Error::NotFound { .. }) => Vec::new(),
            Err(e) => return Err(Error::store(folder.display(root), e)),
        };
        objects.extend(found);
    }
    // A local put killed midway leaves its staging file (`<name>#<n>`), which listings
    // do not show: removed here so a rerun leaves exactly the files of its manifest.
    if let Some(dir) = folder.local_dir() {
        for root in &roots_to_clear(subfolders) {
            remove_staging_files(&dir.join(root), claim.number);
        }
        // The manifest's and the claims' own staging files, at the top.
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let ours = name.starts_with(crate::snapshot::MANIFEST) || is_claim(&name);
                if ours && is_leftover_staging(&name, claim.number) && entry.path().is_file() {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
    }
    for object in objects {
        if object.location.filename().is_some_and(is_claim) {
            continue;
        }
        match folder.store().delete(&object.location).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(Error::store(object.location.to_string(), e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<T>(future: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(future)
    }

    #[test]
    fn staging_names_give_their_claim_number() {
        assert_eq!(staged_claim_number("_writing.000003#1"), Some(3));
        assert_eq!(staged_claim_number("_writing.000003"), None);
        assert_eq!(staged_claim_number("manifest.json#2"), None);
    }

    #[test]
    fn clearing_keeps_the_staging_files_of_racing_claims_and_removes_older_ones() {
        // A run clears its whole folder, a snapshot its table folders and the top.
        clear_with_a_racing_claim(&[]);
        clear_with_a_racing_claim(&["ledger"]);
    }

    /// A writer killed inside the put of claim 0 leaves only its staging file; the rerun
    /// claims 0 itself (the staging file is no claim), keeps the file while a racer could
    /// own it, and removes it when it releases the claim: the folder holds no leftover.
    #[test]
    fn a_claim_put_killed_midway_leaves_nothing_once_the_rerun_releases() {
        let dir = tempfile::tempdir().unwrap();
        let folder = Location::parse(dir.path().to_str().unwrap()).unwrap();
        std::fs::write(dir.path().join("_writing.000000#1"), b"{\"what\":").unwrap();
        let claim = run(Claim::acquire(&folder, "snapshot writer")).unwrap();
        assert_eq!(claim.number, 0);
        run(clear_leftovers(&folder, &[], &claim)).unwrap();
        run(claim.release()).unwrap();
        let left: Vec<_> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(left.is_empty(), "{left:?}");
    }

    /// A writer racing us puts `_writing.<our number>#k` while we clear leftovers; deleting
    /// it failed its create-only put with an I/O error instead of a clear "busy"; a racing
    /// claim's staging files must survive the clearing.
    fn clear_with_a_racing_claim(subfolders: &[&str]) {
        let dir = tempfile::tempdir().unwrap();
        let folder = Location::parse(dir.path().to_str().unwrap()).unwrap();
        // A killed writer's claim 0 (another boot: stale) with its staging file.
        let dead = Holder { boot_id: "another boot".into(), ..me("snapshot writer") };
        std::fs::write(dir.path().join(claim_name(0)), serde_json::to_vec(&dead).unwrap()).unwrap();
        std::fs::write(dir.path().join("_writing.000000#1"), b"{}").unwrap();
        let claim = run(Claim::acquire(&folder, "snapshot writer")).unwrap();
        assert_eq!(claim.number, 1);
        // A racing writer's staging file of our number, and a killed manifest put's.
        std::fs::write(dir.path().join("_writing.000001#2"), b"{}").unwrap();
        std::fs::write(dir.path().join("manifest.json#3"), b"{}").unwrap();
        run(clear_leftovers(&folder, subfolders, &claim)).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["_writing.000001", "_writing.000001#2"], "{subfolders:?}");
        run(claim.release()).unwrap();
    }
}
