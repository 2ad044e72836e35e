//! Operator benchmark on the emulator (a bench binary, not a timed test): time to converge a
//! pool, writes issued once converged, and pod-flip → slice latency.
//!
//! `cargo bench -p portmapper --bench operator -- [pods] [flips]` (defaults: 1000 pods, 30 flips).

// A benchmark binary: a failed unwrap aborts the run, which is what we want.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, CustomResourceExt};
use portmapper::controller;
use portmapper::reconcile::context::Settings;
use portmapper::runtime::http::Readiness;
use portmapper::runtime::leader::Leadership;
use portmapper::runtime::metrics::Metrics;
use portmapper_api::PortMapping;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const NS: &str = "default";
const PORTS: [(&str, i32); 4] = [
    ("http", 8080),
    ("https", 8443),
    ("admin", 9000),
    ("metrics", 9100),
];

fn ip(i: usize) -> String {
    format!("10.244.{}.{}", i / 250, i % 250 + 1)
}

async fn ready_count(client: &Client, port: &str) -> usize {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), NS);
    let lp = ListParams::default().labels("kubernetes.io/service-name=bench");
    api.list(&lp)
        .await
        .unwrap()
        .items
        .iter()
        .filter(|s| {
            s.ports
                .iter()
                .flatten()
                .any(|p| p.name.as_deref() == Some(port))
        })
        .map(|s| s.endpoints.len())
        .sum()
}

async fn set_ready(pods: &Api<Pod>, i: usize, ready: bool) {
    let status = json!({"status": {
        "phase": "Running", "podIP": ip(i), "podIPs": [{"ip": ip(i)}],
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
    }});
    pods.patch_status(
        &format!("pod-{i}"),
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .unwrap();
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let n: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let flips: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(30);

    let emu = kube_emulator::Emulator::start().await.unwrap();
    let client = emu.client().unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &PortMapping::crd())
        .await
        .unwrap();
    await_condition(
        crds,
        "portmappings.portmapper.dev",
        conditions::is_crd_established(),
    )
    .await
    .unwrap();

    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "bench"},
        "spec": {"ports": PORTS.iter().map(|(n, p)| json!({"name": n, "port": p})).collect::<Vec<_>>()},
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for i in 0..n {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("pod-{i}"), "labels": {"example.com/group": "bench"},
                         "annotations": {"example.com/ports": if i % 2 == 0 { "http,https,admin,metrics" } else { "http,admin" }}},
            "spec": {"containers": [{"name": "app", "image": "pause"}]},
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
        set_ready(&pods, i, true).await;
    }

    let shutdown = CancellationToken::new();
    let settings = Settings {
        namespace: None,
        concurrency: 4,
        resync: Duration::from_secs(2),
        node_lookups: false,
        instance: Some("bench".into()),
        batch_window: portmapper::reconcile::batch_window::default_batch_window(),
        max_pod_watches_per_namespace: portmapper::index::DEFAULT_MAX_POD_WATCHES,
        budgets: portmapper_core::budget::Budgets::default(),
        probe_concurrency: 16,
        probe_concurrency_per_namespace: None,
        probe_concurrency_per_portmapping: None,
        webhook_egress: Default::default(),
    };
    let task = tokio::spawn(controller::run(
        client.clone(),
        settings,
        Leadership::always(),
        Metrics::new(),
        Readiness::default(),
        shutdown.clone(),
    ));
    let pms: Api<PortMapping> = Api::namespaced(client.clone(), NS);
    let pm: PortMapping = serde_json::from_value(json!({
        "apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
        "metadata": {"name": "bench"},
        "spec": {"serviceRef": {"name": "bench"}, "pods": {"key": "example.com/group"},
                 "defaultChecks": [{"podReady": {}}, {"portNames": {"key": "example.com/ports"}}]},
    }))
    .unwrap();
    let started = Instant::now();
    pms.create(&PostParams::default(), &pm).await.unwrap();
    while ready_count(&client, "http").await < n
        || ready_count(&client, "https").await < n.div_ceil(2)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let converge = started.elapsed();

    // Converged write count: writes by our field manager over 3 resync periods.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = emu.requests().writes_by_manager(portmapper_api::MANAGER);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let converged_writes = emu.requests().writes_by_manager(portmapper_api::MANAGER) - before;

    // Pod flip → slice latency: make one pod unready, wait until http loses it; then back.
    let mut latencies = Vec::new();
    for k in 0..flips {
        let i = (k * 7919) % n;
        for ready in [false, true] {
            let want = if ready { n } else { n - 1 };
            let t = Instant::now();
            set_ready(&pods, i, ready).await;
            while ready_count(&client, "http").await != want {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            latencies.push(t.elapsed());
        }
    }
    latencies.sort();
    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(5), task).await;

    println!(
        "operator bench: {n} pods x {} ports, 1 PortMapping, emulator in-process",
        PORTS.len()
    );
    println!(
        "  converge from PortMapping create: {:.2}s",
        converge.as_secs_f64()
    );
    println!("  writes while converged over 3 resyncs (6s): {converged_writes}");
    println!(
        "  pod flip -> slice latency over {} flips: p50 {:.1}ms, p95 {:.1}ms, max {:.1}ms",
        latencies.len(),
        percentile(&latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&latencies, 0.95).as_secs_f64() * 1e3,
        latencies.last().unwrap().as_secs_f64() * 1e3
    );
}
