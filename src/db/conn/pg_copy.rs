//! PostgreSQL chunks read with `COPY (query) TO STDOUT (FORMAT binary)`: the server's
//! fastest way out (what `psql \copy` uses), decoded straight from the wire into the batch
//! builder instead of through one driver row object per row.
//!
//! COPY takes no bound parameters, so the chunk's four values are inlined as typed
//! literals ([`super::inline`]) with the same types the row path binds: the bounds as
//! `timestamptz` (the session time zone is the source's offset, so zone-less columns
//! compare exactly as with a bound instant) and the range as `int8`. The result columns
//! and their decoders are those the planner found by preparing the same query.
//!
//! The binary format: a 19-byte header (signature, flags, extension length, extension),
//! then per row a 16-bit field count and per field a 32-bit length (-1 = NULL) and the
//! value in the type's send format; a field count of -1 ends the data. Values:
//! big-endian integers of 2, 4 or 8 bytes, text as UTF-8 bytes (client_encoding), and
//! timestamps as 64-bit microseconds since 2000-01-01 (±infinity at the extremes).

use futures::TryStreamExt;
use sqlx::postgres::PgConnection;

use super::decode::{fill_row, ColumnRead, Decoder};
use super::inline::inline_pg_parameters;
use super::zone::utc;
use super::{Binds, ReadError, Sink};
use crate::db::conn::batch::{BatchBuilder, ValueError};

const SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0";
/// Signature, flags, extension length.
const HEADER: usize = 19;
/// 2000-01-01T00:00:00Z in Unix microseconds.
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// The COPY statement of one chunk: `data_sql` with `$1..$4` inlined.
pub(super) fn copy_statement(
    data_sql: &str,
    binds: Binds,
    lo: i64,
    hi: i64,
) -> Result<String, String> {
    let instant =
        |micros| format!("('{}'::timestamptz)", utc(micros).format("%Y-%m-%d %H:%M:%S%.6f+00"));
    let values = [
        instant(binds.lower),
        instant(binds.cut),
        format!("('{lo}'::int8)"),
        format!("('{hi}'::int8)"),
    ];
    let query = inline_pg_parameters(data_sql, &values)?;
    // The newline before ')' ends a trailing `-- comment` of the query.
    Ok(format!("COPY (\n{query}\n) TO STDOUT (FORMAT binary)"))
}

/// Streams the rows of `statement` into `sink`.
pub(super) async fn read(
    conn: &mut PgConnection,
    statement: &str,
    columns: &[ColumnRead],
    offset: i32,
    sink: &mut Sink<'_>,
) -> Result<(), ReadError> {
    let mut stream = conn.copy_out_raw(statement).await.map_err(ReadError::Database)?;
    let mut rows = CopyRows::default();
    // Bytes of a row split over messages (PostgreSQL sends one row a message, so rarely).
    let mut pending: Vec<u8> = Vec::new();
    while let Some(message) = stream.try_next().await.map_err(ReadError::Database)? {
        let carried = !pending.is_empty();
        if carried {
            pending.extend_from_slice(&message);
        }
        let data: &[u8] = if carried { &pending } else { &message };
        let mut at = 0;
        while let Some(step) = rows.next(&data[at..]).map_err(ReadError::Internal)? {
            if let Step::Row(_) = step {
                let row = &data[at..];
                sink.row(|b| rows.fill(row, columns, offset, b)).await?;
            }
            at += step.len();
        }
        if carried {
            pending.drain(..at);
        } else {
            pending.extend_from_slice(&message[at..]);
        }
    }
    if !rows.ended || !pending.is_empty() {
        return Err(ReadError::Internal("the COPY data ended inside a row".into()));
    }
    Ok(())
}

/// The reader's place in the binary COPY data, and the fields of the last row.
#[derive(Default)]
struct CopyRows {
    header: bool,
    ended: bool,
    /// Per result column of the last row: `(start, length)` in the row's bytes, or NULL.
    fields: Vec<Option<(usize, usize)>>,
}

/// One complete item at the start of the data, with its length in bytes.
enum Step {
    Header(usize),
    Row(usize),
    End(usize),
}

impl Step {
    fn len(&self) -> usize {
        match *self {
            Step::Header(n) | Step::Row(n) | Step::End(n) => n,
        }
    }
}

