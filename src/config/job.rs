//! The job config of docs/JOB_CONFIG.md: where the snapshot and runs go, which rules judge them,
//! and which database queries feed each snapshot table.
//!
//! Invariants after [`JobConfig::load`]: every table has at least one source; source names
//! are safe folder names and unique per table; no URL carries a password (passwords only
//! come from `password_env`, read at connect time); every timezone is a fixed offset.
//! This module holds no database code: [`crate::db::export`] is the only one that connects.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use url::Url;

use crate::error::{Error, Result};
use crate::snapshot::Table;
use crate::time::{parse_duration, parse_offset, Micros, DAY_MICROS};

/// Default `lookback` when the file does not set one.
pub const DEFAULT_LOOKBACK: &str = "30d";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobFile {
    root: Option<String>,
    rules: Option<String>,
    lookback: Option<String>,
    #[serde(default)]
    export: ExportFile,
    #[serde(default)]
    incremental: IncrementalFile,
    #[serde(default)]
    source: Vec<SourceEntry>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct IncrementalFile {
    margin: Option<String>,
    verify_full_every: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExportFile {
    connections: Option<usize>,
    chunk_rows: Option<u64>,
    batch_rows: Option<usize>,
    rows_per_file: Option<usize>,
    connect_timeout: Option<String>,
    verify_counts: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SourceEntry {
    table: String,
    name: String,
    url: String,
    password_env: Option<String>,
    timezone: Option<String>,
    query: String,
    key: Option<String>,
    changed_column: Option<String>,
}

/// A validated job config.
#[derive(Debug, Clone)]
pub struct JobConfig {
    /// The config file, as given (named in errors).
    pub path: PathBuf,
    /// Where `snapshot=<cut>/` and `run=<id>/` are written (`nightly` needs it).
    pub root: Option<String>,
    /// The rules file, resolved against the config's folder; `None` = embedded default.
    pub rules: Option<PathBuf>,
    /// Rows newer than `since - lookback` are exported.
    pub lookback: Micros,
    /// Exporter settings (`[export]`).
    pub export: ExportSettings,
    /// Incremental nights (`[incremental]`).
    pub incremental: IncrementalSettings,
    /// The sources, in file order.
    pub sources: Vec<SourceConfig>,
}

/// The `[export]` section: how the exporter reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportSettings {
    /// Connections per database (chunks read in parallel); SQLite always uses one.
    pub connections: usize,
    /// A source with more rows than this is split into `order_id` key-range chunks.
    pub chunk_rows: u64,
    /// Rows per Arrow batch.
    pub batch_rows: usize,
    /// Rows per Parquet file.
    pub rows_per_file: usize,
    /// Give up connecting after this long (microseconds).
    pub connect_timeout: Micros,
    /// Check each chunk's streamed rows against a COUNT in the same snapshot.
    pub verify_counts: bool,
    /// Read only the rows of these `order_id`s (inclusive), each source as one range
    /// chunk: the one-order path (`explain --config`, `reopen --order`). Never set by a
    /// config file.
    pub only_orders: Option<(i64, i64)>,
}

impl Default for ExportSettings {
    fn default() -> Self {
        ExportSettings {
            connections: 4,
            // Measured on a 1M-order day in MariaDB (8.5M rows, 4 connections): the optimizer
            // answers an order_id range of a wrapped query with a full scan + filesort, so
            // chunks cost a scan each; 250k-row chunks took 48.5 s, 900k 28.1 s, one chunk
            // per source 23.8 s. Chunk only sources too large for one sorted read.
            chunk_rows: 4_000_000,
            batch_rows: 8192,
            rows_per_file: crate::storage::parquet_parts::ROWS_PER_FILE,
            connect_timeout: 30_000_000,
            verify_counts: true,
            only_orders: None,
        }
    }
}

/// Default `[incremental] margin`.
pub const DEFAULT_MARGIN: &str = "5m";

/// The `[incremental]` section: how nights follow each other (docs/JOB_CONFIG.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncrementalSettings {
    /// Subtracted from the watermark probe: covers the seconds granularity of the
    /// database's transaction start times and clock steps (microseconds).
    pub margin: Micros,
    /// Every Nth night of a chain also reads a full export and compares (0 = only on
    /// `nightly --verify-full`).
    pub verify_full_every: u32,
}

impl Default for IncrementalSettings {
    fn default() -> Self {
        IncrementalSettings { margin: 5 * 60 * 1_000_000, verify_full_every: 7 }
    }
}

/// The database family of a source URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Driver {
    /// `mysql://` (and `mariadb://`).
    MySql,
    /// `postgres://` / `postgresql://`.
    Postgres,
    /// `sqlite:`.
    Sqlite,
}

