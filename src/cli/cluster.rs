//! `effect-recon cluster scheduler|executor`: the processes of a Ballista cluster for
//! `run --engine ballista://HOST:PORT`. They are this binary, so every node knows our SQL
//! functions and builds its object stores (S3 from its own `AWS_*` variables).

use effect_recon::engine::cluster::nodes::{self, ExecutorOptions, SchedulerOptions};

/// Run a node of a Ballista cluster (docs/SCALE.md).
#[derive(Debug, clap::Args)]
#[command(
    after_help = "One scheduler, then executors registered with it; every executor must reach the \
snapshot and the output folder (a shared path, or S3 with AWS_* set on the node). Both bind 127.0.0.1 unless \
--bind says otherwise. A node runs until it is stopped (SIGTERM or Ctrl-C).\n\
Example (one machine, two executors of one core each):\n  \
effect-recon cluster scheduler --port 50050 &\n  \
effect-recon cluster executor --scheduler 127.0.0.1:50050 --port 50051 --grpc-port 50052 --concurrent-tasks 1 &\n  \
effect-recon cluster executor --scheduler 127.0.0.1:50050 --port 50061 --grpc-port 50062 --concurrent-tasks 1 &\n  \
effect-recon run --snapshot /shared/snap --out /shared/runs --engine ballista://127.0.0.1:50050"
)]
pub(super) struct ClusterArgs {
    #[command(subcommand)]
    role: Role,
    /// Print the nodes' informational log lines too (warnings and errors always are).
    #[arg(long, global = true)]
    verbose: bool,
}

#[derive(Debug, clap::Subcommand)]
enum Role {
    /// Plans queries and hands their tasks to the executors registered with it.
    Scheduler(SchedulerArgs),
    /// Runs tasks for a scheduler: reads the snapshot, shuffles, returns results.
    Executor(ExecutorArgs),
}

#[derive(Debug, clap::Args)]
struct SchedulerArgs {
    /// Address to bind.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    bind: String,
    /// gRPC port for clients and executors.
    #[arg(long, value_name = "PORT", default_value_t = 50050)]
    port: u16,
    /// Host name executors and clients should use (default: --bind).
    #[arg(long, value_name = "HOST")]
    external_host: Option<String>,
    /// An executor silent for this many seconds is dead; its tasks run again elsewhere.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    executor_timeout: u64,
}

#[derive(Debug, clap::Args)]
struct ExecutorArgs {
    /// The scheduler, HOST:PORT.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:50050")]
    scheduler: String,
    /// Address to bind.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    bind: String,
    /// Arrow Flight port: other executors and the client fetch data from it.
    #[arg(long, value_name = "PORT", default_value_t = 50051)]
    port: u16,
    /// gRPC port the scheduler sends tasks to.
    #[arg(long, value_name = "PORT", default_value_t = 50052)]
    grpc_port: u16,
    /// Host name other nodes should use (default: --bind).
    #[arg(long, value_name = "HOST")]
    external_host: Option<String>,
    /// Tasks run at once (default: the number of cores).
    #[arg(long, value_name = "N")]
    concurrent_tasks: Option<usize>,
    /// Folder for shuffle files (default: a new temporary folder).
    #[arg(long, value_name = "DIR")]
    work_dir: Option<String>,
}

/// Runs `effect-recon cluster`.
pub(super) async fn execute(args: ClusterArgs) -> anyhow::Result<super::Outcome> {
    log_to_stderr(args.verbose);
    match args.role {
        Role::Scheduler(a) => {
            let options = SchedulerOptions {
                bind: a.bind,
                port: a.port,
                external_host: a.external_host,
                executor_timeout_seconds: a.executor_timeout.max(1),
            };
            eprintln!(
                "cluster: scheduler on {}:{} (Ballista {}, executors time out after {}s)",
                options.bind,
                options.port,
                nodes::BALLISTA_VERSION,
                options.executor_timeout_seconds
            );
            nodes::run_scheduler(&options).await?;
        }
        Role::Executor(a) => {
            let (host, port) = a
                .scheduler
                .rsplit_once(':')
                .and_then(|(host, port)| Some((host.to_string(), port.parse::<u16>().ok()?)))
                .ok_or_else(|| anyhow::anyhow!("--scheduler '{}' is not HOST:PORT", a.scheduler))?;
            let concurrent_tasks = a.concurrent_tasks.unwrap_or_else(|| {
                std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
            });
            let options = ExecutorOptions {
                scheduler_host: host,
                scheduler_port: port,
                bind: a.bind,
                port: a.port,
                grpc_port: a.grpc_port,
                external_host: a.external_host,
                concurrent_tasks: concurrent_tasks.max(1),
                work_dir: a.work_dir,
            };
            eprintln!(
                "cluster: executor on {}:{} (gRPC {}), {} concurrent tasks, scheduler {}",
                options.bind,
                options.port,
                options.grpc_port,
                options.concurrent_tasks,
                a.scheduler
            );
            nodes::run_executor(&options).await?;
        }
    }
    Ok(super::Outcome::Clean)
}

/// Sends the nodes' log records (Ballista logs through the `log` crate) to stderr, one
/// line each: warnings and errors, and informational lines when `verbose`.
fn log_to_stderr(verbose: bool) {
    let level = if verbose { log::LevelFilter::Info } else { log::LevelFilter::Warn };
    if log::set_logger(Box::leak(Box::new(StderrLog { level }))).is_ok() {
        log::set_max_level(level);
    }
}

struct StderrLog {
    level: log::LevelFilter,
}

impl log::Log for StderrLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= self.level
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.3fZ");
            eprintln!("{now} {} {}: {}", record.level(), record.target(), record.args());
        }
    }

    fn flush(&self) {}
}
