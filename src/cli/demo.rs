//! `effect-recon demo`: a generated day, reconciled and verified, in one folder.
//!
//! Each step is its own function (prepare, generate, reconcile, check) so the lead can
//! route the generated day through an embedded database and the exporter later.

use std::path::PathBuf;

use effect_recon::config::RuleSet;
use effect_recon::gen::{self, truth::TRUTH_FILE, GenPlan, GenReport};
use effect_recon::output::run_folder;
use effect_recon::recon::{self, RunPlan, RunReport};
use effect_recon::session::SessionOptions;
use effect_recon::storage::Location;
use effect_recon::verify::{self, VerifyPlan, VerifyReport};
use effect_recon::Error;

use super::Outcome;

/// Generate a day, reconcile it and check the result against the ground truth.
#[derive(Debug, clap::Args)]
#[command(after_help = "Re-running replaces the previous demo in the same folder.\nExample:\n  effect-recon demo --orders 100000 --dir ./demo")]
pub struct DemoArgs {
    /// Orders in the generated day.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    orders: u64,
    /// Folder of the demo: <dir>/snapshot and <dir>/out.
    #[arg(long, value_name = "DIR", default_value = "./demo")]
    dir: PathBuf,
    /// Seed of the generated day.
    #[arg(long, value_name = "S", default_value_t = 42)]
    seed: u64,
}

/// The folders of a demo.
struct DemoDirs {
    snapshot: Location,
    out: Location,
}

/// Runs `effect-recon demo`.
pub async fn execute(args: DemoArgs) -> anyhow::Result<Outcome> {
    let dirs = prepare(&args).await?;
    let generated = generate(&dirs, &args).await?;
    eprint!("{}", generated.render());
    let run = reconcile(&dirs).await?;
    let checked = check(&dirs, &run).await?;
    print!("{}", run.summary.render());
    print!("{}", checked.render());
    print_next_steps(&args, &run);
    if !checked.is_exact() {
        return Err(Error::Mismatch(format!("the demo run differs from its ground truth in {} places", checked.mismatch_count)).into());
    }
    Ok(Outcome::Clean)
}

/// Clears the previous demo's snapshot and outputs (and nothing else in the folder).
async fn prepare(args: &DemoArgs) -> anyhow::Result<DemoDirs> {
    let root = args.dir.to_string_lossy();
    let dirs = DemoDirs { snapshot: Location::parse(&format!("{root}/snapshot"))?, out: Location::parse(&format!("{root}/out"))? };
    dirs.snapshot.delete_all().await?;
    dirs.out.delete_all().await?;
    Ok(dirs)
}

/// Generates the day into `<dir>/snapshot`.
async fn generate(dirs: &DemoDirs, args: &DemoArgs) -> anyhow::Result<GenReport> {
    let mut plan = GenPlan::new(dirs.snapshot.clone(), args.orders)?;
    plan.seed = args.seed;
    plan.incident = true;
    Ok(gen::generate(&plan).await?)
}

/// Reconciles the snapshot into `<dir>/out` with the default rules and window.
async fn reconcile(dirs: &DemoDirs) -> anyhow::Result<RunReport> {
    let plan = RunPlan {
        snapshot: dirs.snapshot.clone(),
        out: dirs.out.clone(),
        rules: RuleSet::default_rules()?,
        cut: None,
        since: None,
        run_id: None,
        replace: true,
        session: SessionOptions::default(),
        explain: false,
    };
    Ok(recon::run(&plan, &mut |line| eprintln!("{line}")).await?)
}

/// Verifies the run against the truth gen wrote.
async fn check(dirs: &DemoDirs, run: &RunReport) -> anyhow::Result<VerifyReport> {
    let plan = VerifyPlan { truth_folder: dirs.snapshot.clone(), truth_file: TRUTH_FILE.into(), run: dirs.out.join(&run_folder(&run.summary.run_id)) };
    Ok(verify::verify(&plan).await?)
}

fn print_next_steps(args: &DemoArgs, run: &RunReport) {
    let root = args.dir.display();
    let run_dir = format!("{root}/out/{}", run_folder(&run.summary.run_id));
    println!("snapshot: {root}/snapshot   (truth: {root}/snapshot/{TRUTH_FILE})");
    println!("outputs:  {run_dir}");
    println!("try:");
    println!(
        "  effect-recon sql --snapshot {root}/snapshot --run {run_dir} -c \"SELECT class, verdict, count(*) AS n FROM discrepancies GROUP BY class, verdict ORDER BY class, verdict\""
    );
}
