//! `effect-recon watch`: the nightly every few minutes on the intraday chain, one line per
//! cycle, one alert per cycle with NEW findings (docs/WATCH.md).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use effect_recon::compact::compact;
use effect_recon::config::JobConfig;
use effect_recon::db::export::ExportMode;
use effect_recon::db::reopen::{
    self, ItemStatus, ReopenMode, ReopenPlan, DEFAULT_AUDIT_TABLE, DEFAULT_LEDGER_TABLE,
};
use effect_recon::db::WriteTarget;
use effect_recon::engine::session::Engine;
use effect_recon::events::Events;
use effect_recon::gc::{gc, GcPlan};
use effect_recon::nightly::{nightly, JobChain, NightlyPlan, NightlyReport, INTRADAY};
use effect_recon::run_folder::complete_runs;
use effect_recon::storage::Location;
use effect_recon::time::{
    format_compact, format_elapsed, parse_duration, Micros, ReplayClock, REPLAY_CLOCK,
    SECOND_MICROS,
};
use effect_recon::vocabulary::RunStatus;
use effect_recon::watch::{check_watchable, next_cycle, Failures, NextCycle, WatchHealth};

use super::notify::NotifyArgs;
use super::progress::{self, Detail};
use super::{default_cut, stop, EngineArgs, Outcome};

/// Export what changed and run the same SQL every few minutes, on the intraday chain
/// under <root>/intraday/; alert once per cycle that finds NEW BREAK findings.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Each cycle exports what changed since the previous cycle (the job needs key and\n\
changed_column on every source) and runs as a chained run under <root>/intraday/; the first\n\
cycle follows the latest nightly run, and the nightly does not list as NEW what a cycle reported\n\
(docs/WATCH.md). Cycles never overlap: a slow one delays the next and says so. SIGTERM or Ctrl-C\n\
between cycles stops at once; during a cycle it finishes the cycle first (a second one abandons\n\
it: nothing of it is published). A failing cycle is retried with backoff; --alert-after failures\n\
in a row post one alert, and the recovery one more.\n\
Exit codes: 0 stopped (or --once published), 2 error (--once, or bad input), 3 --once INCOMPLETE.\n\
Examples:\n  effect-recon watch --config job.toml --every 5m --alert-webhook https://hooks.example/T0/B0/x\n  \
*/5 * * * * effect-recon watch --config job.toml --once     # the same, from cron"
)]
pub(super) struct WatchArgs {
    /// Job config TOML (root, rules, lookback, sources with key and changed_column).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Start a cycle this often (e.g. 5m), counted from the previous cycle's start.
    #[arg(long, value_name = "DURATION", value_parser = parse_interval, required_unless_present = "once")]
    every: Option<Duration>,
    /// Run one cycle and exit (for cron or a Kubernetes CronJob).
    #[arg(long, conflicts_with = "every")]
    once: bool,
    /// After this many failed cycles in a row, post one alert (and one when a cycle
    /// publishes again).
    #[arg(long, value_name = "N", default_value_t = 3)]
    alert_after: u32,
    /// Every N published cycles, compact the intraday snapshots into one segment and
    /// delete the files no retained snapshot needs (older than an hour); 0: never.
    #[arg(long, value_name = "N", default_value_t = 12)]
    compact_every: u32,
    /// After each published cycle, reopen (SKIPPED / PENDING_REVIEW -> REVOKED) the ledger
    /// rows of its wrong skips through the audited `reopen` path (guarded on the action
    /// the cycle saw, one audit row each), so the consumers decide again.
    #[arg(long)]
    reopen: bool,
    /// With --reopen: a cycle that would reopen more rows than this reopens none, alerts
    /// and stops the loop (exit 2).
    #[arg(long, value_name = "N", default_value_t = 100, requires = "reopen")]
    max_reopen_per_cycle: usize,
    /// Every stage of each cycle (export, run), not only its one line.
    #[arg(long, short)]
    verbose: bool,
    #[command(flatten)]
    pub(super) engine: EngineArgs,
    #[command(flatten)]
    notify: NotifyArgs,
}

