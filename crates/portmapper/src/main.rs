//! `portmapper`: the operator binary.

use std::process::ExitCode;

/// See the dependency's comment in Cargo.toml: the resident set follows the live heap.
#[cfg(all(target_os = "linux", not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    portmapper::cli::entry::main("portmapper")
}
