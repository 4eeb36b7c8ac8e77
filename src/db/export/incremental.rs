//! Incremental nights (docs/CONTRACT.md "Incremental snapshots"): whether tonight may
//! follow the previous snapshot under the same root, the watermark, and everything that
//! turns the segment a night read into a complete `@2` manifest.
//!
//! * [`decide`]: the previous snapshot (the latest complete `snapshot=<cut>` before this
//!   cut) must be an `@2` export of the same sources (key, change column, query, URL,
//!   timezone), with a watermark per source, a `coverage_from` no later than tonight's,
//!   and every file it lists present with its size and SHA-256. Anything else is a full
//!   export, and the reason is one line (in the output and in the manifest).
//! * The watermark ([`Probe`]): the database's time and the start of its oldest open
//!   transaction, read just before the export's read transactions start, minus the margin.
//!   Every row the export's snapshot cannot see was written by a transaction open at the
//!   probe or started after it, so the next night's `changed >= watermark` reads it.
//! * [`finish`]: per source, the keys that supersede an earlier version, the files the
//!   lookback still needs, the live row count, checked against the previous night's, and
//!   for a shadow check, the first difference from the full export read in the same
//!   transactions.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, RecordBatch, StringArray};
use datafusion::prelude::{col, SessionContext};
use object_store::ObjectStoreExt;
use sha2::{Digest, Sha256};

use super::supersede::{self, ChainFile, Role, Windows};
use crate::config::job::{JobConfig, SourceConfig};
use crate::error::{Error, Result};
use crate::snapshot::chain::{
    self, collect, count, describe_files, files_frame, list_files, live_rows, sibling, Chain,
    KeysFile, Listed, Shadow, SourceMark, KEY_COLUMN,
};
use crate::snapshot::deletes::{self, DeletesFile};
use crate::snapshot::{FileEntry, Snapshot, SnapshotManifest, SnapshotWriter, Table, MANIFEST};
use crate::storage::parquet_parts::PartWriter;
use crate::storage::Location;
use crate::time::{format_compact, format_instant, parse_instant, Micros, SECOND_MICROS};

/// How an export chooses between a full and an incremental read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExportMode {
    /// Incremental when the previous snapshot allows it, with the shadow check every
    /// `verify_full_every` nights of a chain.
    #[default]
    Auto,
    /// Always a full export (`--full`).
    Full,
    /// Incremental when allowed, and a full export read beside it and compared
    /// (`nightly --verify-full`): the chain rebases on the full export.
    VerifyFull,
}

/// The snapshot tonight follows.
#[derive(Debug, Clone)]
pub(super) struct Previous {
    /// Its folder name under the root (`snapshot=<cut>`).
    pub folder: String,
    /// Its location.
    pub location: Location,
    /// Its manifest and chain.
    pub manifest: SnapshotManifest,
    pub chain: Chain,
    /// Its cut.
    pub cut: Micros,
}

/// What tonight reads.
#[derive(Debug, Clone)]
pub(super) enum Night {
    /// Every row of the lookback, for `reason`.
    Full { reason: String },
    /// The window since the previous cut plus what changed since its watermarks.
    Incremental { previous: Box<Previous>, seq: u32 },
}

impl Night {
    /// The previous night's watermark of `source` (incremental nights only).
    pub(super) fn since(&self, source: &SourceConfig) -> Option<Micros> {
        let Night::Incremental { previous, .. } = self else { return None };
        let mark = previous.chain.sources.get(&source.label())?;
        mark.watermark.as_deref().and_then(|w| parse_instant(w).ok())
    }
}

/// The watermark probe of one database.
#[derive(Debug, Clone, Default)]
pub(super) struct Probe {
    /// The database's time (UTC µs).
    pub now: Option<Micros>,
    /// The oldest open transaction's start (UTC µs).
    pub oldest: Option<Micros>,
    /// What the probe could not see, or why it failed.
    pub note: Option<String>,
}

