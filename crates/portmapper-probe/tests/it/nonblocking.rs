//! Reading results never waits on a probe, however many hang.

use std::sync::Arc;
use std::time::Duration;

use portmapper_api::check::HttpGetCheck;
use portmapper_probe::{
    ExecutorConfig, Membership, NetworkCheck, NoMetrics, Prober, ProberConfig, Target,
};

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_probes_never_delay_a_results_read() {
    let hanging = HttpServer::start(LOCALHOST, Reply::Hang).await;
    let (prober, _events) = Prober::network(
        // One PortMapping that may use the whole bound.
        ProberConfig {
            concurrency: 4,
            concurrency_per_namespace: Some(4),
            concurrency_per_mapping: Some(4),
            start_jitter: false,
        },
        ExecutorConfig {
            allow_loopback: true,
            ..ExecutorConfig::default()
        },
        Arc::new(NoMetrics),
    )
    .unwrap();
    // Twenty targets whose probes hang for the longest allowed timeout.
    let targets: Vec<Target> = (0..20)
        .map(|i| {
            let mut t = target(
                hanging.addr,
                NetworkCheck::HttpGet(HttpGetCheck {
                    timeout_seconds: Some(60),
                    ..HttpGetCheck::default()
                }),
            );
            std::sync::Arc::make_mut(&mut t.pod).name = format!("kafka-{i}");
            std::sync::Arc::make_mut(&mut t.pod).uid = format!("uid-{i}");
            t.initial_membership = Membership::Included;
            t
        })
        .collect();
    prober.set_targets(&mapping(), targets);
    // Wait until the probes are in flight: the server holds four connections.
    for _ in 0..200 {
        if hanging.seen.connections() >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Four connections, the concurrency: every permit is held by a hanging probe.
    assert_eq!(hanging.seen.connections(), 4);

    let prober = Arc::new(prober);
    let reader = prober.clone();
    // A blocking read on another thread; if it waited on a probe it would take 60 s.
    let read = tokio::task::spawn_blocking(move || {
        for _ in 0..999 {
            reader.results(&mapping());
        }
        reader.results(&mapping())
    });
    let results = tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("results read waited on hanging probes")
        .unwrap();
    assert_eq!(results.len(), 20);
    assert!(
        results
            .values()
            .all(|r| r.membership == Membership::Included && r.probes == 0)
    );
    // No probe finished (probes == 0 above) and none started after: still the same four.
    assert_eq!(
        hanging.seen.connections(),
        4,
        "probes still hanging while reads completed"
    );
    // set_targets does not wait either.
    let setter = prober.clone();
    tokio::time::timeout(
        Duration::from_secs(5),
        tokio::task::spawn_blocking(move || setter.remove_mapping(&mapping())),
    )
    .await
    .expect("set_targets waited on hanging probes")
    .unwrap();
    assert!(prober.mapping_keys().is_empty());
}
