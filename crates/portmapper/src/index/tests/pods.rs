//! Pod events: pools, nodes, relists and stopped watches.

use super::*;

#[test]
fn a_pod_event_reaches_only_the_portmappings_of_its_pool() {
    let mut index = index();
    let p = pod("a", "p1", &[(KEY, "web")], &[]);
    assert_eq!(
        names(index.apply_pod(&label(), Arc::new(PodRecord::from(p.clone())))),
        ["a/web-1", "a/web-2"]
    );
    // Same value in another namespace (its own watch), and another value: other pools.
    let q = pod("b", "p1", &[(KEY, "web")], &[]);
    assert_eq!(
        names(index.apply_pod(&label_in("b"), Arc::new(PodRecord::from(q.clone())))),
        ["b/web"]
    );
    let r = pod("a", "p2", &[(KEY, "nobody")], &[]);
    assert!(
        index
            .apply_pod(&label(), Arc::new(PodRecord::from(r.clone())))
            .is_empty()
    );
    // Pods outside every pool reconcile nothing, whatever changes on them: another value's pod
    // gaining an annotation, and a pod without the key (a namespace-wide watch would see it).
    let r = pod("a", "p2", &[(KEY, "nobody")], &[("example.com/ports", "")]);
    assert!(
        index
            .apply_pod(&label(), Arc::new(PodRecord::from(r)))
            .is_empty()
    );
    let mut keyless = pod("a", "p3", &[("app", "unrelated")], &[]);
    assert!(
        index
            .apply_pod(&label(), Arc::new(PodRecord::from(keyless.clone())))
            .is_empty()
    );
    keyless.metadata.annotations =
        Some([("example.com/ports".to_owned(), "http".to_owned())].into());
    assert!(
        index
            .apply_pod(&label(), Arc::new(PodRecord::from(keyless)))
            .is_empty()
    );
    assert_eq!(
        index
            .pool_pods(&pm("a", "web-1", "web", KeySource::Label, 10))
            .iter()
            .map(|p| p.name.clone())
            .collect::<Vec<_>>(),
        ["p1"]
    );
}

#[test]
fn pools_know_whether_a_pod_is_enrolled_in_istio_ambient() {
    use portmapper_core::consumers::AMBIENT_REDIRECTION_ANNOTATION as AMBIENT;
    let mut index = index();
    let web = pm("a", "web-1", "web", KeySource::Label, 10);
    let plain = pod("a", "p1", &[(KEY, "web")], &[]);
    let enrolled = pod("a", "p1", &[(KEY, "web")], &[(AMBIENT, "enabled")]);
    let record = |p: &Pod| Arc::new(PodRecord::from(p.clone()));
    index.apply_pod(&label(), record(&plain));
    assert!(!index.pool_has_ambient(&web));
    index.apply_pod(&label(), record(&enrolled));
    assert!(index.pool_has_ambient(&web));
    // Another pool's count is its own.
    let api = pm("a", "api", "api", KeySource::Label, 10);
    assert!(!index.pool_has_ambient(&api));
    index.apply_pod(&label(), record(&plain));
    assert!(!index.pool_has_ambient(&web), "the annotation went");
    index.apply_pod(&label(), record(&enrolled));
    index.delete_pod(&label(), &ObjectRef::new("p1").within("a"));
    assert!(!index.pool_has_ambient(&web), "the pod went");
}

#[test]
fn pods_listing_a_readiness_gate_are_counted_per_pool() {
    let mut index = index();
    let web = pm("a", "web-1", "web", KeySource::Label, 10);
    let plain = pod("a", "p1", &[(KEY, "web")], &[]);
    let mut gated = plain.clone();
    gated.spec.get_or_insert_default().readiness_gates =
        Some(vec![k8s_openapi::api::core::v1::PodReadinessGate {
            condition_type: "portmapper.dev/published".to_owned(),
        }]);
    let record = |p: &Pod| Arc::new(PodRecord::from(p.clone()));
    index.apply_pod(&label(), record(&plain));
    assert!(!index.pool_has_gated(&web));
    index.apply_pod(&label(), record(&gated));
    assert!(index.pool_has_gated(&web));
    let api = pm("a", "api", "api", KeySource::Label, 10);
    assert!(
        !index.pool_has_gated(&api),
        "another pool's count is its own"
    );
    index.apply_pod(&label(), record(&plain));
    assert!(!index.pool_has_gated(&web), "the gate went");
    index.apply_pod(&label(), record(&gated));
    index.apply_pod(&label(), record(&gated));
    index.delete_pod(&label(), &ObjectRef::new("p1").within("a"));
    assert!(!index.pool_has_gated(&web), "the pod went, counted once");
}

