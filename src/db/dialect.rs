//! All database-side SQL text of `db/`, per database family: the recommended schemas of
//! `sql/schema/`; the exporter's transaction control and the wrappers around a source's own
//! query; the loader's INSERT head; and the statements of the write-back tools, `publish`
//! (the task table) and `reopen` (the ledger and its audit table). The modules that send
//! them keep the control flow: transactions, batches, row counts and error messages.
//!
//! Table and column names are spliced into the text (the callers have checked them with
//! `check_identifier`); values are always bound. A write-back statement comes as a
//! [`QueryBuilder`] with its binds pushed, for the family at hand.
//!
//! A source query takes its two parameters (lower bound, cut) first; the wrappers add the
//! chunk's `order_id` range as parameters 3 and 4, so the text of each wrapper is the same
//! for every chunk (one prepared statement per connection). A query that takes four
//! parameters has the range in its own WHERE ([`Chunking::Pushed`]) and is run unwrapped.

use sqlx::{Database, Encode, QueryBuilder, Type};

use super::Stamp;
use crate::config::job::Driver;
use crate::run_folder::reader::TaskRow;
use crate::time::Micros;
use crate::vocabulary::TaskState;

/// The recommended schema of each family (`sql/schema/*.sql`).
pub(super) fn schema_ddl(driver: Driver) -> &'static str {
    match driver {
        Driver::MySql => include_str!("../../sql/schema/mysql.sql"),
        Driver::Postgres => include_str!("../../sql/schema/postgres.sql"),
        Driver::Sqlite => include_str!("../../sql/schema/sqlite.sql"),
    }
}

/// The recommended DDL of `publish`'s task table (`sql/schema/compensation_task.*.sql`).
pub(super) fn task_table_ddl(driver: Driver) -> &'static str {
    match driver {
        Driver::MySql => include_str!("../../sql/schema/compensation_task.mysql.sql"),
        Driver::Postgres => include_str!("../../sql/schema/compensation_task.postgres.sql"),
        Driver::Sqlite => include_str!("../../sql/schema/compensation_task.sqlite.sql"),
    }
}

/// The recommended DDL of `reopen`'s audit table (`sql/schema/reopen_audit.*.sql`).
pub(super) fn audit_table_ddl(driver: Driver) -> &'static str {
    match driver {
        Driver::MySql => include_str!("../../sql/schema/reopen_audit.mysql.sql"),
        Driver::Postgres => include_str!("../../sql/schema/reopen_audit.postgres.sql"),
        Driver::Sqlite => include_str!("../../sql/schema/reopen_audit.sqlite.sql"),
    }
}

/// Statements that open the read transaction on the first (leader) connection.
pub(super) fn begin_leader(driver: Driver) -> &'static [&'static str] {
    match driver {
        // The isolation level is set first: START TRANSACTION cannot name it.
        Driver::MySql => &[
            "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
            "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
        ],
        Driver::Postgres => &["BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"],
        // Deferred: the read snapshot is taken by the first SELECT and kept until the end.
        Driver::Sqlite => &["BEGIN"],
    }
}

/// Postgres: the leader exports its snapshot so the other connections read the very same one.
pub(super) const PG_EXPORT_SNAPSHOT: &str = "SELECT pg_export_snapshot()";

/// Postgres: a worker joins the leader's snapshot (the id is checked to be `[0-9A-F-]`).
pub(super) fn pg_set_snapshot(id: &str) -> String {
    format!("SET TRANSACTION SNAPSHOT '{id}'")
}

/// Postgres: zone-less `timestamp` values and parameters are read in the source's offset.
/// `INTERVAL ... HOUR TO MINUTE` keeps the ISO sign (a bare '+08:00' would be POSIX, reversed).
pub(super) fn pg_set_time_zone(offset: &str) -> String {
    format!("SET TIME ZONE INTERVAL '{offset}' HOUR TO MINUTE")
}

