//! `effect-recon nightly`: the scheduled job, `export` then `run`, one log line per stage.

use std::path::PathBuf;

use effect_recon::config::JobConfig;
use effect_recon::db::export::ExportMode;
use effect_recon::nightly::{nightly, JobChain, NightlyPlan};
use effect_recon::time::format_elapsed;

use super::notify::NotifyArgs;
use super::progress::{self, Detail};
use super::{default_cut, parse_instant_arg, EngineArgs, Outcome, QueryEngineArgs};

/// Export the job's sources into <root>/snapshot=<cut>/, then reconcile into <root>/run=<id>/.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Each night's run follows the latest earlier run under root (docs/SEMANTICS.md).\n\
Exit codes: 0 ok, 1 BREAK findings with --fail-on-breaks, 2 error, 3 INCOMPLETE run (wins over 1).\n\
A complete snapshot for the same cut is reused (a retry after a failed run does not export again).\n\
With key and changed_column on every source, a night follows the previous snapshot and reads only\n\
what changed (docs/JOB_CONFIG.md \"Incremental nights\"); it says in one line when and why it is full.\n\
Example (cron, 00:30 each day):\n  30 0 * * * effect-recon nightly --config /etc/effect-recon/job.toml --fail-on-breaks\n\
On a Ballista cluster (root on S3 or a shared path; docs/SCALE.md):\n  effect-recon nightly --config job.toml --engine ballista://10.0.0.10:50050"
)]
pub(super) struct NightlyArgs {
    /// Job config TOML (root, rules, lookback, sources).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Logical cut (default: now, truncated to the second).
    #[arg(long, value_name = "ISO", value_parser = parse_instant_arg)]
    cut: Option<i64>,
    /// Exit 1 when any BREAK finding exists.
    #[arg(long)]
    fail_on_breaks: bool,
    /// Overwrite an existing run with the same id.
    #[arg(long)]
    replace: bool,
    /// Only the stage lines and the summary, no per-table progress.
    #[arg(long, short)]
    quiet: bool,
    /// Export every row of the lookback even when the previous snapshot allows an
    /// incremental night (the chain starts over from this one).
    #[arg(long, conflicts_with = "verify_full")]
    full: bool,
    /// Shadow check: read a full export beside the incremental one, in the same
    /// transactions, and compare the live rows; a difference makes the run INCOMPLETE
    /// (exit 3) and names the first differing table, key and column. The chain rebases on
    /// the full export. (Also every `verify_full_every` nights, from the job config.)
    #[arg(long)]
    verify_full: bool,
    /// Judge every order of the lookback, not only those whose outputs can change (the
    /// same outputs: a check, and the measure of what judging less saves).
    #[arg(long)]
    judge_all: bool,
    #[command(flatten)]
    query_engine: QueryEngineArgs,
    #[command(flatten)]
    pub(super) engine: EngineArgs,
    #[command(flatten)]
    notify: NotifyArgs,
}

/// Runs `effect-recon nightly`.
pub(super) async fn execute(args: NightlyArgs) -> anyhow::Result<Outcome> {
    let (engine, check_single_node) = args.query_engine.choice()?;
    let plan = NightlyPlan {
        job: JobConfig::load(&args.config)?,
        cut: args.cut.unwrap_or_else(default_cut),
        replace: args.replace,
        session: args.engine.options(),
        engine,
        check_single_node,
        export_mode: if args.full {
            ExportMode::Full
        } else if args.verify_full {
            ExportMode::VerifyFull
        } else {
            ExportMode::Auto
        },
        chain: JobChain::Nightly,
        follows: None,
        judge_all: args.judge_all,
    };
    args.notify.validate()?;
    let detail = if args.quiet { Detail::Stages } else { Detail::All };
    let report = nightly(&plan, &progress::stderr("nightly: ", detail)).await?;
    print!("{}", report.run.summary.render());
    println!("outputs: {}", report.run.folder);
    if let Some(written) = &report.report {
        super::report::print_written(written);
    }
    args.notify.deliver(&report.run, &report.root, args.quiet).await;
    eprintln!("nightly: finished in {}", format_elapsed(report.elapsed));
    Ok(Outcome::of_run(&report.run.summary, args.fail_on_breaks))
}
