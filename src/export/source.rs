//! One database connection of the exporter, whatever its family: connecting (password from
//! the environment, session time zone), transactions, and reading a wrapped source query
//! into contract-typed Arrow batches.
//!
//! Errors are plain strings already scrubbed of the password; the caller adds the source
//! and table. Timestamps leave this module as UTC microseconds: zone-less values
//! (MySQL DATETIME/TIMESTAMP, Postgres `timestamp`, SQLite text without an offset) are
//! read in the source's fixed offset, which is also the session time zone.

use std::str::FromStr;

use chrono::{DateTime, NaiveDateTime, Utc};
use datafusion::arrow::record_batch::RecordBatch;
use futures::TryStreamExt;
use sqlx::mysql::{MySql, MySqlConnectOptions, MySqlConnection, MySqlRow, MySqlTypeInfo};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgRow, PgTypeInfo, Postgres};
use sqlx::sqlite::{Sqlite, SqliteConnectOptions, SqliteConnection, SqliteRow, SqliteSynchronous};
use sqlx::{Column, Connection, Decode, Executor, Row, Statement, Type, TypeInfo, ValueRef};
use tokio::sync::mpsc;

use super::batch::BatchBuilder;
use super::dialect;
use crate::config::job::{format_offset, Driver};
use crate::snapshot::{ColumnKind, Table};
use crate::time::Micros;

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

/// Removes `password` and any `scheme://user:secret@` secret from a message.
pub fn scrub(message: &str, password: Option<&str>) -> String {
    let mut text = message.to_string();
    if let Some(pw) = password.filter(|p| !p.is_empty()) {
        text = text.replace(pw, "***");
        let encoded: String = url::form_urlencoded::byte_serialize(pw.as_bytes()).collect();
        text = text.replace(&encoded, "***");
    }
    scrub_userinfo(&text)
}

fn scrub_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        out.push_str(&rest[..at + 3]);
        rest = &rest[at + 3..];
        let end = rest.find(|c: char| c == '/' || c.is_whitespace()).unwrap_or(rest.len());
        let authority = &rest[..end];
        if let Some(userinfo_end) = authority.rfind('@') {
            let userinfo = &authority[..userinfo_end];
            match userinfo.split_once(':') {
                Some((user, _)) => {
                    out.push_str(user);
                    out.push_str(":***");
                }
                None => out.push_str(userinfo),
            }
            out.push_str(&authority[userinfo_end..]);
            rest = &rest[end..];
        }
    }
    out.push_str(rest);
    out
}

/// An open connection.
pub enum Conn {
    /// MySQL or MariaDB.
    MySql(MySqlConnection),
    /// PostgreSQL.
    Postgres(PgConnection),
    /// SQLite.
    Sqlite(SqliteConnection),
}

/// The four parameters of a chunk read: the source's lower bound and cut, then the range.
#[derive(Debug, Clone, Copy)]
pub struct Binds {
    /// `since - lookback`, UTC µs.
    pub lower: Micros,
    /// The cut, UTC µs.
    pub cut: Micros,
    /// Offset of the source, seconds east of UTC.
    pub offset_secs: i32,
}

/// How one contract column is read from the result.
#[derive(Debug, Clone, Copy)]
pub struct ColumnRead {
    /// Index in the result row.
    pub ordinal: usize,
    /// Contract kind.
    pub kind: ColumnKind,
    /// Decoder chosen from the result's column type.
    pub decoder: Decoder,
}

/// A decoder for one result column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoder {
    /// Signed integer of any width.
    Int,
    /// MySQL unsigned integer (checked to fit Int64).
    UnsignedInt,
    /// Text.
    Text,
    /// MySQL binary string holding UTF-8.
    Bytes,
    /// Zone-less timestamp, read in the source's offset.
    NaiveTimestamp,
    /// Timestamp with zone.
    UtcTimestamp,
    /// A column whose type is NULL: every value is NULL.
    Null,
    /// SQLite: the type is decided per value.
    Dynamic,
}

