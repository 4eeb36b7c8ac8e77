//! Reading a snapshot: the manifest, then every listed file validated against the
//! contract before a single row is judged.
//!
//! Invariants after [`Snapshot::register`]: the session holds `ledger`, `status_history`
//! and `receipts` with the contract's column types (strings as Utf8View, timestamps
//! µs UTC), built only from files the manifest lists, whose row counts match, whose
//! non-null columns hold no NULL, and whose ledger has no duplicate `msg_id`.

// ParquetObjectReader is deprecated in parquet 59 in favour of hand-written readers; it
// still does exactly what validation needs (a footer and one column through object_store).
#![allow(deprecated)]

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::UInt64Type;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::TableProvider;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::parquet::arrow::async_reader::ParquetObjectReader;
use datafusion::parquet::arrow::{ParquetRecordBatchStreamBuilder, ProjectionMask};
use datafusion::parquet::errors::ParquetError;
use datafusion::prelude::{cast, ident, DataFrame, Expr, SessionContext};
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStoreExt;

use super::chain::{self, Chain, CHAIN_FORMAT};
use super::deleted_rows::Selections;
use super::deletes;
use super::row_groups::{FileRowGroups, OrderRangeTable, RowGroupIndex};
use super::{ColumnSpec, FileEntry, SnapshotManifest, Table, KEY_SPEC, MANIFEST, SNAPSHOT_FORMAT};
use crate::error::{Error, Result};
use crate::storage::Location;
use crate::time::{parse_instant, Micros};

/// An opened snapshot: its location and its parsed manifest.
#[derive(Debug, Clone)]
pub struct Snapshot {
    location: Location,
    manifest: SnapshotManifest,
    cut: Micros,
}

/// What a snapshot holds, for summaries.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SnapshotStats {
    /// Rows per table name (and per `receipts/<source>`).
    pub rows: BTreeMap<String, u64>,
    /// Number of files read.
    pub files: usize,
}

impl Snapshot {
    /// Reads and checks `manifest.json`; a folder without one is an incomplete snapshot.
    pub async fn open(location: &Location) -> Result<Self> {
        let err = |message: String| Error::Snapshot { location: location.to_string(), message };
        let bytes = match location.read_optional(MANIFEST).await {
            Ok(Some(bytes)) => bytes,
            missing => {
                if let Some(problem) = location.not_a_folder().await {
                    return Err(err(problem.into()));
                }
                missing?.ok_or_else(|| {
                    err("no manifest.json: not a snapshot, or an incomplete one (the manifest is written last)".into())
                })?
            }
        };
        let manifest: SnapshotManifest = serde_json::from_slice(&bytes)
            .map_err(|e| err(format!("manifest.json is not a valid snapshot manifest: {e}")))?;
        let chained = manifest.format == CHAIN_FORMAT;
        if manifest.format != SNAPSHOT_FORMAT && !chained {
            return Err(err(format!(
                "manifest.json has format '{}', expected '{SNAPSHOT_FORMAT}' or '{CHAIN_FORMAT}'",
                manifest.format
            )));
        }
        if chained != manifest.chain.is_some() {
            return Err(err(format!(
                "manifest.json of format '{}' {} a chain block",
                manifest.format,
                if chained { "lacks" } else { "has" }
            )));
        }
        if chained && manifest.coverage_from.is_none() {
            return Err(err("manifest.json of an incremental snapshot lacks coverage_from".into()));
        }
        let cut =
            parse_instant(&manifest.cut).map_err(|e| err(format!("manifest.json cut: {e}")))?;
        for name in manifest.tables.keys() {
            if Table::from_name(name).is_none() {
                return Err(err(format!("manifest.json lists unknown table '{name}'")));
            }
        }
        for table in Table::ALL {
            let files =
                manifest.tables.get(table.name()).map(|t| t.files.as_slice()).unwrap_or_default();
            if files.is_empty() {
                return Err(err(format!(
                    "manifest.json lists no files for table '{}'",
                    table.name()
                )));
            }
            for file in files {
                let listed = match &manifest.chain {
                    None => check_path(table, &file.path),
                    Some(chain) => check_chain_path(table, &file.path).and_then(|()| {
                        chain.files.get(&file.path).map(drop).ok_or_else(|| {
                            "listed under tables but not in the chain's files".to_string()
                        })
                    }),
                };
                listed.map_err(|m| Error::SnapshotFile {
                    file: location.display(&file.path),
                    message: m,
                    source: None,
                })?;
            }
        }
        if let Some(chain) = &manifest.chain {
            let keys = chain.keys.iter().map(|k| (k.path.as_str(), "a keys file"));
            let deletes =
                chain.deletes.iter().map(|d| (d.path.as_str(), "a position deletes file"));
            for (path, what) in keys.chain(deletes) {
                let table = path.split('/').find_map(Table::from_name);
                if table.is_none_or(|t| check_chain_path(t, path).is_err()) {
                    return Err(Error::SnapshotFile {
                        file: location.display(path),
                        message: format!(
                            "{what} must lie in its table's folder of a snapshot of the chain"
                        ),
                        source: None,
                    });
                }
            }
        }
        Ok(Snapshot { location: location.clone(), manifest, cut })
    }

