//! Corrupt and hostile inputs end in a clear error, never a panic. A seeded mutation fuzzer
//! over the Parquet files of the tiny fixture and of a generated snapshot: bit flips
//! (anywhere, in the footer, in the data pages, where dictionary indices live), truncation,
//! swapped footers, another table's schema, huge declared footer and Thrift lengths, zeroed
//! blocks. The manifest's sha256 and row count are rewritten to match each mutated file, so
//! the reader itself is exercised, not the manifest check. Each case is run in-process
//! under a memory limit with a time bound: it must end in a clear error or a run whose
//! manifest is consistent; a panic, a hang or an abort fails the suite. The cases that
//! found something are kept in `tests/reliability-corpus/` and replayed on every run.
//!
//! Also: manifests whose paths escape the snapshot or the run folder are refused, and
//! rules files of 10 MB or 10k rules are refused with a clear error.

use std::path::{Path, PathBuf};
use std::time::Duration;

use effect_recon::datafusion::parquet::file::reader::{FileReader, SerializedFileReader};
use effect_recon::engine::session::SessionOptions;
use effect_recon::events::Events;
use effect_recon::recon;
use effect_recon::storage::Location;
use futures::FutureExt;
use sha2::{Digest, Sha256};

use super::super::common::{effect_recon, plan, repo, text, tree_bytes};
use super::{manifest_problems, say, seed, soak, Rng};

/// Copies a folder tree.
fn copy_tree(from: &Path, to: &Path) {
    for (name, bytes) in tree_bytes(from) {
        let target = to.join(&name);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::write(target, bytes).unwrap();
    }
}

/// The Parquet files a manifest lists, with their table.
fn listed(snapshot: &Path) -> Vec<String> {
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(snapshot.join("manifest.json")).unwrap()).unwrap();
    let mut files = Vec::new();
    for table in manifest["tables"].as_object().unwrap().values() {
        for file in table["files"].as_array().unwrap() {
            files.push(file["path"].as_str().unwrap().to_string());
        }
    }
    files.sort();
    files
}