impl Driver {
    /// The driver of a URL, from its scheme.
    pub fn of_url(url: &str) -> Option<Driver> {
        let scheme = url.split(':').next()?.to_ascii_lowercase();
        match scheme.as_str() {
            "mysql" | "mariadb" => Some(Driver::MySql),
            "postgres" | "postgresql" => Some(Driver::Postgres),
            "sqlite" => Some(Driver::Sqlite),
            _ => None,
        }
    }

    /// Short name for messages and file names.
    pub fn name(self) -> &'static str {
        match self {
            Driver::MySql => "mysql",
            Driver::Postgres => "postgres",
            Driver::Sqlite => "sqlite",
        }
    }
}

/// One `[[source]]`.
#[derive(Debug, Clone)]
pub struct SourceConfig {
    /// The snapshot table it feeds.
    pub table: Table,
    /// Names the receipts folder and every message about the source.
    pub name: String,
    /// The database family.
    pub driver: Driver,
    /// Connection URL without a password (SQLite paths resolved against the config's folder).
    pub url: String,
    /// Environment variable holding the password, read at connect time.
    pub password_env: Option<String>,
    /// Offset of zone-less timestamps and of the bound parameters, in seconds east of UTC.
    pub utc_offset_secs: i32,
    /// The SELECT; two bound parameters: lower bound, then the cut.
    pub query: String,
    /// The column (returned by the query) that identifies a row version across nights.
    pub key: Option<String>,
    /// The column (returned by the query) the database sets on every insert and update.
    pub changed_column: Option<String>,
}

impl SourceConfig {
    /// The key and change columns, when the source can be read incrementally.
    pub fn change_columns(&self) -> Option<(&str, &str)> {
        Some((self.key.as_deref()?, self.changed_column.as_deref()?))
    }

    /// `ledger[fulfilment]`, `receipts[points]`: how messages and progress name it.
    pub fn label(&self) -> String {
        format!("{}[{}]", self.table.name(), self.name)
    }
}

impl JobConfig {
    /// Reads and validates a job config file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::config(path.display(), format!("cannot read the job config: {e}"))
        })?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Self::parse(&text, path, &base)
    }

    /// Parses a job config; `path` names it in errors, relative paths resolve against `base`.
    pub fn parse(text: &str, path: &Path, base: &Path) -> Result<Self> {
        let shown = path.display().to_string();
        let fail = |message: String| Error::config(&shown, message);
        let file: JobFile = toml::from_str(text).map_err(|e| fail(e.to_string()))?;
        let lookback = parse_duration(file.lookback.as_deref().unwrap_or(DEFAULT_LOOKBACK))
            .map_err(|e| fail(format!("lookback: {e}")))?;
        let export = export_settings(file.export).map_err(|m| fail(format!("[export] {m}")))?;
        let incremental = incremental_settings(file.incremental)
            .map_err(|m| fail(format!("[incremental] {m}")))?;
        let mut sources = Vec::with_capacity(file.source.len());
        let mut names = BTreeSet::new();
        for (index, entry) in file.source.into_iter().enumerate() {
            let source = validate_source(entry, base)
                .map_err(|m| fail(format!("source {}: {m}", index + 1)))?;
            if !names.insert((source.table, source.name.clone())) {
                return Err(fail(format!(
                    "source {}: table '{}' has two sources named '{}'",
                    index + 1,
                    source.table.name(),
                    source.name
                )));
            }
            sources.push(source);
        }
        for table in Table::ALL {
            if !sources.iter().any(|s| s.table == table) {
                return Err(fail(format!(
                    "no [[source]] for table '{}'; a snapshot needs all three tables",
                    table.name()
                )));
            }
        }
        let rules = file.rules.map(|r| base.join(r));
        // A plain relative root is relative to this file, like `rules` and SQLite paths.
        let root = file.root.map(|r| {
            if r.contains("://") || Path::new(&r).is_absolute() {
                r
            } else {
                base.join(r).display().to_string()
            }
        });
        Ok(JobConfig {
            path: path.to_path_buf(),
            root,
            rules,
            lookback,
            export,
            incremental,
            sources,
        })
    }

    /// The two bound parameters for a cut: `(since - lookback, cut)` with `since = cut - 1 day`.
    pub fn bounds(&self, cut: Micros) -> (Micros, Micros) {
        (cut - DAY_MICROS - self.lookback, cut)
    }
}

