//! The `rowgate` binary.

/// mimalloc: fewer cycles in malloc/free than glibc for response buffers that are allocated on
/// reader threads and freed on I/O threads (measured on `GET /api/employee`, see bench/RESULTS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    match rowgate::cli::main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rowgate: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
