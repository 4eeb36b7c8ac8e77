//! Typed progress events. The library reports what it does as values and never writes to
//! the terminal itself; the binary decides how they look (a bar on a terminal, log lines
//! in a scheduler's log, nothing with `--quiet`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Something a long command did or is doing.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Rows streamed so far from one export source (sent per batch).
    ExportRows {
        /// The source and table, e.g. `points (receipts)`.
        label: String,
        /// Rows so far.
        rows: u64,
        /// Time since the source started.
        elapsed: Duration,
    },
    /// One export source finished.
    ExportDone {
        /// The source and table.
        label: String,
        /// Rows exported.
        rows: u64,
        /// Its wall time.
        elapsed: Duration,
        /// Range chunks it was read in.
        chunks: usize,
    },
    /// A run validated its snapshot.
    RunValidated {
        /// The snapshot folder.
        snapshot: String,
        /// Files read.
        files: u64,
        /// Rows in them.
        rows: u64,
        /// Wall time.
        elapsed: Duration,
    },
    /// A run follows a previous run (docs/SEMANTICS.md).
    RunFollows {
        /// The previous run's id.
        previous_run: String,
        /// Its cut, RFC 3339.
        cut: String,
        /// Findings that broke after this are listed, RFC 3339.
        list_since: String,
    },
    /// A chained run judged only the orders whose outputs can change (docs/SEMANTICS.md).
    RunJudged {
        /// The orders judged.
        orders: u64,
        /// Their rows in the snapshot tables.
        rows: u64,
        /// Orders with a row after this were judged, RFC 3339.
        reach: String,
    },
    /// A run computed its outputs.
    RunReconciled {
        /// Discrepancies.
        findings: u64,
        /// Skip verdicts.
        skip_verdicts: u64,
        /// Previous open findings resolved.
        resolved: u64,
        /// Wall time.
        elapsed: Duration,
    },
    /// A run connected to its engine (only said for a cluster).
    RunEngine {
        /// The engine, `ballista://HOST:PORT`.
        engine: String,
    },
    /// `--check-single-node`: the in-process run gave the same outputs as the cluster.
    RunSingleNodeChecked {
        /// The cluster engine checked.
        engine: String,
        /// Wall time of the in-process run.
        elapsed: Duration,
    },
    /// A rule value the snapshot does not contain.
    RuleWarning(String),
    /// A self-check failed: the run will be INCOMPLETE.
    SelfCheckFailed(String),
    /// A run published its folder.
    RunWritten {
        /// The run folder.
        folder: String,
        /// Wall time of the write.
        elapsed: Duration,
    },
    /// The run was already published with the same inputs; nothing was written.
    RunAlreadyDone {
        /// The run folder.
        folder: String,
    },
    /// The nightly job started.
    NightlyStarted {
        /// The cut, RFC 3339.
        cut: String,
        /// Where the rules came from.
        rules: String,
        /// Their hash (first 12 hex digits).
        rules_hash: String,
    },
    /// A complete snapshot for the cut already existed and is reused.
    ExportSkipped {
        /// The snapshot folder.
        snapshot: String,
    },
    /// What an export of incremental-ready sources was: full (and why), incremental (on
    /// which snapshot), or a shadow check's outcome.
    ExportChain(String),
    /// The nightly export finished.
    ExportFinished {
        /// Rows exported.
        rows: u64,
        /// Sources read.
        sources: usize,
        /// The snapshot folder.
        snapshot: String,
        /// Wall time.
        elapsed: Duration,
    },
    /// A step of `demo`.
    Demo(DemoStep),
    /// The nightly run finished.
    RunFinished {
        /// Discrepancies.
        findings: u64,
        /// BREAK findings.
        breaks: u64,
        /// Compensation tasks.
        tasks: u64,
        /// The run folder.
        folder: String,
        /// Wall time.
        elapsed: Duration,
    },
}

/// The steps of `demo` (each also reports its own stages).
#[derive(Debug, Clone, PartialEq)]
pub enum DemoStep {
    /// Generating the day or the nights.
    Generating {
        /// Orders in all.
        orders: u64,
        /// Where they go.
        folder: String,
    },
    /// Generated: the generator's own summary.
    Generated {
        /// `gen`'s report, as it prints it.
        summary: String,
    },
    /// Loading a night into the SQLite source.
    Loading {
        /// The database file.
        database: String,
    },
    /// Loaded.
    Loaded {
        /// Rows inserted.
        rows: u64,
        /// The database file.
        database: String,
        /// Wall time.
        elapsed: Duration,
    },
    /// The nightly job starts (export, then run).
    Nightly {
        /// The job config.
        job: String,
    },
    /// Checking the run against the ground truth.
    Verifying,
}

impl Event {
    /// Whether the event belongs to a run (the stages of `run`, also inside `nightly`).
    pub fn is_run_stage(&self) -> bool {
        matches!(
            self,
            Event::RunValidated { .. }
                | Event::RunFollows { .. }
                | Event::RunJudged { .. }
                | Event::RunReconciled { .. }
                | Event::RunWritten { .. }
                | Event::RunAlreadyDone { .. }
        )
    }
}

/// Where events go: a callback the caller provides, cheap to clone and to share between
/// the tasks of an export.
#[derive(Clone)]
pub struct Events(Arc<dyn Fn(&Event) + Send + Sync>);

impl Events {
    /// Events handed to `sink`.
    pub fn new(sink: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        Events(Arc::new(sink))
    }

    /// Events nobody listens to (tests, benches).
    pub fn none() -> Self {
        Events::new(|_| {})
    }

    /// Reports one event.
    pub fn emit(&self, event: Event) {
        (self.0)(&event)
    }
}

impl fmt::Debug for Events {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Events")
    }
}
