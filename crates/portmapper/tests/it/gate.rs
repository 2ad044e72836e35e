//! The publication readiness gate on the real control plane: the operator sets
//! `portmapper.dev/published` on gated pool pods through `pods/status`, after the slices naming
//! them are written, and only when the condition changes (exact counts from the request log).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use kube::api::{Api, Patch, PatchParams};
use portmapper_core::PUBLISHED_GATE;
use serde_json::json;

use crate::harness::*;
use crate::requests::Request;

const WAIT: Duration = Duration::from_secs(20);
/// The gate condition of a pod published on its one port, `http`.
const PUBLISHED_ON_HTTP: (&str, &str, &str) = (
    "True",
    "Published",
    "published on every port it serves: http",
);

/// A pool pod that opts in to the gate.
fn gated_pod(name: &str, ports: &str) -> serde_json::Value {
    let mut p = pod(name, "web", ports);
    p["spec"]["readinessGates"] = json!([{"conditionType": PUBLISHED_GATE}]);
    p
}

/// Plays kubelet: address and container readiness through a strategic merge patch keyed by
/// condition type (as kubelet's status manager leaves other owners' conditions alone). Ready
/// stays False: with our gate unset kubelet would not make it True, and podReady must not wait
/// for it. Played, not a real node: these tests count the operator's gate writes in the audit
/// log and step one pod at a time; the kubelet combining the gate into Ready, and a rollout on
/// it, run on the real node (`gated_rollout_on_a_real_node` in tests/e2e/node.rs).
async fn kubelet(h: &Harness, name: &str, ip: &str, containers_ready: bool) {
    let api: Api<Pod> = Api::namespaced(h.client.clone(), &h.ns);
    let ready = if containers_ready { "True" } else { "False" };
    let status = json!({"status": {
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "conditions": [
            {"type": "ContainersReady", "status": ready},
            {"type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady"},
        ],
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Strategic(status))
        .await
        .unwrap();
}

/// The pod's publication gate condition, as the API server stores it.
pub(crate) async fn gate_of(h: &Harness, name: &str) -> Option<PodCondition> {
    let api: Api<Pod> = Api::namespaced(h.client.clone(), &h.ns);
    api.get(name)
        .await
        .unwrap()
        .status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == PUBLISHED_GATE)
}

/// Waits until the pod's gate has this status and message.
async fn wait_gate(h: &Harness, name: &str, status: &str, message: &str) -> PodCondition {
    eventually(
        &format!("{name} gate {status}: {message}"),
        WAIT,
        || async {
            gate_of(h, name)
                .await
                .filter(|c| c.status == status && c.message.as_deref() == Some(message))
        },
    )
    .await
}

/// Service `web` (http), gated `pod-a` on it made ready by "kubelet", and PortMapping `web`;
/// returns once the gate of `pod-a` is True.
async fn publish_gated_pod_a(h: &Harness) {
    h.create(service("web", &[("http", 8080)])).await;
    h.create(gated_pod("pod-a", "http")).await;
    kubelet(h, "pod-a", "10.244.0.1", true).await;
    h.create(portmapping("web", "web")).await;
    wait_gate(
        h,
        "pod-a",
        "True",
        "published on every port it serves: http",
    )
    .await;
}

/// Writes under the operator's field manager (the controller's, or a `Writer` of the test's).
async fn operator_requests(h: &Harness) -> Vec<Request> {
    h.requests()
        .await
        .into_iter()
        .filter(|r| r.is_write() && r.field_manager == portmapper_api::MANAGER)
        .collect()
}

fn is_gate_write(r: &Request) -> bool {
    r.resource == "pods" && r.subresource == "status"
}

async fn gate_writes(h: &Harness, pod: &str) -> usize {
    operator_requests(h)
        .await
        .iter()
        .filter(|r| is_gate_write(r) && r.name == pod)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gate_turns_true_after_publication_and_false_when_a_port_drops_the_pod() {
    let h = Harness::start().await;
    h.create(service("web", &[("http", 8080), ("https", 8443)]))
        .await;
    h.create(gated_pod("pod-a", "http")).await;
    h.create(gated_pod("pod-b", "http,https")).await;
    // Not gated: never written to.
    h.create(pod("pod-c", "web", "http,https")).await;
    kubelet(&h, "pod-a", "10.244.0.1", true).await;
    kubelet(&h, "pod-b", "10.244.0.2", true).await;
    h.set_pod_status("pod-c", &["10.244.0.3"], true).await;
    h.create(portmapping("web", "web")).await;

    let a = wait_gate(
        &h,
        "pod-a",
        "True",
        "published on every port it serves: http",
    )
    .await;
    let b = wait_gate(
        &h,
        "pod-b",
        "True",
        "published on every port it serves: http, https",
    )
    .await;
    assert_eq!(a.reason.as_deref(), Some("Published"));
    assert!(b.last_transition_time.is_some());
    // Ready is False (kubelet waits for our gate): podReady read ContainersReady instead.
    let membership = h.membership("web").await;
    assert_eq!(membership["web.http"], ["pod-a", "pod-b", "pod-c"]);
    assert_eq!(membership["web.https"], ["pod-b", "pod-c"]);
    // One write per gated pod, each after the slice writes that publish it.
    let writes = operator_requests(&h).await;
    let first_gate = writes.iter().position(is_gate_write).unwrap();
    let last_slice = writes
        .iter()
        .rposition(|r| r.resource == "endpointslices")
        .unwrap();
    assert!(last_slice < first_gate, "{writes:#?}");
    assert_eq!(
        (
            gate_writes(&h, "pod-a").await,
            gate_writes(&h, "pod-b").await,
            gate_writes(&h, "pod-c").await
        ),
        (1, 1, 0)
    );

    // pod-b stops serving https by its own annotation: still True (the port no longer counts),
    // one message change, the transition time kept.
    h.patch_pod(
        "pod-b",
        json!({"metadata": {"annotations": {"example.com/ports": "http"}}}),
    )
    .await;
    let b2 = wait_gate(
        &h,
        "pod-b",
        "True",
        "published on every port it serves: http",
    )
    .await;
    assert_eq!(b2.last_transition_time, b.last_transition_time);
    assert_eq!(h.membership("web").await["web.https"], ["pod-c"]);

    // pod-b's containers fail: http drops it, and the gate says which port and why.
    kubelet(&h, "pod-b", "10.244.0.2", false).await;
    let b3 = wait_gate(
        &h,
        "pod-b",
        "False",
        "not published on port http: podReady: containers are not ready (ContainersReady=False)",
    )
    .await;
    assert_eq!(b3.reason.as_deref(), Some("NotPublished"));
    // (That the flip moves lastTransitionTime is a planner test with a manual clock: this one
    // may run within one second.)
    assert!(b3.last_transition_time.is_some());
    // kubelet's own conditions survived our patches, ours survived kubelet's.
    let pod: Pod = Api::namespaced(h.client.clone(), &h.ns)
        .get("pod-b")
        .await
        .unwrap();
    let types: Vec<String> = pod
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| c.type_)
        .collect();
    assert!(types.contains(&"ContainersReady".to_owned()), "{types:?}");
    assert!(types.contains(&PUBLISHED_GATE.to_owned()), "{types:?}");
    assert_eq!(h.membership("web").await["web.http"], ["pod-a", "pod-c"]);

    // Converged: one write per change of pod-b's condition, none for pod-a after its first.
    // The PortMapping's status write follows the gate writes in the same reconcile, so once it
    // shows pod-b excluded every gate write of that reconcile is in the log.
    eventually("status shows pod-b excluded from http", WAIT, || async {
        let pm = h.portmapping("web").await;
        pm.status
            .filter(|s| s.ports.iter().any(|p| p.name == "http" && p.ready == 2))
            .map(|_| ())
    })
    .await;
    assert_eq!(
        (
            gate_writes(&h, "pod-a").await,
            gate_writes(&h, "pod-b").await,
            gate_writes(&h, "pod-c").await
        ),
        (1, 3, 0)
    );
}

/// The gate write carries the pod's UID: the API server refuses it for a pod replaced under
/// the same name (a StatefulSet's replacement), instead of overwriting the new pod's condition.
/// (That a gate already sent is not resent while the cache lags, and that a True gate waits for
/// the slice writes, is the executor's, tested at the reconcile level.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_for_a_replaced_pod_is_refused_by_the_server() {
    use portmapper::runtime::apply::Writer;
    use portmapper::runtime::leader::Leadership;
    use portmapper_core::PodGate;

    let h = Harness::new().await;
    h.create(gated_pod("pod-a", "http")).await;
    kubelet(&h, "pod-a", "10.244.0.1", true).await;
    let api: Api<Pod> = Api::namespaced(h.client.clone(), &h.ns);
    let pod = portmapper_core::PodRecord::from(api.get("pod-a").await.unwrap());
    let leadership = Leadership::always();
    let writer = Writer::new(&h.client, &h.ns, &leadership, &h.metrics);
    let gate = PodGate {
        pod: "pod-a".into(),
        condition_type: PUBLISHED_GATE.into(),
        uid: pod.uid.clone(),
        status: true,
        reason: "Published",
        message: "published on every port it serves: http".into(),
        last_transition_time: None,
        observed_generation: pod.generation,
    };
    assert!(writer.patch_pod_gate(&gate).await.unwrap());
    assert_eq!(gate_writes(&h, "pod-a").await, 1);
    let mut other = gate.clone();
    other.uid = "another-uid".into();
    other.message = "published on every port it serves: none".into();
    let refused = writer.patch_pod_gate(&other).await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(
        gate_of(&h, "pod-a").await.and_then(|c| c.message),
        Some("published on every port it serves: http".into())
    );
}