    /// The exporter's lower bound from the manifest (`None`: unknown).
    pub fn coverage_from(&self) -> Result<Option<Micros>> {
        let Some(text) = self.manifest.coverage_from.as_deref() else { return Ok(None) };
        parse_instant(text).map(Some).map_err(|e| Error::Snapshot {
            location: self.location.display(MANIFEST),
            message: format!("coverage_from: {e}"),
        })
    }

    /// The self-check failure an incremental snapshot carries: its shadow check differed.
    pub fn chain_problem(&self) -> Option<String> {
        self.manifest.chain.as_ref().and_then(Chain::problem)
    }

    /// The snapshot's cut.
    pub fn cut(&self) -> Micros {
        self.cut
    }

    /// Where the snapshot lives.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// The parsed manifest.
    pub fn manifest(&self) -> &SnapshotManifest {
        &self.manifest
    }

    /// The files listed for `table`.
    pub fn files(&self, table: Table) -> &[FileEntry] {
        self.manifest.tables.get(table.name()).map(|t| t.files.as_slice()).unwrap_or_default()
    }

    /// Validates every listed file and registers `ledger`, `status_history` and `receipts`.
    pub async fn register(&self, ctx: &SessionContext) -> Result<SnapshotStats> {
        let stats = self.register_files(ctx).await?;
        if !self.msg_ids_unique_by_key() {
            let ledger_rows = stats.rows.get(Table::Ledger.name()).copied().unwrap_or(0);
            check_unique_msg_ids(ctx, ledger_rows).await?;
        }
        Ok(stats)
    }

    /// Whether the live ledger rows hold each `msg_id` once by construction: an
    /// incremental snapshot whose one ledger source is keyed by `msg_id`. The exporter
    /// refused a segment with a key twice, and a later segment's key supersedes every
    /// earlier version (docs/CONTRACT.md "Incremental snapshots"), so re-checking would
    /// only read the whole chain again.
    fn msg_ids_unique_by_key(&self) -> bool {
        let Some(chain) = &self.manifest.chain else { return false };
        let mut ledgers = chain
            .sources
            .iter()
            .filter(|(label, _)| label.split('[').next() == Some(Table::Ledger.name()));
        matches!((ledgers.next(), ledgers.next()), (Some((_, mark)), None) if mark.key == "msg_id")
    }

