//! Teardown: the plan of a PortMapping whose Service is gone. Every slice it controls goes, as
//! the Go original does (the native controller's slices go with their Service by garbage collection;
//! ours are owned by the PortMapping, which stays, so they are deleted), and so does every
//! Endpoints object it controls.

use k8s_openapi::api::core::v1::Endpoints;

use super::migration::stray_endpoints;
use super::types::{Deletion, Plan};
use crate::compact_slice::CompactSlice;
use crate::ownership::ownership;

/// Deletes every slice of `live_slices` that is ours (by [`ownership`]) and has a UID (the
/// executor deletes with a UID precondition, so a newer object of the same name is never
/// touched), in name order; and, as migration steps, every Endpoints object of
/// `owned_endpoints` the PortMapping controls. Orphans and other owners' objects are left
/// alone.
pub fn teardown<'a>(
    live_slices: impl IntoIterator<Item = &'a CompactSlice>,
    owned_endpoints: impl IntoIterator<Item = &'a Endpoints>,
    pm_uid: &str,
) -> Plan {
    let ours = live_slices
        .into_iter()
        .filter(|s| s.metadata.uid.is_some() && ownership(&s.metadata, pm_uid).is_ours());
    Plan {
        deletions: every(ours),
        migration: stray_endpoints(
            owned_endpoints
                .into_iter()
                .filter(|e| ownership(&e.metadata, pm_uid).is_ours()),
            None,
        ),
        ..Plan::default()
    }
}

/// Every slice of `ours` as a deletion, in name order: what goes when nothing may be published
/// (the Service is gone, or is of type ExternalName).
pub(super) fn every<'a>(ours: impl IntoIterator<Item = &'a CompactSlice>) -> Vec<Deletion> {
    let mut deletions: Vec<Deletion> = ours
        .into_iter()
        .map(|s| Deletion::of(&s.metadata))
        .collect();
    deletions.sort();
    deletions
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::migration::Step;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    fn slice(name: &str, uid: Option<&str>, controller: &str, manager: &str) -> CompactSlice {
        CompactSlice {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: uid.map(Into::into),
                labels: Some(
                    [(
                        "endpointslice.kubernetes.io/managed-by".to_string(),
                        manager.to_string(),
                    )]
                    .into(),
                ),
                owner_references: Some(vec![OwnerReference {
                    api_version: "portmapper.dev/v1alpha1".into(),
                    kind: "PortMapping".into(),
                    name: "web".into(),
                    uid: controller.into(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            ..CompactSlice::default()
        }
    }

    #[test]
    fn teardown_deletes_only_our_slices_with_their_uids_in_name_order() {
        let live = [
            slice("web.https", Some("u2"), "pm", "portmapper.dev"),
            slice("web.http", Some("u1"), "pm", "portmapper.dev"),
            // Another PortMapping's, and one labelled for another manager.
            slice("web.admin", Some("u3"), "other-pm", "portmapper.dev"),
            slice(
                "web.native",
                Some("u4"),
                "pm",
                "endpointslice-controller.k8s.io",
            ),
            // Ours but never stored (no UID): nothing to delete it by.
            slice("web.new", None, "pm", "portmapper.dev"),
        ];
        // Endpoints objects: ours (named after the Service that is gone, and after an older
        // one), and another PortMapping's.
        let endpoints = |name: &str, uid: &str, controller: &str| Endpoints {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                ..slice(name, None, controller, "portmapper.dev").metadata
            },
            subsets: None,
        };
        let owned = [
            endpoints("web", "e1", "pm"),
            endpoints("old", "e2", "pm"),
            endpoints("web-2", "e3", "other-pm"),
        ];
        let plan = teardown(&live, &owned, "pm");
        assert_eq!(
            plan.deletions,
            [
                Deletion {
                    name: "web.http".into(),
                    uid: Some("u1".into())
                },
                Deletion {
                    name: "web.https".into(),
                    uid: Some("u2".into())
                },
            ]
        );
        assert!(plan.slices.is_empty() && plan.endpoints.is_none());
        let gone: Vec<(&str, &str)> = plan
            .migration
            .iter()
            .filter_map(|s| match s {
                Step::DeleteEndpoints {
                    name,
                    uid,
                    native: false,
                } => Some((name.as_str(), uid.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(gone, [("old", "e2"), ("web", "e1")]);
        assert_eq!(plan.migration.len(), 2);
    }
}
