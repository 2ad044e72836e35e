//! Hostile inputs at the planner (issue 11's catalogue, listed in `docs/reliability.md`): huge
//! and malformed annotations, unusable and duplicate pod IPs, names at their length limits, a
//! 1,001-pod port, Services whose labels, type, selector or uid change under us, and network
//! verdicts that lie. Each asserts the exact outcome: who is published, the reason of every
//! exclusion, the warnings, and the writes.

use std::collections::BTreeMap;

use portmapper_core::{CheckPosition, NetworkKey, PlanWarning, Verdict};

use crate::fixtures::*;

fn excluded(p: &portmapper_core::Plan, port: usize) -> Vec<(String, String)> {
    p.ports[port]
        .excluded
        .iter()
        .map(|e| (e.pod.clone(), e.reason.clone()))
        .collect()
}

fn one_port_world(pods: Vec<k8s_openapi::api::core::v1::Pod>) -> World {
    World::new(
        port_mapping(&["http"]),
        service(vec![sport("http", 80, None)]),
        pods,
    )
}

#[test]
fn a_one_mebibyte_port_list_is_read_to_its_end_and_never_echoed() {
    let huge = format!("{}http", "x,".repeat(512 * 1024));
    let w = World::new(
        port_mapping(&["http", "https"]),
        web_service(),
        vec![PodBuilder::new("big", &["10.0.0.1"]).ports(&huge).build()],
    );
    let p = w.plan();
    assert_eq!(pod_names(&p.slices[0].full()), vec!["big"]);
    assert_eq!(
        excluded(&p, 1),
        vec![(
            "big".into(),
            "portNames: annotation example.com/ports does not list \"https\"".into()
        )]
    );
}

#[test]
fn malformed_port_lists_are_read_literally() {
    // (annotation, listed on http?) — comma-separated, whitespace trimmed, exact case.
    let cases: [(&str, bool); 14] = [
        ("http", true),
        (" http ,", true),
        ("\thttp\n", true),
        ("https,http,http", true),
        ("\u{a0}http", true), // NBSP is Unicode whitespace, trimmed like a space
        ("HTTP", false),
        ("http;https", false),
        ("http https", false),
        ("[\"http\"]", false),
        ("\"http\"", false),
        ("http\u{0}", false),
        ("\u{feff}http", false), // a BOM is not whitespace
        (",,,", false),
        ("", false),
    ];
    let pods = cases
        .iter()
        .enumerate()
        .map(|(i, (v, _))| {
            PodBuilder::new(&format!("p{i:02}"), &[&format!("10.0.0.{}", i + 1)])
                .ports(v)
                .build()
        })
        .collect();
    let p = one_port_world(pods).plan();
    let want: Vec<String> = cases
        .iter()
        .enumerate()
        .filter(|(_, (_, listed))| *listed)
        .map(|(i, _)| format!("p{i:02}"))
        .collect();
    assert_eq!(pod_names(&p.slices[0].full()), want);
    assert_eq!(p.ports[0].excluded_total, 9);
    assert!(
        p.ports[0]
            .excluded
            .iter()
            .all(|e| e.reason == "portNames: annotation example.com/ports does not list \"http\"")
    );
}

#[test]
fn a_missing_port_list_is_told_apart_from_an_empty_one() {
    let mut bare = PodBuilder::new("bare", &["10.0.0.1"]).build();
    bare.metadata.annotations = None;
    let p = one_port_world(vec![
        bare,
        PodBuilder::new("empty", &["10.0.0.2"]).ports("").build(),
    ])
    .plan();
    assert_eq!(
        excluded(&p, 0),
        vec![
            (
                "bare".into(),
                "portNames: pod has no annotation example.com/ports".into()
            ),
            (
                "empty".into(),
                "portNames: annotation example.com/ports does not list \"http\"".into()
            ),
        ]
    );
}

