//! Selector migration and legacy Endpoints. On the real control plane the native
//! EndpointSlice controller publishes the selector Service's slice and, once the selector is
//! gone, the mirroring controller mirrors an Endpoints object that is not marked
//! `skip-mirror`; the legacy Endpoints controller does not run (v1 Endpoints is deprecated),
//! so the tests write the Endpoints object it would have left behind. The tests that inject
//! faults run on the emulator, where no controller-manager runs: there each test plays the
//! native controllers by writing what they leave behind (their EndpointSlice, the Endpoints
//! object, and the mirroring controller's slice owned by that Endpoints object).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube_emulator::faults::{FaultAction, Rule};
use portmapper_api::PortMapping;
use serde_json::json;

use crate::harness::*;

const T: Duration = Duration::from_secs(20);
const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
const NATIVE: &str = "endpointslice-controller.k8s.io";
const MIRRORING: &str = "endpointslicemirroring-controller.k8s.io";
const OURS: &str = "portmapper.dev";

/// A Service with a selector, its native slice and the Endpoints object (on the emulator also
/// a mirror slice of that Endpoints, as a leftover).
async fn native_world(h: &Harness) {
    let mut svc = service("web", &[("http", 8080)]);
    svc["spec"]["selector"] = json!({"app": "web"});
    h.create(svc).await;
    for (name, ip) in [("pod-a", "10.244.0.1"), ("pod-x", "10.244.0.9")] {
        let mut p = pod(name, "web", if name == "pod-x" { "" } else { "http" });
        p["metadata"]["labels"]["app"] = json!("web");
        h.create(p).await;
        h.set_pod_status(name, &[ip], true).await;
    }
    let eps: Api<Endpoints> = Api::namespaced(h.client.clone(), &h.ns);
    let ep: Endpoints = serde_json::from_value(json!({
        "metadata": {"name": "web", "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2026-01-01T00:00:00Z"}},
        "subsets": [{"addresses": [{"ip": "10.244.0.1"}, {"ip": "10.244.0.9"}], "ports": [{"name": "http", "port": 8080}]}],
    }))
    .unwrap();
    let ep = eps.create(&PostParams::default(), &ep).await.unwrap();
    if h.is_real() {
        eventually("the native slice with both pods", T, || async {
            let native = h
                .slices("web")
                .await
                .into_iter()
                .find(|s| s.labels().get(MANAGED_BY).map(String::as_str) == Some(NATIVE))?;
            (native.endpoints.len() == 2).then_some(())
        })
        .await;
        return;
    }
    let slices: Api<EndpointSlice> = Api::namespaced(h.client.clone(), &h.ns);
    let native: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "web-abcde", "labels": {
            "kubernetes.io/service-name": "web", MANAGED_BY: NATIVE}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.244.0.1"]}, {"addresses": ["10.244.0.9"]}],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }))
    .unwrap();
    slices
        .create(&PostParams::default(), &native)
        .await
        .unwrap();
    let mirror: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "web-mirror", "labels": {
            "kubernetes.io/service-name": "web", MANAGED_BY: MIRRORING},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Endpoints", "name": "web", "uid": ep.uid().unwrap(), "controller": true}]},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.244.0.1"]}],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }))
    .unwrap();
    slices
        .create(&PostParams::default(), &mirror)
        .await
        .unwrap();
}

/// The managers of the Service's slices, sorted (the native controllers name theirs at
/// random).
async fn slice_managers(h: &Harness) -> Vec<String> {
    let mut managers: Vec<String> = h
        .slices("web")
        .await
        .iter()
        .map(|s| s.labels().get(MANAGED_BY).cloned().unwrap_or_default())
        .collect();
    managers.sort();
    managers
}

/// Names of the slices the operator deleted (the audit log, or the emulator's).
async fn slices_deleted_by_the_operator(h: &Harness) -> Vec<String> {
    h.operator_requests()
        .await
        .into_iter()
        .filter(|r| r.verb == "delete" && r.resource == "endpointslices" && r.succeeded())
        .map(|r| r.name)
        .collect()
}