/// A duration above zero.
fn parse_interval(text: &str) -> Result<Duration, String> {
    let micros = parse_duration(text)?;
    if micros < SECOND_MICROS {
        return Err(format!("'{text}' is under a second: cycles are cut to the second"));
    }
    Ok(Duration::from_micros(micros as u64))
}

/// Runs `effect-recon watch`.
pub(super) async fn execute(args: WatchArgs) -> anyhow::Result<Outcome> {
    let mut job = JobConfig::load(&args.config)?;
    check_watchable(&job)?;
    // The nightly's periodic shadow check reads the whole lookback; a cycle every few
    // minutes must not (the nightly checks the same sources and the same export).
    job.incremental.verify_full_every = 0;
    args.notify.validate()?;
    // A replayed day (`gen --live`) runs on its own clock: cuts on it, pauses scaled to it.
    let clock = ReplayClock::from_env().map_err(|e| anyhow::anyhow!(e))?;
    if let Some(clock) = &clock {
        eprintln!("watch: on the replay clock {clock} ({REPLAY_CLOCK})");
    }
    stop::catch();
    let every = args.every.unwrap_or(Duration::ZERO);
    let mut watcher = Watcher {
        every: clock.map_or(every, |clock| clock.wall_duration(every)),
        events: progress::stderr(
            "watch: ",
            if args.verbose { Detail::Stages } else { Detail::Warnings },
        ),
        failures: Failures::new(args.alert_after),
        last_cut: last_published_cut(&job).await?,
        last_run: None,
        published: 0,
    };
    loop {
        let started = Instant::now();
        let wait = match watcher.cycle(&args, &job, started).await? {
            Step::Done(outcome) => return Ok(outcome),
            Step::Wait(wait) => wait,
        };
        if !watcher.pause(wait, started).await {
            return Ok(Outcome::Clean);
        }
    }
}

/// The loop's state between cycles.
struct Watcher {
    /// The interval, in wall time.
    every: Duration,
    events: Events,
    failures: Failures,
    /// Two cycles never share a cut, also across processes (`--once` from cron).
    last_cut: Option<Micros>,
    /// After the first cycle, each one follows the run of the one before it.
    last_run: Option<Location>,
    published: u32,
}

/// What follows a cycle.
enum Step {
    /// The command ends with this outcome.
    Done(Outcome),
    /// Another cycle, after this wait.
    Wait(NextCycle),
}

impl Watcher {
    /// One cycle, published, failed or abandoned.
    async fn cycle(
        &mut self,
        args: &WatchArgs,
        job: &JobConfig,
        started: Instant,
    ) -> anyhow::Result<Step> {
        let cut = cut_after(self.last_cut).await;
        let plan = NightlyPlan {
            job: job.clone(),
            cut,
            replace: false,
            session: args.engine.options(),
            engine: Engine::InProcess,
            check_single_node: false,
            export_mode: ExportMode::Auto,
            chain: JobChain::Intraday,
            follows: self.last_run.clone(),
            judge_all: false,
        };
        let Some(result) = finish_or_abandon(nightly(&plan, &self.events), cut).await else {
            return Ok(Step::Done(Outcome::Clean));
        };
        let step = match result {
            Ok(report) => self.published(args, job, cut, &report, started).await?,
            Err(e) if args.once => return Err(e.into()),
            Err(e) => self.failed(args, cut, e.into()).await,
        };
        if matches!(step, Step::Wait(_)) && stop::requests() > 0 {
            eprintln!("watch: stopped after cycle {}", format_compact(cut));
            return Ok(Step::Done(Outcome::Clean));
        }
        Ok(step)
    }

