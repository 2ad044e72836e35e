//! From what a pass gathered to what it executes: the planner's plan (or the teardown, or the
//! gates of a stall), its writes in phases and its report, all computed by `portmapper-core`;
//! plus what a plan tells the rest of the operator: the prober's targets and the plan's
//! metrics.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use portmapper_api::PortMapping;
use portmapper_core::PodRecord;
use portmapper_core::planner::{self, Plan};
use portmapper_core::report::{PlanFacts, Report, Stall};
use portmapper_core::sync_stats::sync_stats;
use portmapper_core::writes::Phases;

use crate::reconcile::context::Context;
use crate::reconcile::execute::Pass;
use crate::reconcile::gather::{Gates, Gathered, Inputs, PENDING_RETRY};
use crate::runtime::error::Error;
use crate::runtime::metrics::{DecisionLabels, EvaluationLabels, ServiceLabels};

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
        } => Next::Execute(stalled(ctx, pm, key, &stall, &live, &endpoints, &gates)),
        Gathered::Plan(inputs) => Next::Execute(planned(ctx, pm, key, &inputs)),
    })
}

/// Look again soon (something we wait for, probe results or the pool's pods, is pending),
/// unless the resync comes sooner.
fn soon(ctx: &Context) -> Option<Duration> {
    (PENDING_RETRY < ctx.settings.resync).then_some(PENDING_RETRY)
}

/// A pass that publishes nothing new: the gates of its pods not published any more (and, with
/// the Service gone, the teardown first).
fn stalled(
    ctx: &Context,
    pm: &PortMapping,
    key: &ObjectRef<PortMapping>,
    stall: &Stall,
    live: &[Arc<k8s_openapi::api::discovery::v1::EndpointSlice>],
    endpoints: &[Arc<k8s_openapi::api::core::v1::Endpoints>],
    gates: &Gates,
) -> Planned {
    let pods = gates.pods();
    let phases = if let Stall::ServiceNotFound { .. } = stall {
        // Nothing is published any more: no gated pod stays True. Everything remembered goes
        // with the slices.
        ctx.forget(key);
        let uid = pm.uid().unwrap_or_default();
        let teardown = planner::teardown(
            live.iter().map(AsRef::as_ref),
            endpoints.iter().map(AsRef::as_ref),
            &uid,
        );
        Phases::of_teardown(&teardown, &gates.stalled(pm, stall, &[]), &pods)
    } else {
        // Its slices stay: gated pods they publish keep their condition.
        crate::reconcile::probing::forget(&ctx.prober, pm);
        Phases::of_gates(&gates.stalled(pm, stall, live), &pods)
    };
    Planned {
        pass: Pass {
            phases,
            report: Report::of_stall(stall),
        },
        again: matches!(gates, Gates::Wait).then(|| soon(ctx)).flatten(),
        cache_only: false,
    }
}

/// A plan: the planner (with the PortMapping's memo), its writes and report, its prober
/// targets and metrics. A plan the planner refuses is a stall.
fn planned(
    ctx: &Context,
    pm: &PortMapping,
    key: &ObjectRef<PortMapping>,
    inputs: &Inputs,
) -> Planned {
    let input = inputs.plan_input(pm, Timestamp::now());
    let mut memo = ctx.states.take_memo(key);
    let planning = Instant::now();
    let planned = planner::plan_with_memo(&input, &mut memo);
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
    let plan = match planned {
        Ok(plan) => plan,
        Err(err) => {
            let pods: Vec<Arc<PodRecord>> = inputs.pods.iter().cloned().collect();
            let gates = Gates::Pool {
                pods,
                peers: inputs.peers.clone(),
            };
            let stall = Stall::PlanFailed(err.to_string());
            return stalled(ctx, pm, key, &stall, &inputs.owned, &[], &gates);
        }
    };
    let pods: Vec<&PodRecord> = inputs.pods.iter().map(AsRef::as_ref).collect();
    // The prober watches exactly what this plan looked up.
    let probed = crate::reconcile::probing::set_targets(
        &ctx.prober,
        pm,
        &inputs.service,
        &pods,
        &plan.network_lookups,
        &inputs.network,
    );
    record(ctx, key, pm, inputs, &plan);
    let facts = PlanFacts {
        plan: &plan,
        service: &inputs.service,
        pods: &pods,
        ambient: inputs.ambient,
        previous: pm.status.as_ref().map_or(&[][..], |s| &s.conditions[..]),
    };
    let report = Report::of_plan(&facts);
    Planned {
        pass: Pass {
            phases: Phases::of_plan(&plan, &pods),
            report,
        },
        // Look again soon while probe targets still lack a first result; afterwards damped
        // flips arrive as events and reasons refresh with the resync.
        again: (probed.awaiting_first_result > 0)
            .then(|| soon(ctx))
            .flatten(),
        cache_only: plan.network_lookups.is_empty()
            && inputs.natives.is_empty()
            && !inputs.read_server,
    }
}

/// The metrics of one plan: the native-parity sync figures, name collisions, the published
/// gauges and the membership decisions.
fn record(
    ctx: &Context,
    key: &ObjectRef<PortMapping>,
    pm: &PortMapping,
    inputs: &Inputs,
    plan: &Plan,
) {
    let ns = key.namespace.as_deref().unwrap_or_default();
    let series = (ns, key.name.as_str());
    let stats = sync_stats(
        plan,
        inputs.owned.iter().map(AsRef::as_ref),
        usize::try_from(pm.spec.max_endpoints_per_slice).unwrap_or(1),
    );
    ctx.metrics.sync.planned(series, &stats);
    let service = ServiceLabels {
        namespace: ns.to_owned(),
        service: inputs.service.name_any(),
    };
    ctx.metrics.feeds(series, &service);
    if !plan.collisions.is_empty() {
        ctx.metrics.name_collisions.get_or_create(&service).inc();
    }
    ctx.metrics
        .set_published(series, service.clone(), &per_port(plan), slice_count(plan));
    for (decision, n) in [
        ("include", plan.decisions.include),
        ("exclude", plan.decisions.exclude),
        ("abstain", plan.decisions.abstain),
    ] {
        ctx.metrics
            .membership_checks
            .get_or_create(&DecisionLabels {
                namespace: service.namespace.clone(),
                service: service.service.clone(),
                decision,
            })
            .inc_by(n);
    }
}

/// Endpoints published per (port, address type).
fn per_port(plan: &Plan) -> BTreeMap<(String, String), i64> {
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
    per_port
}

fn slice_count(plan: &Plan) -> i64 {
    i64::try_from(plan.slices.len()).unwrap_or(i64::MAX)
}
