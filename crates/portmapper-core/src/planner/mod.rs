//! The pure planner: from a PortMapping, its Service, the pool pods, node zones, membership
//! decisions and what is published now, compute the EndpointSlices (and legacy Endpoints) that
//! must exist, what to write, and the status to report.
//!
//! Rendering rules (native EndpointSlice controller parity unless stated):
//! - One slice set per Service port × IP family (`spec.ipFamilies`, primary first; else the
//!   cluster IP's family; else IPv4) × resolved target port, chunked at
//!   `maxEndpointsPerSlice`. Each slice carries exactly one port. A headless Service without
//!   ports gets portless slices of every pool pod under the default checks. ExternalName:
//!   nothing, and every owned object is deleted.
//! - Names: `<svc>.<port>[.v6][.p<target>][.<chunk>]` ([`naming`]); `.p<target>` only for named
//!   targetPorts, which resolve per pod (containers, then sidecar init containers; name and
//!   protocol must match).
//! - Candidates: pool pods that are not terminal, resolve the target port and have an address
//!   of the family. Addresses the API rejects (loopback, link-local, unspecified, link-local
//!   multicast) leave the pod out with a warning and an exclusion reason.
//! - Members: candidates whose checks include them; Abstain keeps whatever the live slices
//!   publish for that (port name, family, pod UID). Conditions: `serving=true`,
//!   `terminating` = deletionTimestamp set, `ready` = publishNotReadyAddresses or not
//!   terminating. `terminatingEndpoints: Drop` leaves terminating pods out.
//! - Endpoint: one canonical address, targetRef to the pod, nodeName, zone of the node,
//!   hostname when the pod's subdomain is the Service, hints for ready endpoints only
//!   (`PreferClose`/`PreferSameZone` → zone, `PreferSameNode` → node and zone;
//!   `topology-mode: Auto` → none, with a warning).
//! - Metadata: Service labels minus reserved ones, `service.kubernetes.io/headless` for
//!   headless Services, `kubernetes.io/service-name`, `managed-by: portmapper.dev`, a controller
//!   owner reference to the PortMapping with `blockOwnerDeletion: true`, and
//!   `last-change-trigger-time` = `PlanInput::now` on written slices only (unchanged slices keep
//!   theirs).
//! - Placeholder: a port × family without members keeps one empty slice (with its port): at the
//!   static target, or for a named target at an already published group, else the lowest number
//!   a candidate resolves; none when no candidate resolves the name.
//! - Packing: [`pack()`](pack::pack). Equality: semantic ([`metadata_eq`], [`endpoint_eq`], [`ports_eq`]), so a
//!   converged plan has zero writes.
//! - Every slice and Endpoints object to write passes `kube-validation`, or the plan fails.
//! - While the PortMapping is being deleted, no slice is created (existing ones still update).

mod compare;
mod legacy;
pub mod naming;
pub mod pack;
pub mod render;
mod status;
mod types;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Pod, Service, ServicePort};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_validation::IpFamily;
use portmapper_api::TerminatingEndpoints;

pub use compare::{endpoint_eq, metadata_eq, ports_eq};
pub use types::{
    Action, Deletion, Plan, PlanError, PlanInput, PlanWarning, PlannedEndpoints, PlannedSlice,
};

use crate::decision::Decision;
use crate::membership::{Evaluation, PortRules, evaluate_port, port_rules, publish_not_ready};
use crate::pool::pod_in_pool;
use crate::target::{
    PodAddress, ResolvedPort, is_named_target, is_terminal, is_terminating, pod_address,
    resolve_target_port, service_port_protocol,
};
use naming::{chunk_name, group_base_name, parse_chunk};
use pack::{LiveChunk, pack};
use render::{
    ANNOTATION_TRIGGER_TIME, EndpointFacts, hint_mode, owner_reference, render_endpoint,
    slice_labels,
};
use status::{PodPortState, port_statuses};

/// One Service port as the planner sees it (or the portless pseudo-port of a headless Service
/// without ports).
pub(crate) struct PortView<'a> {
    pub service_port: Option<&'a ServicePort>,
    /// Port name, `""` when unnamed or portless.
    pub name: &'a str,
    /// Name segment in slice names: the name, else the number; `None` when portless.
    pub key: Option<String>,
    pub number: Option<i32>,
    pub protocol: &'a str,
    pub named_target: bool,
    pub rules: PortRules<'a>,
}

/// A published (pod, port, family) member, kept for the legacy Endpoints rendering.
pub(crate) struct Member {
    pub pod: usize,
    pub port: usize,
    pub target: Option<i32>,
    pub ready: bool,
    pub endpoint: Endpoint,
}

