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
    let node = |zone: &str| PartialObjectMeta::<Node> {
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
