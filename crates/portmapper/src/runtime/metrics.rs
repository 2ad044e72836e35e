//! Prometheus metrics (OpenMetrics text on `/metrics`).
//!
//! Labels are bounded: per-object series carry only namespace, service and port (a port's series
//! goes when the port does, a Service's series go when its PortMapping withdraws or is deleted);
//! error series carry a fixed category, never an error string. A Service's port count is not
//! bounded by Kubernetes, so a PortMapping has at most `--metrics-max-port-series` per-port
//! series (its first ports by name), its other ports summed into one `port="_other"` series per
//! address type: a tenant's 5,000-port Service adds a handful of series, not 5,000.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry, Unit};

/// `--metrics-max-port-series`'s default.
pub const DEFAULT_MAX_PORT_SERIES: usize = 16;

/// The `port` label of the series that sums the ports past the cap (a port name is a DNS
/// label and a port number is digits: neither starts with `_`).
pub const OTHER_PORTS: &str = "_other";

/// Labels of per-Service series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct ServiceLabels {
    pub namespace: String,
    pub service: String,
}

/// Labels of per-port series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
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

/// Labels of [`Metrics::plan_pods`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvaluationLabels {
    pub evaluation: &'static str,
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

/// Labels of watch restarts: the watch (a fixed name per reflector) and why it restarted.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchRestartLabels {
    pub watch: &'static str,
    pub reason: &'static str,
}

/// Labels of per-watch series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchLabels {
    pub watch: &'static str,
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
    /// Pool pods per plan by whether the last plan's outcomes were reused (`reused`) or the pod
    /// was evaluated (`evaluated`: new, changed, or after a spec or Service change).
    pub plan_pods: Family<EvaluationLabels, Counter>,
    pub native_cleanup_deletions: Family<ResourceLabels, Counter>,
    pub name_collisions: Family<ServiceLabels, Counter>,
    pub reconciles: Family<ResultLabels, Counter>,
    pub reconcile_errors: Family<CategoryLabels, Counter>,
    pub reconcile_duration: Histogram,
    /// Time of the pure plan alone within a reconcile: the operator's own share, apart from
    /// the API requests a reconcile waits on.
    pub plan_duration: Histogram,
    pub api_writes: Family<WriteLabels, Counter>,
    pub leader: Gauge,
    /// Watch restarts by watch and reason (`error`: the stream failed, `stalled`: silent for
    /// longer than the stall threshold, `no_progress`: re-watched from one resourceVersion
    /// after early ends, relisted).
    pub watch_restarts: Family<WatchRestartLabels, Counter>,
    /// Watches silent for longer than the stall threshold right now, by watch.
    pub watches_stalled: Family<WatchLabels, Gauge>,
    /// Network-check probes (`portmapper_probe_*`), fed by the prober.
    pub probe: portmapper_probe::PrometheusProbeMetrics,
    /// The native EndpointSlice controller's metrics, with the same meaning.
    pub sync: crate::runtime::sync_metrics::SyncMetrics,
    /// The per-Service series each PortMapping (namespace, name) feeds, so they can be removed:
    /// prometheus-client families cannot be searched by a partial label set.
    fed: Mutex<HashMap<(String, String), FedSeries>>,
    /// Per-port series per PortMapping before the rest are summed into `_other`.
    max_port_series: usize,
}

/// Series one PortMapping has set.
#[derive(Default)]
struct FedSeries {
    service: Option<ServiceLabels>,
    /// Sorted, each once. A vector: a set's node was about 1 KB per PortMapping for the one
    /// or two ports most have.
    ports: Vec<PortLabels>,
}

/// A metric's name (under the `portmapper_` prefix) and help text.
type Help = (&'static str, &'static str);

/// `portmapper_endpoints_published`.
const ENDPOINTS_PUBLISHED: Help = (
    "endpoints_published",
    "Endpoints published per Service port and address type (ready or not)",
);
/// `portmapper_endpointslices_managed`.
const ENDPOINTSLICES_MANAGED: Help = (
    "endpointslices_managed",
    "EndpointSlices published per Service",
);
/// `portmapper_membership_checks`.
const MEMBERSHIP_CHECKS: Help = (
    "membership_checks",
    "Membership decisions per Service by outcome (include, exclude, abstain)",
);
/// `portmapper_plan_pods`.
const PLAN_PODS: Help = (
    "plan_pods",
    "Pool pods per plan: outcomes reused from the previous plan, or evaluated",
);
/// `portmapper_native_cleanup_deletions`.
const NATIVE_CLEANUP_DELETIONS: Help = (
    "native_cleanup_deletions",
    "Native leftovers deleted after a selector migration, by resource",
);
/// `portmapper_name_collisions`.
const NAME_COLLISIONS: Help = (
    "name_collisions",
    "Refused writes because an object we do not own already has the name",
);
/// `portmapper_reconcile`.
const RECONCILE: Help = (
    "reconcile",
    "Reconciles by result (success, error; backoff: put off, inside the retry window of an earlier failure; quiet: nothing it reads changed since a pass that wrote nothing)",
);
/// `portmapper_reconcile_errors`.
const RECONCILE_ERRORS: Help = ("reconcile_errors", "Failed reconciles by error category");
/// `portmapper_reconcile_duration`.
const RECONCILE_DURATION: Help = ("reconcile_duration", "Time of one reconcile");
/// `portmapper_plan_duration`.
const PLAN_DURATION: Help = (
    "plan_duration",
    "Time of one plan (the pure planner's share of a reconcile)",
);
/// `portmapper_api_writes`.
const API_WRITES: Help = (
    "api_writes",
    "API writes issued by the operator, by verb and resource",
);
/// `portmapper_leader`.
const LEADER: Help = (
    "leader",
    "1 while this replica holds the leader Lease (or leader election is off)",
);
/// `portmapper_watch_restarts`.
const WATCH_RESTARTS: Help = (
    "watch_restarts",
    "Watch restarts by watch and reason (error, stalled, no_progress)",
);
/// `portmapper_watches_stalled`.
const WATCHES_STALLED: Help = (
    "watches_stalled",
    "Watches of each kind that are open but silent (no event, no bookmark) past the stall threshold",
);

