//! One database connection of [`crate::db`], whatever its family: connecting (password
//! from the environment, session time zone), transactions, and (for the exporter) reading
//! a wrapped source query into contract-typed Arrow batches.
//!
//! Errors are typed ([`ExportError`], [`ReadError`]); the caller adds the source and table
//! and scrubs the password when it renders them. Timestamps leave this module as UTC microseconds: zone-less values
//! (MySQL DATETIME/TIMESTAMP, Postgres `timestamp`, SQLite text without an offset) are
//! read in the source's fixed offset, which is also the session time zone.

use datafusion::arrow::record_batch::RecordBatch;
use futures::TryStreamExt;
use sqlx::mysql::MySqlConnection;
use sqlx::postgres::PgConnection;
use sqlx::sqlite::SqliteConnection;
use sqlx::{Column, Connection, Executor, Statement};
use tokio::sync::mpsc;

use super::error::ExportError;
use crate::config::job::Driver;
use crate::snapshot::Table;
use crate::time::Micros;

mod batch;
mod connect;
mod decode;
mod family;
mod inline;
mod pg_copy;
mod scrub;
mod zone;

use batch::{BatchBuilder, ValueError};
pub(super) use connect::connect;
pub(super) use decode::{ColumnRead, Decoder, ResultColumn};
use family::Family;
pub(super) use scrub::scrub;
pub(super) use zone::{naive, sqlite_text, utc};

/// How to connect to one database.
#[derive(Debug, Clone)]
pub struct Target {
    /// Database family.
    pub driver: Driver,
    /// URL without password.
    pub url: String,
    /// The password, from `password_env`.
    pub password: Option<String>,
    /// Offset of zone-less values, seconds east of UTC.
    pub offset_secs: i32,
    /// Open SQLite read-only (export) or read-write (loader).
    pub read_only: bool,
}

impl Target {
    /// Removes the password (plain and URL-encoded) and any URL userinfo password from a message.
    pub fn scrub(&self, message: &str) -> String {
        scrub(message, self.password.as_deref())
    }
}

/// An open connection.
pub(crate) enum Conn {
    /// MySQL or MariaDB.
    MySql(MySqlConnection),
    /// PostgreSQL.
    Postgres(PgConnection),
    /// SQLite.
    Sqlite(SqliteConnection),
}

/// The parameters of a source's statements: the lower bound and the cut (a chunk's
/// `order_id` range, where it has one, is bound after them).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Binds {
    /// `since - lookback`, UTC µs.
    pub lower: Micros,
    /// The cut, UTC µs.
    pub cut: Micros,
    /// Offset of the source, seconds east of UTC.
    pub offset_secs: i32,
}

impl Conn {
    /// Runs a statement without parameters (text protocol), e.g. transaction control.
    pub(crate) async fn execute(&mut self, sql: &str) -> Result<(), sqlx::Error> {
        crate::db::on_conn!(self, c, DB => c.execute(sql).await.map(drop))
    }

    /// Runs a query returning one text value.
    pub(crate) async fn query_text(&mut self, sql: &str) -> Result<String, sqlx::Error> {
        crate::db::on_conn!(self, c, DB => sqlx::query_scalar(sql).fetch_one(c).await)
    }

    /// Runs a query returning one text value or NULL.
    pub(crate) async fn query_optional_text(
        &mut self,
        sql: &str,
    ) -> Result<Option<String>, sqlx::Error> {
        crate::db::on_conn!(self, c, DB => sqlx::query_scalar(sql).fetch_one(c).await)
    }

    /// Closes the connection politely.
    pub(crate) async fn close(self) {
        let _ = crate::db::on_conn!(self, c, DB => c.close().await);
    }

    /// The result columns (name, type name, decoder per kind) of a statement, by preparing it.
    pub(crate) async fn columns(&mut self, sql: &str) -> Result<Vec<ResultColumn>, sqlx::Error> {
        Ok(self.describe(sql).await?.0)
    }

    /// The result columns and the number of parameters of a statement, by preparing it.
    pub(crate) async fn describe(
        &mut self,
        sql: &str,
    ) -> Result<(Vec<ResultColumn>, Option<usize>), sqlx::Error> {
        crate::db::on_conn!(self, c, DB => {
            let statement = c.prepare(sql).await?;
            let columns = statement.columns().iter();
            let columns = columns.map(|col| DB::describe(col.name(), col.type_info())).collect();
            let parameters = statement.parameters().map(|p| p.either(|types| types.len(), |n| n));
            Ok((columns, parameters))
        })
    }

    /// Runs the key query of a source: `(rows, non-null order_ids, min, max)`. `range`:
    /// the query takes an `order_id` range itself (parameters 3 and 4).
    pub(crate) async fn keys(
        &mut self,
        sql: &str,
        binds: Binds,
        range: Option<(i64, i64)>,
    ) -> Result<(i64, i64, Option<i64>, Option<i64>), sqlx::Error> {
        type Keys = (i64, i64, Option<i64>, Option<i64>);
        let Binds { lower, cut, offset_secs: offset } = binds;
        crate::db::on_conn!(self, c, DB => {
            let query = sqlx::query_as::<_, Keys>(sql)
                .bind(DB::bound(lower, offset))
                .bind(DB::bound(cut, offset));
            let query = match range {
                Some((lo, hi)) => query.bind(lo).bind(hi),
                None => query,
            };
            query.fetch_one(c).await
        })
    }

