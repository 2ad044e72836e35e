//! A slice set before it is rendered: the ports its slices list, its family and its desired
//! endpoints in their order, shared by evaluation (which builds the groups), the port-set
//! regrouping, the kept sets and emission.

use std::net::IpAddr;

use kube_validation::IpFamily;

use super::context::PlanContext;
use super::objects::{DesiredEndpoint, EndpointFacts};

/// One port a slice lists: a Service port (index into `PlanContext::ports`) and the number it
/// resolves to (`None` for the portless pseudo-port, whose slices list no port).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct SlicePort {
    pub port: usize,
    pub target: Option<i32>,
}

/// One slice set: the ports its slices list (one for `PerPort`, the members' port set for
/// `PerPortSet`, in Service port order) × IP family, with its desired endpoints sorted by
/// (address, pod UID), not rendered yet.
pub(crate) struct Group<'a> {
    pub ports: Vec<SlicePort>,
    pub family: IpFamily,
    pub base: String,
    pub placeholder: bool,
    pub endpoints: Vec<DesiredEndpoint<'a>>,
    /// Pool position → index in `endpoints` (`u32::MAX`: not in this group); built only when
    /// planning with a memo, for its settled slices.
    pub at: Vec<u32>,
    /// A kept port set no member left or joined in this pass: `endpoints` is not built (empty)
    /// unless emission finds its live slices changed.
    pub lazy: Option<Lazy>,
}

/// Where a lazy group's members are: `KeptSets::families[family].sets[set]`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lazy {
    pub family: usize,
    pub set: usize,
    /// How many.
    pub members: usize,
}

/// Pool position → index in `endpoints` (`u32::MAX`: not there).
pub(crate) fn positions(endpoints: &[DesiredEndpoint<'_>], pods: usize) -> Vec<u32> {
    let mut at = vec![u32::MAX; pods];
    for (i, e) in endpoints.iter().enumerate() {
        if let Some(slot) = at.get_mut(e.pool_position as usize) {
            *slot = u32::try_from(i).unwrap_or(u32::MAX);
        }
    }
    at
}

/// The desired endpoint of the member at pool position `pod_idx`.
pub(crate) fn desired_endpoint<'a>(
    ctx: &PlanContext<'a>,
    pod_idx: usize,
    address: IpAddr,
    ready: bool,
    terminating: bool,
) -> DesiredEndpoint<'a> {
    let pod = ctx.pods[pod_idx];
    // Without zones (node lookups off) the pod's spec is not read at all.
    let zone = (!ctx.node_zones.is_empty())
        .then(|| pod.node_name.as_deref().and_then(|n| ctx.node_zones.get(n)))
        .flatten()
        .map(String::as_str);
    let mut endpoint = DesiredEndpoint::new(
        EndpointFacts {
            pod,
            address,
            ready,
            terminating,
            zone,
        },
        ctx.svc_name,
        ctx.namespace,
        ctx.hints,
    );
    endpoint.pool_position = u32::try_from(pod_idx).unwrap_or(u32::MAX);
    endpoint
}

/// The order of a group's endpoints: by address (as integers), then by pod UID, which is read
/// only when two addresses tie.
pub(crate) fn cmp_endpoints(
    a: &DesiredEndpoint<'_>,
    b: &DesiredEndpoint<'_>,
) -> std::cmp::Ordering {
    a.address_key()
        .cmp(&b.address_key())
        .then_with(|| a.uid().cmp(b.uid()))
}
