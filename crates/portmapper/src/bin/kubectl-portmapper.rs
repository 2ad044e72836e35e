//! `kubectl-portmapper`: the same program as `portmapper`, named so kubectl finds it on `PATH`
//! as a plugin (`kubectl portmapper status NAME`, krew-style).

use std::process::ExitCode;

fn main() -> ExitCode {
    portmapper::cli::entry::main("kubectl portmapper")
}
