//! Pods: defaults, patches of every kind, the status subresource, validation errors, conflicts,
//! graceful deletion of a bound pod, and Nodes.

use serde_json::{Value, json};

use super::harness::{JSON_PATCH, MERGE, Pair, Req, STRATEGIC};

const PODS: &str = "/api/v1/namespaces/{ns}/pods";

fn pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.27",
            "ports": [{"name": "http", "containerPort": 8080}]}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_writes_and_errors() {
    let mut p = Pair::new("pods").await;
    p.send("create", Req::post(PODS, pod("web")).save("web"))
        .await;
    p.send("get", Req::get(&format!("{PODS}/web"))).await;
    p.send("create an existing name", Req::post(PODS, pod("web")))
        .await;
    p.send(
        "merge patch",
        Req::patch(
            &format!("{PODS}/web"),
            MERGE,
            json!({"metadata": {"labels": {"tier": "a"}}}),
        ),
    )
    .await;
    p.send(
        "json patch",
        Req::patch(
            &format!("{PODS}/web"),
            JSON_PATCH,
            json!([{"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}}]),
        ),
    )
    .await;
    p.send(
        "strategic patch of a container by name",
        Req::patch(
            &format!("{PODS}/web"),
            STRATEGIC,
            json!({"spec": {"containers": [{"name": "app", "image": "nginx:1.28"}]}}),
        ),
    )
    .await;
    p.send(
        "json patch test failure",
        Req::patch(
            &format!("{PODS}/web"),
            JSON_PATCH,
            json!([{"op": "test", "path": "/metadata/labels/app", "value": "db"}]),
        ),
    )
    .await;
    let status = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
        "status": {"phase": "Running", "podIP": "10.1.0.5", "podIPs": [{"ip": "10.1.0.5"}],
            "conditions": [{"type": "Ready", "status": "True"}]}});
    p.send(
        "status merge patch",
        Req::patch(&format!("{PODS}/web/status"), MERGE, status),
    )
    .await;
    let stale = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "resourceVersion": "{rv:web}", "labels": {"x": "y"}},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}});
    p.send(
        "update with a stale resourceVersion",
        Req::put(&format!("{PODS}/web"), stale),
    )
    .await;
    p.send("list", Req::get(&format!("{PODS}?labelSelector=app%3Dweb")))
        .await;
    p.send("delete an unbound pod", Req::delete(&format!("{PODS}/web")))
        .await;
    p.send("get the deleted pod", Req::get(&format!("{PODS}/web")))
        .await;
    p.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_pods() {
    let mut p = Pair::new("pods-invalid").await;
    let mut bad_ports = pod("bad-ports");
    bad_ports["spec"]["containers"][0]["ports"] = json!([
        {"name": "http-endpoint-too-long", "containerPort": 0},
        {"name": "http", "containerPort": 70000, "protocol": "ICMP"},
        {"name": "http", "containerPort": 81}]);
    p.send("bad container ports", Req::post(PODS, bad_ports))
        .await;
    let no_containers = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "Bad_Name"}, "spec": {"containers": []}});
    p.send("bad name, no containers", Req::post(PODS, no_containers))
        .await;
    p.send("create", Req::post(PODS, pod("web"))).await;
    let ips = json!({"status": {"podIP": "10.1.0.5", "podIPs": [{"ip": "10.1.0.6"}, {"ip": "not-an-ip"}]}});
    p.send(
        "bad status IPs",
        Req::patch(&format!("{PODS}/web/status"), MERGE, ips),
    )
    .await;
    p.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_and_bound_pods() {
    // A real cluster without kubelets keeps a gracefully deleted bound pod Terminating; the
    // emulator does so when asked (by default it plays the kubelet and removes the pod).
    let mut p = Pair::with("nodes", |b| b.graceful_pod_deletion(true)).await;
    let node_name = format!("{}-node", p.ns);
    let node = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node_name, "labels": {"zone": "a"}}});
    let nodes = "/api/v1/nodes";
    p.send("create a node", Req::post(nodes, node.clone()))
        .await;
    p.send("create it again", Req::post(nodes, node)).await;
    p.send(
        "node status",
        Req::patch(
            &format!("{nodes}/{node_name}/status"),
            MERGE,
            json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.2.0.1"}],
                "conditions": [{"type": "Ready", "status": "True"}]}}),
        ),
    )
    .await;
    p.send(
        "a bad node name",
        Req::post(
            nodes,
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "Node_1"}}),
        ),
    )
    .await;
    let mut bound = pod("bound");
    bound["spec"]["nodeName"] = json!(node_name);
    p.send("create a bound pod", Req::post(PODS, bound).save("bound"))
        .await;
    p.send(
        "graceful delete of a bound pod",
        Req::delete(&format!("{PODS}/bound")),
    )
    .await;
    p.send("get it", Req::get(&format!("{PODS}/bound"))).await;
    p.send(
        "delete with grace 0",
        Req::delete(&format!("{PODS}/bound")).body(json!({"gracePeriodSeconds": 0})),
    )
    .await;
    p.send("get it again", Req::get(&format!("{PODS}/bound")))
        .await;
    p.send(
        "the pod's events",
        Req::get(&format!(
            "{PODS}?watch=true&resourceVersion={{rv:bound}}&timeoutSeconds=1"
        )),
    )
    .await;
    p.send(
        "delete the node",
        Req::delete(&format!("{nodes}/{node_name}")),
    )
    .await;
    p.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_collections_and_namespaces() {
    let mut p = Pair::new("collections").await;
    for name in ["a", "b"] {
        p.send("create", Req::post(PODS, pod(name))).await;
    }
    p.send(
        "delete the collection",
        Req::delete(&format!("{PODS}?labelSelector=app%3Dweb")),
    )
    .await;
    p.send("list what is left", Req::get(PODS)).await;
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "{ns}-extra"}});
    p.send("create a namespace", Req::post("/api/v1/namespaces", ns))
        .await;
    p.send("delete it", Req::delete("/api/v1/namespaces/{ns}-extra"))
        .await;
    p.send(
        "delete a protected namespace",
        Req::delete("/api/v1/namespaces/default").body(json!({"dryRun": ["All"]})),
    )
    .await;
    p.finish();
}
