//! `effect-recon reopen`: the audited ledger rollback (SKIPPED / PENDING_REVIEW → REVOKED).

use std::path::PathBuf;

use anyhow::bail;
use effect_recon::config::{JobConfig, SourceConfig};
use effect_recon::db::reopen::{
    self, ItemStatus, LedgerColumns, OrderFilter, ReopenMode, ReopenPlan, ReopenReport,
    DEFAULT_AUDIT_TABLE, DEFAULT_LEDGER_TABLE,
};
use effect_recon::db::WriteTarget;
use effect_recon::order_now::{self, OrderNow};
use effect_recon::snapshot::Table;
use effect_recon::storage::Location;
use effect_recon::time::format_instant;

use super::progress::{self, Detail};
use super::{default_cut, parse_instant_arg, Outcome};

/// Reopen the ledger rows of a run's wrong skips and stalled reviews (set them REVOKED so a
/// redelivered message is processed), or those of one order judged live now, or undo an
/// earlier reopen. A dry run unless --apply.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit codes: 0 ok, 2 error (a failed batch is rolled back whole; earlier batches stay, with audit rows).\n\
Each change is guarded by the action the run saw (WHERE msg_id = ? AND action = 'SKIPPED'); rows\n\
changed meanwhile are reported and left alone. DONE rows are never touched, no row is deleted.\n\
--order and --msg-id judge the order now, on its rows read live through the job config's sources,\n\
and say where that differs from the last complete run under the job's root.\n\
Examples:\n  effect-recon reopen --run /var/lib/recon/run=20261129T160000Z --ledger mysql://ops@db1/fulfilment\n  \
effect-recon reopen --run ... --ledger ... --apply --create --by alice --republish /tmp/replay.jsonl\n  \
effect-recon reopen --config job.toml --order 8821 [--effect points_grant] [--apply --by alice]\n  \
effect-recon reopen --config job.toml --msg-id msg-7391 --apply --by alice\n  \
effect-recon reopen --undo reopen-20261130T081500Z-3f2a --ledger ... --apply"
)]
pub(super) struct ReopenArgs {
    /// The run folder whose tasks' reopen_msg_id are reopened.
    #[arg(long, value_name = "DIR|URL", required_unless_present_any = ["undo", "order", "msg_id"])]
    run: Option<String>,
    /// Undo an earlier apply: its apply id, or one batch id, from the audit table.
    #[arg(long, value_name = "ID", conflicts_with_all = ["run", "order", "msg_id"])]
    undo: Option<String>,
    /// One order, judged now on its live rows (needs --config; not with --run).
    #[arg(long, value_name = "ID", conflicts_with = "run", requires = "config")]
    order: Option<i64>,
    /// With --order: only this effect's tasks.
    #[arg(long, value_name = "EFFECT", requires = "order")]
    effect: Option<String>,
    /// One ledger message: its order is judged now on its live rows and only this message
    /// is reopened (needs --config; not with --run or --order).
    #[arg(long, value_name = "MSG_ID", conflicts_with_all = ["run", "order"], requires = "config")]
    msg_id: Option<String>,
    /// With --order or --msg-id: judge the order as of this instant (default: now).
    #[arg(long, value_name = "ISO", value_parser = parse_instant_arg)]
    cut: Option<i64>,
    /// The ledger's database: mysql://, mariadb://, postgres:// or sqlite: URL, without a
    /// password (default: the job config's ledger source).
    #[arg(long, value_name = "URL", required_unless_present = "config")]
    ledger: Option<String>,
    /// Environment variable holding the database password (default: the ledger source's).
    #[arg(long, value_name = "VAR")]
    password_env: Option<String>,
    /// Job config whose ledger [[source]] gives the URL, password_env, table and the column
    /// names (the columns its query aliases AS msg_id and AS action).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The ledger table (default: from --config, else idempotent_msg).
    #[arg(long, value_name = "NAME")]
    table: Option<String>,
    /// The audit table, in the ledger's database.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_AUDIT_TABLE)]
    audit_table: String,
    /// Change the rows (without it: a dry run that changes nothing).
    #[arg(long)]
    apply: bool,
    /// Create the audit table when missing (sql/schema/reopen_audit.<driver>.sql).
    #[arg(long)]
    create: bool,
    /// Messages per transaction.
    #[arg(long, value_name = "N", default_value_t = 500)]
    batch: usize,
    /// At most this many changed rows per second.
    #[arg(long, value_name = "N")]
    max_rows_per_second: Option<f64>,
    /// Who does it, for the audit (default: the OS user).
    #[arg(long, value_name = "NAME")]
    by: Option<String>,
    /// Act on a run whose self-checks failed (INCOMPLETE, exit 3) all the same.
    #[arg(long)]
    allow_incomplete: bool,
    /// With --apply: write the reopened messages as JSON lines for a producer script to replay.
    #[arg(long, value_name = "FILE")]
    republish: Option<PathBuf>,
}

