//! From what a pass gathered to what it executes: the planner's plan (or the teardown, or the
//! gates of a stall), the release of pods that left the pool, the release finalizer, its writes
//! in phases and its report, all computed by `portmapper-core`; plus what a plan tells the rest
//! of the operator: the prober's targets, the plan's metrics and when a gate times out.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use portmapper_api::PortMapping;
use portmapper_core::PodRecord;
use portmapper_core::planner::{self, Plan};
use portmapper_core::report::{PlanFacts, Report, Stall, gate_timeouts};
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
        } => {
            let departed = Departed::of(ctx, pm, key);
            let stalled = Stalled {
                stall: &stall,
                live: &live,
                endpoints: &endpoints,
                gates: &gates,
            };
            Next::Execute(stalled.planned(ctx, pm, key, departed))
        }
        Gathered::Plan(inputs) => {
            let departed = Departed::of(ctx, pm, key);
            Next::Execute(planned(ctx, pm, key, &inputs, departed))
        }
    })
}

/// The pods that left the pool still waiting on its gate (the index notes them), and their
/// release ([`planner::released_pod_gates`]): True, `Released`, unless another PortMapping of
/// the same gate type has them in its pool now.
struct Departed {
    /// The release phase (first of the pass).
    phases: Phases,
    /// Every departed pod's name: the index forgets them once the release succeeded.
    names: Vec<String>,
}

impl Departed {
    fn of(ctx: &Context, pm: &PortMapping, key: &ObjectRef<PortMapping>) -> Self {
        let (departed, kept) = ctx.index.lock().departed(key);
        let pods: Vec<&PodRecord> = departed.iter().map(AsRef::as_ref).collect();
        let message = format!(
            "the pod left the pool of PortMapping {}: the gate no longer waits for its publication",
            key.name
        );
        let gates = planner::released_pod_gates(
            &pods,
            pm.spec.gate_condition_type(),
            &|name| kept.contains(name),
            &message,
            Timestamp::now(),
        );
        Self {
            phases: Phases::released(&gates, &pods),
            names: pods.iter().map(|p| p.name.clone()).collect(),
        }
    }

    /// The pass: the release, then `phases`, then the release finalizer's change for `pool`.
    fn pass(
        self,
        pm: &PortMapping,
        phases: Phases,
        pool: Option<&[&PodRecord]>,
        report: Report,
    ) -> Pass {
        let mut phases = self.phases.then(phases);
        phases.finalizer(planner::release_finalizer(pm, pool));
        Pass {
            phases,
            report,
            released: self.names,
            mode: super::execute::Mode::All,
        }
    }
}

/// Look again a second past `deadline` (when the first held gate times out; the plan's clock
/// is whole timestamps, the server's transition times whole seconds), unless the resync or
/// `again` comes sooner.
fn at_deadline(
    ctx: &Context,
    again: Option<Duration>,
    deadline: Option<Timestamp>,
) -> Option<Duration> {
    let Some(deadline) = deadline else {
        return again;
    };
    let wait = Duration::try_from(Timestamp::now().duration_until(deadline)).unwrap_or_default()
        + Duration::from_secs(1);
    let wait = again.map_or(wait, |a| a.min(wait));
    (wait < ctx.settings.resync).then_some(wait)
}

/// Look again soon (something we wait for, probe results or the pool's pods, is pending),
/// unless the resync comes sooner.
fn soon(ctx: &Context) -> Option<Duration> {
    (PENDING_RETRY < ctx.settings.resync).then_some(PENDING_RETRY)
}

/// A pass that publishes nothing new, and what it has.
struct Stalled<'a> {
    stall: &'a Stall,
    live: &'a [Arc<k8s_openapi::api::discovery::v1::EndpointSlice>],
    endpoints: &'a [Arc<k8s_openapi::api::core::v1::Endpoints>],
    gates: &'a Gates,
}

impl Stalled<'_> {
    /// The gates of its pods not published any more (and, with the Service gone, the teardown
    /// first).
    fn planned(
        &self,
        ctx: &Context,
        pm: &PortMapping,
        key: &ObjectRef<PortMapping>,
        departed: Departed,
    ) -> Planned {
        let (stall, live, gates) = (self.stall, self.live, self.gates);
        let pods = gates.pods();
        let (phases, changes) = if let Stall::ServiceNotFound { .. } = stall {
            // Nothing is published any more: no gated pod stays True. Everything remembered
            // goes with the slices.
            ctx.forget(key);
            let uid = pm.uid().unwrap_or_default();
            let teardown = planner::teardown(
                live.iter().map(AsRef::as_ref),
                self.endpoints.iter().map(AsRef::as_ref),
                &uid,
            );
            let changes = gates.stalled(pm, stall, &[]);
            (
                Phases::of_teardown(&teardown, &changes.gates, &pods),
                changes,
            )
        } else {
            // Its slices stay: gated pods they publish keep their condition.
            crate::reconcile::probing::forget(&ctx.prober, pm);
            let changes = gates.stalled(pm, stall, live);
            (Phases::of_gates(&changes.gates, &pods), changes)
        };
        let mut report = Report::of_stall(stall);
        report
            .events
            .extend(gate_timeouts(&changes.timeouts, key.namespace.as_deref()));
        let pool = gates.pool();
        let again = matches!(gates, Gates::Wait).then(|| soon(ctx)).flatten();
        Planned {
            pass: departed.pass(pm, phases, pool.as_deref(), report),
            again: at_deadline(ctx, again, changes.deadline),
            cache_only: false,
        }
    }
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
            let stalled = Stalled {
                stall: &stall,
                live: &inputs.owned,
                endpoints: &[],
                gates: &gates,
            };
            return stalled.planned(ctx, pm, key, departed);
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
    // Look again soon while probe targets still lack a first result; afterwards damped flips
    // arrive as events and reasons refresh with the resync.
    let again = (probed.awaiting_first_result > 0)
        .then(|| soon(ctx))
        .flatten();
    Planned {
        pass: departed.pass(pm, Phases::of_plan(&plan, &pods), Some(&pods), report),
        again: at_deadline(ctx, again, plan.gate_deadline),
        // A held gate's timeout is a timer no event brings: never settled while one runs.
        cache_only: plan.network_lookups.is_empty()
            && inputs.natives.is_empty()
            && !inputs.read_server
            && plan.gate_deadline.is_none(),
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
