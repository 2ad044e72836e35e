//! What a PortMapping tells its user, counted in the request log: unknown port
//! names (issue 11 item 6) and one collision Event per squatter (issue 11 item 12). A status
//! change patched once while the PortMapping cache lags is a reconcile test
//! (`reconcile/tests.rs`).

use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams, PostParams};
use portmapper_api::PortMapping;
use serde_json::json;

use crate::harness::*;

const T: Duration = Duration::from_secs(20);

/// Passes that succeeded: planned (and could have written), or quiet (nothing they read had
/// changed since a pass that planned and wrote nothing, so they could not write either).
fn successes(h: &Harness) -> f64 {
    ["success", "quiet"]
        .map(|result| {
            h.metric(&format!(
                r#"portmapper_reconcile_total{{result="{result}"}}"#
            ))
            .unwrap_or(0.0)
        })
        .iter()
        .sum()
}

/// Waits until `n` more reconciles succeeded.
async fn passes(h: &Harness, n: f64) {
    let from = successes(h);
    eventually("more reconciles", T, || async {
        (successes(h) >= from + n).then_some(())
    })
    .await;
}

/// Warning Events published with `reason`: kube's Recorder creates the first and patches a
/// repeat into its series (`series.count` = publications), so this counts every publication.
async fn publications(h: &Harness, reason: &str) -> i32 {
    h.events(reason)
        .await
        .iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum()
}

