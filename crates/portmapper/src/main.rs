//! `portmapper`: the operator binary.

use std::process::ExitCode;

/// See the dependency's comment in Cargo.toml: the resident set follows the live heap.
#[cfg(all(
    target_os = "linux",
    not(target_env = "musl"),
    not(feature = "system-malloc")
))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    // Freed pages go back to the system within seconds even while the operator is idle between
    // changes (without the thread jemalloc purges only when it next allocates): 216 → 202 MiB
    // at 50,000 pods. Memory is only returned later without it, so a failure is not fatal.
    #[cfg(all(
        target_os = "linux",
        not(target_env = "musl"),
        not(feature = "system-malloc")
    ))]
    if let Err(err) = tikv_jemalloc_ctl::background_thread::write(true) {
        eprintln!("portmapper: jemalloc's background thread not started: {err}");
    }
    portmapper::cli::entry::main("portmapper")
}
