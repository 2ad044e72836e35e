//! Planner behaviours, one test per rule.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Endpoints;
use k8s_openapi::api::discovery::v1::{EndpointHints, ForNode, ForZone};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_validation::IpFamily;
use portmapper_api::check::HttpGetCheck;
use portmapper_api::{Check, PortRule, TerminatingEndpoints, UnlistedPorts};
use portmapper_core::planner::migration::{self, NativeSlice, Step};
use portmapper_core::{
    CheckPosition, Deletion, NetworkKey, Plan, PlanError, PlanWarning, Verdict, WriteAction,
};

use crate::fixtures::*;

fn seed_world() -> World {
    World::new(port_mapping(&["http", "https"]), web_service(), seed_pods())
}

#[test]
fn publishes_one_slice_per_port_with_per_port_memberships() {
    let mut w = seed_world();
    let p = w.step();
    assert_eq!(
        actions(&p),
        vec![
            ("web.http".into(), "create"),
            ("web.https".into(), "create")
        ]
    );
    assert_eq!(
        pod_names(w.slice("web.http").unwrap()),
        vec!["pod-a", "pod-b", "pod-c"]
    );
    assert_eq!(
        pod_names(w.slice("web.https").unwrap()),
        vec!["pod-b", "pod-c", "pod-d"]
    );
    let http = w.slice("web.http").unwrap();
    let port = &http.ports.as_ref().unwrap()[0];
    assert_eq!(
        (port.name.as_deref(), port.port, port.protocol.as_deref()),
        (Some("http"), Some(8080), Some("TCP"))
    );
    assert_eq!(http.address_type, "IPv4");
    let c = http.endpoints[0].conditions.clone().unwrap();
    assert_eq!(
        (c.ready, c.serving, c.terminating),
        (Some(true), Some(true), Some(false))
    );
    assert_eq!(http.endpoints[0].node_name.as_deref(), Some("node-1"));
    assert_eq!(
        http.endpoints[0].hints, None,
        "no hints without trafficDistribution"
    );
}

