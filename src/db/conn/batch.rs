//! Arrow batches of the contract types, filled one database value at a time.
//!
//! Every value passes through [`BatchBuilder`], which enforces the contract's NULL rules
//! and Int32 range, so a batch it returns always has the contract's columns, types and
//! nullability, but for one thing: the text columns of few distinct values
//! ([`REPEATED_TEXT`]) are held as a dictionary, one `u32` key per row into the values
//! the chunk has met so far (up to [`REPEATED_VALUES_MAX`] of them). A chunk is held whole
//! until it is sorted, and those columns were two fifths of its bytes; the sort turns them
//! back into plain text ([`crate::db::export`]'s `sort`), so files hold the contract's
//! types.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Int32Builder, Int64Builder, StringBuilder, StringDictionaryBuilder,
    TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef, UInt32Type};
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

/// The contract's text columns whose values repeat from row to row: statuses, event
/// types, actions, topic, consumers, effects.
const REPEATED_TEXT: [&str; 8] = [
    "event_type",
    "expected_status",
    "action",
    "observed_status",
    "topic",
    "consumer_id",
    "status",
    "effect",
];

/// Distinct values a [`REPEATED_TEXT`] column of one chunk is held as a dictionary for;
/// one with more (consumer ids that change every restart, say) turns plain text.
const REPEATED_VALUES_MAX: usize = 1024;

/// One column being built.
enum ColumnBuilder {
    Text(StringBuilder),
    /// A [`REPEATED_TEXT`] column: its values are kept across batches, so every batch of
    /// one builder gives a value the same key.
    Repeated(StringDictionaryBuilder<UInt32Type>),
    Int64(Int64Builder),
    Int32(Int32Builder),
    Timestamp(TimestampMicrosecondBuilder),
}

