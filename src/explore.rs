//! The read-only SQL surface for analysts (`effect-recon sql`): a snapshot's tables,
//! the rules, and optionally one run's outputs, queried without any way to change them.

use std::sync::Arc;

use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::execution::context::SQLOptions;
use datafusion::prelude::{DataFrame, SessionContext};

use crate::config::RuleSet;
use crate::error::{Error, Result};
use crate::recon::publish::read_run_manifest;
use crate::recon::rules_table;
use crate::session::{self, SessionOptions};
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
        register_run(&ctx, folder).await?;
    }
    Ok(ctx)
}

/// The run tables a session has only with a run folder.
const RUN_TABLES: [&str; 4] = ["discrepancies", "compensation_tasks", "skip_verdicts", "resolved"];

/// The snapshot a finished run judged, as its manifest names it.
pub async fn judged_snapshot(folder: &Location) -> Result<String> {
    Ok(run_manifest(folder).await?.snapshot)
}

/// A run's manifest; a folder that does not exist (or is a file) is named as such rather
/// than as one without a manifest.
async fn run_manifest(folder: &Location) -> Result<crate::recon::publish::RunManifest> {
    match read_run_manifest(folder).await {
        Ok(manifest) => Ok(manifest),
        Err(e) => match folder.not_a_folder().await {
            Some(problem) => Err(Error::Output {
                location: folder.display(""),
                message: format!("run folder {problem}"),
            }),
            None => Err(e),
        },
    }
}

/// Registers the output tables of a finished run (the files its manifest lists).
pub async fn register_run(ctx: &SessionContext, folder: &Location) -> Result<()> {
    let manifest = run_manifest(folder).await?;
    ctx.register_object_store(folder.store_url(), Arc::clone(folder.store()));
    for (name, table) in &manifest.tables {
        let context = |e| Error::query(format!("registering run table {name}"), e);
        let paths = table
            .files
            .iter()
            .map(|f| ListingTableUrl::parse(folder.url(&f.path)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(context)?;
        let options =
            ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
        let state = ctx.state();
        let config = ListingTableConfig::new_with_multi_paths(paths)
            .with_listing_options(options)
            .infer_schema(&state)
            .await
            .map_err(context)?;
        let provider = ListingTable::try_new(config).map_err(context)?;
        ctx.register_table(name.as_str(), Arc::new(provider)).map_err(context)?;
    }
    Ok(())
}

/// The run table an error says is missing, when the session has no run registered.
fn missing_run_table(ctx: &SessionContext, error: &str) -> Option<&'static str> {
    if ctx.table_exist("discrepancies").unwrap_or(false) {
        return None;
    }
    RUN_TABLES.into_iter().find(|table| {
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
                format!("table '{table}' not found: the run tables ({}) need --run <out>/run=<id>", RUN_TABLES.join(", ")),
            )
        } else {
            Error::query("sql", e)
        }
    })
}
