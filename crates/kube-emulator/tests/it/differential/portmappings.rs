//! The PortMapping CRD (crds/portmapper.dev_portmappings.yaml): defaults, pruning, schema and CEL
//! rule failures, patches, the status subresource and apply conflicts.

use serde_json::{Value, json};

use super::harness::{JSON_PATCH, MERGE, Pair, Req, STRATEGIC};

const PMS: &str = "/apis/portmapper.dev/v1alpha1/namespaces/{ns}/portmappings";

fn mapping(name: &str) -> Value {
    json!({"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
        "metadata": {"name": name},
        "spec": {"serviceRef": {"name": "web"}, "pods": {"key": "example.com/group"},
            "ports": [{"name": "http", "checks": [{"podReady": {}},
                {"portNames": {"key": "example.com/ports"}}]}]}})
}

fn with(mut v: Value, pointer: &str, value: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').expect("a pointer");
    let target = v.pointer_mut(parent).expect("the parent exists");
    match target {
        Value::Array(a) => a.push(value),
        Value::Object(o) => {
            o.insert(key.to_string(), value);
        }
        _ => panic!("{parent} is a scalar"),
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn portmapping_writes() {
    let mut p = Pair::new("pm").await;
    let path = format!("{PMS}/broker");
    let mut unknown = mapping("broker");
    unknown["spec"]["surprise"] = json!(true);
    unknown["spec"]["ports"][0]["extra"] = json!(1);
    p.send(
        "create (pruned, defaulted)",
        Req::post(PMS, unknown).save("pm"),
    )
    .await;
    p.send("create an existing name", Req::post(PMS, mapping("broker")))
        .await;
    p.send(
        "merge patch",
        Req::patch(
            &path,
            MERGE,
            json!({"spec": {"publishNotReadyAddresses": true}}),
        ),
    )
    .await;
    p.send(
        "json patch",
        Req::patch(
            &path,
            JSON_PATCH,
            json!([{"op": "replace", "path": "/spec/probe/periodSeconds", "value": 5}]),
        ),
    )
    .await;
    p.send(
        "strategic merge patch is not served for custom resources",
        Req::patch(
            &path,
            STRATEGIC,
            json!({"spec": {"publishNotReadyAddresses": false}}),
        ),
    )
    .await;
    let mut stale = mapping("broker");
    stale["metadata"]["resourceVersion"] = json!("{rv:pm}");
    p.send(
        "update with a stale resourceVersion",
        Req::put(&path, stale),
    )
    .await;
    p.send(
        "status through the main resource is ignored",
        Req::patch(&path, MERGE, json!({"status": {"summary": "ignored"}})),
    )
    .await;
    p.send(
        "status subresource",
        Req::patch(
            &format!("{path}/status"),
            MERGE,
            json!({"status": {"observedGeneration": 3, "summary": "http 0/0",
                "conditions": [{"type": "Ready", "status": "False", "reason": "NoPods",
                    "message": "no pods", "lastTransitionTime": "2026-01-02T03:04:05Z"}]}}),
        ),
    )
    .await;
    p.send("list", Req::get(PMS)).await;
    p.send("delete", Req::delete(&path)).await;
    p.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn portmapping_apply_conflicts() {
    let mut p = Pair::new("pm-ssa").await;
    let path = format!("{PMS}/broker");
    p.send(
        "apply creates",
        Req::apply(&path, "gitops", false, mapping("broker")),
    )
    .await;
    let changed = with(mapping("broker"), "/spec/serviceRef/name", json!("api"));
    p.send(
        "another manager conflicts",
        Req::apply(&path, "kubectl-edit", false, changed.clone()),
    )
    .await;
    p.send("forced", Req::apply(&path, "kubectl-edit", true, changed))
        .await;
    let invalid = with(
        mapping("broker"),
        "/spec/probe",
        json!({"timeoutSeconds": 30}),
    );
    p.send(
        "an invalid apply",
        Req::apply(&path, "gitops", true, invalid),
    )
    .await;
    p.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_portmappings() {
    let mut p = Pair::new("pm-invalid").await;
    let cases: Vec<(&str, Value)> = vec![
        (
            "timeout exceeds period (CEL with fieldPath)",
            with(
                mapping("a"),
                "/spec/probe",
                json!({"timeoutSeconds": 20, "periodSeconds": 5}),
            ),
        ),
        (
            "a check of two kinds (CEL on the item)",
            with(
                mapping("b"),
                "/spec/ports/0/checks/-",
                json!({"podReady": {}, "tcpSocket": {}}),
            ),
        ),
        (
            "In without values (CEL with reason)",
            with(
                mapping("c"),
                "/spec/pods/selector",
                json!({"matchExpressions": [{"key": "tier", "operator": "In"}]}),
            ),
        ),
        (
            "a bad label value for pods.from Label",
            with(
                mapping("d"),
                "/spec/pods",
                json!({"from": "Label", "key": "app", "value": "-x"}),
            ),
        ),
        // One schema error each: sibling errors come in Go map order upstream (random).
        (
            "schema: enum",
            with(
                mapping("e1"),
                "/spec/ports/0/checks/-",
                json!({"httpGet": {"scheme": "FTP"}}),
            ),
        ),
        (
            "schema: pattern",
            with(
                mapping("e2"),
                "/spec/ports/0/checks/-",
                json!({"httpGet": {"path": "healthz"}}),
            ),
        ),
        (
            "schema: maximum",
            with(
                mapping("e3"),
                "/spec/ports/0/checks/-",
                json!({"httpGet": {"port": 70000}}),
            ),
        ),
        (
            "schema: wrong types",
            with(mapping("f"), "/spec/serviceRef", json!({"name": 5})),
        ),
        (
            "no spec",
            json!({"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
                "metadata": {"name": "g"}}),
        ),
        ("an invalid name", mapping("Broker_1")),
    ];
    for (step, body) in cases {
        p.send(step, Req::post(PMS, body)).await;
    }
    p.finish();
}