struct Group<'a> {
    port: usize,
    family: IpFamily,
    target: Option<i32>,
    base: String,
    placeholder: bool,
    endpoints: Vec<(IpAddr, &'a str, Endpoint)>,
}

/// The IP families the Service publishes, primary first: `spec.ipFamilies`, else the family of
/// its cluster IP, else IPv4.
pub fn service_families(service: &Service) -> Vec<IpFamily> {
    let spec = service.spec.as_ref();
    let mut families: Vec<IpFamily> = Vec::new();
    for f in spec
        .and_then(|s| s.ip_families.as_deref())
        .unwrap_or_default()
    {
        if let Some(f) = IpFamily::parse(f).filter(|f| !families.contains(f)) {
            families.push(f);
        }
    }
    if families.is_empty() {
        let from_ip = spec
            .and_then(|s| {
                s.cluster_ips
                    .as_ref()
                    .and_then(|ips| ips.first())
                    .or(s.cluster_ip.as_ref())
            })
            .and_then(|ip| kube_validation::ip::ip_family(ip));
        families.push(from_ip.unwrap_or(IpFamily::V4));
    }
    families
}

fn is_external_name(service: &Service) -> bool {
    service.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("ExternalName")
}

fn controller_uid(meta: &ObjectMeta) -> Option<&str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
}

fn port_views<'a>(
    service: &'a Service,
    spec: &'a portmapper_api::PortMappingSpec,
) -> Vec<PortView<'a>> {
    let ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default();
    if ports.is_empty() {
        // Headless Services may have no ports: publish the pods for DNS with an empty port list,
        // under the default checks.
        if render::is_headless(service) {
            return vec![PortView {
                service_port: None,
                name: "",
                key: None,
                number: None,
                protocol: "TCP",
                named_target: false,
                rules: port_rules(spec, ""),
            }];
        }
        return Vec::new();
    }
    ports
        .iter()
        .map(|sp| {
            let name = sp.name.as_deref().unwrap_or_default();
            PortView {
                service_port: Some(sp),
                name,
                key: Some(if name.is_empty() {
                    sp.port.to_string()
                } else {
                    name.to_owned()
                }),
                number: Some(sp.port),
                protocol: service_port_protocol(sp),
                named_target: is_named_target(sp),
                rules: port_rules(spec, name),
            }
        })
        .collect()
}

fn static_target(sp: &ServicePort) -> i32 {
    match &sp.target_port {
        Some(IntOrString::Int(n)) if *n != 0 => *n,
        _ => sp.port,
    }
}

