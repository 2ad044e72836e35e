//! Known-bad combinations of per-port membership with consumers of EndpointSlices
//! (docs/consumers.md). Pure: the operator feeds them from a plan and reports a condition.

mod ambient;
mod local_policy;

pub use ambient::{
    AMBIENT_REDIRECTION_ANNOTATION, AMBIENT_REDIRECTION_ENABLED, IstioAmbientCaveat, WidenedPort,
    ambient_pods, is_ambient, istio_ambient, istio_ambient_caveat, port_members,
};
pub use local_policy::{
    LocalPolicyCaveat, UncoveredPort, local_policy_caveat, local_traffic_policy, port_ready_nodes,
    routes_locally,
};

/// The key of every port a slice lists (its name, else its number), in slice order: a
/// port-set slice lists several, and each of them counts. A slice without ports (a headless
/// Service without ports) stands for one port keyed `""`. The consumer caveats name ports by
/// it, and so does the operator's `port` metric label.
pub fn port_keys(slice: &crate::compact_slice::CompactSlice) -> Vec<String> {
    let keys: Vec<String> = slice
        .ports
        .iter()
        .flatten()
        .map(|p| {
            p.name
                .clone()
                .filter(|n| !n.is_empty())
                .or_else(|| p.port.map(|n| n.to_string()))
                .unwrap_or_default()
        })
        .collect();
    if keys.is_empty() {
        vec![String::new()]
    } else {
        keys
    }
}

/// Most names a message lists; the counts stay exact.
fn names(names: &[String], most: usize) -> String {
    let mut out = names
        .iter()
        .take(most)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > most {
        out.push_str(&format!(" and {} more", names.len() - most));
    }
    out
}
