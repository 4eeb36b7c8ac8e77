//! Scans that spread only the row groups a query can use across partitions.
//!
//! DataFusion splits a table's files into byte ranges, one per partition, before it
//! knows which row groups a filter prunes. A scan of one `order_id` range of files sorted
//! by `order_id` (a pass of `run`, a lookup of `explain`) then finds its rows in two or
//! three of sixteen ranges, and the other partitions idle. [`OrderRangeTable`] narrows
//! every file to the bytes of the row groups whose `order_id` statistics overlap the
//! filter before DataFusion splits them, so the split is over the rows actually read.
//! Which rows come back never changes: the filter and the statistics pruning still apply.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{ScanArgs, ScanResult, Session, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfig, FileScanConfigBuilder};
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::TableType;
use datafusion::error::Result as DataFusionResult;
use datafusion::logical_expr::{Between, BinaryExpr, Operator, TableProviderFilterPushDown};
use datafusion::parquet::file::metadata::ParquetMetaData;
use datafusion::parquet::file::statistics::Statistics;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::Expr;

use super::deleted_rows::{with_selections, Selections};

/// The column every snapshot table is sorted and pruned by.
const ORDER_ID: &str = "order_id";

/// Where one row group starts in its file and the `order_id` values it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RowGroupSpan {
    /// Offset of its first page: DataFusion reads a row group when this lies in a range.
    offset: i64,
    /// `order_id` statistics; `None` when the file has none (never pruned).
    order_ids: Option<(i64, i64)>,
}

/// The row groups of one file, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileRowGroups {
    spans: Vec<RowGroupSpan>,
    size: i64,
}

impl FileRowGroups {
    /// The row groups of a file of `size` bytes, from its footer.
    pub(crate) fn from_metadata(metadata: &ParquetMetaData, size: u64) -> FileRowGroups {
        let column = metadata
            .file_metadata()
            .schema_descr()
            .columns()
            .iter()
            .position(|c| c.path().parts() == [ORDER_ID]);
        let spans = metadata
            .row_groups()
            .iter()
            .map(|group| {
                let first = group.column(0);
                let offset = first.dictionary_page_offset().unwrap_or(first.data_page_offset());
                let order_ids = column.and_then(|i| match group.column(i).statistics() {
                    Some(Statistics::Int64(s)) => Some((*s.min_opt()?, *s.max_opt()?)),
                    _ => None,
                });
                RowGroupSpan { offset, order_ids }
            })
            .collect();
        FileRowGroups { spans, size: size as i64 }
    }

    /// The byte ranges of the row groups that may hold an `order_id` in `[lo, hi]`.
    fn ranges(&self, lo: i64, hi: i64) -> Vec<(i64, i64)> {
        let ends = self.spans.iter().skip(1).map(|next| next.offset).chain([self.size]);
        self.spans
            .iter()
            .zip(ends)
            .filter(|(s, _)| s.order_ids.is_none_or(|(min, max)| min <= hi && max >= lo))
            .map(|(s, end)| (s.offset, end))
            .collect()
    }
}

/// Row groups of the files of a table, by object path.
pub(crate) type RowGroupIndex = HashMap<String, FileRowGroups>;

/// A file table whose scans under an `order_id` range read and split only the row
/// groups that range can touch (see the module documentation), and whose files with
/// position deletes are read through their row selections ([`with_selections`]).
#[derive(Debug)]
pub(crate) struct OrderRangeTable {
    inner: Arc<dyn TableProvider>,
    row_groups: Arc<RowGroupIndex>,
    selections: Arc<Selections>,
}

impl OrderRangeTable {
    /// Wraps a file table whose files' row groups are in `row_groups`, skipping the rows
    /// `selections` leaves out.
    pub(crate) fn new(
        inner: Arc<dyn TableProvider>,
        row_groups: Arc<RowGroupIndex>,
        selections: Arc<Selections>,
    ) -> Self {
        OrderRangeTable { inner, row_groups, selections }
    }

    /// `plan` reading only the row groups that may hold an `order_id` in `[lo, hi]`,
    /// dealt out in equal numbers to `partitions` groups (whole row groups each); `None`
    /// when it is not a plain file scan or every row group is in range.
    fn narrowed(
        &self,
        plan: &Arc<dyn ExecutionPlan>,
        (lo, hi): (i64, i64),
        partitions: usize,
    ) -> Option<DataSourceExec> {
        let exec = plan.downcast_ref::<DataSourceExec>()?;
        let config = exec.data_source().downcast_ref::<FileScanConfig>()?;
        // (file, byte range) of every row group to read, in file order.
        let mut units = Vec::new();
        let mut pruned = false;
        for file in config.file_groups.iter().flat_map(FileGroup::iter) {
            let groups = self.row_groups.get(file.object_meta.location.as_ref())?;
            let ranges = groups.ranges(lo, hi);
            pruned |= ranges.len() < groups.spans.len();
            units.extend(ranges.into_iter().map(|range| (file, range)));
        }
        // Nothing to prune (DataFusion's own split is as good), or nothing to read (the
        // statistics prune every row group anyway).
        if !pruned || units.is_empty() {
            return None;
        }
        // Consecutive row groups in equal numbers per partition: row groups hold the same
        // number of rows (all but the last of a file), so equal counts are equal work.
        let partitions = partitions.max(1);
        let count = units.len();
        let mut file_groups: Vec<Vec<PartitionedFile>> = vec![Vec::new(); partitions];
        for (index, (file, (start, end))) in units.into_iter().enumerate() {
            let group = &mut file_groups[index * partitions / count];
            // Adjacent row groups of one file stay one range.
            match group.last_mut() {
                Some(last)
                    if last.object_meta.location == file.object_meta.location
                        && last.range.as_ref().is_some_and(|r| r.end == start) =>
                {
                    let first = last.range.as_ref().map_or(start, |r| r.start);
                    *last = file.clone().with_range(first, end);
                }
                _ => group.push(file.clone().with_range(start, end)),
            }
        }
        file_groups.retain(|group| !group.is_empty());
        let config = FileScanConfigBuilder::from(config.clone())
            .with_file_groups(file_groups.into_iter().map(FileGroup::new).collect())
            .build();
        Some(DataSourceExec::new(Arc::new(config)))
    }
}

