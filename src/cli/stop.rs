//! SIGTERM and SIGINT as a request to stop, counted, for a command that runs until stopped
//! and must not stop half-way through its work (`watch`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Stop requests received (SIGTERM or SIGINT).
static REQUESTS: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_stop(_: libc::c_int) {
    REQUESTS.fetch_add(1, Ordering::SeqCst);
}

/// Counts SIGTERM and SIGINT from now on instead of dying of them.
pub(super) fn catch() {
    let handler: extern "C" fn(libc::c_int) = on_stop;
    // SAFETY: the handler only adds to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGTERM, handler as libc::sighandler_t);
        libc::signal(libc::SIGINT, handler as libc::sighandler_t);
    }
}

/// Stop requests so far.
pub(super) fn requests() -> u32 {
    REQUESTS.load(Ordering::SeqCst)
}

/// Returns once at least `n` stop requests have arrived.
pub(super) async fn requested(n: u32) {
    while requests() < n {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
