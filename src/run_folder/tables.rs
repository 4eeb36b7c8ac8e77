//! The output tables of docs/OUTPUTS.md and their exact Arrow schemas.
//!
//! Query results are conformed to these schemas before writing, so every file has the
//! same types and nullability whatever plan produced it.

use std::sync::Arc;

use datafusion::arrow::compute::{cast, concat_batches};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};
use crate::snapshot::UTC;

/// One output table of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputTable {
    /// Every finding.
    Discrepancies,
    /// One task per BREAK finding.
    CompensationTasks,
    /// One verdict per SKIPPED ledger row of the window, and per carried PENDING skip.
    SkipVerdicts,
    /// The previous run's open findings this run closes, and why (docs/SEMANTICS.md).
    Resolved,
}

impl OutputTable {
    /// All outputs, in writing order.
    pub const ALL: [OutputTable; 4] = [
        OutputTable::Discrepancies,
        OutputTable::CompensationTasks,
        OutputTable::SkipVerdicts,
        OutputTable::Resolved,
    ];

    /// Table and folder name.
    pub fn name(self) -> &'static str {
        match self {
            OutputTable::Discrepancies => "discrepancies",
            OutputTable::CompensationTasks => "compensation_tasks",
            OutputTable::SkipVerdicts => "skip_verdicts",
            OutputTable::Resolved => "resolved",
        }
    }

    /// The exact schema written.
    pub fn schema(self) -> SchemaRef {
        let text = |name: &str, nullable: bool| Field::new(name, DataType::Utf8, nullable);
        let time = |name: &str, nullable: bool| {
            Field::new(name, DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into())), nullable)
        };
        let fields = match self {
            OutputTable::Discrepancies => vec![
                text("finding_id", false),
                text("effect", false),
                Field::new("order_id", DataType::Int64, false),
                text("class", false),
                text("verdict", false),
                time("due_at", true),
                time("break_on", false),
                text("ledger_action", true),
                text("msg_id", true),
                text("observed_status", true),
                text("topic", true),
                Field::new("kafka_partition", DataType::Int32, true),
                Field::new("kafka_offset", DataType::Int64, true),
                text("consumer_id", true),
                time("decided_at", true),
                Field::new("receipt_count", DataType::Int64, false),
                Field::new("reorder_suspected", DataType::Boolean, false),
                Field::new("priority", DataType::Int32, false),
                text("lifecycle", true),
                text("first_seen_run", true),
                time("first_break_on", true),
                Field::new("runs_open", DataType::Int32, false),
                Field::new("rechecked", DataType::Boolean, false),
            ],
            OutputTable::CompensationTasks => vec![
                text("task_id", false),
                text("effect", false),
                Field::new("order_id", DataType::Int64, false),
                text("class", false),
                text("action", false),
                text("command", true),
                text("reopen_msg_id", true),
                Field::new(
                    "reverse_receipt_ids",
                    DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
                    true,
                ),
                Field::new("priority", DataType::Int32, false),
                text("idempotency_key", false),
                Field::new("attempt", DataType::Int32, false),
            ],
            OutputTable::SkipVerdicts => vec![
                text("msg_id", false),
                Field::new("order_id", DataType::Int64, false),
                text("event_type", false),
                time("decided_at", false),
                text("verdict", false),
                text("lifecycle", false),
            ],
            OutputTable::Resolved => vec![
                text("finding_id", false),
                text("effect", false),
                Field::new("order_id", DataType::Int64, false),
                text("class", false),
                text("first_seen_run", false),
                time("first_break_on", false),
                Field::new("runs_open", DataType::Int32, false),
                text("resolution", false),
                text("receipt_id", true),
            ],
        };
        Arc::new(Schema::new(fields))
    }

    /// One batch with exactly [`OutputTable::schema`], from query results whose columns
    /// are in the same order (types are cast where the engine chose another encoding).
    pub fn conform(self, batches: &[RecordBatch]) -> Result<RecordBatch> {
        let conformed = self.conform_each(batches)?;
        concat_batches(&self.schema(), &conformed)
            .map_err(|e| Error::Internal(format!("output {}: {e}", self.name())))
    }

    /// [`OutputTable::conform`] batch by batch, without concatenating them.
    pub fn conform_each(self, batches: &[RecordBatch]) -> Result<Vec<RecordBatch>> {
        let schema = self.schema();
        let fail = |message: String| Error::Internal(format!("output {}: {message}", self.name()));
        let mut conformed = Vec::with_capacity(batches.len());
        for batch in batches {
            if batch.num_columns() != schema.fields().len() {
                return Err(fail(format!(
                    "query returned {} columns, expected {}",
                    batch.num_columns(),
                    schema.fields().len()
                )));
            }
            let mut columns = Vec::with_capacity(batch.num_columns());
            for (field, column) in schema.fields().iter().zip(batch.columns()) {
                let column = if column.data_type() == field.data_type() {
                    Arc::clone(column)
                } else {
                    cast(column, field.data_type())
                        .map_err(|e| fail(format!("column {}: {e}", field.name())))?
                };
                columns.push(column);
            }
            conformed.push(
                RecordBatch::try_new(Arc::clone(&schema), columns)
                    .map_err(|e| fail(e.to_string()))?,
            );
        }
        Ok(conformed)
    }
}

/// Where two versions of one output table first differ, in words (`None`: identical):
/// the row count, or the first row and column whose values differ.
pub fn first_difference(found: &RecordBatch, expected: &RecordBatch) -> Option<String> {
    if found == expected {
        return None;
    }
    if found.num_rows() != expected.num_rows() {
        return Some(format!("{} rows, expected {}", found.num_rows(), expected.num_rows()));
    }
    let schema = expected.schema();
    for row in 0..expected.num_rows() {
        for (i, field) in schema.fields().iter().enumerate() {
            let (a, b) = (found.column(i).slice(row, 1), expected.column(i).slice(row, 1));
            if a.as_ref() != b.as_ref() {
                let show = |array: &dyn datafusion::arrow::array::Array| {
                    datafusion::arrow::util::display::array_value_to_string(array, 0)
                        .unwrap_or_else(|_| "?".into())
                };
                return Some(format!(
                    "row {row}, column {}: {} where the in-process run has {}",
                    field.name(),
                    show(a.as_ref()),
                    show(b.as_ref())
                ));
            }
        }
    }
    Some("the schemas differ".into())
}
