//! One reconcile: decide and gather inputs from the caches, plan (pure, `portmapper-core`), apply
//! the differences, report status. Reconciles never LIST: everything comes from reflector stores.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ObjectReference, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use portmapper_api::status::condition_types as ct;
use portmapper_api::{PortMapping, PortMappingStatus};
use portmapper_core::planner::{self, GatePeers, Plan, PlanInput};
use portmapper_core::{EventReason, PodRecord};
use tracing::{Instrument, debug, info, info_span, warn};

use crate::apply::Writer;
use crate::conditions::{self, Desired};
use crate::context::{self, Context, publish_warning, warn_event};
use crate::error::Error;
use crate::index::PodSource;
use crate::metrics::ServiceLabels;
use crate::own_writes::Answered;
use crate::report;
use crate::sync_metrics::SyncResult;
use portmapper_core::sync_stats::sync_stats;

/// How soon to look again while something we wait for (a cache, probe results) is pending.
const PENDING_RETRY: Duration = Duration::from_secs(2);
/// How soon to look again when our own writes have not reached the cache (their watch events
/// normally wake the PortMapping first; this bounds a lost event).
const OWN_WRITES_RETRY: Duration = Duration::from_secs(1);
/// The `warned` slot of claim collisions (Event reason `EndpointSliceNameCollision`).
const COLLISION_SLOT: &str = "EndpointSliceNameCollision/claim";

/// Entry point for the Controller.
pub async fn reconcile(pm: Arc<PortMapping>, ctx: Arc<Context>) -> Result<Action, Error> {
    let pm_ref = ObjectRef::from_obj(pm.as_ref());
    // Before any input is read: an event during this pass makes the next one plan. A quiet
    // pass is decided before the span and the metrics of a reconcile: at 1,000 PortMappings
    // the span alone cost more than the rest of a quiet pass.
    let fingerprint = ctx.quiet.fingerprint(&pm, &pm_ref);
    if ctx.leadership.is_leader() && ctx.quiet.is_quiet(&pm_ref, &fingerprint) {
        debug!(portmapping = %pm_ref, "nothing it reads changed since a pass that changed nothing; skipping");
        ctx.metrics
            .reconciles
            .get_or_create(&crate::metrics::ResultLabels { result: "quiet" })
            .inc();
        return Ok(Action::requeue(resync_after(&ctx, &pm_ref)));
    }
    let span = info_span!(
        "reconcile",
        namespace = pm.namespace().unwrap_or_default(),
        name = %pm.name_any(),
        generation = pm.metadata.generation.unwrap_or_default(),
    );
    // Inside the window a failure opened: write nothing, come back when it ends. Watch events
    // (a pod flip, our own status write) trigger reconciles at once, whatever the error policy
    // returned, so the window is enforced here.
    let generation = pm.metadata.generation;
    if let Some(wait) = ctx
        .backoff
        .remaining(&pm_ref, generation, tokio::time::Instant::now())
    {
        debug!(portmapping = %pm_ref, wait_ms = wait.as_millis(), "backing off after a failure; writing nothing");
        ctx.metrics
            .reconciles
            .get_or_create(&crate::metrics::ResultLabels { result: "backoff" })
            .inc();
        return Ok(Action::requeue(wait));
    }
    // Part of a burst that follows its last write closely: this change waits for the batch
    // window's end, and whatever else arrives meanwhile is planned with it.
    if let Some(wait) = ctx.batches.remaining(&pm_ref, tokio::time::Instant::now()) {
        debug!(portmapping = %pm_ref, wait_ms = wait.as_millis(), "batching with the changes that follow; writing nothing yet");
        ctx.metrics
            .reconciles
            .get_or_create(&crate::metrics::ResultLabels { result: "batched" })
            .inc();
        return Ok(Action::requeue(wait));
    }
    let started = Instant::now();
    let (result, wrote) = reconcile_inner(&pm, &ctx, fingerprint)
        .instrument(span)
        .await;
    if wrote {
        ctx.batches.wrote(&pm_ref, tokio::time::Instant::now());
    }
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    context::record(&ctx.metrics, &result);
    // Only writes that went through show the server takes them again; a pass with nothing to
    // write (the churn came back to what is published) keeps the ladder where it is.
    if result.is_ok()
        && wrote
        && let Some(failures) = ctx.backoff.succeeded(&pm_ref)
    {
        info!(portmapping = %pm_ref, failures, "reconciled again after failures");
    }
    result
}

/// Retry failed reconciles after the PortMapping's backoff (`backoff.rs`: exponential per
/// object, by error class); writes already made are kept and the next pass resumes. Warns once
/// per change of error: repeats of the same failure are logged at debug level.
pub fn error_policy(pm: Arc<PortMapping>, err: &Error, ctx: Arc<Context>) -> Action {
    let pm_ref = ObjectRef::from_obj(pm.as_ref());
    let Some(failure) = ctx.backoff.failed(
        &pm_ref,
        pm.metadata.generation,
        err,
        tokio::time::Instant::now(),
    ) else {
        // Not leading: a new leader re-reconciles everything.
        return Action::await_change();
    };
    let retry_ms = failure.delay.as_millis();
    if failure.changed {
        warn!(portmapping = %pm_ref, error = %err, failures = failure.failures, retry_ms, "reconcile failed; backing off");
    } else {
        debug!(portmapping = %pm_ref, error = %err, failures = failure.failures, retry_ms, "reconcile failed again; backing off");
    }
    Action::requeue(failure.delay)
}