impl Probe {
    /// `min(now, oldest) - margin`, when the probe read the time.
    pub(super) fn watermark(&self, margin: Micros) -> Option<Micros> {
        let now = self.now?;
        if naive_watermark() {
            return Some(now);
        }
        Some(self.oldest.map_or(now, |o| o.min(now)) - margin)
    }
}

/// Test-only: `EFFECT_RECON_TEST_WATERMARK=naive` drops the open-transaction term and the
/// margin, so the reliability suite can show that the chain then misses rows.
pub(super) fn naive_watermark() -> bool {
    std::env::var("EFFECT_RECON_TEST_WATERMARK").is_ok_and(|v| v == "naive")
}

/// A source's identity across nights: its table, URL, timezone and query.
pub(super) fn identity(source: &SourceConfig) -> String {
    let text = format!(
        "{}\n{}\n{}\n{}",
        source.table.name(),
        source.url,
        source.utc_offset_secs,
        source.query
    );
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// The snapshot before tonight's, as [`before`] finds it beside the output folder.
pub(super) enum Before {
    /// The output folder has no parent folder to look in.
    NoParentFolder,
    /// No complete snapshot with an earlier cut.
    FirstNight,
    /// The newest-named candidate cannot be read.
    Unreadable(Error),
    /// The latest complete snapshot with an earlier cut.
    Found(Box<Previous>),
}

/// The snapshot before the one at `out` with cut `cut`, read once per export: it says
/// whether tonight can follow it ([`decide`]) and which tables are large.
pub(super) async fn before(out: &Location, cut: Micros) -> Result<Before> {
    let Some(root) = out.parent() else { return Ok(Before::NoParentFolder) };
    Ok(match latest_before(&root, out, cut).await? {
        None => Before::FirstNight,
        Some(Err(e)) => Before::Unreadable(e),
        Some(Ok(previous)) => Before::Found(Box::new(previous)),
    })
}

/// Whether tonight can follow `before`, the snapshot before tonight's.
pub(super) async fn decide(
    job: &JobConfig,
    before: Result<Before>,
    lower: Micros,
    mode: ExportMode,
) -> Result<Night> {
    let full = |reason: String| Ok(Night::Full { reason });
    if mode == ExportMode::Full {
        return full("--full".into());
    }
    let previous = match before? {
        Before::NoParentFolder => {
            return full(
                "the snapshot folder has no parent folder to find a previous night in".into(),
            )
        }
        Before::FirstNight => {
            return full("first night: no earlier complete snapshot=<cut> beside this one".into())
        }
        Before::Unreadable(e) => return full(format!("the previous snapshot cannot be read: {e}")),
        Before::Found(previous) => *previous,
    };
    let name = &previous.folder;
    let Some(chain) = previous.manifest.chain.clone() else {
        return full(format!(
            "the previous snapshot {name} is not incremental (format {}, written by {})",
            previous.manifest.format,
            previous.manifest.created_by.as_deref().unwrap_or("?")
        ));
    };
    for source in &job.sources {
        let label = source.label();
        let Some(mark) = chain.sources.get(&label) else {
            return full(format!("{label} is new since the previous snapshot {name}"));
        };
        let (key, changed) = source.change_columns().unwrap_or_default();
        if mark.key != key {
            return full(format!("the key of {label} changed ({} → {key})", mark.key));
        }
        if mark.changed_column != changed {
            return full(format!(
                "the change column of {label} changed ({} → {changed})",
                mark.changed_column
            ));
        }
        if mark.identity != identity(source) {
            return full(format!(
                "the query, URL or timezone of {label} changed since the previous snapshot {name}"
            ));
        }
        if mark.watermark.is_none() {
            let why = mark.probe_note.as_deref().unwrap_or("no watermark recorded");
            return full(format!(
                "the previous snapshot {name} has no watermark for {label}: {why}"
            ));
        }
    }
    if !chain.positions {
        return full(format!(
            "the previous snapshot {name} names superseded rows by key only (an earlier effect-recon wrote it); a full export starts a chain that names them by position"
        ));
    }
    if chain.sources.len() != job.sources.len() {
        return full(format!("a source of the previous snapshot {name} is gone from the job"));
    }
    let previous_lower = parse_instant(previous.manifest.coverage_from.as_deref().unwrap_or(""))
        .unwrap_or(Micros::MAX);
    if lower < previous_lower {
        return full(format!(
            "the lookback reaches back further than the previous snapshot {name} holds ({} < {})",
            format_instant(lower),
            format_instant(previous_lower)
        ));
    }
    let seq = chain.seq + 1;
    let every = job.incremental.verify_full_every;
    let shadow_night = mode == ExportMode::VerifyFull || (every > 0 && seq % every == 0);
    if let Some(problem) = check_files(&previous, &chain, shadow_night).await? {
        return full(format!("the previous snapshot {name}: {problem}"));
    }
    Ok(Night::Incremental { previous: Box::new(Previous { chain, ..previous }), seq })
}

/// The complete `snapshot=` folder beside `out` with the latest cut before `cut` (ties:
/// the later name, so a compaction wins over the snapshot it compacts); `Some(Err)` when
/// the newest-named candidate cannot be read.
async fn latest_before(
    root: &Location,
    out: &Location,
    cut: Micros,
) -> Result<Option<std::result::Result<Previous, Error>>> {
    let own = format!("snapshot={}", format_compact(cut));
    let out_name = out.to_string().rsplit('/').next().unwrap_or("").to_string();
    let mut folders: Vec<String> = root
        .list_folders()
        .await?
        .into_iter()
        .filter(|f| f.starts_with("snapshot=") && *f != own && *f != out_name)
        .collect();
    // Names sort as their cuts do (`snapshot=<YYYYMMDDTHHMMSSZ>`, a compaction's `.cNNN`
    // after it): the first complete one from the end with an earlier cut is the latest.
    // Reading only until then keeps a root of many snapshots (a day of `watch` cycles)
    // from costing a manifest read per folder per export.
    folders.sort();
    let mut unreadable = None;
    for folder in folders.into_iter().rev() {
        let location = root.join(&folder);
        if !location.exists(MANIFEST).await? {
            continue;
        }
        let snapshot = match Snapshot::open(&location).await {
            Ok(snapshot) => snapshot,
            Err(e) => {
                unreadable.get_or_insert(e);
                continue;
            }
        };
        if snapshot.cut() >= cut {
            continue;
        }
        let manifest = snapshot.manifest().clone();
        let chain = manifest.chain.clone().unwrap_or_else(empty_chain);
        let cut = snapshot.cut();
        return Ok(Some(Ok(Previous { folder, location, manifest, chain, cut })));
    }
    Ok(unreadable.map(Err))
}

fn empty_chain() -> Chain {
    Chain {
        seq: 0,
        mode: String::new(),
        reason: None,
        previous: None,
        sources: BTreeMap::new(),
        files: BTreeMap::new(),
        keys: Vec::new(),
        positions: false,
        deletes: Vec::new(),
        live_rows: BTreeMap::new(),
        shadow: None,
    }
}

/// Every file the previous manifest lists, present with its size; `Some` names the first
/// that is not. The SHA-256 is checked for the files the previous night wrote (reused for
/// the first time tonight), and for every file on a shadow-check night: hashing the whole
/// lookback every night would read it all again, the cost incremental nights remove.
async fn check_files(
    previous: &Previous,
    chain: &Chain,
    every_hash: bool,
) -> Result<Option<String>> {
    let listed = previous.manifest.tables.values().flat_map(|t| &t.files);
    let mut files: Vec<(&str, &str, u64)> = Vec::new();
    for file in listed {
        let Some(meta) = chain.files.get(&file.path) else {
            return Ok(Some(format!("{} is not in its chain's files", file.path)));
        };
        files.push((&file.path, &file.sha256, meta.bytes));
    }
    files.extend(chain.keys.iter().map(|k| (k.path.as_str(), k.sha256.as_str(), k.bytes)));
    files.extend(chain.deletes.iter().map(|d| (d.path.as_str(), d.sha256.as_str(), d.bytes)));
    let store = previous.location.store();
    for (path, sha256, bytes) in files {
        let object = previous.location.path(path);
        let shown = || previous.location.display(path);
        let hash = every_hash || !path.starts_with("../");
        let size = if hash {
            match store.get(&object).await {
                Ok(got) => {
                    let body = got.bytes().await.map_err(|e| Error::store(shown(), e))?;
                    if hex::encode(Sha256::digest(&body)) != sha256 && body.len() as u64 == bytes {
                        return Ok(Some(format!(
                            "file {path} does not match its SHA-256 in the manifest"
                        )));
                    }
                    body.len() as u64
                }
                Err(object_store::Error::NotFound { .. }) => {
                    return Ok(Some(format!("file {path} is listed but absent")))
                }
                Err(e) => return Err(Error::store(shown(), e)),
            }
        } else {
            match store.head(&object).await {
                Ok(meta) => meta.size,
                Err(object_store::Error::NotFound { .. }) => {
                    return Ok(Some(format!("file {path} is listed but absent")))
                }
                Err(e) => return Err(Error::store(shown(), e)),
            }
        };
        if size != bytes {
            return Ok(Some(format!("file {path} has {size} bytes, the manifest says {bytes}")));
        }
    }
    Ok(None)
}

/// What one source's read produced tonight.
pub(super) struct SourceRead<'a> {
    /// The source.
    pub source: &'a SourceConfig,
    /// The files of tonight's segment.
    pub files: Vec<FileEntry>,
    /// The files of the full export read beside it (a shadow check).
    pub shadow: Option<Vec<FileEntry>>,
    /// Rows read from the database (tonight's segment).
    pub rows_read: u64,
    /// Its database's probe.
    pub probe: Probe,
}

