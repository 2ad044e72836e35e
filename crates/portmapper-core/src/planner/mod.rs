//! The pure planner: from a PortMapping, its Service, the pool pods, node zones, membership
//! decisions and what is published now, compute the EndpointSlices (and legacy Endpoints) that
//! must exist, what to write, and the status to report.
//!
//! Rendering rules (native EndpointSlice controller parity unless stated):
//! - Slice sets (`port_sets`): by default (`sliceGrouping: PerPortSet`, the native
//!   controller's shape) one per port set × IP family (`spec.ipFamilies`, primary first; else
//!   the cluster IP's family; else IPv4): a member's key is the set of (port, resolved number,
//!   protocol) it is a member of in that family, and its slices list all those ports in Service
//!   port order. `PerPort`: one per Service port × family × resolved target port, each slice
//!   carrying exactly one port. Chunked at `maxEndpointsPerSlice`. A headless Service without
//!   ports gets portless slices of every pool pod under the default checks. ExternalName:
//!   nothing, and every owned object is deleted.
//! - Names ([`naming`]): per port `<svc>.<port>[.v6][.p<target>][.<chunk>]`, `.p<target>` only
//!   for named targetPorts, which resolve per pod (containers, then sidecar init containers;
//!   name and protocol must match); per port set `<svc>.<ports>.<hash>[.v6][.<chunk>]`, at most
//!   63 characters.
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
//!   `last-change-trigger-time` on written slices only (unchanged slices keep theirs): the
//!   latest timestamped cause of the write, else `PlanInput::now` ([`trigger`]).
//! - Placeholder: per port, a port × family without members keeps one empty slice (with its
//!   port): at the static target, or for a named target at an already published number, else
//!   the lowest number a candidate resolves; none when no candidate resolves the name. Per port
//!   set, the ports without members in a family share one empty slice listing them all.
//! - Packing: [`pack()`](pack::pack). Equality: semantic ([`metadata_eq`], [`endpoint_eq`], [`ports_eq`]), so a
//!   converged plan has zero writes.
//! - Every slice and Endpoints object to write passes `kube-validation`, or the plan fails.
//! - While the PortMapping is being deleted, no slice is created (existing ones still update).

mod compare;
mod emit;
mod evaluate;
mod gate;
mod groups;
mod kept_sets;
mod legacy;
mod memo;
pub mod migration;
pub mod naming;
pub mod objects;
pub mod pack;
mod port_sets;
mod status;
mod teardown;
mod trigger;
mod types;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_validation::IpFamily;
use portmapper_api::PortMappingSpec;

pub use compare::{endpoint_eq, metadata_eq, ports_eq};
pub use evaluate::published_memberships;
pub use gate::{
    FinalizerChange, GateChanges, GateSettings, GateTimeout, REASON_NO_ADDRESS,
    REASON_NOT_PUBLISHED, REASON_PUBLISHED, REASON_RELEASED, REASON_TIMED_OUT, RELEASE_FINALIZER,
    any_gated, deadline, needs_release_finalizer, release_finalizer, released_pod_gates,
    stalled_pod_gates,
};
pub use memo::{EvalMemo, PassStats};
pub use teardown::teardown;
pub use types::{
    DecisionCounts, Deletion, GatePeers, NameCollision, Plan, PlanError, PlanInput, PlanWarning,
    PlannedEndpoints, PlannedSlice, PodGate, WriteAction,
};

use crate::membership::{PortRules, port_rules, publish_not_ready};
use crate::network::{NetworkDecisions, NetworkLookup};
use crate::ownership::{HeldName, ownership};
use crate::pod_record::PodRecord;
use crate::pool::pod_in_pool;
use crate::target::{is_named_target, service_port_protocol};
use objects::{HintMode, hint_mode, owner_reference};
use status::port_statuses;

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

