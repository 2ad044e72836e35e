//! Per-port membership: which checks apply to a Service port, and their AND.

use std::sync::LazyLock;

use k8s_openapi::api::core::v1::{Pod, Service};
use portmapper_api::{Check, PortMappingSpec, UnlistedPorts};

use crate::check::{CheckContext, GateTypes, MembershipCheck};
use crate::decision::{Verdict, all_of};
use crate::network::{CheckPosition, NetworkDecisions};
use crate::target::ResolvedPort;

static DEFAULT_CHECKS: LazyLock<Vec<Check>> = LazyLock::new(|| vec![Check::pod_ready()]);

/// The rules in force for one Service port.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PortRules<'a> {
    /// A pod backs the port when every check includes it.
    Checks(&'a [Check]),
    /// No pod backs the port (an unlisted port under `unlistedPorts: PublishNothing`).
    PublishNothing,
}

impl<'a> PortRules<'a> {
    /// The check list (empty for PublishNothing).
    pub fn checks(&self) -> &'a [Check] {
        match self {
            Self::Checks(c) => c,
            Self::PublishNothing => &[],
        }
    }
}

/// The rules for a Service port: its `ports[]` entry, else `defaultChecks` (absent:
/// `[podReady]`), else nothing under `unlistedPorts: PublishNothing`.
pub fn port_rules<'a>(spec: &'a PortMappingSpec, port_name: &str) -> PortRules<'a> {
    if let Some(rule) = (!port_name.is_empty())
        .then(|| spec.port_rule(port_name))
        .flatten()
    {
        return PortRules::Checks(&rule.checks);
    }
    match spec.unlisted_ports {
        UnlistedPorts::PublishNothing => PortRules::PublishNothing,
        UnlistedPorts::UseDefaultChecks => PortRules::Checks(
            spec.default_checks
                .as_deref()
                .unwrap_or(DEFAULT_CHECKS.as_slice()),
        ),
    }
}

/// Whether `publishNotReadyAddresses` is in force: the PortMapping's override, else the
/// Service's own field.
pub fn publish_not_ready(spec: &PortMappingSpec, service: &Service) -> bool {
    spec.publish_not_ready_addresses.unwrap_or_else(|| {
        service
            .spec
            .as_ref()
            .and_then(|s| s.publish_not_ready_addresses)
            .unwrap_or(false)
    })
}

/// Everything needed to evaluate the rules of one port for one pod at one address.
#[derive(Clone, Copy, Debug)]
pub struct Evaluation<'a> {
    /// The Service.
    pub service: &'a Service,
    /// The pod.
    pub pod: &'a Pod,
    /// The resolved port and address.
    pub port: &'a ResolvedPort<'a>,
    /// Network check results.
    pub network: &'a NetworkDecisions,
    /// `publishNotReadyAddresses` in force.
    pub publish_not_ready: bool,
    /// The publication gates portmapper sets.
    pub gates: GateTypes<'a>,
}

