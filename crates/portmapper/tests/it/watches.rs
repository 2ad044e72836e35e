//! Watches under faults: a reset storm is paced by the backoff (issue 11 item 9), and a silent
//! watch is restarted so the operator converges (item 8). Counted in the emulator's request log.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kube_emulator::faults::{DropMode, FaultAction, Rule};
use portmapper::runtime::http::Readiness;
use portmapper::runtime::watch_health::WatchPolicy;

use crate::harness::*;

async fn wait_members(h: &Harness, pods: &[&str], within: Duration) {
    let want: Vec<String> = pods.iter().map(|p| p.to_string()).collect();
    eventually(&format!("web.http = {pods:?}"), within, || async {
        (h.membership("web").await.get("web.http")? == &want).then_some(())
    })
    .await;
}

/// Every watch reset abruptly after one event for 20 s. The event never reaches the operator:
/// the emulator aborts the response right after writing it, and hyper drops what it had not
/// flushed, so kube's watcher re-watches from the same resourceVersion every time. ≤ 60 watch
/// requests across all watches (4,270 with kube's watcher re-watching at once), and membership
/// follows a change during the storm: re-watches that make no progress relist
/// (`watch_health::NO_PROGRESS_RELIST`), which the reset rule does not touch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_reset_storm_is_paced_and_membership_follows_during_it() {
    let mut h = Harness::emulator().await;
    h.create(service("web", &[("http", 8080)])).await;
    ready_pods(&h, "web", &[("pod-a", "http", "10.244.0.1")]).await;
    h.create(pod("pod-b", "web", "http")).await;
    h.create(portmapping("web", "web")).await;
    // Fault rules apply to watches opened after them: every watch the operator opens is reset
    // abruptly after one event (a bookmark does not count).
    let storm = h.emu().inject(
        Rule::new(FaultAction::WatchDrop {
            after_events: Some(1),
            after_ms: None,
            mode: DropMode::Abrupt,
        })
        .verbs(&["watch"]),
    );
    h.emu().requests().clear();
    let started = tokio::time::Instant::now();
    let from = h.emu().requests().elapsed();
    h.run_controller();
    wait_members(&h, &["pod-a"], Duration::from_secs(15)).await;
    // Pacing, not an absence check: the change below lands well inside the storm.
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Bound: the change is in the replay of the next watch, lost with it; the re-watch after
    // that (≤ 3.75 s, the backoff cap with jitter) is the second from the same version and
    // relists; the one before it may wait as long; plus a reconcile.
    let changed = tokio::time::Instant::now();
    h.set_pod_status("pod-b", &["10.244.0.2"], true).await;
    wait_members(&h, &["pod-a", "pod-b"], Duration::from_secs(12)).await;
    let followed = changed.elapsed();
    // A second change during the storm, from the state the relist left.
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(h.client.clone(), &h.ns);
    api.delete("pod-a", &Default::default()).await.unwrap();
    let changed = tokio::time::Instant::now();
    wait_members(&h, &["pod-b"], Duration::from_secs(12)).await;
    let followed_again = changed.elapsed();
    // The target counts 20 s of resets; on a slow machine the changes may take longer, and
    // only the requests of the first 20 s count.
    let storm_for = Duration::from_secs(20);
    tokio::time::sleep_until(started + storm_for).await;
    let during = h
        .emu()
        .requests()
        .filter(|r| r.verb == "watch" && r.since_start < from + storm_for)
        .len();
    let pod_lists = h
        .emu()
        .requests()
        .filter(|r| r.verb == "list" && r.resource == "pods")
        .len();
    let relists = h
        .metric("portmapper_watch_restarts_total{watch=\"pods\",reason=\"no_progress\"}")
        .unwrap_or(0.0);
    println!(
        "20 s of resets: {during} watch requests, {pod_lists} pod lists ({relists} relists for \
         no progress); membership followed {followed:?} and {followed_again:?} after the changes"
    );
    assert!(during <= 60, "{during} watch requests in 20 s of resets");
    assert!(
        during >= 7,
        "the watches were not reset: {during} watch requests"
    );
    assert!(relists >= 1.0, "the pod watch never relisted");
    assert!(h.emu().faults().remove(&storm));
    // And after it.
    ready_pods(&h, "web", &[("pod-c", "http", "10.244.0.3")]).await;
    wait_members(&h, &["pod-b", "pod-c"], Duration::from_secs(10)).await;
}

/// A pod watch that opens but stays silent (no events, no bookmarks) is restarted after
/// `stall_after` (2 × the emulator's 1 s bookmark interval); its relist brings the missed change,
/// within 2 × bookmark interval + 5 s. `/readyz` said so meanwhile, and the metrics count it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_watch_is_restarted_and_the_operator_converges() {
    let mut h = Harness::emulator().await;
    h.readiness = Readiness::new(WatchPolicy {
        stall_after: Duration::from_secs(2),
        ..WatchPolicy::default()
    });
    // The first pod watch (after its initial list) goes silent.
    h.emu().inject(
        Rule::new(FaultAction::WatchStall)
            .verbs(&["watch"])
            .resource("", "pods")
            .times(1),
    );
    h.run_controller();
    h.create(service("web", &[("http", 8080)])).await;
    ready_pods(&h, "web", &[("pod-a", "http", "10.244.0.1")]).await;
    h.create(portmapping("web", "web")).await;
    wait_members(&h, &["pod-a"], Duration::from_secs(15)).await;

    let said_stalled = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (readiness, said) = (h.readiness.clone(), said_stalled.clone());
        tokio::spawn(async move {
            loop {
                if readiness.reason().is_some_and(|r| r.contains("pods")) {
                    said.store(true, Ordering::Release);
                }
                // A sampler: readiness has no event to wait for.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let changed = tokio::time::Instant::now();
    ready_pods(&h, "web", &[("pod-b", "http", "10.244.0.2")]).await;
    let bookmark_interval = Duration::from_secs(1); // the test emulator's
    wait_members(
        &h,
        &["pod-a", "pod-b"],
        2 * bookmark_interval + Duration::from_secs(5),
    )
    .await;
    println!(
        "converged {:?} after the change behind a stalled watch",
        changed.elapsed()
    );
    sampler.abort();

    assert_eq!(
        h.metric("portmapper_watch_restarts_total{watch=\"pods\",reason=\"stalled\"}"),
        Some(1.0)
    );
    // A wait, not a figure: the metric and /readyz follow the restarted watch's first bytes.
    eventually("stall cleared", Duration::from_secs(15), || async {
        (h.metric("portmapper_watches_stalled{watch=\"pods\"}") == Some(0.0)
            && h.readiness.reason().is_none())
        .then_some(())
    })
    .await;
    assert!(
        said_stalled.load(Ordering::Acquire),
        "/readyz never said the pod watch stalled"
    );
}
