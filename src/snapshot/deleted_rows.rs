//! Scans that skip the rows a chain's position deletes name (docs/CONTRACT.md
//! "Incremental snapshots"): [`DeletedRowsTable`] hands each file's row selection to the
//! Parquet reader, which then neither decodes nor returns those rows. In process only: a
//! cluster's scheduler plans its own scans, and there the live rows come from the keys.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{ScanArgs, ScanResult, Session, TableProvider};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::parquet::ParquetRowSelection;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfig, FileScanConfigBuilder};
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result as DataFusionResult};
use datafusion::logical_expr::TableProviderFilterPushDown;
use datafusion::parquet::arrow::arrow_reader::RowSelection;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::Expr;

/// The rows to read of each file with deletes, by object path.
pub(crate) type Selections = HashMap<String, RowSelection>;

/// A file table whose files are read through their row selections.
#[derive(Debug)]
pub(crate) struct DeletedRowsTable {
    inner: Arc<dyn TableProvider>,
    selections: Arc<Selections>,
}

impl DeletedRowsTable {
    /// Wraps a Parquet file table; `selections` names the rows to keep of some of its files.
    pub(crate) fn new(inner: Arc<dyn TableProvider>, selections: Arc<Selections>) -> Self {
        DeletedRowsTable { inner, selections }
    }

    /// `plan` with each file's selection attached. Its statistics become estimates: the
    /// footers count rows the selection skips.
    fn selected(&self, plan: &Arc<dyn ExecutionPlan>) -> DataFusionResult<Arc<dyn ExecutionPlan>> {
        if plan.downcast_ref::<EmptyExec>().is_some() {
            return Ok(Arc::clone(plan));
        }
        let not_a_scan =
            || DataFusionError::Internal("position deletes need a plain Parquet scan".into());
        let exec = plan.downcast_ref::<DataSourceExec>().ok_or_else(not_a_scan)?;
        let config = exec.data_source().downcast_ref::<FileScanConfig>().ok_or_else(not_a_scan)?;
        let groups: Vec<FileGroup> = config
            .file_groups
            .iter()
            .map(|group| {
                let files: Vec<PartitionedFile> = group.iter().map(|f| self.select(f)).collect();
                FileGroup::new(files)
            })
            .collect();
        let config = FileScanConfigBuilder::from(config.clone())
            .with_file_groups(groups)
            .with_statistics(config.statistics().to_inexact())
            .build();
        Ok(Arc::new(DataSourceExec::new(Arc::new(config))))
    }

    fn select(&self, file: &PartitionedFile) -> PartitionedFile {
        let Some(selection) = self.selections.get(file.object_meta.location.as_ref()) else {
            return file.clone();
        };
        let mut file = file.clone().with_extension(ParquetRowSelection::new(selection.clone()));
        file.statistics = file.statistics.map(|s| Arc::new(s.as_ref().clone().to_inexact()));
        file
    }
}

#[async_trait]
impl TableProvider for DeletedRowsTable {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DataFusionResult<Arc<dyn ExecutionPlan>> {
        let args = ScanArgs::default()
            .with_projection(projection.map(Vec::as_slice))
            .with_filters(Some(filters))
            .with_limit(limit);
        Ok(self.scan_with_args(state, args).await?.into_inner())
    }

    async fn scan_with_args<'a>(
        &self,
        state: &dyn Session,
        args: ScanArgs<'a>,
    ) -> DataFusionResult<ScanResult> {
        let result = self.inner.scan_with_args(state, args).await?;
        Ok(ScanResult::new(self.selected(result.plan())?))
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DataFusionResult<Vec<TableProviderFilterPushDown>> {
        self.inner.supports_filters_pushdown(filters)
    }
}
