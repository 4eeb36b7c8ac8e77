//! The one place a DataFusion `SessionContext` is built, so every command (run, sql,
//! tests, benches) plans with the same settings.

use std::sync::Arc;

use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::error::{Error, Result};

/// Engine settings a caller may choose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionOptions {
    /// Parallelism of plans (DataFusion `target_partitions`).
    pub target_partitions: usize,
    /// Rows per batch.
    pub batch_size: usize,
    /// Bound on the memory of operators that can spill; `None` = unbounded.
    pub memory_limit: Option<usize>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            target_partitions: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2),
            batch_size: 8192,
            memory_limit: None,
        }
    }
}

/// Builds a session with `options`.
pub fn build(options: &SessionOptions) -> Result<SessionContext> {
    let mut config = SessionConfig::new()
        .with_target_partitions(options.target_partitions.max(1))
        .with_batch_size(options.batch_size.max(1))
        .with_information_schema(true);
    // Contract strings are Utf8; keep them so, rather than Utf8View, in what we read.
    config.options_mut().execution.parquet.schema_force_view_types = false;
    // Evaluate scan filters (the cut, the window, dynamic join filters) while decoding, so
    // rows that fail them never materialise their other columns.
    config.options_mut().execution.parquet.pushdown_filters = true;
    config.options_mut().execution.parquet.reorder_filters = true;
    let mut runtime = RuntimeEnvBuilder::new();
    if let Some(limit) = options.memory_limit {
        runtime = runtime.with_memory_pool(Arc::new(FairSpillPool::new(limit)));
    }
    let runtime = runtime.build_arc().map_err(|e| Error::query("building the query engine", e))?;
    let ctx = SessionContext::new_with_config_rt(config, runtime);
    ctx.register_udf(crate::udf::key_hash());
    Ok(ctx)
}
