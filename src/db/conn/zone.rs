//! Time zones at the source boundary: zone-less values are wall times in the source's fixed
//! offset; everything past this module is UTC microseconds.

use chrono::{DateTime, NaiveDateTime, Utc};

use crate::time::{parse_local, Micros, SECOND_MICROS};

/// SQLite text timestamps: with an offset or `Z` they are instants; without, local to `offset`.
pub(crate) fn parse_sqlite_timestamp(text: &str, offset: i32) -> Option<Micros> {
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
    let (zoneless, offset) = text.strip_suffix('Z').map(|t| (t, 0)).unwrap_or((text, offset));
    parse_local(zoneless, offset)
}

/// A zone-less value read in `offset` → UTC µs.
pub(crate) fn from_naive(t: NaiveDateTime, offset: i32) -> Micros {
    t.and_utc().timestamp_micros() - i64::from(offset) * SECOND_MICROS
}

/// UTC µs → the zone-less wall time in `offset`.
pub(crate) fn naive(micros: Micros, offset: i32) -> NaiveDateTime {
    let shifted = micros + i64::from(offset) * SECOND_MICROS;
    DateTime::<Utc>::from_timestamp_micros(shifted).unwrap_or_default().naive_utc()
}

/// UTC µs → an instant.
pub(crate) fn utc(micros: Micros) -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp_micros(micros).unwrap_or_default()
}

/// The SQLite text form of a wall time: fixed six fraction digits, so text comparison
/// orders it correctly against stored values with or without a fraction.
pub(crate) fn sqlite_text(t: NaiveDateTime) -> String {
    t.format("%Y-%m-%d %H:%M:%S%.6f").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_timestamps_read_in_the_source_offset() {
        let utc_noon = parse_sqlite_timestamp("2026-11-29 12:00:00Z", 0).unwrap();
        assert_eq!(parse_sqlite_timestamp("2026-11-29 20:00:00.000000", 8 * 3600), Some(utc_noon));
        assert_eq!(parse_sqlite_timestamp("2026-11-29T20:00:00+08:00", 0), Some(utc_noon));
        assert_eq!(parse_sqlite_timestamp("2026-11-29 12:00:00.000001", 0), Some(utc_noon + 1));
        assert_eq!(sqlite_text(naive(utc_noon, 8 * 3600)), "2026-11-29 20:00:00.000000");
    }
}
