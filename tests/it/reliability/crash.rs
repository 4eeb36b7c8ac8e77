//! Crash anywhere, rerun, same result. `run`, `export` and `nightly` are killed with
//! SIGKILL at named stages (`EFFECT_RECON_CRASH_AT`, src/testing.rs) and at seeded random
//! times, while a reader polls the output root; then the same command runs again without
//! `--replace`. Required, and asserted per case:
//!
//! * the poller never saw a manifest over a missing or different file, and a folder
//!   without a manifest is never listed as a run (`complete_runs`);
//! * the rerun succeeds; when the kill came after the manifest was written, the job was
//!   already complete and the rerun says so (`already exists` / `already holds a
//!   complete snapshot`, exit 2) without touching it;
//! * the outputs then equal an uninterrupted run's, byte for byte (the summary's timings
//!   and the manifest's hash of them aside), with no leftover file: the folder holds
//!   exactly the files its manifest lists (claim objects `_writing.*` aside, which no
//!   reader looks at and which only a kill after the manifest can leave).

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use effect_recon::run_folder::complete_runs;
use effect_recon::storage::Location;

use super::super::common::{self, repo, text};
use super::{comparable_tree, say, seed, soak, Poller, Rng, CUT};

/// How a killed attempt and its rerun ended.
#[derive(Debug, Default)]
struct Tally {
    cases: usize,
    killed: usize,
    finished_before_kill: usize,
    reruns_identical: usize,
    already_complete: usize,
    polls: u64,
}

/// One command under test: its arguments with the output root of a case folder.
trait Job {
    /// The arguments of the command writing under `case`.
    fn args(&self, case: &Path) -> Vec<String>;
    /// The folders compared with the reference, relative to a case folder.
    fn compared(&self) -> Vec<&'static str>;
    /// The roots the poller watches, relative to a case folder.
    fn polled(&self) -> Vec<&'static str>;
    /// How a rerun of a job that had already published ends: the exit code, and what
    /// it says when it refuses (`run` and `nightly` find the same run complete and exit 0;
    /// `export` refuses a folder that holds a snapshot).
    fn rerun_of_complete(&self) -> (i32, Option<&'static str>);
}

struct RunJob;
impl Job for RunJob {
    fn args(&self, case: &Path) -> Vec<String> {
        let snapshot = repo("fixtures/tiny/snapshot").display().to_string();
        let out = case.join("out").display().to_string();
        vec!["run".into(), "--snapshot".into(), snapshot, "--out".into(), out, "-q".into()]
    }
    fn compared(&self) -> Vec<&'static str> {
        vec!["out/run=20261129T160000Z"]
    }
    fn polled(&self) -> Vec<&'static str> {
        vec!["out"]
    }
    fn rerun_of_complete(&self) -> (i32, Option<&'static str>) {
        (0, None)
    }
}

struct ExportJob;
impl Job for ExportJob {
    fn args(&self, case: &Path) -> Vec<String> {
        let job = super::sqlite_job(case).display().to_string();
        let out = case.join("snap").join("s").display().to_string();
        ["export", "--config", &job, "--out", &out, "--cut", CUT, "-q"].map(String::from).to_vec()
    }
    fn compared(&self) -> Vec<&'static str> {
        vec!["snap/s"]
    }
    fn polled(&self) -> Vec<&'static str> {
        vec!["snap"]
    }
    fn rerun_of_complete(&self) -> (i32, Option<&'static str>) {
        (2, Some("already holds a complete snapshot"))
    }
}

struct NightlyJob;
impl Job for NightlyJob {
    fn args(&self, case: &Path) -> Vec<String> {
        let job = super::sqlite_job(case).display().to_string();
        ["nightly", "--config", &job, "--cut", CUT, "-q"].map(String::from).to_vec()
    }
    fn compared(&self) -> Vec<&'static str> {
        vec!["recon/run=20261129T160000Z", "recon/snapshot=20261129T160000Z"]
    }
    fn polled(&self) -> Vec<&'static str> {
        vec!["recon"]
    }
    fn rerun_of_complete(&self) -> (i32, Option<&'static str>) {
        (0, None)
    }
}

