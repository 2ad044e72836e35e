//! The network lookups a plan reports (the prober's work list) and their round trip through
//! the planner.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_validation::IpFamily;
use portmapper_api::check::{GrpcCheck, HttpGetCheck, LeafCheck, TcpSocketCheck};
use portmapper_api::{Check, PortRule};
use portmapper_core::{CheckPosition, NetworkLookup, Plan, Verdict};

use crate::fixtures::*;

fn world() -> World {
    let mut pm = port_mapping(&[]);
    pm.spec.ports = vec![PortRule {
        name: "http".into(),
        checks: vec![
            Check::pod_ready(),
            Check {
                http_get: Some(HttpGetCheck {
                    port: Some(IntOrString::String("admin".into())),
                    ..HttpGetCheck::default()
                }),
                ..Check::default()
            },
            Check {
                any_of: Some(vec![
                    LeafCheck {
                        tcp_socket: Some(TcpSocketCheck::default()),
                        ..LeafCheck::default()
                    },
                    LeafCheck {
                        grpc: Some(GrpcCheck::default()),
                        ..LeafCheck::default()
                    },
                ]),
                ..Check::default()
            },
        ],
    }];
    let mut svc = service(vec![
        sport("http", 80, Some(IntOrString::Int(8080))),
        sport("metrics", 9090, None),
    ]);
    svc.spec.as_mut().expect("spec").ip_families = Some(vec!["IPv4".into(), "IPv6".into()]);
    World::new(
        pm,
        svc,
        vec![
            PodBuilder::new("a", &["10.0.0.1", "fd00::1"])
                .container_port("admin", 9901)
                .build(),
            PodBuilder::new("b", &["10.0.0.2"]).build(),
            PodBuilder::new("gone", &["10.0.0.3"])
                .phase("Succeeded")
                .build(),
        ],
    )
}

/// (pod, family, position, address, target port, published) of every lookup.
fn summary(w: &World, plan: &Plan) -> Vec<(String, IpFamily, CheckPosition, String, i32, bool)> {
    plan.network_lookups
        .iter()
        .map(|l: &NetworkLookup| {
            (
                w.pods[l.pod].metadata.name.clone().unwrap_or_default(),
                l.key.family,
                l.key.position,
                l.address.to_string(),
                l.target_port,
                l.published,
            )
        })
        .collect()
}

fn pos(index: usize, any_of: Option<usize>) -> CheckPosition {
    CheckPosition { index, any_of }
}

#[test]
fn lists_every_network_check_per_pod_port_and_family_with_positions() {
    let w = world();
    let p = w.plan();
    let row = |pod: &str, family, position, address: &str| {
        (
            pod.to_owned(),
            family,
            position,
            address.to_owned(),
            8080,
            false,
        )
    };
    // Port-major, then family, then pod; the terminal pod and the unprobed port list nothing.
    assert_eq!(
        summary(&w, &p),
        vec![
            row("a", IpFamily::V4, pos(1, None), "10.0.0.1"),
            row("a", IpFamily::V4, pos(2, Some(0)), "10.0.0.1"),
            row("a", IpFamily::V4, pos(2, Some(1)), "10.0.0.1"),
            row("b", IpFamily::V4, pos(1, None), "10.0.0.2"),
            row("b", IpFamily::V4, pos(2, Some(0)), "10.0.0.2"),
            row("b", IpFamily::V4, pos(2, Some(1)), "10.0.0.2"),
            row("a", IpFamily::V6, pos(1, None), "fd00::1"),
            row("a", IpFamily::V6, pos(2, Some(0)), "fd00::1"),
            row("a", IpFamily::V6, pos(2, Some(1)), "fd00::1"),
        ]
    );
    assert!(
        p.network_lookups
            .iter()
            .all(|l| l.key.port_name == "http" && l.service_port == 0)
    );
    assert_eq!(
        p.network_lookups[0].key.pod_uid,
        w.pods[0].metadata.uid.clone().unwrap()
    );
}

#[test]
fn results_filed_under_the_listed_keys_drive_the_planner() {
    let mut w = world();
    let lookups = w.plan().network_lookups;
    w.network = lookups
        .into_iter()
        .map(|l| {
            // Everything passes but pod b's httpGet (it has no admin port).
            let v = if l.key.position == pos(1, None)
                && w.pods[l.pod].metadata.name.as_deref() == Some("b")
            {
                Verdict::exclude("no admin port")
            } else {
                Verdict::INCLUDE
            };
            (l.key, v)
        })
        .collect();
    let p = w.plan();
    assert_eq!(pod_names(&p.slices[0].full()), vec!["a"]);
    assert_eq!(pod_names(&p.slices[1].full()), vec!["a"], "IPv6 slice");
    assert_eq!(p.ports[0].excluded[0].reason, "httpGet: no admin port");
    assert_eq!(
        p.network_lookups.len(),
        9,
        "results do not change what is looked up"
    );
}

#[test]
fn nothing_to_probe_under_publish_not_ready_addresses() {
    let mut w = world();
    w.pm.spec.publish_not_ready_addresses = Some(true);
    assert_eq!(w.plan().network_lookups, vec![]);
}

