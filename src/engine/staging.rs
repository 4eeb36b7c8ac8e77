//! The tables a run builds in memory (rules, the previous run's findings, materialised
//! intermediate results), registered so the engine that runs the queries can read them.
//!
//! In process they are `MemTable`s. A cluster engine ships logical plans to a scheduler
//! in another process, and an in-memory table has no codec there: on a cluster each such
//! table is written as one Arrow IPC file under a staging folder of the run (on the same
//! object store as the run, which every node reaches) and registered as a listing table
//! over that file. IPC, not Parquet: it keeps every Arrow type exactly (the rules' grace
//! is an interval, which Parquet cannot hold). The staging folder is removed when the run ends, whether it succeeds or not,
//! so a run folder never holds more than its manifest lists.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::ipc::writer::FileWriter;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::TableProvider;
use datafusion::datasource::file_format::arrow::ArrowFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;

use crate::error::{Error, Result};
use crate::storage::Location;

/// The staging folder of one run on a cluster engine; kept in the session's config
/// (`SessionConfig::with_extension`), so whatever registers a table finds it there.
#[derive(Debug)]
pub struct Staging {
    folder: Location,
    /// Each staged table gets its own sub-folder, even when a name is registered twice.
    tables: AtomicUsize,
}

/// The sub-folder of a run folder that holds its staged tables while it runs.
pub(crate) const STAGING_FOLDER: &str = "_staging";

impl Staging {
    /// A staging area in `<run folder>/_staging/<nonce>/`: the nonce keeps two attempts
    /// at the same run from reading each other's tables.
    pub fn in_run_folder(run_folder: &Location) -> Staging {
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

    /// Writes `batches` as one Arrow IPC file and returns a listing table over it.
    async fn stage(
        &self,
        name: &str,
        schema: SchemaRef,
        batches: &[RecordBatch],
    ) -> Result<Arc<dyn TableProvider>> {
        let n = self.tables.fetch_add(1, Ordering::Relaxed);
        let path = format!("{n:03}-{name}.arrow");
        let fail = |e: datafusion::arrow::error::ArrowError| Error::Output {
            location: self.folder.display(&path),
            message: format!("staging table {name}: {e}"),
            source: Some(Box::new(e)),
        };
        let mut writer = FileWriter::try_new(Vec::new(), &schema).map_err(fail)?;
        for batch in batches {
            writer.write(batch).map_err(fail)?;
        }
        writer.finish().map_err(fail)?;
        let bytes = writer.into_inner().map_err(fail)?;
        self.folder.write(&path, Bytes::from(bytes)).await?;
        let context = |e| Error::query(format!("registering staged table {name}"), e);
        let url = ListingTableUrl::parse(self.folder.url(&path)).map_err(context)?;
        let options = ListingOptions::new(Arc::new(ArrowFormat)).with_file_extension(".arrow");
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

/// Registers `batches` under `name`: a `MemTable` in process, a staged Parquet table
/// on a cluster engine. Replaces a table of the same name.
pub(crate) async fn register_batches(
    ctx: &SessionContext,
    name: &str,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
) -> Result<()> {
    let context = |e| Error::query(format!("registering {name}"), e);
    let table: Arc<dyn TableProvider> = match Staging::of(ctx) {
        Some(staging) => staging.stage(name, schema, &batches).await?,
        None => Arc::new(MemTable::try_new(schema, vec![batches]).map_err(context)?),
    };
    ctx.deregister_table(name).map_err(context)?;
    ctx.register_table(name, table).map_err(context)?;
    Ok(())
}

/// Whether the session's queries run on a cluster (tables must then be files every node
/// can read: no in-memory tables, no providers of our own).
pub(crate) fn is_distributed(ctx: &SessionContext) -> bool {
    Staging::of(ctx).is_some()
}
