//! The crate's one error type.
//!
//! Every variant carries the thing it is about (file, column, rule, table, source), so the
//! message alone tells an on-call engineer where to look. `main` maps any error to exit 2.

use std::fmt;

/// Shorthand used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The cause an error variant keeps.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Everything that can go wrong in effect-recon.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A rules file or job config that cannot be used.
    #[error("config {path}: {message}")]
    Config {
        /// The file or path concerned.
        path: String,
        /// What is wrong, in words.
        message: String,
    },

    /// A command-line value that makes no sense (bad timestamp, `--since` after the cut, ...).
    #[error("invalid argument {name}: {message}")]
    Argument {
        /// The argument, e.g. `--since`.
        name: &'static str,
        /// What is wrong, in words.
        message: String,
    },

    /// The snapshot as a whole is unusable (no manifest, wrong format, ...).
    #[error("snapshot {location}: {message}")]
    Snapshot {
        /// The location concerned.
        location: String,
        /// What is wrong, in words.
        message: String,
    },

    /// One file of a snapshot is missing, unreadable or has the wrong shape.
    #[error("snapshot file {file}: {message}")]
    SnapshotFile {
        /// The file concerned.
        file: String,
        /// What is wrong, in words.
        message: String,
        /// The underlying error, when there is one (its text is already in `message`).
        #[source]
        source: Option<BoxError>,
    },

    /// A column of a snapshot file breaks the contract (type, NULLs, duplicates).
    #[error("snapshot file {file}, column {column}: {message}")]
    Column {
        /// The file concerned.
        file: String,
        /// The column concerned.
        column: String,
        /// What is wrong, in words.
        message: String,
        /// The underlying error, when there is one (its text is already in `message`).
        #[source]
        source: Option<BoxError>,
    },

    /// A location (directory, `file://` or `s3://` URL) that cannot be used.
    #[error("location {location}: {message}")]
    Location {
        /// The location concerned.
        location: String,
        /// What is wrong, in words.
        message: String,
    },

    /// The previous run a run follows (`--previous`) cannot be used.
    #[error("previous run {location}: {message}")]
    PreviousRun {
        /// The location concerned.
        location: String,
        /// What is wrong, in words.
        message: String,
    },

    /// Writing or publishing outputs (a run folder, a chart, a report) failed.
    #[error("output {location}: {message}")]
    Output {
        /// The location concerned.
        location: String,
        /// What is wrong, in words.
        message: String,
        /// The underlying error, when there is one (its text is already in `message`).
        #[source]
        source: Option<BoxError>,
    },

    /// Reading a finished run (its manifest, summary or output tables) failed.
    #[error("run {location}: {message}")]
    Run {
        /// The run folder or file concerned.
        location: String,
        /// What is wrong, in words.
        message: String,
        /// The underlying error, when there is one (its text is already in `message`).
        #[source]
        source: Option<BoxError>,
    },

    /// A database source of the exporter failed; never carries the password.
    #[error("source {source_name} ({table}): {message}")]
    Source {
        /// The source's name in the job config.
        source_name: String,
        /// The table concerned.
        table: String,
        /// What is wrong, in words.
        message: String,
    },

    /// The query engine failed; `context` says which query or step.
    #[error("{context}: {source}")]
    Query {
        /// The query or step that failed.
        context: String,
        /// The underlying error.
        #[source]
        source: Box<datafusion::error::DataFusionError>,
    },

    /// The engine ran out of the memory `--memory-limit` grants.
    #[error("{context}: out of memory under --memory-limit: {message}\nhint: raise --memory-limit (e.g. 4GiB), or lower --target-partitions so fewer operators hold memory at once")]
    MemoryLimit {
        /// The query or step that failed.
        context: String,
        /// What is wrong, in words.
        message: String,
    },

    /// The cluster engine (`--engine ballista://…`) cannot be reached or a query on it
    /// failed.
    #[error("cluster {scheduler}: {message}")]
    Cluster {
        /// The engine as given, `ballista://HOST:PORT`.
        scheduler: String,
        /// What is wrong, in words.
        message: String,
        /// The underlying error, when there is one (its text is already in `message`).
        #[source]
        source: Option<BoxError>,
    },

    /// Object store access failed.
    #[error("object store {location}: {source}")]
    ObjectStore {
        /// The location concerned.
        location: String,
        /// The underlying error.
        #[source]
        source: Box<object_store::Error>,
    },

    /// Local I/O failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or path concerned.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// An alert webhook could not be delivered.
    #[error("alert webhook {target}: {message}")]
    Alert {
        /// The webhook's scheme and host (its path may be a secret).
        target: String,
        /// What went wrong, after the last attempt.
        message: String,
    },

    /// A broken invariant of effect-recon itself (a bug, not bad input).
    #[error("internal error: {0}")]
    Internal(
        /// What invariant broke.
        String,
    ),

    /// A tool writing back into a team database (`publish`, `reopen`) failed; `table` is the
    /// database table concerned. Never carries the password.
    #[error("{tool} {table}: {message}")]
    Database {
        /// `publish` or `reopen`.
        tool: &'static str,
        /// The table concerned.
        table: String,
        /// What is wrong, in words.
        message: String,
    },

    /// A ground-truth check found differences (verify).
    #[error("{0}")]
    Mismatch(
        /// The differences, summarised.
        String,
    ),
}

impl Error {
    /// Wraps a DataFusion error with the step it happened in.
    pub fn query(context: impl fmt::Display, source: datafusion::error::DataFusionError) -> Self {
        if let datafusion::error::DataFusionError::ResourcesExhausted(message) = source.find_root()
        {
            return Error::MemoryLimit { context: context.to_string(), message: message.clone() };
        }
        Error::Query { context: context.to_string(), source: Box::new(source) }
    }

    /// Wraps an object store error with the location it concerns.
    pub fn store(location: impl fmt::Display, source: object_store::Error) -> Self {
        Error::ObjectStore { location: location.to_string(), source: Box::new(source) }
    }

    /// A config error about `path`.
    pub fn config(path: impl fmt::Display, message: impl fmt::Display) -> Self {
        Error::Config { path: path.to_string(), message: message.to_string() }
    }

    /// A command-line argument error.
    pub fn argument(name: &'static str, message: impl fmt::Display) -> Self {
        Error::Argument { name, message: message.to_string() }
    }
}