#[test]
fn slices_carry_service_labels_managed_by_and_controller_owner() {
    let mut w = seed_world();
    w.step();
    let s = w.slice("web.http").unwrap();
    let labels = s.metadata.labels.clone().unwrap();
    assert_eq!(labels.get("app").map(String::as_str), Some("web"));
    assert_eq!(
        labels.get("kubernetes.io/service-name").map(String::as_str),
        Some("web")
    );
    assert_eq!(
        labels
            .get("endpointslice.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("portmapper.dev")
    );
    assert!(!labels.contains_key("service.kubernetes.io/headless"));
    assert_eq!(s.metadata.namespace.as_deref(), Some(NS));
    assert_eq!(
        s.metadata.owner_references.clone().unwrap(),
        vec![OwnerReference {
            api_version: "portmapper.dev/v1alpha1".into(),
            kind: "PortMapping".into(),
            name: "pm".into(),
            uid: "pm-uid".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]
    );
}

#[test]
fn converged_plan_issues_no_writes() {
    let mut w = seed_world();
    w.step();
    let again = w.plan();
    assert_eq!(again.writes(), 0, "{:?}", actions(&again));
    assert_eq!(
        actions(&again),
        vec![
            ("web.http".into(), "unchanged"),
            ("web.https".into(), "unchanged")
        ]
    );
}

#[test]
fn trigger_time_set_only_on_written_slices() {
    let mut w = seed_world();
    w.step();
    let first = w.now.to_string();
    let trigger = |w: &World, n: &str| {
        w.slice(n).unwrap().metadata.annotations.clone().unwrap()["endpoints.kubernetes.io/last-change-trigger-time"].clone()
    };
    assert_eq!(trigger(&w, "web.http"), first);
    w.now += k8s_openapi::jiff::SignedDuration::from_secs(60);
    w.pod_mut("pod-a")
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(PORTS_KEY.into(), "https".into());
    let p = w.step();
    assert_eq!(
        actions(&p),
        vec![
            ("web.http".into(), "update"),
            ("web.https".into(), "update")
        ]
    );
    assert_eq!(trigger(&w, "web.http"), w.now.to_string());
    w.now += k8s_openapi::jiff::SignedDuration::from_secs(60);
    w.pod_mut("pod-d")
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(PORTS_KEY.into(), "https,http".into());
    let p = w.step();
    assert_eq!(
        actions(&p),
        vec![
            ("web.http".into(), "update"),
            ("web.https".into(), "unchanged")
        ]
    );
    assert_ne!(
        trigger(&w, "web.https"),
        w.now.to_string(),
        "unchanged slice keeps its trigger time"
    );
}

#[test]
fn unready_pod_excluded_with_reason_naming_the_check() {
    let mut w = seed_world();
    w.pods[0] = PodBuilder::new("pod-a", &["10.0.0.1"])
        .ports("http")
        .unready()
        .build();
    let p = w.step();
    assert_eq!(
        pod_names(w.slice("web.http").unwrap()),
        vec!["pod-b", "pod-c"]
    );
    let http = &p.ports[0];
    assert_eq!(
        (
            http.ready,
            http.not_ready,
            http.candidates,
            http.excluded_total
        ),
        (2, 0, 4, 2)
    );
    assert_eq!(http.excluded[0].pod, "pod-a");
    assert_eq!(
        http.excluded[0].reason,
        "podReady: pod is not Ready (Ready=False)"
    );
    assert_eq!(
        http.excluded[1].reason,
        "portNames: annotation example.com/ports does not list \"http\""
    );
    assert_eq!(p.summary, "http 2/4, https 3/4");
}

#[test]
fn excluded_list_is_bounded_but_counted() {
    let pods: Vec<_> = (0..30)
        .map(|i| {
            PodBuilder::new(&format!("pod-{i:02}"), &[&format!("10.0.1.{i}")])
                .ports("")
                .build()
        })
        .collect();
    let w = World::new(port_mapping(&["http", "https"]), web_service(), pods);
    let p = w.plan();
    assert_eq!(p.ports[0].excluded.len(), 20);
    assert_eq!(p.ports[0].excluded_total, 30);
    assert_eq!(p.ports[0].candidates, 30);
}

#[test]
fn placeholder_slice_for_port_without_members() {
    let w = World::new(
        port_mapping(&["http", "https"]),
        web_service(),
        vec![
            PodBuilder::new("pod-a", &["10.0.0.1"])
                .ports("http")
                .build(),
        ],
    );
    let p = w.plan();
    let https = p
        .slices
        .iter()
        .find(|s| s.slice.metadata.name.as_deref() == Some("web.https"))
        .unwrap();
    assert!(https.slice.endpoints.is_empty());
    assert_eq!(https.slice.ports.as_ref().unwrap()[0].port, Some(8443));
}

#[test]
fn pods_outside_the_pool_are_ignored() {
    let mut pods = seed_pods();
    pods[0]
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(GROUP_KEY.into(), "other".into());
    let w = World::new(port_mapping(&["http", "https"]), web_service(), pods);
    let p = w.plan();
    assert_eq!(p.ports[0].candidates, 3);
    assert_eq!(pod_names(&p.slices[0].full()), vec!["pod-b", "pod-c"]);
}

#[test]
fn terminal_pods_and_pods_without_an_address_are_not_candidates() {
    let w = World::new(
        port_mapping(&["http"]),
        service(vec![sport("http", 80, None)]),
        vec![
            PodBuilder::new("done", &["10.0.0.1"])
                .ports("http")
                .phase("Succeeded")
                .build(),
            PodBuilder::new("failed", &["10.0.0.2"])
                .ports("http")
                .phase("Failed")
                .build(),
            PodBuilder::new("pending", &[]).ports("http").build(),
            PodBuilder::new("v6only", &["fd00::1"])
                .ports("http")
                .build(),
            PodBuilder::new("ok", &["10.0.0.5"]).ports("http").build(),
        ],
    );
    let p = w.plan();
    assert_eq!(pod_names(&p.slices[0].full()), vec!["ok"]);
    assert_eq!(p.ports[0].candidates, 1);
}

#[test]
fn addresses_the_api_rejects_are_left_out_with_a_warning() {
    let w = World::new(
        port_mapping(&["http"]),
        service(vec![sport("http", 80, None)]),
        vec![
            PodBuilder::new("lo", &["127.0.0.1"]).ports("http").build(),
            PodBuilder::new("ll", &["169.254.10.10"])
                .ports("http")
                .build(),
            PodBuilder::new("ok", &["10.0.0.5"]).ports("http").build(),
        ],
    );
    let p = w.plan();
    assert_eq!(pod_names(&p.slices[0].full()), vec!["ok"]);
    assert_eq!(p.ports[0].excluded_total, 2);
    assert!(p.ports[0].excluded[1].reason.contains("loopback"));
    assert!(
        p.warnings
            .iter()
            .any(|w| matches!(w, PlanWarning::RejectedPodAddress { pod, .. } if pod == "lo"))
    );
}

#[test]
fn dual_stack_publishes_a_v6_slice_set() {
    let mut svc = web_service();
    svc.spec.as_mut().unwrap().ip_families = Some(vec!["IPv6".into(), "IPv4".into()]);
    let mut w = World::new(
        port_mapping(&["http", "https"]),
        svc,
        vec![
            PodBuilder::new("pod-a", &["10.0.0.1", "fd00::1"])
                .ports("http")
                .build(),
            PodBuilder::new("pod-b", &["10.0.0.2"])
                .ports("http")
                .build(),
        ],
    );
    let p = w.step();
    assert_eq!(
        actions(&p).into_iter().map(|(n, _)| n).collect::<Vec<_>>(),
        vec!["web.http", "web.http.v6", "web.https", "web.https.v6"]
    );
    let v6 = w.slice("web.http.v6").unwrap();
    assert_eq!(v6.address_type, "IPv6");
    assert_eq!(
        v6.endpoints
            .iter()
            .map(|e| e.addresses[0].clone())
            .collect::<Vec<_>>(),
        vec!["fd00::1"]
    );
    assert_eq!(
        pod_names(w.slice("web.http").unwrap()),
        vec!["pod-a", "pod-b"]
    );
    // Dropping IPv6 deletes its slices.
    w.service.spec.as_mut().unwrap().ip_families = Some(vec!["IPv4".into()]);
    let p = w.plan();
    let mut deleted: Vec<String> = p.deletions.iter().map(|d| d.name.clone()).collect();
    deleted.sort();
    assert_eq!(deleted, vec!["web.http.v6", "web.https.v6"]);
    assert!(
        p.deletions.iter().all(|d| d.uid.is_some()),
        "deletions carry a UID precondition"
    );
}

#[test]
fn ipv4_mapped_and_uncanonical_pod_ips_are_published_canonically() {
    let mut svc = service(vec![sport("http", 80, None)]);
    svc.spec.as_mut().unwrap().ip_families = Some(vec!["IPv6".into()]);
    let w = World::new(
        port_mapping(&["http"]),
        svc,
        vec![
            PodBuilder::new("a", &["FD00:0:0::0001"])
                .ports("http")
                .build(),
        ],
    );
    let p = w.plan();
    assert_eq!(p.slices[0].full().endpoints[0].addresses, vec!["fd00::1"]);
}

#[test]
fn named_target_ports_group_by_resolved_number_including_sidecars() {
    let svc = service(vec![sport(
        "grpc",
        9000,
        Some(IntOrString::String("grpc".into())),
    )]);
    let w = World::new(
        port_mapping(&[]),
        svc,
        vec![
            PodBuilder::new("a", &["10.0.0.1"])
                .container_port("grpc", 9443)
                .build(),
            PodBuilder::new("b", &["10.0.0.2"])
                .container_port("grpc", 8443)
                .build(),
            PodBuilder::new("c", &["10.0.0.3"])
                .sidecar_port("grpc", 8443)
                .build(),
            PodBuilder::new("d", &["10.0.0.4"])
                .container_port("other", 1)
                .build(),
        ],
    );
    let p = w.plan();
    assert_eq!(
        actions(&p).into_iter().map(|(n, _)| n).collect::<Vec<_>>(),
        vec!["web.grpc.p8443", "web.grpc.p9443"]
    );
    assert_eq!(pod_names(&p.slices[0].full()), vec!["b", "c"]);
    assert_eq!(
        p.slices[0].slice.ports.as_ref().unwrap()[0].port,
        Some(8443)
    );
    assert_eq!(p.ports[0].candidates, 3, "d does not expose the port");
}

#[test]
fn named_target_placeholder_at_lowest_resolved_number() {
    let svc = service(vec![sport(
        "grpc",
        9000,
        Some(IntOrString::String("grpc".into())),
    )]);
    let w = World::new(
        port_mapping(&[]),
        svc,
        vec![
            PodBuilder::new("a", &["10.0.0.1"])
                .container_port("grpc", 9443)
                .unready()
                .build(),
            PodBuilder::new("b", &["10.0.0.2"])
                .container_port("grpc", 8443)
                .unready()
                .build(),
        ],
    );
    let p = w.plan();
    assert_eq!(actions(&p), vec![("web.grpc.p8443".into(), "create")]);
    assert!(p.slices[0].slice.endpoints.is_empty());
    let nobody = World::new(
        port_mapping(&[]),
        service(vec![sport(
            "grpc",
            9000,
            Some(IntOrString::String("grpc".into())),
        )]),
        vec![PodBuilder::new("x", &["10.0.0.9"]).build()],
    );
    assert!(
        nobody.plan().slices.is_empty(),
        "no pod resolves the name: no slice at all"
    );
}

#[test]
fn headless_service_without_ports_publishes_portless_slices() {
    let mut svc = service(vec![]);
    svc.spec.as_mut().unwrap().cluster_ip = Some("None".into());
    let w = World::new(
        port_mapping(&[]),
        svc,
        vec![
            PodBuilder::new("db-0", &["10.0.0.1"])
                .hostname("db-0", "web")
                .build(),
            PodBuilder::new("db-1", &["10.0.0.2"]).unready().build(),
        ],
    );
    let p = w.plan();
    assert_eq!(actions(&p), vec![("web".into(), "create")]);
    let s = p.slices[0].full();
    assert_eq!(s.ports, Some(vec![]));
    assert_eq!(pod_names(&s), vec!["db-0"]);
    assert_eq!(s.endpoints[0].hostname.as_deref(), Some("db-0"));
    assert_eq!(
        s.metadata
            .labels
            .as_ref()
            .unwrap()
            .get("service.kubernetes.io/headless")
            .map(String::as_str),
        Some("")
    );
    assert!(p.ports.is_empty());
}

#[test]
fn non_headless_service_without_ports_publishes_nothing() {
    let w = World::new(port_mapping(&[]), service(vec![]), seed_pods());
    assert!(w.plan().slices.is_empty());
}

#[test]
fn external_name_service_tears_everything_down() {
    let mut w = seed_world();
    w.pm.spec.legacy_endpoints = true;
    w.step();
    assert!(w.endpoints.is_some());
    w.service.spec.as_mut().unwrap().type_ = Some("ExternalName".into());
    let p = w.plan();
    assert!(p.slices.is_empty());
    assert_eq!(p.deletions.len(), 2);
    assert!(p.endpoints_deletion.is_some());
    assert_eq!(p.warnings, vec![PlanWarning::ExternalName]);
    // The executor deletes our Endpoints object as one of the plan's steps.
    assert!(
        matches!(&p.migration[..], [Step::DeleteEndpoints { name, native: false, .. }] if name == "web"),
        "{:?}",
        p.migration
    );
}

#[test]
fn the_selector_migration_and_stray_endpoints_are_steps_of_the_plan() {
    let mut w = seed_world();
    w.native = vec![NativeSlice {
        name: "web-abcde".into(),
        uid: "native-uid".into(),
        manager: migration::NATIVE_MANAGER.into(),
    }];
    // Ours, named after the Service the PortMapping named before (its serviceRef moved).
    w.owned_endpoints = vec![std::sync::Arc::new(Endpoints {
        metadata: ObjectMeta {
            name: Some("old-web".into()),
            namespace: Some(NS.into()),
            uid: Some("old-uid".into()),
            owner_references: Some(vec![portmapper_core::planner::objects::owner_reference(
                "pm", "pm-uid",
            )]),
            ..ObjectMeta::default()
        },
        subsets: None,
    })];
    let kinds = |p: &Plan| -> Vec<String> {
        p.migration
            .iter()
            .map(|s| match s {
                Step::DeleteNativeSlice { name, .. } => format!("delete slice {name}"),
                Step::DeleteEndpoints { name, .. } => format!("delete endpoints {name}"),
                Step::Warn { reason, .. } | Step::Normal { reason, .. } => reason.to_string(),
                other => format!("{other:?}"),
            })
            .collect()
    };
    // Publishing: the native leftovers go, then our stray Endpoints object.
    assert_eq!(
        kinds(&w.plan()),
        [
            "delete slice web-abcde",
            "NativeEndpointsCleanedUp",
            "delete endpoints old-web"
        ]
    );
    // Nothing ready to publish: the leftovers stay (no blackout), said once.
    w.pods.clear();
    assert_eq!(
        kinds(&w.plan()),
        ["NativeCleanupDeferred", "delete endpoints old-web"]
    );
    // While the Service has a selector the native controllers own its objects: no step for them.
    w.service.spec.as_mut().unwrap().selector =
        Some(BTreeMap::from([("app".into(), "web".into())]));
    assert_eq!(kinds(&w.plan()), ["delete endpoints old-web"]);
}

#[test]
fn terminating_pods_drain_as_not_ready_serving_terminating() {
    let mut pm = port_mapping(&[]);
    pm.spec.default_checks = Some(vec![]);
    let mut w = World::new(
        pm,
        service(vec![sport("http", 80, None)]),
        vec![PodBuilder::new("a", &["10.0.0.1"]).terminating().build()],
    );
    let p = w.step();
    let s = p.slices[0].full();
    let e = &s.endpoints[0];
    let c = e.conditions.clone().unwrap();
    assert_eq!(
        (c.ready, c.serving, c.terminating),
        (Some(false), Some(true), Some(true))
    );
    assert_eq!((p.ports[0].ready, p.ports[0].not_ready), (0, 1));
    w.pm.spec.terminating_endpoints = TerminatingEndpoints::Drop;
    let p = w.plan();
    assert!(p.slices[0].slice.endpoints.is_empty());
    assert_eq!(
        p.ports[0].excluded[0].reason,
        "pod is terminating and spec.terminatingEndpoints is Drop"
    );
}

#[test]
fn publish_not_ready_addresses_publishes_unready_pods_ready_but_keeps_backing_checks() {
    let mut w = seed_world();
    for p in &mut w.pods {
        *p = PodBuilder(p.clone()).unready().build();
    }
    w.pods[0] = PodBuilder(w.pods[0].clone()).terminating().build();
    w.service.spec.as_mut().unwrap().publish_not_ready_addresses = Some(true);
    let p = w.plan();
    assert_eq!(
        pod_names(&p.slices[0].full()),
        vec!["pod-a", "pod-b", "pod-c"],
        "portNames still decides"
    );
    assert!(
        p.slices[0]
            .full()
            .endpoints
            .iter()
            .all(|e| e.conditions.as_ref().unwrap().ready == Some(true))
    );
    w.pm.spec.publish_not_ready_addresses = Some(false);
    assert!(
        w.plan().slices[0].slice.endpoints.is_empty(),
        "the PortMapping override wins"
    );
}

fn http_probe_world() -> World {
    let mut pm = port_mapping(&[]);
    pm.spec.ports = vec![PortRule {
        name: "http".into(),
        checks: vec![Check {
            http_get: Some(HttpGetCheck::default()),
            ..Check::default()
        }],
    }];
    World::new(
        pm,
        service(vec![sport("http", 80, None)]),
        vec![
            PodBuilder::new("a", &["10.0.0.1"]).build(),
            PodBuilder::new("b", &["10.0.0.2"]).build(),
        ],
    )
}

fn probe(uid: &str, v: Verdict) -> (NetworkKey, Verdict) {
    (
        NetworkKey {
            pod_uid: uid.into(),
            port_name: "http".into(),
            family: IpFamily::V4,
            position: CheckPosition::default(),
        },
        v,
    )
}

#[test]
fn abstain_keeps_what_is_published_and_publishes_nothing_new() {
    let mut w = http_probe_world();
    let p = w.step();
    assert!(
        p.slices[0].slice.endpoints.is_empty(),
        "no results yet: nothing to keep"
    );
    assert!(
        p.ports[0].excluded[0]
            .reason
            .contains("httpGet: no result yet (abstained")
    );
    w.network = [
        probe("uid-a", Verdict::INCLUDE),
        probe("uid-b", Verdict::exclude("HTTP 503")),
    ]
    .into_iter()
    .collect();
    let p = w.step();
    assert_eq!(pod_names(w.slice("web.http").unwrap()), vec!["a"]);
    assert!(p.ports[0].kept.is_empty(), "included, not kept");
    assert_eq!(p.ports[0].kept_total, 0);
    // The prober loses its results (an operator restart): memberships freeze, and the status
    // does not list them as kept, so a restart does not rewrite it twice within a period.
    w.network = Default::default();
    let p = w.plan();
    assert_eq!(p.writes(), 0);
    assert_eq!(p.ports[0].ready, 1);
    assert!(p.ports[0].kept.is_empty(), "{:?}", p.ports[0].kept);
    // Probes that answer but cannot tell (no route from the operator): the status says which
    // published pod is only kept, and why.
    w.network = [probe(
        "uid-a",
        Verdict::abstain("no verdict yet (no route)"),
    )]
    .into_iter()
    .collect();
    let p = w.plan();
    assert_eq!(p.writes(), 0);
    assert_eq!(p.ports[0].ready, 1);
    assert_eq!(p.ports[0].kept.len(), 1);
    assert_eq!(p.ports[0].kept[0].pod, "a");
    assert_eq!(
        p.ports[0].kept[0].reason,
        "httpGet: no verdict yet (no route)"
    );
    assert_eq!(p.ports[0].kept_total, 1);
}

#[test]
fn network_results_are_per_family() {
    let mut w = http_probe_world();
    w.service.spec.as_mut().unwrap().ip_families = Some(vec!["IPv4".into(), "IPv6".into()]);
    w.pods = vec![PodBuilder::new("a", &["10.0.0.1", "fd00::1"]).build()];
    let mut v6 = probe("uid-a", Verdict::exclude("refused"));
    v6.0.family = IpFamily::V6;
    w.network = [probe("uid-a", Verdict::INCLUDE), v6].into_iter().collect();
    let p = w.plan();
    assert_eq!(pod_names(&p.slices[0].full()), vec!["a"]);
    assert!(p.slices[1].slice.endpoints.is_empty());
}

#[test]
fn unlisted_ports_can_publish_nothing() {
    let mut w = seed_world();
    w.pm.spec.ports.truncate(1);
    w.pm.spec.unlisted_ports = UnlistedPorts::PublishNothing;
    let p = w.plan();
    assert!(p.slices[1].slice.endpoints.is_empty());
    assert_eq!(
        p.slices[1].slice.metadata.name.as_deref(),
        Some("web.https")
    );
}

#[test]
fn zone_hints_for_ready_endpoints_only() {
    let mut w = seed_world();
    w.zones = BTreeMap::from([("node-1".to_owned(), "z1".to_owned())]);
    w.service.spec.as_mut().unwrap().traffic_distribution = Some("PreferClose".into());
    w.pods.push(
        PodBuilder::new("pod-e", &["10.0.0.5"])
            .ports("http")
            .terminating()
            .build(),
    );
    w.pm.spec.ports[0].checks = vec![Check::pod_ready()];
    let p = w.plan();
    let http = p.slices[0].full();
    for e in &http.endpoints {
        let ready = e.conditions.as_ref().unwrap().ready == Some(true);
        assert_eq!(e.zone.as_deref(), Some("z1"));
        let expect = ready.then(|| EndpointHints {
            for_zones: Some(vec![ForZone { name: "z1".into() }]),
            for_nodes: None,
        });
        assert_eq!(e.hints, expect);
    }
    assert!(
        http.endpoints
            .iter()
            .any(|e| e.conditions.as_ref().unwrap().ready == Some(false))
    );
}

#[test]
fn topology_mode_auto_disables_hints_with_a_warning() {
    let mut w = seed_world();
    w.zones = BTreeMap::from([("node-1".to_owned(), "z1".to_owned())]);
    w.service.spec.as_mut().unwrap().traffic_distribution = Some("PreferClose".into());
    w.service.metadata.annotations = Some(BTreeMap::from([(
        "service.kubernetes.io/topology-mode".to_owned(),
        "Auto".to_owned(),
    )]));
    let p = w.plan();
    assert!(
        p.slices[0]
            .full()
            .endpoints
            .iter()
            .all(|e| e.hints.is_none())
    );
    assert!(matches!(
        p.warnings[0],
        PlanWarning::TopologyModeAuto { .. }
    ));
}

#[test]
fn server_stripped_for_nodes_is_not_reapplied() {
    let mut w = seed_world();
    w.zones = BTreeMap::from([("node-1".to_owned(), "z1".to_owned())]);
    w.service.spec.as_mut().unwrap().traffic_distribution = Some("PreferSameNode".into());
    w.step();
    for s in &mut w.slices {
        for e in &mut s.endpoints {
            if let Some(h) = e.hints.as_mut() {
                h.for_nodes = None;
            }
        }
    }
    assert_eq!(w.plan().writes(), 0);
}

#[test]
fn chunks_at_max_endpoints_and_removal_rewrites_one_slice() {
    let pods: Vec<_> = (1..=5)
        .map(|i| {
            PodBuilder::new(&format!("p{i}"), &[&format!("10.0.0.{i}")])
                .ports("http")
                .build()
        })
        .collect();
    let mut pm = port_mapping(&["http"]);
    pm.spec.max_endpoints_per_slice = 2;
    let mut w = World::new(pm, service(vec![sport("http", 80, None)]), pods);
    let p = w.step();
    assert_eq!(
        actions(&p).into_iter().map(|(n, _)| n).collect::<Vec<_>>(),
        vec!["web.http", "web.http.2", "web.http.3"]
    );
    assert_eq!(pod_names(w.slice("web.http").unwrap()), vec!["p1", "p2"]);
    w.pods.remove(0);
    let p = w.step();
    assert_eq!(p.writes(), 1, "{:?}", actions(&p));
    assert_eq!(pod_names(w.slice("web.http").unwrap()), vec!["p2"]);
    // A new pod fills the slice being... the unchanged slice closest to full with room.
    w.pods
        .push(PodBuilder::new("p9", &["10.0.0.9"]).ports("http").build());
    let p = w.step();
    assert_eq!(p.writes(), 1, "{:?}", actions(&p));
    assert_eq!(w.plan().writes(), 0);
}

#[test]
fn emptied_chunk_is_deleted() {
    let pods: Vec<_> = (1..=3)
        .map(|i| {
            PodBuilder::new(&format!("p{i}"), &[&format!("10.0.0.{i}")])
                .ports("http")
                .build()
        })
        .collect();
    let mut pm = port_mapping(&["http"]);
    pm.spec.max_endpoints_per_slice = 2;
    let mut w = World::new(pm, service(vec![sport("http", 80, None)]), pods);
    w.step();
    w.pods.truncate(2);
    let p = w.step();
    assert_eq!(
        p.deletions
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>(),
        vec!["web.http.2"]
    );
    assert_eq!(p.writes(), 1);
}

#[test]
fn tampered_slice_is_repaired() {
    let mut w = seed_world();
    w.step();
    w.slices[0].endpoints.pop();
    w.slices[1]
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove("endpointslice.kubernetes.io/managed-by");
    let p = w.plan();
    assert_eq!(
        actions(&p),
        vec![
            ("web.http".into(), "update"),
            ("web.https".into(), "update")
        ]
    );
    w.apply(&p);
    assert_eq!(w.plan().writes(), 0);
}

#[test]
fn foreign_labels_on_a_slice_are_tolerated() {
    let mut w = seed_world();
    w.step();
    w.slices[0]
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("team".into(), "x".into());
    assert_eq!(w.plan().writes(), 0);
}

#[test]
fn address_type_change_deletes_and_republishes_under_a_free_name() {
    let mut w = seed_world();
    w.step();
    w.slices[0].address_type = "IPv6".into();
    let p = w.plan();
    assert_eq!(
        p.deletions
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>(),
        vec!["web.http"]
    );
    // addressType is immutable, so the name cannot be reused in this pass; the endpoints move
    // to the next chunk name at once instead of going dark until the next pass.
    assert_eq!(actions(&p)[0], ("web.http.2".into(), "create"));
    assert_eq!(
        pod_names(&p.slices[0].full()),
        vec!["pod-a", "pod-b", "pod-c"]
    );
    w.apply(&p);
    assert_eq!(w.plan().writes(), 0);
}

#[test]
fn stray_owned_slices_are_deleted_and_foreign_ones_left_alone() {
    let mut w = seed_world();
    w.step();
    let mut stray = w.slices[0].clone();
    stray.metadata.name = Some("web.gone".into());
    stray.metadata.uid = Some("stray-uid".into());
    let mut foreign = w.slices[0].clone();
    foreign.metadata.name = Some("web.http.2".into());
    foreign.metadata.owner_references.as_mut().unwrap()[0].uid = "other-pm".into();
    w.slices.push(stray);
    w.slices.push(foreign);
    let p = w.plan();
    assert_eq!(
        p.deletions,
        vec![Deletion {
            name: "web.gone".into(),
            uid: Some("stray-uid".into())
        }]
    );
    // Not wanted by the plan (one chunk), so neither written nor a collision.
    assert!(
        p.slices
            .iter()
            .all(|s| s.slice.metadata.name.as_deref() != Some("web.http.2"))
    );
    assert!(p.collisions.is_empty());
}

#[test]
fn a_name_held_by_others_is_not_created_but_reported_and_freed_later() {
    let mut w = seed_world();
    let squatter = portmapper_core::HeldName {
        uid: Some("sq-1".into()),
        holder: "managed by someone-else".into(),
    };
    w.held.insert("web.http".into(), squatter.clone());
    // A name of another Service's prefix is not ours to want.
    w.held.insert("webx.http".into(), squatter.clone());
    let p = w.step();
    assert_eq!(actions(&p), vec![("web.https".into(), "create")]);
    assert_eq!(
        p.collisions,
        vec![portmapper_core::NameCollision {
            name: "web.http".into(),
            held: squatter
        }]
    );
    assert_eq!(
        p.collisions[0].to_string(),
        "EndpointSlice web.http already exists (managed by someone-else)"
    );
    w.held.clear();
    let p = w.step();
    assert!(p.collisions.is_empty());
    assert_eq!(
        actions(&p),
        vec![
            ("web.http".into(), "create"),
            ("web.https".into(), "unchanged")
        ]
    );
}

#[test]
fn a_slice_of_another_owner_at_a_wanted_name_is_a_collision_not_a_write() {
    let mut w = seed_world();
    w.step();
    // Another PortMapping's slice where ours was: the plan wants the name but may not take it.
    w.slices[0].metadata.owner_references.as_mut().unwrap()[0].uid = "other-pm".into();
    w.slices[0].metadata.owner_references.as_mut().unwrap()[0].name = "other".into();
    assert_eq!(w.slices[0].metadata.name.as_deref(), Some("web.http"));
    let p = w.plan();
    assert_eq!(actions(&p), vec![("web.https".into(), "unchanged")]);
    assert!(p.deletions.is_empty(), "never deleted either");
    assert_eq!(
        p.collisions
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        vec!["EndpointSlice web.http already exists (owned by PortMapping other)"]
    );
}

#[test]
fn legacy_endpoints_group_addresses_by_port_set() {
    let mut w = seed_world();
    w.pm.spec.legacy_endpoints = true;
    let p = w.step();
    let e = &p.endpoints.as_ref().unwrap().endpoints;
    assert_eq!(p.endpoints.as_ref().unwrap().action, WriteAction::Create);
    assert_eq!(e.metadata.name.as_deref(), Some("web"));
    let labels = e.metadata.labels.clone().unwrap();
    assert_eq!(
        labels
            .get("endpointslice.kubernetes.io/skip-mirror")
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(
        labels
            .get("endpointslice.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("portmapper.dev")
    );
    assert_eq!(labels.get("app").map(String::as_str), Some("web"));
    let subsets = e.subsets.clone().unwrap();
    let shape: Vec<(Vec<String>, Vec<String>)> = subsets
        .iter()
        .map(|s| {
            (
                s.ports
                    .iter()
                    .flatten()
                    .map(|p| p.name.clone().unwrap())
                    .collect(),
                s.addresses.iter().flatten().map(|a| a.ip.clone()).collect(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        vec![
            (vec!["http".into()], vec!["10.0.0.1".into()]),
            (
                vec!["http".into(), "https".into()],
                vec!["10.0.0.2".into(), "10.0.0.3".into()]
            ),
            (vec!["https".into()], vec!["10.0.0.4".into()]),
        ]
    );
    assert_eq!(w.plan().writes(), 0, "legacy Endpoints are write-quiet too");
}

#[test]
fn legacy_endpoints_primary_family_only_and_drop_draining_pods() {
    let mut w = seed_world();
    w.pm.spec.legacy_endpoints = true;
    w.service.spec.as_mut().unwrap().ip_families = Some(vec!["IPv6".into(), "IPv4".into()]);
    w.pods = vec![
        PodBuilder::new("a", &["10.0.0.1", "fd00::1"])
            .ports("http")
            .build(),
        PodBuilder::new("b", &["10.0.0.2"]).ports("http").build(),
    ];
    let p = w.plan();
    let subsets = p.endpoints.unwrap().endpoints.subsets.unwrap();
    assert_eq!(subsets.len(), 1);
    assert_eq!(
        subsets[0]
            .addresses
            .as_ref()
            .unwrap()
            .iter()
            .map(|a| a.ip.as_str())
            .collect::<Vec<_>>(),
        vec!["fd00::1"]
    );
}

#[test]
fn legacy_endpoints_truncate_at_1000_ready_first_with_annotation() {
    let pods: Vec<_> = (0..1005)
        .map(|i| {
            PodBuilder::new(
                &format!("p{i}"),
                &[&format!("10.1.{}.{}", i / 250, i % 250 + 1)],
            )
            .ports("http")
            .build()
        })
        .collect();
    let mut pm = port_mapping(&["http"]);
    pm.spec.legacy_endpoints = true;
    let w = World::new(pm, service(vec![sport("http", 80, None)]), pods);
    let p = w.plan();
    let e = p.endpoints.unwrap().endpoints;
    assert_eq!(
        e.subsets.unwrap()[0].addresses.as_ref().unwrap().len(),
        1000
    );
    assert_eq!(
        e.metadata
            .annotations
            .unwrap()
            .get("endpoints.kubernetes.io/over-capacity")
            .map(String::as_str),
        Some("truncated")
    );
    assert!(
        p.warnings
            .contains(&PlanWarning::LegacyEndpointsTruncated { total: 1005 })
    );
}

#[test]
fn legacy_endpoints_off_deletes_only_an_owned_object() {
    let mut w = seed_world();
    w.pm.spec.legacy_endpoints = true;
    w.step();
    w.pm.spec.legacy_endpoints = false;
    let p = w.plan();
    assert_eq!(
        p.endpoints_deletion,
        Some(Deletion {
            name: "web".into(),
            uid: Some("ep-uid".into())
        })
    );
    // Labels stripped but still controlled by us: ours (one classifier; the migration steps
    // repair such an object too), so it goes.
    w.endpoints.as_mut().unwrap().metadata.labels = None;
    assert_eq!(
        w.plan().endpoints_deletion.map(|d| d.name),
        Some("web".into())
    );
    w.endpoints.as_mut().unwrap().metadata.owner_references = None;
    assert_eq!(
        w.plan().endpoints_deletion,
        None,
        "a native or hand-written object is not ours"
    );
}

#[test]
fn legacy_endpoints_owned_by_someone_else_are_left_alone() {
    let mut w = seed_world();
    w.pm.spec.legacy_endpoints = true;
    w.step();
    w.endpoints
        .as_mut()
        .unwrap()
        .metadata
        .owner_references
        .as_mut()
        .unwrap()[0]
        .uid = "svc-uid".into();
    let p = w.plan();
    assert!(p.endpoints.is_none());
    assert!(p.warnings.contains(&PlanWarning::ForeignEndpoints));
}

#[test]
fn missing_uid_or_wrong_service_is_an_error() {
    let mut w = seed_world();
    w.pm.metadata.uid = None;
    assert_eq!(
        w.try_plan(),
        Err(PlanError::MissingMetadata("metadata.uid"))
    );
    w.pm.metadata.uid = Some("u".into());
    w.service.metadata.name = Some("other".into());
    assert!(matches!(
        w.try_plan(),
        Err(PlanError::ServiceMismatch { .. })
    ));
}

#[test]
fn invalid_pool_selector_is_an_error_not_an_empty_pool() {
    let mut w = seed_world();
    w.pm.spec.pods.selector = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: "a".into(),
                    operator: "Near".into(),
                    values: None,
                },
            ]),
        },
    );
    let r = w.try_plan();
    assert!(matches!(r, Err(PlanError::Selector(_))));
}

#[test]
fn unnamed_single_port_uses_its_number_in_the_name() {
    let mut svc = service(vec![sport("", 8080, Some(IntOrString::Int(80)))]);
    svc.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].name = None;
    let w = World::new(port_mapping(&[]), svc, seed_pods());
    let p = w.plan();
    assert_eq!(actions(&p), vec![("web.8080".into(), "create")]);
    assert_eq!(p.slices[0].slice.ports.as_ref().unwrap()[0].port, Some(80));
    assert_eq!(p.summary, "8080 4/4");
}

#[test]
fn host_network_pods_sharing_an_address_are_separate_endpoints() {
    let w = World::new(
        port_mapping(&["http"]),
        service(vec![sport("http", 80, None)]),
        vec![
            PodBuilder::new("a", &["10.0.0.7"]).ports("http").build(),
            PodBuilder::new("b", &["10.0.0.7"]).ports("http").build(),
        ],
    );
    let p = w.plan();
    assert_eq!(pod_names(&p.slices[0].full()), vec!["a", "b"]);
    let mut w = w;
    w.apply(&p);
    assert_eq!(w.plan().writes(), 0);
}

#[test]
fn prefer_same_node_hints_node_and_zone_on_ready_endpoints() {
    let mut w = seed_world();
    w.zones = BTreeMap::from([("node-1".to_owned(), "z1".to_owned())]);
    w.service.spec.as_mut().unwrap().traffic_distribution = Some("PreferSameNode".into());
    let p = w.plan();
    let hints = p.slices[0].full().endpoints[0].hints.clone().unwrap();
    assert_eq!(hints.for_nodes.unwrap()[0].name, "node-1");
    assert_eq!(hints.for_zones.unwrap()[0].name, "z1");
}

#[test]
fn headless_service_without_ports_is_dual_stack_aware() {
    let mut svc = service(vec![]);
    let spec = svc.spec.as_mut().unwrap();
    spec.cluster_ip = Some("None".into());
    spec.ip_families = Some(vec!["IPv4".into(), "IPv6".into()]);
    let mut pm = port_mapping(&[]);
    pm.spec.max_endpoints_per_slice = 1;
    let w = World::new(
        pm,
        svc,
        vec![
            PodBuilder::new("a", &["10.0.0.1", "fd00::1"]).build(),
            PodBuilder::new("b", &["10.0.0.2", "fd00::2"]).build(),
        ],
    );
    let names: Vec<String> = actions(&w.plan()).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, vec!["web", "web.2", "web.v6", "web.v6.2"]);
}

