//! `externalTrafficPolicy: Local` with per-port membership. A load balancer sends traffic only
//! to nodes whose kube-proxy health-check node port answers 200, and kube-proxy answers 200 when
//! the node has any ready local endpoint of the Service, counted across all its ports
//! (kubernetes/kubernetes `pkg/proxy/endpointschangetracker.go`,
//! `EndpointsMap.LocalReadyEndpoints`). A node whose pods serve only some ports passes the check
//! for all of them, and kube-proxy drops the traffic of the ports it has no local endpoint for
//! (`tests/e2e/dataplane.rs` shows it).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::Service;

use crate::compact_slice::CompactSlice;
use crate::planner::Plan;

/// Most node names the message lists per port; the counts stay exact.
const MAX_NODES: usize = 10;

/// A port some health-checked nodes have no ready local member of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UncoveredPort {
    /// Service port name (its number when unnamed).
    pub port: String,
    /// Nodes with a ready endpoint of another port but none of this one, sorted.
    pub nodes: Vec<String>,
}

/// The Service routes external traffic only to local endpoints, and some nodes that pass its
/// health check lack members of some ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalPolicyCaveat {
    /// The Service's name.
    pub service: String,
    /// Every uncovered port, sorted by port.
    pub ports: Vec<UncoveredPort>,
}

/// Whether `service` sends external traffic to node-local endpoints only
/// (`externalTrafficPolicy: Local` on a LoadBalancer or NodePort Service).
pub fn routes_locally(service: &Service) -> bool {
    service.spec.as_ref().is_some_and(|spec| {
        matches!(spec.type_.as_deref(), Some("LoadBalancer" | "NodePort"))
            && spec.external_traffic_policy.as_deref() == Some("Local")
    })
}

/// Nodes with a ready endpoint, per port (keyed by name, else number), across families and
/// chunks, every port a slice lists counting: what kube-proxy's health check counts. An absent `ready` counts as ready, as
/// kube-proxy reads it; endpoints without a node are not attributed to one.
pub fn port_ready_nodes<'a>(
    slices: impl IntoIterator<Item = &'a CompactSlice>,
) -> BTreeMap<String, BTreeSet<&'a str>> {
    let mut nodes: BTreeMap<String, BTreeSet<&'a str>> = BTreeMap::new();
    for slice in slices {
        let ready = || {
            slice
                .endpoints
                .iter()
                .filter(|e| e.conditions().and_then(|c| c.ready).unwrap_or(true))
                .filter_map(|e| e.node_name())
        };
        for key in super::port_keys(slice) {
            nodes.entry(key).or_default().extend(ready());
        }
    }
    nodes
}

/// The caveat, given the nodes with ready members per port: `Some` when some node has ready
/// members of one port (so it passes the health check) but none of another.
pub fn local_policy_caveat<P: AsRef<str>, N: AsRef<str> + Ord>(
    service: &str,
    ready_nodes: &BTreeMap<P, BTreeSet<N>>,
) -> Option<LocalPolicyCaveat> {
    let healthy: BTreeSet<&N> = ready_nodes.values().flatten().collect();
    let ports: Vec<UncoveredPort> = ready_nodes
        .iter()
        .filter(|(_, nodes)| nodes.len() < healthy.len())
        .map(|(port, nodes)| UncoveredPort {
            port: port.as_ref().to_owned(),
            nodes: healthy
                .iter()
                .filter(|node| !nodes.contains(**node))
                .map(|node| (**node).as_ref().to_owned())
                .collect(),
        })
        .collect();
    (!ports.is_empty()).then(|| LocalPolicyCaveat {
        service: service.to_owned(),
        ports,
    })
}

/// The caveat of a plan for its Service, `None` unless the Service routes locally.
pub fn local_traffic_policy(plan: &Plan, service: &Service) -> Option<LocalPolicyCaveat> {
    if !routes_locally(service) {
        return None;
    }
    let name = service.metadata.name.as_deref().unwrap_or_default();
    let nodes = port_ready_nodes(plan.slices.iter().map(|s| s.slice.as_ref()));
    local_policy_caveat(name, &nodes)
}

