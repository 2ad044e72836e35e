//! The cost a PortMapping asks of the operator, bounded before the work exists.
//!
//! Admission bounds what one object can say (network checks per port and per PortMapping,
//! `maxEndpointsPerSlice` under `PerPort`). What it cannot see is bounded here, from a pass's
//! inputs and before the planner runs: how many ports the Service has (`defaultChecks` apply to
//! every port without an entry), how many pods the pool holds, and in how many IP families.
//!
//! - **Probe targets**: network check positions (each `anyOf` entry counts) summed over the
//!   Service's ports, × pool pods × families. An upper bound: a pod that a cheaper check
//!   already excludes is not probed, but a tenant controls that, so the bound is what counts.
//! - **Slices** under `PerPort`: ports × families × ⌈pods ÷ `maxEndpointsPerSlice`⌉ (at least
//!   one slice per port and family, the placeholder of an empty port). The planner's own slice
//!   count is judged again after planning, for both groupings.
//!
//! A PortMapping over a budget publishes nothing new and keeps what it published
//! ([`crate::report::Stall::OverBudget`]); its probe targets are dropped.

use k8s_openapi::api::core::v1::Service;
use portmapper_api::{Check, PortMappingSpec, SliceGrouping};

use crate::membership::PortRules;
use crate::planner::ports::{port_views, service_families};

/// The operator's budgets (its flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budgets {
    /// Probe targets one PortMapping may ask for (`--max-probe-targets-per-portmapping`).
    pub probe_targets_per_portmapping: usize,
    /// Probe targets the PortMappings of one namespace may hold together
    /// (`--max-probe-targets-per-namespace`).
    pub probe_targets_per_namespace: usize,
    /// EndpointSlices one PortMapping may publish (`--max-slices-per-portmapping`).
    pub slices_per_portmapping: usize,
}

impl Default for Budgets {
    /// Sized from the measured cost (`docs/security.md`, about 5 KiB per target): a
    /// PortMapping at its probe budget costs about 20 MiB, a namespace at its own about 80 MiB,
    /// within the chart's 256 Mi; 2,000 slices hold 200,000 endpoints at the default
    /// `maxEndpointsPerSlice`.
    fn default() -> Self {
        Self {
            probe_targets_per_portmapping: 4_096,
            probe_targets_per_namespace: 16_384,
            slices_per_portmapping: 2_000,
        }
    }
}

/// What one pass of a PortMapping would ask for, at most.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Demand {
    /// Network check positions over the Service's ports.
    pub positions: usize,
    /// Pool pods.
    pub pods: usize,
    /// IP families the Service publishes.
    pub families: usize,
    /// Service ports (the portless pseudo-port of a headless Service counts as one).
    pub ports: usize,
    /// `positions × pods × families`.
    pub probe_targets: usize,
    /// Slices under `PerPort`; `None` under `PerPortSet`, judged after planning.
    pub slices: Option<usize>,
}

/// Which budget a PortMapping is over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Budget {
    /// `--max-probe-targets-per-portmapping`.
    ProbeTargetsPerPortMapping,
    /// `--max-probe-targets-per-namespace`.
    ProbeTargetsPerNamespace,
    /// `--max-slices-per-portmapping`.
    SlicesPerPortMapping,
}

impl Budget {
    /// The flag that sets it.
    pub fn flag(self) -> &'static str {
        match self {
            Self::ProbeTargetsPerPortMapping => "--max-probe-targets-per-portmapping",
            Self::ProbeTargetsPerNamespace => "--max-probe-targets-per-namespace",
            Self::SlicesPerPortMapping => "--max-slices-per-portmapping",
        }
    }

    /// The condition reason of a PortMapping over it.
    pub fn reason(self) -> &'static str {
        match self {
            Self::ProbeTargetsPerPortMapping | Self::ProbeTargetsPerNamespace => {
                "TooManyProbeTargets"
            }
            Self::SlicesPerPortMapping => "TooManySlices",
        }
    }
}

/// A PortMapping over one of its budgets: which, what it needs, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverBudget {
    pub budget: Budget,
    /// What it would need.
    pub needed: usize,
    /// The budget.
    pub limit: usize,
    /// How `needed` comes about.
    pub detail: String,
}

