//! The SQL driver of a run: the queries of `sql/` executed in order over the registered
//! tables, the small intermediate tables materialised once, the big aggregation one
//! order_id range at a time, each plan kept for `--explain`.

use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::Array;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::execution::memory_pool::MemoryLimit;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::collect;
use datafusion::physical_plan::display::DisplayableExecutionPlan;
use datafusion::physical_plan::metrics::MetricValue;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{DataFrame, SessionContext};

use super::{judged, lifecycle, rules_table, Bounds, Outputs};
use crate::config::RuleSet;
use crate::engine::queries::{self, Param, Query};
use crate::engine::staging;
use crate::error::{Error, Result};
use crate::run_folder::OutputTable;

/// Computes the outputs over the tables registered in `ctx` (snapshot tables must
/// already be there; the `previous_*` tables too when the run follows one, else they are
/// registered empty), aggregating at most `rows_per_pass` input rows at a time. Used by
/// `run`, the tests and the benches.
pub async fn reconcile(
    ctx: &SessionContext,
    rules: &RuleSet,
    bounds: &Bounds,
    rows_per_pass: u64,
    explain: bool,
) -> Result<Outputs> {
    let rules_batch = rules_table::batch(rules)?;
    staging::register_batches(
        ctx,
        rules_table::RULES_TABLE,
        rules_batch.schema(),
        vec![rules_batch],
    )
    .await?;
    if !lifecycle::is_registered(ctx) {
        lifecycle::register_empty(ctx).await?;
    }
    let params = bounds.params();
    let mut plans = Vec::new();
    // A handful of rows; materialised so the planner knows it is tiny and broadcasts it
    // into the status_history join instead of repartitioning status_history.
    materialise(ctx, queries::RULE_STATUSES, &params, explain, &mut plans).await?;
    // The previous run's open findings and the pairs they (and carried skips) watch: at
    // most the backlog, read by several later queries.
    materialise(ctx, queries::PREVIOUS_OPEN, &params, explain, &mut plans).await?;
    materialise(ctx, queries::WATCHED, &params, explain, &mut plans).await?;
    // Kept in memory when restricted: a quarter of what one pass may aggregate.
    let judged = judged::restrict(ctx, rules, bounds, rows_per_pass / 4).await?;
    materialise_effects_in_play(ctx, bounds, rows_per_pass, explain, &mut plans).await?;
    // One receipts pass for the DUPLICATE pairs (candidates, tasks), the UNREVERSED ones
    // (tasks) and the open findings a receipt closes (resolved).
    materialise(ctx, queries::RECEIPTS_IN_PLAY, &params, explain, &mut plans).await?;
    materialise(ctx, queries::RECEIPT_POSITIONS, &params, explain, &mut plans).await?;
    materialise(ctx, queries::CANDIDATES, &params, explain, &mut plans).await?;
    materialise(ctx, queries::CANDIDATE_LEDGER, &params, explain, &mut plans).await?;
    // Registered only now, so that it reads the materialised candidates and their rows.
    queries::register_view(ctx, queries::TRIGGER_EVIDENCE, &params).await?;
    materialise(ctx, queries::FINDINGS, &params, explain, &mut plans).await?;
    // The candidates' ledger rows are read by the findings alone: their memory goes now.
    for read_once in [queries::TRIGGER_EVIDENCE, queries::CANDIDATE_LEDGER] {
        ctx.deregister_table(read_once.name)
            .map_err(|e| Error::query(format!("dropping {}", read_once.name), e))?;
    }
    materialise(ctx, queries::REJUDGED, &params, explain, &mut plans).await?;
    let mut outputs = outputs(ctx, &params, explain, plans).await?;
    outputs.judged = judged;
    Ok(outputs)
}