#[test]
fn legacy_endpoints_split_subsets_when_named_ports_diverge() {
    let mut pm = port_mapping(&[]);
    pm.spec.legacy_endpoints = true;
    let svc = service(vec![sport(
        "grpc",
        9000,
        Some(IntOrString::String("grpc".into())),
    )]);
    let w = World::new(
        pm,
        svc,
        vec![
            PodBuilder::new("a", &["10.0.0.1"])
                .container_port("grpc", 9443)
                .build(),
            PodBuilder::new("b", &["10.0.0.2"])
                .container_port("grpc", 8443)
                .build(),
        ],
    );
    let e = w.plan().endpoints.unwrap().endpoints;
    let subsets = e.subsets.unwrap();
    let shape: Vec<(i32, String)> = subsets
        .iter()
        .map(|s| {
            (
                s.ports.as_ref().unwrap()[0].port,
                s.addresses.as_ref().unwrap()[0].ip.clone(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        vec![(8443, "10.0.0.2".into()), (9443, "10.0.0.1".into())]
    );
    let owner = &e.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("PortMapping", Some(true))
    );
    assert!(
        !e.metadata
            .labels
            .unwrap()
            .contains_key("kubernetes.io/service-name")
    );
}

#[test]
fn legacy_endpoints_omit_draining_pods_and_headless_gets_the_marker() {
    let mut pm = port_mapping(&["http"]);
    pm.spec.legacy_endpoints = true;
    pm.spec.ports[0].checks = vec![];
    let mut svc = service(vec![sport("http", 80, None)]);
    svc.spec.as_mut().unwrap().cluster_ip = Some("None".into());
    let w = World::new(
        pm,
        svc,
        vec![
            PodBuilder::new("a", &["10.0.0.1"]).build(),
            PodBuilder::new("b", &["10.0.0.2"]).terminating().build(),
        ],
    );
    let p = w.plan();
    assert_eq!(
        pod_names(&p.slices[0].full()),
        vec!["a", "b"],
        "the slice drains b"
    );
    let e = p.endpoints.unwrap().endpoints;
    let subsets = e.subsets.unwrap();
    assert_eq!(
        subsets[0].addresses.as_ref().unwrap().len(),
        1,
        "Endpoints drop it"
    );
    assert_eq!(
        e.metadata
            .labels
            .unwrap()
            .get("service.kubernetes.io/headless")
            .map(String::as_str),
        Some("")
    );
}

#[test]
fn legacy_endpoints_with_no_member_have_no_subsets() {
    let mut pm = port_mapping(&["http"]);
    pm.spec.legacy_endpoints = true;
    let w = World::new(pm, service(vec![sport("http", 80, None)]), vec![]);
    let p = w.plan();
    assert_eq!(p.endpoints.unwrap().endpoints.subsets, None);
}

#[test]
fn lowering_max_endpoints_per_slice_spreads_without_touching_other_slices_needlessly() {
    let pods: Vec<_> = (1..=4)
        .map(|i| {
            PodBuilder::new(&format!("p{i}"), &[&format!("10.0.0.{i}")])
                .ports("http")
                .build()
        })
        .collect();
    let mut w = World::new(
        port_mapping(&["http"]),
        service(vec![sport("http", 80, None)]),
        pods,
    );
    w.step();
    w.pm.spec.max_endpoints_per_slice = 3;
    let p = w.step();
    assert_eq!(
        actions(&p),
        vec![
            ("web.http".into(), "update"),
            ("web.http.2".into(), "create")
        ]
    );
    assert_eq!(w.plan().writes(), 0);
}

#[test]
fn no_creates_while_the_portmapping_is_being_deleted() {
    let mut w = seed_world();
    w.step();
    w.pm.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(w.now));
    w.pods[0]
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(PORTS_KEY.into(), "https".into());
    w.pm.spec.max_endpoints_per_slice = 2;
    let p = w.plan();
    assert!(
        p.slices.iter().all(|s| s.action != WriteAction::Create),
        "{:?}",
        actions(&p)
    );
    assert!(
        p.slices.iter().any(|s| s.action.is_write()),
        "existing slices still follow the pods"
    );
}

/// One legacy subset: its ports as (name, port, protocol) and its addresses as (ip, pod name).
type SubsetShape = (Vec<(String, i32, String)>, Vec<(String, String)>);

/// A tampering of a stored Endpoints object.
type Tamper = Box<dyn Fn(&mut Endpoints)>;

/// A legacy Endpoints object as one [`SubsetShape`] per subset, in object order.
fn legacy_shape(e: &Endpoints) -> Vec<SubsetShape> {
    e.subsets
        .iter()
        .flatten()
        .map(|s| {
            (
                s.ports
                    .iter()
                    .flatten()
                    .map(|p| {
                        (
                            p.name.clone().unwrap_or_default(),
                            p.port,
                            p.protocol.clone().unwrap_or_default(),
                        )
                    })
                    .collect(),
                s.addresses
                    .iter()
                    .flatten()
                    .map(|a| {
                        (
                            a.ip.clone(),
                            a.target_ref
                                .as_ref()
                                .and_then(|r| r.name.clone())
                                .unwrap_or_default(),
                        )
                    })
                    .collect(),
            )
        })
        .collect()
}

fn legacy_label<'a>(e: &'a Endpoints, key: &str) -> Option<&'a str> {
    e.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

