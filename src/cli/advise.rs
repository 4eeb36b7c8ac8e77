//! `effect-recon advise`: grace per rule and N of PENDING_REVIEW from a real snapshot.

use bytes::Bytes;
use effect_recon::advise::{self, AdvisePlan};
use effect_recon::config::RuleSet;
use effect_recon::storage::Location;
use effect_recon::time::parse_duration;

use super::Outcome;

/// From a snapshot (and a run of it): decision lag per event type, reorder rates per
/// partition, consumer and after a rebalance, the share of WRONG skips, and a suggested
/// rules file with a grace per rule and the N of PENDING_REVIEW, the arithmetic shown.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  effect-recon gen --out /tmp/advise-snap --orders 100000 --seed 7\n  \
effect-recon advise --snapshot /tmp/advise-snap --rules-out /tmp/suggested-rules.toml"
)]
pub(crate) struct AdviseArgs {
    /// The snapshot folder (a directory, file:// or s3:// URL).
    #[arg(long, value_name = "DIR|URL")]
    snapshot: String,
    /// A run folder of this snapshot (<out>/run=<id>), for the share of WRONG skips.
    #[arg(long, value_name = "DIR|URL")]
    run: Option<String>,
    /// The rules to advise on (default: the built-in rules).
    #[arg(long, value_name = "FILE")]
    rules: Option<std::path::PathBuf>,
    /// Write the suggested rules file here (it is printed otherwise).
    #[arg(long, value_name = "FILE")]
    rules_out: Option<std::path::PathBuf>,
    /// Rows decided this long after a partition changed consumer count as after a rebalance.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "30m")]
    rebalance_window: i64,
}

/// Runs `effect-recon advise`.
pub(super) async fn execute(args: AdviseArgs) -> anyhow::Result<Outcome> {
    let plan = AdvisePlan {
        snapshot: Location::parse(&args.snapshot)?,
        run: args.run.as_deref().map(Location::parse).transpose()?,
        rules: RuleSet::load(args.rules.as_deref())?,
        rebalance_window: args.rebalance_window,
    };
    let advice = advise::advise(&plan).await?;
    print!("{}", advice.render());
    match &args.rules_out {
        Some(path) => {
            let text = Bytes::from(advice.rules_toml.clone());
            std::fs::write(path, &text)?;
            println!("\nsuggested rules written to {}", path.display());
        }
        None => print!("\n{}", advice.rules_toml),
    }
    Ok(Outcome::Clean)
}
