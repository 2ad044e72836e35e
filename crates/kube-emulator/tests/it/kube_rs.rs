//! kube-rs conformance: watcher (paged list, bookmarks, 410 relist, resumed watch), reflector,
//! streaming lists, server-side apply (create/update/conflict/force), deletion with finalizers.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;

use crate::common::emu;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(
        json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":name},"data":{"k":"v"}}),
    )
    .unwrap()
}

fn slice(name: &str, ip: &str) -> serde_json::Value {
    json!({"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
           "metadata":{"name":name,"labels":{"kubernetes.io/service-name":"web","endpointslice.kubernetes.io/managed-by":"my-op"}},
           "addressType":"IPv4","endpoints":[{"addresses":[ip],"conditions":{"ready":true}}],"ports":[{"port":8080}]})
}

async fn next_event<S>(s: &mut S) -> watcher::Event<ConfigMap>
where
    S: futures::Stream<Item = Result<watcher::Event<ConfigMap>, watcher::Error>> + Unpin,
{
    loop {
        match tokio::time::timeout(Duration::from_secs(10), s.next())
            .await
            .expect("event in time")
        {
            Some(Ok(e)) => return e,
            Some(Err(e)) => eprintln!("watcher error (expected around relists): {e}"),
            None => panic!("stream ended"),
        }
    }
}