/// What every phase of one plan reads.
pub(crate) struct PlanContext<'a> {
    pub spec: &'a PortMappingSpec,
    pub service: &'a Service,
    pub svc_name: &'a str,
    pub namespace: &'a str,
    pub owner: &'a OwnerReference,
    /// Pool pods, in input order.
    pub pods: &'a [&'a PodRecord],
    /// Primary first.
    pub families: &'a [IpFamily],
    pub ports: &'a [PortView<'a>],
    pub network: &'a NetworkDecisions,
    pub node_zones: &'a BTreeMap<String, String>,
    /// `publishNotReadyAddresses` in force.
    pub pnr: bool,
    pub hints: HintMode,
    /// `PlanInput::now`: trigger times are never later.
    pub now: k8s_openapi::jiff::Timestamp,
    /// `spec.readinessGate.conditionType`.
    pub gate_type: &'a str,
    pub gate_peers: &'a GatePeers,
    /// How the gates are set (type, timeout, deletion, peers, now).
    pub gate: gate::GateSettings<'a>,
}

impl PlanContext<'_> {
    /// The gate types podReady must not wait for.
    pub fn gates(&self) -> crate::check::GateTypes<'_> {
        crate::check::GateTypes {
            own: self.gate_type,
            peers: &self.gate_peers.types,
        }
    }
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

