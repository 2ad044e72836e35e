//! The native EndpointSlice controller's metrics under our prefix, with the same meaning
//! (`endpoint_slice_controller_*` in `k8s.io/endpointslice/metrics`), so its dashboards and
//! alerts carry over: `portmapper_endpoints_added_per_sync`, `…_removed_per_sync`,
//! `portmapper_endpointslices_changed_per_sync`, `portmapper_endpoints_desired`,
//! `portmapper_num_endpoint_slices` against `portmapper_desired_endpoint_slices` (packing
//! efficiency) and `portmapper_syncs{result=success|stale|error}`.

use std::collections::HashMap;
use std::sync::Mutex;

use portmapper_core::sync_stats::SyncStats;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The label of `portmapper_syncs_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SyncLabels {
    result: &'static str,
}

/// How a sync ended, as the native controller labels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncResult {
    /// The plan ran and every write succeeded.
    Success,
    /// The caches were not ready to plan from (a first list, our own writes not seen yet).
    Stale,
    /// A read or a write failed.
    Error,
}

impl SyncResult {
    fn label(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Stale => "stale",
            Self::Error => "error",
        }
    }
}

/// The per-sync histograms, the totals over every PortMapping, and what each contributes.
#[derive(Debug)]
pub struct SyncMetrics {
    endpoints_added: Histogram,
    endpoints_removed: Histogram,
    slices_changed: Histogram,
    endpoints_desired: Gauge,
    slices: Gauge,
    slices_desired: Gauge,
    syncs: Family<SyncLabels, Counter>,
    /// (endpoints desired, slices, slices desired) of each PortMapping (namespace, name).
    totals: Mutex<HashMap<(String, String), [i64; 3]>>,
}

impl SyncMetrics {
    /// Registers the metrics in `registry` (prefix `portmapper`).
    pub fn new(registry: &mut Registry) -> Self {
        // The native buckets: 2, 4, … 32768.
        let per_sync = || Histogram::new(exponential_buckets(2.0, 2.0, 15));
        let metrics = Self {
            endpoints_added: per_sync(),
            endpoints_removed: per_sync(),
            slices_changed: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            endpoints_desired: Gauge::default(),
            slices: Gauge::default(),
            slices_desired: Gauge::default(),
            syncs: Family::default(),
            totals: Mutex::default(),
        };
        registry.register(
            "endpoints_added_per_sync",
            "Endpoints added on each sync of a PortMapping",
            metrics.endpoints_added.clone(),
        );
        registry.register(
            "endpoints_removed_per_sync",
            "Endpoints removed on each sync of a PortMapping",
            metrics.endpoints_removed.clone(),
        );
        registry.register(
            "endpointslices_changed_per_sync",
            "EndpointSlices created, updated or deleted on each sync of a PortMapping",
            metrics.slices_changed.clone(),
        );
        registry.register(
            "endpoints_desired",
            "Endpoints desired, over every PortMapping",
            metrics.endpoints_desired.clone(),
        );
        registry.register(
            "num_endpoint_slices",
            "EndpointSlices desired, over every PortMapping",
            metrics.slices.clone(),
        );
        registry.register(
            "desired_endpoint_slices",
            "EndpointSlices there would be with perfect endpoint packing, over every PortMapping",
            metrics.slices_desired.clone(),
        );
        registry.register(
            "syncs",
            "Syncs of PortMappings by result (success, stale, error)",
            metrics.syncs.clone(),
        );
        metrics
    }

    /// Records one planned sync of `portmapping`: its changes, and its share of the totals.
    pub fn planned(&self, portmapping: (&str, &str), stats: &SyncStats) {
        let count = |n: usize| u32::try_from(n).map_or(f64::MAX, f64::from);
        self.endpoints_added.observe(count(stats.endpoints_added));
        self.endpoints_removed
            .observe(count(stats.endpoints_removed));
        self.slices_changed.observe(count(stats.slices_changed));
        let share = [stats.endpoints_desired, stats.slices, stats.slices_desired]
            .map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let key = (portmapping.0.to_owned(), portmapping.1.to_owned());
        let mut totals = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        let before = totals.insert(key, share).unwrap_or_default();
        self.add(share, before);
    }

    /// Counts how one sync ended.
    pub fn ended(&self, result: SyncResult) {
        self.syncs
            .get_or_create(&SyncLabels {
                result: result.label(),
            })
            .inc();
    }

    /// Takes a PortMapping's share out of the totals (it withdrew or was deleted).
    pub fn forget(&self, portmapping: (&str, &str)) {
        let key = (portmapping.0.to_owned(), portmapping.1.to_owned());
        let mut totals = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(before) = totals.remove(&key) {
            self.add([0; 3], before);
        }
    }

    fn add(&self, now: [i64; 3], before: [i64; 3]) {
        self.endpoints_desired.inc_by(now[0] - before[0]);
        self.slices.inc_by(now[1] - before[1]);
        self.slices_desired.inc_by(now[2] - before[2]);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Every metric a panel of the chart's Grafana dashboard queries is one the operator
    /// registers: no panel names a metric we do not export.
    #[test]
    fn the_dashboard_queries_only_metrics_the_operator_exports() {
        use crate::metrics::{CategoryLabels, WatchRestartLabels};
        // A labelled family shows in /metrics once it has a sample: give each one.
        let metrics = crate::metrics::Metrics::new();
        metrics.write("apply", "endpointslices");
        metrics.sync.ended(SyncResult::Success);
        let category = CategoryLabels { category: "api" };
        metrics.reconcile_errors.get_or_create(&category).inc();
        let restart = WatchRestartLabels {
            watch: "pods",
            reason: "error",
        };
        metrics.watch_restarts.get_or_create(&restart).inc();
        let text = metrics.encode().unwrap();
        let families: BTreeSet<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        let dashboard: serde_json::Value = serde_json::from_str(include_str!(
            "../../../charts/portmapper/dashboards/portmapper.json"
        ))
        .unwrap();
        let mut queried = BTreeSet::new();
        for panel in dashboard["panels"].as_array().unwrap() {
            for target in panel["targets"].as_array().unwrap() {
                let expr = target["expr"].as_str().unwrap();
                let names = expr
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .filter(|t| t.starts_with("portmapper_"));
                for name in names {
                    let family = ["_total", "_bucket", "_sum", "_count"]
                        .iter()
                        .find_map(|s| name.strip_suffix(s))
                        .unwrap_or(name);
                    queried.insert(family.to_owned());
                }
            }
        }
        assert!(queried.len() >= 10, "{queried:?}");
        let missing: Vec<&String> = queried
            .iter()
            .filter(|f| !families.contains(f.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "the dashboard queries {missing:?}, which /metrics does not have: {families:?}"
        );
    }

    fn stats(desired: usize, slices: usize, packed: usize) -> SyncStats {
        SyncStats {
            endpoints_added: 3,
            endpoints_desired: desired,
            slices,
            slices_desired: packed,
            ..SyncStats::default()
        }
    }

    #[test]
    fn totals_sum_every_portmapping_and_forget_takes_one_out() {
        let mut registry = Registry::with_prefix("portmapper");
        let metrics = SyncMetrics::new(&mut registry);
        metrics.planned(("ns", "a"), &stats(10, 3, 1));
        metrics.planned(("ns", "b"), &stats(5, 1, 1));
        metrics.planned(("ns", "a"), &stats(12, 2, 1));
        assert_eq!(metrics.endpoints_desired.get(), 17);
        assert_eq!((metrics.slices.get(), metrics.slices_desired.get()), (3, 2));
        metrics.forget(("ns", "a"));
        metrics.forget(("ns", "a"));
        assert_eq!(
            (
                metrics.endpoints_desired.get(),
                metrics.slices.get(),
                metrics.slices_desired.get()
            ),
            (5, 1, 1)
        );
        metrics.ended(SyncResult::Stale);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("portmapper_syncs_total{result=\"stale\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("portmapper_endpoints_added_per_sync_count 3"),
            "{text}"
        );
    }
}