fn s(v: &str) -> String {
    v.to_owned()
}

#[test]
fn legacy_endpoints_carry_target_ref_node_and_port_protocol() {
    let mut http = sport("http", 8080, Some(IntOrString::Int(80)));
    http.app_protocol = Some("kubernetes.io/h2c".into());
    let mut dns = sport("dns", 53, None);
    dns.protocol = Some("UDP".into());
    let mut pm = port_mapping(&["http", "dns"]);
    pm.spec.legacy_endpoints = true;
    let mut b = PodBuilder::new("b", &["10.0.0.2"]).ports("http").build();
    b.spec.as_mut().unwrap().node_name = Some("node-2".into());
    let w = World::new(
        pm,
        service(vec![http, dns]),
        vec![
            PodBuilder::new("a", &["10.0.0.1"])
                .ports("http,dns")
                .hostname("a", "web")
                .build(),
            b,
        ],
    );
    let p = w.plan();
    let e = &p.endpoints.as_ref().unwrap().endpoints;
    // Subsets by exact port set; ports carry the *target* number, the protocol and appProtocol.
    assert_eq!(
        legacy_shape(e),
        vec![
            (
                vec![(s("dns"), 53, s("UDP")), (s("http"), 80, s("TCP"))],
                vec![(s("10.0.0.1"), s("a"))]
            ),
            (
                vec![(s("http"), 80, s("TCP"))],
                vec![(s("10.0.0.2"), s("b"))]
            ),
        ]
    );
    let subsets = e.subsets.as_ref().unwrap();
    let app: Vec<Option<&str>> = subsets[0]
        .ports
        .iter()
        .flatten()
        .map(|p| p.app_protocol.as_deref())
        .collect();
    assert_eq!(app, vec![None, Some("kubernetes.io/h2c")]);
    let a = &subsets[0].addresses.as_ref().unwrap()[0];
    assert_eq!(a.hostname.as_deref(), Some("a"), "subdomain is the Service");
    assert_eq!(a.node_name.as_deref(), Some("node-1"));
    let r = a.target_ref.clone().unwrap();
    assert_eq!(
        (
            r.kind.as_deref(),
            r.namespace.as_deref(),
            r.name.as_deref(),
            r.uid.as_deref()
        ),
        (Some("Pod"), Some(NS), Some("a"), Some("uid-a"))
    );
    let b = &subsets[1].addresses.as_ref().unwrap()[0];
    assert_eq!(b.hostname, None, "no subdomain, no hostname");
    assert_eq!(b.node_name.as_deref(), Some("node-2"));
    assert_eq!(
        b.target_ref.as_ref().and_then(|r| r.uid.as_deref()),
        Some("uid-b")
    );
    assert!(
        subsets.iter().all(|s| s.not_ready_addresses.is_none()),
        "members only: never notReadyAddresses"
    );
}

