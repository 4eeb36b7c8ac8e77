//! The `effect-recon` binary: parse arguments, run the library, map the outcome to an
//! exit code (0 ok, 1 findings when asked to fail on them, 2 error).

mod cli;

use std::process::ExitCode;

use clap::Parser;

/// mimalloc, told by [`set_purge_delay`] when to hand the pages it frees back (see Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    no_transparent_huge_pages();
    let args = cli::Cli::parse();
    if !args.serves_until_stopped() {
        set_purge_delay(args.memory_limit().is_some());
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(cli::execute(args)) {
        Ok(outcome) => outcome.exit_code(),
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", cli::render_error(&e));
            ExitCode::from(2)
        }
    }
}

/// A command that runs one job and exits keeps the memory it frees for its next
/// allocations instead of handing it back to the kernel 10 ms later: an export otherwise
/// spent a third of its CPU zeroing the pages it faulted back in (measured with perf on a
/// 1M-order day: `clear_page_erms`), and 10–25% of its wall time. Its RSS stays at its peak
/// until it exits.
///
/// Under `--memory-limit` (`bounded`) freed pages go back after 100 ms instead: memory kept
/// is not always reused, and a 10M-order day under 512MiB peaked at 802 MiB kept against
/// 502 MiB handed back after 100 ms (10 ms: as much, and slower; benches/RESULTS.md).
/// Cluster nodes, which live on, keep mimalloc's default (10 ms). `MIMALLOC_PURGE_DELAY`
/// set in the environment (mimalloc's own switch) is left to decide.
fn set_purge_delay(bounded: bool) {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // mimalloc's `mi_option_purge_delay` (mimalloc.h: the 16th option, in v2 and v3), in
    // milliseconds; -1 never purges.
    const PURGE_DELAY: std::os::raw::c_int = 15;
    extern "C" {
        fn mi_option_set(option: std::os::raw::c_int, value: std::os::raw::c_long);
    }
    let delay = if bounded { 100 } else { -1 };
    // SAFETY: mi_option_set only stores an integer in mimalloc's option table.
    unsafe { mi_option_set(PURGE_DELAY, delay) }
}

/// Turns transparent huge pages off for this process. mimalloc asks the kernel for huge
/// pages on its arenas, and the first touch of each 2 MiB then zeroes all of it however
/// little is used: on a chained night's run `clear_page_erms` under huge-page faults was
/// half of all CPU (perf), and without huge pages the run took 0.72 s instead of 1.20 s,
/// a 1M-order day 1.65 s instead of 1.92 s (benches/RESULTS.md). Before anything is
/// allocated, so no arena is advised for huge pages either. `MIMALLOC_ALLOW_THP` set in
/// the environment (mimalloc's own switch) is left to decide.
fn no_transparent_huge_pages() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
        return;
    }
    // mimalloc's `mi_option_allow_thp` (mimalloc.h, v3: the 44th option).
    const ALLOW_THP: std::os::raw::c_int = 43;
    extern "C" {
        fn mi_option_set(option: std::os::raw::c_int, value: std::os::raw::c_long);
    }
    // SAFETY: mi_option_set only stores an integer in mimalloc's option table; prctl with
    // PR_SET_THP_DISABLE only sets a flag of this process (an error leaves THP as it was).
    unsafe {
        mi_option_set(ALLOW_THP, 0);
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

/// A reader that closed our stdout early (`| head`) is not an error.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