/// Everything [`finish`] needs besides the reads.
pub(super) struct Tonight<'a> {
    pub job: &'a JobConfig,
    pub night: &'a Night,
    pub shadow: bool,
    pub lower: Micros,
    pub cut: Micros,
}

/// Completes the `@2` manifest of tonight's segment in `writer`; returns the line that
/// says what the night was.
pub(super) async fn finish(
    writer: &mut SnapshotWriter,
    tonight: Tonight<'_>,
    reads: Vec<SourceRead<'_>>,
) -> Result<String> {
    let Tonight { job, night, shadow, lower, cut } = tonight;
    let location = writer.location().clone();
    // The crate's one session builder: its memory pool and spilling, not DataFusion's defaults.
    let ctx = crate::engine::session::build(&crate::engine::session::SessionOptions::default())?;
    ctx.register_object_store(location.store_url(), Arc::clone(location.store()));
    let margin = job.incremental.margin;

    let (seq, previous) = match night {
        Night::Full { .. } => (0, None),
        Night::Incremental { previous, seq } => (*seq, Some(previous.as_ref())),
    };
    let mut chain = Chain {
        seq,
        mode: if previous.is_some() { "incremental" } else { "full" }.into(),
        reason: match night {
            Night::Full { reason } => Some(reason.clone()),
            Night::Incremental { .. } => None,
        },
        previous: previous.map(|p| p.folder.clone()),
        ..empty_chain()
    };
    let mut tables: BTreeMap<Table, Vec<FileEntry>> = BTreeMap::new();
    // Per source: the incremental candidate, and the shadow's full one.
    let mut candidates: Vec<Candidate> = Vec::new();
    let mut shadows: Vec<(String, Table, Listed)> = Vec::new();
    let mut total_read = 0;
    for read in &reads {
        let source = read.source;
        let label = source.label();
        let table = source.table;
        let (key, changed) = source.change_columns().unwrap_or_default();
        total_read += read.rows_read;
        // A night that follows finds its files' latest event times and repeated keys in
        // its one pass over the chain.
        let own = match previous {
            None => {
                let own = describe_files(&ctx, &location, &read.files, &label, seq, table).await?;
                check_unique_keys(&ctx, &location, &own, source).await?;
                own
            }
            Some(_) => list_files(&location, &read.files, &label, seq).await?,
        };
        // Every row the database returned is in a listed file (a dropped file fails here).
        let listed_rows: u64 = own.iter().map(|(_, e, _)| e.rows).sum();
        if listed_rows != read.rows_read {
            return Err(Error::Snapshot {
                location: location.to_string(),
                message: format!(
                    "continuity check failed for {label}: the database returned {} rows, tonight's files hold {listed_rows}",
                    read.rows_read
                ),
            });
        }
        let candidate = match previous {
            None => {
                let window = (lower, cut);
                let live =
                    count(live_rows(&ctx, &location, table, &own, &[], window, false)?).await?;
                Candidate {
                    label: label.clone(),
                    table,
                    listed: own,
                    keys: Vec::new(),
                    deletes: None,
                    live,
                }
            }
            Some(previous) => {
                let window = (seq, lower, cut);
                follow(&ctx, writer, previous, source, own, window).await?
            }
        };
        candidates.push(candidate);
        if let Some(files) = &read.shadow {
            let full = describe_files(&ctx, &location, files, &label, 0, table).await?;
            check_unique_keys(&ctx, &location, &full, source).await?;
            shadows.push((label.clone(), table, full));
        }
        let watermark = read.probe.watermark(margin);
        chain.sources.insert(
            label.clone(),
            SourceMark {
                key: key.to_string(),
                changed_column: changed.to_string(),
                identity: identity(source),
                probe_time: read.probe.now.map(format_instant),
                oldest_open_transaction: read.probe.oldest.map(format_instant),
                margin_secs: (margin / SECOND_MICROS) as u64,
                watermark: watermark.map(format_instant),
                probe_note: read.probe.note.clone(),
                read_changes_since: night.since(source).map(format_instant),
                rows_read: read.rows_read,
            },
        );
    }
    for candidate in &candidates {
        chain.live_rows.insert(candidate.label.clone(), candidate.live);
    }

    let line;
    if shadow {
        let difference =
            first_difference(&ctx, &location, &candidates, &shadows, (lower, cut)).await?;
        chain.shadow = Some(Shadow {
            result: if difference.is_some() { "differs" } else { "equal" }.into(),
            first_difference: difference.clone(),
            incremental_rows: chain.live_rows.clone(),
        });
        // The chain rebases on the full export either way: tonight's manifest lists it.
        chain.seq = 0;
        chain.mode = "full".into();
        chain.previous = previous.map(|p| p.folder.clone());
        candidates.clear();
        chain.live_rows.clear();
        for (label, table, listed) in shadows {
            let live = count(live_rows(&ctx, &location, table, &listed, &[], (lower, cut), false)?)
                .await?;
            chain.live_rows.insert(label.clone(), live);
            let (keys, deletes) = (Vec::new(), None);
            candidates.push(Candidate { label, table, listed, keys, deletes, live });
        }
        line = match difference {
            None => "export: shadow check: the incremental chain equals a full export of the same state; the chain rebases on the full export".to_string(),
            Some(d) => format!("export: shadow check FAILED: the incremental chain differs from the full export ({d}); the snapshot is the full export and the run will be INCOMPLETE"),
        };
    } else {
        line = match night {
            Night::Full { reason } => format!("export: full export ({reason})"),
            Night::Incremental { previous, seq } => format!(
                "export: incremental, segment {seq} on {}: {total_read} rows read from the databases",
                previous.folder
            ),
        };
    }
    for Candidate { table, listed, keys, deletes, .. } in candidates {
        for (path, entry, meta) in listed {
            chain.files.insert(path.clone(), meta);
            tables.entry(table).or_default().push(FileEntry { path, ..entry });
        }
        chain.keys.extend(keys);
        chain.deletes.extend(deletes);
    }
    chain.positions = true;
    for (table, files) in tables {
        writer.add(table, files);
    }
    writer.set_chain(chain);
    Ok(line)
}

