//! The publication readiness gate (`portmapper.dev/published`): what condition the plan asks
//! each gated pool pod to carry, and only when it differs.

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodReadinessGate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube_validation::IpFamily;
use portmapper_api::check::HttpGetCheck;
use portmapper_api::{Check, PortRule};
use portmapper_core::{CheckPosition, NetworkKey, PUBLISHED_GATE, Plan, PodGate, Verdict};

use crate::fixtures::*;

fn set_condition(pod: &mut Pod, type_: &str, status: &str) {
    let conditions = pod
        .status
        .as_mut()
        .expect("test fixture")
        .conditions
        .get_or_insert_with(Vec::new);
    conditions.retain(|c| c.type_ != type_);
    conditions.push(PodCondition {
        type_: type_.into(),
        status: status.into(),
        ..PodCondition::default()
    });
}

/// A pod gated on publication, as kubelet leaves it before our gate: containers ready, Ready
/// False (it waits for the gate).
fn gated(builder: PodBuilder) -> Pod {
    let mut pod = builder.build();
    pod.spec.as_mut().expect("test fixture").readiness_gates = Some(vec![PodReadinessGate {
        condition_type: PUBLISHED_GATE.into(),
    }]);
    set_condition(&mut pod, "Ready", "False");
    set_condition(&mut pod, "ContainersReady", "True");
    pod
}

/// Writes the plan's gates onto the pods, as the executor's pods/status patch does.
fn apply_gates(w: &mut World, plan: &Plan) {
    for g in &plan.pod_gates {
        let pod = w
            .pods
            .iter_mut()
            .find(|p| p.metadata.uid.as_deref() == Some(g.uid.as_str()))
            .expect("test fixture");
        let conditions = pod
            .status
            .as_mut()
            .expect("test fixture")
            .conditions
            .as_mut()
            .expect("test fixture");
        conditions.retain(|c| c.type_ != PUBLISHED_GATE);
        conditions.push(PodCondition {
            type_: PUBLISHED_GATE.into(),
            status: if g.status { "True" } else { "False" }.into(),
            reason: Some(g.reason.into()),
            message: Some(g.message.clone()),
            last_transition_time: g.last_transition_time.clone(),
            ..PodCondition::default()
        });
    }
}

fn step(w: &mut World) -> Plan {
    let p = w.step();
    apply_gates(w, &p);
    p
}

fn gate(pod: &str, status: bool, reason: &'static str, message: &str, at: Timestamp) -> PodGate {
    PodGate {
        pod: pod.into(),
        uid: format!("uid-{pod}"),
        status,
        reason,
        message: message.into(),
        last_transition_time: Some(Time(at)),
    }
}

fn gated_world() -> World {
    let pods = vec![
        gated(PodBuilder::new("pod-a", &["10.0.0.1"]).ports("http")),
        gated(PodBuilder::new("pod-b", &["10.0.0.2"]).ports("http,https")),
        // Not gated: never written.
        PodBuilder::new("pod-c", &["10.0.0.3"])
            .ports("http,https")
            .build(),
    ];
    World::new(port_mapping(&["http", "https"]), web_service(), pods)
}

#[test]
fn a_published_gated_pod_gets_true_once_and_then_nothing() {
    let mut w = gated_world();
    let t0 = w.now;
    let p = step(&mut w);
    // podReady read ContainersReady: the gated pods are published although Ready is False.
    assert_eq!(
        pod_names(w.slice("web.http").expect("test fixture")),
        vec!["pod-a", "pod-b", "pod-c"]
    );
    assert_eq!(
        pod_names(w.slice("web.https").expect("test fixture")),
        vec!["pod-b", "pod-c"]
    );
    assert_eq!(
        p.pod_gates,
        vec![
            gate(
                "pod-a",
                true,
                "Published",
                "published on every port it serves: http",
                t0
            ),
            gate(
                "pod-b",
                true,
                "Published",
                "published on every port it serves: http, https",
                t0
            ),
        ]
    );
    assert_eq!(p.writes(), 2 + 2, "two slices and two gates");
    w.now = t0 + k8s_openapi::jiff::SignedDuration::from_secs(10);
    let p = w.plan();
    assert!(p.pod_gates.is_empty(), "{:?}", p.pod_gates);
    assert_eq!(p.writes(), 0);
}

