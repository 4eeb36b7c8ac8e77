//! `effect-recon explain`: one order's story in time order, from a snapshot or live from
//! the databases of a job config.

use std::path::PathBuf;

use effect_recon::config::JobConfig;
use effect_recon::inspect::explain;
use effect_recon::order_now;
use effect_recon::snapshot::Table;
use effect_recon::storage::Location;
use effect_recon::time::format_instant;

use super::progress::{self, Detail};
use super::{default_cut, parse_instant_arg, Outcome};

/// Output formats of `explain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// One event per line.
    Text,
    /// One JSON object.
    Json,
}

/// Tell one order's story: status changes, ledger decisions, receipts and, with --run, the
/// findings, skip verdicts and tasks about it; reorders spelled out. With --config the
/// order's rows are read live from the job's databases and judged now.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "With --config the order's rows are read live from the job's sources (each query restricted to the\n\
order, in one consistent read per database), judged now by the same run over the whole lookback, and\n\
compared with the last complete run under the job's root: differences are printed as 'disagree:' lines.\n\
Examples:\n  effect-recon explain --snapshot fixtures/tiny/snapshot --run /tmp/recon-tiny/run=20261129T160000Z --order 8821\n  \
effect-recon explain --config job.toml --order 8821"
)]
pub(super) struct ExplainArgs {
    /// Snapshot folder (directory, file:// or s3:// URL).
    #[arg(long, value_name = "DIR|URL", required_unless_present = "config")]
    snapshot: Option<String>,
    /// A run folder (<out>/run=<id>) whose findings, skip verdicts and tasks to add.
    #[arg(long, value_name = "DIR|URL", conflicts_with = "config")]
    run: Option<String>,
    /// Read the order live from this job config's databases instead of a snapshot.
    #[arg(long, value_name = "FILE", conflicts_with = "snapshot")]
    config: Option<PathBuf>,
    /// With --config: judge the order as of this instant (default: now).
    #[arg(long, value_name = "ISO", value_parser = parse_instant_arg, requires = "config")]
    cut: Option<i64>,
    /// The order.
    #[arg(long, value_name = "ID")]
    order: i64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// Runs `effect-recon explain`.
pub(super) async fn execute(args: ExplainArgs) -> anyhow::Result<Outcome> {
    if let Some(config) = &args.config {
        let cut = args.cut.unwrap_or_else(default_cut);
        return explain_live(config, args.order, cut, args.format).await;
    }
    let snapshot = Location::parse(args.snapshot.as_deref().unwrap_or_default())?;
    let run = args.run.as_deref().map(Location::parse).transpose()?;
    let story = explain::explain(&snapshot, run.as_ref(), args.order).await?;
    show(&story, args.format)?;
    Ok(Outcome::Clean)
}

/// `explain --config`: the order read live and judged now; where the last run disagrees.
async fn explain_live(
    config: &std::path::Path,
    order: i64,
    cut: i64,
    format: Format,
) -> anyhow::Result<Outcome> {
    let job = JobConfig::load(config)?;
    let live = order_now::judge(&job, order, cut, &progress::stderr("explain: ", Detail::Warnings))
        .await?;
    let story = explain::explain(&live.snapshot, Some(&live.run.folder), order).await?;
    show(&story, format)?;
    eprintln!(
        "explain: read live at {}: {} ledger, {} status history and {} receipt rows of order {order}",
        format_instant(live.cut),
        live.rows_of(Table::Ledger),
        live.rows_of(Table::StatusHistory),
        live.rows_of(Table::Receipts),
    );
    for line in live.comparison() {
        eprintln!("explain: {line}");
    }
    Ok(Outcome::Clean)
}

fn show(story: &explain::Timeline, format: Format) -> anyhow::Result<()> {
    match format {
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
    Ok(())
}