/// When to kill an attempt.
#[derive(Debug, Clone)]
enum Kill {
    /// At a named stage (the process kills itself there).
    Stage(&'static str),
    /// After this long.
    After(Duration),
}

fn command(job: &dyn Job, case: &Path) -> Command {
    let mut command = common::command(&[]);
    command.args(job.args(case)).stdout(Stdio::piped()).stderr(Stdio::piped());
    command
}

/// The reference outputs of an uninterrupted run, and how long it took.
/// Files by relative path with their (comparable) bytes.
type Tree = Vec<(String, Vec<u8>)>;

fn reference(job: &dyn Job, dir: &Path) -> (Vec<Tree>, Duration) {
    let started = Instant::now();
    let output = command(job, dir).output().unwrap();
    let took = started.elapsed();
    assert_eq!(output.status.code(), Some(0), "{:?}", text(&output));
    let trees = job.compared().iter().map(|f| normalised(&dir.join(f), dir).0).collect();
    (trees, took)
}

/// The comparable tree of a folder with the case folder's path taken out of manifests.
fn normalised(folder: &Path, case: &Path) -> (Tree, Vec<String>) {
    let (files, claims) = comparable_tree(folder);
    let case = case.display().to_string();
    let files = files
        .into_iter()
        .map(|(name, bytes)| {
            let bytes = if name.ends_with(".json") {
                String::from_utf8(bytes).unwrap().replace(&case, "<case>").into_bytes()
            } else {
                bytes
            };
            (name, bytes)
        })
        .collect();
    (files, claims)
}

/// Kills one attempt, reruns, asserts everything the module doc requires.
fn case(job: &dyn Job, kill: &Kill, expected: &[Tree], tally: &mut Tally) {
    let dir = tempfile::tempdir().unwrap();
    let case = dir.path();
    let poller = Poller::start(job.polled().iter().map(|p| case.join(p)).collect());
    let mut attempt = command(job, case);
    if let Kill::Stage(stage) = kill {
        attempt.env("EFFECT_RECON_CRASH_AT", stage);
    }
    let mut child = attempt.spawn().unwrap();
    if let Kill::After(delay) = kill {
        std::thread::sleep(*delay);
        let _ = child.kill();
    }
    let output = child.wait_with_output().unwrap();
    tally.cases += 1;
    match (output.status.signal(), output.status.code()) {
        (Some(9), _) => tally.killed += 1,
        (_, Some(0)) if matches!(kill, Kill::After(_)) => tally.finished_before_kill += 1,
        other => panic!("{kill:?}: not killed: {other:?} {:?}", text(&output)),
    }
    // Exactly the folders with a manifest count as runs.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for root in job.polled() {
        let location = Location::parse(case.join(root).to_str().unwrap()).unwrap();
        let listed = runtime.block_on(complete_runs(&location)).unwrap().len();
        let with_manifest = std::fs::read_dir(case.join(root))
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("run="))
                    .filter(|e| e.path().join("manifest.json").exists())
                    .count()
            })
            .unwrap_or(0);
        assert_eq!(listed, with_manifest, "{kill:?}: runs listed");
    }
    let complete: Vec<bool> =
        job.compared().iter().map(|f| case.join(f).join("manifest.json").exists()).collect();
    let complete_after_kill = complete.iter().all(|c| *c);
    let rerun = command(job, case).output().unwrap();
    let (polls, problems) = poller.finish();
    tally.polls += polls;
    assert_eq!(problems, Vec::<String>::new(), "{kill:?}: the poller saw a bad manifest");
    let (complete_code, complete_message) = job.rerun_of_complete();
    if complete_after_kill && output.status.signal() == Some(9) {
        assert_eq!(rerun.status.code(), Some(complete_code), "{kill:?}: {:?}", text(&rerun));
        if let Some(message) = complete_message {
            assert!(text(&rerun).1.contains(message), "{kill:?}: {:?}", text(&rerun));
        }
        tally.already_complete += 1;
    } else if output.status.signal() == Some(9) {
        assert_eq!(rerun.status.code(), Some(0), "{kill:?}: rerun failed: {:?}", text(&rerun));
    } else {
        // It had finished: the rerun finds it complete, as after any complete run.
        assert_eq!(rerun.status.code(), Some(complete_code), "{kill:?}: {:?}", text(&rerun));
    }
    for ((folder, expected), complete) in job.compared().iter().zip(expected).zip(complete) {
        let (files, claims) = normalised(&case.join(folder), case);
        let names = |t: &[(String, Vec<u8>)]| t.iter().map(|f| f.0.clone()).collect::<Vec<_>>();
        assert_eq!(names(&files), names(expected), "{kill:?}: {folder}: other files");
        assert!(files == *expected, "{kill:?}: {folder}: other bytes than an uninterrupted run");
        // Only a kill after a folder's manifest can leave its (stale) claim behind.
        assert!(claims.len() <= usize::from(complete), "{kill:?}: claims {claims:?}");
    }
    tally.reruns_identical += 1;
}

