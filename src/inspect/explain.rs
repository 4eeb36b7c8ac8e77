//! `explain`: one order's whole story in time order — status changes, every ledger
//! decision, receipts — and, with a run, the findings, skip verdicts and tasks about it,
//! with the out-of-order processing that caused an incident spelled out in words.
//!
//! The snapshot is read through the same registered tables as `run` and `sql`; each table
//! is filtered on `order_id`, so the Parquet readers prune row groups (and, for sorted
//! snapshots, whole files) by their `order_id` statistics instead of scanning everything.

use std::time::{Duration, Instant};

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::prelude::{col, lit, SessionContext};
use serde_json::{json, Value};

use crate::engine::session::{self, SessionOptions};
use crate::error::{Error, Result};
use crate::run_folder::reader::Typed;
use crate::run_folder::OutputTable;
use crate::snapshot::Snapshot;
use crate::storage::Location;
use crate::time::{format_instant, Micros};

/// One entry of the story.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// When it happened (`None`: a run's verdict without an instant).
    pub at: Option<Micros>,
    /// `status`, `ledger`, `receipt`, `finding`, `skip_verdict`, `task`.
    pub kind: &'static str,
    /// One line for people.
    pub text: String,
    /// The row, for `--format json`.
    pub fields: Value,
}

/// The kinds of events, in the order the story tells events of one instant.
pub const KINDS: [&str; 6] = ["status", "ledger", "receipt", "finding", "skip_verdict", "task"];

/// An order's story.
#[derive(Debug, Clone)]
pub struct Timeline {
    /// The order.
    pub order_id: i64,
    /// Events sorted by time (events without an instant last), at one instant by
    /// [`KINDS`] and then by text.
    pub events: Vec<Event>,
    /// The reorders, in words: a later offset decided before an earlier one.
    pub reorders: Vec<String>,
    /// How long the lookup took.
    pub elapsed: Duration,
}

impl Timeline {
    /// The story as text, one event per line.
    pub fn render(&self) -> String {
        let mut out = format!("order {}\n", self.order_id);
        for e in &self.events {
            let at = e.at.map_or_else(|| "-".repeat(20), format_instant);
            out.push_str(&format!("{at:<27} {:<12} {}\n", e.kind, e.text));
        }
        if self.events.is_empty() {
            out.push_str("no rows about this order in the snapshot (or run)\n");
        }
        for r in &self.reorders {
            out.push_str(&format!("reorder: {r}\n"));
        }
        out
    }

    /// The story as one JSON object.
    pub fn to_json(&self) -> Value {
        json!({
            "order_id": self.order_id,
            "events": self.events.iter().map(|e| json!({
                "at": e.at.map(format_instant),
                "kind": e.kind,
                "text": e.text,
                "fields": e.fields,
            })).collect::<Vec<_>>(),
            "reorders": self.reorders,
            "elapsed_ms": self.elapsed.as_secs_f64() * 1000.0,
        })
    }
}

/// Builds the story of `order_id` from a snapshot and, optionally, a run.
pub async fn explain(
    snapshot: &Location,
    run: Option<&Location>,
    order_id: i64,
) -> Result<Timeline> {
    let started = Instant::now();
    let ctx = session::build(&SessionOptions::default())?;
    Snapshot::open(snapshot).await?.register_files(&ctx).await?;
    if let Some(folder) = run {
        crate::run_folder::reader::register(&ctx, folder).await?;
    }
    let mut events = Vec::new();
    let history = rows(&ctx, "status_history", order_id).await?;
    each(&history, |t, i| {
        events.push(Event {
            at: t.int64("changed_at", i),
            kind: "status",
            text: format!("status -> {}", t.text("status", i).unwrap_or_default()),
            fields: json!({ "status": t.text("status", i) }),
        })
    });
    let ledger = rows(&ctx, "ledger", order_id).await?;
    let decisions = ledger_events(&ledger, &mut events);
    let receipts = rows(&ctx, "receipts", order_id).await?;
    each(&receipts, |t, i| events.push(receipt_event(t, i)));
    if run.is_some() {
        run_events(&ctx, order_id, &mut events).await?;
    }
    // Rows come back in scan order, which varies between runs when a table spans several
    // partitions: events at one instant are ordered by source (as pushed), then by text.
    events.sort_by(|a, b| {
        let key = |e: &Event| (e.at.is_none(), e.at, KINDS.iter().position(|k| *k == e.kind));
        key(a).cmp(&key(b)).then_with(|| a.text.cmp(&b.text))
    });
    Ok(Timeline { order_id, events, reorders: reorders(&decisions), elapsed: started.elapsed() })
}

