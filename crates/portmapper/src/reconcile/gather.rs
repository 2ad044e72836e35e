//! Gathering a pass's inputs: whether the PortMapping can plan at all (its spec is valid, it
//! publishes its Service, the Service exists, its pool's pods have listed), or must wait for an
//! input still loading, and everything a plan or a stall reads (the pods that left the pool
//! among them), from the reflector stores and the index. Two inputs may need the API server:
//! slice names in doubt (one GET each) and the Endpoints object named after the Service when
//! our cache does not hold it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use portmapper_api::PortMapping;
use portmapper_core::compact_slice::CompactSlice;
use portmapper_core::planner::GatePeers;
use portmapper_core::planner::migration::NativeSlice;
use portmapper_core::report::{Stall, status};
use portmapper_core::{HeldName, NetworkDecisions, PodRecord};
use tracing::debug;

use crate::index::{PodSource, WatchRefused};
use crate::reconcile::context::Context;
use crate::runtime::error::Error;

/// An input still loading, and how soon to look again for it (its watch event normally wakes
/// the PortMapping first; this bounds a lost event). Before any plan it holds the whole pass
/// back ([`Gathered::Wait`]); in a stall, the gates ([`GatePool::Wait`]); in a plan, the look
/// again while probe targets lack a first result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wait(pub Duration);

impl Wait {
    /// A cache, the pool's first list, or a probe's first result.
    pub const PENDING: Self = Self(Duration::from_secs(2));
    /// Our own writes have not reached the cache.
    pub const OWN_WRITES: Self = Self(Duration::from_secs(1));

    /// How soon to look again: the wait, unless the resync comes sooner.
    pub fn before(self, resync: Duration) -> Option<Duration> {
        (self.0 < resync).then_some(self.0)
    }
}

/// What a pass found.
pub enum Gathered {
    /// An input is still loading: write nothing, not even status.
    Wait(Wait),
    /// Nothing new is published, for a reason.
    Stalled(Box<Stalled>),
    /// Every input of a plan.
    Plan(Box<Inputs>),
}

/// A PortMapping that publishes nothing new, for `stall`. Its slices stay as they are (or, with
/// the Service gone, are all taken back).
pub struct Stalled {
    pub stall: Stall,
    /// The slices it may write: a gated pod they publish keeps its condition.
    pub live: Vec<Arc<CompactSlice>>,
    /// With the Service gone: the Endpoints objects it controls, to take back too.
    pub endpoints: Vec<Arc<Endpoints>>,
    /// The pool its gates are set from.
    pub pool: GatePool,
    /// The pods that left its pool: released first.
    pub departed: Departed,
}

/// The pool the gates of a stalled PortMapping are set from.
pub enum GatePool {
    /// The gate type or the pool is invalid, or the pool is not watched (over its namespace's
    /// cap): no condition and no pods to name.
    None,
    /// The pool's pods have not listed yet: the gates wait (a transient wait never flips a
    /// condition).
    Wait(Wait),
    /// The pool's pods and what the other PortMappings do with gates.
    Listed {
        pods: Vec<Arc<PodRecord>>,
        peers: GatePeers,
    },
}

impl GatePool {
    /// The pool's pods (none unless [`GatePool::Listed`]).
    pub fn pods(&self) -> Vec<&PodRecord> {
        match self {
            Self::Listed { pods, .. } => pods.iter().map(AsRef::as_ref).collect(),
            Self::None | Self::Wait(_) => Vec::new(),
        }
    }

    /// The pool's pods as the release finalizer reads them: `None` while they have not listed
    /// (the gates are undecided); none when the pool is invalid.
    pub fn listed(&self) -> Option<Vec<&PodRecord>> {
        match self {
            Self::Wait(_) => None,
            Self::None | Self::Listed { .. } => Some(self.pods()),
        }
    }
}

/// The pods that left the PortMapping's pool while its gate still waited on them (the index
/// notes them), and those of them that another PortMapping of the same gate type, not being
/// deleted, has in its pool now (their gate is its to set).
pub struct Departed {
    pub pods: Vec<Arc<PodRecord>>,
    pub kept: BTreeSet<String>,
}

impl Departed {
    fn of(ctx: &Context, key: &ObjectRef<PortMapping>) -> Self {
        let (pods, kept) = ctx.index.lock().departed(key);
        Self { pods, kept }
    }
}

