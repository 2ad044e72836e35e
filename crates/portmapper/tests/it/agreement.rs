//! `portmapper render` and the live operator agree on every example: render's preview (the
//! slices, the legacy Endpoints object, the status) is what the operator publishes on the real
//! control plane from the same manifests. Both compute the plan and its report with the same
//! `portmapper-core` functions; this proves the operator adds nothing on the way (the selector
//! migration example once rendered an Endpoints object the operator never writes while the
//! Service keeps its selector).
//!
//! Compared: every slice of ours (name, address type, ports, labels, owner, endpoints with
//! their conditions, target and node), the names and addresses of the Endpoints objects the
//! PortMapping owns, and the status (conditions by type, status, reason and message; ports;
//! counts). Left out: what the server or the clock sets (UIDs, versions, times, the observed
//! generation), and, for a check render does not run (`--assume`), the exclusion reason it
//! assumed; the membership it implies must still agree.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{ListParams, Patch, PatchParams};
use portmapper::commands::render::{self, Assume, Preview};
use portmapper_api::PortMapping;
use serde_json::{Value, json};

use crate::harness::Harness;
use crate::render::repo;

/// The examples with manifests (the demo's pods come from the demo itself).
const EXAMPLES: &[&str] = &[
    "colocated-broker",
    "container-ready",
    "dual-stack",
    "grpc-health",
    "selector-migration",
];

#[test]
fn every_example_is_compared() {
    let mut found: Vec<String> = std::fs::read_dir(repo().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("manifests").is_dir())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    found.sort();
    assert_eq!(found, EXAMPLES);
}

#[tokio::test]
async fn colocated_broker() {
    agree("colocated-broker").await;
}

#[tokio::test]
async fn container_ready() {
    agree("container-ready").await;
}

#[tokio::test]
async fn dual_stack() {
    agree("dual-stack").await;
}

#[tokio::test]
async fn grpc_health() {
    agree("grpc-health").await;
}

#[tokio::test]
async fn selector_migration() {
    agree("selector-migration").await;
}

fn manifests(example: &str) -> Vec<PathBuf> {
    let dir = repo().join("examples").join(example).join("manifests");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// Renders `example` into the test's namespace, creates its objects there (pod status as
/// kubelet would write it), runs the operator and waits until what it published is what render
/// previewed.
async fn agree(example: &str) {
    let mut h = Harness::new().await;
    let files = manifests(example);
    let loaded = render::input::load(&files).unwrap();
    let rendered = render::render(loaded, Assume::Abstain, &h.ns).unwrap();
    assert_eq!(rendered.previews.len(), 1, "one PortMapping per example");
    let preview = &rendered.previews[0];
    for file in &files {
        create_all(&h, &std::fs::read_to_string(file).unwrap()).await;
    }
    h.run_controller();
    let expected = previewed(preview);
    // Something to agree on: slices, and a status with its conditions.
    assert!(
        !expected["slices"].as_array().unwrap().is_empty(),
        "{expected}"
    );
    assert!(
        expected["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.len() >= 3),
        "{expected}"
    );
    let name = preview.port_mapping.name_any();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let live = published(&h, &name, preview.assumed > 0).await;
        if live == expected || tokio::time::Instant::now() > deadline {
            assert_eq!(
                serde_json::to_string_pretty(&live).unwrap(),
                serde_json::to_string_pretty(&expected).unwrap(),
                "{example}: the operator (left) and render (right) disagree"
            );
            return;
        }
        // A poll (as `eventually`) that shows the whole difference when it gives up.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates every object of a manifest file; a pod's `status` is written through the status
/// subresource afterwards (the API server ignores it on create).
async fn create_all(h: &Harness, text: &str) {
    for doc in serde_yaml::Deserializer::from_str(text) {
        let yaml = <serde_yaml::Value as serde::Deserialize>::deserialize(doc).unwrap();
        let mut obj: Value = serde_json::to_value(yaml).unwrap();
        if obj.is_null() {
            continue;
        }
        let status = obj.as_object_mut().unwrap().remove("status");
        let kind = obj["kind"].as_str().unwrap_or_default().to_owned();
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        h.create(obj).await;
        if let (Some(mut status), "Pod") = (status, kind.as_str()) {
            // The API server wants podIP beside podIPs (the first of them).
            status["podIP"] = status["podIPs"][0]["ip"].clone();
            h.api::<Pod>()
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({ "status": status })),
                )
                .await
                .unwrap();
        }
    }
}

/// What render previews, as compared.
fn previewed(preview: &Preview) -> Value {
    let assumed = preview.assumed > 0;
    let mut slices: Vec<Value> = preview.slices.iter().map(slice_view).collect();
    slices.sort_by_key(|s| s["name"].as_str().unwrap_or_default().to_owned());
    json!({
        "slices": slices,
        "endpoints": preview.endpoints.iter().map(endpoints_view).collect::<Vec<_>>(),
        "status": status_view(&preview.port_mapping, assumed),
    })
}

/// What the operator published, as compared.
async fn published(h: &Harness, name: &str, assumed: bool) -> Value {
    let lp = ListParams::default().labels("endpointslice.kubernetes.io/managed-by=portmapper.dev");
    let mut slices: Vec<Value> = h
        .api::<EndpointSlice>()
        .list(&lp)
        .await
        .unwrap()
        .items
        .iter()
        .map(slice_view)
        .collect();
    slices.sort_by_key(|s| s["name"].as_str().unwrap_or_default().to_owned());
    let endpoints: Vec<Value> = h
        .api::<Endpoints>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|e| {
            e.owner_references()
                .iter()
                .any(|o| o.kind == "PortMapping" && o.name == name)
        })
        .map(endpoints_view)
        .collect();
    let pm: PortMapping = h.portmapping(name).await;
    json!({
        "slices": slices,
        "endpoints": endpoints,
        "status": status_view(&pm, assumed),
    })
}

