//! The reliability suite (docs/RELIABILITY.md): kill -9 anywhere, concurrent writers,
//! failing storage, corrupt inputs, hostile SQL, secrets. Every case asserts its exact
//! outcome and every module prints its counts (`crash: 40/40 reruns identical`) on stderr,
//! uncaptured. `EFFECT_RECON_SOAK=1` multiplies the seeded cases (the soak);
//! `EFFECT_RECON_SOAK_SEED` changes the seed.
//!
//! * `sql_sandbox`    — `sql` reads nothing but its tables, bounds memory, survives Ctrl-C.
//! * `secrets`        — a canary password never appears in any output, log or file.
//! * `concurrency`    — two runs (two exports) of one folder at once: exactly one publishes.
//! * `crash`          — SIGKILL at named stages and at seeded times; reruns are identical.
//! * `storage_faults` — a seeded fault-injecting object store under run, sql and export.
//! * `concurrent_writes` — export of MariaDB/PostgreSQL while a writer commits.
//! * `mutations`      — mutated Parquet files with rewritten manifests: 0 panics.
//! * `writeback_crash` — SIGKILL inside and between the transactions of `reopen --apply`
//!   and `publish` (SQLite, MariaDB, PostgreSQL): whole batches only, one audit row per
//!   change, reruns converge, `--undo` restores exactly.

mod concurrency;
mod concurrent_writes;
mod crash;
mod mutations;
mod secrets;
mod sql_sandbox;
mod storage_faults;
mod writeback_crash;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use sha2::{Digest, Sha256};

use super::common::{effect_recon, text};

/// Whether the long soak was asked for.
pub(crate) fn soak() -> bool {
    std::env::var("EFFECT_RECON_SOAK").is_ok_and(|v| v == "1")
}

/// The seed of the seeded cases.
pub(crate) fn seed() -> u64 {
    std::env::var("EFFECT_RECON_SOAK_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(13)
}

/// Prints a count line where the test output shows it (not captured by the harness).
pub(crate) fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "reliability: {line}");
}

/// Every problem a reader would have with the complete folders (those with a
/// `manifest.json`) under `root`: a listed file missing, or with other bytes than the
/// manifest's sha256.
pub(crate) fn manifest_problems(root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let Ok(entries) = std::fs::read_dir(root) else { return problems };
    for entry in entries.flatten() {
        let folder = entry.path();
        let Ok(bytes) = std::fs::read(folder.join("manifest.json")) else { continue };
        let manifest: serde_json::Value = match serde_json::from_slice(&bytes) {
            Ok(manifest) => manifest,
            Err(e) => {
                problems.push(format!("{}: unreadable manifest: {e}", folder.display()));
                continue;
            }
        };
        let mut listed: Vec<(String, String)> = Vec::new();
        for table in manifest["tables"].as_object().into_iter().flat_map(|t| t.values()) {
            for file in table["files"].as_array().into_iter().flatten() {
                listed.push((
                    file["path"].as_str().unwrap_or_default().to_string(),
                    file["sha256"].as_str().unwrap_or_default().to_string(),
                ));
            }
        }
        if let Some(summary) = manifest.get("summary") {
            listed.push((
                summary["path"].as_str().unwrap_or_default().to_string(),
                summary["sha256"].as_str().unwrap_or_default().to_string(),
            ));
        }
        for (path, sha) in listed {
            match std::fs::read(folder.join(&path)) {
                Ok(bytes) if hex::encode(Sha256::digest(&bytes)) == sha => {}
                Ok(_) => {
                    problems.push(format!("{}: {path} is not the listed bytes", folder.display()))
                }
                Err(_) => {
                    problems.push(format!("{}: {path} is listed but missing", folder.display()))
                }
            }
        }
    }
    problems
}

/// A reader polling an output root while a writer runs (and is killed): it checks every
/// complete folder it sees, over and over, until stopped.
pub(crate) struct Poller {
    stop: Arc<AtomicBool>,
    polls: Arc<AtomicU64>,
    handle: Option<JoinHandle<Vec<String>>>,
}