/// Every input of a plan, owned: the plan step lends them to the planner.
pub struct Inputs {
    pub service: Arc<Service>,
    /// The pool's pods (the index holds them by key and value; the planner checks the
    /// selector).
    pub pods: Arc<Vec<Arc<PodRecord>>>,
    /// A pool pod may be enrolled in Istio ambient mode: only then is the pool searched for
    /// the consumer caveat.
    pub ambient: bool,
    /// A pool pod may list a readiness gate: only then is the pool searched for gates.
    pub gated: bool,
    /// The slices this PortMapping may write.
    pub owned: Vec<Arc<CompactSlice>>,
    /// PortMappings it takes over from.
    pub take_over: Vec<String>,
    /// Names it may want that someone else holds.
    pub held: BTreeMap<String, HeldName>,
    pub zones: BTreeMap<String, String>,
    /// The nodes of the pool's gated pods known not Ready, with their `Ready` status
    /// ([`PlanInput::unready_nodes`](portmapper_core::PlanInput::unready_nodes)); empty without
    /// node lookups.
    pub unready_nodes: BTreeMap<String, String>,
    pub peers: GatePeers,
    /// Cached probe results only: a reconcile never waits on the network.
    pub network: NetworkDecisions,
    pub natives: Vec<NativeSlice>,
    pub live_endpoints: Option<Endpoints>,
    pub owned_endpoints: Vec<Arc<Endpoints>>,
    /// Whether an input was read from the API server (names in doubt, the Endpoints object):
    /// such a pass is never taken as settled (it may change without an event we see).
    pub read_server: bool,
    /// The pods that left its pool: released first.
    pub departed: Departed,
}

/// Whether `pm` can plan, and its inputs when it can. Before their first list the caches read
/// as "nothing published" / "no Service": a plan would rewrite every slice and probes would be
/// seeded excluded (a restart flap), so nothing is gathered until they listed, nor while our
/// own writes have not reached the cache (a plan would undo or repeat them).
pub async fn gather(
    ctx: &Context,
    pm: &PortMapping,
    key: &ObjectRef<PortMapping>,
) -> Result<Gathered, Error> {
    let uid = pm.uid().ok_or(Error::MissingMetadata("uid"))?;
    if !ctx.synced() {
        debug!(portmapping = %key, "caches not synced yet; writing nothing");
        return Ok(Gathered::Wait(Wait::PENDING));
    }
    if ctx
        .index
        .lock()
        .own_writes_pending(&uid, std::time::Instant::now())
    {
        // The watch event that brings the last of them wakes this PortMapping.
        debug!(portmapping = %key, "own writes not in the cache yet; waiting");
        return Ok(Gathered::Wait(Wait::OWN_WRITES));
    }
    let service = match service(ctx, pm, key, &uid) {
        Ok(service) => service,
        Err(stalled) => return Ok(Gathered::Stalled(stalled)),
    };
    // The watch's first list first, then the pool: the index takes each pod of the first list
    // as it arrives, so a pool read before the list is done can miss its last pods.
    if !ctx.index.lock().pods_listed(&PodSource::of(pm), key) {
        // Not even status: a restart must not flap a Ready PortMapping while caches sync.
        debug!(portmapping = %key, "pod cache not synced yet; writing nothing");
        return Ok(Gathered::Wait(Wait::PENDING));
    }
    let inputs = plan_inputs(ctx, pm, key, &uid, service).await?;
    Ok(Gathered::Plan(Box::new(inputs)))
}

