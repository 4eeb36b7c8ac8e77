//! `effect-recon report`: the morning report of a run, one self-contained HTML file.

use std::path::PathBuf;

use effect_recon::inspect::report::{self, ReportPlan, ReportWritten};
use effect_recon::storage::Location;

use super::Outcome;

/// Write the morning report of a run as one self-contained HTML file: status and exit
/// code, counts by effect × class × verdict, the lifecycle, charts over the last runs,
/// the tasks to do first with their `explain` line, the skip verdicts. Reads only run
/// folders (manifest.json, summary.json, the output Parquet).
#[derive(Debug, clap::Args)]
#[command(
    after_help = "The page fetches nothing (inline styles, inline SVG charts): it opens from a mail attachment or an archive.\n\
`nightly` writes it into each run folder by itself.\n\
Example:\n  effect-recon report --out /tmp/recon-tiny -o /tmp/morning.html"
)]
pub(super) struct ReportArgs {
    /// The output root holding run=<id>/ folders: a directory, file:// or s3:// URL.
    #[arg(long, value_name = "DIR|URL")]
    out: String,
    /// The run (its id, or run=<id>); default: the latest complete run under --out.
    #[arg(long, value_name = "ID")]
    run: Option<String>,
    /// The HTML file to write; default: <run folder>/report.html.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
}

/// Runs `effect-recon report`.
pub(super) async fn execute(args: ReportArgs) -> anyhow::Result<Outcome> {
    let plan = ReportPlan { out: Location::parse(&args.out)?, run: args.run, output: args.output };
    let written = report::write(&plan).await?;
    println!("report: {}", written.location);
    eprintln!(
        "report: run {} ({}), {} bytes",
        written.run_id,
        written.status.as_str(),
        written.bytes
    );
    Ok(Outcome::Clean)
}

/// The `report:` line of a run whose job wrote its report (`nightly`, `demo`), or the
/// warning when it could not: the run is published either way.
pub(super) fn print_written(written: &effect_recon::Result<ReportWritten>) {
    match written {
        Ok(written) => println!("report: {}", written.location),
        Err(e) => {
            eprintln!("warning: report.html: {e}; the run's outputs and exit code are unchanged")
        }
    }
}
