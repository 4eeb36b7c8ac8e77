//! `gen --live URL --speed N`: a generated day written into a database in event-time
//! order, `N` times faster than it happened, so `watch` can be measured on a live day
//! (docs/WATCH.md "Measured on a replayed day").
//!
//! Everything up to the replay's start is loaded at once (the history a running system
//! already has); then, every tick, the rows whose event time (the contract's event-time
//! column: `decided_at`, `changed_at`, `created_at`) the replay clock has passed are
//! inserted. The clock ([`ReplayClock`]) is handed to the caller before the first tick:
//! `watch` run with it in `EFFECT_RECON_CLOCK` cuts its cycles on the same event time.
//! Each row is written once, at its own event time, in its final state, with one
//! exception: a receipt the order's void handler reversed is written SUCCEEDED and set
//! REVERSED when the order's void arrives (a replay that wrote it REVERSED at once would
//! show a paid order without its grant until the void, a finding the day never had).
//! Other later changes (a ledger row an operator REVOKED) are written as they end.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{
    Array, ArrayRef, Int64Array, StringArray, TimestampMicrosecondArray,
};
use datafusion::arrow::compute::{concat_batches, sort_to_indices, take_record_batch, SortOptions};
use datafusion::arrow::record_batch::RecordBatch;

use crate::db::load::{self, LoadOptions, LoadTable};
use crate::error::{Error, Result};
use crate::snapshot::chain::event_column;
use crate::snapshot::Table;
use crate::storage::Location;
use crate::time::{now_micros, Micros, ReplayClock};

/// A validated replay.
#[derive(Debug, Clone)]
pub struct LivePlan {
    /// The generated snapshot to replay.
    pub snapshot: Location,
    /// The database (the recommended schema is created when missing).
    pub url: String,
    /// Event seconds per wall second.
    pub speed: f64,
    /// The event instant the replay starts at: rows up to it are loaded at once.
    pub from: Micros,
    /// The event instant it ends at (the snapshot's cut).
    pub until: Micros,
    /// Wall time between two inserts.
    pub tick: Duration,
}

/// What a replay wrote.
#[derive(Debug, Clone)]
pub struct LiveReport {
    /// The clock it ran on.
    pub clock: ReplayClock,
    /// Rows loaded before the first tick.
    pub preloaded: u64,
    /// Rows inserted by the ticks.
    pub replayed: u64,
    /// Ticks that inserted rows.
    pub ticks: u64,
    /// Wall time of the replay (after the preload).
    pub elapsed: Duration,
}

/// Replays `plan`; `started` gets the clock once the preload is in, before any tick.
pub async fn replay(plan: &LivePlan, started: impl FnOnce(&ReplayClock)) -> Result<LiveReport> {
    if !(plan.speed >= 1.0 && plan.speed.is_finite()) {
        return Err(Error::argument("--speed", format!("{} must be at least 1", plan.speed)));
    }
    let mut tables = load::read_snapshot(&plan.snapshot).await?;
    let mut reversals = reversals(&mut tables, plan.from)?;
    let tables = sorted_by_time(tables)?;
    let options = LoadOptions::default();
    let preload = rows_between(&tables, Micros::MIN, plan.from)?;
    let preloaded = load::load_tables(&plan.url, &preload, &options).await?.rows();
    let clock =
        ReplayClock { event_origin: plan.from, wall_origin: now_micros(), speed: plan.speed };
    started(&clock);
    let options = LoadOptions { create_schema: false, ..options };
    let wall = Instant::now();
    let (mut done, mut replayed, mut ticks) = (plan.from, 0, 0);
    while done < plan.until {
        tokio::time::sleep(plan.tick).await;
        let now = clock.now().min(plan.until);
        let due = rows_between(&tables, done, now)?;
        if due.iter().any(|t| t.batches.iter().any(|b| b.num_rows() > 0)) {
            replayed += load::load_tables(&plan.url, &due, &options).await?.rows();
            ticks += 1;
        }
        let flipped = reversals.partition_point(|r| r.at <= now);
        for (table, ids) in by_table(reversals.drain(..flipped)) {
            load::mark_reversed(&plan.url, &table, &ids).await?;
        }
        done = now;
    }
    Ok(LiveReport { clock, preloaded, replayed, ticks, elapsed: wall.elapsed() })
}

/// A receipt to set REVERSED at `at`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Reversal {
    at: Micros,
    table: String,
    receipt_id: String,
}