/// Ends a read transaction.
pub(super) const ROLLBACK: &str = "ROLLBACK";

/// The statements of one source query.
#[derive(Debug, Clone)]
pub(super) struct Wrapped {
    /// Rows of one `order_id` range, in the database's own order (the exporter sorts each
    /// chunk: a server-side ORDER BY cost MariaDB more than half of the read).
    pub data: String,
    /// `COUNT(*)` of the same range.
    pub count: String,
    /// Every row of the query, for a source read as one chunk: the query as written
    /// (a pushed query gets the whole `i64` range bound).
    pub whole: String,
    /// `COUNT(*)` over the whole query: the only statement a source read as one chunk
    /// adds, and one the database may answer from an index on the window's column.
    pub count_whole: String,
    /// `COUNT(*)`, `COUNT(order_id)`, `MIN(order_id)`, `MAX(order_id)` over the whole
    /// query, run only for a source large enough to be chunked (both counts from one
    /// statement: NULL keys are their difference).
    pub keys: String,
    /// `FROM (query) AS recon_src`.
    from: String,
}

impl Wrapped {
    /// Every row of the query, at most `cap + 1` of them: how a source expected to be
    /// small (an incremental night's delta) is read without a `COUNT`. More than `cap`
    /// rows means it must be counted and chunked after all.
    pub(super) fn capped(&self, cap: u64) -> String {
        format!("SELECT * {} LIMIT {}", self.from, cap.saturating_add(1))
    }
}

/// Where a chunk's `order_id` range goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Chunking {
    /// The source query takes two parameters; the range filters its result from outside.
    Wrapped,
    /// The source query takes the range itself as parameters 3 and 4 (on the user's own
    /// indexed column), so it is run as it is; the plan binds the whole `i64` range.
    Pushed,
}

/// Wraps a source query for chunked reading.
pub(super) fn wrap(driver: Driver, query: &str, chunking: Chunking) -> Wrapped {
    let (lo, hi) = match driver {
        Driver::Postgres => ("$3", "$4"),
        Driver::MySql | Driver::Sqlite => ("?", "?"),
    };
    let bigint = |e: &str| match driver {
        Driver::MySql => format!("CAST({e} AS SIGNED)"),
        Driver::Postgres => format!("CAST({e} AS BIGINT)"),
        Driver::Sqlite => e.to_string(),
    };
    // The newline before ')' ends a trailing `-- comment` of the source query.
    let from = format!("FROM (\n{query}\n) AS recon_src");
    let count_whole = format!("SELECT {} {from}", bigint("COUNT(*)"));
    let keys = format!(
        "SELECT {}, {}, {}, {} {from}",
        bigint("COUNT(*)"),
        bigint("COUNT(recon_src.order_id)"),
        bigint("MIN(recon_src.order_id)"),
        bigint("MAX(recon_src.order_id)")
    );
    match chunking {
        Chunking::Wrapped => {
            let range = format!("WHERE recon_src.order_id BETWEEN {lo} AND {hi}");
            Wrapped {
                data: format!("SELECT * {from} {range}"),
                count: format!("SELECT {} {from} {range}", bigint("COUNT(*)")),
                whole: query.to_string(),
                count_whole,
                keys,
                from,
            }
        }
        Chunking::Pushed => Wrapped {
            data: query.to_string(),
            count: count_whole.clone(),
            whole: query.to_string(),
            count_whole,
            keys,
            from,
        },
    }
}

/// A value `DB` can bind: sqlx's own bounds on `push_bind`, for owned values.
pub(super) trait Bind<DB: Database>: 'static + Encode<'static, DB> + Type<DB> {}

impl<DB: Database, T: 'static + Encode<'static, DB> + Type<DB>> Bind<DB> for T {}

/// `SELECT <columns> FROM <table> WHERE 1 = 0`: fails when the table or a column is
/// missing, and reads nothing.
fn probe(table: &str, columns: &[&str]) -> String {
    format!("SELECT {} FROM {table} WHERE 1 = 0", columns.join(", "))
}