/// A rolling restart of a gated pool, played as a StatefulSet and kubelet would: each pod is
/// deleted and recreated, kubelet makes it Ready only once its containers are ready and our gate
/// is True, and the next pod is restarted only when this one is Ready. A watcher on our slices
/// sees every version: no port ever has more than one member missing. It also fails if podReady
/// read Ready for gated pods: Ready stays False until the gate is True, so no restarted pod would
/// ever be published and the rollout would stall. (In-process the operator publishes faster
/// than this loop restarts the next pod, so the member count alone would hold without the wait
/// too; with slow checks, probes or webhooks, the wait is what keeps it.)
// Kept on a played kubelet although a real node reaches it: a restart that reuses each pod's
// name (a StatefulSet's) with the count checked after every round, in seconds on the shared
// plane; the Deployment rollout runs on the real node (`gated_rollout_on_a_real_node`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_a_gated_pool_never_takes_two_members_from_a_port() {
    use crate::observer::Observer;

    const POOL: [(&str, &str); 3] = [
        ("web-0", "10.244.0.10"),
        ("web-1", "10.244.0.11"),
        ("web-2", "10.244.0.12"),
    ];
    let h = Harness::start().await;
    h.create(service("web", &[("http", 8080), ("https", 8443)]))
        .await;
    for (name, ip) in POOL {
        h.create(gated_pod(name, "http,https")).await;
        kubelet(&h, name, ip, true).await;
    }
    h.create(portmapping("web", "web")).await;
    let all = "published on every port it serves: http, https";
    for (name, _) in POOL {
        wait_gate(&h, name, "True", all).await;
    }
    let observer = Observer::start(&h, &[("web", "http"), ("web", "https")]).await;
    let api: Api<Pod> = Api::namespaced(h.client.clone(), &h.ns);
    for (round, (name, ip)) in POOL.into_iter().enumerate() {
        let old_uid = api.get(name).await.unwrap().metadata.uid;
        h.delete_pod(name).await;
        h.create(gated_pod(name, "http,https")).await;
        let new_uid = api.get(name).await.unwrap().metadata.uid;
        assert_ne!(old_uid, new_uid);
        // A new IP per generation, as a rescheduled pod gets.
        let ip = ip.replace(".0.", &format!(".{}.", round + 1));
        kubelet(&h, name, &ip, true).await;
        // kubelet: Ready once the containers are ready and every gate (ours) is True.
        wait_gate(&h, name, "True", all).await;
        let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        api.patch_status(name, &PatchParams::default(), &Patch::Strategic(ready))
            .await
            .unwrap();
        // Our gate marked it published only after its slices were written.
        let membership = h.membership("web").await;
        assert_eq!(membership["web.http"], ["web-0", "web-1", "web-2"]);
        assert_eq!(membership["web.https"], ["web-0", "web-1", "web-2"]);
    }
    observer.assert_held();
    let report = observer.report();
    let fewest: Vec<usize> = report.fewest_ready.values().copied().collect();
    assert_eq!(fewest, [2, 2], "{report:#?}");
}

