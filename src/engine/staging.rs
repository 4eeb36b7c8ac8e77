//! The tables a run builds in memory (rules, the previous run's findings, materialised
//! intermediate results), registered so the engine that runs the queries can read them.
//!
//! In process they are `MemTable`s. A cluster engine ships logical plans to a scheduler
//! in another process, and an in-memory table has no codec there, so on a cluster each
//! such table is registered in a form the plan can carry, and one that tells the
//! scheduler how many rows it holds: the scheduler's join planning broadcasts a small
//! build side only when it knows the side is small. Without the count, every join with
//! a staged table hash-partitions both sides, and Ballista then shuffles the big side
//! (`status_history` by status, `receipts` by effect) through the executors' disks.
//!
//! * A table whose every column type Parquet holds is written as one Parquet file under
//!   a staging folder of the run (on the same object store as the run, which every node
//!   reaches) and registered as a listing table over it: the scheduler reads the row
//!   count from its footer.
//! * The rules (their grace is an interval, which Parquet cannot hold) and any other
//!   small table Parquet cannot hold travel inside the plan as `VALUES` rows.
//! * A large table Parquet cannot hold (none today) is staged as Arrow IPC, which keeps
//!   every type but no row count: correct, only slower to join.
//!
//! The staging folder is removed when the run ends, whether it succeeds or not, so a run
//! folder never holds more than its manifest lists.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::ipc::writer::FileWriter;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::TableProvider;
use datafusion::common::ScalarValue;
use datafusion::datasource::file_format::arrow::ArrowFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::datasource::{MemTable, ViewTable};
use datafusion::error::{DataFusionError, Result as DataFusionResult};
use datafusion::logical_expr::{Expr, LogicalPlanBuilder};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::basic::Compression;
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::prelude::{col, lit, SessionContext};

use crate::error::{Error, Result};
use crate::storage::Location;

/// The staging folder of one run on a cluster engine; kept in the session's config
/// (`SessionConfig::with_extension`), so whatever registers a table finds it there.
pub struct Staging {
    folder: Location,
    /// Each staged table gets its own sub-folder, even when a name is registered twice.
    tables: AtomicUsize,
    /// The client's own in-process session, holding every staged table as the batches it
    /// was built from: a query that reads nothing else runs here ([`driver_for`]).
    driver: SessionContext,
}

impl std::fmt::Debug for Staging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staging").field("folder", &self.folder).finish_non_exhaustive()
    }
}

/// The sub-folder of a run folder that holds its staged tables while it runs.
pub(crate) const STAGING_FOLDER: &str = "_staging";