/// Effects in play and candidates are small and each feeds two later queries: computing
/// them once keeps the big inputs from being aggregated again. The aggregation behind
/// effects in play runs one order_id range at a time so its memory stays bounded.
///
/// On a cluster the ranges are jobs of one task each, submitted together, at least one
/// per task slot (`target_partitions`): the snapshot files are sorted by order_id, so a
/// range's task reads every row of its orders and aggregates them alone. A partitioned
/// aggregation would instead shuffle every partial group through the executors' disks.
async fn materialise_effects_in_play(
    ctx: &SessionContext,
    bounds: &Bounds,
    rows_per_pass: u64,
    explain: bool,
    plans: &mut Vec<(String, String)>,
) -> Result<()> {
    let distributed = staging::is_distributed(ctx);
    let session = effect_state_session(ctx, distributed);
    let at_least = if distributed { ctx.copied_config().target_partitions() } else { 1 };
    let mut jobs = Vec::new();
    for (lo, hi) in order_id_ranges(ctx, rows_per_pass, at_least).await? {
        let range_params = bounds.params_for_orders(lo, hi);
        // Each frame keeps the view it was planned over, so the next range may register
        // its own under the same name.
        queries::register_view(&session, queries::EFFECT_STATE, &range_params).await?;
        let frame = queries::frame(&session, queries::EFFECTS_IN_PLAY, &range_params).await?;
        jobs.push(run(frame, session.task_ctx(), queries::EFFECTS_IN_PLAY, explain));
    }
    // In process one pass at a time: each may take the memory a pass is sized for.
    let done = if distributed {
        futures::future::try_join_all(jobs).await?
    } else {
        let mut done = Vec::new();
        for job in jobs {
            done.push(job.await?);
        }
        done
    };
    let mut in_play = Vec::new();
    for (schema, batches, plan) in done {
        plans.extend(plan);
        in_play.push((schema, batches));
    }
    let schema = in_play.first().map(|(schema, _)| Arc::clone(schema)).ok_or_else(|| {
        Error::Internal(format!("{}: no order_id range was judged", queries::EFFECTS_IN_PLAY.name))
    })?;
    let batches = in_play.into_iter().flat_map(|(_, b)| b).collect();
    staging::register_batches(ctx, queries::EFFECTS_IN_PLAY.name, schema, batches).await
}

/// The same session (the same tables, engine and settings) for effect_state, its Parquet
/// scans decoding every column and filtering after (no row-level filter pushdown), and on
/// a cluster planning every query as one partition. effect_state's filters keep nearly
/// every row (the cut, the rule statuses, the order_id range): decoding the filter columns
/// first and the rest through a row selection then costs more than it saves
/// (`effects_in_play` 570 → 474 ms at 1M orders, benches/RESULTS.md). Row groups are still
/// pruned by their statistics.
fn effect_state_session(ctx: &SessionContext, one_partition: bool) -> SessionContext {
    let mut state = ctx.state();
    let options = state.config_mut().options_mut();
    options.execution.parquet.pushdown_filters = false;
    if one_partition {
        options.execution.target_partitions = 1;
    }
    SessionContext::new_with_state(state)
}

/// The output tables, from the materialised findings and re-judged open findings. The
/// three independent queries run at once (compensation_tasks after the discrepancies it
/// reads): each is small and spends much of its time between operators, so alone they
/// leave the cores idle. Under a memory limit they run one at a time, so that their peaks
/// do not add up. Plans are listed in the order the queries are written.
async fn outputs(
    ctx: &SessionContext,
    params: &[Param],
    explain: bool,
    mut plans: Vec<(String, String)>,
) -> Result<Outputs> {
    let (mut discrepancy_plans, mut skip_plans, mut resolved_plans) =
        (Vec::new(), Vec::new(), Vec::new());
    let discrepancies_and_tasks = async {
        let discrepancies = output(
            ctx,
            OutputTable::Discrepancies,
            queries::DISCREPANCIES,
            params,
            explain,
            &mut discrepancy_plans,
        )
        .await?;
        staging::register_batches(
            ctx,
            OutputTable::Discrepancies.name(),
            discrepancies.schema(),
            vec![discrepancies.clone()],
        )
        .await?;
        let compensation_tasks = output(
            ctx,
            OutputTable::CompensationTasks,
            queries::COMPENSATION_TASKS,
            params,
            explain,
            &mut discrepancy_plans,
        )
        .await?;
        Ok::<_, Error>((discrepancies, compensation_tasks))
    };
    let skip_verdicts = output(
        ctx,
        OutputTable::SkipVerdicts,
        queries::SKIP_VERDICTS,
        params,
        explain,
        &mut skip_plans,
    );
    let resolved =
        output(ctx, OutputTable::Resolved, queries::RESOLVED, params, explain, &mut resolved_plans);
    let ((discrepancies, compensation_tasks), skip_verdicts, resolved) =
        match ctx.runtime_env().memory_pool.memory_limit() {
            MemoryLimit::Infinite => {
                futures::try_join!(discrepancies_and_tasks, skip_verdicts, resolved)?
            }
            _ => (discrepancies_and_tasks.await?, skip_verdicts.await?, resolved.await?),
        };
    plans.extend(discrepancy_plans.into_iter().chain(skip_plans).chain(resolved_plans));
    Ok(Outputs { discrepancies, compensation_tasks, skip_verdicts, resolved, judged: None, plans })
}

/// Runs `query` and conforms its batches to the output `table`'s contract schema.
async fn output(
    ctx: &SessionContext,
    table: OutputTable,
    query: Query,
    params: &[Param],
    explain: bool,
    plans: &mut Vec<(String, String)>,
) -> Result<RecordBatch> {
    table.conform(&execute(ctx, query, params, explain, plans).await?.1)
}

