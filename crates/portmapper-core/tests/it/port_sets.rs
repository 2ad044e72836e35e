//! `sliceGrouping: PerPortSet` (the default): pods that are members of the same ports share one
//! slice set listing all of them; writes follow the pods that change, not the ports.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_validation::IpFamily;
use portmapper_api::SliceGrouping;
use portmapper_core::planner::naming::{NamedPort, chunk_name, port_set_base_name};

use crate::fixtures::*;

/// The name of chunk 1 of `web`'s slice set listing `ports` (name, number), TCP.
fn set_name(ports: &[(&str, i32)], family: IpFamily) -> String {
    let named: Vec<NamedPort<'_>> = ports
        .iter()
        .map(|&(name, number)| NamedPort {
            name,
            key: name,
            number,
            protocol: "TCP",
        })
        .collect();
    port_set_base_name("web", &named, family, 0)
}

const HTTP: (&str, i32) = ("http", 8080);
const HTTPS: (&str, i32) = ("https", 8443);

/// (name, port, number) of every port a slice lists.
fn ports(slice: &EndpointSlice) -> Vec<(String, i32)> {
    slice
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.clone().unwrap_or_default(), p.port.unwrap_or(0)))
        .collect()
}

fn seed_world() -> World {
    World::new(
        port_set_mapping(&["http", "https"]),
        web_service(),
        seed_pods(),
    )
}

fn written(plan: &portmapper_core::Plan) -> Vec<(String, &'static str)> {
    actions(plan)
        .into_iter()
        .filter(|(_, a)| *a != "unchanged")
        .collect()
}

#[test]
fn pods_with_the_same_ports_share_one_slice_listing_all_of_them() {
    let mut w = seed_world();
    let p = w.step();
    let (both, http, https) = (
        set_name(&[HTTP, HTTPS], IpFamily::V4),
        set_name(&[HTTP], IpFamily::V4),
        set_name(&[HTTPS], IpFamily::V4),
    );
    let mut want = vec![
        (both.clone(), "create"),
        (http.clone(), "create"),
        (https.clone(), "create"),
    ];
    want.sort();
    assert_eq!(actions(&p), want);
    assert_eq!(pod_names(w.slice(&both).unwrap()), vec!["pod-b", "pod-c"]);
    assert_eq!(pod_names(w.slice(&http).unwrap()), vec!["pod-a"]);
    assert_eq!(pod_names(w.slice(&https).unwrap()), vec!["pod-d"]);
    assert_eq!(
        ports(w.slice(&both).unwrap()),
        vec![("http".into(), 8080), ("https".into(), 8443)],
        "Service port order"
    );
    assert!(both.starts_with("web.http-https."), "{both}");
    // Status stays per Service port.
    let per_port: Vec<(&str, i32, i32)> = p
        .ports
        .iter()
        .map(|s| (s.name.as_str(), s.ready, s.candidates))
        .collect();
    assert_eq!(per_port, vec![("http", 3, 4), ("https", 3, 4)]);
    assert_eq!(w.plan().writes(), 0, "converged");
}

/// Shape A of the bench, dual-stack: even pods list every port, odd pods two.
fn shape_a(pods: usize) -> World {
    let svc = {
        let mut s = service(vec![
            sport("p1", 1001, None),
            sport("p2", 1002, None),
            sport("p3", 1003, None),
            sport("p4", 1004, None),
        ]);
        s.spec.as_mut().expect("spec").ip_families = Some(vec!["IPv4".into(), "IPv6".into()]);
        s
    };
    let pods: Vec<Pod> = (0..pods)
        .map(|i| {
            let (v4, v6) = (format!("10.0.0.{}", i + 1), format!("fd00::{:x}", i + 1));
            PodBuilder::new(&format!("pod-{i:02}"), &[&v4, &v6])
                .ports(if i % 2 == 0 { "p1,p2,p3,p4" } else { "p1,p2" })
                .build()
        })
        .collect();
    World::new(port_set_mapping(&["p1", "p2", "p3", "p4"]), svc, pods)
}

fn set_ready(w: &mut World, pod: &str, ready: bool) {
    let status = w.pod_mut(pod).status.as_mut().expect("status");
    let conditions = status.conditions.as_mut().expect("conditions");
    conditions[0].status = if ready { "True" } else { "False" }.into();
}

