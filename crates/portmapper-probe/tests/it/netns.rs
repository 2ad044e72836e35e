//! Probes of real (non-loopback) pod IPs, inside a network namespace this test creates.
//!
//! The outer test re-runs this test binary under `unshare -n`, brings up `lo` and routes
//! 10.244.0.0/16 locally, then runs the inner test there: its listeners bind 10.244.x.y pod
//! IPs and the production executor (loopback not allowed) probes them. No packet leaves the
//! namespace, which has no other interface.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use portmapper_probe::{
    Cause, ExecutorConfig, Membership, NetworkExecutor, NoMetrics, Outcome, Prober, ProberConfig,
};

use test_support::{Inner, Sandbox, in_sandbox, run_inner};

use crate::grpc::{GrpcServer, grpc};
use crate::support::*;

const INNER: &str = "netns::inner_probes_pod_ips_in_namespace";
const ENV: &str = "PORTMAPPER_PROBE_IN_NETNS";

#[test]
fn probes_pod_ips_inside_own_network_namespace() {
    run_inner(
        Sandbox::NetworkNamespace,
        Inner {
            what: "netns test",
            filter: INNER,
            exact: true,
            threads: 1,
            expect_passed: 1,
            env: ENV,
        },
    );
}

#[tokio::test]
#[ignore = "runs only inside the network namespace made by probes_pod_ips_inside_own_network_namespace"]
async fn inner_probes_pod_ips_in_namespace() {
    if !in_sandbox(ENV) {
        return;
    }
    let pod_a: IpAddr = "10.244.1.10".parse().unwrap();
    let pod_b: IpAddr = "10.244.2.20".parse().unwrap();
    let http = HttpServer::start(pod_a, Reply::status(200)).await;
    let grpc_server = GrpcServer::start(pod_a).await;
    let down = refused_addr(pod_b).await;

    // The production configuration: loopback refused, pod IPs allowed.
    let exec = NetworkExecutor::new(ExecutorConfig::default()).unwrap();
    let cases = [
        (
            target(http.addr, http_get("/healthz")),
            Outcome::Include,
            Cause::Healthy,
        ),
        (
            target(http.addr, tcp_socket(None)),
            Outcome::Include,
            Cause::Healthy,
        ),
        (
            target(grpc_server.addr, grpc(None)),
            Outcome::Include,
            Cause::Healthy,
        ),
        (
            target(down, http_get("/")),
            Outcome::Exclude,
            Cause::Refused,
        ),
        (
            target(down, tcp_socket(None)),
            Outcome::Exclude,
            Cause::Refused,
        ),
    ];
    for (t, outcome, cause) in &cases {
        let result = exec.run(&mapping(), t).await;
        assert_eq!(
            (result.outcome, result.cause),
            (*outcome, *cause),
            "{t:?}: {result:?}"
        );
    }

    // End to end through the prober: pod b's port goes down, pod a's stays.
    let (prober, mut events) = Prober::network(
        // One PortMapping that may use the whole bound.
        ProberConfig {
            concurrency: 8,
            concurrency_per_namespace: Some(8),
            concurrency_per_mapping: Some(8),
            start_jitter: false,
        },
        ExecutorConfig::default(),
        Arc::new(NoMetrics),
    )
    .unwrap();
    let mut healthy = target(http.addr, http_get("/"));
    healthy.initial_membership = Membership::Included;
    let mut failing = target(down, http_get("/"));
    std::sync::Arc::make_mut(&mut failing.pod).name = "kafka-1".into();
    std::sync::Arc::make_mut(&mut failing.pod).uid = "uid-1".into();
    failing.initial_membership = Membership::Included;
    failing.settings.failure_threshold = 1;
    prober.set_targets(&mapping(), [healthy.clone(), failing.clone()]);
    let key = tokio::time::timeout(Duration::from_secs(5), events.recv())
        .await
        .expect("membership change notified")
        .unwrap();
    assert_eq!(key, mapping());
    let results = prober.results(&mapping());
    assert_eq!(results[&healthy.key()].membership, Membership::Included);
    assert_eq!(results[&failing.key()].membership, Membership::Excluded);
    assert!(
        results[&failing.key()].reason.contains("10.244.2.20"),
        "{results:?}"
    );
    println!("netns: probed pod IPs {pod_a} and {pod_b} inside the test's namespace");
}
