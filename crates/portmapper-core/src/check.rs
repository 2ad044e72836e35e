//! The evaluation of membership checks. API checks (`ApiKind`) are decided here from the pod
//! and the Service, one function per kind behind `evaluate_api`; network checks read their
//! result from [`NetworkDecisions`].
//!
//! `publishNotReadyAddresses` bypasses *health* checks (podReady, containerReady and the
//! network checks: they say whether the pod is healthy) but never *backing* checks (portNames,
//! podCondition: they say whether the pod is meant to serve the port at all) nor notTerminating.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Service;
use portmapper_api::check::Dials;
use portmapper_api::check::{
    ConditionStatus, ContainerReadyCheck, PodConditionCheck, PortNamesCheck,
};
use portmapper_api::{ApiKind, CheckKind, KeySource};

use crate::decision::{Verdict, any_of};
use crate::network::{CheckPosition, NetworkDecisions};
use crate::pod_record::{Condition, PodRecord};
use crate::pool::pod_key_value;
use crate::target::{ResolvedPort, is_terminating};

/// Everything a check may look at.
#[derive(Clone, Copy, Debug)]
pub struct CheckContext<'a> {
    /// The Service.
    pub service: &'a Service,
    /// The pod.
    pub pod: &'a PodRecord,
    /// The Service port resolved on this pod at the address being evaluated.
    pub port: &'a ResolvedPort<'a>,
    /// Where the check sits in the port's list.
    pub position: CheckPosition,
    /// Network check results.
    pub network: &'a NetworkDecisions,
    /// `publishNotReadyAddresses` is in force: health checks include.
    pub bypass_health: bool,
    /// The publication gates portmapper sets (podReady of a gated pod must not wait for them).
    pub gates: GateTypes<'a>,
}

/// The decision of one check for one (pod, port, address).
pub fn evaluate(kind: &CheckKind<'_>, ctx: &CheckContext<'_>) -> Verdict {
    if ctx.bypass_health && kind.is_health() {
        return Verdict::INCLUDE;
    }
    match kind {
        CheckKind::Api(kind) => evaluate_api(*kind, ctx),
        CheckKind::Network(network) if dials_non_tcp_target(kind, ctx.port.protocol) => {
            Verdict::exclude(format!(
                "{}: Service port {} is {}; a probe without its own port would dial it over TCP (set the check's port)",
                network.name(),
                port_label(ctx),
                ctx.port.protocol
            ))
        }
        CheckKind::Network(network) => network_verdict(network.name(), ctx),
        CheckKind::AnyOf(leaves) => any_of(leaves.iter().enumerate().map(|(j, leaf)| {
            let sub = CheckContext {
                position: CheckPosition {
                    index: ctx.position.index,
                    any_of: Some(j),
                },
                ..*ctx
            };
            match leaf.kind() {
                Some(kind) => evaluate(&kind, &sub),
                None => Verdict::exclude(format!(
                    "anyOf[{j}]: the check sets {} kinds instead of one",
                    leaf.kind_count()
                )),
            }
        })),
    }
}

/// The decision of a check the reconcile evaluates itself, for one (pod, port, address).
fn evaluate_api(kind: ApiKind<'_>, ctx: &CheckContext<'_>) -> Verdict {
    match kind {
        ApiKind::PodReady(_) => pod_ready(ctx.pod, ctx.gates),
        ApiKind::NotTerminating(_) => {
            if is_terminating(ctx.pod) {
                Verdict::exclude("notTerminating: pod is terminating")
            } else {
                Verdict::INCLUDE
            }
        }
        ApiKind::ContainerReady(c) => container_ready(c, ctx),
        ApiKind::PodCondition(c) => pod_condition(c, ctx.pod),
        ApiKind::PortNames(c) => port_names(c, ctx),
    }
}

/// The pod condition whose transitions can change what `kind` decides, if any: the source of
/// an endpoint's trigger time. `containerReady` reads container statuses, which carry no
/// transition time of their own; the pod's `ContainersReady` condition moves with them.
pub fn read_condition<'a>(kind: ApiKind<'a>) -> Option<&'a str> {
    match kind {
        ApiKind::PodReady(_) => Some("Ready"),
        ApiKind::ContainerReady(_) => Some("ContainersReady"),
        ApiKind::PodCondition(c) => Some(c.type_.as_str()),
        ApiKind::NotTerminating(_) | ApiKind::PortNames(_) => None,
    }
}

