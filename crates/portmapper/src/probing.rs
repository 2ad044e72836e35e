//! Network checks in the reconcile: which targets the prober watches for one PortMapping, and
//! how its cached, damped results become the planner's [`NetworkDecisions`].
//!
//! A reconcile never waits on a probe: it hands the prober the targets it wants watched
//! ([`Prober::set_targets`], which keeps known targets' schedules and streaks) and reads the
//! results cached so far ([`Prober::results`]). A target whose first probe has not finished
//! has no entry, and one with only abstaining results abstains; the planner reads both as
//! Abstain: whatever is published for that (pod, port, family) stays, so a restart neither
//! flaps nor empties a slice. A damped flip arrives on [`ProbeEvents`] and reconciles that
//! PortMapping.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Service, ServicePort as K8sServicePort};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube_validation::IpFamily;
use portmapper_api::PortMapping;
use portmapper_core::membership::{Evaluation, evaluate_port, port_rules};
use portmapper_core::target::{ResolvedPort, service_port_protocol};
use portmapper_core::{
    Decision, NetworkDecisions, NetworkKey, Verdict, publish_not_ready, resolve_target_port,
};
use portmapper_probe::{
    CheckPosition, ContainerPort, ExecutorConfig, Family, MappingKey, Membership, NetworkCheck,
    Outcome, PoolPod, ProbeEvents, ProbeExecutor, Prober, ProberConfig, ServicePort, Target,
    TargetKey, TargetResult,
};
use tracing::debug;

use crate::error::Error;
use crate::metrics::Metrics;
use crate::watches::Trigger;

/// The prober's key for a PortMapping.
pub fn mapping_key(pm: &PortMapping) -> MappingKey {
    MappingKey::new(pm.namespace().unwrap_or_default(), pm.name_any())
}

/// A probe executor to use instead of the network one (the demo probes inside its own
/// network namespace).
#[derive(Clone)]
pub struct CustomExecutor(pub Arc<dyn ProbeExecutor>);

impl std::fmt::Debug for CustomExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CustomExecutor")
    }
}

/// Starts the operator's prober: probes over the network (or with `executor`), `concurrency`
/// in flight at most, reporting to the operator's `/metrics`.
pub fn start(
    concurrency: usize,
    executor: Option<CustomExecutor>,
    metrics: &Metrics,
) -> Result<(Prober, ProbeEvents), Error> {
    let config = ProberConfig {
        concurrency,
        ..ProberConfig::default()
    };
    let metrics = Arc::new(metrics.probe.clone());
    match executor {
        Some(CustomExecutor(executor)) => Prober::new(config, executor, metrics),
        None => Prober::network(config, ExecutorConfig::default(), metrics),
    }
    .map_err(|e| Error::Config(format!("starting the prober: {e}")))
}

/// Reconciles the PortMapping of every damped membership flip.
pub async fn forward_events(mut events: ProbeEvents, trigger: Trigger) {
    while let Some(key) = events.recv().await {
        debug!(portmapping = %key, "probe membership changed; queueing reconcile");
        let target = ObjectRef::<PortMapping>::new(&key.name).within(&key.namespace);
        if trigger.unbounded_send(target).is_err() {
            // The controller has stopped.
            return;
        }
    }
}

/// Stops probing for a PortMapping that is gone or writes nothing.
pub fn forget(prober: &Prober, pm: &PortMapping) {
    prober.remove_mapping(&mapping_key(pm));
}

/// Stops probing for PortMappings no longer in `alive` (a safety net behind [`forget`]).
pub fn retain(prober: &Prober, alive: &HashSet<MappingKey>) {
    for key in prober.mapping_keys() {
        if !alive.contains(&key) {
            debug!(portmapping = %key, "forgetting probe targets of a PortMapping that is gone");
            prober.remove_mapping(&key);
        }
    }
}

