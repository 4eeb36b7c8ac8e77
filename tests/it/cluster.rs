//! `run --engine ballista://…` on a real Ballista cluster: one scheduler and two executors
//! of this binary (`effect-recon cluster …`) as child processes on loopback ports.
//!
//! * The outputs equal the in-process run's byte for byte (the tiny fixture, generated
//!   days of several seeds, a chain of nights whose previous run is staged), and
//!   `--check-single-node` passes.
//! * `nightly --engine` publishes the run an in-process nightly does.
//! * Faults: a cluster that does not answer, an executor killed mid-run, a snapshot the
//!   executors cannot reach: a clear error, exit 2, no manifest — or, for the killed
//!   executor, outputs identical to the in-process run.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::common::{bin, command, effect_recon, repo, tree_bytes};

/// The exit code, stdout and stderr, labelled, for messages.
fn text(output: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A port nothing listens on right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Spawns a node (`spawn` given two ports found free) until it listens on the first: a port
/// found free can be taken by another test's outgoing connection before the node binds it
/// (the node then exits at once), so an exited node is started again on other ports.
fn spawn_listening(what: &str, spawn: impl Fn(u16, u16) -> Child) -> (Child, u16) {
    for _ in 0..5 {
        let (port, second) = (free_port(), free_port());
        let mut child = spawn(port, second);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return (child, port);
            }
            if child.try_wait().ok().flatten().is_some() {
                break;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                panic!("{what} did not listen on port {port} within 60 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    panic!("{what} exited at start five times, each on other ports");
}

/// A scheduler and its executors; every process is killed when this is dropped.
struct Cluster {
    scheduler_port: u16,
    scheduler: Child,
    executors: Vec<Child>,
    _work: tempfile::TempDir,
}

impl Cluster {
    /// One scheduler and `executors` executors of one task each.
    fn start(executors: usize) -> Cluster {
        Cluster::start_with(executors, |command| command)
    }

    /// Like [`Cluster::start`], each executor command passed through `wrap` (to run it
    /// in another mount namespace, say).
    fn start_with(executors: usize, wrap: impl Fn(Vec<String>) -> Vec<String>) -> Cluster {
        let work = tempfile::tempdir().unwrap();
        let (scheduler, scheduler_port) = spawn_listening("the scheduler", |port, _| {
            command(&["cluster", "scheduler", "--port", &port.to_string()])
                .args(["--executor-timeout", "10"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        });
        let mut children = Vec::new();
        for i in 0..executors {
            let work_dir = work.path().join(format!("executor-{i}"));
            std::fs::create_dir_all(&work_dir).unwrap();
            let (child, _) = spawn_listening("an executor", |port, grpc_port| {
                let command: Vec<String> = [
                    bin(),
                    "cluster",
                    "executor",
                    "--scheduler",
                    &format!("127.0.0.1:{scheduler_port}"),
                    "--port",
                    &port.to_string(),
                    "--grpc-port",
                    &grpc_port.to_string(),
                    "--concurrent-tasks",
                    "1",
                    "--work-dir",
                    work_dir.to_str().unwrap(),
                ]
                .iter()
                .map(|s| s.to_string())
                .collect();
                let command = wrap(command);
                Command::new(&command[0])
                    .args(&command[1..])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap()
            });
            children.push(child);
        }
        Cluster { scheduler_port, scheduler, executors: children, _work: work }
    }

    fn engine(&self) -> String {
        format!("ballista://127.0.0.1:{}", self.scheduler_port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.executors.iter_mut().chain(std::iter::once(&mut self.scheduler)) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `run` of `snapshot` into `out`, with `extra` arguments; asserts it succeeded.
fn run(snapshot: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "run",
        "--snapshot",
        snapshot.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--target-partitions",
        "2",
    ];
    args.extend_from_slice(extra);
    let output = effect_recon(&args);
    assert!(output.status.success(), "run {extra:?} failed:\n{}", text(&output));
    output
}

/// Every run folder under `out` with its files; `summary.json` without its timings and
/// `manifest.json` without the summary's hash (the only bytes that depend on the clock).
fn runs_without_timings(out: &Path) -> Vec<(String, Vec<u8>)> {
    tree_bytes(out)
        .into_iter()
        .map(|(path, bytes)| {
            let name = Path::new(&path).file_name().unwrap().to_str().unwrap().to_string();
            let bytes = match name.as_str() {
                "summary.json" | "manifest.json" => {
                    let mut json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
                    json.as_object_mut().unwrap().remove("timings_ms");
                    if let Some(summary) = json.get_mut("summary") {
                        summary.as_object_mut().unwrap().remove("sha256");
                    }
                    serde_json::to_vec_pretty(&json).unwrap()
                }
                _ => bytes,
            };
            (path, bytes)
        })
        .collect()
}

fn assert_same_runs(in_process: &Path, cluster: &Path, what: &str) {
    assert_same_files(&runs_without_timings(in_process), &runs_without_timings(cluster), what);
}

/// The same files with the same bytes, at least one of them a Parquet output.
fn assert_same_files(a: &[(String, Vec<u8>)], b: &[(String, Vec<u8>)], what: &str) {
    let names = |t: &[(String, Vec<u8>)]| t.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>();
    assert_eq!(names(a), names(b), "{what}: the cluster run wrote other files");
    for ((path, x), (_, y)) in a.iter().zip(b) {
        assert!(x == y, "{what}: {path} differs between the in-process and the cluster run");
    }
    assert!(a.iter().any(|(p, _)| p.ends_with(".parquet")), "{what}: no outputs compared");
}

fn generate(out: &Path, extra: &[&str]) {
    let mut args = vec!["gen", "--out", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    let output = effect_recon(&args);
    assert!(output.status.success(), "gen failed:\n{}", text(&output));
}

fn manifests_under(out: &Path) -> Vec<PathBuf> {
    if !out.exists() {
        return Vec::new();
    }
    tree_bytes(out)
        .into_iter()
        .filter(|(p, _)| p.ends_with("manifest.json"))
        .map(|(p, _)| out.join(p))
        .collect()
}

/// `run` of `snapshot` into `out` on `engine`, expected to fail: its stderr; asserts exit 2
/// and that no manifest was written.
fn failed_run(snapshot: &Path, out: &Path, engine: &str) -> String {
    let output = effect_recon(&[
        "run",
        "--snapshot",
        snapshot.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--engine",
        engine,
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(manifests_under(out).is_empty(), "a manifest was written");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn the_cluster_gives_the_in_process_outputs_byte_for_byte() {
    let cluster = Cluster::start(2);
    let engine = cluster.engine();
    let work = tempfile::tempdir().unwrap();

    // The committed tiny fixture, checked by --check-single-node too.
    let tiny = repo("fixtures/tiny/snapshot");
    let (a, b) = (work.path().join("tiny-local"), work.path().join("tiny-cluster"));
    run(&tiny, &a, &[]);
    let output = run(&tiny, &b, &["--engine", &engine, "--check-single-node"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("gives the same outputs as ballista://"), "{stderr}");
    assert_same_runs(&a, &b, "tiny fixture");

    // Generated days of several seeds (one with the canonical incident).
    for (seed, extra) in [("3", vec!["--incident"]), ("11", vec![]), ("29", vec![])] {
        let snapshot = work.path().join(format!("day-{seed}"));
        let mut args = vec!["--orders", "4000", "--seed", seed];
        args.extend(extra);
        generate(&snapshot, &args);
        let (a, b) = (
            work.path().join(format!("{seed}-local")),
            work.path().join(format!("{seed}-cluster")),
        );
        run(&snapshot, &a, &[]);
        run(&snapshot, &b, &["--engine", &engine]);
        assert_same_runs(&a, &b, &format!("seed {seed}"));
        let truth = snapshot.join("truth.parquet");
        let run_folder = std::fs::read_dir(&b).unwrap().next().unwrap().unwrap().path();
        let verify = effect_recon(&[
            "verify",
            "--truth",
            truth.to_str().unwrap(),
            "--run",
            run_folder.to_str().unwrap(),
        ]);
        assert!(
            verify.status.success(),
            "seed {seed}: the cluster run is not exact:\n{}",
            text(&verify)
        );
    }

    // Three nights in a chain: each run follows the one before, whose open findings and
    // pending skips the cluster reads as staged tables.
    let nights = work.path().join("nights");
    generate(&nights, &["--nights", "3", "--orders", "3000", "--seed", "7"]);
    let mut snapshots: Vec<PathBuf> = std::fs::read_dir(&nights)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    snapshots.sort();
    assert_eq!(snapshots.len(), 3);
    let (a, b) = (work.path().join("nights-local"), work.path().join("nights-cluster"));
    for snapshot in &snapshots {
        run(snapshot, &a, &[]);
        run(snapshot, &b, &["--engine", &engine, "--check-single-node"]);
    }
    assert_same_runs(&a, &b, "three nights");

    // The ledger key check runs on the executors too (only repeated hashes come back):
    // a duplicate msg_id is the same error as in process, and nothing is published.
    let (_copy, duplicated) = super::bad_input::copy_tiny();
    super::bad_input::replace_ledger(
        &duplicated,
        &super::bad_input::ledger_batch(|_, columns| {
            columns[0] = std::sync::Arc::new(
                effect_recon::datafusion::arrow::array::StringArray::from(vec!["m-1", "m-1"]),
            )
        }),
    );
    let stderr = failed_run(&duplicated, &work.path().join("duplicated"), &engine);
    assert!(stderr.contains("duplicate msg_id 'm-1' (2 rows)"), "{stderr}");
}

/// `nightly --engine` exports as ever and runs on the cluster: its run folder equals an
/// in-process nightly's (the report page aside: it names this run's paths and timings).
#[test]
fn nightly_on_the_cluster_publishes_the_in_process_run() {
    use super::reliability::{sqlite_job, CUT, RUN};
    let cluster = Cluster::start(2);
    let engine = cluster.engine();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (job_a, job_b) = (sqlite_job(a.path()), sqlite_job(b.path()));
    let nightly = |job: &Path, extra: &[&str]| {
        let mut args = vec!["nightly", "--config", job.to_str().unwrap(), "--cut", CUT, "-q"];
        args.extend_from_slice(extra);
        let output = effect_recon(&args);
        assert_eq!(output.status.code(), Some(0), "nightly {extra:?}:\n{}", text(&output));
        output
    };
    nightly(&job_a, &["--target-partitions", "2"]);
    let output =
        nightly(&job_b, &["--target-partitions", "2", "--engine", &engine, "--check-single-node"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("gives the same outputs as ballista://"), "{stderr}");
    // Each nightly has its own root, so the snapshot path the manifests name differs.
    let run_files = |root: &Path| -> Vec<(String, Vec<u8>)> {
        let files = runs_without_timings(&root.join("recon").join(RUN));
        let files = files.into_iter().filter(|(path, _)| !path.ends_with("report.html"));
        files
            .map(|(path, bytes)| match path.ends_with(".json") {
                true => {
                    let mut json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
                    json.as_object_mut().unwrap().remove("snapshot");
                    (path, serde_json::to_vec_pretty(&json).unwrap())
                }
                false => (path, bytes),
            })
            .collect()
    };
    let (local, on_cluster) = (run_files(a.path()), run_files(b.path()));
    assert!(local.iter().any(|(p, _)| p.starts_with("discrepancies/")), "no discrepancies");
    assert_same_files(&local, &on_cluster, "nightly");

    // The next night follows it: the cluster judges only the orders that can change (a
    // semi-join, its executors know no function of ours), the in-process check with the
    // in_orders predicate, and the two give the same outputs.
    let next = effect_recon::time::format_instant(
        effect_recon::time::parse_instant(CUT).unwrap() + effect_recon::time::DAY_MICROS,
    );
    let args = ["nightly", "--config", job_b.to_str().unwrap(), "--cut", &next];
    let output = effect_recon(
        &[&args[..], &["--target-partitions", "2", "--engine", &engine, "--check-single-node"]]
            .concat(),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("run: judged "), "the second night judged every order:\n{stderr}");
    assert!(stderr.contains("gives the same outputs as ballista://"), "{stderr}");

    // --check-single-node without a cluster is refused before any work.
    let c = tempfile::tempdir().unwrap();
    let job_c = sqlite_job(c.path());
    let refused = effect_recon(&[
        "nightly",
        "--config",
        job_c.to_str().unwrap(),
        "--cut",
        CUT,
        "--check-single-node",
    ]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("needs --engine ballista://"));
    assert!(!c.path().join("recon").exists(), "a refused nightly wrote {:?}", c.path());
}

#[test]
fn a_cluster_that_does_not_answer_is_an_error_before_any_output() {
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("out");
    let port = free_port();
    let engine = format!("ballista://127.0.0.1:{port}");
    let stderr = failed_run(&repo("fixtures/tiny/snapshot"), &out, &engine);
    assert!(stderr.contains(&format!("cluster {engine}: does not answer")), "{stderr}");
    assert!(!out.join("run=20261129T160000Z").exists(), "a run folder was left behind");

    // Bad engine URLs are refused by name.
    for bad in ["ballista://nohost", "spark://x:1", "ballista://:50050"] {
        let output = effect_recon(&["run", "--snapshot", "x", "--out", "y", "--engine", bad]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{bad}: {stderr}");
        assert!(stderr.contains("--engine") && stderr.contains(bad), "{bad}: {stderr}");
    }
    let output = effect_recon(&["run", "--snapshot", "x", "--out", "y", "--check-single-node"]);
    assert!(String::from_utf8_lossy(&output.stderr).contains("needs --engine ballista://"));
}

#[test]
fn an_executor_killed_mid_run_leaves_complete_identical_outputs_or_none() {
    let mut cluster = Cluster::start(2);
    let work = tempfile::tempdir().unwrap();
    let snapshot = work.path().join("day");
    generate(&snapshot, &["--orders", "60000", "--seed", "5"]);
    let (a, b) = (work.path().join("local"), work.path().join("cluster"));
    run(&snapshot, &a, &[]);

    let mut child = command(&["run", "--snapshot", snapshot.to_str().unwrap()])
        .args(["--out", b.to_str().unwrap()])
        .args(["--target-partitions", "2", "--engine", &cluster.engine()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The executor is killed as soon as the run says it validated the snapshot: the
    // reconciliation's queries are then running on the cluster.
    let stderr = child.stderr.take().unwrap();
    let (validated, said) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {
            if line.contains("validated") {
                let _ = validated.send(());
            }
            lines.push(line);
        }
        lines.join("\n")
    });
    said.recv_timeout(Duration::from_secs(180)).expect("the run never validated its snapshot");
    let victim = &mut cluster.executors[0];
    victim.kill().unwrap();
    victim.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(240);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the run did not end within 240 s of the kill");
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut output = child.wait_with_output().unwrap();
    output.stderr = reader.join().unwrap().into_bytes();
    match output.status.code() {
        Some(0) => assert_same_runs(&a, &b, "run after an executor was killed"),
        Some(2) => {
            assert!(
                manifests_under(&b).is_empty(),
                "a failed run left a manifest:\n{}",
                text(&output)
            );
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(stderr.contains("cluster ballista://"), "{stderr}");
        }
        other => panic!("exit {other:?} after an executor was killed:\n{}", text(&output)),
    }
    eprintln!(
        "cluster: executor killed mid-run -> exit {:?} ({})",
        output.status.code(),
        if output.status.success() {
            "Ballista re-ran the lost tasks; outputs identical"
        } else {
            "failed, nothing published"
        }
    );
}

#[test]
fn a_snapshot_the_executors_cannot_reach_is_an_error_naming_it() {
    if Command::new("unshare").arg("--help").output().is_err() {
        super::common::say_skipped("unshare", "the unreachable-snapshot cluster test was NOT run");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let snapshot = work.path().join("day");
    generate(&snapshot, &["--orders", "2000", "--seed", "13"]);
    // The executors run in a mount namespace where the snapshot folder is an empty tmpfs:
    // the client and the scheduler see the files, the executors do not.
    let hidden = snapshot.to_str().unwrap().to_string();
    let cluster = Cluster::start_with(2, |command| {
        let quoted: Vec<String> = command.iter().map(|a| format!("'{a}'")).collect();
        vec![
            "unshare".into(),
            "--mount".into(),
            "sh".into(),
            "-c".into(),
            format!("mount -t tmpfs none '{hidden}' && exec {}", quoted.join(" ")),
        ]
    });
    let out = work.path().join("out");
    let stderr = failed_run(&snapshot, &out, &cluster.engine());
    assert!(stderr.contains(&format!("cluster {}", cluster.engine())), "{stderr}");
    assert!(stderr.contains(&hidden), "the error does not name the snapshot: {stderr}");
    assert!(!out.join("run=20261129T160000Z").exists(), "a run folder was left behind");
}
