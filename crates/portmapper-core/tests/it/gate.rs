//! The publication readiness gate (`portmapper.dev/published`): what condition the plan asks
//! each gated pool pod to carry, and only when it differs.

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodReadinessGate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube_validation::IpFamily;
use portmapper_api::check::HttpGetCheck;
use portmapper_api::{Check, PortRule};
use portmapper_core::{
    CheckPosition, NetworkKey, PUBLISHED_GATE, Plan, PodGate, PodRecord, Verdict,
};

use std::collections::BTreeMap;

use portmapper_core::EvalMemo;

use crate::fixtures::*;

fn set_condition(pod: &mut Pod, type_: &str, status: &str) {
    let conditions = pod
        .status
        .as_mut()
        .expect("test fixture")
        .conditions
        .get_or_insert_with(Vec::new);
    conditions.retain(|c| c.type_ != type_);
    // kubelet's reason for a gated pod whose containers are ready.
    let reason = (type_ == "Ready" && status == "False").then(|| "ReadinessGatesNotReady".into());
    conditions.push(PodCondition {
        type_: type_.into(),
        status: status.into(),
        reason,
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
            observed_generation: g.observed_generation,
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
        condition_type: PUBLISHED_GATE.into(),
        uid: format!("uid-{pod}"),
        status,
        reason,
        message: message.into(),
        last_transition_time: Some(Time(at)),
        observed_generation: None,
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
fn a_never_published_gated_pod_on_a_node_known_not_ready_stays_unpublished() {
    // The node went before the first pass: kubelet's `ReadinessGatesNotReady` stays on the pods
    // (the node-lifecycle controller only turns a True Ready False), so only the node tells.
    let mut w = gated_world();
    w.unready_nodes = BTreeMap::from([("node-1".to_owned(), "Unknown".to_owned())]);
    let t0 = w.now;
    let mut memo = EvalMemo::default();
    let p = w.try_plan_with(Some(&mut memo)).expect("plan");
    assert_eq!(p, w.plan(), "the memo changes no plan");
    w.apply(&p);
    apply_gates(&mut w, &p);
    let why = "podReady: its node node-1 is not Ready (Ready=Unknown)";
    assert_eq!(
        p.pod_gates,
        vec![
            gate(
                "pod-a",
                false,
                "NotPublished",
                &format!("not published on port http: {why}"),
                t0
            ),
            gate(
                "pod-b",
                false,
                "NotPublished",
                &format!("not published on port http: {why}; port https: {why}"),
                t0
            ),
        ]
    );
    // The pod without our gate reads its own Ready (True here: the node-lifecycle controller
    // turns it False, and then it goes as the native controller's does).
    assert_eq!(
        pod_names(w.slice("web.http").expect("test fixture")),
        vec!["pod-c"]
    );

    // The node is Ready again: the memo forgets what it read, and the pods are published.
    w.unready_nodes.clear();
    let t1 = t0 + k8s_openapi::jiff::SignedDuration::from_secs(10);
    w.now = t1;
    let p = w.try_plan_with(Some(&mut memo)).expect("plan");
    assert_eq!(p, w.plan(), "the memo changes no plan");
    w.apply(&p);
    assert_eq!(
        pod_names(w.slice("web.http").expect("test fixture")),
        vec!["pod-a", "pod-b", "pod-c"]
    );
    assert_eq!(
        p.pod_gates
            .iter()
            .map(|g| (g.pod.as_str(), g.status))
            .collect::<Vec<_>>(),
        [("pod-a", true), ("pod-b", true)]
    );

    // Another node's readiness is none of these pods' business.
    w.unready_nodes = BTreeMap::from([("node-2".to_owned(), "False".to_owned())]);
    apply_gates(&mut w, &p);
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
            condition_type: PUBLISHED_GATE.into(),
            uid: "uid-a".into(),
            status: false,
            reason: "NotPublished",
            message: "not published on port http: httpGet: no result yet (abstained; nothing published to keep)".into(),
            last_transition_time: Some(Time(t0)),
            observed_generation: None,
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
            condition_type: PUBLISHED_GATE.into(),
            uid: "uid-a".into(),
            status: true,
            reason: "Published",
            message: "published on every port it serves: http".into(),
            last_transition_time: Some(Time(t1)),
            observed_generation: None,
        }]
    );
}

