//! `export`: database sources → contract-typed Arrow batches → a Parquet snapshot on
//! object_store (docs/CONTRACT.md, docs/JOB_CONFIG.md): the reading direction of [`crate::db`].
//!
//! Per database (sources with the same URL, password variable and timezone):
//!
//! * `connections` connections are opened and each starts a read-only REPEATABLE READ
//!   transaction. Postgres workers join the leader's exported snapshot, so every chunk of
//!   every table of that database is read in one snapshot. MySQL cannot share a snapshot
//!   between connections: they all start `WITH CONSISTENT SNAPSHOT` at once before any
//!   read, so they differ only by transactions committed in that instant; `connections = 1`
//!   reads everything in one snapshot. SQLite always uses one connection.
//! * The connections read the database's sources at once ([`chunks`]): a free connection
//!   takes the next source, checks its query (columns by name, types) by preparing it and
//!   counts it. A source of at most `chunk_rows` rows is read as written, in one pass; a
//!   larger one is split into `order_id` key ranges (`MIN/MAX(order_id)`) of about
//!   `chunk_rows` rows, the first read there and the others queued for any connection,
//!   each checked against a `COUNT` of the same range in the same transaction. Chunks are
//!   sorted by `order_id` ([`sort`]) and encoded in key order off the runtime's workers,
//!   so every table is sorted by `order_id` without a server-side ORDER BY.
//! * PostgreSQL is read with binary `COPY (query) TO STDOUT`, the rest through sqlx rows
//!   ([`source`]).
//! * A query taking four parameters has the chunk's range in its own WHERE (on the user's
//!   indexed column) and runs unwrapped ([`dialect::Chunking`]).
//! * Any failure stops the export before `manifest.json` is written: a snapshot without a
//!   manifest is incomplete and no reader uses it. No error text carries a password.

mod chunks;
mod incremental;
mod progress;
mod sort;
mod supersede;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::conn::{self as source, Binds, ColumnRead, Conn, Decoder, ResultColumn, Target};
use super::dialect;
pub use super::error::{ExportError, WriteError};
use crate::config::job::{Driver, ExportSettings, JobConfig, SourceConfig};
use crate::error::{Error, Result};
use crate::events::Event;
use crate::events::Events;
use crate::snapshot::chain::event_column;
use crate::snapshot::{ColumnKind, SnapshotManifest, SnapshotWriter, Table, KEY_SPEC};
use crate::storage::Location;
use crate::time::Micros;
use chunks::{SourceJob, SourceOutcome};
pub use incremental::ExportMode;
use incremental::{Before, Night, Probe};

/// A validated export request.
#[derive(Debug, Clone)]
pub struct ExportPlan {
    /// The job config (sources and settings).
    pub job: JobConfig,
    /// The snapshot folder to write.
    pub out: Location,
    /// The logical cut: every row is filtered to `<= cut`.
    pub cut: Micros,
}

/// What one source contributed.
#[derive(Debug, Clone)]
pub struct SourceReport {
    /// `table[name]`.
    pub label: String,
    /// Rows written.
    pub rows: u64,
    /// Key-range chunks read.
    pub chunks: usize,
    /// Time spent on it.
    pub elapsed: Duration,
}

/// What a finished export reports.
#[derive(Debug, Clone)]
pub struct ExportReport {
    /// The snapshot folder.
    pub location: String,
    /// The manifest written last.
    pub manifest: SnapshotManifest,
    /// One entry per source, in config order.
    pub sources: Vec<SourceReport>,
    /// Total rows.
    pub rows: u64,
    /// What the night was (full, and why; incremental on which snapshot), for a job whose
    /// sources can be read incrementally.
    pub chain: Option<String>,
    /// Total time.
    pub elapsed: Duration,
}

/// Exports every source of the job into a snapshot at `plan.out`, incremental when the
/// previous snapshot beside it allows ([`ExportMode::Auto`]); the manifest is written last.
pub async fn export(plan: &ExportPlan, events: &Events) -> Result<ExportReport> {
    export_with(plan, ExportMode::Auto, events).await
}

