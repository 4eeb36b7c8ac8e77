//! `effect-recon gen`: a synthetic day with planted faults and its ground truth.

use std::sync::OnceLock;

use effect_recon::storage::Location;
use std::time::Duration;

use effect_recon::time::{
    format_elapsed, format_instant, parse_duration, DAY_MICROS, REPLAY_CLOCK,
};
use effect_recon::workload::live::{self, LivePlan};
use effect_recon::workload::nights::{self, NightsPlan};
use effect_recon::workload::world::Fault;
use effect_recon::workload::{self, FaultRates, WorkloadPlan};

use super::{parse_instant_arg, Outcome};

/// Generate a synthetic snapshot (24-partition order-event workload with planted faults)
/// and its ground truth <out>/truth.parquet.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  effect-recon gen --out /tmp/snap --orders 1000000 --seed 7\n  \
effect-recon run --snapshot /tmp/snap --out /tmp/recon\n  \
effect-recon verify --truth /tmp/snap/truth.parquet --run /tmp/recon/run=20261129T160000Z\n\n\
Several nights (the last cut is --cut; each later run follows the one before):\n  \
effect-recon gen --nights 4 --out /tmp/nights --orders 5000 --seed 7\n  \
for s in /tmp/nights/snapshot=*; do effect-recon run --snapshot $s --out /tmp/runs; done\n  \
effect-recon verify --nights /tmp/nights --runs /tmp/runs"
)]
pub(super) struct WorkloadArgs {
    /// Snapshot folder to write (a directory, file:// or s3:// URL); with --nights, the
    /// root that snapshot=<cut>/ folders are written under.
    #[arg(long, value_name = "DIR|URL")]
    out: String,
    /// Write N consecutive nights of one continuing world, one day apart, the last at
    /// --cut, each with its truth for the chain of runs (--orders counts all nights).
    #[arg(long, value_name = "N")]
    nights: Option<usize>,
    /// With --nights: each snapshot holds rows newer than cut - 1 day - lookback.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "30d", requires = "nights")]
    lookback: i64,
    /// With --nights: the --late-horizon of the runs the truth is for.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "2d", requires = "nights")]
    late_horizon: i64,
    /// With --nights: the --max-age of the runs the truth is for.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "30d", requires = "nights")]
    max_age: i64,
    /// Number of orders (ids 1..=N).
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    orders: u64,
    /// Partitions of the order-event topic.
    #[arg(long, value_name = "N", default_value_t = 24)]
    partitions: u32,
    /// Consumer instances of the group.
    #[arg(long, value_name = "N", default_value_t = 8)]
    consumers: u32,
    /// Seed; the same seed and arguments give byte-identical files.
    #[arg(long, value_name = "S", default_value_t = 42)]
    seed: u64,
    /// The snapshot's cut (the truth is for the window (cut - 1 day, cut]).
    #[arg(long, value_name = "ISO", value_parser = parse_instant_arg, default_value = workload::DEFAULT_CUT)]
    cut: i64,
    /// Plant the canonical incident: order 8821, SHIPPED msg-7392 handled before PAID msg-7391.
    #[arg(long)]
    incident: bool,
    /// Set every fault rate to 0 (a clean day: a correct run finds nothing).
    #[arg(long)]
    no_faults: bool,
    /// Delete whatever the output folder holds first.
    #[arg(long)]
    replace: bool,
    /// Then write the day into this database (mysql://, postgres:// or sqlite: URL) in
    /// event-time order, --speed times faster than it happened: the rows up to --live-from
    /// at once, the rest as the replay clock passes them. The clock is printed (and written
    /// to --clock-file) as EFFECT_RECON_CLOCK=..., for `watch` to cut its cycles on.
    #[arg(long, value_name = "URL", conflicts_with = "nights")]
    live: Option<String>,
    /// With --live: event seconds per wall second.
    #[arg(long, value_name = "N", default_value_t = 60.0, requires = "live")]
    speed: f64,
    /// With --live: where the replay starts (default: cut - 1 day, the truth's window).
    #[arg(long, value_name = "ISO", value_parser = parse_instant_arg, requires = "live")]
    live_from: Option<i64>,
    /// With --live: also write the clock's EFFECT_RECON_CLOCK value into this file.
    #[arg(long, value_name = "FILE", requires = "live")]
    clock_file: Option<std::path::PathBuf>,
    #[command(flatten)]
    rates: RateArgs,
}

/// Per-order fault probabilities (an order carries at most one fault): an optional
/// `--<fault>-rate P` per fault of [`Fault::ALL`], each made from the fault's table entry
/// (its name, and its doc as the help).
#[derive(Debug, Default)]
struct RateArgs([Option<f64>; Fault::COUNT]);

/// The flag of a fault's rate without its dashes: `<name>-rate`, `-` for `_`.
fn rate_flag(fault: Fault) -> &'static str {
    static FLAGS: OnceLock<[String; Fault::COUNT]> = OnceLock::new();
    let flags =
        FLAGS.get_or_init(|| Fault::ALL.map(|f| format!("{}-rate", f.name().replace('_', "-"))));
    &flags[fault.index()]
}