/// What a reconcile concluded, before it is written as status.
struct Outcome {
    conditions: Vec<Desired>,
    /// Nothing is published any more: per-port status is cleared.
    withdrawn: bool,
    plan: Option<Plan>,
    slices: Option<i32>,
    requeue: Duration,
    /// Why nothing new is published (reason, message), for the gated pods' conditions.
    stalled: Option<(&'static str, String)>,
    /// Every input came from watch-fed caches (no probe results, no API read, no migration
    /// under way): a pass that also wrote nothing may be taken as settled (`quiet.rs`).
    cache_only: bool,
}

impl Outcome {
    fn stalled(ctx: &Context, reason: &'static str, message: String) -> Self {
        Self {
            conditions: report::stalled(reason, message.clone()),
            withdrawn: false,
            plan: None,
            slices: None,
            requeue: ctx.settings.resync,
            stalled: Some((reason, message)),
            cache_only: false,
        }
    }
}

/// The resync delay of `pm`: the resync period less a random part of up to a tenth (as
/// controller-runtime jitters its resyncs), ending on a [`RESYNC_SLOT`] boundary, so the
/// resyncs of many PortMappings come due together in a few timer wakeups rather than one each
/// (at 1,000 PortMappings the wakeups cost more CPU than the quiet passes they ran).
fn resync_after(ctx: &Context, pm: &ObjectRef<PortMapping>) -> Duration {
    use std::hash::BuildHasher;
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    // A fresh `RandomState` has fresh keys: a random number without another dependency.
    let random = std::collections::hash_map::RandomState::new().hash_one(pm);
    let fraction = u32::try_from(random % 1024).unwrap_or(0);
    let now = Instant::now();
    let epoch = *EPOCH.get_or_init(|| now);
    resync_delay(
        ctx.settings.resync,
        fraction,
        now.saturating_duration_since(epoch),
    )
}

/// [`resync_after`] at `since_epoch` with the random `fraction` (of 1024) of a tenth.
fn resync_delay(resync: Duration, fraction: u32, since_epoch: Duration) -> Duration {
    let delay = resync - resync / 10 * fraction.min(1024) / 1024;
    let slot = RESYNC_SLOT.as_millis().max(1);
    let due = (since_epoch + delay).as_millis() / slot * slot;
    Duration::from_millis(u64::try_from(due).unwrap_or(u64::MAX))
        .saturating_sub(since_epoch)
        .max(delay / 2)
}

/// Resyncs come due on multiples of this since the process started.
const RESYNC_SLOT: Duration = Duration::from_millis(100);

/// The pass's result, and whether it sent any write.
async fn reconcile_inner(
    pm: &PortMapping,
    ctx: &Context,
    fingerprint: crate::quiet::Fingerprint,
) -> (Result<Action, Error>, bool) {
    let Some(ns) = pm.namespace() else {
        return (Err(Error::MissingMetadata("namespace")), false);
    };
    // A PortMapping held by a finalizer or a foreground deletion is still reconciled, like the
    // native controller's terminating Services: its slices stay accurate until they are
    // collected, and the planner creates nothing new that would race the garbage collector.
    let pm_ref = ObjectRef::from_obj(pm);
    if !ctx.leadership.is_leader() {
        // Followers keep caches warm and write nothing; a new leader re-reconciles everything
        // and seeds its probes from the live slices.
        crate::probing::forget(&ctx.prober, pm);
        ctx.quiet.unsettle(&pm_ref);
        return (Ok(Action::await_change()), false);
    }
    let writer = Writer::new(&ctx.client, &ns, &ctx.leadership, &ctx.metrics);
    let result = reconcile_as_leader(pm, ctx, fingerprint, &writer, &pm_ref).await;
    ctx.metrics.sync.ended(match &result {
        Ok((_, ended)) => *ended,
        Err(_) => SyncResult::Error,
    });
    report_api_warnings(ctx, pm, &pm_ref, &writer).await;
    (result.map(|(action, _)| action), !writer.wrote_nothing())
}

/// Each distinct warning the API server sent on this PortMapping's writes, once per
/// PortMapping (a Warning Event and a log line), not once per write: v1 Endpoints are
/// deprecated, and every legacy Endpoints write says so.
async fn report_api_warnings(
    ctx: &Context,
    pm: &PortMapping,
    pm_ref: &ObjectRef<PortMapping>,
    writer: &Writer<'_>,
) {
    let reason = EventReason::ApiWarning;
    for text in ctx.first_mentions(pm_ref, reason.as_str(), writer.warnings()) {
        info!(portmapping = %pm_ref, warning = %text, "the API server warns about our writes");
        let note = format!("the API server warns about this PortMapping's writes: {text}");
        warn_event(ctx, pm, pm_ref, reason, &note).await;
    }
}

async fn reconcile_as_leader(
    pm: &PortMapping,
    ctx: &Context,
    fingerprint: crate::quiet::Fingerprint,
    writer: &Writer<'_>,
    pm_ref: &ObjectRef<PortMapping>,
) -> Result<(Action, SyncResult), Error> {
    let stale = |wait| Ok((Action::requeue(wait), SyncResult::Stale));
    let (ns, uid) = (
        writer.namespace,
        pm.uid().ok_or(Error::MissingMetadata("uid"))?,
    );
    if !caches_synced(ctx) {
        // Before their first list these caches read as "nothing published" / "no Service": a
        // plan would rewrite every slice and probes would be seeded excluded (a restart flap),
        // and leftovers (our Endpoints, native slices) would go unseen.
        debug!(portmapping = %pm_ref, "caches not synced yet; writing nothing");
        return stale(PENDING_RETRY);
    }

    if ctx.index.lock().own_writes_pending(&uid, Instant::now()) {
        // Planning now would read a cache without our last writes and undo or repeat them; the
        // watch event that brings the last of them wakes this PortMapping.
        debug!(portmapping = %pm_ref, "own writes not in the cache yet; waiting");
        return stale(OWN_WRITES_RETRY);
    }
    let outcome = match decide(pm, ctx, ns, pm_ref) {
        Decided::Wait => return stale(PENDING_RETRY),
        Decided::Stop(mut outcome) => {
            crate::probing::forget(&ctx.prober, pm);
            // Its slices stay: gated pods they name keep their condition, the others are False.
            let live = owned_slices(ctx, ns, &uid, &[], None);
            if !stalled_gates(pm, ctx, ns, pm_ref, writer, &live, &outcome).await? {
                outcome.requeue = PENDING_RETRY;
            }
            outcome
        }
        Decided::Withdraw(mut outcome) => {
            crate::probing::forget(&ctx.prober, pm);
            ctx.metrics.forget((ns, &pm_ref.name));
            outcome.withdrawn = true;
            outcome.slices = Some(0);
            // The Service is gone: take our slices and Endpoints back, as the seed does.
            let live = owned_slices(ctx, ns, &uid, &[], None);
            let endpoints = crate::migration_exec::owned_endpoints(ctx, &uid);
            let plan = planner::teardown(
                live.iter().map(AsRef::as_ref),
                endpoints.iter().map(AsRef::as_ref),
                &uid,
            );
            let written = execute_slice_writes(writer, &ctx.index, &plan, &uid).await;
            // The Endpoints are deleted even when a slice deletion failed: with the Service
            // gone nothing reads either, so there is no order to keep, and every failure is
            // reported at once.
            let mut errors = written.errors;
            if let Err(err) =
                crate::migration_exec::converge(ctx, writer, pm, pm_ref, &plan.migration).await
            {
                errors.push(err);
            }
            if let Some(err) = Error::combine(errors) {
                return Err(err);
            }
            // Nothing is published any more: no gated pod stays True.
            if !stalled_gates(pm, ctx, ns, pm_ref, writer, &[], &outcome).await? {
                outcome.requeue = PENDING_RETRY;
            }
            outcome
        }
        Decided::Plan {
            service,
            pods,
            ambient,
        } => {
            // A PortMapping being deleted adopts nothing, as a terminating ReplicaSet adopts no
            // pods: with `--cascade=orphan` the garbage collector is taking its ownerReferences
            // off, and adopting would put them back.
            let svc_name = service.name_any();
            let adopt_for = pm
                .metadata
                .deletion_timestamp
                .is_none()
                .then_some(svc_name.as_str());
            // Slices of PortMappings this one beats for the Service are its to take over.
            let (take_over, mut held, in_doubt) = {
                let idx = ctx.index.lock();
                let take_over = idx.losers_to(pm_ref);
                // Names held by others, from the watch of every slice not managed by us: a
                // name taken between that watch and our write is the same race the GET before
                // each create had (the API server does not let SSA ask "create only").
                let held = idx.held_by_others(ns, &svc_name, &uid, adopt_for.is_some(), &take_over);
                (take_over, held, idx.names_in_doubt(ns, &svc_name))
            };
            let doubted = !in_doubt.is_empty();
            read_names_in_doubt(
                ctx,
                ns,
                &svc_name,
                &uid,
                adopt_for.is_some(),
                &take_over,
                in_doubt,
                &mut held,
            )
            .await?;
            let mut owned = owned_slices(ctx, ns, &uid, &take_over, adopt_for);
            // A slice both watches know, one of them as someone else's (relabelled, the other
            // watch lags): not ours to write until they agree.
            owned.retain(|s| !held.contains_key(s.metadata.name.as_deref().unwrap_or_default()));
            let inputs = Gathered {
                owned: &owned,
                take_over: &take_over,
                held: &held,
                ambient,
            };
            let mut outcome =
                plan_and_apply(pm, ctx, ns, pm_ref, writer, &service, &pods, &inputs).await?;
            outcome.cache_only &= !doubted;
            outcome
        }
    };
    write_status(pm, ctx, writer, &outcome).await?;
    let requeue = if outcome.requeue == ctx.settings.resync {
        if outcome.cache_only && writer.wrote_nothing() {
            ctx.quiet.settled(pm_ref, fingerprint);
        }
        resync_after(ctx, pm_ref)
    } else {
        outcome.requeue
    };
    Ok((Action::requeue(requeue), SyncResult::Success))
}

enum Decided {
    /// An input is still loading: write nothing, look again soon.
    Wait,
    /// Nothing to write but status.
    Stop(Outcome),
    /// Delete every owned slice, then report.
    Withdraw(Outcome),
    /// Inputs are complete: plan.
    Plan {
        service: Arc<Service>,
        pods: Arc<Vec<Arc<PodRecord>>>,
        /// A pool pod may be enrolled in Istio ambient mode (see [`Gathered::ambient`]).
        ambient: bool,
    },
}

fn decide(pm: &PortMapping, ctx: &Context, ns: &str, pm_ref: &ObjectRef<PortMapping>) -> Decided {
    let errors = portmapper_api::validate::validate_spec(&pm.spec);
    if let Some(message) = report::invalid_spec_message(&errors) {
        return Decided::Stop(Outcome::stalled(ctx, "InvalidSpec", message));
    }
    let winner = ctx.index.lock().service_winner(pm_ref);
    if let Some(winner) = winner {
        let mut outcome = Outcome::stalled(ctx, "ServiceClaimed", String::new());
        outcome.conditions = report::conflict(&winner.name, &pm.spec.service_ref.name);
        outcome.stalled = Some((
            "ServiceClaimed",
            format!(
                "PortMapping {} publishes Service {}",
                winner.name, pm.spec.service_ref.name
            ),
        ));
        // Writes no slice: slices it published before losing stay until it is deleted (GC) or
        // wins again, so a conflict can never empty a port. Only its own gates are set False.
        return Decided::Stop(outcome);
    }
    let service_ref = ObjectRef::<Service>::new(&pm.spec.service_ref.name).within(ns);
    let Some(service) = ctx.services.get(&service_ref) else {
        let message = report::service_not_found_message(ns, &pm.spec.service_ref.name);
        return Decided::Withdraw(Outcome::stalled(ctx, "ServiceNotFound", message));
    };
    // The watch's first list first, then the pool: the index takes each pod of the first list
    // as it arrives, so a pool read before the list is done can miss its last pods (a first
    // plan at 10,000 pods saw 9,992); once it is done the index has them all.
    if !ctx.pods.is_listed(&PodSource::of(pm), pm_ref) {
        // Not even status: a restart must not flap a Ready PortMapping while caches sync.
        debug!(portmapping = %pm_ref, "pod cache not synced yet; writing nothing");
        return Decided::Wait;
    }
    // The index holds the pool's pods by key and value; the planner checks the selector.
    let (pods, ambient) = {
        let mut index = ctx.index.lock();
        (index.pool_pods(pm), index.pool_has_ambient(pm))
    };
    Decided::Plan {
        service,
        pods,
        ambient,
    }
}

/// Writes the gates of a PortMapping that publishes nothing new
/// ([`planner::stalled_pod_gates`]). False when they must wait for the pool's pod cache (a
/// transient wait never flips a condition).
async fn stalled_gates(
    pm: &PortMapping,
    ctx: &Context,
    ns: &str,
    pm_ref: &ObjectRef<PortMapping>,
    writer: &Writer<'_>,
    live: &[Arc<EndpointSlice>],
    outcome: &Outcome,
) -> Result<bool, Error> {
    let Some((reason, message)) = &outcome.stalled else {
        return Ok(true);
    };
    // An invalid gate type or pool says neither which condition nor which pods.
    let errors = portmapper_api::validate::validate_spec(&pm.spec);
    if errors
        .iter()
        .any(|e| e.field.starts_with("spec.readinessGate") || e.field.starts_with("spec.pods"))
    {
        return Ok(true);
    }
    if !ctx.pods.is_listed(&PodSource::of(pm), pm_ref) {
        return Ok(false);
    }
    let pods = ctx.index.lock().pool_pods(pm);
    let pods: Vec<&PodRecord> = pods
        .iter()
        .map(AsRef::as_ref)
        .filter(|p| portmapper_core::pod_in_pool(&pm.spec, ns, p).unwrap_or(false))
        .collect();
    let live: Vec<&EndpointSlice> = live.iter().map(AsRef::as_ref).collect();
    let peers = gate_peers(pm, ctx, ns, pm_ref, &pods);
    let message = format!(
        "PortMapping {} publishes nothing new: {message}",
        pm_ref.name
    );
    let gates = planner::stalled_pod_gates(
        &pods,
        pm.spec.gate_condition_type(),
        &peers,
        &live,
        (reason, &message),
        Timestamp::now(),
    );
    let errors = crate::gates::write_gates(writer, &ctx.gates_written, &gates, &pods, true).await;
    Error::combine(errors).map_or(Ok(true), Err)
}

/// Whether every cache a plan reads from has listed once.
fn caches_synced(ctx: &Context) -> bool {
    use crate::watches::is_ready;
    is_ready(&ctx.slices)
        && is_ready(&ctx.services)
        && is_ready(&ctx.owned_endpoints)
        && is_ready(&ctx.native_slices)
}

/// Slices in our cache controlled by this PortMapping, plus, with `adopt_for`, orphans of that
/// Service: labelled managed-by us but without any controller (left by `kubectl delete
/// --cascade=orphan` of a PortMapping). The planner treats them as ours, so they are adopted
/// (the apply sets our ownerReference) or deleted, as a ReplicaSet adopts orphaned pods.
fn owned_slices(
    ctx: &Context,
    ns: &str,
    uid: &str,
    take_over: &[String],
    adopt_for: Option<&str>,
) -> Vec<Arc<EndpointSlice>> {
    let keys = ctx.index.lock().owned_slices(uid, take_over, ns, adopt_for);
    keys.iter().filter_map(|k| ctx.slices.get(k)).collect()
}

/// What the other PortMappings of the namespace do with publication gates, for this plan.
fn gate_peers(
    pm: &PortMapping,
    ctx: &Context,
    ns: &str,
    pm_ref: &ObjectRef<PortMapping>,
    pods: &[&PodRecord],
) -> GatePeers {
    let own = pm.spec.gate_condition_type();
    // Older PortMappings of the same type matter only for pods that carry the gate; without
    // one, listing them cost O(PortMappings of the namespace) per reconcile (2.3 s of CPU per
    // resync pass at 1,000 PortMappings).
    let gated = pods.iter().any(|p| portmapper_core::has_gate(p, own));
    let (types, older) = ctx.index.lock().gate_peers(pm_ref, gated);
    let mut managed_by = BTreeMap::new();
    if !older.is_empty() {
        let older: Vec<Arc<PortMapping>> = older
            .iter()
            .filter_map(|k| ctx.portmappings.get(k))
            .collect();
        for pod in pods.iter().filter(|p| portmapper_core::has_gate(p, own)) {
            // The selector too: the index knows pools by key and value only.
            let manager = older
                .iter()
                .find(|o| portmapper_core::pod_in_pool(&o.spec, ns, pod).unwrap_or(false));
            if let Some(manager) = manager {
                let name = pod.name.as_str();
                debug!(portmapping = %pm_ref, pod = name, manager = %manager.name_any(), gate = own, "an older PortMapping sets this pod's gate");
                managed_by.insert(name.to_owned(), manager.name_any());
            }
        }
    }
    GatePeers { types, managed_by }
}

/// Reads the slices that left our watch without our deleting them and that the watch of slices
/// not ours has not shown (rare: someone deleted or relabelled one of ours): one GET each, so a
/// relabelled slice counts as held by its new manager instead of being applied back.
#[allow(clippy::too_many_arguments)]
async fn read_names_in_doubt(
    ctx: &Context,
    ns: &str,
    service: &str,
    uid: &str,
    adopt: bool,
    take_over: &[String],
    names: Vec<String>,
    held: &mut BTreeMap<String, portmapper_core::HeldName>,
) -> Result<(), Error> {
    let api: kube::Api<EndpointSlice> = kube::Api::namespaced(ctx.client.clone(), ns);
    for name in names {
        let found = api
            .get_opt(&name)
            .await
            .map_err(|e| Error::kube(format!("reading EndpointSlice {ns}/{name}"), e))?;
        match found {
            None => ctx.index.lock().doubt_resolved(ns, &name),
            Some(slice) => {
                let ours = portmapper_core::ownership(&slice.metadata, uid)
                    .claimable(service, adopt, take_over);
                if !ours {
                    held.insert(name, portmapper_core::HeldName::of(&slice.metadata));
                }
            }
        }
    }
    Ok(())
}

/// The live slices a plan reads, gathered from the index.
struct Gathered<'a> {
    /// The slices this PortMapping may write.
    owned: &'a [Arc<EndpointSlice>],
    /// PortMappings it takes over from.
    take_over: &'a [String],
    /// Names it may want that someone else holds.
    held: &'a BTreeMap<String, portmapper_core::HeldName>,
    /// Whether the index counts a pod of the pool enrolled in Istio ambient mode: only then is
    /// the pool searched for the consumer caveat.
    ambient: bool,
}