/// The REVERSED receipts whose order's first void after the receipt comes after `from`:
/// rewritten SUCCEEDED in `tables`, and returned in time order to be reversed at that void.
fn reversals(tables: &mut [LoadTable], from: Micros) -> Result<Vec<Reversal>> {
    let mut voids: HashMap<i64, Vec<Micros>> = HashMap::new();
    for table in tables.iter().filter(|t| t.table == Table::StatusHistory) {
        for batch in &table.batches {
            let (orders, statuses, times) =
                (ints(batch, "order_id")?, strings(batch, "status")?, stamps(batch, "changed_at")?);
            for i in 0..batch.num_rows() {
                if VOID_STATUSES.contains(&statuses.value(i)) && times.is_valid(i) {
                    voids.entry(orders.value(i)).or_default().push(times.value(i));
                }
            }
        }
    }
    let mut due = Vec::new();
    for table in tables.iter_mut().filter(|t| t.table == Table::Receipts) {
        let name = load::table_name(Table::Receipts, table.source.as_deref())?;
        for batch in table.batches.iter_mut() {
            let (ids, orders) = (strings(batch, "receipt_id")?, ints(batch, "order_id")?);
            let (statuses, created) = (strings(batch, "status")?, stamps(batch, "created_at")?);
            let mut written = Vec::with_capacity(batch.num_rows());
            for i in 0..batch.num_rows() {
                let void = voids.get(&orders.value(i)).and_then(|times| {
                    times.iter().copied().filter(|&t| t >= created.value(i)).min()
                });
                match void {
                    Some(at) if statuses.value(i) == "REVERSED" && at > from => {
                        let receipt_id = ids.value(i).to_string();
                        due.push(Reversal { at, table: name.clone(), receipt_id });
                        written.push(Some("SUCCEEDED"));
                    }
                    _ => written.push(statuses.is_valid(i).then(|| statuses.value(i))),
                }
            }
            let status: ArrayRef = Arc::new(StringArray::from(written));
            let index = batch.schema().index_of("status").map_err(internal)?;
            let mut columns = batch.columns().to_vec();
            columns[index] = status;
            *batch = RecordBatch::try_new(batch.schema(), columns).map_err(internal)?;
        }
    }
    due.sort();
    Ok(due)
}

/// The void statuses of the generated world.
const VOID_STATUSES: [&str; 2] = ["CANCELLED", "REFUNDED"];

/// Receipt ids per table.
fn by_table(reversals: impl Iterator<Item = Reversal>) -> BTreeMap<String, Vec<String>> {
    let mut tables: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in reversals {
        tables.entry(r.table).or_default().push(r.receipt_id);
    }
    tables
}

fn internal(e: impl std::fmt::Display) -> Error {
    Error::Internal(format!("replay: {e}"))
}

fn column<'a, T: 'static>(batch: &'a RecordBatch, name: &str) -> Result<&'a T> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .ok_or_else(|| internal(format!("no column {name} of the expected type")))
}

fn strings<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a StringArray> {
    column(batch, name)
}

fn ints<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a Int64Array> {
    column(batch, name)
}

fn stamps<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a TimestampMicrosecondArray> {
    column(batch, name)
}

/// Each table as one batch sorted by its event time (rows without one last), so a tick
/// takes its rows as a slice instead of filtering the whole day again.
fn sorted_by_time(tables: Vec<LoadTable>) -> Result<Vec<LoadTable>> {
    tables
        .into_iter()
        .map(|table| {
            let schema = match table.batches.first() {
                Some(batch) => batch.schema(),
                None => return Ok(table),
            };
            let all = concat_batches(&schema, &table.batches).map_err(internal)?;
            let times = all
                .column_by_name(event_column(table.table))
                .ok_or_else(|| internal(format!("no column {}", event_column(table.table))))?;
            let order = SortOptions { descending: false, nulls_first: false };
            let indices = sort_to_indices(times, Some(order), None).map_err(internal)?;
            let sorted = take_record_batch(&all, &indices).map_err(internal)?;
            Ok(LoadTable { batches: vec![sorted], ..table })
        })
        .collect()
}

/// The rows of every table whose event time is in `(after, until]` ([`sorted_by_time`]).
fn rows_between(tables: &[LoadTable], after: Micros, until: Micros) -> Result<Vec<LoadTable>> {
    tables
        .iter()
        .map(|table| {
            let column = event_column(table.table);
            let batches = table
                .batches
                .iter()
                .map(|batch| in_range(batch, column, after, until))
                .collect::<Result<Vec<_>>>()?;
            Ok(LoadTable { table: table.table, source: table.source.clone(), batches })
        })
        .collect()
}

/// The rows of a batch sorted by `column` (nulls last) whose time is in `(after, until]`.
fn in_range(
    batch: &RecordBatch,
    column: &str,
    after: Micros,
    until: Micros,
) -> Result<RecordBatch> {
    let times = stamps(batch, column)?;
    let valid = &times.values()[..times.len() - times.null_count()];
    let from = valid.partition_point(|&t| t <= after);
    let to = valid.partition_point(|&t| t <= until);
    Ok(batch.slice(from, to.saturating_sub(from)))
}
