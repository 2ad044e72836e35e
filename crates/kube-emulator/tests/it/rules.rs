//! One test per rule of docs/emulator-spec.md §0; each would fail if the rule were broken.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::{Value, json};

use crate::common::{Widget, WidgetSpec, WidgetStatus, emu, install_widget_crd, raw};

fn cm(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":name,"labels":labels},"data":{"k":"v"}})).unwrap()
}

#[tokio::test]
async fn rule1_empty_list_has_resource_version() {
    let emu = emu().await;
    let api: Api<EndpointSlice> = Api::namespaced(emu.client().unwrap(), "default");
    let l = api.list(&ListParams::default()).await.unwrap();
    assert!(l.items.is_empty());
    let rv = l.metadata.resource_version.expect("list RV present");
    assert!(
        !rv.is_empty() && rv.parse::<u64>().unwrap() > 0,
        "rv {rv:?}"
    );
    // Paged empty list too.
    let l = api.list(&ListParams::default().limit(5)).await.unwrap();
    assert!(!l.metadata.resource_version.unwrap_or_default().is_empty());
}

#[tokio::test]
async fn rule2_too_old_watch_is_http_200_with_error_410_event() {
    let emu = emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    api.create(&PostParams::default(), &cm("a", json!({})))
        .await
        .unwrap();
    emu.compact_now(false);
    api.create(&PostParams::default(), &cm("b", json!({})))
        .await
        .unwrap();
    // Raw wire: status line 200 and one ERROR line with code 410.
    let (code, body) = raw(
        &emu,
        "GET",
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=2&timeoutSeconds=5",
        &[],
        "",
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let first: Value = serde_json::from_str(body.lines().next().unwrap()).unwrap();
    assert_eq!(first["type"], "ERROR");
    assert_eq!(first["object"]["code"], 410);
    assert_eq!(first["object"]["reason"], "Expired");
    assert_eq!(body.lines().count(), 1, "the stream closes after the error");
    // kube sees it as a WatchEvent::Error(410) (not a failed request).
    let mut s = api
        .watch(&WatchParams::default().timeout(5), "2")
        .await
        .expect("watch request succeeds")
        .boxed();
    match s.try_next().await.unwrap() {
        Some(WatchEvent::Error(e)) => assert_eq!(e.code, 410),
        other => panic!("expected 410 error event, got {other:?}"),
    }
}

#[tokio::test]
async fn rule3_events_carry_rv_and_deleted_has_deletion_revision() {
    let emu = emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    let created = api
        .create(&PostParams::default(), &cm("a", json!({})))
        .await
        .unwrap();
    let created_rv: u64 = created
        .metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()
        .unwrap();
    let mut s = api
        .watch(&WatchParams::default().timeout(10), &created_rv.to_string())
        .await
        .unwrap()
        .boxed();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data":{"k":"w"}})),
    )
    .await
    .unwrap();
    let got = api.get("a").await.unwrap();
    let last_write_rv: u64 = got.metadata.resource_version.unwrap().parse().unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let mut rvs = Vec::new();
    while rvs.len() < 2 {
        match s.try_next().await.unwrap().unwrap() {
            WatchEvent::Modified(o) => rvs.push((
                "MODIFIED",
                o.metadata.resource_version.unwrap().parse::<u64>().unwrap(),
            )),
            WatchEvent::Deleted(o) => rvs.push((
                "DELETED",
                o.metadata.resource_version.unwrap().parse::<u64>().unwrap(),
            )),
            WatchEvent::Bookmark(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(rvs[0], ("MODIFIED", last_write_rv));
    assert_eq!(rvs[1].0, "DELETED");
    assert!(
        rvs[1].1 > last_write_rv,
        "DELETED carries the deletion revision {rvs:?}"
    );
}

#[tokio::test]
async fn rule4_bookmarks_have_type_meta() {
    let emu = emu().await;
    let (code, body) =
        raw(&emu, "GET", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?watch=1&allowWatchBookmarks=true&timeoutSeconds=1&resourceVersion=1", &[], "").await;
    assert_eq!(code, 200);
    let bm: Value = body
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["type"] == "BOOKMARK")
        .expect("a bookmark within 1s");
    assert_eq!(bm["object"]["kind"], "EndpointSlice");
    assert_eq!(bm["object"]["apiVersion"], "discovery.k8s.io/v1");
    assert!(
        !bm["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .is_empty()
    );
    // kube parses it as a Bookmark.
    let api: Api<EndpointSlice> = Api::namespaced(emu.client().unwrap(), "default");
    let mut s = api
        .watch(&WatchParams::default().timeout(3), "1")
        .await
        .unwrap()
        .boxed();
    assert!(matches!(
        s.try_next().await.unwrap(),
        Some(WatchEvent::Bookmark(_))
    ));
}

#[tokio::test]
async fn rule5_identical_write_does_not_bump_rv_or_emit_event() {
    let emu = emu().await;
    let client = emu.client().unwrap();
    install_widget_crd(&client).await;
    let api: Api<Widget> = Api::namespaced(client, "default");
    api.create(
        &PostParams::default(),
        &Widget::new(
            "w",
            WidgetSpec {
                size: 1,
                color: None,
            },
        ),
    )
    .await
    .unwrap();
    let status = json!({"apiVersion":"example.com/v1","kind":"Widget","status":{"observedGeneration":1,"ready":true}});
    let pp = PatchParams::apply("op").force();
    let first = api
        .patch_status("w", &pp, &Patch::Apply(&status))
        .await
        .unwrap();
    let rv = first.metadata.resource_version.clone().unwrap();
    let mut s = api
        .watch(&WatchParams::default().timeout(2), &rv)
        .await
        .unwrap()
        .boxed();
    for _ in 0..3 {
        let again = api
            .patch_status("w", &pp, &Patch::Apply(&status))
            .await
            .unwrap();
        assert_eq!(
            again.metadata.resource_version.as_deref(),
            Some(rv.as_str()),
            "no-op apply keeps RV"
        );
    }
    // Identical merge patch and PUT are no-ops too.
    let same = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec":{"size":1}})),
        )
        .await
        .unwrap();
    assert_eq!(same.metadata.resource_version.as_deref(), Some(rv.as_str()));
    let put = api
        .replace("w", &PostParams::default(), &same)
        .await
        .unwrap();
    assert_eq!(put.metadata.resource_version.as_deref(), Some(rv.as_str()));
    while let Some(ev) = s.try_next().await.unwrap() {
        assert!(
            matches!(ev, WatchEvent::Bookmark(_)),
            "no event expected, got {ev:?}"
        );
    }
}

#[tokio::test]
async fn rule6_generation_only_changes_on_spec() {
    let emu = emu().await;
    let client = emu.client().unwrap();
    install_widget_crd(&client).await;
    let api: Api<Widget> = Api::namespaced(client, "default");
    let w = api
        .create(
            &PostParams::default(),
            &Widget::new(
                "w",
                WidgetSpec {
                    size: 1,
                    color: None,
                },
            ),
        )
        .await
        .unwrap();
    assert_eq!(w.metadata.generation, Some(1));
    let w = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata":{"labels":{"a":"b"},"annotations":{"x":"y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(w.metadata.generation, Some(1), "metadata-only change");
    let mut w2 = w.clone();
    w2.status = Some(WidgetStatus {
        observed_generation: Some(1),
        ready: Some(true),
    });
    let w = api
        .replace_status("w", &PostParams::default(), &w2)
        .await
        .unwrap();
    assert_eq!(w.metadata.generation, Some(1), "/status write");
    assert_eq!(w.status.as_ref().unwrap().ready, Some(true));
    // status sent to the main endpoint is ignored (status subresource).
    let w = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status":{"ready":false}})),
        )
        .await
        .unwrap();
    assert_eq!(w.status.unwrap().ready, Some(true));
    assert_eq!(w.metadata.generation, Some(1));
    let w = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec":{"size":2}})),
        )
        .await
        .unwrap();
    assert_eq!(w.metadata.generation, Some(2), "spec change");
}

#[tokio::test]
async fn rule7_empty_metadata_collections_are_omitted() {
    let emu = emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    let mut c = cm("a", json!({}));
    c.metadata.finalizers = Some(vec!["example.com/x".into()]);
    c.metadata.annotations = Some(Default::default());
    api.create(&PostParams::default(), &c).await.unwrap();
    let (_, body) = raw(
        &emu,
        "GET",
        "/api/v1/namespaces/default/configmaps/a",
        &[],
        "",
    )
    .await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(
        v["metadata"].get("labels").is_none() && v["metadata"].get("annotations").is_none(),
        "{v}"
    );
    // Remove the finalizer by JSON patch; then kube's finalizer-helper style `test null` must pass.
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Json::<()>(
            serde_json::from_value(json!([{"op":"remove","path":"/metadata/finalizers/0"}]))
                .unwrap(),
        ),
    )
    .await
    .unwrap();
    let (_, body) = raw(
        &emu,
        "GET",
        "/api/v1/namespaces/default/configmaps/a",
        &[],
        "",
    )
    .await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(
        v["metadata"].get("finalizers").is_none(),
        "finalizers: [] must be omitted: {v}"
    );
    let p: json_patch::Patch = serde_json::from_value(json!([
        {"op":"test","path":"/metadata/finalizers","value":null},
        {"op":"add","path":"/metadata/finalizers","value":["example.com/y"]}
    ]))
    .unwrap();
    let got = api
        .patch("a", &PatchParams::default(), &Patch::Json::<()>(p))
        .await
        .unwrap();
    assert_eq!(
        got.metadata.finalizers,
        Some(vec!["example.com/y".to_string()])
    );
}