#[allow(clippy::too_many_arguments)]
async fn plan_and_apply(
    pm: &PortMapping,
    ctx: &Context,
    ns: &str,
    pm_ref: &ObjectRef<PortMapping>,
    writer: &Writer<'_>,
    service: &Service,
    pods: &[Arc<PodRecord>],
    gathered: &Gathered<'_>,
) -> Result<Outcome, Error> {
    let (owned, take_over) = (gathered.owned, gathered.take_over);
    let records = pods;
    let pods: Vec<&PodRecord> = records.iter().map(AsRef::as_ref).collect();
    let live_slices = owned;
    let zones = if ctx.settings.node_lookups {
        ctx.index
            .lock()
            .zones_of(pods.iter().filter_map(|p| p.node_name.as_deref()))
    } else {
        BTreeMap::new()
    };
    let gate_peers = gate_peers(pm, ctx, ns, pm_ref, &pods);
    // Cached probe results only: a reconcile never waits on the network.
    let network = crate::probing::results(&ctx.prober, pm);
    let native = crate::migration_exec::native_slices(ctx, ns, &service.name_any());
    let (live_endpoints, endpoints_read) = crate::migration_exec::live_endpoints(
        ctx,
        writer,
        pm,
        &service.name_any(),
        !native.is_empty(),
    )
    .await?;
    let owned_endpoints =
        crate::migration_exec::owned_endpoints(ctx, &pm.uid().unwrap_or_default());
    let input = PlanInput {
        port_mapping: pm,
        service,
        pods: records,
        node_zones: &zones,
        network: &network,
        live_slices,
        take_over,
        held_by_others: gathered.held,
        live_endpoints: live_endpoints.as_ref(),
        owned_endpoints: &owned_endpoints,
        native_slices: &native,
        now: Timestamp::now(),
        gate_peers: &gate_peers,
    };
    let mut memo = ctx.take_memo(pm_ref);
    let planning = Instant::now();
    let planned = planner::plan_with_memo(&input, &mut memo);
    ctx.metrics
        .plan_duration
        .observe(planning.elapsed().as_secs_f64());
    let pass = memo.last_pass();
    ctx.keep_memo(pm_ref, memo);
    for (evaluation, n) in [("reused", pass.reused), ("evaluated", pass.evaluated)] {
        ctx.metrics
            .plan_pods
            .get_or_create(&crate::metrics::EvaluationLabels { evaluation })
            .inc_by(u64::try_from(n).unwrap_or(u64::MAX));
    }
    let plan = match planned {
        Ok(plan) => plan,
        Err(err) => {
            let outcome = Outcome::stalled(ctx, "PlanFailed", err.to_string());
            stalled_gates(pm, ctx, ns, pm_ref, writer, live_slices, &outcome).await?;
            return Ok(outcome);
        }
    };
    // The prober watches exactly what this plan looked up.
    let probed = crate::probing::watch(
        &ctx.prober,
        pm,
        service,
        &pods,
        &plan.network_lookups,
        &network,
    );

    let mut conditions = Vec::new();
    let pm_uid = pm.uid().unwrap_or_default();
    let written = execute_slice_writes(writer, &ctx.index, &plan, &pm_uid).await;
    let stats = sync_stats(
        &plan,
        live_slices.iter().map(AsRef::as_ref),
        usize::try_from(pm.spec.max_endpoints_per_slice).unwrap_or(1),
    );
    ctx.metrics.sync.planned((ns, &pm_ref.name), &stats);
    // Gates after the slices: a pod is marked published only once its slices are stored.
    let slices_written = written.errors.is_empty() && plan.collisions.is_empty();
    let wake = written.wake;
    let gate_errors = crate::gates::write_gates(
        writer,
        &ctx.gates_written,
        &plan.pod_gates,
        &pods,
        slices_written,
    )
    .await;
    let mut errors = written.errors;
    errors.extend(gate_errors);
    let mut collisions = Vec::new();
    // Each squatter object (name/UID) is one occurrence: warned when first seen, not at every
    // retry; another object at the name (a new UID) is a new one.
    let mut squatters: BTreeMap<String, (String, Option<String>, String)> = BTreeMap::new();
    for collision in &plan.collisions {
        let message = collision.to_string();
        squatters.insert(
            format!(
                "{}/{}",
                collision.name,
                collision.held.uid.clone().unwrap_or_default()
            ),
            (
                collision.name.clone(),
                collision.held.uid.clone(),
                message.clone(),
            ),
        );
        collisions.push(message);
    }
    if plan.writes() > 0 {
        info!(writes = plan.writes(), summary = %plan.summary, "published changes");
    }
    // Legacy Endpoints and the selector migration, after the slices are in place.
    if let Err(err) =
        crate::migration_exec::converge(ctx, writer, pm, pm_ref, &plan.migration).await
    {
        errors.push(err);
    }
    // The condition names every failure (up to a bound, see `Error::Writes`).
    let failed = Error::combine(errors);

    let svc_labels = ServiceLabels {
        namespace: ns.to_string(),
        service: service.name_any(),
    };
    ctx.metrics.feeds((ns, &pm_ref.name), &svc_labels);
    if !collisions.is_empty() {
        ctx.metrics.name_collisions.get_or_create(&svc_labels).inc();
        let message = collisions.join("; ");
        // Its own slot (one occurrence per squatter object), apart from the planner warnings.
        let keys = squatters.keys().cloned().collect();
        for key in ctx.new_occurrences(pm_ref, COLLISION_SLOT, keys) {
            let Some((name, uid, note)) = squatters.get(&key) else {
                continue;
            };
            // The squatter as the Event's `related` object: kube's Recorder folds repeats of a
            // (reason, regarding, related) into one series, so a second squatter is an Event
            // of its own, naming it, instead of a repeat of the first one's note.
            let related = ObjectReference {
                api_version: Some("discovery.k8s.io/v1".to_owned()),
                kind: Some("EndpointSlice".to_owned()),
                namespace: Some(ns.to_owned()),
                name: Some(name.clone()),
                uid: uid.clone(),
                ..ObjectReference::default()
            };
            let reason = EventReason::EndpointSliceNameCollision;
            publish_warning(ctx, pm, pm_ref, reason, note, Some(related)).await;
        }
        conditions.push(Desired::new(
            ct::READY,
            false,
            "NameCollision",
            message.clone(),
        ));
        conditions.push(Desired::new(
            ct::RECONCILING,
            false,
            "NameCollision",
            "waiting for the name to be freed",
        ));
        conditions.push(Desired::new(ct::STALLED, true, "NameCollision", message));
    } else if let Some(err) = &failed {
        conditions.push(Desired::new(
            ct::READY,
            false,
            "ApplyFailed",
            err.to_string(),
        ));
        conditions.push(Desired::new(
            ct::RECONCILING,
            true,
            "ApplyFailed",
            "retrying the failed writes",
        ));
        conditions.push(Desired::new(ct::STALLED, false, "ApplyFailed", "retrying"));
    } else {
        ctx.clear_warning(pm_ref, COLLISION_SLOT);
        conditions.extend(report::planned(&plan));
    }
    // Beside Ready: the other ports publish, so this does not make the PortMapping unready.
    conditions.extend(report::port_not_found(&plan));
    if let Some(migration) = report::selector_migration(service) {
        let reason = EventReason::SelectorStillPresent;
        if ctx.warn_once(pm_ref, reason.as_str()) {
            warn_event(ctx, pm, pm_ref, reason, &migration.message).await;
        }
        conditions.push(migration);
    } else {
        ctx.clear_warning(pm_ref, EventReason::SelectorStillPresent.as_str());
    }
    let caveats = report::consumer_caveats(&plan, &pods, service, gathered.ambient);
    let previous = pm.status.as_ref().map_or(&[][..], |s| &s.conditions[..]);
    for reason in report::CAVEATS {
        let Some((_, message)) = caveats.iter().find(|(r, _)| *r == reason) else {
            ctx.clear_warning(pm_ref, reason.as_str());
            continue;
        };
        let reported = Desired::new(ct::CONSUMER_CAVEAT, true, reason.as_str(), message.clone());
        if ctx.warn_once(pm_ref, reason.as_str()) && !report::already_reported(previous, &reported)
        {
            warn_event(ctx, pm, pm_ref, reason, message).await;
        }
    }
    conditions.extend(report::consumer_caveat(&caveats));
    // One Event per reason, naming every occurrence (three rejected pods are one Event that
    // names all three, not one that names the first).
    let mut by_reason: BTreeMap<EventReason, Vec<String>> = BTreeMap::new();
    for warning in &plan.warnings {
        by_reason
            .entry(report::warning_reason(warning))
            .or_default()
            .push(warning.to_string());
    }
    for (reason, notes) in &by_reason {
        let note = notes.join("; ");
        // Unknown ports are one occurrence per set of unmatched entries (a second typo, or a
        // Service port renamed while one is already unknown, is news); the others once while
        // they last.
        let occurrence = if *reason == EventReason::UnknownPort {
            note.as_str()
        } else {
            ""
        };
        if ctx.warn_occurrence(pm_ref, reason.as_str(), occurrence) {
            warn_event(ctx, pm, pm_ref, *reason, &note).await;
        }
    }
    // Re-armed once the cause clears, so the next time it happens is an Event again.
    if !by_reason.contains_key(&EventReason::UnknownPort) {
        ctx.clear_warning(pm_ref, EventReason::UnknownPort.as_str());
    }

    record_gauges(ctx, pm_ref, ns, service, &plan);
    for (decision, n) in [
        ("include", plan.decisions.include),
        ("exclude", plan.decisions.exclude),
        ("abstain", plan.decisions.abstain),
    ] {
        ctx.metrics
            .membership_checks
            .get_or_create(&crate::metrics::DecisionLabels {
                namespace: ns.to_string(),
                service: service.name_any(),
                decision,
            })
            .inc_by(n);
    }
    let cache_only = plan.network_lookups.is_empty()
        && native.is_empty()
        && endpoints_read == crate::migration_exec::Read::Cache;
    let outcome = Outcome {
        stalled: None,
        cache_only,
        conditions,
        withdrawn: false,
        slices: Some(slice_count(&plan)),
        plan: Some(plan),
        // Look again soon while probe targets still lack a first result; afterwards damped
        // flips arrive as events and reasons refresh with the resync.
        requeue: if wake {
            Duration::ZERO
        } else if probed.awaiting_first_result > 0 {
            PENDING_RETRY.min(ctx.settings.resync)
        } else {
            ctx.settings.resync
        },
    };
    if let Some(err) = failed {
        // Report what we know first, then let the error policy retry.
        write_status(pm, ctx, writer, &outcome).await?;
        return Err(err);
    }
    Ok(outcome)
}