fn port_views<'a>(service: &'a Service, spec: &'a PortMappingSpec) -> Vec<PortView<'a>> {
    let ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default();
    if ports.is_empty() {
        // Headless Services may have no ports: publish the pods for DNS with an empty port list,
        // under the default checks.
        if objects::is_headless(service) {
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

/// `spec.ports` entries matching no Service port (the portless pseudo-port of a headless Service
/// has no name, so every entry is unknown there).
fn unknown_ports(spec: &PortMappingSpec, ports: &[PortView<'_>]) -> Option<PlanWarning> {
    let named = |p: &&PortView<'_>| p.service_port.is_some() && !p.name.is_empty();
    let entries: Vec<String> = spec
        .ports
        .iter()
        .filter(|rule| !ports.iter().filter(named).any(|p| p.name == rule.name))
        .map(|rule| rule.name.clone())
        .collect();
    (!entries.is_empty()).then(|| PlanWarning::UnknownPort {
        entries,
        service_ports: ports
            .iter()
            .filter(named)
            .map(|p| p.name.to_owned())
            .collect(),
    })
}

fn static_target(sp: &ServicePort) -> i32 {
    match &sp.target_port {
        Some(IntOrString::Int(n)) if *n != 0 => *n,
        _ => sp.port,
    }
}

/// Splits live slices into those this PortMapping may write (the one classifier,
/// [`ownership`]) and names held by others, which join `held` (never touched; a create there is
/// a collision).
fn classify_live<'a>(
    live: &'a [Arc<EndpointSlice>],
    pm_uid: &str,
    svc_name: &str,
    adopt: bool,
    take_over: &[String],
    held: &mut BTreeMap<String, HeldName>,
) -> Vec<&'a Arc<EndpointSlice>> {
    let mut ours = Vec::new();
    for s in live {
        if ownership(&s.metadata, pm_uid).claimable(svc_name, adopt, take_over) {
            ours.push(s);
        } else {
            let name = s.metadata.name.clone().unwrap_or_default();
            held.insert(name, HeldName::of(&s.metadata));
        }
    }
    ours
}

/// Computes the plan. Pure and deterministic: the same input always gives the same plan, and
/// applying a plan then planning again gives a plan without writes.
pub fn plan(input: &PlanInput<'_>) -> Result<Plan, PlanError> {
    plan_inner(input, None)
}

/// [`plan`], reusing what `memo` remembers of pods unchanged since its last pass (and
/// remembering this pass): the same plan, at the cost of the pods that changed. Keep one memo
/// per PortMapping.
pub fn plan_with_memo(input: &PlanInput<'_>, memo: &mut EvalMemo) -> Result<Plan, PlanError> {
    plan_inner(input, Some(memo))
}

/// The PortMapping's namespace, name and UID, which every plan needs.
struct Ids {
    namespace: String,
    name: String,
    uid: String,
}

/// The PortMapping's identity, and a check that `input.service` is the Service it names.
fn ids(input: &PlanInput<'_>) -> Result<Ids, PlanError> {
    let meta = &input.port_mapping.metadata;
    let nonempty = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
    let ids = Ids {
        namespace: nonempty(&meta.namespace)
            .ok_or(PlanError::MissingMetadata("metadata.namespace"))?,
        name: nonempty(&meta.name).ok_or(PlanError::MissingMetadata("metadata.name"))?,
        uid: nonempty(&meta.uid).ok_or(PlanError::MissingMetadata("metadata.uid"))?,
    };
    let svc_name = input.port_mapping.spec.service_ref.name.as_str();
    if input.service.metadata.name.as_deref() != Some(svc_name) {
        return Err(PlanError::ServiceMismatch {
            expected: svc_name.to_owned(),
            got: input.service.metadata.name.clone().unwrap_or_default(),
        });
    }
    Ok(ids)
}

fn plan_inner(input: &PlanInput<'_>, mut memo: Option<&mut EvalMemo>) -> Result<Plan, PlanError> {
    let pm = input.port_mapping;
    let spec = &pm.spec;
    let ids = ids(input)?;
    let service = input.service;
    let svc_name = spec.service_ref.name.as_str();
    let owner = owner_reference(&ids.name, &ids.uid);
    let mut held = input.held_by_others.clone();
    let ours = classify_live(
        input.live_slices,
        &ids.uid,
        svc_name,
        pm.metadata.deletion_timestamp.is_none(),
        input.take_over,
        &mut held,
    );
    if is_external_name(service) {
        return Ok(external_name_plan(input, &ids, &ours));
    }
    let mut out = Plan::default();
    let pool = pool_of(input, &ids.namespace, &owner, memo.as_deref_mut())?;
    let pods: Vec<&PodRecord> = pool.iter().map(|p| p.as_ref()).collect();
    let (hints, auto) = hint_mode(service);
    let topology_auto = auto.map(|annotation| PlanWarning::TopologyModeAuto {
        annotation: annotation.to_owned(),
    });
    out.warnings.extend(topology_auto);
    let families = service_families(service);
    let ports = port_views(service, spec);
    out.warnings.extend(unknown_ports(spec, &ports));
    let ctx = PlanContext {
        spec,
        service,
        svc_name,
        namespace: &ids.namespace,
        owner: &owner,
        pods: &pods,
        families: &families,
        ports: &ports,
        network: input.network,
        node_zones: input.node_zones,
        pnr: publish_not_ready(spec, service),
        hints,
        now: input.now,
        gate_type: spec.gate_condition_type(),
        gate_peers: input.gate_peers,
        gate: gate::GateSettings::of(pm, input.gate_peers, input.now),
    };
    let (evaluated, sets) =
        evaluate_and_emit(&ctx, input, &ours, &pool, &mut out, memo.as_deref_mut())?;
    settle_slices(&mut out, &held, pm.metadata.deletion_timestamp.is_some());
    plan_legacy(input, &ctx, &ids, &evaluated, &mut out)?;
    // Without a gated pod in the pool there is no gate to set: no scan of the pool for one.
    if input.gated {
        out.set_gates(gate::pod_gates(&ctx, &evaluated.states));
    }
    let listings = plan_status(&ctx, &evaluated, &mut out);
    if let Some(memo) = memo {
        memo.keep(evaluated.kept, evaluated.states, listings);
        memo.keep_sets(sets.filter(|_| evaluated.keep_sets));
    }
    out.warnings.sort();
    out.warnings.dedup();
    out.migration = migration::plan_steps(input, &ids.uid, families[0], &out);
    Ok(out)
}

/// Phases 1 and 2: evaluates the pool and emits the slices into `out`; returns the evaluation
/// (for the status, the gates and the memo) and the port sets it kept.
fn evaluate_and_emit<'a>(
    ctx: &PlanContext<'a>,
    input: &PlanInput<'_>,
    ours: &[&'a Arc<EndpointSlice>],
    pool: &[&Arc<PodRecord>],
    out: &mut Plan,
    mut memo: Option<&mut EvalMemo>,
) -> Result<(evaluate::Evaluated<'a>, Option<kept_sets::KeptSets>), PlanError> {
    let ours_plain: Vec<&'a EndpointSlice> = ours.iter().map(|&s| s.as_ref()).collect();
    let mut evaluated = evaluate::evaluate(
        ctx,
        &ours_plain,
        &mut out.warnings,
        memo.as_deref_mut().map(|m| (m, pool)),
    );
    if let Some(memo) = memo.as_deref_mut() {
        memo.settle_context(ctx.hints, input.node_zones);
    }
    out.decisions = evaluated.decisions;
    out.network_lookups = std::mem::take(&mut evaluated.lookups);
    to_input_indices(&mut out.network_lookups, ctx.pods, input.pods);
    let assignment = emit::assign_live(&evaluated.groups, ours, &mut out.deletions);
    let mut sets = evaluated.sets.take();
    let groups = std::mem::take(&mut evaluated.groups);
    emit::emit_slices(ctx, groups, &assignment, out, memo, sets.as_ref())?;
    if let Some(sets) = sets.as_mut() {
        sets.settle();
    }
    Ok((evaluated, sets))
}

/// The plan for an ExternalName Service: nothing is published, so every slice and our
/// Endpoints object go, and no gated pod stays published.
fn external_name_plan(input: &PlanInput<'_>, ids: &Ids, ours: &[&Arc<EndpointSlice>]) -> Plan {
    let spec = &input.port_mapping.spec;
    let mut out = Plan::default();
    out.warnings.push(PlanWarning::ExternalName);
    out.deletions = teardown::every(ours.iter().map(|s| s.as_ref()));
    out.endpoints_deletion = legacy::owned_endpoints_deletion(input.live_endpoints, &ids.uid);
    let pool: Vec<&PodRecord> = input
        .pods
        .iter()
        .map(AsRef::as_ref)
        .filter(|p| pod_in_pool(spec, &ids.namespace, p).unwrap_or(false))
        .collect();
    // Its slices go: no gated pod stays published.
    let gates = gate::stalled_pod_gates(
        &pool,
        &gate::GateSettings::of(input.port_mapping, input.gate_peers, input.now),
        &[],
        (
            "ExternalName",
            "the Service is of type ExternalName: nothing is published",
        ),
    );
    out.set_gates(gates);
    let primary = service_families(input.service)
        .first()
        .copied()
        .unwrap_or(IpFamily::V4);
    out.migration = migration::plan_steps(input, &ids.uid, primary, &out);
    out
}

/// The pool's pods: through the memo (which remembers who was in the pool), or by checking
/// every pod.
fn pool_of<'i>(
    input: &'i PlanInput<'_>,
    namespace: &str,
    owner: &OwnerReference,
    memo: Option<&mut EvalMemo>,
) -> Result<Vec<&'i Arc<PodRecord>>, PlanError> {
    let spec = &input.port_mapping.spec;
    let in_pool = |pod: &PodRecord| pod_in_pool(spec, namespace, pod);
    if let Some(memo) = memo {
        let service = input.service.spec.as_ref();
        memo.begin(&owner.uid, spec, service, &input.gate_peers.types);
        return Ok(memo.pool(input.pods, in_pool)?);
    }
    let mut pods = Vec::new();
    for pod in input.pods {
        if in_pool(pod)? {
            pods.push(pod);
        }
    }
    Ok(pods)
}

