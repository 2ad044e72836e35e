//! The scale bench's harness at small sizes, as exact checks of write counts (never timings),
//! against the debug binaries `make test` builds first (`cargo build --workspace --bins`): on
//! the emulator here, on the real control plane beside the native controller in `real`.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use scale_bench::{Binaries, Report, RunConfig, Shape};

mod observer_stops;
mod real;

/// `NAME_BIN` if set, else the binary next to this test executable's `deps/` folder.
fn bin(name: &str, env: &str) -> PathBuf {
    if let Ok(p) = std::env::var(env) {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().join(name)
}

fn binaries() -> Binaries {
    Binaries::new(
        bin("kube-emulator", "SCALE_BENCH_EMULATOR"),
        bin("portmapper", "SCALE_BENCH_OPERATOR"),
    )
    .expect("run `cargo build --workspace --bins` first (make test does)")
}

fn small(shape: Shape) -> RunConfig {
    let mut cfg = RunConfig::new(shape);
    cfg.flips = 6;
    // Short resyncs so "several resyncs" pass quickly; the counts must not depend on it.
    cfg.resync_seconds = 1;
    cfg.converged_resyncs = 3;
    cfg.publish_timeout = Duration::from_secs(60);
    cfg.phase_timeout = Duration::from_secs(60);
    // Generous: a stray write after this would be counted in the next flip and fail it.
    cfg.settle = Duration::from_millis(500);
    cfg.quiet = Duration::from_secs(2);
    cfg
}

fn check_counts(r: &Report) {
    println!("{}", scale_bench::table(std::slice::from_ref(r)));
    assert!(r.published.is_some(), "not all published: {r:?}");
    assert_eq!(
        r.converged_operator_writes, 0,
        "writes while converged: {:?}",
        r.converged_writes
    );
    assert_eq!(r.flips.len(), 6);
    for f in &r.flips {
        assert_eq!(f.slices, 1, "slices that list {}: one per port set", f.pod);
        assert_eq!(
            f.slice_writes, f.slices,
            "slice writes for flipping {} to ready={}: one per slice that lists it",
            f.pod, f.ready
        );
    }
    let rolling = r.rolling.as_ref().expect("rolling restart ran");
    assert!(
        rolling.slice_writes <= rolling.transitions,
        "rolling restart: {} slice writes for {} pod transitions",
        rolling.slice_writes,
        rolling.transitions
    );
    let floor = r.floor.as_ref().expect("floor measured");
    assert_eq!(floor.slices, r.slices);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shape_a_small_write_counts() {
    let r = scale_bench::run(&binaries(), &small(Shape::A { pods: 40 }))
        .await
        .unwrap();
    // 4 ports, 40 pods, 100 per slice: one slice per port set (half the pods list all 4 ports,
    // half 2).
    assert_eq!(r.slices, 2);
    check_counts(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shape_b_small_write_counts() {
    let r = scale_bench::run(
        &binaries(),
        &small(Shape::B {
            mappings: 20,
            pods: 3,
        }),
    )
    .await
    .unwrap();
    // One slice of both ports per PortMapping.
    assert_eq!(r.slices, 20);
    check_counts(&r);
}
