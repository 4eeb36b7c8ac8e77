//! A chained run judges only the orders whose outputs can change (`sql/judged_orders.sql`):
//! their rows of the three snapshot tables are read once, kept in memory and registered
//! in place of the tables, so every later query of the run reads them alone. The outputs
//! are the ones judging every order gives (docs/SEMANTICS.md "What a chained run judges").
//!
//! Where the reach of the listing bound covers most of what the snapshot holds (a lone
//! day), or the judged rows would not fit the run's memory, every order is judged as
//! before.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, Int64Array};
use datafusion::arrow::datatypes::Int64Type;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{JoinType, ScalarValue};
use datafusion::prelude::{col, lit, Expr, SessionContext};
use futures::TryStreamExt;

use super::Bounds;
use crate::config::RuleSet;
use crate::engine::queries::{self, Param};
use crate::engine::{staging, udf};
use crate::error::{Error, Result};
use crate::snapshot::{Table, UTC};
use crate::time::Micros;

/// The judged orders as a session table, on a cluster.
const JUDGED_TABLE: &str = "judged_orders";

/// At most this many `order_id` ranges prune the row groups the judged rows are read
/// from: each is one more comparison per row read.
const MAX_RANGES: usize = 16;

/// What a restricted run judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Judged {
    /// The orders judged.
    pub orders: u64,
    /// Their rows in the three snapshot tables.
    pub rows: u64,
    /// Rows after this instant make an order judged.
    pub reach: Micros,
}

/// Replaces the snapshot tables of `ctx` by the rows of the orders this run can change,
/// when that is worth it: `bounds.coverage_from` set (the run follows a previous one over
/// a `snapshot@2`), the snapshot reaching back at least as far before the reach as the
/// reach lies before the cut, and the rows fitting in `max_rows`. `None`: the tables are
/// left whole. Needs the `previous_*` tables registered.
pub(super) async fn restrict(
    ctx: &SessionContext,
    rules: &RuleSet,
    bounds: &Bounds,
    max_rows: u64,
) -> Result<Option<Judged>> {
    let Some(coverage_from) = bounds.coverage_from else { return Ok(None) };
    let longest_grace = rules.rules.iter().map(|r| r.grace_micros).max().unwrap_or(0);
    let reach = bounds.list_since.saturating_sub(longest_grace.max(0));
    let cut = bounds.window.cut;
    if reach.saturating_sub(coverage_from) < cut.saturating_sub(reach) {
        return Ok(None);
    }
    let mut params = bounds.params();
    params.push(("reach", ScalarValue::TimestampMicrosecond(Some(reach), Some(UTC.into()))));
    let orders = judged_orders(ctx, &params).await?;
    let ranges = ranges(&orders, MAX_RANGES);
    let judged_orders = orders.len() as u64;
    // In process a predicate (pushed below an incremental snapshot's merge, so only these
    // orders' rows are merged); on a cluster, which knows no function of ours, a semi-join
    // with the orders as a table.
    let in_orders = if staging::is_distributed(ctx) {
        let ids = Int64Array::from(orders);
        let batch = RecordBatch::try_from_iter([("order_id", Arc::new(ids) as Arc<dyn Array>)])
            .map_err(|e| Error::Internal(format!("judged orders: {e}")))?;
        staging::register_batches(ctx, JUDGED_TABLE, batch.schema(), vec![batch]).await?;
        None
    } else {
        Some(udf::in_orders(orders).call(vec![col("order_id")]))
    };
    let mut restricted = Vec::new();
    let mut rows = 0u64;
    for table in Table::ALL {
        let context = |e| Error::query(format!("reading the judged orders' {}", table.name()), e);
        let frame = ctx
            .table(table.name())
            .await
            .map_err(context)?
            .filter(in_ranges(&ranges))
            .map_err(context)?;
        let frame = match &in_orders {
            Some(predicate) => frame.filter(predicate.clone()).map_err(context)?,
            None => {
                let judged = ctx.table(JUDGED_TABLE).await.map_err(context)?;
                frame
                    .join(judged, JoinType::LeftSemi, &["order_id"], &["order_id"], None)
                    .map_err(context)?
            }
        };
        let schema = Arc::new(frame.schema().as_arrow().clone());
        let mut stream = frame.execute_stream().await.map_err(context)?;
        let mut batches = Vec::new();
        while let Some(batch) = stream.try_next().await.map_err(context)? {
            rows += batch.num_rows() as u64;
            if rows > max_rows {
                // Too many to keep: the run judges every order, reading the tables as
                // they are (nothing was replaced yet).
                return Ok(None);
            }
            batches.push(batch);
        }
        restricted.push((table, schema, batches));
    }
    for (table, schema, batches) in restricted {
        staging::register_batches(ctx, table.name(), schema, batches).await?;
    }
    Ok(Some(Judged { orders: judged_orders, rows, reach }))
}

