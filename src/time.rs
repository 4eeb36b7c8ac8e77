//! Instants, fixed UTC offsets and durations as the contract spells them, with every
//! parser and formatter of them.
//!
//! All instants are microseconds since the Unix epoch, UTC (the contract's
//! `Timestamp(µs, UTC)`); text is RFC 3339 with a `Z`. Durations have one formatter per
//! shape of text: [`format_duration`] (what [`parse_duration`] reads back, `1h 30m`),
//! [`format_whole_unit`] (one unit, `90m`), [`format_approx`] and [`format_approx_hours`]
//! (rounded for tables, `90.0m`) and [`format_elapsed`] (a measured wall time, `1.24s`).
//! Their outputs reach terminals, CSV files and `truth.parquet`: changing one changes
//! those files.

use chrono::{DateTime, NaiveDateTime, SecondsFormat, Utc};

use crate::error::{Error, Result};

/// Microseconds since the Unix epoch, UTC.
pub type Micros = i64;

/// Microseconds in one millisecond.
pub const MILLI_MICROS: Micros = 1_000;
/// Microseconds in one second.
pub const SECOND_MICROS: Micros = 1_000_000;
/// Microseconds in one minute.
pub const MINUTE_MICROS: Micros = 60 * SECOND_MICROS;
/// Microseconds in one hour.
pub const HOUR_MICROS: Micros = 60 * MINUTE_MICROS;
/// Microseconds in one day.
pub const DAY_MICROS: Micros = 24 * HOUR_MICROS;

/// Now, UTC µs.
pub fn now_micros() -> Micros {
    Utc::now().timestamp_micros()
}

/// The variable of the replay clock (`gen --live` prints it for `watch`).
pub const REPLAY_CLOCK: &str = "EFFECT_RECON_CLOCK";

/// An event clock running `speed` times faster than the wall clock, at `event_origin` when
/// the wall clock read `wall_origin`: what a replayed day and the `watch` judging it agree
/// on. Written `<event instant>@<wall µs>x<speed>`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplayClock {
    /// The event instant at the wall origin.
    pub event_origin: Micros,
    /// The wall instant the clock started from.
    pub wall_origin: Micros,
    /// Event seconds per wall second (at least 1).
    pub speed: f64,
}

impl ReplayClock {
    /// The clock of [`REPLAY_CLOCK`], if set; an error names the variable.
    pub fn from_env() -> Result<Option<ReplayClock>, String> {
        match std::env::var(REPLAY_CLOCK) {
            Ok(text) => {
                ReplayClock::parse(&text).map(Some).map_err(|e| format!("{REPLAY_CLOCK}: {e}"))
            }
            Err(_) => Ok(None),
        }
    }

    /// Reads `<event instant>@<wall µs>x<speed>`.
    pub fn parse(text: &str) -> Result<ReplayClock, String> {
        let invalid = || {
            format!("'{text}' is not <instant>@<wall µs>x<speed>, e.g. 2026-11-28T16:00:00Z@1764892800000000x60")
        };
        let (event, rest) = text.split_once('@').ok_or_else(invalid)?;
        let (wall, speed) = rest.split_once('x').ok_or_else(invalid)?;
        let speed: f64 = speed.parse().map_err(|_| invalid())?;
        if !(speed >= 1.0 && speed.is_finite()) {
            return Err(format!("speed {speed} must be at least 1"));
        }
        Ok(ReplayClock {
            event_origin: parse_instant(event)?,
            wall_origin: wall.parse().map_err(|_| invalid())?,
            speed,
        })
    }

    /// The event instant now.
    pub fn now(&self) -> Micros {
        self.at_wall(now_micros())
    }

    /// The event instant at wall instant `wall`.
    pub fn at_wall(&self, wall: Micros) -> Micros {
        self.event_origin + ((wall - self.wall_origin) as f64 * self.speed) as Micros
    }

    /// The wall time an event duration takes.
    pub fn wall_duration(&self, event: std::time::Duration) -> std::time::Duration {
        event.div_f64(self.speed)
    }
}

/// Now on the event clock: the replay clock of [`REPLAY_CLOCK`] when it is set (and
/// valid: commands that honour it check it first), else the wall clock.
pub fn event_now() -> Micros {
    match ReplayClock::from_env() {
        Ok(Some(clock)) => clock.now(),
        _ => now_micros(),
    }
}

impl std::fmt::Display for ReplayClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}x{}", format_instant(self.event_origin), self.wall_origin, self.speed)
    }
}

/// The zone-less wall-time forms of [`parse_instant`] and of the database sources. They
/// exclude each other (`T` or space; with or without seconds), so the order does not matter.
const ZONELESS_FORMATS: [&str; 4] =
    ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M"];

/// Parses a zone-less wall time (`2026-11-29T16:00:00.5`, `2026-11-29 16:00`) as read at
/// `offset_secs` east of UTC, into UTC µs; `None` when it is not one of those forms.
pub fn parse_local(text: &str, offset_secs: i32) -> Option<Micros> {
    let t = ZONELESS_FORMATS.iter().find_map(|f| NaiveDateTime::parse_from_str(text, f).ok())?;
    Some(t.and_utc().timestamp_micros() - i64::from(offset_secs) * SECOND_MICROS)
}

