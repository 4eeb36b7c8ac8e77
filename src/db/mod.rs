//! Everything that talks to a team database, in both directions, and the only module that
//! uses sqlx: [`export`] (sources → Parquet snapshot), [`load`] (a snapshot → the
//! recommended schema), [`publish`] (a run's tasks → the team's task table) and
//! [`reopen`] (the audited ledger rollback), over one connection type ([`conn`]) with all
//! database-side SQL text in [`dialect`].
//!
//! The write-back tools (`publish`, `reopen`) connect through [`WriteTarget`]: the URL
//! checked (no password in it, like a job config's sources), the password read from
//! `password_env` at connect time, table names checked to be plain identifiers (they are
//! spliced into SQL text, never bound), and every error message scrubbed of the password
//! before it leaves.

pub(crate) mod conn;
mod dialect;
mod error;
pub mod export;
pub mod load;
pub mod publish;
pub mod reopen;

pub use error::{ExportError, WriteError};

use crate::config::job::Driver;
use crate::error::{Error, Result};
use conn::{Conn, Target};

/// How long a write-back tool waits for a database to answer the connect.
pub const CONNECT_TIMEOUT_MICROS: i64 = 15_000_000;

/// A database the tool writes to, resolved but not yet connected. Its `Debug` shows the
/// URL, never the password.
#[derive(Clone)]
pub struct WriteTarget {
    /// The tool, for messages (`publish`, `reopen`).
    pub tool: &'static str,
    /// The connection target (password included, never printed).
    pub target: Target,
}

impl std::fmt::Debug for WriteTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteTarget")
            .field("tool", &self.tool)
            .field("url", &self.target.url)
            .field("password", &self.target.password.as_ref().map(|_| "***"))
            .finish()
    }
}

impl WriteTarget {
    /// Checks `url` and reads the password from `password_env` (when given).
    pub fn new(tool: &'static str, url: &str, password_env: Option<&str>) -> Result<Self> {
        let driver = Driver::of_url(url).ok_or_else(|| {
            Error::argument("url", "must start with mysql://, mariadb://, postgres:// or sqlite:")
        })?;
        if driver != Driver::Sqlite {
            let parsed = url::Url::parse(url)
                .map_err(|e| Error::argument("url", format!("not a valid URL: {e}")))?;
            if parsed.password().is_some() {
                return Err(Error::argument(
                    "url",
                    "contains a password; remove it and name an environment variable with --password-env",
                ));
            }
        }
        let password = match password_env {
            Some(var) => Some(std::env::var(var).map_err(|_| {
                Error::argument("--password-env", format!("environment variable {var} is not set"))
            })?),
            None => None,
        };
        let target =
            Target { driver, url: url.to_string(), password, offset_secs: 0, read_only: false };
        Ok(WriteTarget { tool, target })
    }

    /// The database family.
    pub fn driver(&self) -> Driver {
        self.target.driver
    }

    /// Connects (bounded by [`CONNECT_TIMEOUT_MICROS`]).
    pub(crate) async fn connect(&self, table: &str) -> Result<Conn> {
        conn::connect(&self.target, CONNECT_TIMEOUT_MICROS).await.map_err(|m| self.error(table, m))
    }

    /// An error about `table`, scrubbed of the password.
    pub fn error(&self, table: &str, message: impl std::fmt::Display) -> Error {
        Error::Database {
            tool: self.tool,
            table: table.to_string(),
            message: self.target.scrub(&message.to_string()),
        }
    }
}

/// Checks that `name` is a plain SQL identifier (`[A-Za-z_][A-Za-z0-9_]*`, at most 64).
pub(crate) fn check_identifier(option: &'static str, name: &str) -> Result<()> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if first_ok && name.len() <= 64 && chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Ok(())
    } else {
        Err(Error::argument(
            option,
            format!("'{name}' is not a plain table name (letters, digits and '_', at most 64)"),
        ))
    }
}

/// The DDL text of a recommended table, renamed to `table` (index names follow).
pub(crate) fn ddl(text: &str, default_name: &str, table: &str) -> String {
    text.replace(default_name, table)
}

/// Runs `$body` with `$c` bound to the driver's connection and `$db` to its sqlx database
/// type, so one piece of code serves MySQL, PostgreSQL and SQLite.
macro_rules! on_conn {
    ($conn:expr, $c:ident, $db:ident => $body:expr) => {
        match $conn {
            $crate::db::conn::Conn::MySql($c) => {
                #[allow(dead_code)]
                type $db = sqlx::MySql;
                $body
            }
            $crate::db::conn::Conn::Postgres($c) => {
                #[allow(dead_code)]
                type $db = sqlx::Postgres;
                $body
            }
            $crate::db::conn::Conn::Sqlite($c) => {
                #[allow(dead_code)]
                type $db = sqlx::Sqlite;
                $body
            }
        }
    };
}

pub(crate) use on_conn;

/// How each family stores an instant in the recommended write-back tables: MySQL
/// `DATETIME(6)` as UTC wall time, Postgres `timestamptz`, SQLite fixed-width UTC text
/// (so text order is time order).
pub(crate) trait Stamp: sqlx::Database {
    /// The bound value.
    type Stamped: for<'q> sqlx::Encode<'q, Self> + sqlx::Type<Self> + Send + 'static;
    /// The value of an instant (UTC µs).
    fn stamp(micros: crate::time::Micros) -> Self::Stamped;
}

impl Stamp for sqlx::MySql {
    type Stamped = chrono::NaiveDateTime;
    fn stamp(micros: crate::time::Micros) -> Self::Stamped {
        conn::naive(micros, 0)
    }
}

impl Stamp for sqlx::Postgres {
    type Stamped = chrono::DateTime<chrono::Utc>;
    fn stamp(micros: crate::time::Micros) -> Self::Stamped {
        conn::utc(micros)
    }
}

impl Stamp for sqlx::Sqlite {
    type Stamped = String;
    fn stamp(micros: crate::time::Micros) -> Self::Stamped {
        conn::sqlite_text(conn::naive(micros, 0))
    }
}