    /// [`Snapshot::register`] without the whole-ledger `msg_id` uniqueness scan: every
    /// file's footer, columns and types are still checked. For point lookups (`explain`),
    /// which must not read the whole snapshot to show one order.
    pub async fn register_files(&self, ctx: &SessionContext) -> Result<SnapshotStats> {
        ctx.register_object_store(self.location.store_url(), Arc::clone(self.location.store()));
        // Footers are read concurrently (a round trip each on object storage); results keep
        // manifest order, so the first bad file listed is the one reported.
        let concurrency = ctx.state().config().target_partitions().max(1);
        let listed: Vec<(Table, &FileEntry)> = Table::ALL
            .into_iter()
            .flat_map(|table| self.files(table).iter().map(move |file| (table, file)))
            .collect();
        let checked: Vec<(SchemaRef, FileRowGroups)> = futures::stream::iter(&listed)
            .map(|&(table, file)| self.validate_file(table, file))
            .buffered(concurrency)
            .try_collect()
            .await?;
        if let Some(chain) = &self.manifest.chain {
            return self.register_chain(ctx, chain, &listed, checked).await;
        }
        let mut stats = SnapshotStats::default();
        for table in Table::ALL {
            let mut groups: Vec<(SchemaRef, Vec<String>)> = Vec::new();
            let mut row_groups = RowGroupIndex::new();
            let mut table_rows = 0;
            let files = listed.iter().zip(checked.iter()).filter(|((t, _), _)| *t == table);
            for ((_, file), (schema, file_row_groups)) in files {
                row_groups
                    .insert(self.location.path(&file.path).to_string(), file_row_groups.clone());
                table_rows += file.rows;
                if table == Table::Receipts {
                    let source = file.path.split('/').nth(1).unwrap_or("default");
                    *stats.rows.entry(format!("receipts/{source}")).or_default() += file.rows;
                }
                let url = self.location.url(&file.path);
                match groups.iter_mut().find(|(s, _)| same_types(s, schema)) {
                    Some((_, urls)) => urls.push(url),
                    None => groups.push((Arc::clone(schema), vec![url])),
                }
                stats.files += 1;
            }
            stats.rows.insert(table.name().to_string(), table_rows);
            let (row_groups, none) = (Arc::new(row_groups), Arc::new(Selections::new()));
            let read = TableRead { row_groups: &row_groups, selections: &none, keep_key: false };
            let frame = self.table_frame(ctx, table, groups, read).await?;
            ctx.register_table(table.name(), frame.into_view())
                .map_err(|e| Error::query(format!("registering table {}", table.name()), e))?;
        }
        Ok(stats)
    }

