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
//! Every folder is a format, a boundary or a verb:
//!
//! * Foundations: [`error`] (the crate's error type), [`events`] (typed progress events;
//!   the binary renders them, the library never prints), [`vocabulary`] (classes,
//!   verdicts, lifecycles, resolutions, statuses and actions: one enum each), [`time`]
//!   (instants, windows, durations and their formatting), [`stats`] (quantiles of a
//!   sample), [`text`] (aligned text tables and CSV rows), [`config`] (the rules TOML and
//!   the job config).
//! * Formats: [`snapshot`] (the input contract: layout, manifest, schemas, reader, writer)
//!   and [`run_folder`] (the output contract: tables, summary, the one writer and the one
//!   reader of a run).
//! * Boundaries: [`storage`] (local directories, `file://` and `s3://` behind one
//!   [`storage::Location`], one writer per folder, Parquet parts), [`engine`] (the one
//!   DataFusion session, the SQL of `sql/`, UDFs, staging, the Ballista cluster) and
//!   [`db`] (every team database, both directions: export, load, publish, reopen; the only
//!   module using sqlx).
//! * Verbs, named as the commands: [`recon`] (`run`), [`nightly`], [`watch`] (the
//!   intraday loop's decisions), [`demo`],
//!   [`order_now`] (one order judged live: `explain --config`, `reopen --order`), [`inspect`]
//!   (`explain`, `sql`, `history`, `report`, and what a run hands on: metrics and the
//!   alert), [`compact`] and [`gc`] (the snapshot root of incremental nights).
//! * The synthetic side: [`workload`] (`gen`: the 24-partition world with planted faults
//!   and its independent ground truth), [`verify`] (a run or a chain of runs against the
//!   truth), [`simulate`] (consumer policies side by side) and [`advise`] (grace and N
//!   from a real snapshot).
//! * [`testing`]: the crash hook of the reliability suite (docs/RELIABILITY.md).
//!
//! The binary (`src/main.rs`, `src/cli/`, one file per subcommand) is a thin client of
//! this library.

pub mod advise;
pub mod compact;
pub mod config;
pub mod db;
pub mod demo;
pub mod engine;
pub mod error;
pub mod events;
pub mod gc;
pub mod inspect;
pub mod nightly;
pub mod order_now;
pub mod recon;
pub mod run_folder;
pub mod simulate;
pub mod snapshot;
pub mod stats;
pub mod storage;
pub(crate) mod testing;
pub mod text;
pub mod time;
pub mod verify;
pub mod vocabulary;
pub mod watch;
pub mod workload;

pub use datafusion;
pub use error::{Error, Result};
