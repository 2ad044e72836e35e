//! Bench binary (not criterion: the figures are end-to-end through HTTP with kube-rs, one run
//! each): 10,000 pods and 1,000 EndpointSlices in memory, a paged list of the 10k pods, and a
//! fan-out of watch events to 10 watchers at 1,000 writes per second, then a paged exact list
//! of the pods as they were before the fan-out (rebuilt by undoing its 1,000 events).
//!
//! `cargo bench -p kube-emulator --bench emulator`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{
    Api, ListParams, Patch, PatchParams, PostParams, VersionMatch, WatchEvent, WatchParams,
};
use serde_json::json;

const PODS: usize = 10_000;
const SLICES: usize = 1_000;
const WATCHERS: usize = 10;
const EVENTS: usize = 1_000;

async fn create_all<K, F>(api: Api<K>, n: usize, make: F) -> Duration
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    F: Fn(usize) -> K + Send + Sync + 'static,
{
    let make = Arc::new(make);
    let t = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (api, make, next) = (api.clone(), make.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= n {
                    break;
                }
                api.create(&PostParams::default(), &make(i)).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    t.elapsed()
}

/// Five timed paged lists of every pod (limit 500, following continue tokens), sorted; each
/// page must report `at` as its resourceVersion when given.
async fn paged_list_times(pods: &Api<Pod>, first: ListParams, at: Option<&str>) -> Vec<Duration> {
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let mut n = 0;
        let mut lp = first.clone();
        loop {
            let page = pods.list(&lp).await.unwrap();
            if let Some(at) = at {
                assert_eq!(page.metadata.resource_version.as_deref(), Some(at));
            }
            n += page.items.len();
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(c) => lp = ListParams::default().limit(500).continue_token(&c),
                None => break,
            }
        }
        assert_eq!(n, PODS);
        times.push(t.elapsed());
    }
    times.sort();
    times
}

#[tokio::main]
async fn main() {
    let emu = kube_emulator::Emulator::builder()
        .bookmark_interval(Duration::from_secs(60))
        .start()
        .await
        .unwrap();
    let client = emu.client().unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");

    let d = create_all(pods.clone(), PODS, |i| {
        serde_json::from_value(json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":format!("pod-{i:05}"),"labels":{"app":"web","shard":(i % 10).to_string()}},
            "spec":{"containers":[{"name":"c","image":"nginx"}]}}))
        .unwrap()
    })
    .await;
    println!(
        "create {PODS} pods (8 concurrent clients): {:.2} s = {:.0} creates/s",
        d.as_secs_f64(),
        PODS as f64 / d.as_secs_f64()
    );
    let d = create_all(slices.clone(), SLICES, |i| {
        serde_json::from_value(json!({"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
            "metadata":{"name":format!("web-{i:04}"),"labels":{"kubernetes.io/service-name":"web","endpointslice.kubernetes.io/managed-by":"bench"}},
            "addressType":"IPv4","endpoints":(0..10).map(|j| json!({"addresses":[format!("10.1.{}.{}", i % 250, j + 1)],"conditions":{"ready":true}})).collect::<Vec<_>>(),
            "ports":[{"name":"http","port":8080}]}))
        .unwrap()
    })
    .await;
    println!(
        "create {SLICES} endpointslices (10 endpoints each): {:.2} s",
        d.as_secs_f64()
    );

    let times = paged_list_times(&pods, ListParams::default().limit(500), None).await;
    println!(
        "paged list of {PODS} pods (limit 500, 20 pages): median {:.0} ms, min {:.0} ms",
        times[2].as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3
    );
    let t = Instant::now();
    let l = pods
        .list(&ListParams::default().labels("shard=3"))
        .await
        .unwrap();
    println!(
        "label-selected list (1,000 of {PODS}): {:.0} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(l.items.len(), PODS / 10);

    // Fan-out: 10 watchers of all pods, 1,000 writes paced at 1,000/s.
    let rv = pods
        .list_metadata(&ListParams::default().limit(1))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let received = Arc::new(AtomicUsize::new(0));
    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        let mut s = pods
            .watch(&WatchParams::default().timeout(290), &rv)
            .await
            .unwrap()
            .boxed();
        let received = received.clone();
        watchers.push(tokio::spawn(async move {
            let mut mine = 0;
            while mine < EVENTS {
                if let WatchEvent::Modified(_) = s.try_next().await.unwrap().unwrap() {
                    mine += 1;
                    received.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    let t = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    for i in 0..EVENTS {
        tick.tick().await;
        let p = pods.clone();
        tokio::spawn(async move {
            p.patch(
                &format!("pod-{:05}", i * 7 % PODS),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata":{"annotations":{"bench":i.to_string()}}})),
            )
            .await
            .unwrap();
        });
    }
    let writes_done = t.elapsed();
    for w in watchers {
        w.await.unwrap();
    }
    let all = t.elapsed();
    println!(
        "fan-out: {EVENTS} writes issued in {:.2} s (target 1.00 s); {} events delivered to {WATCHERS} watchers in {:.2} s = {:.0} events/s",
        writes_done.as_secs_f64(),
        received.load(Ordering::SeqCst),
        all.as_secs_f64(),
        received.load(Ordering::SeqCst) as f64 / all.as_secs_f64()
    );

    // The pods as they were before the fan-out: an exact-RV list the emulator rebuilds from its
    // history (1,000 modifications undone), paged like a client that pins its snapshot.
    let exact = ListParams::default()
        .matching(VersionMatch::Exact)
        .at(&rv)
        .limit(500);
    let times = paged_list_times(&pods, exact, Some(&rv)).await;
    println!(
        "exact-RV paged list of {PODS} pods {EVENTS} events back (limit 500, 20 pages): median {:.0} ms, min {:.0} ms",
        times[2].as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3
    );
}