// ---- Gate types of their own, and gates on stalled paths -----------------------------------

const WEB_GATE: &str = "example.com/published-web";
const ADMIN_GATE: &str = "example.com/published-admin";

/// A pool pod (group `web`) listing these readiness gates.
fn pod_gated_on(name: &str, ports: &str, types: &[&str]) -> serde_json::Value {
    let mut p = pod(name, "web", ports);
    p["spec"]["readinessGates"] = types.iter().map(|t| json!({"conditionType": t})).collect();
    p
}

/// A PortMapping of Service `service` over the pods of group `web`, with its gate type.
fn portmapping_gated(name: &str, service: &str, gate: Option<&str>) -> serde_json::Value {
    let mut pm = portmapping(name, service);
    pm["spec"]["pods"]["value"] = json!("web");
    if let Some(gate) = gate {
        pm["spec"]["readinessGate"] = json!({"conditionType": gate});
    }
    pm
}

async fn condition_of(h: &Harness, pod: &str, type_: &str) -> Option<PodCondition> {
    let api: Api<Pod> = Api::namespaced(h.client.clone(), &h.ns);
    api.get(pod)
        .await
        .unwrap()
        .status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == type_)
}

/// Waits until the pod's condition `type_` has this status, reason and message.
async fn wait_condition(
    h: &Harness,
    pod: &str,
    type_: &str,
    (status, reason, message): (&str, &str, &str),
) -> PodCondition {
    eventually(
        &format!("{pod} {type_} {status} {reason}: {message}"),
        WAIT,
        || async {
            condition_of(h, pod, type_).await.filter(|c| {
                c.status == status
                    && c.reason.as_deref() == Some(reason)
                    && c.message.as_deref() == Some(message)
            })
        },
    )
    .await
}