/// The rows of `table` about the order.
async fn rows(ctx: &SessionContext, table: &str, order_id: i64) -> Result<Vec<RecordBatch>> {
    let context = |e| Error::query(format!("explain: reading {table}"), e);
    let frame = ctx.table(table).await.map_err(context)?;
    frame
        .filter(col("order_id").eq(lit(order_id)))
        .map_err(context)?
        .collect()
        .await
        .map_err(context)
}

fn each(batches: &[RecordBatch], mut f: impl FnMut(&Typed, usize)) {
    for batch in batches {
        // A batch that cannot be typed holds no usable rows; the registered tables are conformed.
        let Ok(typed) = Typed::of(batch) else { continue };
        for i in 0..batch.num_rows() {
            f(&typed, i);
        }
    }
}

/// One ledger decision, kept for the reorder check.
#[derive(Debug, Clone)]
struct Decision {
    msg_id: String,
    topic: Option<String>,
    partition: Option<i32>,
    offset: Option<i64>,
    consumer: Option<String>,
    decided_at: Micros,
}

fn ledger_events(batches: &[RecordBatch], events: &mut Vec<Event>) -> Vec<Decision> {
    let mut decisions = Vec::new();
    each(batches, |t, i| {
        let d = Decision {
            msg_id: t.text("msg_id", i).unwrap_or_default(),
            topic: t.text("topic", i),
            partition: t.int32("kafka_partition", i),
            offset: t.int64("kafka_offset", i),
            consumer: t.text("consumer_id", i),
            decided_at: t.int64("decided_at", i).unwrap_or_default(),
        };
        let show = |v: Option<String>| v.unwrap_or_else(|| "NULL".into());
        let text = format!(
            "{} {} -> {} (expected {}, observed {}) {}/{}@{} by {}",
            d.msg_id,
            show(t.text("event_type", i)),
            show(t.text("action", i)),
            show(t.text("expected_status", i)),
            show(t.text("observed_status", i)),
            show(d.topic.clone()),
            show(d.partition.map(|p| p.to_string())),
            show(d.offset.map(|o| o.to_string())),
            show(d.consumer.clone()),
        );
        events.push(Event {
            at: Some(d.decided_at),
            kind: "ledger",
            text,
            fields: json!({
                "msg_id": d.msg_id, "event_type": t.text("event_type", i),
                "action": t.text("action", i), "expected_status": t.text("expected_status", i),
                "observed_status": t.text("observed_status", i), "topic": d.topic,
                "kafka_partition": d.partition, "kafka_offset": d.offset,
                "consumer_id": d.consumer, "decided_at": format_instant(d.decided_at),
            }),
        });
        decisions.push(d);
    });
    decisions
}

fn receipt_event(t: &Typed, i: usize) -> Event {
    let text = format!(
        "{} {} {} (msg {})",
        t.text("receipt_id", i).unwrap_or_default(),
        t.text("effect", i).unwrap_or_default(),
        t.text("status", i).unwrap_or_default(),
        t.text("msg_id", i).unwrap_or_else(|| "NULL".into()),
    );
    Event {
        at: t.int64("created_at", i),
        kind: "receipt",
        text,
        fields: json!({
            "receipt_id": t.text("receipt_id", i), "effect": t.text("effect", i),
            "status": t.text("status", i), "msg_id": t.text("msg_id", i),
        }),
    }
}

