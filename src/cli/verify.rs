//! `effect-recon verify`: a run checked against the ground truth of `gen`.

use effect_recon::storage::Location;
use effect_recon::verify::{self, VerifyPlan};
use effect_recon::Error;

use super::Outcome;

/// Compare a run's discrepancies and skip verdicts (and, for gen --nights, the lifecycle
/// columns and resolved) with a ground truth; print precision and recall per class and
/// verdict and the first mismatches. With --nights, every night of a gen --nights root.
#[derive(Debug, clap::Args)]
#[command(after_help = "Exit codes: 0 the run equals the truth, 2 any mismatch or error.\n\
Examples:\n  effect-recon verify --truth /tmp/snap/truth.parquet --run /tmp/recon/run=20261129T160000Z\n  \
effect-recon verify --nights /tmp/nights --runs /tmp/runs")]
pub(super) struct VerifyArgs {
    /// The truth file written by gen (<snapshot>/truth.parquet).
    #[arg(
        long,
        value_name = "FILE|URL",
        required_unless_present = "nights",
        conflicts_with = "nights",
        requires = "run"
    )]
    truth: Option<String>,
    /// The run folder (<out>/run=<id>).
    #[arg(long, value_name = "DIR|URL", conflicts_with = "nights")]
    run: Option<String>,
    /// A gen --nights root: each snapshot=<id> is compared with <runs>/run=<id>, in cut order.
    #[arg(long, value_name = "DIR|URL", requires = "runs")]
    nights: Option<String>,
    /// With --nights: the --out the nights were run into.
    #[arg(long, value_name = "DIR|URL", requires = "nights")]
    runs: Option<String>,
}

/// Runs `effect-recon verify`.
pub(super) async fn execute(args: VerifyArgs) -> anyhow::Result<Outcome> {
    if let (Some(root), Some(runs)) = (&args.nights, &args.runs) {
        let report =
            verify::verify_nights(&Location::parse(root)?, &Location::parse(runs)?).await?;
        print!("{}", report.render());
        if !report.is_exact() {
            return Err(Error::Mismatch(format!(
                "the runs under {runs} differ from the truths under {root}"
            ))
            .into());
        }
        return Ok(Outcome::Clean);
    }
    let (truth, run) = (args.truth.unwrap_or_default(), args.run.unwrap_or_default());
    let plan = VerifyPlan::parse(&truth, &run)?;
    let report = verify::verify(&plan).await?;
    print!("{}", report.render());
    if !report.is_exact() {
        return Err(Error::Mismatch(format!(
            "{} mismatches between {} and {}",
            report.mismatch_count, run, truth
        ))
        .into());
    }
    Ok(Outcome::Clean)
}
