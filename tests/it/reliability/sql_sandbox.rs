//! `sql` is read-only for real: no statement reads or writes a file or URL outside the
//! registered tables, memory is bounded by default with a clear error, and Ctrl-C cancels a
//! query without killing the shell.

use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::super::common::{command, effect_recon, repo, text};
use super::say;

fn tiny() -> String {
    repo("fixtures/tiny/snapshot").display().to_string()
}

/// Runs `sql -c <statement>` over the tiny snapshot with `extra` arguments.
fn sql(statement: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let snapshot = tiny();
    let mut args = vec!["sql", "--snapshot", snapshot.as_str(), "-c", statement];
    args.extend_from_slice(extra);
    let output = effect_recon(&args);
    let (stdout, stderr) = text(&output);
    (output.status.code(), stdout, stderr)
}

#[test]
fn no_statement_reads_or_writes_outside_the_registered_tables() {
    let dir = tempfile::tempdir().unwrap();
    let target = |name: &str| dir.path().join(name).display().to_string();
    let (csv, parquet, json) = (target("out.csv"), target("out.parquet"), target("out.json"));
    let refused = "this session is read-only";
    let not_found = "not found";
    // (statement, a part of the error it must get)
    let cases: Vec<(String, &str)> = vec![
        ("SELECT * FROM '/etc/passwd'".into(), not_found),
        ("SELECT * FROM 'file:///etc/passwd'".into(), not_found),
        ("SELECT * FROM \"/etc/passwd\"".into(), not_found),
        (format!("SELECT * FROM '{}/ledger/part-00000.parquet'", tiny()), not_found),
        ("SELECT * FROM 's3://another-bucket/x.parquet'".into(), not_found),
        ("SELECT * FROM read_parquet('/etc/passwd')".into(), not_found),
        ("SELECT * FROM read_csv('/etc/passwd')".into(), not_found),
        ("SELECT * FROM parquet_metadata('/etc/passwd')".into(), not_found),
        (
            "CREATE EXTERNAL TABLE p (line VARCHAR) STORED AS CSV LOCATION '/etc/passwd'".into(),
            refused,
        ),
        (
            "CREATE EXTERNAL TABLE p STORED AS PARQUET LOCATION 's3://another-bucket/'".into(),
            refused,
        ),
        ("CREATE TABLE t AS SELECT * FROM ledger".into(), refused),
        ("CREATE VIEW v AS SELECT * FROM ledger".into(), refused),
        ("DROP TABLE ledger".into(), refused),
        ("INSERT INTO ledger SELECT * FROM ledger".into(), refused),
        ("DELETE FROM ledger".into(), refused),
        ("UPDATE ledger SET action = 'DONE'".into(), refused),
        (format!("COPY (SELECT 1 AS x) TO '{csv}'"), refused),
        (format!("COPY ledger TO '{parquet}' STORED AS PARQUET"), refused),
        (format!("EXPLAIN COPY ledger TO '{json}' STORED AS JSON"), refused),
        (format!("EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{csv}'"), refused),
        ("EXPLAIN ANALYZE INSERT INTO ledger SELECT * FROM ledger".into(), refused),
        ("SET datafusion.execution.target_partitions = 1".into(), refused),
        ("SET datafusion.catalog.location = '/etc'".into(), refused),
        ("PREPARE p AS SELECT 1".into(), refused),
        ("BEGIN TRANSACTION".into(), "Unsupported SQL statement"),
        (format!("SELECT 1; COPY (SELECT 1 AS x) TO '{csv}'"), refused),
    ];
    for (statement, expected) in &cases {
        let (code, stdout, stderr) = sql(statement, &[]);
        assert_eq!(code, Some(2), "{statement}: {stdout}{stderr}");
        assert!(stderr.contains(expected), "{statement}: expected '{expected}' in: {stderr}");
        assert!(!stderr.contains("panicked"), "{statement}: {stderr}");
        assert!(!stdout.contains("root:"), "{statement} read /etc/passwd: {stdout}");
    }
    let written: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(written.is_empty(), "a refused statement wrote a file: {written:?}");
    // The registered tables and the harmless table functions still work.
    let (code, stdout, stderr) =
        sql("SELECT count(*) AS n FROM generate_series(1, 3)", &["--format", "csv"]);
    assert_eq!((code, stdout.as_str()), (Some(0), "n\n3\n"), "{stderr}");
    say(&format!(
        "sql sandbox: {n}/{n} hostile statements refused, 0 files written",
        n = cases.len()
    ));
}

#[test]
fn memory_is_bounded_by_default_with_a_clear_error() {
    // An aggregate that cannot spill, under an explicit small limit and under the default.
    let statement = "SELECT array_agg(v) AS all_values FROM generate_series(1, 400000000) AS t(v)";
    let started = Instant::now();
    let (code, stdout, stderr) = sql(statement, &["--memory-limit", "64MiB"]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(stderr.contains("out of memory under --memory-limit"), "{stderr}");
    // Under the default (1 GiB): 10 kB values, so the limit is reached in seconds.
    let wide = "SELECT array_agg(repeat('x', 10000)) AS all_values FROM generate_series(1, 1000000) AS t(v)";
    let (code, stdout, stderr) = sql(wide, &[]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(stderr.contains("out of memory under --memory-limit"), "{stderr}");
    // A result too large to hold for a table is refused, naming the limit; CSV streams.
    let rows = "SELECT v FROM generate_series(1, 1000000) AS t(v)";
    let (code, stdout, stderr) = sql(rows, &["--memory-limit", "4MiB"]);
    assert_eq!(code, Some(2), "{}", &stdout[..stdout.len().min(300)]);
    assert!(stderr.contains("more than the memory limit (4 MiB)"), "{stderr}");
    let (code, stdout, stderr) = sql(rows, &["--memory-limit", "4MiB", "--format", "csv"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout.lines().count(), 1_000_001);
    say(&format!(
        "sql memory: 3/3 oversized statements refused with a clear error, 1 streamed ({} ms)",
        started.elapsed().as_millis()
    ));
}

#[test]
fn ctrl_c_cancels_the_query_and_keeps_the_shell() {
    let mut child = command(&["sql", "--snapshot", &tiny(), "--format", "csv"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(
            b"SELECT sum(v % 7) AS endless FROM generate_series(1, 100000000000000) AS t(v);\n",
        )
        .unwrap();
    stdin.flush().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let started = Instant::now();
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    stdin.write_all(b"SELECT 41 + 1 AS answer;\n").unwrap();
    drop(stdin);
    let output = wait_at_most(child, Duration::from_secs(60));
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stderr.contains("cancelled (Ctrl-C); the shell is still open"), "{stderr}");
    assert_eq!(stdout, "answer\n42\n", "{stderr}");
    assert!(!stdout.contains("endless"), "the endless query finished?");
    say(&format!(
        "sql ctrl-c: 1/1 query cancelled, shell answered the next one ({} ms after the signal)",
        started.elapsed().as_millis()
    ));
}

/// Waits for a child, killing it (and failing) after `limit`.
pub(crate) fn wait_at_most(
    mut child: std::process::Child,
    limit: Duration,
) -> std::process::Output {
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            panic!("still running after {limit:?}: {}", text(&output).1);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
