//! The publication gate never strands a pod, on the real control plane: deleting a
//! PortMapping releases its gated pods (True, `Released`) through its finalizer, even when the
//! operator is down while the deletion is requested; a pod that leaves the pool is released;
//! a gate held past `readinessGate.timeoutSeconds` turns True, `TimedOut`, with a Warning. Each
//! condition carries the pod's generation as `observedGeneration`.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use portmapper_api::PortMapping;
use portmapper_core::PUBLISHED_GATE;
use portmapper_core::planner::RELEASE_FINALIZER;
use serde_json::json;

use crate::gate::gate_of;
use crate::harness::*;

const WAIT: Duration = Duration::from_secs(20);

/// A pool pod (group `web`) that opts in to the gate.
fn gated_pod(name: &str) -> serde_json::Value {
    let mut p = pod(name, "web", "http");
    p["spec"]["readinessGates"] = json!([{"conditionType": PUBLISHED_GATE}]);
    p
}

/// Plays kubelet: an address, and containers ready (since now) or not. Ready stays False (the
/// gate is not True yet). Played: the release and timeout tests need a gate held for as long
/// as they choose, with a known `ContainersReady` transition time to measure the deadline from.
async fn kubelet(h: &Harness, name: &str, ip: &str, containers_ready: bool) {
    let api: Api<Pod> = Api::namespaced(h.client.clone(), &h.ns);
    let ready = if containers_ready { "True" } else { "False" };
    let status = json!({"status": {
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "conditions": [
            {"type": "ContainersReady", "status": ready, "lastTransitionTime": Timestamp::now().round(k8s_openapi::jiff::Unit::Second).unwrap()},
            {"type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady"},
        ],
        "containerStatuses": [{
            "name": "app", "ready": containers_ready, "restartCount": 0,
            "image": "pause", "imageID": "", "state": {"running": {}},
        }],
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Strategic(status))
        .await
        .unwrap();
}

/// Waits until the pod's gate has this status and reason; returns it.
async fn wait_gate(h: &Harness, name: &str, status: &str, reason: &str) -> PodCondition {
    eventually(&format!("{name} gate {status} {reason}"), WAIT, || async {
        gate_of(h, name)
            .await
            .filter(|c| c.status == status && c.reason.as_deref() == Some(reason))
    })
    .await
}

/// The operator's writes of `pod`'s status (our gate).
async fn gate_writes(h: &Harness, pod: &str) -> usize {
    h.requests()
        .await
        .iter()
        .filter(|r| r.is_write() && r.field_manager == portmapper_api::MANAGER)
        .filter(|r| r.resource == "pods" && r.subresource == "status" && r.name == pod)
        .count()
}

/// Service `web` (http), PortMapping `web`; gated `pod-a` whose containers are not ready
/// (False, NotPublished) and `pod-b` ready (True, Published). Returns once both are set and
/// the PortMapping carries the release finalizer.
async fn gated_pool(h: &Harness) {
    h.create(service("web", &[("http", 8080)])).await;
    h.create(gated_pod("pod-a")).await;
    h.create(gated_pod("pod-b")).await;
    kubelet(h, "pod-a", "10.244.0.1", false).await;
    kubelet(h, "pod-b", "10.244.0.2", true).await;
    h.create(portmapping("web", "web")).await;
    wait_gate(h, "pod-a", "False", "NotPublished").await;
    wait_gate(h, "pod-b", "True", "Published").await;
    eventually("the release finalizer", WAIT, || async {
        h.portmapping("web")
            .await
            .metadata
            .finalizers
            .filter(|f| f.iter().any(|f| f == RELEASE_FINALIZER))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_portmapping_releases_its_gates_even_when_the_operator_was_down() {
    let mut h = Harness::start().await;
    gated_pool(&h).await;
    let generation = h
        .api::<Pod>()
        .get("pod-a")
        .await
        .unwrap()
        .metadata
        .generation;
    assert!(generation.is_some(), "the API server keeps pod generations");
    assert_eq!(
        gate_of(&h, "pod-a").await.unwrap().observed_generation,
        generation
    );
    // Deleted while no operator runs: the finalizer holds the PortMapping, pod-a stays False.
    h.stop_controller().await;
    let pms: Api<PortMapping> = Api::namespaced(h.client.clone(), &h.ns);
    pms.delete("web", &Default::default()).await.unwrap();
    let held = h.portmapping("web").await;
    assert!(held.metadata.deletion_timestamp.is_some());
    assert_eq!(gate_of(&h, "pod-a").await.unwrap().status, "False");
    // Back: pod-a is released, pod-b (True already) is left as it is, and the PortMapping goes.
    h.run_controller();
    wait_gate(&h, "pod-a", "True", "Released").await;
    eventually("the PortMapping is gone", WAIT, || async {
        pms.get_opt("web").await.unwrap().is_none().then_some(())
    })
    .await;
    let a = gate_of(&h, "pod-a").await.unwrap();
    assert_eq!(
        (a.status.as_str(), a.reason.as_deref(), a.message.as_deref()),
        (
            "True",
            Some("Released"),
            Some("PortMapping web is being deleted: the gate no longer waits for its publication")
        )
    );
    assert_eq!(a.observed_generation, generation);
    let b = gate_of(&h, "pod-b").await.unwrap();
    assert_eq!(
        (b.status.as_str(), b.reason.as_deref()),
        ("True", Some("Published"))
    );
    // pod-a: False, then Released; pod-b: Published only.
    assert_eq!(
        (
            gate_writes(&h, "pod-a").await,
            gate_writes(&h, "pod-b").await
        ),
        (2, 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_leaving_its_pool_is_released_unless_another_portmapping_now_gates_it() {
    let h = Harness::start().await;
    gated_pool(&h).await;
    // pod-c and pod-d wait too; pod-d moves to the pool of PortMapping `api` (same gate type).
    h.create(service("api", &[("http", 8080)])).await;
    let mut api = portmapping("api", "api");
    api["spec"]["pods"]["value"] = json!("api");
    h.create(api).await;
    for (name, ip) in [("pod-c", "10.244.0.3"), ("pod-d", "10.244.0.4")] {
        h.create(gated_pod(name)).await;
        kubelet(&h, name, ip, false).await;
        wait_gate(&h, name, "False", "NotPublished").await;
    }
    // (A pod seen before its address may get a NoAddress write first: counted from here.)
    let before = (
        gate_writes(&h, "pod-c").await,
        gate_writes(&h, "pod-d").await,
    );
    // pod-d: into api's pool; pod-a: another value of the key (still in the label watch);
    // pod-c: no key at all (gone from the watch). pod-d first: once pod-c is released, web has
    // seen pod-d leave too.
    h.patch_pod(
        "pod-d",
        json!({"metadata": {"labels": {"example.com/group": "api"}}}),
    )
    .await;
    h.patch_pod(
        "pod-a",
        json!({"metadata": {"labels": {"example.com/group": "other"}}}),
    )
    .await;
    h.patch_pod(
        "pod-c",
        json!({"metadata": {"labels": {"example.com/group": null}}}),
    )
    .await;
    let message = "the pod left the pool of PortMapping web: the gate no longer waits for its \
                   publication";
    for name in ["pod-a", "pod-c"] {
        let gate = wait_gate(&h, name, "True", "Released").await;
        assert_eq!(gate.message.as_deref(), Some(message));
    }
    // pod-d is api's now: never released (api's verdict, the same words, needs no write).
    assert_eq!(
        gate_of(&h, "pod-d").await.unwrap().reason.as_deref(),
        Some("NotPublished")
    );
    // pod-b stays in the pool and True.
    assert_eq!(
        (
            gate_writes(&h, "pod-a").await,
            gate_writes(&h, "pod-b").await,
            gate_writes(&h, "pod-c").await,
            gate_writes(&h, "pod-d").await,
        ),
        (2, 1, before.0 + 1, before.1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_held_past_its_timeout_turns_true_with_a_warning_at_the_deadline() {
    // An hour's resync: only the requeue for the deadline can make the change.
    let h = Harness::start_with(|s| s.resync = Duration::from_secs(3600)).await;
    h.create(service("web", &[("http", 8080)])).await;
    h.create(gated_pod("pod-a")).await;
    // Containers ready (so the gate alone holds the pod), but the port's containerReady check
    // reads the app container not ready: never published. No real node reports this pair
    // (ContainersReady True, the container not ready) on demand; it holds the gate without a
    // probe that could change its mind.
    let api: Api<Pod> = Api::namespaced(h.client.clone(), &h.ns);
    let since = Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .unwrap();
    let status = json!({"status": {
        "phase": "Running",
        "podIP": "10.244.0.1",
        "podIPs": [{"ip": "10.244.0.1"}],
        "conditions": [
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": since},
            {"type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady"},
        ],
        "containerStatuses": [{
            "name": "app", "ready": false, "restartCount": 0,
            "image": "pause", "imageID": "", "state": {"running": {}},
        }],
    }});
    api.patch_status("pod-a", &PatchParams::default(), &Patch::Strategic(status))
        .await
        .unwrap();
    let mut pm = portmapping("web", "web");
    pm["spec"]["defaultChecks"]
        .as_array_mut()
        .unwrap()
        .push(json!({"containerReady": {"container": "app"}}));
    pm["spec"]["readinessGate"] = json!({"timeoutSeconds": 4});
    h.create(pm).await;
    let held = wait_gate(&h, "pod-a", "False", "NotPublished").await;
    assert!(
        held.message
            .as_deref()
            .is_some_and(|m| m.starts_with("not published on port http: containerReady")),
        "{held:?}"
    );
    let timed_out = wait_gate(&h, "pod-a", "True", "TimedOut").await;
    assert_eq!(
        timed_out.message.as_deref(),
        Some(
            "not published (port http) 4s after the containers became ready: the gate no longer waits"
        )
    );
    // Not before the deadline (the server's transition time is whole seconds, as `since` is).
    let flipped = timed_out.last_transition_time.unwrap().0;
    assert!(flipped >= since + k8s_openapi::jiff::SignedDuration::from_secs(4));
    let events = eventually("the Warning", WAIT, || async {
        Some(h.events("PublicationGateTimedOut").await).filter(|e| !e.is_empty())
    })
    .await;
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0].type_.as_deref(), Some("Warning"));
    assert_eq!(
        events[0].note.as_deref(),
        Some(
            "pod pod-a is not published (port http) 4s after its containers became ready: its \
             publication gate is True (TimedOut) and no longer waits"
        )
    );
    assert_eq!(
        events[0].related.as_ref().and_then(|r| r.name.as_deref()),
        Some("pod-a")
    );
    assert_eq!(gate_writes(&h, "pod-a").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_refuses_a_gate_timeout_out_of_range() {
    let h = Harness::new().await;
    let pms: Api<PortMapping> = Api::namespaced(h.client.clone(), &h.ns);
    for (timeout, message) in [
        (0, "should be greater than or equal to 1"),
        (86_401, "should be less than or equal to 86400"),
    ] {
        let mut pm = portmapping("web", "web");
        pm["spec"]["readinessGate"] = json!({"timeoutSeconds": timeout});
        let pm: PortMapping = serde_json::from_value(pm).unwrap();
        let err = pms.create(&Default::default(), &pm).await.unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("spec.readinessGate.timeoutSeconds") && text.contains(message),
            "{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_portmapping_whose_pool_moves_releases_the_pods_of_the_old_pool() {
    let h = Harness::start().await;
    gated_pool(&h).await;
    let pms: Api<PortMapping> = Api::namespaced(h.client.clone(), &h.ns);
    pms.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"pods": {"value": "other"}}})),
    )
    .await
    .unwrap();
    let gate = wait_gate(&h, "pod-a", "True", "Released").await;
    assert_eq!(
        gate.message.as_deref(),
        Some(
            "the pod left the pool of PortMapping web: the gate no longer waits for its publication"
        )
    );
    assert_eq!(
        (
            gate_writes(&h, "pod-a").await,
            gate_writes(&h, "pod-b").await
        ),
        (2, 1)
    );
}