/// Rewrites the manifest entry of `path` to the file's sha256 and (when its footer reads)
/// its row count.
fn rewrite_manifest(snapshot: &Path, path: &str) {
    let bytes = std::fs::read(snapshot.join(path)).unwrap();
    let sha = hex::encode(Sha256::digest(&bytes));
    let rows = std::panic::catch_unwind(|| {
        SerializedFileReader::new(bytes::Bytes::from(bytes.clone()))
            .ok()
            .map(|r| r.metadata().file_metadata().num_rows())
    })
    .ok()
    .flatten();
    let manifest_path = snapshot.join("manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    for table in manifest["tables"].as_object_mut().unwrap().values_mut() {
        for file in table["files"].as_array_mut().unwrap() {
            if file["path"] == path {
                file["sha256"] = sha.clone().into();
                if let Some(rows) = rows.filter(|r| *r >= 0) {
                    file["rows"] = rows.into();
                }
            }
        }
    }
    std::fs::write(manifest_path, serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();
}

/// The footer length a Parquet file declares (the 4 bytes before the closing `PAR1`).
fn footer_len(bytes: &[u8]) -> usize {
    if bytes.len() < 12 {
        return 0;
    }
    let n = bytes.len();
    u32::from_le_bytes(bytes[n - 8..n - 4].try_into().unwrap()) as usize
}

const MUTATIONS: [&str; 10] = [
    "bitflip",
    "bitflip-footer",
    "bitflip-data",
    "truncate",
    "truncate-tail",
    "swap-footer",
    "other-table-schema",
    "huge-footer-length",
    "huge-thrift-lengths",
    "zero-block",
];

/// Applies a mutation; `other` is another file of the snapshot (another table's).
fn mutate(kind: &str, bytes: &[u8], other: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut out = bytes.to_vec();
    let n = out.len().max(1);
    let footer = footer_len(bytes).min(n.saturating_sub(12)).max(1);
    let footer_start = n.saturating_sub(footer + 8);
    match kind {
        "bitflip" | "bitflip-footer" | "bitflip-data" => {
            let (lo, hi) = match kind {
                "bitflip-footer" => (footer_start, n.saturating_sub(8)),
                "bitflip-data" => (4, footer_start.max(5)),
                _ => (0, n),
            };
            for _ in 0..=rng.below(7) {
                let at = lo + rng.below((hi - lo).max(1) as u64) as usize;
                if at < out.len() {
                    out[at] ^= 1 << rng.below(8);
                }
            }
        }
        "truncate" => out.truncate(rng.below(n as u64) as usize),
        "truncate-tail" => out.truncate(n.saturating_sub(1 + rng.below(16) as usize)),
        "swap-footer" => {
            let theirs = footer_len(other).min(other.len().saturating_sub(12));
            out.truncate(footer_start);
            out.extend_from_slice(&other[other.len() - theirs - 8..]);
        }
        "other-table-schema" => out = other.to_vec(),
        "huge-footer-length" => {
            let huge = [u32::MAX, 1 << 31, (n as u32).wrapping_mul(1000), n as u32 + 1];
            let value = huge[rng.below(4) as usize];
            if n >= 8 {
                out[n - 8..n - 4].copy_from_slice(&value.to_le_bytes());
            }
        }
        "huge-thrift-lengths" => {
            // Varints of the largest lengths over a few bytes of the Thrift footer.
            let at = footer_start + rng.below(footer as u64) as usize;
            for (i, b) in [0xFF, 0xFF, 0xFF, 0xFF, 0x0F].iter().enumerate() {
                if at + i < n.saturating_sub(8) {
                    out[at + i] = *b;
                }
            }
        }
        "zero-block" => {
            let at = 4 + rng.below(footer_start.max(5) as u64 - 4) as usize;
            for b in out.iter_mut().skip(at).take(64) {
                *b = 0;
            }
        }
        other => panic!("unknown mutation {other}"),
    }
    out
}

/// How a case ended.
#[derive(Debug)]
enum Ending {
    /// A run whose manifest lists exactly good files.
    Ran,
    /// An error naming the mutated file, its table or its column.
    NamedError,
    /// An error that does not name the file (still an error, exit 2).
    OtherError(String),
}

/// Runs the reconciliation over a (mutated) snapshot, in a task, bounded in time.
async fn judge(snapshot: &Path, mutated: &str) -> Result<Ending, String> {
    let out_dir = tempfile::tempdir().unwrap();
    let location = Location::parse(snapshot.to_str().unwrap()).unwrap();
    let out = Location::parse(out_dir.path().to_str().unwrap()).unwrap();
    let mut plan = plan(&location, &out);
    plan.session = SessionOptions { target_partitions: 2, ..SessionOptions::default() }
        .with_memory_limit(256 << 20);
    let events = Events::none();
    let task = std::panic::AssertUnwindSafe(recon::run(&plan, &events)).catch_unwind();
    let joined = tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .map_err(|_| "hung for 60 s".to_string())?;
    let result = joined.map_err(|e| format!("panicked: {}", panic_text(&e)))?;
    let problems = manifest_problems(out_dir.path());
    if !problems.is_empty() {
        return Err(format!("a manifest over bad files: {problems:?}"));
    }
    Ok(match result {
        Ok(_) => Ending::Ran,
        Err(e) => {
            let message = format!("{e:#}");
            let file = mutated.rsplit('/').next().unwrap();
            let table = mutated.split('/').next().unwrap();
            let named = [file.to_string(), format!("table {table}"), format!("file {table}")];
            if named.iter().any(|n| message.contains(n.as_str())) {
                Ending::NamedError
            } else {
                Ending::OtherError(message)
            }
        }
    })
}

/// The message of a caught panic.
pub(crate) fn panic_text(payload: &Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic".into())
}

/// A generated snapshot (gen, 300 orders), made once.
async fn generated() -> PathBuf {
    let dir = tempfile::tempdir().unwrap().keep().join("generated");
    let location = Location::parse(dir.to_str().unwrap()).unwrap();
    let plan = effect_recon::workload::WorkloadPlan::new(location, 300).unwrap();
    effect_recon::workload::generate(&plan).await.unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutated_parquet_files_end_in_clear_errors_never_panics() {
    let bases = [("tiny", repo("fixtures/tiny/snapshot")), ("generated", generated().await)];
    let per_base = if soak() { 400 } else { 40 };
    let save = std::env::var("EFFECT_RECON_SAVE_CORPUS").ok().map(PathBuf::from);
    let mut rng = Rng::new(seed() ^ 0x4D55);
    let (mut ran, mut named, mut other) = (0, 0, Vec::new());
    let mut failures = Vec::new();
    let mut total = 0;
    for (base_name, base) in &bases {
        let files = listed(base);
        for case in 0..per_base {
            let kind = MUTATIONS[case % MUTATIONS.len()];
            let target = &files[rng.below(files.len() as u64) as usize];
            let table = target.split('/').next().unwrap();
            let others: Vec<&String> = files.iter().filter(|f| !f.starts_with(table)).collect();
            let other_file = others[rng.below(others.len() as u64) as usize];
            let dir = tempfile::tempdir().unwrap();
            copy_tree(base, dir.path());
            let bytes = std::fs::read(base.join(target)).unwrap();
            let other_bytes = std::fs::read(base.join(other_file)).unwrap();
            let mutated = mutate(kind, &bytes, &other_bytes, &mut rng);
            std::fs::write(dir.path().join(target), &mutated).unwrap();
            rewrite_manifest(dir.path(), target);
            total += 1;
            let label = format!("{base_name} #{case} {kind} {target}");
            match judge(dir.path(), target).await {
                Ok(Ending::Ran) => ran += 1,
                Ok(Ending::NamedError) => named += 1,
                Ok(Ending::OtherError(message)) => other.push(format!("{label}: {message}")),
                Err(problem) => failures.push(format!("{label}: {problem}")),
            }
            if let Some(save) = &save {
                let name = format!("{base_name}-{case:03}-{kind}--{}", target.replace('/', "~"));
                std::fs::create_dir_all(save).unwrap();
                std::fs::write(save.join(name), &mutated).unwrap();
            }
        }
    }
    for line in &other {
        super::say(&format!("mutation error without the file's name: {line}"));
    }
    assert!(
        failures.is_empty(),
        "{} cases panicked, hung or published bad files:\n{}",
        failures.len(),
        failures.join("\n")
    );
    say(&format!(
        "mutations: {total}/{total} mutated snapshots ended cleanly, 0 panics, 0 hangs ({named} errors naming the file or table, {} other clear errors, {ran} consistent runs)",
        other.len()
    ));
    assert!(other.is_empty(), "errors that do not name the file: {}", other.len());
}

/// Replays the kept corpus: each file of `tests/reliability-corpus/` named
/// `<base>-<n>-<mutation>--<table>~<...>.parquet` replaces that file of its base snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kept_corpus_still_ends_in_clear_errors() {
    let corpus = repo("tests/reliability-corpus");
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&corpus)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    entries.sort();
    assert!(!entries.is_empty(), "the corpus is empty");
    let generated = generated().await;
    for entry in &entries {
        let name = entry.file_name().unwrap().to_str().unwrap();
        let (head, target) = name.split_once("--").unwrap();
        let target = target.replace('~', "/");
        let base = if head.starts_with("tiny") {
            repo("fixtures/tiny/snapshot")
        } else {
            generated.clone()
        };
        let dir = tempfile::tempdir().unwrap();
        copy_tree(&base, dir.path());
        std::fs::copy(entry, dir.path().join(&target)).unwrap();
        rewrite_manifest(dir.path(), &target);
        match judge(dir.path(), &target).await {
            Ok(Ending::NamedError | Ending::Ran) => {}
            Ok(Ending::OtherError(message)) => panic!("{name}: error without the file: {message}"),
            Err(problem) => panic!("{name}: {problem}"),
        }
    }
    say(&format!("mutations: {n}/{n} kept corpus cases end cleanly", n = entries.len()));
}