fn export_settings(file: ExportFile) -> Result<ExportSettings, String> {
    let mut settings = ExportSettings::default();
    let positive =
        |name: &str, v: u64| if v == 0 { Err(format!("{name} must be at least 1")) } else { Ok(v) };
    if let Some(v) = file.connections {
        settings.connections = positive("connections", v as u64)? as usize;
    }
    if let Some(v) = file.chunk_rows {
        settings.chunk_rows = positive("chunk_rows", v)?;
    }
    if let Some(v) = file.batch_rows {
        settings.batch_rows = positive("batch_rows", v as u64)? as usize;
    }
    if let Some(v) = file.rows_per_file {
        settings.rows_per_file = positive("rows_per_file", v as u64)? as usize;
    }
    if let Some(v) = file.connect_timeout {
        settings.connect_timeout =
            parse_duration(&v).map_err(|e| format!("connect_timeout: {e}"))?;
    }
    if let Some(v) = file.verify_counts {
        settings.verify_counts = v;
    }
    Ok(settings)
}

fn incremental_settings(file: IncrementalFile) -> Result<IncrementalSettings, String> {
    let mut settings = IncrementalSettings::default();
    if let Some(v) = file.margin {
        settings.margin = parse_duration(&v).map_err(|e| format!("margin: {e}"))?;
    }
    if let Some(v) = file.verify_full_every {
        settings.verify_full_every = v;
    }
    Ok(settings)
}

/// A column name spliced into the exporter's SQL: a plain identifier only.
fn check_column(what: &str, name: Option<String>) -> Result<Option<String>, String> {
    let Some(name) = name else { return Ok(None) };
    let plain = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !plain {
        return Err(format!("{what} '{name}' must be a plain column name (letters, digits, '_')"));
    }
    Ok(Some(name))
}

fn validate_source(entry: SourceEntry, base: &Path) -> Result<SourceConfig, String> {
    let SourceEntry { table, name, url, password_env, timezone, query, key, changed_column } =
        entry;
    let table = Table::from_name(&table)
        .ok_or_else(|| format!("table '{table}' is not one of ledger, status_history, receipts"))?;
    let name_ok =
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !name_ok {
        return Err(format!(
            "name '{name}' may only use letters, digits, '_' and '-' (it names a folder)"
        ));
    }
    let context = |m: String| format!("({}[{name}]) {m}", table.name());
    let driver = Driver::of_url(&url)
        .ok_or_else(|| context("url must start with mysql://, postgres:// or sqlite:".into()))?;
    let url = match driver {
        Driver::Sqlite => resolve_sqlite(&url, base),
        _ => check_network_url(&url).map_err(context)?,
    };
    if let Some(var) = &password_env {
        if var.is_empty() {
            return Err(context("password_env is empty".into()));
        }
    }
    let utc_offset_secs = match timezone.as_deref() {
        None => 0,
        Some(text) => parse_offset(text).map_err(context)?,
    };
    let query = query.trim().trim_end_matches(';').trim_end().to_string();
    if query.is_empty() {
        return Err(context("query is empty".into()));
    }
    let key = check_column("key", key).map_err(context)?;
    let changed_column = check_column("changed_column", changed_column).map_err(context)?;
    if key.is_some() != changed_column.is_some() {
        return Err(context(
            "key and changed_column go together: set both for incremental nights, or neither"
                .into(),
        ));
    }
    Ok(SourceConfig {
        table,
        name,
        driver,
        url,
        password_env,
        utc_offset_secs,
        query,
        key,
        changed_column,
    })
}