/// Evaluates a port's rules: AND of its checks with Exclude short-circuit, otherwise any
/// Abstain → Abstain.
pub fn evaluate_port(rules: PortRules<'_>, e: &Evaluation<'_>) -> Verdict {
    let checks = match rules {
        PortRules::PublishNothing => {
            return Verdict::exclude(
                "the port has no entry in spec.ports and spec.unlistedPorts is PublishNothing",
            );
        }
        PortRules::Checks(c) => c,
    };
    all_of(checks.iter().enumerate().map(|(index, check)| {
        let ctx = CheckContext {
            service: e.service,
            pod: e.pod,
            port: e.port,
            position: CheckPosition {
                index,
                any_of: None,
            },
            network: e.network,
            bypass_health: e.publish_not_ready,
            gates: e.gates,
        };
        match check.kind() {
            Some(kind) => kind.evaluate(&ctx),
            None => Verdict::exclude(format!(
                "checks[{index}] sets {} kinds instead of exactly one",
                check.kinds().len()
            )),
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Decision;
    use crate::target::ResolvedTarget;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus, ServiceSpec};
    use kube_validation::IpFamily;
    use portmapper_api::check::{HttpGetCheck, NotTerminatingCheck, PortNamesCheck};
    use portmapper_api::{KeySource, PodPool, PortRule, ServiceRef};

    fn spec() -> PortMappingSpec {
        PortMappingSpec {
            service_ref: ServiceRef { name: "web".into() },
            pods: PodPool {
                key: "g".into(),
                from: KeySource::Label,
                value: None,
                selector: None,
            },
            ports: vec![PortRule {
                name: "http".into(),
                checks: vec![
                    Check {
                        port_names: Some(PortNamesCheck {
                            key: "ports".into(),
                            from: KeySource::Annotation,
                        }),
                        ..Check::default()
                    },
                    Check {
                        http_get: Some(HttpGetCheck::default()),
                        ..Check::default()
                    },
                ],
            }],
            default_checks: None,
            unlisted_ports: UnlistedPorts::UseDefaultChecks,
            publish_not_ready_addresses: None,
            terminating_endpoints: Default::default(),
            max_endpoints_per_slice: 100,
            legacy_endpoints: false,
            native_cleanup: true,
            probe: Default::default(),
            readiness_gate: None,
        }
    }

    fn unready_pod(ports: &str) -> Pod {
        Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                uid: Some("u".into()),
                annotations: Some([("ports".to_owned(), ports.to_owned())].into()),
                ..Default::default()
            },
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "False".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Pod::default()
        }
    }

    fn rp(name: &str) -> ResolvedPort<'_> {
        ResolvedPort {
            name,
            port: Some(80),
            protocol: "TCP",
            target: Some(ResolvedTarget {
                number: 80,
                container: None,
            }),
            address: "10.0.0.1".parse().unwrap(),
            family: IpFamily::V4,
        }
    }

    fn run(spec: &PortMappingSpec, pod: &Pod, port: &str, pnr: bool) -> Verdict {
        let service = Service::default();
        let p = rp(port);
        evaluate_port(
            port_rules(spec, port),
            &Evaluation {
                service: &service,
                pod,
                port: &p,
                network: &NetworkDecisions::new(),
                publish_not_ready: pnr,
                gates: GateTypes::DEFAULT,
            },
        )
    }

    #[test]
    fn listed_port_uses_its_checks() {
        let v = run(&spec(), &unready_pod("http"), "http", false);
        assert_eq!(v, Verdict::abstain("httpGet: no result yet"));
        let v = run(&spec(), &unready_pod("https"), "http", false);
        assert_eq!(v.decision, Decision::Exclude);
        assert!(v.reason().starts_with("portNames:"));
    }

    #[test]
    fn unlisted_port_defaults_to_pod_ready() {
        let v = run(&spec(), &unready_pod(""), "metrics", false);
        assert_eq!(v.reason(), "podReady: pod is not Ready (Ready=False)");
    }

    #[test]
    fn unlisted_port_uses_default_checks_when_given() {
        let mut s = spec();
        s.default_checks = Some(vec![Check {
            not_terminating: Some(NotTerminatingCheck {}),
            ..Check::default()
        }]);
        assert_eq!(
            run(&s, &unready_pod(""), "metrics", false),
            Verdict::INCLUDE
        );
        s.default_checks = Some(vec![]);
        assert_eq!(
            run(&s, &unready_pod(""), "metrics", false),
            Verdict::INCLUDE,
            "empty list includes every pod"
        );
    }

    #[test]
    fn unlisted_port_publishes_nothing_when_asked() {
        let mut s = spec();
        s.unlisted_ports = UnlistedPorts::PublishNothing;
        assert_eq!(
            run(&s, &unready_pod(""), "metrics", false).decision,
            Decision::Exclude
        );
        assert_eq!(
            run(&s, &unready_pod("http"), "http", false).decision,
            Decision::Abstain,
            "listed ports unaffected"
        );
    }

    #[test]
    fn publish_not_ready_bypasses_health_but_not_backing_checks() {
        assert_eq!(
            run(&spec(), &unready_pod("http"), "http", true),
            Verdict::INCLUDE
        );
        assert_eq!(
            run(&spec(), &unready_pod("https"), "http", true).decision,
            Decision::Exclude
        );
        assert_eq!(
            run(&spec(), &unready_pod(""), "metrics", true),
            Verdict::INCLUDE
        );
    }

    #[test]
    fn publish_not_ready_override_beats_service_field() {
        let mut s = spec();
        let svc = Service {
            spec: Some(ServiceSpec {
                publish_not_ready_addresses: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(publish_not_ready(&s, &svc));
        s.publish_not_ready_addresses = Some(false);
        assert!(!publish_not_ready(&s, &svc));
    }

    #[test]
    fn invalid_check_with_two_kinds_excludes() {
        let mut s = spec();
        s.default_checks = Some(vec![Check {
            pod_ready: Some(Default::default()),
            not_terminating: Some(NotTerminatingCheck {}),
            ..Check::default()
        }]);
        assert_eq!(
            run(&s, &unready_pod(""), "metrics", false).reason(),
            "checks[0] sets 2 kinds instead of exactly one"
        );
    }
}
