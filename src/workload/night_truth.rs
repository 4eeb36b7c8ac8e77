//! `truth.parquet` of one night of `gen --nights`: the single-night columns of
//! [`super::truth`] plus the §9 lifecycle columns and the expected `resolved` rows.
//!
//! Columns: `kind` (`finding` | `skip_verdict` | `resolved`), `effect`, `order_id`,
//! `class`, `verdict` (null on resolved rows), `msg_id`, `lifecycle`, `first_seen_run`,
//! `first_break_on`, `runs_open`, `rechecked`, `resolution`, `receipt_id`. Each column
//! holds what the run's table of that kind holds (null where that table has no such
//! column). The schema metadata adds, to the single-night keys, the chain the truth
//! assumes: [`META_ORIGIN`], [`META_LOWER`], [`META_LATE_HORIZON`], [`META_MAX_AGE`],
//! [`META_PREVIOUS_RUN`] (absent on the first night) and [`META_RUN_ID`].

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanBuilder, Int32Builder, Int64Builder, StringBuilder,
    TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;

use super::lifecycle::NightRow;
use super::truth::{FINDING, META_CUT, META_RULES_HASH, META_SINCE, SKIP_VERDICT, TRUTH_FILE};
use crate::config::RuleSet;
use crate::error::{Error, Result};
use crate::snapshot::UTC;
use crate::time::{format_instant, format_whole_unit, Micros};
use crate::vocabulary::Verdict;

/// `kind` of a resolved row.
pub const RESOLVED: &str = "resolved";
/// The chain's origin, RFC 3339.
pub const META_ORIGIN: &str = "effect-recon.truth.origin";
/// The listing bound of findings (exclusive), RFC 3339.
pub const META_LOWER: &str = "effect-recon.truth.list_from";
/// `--late-horizon` the truth assumes.
pub const META_LATE_HORIZON: &str = "effect-recon.truth.late_horizon";
/// `--max-age` the truth assumes.
pub const META_MAX_AGE: &str = "effect-recon.truth.max_age";
/// The run id of the previous night (absent on the first night).
pub const META_PREVIOUS_RUN: &str = "effect-recon.truth.previous_run";
/// The run id this night's run has.
pub const META_RUN_ID: &str = "effect-recon.truth.run_id";

/// What one night's truth was computed for.
#[derive(Debug, Clone)]
pub struct NightContext {
    /// Window start.
    pub since: Micros,
    /// The cut.
    pub cut: Micros,
    /// The chain's origin.
    pub origin: Micros,
    /// Listing bound of findings.
    pub lower: Micros,
    /// Late horizon.
    pub late_horizon: Micros,
    /// Max age.
    pub max_age: Micros,
    /// Run id of every night of the chain, in order.
    pub run_ids: Arc<Vec<String>>,
    /// 0-based night.
    pub index: usize,
}

/// The Arrow schema of a night's `truth.parquet`, with its metadata.
pub fn schema_for(context: &NightContext, rules: &RuleSet) -> SchemaRef {
    let timestamp = DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into()));
    let fields = vec![
        Field::new("kind", DataType::Utf8, false),
        Field::new("effect", DataType::Utf8, true),
        Field::new("order_id", DataType::Int64, false),
        Field::new("class", DataType::Utf8, true),
        Field::new("verdict", DataType::Utf8, true),
        Field::new("msg_id", DataType::Utf8, true),
        Field::new("lifecycle", DataType::Utf8, true),
        Field::new("first_seen_run", DataType::Utf8, true),
        Field::new("first_break_on", timestamp, true),
        Field::new("runs_open", DataType::Int32, true),
        Field::new("rechecked", DataType::Boolean, true),
        Field::new("resolution", DataType::Utf8, true),
        Field::new("receipt_id", DataType::Utf8, true),
    ];
    let mut metadata = HashMap::from([
        (META_CUT.to_string(), format_instant(context.cut)),
        (META_SINCE.to_string(), format_instant(context.since)),
        (META_RULES_HASH.to_string(), rules.hash.clone()),
        (META_ORIGIN.to_string(), format_instant(context.origin)),
        (META_LOWER.to_string(), format_instant(context.lower)),
        (META_LATE_HORIZON.to_string(), format_whole_unit(context.late_horizon)),
        (META_MAX_AGE.to_string(), format_whole_unit(context.max_age)),
        (META_RUN_ID.to_string(), context.run_ids[context.index].clone()),
    ]);
    if context.index > 0 {
        metadata.insert(META_PREVIOUS_RUN.to_string(), context.run_ids[context.index - 1].clone());
    }
    Arc::new(Schema::new(fields).with_metadata(metadata))
}

