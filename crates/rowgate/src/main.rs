//! The `rowgate` binary.

/// mimalloc: fewer cycles in malloc/free than glibc for response buffers that are allocated on
/// reader threads and freed on I/O threads (measured on `GET /api/employee`, see bench/RESULTS.md).
/// Built without transparent huge pages (`no_thp`): mimalloc asks for them on its large regions,
/// and a 2 MiB page faulted in for each large buffer made a 10 MB request body cost 4-6x its size
/// in RSS instead of 2-3x (and an idle worker 9 MB more).
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