/// Two PortMappings (two Services) over one pool, each with a gate type of its own, both with
/// podReady: each sets its own condition, and neither waits for the other's gate (each is True
/// only once the other has published, so waiting would deadlock them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_portmappings_with_their_own_gate_types_each_set_theirs() {
    let mut h = Harness::start().await;
    h.create(service("web", &[("http", 8080)])).await;
    h.create(service("admin", &[("admin", 9090)])).await;
    for (name, ip) in [("pod-a", "10.244.0.1"), ("pod-b", "10.244.0.2")] {
        h.create(pod_gated_on(name, "http,admin", &[WEB_GATE, ADMIN_GATE]))
            .await;
        kubelet(&h, name, ip, true).await;
    }
    h.create(portmapping_gated("web", "web", Some(WEB_GATE)))
        .await;
    h.create(portmapping_gated("admin", "admin", Some(ADMIN_GATE)))
        .await;
    for name in ["pod-a", "pod-b"] {
        wait_condition(
            &h,
            name,
            WEB_GATE,
            (
                "True",
                "Published",
                "published on every port it serves: http",
            ),
        )
        .await;
        wait_condition(
            &h,
            name,
            ADMIN_GATE,
            (
                "True",
                "Published",
                "published on every port it serves: admin",
            ),
        )
        .await;
    }
    assert_eq!(h.membership("web").await["web.http"], ["pod-a", "pod-b"]);
    assert_eq!(
        h.membership("admin").await["admin.admin"],
        ["pod-a", "pod-b"]
    );
    assert_eq!(condition_of(&h, "pod-a", PUBLISHED_GATE).await, None);
    // (A PortMapping planned before the other is in the index sees the other's gate as a
    // foreign one, and may write a False first: counts start once both are known.) Converged,
    // they never fight: a restart re-plans both, and pod-a and pod-b get no write.
    let before = (
        gate_writes(&h, "pod-a").await,
        gate_writes(&h, "pod-b").await,
    );
    h.stop_controller().await;
    h.run_controller();
    // A new pod as the barrier: once both its gates are True, both PortMappings re-planned.
    h.create(pod_gated_on("pod-c", "http,admin", &[WEB_GATE, ADMIN_GATE]))
        .await;
    kubelet(&h, "pod-c", "10.244.0.3", true).await;
    for (gate, port) in [(WEB_GATE, "http"), (ADMIN_GATE, "admin")] {
        let message = format!("published on every port it serves: {port}");
        wait_condition(&h, "pod-c", gate, ("True", "Published", &message)).await;
    }
    assert_eq!(
        (
            gate_writes(&h, "pod-a").await,
            gate_writes(&h, "pod-b").await
        ),
        before
    );
}