    /// A published cycle: its line, metrics and alert, the repair, the housekeeping.
    async fn published(
        &mut self,
        args: &WatchArgs,
        job: &JobConfig,
        cut: Micros,
        report: &NightlyReport,
        started: Instant,
    ) -> anyhow::Result<Step> {
        self.last_cut = Some(cut);
        self.last_run = Some(Location::parse(&report.run.folder)?);
        self.published += 1;
        eprintln!("{}", cycle_line(report));
        args.notify.deliver_cycle(&report.run, &report.root, !args.verbose).await;
        if args.reopen {
            repair(args, job, report).await?;
        }
        if let Some(n) = self.failures.succeeded() {
            eprintln!("watch: published again after {n} failed cycles");
            args.notify.post(Some(&WatchHealth::recovered(n)), !args.verbose).await;
        }
        if args.once {
            return Ok(Step::Done(Outcome::of_run(&report.run.summary, false)));
        }
        if args.compact_every > 0 && self.published.is_multiple_of(args.compact_every) {
            maintain(&report.root).await;
        }
        Ok(Step::Wait(next_cycle(self.every, started.elapsed())))
    }

    /// A failed cycle: one line, a backoff, and the one alert when failures reach the threshold.
    async fn failed(&mut self, args: &WatchArgs, cut: Micros, e: anyhow::Error) -> Step {
        let error = super::render_error(&e);
        let after = self.failures.failed(self.every);
        eprintln!(
            "watch: cycle {} failed ({} in a row), next try in {}: {error}",
            format_compact(cut),
            after.in_a_row,
            format_elapsed(after.backoff)
        );
        if after.alert {
            let health = WatchHealth::failing(after.in_a_row, &error);
            args.notify.post(Some(&health), false).await;
        }
        Step::Wait(NextCycle::After(after.backoff))
    }

    /// Waits for the next cycle; `false` when a stop request came meanwhile.
    async fn pause(&self, wait: NextCycle, started: Instant) -> bool {
        match wait {
            NextCycle::Overrun => {
                eprintln!(
                    "watch: the cycle took {}, longer than --every {}: the next starts now (cycles never overlap)",
                    format_elapsed(started.elapsed()),
                    format_elapsed(self.every)
                );
                true
            }
            NextCycle::After(pause) => tokio::select! {
                () = tokio::time::sleep(pause) => true,
                () = stop::requested(1) => {
                    eprintln!("watch: stopped between cycles");
                    false
                }
            },
        }
    }
}

/// The cut of the latest published cycle under the job's root.
async fn last_published_cut(job: &JobConfig) -> anyhow::Result<Option<Micros>> {
    let Some(root) = &job.root else { return Ok(None) };
    let intraday = Location::parse(root)?.join(INTRADAY);
    Ok(complete_runs(&intraday).await?.last().map(|run| run.cut))
}

