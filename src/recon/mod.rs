//! `run`: a snapshot and a rule set in, discrepancies, compensation tasks, skip verdicts
//! and resolved findings out (docs/SEMANTICS.md, docs/OUTPUTS.md).
//!
//! The semantics live in the SQL of `sql/`; this module binds the cut and window,
//! executes the queries in order and hands the results to [`crate::run_folder::writer`].

pub mod lifecycle;
pub mod rule_check;
pub mod rules_table;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::Array;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::physical_plan::collect;
use datafusion::physical_plan::display::DisplayableExecutionPlan;
use datafusion::physical_plan::metrics::MetricValue;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;

use crate::config::RuleSet;
use crate::error::{Error, Result};
use crate::events::{Event, Events};
use crate::engine::queries::{self, Param, Query};
use crate::run_folder::{self, RunIdentity, RunManifest, RunPublisher};
use crate::engine::session::{self, Engine, SessionOptions};
use crate::snapshot::{Snapshot, SnapshotStats, UTC};
use crate::engine::staging::{self, Staging};
use crate::storage::Location;
pub use crate::time::Window;
use crate::time::{format_compact, format_duration, format_instant, Micros, DAY_MICROS};
use crate::vocabulary::RunStatus;
use lifecycle::{Chain, PreviousChoice, PreviousRun, SelfCheckLimits};
use crate::run_folder::tables::{self as outputs, OutputTable};
use crate::run_folder::summary::{self, Summary, SUMMARY_FORMAT};

/// A validated request to reconcile one snapshot.
#[derive(Debug, Clone)]
pub struct RunPlan {
    /// The snapshot folder.
    pub snapshot: Location,
    /// Where `run=<id>/` is written.
    pub out: Location,
    /// The rules.
    pub rules: RuleSet,
    /// The cut; `None` = the snapshot's own cut.
    pub cut: Option<Micros>,
    /// Window start; `None` = the previous run's cut, or cut minus one day.
    pub since: Option<Micros>,
    /// Run id; `None` = the cut as `YYYYMMDDTHHMMSSZ`.
    pub run_id: Option<String>,
    /// Overwrite an existing run with the same id.
    pub replace: bool,
    /// Engine settings.
    pub session: SessionOptions,
    /// Where the queries run: in process, or on a cluster.
    pub engine: Engine,
    /// On a cluster, also run in process and fail on any difference in the outputs.
    pub check_single_node: bool,
    /// Keep the executed physical plans with their metrics.
    pub explain: bool,
    /// The run this one follows (docs/SEMANTICS.md).
    pub previous: PreviousChoice,
    /// How far before the window a late row still makes a NEW finding.
    pub late_horizon: Micros,
    /// An open finding that cannot be re-checked expires this long after it broke.
    pub max_age: Micros,
    /// Self-check: a table below `(1 - max_drop)` times the previous run's rows.
    pub max_drop: f64,
}

/// Default `--late-horizon`: two days.
pub const DEFAULT_LATE_HORIZON: Micros = 2 * DAY_MICROS;
/// Default `--max-age`: thirty days.
pub const DEFAULT_MAX_AGE: Micros = 30 * DAY_MICROS;
/// Default `--max-drop`.
pub const DEFAULT_MAX_DROP: f64 = 0.5;

impl RunPlan {
    /// A plan with the defaults: the snapshot's cut, following the latest earlier run.
    pub fn new(snapshot: Location, out: Location, rules: RuleSet) -> RunPlan {
        RunPlan {
            snapshot,
            out,
            rules,
            cut: None,
            since: None,
            run_id: None,
            replace: false,
            session: SessionOptions::default(),
            engine: Engine::InProcess,
            check_single_node: false,
            explain: false,
            previous: PreviousChoice::Latest,
            late_horizon: DEFAULT_LATE_HORIZON,
            max_age: DEFAULT_MAX_AGE,
            max_drop: DEFAULT_MAX_DROP,
        }
    }
}

/// What a run judges: its window, the bound it lists findings after, when unchecked
/// findings expire, and its id (the `first_seen_run` of its NEW findings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bounds {
    /// The window `(since, cut]`.
    pub window: Window,
    /// Findings are listed when `break_on > list_since`.
    pub list_since: Micros,
    /// Unchecked open findings whose first break is at or before this expire.
    pub expire_before: Micros,
    /// This run's id.
    pub run_id: String,
}

