//! `run`: a snapshot and a rule set in, discrepancies, compensation tasks, skip verdicts
//! and resolved findings out (docs/SEMANTICS.md, docs/OUTPUTS.md).
//!
//! The semantics live in the SQL of `sql/`; this module binds the cut and window,
//! executes the queries in order and hands the results to [`crate::run_folder::writer`].

mod execute;
pub mod judged;
pub mod lifecycle;
mod prepare;
pub(crate) mod rule_check;
pub mod rules_table;
mod seen_intraday;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::prelude::SessionContext;

use crate::config::RuleSet;
use crate::engine::queries::Param;
use crate::engine::session::{self, Engine, SessionOptions};
use crate::engine::staging::Staging;
use crate::error::{Error, Result};
use crate::events::{Event, Events};
use crate::run_folder::summary::Summary;
use crate::run_folder::tables::{self as outputs, OutputTable};
use crate::run_folder::{self, RunManifest};
use crate::snapshot::{SnapshotStats, UTC};
use crate::storage::Location;
pub use crate::time::Window;
use crate::time::{format_instant, Micros, DAY_MICROS};
pub use execute::reconcile;
use lifecycle::PreviousChoice;
use prepare::{InputVerdict, Preparation, Prepared};

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
    /// What the snapshot holds: a whole day, or one order's rows.
    pub scope: SnapshotScope,
    /// A `watch` chain's root (`<root>/intraday/`): the open findings of its latest run at
    /// or before the cut count as open before, so they are not NEW again (docs/WATCH.md).
    pub seen_in: Option<Location>,
    /// Judge every order of the snapshot even when the run follows a previous one
    /// (`--judge-all`): the same outputs, for a check; slower over a long lookback.
    pub judge_all: bool,
}

/// What a run's snapshot holds, which decides the self-checks that apply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SnapshotScope {
    /// A whole day: every self-check of docs/SEMANTICS.md and the rule check apply.
    #[default]
    Day,
    /// One order's rows ([`crate::order_now`]): an empty table, a drop against the
    /// previous run or a rule value absent from the order's rows says nothing about the
    /// export, so those checks are off.
    OneOrder,
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
            scope: SnapshotScope::Day,
            seen_in: None,
            judge_all: false,
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
    /// Where the snapshot's rows begin, when the run may judge only the orders whose
    /// outputs can change ([`judged`]); `None`: every order is judged.
    pub coverage_from: Option<Micros>,
}

impl Bounds {
    /// The bounds of a run that starts a chain: listing by the window alone.
    pub fn standalone(window: Window, run_id: &str) -> Bounds {
        Bounds {
            window,
            list_since: window.since,
            expire_before: window.cut - DEFAULT_MAX_AGE,
            run_id: run_id.to_string(),
            coverage_from: None,
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
    /// The orders judged, when the run judged only those that can change.
    pub judged: Option<judged::Judged>,
    /// Physical plans with metrics (when asked for).
    pub plans: Vec<(String, String)>,
}

/// Runs the reconciliation and publishes its outputs, reporting each stage to `events`.
/// A query that fails on an undecodable page names the corrupt snapshot file.
pub async fn run(plan: &RunPlan, events: &Events) -> Result<RunReport> {
    match reconcile_and_publish(plan, events).await {
        Err(e) => Err(crate::snapshot::diagnose::name_corrupt_file(&plan.snapshot, e).await),
        ok => ok,
    }
}

/// [`run`] before a failed query's corrupt file is named.
async fn reconcile_and_publish(plan: &RunPlan, events: &Events) -> Result<RunReport> {
    let timings_ms = BTreeMap::new();
    let started = Instant::now();
    let prepared = match Prepared::prepare(plan).await? {
        Preparation::Fresh(prepared) => *prepared,
        Preparation::AlreadyDone { folder, manifest } => {
            // A rerun of a run that finished (a scheduler retrying after a crash that came
            // after the manifest): its outputs are already the ones this run would write.
            let summary = run_folder::read_run_summary(&folder).await?;
            let folder = folder.to_string();
            events.emit(Event::RunAlreadyDone { folder: folder.clone() });
            return Ok(RunReport { summary, manifest: *manifest, folder, plans: vec![] });
        }
    };
    let run_folder = prepared.publisher.folder().clone();
    let ctx = session::connect(&plan.engine, &plan.session, |driver| {
        Staging::in_run_folder(&run_folder, driver)
    })
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
    let folder = prepared.publisher.folder().to_string();
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
                plan.snapshot,
                plan.out
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
        snapshot: plan.snapshot.to_string(),
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
    if let Some(judged) = outputs.judged {
        events.emit(Event::RunJudged {
            orders: judged.orders,
            rows: judged.rows,
            reach: format_instant(judged.reach),
        });
    }
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