    /// Opens one file's footer and checks rows, columns, types and NULLs; returns its
    /// schema and where its row groups lie.
    async fn validate_file(
        &self,
        table: Table,
        file: &FileEntry,
    ) -> Result<(SchemaRef, FileRowGroups)> {
        let shown = self.location.display(&file.path);
        let fail =
            |message: String| Error::SnapshotFile { file: shown.clone(), message, source: None };
        let path = self.location.path(&file.path);
        let meta = match self.location.store().head(&path).await {
            Ok(meta) => meta,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(fail("listed in manifest.json but absent".into()))
            }
            Err(e) => return Err(Error::store(&shown, e)),
        };
        let reader = ParquetObjectReader::new(Arc::clone(self.location.store()), path)
            .with_file_size(meta.size);
        // Hostile footers can make the Parquet reader panic (a corrupt embedded Arrow
        // schema): that is an unreadable file too.
        let builder = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(
            ParquetRecordBatchStreamBuilder::new(reader),
        ))
        .await
        .map_err(|_| {
            fail("unreadable Parquet: the Parquet reader cannot decode its footer".into())
        })?
        .map_err(|e| unreadable(&shown, e))?;
        let rows = builder.metadata().file_metadata().num_rows();
        if rows < 0 || rows as u64 != file.rows {
            return Err(fail(format!("holds {rows} rows but manifest.json says {}", file.rows)));
        }
        let schema = Arc::clone(builder.schema());
        let key = self.manifest.chain.is_some().then_some(&KEY_SPEC);
        for spec in table.columns().iter().chain(key) {
            let column_error = |message: String| Error::Column {
                file: shown.clone(),
                column: spec.name.to_string(),
                message,
                source: None,
            };
            let field = schema
                .field_with_name(spec.name)
                .map_err(|_| column_error(format!("missing (table {} needs it)", table.name())))?;
            if !spec.kind.accepts(field.data_type()) {
                return Err(column_error(format!(
                    "has type {}, expected {}",
                    field.data_type(),
                    spec.kind.describe()
                )));
            }
            if !spec.nullable && field.is_nullable() {
                if let Some(row) =
                    first_null_row(&builder, &self.location, &file.path, meta.size, spec)
                        .await
                        .map_err(|e| unreadable(&shown, e))?
                {
                    return Err(column_error(format!(
                        "row {row} is NULL; the column must not be NULL"
                    )));
                }
            }
        }
        Ok((schema, FileRowGroups::from_metadata(builder.metadata(), meta.size)))
    }

    /// Registers the live rows of an incremental snapshot ([`chain::live_frame`]) as the
    /// contract's tables; the row counts are the live rows the exporter counted.
    async fn register_chain(
        &self,
        ctx: &SessionContext,
        chain: &Chain,
        listed: &[(Table, &FileEntry)],
        checked: Vec<(SchemaRef, FileRowGroups)>,
    ) -> Result<SnapshotStats> {
        let coverage_from = self.coverage_from()?.unwrap_or(Micros::MIN);
        // Superseded rows are skipped by position where the chain names them so (no join
        // on keys); a cluster's executors know no scan of ours and merge by key.
        let by_position = chain.positions && !crate::engine::staging::is_distributed(ctx);
        let mut selections = Selections::new();
        for file in chain.deletes.iter().filter(|_| by_position) {
            let deleted = deletes::read(&self.location, &[file], |p| p.to_string()).await?;
            for (path, rows) in deleted {
                let bad = |message: String| Error::SnapshotFile {
                    file: self.location.display(&file.path),
                    message: format!("position deletes: {message}"),
                    source: None,
                };
                let listed = listed.iter().map(|(_, f)| *f).find(|f| f.path == path);
                let Some(listed) = listed.filter(|_| {
                    chain.files.get(&path).is_some_and(|meta| meta.source == file.source)
                }) else {
                    return Err(bad(format!("names {path}, not a file of {}", file.source)));
                };
                if let Some(&beyond) = rows.iter().find(|&&r| r >= listed.rows) {
                    return Err(bad(format!(
                        "deletes row {beyond} of {path}, which holds {} rows",
                        listed.rows
                    )));
                }
                let object = self.location.path(&path).to_string();
                selections.insert(object, deletes::selection(&rows, listed.rows));
            }
        }
        let mut stats = SnapshotStats::default();
        let mut checked = checked.into_iter();
        // Per table, per source, per segment: (schema, url) of each file.
        type Segments = BTreeMap<u32, Vec<(SchemaRef, String)>>;
        let mut by_source: BTreeMap<(Table, String), Segments> = BTreeMap::new();
        let mut row_groups = RowGroupIndex::new();
        for &(table, file) in listed {
            let (schema, file_row_groups) =
                checked.next().ok_or_else(|| Error::Internal("a file was not checked".into()))?;
            let meta = &chain.files[&file.path];
            row_groups.insert(self.location.path(&file.path).to_string(), file_row_groups);
            by_source
                .entry((table, meta.source.clone()))
                .or_default()
                .entry(meta.seq)
                .or_default()
                .push((schema, self.location.url(&file.path)));
            stats.files += 1;
        }
        let (row_groups, selections) = (Arc::new(row_groups), Arc::new(selections));
        for table in Table::ALL {
            let mut frames = Vec::new();
            for ((_, source), segments) in by_source.iter().filter(|((t, _), _)| *t == table) {
                let mut rows = Vec::new();
                for (seq, files) in segments {
                    let mut groups: Vec<(SchemaRef, Vec<String>)> = Vec::new();
                    for (schema, url) in files {
                        match groups.iter_mut().find(|(s, _)| same_types(s, schema)) {
                            Some((_, urls)) => urls.push(url.clone()),
                            None => groups.push((Arc::clone(schema), vec![url.clone()])),
                        }
                    }
                    let read = TableRead {
                        row_groups: &row_groups,
                        selections: &selections,
                        keep_key: !by_position,
                    };
                    rows.push((*seq, self.table_frame(ctx, table, groups, read).await?));
                }
                let mut keys = Vec::new();
                let keys_files = chain.keys.iter().filter(|_| !by_position);
                for file in keys_files.filter(|k| &k.source == source) {
                    let url = self.location.url(&file.path);
                    keys.push((file.seq, keys_frame(ctx, &url).await?));
                }
                let segments = chain::SourceSegments { segments: rows, keys };
                frames.push(chain::live_frame(table, segments, (coverage_from, self.cut), false)?);
                let live = chain.live_rows.get(source).copied().unwrap_or(0);
                *stats.rows.entry(table.name().to_string()).or_default() += live;
                if table == Table::Receipts {
                    let name = source_name(source);
                    *stats.rows.entry(format!("receipts/{name}")).or_default() += live;
                }
            }
            let context = |e| Error::query(format!("registering table {}", table.name()), e);
            let mut frames = frames.into_iter();
            let first = frames.next().ok_or_else(|| Error::Snapshot {
                location: self.location.to_string(),
                message: format!("no files for {}", table.name()),
            })?;
            let frame = frames.try_fold(first, |all, next| all.union(next).map_err(context))?;
            stats.rows.entry(table.name().to_string()).or_default();
            ctx.register_table(table.name(), frame.into_view()).map_err(context)?;
        }
        Ok(stats)
    }

    /// One DataFrame over all files of `table`, normalised to the contract types (and
    /// `recon_key` kept when `read.keep_key`).
    async fn table_frame(
        &self,
        ctx: &SessionContext,
        table: Table,
        groups: Vec<(SchemaRef, Vec<String>)>,
        read: TableRead<'_>,
    ) -> Result<DataFrame> {
        let TableRead { row_groups, selections, keep_key } = read;
        let context = |e| Error::query(format!("reading table {}", table.name()), e);
        let mut frames = Vec::new();
        for (schema, urls) in groups {
            let paths = urls
                .iter()
                .map(ListingTableUrl::parse)
                .collect::<Result<Vec<_>, _>>()
                .map_err(context)?;
            let options = ListingOptions::new(Arc::new(ParquetFormat::default()))
                .with_file_extension(".parquet");
            let scan_schema = with_view_strings(&schema);
            let config = ListingTableConfig::new_with_multi_paths(paths)
                .with_listing_options(options)
                .with_schema(Arc::clone(&scan_schema));
            let provider: Arc<dyn TableProvider> =
                Arc::new(ListingTable::try_new(config).map_err(context)?);
            // A cluster's scheduler plans the scans itself and knows no providers of ours:
            // there the table stays a plain listing table (same rows, DataFusion's split;
            // `register_chain` then merges by key, with no selections).
            let provider = if crate::engine::staging::is_distributed(ctx) {
                provider
            } else {
                let (row_groups, selections) = (Arc::clone(row_groups), Arc::clone(selections));
                Arc::new(OrderRangeTable::new(provider, row_groups, selections))
            };
            let frame = ctx.read_table(provider).map_err(context)?;
            let mut columns: Vec<Expr> =
                table.columns().iter().map(|spec| normalised(&scan_schema, spec)).collect();
            if keep_key {
                columns.push(normalised(&scan_schema, &KEY_SPEC));
            }
            frames.push(frame.select(columns).map_err(context)?);
        }
        let mut frames = frames.into_iter();
        let first = frames.next().ok_or_else(|| Error::Snapshot {
            location: self.location.to_string(),
            message: format!("no files for {}", table.name()),
        })?;
        frames.try_fold(first, |all, next| all.union(next).map_err(context))
    }
}