/// Opens a connection, with a timeout.
pub async fn connect(target: &Target, timeout: Micros) -> Result<Conn, String> {
    let limit = std::time::Duration::from_micros(timeout.max(1) as u64);
    match tokio::time::timeout(limit, connect_inner(target)).await {
        Ok(result) => result.map_err(|e| {
            format!("cannot connect to {}: {}", target.url, target.scrub(&e.to_string()))
        }),
        Err(_) => Err(format!(
            "cannot connect to {}: no answer within {}",
            target.url,
            crate::time::format_elapsed(limit)
        )),
    }
}

async fn connect_inner(target: &Target) -> Result<Conn, sqlx::Error> {
    let offset = format_offset(target.offset_secs);
    match target.driver {
        Driver::MySql => {
            let url = target.url.replacen("mariadb://", "mysql://", 1);
            let mut options = MySqlConnectOptions::from_str(&url)?.timezone(Some(offset));
            if let Some(pw) = &target.password {
                options = options.password(pw);
            }
            Ok(Conn::MySql(MySqlConnection::connect_with(&options).await?))
        }
        Driver::Postgres => {
            let mut options = PgConnectOptions::from_str(&target.url)?;
            if let Some(pw) = &target.password {
                options = options.password(pw);
            }
            let mut conn = PgConnection::connect_with(&options).await?;
            conn.execute(dialect::pg_set_time_zone(&offset).as_str()).await?;
            Ok(Conn::Postgres(conn))
        }
        Driver::Sqlite => {
            let mut options = SqliteConnectOptions::from_str(&target.url)?
                .read_only(target.read_only)
                .create_if_missing(!target.read_only)
                .row_buffer_size(1024)
                // 256 MiB of page cache keeps index pages in memory during reads and loads.
                .pragma("cache_size", "-262144");
            if !target.read_only {
                // The loader fills test and demo databases: one fsync at commit is enough.
                options = options.synchronous(SqliteSynchronous::Normal);
            }
            Ok(Conn::Sqlite(SqliteConnection::connect_with(&options).await?))
        }
    }
}

impl Conn {
    /// Runs a statement without parameters (text protocol), e.g. transaction control.
    pub async fn execute(&mut self, sql: &str) -> Result<(), sqlx::Error> {
        match self {
            Conn::MySql(c) => c.execute(sql).await.map(drop),
            Conn::Postgres(c) => c.execute(sql).await.map(drop),
            Conn::Sqlite(c) => c.execute(sql).await.map(drop),
        }
    }

    /// Runs a query returning one text value.
    pub async fn query_text(&mut self, sql: &str) -> Result<String, sqlx::Error> {
        match self {
            Conn::MySql(c) => sqlx::query_scalar(sql).fetch_one(c).await,
            Conn::Postgres(c) => sqlx::query_scalar(sql).fetch_one(c).await,
            Conn::Sqlite(c) => sqlx::query_scalar(sql).fetch_one(c).await,
        }
    }

    /// Closes the connection politely.
    pub async fn close(self) {
        let _ = match self {
            Conn::MySql(c) => c.close().await,
            Conn::Postgres(c) => c.close().await,
            Conn::Sqlite(c) => c.close().await,
        };
    }

    /// The result columns (name, type name, decoder per kind) of a statement, by preparing it.
    pub async fn columns(&mut self, sql: &str) -> Result<Vec<ResultColumn>, sqlx::Error> {
        Ok(match self {
            Conn::MySql(c) => c
                .prepare(sql)
                .await?
                .columns()
                .iter()
                .map(|col| ResultColumn::mysql(col.name(), col.type_info()))
                .collect(),
            Conn::Postgres(c) => c
                .prepare(sql)
                .await?
                .columns()
                .iter()
                .map(|col| ResultColumn::postgres(col.name(), col.type_info()))
                .collect(),
            Conn::Sqlite(c) => c
                .prepare(sql)
                .await?
                .columns()
                .iter()
                .map(|col| ResultColumn {
                    name: col.name().to_string(),
                    type_name: col.type_info().name().to_string(),
                    decoders: [Some(Decoder::Dynamic); 4],
                })
                .collect(),
        })
    }

