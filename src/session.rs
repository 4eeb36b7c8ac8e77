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
    /// Input rows aggregated per pass of `run` (larger days go one order_id range at a
    /// time): about 100 bytes of aggregation state each. Derived from the memory there
    /// is ([`rows_per_pass_for`]), so passes happen only when memory requires them.
    pub rows_per_pass: u64,
}

/// [`SessionOptions::rows_per_pass`] when the machine's memory cannot be read: about a
/// gigabyte of aggregation state.
pub const ROWS_PER_PASS: u64 = 12_000_000;

/// Bytes of aggregation state one input row costs in `effect_state` (measured upper
/// bound, hash tables included).
const BYTES_PER_AGGREGATED_ROW: usize = 100;

/// The most input rows one pass may aggregate so that its state takes about half of
/// `memory` bytes (the other half is left to scans, joins and the outputs).
pub fn rows_per_pass_for(memory: usize) -> u64 {
    (memory / 2 / BYTES_PER_AGGREGATED_ROW).max(1) as u64
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            target_partitions: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2),
            batch_size: 8192,
            memory_limit: None,
            rows_per_pass: machine_memory().map_or(ROWS_PER_PASS, rows_per_pass_for),
        }
    }
}

impl SessionOptions {
    /// Options under a memory limit: passes small enough that their aggregation state
    /// takes about half the limit.
    pub fn with_memory_limit(mut self, limit: usize) -> Self {
        self.memory_limit = Some(limit);
        self.rows_per_pass = self.rows_per_pass.min(rows_per_pass_for(limit));
        self
    }
}

/// The machine's memory in bytes (`MemTotal` of `/proc/meminfo`), or the cgroup limit
/// when a container has a smaller one; `None` where neither can be read.
fn machine_memory() -> Option<usize> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let total_kib: usize = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    let total = total_kib.checked_mul(1024)?;
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|limit| limit.trim().parse::<usize>().ok());
    Some(cgroup.map_or(total, |limit| limit.min(total)))
}

/// Builds a session with `options`.
pub fn build(options: &SessionOptions) -> Result<SessionContext> {
    let mut config = SessionConfig::new()
        .with_target_partitions(options.target_partitions.max(1))
        .with_batch_size(options.batch_size.max(1))
        .with_information_schema(true);
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
