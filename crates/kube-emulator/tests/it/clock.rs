//! The injectable clock (docs/emulator-spec.md §7.1): server-set times come from it, and the
//! time-based expiry of continue tokens and of the event history follows it.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube_emulator::{Clock, Emulator};
use serde_json::{Value, json};

use crate::common::{install_widget_crd, raw};

const T0: &str = "2030-01-01T00:00:00Z";

async fn manual_emu() -> Emulator {
    Emulator::builder()
        .clock(Clock::manual(T0.parse().unwrap()))
        .start()
        .await
        .unwrap()
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(
        json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":name},"data":{"k":"v"}}),
    )
    .unwrap()
}

fn created(o: &ConfigMap) -> String {
    o.metadata
        .creation_timestamp
        .as_ref()
        .unwrap()
        .0
        .to_string()
}

#[tokio::test]
async fn server_set_times_come_from_the_manual_clock() {
    let emu = manual_emu().await;
    let client = emu.client().unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let a = api.create(&PostParams::default(), &cm("a")).await.unwrap();
    assert_eq!(created(&a), T0);
    let mf = a.metadata.managed_fields.as_ref().unwrap();
    assert_eq!(mf[0].time.as_ref().unwrap().0.to_string(), T0);

    emu.advance_clock(Duration::from_secs(90));
    let b = api.create(&PostParams::default(), &cm("b")).await.unwrap();
    assert_eq!(created(&b), "2030-01-01T00:01:30Z");
    // An update records its managedFields time; a deletion mark its deletionTimestamp.
    emu.advance_clock(Duration::from_secs(30));
    let a = api
        .patch(
            "a",
            &PatchParams::apply("t"),
            &Patch::Apply(json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"finalizers":["example.com/hold"]}})),
        )
        .await
        .unwrap();
    let t_entry = a
        .metadata
        .managed_fields
        .as_ref()
        .unwrap()
        .iter()
        .find(|e| e.manager.as_deref() == Some("t"))
        .unwrap();
    assert_eq!(
        t_entry.time.as_ref().unwrap().0.to_string(),
        "2030-01-01T00:02:00Z"
    );
    assert_eq!(created(&a), T0, "creationTimestamp never moves");
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let a = api.get("a").await.unwrap();
    assert_eq!(
        a.metadata.deletion_timestamp.unwrap().0.to_string(),
        "2030-01-01T00:02:00Z"
    );

    // The CRD controller's condition times.
    emu.set_clock("2031-05-06T07:08:09Z".parse().unwrap());
    install_widget_crd(&client).await;
    let crd = Api::<CustomResourceDefinition>::all(client)
        .get("widgets.example.com")
        .await
        .unwrap();
    let conds = crd.status.unwrap().conditions.unwrap();
    assert!(!conds.is_empty());
    for c in conds {
        assert_eq!(
            c.last_transition_time.unwrap().0.to_string(),
            "2031-05-06T07:08:09Z",
            "{}",
            c.type_
        );
    }
}

#[tokio::test]
async fn the_default_clock_is_system_time() {
    let emu = crate::common::emu().await;
    assert!(!emu.clock().is_manual());
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    let a = api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let t = a.metadata.creation_timestamp.unwrap().0;
    let skew = jiff::Timestamp::now().duration_since(t).unsigned_abs();
    // Correctness bound: a manual or shifted clock is hours off; a request is not.
    assert!(skew < Duration::from_secs(60), "{skew:?}");
}

#[tokio::test]
async fn admin_api_reads_sets_and_advances_the_clock() {
    let emu = manual_emu().await;
    let post = |body: &'static str| {
        let emu = &emu;
        async move {
            let (code, b) = raw(
                emu,
                "POST",
                "/__emu/clock",
                &[("Content-Type", "application/json")],
                body,
            )
            .await;
            (code, serde_json::from_str::<Value>(&b).unwrap())
        }
    };
    let (code, body) = raw(&emu, "GET", "/__emu/clock", &[], "").await;
    assert_eq!(code, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v, json!({"now": T0, "manual": true}));
    let (code, v) = post(r#"{"advanceMs": 61000}"#).await;
    assert_eq!(
        (code, v["now"].clone()),
        (200, json!("2030-01-01T00:01:01Z"))
    );
    let (code, v) = post(r#"{"set": "2035-02-03T04:05:06Z"}"#).await;
    assert_eq!(
        (code, v["now"].clone()),
        (200, json!("2035-02-03T04:05:06Z"))
    );
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    let a = api.create(&PostParams::default(), &cm("a")).await.unwrap();
    assert_eq!(created(&a), "2035-02-03T04:05:06Z");
    for bad in [r#"{"set": "yesterday"}"#, r#"{}"#, r#"{"advanceMs": "x"}"#] {
        let (code, v) = post(bad).await;
        assert_eq!(code, 400, "{bad}: {v}");
    }
    assert_eq!(
        emu.clock().now_rfc3339(),
        "2035-02-03T04:05:06Z",
        "unchanged by bad requests"
    );
}

#[tokio::test]
async fn continue_tokens_expire_when_the_clock_passes_their_ttl() {
    let emu = manual_emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    for n in ["a", "b", "c"] {
        api.create(&PostParams::default(), &cm(n)).await.unwrap();
    }
    let first = api.list(&ListParams::default().limit(1)).await.unwrap();
    let tok = first.metadata.continue_.unwrap();
    // Just inside the 5-minute TTL: the token still works.
    emu.advance_clock(Duration::from_secs(299));
    let second = api
        .list(&ListParams::default().limit(1).continue_token(&tok))
        .await
        .unwrap();
    assert_eq!(second.items[0].metadata.name.as_deref(), Some("b"));
    let tok = second.metadata.continue_.unwrap();
    emu.advance_clock(Duration::from_secs(2));
    let (code, body) = raw(
        &emu,
        "GET",
        &format!("/api/v1/namespaces/default/configmaps?limit=1&continue={tok}"),
        &[],
        "",
    )
    .await;
    assert_eq!(code, 410, "{body}");
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["reason"], "Expired");
    assert_eq!(
        status["message"],
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter."
    );
}

#[tokio::test]
async fn event_history_expires_by_the_clock() {
    let emu = manual_emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let rv = emu.resource_version();
    api.create(&PostParams::default(), &cm("b")).await.unwrap();
    let exact = format!(
        "/api/v1/namespaces/default/configmaps?resourceVersion={rv}&resourceVersionMatch=Exact"
    );
    let watch = format!(
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}&timeoutSeconds=1"
    );
    // Within the 5-minute history window both reads of `rv` are served.
    emu.advance_clock(Duration::from_secs(240));
    let (code, _) = raw(&emu, "GET", &exact, &[], "").await;
    assert_eq!(code, 200);
    let (_, events) = raw(&emu, "GET", &watch, &[], "").await;
    assert!(events.contains("\"ADDED\""), "{events}");
    // Past it (no write needed: moving the clock expires the history).
    emu.advance_clock(Duration::from_secs(120));
    let (code, body) = raw(&emu, "GET", &exact, &[], "").await;
    assert_eq!(code, 410, "{body}");
    let (code, events) = raw(&emu, "GET", &watch, &[], "").await;
    assert_eq!(code, 200);
    assert!(
        events.contains("\"ERROR\"") && events.contains("\"code\":410"),
        "{events}"
    );
}
