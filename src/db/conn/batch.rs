//! Arrow batches of the contract types, filled one database value at a time.
//!
//! Every value passes through [`BatchBuilder`], which enforces the contract's NULL rules
//! and Int32 range, so a batch it returns always has exactly `Table::schema()`.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Int32Builder, Int64Builder, StringBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use crate::snapshot::{ColumnKind, ColumnSpec, Table, KEY_SPEC, UTC};

/// Why a value could not be appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ValueError {
    /// The value breaks the contract; the message says how (`is NULL; ...`).
    Invalid(String),
    /// A broken invariant of the exporter (a bug, not bad data).
    Internal(String),
}

impl From<String> for ValueError {
    fn from(message: String) -> Self {
        ValueError::Invalid(message)
    }
}

/// One column being built.
enum ColumnBuilder {
    Text(StringBuilder),
    Int64(Int64Builder),
    Int32(Int32Builder),
    Timestamp(TimestampMicrosecondBuilder),
}

/// Rows of one table being collected into a batch.
pub(super) struct BatchBuilder {
    schema: SchemaRef,
    specs: Vec<ColumnSpec>,
    columns: Vec<ColumnBuilder>,
    rows: usize,
}

impl BatchBuilder {
    /// An empty builder for `table`; `keyed`: the contract's columns then `recon_key`
    /// (an incremental snapshot's files, [`crate::snapshot::chain`]).
    pub(super) fn new(table: Table, keyed: bool, capacity: usize) -> Self {
        let mut specs = table.columns().to_vec();
        let schema = if keyed {
            specs.push(KEY_SPEC);
            crate::snapshot::chain::file_schema(table)
        } else {
            table.schema()
        };
        let columns = specs.iter().map(|spec| new_column(spec.kind, capacity)).collect();
        BatchBuilder { schema, specs, columns, rows: 0 }
    }

    /// The columns, in order.
    pub(super) fn specs(&self) -> &[ColumnSpec] {
        &self.specs
    }

    /// Rows appended since the last [`BatchBuilder::finish`].
    pub(super) fn rows(&self) -> usize {
        self.rows
    }

    /// Appends an integer (or NULL) to column `index`.
    pub(super) fn push_int(&mut self, index: usize, value: Option<i64>) -> Result<(), ValueError> {
        let value = self.check_null(index, value)?;
        match &mut self.columns[index] {
            ColumnBuilder::Int64(b) => b.append_option(value),
            ColumnBuilder::Int32(b) => {
                let narrowed = value
                    .map(|v| {
                        i32::try_from(v)
                            .map_err(|_| format!("value {v} does not fit the contract's Int32"))
                    })
                    .transpose()?;
                b.append_option(narrowed)
            }
            _ => return Err(internal("integer pushed into a non-integer column")),
        }
        Ok(())
    }

    /// Appends a string (or NULL) to column `index`.
    pub(super) fn push_text(
        &mut self,
        index: usize,
        value: Option<&str>,
    ) -> Result<(), ValueError> {
        let value = self.check_null(index, value)?;
        match &mut self.columns[index] {
            ColumnBuilder::Text(b) => b.append_option(value),
            _ => return Err(internal("text pushed into a non-text column")),
        }
        Ok(())
    }

    /// Appends an instant in UTC microseconds (or NULL) to column `index`.
    pub(super) fn push_timestamp(
        &mut self,
        index: usize,
        value: Option<i64>,
    ) -> Result<(), ValueError> {
        let value = self.check_null(index, value)?;
        match &mut self.columns[index] {
            ColumnBuilder::Timestamp(b) => b.append_option(value),
            _ => return Err(internal("timestamp pushed into a non-timestamp column")),
        }
        Ok(())
    }

    /// Marks the end of a row (after one push per column).
    pub(super) fn end_row(&mut self) {
        self.rows += 1;
    }

    /// The rows collected so far as one batch; the builder starts over empty.
    pub(super) fn finish(&mut self) -> Result<RecordBatch, ValueError> {
        let arrays: Vec<ArrayRef> = self
            .columns
            .iter_mut()
            .map(|c| -> ArrayRef {
                match c {
                    ColumnBuilder::Text(b) => Arc::new(b.finish()),
                    ColumnBuilder::Int64(b) => Arc::new(b.finish()),
                    ColumnBuilder::Int32(b) => Arc::new(b.finish()),
                    ColumnBuilder::Timestamp(b) => Arc::new(b.finish().with_timezone(UTC)),
                }
            })
            .collect();
        self.rows = 0;
        RecordBatch::try_new(Arc::clone(&self.schema), arrays)
            .map_err(|e| ValueError::Internal(format!("building a batch: {e}")))
    }

    fn check_null<T>(&self, index: usize, value: Option<T>) -> Result<Option<T>, ValueError> {
        if value.is_none() && !self.specs[index].nullable {
            return Err(ValueError::Invalid("is NULL; the contract says it must not be".into()));
        }
        Ok(value)
    }
}

fn internal(message: &str) -> ValueError {
    ValueError::Internal(message.to_string())
}

fn new_column(kind: ColumnKind, capacity: usize) -> ColumnBuilder {
    match kind {
        ColumnKind::Text => {
            ColumnBuilder::Text(StringBuilder::with_capacity(capacity, capacity * 16))
        }
        ColumnKind::Int64 => ColumnBuilder::Int64(Int64Builder::with_capacity(capacity)),
        ColumnKind::Int32 => ColumnBuilder::Int32(Int32Builder::with_capacity(capacity)),
        ColumnKind::Timestamp => {
            ColumnBuilder::Timestamp(TimestampMicrosecondBuilder::with_capacity(capacity))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_breaks_are_invalid_values_and_kind_mix_ups_are_internal() {
        let mut b = BatchBuilder::new(Table::Ledger, false, 4);
        let null = "is NULL; the contract says it must not be".to_string();
        assert_eq!(b.push_text(0, None), Err(ValueError::Invalid(null)));
        let too_big = "value 4294967296 does not fit the contract's Int32".to_string();
        assert_eq!(b.push_int(7, Some(1 << 32)), Err(ValueError::Invalid(too_big)));
        let mixed = "text pushed into a non-text column".to_string();
        assert_eq!(b.push_text(1, Some("x")), Err(ValueError::Internal(mixed)));
    }
}
