//! The plan step of a pass: from what it gathered to the pass the executor runs. The core
//! decides every part (the planner, with the PortMapping's memo, or the gates of a stall; the
//! release of the pods that left the pool; the release finalizer; the writes in phases; the
//! report); this step puts them in order and adds what the plan tells the rest of the operator
//! (the prober's targets, the plan's metrics), whether the status waits for its window
//! ([`status_due`]) and when to look again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use portmapper_api::PortMapping;
use portmapper_core::PodRecord;
use portmapper_core::budget::{self, OverBudget};
use portmapper_core::compact_slice::CompactSlice;
use portmapper_core::planner::{self, FinalizerChange, GateChanges, Plan, PlanError, PlanInput};
use portmapper_core::report::{PlanFacts, Report, Stall, StatusDue, gate_timeouts, status_due};
use portmapper_core::writes::Phases;
use tracing::debug;

use crate::reconcile::context::Context;
use crate::reconcile::execute::{After, Mode, Pass, Probes};
use crate::reconcile::gather::{Departed, GatePool, Inputs, Stalled, Wait};
use crate::reconcile::plan_metrics::PlanMetrics;
use crate::runtime::metrics::EvaluationLabels;

/// A pass to execute, what it tells the rest of the operator once its writes ran, and how
/// soon to look again when it succeeds.
pub struct Planned {
    pub pass: Pass,
    pub after: After,
    /// Look again this soon (`None`: at the resync).
    pub again: Option<Duration>,
    /// Every input came from watch-fed caches: if it also writes nothing, the pass may be
    /// taken as settled (see `state.rs`).
    pub cache_only: bool,
}

/// The pass of `pm` from its plan's `inputs`: the planner's plan, with its prober targets and
/// metrics. A plan over a budget, or one the planner refuses, is a stall.
pub fn plan(
    ctx: &Context,
    pm: &PortMapping,
    key: &ObjectRef<PortMapping>,
    inputs: Inputs,
) -> Planned {
    if let Err(over) = within_budget(ctx, pm, &inputs) {
        return stalled(ctx, pm, key, stall_of(inputs, Stall::OverBudget(over)));
    }
    let input = plan_input(&inputs, pm, Timestamp::now());
    let plan = match plan_timed(ctx, key, &input) {
        Ok(plan) => plan,
        Err(err) => {
            let stall = Stall::PlanFailed(err.to_string());
            return stalled(ctx, pm, key, stall_of(inputs, stall));
        }
    };
    let slices = plan.slices.len();
    if let Err(over) = budget::judge_slices(&ctx.settings.budgets, slices, "the plan's slices") {
        return stalled(ctx, pm, key, stall_of(inputs, Stall::OverBudget(over)));
    }
    let pods: Vec<&PodRecord> = inputs.pods.iter().map(AsRef::as_ref).collect();
    // The prober watches exactly what this plan looked up.
    let probed = crate::reconcile::probing::targets(
        pm,
        &inputs.service,
        &inputs.pods,
        &plan.network_lookups,
        &inputs.network,
    );
    let metrics = PlanMetrics::of(key, &input, &plan);
    let facts = PlanFacts {
        plan: &plan,
        service: &inputs.service,
        pods: &pods,
        ambient: inputs.ambient,
        previous: pm.status.as_ref().map_or(&[][..], |s| &s.conditions[..]),
    };
    let report = Report::of_plan(&facts);
    // Look again soon while probe targets still lack a first result; afterwards damped flips
    // arrive as events and reasons refresh with the resync.
    let resync = ctx.settings.resync;
    let again = (probed.awaiting_first_result > 0)
        .then(|| Wait::PENDING.before(resync))
        .flatten();
    // No pod of the pool lists a gate (the index counts them): none of its pods can need the
    // finalizer, and the scan is spared.
    let gated: &[&PodRecord] = if inputs.gated { &pods } else { &[] };
    let finalizer = planner::release_finalizer(pm, Some(gated));
    let after = After {
        probes: Probes::Set(probed),
        metrics: Some(metrics),
        forget: false,
    };
    let release = Release::of(key, pm, &inputs.departed);
    let planned = Planned {
        pass: release.then(Phases::of_plan(&plan, &pods), finalizer, report),
        after,
        again: at_deadline(resync, again, plan.gate_deadline),
        // A held gate's timeout is a timer no event brings: never settled while one runs.
        cache_only: plan.network_lookups.is_empty()
            && inputs.natives.is_empty()
            && !inputs.read_server
            && plan.gate_deadline.is_none(),
    };
    status_timing(ctx, pm, key, planned)
}