/// `INSERT INTO <table> (<columns>) `, to be followed by `VALUES`.
pub(super) fn insert_head(table: &str, columns: &[&str]) -> String {
    format!("INSERT INTO {table} ({}) ", columns.join(", "))
}

/// `SELECT <key>, <value> FROM <table> WHERE <key> IN (<keys>)`, the keys bound.
fn select_in<DB>(
    table: &str,
    key: &str,
    value: &str,
    keys: impl IntoIterator<Item = String>,
) -> QueryBuilder<'static, DB>
where
    DB: Database,
    String: Bind<DB>,
{
    let mut q = QueryBuilder::new(format!("SELECT {key}, {value} FROM {table} WHERE {key} IN ("));
    let mut list = q.separated(", ");
    for key in keys {
        list.push_bind(key);
    }
    q.push(")");
    q
}

/// The columns of the task table that `publish` writes, in the order of its INSERT.
const TASK_COLUMNS: &[&str] = &[
    "task_id",
    "effect",
    "order_id",
    "class",
    "action",
    "command",
    "reopen_msg_id",
    "reverse_receipt_ids",
    "priority",
    "idempotency_key",
    "state",
    "resolution",
    "first_run",
    "last_run",
    "last_cut",
    "attempt",
    "updated_at",
];

/// The run as the task table records it (`first_run`, `last_run`, `last_cut`).
pub(super) struct RunStamp {
    /// The run id.
    pub(super) run_id: String,
    /// The run's cut (UTC µs).
    pub(super) cut: Micros,
}

/// Reads no row of the task table, failing when it lacks a column `publish` uses.
pub(super) fn task_probe(table: &str) -> String {
    probe(table, TASK_COLUMNS)
}

/// `task_id, state` of the tasks `ids` that are in the table.
pub(super) fn task_states<DB>(
    table: &str,
    ids: impl IntoIterator<Item = String>,
) -> QueryBuilder<'static, DB>
where
    DB: Database,
    String: Bind<DB>,
{
    select_in(table, "task_id", "state", ids)
}

/// One multi-row INSERT of tasks new to the table: OPEN, first and last seen by `run`.
pub(super) fn task_insert<DB>(
    table: &str,
    tasks: &[&TaskRow],
    run: &RunStamp,
    now: Micros,
) -> QueryBuilder<'static, DB>
where
    DB: Stamp,
    String: Bind<DB>,
    Option<String>: Bind<DB>,
    &'static str: Bind<DB>,
    i64: Bind<DB>,
    i32: Bind<DB>,
{
    let mut q = QueryBuilder::new(insert_head(table, TASK_COLUMNS));
    q.push_values(tasks, |mut row, t| {
        row.push_bind(t.task_id.clone())
            .push_bind(t.effect.clone())
            .push_bind(t.order_id)
            .push_bind(t.class.as_str())
            .push_bind(t.action.as_str())
            .push_bind(t.command.clone())
            .push_bind(t.reopen_msg_id.clone())
            .push_bind(receipt_ids_json(t))
            .push_bind(t.priority)
            .push_bind(t.idempotency_key.clone())
            .push_bind(TaskState::Open.as_str())
            .push_bind(None::<String>)
            .push_bind(run.run_id.clone())
            .push_bind(run.run_id.clone())
            .push_bind(<DB as Stamp>::stamp(run.cut))
            .push_bind(t.attempt.unwrap_or(1))
            .push_bind(<DB as Stamp>::stamp(now));
    });
    q
}

/// `reverse_receipt_ids` as the task table stores it: a JSON array (NULL outside
/// REVERSE_EFFECT).
fn receipt_ids_json(task: &TaskRow) -> Option<String> {
    task.reverse_receipt_ids.as_ref().map(|ids| serde_json::Value::from(ids.clone()).to_string())
}