impl OverBudget {
    /// The status message: the figure, the budget, its flag, and that nothing is lost.
    pub fn message(&self) -> String {
        let what = match self.budget {
            Budget::ProbeTargetsPerPortMapping => "probe targets, over the budget of",
            Budget::ProbeTargetsPerNamespace => {
                "probe targets in its namespace, over the namespace's budget of"
            }
            Budget::SlicesPerPortMapping => "EndpointSlices, over the budget of",
        };
        format!(
            "needs {} {what} {} ({}; {}); what it published stays as it is",
            self.needed,
            self.limit,
            self.detail,
            self.budget.flag()
        )
    }
}

/// The most `spec` asks of the operator for `service` with `pods` pool pods.
pub fn demand(spec: &PortMappingSpec, service: &Service, pods: usize) -> Demand {
    let views = port_views(service, spec);
    let positions = views
        .iter()
        .map(|view| network_positions(view.rules))
        .fold(0usize, usize::saturating_add);
    let families = service_families(service).len();
    let probe_targets = positions.saturating_mul(pods).saturating_mul(families);
    let slices = (spec.slice_grouping == SliceGrouping::PerPort).then(|| {
        let per_slice = usize::try_from(spec.max_endpoints_per_slice.max(1)).unwrap_or(1);
        let chunks = pods.div_ceil(per_slice).max(1);
        views.len().saturating_mul(families).saturating_mul(chunks)
    });
    Demand {
        positions,
        pods,
        families,
        ports: views.len(),
        probe_targets,
        slices,
    }
}

/// Network check positions of one port's rules ([`Check::network_positions`]).
pub fn network_positions(rules: PortRules<'_>) -> usize {
    rules.checks().iter().map(Check::network_positions).sum()
}

/// Judges `demand` before planning: the PortMapping's own probe targets, then with
/// `namespace_targets` (what the namespace's other PortMappings probe now) the namespace's,
/// then `PerPort` slices.
pub fn judge(
    budgets: &Budgets,
    demand: &Demand,
    namespace_targets: usize,
) -> Result<(), OverBudget> {
    let targets_detail = || {
        format!(
            "{} network check positions over {} ports × {} pods × {} families",
            demand.positions, demand.ports, demand.pods, demand.families
        )
    };
    if demand.probe_targets > budgets.probe_targets_per_portmapping {
        return Err(OverBudget {
            budget: Budget::ProbeTargetsPerPortMapping,
            needed: demand.probe_targets,
            limit: budgets.probe_targets_per_portmapping,
            detail: targets_detail(),
        });
    }
    let in_namespace = demand.probe_targets.saturating_add(namespace_targets);
    if demand.probe_targets > 0 && in_namespace > budgets.probe_targets_per_namespace {
        return Err(OverBudget {
            budget: Budget::ProbeTargetsPerNamespace,
            needed: in_namespace,
            limit: budgets.probe_targets_per_namespace,
            detail: format!(
                "its own {}: {}, and {namespace_targets} of the namespace's other PortMappings",
                demand.probe_targets,
                targets_detail()
            ),
        });
    }
    match demand.slices {
        Some(slices) => judge_slices(budgets, slices, "PerPort: ports × families × chunks"),
        None => Ok(()),
    }
}