#[test]
fn a_probed_port_whose_backing_check_leaves_the_pod_out_does_not_count() {
    // https is probed, but only for pods listing it: a pod listing http alone is published on
    // every port it serves once http has it, whatever https's probe says.
    let mut pm = port_mapping(&["http"]);
    pm.spec.ports.push(PortRule {
        name: "https".into(),
        checks: vec![
            Check::pod_ready(),
            Check {
                http_get: Some(HttpGetCheck::default()),
                ..Check::default()
            },
            port_names_check(),
        ],
    });
    let mut w = World::new(
        pm,
        web_service(),
        vec![
            gated(PodBuilder::new("a", &["10.0.0.1"]).ports("http")),
            gated(PodBuilder::new("b", &["10.0.0.2"]).ports("http,https")),
            gated(PodBuilder::new("c", &["10.0.0.3"]).ports("http")),
        ],
    );
    // c's containers are not ready: podReady excludes it before portNames is reached.
    set_condition(&mut w.pods[2], "ContainersReady", "False");
    w.network = ["uid-a", "uid-b", "uid-c"]
        .into_iter()
        .map(|uid| {
            let key = NetworkKey {
                pod_uid: uid.into(),
                port_name: "https".into(),
                family: IpFamily::V4,
                position: CheckPosition::top(1),
            };
            (key, Verdict::exclude("GET / answered HTTP 503"))
        })
        .collect();
    let t0 = w.now;
    let p = step(&mut w);
    assert_eq!(
        p.pod_gates,
        vec![
            gate(
                "a",
                true,
                "Published",
                "published on every port it serves: http",
                t0
            ),
            gate(
                "b",
                false,
                "NotPublished",
                "not published on port https: httpGet: GET / answered HTTP 503",
                t0
            ),
            gate(
                "c",
                false,
                "NotPublished",
                "not published on port http: podReady: containers are not ready (ContainersReady=False)",
                t0
            ),
        ]
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

/// A pod listing `types` as readiness gates, ContainersReady and Ready False (kubelet waits).
fn gated_on(builder: PodBuilder, types: &[&str]) -> Pod {
    let mut pod = builder.build();
    pod.spec.as_mut().expect("test fixture").readiness_gates = Some(
        types
            .iter()
            .map(|t| PodReadinessGate {
                condition_type: (*t).into(),
            })
            .collect(),
    );
    set_condition(&mut pod, "Ready", "False");
    set_condition(&mut pod, "ContainersReady", "True");
    pod
}

#[test]
fn a_gate_type_of_its_own_is_the_one_planned_and_podready_reads_past_peer_gates() {
    let pods = vec![gated_on(
        PodBuilder::new("pod-a", &["10.0.0.1"]).ports("http"),
        &["example.com/web", "example.com/admin"],
    )];
    let mut pm = port_mapping(&["http"]);
    pm.spec.readiness_gate = Some(portmapper_api::ReadinessGate {
        condition_type: "example.com/web".into(),
        timeout_seconds: None,
    });
    let mut w = World::new(pm, web_service(), pods);
    // example.com/admin is nobody's gate as far as this plan knows: podReady waits for it.
    let p = w.plan();
    assert!(pod_names(&p.slices[0].full()).is_empty());
    assert_eq!(
        (p.pod_gates.len(), p.pod_gates[0].condition_type.as_str()),
        (1, "example.com/web")
    );
    assert_eq!(
        p.pod_gates[0].message,
        "not published on port http: podReady: readiness gate example.com/admin has no condition; \
         port https: podReady: readiness gate example.com/admin has no condition"
    );
    // Another PortMapping sets it: podReady reads past it, the pod is published and gated True.
    w.gate_peers.types.insert("example.com/admin".into());
    let p = w.plan();
    assert_eq!(pod_names(&p.slices[0].full()), ["pod-a"]);
    assert_eq!(
        (p.pod_gates[0].status, p.pod_gates[0].reason),
        (true, "Published")
    );
    // The default type is not this PortMapping's: a pod gated only on it is not written.
    w.pods = vec![gated(PodBuilder::new("pod-b", &["10.0.0.2"]).ports("http"))];
    assert!(w.plan().pod_gates.is_empty());
}

#[test]
fn a_pod_an_older_portmapping_gates_is_left_to_it() {
    let mut w = gated_world();
    w.gate_peers
        .managed_by
        .insert("pod-a".into(), "older".into());
    let p = w.plan();
    let gated: Vec<&str> = p.pod_gates.iter().map(|g| g.pod.as_str()).collect();
    assert_eq!(gated, ["pod-b"]);
    // Still published: only the condition is the other's to write.
    assert_eq!(pod_names(&p.slices[0].full()), ["pod-a", "pod-b", "pod-c"]);
}

/// The gate settings of `w`'s PortMapping with `peers`.
fn settings<'a>(
    w: &'a World,
    peers: &'a portmapper_core::GatePeers,
) -> portmapper_core::planner::GateSettings<'a> {
    portmapper_core::planner::GateSettings::of(&w.pm, peers, w.now)
}

