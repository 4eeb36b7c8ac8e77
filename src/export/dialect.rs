//! The SQL the exporter itself sends, per database family: transaction control and the
//! wrappers around a source's own query. The only SQL text of the export module besides
//! the recommended schemas of `sql/schema/`.
//!
//! A source query takes its two parameters (lower bound, cut) first; the wrappers add the
//! chunk's `order_id` range as parameters 3 and 4, so the text of each wrapper is the same
//! for every chunk (one prepared statement per connection).

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

/// The three wrappers of one source query.
#[derive(Debug, Clone)]
pub(super) struct Wrapped {
    /// Rows of one `order_id` range, ordered by `order_id`.
    pub data: String,
    /// `COUNT(*)` of the same range.
    pub count: String,
    /// `COUNT(*)`, `COUNT(order_id)`, `MIN(order_id)`, `MAX(order_id)` over the whole query.
    pub plan: String,
}

/// Wraps a source query for chunked reading.
pub(super) fn wrap(driver: Driver, query: &str) -> Wrapped {
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
    let range = format!("WHERE recon_src.order_id BETWEEN {lo} AND {hi}");
    Wrapped {
        data: format!("SELECT * {from} {range} ORDER BY recon_src.order_id"),
        count: format!("SELECT {} {from} {range}", bigint("COUNT(*)")),
        plan: format!(
            "SELECT {}, {}, {}, {} {from}",
            bigint("COUNT(*)"),
            bigint("COUNT(recon_src.order_id)"),
            bigint("MIN(recon_src.order_id)"),
            bigint("MAX(recon_src.order_id)")
        ),
    }
}