impl CopyRows {
    /// The next complete item of `data`, `None` when more bytes are needed.
    fn next(&mut self, data: &[u8]) -> Result<Option<Step>, String> {
        if self.ended {
            return match data.is_empty() {
                true => Ok(None),
                false => Err("bytes after the end of the COPY data".into()),
            };
        }
        if !self.header {
            if data.len() < HEADER {
                return Ok(None);
            }
            if &data[..SIGNATURE.len()] != SIGNATURE {
                return Err("the COPY data does not start with the binary signature".into());
            }
            let extension = be_u32(&data[15..19]) as usize;
            if data.len() < HEADER + extension {
                return Ok(None);
            }
            self.header = true;
            return Ok(Some(Step::Header(HEADER + extension)));
        }
        let Some(count) = data.get(..2).map(|b| i16::from_be_bytes([b[0], b[1]])) else {
            return Ok(None);
        };
        if count == -1 {
            self.ended = true;
            return Ok(Some(Step::End(2)));
        }
        self.fields.clear();
        let mut at = 2;
        for _ in 0..count.max(0) {
            let Some(length) = data.get(at..at + 4).map(be_u32) else { return Ok(None) };
            at += 4;
            if length == u32::MAX {
                self.fields.push(None);
                continue;
            }
            let end = at + length as usize;
            if end > data.len() {
                return Ok(None);
            }
            self.fields.push(Some((at, length as usize)));
            at = end;
        }
        Ok(Some(Step::Row(at)))
    }

    /// Reads the contract columns of the row at the start of `row` into the builder.
    fn fill(
        &self,
        row: &[u8],
        columns: &[ColumnRead],
        offset: i32,
        b: &mut BatchBuilder,
    ) -> Result<(), ValueError> {
        fill_row(columns, b, |col, index, b| {
            let field = self.fields.get(col.ordinal).ok_or_else(|| {
                ValueError::Internal(format!("the row has {} fields", self.fields.len()))
            })?;
            let value = field.map(|(start, length)| &row[start..start + length]);
            push(value, col.decoder, offset, index, b)
        })
    }
}

fn push(
    value: Option<&[u8]>,
    decoder: Decoder,
    offset: i32,
    index: usize,
    b: &mut BatchBuilder,
) -> Result<(), ValueError> {
    match decoder {
        Decoder::Int => b.push_int(index, value.map(integer).transpose()?),
        Decoder::Text => {
            let text = value
                .map(|v| std::str::from_utf8(v).map_err(|_| "is not valid UTF-8".to_string()))
                .transpose()?;
            b.push_text(index, text)
        }
        Decoder::UtcTimestamp => b.push_timestamp(index, value.map(|v| instant(v, 0)).transpose()?),
        Decoder::NaiveTimestamp => {
            b.push_timestamp(index, value.map(|v| instant(v, offset)).transpose()?)
        }
        Decoder::Null | Decoder::UnsignedInt | Decoder::Bytes | Decoder::Dynamic => {
            Err(ValueError::Internal(format!("unexpected decoder {decoder:?} for PostgreSQL")))
        }
    }
}

fn integer(v: &[u8]) -> Result<i64, ValueError> {
    match *v {
        [a, b] => Ok(i64::from(i16::from_be_bytes([a, b]))),
        [a, b, c, d] => Ok(i64::from(i32::from_be_bytes([a, b, c, d]))),
        _ => v
            .try_into()
            .map(i64::from_be_bytes)
            .map_err(|_| ValueError::Internal(format!("an integer of {} bytes", v.len()))),
    }
}

