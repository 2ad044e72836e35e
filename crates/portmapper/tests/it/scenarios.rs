//! The Go original's reconciler scenarios, adapted to the CRD, plus ours (conflicts, missing Services,
//! collisions, GC, leader handover).

use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use portmapper_api::PortMapping;
use serde_json::json;

use crate::harness::*;

const T: Duration = Duration::from_secs(15);

/// Waits until `pm` has condition `type_` with `status`.
async fn await_condition(h: &Harness, pm: &str, type_: &str, status: &str) {
    eventually(&format!("{pm} {type_}={status}"), T, || async {
        condition(h, pm, type_).await.filter(|c| c.0 == status)
    })
    .await;
}

async fn condition(h: &Harness, pm: &str, type_: &str) -> Option<(String, String, String)> {
    let pm = h.portmapping(pm).await;
    pm.status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason, c.message))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_service_reports_stalled_and_publishes_nothing() {
    let h = Harness::start().await;
    ready_pods(&h, "ghost", &[("pod-a", "http", "10.244.0.1")]).await;
    h.create(portmapping("ghost", "ghost")).await;
    let (status, reason, message) = eventually("Stalled", T, || async {
        condition(&h, "ghost", "Stalled")
            .await
            .filter(|c| c.0 == "True")
    })
    .await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "ServiceNotFound")
    );
    assert!(
        message.contains(&format!("{}/ghost does not exist", h.ns)),
        "{message}"
    );
    assert_eq!(condition(&h, "ghost", "Ready").await.unwrap().0, "False");
    assert!(h.slices("ghost").await.is_empty());

    // Creating the Service heals it without touching the PortMapping.
    h.create(service("ghost", &[("http", 8080)])).await;
    await_condition(&h, "ghost", "Ready", "True").await;
    assert_eq!(h.membership("ghost").await["ghost.http"], ["pod-a"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_service_withdraws_the_slices() {
    let h = Harness::start().await;
    h.create(service("web", &[("http", 8080)])).await;
    ready_pods(&h, "web", &[("pod-a", "http", "10.244.0.1")]).await;
    h.create(portmapping("web", "web")).await;
    eventually("slice", T, || async {
        (h.slices("web").await.len() == 1).then_some(())
    })
    .await;
    let services: Api<Service> = Api::namespaced(h.client.clone(), &h.ns);
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    eventually("slices withdrawn", T, || async {
        h.slices("web").await.is_empty().then_some(())
    })
    .await;
    // The slices go first, the status after them: wait for it (reading it at once raced).
    let (_, reason, _) = eventually("ServiceNotFound reported", T, || async {
        condition(&h, "web", "Stalled")
            .await
            .filter(|c| c.1 == "ServiceNotFound")
    })
    .await;
    assert_eq!(reason, "ServiceNotFound");
    let status = h.portmapping("web").await.status.unwrap();
    assert!(status.ports.is_empty(), "{:?}", status.ports);
    assert_eq!(status.endpoint_slices, Some(0));
    // The summary the operator stops setting is gone from the stored status, not left behind
    // (a status write that only merges, e.g. a merge patch without nulls, would keep it).
    assert_eq!(status.summary, None);
}

/// Issue 11 item 3: deleting the publisher hands the Service to the other PortMapping at once
/// (the index wakes it), not at its next resync (600 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_publisher_hands_the_service_to_the_other_portmapping_at_once() {
    let h = Harness::start_with(|s| s.resync = Duration::from_secs(600)).await;
    h.create(service("web", &[("http", 8080)])).await;
    ready_pods(&h, "web", &[("pod-a", "http", "10.244.0.1")]).await;
    h.create(portmapping("first", "web")).await;
    await_condition(&h, "first", "Ready", "True").await;
    h.create(portmapping("second", "web")).await;
    await_condition(&h, "second", "Conflict", "True").await;
    let pms: Api<PortMapping> = Api::namespaced(h.client.clone(), &h.ns);
    pms.delete("first", &DeleteParams::default()).await.unwrap();
    let second_uid = h.portmapping("second").await.uid().unwrap();
    eventually(
        "second publishes pod-a",
        Duration::from_secs(10),
        || async {
            let slices = h.slices("web").await;
            (!slices.is_empty()
                && slices.iter().all(|s| {
                    s.owner_references().first().map(|o| o.uid.as_str()) == Some(&second_uid)
                })
                && h.membership("web").await.values().next()? == &vec!["pod-a".to_string()])
                .then_some(())
        },
    )
    .await;
}

/// Issue 11 item 12: three pods with addresses EndpointSlices cannot carry give one Warning
/// Event that names all three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_rejected_address_event_names_every_rejected_pod() {
    let h = Harness::start().await;
    h.create(service("web", &[("http", 8080)])).await;
    ready_pods(&h, "web", &[("pod-ok", "http", "10.244.0.1")]).await;
    for (name, ip) in [
        ("pod-lo", "127.0.0.5"),
        ("pod-ll", "169.254.0.7"),
        ("pod-any", "0.0.0.0"),
    ] {
        ready_pods(&h, "web", &[(name, "http", ip)]).await;
    }
    h.create(portmapping("web", "web")).await;
    let events = eventually("PodAddressRejected", T, || async {
        let events = h.events("PodAddressRejected").await;
        (!events.is_empty()).then_some(events)
    })
    .await;
    assert_eq!(events.len(), 1, "{events:?}");
    let note = events[0].note.clone().unwrap_or_default();
    for pod in ["pod-lo", "pod-ll", "pod-any"] {
        assert!(note.contains(pod), "{pod} missing from {note:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dual_stack_service_gets_a_slice_set_per_family() {
    let h = Harness::start().await;
    let mut svc = service("ds", &[("http", 8080)]);
    svc["spec"]["ipFamilies"] = json!(["IPv4", "IPv6"]);
    svc["spec"]["ipFamilyPolicy"] = json!("RequireDualStack");
    h.create(svc).await;
    h.create(pod("pod-a", "ds", "http")).await;
    h.set_pod_status("pod-a", &["10.244.0.1", "fd00:10:244::1"], true)
        .await;
    h.create(portmapping("ds", "ds")).await;
    let slices = eventually("two families", T, || async {
        let s = h.slices("ds").await;
        (s.len() == 2).then_some(s)
    })
    .await;
    let summary: Vec<(String, String, String)> = slices
        .iter()
        .map(|s| {
            (
                s.name_any(),
                s.address_type.clone(),
                s.endpoints[0].addresses[0].clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                "ds.http".to_string(),
                "IPv4".to_string(),
                "10.244.0.1".to_string()
            ),
            (
                "ds.http.v6".to_string(),
                "IPv6".to_string(),
                "fd00:10:244::1".to_string()
            ),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_pools_are_chunked_and_shrink_back() {
    let h = Harness::start().await;
    h.create(service("big", &[("http", 8080)])).await;
    let names: Vec<String> = (1..=5).map(|i| format!("pod-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        h.create(pod(name, "big", "http")).await;
        h.set_pod_status(name, &[&format!("10.244.0.{}", i + 1)], true)
            .await;
    }
    let mut pm = portmapping("big", "big");
    // Chunking is the same under both groupings; PerPort admits no fewer than 10 per slice.
    pm["spec"]["sliceGrouping"] = json!("PerPortSet");
    pm["spec"]["maxEndpointsPerSlice"] = json!(2);
    h.create(pm).await;
    let slices = eventually("3 chunks", T, || async {
        let s = h.slices("big").await;
        (s.len() == 3 && s.iter().map(|s| s.endpoints.len()).sum::<usize>() == 5).then_some(s)
    })
    .await;
    assert!(slices.iter().all(|s| s.endpoints.len() <= 2));
    let ports = |s: &EndpointSlice| {
        s.ports
            .iter()
            .flatten()
            .flat_map(|p| p.name.clone())
            .collect::<Vec<_>>()
    };
    assert!(slices.iter().all(|s| ports(s) == ["http"]), "{slices:?}");
    // Two pods go unready: one chunk is retired.
    h.set_pod_status("pod-4", &["10.244.0.4"], false).await;
    h.set_pod_status("pod-5", &["10.244.0.5"], false).await;
    eventually("2 chunks", T, || async {
        let s = h.slices("big").await;
        (s.iter().map(|s| s.endpoints.len()).sum::<usize>() == 3 && s.len() == 2).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stray_and_tampered_slices_are_repaired_but_foreign_ones_are_left_alone() {
    let h = Harness::start().await;
    h.create(service("web", &[("http", 8080)])).await;
    ready_pods(
        &h,
        "web",
        &[
            ("pod-a", "http", "10.244.0.1"),
            ("pod-b", "http", "10.244.0.2"),
        ],
    )
    .await;
    h.create(portmapping("web", "web")).await;
    eventually("slice", T, || async {
        (h.membership("web").await.get("web.http").map(Vec::len) == Some(2)).then_some(())
    })
    .await;
    let slices: Api<EndpointSlice> = Api::namespaced(h.client.clone(), &h.ns);
    // Someone truncates our slice's endpoints.
    slices
        .patch(
            "web.http",
            &PatchParams::default(),
            &Patch::Merge(json!({"endpoints": []})),
        )
        .await
        .unwrap();
    // Someone else's slice for the same Service.
    let foreign: EndpointSlice = serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-handmade", "labels": {"kubernetes.io/service-name": "web", "endpointslice.kubernetes.io/managed-by": "someone-else"}},
        "addressType": "IPv4", "endpoints": [{"addresses": ["10.244.9.9"]}], "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }))
    .unwrap();
    slices
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    eventually("repaired", T, || async {
        (h.membership("web").await.get("web.http").map(Vec::len) == Some(2)).then_some(())
    })
    .await;
    h.passes(2).await;
    assert!(
        slices.get_opt("web-handmade").await.unwrap().is_some(),
        "foreign slice must survive"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn name_collision_with_a_foreign_slice_is_refused_and_reported() {
    let h = Harness::start().await;
    h.create(service("web", &[("http", 8080)])).await;
    ready_pods(&h, "web", &[("pod-a", "http", "10.244.0.1")]).await;
    let slices: Api<EndpointSlice> = Api::namespaced(h.client.clone(), &h.ns);
    let squatter: EndpointSlice = serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web.http", "labels": {"endpointslice.kubernetes.io/managed-by": "someone-else"}},
        "addressType": "IPv4", "endpoints": [{"addresses": ["10.244.9.9"]}],
    }))
    .unwrap();
    slices
        .create(&PostParams::default(), &squatter)
        .await
        .unwrap();
    h.create(portmapping("web", "web")).await;
    let (_, reason, message) = eventually("collision reported", T, || async {
        condition(&h, "web", "Stalled")
            .await
            .filter(|c| c.0 == "True")
    })
    .await;
    assert_eq!(reason, "NameCollision");
    assert!(
        message.contains("EndpointSlice web.http already exists (managed by someone-else)"),
        "{message}"
    );
    let kept = slices.get("web.http").await.unwrap();
    assert_eq!(
        kept.endpoints[0].addresses,
        ["10.244.9.9"],
        "the squatter is untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminating_pods_drain_then_drop() {
    let h = Harness::start().await;
    h.create(service("web", &[("http", 8080)])).await;
    ready_pods(&h, "web", &[("pod-a", "http", "10.244.0.1")]).await;
    // A finalizer keeps pod-a terminating after delete, as a graceful shutdown does.
    h.patch_pod(
        "pod-a",
        json!({"metadata": {"finalizers": ["example.com/hold"]}}),
    )
    .await;
    h.create(portmapping("web", "web")).await;
    eventually("published", T, || async {
        (h.membership("web").await.get("web.http")?.len() == 1).then_some(())
    })
    .await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(h.client.clone(), &h.ns);
    pods.delete("pod-a", &DeleteParams::default())
        .await
        .unwrap();
    let conditions = eventually("draining", T, || async {
        let s = h.slices("web").await.into_iter().next()?;
        let c = s.endpoints.first()?.conditions.clone()?;
        (c.terminating == Some(true)).then_some(c)
    })
    .await;
    assert_eq!(
        (conditions.ready, conditions.serving),
        (Some(false), Some(true))
    );

    // With terminatingEndpoints: Drop the draining pod leaves at once.
    let pms: Api<PortMapping> = Api::namespaced(h.client.clone(), &h.ns);
    pms.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"terminatingEndpoints": "Drop"}})),
    )
    .await
    .unwrap();
    eventually("dropped", T, || async {
        h.membership("web")
            .await
            .get("web.http")?
            .is_empty()
            .then_some(())
    })
    .await;
    // The new generation is observed.
    let pm = h.portmapping("web").await;
    eventually("observedGeneration", T, || async {
        let pm2 = h.portmapping("web").await;
        (pm2.status?.observed_generation == pm.metadata.generation).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zones_and_same_zone_hints_come_from_nodes() {
    let h = Harness::start().await;
    let mut svc = service("web", &[("http", 8080)]);
    svc["spec"]["trafficDistribution"] = json!("PreferClose");
    h.create(svc).await;
    zoned_pod(&h, "pod-a", "10.244.0.1").await;
    h.create(portmapping("web", "web")).await;
    let endpoint = eventually("zone and hints", T, || async {
        let s = h.slices("web").await.into_iter().next()?;
        let e = s.endpoints.first()?.clone();
        e.hints.is_some().then_some(e)
    })
    .await;
    assert_eq!(endpoint.zone.as_deref(), Some("zone-a"));
    assert_eq!(endpoint.node_name.as_deref(), Some(ZONED_NODE));
    let zones: Vec<String> = endpoint
        .hints
        .unwrap()
        .for_zones
        .unwrap()
        .into_iter()
        .map(|z| z.name)
        .collect();
    assert_eq!(zones, ["zone-a"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_value_and_selector_pick_the_pods() {
    let h = Harness::start().await;
    h.create(service("web", &[("http", 8080)])).await;
    // The pool is example.com/group=brokers (not the Service name), and tier=hot.
    for (name, group, tier, ip) in [
        ("pod-a", "brokers", "hot", "10.244.0.1"),
        ("pod-b", "brokers", "cold", "10.244.0.2"),
        ("pod-c", "web", "hot", "10.244.0.3"),
    ] {
        let mut p = pod(name, group, "http");
        p["metadata"]["labels"]["tier"] = json!(tier);
        h.create(p).await;
        h.set_pod_status(name, &[ip], true).await;
    }
    let mut pm = portmapping("web", "web");
    pm["spec"]["pods"]["value"] = json!("brokers");
    pm["spec"]["pods"]["selector"] =
        json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["hot"]}]});
    h.create(pm).await;
    eventually("only pod-a", T, || async {
        (h.membership("web").await.get("web.http")? == &vec!["pod-a".to_string()]).then_some(())
    })
    .await;
    // Relabelling pod-b into the selector adds it; the Service-named pod never joins.
    h.patch_pod("pod-b", json!({"metadata": {"labels": {"tier": "hot"}}}))
        .await;
    eventually("pod-a and pod-b", T, || async {
        (h.membership("web").await.get("web.http")?
            == &vec!["pod-a".to_string(), "pod-b".to_string()])
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_target_ports_resolve_per_pod_including_sidecars() {
    let h = Harness::start().await;
    let mut svc = service("web", &[("http", 80)]);
    svc["spec"]["ports"][0]["targetPort"] = json!("web");
    h.create(svc).await;
    // pod-a serves "web" on 8080 in its app container; pod-b on 9090 in a sidecar (restartable
    // init container); pod-c does not expose "web" at all.
    let mut a = pod("pod-a", "web", "http");
    a["spec"]["containers"][0]["ports"] = json!([{"name": "web", "containerPort": 8080}]);
    let mut b = pod("pod-b", "web", "http");
    b["spec"]["initContainers"] = json!([{"name": "proxy", "image": "proxy", "restartPolicy": "Always", "ports": [{"name": "web", "containerPort": 9090}]}]);
    let c = pod("pod-c", "web", "http");
    for (p, ip) in [(a, "10.244.0.1"), (b, "10.244.0.2"), (c, "10.244.0.3")] {
        let name = p["metadata"]["name"].as_str().unwrap().to_string();
        h.create(p).await;
        h.set_pod_status(&name, &[ip], true).await;
    }
    h.create(portmapping("web", "web")).await;
    let m = eventually("one slice per resolved target", T, || async {
        let m = h.membership("web").await;
        (m.len() == 2).then_some(m)
    })
    .await;
    assert_eq!(m["web.http.p8080"], ["pod-a"]);
    assert_eq!(m["web.http.p9090"], ["pod-b"]);
    let slices = h.slices("web").await;
    let ports: Vec<i32> = slices
        .iter()
        .map(|s| s.ports.as_ref().unwrap()[0].port.unwrap())
        .collect();
    assert_eq!(ports, [8080, 9090]);
}

/// A node in zone `zone-a` (shared by the tests that need a zone; [`NODE`] has none).
const ZONED_NODE: &str = "node-zone-a";

/// Pool pod `name` of group `web` (port http) on [`ZONED_NODE`], Ready at `ip`.
async fn zoned_pod(h: &Harness, name: &str, ip: &str) {
    let zone = [(
        "topology.kubernetes.io/zone".to_string(),
        "zone-a".to_string(),
    )];
    ensure_node(&h.client, ZONED_NODE, &zone.into_iter().collect()).await;
    let mut p = pod(name, "web", "http");
    p["spec"]["nodeName"] = json!(ZONED_NODE);
    h.create(p).await;
    h.set_pod_status(name, &[ip], true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_node_lookups_there_are_no_zones_or_hints_but_node_names_stay() {
    let h = Harness::start_with(|s| s.node_lookups = false).await;
    let mut svc = service("web", &[("http", 8080)]);
    svc["spec"]["trafficDistribution"] = json!("PreferClose");
    h.create(svc).await;
    zoned_pod(&h, "pod-a", "10.244.0.1").await;
    h.create(portmapping("web", "web")).await;
    let endpoint = eventually("published", T, || async {
        h.slices("web")
            .await
            .into_iter()
            .next()?
            .endpoints
            .first()
            .cloned()
    })
    .await;
    assert_eq!(endpoint.node_name.as_deref(), Some(ZONED_NODE));
    assert_eq!(endpoint.zone, None);
    assert_eq!(endpoint.hints, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefer_same_node_hints_are_not_reapplied_when_the_server_strips_for_nodes() {
    let h = Harness::start().await;
    let mut svc = service("web", &[("http", 8080)]);
    svc["spec"]["trafficDistribution"] = json!("PreferSameNode");
    h.create(svc).await;
    zoned_pod(&h, "pod-a", "10.244.0.1").await;
    h.create(portmapping("web", "web")).await;
    let hints = eventually("node and zone hints", T, || async {
        h.slices("web")
            .await
            .into_iter()
            .next()?
            .endpoints
            .first()?
            .hints
            .clone()
    })
    .await;
    let nodes: Vec<String> = hints
        .for_nodes
        .unwrap()
        .into_iter()
        .map(|n| n.name)
        .collect();
    let zones: Vec<String> = hints
        .for_zones
        .unwrap()
        .into_iter()
        .map(|z| z.name)
        .collect();
    assert_eq!(
        (nodes, zones),
        (vec![ZONED_NODE.to_string()], vec!["zone-a".to_string()])
    );

    // An API server with the PreferSameTrafficDistribution gate off drops forNodes; played here
    // by removing it.
    let slices: Api<EndpointSlice> = Api::namespaced(h.client.clone(), &h.ns);
    slices
        .patch(
            "web.http",
            &PatchParams::default(),
            &Patch::<serde_json::Value>::Json(
                serde_json::from_value(json!([
                    {"op": "remove", "path": "/endpoints/0/hints/forNodes"},
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    let stripped = slices.get("web.http").await.unwrap();
    let writes = h.operator_writes().await;
    // Passes later: no apply loop against the stripping server.
    h.passes(2).await;
    let after = slices.get("web.http").await.unwrap();
    assert_eq!(
        h.operator_writes().await,
        writes,
        "no write against stripped forNodes"
    );
    assert_eq!(after.resource_version(), stripped.resource_version());

    // Switching to PreferClose is a real change: zone hints only.
    let services: Api<Service> = Api::namespaced(h.client.clone(), &h.ns);
    services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"trafficDistribution": "PreferClose"}})),
        )
        .await
        .unwrap();
    eventually("zone hints only", T, || async {
        let e = h
            .slices("web")
            .await
            .into_iter()
            .next()?
            .endpoints
            .first()?
            .clone();
        let hints = e.hints?;
        (hints.for_nodes.is_none() && hints.for_zones.is_some()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_manager_on_our_own_slice_is_a_collision_not_a_takeover() {
    let h = Harness::start().await;
    h.create(service("web", &[("http", 8080)])).await;
    ready_pods(&h, "web", &[("pod-a", "http", "10.244.0.1")]).await;
    h.create(portmapping("web", "web")).await;
    // Published and reported so: a pass that ran before the Service reached the cache reported
    // it missing, and that status must not pass for the collision's.
    eventually("published and Ready", T, || async {
        (h.membership("web").await.get("web.http")?.len() == 1 && is_ready(&h, "web").await)
            .then_some(())
    })
    .await;
    // Someone relabels our slice for their controller (keeping our ownerReference).
    let slices: Api<EndpointSlice> = Api::namespaced(h.client.clone(), &h.ns);
    slices
        .patch(
            "web.http",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"endpointslice.kubernetes.io/managed-by": "someone-else"}}})),
        )
        .await
        .unwrap();
    let (_, reason, message) = eventually("collision reported", T, || async {
        condition(&h, "web", "Stalled")
            .await
            .filter(|c| c.0 == "True")
    })
    .await;
    assert_eq!(reason, "NameCollision");
    assert!(message.contains("managed by someone-else"), "{message}");
    h.passes(2).await;
    let kept = slices.get("web.http").await.unwrap();
    assert_eq!(
        kept.labels()["endpointslice.kubernetes.io/managed-by"],
        "someone-else",
        "never taken back by force"
    );
}
