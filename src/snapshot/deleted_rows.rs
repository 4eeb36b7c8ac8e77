//! Scans that skip the rows a chain's position deletes name (docs/CONTRACT.md
//! "Incremental snapshots"): [`with_selections`] hands each file's row selection to the
//! Parquet reader, which then neither decodes nor returns those rows. Applied by
//! [`super::row_groups::OrderRangeTable`], in process only: a cluster's scheduler plans
//! its own scans, and there the live rows come from the keys.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::parquet::ParquetRowSelection;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfig, FileScanConfigBuilder};
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::{DataFusionError, Result as DataFusionResult};
use datafusion::parquet::arrow::arrow_reader::RowSelection;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::ExecutionPlan;

/// The rows to read of each file with deletes, by object path.
pub(crate) type Selections = HashMap<String, RowSelection>;

/// `plan`, a Parquet file scan, with each file's selection attached (unchanged when no
/// file has one). Its statistics become estimates: the footers count rows the selection
/// skips.
pub(crate) fn with_selections(
    plan: &Arc<dyn ExecutionPlan>,
    selections: &Selections,
) -> DataFusionResult<Arc<dyn ExecutionPlan>> {
    if selections.is_empty() || plan.downcast_ref::<EmptyExec>().is_some() {
        return Ok(Arc::clone(plan));
    }
    let not_a_scan =
        || DataFusionError::Internal("position deletes need a plain Parquet scan".into());
    let exec = plan.downcast_ref::<DataSourceExec>().ok_or_else(not_a_scan)?;
    let config = exec.data_source().downcast_ref::<FileScanConfig>().ok_or_else(not_a_scan)?;
    let groups: Vec<FileGroup> = config
        .file_groups
        .iter()
        .map(|group| FileGroup::new(group.iter().map(|f| select(f, selections)).collect()))
        .collect();
    let config = FileScanConfigBuilder::from(config.clone())
        .with_file_groups(groups)
        .with_statistics(config.statistics().to_inexact())
        .build();
    Ok(Arc::new(DataSourceExec::new(Arc::new(config))))
}

fn select(file: &PartitionedFile, selections: &Selections) -> PartitionedFile {
    let Some(selection) = selections.get(file.object_meta.location.as_ref()) else {
        return file.clone();
    };
    let mut file = file.clone().with_extension(ParquetRowSelection::new(selection.clone()));
    file.statistics = file.statistics.map(|s| Arc::new(s.as_ref().clone().to_inexact()));
    file
}
