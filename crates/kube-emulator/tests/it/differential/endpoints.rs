//! EndpointSlices and Endpoints: valid objects, every patch kind, apply conflicts, bad slices and
//! bad Endpoints, and the Endpoints deprecation warning.

use serde_json::{Value, json};

use super::harness::{JSON_PATCH, MERGE, Pair, Req, STRATEGIC};

const SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices";
const ENDPOINTS: &str = "/api/v1/namespaces/{ns}/endpoints";

fn slice(name: &str) -> Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "labels": {"kubernetes.io/service-name": "web",
            "endpointslice.kubernetes.io/managed-by": "portmapper.dev"}},
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["10.1.0.5"], "conditions": {"ready": true, "serving": true,
                "terminating": false}, "targetRef": {"kind": "Pod", "name": "web-0",
                "namespace": "{ns}"}, "nodeName": "node-a", "zone": "z1"},
            {"addresses": ["10.1.0.6"], "conditions": {"ready": false}}],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_slice_writes() {
    let mut p = Pair::new("slices").await;
    let path = format!("{SLICES}/web-http");
    p.send("create", Req::post(SLICES, slice("web-http")).save("s"))
        .await;
    p.send(
        "create an existing name",
        Req::post(SLICES, slice("web-http")),
    )
    .await;
    p.send(
        "merge patch the endpoints",
        Req::patch(
            &path,
            MERGE,
            json!({"endpoints": [{"addresses": ["10.1.0.7"], "conditions": {"ready": true}}]}),
        ),
    )
    .await;
    p.send(
        "json patch a port",
        Req::patch(
            &path,
            JSON_PATCH,
            json!([{"op": "add", "path": "/ports/-", "value": {"name": "https", "port": 8443}}]),
        ),
    )
    .await;
    p.send(
        "strategic patch (endpoints are atomic)",
        Req::patch(
            &path,
            STRATEGIC,
            json!({"endpoints": [{"addresses": ["10.1.0.8"]}]}),
        ),
    )
    .await;
    let mut stale = slice("web-http");
    stale["metadata"]["resourceVersion"] = json!("{rv:s}");
    p.send(
        "update with a stale resourceVersion",
        Req::put(&path, stale),
    )
    .await;
    let mut generated = slice("");
    // A prefix that sorts after `web-http`, whatever the generated suffix.
    generated["metadata"] = json!({"generateName": "zz-web-",
        "labels": {"kubernetes.io/service-name": "web"}});
    p.send("create with generateName", Req::post(SLICES, generated))
        .await;
    p.send(
        "list by service label",
        Req::get(&format!(
            "{SLICES}?labelSelector=kubernetes.io%2Fservice-name%3Dweb"
        )),
    )
    .await;
    p.send("delete", Req::delete(&path)).await;
    p.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_slice_apply() {
    let mut p = Pair::new("slices-ssa").await;
    let path = format!("{SLICES}/web-http");
    p.send(
        "apply creates",
        Req::apply(&path, "portmapper", false, slice("web-http")),
    )
    .await;
    let mut other = slice("web-http");
    other["ports"][0]["port"] = json!(9090);
    p.send(
        "another manager conflicts on the port",
        Req::apply(&path, "intruder", false, other.clone()),
    )
    .await;
    p.send("forced", Req::apply(&path, "intruder", true, other))
        .await;
    let mut shrunk = slice("web-http");
    shrunk["endpoints"] = json!([]);
    p.send(
        "the first manager applies no endpoints",
        Req::apply(&path, "portmapper", true, shrunk),
    )
    .await;
    p.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_endpoint_slices() {
    let mut p = Pair::new("slices-invalid").await;
    let mut family = slice("bad-family");
    family["addressType"] = json!("IPv5");
    p.send("an unknown address type", Req::post(SLICES, family))
        .await;
    let mut addresses = slice("bad-addresses");
    addresses["endpoints"] = json!([
        {"addresses": ["127.0.0.1"]},
        {"addresses": ["fd00::1"]},
        {"addresses": []},
        {"addresses": ["10.1.0.9"], "hostname": "Not_A_Label"}]);
    p.send("bad addresses", Req::post(SLICES, addresses)).await;
    let mut ports = slice("bad-ports");
    ports["ports"] = json!([{"name": "HTTP", "port": 0}, {"name": "b", "port": 80, "protocol": "ICMP"},
        {"name": "b", "port": 81}]);
    p.send("bad ports", Req::post(SLICES, ports)).await;
    let mut label = slice("bad-label");
    label["metadata"]["labels"] = json!({"kubernetes.io/service-name": "-web"});
    p.send("a bad label value", Req::post(SLICES, label)).await;
    let missing = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "missing"}, "endpoints": []});
    p.send("no address type", Req::post(SLICES, missing)).await;
    p.send("create a good one", Req::post(SLICES, slice("good")))
        .await;
    p.send(
        "change the address type",
        Req::patch(
            &format!("{SLICES}/good"),
            MERGE,
            json!({"addressType": "IPv6", "endpoints": [{"addresses": ["fd00::5"]}]}),
        ),
    )
    .await;
    p.finish();
}

fn endpoints(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name},
        "subsets": [{"addresses": [{"ip": "10.1.0.5", "targetRef": {"kind": "Pod", "name": "p"}}],
            "notReadyAddresses": [{"ip": "10.1.0.6"}],
            "ports": [{"name": "http", "port": 8080}]}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_writes_and_warnings() {
    let mut p = Pair::new("endpoints").await;
    let path = format!("{ENDPOINTS}/legacy");
    p.send("create", Req::post(ENDPOINTS, endpoints("legacy")))
        .await;
    p.send("get", Req::get(&path)).await;
    p.send("list", Req::get(ENDPOINTS)).await;
    p.send(
        "merge patch",
        Req::patch(&path, MERGE, json!({"metadata": {"labels": {"a": "b"}}})),
    )
    .await;
    p.send(
        "strategic patch",
        Req::patch(
            &path,
            STRATEGIC,
            json!({"subsets": [{"addresses": [{"ip": "10.1.0.7"}], "ports": [{"port": 80}]}]}),
        ),
    )
    .await;
    let mut bad = endpoints("bad");
    bad["subsets"] = json!([{"addresses": [{"ip": "127.0.0.1"}, {"ip": "not-an-ip"}],
        "ports": [{"name": "HTTP", "port": 0}, {"port": 81, "protocol": "ICMP"}]}]);
    p.send("invalid", Req::post(ENDPOINTS, bad)).await;
    p.send("delete", Req::delete(&path)).await;
    p.send("get the deleted one", Req::get(&path)).await;
    p.finish();
}
