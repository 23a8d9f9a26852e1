//! The `rowgate` binary.

fn main() -> std::process::ExitCode {
    match rowgate::cli::main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rowgate: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
