//! What differs between the three database families, written once per family: how a
//! bound instant is encoded, how a result column is described, how a row is decoded.

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::mysql::{MySql, MySqlRow};
use sqlx::postgres::{PgRow, Postgres};
use sqlx::sqlite::{Sqlite, SqliteRow};
use sqlx::TypeInfo;

use super::decode::{self, ColumnRead, ResultColumn};
use super::zone::{naive, sqlite_text, utc};
use crate::db::conn::batch::{BatchBuilder, ValueError};
use crate::time::Micros;

/// One database family as the exporter reads it.
pub(super) trait Family: sqlx::Database {
    /// The bound form of an instant (the lower bound and the cut).
    type Bound;
    /// An instant (UTC µs) as bound for a source in `offset`: a wall time where the
    /// family compares zone-less values, an instant where it has time zones.
    fn bound(micros: Micros, offset: i32) -> Self::Bound;
    /// A result column with the decoder of each contract kind its type fits.
    fn describe(name: &str, ty: &Self::TypeInfo) -> ResultColumn;
    /// Reads the contract columns of one result row into the builder.
    fn fill(
        row: &Self::Row,
        columns: &[ColumnRead],
        offset: i32,
        b: &mut BatchBuilder,
    ) -> Result<(), ValueError>;
}

impl Family for MySql {
    type Bound = NaiveDateTime;
    fn bound(micros: Micros, offset: i32) -> NaiveDateTime {
        naive(micros, offset)
    }
    fn describe(name: &str, ty: &Self::TypeInfo) -> ResultColumn {
        ResultColumn::mysql(name, ty)
    }
    fn fill(
        row: &MySqlRow,
        columns: &[ColumnRead],
        offset: i32,
        b: &mut BatchBuilder,
    ) -> Result<(), ValueError> {
        decode::fill_row(columns, b, |col, index, b| {
            decode::mysql_value(row, col, index, offset, b)
        })
    }
}

impl Family for Postgres {
    type Bound = DateTime<Utc>;
    fn bound(micros: Micros, _offset: i32) -> DateTime<Utc> {
        utc(micros)
    }
    fn describe(name: &str, ty: &Self::TypeInfo) -> ResultColumn {
        ResultColumn::postgres(name, ty)
    }
    fn fill(
        _row: &PgRow,
        _columns: &[ColumnRead],
        _offset: i32,
        _b: &mut BatchBuilder,
    ) -> Result<(), ValueError> {
        // PostgreSQL rows never come through the driver: they are read with binary COPY
        // (`pg_copy`), whose decoder fills the builder straight from the wire.
        Err(ValueError::Internal("PostgreSQL is read with COPY, not row by row".into()))
    }
}

impl Family for Sqlite {
    type Bound = String;
    fn bound(micros: Micros, offset: i32) -> String {
        sqlite_text(naive(micros, offset))
    }
    fn describe(name: &str, ty: &Self::TypeInfo) -> ResultColumn {
        ResultColumn::sqlite(name, ty.name())
    }
    fn fill(
        row: &SqliteRow,
        columns: &[ColumnRead],
        offset: i32,
        b: &mut BatchBuilder,
    ) -> Result<(), ValueError> {
        decode::fill_row(columns, b, |col, index, b| {
            decode::sqlite_value(row, col, index, offset, b)
        })
    }
}
