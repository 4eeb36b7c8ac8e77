//! One chunk's rows put in `order_id` order by the exporter instead of the database: a
//! server-side `ORDER BY` cost MariaDB more than half of the read (a filesort of every
//! chunk), while the exporter sorts a chunk it holds anyway in a fraction of that.
//!
//! The sort is stable: rows with the same `order_id` keep the order the database returned
//! them in, so the same database state gives the same files.
//!
//! A chunk's repeated text columns arrive as dictionaries whose values grow from batch to
//! batch, every batch's values the start of the last one's (`conn::batch`); the rows
//! handed out have them as plain text again, looked up in the last batch's values.

use std::ops::Range;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::{cast, interleave, take};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, UInt32Type};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::record_batch::RecordBatch;

/// The rows of one chunk in `order_id` order, handed out a range at a time so that only
/// the chunk itself and the row groups being encoded, not a second sorted copy of it, are
/// held in memory.
pub(super) struct Sorted {
    batches: Vec<RecordBatch>,
    /// The rows handed out: the batches' columns, dictionaries as their values' type.
    schema: SchemaRef,
    /// Per column held as a dictionary: the values every batch's keys point into.
    values: Vec<Option<ArrayRef>>,
    /// `(key, batch, row)` in output order; empty when the batches are already in order.
    order: Vec<(i64, u32, u32)>,
    batch_rows: usize,
}

impl Sorted {
    /// Sorts `batches` by their Int64 column `key` into batches of at most `batch_rows`.
    pub(super) fn new(
        batches: Vec<RecordBatch>,
        key: usize,
        batch_rows: usize,
    ) -> Result<Self, ArrowError> {
        let (batches, values) = shared_values(batches)?;
        let schema = match batches.first() {
            Some(first) => plain_schema(first.schema_ref()),
            None => Arc::new(Schema::empty()),
        };
        let keys: Vec<&[i64]> = batches
            .iter()
            .map(|b| b.column(key).as_primitive::<Int64Type>().values().as_ref())
            .collect();
        let mut order = Vec::new();
        if !is_sorted(&keys) {
            order.reserve(keys.iter().map(|k| k.len()).sum());
            for (b, values) in keys.iter().enumerate() {
                order.extend(values.iter().enumerate().map(|(r, &v)| (v, b as u32, r as u32)));
            }
            // (key, batch, row) are unique: an unstable sort of them is the stable sort by key.
            order.sort_unstable();
        }
        Ok(Sorted { batches, schema, values, order, batch_rows: batch_rows.max(1) })
    }

    /// Rows in the chunk.
    pub(super) fn len(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }

    /// Rows `range` of the sorted chunk, in batches of at most `batch_rows`. Callable from
    /// several threads at once: each row group of a file is built and encoded on its own.
    pub(super) fn rows(&self, range: Range<usize>) -> Result<Vec<RecordBatch>, ArrowError> {
        if self.order.is_empty() {
            return self.slices(range).iter().map(|b| self.plain(b)).collect();
        }
        let sources: Vec<Vec<&dyn Array>> = (0..self.values.len())
            .map(|c| {
                self.batches.iter().map(|b| gathered_from(b, c, self.values[c].as_ref())).collect()
            })
            .collect();
        self.order[range]
            .chunks(self.batch_rows)
            .map(|slice| {
                let indices: Vec<(usize, usize)> =
                    slice.iter().map(|&(_, b, r)| (b as usize, r as usize)).collect();
                let columns = sources
                    .iter()
                    .zip(&self.values)
                    .map(|(arrays, values)| {
                        let gathered = interleave(arrays, &indices)?;
                        match values {
                            Some(values) => take(values, &gathered, None),
                            None => Ok(gathered),
                        }
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                RecordBatch::try_new(Arc::clone(&self.schema), columns)
            })
            .collect()
    }

    /// `batch` with its dictionary columns as plain values.
    fn plain(&self, batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
        let columns = batch
            .columns()
            .iter()
            .zip(&self.values)
            .map(|(column, values)| match values {
                Some(values) => take(values, column.as_dictionary::<UInt32Type>().keys(), None),
                None => Ok(Arc::clone(column)),
            })
            .collect::<Result<Vec<_>, _>>()?;
        RecordBatch::try_new(Arc::clone(&self.schema), columns)
    }

    /// Rows `range` of batches already in order: zero-copy slices of them.
    fn slices(&self, range: Range<usize>) -> Vec<RecordBatch> {
        let mut out = Vec::new();
        let mut start = 0;
        for batch in &self.batches {
            let end = start + batch.num_rows();
            let (lo, hi) = (range.start.max(start), range.end.min(end));
            if lo < hi {
                let mut at = lo;
                while at < hi {
                    let take = (hi - at).min(self.batch_rows);
                    out.push(batch.slice(at - start, take));
                    at += take;
                }
            }
            start = end;
        }
        out
    }

    /// The sorted batches.
    #[cfg(test)]
    fn batches(&self) -> impl Iterator<Item = Result<RecordBatch, ArrowError>> + '_ {
        self.rows(0..self.len()).unwrap_or_default().into_iter().map(Ok)
    }
}

/// The values each dictionary column's keys point into: the last batch's, when every
/// batch holds the column as a `u32`-keyed dictionary whose values are the start of them
/// (as one builder's batches are). Otherwise (a column that turned plain part-way, say)
/// the column is made plain text in every batch.
fn shared_values(
    mut batches: Vec<RecordBatch>,
) -> Result<(Vec<RecordBatch>, Vec<Option<ArrayRef>>), ArrowError> {
    let Some(last) = batches.last().cloned() else { return Ok((batches, Vec::new())) };
    let mut shared = Vec::with_capacity(last.num_columns());
    for c in 0..last.num_columns() {
        let values = last.column(c).as_dictionary_opt::<UInt32Type>().map(|d| d.values());
        let starts_values =
            |b: &RecordBatch| match (b.column(c).as_dictionary_opt::<UInt32Type>(), values) {
                (Some(own), Some(values)) => {
                    let own = own.values();
                    own.len() <= values.len()
                        && own.to_data() == values.slice(0, own.len()).to_data()
                }
                _ => false,
            };
        if values.is_some() && batches.iter().all(starts_values) {
            shared.push(values.cloned());
            continue;
        }
        for batch in &mut batches {
            *batch = with_plain_column(batch, c)?;
        }
        shared.push(None);
    }
    Ok((batches, shared))
}

/// `batch` with column `c` as plain values when it is a dictionary.
fn with_plain_column(batch: &RecordBatch, c: usize) -> Result<RecordBatch, ArrowError> {
    let schema = batch.schema();
    let field = plain_field(schema.field(c));
    if field.data_type() == schema.field(c).data_type() {
        return Ok(batch.clone());
    }
    let mut columns = batch.columns().to_vec();
    columns[c] = cast(&columns[c], field.data_type())?;
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields[c] = field;
    RecordBatch::try_new(
        Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone())),
        columns,
    )
}

