//! The scheduled job: export the job's sources into `<root>/snapshot=<cut>/`, then run the
//! reconciliation into `<root>/run=<id>/`. Used by `effect-recon nightly` and `demo`, and
//! by each cycle of `watch` on the intraday chain under `<root>/intraday/` (docs/WATCH.md).
//!
//! A snapshot already complete for the same cut is reused, so a retry after a failed run
//! does not export again. Once the run is published, its morning report is written into
//! the run folder (`report.html`); a report that cannot be written is returned as such and
//! never changes the run.

use std::time::{Duration, Instant};

use crate::config::{JobConfig, RuleSet};
use crate::db::export::{self, ExportMode, ExportPlan, ExportReport};
use crate::engine::session::{Engine, SessionOptions};
use crate::error::{Error, Result};
use crate::events::{Event, Events};
use crate::inspect::report::{self, ReportPlan, ReportWritten};
use crate::recon::lifecycle::{self, PreviousChoice};
use crate::recon::{self, RunPlan, RunReport};
use crate::snapshot::MANIFEST;
use crate::storage::Location;
use crate::time::{format_compact, format_instant, Micros};

/// A validated nightly job.
#[derive(Debug, Clone)]
pub struct NightlyPlan {
    /// The job config (sources, root, rules).
    pub job: JobConfig,
    /// The logical cut.
    pub cut: Micros,
    /// Overwrite an existing run with the same id.
    pub replace: bool,
    /// Engine settings of the run.
    pub session: SessionOptions,
    /// Where the run's queries execute.
    pub engine: Engine,
    /// On a cluster, also run in process and fail on any difference in the outputs.
    pub check_single_node: bool,
    /// Full or incremental export (`--full`, `--verify-full`; automatic by default).
    pub export_mode: ExportMode,
    /// The nightly chain, or the intraday one of `watch`.
    pub chain: JobChain,
    /// The run to follow when the caller knows it (`watch`'s previous cycle): its chain
    /// is not listed again, which a long-running loop would do with ever more runs.
    pub follows: Option<Location>,
    /// Judge every order of the snapshot (`--judge-all`, [`RunPlan::judge_all`]).
    pub judge_all: bool,
}

/// Which chain a job writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum JobChain {
    /// `<root>`: the book of record. Findings the intraday chain already reported are not
    /// NEW again (its latest run at or before the cut is read, when there is one).
    #[default]
    Nightly,
    /// `<root>/intraday/`: `watch`'s cycles. A cycle follows the previous cycle; the first
    /// one follows the latest nightly run, so what the night already reported is not NEW.
    Intraday,
}

/// The folder of the intraday chain under the job's root.
pub const INTRADAY: &str = "intraday";

/// What a nightly job did.
#[derive(Debug)]
pub struct NightlyReport {
    /// The output root (snapshot=<cut>/ and run=<id>/ under it).
    pub root: Location,
    /// The snapshot folder.
    pub snapshot: Location,
    /// The export, unless a complete snapshot was reused.
    pub export: Option<ExportReport>,
    /// The run.
    pub run: RunReport,
    /// The run's morning report in its folder, or why it could not be written (the run
    /// is published either way); `None` on the intraday chain, whose cycles write none.
    pub report: Option<Result<ReportWritten>>,
    /// Wall time of the whole job.
    pub elapsed: Duration,
}

/// Runs export then run, reporting each stage (and the export's and run's own progress)
/// to `events`.
pub async fn nightly(plan: &NightlyPlan, events: &Events) -> Result<NightlyReport> {
    let started = Instant::now();
    let root_text = plan.job.root.clone().ok_or_else(|| {
        Error::config(
            plan.job.path.display(),
            "nightly needs `root` (where snapshot=<cut>/ and run=<id>/ go)",
        )
    })?;
    let job_root = Location::parse(&root_text)?;
    let root = match plan.chain {
        JobChain::Nightly => job_root.clone(),
        JobChain::Intraday => job_root.join(INTRADAY),
    };
    let rules = RuleSet::load(plan.job.rules.as_deref())?;
    let snapshot = root.join(&format!("snapshot={}", format_compact(plan.cut)));
    events.emit(Event::NightlyStarted {
        cut: format_instant(plan.cut),
        rules: rules.origin.clone(),
        rules_hash: rules.hash[..12].to_string(),
    });

    let export = if snapshot.exists(MANIFEST).await? {
        events.emit(Event::ExportSkipped { snapshot: snapshot.to_string() });
        None
    } else {
        let export_plan =
            ExportPlan { job: plan.job.clone(), out: snapshot.clone(), cut: plan.cut };
        let report = export::export_with(&export_plan, plan.export_mode, events).await?;
        events.emit(Event::ExportFinished {
            rows: report.rows,
            sources: report.sources.len(),
            snapshot: report.location.clone(),
            elapsed: report.elapsed,
        });
        Some(report)
    };

    let run_started = Instant::now();
    let mut run_plan = RunPlan::new(snapshot.clone(), root.clone(), rules);
    run_plan.replace = plan.replace;
    run_plan.session = plan.session.clone();
    run_plan.engine = plan.engine.clone();
    run_plan.check_single_node = plan.check_single_node;
    run_plan.judge_all = plan.judge_all;
    match plan.chain {
        JobChain::Nightly => run_plan.seen_in = Some(job_root.join(INTRADAY)),
        JobChain::Intraday => {
            if let Some(previous) = &plan.follows {
                run_plan.previous = PreviousChoice::Folder(previous.clone());
            } else if lifecycle::latest_before(&root, plan.cut).await?.is_none() {
                run_plan.previous = match lifecycle::latest_before(&job_root, plan.cut).await? {
                    Some(night) => PreviousChoice::Folder(night),
                    None => PreviousChoice::None,
                };
            }
        }
    }
    let run = recon::run(&run_plan, events).await?;
    events.emit(Event::RunFinished {
        findings: run.summary.findings.iter().map(|f| f.count).sum::<u64>(),
        breaks: run.summary.breaks(),
        tasks: run.summary.compensation_tasks,
        folder: run.folder.clone(),
        elapsed: run_started.elapsed(),
    });
    let report = match plan.chain {
        JobChain::Nightly => Some(
            report::write(&ReportPlan {
                out: root.clone(),
                run: Some(run.summary.run_id.clone()),
                output: None,
            })
            .await,
        ),
        // A page per cycle would re-read the whole chain's history every few minutes.
        JobChain::Intraday => None,
    };
    Ok(NightlyReport { root, snapshot, export, run, report, elapsed: started.elapsed() })
}