#[test]
fn legacy_endpoints_follow_service_label_changes() {
    let mut w = seed_world();
    w.pm.spec.legacy_endpoints = true;
    w.step();
    let labels = w.service.metadata.labels.as_mut().unwrap();
    labels.insert("app".into(), "shop".into());
    labels.insert("team".into(), "payments".into());
    let p = w.plan();
    let planned = p.endpoints.as_ref().unwrap();
    assert_eq!(
        planned.action,
        WriteAction::Update {
            resource_version: Some("1".into())
        }
    );
    assert_eq!(legacy_label(&planned.endpoints, "app"), Some("shop"));
    assert_eq!(legacy_label(&planned.endpoints, "team"), Some("payments"));
    assert_eq!(
        legacy_label(
            &planned.endpoints,
            "endpointslice.kubernetes.io/skip-mirror"
        ),
        Some("true")
    );
    assert_eq!(
        legacy_shape(&planned.endpoints).len(),
        3,
        "content unchanged"
    );
    w.apply(&p);
    assert_eq!(w.plan().writes(), 0);
    // A label removed from the Service lingers on the object until its next write, as in the
    // seed (extra labels are tolerated, so removal alone is no drift).
    w.service.metadata.labels.as_mut().unwrap().remove("team");
    let p = w.plan();
    assert_eq!(p.writes(), 0, "{:?}", p.endpoints.map(|e| e.action));
    assert_eq!(
        legacy_label(w.endpoints.as_ref().unwrap(), "team"),
        Some("payments")
    );
}

#[test]
fn legacy_off_never_plans_endpoints() {
    let mut w = seed_world();
    assert!(!w.pm.spec.legacy_endpoints);
    let mut plans = vec![w.step()];
    w.pod_mut("pod-a")
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(PORTS_KEY.into(), "http,https".into());
    plans.push(w.step());
    w.pods.remove(1);
    plans.push(w.step());
    w.service.spec.as_mut().unwrap().publish_not_ready_addresses = Some(true);
    plans.push(w.step());
    // An Endpoints object that is not ours (native, or another manager's) is never touched.
    let mut native = Endpoints::default();
    native.metadata.name = Some("web".into());
    native.metadata.uid = Some("native-uid".into());
    w.endpoints = Some(native.clone());
    plans.push(w.step());
    native.metadata.labels = Some(BTreeMap::from([(
        s("endpointslice.kubernetes.io/managed-by"),
        s("someone-else"),
    )]));
    w.endpoints = Some(native);
    plans.push(w.step());
    for (i, p) in plans.iter().enumerate() {
        assert_eq!(p.endpoints, None, "plan {i}");
        assert_eq!(p.endpoints_deletion, None, "plan {i}");
    }
    assert_eq!(
        w.endpoints.unwrap().metadata.uid.as_deref(),
        Some("native-uid")
    );
}

#[test]
fn legacy_endpoints_keep_draining_pods_ready_under_publish_not_ready() {
    let mut pm = port_mapping(&["http"]);
    pm.spec.legacy_endpoints = true;
    let mut w = World::new(
        pm,
        service(vec![sport("http", 80, None)]),
        vec![
            PodBuilder::new("a", &["10.0.0.1"]).ports("http").build(),
            PodBuilder::new("b", &["10.0.0.2"])
                .ports("http")
                .unready()
                .terminating()
                .build(),
        ],
    );
    w.service.spec.as_mut().unwrap().publish_not_ready_addresses = Some(true);
    let p = w.plan();
    let slice = p.slices[0].full();
    let b = slice
        .endpoints
        .iter()
        .find(|e| e.addresses[0] == "10.0.0.2")
        .unwrap();
    let c = b.conditions.clone().unwrap();
    assert_eq!(
        (c.ready, c.serving, c.terminating),
        (Some(true), Some(true), Some(true))
    );
    let e = p.endpoints.unwrap().endpoints;
    assert_eq!(
        legacy_shape(&e),
        vec![(
            vec![(s("http"), 80, s("TCP"))],
            vec![(s("10.0.0.1"), s("a")), (s("10.0.0.2"), s("b"))]
        )],
        "published ready, so kept as a ready address"
    );
    // Without publishNotReadyAddresses the draining pod is in neither list.
    w.service.spec.as_mut().unwrap().publish_not_ready_addresses = None;
    w.pods[1] = PodBuilder::new("b", &["10.0.0.2"])
        .ports("http")
        .terminating()
        .build();
    let p = w.plan();
    assert_eq!(
        pod_names(&p.slices[0].full()),
        vec!["a", "b"],
        "slice drains b"
    );
    let e = p.endpoints.unwrap().endpoints;
    assert_eq!(
        legacy_shape(&e),
        vec![(
            vec![(s("http"), 80, s("TCP"))],
            vec![(s("10.0.0.1"), s("a"))]
        )]
    );
    assert!(e.subsets.unwrap()[0].not_ready_addresses.is_none());
}

