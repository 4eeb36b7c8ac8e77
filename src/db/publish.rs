//! `publish`: a run's compensation tasks written into the team's task table
//! (`sql/schema/compensation_task.<driver>.sql`), keyed by `task_id`.
//!
//! Invariants:
//! * Idempotent: publishing the same run again changes no row. Every update is guarded by
//!   `last_cut < <this run's cut>`, so a run never overwrites what a later (or the same)
//!   run wrote, and the counts are the databases' own affected-row counts.
//! * A later run inserts its new tasks, bumps `last_run` and `attempt` of the tasks it
//!   lists again (`attempt` from the run when it has §9's column, else `attempt + 1`), and
//!   marks RESOLVED the tasks whose findings are in its `resolved` table (absent: tasks
//!   the run does not list stay as they are).
//! * A task the executor marked DONE is never moved back to OPEN; when the run still
//!   lists it, it is reported as "done but still missing". FAILED stays FAILED; a
//!   RESOLVED task listed again (the finding came back) is OPEN again.
//! * Rows go in batches, each batch in one transaction.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sqlx::Connection;

use super::conn::Conn;
use super::dialect::{self, RunStamp};
use super::error::WriteError;
use super::{self as db, WriteTarget};
use crate::config::job::Driver;
use crate::error::Result;
use crate::run_folder::reader::{RunOutputs, TaskRow};
use crate::storage::Location;
use crate::testing::{crash_point, Stage};
pub use crate::vocabulary::TaskState;

/// The recommended table name.
pub const DEFAULT_TABLE: &str = "compensation_task";

/// The recommended DDL of the task table for `driver`.
pub fn schema_ddl(driver: Driver) -> &'static str {
    dialect::task_table_ddl(driver)
}

/// A validated publish request.
#[derive(Debug, Clone)]
pub struct PublishPlan {
    /// The run folder (`<out>/run=<id>`).
    pub run: Location,
    /// The team's database.
    pub target: WriteTarget,
    /// The task table (a plain identifier).
    pub table: String,
    /// Create the table when missing (recommended DDL).
    pub create: bool,
    /// Tasks per transaction.
    pub batch: usize,
    /// Publish a run whose self-checks failed (INCOMPLETE) all the same.
    pub allow_incomplete: bool,
}

/// What a publish did; every count is the database's own.
#[derive(Debug, Clone)]
pub struct PublishReport {
    /// The run published.
    pub run_id: String,
    /// The table written.
    pub table: String,
    /// Tasks in the run.
    pub tasks: usize,
    /// Rows inserted (the run's tasks new to the table).
    pub inserted: u64,
    /// Rows updated (tasks listed again, plus tasks resolved).
    pub updated: u64,
    /// Of `updated`: tasks marked RESOLVED from the run's `resolved` table.
    pub resolved: u64,
    /// Whether the run has a `resolved` table at all (runs before §9 have none).
    pub has_resolved_table: bool,
    /// DONE tasks whose finding the run still lists, sorted by task_id.
    pub done_but_missing: Vec<TaskRow>,
    /// Time taken.
    pub elapsed: Duration,
}

impl PublishReport {
    /// `N inserted, M updated`.
    pub fn counts(&self) -> String {
        format!("{} inserted, {} updated", self.inserted, self.updated)
    }
}

/// Publishes the run's tasks; see the module doc for the rules.
pub async fn publish(plan: &PublishPlan) -> Result<PublishReport> {
    let started = Instant::now();
    db::check_identifier("--table", &plan.table)?;
    let outputs = RunOutputs::read(&plan.run).await?;
    outputs.check_complete(plan.allow_incomplete)?;
    let target = &plan.target;
    let table = plan.table.as_str();
    let mut conn = target.connect(table).await?;
    let result = publish_on(&mut conn, plan, &outputs).await;
    conn.close().await;
    let (inserted, updated, resolved, states) = result.map_err(|m| target.error(table, m))?;
    let mut done_but_missing: Vec<TaskRow> = outputs
        .tasks
        .iter()
        .filter(|t| states.get(&t.task_id).map(String::as_str) == Some(TaskState::Done.as_str()))
        .cloned()
        .collect();
    done_but_missing.sort_by(|a, b| a.task_id.cmp(&b.task_id));
    Ok(PublishReport {
        run_id: outputs.run_id().to_string(),
        table: plan.table.clone(),
        tasks: outputs.tasks.len(),
        inserted,
        updated,
        resolved,
        has_resolved_table: outputs.resolved.is_some(),
        done_but_missing,
        elapsed: started.elapsed(),
    })
}

