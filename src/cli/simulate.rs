//! `effect-recon simulate`: one world under several consumer policies side by side.

use bytes::Bytes;
use effect_recon::simulate::{self, PolicyReport, SimPlan, DEFAULT_POLICIES};
use effect_recon::storage::Location;
use effect_recon::time::parse_duration;
use effect_recon::workload::world::Lag;

use super::Outcome;

/// Run one generated world (same orders, messages, rebalances, redeliveries, providers)
/// under several consumer policies and compare lost and wrong effects, database and Kafka
/// cost, time to correct, and what the T+1 reconciliation still catches.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Policies: skip | pending-review:N | rereview-event | scan:INTERVAL[:TTL] | state-machine |\n\
state-machine+scan:INTERVAL[:TTL] (TTL default 1d) | fenced | fenced+state-machine | versioned:TIMEOUT |\n\
obligation. docs/REVERSIBLE-SKIPS.md explains the figures, docs/OBLIGATIONS.md the obligation.\n\n\
Example:\n  effect-recon simulate --orders 1000000 --seed 7 --out /tmp/sim\n  \
effect-recon simulate --orders 200000 --seed 7 --sweep --no-net --out /tmp/sweep\n\n\
--out gets policies.csv, time_to_correct.csv, policies.svg, time_to_correct.svg (and sweep.csv,\n\
sweep.svg with --sweep), and per policy <slug>/snapshot (with truth.parquet) and <slug>/runs."
)]
pub(crate) struct SimulateArgs {
    /// Number of orders (ids 1..=N); the incident order 8821 is always planted.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    orders: u64,
    /// Seed of the world.
    #[arg(long, value_name = "S", default_value_t = 7)]
    seed: u64,
    /// Comma-separated policies.
    #[arg(long, value_name = "LIST", default_value = DEFAULT_POLICIES)]
    policies: String,
    /// Folder for the CSV, the charts and each policy's snapshot and run.
    #[arg(long, value_name = "DIR|URL")]
    out: Option<String>,
    /// Rebalances of the consumer group per hour (default one every 3 hours); the rate of
    /// zombie reorders scales with it.
    #[arg(long, value_name = "X")]
    rebalances_per_hour: Option<f64>,
    /// Consumer lag from production to handling: uniform:LOW..HIGH or exp:LOW+MEAN.
    #[arg(long, value_name = "DIST", value_parser = Lag::parse, default_value = "uniform:5ms..1500ms")]
    lag: Lag,
    /// Consumers read the order status from a replica this far behind.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "0s")]
    read_lag: i64,
    /// Every rebalance is a restart: consumers handle nothing for this long, then work off
    /// the backlog at ten times the arrival rate (messages arrive late, in order).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "0s")]
    restart_backlog: i64,
    /// Providers deduplicate on the business key {effect}:{order_id} on every path (a
    /// repeated grant records nothing); default: they do not.
    #[arg(long)]
    provider_dedup: bool,
    /// Also sweep N of pending-review (1s..1h) and INTERVAL of scan (30s..6h), without net.
    #[arg(long)]
    sweep: bool,
    /// Skip the T+1 net (snapshot, run, verify per policy); only the simulation.
    #[arg(long)]
    no_net: bool,
}

/// Runs `effect-recon simulate`.
pub(super) async fn execute(args: SimulateArgs) -> anyhow::Result<Outcome> {
    let mut plan = SimPlan::new(args.orders, args.seed, &args.policies)?;
    plan.rebalances_per_hour = args.rebalances_per_hour;
    plan.lag = args.lag;
    plan.read_lag = args.read_lag;
    plan.restart_backlog = args.restart_backlog;
    plan.provider_dedup = args.provider_dedup;
    let out = args.out.as_deref().map(Location::parse).transpose()?;
    let scratch =
        std::env::temp_dir().join(format!("effect-recon-simulate-{}", std::process::id()));
    if !args.no_net {
        plan.net = Some(match &out {
            Some(out) => out.clone(),
            None => Location::parse(scratch.to_str().unwrap_or("/tmp/effect-recon-simulate"))?,
        });
    }
    plan.validate()?;
    let started = std::time::Instant::now();
    let reports = simulate::simulate(&plan).await;
    if out.is_none() && scratch.exists() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    let reports = reports?;
    let mut world = format!(
        "seed {}, {} orders, lag {}, read lag {}, rebalances/hour {}",
        args.seed,
        args.orders,
        args.lag,
        effect_recon::time::format_duration(args.read_lag),
        args.rebalances_per_hour.map_or("1/3 (default)".into(), |r| r.to_string())
    );
    if args.restart_backlog > 0 {
        let backlog = effect_recon::time::format_duration(args.restart_backlog);
        world.push_str(&format!(", restart backlog {backlog}"));
    }
    if args.provider_dedup {
        world.push_str(", providers dedup on the business key");
    }
    println!("{world}");
    print!("{}", simulate::render(&reports));
    eprintln!("simulated in {}", effect_recon::time::format_elapsed(started.elapsed()));
    if let Some(out) = &out {
        write(out, "policies.csv", simulate::csv(&reports)).await?;
        write(out, "time_to_correct.csv", simulate::ttc_csv(&reports)).await?;
        write(out, "policies.svg", simulate::policies_svg(&reports, &world)?).await?;
        let title = format!("time to correct, {world}");
        write(out, "time_to_correct.svg", simulate::time_to_correct_svg(&reports, &title)?).await?;
    }
    if args.sweep {
        let started = std::time::Instant::now();
        let swept = simulate::sweep(&plan).await?;
        println!("\nsweep of pending-review N and scan INTERVAL ({world})");
        print!("{}", simulate::render(&swept));
        eprintln!("swept in {}", effect_recon::time::format_elapsed(started.elapsed()));
        if let Some(out) = &out {
            write(out, "sweep.csv", simulate::csv(&swept)).await?;
            write(out, "sweep.svg", simulate::sweep_svg(&swept, &format!("sweep, {world}"))?)
                .await?;
        }
    }
    if let Some(out) = &out {
        println!("wrote {}", out);
    }
    let inexact: Vec<&PolicyReport> =
        reports.iter().filter(|r| r.net.as_ref().is_some_and(|n| !n.exact)).collect();
    if !inexact.is_empty() {
        anyhow::bail!(
            "the T+1 run differs from the truth for {}",
            inexact.iter().map(|r| r.label.as_str()).collect::<Vec<_>>().join(", ")
        );
    }
    Ok(Outcome::Clean)
}

async fn write(out: &Location, name: &str, text: String) -> anyhow::Result<()> {
    out.write(name, Bytes::from(text)).await?;
    Ok(())
}
