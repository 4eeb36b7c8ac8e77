//! `reopen`: the audited ledger rollback. A run's tasks with a `reopen_msg_id` (a wrong
//! skip, SKIPPED_BUT_DUE, or a stalled review, REVIEW_STALLED) name ledger rows whose
//! frozen decision must be taken again; `reopen` sets those rows to REVOKED so that a
//! redelivered or republished message is processed (REVOKED is not terminal for the
//! consumer, see `sql/schema/reopen_audit.*.sql`). `--undo` puts the old actions back.
//!
//! Invariants:
//! * Every change is guarded by the action the run saw (`WHERE msg_id = ? AND action =
//!   'SKIPPED'`, or `'PENDING_REVIEW'`; for an undo, `'REVOKED'`): a row the consumer
//!   changed meanwhile is reported and left alone, never forced. Rows already in the
//!   target action are counted as such. DONE rows are never touched; no row is deleted.
//! * Without `apply` nothing is written: the report says exactly what would change.
//! * Rows change in batches; each batch is one transaction holding its ledger updates and
//!   one audit row per changed message, so a failure leaves every batch either applied
//!   with its audit rows or not at all.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sqlx::Connection;

use super::conn::Conn;
use super::dialect::{self, AuditRow};
use super::error::WriteError;
use super::{self as db, WriteTarget};
use crate::config::job::Driver;
use crate::error::{Error, Result};
use crate::run_folder::reader::{RunOutputs, TaskRow};
use crate::storage::Location;
use crate::testing::{crash_point, Stage};
use crate::vocabulary::Class;
pub use crate::vocabulary::LedgerAction;

/// The recommended ledger table.
pub const DEFAULT_LEDGER_TABLE: &str = "idempotent_msg";
/// The recommended audit table.
pub const DEFAULT_AUDIT_TABLE: &str = "recon_reopen_audit";
/// The action that reopens a ledger row.
pub const REVOKED: &str = LedgerAction::Revoked.as_str();

/// The action a task's `reopen_msg_id` row holds when the run saw it: SKIPPED for a wrong
/// skip, PENDING_REVIEW for a stalled review; `None` for the other classes.
fn reopened_from(class: Class) -> Option<LedgerAction> {
    match class {
        Class::SkippedButDue => Some(LedgerAction::Skipped),
        Class::ReviewStalled => Some(LedgerAction::PendingReview),
        _ => None,
    }
}

/// The recommended DDL of the audit table for `driver`.
pub fn audit_ddl(driver: Driver) -> &'static str {
    dialect::audit_table_ddl(driver)
}

/// What to do.
#[derive(Debug, Clone)]
pub enum ReopenMode {
    /// Revoke the run's reopen messages.
    Revoke {
        /// The run folder.
        run: Location,
    },
    /// Restore the old actions of an earlier apply (its apply id or one batch id).
    Undo {
        /// Apply id or batch id from the audit table.
        id: String,
    },
}

/// The names of the ledger columns `reopen` reads and changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerColumns {
    /// The unique message id (recommended: `msg_id`).
    pub msg_id: String,
    /// The decision (recommended: `action`).
    pub action: String,
    /// The order (recommended: `order_id`), read by `--msg-id` only.
    pub order_id: String,
}

impl Default for LedgerColumns {
    fn default() -> Self {
        LedgerColumns {
            msg_id: "msg_id".into(),
            action: "action".into(),
            order_id: "order_id".into(),
        }
    }
}

/// `reopen --order` / `--msg-id`: only the tasks of one order (of one effect, naming one
/// message), from a run judged live for that order ([`crate::order_now`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderFilter {
    /// The order.
    pub order_id: i64,
    /// Only this effect's tasks.
    pub effect: Option<String>,
    /// Only the tasks reopening this message.
    pub msg_id: Option<String>,
}

impl OrderFilter {
    fn keeps(&self, task: &TaskRow) -> bool {
        task.order_id == self.order_id
            && self.effect.as_ref().is_none_or(|e| *e == task.effect)
            && self.msg_id.as_ref().is_none_or(|m| task.reopen_msg_id.as_ref() == Some(m))
    }
}

