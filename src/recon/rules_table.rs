//! The `rules` table the SQL joins against, built from a validated [`RuleSet`].
//!
//! `rule_id` is the rule's position in the file (1-based): the SQL groups by it, since
//! integer keys hash faster than effect names. `grace` is an interval so the SQL can write
//! `due_at + grace`; `void_statuses` is a list that `sql/rule_statuses.sql` unnests;
//! `reversal` is NULL on a rule without one (DESIGN §10.1).

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Int32Array, IntervalMonthDayNanoArray, ListBuilder, StringArray,
    StringBuilder,
};
use datafusion::arrow::datatypes::{
    DataType, Field, IntervalMonthDayNano, IntervalUnit, Schema, SchemaRef,
};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;

use crate::config::RuleSet;
use crate::error::{Error, Result};

/// Name of the table.
pub const RULES_TABLE: &str = "rules";

/// The schema of the `rules` table.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("rule_id", DataType::Int32, false),
        Field::new("effect", DataType::Utf8, false),
        Field::new("trigger_event", DataType::Utf8, false),
        Field::new("due_status", DataType::Utf8, false),
        Field::new(
            "void_statuses",
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            false,
        ),
        Field::new("grace", DataType::Interval(IntervalUnit::MonthDayNano), false),
        Field::new("compensation", DataType::Utf8, false),
        Field::new("priority", DataType::Int32, false),
        Field::new("reverse_on_void", DataType::Boolean, false),
        Field::new("reversal", DataType::Utf8, true),
    ]))
}

/// The rules as one record batch.
pub fn batch(rules: &RuleSet) -> Result<RecordBatch> {
    let strings = |f: fn(&crate::config::Rule) -> &str| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(rules.rules.iter().map(f)))
    };
    let mut voids = ListBuilder::new(StringBuilder::new());
    for rule in &rules.rules {
        for status in &rule.void_statuses {
            voids.values().append_value(status);
        }
        voids.append(true);
    }
    let grace = IntervalMonthDayNanoArray::from_iter_values(
        rules
            .rules
            .iter()
            .map(|r| IntervalMonthDayNano::new(0, 0, r.grace_micros.saturating_mul(1000))),
    );
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from_iter_values(1..=rules.rules.len() as i32)),
        strings(|r| &r.effect),
        strings(|r| &r.trigger_event),
        strings(|r| &r.due_status),
        Arc::new(voids.finish()),
        Arc::new(grace),
        strings(|r| &r.compensation),
        Arc::new(Int32Array::from_iter_values(rules.rules.iter().map(|r| r.priority))),
        Arc::new(BooleanArray::from_iter(rules.rules.iter().map(|r| Some(r.reverse_on_void)))),
        Arc::new(StringArray::from_iter(rules.rules.iter().map(|r| r.reversal.as_deref()))),
    ];
    RecordBatch::try_new(schema(), columns)
        .map_err(|e| Error::config(&rules.origin, format!("building the rules table: {e}")))
}

/// Registers `rules` in the session.
pub fn register(ctx: &SessionContext, rules: &RuleSet) -> Result<()> {
    let table = MemTable::try_new(schema(), vec![vec![batch(rules)?]])
        .map_err(|e| Error::query("registering rules", e))?;
    ctx.register_table(RULES_TABLE, Arc::new(table))
        .map_err(|e| Error::query("registering rules", e))?;
    Ok(())
}
