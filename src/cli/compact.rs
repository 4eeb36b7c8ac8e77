//! `effect-recon compact`: the chain head of a snapshot root rewritten as one base segment.

use effect_recon::storage::Location;

use super::Outcome;

/// Rewrite the latest snapshot of an incremental chain into one base segment beside it
/// (snapshot=<cut>.c001), without a database: same live rows, same watermarks, so the
/// next night follows it. Crash-safe (manifest last); the old files stay until `gc`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit codes: 0 ok (also when the head is already compact), 2 error (no manifest is written).\n\
Example:\n  effect-recon compact --root /var/lib/effect-recon && effect-recon gc --root /var/lib/effect-recon --apply"
)]
pub(super) struct CompactArgs {
    /// The root holding snapshot=<cut>/ folders: a directory, file:// or s3:// URL.
    #[arg(long, value_name = "DIR|URL")]
    root: String,
}

/// Runs `effect-recon compact`.
pub(super) async fn execute(args: CompactArgs) -> anyhow::Result<Outcome> {
    let root = Location::parse(&args.root)?;
    let report = effect_recon::compact::compact(&root).await?;
    let rows: u64 = report.rows.values().sum();
    match &report.written {
        None => println!(
            "compact: {} is already one base segment ({} files, {rows} live rows); nothing written",
            report.head, report.files.0
        ),
        Some(written) => println!(
            "compact: {} ({} files) → {written} ({} files), {rows} live rows, each source counted equal",
            report.head, report.files.0, report.files.1
        ),
    }
    Ok(Outcome::Clean)
}