/// [`export`] with the choice between a full and an incremental read made by `mode`.
pub async fn export_with(
    plan: &ExportPlan,
    mode: ExportMode,
    events: &Events,
) -> Result<ExportReport> {
    let started = Instant::now();
    let job = &plan.job;
    let (lower, cut) = job.bounds(plan.cut);
    // Incremental nights need a key and a change column on every source (docs/JOB_CONFIG.md).
    let chained = job.sources.iter().all(|s| s.change_columns().is_some());
    let before = incremental::before(&plan.out, plan.cut).await;
    let large = match &before {
        Ok(Before::Found(previous)) => large_tables(&previous.manifest, job.export.chunk_rows),
        _ => BTreeSet::new(),
    };
    let night = if chained {
        Some(incremental::decide(job, before, lower, mode).await?)
    } else {
        let keyed = job.sources.iter().filter(|s| s.change_columns().is_some()).count();
        if keyed > 0 && mode == ExportMode::Auto {
            let lacking = job.sources.iter().find(|s| s.change_columns().is_none());
            events.emit(Event::ExportChain(format!(
                "export: full export (incremental nights need key and changed_column on every source; {} has none)",
                lacking.map(SourceConfig::label).unwrap_or_default()
            )));
        }
        if mode != ExportMode::Auto {
            let lacking = job.sources.iter().find(|s| s.change_columns().is_none());
            let label = lacking.map(SourceConfig::label).unwrap_or_default();
            return Err(Error::config(
                job.path.display(),
                format!("--full and --verify-full are about incremental nights, which need key and changed_column on every [[source]]; {label} has none"),
            ));
        }
        None
    };
    let shadow = match &night {
        Some(Night::Incremental { seq, .. }) => {
            let every = job.incremental.verify_full_every;
            mode == ExportMode::VerifyFull || (every > 0 && seq % every == 0)
        }
        _ => false,
    };
    let mut writer = SnapshotWriter::create(&plan.out, plan.cut, "export").await?;
    writer.set_coverage_from(lower);
    let settings = &job.export;
    let count = job.sources.len();
    let mut reports = BTreeMap::new();
    let mut reads: Vec<incremental::SourceRead<'_>> = Vec::new();
    for group in group_by_database(&job.sources) {
        let (mut session, probe) = Session::open(&group, settings, night.is_some()).await?;
        if night.is_some() {
            if let Err(error) = session.check_change_columns(&group).await {
                session.close().await;
                return Err(error);
            }
        }
        let tonight = Reads { job, night: night.as_ref(), shadow, lower, cut, large: &large };
        let jobs = group
            .iter()
            .flat_map(|&(index, source)| tonight.jobs(&writer, index, source))
            .collect();
        let outcomes = session.export_sources(jobs, settings, events).await;
        session.close().await;
        let written = first_failure(outcomes).map_err(|(index, e)| {
            let source = job.sources.get(index % count.max(1)).unwrap_or(group[0].1);
            source_error(source, &session.target, e)
        })?;
        for (index, w) in written {
            let source = &job.sources[index % count];
            if index >= count {
                if let Some(read) = reads.iter_mut().find(|r| std::ptr::eq(r.source, source)) {
                    read.shadow = Some(w.files);
                }
                continue;
            }
            let report = SourceReport {
                label: source.label(),
                rows: w.rows,
                chunks: w.chunks,
                elapsed: w.elapsed,
            };
            reports.insert(index, report);
            if night.is_some() {
                reads.push(incremental::SourceRead {
                    source,
                    files: w.files,
                    shadow: None,
                    rows_read: w.rows,
                    probe: probe.clone(),
                });
            } else {
                writer.add(source.table, w.files);
            }
        }
    }
    let chain_line = match &night {
        Some(night) => {
            reads.sort_by_key(|r| job.sources.iter().position(|s| std::ptr::eq(s, r.source)));
            let tonight = incremental::Tonight { job, night, shadow, lower, cut };
            let line = incremental::finish(&mut writer, tonight, reads).await?;
            events.emit(Event::ExportChain(line.clone()));
            Some(line)
        }
        None => None,
    };
    let manifest = writer.finish().await?;
    let sources: Vec<SourceReport> = reports.into_values().collect();
    let rows = sources.iter().map(|s| s.rows).sum();
    Ok(ExportReport {
        location: plan.out.to_string(),
        manifest,
        sources,
        rows,
        chain: chain_line,
        elapsed: started.elapsed(),
    })
}