/// One source of tonight's candidate manifest.
struct Candidate {
    label: String,
    table: Table,
    /// Carried and tonight's files.
    listed: Listed,
    /// The keys files tonight's manifest lists (tonight's own included).
    keys: Vec<KeysFile>,
    /// Tonight's position deletes file (none when nothing listed is superseded).
    deletes: Option<DeletesFile>,
    /// Live rows.
    live: u64,
}

/// The candidate of a source that follows `previous`: its carried files, the keys and
/// positions tonight supersedes, and its live rows from one pass over every file of both
/// nights ([`supersede::pass`]), checked before the manifest against last night's: the
/// rows live under last night's manifest must be exactly the live rows it recorded. A
/// file lost between the nights, or deletes that lose or revive a version, break it.
async fn follow(
    ctx: &SessionContext,
    writer: &SnapshotWriter,
    previous: &Previous,
    source: &SourceConfig,
    own: Listed,
    (seq, lower, cut): (u32, Micros, Micros),
) -> Result<Candidate> {
    let location = writer.location();
    let (label, table) = (source.label(), source.table);
    let (carried, dropped) = carried_files(previous, &label, lower);
    let previous_deletes: Vec<&DeletesFile> =
        previous.chain.deletes.iter().filter(|d| d.source == label).collect();
    let mut before =
        deletes::read(&previous.location, &previous_deletes, |p| sibling(&previous.folder, p))
            .await?;
    let mut files = Vec::new();
    for (listed, role) in
        [(&own, Role::Tonight), (&carried, Role::Carried), (&dropped, Role::Dropped)]
    {
        for (path, _, meta) in listed {
            let deleted_before = before.remove(path).unwrap_or_default();
            files.push(ChainFile { path: path.clone(), bytes: meta.bytes, role, deleted_before });
        }
    }
    let previous_lower = parse_instant(previous.manifest.coverage_from.as_deref().unwrap_or(""))
        .unwrap_or(Micros::MIN);
    let windows = Windows { previous: (previous_lower, previous.cut), tonight: (lower, cut) };
    let concurrency = std::thread::available_parallelism().map_or(1, |n| n.get());
    let found = supersede::pass(location, table, files, windows, concurrency).await?;
    if found.repeated_key {
        // The check names the key and its copies.
        check_unique_keys(ctx, location, &own, source).await?;
        return Err(Error::Internal(format!("{label}: a repeated key was not found again")));
    }
    let mut own = own;
    for (path, _, meta) in &mut own {
        meta.max_event = found.latest.get(path).copied().map(format_instant);
    }
    if let Some(&recorded) = previous.chain.live_rows.get(&label) {
        if found.was_live != recorded {
            return Err(Error::Snapshot {
                location: location.to_string(),
                message: format!(
                    "continuity check failed for {label}: {} recorded {recorded} live rows, its files now hold {}",
                    previous.folder, found.was_live
                ),
            });
        }
    }
    let mut keys = Vec::new();
    if !found.superseding.is_empty() {
        let batch = RecordBatch::try_new(
            chain::keys_schema(),
            vec![Arc::new(StringArray::from(found.superseding))],
        )
        .map_err(|e| Error::Internal(format!("keys: {e}")))?;
        keys.push(write_keys(writer, source, seq, &batch).await?);
    }
    // A keys file is needed while an earlier segment it supersedes is listed.
    let oldest = carried.iter().map(|(_, _, m)| m.seq).min().unwrap_or(seq);
    for k in previous.chain.keys.iter().filter(|k| k.source == label && k.seq > oldest) {
        keys.push(KeysFile { path: sibling(&previous.folder, &k.path), ..k.clone() });
    }
    let deletes = match found.deleted.is_empty() {
        true => None,
        false => Some(write_deletes(writer, source, &found.deleted).await?),
    };
    let mut listed = carried;
    listed.extend(own);
    Ok(Candidate { label, table, listed, keys, deletes, live: found.live })
}