/// The pass of a PortMapping that publishes nothing new: the gates of its pods not published
/// any more (and, with the Service gone, the teardown first).
pub fn stalled(
    ctx: &Context,
    pm: &PortMapping,
    key: &ObjectRef<PortMapping>,
    stalled: Stalled,
) -> Planned {
    let Stalled {
        stall,
        live,
        endpoints,
        pool,
        departed,
    } = stalled;
    let pods = pool.pods();
    let withdraws = matches!(stall, Stall::ServiceNotFound { .. });
    let (phases, changes) = if withdraws {
        // Nothing is published any more: no gated pod stays True. Everything remembered
        // goes with the slices, once they went (`After::forget`).
        let uid = pm.uid().unwrap_or_default();
        let teardown = planner::teardown(
            live.iter().map(AsRef::as_ref),
            endpoints.iter().map(AsRef::as_ref),
            &uid,
        );
        let changes = gate_changes(&pool, pm, &stall, &[]);
        (
            Phases::of_teardown(&teardown, &changes.gates, &pods),
            changes,
        )
    } else {
        // Its slices stay: gated pods they publish keep their condition.
        let changes = gate_changes(&pool, pm, &stall, &live);
        (Phases::of_gates(&changes.gates, &pods), changes)
    };
    let mut report = Report::of_stall(&stall);
    report
        .events
        .extend(gate_timeouts(&changes.timeouts, key.namespace.as_deref()));
    let finalizer = planner::release_finalizer(pm, pool.listed().as_deref());
    // Nothing new is published: nothing to probe.
    let after = After {
        probes: Probes::Drop,
        metrics: None,
        forget: withdraws,
    };
    let resync = ctx.settings.resync;
    let again = match pool {
        GatePool::Wait(wait) => wait.before(resync),
        GatePool::None | GatePool::Listed { .. } => None,
    };
    let release = Release::of(key, pm, &departed);
    let planned = Planned {
        pass: release.then(phases, finalizer, report),
        after,
        again: at_deadline(resync, again, changes.deadline),
        cache_only: false,
    };
    status_timing(ctx, pm, key, planned)
}

/// When `planned`'s status is written ([`status_due`]): a change of the counts alone is held
/// for the window its first change opened, and the pass looks again when it ends, so the held
/// status is written even if no event comes (a later pass within the window holds the newer
/// counts to the same end). The window is the batch window
/// (`--batch-window-ms`): the span over which a burst of one PortMapping shares its writes.
fn status_timing(
    ctx: &Context,
    pm: &PortMapping,
    key: &ObjectRef<PortMapping>,
    mut planned: Planned,
) -> Planned {
    let window = ctx.settings.batch_window;
    if window.is_zero() {
        return planned;
    }
    let known = ctx.states.known_status(pm);
    let next =
        planned
            .pass
            .report
            .status
            .to_status(&known, pm.metadata.generation, Timestamp::now());
    let now = tokio::time::Instant::now();
    let held_for = ctx.states.counts_held_for(key, now);
    match status_due(&known, &next, held_for, window) {
        StatusDue::Held(wait) => {
            debug!(portmapping = %key, wait_ms = wait.as_millis(), "only the counts changed; the status waits for its window's end");
            ctx.states.hold_counts(key, true, now);
            planned.pass.status_held = true;
            planned.again = Some(planned.again.map_or(wait, |again| again.min(wait)));
        }
        // Undone within the window: nothing held any more.
        StatusDue::Unchanged => ctx.states.hold_counts(key, false, now),
        // Written by this pass, which ends the hold once answered.
        StatusDue::Now => {}
    }
    planned
}

/// The stall of a PortMapping whose plan's `inputs` cannot publish, for `stall`: its slices
/// stay.
fn stall_of(inputs: Inputs, stall: Stall) -> Stalled {
    Stalled {
        stall,
        live: inputs.owned,
        endpoints: Vec::new(),
        pool: GatePool::Listed {
            pods: inputs.pods.iter().cloned().collect(),
            peers: inputs.peers,
        },
        departed: inputs.departed,
    }
}

/// The gate changes of a stall ([`planner::stalled_pod_gates`]): False on every gated pool pod
/// that `live` does not publish, naming `stall` (until its timeout); released when `pm` is
/// being deleted.
fn gate_changes(
    pool: &GatePool,
    pm: &PortMapping,
    stall: &Stall,
    live: &[Arc<CompactSlice>],
) -> GateChanges {
    let GatePool::Listed { pods, peers } = pool else {
        return GateChanges::default();
    };
    let pods: Vec<&PodRecord> = pods.iter().map(AsRef::as_ref).collect();
    let live: Vec<&CompactSlice> = live.iter().map(AsRef::as_ref).collect();
    let settings = planner::GateSettings::of(pm, peers, Timestamp::now());
    planner::stalled_pod_gates(
        &pods,
        &settings,
        &live,
        (stall.reason(), &stall.gate_message(&pm.name_any())),
    )
}

