//! A finished run's outputs read back as typed rows, for the tools that take a run into
//! the systems that act on it (`publish`, `reopen`, `explain`).
//!
//! Only the files the run's `manifest.json` lists are read, and each file's row count is
//! checked against the manifest. The reader follows docs/OUTPUTS.md across versions:
//! `compensation_tasks.attempt` and the `resolved` table are used when the run has them
//! and are `None` for runs written before the lifecycle existed.

use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int32Type, Int64Type, TimeUnit};
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::error::{Error, Result};
use crate::recon::lifecycle::RunStatus;
use crate::recon::publish::{read_run_manifest, RunManifest};
use crate::storage::Location;
use crate::time::{parse_instant, Micros};

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
    pub class: String,
    /// `EXECUTE_EFFECT`, `REVERSE_EFFECT` or `INVESTIGATE`.
    pub action: String,
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
    pub class: String,
    /// RECEIPT, VOIDED, REVERSED, NOW_DUE, RECLASSIFIED or EXPIRED.
    pub resolution: String,
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
    pub class: String,
    /// BREAK or PENDING.
    pub verdict: String,
    /// The evidence row's ledger action.
    pub ledger_action: Option<String>,
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
    /// §9 `lifecycle` (NEW, PERSISTING) when the run has it.
    pub lifecycle: Option<String>,
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
        let cut = parse_instant(&manifest.cut).map_err(|m| Error::Output {
            location: folder.display("manifest.json"),
            message: format!("cut: {m}"),
        })?;
        let tasks = read_table(folder, &manifest, "compensation_tasks", true).await?;
        let findings = read_table(folder, &manifest, "discrepancies", true).await?;
        let resolved = read_table(folder, &manifest, "resolved", false).await?;
        let fail = |table: &'static str| move |m: String| output_error(folder.display(table), m);
        let tasks = rows(&tasks, task_row).map_err(fail("compensation_tasks"))?;
        let findings = rows(&findings, finding_row).map_err(fail("discrepancies"))?;
        let resolved = match resolved {
            Some(batches) => Some(rows(&Some(batches), resolved_row).map_err(fail("resolved"))?),
            None => None,
        };
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

pub(crate) fn output_error(location: String, message: String) -> Error {
    Error::Output { location, message }
}

/// The batches of one output table; `None` when the manifest does not list it.
pub(crate) async fn read_table(
    folder: &Location,
    manifest: &RunManifest,
    table: &str,
    required: bool,
) -> Result<Option<Vec<RecordBatch>>> {
    let Some(files) = manifest.tables.get(table) else {
        if required {
            return Err(output_error(
                folder.display("manifest.json"),
                format!("lists no table '{table}'"),
            ));
        }
        return Ok(None);
    };
    let mut batches = Vec::new();
    for entry in &files.files {
        let fail = |message: String| output_error(folder.display(&entry.path), message);
        let bytes = folder
            .read_optional(&entry.path)
            .await?
            .ok_or_else(|| fail("listed in manifest.json but absent".into()))?;
        let read = read_parquet(bytes).map_err(fail)?;
        let rows: usize = read.iter().map(RecordBatch::num_rows).sum();
        if rows as u64 != entry.rows {
            return Err(fail(format!("{rows} rows, manifest.json says {}", entry.rows)));
        }
        batches.extend(read);
    }
    Ok(Some(batches))
}

fn read_parquet(bytes: Bytes) -> Result<Vec<RecordBatch>, String> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .and_then(|b| b.with_batch_size(8192).build())
        .map_err(|e| format!("unreadable Parquet: {e}"))?;
    reader.map(|b| b.map_err(|e| format!("unreadable Parquet: {e}"))).collect()
}

/// Each row of `batches` as `row` reads it.
pub(crate) fn rows<T>(
    batches: &Option<Vec<RecordBatch>>,
    row: fn(&Typed, usize) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    let mut out = Vec::new();
    for batch in batches.iter().flatten() {
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
    pub(crate) fn of(batch: &RecordBatch) -> Result<Self, String> {
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
                        .map_err(|e| format!("column {}: {e}", field.name()))?
                }
                _ => Arc::clone(column),
            };
            let cast =
                cast(&column, &wanted).map_err(|e| format!("column {}: {e}", field.name()))?;
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
    fn required<T>(&self, name: &str, i: usize, value: Option<T>) -> Result<T, String> {
        value.ok_or_else(|| match self.get(name) {
            None => format!("column {name} is missing"),
            Some(c) => format!("column {name} is NULL or of type {} in row {i}", c.data_type()),
        })
    }

    pub(crate) fn req_text(&self, name: &str, i: usize) -> Result<String, String> {
        self.required(name, i, self.text(name, i))
    }

    pub(crate) fn req_int64(&self, name: &str, i: usize) -> Result<i64, String> {
        self.required(name, i, self.int64(name, i))
    }
}

pub(crate) fn task_row(t: &Typed, i: usize) -> Result<TaskRow, String> {
    Ok(TaskRow {
        task_id: t.req_text("task_id", i)?,
        effect: t.req_text("effect", i)?,
        order_id: t.req_int64("order_id", i)?,
        class: t.req_text("class", i)?,
        action: t.req_text("action", i)?,
        command: t.text("command", i),
        reopen_msg_id: t.text("reopen_msg_id", i),
        reverse_receipt_ids: t.list("reverse_receipt_ids", i),
        priority: t.int32("priority", i).unwrap_or(0),
        idempotency_key: t.req_text("idempotency_key", i)?,
        attempt: t.int32("attempt", i),
    })
}

fn finding_row(t: &Typed, i: usize) -> Result<FindingRow, String> {
    Ok(FindingRow {
        finding_id: t.req_text("finding_id", i)?,
        effect: t.req_text("effect", i)?,
        order_id: t.req_int64("order_id", i)?,
        class: t.req_text("class", i)?,
        verdict: t.req_text("verdict", i)?,
        ledger_action: t.text("ledger_action", i),
        msg_id: t.text("msg_id", i),
        topic: t.text("topic", i),
        kafka_partition: t.int32("kafka_partition", i),
        kafka_offset: t.int64("kafka_offset", i),
        consumer_id: t.text("consumer_id", i),
        lifecycle: t.text("lifecycle", i),
    })
}

fn resolved_row(t: &Typed, i: usize) -> Result<ResolvedRow, String> {
    Ok(ResolvedRow {
        finding_id: t.req_text("finding_id", i)?,
        effect: t.req_text("effect", i)?,
        order_id: t.req_int64("order_id", i)?,
        class: t.req_text("class", i)?,
        resolution: t.req_text("resolution", i)?,
        receipt_id: t.text("receipt_id", i),
    })
}