    /// Runs the plan query: `(count, non-null order_ids, min, max)`.
    pub async fn plan(
        &mut self,
        sql: &str,
        binds: Binds,
    ) -> Result<(i64, i64, Option<i64>, Option<i64>), sqlx::Error> {
        type Plan = (i64, i64, Option<i64>, Option<i64>);
        let (lower_naive, cut_naive) =
            (naive(binds.lower, binds.offset_secs), naive(binds.cut, binds.offset_secs));
        match self {
            Conn::MySql(c) => {
                sqlx::query_as::<_, Plan>(sql).bind(lower_naive).bind(cut_naive).fetch_one(c).await
            }
            Conn::Postgres(c) => {
                sqlx::query_as::<_, Plan>(sql)
                    .bind(utc(binds.lower))
                    .bind(utc(binds.cut))
                    .fetch_one(c)
                    .await
            }
            Conn::Sqlite(c) => {
                sqlx::query_as::<_, Plan>(sql)
                    .bind(sqlite_text(lower_naive))
                    .bind(sqlite_text(cut_naive))
                    .fetch_one(c)
                    .await
            }
        }
    }

    /// Runs the count query of one range.
    pub async fn count(
        &mut self,
        sql: &str,
        binds: Binds,
        lo: i64,
        hi: i64,
    ) -> Result<i64, sqlx::Error> {
        let (lower_naive, cut_naive) =
            (naive(binds.lower, binds.offset_secs), naive(binds.cut, binds.offset_secs));
        match self {
            Conn::MySql(c) => {
                sqlx::query_scalar(sql)
                    .bind(lower_naive)
                    .bind(cut_naive)
                    .bind(lo)
                    .bind(hi)
                    .fetch_one(c)
                    .await
            }
            Conn::Postgres(c) => {
                sqlx::query_scalar(sql)
                    .bind(utc(binds.lower))
                    .bind(utc(binds.cut))
                    .bind(lo)
                    .bind(hi)
                    .fetch_one(c)
                    .await
            }
            Conn::Sqlite(c) => {
                sqlx::query_scalar(sql)
                    .bind(sqlite_text(lower_naive))
                    .bind(sqlite_text(cut_naive))
                    .bind(lo)
                    .bind(hi)
                    .fetch_one(c)
                    .await
            }
        }
    }

    /// Streams the rows of one range into batches of `batch_rows`, sent on `tx`; returns the
    /// number of rows. `Err` is a scrubbed-later message (database error or bad value).
    pub async fn read(
        &mut self,
        read: &ChunkRead<'_>,
        lo: i64,
        hi: i64,
        tx: &mpsc::Sender<Result<RecordBatch, String>>,
    ) -> Result<u64, ReadError> {
        let binds = read.binds;
        let (lower_naive, cut_naive) =
            (naive(binds.lower, binds.offset_secs), naive(binds.cut, binds.offset_secs));
        let mut sink = Sink {
            builder: BatchBuilder::new(read.table, read.batch_rows),
            batch_rows: read.batch_rows,
            tx,
            rows: 0,
        };
        match self {
            Conn::MySql(c) => {
                let mut rows = sqlx::query(read.sql)
                    .bind(lower_naive)
                    .bind(cut_naive)
                    .bind(lo)
                    .bind(hi)
                    .fetch(c);
                while let Some(row) = rows.try_next().await.map_err(ReadError::Database)? {
                    sink.row(|b| mysql_row(&row, read.columns, binds.offset_secs, b)).await?;
                }
            }
            Conn::Postgres(c) => {
                let mut rows = sqlx::query(read.sql)
                    .bind(utc(binds.lower))
                    .bind(utc(binds.cut))
                    .bind(lo)
                    .bind(hi)
                    .fetch(c);
                while let Some(row) = rows.try_next().await.map_err(ReadError::Database)? {
                    sink.row(|b| pg_row(&row, read.columns, binds.offset_secs, b)).await?;
                }
            }
            Conn::Sqlite(c) => {
                let mut rows = sqlx::query(read.sql)
                    .bind(sqlite_text(lower_naive))
                    .bind(sqlite_text(cut_naive))
                    .bind(lo)
                    .bind(hi)
                    .fetch(c);
                while let Some(row) = rows.try_next().await.map_err(ReadError::Database)? {
                    sink.row(|b| sqlite_row(&row, read.columns, binds.offset_secs, b)).await?;
                }
            }
        }
        sink.flush().await?;
        Ok(sink.rows)
    }
}