#[async_trait]
impl TableProvider for OrderRangeTable {
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
        let bounds = order_id_bounds(args.filters().unwrap_or_default());
        let plan = self.inner.scan_with_args(state, args).await?.into_inner();
        let plan = with_selections(&plan, &self.selections)?;
        let Some(bounds) = bounds else {
            return Ok(ScanResult::new(plan));
        };
        let partitions = state.config().target_partitions();
        Ok(match self.narrowed(&plan, bounds, partitions) {
            Some(narrowed) => ScanResult::new(Arc::new(narrowed)),
            None => ScanResult::new(plan),
        })
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DataFusionResult<Vec<TableProviderFilterPushDown>> {
        self.inner.supports_filters_pushdown(filters)
    }
}

/// The `[lo, hi]` that pushed-down filters confine `order_id` to (comparisons with and
/// `BETWEEN` of integer literals, ANDed); `None` when they do not confine it.
fn order_id_bounds(filters: &[Expr]) -> Option<(i64, i64)> {
    let (mut lo, mut hi) = (i64::MIN, i64::MAX);
    let mut conjuncts: Vec<&Expr> = filters.iter().collect();
    while let Some(filter) = conjuncts.pop() {
        match filter {
            Expr::BinaryExpr(BinaryExpr { left, op: Operator::And, right }) => {
                conjuncts.extend([left.as_ref(), right.as_ref()]);
            }
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
                let bound =
                    match (is_order_id(left), literal(right), literal(left), is_order_id(right)) {
                        (true, Some(v), _, _) => Some((*op, v)),
                        (_, _, Some(v), true) => op.swap().map(|op| (op, v)),
                        _ => None,
                    };
                match bound {
                    Some((Operator::Eq, v)) => (lo, hi) = (lo.max(v), hi.min(v)),
                    Some((Operator::GtEq, v)) => lo = lo.max(v),
                    Some((Operator::Gt, v)) => lo = lo.max(v.saturating_add(1)),
                    Some((Operator::LtEq, v)) => hi = hi.min(v),
                    Some((Operator::Lt, v)) => hi = hi.min(v.saturating_sub(1)),
                    _ => {}
                }
            }
            Expr::Between(Between { expr, negated: false, low, high }) if is_order_id(expr) => {
                if let (Some(l), Some(h)) = (literal(low), literal(high)) {
                    (lo, hi) = (lo.max(l), hi.min(h));
                }
            }
            _ => {}
        }
    }
    ((lo, hi) != (i64::MIN, i64::MAX)).then_some((lo, hi))
}

fn is_order_id(expr: &Expr) -> bool {
    matches!(expr, Expr::Column(c) if c.name == ORDER_ID)
}

fn literal(expr: &Expr) -> Option<i64> {
    match expr {
        Expr::Literal(ScalarValue::Int64(Some(v)), _) => Some(*v),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::{col, lit};

    fn file(groups: &[(i64, i64, i64)], size: i64) -> FileRowGroups {
        let spans = groups
            .iter()
            .map(|&(offset, min, max)| RowGroupSpan { offset, order_ids: Some((min, max)) })
            .collect();
        FileRowGroups { spans, size }
    }

    #[test]
    fn the_ranges_are_exactly_the_overlapping_row_groups() {
        let f = file(&[(4, 1, 10), (100, 11, 20), (200, 21, 30)], 300);
        assert_eq!(f.ranges(12, 15), [(100, 200)]);
        assert_eq!(f.ranges(10, 21), [(4, 100), (100, 200), (200, 300)]);
        assert_eq!(f.ranges(25, 99), [(200, 300)]);
        assert_eq!(f.ranges(31, 40), []);
    }

    #[test]
    fn row_groups_without_statistics_are_always_read() {
        let mut f = file(&[(4, 1, 10), (100, 11, 20)], 300);
        f.spans[1].order_ids = None;
        assert_eq!(f.ranges(1, 2), [(4, 100), (100, 300)]);
    }

    #[test]
    fn bounds_come_from_comparisons_and_between() {
        let between = col("order_id").between(lit(5i64), lit(9i64));
        assert_eq!(order_id_bounds(&[between]), Some((5, 9)));
        let split = [col("order_id").gt_eq(lit(5i64)), lit(9i64).gt(col("order_id"))];
        assert_eq!(order_id_bounds(&split), Some((5, 8)));
        let anded = col("order_id").gt(lit(5i64)).and(col("status").eq(lit("PAID")));
        assert_eq!(order_id_bounds(&[anded]), Some((6, i64::MAX)));
        assert_eq!(order_id_bounds(&[col("order_id").eq(lit(7i64))]), Some((7, 7)));
        assert_eq!(order_id_bounds(&[col("status").eq(lit("PAID"))]), None);
        let either = col("order_id").eq(lit(1i64)).or(col("order_id").eq(lit(2i64)));
        assert_eq!(order_id_bounds(&[either]), None);
    }
}
