//! The prober's work list and its round trip through the planner.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_validation::IpFamily;
use portmapper_api::check::{GrpcCheck, HttpGetCheck, LeafCheck, TcpSocketCheck};
use portmapper_api::{Check, CheckKind, PortRule};
use portmapper_core::{CheckPosition, Verdict, probe_targets};

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

#[test]
fn lists_every_network_check_per_pod_port_and_family_with_positions() {
    let w = world();
    let targets = probe_targets(&w.pm, &w.service, &w.pod_refs()).unwrap();
    let summary: Vec<(String, IpFamily, CheckPosition, &str, Option<i32>)> = targets
        .iter()
        .map(|t| {
            (
                t.pod.metadata.name.clone().unwrap(),
                t.key.family,
                t.key.position,
                t.check.name(),
                t.probe_port,
            )
        })
        .collect();
    let pos = |index, any_of| CheckPosition { index, any_of };
    assert_eq!(
        summary,
        vec![
            (
                "a".into(),
                IpFamily::V4,
                pos(1, None),
                "httpGet",
                Some(9901)
            ),
            (
                "a".into(),
                IpFamily::V4,
                pos(2, Some(0)),
                "tcpSocket",
                Some(8080)
            ),
            (
                "a".into(),
                IpFamily::V4,
                pos(2, Some(1)),
                "grpc",
                Some(8080)
            ),
            (
                "a".into(),
                IpFamily::V6,
                pos(1, None),
                "httpGet",
                Some(9901)
            ),
            (
                "a".into(),
                IpFamily::V6,
                pos(2, Some(0)),
                "tcpSocket",
                Some(8080)
            ),
            (
                "a".into(),
                IpFamily::V6,
                pos(2, Some(1)),
                "grpc",
                Some(8080)
            ),
            ("b".into(), IpFamily::V4, pos(1, None), "httpGet", None),
            (
                "b".into(),
                IpFamily::V4,
                pos(2, Some(0)),
                "tcpSocket",
                Some(8080)
            ),
            (
                "b".into(),
                IpFamily::V4,
                pos(2, Some(1)),
                "grpc",
                Some(8080)
            ),
        ]
    );
    assert_eq!(targets[3].address.to_string(), "fd00::1");
    assert!(targets.iter().all(|t| matches!(
        t.check,
        CheckKind::HttpGet(_) | CheckKind::TcpSocket(_) | CheckKind::Grpc(_)
    )));
}

#[test]
fn results_filed_under_the_listed_keys_drive_the_planner() {
    let mut w = world();
    let results: Vec<_> = probe_targets(&w.pm, &w.service, &w.pod_refs())
        .unwrap()
        .into_iter()
        .map(|t| {
            // grpc passes everywhere; httpGet fails where the pod has no admin port.
            let v = if t.check.name() == "grpc" || t.probe_port.is_some() {
                Verdict::INCLUDE
            } else {
                Verdict::exclude("no admin port")
            };
            (t.key, v)
        })
        .collect();
    w.network = results.into_iter().collect();
    let p = w.plan();
    assert_eq!(pod_names(&p.slices[0].slice), vec!["a"]);
    assert_eq!(pod_names(&p.slices[1].slice), vec!["a"], "IPv6 slice");
    assert_eq!(p.ports[0].excluded[0].reason, "httpGet: no admin port");
}

#[test]
fn nothing_to_probe_under_publish_not_ready_addresses() {
    let mut w = world();
    w.pm.spec.publish_not_ready_addresses = Some(true);
    assert!(
        probe_targets(&w.pm, &w.service, &w.pod_refs())
            .unwrap()
            .is_empty()
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
    let targets = probe_targets(&w.pm, &w.service, &w.pod_refs()).unwrap();
    let listed: Vec<(&str, &str, Option<i32>)> = targets
        .iter()
        .map(|t| (t.key.port_name.as_str(), t.check.name(), t.probe_port))
        .collect();
    // A check with its own port probes that TCP port whatever the Service port's protocol.
    assert_eq!(listed, vec![("dns-health", "httpGet", Some(8080))]);
    w.network = targets
        .into_iter()
        .map(|t| (t.key, Verdict::INCLUDE))
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