/// What column `c` of `batch` is gathered from: a dictionary's keys, else the column.
fn gathered_from<'a>(batch: &'a RecordBatch, c: usize, values: Option<&ArrayRef>) -> &'a dyn Array {
    match values {
        Some(_) => batch.column(c).as_dictionary::<UInt32Type>().keys(),
        None => batch.column(c).as_ref(),
    }
}

/// `schema` with each dictionary column as its values' type.
fn plain_schema(schema: &SchemaRef) -> SchemaRef {
    let fields: Vec<Field> = schema.fields().iter().map(|f| plain_field(f)).collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// `field` typed as its values when it is a dictionary.
fn plain_field(field: &Field) -> Field {
    match field.data_type() {
        DataType::Dictionary(_, value_type) => {
            field.clone().with_data_type(value_type.as_ref().clone())
        }
        _ => field.clone(),
    }
}

fn is_sorted(keys: &[&[i64]]) -> bool {
    let mut last = i64::MIN;
    for values in keys {
        for &v in values.iter() {
            if v < last {
                return false;
            }
            last = v;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn batch(keys: &[i64], tags: &[&str]) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("tag", DataType::Utf8, false),
            Field::new("order_id", DataType::Int64, false),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(StringArray::from(tags.to_vec())),
                Arc::new(Int64Array::from(keys.to_vec())),
            ],
        )
        .unwrap()
    }

    fn column(batches: &[RecordBatch], i: usize) -> Vec<String> {
        let mut out = Vec::new();
        for b in batches {
            let c = b.column(i);
            out.extend(
                (0..b.num_rows()).map(|r| {
                    datafusion::arrow::util::display::array_value_to_string(c, r).unwrap()
                }),
            );
        }
        out
    }

    #[test]
    fn rows_are_sorted_across_batches_and_ties_keep_the_database_order() {
        let input = vec![batch(&[5, 1, 3], &["a", "b", "c"]), batch(&[1, 5, 2], &["d", "e", "f"])];
        let sorted: Vec<_> =
            Sorted::new(input, 1, 4).unwrap().batches().map(Result::unwrap).collect();
        assert_eq!(sorted.iter().map(|b| b.num_rows()).collect::<Vec<_>>(), vec![4, 2]);
        assert_eq!(column(&sorted, 1), ["1", "1", "2", "3", "5", "5"]);
        assert_eq!(column(&sorted, 0), ["b", "d", "f", "c", "a", "e"]);
    }

    #[test]
    fn sorted_input_is_returned_as_it_is() {
        let input = vec![batch(&[1, 2], &["a", "b"]), batch(&[2, 9], &["c", "d"])];
        let same: Vec<_> =
            Sorted::new(input.clone(), 1, 2).unwrap().batches().map(Result::unwrap).collect();
        assert_eq!(same, input);
        assert_eq!(Sorted::new(Vec::new(), 1, 8).unwrap().batches().count(), 0);
    }

    #[test]
    fn any_range_gives_the_rows_of_the_whole_in_batches_of_at_most_batch_rows() {
        let sorted_input = vec![batch(&[1, 2, 3], &["a", "b", "c"]), batch(&[4, 5], &["d", "e"])];
        let shuffled = vec![batch(&[5, 1, 3], &["e", "a", "c"]), batch(&[4, 2], &["d", "b"])];
        for input in [sorted_input, shuffled] {
            let sorted = Sorted::new(input, 1, 2).unwrap();
            assert_eq!(sorted.len(), 5);
            for (lo, hi) in [(0, 5), (1, 4), (2, 3), (3, 5), (4, 4)] {
                let rows = sorted.rows(lo..hi).unwrap();
                assert!(rows.iter().all(|b| b.num_rows() <= 2), "{lo}..{hi}");
                let expected: Vec<String> = (lo + 1..hi + 1).map(|k| k.to_string()).collect();
                assert_eq!(column(&rows, 1), expected, "{lo}..{hi}");
            }
        }
    }

    /// Batches with `order_id` and a `status` held as a dictionary; `shared`: one builder
    /// for all (every batch's values start the last one's), else one per batch.
    fn dictionary_batches(rows: &[&[(i64, Option<&str>)]], shared: bool) -> Vec<RecordBatch> {
        use datafusion::arrow::array::{Int64Array, StringDictionaryBuilder};
        let schema = Arc::new(Schema::new(vec![
            Field::new("order_id", DataType::Int64, false),
            Field::new(
                "status",
                DataType::Dictionary(Box::new(DataType::UInt32), Box::new(DataType::Utf8)),
                true,
            ),
        ]));
        let mut builder = StringDictionaryBuilder::<UInt32Type>::new();
        rows.iter()
            .map(|rows| {
                if !shared {
                    builder = StringDictionaryBuilder::new();
                }
                let keys = Int64Array::from_iter_values(rows.iter().map(|r| r.0));
                rows.iter().for_each(|r| builder.append_option(r.1));
                let status = builder.finish_preserve_values();
                RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(keys), Arc::new(status)])
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn dictionary_columns_come_out_as_plain_text_in_order() {
        let rows: [&[(i64, Option<&str>)]; 2] =
            [&[(3, Some("PAID")), (1, Some("NEW"))], &[(2, None), (0, Some("SHIPPED"))]];
        let in_order: [&[(i64, Option<&str>)]; 2] =
            [&[(0, Some("NEW")), (1, Some("PAID"))], &[(2, Some("NEW")), (3, None)]];
        for shared in [true, false] {
            let sorted = Sorted::new(dictionary_batches(&rows, shared), 0, 3).unwrap();
            let out: Vec<_> = sorted.batches().map(Result::unwrap).collect();
            assert_eq!(out[0].schema().field(1).data_type(), &DataType::Utf8, "{shared}");
            assert_eq!(column(&out, 0), ["0", "1", "2", "3"]);
            assert_eq!(column(&out, 1), ["SHIPPED", "NEW", "", "PAID"], "{shared}");
            assert_eq!(out[1].column(1).null_count(), 0);
            assert_eq!(out[0].column(1).null_count(), 1);

            let already = Sorted::new(dictionary_batches(&in_order, shared), 0, 3).unwrap();
            let out: Vec<_> = already.batches().map(Result::unwrap).collect();
            assert_eq!(out[0].schema().field(1).data_type(), &DataType::Utf8, "{shared}");
            assert_eq!(column(&out, 1), ["NEW", "PAID", "NEW", ""], "{shared}");
        }
    }

    #[test]
    fn a_column_that_turned_plain_part_way_comes_out_as_plain_text() {
        use datafusion::arrow::array::{Int64Array, StringArray};
        let mut batches = dictionary_batches(&[&[(2, Some("PAID")), (0, None)]], true);
        let schema = Schema::new(vec![
            Field::new("order_id", DataType::Int64, false),
            Field::new("status", DataType::Utf8, true),
        ]);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![1, 3])),
            Arc::new(StringArray::from(vec![Some("DONE"), Some("PAID")])),
        ];
        batches.push(RecordBatch::try_new(Arc::new(schema), columns).unwrap());
        let out: Vec<_> =
            Sorted::new(batches, 0, 8).unwrap().batches().map(Result::unwrap).collect();
        assert_eq!(out[0].schema().field(1).data_type(), &DataType::Utf8);
        assert_eq!(column(&out, 1), ["", "DONE", "PAID", "PAID"]);
    }
}