/// `(inserted, updated, resolved, state before of every task already in the table)`.
async fn publish_on(
    conn: &mut Conn,
    plan: &PublishPlan,
    outputs: &RunOutputs,
) -> Result<(u64, u64, u64, HashMap<String, String>), WriteError> {
    let table = plan.table.as_str();
    if plan.create {
        let ddl = db::ddl(schema_ddl(plan.target.driver()), DEFAULT_TABLE, table);
        conn.execute(&ddl).await.map_err(WriteError::doing("creating the table"))?;
    }
    probe(conn, table).await?;
    let ids: Vec<&str> = outputs.tasks.iter().map(|t| t.task_id.as_str()).collect();
    let states = states(conn, table, &ids, plan.batch).await?;
    let run = RunStamp { run_id: outputs.run_id().to_string(), cut: outputs.cut };
    let (mut inserted, mut updated) = (0, 0);
    for chunk in outputs.tasks.chunks(plan.batch.max(1)) {
        let (fresh, known): (Vec<&TaskRow>, Vec<&TaskRow>) =
            chunk.iter().partition(|t| !states.contains_key(&t.task_id));
        let (i, u) = write_batch(conn, table, &run, &fresh, &known).await.map_err(
            WriteError::doing(format!("writing a batch of {} tasks (rolled back)", chunk.len())),
        )?;
        inserted += i;
        updated += u;
    }
    let mut resolved = 0;
    if let Some(rows) = &outputs.resolved {
        let found: Vec<(&str, &str)> =
            rows.iter().map(|r| (r.finding_id.as_str(), r.resolution.as_str())).collect();
        for chunk in found.chunks(plan.batch.max(1)) {
            resolved += resolve_batch(conn, table, &run, chunk)
                .await
                .map_err(WriteError::doing("marking a batch of tasks RESOLVED (rolled back)"))?;
        }
    }
    Ok((inserted, updated + resolved, resolved, states))
}

/// Fails with a clear message when the table is missing or lacks the columns publish uses.
async fn probe(conn: &mut Conn, table: &str) -> Result<(), WriteError> {
    conn.execute(&dialect::task_probe(table)).await.map_err(WriteError::doing(
        "the table is missing or lacks the columns of the recommended schema \
         (sql/schema/compensation_task.*.sql; --create makes it)",
    ))
}

/// `task_id → state` of the tasks already in the table.
async fn states(
    conn: &mut Conn,
    table: &str,
    ids: &[&str],
    batch: usize,
) -> Result<HashMap<String, String>, WriteError> {
    let mut found = HashMap::new();
    for chunk in ids.chunks(batch.clamp(1, 1000)) {
        let rows: Vec<(String, String)> = crate::db::on_conn!(conn, c, DB => {
            let mut q = dialect::task_states::<DB>(table, chunk.iter().map(|id| id.to_string()));
            q.build_query_as::<(String, String)>().fetch_all(&mut *c).await
        })
        .map_err(WriteError::doing("reading the states of the run's tasks"))?;
        found.extend(rows);
    }
    Ok(found)
}

/// One transaction: the new tasks inserted, the known ones updated; `(inserted, updated)`.
async fn write_batch(
    conn: &mut Conn,
    table: &str,
    run: &RunStamp,
    fresh: &[&TaskRow],
    known: &[&TaskRow],
) -> Result<(u64, u64), sqlx::Error> {
    let now = crate::time::now_micros();
    crate::db::on_conn!(conn, c, DB => {
        let mut tx = c.begin().await?;
        let mut inserted = 0;
        if !fresh.is_empty() {
            let mut q = dialect::task_insert::<DB>(table, fresh, run, now);
            inserted = q.build().execute(&mut *tx).await?.rows_affected();
        }
        let mut updated = 0;
        for t in known {
            let mut q = dialect::task_relisted::<DB>(table, t, run, now);
            updated += q.build().execute(&mut *tx).await?.rows_affected();
        }
        crash_point(Stage::PublishBeforeCommit);
        tx.commit().await?;
        crash_point(Stage::PublishBatch);
        Ok((inserted, updated))
    })
}

/// One transaction: tasks whose finding the run resolved marked RESOLVED (any state but
/// RESOLVED; a DONE task resolved by its receipt is the executor's success confirmed).
async fn resolve_batch(
    conn: &mut Conn,
    table: &str,
    run: &RunStamp,
    resolved: &[(&str, &str)],
) -> Result<u64, sqlx::Error> {
    let now = crate::time::now_micros();
    crate::db::on_conn!(conn, c, DB => {
        let mut tx = c.begin().await?;
        let mut updated = 0;
        for (task_id, resolution) in resolved {
            let mut q = dialect::task_resolved::<DB>(table, task_id, resolution, run, now);
            updated += q.build().execute(&mut *tx).await?.rows_affected();
        }
        crash_point(Stage::PublishBeforeCommit);
        tx.commit().await?;
        crash_point(Stage::PublishBatch);
        Ok(updated)
    })
}
