//! Semantic equality between what the planner wants and what the API server stores, so a
//! converged plan issues zero writes: defaults and server normalisation (nil vs empty, stripped
//! `forNodes`, emptied hints, targetRef resourceVersion) are not differences.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointHints, EndpointPort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::objects::ANNOTATION_TRIGGER_TIME;

fn target_ref_eq(a: &Option<ObjectReference>, b: &Option<ObjectReference>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.kind == b.kind && a.namespace == b.namespace && a.name == b.name && a.uid == b.uid
        }
        _ => false,
    }
}

fn zones(h: &Option<EndpointHints>) -> Vec<&str> {
    h.iter()
        .flat_map(|h| h.for_zones.iter().flatten())
        .map(|z| z.name.as_str())
        .collect()
}

fn nodes(h: &Option<EndpointHints>) -> Vec<&str> {
    h.iter()
        .flat_map(|h| h.for_nodes.iter().flatten())
        .map(|n| n.name.as_str())
        .collect()
}

/// Hints are equal when zones match and nodes match, or when the stored object lacks the
/// desired `forNodes` entirely (the server drops them while `PreferSameTrafficDistribution` is
/// off; re-applying would loop). Stale stored `forNodes` are still a difference.
fn hints_eq(desired: &Option<EndpointHints>, live: &Option<EndpointHints>) -> bool {
    let (dn, ln) = (nodes(desired), nodes(live));
    zones(desired) == zones(live) && (dn == ln || ln.is_empty())
}

/// Endpoint equality as the API stores it (nil ready/serving read as true, nil terminating as
/// false).
pub fn endpoint_eq(desired: &Endpoint, live: &Endpoint) -> bool {
    let cond = |e: &Endpoint| {
        let c = e.conditions.clone().unwrap_or_default();
        (
            c.ready.unwrap_or(true),
            c.serving.unwrap_or(true),
            c.terminating.unwrap_or(false),
        )
    };
    desired.addresses == live.addresses
        && cond(desired) == cond(live)
        && desired.hostname == live.hostname
        && desired.node_name == live.node_name
        && desired.zone == live.zone
        && target_ref_eq(&desired.target_ref, &live.target_ref)
        && hints_eq(&desired.hints, &live.hints)
}

/// Port equality with the v1 defaults applied (name `""`, protocol `TCP`).
pub fn ports_eq(desired: &[EndpointPort], live: &[EndpointPort]) -> bool {
    let norm = |p: &EndpointPort| {
        (
            p.name.clone().unwrap_or_default(),
            p.port,
            p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
            p.app_protocol.clone(),
        )
    };
    desired.len() == live.len() && desired.iter().zip(live).all(|(d, l)| norm(d) == norm(l))
}

fn subset_of(
    desired: Option<&BTreeMap<String, String>>,
    live: Option<&BTreeMap<String, String>>,
    skip: &str,
) -> bool {
    desired
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.as_str() != skip)
        .all(|(k, v)| live.and_then(|l| l.get(k)) == Some(v))
}

fn owner_present(desired: &OwnerReference, live: Option<&Vec<OwnerReference>>) -> bool {
    live.into_iter().flatten().any(|r| {
        r.uid == desired.uid
            && r.kind == desired.kind
            && r.name == desired.name
            && r.api_version == desired.api_version
            && r.controller == desired.controller
            && r.block_owner_deletion == desired.block_owner_deletion
    })
}

