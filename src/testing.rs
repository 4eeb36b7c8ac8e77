//! Test-only crash hook: `EFFECT_RECON_CRASH_AT=<stage>[:<n>]` kills the process with
//! SIGKILL the `n`-th time (default: the first) it reaches the named stage, so the
//! reliability suite can prove that a run, export or nightly job killed anywhere leaves
//! nothing a reader would take for a result, that a publish or reopen killed between (or
//! inside) its transactions leaves whole batches only, and that a rerun finishes the job.
//!
//! The stages are [`Stage`] (docs/RELIABILITY.md). Unset (always, outside the tests), the
//! hook costs one environment lookup per process. Beside it, [`pause_point`] holds a
//! process at a named point until the test lets it go.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The variable the hook reads.
pub(crate) const CRASH_AT: &str = "EFFECT_RECON_CRASH_AT";

/// A named point of the write paths where the reliability suite kills the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// A run or snapshot folder was claimed.
    Claimed,
    /// One Parquet part was written.
    PartWritten,
    /// A run's tables are written, its summary not yet.
    RunBeforeSummary,
    /// A run's summary is written, its manifest not yet.
    RunBeforeManifest,
    /// A run's manifest is written, its claim not yet released.
    RunAfterManifest,
    /// A snapshot's tables are written, its manifest not yet.
    SnapshotBeforeManifest,
    /// A snapshot's manifest is written, its claim not yet released.
    SnapshotAfterManifest,
    /// The exporter encoded one batch.
    ExportBatch,
    /// A publish batch's rows are written, its transaction not yet committed.
    PublishBeforeCommit,
    /// A publish batch (inserts and updates, or RESOLVED marks) is committed.
    PublishBatch,
    /// A reopen batch's ledger updates and audit rows are written, its transaction not yet
    /// committed.
    ReopenBeforeCommit,
    /// A reopen (or undo) batch is committed with its audit rows.
    ReopenBatch,
}

impl Stage {
    /// The stage's name in `EFFECT_RECON_CRASH_AT`.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Stage::Claimed => "claimed",
            Stage::PartWritten => "part-written",
            Stage::RunBeforeSummary => "run-before-summary",
            Stage::RunBeforeManifest => "run-before-manifest",
            Stage::RunAfterManifest => "run-after-manifest",
            Stage::SnapshotBeforeManifest => "snapshot-before-manifest",
            Stage::SnapshotAfterManifest => "snapshot-after-manifest",
            Stage::ExportBatch => "export-batch",
            Stage::PublishBeforeCommit => "publish-before-commit",
            Stage::PublishBatch => "publish-batch",
            Stage::ReopenBeforeCommit => "reopen-before-commit",
            Stage::ReopenBatch => "reopen-batch",
        }
    }
}

/// `(stage, n)` of the variable, read once.
fn target() -> Option<&'static (String, u64)> {
    static TARGET: OnceLock<Option<(String, u64)>> = OnceLock::new();
    TARGET
        .get_or_init(|| {
            let text = std::env::var(CRASH_AT).ok()?;
            let (stage, n) = match text.split_once(':') {
                Some((stage, n)) => (stage.to_string(), n.parse().ok()?),
                None => (text, 1),
            };
            Some((stage, n))
        })
        .as_ref()
}

/// Marks that the process reached `stage`; kills it there when the hook asks for it.
pub(crate) fn crash_point(stage: Stage) {
    static SEEN: AtomicU64 = AtomicU64::new(0);
    let Some((wanted, n)) = target() else { return };
    if wanted == stage.as_str() && SEEN.fetch_add(1, Ordering::SeqCst) + 1 == *n {
        kill_self();
    }
}

/// SIGKILL to ourselves: no destructor, no flush, no cleanup, as with `kill -9`.
fn kill_self() -> ! {
    #[cfg(unix)]
    // SAFETY: kill(2) on our own pid has no memory effects; it does not return.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    std::process::abort()
}

/// The variable of the pause hook: `<point>:<folder>`.
pub(crate) const PAUSE_AT: &str = "EFFECT_RECON_PAUSE_AT";

/// Test-only pause hook: with `EFFECT_RECON_PAUSE_AT=<point>:<folder>`, the process
/// reaching `point` creates `<folder>/paused` and waits (up to a minute) for
/// `<folder>/resume`, so a test can change the database at exactly that moment (a
/// concurrent writer between what a command read and what it writes).
pub(crate) async fn pause_point(point: &str) {
    let Ok(text) = std::env::var(PAUSE_AT) else { return };
    let Some((wanted, folder)) = text.split_once(':') else { return };
    if wanted != point {
        return;
    }
    let folder = std::path::Path::new(folder);
    let _ = std::fs::write(folder.join("paused"), point);
    for _ in 0..3000 {
        if folder.join("resume").exists() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