#[test]
fn unusable_pod_ips_are_excluded_with_the_apis_reason_and_one_warning_each() {
    let bad = [
        (
            "lo4",
            "127.0.0.1",
            "may not be in the loopback range (127.0.0.0/8, ::1/128)",
        ),
        (
            "ll4",
            "169.254.169.254",
            "may not be in the link-local range (169.254.0.0/16, fe80::/10)",
        ),
        (
            "llm",
            "224.0.0.5",
            "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)",
        ),
        ("un4", "0.0.0.0", "may not be unspecified (0.0.0.0)"),
    ];
    let mut pods: Vec<_> = bad
        .iter()
        .map(|(n, ip, _)| PodBuilder::new(n, &[ip]).ports("http").build())
        .collect();
    pods.push(PodBuilder::new("ok", &["10.0.0.5"]).ports("http").build());
    let p = one_port_world(pods).plan();
    assert_eq!(pod_names(&p.slices[0].full()), vec!["ok"]);
    let mut want: Vec<(String, String)> = bad
        .iter()
        .map(|(n, ip, why)| {
            (
                (*n).into(),
                format!("address {ip} cannot be published: {why}"),
            )
        })
        .collect();
    want.sort();
    assert_eq!(excluded(&p, 0), want);
    let warned: Vec<&str> = p
        .warnings
        .iter()
        .filter_map(|w| match w {
            PlanWarning::RejectedPodAddress { pod, .. } => Some(pod.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(warned, vec!["ll4", "llm", "lo4", "un4"]);
}

#[test]
fn unusable_ipv6_pod_ips_are_excluded_too() {
    let mut svc = service(vec![sport("http", 80, None)]);
    svc.spec.as_mut().unwrap().ip_families = Some(vec!["IPv6".into()]);
    let pods = [
        ("lo6", "::1"),
        ("ll6", "fe80::1"),
        ("un6", "::"),
        ("ok", "fd00::5"),
    ]
    .iter()
    .map(|(n, ip)| PodBuilder::new(n, &[ip]).ports("http").build())
    .collect();
    let p = World::new(port_mapping(&["http"]), svc, pods).plan();
    assert_eq!(pod_names(&p.slices[0].full()), vec!["ok"]);
    assert_eq!(
        excluded(&p, 0),
        vec![
            ("ll6".into(), "address fe80::1 cannot be published: may not be in the link-local range (169.254.0.0/16, fe80::/10)".into()),
            ("lo6".into(), "address ::1 cannot be published: may not be in the loopback range (127.0.0.0/8, ::1/128)".into()),
            ("un6".into(), "address :: cannot be published: may not be unspecified (::)".into()),
        ]
    );
}

#[test]
fn mapped_legacy_and_unparseable_pod_ips() {
    let p = one_port_world(vec![
        // An IPv4-mapped IPv6 address is the IPv4 address, as in Kubernetes.
        PodBuilder::new("mapped", &["::ffff:10.0.0.1"])
            .ports("http")
            .build(),
        // Leading zeros are read as decimal (Go's legacy parser) and published canonically.
        PodBuilder::new("zeros", &["010.000.000.002"])
            .ports("http")
            .build(),
        // Not addresses at all: never candidates (the API server refuses them in pod status).
        PodBuilder::new("garbage", &["not-an-ip"])
            .ports("http")
            .build(),
        PodBuilder::new("empty", &[""]).ports("http").build(),
        PodBuilder::new("with-port", &["10.0.0.3:80"])
            .ports("http")
            .build(),
        PodBuilder::new("zoned", &["fe80::1%eth0"])
            .ports("http")
            .build(),
        // A garbage first entry does not hide a good second one.
        PodBuilder::new("bad-first", &["nope", "10.0.0.4"])
            .ports("http")
            .build(),
    ])
    .plan();
    let published: Vec<(String, Vec<String>)> = p.slices[0]
        .full()
        .endpoints
        .iter()
        .map(|e| {
            (
                e.target_ref.as_ref().unwrap().name.clone().unwrap(),
                e.addresses.clone(),
            )
        })
        .collect();
    assert_eq!(
        published,
        vec![
            ("mapped".into(), vec!["10.0.0.1".into()]),
            ("zeros".into(), vec!["10.0.0.2".into()]),
            ("bad-first".into(), vec!["10.0.0.4".into()]),
        ]
    );
    assert_eq!(p.ports[0].candidates, 3);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
}

#[test]
fn duplicate_pod_ips_publish_one_endpoint_per_pod_and_the_first_ip_per_family() {
    let mut w = one_port_world(vec![
        PodBuilder::new("dup", &["10.0.0.7", "10.0.0.7"])
            .ports("http")
            .build(),
        PodBuilder::new("two", &["10.0.0.8", "10.0.0.9"])
            .ports("http")
            .build(),
        PodBuilder::new("twin", &["10.0.0.8"]).ports("http").build(),
    ]);
    let p = w.step();
    let addresses: Vec<(String, Vec<String>)> = p.slices[0]
        .full()
        .endpoints
        .iter()
        .map(|e| {
            (
                e.target_ref.as_ref().unwrap().name.clone().unwrap(),
                e.addresses.clone(),
            )
        })
        .collect();
    assert_eq!(
        addresses,
        vec![
            ("dup".into(), vec!["10.0.0.7".into()]),
            ("twin".into(), vec!["10.0.0.8".into()]),
            ("two".into(), vec!["10.0.0.8".into()]),
        ]
    );
    assert_eq!(w.plan().writes(), 0);
}

#[test]
fn names_at_their_length_limits_fit_every_slice_name() {
    // A 63-character Service, a 15-character port name (IANA_SVC_NAME's limit), dual stack,
    // a named target port resolving to 65535: the longest names the planner makes.
    let svc_name = "s".repeat(63);
    let port = "abcdefghijklmno";
    let mut svc = service(vec![sport(
        port,
        65535,
        Some(
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(
                "p23456789012345".into(),
            ),
        ),
    )]);
    svc.metadata.name = Some(svc_name.clone());
    svc.spec.as_mut().unwrap().ip_families = Some(vec!["IPv4".into(), "IPv6".into()]);
    let mut pm = port_mapping(&[port]);
    pm.spec.service_ref.name = svc_name.clone();
    pm.spec.max_endpoints_per_slice = 1;
    let pods = (0..3)
        .map(|i| {
            let mut pod = PodBuilder::new(
                &format!("{}{i}", "p".repeat(252)),
                &[&format!("10.0.0.{}", i + 1), &format!("fd00::{}", i + 1)],
            )
            .ports(port)
            .container_port("p23456789012345", 65535)
            .build();
            pod.metadata
                .labels
                .as_mut()
                .unwrap()
                .insert(GROUP_KEY.into(), svc_name.clone());
            pod
        })
        .collect();
    let mut w = World::new(pm, svc, pods);
    let p = w.step();
    let mut names: Vec<String> = actions(&p).into_iter().map(|(n, _)| n).collect();
    names.sort();
    assert_eq!(names.len(), 6, "{names:?}");
    let longest = names.iter().map(String::len).max().unwrap();
    assert!(longest <= 253, "{longest}");
    assert!(
        names
            .iter()
            .any(|n| n.starts_with(&format!("{svc_name}.{port}.v6")))
    );
    assert_eq!(w.plan().writes(), 0);
}

#[test]
fn a_thousand_and_one_pods_on_one_port_chunk_and_converge() {
    let pods: Vec<_> = (0..1001)
        .map(|i| {
            PodBuilder::new(
                &format!("pod-{i:04}"),
                &[&format!("10.1.{}.{}", i / 250, i % 250 + 1)],
            )
            .ports("http")
            .build()
        })
        .collect();
    let mut w = one_port_world(pods.clone());
    let p = w.step();
    let sizes: Vec<usize> = p.slices.iter().map(|s| s.slice.endpoints.len()).collect();
    assert_eq!(sizes.iter().sum::<usize>(), 1001);
    assert_eq!(sizes.len(), 11, "{sizes:?}");
    assert!(sizes.iter().all(|n| *n <= 100));
    assert_eq!(p.ports[0].ready, 1001);
    assert_eq!(w.plan().writes(), 0);

    // At the API's limit of 1,000 per slice: one full slice and one more.
    let mut pm = port_mapping(&["http"]);
    pm.spec.max_endpoints_per_slice = 1000;
    let mut w = World::new(pm, service(vec![sport("http", 80, None)]), pods);
    let p = w.step();
    let mut sizes: Vec<usize> = p.slices.iter().map(|s| s.slice.endpoints.len()).collect();
    sizes.sort();
    assert_eq!(sizes, vec![1, 1000]);
    assert_eq!(w.plan().writes(), 0);
}

#[test]
fn service_labels_cannot_take_our_slices_away() {
    let mut svc = web_service();
    svc.metadata.labels = Some(BTreeMap::from([
        (
            "endpointslice.kubernetes.io/managed-by".to_owned(),
            "endpointslice-controller.k8s.io".to_owned(),
        ),
        ("kubernetes.io/service-name".to_owned(), "other".to_owned()),
        ("team".to_owned(), "a".to_owned()),
    ]));
    let mut w = World::new(port_mapping(&["http", "https"]), svc, seed_pods());
    let p = w.step();
    for s in &p.slices {
        let labels = s.slice.metadata.labels.clone().unwrap();
        assert_eq!(
            labels,
            BTreeMap::from([
                (
                    "endpointslice.kubernetes.io/managed-by".to_owned(),
                    "portmapper.dev".to_owned()
                ),
                ("kubernetes.io/service-name".to_owned(), "web".to_owned()),
                ("team".to_owned(), "a".to_owned()),
            ])
        );
    }
    assert_eq!(w.plan().writes(), 0);
}

#[test]
fn a_service_label_the_api_would_refuse_fails_the_plan_with_nothing_written() {
    let mut svc = web_service();
    svc.metadata.labels = Some(BTreeMap::from([("bad key!".to_owned(), "v".to_owned())]));
    let w = World::new(port_mapping(&["http", "https"]), svc, seed_pods());
    let (pods, slices) = (w.shared_records(), w.slice_refs());
    let r = portmapper_core::plan(&portmapper_core::PlanInput {
        network: &w.network,
        live_slices: &slices,
        now: w.now,
        ..portmapper_core::PlanInput::first_publication(&w.pm, &w.service, &pods, &w.zones)
    });
    match r {
        Err(portmapper_core::PlanError::InvalidRender { kind, name, .. }) => {
            assert_eq!((kind, name.as_str()), ("EndpointSlice", "web.http"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn topology_mode_is_read_as_the_native_controller_reads_it() {
    for (value, warned) in [
        ("Auto", true),
        ("auto", true),
        ("AUTO", false),
        ("Auto ", false),
        ("", false),
    ] {
        let mut svc = web_service();
        svc.metadata.annotations = Some(BTreeMap::from([(
            "service.kubernetes.io/topology-mode".to_owned(),
            value.to_owned(),
        )]));
        let p = World::new(port_mapping(&["http", "https"]), svc, seed_pods()).plan();
        let got = p
            .warnings
            .iter()
            .any(|w| matches!(w, PlanWarning::TopologyModeAuto { .. }));
        assert_eq!(got, warned, "{value:?}");
    }
}

#[test]
fn pods_of_another_namespace_and_pods_without_status_are_never_candidates() {
    let mut elsewhere = PodBuilder::new("elsewhere", &["10.0.0.3"])
        .ports("http")
        .build();
    elsewhere.metadata.namespace = Some("other".into());
    let mut no_status = PodBuilder::new("no-status", &["10.0.0.4"])
        .ports("http")
        .build();
    no_status.status = None;
    let p = one_port_world(vec![
        elsewhere,
        no_status,
        PodBuilder::new("ok", &["10.0.0.5"]).ports("http").build(),
    ])
    .plan();
    assert_eq!(pod_names(&p.slices[0].full()), vec!["ok"]);
    assert_eq!(p.ports[0].candidates, 1);
    assert!(p.ports[0].excluded.is_empty());
}

/// A webhook (or any network check) that says Include cannot override a check that excludes,
/// and verdicts about pods, ports or positions that are not in play are ignored.
#[test]
fn a_lying_network_verdict_cannot_override_other_checks_or_reach_other_pods() {
    let mut pm = port_mapping(&[]);
    pm.spec.ports = vec![portmapper_api::PortRule {
        name: "http".into(),
        checks: vec![
            portmapper_api::Check::pod_ready(),
            portmapper_api::Check {
                webhook: Some(portmapper_api::check::WebhookCheck {
                    url: "https://decider.shop.svc/".into(),
                    timeout_seconds: None,
                    ca_bundle: None,
                }),
                ..portmapper_api::Check::default()
            },
        ],
    }];
    let mut w = World::new(
        pm,
        service(vec![sport("http", 80, None)]),
        vec![
            PodBuilder::new("unready", &["10.0.0.1"]).unready().build(),
            PodBuilder::new("ready", &["10.0.0.2"]).build(),
        ],
    );
    let key = |uid: &str, port: &str, index| NetworkKey {
        pod_uid: uid.into(),
        port_name: port.into(),
        family: kube_validation::IpFamily::V4,
        position: CheckPosition {
            index,
            any_of: None,
        },
    };
    // Lies: Include for the unready pod, for a pod that does not exist, for a port the
    // Service lacks and for a position holding podReady.
    for k in [
        key("uid-unready", "http", 1),
        key("uid-ghost", "http", 1),
        key("uid-ready", "admin", 1),
        key("uid-ready", "http", 0),
    ] {
        w.network.insert(k, Verdict::INCLUDE);
    }
    let p = w.plan();
    assert!(pod_names(&p.slices[0].full()).is_empty());
    assert_eq!(
        excluded(&p, 0),
        vec![
            (
                "ready".into(),
                "webhook: no result yet (abstained; nothing published to keep)".into()
            ),
            (
                "unready".into(),
                "podReady: pod is not Ready (Ready=False)".into()
            ),
        ]
    );
}

#[test]
fn service_type_changes_rewrite_only_what_they_change() {
    let mut w = World::new(port_mapping(&["http", "https"]), web_service(), seed_pods());
    w.step();
    // NodePort, LoadBalancer: nothing about the endpoints changes.
    for t in ["NodePort", "LoadBalancer", "ClusterIP"] {
        w.service.spec.as_mut().unwrap().type_ = Some(t.into());
        assert_eq!(w.plan().writes(), 0, "{t}");
    }
    // Headless: every slice gains the headless label.
    w.service.spec.as_mut().unwrap().cluster_ip = Some("None".into());
    let p = w.step();
    assert_eq!(p.writes(), 2);
    assert!(p.slices.iter().all(|s| {
        s.slice
            .metadata
            .labels
            .as_ref()
            .unwrap()
            .contains_key("service.kubernetes.io/headless")
    }));
    // ExternalName: everything goes, with a warning; back to ClusterIP: everything returns.
    w.service.spec.as_mut().unwrap().type_ = Some("ExternalName".into());
    w.service.spec.as_mut().unwrap().external_name = Some("example.com".into());
    let p = w.step();
    assert!(p.slices.is_empty());
    assert_eq!(p.deletions.len(), 2);
    assert!(p.warnings.contains(&PlanWarning::ExternalName));
    w.service.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
    w.service.spec.as_mut().unwrap().external_name = None;
    w.service.spec.as_mut().unwrap().cluster_ip = Some("10.96.0.10".into());
    let p = w.step();
    assert_eq!(
        actions(&p),
        vec![
            ("web.http".into(), "create"),
            ("web.https".into(), "create")
        ]
    );
    assert_eq!(w.plan().writes(), 0);
}

#[test]
fn a_service_recreated_or_gaining_a_selector_changes_no_slice() {
    let mut w = World::new(port_mapping(&["http", "https"]), web_service(), seed_pods());
    w.step();
    // Deleted and recreated: a new uid, the same name and ports. Our slices are owned by the
    // PortMapping and named after the Service, so they stay as they are.
    w.service.metadata.uid = Some("svc-uid-2".into());
    w.service.spec.as_mut().unwrap().cluster_ip = Some("10.96.0.99".into());
    assert_eq!(w.plan().writes(), 0);
    // A selector appears: the native controller publishes beside us (the operator reports
    // SelectorMigration); our slices do not change.
    w.service.spec.as_mut().unwrap().selector =
        Some(BTreeMap::from([("app".to_owned(), "web".to_owned())]));
    assert_eq!(w.plan().writes(), 0);
}