/// The ledger table and columns a job config's ledger source query reads: the columns
/// aliased `AS msg_id` / `AS action` (unaliased: the names themselves) and the table after
/// its first `FROM`. `None` for the table when the query has no plain `FROM <name>`.
pub fn ledger_mapping(query: &str) -> (Option<String>, LedgerColumns) {
    let tokens: Vec<String> = query
        .split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')')
        .filter(|t| !t.is_empty())
        .map(|t| t.trim_matches(|c| c == '`' || c == '"').to_string())
        .collect();
    let plain = |t: &str| t.rsplit('.').next().unwrap_or(t).to_string();
    let aliased = |name: &str| {
        tokens
            .windows(3)
            .find(|w| w[1].eq_ignore_ascii_case("AS") && w[2].eq_ignore_ascii_case(name))
            .map(|w| plain(&w[0]))
            .unwrap_or_else(|| name.to_string())
    };
    let table = tokens
        .windows(2)
        .find(|w| w[0].eq_ignore_ascii_case("FROM"))
        .map(|w| plain(&w[1]))
        .filter(|t| db::check_identifier("--table", t).is_ok());
    let columns = LedgerColumns {
        msg_id: aliased("msg_id"),
        action: aliased("action"),
        order_id: aliased("order_id"),
    };
    (table, columns)
}

/// A validated reopen request.
#[derive(Debug, Clone)]
pub struct ReopenPlan {
    /// Revoke or undo.
    pub mode: ReopenMode,
    /// The ledger's database.
    pub target: WriteTarget,
    /// The ledger table.
    pub table: String,
    /// Its message id and action columns.
    pub columns: LedgerColumns,
    /// The audit table (same database).
    pub audit_table: String,
    /// Write (otherwise a dry run).
    pub apply: bool,
    /// Create the audit table when missing.
    pub create_audit: bool,
    /// Messages per transaction.
    pub batch: usize,
    /// Upper bound on changed rows per second (none: as fast as the database goes).
    pub max_rows_per_second: Option<f64>,
    /// Who does it (audit `changed_by`).
    pub by: String,
    /// Write the reopened messages here (JSON lines a producer script can replay).
    pub republish: Option<PathBuf>,
    /// Reopen from a run whose self-checks failed (INCOMPLETE) all the same.
    pub allow_incomplete: bool,
    /// Only the tasks of one order (`--order`, `--msg-id`); `None`: the whole run.
    pub only: Option<OrderFilter>,
}

/// What happened (or, in a dry run, would happen) to one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemStatus {
    /// Changed (dry run: would be changed).
    Changed,
    /// Already in the target action; nothing to do.
    AlreadyDone,
    /// The row holds another action than the run saw: left alone.
    Moved,
    /// No ledger row with this msg_id.
    Missing,
}

impl ItemStatus {
    /// Label for reports.
    pub fn as_str(self, apply: bool) -> &'static str {
        match (self, apply) {
            (ItemStatus::Changed, true) => "changed",
            (ItemStatus::Changed, false) => "would change",
            (ItemStatus::AlreadyDone, _) => "already done",
            (ItemStatus::Moved, _) => "changed by someone else: left alone",
            (ItemStatus::Missing, _) => "no such ledger row",
        }
    }
}

/// One message to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReopenItem {
    /// The ledger row.
    pub msg_id: String,
    /// The order.
    pub order_id: Option<i64>,
    /// The run that asked for it.
    pub run_id: String,
    /// The run's task ids asking for it, comma-separated.
    pub task_ids: String,
    /// The action the row must still have.
    pub from: String,
    /// The action it gets.
    pub to: String,
    /// The action found in the ledger (`None`: no row).
    pub current: Option<String>,
    /// The outcome.
    pub status: ItemStatus,
    /// The batch that changed it (apply only).
    pub batch_id: Option<String>,
    /// Where the message lives, from the run's evidence (for `--republish`).
    pub topic: Option<String>,
    /// Its partition.
    pub kafka_partition: Option<i32>,
    /// Its offset.
    pub kafka_offset: Option<i64>,
}

