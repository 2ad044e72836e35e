//! The legacy core/v1 Endpoints rendering: primary family only, addresses grouped into subsets
//! by the exact set of ports they serve, at most 1000 addresses (ready first) with the
//! over-capacity annotation, `skip-mirror: "true"` so the mirroring controller leaves it alone.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use portmapper_api::MANAGER;

use super::compare::metadata_eq;
use super::context::{Member, PlanContext};
use super::live::LiveEndpoints;
use super::objects::{
    ANNOTATION_OVER_CAPACITY, ANNOTATION_TRIGGER_TIME, LABEL_HEADLESS, LABEL_MANAGED_BY,
    LABEL_SERVICE_NAME, LABEL_SKIP_MIRROR, RESERVED_LABELS, is_headless,
};
use super::ports::PortView;
use super::types::{Deletion, Plan, PlanError, PlanWarning, PlannedEndpoints, WriteAction};
use crate::ownership::EndpointsOwner;
use crate::pod_record::PodRecord;

/// The most addresses the native endpoints controller puts in one Endpoints object.
pub const MAX_ENDPOINTS_ADDRESSES: usize = 1000;

pub(crate) struct LegacyContext<'a> {
    pub service: &'a Service,
    pub svc_name: &'a str,
    pub namespace: &'a str,
    pub owner: &'a OwnerReference,
    pub pods: &'a [&'a PodRecord],
    pub ports: &'a [PortView<'a>],
    pub now: &'a str,
}

pub(crate) enum LegacyOutcome {
    /// The object to write, and the address count before truncation when it was cut.
    Planned(Box<PlannedEndpoints>, Option<usize>),
    /// Another controller owns the object.
    Foreign,
}

type PortKey = (String, i32, String, Option<String>);

/// The deletion of a live Endpoints object we own, if any (legacyEndpoints off, or an
/// ExternalName Service).
pub(crate) fn owned_endpoints_deletion(live: Option<LiveEndpoints<'_>>) -> Option<Deletion> {
    live.filter(LiveEndpoints::is_ours).map(|e| Deletion {
        name: e.object.metadata.name.clone().unwrap_or_default(),
        uid: e.object.metadata.uid.clone(),
    })
}

/// The legacy Endpoints object (`legacyEndpoints`) into `out`, or the deletion of ours.
pub(crate) fn plan_legacy(
    ctx: &PlanContext<'_>,
    members: &[Member],
    live: Option<LiveEndpoints<'_>>,
    out: &mut Plan,
) -> Result<(), PlanError> {
    if !ctx.spec.legacy_endpoints {
        out.endpoints_deletion = owned_endpoints_deletion(live);
        return Ok(());
    }
    let now = ctx.now.to_string();
    let legacy_ctx = LegacyContext {
        service: ctx.service,
        svc_name: ctx.svc_name,
        namespace: ctx.namespace,
        owner: ctx.owner,
        pods: ctx.pods,
        ports: ctx.ports,
        now: &now,
    };
    match plan_endpoints(&legacy_ctx, members, live)? {
        LegacyOutcome::Planned(p, truncated) => {
            if let Some(total) = truncated {
                out.warnings
                    .push(PlanWarning::LegacyEndpointsTruncated { total });
            }
            out.endpoints = Some(*p);
        }
        LegacyOutcome::Foreign => out.warnings.push(PlanWarning::ForeignEndpoints),
    }
    Ok(())
}

fn plan_endpoints(
    ctx: &LegacyContext<'_>,
    members: &[Member],
    live: Option<LiveEndpoints<'_>>,
) -> Result<LegacyOutcome, PlanError> {
    // The migration steps judge the object the same way, so what is planned here is what they
    // write (an object another manager labelled, without a controller, is not ours either).
    if live.is_some_and(|l| l.owner == EndpointsOwner::Foreign) {
        return Ok(LegacyOutcome::Foreign);
    }
    let live = live.map(|l| l.object);
    let (rendered, total) = subsets(ctx, members);
    let truncated = (total > MAX_ENDPOINTS_ADDRESSES).then_some(total);
    let mut desired = Endpoints {
        metadata: ObjectMeta {
            name: Some(ctx.svc_name.to_owned()),
            namespace: Some(ctx.namespace.to_owned()),
            labels: Some(labels(ctx.service)),
            owner_references: Some(vec![ctx.owner.clone()]),
            ..ObjectMeta::default()
        },
        subsets: (!rendered.is_empty()).then_some(rendered),
    };
    let over_capacity = truncated.is_some();
    let action = action(&desired, live, over_capacity);
    let mut annotations = BTreeMap::new();
    if action.is_write() {
        annotations.insert(ANNOTATION_TRIGGER_TIME.to_owned(), ctx.now.to_owned());
    } else if let Some(t) = live
        .and_then(|l| l.metadata.annotations.as_ref())
        .and_then(|a| a.get(ANNOTATION_TRIGGER_TIME))
    {
        annotations.insert(ANNOTATION_TRIGGER_TIME.to_owned(), t.clone());
    }
    if over_capacity {
        annotations.insert(ANNOTATION_OVER_CAPACITY.to_owned(), "truncated".to_owned());
    }
    desired.metadata.annotations = (!annotations.is_empty()).then_some(annotations);
    if action.is_write() {
        let errors = kube_validation::validate_endpoints(&desired);
        if !errors.is_empty() {
            return Err(PlanError::InvalidRender {
                kind: "Endpoints",
                name: ctx.svc_name.to_owned(),
                message: kube_validation::invalid_message("Endpoints", "", ctx.svc_name, &errors),
            });
        }
    }
    Ok(LegacyOutcome::Planned(
        Box::new(PlannedEndpoints {
            endpoints: desired,
            action,
        }),
        truncated,
    ))
}

