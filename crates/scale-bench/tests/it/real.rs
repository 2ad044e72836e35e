//! The bench on the real control plane at tiny sizes, as exact checks of what both controllers
//! publish and write (never timings). One control plane for the test binary (`realkube up`,
//! `REALKUBE_BIN` or target/realkube/realkube), each test in a namespace of its own; the tests
//! take turns, because the API server's write counters name no client.

use std::sync::OnceLock;
use std::time::Duration;

use scale_bench::Shape;
use scale_bench::real::{self, RealBinaries, RealConfig, RealReport, SideReport, Up};

static PLANE: OnceLock<Up> = OnceLock::new();
static TURNS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn plane() -> &'static Up {
    PLANE.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("scale-bench-real-{}", std::process::id()));
        Up::start(&real::default_realkube(), &dir, true).expect("realkube up")
    })
}

fn binaries() -> RealBinaries {
    RealBinaries::new(
        real::default_realkube(),
        super::bin("portmapper", "SCALE_BENCH_OPERATOR"),
    )
    .expect("`make realkube` (or REALKUBE_BIN) and `cargo build --workspace --bins` first")
}

fn tiny(shape: Shape, namespace: &str) -> RealConfig {
    let mut cfg = RealConfig::new(shape);
    cfg.namespace = namespace.to_owned();
    cfg.flips = 4;
    cfg.rounds = 2;
    cfg.replace = 3;
    cfg.converged = Duration::from_secs(2);
    cfg.publish_timeout = Duration::from_secs(120);
    cfg.phase_timeout = Duration::from_secs(120);
    // Generous: a stray write after this would be counted in the next flip's turn and fail it.
    cfg.settle = Duration::from_millis(500);
    cfg.setup_concurrency = 4;
    cfg
}

async fn run(shape: Shape, namespace: &str) -> RealReport {
    let _turn = TURNS.lock().await;
    let up = plane();
    let logs = up.dir.join(format!("logs-{namespace}"));
    std::fs::create_dir_all(&logs).unwrap();
    let r = real::run_on(&binaries(), &tiny(shape, namespace), &up.dir, &logs)
        .await
        .unwrap();
    println!("{}", r.table());
    r
}

/// What both controllers must have done, whatever the shape: `slices` published, each pod in
/// one of them (both group a pod's ports in one slice, single-stack here).
fn check_side(s: &SideReport, slices: usize) {
    let who = s.side.label();
    let p = &s.publication;
    assert_eq!(p.slices, slices, "{who}: slices published");
    assert_eq!(
        p.writes.slices(),
        slices as u64,
        "{who}: one write per slice to publish"
    );
    assert_eq!(
        p.converged_writes.slices() + p.converged_writes.other(),
        0,
        "{who}: writes while converged: {:?}",
        p.converged_writes
    );
    assert_eq!(s.flips.len(), 4, "{who}: flips");
    assert_eq!(
        s.flip_writes.slices(),
        s.flips.len() as u64,
        "{who}: one slice write per flip"
    );
    for f in &s.flips {
        assert_eq!(f.slices, 1, "{who}: slices that list {}", f.pod);
        assert_eq!(
            f.slice_events, 1,
            "{who}: slice events for flipping {} to ready={}",
            f.pod, f.ready
        );
        assert!(f.slice_bytes > 0, "{who}: the flip's slice carried bytes");
    }
    let rr = s.replacement.as_ref().expect("rolling replacement ran");
    assert_eq!(rr.pods, 3);
    // Each replacement adds the new pod to every slice of its ports, shows the old one
    // terminating (a delete, even with grace 0, first sets its deletionTimestamp) and removes
    // it: at most three writes per pod, its one slice; a controller may fold some.
    let bound = 3 * 3;
    assert!(
        (1..=bound).contains(&rr.writes.slices()),
        "{who}: {} slice writes for 3 pods replaced (at most {bound})",
        rr.writes.slices()
    );
    // Two processes for the flips' turns, one each for the publication and the replacement.
    assert_eq!(s.processes, 4, "{who}: processes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_shape_a_tiny_counts() {
    let r = run(Shape::A { pods: 50 }, "real-a").await;
    // 4 ports, 50 pods, 100 per slice: the operator groups pods by port set (half the pods list
    // all 4 ports, half 2), the native controller resolves all four ports for every pod.
    check_side(&r.operator, 2);
    check_side(&r.native, 1);
    let floors = r.floors.as_ref().expect("floors measured");
    assert_eq!(floors[0].1.slices, 2);
    assert_eq!(floors[1].1.slices, 1);
    assert_eq!(floors[1].1.max_endpoints, 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_shape_b_tiny_counts() {
    let r = run(
        Shape::B {
            mappings: 5,
            pods: 4,
        },
        "real-b",
    )
    .await;
    // Per PortMapping: one slice of both ports, as the native controller's.
    check_side(&r.operator, 5);
    check_side(&r.native, 5);
}
