//! The P0 acceptance test of docs/emulator-spec.md §10, with a kube-rs Controller as the operator:
//! the reflector reaches InitDone, a CR change produces exactly one reconcile, a status apply does
//! not trigger another, deleting the CR runs cleanup and GC removes the owned slice, and a forced
//! 410 causes exactly one relist.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::common::{Widget, WidgetSpec, install_widget_crd};

#[derive(Debug)]
struct ReconcileError(String);
impl std::fmt::Display for ReconcileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for ReconcileError {}

struct Ctx {
    client: kube::Client,
    reconciles: AtomicUsize,
    cleanups: AtomicUsize,
}

const MANAGER: &str = "widget-op";

async fn apply_children(w: &Widget, client: &kube::Client) -> Result<Action, kube::Error> {
    let ns = w.namespace().unwrap_or_default();
    let name = w.name_any();
    let oref = w.controller_owner_ref(&()).expect("owner ref");
    let slice = json!({"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
        "metadata":{"name":format!("{name}-http"),"labels":{"kubernetes.io/service-name":name,"endpointslice.kubernetes.io/managed-by":MANAGER},
                    "ownerReferences":[oref]},
        "addressType":"IPv4","endpoints":[{"addresses":["10.1.0.9"],"conditions":{"ready":true}}],"ports":[{"name":"http","port":8080}]});
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
    slices
        .patch(
            &format!("{name}-http"),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&slice),
        )
        .await?;
    let widgets: Api<Widget> = Api::namespaced(client.clone(), &ns);
    let status = json!({"apiVersion":"example.com/v1","kind":"Widget","status":{"observedGeneration":w.metadata.generation,"ready":true}});
    widgets
        .patch_status(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&status),
        )
        .await?;
    Ok(Action::await_change())
}

async fn reconcile(w: Arc<Widget>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    ctx.reconciles.fetch_add(1, Ordering::SeqCst);
    let api: Api<Widget> = Api::namespaced(ctx.client.clone(), &w.namespace().unwrap_or_default());
    finalizer(&api, "example.com/cleanup", w, |ev| async {
        match ev {
            FinalizerEvent::Apply(w) => apply_children(&w, &ctx.client).await,
            FinalizerEvent::Cleanup(_) => {
                ctx.cleanups.fetch_add(1, Ordering::SeqCst);
                Ok(Action::await_change())
            }
        }
    })
    .await
    .map_err(|e| ReconcileError(e.to_string()))
}

fn error_policy(_: Arc<Widget>, e: &ReconcileError, _: Arc<Ctx>) -> Action {
    eprintln!("reconcile error: {e}");
    Action::requeue(Duration::from_millis(200))
}

/// Wake on spec changes, finalizer changes and deletion, not on status/metadata noise.
fn relevant(w: &Widget) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    w.metadata.generation.hash(&mut h);
    w.metadata.finalizers.hash(&mut h);
    w.metadata.deletion_timestamp.is_some().hash(&mut h);
    Some(h.finish())
}

async fn eventually(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !f().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn p0_acceptance_controller_loop() {
    let emu = crate::common::emu().await;
    let client = emu.client().unwrap();
    install_widget_crd(&client).await;
    let widgets: Api<Widget> = Api::namespaced(client.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    widgets
        .create(
            &PostParams::default(),
            &Widget::new(
                "w1",
                WidgetSpec {
                    size: 1,
                    color: None,
                },
            ),
        )
        .await
        .unwrap();

    let ctx = Arc::new(Ctx {
        client: client.clone(),
        reconciles: AtomicUsize::new(0),
        cleanups: AtomicUsize::new(0),
    });
    let (reader, writer) = reflector::store();
    let trigger = watcher(widgets.clone(), watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .predicate_filter(relevant, Default::default());
    let controller = Controller::for_stream(trigger, reader.clone())
        .owns(slices.clone(), watcher::Config::default())
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|_| async {});
    let op = tokio::spawn(controller);

    // The reflector reaches InitDone.
    tokio::time::timeout(Duration::from_secs(10), reader.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    // First reconcile round: finalizer added, slice applied, status applied.
    eventually("status observedGeneration 1 and owned slice", async || {
        let w = widgets.get("w1").await.unwrap();
        w.status.and_then(|s| s.observed_generation) == Some(1)
            && slices.get_opt("w1-http").await.unwrap().is_some()
    })
    .await;
    let w = widgets.get("w1").await.unwrap();
    assert_eq!(
        w.metadata.finalizers,
        Some(vec!["example.com/cleanup".to_string()])
    );
    let slice = slices.get("w1-http").await.unwrap();
    assert_eq!(
        slice.metadata.owner_references.unwrap()[0].uid,
        w.metadata.uid.clone().unwrap()
    );
    // Settled: no hot loop (status applies are no-ops, slice applies are no-ops).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let settled = ctx.reconciles.load(Ordering::SeqCst);
    let writes = emu.requests().writes_by_manager(MANAGER);
    let rv = widgets.get("w1").await.unwrap().metadata.resource_version;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        ctx.reconciles.load(Ordering::SeqCst),
        settled,
        "no reconcile without a change"
    );
    assert_eq!(
        widgets.get("w1").await.unwrap().metadata.resource_version,
        rv,
        "no write without a change"
    );

    // A CR change produces exactly one reconcile, and its status apply does not trigger another.
    widgets
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec":{"color":"red"}})),
        )
        .await
        .unwrap();
    eventually("observedGeneration 2", async || {
        widgets
            .get("w1")
            .await
            .unwrap()
            .status
            .and_then(|s| s.observed_generation)
            == Some(2)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        ctx.reconciles.load(Ordering::SeqCst),
        settled + 1,
        "exactly one reconcile per CR change"
    );
    // That reconcile wrote the status once; the slice apply was a no-op (same content).
    let new_writes = emu.requests().writes_by_manager(MANAGER) - writes;
    assert_eq!(
        new_writes, 2,
        "one slice apply + one status apply (the slice apply being a server-side no-op)"
    );

    // A forced 410 causes exactly one relist of the widgets.
    let lists = || {
        emu.requests()
            .filter(|r| r.verb == "list" && r.resource == "widgets")
            .len()
    };
    let before = lists();
    emu.compact_now(true);
    // The relist comes after the watcher's and the Controller's trigger backoff.
    eventually("relist after 410", async || lists() > before).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(lists(), before + 1, "exactly one relist after a forced 410");
    let resumed_410 = emu
        .requests()
        .filter(|r| r.verb == "watch" && r.resource == "widgets");
    assert!(resumed_410.len() >= 2);

    // Deleting the CR runs cleanup, the finalizer goes, the owned slice is garbage collected.
    widgets
        .delete("w1", &DeleteParams::default())
        .await
        .unwrap();
    eventually("widget gone", async || {
        widgets.get_opt("w1").await.unwrap().is_none()
    })
    .await;
    assert_eq!(ctx.cleanups.load(Ordering::SeqCst), 1);
    eventually("owned slice collected", async || {
        slices.get_opt("w1-http").await.unwrap().is_none()
    })
    .await;
    op.abort();
}
