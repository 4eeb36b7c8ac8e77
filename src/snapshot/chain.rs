//! The incremental snapshot, `effect-recon/snapshot@2` (docs/CONTRACT.md "Incremental
//! snapshots"): a chain of segments under one root.
//!
//! Night `N`'s manifest lists the files of every earlier segment it still needs (paths
//! `../snapshot=<cut>/…` into the folder that wrote them) and the one segment it adds, in
//! its own folder. Every file carries the source's key as an extra column, `recon_key`;
//! a segment's *keys file* lists the keys it carries that an earlier segment also holds.
//! A row version is **live** iff no later segment's keys file lists its key (newer
//! versions supersede older ones: merge on read) and its event time lies in
//! `(coverage_from, cut]` (rows that left the lookback, or whose event time moved out of
//! the window, are not live). The position deletes ([`super::deletes`]) name the same
//! superseded rows by file and position, so a reader in process skips them while reading.
//! [`Chain`] is the manifest block; [`live_frame`] builds the live rows of one source
//! (merged by key, or with the superseded rows already skipped), which `register` unions
//! into the contract's tables.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{
    DataType, Field, Schema, SchemaRef, TimeUnit, TimestampMicrosecondType,
};
use datafusion::common::{JoinType, ScalarValue};
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::prelude::{col, lit, DataFrame, SessionContext};
use object_store::ObjectStoreExt;
use serde::{Deserialize, Serialize};

use super::deletes::DeletesFile;
use super::{FileEntry, Table, UTC};
use crate::error::{Error, Result};
use crate::storage::Location;
use crate::time::format_instant;
use crate::time::Micros;

/// The `format` of an incremental (segment chain) snapshot manifest.
pub const CHAIN_FORMAT: &str = "effect-recon/snapshot@2";

/// The extra column every `@2` file carries: the source's key, as text.
pub const KEY_COLUMN: &str = "recon_key";

/// The `chain` block of an `@2` manifest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Chain {
    /// Segment number of this night: 0 for a full export (the chain's base).
    pub seq: u32,
    /// `full` or `incremental`.
    pub mode: String,
    /// Why this night is a full export (absent when incremental).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The snapshot folder this night follows (absent for a full export).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
    /// Per source label (`ledger[fulfilment]`): its identity and watermark.
    pub sources: BTreeMap<String, SourceMark>,
    /// Per file path of `tables`: which source and segment it belongs to.
    pub files: BTreeMap<String, SegmentFile>,
    /// The keys files of the chain's segments.
    #[serde(default)]
    pub keys: Vec<KeysFile>,
    /// Whether `deletes` names every row a later segment supersedes, by position (every
    /// manifest this version writes; an older chain's readers merge by key).
    #[serde(default)]
    pub positions: bool,
    /// Per source with superseded rows: its position deletes file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deletes: Vec<DeletesFile>,
    /// Live rows per source label, checked by the exporter before the manifest.
    pub live_rows: BTreeMap<String, u64>,
    /// The shadow check of this night, when one ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<Shadow>,
}

/// What the chain knows of one source: enough to tell whether the next night may follow.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SourceMark {
    /// The key column of the job config.
    pub key: String,
    /// The change column of the job config.
    pub changed_column: String,
    /// SHA-256 of the source's query, URL and timezone: another query is another source.
    pub identity: String,
    /// The database's time at the probe, RFC 3339 (absent: no probe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_time: Option<String>,
    /// Start of the oldest transaction open at the probe (absent: none open, or the
    /// database cannot tell, see `probe_note`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_open_transaction: Option<String>,
    /// Seconds subtracted from the earlier of the two.
    pub margin_secs: u64,
    /// The low watermark: the next night reads every row changed at or after it. Absent
    /// when the probe failed (the next night is a full export, for `probe_note`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark: Option<String>,
    /// What the probe could not see, or why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_note: Option<String>,
    /// The watermark this night read changes from (absent for a full export).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_changes_since: Option<String>,
    /// Rows this night read from the database for the source.
    pub rows_read: u64,
}

/// Which source and segment a data file belongs to.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SegmentFile {
    /// The source label.
    pub source: String,
    /// The segment that wrote it.
    pub seq: u32,
    /// Its size in bytes (checked, with the SHA-256, before a later night reuses it).
    pub bytes: u64,
    /// The latest event time in it (absent: no rows); a file whose latest event time is
    /// at or before `coverage_from` leaves the manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_event: Option<String>,
}

