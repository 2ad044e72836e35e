//! Per-port membership: which checks apply to a Service port, and their AND.

use std::sync::LazyLock;

use k8s_openapi::api::core::v1::Service;
use portmapper_api::{Check, CheckKind, PortMappingSpec, UnlistedPorts};

use crate::check::{CheckContext, GateTypes, evaluate, is_probed};
use crate::decision::{Decision, Verdict};
use crate::network::{CheckPosition, NetworkDecisions};
use crate::pod_record::PodRecord;
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

/// The check at `position` of a port's rules: an `anyOf` entry when `position.any_of` is set;
/// `None` when there is none or it sets other than exactly one kind.
pub fn check_at<'a>(rules: PortRules<'a>, position: CheckPosition) -> Option<CheckKind<'a>> {
    let kind = rules.checks().get(position.index)?.kind()?;
    match (kind, position.any_of) {
        (CheckKind::AnyOf(entries), Some(j)) => entries.get(j)?.kind(),
        (CheckKind::AnyOf(_), None) | (_, Some(_)) => None,
        (kind, None) => Some(kind),
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
    pub pod: &'a PodRecord,
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
    walk_port(rules, e, Questions::default(), &[]).verdict
}

/// What a walk over a port's checks finds out besides the verdict, when asked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Questions {
    /// Does a check that reads no network result exclude? Then no network result can change
    /// the verdict and nothing needs probing.
    pub without_network: bool,
    /// Does a backing check exclude (with health checks bypassed, as under
    /// `publishNotReadyAddresses`)? Then the pod is not meant to serve the port.
    pub backing: bool,
}

/// The verdict of a port's checks and the answers to the [`Questions`] asked. A question not
/// asked reads `false` unless the walk happened to find the answer true.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PortWalk {
    pub verdict: Verdict,
    /// A check that reads no network result excludes.
    pub excluded_without_network: bool,
    /// A backing check excludes.
    pub excluded_by_backing: bool,
}

/// What a top-level check can tell, independent of the pod: computed once per port and plan
/// ([`classify_checks`]), so asking [`Questions`] costs no work per pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CheckClass {
    /// It (or an `anyOf` entry) reads a network result: with none, it cannot exclude.
    reads_network: bool,
    /// It can exclude with health checks bypassed, and then its verdict is the same as without
    /// the bypass (no health check in it).
    backing: bool,
}

/// The [`CheckClass`] of every check of a port's rules, in order.
pub(crate) fn classify_checks(rules: PortRules<'_>, protocol: &str) -> Vec<CheckClass> {
    rules
        .checks()
        .iter()
        .map(|check| match check.kind() {
            // Excludes whatever is bypassed or probed.
            None => CheckClass {
                reads_network: false,
                backing: true,
            },
            Some(CheckKind::AnyOf(entries)) => {
                let (mut reads_network, mut health) = (false, false);
                for kind in entries.iter().filter_map(|e| e.kind()) {
                    reads_network |= is_probed(&kind, protocol);
                    health |= kind.is_health();
                }
                // One health entry includes under the bypass; entries setting several kinds
                // exclude either way.
                CheckClass {
                    reads_network,
                    backing: !health,
                }
            }
            Some(kind) => CheckClass {
                reads_network: is_probed(&kind, protocol),
                backing: !kind.is_health(),
            },
        })
        .collect()
}

fn evaluate_check(index: usize, check: &Check, e: &Evaluation<'_>) -> Verdict {
    let ctx = CheckContext {
        service: e.service,
        pod: e.pod,
        port: e.port,
        position: CheckPosition::top(index),
        network: e.network,
        bypass_health: e.publish_not_ready,
        gates: e.gates,
    };
    match check.kind() {
        Some(kind) => evaluate(&kind, &ctx),
        None => Verdict::exclude(format!(
            "checks[{index}] sets {} kinds instead of exactly one",
            check.kind_count()
        )),
    }
}