/// How [`Snapshot::table_frame`] reads a table's files.
#[derive(Clone, Copy)]
struct TableRead<'a> {
    /// Where each file's row groups lie (for `order_id` range scans).
    row_groups: &'a Arc<RowGroupIndex>,
    /// The rows to read of files with position deletes.
    selections: &'a Arc<Selections>,
    /// Whether `recon_key` stays (a merge by key needs it).
    keep_key: bool,
}

/// Casts the contract columns of `frame` to the contract types of `table` and drops the
/// rest — the same normalisation `register` applies to Parquet files. Used where inputs
/// are built in SQL (the sqllogictest harness).
pub fn conform_frame(frame: DataFrame, table: Table) -> Result<DataFrame> {
    let schema = frame.schema().as_arrow().clone();
    for spec in table.columns() {
        let field = schema.field_with_name(spec.name).map_err(|_| Error::Column {
            file: table.name().into(),
            column: spec.name.into(),
            message: "missing".into(),
            source: None,
        })?;
        if !spec.kind.accepts(field.data_type()) {
            return Err(Error::Column {
                file: table.name().into(),
                column: spec.name.into(),
                message: format!(
                    "has type {}, expected {}",
                    field.data_type(),
                    spec.kind.describe()
                ),
                source: None,
            });
        }
    }
    let columns: Vec<Expr> = table.columns().iter().map(|spec| normalised(&schema, spec)).collect();
    frame.select(columns).map_err(|e| Error::query(format!("conforming {}", table.name()), e))
}