#[test]
fn a_port_the_pod_stops_serving_no_longer_counts_and_the_transition_time_stays() {
    let mut w = gated_world();
    let t0 = w.now;
    step(&mut w);
    w.now = t0 + k8s_openapi::jiff::SignedDuration::from_secs(10);
    // pod-b leaves https by its own annotation (a backing check): still True, new message.
    w.pod_mut("pod-b")
        .metadata
        .annotations
        .as_mut()
        .expect("test fixture")
        .insert(PORTS_KEY.into(), "http".into());
    let p = step(&mut w);
    assert_eq!(
        p.pod_gates,
        vec![gate(
            "pod-b",
            true,
            "Published",
            "published on every port it serves: http",
            t0
        )]
    );
}

#[test]
fn an_unhealthy_gated_pod_gets_false_naming_every_port_and_why() {
    let mut w = gated_world();
    let t0 = w.now;
    step(&mut w);
    let t1 = t0 + k8s_openapi::jiff::SignedDuration::from_secs(10);
    w.now = t1;
    set_condition(w.pod_mut("pod-b"), "ContainersReady", "False");
    let p = step(&mut w);
    assert_eq!(
        pod_names(w.slice("web.https").expect("test fixture")),
        vec!["pod-c"],
        "pod-b dropped"
    );
    assert_eq!(
        p.pod_gates,
        vec![gate(
            "pod-b",
            false,
            "NotPublished",
            "not published on port http: podReady: containers are not ready (ContainersReady=False); \
             port https: podReady: containers are not ready (ContainersReady=False)",
            t1
        )]
    );
    assert_eq!(w.plan().writes(), 0);
}

#[test]
fn a_pod_waiting_for_its_probe_is_not_published_yet() {
    let mut pm = port_mapping(&[]);
    pm.spec.ports = vec![PortRule {
        name: "http".into(),
        checks: vec![Check {
            http_get: Some(HttpGetCheck::default()),
            ..Check::default()
        }],
    }];
    let mut w = World::new(
        pm,
        service(vec![sport("http", 80, None)]),
        vec![gated(PodBuilder::new("a", &["10.0.0.1"]))],
    );
    let t0 = w.now;
    let p = step(&mut w);
    assert_eq!(
        p.pod_gates,
        vec![PodGate {
            pod: "a".into(),
            uid: "uid-a".into(),
            status: false,
            reason: "NotPublished",
            message: "not published on port http: httpGet: no result yet (abstained; nothing published to keep)".into(),
            last_transition_time: Some(Time(t0)),
        }]
    );
    w.network = [(
        NetworkKey {
            pod_uid: "uid-a".into(),
            port_name: "http".into(),
            family: IpFamily::V4,
            position: CheckPosition::default(),
        },
        Verdict::INCLUDE,
    )]
    .into_iter()
    .collect();
    let t1 = t0 + k8s_openapi::jiff::SignedDuration::from_secs(3);
    w.now = t1;
    let p = step(&mut w);
    assert_eq!(
        pod_names(w.slice("web.http").expect("test fixture")),
        vec!["a"]
    );
    assert_eq!(
        p.pod_gates,
        vec![PodGate {
            pod: "a".into(),
            uid: "uid-a".into(),
            status: true,
            reason: "Published",
            message: "published on every port it serves: http".into(),
            last_transition_time: Some(Time(t1)),
        }]
    );
}

#[test]
fn a_gated_pod_without_an_address_is_false() {
    let mut w = World::new(
        port_mapping(&["http"]),
        web_service(),
        vec![gated(PodBuilder::new("pod-a", &[]).ports("http"))],
    );
    let p = step(&mut w);
    assert_eq!(
        p.pod_gates,
        vec![gate(
            "pod-a",
            false,
            "NoAddress",
            "the pod has no IP address yet",
            w.now
        )]
    );
}

#[test]
fn plans_with_and_without_memo_agree_on_gates() {
    let mut w = gated_world();
    let mut memo = portmapper_core::EvalMemo::default();
    for pod in &mut w.pods {
        pod.metadata.resource_version = Some("1".into());
    }
    let full = w.plan();
    assert_eq!(
        w.try_plan_with(Some(&mut memo)).expect("test fixture"),
        full
    );
    // The same pods again: the memo reuses every outcome, the gates are still planned.
    assert_eq!(
        w.try_plan_with(Some(&mut memo)).expect("test fixture"),
        full
    );
    assert_eq!(memo.last_pass().reused, 3);
    assert_eq!(full.pod_gates.len(), 2);
}
