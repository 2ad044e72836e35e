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