/// Registers `metric` under `name` and returns it (a handle on the same series).
fn register<M: Metric + Clone>(registry: &mut Registry, (name, help): Help, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

/// [`register`] with a unit.
fn register_with_unit<M: Metric + Clone>(
    registry: &mut Registry,
    (name, help): Help,
    unit: Unit,
    metric: M,
) -> M {
    registry.register_with_unit(name, help, unit, metric.clone());
    metric
}

const DECISIONS: [&str; 3] = ["include", "exclude", "abstain"];

impl Metrics {
    /// Registers every metric under the `portmapper_` prefix, with the default cap on per-port
    /// series.
    pub fn new() -> Arc<Self> {
        Self::with_max_port_series(DEFAULT_MAX_PORT_SERIES)
    }

    /// [`Metrics::new`], with at most `max_port_series` per-port series per PortMapping.
    pub fn with_max_port_series(max_port_series: usize) -> Arc<Self> {
        let mut registry = Registry::with_prefix("portmapper");
        let probe = portmapper_probe::PrometheusProbeMetrics::default();
        probe.register(&mut registry);
        let sync = crate::runtime::sync_metrics::SyncMetrics::new(&mut registry);
        let r = &mut registry;
        // Fields are evaluated in order: the registration order, which /metrics keeps.
        Arc::new(Self {
            endpoints_published: register(r, ENDPOINTS_PUBLISHED, Family::default()),
            endpointslices_managed: register(r, ENDPOINTSLICES_MANAGED, Family::default()),
            membership_checks: register(r, MEMBERSHIP_CHECKS, Family::default()),
            plan_pods: register(r, PLAN_PODS, Family::default()),
            native_cleanup_deletions: register(r, NATIVE_CLEANUP_DELETIONS, Family::default()),
            name_collisions: register(r, NAME_COLLISIONS, Family::default()),
            reconciles: register(r, RECONCILE, Family::default()),
            reconcile_errors: register(r, RECONCILE_ERRORS, Family::default()),
            reconcile_duration: register_with_unit(
                r,
                RECONCILE_DURATION,
                Unit::Seconds,
                Histogram::new(exponential_buckets(0.0005, 2.0, 15)),
            ),
            plan_duration: register_with_unit(
                r,
                PLAN_DURATION,
                Unit::Seconds,
                Histogram::new(exponential_buckets(0.0001, 2.0, 16)),
            ),
            api_writes: register(r, API_WRITES, Family::default()),
            leader: register(r, LEADER, Gauge::default()),
            watch_restarts: register(r, WATCH_RESTARTS, Family::default()),
            watches_stalled: register(r, WATCHES_STALLED, Family::default()),
            probe,
            sync,
            fed: Mutex::new(HashMap::new()),
            max_port_series,
            registry,
        })
    }

    /// Sets the published gauges of one PortMapping's Service: endpoints per (port, address
    /// type) and the slice count. Series of ports (or a Service) it no longer publishes go.
    pub fn set_published(
        &self,
        portmapping: (&str, &str),
        service: ServiceLabels,
        per_port: &BTreeMap<(String, String), i64>,
        slices: i64,
    ) {
        let mut fed = self.fed.lock().unwrap_or_else(|p| p.into_inner());
        let key = (portmapping.0.to_string(), portmapping.1.to_string());
        let entry = fed.entry(key).or_default();
        if entry.service.as_ref().is_some_and(|s| *s != service) {
            // serviceRef moved: the old Service's series are not ours any more.
            self.remove_series(entry);
        }
        let mut ports = Vec::new();
        // `capped` is a map: its entries come sorted and each once, as `ports` keeps them.
        for ((port, address_type), n) in capped(per_port, self.max_port_series) {
            let labels = PortLabels {
                namespace: service.namespace.clone(),
                service: service.service.clone(),
                port,
                address_type,
            };
            self.endpoints_published.get_or_create(&labels).set(n);
            ports.push(labels);
        }
        for gone in entry
            .ports
            .iter()
            .filter(|p| ports.binary_search(p).is_err())
        {
            self.endpoints_published.remove(gone);
        }
        self.endpointslices_managed
            .get_or_create(&service)
            .set(slices);
        entry.ports = ports;
        entry.service = Some(service);
    }

    /// The number of `portmapper_endpoints_published` series.
    pub fn port_series(&self) -> usize {
        let fed = self.fed.lock().unwrap_or_else(|p| p.into_inner());
        fed.values().map(|f| f.ports.len()).sum()
    }

    /// Removes every per-Service series a PortMapping fed (it withdrew or was deleted).
    pub fn forget(&self, portmapping: (&str, &str)) {
        self.sync.forget(portmapping);
        let mut fed = self.fed.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mut entry) = fed.remove(&(portmapping.0.to_string(), portmapping.1.to_string()))
        {
            self.remove_series(&mut entry);
        }
    }

    /// Records that a PortMapping feeds counters of `service` (before any gauge is set).
    pub fn feeds(&self, portmapping: (&str, &str), service: &ServiceLabels) {
        let mut fed = self.fed.lock().unwrap_or_else(|p| p.into_inner());
        let entry = fed
            .entry((portmapping.0.to_string(), portmapping.1.to_string()))
            .or_default();
        if entry.service.as_ref().is_some_and(|s| s != service) {
            self.remove_series(entry);
        }
        entry.service = Some(service.clone());
    }

    fn remove_series(&self, entry: &mut FedSeries) {
        for labels in std::mem::take(&mut entry.ports) {
            self.endpoints_published.remove(&labels);
        }
        if let Some(service) = entry.service.take() {
            self.endpointslices_managed.remove(&service);
            self.name_collisions.remove(&service);
            for decision in DECISIONS {
                self.membership_checks.remove(&DecisionLabels {
                    namespace: service.namespace.clone(),
                    service: service.service.clone(),
                    decision,
                });
            }
        }
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

/// The first `cap` (port, address type) counts as they are, the rest summed per address type
/// under [`OTHER_PORTS`].
fn capped(
    per_port: &BTreeMap<(String, String), i64>,
    cap: usize,
) -> BTreeMap<(String, String), i64> {
    let mut out: BTreeMap<(String, String), i64> = BTreeMap::new();
    for (i, ((port, address_type), n)) in per_port.iter().enumerate() {
        let port = if i < cap {
            port.clone()
        } else {
            OTHER_PORTS.to_owned()
        };
        *out.entry((port, address_type.clone())).or_default() += n;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service() -> ServiceLabels {
        ServiceLabels {
            namespace: "tenant-a".into(),
            service: "wide".into(),
        }
    }

    /// `portmapper_endpoints_published` lines in the exposition.
    fn published_lines(metrics: &Metrics) -> Vec<String> {
        let text = metrics.encode().expect("encodes");
        text.lines()
            .filter(|l| l.starts_with("portmapper_endpoints_published{"))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn a_five_thousand_port_service_adds_the_cap_plus_one_series() {
        let metrics = Metrics::with_max_port_series(16);
        let per_port: BTreeMap<(String, String), i64> = (0..5_000)
            .map(|i| ((format!("p{i:04}"), "IPv4".to_owned()), 2))
            .collect();
        metrics.set_published(("tenant-a", "wide"), service(), &per_port, 5_000);
        let lines = published_lines(&metrics);
        assert_eq!(lines.len(), 17, "16 ports and one _other series");
        assert_eq!(metrics.port_series(), 17);
        let other = lines
            .iter()
            .find(|l| l.contains("port=\"_other\""))
            .expect("the other ports are summed");
        assert!(other.ends_with(" 9968"), "4,984 ports × 2: {other}");
        assert!(lines.iter().any(|l| l.contains("port=\"p0015\"")));
        assert!(!lines.iter().any(|l| l.contains("port=\"p0016\"")));

        // Dual-stack: one _other series per address type; fewer ports: _other goes.
        let dual: BTreeMap<(String, String), i64> = ["IPv4", "IPv6"]
            .iter()
            .flat_map(|t| (0..20).map(move |i| ((format!("p{i:02}"), (*t).to_owned()), 1)))
            .collect();
        metrics.set_published(("tenant-a", "wide"), service(), &dual, 2);
        assert_eq!(published_lines(&metrics).len(), 18);
        let few: BTreeMap<(String, String), i64> =
            [(("http".to_owned(), "IPv4".to_owned()), 3)].into();
        metrics.set_published(("tenant-a", "wide"), service(), &few, 1);
        assert_eq!(published_lines(&metrics).len(), 1);
        metrics.forget(("tenant-a", "wide"));
        assert!(published_lines(&metrics).is_empty());
    }

    #[test]
    fn a_cap_of_zero_sums_every_port() {
        let metrics = Metrics::with_max_port_series(0);
        let per_port: BTreeMap<(String, String), i64> = (0..3)
            .map(|i| ((format!("p{i}"), "IPv4".to_owned()), 1))
            .collect();
        metrics.set_published(("tenant-a", "wide"), service(), &per_port, 1);
        let lines = published_lines(&metrics);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].contains("port=\"_other\"") && lines[0].ends_with(" 3"));
    }
}