impl Bounds {
    /// The bounds of a run that starts a chain: listing by the window alone.
    pub fn standalone(window: Window, run_id: &str) -> Bounds {
        Bounds {
            window,
            list_since: window.since,
            expire_before: window.cut - DEFAULT_MAX_AGE,
            run_id: run_id.to_string(),
        }
    }

    /// The bound parameters, with `$lo`, `$hi` spanning every order.
    pub fn params(&self) -> Vec<Param> {
        self.params_for_orders(i64::MIN, i64::MAX)
    }

    /// The bound parameters, with effect_state limited to orders `lo..=hi`.
    pub fn params_for_orders(&self, lo: i64, hi: i64) -> Vec<Param> {
        let instant = |t: Micros| ScalarValue::TimestampMicrosecond(Some(t), Some(UTC.into()));
        vec![
            ("cut", instant(self.window.cut)),
            ("since", instant(self.window.since)),
            ("list_since", instant(self.list_since)),
            ("expire_before", instant(self.expire_before)),
            ("run_id", ScalarValue::Utf8(Some(self.run_id.clone()))),
            ("lo", ScalarValue::Int64(Some(lo))),
            ("hi", ScalarValue::Int64(Some(hi))),
        ]
    }
}

/// What a finished run reports.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The summary written as `summary.json`.
    pub summary: Summary,
    /// The manifest written last.
    pub manifest: RunManifest,
    /// Where the run was written.
    pub folder: String,
    /// Physical plans with metrics, when asked for.
    pub plans: Vec<(String, String)>,
}

/// The output tables of a run, in memory.
#[derive(Debug, Clone)]
pub struct Outputs {
    /// Every finding.
    pub discrepancies: RecordBatch,
    /// One task per open (BREAK) finding.
    pub compensation_tasks: RecordBatch,
    /// One verdict per SKIPPED row of the window and per carried PENDING skip.
    pub skip_verdicts: RecordBatch,
    /// The previous run's open findings closed by this run.
    pub resolved: RecordBatch,
    /// Physical plans with metrics (when asked for).
    pub plans: Vec<(String, String)>,
}

/// Runs the reconciliation and publishes its outputs, reporting each stage to `events`.
/// A query that fails on an undecodable page names the corrupt snapshot file.
pub async fn run(plan: &RunPlan, events: &Events) -> Result<RunReport> {
    match run_unnamed(plan, events).await {
        Err(e) => Err(crate::snapshot::diagnose::name_corrupt_file(&plan.snapshot, e).await),
        ok => ok,
    }
}

async fn run_unnamed(plan: &RunPlan, events: &Events) -> Result<RunReport> {
    let timings_ms = BTreeMap::new();
    let started = Instant::now();
    let prepared = match Prepared::prepare(plan).await? {
        Preparation::Fresh(prepared) => *prepared,
        Preparation::AlreadyDone { folder, manifest } => {
            // A rerun of a run that finished (a scheduler retrying after a crash that came
            // after the manifest): its outputs are already the ones this run would write.
            let summary = run_folder::read_run_summary(&folder).await?;
            let folder = folder.display("");
            events.emit(Event::RunAlreadyDone { folder: folder.clone() });
            return Ok(RunReport { summary, manifest: *manifest, folder, plans: vec![] });
        }
    };
    let run_folder = prepared.publisher.folder().clone();
    let ctx = session::connect(&plan.engine, &plan.session, || Staging::in_run_folder(&run_folder))
        .await?;
    if plan.engine != Engine::InProcess {
        events.emit(Event::RunEngine { engine: plan.engine.describe() });
    }
    let computed = compute(plan, &prepared, &ctx, events, timings_ms, started).await;
    // Staged tables serve the queries only: gone before anything is published.
    if let Some(staging) = Staging::of(&ctx) {
        staging.remove().await;
    }
    let (stats, verdict, outputs, timings_ms) = computed.map_err(|e| on_cluster(plan, e))?;
    if plan.check_single_node {
        check_single_node(plan, &prepared, &outputs, events).await?;
    }

    let write_started = Instant::now();
    // The write stage cannot be timed inside the file it writes: summary.json has the
    // stages before it, the returned summary all three.
    let mut summary = prepared.summary(plan, &stats, &outputs, verdict, timings_ms)?;
    let folder = prepared.publisher.folder().display("");
    let manifest = prepared.publish(plan, &outputs, &summary).await?;
    let elapsed = stage(&mut summary.timings_ms, "write", write_started);
    events.emit(Event::RunWritten { folder: folder.clone(), elapsed });
    Ok(RunReport { summary, manifest, folder, plans: outputs.plans })
}