/// The Service `pm` publishes for, or the stall that keeps it from publishing: its spec is
/// invalid, another PortMapping claims the Service, the Service is gone, or its pods are not
/// watched.
fn service(
    ctx: &Context,
    pm: &PortMapping,
    key: &ObjectRef<PortMapping>,
    uid: &str,
) -> Result<Arc<Service>, Box<Stalled>> {
    let ns = key.namespace.as_deref().unwrap_or_default();
    let errors = portmapper_api::validate::validate_spec(&pm.spec);
    if let Some(message) = status::invalid_spec_message(&errors) {
        // An invalid gate type or pool says neither which condition nor which pods.
        let pool_invalid = crate::index::invalid_pool(&errors)
            || errors
                .iter()
                .any(|e| e.field.starts_with("spec.readinessGate"));
        let pool = if pool_invalid {
            GatePool::None
        } else {
            gate_pool(ctx, pm, key)
        };
        let stall = Stall::InvalidSpec(message);
        return Err(Box::new(stalled(ctx, key, uid, stall, pool)));
    }
    let service = &pm.spec.service_ref.name;
    let winner = ctx.index.lock().service_winner(key);
    if let Some(winner) = winner {
        // Writes no slice: slices it published before losing stay until it is deleted (GC) or
        // wins again, so a conflict can never empty a port. Only its own gates are set False.
        let stall = Stall::ServiceClaimed {
            winner: winner.name,
            service: service.clone(),
        };
        return Err(Box::new(stalled(
            ctx,
            key,
            uid,
            stall,
            gate_pool(ctx, pm, key),
        )));
    }
    let Some(service) = ctx.stores.services.get(&ObjectRef::new(service).within(ns)) else {
        // The Service is gone: take our slices and Endpoints back, as the upstream
        // EndpointSlice controller does; nothing is published, so no gated pod stays True.
        let stall = Stall::ServiceNotFound {
            namespace: ns.to_owned(),
            service: service.clone(),
        };
        let mut stalled = Box::new(stalled(ctx, key, uid, stall, gate_pool(ctx, pm, key)));
        stalled.endpoints = owned_endpoints(ctx, uid);
        return Err(stalled);
    };
    let refused = ctx.index.lock().watch_refused(key);
    if let Some(WatchRefused { cap }) = refused {
        // Its pods are not watched, so nothing can be planned; what it published stays.
        let stall = Stall::TooManyPodWatches {
            namespace: ns.to_owned(),
            key: pm.spec.pods.key.clone(),
            cap,
        };
        return Err(Box::new(stalled(ctx, key, uid, stall, GatePool::None)));
    }
    Ok(service)
}

/// A stall, with the slices the PortMapping controls (they stay) and its gates' pool.
fn stalled(
    ctx: &Context,
    key: &ObjectRef<PortMapping>,
    uid: &str,
    stall: Stall,
    pool: GatePool,
) -> Stalled {
    Stalled {
        // Its own slices only: no orphan is adopted and nothing is taken over while stalled.
        live: owned_slices(ctx, "", uid, &[], None),
        endpoints: Vec::new(),
        stall,
        pool,
        departed: Departed::of(ctx, key),
    }
}

/// The pool the gates of a stalled `pm` are set from.
fn gate_pool(ctx: &Context, pm: &PortMapping, key: &ObjectRef<PortMapping>) -> GatePool {
    if ctx.index.lock().watch_refused(key).is_some() {
        // Never listed: its pods are not known.
        return GatePool::None;
    }
    if !ctx.index.lock().pods_listed(&PodSource::of(pm), key) {
        return GatePool::Wait(Wait::PENDING);
    }
    let ns = key.namespace.as_deref().unwrap_or_default();
    let pods: Vec<Arc<PodRecord>> = ctx
        .index
        .lock()
        .pool_pods(pm)
        .iter()
        .filter(|p| portmapper_core::pod_in_pool(&pm.spec, ns, p).unwrap_or(false))
        .cloned()
        .collect();
    let refs: Vec<&PodRecord> = pods.iter().map(AsRef::as_ref).collect();
    let gated = ctx.index.lock().pool_has_gated(pm);
    let peers = gate_peers(ctx, pm, key, &refs, gated);
    GatePool::Listed { pods, peers }
}

