//! `effect-recon gc`: delete the snapshot files no retained snapshot references.

use effect_recon::gc::{gc, GcPlan};
use effect_recon::storage::Location;
use effect_recon::time::parse_duration;

use super::Outcome;

/// Delete what no retained snapshot references: the chain head and the snapshots of the
/// latest --keep-runs runs are retained, with every file their manifests list (in their
/// own folder or an earlier one of the chain). A dry run unless --apply. Run folders are
/// never touched.
#[derive(Debug, clap::Args)]
#[command(after_help = "Exit codes: 0 ok, 2 error.\n\
Example:\n  effect-recon gc --root /var/lib/effect-recon --keep-runs 7            # what would go\n  effect-recon gc --root /var/lib/effect-recon --keep-runs 7 --apply    # delete it")]
pub(super) struct GcArgs {
    /// The root holding snapshot=<cut>/ and run=<id>/ folders: a directory, file:// or s3:// URL.
    #[arg(long, value_name = "DIR|URL")]
    root: String,
    /// The snapshots judged by this many of the latest runs are retained (besides the
    /// chain head).
    #[arg(long, value_name = "N", default_value_t = 7)]
    keep_runs: usize,
    /// Nothing younger than this is deleted, nor anything in a folder a writer claimed
    /// within it.
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = parse_duration)]
    grace: i64,
    /// Delete (without it, only list what would be deleted).
    #[arg(long)]
    apply: bool,
}

/// Runs `effect-recon gc`.
pub(super) async fn execute(args: GcArgs) -> anyhow::Result<Outcome> {
    let plan = GcPlan {
        root: Location::parse(&args.root)?,
        keep_runs: args.keep_runs,
        grace: args.grace,
        apply: args.apply,
    };
    let report = gc(&plan).await?;
    println!("gc: retained {} snapshot(s): {}", report.retained.len(), report.retained.join(", "));
    for path in &report.deleted {
        println!("  {} {path}", if report.applied { "deleted" } else { "would delete" });
    }
    let mib = report.bytes as f64 / (1024.0 * 1024.0);
    let verb = if report.applied { "deleted" } else { "would delete (dry run; --apply deletes)" };
    println!(
        "gc: {verb} {} object(s), {mib:.1} MiB; {} kept as younger than the grace period",
        report.deleted.len(),
        report.young
    );
    Ok(Outcome::Clean)
}