/// Orders the slices and deletions, and leaves out the creates the plan may not make: none
/// while the PortMapping is being deleted, none at a name `held` by another.
fn settle_slices(out: &mut Plan, held: &BTreeMap<String, HeldName>, deleting: bool) {
    out.slices
        .sort_by(|a, b| a.slice.metadata.name.cmp(&b.slice.metadata.name));
    out.deletions.sort();
    out.deletions.dedup();
    if deleting {
        // Like the native controller while its Service is deleted: no creates that would race
        // the garbage collector; existing slices are still kept accurate.
        out.slices.retain(|s| s.action != WriteAction::Create);
    }
    // Never create over another owner's object: the name stays theirs and the PortMapping
    // reports the collision until it is freed (its deletion wakes the PortMapping).
    let mut collisions = Vec::new();
    out.slices.retain(|s| {
        let name = s.slice.metadata.name.as_deref().unwrap_or_default();
        match held.get(name) {
            Some(h) if s.action == WriteAction::Create => {
                collisions.push(NameCollision {
                    name: name.to_owned(),
                    held: h.clone(),
                });
                false
            }
            _ => true,
        }
    });
    out.collisions.extend(collisions);
}

/// The legacy Endpoints object (`legacyEndpoints`), or the deletion of ours.
fn plan_legacy(
    input: &PlanInput<'_>,
    ctx: &PlanContext<'_>,
    ids: &Ids,
    evaluated: &evaluate::Evaluated<'_>,
    out: &mut Plan,
) -> Result<(), PlanError> {
    if !ctx.spec.legacy_endpoints {
        out.endpoints_deletion = legacy::owned_endpoints_deletion(input.live_endpoints, &ids.uid);
        return Ok(());
    }
    let now = input.now.to_string();
    let legacy_ctx = legacy::LegacyContext {
        service: ctx.service,
        svc_name: ctx.svc_name,
        namespace: &ids.namespace,
        owner: ctx.owner,
        pm_uid: &ids.uid,
        pods: ctx.pods,
        ports: ctx.ports,
        now: &now,
    };
    match legacy::plan_endpoints(&legacy_ctx, &evaluated.members, input.live_endpoints)? {
        legacy::LegacyOutcome::Planned(p, truncated) => {
            if let Some(total) = truncated {
                out.warnings
                    .push(PlanWarning::LegacyEndpointsTruncated { total });
            }
            out.endpoints = Some(*p);
        }
        legacy::LegacyOutcome::Foreign => out.warnings.push(PlanWarning::ForeignEndpoints),
    }
    Ok(())
}