#[tokio::test]
async fn watcher_pages_bookmarks_resumes_and_relists_on_410() {
    let emu = emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    for i in 0..5 {
        api.create(&PostParams::default(), &cm(&format!("c{i}")))
            .await
            .unwrap();
    }
    let mut s = watcher(api.clone(), watcher::Config::default().page_size(2)).boxed();
    assert!(matches!(next_event(&mut s).await, watcher::Event::Init));
    let mut init = 0;
    loop {
        match next_event(&mut s).await {
            watcher::Event::InitApply(_) => init += 1,
            watcher::Event::InitDone => break,
            e => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(init, 5);
    let pages = emu
        .requests()
        .filter(|r| r.verb == "list" && r.resource == "configmaps");
    assert_eq!(pages.len(), 3, "5 items in pages of 2: {pages:?}");
    assert!(pages[1].query.contains("continue="));
    // Live event.
    api.create(&PostParams::default(), &cm("live"))
        .await
        .unwrap();
    assert!(
        matches!(next_event(&mut s).await, watcher::Event::Apply(o) if o.metadata.name.as_deref() == Some("live"))
    );
    // Let bookmarks advance the watcher's RV, then drop the watch cleanly: resume, no relist.
    tokio::time::sleep(Duration::from_millis(700)).await;
    emu.inject(
        kube_emulator::faults::Rule::new(kube_emulator::faults::FaultAction::WatchDrop {
            after_events: None,
            after_ms: Some(100),
            mode: kube_emulator::faults::DropMode::Clean,
        })
        .watch(true)
        .times(1),
    );
    // The rule applies to the next watch request; close the current one so it re-watches.
    emu.restart(Duration::from_millis(1), kube_emulator::History::Keep)
        .await;
    api.create(&PostParams::default(), &cm("after-resume"))
        .await
        .unwrap();
    assert!(
        matches!(next_event(&mut s).await, watcher::Event::Apply(o) if o.metadata.name.as_deref() == Some("after-resume"))
    );
    let lists_before = emu
        .requests()
        .filter(|r| r.verb == "list" && r.resource == "configmaps")
        .len();
    assert_eq!(lists_before, 3, "a resumed watch does not relist");
    let watches = emu
        .requests()
        .filter(|r| r.verb == "watch" && r.resource == "configmaps");
    assert!(
        watches.len() >= 2
            && watches
                .iter()
                .all(|w| w.query.contains("allowWatchBookmarks=true"))
    );
    // Compaction + closed watches: the resumed watch gets 410 → full relist (Init..InitDone).
    api.delete("c0", &DeleteParams::default()).await.unwrap();
    let _ = next_event(&mut s).await; // Delete(c0)
    emu.compact_now(true);
    api.delete("c1", &DeleteParams::default()).await.unwrap();
    let mut saw_init = false;
    loop {
        match next_event(&mut s).await {
            watcher::Event::Init => saw_init = true,
            watcher::Event::InitApply(o) => assert_ne!(o.metadata.name.as_deref(), Some("c1")),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert!(saw_init);
    let lists = emu
        .requests()
        .filter(|r| r.verb == "list" && r.resource == "configmaps")
        .len();
    assert!(lists > lists_before);
}

#[tokio::test]
async fn reflector_tracks_state_and_streaming_list_works() {
    let emu = emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let (reader, writer) = reflector::store();
    let stream = reflector(
        writer,
        watcher(api.clone(), watcher::Config::default().streaming_lists()),
    )
    .applied_objects();
    let task = tokio::spawn(async move {
        let mut s = stream.boxed();
        while s.try_next().await.is_ok() {}
    });
    tokio::time::timeout(Duration::from_secs(5), reader.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reader.len(), 1);
    api.create(&PostParams::default(), &cm("b")).await.unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let names: Vec<String> = reader
            .state()
            .iter()
            .map(|c| c.metadata.name.clone().unwrap())
            .collect();
        if names == vec!["b".to_string()] {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "store {names:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let w = emu.requests().filter(|r| r.verb == "watch");
    assert!(w[0].query.contains("sendInitialEvents=true"), "{:?}", w[0]);
    task.abort();
}

#[tokio::test]
async fn server_side_apply_create_update_conflict_force() {
    let emu = emu().await;
    let api: Api<EndpointSlice> = Api::namespaced(emu.client().unwrap(), "default");
    let created = api
        .patch(
            "web-a",
            &PatchParams::apply("my-op"),
            &Patch::Apply(slice("web-a", "10.1.2.3")),
        )
        .await
        .unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(
        created.ports.as_ref().unwrap()[0].protocol.as_deref(),
        Some("TCP"),
        "defaults applied"
    );
    let mf = created.metadata.managed_fields.clone().unwrap();
    assert_eq!(mf[0].manager.as_deref(), Some("my-op"));
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));
    let rv = created.metadata.resource_version.clone();
    // Identical re-apply: no write.
    let again = api
        .patch(
            "web-a",
            &PatchParams::apply("my-op"),
            &Patch::Apply(slice("web-a", "10.1.2.3")),
        )
        .await
        .unwrap();
    assert_eq!(again.metadata.resource_version, rv);
    // Endpoints change bumps generation.
    let changed = api
        .patch(
            "web-a",
            &PatchParams::apply("my-op"),
            &Patch::Apply(slice("web-a", "10.1.2.4")),
        )
        .await
        .unwrap();
    assert_eq!(changed.metadata.generation, Some(2));
    // Another writer takes a label with an Update; applying a different value conflicts.
    api.patch(
        "web-a",
        &PatchParams {
            field_manager: Some("kubectl-edit".into()),
            ..Default::default()
        },
        &Patch::Merge(json!({"metadata":{"labels":{"tier":"x"}}})),
    )
    .await
    .unwrap();
    let mut mine = slice("web-a", "10.1.2.4");
    mine["metadata"]["labels"]["tier"] = json!("y");
    let err = api
        .patch("web-a", &PatchParams::apply("my-op"), &Patch::Apply(&mine))
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 409);
            assert_eq!(s.reason, "Conflict");
            assert!(
                s.message.contains("conflict with \"kubectl-edit\""),
                "{}",
                s.message
            );
            assert!(s.message.contains(".metadata.labels.tier"), "{}", s.message);
        }
        e => panic!("{e:?}"),
    }
    let forced = api
        .patch(
            "web-a",
            &PatchParams::apply("my-op").force(),
            &Patch::Apply(&mine),
        )
        .await
        .unwrap();
    assert_eq!(forced.metadata.labels.unwrap()["tier"], "y");
    // Validation through kube-validation: a loopback address is rejected with the upstream message.
    let err = api
        .patch(
            "web-b",
            &PatchParams::apply("my-op"),
            &Patch::Apply(slice("web-b", "127.0.0.1")),
        )
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 422);
            assert!(
                s.message.starts_with(
                    "EndpointSlice.discovery.k8s.io \"web-b\" is invalid: endpoints[0].addresses[0]"
                ),
                "{}",
                s.message
            );
        }
        e => panic!("{e:?}"),
    }
}