impl Poller {
    /// Starts polling `roots`.
    pub(crate) fn start(roots: Vec<PathBuf>) -> Poller {
        let stop = Arc::new(AtomicBool::new(false));
        let polls = Arc::new(AtomicU64::new(0));
        let (s, p) = (Arc::clone(&stop), Arc::clone(&polls));
        let handle = std::thread::spawn(move || {
            let mut problems = Vec::new();
            while !s.load(Ordering::SeqCst) {
                for root in &roots {
                    problems.extend(manifest_problems(root));
                }
                p.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            problems
        });
        Poller { stop, polls, handle: Some(handle) }
    }

    /// Stops; returns how many polls ran and what they found.
    pub(crate) fn finish(mut self) -> (u64, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        let problems = self.handle.take().unwrap().join().unwrap();
        (self.polls.load(Ordering::SeqCst), problems)
    }
}

/// Every file under `dir` by relative path, with the volatile parts made comparable:
/// `summary.json` without its timings, `manifest.json` without the summary's hash (which
/// hashes those timings); claim objects (`_writing.*`) are returned apart.
pub(crate) fn comparable_tree(dir: &Path) -> (Vec<(String, Vec<u8>)>, Vec<String>) {
    let mut files = Vec::new();
    let mut claims = Vec::new();
    for (name, bytes) in super::common::tree_bytes(dir) {
        let file = name.rsplit('/').next().unwrap_or(&name).to_string();
        if file.starts_with("_writing.") {
            claims.push(name);
            continue;
        }
        let bytes = match file.as_str() {
            "summary.json" => {
                let mut json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
                json["timings_ms"] = serde_json::Value::Null;
                json.to_string().into_bytes()
            }
            "manifest.json" => {
                let mut json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
                if json.get("summary").is_some() {
                    json["summary"]["sha256"] = serde_json::Value::Null;
                }
                // An incremental-ready snapshot records the watermark probe: the database's
                // clock at the export, the one thing a rerun cannot repeat.
                if let Some(sources) =
                    json.pointer_mut("/chain/sources").and_then(|s| s.as_object_mut())
                {
                    for mark in sources.values_mut() {
                        for clock in ["probe_time", "oldest_open_transaction", "watermark"] {
                            mark[clock] = serde_json::Value::Null;
                        }
                    }
                }
                json.to_string().into_bytes()
            }
            // nightly's morning report: not an output (the manifest does not list it), a
            // rendering of the compared outputs with this run's paths and stage timings.
            // Its presence is compared, its bytes are not.
            "report.html" => {
                assert!(bytes.starts_with(b"<!DOCTYPE html>"), "{name}: not a report");
                b"<report.html>".to_vec()
            }
            _ => bytes,
        };
        files.push((name, bytes));
    }
    (files, claims)
}

/// A small seeded generator (SplitMix64), so every case list is reproducible.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The cut of the demo day (and of the tiny fixture).
pub(crate) const CUT: &str = "2026-11-29T16:00:00Z";

/// The run folder of that cut.
pub(crate) const RUN: &str = "run=20261129T160000Z";

/// A SQLite database of `demo --orders 1500`, made once per test binary.
pub(crate) fn demo_database() -> &'static Path {
    static DEMO: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DEMO.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        let output = effect_recon(&["demo", "--orders", "1500", "--dir", dir.to_str().unwrap()]);
        assert_eq!(output.status.code(), Some(0), "{}", text(&output).1);
        dir.join("fulfilment.db")
    })
}

/// The demo's job config with its root at `dir/recon` and its sources reading `url`
/// (with `password_env = var` when given); written as `dir/job.toml`.
pub(crate) fn job_file(dir: &Path, url: &str, password_env: Option<&str>) -> PathBuf {
    let mut text = std::fs::read_to_string(super::common::repo("fixtures/demo/job.toml")).unwrap();
    text = text.replace(
        "root     = \"recon\"",
        &format!("root     = \"{}\"", dir.join("recon").display()),
    );
    let mut source = format!("url   = \"{url}\"");
    if let Some(var) = password_env {
        source.push_str(&format!("\npassword_env = \"{var}\""));
    }
    text = text.replace("url   = \"sqlite:fulfilment.db\"", &source);
    if url.starts_with("postgres") {
        text = text.replace("> ? AND", "> $1 AND").replace("<= ?", "<= $2");
    }
    assert!(text.contains(url), "the demo job changed: {text}");
    let path = dir.join("job.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The demo job over the demo database, in `dir`.
pub(crate) fn sqlite_job(dir: &Path) -> PathBuf {
    job_file(dir, &format!("sqlite:{}", demo_database().display()), None)
}
