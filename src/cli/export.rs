//! `effect-recon export`: read the job's database sources into a snapshot.

use std::path::PathBuf;

use effect_recon::config::JobConfig;
use effect_recon::export::{self, ExportPlan};
use effect_recon::storage::Location;
use effect_recon::time::{format_instant, Micros};

use super::progress::{self, Detail};
use super::{parse_instant_arg, Outcome};

/// Export the job's sources (MySQL, PostgreSQL, SQLite) into a Parquet snapshot.
#[derive(Debug, clap::Args)]
#[command(after_help = "Exit codes: 0 ok, 2 error (no manifest.json is written).\n\
Passwords come only from each source's password_env variable.\n\
Example:\n  FULFILMENT_DB_PASSWORD=... effect-recon export --config job.toml --out s3://recon/snapshot=20261129T160000Z")]
pub(super) struct ExportArgs {
    /// Job config TOML (sources, lookback, [export] settings).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Snapshot folder to write: a directory, file:// or s3:// URL.
    #[arg(long, value_name = "DIR|URL")]
    out: String,
    /// Logical cut; every row is filtered to <= cut (default: now, truncated to the second).
    #[arg(long, value_name = "ISO", value_parser = parse_instant_arg)]
    cut: Option<i64>,
    /// No progress lines.
    #[arg(long, short)]
    quiet: bool,
}

/// Now, truncated to the second.
pub(super) fn default_cut() -> Micros {
    let now = chrono::Utc::now().timestamp();
    now * 1_000_000
}

/// Runs `effect-recon export`.
pub(super) async fn execute(args: ExportArgs) -> anyhow::Result<Outcome> {
    let plan = ExportPlan {
        job: JobConfig::load(&args.config)?,
        out: Location::parse(&args.out)?,
        cut: args.cut.unwrap_or_else(default_cut),
    };
    if !args.quiet {
        eprintln!("export: cut {} into {}", format_instant(plan.cut), plan.out.display(""));
    }
    let detail = if args.quiet { Detail::Warnings } else { Detail::All };
    let report = export::export(&plan, &progress::stderr("", detail)).await?;
    println!(
        "snapshot {}: {} rows from {} sources in {}",
        report.location,
        report.rows,
        report.sources.len(),
        effect_recon::time::format_elapsed(report.elapsed)
    );
    Ok(Outcome::Clean)
}

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
pub(super) async fn execute_load(args: LoadArgs) -> anyhow::Result<Outcome> {
    let offset = effect_recon::config::job::parse_offset(&args.timezone)
        .map_err(|m| effect_recon::Error::argument("--timezone", m))?;
    let options = export::load::LoadOptions {
        utc_offset_secs: offset,
        rows_per_insert: args.rows_per_insert,
        create_schema: true,
    };
    let report =
        export::load::load_snapshot(&Location::parse(&args.snapshot)?, &args.url, &options).await?;
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
