//! `effect-recon nightly`: the scheduled job, `export` then `run`, one log line per stage.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use effect_recon::config::{JobConfig, RuleSet};
use effect_recon::export::{self, ExportPlan};
use effect_recon::recon::{self, RunPlan};
use effect_recon::session::SessionOptions;
use effect_recon::snapshot::MANIFEST;
use effect_recon::storage::Location;
use effect_recon::time::{format_compact, format_elapsed, format_instant};

use super::export::{default_cut, progress};
use super::{parse_instant_arg, Outcome};

/// Export the job's sources into <root>/snapshot=<cut>/, then reconcile into <root>/run=<id>/.
#[derive(Debug, clap::Args)]
#[command(after_help = "Exit codes: 0 ok, 1 BREAK findings with --fail-on-breaks, 2 error.\n\
A complete snapshot for the same cut is reused (a retry after a failed run does not export again).\n\
Example (cron, 00:30 each day):\n  30 0 * * * effect-recon nightly --config /etc/effect-recon/job.toml --fail-on-breaks")]
pub struct NightlyArgs {
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
}

/// Runs `effect-recon nightly`.
pub async fn execute(args: NightlyArgs) -> anyhow::Result<Outcome> {
    let started = Instant::now();
    let job = JobConfig::load(&args.config)?;
    let root_text = job.root.clone().with_context(|| format!("{}: nightly needs `root` (where snapshot=<cut>/ and run=<id>/ go)", args.config.display()))?;
    let root = Location::parse(&root_text)?;
    let rules = RuleSet::load(job.rules.as_deref())?;
    let cut = args.cut.unwrap_or_else(default_cut);
    let snapshot = root.join(&format!("snapshot={}", format_compact(cut)));
    let stage = |line: String| eprintln!("nightly: {line}");
    stage(format!("cut {}, rules {} ({})", format_instant(cut), rules.origin, &rules.hash[..12]));

    if snapshot.exists(MANIFEST).await? {
        stage(format!("export skipped: {} is already complete", snapshot.display("")));
    } else {
        let plan = ExportPlan { job, out: snapshot.clone(), cut };
        let report = export::export(&plan, &progress(args.quiet)).await?;
        stage(format!("export done: {} rows from {} sources into {} in {}", report.rows, report.sources.len(), report.location, format_elapsed(report.elapsed)));
    }

    let run_started = Instant::now();
    let plan = RunPlan {
        snapshot,
        out: root,
        rules,
        cut: None,
        since: None,
        run_id: None,
        replace: args.replace,
        session: SessionOptions::default(),
        explain: false,
    };
    let quiet = args.quiet;
    let mut run_progress = |line: &str| {
        if !quiet {
            eprintln!("nightly: run: {line}");
        }
    };
    let report = recon::run(&plan, &mut run_progress).await?;
    stage(format!(
        "run done: {} findings ({} BREAK), {} compensation tasks into {} in {}",
        report.summary.findings.iter().map(|f| f.count).sum::<u64>(),
        report.summary.breaks(),
        report.summary.compensation_tasks,
        report.folder,
        format_elapsed(run_started.elapsed())
    ));
    print!("{}", report.summary.render());
    println!("outputs: {}", report.folder);
    stage(format!("finished in {}", format_elapsed(started.elapsed())));
    if args.fail_on_breaks && report.summary.breaks() > 0 {
        return Ok(Outcome::Breaks);
    }
    Ok(Outcome::Clean)
}
