//! `effect-recon explain`: one order's story in time order.

use effect_recon::inspect::explain;
use effect_recon::storage::Location;

use super::Outcome;

/// Output formats of `explain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// One event per line.
    Text,
    /// One JSON object.
    Json,
}

/// Tell one order's story: status changes, ledger decisions, receipts and, with --run, the
/// findings, skip verdicts and tasks about it; reorders spelled out.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  effect-recon explain --snapshot fixtures/tiny/snapshot --run /tmp/recon-tiny/run=20261129T160000Z --order 8821"
)]
pub(super) struct ExplainArgs {
    /// Snapshot folder (directory, file:// or s3:// URL).
    #[arg(long, value_name = "DIR|URL")]
    snapshot: String,
    /// A run folder (<out>/run=<id>) whose findings, skip verdicts and tasks to add.
    #[arg(long, value_name = "DIR|URL")]
    run: Option<String>,
    /// The order.
    #[arg(long, value_name = "ID")]
    order: i64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// Runs `effect-recon explain`.
pub(super) async fn execute(args: ExplainArgs) -> anyhow::Result<Outcome> {
    let snapshot = Location::parse(&args.snapshot)?;
    let run = args.run.as_deref().map(Location::parse).transpose()?;
    let story = explain::explain(&snapshot, run.as_ref(), args.order).await?;
    match args.format {
        Format::Text => {
            print!("{}", story.render());
            eprintln!(
                "explain: {} events in {}",
                story.events.len(),
                effect_recon::time::format_elapsed(story.elapsed)
            );
        }
        Format::Json => println!("{}", serde_json::to_string_pretty(&story.to_json())?),
    }
    Ok(Outcome::Clean)
}