#[test]
fn manifests_with_paths_escaping_the_folder_are_refused() {
    let hostile = [
        "../ledger/part-00000.parquet",
        "ledger/../../ledger/part-00000.parquet",
        "/etc/passwd",
        "//etc/passwd",
        "s3://another-bucket/ledger/part-00000.parquet",
        "file:///etc/passwd",
        "ledger/./part-00000.parquet",
        "ledger//part-00000.parquet",
    ];
    let tiny = repo("fixtures/tiny/snapshot");
    for path in hostile {
        let dir = tempfile::tempdir().unwrap();
        copy_tree(&tiny, dir.path());
        let manifest_path = dir.path().join("manifest.json");
        let mut manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
        manifest["tables"]["ledger"]["files"][0]["path"] = path.into();
        std::fs::write(&manifest_path, serde_json::to_vec(&manifest).unwrap()).unwrap();
        let out = tempfile::tempdir().unwrap();
        let output = effect_recon(&[
            "run",
            "--snapshot",
            dir.path().to_str().unwrap(),
            "--out",
            out.path().to_str().unwrap(),
        ]);
        let (_, stderr) = text(&output);
        assert_eq!(output.status.code(), Some(2), "{path}: {stderr}");
        assert!(
            stderr.contains("must be relative to the snapshot")
                || stderr.contains("not in its folder"),
            "{path}: {stderr}"
        );
        assert!(tree_bytes(out.path()).is_empty(), "{path}: the refused run wrote files");
    }
    // A run manifest pointing outside its folder: `sql --run` reads nothing outside it.
    let runs = tempfile::tempdir().unwrap();
    let output = effect_recon(&[
        "run",
        "--snapshot",
        tiny.to_str().unwrap(),
        "--out",
        runs.path().to_str().unwrap(),
        "-q",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output).1);
    let run = runs.path().join(super::RUN);
    let secret = runs.path().join("secret.parquet");
    std::fs::copy(run.join("discrepancies/part-00000.parquet"), &secret).unwrap();
    let manifest_path = run.join("manifest.json");
    let original = std::fs::read(&manifest_path).unwrap();
    let run_hostile = ["../secret.parquet", "/etc/passwd", "s3://another-bucket/x.parquet"];
    for path in run_hostile {
        let mut manifest: serde_json::Value = serde_json::from_slice(&original).unwrap();
        manifest["tables"]["discrepancies"]["files"][0]["path"] = path.into();
        std::fs::write(&manifest_path, serde_json::to_vec(&manifest).unwrap()).unwrap();
        let output = effect_recon(&[
            "sql",
            "--run",
            run.to_str().unwrap(),
            "-c",
            "SELECT count(*) FROM discrepancies",
        ]);
        let (stdout, stderr) = text(&output);
        assert_eq!(output.status.code(), Some(2), "{path}: {stdout}{stderr}");
        assert!(stderr.contains("must be relative to the run folder"), "{path}: {stderr}");
    }
    say(&format!(
        "mutations: {}/{} manifests with escaping paths refused ({} snapshot, {} run)",
        hostile.len() + run_hostile.len(),
        hostile.len() + run_hostile.len(),
        hostile.len(),
        run_hostile.len()
    ));
}