    /// Runs a count query; `range`: its parameters 3 and 4.
    pub(crate) async fn count(
        &mut self,
        sql: &str,
        binds: Binds,
        range: Option<(i64, i64)>,
    ) -> Result<i64, sqlx::Error> {
        let Binds { lower, cut, offset_secs: offset } = binds;
        crate::db::on_conn!(self, c, DB => {
            let query = sqlx::query_scalar(sql)
                .bind(DB::bound(lower, offset))
                .bind(DB::bound(cut, offset));
            let query = match range {
                Some((lo, hi)) => query.bind(lo).bind(hi),
                None => query,
            };
            query.fetch_one(c).await
        })
    }

    /// Streams the rows of one chunk into batches of `batch_rows`, sent on `tx` in the
    /// order the database returns them; returns the number of rows. `range`: the
    /// statement's parameters 3 and 4. PostgreSQL reads with binary COPY ([`pg_copy`]),
    /// the others through the driver's rows.
    pub(crate) async fn read(
        &mut self,
        read: &ChunkRead<'_>,
        range: Option<(i64, i64)>,
        tx: &mpsc::Sender<Result<Piece, ExportError>>,
    ) -> Result<u64, ReadError> {
        let Binds { lower, cut, offset_secs: offset } = read.binds;
        let mut sink = Sink {
            builder: BatchBuilder::new(read.table, read.keyed, read.batch_rows),
            batch_rows: read.batch_rows,
            tx,
            rows: 0,
        };
        if let Conn::Postgres(c) = self {
            let (lo, hi) = range.unwrap_or((i64::MIN, i64::MAX));
            let copy = pg_copy::copy_statement(read.sql, read.binds, lo, hi)
                .map_err(|m| ReadError::Internal(format!("inlining the parameters: {m}")))?;
            pg_copy::read(c, &copy, read.columns, offset, &mut sink).await?;
            sink.flush().await?;
            return Ok(sink.rows);
        }
        crate::db::on_conn!(self, c, DB => {
            let query =
                sqlx::query(read.sql).bind(DB::bound(lower, offset)).bind(DB::bound(cut, offset));
            let query = match range {
                Some((lo, hi)) => query.bind(lo).bind(hi),
                None => query,
            };
            let mut rows = query.fetch(c);
            while let Some(row) = rows.try_next().await.map_err(ReadError::Database)? {
                sink.row(|b| DB::fill(&row, read.columns, offset, b)).await?;
            }
        });
        sink.flush().await?;
        Ok(sink.rows)
    }
}

/// What a chunk read sends to the table's writer: its batches, unsorted, then its end.
#[derive(Debug)]
pub(crate) enum Piece {
    /// Rows in the order the database returned them.
    Batch(RecordBatch),
    /// The chunk is complete (its rows counted and checked): this many rows.
    End(u64),
}

/// What a chunk read needs besides its range.
pub(crate) struct ChunkRead<'a> {
    /// The wrapped data query.
    pub sql: &'a str,
    /// The contract columns, in contract order.
    pub columns: &'a [ColumnRead],
    /// Bound parameters.
    pub binds: Binds,
    /// The table.
    pub table: Table,
    /// The rows also carry `recon_key` (the last of `columns`).
    pub keyed: bool,
    /// Rows per batch.
    pub batch_rows: usize,
}

/// Why a chunk read stopped.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The database or the connection failed.
    Database(sqlx::Error),
    /// A value breaks the contract (message names the column and row).
    Value(String),
    /// A broken invariant while decoding (message names the column and row).
    Internal(String),
    /// The writer stopped listening (it failed elsewhere).
    Closed,
}

struct Sink<'a> {
    builder: BatchBuilder,
    batch_rows: usize,
    tx: &'a mpsc::Sender<Result<Piece, ExportError>>,
    rows: u64,
}

impl Sink<'_> {
    async fn row(
        &mut self,
        fill: impl FnOnce(&mut BatchBuilder) -> Result<(), ValueError>,
    ) -> Result<(), ReadError> {
        let row = self.rows + 1;
        fill(&mut self.builder).map_err(|e| match e {
            ValueError::Invalid(m) => ReadError::Value(format!("row {row} of the chunk: {m}")),
            ValueError::Internal(m) => ReadError::Internal(format!("row {row} of the chunk: {m}")),
        })?;
        self.builder.end_row();
        self.rows += 1;
        if self.builder.rows() >= self.batch_rows {
            self.flush().await?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), ReadError> {
        if self.builder.rows() == 0 {
            return Ok(());
        }
        let batch = self.builder.finish().map_err(|e| match e {
            ValueError::Invalid(m) => ReadError::Value(m),
            ValueError::Internal(m) => ReadError::Internal(m),
        })?;
        self.tx.send(Ok(Piece::Batch(batch))).await.map_err(|_| ReadError::Closed)
    }
}