/// The keys a segment carries that an earlier segment also holds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct KeysFile {
    /// Path relative to the manifest's folder.
    pub path: String,
    /// The source label.
    pub source: String,
    /// The segment.
    pub seq: u32,
    /// Keys listed.
    pub rows: u64,
    /// Its size in bytes.
    pub bytes: u64,
    /// Hex SHA-256 of its bytes.
    pub sha256: String,
}

/// The result of a shadow check: a full export read beside the incremental one.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Shadow {
    /// `equal` or `differs`.
    pub result: String,
    /// The first difference (table, key, column), when it differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_difference: Option<String>,
    /// The incremental manifest's live rows per source, as compared.
    pub incremental_rows: BTreeMap<String, u64>,
}

impl Chain {
    /// The self-check failure this snapshot carries (a shadow check that differed).
    pub fn problem(&self) -> Option<String> {
        let shadow = self.shadow.as_ref()?;
        (shadow.result != "equal").then(|| {
            format!(
                "the shadow full export differs from the incremental chain ({}); this snapshot is the full export, the chain rebased on it",
                shadow.first_difference.as_deref().unwrap_or("rows differ")
            )
        })
    }
}

/// The event-time column of a table: the one the window and the lookback bound.
pub fn event_column(table: Table) -> &'static str {
    match table {
        Table::Ledger => "decided_at",
        Table::StatusHistory => "changed_at",
        Table::Receipts => "created_at",
    }
}

/// The schema of a table's `@2` files: the contract's columns, then `recon_key`.
pub fn file_schema(table: Table) -> SchemaRef {
    let mut fields: Vec<Field> =
        table.schema().fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(KEY_COLUMN, DataType::Utf8, false));
    Arc::new(Schema::new(fields))
}

/// The schema of a keys file.
pub fn keys_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(KEY_COLUMN, DataType::Utf8, false)]))
}

/// A timestamp literal of the session type.
pub fn instant(micros: Micros) -> ScalarValue {
    ScalarValue::TimestampMicrosecond(Some(micros), Some(UTC.into()))
}

/// The timestamp type of event columns in a session.
pub fn event_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into()))
}

/// One source's segments, oldest first: each segment's rows (contract columns plus
/// `recon_key`) and the keys of later segments that supersede them.
pub struct SourceSegments {
    /// `(seq, rows)`, in segment order.
    pub segments: Vec<(u32, DataFrame)>,
    /// `(seq, keys)` of every keys file.
    pub keys: Vec<(u32, DataFrame)>,
}

/// The live versions of one source: per segment, the rows no later segment's keys
/// supersede, in `(coverage_from, cut]` by event time; keeps `recon_key` when `keep_key`.
pub fn live_frame(
    table: Table,
    source: SourceSegments,
    window: (Micros, Micros),
    keep_key: bool,
) -> Result<DataFrame> {
    let context = |e| Error::query(format!("merging the segments of {}", table.name()), e);
    let mut frames = Vec::new();
    for (seq, rows) in source.segments {
        let later: Vec<DataFrame> =
            source.keys.iter().filter(|(s, _)| *s > seq).map(|(_, k)| k.clone()).collect();
        let rows = match union_all(later).map_err(context)? {
            None => rows,
            Some(keys) => {
                // The keys (few) are the hash table and the rows stream past it: a hash
                // join collects its left input, so the rows go on the right.
                let keys =
                    keys.select(vec![col(KEY_COLUMN).alias("superseded_key")]).map_err(context)?;
                keys.join(rows, JoinType::RightAnti, &["superseded_key"], &[KEY_COLUMN], None)
                    .map_err(context)?
            }
        };
        frames.push(rows);
    }
    let all = union_all(frames)
        .map_err(context)?
        .ok_or_else(|| Error::Internal(format!("a source of {} has no segment", table.name())))?;
    let event = col(event_column(table));
    let (lower, cut) = window;
    let live = all
        .filter(event.clone().gt(lit(instant(lower))).and(event.lt_eq(lit(instant(cut)))))
        .map_err(context)?;
    let mut columns: Vec<_> = table.columns().iter().map(|c| col(c.name)).collect();
    if keep_key {
        columns.push(col(KEY_COLUMN));
    }
    live.select(columns).map_err(context)
}

fn union_all(frames: Vec<DataFrame>) -> datafusion::error::Result<Option<DataFrame>> {
    let mut frames = frames.into_iter();
    let Some(first) = frames.next() else { return Ok(None) };
    frames.try_fold(first, |all, next| all.union(next)).map(Some)
}

/// A source's files in one candidate manifest: `(path in the manifest, entry, meta)`.
pub(crate) type Listed = Vec<(String, FileEntry, SegmentFile)>;

