//! The one place a DataFusion `SessionContext` is built, so every command (run, sql,
//! tests, benches) plans with the same settings, in process or on a cluster
//! ([`Engine`]).

use std::sync::Arc;

use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::engine::staging::Staging;
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

/// Where a run's queries execute.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Engine {
    /// DataFusion in this process (the default).
    #[default]
    InProcess,
    /// An Apache DataFusion Ballista cluster, by its scheduler's `host:port`: the same SQL,
    /// planned by the scheduler and executed by its executors, reading the snapshot from
    /// storage every node reaches.
    Ballista {
        /// The scheduler's `host:port`.
        scheduler: String,
    },
}

/// How `--engine` names the cluster engine.
pub const BALLISTA_SCHEME: &str = "ballista://";

impl Engine {
    /// Parses `in-process` or `ballista://HOST:PORT`.
    pub fn parse(text: &str) -> Result<Engine> {
        let text = text.trim();
        if text == "in-process" {
            return Ok(Engine::InProcess);
        }
        let bad = |message: &str| Error::argument("--engine", format!("'{text}' {message}"));
        let Some(address) = text.strip_prefix(BALLISTA_SCHEME) else {
            return Err(bad("is not an engine; use in-process or ballista://HOST:PORT"));
        };
        let address = address.trim_end_matches('/');
        let port = address.rsplit_once(':').map(|(host, port)| (host, port.parse::<u16>()));
        match port {
            Some((host, Ok(port))) if !host.is_empty() && port > 0 => {
                Ok(Engine::Ballista { scheduler: address.to_string() })
            }
            _ => Err(bad(
                "needs the scheduler as ballista://HOST:PORT (e.g. ballista://127.0.0.1:50050)",
            )),
        }
    }

    /// The engine as `--engine` takes it.
    pub fn describe(&self) -> String {
        match self {
            Engine::InProcess => "in-process".into(),
            Engine::Ballista { scheduler } => format!("{BALLISTA_SCHEME}{scheduler}"),
        }
    }
}

/// The settings every session shares, in process or on a cluster.
pub(crate) fn config(options: &SessionOptions) -> SessionConfig {
    let mut config = SessionConfig::new()
        .with_target_partitions(options.target_partitions.max(1))
        .with_batch_size(options.batch_size.max(1))
        .with_information_schema(true);
    // Evaluate scan filters (the cut, the window, dynamic join filters) while decoding, so
    // rows that fail them never materialise their other columns. effects_in_play, whose
    // filters keep nearly every row, turns this off (recon/execute.rs).
    config.options_mut().execution.parquet.pushdown_filters = true;
    config.options_mut().execution.parquet.reorder_filters = true;
    config
}

fn runtime(options: &SessionOptions) -> Result<Arc<RuntimeEnv>> {
    let mut runtime = RuntimeEnvBuilder::new();
    if let Some(limit) = options.memory_limit {
        runtime = runtime.with_memory_pool(Arc::new(FairSpillPool::new(limit)));
    }
    runtime.build_arc().map_err(|e| Error::query("building the query engine", e))
}

/// Builds an in-process session with `options`.
pub fn build(options: &SessionOptions) -> Result<SessionContext> {
    let ctx = SessionContext::new_with_config_rt(config(options), runtime(options)?);
    ctx.register_udf(crate::engine::udf::key_hash());
    Ok(ctx)
}

/// A session on `engine`. A cluster session stages the tables a run builds in memory
/// under `staging` (the run's own folder; see [`crate::engine::staging`]) and is checked to answer
/// before it is returned.
pub async fn connect(
    engine: &Engine,
    options: &SessionOptions,
    staging: impl FnOnce(SessionContext) -> Staging,
) -> Result<SessionContext> {
    match engine {
        Engine::InProcess => build(options),
        Engine::Ballista { scheduler } => {
            let config = config(options).with_extension(Arc::new(staging(build(options)?)));
            cluster_session(scheduler, config, runtime(options)?).await
        }
    }
}

#[cfg(feature = "ballista")]
async fn cluster_session(
    scheduler: &str,
    config: SessionConfig,
    runtime: Arc<RuntimeEnv>,
) -> Result<SessionContext> {
    let state = crate::engine::cluster::client_state(scheduler, config, runtime)?;
    let ctx = SessionContext::new_with_state(state);
    ctx.register_udf(crate::engine::udf::key_hash());
    crate::engine::cluster::probe(scheduler, &ctx).await?;
    Ok(ctx)
}

#[cfg(not(feature = "ballista"))]
async fn cluster_session(
    scheduler: &str,
    _config: SessionConfig,
    _runtime: Arc<RuntimeEnv>,
) -> Result<SessionContext> {
    Err(Error::argument(
        "--engine",
        format!(
            "{BALLISTA_SCHEME}{scheduler}: this effect-recon was built without the cluster \
             engine (cargo feature `ballista`, on by default)"
        ),
    ))
}