/// Two PortMappings over one pool with the same gate type: one condition, one writer, the
/// oldest PortMapping (creation time, then name). The younger leaves it alone, so the condition
/// never flaps between two verdicts; when the older goes, the younger takes it over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_gate_type_the_oldest_portmapping_sets_it() {
    let h = Harness::start().await;
    h.create(service("web", &[("http", 8080)])).await;
    h.create(service("admin", &[("admin", 9090)])).await;
    h.create(pod_gated_on("pod-a", "http", &[PUBLISHED_GATE]))
        .await;
    kubelet(&h, "pod-a", "10.244.0.1", true).await;
    // "alpha" is the older by creation time or, within the same second, by name.
    h.create(portmapping_gated("alpha", "web", None)).await;
    wait_condition(&h, "pod-a", PUBLISHED_GATE, PUBLISHED_ON_HTTP).await;
    // beta would say False (pod-a does not list admin); it must not write.
    h.create(portmapping_gated("beta", "admin", None)).await;
    eventually("beta reconciled", WAIT, || async {
        h.portmapping("beta").await.status.map(|_| ())
    })
    .await;
    assert_eq!(gate_writes(&h, "pod-a").await, 1);
    assert_eq!(
        condition_of(&h, "pod-a", PUBLISHED_GATE)
            .await
            .and_then(|c| c.message),
        Some("published on every port it serves: http".into())
    );
    // alpha goes: beta's verdict is the gate now (admin does not back pod-a: no port to wait for).
    let pms: Api<portmapper_api::PortMapping> = Api::namespaced(h.client.clone(), &h.ns);
    pms.delete("alpha", &Default::default()).await.unwrap();
    wait_condition(
        &h,
        "pod-a",
        PUBLISHED_GATE,
        (
            "True",
            "Published",
            "the pod is meant to serve no port of the Service",
        ),
    )
    .await;
    assert_eq!(gate_writes(&h, "pod-a").await, 2);
}

/// The Service goes: its slices are withdrawn, so no gated pod may stay True.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_service_turns_the_gates_false() {
    let h = Harness::start().await;
    publish_gated_pod_a(&h).await;
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(h.client.clone(), &h.ns);
    services.delete("web", &Default::default()).await.unwrap();
    wait_condition(
        &h,
        "pod-a",
        PUBLISHED_GATE,
        (
            "False",
            "ServiceNotFound",
            &format!(
                "PortMapping web publishes nothing new: Service {}/web does not exist; no \
                 endpoints are published",
                h.ns
            ),
        ),
    )
    .await;
    assert!(h.slices("web").await.is_empty());
    // One write for True, one for False: the status write after it ends that reconcile.
    eventually("status withdrawn", WAIT, || async {
        h.portmapping("web")
            .await
            .status
            .filter(|s| s.ports.is_empty())
            .map(|_| ())
    })
    .await;
    assert_eq!(gate_writes(&h, "pod-a").await, 2);
}

/// The Service becomes ExternalName: the planner withdraws the slices and turns the gates False.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_name_service_turns_the_gates_false() {
    let h = Harness::start().await;
    publish_gated_pod_a(&h).await;
    h.make_external_name("web").await;
    wait_condition(
        &h,
        "pod-a",
        PUBLISHED_GATE,
        (
            "False",
            "ExternalName",
            "the Service is of type ExternalName: nothing is published",
        ),
    )
    .await;
    assert!(h.slices("web").await.is_empty());
}

