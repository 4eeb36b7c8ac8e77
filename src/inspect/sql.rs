//! The read-only SQL surface for analysts (`effect-recon sql`): a snapshot's tables,
//! the rules, and optionally one run's outputs, queried without any way to change them.

use datafusion::execution::context::SQLOptions;
use datafusion::prelude::{DataFrame, SessionContext};

use crate::config::RuleSet;
use crate::engine::session::{self, SessionOptions};
use crate::error::{Error, Result};
use crate::recon::rules_table;
use crate::run_folder::{reader, OutputTable};
use crate::snapshot::Snapshot;
use crate::storage::Location;

/// The memory limit of an `sql` session unless `--memory-limit` says otherwise: spilling
/// operators stay under it, the others (and a collected result) fail with a clear error.
pub const DEFAULT_MEMORY_LIMIT: usize = 1 << 30;

/// Opens a session with `ledger`, `status_history`, `receipts`, `rules` and, with a run
/// folder, `discrepancies`, `compensation_tasks` and `skip_verdicts`.
pub async fn open(
    snapshot: &Location,
    run: Option<&Location>,
    rules: &RuleSet,
    options: &SessionOptions,
) -> Result<SessionContext> {
    let ctx = session::build(options)?;
    Snapshot::open(snapshot).await?.register(&ctx).await?;
    rules_table::register(&ctx, rules)?;
    if let Some(folder) = run {
        reader::register(&ctx, folder).await?;
    }
    Ok(ctx)
}

/// The snapshot a finished run judged, as its manifest names it.
pub async fn judged_snapshot(folder: &Location) -> Result<String> {
    Ok(reader::run_manifest_of_folder(folder).await?.snapshot)
}

/// The run table an error says is missing, when the session has no run registered.
fn missing_run_table(ctx: &SessionContext, error: &str) -> Option<&'static str> {
    if ctx.table_exist(OutputTable::Discrepancies.name()).unwrap_or(false) {
        return None;
    }
    OutputTable::ALL.into_iter().map(OutputTable::name).find(|table| {
        error.contains(&format!("table '{table}' not found"))
            || error.contains(&format!(".{table}' not found"))
    })
}

/// Plans one statement, refusing anything that would change data or the session:
/// DDL (CREATE, DROP), DML (INSERT, UPDATE, DELETE, COPY) and statements such as SET.
pub async fn read_only_query(ctx: &SessionContext, sql: &str) -> Result<DataFrame> {
    let options =
        SQLOptions::new().with_allow_ddl(false).with_allow_dml(false).with_allow_statements(false);
    ctx.sql_with_options(sql, options).await.map_err(|e| {
        let text = e.to_string();
        let refused = ["DDL not supported: ", "DML not supported: ", "Statement not supported: "]
            .iter()
            .find_map(|marker| text.find(marker).map(|at| text[at + marker.len()..].trim().to_string()));
        if let Some(what) = refused {
            Error::argument("sql", format!("{what} refused: this session is read-only (no CREATE, DROP, INSERT, UPDATE, DELETE, COPY or SET); only queries run here"))
        } else if let Some(table) = missing_run_table(ctx, &text) {
            Error::argument(
                "sql",
                format!("table '{table}' not found: the run tables ({}) need --run <out>/run=<id>", OutputTable::ALL.map(OutputTable::name).join(", ")),
            )
        } else {
            Error::query("sql", e)
        }
    })
}
