//! `effect-recon verify`: a run checked against the ground truth of `gen`.

use effect_recon::verify::{self, VerifyPlan};
use effect_recon::Error;

use super::Outcome;

/// Compare a run's discrepancies and skip verdicts with a ground truth; print precision
/// and recall per class and verdict and the first mismatches.
#[derive(Debug, clap::Args)]
#[command(after_help = "Exit codes: 0 the run equals the truth, 2 any mismatch or error.\n\
Example:\n  effect-recon verify --truth /tmp/snap/truth.parquet --run /tmp/recon/run=20261129T160000Z")]
pub struct VerifyArgs {
    /// The truth file written by gen (<snapshot>/truth.parquet).
    #[arg(long, value_name = "FILE|URL")]
    truth: String,
    /// The run folder (<out>/run=<id>).
    #[arg(long, value_name = "DIR|URL")]
    run: String,
}

/// Runs `effect-recon verify`.
pub async fn execute(args: VerifyArgs) -> anyhow::Result<Outcome> {
    let plan = VerifyPlan::parse(&args.truth, &args.run)?;
    let report = verify::verify(&plan).await?;
    print!("{}", report.render());
    if !report.is_exact() {
        return Err(Error::Mismatch(format!(
            "{} mismatches between {} and {}",
            report.mismatch_count, args.run, args.truth
        ))
        .into());
    }
    Ok(Outcome::Clean)
}