/// Slice writes of one plan in flight at once. The plan's writes are independent objects, so
/// they need no order among themselves; sequential writes made a first publication of hundreds
/// of slices wait one round trip per slice. Kept small so one PortMapping cannot flood the API
/// server (reconciles of several PortMappings multiply it).
const SLICE_WRITES_IN_FLIGHT: usize = 8;

/// What the slice writes of one plan came to.
struct SliceWrites {
    /// Every failed write, in plan order.
    errors: Vec<Error>,
    /// The watch showed a change of a slice that was not ours while we wrote it: plan again
    /// (the event that would have woken the PortMapping was held as a possible echo).
    wake: bool,
}

/// Performs the plan's slice applies, then its deletions (after the applies, so endpoints that
/// move between slices are never missing from all of them), each phase with a few writes in
/// flight. When an apply failed, no slice is deleted in this pass: the slice a deletion retires
/// may hold the only copy of endpoints the failed apply was to publish elsewhere (a switch of
/// `sliceGrouping`, the upgrade from per-port slices), and the next pass plans the deletions
/// again. Decides nothing: names held by others were left out by the planner.
async fn execute_slice_writes(
    writer: &Writer<'_>,
    index: &crate::index::SharedIndex,
    plan: &Plan,
    pm_uid: &str,
) -> SliceWrites {
    use futures::StreamExt;

    // Each apply is announced to the index as it is sent and its answer recorded as it arrives:
    // its watch event, often handled before the answer, is then known as ours instead of
    // waking the PortMapping for a pass that finds nothing to do (at 10,000 pods such passes
    // were 0.85 per pod flip with expectations recorded after the batch, 0.5 when recorded
    // per answer).
    let slice_ref = |name: &str| ObjectRef::<EndpointSlice>::new(name).within(writer.namespace);
    let expect = |name: &str, written: &Written| -> Answered {
        let slice = slice_ref(name);
        match written {
            Written::Applied(Some(version)) => {
                index
                    .lock()
                    .wrote_slice(pm_uid, slice, version.clone(), Instant::now())
            }
            Written::Applied(None) | Written::Failed(_) => {
                index.lock().apply_failed(pm_uid, &slice)
            }
            Written::Deleted => {
                index.lock().deleted_slice(pm_uid, slice, Instant::now());
                Answered::Awaited
            }
            Written::Done => Answered::Awaited,
        }
    };
    let applies: Vec<_> = plan
        .slices
        .iter()
        .filter(|s| s.action.is_write())
        .map(|planned| async {
            let name = planned.slice.name_any();
            index
                .lock()
                .applying_slice(pm_uid, slice_ref(&name), Instant::now());
            let written = apply_one(writer, &planned.slice).await;
            let answered = expect(&name, &written);
            (written, answered)
        })
        .collect();
    // `buffered` keeps plan order in the results, so conditions and logs are deterministic.
    let mut results: Vec<(Written, Answered)> = futures::stream::iter(applies)
        .buffered(SLICE_WRITES_IN_FLIGHT)
        .collect()
        .await;
    let applied = results
        .iter()
        .all(|(w, _)| !matches!(w, Written::Failed(_)));
    let deletions: Vec<_> = plan
        .deletions
        .iter()
        .filter(|_| applied)
        .filter_map(|d| {
            let uid = d.uid.as_deref()?;
            Some(async move {
                let written = delete_one(writer, &d.name, uid).await;
                let answered = expect(&d.name, &written);
                (written, answered)
            })
        })
        .collect();
    results.extend(
        futures::stream::iter(deletions)
            .buffered(SLICE_WRITES_IN_FLIGHT)
            .collect::<Vec<_>>()
            .await,
    );
    let wake = results.iter().any(|(_, a)| *a == Answered::Wake);
    let errors = results
        .into_iter()
        .filter_map(|(written, _)| match written {
            Written::Failed(e) => Some(e),
            Written::Applied(_) | Written::Deleted | Written::Done => None,
        })
        .collect();
    SliceWrites { errors, wake }
}