/// Whether `check` would dial the target port of a UDP or SCTP Service port over TCP: a probe
/// without its own `port` on a non-TCP port has nothing to test, so it is never run and the
/// planner excludes the pod with a reason that says so.
pub fn dials_non_tcp_target(check: &CheckKind<'_>, protocol: &str) -> bool {
    match check {
        CheckKind::Network(kind) => kind.dials() == Dials::TargetPort && protocol != "TCP",
        CheckKind::Api(_) | CheckKind::AnyOf(_) => false,
    }
}

/// Whether the prober evaluates `check` on a port of `protocol`: a network check that does not
/// dial a non-TCP target (that one excludes without a result, see [`dials_non_tcp_target`]).
pub fn is_probed(check: &CheckKind<'_>, protocol: &str) -> bool {
    check.is_network() && !dials_non_tcp_target(check, protocol)
}

/// The readiness gate (pod condition type) portmapper sets once a pod is published, unless the
/// PortMapping names its own (`spec.readinessGate.conditionType`): pods opt in by listing it in
/// `spec.readinessGates`.
pub const PUBLISHED_GATE: &str = portmapper_api::DEFAULT_GATE_CONDITION_TYPE;

/// What podReady of a gated pod reads besides the pod: the publication gate condition types a
/// plan knows as portmapper's, and the nodes known not to be Ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GateTypes<'a> {
    /// The evaluated PortMapping's own.
    pub own: &'a str,
    /// Those other PortMappings of the namespace set.
    pub peers: &'a BTreeSet<String>,
    /// Nodes whose `Ready` condition is known and not True, with its status
    /// ([`PlanInput::unready_nodes`](crate::PlanInput::unready_nodes)).
    pub unready_nodes: &'a BTreeMap<String, String>,
}

impl GateTypes<'static> {
    /// The default gate type, no peers, no node known unready.
    pub const DEFAULT: Self = Self {
        own: PUBLISHED_GATE,
        peers: &BTreeSet::new(),
        unready_nodes: &BTreeMap::new(),
    };
}

impl GateTypes<'_> {
    /// Whether portmapper sets this condition type (this PortMapping or a peer).
    pub fn is_portmapper(&self, condition_type: &str) -> bool {
        condition_type == self.own || self.peers.contains(condition_type)
    }
}

/// Whether the pod lists `condition_type` among its readiness gates.
pub fn has_gate(pod: &PodRecord, condition_type: &str) -> bool {
    pod.has_gate(condition_type)
}

/// Whether the pod lists [`PUBLISHED_GATE`] among its readiness gates.
pub fn has_published_gate(pod: &PodRecord) -> bool {
    has_gate(pod, PUBLISHED_GATE)
}

fn condition<'p>(pod: &'p PodRecord, type_: &str) -> Option<&'p Condition> {
    pod.condition(type_)
}

fn pod_ready(pod: &PodRecord, gates: GateTypes<'_>) -> Verdict {
    if has_gate(pod, gates.own) {
        return gated_pod_ready(pod, gates);
    }
    let ready = condition(pod, "Ready");
    match ready {
        Some(c) if &*c.status == "True" => Verdict::INCLUDE,
        Some(c) => Verdict::exclude(format!("podReady: pod is not Ready (Ready={})", c.status)),
        None => Verdict::exclude("podReady: pod has no Ready condition"),
    }
}