/// Parses an ISO 8601 / RFC 3339 instant; a value without a zone means UTC.
pub fn parse_instant(text: &str) -> Result<Micros, String> {
    let text = text.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc).timestamp_micros());
    }
    if let Some(t) = parse_local(text, 0) {
        return Ok(t);
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

/// Parses `UTC`, `Z`, `+08:00`, `-0530` or `+8` into seconds east of UTC.
pub fn parse_offset(text: &str) -> Result<i32, String> {
    let bad = || {
        format!("timezone '{text}' is not a fixed offset: use UTC or ±HH:MM, e.g. +08:00 (named zones are not supported)")
    };
    let t = text.trim();
    if t.eq_ignore_ascii_case("utc") || t == "Z" {
        return Ok(0);
    }
    let (sign, rest) = match t.as_bytes().first() {
        Some(b'+') => (1, &t[1..]),
        Some(b'-') => (-1, &t[1..]),
        _ => return Err(bad()),
    };
    let digits: String = rest.chars().filter(|c| *c != ':').collect();
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) || rest.len() > 5 {
        return Err(bad());
    }
    let (hours, minutes) = match digits.len() {
        1 | 2 => (digits.parse::<i32>().map_err(|_| bad())?, 0),
        4 => (
            digits[..2].parse::<i32>().map_err(|_| bad())?,
            digits[2..].parse::<i32>().map_err(|_| bad())?,
        ),
        _ => return Err(bad()),
    };
    if hours > 14 || minutes > 59 {
        return Err(bad());
    }
    Ok(sign * (hours * 3600 + minutes * 60))
}

