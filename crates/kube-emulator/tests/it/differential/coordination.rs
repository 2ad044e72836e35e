//! Leases and Events (events.k8s.io and core): writes, conflicts, validation errors.

use serde_json::{Value, json};

use super::harness::{MERGE, Pair, Req};

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/{ns}/events";
const CORE_EVENTS: &str = "/api/v1/namespaces/{ns}/events";

fn lease(name: &str, holder: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
            "acquireTime": "2026-01-02T03:04:05.123456Z",
            "renewTime": "2026-01-02T03:04:05.123456789Z", "leaseTransitions": 0}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_writes_and_conflicts() {
    let mut p = Pair::new("leases").await;
    let path = format!("{LEASES}/leader");
    p.send("create", Req::post(LEASES, lease("leader", "a")).save("l"))
        .await;
    let mut renewed = lease("leader", "a");
    renewed["metadata"]["resourceVersion"] = json!("{rv:l}");
    renewed["spec"]["renewTime"] = json!("2026-01-02T03:04:20.000001Z");
    p.send("renew", Req::put(&path, renewed.clone())).await;
    p.send(
        "renew with the stale resourceVersion",
        Req::put(&path, renewed),
    )
    .await;
    let mut unconditional = lease("leader", "b");
    unconditional["spec"]["leaseTransitions"] = json!(1);
    p.send("an unconditional update", Req::put(&path, unconditional))
        .await;
    p.send(
        "apply by another holder",
        Req::apply(&path, "candidate-b", false, lease("leader", "c")),
    )
    .await;
    p.send(
        "bad durations",
        Req::post(LEASES, {
            let mut l = lease("bad", "a");
            l["spec"]["leaseDurationSeconds"] = json!(0);
            l["spec"]["leaseTransitions"] = json!(-1);
            l
        }),
    )
    .await;
    p.send(
        "a bad time",
        Req::patch(&path, MERGE, json!({"spec": {"renewTime": "yesterday"}})),
    )
    .await;
    p.send("delete", Req::delete(&path)).await;
    p.finish();
}

fn event(name: &str) -> Value {
    json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": name},
        "eventTime": "2026-01-02T03:04:05.123456Z", "reportingController": "portmapper.dev/operator",
        "reportingInstance": "operator-0", "action": "Publish", "reason": "Published",
        "type": "Normal", "note": "published 2 endpoints",
        "regarding": {"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
            "name": "broker", "namespace": "{ns}"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_both_apis() {
    let mut p = Pair::new("events").await;
    p.send("create", Req::post(EVENTS, event("e1"))).await;
    p.send(
        "read it through the core API",
        Req::get(&format!("{CORE_EVENTS}/e1")),
    )
    .await;
    p.send(
        "series update",
        Req::patch(
            &format!("{EVENTS}/e1"),
            MERGE,
            json!({"series": {"count": 2, "lastObservedTime": "2026-01-02T03:05:05.5Z"}}),
        ),
    )
    .await;
    let mut bad = event("bad");
    bad["type"] = json!("Loud");
    bad["reportingController"] = json!("");
    bad["action"] = json!("");
    bad["note"] = json!("x".repeat(1025));
    p.send("invalid", Req::post(EVENTS, bad)).await;
    let mut no_time = event("no-time");
    no_time.as_object_mut().map(|o| o.remove("eventTime"));
    p.send("no event time", Req::post(EVENTS, no_time)).await;
    let core = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "c1"},
        "involvedObject": {"kind": "Pod", "name": "web-0", "namespace": "{ns}"},
        "reason": "Started", "message": "started", "type": "Normal", "count": 1,
        "firstTimestamp": "2026-01-02T03:04:05Z", "lastTimestamp": "2026-01-02T03:04:05Z",
        "source": {"component": "kubelet"}});
    p.send("create a core event", Req::post(CORE_EVENTS, core))
        .await;
    p.send(
        "read it through events.k8s.io",
        Req::get(&format!("{EVENTS}/c1")),
    )
    .await;
    let core_bad = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "c2"},
        "involvedObject": {"kind": "Pod", "name": "web-0", "namespace": "elsewhere"},
        "type": "Odd"});
    p.send("an invalid core event", Req::post(CORE_EVENTS, core_bad))
        .await;
    p.send("list core events", Req::get(CORE_EVENTS)).await;
    p.finish();
}