async fn slice_names(h: &Harness) -> Vec<String> {
    h.slices("web")
        .await
        .iter()
        .map(ResourceExt::name_any)
        .collect()
}

async fn drop_selector(h: &Harness) {
    let services: Api<Service> = Api::namespaced(h.client.clone(), &h.ns);
    services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"selector": null}})),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_migration_publishes_alongside_then_cleans_native_leftovers() {
    let h = Harness::start().await;
    native_world(&h).await;
    h.create(portmapping("web", "web")).await;
    // With the selector present, ours is published beside the native slices, which stay.
    eventually("SelectorMigration condition", T, || async {
        let pm = h.portmapping("web").await;
        pm.status?
            .conditions
            .iter()
            .any(|c| c.type_ == "SelectorMigration" && c.status == "True")
            .then_some(())
    })
    .await;
    assert_eq!(slice_managers(&h).await, [NATIVE, OURS]);
    assert_eq!(
        h.membership("web").await["web.http"],
        ["pod-a"],
        "pod-x does not list http"
    );

    drop_selector(&h).await;
    eventually("only our slice remains", T, || async {
        (slice_names(&h).await == ["web.http"]).then_some(())
    })
    .await;
    let eps: Api<Endpoints> = Api::namespaced(h.client.clone(), &h.ns);
    assert!(
        eps.get_opt("web").await.unwrap().is_none(),
        "the abandoned Endpoints object is deleted"
    );
    let cleaned = h.events("NativeEndpointsCleanedUp").await;
    assert_eq!(cleaned.len(), 1, "one Normal event for the cleanup");
    assert_eq!(cleaned[0].type_.as_deref(), Some("Normal"));
    eventually("SelectorMigration condition cleared", T, || async {
        let pm = h.portmapping("web").await;
        (!pm.status?
            .conditions
            .iter()
            .any(|c| c.type_ == "SelectorMigration"))
        .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_migration_with_legacy_endpoints_adopts_the_abandoned_object() {
    let h = Harness::start().await;
    native_world(&h).await;
    let mut pm = portmapping("web", "web");
    pm["spec"]["legacyEndpoints"] = json!(true);
    h.create(pm).await;
    eventually("our slice", T, || async {
        h.membership("web").await.get("web.http").cloned()
    })
    .await;
    let eps: Api<Endpoints> = Api::namespaced(h.client.clone(), &h.ns);
    let before = eps.get("web").await.unwrap();
    assert!(
        before
            .labels()
            .get("endpointslice.kubernetes.io/managed-by")
            .is_none(),
        "not adopted while the selector exists"
    );

    drop_selector(&h).await;
    let adopted = eventually("adopted", T, || async {
        let e = eps.get("web").await.ok()?;
        (e.labels()
            .get("endpointslice.kubernetes.io/managed-by")
            .map(String::as_str)
            == Some("portmapper.dev"))
        .then_some(e)
    })
    .await;
    assert_eq!(
        adopted.uid(),
        before.uid(),
        "adopted in place, not recreated"
    );
    assert_eq!(
        adopted.labels()["endpointslice.kubernetes.io/skip-mirror"],
        "true"
    );
    assert_ne!(
        adopted
            .annotations()
            .get("endpoints.kubernetes.io/last-change-trigger-time")
            .map(String::as_str),
        Some("2026-01-01T00:00:00Z"),
        "the inherited trigger time is not kept"
    );
    let ips: Vec<String> = adopted
        .subsets
        .iter()
        .flatten()
        .flat_map(|s| s.addresses.iter().flatten().map(|a| a.ip.clone()))
        .collect();
    assert_eq!(
        ips,
        ["10.244.0.1"],
        "stale pod-x address replaced by our membership"
    );
    eventually("native and mirror slices deleted", T, || async {
        (slice_names(&h).await == ["web.http"]).then_some(())
    })
    .await;
    for reason in ["LegacyEndpointsAdopted", "NativeEndpointsCleanedUp"] {
        let events = h.events(reason).await;
        assert_eq!(events.len(), 1, "{reason}");
        assert_eq!(events[0].type_.as_deref(), Some("Normal"), "{reason}");
    }
    // The native slice is the operator's to delete. A mirror slice of the abandoned
    // Endpoints exists only if the mirroring controller saw the selector gone before the
    // operator marked the object skip-mirror; then whichever of the two comes first deletes it.
    let deleted = slices_deleted_by_the_operator(&h).await;
    assert_eq!(
        deleted
            .iter()
            .filter(|n| n.starts_with("web-") && *n != "web.http")
            .count(),
        deleted.len(),
        "only native and mirror slices: {deleted:?}"
    );
    assert!(
        !deleted.is_empty(),
        "the native slice was deleted by the operator"
    );
    assert_eq!(
        h.metric(r#"portmapper_native_cleanup_deletions_total{resource="endpointslice"}"#),
        Some(deleted.len() as f64),
        "the metric counts each deletion:\n{}",
        h.metrics_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_endpoints_follow_the_flag() {
    let h = Harness::start().await;
    h.create(service("web", &[("http", 8080), ("https", 8443)]))
        .await;
    ready_pods(
        &h,
        "web",
        &[
            ("pod-a", "http", "10.244.0.1"),
            ("pod-b", "http,https", "10.244.0.2"),
            ("pod-c", "http,https", "10.244.0.3"),
            ("pod-d", "https", "10.244.0.4"),
        ],
    )
    .await;
    let mut pm = portmapping("web", "web");
    pm["spec"]["legacyEndpoints"] = json!(true);
    h.create(pm).await;
    let eps: Api<Endpoints> = Api::namespaced(h.client.clone(), &h.ns);
    let ep = eventually("Endpoints published with every pod", T, || async {
        let e = eps.get_opt("web").await.ok().flatten()?;
        let n: usize = e
            .subsets
            .iter()
            .flatten()
            .map(|s| s.addresses.as_ref().map_or(0, Vec::len))
            .sum();
        (n == 4).then_some(e)
    })
    .await;
    assert_eq!(
        ep.labels()["endpointslice.kubernetes.io/managed-by"],
        "portmapper.dev"
    );
    // Subsets group addresses by the exact set of ports they serve.
    let mut subsets: Vec<(Vec<String>, Vec<String>)> = ep
        .subsets
        .iter()
        .flatten()
        .map(|s| {
            let mut ips: Vec<String> = s.addresses.iter().flatten().map(|a| a.ip.clone()).collect();
            ips.sort();
            let mut ports: Vec<String> = s
                .ports
                .iter()
                .flatten()
                .filter_map(|p| p.name.clone())
                .collect();
            ports.sort();
            (ports, ips)
        })
        .collect();
    subsets.sort();
    assert_eq!(
        subsets,
        [
            (vec!["http".to_string()], vec!["10.244.0.1".to_string()]),
            (
                vec!["http".to_string(), "https".to_string()],
                vec!["10.244.0.2".to_string(), "10.244.0.3".to_string()]
            ),
            (vec!["https".to_string()], vec!["10.244.0.4".to_string()]),
        ]
    );
    assert_eq!(
        ep.labels()["endpointslice.kubernetes.io/skip-mirror"],
        "true"
    );
    assert_eq!(ep.owner_references()[0].kind, "PortMapping");
    // Converged: no further writes.
    h.passes(1).await;
    let before = h.operator_writes().await;
    h.passes(2).await;
    assert_eq!(
        h.operator_writes().await,
        before,
        "legacy Endpoints must be write-quiet"
    );
    // Turning the option off removes it.
    let pms: Api<PortMapping> = Api::namespaced(h.client.clone(), &h.ns);
    pms.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"legacyEndpoints": false}})),
    )
    .await
    .unwrap();
    eventually("Endpoints removed", T, || async {
        eps.get_opt("web").await.unwrap().is_none().then_some(())
    })
    .await;
}

async fn legacy_world(h: &Harness) -> Api<Endpoints> {
    h.create(service("web", &[("http", 8080)])).await;
    ready_pods(h, "web", &[("pod-a", "http", "10.244.0.1")]).await;
    let mut pm = portmapping("web", "web");
    pm["spec"]["legacyEndpoints"] = json!(true);
    h.create(pm).await;
    let eps: Api<Endpoints> = Api::namespaced(h.client.clone(), &h.ns);
    eventually("Endpoints published", T, || async {
        eps.get_opt("web").await.ok().flatten()
    })
    .await;
    eps
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_name_service_takes_back_slices_and_the_legacy_mirror() {
    let h = Harness::start().await;
    let eps = legacy_world(&h).await;
    h.make_external_name("web").await;
    eventually("slices and Endpoints withdrawn", T, || async {
        (h.slices("web").await.is_empty() && eps.get_opt("web").await.unwrap().is_none())
            .then_some(())
    })
    .await;
    let warnings = eventually("ExternalNameUnsupported event", T, || async {
        let e = h.events("ExternalNameUnsupported").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(warnings[0].type_.as_deref(), Some("Warning"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_service_takes_back_the_legacy_mirror_and_its_metric_series() {
    let h = Harness::start().await;
    let eps = legacy_world(&h).await;
    let series = format!(
        r#"portmapper_endpoints_published{{namespace="{}",service="web",port="http",address_type="IPv4"}} 1"#,
        h.ns
    );
    eventually("endpoints_published series", T, || async {
        h.metrics_text().contains(&series).then_some(())
    })
    .await;
    let services: Api<Service> = Api::namespaced(h.client.clone(), &h.ns);
    services
        .delete("web", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    eventually("slices and Endpoints withdrawn", T, || async {
        (h.slices("web").await.is_empty() && eps.get_opt("web").await.unwrap().is_none())
            .then_some(())
    })
    .await;
    // The series go with the pass that withdrew, once its teardown went through (its last
    // writes, the status and Events, may still be on their way when the slices are gone).
    eventually(
        "no per-Service series left for a withdrawn Service",
        T,
        || async { (!h.metrics_text().contains(r#"service="web""#)).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_endpoints_delete_keeps_the_native_slice_as_evidence_across_a_restart() {
    let mut h = Harness::start_on_emulator().await;
    native_world(&h).await;
    h.create(portmapping("web", "web")).await;
    eventually("our slice beside the native ones", T, || async {
        (slice_names(&h).await == ["web-abcde", "web-mirror", "web.http"]).then_some(())
    })
    .await;
    // Deleting the abandoned Endpoints object fails until the rule is removed.
    let rule = h.emu().inject(
        Rule::new(FaultAction::Status {
            code: 500,
            reason: None,
            message: Some("injected".into()),
            retry_after_seconds: None,
        })
        .verbs(&["delete"])
        .resource("", "endpoints"),
    );
    let failed_deletes = || {
        h.emu()
            .requests()
            .filter(|r| r.verb == "delete" && r.resource == "endpoints" && r.status == 500)
            .len()
    };
    drop_selector(&h).await;
    eventually("the injected failure", T, || async {
        (failed_deletes() >= 1).then_some(())
    })
    .await;
    // The passes that failed left the native slice: it is what brings the next pass back.
    h.stop_controller().await;
    assert!(
        slice_names(&h).await.contains(&"web-abcde".to_string()),
        "native slice kept after the failed Endpoints delete: {:?}",
        slice_names(&h).await
    );
    let eps: Api<Endpoints> = Api::namespaced(h.client.clone(), &h.ns);
    assert!(eps.get_opt("web").await.unwrap().is_some());

    // A fresh controller finishes the migration from that evidence alone.
    assert!(h.emu().faults().remove(&rule));
    h.run_controller();
    eventually("migration finished after the restart", T, || async {
        (slice_names(&h).await == ["web.http"] && eps.get_opt("web").await.unwrap().is_none())
            .then_some(())
    })
    .await;
    let cleaned = h.events("NativeEndpointsCleanedUp").await;
    assert_eq!(cleaned[0].type_.as_deref(), Some("Normal"));
    let deleted = |resource: &str| {
        h.metric(&format!(
            "portmapper_native_cleanup_deletions_total{{resource=\"{resource}\"}}"
        ))
        .unwrap_or(0.0)
    };
    assert_eq!(deleted("endpoints"), 1.0, "{}", h.metrics_text());
    // The native slice; the mirror slice is the garbage collector's, unless a pass whose cache
    // still held it got there first.
    assert!(
        (1.0..=2.0).contains(&deleted("endpointslice")),
        "{}",
        h.metrics_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forbidden_mirror_write_does_not_hold_back_the_native_cleanup_but_is_reported() {
    let h = Harness::start_on_emulator().await;
    native_world(&h).await;
    let mut pm = portmapping("web", "web");
    pm["spec"]["legacyEndpoints"] = json!(true);
    h.create(pm).await;
    eventually("our slice", T, || async {
        h.membership("web").await.get("web.http").cloned()
    })
    .await;
    // RBAC without patch on endpoints: every write of our mirror is forbidden.
    let rule = h.emu().inject(
        Rule::new(FaultAction::Status {
            code: 403,
            reason: None,
            message: Some("endpoints is forbidden".into()),
            retry_after_seconds: None,
        })
        .verbs(&["patch"])
        .resource("", "endpoints")
        .field_manager(portmapper_api::MANAGER),
    );
    drop_selector(&h).await;
    eventually("native and mirror slices deleted anyway", T, || async {
        (slice_names(&h).await == ["web.http"]).then_some(())
    })
    .await;
    let (status, reason, message) = eventually("ApplyFailed reported", T, || async {
        let pm = h.portmapping("web").await;
        pm.status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready" && c.reason == "ApplyFailed")
            .map(|c| (c.status, c.reason, c.message))
    })
    .await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "ApplyFailed"));
    assert!(message.contains("Endpoints default/web"), "{message}");
    // Once allowed, the mirror is adopted and the PortMapping is Ready again.
    assert!(h.emu().faults().remove(&rule));
    let eps: Api<Endpoints> = Api::namespaced(h.client.clone(), &h.ns);
    eventually("adopted and Ready", T, || async {
        let e = eps.get("web").await.ok()?;
        (e.labels().get("endpointslice.kubernetes.io/managed-by")? == "portmapper.dev"
            && is_ready(&h, "web").await)
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_endpoints_object_is_left_alone_while_the_native_cleanup_goes_on() {
    let h = Harness::start().await;
    native_world(&h).await;
    // Someone else's controller took the Endpoints object.
    let eps: Api<Endpoints> = Api::namespaced(h.client.clone(), &h.ns);
    eps.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"endpointslice.kubernetes.io/managed-by": "someone-else"}}})),
    )
    .await
    .unwrap();
    let before = eps.get("web").await.unwrap();
    let mut pm = portmapping("web", "web");
    pm["spec"]["legacyEndpoints"] = json!(true);
    h.create(pm).await;
    eventually("our slice", T, || async {
        h.membership("web").await.get("web.http").cloned()
    })
    .await;
    drop_selector(&h).await;
    eventually("the native slice is deleted", T, || async {
        (!slice_managers(&h).await.iter().any(|m| m == NATIVE)).then_some(())
    })
    .await;
    eventually("Ready", T, || async {
        is_ready(&h, "web").await.then_some(())
    })
    .await;
    // Passes later: one Warning, and the foreign object untouched.
    h.passes(2).await;
    let warnings = h.events("EndpointsCollision").await;
    assert_eq!(warnings.len(), 1, "warned once, not per pass");
    assert_eq!(warnings[0].type_.as_deref(), Some("Warning"));
    let after = eps.get("web").await.unwrap();
    assert_eq!(after.resource_version(), before.resource_version());
}
