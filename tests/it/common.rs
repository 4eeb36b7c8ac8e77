//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use effect_recon::config::RuleSet;
use effect_recon::datafusion::arrow::csv::ReaderBuilder;
use effect_recon::datafusion::arrow::record_batch::RecordBatch;
use effect_recon::datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use effect_recon::engine::session::SessionOptions;
use effect_recon::recon::{self, RunPlan, RunReport};
use effect_recon::snapshot::{SnapshotWriter, Table};
use effect_recon::storage::Location;
use effect_recon::time::parse_instant;

/// The cut of the tiny fixture.
pub(crate) const TINY_CUT: &str = "2026-11-29T16:00:00Z";

/// A path inside the repository.
pub(crate) fn repo(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// The path of the binary under test.
pub(crate) fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_effect-recon")
}

/// The binary with `args`, not yet started (for a test that sets a folder, stdin, pipes or
/// environment variables before it runs it).
pub(crate) fn command(args: &[&str]) -> Command {
    let mut command = Command::new(bin());
    command.args(args);
    command
}

/// Runs the binary with `args` to completion.
pub(crate) fn effect_recon(args: &[&str]) -> Output {
    command(args).output().expect("the binary runs")
}

/// stdout and stderr of an output, as text.
pub(crate) fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The committed tiny snapshot.
pub(crate) fn tiny_snapshot() -> Location {
    Location::parse(repo("fixtures/tiny/snapshot").to_str().unwrap()).unwrap()
}

/// The location of a local directory.
pub(crate) fn location(path: &Path) -> Location {
    Location::parse(path.to_str().unwrap()).unwrap()
}

/// Runs a future to completion on a small runtime of its own (for `#[test]`s that also
/// start processes or threads).
pub(crate) fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// A location in a fresh temporary directory (kept alive by the returned guard).
pub(crate) fn temp_location() -> (tempfile::TempDir, Location) {
    let dir = tempfile::tempdir().unwrap();
    let location = location(dir.path());
    (dir, location)
}

/// Builds a snapshot at `out` from the CSV files of `csv_dir` (`ledger.csv`,
/// `status_history.csv`, `receipts_<source>.csv`), through the same writer as gen/export.
pub(crate) async fn snapshot_from_csv(csv_dir: &Path, out: &Location, cut: &str) {
    let mut writer =
        SnapshotWriter::create(out, parse_instant(cut).unwrap(), "tests").await.unwrap();
    let mut entries: Vec<_> =
        std::fs::read_dir(csv_dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
        let (table, source) = match stem.as_str() {
            "ledger" => (Table::Ledger, None),
            "status_history" => (Table::StatusHistory, None),
            other => (
                Table::Receipts,
                Some(other.strip_prefix("receipts_").expect("receipts_<source>.csv").to_string()),
            ),
        };
        let mut table_writer = writer.table(table, source.as_deref());
        for batch in read_csv(&path, table) {
            table_writer.write(&batch).await.unwrap();
        }
        let files = table_writer.finish().await.unwrap();
        writer.add(table, files);
    }
    writer.finish().await.unwrap();
}

/// Reads a contract CSV (empty field = NULL).
pub(crate) fn read_csv(path: &Path, table: Table) -> Vec<RecordBatch> {
    let file = std::fs::File::open(path).unwrap();
    let reader = ReaderBuilder::new(table.schema()).with_header(true).build(file).unwrap();
    reader.map(|b| b.unwrap()).collect()
}

/// A run plan over `snapshot` into `out` with defaults.
pub(crate) fn plan(snapshot: &Location, out: &Location) -> RunPlan {
    let mut plan = RunPlan::new(snapshot.clone(), out.clone(), RuleSet::default_rules().unwrap());
    plan.session =
        SessionOptions { target_partitions: 2, batch_size: 8192, ..SessionOptions::default() };
    plan
}

/// Runs a plan, discarding progress.
pub(crate) async fn run(plan: &RunPlan) -> effect_recon::Result<RunReport> {
    recon::run(plan, &effect_recon::events::Events::none()).await
}

/// Reads every Parquet file of one output table of a run folder, in file order.
pub(crate) fn read_output(run_folder: &Path, table: &str) -> Vec<RecordBatch> {
    let mut files: Vec<_> =
        std::fs::read_dir(run_folder.join(table)).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let mut batches = Vec::new();
    for file in files {
        let reader = effect_recon::datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(std::fs::File::open(file).unwrap(), 1024).unwrap();
        batches.extend(reader.map(|b| b.unwrap()));
    }
    batches
}

/// Formats batches as a pipe-separated table with a header (NULL = empty field).
pub(crate) fn psv(batches: &[RecordBatch]) -> String {
    let Some(first) = batches.first() else { return String::new() };
    let schema = first.schema();
    let mut out: String =
        schema.fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>().join("|");
    out.push('\n');
    let options = FormatOptions::default().with_null("");
    for batch in batches {
        let formatters: Vec<_> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
            .collect();
        for row in 0..batch.num_rows() {
            let cells: Vec<String> = formatters.iter().map(|f| f.value(row).to_string()).collect();
            out.push_str(&cells.join("|"));
            out.push('\n');
        }
    }
    out
}

/// Every file under `dir` with its bytes, by relative path.
pub(crate) fn tree_bytes(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push((
                    path.strip_prefix(dir).unwrap().display().to_string(),
                    std::fs::read(&path).unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}

/// Says on stderr that the calling test did not run, as
/// `SKIPPED <module>::<test>: <VAR> not set; <what>`; `scripts/test` collects these lines
/// into its closing line. Written to stderr directly: the harness captures `eprintln!` of
/// passing tests, and a test that did not run must be visible in the plain test output.
pub(crate) fn say_skipped(var: &str, what: &str) {
    use std::io::Write;
    // libtest runs each test on a thread named after it.
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {var} not set; {what}");
}
