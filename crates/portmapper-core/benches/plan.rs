//! Planner cost at scale: 10,000 pods × 4 Service ports × 2 IP families (80,000 memberships,
//! 100 endpoints per slice → 800 slices). Three cases: a first publication (nothing live), a
//! converged resync (everything live and equal: the steady state), and a resync after one pod
//! went unready. Two more groups plan shape A of the scale bench (IPv4 only, numeric target
//! ports, half the pods list all 4 ports and half list 2) with the per-PortMapping memo, as the
//! operator does, per port (300 slices) and per port set (100 slices): a converged resync and
//! one pod flipping unready and back.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, Pod, PodCondition, PodIP, PodSpec, PodStatus, Service, ServicePort,
    ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use portmapper_api::check::PortNamesCheck;
use portmapper_api::{Check, KeySource, PortMapping, PortMappingSpec, PortRule, SliceGrouping};
use portmapper_core::compact_slice::CompactSlice;
use portmapper_core::{EvalMemo, Plan, PlanInput, PodRecord, plan, plan_with_memo};

const PODS: usize = 10_000;

fn port_mapping() -> PortMapping {
    let checks = vec![
        Check {
            port_names: Some(PortNamesCheck {
                key: "ports".into(),
                from: KeySource::Annotation,
            }),
            ..Check::default()
        },
        Check::pod_ready(),
    ];
    test_support::port_mapping(
        "pm",
        "bench",
        PortMappingSpec {
            ports: ["http", "https", "grpc", "metrics"]
                .iter()
                .map(|n| PortRule {
                    name: (*n).into(),
                    checks: checks.clone(),
                })
                .collect(),
            ..test_support::spec("web", "group")
        },
    )
}