/// The tables of which `previous`, the snapshot before tonight's, holds more than `chunk_rows`
/// rows. Their sources are counted and chunked from the start; any other source is
/// expected to fit one chunk, and is read before it is counted ([`chunks::plan`]): its
/// `COUNT` would only check what the read in the same transaction returns, at the cost of
/// another pass over the window. With no readable previous snapshot, none is large.
fn large_tables(previous: &SnapshotManifest, chunk_rows: u64) -> BTreeSet<String> {
    let rows =
        |files: &crate::snapshot::TableFiles| files.files.iter().map(|f| f.rows).sum::<u64>();
    previous.tables.iter().filter(|(_, t)| rows(t) > chunk_rows).map(|(n, _)| n.clone()).collect()
}

/// The source's own bounds on a night of a chain: every event time.
const WIDE_LOWER: Micros = -30_610_137_600_000_000; // 1000-01-02T00:00:00Z
const WIDE_UPPER: Micros = 253_402_128_000_000_000; // 9999-12-30T00:00:00Z

/// What tonight reads of each source.
struct Reads<'a> {
    job: &'a JobConfig,
    /// `None`: the job cannot be read incrementally (format `@1`).
    night: Option<&'a Night>,
    shadow: bool,
    lower: Micros,
    cut: Micros,
    /// Tables whose sources are counted before they are read ([`large_tables`]).
    large: &'a BTreeSet<String>,
}

impl Reads<'_> {
    /// One source's reads: its query as written (`@1`), keyed (a full night of a chain) or
    /// tonight's delta; on a shadow night also the full keyed read beside it, as index
    /// `index + sources`.
    fn jobs(&self, writer: &SnapshotWriter, index: usize, source: &SourceConfig) -> Vec<SourceJob> {
        let Reads { job, night, shadow, lower, cut, large } = *self;
        let small = !large.contains(source.table.name());
        let rows_per_file = job.export.rows_per_file;
        let stem = file_stem(job, source);
        let normal = Binds { lower, cut, offset_secs: source.utc_offset_secs };
        let Some(night) = night else {
            let writer = writer.table(source.table, stem).with_rows_per_file(rows_per_file);
            return vec![SourceJob {
                index,
                source: source.clone(),
                binds: normal,
                keyed: false,
                capped: small,
                writer,
            }];
        };
        let (key, changed) = source.change_columns().unwrap_or_default();
        let keyed = dialect::keyed_query(source.driver, &source.query, key);
        let (query, binds, capped) = match (night, night.since(source)) {
            (Night::Incremental { previous, .. }, Some(since)) => {
                let literal = |t| dialect::time_literal(source.driver, t, source.utc_offset_secs);
                let columns =
                    dialect::DeltaColumns { key, event: event_column(source.table), changed };
                let since = dialect::changed_literal(source.driver, since, source.utc_offset_secs);
                let window = (literal(previous.cut), literal(cut));
                let query = dialect::delta_query(
                    source.driver,
                    &source.query,
                    columns,
                    &window.0,
                    &window.1,
                    &since,
                );
                // The source's own bounds wide open: a row whose event time moved out of
                // the window must still be read, to supersede its old version.
                // The delta is read without a COUNT first (see `chunks::plan`).
                (query, Binds { lower: WIDE_LOWER, cut: WIDE_UPPER, ..normal }, true)
            }
            _ => (keyed.clone(), normal, small),
        };
        let mut jobs = vec![SourceJob {
            index,
            source: SourceConfig { query, ..source.clone() },
            binds,
            keyed: true,
            capped,
            writer: writer.keyed_table(source.table, stem).with_rows_per_file(rows_per_file),
        }];
        if shadow {
            let full_stem = format!("full-{}", stem.unwrap_or(&source.name));
            jobs.push(SourceJob {
                index: index + job.sources.len(),
                source: SourceConfig { query: keyed, ..source.clone() },
                binds: normal,
                keyed: true,
                capped: small,
                writer: writer
                    .keyed_table(source.table, Some(&full_stem))
                    .with_rows_per_file(rows_per_file),
            });
        }
        jobs
    }
}

/// The sources' files in config order, or the failure to report: the first in config
/// order that is a cause, not a source stopped because of another's failure.
fn first_failure(
    outcomes: Vec<SourceOutcome>,
) -> Result<Vec<(usize, chunks::Written)>, (usize, ExportError)> {
    let mut written = Vec::with_capacity(outcomes.len());
    let mut failed: Option<(usize, ExportError)> = None;
    for outcome in outcomes {
        match outcome.result {
            Ok(w) => written.push((outcome.index, w)),
            Err(e) => {
                let stopped = matches!(e, ExportError::Stopped);
                if failed
                    .as_ref()
                    .is_none_or(|(_, f)| matches!(f, ExportError::Stopped) && !stopped)
                {
                    failed = Some((outcome.index, e));
                }
            }
        }
    }
    failed.map_or(Ok(written), Err)
}