/// The previous night's files of `label`: those the lookback still needs, and those it
/// no longer does (every row at or before `lower`), as tonight's manifest names them.
fn carried_files(previous: &Previous, label: &str, lower: Micros) -> (Listed, Listed) {
    let (mut carried, mut dropped) = (Listed::new(), Listed::new());
    for file in previous.manifest.tables.values().flat_map(|t| &t.files) {
        let Some(meta) = previous.chain.files.get(&file.path) else { continue };
        if meta.source != label {
            continue;
        }
        let latest = meta.max_event.as_deref().and_then(|m| parse_instant(m).ok());
        let path = sibling(&previous.folder, &file.path);
        let entry = (path.clone(), FileEntry { path, ..file.clone() }, meta.clone());
        if latest.is_some_and(|m| m > lower) {
            carried.push(entry);
        } else {
            dropped.push(entry);
        }
    }
    (carried, dropped)
}

/// Tonight's rows of a source hold each key once; a repeated key is bad input.
async fn check_unique_keys(
    ctx: &SessionContext,
    location: &Location,
    own: &Listed,
    source: &SourceConfig,
) -> Result<()> {
    if own.is_empty() {
        return Ok(());
    }
    let paths: Vec<String> = own.iter().map(|(p, _, _)| p.clone()).collect();
    let frame = files_frame(ctx, location, &paths, chain::file_schema(source.table))?;
    let context = |e| Error::query("checking that keys are unique", e);
    let n = datafusion::functions_aggregate::expr_fn::count(col(KEY_COLUMN)).alias("n");
    let repeated = frame
        .aggregate(vec![col(KEY_COLUMN)], vec![n])
        .and_then(|f| f.filter(col("n").gt(datafusion::prelude::lit(1i64))))
        .and_then(|f| f.sort(vec![col(KEY_COLUMN).sort(true, false)]))
        .and_then(|f| f.limit(0, Some(1)))
        .map_err(context)?;
    let batches = collect(repeated, "checking that keys are unique").await?;
    let Some(batch) = batches.iter().find(|b| b.num_rows() > 0) else { return Ok(()) };
    let key = batch.column(0).as_string::<i32>().value(0).to_string();
    let copies = batch.column(1).as_primitive::<datafusion::arrow::datatypes::Int64Type>().value(0);
    Err(Error::Source {
        source_name: source.name.clone(),
        table: source.table.name().into(),
        message: format!(
            "key column {} is not unique: '{key}' is on {copies} rows of one read (the key must identify one row)",
            source.key.as_deref().unwrap_or("?")
        ),
    })
}

