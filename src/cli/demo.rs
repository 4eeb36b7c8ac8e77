//! `effect-recon demo`: the main job end to end on the embedded default. A generated day
//! is loaded into an embedded SQLite database (the source a newcomer has without any
//! server), exported and reconciled by the nightly pipeline, and verified against the
//! ground truth of the generator.

use std::path::{Path, PathBuf};

use effect_recon::config::JobConfig;
use effect_recon::export::load::{load_snapshot, LoadOptions};
use effect_recon::history;
use effect_recon::nightly::{nightly, NightlyPlan, NightlyReport};
use effect_recon::recon::publish::run_folder;
use effect_recon::session::SessionOptions;
use effect_recon::storage::Location;
use effect_recon::time::format_elapsed;
use effect_recon::time::format_instant;
use effect_recon::verify::verify_nights;
use effect_recon::verify::{self, VerifyPlan, VerifyReport};
use effect_recon::workload::nights::{generate_nights, NightsPlan};
use effect_recon::workload::{self as gen, truth::TRUTH_FILE, GenPlan, GenReport};
use effect_recon::Error;

use super::progress::{self, Detail};
use super::Outcome;

/// The embedded default job: every source in `fulfilment.db`, the nightly root `recon/`.
const DEMO_JOB: &str = include_str!("../../fixtures/demo/job.toml");

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

/// The places of a demo.
struct DemoDirs {
    root: PathBuf,
    generated: Location,
    database: PathBuf,
    job: PathBuf,
    recon: PathBuf,
}

/// Runs `effect-recon demo`.
pub(super) async fn execute(args: DemoArgs) -> anyhow::Result<Outcome> {
    if args.nights > 1 {
        return execute_nights(args).await;
    }
    let dirs = prepare(&args)?;
    eprintln!(
        "demo: generating {} orders into {} (about 2 s per 100k orders)",
        args.orders,
        dirs.generated.display("")
    );
    let generated = generate(&dirs, &args).await?;
    eprint!("{}", generated.render());
    eprintln!(
        "demo: loading the day into SQLite {} (about 10 s per 100k orders)",
        dirs.database.display()
    );
    load(&dirs).await?;
    eprintln!(
        "demo: nightly job {}: export from SQLite (about 15 s per 100k orders), then run",
        dirs.job.display()
    );
    let report = run_nightly(&dirs, &generated).await?;
    eprintln!("demo: verifying the run against the ground truth");
    let checked = check(&dirs, &report).await?;
    print!("{}", report.run.summary.render());
    print!("{}", checked.render());
    print_next_steps(&dirs, &report);
    if !checked.is_exact() {
        return Err(Error::Mismatch(format!(
            "the demo run differs from its ground truth in {} places",
            checked.mismatch_count
        ))
        .into());
    }
    Ok(Outcome::Clean)
}

/// `demo --nights N`: one continuing world, N nights; each night's snapshot becomes the
/// SQLite source, the nightly job exports and runs it following the night before, and the
/// run is verified against that night's truth. Ends with the backlog's history.
async fn execute_nights(args: DemoArgs) -> anyhow::Result<Outcome> {
    let dirs = prepare(&args)?;
    let mut gen_plan = GenPlan::new(dirs.generated.clone(), args.orders)?;
    gen_plan.seed = args.seed;
    gen_plan.incident = true;
    let plan = NightsPlan::new(gen_plan, args.nights as usize);
    let generated = generate_nights(&plan).await?;
    eprint!("{}", generated.render());
    std::fs::write(&dirs.job, DEMO_JOB)?;
    let recon = Location::parse(&dirs.recon.display().to_string())?;
    for cut in plan.cuts() {
        let night = dirs.generated.join(&NightsPlan::snapshot_folder(cut));
        eprintln!("demo: night {} ----------------------------------------", format_instant(cut));
        if dirs.database.exists() {
            std::fs::remove_file(&dirs.database)?;
        }
        let url = format!("sqlite:{}", dirs.database.display());
        let loaded = load_snapshot(&night, &url, &LoadOptions::default()).await?;
        eprintln!(
            "demo: loaded {} rows of that night into {}",
            loaded.rows(),
            dirs.database.display()
        );
        let nightly_plan = NightlyPlan {
            job: JobConfig::load(&dirs.job)?,
            cut,
            replace: true,
            session: SessionOptions::default(),
        };
        let report = nightly(&nightly_plan, &progress::stderr("nightly: ", Detail::All)).await?;
        print!("{}", report.run.summary.render());
    }
    let checked = verify_nights(&dirs.generated, &recon).await?;
    print!("{}", checked.render());
    println!("history (effect-recon history --out {}):", recon.display(""));
    print!("{}", history::render_table(&history::read(&recon).await?));
    if !checked.is_exact() {
        return Err(Error::Mismatch("the demo nights differ from their ground truth".into()).into());
    }
    Ok(Outcome::Clean)
}

