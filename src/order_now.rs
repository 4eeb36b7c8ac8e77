//! One order, now (`explain --config`, `reopen --order`): a customer complaint at 11:00
//! does not wait for tonight's run. The order's rows are read live from the job's sources
//! (each source query restricted to the one `order_id`, a range read through its index,
//! in one consistent read per database like every export), judged by the very same run at
//! the present instant over the whole lookback, and compared with the last complete run
//! under the job's root.
//!
//! The live snapshot and run are written to a private temporary folder, removed when the
//! [`OrderNow`] is dropped: nothing is added to the job's root, which stays the book of
//! record of the nightly chain.

use std::collections::BTreeSet;

use crate::config::{JobConfig, RuleSet};
use crate::db::export::{self, ExportMode, ExportPlan};
use crate::error::{Error, Result};
use crate::events::Events;
use crate::recon::lifecycle::PreviousChoice;
use crate::recon::{self, RunPlan, SnapshotScope};
use crate::run_folder::reader::{complete_runs, FindingRow, RunOutputs};
use crate::snapshot::Table;
use crate::storage::Location;
use crate::time::{format_compact, Micros};

/// An order judged on its live rows.
#[derive(Debug)]
pub struct OrderNow {
    /// The order.
    pub order_id: i64,
    /// The instant it was judged at (the live snapshot's cut).
    pub cut: Micros,
    /// The live snapshot (this order's rows only).
    pub snapshot: Location,
    /// The live run over it.
    pub run: RunOutputs,
    /// Rows read per table of the contract.
    pub rows: Vec<(Table, u64)>,
    /// The last complete run under the job's root, if any.
    pub last_run: Option<RunOutputs>,
    /// Keeps the temporary folder alive as long as the snapshot and run are used.
    _workdir: tempfile::TempDir,
}

impl OrderNow {
    /// Rows of `table` read for the order.
    pub fn rows_of(&self, table: Table) -> u64 {
        self.rows.iter().filter(|(t, _)| *t == table).map(|(_, n)| n).sum()
    }

    /// The live run's findings about the order.
    pub fn findings(&self) -> impl Iterator<Item = &FindingRow> {
        self.run.findings.iter().filter(move |f| f.order_id == self.order_id)
    }

    /// The comparison with the last run, as lines for people: that they agree, each
    /// `disagree: …`, or that there is no run to compare with.
    pub fn comparison(&self) -> Vec<String> {
        let Some(last) = &self.last_run else {
            return vec!["no complete run under the job's root to compare with".into()];
        };
        let disagreements = self.disagreements();
        if disagreements.is_empty() {
            return vec![format!(
                "the live data and run {} agree on order {}",
                last.run_id(),
                self.order_id
            )];
        }
        disagreements.into_iter().map(|line| format!("disagree: {line}")).collect()
    }

    /// Where the live data and the last run disagree about the order, one line each
    /// (empty: they agree, or there is no last run). A difference is expected when
    /// something happened since that run's cut; it is what the on-call must look at.
    fn disagreements(&self) -> Vec<String> {
        let Some(last) = &self.last_run else { return Vec::new() };
        let seen = |findings: &mut dyn Iterator<Item = &FindingRow>| -> BTreeSet<String> {
            findings.map(|f| format!("{} {} {}", f.effect, f.class, f.verdict)).collect()
        };
        let live = seen(&mut self.findings());
        let then = seen(&mut last.findings.iter().filter(|f| f.order_id == self.order_id));
        let mut lines = Vec::new();
        for finding in then.difference(&live) {
            lines.push(format!(
                "run {} (cut {}) has {finding}; the live data no longer does",
                last.run_id(),
                last.manifest.cut
            ));
        }
        for finding in live.difference(&then) {
            lines.push(format!(
                "the live data has {finding}; run {} (cut {}) did not",
                last.run_id(),
                last.manifest.cut
            ));
        }
        lines
    }
}

/// Reads order `order_id` live through `job`'s sources and judges it at `cut`.
pub async fn judge(
    job: &JobConfig,
    order_id: i64,
    cut: Micros,
    events: &Events,
) -> Result<OrderNow> {
    let rules = RuleSet::load(job.rules.as_deref())?;
    let workdir = tempfile::Builder::new()
        .prefix("effect-recon-order-")
        .tempdir()
        .map_err(|e| Error::Io { path: std::env::temp_dir().display().to_string(), source: e })?;
    let root = Location::parse(&workdir.path().display().to_string())?;
    let snapshot = root.join(&format!("snapshot={}", format_compact(cut)));
    let plan = ExportPlan { job: one_order_job(job, order_id), out: snapshot.clone(), cut };
    let exported = export::export_with(&plan, ExportMode::Auto, events).await?;
    let rows = job
        .sources
        .iter()
        .zip(&exported.sources)
        .map(|(source, report)| (source.table, report.rows))
        .collect();
    let mut plan = RunPlan::new(snapshot.clone(), root, rules);
    // The whole lookback as of now: every finding of the order, not only today's.
    plan.since = Some(job.bounds(cut).0);
    plan.run_id = Some(format!("order-{order_id}-{}", format_compact(cut)));
    plan.previous = PreviousChoice::None;
    plan.scope = SnapshotScope::OneOrder;
    let report = recon::run(&plan, events).await?;
    let run = RunOutputs::read(&Location::parse(&report.folder)?).await?;
    let last_run = match &job.root {
        Some(root) => last_complete_run(&Location::parse(root)?).await?,
        None => None,
    };
    Ok(OrderNow { order_id, cut, snapshot, run, rows, last_run, _workdir: workdir })
}

/// `job` reading one order: every source restricted to `order_id`, read in full (no
/// incremental chain: there is nothing to follow), on one connection.
fn one_order_job(job: &JobConfig, order_id: i64) -> JobConfig {
    let mut one = job.clone();
    for source in &mut one.sources {
        source.key = None;
        source.changed_column = None;
    }
    one.export.only_orders = Some((order_id, order_id));
    one.export.connections = 1;
    one
}

/// The complete run under `root` with the greatest cut.
async fn last_complete_run(root: &Location) -> Result<Option<RunOutputs>> {
    let Some(last) = complete_runs(root).await?.into_iter().max_by_key(|r| r.cut) else {
        return Ok(None);
    };
    Ok(Some(RunOutputs::read(&last.folder).await?))
}
