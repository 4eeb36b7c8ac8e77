//! `effect-recon gen`: a synthetic day with planted faults and its ground truth.

use effect_recon::storage::Location;
use effect_recon::time::parse_duration;
use effect_recon::workload::nights::{self, NightsPlan};
use effect_recon::workload::{self as gen, FaultRates, GenPlan};

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
pub(super) struct GenArgs {
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
    #[arg(long, value_name = "ISO", value_parser = parse_instant_arg, default_value = gen::DEFAULT_CUT)]
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
    #[command(flatten)]
    rates: RateArgs,
}

/// Per-order fault probabilities (an order carries at most one fault).
#[derive(Debug, clap::Args)]
struct RateArgs {
    /// ORDER_PAID finished after ORDER_SHIPPED following a rebalance (wrong skip).
    #[arg(long, value_name = "P")]
    reorder_rate: Option<f64>,
    /// Wrong skip whose effects were later granted by hand (HARMLESS).
    #[arg(long, value_name = "P")]
    compensated_rate: Option<f64>,
    /// Cancelled/refunded just before the handler ran (correct skip).
    #[arg(long, value_name = "P")]
    cancel_race_rate: Option<f64>,
    /// DONE but the provider lost, failed, or failed-and-retried the call.
    #[arg(long, value_name = "P")]
    lost_call_rate: Option<f64>,
    /// Crash before the ledger write; redelivery to a non-idempotent provider.
    #[arg(long, value_name = "P")]
    duplicate_rate: Option<f64>,
    /// Manual grant on an unpaid or unknown order.
    #[arg(long, value_name = "P")]
    orphan_rate: Option<f64>,
    /// Parked as PENDING_REVIEW and forgotten.
    #[arg(long, value_name = "P")]
    stalled_rate: Option<f64>,
    /// ORDER_PAID consumed only after the cut.
    #[arg(long, value_name = "P")]
    unconsumed_rate: Option<f64>,
    /// Ledger row revoked and never re-driven.
    #[arg(long, value_name = "P")]
    revoked_rate: Option<f64>,
    /// An instant placed exactly on a window boundary.
    #[arg(long, value_name = "P")]
    edge_rate: Option<f64>,
}

impl RateArgs {
    fn apply(&self, mut rates: FaultRates) -> FaultRates {
        let set = |slot: &mut f64, value: Option<f64>| {
            if let Some(v) = value {
                *slot = v;
            }
        };
        set(&mut rates.reorder, self.reorder_rate);
        set(&mut rates.compensated, self.compensated_rate);
        set(&mut rates.cancel_race, self.cancel_race_rate);
        set(&mut rates.lost_call, self.lost_call_rate);
        set(&mut rates.duplicate, self.duplicate_rate);
        set(&mut rates.orphan, self.orphan_rate);
        set(&mut rates.stalled, self.stalled_rate);
        set(&mut rates.unconsumed, self.unconsumed_rate);
        set(&mut rates.revoked, self.revoked_rate);
        set(&mut rates.edge, self.edge_rate);
        rates
    }
}

impl GenArgs {
    fn plan(&self) -> anyhow::Result<GenPlan> {
        let mut plan = GenPlan::new(Location::parse(&self.out)?, self.orders)?;
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
pub(super) async fn execute(args: GenArgs) -> anyhow::Result<Outcome> {
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
    let report = gen::generate(&plan).await?;
    print!("{}", report.render());
    Ok(Outcome::Clean)
}