/// A slice without what the server sets (UIDs, versions, times) and without our trigger-time
/// annotation (a clock reading).
fn slice_view(slice: &EndpointSlice) -> Value {
    let mut v = serde_json::to_value(slice).unwrap();
    let meta = v["metadata"].take();
    let mut owners = meta["ownerReferences"].clone();
    for o in owners.as_array_mut().into_iter().flatten() {
        o.as_object_mut().unwrap().remove("uid");
    }
    for e in v["endpoints"].as_array_mut().into_iter().flatten() {
        if let Some(t) = e.get_mut("targetRef").and_then(Value::as_object_mut) {
            t.remove("uid");
        }
    }
    json!({
        "name": meta["name"],
        "labels": meta["labels"],
        "owners": owners,
        "addressType": v["addressType"],
        "ports": v["ports"],
        "endpoints": v["endpoints"],
    })
}

/// An Endpoints object's name and addresses.
fn endpoints_view(endpoints: &Endpoints) -> Value {
    let mut subsets = serde_json::to_value(&endpoints.subsets).unwrap();
    for s in subsets.as_array_mut().into_iter().flatten() {
        for key in ["addresses", "notReadyAddresses"] {
            for a in s[key].as_array_mut().into_iter().flatten() {
                if let Some(t) = a.get_mut("targetRef").and_then(Value::as_object_mut) {
                    t.remove("uid");
                }
            }
        }
    }
    json!({"name": endpoints.name_any(), "subsets": subsets})
}

/// The status without times and the observed generation; with `assumed` (a check render did
/// not run), excluded pods by name only.
fn status_view(pm: &PortMapping, assumed: bool) -> Value {
    let mut v = serde_json::to_value(&pm.status).unwrap();
    if let Some(status) = v.as_object_mut() {
        status.remove("observedGeneration");
    }
    for c in v["conditions"].as_array_mut().into_iter().flatten() {
        let c = c.as_object_mut().unwrap();
        c.remove("lastTransitionTime");
        c.remove("observedGeneration");
    }
    for p in v["ports"].as_array_mut().into_iter().flatten() {
        for x in p["excluded"].as_array_mut().into_iter().flatten() {
            if assumed {
                x.as_object_mut().unwrap().remove("reason");
            }
        }
    }
    v
}