/// Metadata the planner owns is in place: every desired label and annotation (except the trigger
/// time, which only moves with content) with its value, and the controller owner reference.
/// Extra labels written by others are tolerated (server-side apply would not remove them, so
/// counting them as drift would loop).
pub fn metadata_eq(desired: &ObjectMeta, live: &ObjectMeta) -> bool {
    subset_of(desired.labels.as_ref(), live.labels.as_ref(), "")
        && subset_of(
            desired.annotations.as_ref(),
            live.annotations.as_ref(),
            ANNOTATION_TRIGGER_TIME,
        )
        && desired
            .owner_references
            .iter()
            .flatten()
            .all(|r| owner_present(r, live.owner_references.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::{EndpointConditions, ForNode, ForZone};

    fn ep(nodes: &[&str], zones: &[&str]) -> Endpoint {
        Endpoint {
            addresses: vec!["10.0.0.1".into()],
            conditions: Some(EndpointConditions {
                ready: Some(true),
                serving: Some(true),
                terminating: Some(false),
            }),
            hints: (!nodes.is_empty() || !zones.is_empty()).then(|| EndpointHints {
                for_nodes: (!nodes.is_empty()).then(|| {
                    nodes
                        .iter()
                        .map(|n| ForNode { name: (*n).into() })
                        .collect()
                }),
                for_zones: (!zones.is_empty()).then(|| {
                    zones
                        .iter()
                        .map(|z| ForZone { name: (*z).into() })
                        .collect()
                }),
            }),
            ..Endpoint::default()
        }
    }

    #[test]
    fn stripped_for_nodes_is_not_a_difference() {
        assert!(endpoint_eq(&ep(&["n1"], &["z1"]), &ep(&[], &["z1"])));
    }

    #[test]
    fn stale_for_nodes_is_a_difference() {
        assert!(!endpoint_eq(&ep(&[], &["z1"]), &ep(&["n1"], &["z1"])));
    }

    #[test]
    fn stripped_for_nodes_with_other_drift_is_a_difference() {
        // The zone was renamed: a stripped forNodes does not hide it.
        assert!(!endpoint_eq(&ep(&["n1"], &["z1"]), &ep(&[], &["z2"])));
        // The zone hint was dropped as well.
        assert!(!endpoint_eq(&ep(&["n1"], &["z1"]), &ep(&[], &[])));
        // Drift outside the hints.
        let mut moved = ep(&[], &["z1"]);
        moved.addresses = vec!["10.0.0.2".into()];
        assert!(!endpoint_eq(&ep(&["n1"], &["z1"]), &moved));
        let mut draining = ep(&[], &["z1"]);
        draining.conditions = Some(EndpointConditions {
            ready: Some(false),
            serving: Some(true),
            terminating: Some(true),
        });
        assert!(!endpoint_eq(&ep(&["n1"], &["z1"]), &draining));
        let mut zone = ep(&[], &["z1"]);
        zone.zone = Some("z1".into());
        assert!(!endpoint_eq(&ep(&["n1"], &["z1"]), &zone));
        // A different node stored is stale, not stripped.
        assert!(!endpoint_eq(&ep(&["n1"], &["z1"]), &ep(&["n2"], &["z1"])));
    }

    #[test]
    fn node_only_hints_stripped_to_none_are_equal() {
        let desired = ep(&["n1"], &[]);
        assert!(desired.hints.is_some());
        // The server dropped forNodes and, with nothing left, the hints struct.
        assert!(endpoint_eq(&desired, &ep(&[], &[])));
        // ... or kept an empty struct.
        let mut empty = ep(&[], &[]);
        empty.hints = Some(EndpointHints::default());
        assert!(endpoint_eq(&desired, &empty));
        // But hints stored where none are wanted (PreferSameNode switched off) are drift.
        assert!(!endpoint_eq(&ep(&[], &[]), &desired));
    }

    #[test]
    fn empty_hints_struct_equals_no_hints() {
        let mut live = ep(&[], &[]);
        live.hints = Some(EndpointHints::default());
        assert!(endpoint_eq(&ep(&[], &[]), &live));
    }

    #[test]
    fn nil_conditions_read_as_ready_serving_not_terminating() {
        let mut live = ep(&[], &[]);
        live.conditions = Some(EndpointConditions::default());
        assert!(endpoint_eq(&ep(&[], &[]), &live));
        live.conditions = Some(EndpointConditions {
            terminating: Some(true),
            ..Default::default()
        });
        assert!(!endpoint_eq(&ep(&[], &[]), &live));
    }

    #[test]
    fn target_ref_resource_version_is_ignored() {
        let mut a = ep(&[], &[]);
        a.target_ref = Some(ObjectReference {
            uid: Some("u".into()),
            ..Default::default()
        });
        let mut b = a.clone();
        if let Some(r) = b.target_ref.as_mut() {
            r.resource_version = Some("42".into());
        }
        assert!(endpoint_eq(&a, &b));
    }

    #[test]
    fn ports_compare_with_defaults() {
        let d = EndpointPort {
            name: Some(String::new()),
            port: Some(80),
            protocol: Some("TCP".into()),
            app_protocol: None,
        };
        let l = EndpointPort {
            name: None,
            port: Some(80),
            protocol: None,
            app_protocol: None,
        };
        assert!(ports_eq(std::slice::from_ref(&d), &[l]));
        assert!(!ports_eq(&[d], &[]));
    }

    #[test]
    fn foreign_labels_tolerated_but_missing_ones_are_drift() {
        let d = ObjectMeta {
            labels: Some([("a".to_owned(), "1".to_owned())].into()),
            ..Default::default()
        };
        let extra = ObjectMeta {
            labels: Some(
                [
                    ("a".to_owned(), "1".to_owned()),
                    ("b".to_owned(), "2".to_owned()),
                ]
                .into(),
            ),
            ..Default::default()
        };
        assert!(metadata_eq(&d, &extra));
        assert!(!metadata_eq(&d, &ObjectMeta::default()));
    }

    #[test]
    fn trigger_time_annotation_alone_is_not_drift() {
        let d = ObjectMeta {
            annotations: Some([(ANNOTATION_TRIGGER_TIME.to_owned(), "t2".to_owned())].into()),
            ..Default::default()
        };
        let l = ObjectMeta {
            annotations: Some([(ANNOTATION_TRIGGER_TIME.to_owned(), "t1".to_owned())].into()),
            ..Default::default()
        };
        assert!(metadata_eq(&d, &l));
    }
}
