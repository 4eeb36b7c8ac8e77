//! The cluster engine (cargo feature `ballista`): Apache DataFusion Ballista runs the same
//! `sql/` as the in-process engine, planned by a scheduler and executed by executors that
//! read the snapshot from storage every node reaches (a shared path or S3).
//!
//! * [`client`] — the session `run --engine ballista://HOST:PORT` plans with: Ballista's
//!   query planner ships each query's logical plan to the scheduler.
//! * [`nodes`] — the scheduler and executor processes of `effect-recon cluster`. They are
//!   this binary, so what our SQL needs is registered on every node: the `key_hash`
//!   function, and object stores built from the node's own environment (`AWS_*`), since a
//!   client's registered stores do not travel with a plan.
//!
//! What the client must not send: in-memory tables (no codec on the scheduler; they are
//! staged as Parquet files or carried as `VALUES`, see [`crate::engine::staging`]) and
//! table providers of our own (the snapshot's row-group-balanced tables are plain listing
//! tables on a cluster).

pub mod client;
pub mod nodes;

pub use client::{client_state, probe};
