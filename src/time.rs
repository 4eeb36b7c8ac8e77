//! Instants and durations as the contract spells them.
//!
//! All instants are microseconds since the Unix epoch, UTC (the contract's
//! `Timestamp(µs, UTC)`); text is RFC 3339 with a `Z`.

use chrono::{DateTime, NaiveDateTime, SecondsFormat, Utc};

use crate::error::{Error, Result};

/// Microseconds since the Unix epoch, UTC.
pub type Micros = i64;

/// Microseconds in one day.
pub const DAY_MICROS: Micros = 86_400_000_000;

/// Parses an ISO 8601 / RFC 3339 instant; a value without a zone means UTC.
pub fn parse_instant(text: &str) -> Result<Micros, String> {
    let text = text.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc).timestamp_micros());
    }
    for format in
        ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M"]
    {
        if let Ok(t) = NaiveDateTime::parse_from_str(text, format) {
            return Ok(t.and_utc().timestamp_micros());
        }
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        if let Some(t) = d.and_hms_opt(0, 0, 0) {
            return Ok(t.and_utc().timestamp_micros());
        }
    }
    Err(format!("'{text}' is not an ISO 8601 instant (e.g. 2026-11-29T16:00:00Z)"))
}

/// Formats an instant as RFC 3339 UTC, e.g. `2026-11-29T16:00:00Z` (sub-seconds only when present).
pub fn format_instant(micros: Micros) -> String {
    match DateTime::<Utc>::from_timestamp_micros(micros) {
        Some(t) => t.to_rfc3339_opts(SecondsFormat::AutoSi, true),
        None => format!("{micros}µs"),
    }
}

/// Formats an instant compactly for ids and folder names: `20261129T160000Z`.
pub fn format_compact(micros: Micros) -> String {
    match DateTime::<Utc>::from_timestamp_micros(micros) {
        Some(t) => t.format("%Y%m%dT%H%M%SZ").to_string(),
        None => micros.to_string(),
    }
}

/// Parses a duration made of one or more `<int><unit>` parts, units `ms s m h d`
/// (e.g. `30m`, `1h 30m`, `1d`), into microseconds.
pub fn parse_duration(text: &str) -> Result<Micros, String> {
    let invalid = || {
        format!("'{text}' is not a duration: use <int><unit> parts with units ms s m h d, e.g. 30m or 1h 30m")
    };
    let mut total: Micros = 0;
    let mut parts = 0;
    let mut rest = text.trim();
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return Err(invalid());
        }
        let value: i64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(rest.len());
        let unit_micros = match &rest[..unit_len] {
            "ms" => 1_000,
            "s" => 1_000_000,
            "m" => 60_000_000,
            "h" => 3_600_000_000,
            "d" => DAY_MICROS,
            _ => return Err(invalid()),
        };
        let part = value.checked_mul(unit_micros).ok_or_else(invalid)?;
        total = total.checked_add(part).ok_or_else(invalid)?;
        parts += 1;
        rest = rest[unit_len..].trim_start();
    }
    if parts == 0 {
        return Err(invalid());
    }
    Ok(total)
}

/// Formats microseconds as a short human duration (`1.24s`, `830ms`).
pub fn format_elapsed(elapsed: std::time::Duration) -> String {
    let ms = elapsed.as_secs_f64() * 1000.0;
    if ms < 1000.0 {
        format!("{ms:.0}ms")
    } else {
        format!("{:.2}s", ms / 1000.0)
    }
}

/// A duration as `parse_duration` reads it back: `2d`, `1h 30m`, `0s`.
pub fn format_duration(micros: Micros) -> String {
    const UNITS: [(Micros, &str); 5] = [
        (DAY_MICROS, "d"),
        (3_600_000_000, "h"),
        (60_000_000, "m"),
        (1_000_000, "s"),
        (1_000, "ms"),
    ];
    let mut rest = micros.max(0);
    let mut parts = Vec::new();
    for (size, unit) in UNITS {
        if rest >= size {
            parts.push(format!("{}{unit}", rest / size));
            rest %= size;
        }
    }
    if parts.is_empty() {
        "0s".to_string()
    } else {
        parts.join(" ")
    }
}

/// The window a run judges, `(since, cut]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Exclusive start.
    pub since: Micros,
    /// Inclusive end, and the cut of every input.
    pub cut: Micros,
}

impl Window {
    /// The cut and window for `snapshot_cut` and the requested bounds.
    pub fn resolve(
        snapshot_cut: Micros,
        cut: Option<Micros>,
        since: Option<Micros>,
    ) -> Result<Window> {
        let cut = cut.unwrap_or(snapshot_cut);
        if cut > snapshot_cut {
            return Err(Error::argument(
                "--cut",
                format!(
                    "{} is after the snapshot's cut {}; the snapshot has no data past its cut",
                    format_instant(cut),
                    format_instant(snapshot_cut)
                ),
            ));
        }
        let since = since.unwrap_or(cut - DAY_MICROS);
        if since >= cut {
            return Err(Error::argument(
                "--since",
                format!(
                    "{} must be earlier than the cut {}",
                    format_instant(since),
                    format_instant(cut)
                ),
            ));
        }
        Ok(Window { since, cut })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations_read_back() {
        for text in ["2d", "1h 30m", "30m", "1d 2h 3m 4s 5ms"] {
            assert_eq!(super::format_duration(super::parse_duration(text).unwrap()), text);
        }
        assert_eq!(super::format_duration(0), "0s");
    }

    use super::*;

    #[test]
    fn durations_add_their_parts() {
        assert_eq!(parse_duration("30m"), Ok(30 * 60_000_000));
        assert_eq!(parse_duration("1h 30m"), Ok(90 * 60_000_000));
        assert_eq!(parse_duration("1h30m"), Ok(90 * 60_000_000));
        assert_eq!(parse_duration("250ms"), Ok(250_000));
        assert_eq!(parse_duration("1d"), Ok(DAY_MICROS));
        for bad in ["", "30", "m", "30x", "1.5h", "-1h", "h30"] {
            assert!(parse_duration(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn instants_round_trip_in_utc() {
        let t = parse_instant("2026-11-29T16:00:00Z").unwrap();
        assert_eq!(format_instant(t), "2026-11-29T16:00:00Z");
        assert_eq!(parse_instant("2026-11-30T00:00:00+08:00").unwrap(), t);
        assert_eq!(parse_instant("2026-11-29 16:00:00").unwrap(), t);
        assert_eq!(format_compact(t), "20261129T160000Z");
        assert!(parse_instant("yesterday").is_err());
    }
}