/// Every input of a plan of `pm` for `service`.
async fn plan_inputs(
    ctx: &Context,
    pm: &PortMapping,
    key: &ObjectRef<PortMapping>,
    uid: &str,
    service: Arc<Service>,
) -> Result<Inputs, Error> {
    let ns = key.namespace.as_deref().unwrap_or_default();
    let svc_name = service.name_any();
    // A PortMapping being deleted adopts nothing, as a terminating ReplicaSet adopts no pods:
    // with `--cascade=orphan` the garbage collector is taking its ownerReferences off, and
    // adopting would put them back.
    let adopt_for = pm
        .metadata
        .deletion_timestamp
        .is_none()
        .then_some(svc_name.as_str());
    let (pods, ambient, gated, take_over, mut held, in_doubt) = {
        let mut idx = ctx.index.lock();
        // Slices of PortMappings this one beats for the Service are its to take over.
        let take_over = idx.losers_to(key);
        // Names held by others, from the watch of every slice not managed by us: a name taken
        // between that watch and our write is the same race a GET before each create had (the
        // API server does not let SSA ask "create only").
        let held = idx.held_by_others(ns, &svc_name, uid, adopt_for.is_some(), &take_over);
        let mut in_doubt = idx.names_in_doubt(ns, &svc_name);
        in_doubt.extend(idx.ours_outside_our_watch(
            ns,
            &svc_name,
            uid,
            adopt_for.is_some(),
            &take_over,
        ));
        (
            idx.pool_pods(pm),
            idx.pool_has_ambient(pm),
            idx.pool_has_gated(pm),
            take_over,
            held,
            in_doubt,
        )
    };
    let read_server = !in_doubt.is_empty();
    let claim = Claim {
        service: &svc_name,
        uid,
        adopt: adopt_for.is_some(),
        take_over: &take_over,
    };
    let read_ours = read_names_in_doubt(ctx, ns, &claim, in_doubt, &mut held).await?;
    let mut owned = owned_slices(ctx, ns, uid, &take_over, adopt_for);
    owned.extend(
        read_ours
            .into_iter()
            .map(|s| Arc::new(CompactSlice::from(s))),
    );
    // A slice both watches know, one of them as someone else's (relabelled, the other watch
    // lags): not ours to write until they agree.
    owned.retain(|s| !held.contains_key(s.metadata.name.as_deref().unwrap_or_default()));
    let natives = native_slices(ctx, ns, &svc_name);
    let (live_endpoints, endpoints_read) =
        live_endpoints(ctx, pm, ns, &svc_name, !natives.is_empty()).await?;
    let refs: Vec<&PodRecord> = pods.iter().map(AsRef::as_ref).collect();
    let (zones, unready_nodes) = if ctx.settings.node_lookups {
        let index = ctx.index.lock();
        // Only gated pods read their node's readiness; a pool without one reads nothing.
        let unready = if gated {
            index.unready_nodes_of(&refs, pm.spec.gate_condition_type())
        } else {
            BTreeMap::new()
        };
        (index.zones_of(&refs), unready)
    } else {
        (BTreeMap::new(), BTreeMap::new())
    };
    Ok(Inputs {
        peers: gate_peers(ctx, pm, key, &refs, gated),
        network: crate::reconcile::probing::results(&ctx.prober, &ctx.probe_aliases, pm),
        owned_endpoints: owned_endpoints(ctx, uid),
        read_server: read_server || endpoints_read,
        service,
        pods,
        ambient,
        gated,
        owned,
        take_over,
        held,
        zones,
        unready_nodes,
        natives,
        live_endpoints,
        departed: Departed::of(ctx, key),
    })
}

/// Slices in our cache controlled by the PortMapping with `uid` (or one of `take_over`), plus,
/// with `adopt_for`, orphans of that Service: labelled managed-by us but without any
/// controller (left by `kubectl delete --cascade=orphan` of a PortMapping). The planner treats
/// them as ours, so they are adopted (the apply sets our ownerReference) or deleted, as a
/// ReplicaSet adopts orphaned pods.
fn owned_slices(
    ctx: &Context,
    ns: &str,
    uid: &str,
    take_over: &[String],
    adopt_for: Option<&str>,
) -> Vec<Arc<CompactSlice>> {
    ctx.index.lock().owned_slices(uid, take_over, ns, adopt_for)
}

/// What the other PortMappings of the namespace do with publication gates, for this plan.
fn gate_peers(
    ctx: &Context,
    pm: &PortMapping,
    key: &ObjectRef<PortMapping>,
    pods: &[&PodRecord],
    pool_gated: bool,
) -> GatePeers {
    let own = pm.spec.gate_condition_type();
    // Older PortMappings of the same type matter only for pods that carry the gate; without
    // one, listing them cost O(PortMappings of the namespace) per reconcile (2.3 s of CPU per
    // resync pass at 1,000 PortMappings). The index's count spares the scan of a pool without
    // any gated pod.
    let gated = pool_gated && pods.iter().any(|p| portmapper_core::has_gate(p, own));
    let (types, older) = ctx.index.lock().gate_peers(key, gated);
    let mut managed_by = BTreeMap::new();
    if older.is_empty() {
        return GatePeers { types, managed_by };
    }
    let ns = key.namespace.as_deref().unwrap_or_default();
    let older: Vec<Arc<PortMapping>> = older
        .iter()
        .filter_map(|k| ctx.stores.portmappings.get(k))
        .collect();
    for pod in pods.iter().filter(|p| portmapper_core::has_gate(p, own)) {
        // The selector too: the index knows pools by key and value only.
        let manager = older
            .iter()
            .find(|o| portmapper_core::pod_in_pool(&o.spec, ns, pod).unwrap_or(false));
        if let Some(manager) = manager {
            let name = pod.name.as_str();
            debug!(portmapping = %key, pod = name, manager = %manager.name_any(), gate = own, "an older PortMapping sets this pod's gate");
            managed_by.insert(name.to_owned(), manager.name_any());
        }
    }
    GatePeers { types, managed_by }
}