#[test]
fn stalled_gates_keep_published_pods_and_turn_the_others_false() {
    use portmapper_core::planner::stalled_pod_gates;
    let mut w = gated_world();
    step(&mut w);
    // A new gated pod the frozen slices do not name; pod-b has its condition True already.
    w.pods
        .push(gated(PodBuilder::new("pod-d", &["10.0.0.4"]).ports("http")));
    let records = w.pod_records();
    let pods = refs(&records);
    let slices = w.slice_refs();
    let slices: Vec<_> = slices.iter().map(AsRef::as_ref).collect();
    let none = portmapper_core::GatePeers::default();
    let stalled = ("InvalidSpec", "PortMapping web publishes nothing new: bad");
    let gates = stalled_pod_gates(&pods, &settings(&w, &none), &slices, stalled).gates;
    assert_eq!(
        gates,
        [gate("pod-d", false, "InvalidSpec", stalled.1, w.now)]
    );
    // The slices are gone (Service deleted): every gated pod is False, the ungated one untouched.
    let gates = stalled_pod_gates(&pods, &settings(&w, &none), &[], stalled).gates;
    let names: Vec<(&str, bool)> = gates.iter().map(|g| (g.pod.as_str(), g.status)).collect();
    assert_eq!(
        names,
        [("pod-a", false), ("pod-b", false), ("pod-d", false)]
    );
    // Already False with that reason and message: no write.
    w.pods
        .retain(|p| p.metadata.name.as_deref() == Some("pod-d"));
    let p = Plan {
        pod_gates: gates.into_iter().filter(|g| g.pod == "pod-d").collect(),
        ..Plan::default()
    };
    apply_gates(&mut w, &p);
    let records = w.pod_records();
    let pods = refs(&records);
    let again = stalled_pod_gates(&pods, &settings(&w, &none), &[], stalled);
    assert_eq!(again, portmapper_core::planner::GateChanges::default());
    // A pod an older PortMapping gates is left to it.
    let mut peers = portmapper_core::GatePeers::default();
    peers.managed_by.insert("pod-a".into(), "older".into());
    let pods = [gated(PodBuilder::new("pod-a", &["10.0.0.1"]).ports("http"))];
    let records: Vec<PodRecord> = pods.iter().map(PodRecord::from).collect();
    let left = stalled_pod_gates(&refs(&records), &settings(&w, &peers), &[], stalled);
    assert!(left.gates.is_empty());
}

// ---- Release, timeout, observedGeneration ---------------------------------------------------

/// Sets the pod's ContainersReady condition True since `at`.
fn containers_ready_since(pod: &mut Pod, at: Timestamp) {
    set_condition(pod, "ContainersReady", "True");
    let conditions = pod
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
        .expect("test fixture");
    for c in conditions
        .iter_mut()
        .filter(|c| c.type_ == "ContainersReady")
    {
        c.last_transition_time = Some(Time(at));
    }
}

/// `pod-a` serves http, which is probed (no result yet: never published), with a 30 s gate
/// timeout; its containers became ready at the world's start.
fn timeout_world() -> World {
    let mut pm = port_mapping(&["http"]);
    pm.spec.ports = vec![PortRule {
        name: "http".into(),
        checks: vec![Check {
            http_get: Some(HttpGetCheck::default()),
            ..Check::default()
        }],
    }];
    pm.spec.readiness_gate = Some(portmapper_api::ReadinessGate {
        timeout_seconds: Some(30),
        ..portmapper_api::ReadinessGate::default()
    });
    let mut w = World::new(
        pm,
        service(vec![sport("http", 80, None)]),
        vec![gated(PodBuilder::new("pod-a", &["10.0.0.1"]))],
    );
    let now = w.now;
    containers_ready_since(&mut w.pods[0], now);
    w
}

