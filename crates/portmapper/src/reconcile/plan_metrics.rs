//! The planner's run, timed and counted, and what a plan tells the metrics: the native-parity
//! sync figures, name collisions, the published gauges and the membership decisions.

use std::collections::BTreeMap;

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use portmapper_api::PortMapping;
use std::time::Instant;

use portmapper_core::planner::{self, Plan, PlanError, PlanInput};
use portmapper_core::sync_stats::sync_stats;

use crate::reconcile::context::Context;
use crate::reconcile::gather::Inputs;
use crate::runtime::metrics::{DecisionLabels, EvaluationLabels, ServiceLabels};

/// Plans `input` with the PortMapping's memo: the time it took and the pods it reused or
/// evaluated go to the metrics.
pub fn plan_timed(
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

/// The metrics of one plan: the native-parity sync figures, name collisions, the published
/// gauges and the membership decisions.
pub fn record(
    ctx: &Context,
    key: &ObjectRef<PortMapping>,
    max_endpoints_per_slice: i32,
    inputs: &Inputs,
    plan: &Plan,
) {
    let ns = key.namespace.as_deref().unwrap_or_default();
    let series = (ns, key.name.as_str());
    let stats = sync_stats(
        plan,
        inputs.owned.iter().map(AsRef::as_ref),
        usize::try_from(max_endpoints_per_slice).unwrap_or(1),
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