/// Receipts always live in `receipts/<name>/`; ledger and history files are prefixed with
/// the source name only when several sources share the table.
fn file_stem<'a>(job: &JobConfig, source: &'a SourceConfig) -> Option<&'a str> {
    let shared = job.sources.iter().filter(|s| s.table == source.table).count() > 1;
    (source.table == Table::Receipts || shared).then_some(source.name.as_str())
}

/// Sources of one database, with their index in the config.
type Group<'a> = Vec<(usize, &'a SourceConfig)>;

fn group_by_database(sources: &[SourceConfig]) -> Vec<Group<'_>> {
    let mut groups: Vec<Group<'_>> = Vec::new();
    for (index, source) in sources.iter().enumerate() {
        let same = |s: &SourceConfig| {
            s.driver == source.driver
                && s.url == source.url
                && s.password_env == source.password_env
                && s.utc_offset_secs == source.utc_offset_secs
        };
        match groups.iter_mut().find(|g| same(g[0].1)) {
            Some(group) => group.push((index, source)),
            None => groups.push(vec![(index, source)]),
        }
    }
    groups
}

/// The one place an [`ExportError`] becomes the crate's error, scrubbed of the password.
fn source_error(source: &SourceConfig, target: &Target, e: ExportError) -> Error {
    e.into_error(&source.name, source.table.name(), |m| target.scrub(m))
}

/// The connections to one database, each inside the read transaction.
struct Session {
    conns: Vec<Conn>,
    target: Target,
}

impl Session {
    /// Connects, probes the watermark when `probe` (before any read transaction starts),
    /// then opens the read transactions.
    async fn open(
        group: &Group<'_>,
        settings: &ExportSettings,
        probe: bool,
    ) -> Result<(Session, Probe)> {
        let first = group[0].1;
        let password = match &first.password_env {
            Some(var) => Some(std::env::var(var).map_err(|_| Error::Source {
                source_name: first.name.clone(),
                table: first.table.name().to_string(),
                message: format!("environment variable {var} (password_env) is not set"),
            })?),
            None => None,
        };
        let target = Target {
            driver: first.driver,
            url: first.url.clone(),
            password,
            offset_secs: first.utc_offset_secs,
            read_only: true,
        };
        let wanted = if first.driver == Driver::Sqlite { 1 } else { settings.connections };
        let mut conns = Vec::with_capacity(wanted);
        for _ in 0..wanted {
            conns.push(
                source::connect(&target, settings.connect_timeout)
                    .await
                    .map_err(|e| source_error(first, &target, e))?,
            );
        }
        let mut session = Session { conns, target };
        let probed = if probe { session.probe().await } else { Probe::default() };
        if let Err(message) = session.begin().await {
            let error = source_error(first, &session.target, message);
            session.close().await;
            return Err(error);
        }
        Ok((session, probed))
    }