impl Staging {
    /// A staging area in `<run folder>/_staging/<nonce>/` (the nonce keeps two attempts
    /// at the same run from reading each other's tables), with `driver` the in-process
    /// session the small queries run in.
    pub fn in_run_folder(run_folder: &Location, driver: SessionContext) -> Staging {
        let nonce = format!(
            "{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        );
        Staging {
            folder: run_folder.join(&format!("{STAGING_FOLDER}/{nonce}")),
            tables: AtomicUsize::new(0),
            driver,
        }
    }

    /// The staging area of a session, if its engine needs one.
    pub fn of(ctx: &SessionContext) -> Option<Arc<Staging>> {
        ctx.state().config().get_extension::<Staging>()
    }

    /// Where the staged tables are.
    pub fn folder(&self) -> &Location {
        &self.folder
    }

    /// Registers `batches` in the form the module's header describes: a Parquet file, the
    /// plan's own `VALUES`, or (large and not Parquet) an Arrow IPC file.
    async fn stage(
        &self,
        name: &str,
        schema: SchemaRef,
        batches: &[RecordBatch],
    ) -> Result<Arc<dyn TableProvider>> {
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        if schema.fields().iter().all(|f| parquet_holds(f.data_type())) {
            self.stage_file(name, schema, batches, StagedFormat::Parquet).await
        } else if rows <= MAX_INLINE_ROWS {
            inline(name, &schema, batches)
        } else {
            self.stage_file(name, schema, batches, StagedFormat::ArrowIpc).await
        }
    }

    /// Writes `batches` as one file and returns a listing table over it.
    async fn stage_file(
        &self,
        name: &str,
        schema: SchemaRef,
        batches: &[RecordBatch],
        format: StagedFormat,
    ) -> Result<Arc<dyn TableProvider>> {
        let n = self.tables.fetch_add(1, Ordering::Relaxed);
        let extension = format.extension();
        let path = format!("{n:03}-{name}{extension}");
        let fail = |e: DataFusionError| Error::Output {
            location: self.folder.display(&path),
            message: format!("staging table {name}: {e}"),
            source: Some(Box::new(e)),
        };
        let bytes = format.encode(&schema, batches).map_err(fail)?;
        self.folder.write(&path, Bytes::from(bytes)).await?;
        let context = |e| Error::query(format!("registering staged table {name}"), e);
        let url = ListingTableUrl::parse(self.folder.url(&path)).map_err(context)?;
        let options = ListingOptions::new(format.file_format()).with_file_extension(extension);
        let config = ListingTableConfig::new(url).with_listing_options(options).with_schema(schema);
        Ok(Arc::new(ListingTable::try_new(config).map_err(context)?))
    }

    /// Removes every staged table (best effort: a leftover is cleared by the next writer
    /// of the run folder, and no manifest ever lists it), and on a local disk the empty
    /// folders too.
    pub async fn remove(&self) {
        let Some(dir) = self.folder.local_dir() else {
            let _ = self.folder.delete_all().await;
            return;
        };
        let _ = std::fs::remove_dir_all(&dir);
        // `_staging/`, then the run folder itself when nothing else was written there.
        for parent in dir.ancestors().skip(1).take(2) {
            if std::fs::remove_dir(parent).is_err() {
                break;
            }
        }
    }
}

/// The most rows a table may carry inside a plan as `VALUES`: every task of every query
/// that reads it receives them.
const MAX_INLINE_ROWS: usize = 10_000;

/// The file a staged table is written as.
#[derive(Debug, Clone, Copy)]
enum StagedFormat {
    /// Row count and sizes in the footer, for the scheduler's join planning.
    Parquet,
    /// Every Arrow type, no row count.
    ArrowIpc,
}

impl StagedFormat {
    fn extension(self) -> &'static str {
        match self {
            StagedFormat::Parquet => ".parquet",
            StagedFormat::ArrowIpc => ".arrow",
        }
    }

    fn file_format(self) -> Arc<dyn FileFormat> {
        match self {
            StagedFormat::Parquet => Arc::new(ParquetFormat::default()),
            StagedFormat::ArrowIpc => Arc::new(ArrowFormat),
        }
    }

    fn encode(self, schema: &SchemaRef, batches: &[RecordBatch]) -> DataFusionResult<Vec<u8>> {
        match self {
            StagedFormat::Parquet => {
                // Read back at once from a disk or bucket every node shares: fast to write
                // beats small.
                let props =
                    WriterProperties::builder().set_compression(Compression::LZ4_RAW).build();
                let mut writer = ArrowWriter::try_new(Vec::new(), Arc::clone(schema), Some(props))?;
                for batch in batches {
                    writer.write(batch)?;
                }
                Ok(writer.into_inner()?)
            }
            StagedFormat::ArrowIpc => {
                let mut writer = FileWriter::try_new(Vec::new(), schema)?;
                for batch in batches {
                    writer.write(batch)?;
                }
                writer.finish()?;
                Ok(writer.into_inner()?)
            }
        }
    }
}

/// Whether a Parquet file keeps `data_type` exactly (read back with the listing table's
/// schema): Parquet has no interval, duration, decimal-256 or union type, among others.
fn parquet_holds(data_type: &DataType) -> bool {
    match data_type {
        DataType::Boolean
        | DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64
        | DataType::Float32
        | DataType::Float64
        | DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::Date32
        | DataType::Timestamp(_, _) => true,
        DataType::List(item) | DataType::LargeList(item) => parquet_holds(item.data_type()),
        _ => false,
    }
}