async fn write_keys(
    writer: &SnapshotWriter,
    source: &SourceConfig,
    seq: u32,
    keys: &RecordBatch,
) -> Result<KeysFile> {
    let parts = writer.keys_writer(source.table, &source.name);
    let (file, bytes) = write_single(writer, parts, keys, "keys").await?;
    let (path, rows, sha256) = (file.path, file.rows, file.sha256);
    Ok(KeysFile { path, source: source.label(), seq, rows, bytes, sha256 })
}

async fn write_deletes(
    writer: &SnapshotWriter,
    source: &SourceConfig,
    positions: &deletes::Positions,
) -> Result<DeletesFile> {
    let parts = writer.deletes_writer(source.table, &source.name);
    let batch = deletes::batch(positions)?;
    let (file, bytes) = write_single(writer, parts, &batch, "position deletes").await?;
    let (path, rows, sha256) = (file.path, file.rows, file.sha256);
    Ok(DeletesFile { path, source: source.label(), rows, bytes, sha256 })
}

/// Writes `batch` as the one file of `parts`: its entry and its size in bytes.
async fn write_single(
    writer: &SnapshotWriter,
    mut parts: PartWriter,
    batch: &RecordBatch,
    what: &str,
) -> Result<(FileEntry, u64)> {
    parts.write(batch).await?;
    let files = parts.finish().await?;
    let file =
        files.into_iter().next().ok_or_else(|| Error::Internal(format!("no {what} file")))?;
    let location = writer.location();
    let meta = location
        .store()
        .head(&location.path(&file.path))
        .await
        .map_err(|e| Error::store(location.display(&file.path), e))?;
    Ok((file, meta.size))
}