    /// Every source's query returns its key and change columns (checked before any row
    /// is read, so a typo in the job config names the column, not a database error).
    async fn check_change_columns(&mut self, group: &Group<'_>) -> Result<()> {
        let Some(conn) = self.conns.first_mut() else { return Ok(()) };
        for &(_, source) in group {
            let Some((key, changed)) = source.change_columns() else { continue };
            let columns = conn
                .columns(&source.query)
                .await
                .map_err(|e| source_error(source, &self.target, ExportError::Describe(e)))?;
            for (role, name) in [("key", key), ("changed_column", changed)] {
                if !columns.iter().any(|c| c.name.eq_ignore_ascii_case(name)) {
                    let returned: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
                    return Err(Error::Source {
                        source_name: source.name.clone(),
                        table: source.table.name().into(),
                        message: format!(
                            "the query returns no column '{name}' ({role} in the job config; it returns: {}); select it, or fix the name",
                            returned.join(", ")
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// The database's time and the start of its oldest open transaction
    /// ([`dialect::probe_statements`]); what it cannot read goes into the note, and a
    /// probe without the oldest transaction has no time either (no watermark: the next
    /// night is a full export).
    async fn probe(&mut self) -> Probe {
        let driver = self.target.driver;
        let offset = self.target.offset_secs;
        let scrub = |e: sqlx::Error| self.target.scrub(&e.to_string());
        let Some(conn) = self.conns.first_mut() else { return Probe::default() };
        let [now_sql, age_sql] = dialect::probe_statements(driver);
        let now = match conn.query_optional_text(now_sql).await {
            Ok(Some(text)) => {
                let zone = if driver == Driver::MySql { offset } else { 0 };
                crate::time::parse_local(&text, zone)
            }
            Ok(None) => None,
            Err(e) => {
                return Probe {
                    note: Some(format!("the database's time cannot be read: {}", scrub(e))),
                    ..Probe::default()
                }
            }
        };
        let Some(now) = now else {
            return Probe {
                note: Some("the database's time cannot be read".into()),
                ..Probe::default()
            };
        };
        if driver == Driver::Sqlite {
            let note = "SQLite shows no open transactions: the margin must cover the longest write transaction";
            return Probe { now: Some(now), oldest: None, note: Some(note.into()) };
        }
        if driver == Driver::Postgres {
            match conn.query_optional_text(dialect::PG_SEES_ALL_ACTIVITY).await {
                Ok(Some(yes)) if yes == "yes" => {}
                Ok(_) => {
                    let note = "the oldest open transaction cannot be seen: the role needs pg_read_all_stats (or superuser) to see other sessions in pg_stat_activity";
                    return Probe { note: Some(note.into()), ..Probe::default() };
                }
                Err(e) => {
                    return Probe {
                        note: Some(format!("the role's privileges cannot be read: {}", scrub(e))),
                        ..Probe::default()
                    }
                }
            }
        }
        let mysql = driver == Driver::MySql;
        if mysql {
            if let Err(e) = conn.execute(dialect::MYSQL_SESSION_ZONE_SYSTEM).await {
                return Probe {
                    note: Some(format!("SET time_zone = SYSTEM failed: {}", scrub(e))),
                    ..Probe::default()
                };
            }
        }
        let age = conn.query_optional_text(age_sql).await;
        if mysql {
            let back = dialect::mysql_set_time_zone(&crate::time::format_offset(offset));
            if let Err(e) = conn.execute(&back).await {
                return Probe {
                    note: Some(format!("restoring the session zone failed: {}", scrub(e))),
                    ..Probe::default()
                };
            }
        }
        match age {
            Ok(None) => Probe { now: Some(now), oldest: None, note: None },
            Ok(Some(text)) => match text.trim().parse::<i64>() {
                Ok(age) => Probe { now: Some(now), oldest: Some(now - age.max(0)), note: None },
                Err(_) => Probe {
                    note: Some(format!("the oldest transaction's age '{text}' is not a number")),
                    ..Probe::default()
                },
            },
            Err(e) => {
                let privilege = if mysql {
                    "; reading information_schema.INNODB_TRX needs the PROCESS privilege"
                } else {
                    ""
                };
                Probe {
                    note: Some(format!(
                        "the oldest open transaction cannot be read: {}{privilege}",
                        scrub(e)
                    )),
                    ..Probe::default()
                }
            }
        }
    }

    async fn begin(&mut self) -> Result<(), ExportError> {
        let driver = self.target.driver;
        let fail = ExportError::Begin;
        let Some((leader, workers)) = self.conns.split_first_mut() else { return Ok(()) };
        if driver == Driver::MySql {
            // Every connection's snapshot is started before any of them reads.
            let [set_level, start] = dialect::begin_leader(driver) else {
                return Err(ExportError::Internal("MySQL begin".into()));
            };
            for conn in std::iter::once(&mut *leader).chain(workers.iter_mut()) {
                conn.execute(set_level).await.map_err(fail)?;
            }
            // All at once, not one round trip after another: a transaction committed
            // between two starts is seen by one connection and not the other.
            let starts =
                std::iter::once(leader).chain(workers.iter_mut()).map(|c| c.execute(start));
            for started in futures::future::join_all(starts).await {
                started.map_err(fail)?;
            }
            return Ok(());
        }
        for statement in dialect::begin_leader(driver) {
            leader.execute(statement).await.map_err(fail)?;
        }
        if driver == Driver::Postgres && !workers.is_empty() {
            let id = leader.query_text(dialect::PG_EXPORT_SNAPSHOT).await.map_err(fail)?;
            if !id.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
                return Err(ExportError::SnapshotId(id));
            }
            for conn in workers {
                for statement in dialect::begin_leader(driver) {
                    conn.execute(statement).await.map_err(fail)?;
                }
                conn.execute(&dialect::pg_set_snapshot(&id)).await.map_err(fail)?;
            }
        }
        Ok(())
    }

    async fn close(&mut self) {
        for mut conn in self.conns.drain(..) {
            let _ = conn.execute(dialect::ROLLBACK).await;
            conn.close().await;
        }
    }

    /// Exports the sources of this database over its connections; outcomes in config order.
    async fn export_sources(
        &mut self,
        jobs: Vec<SourceJob>,
        settings: &ExportSettings,
        events: &Events,
    ) -> Vec<SourceOutcome> {
        let conns = std::mem::take(&mut self.conns);
        let (conns, mut outcomes) = chunks::read_sources(conns, jobs, settings, events).await;
        self.conns = conns;
        outcomes.sort_by_key(|o| o.index);
        outcomes
    }
}

/// The contract columns found in the query's result, with a decoder each.
/// `keyed`: `recon_key` too, after them (the exporter's own column of an incremental snapshot).
fn match_columns(
    table: Table,
    described: &[ResultColumn],
    keyed: bool,
) -> Result<Vec<ColumnRead>, ExportError> {
    let mut reads = Vec::with_capacity(table.columns().len() + 1);
    let key = keyed.then_some(&KEY_SPEC);
    for spec in table.columns().iter().chain(key) {
        let found =
            described.iter().enumerate().find(|(_, c)| c.name.eq_ignore_ascii_case(spec.name));
        let Some((ordinal, column)) = found else {
            let names: Vec<&str> = described.iter().map(|c| c.name.as_str()).collect();
            return Err(ExportError::MissingColumn {
                column: spec.name,
                returned: names.join(", "),
            });
        };
        let decoder = column.decoder(spec.kind).ok_or_else(|| ExportError::ColumnType {
            column: spec.name,
            type_name: column.type_name.clone(),
            expected: expected_type(spec.kind),
        })?;
        if decoder == Decoder::Null && !spec.nullable {
            return Err(ExportError::AlwaysNull(spec.name));
        }
        reads.push(ColumnRead { ordinal, kind: spec.kind, decoder });
    }
    Ok(reads)
}

fn expected_type(kind: ColumnKind) -> &'static str {
    match kind {
        ColumnKind::Text => "a text type (VARCHAR, TEXT)",
        ColumnKind::Int64 => "an integer type (BIGINT)",
        ColumnKind::Int32 => "an integer type (INT)",
        ColumnKind::Timestamp => "a timestamp type (DATETIME, TIMESTAMP, timestamptz)",
    }
}

/// Splits `[min, max]` into ranges of roughly `chunk_rows` rows (equal key widths).
fn split(min: Option<i64>, max: Option<i64>, count: i64, chunk_rows: u64) -> Vec<(i64, i64)> {
    let (Some(min), Some(max)) = (min, max) else { return Vec::new() };
    let span = i128::from(max) - i128::from(min) + 1;
    let wanted = (count.max(1) as u64).div_ceil(chunk_rows.max(1)).max(1);
    let n = i128::from(wanted).min(span).max(1);
    (0..n)
        .map(|i| {
            let lo = i128::from(min) + span * i / n;
            let hi = i128::from(min) + span * (i + 1) / n - 1;
            (lo as i64, hi as i64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_the_keys_without_gaps() {
        assert!(split(None, None, 0, 10).is_empty());
        assert_eq!(split(Some(5), Some(5), 1, 10), vec![(5, 5)]);
        let ranges = split(Some(1), Some(100), 1000, 300);
        assert_eq!(ranges.len(), 4);
        assert_eq!(ranges.first().unwrap().0, 1);
        assert_eq!(ranges.last().unwrap().1, 100);
        assert!(ranges.windows(2).all(|w| w[0].1 + 1 == w[1].0));
        assert_eq!(split(Some(i64::MIN), Some(i64::MAX), 10, 5).last().unwrap().1, i64::MAX);
        assert_eq!(split(Some(1), Some(3), 100, 1).len(), 3);
    }
}