/// podReady for a pod gated on this PortMapping's gate: kubelet makes it Ready only once our gate
/// is True, and we set the gate only once the pod is published, so reading `Ready` would never
/// publish it. Ready is ContainersReady and every readiness gate: read those, minus the gates
/// portmapper sets (a peer's gate waits for the peer's publication, which may wait for ours).
fn gated_pod_ready(pod: &PodRecord, gates: GateTypes<'_>) -> Verdict {
    match condition(pod, "ContainersReady") {
        Some(c) if &*c.status == "True" => {}
        Some(c) => {
            return Verdict::exclude(format!(
                "podReady: containers are not ready (ContainersReady={})",
                c.status
            ));
        }
        None => return Verdict::exclude("podReady: pod has no ContainersReady condition"),
    }
    // kubelet gives every Ready=False a reason (`ReadinessGatesNotReady` while a gate waits).
    // Without one it was written by the node lifecycle controller, which marks the pods of a
    // NotReady node so (keeping the reason of their Ready=True): the native controller
    // unpublishes them, and so do we, though containers still read ready.
    if let Some(c) = condition(pod, "Ready")
        && &*c.status == "False"
        && c.reason.as_deref().unwrap_or_default().is_empty()
    {
        return Verdict::exclude(
            "podReady: pod marked not Ready without a kubelet reason (its node is not ready)",
        );
    }
    // The node-lifecycle controller only turns a True `Ready` False, so a pod our gate still
    // holds keeps `ReadinessGatesNotReady` when its node goes: only the node says so. The
    // native controller keeps such a pod unready (its `Ready` is False), and so do we.
    if let Some((node, status)) = pod
        .node_name
        .as_deref()
        .and_then(|n| gates.unready_nodes.get_key_value(n))
    {
        return Verdict::exclude(format!(
            "podReady: its node {node} is not Ready (Ready={status})"
        ));
    }
    for gate in pod
        .readiness_gates
        .iter()
        .map(String::as_str)
        .filter(|g| !gates.is_portmapper(g))
    {
        match condition(pod, gate) {
            Some(c) if &*c.status == "True" => {}
            Some(c) => {
                return Verdict::exclude(format!(
                    "podReady: readiness gate {gate} is not True ({gate}={})",
                    c.status
                ));
            }
            None => {
                return Verdict::exclude(format!(
                    "podReady: readiness gate {gate} has no condition"
                ));
            }
        }
    }
    Verdict::INCLUDE
}

fn container_ready(check: &ContainerReadyCheck, ctx: &CheckContext<'_>) -> Verdict {
    let name = match (&check.container, ctx.port.target) {
        (Some(name), _) => name.as_str(),
        (None, Some(t)) => match t.container {
            Some(c) => c,
            None => {
                return Verdict::exclude(format!(
                    "containerReady: no container declares target port {}",
                    t.number
                ));
            }
        },
        (None, None) => {
            return Verdict::exclude("containerReady: the Service port has no target port");
        }
    };
    let statuses = ctx
        .pod
        .container_statuses
        .iter()
        .chain(&ctx.pod.init_container_statuses);
    match statuses.into_iter().find(|s| s.name == name) {
        Some(s) if s.ready => Verdict::INCLUDE,
        Some(_) => Verdict::exclude(format!("containerReady: container {name:?} is not ready")),
        None => Verdict::exclude(format!("containerReady: container {name:?} has no status")),
    }
}

fn condition_status_text(status: ConditionStatus) -> &'static str {
    match status {
        ConditionStatus::True => "True",
        ConditionStatus::False => "False",
        ConditionStatus::Unknown => "Unknown",
    }
}

fn pod_condition(check: &PodConditionCheck, pod: &PodRecord) -> Verdict {
    let want = condition_status_text(check.status);
    let found = pod.condition(&check.type_);
    match found {
        Some(c) if *c.status == *want => Verdict::INCLUDE,
        Some(c) => Verdict::exclude(format!(
            "podCondition: condition {:?} is {}, want {want}",
            check.type_, c.status
        )),
        None => Verdict::exclude(format!(
            "podCondition: pod has no condition {:?}",
            check.type_
        )),
    }
}

fn port_names(check: &PortNamesCheck, ctx: &CheckContext<'_>) -> Verdict {
    let source = match check.from {
        KeySource::Label => "label",
        KeySource::Annotation => "annotation",
    };
    if ctx.port.name.is_empty() {
        return Verdict::exclude("portNames: the Service port has no name to list");
    }
    match pod_key_value(ctx.pod, &check.key, check.from) {
        None => Verdict::exclude(format!("portNames: pod has no {source} {}", check.key)),
        Some(list) if list.split(',').map(str::trim).any(|n| n == ctx.port.name) => {
            Verdict::INCLUDE
        }
        Some(_) => Verdict::exclude(format!(
            "portNames: {source} {} does not list {:?}",
            check.key, ctx.port.name
        )),
    }
}

/// The Service port as users name it: its name, else its number.
fn port_label(ctx: &CheckContext<'_>) -> String {
    if ctx.port.name.is_empty() {
        ctx.port.port.map(|p| p.to_string()).unwrap_or_default()
    } else {
        ctx.port.name.to_owned()
    }
}