/// The UPDATE of a task `run` lists again: last run and cut, `command`, `priority` and
/// `idempotency_key` as the run has them (rules and keys change; DESIGN §10.2), `attempt`
/// (the run's, else one more), a RESOLVED task OPEN again; guarded by
/// `last_cut < <the run's cut>`.
pub(super) fn task_relisted<DB>(
    table: &str,
    task: &TaskRow,
    run: &RunStamp,
    now: Micros,
) -> QueryBuilder<'static, DB>
where
    DB: Stamp,
    String: Bind<DB>,
    Option<String>: Bind<DB>,
    i32: Bind<DB>,
{
    // MySQL assigns left to right: resolution is computed before state changes.
    let mut q = QueryBuilder::new(format!("UPDATE {table} SET last_run = "));
    q.push_bind(run.run_id.clone());
    q.push(", last_cut = ").push_bind(<DB as Stamp>::stamp(run.cut));
    q.push(", command = ").push_bind(task.command.clone());
    q.push(", priority = ").push_bind(task.priority);
    q.push(", idempotency_key = ").push_bind(task.idempotency_key.clone());
    match task.attempt {
        Some(a) => q.push(", attempt = ").push_bind(a),
        None => q.push(", attempt = attempt + 1"),
    };
    q.push(", resolution = CASE WHEN state = 'RESOLVED' THEN NULL ELSE resolution END");
    q.push(", state = CASE WHEN state = 'RESOLVED' THEN 'OPEN' ELSE state END");
    q.push(", updated_at = ").push_bind(<DB as Stamp>::stamp(now));
    q.push(" WHERE task_id = ").push_bind(task.task_id.clone());
    q.push(" AND last_cut < ").push_bind(<DB as Stamp>::stamp(run.cut));
    q
}

/// The UPDATE marking a task RESOLVED with `resolution` (from any state but RESOLVED);
/// guarded by `last_cut < <the run's cut>`.
pub(super) fn task_resolved<DB>(
    table: &str,
    task_id: &str,
    resolution: &str,
    run: &RunStamp,
    now: Micros,
) -> QueryBuilder<'static, DB>
where
    DB: Stamp,
    String: Bind<DB>,
{
    let mut q = QueryBuilder::new(format!("UPDATE {table} SET state = 'RESOLVED'"));
    q.push(", resolution = ").push_bind(resolution.to_string());
    q.push(", last_run = ").push_bind(run.run_id.clone());
    q.push(", last_cut = ").push_bind(<DB as Stamp>::stamp(run.cut));
    q.push(", updated_at = ").push_bind(<DB as Stamp>::stamp(now));
    q.push(" WHERE task_id = ").push_bind(task_id.to_string());
    q.push(" AND state <> 'RESOLVED' AND last_cut < ");
    q.push_bind(<DB as Stamp>::stamp(run.cut));
    q
}

/// The columns of `reopen`'s audit table, in the order of its INSERT.
const AUDIT_COLUMNS: &[&str] = &[
    "apply_id",
    "batch_id",
    "msg_id",
    "run_id",
    "task_id",
    "old_action",
    "new_action",
    "changed_at",
    "changed_by",
];

/// One row of the audit table: a ledger row one batch of an apply changed.
pub(super) struct AuditRow<'r> {
    /// The apply.
    pub(super) apply_id: &'r str,
    /// The batch of the apply (one transaction).
    pub(super) batch_id: &'r str,
    /// The ledger row.
    pub(super) msg_id: &'r str,
    /// The run that asked for the change.
    pub(super) run_id: &'r str,
    /// The run's task ids asking for it, comma-separated.
    pub(super) task_id: &'r str,
    /// The action before.
    pub(super) old_action: &'r str,
    /// The action after.
    pub(super) new_action: &'r str,
    /// When (UTC µs).
    pub(super) changed_at: Micros,
    /// Who.
    pub(super) changed_by: &'r str,
}