/// Removes the previous demo's outputs (and nothing else in the folder).
fn prepare(args: &DemoArgs) -> anyhow::Result<DemoDirs> {
    std::fs::create_dir_all(&args.dir)?;
    let root = std::fs::canonicalize(&args.dir)?;
    let dirs = DemoDirs {
        generated: Location::parse(&root.join("generated").display().to_string())?,
        database: root.join("fulfilment.db"),
        job: root.join("job.toml"),
        recon: root.join("recon"),
        root,
    };
    for dir in [dirs.root.join("generated"), dirs.recon.clone()] {
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
    }
    for file in [&dirs.database, &dirs.job] {
        if file.exists() {
            std::fs::remove_file(file)?;
        }
    }
    Ok(dirs)
}

/// Generates the day (with the msg-7391 incident planted) into `<dir>/generated`.
async fn generate(dirs: &DemoDirs, args: &DemoArgs) -> anyhow::Result<GenReport> {
    let mut plan = GenPlan::new(dirs.generated.clone(), args.orders)?;
    plan.seed = args.seed;
    plan.incident = true;
    Ok(gen::generate(&plan).await?)
}

/// Loads the generated day into `<dir>/fulfilment.db` with the recommended schema.
async fn load(dirs: &DemoDirs) -> anyhow::Result<()> {
    let url = format!("sqlite:{}", dirs.database.display());
    let report = load_snapshot(&dirs.generated, &url, &LoadOptions::default()).await?;
    eprintln!(
        "demo: loaded {} rows into {} in {}",
        report.rows(),
        dirs.database.display(),
        format_elapsed(report.elapsed)
    );
    Ok(())
}

/// Writes the embedded job next to the database and runs it like cron would.
async fn run_nightly(dirs: &DemoDirs, generated: &GenReport) -> anyhow::Result<NightlyReport> {
    std::fs::write(&dirs.job, DEMO_JOB)?;
    let cut =
        generated.window.map(|w| w.cut).ok_or_else(|| anyhow::anyhow!("gen reported no cut"))?;
    let plan = NightlyPlan {
        job: JobConfig::load(&dirs.job)?,
        cut,
        replace: true,
        session: SessionOptions::default(),
    };
    Ok(nightly(&plan, &progress::stderr("nightly: ", Detail::All)).await?)
}

/// Verifies the run against the truth gen wrote.
async fn check(dirs: &DemoDirs, report: &NightlyReport) -> anyhow::Result<VerifyReport> {
    let run = Location::parse(&dirs.recon.display().to_string())?
        .join(&run_folder(&report.run.summary.run_id));
    let plan =
        VerifyPlan { truth_folder: dirs.generated.clone(), truth_file: TRUTH_FILE.into(), run };
    Ok(verify::verify(&plan).await?)
}

fn print_next_steps(dirs: &DemoDirs, report: &NightlyReport) {
    let snapshot = report.snapshot.display("");
    let run_dir = report.run.folder.clone();
    println!("source:   {} (SQLite; job {})", dirs.database.display(), dirs.job.display());
    println!("snapshot: {snapshot}");
    println!("outputs:  {run_dir}");
    println!("truth:    {}", Path::new(&dirs.generated.display(TRUTH_FILE)).display());
    let me = super::self_command();
    println!("explore:");
    println!(
        "  {me} sql --snapshot {snapshot} --run {run_dir} -c \"SELECT class, verdict, count(*) AS n FROM discrepancies GROUP BY class, verdict ORDER BY class, verdict\""
    );
    if me != "effect-recon" {
        println!("  (effect-recon is not on the PATH; ./scripts/install puts it there)");
    }
}
