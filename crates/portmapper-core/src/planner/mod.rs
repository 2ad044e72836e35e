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
mod context;
mod emit;
mod evaluate;
mod external_name;
mod gate;
mod groups;
mod kept_sets;
mod legacy;
mod live;
mod memo;
pub mod migration;
pub mod naming;
pub mod objects;
pub mod pack;
mod port_sets;
pub(crate) mod ports;
mod status;
mod teardown;
mod trigger;
mod types;

pub use compare::{endpoint_eq, metadata_eq, ports_eq};
pub use context::GateSettings;
pub use evaluate::published_memberships;
pub use gate::{
    FinalizerChange, GateChanges, GateTimeout, REASON_NO_ADDRESS, REASON_NOT_PUBLISHED,
    REASON_PUBLISHED, REASON_RELEASED, REASON_TIMED_OUT, RELEASE_FINALIZER, deadline,
    needs_release_finalizer, release_finalizer, released_pod_gates, stalled_pod_gates,
};
pub use memo::{EvalMemo, PassStats};
pub use teardown::teardown;
pub use types::{
    DecisionCounts, Deletion, GatePeers, NameCollision, Plan, PlanError, PlanInput, PlanWarning,
    PlannedEndpoints, PlannedSlice, PodGate, WriteAction, any_gated,
};

pub use ports::service_families;

use crate::membership::publish_not_ready;
use crate::pod_record::PodRecord;
use context::PlanContext;
use objects::{hint_mode, owner_reference};

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

/// The phases in order, each in its own module: classify the live objects (`live`); for an
/// ExternalName Service, delete what is ours (`external_name`); else evaluate the pool and emit
/// the slices (`emit`), settle them against held names (`live`), then the legacy Endpoints
/// (`legacy`), the gates (`gate`), the status (`status`) and the migration steps (`migration`).
fn plan_inner(input: &PlanInput<'_>, mut memo: Option<&mut EvalMemo>) -> Result<Plan, PlanError> {
    let ids = ids(input)?;
    let (pm, service) = (input.port_mapping, input.service);
    let owner = owner_reference(&ids.name, &ids.uid);
    let live = live::classify(input, &ids.uid);
    if external_name::applies(service) {
        return Ok(external_name::plan_external_name(
            input,
            &ids.namespace,
            &live,
        ));
    }
    let mut out = Plan::default();
    let pool = memo::pool_of(input, &ids.namespace, &owner, memo.as_deref_mut())?;
    let pods: Vec<&PodRecord> = pool.iter().map(|p| p.as_ref()).collect();
    let (hints, auto) = hint_mode(service);
    let ports = ports::port_views(service, &pm.spec);
    out.warnings.extend(ports::unknown_ports(&pm.spec, &ports));
    let families = ports::service_families(service);
    out.warnings
        .extend(auto.map(|annotation| PlanWarning::TopologyModeAuto {
            annotation: annotation.to_owned(),
        }));
    let ctx = PlanContext {
        spec: &pm.spec,
        service,
        svc_name: pm.spec.service_ref.name.as_str(),
        namespace: &ids.namespace,
        owner: &owner,
        pods: &pods,
        families: &families,
        ports: &ports,
        network: input.network,
        node_zones: input.node_zones,
        unready_nodes: input.unready_nodes,
        pnr: publish_not_ready(&pm.spec, service),
        hints,
        now: input.now,
        gate_type: pm.spec.gate_condition_type(),
        gate_peers: input.gate_peers,
        gate: GateSettings::of(pm, input.gate_peers, input.now),
    };
    let (evaluated, sets) = emit::evaluate_and_emit(
        &ctx,
        &live.ours,
        &pool,
        input.pods,
        &mut out,
        memo.as_deref_mut(),
    )?;
    live::settle(
        &mut out,
        &live.held,
        pm.metadata.deletion_timestamp.is_some(),
    );
    legacy::plan_legacy(&ctx, &evaluated.members, live.endpoints, &mut out)?;
    // Without a gated pod in the pool there is no gate to set: no scan of the pool for one.
    if input.gated {
        out.set_gates(gate::pod_gates(&ctx, &evaluated.states));
    }
    let listings = status::plan_status(
        ctx.ports,
        ctx.pods,
        &evaluated.states,
        (&evaluated.listed_before, &evaluated.changed),
        &mut out,
    );
    if let Some(memo) = memo {
        memo.keep(evaluated.kept, evaluated.states, listings);
        memo.keep_sets(sets.filter(|_| evaluated.keep_sets));
    }
    out.warnings.sort();
    out.warnings.dedup();
    out.migration = migration::plan_steps(input, &live, families[0], &out);
    Ok(out)
}