/// A query that failed on a cluster is the cluster's error: said with its address and
/// what every executor must reach.
fn on_cluster(plan: &RunPlan, e: Error) -> Error {
    match (&plan.engine, e) {
        (Engine::Ballista { .. }, Error::Query { context, source }) => Error::Cluster {
            scheduler: plan.engine.describe(),
            message: format!(
                "{context}: {} (every executor must reach the snapshot {} and the output folder {})",
                source.to_string().trim_end(),
                plan.snapshot.display(""),
                plan.out.display("")
            ),
            source: Some(source),
        },
        (_, e) => e,
    }
}

/// Validates the inputs and computes the outputs on `ctx`'s engine.
async fn compute(
    plan: &RunPlan,
    prepared: &Prepared,
    ctx: &SessionContext,
    events: &Events,
    mut timings_ms: BTreeMap<String, u64>,
    started: Instant,
) -> Result<(SnapshotStats, InputVerdict, Outputs, BTreeMap<String, u64>)> {
    let stats = prepared.register(ctx).await?;
    let verdict = prepared.self_check(ctx, plan, &stats).await?;
    let elapsed = stage(&mut timings_ms, "validate", started);
    events.emit(Event::RunValidated {
        snapshot: plan.snapshot.display(""),
        files: stats.files as u64,
        rows: total_rows(&stats),
        elapsed,
    });
    if let Some(previous) = &prepared.previous {
        events.emit(Event::RunFollows {
            previous_run: previous.run_id().to_string(),
            cut: previous.manifest.cut.clone(),
            list_since: format_instant(prepared.bounds.list_since),
        });
    }
    verdict.warnings.iter().for_each(|w| events.emit(Event::RuleWarning(w.clone())));
    verdict.reasons.iter().for_each(|r| events.emit(Event::SelfCheckFailed(r.clone())));

    let reconcile_started = Instant::now();
    let outputs =
        reconcile(ctx, &plan.rules, &prepared.bounds, plan.session.rows_per_pass, plan.explain)
            .await?;
    let elapsed = stage(&mut timings_ms, "reconcile", reconcile_started);
    events.emit(Event::RunReconciled {
        findings: outputs.discrepancies.num_rows() as u64,
        skip_verdicts: outputs.skip_verdicts.num_rows() as u64,
        resolved: outputs.resolved.num_rows() as u64,
        elapsed,
    });
    Ok((stats, verdict, outputs, timings_ms))
}

/// `--check-single-node`: the same run in process; any difference from the cluster's
/// outputs fails the run before anything is published.
async fn check_single_node(
    plan: &RunPlan,
    prepared: &Prepared,
    outputs: &Outputs,
    events: &Events,
) -> Result<()> {
    let started = Instant::now();
    let local = session::build(&plan.session)?;
    prepared.register(&local).await?;
    let expected =
        reconcile(&local, &plan.rules, &prepared.bounds, plan.session.rows_per_pass, false).await?;
    let pairs = [
        (OutputTable::Discrepancies, &outputs.discrepancies, &expected.discrepancies),
        (OutputTable::CompensationTasks, &outputs.compensation_tasks, &expected.compensation_tasks),
        (OutputTable::SkipVerdicts, &outputs.skip_verdicts, &expected.skip_verdicts),
        (OutputTable::Resolved, &outputs.resolved, &expected.resolved),
    ];
    for (table, cluster, in_process) in pairs {
        if let Some(difference) = outputs::first_difference(cluster, in_process) {
            return Err(Error::Mismatch(format!(
                "--check-single-node: {} on {} differs from the in-process run: {difference}; nothing was published",
                table.name(),
                plan.engine.describe()
            )));
        }
    }
    events.emit(Event::RunSingleNodeChecked {
        engine: plan.engine.describe(),
        elapsed: started.elapsed(),
    });
    Ok(())
}

