//! `effect-recon load`: put a snapshot into a database with the recommended schema.

use effect_recon::db::load;
use effect_recon::storage::Location;

use super::Outcome;

/// Load a snapshot into a database with the recommended schema (tests, demos, benchmarks).
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Creates the tables of sql/schema/<driver>.sql if missing, then inserts every row.\n\
Example:\n  effect-recon load --snapshot fixtures/tiny/snapshot --url sqlite:///tmp/day.db"
)]
pub(super) struct LoadArgs {
    /// Snapshot folder to read: a directory, file:// or s3:// URL holding manifest.json.
    #[arg(long, value_name = "DIR|URL")]
    snapshot: String,
    /// Target database: mysql://, postgres:// or sqlite:// URL (created for SQLite).
    #[arg(long, value_name = "URL")]
    url: String,
    /// Zone of the stored wall times (MySQL DATETIME, SQLite text), e.g. +08:00.
    #[arg(long, value_name = "OFFSET", default_value = "UTC")]
    timezone: String,
    /// Rows per INSERT statement.
    #[arg(long, value_name = "ROWS", default_value_t = 500)]
    rows_per_insert: usize,
}

/// Runs `effect-recon load`.
pub(super) async fn execute(args: LoadArgs) -> anyhow::Result<Outcome> {
    let offset = effect_recon::time::parse_offset(&args.timezone)
        .map_err(|m| effect_recon::Error::argument("--timezone", m))?;
    let options = load::LoadOptions {
        utc_offset_secs: offset,
        rows_per_insert: args.rows_per_insert,
        create_schema: true,
    };
    let report =
        load::load_snapshot(&Location::parse(&args.snapshot)?, &args.url, &options).await?;
    for (table, rows) in &report.tables {
        println!("{table}: {rows} rows");
    }
    println!(
        "loaded {} rows in {}",
        report.rows(),
        effect_recon::time::format_elapsed(report.elapsed)
    );
    Ok(Outcome::Clean)
}
