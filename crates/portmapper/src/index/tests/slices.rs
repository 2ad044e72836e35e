//! Our slices: their owners, the pods they publish, echoes of our writes, names in doubt.

use super::*;

#[test]
fn a_published_pod_reaches_its_publisher_even_outside_every_pool() {
    let mut index = index();
    let web = pm("a", "web-1", "web", KeySource::Label, 10);
    let p = pod("a", "p1", &[(KEY, "gone")], &[]);
    assert_eq!(
        names(index.apply_slice(slice("a", "web-http", Some(&web), &[&p]))),
        ["a/web-1"]
    );
    assert_eq!(
        names(index.apply_pod(&label(), Arc::new(PodRecord::from(p.clone())))),
        ["a/web-1"]
    );
    // Once no slice publishes it, nobody hears of it.
    index.apply_slice(slice("a", "web-http", Some(&web), &[]));
    assert!(
        index
            .apply_pod(&label(), Arc::new(PodRecord::from(p.clone())))
            .is_empty()
    );
}

#[test]
fn an_echo_handled_before_its_answer_wakes_nobody_and_a_foreign_version_wakes_the_writer() {
    let mut index = index();
    let web = pm("a", "web-1", "web", KeySource::Label, 10);
    let uid = web.uid().unwrap();
    let mut written = slice("a", "web.http", Some(&web), &[]);
    let key = ObjectRef::from_obj(&written);
    written.metadata.resource_version = Some("7".into());
    index.apply_slice(written.clone());
    // Our apply is sent; its event comes before its answer.
    index.applying_slice(&uid, key.clone(), Instant::now());
    written.metadata.resource_version = Some("8".into());
    assert!(
        index.apply_slice(written.clone()).is_empty(),
        "held as a possible echo"
    );
    assert_eq!(
        index.wrote_slice(&uid, key.clone(), "8".into(), Instant::now()),
        Answered::Awaited,
        "it was the echo"
    );
    assert!(!index.own_writes_pending(&uid, Instant::now()));
    // Someone else's version comes while ours is in flight: held, then the answer wakes.
    index.applying_slice(&uid, key.clone(), Instant::now());
    written.metadata.resource_version = Some("9".into());
    assert!(index.apply_slice(written.clone()).is_empty());
    written.metadata.resource_version = Some("10".into());
    assert!(index.apply_slice(written.clone()).is_empty());
    assert_eq!(
        index.wrote_slice(&uid, key.clone(), "10".into(), Instant::now()),
        Answered::Wake
    );
    // With nothing in flight, the same event reaches the owner.
    written.metadata.resource_version = Some("11".into());
    assert_eq!(names(index.apply_slice(written.clone())), ["a/web-1"]);
}

#[test]
fn owned_slices_by_uid_and_orphans_by_service() {
    let mut index = index();
    let web = pm("a", "web-1", "web", KeySource::Label, 10);
    index.apply_slice(slice("a", "web-http", Some(&web), &[]));
    // An orphan wakes the PortMappings of its Service, which adopt it.
    assert_eq!(
        names(index.apply_slice(slice("a", "web-admin", None, &[]))),
        ["a/web-1", "a/web-2"]
    );
    let mut owned: Vec<String> = index
        .owned_slices("uid-web-1", &[], "a", Some("web"))
        .into_iter()
        .filter_map(|s| s.metadata.name.clone())
        .collect();
    owned.sort();
    assert_eq!(owned, ["web-admin", "web-http"]);
    assert_eq!(index.owned_slices("uid-web-1", &[], "a", None).len(), 1);
    assert!(index.owned_slices("uid-web-1", &[], "b", Some("web")).len() == 1);
    // A deleted slice frees its name for every PortMapping of its Service.
    let gone = index.delete_slice(&ObjectRef::new("web-http").within("a"));
    assert_eq!(names(gone), ["a/web-1", "a/web-2"]);
    assert!(index.owned_slices("uid-web-1", &[], "a", None).is_empty());
}

#[test]
fn a_slice_leaving_our_watch_without_our_delete_is_in_doubt_until_the_other_watch_shows_it() {
    let mut index = index();
    let web1 = pm("a", "web-1", "web", KeySource::Label, 10);
    let ours = slice("a", "web.http", Some(&web1), &[]);
    let key = ObjectRef::from_obj(&ours);
    index.apply_slice(ours.clone());
    // Relabelled (or deleted) by someone: our watch says DELETED either way.
    index.delete_slice(&key);
    assert_eq!(index.names_in_doubt("a", "web"), ["web.http"]);
    assert!(index.names_in_doubt("a", "api").is_empty());
    // The watch of slices not ours shows it: classified from there on, no more doubt.
    let relabelled = foreign("a", "web.http", Some("someone-else"));
    index.apply_foreign_slice(&relabelled);
    assert!(index.names_in_doubt("a", "web").is_empty());
    assert_eq!(
        index
            .held_by_others("a", "web", "uid-web-1", true, &[])
            .keys()
            .collect::<Vec<_>>(),
        ["web.http"]
    );
    // Our own deletion is no doubt.
    index.delete_foreign_slice(&ObjectRef::from_obj(&relabelled));
    index.apply_slice(ours.clone());
    index.deleted_slice("uid-web-1", key.clone(), Instant::now());
    index.delete_slice(&key);
    assert!(index.names_in_doubt("a", "web").is_empty());
    // A read that finds it gone resolves it too.
    index.apply_slice(ours.clone());
    index.delete_slice(&key);
    index.doubt_resolved("a", "web.http");
    assert!(index.names_in_doubt("a", "web").is_empty());
}