fn service() -> Service {
    let port = |name: &str, port: i32, target: IntOrString| ServicePort {
        name: Some(name.into()),
        port,
        target_port: Some(target),
        protocol: Some("TCP".into()),
        ..ServicePort::default()
    };
    Service {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("bench".into()),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            ip_families: Some(vec!["IPv4".into(), "IPv6".into()]),
            ports: Some(vec![
                port("http", 80, IntOrString::Int(8080)),
                port("https", 443, IntOrString::Int(8443)),
                port("grpc", 9000, IntOrString::String("grpc".into())),
                port("metrics", 9090, IntOrString::Int(9090)),
            ]),
            traffic_distribution: Some("PreferClose".into()),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

fn pods() -> Vec<Pod> {
    (0..PODS)
        .map(|i| Pod {
            metadata: ObjectMeta {
                name: Some(format!("pod-{i}")),
                namespace: Some("bench".into()),
                uid: Some(format!("uid-{i}")),
                labels: Some(BTreeMap::from([("group".to_owned(), "web".to_owned())])),
                annotations: Some(BTreeMap::from([(
                    "ports".to_owned(),
                    "http,https,grpc,metrics".to_owned(),
                )])),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some(format!("node-{}", i % 50)),
                containers: vec![Container {
                    name: "app".into(),
                    ports: Some(vec![ContainerPort {
                        name: Some("grpc".into()),
                        container_port: 9443,
                        ..ContainerPort::default()
                    }]),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                pod_ips: Some(vec![
                    PodIP {
                        ip: format!("10.{}.{}.{}", i / 65536, (i / 256) % 256, i % 256),
                    },
                    PodIP {
                        ip: format!("fd00::{:x}", i + 1),
                    },
                ]),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        })
        .collect()
}

fn run_memo(
    pm: &PortMapping,
    svc: &Service,
    pods: &[Arc<PodRecord>],
    live: &[Arc<CompactSlice>],
    memo: &mut EvalMemo,
) -> Plan {
    plan_with_memo(
        &PlanInput {
            live_slices: live,
            ..PlanInput::first_publication(pm, svc, pods, &BTreeMap::new())
        },
        memo,
    )
    .expect("plan")
}

/// Shape A of the scale bench: IPv4, no topology, numeric target ports, every second pod lists
/// 2 of the 4 ports.
fn shape_a() -> (Service, Vec<Arc<PodRecord>>) {
    let mut svc = service();
    if let Some(spec) = svc.spec.as_mut() {
        spec.ip_families = Some(vec!["IPv4".into()]);
        spec.traffic_distribution = None;
        for port in spec.ports.iter_mut().flatten() {
            port.target_port = Some(IntOrString::Int(port.port + 8000));
        }
    }
    let mut pods = pods();
    for (i, pod) in pods.iter_mut().enumerate() {
        pod.metadata.resource_version = Some(format!("{}", i + 1));
        if let Some(ips) = pod.status.as_mut().and_then(|s| s.pod_ips.as_mut()) {
            ips.truncate(1);
        }
        if i % 2 == 1 {
            pod.metadata.annotations = Some(BTreeMap::from([(
                "ports".to_owned(),
                "http,grpc".to_owned(),
            )]));
        }
    }
    (
        svc,
        pods.into_iter()
            .map(|p| Arc::new(PodRecord::from(p)))
            .collect(),
    )
}

fn set_ready(pod: &mut PodRecord, ready: bool, resource_version: u64) {
    pod.resource_version = resource_version.to_string();
    pod.conditions[0].status = if ready { "True" } else { "False" }.into();
}

/// One flip of pod 4320 and the plan after it; a named function so that instruction counts
/// (`valgrind --tool=callgrind --toggle-collect=plan::flip_once`) can be taken per flip.
#[inline(never)]
fn flip_once(
    pm: &PortMapping,
    svc: &Service,
    pods: &mut [Arc<PodRecord>],
    live: &[Arc<CompactSlice>],
    memo: &mut EvalMemo,
    ready: bool,
    version: u64,
) -> Plan {
    // A new record, as the watch makes for every change of a pod.
    set_ready(Arc::make_mut(&mut pods[4320]), ready, version);
    let plan = run_memo(pm, svc, pods, live, memo);
    assert_eq!(memo.last_pass().evaluated, 1);
    plan
}

fn bench_memo(c: &mut Criterion) {
    for (grouping, name, slices) in [
        (SliceGrouping::PerPort, "per_port", 300),
        (SliceGrouping::PerPortSet, "per_port_set", 100),
    ] {
        let mut pm = port_mapping();
        pm.spec.slice_grouping = grouping;
        let (svc, mut pods) = shape_a();
        let mut memo = EvalMemo::default();
        let first = run_memo(&pm, &svc, &pods, &[], &mut memo);
        assert_eq!(first.slices.len(), slices);
        // Stored as the API server stores them: with a resourceVersion each.
        let live: Vec<Arc<CompactSlice>> = first
            .slices
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut s = (*p.slice).clone();
                s.metadata.resource_version = Some(format!("s{i}"));
                Arc::new(s)
            })
            .collect();
        assert_eq!(run_memo(&pm, &svc, &pods, &live, &mut memo).writes(), 0);

        let mut group = c.benchmark_group(format!("shape_a_10k_pods_with_memo_{name}"));
        group.sample_size(20);
        group.bench_function("converged_resync", |b| {
            b.iter(|| black_box(run_memo(&pm, &svc, &pods, &live, &mut memo)))
        });
        // Each iteration is one flip: pod 4320 (4 ports) alternates unready / ready, with a
        // new resourceVersion each time, against the converged live slices.
        let mut version = 1_000_000u64;
        let mut ready = true;
        group.bench_function("one_pod_flip", |b| {
            b.iter(|| {
                version += 1;
                ready = !ready;
                black_box(flip_once(
                    &pm, &svc, &mut pods, &live, &mut memo, ready, version,
                ))
            })
        });
        group.finish();
    }
}

fn run(
    pm: &PortMapping,
    svc: &Service,
    pods: &[Arc<PodRecord>],
    zones: &BTreeMap<String, String>,
    live: &[Arc<CompactSlice>],
) -> Plan {
    plan(&PlanInput {
        live_slices: live,
        ..PlanInput::first_publication(pm, svc, pods, zones)
    })
    .expect("plan")
}

fn bench(c: &mut Criterion) {
    // Per port, as the figures in docs/benchmarks.md were taken.
    let mut pm = port_mapping();
    pm.spec.slice_grouping = SliceGrouping::PerPort;
    let svc = service();
    let mut pods: Vec<Arc<PodRecord>> = pods()
        .into_iter()
        .map(|p| Arc::new(PodRecord::from(p)))
        .collect();
    let zones: BTreeMap<String, String> = (0..50)
        .map(|n| (format!("node-{n}"), format!("zone-{}", n % 3)))
        .collect();
    let first = run(&pm, &svc, &pods, &zones, &[]);
    assert_eq!(first.slices.len(), 800);
    let live: Vec<Arc<CompactSlice>> = first.slices.iter().map(|p| p.slice.clone()).collect();
    assert_eq!(run(&pm, &svc, &pods, &zones, &live).writes(), 0);

    let mut group = c.benchmark_group("plan_10k_pods_4_ports_2_families");
    group.sample_size(10);
    group.bench_function("first_publication", |b| {
        b.iter(|| black_box(run(&pm, &svc, &pods, &zones, &[])))
    });
    group.bench_function("converged_resync", |b| {
        b.iter(|| black_box(run(&pm, &svc, &pods, &zones, &live)))
    });
    Arc::make_mut(&mut pods[4321]).conditions[0].status = "False".into();
    let one = run(&pm, &svc, &pods, &zones, &live);
    assert_eq!(one.writes(), 8, "one pod leaves 4 ports × 2 families");
    group.bench_function("one_pod_unready", |b| {
        b.iter(|| black_box(run(&pm, &svc, &pods, &zones, &live)))
    });
    group.finish();
}

criterion_group!(benches, bench, bench_memo);
criterion_main!(benches);