#[tokio::test]
async fn deletion_with_finalizers_and_optimistic_concurrency() {
    let emu = emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    let mut c = cm("f");
    c.metadata.finalizers = Some(vec!["example.com/block".into()]);
    let created = api.create(&PostParams::default(), &c).await.unwrap();
    // Stale RV → 409.
    let mut stale = created.clone();
    api.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"data":{"k":"2"}})),
    )
    .await
    .unwrap();
    stale.data = Some([("k".to_string(), "3".to_string())].into());
    let err = api
        .replace("f", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(s) if s.code == 409 && s.message.contains("the object has been modified"))
    );
    // Delete with a finalizer: pending (Left), deletionTimestamp set.
    let res = api.delete("f", &DeleteParams::default()).await.unwrap();
    let pending = res.left().expect("object returned while finalizers remain");
    assert!(pending.metadata.deletion_timestamp.is_some());
    // Adding a finalizer now is forbidden.
    let err = api
        .patch(
            "f",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata":{"finalizers":["example.com/block","x.io/new"]}})),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 422));
    // Removing the last finalizer completes the deletion.
    api.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata":{"finalizers":null}})),
    )
    .await
    .unwrap();
    assert!(matches!(api.get("f").await.unwrap_err(), kube::Error::Api(s) if s.code == 404));
    // A plain delete returns a success Status (Right).
    api.create(&PostParams::default(), &cm("g")).await.unwrap();
    let res = api.delete("g", &DeleteParams::default()).await.unwrap();
    assert!(res.right().is_some());
    // deletecollection with a label selector.
    let list = api.list(&ListParams::default()).await.unwrap();
    assert!(list.items.is_empty());
}

#[tokio::test]
async fn service_defaults_allocation_and_validation() {
    use k8s_openapi::api::core::v1::Service;
    let emu = emu().await;
    let api: Api<Service> = Api::namespaced(emu.client().unwrap(), "default");
    let svc: Service = serde_json::from_value(json!({"apiVersion":"v1","kind":"Service","metadata":{"name":"web"},
        "spec":{"ports":[{"name":"http","port":80},{"name":"https","port":443,"targetPort":"tls"}]}}))
    .unwrap();
    let s = api.create(&PostParams::default(), &svc).await.unwrap();
    let spec = s.spec.unwrap();
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert!(spec.cluster_ip.as_deref().unwrap().starts_with("10.96."));
    assert_eq!(spec.cluster_ips.as_ref().unwrap().len(), 1);
    assert_eq!(
        spec.ports.as_ref().unwrap()[0].protocol.as_deref(),
        Some("TCP")
    );
    assert_eq!(
        serde_json::to_value(&spec.ports.as_ref().unwrap()[0].target_port).unwrap(),
        json!(80)
    );
    // A PUT without clusterIP keeps the allocated one.
    let mut again = api.get("web").await.unwrap();
    let ip = again.spec.as_ref().unwrap().cluster_ip.clone();
    again.spec.as_mut().unwrap().cluster_ip = None;
    again.spec.as_mut().unwrap().cluster_ips = None;
    let after = api
        .replace("web", &PostParams::default(), &again)
        .await
        .unwrap();
    assert_eq!(after.spec.unwrap().cluster_ip, ip);
    // Two unnamed ports: rejected by kube-validation's Service rules.
    let bad: Service = serde_json::from_value(
        json!({"apiVersion":"v1","kind":"Service","metadata":{"name":"bad"},
        "spec":{"ports":[{"port":80},{"port":81}]}}),
    )
    .unwrap();
    let err = api.create(&PostParams::default(), &bad).await.unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 422);
            assert!(
                s.message.starts_with("Service \"bad\" is invalid: "),
                "{}",
                s.message
            );
            assert!(
                s.message.contains("spec.ports[0].name: Required value"),
                "{}",
                s.message
            );
        }
        e => panic!("{e:?}"),
    }
}