/// Formats seconds east of UTC as `+08:00`.
pub fn format_offset(secs: i32) -> String {
    let sign = if secs < 0 { '-' } else { '+' };
    let abs = secs.abs();
    format!("{sign}{:02}:{:02}", abs / 3600, (abs % 3600) / 60)
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
            "ms" => MILLI_MICROS,
            "s" => SECOND_MICROS,
            "m" => MINUTE_MICROS,
            "h" => HOUR_MICROS,
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

/// A measured wall time, short: `830ms` below a second, else seconds to two decimals
/// (`1.24s`, `61.50s`).
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
        (HOUR_MICROS, "h"),
        (MINUTE_MICROS, "m"),
        (SECOND_MICROS, "s"),
        (MILLI_MICROS, "ms"),
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

/// A duration in the largest unit of [`parse_duration`] that divides it, else in whole
/// milliseconds (truncated): `2d`, `90m`, `4250ms`, `0ms`.
pub fn format_whole_unit(micros: Micros) -> String {
    let units = [("d", DAY_MICROS), ("h", HOUR_MICROS), ("m", MINUTE_MICROS), ("s", SECOND_MICROS)];
    for (unit, size) in units {
        if micros != 0 && micros % size == 0 {
            return format!("{}{unit}", micros / size);
        }
    }
    format!("{}ms", micros / MILLI_MICROS)
}

/// A duration rounded for a table: whole milliseconds below a second, then seconds below
/// 2 minutes, minutes below 2 hours, hours below 2 days, then days, each to one decimal:
/// `850ms`, `4.2s`, `90.0m`, `3.5h`, `2.1d`.
pub fn format_approx(micros: Micros) -> String {
    approx(micros, 1, true)
}

/// As [`format_approx`], but seconds to two decimals and hours the largest unit:
/// `850ms`, `4.25s`, `90.0m`, `73.0h`.
pub fn format_approx_hours(micros: Micros) -> String {
    approx(micros, 2, false)
}

fn approx(micros: Micros, second_decimals: usize, days: bool) -> String {
    // The float expressions are the ones these formats were first written with: another
    // order of operations could round a printed value differently.
    let s = micros as f64 / SECOND_MICROS as f64;
    if micros < SECOND_MICROS {
        format!("{:.0}ms", s * 1000.0)
    } else if micros < 2 * MINUTE_MICROS {
        format!("{s:.second_decimals$}s")
    } else if micros < 2 * HOUR_MICROS {
        format!("{:.1}m", s / 60.0)
    } else if !days || micros < 2 * DAY_MICROS {
        format!("{:.1}h", s / 3600.0)
    } else {
        format!("{:.1}d", s * SECOND_MICROS as f64 / DAY_MICROS as f64)
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
    fn the_replay_clock_reads_back_and_runs_speed_times_faster() {
        let clock = ReplayClock::parse("2026-11-28T16:00:00Z@1000000x60").unwrap();
        assert_eq!(clock.to_string(), "2026-11-28T16:00:00Z@1000000x60");
        assert_eq!(clock.at_wall(1_000_000 + SECOND_MICROS), clock.event_origin + MINUTE_MICROS);
        let five_minutes = std::time::Duration::from_secs(300);
        assert_eq!(clock.wall_duration(five_minutes), std::time::Duration::from_secs(5));
        assert!(ReplayClock::parse("2026-11-28T16:00:00Z@1000000x0.5")
            .unwrap_err()
            .contains("at least 1"));
        assert!(ReplayClock::parse("2026-11-28T16:00:00Z").unwrap_err().contains("<instant>@"));
    }

    #[test]
    fn durations_add_their_parts() {
        assert_eq!(parse_duration("30m"), Ok(30 * MINUTE_MICROS));
        assert_eq!(parse_duration("1h 30m"), Ok(90 * MINUTE_MICROS));
        assert_eq!(parse_duration("1h30m"), Ok(90 * MINUTE_MICROS));
        assert_eq!(parse_duration("250ms"), Ok(250_000));
        assert_eq!(parse_duration("1d"), Ok(DAY_MICROS));
        for bad in ["", "30", "m", "30x", "1.5h", "-1h", "h30"] {
            assert!(parse_duration(bad).is_err(), "{bad} should be refused");
        }
    }

    /// Each format on 0, sub-second, seconds, minutes, hours and days. The strings are the
    /// outputs of the five formatters these replaced (`simulate::human`, `advise::human`,
    /// `night_truth::duration_text` and the two here), which reach terminals, CSV and
    /// `truth.parquet`.
    #[test]
    fn duration_formats_are_pinned() {
        let values = [
            0,
            499,
            250 * MILLI_MICROS,
            999_999,
            SECOND_MICROS,
            4_250_000,
            119_999_999,
            2 * MINUTE_MICROS,
            90 * MINUTE_MICROS,
            2 * HOUR_MICROS,
            2 * DAY_MICROS - 1,
            2 * DAY_MICROS,
            50 * HOUR_MICROS,
            3 * DAY_MICROS + HOUR_MICROS,
            -5 * SECOND_MICROS,
        ];
        let table: Vec<[String; 4]> = values
            .iter()
            .map(|&t| {
                [format_duration(t), format_whole_unit(t), format_approx(t), format_approx_hours(t)]
            })
            .collect();
        let expected = [
            ["0s", "0ms", "0ms", "0ms"],
            ["0s", "0ms", "0ms", "0ms"],
            ["250ms", "250ms", "250ms", "250ms"],
            ["999ms", "999ms", "1000ms", "1000ms"],
            ["1s", "1s", "1.0s", "1.00s"],
            ["4s 250ms", "4250ms", "4.2s", "4.25s"],
            ["1m 59s 999ms", "119999ms", "120.0s", "120.00s"],
            ["2m", "2m", "2.0m", "2.0m"],
            ["1h 30m", "90m", "90.0m", "90.0m"],
            ["2h", "2h", "2.0h", "2.0h"],
            ["1d 23h 59m 59s 999ms", "172799999ms", "48.0h", "48.0h"],
            ["2d", "2d", "2.0d", "48.0h"],
            ["2d 2h", "50h", "2.1d", "50.0h"],
            ["3d 1h", "73h", "3.0d", "73.0h"],
            ["0s", "-5s", "-5000ms", "-5000ms"],
        ];
        for ((t, got), want) in values.iter().zip(&table).zip(expected) {
            assert_eq!(got.each_ref().map(String::as_str), want, "{t}µs");
        }
        let us = std::time::Duration::from_micros;
        assert_eq!(format_elapsed(us(0)), "0ms");
        assert_eq!(format_elapsed(us(830_000)), "830ms");
        assert_eq!(format_elapsed(us(999_600)), "1000ms");
        assert_eq!(format_elapsed(us(1_000_000)), "1.00s");
        assert_eq!(format_elapsed(us(1_240_000)), "1.24s");
        assert_eq!(format_elapsed(us(61_500_000)), "61.50s");
        assert_eq!(format_elapsed(us(3 * DAY_MICROS as u64)), "259200.00s");
    }

    #[test]
    fn zone_less_instants_read_in_an_offset() {
        let t = parse_instant("2026-11-29T16:00:00Z").unwrap();
        for text in [
            "2026-11-30T00:00:00",
            "2026-11-30 00:00:00.000",
            "2026-11-30T00:00",
            "2026-11-30 00:00",
        ] {
            assert_eq!(parse_local(text, 8 * 3600), Some(t), "{text}");
            assert_eq!(parse_local(text, 0), parse_instant(text).ok(), "{text}");
        }
        assert_eq!(parse_local("2026-11-30", 0), None);
        assert_eq!(parse_local("2026-11-30T00:00:00Z", 0), None);
    }

    #[test]
    fn offsets_are_fixed() {
        assert_eq!(parse_offset("UTC"), Ok(0));
        assert_eq!(parse_offset("-05:30"), Ok(-(5 * 3600 + 1800)));
        assert_eq!(parse_offset("+0800"), Ok(8 * 3600));
        assert!(parse_offset("Asia/Shanghai").is_err());
        assert_eq!(format_offset(-(5 * 3600 + 1800)), "-05:30");
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