/// What the network checks say for one reconcile.
#[derive(Debug, Default)]
pub struct Probed {
    /// Results for the planner; targets not probed yet have no entry (Abstain).
    pub decisions: NetworkDecisions,
    /// Targets the prober watches for this PortMapping.
    pub targets: usize,
    /// Targets without a first result yet: the reconcile looks again soon while any remain.
    pub awaiting_first_result: usize,
}

/// Sets the PortMapping's targets on the prober and reads its cached results. Never waits on a
/// probe.
pub fn probe(
    prober: &Prober,
    pm: &PortMapping,
    service: &Service,
    pods: &[&Pod],
    live_slices: &[&EndpointSlice],
) -> Probed {
    let key = mapping_key(pm);
    let targets = targets(pm, service, pods, live_slices);
    let keys: Vec<(TargetKey, u32)> = targets
        .iter()
        .map(|t| (t.key(), success_threshold(t)))
        .collect();
    prober.set_targets(&key, targets);
    let results = prober.results(&key);
    let probed = decisions(&keys, &results);
    debug!(
        portmapping = %key,
        targets = probed.targets,
        awaiting = probed.awaiting_first_result,
        decided = probed.decisions.len(),
        "network checks read"
    );
    probed
}

fn success_threshold(target: &Target) -> u32 {
    u32::try_from(target.settings.success_threshold)
        .unwrap_or(1)
        .max(1)
}

/// Every network check the planner will evaluate for this PortMapping, as prober targets: one
/// per (pool pod, Service port, family, check position, `anyOf` entries included), as
/// [`portmapper_core::probe_targets`] lists them with the keys the planner reads back.
///
/// Also left out, because the probe could not change what is published: (pod, port, family)
/// that a non-network check already excludes (a check list is an AND; the pod is probed from
/// the reconcile on in which that check includes it), and the pseudo-port of a headless
/// Service without ports (no target port to probe).
pub fn targets(
    pm: &PortMapping,
    service: &Service,
    pods: &[&Pod],
    live_slices: &[&EndpointSlice],
) -> Vec<Target> {
    let listed = match portmapper_core::probe_targets(pm, service, pods) {
        Ok(listed) => listed,
        // The planner reports an invalid selector; nothing to probe meanwhile.
        Err(_) => return Vec::new(),
    };
    if listed.is_empty() {
        // No network check anywhere: skip indexing every published endpoint (at 10,000 pods
        // that index was a tenth of a reconcile).
        return Vec::new();
    }
    let service_ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default();
    let published = published(pm, live_slices);
    let service_name = service.name_any();
    // Whether the non-network checks leave the probe a say, per (pod, port, family).
    let mut undecided: HashMap<(String, String, IpFamily), bool> = HashMap::new();
    let mut out = Vec::new();
    for listed in listed {
        let key = &listed.key;
        let Some(sp) = service_ports
            .iter()
            .find(|sp| sp.name.as_deref().unwrap_or_default() == key.port_name)
        else {
            continue;
        };
        let Some(target_port) = listed.target_port.and_then(|p| u16::try_from(p).ok()) else {
            continue;
        };
        let Some(check) = NetworkCheck::from_kind(listed.check) else {
            continue;
        };
        let (Ok(index), Ok(any_of)) = (
            u16::try_from(key.position.index),
            key.position.any_of.map(u16::try_from).transpose(),
        ) else {
            continue;
        };
        let probe_matters = *undecided
            .entry((key.pod_uid.clone(), key.port_name.clone(), key.family))
            .or_insert_with(|| {
                not_excluded_without_probes(pm, service, sp, listed.pod, listed.address, key.family)
            });
        if !probe_matters {
            continue;
        }
        let seed =
            if published.contains(&(key.port_name.as_str(), key.family, key.pod_uid.as_str())) {
                Membership::Included
            } else {
                Membership::Excluded
            };
        out.push(Target {
            pod: pool_pod(listed.pod, listed.address),
            service: service_name.clone(),
            port: ServicePort {
                name: key.port_name.clone(),
                port: sp.port,
                protocol: service_port_protocol(sp).to_owned(),
                target_port,
            },
            family: probe_family(key.family),
            position: CheckPosition {
                check: index,
                any_of,
            },
            check,
            settings: pm.spec.probe.clone(),
            initial_membership: seed,
        });
    }
    out
}

