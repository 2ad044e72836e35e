//! Hostile inputs that only the operator sees (issue 11's catalogue, listed in
//! `docs/reliability.md`): a Service deleted and recreated under a live PortMapping, and a
//! selector-less Service that gains a selector.

use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use crate::harness::*;

const T: Duration = Duration::from_secs(15);

/// The UIDs of our slices among `slices` (once the Service has a selector, the native
/// EndpointSlice controller publishes one of its own beside them).
fn uids(slices: &[EndpointSlice]) -> Vec<String> {
    let mut u: Vec<String> = slices
        .iter()
        .filter(|s| {
            s.labels()
                .get("endpointslice.kubernetes.io/managed-by")
                .map(String::as_str)
                == Some("portmapper.dev")
        })
        .filter_map(|s| s.uid())
        .collect();
    u.sort();
    u
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_deleted_and_recreated_is_published_again_with_the_same_members() {
    let h = Harness::start().await;
    h.create(service("web", &[("http", 8080)])).await;
    ready_pods(&h, "web", &[("pod-a", "http", "10.244.0.1")]).await;
    h.create(portmapping("web", "web")).await;
    eventually("published", T, || async {
        (h.membership("web").await.get("web.http") == Some(&vec!["pod-a".to_owned()])).then_some(())
    })
    .await;
    let services: Api<Service> = Api::namespaced(h.client.clone(), &h.ns);
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    eventually("withdrawn", T, || async {
        h.slices("web").await.is_empty().then_some(())
    })
    .await;
    h.create(service("web", &[("http", 8080)])).await;
    eventually("published again", T, || async {
        (h.membership("web").await.get("web.http") == Some(&vec!["pod-a".to_owned()])).then_some(())
    })
    .await;
    eventually("Ready again", T, || async {
        is_ready(&h, "web").await.then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_gaining_a_selector_keeps_our_slices_and_reports_the_migration_once() {
    let h = Harness::start().await;
    h.create(service("web", &[("http", 8080)])).await;
    ready_pods(&h, "web", &[("pod-a", "http", "10.244.0.1")]).await;
    h.create(portmapping("web", "web")).await;
    eventually("Ready", T, || async {
        is_ready(&h, "web").await.then_some(())
    })
    .await;
    let before = uids(&h.slices("web").await);
    assert_eq!(before.len(), 1, "our one slice");
    let services: Api<Service> = Api::namespaced(h.client.clone(), &h.ns);
    services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"selector": {"app": "web"}}})),
        )
        .await
        .unwrap();
    let condition = eventually("SelectorMigration", T, || async {
        h.portmapping("web").await.status.and_then(|s| {
            s.conditions
                .into_iter()
                .find(|c| c.type_ == "SelectorMigration" && c.status == "True")
        })
    })
    .await;
    assert!(
        condition.message.contains("still has a selector"),
        "{}",
        condition.message
    );
    eventually("one SelectorStillPresent event", T, || async {
        (h.events("SelectorStillPresent").await.len() == 1).then_some(())
    })
    .await;
    // Our slices are the same objects with the same members.
    assert_eq!(uids(&h.slices("web").await), before);
    assert_eq!(h.membership("web").await["web.http"], ["pod-a"]);
}