impl clap::Args for RateArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        Fault::ALL.into_iter().fold(cmd, |cmd, fault| {
            // As clap's derive shows a one-line doc: without its final period.
            let help = fault.doc().strip_suffix('.').unwrap_or(fault.doc());
            cmd.arg(
                clap::Arg::new(rate_flag(fault))
                    .long(rate_flag(fault))
                    .value_name("P")
                    .value_parser(clap::value_parser!(f64))
                    .action(clap::ArgAction::Set)
                    .help(help),
            )
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl clap::FromArgMatches for RateArgs {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut args = RateArgs::default();
        args.update_from_arg_matches(matches)?;
        Ok(args)
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        // Each id is defined by `augment_args` with an f64 parser: `get_one` cannot fail.
        for fault in Fault::ALL {
            if let Some(&rate) = matches.get_one::<f64>(rate_flag(fault)) {
                self.0[fault.index()] = Some(rate);
            }
        }
        Ok(())
    }
}

impl RateArgs {
    /// `rates` with each rate given on the command line in place of its own.
    fn apply(&self, mut rates: FaultRates) -> FaultRates {
        for (fault, rate) in Fault::ALL.into_iter().zip(self.0) {
            if let Some(rate) = rate {
                rates.set(fault, rate);
            }
        }
        rates
    }
}

impl WorkloadArgs {
    fn plan(&self) -> anyhow::Result<WorkloadPlan> {
        let mut plan = WorkloadPlan::new(Location::parse(&self.out)?, self.orders)?;
        plan.partitions = self.partitions;
        plan.consumers = self.consumers;
        plan.seed = self.seed;
        plan.cut = self.cut;
        plan.incident = self.incident;
        plan.replace = self.replace;
        let base = if self.no_faults { FaultRates::none() } else { FaultRates::default() };
        plan.rates = self.rates.apply(base);
        plan.validate()?;
        Ok(plan)
    }
}

/// Runs `effect-recon gen`.
pub(super) async fn execute(args: WorkloadArgs) -> anyhow::Result<Outcome> {
    if let Some(count) = args.nights {
        let mut plan = NightsPlan::new(args.plan()?, count);
        (plan.lookback, plan.late_horizon, plan.max_age) =
            (args.lookback, args.late_horizon, args.max_age);
        plan.validate()?;
        let report = nights::generate_nights(&plan).await?;
        print!("{}", report.render());
        return Ok(Outcome::Clean);
    }
    let plan = args.plan()?;
    let report = workload::generate(&plan).await?;
    print!("{}", report.render());
    if let Some(url) = &args.live {
        replay(&args, &plan, url).await?;
    }
    Ok(Outcome::Clean)
}

/// `--live`: the generated day replayed into `url` on a clock `--speed` times faster.
async fn replay(args: &WorkloadArgs, plan: &WorkloadPlan, url: &str) -> anyhow::Result<()> {
    let live = LivePlan {
        snapshot: plan.out.clone(),
        url: url.to_string(),
        speed: args.speed,
        from: args.live_from.unwrap_or(plan.cut - DAY_MICROS),
        until: plan.cut,
        tick: Duration::from_millis(100),
    };
    anyhow::ensure!(live.from < live.until, "--live-from must be before --cut");
    let mut written = Ok(());
    let report = live::replay(&live, |clock| {
        println!("{REPLAY_CLOCK}={clock}");
        let _ = std::io::Write::flush(&mut std::io::stdout());
        if let Some(path) = &args.clock_file {
            written = std::fs::write(path, clock.to_string())
                .map_err(|e| anyhow::anyhow!("--clock-file {}: {e}", path.display()));
        }
    })
    .await?;
    written?;
    println!(
        "replayed: {} rows up to {} at once, then {} rows in {} ticks over {} (x{})",
        report.preloaded,
        format_instant(live.from),
        report.replayed,
        report.ticks,
        format_elapsed(report.elapsed),
        args.speed
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::{Args, FromArgMatches};

    use super::*;

    #[test]
    fn every_fault_rate_has_its_flag_and_lands_in_its_own_slot() {
        assert_eq!(rate_flag(Fault::CancelRace), "cancel-race-rate");
        let mut argv = vec!["gen".to_string()];
        for fault in Fault::ALL {
            argv.extend([format!("--{}", rate_flag(fault)), format!("0.0{}", fault.index())]);
        }
        let matches =
            RateArgs::augment_args(clap::Command::new("gen")).try_get_matches_from(argv).unwrap();
        let rates = RateArgs::from_arg_matches(&matches).unwrap().apply(FaultRates::default());
        for fault in Fault::ALL {
            assert_eq!(rates.rate(fault), format!("0.0{}", fault.index()).parse::<f64>().unwrap());
        }
        let none = RateArgs::augment_args(clap::Command::new("gen")).get_matches_from(["gen"]);
        let untouched = RateArgs::from_arg_matches(&none).unwrap().apply(FaultRates::default());
        assert_eq!(untouched, FaultRates::default());
    }
}
