//! `effect-recon run`: reconcile one snapshot.

use std::path::PathBuf;

use effect_recon::config::RuleSet;
use effect_recon::recon::{self, RunPlan};
use effect_recon::storage::Location;

use super::{parse_instant_arg, EngineArgs, Outcome};

/// Reconcile a snapshot and publish `<out>/run=<id>/`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Exit codes: 0 ok, 1 BREAK findings with --fail-on-breaks, 2 error.\n\
Example:\n  effect-recon run --snapshot fixtures/snapshot --out /tmp/recon --fail-on-breaks")]
pub struct RunArgs {
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
    /// Window start, exclusive (default: cut minus one day).
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
    #[command(flatten)]
    engine: EngineArgs,
}

impl RunArgs {
    fn plan(&self) -> anyhow::Result<RunPlan> {
        Ok(RunPlan {
            snapshot: Location::parse(&self.snapshot)?,
            out: Location::parse(&self.out)?,
            rules: RuleSet::load(self.rules.as_deref())?,
            cut: self.cut,
            since: self.since,
            run_id: self.run_id.clone(),
            replace: self.replace,
            session: self.engine.options(),
            explain: self.explain,
        })
    }
}

/// Runs `effect-recon run`.
pub async fn execute(args: RunArgs) -> anyhow::Result<Outcome> {
    let plan = args.plan()?;
    let quiet = args.quiet;
    let mut progress = |line: &str| {
        if !quiet {
            eprintln!("{line}");
        }
    };
    let report = recon::run(&plan, &mut progress).await?;
    for (name, plan) in &report.plans {
        println!("== physical plan of sql/{name}, with metrics ==\n{plan}");
    }
    print!("{}", report.summary.render());
    println!("outputs: {}", report.folder);
    if args.fail_on_breaks && report.summary.breaks() > 0 {
        return Ok(Outcome::Breaks);
    }
    Ok(Outcome::Clean)
}
