//! The one reader of a run folder: its manifest and summary, the complete runs under a
//! root, and its outputs as typed rows for the tools that take a run into the systems
//! that act on it (`publish`, `reopen`, `report`, `verify`, `explain`).
//!
//! Only the files the run's `manifest.json` lists are read, and each file's row count is
//! checked against the manifest. The reader follows docs/OUTPUTS.md across versions:
//! `compensation_tasks.attempt` and the `resolved` table are used when the run has them
//! and are `None` for runs written before the lifecycle existed.

use std::str::FromStr;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int32Type, Int64Type, TimeUnit};
use datafusion::arrow::error::ArrowError;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::prelude::SessionContext;

use super::{OutputTable, RunManifest, Summary, MANIFEST, RUN_FORMAT, SUMMARY};
use crate::error::{Error, Result};
use crate::storage::parquet_parts::read_parquet;
use crate::storage::Location;
use crate::time::{parse_instant, Micros};
use crate::vocabulary::{
    Class, LedgerAction, Lifecycle, Resolution, RunStatus, SkipLifecycle, SkipVerdict, TaskAction,
    UnknownName, Verdict,
};

/// The manifest of the run in `folder`, or `None` when the folder holds no complete run.
pub async fn existing_run(folder: &Location) -> Result<Option<RunManifest>> {
    if !folder.exists(MANIFEST).await? {
        return Ok(None);
    }
    read_run_manifest(folder).await.map(Some)
}

