//! `effect-recon publish`: a run's compensation tasks into the team's task table.

use effect_recon::db::publish::{self, PublishPlan, DEFAULT_TABLE};
use effect_recon::db::WriteTarget;
use effect_recon::storage::Location;

use super::Outcome;

/// Publish a run's compensation tasks into a table of the team's database (idempotent).
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit codes: 0 ok, 1 \"done but still missing\" tasks with --fail-on-breaks, 2 error.\n\
Publishing the same run twice changes nothing (0 inserted, 0 updated). A later run inserts its new\n\
tasks, bumps last_run/attempt of the ones it lists again and marks RESOLVED the ones its resolved\n\
table names. DONE is never set back to OPEN. Passwords come only from --password-env.\n\
Example:\n  TASKS_DB_PASSWORD=... effect-recon publish --run /var/lib/recon/run=20261129T160000Z \\\n    \
--to mysql://recon_writer@db1:3306/ops --password-env TASKS_DB_PASSWORD --create"
)]
pub(super) struct PublishArgs {
    /// The run folder (<out>/run=<id>, holding manifest.json): a directory, file:// or s3:// URL.
    #[arg(long, value_name = "DIR|URL")]
    run: String,
    /// The team's database: mysql://, mariadb://, postgres:// or sqlite: URL, without a password.
    #[arg(long, value_name = "URL")]
    to: String,
    /// Environment variable holding the database password.
    #[arg(long, value_name = "VAR")]
    password_env: Option<String>,
    /// The task table.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_TABLE)]
    table: String,
    /// Create the table when missing (sql/schema/compensation_task.<driver>.sql).
    #[arg(long)]
    create: bool,
    /// Tasks per transaction.
    #[arg(long, value_name = "N", default_value_t = 500)]
    batch: usize,
    /// Act on a run whose self-checks failed (INCOMPLETE, exit 3) all the same.
    #[arg(long)]
    allow_incomplete: bool,
    /// Exit 1 when a task the executor marked DONE is still listed by the run.
    #[arg(long)]
    fail_on_breaks: bool,
}

/// Runs `effect-recon publish`.
pub(super) async fn execute(args: PublishArgs) -> anyhow::Result<Outcome> {
    let plan = PublishPlan {
        run: Location::parse(&args.run)?,
        target: WriteTarget::new("publish", &args.to, args.password_env.as_deref())?,
        table: args.table,
        create: args.create,
        batch: args.batch.max(1),
        allow_incomplete: args.allow_incomplete,
    };
    let report = publish::publish(&plan).await?;
    println!(
        "publish run={} into {}: {} tasks; {} ({} resolved) in {}",
        report.run_id,
        report.table,
        report.tasks,
        report.counts(),
        report.resolved,
        effect_recon::time::format_elapsed(report.elapsed)
    );
    if !report.has_resolved_table {
        println!("note: the run has no resolved table; tasks it does not list stay as they are");
    }
    if report.done_but_missing.is_empty() {
        return Ok(Outcome::Clean);
    }
    println!(
        "done but still missing: {} task(s) the executor marked DONE whose finding this run still lists (look at these first):",
        report.done_but_missing.len()
    );
    for t in &report.done_but_missing {
        println!(
            "  {}  {} order {}  {}  attempt {}",
            t.task_id,
            t.effect,
            t.order_id,
            t.class,
            t.attempt.map_or("-".to_string(), |a| a.to_string())
        );
    }
    Ok(if args.fail_on_breaks { Outcome::Breaks } else { Outcome::Clean })
}