/// The per-port status and its summary; returns what each port's status listed, for the memo.
fn plan_status(
    ctx: &PlanContext<'_>,
    evaluated: &evaluate::Evaluated<'_>,
    out: &mut Plan,
) -> Vec<status::Listed> {
    let hints: Vec<Option<status::ListingHint<'_>>> = evaluated
        .listed_before
        .iter()
        .map(|l| {
            l.as_ref().map(|last| status::ListingHint {
                last,
                changed: &evaluated.changed,
            })
        })
        .collect();
    let (statuses, listings) = port_statuses(ctx.ports, &evaluated.states, ctx.pods, &hints);
    out.ports = statuses;
    out.summary = status::summary(&out.ports);
    listings
}

/// Re-points lookups from the pool (`pool`, a subsequence of `input`) to `PlanInput::pods`.
/// Only built when something is probed, so a plan without network checks pays nothing.
fn to_input_indices(lookups: &mut [NetworkLookup], pool: &[&PodRecord], input: &[Arc<PodRecord>]) {
    if lookups.is_empty() {
        return;
    }
    let mut at = Vec::with_capacity(pool.len());
    let mut rest = input.iter().enumerate();
    for &pod in pool {
        if let Some((i, _)) = rest.find(|(_, p)| std::ptr::eq(p.as_ref(), pod)) {
            at.push(i);
        }
    }
    for lookup in lookups {
        if let Some(&i) = at.get(lookup.pod) {
            lookup.pod = i;
        }
    }
}

fn deletion(meta: &ObjectMeta) -> Deletion {
    Deletion {
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone(),
    }
}
