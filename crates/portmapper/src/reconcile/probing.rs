//! Network checks in the reconcile: how the prober's cached, damped results become the
//! planner's [`NetworkDecisions`], and how the plan's network lookups become the targets the
//! prober watches.
//!
//! A reconcile never waits on a probe: it reads the results cached so far ([`results`]), plans
//! with them, and hands the prober the lookups the plan reports ([`targets`], set after the pass through
//! [`Prober::set_targets`], which keeps known targets' schedules and streaks). The planner
//! reports a lookup whether or not a result exists, so a check without one (a new pod, every
//! target of a restarted operator) is probed from that reconcile on, seeded with what is
//! published. A target whose first probe has not finished has no entry, and one with only
//! abstaining results abstains; the planner reads both as Abstain: whatever is published for
//! that (pod, port, family) stays, so a restart neither flaps nor empties a slice. A damped
//! flip arrives on [`ProbeEvents`] and reconciles that PortMapping.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use portmapper_api::{CheckPosition, NetworkKey, PortMapping};
use portmapper_core::target::service_port_protocol;
use portmapper_core::{NetworkDecisions, NetworkLookup, PodRecord, Verdict, check_at, port_rules};
use portmapper_probe::{
    ContainerPort, ExecutorConfig, MappingKey, Membership, MetadataSource, NetworkCheck, Outcome,
    PodMetadata, PoolPod, ProbeEvents, ProbeExecutor, Prober, ProberConfig, ServicePort, Target,
    TargetResult,
};
use tracing::debug;

use crate::index::trigger::Trigger;
use crate::reconcile::context::Settings;
use crate::reconcile::probe_aliases::{ProbeAliases, dedupe};
use crate::runtime::error::Error;
use crate::runtime::metrics::Metrics;

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