/// A PortMapping that loses its Service to an older one publishes nothing of its own: its gate
/// (a type of its own) is False with the reason, while the winner's gate is True.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loser_of_a_service_conflict_turns_its_gate_false() {
    let h = Harness::start().await;
    h.create(service("web", &[("http", 8080)])).await;
    h.create(pod_gated_on("pod-a", "http", &[PUBLISHED_GATE, WEB_GATE]))
        .await;
    kubelet(&h, "pod-a", "10.244.0.1", true).await;
    // alpha is the older (creation time, or name within one second). Both at once: alpha's
    // podReady reads past beta's gate only once beta exists (before, it is a foreign gate that
    // nobody sets, and Ready would wait for it).
    h.create(portmapping_gated("alpha", "web", None)).await;
    h.create(portmapping_gated("beta", "web", Some(WEB_GATE)))
        .await;
    wait_condition(&h, "pod-a", PUBLISHED_GATE, PUBLISHED_ON_HTTP).await;
    wait_condition(
        &h,
        "pod-a",
        WEB_GATE,
        (
            "False",
            "ServiceClaimed",
            "PortMapping beta publishes nothing new: PortMapping alpha publishes Service web",
        ),
    )
    .await;
    assert_eq!(
        condition_of(&h, "pod-a", PUBLISHED_GATE)
            .await
            .map(|c| c.status),
        Some("True".into())
    );
}

/// A restarted operator waits for its caches before it plans: a gated pod's condition must not
/// flip (nor be rewritten) on the way. Exact write counts across the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_never_flips_a_gate_while_caches_sync() {
    let mut h = Harness::start().await;
    publish_gated_pod_a(&h).await;
    h.stop_controller().await;
    let before = operator_requests(&h).await.len();
    h.run_controller();
    // A new pod after the restart: once its gate is written, the restart's plans are done.
    h.create(gated_pod("pod-b", "http")).await;
    kubelet(&h, "pod-b", "10.244.0.2", true).await;
    wait_gate(
        &h,
        "pod-b",
        "True",
        "published on every port it serves: http",
    )
    .await;
    // (pod-b may get a NoAddress write before kubelet's patch: not counted.)
    assert_eq!(gate_writes(&h, "pod-a").await, 1);
    assert!(operator_requests(&h).await.len() > before);
}

/// Plays the node-lifecycle controller: the node's `Ready` condition (a node of the test's own,
/// created on first use). Played, not a real node: the real one (`tests/e2e/node/unpublished.rs`)
/// costs 45 s per NotReady; this steps the condition back and forth in a second.
async fn node_ready(h: &Harness, node: &str, status: &str) {
    ensure_node(&h.client, node, &Default::default()).await;
    let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(h.client.clone());
    let patch = json!({"status": {"conditions": [{"type": "Ready", "status": status}]}});
    api.patch_status(node, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_pod_on_a_not_ready_node_is_not_published_until_the_node_is_ready() {
    // No resync within the test: a node's event alone must requeue the PortMapping.
    let h = Harness::start_with(|s| s.resync = Duration::from_secs(600)).await;
    let node = format!("{}-node", h.ns);
    node_ready(&h, &node, "Unknown").await;
    h.create(service("web", &[("http", 8080)])).await;
    let mut pod = gated_pod("pod-a", "http");
    pod["spec"]["nodeName"] = json!(node);
    h.create(pod).await;
    // kubelet's last word before its node went: containers ready, Ready waits for the gate.
    kubelet(&h, "pod-a", "10.244.0.1", true).await;
    h.create(portmapping("web", "web")).await;
    let why = |status: &str| {
        format!(
            "not published on port http: podReady: its node {node} is not Ready (Ready={status})"
        )
    };
    wait_gate(&h, "pod-a", "False", &why("Unknown")).await;
    assert!(h.membership("web").await.values().all(Vec::is_empty));

    // Only the node changes: its event must bring the PortMapping back.
    node_ready(&h, &node, "True").await;
    let (status, _, message) = PUBLISHED_ON_HTTP;
    wait_gate(&h, "pod-a", status, message).await;
    assert_eq!(h.membership("web").await["web.http"], ["pod-a"]);

    node_ready(&h, &node, "False").await;
    wait_gate(&h, "pod-a", "False", &why("False")).await;
    eventually("pod-a withdrawn", WAIT, || async {
        h.membership("web")
            .await
            .values()
            .all(Vec::is_empty)
            .then_some(())
    })
    .await;
    let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(h.client.clone());
    let _ = api.delete(&node, &Default::default()).await;
}