/// How a network check without any result abstains (`httpGet: no result yet`).
pub const NO_RESULT_YET: &str = "no result yet";

/// Whether an abstention is only a network check without any result yet (the reason ends with
/// [`NO_RESULT_YET`], also inside `anyOf: …`): a new target, or every target of a restarted
/// operator until its first probe. The planner does not report such memberships as kept, so a
/// restart writes no status twice for a state that lasts one probe period.
pub fn is_no_result_yet(reason: &str) -> bool {
    reason.ends_with(NO_RESULT_YET)
}

fn network_verdict(name: &str, ctx: &CheckContext<'_>) -> Verdict {
    let uid = ctx.pod.uid.as_str();
    match ctx
        .network
        .get(uid, ctx.port.name, ctx.port.family, ctx.position)
    {
        None => Verdict::abstain(format!("{name}: {NO_RESULT_YET}")),
        Some(v) => match &v.reason {
            Some(r) if !r.starts_with(name) => Verdict {
                decision: v.decision,
                reason: Some(format!("{name}: {r}").into()),
            },
            _ => v.clone(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Decision;
    use crate::network::NetworkKey;
    use crate::target::ResolvedTarget;
    use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;
    use kube_validation::IpFamily;
    use portmapper_api::NetworkKind;
    use portmapper_api::check::{HttpGetCheck, LeafCheck, NotTerminatingCheck, PodReadyCheck};
    use std::collections::BTreeMap;

    const POD_READY: CheckKind<'static> = CheckKind::Api(ApiKind::PodReady(&PodReadyCheck {}));
    const NOT_TERMINATING: CheckKind<'static> =
        CheckKind::Api(ApiKind::NotTerminating(&NotTerminatingCheck {}));

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("pod-a".into()),
                uid: Some("uid-a".into()),
                annotations: Some(BTreeMap::from([(
                    "example.com/ports".into(),
                    "http, https".into(),
                )])),
                ..ObjectMeta::default()
            },
            status: Some(PodStatus {
                conditions: Some(vec![
                    PodCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        ..PodCondition::default()
                    },
                    PodCondition {
                        type_: "example.com/joined".into(),
                        status: "False".into(),
                        ..PodCondition::default()
                    },
                ]),
                container_statuses: Some(vec![ContainerStatus {
                    name: "app".into(),
                    ready: false,
                    ..ContainerStatus::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn port<'a>(name: &'a str, container: Option<&'static str>) -> ResolvedPort<'a> {
        ResolvedPort {
            name,
            port: Some(80),
            protocol: "TCP",
            target: Some(ResolvedTarget {
                number: 8080,
                container,
            }),
            address: "10.0.0.1".parse().unwrap(),
            family: IpFamily::V4,
        }
    }

    fn eval(
        kind: CheckKind<'_>,
        pod: &Pod,
        port: &ResolvedPort<'_>,
        network: &NetworkDecisions,
        bypass: bool,
    ) -> Verdict {
        let service = Service::default();
        let pod = PodRecord::from(pod);
        let ctx = CheckContext {
            service: &service,
            pod: &pod,
            port,
            position: CheckPosition::default(),
            network,
            bypass_health: bypass,
            gates: GateTypes::DEFAULT,
        };
        evaluate(&kind, &ctx)
    }

    #[test]
    fn pod_ready_includes_ready_pods_and_names_itself_when_not() {
        let n = NetworkDecisions::new();
        let mut p = pod();
        assert_eq!(
            eval(POD_READY, &p, &port("http", None), &n, false),
            Verdict::INCLUDE
        );
        if let Some(c) = p.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            c[0].status = "False".into();
        }
        let v = eval(POD_READY, &p, &port("http", None), &n, false);
        assert_eq!(v.reason(), "podReady: pod is not Ready (Ready=False)");
        p.status = None;
        assert_eq!(
            eval(POD_READY, &p, &port("http", None), &n, false).reason(),
            "podReady: pod has no Ready condition"
        );
    }

    #[test]
    fn pod_ready_of_a_gated_pod_reads_containers_ready_and_the_other_gates() {
        use k8s_openapi::api::core::v1::{PodReadinessGate, PodSpec};
        let n = NetworkDecisions::new();
        let condition = |type_: &str, status: &str| PodCondition {
            type_: type_.into(),
            status: status.into(),
            ..PodCondition::default()
        };
        let mut p = pod();
        p.spec = Some(PodSpec {
            readiness_gates: Some(vec![
                PodReadinessGate {
                    condition_type: PUBLISHED_GATE.into(),
                },
                PodReadinessGate {
                    condition_type: "example.com/warm".into(),
                },
            ]),
            ..PodSpec::default()
        });
        // Ready is False because our own gate is not True yet (kubelet says so in its reason):
        // it must not matter.
        p.status.as_mut().unwrap().conditions = Some(vec![
            PodCondition {
                reason: Some("ReadinessGatesNotReady".into()),
                ..condition("Ready", "False")
            },
            condition("ContainersReady", "True"),
            condition(PUBLISHED_GATE, "False"),
            condition("example.com/warm", "True"),
        ]);
        let v = eval(POD_READY, &p, &port("http", None), &n, false);
        assert_eq!(v.decision, Decision::Include, "{}", v.reason());

        let conditions = p.status.as_mut().unwrap().conditions.as_mut().unwrap();
        conditions[3].status = "False".into();
        let v = eval(POD_READY, &p, &port("http", None), &n, false);
        assert_eq!(
            v.reason(),
            "podReady: readiness gate example.com/warm is not True (example.com/warm=False)"
        );
        conditions_mut(&mut p).retain(|c| c.type_ != "example.com/warm");
        let v = eval(POD_READY, &p, &port("http", None), &n, false);
        assert_eq!(
            v.reason(),
            "podReady: readiness gate example.com/warm has no condition"
        );
        conditions_mut(&mut p).push(condition("example.com/warm", "True"));
        conditions_mut(&mut p)[1].status = "False".into();
        let v = eval(POD_READY, &p, &port("http", None), &n, false);
        assert_eq!(
            v.reason(),
            "podReady: containers are not ready (ContainersReady=False)"
        );
        conditions_mut(&mut p).remove(1);
        let v = eval(POD_READY, &p, &port("http", None), &n, false);
        assert_eq!(v.reason(), "podReady: pod has no ContainersReady condition");
        // The node lifecycle controller's Ready=False keeps the reason of Ready=True: none.
        conditions_mut(&mut p).push(condition("ContainersReady", "True"));
        conditions_mut(&mut p)[0].reason = None;
        let v = eval(POD_READY, &p, &port("http", None), &n, false);
        assert_eq!(
            v.reason(),
            "podReady: pod marked not Ready without a kubelet reason (its node is not ready)"
        );

        // Without our gate, podReady reads Ready as before.
        p.spec = None;
        conditions_mut(&mut p).push(condition("ContainersReady", "True"));
        let v = eval(POD_READY, &p, &port("http", None), &n, false);
        assert_eq!(v.reason(), "podReady: pod is not Ready (Ready=False)");
    }

    /// podReady of `p` with `unready` as the nodes known not Ready.
    fn pod_ready_with(p: &Pod, unready: &BTreeMap<String, String>) -> Verdict {
        let service = Service::default();
        let pod = PodRecord::from(p);
        let network = NetworkDecisions::new();
        let port = port("http", None);
        let ctx = CheckContext {
            service: &service,
            pod: &pod,
            port: &port,
            position: CheckPosition::default(),
            network: &network,
            bypass_health: false,
            gates: GateTypes {
                unready_nodes: unready,
                ..GateTypes::DEFAULT
            },
        };
        evaluate(&POD_READY, &ctx)
    }

    #[test]
    fn a_gated_pod_on_a_node_known_not_ready_is_not_ready() {
        use k8s_openapi::api::core::v1::{PodReadinessGate, PodSpec};
        let condition = |type_: &str, status: &str, reason: Option<&str>| PodCondition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.map(Into::into),
            ..PodCondition::default()
        };
        // Never published: the kubelet's Ready=False waits for our gate, containers ready.
        let mut p = pod();
        p.spec = Some(PodSpec {
            node_name: Some("n1".into()),
            readiness_gates: Some(vec![PodReadinessGate {
                condition_type: PUBLISHED_GATE.into(),
            }]),
            ..PodSpec::default()
        });
        p.status.as_mut().unwrap().conditions = Some(vec![
            condition("Ready", "False", Some("ReadinessGatesNotReady")),
            condition("ContainersReady", "True", None),
            condition(PUBLISHED_GATE, "False", Some("NotPublished")),
        ]);
        let nodes = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(n, s)| ((*n).to_owned(), (*s).to_owned()))
                .collect()
        };
        for status in ["False", "Unknown"] {
            let v = pod_ready_with(&p, &nodes(&[("n1", status)]));
            assert_eq!(
                v.reason(),
                format!("podReady: its node n1 is not Ready (Ready={status})")
            );
        }
        // Another node unready, or none known so (unknown to the cache, lookups off): ready.
        for unready in [nodes(&[("n2", "False")]), nodes(&[])] {
            let v = pod_ready_with(&p, &unready);
            assert_eq!(v.decision, Decision::Include, "{}", v.reason());
        }
        // An unscheduled pod has no node to read.
        p.spec.as_mut().unwrap().node_name = None;
        let v = pod_ready_with(&p, &nodes(&[("n1", "False")]));
        assert_eq!(v.decision, Decision::Include, "{}", v.reason());

        // A pod without our gate reads its own Ready, as the native controller does (the
        // node-lifecycle controller turns a True one False on a NotReady node).
        p.spec = Some(PodSpec {
            node_name: Some("n1".into()),
            ..PodSpec::default()
        });
        conditions_mut(&mut p)[0] = condition("Ready", "True", None);
        let v = pod_ready_with(&p, &nodes(&[("n1", "False")]));
        assert_eq!(v.decision, Decision::Include, "{}", v.reason());
    }

    fn conditions_mut(p: &mut Pod) -> &mut Vec<PodCondition> {
        p.status.as_mut().unwrap().conditions.as_mut().unwrap()
    }

    #[test]
    fn not_terminating_excludes_pods_with_deletion_timestamp() {
        let n = NetworkDecisions::new();
        let mut p = pod();
        assert_eq!(
            eval(NOT_TERMINATING, &p, &port("http", None), &n, false),
            Verdict::INCLUDE
        );
        p.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert_eq!(
            eval(NOT_TERMINATING, &p, &port("http", None), &n, false).decision,
            Decision::Exclude
        );
        assert_eq!(
            eval(NOT_TERMINATING, &p, &port("http", None), &n, true).decision,
            Decision::Exclude,
            "not bypassed"
        );
    }

    #[test]
    fn container_ready_defaults_to_the_declaring_container() {
        let n = NetworkDecisions::new();
        let c = ContainerReadyCheck { container: None };
        let v = eval(
            CheckKind::Api(ApiKind::ContainerReady(&c)),
            &pod(),
            &port("http", Some("app")),
            &n,
            false,
        );
        assert_eq!(v.reason(), "containerReady: container \"app\" is not ready");
        let v = eval(
            CheckKind::Api(ApiKind::ContainerReady(&c)),
            &pod(),
            &port("http", None),
            &n,
            false,
        );
        assert_eq!(
            v.reason(),
            "containerReady: no container declares target port 8080"
        );
        let named = ContainerReadyCheck {
            container: Some("sidecar".into()),
        };
        let v = eval(
            CheckKind::Api(ApiKind::ContainerReady(&named)),
            &pod(),
            &port("http", Some("app")),
            &n,
            false,
        );
        assert_eq!(
            v.reason(),
            "containerReady: container \"sidecar\" has no status"
        );
    }

    #[test]
    fn pod_condition_matches_type_and_status() {
        let n = NetworkDecisions::new();
        let want_false = PodConditionCheck {
            type_: "example.com/joined".into(),
            status: ConditionStatus::False,
        };
        assert_eq!(
            eval(
                CheckKind::Api(ApiKind::PodCondition(&want_false)),
                &pod(),
                &port("http", None),
                &n,
                false
            ),
            Verdict::INCLUDE
        );
        let want_true = PodConditionCheck {
            type_: "example.com/joined".into(),
            status: ConditionStatus::True,
        };
        let v = eval(
            CheckKind::Api(ApiKind::PodCondition(&want_true)),
            &pod(),
            &port("http", None),
            &n,
            true,
        );
        assert_eq!(
            v.reason(),
            "podCondition: condition \"example.com/joined\" is False, want True"
        );
        let missing = PodConditionCheck {
            type_: "x".into(),
            status: ConditionStatus::True,
        };
        assert_eq!(
            eval(
                CheckKind::Api(ApiKind::PodCondition(&missing)),
                &pod(),
                &port("http", None),
                &n,
                false
            )
            .reason(),
            "podCondition: pod has no condition \"x\""
        );
    }

    #[test]
    fn port_names_trims_whitespace_and_is_never_bypassed() {
        let n = NetworkDecisions::new();
        let c = PortNamesCheck {
            key: "example.com/ports".into(),
            from: KeySource::Annotation,
        };
        assert_eq!(
            eval(
                CheckKind::Api(ApiKind::PortNames(&c)),
                &pod(),
                &port("https", None),
                &n,
                false
            ),
            Verdict::INCLUDE
        );
        let v = eval(
            CheckKind::Api(ApiKind::PortNames(&c)),
            &pod(),
            &port("grpc", None),
            &n,
            true,
        );
        assert_eq!(
            v.reason(),
            "portNames: annotation example.com/ports does not list \"grpc\""
        );
        assert_eq!(
            eval(
                CheckKind::Api(ApiKind::PortNames(&c)),
                &pod(),
                &port("", None),
                &n,
                false
            )
            .decision,
            Decision::Exclude
        );
        let label = PortNamesCheck {
            key: "example.com/ports".into(),
            from: KeySource::Label,
        };
        assert_eq!(
            eval(
                CheckKind::Api(ApiKind::PortNames(&label)),
                &pod(),
                &port("http", None),
                &n,
                false
            )
            .reason(),
            "portNames: pod has no label example.com/ports"
        );
    }

    #[test]
    fn network_check_without_result_abstains() {
        let n = NetworkDecisions::new();
        let h = HttpGetCheck::default();
        let v = eval(
            CheckKind::Network(NetworkKind::HttpGet(&h)),
            &pod(),
            &port("http", None),
            &n,
            false,
        );
        assert_eq!(v, Verdict::abstain("httpGet: no result yet"));
    }

    #[test]
    fn network_check_reads_its_result_and_prefixes_the_reason() {
        let mut n = NetworkDecisions::new();
        n.insert(
            NetworkKey {
                pod_uid: "uid-a".into(),
                port_name: "http".into(),
                family: IpFamily::V4,
                position: CheckPosition::default(),
            },
            Verdict::exclude("HTTP 503"),
        );
        let h = HttpGetCheck::default();
        assert_eq!(
            eval(
                CheckKind::Network(NetworkKind::HttpGet(&h)),
                &pod(),
                &port("http", None),
                &n,
                false
            )
            .reason(),
            "httpGet: HTTP 503"
        );
    }

    #[test]
    fn publish_not_ready_bypasses_health_checks() {
        let n = NetworkDecisions::new();
        let h = HttpGetCheck::default();
        assert_eq!(
            eval(
                CheckKind::Network(NetworkKind::HttpGet(&h)),
                &pod(),
                &port("http", None),
                &n,
                true
            ),
            Verdict::INCLUDE
        );
        let c = ContainerReadyCheck { container: None };
        assert_eq!(
            eval(
                CheckKind::Api(ApiKind::ContainerReady(&c)),
                &pod(),
                &port("http", Some("app")),
                &n,
                true
            ),
            Verdict::INCLUDE
        );
    }

    #[test]
    fn any_of_reads_nested_positions() {
        let mut n = NetworkDecisions::new();
        n.insert(
            NetworkKey {
                pod_uid: "uid-a".into(),
                port_name: "http".into(),
                family: IpFamily::V4,
                position: CheckPosition {
                    index: 0,
                    any_of: Some(1),
                },
            },
            Verdict::INCLUDE,
        );
        let leaves = vec![
            LeafCheck {
                container_ready: Some(ContainerReadyCheck { container: None }),
                ..LeafCheck::default()
            },
            LeafCheck {
                http_get: Some(HttpGetCheck::default()),
                ..LeafCheck::default()
            },
        ];
        assert_eq!(
            eval(
                CheckKind::AnyOf(&leaves),
                &pod(),
                &port("http", Some("app")),
                &n,
                false
            ),
            Verdict::INCLUDE
        );
        let v = eval(
            CheckKind::AnyOf(&leaves),
            &pod(),
            &port("http", Some("app")),
            &NetworkDecisions::new(),
            false,
        );
        assert_eq!(v.decision, Decision::Abstain);
    }
}