/// Network URLs must parse and must not carry a password (it would end up in the file).
fn check_network_url(url: &str) -> Result<String, String> {
    let parsed = Url::parse(url).map_err(|e| format!("url is not a valid URL: {e}"))?;
    if parsed.password().is_some() {
        return Err(
            "url contains a password; remove it and name an environment variable in password_env"
                .into(),
        );
    }
    Ok(url.to_string())
}

/// `sqlite:relative.db` and `sqlite://relative.db` resolve against the config's folder.
fn resolve_sqlite(url: &str, base: &Path) -> String {
    let rest = &url["sqlite:".len()..];
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let (path, query) = match rest.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (rest, None),
    };
    if path == ":memory:" || path.is_empty() || Path::new(path).is_absolute() {
        return url.to_string();
    }
    let joined = base.join(path);
    let mut out = format!("sqlite://{}", joined.display());
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
root = "file:///tmp/recon"
rules = "rules.toml"
lookback = "30d"
[[source]]
table = "ledger"
name = "fulfilment"
url = "mysql://reader@db1:3306/fulfilment"
password_env = "PW"
timezone = "+08:00"
query = "SELECT 1 WHERE ? < ?;"
[[source]]
table = "status_history"
name = "orders"
url = "postgres://reader@db2/orders"
query = "SELECT 1 WHERE $1 < $2"
[[source]]
table = "receipts"
name = "points"
url = "sqlite:points.db"
query = "SELECT 1 WHERE ? < ?"
"#;

    #[test]
    fn the_minimal_form_of_the_design_parses() {
        let job = JobConfig::parse(MINIMAL, Path::new("/etc/job.toml"), Path::new("/etc")).unwrap();
        assert_eq!(job.rules.as_deref(), Some(Path::new("/etc/rules.toml")));
        assert_eq!(job.lookback, 30 * DAY_MICROS);
        assert_eq!(job.sources[0].utc_offset_secs, 8 * 3600);
        assert_eq!(job.sources[0].query, "SELECT 1 WHERE ? < ?");
        assert_eq!(job.sources[1].driver, Driver::Postgres);
        assert_eq!(job.sources[2].url, "sqlite:///etc/points.db");
        assert_eq!(job.export, ExportSettings::default());
    }

    #[test]
    fn unknown_keys_and_passwords_in_urls_are_refused() {
        let typo = MINIMAL.replace("lookback", "look_back");
        assert!(JobConfig::parse(&typo, Path::new("j"), Path::new(""))
            .unwrap_err()
            .to_string()
            .contains("look_back"));
        let secret = MINIMAL.replace("reader@db1", "reader:hunter2@db1");
        let message =
            JobConfig::parse(&secret, Path::new("j"), Path::new("")).unwrap_err().to_string();
        assert!(message.contains("password_env") && !message.contains("hunter2"), "{message}");
    }

    #[test]
    fn the_commented_example_is_valid() {
        let text = include_str!("../../fixtures/job.example.toml");
        let job =
            JobConfig::parse(text, Path::new("fixtures/job.example.toml"), Path::new("fixtures"))
                .unwrap();
        assert_eq!(job.sources.len(), 5);
        assert_eq!(job.export, ExportSettings::default());
    }
}