/// Runs `effect-recon reopen`.
pub(super) async fn execute(args: ReopenArgs) -> anyhow::Result<Outcome> {
    let (mut url, mut password_env) = (args.ledger.clone(), args.password_env.clone());
    let (mut table, mut columns) = (None, LedgerColumns::default());
    let mut job = None;
    if let Some(path) = &args.config {
        let config = JobConfig::load(path)?;
        let source = ledger_source(&config)?;
        (table, columns) = reopen::ledger_mapping(&source.query);
        url = url.or_else(|| Some(source.url.clone()));
        password_env = password_env.or_else(|| source.password_env.clone());
        job = Some(config);
    }
    let Some(url) = url else { bail!("give --ledger or --config") };
    let target = WriteTarget::new("reopen", &url, password_env.as_deref())?;
    let table = args.table.clone().or(table).unwrap_or_else(|| DEFAULT_LEDGER_TABLE.into());
    // One order judged now: its live run stands in for a night's run.
    let mut live: Option<OrderNow> = None;
    let mut only = None;
    if let (Some(job), true) = (&job, args.order.is_some() || args.msg_id.is_some()) {
        let order_id = match (args.order, &args.msg_id) {
            (Some(order), _) => order,
            (None, Some(msg)) => {
                match reopen::order_of_message(&target, &table, &columns, msg).await? {
                    Some(order) => order,
                    None => bail!(
                    "--msg-id: the ledger table {table} has no message '{msg}'; nothing written"
                ),
                }
            }
            (None, None) => unreachable!("checked above"),
        };
        let now = order_now::judge(
            job,
            order_id,
            args.cut.unwrap_or_else(default_cut),
            &progress::stderr("reopen: ", Detail::Warnings),
        )
        .await?;
        if now.rows_of(Table::Ledger) == 0 {
            bail!(
                "{}: the ledger has no row of order {order_id} in the lookback (read live at {}); nothing written",
                if args.order.is_some() { "--order" } else { "--msg-id" },
                format_instant(now.cut)
            );
        }
        say_live(&now);
        only = Some(OrderFilter {
            order_id,
            effect: args.effect.clone(),
            msg_id: args.msg_id.clone(),
        });
        live = Some(now);
    }
    let mode = match (&args.run, &args.undo, &live) {
        (Some(run), None, _) => ReopenMode::Revoke { run: Location::parse(run)? },
        (None, Some(id), _) => ReopenMode::Undo { id: id.clone() },
        (None, None, Some(live)) => ReopenMode::Revoke { run: live.run.folder.clone() },
        _ => bail!("give --run, --order, --msg-id or --undo"),
    };
    let by = args
        .by
        .clone()
        .or_else(|| std::env::var("USER").ok())
        .or_else(|| std::env::var("LOGNAME").ok());
    let plan = ReopenPlan {
        mode,
        target,
        table,
        columns,
        audit_table: args.audit_table,
        apply: args.apply,
        create_audit: args.create,
        batch: args.batch.max(1),
        max_rows_per_second: args.max_rows_per_second,
        by: by.unwrap_or_else(|| "unknown".into()),
        republish: args.republish,
        allow_incomplete: args.allow_incomplete,
        only,
    };
    let report = reopen::reopen(&plan).await?;
    print_report(&report);
    Ok(Outcome::Clean)
}

/// The job's ledger source, whose URL, table and columns `reopen` writes through.
pub(super) fn ledger_source(job: &JobConfig) -> anyhow::Result<&SourceConfig> {
    match job.sources.iter().find(|s| s.table == Table::Ledger) {
        Some(source) => Ok(source),
        None => bail!("{}: no [[source]] with table = \"ledger\"", job.path.display()),
    }
}

/// What the live judgment of one order found, and where it differs from the last run.
fn say_live(now: &OrderNow) {
    let order = now.order_id;
    let findings: Vec<String> =
        now.findings().map(|f| format!("{} {} {}", f.effect, f.class, f.verdict)).collect();
    eprintln!(
        "reopen: order {order} judged live at {}: {}",
        format_instant(now.cut),
        if findings.is_empty() { "no finding".to_string() } else { findings.join(", ") }
    );
    for line in now.comparison() {
        eprintln!("reopen: {line}");
    }
}

fn print_report(report: &ReopenReport) {
    let apply = report.applied;
    for item in &report.items {
        println!(
            "{:<24} {:<33} now {:<15} {}{}  tasks {}",
            item.msg_id,
            format!("{} -> {}", item.from, item.to),
            item.current.as_deref().unwrap_or("-"),
            item.status.as_str(apply),
            item.batch_id.as_ref().map(|b| format!(" [{b}]")).unwrap_or_default(),
            item.task_ids
        );
    }
    let counts = format!(
        "{} {}, {} already done, {} changed by someone else (left alone), {} without a ledger row",
        report.count(ItemStatus::Changed),
        if apply { "changed" } else { "would change" },
        report.count(ItemStatus::AlreadyDone),
        report.count(ItemStatus::Moved),
        report.count(ItemStatus::Missing)
    );
    match &report.apply_id {
        Some(id) if !report.batches.is_empty() && id.starts_with("reopen-") => println!(
            "applied {id} in {} batch(es): {counts}\nundo with: effect-recon reopen --undo {id} --ledger <URL> --apply",
            report.batches.len()
        ),
        Some(id) if !report.batches.is_empty() => {
            println!("applied {id} in {} batch(es): {counts}", report.batches.len())
        }
        Some(_) => println!("applied, nothing to change: {counts}"),
        None => println!("dry run, nothing changed: {counts}\nrun again with --apply to change them"),
    }
}