/// One ready member pod: its address, the address parsed, every port it serves.
type PodEntry = (EndpointAddress, IpAddr, BTreeSet<PortKey>);

/// The ready members by pool position, each with every port it serves. Draining (not ready)
/// members are omitted, as the native endpoints controller drops terminating pods.
fn per_pod(ctx: &LegacyContext<'_>, members: &[Member]) -> BTreeMap<usize, PodEntry> {
    let mut per_pod: BTreeMap<usize, PodEntry> = BTreeMap::new();
    for m in members.iter().filter(|m| m.ready) {
        let Some(ip) = m.endpoint.addresses.first() else {
            continue;
        };
        let Ok(parsed) = ip.parse::<IpAddr>() else {
            continue;
        };
        let entry = per_pod.entry(m.pod).or_insert_with(|| {
            (
                EndpointAddress {
                    ip: ip.clone(),
                    hostname: m.endpoint.hostname.clone(),
                    node_name: m.endpoint.node_name.clone(),
                    target_ref: m.endpoint.target_ref.clone(),
                },
                parsed,
                BTreeSet::new(),
            )
        });
        let port = &ctx.ports[m.port];
        if let (Some(target), Some(_)) = (m.target, port.service_port) {
            let app = port.service_port.and_then(|sp| sp.app_protocol.clone());
            entry
                .2
                .insert((port.name.to_owned(), target, port.protocol.to_owned(), app));
        }
    }
    per_pod
}

/// The subsets, addresses grouped by the exact set of ports they serve, at most
/// [`MAX_ENDPOINTS_ADDRESSES`] in all; and how many addresses there were before the cut.
fn subsets(ctx: &LegacyContext<'_>, members: &[Member]) -> (Vec<EndpointSubset>, usize) {
    let mut subsets: BTreeMap<Vec<PortKey>, Vec<(IpAddr, String, EndpointAddress)>> =
        BTreeMap::new();
    for (pod, (address, ip, ports)) in per_pod(ctx, members) {
        let uid = ctx.pods.get(pod).map(|p| p.uid.clone()).unwrap_or_default();
        subsets
            .entry(ports.into_iter().collect())
            .or_default()
            .push((ip, uid, address));
    }
    let total: usize = subsets.values().map(Vec::len).sum();
    let mut budget = MAX_ENDPOINTS_ADDRESSES;
    let mut rendered: Vec<EndpointSubset> = Vec::new();
    for (ports, mut addresses) in subsets {
        addresses.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        addresses.truncate(budget);
        budget -= addresses.len();
        if addresses.is_empty() {
            continue;
        }
        let ports: Vec<EndpointPort> = ports
            .into_iter()
            .map(|(name, port, protocol, app_protocol)| EndpointPort {
                name: (!name.is_empty()).then_some(name),
                port,
                protocol: Some(protocol),
                app_protocol,
            })
            .collect();
        rendered.push(EndpointSubset {
            addresses: Some(addresses.into_iter().map(|(_, _, a)| a).collect()),
            not_ready_addresses: None,
            ports: (!ports.is_empty()).then_some(ports),
        });
    }
    (rendered, total)
}

/// The object's labels: the Service's (but the reserved ones), ours, and `skip-mirror`.
fn labels(service: &Service) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = service
        .metadata
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| !RESERVED_LABELS.contains(&k.as_str()) && k.as_str() != LABEL_SKIP_MIRROR)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if is_headless(service) {
        labels.insert(LABEL_HEADLESS.to_owned(), String::new());
    }
    labels.insert(LABEL_MANAGED_BY.to_owned(), MANAGER.to_owned());
    labels.insert(LABEL_SKIP_MIRROR.to_owned(), "true".to_owned());
    labels.remove(LABEL_SERVICE_NAME);
    labels
}

/// Create, update or leave `live` as it is (the annotations are compared by presence of the
/// over-capacity one only: the trigger time follows the write).
fn action(desired: &Endpoints, live: Option<&Endpoints>, over_capacity: bool) -> WriteAction {
    let Some(l) = live else {
        return WriteAction::Create;
    };
    let live_over = l
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ANNOTATION_OVER_CAPACITY));
    if metadata_eq(&desired.metadata, &l.metadata)
        && live_over == over_capacity
        && subsets_eq(desired, l)
    {
        WriteAction::Unchanged
    } else {
        WriteAction::Update {
            resource_version: l.metadata.resource_version.clone(),
        }
    }
}

type AddressKey = (String, Option<String>, Option<String>, Option<String>);
type SubsetKey = (
    Vec<AddressKey>,
    Vec<AddressKey>,
    Vec<(String, i32, String, Option<String>)>,
);

fn subset_keys(e: &Endpoints) -> Vec<SubsetKey> {
    let addr = |a: &EndpointAddress| {
        (
            a.ip.clone(),
            a.hostname.clone().filter(|h| !h.is_empty()),
            a.node_name.clone(),
            a.target_ref.as_ref().and_then(|r| r.uid.clone()),
        )
    };
    e.subsets
        .iter()
        .flatten()
        .map(|s| {
            (
                s.addresses.iter().flatten().map(addr).collect(),
                s.not_ready_addresses.iter().flatten().map(addr).collect(),
                s.ports
                    .iter()
                    .flatten()
                    .map(|p| {
                        (
                            p.name.clone().unwrap_or_default(),
                            p.port,
                            p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
                            p.app_protocol.clone(),
                        )
                    })
                    .collect(),
            )
        })
        .collect()
}

fn subsets_eq(desired: &Endpoints, live: &Endpoints) -> bool {
    subset_keys(desired) == subset_keys(live)
}
