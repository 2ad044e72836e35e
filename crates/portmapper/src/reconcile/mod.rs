//! One reconcile: one [`pass`] that gathers the inputs from the caches and the index
//! ([`gather`]), plans them with `portmapper-core` into writes and a report ([`plan`]), and
//! hands both to the one executor ([`execute`]), over the PortMapping's one state ([`state`]).
//! Reads come from reflector stores and the index; the API server is read only for slice names
//! in doubt and an Endpoints object our cache does not hold.

pub mod backoff;
pub mod batch_window;
pub mod context;
pub mod demands;
mod execute;
#[cfg(test)]
pub(crate) mod fake_api;
mod gather;
pub mod namespace_share;
mod plan;
mod plan_metrics;
pub mod probe_aliases;
pub mod probing;
pub mod state;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use portmapper_api::PortMapping;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::runtime::apply::Writer;
use crate::runtime::error::Error;
use crate::runtime::metrics::{CategoryLabels, Metrics, ResultLabels};
use crate::runtime::sync_metrics::SyncResult;
use context::Context;
use gather::{Gathered, Wait};
use state::Fingerprint;

/// Entry point for the Controller.
pub async fn reconcile(pm: Arc<PortMapping>, ctx: Arc<Context>) -> Result<Action, Error> {
    let pm_ref = ObjectRef::from_obj(pm.as_ref());
    // Before any input is read: an event during this pass makes the next one plan. A quiet
    // pass is decided before the span and the metrics of a reconcile: at 1,000 PortMappings
    // the span alone cost more than the rest of a quiet pass.
    let fingerprint = Fingerprint {
        resource_version: pm.metadata.resource_version.clone(),
        queued: ctx.trigger.queued(&pm_ref),
    };
    if ctx.leadership.is_leader() && ctx.states.is_quiet(&pm_ref, &fingerprint) {
        debug!(portmapping = %pm_ref, "nothing it reads changed since a pass that changed nothing; skipping");
        ctx.metrics
            .reconciles
            .get_or_create(&ResultLabels { result: "quiet" })
            .inc();
        return Ok(Action::requeue(resync_after(&ctx, &pm_ref)));
    }
    let span = info_span!(
        "reconcile",
        namespace = pm.namespace().unwrap_or_default(),
        name = %pm.name_any(),
        generation = pm.metadata.generation.unwrap_or_default(),
    );
    if let Some(wait) = held_back(&ctx, &pm_ref, pm.metadata.generation) {
        return Ok(Action::requeue(wait));
    }
    let Some(_pass) = ctx.passes.enter(&pm_ref, &ctx.trigger) else {
        debug!(portmapping = %pm_ref, "its namespace holds its share of reconcile workers; queued again when one of its passes ends");
        return Ok(Action::await_change());
    };
    let started = Instant::now();
    let (result, wrote) = reconcile_inner(&pm, &ctx, fingerprint)
        .instrument(span)
        .await;
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    record(&ctx.metrics, &result);
    after_pass(&ctx, &pm_ref, wrote, result.is_ok());
    result
}

/// The pass's result, and what it sent.
async fn reconcile_inner(
    pm: &PortMapping,
    ctx: &Context,
    fingerprint: Fingerprint,
) -> (Result<Action, Error>, Sent) {
    let Some(ns) = pm.namespace() else {
        return (Err(Error::MissingMetadata("namespace")), Sent::Nothing);
    };
    // A PortMapping held by a finalizer or a foreground deletion is still reconciled, like the
    // native controller's terminating Services: its slices stay accurate until they are
    // collected, and the planner creates nothing new that would race the garbage collector.
    let key = ObjectRef::from_obj(pm);
    if !ctx.leadership.is_leader() {
        // Followers keep caches warm and write nothing; a new leader re-reconciles everything
        // and seeds its probes from the live slices.
        ctx.forget(&key);
        return (Ok(Action::await_change()), Sent::Nothing);
    }
    let writer = Writer::new(&ctx.client, &ns, &ctx.leadership, &ctx.metrics);
    let result = pass(ctx, &writer, pm, &key).await;
    ctx.metrics.sync.ended(match &result {
        Ok(Passed::Ran { .. }) => SyncResult::Success,
        Ok(Passed::Wait(_)) => SyncResult::Stale,
        Err(_) => SyncResult::Error,
    });
    let wrote = Sent::of(&writer);
    let result = result
        .map(|passed| Action::requeue(requeue_after(ctx, &writer, &key, passed, fingerprint)));
    (result, wrote)
}

/// One pass as the leader: gather, plan, execute.
async fn pass(
    ctx: &Context,
    writer: &Writer<'_>,
    pm: &PortMapping,
    key: &ObjectRef<PortMapping>,
) -> Result<Passed, Error> {
    let mut planned = match gather::gather(ctx, pm, key).await? {
        Gathered::Wait(wait) => return Ok(Passed::Wait(wait)),
        Gathered::Stalled(stalled) => plan::stalled(ctx, pm, key, *stalled),
        Gathered::Plan(inputs) => plan::plan(ctx, pm, key, *inputs),
    };
    // Backing off: the pass probes the server with one write at a time.
    if ctx.states.backoff.failing(key) {
        planned.pass.mode = execute::Mode::Probe;
    }
    let executed = execute::execute(ctx, writer, pm, &planned.pass).await;
    planned.after.apply(ctx, pm, executed.failed.is_none());
    if let Some(err) = executed.failed {
        return Err(err);
    }
    Ok(Passed::Ran {
        // Our write met someone else's change: plan again at once.
        again: if executed.wake {
            Some(Duration::ZERO)
        } else {
            planned.again
        },
        cache_only: planned.cache_only,
    })
}