/// The result of one slice write.
enum Written {
    /// Applied; the resourceVersion stored.
    Applied(Option<String>),
    /// Deleted by this call.
    Deleted,
    /// Nothing left to do (already gone).
    Done,
    Failed(Error),
}

async fn apply_one(writer: &Writer<'_>, slice: &EndpointSlice) -> Written {
    match writer.apply_slice(slice).await {
        Ok(stored) => Written::Applied(stored),
        Err(err) => Written::Failed(err),
    }
}

async fn delete_one(writer: &Writer<'_>, name: &str, uid: &str) -> Written {
    match writer.delete_slice(name, uid).await {
        Ok(true) => Written::Deleted,
        Ok(false) => Written::Done,
        Err(err) => Written::Failed(err),
    }
}

fn slice_count(plan: &Plan) -> i32 {
    i32::try_from(plan.slices.len()).unwrap_or(i32::MAX)
}

fn record_gauges(
    ctx: &Context,
    pm_ref: &ObjectRef<PortMapping>,
    ns: &str,
    service: &Service,
    plan: &Plan,
) {
    let mut per_port: BTreeMap<(String, String), i64> = BTreeMap::new();
    for planned in &plan.slices {
        // Every port a slice lists publishes its endpoints (a port-set slice lists several);
        // a portless slice counts under "".
        let mut ports: Vec<String> = planned
            .slice
            .ports
            .iter()
            .flatten()
            .map(|p| {
                p.name
                    .clone()
                    .unwrap_or_else(|| p.port.unwrap_or_default().to_string())
            })
            .collect();
        if ports.is_empty() {
            ports.push(String::new());
        }
        let n = i64::try_from(planned.slice.endpoints.len()).unwrap_or(i64::MAX);
        for port in ports {
            *per_port
                .entry((port, planned.slice.address_type.clone()))
                .or_default() += n;
        }
    }
    ctx.metrics.set_published(
        (ns, &pm_ref.name),
        ServiceLabels {
            namespace: ns.to_string(),
            service: service.name_any(),
        },
        &per_port,
        i64::from(slice_count(plan)),
    );
}

