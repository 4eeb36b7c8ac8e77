//! Decoders: which result column types fit which contract kinds, and how one MySQL or
//! SQLite row is read into the batch builder (PostgreSQL rows come by COPY: `pg_copy`).

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::mysql::{MySql, MySqlRow, MySqlTypeInfo};
use sqlx::postgres::{PgTypeInfo, Postgres};
use sqlx::sqlite::{Sqlite, SqliteRow};
use sqlx::{Decode, Row, Type, TypeInfo, ValueRef};

use super::zone::{from_naive, parse_sqlite_timestamp};
use crate::db::conn::batch::{BatchBuilder, ValueError};
use crate::snapshot::ColumnKind;

/// How one contract column is read from the result.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ColumnRead {
    /// Index in the result row.
    pub ordinal: usize,
    /// Contract kind.
    pub kind: ColumnKind,
    /// Decoder chosen from the result's column type.
    pub decoder: Decoder,
}

/// A decoder for one result column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decoder {
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

/// A column of a query result as the database describes it.
#[derive(Debug, Clone)]
pub(crate) struct ResultColumn {
    /// Column name.
    pub name: String,
    /// The database's type name.
    pub type_name: String,
    /// The decoder for each contract kind (Text, Int64, Int32, Timestamp), `None` = wrong type.
    decoders: [Option<Decoder>; 4],
}

impl ResultColumn {
    /// The decoder to read this column as `kind`, if its type fits.
    pub(crate) fn decoder(&self, kind: ColumnKind) -> Option<Decoder> {
        self.decoders[kind_index(kind)]
    }

    pub(super) fn mysql(name: &str, ty: &MySqlTypeInfo) -> Self {
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

    pub(super) fn postgres(name: &str, ty: &PgTypeInfo) -> Self {
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

    /// SQLite columns have no fixed type: every kind is decided per value.
    pub(super) fn sqlite(name: &str, type_name: &str) -> Self {
        ResultColumn {
            name: name.to_string(),
            type_name: type_name.to_string(),
            decoders: [Some(Decoder::Dynamic); 4],
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

/// Reads the contract columns of one row, `value` decoding each; errors name the column.
pub(super) fn fill_row(
    columns: &[ColumnRead],
    b: &mut BatchBuilder,
    mut value: impl FnMut(&ColumnRead, usize, &mut BatchBuilder) -> Result<(), ValueError>,
) -> Result<(), ValueError> {
    for (index, col) in columns.iter().enumerate() {
        value(col, index, b).map_err(|m| with_column(b, index, m))?;
    }
    Ok(())
}

pub(super) fn mysql_value(
    row: &MySqlRow,
    col: &ColumnRead,
    index: usize,
    offset: i32,
    b: &mut BatchBuilder,
) -> Result<(), ValueError> {
    let named = |e: sqlx::Error| e.to_string();
    // Unchecked: the decoder was chosen from this column's type when the query was
    // prepared, so the driver's per-value type check would only repeat it.
    {
        match col.decoder {
            Decoder::Null => push_null(b, index, col.kind),
            Decoder::Int => b.push_int(
                index,
                row.try_get_unchecked::<Option<i64>, _>(col.ordinal).map_err(named)?,
            ),
            Decoder::UnsignedInt => {
                let v = row.try_get_unchecked::<Option<u64>, _>(col.ordinal).map_err(named)?;
                let v = v
                    .map(|u| i64::try_from(u).map_err(|_| format!("value {u} does not fit Int64")))
                    .transpose()?;
                b.push_int(index, v)
            }
            Decoder::Text => b.push_text(
                index,
                row.try_get_unchecked::<Option<&str>, _>(col.ordinal).map_err(named)?,
            ),
            Decoder::Bytes => {
                let v = row.try_get_unchecked::<Option<&[u8]>, _>(col.ordinal).map_err(named)?;
                let v = v
                    .map(|bytes| {
                        std::str::from_utf8(bytes).map_err(|_| "is not valid UTF-8".to_string())
                    })
                    .transpose()?;
                b.push_text(index, v)
            }
            Decoder::NaiveTimestamp => {
                let v = row
                    .try_get_unchecked::<Option<NaiveDateTime>, _>(col.ordinal)
                    .map_err(named)?;
                b.push_timestamp(index, v.map(|t| from_naive(t, offset)))
            }
            Decoder::UtcTimestamp | Decoder::Dynamic => {
                Err(ValueError::Internal("unexpected decoder for MySQL".into()))
            }
        }
    }
}

pub(super) fn sqlite_value(
    row: &SqliteRow,
    col: &ColumnRead,
    index: usize,
    offset: i32,
    b: &mut BatchBuilder,
) -> Result<(), ValueError> {
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
        (ColumnKind::Int64 | ColumnKind::Int32, _) => Err(wrong("an integer").into()),
        (ColumnKind::Text, "TEXT") => {
            b.push_text(index, Some(<&str as Decode<Sqlite>>::decode(raw).map_err(decode_err)?))
        }
        (ColumnKind::Text, _) => Err(wrong("text").into()),
        (ColumnKind::Timestamp, "TEXT" | "DATETIME" | "DATE" | "TIME") => {
            let text = <&str as Decode<Sqlite>>::decode(raw).map_err(decode_err)?;
            let micros = parse_sqlite_timestamp(text, offset).ok_or_else(|| {
                format!("'{text}' is not a timestamp (use YYYY-MM-DD HH:MM:SS[.ffffff][±HH:MM])")
            })?;
            b.push_timestamp(index, Some(micros))
        }
        (ColumnKind::Timestamp, _) => Err(wrong("a timestamp as text").into()),
    }
}

fn push_null(b: &mut BatchBuilder, index: usize, kind: ColumnKind) -> Result<(), ValueError> {
    match kind {
        ColumnKind::Text => b.push_text(index, None),
        ColumnKind::Int64 | ColumnKind::Int32 => b.push_int(index, None),
        ColumnKind::Timestamp => b.push_timestamp(index, None),
    }
}

/// Prefixes the message with the column it is about.
fn with_column(b: &BatchBuilder, index: usize, error: ValueError) -> ValueError {
    let name = b.specs()[index].name;
    match error {
        ValueError::Invalid(message) => ValueError::Invalid(format!("column {name} {message}")),
        ValueError::Internal(message) => ValueError::Internal(format!("column {name}: {message}")),
    }
}