/// `ledger[fulfilment]` → `fulfilment`.
fn source_name(label: &str) -> &str {
    label.split_once('[').map_or(label, |(_, rest)| rest.trim_end_matches(']'))
}

/// A keys file of an incremental snapshot as a frame of `recon_key`.
async fn keys_frame(ctx: &SessionContext, url: &str) -> Result<DataFrame> {
    let context = |e| Error::query(format!("reading the keys file {url}"), e);
    let path = ListingTableUrl::parse(url).map_err(context)?;
    let options =
        ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
    let config = ListingTableConfig::new(path)
        .with_listing_options(options)
        .with_schema(with_view_strings(&chain::keys_schema()));
    let provider = ListingTable::try_new(config).map_err(context)?;
    ctx.read_table(Arc::new(provider)).map_err(context)
}

/// An incremental snapshot's paths: its own files as [`check_path`] says, or the same
/// below `../snapshot=<cut>/` (a file an earlier night of the chain wrote).
fn check_chain_path(table: Table, path: &str) -> Result<(), String> {
    match path.strip_prefix("../") {
        None => check_path(table, path),
        Some(rest) => {
            let (folder, inside) = rest.split_once('/').unwrap_or((rest, ""));
            if !folder.starts_with("snapshot=") || folder.contains("..") {
                return Err("a file of an earlier segment must lie in ../snapshot=<cut>/".into());
            }
            check_path(table, inside)
        }
    }
}

/// Paths must stay inside the snapshot and in the table's own folder.
fn check_path(table: Table, path: &str) -> Result<(), String> {
    if path.starts_with('/') || path.split('/').any(|p| p == ".." || p == "." || p.is_empty()) {
        return Err("path in manifest.json must be relative to the snapshot, without '.', '..' or empty parts".into());
    }
    let folder = format!("{}/", table.name());
    if !path.starts_with(&folder) {
        return Err(format!(
            "listed under table '{}' but not in its folder {folder}",
            table.name()
        ));
    }
    if table == Table::Receipts && path.split('/').count() < 3 {
        return Err("receipt files live in receipts/<source>/".into());
    }
    Ok(())
}

/// Two file schemas can share one scan when their column types agree.
fn same_types(a: &Schema, b: &Schema) -> bool {
    a.fields().len() == b.fields().len()
        && a.fields()
            .iter()
            .zip(b.fields())
            .all(|(x, y)| x.name() == y.name() && x.data_type() == y.data_type())
}

/// The file schema with every string column read as Utf8View (see `ColumnKind::session_type`).
fn with_view_strings(schema: &Schema) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Utf8 | DataType::LargeUtf8 => {
                f.as_ref().clone().with_data_type(DataType::Utf8View)
            }
            _ => f.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new(fields))
}

/// The column cast to the session type when the file uses another accepted type.
fn normalised(schema: &Schema, spec: &ColumnSpec) -> Expr {
    let wanted = spec.kind.session_type();
    let found =
        schema.field_with_name(spec.name).map(|f| f.data_type().clone()).unwrap_or(DataType::Null);
    if found == wanted {
        ident(spec.name)
    } else {
        cast(ident(spec.name), wanted).alias(spec.name)
    }
}