#[test]
fn a_ready_flip_of_a_pod_serving_every_port_is_one_write_per_family() {
    let mut w = shape_a(10);
    let first = w.step();
    assert_eq!(first.slices.len(), 4, "two port sets × two families");
    let all = [("p1", 1001), ("p2", 1002), ("p3", 1003), ("p4", 1004)];
    let (v4, v6) = (set_name(&all, IpFamily::V4), set_name(&all, IpFamily::V6));
    set_ready(&mut w, "pod-04", false);
    let p = w.step();
    assert_eq!(
        written(&p),
        vec![(v4.clone(), "update"), (v6.clone(), "update")]
    );
    assert!(p.deletions.is_empty());
    assert!(!pod_names(w.slice(&v4).unwrap()).contains(&"pod-04".to_owned()));
    set_ready(&mut w, "pod-04", true);
    let p = w.step();
    assert_eq!(written(&p), vec![(v4.clone(), "update"), (v6, "update")]);
    assert!(pod_names(w.slice(&v4).unwrap()).contains(&"pod-04".to_owned()));
}

#[test]
fn a_draining_pod_keeps_its_ports_and_is_one_in_place_write_per_family() {
    let mut w = shape_a(4);
    w.step();
    w.pod_mut("pod-02").metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
    let p = w.step();
    let all = [("p1", 1001), ("p2", 1002), ("p3", 1003), ("p4", 1004)];
    assert_eq!(
        written(&p),
        vec![
            (set_name(&all, IpFamily::V4), "update"),
            (set_name(&all, IpFamily::V6), "update")
        ]
    );
}

#[test]
fn a_pod_leaving_one_port_moves_to_another_set_and_nothing_else_is_written() {
    let mut w = seed_world();
    w.step();
    // pod-b leaves https: out of {http, https}, into {http}.
    let anns = w.pod_mut("pod-b").metadata.annotations.as_mut().unwrap();
    anns.insert(PORTS_KEY.into(), "http".into());
    let p = w.step();
    let mut want = vec![
        (set_name(&[HTTP, HTTPS], IpFamily::V4), "update"),
        (set_name(&[HTTP], IpFamily::V4), "update"),
    ];
    want.sort();
    assert_eq!(written(&p), want);
    assert!(p.deletions.is_empty());
    assert_eq!(
        pod_names(w.slice(&set_name(&[HTTP], IpFamily::V4)).unwrap()),
        vec!["pod-a", "pod-b"]
    );
}

#[test]
fn the_last_pod_of_a_set_leaving_deletes_its_slice() {
    let mut w = seed_world();
    w.step();
    let anns = w.pod_mut("pod-a").metadata.annotations.as_mut().unwrap();
    anns.insert(PORTS_KEY.into(), "http,https".into());
    let p = w.step();
    assert_eq!(
        written(&p),
        vec![(set_name(&[HTTP, HTTPS], IpFamily::V4), "update")]
    );
    assert_eq!(
        p.deletions
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>(),
        vec![set_name(&[HTTP], IpFamily::V4)]
    );
}

#[test]
fn without_members_one_empty_slice_lists_every_port_and_the_first_members_fill_it() {
    let pods: Vec<Pod> = seed_pods()
        .into_iter()
        .map(|p| {
            let mut b = PodBuilder(p).unready();
            b = b.ports("http,https");
            b.build()
        })
        .collect();
    let mut w = World::new(port_set_mapping(&["http", "https"]), web_service(), pods);
    let both = set_name(&[HTTP, HTTPS], IpFamily::V4);
    let p = w.step();
    assert_eq!(actions(&p), vec![(both.clone(), "create")]);
    let placeholder = w.slice(&both).unwrap();
    assert!(placeholder.endpoints.is_empty());
    assert_eq!(
        ports(placeholder),
        vec![("http".into(), 8080), ("https".into(), 8443)]
    );
    set_ready(&mut w, "pod-a", true);
    let p = w.step();
    assert_eq!(
        actions(&p),
        vec![(both.clone(), "update")],
        "filled in place"
    );
    assert_eq!(pod_names(w.slice(&both).unwrap()), vec!["pod-a"]);
}