#[test]
fn pods_the_other_checks_exclude_are_not_probed_wherever_the_network_check_sits() {
    let mut pm = port_mapping(&[]);
    let http = Check {
        http_get: Some(HttpGetCheck::default()),
        ..Check::default()
    };
    // The network check first: its result is read before portNames decides.
    pm.spec.ports = vec![PortRule {
        name: "http".into(),
        checks: vec![http, port_names_check()],
    }];
    let mut w = World::new(
        pm,
        service(vec![sport("http", 80, Some(IntOrString::Int(8080)))]),
        vec![
            PodBuilder::new("a", &["10.0.0.1"]).ports("http").build(),
            PodBuilder::new("b", &["10.0.0.2"]).ports("admin").build(),
        ],
    );
    let names =
        |w: &World, p: &Plan| -> Vec<String> { summary(w, p).into_iter().map(|r| r.0).collect() };
    assert_eq!(names(&w, &w.plan()), vec!["a"]);
    // A failing probe result still leaves the pod probed (so it can come back).
    w.network = w
        .plan()
        .network_lookups
        .into_iter()
        .map(|l| (l.key, Verdict::exclude("503")))
        .collect();
    let p = w.plan();
    assert_eq!(names(&w, &p), vec!["a"]);
    assert_eq!(p.ports[0].excluded.len(), 2);
}

#[test]
fn an_any_of_sibling_that_includes_keeps_the_network_entry_probed() {
    let mut pm = port_mapping(&[]);
    pm.spec.ports = vec![PortRule {
        name: "http".into(),
        checks: vec![Check {
            any_of: Some(vec![
                LeafCheck {
                    pod_ready: Some(Default::default()),
                    ..LeafCheck::default()
                },
                LeafCheck {
                    grpc: Some(GrpcCheck::default()),
                    ..LeafCheck::default()
                },
            ]),
            ..Check::default()
        }],
    }];
    let w = World::new(
        pm,
        service(vec![sport("http", 80, Some(IntOrString::Int(8080)))]),
        vec![PodBuilder::new("a", &["10.0.0.1"]).build()],
    );
    // podReady includes, so grpc is not read this pass; it is probed all the same, so a
    // result is there the moment the pod turns unready.
    let p = w.plan();
    assert_eq!(p.ports[0].ready, 1);
    assert_eq!(
        summary(&w, &p).into_iter().map(|r| r.2).collect::<Vec<_>>(),
        vec![pos(0, Some(1))]
    );
}

#[test]
fn lookups_index_the_input_pods_and_carry_what_is_published() {
    let mut w = world();
    // A pod outside the pool first: indices are into the planner's input, not the pool.
    let mut stranger = PodBuilder::new("stranger", &["10.0.0.9"]).build();
    stranger.metadata.labels = None;
    w.pods.insert(0, stranger);
    w.network = w
        .plan()
        .network_lookups
        .into_iter()
        .map(|l| (l.key, Verdict::INCLUDE))
        .collect();
    let first = w.step();
    assert_eq!(pod_names(&first.slices[0].full()), vec!["a", "b"]);
    let p = w.plan();
    let rows = summary(&w, &p);
    assert_eq!(rows.len(), 9);
    assert!(rows.iter().all(|r| r.0 == "a" || r.0 == "b"), "{rows:?}");
    assert!(
        rows.iter().all(|r| r.5),
        "every looked-up membership is published now"
    );
}

#[test]
fn probes_without_their_own_port_are_not_run_on_udp_ports_and_exclude_with_a_reason() {
    let mut pm = port_mapping(&[]);
    let check = |c: Check| vec![c];
    pm.spec.ports = vec![
        PortRule {
            name: "dns".into(),
            checks: check(Check {
                tcp_socket: Some(TcpSocketCheck::default()),
                ..Check::default()
            }),
        },
        PortRule {
            name: "dns-health".into(),
            checks: check(Check {
                http_get: Some(HttpGetCheck {
                    port: Some(IntOrString::Int(8080)),
                    ..HttpGetCheck::default()
                }),
                ..Check::default()
            }),
        },
    ];
    let mut dns = sport("dns", 53, Some(IntOrString::Int(53)));
    dns.protocol = Some("UDP".into());
    let mut dns_health = sport("dns-health", 54, Some(IntOrString::Int(54)));
    dns_health.protocol = Some("UDP".into());
    let mut w = World::new(
        pm,
        service(vec![dns, dns_health]),
        vec![PodBuilder::new("a", &["10.0.0.1"]).build()],
    );
    let lookups = w.plan().network_lookups;
    let listed: Vec<(&str, usize, i32)> = lookups
        .iter()
        .map(|l| (l.key.port_name.as_str(), l.service_port, l.target_port))
        .collect();
    // A check with its own port probes that TCP port whatever the Service port's protocol.
    assert_eq!(listed, vec![("dns-health", 1, 54)]);
    w.network = lookups
        .into_iter()
        .map(|l| (l.key, Verdict::INCLUDE))
        .collect();
    let p = w.plan();
    let dns_status = p.ports.iter().find(|s| s.name == "dns").unwrap();
    assert_eq!(dns_status.ready, 0);
    assert_eq!(
        dns_status.excluded[0].reason,
        "tcpSocket: Service port dns is UDP; a probe without its own port would dial it over TCP (set the check's port)"
    );
    let health = p.ports.iter().find(|s| s.name == "dns-health").unwrap();
    assert_eq!(health.ready, 1);
}