/// Reads no row of the ledger, failing when it lacks the `msg_id` or `action` column.
pub(super) fn ledger_probe(ledger: &str, msg_id: &str, action: &str) -> String {
    probe(ledger, &[msg_id, action])
}

/// Reads no row of the audit table, failing when it lacks a column `reopen` uses.
pub(super) fn audit_probe(audit: &str) -> String {
    probe(audit, AUDIT_COLUMNS)
}

/// The audit rows of an apply or of one batch (`id`) that set `new_action`, in order:
/// `msg_id, run_id, task_id, old_action, batch_id`.
pub(super) fn audit_rows<DB>(
    audit: &str,
    id: &str,
    new_action: &'static str,
) -> QueryBuilder<'static, DB>
where
    DB: Database,
    String: Bind<DB>,
    &'static str: Bind<DB>,
{
    let mut q = QueryBuilder::new(format!(
        "SELECT msg_id, run_id, task_id, old_action, batch_id FROM {audit} WHERE (apply_id = "
    ));
    q.push_bind(id.to_string()).push(" OR batch_id = ").push_bind(id.to_string());
    q.push(") AND new_action = ").push_bind(new_action).push(" ORDER BY id");
    q
}

/// `<msg_id>, <action>` of the ledger rows `msg_ids`.
pub(super) fn ledger_actions<DB>(
    ledger: &str,
    msg_id: &str,
    action: &str,
    msg_ids: impl IntoIterator<Item = String>,
) -> QueryBuilder<'static, DB>
where
    DB: Database,
    String: Bind<DB>,
{
    select_in(ledger, msg_id, action, msg_ids)
}

/// The order of one ledger message (`reopen --msg-id`), as a BIGINT whatever the column's
/// integer type.
pub(super) fn ledger_order_of<DB>(
    ledger: &str,
    msg_id_column: &str,
    order_column: &str,
    msg_id: &str,
) -> QueryBuilder<'static, DB>
where
    DB: Database,
    String: Bind<DB>,
{
    let order = match DB::NAME {
        "MySQL" => format!("CAST({order_column} AS SIGNED)"),
        "PostgreSQL" => format!("CAST({order_column} AS BIGINT)"),
        _ => order_column.to_string(),
    };
    let mut q = QueryBuilder::new(format!("SELECT {order} FROM {ledger} WHERE {msg_id_column} = "));
    q.push_bind(msg_id.to_string());
    q
}

/// The guarded UPDATE of one ledger row: `action` set to `to` only where it is still `from`.
pub(super) fn ledger_update<DB>(
    ledger: &str,
    msg_id_column: &str,
    action_column: &str,
    msg_id: &str,
    from: &str,
    to: &str,
) -> QueryBuilder<'static, DB>
where
    DB: Database,
    String: Bind<DB>,
{
    let mut q = QueryBuilder::new(format!("UPDATE {ledger} SET {action_column} = "));
    q.push_bind(to.to_string());
    q.push(format!(" WHERE {msg_id_column} = ")).push_bind(msg_id.to_string());
    q.push(format!(" AND {action_column} = ")).push_bind(from.to_string());
    q
}