#[test]
fn a_port_without_members_keeps_an_empty_slice_beside_the_others() {
    // https has no member: {http} holds everyone, and one empty slice lists https.
    let mut w = World::new(
        port_set_mapping(&["http", "https"]),
        web_service(),
        vec![
            PodBuilder::new("a", &["10.0.0.1"]).ports("http").build(),
            PodBuilder::new("b", &["10.0.0.2"]).ports("http").build(),
        ],
    );
    w.step();
    let empty = w.slice(&set_name(&[HTTPS], IpFamily::V4)).unwrap();
    assert!(empty.endpoints.is_empty());
    assert_eq!(
        pod_names(w.slice(&set_name(&[HTTP], IpFamily::V4)).unwrap()),
        vec!["a", "b"]
    );
    assert_eq!(w.slices.len(), 2);
    // https gains a member: the placeholder goes, {http, https} comes, {http} loses b.
    let anns = w.pod_mut("b").metadata.annotations.as_mut().unwrap();
    anns.insert(PORTS_KEY.into(), "http,https".into());
    let p = w.step();
    assert_eq!(
        written(&p),
        vec![
            (set_name(&[HTTP], IpFamily::V4), "update"),
            (set_name(&[HTTP, HTTPS], IpFamily::V4), "create"),
        ]
        .into_iter()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect::<Vec<_>>()
    );
    assert_eq!(
        p.deletions
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>(),
        vec![set_name(&[HTTPS], IpFamily::V4)]
    );
}

#[test]
fn named_targets_resolving_differently_are_different_sets() {
    let svc = service(vec![
        sport("http", 8080, None),
        sport("grpc", 9000, Some(IntOrString::String("grpc".into()))),
    ]);
    let mut pm = port_set_mapping(&[]);
    pm.spec.ports.clear();
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
            PodBuilder::new("c", &["10.0.0.3"])
                .sidecar_port("grpc", 8443)
                .build(),
            PodBuilder::new("d", &["10.0.0.4"]).build(),
        ],
    );
    let p = w.plan();
    type Set = (Vec<(String, i32)>, Vec<String>);
    let sets: Vec<Set> = p
        .slices
        .iter()
        .map(|s| (ports(&s.full()), pod_names(&s.full())))
        .collect();
    let mut want = vec![
        (
            vec![("http".to_owned(), 8080), ("grpc".to_owned(), 8443)],
            vec!["b".to_owned(), "c".to_owned()],
        ),
        (
            vec![("http".to_owned(), 8080), ("grpc".to_owned(), 9443)],
            vec!["a".to_owned()],
        ),
        (vec![("http".to_owned(), 8080)], vec!["d".to_owned()]),
    ];
    let mut got = sets;
    got.sort();
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn a_set_is_chunked_at_max_endpoints_per_slice() {
    let mut w = shape_a(10);
    w.pm.spec.max_endpoints_per_slice = 2;
    w.service.spec.as_mut().unwrap().ip_families = Some(vec!["IPv4".into()]);
    w.step();
    let all = [("p1", 1001), ("p2", 1002), ("p3", 1003), ("p4", 1004)];
    let base = set_name(&all, IpFamily::V4);
    let chunks: Vec<usize> = (1..=3)
        .map(|k| w.slice(&chunk_name(&base, k)).unwrap().endpoints.len())
        .collect();
    assert_eq!(chunks, vec![2, 2, 1], "five even pods");
    assert_eq!(w.slices.len(), 6, "and three chunks of the odd pods");
}

#[test]
fn a_headless_service_without_ports_has_one_portless_set() {
    let mut svc = service(vec![]);
    let spec = svc.spec.as_mut().unwrap();
    spec.cluster_ip = Some("None".into());
    spec.ports = None;
    let mut w = World::new(port_set_mapping(&[]), svc, seed_pods());
    w.step();
    assert_eq!(w.slices.len(), 1);
    let slice = &w.slices[0];
    assert!(slice.ports.as_ref().is_none_or(Vec::is_empty));
    assert_eq!(pod_names(slice), vec!["pod-a", "pod-b", "pod-c", "pod-d"]);
    assert_eq!(slice.metadata.name, Some(set_name(&[], IpFamily::V4)));
}