/// What a reopen did.
#[derive(Debug, Clone)]
pub struct ReopenReport {
    /// Whether anything was written.
    pub applied: bool,
    /// The apply id (apply only).
    pub apply_id: Option<String>,
    /// The batches committed, in order.
    pub batches: Vec<String>,
    /// Every message, sorted by msg_id.
    pub items: Vec<ReopenItem>,
    /// Time taken.
    pub elapsed: Duration,
}

impl ReopenReport {
    /// Messages with a status.
    pub fn count(&self, status: ItemStatus) -> usize {
        self.items.iter().filter(|i| i.status == status).count()
    }
}

/// Runs a reopen or an undo; see the module doc.
pub async fn reopen(plan: &ReopenPlan) -> Result<ReopenReport> {
    let started = Instant::now();
    db::check_identifier("--table", &plan.table)?;
    db::check_identifier("--audit-table", &plan.audit_table)?;
    db::check_identifier("msg_id column", &plan.columns.msg_id)?;
    db::check_identifier("action column", &plan.columns.action)?;
    let run_items = match &plan.mode {
        ReopenMode::Revoke { run } => {
            let outputs = RunOutputs::read(run).await?;
            outputs.check_complete(plan.allow_incomplete)?;
            Some(revoke_items(&outputs, plan.only.as_ref()))
        }
        ReopenMode::Undo { .. } => None,
    };
    let target = &plan.target;
    let mut conn = target.connect(&plan.table).await?;
    let result = reopen_on(&mut conn, plan, run_items).await;
    conn.close().await;
    let (mut items, apply_id, batches) = result?;
    items.sort_by(|a, b| a.msg_id.cmp(&b.msg_id));
    let report =
        ReopenReport { applied: plan.apply, apply_id, batches, items, elapsed: started.elapsed() };
    if let (Some(path), true) = (&plan.republish, plan.apply) {
        write_republish(path, &report)?;
    }
    Ok(report)
}

type Outcome = (Vec<ReopenItem>, Option<String>, Vec<String>);

async fn reopen_on(
    conn: &mut Conn,
    plan: &ReopenPlan,
    run_items: Option<Vec<ReopenItem>>,
) -> Result<Outcome> {
    let target = &plan.target;
    let (ledger, audit) = (plan.table.as_str(), plan.audit_table.as_str());
    let LedgerColumns { msg_id, action, .. } = &plan.columns;
    conn.execute(&dialect::ledger_probe(ledger, msg_id, action)).await.map_err(|e| {
        target.error(
            ledger,
            format!("the ledger table is missing or has no {msg_id}/{action} columns: {e}"),
        )
    })?;
    if plan.create_audit && plan.apply {
        let ddl = db::ddl(audit_ddl(target.driver()), DEFAULT_AUDIT_TABLE, audit);
        conn.execute(&ddl).await.map_err(|e| target.error(audit, format!("creating it: {e}")))?;
    }
    let needs_audit = plan.apply || matches!(plan.mode, ReopenMode::Undo { .. });
    if needs_audit {
        conn.execute(&dialect::audit_probe(audit)).await.map_err(|e| {
            target.error(audit, format!("the audit table is missing or lacks columns of sql/schema/reopen_audit.*.sql (--create makes it): {e}"))
        })?;
    }
    let mut items = match (run_items, &plan.mode) {
        (Some(items), _) => items,
        (None, ReopenMode::Undo { id }) => {
            undo_items(conn, audit, id).await.map_err(|m| target.error(audit, m))?
        }
        (None, ReopenMode::Revoke { .. }) => Vec::new(),
    };
    classify(conn, ledger, &plan.columns, &mut items, plan.batch)
        .await
        .map_err(|m| target.error(ledger, m))?;
    if !plan.apply {
        return Ok((items, None, Vec::new()));
    }
    // What was read above may change before the guarded updates below (the test of the
    // guard stops here).
    crate::testing::pause_point("reopen-before-apply").await;
    let apply_id = new_apply_id(&plan.mode);
    let batches = apply(conn, plan, &apply_id, &mut items).await?;
    Ok((items, Some(apply_id), batches))
}