async fn write_status(
    pm: &PortMapping,
    ctx: &Context,
    writer: &Writer<'_>,
    outcome: &Outcome,
) -> Result<(), Error> {
    // What the server holds, including a write of ours the cache has not delivered yet: a
    // reconcile in that window would otherwise re-send the status it just wrote.
    let previous = ctx.known_status(pm);
    let (ports, summary) = match (&outcome.plan, outcome.withdrawn) {
        (Some(plan), _) => (
            plan.ports.clone(),
            Some(plan.summary.clone()).filter(|s| !s.is_empty()),
        ),
        (None, true) => (Vec::new(), None),
        (None, false) => (previous.ports.clone(), previous.summary.clone()),
    };
    let generation = pm.metadata.generation;
    let status = PortMappingStatus {
        observed_generation: generation,
        conditions: conditions::merge(
            &previous.conditions,
            &outcome.conditions,
            generation,
            Timestamp::now(),
        ),
        ports,
        summary,
        endpoint_slices: outcome.slices.or(previous.endpoint_slices),
    };
    if status == previous {
        return Ok(());
    }
    debug!(portmapping = %pm.name_any(), "status changed; applying");
    if writer.apply_status(pm, &status).await? {
        ctx.status_was_written(pm, &status);
    } else {
        debug!(portmapping = %pm.name_any(), "PortMapping gone; status not written");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resyncs_are_jittered_by_up_to_a_tenth_and_end_on_a_slot() {
        let resync = Duration::from_secs(5);
        for (fraction, since) in [(0, 0), (512, 1234), (1023, 99_999), (7, 250)] {
            let since = Duration::from_millis(since);
            let delay = resync_delay(resync, fraction, since);
            assert!(
                delay <= resync && delay >= resync * 9 / 10 - RESYNC_SLOT,
                "{delay:?}"
            );
            assert_eq!((since + delay).as_millis() % RESYNC_SLOT.as_millis(), 0);
        }
        // Two PortMappings due within one slot wake together.
        let a = Duration::from_millis(1_010);
        let b = Duration::from_millis(1_060);
        assert_eq!(
            a + resync_delay(resync, 0, a),
            b + resync_delay(resync, 0, b)
        );
        // A resync shorter than a slot still waits.
        assert!(resync_delay(Duration::from_millis(50), 0, a) >= Duration::from_millis(25));
    }
}
