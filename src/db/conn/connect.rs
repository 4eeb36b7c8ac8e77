//! Connecting: the password from the environment, the session time zone, SQLite's
//! read-only or loader settings, all under one timeout.

use std::str::FromStr;

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteSynchronous};
use sqlx::{Connection, Executor};

use super::{Conn, Target};
use crate::db::dialect;
use crate::db::error::ExportError;
use crate::time::{format_offset, Micros};

/// Opens a connection, with a timeout.
pub(crate) async fn connect(target: &Target, timeout: Micros) -> Result<Conn, ExportError> {
    let limit = std::time::Duration::from_micros(timeout.max(1) as u64);
    match tokio::time::timeout(limit, connect_inner(target)).await {
        Ok(result) => {
            result.map_err(|source| ExportError::Connect { url: target.url.clone(), source })
        }
        Err(_) => Err(ExportError::ConnectTimeout {
            url: target.url.clone(),
            waited: crate::time::format_elapsed(limit),
        }),
    }
}

async fn connect_inner(target: &Target) -> Result<Conn, sqlx::Error> {
    let offset = format_offset(target.offset_secs);
    match target.driver {
        crate::config::job::Driver::MySql => {
            let url = target.url.replacen("mariadb://", "mysql://", 1);
            let mut options = MySqlConnectOptions::from_str(&url)?.timezone(Some(offset));
            if let Some(pw) = &target.password {
                options = options.password(pw);
            }
            Ok(Conn::MySql(MySqlConnection::connect_with(&options).await?))
        }
        crate::config::job::Driver::Postgres => {
            let mut options = PgConnectOptions::from_str(&target.url)?;
            if let Some(pw) = &target.password {
                options = options.password(pw);
            }
            let mut conn = PgConnection::connect_with(&options).await?;
            conn.execute(dialect::pg_set_time_zone(&offset).as_str()).await?;
            Ok(Conn::Postgres(conn))
        }
        crate::config::job::Driver::Sqlite => {
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
