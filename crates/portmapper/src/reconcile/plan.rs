//! From what a pass gathered to what it executes: the planner's plan (or the gates of a stall,
//! [`stall`](crate::reconcile::stall)), after the release of pods that left the pool
//! ([`departed`](crate::reconcile::departed)), with the release finalizer, its writes in phases
//! and its report, all computed by `portmapper-core`; plus what a plan tells the rest of the
//! operator: the prober's targets and the plan's metrics.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;
use portmapper_api::PortMapping;
use portmapper_core::PodRecord;
use portmapper_core::budget::{self, OverBudget};
use portmapper_core::planner;
use portmapper_core::report::{PlanFacts, Report, Stall};
use portmapper_core::writes::Phases;

use crate::reconcile::again::{at_deadline, soon};
use crate::reconcile::context::Context;
use crate::reconcile::departed::Departed;
use crate::reconcile::execute::Pass;
use crate::reconcile::gather::{Gates, Gathered, Inputs};
use crate::reconcile::stall::Stalled;
use crate::runtime::error::Error;

/// A pass to execute, or a wait.
pub enum Next {
    /// An input is still loading: nothing is written; look again after this.
    Wait(Duration),
    /// Execute this.
    Execute(Planned),
}

/// A pass to execute, and how soon to look again when it succeeds.
pub struct Planned {
    pub pass: Pass,
    /// Look again this soon (`None`: at the resync).
    pub again: Option<Duration>,
    /// Every input came from watch-fed caches: if it also writes nothing, the pass may be
    /// taken as settled (see `state.rs`).
    pub cache_only: bool,
}

/// The pass of `pm`: its inputs gathered ([`gather`](crate::reconcile::gather)), then planned.
pub async fn plan(
    ctx: &Context,
    pm: &PortMapping,
    key: &ObjectRef<PortMapping>,
) -> Result<Next, Error> {
    let gathered = crate::reconcile::gather::gather(ctx, pm, key).await?;
    Ok(match gathered {
        Gathered::Wait(wait) => Next::Wait(wait),
        Gathered::Stalled {
            stall,
            live,
            endpoints,
            gates,
        } => {
            let departed = Departed::of(ctx, key, pm.spec.gate_condition_type());
            let stalled = Stalled {
                stall: &stall,
                live: &live,
                endpoints: &endpoints,
                gates: &gates,
            };
            let (pass, again) = stalled.planned(ctx, pm, key, departed);
            Next::Execute(Planned {
                pass,
                again,
                cache_only: false,
            })
        }
        Gathered::Plan(inputs) => {
            let departed = Departed::of(ctx, key, pm.spec.gate_condition_type());
            Next::Execute(planned(ctx, pm, key, &inputs, departed))
        }
    })
}

/// A plan: the planner (with the PortMapping's memo), its writes and report, its prober
/// targets and metrics. A plan the planner refuses is a stall.
fn planned(
    ctx: &Context,
    pm: &PortMapping,
    key: &ObjectRef<PortMapping>,
    inputs: &Inputs,
    departed: Departed,
) -> Planned {
    if let Err(over) = within_budget(ctx, pm, inputs) {
        return stalled(ctx, pm, key, inputs, departed, Stall::OverBudget(over));
    }
    let input = inputs.plan_input(pm, Timestamp::now());
    let plan = match crate::reconcile::plan_metrics::plan_timed(ctx, key, &input) {
        Ok(plan) => plan,
        Err(err) => {
            let stall = Stall::PlanFailed(err.to_string());
            return stalled(ctx, pm, key, inputs, departed, stall);
        }
    };
    let slices = plan.slices.len();
    if let Err(over) = budget::judge_slices(&ctx.settings.budgets, slices, "the plan's slices") {
        return stalled(ctx, pm, key, inputs, departed, Stall::OverBudget(over));
    }
    let pods: Vec<&PodRecord> = inputs.pods.iter().map(AsRef::as_ref).collect();
    // The prober watches exactly what this plan looked up.
    let probed = crate::reconcile::probing::set_targets(
        &ctx.prober,
        &ctx.probe_aliases,
        pm,
        &inputs.service,
        &inputs.pods,
        &plan.network_lookups,
        &inputs.network,
    );
    crate::reconcile::plan_metrics::record(
        ctx,
        key,
        pm.spec.max_endpoints_per_slice,
        inputs,
        &plan,
    );
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
        .then(|| soon(resync))
        .flatten();
    // No pod of the pool lists a gate (the index counts them): none of its pods can need the
    // finalizer, and the scan is spared.
    let gated: &[&PodRecord] = if inputs.gated { &pods } else { &[] };
    let finalizer = planner::release_finalizer(pm, Some(gated));
    Planned {
        pass: departed.pass(Phases::of_plan(&plan, &pods), finalizer, report),
        again: at_deadline(resync, again, plan.gate_deadline),
        // A held gate's timeout is a timer no event brings: never settled while one runs.
        cache_only: plan.network_lookups.is_empty()
            && inputs.natives.is_empty()
            && !inputs.read_server
            && plan.gate_deadline.is_none(),
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

/// The pass of a PortMapping the planner does not publish for (`stall`): its slices stay.
fn stalled(
    ctx: &Context,
    pm: &PortMapping,
    key: &ObjectRef<PortMapping>,
    inputs: &Inputs,
    departed: Departed,
    stall: Stall,
) -> Planned {
    let pods: Vec<Arc<PodRecord>> = inputs.pods.iter().cloned().collect();
    let gates = Gates::Pool {
        pods,
        peers: inputs.peers.clone(),
    };
    let stalled = Stalled {
        stall: &stall,
        live: &inputs.owned,
        endpoints: &[],
        gates: &gates,
    };
    let (pass, again) = stalled.planned(ctx, pm, key, departed);
    Planned {
        pass,
        again,
        cache_only: false,
    }
}
