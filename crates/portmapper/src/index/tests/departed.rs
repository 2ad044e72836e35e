//! Gated pods leaving a pool: departed until released or back.

use super::*;

/// A pod of `labels` listing the publication gate, with its condition `status` if any.
fn gated(name: &str, labels: &[(&str, &str)], status: Option<&str>) -> Arc<PodRecord> {
    use k8s_openapi::api::core::v1::{PodCondition, PodReadinessGate, PodStatus};
    let mut pod = pod("a", name, labels, &[]);
    if let Some(spec) = pod.spec.as_mut() {
        spec.readiness_gates = Some(vec![PodReadinessGate {
            condition_type: portmapper_core::PUBLISHED_GATE.into(),
        }]);
    }
    pod.status = Some(PodStatus {
        conditions: status.map(|s| {
            vec![PodCondition {
                type_: portmapper_core::PUBLISHED_GATE.into(),
                status: s.into(),
                ..PodCondition::default()
            }]
        }),
        ..PodStatus::default()
    });
    Arc::new(PodRecord::from(pod))
}

fn departed_names(index: &Index, pm: &str) -> (Vec<String>, Vec<String>) {
    let (pods, kept) = index.departed(&PmKey::new(pm).within("a"));
    (
        pods.iter().map(|p| p.name.clone()).collect(),
        kept.into_iter().collect(),
    )
}

#[test]
fn a_gated_pod_leaving_a_pool_is_departed_until_released_or_back() {
    let mut index = index();
    let none = (Vec::<String>::new(), Vec::<String>::new());
    index.apply_pod(&label(), gated("p1", &[(KEY, "web")], Some("False")));
    assert_eq!(departed_names(&index, "web-1"), none);
    // Into api's pool: departed from both web PortMappings, kept by api (same gate type).
    let woken = index.apply_pod(&label(), gated("p1", &[(KEY, "api")], Some("False")));
    assert_eq!(names(woken), ["a/api", "a/web-1", "a/web-2"]);
    let p1 = (vec!["p1".to_owned()], vec!["p1".to_owned()]);
    assert_eq!(departed_names(&index, "web-1"), p1);
    assert_eq!(departed_names(&index, "web-2"), p1);
    // Out of every pool (gone from the watch: relabelled or deleted): nobody keeps it.
    index.delete_pod(&label(), &ObjectRef::new("p1").within("a"));
    assert_eq!(
        departed_names(&index, "web-1"),
        (vec!["p1".to_owned()], vec![])
    );
    assert_eq!(
        departed_names(&index, "api"),
        (vec!["p1".to_owned()], vec![])
    );
    index.released(&PmKey::new("web-1").within("a"), &["p1".to_owned()]);
    assert_eq!(departed_names(&index, "web-1"), none);
    // Back in the pool before its release: not departed any more.
    index.apply_pod(&label(), gated("p1", &[(KEY, "api")], Some("False")));
    assert_eq!(departed_names(&index, "api"), none);
    // A gate already True, or a pod on its way out, waits on nothing.
    index.apply_pod(&label(), gated("p2", &[(KEY, "web")], Some("True")));
    index.apply_pod(&label(), gated("p2", &[(KEY, "other")], Some("True")));
    assert_eq!(departed_names(&index, "web-2").0, ["p1"]);
    // A PortMapping's departed pods go with it.
    index.delete_portmapping(&PmKey::new("web-2").within("a"));
    assert_eq!(departed_names(&index, "web-2"), none);
    // web-1's own pool moves away from p3: the pool's waiting pods left it.
    index.apply_pod(&label(), gated("p3", &[(KEY, "web")], Some("False")));
    index.released(&PmKey::new("web-1").within("a"), &["p1".to_owned()]);
    let mut moved = pm("a", "web-1", "web", KeySource::Label, 10);
    moved.spec.pods.value = Some("elsewhere".into());
    index.apply_portmapping(&moved);
    assert_eq!(
        departed_names(&index, "web-1"),
        (vec!["p3".to_owned()], vec![])
    );
    // And back onto it: its own again (kept, not released).
    index.apply_portmapping(&pm("a", "web-1", "web", KeySource::Label, 10));
    assert_eq!(
        departed_names(&index, "web-1"),
        (vec!["p3".to_owned()], vec!["p3".to_owned()])
    );
}
