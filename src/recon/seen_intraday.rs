//! A nightly run beside a `watch` chain (docs/WATCH.md): a finding the intraday chain
//! already reported is not NEW again at night.
//!
//! The latest complete intraday run at or before the night's cut holds every finding open
//! in that chain. Its open findings that the previous night did not have are added to
//! `previous_discrepancies` (and their tasks to `previous_tasks`) before the lifecycle SQL
//! runs, so the night re-judges them like its own: still there, they are `PERSISTING`
//! with the intraday `first_seen_run` and `first_break_on`; gone, they are resolved. Their
//! `runs_open` is set to 0 first: it counts this chain's runs (nights), not cycles, so a
//! finding first seen during the day is open for 1 night at its first night. A night
//! without an intraday chain reads nothing here and is unchanged.

use datafusion::prelude::SessionContext;

use super::lifecycle::{PreviousRun, PREVIOUS_DISCREPANCIES, PREVIOUS_TASKS};
use crate::engine::staging::register_batches;
use crate::error::{Error, Result};
use crate::run_folder::OutputTable;

/// Session table of the intraday run's discrepancies.
const INTRADAY_DISCREPANCIES: &str = "intraday_discrepancies";
/// Session table of the intraday run's compensation tasks.
const INTRADAY_TASKS: &str = "intraday_tasks";

/// Adds the intraday run's open findings (and their tasks) that the previous night did
/// not have to the registered `previous_*` tables.
pub(super) async fn merge(ctx: &SessionContext, intraday: &PreviousRun) -> Result<()> {
    intraday
        .register_as(
            ctx,
            &[
                (INTRADAY_DISCREPANCIES, OutputTable::Discrepancies),
                (INTRADAY_TASKS, OutputTable::CompensationTasks),
            ],
        )
        .await?;
    let columns = |table: OutputTable, replaced: Option<&str>| -> String {
        let names = table.schema().fields().iter().map(|f| f.name().clone()).collect::<Vec<_>>();
        names
            .iter()
            .map(|name| match replaced {
                Some(r) if r == name => format!("CAST(0 AS INT) AS {name}"),
                _ => format!("i.{name}"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let added = format!(
        "SELECT {} FROM {INTRADAY_DISCREPANCIES} i \
         WHERE i.verdict = 'BREAK' AND i.finding_id NOT IN \
           (SELECT finding_id FROM {PREVIOUS_DISCREPANCIES} WHERE verdict = 'BREAK')",
        columns(OutputTable::Discrepancies, Some("runs_open"))
    );
    let tasks = format!(
        "SELECT {} FROM {INTRADAY_TASKS} i WHERE i.task_id IN (SELECT finding_id FROM ({added}))",
        columns(OutputTable::CompensationTasks, None)
    );
    let findings = format!("SELECT * FROM {PREVIOUS_DISCREPANCIES} UNION ALL {added}");
    let tasks = format!("SELECT * FROM {PREVIOUS_TASKS} UNION ALL {tasks}");
    // Both are computed before either table is replaced: the tasks read the old findings.
    let findings = collect(ctx, &findings, OutputTable::Discrepancies, intraday).await?;
    let tasks = collect(ctx, &tasks, OutputTable::CompensationTasks, intraday).await?;
    for (name, table, batch) in [
        (PREVIOUS_DISCREPANCIES, OutputTable::Discrepancies, findings),
        (PREVIOUS_TASKS, OutputTable::CompensationTasks, tasks),
    ] {
        let _ = ctx.deregister_table(name).map_err(|e| Error::query("replacing a table", e))?;
        register_batches(ctx, name, table.schema(), vec![batch]).await?;
    }
    for name in [INTRADAY_DISCREPANCIES, INTRADAY_TASKS] {
        let _ = ctx.deregister_table(name).map_err(|e| Error::query("dropping a table", e))?;
    }
    Ok(())
}

async fn collect(
    ctx: &SessionContext,
    sql: &str,
    table: OutputTable,
    intraday: &PreviousRun,
) -> Result<datafusion::arrow::record_batch::RecordBatch> {
    let context = |e| {
        Error::query(
            format!("merging the open findings of the intraday run {}", intraday.folder),
            e,
        )
    };
    let batches = ctx.sql(sql).await.map_err(context)?.collect().await.map_err(context)?;
    table.conform(&batches)
}