#[test]
fn a_gate_held_past_its_timeout_turns_true_timed_out_once_and_the_plan_names_its_deadline() {
    let mut w = timeout_world();
    let t0 = w.now;
    let p = step(&mut w);
    assert_eq!(p.pod_gates.len(), 1);
    assert_eq!(
        (p.pod_gates[0].status, p.pod_gates[0].reason),
        (false, "NotPublished")
    );
    let deadline = t0 + k8s_openapi::jiff::SignedDuration::from_secs(30);
    assert_eq!(p.gate_deadline, Some(deadline));
    assert!(p.gate_timeouts.is_empty());
    // One second before: still held, the same deadline, nothing to write.
    w.now = deadline - k8s_openapi::jiff::SignedDuration::from_secs(1);
    let p = step(&mut w);
    assert!(p.pod_gates.is_empty());
    assert_eq!(p.gate_deadline, Some(deadline));
    // At the deadline: True, TimedOut, naming the port; one timeout to warn about.
    w.now = deadline;
    let p = step(&mut w);
    assert_eq!(
        p.pod_gates,
        [gate(
            "pod-a",
            true,
            "TimedOut",
            "not published (port http) 30s after the containers became ready: the gate no \
             longer waits",
            deadline
        )]
    );
    assert_eq!(
        p.gate_timeouts,
        [portmapper_core::planner::GateTimeout {
            pod: "pod-a".into(),
            uid: "uid-pod-a".into(),
            not_published: "port http".into(),
            timeout_seconds: 30,
        }]
    );
    assert_eq!(p.gate_deadline, None);
    assert_eq!(
        p.gate_timeouts[0].to_string(),
        "pod pod-a is not published (port http) 30s after its containers became ready: its \
         publication gate is True (TimedOut) and no longer waits"
    );
    // Written: the next pass has nothing to say, and no second timeout.
    let p = step(&mut w);
    assert!(p.pod_gates.is_empty() && p.gate_timeouts.is_empty());
    // Published after all: True, Published (the status does not flip: the time is kept).
    w.network = [(
        NetworkKey {
            pod_uid: "uid-pod-a".into(),
            port_name: "http".into(),
            family: IpFamily::V4,
            position: CheckPosition::default(),
        },
        Verdict::INCLUDE,
    )]
    .into_iter()
    .collect();
    let p = step(&mut w);
    assert_eq!(
        p.pod_gates,
        [gate(
            "pod-a",
            true,
            "Published",
            "published on every port it serves: http",
            deadline
        )]
    );
}

#[test]
fn without_ready_containers_or_a_timeout_nothing_times_out() {
    let mut w = timeout_world();
    set_condition(&mut w.pods[0], "ContainersReady", "False");
    w.now += k8s_openapi::jiff::SignedDuration::from_secs(3600);
    let p = w.plan();
    assert_eq!(
        (p.pod_gates[0].status, p.pod_gates[0].reason),
        (false, "NotPublished")
    );
    assert_eq!(p.gate_deadline, None);
    // Ready containers, no timeout set: held for good.
    let mut w = timeout_world();
    w.pm.spec.readiness_gate = None;
    w.now += k8s_openapi::jiff::SignedDuration::from_secs(3600);
    let p = w.plan();
    assert_eq!(p.pod_gates[0].reason, "NotPublished");
    assert_eq!((p.gate_deadline, p.gate_timeouts.len()), (None, 0));
}

#[test]
fn a_stalled_portmapping_times_its_gates_out_too() {
    use portmapper_core::planner::stalled_pod_gates;
    let mut w = timeout_world();
    w.now += k8s_openapi::jiff::SignedDuration::from_secs(30);
    let records = w.pod_records();
    let none = portmapper_core::GatePeers::default();
    let stalled = (
        "ServiceNotFound",
        "PortMapping web publishes nothing new: gone",
    );
    let changes = stalled_pod_gates(&refs(&records), &settings(&w, &none), &[], stalled);
    assert_eq!(changes.gates.len(), 1);
    assert_eq!(
        (changes.gates[0].status, changes.gates[0].reason),
        (true, "TimedOut")
    );
    assert_eq!(changes.timeouts.len(), 1);
    assert_eq!(changes.timeouts[0].not_published, stalled.1);
}