/// Whether the port's checks, evaluated with no network result at all, still leave the pod a
/// chance: network checks then abstain, so only a non-network check can exclude.
fn not_excluded_without_probes(
    pm: &PortMapping,
    service: &Service,
    sp: &K8sServicePort,
    pod: &Pod,
    address: IpAddr,
    family: IpFamily,
) -> bool {
    let port_name = sp.name.as_deref().unwrap_or_default();
    let resolved = ResolvedPort {
        name: port_name,
        port: Some(sp.port),
        protocol: service_port_protocol(sp),
        target: resolve_target_port(pod, sp),
        address,
        family,
    };
    let verdict = evaluate_port(
        port_rules(&pm.spec, port_name),
        &Evaluation {
            service,
            pod,
            port: &resolved,
            network: &NetworkDecisions::new(),
            publish_not_ready: publish_not_ready(&pm.spec, service),
        },
    );
    verdict.decision != Decision::Exclude
}

/// (port name, family, pod UID) published now in our slices: the seeds of new targets, read by
/// the planner's own rule for what Abstain keeps.
fn published<'a>(
    pm: &PortMapping,
    live_slices: &[&'a EndpointSlice],
) -> HashSet<(&'a str, IpFamily, &'a str)> {
    let uid = pm.metadata.uid.as_deref().unwrap_or_default();
    let ours: Vec<&EndpointSlice> = live_slices
        .iter()
        .copied()
        .filter(|s| crate::owner::controlled_by(*s, uid))
        .collect();
    portmapper_core::planner::published_memberships(&ours)
}

/// What a probe may know about a pod: its identity, metadata for webhooks, the one address of
/// the family being published, and its declared container ports (for named check ports).
fn pool_pod(pod: &Pod, address: IpAddr) -> PoolPod {
    let spec = pod.spec.as_ref();
    let containers = spec
        .map(|s| s.containers.as_slice())
        .unwrap_or_default()
        .iter()
        .chain(
            spec.and_then(|s| s.init_containers.as_deref())
                .unwrap_or_default(),
        );
    let ports = containers
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            Some(ContainerPort {
                name: p.name.clone()?,
                port: u16::try_from(p.container_port).ok()?,
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
            })
        })
        .collect();
    PoolPod {
        name: pod.name_any(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        labels: pod.labels().clone(),
        annotations: pod.annotations().clone(),
        ips: vec![address],
        ports,
    }
}

fn probe_family(family: IpFamily) -> Family {
    match family {
        IpFamily::V4 => Family::V4,
        IpFamily::V6 => Family::V6,
    }
}

fn core_family(family: Family) -> IpFamily {
    match family {
        Family::V4 => IpFamily::V4,
        Family::V6 => IpFamily::V6,
    }
}

/// Turns cached results into planner decisions. `targets` pairs each key with its
/// `successThreshold` (for the reason of a pod still earning its way in).
pub fn decisions(
    targets: &[(TargetKey, u32)],
    results: &HashMap<TargetKey, TargetResult>,
) -> Probed {
    let mut probed = Probed {
        targets: targets.len(),
        ..Probed::default()
    };
    for (key, threshold) in targets {
        let verdict = results.get(key).and_then(|r| verdict(r, *threshold));
        let Some(verdict) = verdict else {
            probed.awaiting_first_result += 1;
            continue;
        };
        probed.decisions.insert(
            NetworkKey {
                pod_uid: key.pod_uid.clone(),
                port_name: key.port.clone(),
                family: core_family(key.family),
                position: portmapper_core::CheckPosition {
                    index: usize::from(key.check.check),
                    any_of: key.check.any_of.map(usize::from),
                },
            },
            verdict,
        );
    }
    probed
}

