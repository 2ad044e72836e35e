//! Services: defaults and allocation, every patch kind, server-side apply conflicts, validation
//! errors (names, ports, immutable cluster IPs).

use serde_json::{Value, json};

use super::harness::{JSON_PATCH, MERGE, Pair, Req, STRATEGIC};

const SERVICES: &str = "/api/v1/namespaces/{ns}/services";

fn service(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080},
            {"name": "https", "port": 443, "targetPort": "https"}]}})
}

fn item(name: &str) -> String {
    format!("{SERVICES}/{name}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_writes() {
    let mut p = Pair::new("services").await;
    p.send("create", Req::post(SERVICES, service("web")).save("web"))
        .await;
    p.send(
        "create an existing name",
        Req::post(SERVICES, service("web")),
    )
    .await;
    p.send(
        "merge patch a port",
        Req::patch(
            &item("web"),
            MERGE,
            json!({"metadata": {"labels": {"a": "b"}}, "spec": {"sessionAffinity": "ClientIP"}}),
        ),
    )
    .await;
    p.send(
        "strategic patch adds a port by its merge key",
        Req::patch(
            &item("web"),
            STRATEGIC,
            json!({"spec": {"ports": [{"name": "metrics", "port": 9090}]}}),
        ),
    )
    .await;
    p.send(
        "json patch replaces a port number",
        Req::patch(
            &item("web"),
            JSON_PATCH,
            json!([{"op": "replace", "path": "/spec/ports/0/port", "value": 81}]),
        ),
    )
    .await;
    let mut stale = service("web");
    stale["metadata"]["resourceVersion"] = json!("{rv:web}");
    p.send(
        "update with a stale resourceVersion",
        Req::put(&item("web"), stale),
    )
    .await;
    p.send(
        "change the cluster IP",
        Req::patch(
            &item("web"),
            MERGE,
            json!({"spec": {"clusterIP": "10.96.200.200"}}),
        ),
    )
    .await;
    let mut node_port = service("np");
    node_port["spec"]["type"] = json!("NodePort");
    p.send(
        "a NodePort Service",
        Req::post(SERVICES, node_port.clone()).save("np"),
    )
    .await;
    node_port["metadata"]["resourceVersion"] = json!("{rv:np}");
    node_port["spec"]["ports"][0]["targetPort"] = json!(8081);
    p.send(
        "an update that omits the allocated values keeps them",
        Req::put(&item("np"), node_port),
    )
    .await;
    let mut headless = service("headless");
    headless["spec"]["clusterIP"] = json!("None");
    p.send("a headless Service", Req::post(SERVICES, headless))
        .await;
    let external = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ext"},
        "spec": {"type": "ExternalName", "externalName": "db.example.com"}});
    p.send("an ExternalName Service", Req::post(SERVICES, external))
        .await;
    let v6 = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "v6"},
        "spec": {"ipFamilies": ["IPv6"], "ports": [{"port": 53, "protocol": "UDP"}]}});
    p.send("an IPv6 Service", Req::post(SERVICES, v6)).await;
    p.send("list", Req::get(SERVICES)).await;
    p.send("delete", Req::delete(&item("web"))).await;
    p.send("delete it again", Req::delete(&item("web"))).await;
    p.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_apply_conflicts() {
    let mut p = Pair::new("services-ssa").await;
    let applied = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}});
    p.send(
        "apply creates",
        Req::apply(&item("web"), "alice", false, applied.clone()),
    )
    .await;
    p.send(
        "apply again is a no-op",
        Req::apply(&item("web"), "alice", false, applied),
    )
    .await;
    let other = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 9090}]}});
    p.send(
        "another manager conflicts",
        Req::apply(&item("web"), "bob", false, other.clone()),
    )
    .await;
    p.send(
        "forced, it takes the field",
        Req::apply(&item("web"), "bob", true, other),
    )
    .await;
    p.send(
        "an update takes a field from an applier",
        Req::patch(
            &format!("{}?fieldManager=carol", item("web")),
            MERGE,
            json!({"spec": {"sessionAffinity": "ClientIP"}}),
        ),
    )
    .await;
    let kind_mismatch =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web"}});
    p.send(
        "apply of another kind",
        Req::apply(&item("web"), "alice", false, kind_mismatch),
    )
    .await;
    p.send(
        "apply without a field manager",
        Req::patch(
            &item("web"),
            super::harness::APPLY,
            json!({"apiVersion": "v1",
            "kind": "Service", "metadata": {"name": "web"}}),
        ),
    )
    .await;
    p.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_services() {
    let mut p = Pair::new("services-invalid").await;
    let mut ports = service("bad-ports");
    ports["spec"]["ports"] = json!([
        {"name": "http", "port": 0},
        {"name": "http", "port": 70000, "protocol": "ICMP", "targetPort": "Not_A_Name"},
        {"port": 82}]);
    p.send("bad ports", Req::post(SERVICES, ports)).await;
    let no_ports = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "none"},
        "spec": {}});
    p.send("no ports", Req::post(SERVICES, no_ports)).await;
    for (step, name) in [("an upper-case name", "Web"), ("a dotted name", "web.api")] {
        p.send(step, Req::post(SERVICES, service(name))).await;
    }
    p.send(
        "a 64-character name",
        Req::post(SERVICES, service(&"a".repeat(64))),
    )
    .await;
    p.send(
        "a name starting with a digit (KEP-5311)",
        Req::post(SERVICES, service("1st-api")),
    )
    .await;
    let mut ip = service("bad-ip");
    ip["spec"]["clusterIP"] = json!("10.96.0.1.5");
    p.send("a bad cluster IP", Req::post(SERVICES, ip)).await;
    let mut out_of_range = service("out-of-range");
    out_of_range["spec"]["clusterIP"] = json!("192.168.0.10");
    p.send(
        "a cluster IP out of range",
        Req::post(SERVICES, out_of_range),
    )
    .await;
    let mut policy = service("bad-policy");
    policy["spec"]["ipFamilyPolicy"] = json!("SingleStack");
    policy["spec"]["ipFamilies"] = json!(["IPv4", "IPv6"]);
    p.send("two families, single stack", Req::post(SERVICES, policy))
        .await;
    p.finish();
}
