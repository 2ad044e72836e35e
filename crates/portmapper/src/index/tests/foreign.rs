//! Slices not managed by us: native evidence and names held by others.

use super::*;

#[test]
fn native_slices_and_endpoints_reach_the_portmappings_of_their_service() {
    let mut index = index();
    let native = PartialObjectMeta::<EndpointSlice> {
        metadata: ObjectMeta {
            namespace: Some("a".into()),
            name: Some("web-abcde".into()),
            labels: Some(
                [
                    (LABEL_SERVICE_NAME.to_owned(), "web".to_owned()),
                    (
                        LABEL_MANAGED_BY.to_owned(),
                        portmapper_core::planner::migration::NATIVE_MANAGER.to_owned(),
                    ),
                ]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        ..Default::default()
    };
    assert_eq!(
        names(index.apply_foreign_slice(&native)),
        ["a/web-1", "a/web-2"]
    );
    assert_eq!(index.native_slices("a", "web").len(), 1);
    assert_eq!(
        names(index.delete_foreign_slice(&ObjectRef::from_obj(&native))),
        ["a/web-1", "a/web-2"]
    );
    assert!(index.native_slices("a", "web").is_empty());
    let web = pm("a", "web-1", "web", KeySource::Label, 10);
    let mut ep = Endpoints {
        metadata: slice("a", "web", Some(&web), &[]).metadata,
        subsets: None,
    };
    assert_eq!(names(index.apply_endpoints(&ep)), ["a/web-1"]);
    assert_eq!(index.owned_endpoints("uid-web-1").len(), 1);
    ep.metadata.owner_references = None;
    assert_eq!(names(index.apply_endpoints(&ep)), ["a/web-1", "a/web-2"]);
    assert!(index.owned_endpoints("uid-web-1").is_empty());
}

#[test]
fn names_held_by_others_are_found_by_service_prefix_and_their_release_wakes_the_service() {
    let mut index = index();
    let web1 = pm("a", "web-1", "web", KeySource::Label, 10);
    let web2 = pm("a", "web-2", "web", KeySource::Label, 20);
    let squatter = foreign("a", "web.http", Some("someone-else"));
    // A squatter at a name of web's: web's PortMappings hear of it (a collision may start).
    assert_eq!(
        names(index.apply_foreign_slice(&squatter)),
        ["a/web-1", "a/web-2"]
    );
    // Names of other Services, other namespaces, and a native slice named by generateName
    // are never wanted by web's plans; none of them wakes web.
    for other in [
        foreign("a", "webx.http", None),
        foreign(
            "a",
            "web-abcde",
            Some(portmapper_core::planner::migration::NATIVE_MANAGER),
        ),
        foreign("b", "web.https", None),
    ] {
        let woken = index.apply_foreign_slice(&other);
        assert!(!names(woken).contains(&"a/web-1".to_owned()));
    }
    index.apply_foreign_slice(&foreign("a", "web", None));
    // Our labelled slices: web-1's own, and web-2's (another PortMapping's) at web.admin.
    index.apply_slice(slice("a", "web.metrics", Some(&web1), &[]));
    index.apply_slice(slice("a", "web.admin", Some(&web2), &[]));
    let held = index.held_by_others("a", "web", "uid-web-1", true, &[]);
    assert_eq!(
        held.iter()
            .map(|(n, h)| format!("{n}: {h}"))
            .collect::<Vec<_>>(),
        [
            "web: created by someone else",
            "web.admin: owned by PortMapping web-2",
            "web.http: managed by someone-else",
        ]
    );
    // The PortMapping it takes over from holds nothing against it.
    let held = index.held_by_others("a", "web", "uid-web-1", true, &["uid-web-2".into()]);
    assert_eq!(held.keys().collect::<Vec<_>>(), ["web", "web.http"]);
    // The squatter goes: its name is free, and web's PortMappings hear of it at once.
    assert_eq!(
        names(index.delete_foreign_slice(&ObjectRef::from_obj(&squatter))),
        ["a/web-1", "a/web-2"]
    );
    let held = index.held_by_others("a", "web", "uid-web-1", true, &["uid-web-2".into()]);
    assert_eq!(held.keys().collect::<Vec<_>>(), ["web"]);
    // Only a native or mirroring controller's slice is migration evidence.
    assert_eq!(index.native_slices("a", "web-abcde").len(), 0);
    // (Five slices without a Service label in namespace a; one of them is native.)
    assert_eq!(index.native_slices("a", "").len(), 1);
}

#[test]
fn names_of_a_long_service_are_found_by_the_cut_its_port_set_names_start_with() {
    let mut index = index();
    let service = format!("{}-tail", "l".repeat(40));
    let cut = portmapper_core::planner::naming::name_prefix(&service).to_owned();
    assert_ne!(cut, service);
    let long = pm("a", "long", &service, KeySource::Label, 10);
    index.apply_portmapping(&long);
    let squatter = foreign("a", &format!("{cut}.http.bcdfghjklm"), Some("someone-else"));
    assert_eq!(names(index.apply_foreign_slice(&squatter)), ["a/long"]);
    let held = index.held_by_others("a", &service, "uid-long", true, &[]);
    assert_eq!(
        held.keys().cloned().collect::<Vec<_>>(),
        [squatter.metadata.name.clone().unwrap_or_default()]
    );
    assert_eq!(
        names(index.delete_foreign_slice(&ObjectRef::from_obj(&squatter))),
        ["a/long"]
    );
    assert!(
        index
            .held_by_others("a", &service, "uid-long", true, &[])
            .is_empty()
    );
    // Gone with its PortMapping.
    index.delete_portmapping(&ObjectRef::from_obj(&long));
    assert!(names(index.apply_foreign_slice(&squatter)).is_empty());
}