impl fmt::Display for LocalPolicyCaveat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Service {} has externalTrafficPolicy: Local, and the health check of kube-proxy (and of Cilium's kube-proxy replacement) passes a node with a ready endpoint of any port (MetalLB announces from such nodes too), so a load balancer also sends these ports to nodes that have no local endpoint for them and drop them: ",
            self.service
        )?;
        for (i, port) in self.ports.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(
                f,
                "port {} on {} node(s): {}",
                port.port,
                port.nodes.len(),
                super::names(&port.nodes, MAX_NODES)
            )?;
        }
        f.write_str(
            " (fix: one Service per port, externalTrafficPolicy: Cluster, or pods that serve every port; see docs/consumers.md)",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ServiceSpec;
    use k8s_openapi::api::discovery::v1::{
        Endpoint, EndpointConditions, EndpointPort, EndpointSlice,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    const NODES: [&str; 3] = ["n1", "n2", "n3"];
    const PORTS: [&str; 3] = ["http", "https", "metrics"];

    fn subset(mask: usize) -> BTreeSet<&'static str> {
        NODES
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, n)| *n)
            .collect()
    }

    /// Every assignment of ready nodes to 1, 2 and 3 ports: the caveat is reported exactly when
    /// the ports' node sets differ, names exactly the ports lacking some healthy node, and for
    /// each exactly the healthy nodes it lacks.
    #[test]
    fn exhaustive_over_three_nodes_and_up_to_three_ports() {
        let mut reported = 0;
        for n_ports in 1..=PORTS.len() {
            for assignment in 0..(1usize << (NODES.len() * n_ports)) {
                let nodes: BTreeMap<&str, BTreeSet<&str>> = (0..n_ports)
                    .map(|i| (PORTS[i], subset((assignment >> (i * NODES.len())) & 0b111)))
                    .collect();
                let healthy: BTreeSet<&str> = nodes.values().flatten().copied().collect();
                let caveat = local_policy_caveat("web", &nodes);
                let differ = nodes.values().any(|n| *n != healthy);
                assert_eq!(caveat.is_some(), differ, "{nodes:?}");
                let Some(caveat) = caveat else { continue };
                reported += 1;
                for (port, ready) in &nodes {
                    let missing: Vec<String> =
                        healthy.difference(ready).map(|n| (*n).to_owned()).collect();
                    let listed = caveat.ports.iter().find(|p| p.port == *port);
                    match listed {
                        Some(p) => assert_eq!(p.nodes, missing, "{nodes:?}"),
                        None => assert!(missing.is_empty(), "{nodes:?}"),
                    }
                }
            }
        }
        assert!(reported > 0);
    }

    fn slice(port: &str, endpoints: &[(&str, Option<bool>)]) -> CompactSlice {
        EndpointSlice {
            metadata: ObjectMeta::default(),
            address_type: "IPv4".into(),
            ports: Some(vec![EndpointPort {
                name: Some(port.into()),
                port: Some(80),
                ..Default::default()
            }]),
            endpoints: endpoints
                .iter()
                .map(|(node, ready)| Endpoint {
                    addresses: vec!["10.0.0.1".into()],
                    node_name: Some((*node).into()),
                    conditions: Some(EndpointConditions {
                        ready: *ready,
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect(),
        }
        .into()
    }

    #[test]
    fn only_ready_endpoints_make_a_node_healthy_and_absent_ready_counts_as_ready() {
        let slices = [
            slice("http", &[("n1", Some(true)), ("n2", None)]),
            slice("https", &[("n2", Some(true)), ("n1", Some(false))]),
        ];
        let nodes = port_ready_nodes(&slices);
        assert_eq!(nodes["http"], BTreeSet::from(["n1", "n2"]));
        assert_eq!(nodes["https"], BTreeSet::from(["n2"]));
        let caveat = local_policy_caveat("web", &nodes).expect("n1 lacks https");
        assert_eq!(
            caveat.ports,
            [UncoveredPort {
                port: "https".into(),
                nodes: vec!["n1".into()]
            }]
        );
        let message = caveat.to_string();
        assert!(message.contains("port https on 1 node(s): n1"), "{message}");
    }

    #[test]
    fn every_port_of_a_port_set_slice_counts() {
        let mut both = slice("http", &[("n1", Some(true))]);
        both.ports.get_or_insert_default().push(EndpointPort {
            name: Some("https".into()),
            port: Some(443),
            ..Default::default()
        });
        let slices = [both, slice("http", &[("n2", Some(true))])];
        let nodes = port_ready_nodes(&slices);
        assert_eq!(nodes["http"], BTreeSet::from(["n1", "n2"]));
        assert_eq!(nodes["https"], BTreeSet::from(["n1"]));
        let caveat = local_policy_caveat("web", &nodes).expect("n2 lacks https");
        assert_eq!(caveat.ports[0].nodes, vec!["n2".to_owned()]);
    }

    #[test]
    fn only_local_policies_of_load_balancers_and_node_ports_route_locally() {
        let service = |type_: &str, policy: Option<&str>| Service {
            spec: Some(ServiceSpec {
                type_: Some(type_.into()),
                external_traffic_policy: policy.map(Into::into),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(routes_locally(&service("LoadBalancer", Some("Local"))));
        assert!(routes_locally(&service("NodePort", Some("Local"))));
        assert!(!routes_locally(&service("LoadBalancer", Some("Cluster"))));
        assert!(!routes_locally(&service("ClusterIP", Some("Local"))));
        assert!(!routes_locally(&service("NodePort", None)));
    }

    #[test]
    fn a_long_node_list_names_ten_and_counts_the_rest() {
        let healthy: BTreeSet<String> = (0..13).map(|i| format!("node-{i:02}")).collect();
        let nodes = BTreeMap::from([("http", healthy.clone()), ("https", BTreeSet::new())]);
        let message = local_policy_caveat("web", &nodes).unwrap().to_string();
        assert!(
            message.contains("port https on 13 node(s): node-00, node-01, node-02, node-03, node-04, node-05, node-06, node-07, node-08, node-09 and 3 more"),
            "{message}"
        );
    }
}