#[tokio::test]
async fn rule8_form_urlencoded_queries() {
    let emu = emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    for (n, app) in [("a", "x"), ("b", "y"), ("c", "z")] {
        api.create(&PostParams::default(), &cm(n, json!({"app": app})))
            .await
            .unwrap();
    }
    // kube encodes `app in (x,y)` as app+in+%28x%2Cy%29 after a leading `?&`.
    let l = api
        .list(&ListParams::default().labels("app in (x,y)"))
        .await
        .unwrap();
    let names: Vec<_> = l
        .items
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, vec!["a", "b"]);
    let (code, body) = raw(
        &emu,
        "GET",
        "/api/v1/namespaces/default/configmaps?&labelSelector=app+notin+%28x%2Cy%29",
        &[],
        "",
    )
    .await;
    assert_eq!(code, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["items"].as_array().unwrap().len(), 1);
    assert_eq!(v["items"][0]["metadata"]["name"], "c");
}

#[tokio::test]
async fn rule9_partial_object_metadata() {
    let emu = emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    api.create(&PostParams::default(), &cm("a", json!({"app":"x"})))
        .await
        .unwrap();
    let l = api.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(l.items.len(), 1);
    assert_eq!(l.items[0].metadata.labels.as_ref().unwrap()["app"], "x");
    let m = api.get_metadata("a").await.unwrap();
    assert_eq!(m.metadata.name.as_deref(), Some("a"));
    let (_, body) = raw(
        &emu,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        &[(
            "Accept",
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        )],
        "",
    )
    .await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["kind"], "PartialObjectMetadataList");
    assert!(v["items"][0].get("data").is_none());
    let rv = l.metadata.resource_version.unwrap();
    let mut s = api
        .watch_metadata(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata":{"labels":{"app":"y"}}})),
    )
    .await
    .unwrap();
    loop {
        match s.try_next().await.unwrap().unwrap() {
            WatchEvent::Modified(o) => {
                assert_eq!(o.metadata.labels.unwrap()["app"], "y");
                break;
            }
            WatchEvent::Bookmark(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn rule10_crd_served_only_after_established() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::CustomResourceExt;
    let emu = kube_emulator::Emulator::builder()
        .crd_establish_delay(Duration::from_secs(2))
        .start()
        .await
        .unwrap();
    let client = emu.client().unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &Widget::crd())
        .await
        .unwrap();
    let widgets: Api<Widget> = Api::namespaced(client.clone(), "default");
    let err = widgets.list(&ListParams::default()).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 404),
        "{err:?}"
    );
    let (code, _) = raw(&emu, "GET", "/apis/example.com/v1", &[], "").await;
    assert_eq!(code, 404, "not in discovery before Established");
    let est = kube::runtime::wait::await_condition(
        crds,
        "widgets.example.com",
        kube::runtime::wait::conditions::is_crd_established(),
    );
    tokio::time::timeout(Duration::from_secs(10), est)
        .await
        .unwrap()
        .unwrap();
    widgets
        .list(&ListParams::default())
        .await
        .expect("served once Established");
    let (code, body) = raw(&emu, "GET", "/apis/example.com/v1", &[], "").await;
    assert_eq!(code, 200);
    assert!(body.contains("\"widgets\""));
}
