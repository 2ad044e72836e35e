//! Garbage collection (Background/Foreground/Orphan, multi-owner), namespaces, watch selector
//! transitions, leader election with kube-lease-manager, and the `kube-emulator serve` binary.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{
    Api, DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy, WatchEvent, WatchParams,
};
use serde_json::{Value, json};

use crate::common::emu;

fn cm(name: &str, owners: Value) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":name,"ownerReferences":owners},"data":{"k":"v"}})).unwrap()
}

fn oref(o: &ConfigMap, block: bool) -> Value {
    json!({"apiVersion":"v1","kind":"ConfigMap","name":o.metadata.name,"uid":o.metadata.uid,"blockOwnerDeletion":block})
}

async fn eventually(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn gc_background_orphan_foreground_and_multi_owner() {
    let emu = emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    // Background (default).
    let owner = api
        .create(&PostParams::default(), &cm("owner", json!([])))
        .await
        .unwrap();
    api.create(
        &PostParams::default(),
        &cm("dep", json!([oref(&owner, false)])),
    )
    .await
    .unwrap();
    api.delete("owner", &DeleteParams::default())
        .await
        .unwrap()
        .right()
        .expect("owner gone at once");
    eventually("background GC", async || {
        api.get_opt("dep").await.unwrap().is_none()
    })
    .await;
    // Orphan: dependents stay, without the reference.
    let owner = api
        .create(&PostParams::default(), &cm("owner2", json!([])))
        .await
        .unwrap();
    api.create(
        &PostParams::default(),
        &cm("dep2", json!([oref(&owner, false)])),
    )
    .await
    .unwrap();
    let pending = api
        .delete(
            "owner2",
            &DeleteParams {
                propagation_policy: Some(PropagationPolicy::Orphan),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        pending.left().unwrap().metadata.finalizers,
        Some(vec!["orphan".to_string()])
    );
    eventually("owner2 gone", async || {
        api.get_opt("owner2").await.unwrap().is_none()
    })
    .await;
    let dep = api.get("dep2").await.unwrap();
    assert!(
        dep.metadata.owner_references.is_none(),
        "reference removed, field omitted"
    );
    // Foreground: the owner waits for blocking dependents (which wait for their own finalizers).
    let owner = api
        .create(&PostParams::default(), &cm("owner3", json!([])))
        .await
        .unwrap();
    let mut d = cm("dep3", json!([oref(&owner, true)]));
    d.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&PostParams::default(), &d).await.unwrap();
    let pending = api
        .delete("owner3", &DeleteParams::foreground())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert!(pending.metadata.deletion_timestamp.is_some());
    assert!(
        pending
            .metadata
            .finalizers
            .unwrap()
            .contains(&"foregroundDeletion".to_string())
    );
    eventually("dependent marked for deletion", async || {
        api.get("dep3")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        api.get_opt("owner3").await.unwrap().is_some(),
        "owner blocked by dependent"
    );
    api.patch(
        "dep3",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata":{"finalizers":null}})),
    )
    .await
    .unwrap();
    eventually("owner3 gone after dependent", async || {
        api.get_opt("owner3").await.unwrap().is_none()
    })
    .await;
    // Multi-owner: only the dangling reference is removed.
    let a = api
        .create(&PostParams::default(), &cm("a", json!([])))
        .await
        .unwrap();
    let b = api
        .create(&PostParams::default(), &cm("b", json!([])))
        .await
        .unwrap();
    api.create(
        &PostParams::default(),
        &cm("shared", json!([oref(&a, false), oref(&b, false)])),
    )
    .await
    .unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    eventually("dangling ref dropped", async || {
        api.get("shared")
            .await
            .unwrap()
            .metadata
            .owner_references
            .map(|r| r.len())
            == Some(1)
    })
    .await;
    assert_eq!(
        api.get("shared")
            .await
            .unwrap()
            .metadata
            .owner_references
            .unwrap()[0]
            .name,
        "b"
    );
}

#[tokio::test]
async fn namespaces_lifecycle() {
    let emu = emu().await;
    let client = emu.client().unwrap();
    let nss: Api<Namespace> = Api::all(client.clone());
    let names: Vec<String> = nss
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|n| n.metadata.name.unwrap())
        .collect();
    assert_eq!(
        names,
        vec!["default", "kube-node-lease", "kube-public", "kube-system"]
    );
    let default = nss.get("default").await.unwrap();
    assert_eq!(
        default.metadata.labels.unwrap()["kubernetes.io/metadata.name"],
        "default"
    );
    assert_eq!(default.status.unwrap().phase.as_deref(), Some("Active"));
    let err = nss
        .delete("default", &DeleteParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "{err:?}"
    );
    let missing: Api<ConfigMap> = Api::namespaced(client.clone(), "nope");
    let err = missing
        .create(&PostParams::default(), &cm("x", json!([])))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 404 && s.message == "namespaces \"nope\" not found"),
        "{err:?}"
    );
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata":{"name":"t"}})).unwrap(),
    )
    .await
    .unwrap();
    let t: Api<ConfigMap> = Api::namespaced(client.clone(), "t");
    let mut held = cm("held", json!([]));
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    t.create(&PostParams::default(), &held).await.unwrap();
    t.create(&PostParams::default(), &cm("free", json!([])))
        .await
        .unwrap();
    let ns = nss
        .delete("t", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Terminating"));
    let err = t
        .create(&PostParams::default(), &cm("late", json!([])))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403 && s.message.contains("because it is being terminated")),
        "{err:?}"
    );
    eventually("content deleted", async || {
        t.get_opt("free").await.unwrap().is_none()
    })
    .await;
    assert!(
        nss.get_opt("t").await.unwrap().is_some(),
        "stuck on the held object"
    );
    eventually("namespace conditions", async || {
        nss.get("t").await.unwrap().status.and_then(|s| s.conditions).is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "NamespaceFinalizersRemaining"
                    && c.status == "True"
                    && c.message.as_deref() == Some("Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances")
            }) && cs.iter().any(|c| c.type_ == "NamespaceContentRemaining" && c.message.as_deref() == Some("Some resources are remaining: configmaps has 1 resource instances"))
        })
    })
    .await;
    t.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata":{"finalizers":null}})),
    )
    .await
    .unwrap();
    eventually("namespace gone", async || {
        nss.get_opt("t").await.unwrap().is_none()
    })
    .await;
}

