//! Node events: zones.

use super::*;
use crate::index::nodes::LABEL_ZONE;

#[test]
fn a_zone_change_reaches_the_portmappings_of_the_pods_on_that_node() {
    let mut index = index();
    index.apply_pod(
        &label(),
        Arc::new(PodRecord::from(pod("a", "p1", &[(KEY, "api")], &[]))),
    );
    let node = |zone: &str| Node {
        metadata: ObjectMeta {
            name: Some("node-p1".into()),
            labels: Some([(LABEL_ZONE.to_owned(), zone.to_owned())].into()),
            ..ObjectMeta::default()
        },
        ..Default::default()
    };
    assert_eq!(names(index.apply_node(&node("z1"))), ["a/api"]);
    assert!(index.apply_node(&node("z1")).is_empty(), "unchanged zone");
    assert_eq!(index.zone("node-p1"), Some("z1"));
    assert_eq!(names(index.delete_node("node-p1")), ["a/api"]);
}

#[test]
fn a_node_forgets_the_pools_of_pods_that_moved_off_it_or_left() {
    let mut index = index();
    let zoned = |name: &str, zone: &str| Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([(LABEL_ZONE.to_owned(), zone.to_owned())].into()),
            ..ObjectMeta::default()
        },
        ..Default::default()
    };
    let mut p1 = pod("a", "p1", &[(KEY, "api")], &[]);
    index.apply_pod(&label(), Arc::new(PodRecord::from(p1.clone())));
    let p2 = pod("a", "p2", &[(KEY, "api")], &[]);
    index.apply_pod(&label(), Arc::new(PodRecord::from(p2.clone())));
    // p1 moves to p2's node: its old node has no pod of the pool left.
    p1.spec.as_mut().expect("spec").node_name = Some("node-p2".into());
    index.apply_pod(&label(), Arc::new(PodRecord::from(p1.clone())));
    assert!(index.apply_node(&zoned("node-p1", "z1")).is_empty());
    assert_eq!(names(index.apply_node(&zoned("node-p2", "z1"))), ["a/api"]);
    // One of the two leaves: the node still has the other.
    index.delete_pod(&label(), &ObjectRef::from_obj(&p2));
    assert_eq!(names(index.apply_node(&zoned("node-p2", "z2"))), ["a/api"]);
    index.delete_pod(&label(), &ObjectRef::from_obj(&p1));
    assert!(index.apply_node(&zoned("node-p2", "z3")).is_empty());
    assert!(index.pools_by_node.is_empty());
}

fn node_ready(name: &str, ready: Option<&str>) -> Node {
    use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        status: ready.map(|status| NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: status.into(),
                ..NodeCondition::default()
            }]),
            ..NodeStatus::default()
        }),
        ..Node::default()
    }
}

#[test]
fn a_readiness_change_reaches_the_portmappings_of_the_gated_pods_on_that_node() {
    use k8s_openapi::api::core::v1::PodReadinessGate;
    let gate = portmapper_core::PUBLISHED_GATE;
    let mut index = index();
    index.apply_pod(
        &label(),
        Arc::new(PodRecord::from(pod("a", "p1", &[(KEY, "api")], &[]))),
    );
    let mut gated = pod("a", "p2", &[(KEY, "api")], &[]);
    gated.spec.as_mut().expect("spec").readiness_gates = Some(vec![PodReadinessGate {
        condition_type: gate.into(),
    }]);
    let gated = Arc::new(PodRecord::from(gated));
    index.apply_pod(&label(), gated.clone());
    let pods = [gated.as_ref()];

    // First seen (its zone, none, is news), then only its readiness moves.
    assert_eq!(
        names(index.apply_node(&node_ready("node-p2", Some("True")))),
        ["a/api"]
    );
    assert!(index.unready_nodes_of(&pods, gate).is_empty());
    assert_eq!(
        names(index.apply_node(&node_ready("node-p2", Some("Unknown")))),
        ["a/api"]
    );
    assert_eq!(
        index.unready_nodes_of(&pods, gate),
        [("node-p2".to_owned(), "Unknown".to_owned())].into()
    );
    assert!(
        index
            .apply_node(&node_ready("node-p2", Some("Unknown")))
            .is_empty(),
        "unchanged"
    );
    assert_eq!(
        names(index.apply_node(&node_ready("node-p2", Some("False")))),
        ["a/api"]
    );
    // A pod that does not list the gate never reads its node.
    assert!(
        index
            .unready_nodes_of(&pods, "example.com/other")
            .is_empty()
    );
    // Its condition gone (a node status rewritten from scratch): no longer known unready.
    assert_eq!(
        names(index.apply_node(&node_ready("node-p2", None))),
        ["a/api"]
    );
    assert!(index.unready_nodes_of(&pods, gate).is_empty());
    assert_eq!(
        names(index.apply_node(&node_ready("node-p2", Some("False")))),
        ["a/api"]
    );
    // Deleted: unknown to the cache, so nothing is held for it.
    assert_eq!(names(index.delete_node("node-p2")), ["a/api"]);
    assert!(index.unready_nodes_of(&pods, gate).is_empty());

    // The node of a pod without a gate: its pods' own Ready moves with it, nothing to queue.
    assert_eq!(
        names(index.apply_node(&node_ready("node-p1", Some("True")))),
        ["a/api"]
    );
    assert!(
        index
            .apply_node(&node_ready("node-p1", Some("False")))
            .is_empty()
    );
}