/// Now, cut to the second, and after `last` (two cycles never share a cut).
async fn cut_after(last: Option<Micros>) -> Micros {
    loop {
        let cut = default_cut();
        if last.is_none_or(|last| cut > last) {
            return cut;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs the cycle to its end, unless a second stop request comes while it runs: then it
/// is dropped (`None`) before its run's manifest is written, so nothing of it counts.
async fn finish_or_abandon<F: std::future::Future>(cycle: F, cut: Micros) -> Option<F::Output> {
    tokio::pin!(cycle);
    let mut seen = stop::requests();
    loop {
        tokio::select! {
            result = &mut cycle => return Some(result),
            () = stop::requested(seen + 1) => {
                seen = stop::requests();
                if seen >= 2 {
                    eprintln!(
                        "watch: cycle {} abandoned: nothing of it is published; the next start resumes from the last published cycle",
                        format_compact(cut)
                    );
                    return None;
                }
                eprintln!("watch: stopping after this cycle (send the signal again to abandon it)");
            }
        }
    }
}

/// `watch: cycle 20261204T094000Z COMPLETE: 3 NEW BREAK, open 12; export incremental, 1,204 rows; 2.31s`.
fn cycle_line(report: &NightlyReport) -> String {
    let summary = &report.run.summary;
    let export = match &report.export {
        Some(export) => format!(
            "export {}, {} rows",
            export.manifest.chain.as_ref().map_or("full", |c| c.mode.as_str()),
            export.rows
        ),
        None => "snapshot reused".into(),
    };
    format!(
        "watch: cycle {} {}: {} NEW BREAK, open {}; {export}; {}",
        summary.run_id,
        summary.status.as_str(),
        summary.new,
        summary.open,
        format_elapsed(report.elapsed)
    )
}

/// `--reopen`: the cycle's reopen messages set REVOKED through the audited path, unless
/// there are more than the ceiling: then none is, one alert goes out, and the loop stops
/// (the only error returned). A batch that fails is rolled back whole (docs/RELIABILITY.md).
async fn repair(args: &WatchArgs, job: &JobConfig, cycle: &NightlyReport) -> anyhow::Result<()> {
    if cycle.run.summary.status == RunStatus::Incomplete {
        eprintln!("watch: --reopen: the cycle is INCOMPLETE; nothing reopened");
        return Ok(());
    }
    let source = super::reopen::ledger_source(job)?;
    let (table, columns) = reopen::ledger_mapping(&source.query);
    let mut plan = ReopenPlan {
        mode: ReopenMode::Revoke { run: Location::parse(&cycle.run.folder)? },
        target: WriteTarget::new("watch --reopen", &source.url, source.password_env.as_deref())?,
        table: table.unwrap_or_else(|| DEFAULT_LEDGER_TABLE.into()),
        columns,
        audit_table: DEFAULT_AUDIT_TABLE.into(),
        apply: false,
        create_audit: true,
        batch: 100,
        max_rows_per_second: None,
        by: "effect-recon watch".into(),
        republish: None,
        allow_incomplete: false,
        only: None,
    };
    // A database that fails here fails the next cycle's export too: said, not fatal.
    let warn = |e: effect_recon::error::Error| {
        eprintln!("warning: watch --reopen: {e}; nothing reopened, the next cycle tries again");
    };
    let would = match reopen::reopen(&plan).await {
        Ok(dry) => dry.count(ItemStatus::Changed),
        Err(e) => {
            warn(e);
            return Ok(());
        }
    };
    if would == 0 {
        return Ok(());
    }
    if would > args.max_reopen_per_cycle {
        let health =
            WatchHealth::reopen_ceiling(would, args.max_reopen_per_cycle, &cycle.run.folder);
        args.notify.post(Some(&health), false).await;
        anyhow::bail!("{}", health.text);
    }
    plan.apply = true;
    let done = match reopen::reopen(&plan).await {
        Ok(done) => done,
        Err(e) => {
            warn(e);
            return Ok(());
        }
    };
    eprintln!(
        "watch: reopened {} ledger row(s), {} changed meanwhile (left alone); undo with: effect-recon reopen --config {} --undo {} --apply",
        done.count(ItemStatus::Changed),
        done.count(ItemStatus::Moved),
        args.config.display(),
        done.apply_id.as_deref().unwrap_or("?")
    );
    Ok(())
}

/// Compacts the intraday snapshots and collects what no retained snapshot needs; a
/// failure is a warning (the next cycle follows whatever head is complete).
async fn maintain(intraday: &Location) {
    let result = async {
        let compacted = compact(intraday).await?;
        let plan = GcPlan {
            root: intraday.clone(),
            keep_runs: 2,
            grace: 3600 * SECOND_MICROS,
            apply: true,
        };
        let collected = gc(&plan).await?;
        Ok::<_, effect_recon::error::Error>((compacted, collected))
    }
    .await;
    match result {
        Ok((compacted, collected)) => eprintln!(
            "watch: compacted {} ({} files -> {}); gc deleted {} objects",
            compacted.head,
            compacted.files.0,
            compacted.files.1,
            collected.deleted.len()
        ),
        Err(e) => {
            eprintln!("warning: watch: maintenance of {intraday} failed: {e}; the cycles go on")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_is_at_least_a_second() {
        assert_eq!(parse_interval("5m"), Ok(Duration::from_secs(300)));
        assert!(parse_interval("500ms").unwrap_err().contains("under a second"));
        assert!(parse_interval("0s").is_err());
        assert!(parse_interval("soon").is_err());
    }
}