/// The release of the pods that left the pool ([`planner::released_pod_gates`]): True,
/// `Released`, unless another PortMapping of the same gate type has them in its pool now. It is
/// the first phase of the pass.
struct Release {
    phases: Phases,
    /// Every departed pod's name: the index forgets them once the release succeeded.
    names: Vec<String>,
}

impl Release {
    /// The release of `departed`, the pods that left the pool of `pm` (`key`).
    fn of(key: &ObjectRef<PortMapping>, pm: &PortMapping, departed: &Departed) -> Self {
        let pods: Vec<&PodRecord> = departed.pods.iter().map(AsRef::as_ref).collect();
        let message = format!(
            "the pod left the pool of PortMapping {}: the gate no longer waits for its publication",
            key.name
        );
        let gates = planner::released_pod_gates(
            &pods,
            pm.spec.gate_condition_type(),
            &|name| departed.kept.contains(name),
            &message,
            Timestamp::now(),
        );
        Self {
            phases: Phases::released(&gates, &pods),
            names: pods.iter().map(|p| p.name.clone()).collect(),
        }
    }

    /// The pass: the release, then `phases`, then the release finalizer's `finalizer` change.
    fn then(self, phases: Phases, finalizer: Option<FinalizerChange>, report: Report) -> Pass {
        let mut phases = self.phases.then(phases);
        phases.finalizer(finalizer);
        Pass {
            phases,
            report,
            released: self.names,
            mode: Mode::All,
            status_held: false,
        }
    }
}

/// Whether `pm`'s pass stays within the operator's budgets ([`budget`]), judged from its
/// inputs before the planner runs; the namespace's budget counts what its other PortMappings
/// declared ([`Demands`](crate::reconcile::demands::Demands)). Within them, its own figure is
/// recorded for theirs.
fn within_budget(ctx: &Context, pm: &PortMapping, inputs: &Inputs) -> Result<(), OverBudget> {
    let demand = budget::demand(&pm.spec, &inputs.service, inputs.pods.len());
    let key = crate::reconcile::probing::mapping_key(pm);
    budget::judge(&ctx.settings.budgets, &demand, ctx.demands.others(&key))?;
    ctx.demands.set(&key, demand.probe_targets);
    Ok(())
}

/// The planner's input for `pm` at `now`: the gathered `inputs`, lent.
fn plan_input<'a>(inputs: &'a Inputs, pm: &'a PortMapping, now: Timestamp) -> PlanInput<'a> {
    PlanInput {
        port_mapping: pm,
        service: &inputs.service,
        pods: &inputs.pods,
        node_zones: &inputs.zones,
        unready_nodes: &inputs.unready_nodes,
        network: &inputs.network,
        live_slices: &inputs.owned,
        take_over: &inputs.take_over,
        held_by_others: &inputs.held,
        live_endpoints: inputs.live_endpoints.as_ref(),
        owned_endpoints: &inputs.owned_endpoints,
        native_slices: &inputs.natives,
        now,
        gate_peers: &inputs.peers,
        gated: inputs.gated,
    }
}

/// Plans `input` with the PortMapping's memo: the time it took and the pods it reused or
/// evaluated go to the metrics.
fn plan_timed(
    ctx: &Context,
    key: &ObjectRef<PortMapping>,
    input: &PlanInput<'_>,
) -> Result<Plan, PlanError> {
    let mut memo = ctx.states.take_memo(key);
    let planning = Instant::now();
    let planned = planner::plan_with_memo(input, &mut memo);
    ctx.metrics
        .plan_duration
        .observe(planning.elapsed().as_secs_f64());
    let pass = memo.last_pass();
    ctx.states.keep_memo(key, memo);
    for (evaluation, n) in [("reused", pass.reused), ("evaluated", pass.evaluated)] {
        ctx.metrics
            .plan_pods
            .get_or_create(&EvaluationLabels { evaluation })
            .inc_by(u64::try_from(n).unwrap_or(u64::MAX));
    }
    planned
}

/// Look again a second past `deadline` (when the first held gate times out; the plan's clock
/// is whole timestamps, the server's transition times whole seconds), unless the resync or
/// `again` comes sooner.
fn at_deadline(
    resync: Duration,
    again: Option<Duration>,
    deadline: Option<Timestamp>,
) -> Option<Duration> {
    let Some(deadline) = deadline else {
        return again;
    };
    let wait = Duration::try_from(Timestamp::now().duration_until(deadline)).unwrap_or_default()
        + Duration::from_secs(1);
    let wait = again.map_or(wait, |a| a.min(wait));
    (wait < resync).then_some(wait)
}