/// What a pass came to.
enum Passed {
    /// An input is still loading: nothing was written.
    Wait(Wait),
    /// It executed.
    Ran {
        /// Look again this soon (`None`: at the resync).
        again: Option<Duration>,
        /// It read only caches (see [`plan::Planned::cache_only`]).
        cache_only: bool,
    },
}

/// How soon to look again after a pass that came to `passed`; a pass that read only caches and
/// wrote nothing settles the PortMapping (see `state.rs`).
fn requeue_after(
    ctx: &Context,
    writer: &Writer<'_>,
    key: &ObjectRef<PortMapping>,
    passed: Passed,
    fingerprint: Fingerprint,
) -> Duration {
    match passed {
        Passed::Wait(Wait(wait)) => wait,
        Passed::Ran {
            again: Some(again), ..
        } => again,
        Passed::Ran {
            again: None,
            cache_only,
        } => {
            if cache_only && writer.wrote_nothing() {
                ctx.states.settled(key, fingerprint);
            }
            resync_after(ctx, key)
        }
    }
}

/// How long a pass of `pm_ref` waits before it may write, if it must: inside the window a
/// failure opened (watch events, a pod flip or our own status write, trigger reconciles at once
/// whatever the error policy returned, so the window is enforced here), or as part of a burst
/// that follows its last write closely (it waits for the batch window's end, and whatever else
/// arrives meanwhile is planned with it).
fn held_back(
    ctx: &Context,
    pm_ref: &ObjectRef<PortMapping>,
    generation: Option<i64>,
) -> Option<Duration> {
    let now = tokio::time::Instant::now();
    let (wait, result) = if let Some(wait) = ctx.states.backoff.remaining(pm_ref, generation, now) {
        debug!(portmapping = %pm_ref, wait_ms = wait.as_millis(), "backing off after a failure; writing nothing");
        (wait, "backoff")
    } else {
        let wait = ctx.states.batches.remaining(pm_ref, now)?;
        debug!(portmapping = %pm_ref, wait_ms = wait.as_millis(), "batching with the changes that follow; writing nothing yet");
        (wait, "batched")
    };
    ctx.metrics
        .reconciles
        .get_or_create(&ResultLabels { result })
        .inc();
    Some(wait)
}

/// The bookkeeping after a pass of `pm_ref` that sent `wrote` and `succeeded` or not. Only
/// writes that went through show the server takes them again; a pass with nothing to write (the
/// churn came back to what is published), or only its status, keeps the ladder where it is.
fn after_pass(ctx: &Context, pm_ref: &ObjectRef<PortMapping>, wrote: Sent, succeeded: bool) {
    let now = tokio::time::Instant::now();
    if wrote == Sent::Objects {
        ctx.states.batches.wrote(pm_ref, now);
    }
    match wrote {
        Sent::Objects if succeeded => {
            if let Some(failures) = ctx.states.backoff.succeeded(pm_ref) {
                info!(portmapping = %pm_ref, failures, "reconciled again after failures");
            }
        }
        Sent::StatusOnly if succeeded => ctx.states.backoff.held(pm_ref, now),
        _ => {}
    }
}

/// What a pass sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    Nothing,
    /// Only the PortMapping's status.
    StatusOnly,
    /// Objects (slices, pod gates, Endpoints, finalizers), and maybe the status.
    Objects,
}

impl Sent {
    fn of(writer: &Writer<'_>) -> Self {
        if writer.wrote_objects() {
            Self::Objects
        } else if writer.wrote_nothing() {
            Self::Nothing
        } else {
            Self::StatusOnly
        }
    }
}

/// Retry failed reconciles after the PortMapping's backoff (`backoff.rs`: exponential per
/// object, by error class); writes already made are kept and the next pass resumes. Warns once
/// per change of error: repeats of the same failure are logged at debug level.
pub fn error_policy(pm: Arc<PortMapping>, err: &Error, ctx: Arc<Context>) -> Action {
    let pm_ref = ObjectRef::from_obj(pm.as_ref());
    let Some(failure) = ctx.states.backoff.failed(
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

/// Records the outcome of one reconcile in the metrics.
fn record(metrics: &Metrics, result: &Result<Action, Error>) {
    let result_label = if result.is_ok() { "success" } else { "error" };
    metrics
        .reconciles
        .get_or_create(&ResultLabels {
            result: result_label,
        })
        .inc();
    if let Err(err) = result {
        metrics
            .reconcile_errors
            .get_or_create(&CategoryLabels {
                category: err.category(),
            })
            .inc();
    }
}