/// What a chunk read needs besides its range.
pub struct ChunkRead<'a> {
    /// The wrapped data query.
    pub sql: &'a str,
    /// The contract columns, in contract order.
    pub columns: &'a [ColumnRead],
    /// Bound parameters.
    pub binds: Binds,
    /// The table.
    pub table: Table,
    /// Rows per batch.
    pub batch_rows: usize,
}

/// Why a chunk read stopped.
#[derive(Debug)]
pub enum ReadError {
    /// The database or the connection failed.
    Database(sqlx::Error),
    /// A value breaks the contract (message names the column and row).
    Value(String),
    /// The writer stopped listening (it failed elsewhere).
    Closed,
}

struct Sink<'a> {
    builder: BatchBuilder,
    batch_rows: usize,
    tx: &'a mpsc::Sender<Result<RecordBatch, String>>,
    rows: u64,
}

impl Sink<'_> {
    async fn row(
        &mut self,
        fill: impl FnOnce(&mut BatchBuilder) -> Result<(), String>,
    ) -> Result<(), ReadError> {
        fill(&mut self.builder)
            .map_err(|m| ReadError::Value(format!("row {} of the chunk: {m}", self.rows + 1)))?;
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
        let batch = self.builder.finish().map_err(ReadError::Value)?;
        self.tx.send(Ok(batch)).await.map_err(|_| ReadError::Closed)
    }
}

/// A column of a query result as the database describes it.
#[derive(Debug, Clone)]
pub struct ResultColumn {
    /// Column name.
    pub name: String,
    /// The database's type name.
    pub type_name: String,
    /// The decoder for each contract kind (Text, Int64, Int32, Timestamp), `None` = wrong type.
    decoders: [Option<Decoder>; 4],
}

impl ResultColumn {
    /// The decoder to read this column as `kind`, if its type fits.
    pub fn decoder(&self, kind: ColumnKind) -> Option<Decoder> {
        self.decoders[kind_index(kind)]
    }

    fn mysql(name: &str, ty: &MySqlTypeInfo) -> Self {
        let null = ty.name() == "NULL";
        let pick = |kind: ColumnKind| -> Option<Decoder> {
            if null {
                return Some(Decoder::Null);
            }
            match kind {
                ColumnKind::Int64 | ColumnKind::Int32 if <i64 as Type<MySql>>::compatible(ty) => {
                    Some(Decoder::Int)
                }
                ColumnKind::Int64 | ColumnKind::Int32 if <u64 as Type<MySql>>::compatible(ty) => {
                    Some(Decoder::UnsignedInt)
                }
                ColumnKind::Text if <String as Type<MySql>>::compatible(ty) => Some(Decoder::Text),
                ColumnKind::Text
                    if <Vec<u8> as Type<MySql>>::compatible(ty) && !is_mysql_blob_numeric(ty) =>
                {
                    Some(Decoder::Bytes)
                }
                ColumnKind::Timestamp if <NaiveDateTime as Type<MySql>>::compatible(ty) => {
                    Some(Decoder::NaiveTimestamp)
                }
                _ => None,
            }
        };
        ResultColumn {
            name: name.to_string(),
            type_name: ty.name().to_string(),
            decoders: all_kinds(pick),
        }
    }

