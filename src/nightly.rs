//! The scheduled job: export the job's sources into `<root>/snapshot=<cut>/`, then run the
//! reconciliation into `<root>/run=<id>/`. Used by `effect-recon nightly` and `demo`.
//!
//! A snapshot already complete for the same cut is reused, so a retry after a failed run
//! does not export again.

use std::time::{Duration, Instant};

use crate::config::{JobConfig, RuleSet};
use crate::error::{Error, Result};
use crate::export::{self, ExportPlan, ExportReport, Progress};
use crate::recon::{self, RunPlan, RunReport};
use crate::session::SessionOptions;
use crate::snapshot::MANIFEST;
use crate::storage::Location;
use crate::time::{format_compact, format_elapsed, format_instant, Micros};

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
}

/// What a nightly job did.
#[derive(Debug)]
pub struct NightlyReport {
    /// The snapshot folder.
    pub snapshot: Location,
    /// The export, unless a complete snapshot was reused.
    pub export: Option<ExportReport>,
    /// The run.
    pub run: RunReport,
    /// Wall time of the whole job.
    pub elapsed: Duration,
}

/// Runs export then run; `stage` receives one line per stage, `progress` the exporter's.
pub async fn nightly(
    plan: &NightlyPlan,
    progress: &Progress,
    stage: &mut dyn FnMut(&str),
) -> Result<NightlyReport> {
    let started = Instant::now();
    let root_text = plan.job.root.clone().ok_or_else(|| {
        Error::config(
            plan.job.path.display(),
            "nightly needs `root` (where snapshot=<cut>/ and run=<id>/ go)",
        )
    })?;
    let root = Location::parse(&root_text)?;
    let rules = RuleSet::load(plan.job.rules.as_deref())?;
    let snapshot = root.join(&format!("snapshot={}", format_compact(plan.cut)));
    stage(&format!(
        "cut {}, rules {} ({})",
        format_instant(plan.cut),
        rules.origin,
        &rules.hash[..12]
    ));

    let export = if snapshot.exists(MANIFEST).await? {
        stage(&format!("export skipped: {} is already complete", snapshot.display("")));
        None
    } else {
        let export_plan =
            ExportPlan { job: plan.job.clone(), out: snapshot.clone(), cut: plan.cut };
        let report = export::export(&export_plan, progress).await?;
        stage(&format!(
            "export done: {} rows from {} sources into {} in {}",
            report.rows,
            report.sources.len(),
            report.location,
            format_elapsed(report.elapsed)
        ));
        Some(report)
    };

    let run_started = Instant::now();
    let mut run_plan = RunPlan::new(snapshot.clone(), root, rules);
    run_plan.replace = plan.replace;
    run_plan.session = plan.session.clone();
    let run = recon::run(&run_plan, &mut |line| stage(&format!("run: {line}"))).await?;
    stage(&format!(
        "run done: {} findings ({} BREAK), {} compensation tasks into {} in {}",
        run.summary.findings.iter().map(|f| f.count).sum::<u64>(),
        run.summary.breaks(),
        run.summary.compensation_tasks,
        run.folder,
        format_elapsed(run_started.elapsed())
    ));
    Ok(NightlyReport { snapshot, export, run, elapsed: started.elapsed() })
}
