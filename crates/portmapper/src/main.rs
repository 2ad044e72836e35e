//! `portmapper`: the operator binary.

use std::process::ExitCode;

fn main() -> ExitCode {
    portmapper::cli::entry::main("portmapper")
}