/// One frame over Parquet files of `location` (paths relative to it) with `schema`.
pub(crate) fn files_frame(
    ctx: &SessionContext,
    location: &Location,
    paths: &[String],
    schema: SchemaRef,
) -> Result<DataFrame> {
    let context = |e| Error::query(format!("reading {}", location), e);
    let urls = paths
        .iter()
        .map(|p| ListingTableUrl::parse(location.url(p)))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(context)?;
    let options =
        ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
    let config = ListingTableConfig::new_with_multi_paths(urls)
        .with_listing_options(options)
        .with_schema(schema);
    let table = ListingTable::try_new(config).map_err(context)?;
    ctx.read_table(Arc::new(table)).map_err(context)
}

/// The live rows of one source in a candidate manifest.
pub(crate) fn live_rows(
    ctx: &SessionContext,
    location: &Location,
    table: Table,
    listed: &Listed,
    keys: &[KeysFile],
    window: (Micros, Micros),
    keep_key: bool,
) -> Result<DataFrame> {
    let schema = file_schema(table);
    let mut by_seq: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for (path, _, meta) in listed {
        by_seq.entry(meta.seq).or_default().push(path.clone());
    }
    if by_seq.is_empty() {
        // No file: an empty frame of the right shape.
        let empty = RecordBatch::new_empty(Arc::clone(&schema));
        let frame = ctx.read_batch(empty).map_err(|e| Error::query("an empty source", e))?;
        let segments = SourceSegments { segments: vec![(0, frame)], keys: Vec::new() };
        return live_frame(table, segments, window, keep_key);
    }
    let mut segments = Vec::new();
    for (seq, paths) in by_seq {
        segments.push((seq, files_frame(ctx, location, &paths, Arc::clone(&schema))?));
    }
    let mut key_frames = Vec::new();
    for k in keys {
        key_frames.push((
            k.seq,
            files_frame(ctx, location, std::slice::from_ref(&k.path), keys_schema())?,
        ));
    }
    live_frame(table, SourceSegments { segments, keys: key_frames }, window, keep_key)
}

/// Newly written files of one source with their sizes and latest event times.
pub(crate) async fn describe_files(
    ctx: &SessionContext,
    location: &Location,
    files: &[FileEntry],
    label: &str,
    seq: u32,
    table: Table,
) -> Result<Listed> {
    let mut listed = list_files(location, files, label, seq).await?;
    for (path, _, meta) in &mut listed {
        let frame = files_frame(ctx, location, std::slice::from_ref(path), file_schema(table))?;
        meta.max_event = max_instant(frame, event_column(table)).await?.map(format_instant);
    }
    Ok(listed)
}

/// Newly written files of one source with their sizes; their latest event times are left
/// for the caller to fill in.
pub(crate) async fn list_files(
    location: &Location,
    files: &[FileEntry],
    label: &str,
    seq: u32,
) -> Result<Listed> {
    let mut listed = Listed::new();
    for file in files {
        let path = location.path(&file.path);
        let meta = location
            .store()
            .head(&path)
            .await
            .map_err(|e| Error::store(location.display(&file.path), e))?;
        let segment =
            SegmentFile { source: label.to_string(), seq, bytes: meta.size, max_event: None };
        listed.push((file.path.clone(), file.clone(), segment));
    }
    Ok(listed)
}

pub(crate) async fn collect(frame: DataFrame, what: &str) -> Result<Vec<RecordBatch>> {
    frame.collect().await.map_err(|e| Error::query(what.to_string(), e))
}

pub(crate) async fn max_instant(frame: DataFrame, column: &str) -> Result<Option<Micros>> {
    let context = |e| Error::query(format!("the latest {column}"), e);
    let frame = frame
        .aggregate(vec![], vec![datafusion::functions_aggregate::expr_fn::max(col(column))])
        .map_err(context)?;
    let batches = collect(frame, "the latest event time").await?;
    let Some(batch) = batches.first().filter(|b| b.num_rows() > 0) else { return Ok(None) };
    let values = batch.column(0).as_primitive::<TimestampMicrosecondType>();
    Ok((!values.is_null(0)).then(|| values.value(0)))
}

pub(crate) async fn count(frame: DataFrame) -> Result<u64> {
    let n = frame.count().await.map_err(|e| Error::query("counting live rows", e))?;
    Ok(n as u64)
}

/// `path` of the manifest in the sibling folder `folder`, as a manifest beside it names it.
pub(crate) fn sibling(folder: &str, path: &str) -> String {
    if path.starts_with("../") {
        path.to_string()
    } else {
        format!("../{folder}/{path}")
    }
}