/// A run resolved before any work: its snapshot, the run it follows, its bounds and its
/// claimed output folder.
struct Prepared {
    snapshot: Snapshot,
    previous: Option<PreviousRun>,
    chain: Chain,
    bounds: Bounds,
    publisher: RunPublisher,
}

/// What the self-checks found before reconciling.
struct InputVerdict {
    /// INCOMPLETE reasons (empty: COMPLETE).
    reasons: Vec<String>,
    /// Rule values the snapshot does not contain.
    warnings: Vec<String>,
}

/// What preparing a run found: work to do, or the same run already published.
enum Preparation {
    Fresh(Box<Prepared>),
    AlreadyDone { folder: Location, manifest: Box<RunManifest> },
}

impl Prepared {
    /// Opens the snapshot, chooses the previous run, resolves the window and claims
    /// `<out>/run=<id>/`; a complete run with the same id and the same inputs (snapshot,
    /// window, rules, previous run, version) is already done unless `--replace`.
    async fn prepare(plan: &RunPlan) -> Result<Preparation> {
        let snapshot = Snapshot::open(&plan.snapshot).await?;
        let cut = plan.cut.unwrap_or(snapshot.cut());
        let previous = PreviousRun::choose(&plan.previous, &plan.out, cut).await?;
        let since = plan.since.or(previous.as_ref().map(|p| p.cut));
        let window = Window::resolve(snapshot.cut(), plan.cut, since)?;
        let chain = Chain::new(
            previous.as_ref(),
            window.since,
            window.cut,
            plan.late_horizon,
            plan.max_age,
        );
        let run_id = plan.run_id.clone().unwrap_or_else(|| format_compact(window.cut));
        check_run_id(&run_id)?;
        if !plan.replace {
            let folder = plan.out.join(&run_folder::run_folder(&run_id));
            if let Some(manifest) = run_folder::existing_run(&folder).await? {
                let same_inputs = manifest.snapshot == plan.snapshot.display("")
                    && manifest.cut == format_instant(window.cut)
                    && manifest.since == format_instant(window.since)
                    && manifest.rules_hash == plan.rules.hash
                    && manifest.previous_run == chain.previous_run
                    && manifest.version == env!("CARGO_PKG_VERSION");
                if same_inputs {
                    let manifest = Box::new(manifest);
                    return Ok(Preparation::AlreadyDone { folder, manifest });
                }
            }
        }
        let publisher = RunPublisher::prepare(&plan.out, &run_id, plan.replace).await?;
        let bounds = Bounds {
            window,
            list_since: chain.list_since,
            expire_before: chain.expire_before,
            run_id,
        };
        Ok(Preparation::Fresh(Box::new(Prepared { snapshot, previous, chain, bounds, publisher })))
    }

    /// Validates and registers the snapshot tables and the previous run's outputs.
    async fn register(&self, ctx: &SessionContext) -> Result<SnapshotStats> {
        let stats = self.snapshot.register(ctx).await?;
        match &self.previous {
            Some(previous) => previous.register(ctx).await?,
            None => lifecycle::register_empty(ctx).await?,
        }
        Ok(stats)
    }

    /// The self-checks of docs/SEMANTICS.md and the rule check: what makes the run INCOMPLETE.
    async fn self_check(
        &self,
        ctx: &SessionContext,
        plan: &RunPlan,
        stats: &SnapshotStats,
    ) -> Result<InputVerdict> {
        let limits = SelfCheckLimits { max_drop: plan.max_drop };
        let coverage_from = self.snapshot.coverage_from()?;
        let mut reasons = lifecycle::self_checks(
            stats,
            self.previous.as_ref(),
            coverage_from,
            &self.chain,
            limits,
        );
        let rules = rule_check::check(ctx, &plan.rules, &self.bounds.params()).await?;
        reasons.extend(rules.typos);
        Ok(InputVerdict { reasons, warnings: rules.warnings })
    }