/// One walk over a port's checks: the verdict (as [`all_of`](crate::decision::all_of): the
/// first Exclude wins, then the first Abstain), and the answers to `ask`, with `classes` the
/// port's [`classify_checks`]. Once the verdict is an Exclude, only the checks that can still
/// answer an open question are evaluated; without questions this is exactly `all_of` and costs
/// nothing more.
pub(crate) fn walk_port(
    rules: PortRules<'_>,
    e: &Evaluation<'_>,
    ask: Questions,
    classes: &[CheckClass],
) -> PortWalk {
    let checks = match rules {
        PortRules::PublishNothing => {
            return PortWalk {
                verdict: Verdict::exclude(
                    "the port has no entry in spec.ports and spec.unlistedPorts is PublishNothing",
                ),
                excluded_without_network: ask.without_network,
                excluded_by_backing: ask.backing,
            };
        }
        PortRules::Checks(c) => c,
    };
    let asked = ask != Questions::default();
    let mut excluded: Option<Verdict> = None;
    let mut abstain: Option<Verdict> = None;
    let (mut without_network, mut backing) = (false, false);
    for (index, check) in checks.iter().enumerate() {
        let class = classes.get(index).filter(|_| asked);
        if excluded.is_some() {
            let helps = class.is_some_and(|c| {
                (ask.without_network && !without_network && !c.reads_network)
                    || (ask.backing && !backing && c.backing)
            });
            if !helps {
                continue;
            }
        }
        let verdict = evaluate_check(index, check, e);
        match verdict.decision {
            Decision::Exclude => {
                if let Some(c) = class {
                    without_network |= !c.reads_network;
                    backing |= c.backing;
                }
                excluded.get_or_insert(verdict);
                if (!ask.without_network || without_network) && (!ask.backing || backing) {
                    break;
                }
            }
            Decision::Abstain if excluded.is_none() => {
                abstain.get_or_insert(verdict);
            }
            Decision::Abstain | Decision::Include => {}
        }
    }
    PortWalk {
        verdict: excluded.or(abstain).unwrap_or(Verdict::INCLUDE),
        excluded_without_network: without_network,
        excluded_by_backing: backing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Decision;
    use crate::target::ResolvedTarget;
    use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus, ServiceSpec};
    use kube_validation::IpFamily;
    use portmapper_api::check::{HttpGetCheck, NotTerminatingCheck, PortNamesCheck};
    use portmapper_api::{KeySource, PortRule};

    fn spec() -> PortMappingSpec {
        PortMappingSpec {
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
            unlisted_ports: UnlistedPorts::UseDefaultChecks,
            ..test_support::spec("web", "g")
        }
    }

    fn unready_pod(ports: &str) -> PodRecord {
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
        .into()
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

    fn run(spec: &PortMappingSpec, pod: &PodRecord, port: &str, pnr: bool) -> Verdict {
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

    /// (verdict reason, excluded without network, excluded by backing) with every question.
    fn walk(
        checks: Vec<Check>,
        pod: &PodRecord,
        network: &NetworkDecisions,
    ) -> (String, bool, bool) {
        let service = Service::default();
        let p = rp("http");
        let rules = PortRules::Checks(&checks);
        let w = walk_port(
            rules,
            &Evaluation {
                service: &service,
                pod,
                port: &p,
                network,
                publish_not_ready: false,
                gates: GateTypes::DEFAULT,
            },
            Questions {
                without_network: true,
                backing: true,
            },
            &classify_checks(rules, "TCP"),
        );
        (
            w.verdict.reason().to_owned(),
            w.excluded_without_network,
            w.excluded_by_backing,
        )
    }

    #[test]
    fn one_walk_answers_its_questions_past_the_first_exclude() {
        let http = Check {
            http_get: Some(HttpGetCheck::default()),
            ..Check::default()
        };
        let port_names = spec().ports[0].checks[0].clone();
        let failing: NetworkDecisions = [(
            crate::NetworkKey {
                pod_uid: "u".into(),
                port_name: "http".into(),
                family: IpFamily::V4,
                position: CheckPosition::top(0),
            },
            Verdict::exclude("503"),
        )]
        .into_iter()
        .collect();
        // The probe excludes first; portNames, evaluated only for the questions, excludes too.
        assert_eq!(
            walk(
                vec![http.clone(), port_names.clone()],
                &unready_pod("https"),
                &failing
            ),
            ("httpGet: 503".to_owned(), true, true)
        );
        // portNames includes: only the probe excludes, so it is worth probing and backed.
        assert_eq!(
            walk(
                vec![http.clone(), port_names.clone()],
                &unready_pod("http"),
                &failing
            ),
            ("httpGet: 503".to_owned(), false, false)
        );
        // podReady (a health check read without the network) excludes: nothing to probe, but
        // the pod is still meant to serve the port.
        assert_eq!(
            walk(
                vec![Check::pod_ready(), http, port_names],
                &unready_pod("http"),
                &NetworkDecisions::new()
            ),
            (
                "podReady: pod is not Ready (Ready=False)".to_owned(),
                true,
                false
            )
        );
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