#[test]
fn a_portmapping_being_deleted_releases_every_gate_not_true_and_leaves_peers_alone() {
    let mut w = gated_world();
    // pod-b True (published), pod-a False (its port drops it), pod-d never set, pod-e another
    // PortMapping's, pod-f terminating.
    step(&mut w);
    set_condition(&mut w.pods[0], "ContainersReady", "False");
    step(&mut w);
    for name in ["pod-d", "pod-e", "pod-f"] {
        w.pods
            .push(gated(PodBuilder::new(name, &["10.0.0.9"]).ports("http")));
    }
    w.pods[5].metadata.deletion_timestamp = Some(Time(w.now));
    w.gate_peers
        .managed_by
        .insert("pod-e".into(), "younger".into());
    w.pm.metadata.deletion_timestamp = Some(Time(w.now));
    let p = w.plan();
    let message = "PortMapping pm is being deleted: the gate no longer waits for its publication";
    assert_eq!(
        p.pod_gates,
        [
            gate("pod-a", true, "Released", message, w.now),
            gate("pod-d", true, "Released", message, w.now),
        ]
    );
    assert_eq!((p.gate_deadline, p.gate_timeouts.len()), (None, 0));
    // Released: nothing more to write.
    apply_gates(&mut w, &p);
    assert!(w.plan().pod_gates.is_empty());
}

#[test]
fn pods_that_left_the_pool_are_released_unless_another_portmapping_keeps_them() {
    use portmapper_core::planner::released_pod_gates;
    let mut pods = [
        gated(PodBuilder::new("a", &["10.0.0.1"])),
        gated(PodBuilder::new("b", &["10.0.0.2"])),
        gated(PodBuilder::new("c", &["10.0.0.3"])),
        PodBuilder::new("d", &["10.0.0.4"]).build(),
    ];
    set_condition(&mut pods[2], PUBLISHED_GATE, "True");
    let records: Vec<PodRecord> = pods.iter().map(PodRecord::from).collect();
    let now = Timestamp::from_second(1_800_000_000).expect("test fixture");
    let kept = |name: &str| name == "b";
    let gates = released_pod_gates(&refs(&records), PUBLISHED_GATE, &kept, "left", now);
    assert_eq!(gates, [gate("a", true, "Released", "left", now)]);
}

#[test]
fn the_gate_carries_the_pods_generation_and_a_new_generation_is_written_again() {
    let mut w = gated_world();
    for pod in &mut w.pods {
        pod.metadata.generation = Some(1);
    }
    let p = step(&mut w);
    assert!(!p.pod_gates.is_empty());
    assert!(p.pod_gates.iter().all(|g| g.observed_generation == Some(1)));
    assert!(w.plan().pod_gates.is_empty());
    // pod-b's spec changed (generation 2): the same verdict is written for it, with its time.
    w.pods[1].metadata.generation = Some(2);
    let kept = w.pod_records()[1]
        .condition(PUBLISHED_GATE)
        .and_then(|c| c.last_transition_time.clone());
    w.now += k8s_openapi::jiff::SignedDuration::from_secs(5);
    let p = step(&mut w);
    assert_eq!(p.pod_gates.len(), 1);
    assert_eq!(
        (
            p.pod_gates[0].pod.as_str(),
            p.pod_gates[0].observed_generation
        ),
        ("pod-b", Some(2))
    );
    assert_eq!(p.pod_gates[0].last_transition_time, kept);
    assert!(w.plan().pod_gates.is_empty());
}

#[test]
fn the_release_finalizer_is_added_while_the_pool_gates_a_pod_and_removed_on_deletion() {
    use portmapper_core::planner::{FinalizerChange, RELEASE_FINALIZER, release_finalizer};
    let mut w = gated_world();
    let records = w.pod_records();
    let pool = refs(&records);
    let plain: Vec<PodRecord> = [PodBuilder::new("x", &["10.0.0.9"]).build()]
        .iter()
        .map(PodRecord::from)
        .collect();
    assert_eq!(release_finalizer(&w.pm, None), None, "pool not listed");
    assert_eq!(release_finalizer(&w.pm, Some(&refs(&plain))), None);
    assert_eq!(
        release_finalizer(&w.pm, Some(&pool)),
        Some(FinalizerChange::Add)
    );
    w.pm.metadata.finalizers = Some(vec![RELEASE_FINALIZER.into()]);
    assert_eq!(release_finalizer(&w.pm, Some(&pool)), None, "already held");
    w.pm.metadata.deletion_timestamp = Some(Time(w.now));
    assert_eq!(release_finalizer(&w.pm, None), None, "gates undecided");
    assert_eq!(
        release_finalizer(&w.pm, Some(&pool)),
        Some(FinalizerChange::Remove)
    );
    w.pm.metadata.finalizers = None;
    assert_eq!(release_finalizer(&w.pm, Some(&pool)), None);
}