#[tokio::test]
async fn label_watch_selector_transitions() {
    let emu = emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    let c = api
        .create(&PostParams::default(), &cm("a", json!([])))
        .await
        .unwrap();
    let rv = c.metadata.resource_version.unwrap();
    let mut s = api
        .watch(&WatchParams::default().labels("app=web").timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata":{"labels":{"app":"web"}}})),
    )
    .await
    .unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data":{"k":"2"}})),
    )
    .await
    .unwrap();
    let leave = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata":{"labels":{"app":"db"}}})),
        )
        .await
        .unwrap();
    let mut got = Vec::new();
    while got.len() < 3 {
        match s.try_next().await.unwrap().unwrap() {
            WatchEvent::Added(o) => got.push((
                "ADDED",
                o.metadata.labels.unwrap()["app"].clone(),
                o.metadata.resource_version.unwrap(),
            )),
            WatchEvent::Modified(o) => got.push((
                "MODIFIED",
                o.metadata.labels.unwrap()["app"].clone(),
                o.metadata.resource_version.unwrap(),
            )),
            WatchEvent::Deleted(o) => got.push((
                "DELETED",
                o.metadata.labels.unwrap()["app"].clone(),
                o.metadata.resource_version.unwrap(),
            )),
            _ => {}
        }
    }
    assert_eq!(got[0].0, "ADDED");
    assert_eq!(got[1].0, "MODIFIED");
    // Leaving the selection: DELETED with the previous state and the new revision.
    assert_eq!((got[2].0, got[2].1.as_str()), ("DELETED", "web"));
    assert_eq!(Some(got[2].2.clone()), leave.metadata.resource_version);
}