/// The ids of `sql/judged_orders.sql`, sorted here (the ranges must not depend on how the
/// engine delivered the batches).
async fn judged_orders(ctx: &SessionContext, params: &[Param]) -> Result<Vec<i64>> {
    let batches = queries::collect(ctx, queries::JUDGED_ORDERS, params).await?;
    let mut orders = Vec::new();
    for batch in &batches {
        let ids = batch
            .column_by_name("order_id")
            .and_then(|c| c.as_primitive_opt::<Int64Type>())
            .ok_or_else(|| Error::Internal("judged_orders: no Int64 order_id".into()))?;
        orders.extend(ids.iter().flatten());
    }
    orders.sort_unstable();
    Ok(orders)
}

/// At most `max` closed ranges covering every id of the sorted `orders`: the widest gaps
/// between consecutive ids stay out, the narrower ones are bridged.
fn ranges(orders: &[i64], max: usize) -> Vec<(i64, i64)> {
    let (Some(&first), Some(&last)) = (orders.first(), orders.last()) else { return Vec::new() };
    let mut gaps: Vec<(i128, usize)> = orders
        .windows(2)
        .enumerate()
        .map(|(i, pair)| (i128::from(pair[1]) - i128::from(pair[0]), i))
        .filter(|&(width, _)| width > 1)
        .collect();
    // Widest first; equal widths by position, so the choice is deterministic.
    gaps.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut cuts: Vec<usize> = gaps.iter().take(max.saturating_sub(1)).map(|&(_, i)| i).collect();
    cuts.sort_unstable();
    let mut ranges = Vec::with_capacity(cuts.len() + 1);
    let mut start = first;
    for i in cuts {
        ranges.push((start, orders[i]));
        start = orders[i + 1];
    }
    ranges.push((start, last));
    ranges
}

/// `order_id` in one of `ranges` (nothing when there are none): a predicate the scans
/// prune row groups with.
fn in_ranges(ranges: &[(i64, i64)]) -> Expr {
    ranges
        .iter()
        .map(|&(lo, hi)| col("order_id").between(lit(lo), lit(hi)))
        .reduce(Expr::or)
        .unwrap_or(lit(false))
}

#[cfg(test)]
mod tests {
    use super::ranges;

    #[test]
    fn ranges_keep_the_widest_gaps_out_and_cover_every_id() {
        let orders = [1, 2, 3, 50, 51, 1000, 1001, 1002, 5000];
        assert_eq!(ranges(&orders, 1), vec![(1, 5000)]);
        assert_eq!(ranges(&orders, 2), vec![(1, 1002), (5000, 5000)]);
        assert_eq!(ranges(&orders, 3), vec![(1, 51), (1000, 1002), (5000, 5000)]);
        assert_eq!(ranges(&orders, 10), vec![(1, 3), (50, 51), (1000, 1002), (5000, 5000)]);
        assert!(ranges(&[], 4).is_empty());
        for max in 1..6 {
            let covered = ranges(&orders, max);
            assert!(covered.len() <= max);
            assert!(orders.iter().all(|o| covered.iter().any(|&(lo, hi)| lo <= *o && *o <= hi)));
        }
    }
}
