//! Label-selected pod watches: one namespace each, capped per namespace.

use super::*;

/// A label-keyed PortMapping of Service `name` in `ns` drawing on label `key`.
fn keyed(ns: &str, name: &str, key: &str, created: i64) -> PortMapping {
    let mut pm = pm(ns, name, name, KeySource::Label, created);
    pm.spec.pods.key = key.into();
    pm
}

fn source(ns: &str, key: &str) -> PodSource {
    PodSource::Label {
        namespace: ns.into(),
        key: key.into(),
    }
}

#[test]
fn a_label_watch_keeps_no_pod_of_another_namespace() {
    let mut index = index();
    let stranger = pod("b", "p1", &[(KEY, "web")], &[("big", "x")]);
    assert!(
        index
            .apply_pod(&label(), Arc::new(PodRecord::from(stranger)))
            .is_empty()
    );
    assert!(index.pods.is_empty(), "not kept");
    assert!(
        index
            .pool_pods(&pm("b", "web", "web", KeySource::Label, 10))
            .is_empty()
    );
    // Its own namespace's watch does keep it.
    let own = pod("b", "p1", &[(KEY, "web")], &[]);
    let affected = index.apply_pod(&label_in("b"), Arc::new(PodRecord::from(own)));
    assert_eq!(names(affected), ["b/web"]);
    assert_eq!(
        index.needed_sources(),
        BTreeSet::from([label_in("a"), label_in("b")]),
        "one watch per namespace and key, none cluster-wide"
    );
}

#[test]
fn label_keys_over_a_namespace_cap_are_refused_oldest_first() {
    let mut index = Index::new();
    index.limit_label_watches(Some(2));
    for (i, key) in ["example.com/k0", "example.com/k1", "example.com/k2"]
        .iter()
        .enumerate()
    {
        index.apply_portmapping(&keyed("a", &format!("pm{i}"), key, 10 * (i as i64 + 1)));
    }
    // A newer PortMapping of a watched key shares its watch.
    index.apply_portmapping(&keyed("a", "late", "example.com/k0", 100));
    // Another namespace has a cap of its own.
    index.apply_portmapping(&keyed("b", "x", "example.com/k8", 500));
    index.apply_portmapping(&keyed("b", "y", "example.com/k9", 600));
    let refused =
        |index: &Index, ns: &str, name: &str| index.watch_refused(&ObjectRef::new(name).within(ns));
    assert_eq!(refused(&index, "a", "pm2"), Some(WatchRefused { cap: 2 }));
    for (ns, name) in [
        ("a", "pm0"),
        ("a", "pm1"),
        ("a", "late"),
        ("b", "x"),
        ("b", "y"),
    ] {
        assert_eq!(refused(&index, ns, name), None, "{ns}/{name}");
    }
    assert_eq!(
        index.needed_sources(),
        BTreeSet::from([
            source("a", "example.com/k0"),
            source("a", "example.com/k1"),
            source("b", "example.com/k8"),
            source("b", "example.com/k9"),
        ])
    );
    // An annotation pool is served by its namespace's one watch: never refused.
    index.apply_portmapping(&pm("a", "ann", "ann", KeySource::Annotation, 1));
    assert_eq!(refused(&index, "a", "ann"), None);

    // k1 goes: k2 is let in, and its PortMapping is woken to say so.
    let woken = index.delete_portmapping(&ObjectRef::new("pm1").within("a"));
    assert!(names(woken).contains(&"a/pm2".to_owned()));
    assert_eq!(refused(&index, "a", "pm2"), None);
    assert!(
        index
            .needed_sources()
            .contains(&source("a", "example.com/k2"))
    );

    // A new key over the cap wakes itself only; it takes no watch from an older key.
    let applied = index.apply_portmapping(&keyed("a", "pm3", "example.com/k3", 5_000));
    assert_eq!(names(applied.affected), ["a/pm3"]);
    assert!(refused(&index, "a", "pm3").is_some());
    assert!(
        !index
            .needed_sources()
            .contains(&source("a", "example.com/k3"))
    );
}

#[test]
fn an_invalid_key_is_never_counted_nor_watched() {
    let mut index = Index::new();
    index.limit_label_watches(Some(1));
    index.apply_portmapping(&keyed("a", "bad", "not a key!", 1));
    index.apply_portmapping(&keyed("a", "good", "example.com/k0", 2));
    assert_eq!(
        index.watch_refused(&ObjectRef::new("good").within("a")),
        None
    );
    assert_eq!(
        index.needed_sources(),
        BTreeSet::from([source("a", "example.com/k0")])
    );
}
