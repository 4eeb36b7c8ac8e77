//! The binary: exit codes a scheduler can act on, a readable summary, read-only `sql`.

use super::common::*;

#[test]
fn run_exits_1_on_breaks_only_when_asked_and_prints_the_summary() {
    let out = tempfile::tempdir().unwrap();
    let snapshot = repo("fixtures/tiny/snapshot");
    let args =
        ["run", "--snapshot", snapshot.to_str().unwrap(), "--out", out.path().to_str().unwrap()];
    let first = effect_recon(&args);
    let (stdout, stderr) = text(&first);
    assert_eq!(first.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("SKIPPED_BUT_DUE") && stdout.contains("skip verdicts: WRONG 3"),
        "{stdout}"
    );
    assert!(stderr.contains("validated snapshot"), "progress goes to stderr: {stderr}");

    let mut again: Vec<&str> = args.to_vec();
    again.extend(["--replace", "--fail-on-breaks"]);
    assert_eq!(effect_recon(&again).status.code(), Some(1));

    // A scheduler's retry of a run that finished: nothing to do, the same answer.
    let manifest = || std::fs::read(out.path().join("run=20261129T160000Z/manifest.json")).unwrap();
    let before = manifest();
    let retried = effect_recon(&args);
    let (stdout, stderr) = text(&retried);
    assert_eq!(retried.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("already complete with the same inputs"), "{stderr}");
    assert!(stdout.contains("skip verdicts: WRONG 3"), "the summary of the existing run: {stdout}");
    let mut retried_strict = args.to_vec();
    retried_strict.push("--fail-on-breaks");
    assert_eq!(effect_recon(&retried_strict).status.code(), Some(1), "the same exit code");
    assert_eq!(manifest(), before, "nothing rewritten");

    // Other inputs under the same id are refused.
    let mut other_window = args.to_vec();
    other_window.extend(["--since", "2026-11-29T00:00:00Z"]);
    let refused = effect_recon(&other_window);
    let (_, stderr) = text(&refused);
    assert_eq!(refused.status.code(), Some(2));
    assert!(stderr.contains("already exists"), "{stderr}");
}

#[test]
fn run_on_a_missing_snapshot_exits_2_with_a_clear_message() {
    let out = tempfile::tempdir().unwrap();
    let output = effect_recon(&[
        "run",
        "--snapshot",
        "/nonexistent/snapshot",
        "--out",
        out.path().to_str().unwrap(),
    ]);
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr.contains("/nonexistent/snapshot") && stderr.contains("does not exist"),
        "{stderr}"
    );
}

#[test]
fn sql_queries_snapshot_and_run_outputs_in_every_format() {
    let out = tempfile::tempdir().unwrap();
    let snapshot = repo("fixtures/tiny/snapshot");
    let snapshot = snapshot.to_str().unwrap();
    assert_eq!(
        effect_recon(&["run", "-q", "--snapshot", snapshot, "--out", out.path().to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );
    let run = out.path().join("run=20261129T160000Z");
    let run = run.to_str().unwrap();
    let query = "SELECT class, count(*) AS n FROM discrepancies WHERE verdict = 'BREAK' GROUP BY class ORDER BY class";

    let table = effect_recon(&["sql", "--snapshot", snapshot, "--run", run, "-c", query]);
    let (stdout, stderr) = text(&table);
    assert_eq!(table.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("| SKIPPED_BUT_DUE   | 4 |"), "{stdout}");

    let csv = effect_recon(&[
        "sql",
        "--snapshot",
        snapshot,
        "--run",
        run,
        "--format",
        "csv",
        "-c",
        query,
    ]);
    assert!(text(&csv).0.starts_with("class,n\nDONE_NO_RECEIPT,2\n"), "{}", text(&csv).0);

    let json = effect_recon(&[
        "sql",
        "--snapshot",
        snapshot,
        "--format",
        "json",
        "-c",
        "SELECT count(*) AS n FROM ledger",
    ]);
    assert_eq!(text(&json).0.trim(), r#"{"n":25}"#);

    let parquet = out.path().join("result.parquet");
    let written = effect_recon(&[
        "sql",
        "--snapshot",
        snapshot,
        "--format",
        "parquet",
        "-o",
        parquet.to_str().unwrap(),
        "-c",
        "SELECT * FROM ledger ORDER BY msg_id",
    ]);
    assert_eq!(written.status.code(), Some(0), "{}", text(&written).1);
    assert!(std::fs::read(&parquet).unwrap().starts_with(b"PAR1"));
}

#[test]
fn sql_refuses_to_change_anything() {
    let snapshot = repo("fixtures/tiny/snapshot");
    for statement in [
        "CREATE TABLE x AS SELECT 1",
        "INSERT INTO ledger SELECT * FROM ledger",
        "COPY ledger TO '/tmp/effect-recon-copy.csv'",
        "DROP TABLE ledger",
        "SET datafusion.execution.batch_size = 1",
    ] {
        let output =
            effect_recon(&["sql", "--snapshot", snapshot.to_str().unwrap(), "-c", statement]);
        let (_, stderr) = text(&output);
        assert_eq!(output.status.code(), Some(2), "{statement}: {stderr}");
        assert!(stderr.contains("read-only"), "{statement}: {stderr}");
    }
}

#[test]
fn help_lists_every_command() {
    let (stdout, _) = text(&effect_recon(&["--help"]));
    for command in ["run", "sql"] {
        assert!(stdout.contains(command), "{stdout}");
    }
}

#[test]
fn demo_goes_through_sqlite_and_the_nightly_job_and_equals_the_truth() {
    let dir = tempfile::tempdir().unwrap();
    let demo = dir.path().join("demo");
    for attempt in 0..2 {
        // The second attempt proves a re-run in the same folder replaces the first.
        let output = effect_recon(&["demo", "--orders", "3000", "--dir", demo.to_str().unwrap()]);
        let (stdout, stderr) = text(&output);
        assert_eq!(output.status.code(), Some(0), "attempt {attempt}: {stdout}{stderr}");
        assert!(
            stderr.contains("demo: loaded") && stderr.contains("nightly: export done"),
            "{stderr}"
        );
        assert!(stdout.contains("verify: the run equals the truth exactly"), "{stdout}");
        assert!(stdout.contains("effect-recon sql --snapshot"), "{stdout}");
    }
    assert!(
        demo.join("fulfilment.db").exists()
            && demo.join("recon/run=20261129T160000Z/manifest.json").exists()
    );
}

#[test]
fn sql_reads_statements_from_standard_input_when_no_command_is_given() {
    use std::io::Write;
    let snapshot = repo("fixtures/tiny/snapshot");
    let mut child = command(&["sql", "--snapshot", snapshot.to_str().unwrap(), "--format", "csv"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let script = "SELECT count(*) AS orders\nFROM status_history\nWHERE status = 'PAID';\n-- a comment line\nSELECT effect FROM rules ORDER BY rule_id;\n";
    child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(stdout, "orders\n20\neffect\npoints_grant\nwms_lock\nlogistics_waybill\n");
}