    /// The summary of the run's outputs.
    fn summary(
        &self,
        plan: &RunPlan,
        stats: &SnapshotStats,
        outputs: &Outputs,
        verdict: InputVerdict,
        timings_ms: BTreeMap<String, u64>,
    ) -> Result<Summary> {
        let (findings, verdicts) = summary::count_findings(&outputs.discrepancies)?;
        let counts = summary::count_lifecycle(&outputs.discrepancies, &outputs.resolved)?;
        let status =
            if verdict.reasons.is_empty() { RunStatus::Complete } else { RunStatus::Incomplete };
        Ok(Summary {
            format: SUMMARY_FORMAT.into(),
            run_id: self.bounds.run_id.clone(),
            since: format_instant(self.bounds.window.since),
            cut: format_instant(self.bounds.window.cut),
            findings,
            verdicts,
            skip_verdicts: summary::count_skip_verdicts(&outputs.skip_verdicts)?,
            compensation_tasks: outputs.compensation_tasks.num_rows() as u64,
            inputs: stats.rows.clone(),
            timings_ms,
            previous_run: self.chain.previous_run.clone(),
            origin: format_instant(self.chain.origin),
            late_horizon: format_duration(plan.late_horizon),
            status,
            reasons: verdict.reasons,
            rules_changed: self
                .previous
                .as_ref()
                .is_some_and(|p| p.manifest.rules_hash != plan.rules.hash),
            rule_warnings: verdict.warnings,
            new: counts.new,
            persisting: counts.persisting,
            resolved: counts.resolved,
            not_rechecked: counts.not_rechecked,
            open: counts.new + counts.persisting,
            oldest_open_break_on: counts.oldest_open_break_on.map(format_instant),
        })
    }

    /// Writes the tables and the summary, then the manifest (create-only).
    async fn publish(
        self,
        plan: &RunPlan,
        outputs: &Outputs,
        summary: &Summary,
    ) -> Result<RunManifest> {
        let identity = RunIdentity {
            run_id: summary.run_id.clone(),
            cut: summary.cut.clone(),
            since: summary.since.clone(),
            snapshot: plan.snapshot.display(""),
            rules_hash: plan.rules.hash.clone(),
            previous_run: self.chain.previous_run.clone(),
            origin: summary.origin.clone(),
            status: summary.status,
            reasons: summary.reasons.clone(),
        };
        let tables = [
            (OutputTable::Discrepancies, &outputs.discrepancies),
            (OutputTable::CompensationTasks, &outputs.compensation_tasks),
            (OutputTable::SkipVerdicts, &outputs.skip_verdicts),
            (OutputTable::Resolved, &outputs.resolved),
        ];
        self.publisher.publish(&identity, &tables, summary).await
    }
}

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
    materialise_effects_in_play(ctx, bounds, rows_per_pass, explain, &mut plans).await?;
    materialise(ctx, queries::CANDIDATES, &params, explain, &mut plans).await?;
    // Registered only now, so that it reads the materialised candidates.
    queries::register_view(ctx, queries::TRIGGER_EVIDENCE, &params).await?;
    materialise(ctx, queries::FINDINGS, &params, explain, &mut plans).await?;
    materialise(ctx, queries::REJUDGED, &params, explain, &mut plans).await?;
    outputs(ctx, &params, explain, plans).await
}

/// Effects in play and candidates are small and each feeds two later queries: computing
/// them once keeps the big inputs from being aggregated again. The aggregation behind
/// effects in play runs one order_id range at a time so its memory stays bounded.
async fn materialise_effects_in_play(
    ctx: &SessionContext,
    bounds: &Bounds,
    rows_per_pass: u64,
    explain: bool,
    plans: &mut Vec<(String, String)>,
) -> Result<()> {
    let mut in_play = Vec::new();
    for (lo, hi) in order_id_ranges(ctx, rows_per_pass).await? {
        let range_params = bounds.params_for_orders(lo, hi);
        queries::register_view(ctx, queries::EFFECT_STATE, &range_params).await?;
        in_play.push(execute(ctx, queries::EFFECTS_IN_PLAY, &range_params, explain, plans).await?);
    }
    let schema = in_play.first().map(|(schema, _)| Arc::clone(schema)).ok_or_else(|| {
        Error::Internal(format!("{}: no order_id range was judged", queries::EFFECTS_IN_PLAY.name))
    })?;
    let batches = in_play.into_iter().flat_map(|(_, b)| b).collect();
    staging::register_batches(ctx, queries::EFFECTS_IN_PLAY.name, schema, batches).await
}