    fn postgres(name: &str, ty: &PgTypeInfo) -> Self {
        let pick = |kind: ColumnKind| -> Option<Decoder> {
            match kind {
                ColumnKind::Int64 | ColumnKind::Int32
                    if <i64 as Type<Postgres>>::compatible(ty)
                        || <i32 as Type<Postgres>>::compatible(ty)
                        || <i16 as Type<Postgres>>::compatible(ty) =>
                {
                    Some(Decoder::Int)
                }
                ColumnKind::Text if <String as Type<Postgres>>::compatible(ty) => {
                    Some(Decoder::Text)
                }
                ColumnKind::Timestamp if <DateTime<Utc> as Type<Postgres>>::compatible(ty) => {
                    Some(Decoder::UtcTimestamp)
                }
                ColumnKind::Timestamp if <NaiveDateTime as Type<Postgres>>::compatible(ty) => {
                    Some(Decoder::NaiveTimestamp)
                }
                _ => None,
            }
        };
        ResultColumn {
            name: name.to_string(),
            type_name: ty.name().to_string(),
            decoders: all_kinds(pick),
        }
    }
}

fn is_mysql_blob_numeric(ty: &MySqlTypeInfo) -> bool {
    // BIT and the like also decode as bytes; only string types may be read as text.
    !matches!(
        ty.name(),
        "BINARY"
            | "VARBINARY"
            | "BLOB"
            | "TINYBLOB"
            | "MEDIUMBLOB"
            | "LONGBLOB"
            | "CHAR"
            | "VARCHAR"
            | "TEXT"
    )
}

fn kind_index(kind: ColumnKind) -> usize {
    match kind {
        ColumnKind::Text => 0,
        ColumnKind::Int64 => 1,
        ColumnKind::Int32 => 2,
        ColumnKind::Timestamp => 3,
    }
}

fn all_kinds(pick: impl Fn(ColumnKind) -> Option<Decoder>) -> [Option<Decoder>; 4] {
    [
        pick(ColumnKind::Text),
        pick(ColumnKind::Int64),
        pick(ColumnKind::Int32),
        pick(ColumnKind::Timestamp),
    ]
}

fn mysql_row(
    row: &MySqlRow,
    columns: &[ColumnRead],
    offset: i32,
    b: &mut BatchBuilder,
) -> Result<(), String> {
    for (index, col) in columns.iter().enumerate() {
        mysql_value(row, col, index, offset, b).map_err(|m| with_column(b, index, m))?;
    }
    Ok(())
}

fn mysql_value(
    row: &MySqlRow,
    col: &ColumnRead,
    index: usize,
    offset: i32,
    b: &mut BatchBuilder,
) -> Result<(), String> {
    let named = |e: sqlx::Error| e.to_string();
    {
        match col.decoder {
            Decoder::Null => push_null(b, index, col.kind),
            Decoder::Int => {
                b.push_int(index, row.try_get::<Option<i64>, _>(col.ordinal).map_err(named)?)
            }
            Decoder::UnsignedInt => {
                let v = row.try_get::<Option<u64>, _>(col.ordinal).map_err(named)?;
                let v = v
                    .map(|u| i64::try_from(u).map_err(|_| format!("value {u} does not fit Int64")))
                    .transpose()?;
                b.push_int(index, v)
            }
            Decoder::Text => {
                b.push_text(index, row.try_get::<Option<&str>, _>(col.ordinal).map_err(named)?)
            }
            Decoder::Bytes => {
                let v = row.try_get::<Option<&[u8]>, _>(col.ordinal).map_err(named)?;
                let v = v
                    .map(|bytes| {
                        std::str::from_utf8(bytes).map_err(|_| "is not valid UTF-8".to_string())
                    })
                    .transpose()?;
                b.push_text(index, v)
            }
            Decoder::NaiveTimestamp => {
                let v = row.try_get::<Option<NaiveDateTime>, _>(col.ordinal).map_err(named)?;
                b.push_timestamp(index, v.map(|t| from_naive(t, offset)))
            }
            Decoder::UtcTimestamp | Decoder::Dynamic => {
                Err("internal: unexpected decoder for MySQL".into())
            }
        }
    }
}