#[tokio::test]
async fn leader_election_with_kube_lease_manager() {
    use kube_lease_manager::{LeaseManagerBuilder, LeaseParams};
    let emu = emu().await;
    let client = emu.client().unwrap();
    let build = |id: &str| {
        LeaseManagerBuilder::new(client.clone(), "op-leader")
            .with_namespace("default")
            .with_parameters(LeaseParams::new(id, 5, 2))
            .build()
    };
    let a = build("a").await.unwrap();
    let b = build("b").await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(5), a.changed())
            .await
            .unwrap()
            .unwrap(),
        "a acquires"
    );
    // a keeps renewing; b must not win while a holds the lease.
    let renew = tokio::spawn(async move {
        loop {
            if a.changed().await.is_err() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
    let b_won_early = tokio::time::timeout(Duration::from_secs(5), b.changed()).await;
    assert!(
        b_won_early.is_err(),
        "b must not become leader while a renews"
    );
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let l = leases.get("op-leader").await.unwrap();
    assert_eq!(
        l.spec.as_ref().unwrap().holder_identity.as_deref(),
        Some("a")
    );
    let renewals = emu
        .requests()
        .filter(|r| r.resource == "leases" && r.verb == "patch" && r.status == 200);
    assert!(
        renewals.len() >= 2,
        "the holder renews through patches: {renewals:?}"
    );
    // a dies without releasing: b takes over within duration + grace (+ slack).
    renew.abort();
    let t = Instant::now();
    assert!(
        tokio::time::timeout(Duration::from_secs(20), b.changed())
            .await
            .unwrap()
            .unwrap()
    );
    // Correctness bound: duration + grace is 7 s; 17 s leaves 10 s for a loaded 2-core machine
    // (the wait above gives up at 20 s).
    assert!(
        t.elapsed() < Duration::from_secs(17),
        "takeover within duration + grace (+ slack) took {:?}",
        t.elapsed()
    );
    let l = leases.get("op-leader").await.unwrap();
    assert_eq!(l.spec.unwrap().holder_identity.as_deref(), Some("b"));
}

#[tokio::test]
async fn serve_binary_writes_kubeconfig_loads_manifests_and_stops_on_sigterm() {
    let dir = std::env::temp_dir().join(format!("emu-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kc = dir.join("kubeconfig");
    let manifests = dir.join("m.yaml");
    std::fs::write(&manifests, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: loaded, namespace: default}\ndata: {a: b}\n").unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kube-emulator"))
        .args(["serve", "--listen", "127.0.0.1:0", "--kubeconfig"])
        .arg(&kc)
        .arg("--load")
        .arg(&manifests)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !kc.exists() {
        assert!(Instant::now() < deadline, "kubeconfig not written");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kc).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    assert!(
        config
            .cluster_url
            .to_string()
            .starts_with("http://127.0.0.1:")
    );
    let client = kube::Client::try_from(config).unwrap();
    let v = client.apiserver_version().await.unwrap();
    assert_eq!(v.git_version, "v1.34.0-emu");
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    assert_eq!(api.get("loaded").await.unwrap().data.unwrap()["a"], "b");
    let pid = child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            assert!(st.success(), "clean exit on SIGTERM: {st:?}");
            break;
        }
        assert!(Instant::now() < deadline, "did not stop on SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn kube_event_recorder_create_then_series_patch() {
    use k8s_openapi::api::events::v1::Event as KEvent;
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let emu = emu().await;
    let client = emu.client().unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let c = cms
        .create(&PostParams::default(), &cm("subject", json!([])))
        .await
        .unwrap();
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: c.metadata.name.clone(),
        namespace: c.metadata.namespace.clone(),
        uid: c.metadata.uid.clone(),
        ..Default::default()
    };
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "portmapper".into(),
            instance: Some("pod-1".into()),
        },
    );
    let ev = Event {
        type_: EventType::Normal,
        reason: "Published".into(),
        note: Some("slices written".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    recorder
        .publish(&ev, &reference)
        .await
        .expect("create accepted by events.k8s.io validation");
    recorder
        .publish(&ev, &reference)
        .await
        .expect("series merge patch accepted (immutable fields unchanged)");
    let events: Api<KEvent> = Api::namespaced(client, "default");
    let list = events.list(&Default::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let e = &list.items[0];
    assert_eq!(e.series.as_ref().map(|s| s.count), Some(2));
    assert_eq!(e.reporting_controller.as_deref(), Some("portmapper"));
    let writes: Vec<String> = emu
        .requests()
        .filter(|r| r.resource == "events" && r.is_write())
        .iter()
        .map(|r| r.verb.clone())
        .collect();
    assert_eq!(writes, vec!["create", "patch"]);
}

/// Writes of dependents are checked against their owners one by one (no full pass per write):
/// a dependent created for an owner that does not exist, or re-pointed at one, is still
/// collected; one whose owners exist is kept through any number of writes.
#[tokio::test]
async fn gc_collects_dependents_written_with_absent_owners() {
    let emu = emu().await;
    let api: Api<ConfigMap> = Api::namespaced(emu.client().unwrap(), "default");
    let owner = api
        .create(&PostParams::default(), &cm("owner", json!([])))
        .await
        .unwrap();
    api.create(
        &PostParams::default(),
        &cm("kept", json!([oref(&owner, false)])),
    )
    .await
    .unwrap();
    let ghost = json!([{"apiVersion":"v1","kind":"ConfigMap","name":"ghost","uid":"0000-ghost"}]);
    api.create(
        &PostParams::default(),
        &cm("orphaned-at-birth", ghost.clone()),
    )
    .await
    .unwrap();
    // Same name as the owner, another uid: not its owner.
    let impostor =
        json!([{"apiVersion":"v1","kind":"ConfigMap","name":"owner","uid":"0000-other"}]);
    api.create(&PostParams::default(), &cm("wrong-uid", impostor))
        .await
        .unwrap();
    api.create(
        &PostParams::default(),
        &cm("repointed", json!([oref(&owner, false)])),
    )
    .await
    .unwrap();
    for i in 0..5 {
        api.patch(
            "kept",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": format!("v{i}")}})),
        )
        .await
        .unwrap();
    }
    api.patch(
        "repointed",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"ownerReferences": ghost}})),
    )
    .await
    .unwrap();
    eventually("dependents of absent owners collected", async || {
        api.get_opt("orphaned-at-birth").await.unwrap().is_none()
            && api.get_opt("wrong-uid").await.unwrap().is_none()
            && api.get_opt("repointed").await.unwrap().is_none()
    })
    .await;
    assert!(
        api.get_opt("kept").await.unwrap().is_some(),
        "its owner exists"
    );
}
