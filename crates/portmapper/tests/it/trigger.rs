//! `last-change-trigger-time` end to end (issue 12 item 2): a slice written because a pod's
//! Ready condition flipped carries that transition's time, not the time of the write; the slice
//! the change did not touch keeps its own.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::harness::*;

const T: Duration = Duration::from_secs(20);
const TRIGGER: &str = "endpoints.kubernetes.io/last-change-trigger-time";

fn trigger_of(slices: &[EndpointSlice], name: &str) -> Option<Timestamp> {
    slices
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some(name))?
        .metadata
        .annotations
        .as_ref()?
        .get(TRIGGER)?
        .parse()
        .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ready_flip_is_stamped_with_the_pods_transition_time() {
    let h = Harness::start().await;
    h.create(service("web", &[("http", 8080), ("https", 8443)]))
        .await;
    ready_pods(
        &h,
        "web",
        &[
            ("pod-a", "http", "10.244.0.1"),
            ("pod-b", "http,https", "10.244.0.2"),
        ],
    )
    .await;
    h.create(portmapping("web", "web")).await;
    eventually("published", T, || async {
        let m = h.membership("web").await;
        (m.get("web.http")?.len() == 2 && m.get("web.https")?.len() == 1).then_some(())
    })
    .await;
    let before = h.slices("web").await;
    let (http_before, https_before) = (
        trigger_of(&before, "web.http").unwrap(),
        trigger_of(&before, "web.https").unwrap(),
    );
    // kubelet marks pod-a unready at a whole second after everything the slices reflect (pod
    // conditions carry seconds); wait until that second has passed, as it would have for
    // kubelet, so the transition lies between the last write and the next one.
    let flipped = Timestamp::from_second(http_before.max(https_before).as_second() + 1).unwrap();
    eventually("the clock passes the transition", T, || async {
        (Timestamp::now() > flipped + SignedDuration::from_millis(100)).then_some(())
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), &h.ns);
    pods.patch_status(
        "pod-a",
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"conditions": [
            {"type": "Ready", "status": "False", "lastTransitionTime": flipped.to_string()},
        ]}})),
    )
    .await
    .unwrap();
    let after = eventually("pod-a withdrawn", T, || async {
        (h.membership("web").await.get("web.http")? == &vec!["pod-b".to_string()]).then_some(())?;
        Some(h.slices("web").await)
    })
    .await;
    assert_eq!(trigger_of(&after, "web.http"), Some(flipped));
    assert_eq!(trigger_of(&after, "web.https"), Some(https_before));
}
