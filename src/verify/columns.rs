//! Reading the columns `verify` compares, by name, with errors naming file and column.

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, Int32Type, Int64Type, TimeUnit, TimestampMicrosecondType,
};
use datafusion::arrow::record_batch::RecordBatch;

use super::{Life, Resolved};
use crate::error::{Error, Result};

/// The columns of one batch, read by name.
pub(super) struct Columns<'a> {
    pub(super) batch: &'a RecordBatch,
    pub(super) file: &'a str,
}

impl Columns<'_> {
    pub(super) fn text(&self, name: &str) -> Result<Vec<Option<String>>> {
        strings(self.batch, name, self.file)
    }

    pub(super) fn life(&self) -> Result<Vec<Life>> {
        let (lifecycle, first_seen_run) = (self.text("lifecycle")?, self.text("first_seen_run")?);
        let first_break_on = timestamps(self.batch, "first_break_on", self.file)?;
        let runs_open = ints32(self.batch, "runs_open", self.file)?;
        let rechecked = bools(self.batch, "rechecked", self.file)?;
        Ok((0..self.batch.num_rows())
            .map(|i| Life {
                lifecycle: lifecycle[i].clone(),
                first_seen_run: first_seen_run[i].clone(),
                first_break_on: first_break_on[i],
                runs_open: runs_open[i],
                rechecked: rechecked[i],
            })
            .collect())
    }

    pub(super) fn resolved(&self) -> Result<Vec<Resolved>> {
        let (class, first_seen_run) = (self.text("class")?, self.text("first_seen_run")?);
        let first_break_on = timestamps(self.batch, "first_break_on", self.file)?;
        let runs_open = ints32(self.batch, "runs_open", self.file)?;
        let (resolution, receipt_id) = (self.text("resolution")?, self.text("receipt_id")?);
        Ok((0..self.batch.num_rows())
            .map(|i| Resolved {
                class: class[i].clone().unwrap_or_default(),
                first_seen_run: first_seen_run[i].clone(),
                first_break_on: first_break_on[i],
                runs_open: runs_open[i],
                resolution: resolution[i].clone().unwrap_or_default(),
                receipt_id: receipt_id[i].clone(),
            })
            .collect())
    }
}

fn strings(batch: &RecordBatch, name: &str, file: &str) -> Result<Vec<Option<String>>> {
    let fail = |message: String| Error::Column {
        file: file.into(),
        column: name.into(),
        message,
        source: None,
    };
    let column = batch.column_by_name(name).ok_or_else(|| fail("missing".into()))?;
    let column = cast(column, &DataType::Utf8).map_err(|e| fail(format!("not text: {e}")))?;
    Ok(column.as_string::<i32>().iter().map(|v| v.map(str::to_string)).collect())
}

pub(super) fn ints(batch: &RecordBatch, name: &str, file: &str) -> Result<Vec<i64>> {
    let fail = |message: String| Error::Column {
        file: file.into(),
        column: name.into(),
        message,
        source: None,
    };
    let column = batch.column_by_name(name).ok_or_else(|| fail("missing".into()))?;
    let column = column
        .as_primitive_opt::<Int64Type>()
        .ok_or_else(|| fail(format!("has type {}, expected Int64", column.data_type())))?;
    if column.null_count() > 0 {
        return Err(fail("holds NULLs".into()));
    }
    Ok(column.values().to_vec())
}

fn ints32(batch: &RecordBatch, name: &str, file: &str) -> Result<Vec<Option<i32>>> {
    let fail = |message: String| Error::Column {
        file: file.into(),
        column: name.into(),
        message,
        source: None,
    };
    let column = batch.column_by_name(name).ok_or_else(|| fail("missing".into()))?;
    let column = column
        .as_primitive_opt::<Int32Type>()
        .ok_or_else(|| fail(format!("has type {}, expected Int32", column.data_type())))?;
    Ok(column.iter().collect())
}

fn timestamps(batch: &RecordBatch, name: &str, file: &str) -> Result<Vec<Option<i64>>> {
    let fail = |message: String| Error::Column {
        file: file.into(),
        column: name.into(),
        message,
        source: None,
    };
    let column = batch.column_by_name(name).ok_or_else(|| fail("missing".into()))?;
    if !matches!(column.data_type(), DataType::Timestamp(_, _)) {
        return Err(fail(format!("has type {}, expected a timestamp", column.data_type())));
    }
    let utc = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    let column = cast(column, &utc).map_err(|e| fail(format!("not a timestamp: {e}")))?;
    Ok(column.as_primitive::<TimestampMicrosecondType>().iter().collect())
}

fn bools(batch: &RecordBatch, name: &str, file: &str) -> Result<Vec<Option<bool>>> {
    let fail = |message: String| Error::Column {
        file: file.into(),
        column: name.into(),
        message,
        source: None,
    };
    let column = batch.column_by_name(name).ok_or_else(|| fail("missing".into()))?;
    let column = column
        .as_boolean_opt()
        .ok_or_else(|| fail(format!("has type {}, expected Boolean", column.data_type())))?;
    Ok(column.iter().collect())
}