/// The run's messages to revoke: one per `reopen_msg_id`, with every task naming it
/// (only those `only` keeps).
fn revoke_items(outputs: &RunOutputs, only: Option<&OrderFilter>) -> Vec<ReopenItem> {
    let evidence: HashMap<&str, _> =
        outputs.findings.iter().map(|f| (f.finding_id.as_str(), f)).collect();
    let mut by_msg: BTreeMap<String, ReopenItem> = BTreeMap::new();
    for task in outputs.tasks.iter().filter(|t| only.is_none_or(|o| o.keeps(t))) {
        let Some(msg_id) = &task.reopen_msg_id else { continue };
        let Some(from) = reopened_from(task.class) else { continue };
        let found =
            evidence.get(task.task_id.as_str()).filter(|f| f.msg_id.as_ref() == Some(msg_id));
        let item = by_msg.entry(msg_id.clone()).or_insert_with(|| ReopenItem {
            msg_id: msg_id.clone(),
            order_id: Some(task.order_id),
            run_id: outputs.run_id().to_string(),
            task_ids: String::new(),
            from: from.as_str().into(),
            to: REVOKED.into(),
            current: None,
            status: ItemStatus::Missing,
            batch_id: None,
            topic: found.and_then(|f| f.topic.clone()),
            kafka_partition: found.and_then(|f| f.kafka_partition),
            kafka_offset: found.and_then(|f| f.kafka_offset),
        });
        if !item.task_ids.is_empty() {
            item.task_ids.push(',');
        }
        item.task_ids.push_str(&task.task_id);
    }
    by_msg.into_values().collect()
}

/// The order of ledger message `msg` (`reopen --msg-id`): `None` when the ledger has no
/// such row.
pub async fn order_of_message(
    target: &WriteTarget,
    table: &str,
    columns: &LedgerColumns,
    msg: &str,
) -> Result<Option<i64>> {
    db::check_identifier("--table", table)?;
    db::check_identifier("msg_id column", &columns.msg_id)?;
    db::check_identifier("order_id column", &columns.order_id)?;
    let mut conn = target.connect(table).await?;
    let found: Result<Option<(i64,)>, sqlx::Error> = crate::db::on_conn!(&mut conn, c, DB => {
        let mut q = dialect::ledger_order_of::<DB>(table, &columns.msg_id, &columns.order_id, msg);
        q.build_query_as::<(i64,)>().fetch_optional(&mut *c).await
    });
    conn.close().await;
    let found = found
        .map_err(|e| target.error(table, format!("reading the order of message '{msg}': {e}")))?;
    Ok(found.map(|(order,)| order))
}

/// The messages an earlier apply (or one of its batches) revoked, to be restored.
async fn undo_items(conn: &mut Conn, audit: &str, id: &str) -> Result<Vec<ReopenItem>, WriteError> {
    type Row = (String, String, Option<String>, String, String);
    let rows: Vec<Row> = crate::db::on_conn!(conn, c, DB => {
        let mut q = dialect::audit_rows::<DB>(audit, id, REVOKED);
        q.build_query_as::<Row>().fetch_all(&mut *c).await
    })
    .map_err(WriteError::doing(format!("reading the audit rows of '{id}'")))?;
    if rows.is_empty() {
        return Err(WriteError::NotFound(format!(
            "no audit rows of an apply or batch '{id}' that revoked messages"
        )));
    }
    Ok(rows
        .into_iter()
        .map(|(msg_id, run_id, task_ids, old, _)| ReopenItem {
            msg_id,
            order_id: None,
            run_id,
            task_ids: task_ids.unwrap_or_default(),
            from: REVOKED.into(),
            to: old,
            current: None,
            status: ItemStatus::Missing,
            batch_id: None,
            topic: None,
            kafka_partition: None,
            kafka_offset: None,
        })
        .collect())
}

