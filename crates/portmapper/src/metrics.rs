//! Prometheus metrics (OpenMetrics text on `/metrics`).
//!
//! Labels are bounded: per-object series carry only namespace, service and port (as many as the
//! PortMappings we manage, removed when a PortMapping goes away); error series carry a fixed
//! category, never an error string.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

/// Labels of per-Service series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServiceLabels {
    pub namespace: String,
    pub service: String,
}

/// Labels of per-port series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PortLabels {
    pub namespace: String,
    pub service: String,
    pub port: String,
    pub address_type: String,
}

/// Labels of membership decisions.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    pub namespace: String,
    pub service: String,
    pub decision: &'static str,
}

/// Labels with one fixed-vocabulary value.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

/// Labels of error counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CategoryLabels {
    pub category: &'static str,
}

/// Labels of API write counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    pub verb: &'static str,
    pub resource: &'static str,
}

/// Labels of native-cleanup deletions.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub resource: &'static str,
}

/// Every metric the operator exports.
pub struct Metrics {
    pub registry: Registry,
    pub endpoints_published: Family<PortLabels, Gauge>,
    pub endpointslices_managed: Family<ServiceLabels, Gauge>,
    pub membership_checks: Family<DecisionLabels, Counter>,
    pub native_cleanup_deletions: Family<ResourceLabels, Counter>,
    pub name_collisions: Family<ServiceLabels, Counter>,
    pub reconciles: Family<ResultLabels, Counter>,
    pub reconcile_errors: Family<CategoryLabels, Counter>,
    pub reconcile_duration: Histogram,
    pub api_writes: Family<WriteLabels, Counter>,
    pub leader: Gauge,
    /// Network-check probes (`portmapper_probe_*`), fed by the prober.
    pub probe: portmapper_probe::PrometheusProbeMetrics,
}

impl Metrics {
    /// Registers every metric under the `portmapper_` prefix.
    pub fn new() -> Arc<Self> {
        let mut registry = Registry::with_prefix("portmapper");
        let endpoints_published = Family::<PortLabels, Gauge>::default();
        let endpointslices_managed = Family::<ServiceLabels, Gauge>::default();
        let membership_checks = Family::<DecisionLabels, Counter>::default();
        let native_cleanup_deletions = Family::<ResourceLabels, Counter>::default();
        let name_collisions = Family::<ServiceLabels, Counter>::default();
        let reconciles = Family::<ResultLabels, Counter>::default();
        let reconcile_errors = Family::<CategoryLabels, Counter>::default();
        let reconcile_duration = Histogram::new(exponential_buckets(0.0005, 2.0, 15));
        let api_writes = Family::<WriteLabels, Counter>::default();
        let leader = Gauge::default();
        let probe = portmapper_probe::PrometheusProbeMetrics::default();
        probe.register(&mut registry);

        registry.register(
            "endpoints_published",
            "Endpoints published per Service port and address type (ready or not)",
            endpoints_published.clone(),
        );
        registry.register(
            "endpointslices_managed",
            "EndpointSlices published per Service",
            endpointslices_managed.clone(),
        );
        registry.register(
            "membership_checks",
            "Membership decisions per Service by outcome (include, exclude, abstain)",
            membership_checks.clone(),
        );
        registry.register(
            "native_cleanup_deletions",
            "Native leftovers deleted after a selector migration, by resource",
            native_cleanup_deletions.clone(),
        );
        registry.register(
            "name_collisions",
            "Refused writes because an object we do not own already has the name",
            name_collisions.clone(),
        );
        registry.register(
            "reconcile",
            "Reconciles by result (success, error)",
            reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Failed reconciles by error category",
            reconcile_errors.clone(),
        );
        registry.register_with_unit(
            "reconcile_duration",
            "Time of one reconcile",
            Unit::Seconds,
            reconcile_duration.clone(),
        );
        registry.register(
            "api_writes",
            "API writes issued by the operator, by verb and resource",
            api_writes.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the leader Lease (or leader election is off)",
            leader.clone(),
        );

        Arc::new(Self {
            registry,
            endpoints_published,
            endpointslices_managed,
            membership_checks,
            native_cleanup_deletions,
            name_collisions,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            api_writes,
            leader,
            probe,
        })
    }

    /// Encodes every metric as OpenMetrics text.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }

    /// Counts one write.
    pub fn write(&self, verb: &'static str, resource: &'static str) {
        self.api_writes
            .get_or_create(&WriteLabels { verb, resource })
            .inc();
    }
}