#[test]
fn legacy_endpoints_with_no_member_are_write_quiet_against_the_stored_form() {
    let mut pm = port_mapping(&["http"]);
    pm.spec.legacy_endpoints = true;
    let mut w = World::new(
        pm,
        service(vec![sport("http", 80, None)]),
        vec![PodBuilder::new("a", &["10.0.0.1"]).ports("http").build()],
    );
    w.step();
    assert_eq!(legacy_shape(w.endpoints.as_ref().unwrap()).len(), 1);
    // The only member goes: the object is rewritten without subsets.
    w.pods[0] = PodBuilder::new("a", &["10.0.0.1"])
        .ports("http")
        .unready()
        .build();
    let p = w.step();
    let planned = p.endpoints.as_ref().unwrap();
    assert!(matches!(planned.action, WriteAction::Update { .. }));
    assert_eq!(planned.endpoints.subsets, None);
    // The server may hand it back as `subsets: []`, with server-set fields: still converged.
    let stored = w.endpoints.as_mut().unwrap();
    stored.subsets = Some(vec![]);
    stored.metadata.resource_version = Some("7".into());
    stored.metadata.creation_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(w.now));
    let p = w.plan();
    assert_eq!(p.writes(), 0, "{:?}", p.endpoints.map(|e| e.action));
    // Born empty: the same.
    let mut pm = port_mapping(&["http"]);
    pm.spec.legacy_endpoints = true;
    let mut empty = World::new(pm, service(vec![sport("http", 80, None)]), vec![]);
    assert_eq!(empty.step().endpoints.unwrap().action, WriteAction::Create);
    empty.endpoints.as_mut().unwrap().subsets = Some(vec![]);
    assert_eq!(empty.plan().writes(), 0);
    empty.endpoints.as_mut().unwrap().subsets = None;
    assert_eq!(empty.plan().writes(), 0);
}

#[test]
fn legacy_endpoints_stored_target_ref_resource_version_is_not_drift() {
    let mut w = seed_world();
    w.pm.spec.legacy_endpoints = true;
    w.step();
    for s in w.endpoints.as_mut().unwrap().subsets.iter_mut().flatten() {
        for a in s.addresses.iter_mut().flatten() {
            if let Some(r) = a.target_ref.as_mut() {
                r.resource_version = Some("42".into());
            }
        }
    }
    assert_eq!(w.plan().writes(), 0);
}

#[test]
fn legacy_endpoints_tampering_is_repaired() {
    let mut w = seed_world();
    w.pm.spec.legacy_endpoints = true;
    w.step();
    let converged = w.endpoints.clone().unwrap();
    let expect = legacy_shape(&converged);
    let update = WriteAction::Update {
        resource_version: Some("1".into()),
    };
    let label = |e: &mut Endpoints, k: &str, v: Option<&str>| {
        let labels = e.metadata.labels.as_mut().unwrap();
        match v {
            Some(v) => labels.insert(k.into(), v.into()),
            None => labels.remove(k),
        };
    };
    // Each tampering on its own is drift.
    let tamperings: Vec<(&str, Tamper)> = vec![
        (
            "skip-mirror false",
            Box::new(move |e| {
                label(e, "endpointslice.kubernetes.io/skip-mirror", Some("false"));
            }),
        ),
        (
            "skip-mirror removed",
            Box::new(move |e| label(e, "endpointslice.kubernetes.io/skip-mirror", None)),
        ),
        (
            "managed-by removed",
            Box::new(move |e| label(e, "endpointslice.kubernetes.io/managed-by", None)),
        ),
        (
            "subset dropped",
            Box::new(|e| {
                e.subsets.as_mut().unwrap().remove(0);
            }),
        ),
        (
            "address dropped",
            Box::new(|e| {
                e.subsets.as_mut().unwrap()[1]
                    .addresses
                    .as_mut()
                    .unwrap()
                    .pop();
            }),
        ),
        (
            "port renumbered",
            Box::new(|e| {
                e.subsets.as_mut().unwrap()[2].ports.as_mut().unwrap()[0].port = 9999;
            }),
        ),
        (
            "owner removed",
            Box::new(|e| e.metadata.owner_references = None),
        ),
    ];
    for (what, tamper) in &tamperings {
        let mut live = converged.clone();
        tamper(&mut live);
        w.endpoints = Some(live);
        let p = w.plan();
        let planned = p.endpoints.as_ref().unwrap();
        assert_eq!(planned.action, update, "{what}");
        assert_eq!(legacy_shape(&planned.endpoints), expect, "{what}");
        assert_eq!(
            legacy_label(
                &planned.endpoints,
                "endpointslice.kubernetes.io/skip-mirror"
            ),
            Some("true"),
            "{what}"
        );
        assert_eq!(
            legacy_label(&planned.endpoints, "endpointslice.kubernetes.io/managed-by"),
            Some("portmapper.dev"),
            "{what}"
        );
        assert_eq!(p.writes(), 1, "{what}: only the Endpoints object");
    }
    // The Go original's case: truncated subsets and skip-mirror flipped together; repaired in one
    // pass, then quiet.
    let mut live = converged;
    (tamperings[0].1)(&mut live);
    (tamperings[3].1)(&mut live);
    w.endpoints = Some(live);
    let p = w.step();
    assert_eq!(p.endpoints.unwrap().action, update);
    assert_eq!(legacy_shape(w.endpoints.as_ref().unwrap()), expect);
    assert_eq!(w.plan().writes(), 0);
}

#[test]
fn legacy_endpoints_shared_ip_keeps_pods_separate_without_duplicated_ports() {
    let mut pm = port_mapping(&["http", "https"]);
    pm.spec.legacy_endpoints = true;
    let mut w = World::new(
        pm,
        web_service(),
        vec![
            PodBuilder::new("b", &["10.0.0.7"])
                .ports("http,https")
                .build(),
            PodBuilder::new("a", &["10.0.0.7"])
                .ports("http,https")
                .build(),
            PodBuilder::new("c", &["10.0.0.7"])
                .ports("http,https")
                .terminating()
                .build(),
        ],
    );
    let p = w.step();
    assert_eq!(
        pod_names(w.slice("web.http").unwrap()),
        vec!["a", "b", "c"],
        "the slice drains c"
    );
    let e = &p.endpoints.as_ref().unwrap().endpoints;
    assert_eq!(
        legacy_shape(e),
        vec![(
            vec![(s("http"), 8080, s("TCP")), (s("https"), 8443, s("TCP"))],
            vec![(s("10.0.0.7"), s("a")), (s("10.0.0.7"), s("b"))]
        )],
        "one entry per pod (sorted by pod UID), each port once, draining c omitted"
    );
    assert_eq!(w.plan().writes(), 0);
}

#[test]
fn legacy_endpoints_shared_ip_split_readiness() {
    // Two hostNetwork pods on one IP: a (ready) serves http, b (draining) serves https. The
    // draining pod's port must not be advertised through a's entry for the shared IP.
    let mut pm = port_mapping(&["http", "https"]);
    pm.spec.legacy_endpoints = true;
    let w = World::new(
        pm,
        web_service(),
        vec![
            PodBuilder::new("a", &["10.0.0.7"]).ports("http").build(),
            PodBuilder::new("b", &["10.0.0.7"])
                .ports("https")
                .terminating()
                .build(),
        ],
    );
    let p = w.plan();
    assert_eq!(pod_names(&p.slices[1].full()), vec!["b"], "https drains b");
    let e = p.endpoints.unwrap().endpoints;
    assert_eq!(
        legacy_shape(&e),
        vec![(
            vec![(s("http"), 8080, s("TCP"))],
            vec![(s("10.0.0.7"), s("a"))]
        )]
    );
}

#[test]
fn legacy_endpoints_split_subsets_when_named_ports_diverge_on_one_shared_ip() {
    let mut pm = port_mapping(&[]);
    pm.spec.legacy_endpoints = true;
    let svc = service(vec![sport(
        "web",
        80,
        Some(IntOrString::String("web".into())),
    )]);
    let w = World::new(
        pm,
        svc,
        vec![
            PodBuilder::new("a", &["10.0.0.7"])
                .container_port("web", 9090)
                .build(),
            PodBuilder::new("b", &["10.0.0.7"])
                .container_port("web", 8080)
                .build(),
        ],
    );
    let p = w.plan();
    assert_eq!(
        actions(&p).into_iter().map(|(n, _)| n).collect::<Vec<_>>(),
        vec!["web.web.p8080", "web.web.p9090"]
    );
    let e = p.endpoints.unwrap().endpoints;
    assert_eq!(
        legacy_shape(&e),
        vec![
            (
                vec![(s("web"), 8080, s("TCP"))],
                vec![(s("10.0.0.7"), s("b"))]
            ),
            (
                vec![(s("web"), 9090, s("TCP"))],
                vec![(s("10.0.0.7"), s("a"))]
            ),
        ]
    );
}

#[test]
fn legacy_off_deletes_an_ownerless_mirror_carrying_our_label() {
    // The `--cascade=orphan` leftover shape: our label, no owner reference.
    let mut w = seed_world();
    w.pm.spec.legacy_endpoints = true;
    w.step();
    w.endpoints.as_mut().unwrap().metadata.owner_references = None;
    w.pm.spec.legacy_endpoints = false;
    assert_eq!(
        w.plan().endpoints_deletion,
        Some(Deletion {
            name: "web".into(),
            uid: Some("ep-uid".into())
        })
    );
    // With the flag on, the same object is taken over in place: owner reference restored.
    w.pm.spec.legacy_endpoints = true;
    let p = w.plan();
    let planned = p.endpoints.unwrap();
    assert!(matches!(planned.action, WriteAction::Update { .. }));
    assert_eq!(
        planned.endpoints.metadata.owner_references.unwrap()[0].uid,
        "pm-uid"
    );
}

#[test]
fn mirror_of_an_older_portmapping_is_neither_written_nor_deleted() {
    // Our label, controlled by a PortMapping of the same name whose UID is gone (deleted and
    // re-created): foreign to this PortMapping, whatever the flag says.
    let mut w = seed_world();
    w.pm.spec.legacy_endpoints = true;
    w.step();
    w.pm.metadata.uid = Some("pm-uid-2".into());
    let p = w.plan();
    assert_eq!(p.endpoints, None);
    assert!(p.warnings.contains(&PlanWarning::ForeignEndpoints));
    w.pm.spec.legacy_endpoints = false;
    let p = w.plan();
    assert_eq!(p.endpoints_deletion, None);
    assert!(!p.warnings.contains(&PlanWarning::ForeignEndpoints));
}

