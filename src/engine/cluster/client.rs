//! The client side of the cluster engine.

use std::sync::Arc;
use std::time::Duration;

use ballista_core::config::BALLISTA_ADAPTIVE_PLANNER_ENABLED;
use ballista_core::extension::SessionStateExt;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::engine::session::BALLISTA_SCHEME;
use crate::error::{Error, Result};

/// How long the first query may take to answer before the cluster counts as down: a
/// scheduler without executors queues it.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// A session state whose queries run on the scheduler at `scheduler` (`host:port`), with
/// our settings (`config`, `runtime`).
pub fn client_state(
    scheduler: &str,
    config: SessionConfig,
    runtime: Arc<RuntimeEnv>,
) -> Result<SessionState> {
    let state = SessionStateBuilder::new()
        .with_default_features()
        .with_config(config)
        .with_runtime_env(runtime)
        .build();
    let mut state = state
        .upgrade_for_ballista(format!("http://{scheduler}"))
        .map_err(|e| cluster_error(scheduler, e))?;
    // Ballista prefers sort-merge joins because DataFusion's hash join cannot spill; the
    // build sides of our joins are the small tables (rules, the backlog, the in-play
    // effects of a pass), so hash joins are both safe and several times faster.
    let options = state.config_mut().options_mut();
    options.optimizer.prefer_hash_join = true;
    // Ballista 55's adaptive planner leaves jobs of our plans (a mark join over a
    // re-planned stage) pending for ever; the static distributed planner runs them.
    options
        .set(BALLISTA_ADAPTIVE_PLANNER_ENABLED, "false")
        .map_err(|e| cluster_error(scheduler, e))?;
    Ok(state)
}

/// Runs `SELECT 1` on the cluster: a scheduler that is down, unreachable or has no
/// executor is reported here, by its address, before any output is touched.
pub async fn probe(scheduler: &str, ctx: &SessionContext) -> Result<()> {
    let answer = async {
        let frame = ctx.sql("SELECT 1 AS answer").await?;
        frame.collect().await
    };
    match tokio::time::timeout(PROBE_TIMEOUT, answer).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(cluster_error(scheduler, e)),
        Err(_) => Err(Error::Cluster {
            scheduler: format!("{BALLISTA_SCHEME}{scheduler}"),
            message: format!(
                "no answer to a first query within {}s (is an executor registered with this scheduler?)",
                PROBE_TIMEOUT.as_secs()
            ), source: None
        }),
    }
}

fn cluster_error(scheduler: &str, e: datafusion::error::DataFusionError) -> Error {
    Error::Cluster {
        scheduler: format!("{BALLISTA_SCHEME}{scheduler}"),
        message: format!("does not answer: {e}"),
        source: Some(Box::new(e)),
    }
}
