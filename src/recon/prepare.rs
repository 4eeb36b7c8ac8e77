//! Preparing a run before any work: the snapshot opened, the run it follows chosen and
//! checked, its bounds and identity fixed, its output folder checked (a complete run
//! with this id is reported as already done); then the summary and the publishing.

use std::collections::BTreeMap;

use datafusion::prelude::SessionContext;

use super::lifecycle::{self, Chain, PreviousRun, SelfCheckLimits};
use super::{check_run_id, rule_check, seen_intraday, Bounds, Outputs, RunPlan, SnapshotScope};
use crate::error::Result;
use crate::run_folder::summary::{self, Summary, SUMMARY_FORMAT};
use crate::run_folder::{self, OutputTable, RunIdentity, RunManifest, RunPublisher};
use crate::snapshot::{Snapshot, SnapshotStats};
use crate::storage::Location;
use crate::time::{format_compact, format_duration, format_instant, Window};
use crate::vocabulary::RunStatus;

/// A run resolved before any work: its snapshot, the run it follows, its bounds and its
/// claimed output folder.
pub(super) struct Prepared {
    pub(super) snapshot: Snapshot,
    pub(super) previous: Option<PreviousRun>,
    /// The intraday run whose open findings count as open before (`RunPlan::seen_in`).
    pub(super) intraday: Option<PreviousRun>,
    pub(super) chain: Chain,
    pub(super) bounds: Bounds,
    pub(super) publisher: RunPublisher,
}

/// What the self-checks found before reconciling.
pub(super) struct InputVerdict {
    /// INCOMPLETE reasons (empty: COMPLETE).
    pub(super) reasons: Vec<String>,
    /// Rule values the snapshot does not contain.
    pub(super) warnings: Vec<String>,
}

/// What preparing a run found: work to do, or the same run already published.
pub(super) enum Preparation {
    Fresh(Box<Prepared>),
    AlreadyDone { folder: Location, manifest: Box<RunManifest> },
}

impl Prepared {
    /// Opens the snapshot, chooses the previous run, resolves the window and claims
    /// `<out>/run=<id>/`; a complete run with the same id and the same inputs (snapshot,
    /// window, rules, previous run, version) is already done unless `--replace`.
    pub(super) async fn prepare(plan: &RunPlan) -> Result<Preparation> {
        // A bad --run-id is the caller's mistake: said before any file is read.
        if let Some(run_id) = &plan.run_id {
            check_run_id(run_id)?;
        }
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
        let intraday = match &plan.seen_in {
            Some(root) => match lifecycle::latest_at(root, window.cut).await? {
                Some(folder) => Some(PreviousRun::open(&folder).await?),
                None => None,
            },
            None => None,
        };
        // Checked above when given; the default, the cut, is a valid id.
        let run_id = plan.run_id.clone().unwrap_or_else(|| format_compact(window.cut));
        if !plan.replace {
            let folder = plan.out.join(&run_folder::run_folder(&run_id));
            if let Some(manifest) = run_folder::existing_run(&folder).await? {
                let same_inputs = manifest.snapshot == plan.snapshot.to_string()
                    && manifest.cut == format_instant(window.cut)
                    && manifest.since == format_instant(window.since)
                    && manifest.rules_hash == plan.rules.hash
                    && manifest.previous_run == chain.previous_run
                    && manifest.intraday_run.as_deref() == intraday.as_ref().map(|r| r.run_id())
                    && manifest.version == env!("CARGO_PKG_VERSION");
                if same_inputs {
                    let manifest = Box::new(manifest);
                    return Ok(Preparation::AlreadyDone { folder, manifest });
                }
            }
        }
        let publisher = RunPublisher::prepare(&plan.out, &run_id, plan.replace).await?;
        // Only a run that follows another may leave orders unjudged: its previous run's
        // findings and skips are what the unjudged orders would give again. Only over an
        // incremental-ready export (`@2`), whose coverage is the job's lookback: `gen`'s
        // `@1` days cover little more than the window, and judging them whole is cheaper.
        let coverage_from = match (&previous, plan.judge_all, &snapshot.manifest().chain) {
            (Some(_), false, Some(_)) => snapshot.coverage_from()?,
            _ => None,
        };
        let bounds = Bounds {
            window,
            list_since: chain.list_since,
            expire_before: chain.expire_before,
            run_id,
            coverage_from,
        };
        Ok(Preparation::Fresh(Box::new(Prepared {
            snapshot,
            previous,
            intraday,
            chain,
            bounds,
            publisher,
        })))
    }

    /// Validates and registers the snapshot tables and the previous run's outputs.
    pub(super) async fn register(&self, ctx: &SessionContext) -> Result<SnapshotStats> {
        let stats = self.snapshot.register(ctx).await?;
        match &self.previous {
            Some(previous) => previous.register(ctx).await?,
            None => lifecycle::register_empty(ctx).await?,
        }
        if let Some(intraday) = &self.intraday {
            seen_intraday::merge(ctx, intraday).await?;
        }
        Ok(stats)
    }

    /// The self-checks of docs/SEMANTICS.md and the rule check: what makes the run INCOMPLETE.
    pub(super) async fn self_check(
        &self,
        ctx: &SessionContext,
        plan: &RunPlan,
        stats: &SnapshotStats,
    ) -> Result<InputVerdict> {
        if plan.scope == SnapshotScope::OneOrder {
            let reasons = self.snapshot.chain_problem().into_iter().collect();
            return Ok(InputVerdict { reasons, warnings: Vec::new() });
        }
        let limits = SelfCheckLimits { max_drop: plan.max_drop };
        let coverage_from = self.snapshot.coverage_from()?;
        let mut reasons = lifecycle::self_checks(
            stats,
            self.previous.as_ref(),
            coverage_from,
            &self.chain,
            limits,
        );
        reasons.extend(self.snapshot.chain_problem());
        let rules = rule_check::check(ctx, &plan.rules, &self.bounds.params()).await?;
        reasons.extend(rules.typos);
        Ok(InputVerdict { reasons, warnings: rules.warnings })
    }

    /// The summary of the run's outputs.
    pub(super) fn summary(
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
    pub(super) async fn publish(
        self,
        plan: &RunPlan,
        outputs: &Outputs,
        summary: &Summary,
    ) -> Result<RunManifest> {
        let identity = RunIdentity {
            run_id: summary.run_id.clone(),
            cut: summary.cut.clone(),
            since: summary.since.clone(),
            snapshot: plan.snapshot.to_string(),
            rules_hash: plan.rules.hash.clone(),
            previous_run: self.chain.previous_run.clone(),
            origin: summary.origin.clone(),
            intraday_run: self.intraday.as_ref().map(|run| run.run_id().to_string()),
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
