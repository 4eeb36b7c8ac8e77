//! `effect-recon demo`: the main job end to end on the embedded default. A generated day
//! is loaded into an embedded SQLite database (the source a newcomer has without any
//! server), exported and reconciled by the nightly pipeline, and verified against the
//! ground truth of the generator.

use std::path::PathBuf;

use effect_recon::demo::{demo, DemoLayout, DemoNight, DemoPlan};
use effect_recon::inspect::history;
use effect_recon::Error;

use super::progress::{self, Detail};
use super::Outcome;

/// Generate a day into SQLite, run the nightly job on it (export, then run) and check the
/// findings against the ground truth.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Writes <dir>/generated (the day and its truth), <dir>/fulfilment.db (SQLite),
<dir>/job.toml and <dir>/recon/ (snapshot=<cut>/ and run=<id>/). Re-running replaces them.
Example:
  effect-recon demo --orders 100000 --dir ./demo"
)]
pub(super) struct DemoArgs {
    /// Orders in the generated day.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    orders: u64,
    /// Folder of the demo.
    #[arg(long, value_name = "DIR", default_value = "./demo")]
    dir: PathBuf,
    /// Seed of the generated day.
    #[arg(long, value_name = "S", default_value_t = 42)]
    seed: u64,
    /// Several consecutive nights of one world: each night is loaded, exported and run
    /// following the night before (NEW, PERSISTING, RESOLVED), then `history` is shown.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=30))]
    nights: u32,
}

/// Runs `effect-recon demo`.
pub(super) async fn execute(args: DemoArgs) -> anyhow::Result<Outcome> {
    let plan = DemoPlan {
        dir: args.dir,
        orders: args.orders,
        seed: args.seed,
        nights: args.nights as usize,
    };
    let report = demo(&plan, &progress::stderr("nightly: ", Detail::All)).await?;
    let several = report.nights.len() > 1;
    for night in &report.nights {
        print!("{}", night.nightly.run.summary.render());
        if several {
            println!("night {}:", night.nightly.run.summary.run_id);
        }
        print!("{}", night.verified.render());
    }
    if several {
        if let Some(written) = report.nights.last().and_then(|night| night.nightly.report.as_ref())
        {
            super::report::print_written(written);
        }
        let me = super::self_command();
        println!("history ({me} history --out {}):", report.layout.recon);
        print!("{}", history::render_table(&report.history));
    } else if let Some(night) = report.nights.last() {
        print_next_steps(&report.layout, night);
    }
    if !report.is_exact() {
        return Err(Error::Mismatch(format!(
            "the demo differs from its ground truth in {} places",
            report.mismatch_count()
        ))
        .into());
    }
    Ok(Outcome::Clean)
}

fn print_next_steps(layout: &DemoLayout, night: &DemoNight) {
    let snapshot = night.nightly.snapshot.to_string();
    let run_dir = night.nightly.run.folder.clone();
    println!("source:   {} (SQLite; job {})", layout.database.display(), layout.job.display());
    println!("snapshot: {snapshot}");
    println!("outputs:  {run_dir}");
    match &night.nightly.report {
        Some(Ok(written)) => println!("report:   {}", written.location),
        Some(failed) => super::report::print_written(failed),
        None => {}
    }
    println!("truth:    {}", night.truth);
    let me = super::self_command();
    println!("explore:");
    println!(
        "  {me} sql --snapshot {snapshot} --run {run_dir} -c \"SELECT class, verdict, count(*) AS n FROM discrepancies GROUP BY class, verdict ORDER BY class, verdict\""
    );
    if me != "effect-recon" {
        println!("  (effect-recon is not on the PATH; ./scripts/install puts it there)");
    }
}
