//! The case budget of the stable-toolchain fuzz targets, shared by every crate's fuzz tests
//! (each includes this file with `#[path]`): small by default so `make test` stays fast,
//! `PORTMAPPER_FUZZ_CASES` (set high by `make soak`) overrides it.

use proptest::test_runner::Config;

/// Cases per target when `PORTMAPPER_FUZZ_CASES` is unset.
pub const DEFAULT_CASES: u32 = 64;

/// Cases per target: `PORTMAPPER_FUZZ_CASES`, else [`DEFAULT_CASES`].
pub fn cases() -> u32 {
    std::env::var("PORTMAPPER_FUZZ_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(DEFAULT_CASES)
}

/// A proptest configuration with the budget. No failure persistence: a finding is reported with
/// its minimal input and becomes a named regression test instead.
pub fn config() -> Config {
    Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    }
}

/// The same budget divided for targets that open sockets per case (at least 8 cases).
#[allow(dead_code)]
pub fn config_per(divisor: u32) -> Config {
    Config {
        cases: (cases() / divisor.max(1)).max(8),
        ..config()
    }
}
