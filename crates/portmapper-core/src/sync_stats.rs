//! What one sync changes and keeps, in the native EndpointSlice controller's terms
//! (`k8s.io/endpointslice/metrics`: endpoints added and removed per sync, slices changed per
//! sync, desired endpoints, actual against perfectly packed slices), so dashboards and alerts
//! built for `endpoint_slice_controller_*` read ours with the same meaning.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::discovery::v1::EndpointPort;

use crate::compact_slice::CompactSlice;
use crate::planner::{Plan, WriteAction};

/// The figures of one sync of one PortMapping.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncStats {
    /// Endpoints in written slices that the live slice of the same name did not have.
    pub endpoints_added: usize,
    /// Endpoints of live slices that their written version drops, and of deleted slices.
    pub endpoints_removed: usize,
    /// Slices created, updated or deleted.
    pub slices_changed: usize,
    /// Endpoints of every slice the plan wants.
    pub endpoints_desired: usize,
    /// Slices the plan wants.
    pub slices: usize,
    /// Slices there would be with perfect packing: per slice set (address type and ports), the
    /// endpoints over the most per slice, rounded up, and at least one.
    pub slices_desired: usize,
}

/// The figures of `plan` against the `live` slices it was planned from. An endpoint is its
/// first address (what consumers read), so a pod moving between two chunks of a set counts as
/// one removal and one addition, as in the native controller.
pub fn sync_stats<'a>(
    plan: &Plan,
    live: impl IntoIterator<Item = &'a CompactSlice>,
    max_endpoints_per_slice: usize,
) -> SyncStats {
    let live: HashMap<&str, &CompactSlice> = live
        .into_iter()
        .filter_map(|s| Some((s.metadata.name.as_deref()?, s)))
        .collect();
    let mut stats = SyncStats {
        slices: plan.slices.len(),
        slices_changed: plan.deletions.len(),
        ..SyncStats::default()
    };
    let mut sets: BTreeMap<(&str, Vec<PortKey<'_>>), usize> = BTreeMap::new();
    for planned in &plan.slices {
        let slice = planned.slice.as_ref();
        stats.endpoints_desired += slice.endpoints.len();
        let ports = slice.ports.iter().flatten().map(port_key).collect();
        *sets
            .entry((slice.address_type.as_str(), ports))
            .or_default() += slice.endpoints.len();
        if planned.action == WriteAction::Unchanged {
            continue;
        }
        stats.slices_changed += 1;
        let name = slice.metadata.name.as_deref().unwrap_or_default();
        let before = live.get(name).map(|l| addresses(l)).unwrap_or_default();
        let after = addresses(slice);
        stats.endpoints_added += after.difference(&before).count();
        stats.endpoints_removed += before.difference(&after).count();
    }
    for deletion in &plan.deletions {
        stats.endpoints_removed += live
            .get(deletion.name.as_str())
            .map_or(0, |l| l.endpoints.len());
    }
    let most = max_endpoints_per_slice.max(1);
    stats.slices_desired = sets.values().map(|n| n.div_ceil(most).max(1)).sum();
    stats
}

/// A slice port as a set key: name, number, protocol.
type PortKey<'a> = (Option<&'a str>, Option<i32>, Option<&'a str>);

fn port_key(port: &EndpointPort) -> PortKey<'_> {
    (port.name.as_deref(), port.port, port.protocol.as_deref())
}

fn addresses(slice: &CompactSlice) -> BTreeSet<&str> {
    slice
        .endpoints
        .iter()
        .filter_map(|e| e.addresses().next())
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::planner::{Deletion, PlannedSlice};

    fn slice(name: &str, port: &str, ips: &[&str]) -> CompactSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            address_type: "IPv4".into(),
            ports: Some(vec![EndpointPort {
                name: Some(port.into()),
                port: Some(80),
                ..EndpointPort::default()
            }]),
            endpoints: ips
                .iter()
                .map(|ip| Endpoint {
                    addresses: vec![(*ip).into()],
                    ..Endpoint::default()
                })
                .collect(),
        }
        .into()
    }

    fn planned(slice: CompactSlice, action: WriteAction) -> PlannedSlice {
        PlannedSlice {
            slice: Arc::new(slice),
            action,
            withdraws: false,
        }
    }

    #[test]
    fn added_removed_changed_and_packing_are_counted_as_the_native_controller_does() {
        let live = [
            slice("web.http", "http", &["10.0.0.1", "10.0.0.2"]),
            slice("web.http.2", "http", &["10.0.0.3"]),
            slice("web.https", "https", &["10.0.0.1"]),
            slice("web.old", "old", &["10.0.0.9", "10.0.0.8"]),
        ];
        let plan = Plan {
            slices: vec![
                // 10.0.0.2 leaves, 10.0.0.4 joins.
                planned(
                    slice("web.http", "http", &["10.0.0.1", "10.0.0.4"]),
                    WriteAction::Update {
                        resource_version: None,
                    },
                ),
                planned(
                    slice("web.http.2", "http", &["10.0.0.3"]),
                    WriteAction::Unchanged,
                ),
                planned(
                    slice("web.https", "https", &["10.0.0.1"]),
                    WriteAction::Unchanged,
                ),
                planned(
                    slice("web.metrics", "metrics", &["10.0.0.5"]),
                    WriteAction::Create,
                ),
            ],
            deletions: vec![Deletion {
                name: "web.old".into(),
                uid: None,
            }],
            ..Plan::default()
        };
        let stats = sync_stats(&plan, &live, 2);
        assert_eq!(
            stats,
            SyncStats {
                endpoints_added: 2,
                endpoints_removed: 3,
                slices_changed: 3,
                endpoints_desired: 5,
                slices: 4,
                // http: 3 endpoints at 2 per slice → 2; https → 1; metrics → 1.
                slices_desired: 4,
            }
        );
    }

    #[test]
    fn a_converged_plan_changes_nothing_and_an_empty_set_still_wants_one_slice() {
        let live = [slice("web.http", "http", &[])];
        let plan = Plan {
            slices: vec![planned(live[0].clone(), WriteAction::Unchanged)],
            ..Plan::default()
        };
        let stats = sync_stats(&plan, &live, 100);
        assert_eq!(
            (
                stats.endpoints_added,
                stats.endpoints_removed,
                stats.slices_changed
            ),
            (0, 0, 0)
        );
        assert_eq!((stats.slices, stats.slices_desired), (1, 1));
    }
}