/// The first difference between the chain's live rows and the full export's, source by
/// source in config order, by key: `ledger[fulfilment] key 'm-1': column action …`.
async fn first_difference(
    ctx: &SessionContext,
    location: &Location,
    candidates: &[Candidate],
    shadows: &[(String, Table, Listed)],
    window: (Micros, Micros),
) -> Result<Option<String>> {
    for (candidate, (_, _, full)) in candidates.iter().zip(shadows) {
        let Candidate { label, table, listed, keys, .. } = candidate;
        let chain_rows = live_rows(ctx, location, *table, listed, keys, window, true)?;
        let full_rows = live_rows(ctx, location, *table, full, &[], window, true)?;
        let context = |e| Error::query(format!("comparing {label} with the full export"), e);
        ctx.register_table("shadow_chain", chain_rows.into_view()).map_err(context)?;
        ctx.register_table("shadow_full", full_rows.into_view()).map_err(context)?;
        let columns: Vec<&str> = table.columns().iter().map(|c| c.name).collect();
        let select: Vec<String> =
            columns.iter().map(|c| format!("c.{c} AS c_{c}, f.{c} AS f_{c}")).collect();
        let differs: Vec<String> =
            columns.iter().map(|c| format!("(c.{c} IS DISTINCT FROM f.{c})")).collect();
        let sql = format!(
            "SELECT c.recon_key AS c_key, f.recon_key AS f_key, {} FROM shadow_chain c FULL OUTER JOIN shadow_full f ON c.recon_key = f.recon_key WHERE c.recon_key IS NULL OR f.recon_key IS NULL OR {} ORDER BY COALESCE(c.recon_key, f.recon_key) LIMIT 1",
            select.join(", "),
            differs.join(" OR ")
        );
        let batches = ctx.sql(&sql).await.map_err(context)?.collect().await.map_err(context)?;
        ctx.deregister_table("shadow_chain").map_err(context)?;
        ctx.deregister_table("shadow_full").map_err(context)?;
        let Some(batch) = batches.iter().find(|b| b.num_rows() > 0) else { continue };
        let text = |name: &str| -> String {
            let Some(array) = batch.column_by_name(name) else { return "?".into() };
            if array.is_null(0) {
                return "NULL".into();
            }
            datafusion::arrow::util::display::array_value_to_string(array, 0)
                .unwrap_or_else(|_| "?".into())
        };
        let (c_key, f_key) = (text("c_key"), text("f_key"));
        let described = if c_key == "NULL" {
            format!("{label} key '{f_key}': in the full export, not live in the chain")
        } else if f_key == "NULL" {
            format!("{label} key '{c_key}': live in the chain, not in the full export")
        } else {
            let column = columns
                .iter()
                .find(|c| text(&format!("c_{c}")) != text(&format!("f_{c}")))
                .copied()
                .unwrap_or("?");
            format!(
                "{label} key '{c_key}': column {column} is {} in the full export, {} in the chain",
                text(&format!("f_{column}")),
                text(&format!("c_{column}"))
            )
        };
        return Ok(Some(described));
    }
    Ok(None)
}
