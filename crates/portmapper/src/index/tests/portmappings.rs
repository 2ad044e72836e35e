//! PortMapping events: the Service's publisher, gates, relists.

use super::*;

#[test]
fn deleting_the_winner_wakes_the_other_portmappings_of_its_service() {
    let mut index = index();
    let (one, two) = (
        ObjectRef::new("web-1").within("a"),
        ObjectRef::new("web-2").within("a"),
    );
    assert_eq!(index.service_winner(&two), Some(one.clone()));
    assert_eq!(index.service_winner(&one), None);
    assert_eq!(names(index.delete_portmapping(&one)), ["a/web-2"]);
    assert_eq!(index.service_winner(&two), None);
}

#[test]
fn the_publisher_takes_over_the_slices_of_the_portmappings_it_beats() {
    let mut index = index();
    let (one, two) = (
        ObjectRef::new("web-1").within("a"),
        ObjectRef::new("web-2").within("a"),
    );
    let loser = pm("a", "web-2", "web", KeySource::Label, 20);
    index.apply_slice(slice("a", "web-http", Some(&loser), &[]));
    assert_eq!(index.losers_to(&one), ["uid-web-2"]);
    assert!(index.losers_to(&two).is_empty(), "a loser takes nothing");
    let taken = index.owned_slices("uid-web-1", &index.losers_to(&one), "a", None);
    let taken: Vec<_> = taken.iter().map(|s| s.metadata.name.as_deref()).collect();
    assert_eq!(taken, [Some("web-http")]);
}

#[test]
fn same_second_ties_break_by_name_and_a_deleting_portmapping_never_wins() {
    let mut index = Index::new();
    index.apply_portmapping(&pm("a", "zz", "web", KeySource::Label, 10));
    let affected = index.apply_portmapping(&pm("a", "aa", "web", KeySource::Label, 10));
    // The newcomer may take the Service: both hear of it.
    assert_eq!(names(affected.affected), ["a/aa", "a/zz"]);
    let zz = ObjectRef::new("zz").within("a");
    assert_eq!(
        index.service_winner(&zz),
        Some(ObjectRef::new("aa").within("a"))
    );
    let mut aa = pm("a", "aa", "web", KeySource::Label, 10);
    aa.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
    assert_eq!(
        names(index.apply_portmapping(&aa).affected),
        ["a/aa", "a/zz"]
    );
    assert_eq!(index.service_winner(&zz), None);
}

#[test]
fn an_unchanged_portmapping_reaches_only_itself() {
    let mut index = index();
    let again = index.apply_portmapping(&pm("a", "web-1", "web", KeySource::Label, 10));
    assert_eq!(names(again.affected), ["a/web-1"]);
    assert_eq!(again.reindex, None);
}

#[test]
fn a_status_only_change_reaches_nobody_once_the_server_keeps_generations() {
    let mut index = Index::new();
    let mut web = pm("a", "web", "web", KeySource::Label, 10);
    web.metadata.generation = Some(1);
    assert_eq!(names(index.apply_portmapping(&web).affected), ["a/web"]);
    web.metadata.resource_version = Some("2".into());
    web.status = Some(Default::default());
    assert!(
        index.apply_portmapping(&web).affected.is_empty(),
        "the echo of a status write"
    );
    web.metadata.annotations = Some([("note".to_owned(), "x".to_owned())].into());
    assert_eq!(names(index.apply_portmapping(&web).affected), ["a/web"]);
    web.metadata.generation = Some(2);
    assert_eq!(
        names(index.apply_portmapping(&web).affected),
        ["a/web"],
        "a spec change"
    );
    web.metadata.generation = None;
    assert_eq!(
        names(index.apply_portmapping(&web).affected),
        ["a/web"],
        "without generations every event counts"
    );
    assert_eq!(
        names(index.apply_portmapping(&web).affected),
        ["a/web"],
        "every one"
    );
}

#[test]
fn gate_peers_name_the_other_types_and_the_older_portmappings_of_the_same_type() {
    use portmapper_api::ReadinessGate;
    let gated = |mut pm: PortMapping, gate: &str| {
        pm.spec.readiness_gate = Some(ReadinessGate {
            condition_type: gate.into(),
            timeout_seconds: None,
        });
        pm
    };
    // Namespace a: web-1 (10) and web-2 (20) keep the default type, api (10) sets its own.
    let mut index = index();
    let api = gated(
        pm("a", "api", "api", KeySource::Label, 10),
        "example.com/api",
    );
    // A new gate type wakes every PortMapping of the namespace, not those of namespace b.
    assert_eq!(
        names(index.apply_portmapping(&api).affected),
        ["a/api", "a/web-1", "a/web-2"]
    );
    let key = |name: &str| ObjectRef::<PortMapping>::new(name).within("a");
    let (types, older) = index.gate_peers(&key("web-2"), true);
    assert_eq!(types, BTreeSet::from(["example.com/api".to_owned()]));
    assert_eq!(names(older), ["a/web-1"]);
    let (types, older) = index.gate_peers(&key("web-1"), true);
    assert_eq!(types, BTreeSet::from(["example.com/api".to_owned()]));
    assert!(older.is_empty());
    let (types, older) = index.gate_peers(&key("api"), true);
    assert_eq!(
        types,
        BTreeSet::from(["portmapper.dev/published".to_owned()])
    );
    assert!(older.is_empty());
    // web-1 goes: web-2 sets the default type alone, and hears of it.
    let gone = index.delete_portmapping(&key("web-1"));
    assert!(names(gone).contains(&"a/web-2".to_owned()));
    assert!(index.gate_peers(&key("web-2"), true).1.is_empty());
    // An unchanged PortMapping wakes only itself.
    assert_eq!(names(index.apply_portmapping(&api).affected), ["a/api"]);
}

#[test]
fn a_relist_forgets_what_it_no_longer_lists() {
    let mut index = index();
    let (p1, p2) = (
        pod("a", "p1", &[(KEY, "web")], &[]),
        pod("a", "p2", &[(KEY, "api")], &[]),
    );
    index.apply_pod(&label(), Arc::new(PodRecord::from(p1.clone())));
    index.apply_pod(&label(), Arc::new(PodRecord::from(p2.clone())));
    let present = HashSet::from([ObjectRef::from_obj(&p1)]);
    assert_eq!(names(index.retain_pods(&label(), &present)), ["a/api"]);
    let present = HashSet::from([ObjectRef::new("web-1").within("a")]);
    let woken = index.retain_portmappings(&present);
    // web-2 and api are gone; web-1 shares web-2's Service; b/web is gone too.
    assert_eq!(names(woken), ["a/web-1"]);
    assert_eq!(index.portmapping_keys().count(), 1);
}