fn pg_row(
    row: &PgRow,
    columns: &[ColumnRead],
    offset: i32,
    b: &mut BatchBuilder,
) -> Result<(), String> {
    for (index, col) in columns.iter().enumerate() {
        pg_value(row, col, index, offset, b).map_err(|m| with_column(b, index, m))?;
    }
    Ok(())
}

fn pg_value(
    row: &PgRow,
    col: &ColumnRead,
    index: usize,
    offset: i32,
    b: &mut BatchBuilder,
) -> Result<(), String> {
    let named = |e: sqlx::Error| e.to_string();
    {
        match col.decoder {
            Decoder::Int => {
                let ty = row.columns()[col.ordinal].type_info().name();
                let v = match ty {
                    "INT2" => {
                        row.try_get::<Option<i16>, _>(col.ordinal).map_err(named)?.map(i64::from)
                    }
                    "INT4" => {
                        row.try_get::<Option<i32>, _>(col.ordinal).map_err(named)?.map(i64::from)
                    }
                    _ => row.try_get::<Option<i64>, _>(col.ordinal).map_err(named)?,
                };
                b.push_int(index, v)
            }
            Decoder::Text => {
                b.push_text(index, row.try_get::<Option<&str>, _>(col.ordinal).map_err(named)?)
            }
            Decoder::UtcTimestamp => {
                let v = row.try_get::<Option<DateTime<Utc>>, _>(col.ordinal).map_err(named)?;
                b.push_timestamp(index, v.map(|t| t.timestamp_micros()))
            }
            Decoder::NaiveTimestamp => {
                let v = row.try_get::<Option<NaiveDateTime>, _>(col.ordinal).map_err(named)?;
                b.push_timestamp(index, v.map(|t| from_naive(t, offset)))
            }
            Decoder::Null => push_null(b, index, col.kind),
            Decoder::UnsignedInt | Decoder::Bytes | Decoder::Dynamic => {
                Err("internal: unexpected decoder for Postgres".into())
            }
        }
    }
}

fn sqlite_row(
    row: &SqliteRow,
    columns: &[ColumnRead],
    offset: i32,
    b: &mut BatchBuilder,
) -> Result<(), String> {
    for (index, col) in columns.iter().enumerate() {
        sqlite_value(row, col, index, offset, b).map_err(|m| with_column(b, index, m))?;
    }
    Ok(())
}

fn sqlite_value(
    row: &SqliteRow,
    col: &ColumnRead,
    index: usize,
    offset: i32,
    b: &mut BatchBuilder,
) -> Result<(), String> {
    let raw = row.try_get_raw(col.ordinal).map_err(|e| e.to_string())?;
    if raw.is_null() {
        return push_null(b, index, col.kind);
    }
    let type_info = raw.type_info();
    let type_name = type_info.name();
    let wrong = |expected: &str| format!("holds a value of type {type_name}, expected {expected}");
    let decode_err = |e: sqlx::error::BoxDynError| e.to_string();
    match (col.kind, type_name) {
        (ColumnKind::Int64 | ColumnKind::Int32, "INTEGER" | "BIGINT" | "INT8" | "BOOLEAN") => {
            b.push_int(index, Some(<i64 as Decode<Sqlite>>::decode(raw).map_err(decode_err)?))
        }
        (ColumnKind::Int64 | ColumnKind::Int32, _) => Err(wrong("an integer")),
        (ColumnKind::Text, "TEXT") => {
            b.push_text(index, Some(<&str as Decode<Sqlite>>::decode(raw).map_err(decode_err)?))
        }
        (ColumnKind::Text, _) => Err(wrong("text")),
        (ColumnKind::Timestamp, "TEXT" | "DATETIME" | "DATE" | "TIME") => {
            let text = <&str as Decode<Sqlite>>::decode(raw).map_err(decode_err)?;
            let micros = parse_sqlite_timestamp(text, offset).ok_or_else(|| {
                format!("'{text}' is not a timestamp (use YYYY-MM-DD HH:MM:SS[.ffffff][±HH:MM])")
            })?;
            b.push_timestamp(index, Some(micros))
        }
        (ColumnKind::Timestamp, _) => Err(wrong("a timestamp as text")),
    }
}

