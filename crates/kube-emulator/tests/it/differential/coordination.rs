//! Leases and Events (events.k8s.io and core): writes, conflicts, validation errors, and the
//! time formats their Go types accept.

use serde_json::{Value, json};

use super::harness::{MERGE, Pair, Req};

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/{ns}/events";
const CORE_EVENTS: &str = "/api/v1/namespaces/{ns}/events";

/// Events are one resource stored once and served by both APIs on a real server; the emulator
/// keeps two.
const SHARED_EVENTS: &str = "core and events.k8s.io Events are one resource upstream (each \
    served in the other's shape); the emulator keeps two (docs/emulator.md)";

/// A patch whose result does not decode names the patched object, as Go encodes it: its
/// server-set values, and struct fields in declaration order (the emulator's JSON sorts keys).
const PATCHED_OBJECT: &str = "the message quotes the patched object with its server-set values \
    in Go field order";

fn lease(name: &str, holder: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
            "acquireTime": "2026-01-02T03:04:05.123456Z",
            "renewTime": "2026-01-02T03:04:05.654321Z", "leaseTransitions": 0}})
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
    let mut bad = lease("bad", "a");
    bad["spec"]["leaseDurationSeconds"] = json!(0);
    bad["spec"]["leaseTransitions"] = json!(-1);
    p.send("bad durations", Req::post(LEASES, bad)).await;
    p.send("delete", Req::delete(&path)).await;
    p.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_micro_times() {
    let mut p = Pair::new("lease-times").await;
    let path = format!("{LEASES}/leader");
    let mut nanos = lease("leader", "a");
    nanos["spec"]["renewTime"] = json!("2026-01-02T03:04:05.123456789Z");
    p.send("nanoseconds", Req::post(LEASES, nanos.clone()))
        .await;
    p.send(
        "nanoseconds in an apply",
        Req::apply(&path, "holder", false, nanos),
    )
    .await;
    let mut seconds = lease("leader", "a");
    seconds["spec"]["acquireTime"] = json!("2026-01-02T03:04:05Z");
    p.send("no fraction", Req::post(LEASES, seconds)).await;
    let mut offset = lease("leader", "a");
    offset["spec"]["acquireTime"] = json!("2026-01-02T04:04:05.123456+01:00");
    p.send("an offset", Req::post(LEASES, offset)).await;
    p.send(
        "a merge patch with one digit",
        Req::patch(
            &path,
            MERGE,
            json!({"spec": {"renewTime": "2026-01-02T03:05:05.5Z"}}),
        )
        .allow("body.message", PATCHED_OBJECT)
        .allow("body.details.causes[0].message", PATCHED_OBJECT),
    )
    .await;
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
async fn events_k8s_io() {
    let mut p = Pair::new("events").await;
    p.send("create", Req::post(EVENTS, event("e1"))).await;
    p.send(
        "series update",
        Req::patch(
            &format!("{EVENTS}/e1"),
            MERGE,
            json!({"series": {"count": 2, "lastObservedTime": "2026-01-02T03:05:05.500000Z"}}),
        ),
    )
    .await;
    p.send(
        "a changed reason",
        Req::patch(&format!("{EVENTS}/e1"), MERGE, json!({"reason": "Other"})),
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
    p.send("list", Req::get(EVENTS)).await;
    p.send(
        "read through the core API",
        Req::get(&format!("{CORE_EVENTS}/e1")).allow("", SHARED_EVENTS),
    )
    .await;
    p.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_events() {
    let mut p = Pair::new("core-events").await;
    let core = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "c1"},
        "involvedObject": {"kind": "Pod", "name": "web-0", "namespace": "{ns}"},
        "reason": "Started", "message": "started", "type": "Normal", "count": 1,
        "firstTimestamp": "2026-01-02T03:04:05Z", "lastTimestamp": "2026-01-02T03:04:05Z",
        "source": {"component": "kubelet"}});
    p.send("create", Req::post(CORE_EVENTS, core)).await;
    p.send(
        "count update",
        Req::patch(&format!("{CORE_EVENTS}/c1"), MERGE, json!({"count": 2})),
    )
    .await;
    let elsewhere = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "c2"},
        "involvedObject": {"kind": "Pod", "name": "web-0", "namespace": "elsewhere"},
        "type": "Odd"});
    p.send(
        "another namespace's object",
        Req::post(CORE_EVENTS, elsewhere),
    )
    .await;
    let new_style = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "c3"},
        "involvedObject": {"kind": "Pod", "name": "web-0", "namespace": "{ns}"},
        "eventTime": "2026-01-02T03:04:05.123456Z", "reportingComponent": "",
        "action": "", "reason": "Started"});
    p.send(
        "a new-style event without reporter",
        Req::post(CORE_EVENTS, new_style),
    )
    .await;
    p.send("list", Req::get(CORE_EVENTS)).await;
    p.send(
        "read through events.k8s.io",
        Req::get(&format!("{EVENTS}/c1")).allow("", SHARED_EVENTS),
    )
    .await;
    p.finish();
}