/// The run's findings (at `break_on`), skip verdicts (at `decided_at`) and tasks.
async fn run_events(ctx: &SessionContext, order_id: i64, events: &mut Vec<Event>) -> Result<()> {
    let findings = rows(ctx, OutputTable::Discrepancies.name(), order_id).await?;
    each(&findings, |t, i| {
        let text = format!(
            "{} {} {} (evidence {}, ledger {}, reorder_suspected {}){}",
            t.text("effect", i).unwrap_or_default(),
            t.text("class", i).unwrap_or_default(),
            t.text("verdict", i).unwrap_or_default(),
            t.text("msg_id", i).unwrap_or_else(|| "none".into()),
            t.text("ledger_action", i).unwrap_or_else(|| "none".into()),
            t.boolean("reorder_suspected", i).unwrap_or(false),
            t.text("lifecycle", i).map(|l| format!(" {l}")).unwrap_or_default(),
        );
        events.push(Event {
            at: t.int64("break_on", i),
            kind: "finding",
            text,
            fields: json!({
                "finding_id": t.text("finding_id", i), "effect": t.text("effect", i),
                "class": t.text("class", i), "verdict": t.text("verdict", i),
                "msg_id": t.text("msg_id", i), "ledger_action": t.text("ledger_action", i),
                "reorder_suspected": t.boolean("reorder_suspected", i),
                "lifecycle": t.text("lifecycle", i),
            }),
        });
    });
    let skips = rows(ctx, OutputTable::SkipVerdicts.name(), order_id).await?;
    each(&skips, |t, i| {
        events.push(Event {
            at: t.int64("decided_at", i),
            kind: "skip_verdict",
            text: format!(
                "{} skip of {} judged {}",
                t.text("msg_id", i).unwrap_or_default(),
                t.text("event_type", i).unwrap_or_default(),
                t.text("verdict", i).unwrap_or_default()
            ),
            fields: json!({ "msg_id": t.text("msg_id", i), "verdict": t.text("verdict", i) }),
        })
    });
    let tasks = rows(ctx, OutputTable::CompensationTasks.name(), order_id).await?;
    each(&tasks, |t, i| {
        // A reversal names its command (the rule's `reversal`, if any) and every receipt.
        let reversing = t.list("reverse_receipt_ids", i).map(|r| r.join(","));
        let what = match (t.text("command", i), t.text("reopen_msg_id", i), reversing) {
            (Some(c), Some(m), _) => format!("{c}, reopen {m}"),
            (Some(c), None, Some(receipts)) => format!("{c} {receipts}"),
            (Some(c), None, None) => c,
            (None, _, receipts) => receipts.unwrap_or_default(),
        };
        events.push(Event {
            at: None,
            kind: "task",
            text: format!(
                "{} {} {} {}",
                t.text("task_id", i).unwrap_or_default(),
                t.text("effect", i).unwrap_or_default(),
                t.text("action", i).unwrap_or_default(),
                what
            ),
            fields: json!({
                "task_id": t.text("task_id", i), "effect": t.text("effect", i),
                "action": t.text("action", i), "command": t.text("command", i),
                "reopen_msg_id": t.text("reopen_msg_id", i), "attempt": t.int32("attempt", i),
            }),
        })
    });
    Ok(())
}

/// Pairs on one topic and partition where the larger offset was decided first.
fn reorders(decisions: &[Decision]) -> Vec<String> {
    let clock = |t: Micros| {
        let text = format_instant(t);
        text.split('T').nth(1).map(|s| s.trim_end_matches('Z').to_string()).unwrap_or(text)
    };
    let mut out = Vec::new();
    for late in decisions {
        for early in decisions {
            let same = late.topic.is_some()
                && late.topic == early.topic
                && late.partition.is_some()
                && late.partition == early.partition;
            let (Some(lo), Some(eo)) = (late.offset, early.offset) else { continue };
            if same && lo > eo && late.decided_at < early.decided_at {
                out.push(format!(
                    "{} (offset {lo}) was decided at {} by {}, before {} (offset {eo}) at {} by {}",
                    late.msg_id,
                    clock(late.decided_at),
                    late.consumer.as_deref().unwrap_or("an unknown consumer"),
                    early.msg_id,
                    clock(early.decided_at),
                    early.consumer.as_deref().unwrap_or("an unknown consumer"),
                ));
            }
        }
    }
    out.sort();
    out
}