/// The INSERT of one audit row.
pub(super) fn audit_insert<DB>(audit: &str, row: &AuditRow<'_>) -> QueryBuilder<'static, DB>
where
    DB: Stamp,
    String: Bind<DB>,
{
    let mut q = QueryBuilder::new(insert_head(audit, AUDIT_COLUMNS));
    q.push_values([row], |mut values, row| {
        values
            .push_bind(row.apply_id.to_string())
            .push_bind(row.batch_id.to_string())
            .push_bind(row.msg_id.to_string())
            .push_bind(row.run_id.to_string())
            .push_bind(row.task_id.to_string())
            .push_bind(row.old_action.to_string())
            .push_bind(row.new_action.to_string())
            .push_bind(<DB as Stamp>::stamp(row.changed_at))
            .push_bind(row.changed_by.to_string());
    });
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pushed_query_runs_as_written_and_a_wrapped_one_is_filtered_from_outside() {
        let q = "SELECT * FROM t WHERE a > ? AND a <= ? AND k BETWEEN ? AND ? -- c";
        let pushed = wrap(Driver::MySql, q, Chunking::Pushed);
        assert_eq!(pushed.data, q);
        assert_eq!(pushed.whole, q);
        assert_eq!(
            pushed.count,
            format!("SELECT CAST(COUNT(*) AS SIGNED) FROM (\n{q}\n) AS recon_src")
        );
        assert_eq!(pushed.count_whole, pushed.count);
        let wrapped = wrap(Driver::Postgres, "SELECT 1", Chunking::Wrapped);
        assert!(
            wrapped.data.ends_with("WHERE recon_src.order_id BETWEEN $3 AND $4"),
            "{wrapped:?}"
        );
        assert_eq!(wrapped.whole, "SELECT 1", "one chunk reads the query as written");
        assert!(!wrapped.data.contains("ORDER BY"), "chunks are sorted by the exporter");
        assert!(!wrapped.count_whole.contains("order_id"), "{wrapped:?}");
        assert_eq!(pushed.keys, wrap(Driver::MySql, q, Chunking::Wrapped).keys);
        assert_eq!(
            pushed.capped(4_000_000),
            format!("SELECT * FROM (\n{q}\n) AS recon_src LIMIT 4000001"),
            "a capped read asks for one row more than the cap"
        );
    }

    #[test]
    fn publish_sends_the_statements_of_the_task_table() {
        use crate::vocabulary::{Class, TaskAction};
        let task = TaskRow {
            task_id: "t1".into(),
            effect: "points_grant".into(),
            order_id: 7,
            class: Class::SkippedButDue,
            action: TaskAction::ReverseEffect,
            command: None,
            reopen_msg_id: None,
            reverse_receipt_ids: Some(vec!["r1".into(), "r2".into()]),
            priority: 1,
            idempotency_key: "k".into(),
            attempt: None,
        };
        assert_eq!(receipt_ids_json(&task).as_deref(), Some(r#"["r1","r2"]"#));
        let columns = "task_id, effect, order_id, class, action, command, reopen_msg_id, \
                       reverse_receipt_ids, priority, idempotency_key, state, resolution, \
                       first_run, last_run, last_cut, attempt, updated_at";
        assert_eq!(task_probe("ct"), format!("SELECT {columns} FROM ct WHERE 1 = 0"));
        let ids = ["a".to_string(), "b".to_string()];
        assert_eq!(
            task_states::<sqlx::Postgres>("ct", ids).sql(),
            "SELECT task_id, state FROM ct WHERE task_id IN ($1, $2)"
        );
        let run = RunStamp { run_id: "r".into(), cut: 0 };
        let values = |n: usize| {
            let row = vec!["?"; 17].join(", ");
            vec![format!("({row})"); n].join(", ")
        };
        assert_eq!(
            task_insert::<sqlx::MySql>("ct", &[&task, &task], &run, 0).sql(),
            format!("INSERT INTO ct ({columns}) VALUES {}", values(2))
        );
        let cases = "resolution = CASE WHEN state = 'RESOLVED' THEN NULL ELSE resolution END, \
                     state = CASE WHEN state = 'RESOLVED' THEN 'OPEN' ELSE state END";
        assert_eq!(
            task_relisted::<sqlx::Postgres>("ct", &task, &run, 0).sql(),
            format!(
                "UPDATE ct SET last_run = $1, last_cut = $2, command = $3, priority = $4, \
                 idempotency_key = $5, attempt = attempt + 1, {cases}, \
                 updated_at = $6 WHERE task_id = $7 AND last_cut < $8"
            )
        );
        let again = TaskRow { attempt: Some(3), ..task };
        assert_eq!(
            task_relisted::<sqlx::Postgres>("ct", &again, &run, 0).sql(),
            format!(
                "UPDATE ct SET last_run = $1, last_cut = $2, command = $3, priority = $4, \
                 idempotency_key = $5, attempt = $6, {cases}, \
                 updated_at = $7 WHERE task_id = $8 AND last_cut < $9"
            )
        );
        assert_eq!(
            task_resolved::<sqlx::Postgres>("ct", "t1", "RECEIPT", &run, 0).sql(),
            "UPDATE ct SET state = 'RESOLVED', resolution = $1, last_run = $2, last_cut = $3, \
             updated_at = $4 WHERE task_id = $5 AND state <> 'RESOLVED' AND last_cut < $6"
        );
    }

    #[test]
    fn reopen_sends_the_statements_of_the_ledger_and_its_audit_table() {
        let columns = "apply_id, batch_id, msg_id, run_id, task_id, old_action, new_action, \
                       changed_at, changed_by";
        assert_eq!(ledger_probe("led", "m", "a"), "SELECT m, a FROM led WHERE 1 = 0");
        assert_eq!(audit_probe("au"), format!("SELECT {columns} FROM au WHERE 1 = 0"));
        assert_eq!(
            audit_rows::<sqlx::Postgres>("au", "x", "REVOKED").sql(),
            "SELECT msg_id, run_id, task_id, old_action, batch_id FROM au \
             WHERE (apply_id = $1 OR batch_id = $2) AND new_action = $3 ORDER BY id"
        );
        let ids = ["m1".to_string()];
        assert_eq!(
            ledger_actions::<sqlx::MySql>("led", "m", "a", ids).sql(),
            "SELECT m, a FROM led WHERE m IN (?)"
        );
        assert_eq!(
            ledger_update::<sqlx::Postgres>("led", "m", "a", "m1", "SKIPPED", "REVOKED").sql(),
            "UPDATE led SET a = $1 WHERE m = $2 AND a = $3"
        );
        let row = AuditRow {
            apply_id: "ap",
            batch_id: "b",
            msg_id: "m1",
            run_id: "r",
            task_id: "t1,t2",
            old_action: "SKIPPED",
            new_action: "REVOKED",
            changed_at: 0,
            changed_by: "me",
        };
        assert_eq!(
            audit_insert::<sqlx::Sqlite>("au", &row).sql(),
            format!("INSERT INTO au ({columns}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
        );
        assert_eq!(insert_head("t", &["a", "b"]), "INSERT INTO t (a, b) ");
    }
}

// ---- Incremental nights (docs/CONTRACT.md "Incremental snapshots") ----

/// The text type a key is cast to for `recon_key`.
fn text_type(driver: Driver) -> &'static str {
    match driver {
        Driver::MySql => "CHAR",
        Driver::Postgres | Driver::Sqlite => "TEXT",
    }
}

/// A source query whose rows also carry the source's key as text, `recon_key`: what every
/// file of an incremental snapshot holds. `key` was checked to be a plain identifier.
pub(super) fn keyed_query(driver: Driver, query: &str, key: &str) -> String {
    format!(
        "SELECT recon_keyed.*, CAST(recon_keyed.{key} AS {}) AS recon_key FROM (\n{query}\n) AS recon_keyed",
        text_type(driver)
    )
}

/// What one night of a chain reads of a source: the rows whose event time is in
/// `(after, cut]` (the new window) and every row changed at or after `since` (the previous
/// night's watermark), at any event time, so that a row whose event time moved out of the
/// window still supersedes its old version. Run with the source's own bounds bound wide.
pub(super) fn delta_query(
    driver: Driver,
    query: &str,
    columns: DeltaColumns<'_>,
    after: &str,
    cut: &str,
    since: &str,
) -> String {
    let DeltaColumns { key, event, changed } = columns;
    format!(
        "{} WHERE (recon_keyed.{event} > {after} AND recon_keyed.{event} <= {cut}) OR recon_keyed.{changed} >= {since}",
        keyed_query(driver, query, key)
    )
}

/// The columns [`delta_query`] names (checked to be plain identifiers).
#[derive(Debug, Clone, Copy)]
pub(super) struct DeltaColumns<'a> {
    /// The source's key.
    pub key: &'a str,
    /// The table's event-time column.
    pub event: &'a str,
    /// The column the database sets on every insert and update.
    pub changed: &'a str,
}

/// A time literal compared with the source's zone-less or zoned timestamp columns: MySQL
/// and SQLite wall time in the source's offset, PostgreSQL an explicit `timestamptz` (a
/// `timestamp` column is compared in the session's zone, the source's offset).
pub(super) fn time_literal(driver: Driver, micros: Micros, offset_secs: i32) -> String {
    let wall = super::conn::naive(micros, offset_secs);
    match driver {
        Driver::MySql => format!("'{}'", wall.format("%Y-%m-%d %H:%M:%S%.6f")),
        Driver::Sqlite => format!("'{}'", super::conn::sqlite_text(wall)),
        Driver::Postgres => format!(
            "CAST('{}+00' AS timestamptz)",
            super::conn::utc(micros).format("%Y-%m-%d %H:%M:%S%.6f")
        ),
    }
}

/// The literal a change column is compared with. SQLite's recommended triggers store UTC
/// with milliseconds (`strftime('%Y-%m-%d %H:%M:%f','now')`), so its literal is UTC,
/// truncated to the millisecond (text comparison then never misses an equal value).
pub(super) fn changed_literal(driver: Driver, micros: Micros, offset_secs: i32) -> String {
    match driver {
        Driver::Sqlite => {
            let wall = super::conn::naive(micros - micros.rem_euclid(1000), 0);
            format!("'{}'", wall.format("%Y-%m-%d %H:%M:%S%.3f"))
        }
        _ => time_literal(driver, micros, offset_secs),
    }
}

/// The watermark probe, run before the export's read transactions start: the database's
/// time now (text, in the source's offset for MySQL, UTC for the others), then how long
/// ago its oldest open transaction started, in microseconds (NULL: none open). The age
/// is measured after the time, so it can only put the watermark earlier. MySQL reports
/// `INNODB_TRX.trx_started` in the server's system zone, not the session's, so the age is
/// taken with the session switched to SYSTEM ([`MYSQL_SESSION_ZONE_SYSTEM`]) and back.
pub(super) fn probe_statements(driver: Driver) -> [&'static str; 2] {
    match driver {
        Driver::MySql => [
            "SELECT DATE_FORMAT(NOW(6), '%Y-%m-%d %H:%i:%s.%f')",
            "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, MIN(trx_started), NOW(6)) AS CHAR) FROM information_schema.INNODB_TRX",
        ],
        Driver::Postgres => [
            "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')",
            "SELECT CAST(CAST(EXTRACT(EPOCH FROM (clock_timestamp() - min(xact_start))) * 1000000 AS BIGINT) AS TEXT) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND xact_start IS NOT NULL",
        ],
        Driver::Sqlite => ["SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')", "SELECT NULL"],
    }
}

/// MySQL: the session zone in which `trx_started` and `NOW()` agree.
pub(super) const MYSQL_SESSION_ZONE_SYSTEM: &str = "SET time_zone = SYSTEM";

/// MySQL: back to the source's offset after the probe.
pub(super) fn mysql_set_time_zone(offset: &str) -> String {
    format!("SET time_zone = '{offset}'")
}

/// PostgreSQL: whether this role sees other roles' transactions in `pg_stat_activity`.
pub(super) const PG_SEES_ALL_ACTIVITY: &str = "SELECT CAST(CASE WHEN (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) OR pg_has_role(current_user, 'pg_read_all_stats', 'MEMBER') THEN 'yes' ELSE 'no' END AS TEXT)";