/// The planner's verdict for one target's cached result; `None` before its first probe.
///
/// The damped membership decides. While only abstaining results came in (no Include or
/// Exclude counted yet: both streaks are zero), nothing is known about the pod, so the verdict
/// abstains too and what is published stays. Reasons are the prober's, so the PortMapping
/// status says why a pod is out (the planner prefixes the check name).
pub fn verdict(result: &TargetResult, success_threshold: u32) -> Option<Verdict> {
    let last = result.last.as_ref()?;
    if result.successes == 0 && result.failures == 0 {
        return Some(Verdict::abstain(format!(
            "no verdict yet ({})",
            last.reason
        )));
    }
    Some(match result.membership {
        Membership::Included => Verdict::INCLUDE,
        Membership::Excluded => Verdict::exclude(match last.outcome {
            Outcome::Exclude => result.reason.clone(),
            // Passing, but not for successThreshold probes in a row yet.
            Outcome::Include => format!(
                "{} ({} of {success_threshold} consecutive successes needed)",
                last.reason, result.successes
            ),
            Outcome::Abstain => format!(
                "{} (latest probe abstained: {})",
                result.reason, last.reason
            ),
        }),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::api::core::v1::{
        Container, ContainerPort as K8sContainerPort, PodCondition, PodIP, PodSpec, PodStatus,
        ServicePort as K8sServicePort, ServiceSpec,
    };
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use portmapper_api::check::{Check, HttpGetCheck, LeafCheck, PortNamesCheck, TcpSocketCheck};
    use portmapper_api::{KeySource, PortMappingSpec, PortRule};
    use portmapper_core::planner::{PlanInput, plan};
    use portmapper_probe::{CheckPosition, ProbeResult};

    use super::*;

    fn port_names() -> Check {
        Check {
            port_names: Some(PortNamesCheck {
                key: "example.com/ports".into(),
                from: KeySource::Annotation,
            }),
            ..Check::default()
        }
    }

    fn http_get(path: &str) -> Check {
        Check {
            http_get: Some(HttpGetCheck {
                path: Some(path.into()),
                ..HttpGetCheck::default()
            }),
            ..Check::default()
        }
    }

    fn pm(ports: Vec<PortRule>) -> PortMapping {
        let mut pm = PortMapping::new(
            "kafka",
            serde_json::from_value::<PortMappingSpec>(serde_json::json!({
                "serviceRef": {"name": "kafka"},
                "pods": {"key": "app"},
                "defaultChecks": [{"podReady": {}}],
            }))
            .unwrap(),
        );
        pm.spec.ports = ports;
        pm.metadata.namespace = Some("shop".into());
        pm.metadata.uid = Some("pm-uid".into());
        pm
    }

    fn service() -> Service {
        let port = |name: &str, n: i32| K8sServicePort {
            name: Some(name.into()),
            port: n,
            target_port: Some(IntOrString::Int(n)),
            ..K8sServicePort::default()
        };
        Service {
            metadata: ObjectMeta {
                name: Some("kafka".into()),
                namespace: Some("shop".into()),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                ports: Some(vec![port("broker", 9092), port("admin", 8080)]),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        }
    }

    fn pod(name: &str, ip: &str, ports: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("shop".into()),
                uid: Some(format!("uid-{name}")),
                labels: Some(BTreeMap::from([("app".into(), "kafka".into())])),
                annotations: Some(BTreeMap::from([("example.com/ports".into(), ports.into())])),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "app".into(),
                    ports: Some(vec![K8sContainerPort {
                        name: Some("health".into()),
                        container_port: 8558,
                        ..K8sContainerPort::default()
                    }]),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                pod_ips: Some(vec![PodIP { ip: ip.into() }]),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        }
    }

    fn owned_slice(port: &str, pods: &[&Pod]) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some(format!("kafka.{port}")),
                namespace: Some("shop".into()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "portmapper.dev/v1alpha1".into(),
                    kind: "PortMapping".into(),
                    name: "kafka".into(),
                    uid: "pm-uid".into(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            address_type: "IPv4".into(),
            ports: Some(vec![EndpointPort {
                name: Some(port.into()),
                ..EndpointPort::default()
            }]),
            endpoints: pods
                .iter()
                .map(|p| Endpoint {
                    addresses: vec![
                        p.status.as_ref().unwrap().pod_ips.as_ref().unwrap()[0]
                            .ip
                            .clone(),
                    ],
                    target_ref: Some(ObjectReference {
                        kind: Some("Pod".into()),
                        name: p.metadata.name.clone(),
                        uid: p.metadata.uid.clone(),
                        ..ObjectReference::default()
                    }),
                    ..Endpoint::default()
                })
                .collect(),
        }
    }

    fn rules() -> Vec<PortRule> {
        vec![
            PortRule {
                name: "broker".into(),
                checks: vec![
                    port_names(),
                    Check {
                        tcp_socket: Some(TcpSocketCheck::default()),
                        ..Check::default()
                    },
                ],
            },
            PortRule {
                name: "admin".into(),
                checks: vec![
                    port_names(),
                    Check {
                        any_of: Some(vec![LeafCheck {
                            pod_condition: None,
                            pod_ready: None,
                            http_get: Some(HttpGetCheck {
                                port: Some(IntOrString::String("health".into())),
                                ..HttpGetCheck::default()
                            }),
                            ..LeafCheck::default()
                        }]),
                        ..Check::default()
                    },
                ],
            },
        ]
    }

    fn result(membership: Membership, last: ProbeResult, s: u32, f: u32) -> TargetResult {
        TargetResult {
            membership,
            reason: last.reason.clone(),
            last: Some(last),
            successes: s,
            failures: f,
            probes: 1,
        }
    }

    #[test]
    fn targets_follow_rules_positions_backing_checks_and_seeds() {
        let a = pod("a", "10.244.0.1", "broker,admin");
        let b = pod("b", "10.244.0.2", "admin");
        let slices = [owned_slice("admin", &[&a])];
        let pm = pm(rules());
        let mut got: Vec<_> = targets(&pm, &service(), &[&a, &b], &[&slices[0]])
            .into_iter()
            .map(|t| {
                (
                    t.pod.name.clone(),
                    t.port.name.clone(),
                    t.position,
                    t.initial_membership,
                    t.pod_addr(false).unwrap().socket_addr().to_string(),
                )
            })
            .collect();
        got.sort_by(|x, y| format!("{x:?}").cmp(&format!("{y:?}")));
        let any_of = CheckPosition {
            check: 1,
            any_of: Some(0),
        };
        assert_eq!(
            got,
            vec![
                // The admin check names a container port: probed there, not on 8080.
                (
                    "a".into(),
                    "admin".into(),
                    any_of,
                    Membership::Included,
                    "10.244.0.1:8558".into()
                ),
                (
                    "a".into(),
                    "broker".into(),
                    CheckPosition::top(1),
                    Membership::Excluded,
                    "10.244.0.1:9092".into()
                ),
                // b does not list broker: portNames excludes it there, so it is not probed.
                (
                    "b".into(),
                    "admin".into(),
                    any_of,
                    Membership::Excluded,
                    "10.244.0.2:8558".into()
                ),
            ]
        );
    }

    #[test]
    fn publish_not_ready_and_unprobed_ports_need_no_targets() {
        let a = pod("a", "10.244.0.1", "broker,admin");
        let mut pm = pm(rules());
        pm.spec.publish_not_ready_addresses = Some(true);
        assert!(targets(&pm, &service(), &[&a], &[]).is_empty());
        let pm = self::pm(Vec::new());
        assert!(
            targets(&pm, &service(), &[&a], &[]).is_empty(),
            "podReady defaults probe nothing"
        );
    }

    #[test]
    fn verdicts_follow_damped_membership_and_keep_reasons() {
        let refused = ProbeResult::exclude(
            portmapper_probe::Cause::Refused,
            "connect to 10.244.0.1:9092: connection refused",
        );
        let healthy =
            ProbeResult::include(portmapper_probe::Cause::Healthy, "GET / answered HTTP 200");
        let down = ProbeResult::abstain(portmapper_probe::Cause::NoRoute, "no route");
        assert_eq!(
            verdict(&result(Membership::Excluded, refused.clone(), 0, 1), 1),
            Some(Verdict::exclude(
                "connect to 10.244.0.1:9092: connection refused"
            ))
        );
        assert_eq!(
            verdict(&result(Membership::Included, refused, 0, 1), 1),
            Some(Verdict::INCLUDE),
            "below failureThreshold the pod stays in"
        );
        assert_eq!(
            verdict(&result(Membership::Excluded, healthy.clone(), 1, 0), 3),
            Some(Verdict::exclude(
                "GET / answered HTTP 200 (1 of 3 consecutive successes needed)"
            ))
        );
        assert_eq!(
            verdict(&result(Membership::Excluded, down.clone(), 0, 0), 1).map(|v| v.decision),
            Some(Decision::Abstain),
            "only abstentions: nothing known"
        );
        let mut never = result(Membership::Included, down, 0, 0);
        never.last = None;
        assert_eq!(verdict(&never, 1), None);
    }

    #[test]
    fn results_reach_the_planned_slices_and_status() {
        let a = pod("a", "10.244.0.1", "broker,admin");
        let b = pod("b", "10.244.0.2", "broker,admin");
        let pods = [a.clone(), b.clone()];
        let mut pm = pm(vec![PortRule {
            name: "admin".into(),
            checks: vec![port_names(), http_get("/healthz")],
        }]);
        pm.spec.unlisted_ports = portmapper_api::UnlistedPorts::UseDefaultChecks;
        let svc = service();
        let slices = [owned_slice("admin", &[&a, &b])];
        let (pods, slices): (Vec<&Pod>, Vec<&EndpointSlice>) =
            (pods.iter().collect(), slices.iter().collect());
        let targets = targets(&pm, &svc, &pods, &slices);
        assert_eq!(targets.len(), 2, "only the admin port has a network check");
        let keys: Vec<_> = targets.iter().map(|t| (t.key(), 1)).collect();
        let mut results = HashMap::new();
        for t in &targets {
            let r = if t.pod.name == "b" {
                result(
                    Membership::Excluded,
                    ProbeResult::exclude(
                        portmapper_probe::Cause::Status,
                        "GET /healthz answered HTTP 503",
                    ),
                    0,
                    3,
                )
            } else {
                result(
                    Membership::Included,
                    ProbeResult::include(
                        portmapper_probe::Cause::Healthy,
                        "GET /healthz answered HTTP 200",
                    ),
                    1,
                    0,
                )
            };
            results.insert(t.key(), r);
        }
        let probed = decisions(&keys, &results);
        assert_eq!(
            (
                probed.targets,
                probed.awaiting_first_result,
                probed.decisions.len()
            ),
            (2, 0, 2)
        );
        let plan = plan(&PlanInput {
            port_mapping: &pm,
            service: &svc,
            pods: &pods,
            node_zones: &BTreeMap::new(),
            network: &probed.decisions,
            live_slices: &slices
                .iter()
                .map(|s| std::sync::Arc::new((*s).clone()))
                .collect::<Vec<_>>(),
            take_over: &[],
            live_endpoints: None,
            now: k8s_openapi::jiff::Timestamp::now(),
        })
        .unwrap();
        let admin = plan.ports.iter().find(|p| p.name == "admin").unwrap();
        assert_eq!(admin.ready, 1);
        assert_eq!(admin.excluded.len(), 1);
        assert_eq!(admin.excluded[0].pod, "b");
        assert_eq!(
            admin.excluded[0].reason,
            "httpGet: GET /healthz answered HTTP 503"
        );
        let broker = plan.ports.iter().find(|p| p.name == "broker").unwrap();
        assert_eq!(broker.ready, 2, "the other port is unaffected");

        // Without results the targets await and publish nothing new.
        let probed = decisions(&keys, &HashMap::new());
        assert_eq!(
            (probed.awaiting_first_result, probed.decisions.len()),
            (2, 0)
        );
    }
}
