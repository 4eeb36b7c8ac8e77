//! effect-recon: a T+1 safety net for side effects lost by conditional-skip consumers.
//!
//! Receipts are the truth of what happened, the status history the truth of what was
//! owed, and the idempotency ledger only explains why they differ. The crate exports
//! those three sources into Parquet snapshots, reconciles a snapshot with DataFusion SQL
//! and publishes discrepancies, compensation tasks and skip verdicts; night after night it
//! keeps a finding open until evidence closes it.
//!
//! # Layout
//!
//! * [`error`] — the crate's error type; [`time`] — instants and graces.
//! * [`events`] — typed progress events; the binary renders them (the library never prints).
//! * [`config`] — the rules TOML (and the export job config).
//! * [`storage`] — local directories, `file://` and `s3://` behind one [`storage::Location`].
//! * [`claim`] — one writer at a time per run or snapshot folder (create-only claims);
//!   [`faults`] — the test-only crash hook of the reliability suite (docs/RELIABILITY.md).
//! * [`snapshot`] — the snapshot contract: layout, manifest, schemas, reading and writing.
//! * [`parquet_parts`] — numbered Parquet parts with row counts and SHA-256.
//! * [`session`] — the one place a DataFusion session is built, in process or on a
//!   cluster ([`session::Engine`]); [`staging`] — the tables a run builds in memory,
//!   registered so the engine can read them (Parquet under the run folder on a cluster);
//!   [`cluster`] — the Ballista engine's client and the scheduler and executor processes
//!   of `effect-recon cluster` (cargo feature `ballista`).
//! * [`queries`] — the SQL of `sql/`, embedded; nothing else holds SQL.
//! * [`udf`] — the SQL functions of our own (`key_hash`).
//! * [`recon`] — `run`: the reconciliation, its outputs and their atomic publishing
//!   ([`recon::publish`]: files first, manifest last).
//! * [`run_outputs`] — a finished run's outputs read back as typed rows (publish, reopen, explain).
//! * [`explore`] — the read-only SQL session of `effect-recon sql`.
//! * [`timeline`] — `explain`: one order's story in time order, reorders in words.
//! * [`nightly`] — the scheduled job: export, then run; [`demo`] — the same on a generated
//!   day (or nights) in SQLite, verified against the ground truth.
//! * [`history`] — the runs under an output root, one line each (the backlog over time).
//! * [`report`] — the morning report of a run: one self-contained HTML page (askama
//!   template, plotters SVG charts), written by `report` and into each nightly run folder.
//! * [`metrics`] — a run's summary as a Prometheus textfile (`--metrics-file`), written
//!   atomically; [`alert`] — one aggregate JSON message per run (`--alert-webhook`).
//! * [`workload`] — the synthetic 24-partition workload of `effect-recon gen` (one day or
//!   several nights of one world) with planted faults and its ground truth.
//! * [`verify`] — a run's outputs (or a chain of runs, night by night) checked against a
//!   ground truth.
//! * [`export`] — database sources → Parquet snapshot (the only module using sqlx), and
//!   the loader that puts a snapshot into a database with the recommended schema, and the
//!   write-back tools: `publish` (tasks into the team's table) and `reopen` (the audited
//!   ledger rollback).
//!
//! The binary (`src/main.rs`, `src/cli/`) is a thin client of this library.

pub mod advise;
pub mod alert;
pub mod claim;
#[cfg(feature = "ballista")]
pub mod cluster;
pub mod config;
pub mod demo;
pub mod error;
pub mod events;
pub mod explore;
pub mod export;
pub mod faults;
pub mod history;
pub mod metrics;
pub mod nightly;
pub mod parquet_parts;
pub mod queries;
pub mod recon;
pub mod report;
pub mod run_outputs;
pub mod session;
pub mod simulate;
pub mod snapshot;
pub mod staging;
pub mod storage;
pub mod time;
pub mod timeline;
pub mod udf;
pub mod verify;
pub mod workload;

pub use datafusion;
pub use error::{Error, Result};
