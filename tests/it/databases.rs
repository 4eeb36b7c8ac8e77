//! The real databases of the tests: MariaDB and PostgreSQL when their URLs are set
//! (`.ci/run` sets both), a fresh database or schema per test; otherwise the test says,
//! by name, that it did not run.

use sqlx::Connection;

/// The MariaDB/MySQL server of the tests.
pub(crate) const MYSQL_ENV: &str = "EFFECT_RECON_TEST_MYSQL_URL";
/// The PostgreSQL server of the tests.
pub(crate) const PG_ENV: &str = "EFFECT_RECON_TEST_PG_URL";

/// The URL in `var`, or `None` after saying (by test name) that the test did not run.
pub(crate) fn env_url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            super::common::say_skipped(var, "this database test was NOT run");
            None
        }
    }
}

/// A fresh MySQL database `name` on the server of `base`; returns its URL.
pub(crate) async fn mysql_database(base: &str, name: &str) -> String {
    let mut conn = sqlx::MySqlConnection::connect(base)
        .await
        .unwrap_or_else(|e| panic!("{MYSQL_ENV} is set but the server is unreachable: {e}"));
    sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {name}; CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .unwrap();
    let mut url = url::Url::parse(base).unwrap();
    url.set_path(&format!("/{name}"));
    url.to_string()
}

/// A fresh Postgres schema `name` on the database of `base`; returns a URL whose search_path is it.
pub(crate) async fn pg_schema(base: &str, name: &str) -> String {
    let mut conn = sqlx::PgConnection::connect(base)
        .await
        .unwrap_or_else(|e| panic!("{PG_ENV} is set but the server is unreachable: {e}"));
    sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"))
        .execute(&mut conn)
        .await
        .unwrap();
    let mut url = url::Url::parse(base).unwrap();
    url.query_pairs_mut().append_pair("options", &format!("-c search_path={name}"));
    url.to_string()
}
