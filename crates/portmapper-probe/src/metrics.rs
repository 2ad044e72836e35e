//! Metrics hooks: probe duration and outcome counts, with bounded labels only.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::outcome::ProbeResult;
use crate::target::CheckType;

/// Receives one observation per finished probe. Labels must stay bounded: check type, outcome
/// and cause are closed sets; pod, PortMapping and address never become labels.
pub trait ProbeMetrics: Send + Sync + 'static {
    /// One probe of a `check` took `duration` and ended with `result`.
    fn observe(&self, check: CheckType, result: &ProbeResult, duration: Duration);
}

/// Discards observations.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoMetrics;

impl ProbeMetrics for NoMetrics {
    fn observe(&self, _check: CheckType, _result: &ProbeResult, _duration: Duration) {}
}

/// Labels of the outcome counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `httpGet`, `tcpSocket`, `grpc` or `webhook`.
    pub check: &'static str,
    /// `include`, `exclude` or `abstain`.
    pub outcome: &'static str,
    /// A [`crate::Cause`] name.
    pub cause: &'static str,
}

/// Labels of the duration histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DurationLabels {
    /// `httpGet`, `tcpSocket`, `grpc` or `webhook`.
    pub check: &'static str,
    /// `include`, `exclude` or `abstain`.
    pub outcome: &'static str,
}

/// Histogram buckets in seconds: loopback-fast answers up to the 60 s timeout cap.
const DURATION_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 60.0,
];

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// prometheus-client metrics, ready to register on the operator's registry.
#[derive(Clone)]
pub struct PrometheusProbeMetrics {
    outcomes: Family<OutcomeLabels, Counter>,
    durations: Family<DurationLabels, Histogram, fn() -> Histogram>,
}

impl Default for PrometheusProbeMetrics {
    fn default() -> Self {
        Self {
            outcomes: Family::default(),
            durations: Family::new_with_constructor(duration_histogram),
        }
    }
}

impl PrometheusProbeMetrics {
    /// Registers `probe_results` and `probe_duration_seconds` on a registry whose prefix
    /// names the program: the operator's `portmapper` prefix exports them as
    /// `portmapper_probe_results_total` and `portmapper_probe_duration_seconds`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "probe_results",
            "Finished network-check probes by check type, outcome and cause",
            self.outcomes.clone(),
        );
        registry.register(
            "probe_duration_seconds",
            "Duration of network-check probes by check type and outcome",
            self.durations.clone(),
        );
    }

    /// The count of results with these labels (for tests and diagnostics).
    pub fn count(&self, labels: &OutcomeLabels) -> u64 {
        self.outcomes.get_or_create(labels).get()
    }
}

impl ProbeMetrics for PrometheusProbeMetrics {
    fn observe(&self, check: CheckType, result: &ProbeResult, duration: Duration) {
        self.outcomes
            .get_or_create(&OutcomeLabels {
                check: check.as_str(),
                outcome: result.outcome.as_str(),
                cause: result.cause.as_str(),
            })
            .inc();
        self.durations
            .get_or_create(&DurationLabels {
                check: check.as_str(),
                outcome: result.outcome.as_str(),
            })
            .observe(duration.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;

    use super::*;
    use crate::outcome::Cause;

    #[test]
    fn observations_are_exposed_with_bounded_labels() {
        let metrics = PrometheusProbeMetrics::default();
        let mut registry = Registry::with_prefix("portmapper");
        metrics.register(&mut registry);
        let result = ProbeResult::exclude(Cause::Refused, "connect to 10.244.1.5:80: refused");
        metrics.observe(CheckType::HttpGet, &result, Duration::from_millis(3));
        metrics.observe(CheckType::HttpGet, &result, Duration::from_millis(3));
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        assert!(text.contains(
            r#"portmapper_probe_results_total{check="httpGet",outcome="exclude",cause="refused"} 2"#
        ), "{text}");
        assert!(text.contains(
            r#"portmapper_probe_duration_seconds_bucket{le="0.005",check="httpGet",outcome="exclude"} 2"#
        ), "{text}");
        assert!(!text.contains("10.244.1.5"), "no free text in labels");
    }
}
