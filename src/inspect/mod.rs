//! Read a finished run (or the runs under a root) and show it somewhere: [`explain`] (one
//! order's story), [`sql`] (the read-only SQL session), [`history`] (one line per run),
//! [`report`] (the morning report), [`metrics`] (a Prometheus textfile) and [`alert`]
//! (one webhook message per run).

pub mod alert;
pub mod explain;
pub mod history;
pub mod metrics;
pub mod report;
pub mod sql;