/// Computes the plan. Pure and deterministic: the same input always gives the same plan, and
/// applying a plan then planning again gives a plan without writes.
pub fn plan(input: &PlanInput<'_>) -> Result<Plan, PlanError> {
    let pm = input.port_mapping;
    let spec = &pm.spec;
    let nonempty = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
    let namespace =
        nonempty(&pm.metadata.namespace).ok_or(PlanError::MissingMetadata("metadata.namespace"))?;
    let pm_name = nonempty(&pm.metadata.name).ok_or(PlanError::MissingMetadata("metadata.name"))?;
    let pm_uid = nonempty(&pm.metadata.uid).ok_or(PlanError::MissingMetadata("metadata.uid"))?;
    let service = input.service;
    let svc_name = spec.service_ref.name.as_str();
    if service.metadata.name.as_deref() != Some(svc_name) {
        return Err(PlanError::ServiceMismatch {
            expected: svc_name.to_owned(),
            got: service.metadata.name.clone().unwrap_or_default(),
        });
    }
    let owner = owner_reference(&pm_name, &pm_uid);
    let mut out = Plan::default();

    // Ours vs foreign: a slice controlled by another owner is never touched.
    let mut ours: Vec<&EndpointSlice> = Vec::new();
    let mut foreign_names: HashSet<&str> = HashSet::new();
    for s in input.live_slices {
        let name = s.metadata.name.as_deref().unwrap_or_default();
        match controller_uid(&s.metadata) {
            Some(uid) if uid != pm_uid => {
                foreign_names.insert(name);
                out.warnings.push(PlanWarning::ForeignSlice {
                    name: name.to_owned(),
                });
            }
            _ => ours.push(s),
        }
    }

    if is_external_name(service) {
        out.warnings.push(PlanWarning::ExternalName);
        out.deletions = ours.iter().map(|s| deletion(&s.metadata)).collect();
        out.deletions.sort();
        out.endpoints_deletion = legacy::owned_endpoints_deletion(input.live_endpoints, &pm_uid);
        return Ok(out);
    }

    let mut pods: Vec<&Pod> = Vec::new();
    for pod in input.pods {
        if pod_in_pool(spec, &namespace, pod)? {
            pods.push(pod);
        }
    }
    let families = service_families(service);
    let primary = families[0];
    let pnr = publish_not_ready(spec, service);
    let (hints, auto) = hint_mode(service);
    if let Some(annotation) = auto {
        out.warnings.push(PlanWarning::TopologyModeAuto {
            annotation: annotation.to_owned(),
        });
    }
    let ports = port_views(service, spec);
    let labels = slice_labels(service, svc_name);

    // Memberships currently published, for Abstain; built on the first abstention only.
    let mut published: Option<HashSet<(&str, IpFamily, &str)>> = None;

    // Evaluate every (pod, port, family).
    let mut states: Vec<Vec<Option<PodPortState>>> = vec![vec![None; pods.len()]; ports.len()];
    let mut members: Vec<Member> = Vec::new();
    let mut groups: Vec<Group<'_>> = Vec::new();
    let mut rejected_warned: HashSet<(usize, String)> = HashSet::new();
    for (port_idx, port) in ports.iter().enumerate() {
        for &family in &families {
            let mut by_target: BTreeMap<Option<i32>, Vec<(IpAddr, &str, Endpoint)>> =
                BTreeMap::new();
            let mut candidate_targets: BTreeSet<i32> = BTreeSet::new();
            for (pod_idx, pod) in pods.iter().enumerate() {
                if is_terminal(pod) {
                    continue;
                }
                let target = match port.service_port {
                    None => None,
                    Some(sp) => match resolve_target_port(pod, sp) {
                        Some(t) => Some(t),
                        None => continue,
                    },
                };
                let address = match pod_address(pod, family) {
                    PodAddress::Usable(a) => a,
                    PodAddress::Missing => continue,
                    PodAddress::Rejected { ip, reason } => {
                        let pod_name = pod.metadata.name.clone().unwrap_or_default();
                        if rejected_warned.insert((pod_idx, ip.clone())) {
                            out.warnings.push(PlanWarning::RejectedPodAddress {
                                pod: pod_name,
                                ip: ip.clone(),
                                reason: reason.clone(),
                            });
                        }
                        merge_state(
                            &mut states[port_idx][pod_idx],
                            PodPortState::Excluded(format!(
                                "address {ip} cannot be published: {reason}"
                            )),
                        );
                        continue;
                    }
                };
                if let Some(t) = target {
                    candidate_targets.insert(t.number);
                }
                let uid = pod.metadata.uid.as_deref().unwrap_or_default();
                let resolved = ResolvedPort {
                    name: port.name,
                    port: port.number,
                    protocol: port.protocol,
                    target,
                    address,
                    family,
                };
                let verdict = evaluate_port(
                    port.rules,
                    &Evaluation {
                        service,
                        pod,
                        port: &resolved,
                        network: input.network,
                        publish_not_ready: pnr,
                    },
                );
                let terminating = is_terminating(pod);
                let mut state = match verdict.decision {
                    Decision::Include => None,
                    Decision::Exclude => Some(verdict.reason().to_owned()),
                    Decision::Abstain
                        if published
                            .get_or_insert_with(|| published_memberships(&ours))
                            .contains(&(port.name, family, uid)) =>
                    {
                        None
                    }
                    Decision::Abstain => Some(format!(
                        "{} (abstained; nothing published to keep)",
                        verdict.reason()
                    )),
                };
                if state.is_none()
                    && terminating
                    && spec.terminating_endpoints == TerminatingEndpoints::Drop
                {
                    state =
                        Some("pod is terminating and spec.terminatingEndpoints is Drop".to_owned());
                }
                if let Some(reason) = state {
                    merge_state(
                        &mut states[port_idx][pod_idx],
                        PodPortState::Excluded(reason),
                    );
                    continue;
                }
                let ready = pnr || !terminating;
                let zone = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .and_then(|n| input.node_zones.get(n))
                    .map(String::as_str);
                let endpoint = render_endpoint(
                    &EndpointFacts {
                        pod,
                        address,
                        ready,
                        terminating,
                        zone,
                    },
                    svc_name,
                    &namespace,
                    hints,
                );
                merge_state(
                    &mut states[port_idx][pod_idx],
                    PodPortState::Published { ready },
                );
                let group_target = match (port.service_port, target) {
                    (Some(sp), Some(t)) => Some(if port.named_target {
                        t.number
                    } else {
                        static_target(sp)
                    }),
                    _ => None,
                };
                if spec.legacy_endpoints && family == primary {
                    members.push(Member {
                        pod: pod_idx,
                        port: port_idx,
                        target: target.map(|t| t.number),
                        ready,
                        endpoint: endpoint.clone(),
                    });
                }
                by_target
                    .entry(group_target)
                    .or_default()
                    .push((address, uid, endpoint));
            }
            // The group set: the static target, or every target a candidate resolves.
            let static_key = port
                .service_port
                .filter(|_| !port.named_target)
                .map(static_target);
            let targets: Vec<Option<i32>> = if port.named_target {
                candidate_targets.iter().map(|t| Some(*t)).collect()
            } else {
                vec![static_key]
            };
            let any_members = by_target.values().any(|v| !v.is_empty());
            let placeholder_target = if any_members {
                None
            } else if port.named_target {
                // Prefer a group that is already published so an emptied port rewrites one slice.
                let live_first = targets.iter().copied().find(|t| {
                    let base = group_base_name(svc_name, port.key.as_deref(), family, *t);
                    ours.iter().any(|s| {
                        let name = s.metadata.name.as_deref().unwrap_or_default();
                        parse_chunk(name, |b| b == base).is_some()
                    })
                });
                live_first.or_else(|| targets.first().copied())
            } else {
                Some(static_key)
            };
            for target in targets {
                let mut endpoints = by_target.remove(&target).unwrap_or_default();
                endpoints.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
                groups.push(Group {
                    port: port_idx,
                    family,
                    target,
                    base: group_base_name(
                        svc_name,
                        port.key.as_deref(),
                        family,
                        target.filter(|_| port.named_target),
                    ),
                    placeholder: placeholder_target == Some(target),
                    endpoints,
                });
            }
        }
    }

    // Assign live slices to groups by name.
    let base_index: HashMap<&str, usize> = groups
        .iter()
        .enumerate()
        .map(|(i, g)| (g.base.as_str(), i))
        .collect();
    let mut live_by_group: Vec<Vec<(u32, &EndpointSlice)>> = vec![Vec::new(); groups.len()];
    let mut reserved: Vec<HashSet<u32>> = vec![HashSet::new(); groups.len()];
    for name in &foreign_names {
        if let Some((base, chunk)) = parse_chunk(name, |b| base_index.contains_key(b)) {
            reserved[base_index[base]].insert(chunk);
        }
    }
    for s in &ours {
        let name = s.metadata.name.as_deref().unwrap_or_default();
        match parse_chunk(name, |b| base_index.contains_key(b)) {
            Some((base, chunk)) => {
                let g = base_index[base];
                if s.address_type == groups[g].family.as_str() {
                    live_by_group[g].push((chunk, s));
                } else {
                    // addressType is immutable: delete now, recreate under this name next pass.
                    reserved[g].insert(chunk);
                    out.deletions.push(deletion(&s.metadata));
                }
            }
            None => out.deletions.push(deletion(&s.metadata)),
        }
    }

    // Pack and render.
    let max = usize::try_from(spec.max_endpoints_per_slice.clamp(1, 1000)).unwrap_or(100);
    let now = input.now.to_string();
    for (g, group) in groups.into_iter().enumerate() {
        let port = &ports[group.port];
        let slice_ports: Vec<EndpointPort> = match (port.service_port, group.target) {
            (Some(sp), Some(target)) => vec![EndpointPort {
                name: Some(port.name.to_owned()),
                port: Some(target),
                protocol: Some(port.protocol.to_owned()),
                app_protocol: sp.app_protocol.clone(),
            }],
            _ => Vec::new(),
        };
        let template = ObjectMeta {
            namespace: Some(namespace.clone()),
            labels: Some(labels.clone()),
            owner_references: Some(vec![owner.clone()]),
            ..ObjectMeta::default()
        };
        let live = &live_by_group[g];
        let live_chunks: Vec<LiveChunk<'_>> = live
            .iter()
            .map(|(chunk, s)| LiveChunk {
                chunk: *chunk,
                endpoints: &s.endpoints,
                drift: !metadata_eq(&template, &s.metadata)
                    || !ports_eq(&slice_ports, s.ports.as_deref().unwrap_or_default()),
            })
            .collect();
        let desired: Vec<Endpoint> = group.endpoints.into_iter().map(|(_, _, e)| e).collect();
        let packing = pack(&desired, &live_chunks, max, group.placeholder, &|n| {
            reserved[g].contains(&n)
        });
        // Each desired endpoint lands in exactly one chunk: move, don't clone.
        let mut pool: Vec<Option<Endpoint>> = desired.into_iter().map(Some).collect();
        out.deletions.extend(
            packing
                .deleted
                .iter()
                .map(|&i| deletion(&live[i].1.metadata)),
        );
        for chunk in packing.chunks {
            let live_slice = chunk.live.map(|i| live[i].1);
            let action = match (live_slice, chunk.changed) {
                (None, _) => Action::Create,
                (Some(l), true) => Action::Update {
                    resource_version: l.metadata.resource_version.clone(),
                },
                (Some(_), false) => Action::Unchanged,
            };
            let trigger = if action.is_write() {
                Some(now.clone())
            } else {
                live_slice
                    .and_then(|l| l.metadata.annotations.as_ref())
                    .and_then(|a| a.get(ANNOTATION_TRIGGER_TIME))
                    .cloned()
            };
            let mut metadata = template.clone();
            metadata.name = Some(chunk_name(&group.base, chunk.chunk));
            metadata.annotations =
                trigger.map(|t| BTreeMap::from([(ANNOTATION_TRIGGER_TIME.to_owned(), t)]));
            let slice = EndpointSlice {
                metadata,
                address_type: group.family.as_str().to_owned(),
                endpoints: chunk
                    .endpoints
                    .iter()
                    .filter_map(|&i| pool[i].take())
                    .collect(),
                ports: Some(slice_ports.clone()),
            };
            if action.is_write() {
                let errors = kube_validation::validate_endpoint_slice(&slice);
                if !errors.is_empty() {
                    let name = slice.metadata.name.clone().unwrap_or_default();
                    return Err(PlanError::InvalidRender {
                        kind: "EndpointSlice",
                        message: kube_validation::invalid_message(
                            "EndpointSlice",
                            "discovery.k8s.io",
                            &name,
                            &errors,
                        ),
                        name,
                    });
                }
            }
            out.slices.push(PlannedSlice { slice, action });
        }
    }
    out.slices
        .sort_by(|a, b| a.slice.metadata.name.cmp(&b.slice.metadata.name));
    out.deletions.sort();
    out.deletions.dedup();
    if pm.metadata.deletion_timestamp.is_some() {
        // Like the native controller while its Service is deleted: no creates that would race
        // the garbage collector; existing slices are still kept accurate.
        out.slices.retain(|s| s.action != Action::Create);
    }

    // Legacy Endpoints.
    if spec.legacy_endpoints {
        let ctx = legacy::LegacyContext {
            service,
            svc_name,
            namespace: &namespace,
            owner: &owner,
            pm_uid: &pm_uid,
            pods: &pods,
            ports: &ports,
            now: &now,
        };
        match legacy::plan_endpoints(&ctx, &members, input.live_endpoints)? {
            legacy::LegacyOutcome::Planned(p, truncated) => {
                if let Some(total) = truncated {
                    out.warnings
                        .push(PlanWarning::LegacyEndpointsTruncated { total });
                }
                out.endpoints = Some(*p);
            }
            legacy::LegacyOutcome::Foreign => out.warnings.push(PlanWarning::ForeignEndpoints),
        }
    } else {
        out.endpoints_deletion = legacy::owned_endpoints_deletion(input.live_endpoints, &pm_uid);
    }

    let names: Vec<&str> = pods
        .iter()
        .map(|p| p.metadata.name.as_deref().unwrap_or_default())
        .collect();
    out.ports = port_statuses(&ports, &states, &names);
    out.summary = status::summary(&out.ports);
    out.warnings.sort();
    out.warnings.dedup();
    Ok(out)
}

/// (port name, family, pod UID) of every endpoint in the given slices.
fn published_memberships<'s>(
    slices: &[&'s EndpointSlice],
) -> HashSet<(&'s str, IpFamily, &'s str)> {
    let mut set = HashSet::new();
    for s in slices {
        let Some(family) = IpFamily::parse(&s.address_type) else {
            continue;
        };
        let port_name = s
            .ports
            .iter()
            .flatten()
            .next()
            .and_then(|p| p.name.as_deref())
            .unwrap_or_default();
        for e in &s.endpoints {
            if let Some(uid) = e.target_ref.as_ref().and_then(|r| r.uid.as_deref()) {
                set.insert((port_name, family, uid));
            }
        }
    }
    set
}

fn merge_state(slot: &mut Option<PodPortState>, new: PodPortState) {
    *slot = Some(match slot.take() {
        None => new,
        Some(old) => old.merge(new),
    });
}

fn deletion(meta: &ObjectMeta) -> Deletion {
    Deletion {
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone(),
    }
}

/// The owner reference the planner puts on every object it renders for this PortMapping.
pub fn planned_owner_reference(name: &str, uid: &str) -> OwnerReference {
    owner_reference(name, uid)
}