/// Judges the slices a plan publishes (`how`: where the figure comes from).
pub fn judge_slices(budgets: &Budgets, slices: usize, how: &str) -> Result<(), OverBudget> {
    if slices <= budgets.slices_per_portmapping {
        return Ok(());
    }
    Err(OverBudget {
        budget: Budget::SlicesPerPortMapping,
        needed: slices,
        limit: budgets.slices_per_portmapping,
        detail: how.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
    use portmapper_api::{LeafCheck, PortRule, UnlistedPorts};

    fn service(ports: i32, families: &[&str]) -> Service {
        Service {
            spec: Some(ServiceSpec {
                ports: Some(
                    (0..ports)
                        .map(|i| ServicePort {
                            name: Some(format!("p{i}")),
                            port: 8000 + i,
                            ..ServicePort::default()
                        })
                        .collect(),
                ),
                ip_families: Some(families.iter().map(|f| (*f).to_owned()).collect()),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        }
    }

    fn tcp() -> LeafCheck {
        LeafCheck {
            tcp_socket: Some(Default::default()),
            ..LeafCheck::default()
        }
    }

    fn any_of(n: usize) -> Check {
        Check {
            any_of: Some(vec![tcp(); n]),
            ..Check::default()
        }
    }

    fn budgets(targets: usize, namespace: usize, slices: usize) -> Budgets {
        Budgets {
            probe_targets_per_portmapping: targets,
            probe_targets_per_namespace: namespace,
            slices_per_portmapping: slices,
        }
    }

    #[test]
    fn default_checks_count_on_every_unlisted_port_and_each_any_of_entry() {
        let mut spec = test_support::spec::spec("web", "app");
        spec.default_checks = Some(vec![any_of(16), Check::pod_ready()]);
        spec.ports = vec![PortRule {
            name: "p0".into(),
            checks: vec![Check::pod_ready()],
        }];
        let demand = demand(&spec, &service(300, &["IPv4", "IPv6"]), 3);
        // p0 has none; 299 ports × 16, × 3 pods × 2 families.
        assert_eq!(demand.positions, 299 * 16);
        assert_eq!(demand.probe_targets, 299 * 16 * 3 * 2);
        assert_eq!(
            demand.slices, None,
            "PerPortSet slices are judged after planning"
        );
        spec.unlisted_ports = UnlistedPorts::PublishNothing;
        assert_eq!(demand_of(&spec, 300), 0, "unlisted ports publish nothing");
    }

    fn demand_of(spec: &PortMappingSpec, ports: i32) -> usize {
        demand(spec, &service(ports, &["IPv4"]), 1).probe_targets
    }

    #[test]
    fn per_port_slices_are_ports_times_families_times_chunks() {
        let mut spec = test_support::spec::spec("web", "app");
        spec.slice_grouping = SliceGrouping::PerPort;
        spec.max_endpoints_per_slice = 10;
        let svc = service(2_500, &["IPv4"]);
        assert_eq!(demand(&spec, &svc, 0).slices, Some(2_500), "placeholders");
        assert_eq!(demand(&spec, &svc, 25).slices, Some(7_500));
        let over = judge(&Budgets::default(), &demand(&spec, &svc, 1), 0).unwrap_err();
        assert_eq!(
            (over.budget, over.needed, over.limit),
            (Budget::SlicesPerPortMapping, 2_500, 2_000)
        );
        assert!(over.message().contains("--max-slices-per-portmapping"));
    }

    #[test]
    fn the_portmapping_budget_then_the_namespace_budget_name_their_figures() {
        let mut spec = test_support::spec::spec("web", "app");
        spec.default_checks = Some(vec![any_of(4)]);
        let d = demand(&spec, &service(10, &["IPv4"]), 5); // 4 × 10 × 5 = 200
        assert_eq!(judge(&budgets(200, 1_000, 10), &d, 800), Ok(()));
        let own = judge(&budgets(199, 1_000, 10), &d, 0).unwrap_err();
        assert_eq!(
            (own.budget, own.needed, own.limit),
            (Budget::ProbeTargetsPerPortMapping, 200, 199)
        );
        assert_eq!(own.budget.reason(), "TooManyProbeTargets");
        let ns = judge(&budgets(200, 1_000, 10), &d, 801).unwrap_err();
        assert_eq!(
            (ns.budget, ns.needed, ns.limit),
            (Budget::ProbeTargetsPerNamespace, 1_001, 1_000)
        );
        assert!(
            ns.message()
                .contains("801 of the namespace's other PortMappings"),
            "{}",
            ns.message()
        );
    }

    #[test]
    fn a_portmapping_without_network_checks_never_counts_against_its_namespace() {
        let spec = test_support::spec::spec("web", "app");
        let d = demand(&spec, &service(10, &["IPv4"]), 50_000);
        assert_eq!(d.probe_targets, 0);
        assert_eq!(judge(&budgets(1, 1, 10), &d, 5), Ok(()));
    }
}