/// Arrow builders of a night's `truth.parquet`.
#[derive(Debug)]
pub struct NightTruthColumns {
    run_ids: Arc<Vec<String>>,
    kind: StringBuilder,
    effect: StringBuilder,
    order_id: Int64Builder,
    class: StringBuilder,
    verdict: StringBuilder,
    msg_id: StringBuilder,
    lifecycle: StringBuilder,
    first_seen_run: StringBuilder,
    first_break_on: TimestampMicrosecondBuilder,
    runs_open: Int32Builder,
    rechecked: BooleanBuilder,
    resolution: StringBuilder,
    receipt_id: StringBuilder,
}

impl NightTruthColumns {
    /// Builders naming runs by `run_ids` (one per night).
    pub fn new(run_ids: Arc<Vec<String>>) -> Self {
        NightTruthColumns {
            run_ids,
            kind: StringBuilder::new(),
            effect: StringBuilder::new(),
            order_id: Int64Builder::new(),
            class: StringBuilder::new(),
            verdict: StringBuilder::new(),
            msg_id: StringBuilder::new(),
            lifecycle: StringBuilder::new(),
            first_seen_run: StringBuilder::new(),
            first_break_on: TimestampMicrosecondBuilder::new().with_timezone(UTC),
            runs_open: Int32Builder::new(),
            rechecked: BooleanBuilder::new(),
            resolution: StringBuilder::new(),
            receipt_id: StringBuilder::new(),
        }
    }

    /// Appends one row of `order_id`; `effect` names the effect of a rule index.
    pub fn push(&mut self, order_id: i64, row: &NightRow, rules: &RuleSet) {
        self.order_id.append_value(order_id);
        match *row {
            NightRow::Finding { rule, class, verdict, life } => {
                self.kind.append_value(FINDING);
                self.effect.append_value(&rules.rules[rule].effect);
                self.class.append_value(class.as_str());
                self.verdict.append_value(verdict.as_str());
                self.msg_id.append_null();
                self.lifecycle.append_option(life.map(|l| l.lifecycle.as_str()));
                self.first_seen_run.append_option(life.map(|l| &self.run_ids[l.first_seen]));
                self.first_break_on.append_option(life.map(|l| l.first_break_on));
                let runs_open = life.map_or(0, |l| l.runs_open);
                debug_assert!(life.is_some() == (verdict == Verdict::Break));
                self.runs_open.append_value(runs_open);
                self.rechecked.append_value(life.is_none_or(|l| l.rechecked));
                self.resolution.append_null();
                self.receipt_id.append_null();
            }
            NightRow::Skip { msg_id, verdict, lifecycle } => {
                self.kind.append_value(SKIP_VERDICT);
                self.effect.append_null();
                self.class.append_null();
                self.verdict.append_value(verdict.as_str());
                let _ = write!(self.msg_id, "{msg_id}");
                self.msg_id.append_value("");
                self.lifecycle.append_value(lifecycle.as_str());
                self.first_seen_run.append_null();
                self.first_break_on.append_null();
                self.runs_open.append_null();
                self.rechecked.append_null();
                self.resolution.append_null();
                self.receipt_id.append_null();
            }
            NightRow::Resolved { finding, resolution, receipt } => {
                self.kind.append_value(RESOLVED);
                self.effect.append_value(&rules.rules[finding.rule].effect);
                self.class.append_value(finding.class.as_str());
                self.verdict.append_null();
                self.msg_id.append_null();
                self.lifecycle.append_null();
                self.first_seen_run.append_value(&self.run_ids[finding.first_seen]);
                self.first_break_on.append_value(finding.first_break_on);
                self.runs_open.append_value(finding.runs_open);
                self.rechecked.append_null();
                self.resolution.append_value(resolution.as_str());
                match receipt {
                    Some((provider, seq)) => {
                        let _ = write!(self.receipt_id, "{}-{order_id}-{seq}", provider.source());
                        self.receipt_id.append_value("");
                    }
                    None => self.receipt_id.append_null(),
                }
            }
        }
    }

    /// The rows so far as one batch with `schema`; the builders start over.
    pub fn finish(&mut self, schema: &SchemaRef) -> Result<RecordBatch> {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.kind.finish()),
            Arc::new(self.effect.finish()),
            Arc::new(self.order_id.finish()),
            Arc::new(self.class.finish()),
            Arc::new(self.verdict.finish()),
            Arc::new(self.msg_id.finish()),
            Arc::new(self.lifecycle.finish()),
            Arc::new(self.first_seen_run.finish()),
            Arc::new(self.first_break_on.finish()),
            Arc::new(self.runs_open.finish()),
            Arc::new(self.rechecked.finish()),
            Arc::new(self.resolution.finish()),
            Arc::new(self.receipt_id.finish()),
        ];
        RecordBatch::try_new(Arc::clone(schema), columns).map_err(|e| Error::Output {
            location: TRUTH_FILE.into(),
            message: e.to_string(),
            source: Some(Box::new(e)),
        })
    }
}
