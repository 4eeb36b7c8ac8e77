//! `effect-recon export`: read the job's database sources into a snapshot.

use std::path::PathBuf;

use effect_recon::config::JobConfig;
use effect_recon::db::export::{self, ExportMode, ExportPlan};
use effect_recon::storage::Location;
use effect_recon::time::format_instant;

use super::progress::{self, Detail};
use super::{default_cut, parse_instant_arg, Outcome};

/// Export the job's sources (MySQL, PostgreSQL, SQLite) into a Parquet snapshot.
#[derive(Debug, clap::Args)]
#[command(after_help = "Exit codes: 0 ok, 2 error (no manifest.json is written).\n\
With key and changed_column on every source, the export follows the latest earlier snapshot=<cut>\n\
beside --out and reads only the window and what changed since its watermark (--full: everything).\n\
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
    /// Export every row of the lookback even when the previous snapshot beside --out
    /// allows an incremental night (docs/JOB_CONFIG.md "Incremental nights").
    #[arg(long)]
    full: bool,
}

/// Runs `effect-recon export`.
pub(super) async fn execute(args: ExportArgs) -> anyhow::Result<Outcome> {
    let plan = ExportPlan {
        job: JobConfig::load(&args.config)?,
        out: Location::parse(&args.out)?,
        cut: args.cut.unwrap_or_else(default_cut),
    };
    if !args.quiet {
        eprintln!("export: cut {} into {}", format_instant(plan.cut), plan.out);
    }
    let detail = if args.quiet { Detail::Warnings } else { Detail::All };
    let mode = if args.full { ExportMode::Full } else { ExportMode::Auto };
    let report = export::export_with(&plan, mode, &progress::stderr("", detail)).await?;
    println!(
        "snapshot {}: {} rows from {} sources in {}",
        report.location,
        report.rows,
        report.sources.len(),
        effect_recon::time::format_elapsed(report.elapsed)
    );
    Ok(Outcome::Clean)
}