fn push_null(b: &mut BatchBuilder, index: usize, kind: ColumnKind) -> Result<(), String> {
    match kind {
        ColumnKind::Text => b.push_text(index, None),
        ColumnKind::Int64 | ColumnKind::Int32 => b.push_int(index, None),
        ColumnKind::Timestamp => b.push_timestamp(index, None),
    }
}

fn with_column(b: &BatchBuilder, index: usize, message: String) -> String {
    format!("column {} {message}", b.specs()[index].name)
}

/// SQLite text timestamps: with an offset or `Z` they are instants; without, local to `offset`.
pub fn parse_sqlite_timestamp(text: &str, offset: i32) -> Option<Micros> {
    let text = text.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.timestamp_micros());
    }
    for format in ["%Y-%m-%d %H:%M:%S%.f%:z", "%Y-%m-%d %H:%M:%S%.f%#z", "%Y-%m-%dT%H:%M:%S%.f%#z"]
    {
        if let Ok(t) = DateTime::parse_from_str(text, format) {
            return Some(t.timestamp_micros());
        }
    }
    let zoneless = text.strip_suffix('Z').map(|t| (t, 0)).unwrap_or((text, offset));
    for format in
        ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M"]
    {
        if let Ok(t) = NaiveDateTime::parse_from_str(zoneless.0, format) {
            return Some(from_naive(t, zoneless.1));
        }
    }
    None
}

/// A zone-less value read in `offset` → UTC µs.
pub fn from_naive(t: NaiveDateTime, offset: i32) -> Micros {
    t.and_utc().timestamp_micros() - i64::from(offset) * 1_000_000
}

/// UTC µs → the zone-less wall time in `offset`.
pub fn naive(micros: Micros, offset: i32) -> NaiveDateTime {
    let shifted = micros + i64::from(offset) * 1_000_000;
    DateTime::<Utc>::from_timestamp_micros(shifted).unwrap_or_default().naive_utc()
}

/// UTC µs → an instant.
pub fn utc(micros: Micros) -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp_micros(micros).unwrap_or_default()
}

/// The SQLite text form of a wall time: fixed six fraction digits, so text comparison
/// orders it correctly against stored values with or without a fraction.
pub fn sqlite_text(t: NaiveDateTime) -> String {
    t.format("%Y-%m-%d %H:%M:%S%.6f").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_scrubbed() {
        let s = scrub("failed mysql://u:p%40ss@h/db with p@ss", Some("p@ss"));
        assert!(!s.contains("p@ss") && !s.contains("p%40ss"), "{s}");
        assert_eq!(
            scrub_userinfo("x postgres://u:secret@h:5432/db y"),
            "x postgres://u:***@h:5432/db y"
        );
        assert_eq!(scrub_userinfo("sqlite:///tmp/a.db"), "sqlite:///tmp/a.db");
    }

    #[test]
    fn sqlite_timestamps_read_in_the_source_offset() {
        let utc_noon = parse_sqlite_timestamp("2026-11-29 12:00:00Z", 0).unwrap();
        assert_eq!(parse_sqlite_timestamp("2026-11-29 20:00:00.000000", 8 * 3600), Some(utc_noon));
        assert_eq!(parse_sqlite_timestamp("2026-11-29T20:00:00+08:00", 0), Some(utc_noon));
        assert_eq!(parse_sqlite_timestamp("2026-11-29 12:00:00.000001", 0), Some(utc_noon + 1));
        assert_eq!(sqlite_text(naive(utc_noon, 8 * 3600)), "2026-11-29 20:00:00.000000");
    }
}