/// Reads a run's manifest; a folder without one is not a (complete) run.
pub async fn read_run_manifest(folder: &Location) -> Result<RunManifest> {
    let bytes = folder.read_optional(MANIFEST).await?.ok_or_else(|| Error::Run {
        location: folder.to_string(),
        message: "no manifest.json: not a run folder, or a run that did not finish".into(),
        source: None,
    })?;
    let manifest: RunManifest = serde_json::from_slice(&bytes).map_err(|e| Error::Run {
        location: folder.display(MANIFEST),
        message: format!("not a run manifest: {e}"),
        source: Some(Box::new(e)),
    })?;
    if manifest.format != RUN_FORMAT {
        return Err(Error::Run {
            location: folder.display(MANIFEST),
            message: format!("format '{}', expected '{RUN_FORMAT}'", manifest.format),
            source: None,
        });
    }
    let listed = manifest.tables.values().flat_map(|t| &t.files).chain([&manifest.summary]);
    for file in listed {
        if !inside_folder(&file.path) {
            return Err(Error::Run {
                location: folder.display(MANIFEST),
                message: format!(
                    "lists '{}': a path must be relative to the run folder, without '.', '..', \
                     empty parts or a URL scheme",
                    file.path
                ),
                source: None,
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

/// Reads a run's `summary.json` (every complete run has one).
pub async fn read_run_summary(folder: &Location) -> Result<Summary> {
    let fail =
        |message: String| Error::Run { location: folder.display(SUMMARY), message, source: None };
    let bytes = folder
        .read_optional(SUMMARY)
        .await?
        .ok_or_else(|| fail("a complete run without its summary".into()))?;
    serde_json::from_slice(&bytes).map_err(|e| Error::Run {
        location: folder.display(SUMMARY),
        message: format!("not a run summary: {e}"),
        source: Some(Box::new(e)),
    })
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
        let cut = parse_instant(&manifest.cut).map_err(|e| Error::Run {
            location: folder.display(MANIFEST),
            message: format!("cut: {e}"),
            source: None,
        })?;
        runs.push(CompleteRun { folder, manifest, cut });
    }
    runs.sort_by(|a, b| (a.cut, &a.manifest.run_id).cmp(&(b.cut, &b.manifest.run_id)));
    Ok(runs)
}

/// A run's manifest; a folder that does not exist (or is a file) is named as such rather
/// than as one without a manifest.
pub(crate) async fn run_manifest_of_folder(folder: &Location) -> Result<RunManifest> {
    match read_run_manifest(folder).await {
        Ok(manifest) => Ok(manifest),
        Err(e) => match folder.not_a_folder().await {
            Some(problem) => Err(Error::Run {
                location: folder.to_string(),
                message: format!("run folder {problem}"),
                source: None,
            }),
            None => Err(e),
        },
    }
}

/// Registers the output tables of a finished run (the files its manifest lists) as
/// listing tables of `ctx`, for `sql` and `explain`.
pub async fn register(ctx: &SessionContext, folder: &Location) -> Result<()> {
    let manifest = run_manifest_of_folder(folder).await?;
    ctx.register_object_store(folder.store_url(), Arc::clone(folder.store()));
    for (name, table) in &manifest.tables {
        let context = |e| Error::query(format!("registering run table {name}"), e);
        let paths = table
            .files
            .iter()
            .map(|f| ListingTableUrl::parse(folder.url(&f.path)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(context)?;
        let options =
            ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
        let state = ctx.state();
        let config = ListingTableConfig::new_with_multi_paths(paths)
            .with_listing_options(options)
            .infer_schema(&state)
            .await
            .map_err(context)?;
        let provider = ListingTable::try_new(config).map_err(context)?;
        ctx.register_table(name.as_str(), Arc::new(provider)).map_err(context)?;
    }
    Ok(())
}

/// One compensation task (§6, plus §9's `attempt` when present).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRow {
    /// `task_id` (= finding_id).
    pub task_id: String,
    /// The rule's effect.
    pub effect: String,
    /// The order.
    pub order_id: i64,
    /// Finding class, e.g. `SKIPPED_BUT_DUE`.
    pub class: Class,
    /// `EXECUTE_EFFECT`, `REVERSE_EFFECT` or `INVESTIGATE`.
    pub action: TaskAction,
    /// The rule's compensation command (EXECUTE_EFFECT only).
    pub command: Option<String>,
    /// The ledger row to reopen (SKIPPED_BUT_DUE and REVIEW_STALLED only).
    pub reopen_msg_id: Option<String>,
    /// Receipts to reverse (REVERSE_EFFECT only).
    pub reverse_receipt_ids: Option<Vec<String>>,
    /// The rule's priority.
    pub priority: i32,
    /// The executor's idempotency key.
    pub idempotency_key: String,
    /// Nights the finding has been open (§9); `None` for runs without the column.
    pub attempt: Option<i32>,
}

/// One finding the run resolved (§9 `resolved`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedRow {
    /// The finding (= task_id of its task).
    pub finding_id: String,
    /// The rule's effect.
    pub effect: String,
    /// The order.
    pub order_id: i64,
    /// The class it had.
    pub class: Class,
    /// RECEIPT, VOIDED, REVERSED, NOW_DUE, RECLASSIFIED or EXPIRED.
    pub resolution: Resolution,
    /// The receipt that resolved it (RECEIPT only).
    pub receipt_id: Option<String>,
}

/// The evidence of one finding (§6 discrepancies), as far as the tools need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FindingRow {
    /// The finding.
    pub finding_id: String,
    /// The rule's effect.
    pub effect: String,
    /// The order.
    pub order_id: i64,
    /// Finding class.
    pub class: Class,
    /// BREAK or PENDING.
    pub verdict: Verdict,
    /// The evidence row's ledger action.
    pub ledger_action: Option<LedgerAction>,
    /// The evidence message.
    pub msg_id: Option<String>,
    /// Its topic.
    pub topic: Option<String>,
    /// Its partition.
    pub kafka_partition: Option<i32>,
    /// Its offset.
    pub kafka_offset: Option<i64>,
    /// The consumer that decided.
    pub consumer_id: Option<String>,
    /// When the order reached the rule's due status.
    pub due_at: Option<Micros>,
    /// A later offset of the same partition was decided earlier.
    pub reorder_suspected: bool,
    /// §9 `lifecycle` (NEW, PERSISTING) when the run has it (BREAK rows only).
    pub lifecycle: Option<Lifecycle>,
    /// Its `break_on` in the run that first listed it (BREAK rows only).
    pub first_break_on: Option<Micros>,
}

/// One skip verdict (docs/OUTPUTS.md `skip_verdicts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkipRow {
    /// The skipped message.
    pub msg_id: String,
    /// The order.
    pub order_id: i64,
    /// Its event type.
    pub event_type: String,
    /// When it was skipped.
    pub decided_at: Option<Micros>,
    /// WRONG, PENDING, HARMLESS or CORRECT.
    pub verdict: SkipVerdict,
    /// NEW or CARRIED (runs with the lifecycle).
    pub lifecycle: Option<SkipLifecycle>,
}

/// A finished run, read.
#[derive(Debug, Clone)]
pub struct RunOutputs {
    /// The run folder.
    pub folder: Location,
    /// Its manifest.
    pub manifest: RunManifest,
    /// The run's cut, UTC µs.
    pub cut: Micros,
    /// Compensation tasks, in file order.
    pub tasks: Vec<TaskRow>,
    /// Discrepancies, in file order.
    pub findings: Vec<FindingRow>,
    /// The `resolved` table; `None` when the run has none (no previous run, or older run).
    pub resolved: Option<Vec<ResolvedRow>>,
}

impl RunOutputs {
    /// Reads the run at `folder` (which must hold a `manifest.json`).
    pub async fn read(folder: &Location) -> Result<Self> {
        let manifest = read_run_manifest(folder).await?;
        let cut = parse_instant(&manifest.cut).map_err(|m| Error::Run {
            location: folder.display(MANIFEST),
            message: format!("cut: {m}"),
            source: None,
        })?;
        let tasks = read_table(folder, &manifest, OutputTable::CompensationTasks).await?;
        let findings = read_table(folder, &manifest, OutputTable::Discrepancies).await?;
        let resolved = read_table_if_listed(folder, &manifest, OutputTable::Resolved).await?;
        let fail = |table: OutputTable| move |e| run_error(folder.display(table.name()), e);
        let tasks = rows(&tasks, task_row).map_err(fail(OutputTable::CompensationTasks))?;
        let findings = rows(&findings, finding_row).map_err(fail(OutputTable::Discrepancies))?;
        let resolved = resolved
            .map(|batches| rows(&batches, resolved_row))
            .transpose()
            .map_err(fail(OutputTable::Resolved))?;
        Ok(RunOutputs { folder: folder.clone(), manifest, cut, tasks, findings, resolved })
    }

    /// The run id.
    pub fn run_id(&self) -> &str {
        &self.manifest.run_id
    }

    /// Refuses a run whose self-checks failed (docs/SEMANTICS.md INCOMPLETE, exit 3): its
    /// findings may come from a broken export and must not drive compensation, unless
    /// the caller says so (`allow`).
    pub fn check_complete(&self, allow: bool) -> Result<()> {
        if allow || self.manifest.status != RunStatus::Incomplete {
            return Ok(());
        }
        Err(Error::Argument {
            name: "--run",
            message: format!(
                "run {} is INCOMPLETE ({}); its findings may come from a broken export: fix it and rerun, or pass --allow-incomplete",
                self.run_id(),
                self.manifest.reasons.join("; ")
            ),
        })
    }
}

/// A run file whose rows break the contract (docs/OUTPUTS.md).
pub(crate) fn run_error(location: String, e: RowError) -> Error {
    Error::Run { location, message: e.to_string(), source: Some(Box::new(e)) }
}

/// Why a row of a run's output cannot be read as the contract says.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RowError {
    /// A column of another type than the contract's, and not castable to it.
    #[error("column {column}: {source}")]
    Cast {
        /// The column.
        column: String,
        /// Arrow's cast error.
        #[source]
        source: ArrowError,
    },
    /// A column the contract requires is absent.
    #[error("column {0} is missing")]
    Missing(String),
    /// A required value is NULL, or the column has a type the row cannot read.
    #[error("column {column} is NULL or of type {data_type} in row {row}")]
    NullOrMistyped {
        /// The column.
        column: String,
        /// Its type in the file.
        data_type: DataType,
        /// The row, from 0 in the file order.
        row: usize,
    },
    /// A text outside the column's vocabulary.
    #[error("column {column}, row {row}: {source}")]
    Unknown {
        /// The column.
        column: String,
        /// The row.
        row: usize,
        /// The unknown name.
        #[source]
        source: UnknownName,
    },
}

/// The batches of one output table the run must have: a manifest that does not list it
/// is an error naming the table.
pub(crate) async fn read_table(
    folder: &Location,
    manifest: &RunManifest,
    table: OutputTable,
) -> Result<Vec<RecordBatch>> {
    read_table_if_listed(folder, manifest, table).await?.ok_or_else(|| Error::Run {
        location: folder.display(MANIFEST),
        message: format!("lists no table '{}'", table.name()),
        source: None,
    })
}

/// The batches of one output table; `None` when the manifest does not list it (a run
/// written before the table existed).
pub(crate) async fn read_table_if_listed(
    folder: &Location,
    manifest: &RunManifest,
    table: OutputTable,
) -> Result<Option<Vec<RecordBatch>>> {
    let Some(files) = manifest.tables.get(table.name()) else { return Ok(None) };
    let mut batches = Vec::new();
    for entry in &files.files {
        let fail = |message: String| Error::Run {
            location: folder.display(&entry.path),
            message,
            source: None,
        };
        let bytes = folder
            .read_optional(&entry.path)
            .await?
            .ok_or_else(|| fail("listed in manifest.json but absent".into()))?;
        let (read, _) = read_parquet(bytes).map_err(|e| Error::Run {
            location: folder.display(&entry.path),
            message: format!("unreadable Parquet: {e}"),
            source: Some(Box::new(e)),
        })?;
        let rows: usize = read.iter().map(RecordBatch::num_rows).sum();
        if rows as u64 != entry.rows {
            return Err(fail(format!("{rows} rows, manifest.json says {}", entry.rows)));
        }
        batches.extend(read);
    }
    Ok(Some(batches))
}

/// Each row of `batches` as `row` reads it.
pub(crate) fn rows<T>(
    batches: &[RecordBatch],
    row: fn(&Typed, usize) -> Result<T, RowError>,
) -> Result<Vec<T>, RowError> {
    let mut out = Vec::new();
    for batch in batches {
        let typed = Typed::of(batch)?;
        for i in 0..batch.num_rows() {
            out.push(row(&typed, i)?);
        }
    }
    Ok(out)
}

/// The columns of one batch by name, cast once to the types the rows read.
pub(crate) struct Typed {
    columns: Vec<(String, ArrayRef)>,
}

impl Typed {
    pub(crate) fn of(batch: &RecordBatch) -> Result<Self, RowError> {
        let mut columns = Vec::new();
        for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
            let wanted = match field.data_type() {
                DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
                DataType::LargeList(item) | DataType::ListView(item) => {
                    DataType::List(Arc::clone(item))
                }
                DataType::Int8 | DataType::Int16 | DataType::UInt8 | DataType::UInt16 => {
                    DataType::Int32
                }
                // Instants of any unit and zone become UTC microseconds.
                DataType::Timestamp(_, _) => DataType::Int64,
                other => other.clone(),
            };
            let column = match field.data_type() {
                DataType::Timestamp(_, zone) => {
                    cast(column, &DataType::Timestamp(TimeUnit::Microsecond, zone.clone()))
                        .map_err(|source| RowError::Cast { column: field.name().clone(), source })?
                }
                _ => Arc::clone(column),
            };
            let cast = cast(&column, &wanted)
                .map_err(|source| RowError::Cast { column: field.name().clone(), source })?;
            columns.push((field.name().clone(), cast));
        }
        Ok(Typed { columns })
    }

    fn get(&self, name: &str) -> Option<&ArrayRef> {
        self.columns.iter().find(|(n, _)| n == name).map(|(_, c)| c)
    }

    /// A nullable text column (absent column = NULL).
    pub(crate) fn text(&self, name: &str, i: usize) -> Option<String> {
        let column = self.get(name)?;
        if column.is_null(i) || column.data_type() != &DataType::Utf8 {
            return None;
        }
        Some(column.as_string::<i32>().value(i).to_string())
    }

    pub(crate) fn int64(&self, name: &str, i: usize) -> Option<i64> {
        let column = self.get(name)?;
        if column.is_null(i) {
            return None;
        }
        match column.data_type() {
            DataType::Int64 => Some(column.as_primitive::<Int64Type>().value(i)),
            DataType::Int32 => Some(i64::from(column.as_primitive::<Int32Type>().value(i))),
            _ => None,
        }
    }

    /// A boolean column (absent or NULL = `None`).
    pub(crate) fn boolean(&self, name: &str, i: usize) -> Option<bool> {
        let column = self.get(name)?;
        if column.is_null(i) || column.data_type() != &DataType::Boolean {
            return None;
        }
        Some(column.as_boolean().value(i))
    }

    pub(crate) fn int32(&self, name: &str, i: usize) -> Option<i32> {
        self.int64(name, i).and_then(|v| i32::try_from(v).ok())
    }

    pub(crate) fn list(&self, name: &str, i: usize) -> Option<Vec<String>> {
        let column = self.get(name)?;
        if column.is_null(i) {
            return None;
        }
        let DataType::List(_) = column.data_type() else { return None };
        let values = cast(&column.as_list::<i32>().value(i), &DataType::Utf8).ok()?;
        let values = values.as_string::<i32>();
        Some(
            (0..values.len())
                .filter(|&j| !values.is_null(j))
                .map(|j| values.value(j).into())
                .collect(),
        )
    }

    /// A column the contract says is never NULL.
    fn required<T>(&self, name: &str, i: usize, value: Option<T>) -> Result<T, RowError> {
        value.ok_or_else(|| match self.get(name) {
            None => RowError::Missing(name.to_string()),
            Some(c) => RowError::NullOrMistyped {
                column: name.to_string(),
                data_type: c.data_type().clone(),
                row: i,
            },
        })
    }

    pub(crate) fn req_text(&self, name: &str, i: usize) -> Result<String, RowError> {
        self.required(name, i, self.text(name, i))
    }

    pub(crate) fn req_int64(&self, name: &str, i: usize) -> Result<i64, RowError> {
        self.required(name, i, self.int64(name, i))
    }

    /// A nullable column of one of the contract's vocabularies; a text outside it is an
    /// error naming the column and row, never a default.
    pub(crate) fn name<T: FromStr<Err = UnknownName>>(
        &self,
        name: &str,
        i: usize,
    ) -> Result<Option<T>, RowError> {
        self.text(name, i)
            .map(|text| {
                text.parse().map_err(|source| RowError::Unknown {
                    column: name.to_string(),
                    row: i,
                    source,
                })
            })
            .transpose()
    }

    /// A vocabulary column the contract says is never NULL.
    pub(crate) fn req_name<T: FromStr<Err = UnknownName>>(
        &self,
        name: &str,
        i: usize,
    ) -> Result<T, RowError> {
        let value = self.name(name, i)?;
        self.required(name, i, value)
    }
}

