//! Test-only crash hook: `EFFECT_RECON_CRASH_AT=<stage>[:<n>]` kills the process with
//! SIGKILL the `n`-th time (default: the first) it reaches the named stage, so the
//! reliability suite can prove that a run, export or nightly job killed anywhere leaves
//! nothing a reader would take for a result, and that a rerun finishes the job.
//!
//! Stages (see docs/RELIABILITY.md): `claimed`, `part-written`, `run-before-summary`,
//! `run-before-manifest`, `run-after-manifest`, `snapshot-before-manifest`,
//! `snapshot-after-manifest`, `export-batch`. Unset (always, outside the tests), the hook
//! costs one environment lookup per process.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The variable the hook reads.
pub const CRASH_AT: &str = "EFFECT_RECON_CRASH_AT";

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
pub fn crash_point(stage: &str) {
    static SEEN: AtomicU64 = AtomicU64::new(0);
    let Some((wanted, n)) = target() else { return };
    if wanted == stage && SEEN.fetch_add(1, Ordering::SeqCst) + 1 == *n {
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