#[tokio::test]
async fn discovery_legacy_and_aggregated_follow_crds() {
    use kube::discovery::{Discovery, verbs};
    let emu = emu().await;
    let client = emu.client().unwrap();
    for aggregated in [false, true] {
        let d = Discovery::new(client.clone());
        let d = if aggregated {
            d.run_aggregated().await.unwrap()
        } else {
            d.run().await.unwrap()
        };
        assert!(
            d.has_group("discovery.k8s.io") && d.has_group("coordination.k8s.io"),
            "aggregated={aggregated}"
        );
        assert!(!d.has_group("example.com"));
        let gvk = kube::api::GroupVersionKind::gvk("discovery.k8s.io", "v1", "EndpointSlice");
        let (ar, caps) = d.resolve_gvk(&gvk).expect("EndpointSlice discovered");
        assert_eq!(ar.plural, "endpointslices");
        assert!(caps.supports_operation(verbs::WATCH) && caps.supports_operation(verbs::PATCH));
        let core = d
            .resolve_gvk(&kube::api::GroupVersionKind::gvk("", "v1", "Service"))
            .expect("core group");
        assert!(
            core.1
                .subresources
                .iter()
                .any(|(r, _)| r.plural == "services/status" || r.plural == "status"),
            "{:?}",
            core.1.subresources
        );
    }
    crate::common::install_widget_crd(&client).await;
    let d = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .unwrap();
    let (ar, _) = d
        .resolve_gvk(&kube::api::GroupVersionKind::gvk(
            "example.com",
            "v1",
            "Widget",
        ))
        .expect("CRD in discovery once Established");
    assert_eq!(ar.plural, "widgets");
}

#[tokio::test]
async fn status_on_types_without_it_is_404() {
    let emu = emu().await;
    let (code, body) = crate::common::raw(
        &emu,
        "GET",
        "/api/v1/namespaces/default/configmaps/x/status",
        &[],
        "",
    )
    .await;
    assert_eq!(code, 404, "{body}");
    let (code, _) =
        crate::common::raw(&emu, "GET", "/api/v1/namespaces/default/nope", &[], "").await;
    assert_eq!(code, 404);
    let (code, body) = crate::common::raw(&emu, "GET", "/nonsense", &[], "").await;
    assert_eq!((code, body.as_str()), (404, "404 page not found"));
    let (code, _) = crate::common::raw(
        &emu,
        "POST",
        "/api/v1/namespaces/default/configmaps/x",
        &[],
        "{}",
    )
    .await;
    assert_eq!(code, 405);
    let (code, body) = crate::common::raw(
        &emu,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[("Content-Type", "application/vnd.kubernetes.protobuf")],
        "x",
    )
    .await;
    // Protobuf bodies are decoded: one without the `k8s\0` envelope is a bad request.
    assert_eq!(code, 400);
    assert!(
        body.contains("does not appear to be a protobuf message"),
        "{body}"
    );
    let (code, body) = crate::common::raw(
        &emu,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[("Content-Type", "application/cbor")],
        "x",
    )
    .await;
    assert_eq!(code, 415);
    assert!(body.contains("not emulated"), "{body}");
    let (code, _) = crate::common::raw(
        &emu,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        &[("Accept", "application/vnd.kubernetes.protobuf")],
        "",
    )
    .await;
    assert_eq!(code, 406);
    let (code, body) = crate::common::raw(
        &emu,
        "GET",
        "/api/v1/namespaces/default/pods/p/log",
        &[],
        "",
    )
    .await;
    assert_eq!(code, 404);
    assert!(body.contains("not emulated"), "{body}");
}