#[test]
fn huge_rules_files_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = repo("fixtures/tiny/snapshot");
    let rule = |i: usize| {
        format!("[[rule]]\neffect=\"e{i}\"\ntrigger_event=\"E\"\ndue_status=\"S\"\ngrace=\"1m\"\ncompensation=\"C\"\npriority=1\n")
    };
    let ten_k: String = (0..10_000).map(rule).collect();
    let mut ten_mb = std::fs::read_to_string(repo("fixtures/rules.toml")).unwrap();
    ten_mb.push_str(&format!("# {}\n", "x".repeat(10 << 20)));
    let cases = [
        ("10k-rules.toml", ten_k, "10000 rules; at most 1000"),
        ("10mb.toml", ten_mb, "a rules file is at most 1048576 bytes"),
    ];
    for (name, content, expected) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        let out = dir.path().join(format!("out-{name}"));
        for args in [
            vec![
                "run",
                "--snapshot",
                tiny.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
                "--rules",
                path.to_str().unwrap(),
            ],
            vec![
                "sql",
                "--snapshot",
                tiny.to_str().unwrap(),
                "--rules",
                path.to_str().unwrap(),
                "-c",
                "SELECT 1",
            ],
        ] {
            let output = effect_recon(&args);
            let (_, stderr) = text(&output);
            assert_eq!(output.status.code(), Some(2), "{name}: {stderr}");
            assert!(stderr.contains(expected), "{name}: {stderr}");
        }
        assert!(!out.exists() || tree_bytes(&out).is_empty());
    }
    say("mutations: 4/4 huge rules files (10k rules, 10 MB; run and sql) refused with a clear error");
}
