//! The scheduler and executor processes of `effect-recon cluster`.
//!
//! Both bind 127.0.0.1 unless told otherwise. Every node builds its sessions with the
//! `key_hash` function and an object store registry that resolves `s3://` buckets from
//! the node's own `AWS_*` environment (local paths need nothing: every node reads
//! `file://` directly, so a shared path works as it is).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ballista_core::registry::BallistaFunctionRegistry;
use ballista_core::utils::default_session_builder;
use ballista_executor::executor_process::{start_executor_process, ExecutorProcessConfig};
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::scheduler_process::start_server;
use datafusion::execution::object_store::{DefaultObjectStoreRegistry, ObjectStoreRegistry};
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::execution::FunctionRegistry;
use datafusion::prelude::SessionConfig;
use object_store::ObjectStore;
use url::Url;

use crate::error::{Error, Result};
use crate::storage::Location;

pub use ballista_core::BALLISTA_VERSION;

/// How often an executor tells the scheduler it is alive: well inside the scheduler's
/// `--executor-timeout`, so a killed executor is noticed within seconds.
const HEARTBEAT_SECONDS: u64 = 2;

/// How a scheduler is started.
#[derive(Debug, Clone)]
pub struct SchedulerOptions {
    /// Address to bind.
    pub bind: String,
    /// gRPC port clients and executors connect to.
    pub port: u16,
    /// Host name executors and clients are told to use (default: `bind`).
    pub external_host: Option<String>,
    /// An executor silent this long is dead: its tasks are run again elsewhere.
    pub executor_timeout_seconds: u64,
}

/// How an executor is started.
#[derive(Debug, Clone)]
pub struct ExecutorOptions {
    /// The scheduler's host.
    pub scheduler_host: String,
    /// The scheduler's port.
    pub scheduler_port: u16,
    /// Address to bind.
    pub bind: String,
    /// Arrow Flight port (shuffle data and results are fetched from it).
    pub port: u16,
    /// gRPC port the scheduler pushes tasks to.
    pub grpc_port: u16,
    /// Host name other nodes are told to use (default: `bind`).
    pub external_host: Option<String>,
    /// Tasks run at once (default: the number of cores).
    pub concurrent_tasks: usize,
    /// Where shuffle files are kept (default: a temporary folder).
    pub work_dir: Option<String>,
}

/// Runs a scheduler until the process is stopped.
pub async fn run_scheduler(options: &SchedulerOptions) -> Result<()> {
    let external_host = options.external_host.clone().unwrap_or_else(|| options.bind.clone());
    let config = SchedulerConfig {
        bind_host: options.bind.clone(),
        bind_port: options.port,
        external_host,
        executor_timeout_seconds: options.executor_timeout_seconds,
        no_executors_grace_period_seconds: options.executor_timeout_seconds,
        override_session_builder: Some(Arc::new(node_session_state)),
        ..SchedulerConfig::default()
    };
    let address = format!("{}:{}", options.bind, options.port);
    let fail =
        |message: String| Error::Cluster { scheduler: address.clone(), message, source: None };
    let socket = address.parse().map_err(|e| fail(format!("not an address to bind: {e}")))?;
    let cluster = BallistaCluster::new_from_config(&config)
        .await
        .map_err(|e| fail(format!("starting the scheduler: {e}")))?;
    start_server(cluster, socket, Arc::new(config))
        .await
        .map_err(|e| fail(format!("scheduler stopped: {e}")))
}

/// Runs an executor, registered with its scheduler, until the process is stopped.
pub async fn run_executor(options: &ExecutorOptions) -> Result<()> {
    let work_dir = options.work_dir.clone();
    let config = ExecutorProcessConfig {
        bind_host: options.bind.clone(),
        external_host: options.external_host.clone(),
        port: options.port,
        grpc_port: options.grpc_port,
        scheduler_host: options.scheduler_host.clone(),
        scheduler_port: options.scheduler_port,
        vcores: options.concurrent_tasks,
        work_dir: options.work_dir.clone(),
        executor_heartbeat_interval_seconds: HEARTBEAT_SECONDS,
        // Shuffle files of finished jobs are removed by the scheduler's request; this
        // sweeps what a killed scheduler never asked for.
        job_data_clean_up_interval_seconds: 600,
        job_data_ttl_seconds: 3600,
        override_function_registry: Some(Arc::new(function_registry())),
        override_runtime_producer: Some(Arc::new(move |_: &SessionConfig| {
            node_runtime(work_dir.clone())
        })),
        ..ExecutorProcessConfig::default()
    };
    let scheduler = format!("{}:{}", options.scheduler_host, options.scheduler_port);
    start_executor_process(Arc::new(config)).await.map_err(|e| Error::Cluster {
        scheduler,
        message: format!("executor stopped: {e}"),
        source: Some(Box::new(e)),
    })
}

/// The scheduler's sessions: Ballista's defaults, plus `key_hash` and our object stores.
fn node_session_state(config: SessionConfig) -> datafusion::error::Result<SessionState> {
    let mut state = default_session_builder(config)?;
    state.register_udf(Arc::new(crate::engine::udf::key_hash()))?;
    Ok(SessionStateBuilder::new_from_existing(state).with_runtime_env(node_runtime(None)?).build())
}

/// Ballista's functions and `key_hash`, for decoding the plans executors receive.
fn function_registry() -> BallistaFunctionRegistry {
    let mut registry = BallistaFunctionRegistry::default();
    let key_hash = Arc::new(crate::engine::udf::key_hash());
    registry.scalar_functions.insert(key_hash.name().to_string(), key_hash);
    registry
}

fn node_runtime(temp_dir: Option<String>) -> datafusion::error::Result<Arc<RuntimeEnv>> {
    let mut runtime =
        RuntimeEnvBuilder::new().with_object_store_registry(Arc::new(EnvObjectStores::default()));
    if let Some(dir) = temp_dir {
        runtime = runtime.with_temp_file_path(dir);
    }
    runtime.build_arc()
}

/// DataFusion's registry (`file://` and whatever is registered), plus `s3://` buckets
/// built on first use from this node's environment, as `--snapshot s3://…` is on the
/// client.
#[derive(Debug, Default)]
struct EnvObjectStores {
    registered: DefaultObjectStoreRegistry,
    buckets: Mutex<HashMap<String, Arc<dyn ObjectStore>>>,
}

impl ObjectStoreRegistry for EnvObjectStores {
    fn register_store(
        &self,
        url: &Url,
        store: Arc<dyn ObjectStore>,
    ) -> Option<Arc<dyn ObjectStore>> {
        self.registered.register_store(url, store)
    }

    fn deregister_store(&self, url: &Url) -> datafusion::error::Result<Arc<dyn ObjectStore>> {
        self.registered.deregister_store(url)
    }

    fn get_store(&self, url: &Url) -> datafusion::error::Result<Arc<dyn ObjectStore>> {
        if url.scheme() != "s3" {
            return self.registered.get_store(url);
        }
        let bucket = url.host_str().unwrap_or_default().to_string();
        let mut buckets = self.buckets.lock().map_err(|_| {
            datafusion::error::DataFusionError::Internal("object store registry poisoned".into())
        })?;
        if let Some(store) = buckets.get(&bucket) {
            return Ok(Arc::clone(store));
        }
        let location = Location::parse(&format!("s3://{bucket}/"))
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        let store = Arc::clone(location.store());
        buckets.insert(bucket, Arc::clone(&store));
        Ok(store)
    }
}