#[test]
fn a_pod_moving_between_pools_reaches_both_and_a_deleted_pod_its_last_pool() {
    let mut index = index();
    index.apply_pod(
        &label(),
        Arc::new(PodRecord::from(pod("a", "p1", &[(KEY, "web")], &[]))),
    );
    let moved = pod("a", "p1", &[(KEY, "api")], &[]);
    assert_eq!(
        names(index.apply_pod(&label(), Arc::new(PodRecord::from(moved.clone())))),
        ["a/api", "a/web-1", "a/web-2"]
    );
    let web = pm("a", "web-1", "web", KeySource::Label, 10);
    assert!(index.pool_pods(&web).is_empty());
    assert_eq!(
        names(index.delete_pod(&label(), &ObjectRef::from_obj(&moved))),
        ["a/api"]
    );
    assert!(
        index
            .delete_pod(&label(), &ObjectRef::from_obj(&moved))
            .is_empty()
    );
}

#[test]
fn annotation_pools_are_indexed_by_the_keys_in_use_and_reindexed_for_a_new_key() {
    let mut index = Index::new();
    let ns = PodSource::Namespace("a".into());
    let p = pod("a", "p1", &[], &[(KEY, "web")]);
    // No PortMapping reads the annotation yet: the pod is in no pool.
    assert!(
        index
            .apply_pod(&ns, Arc::new(PodRecord::from(p.clone())))
            .is_empty()
    );
    let applied = index.apply_portmapping(&pm("a", "web", "web", KeySource::Annotation, 1));
    assert_eq!(applied.reindex, Some(ns.clone()));
    // The caller re-applies the namespace's pods.
    assert_eq!(
        names(index.apply_pod(&ns, Arc::new(PodRecord::from(p.clone())))),
        ["a/web"]
    );
    let second = index.apply_portmapping(&pm("a", "web-2", "web", KeySource::Annotation, 2));
    assert_eq!(second.reindex, None, "the key is indexed already");
    index.delete_portmapping(&ObjectRef::new("web-2").within("a"));
    // The only PortMapping reading the key changes its spec: the key stays indexed, so
    // the namespace's pods are not applied again.
    let mut changed = pm("a", "web", "web", KeySource::Annotation, 1);
    changed.metadata.generation = Some(2);
    changed.spec.max_endpoints_per_slice = 50;
    let again = index.apply_portmapping(&changed);
    assert_eq!(names(again.affected), ["a/web"]);
    assert_eq!(again.reindex, None, "the same key, re-applied");
    let mut other_key = changed;
    other_key.metadata.generation = Some(3);
    other_key.spec.pods.key = "example.com/other".into();
    assert_eq!(
        index.apply_portmapping(&other_key).reindex,
        Some(ns.clone()),
        "a key no PortMapping read before"
    );
    assert_eq!(
        index.needed_sources(),
        BTreeSet::from([PodSource::Namespace("a".into())])
    );
}

#[test]
fn a_relist_or_a_stopped_watch_touches_only_its_own_pods() {
    let mut index = index();
    let ns = PodSource::Namespace("a".into());
    let p1 = pod("a", "p1", &[(KEY, "web")], &[]);
    index.apply_pod(&label(), Arc::new(PodRecord::from(p1.clone())));
    index.apply_pod(&ns, Arc::new(PodRecord::from(p1.clone())));
    // The namespace watch relists without p1: the label watch's copy stays in its pool.
    assert!(index.retain_pods(&ns, &HashSet::new()).is_empty());
    let web = pm("a", "web-1", "web", KeySource::Label, 10);
    assert_eq!(index.pool_pods(&web).len(), 1);
    index.apply_pod(&ns, Arc::new(PodRecord::from(p1.clone())));
    index.forget_source(&ns);
    assert_eq!(
        index.pool_pods(&web).len(),
        1,
        "the label watch still sees p1"
    );
    assert_eq!(
        names(index.retain_pods(&label(), &HashSet::new())),
        ["a/web-1", "a/web-2"]
    );
    assert!(index.pool_pods(&web).is_empty());
    assert!(
        index.pods.is_empty(),
        "no empty per-watch map is left behind"
    );
}