pub(crate) fn task_row(t: &Typed, i: usize) -> Result<TaskRow, RowError> {
    Ok(TaskRow {
        task_id: t.req_text("task_id", i)?,
        effect: t.req_text("effect", i)?,
        order_id: t.req_int64("order_id", i)?,
        class: t.req_name("class", i)?,
        action: t.req_name("action", i)?,
        command: t.text("command", i),
        reopen_msg_id: t.text("reopen_msg_id", i),
        reverse_receipt_ids: t.list("reverse_receipt_ids", i),
        priority: t.int32("priority", i).unwrap_or(0),
        idempotency_key: t.req_text("idempotency_key", i)?,
        attempt: t.int32("attempt", i),
    })
}

pub(crate) fn finding_row(t: &Typed, i: usize) -> Result<FindingRow, RowError> {
    Ok(FindingRow {
        finding_id: t.req_text("finding_id", i)?,
        effect: t.req_text("effect", i)?,
        order_id: t.req_int64("order_id", i)?,
        class: t.req_name("class", i)?,
        verdict: t.req_name("verdict", i)?,
        ledger_action: t.name("ledger_action", i)?,
        msg_id: t.text("msg_id", i),
        topic: t.text("topic", i),
        kafka_partition: t.int32("kafka_partition", i),
        kafka_offset: t.int64("kafka_offset", i),
        consumer_id: t.text("consumer_id", i),
        due_at: t.int64("due_at", i),
        reorder_suspected: t.boolean("reorder_suspected", i).unwrap_or(false),
        lifecycle: t.name("lifecycle", i)?,
        first_break_on: t.int64("first_break_on", i),
    })
}

fn resolved_row(t: &Typed, i: usize) -> Result<ResolvedRow, RowError> {
    Ok(ResolvedRow {
        finding_id: t.req_text("finding_id", i)?,
        effect: t.req_text("effect", i)?,
        order_id: t.req_int64("order_id", i)?,
        class: t.req_name("class", i)?,
        resolution: t.req_name("resolution", i)?,
        receipt_id: t.text("receipt_id", i),
    })
}

pub(crate) fn skip_row(t: &Typed, i: usize) -> Result<SkipRow, RowError> {
    Ok(SkipRow {
        msg_id: t.req_text("msg_id", i)?,
        order_id: t.req_int64("order_id", i)?,
        event_type: t.text("event_type", i).unwrap_or_default(),
        decided_at: t.int64("decided_at", i),
        verdict: t.req_name("verdict", i)?,
        lifecycle: t.name("lifecycle", i)?,
    })
}