/// Starts the operator's prober: probes over the network (or with `executor`), within the
/// settings' probe concurrency bounds, webhooks within their egress policy, reporting to the
/// operator's `/metrics`.
pub fn start(
    settings: &Settings,
    executor: Option<CustomExecutor>,
    metrics: &Metrics,
) -> Result<(Prober, ProbeEvents), Error> {
    let config = ProberConfig {
        concurrency: settings.probe_concurrency,
        concurrency_per_namespace: settings.probe_concurrency_per_namespace,
        concurrency_per_mapping: settings.probe_concurrency_per_portmapping,
        ..ProberConfig::default()
    };
    let metrics = Arc::new(metrics.probe.clone());
    match executor {
        Some(CustomExecutor(executor)) => Prober::new(config, executor, metrics),
        None => {
            let webhook_egress = settings.webhook_egress.clone();
            tracing::info!(policy = %webhook_egress, "webhook egress policy");
            let executor = ExecutorConfig {
                webhook_egress,
                ..ExecutorConfig::default()
            };
            Prober::network(config, executor, metrics)
        }
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

/// Reads the PortMapping's cached, damped results as planner decisions. Never waits on a
/// probe: a target whose first probe has not finished has no entry (the planner reads
/// Abstain).
/// Targets probed through an identical one read its result ([`ProbeAliases`]).
pub fn results(prober: &Prober, aliases: &ProbeAliases, pm: &PortMapping) -> NetworkDecisions {
    let key = mapping_key(pm);
    let mut results = prober.results(&key);
    aliases.expand(&key, &mut results);
    decisions(&results, success_threshold(pm))
}

/// The prober's work for one PortMapping after a plan, handed over once the pass ran
/// ([`Targets::set`]).
#[derive(Debug)]
pub struct Targets {
    key: MappingKey,
    /// The targets to probe: identical probes once.
    watched: Vec<Target>,
    /// The targets probed through an identical one ([`ProbeAliases`]).
    aliased: HashMap<NetworkKey, NetworkKey>,
    /// Targets without a first result yet: the reconcile looks again soon while any remain.
    pub awaiting_first_result: usize,
}

/// The PortMapping's targets: the network lookups of its plan (`pods` is the plan's
/// `PlanInput::pods`, `network` what it read).
pub fn targets(
    pm: &PortMapping,
    service: &Service,
    pods: &[Arc<PodRecord>],
    lookups: &[NetworkLookup],
    network: &NetworkDecisions,
) -> Targets {
    let (watched, aliased) = dedupe(lookup_targets(pm, service, pods, lookups));
    let awaiting_first_result = watched
        .iter()
        .filter(|t| {
            let k = t.key();
            network
                .get(&k.pod_uid, &k.port_name, k.family, k.position)
                .is_none()
        })
        .count();
    debug!(
        portmapping = %mapping_key(pm),
        targets = watched.len(),
        awaiting = awaiting_first_result,
        decided = network.len(),
        "network checks watched"
    );
    Targets {
        key: mapping_key(pm),
        watched,
        aliased,
        awaiting_first_result,
    }
}

impl Targets {
    /// Sets them as the PortMapping's targets, keeping known targets' schedules and streaks,
    /// and records its aliases.
    pub fn set(self, prober: &Prober, aliases: &ProbeAliases) {
        aliases.set(&self.key, self.aliased);
        prober.set_targets(&self.key, self.watched);
    }
}

fn success_threshold(pm: &PortMapping) -> u32 {
    u32::try_from(pm.spec.probe.success_threshold)
        .unwrap_or(1)
        .max(1)
}

/// The plan's network lookups as prober targets. A lookup the prober cannot run is left out:
/// a target port outside 1–65535 (the Service would not validate), or a position holding no
/// network check (the spec changed under the plan: not possible with one spec).
///
/// A pod's facts and a position's check are built once and shared by their targets: a pod
/// with many ports and checks costs one record (its metadata read from the index's own, only
/// when a webhook review is sent), and a check one copy however many pods it probes.
pub fn lookup_targets(
    pm: &PortMapping,
    service: &Service,
    pods: &[Arc<PodRecord>],
    lookups: &[NetworkLookup],
) -> Vec<Target> {
    if lookups.is_empty() {
        return Vec::new();
    }
    let service_ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default();
    let service_name = service.name_any();
    let settings = &pm.spec.probe;
    let mut shared = Shared::default();
    let mut out = Vec::with_capacity(lookups.len());
    for lookup in lookups {
        let key = &lookup.key;
        let (Some(sp), Some(pod)) = (service_ports.get(lookup.service_port), pods.get(lookup.pod))
        else {
            continue;
        };
        let Ok(target_port) = u16::try_from(lookup.target_port) else {
            continue;
        };
        let Some(check) = shared.check(pm, &key.port_name, key.position) else {
            continue;
        };
        out.push(Target {
            pod: shared.pod(lookup.pod, pod, lookup.address),
            service: service_name.clone(),
            port: ServicePort {
                name: key.port_name.clone(),
                port: sp.port,
                protocol: service_port_protocol(sp).to_owned(),
                target_port,
            },
            family: key.family,
            position: key.position,
            check,
            settings: settings.clone(),
            initial_membership: if lookup.published {
                Membership::Included
            } else {
                Membership::Excluded
            },
        });
    }
    out
}

/// The pod facts and checks already built for one plan's targets.
#[derive(Default)]
struct Shared {
    pods: HashMap<(usize, IpAddr), Arc<PoolPod>>,
    checks: HashMap<(String, CheckPosition), Option<Arc<NetworkCheck>>>,
}

impl Shared {
    fn pod(&mut self, index: usize, pod: &Arc<PodRecord>, address: IpAddr) -> Arc<PoolPod> {
        self.pods
            .entry((index, address))
            .or_insert_with(|| Arc::new(pool_pod(pod, address)))
            .clone()
    }

    fn check(
        &mut self,
        pm: &PortMapping,
        port: &str,
        position: CheckPosition,
    ) -> Option<Arc<NetworkCheck>> {
        self.checks
            .entry((port.to_owned(), position))
            .or_insert_with(|| {
                check_at(port_rules(&pm.spec, port), position)
                    .and_then(|kind| kind.as_network())
                    .map(|kind| Arc::new(kind.cloned()))
            })
            .clone()
    }
}

/// A pod's labels and annotations, read from its index record when a webhook needs them.
struct RecordMetadata(Arc<PodRecord>);

impl MetadataSource for RecordMetadata {
    fn labels(&self) -> BTreeMap<String, String> {
        owned(&self.0.labels)
    }
    fn annotations(&self) -> BTreeMap<String, String> {
        owned(&self.0.annotations)
    }
}

fn owned(pairs: &portmapper_core::Pairs) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// What a probe may know about a pod: its identity, metadata for webhooks, the one address of
/// the family being published, and its declared container ports (for named check ports).
fn pool_pod(pod: &Arc<PodRecord>, address: IpAddr) -> PoolPod {
    let containers = pod.containers.iter().chain(&pod.init_containers);
    let ports = containers
        .flat_map(|c| &c.ports)
        .filter_map(|p| {
            Some(ContainerPort {
                name: p.name.clone()?,
                port: u16::try_from(p.container_port).ok()?,
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
            })
        })
        .collect();
    PoolPod {
        name: pod.name.clone(),
        uid: pod.uid.clone(),
        metadata: PodMetadata::shared(Arc::new(RecordMetadata(pod.clone()))),
        ips: vec![address],
        ports,
    }
}

/// Turns cached results into planner decisions (`success_threshold` for the reason of a pod
/// still earning its way in). A target before its first probe has no entry.
pub fn decisions(
    results: &HashMap<NetworkKey, TargetResult>,
    success_threshold: u32,
) -> NetworkDecisions {
    results
        .iter()
        .filter_map(|(key, r)| Some((key.clone(), verdict(r, success_threshold)?)))
        .collect()
}

/// The planner's verdict for one target's cached result, as the prober's damping decided it
/// ([`TargetResult::decided`]); `None` before its first probe. Reasons are the prober's, so the
/// PortMapping status says why a pod is out (the planner prefixes the check name).
fn verdict(result: &TargetResult, success_threshold: u32) -> Option<Verdict> {
    let (outcome, reason) = result.decided(success_threshold)?;
    Some(match outcome {
        Outcome::Include => Verdict::INCLUDE,
        Outcome::Exclude => Verdict::exclude(reason),
        Outcome::Abstain => Verdict::abstain(reason),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::api::core::v1::{
        Container, ContainerPort as K8sContainerPort, Pod, PodCondition, PodIP, PodSpec, PodStatus,
        ServicePort as K8sServicePort, ServiceSpec,
    };
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use portmapper_api::check::{Check, HttpGetCheck, LeafCheck, PortNamesCheck, TcpSocketCheck};
    use portmapper_api::{KeySource, PortMappingSpec, PortRule};
    use portmapper_core::planner::{Plan, PlanInput, plan};
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

    fn pod(name: &str, ip: &str, ports: &str) -> PodRecord {
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
        .into()
    }

    fn owned_slice(port: &str, pods: &[&PodRecord]) -> EndpointSlice {
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
                    addresses: vec![p.pod_ips[0].clone()],
                    target_ref: Some(ObjectReference {
                        kind: Some("Pod".into()),
                        name: Some(p.name.clone()),
                        uid: Some(p.uid.clone()),
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

    fn shared(pods: &[&PodRecord]) -> Vec<std::sync::Arc<PodRecord>> {
        pods.iter()
            .map(|&p| std::sync::Arc::new(p.clone()))
            .collect()
    }

    fn plan_of(
        pm: &PortMapping,
        svc: &Service,
        pods: &[&PodRecord],
        slices: &[&EndpointSlice],
        network: &NetworkDecisions,
    ) -> Plan {
        let pods: Vec<std::sync::Arc<PodRecord>> = pods
            .iter()
            .map(|&p| std::sync::Arc::new(p.clone()))
            .collect();
        plan(&PlanInput {
            network,
            live_slices: &slices
                .iter()
                .map(|s| std::sync::Arc::new((*s).clone().into()))
                .collect::<Vec<_>>(),
            now: k8s_openapi::jiff::Timestamp::now(),
            ..PlanInput::first_publication(pm, svc, &pods, &BTreeMap::new())
        })
        .unwrap()
    }

    /// The prober targets of the plan of these inputs (no results yet).
    fn planned_targets(
        pm: &PortMapping,
        svc: &Service,
        pods: &[&PodRecord],
        slices: &[&EndpointSlice],
    ) -> Vec<Target> {
        let plan = plan_of(pm, svc, pods, slices, &NetworkDecisions::new());
        lookup_targets(pm, svc, &shared(pods), &plan.network_lookups)
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
        let mut got: Vec<_> = planned_targets(&pm, &service(), &[&a, &b], &[&slices[0]])
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
            index: 1,
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
        assert!(planned_targets(&pm, &service(), &[&a], &[]).is_empty());
        let pm = self::pm(Vec::new());
        assert!(
            planned_targets(&pm, &service(), &[&a], &[]).is_empty(),
            "podReady defaults probe nothing"
        );
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
        let (pods, slices): (Vec<&PodRecord>, Vec<&EndpointSlice>) =
            (pods.iter().collect(), slices.iter().collect());
        let watched = planned_targets(&pm, &svc, &pods, &slices);
        assert_eq!(watched.len(), 2, "only the admin port has a network check");
        let mut results = HashMap::new();
        for t in &watched {
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
        let network = decisions(&results, 1);
        assert_eq!(network.len(), 2);
        let plan = plan_of(&pm, &svc, &pods, &slices, &network);
        assert_eq!(
            lookup_targets(&pm, &svc, &shared(&pods), &plan.network_lookups),
            watched,
            "the results change nothing of what is probed"
        );
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

        // A target before its first probe has no decision.
        let mut never = results.clone();
        for r in never.values_mut() {
            r.last = None;
        }
        assert!(decisions(&never, 1).is_empty());
    }
}