/// Who may write the slices of one Service (see [`portmapper_core::Ownership::claimable`]).
struct Claim<'a> {
    service: &'a str,
    uid: &'a str,
    adopt: bool,
    take_over: &'a [String],
}

/// Reads the slices that left our watch without our deleting them (rare: someone deleted or
/// relabelled one of ours): one GET each, so a relabelled slice counts as held by its new
/// manager instead of being written back, and one still ours is planned as the stored object
/// it is (an update of that version, which restores our labels). Returns those still ours.
async fn read_names_in_doubt(
    ctx: &Context,
    ns: &str,
    claim: &Claim<'_>,
    mut names: Vec<String>,
    held: &mut BTreeMap<String, HeldName>,
) -> Result<Vec<EndpointSlice>, Error> {
    let api: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), ns);
    names.sort_unstable();
    names.dedup();
    let mut ours = Vec::new();
    for name in names {
        let found = api
            .get_opt(&name)
            .await
            .map_err(|e| Error::kube(format!("reading EndpointSlice {ns}/{name}"), e))?;
        match found {
            None => ctx.index.lock().doubt_resolved(ns, &name),
            Some(slice) => {
                let claimable = portmapper_core::ownership(&slice.metadata, claim.uid).claimable(
                    claim.service,
                    claim.adopt,
                    claim.take_over,
                );
                if claimable {
                    ours.push(slice);
                } else {
                    held.insert(name, HeldName::of(&slice.metadata));
                }
            }
        }
    }
    Ok(ours)
}

/// The native controllers' slices labelled with this Service's name, from the metadata cache.
fn native_slices(ctx: &Context, ns: &str, service: &str) -> Vec<NativeSlice> {
    let keys = ctx.index.lock().native_slices(ns, service);
    keys.iter()
        .filter_map(|k| ctx.stores.foreign_slices.get(k))
        .filter_map(|s| {
            Some(NativeSlice {
                name: s.name_any(),
                uid: s.uid()?,
                manager: s
                    .labels()
                    .get(portmapper_core::ownership::LABEL_MANAGED_BY)?
                    .clone(),
            })
        })
        .collect()
}

/// The Endpoints object named after the Service: ours from the cache; otherwise one GET, only
/// when the legacy mirror is on or native leftovers make it relevant. True when it was read
/// from the API server.
async fn live_endpoints(
    ctx: &Context,
    pm: &PortMapping,
    ns: &str,
    service: &str,
    native_evidence: bool,
) -> Result<(Option<Endpoints>, bool), Error> {
    let cached = ctx
        .stores
        .owned_endpoints
        .get(&ObjectRef::new(service).within(ns));
    if let Some(ours) = cached {
        return Ok((Some(ours.as_ref().clone()), false));
    }
    if !(pm.spec.legacy_endpoints || native_evidence) {
        return Ok((None, false));
    }
    let api: Api<Endpoints> = Api::namespaced(ctx.client.clone(), ns);
    let found = api
        .get_opt(service)
        .await
        .map_err(|e| Error::kube(format!("reading Endpoints {ns}/{service}"), e))?;
    Ok((found, true))
}

/// The Endpoints objects the PortMapping with `uid` controls, from the cache.
fn owned_endpoints(ctx: &Context, uid: &str) -> Vec<Arc<Endpoints>> {
    let keys = ctx.index.lock().owned_endpoints(uid);
    keys.iter()
        .filter_map(|k| ctx.stores.owned_endpoints.get(k))
        .collect()
}
