//! The exporter's own error: what failed while reading one source, with its cause kept.
//!
//! It is mapped upward once, by [`ExportError::into_error`]: a broken invariant becomes
//! [`Error::Internal`], anything else [`Error::Source`] with the message rendered and
//! scrubbed of the password. The crate error never carries a `sqlx::Error`, whose text may
//! hold the connection's secret.

use crate::error::Error;

/// Why exporting one source failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The database refused or failed the connection.
    #[error("cannot connect to {url}: {source}")]
    Connect {
        /// The URL, without password.
        url: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// The database did not answer within the connect timeout.
    #[error("cannot connect to {url}: no answer within {waited}")]
    ConnectTimeout {
        /// The URL, without password.
        url: String,
        /// The timeout, formatted.
        waited: String,
    },
    /// Starting the read transaction (or sharing its snapshot) failed.
    #[error("starting the read transaction: {0}")]
    Begin(#[source] sqlx::Error),
    /// Postgres exported a snapshot id that is not safe to use in `SET TRANSACTION`.
    #[error("unexpected snapshot id '{0}'")]
    SnapshotId(String),
    /// The wrapped source query cannot be prepared.
    #[error("the query fails: {0}")]
    Describe(#[source] sqlx::Error),
    /// The query's result lacks a contract column.
    #[error("the query returns no column '{column}' (it returns: {returned}); alias your column AS {column}")]
    MissingColumn {
        /// The contract column.
        column: &'static str,
        /// The result's columns, comma-separated.
        returned: String,
    },
    /// A result column's type does not fit its contract kind.
    #[error(
        "column {column} has database type {type_name}, expected {expected} (CAST it in the query)"
    )]
    ColumnType {
        /// The contract column.
        column: &'static str,
        /// The database's type name.
        type_name: String,
        /// The types that fit.
        expected: &'static str,
    },
    /// A non-nullable contract column whose result type is NULL.
    #[error("column {0} is always NULL (type NULL); the contract says it must not be NULL")]
    AlwaysNull(&'static str),
    /// The plan query (count and key range) failed.
    #[error("{}", plan_message(.0))]
    Plan(#[source] sqlx::Error),
    /// Rows whose `order_id` is NULL.
    #[error("column order_id is NULL in {0} rows; the contract says it must not be")]
    NullKeys(i64),
    /// Counting one chunk failed.
    #[error("counting {chunk}: {source}")]
    CountChunk {
        /// The chunk, e.g. `chunk 2/8 (order_id 1..=99)`.
        chunk: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// Reading one chunk failed in the database or the connection.
    #[error("reading {chunk}: {}{source}", lost(source))]
    ReadChunk {
        /// The chunk.
        chunk: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// A value of one chunk breaks the contract (the message names the column and row).
    #[error("{chunk}, {message}")]
    Value {
        /// The chunk.
        chunk: String,
        /// What is wrong, and where.
        message: String,
    },
    /// A chunk streamed another number of rows than its count in the same transaction.
    #[error("{chunk}: streamed {streamed} rows but COUNT in the same transaction says {counted}")]
    ChunkRows {
        /// The chunk.
        chunk: String,
        /// Rows read.
        streamed: u64,
        /// Rows counted.
        counted: i64,
    },
    /// The source wrote another number of rows than it counted in the same snapshot.
    #[error("wrote {written} rows but the query counted {counted} in the same snapshot")]
    SourceRows {
        /// Rows written.
        written: u64,
        /// Rows counted.
        counted: i64,
    },
    /// The source query takes another number of parameters than 2 or 4.
    #[error("the query takes {0} parameters; it takes 2 (the lower bound and the cut), or 4 with the chunk's order_id range as the last two")]
    Parameters(usize),
    /// The source was stopped because another one failed (that one is reported).
    #[error("stopped: another source of the export failed")]
    Stopped,
    /// Writing the source's Parquet files failed.
    #[error("{0}")]
    Write(#[source] Box<Error>),
    /// A broken invariant of the exporter (a bug, not bad input).
    #[error("internal: {0}")]
    Internal(String),
}

/// What failed in a tool writing back into a team database (`publish`, `reopen`); the
/// tool renders it, scrubbed, with [`crate::db::WriteTarget::error`].
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// A statement failed.
    #[error("{doing}: {source}")]
    Statement {
        /// What the statement was doing.
        doing: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// What the tool was asked to work on is not there.
    #[error("{0}")]
    NotFound(String),
}

impl WriteError {
    /// Wraps a driver error with what the failing statement was doing.
    pub(crate) fn doing(doing: impl Into<String>) -> impl FnOnce(sqlx::Error) -> WriteError {
        let doing = doing.into();
        move |source| WriteError::Statement { doing, source }
    }
}

impl ExportError {
    /// The crate error for source `source_name` of `table`, with `scrub` applied to the
    /// message.
    pub(crate) fn into_error(
        self,
        source_name: &str,
        table: &str,
        scrub: impl Fn(&str) -> String,
    ) -> Error {
        match self {
            ExportError::Internal(message) => Error::Internal(scrub(&message)),
            other => Error::Source {
                source_name: source_name.to_string(),
                table: table.to_string(),
                message: scrub(&other.to_string()),
            },
        }
    }
}

/// SQLite only knows value types row by row: a text `order_id` shows up in MIN/MAX
/// (columns 2 and 3 of the key query).
fn plan_message(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::ColumnDecode { index, source }
            if index.contains('2') || index.contains('3') =>
        {
            format!("column order_id holds values that are not integers ({source}); the contract needs Int64 (CAST it in the query)")
        }
        _ => format!("counting rows: {e}"),
    }
}

/// A lost connection is named as such.
fn lost(e: &sqlx::Error) -> &'static str {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) => "connection lost: ",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_names_its_chunk_source_and_cause() {
        let chunk = || "chunk 2/8 (order_id 1..=99)".to_string();
        assert_eq!(
            ExportError::NullKeys(3).to_string(),
            "column order_id is NULL in 3 rows; the contract says it must not be"
        );
        assert_eq!(
            ExportError::SourceRows { written: 5, counted: 6 }.to_string(),
            "wrote 5 rows but the query counted 6 in the same snapshot"
        );
        assert_eq!(
            ExportError::ChunkRows { chunk: chunk(), streamed: 5, counted: 6 }.to_string(),
            "chunk 2/8 (order_id 1..=99): streamed 5 rows but COUNT in the same transaction says 6"
        );
        assert_eq!(
            ExportError::Value { chunk: chunk(), message: "row 1 of the chunk: x".into() }
                .to_string(),
            "chunk 2/8 (order_id 1..=99), row 1 of the chunk: x"
        );
        assert_eq!(
            ExportError::MissingColumn { column: "order_id", returned: "id, x".into() }.to_string(),
            "the query returns no column 'order_id' (it returns: id, x); alias your column AS order_id"
        );
        let wrong = ExportError::ColumnType {
            column: "order_id",
            type_name: "TEXT".into(),
            expected: "an integer type (BIGINT)",
        };
        assert_eq!(
            wrong.to_string(),
            "column order_id has database type TEXT, expected an integer type (BIGINT) (CAST it in the query)"
        );
        assert_eq!(
            ExportError::AlwaysNull("status").to_string(),
            "column status is always NULL (type NULL); the contract says it must not be NULL"
        );
        let lost = ExportError::ReadChunk { chunk: chunk(), source: sqlx::Error::PoolClosed };
        assert!(lost.to_string().starts_with("reading chunk 2/8 (order_id 1..=99): "));
        let io = std::io::Error::other("reset");
        let lost = ExportError::ReadChunk { chunk: chunk(), source: sqlx::Error::Io(io) };
        assert!(lost.to_string().contains("99): connection lost: "), "{lost}");
    }

    #[test]
    fn internal_becomes_the_internal_variant_and_the_rest_a_scrubbed_source_error() {
        let e = ExportError::Internal("MySQL begin".into()).into_error("s", "t", str::to_string);
        assert!(matches!(e, Error::Internal(ref m) if m == "MySQL begin"), "{e}");
        let e =
            ExportError::SnapshotId("pw".into()).into_error("s", "t", |m| m.replace("pw", "***"));
        assert_eq!(e.to_string(), "source s (t): unexpected snapshot id '***'");
    }
}