fn suite(name: &str, job: &dyn Job, stages: &[&'static str], timed: usize) {
    let reference_dir = tempfile::tempdir().unwrap();
    // Made before the reference is timed.
    super::demo_database();
    let (expected, took) = reference(job, reference_dir.path());
    let mut rng = Rng::new(seed() ^ name.len() as u64);
    let mut kills: Vec<Kill> = stages.iter().map(|s| Kill::Stage(s)).collect();
    let timed = if soak() { timed * 10 } else { timed };
    // Spread over the whole uninterrupted duration, and a little past it.
    let span = (took.as_millis() as u64 * 6 / 5).max(50);
    kills.extend((0..timed).map(|_| Kill::After(Duration::from_millis(rng.below(span)))));
    let mut tally = Tally::default();
    for kill in &kills {
        case(job, kill, &expected, &mut tally);
    }
    assert_eq!(tally.reruns_identical, kills.len());
    say(&format!(
        "crash {name}: {}/{} reruns identical ({} killed: {} at named stages, {} at seeded times \
         up to {span} ms; {} had finished before the kill; {} killed after the manifest, rerun \
         found it complete; {} polls of the output root saw no bad manifest)",
        tally.reruns_identical,
        tally.cases,
        tally.killed,
        stages.len(),
        tally.killed - stages.len(),
        tally.finished_before_kill,
        tally.already_complete,
        tally.polls
    ));
}

#[test]
fn run_killed_anywhere_reruns_to_the_same_outputs() {
    let stages = [
        "claimed",
        "part-written:1",
        "part-written:2",
        "part-written:3",
        "part-written:4",
        "run-before-summary",
        "run-before-manifest",
        "run-after-manifest",
    ];
    suite("run", &RunJob, &stages, 12);
}

#[test]
fn export_killed_anywhere_reruns_to_the_same_snapshot() {
    let stages = [
        "claimed",
        "export-batch:1",
        "part-written:1",
        "export-batch:3",
        "part-written:3",
        "export-batch:5",
        "snapshot-before-manifest",
        "snapshot-after-manifest",
    ];
    suite("export", &ExportJob, &stages, 8);
}

#[test]
fn nightly_killed_anywhere_reruns_to_the_same_snapshot_and_run() {
    let stages = [
        "export-batch:2",
        "snapshot-before-manifest",
        "snapshot-after-manifest",
        "claimed:2",
        "run-before-manifest",
        "run-after-manifest",
    ];
    suite("nightly", &NightlyJob, &stages, 6);
}
