//! Who owns what, and what happens to it: a moved `serviceRef`, orphaned objects, owners held
//! terminating by finalizers, stripped ownership labels, name collisions, watches that must
//! reach every PortMapping of a pod. Tests that prove an event (not the periodic resync) made a
//! change run with a resync far longer than their timeout.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use portmapper_api::PortMapping;
use serde_json::{Value, json};

use crate::harness::*;

const T: Duration = Duration::from_secs(20);
const NO_RESYNC: Duration = Duration::from_secs(600);

fn controller_uid(obj: &impl ResourceExt) -> Option<String> {
    obj.owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.clone())
}

async fn set_service_ref(h: &Harness, pm: &str, service: &str) {
    let pms: Api<PortMapping> = Api::namespaced(h.client.clone(), &h.ns);
    pms.patch(
        pm,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"serviceRef": {"name": service}}})),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_service_ref_takes_slices_and_the_legacy_mirror_along_even_across_a_restart() {
    let mut h = Harness::start().await;
    h.create(service("web", &[("http", 8080)])).await;
    h.create(service("api", &[("http", 8080)])).await;
    ready_pods(&h, "shared", &[("pod-a", "http", "10.244.0.1")]).await;
    let mut pm = portmapping("pm", "web");
    pm["spec"]["pods"]["value"] = json!("shared");
    pm["spec"]["legacyEndpoints"] = json!(true);
    h.create(pm).await;
    let eps: Api<Endpoints> = Api::namespaced(h.client.clone(), &h.ns);
    eventually("web published", T, || async {
        (h.membership("web").await.get("web.http")? == &vec!["pod-a".to_string()]
            && eps.get_opt("web").await.unwrap().is_some())
        .then_some(())
    })
    .await;

    set_service_ref(&h, "pm", "api").await;
    eventually("moved to api, nothing left on web", T, || async {
        (h.slices("web").await.is_empty()
            && eps.get_opt("web").await.unwrap().is_none()
            && h.membership("api").await.get("api.http")? == &vec!["pod-a".to_string()]
            && eps.get_opt("api").await.unwrap().is_some())
        .then_some(())
    })
    .await;

    // Moved back while no operator runs: the next one finds api's objects by their owner.
    h.stop_controller().await;
    set_service_ref(&h, "pm", "web").await;
    h.run_controller();
    eventually("moved back to web after the restart", T, || async {
        (h.slices("api").await.is_empty()
            && eps.get_opt("api").await.unwrap().is_none()
            && h.membership("web").await.get("web.http")? == &vec!["pod-a".to_string()]
            && eps.get_opt("web").await.unwrap().is_some())
        .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaned_slices_are_adopted_by_a_new_portmapping_for_their_service() {
    let h = Harness::start().await;
    h.create(service("web", &[("http", 8080)])).await;
    ready_pods(&h, "web", &[("pod-a", "http", "10.244.0.1")]).await;
    ready_pods(&h, "web", &[("pod-b", "http", "10.244.0.2")]).await;
    let mut pm = portmapping("web", "web");
    // One endpoint per slice (two slices) needs PerPortSet: PerPort admits no fewer than 10.
    pm["spec"]["sliceGrouping"] = json!("PerPortSet");
    pm["spec"]["maxEndpointsPerSlice"] = json!(1);
    h.create(pm.clone()).await;
    eventually("two chunks", T, || async {
        (h.slices("web").await.len() == 2).then_some(())
    })
    .await;

    // `kubectl delete pm web --cascade=orphan`: the slices stay, without an owner.
    let pms: Api<PortMapping> = Api::namespaced(h.client.clone(), &h.ns);
    pms.delete("web", &DeleteParams::orphan()).await.unwrap();
    eventually("orphaned", T, || async {
        let slices = h.slices("web").await;
        (pms.get_opt("web").await.unwrap().is_none()
            && slices.len() == 2
            && slices.iter().all(|s| s.owner_references().is_empty()))
        .then_some(())
    })
    .await;
    // Meanwhile pod-b leaves: one orphan is no longer needed.
    h.set_pod_status("pod-b", &["10.244.0.2"], false).await;

    h.create(pm).await;
    let uid = eventually("new PortMapping", T, || async {
        pms.get_opt("web").await.unwrap()?.uid()
    })
    .await;
    eventually("adopted: one slice, ours, with pod-a", T, || async {
        let slices = h.slices("web").await;
        (slices.len() == 1
            && controller_uid(&slices[0]).as_deref() == Some(uid.as_str())
            && h.membership("web").await.values().next()? == &vec!["pod-a".to_string()]
            && is_ready(&h, "web").await)
            .then_some(())
    })
    .await;
    assert!(
        h.events("EndpointSliceNameCollision").await.is_empty(),
        "adoption is not a collision"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_portmapping_held_by_a_finalizer_keeps_its_slices_accurate_until_it_goes() {
    let h = Harness::start().await;
    h.create(service("web", &[("http", 8080)])).await;
    ready_pods(&h, "web", &[("pod-a", "http", "10.244.0.1")]).await;
    ready_pods(&h, "web", &[("pod-b", "http", "10.244.0.2")]).await;
    let mut pm = portmapping("web", "web");
    pm["metadata"]["finalizers"] = json!(["example.com/hold"]);
    h.create(pm).await;
    eventually("both pods", T, || async {
        (h.membership("web").await.get("web.http")?.len() == 2).then_some(())
    })
    .await;
    let pms: Api<PortMapping> = Api::namespaced(h.client.clone(), &h.ns);
    pms.delete("web", &DeleteParams::default()).await.unwrap();
    assert!(
        pms.get("web")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some(),
        "held by its finalizer"
    );
    h.set_pod_status("pod-b", &["10.244.0.2"], false).await;
    eventually(
        "pod-b leaves while the PortMapping terminates",
        T,
        || async {
            (h.membership("web").await.get("web.http")? == &vec!["pod-a".to_string()]).then_some(())
        },
    )
    .await;
    // Releasing the finalizer lets the garbage collector take the slice.
    pms.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually("collected", T, || async {
        h.slices("web").await.is_empty().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_held_by_a_finalizer_keeps_its_slices_accurate() {
    let h = Harness::start().await;
    let mut svc = service("web", &[("http", 8080)]);
    svc["metadata"]["finalizers"] = json!(["example.com/hold"]);
    h.create(svc).await;
    ready_pods(&h, "web", &[("pod-a", "http", "10.244.0.1")]).await;
    ready_pods(&h, "web", &[("pod-b", "http", "10.244.0.2")]).await;
    h.create(portmapping("web", "web")).await;
    eventually("both pods", T, || async {
        (h.membership("web").await.get("web.http")?.len() == 2).then_some(())
    })
    .await;
    let services: Api<Service> = Api::namespaced(h.client.clone(), &h.ns);
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    h.set_pod_status("pod-b", &["10.244.0.2"], false).await;
    eventually("pod-b leaves while the Service terminates", T, || async {
        (h.membership("web").await.get("web.http")? == &vec!["pod-a".to_string()]).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripped_ownership_labels_are_restored_through_the_owner_reference() {
    let h = Harness::start_with(|s| s.resync = NO_RESYNC).await;
    h.create(service("web", &[("http", 8080)])).await;
    ready_pods(&h, "web", &[("pod-a", "http", "10.244.0.1")]).await;
    h.create(portmapping("web", "web")).await;
    eventually("published", T, || async {
        (h.membership("web").await.get("web.http")?.len() == 1).then_some(())
    })
    .await;
    let slices: Api<EndpointSlice> = Api::namespaced(h.client.clone(), &h.ns);
    slices
        .patch(
            "web.http",
            &PatchParams::default(),
            &Patch::<Value>::Json(
                serde_json::from_value(json!([
                    {"op": "remove", "path": "/metadata/labels/endpointslice.kubernetes.io~1managed-by"},
                    {"op": "remove", "path": "/metadata/labels/kubernetes.io~1service-name"},
                    {"op": "replace", "path": "/endpoints", "value": []},
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    // The label-selected watch reports the strip as a deletion of the labelled object; its
    // owner reference leads to the PortMapping, and the watch of slices not managed by us (or a
    // GET while that watch lags) shows the unlabelled slice still controlled by it: ours, so it
    // is applied again.
    let by_name = ListParams::default().fields("metadata.name=web.http");
    let repaired = eventually("labels and endpoints restored", T, || async {
        let s = slices.list(&by_name).await.ok()?.items.pop()?;
        (s.labels().get("endpointslice.kubernetes.io/managed-by")? == "portmapper.dev"
            && s.labels().get("kubernetes.io/service-name")? == "web"
            && s.endpoints.len() == 1)
            .then_some(s)
    })
    .await;
    assert!(controller_uid(&repaired).is_some());
    // The slice left our watch without our deleting it: its name is read (GET) until the watch
    // of slices not ours shows it, and nothing else is. Whether a GET happens at all depends on
    // which watch event comes first (a clean-clone CI run saw none), so only its target is exact.
    let agent = Harness::operator_user_agent();
    let gets: Vec<_> = h
        .requests()
        .await
        .into_iter()
        .filter(|r| r.verb == "get" && r.resource == "endpointslices" && r.user_agent == agent)
        .collect();
    assert!(gets.iter().all(|r| r.name == "web.http"), "{gets:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_collision_is_reported_and_clears_soon_after_the_squatter_goes() {
    let h = Harness::start_with(|s| s.resync = NO_RESYNC).await;
    h.create(service("web", &[("http", 8080)])).await;
    ready_pods(&h, "web", &[("pod-a", "http", "10.244.0.1")]).await;
    let slices: Api<EndpointSlice> = Api::namespaced(h.client.clone(), &h.ns);
    let squatter: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "web.http", "labels": {"endpointslice.kubernetes.io/managed-by": "someone-else"}},
        "addressType": "IPv4", "endpoints": [{"addresses": ["10.244.9.9"]}],
    }))
    .unwrap();
    slices
        .create(&PostParams::default(), &squatter)
        .await
        .unwrap();
    h.create(portmapping("web", "web")).await;
    let warnings = eventually("EndpointSliceNameCollision event", T, || async {
        let e = h.events("EndpointSliceNameCollision").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(warnings[0].type_.as_deref(), Some("Warning"));
    // The counter is recorded after the pass's writes (the Event among them), so it may follow
    // the Event by a moment.
    let series = format!(
        r#"portmapper_name_collisions_total{{namespace="{}",service="web"}} "#,
        h.ns
    );
    eventually("the name collision counted", T, || async {
        h.metrics_text().contains(&series).then_some(())
    })
    .await;
    // No resync: the squatter's deletion, seen by the watch of slices not managed by us, wakes
    // the PortMapping that wants its name.
    slices
        .delete("web.http", &DeleteParams::default())
        .await
        .unwrap();
    eventually("published once the name is free", T, || async {
        (h.membership("web").await.get("web.http")? == &vec!["pod-a".to_string()]
            && is_ready(&h, "web").await)
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_pod_edit_reaches_every_portmapping_of_a_shared_pool() {
    let h = Harness::start_with(|s| s.resync = NO_RESYNC).await;
    h.create(service("front", &[("http", 8080)])).await;
    h.create(service("back", &[("http", 8080)])).await;
    ready_pods(&h, "shared", &[("pod-a", "http", "10.244.0.1")]).await;
    ready_pods(&h, "shared", &[("pod-b", "http", "10.244.0.2")]).await;
    for (pm, svc) in [("front", "front"), ("back", "back")] {
        let mut pm = portmapping(pm, svc);
        pm["spec"]["pods"]["value"] = json!("shared");
        h.create(pm).await;
    }
    eventually("both publish both pods", T, || async {
        (h.membership("front").await.get("front.http")?.len() == 2
            && h.membership("back").await.get("back.http")?.len() == 2)
            .then_some(())
    })
    .await;
    h.patch_pod(
        "pod-b",
        json!({"metadata": {"annotations": {"example.com/ports": ""}}}),
    )
    .await;
    eventually("pod-b leaves both", T, || async {
        let a = vec!["pod-a".to_string()];
        (h.membership("front").await.get("front.http")? == &a
            && h.membership("back").await.get("back.http")? == &a)
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_annotation_keyed_pool_follows_the_annotation() {
    let h = Harness::start_with(|s| s.resync = NO_RESYNC).await;
    h.create(service("web", &[("http", 8080)])).await;
    for (name, ip) in [("pod-a", "10.244.0.1"), ("pod-b", "10.244.0.2")] {
        let mut p = pod(name, "unused", "http");
        p["metadata"]["labels"] = json!({});
        p["metadata"]["annotations"]["example.com/pool"] = json!("web");
        h.create(p).await;
        h.set_pod_status(name, &[ip], true).await;
    }
    let mut pm = portmapping("web", "web");
    pm["spec"]["pods"] = json!({"key": "example.com/pool", "from": "Annotation"});
    h.create(pm).await;
    eventually("both annotated pods", T, || async {
        (h.membership("web").await.get("web.http")?.len() == 2).then_some(())
    })
    .await;
    h.patch_pod(
        "pod-b",
        json!({"metadata": {"annotations": {"example.com/pool": "elsewhere"}}}),
    )
    .await;
    eventually("pod-b left the pool", T, || async {
        (h.membership("web").await.get("web.http")? == &vec!["pod-a".to_string()]).then_some(())
    })
    .await;
}