/// A small table as a view over its own rows, which the plan carries to the scheduler
/// (so it knows their count exactly). A `VALUES` node crosses the wire as its rows alone
/// and comes back with columns named `column1`, `column2`, …: the names are a projection
/// above it. An empty table is one row of NULLs under `LIMIT 0`.
fn inline(
    name: &str,
    schema: &SchemaRef,
    batches: &[RecordBatch],
) -> Result<Arc<dyn TableProvider>> {
    let context = |e| Error::query(format!("registering table {name} as VALUES"), e);
    let mut values = Vec::new();
    for batch in batches {
        for row in 0..batch.num_rows() {
            let cells = batch
                .columns()
                .iter()
                .map(|column| ScalarValue::try_from_array(column, row).map(lit))
                .collect::<datafusion::error::Result<Vec<Expr>>>()
                .map_err(context)?;
            values.push(cells);
        }
    }
    let empty = values.is_empty();
    if empty {
        let nulls = schema.fields().iter().map(|f| ScalarValue::try_from(f.data_type()).map(lit));
        values.push(nulls.collect::<datafusion::error::Result<Vec<Expr>>>().map_err(context)?);
    }
    let named = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, field)| col(format!("column{}", i + 1)).alias(field.name()));
    let mut plan =
        LogicalPlanBuilder::values(values).and_then(|b| b.project(named)).map_err(context)?;
    if empty {
        plan = plan.limit(0, Some(0)).map_err(context)?;
    }
    Ok(Arc::new(ViewTable::new(plan.build().map_err(context)?, None)))
}

/// Registers `batches` under `name`: a `MemTable` in process, a staged table on a
/// cluster engine (the module's header says which form). Replaces a table of the same name.
pub(crate) async fn register_batches(
    ctx: &SessionContext,
    name: &str,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
) -> Result<()> {
    let context = |e| Error::query(format!("registering {name}"), e);
    let in_memory =
        |schema: SchemaRef, batches: Vec<RecordBatch>| -> Result<Arc<dyn TableProvider>> {
            Ok(Arc::new(MemTable::try_new(schema, vec![batches]).map_err(context)?))
        };
    let table = match Staging::of(ctx) {
        Some(staging) => {
            let staged = staging.stage(name, Arc::clone(&schema), &batches).await?;
            staging.driver.deregister_table(name).map_err(context)?;
            staging.driver.register_table(name, in_memory(schema, batches)?).map_err(context)?;
            staged
        }
        None => in_memory(schema, batches)?,
    };
    ctx.deregister_table(name).map_err(context)?;
    ctx.register_table(name, table).map_err(context)?;
    Ok(())
}

/// On a cluster engine, the client's in-process session when the query `sql` names only
/// tables the run built itself (the rules, the previous run, materialised results): such
/// a query has no snapshot rows to distribute, and a cluster job would cost it a round of
/// scheduling, a broadcast and a result fetch for a few milliseconds of work. `None` in
/// process, and for a query that names the snapshot or a view (anywhere: subqueries
/// included). Decided on the text, not the plan: a plan has views already inlined, and
/// the driver plans the text again over its own tables.
pub(crate) fn driver_for(ctx: &SessionContext, sql: &str) -> Option<SessionContext> {
    let staging = Staging::of(ctx)?;
    let state = staging.driver.state();
    let dialect = state.config().options().sql_parser.dialect;
    let statement = state.sql_to_statement(sql, &dialect).ok()?;
    let tables = state.resolve_table_references(&statement).ok()?;
    let built_here = tables.into_iter().all(|t| staging.driver.table_exist(t).unwrap_or(false));
    built_here.then(|| staging.driver.clone())
}

