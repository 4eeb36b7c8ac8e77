//! Two writers of one folder at once never mix it: two `run`s with the same `--out` and id,
//! two `export`s of one snapshot. Exactly one publishes; the other fails with a clear
//! message (or, a `run` that finds the same run complete, writes nothing and exits 0). The
//! folder is never mixed: its manifest lists exactly the files it holds, byte for byte
//! those of an uninterrupted run. On S3 the same through the create-only put (a conditional
//! put) of the local S3-compatible server.

use std::process::{Child, Output, Stdio};

use effect_recon::storage::Location;

use super::super::common::{command, effect_recon, repo, say_skipped, text};
use super::{comparable_tree, manifest_problems, say, soak, CUT, RUN};

/// What a `run` says that finds the very same run already published: it writes nothing
/// and exits 0 (a retry is not an error), so it is a loser that succeeds.
const FOUND_COMPLETE: &str = "already complete with the same inputs";

/// The messages a losing writer may get, depending on how far the winner was.
const LOSER_MESSAGES: [&str; 6] = [
    FOUND_COMPLETE,
    "already exists; pass --replace",
    "another run is writing this folder",
    "another run with this id finished first",
    "another snapshot writer is writing this folder",
    "already holds a complete snapshot",
];

fn spawn(args: &[&str]) -> Child {
    command(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

/// Both outcomes of a race, the winner first; asserts one publisher (exit 0) and one
/// loser: a clear exit 2, or a `run` that found the winner's run complete (exit 0).
fn one_winner(a: Output, b: Output, what: &str) -> String {
    let found_complete = |o: &Output| text(o).1.contains(FOUND_COMPLETE);
    let (winner, loser) = match (a.status.code(), b.status.code()) {
        (Some(0), Some(2)) => (a, b),
        (Some(2), Some(0)) => (b, a),
        (Some(0), Some(0)) if found_complete(&b) && !found_complete(&a) => (a, b),
        (Some(0), Some(0)) if found_complete(&a) && !found_complete(&b) => (b, a),
        other => panic!("{what}: exit codes {other:?}: {:?} / {:?}", text(&a), text(&b)),
    };
    let (_, message) = text(&loser);
    let kind = LOSER_MESSAGES
        .iter()
        .find(|m| message.contains(*m))
        .unwrap_or_else(|| panic!("{what}: the loser's message is not clear: {message}"));
    assert!(!message.contains("panicked"), "{message}");
    drop(winner);
    kind.to_string()
}

fn tiny() -> String {
    repo("fixtures/tiny/snapshot").display().to_string()
}

#[test]
fn two_runs_with_one_id_at_once_publish_exactly_one() {
    let reference = tempfile::tempdir().unwrap();
    let out = reference.path().to_str().unwrap();
    let output = effect_recon(&["run", "--snapshot", &tiny(), "--out", out, "-q"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output).1);
    let (expected, _) = comparable_tree(&reference.path().join(RUN));

    let rounds = if soak() { 60 } else { 8 };
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    for round in 0..rounds {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().to_str().unwrap();
        // Not quiet: a loser that finds the run complete says so on stderr.
        let args = ["run", "--snapshot", &tiny(), "--out", out];
        let (a, b) = (spawn(&args), spawn(&args));
        let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
        *kinds.entry(one_winner(a, b, &format!("round {round}"))).or_default() += 1;
        assert_eq!(manifest_problems(dir.path()), Vec::<String>::new());
        let (files, claims) = comparable_tree(&dir.path().join(RUN));
        assert!(files == expected, "round {round}: the folder differs from an uninterrupted run");
        assert!(claims.is_empty(), "round {round}: claims left: {claims:?}");
    }
    say(&format!("concurrency: {rounds}/{rounds} run races had exactly one publisher, 0 mixed folders; losers: {kinds:?}"));
}

#[test]
fn two_exports_of_one_snapshot_at_once_publish_exactly_one() {
    let dir = tempfile::tempdir().unwrap();
    let job = super::sqlite_job(dir.path());
    let job = job.to_str().unwrap();
    let reference = dir.path().join("reference");
    let output = effect_recon(&[
        "export",
        "--config",
        job,
        "--out",
        reference.to_str().unwrap(),
        "--cut",
        CUT,
        "-q",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output).1);
    let (expected, _) = comparable_tree(&reference);

    let rounds = if soak() { 30 } else { 5 };
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    for round in 0..rounds {
        let snapshot = dir.path().join(format!("race-{round}"));
        let args =
            ["export", "--config", job, "--out", snapshot.to_str().unwrap(), "--cut", CUT, "-q"];
        let (a, b) = (spawn(&args), spawn(&args));
        let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
        *kinds.entry(one_winner(a, b, &format!("round {round}"))).or_default() += 1;
        let (files, claims) = comparable_tree(&snapshot);
        assert!(
            files == expected,
            "round {round}: the snapshot differs from an uninterrupted export"
        );
        assert!(claims.is_empty(), "round {round}: claims left: {claims:?}");
        assert_eq!(manifest_problems(dir.path()), Vec::<String>::new());
    }
    say(&format!("concurrency: {rounds}/{rounds} export races had exactly one publisher, 0 mixed snapshots; losers: {kinds:?}"));
}

/// Reads every listed file of the run folder in the bucket and checks its hash.
async fn bucket_problems(folder: &Location) -> Vec<String> {
    use sha2::{Digest, Sha256};
    let mut problems = Vec::new();
    let Some(bytes) = folder.read_optional("manifest.json").await.unwrap() else {
        return vec!["no manifest".into()];
    };
    let manifest: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let mut listed = vec![manifest["summary"].clone()];
    for table in manifest["tables"].as_object().unwrap().values() {
        listed.extend(table["files"].as_array().unwrap().iter().cloned());
    }
    for file in listed {
        let path = file["path"].as_str().unwrap();
        match folder.read_optional(path).await.unwrap() {
            Some(bytes)
                if hex::encode(Sha256::digest(&bytes)) == file["sha256"].as_str().unwrap() => {}
            Some(_) => problems.push(format!("{path}: other bytes")),
            None => problems.push(format!("{path}: missing")),
        }
    }
    problems
}

#[tokio::test]
async fn two_runs_at_once_on_s3_publish_exactly_one() {
    let Ok(bucket) = std::env::var("EFFECT_RECON_TEST_S3_BUCKET") else {
        say_skipped("EFFECT_RECON_TEST_S3_BUCKET", "the S3 race test was NOT run");
        return;
    };
    let rounds = if soak() { 20 } else { 4 };
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    for round in 0..rounds {
        let out = format!(
            "s3://{bucket}/reliab-race-{}-{}-{round}",
            std::process::id(),
            chrono::Utc::now().timestamp_micros()
        );
        let args = ["run", "--snapshot", &tiny(), "--out", &out];
        let (a, b) = (spawn(&args), spawn(&args));
        let (a, b) = tokio::task::spawn_blocking(move || {
            (a.wait_with_output().unwrap(), b.wait_with_output().unwrap())
        })
        .await
        .unwrap();
        *kinds.entry(one_winner(a, b, &format!("s3 round {round}"))).or_default() += 1;
        let folder = Location::parse(&out).unwrap().join(RUN);
        assert_eq!(bucket_problems(&folder).await, Vec::<String>::new(), "s3 round {round}");
        assert!(
            !folder.exists("_writing.000000").await.unwrap()
                && !folder.exists("_writing.000001").await.unwrap(),
            "s3 round {round}: a claim was left"
        );
    }
    say(&format!(
        "concurrency: {rounds}/{rounds} S3 run races had exactly one publisher; losers: {kinds:?}"
    ));
}
