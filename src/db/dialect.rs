//! The SQL the exporter itself sends, per database family: transaction control and the
//! wrappers around a source's own query. The only SQL text of the export module besides
//! the recommended schemas of `sql/schema/`.
//!
//! A source query takes its two parameters (lower bound, cut) first; the wrappers add the
//! chunk's `order_id` range as parameters 3 and 4, so the text of each wrapper is the same
//! for every chunk (one prepared statement per connection). A query that takes four
//! parameters has the range in its own WHERE ([`Chunking::Pushed`]) and is run unwrapped.

use crate::config::job::Driver;

/// The recommended schema of each family (`sql/schema/*.sql`).
pub(super) fn schema_ddl(driver: Driver) -> &'static str {
    match driver {
        Driver::MySql => include_str!("../../sql/schema/mysql.sql"),
        Driver::Postgres => include_str!("../../sql/schema/postgres.sql"),
        Driver::Sqlite => include_str!("../../sql/schema/sqlite.sql"),
    }
}

/// Statements that open the read transaction on the first (leader) connection.
pub(super) fn begin_leader(driver: Driver) -> &'static [&'static str] {
    match driver {
        // The isolation level is set first: START TRANSACTION cannot name it.
        Driver::MySql => &[
            "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
            "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
        ],
        Driver::Postgres => &["BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"],
        // Deferred: the read snapshot is taken by the first SELECT and kept until the end.
        Driver::Sqlite => &["BEGIN"],
    }
}

/// Postgres: the leader exports its snapshot so the other connections read the very same one.
pub(super) const PG_EXPORT_SNAPSHOT: &str = "SELECT pg_export_snapshot()";

/// Postgres: a worker joins the leader's snapshot (the id is checked to be `[0-9A-F-]`).
pub(super) fn pg_set_snapshot(id: &str) -> String {
    format!("SET TRANSACTION SNAPSHOT '{id}'")
}

/// Postgres: zone-less `timestamp` values and parameters are read in the source's offset.
/// `INTERVAL ... HOUR TO MINUTE` keeps the ISO sign (a bare '+08:00' would be POSIX, reversed).
pub(super) fn pg_set_time_zone(offset: &str) -> String {
    format!("SET TIME ZONE INTERVAL '{offset}' HOUR TO MINUTE")
}

/// Ends a read transaction.
pub(super) const ROLLBACK: &str = "ROLLBACK";

/// The statements of one source query.
#[derive(Debug, Clone)]
pub(super) struct Wrapped {
    /// Rows of one `order_id` range, in the database's own order (the exporter sorts each
    /// chunk: a server-side ORDER BY cost MariaDB more than half of the read).
    pub data: String,
    /// `COUNT(*)` of the same range.
    pub count: String,
    /// Every row of the query, for a source read as one chunk: the query as written
    /// (a pushed query gets the whole `i64` range bound).
    pub whole: String,
    /// `COUNT(*)` over the whole query: the only statement a source read as one chunk
    /// adds, and one the database may answer from an index on the window's column.
    pub count_whole: String,
    /// `COUNT(*)`, `COUNT(order_id)`, `MIN(order_id)`, `MAX(order_id)` over the whole
    /// query, run only for a source large enough to be chunked (both counts from one
    /// statement: NULL keys are their difference).
    pub keys: String,
}

/// Where a chunk's `order_id` range goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Chunking {
    /// The source query takes two parameters; the range filters its result from outside.
    Wrapped,
    /// The source query takes the range itself as parameters 3 and 4 (on the user's own
    /// indexed column), so it is run as it is; the plan binds the whole `i64` range.
    Pushed,
}

/// Wraps a source query for chunked reading.
pub(super) fn wrap(driver: Driver, query: &str, chunking: Chunking) -> Wrapped {
    let (lo, hi) = match driver {
        Driver::Postgres => ("$3", "$4"),
        Driver::MySql | Driver::Sqlite => ("?", "?"),
    };
    let bigint = |e: &str| match driver {
        Driver::MySql => format!("CAST({e} AS SIGNED)"),
        Driver::Postgres => format!("CAST({e} AS BIGINT)"),
        Driver::Sqlite => e.to_string(),
    };
    // The newline before ')' ends a trailing `-- comment` of the source query.
    let from = format!("FROM (\n{query}\n) AS recon_src");
    let count_whole = format!("SELECT {} {from}", bigint("COUNT(*)"));
    let keys = format!(
        "SELECT {}, {}, {}, {} {from}",
        bigint("COUNT(*)"),
        bigint("COUNT(recon_src.order_id)"),
        bigint("MIN(recon_src.order_id)"),
        bigint("MAX(recon_src.order_id)")
    );
    match chunking {
        Chunking::Wrapped => {
            let range = format!("WHERE recon_src.order_id BETWEEN {lo} AND {hi}");
            Wrapped {
                data: format!("SELECT * {from} {range}"),
                count: format!("SELECT {} {from} {range}", bigint("COUNT(*)")),
                whole: query.to_string(),
                count_whole,
                keys,
            }
        }
        Chunking::Pushed => Wrapped {
            data: query.to_string(),
            count: count_whole.clone(),
            whole: query.to_string(),
            count_whole,
            keys,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pushed_query_runs_as_written_and_a_wrapped_one_is_filtered_from_outside() {
        let q = "SELECT * FROM t WHERE a > ? AND a <= ? AND k BETWEEN ? AND ? -- c";
        let pushed = wrap(Driver::MySql, q, Chunking::Pushed);
        assert_eq!(pushed.data, q);
        assert_eq!(pushed.whole, q);
        assert_eq!(
            pushed.count,
            format!("SELECT CAST(COUNT(*) AS SIGNED) FROM (\n{q}\n) AS recon_src")
        );
        assert_eq!(pushed.count_whole, pushed.count);
        let wrapped = wrap(Driver::Postgres, "SELECT 1", Chunking::Wrapped);
        assert!(
            wrapped.data.ends_with("WHERE recon_src.order_id BETWEEN $3 AND $4"),
            "{wrapped:?}"
        );
        assert_eq!(wrapped.whole, "SELECT 1", "one chunk reads the query as written");
        assert!(!wrapped.data.contains("ORDER BY"), "chunks are sorted by the exporter");
        assert!(!wrapped.count_whole.contains("order_id"), "{wrapped:?}");
        assert_eq!(pushed.keys, wrap(Driver::MySql, q, Chunking::Wrapped).keys);
    }
}