#[test]
fn stale_over_capacity_annotation_is_drift() {
    let mut w = seed_world();
    w.pm.spec.legacy_endpoints = true;
    w.step();
    w.endpoints
        .as_mut()
        .unwrap()
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(
            "endpoints.kubernetes.io/over-capacity".into(),
            "truncated".into(),
        );
    let p = w.plan();
    let planned = p.endpoints.as_ref().unwrap();
    assert!(matches!(planned.action, WriteAction::Update { .. }));
    assert!(
        !planned
            .endpoints
            .metadata
            .annotations
            .as_ref()
            .unwrap()
            .contains_key("endpoints.kubernetes.io/over-capacity")
    );
    w.apply(&p);
    assert_eq!(w.plan().writes(), 0);
}

fn hints(zones: &[&str], nodes: &[&str]) -> Option<EndpointHints> {
    Some(EndpointHints {
        for_zones: (!zones.is_empty()).then(|| {
            zones
                .iter()
                .map(|z| ForZone { name: (*z).into() })
                .collect()
        }),
        for_nodes: (!nodes.is_empty()).then(|| {
            nodes
                .iter()
                .map(|n| ForNode { name: (*n).into() })
                .collect()
        }),
    })
}

/// An endpoint's address, zone and hints.
type Topology = (String, Option<String>, Option<EndpointHints>);

/// Every endpoint of every planned slice, in plan order.
fn topology(p: &portmapper_core::Plan) -> Vec<Topology> {
    p.slices
        .iter()
        .flat_map(|s| s.full().endpoints.clone())
        .map(|e| (e.addresses[0].clone(), e.zone.clone(), e.hints.clone()))
        .collect()
}

#[test]
fn prefer_same_node_without_zones_hints_the_node_only() {
    let mut w = seed_world();
    w.service.spec.as_mut().unwrap().traffic_distribution = Some("PreferSameNode".into());
    let p = w.step();
    let t = topology(&p);
    assert_eq!(t.len(), 6);
    for (ip, zone, h) in t {
        assert_eq!(zone, None, "{ip}");
        assert_eq!(h, hints(&[], &["node-1"]), "{ip}");
    }
    assert_eq!(w.plan().writes(), 0);
}

#[test]
fn prefer_same_node_to_prefer_close_removes_for_nodes() {
    let mut w = seed_world();
    w.zones = BTreeMap::from([("node-1".to_owned(), "z1".to_owned())]);
    w.service.spec.as_mut().unwrap().traffic_distribution = Some("PreferSameNode".into());
    w.step();
    assert!(
        w.slices
            .iter()
            .flat_map(|s| &s.endpoints)
            .all(|e| e.hints == hints(&["z1"], &["node-1"]))
    );
    w.service.spec.as_mut().unwrap().traffic_distribution = Some("PreferClose".into());
    let p = w.plan();
    assert_eq!(
        actions(&p),
        vec![
            ("web.http".into(), "update"),
            ("web.https".into(), "update")
        ],
        "stale forNodes are drift"
    );
    for (ip, zone, h) in topology(&p) {
        assert_eq!(zone.as_deref(), Some("z1"), "{ip}");
        assert_eq!(h, hints(&["z1"], &[]), "{ip}");
    }
    w.apply(&p);
    assert_eq!(w.plan().writes(), 0);
}

#[test]
fn deprecated_topology_aware_hints_auto_disables_hints_but_keeps_zones() {
    for value in ["auto", "Auto"] {
        let mut w = seed_world();
        w.zones = BTreeMap::from([("node-1".to_owned(), "z1".to_owned())]);
        w.service.spec.as_mut().unwrap().traffic_distribution = Some("PreferClose".into());
        w.service.metadata.annotations = Some(BTreeMap::from([(
            "service.kubernetes.io/topology-aware-hints".to_owned(),
            value.to_owned(),
        )]));
        let p = w.plan();
        let t = topology(&p);
        assert_eq!(t.len(), 6);
        for (ip, zone, h) in t {
            assert_eq!(
                zone.as_deref(),
                Some("z1"),
                "{value} {ip}: zone still published"
            );
            assert_eq!(h, None, "{value} {ip}");
        }
        assert_eq!(
            p.warnings,
            vec![PlanWarning::TopologyModeAuto {
                annotation: "service.kubernetes.io/topology-aware-hints".into()
            }],
            "{value}"
        );
    }
}

#[test]
fn topology_mode_auto_keeps_zones() {
    let mut w = seed_world();
    w.zones = BTreeMap::from([("node-1".to_owned(), "z1".to_owned())]);
    w.service.spec.as_mut().unwrap().traffic_distribution = Some("PreferSameNode".into());
    w.service.metadata.annotations = Some(BTreeMap::from([(
        "service.kubernetes.io/topology-mode".to_owned(),
        "Auto".to_owned(),
    )]));
    let p = w.plan();
    for (ip, zone, h) in topology(&p) {
        assert_eq!((zone.as_deref(), h), (Some("z1"), None), "{ip}");
    }
}

#[test]
fn topology_mode_disabled_keeps_hints() {
    let mut w = seed_world();
    w.zones = BTreeMap::from([("node-1".to_owned(), "z1".to_owned())]);
    w.service.spec.as_mut().unwrap().traffic_distribution = Some("PreferClose".into());
    w.service.metadata.annotations = Some(BTreeMap::from([(
        "service.kubernetes.io/topology-mode".to_owned(),
        "Disabled".to_owned(),
    )]));
    let p = w.plan();
    let t = topology(&p);
    assert_eq!(t.len(), 6);
    for (ip, zone, h) in t {
        assert_eq!(zone.as_deref(), Some("z1"), "{ip}");
        assert_eq!(h, hints(&["z1"], &[]), "{ip}");
    }
    assert_eq!(p.warnings, vec![]);
}

#[test]
fn without_node_zones_no_zone_or_zone_hints_but_node_name_is_kept() {
    // What the planner is given when node lookups are off: no zones at all.
    let mut w = seed_world();
    w.service.spec.as_mut().unwrap().traffic_distribution = Some("PreferClose".into());
    let p = w.plan();
    let eps: Vec<_> = p
        .slices
        .iter()
        .flat_map(|s| s.full().endpoints.clone())
        .collect();
    assert_eq!(eps.len(), 6);
    for e in eps {
        assert_eq!(
            (e.zone.as_deref(), &e.hints, e.node_name.as_deref()),
            (None, &None, Some("node-1")),
            "{:?}",
            e.addresses
        );
    }
}

fn named_target_world(a_ready: bool, b_ready: bool) -> World {
    let pod = |name: &str, ip: &str, number: i32, ready: bool| {
        let b = PodBuilder::new(name, &[ip]).container_port("grpc", number);
        if ready { b } else { b.unready() }.build()
    };
    World::new(
        port_mapping(&[]),
        service(vec![sport(
            "grpc",
            9000,
            Some(IntOrString::String("grpc".into())),
        )]),
        vec![
            pod("a", "10.0.0.1", 9443, a_ready),
            pod("b", "10.0.0.2", 8443, b_ready),
        ],
    )
}

#[test]
fn named_target_group_emptied_is_deleted_and_one_placeholder_stays() {
    // Both groups published, then every member leaves: both groups are published, so the
    // placeholder goes to the lowest resolved number (8443) and the extra group is deleted.
    let mut w = named_target_world(true, true);
    let p = w.step();
    assert_eq!(
        actions(&p),
        vec![
            ("web.grpc.p8443".into(), "create"),
            ("web.grpc.p9443".into(), "create")
        ]
    );
    let uid_9443 = w.slice("web.grpc.p9443").unwrap().metadata.uid.clone();
    for pod in &mut w.pods {
        *pod = PodBuilder(pod.clone()).unready().build();
    }
    let p = w.step();
    assert_eq!(actions(&p), vec![("web.grpc.p8443".into(), "update")]);
    assert!(p.slices[0].slice.endpoints.is_empty());
    assert_eq!(
        p.slices[0].slice.ports.as_ref().unwrap()[0].port,
        Some(8443)
    );
    assert_eq!(
        p.deletions,
        vec![Deletion {
            name: "web.grpc.p9443".into(),
            uid: uid_9443
        }]
    );
    assert_eq!(w.slices.len(), 1, "exactly one placeholder");
    assert_eq!(w.plan().writes(), 0);
}

#[test]
fn named_target_placeholder_stays_at_the_published_group_rather_than_the_lowest() {
    // Only the 9443 group was ever published. When its members leave, the placeholder stays
    // there (one write) instead of moving to the lowest resolved number, 8443 (a create and a
    // delete), as the Go original would: planner/mod.rs "at an already published group, else the
    // lowest number a candidate resolves".
    let mut w = named_target_world(true, false);
    let p = w.step();
    assert_eq!(actions(&p), vec![("web.grpc.p9443".into(), "create")]);
    w.pods[0] = PodBuilder(w.pods[0].clone()).unready().build();
    let p = w.step();
    assert_eq!(actions(&p), vec![("web.grpc.p9443".into(), "update")]);
    assert!(p.slices[0].slice.endpoints.is_empty());
    assert_eq!(
        p.slices[0].slice.ports.as_ref().unwrap()[0].port,
        Some(9443)
    );
    assert_eq!(p.deletions, vec![]);
    assert_eq!(w.plan().writes(), 0);
    // A member of the other group arrives: it is published, and the empty placeholder goes.
    w.pods[1] = PodBuilder::new("b", &["10.0.0.2"])
        .container_port("grpc", 8443)
        .build();
    let p = w.step();
    assert_eq!(actions(&p), vec![("web.grpc.p8443".into(), "create")]);
    assert_eq!(
        p.deletions
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>(),
        vec!["web.grpc.p9443"]
    );
    assert_eq!(pod_names(w.slice("web.grpc.p8443").unwrap()), vec!["b"]);
}

/// `n` pods (`p000`, …) at version 1 of a Service with ports `http` and `https`; even pods
/// list both in their port annotation, odd ones `http` only.
fn half_https_world(n: usize) -> World {
    let pods: Vec<k8s_openapi::api::core::v1::Pod> = (0..n)
        .map(|i| {
            let ip = format!("10.0.{}.{}", i / 200, i % 200 + 1);
            let mut pod = PodBuilder::new(&format!("p{i:03}"), &[ip.as_str()])
                .ports(if i % 2 == 0 { "http,https" } else { "http" })
                .build();
            pod.metadata.resource_version = Some("1".into());
            pod
        })
        .collect();
    let svc = service(vec![
        sport("http", 80, Some(IntOrString::Int(8080))),
        sport("https", 443, Some(IntOrString::Int(8443))),
    ]);
    World::new(port_mapping(&["http", "https"]), svc, pods)
}