/// The order_id ranges effect_state is computed over: equal-width slices of `[min, max]`,
/// as many as memory needs (`rows_per_pass` input rows each) and at least `at_least`, but
/// no more than there are order_ids; the whole range when that makes one. The snapshot
/// files are sorted by order_id, so each slice reads only its own row groups.
async fn order_id_ranges(
    ctx: &SessionContext,
    rows_per_pass: u64,
    at_least: usize,
) -> Result<Vec<(i64, i64)>> {
    let rows_per_pass = i128::from(rows_per_pass.max(1));
    let at_least = at_least.max(1) as i128;
    let whole = vec![(i64::MIN, i64::MAX)];
    let batches = queries::collect(ctx, queries::ORDER_ID_SPAN, &[]).await?;
    let Some(batch) = batches.iter().find(|b| b.num_rows() > 0) else { return Ok(whole) };
    let (lo, hi, rows) = (
        queries::int64_column(batch, "lo")?,
        queries::int64_column(batch, "hi")?,
        queries::int64_column(batch, "rows")?,
    );
    if lo.is_null(0) || hi.is_null(0) {
        return Ok(whole);
    }
    let (lo, hi) = (i128::from(lo.value(0)), i128::from(hi.value(0)));
    let by_memory = (i128::from(rows.value(0)) + rows_per_pass - 1) / rows_per_pass;
    // No more slices than orders: each must hold at least one order_id.
    let passes = by_memory.max(at_least).min(hi - lo + 1);
    if passes <= 1 {
        return Ok(whole);
    }
    let width = ((hi - lo + 1) + passes - 1) / passes;
    let bound = |v: i128| v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
    Ok((0..passes)
        .map(|i| {
            let start = if i == 0 { i128::from(i64::MIN) } else { lo + i * width };
            let end = if i == passes - 1 { i128::from(i64::MAX) } else { lo + (i + 1) * width - 1 };
            (bound(start), bound(end))
        })
        .collect())
}

async fn execute(
    ctx: &SessionContext,
    query: Query,
    params: &[Param],
    explain: bool,
    plans: &mut Vec<(String, String)>,
) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    // On a cluster, a query of the tables the run built runs in the client.
    let session = staging::driver_for(ctx, query.text).unwrap_or_else(|| ctx.clone());
    let frame = queries::frame(&session, query, params).await?;
    let (schema, batches, plan) = run(frame, session.task_ctx(), query, explain).await?;
    plans.extend(plan);
    Ok((schema, batches))
}

/// Executes a planned query; with `explain`, also its physical plan with metrics.
async fn run(
    frame: DataFrame,
    task_ctx: Arc<TaskContext>,
    query: Query,
    explain: bool,
) -> Result<(SchemaRef, Vec<RecordBatch>, Option<(String, String)>)> {
    let context = |e| Error::query(format!("running sql/{}.sql", query.name), e);
    let started = Instant::now();
    let physical = frame.create_physical_plan().await.map_err(context)?;
    let batches = collect(Arc::clone(&physical), task_ctx).await.map_err(context)?;
    let plan = explain.then(|| {
        let header =
            format!("{}.sql ({})", query.name, crate::time::format_elapsed(started.elapsed()));
        let mut text =
            DisplayableExecutionPlan::with_metrics(physical.as_ref()).indent(true).to_string();
        scan_balance(physical.as_ref(), &mut text);
        (header, text)
    });
    Ok((physical.schema(), batches, plan))
}

/// Appends, for every file scan of an executed plan, the rows each partition produced and
/// the skew (1 - mean/max): partitions left empty by pruned scans idle their cores.
fn scan_balance(plan: &dyn ExecutionPlan, text: &mut String) {
    if plan.name() == "DataSourceExec" {
        let partitions = plan.properties().output_partitioning().partition_count();
        let mut rows = vec![0usize; partitions];
        for metric in plan.metrics().iter().flat_map(|m| m.iter()) {
            if let (MetricValue::OutputRows(count), Some(p)) = (metric.value(), metric.partition())
            {
                if let Some(slot) = rows.get_mut(p) {
                    *slot += count.value();
                }
            }
        }
        let max = rows.iter().copied().max().unwrap_or(0);
        let mean = rows.iter().sum::<usize>() as f64 / partitions.max(1) as f64;
        let skew = if max == 0 { 0.0 } else { 1.0 - mean / max as f64 };
        let busy = rows.iter().filter(|&&r| r > 0).count();
        text.push_str(&format!(
            "scan rows per partition: {rows:?} (busy {busy}/{partitions}, skew {:.0}%)\n",
            skew * 100.0
        ));
    }
    for child in plan.children() {
        scan_balance(child.as_ref(), text);
    }
}

/// Runs `query` and registers its result as a table of its own name.
async fn materialise(
    ctx: &SessionContext,
    query: Query,
    params: &[Param],
    explain: bool,
    plans: &mut Vec<(String, String)>,
) -> Result<()> {
    let (schema, batches) = execute(ctx, query, params, explain, plans).await?;
    staging::register_batches(ctx, query.name, schema, batches).await
}