#[test]
fn names_fit_63_characters_with_a_long_service_and_many_long_ports() {
    let name = format!("1st-{}", "a".repeat(59));
    let ports: Vec<_> = (0..20)
        .map(|i| sport(&format!("port-{i:02}-{}", "x".repeat(50)), 1000 + i, None))
        .collect();
    let mut svc = service(ports);
    svc.metadata.name = Some(name.clone());
    svc.spec.as_mut().unwrap().ip_families = Some(vec!["IPv6".into()]);
    let mut pm = port_set_mapping(&[]);
    pm.spec.service_ref.name = name;
    pm.spec.pods.value = Some("web".into());
    pm.spec.max_endpoints_per_slice = 1;
    let pods: Vec<Pod> = (0..12)
        .map(|i| PodBuilder::new(&format!("p{i}"), &[&format!("fd00::{:x}", i + 1)]).build())
        .collect();
    let w = World::new(pm, svc, pods);
    let p = w.plan();
    assert_eq!(p.slices.len(), 12);
    for s in &p.slices {
        let n = s.slice.metadata.name.as_deref().unwrap();
        assert!(n.len() <= 63, "{n}");
        assert!(
            kube_validation::names::is_dns1123_subdomain(n).is_empty(),
            "{n}"
        );
    }
}

#[test]
fn per_port_stays_available_and_switching_back_and_forth_converges() {
    let mut w = seed_world();
    w.step();
    let port_set_names: Vec<String> = w
        .slices
        .iter()
        .filter_map(|s| s.metadata.name.clone())
        .collect();
    w.pm.spec.slice_grouping = SliceGrouping::PerPort;
    let p = w.step();
    assert_eq!(
        written(&p),
        vec![
            ("web.http".to_owned(), "create"),
            ("web.https".to_owned(), "create")
        ]
    );
    let mut deleted: Vec<String> = p.deletions.iter().map(|d| d.name.clone()).collect();
    deleted.sort();
    let mut old = port_set_names.clone();
    old.sort();
    assert_eq!(deleted, old);
    assert_eq!(w.plan().writes(), 0);
    w.pm.spec.slice_grouping = SliceGrouping::PerPortSet;
    let p = w.step();
    assert_eq!(p.slices.len(), 3);
    assert_eq!(p.deletions.len(), 2);
    assert_eq!(w.plan().writes(), 0);
}

/// With the memo, a flip builds the desired endpoints of the sets the pod leaves and joins
/// only (one per family here); the other sets, whose slices are as the last pass left them
/// (settled, or written by it and found as written), are not built at all.
#[test]
fn with_the_memo_a_flip_builds_only_the_sets_it_touches() {
    let mut w = shape_a(10);
    for (i, pod) in w.pods.iter_mut().enumerate() {
        pod.metadata.resource_version = Some(format!("{}", i + 1));
    }
    let mut memo = portmapper_core::EvalMemo::default();
    let step = |w: &mut World, memo: &mut portmapper_core::EvalMemo| {
        let p = w.try_plan_with(Some(memo)).expect("plan");
        assert_eq!(p, w.plan(), "the memo changes nothing");
        w.apply(&p);
        (p.writes(), memo.last_pass())
    };
    let (_, first) = step(&mut w, &mut memo);
    assert_eq!((first.sets_kept, first.groups_built), (false, 4));
    let flip = |w: &mut World, pod: &str, ready: bool, version: &str| {
        set_ready(w, pod, ready);
        w.pod_mut(pod).metadata.resource_version = Some(version.into());
    };
    flip(&mut w, "pod-04", false, "101");
    let (writes, pass) = step(&mut w, &mut memo);
    assert_eq!(writes, 2);
    assert_eq!((pass.sets_kept, pass.groups_built), (true, 2));
    // The set of pod-05 (p1, p2) now: the set written above is checked, not built.
    flip(&mut w, "pod-05", false, "102");
    let (writes, pass) = step(&mut w, &mut memo);
    assert_eq!(writes, 2);
    assert_eq!((pass.sets_kept, pass.groups_built), (true, 2));
    // Nothing changed: nothing built, nothing written.
    let (writes, pass) = step(&mut w, &mut memo);
    assert_eq!((writes, pass.groups_built), (0, 0));
    // A slice changed behind the memo's back (its version moves): that set is built again
    // and repaired, the other is not built.
    let all = [("p1", 1001), ("p2", 1002), ("p3", 1003), ("p4", 1004)];
    let name = set_name(&all, IpFamily::V4);
    let tampered = w
        .slices
        .iter_mut()
        .find(|s| s.metadata.name.as_deref() == Some(name.as_str()))
        .expect("slice");
    tampered.endpoints.pop();
    tampered.metadata.resource_version = Some("999".into());
    let (writes, pass) = step(&mut w, &mut memo);
    assert_eq!((writes, pass.groups_built), (1, 1));
}