/// Row index of the first NULL of a column that must not have any. Row-group statistics
/// A file the Parquet reader refuses, with the reader's error kept as the cause.
fn unreadable(file: &str, e: ParquetError) -> Error {
    Error::SnapshotFile {
        file: file.into(),
        message: format!("unreadable Parquet: {e}"),
        source: Some(Box::new(e)),
    }
}

/// answer without reading data when they say zero; otherwise the column is scanned.
async fn first_null_row(
    builder: &ParquetRecordBatchStreamBuilder<ParquetObjectReader>,
    location: &Location,
    relative: &str,
    size: u64,
    spec: &ColumnSpec,
) -> Result<Option<u64>, ParquetError> {
    let metadata = builder.metadata();
    let Some(index) = builder.schema().index_of(spec.name).ok() else { return Ok(None) };
    let stats_say_none = metadata.row_groups().iter().all(|rg| {
        rg.columns().get(index).and_then(|c| c.statistics()).and_then(|s| s.null_count_opt())
            == Some(0)
    });
    if stats_say_none {
        return Ok(None);
    }
    let reader = ParquetObjectReader::new(Arc::clone(location.store()), location.path(relative))
        .with_file_size(size);
    let scan = ParquetRecordBatchStreamBuilder::new(reader).await?;
    let mask = ProjectionMask::roots(scan.parquet_schema(), [index]);
    let mut stream = scan.with_projection(mask).build()?;
    let mut row = 0u64;
    while let Some(batch) = stream.try_next().await? {
        let column = batch.column(0);
        if column.null_count() > 0 {
            let offset = (0..column.len()).find(|&i| column.is_null(i)).unwrap_or(0);
            return Ok(Some(row + offset as u64));
        }
        row += batch.num_rows() as u64;
    }
    Ok(None)
}

/// `msg_id` is the ledger's key: a duplicate means two decisions for one message.
///
/// The 64-bit hashes of all msg_ids are compared (far faster and smaller than grouping
/// the strings); only when a hash repeats are the strings behind it compared exactly.
/// In process the hashes are sharded and sorted within the session's memory pool
/// ([`super::unique_keys`]).
async fn check_unique_msg_ids(ctx: &SessionContext, ledger_rows: u64) -> Result<()> {
    let context = |e| Error::query("checking that ledger msg_ids are unique", e);
    let repeated = if crate::engine::staging::is_distributed(ctx) {
        // On a cluster the executors group the hashes: only repeats travel to this process.
        let batches =
            crate::engine::queries::collect(ctx, crate::engine::queries::REPEATED_KEY_HASHES, &[])
                .await?;
        batches
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<UInt64Type>().values().to_vec())
            .collect()
    } else {
        super::unique_keys::repeated_key_hashes(ctx, ledger_rows).await?
    };
    if repeated.is_empty() {
        return Ok(());
    }
    let repeated =
        RecordBatch::try_from_iter([("h", Arc::new(UInt64Array::from(repeated)) as ArrayRef)])
            .map_err(|e| context(e.into()))?;
    crate::engine::staging::register_batches(
        ctx,
        "repeated_key_hashes",
        repeated.schema(),
        vec![repeated],
    )
    .await?;
    let batches =
        crate::engine::queries::collect(ctx, crate::engine::queries::DUPLICATE_MSG_IDS, &[])
            .await?;
    ctx.deregister_table("repeated_key_hashes").map_err(context)?;
    let Some(batch) = batches.iter().find(|b| b.num_rows() > 0) else { return Ok(()) };
    let ids = crate::engine::queries::string_column(batch, "msg_id")?;
    let counts = crate::engine::queries::int64_column(batch, "copies")?;
    Err(Error::Column {
        file: "ledger".into(),
        column: "msg_id".into(),
        message: format!(
            "duplicate msg_id '{}' ({} rows); msg_id must be unique",
            ids.value(0),
            counts.value(0)
        ),
        source: None,
    })
}
