//! The `orkeon` binary: a thin entry point over the daemon crate's CLI.
//!
//! The binary lives in the root package so that the end-to-end tests in `tests/` can run it
//! through `CARGO_BIN_EXE_orkeon`.

fn main() -> std::process::ExitCode {
    orkeon_daemon::cli::main()
}