fn condition(pm: &PortMapping, type_: &str) -> Option<(String, String, String)> {
    pm.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn rename_service_port(h: &Harness, from_to: (&str, &str)) {
    let api: Api<Service> = Api::namespaced(h.client.clone(), &h.ns);
    let svc = api.get("web").await.unwrap();
    let mut ports = svc.spec.unwrap().ports.unwrap();
    for p in &mut ports {
        if p.name.as_deref() == Some(from_to.0) {
            p.name = Some(from_to.1.into());
        }
    }
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"ports": ports}})),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_port_renamed_under_a_portmapping_is_reported_once_per_transition() {
    let h = Harness::start_with(|s| s.resync = Duration::from_secs(1)).await;
    h.create(service("web", &[("http", 8080), ("https", 8443)]))
        .await;
    ready_pods(&h, "web", &[("pod-a", "https", "10.244.0.1")]).await;
    let mut pm = portmapping("web", "web");
    // http publishes every Ready pod; unlisted ports (https) need the pod to list them.
    pm["spec"]["ports"] = json!([{"name": "http", "checks": [{"podReady": {}}]}]);
    h.create(pm).await;
    eventually("published", T, || async {
        (h.membership("web").await.get("web.http")? == &vec!["pod-a".to_string()]
            && is_ready(&h, "web").await)
            .then_some(())
    })
    .await;
    assert_eq!(condition(&h.portmapping("web").await, "PortNotFound"), None);

    // The Service's http port is renamed: the entry matches nothing any more.
    rename_service_port(&h, ("http", "web")).await;
    let (status, reason, message) = eventually("PortNotFound", T, || async {
        condition(&h.portmapping("web").await, "PortNotFound")
    })
    .await;
    assert_eq!((status.as_str(), reason.as_str()), ("True", "UnknownPort"));
    assert!(
        message.contains(r#"spec.ports names "http""#)
            && message.contains(r#"its ports are "web", "https""#),
        "{message}"
    );
    // The other ports still publish: not unready for it.
    assert!(is_ready(&h, "web").await);
    passes(&h, 4.0).await;
    assert_eq!(
        publications(&h, "UnknownPort").await,
        1,
        "one Event, not one per pass"
    );
    let event = h.events("UnknownPort").await;
    assert_eq!(event.len(), 1);
    assert_eq!(event[0].type_.as_deref(), Some("Warning"));
    assert_eq!(event[0].note.as_deref(), Some(message.as_str()));

    // Renamed back: the condition clears, and no Event is sent for the clearing.
    rename_service_port(&h, ("web", "http")).await;
    eventually("PortNotFound cleared", T, || async {
        condition(&h.portmapping("web").await, "PortNotFound")
            .is_none()
            .then_some(())
    })
    .await;
    passes(&h, 2.0).await;
    assert_eq!(publications(&h, "UnknownPort").await, 1);

    // Renamed again: a new transition, a new Event.
    rename_service_port(&h, ("http", "web")).await;
    eventually("PortNotFound again", T, || async {
        condition(&h.portmapping("web").await, "PortNotFound").map(|_| ())
    })
    .await;
    passes(&h, 3.0).await;
    assert_eq!(publications(&h, "UnknownPort").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_collision_is_warned_once_per_squatter_not_at_every_retry() {
    // Resync 1 s: the PortMapping looks again every second while the squatter stays.
    let h = Harness::start_with(|s| s.resync = Duration::from_secs(1)).await;
    h.create(service("web", &[("http", 8080), ("https", 8443)]))
        .await;
    ready_pods(&h, "web", &[("pod-a", "http,https", "10.244.0.1")]).await;
    let slices: Api<EndpointSlice> = Api::namespaced(h.client.clone(), &h.ns);
    let squatter = |name: &str| -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"endpointslice.kubernetes.io/managed-by": "someone-else"}},
            "addressType": "IPv4", "endpoints": [{"addresses": ["10.244.9.9"]}],
        }))
        .unwrap()
    };
    slices
        .create(&PostParams::default(), &squatter("web.http"))
        .await
        .unwrap();
    h.create(portmapping("web", "web")).await;
    eventually("NameCollision", T, || async {
        (condition(&h.portmapping("web").await, "Stalled")?.1 == "NameCollision").then_some(())
    })
    .await;
    // Names held by others come from a watch: no GET before a create.
    let gets = || async {
        let agent = Harness::operator_user_agent();
        h.requests()
            .await
            .iter()
            .filter(|r| r.verb == "get" && r.resource == "endpointslices" && r.user_agent == agent)
            .count()
    };
    passes(&h, 3.0).await;
    assert_eq!(publications(&h, "EndpointSliceNameCollision").await, 1);

    // A second squatter (at the slice of a port the Service gains) is a new occurrence: one
    // more Event, about it; the first squatter is not warned again.
    slices
        .create(&PostParams::default(), &squatter("web.admin"))
        .await
        .unwrap();
    let api: Api<Service> = Api::namespaced(h.client.clone(), &h.ns);
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"ports": [
            {"name": "http", "port": 8080, "targetPort": 8080},
            {"name": "https", "port": 8443, "targetPort": 8443},
            {"name": "admin", "port": 9090, "targetPort": 9090},
        ]}})),
    )
    .await
    .unwrap();
    let both = eventually("a second collision Event", T, || async {
        let events = h.events("EndpointSliceNameCollision").await;
        events
            .iter()
            .find(|e| e.related.as_ref().and_then(|r| r.name.as_deref()) == Some("web.admin"))
            .cloned()
    })
    .await;
    assert_eq!(
        both.note.as_deref(),
        Some("EndpointSlice web.admin already exists (managed by someone-else)")
    );
    let related = both.related.unwrap_or_default();
    assert_eq!(
        (related.kind.as_deref(), related.name.as_deref()),
        (Some("EndpointSlice"), Some("web.admin"))
    );
    passes(&h, 3.0).await;
    assert_eq!(publications(&h, "EndpointSliceNameCollision").await, 2);
    assert_eq!(gets().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_portmapping_deleted_and_created_again_is_warned_again() {
    let h = Harness::start().await;
    h.create(service("web", &[("http", 8080)])).await;
    ready_pods(&h, "web", &[("pod-a", "http", "10.244.0.1")]).await;
    let mut pm = portmapping("web", "web");
    pm["spec"]["ports"] = json!([{"name": "htttp", "checks": [{"podReady": {}}]}]);
    h.create(pm.clone()).await;
    eventually("the first UnknownPort Event", T, || async {
        (publications(&h, "UnknownPort").await == 1).then_some(())
    })
    .await;
    let api: Api<PortMapping> = Api::namespaced(h.client.clone(), &h.ns);
    api.delete("web", &Default::default()).await.unwrap();
    // The operator forgets a deleted PortMapping in one step: its metric series go with it.
    eventually("the PortMapping forgotten", T, || async {
        (!h.metrics_text().contains(r#"service="web""#)).then_some(())
    })
    .await;
    h.create(pm).await;
    eventually(
        "an UnknownPort Event for the new PortMapping",
        T,
        || async { (publications(&h, "UnknownPort").await == 2).then_some(()) },
    )
    .await;
}
