//! List and watch: paged lists, selectors, and the events a watch from a list's
//! resourceVersion replays (the writes happen first, so both servers answer from history; the
//! server ends each watch after `timeoutSeconds`).

use serde_json::json;

use super::harness::{MERGE, Pair, Req};

const SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices";
const PMS: &str = "/apis/portmapper.dev/v1alpha1/namespaces/{ns}/portmappings";

fn slice(name: &str, service: &str) -> serde_json::Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4", "endpoints": [{"addresses": ["10.1.0.5"]}],
        "ports": [{"name": "http", "port": 8080}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_and_selectors() {
    let mut p = Pair::new("lists").await;
    for (name, svc) in [("a", "web"), ("b", "web"), ("c", "api")] {
        p.send("create", Req::post(SLICES, slice(name, svc))).await;
    }
    p.send("first page", Req::get(&format!("{SLICES}?limit=2")))
        .await;
    p.send(
        "label selector",
        Req::get(&format!(
            "{SLICES}?labelSelector=kubernetes.io%2Fservice-name%20in%20(api)"
        )),
    )
    .await;
    p.send(
        "field selector",
        Req::get(&format!("{SLICES}?fieldSelector=metadata.name%3Db")),
    )
    .await;
    p.send(
        "unsupported field selector",
        Req::get(&format!("{SLICES}?fieldSelector=addressType%3DIPv4")),
    )
    .await;
    p.send(
        "unsupported field selector of a type with field labels",
        Req::get("/api/v1/namespaces/{ns}/pods?fieldSelector=spec.hostname%3Da"),
    )
    .await;
    p.send(
        "bad label selector",
        Req::get(&format!("{SLICES}?labelSelector=a%20in%20b")),
    )
    .await;
    p.send(
        "resourceVersionMatch without resourceVersion",
        Req::get(&format!("{SLICES}?resourceVersionMatch=NotOlderThan")),
    )
    .await;
    p.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_replays_writes() {
    let mut p = Pair::new("watch").await;
    p.send("list", Req::get(SLICES).save("start")).await;
    p.send("create web", Req::post(SLICES, slice("web-1", "web")))
        .await;
    p.send("create api", Req::post(SLICES, slice("api-1", "api")))
        .await;
    p.send(
        "relabel api to web",
        Req::patch(
            &format!("{SLICES}/api-1"),
            MERGE,
            json!({"metadata": {"labels": {"kubernetes.io/service-name": "web"}}}),
        ),
    )
    .await;
    p.send(
        "no-op patch",
        Req::patch(
            &format!("{SLICES}/api-1"),
            MERGE,
            json!({"metadata": {"labels": {"kubernetes.io/service-name": "web"}}}),
        ),
    )
    .await;
    p.send("delete web", Req::delete(&format!("{SLICES}/web-1")))
        .await;
    p.send(
        "watch everything",
        Req::get(&format!(
            "{SLICES}?watch=true&resourceVersion={{rv:start}}&timeoutSeconds=1"
        )),
    )
    .await;
    p.send(
        "watch a selector",
        Req::get(&format!(
            "{SLICES}?watch=true&resourceVersion={{rv:start}}&timeoutSeconds=1&\
             labelSelector=kubernetes.io%2Fservice-name%3Dweb"
        )),
    )
    .await;
    p.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_custom_resources() {
    let mut p = Pair::new("watch-cr").await;
    p.send("list", Req::get(PMS).save("start")).await;
    let pm = json!({"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
        "metadata": {"name": "broker"},
        "spec": {"serviceRef": {"name": "web"}, "pods": {"key": "example.com/group"}}});
    p.send("create", Req::post(PMS, pm)).await;
    p.send(
        "status",
        Req::patch(
            &format!("{PMS}/broker/status"),
            MERGE,
            json!({"status": {"observedGeneration": 1}}),
        ),
    )
    .await;
    p.send("delete", Req::delete(&format!("{PMS}/broker")))
        .await;
    p.send(
        "watch",
        Req::get(&format!(
            "{PMS}?watch=true&resourceVersion={{rv:start}}&timeoutSeconds=1"
        )),
    )
    .await;
    p.finish();
}
