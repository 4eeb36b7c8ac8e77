//! `effect-recon run`: reconcile one snapshot.

use std::path::PathBuf;

use effect_recon::config::RuleSet;
use effect_recon::recon::lifecycle::PreviousChoice;
use effect_recon::recon::{self, RunPlan};
use effect_recon::storage::Location;

use super::notify::NotifyArgs;
use super::progress::{self, Detail};
use super::{
    parse_duration_arg, parse_fraction, parse_instant_arg, EngineArgs, Outcome, QueryEngineArgs,
};

/// Reconcile a snapshot and publish `<out>/run=<id>/`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "A run follows the latest complete earlier run under --out (docs/SEMANTICS.md): its window \
starts at that run's cut, its open findings are judged again (PERSISTING, or closed in the resolved table), \
its PENDING skips are carried until final.\n\
Exit codes: 0 ok, 1 BREAK findings with --fail-on-breaks, 2 error, 3 INCOMPLETE (a self-check failed: \
an empty table, a vanished receipts source, a table that shrank past --max-drop, a snapshot that does not \
reach back far enough; 3 wins over 1).\n\
Example:\n  effect-recon run --snapshot fixtures/tiny/snapshot --out /tmp/recon-tiny --fail-on-breaks\n\
On a Ballista cluster (effect-recon cluster --help):\n  effect-recon run --snapshot /shared/snap --out /shared/runs --engine ballista://127.0.0.1:50050 --check-single-node"
)]
pub(super) struct RunArgs {
    /// Snapshot folder: a directory, file:// or s3:// URL holding manifest.json.
    #[arg(long, value_name = "DIR|URL")]
    snapshot: String,
    /// Where run=<id>/ is written: a directory, file:// or s3:// URL.
    #[arg(long, value_name = "DIR|URL")]
    out: String,
    /// Rules TOML (default: the embedded fixtures/rules.toml).
    #[arg(long, value_name = "FILE")]
    rules: Option<PathBuf>,
    /// Logical cut (default: the snapshot's cut); inputs after it are ignored.
    #[arg(long, value_name = "ISO", value_parser = parse_instant_arg)]
    cut: Option<i64>,
    /// Window start, exclusive (default: the previous run's cut, or cut minus one day).
    #[arg(long, value_name = "ISO", value_parser = parse_instant_arg)]
    since: Option<i64>,
    /// Run id (default: the cut as YYYYMMDDTHHMMSSZ).
    #[arg(long, value_name = "ID")]
    run_id: Option<String>,
    /// Overwrite an existing run with the same id.
    #[arg(long)]
    replace: bool,
    /// Exit 1 when any BREAK finding exists.
    #[arg(long)]
    fail_on_breaks: bool,
    /// Print the executed physical plans with their metrics.
    #[arg(long)]
    explain: bool,
    /// Print only the summary, no progress lines.
    #[arg(long, short)]
    quiet: bool,
    /// The run to follow: a run folder (default: the complete run under --out with the
    /// greatest cut before this one).
    #[arg(long, value_name = "DIR|URL", conflicts_with = "no_previous")]
    previous: Option<String>,
    /// Follow no previous run: start a new chain.
    #[arg(long)]
    no_previous: bool,
    /// In a chain, findings that broke up to this long before the window (late rows) are
    /// still listed as NEW.
    #[arg(long, value_name = "DURATION", default_value = "2d", value_parser = parse_duration_arg)]
    late_horizon: i64,
    /// An open finding this snapshot cannot re-check expires this long after it broke.
    #[arg(long, value_name = "DURATION", default_value = "30d", value_parser = parse_duration_arg)]
    max_age: i64,
    /// Self-check: a table with fewer than (1 - MAX_DROP) times the previous run's rows
    /// makes the run INCOMPLETE.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.5, value_parser = parse_fraction)]
    max_drop: f64,
    /// Judge every order of the snapshot, not only those whose outputs can change when
    /// the run follows a previous one (the same outputs: a check, and the measure of what
    /// judging less saves).
    #[arg(long)]
    judge_all: bool,
    #[command(flatten)]
    query_engine: QueryEngineArgs,
    #[command(flatten)]
    pub(super) engine: EngineArgs,
    #[command(flatten)]
    notify: NotifyArgs,
}

impl RunArgs {
    fn plan(&self) -> anyhow::Result<RunPlan> {
        let previous = match (&self.previous, self.no_previous) {
            (_, true) => PreviousChoice::None,
            (Some(folder), false) => PreviousChoice::Folder(Location::parse(folder)?),
            (None, false) => PreviousChoice::Latest,
        };
        let mut plan = RunPlan::new(
            Location::parse(&self.snapshot)?,
            Location::parse(&self.out)?,
            RuleSet::load(self.rules.as_deref())?,
        );
        plan.cut = self.cut;
        plan.since = self.since;
        plan.run_id = self.run_id.clone();
        plan.replace = self.replace;
        plan.session = self.engine.options();
        (plan.engine, plan.check_single_node) = self.query_engine.choice()?;
        plan.explain = self.explain;
        plan.previous = previous;
        plan.late_horizon = self.late_horizon;
        plan.max_age = self.max_age;
        plan.max_drop = self.max_drop;
        plan.judge_all = self.judge_all;
        Ok(plan)
    }
}

/// Runs `effect-recon run`.
pub(super) async fn execute(args: RunArgs) -> anyhow::Result<Outcome> {
    let plan = args.plan()?;
    args.notify.validate()?;
    let detail = if args.quiet { Detail::Warnings } else { Detail::All };
    let report = recon::run(&plan, &progress::stderr("", detail)).await?;
    for (name, plan) in &report.plans {
        println!("== physical plan of sql/{name}, with metrics ==\n{plan}");
    }
    print!("{}", report.summary.render());
    println!("outputs: {}", report.folder);
    args.notify.deliver(&report, &plan.out, args.quiet).await;
    Ok(Outcome::of_run(&report.summary, args.fail_on_breaks))
}