/// Reads each message's current action and sets the status it would get.
async fn classify(
    conn: &mut Conn,
    ledger: &str,
    columns: &LedgerColumns,
    items: &mut [ReopenItem],
    batch: usize,
) -> Result<(), WriteError> {
    let LedgerColumns { msg_id, action, .. } = columns;
    let mut current: HashMap<String, String> = HashMap::new();
    for chunk in items.chunks(batch.clamp(1, 1000)) {
        let rows: Vec<(String, String)> = crate::db::on_conn!(conn, c, DB => {
            let ids = chunk.iter().map(|item| item.msg_id.clone());
            let mut q = dialect::ledger_actions::<DB>(ledger, msg_id, action, ids);
            q.build_query_as::<(String, String)>().fetch_all(&mut *c).await
        })
        .map_err(WriteError::doing("reading the current actions"))?;
        current.extend(rows);
    }
    for item in items.iter_mut() {
        item.current = current.get(&item.msg_id).cloned();
        item.status = status_of(item);
    }
    Ok(())
}

fn status_of(item: &ReopenItem) -> ItemStatus {
    match item.current.as_deref() {
        None => ItemStatus::Missing,
        Some(a) if a == item.from => ItemStatus::Changed,
        Some(a) if a == item.to => ItemStatus::AlreadyDone,
        Some(_) => ItemStatus::Moved,
    }
}

/// `reopen-<UTC compact>-<4 hex>` (`undo-...` for an undo).
fn new_apply_id(mode: &ReopenMode) -> String {
    let now = crate::time::now_micros();
    let noise = (now as u64 ^ u64::from(std::process::id()).rotate_left(17)) & 0xffff;
    let kind = match mode {
        ReopenMode::Revoke { .. } => "reopen",
        ReopenMode::Undo { .. } => "undo",
    };
    format!("{kind}-{}-{noise:04x}", crate::time::format_compact(now))
}

/// Applies the changeable items in batches; returns the committed batch ids.
async fn apply(
    conn: &mut Conn,
    plan: &ReopenPlan,
    apply_id: &str,
    items: &mut [ReopenItem],
) -> Result<Vec<String>> {
    let target = &plan.target;
    let started = Instant::now();
    let mut batches = Vec::new();
    let mut changed = 0u64;
    let indexes: Vec<usize> =
        (0..items.len()).filter(|&i| items[i].status == ItemStatus::Changed).collect();
    for chunk in indexes.chunks(plan.batch.max(1)) {
        let batch_id = format!("{apply_id}-b{:04}", batches.len() + 1);
        let batch: Vec<&ReopenItem> = chunk.iter().map(|&i| &items[i]).collect();
        let done = apply_batch(conn, plan, apply_id, &batch_id, &batch).await.map_err(|e| {
            target.error(
                &plan.table,
                format!(
                    "batch {batch_id} rolled back ({e}); {} earlier batch(es) of {apply_id} are committed with their audit rows{}",
                    batches.len(),
                    if batches.is_empty() { String::new() } else { format!(" (undo: reopen --undo {apply_id} --apply)") }
                ),
            )
        })?;
        for (&i, ok) in chunk.iter().zip(done) {
            if ok {
                items[i].batch_id = Some(batch_id.clone());
                items[i].current = Some(items[i].to.clone());
                changed += 1;
            } else {
                items[i].status = ItemStatus::Moved;
            }
        }
        batches.push(batch_id);
        throttle(started, changed, plan.max_rows_per_second).await;
    }
    // Rows found moved during the apply: show what they hold now.
    let mut moved: Vec<ReopenItem> =
        items.iter().filter(|i| i.status == ItemStatus::Moved).cloned().collect();
    if !moved.is_empty() {
        classify(conn, &plan.table, &plan.columns, &mut moved, plan.batch)
            .await
            .map_err(|m| target.error(&plan.table, m))?;
        let now: HashMap<String, Option<String>> =
            moved.into_iter().map(|m| (m.msg_id, m.current)).collect();
        for item in items.iter_mut().filter(|i| i.status == ItemStatus::Moved) {
            if let Some(current) = now.get(&item.msg_id) {
                item.current = current.clone();
            }
        }
    }
    Ok(batches)
}

