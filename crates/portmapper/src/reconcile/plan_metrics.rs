//! What a plan tells the metrics: the native-parity sync figures, name collisions, the
//! published gauges and the membership decisions.

use std::collections::BTreeMap;

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use portmapper_api::PortMapping;
use portmapper_core::planner::{Plan, PlanInput};
use portmapper_core::sync_stats::{SyncStats, sync_stats};

use crate::reconcile::context::Context;
use crate::runtime::metrics::{DecisionLabels, ServiceLabels};

/// What one plan tells the metrics: the native-parity sync figures, name collisions, the
/// published gauges and the membership decisions. Computed with the plan, recorded once its pass
/// ran ([`PlanMetrics::record`]).
#[derive(Debug)]
pub struct PlanMetrics {
    /// The PortMapping's namespace and name: its series.
    series: (String, String),
    stats: SyncStats,
    service: ServiceLabels,
    collided: bool,
    per_port: BTreeMap<(String, String), i64>,
    slices: i64,
    decisions: [(&'static str, u64); 3],
}

impl PlanMetrics {
    /// The figures of `plan`, made from `input`.
    pub fn of(key: &ObjectRef<PortMapping>, input: &PlanInput<'_>, plan: &Plan) -> Self {
        let ns = key.namespace.clone().unwrap_or_default();
        let max_endpoints_per_slice = input.port_mapping.spec.max_endpoints_per_slice;
        let stats = sync_stats(
            plan,
            input.live_slices.iter().map(AsRef::as_ref),
            usize::try_from(max_endpoints_per_slice).unwrap_or(1),
        );
        Self {
            service: ServiceLabels {
                namespace: ns.clone(),
                service: input.service.name_any(),
            },
            series: (ns, key.name.clone()),
            stats,
            collided: !plan.collisions.is_empty(),
            per_port: per_port(plan),
            slices: slice_count(plan),
            decisions: [
                ("include", plan.decisions.include),
                ("exclude", plan.decisions.exclude),
                ("abstain", plan.decisions.abstain),
            ],
        }
    }

    /// Records them.
    pub fn record(&self, ctx: &Context) {
        let series = (self.series.0.as_str(), self.series.1.as_str());
        let service = &self.service;
        ctx.metrics.sync.planned(series, &self.stats);
        ctx.metrics.feeds(series, service);
        if self.collided {
            ctx.metrics.name_collisions.get_or_create(service).inc();
        }
        ctx.metrics
            .set_published(series, service.clone(), &self.per_port, self.slices);
        for (decision, n) in self.decisions {
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
}

/// Endpoints published per (port, address type).
fn per_port(plan: &Plan) -> BTreeMap<(String, String), i64> {
    let mut per_port: BTreeMap<(String, String), i64> = BTreeMap::new();
    for planned in &plan.slices {
        // Every port a slice lists publishes its endpoints (a port-set slice lists several);
        // a portless slice counts under "".
        let ports = portmapper_core::consumers::port_keys(&planned.slice);
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use portmapper_core::WriteAction;
    use portmapper_core::planner::{Plan, PlannedSlice};
    use serde_json::json;

    /// The `port` label is the consumers' port key: a named port by its name, an unnamed one
    /// (the one port of a Service, `name: ""`) by its number, a portless slice `""`.
    #[test]
    fn published_endpoints_are_labelled_by_the_port_key() {
        let slice = |name: &str, ports: serde_json::Value, endpoints: usize| PlannedSlice {
            slice: Arc::new(
                serde_json::from_value::<EndpointSlice>(json!({
                    "metadata": {"name": name},
                    "addressType": "IPv4",
                    "ports": ports,
                    "endpoints": (0..endpoints)
                        .map(|i| json!({"addresses": [format!("10.0.0.{i}")]}))
                        .collect::<Vec<_>>(),
                }))
                .unwrap()
                .into(),
            ),
            action: WriteAction::Unchanged,
            withdraws: false,
        };
        let plan = Plan {
            slices: vec![
                slice("a", json!([{"name": "", "port": 8080}]), 2),
                slice(
                    "b",
                    json!([{"name": "http", "port": 80}, {"name": "https", "port": 443}]),
                    1,
                ),
                slice("c", json!([]), 3),
            ],
            ..Plan::default()
        };
        let got: Vec<((String, String), i64)> = super::per_port(&plan).into_iter().collect();
        let key = |port: &str| (port.to_owned(), "IPv4".to_owned());
        assert_eq!(
            got,
            [
                (key(""), 3),
                (key("8080"), 2),
                (key("http"), 1),
                (key("https"), 1)
            ]
        );
    }
}