/// Rows of one table being collected into a batch.
pub(super) struct BatchBuilder {
    /// The contract's columns (and `recon_key` when keyed), as the files hold them.
    contract: SchemaRef,
    specs: Vec<ColumnSpec>,
    columns: Vec<ColumnBuilder>,
    rows: usize,
    /// Rows a batch is built for.
    capacity: usize,
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
        let columns = specs.iter().map(|spec| new_column(spec, capacity)).collect();
        BatchBuilder { contract: schema, specs, columns, rows: 0, capacity }
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
            ColumnBuilder::Repeated(b) => match value {
                Some(v) => {
                    b.append(v).map_err(|e| internal(&e.to_string()))?;
                }
                None => b.append_null(),
            },
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
        let capacity = self.capacity;
        let arrays: Vec<ArrayRef> = self.columns.iter_mut().map(|c| c.take(capacity)).collect();
        self.rows = 0;
        RecordBatch::try_new(held_schema(&self.contract, &arrays), arrays)
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

impl ColumnBuilder {
    /// The column's rows as an array; the builder goes on with room for `capacity` rows.
    ///
    /// A builder's own `finish` leaves it without capacity: the next batch would grow
    /// every buffer by doubling, and a chunk's batches (all held until it is sorted) would
    /// carry up to twice the bytes of their values. So each column starts over sized like
    /// the batch before.
    fn take(&mut self, capacity: usize) -> ArrayRef {
        use std::mem::replace;
        match self {
            // Its values stay, so that a value has the same key in every batch. Each batch
            // holds a copy of them: past `REPEATED_VALUES_MAX` they would cost more than
            // they save, and the column goes on as plain text.
            ColumnBuilder::Repeated(b) => {
                let array = b.finish_preserve_values();
                if array.values().len() > REPEATED_VALUES_MAX {
                    *self = ColumnBuilder::Text(first_text_builder(capacity));
                }
                Arc::new(array)
            }
            ColumnBuilder::Text(b) => {
                let bytes = b.values_slice().len();
                Arc::new(replace(b, text_builder(capacity, bytes)).finish())
            }
            ColumnBuilder::Int64(b) => {
                Arc::new(replace(b, Int64Builder::with_capacity(capacity)).finish())
            }
            ColumnBuilder::Int32(b) => {
                Arc::new(replace(b, Int32Builder::with_capacity(capacity)).finish())
            }
            ColumnBuilder::Timestamp(b) => Arc::new(
                replace(b, TimestampMicrosecondBuilder::with_capacity(capacity))
                    .finish()
                    .with_timezone(UTC),
            ),
        }
    }
}

/// Text bytes per row a first batch is sized for.
const FIRST_TEXT_BYTES_PER_ROW: usize = 16;

fn new_column(spec: &ColumnSpec, capacity: usize) -> ColumnBuilder {
    match spec.kind {
        ColumnKind::Text if REPEATED_TEXT.contains(&spec.name) => {
            ColumnBuilder::Repeated(StringDictionaryBuilder::with_capacity(capacity, 64, 1024))
        }
        ColumnKind::Text => ColumnBuilder::Text(first_text_builder(capacity)),
        ColumnKind::Int64 => ColumnBuilder::Int64(Int64Builder::with_capacity(capacity)),
        ColumnKind::Int32 => ColumnBuilder::Int32(Int32Builder::with_capacity(capacity)),
        ColumnKind::Timestamp => {
            ColumnBuilder::Timestamp(TimestampMicrosecondBuilder::with_capacity(capacity))
        }
    }
}

/// A text builder for the first batch of `rows` rows, before any tells how long its values are.
fn first_text_builder(rows: usize) -> StringBuilder {
    text_builder(rows, rows * FIRST_TEXT_BYTES_PER_ROW)
}

/// A text builder for `rows` rows and about `bytes` bytes: an eighth more, as the next
/// batch of a source is rarely larger by more.
fn text_builder(rows: usize, bytes: usize) -> StringBuilder {
    StringBuilder::with_capacity(rows, bytes + bytes / 8)
}

/// `contract` with each column typed as its array is held: a repeated column as a
/// dictionary (until it turns plain).
fn held_schema(contract: &Schema, arrays: &[ArrayRef]) -> SchemaRef {
    let fields: Vec<Field> = contract
        .fields()
        .iter()
        .zip(arrays)
        .map(|(field, array)| field.as_ref().clone().with_data_type(array.data_type().clone()))
        .collect();
    Arc::new(Schema::new_with_metadata(fields, contract.metadata().clone()))
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::DataType;

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

    /// Appends one receipts row: receipt_id, order_id, effect, msg_id, status, created_at.
    fn receipt(b: &mut BatchBuilder, id: &str, effect: &str, msg: Option<&str>, status: &str) {
        b.push_text(0, Some(id)).unwrap();
        b.push_int(1, Some(7)).unwrap();
        b.push_text(2, Some(effect)).unwrap();
        b.push_text(3, msg).unwrap();
        b.push_text(4, Some(status)).unwrap();
        b.push_timestamp(5, Some(0)).unwrap();
        b.end_row();
    }

    fn strings(array: &dyn Array) -> Vec<Option<&str>> {
        array.as_string::<i32>().iter().collect()
    }

    #[test]
    fn repeated_text_is_held_as_keys_that_mean_the_same_in_every_batch() {
        let mut b = BatchBuilder::new(Table::Receipts, false, 2);
        receipt(&mut b, "r1", "POINTS", Some("m1"), "DONE");
        receipt(&mut b, "r2", "WMS_LOCK", None, "DONE");
        let first = b.finish().unwrap();
        receipt(&mut b, "r3", "WMS_LOCK", Some("m3"), "REVERSED");
        let second = b.finish().unwrap();

        fn effects(batch: &RecordBatch) -> (Vec<u32>, Vec<Option<&str>>) {
            let dict = batch.column(2).as_dictionary::<UInt32Type>();
            (dict.keys().values().to_vec(), strings(dict.values().as_ref()))
        }
        assert_eq!(effects(&first), (vec![0, 1], vec![Some("POINTS"), Some("WMS_LOCK")]));
        assert_eq!(effects(&second), (vec![1], vec![Some("POINTS"), Some("WMS_LOCK")]));
        let statuses = second.column(4).as_dictionary::<UInt32Type>();
        assert_eq!(strings(statuses.values().as_ref()), [Some("DONE"), Some("REVERSED")]);
        // Ids and msg_ids (NULL included) stay plain text.
        assert_eq!(strings(first.column(0).as_ref()), [Some("r1"), Some("r2")]);
        assert_eq!(strings(first.column(3).as_ref()), [Some("m1"), None]);
        assert_eq!(first.schema().field(2).data_type(), second.schema().field(2).data_type());
    }

    #[test]
    fn text_buffers_after_the_first_batch_are_sized_to_their_values() {
        // 17-byte ids: grown by doubling, 8192 of them would sit in 256 KiB for 136 KiB.
        let rows = 8192;
        let mut b = BatchBuilder::new(Table::Receipts, false, rows);
        for round in 0..2 {
            for i in 0..rows {
                receipt(&mut b, &format!("receipt-{round}-{i:07}"), "POINTS", None, "DONE");
            }
            let batch = b.finish().unwrap();
            let ids = batch.column(0).to_data();
            let (bytes, capacity) = (ids.buffers()[1].len(), ids.buffers()[1].capacity());
            assert_eq!(bytes, rows * 17);
            if round == 1 {
                assert!(capacity * 4 <= bytes * 5, "{capacity} bytes held for {bytes}");
            }
        }
    }

    #[test]
    fn a_repeated_column_of_too_many_values_goes_on_as_plain_text() {
        let mut b = BatchBuilder::new(Table::Receipts, false, 4);
        let statuses: Vec<String> = (0..=REPEATED_VALUES_MAX).map(|i| format!("S{i}")).collect();
        for status in &statuses {
            receipt(&mut b, "r", "POINTS", None, status);
        }
        let many = b.finish().unwrap();
        receipt(&mut b, "r", "POINTS", None, "S0");
        let after = b.finish().unwrap();
        let dictionary = DataType::Dictionary(Box::new(DataType::UInt32), Box::new(DataType::Utf8));
        assert_eq!(many.schema().field(4).data_type(), &dictionary);
        assert_eq!(after.schema().field(4).data_type(), &DataType::Utf8);
        assert_eq!(strings(after.column(4).as_ref()), [Some("S0")]);
        // The effect met one value: it stays a dictionary.
        assert_eq!(after.schema().field(2).data_type(), &dictionary);
    }
}