/// The incremental path's cost is the pods that changed: after one pod event a plan with the
/// memo evaluates that pod alone, a resync evaluates none, and a spec change evaluates all —
/// and every one of those plans equals the full plan.
#[test]
fn a_plan_with_the_memo_evaluates_only_the_pods_that_changed() {
    let mut w = half_https_world(300);
    let mut memo = portmapper_core::EvalMemo::default();
    let step = |w: &mut World, memo: &mut portmapper_core::EvalMemo| {
        let incremental = w.try_plan_with(Some(memo)).expect("plan");
        assert_eq!(incremental, w.plan(), "the memo changes nothing");
        w.apply(&incremental);
        (memo.last_pass().evaluated, memo.last_pass().reused)
    };
    assert_eq!(step(&mut w, &mut memo), (300, 0), "first pass: everything");
    assert_eq!(memo.last_pass().ports_kept, 0);
    assert_eq!(step(&mut w, &mut memo), (0, 300), "resync: nothing");
    assert_eq!(
        memo.last_pass().ports_kept,
        2,
        "both ports start from the last pass's evaluation of them"
    );

    let pod = w.pod_mut("p007");
    if let Some(c) = pod.status.as_mut().and_then(|s| s.conditions.as_mut()) {
        c[0].status = "False".into();
    }
    pod.metadata.resource_version = Some("2".into());
    assert_eq!(step(&mut w, &mut memo), (1, 299), "one pod event: that pod");
    assert_eq!(memo.last_pass().ports_kept, 2, "visiting that pod alone");
    // The address of every endpoint published on the http port (one address each).
    let http_addresses = |w: &World| -> Vec<String> {
        w.slices
            .iter()
            .filter(|s| {
                s.ports
                    .iter()
                    .flatten()
                    .any(|p| p.name.as_deref() == Some("http"))
            })
            .flat_map(|s| &s.endpoints)
            .map(|e| e.addresses[0].clone())
            .collect()
    };
    let http_endpoints = http_addresses(&w).len();
    assert_eq!(http_endpoints, 299, "and the flip is published");

    w.pods
        .retain(|p| p.metadata.name.as_deref() != Some("p008"));
    assert_eq!(
        step(&mut w, &mut memo),
        (0, 299),
        "a deletion evaluates nothing"
    );
    assert_eq!(
        memo.last_pass().ports_kept,
        2,
        "the pool's positions moved: the kept ports move with them"
    );

    // A pod whose pool label changes leaves the pool: the memo's pool membership follows the
    // pod's new version (and `step` checks the plan equals the full one).
    let pod = w.pod_mut("p009");
    pod.metadata.labels = Some(BTreeMap::from([(GROUP_KEY.to_owned(), "other".to_owned())]));
    pod.metadata.resource_version = Some("2".into());
    assert_eq!(
        step(&mut w, &mut memo),
        (0, 298),
        "a pod leaving the pool evaluates nothing"
    );
    let names: Vec<String> = w.slices.iter().flat_map(pod_names).collect();
    assert!(!names.iter().any(|n| n == "p009"), "and is withdrawn");
    let pod = w.pod_mut("p009");
    pod.metadata.labels = Some(BTreeMap::from([(GROUP_KEY.to_owned(), "web".to_owned())]));
    pod.metadata.resource_version = Some("3".into());
    assert_eq!(step(&mut w, &mut memo), (1, 298), "and back: that pod");

    // A pod whose address changes moves in its groups' order: the plan still equals the full
    // one.
    let pod = w.pod_mut("p010");
    pod.status.as_mut().unwrap().pod_ips = Some(vec![k8s_openapi::api::core::v1::PodIP {
        ip: "10.0.9.9".into(),
    }]);
    pod.metadata.resource_version = Some("2".into());
    assert_eq!(
        step(&mut w, &mut memo),
        (1, 298),
        "a moved address: that pod"
    );
    assert_eq!(
        memo.last_pass().ports_kept,
        2,
        "its endpoint moves in the kept order"
    );
    let addresses = http_addresses(&w);
    assert!(
        addresses.iter().any(|a| a == "10.0.9.9"),
        "the new address is published"
    );
    assert!(
        !addresses.iter().any(|a| a == "10.0.0.11"),
        "the old one is not"
    );

    // The Service's labels are metadata, not spec: the memo keeps its outcomes, but every
    // settled slice is compared again and carries the new label.
    w.service
        .metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert("tier".into(), "front".into());
    assert_eq!(step(&mut w, &mut memo), (0, 299), "a Service label");
    assert!(
        w.slices
            .iter()
            .all(|s| s.metadata.labels.as_ref().and_then(|l| l.get("tier"))
                == Some(&"front".to_owned())),
        "every slice carries it"
    );

    w.pm.spec.max_endpoints_per_slice = 50;
    assert_eq!(
        step(&mut w, &mut memo),
        (299, 0),
        "a spec change: everything"
    );
    assert_eq!(memo.len(), 299, "deleted pods are forgotten");
}

/// A slice the memo remembers as exactly as desired is taken as it is only while it is the
/// same object version with the same pods: an edit behind the operator's back (a new
/// resourceVersion) or a change of node zones is looked at again and written back.
#[test]
fn a_settled_slice_changed_behind_the_memo_is_compared_again() {
    let pods: Vec<k8s_openapi::api::core::v1::Pod> = (0..30)
        .map(|i| {
            let ip = format!("10.0.0.{}", i + 1);
            let mut pod = PodBuilder::new(&format!("p{i:02}"), &[ip.as_str()])
                .ports("http")
                .build();
            pod.metadata.resource_version = Some("1".into());
            pod.spec.as_mut().unwrap().node_name = Some("n1".into());
            pod
        })
        .collect();
    let svc = service(vec![sport("http", 80, Some(IntOrString::Int(8080)))]);
    let mut w = World::new(port_mapping(&["http"]), svc, pods);
    w.pm.spec.max_endpoints_per_slice = 10;
    let mut memo = portmapper_core::EvalMemo::default();
    let step = |w: &mut World, memo: &mut portmapper_core::EvalMemo| {
        let incremental = w.try_plan_with(Some(memo)).expect("plan");
        assert_eq!(incremental, w.plan(), "the memo changes nothing");
        w.apply(&incremental);
        incremental.writes()
    };
    assert_eq!(step(&mut w, &mut memo), 3, "first pass: three slices");
    assert_eq!(step(&mut w, &mut memo), 0, "converged");
    assert_eq!(
        step(&mut w, &mut memo),
        0,
        "still converged (slices settled)"
    );

    // Someone edits a slice: an endpoint's node changes, and the API server gives it a new
    // resourceVersion.
    let edited = w
        .slices
        .iter_mut()
        .find(|s| s.metadata.name.as_deref() == Some("web.http.2"))
        .expect("second chunk");
    edited.endpoints[0].node_name = Some("elsewhere".into());
    edited.metadata.resource_version = Some("edited".into());
    assert_eq!(
        step(&mut w, &mut memo),
        1,
        "the edited slice is written back"
    );
    assert_eq!(step(&mut w, &mut memo), 0);

    // Node zones are read afresh every pass: a zone appearing rewrites every slice.
    w.zones.insert("n1".into(), "z1".into());
    assert_eq!(step(&mut w, &mut memo), 3, "every endpoint gains its zone");
    assert_eq!(step(&mut w, &mut memo), 0);
}

/// A port's status lists the first excluded pods by name. A pass that brings a kept port up to
/// date finds them among the last listed pods and the changed ones; every such plan equals the
/// full plan, whether a change enters the listing, reorders its reasons or takes a listed pod
/// out of it (then every pod is looked at again).
#[test]
fn the_listed_exclusions_of_a_kept_port_follow_every_change() {
    let mut w = half_https_world(120);
    let mut memo = portmapper_core::EvalMemo::default();
    let mut version = 1;
    let step = |w: &mut World, memo: &mut portmapper_core::EvalMemo| {
        let incremental = w.try_plan_with(Some(memo)).expect("plan");
        assert_eq!(incremental, w.plan(), "the memo changes nothing");
        w.apply(&incremental);
        assert_eq!(memo.last_pass().ports_kept, 2, "both ports kept");
        incremental
    };
    let listed = |p: &portmapper_core::Plan, port: &str| -> Vec<String> {
        let status = p.ports.iter().find(|s| s.name == port).expect("port");
        status.excluded.iter().map(|e| e.pod.clone()).collect()
    };
    w.try_plan_with(Some(&mut memo)).expect("plan");
    let first = w.plan();
    w.apply(&first);
    assert_eq!(listed(&first, "https").len(), 20, "60 excluded, 20 listed");
    assert_eq!(listed(&first, "https")[0], "p001");
    let mut change =
        |w: &mut World,
         name: &str,
         f: &dyn Fn(k8s_openapi::api::core::v1::Pod) -> k8s_openapi::api::core::v1::Pod| {
            version += 1;
            let pod = w.pod_mut(name);
            *pod = f(pod.clone());
            pod.metadata.resource_version = Some(version.to_string());
        };
    // Unready: it enters http's listing (first by name) and changes its reason on https.
    change(&mut w, "p001", &|p| PodBuilder(p).unready().build());
    let p = step(&mut w, &mut memo);
    assert_eq!(listed(&p, "http"), ["p001"]);
    // An unlisted excluded pod changes: the listing stays.
    change(&mut w, "p101", &|p| PodBuilder(p).unready().build());
    let p = step(&mut w, &mut memo);
    assert_eq!(listed(&p, "http"), ["p001", "p101"]);
    assert_eq!(listed(&p, "https")[0], "p001");
    // A listed pod leaves the full https listing: the next one by name comes in.
    change(&mut w, "p003", &|p| {
        PodBuilder(p).ports("http,https").build()
    });
    let p = step(&mut w, &mut memo);
    let https = listed(&p, "https");
    assert!(!https.contains(&"p003".to_owned()));
    assert_eq!(https.len(), 20);
    assert_eq!(https.last().map(String::as_str), Some("p041"));
    // And back.
    change(&mut w, "p003", &|p| PodBuilder(p).ports("http").build());
    let p = step(&mut w, &mut memo);
    assert_eq!(listed(&p, "https")[1], "p003");
    // Below the limit: http lists every excluded pod, and loses one.
    change(&mut w, "p001", &|mut p| {
        if let Some(c) = p.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            c[0].status = "True".into();
        }
        p
    });
    let p = step(&mut w, &mut memo);
    assert_eq!(listed(&p, "http"), ["p101"]);
}
