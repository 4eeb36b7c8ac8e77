//! Reviewed snapshots of what the binary prints (insta; `tests/it/snapshots/*.snap`), with
//! the volatile parts filtered: timings, temporary folders, the repository's path. After a
//! deliberate change of the output, `INSTA_UPDATE=always cargo test --test it snapshots`
//! rewrites them and the diff is reviewed like code.

use std::process::Output;

use super::common::*;

/// stdout, then stderr, then the exit code, as one reviewed text.
fn shown(output: &Output) -> String {
    format!(
        "--- stdout\n{}--- stderr\n{}--- exit {}\n",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        output.status.code().map_or("signal".to_string(), |c| c.to_string())
    )
}

fn settings(out: &std::path::Path) -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("snapshots");
    settings.set_prepend_module_to_snapshot(false);
    settings.add_filter(&regex_escape(out.to_str().unwrap()), "[OUT]");
    settings.add_filter(&regex_escape(repo("").to_str().unwrap().trim_end_matches('/')), "[REPO]");
    settings.add_filter(r"\b\d+(\.\d+)?(ms|s)\b", "[TIME]");
    settings
}

fn regex_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| if "\\.+*?()|[]{}^$".contains(c) { vec!['\\', c] } else { vec![c] })
        .collect()
}

#[test]
fn run_then_a_chained_run_then_history() {
    let out = tempfile::tempdir().unwrap();
    let (snapshot, dir) = (repo("fixtures/tiny/snapshot"), out.path().to_str().unwrap());
    let snapshot = snapshot.to_str().unwrap();
    let _guard = settings(out.path()).bind_to_scope();
    let noon = effect_recon(&[
        "run",
        "--snapshot",
        snapshot,
        "--out",
        dir,
        "--cut",
        "2026-11-29T12:00:00Z",
    ]);
    insta::assert_snapshot!("run_first_night", shown(&noon));
    let evening = effect_recon(&["run", "--snapshot", snapshot, "--out", dir, "--fail-on-breaks"]);
    insta::assert_snapshot!("run_chained_fail_on_breaks", shown(&evening));
    let history = effect_recon(&["history", "--out", dir]);
    insta::assert_snapshot!("history_table", shown(&history));
}

#[test]
fn refused_inputs_say_one_cause_naming_what_is_wrong() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().to_str().unwrap();
    let _guard = settings(out.path()).bind_to_scope();
    let snapshot = repo("fixtures/tiny/snapshot");
    let missing = effect_recon(&["run", "--snapshot", "fixtures/tiny/snapshotx", "--out", dir]);
    insta::assert_snapshot!("run_missing_snapshot", shown(&missing));
    let previous = effect_recon(&[
        "run",
        "--snapshot",
        snapshot.to_str().unwrap(),
        "--out",
        dir,
        "--previous",
        &format!("{dir}/run=nowhere"),
    ]);
    insta::assert_snapshot!("run_previous_not_a_run", shown(&previous));
}
