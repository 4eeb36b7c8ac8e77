//! `effect-recon history`: the runs under an output root, one line each, in cut order.

use effect_recon::inspect::history;
use effect_recon::storage::Location;

use super::Outcome;

/// How `history` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum HistoryFormat {
    /// An aligned table for the terminal.
    Table,
    /// CSV with a header.
    Csv,
    /// A JSON array.
    Json,
}

/// One line per complete run under --out: window, status, NEW, PERSISTING, resolved by
/// resolution, open backlog and its oldest break. Reads only manifests and summaries.
#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  effect-recon history --out /var/lib/effect-recon --format csv")]
pub(super) struct HistoryArgs {
    /// The output root holding run=<id>/ folders: a directory, file:// or s3:// URL.
    #[arg(long, value_name = "DIR|URL")]
    out: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = HistoryFormat::Table)]
    format: HistoryFormat,
}

/// Runs `effect-recon history`.
pub(super) async fn execute(args: HistoryArgs) -> anyhow::Result<Outcome> {
    let out = Location::parse(&args.out)?;
    let lines = history::read(&out).await?;
    if lines.is_empty() && args.format == HistoryFormat::Table {
        eprintln!("history: no complete run under {}", out);
        return Ok(Outcome::Clean);
    }
    let text = match args.format {
        HistoryFormat::Table => history::render_table(&lines),
        HistoryFormat::Csv => history::render_csv(&lines),
        HistoryFormat::Json => history::render_json(&lines)?,
    };
    print!("{text}");
    Ok(Outcome::Clean)
}