/// One transaction: each guarded update, and an audit row for each that changed a row.
async fn apply_batch(
    conn: &mut Conn,
    plan: &ReopenPlan,
    apply_id: &str,
    batch_id: &str,
    items: &[&ReopenItem],
) -> Result<Vec<bool>, sqlx::Error> {
    let (ledger, audit) = (plan.table.as_str(), plan.audit_table.as_str());
    let LedgerColumns { msg_id, action, .. } = &plan.columns;
    let now = crate::time::now_micros();
    crate::db::on_conn!(conn, c, DB => {
        let mut tx = c.begin().await?;
        let mut done = Vec::with_capacity(items.len());
        for item in items {
            let mut q = dialect::ledger_update::<DB>(
                ledger,
                msg_id,
                action,
                &item.msg_id,
                &item.from,
                &item.to,
            );
            let changed = q.build().execute(&mut *tx).await?.rows_affected() == 1;
            if changed {
                let row = AuditRow {
                    apply_id,
                    batch_id,
                    msg_id: &item.msg_id,
                    run_id: &item.run_id,
                    task_id: &item.task_ids,
                    old_action: &item.from,
                    new_action: &item.to,
                    changed_at: now,
                    changed_by: &plan.by,
                };
                let mut q = dialect::audit_insert::<DB>(audit, &row);
                q.build().execute(&mut *tx).await?;
            }
            done.push(changed);
        }
        crash_point(Stage::ReopenBeforeCommit);
        tx.commit().await?;
        crash_point(Stage::ReopenBatch);
        Ok(done)
    })
}

/// Sleeps so that `changed` rows since `started` stay under `per_second`.
async fn throttle(started: Instant, changed: u64, per_second: Option<f64>) {
    let Some(rate) = per_second.filter(|r| *r > 0.0) else { return };
    let due = Duration::from_secs_f64(changed as f64 / rate);
    if let Some(wait) = due.checked_sub(started.elapsed()) {
        tokio::time::sleep(wait).await;
    }
}

/// JSON lines, one per message now REVOKED, for a producer script to replay: the message's
/// key (`order_id`, the topic's partition key) and where the original lives.
fn write_republish(path: &Path, report: &ReopenReport) -> Result<()> {
    let mut text = String::new();
    for item in &report.items {
        let revoked = item.to == REVOKED
            && matches!(item.status, ItemStatus::Changed | ItemStatus::AlreadyDone);
        if !revoked {
            continue;
        }
        let line = serde_json::json!({
            "msg_id": item.msg_id,
            "key": item.order_id.map(|o| o.to_string()),
            "topic": item.topic,
            "partition": item.kafka_partition,
            "offset": item.kafka_offset,
            "run_id": item.run_id,
            "task_ids": item.task_ids,
        });
        text.push_str(&line.to_string());
        text.push('\n');
    }
    std::fs::write(path, text)
        .map_err(|source| Error::Io { path: path.display().to_string(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ledger_mapping_comes_from_the_source_query_aliases() {
        let (table, columns) = ledger_mapping(
            "SELECT m.message_key AS msg_id, order_no AS order_id, `decision` AS action,\n\
             decided_at FROM team.consumer_ledger m WHERE decided_at > ? AND decided_at <= ?",
        );
        assert_eq!(table.as_deref(), Some("consumer_ledger"));
        assert_eq!(columns.msg_id, "message_key");
        assert_eq!(columns.action, "decision");
        let (table, columns) = ledger_mapping(
            "SELECT msg_id, order_id, action FROM idempotent_msg WHERE decided_at > ?",
        );
        assert_eq!(table.as_deref(), Some("idempotent_msg"));
        assert_eq!(columns, LedgerColumns::default());
    }
}