/// A binary timestamp (µs since 2000-01-01, a wall time in `offset`) → UTC µs.
fn instant(v: &[u8], offset: i32) -> Result<i64, ValueError> {
    let raw = v
        .try_into()
        .map(i64::from_be_bytes)
        .map_err(|_| ValueError::Internal(format!("a timestamp of {} bytes", v.len())))?;
    if raw == i64::MAX || raw == i64::MIN {
        return Err(ValueError::Invalid("is infinity; the contract needs a finite instant".into()));
    }
    raw.checked_add(PG_EPOCH_MICROS)
        .and_then(|t| t.checked_sub(i64::from(offset) * 1_000_000))
        .ok_or_else(|| ValueError::Invalid(format!("timestamp {raw} is out of range")))
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{ColumnKind, Table};

    fn header() -> Vec<u8> {
        let mut h = SIGNATURE.to_vec();
        h.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
        h
    }

    fn row(fields: &[Option<&[u8]>]) -> Vec<u8> {
        let mut r = (fields.len() as i16).to_be_bytes().to_vec();
        for f in fields {
            match f {
                None => r.extend_from_slice(&(-1i32).to_be_bytes()),
                Some(v) => {
                    r.extend_from_slice(&(v.len() as i32).to_be_bytes());
                    r.extend_from_slice(v);
                }
            }
        }
        r
    }

    #[test]
    fn the_statement_inlines_typed_literals() {
        let binds = Binds { lower: 0, cut: 1_500_000, offset_secs: 8 * 3600 };
        let sql = "SELECT * FROM (\nSELECT * FROM t WHERE a > $1 AND a <= $2\n) AS recon_src WHERE recon_src.order_id BETWEEN $3 AND $4";
        let copy = copy_statement(sql, binds, -5, 9).unwrap();
        assert!(copy.starts_with("COPY (\nSELECT * FROM (\n"), "{copy}");
        assert!(copy.contains("a > ('1970-01-01 00:00:00.000000+00'::timestamptz)"), "{copy}");
        assert!(copy.contains("a <= ('1970-01-01 00:00:01.500000+00'::timestamptz)"), "{copy}");
        assert!(copy.contains("BETWEEN ('-5'::int8) AND ('9'::int8)"), "{copy}");
        assert!(copy.ends_with("\n) TO STDOUT (FORMAT binary)"), "{copy}");
    }

    #[test]
    fn rows_split_anywhere_decode_the_same() {
        use datafusion::arrow::util::pretty::pretty_format_batches;
        let mut data = header();
        let ts = |micros: i64| (micros - PG_EPOCH_MICROS).to_be_bytes();
        // Result columns: status, order_id, an unread column, changed_at.
        let (t1, t2) = (ts(3_600_000_000), ts(7_200_000_000));
        data.extend(row(&[Some(b"PAID"), Some(&7i64.to_be_bytes()), None, Some(&t1)]));
        data.extend(row(&[Some(b"SHIPPED"), Some(&8i32.to_be_bytes()), Some(b"x"), Some(&t2)]));
        data.extend_from_slice(&(-1i16).to_be_bytes());
        // status_history: order_id, status, changed_at.
        let columns = [
            ColumnRead { ordinal: 1, kind: ColumnKind::Int64, decoder: Decoder::Int },
            ColumnRead { ordinal: 0, kind: ColumnKind::Text, decoder: Decoder::Text },
            ColumnRead { ordinal: 3, kind: ColumnKind::Timestamp, decoder: Decoder::UtcTimestamp },
        ];
        let mut tables = Vec::new();
        for split in 0..data.len() {
            let mut rows = CopyRows::default();
            let mut b = BatchBuilder::new(Table::StatusHistory, false, 2);
            let mut pending = Vec::new();
            for part in [&data[..split], &data[split..]] {
                pending.extend_from_slice(part);
                let mut at = 0;
                while let Some(step) = rows.next(&pending[at..]).unwrap() {
                    if let Step::Row(_) = step {
                        rows.fill(&pending[at..], &columns, 0, &mut b).unwrap();
                        b.end_row();
                    }
                    at += step.len();
                }
                pending.drain(..at);
            }
            assert!(rows.ended && pending.is_empty(), "split at {split}");
            let batch = b.finish().unwrap();
            tables.push(pretty_format_batches(&[batch]).unwrap().to_string());
        }
        assert!(
            tables[0].contains("| 7        | PAID    | 1970-01-01T01:00:00Z |"),
            "{}",
            tables[0]
        );
        assert!(
            tables[0].contains("| 8        | SHIPPED | 1970-01-01T02:00:00Z |"),
            "{}",
            tables[0]
        );
        assert!(tables.iter().all(|t| t == &tables[0]));
    }

    #[test]
    fn values_decode_by_their_send_format() {
        assert_eq!(integer(&(-3i16).to_be_bytes()).unwrap(), -3);
        assert_eq!(integer(&(1i64 << 40).to_be_bytes()).unwrap(), 1 << 40);
        assert!(integer(&[1, 2, 3]).is_err());
        let noon_utc = 43_200_000_000i64;
        let wall = (noon_utc + 8 * 3_600_000_000 - PG_EPOCH_MICROS).to_be_bytes();
        assert_eq!(instant(&wall, 8 * 3600).unwrap(), noon_utc);
        let infinity = instant(&i64::MAX.to_be_bytes(), 0).unwrap_err();
        assert!(matches!(infinity, ValueError::Invalid(m) if m.starts_with("is infinity")));
        let mut rows = CopyRows::default();
        let mut bad = header();
        bad[0] = b'X';
        assert!(rows.next(&bad).is_err());
    }
}
