//! The `effect-recon` binary: parse arguments, run the library, map the outcome to an
//! exit code (0 ok, 1 findings when asked to fail on them, 2 error).

mod cli;

use std::process::ExitCode;

use clap::Parser;

/// mimalloc keeps freed batch buffers for the next ones instead of returning them to the
/// kernel and faulting in fresh zeroed pages (see Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
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

/// A reader that closed our stdout early (`| head`) is not an error.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
