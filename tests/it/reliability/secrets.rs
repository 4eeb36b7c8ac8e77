//! Secrets stay secret: a canary password given through `password_env` never appears in any
//! output, log line, error (sqlx connection errors included), summary, manifest or file,
//! whether the job fails (refused connections, bad credentials, an unknown role) or
//! succeeds. Logging is turned all the way up (`RUST_LOG=trace`, `RUST_BACKTRACE=full`) so
//! nothing is hidden by a quiet default.

use std::path::Path;
use std::process::Output;

use sqlx::Connection;

use super::super::common::{command, text};
use super::super::databases::{env_url, mysql_database, MYSQL_ENV, PG_ENV};
use super::{job_file, say, CUT};

const CANARY: &str = "CaNaRy-13-Zq9x-pw";
const VAR: &str = "EFFECT_RECON_RELIAB_CANARY";

/// Runs `export` then `nightly` of a job whose sources read `url` with the canary.
fn both_commands(dir: &Path, url: &str) -> Vec<(String, Output)> {
    let job = job_file(dir, url, Some(VAR));
    let job = job.to_str().unwrap();
    let snapshot = dir.join("exported");
    let runs: [(&str, Vec<&str>); 2] = [
        (
            "export",
            vec!["export", "--config", job, "--out", snapshot.to_str().unwrap(), "--cut", CUT],
        ),
        ("nightly", vec!["nightly", "--config", job, "--cut", CUT]),
    ];
    runs.into_iter()
        .map(|(name, args)| {
            let output = command(&args)
                .env(VAR, CANARY)
                .env("RUST_LOG", "trace")
                .env("RUST_BACKTRACE", "full")
                .output()
                .unwrap();
            (name.to_string(), output)
        })
        .collect()
}

/// Asserts the canary is nowhere: not in the outputs, not in any file under `dir`.
fn assert_no_canary(what: &str, outputs: &[(String, Output)], dir: &Path) -> usize {
    let mut checked = 0;
    for (name, output) in outputs {
        let (stdout, stderr) = text(output);
        assert!(
            !stdout.contains(CANARY) && !stderr.contains(CANARY),
            "{what} {name}: {stdout}{stderr}"
        );
        checked += 2;
    }
    for (file, bytes) in super::super::common::tree_bytes(dir) {
        let hit = bytes.windows(CANARY.len()).any(|w| w == CANARY.as_bytes());
        assert!(!hit, "{what}: {file} holds the canary");
        checked += 1;
    }
    checked
}

/// Every failure case: the exit code 2 and a clear cause, never the canary.
fn failing(what: &str, url: &str, cause: &[&str]) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let outputs = both_commands(dir.path(), url);
    for (name, output) in &outputs {
        let (_, stderr) = text(output);
        assert_eq!(output.status.code(), Some(2), "{what} {name}: {stderr}");
        assert!(cause.iter().any(|c| stderr.contains(c)), "{what} {name}: {stderr}");
        assert!(!stderr.contains("panicked"), "{what} {name}: {stderr}");
    }
    assert_no_canary(what, &outputs, dir.path())
}

#[test]
fn the_canary_never_leaks_from_refused_connections() {
    let mut checked = 0;
    checked +=
        failing("mysql refused", "mysql://reliab@127.0.0.1:1/nothing", &["refused", "connect"]);
    checked += failing(
        "postgres refused",
        "postgres://reliab@127.0.0.1:1/nothing",
        &["refused", "connect"],
    );
    say(&format!("secrets: 4/4 failing commands (refused connections) without the canary in {checked} outputs and files"));
}

#[tokio::test]
async fn the_canary_never_leaks_from_mariadb_bad_credentials_or_a_good_run() {
    let Some(base) = env_url(MYSQL_ENV) else { return };
    let url = mysql_database(&base, "reliab_secrets").await;
    let tiny = effect_recon::storage::Location::parse(
        super::super::common::repo("fixtures/tiny/snapshot").to_str().unwrap(),
    )
    .unwrap();
    effect_recon::db::load::load_snapshot(&tiny, &url, &Default::default()).await.unwrap();
    let mut admin = sqlx::MySqlConnection::connect(&base).await.unwrap();
    for host in ["%", "localhost"] {
        sqlx::raw_sql(&format!(
            "DROP USER IF EXISTS 'reliab_canary'@'{host}'; CREATE USER 'reliab_canary'@'{host}' IDENTIFIED BY '{CANARY}'; GRANT SELECT ON reliab_secrets.* TO 'reliab_canary'@'{host}'"
        ))
        .execute(&mut admin)
        .await
        .unwrap();
    }
    let mut user = url::Url::parse(&url).unwrap();
    user.set_username("reliab_canary").unwrap();
    // The right password: the job succeeds, and nothing it wrote holds the password.
    let dir = tempfile::tempdir().unwrap();
    let outputs = both_commands(dir.path(), user.as_str());
    for (name, output) in &outputs {
        assert_eq!(output.status.code(), Some(0), "{name}: {:?}", text(output));
    }
    let mut checked = assert_no_canary("mariadb good", &outputs, dir.path());
    // A wrong user with the canary as its password: Access denied, without it.
    let mut wrong = user.clone();
    wrong.set_username("reliab_nobody").unwrap();
    checked += failing("mariadb denied", wrong.as_str(), &["Access denied"]);
    say(&format!("secrets: 4/4 MariaDB commands (2 succeeding, 2 denied) without the canary in {checked} outputs and files"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_canary_never_leaks_from_a_postgres_unknown_role() {
    let Some(base) = env_url(PG_ENV) else { return };
    let mut url = url::Url::parse(&base).unwrap();
    url.set_username("reliab_no_such_role").unwrap();
    let checked = tokio::task::block_in_place(|| {
        failing("postgres unknown role", url.as_str(), &["reliab_no_such_role", "authentication"])
    });
    say(&format!("secrets: 2/2 PostgreSQL commands (unknown role) without the canary in {checked} outputs and files"));
}