/// Whether the session's queries run on a cluster (tables must then be files every node
/// can read: no in-memory tables, no providers of our own).
pub(crate) fn is_distributed(ctx: &SessionContext) -> bool {
    Staging::of(ctx).is_some()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::common::stats::Precision;
    use datafusion::physical_plan::statistics::StatisticsContext;
    use datafusion::physical_plan::StatisticsArgs;
    use datafusion::prelude::{SessionConfig, SessionContext};

    use super::{driver_for, register_batches, Staging};
    use crate::config::RuleSet;
    use crate::recon::rules_table;
    use crate::storage::Location;

    /// A session that stages its tables as a cluster session does, under `dir`.
    fn staging_session(dir: &std::path::Path) -> SessionContext {
        let folder = Location::parse(dir.to_str().unwrap()).unwrap();
        let config = SessionConfig::new()
            .with_extension(Arc::new(Staging::in_run_folder(&folder, SessionContext::new())));
        SessionContext::new_with_config(config)
    }

    /// The rows the scheduler's planner is told `name` holds, and the rows it reads back.
    async fn planned_and_read(
        ctx: &SessionContext,
        name: &str,
    ) -> (Precision<usize>, Vec<RecordBatch>) {
        let frame = ctx.sql(&format!("SELECT * FROM {name}")).await.unwrap();
        let plan = frame.clone().create_physical_plan().await.unwrap();
        let stats = StatisticsContext::new().compute(plan.as_ref(), &StatisticsArgs::new());
        let rows = stats.unwrap().num_rows;
        (rows, frame.collect().await.unwrap())
    }

    /// The join planner broadcasts a small build side only when it knows its size: every
    /// staged table must tell its row count (an Arrow IPC listing table tells none), and
    /// read back exactly what was staged.
    #[tokio::test]
    async fn staged_tables_tell_the_planner_their_row_count_and_read_back_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = staging_session(dir.path());

        let schema = Arc::new(Schema::new(vec![
            Field::new("order_id", datafusion::arrow::datatypes::DataType::Int64, false),
            Field::new("effect", datafusion::arrow::datatypes::DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int64Array::from(vec![3, 1, 2])),
                Arc::new(StringArray::from(vec![Some("points"), None, Some("wms")])),
            ],
        )
        .unwrap();
        register_batches(&ctx, "findings", Arc::clone(&schema), vec![batch.clone()]).await.unwrap();
        let (rows, read) = planned_and_read(&ctx, "findings").await;
        assert_eq!(rows, Precision::Exact(3));
        assert_eq!(read, vec![batch]);

        // The rules hold an interval, which Parquet cannot: they travel as VALUES.
        let rules = rules_table::batch(&RuleSet::default_rules().unwrap()).unwrap();
        register_batches(&ctx, "rules", rules.schema(), vec![rules.clone()]).await.unwrap();
        let (rows, read) = planned_and_read(&ctx, "rules").await;
        assert_eq!(rows, Precision::Exact(rules.num_rows()));
        assert_eq!(
            datafusion::arrow::compute::concat_batches(&rules.schema(), &read).unwrap(),
            rules
        );

        // An empty table too.
        register_batches(&ctx, "empty_rules", rules.schema(), vec![]).await.unwrap();
        let (rows, read) = planned_and_read(&ctx, "empty_rules").await;
        assert_eq!(rows, Precision::Exact(0));
        assert_eq!(read.iter().map(RecordBatch::num_rows).sum::<usize>(), 0);
    }

    /// A query of the tables the run built runs in the client's own session; one that
    /// also names a table of the engine (the snapshot) or a view, even in a subquery,
    /// goes to the engine.
    #[tokio::test]
    async fn only_queries_of_staged_tables_run_in_the_driver() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = staging_session(dir.path());
        let orders = RecordBatch::try_from_iter([(
            "order_id",
            Arc::new(Int64Array::from(vec![1, 2])) as datafusion::arrow::array::ArrayRef,
        )])
        .unwrap();
        register_batches(&ctx, "findings", orders.schema(), vec![orders.clone()]).await.unwrap();
        ctx.register_batch("ledger", orders).unwrap();
        // A view over staged tables only: planned, it is inlined into scans of them.
        let view = ctx.sql("SELECT order_id FROM findings").await.unwrap().into_view();
        ctx.register_table("evidence", view).unwrap();

        let staged_only = "WITH f AS (SELECT * FROM findings)
            SELECT * FROM f WHERE order_id IN (SELECT order_id FROM findings)";
        let driver = driver_for(&ctx, staged_only).expect("runs in the driver");
        let read = driver.sql(staged_only).await.unwrap().collect().await.unwrap();
        assert_eq!(read.iter().map(RecordBatch::num_rows).sum::<usize>(), 2);
        for engine_side in [
            "SELECT * FROM findings WHERE order_id IN (SELECT order_id FROM ledger)",
            "SELECT * FROM findings JOIN ledger USING (order_id)",
            "SELECT * FROM findings JOIN evidence USING (order_id)",
        ] {
            assert!(driver_for(&ctx, engine_side).is_none(), "{engine_side}");
        }
    }
}
