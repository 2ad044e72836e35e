//! Reads of older revisions (docs/emulator-spec.md §3.3): exact-resourceVersion lists materialised
//! from the event history, paged from one snapshot, 410 once the history no longer reaches back.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, VersionMatch};
use serde_json::{Value, json};

use crate::common::{emu, name_and, pairs, raw};

fn cm(name: &str, app: &str, v: &str) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion":"v1","kind":"ConfigMap",
        "metadata":{"name":name,"labels":{"app":app}},"data":{"v":v}}))
    .unwrap()
}

async fn get_json(emu: &kube_emulator::Emulator, path: &str) -> (u16, Value) {
    let (code, body) = raw(emu, "GET", path, &[], "").await;
    (code, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// `(name, data.v, resourceVersion)` of every item.
fn items(list: &Value) -> Vec<(String, String, String)> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap().to_string(),
                o["data"]["v"].as_str().unwrap_or_default().to_string(),
                o["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect()
}

/// a, b (app=x) and c (app=y) at revision `n`; then a is modified, b deleted, c relabelled
/// to app=x and d created. Returns the api, `n` and the stored objects as they were at `n`.
async fn history(emu: &kube_emulator::Emulator) -> (Api<ConfigMap>, u64, Vec<ConfigMap>) {
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    let mut at_n = Vec::new();
    for (name, app) in [("a", "x"), ("b", "x"), ("c", "y")] {
        at_n.push(
            api.create(&PostParams::default(), &cm(name, app, "old"))
                .await
                .unwrap(),
        );
    }
    let n = emu.resource_version();
    let pp = PatchParams::default();
    api.patch("a", &pp, &Patch::Merge(json!({"data":{"v":"new"}})))
        .await
        .unwrap();
    api.delete("b", &DeleteParams::default()).await.unwrap();
    api.patch(
        "c",
        &pp,
        &Patch::Merge(json!({"metadata":{"labels":{"app":"x"}}})),
    )
    .await
    .unwrap();
    api.create(&PostParams::default(), &cm("d", "x", "new"))
        .await
        .unwrap();
    (api, n, at_n)
}

#[tokio::test]
async fn exact_list_of_an_older_revision_returns_the_state_at_that_revision() {
    let emu = emu().await;
    let (_, n, at_n) = history(&emu).await;
    let rv_of = |name: &str| {
        at_n.iter()
            .find(|o| o.metadata.name.as_deref() == Some(name))
            .and_then(|o| o.metadata.resource_version.clone())
            .unwrap()
    };
    let base = "/api/v1/namespaces/default/configmaps";
    let (code, list) = get_json(
        &emu,
        &format!("{base}?resourceVersion={n}&resourceVersionMatch=Exact"),
    )
    .await;
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["metadata"]["resourceVersion"], json!(n.to_string()));
    // d (created later) is absent, b (deleted later) present, a and c with their old content
    // and old resourceVersions.
    assert_eq!(
        items(&list),
        vec![
            ("a".into(), "old".into(), rv_of("a")),
            ("b".into(), "old".into(), rv_of("b")),
            ("c".into(), "old".into(), rv_of("c")),
        ]
    );
    // The current state differs, so the answer above was not the current list.
    let (_, now) = get_json(&emu, base).await;
    let names: Vec<String> = items(&now).into_iter().map(|i| i.0).collect();
    assert_eq!(names, ["a", "c", "d"]);

    // Label selector: c had app=y at n (it matches only now); field selector on a deleted object.
    let (_, sel) = get_json(
        &emu,
        &format!("{base}?labelSelector=app%3Dx&resourceVersion={n}&resourceVersionMatch=Exact"),
    )
    .await;
    let names: Vec<String> = items(&sel).into_iter().map(|i| i.0).collect();
    assert_eq!(names, ["a", "b"]);
    let (_, by_name) = get_json(
        &emu,
        &format!(
            "{base}?fieldSelector=metadata.name%3Db&resourceVersion={n}&resourceVersionMatch=Exact"
        ),
    )
    .await;
    assert_eq!(
        items(&by_name),
        vec![("b".into(), "old".into(), rv_of("b"))]
    );
}

#[tokio::test]
async fn paged_exact_list_serves_every_page_from_the_same_older_snapshot() {
    let emu = emu().await;
    let (api, n, _) = history(&emu).await;
    let base = "/api/v1/namespaces/default/configmaps";
    // Legacy exact semantics: resourceVersion=N with a limit and no resourceVersionMatch.
    let mut path = format!("{base}?limit=2&resourceVersion={n}");
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let (code, page) = get_json(&emu, &path).await;
        assert_eq!(code, 200, "{page}");
        assert_eq!(page["metadata"]["resourceVersion"], json!(n.to_string()));
        seen.extend(items(&page).into_iter().map(|i| (i.0, i.1)));
        pages += 1;
        // A write between pages must not leak into the snapshot.
        api.create(
            &PostParams::default(),
            &cm(&format!("late{pages}"), "x", "new"),
        )
        .await
        .unwrap();
        match page["metadata"]["continue"].as_str() {
            Some(tok) => path = format!("{base}?limit=2&continue={tok}"),
            None => break,
        }
    }
    assert_eq!(pages, 2);
    assert_eq!(seen, pairs(&[("a", "old"), ("b", "old"), ("c", "old")]));
}

#[tokio::test]
async fn exact_list_older_than_the_history_is_410_with_the_upstream_message() {
    let emu = emu().await;
    let (_, n, _) = history(&emu).await;
    emu.compact_now(false);
    let (code, status) = get_json(
        &emu,
        &format!(
            "/api/v1/namespaces/default/configmaps?resourceVersion={n}&resourceVersionMatch=Exact"
        ),
    )
    .await;
    assert_eq!(code, 410, "{status}");
    assert_eq!(status["reason"], "Expired");
    assert_eq!(
        status["message"],
        "The resourceVersion for the provided list is too old."
    );
    // The current revision is still an exact read (served from the current state).
    let cur = emu.resource_version();
    let (code, list) = get_json(
        &emu,
        &format!(
            "/api/v1/namespaces/default/configmaps?resourceVersion={cur}&resourceVersionMatch=Exact"
        ),
    )
    .await;
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["items"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn kube_rs_exact_version_match_lists_the_older_state() {
    let emu = emu().await;
    let (api, n, _) = history(&emu).await;
    let lp = ListParams::default()
        .labels("app=x")
        .matching(VersionMatch::Exact)
        .at(&n.to_string());
    let list = api.list(&lp).await.unwrap();
    assert_eq!(list.metadata.resource_version, Some(n.to_string()));
    let got: Vec<_> = list.items.iter().map(|o| name_and("v", o)).collect();
    assert_eq!(got, pairs(&[("a", "old"), ("b", "old")]));
    // Paged through kube-rs: the continue token keeps the snapshot.
    let page1 = api.list(&lp.clone().limit(1)).await.unwrap();
    let tok = page1.metadata.continue_.clone().unwrap();
    let page2 = api
        .list(
            &ListParams::default()
                .labels("app=x")
                .limit(1)
                .continue_token(&tok),
        )
        .await
        .unwrap();
    assert_eq!(page2.metadata.resource_version, Some(n.to_string()));
    assert_eq!(page2.items[0].metadata.name.as_deref(), Some("b"));
}