/// The output tables, from the materialised findings and re-judged open findings.
async fn outputs(
    ctx: &SessionContext,
    params: &[Param],
    explain: bool,
    mut plans: Vec<(String, String)>,
) -> Result<Outputs> {
    let discrepancies = OutputTable::Discrepancies
        .conform(&execute(ctx, queries::DISCREPANCIES, params, explain, &mut plans).await?.1)?;
    staging::register_batches(
        ctx,
        OutputTable::Discrepancies.name(),
        discrepancies.schema(),
        vec![discrepancies.clone()],
    )
    .await?;
    let compensation_tasks = OutputTable::CompensationTasks.conform(
        &execute(ctx, queries::COMPENSATION_TASKS, params, explain, &mut plans).await?.1,
    )?;
    let skip_verdicts = OutputTable::SkipVerdicts
        .conform(&execute(ctx, queries::SKIP_VERDICTS, params, explain, &mut plans).await?.1)?;
    let resolved = OutputTable::Resolved
        .conform(&execute(ctx, queries::RESOLVED, params, explain, &mut plans).await?.1)?;
    Ok(Outputs { discrepancies, compensation_tasks, skip_verdicts, resolved, plans })
}

/// The order_id ranges effect_state is computed over: the whole range for a day of at
/// most `rows_per_pass` input rows, else equal-width slices of `[min, max]` (the snapshot
/// files are sorted by order_id, so each slice reads only its own row groups).
async fn order_id_ranges(ctx: &SessionContext, rows_per_pass: u64) -> Result<Vec<(i64, i64)>> {
    let rows_per_pass = i128::from(rows_per_pass.max(1));
    let whole = vec![(i64::MIN, i64::MAX)];
    let batches = queries::collect(ctx, queries::ORDER_ID_SPAN, &[]).await?;
    let Some(batch) = batches.iter().find(|b| b.num_rows() > 0) else { return Ok(whole) };
    let (lo, hi, rows) = (
        queries::int64_column(batch, "lo")?,
        queries::int64_column(batch, "hi")?,
        queries::int64_column(batch, "rows")?,
    );
    if lo.is_null(0) || hi.is_null(0) || i128::from(rows.value(0)) <= rows_per_pass {
        return Ok(whole);
    }
    let (lo, hi) = (i128::from(lo.value(0)), i128::from(hi.value(0)));
    let passes = (i128::from(rows.value(0)) + rows_per_pass - 1) / rows_per_pass;
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
    let frame = queries::frame(ctx, query, params).await?;
    let context = |e| Error::query(format!("running sql/{}.sql", query.name), e);
    let started = Instant::now();
    let physical = frame.create_physical_plan().await.map_err(context)?;
    let batches = collect(Arc::clone(&physical), ctx.task_ctx()).await.map_err(context)?;
    if explain {
        let header =
            format!("{}.sql ({})", query.name, crate::time::format_elapsed(started.elapsed()));
        let mut text =
            DisplayableExecutionPlan::with_metrics(physical.as_ref()).indent(true).to_string();
        scan_balance(physical.as_ref(), &mut text);
        plans.push((header, text));
    }
    Ok((physical.schema(), batches))
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

/// Records a stage's wall time in milliseconds and returns it.
fn stage(timings_ms: &mut BTreeMap<String, u64>, name: &str, started: Instant) -> Duration {
    let elapsed = started.elapsed();
    timings_ms.insert(name.to_string(), elapsed.as_millis() as u64);
    elapsed
}

fn total_rows(stats: &SnapshotStats) -> u64 {
    crate::snapshot::Table::ALL.iter().filter_map(|t| stats.rows.get(t.name())).sum()
}

/// Run ids name a folder: letters, digits, `-`, `_`, `.`, `:` only.
fn check_run_id(run_id: &str) -> Result<()> {
    let ok = !run_id.is_empty()
        && run_id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c))
        && run_id != "."
        && run_id != "..";
    if ok {
        Ok(())
    } else {
        Err(Error::argument(
            "--run-id",
            format!("'{run_id}' may only use letters, digits, '-', '_', '.', ':'"),
        ))
    }
}
