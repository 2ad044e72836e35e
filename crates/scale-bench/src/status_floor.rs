//! The status floor: kube-apiserver's CPU per PortMapping status write, by kind of write. A plain
//! client copies the operator's PortMappings (renamed, labelled, status-less: no controller runs
//! meanwhile) and writes each copy the status the operator published for it (a first status, as
//! publication writes), then that status with one pod moved from ready to not ready (as a flip
//! does), one at a time, in three ways: a server-side apply (force) of the status subresource, a
//! JSON merge patch of it, and a PUT of it with the resourceVersion; and, for reference, a merge
//! patch of a label of the PortMapping itself. The copies are deleted after each kind, so every
//! kind starts from status-less objects; the kinds take turns. Last, the merge patch again on
//! copies in a copy of the CRD without its CEL rules (`x-kubernetes-validations`), which
//! kube-apiserver evaluates over the whole object on every write, status writes included.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::Error;

/// The floor's field manager.
const MANAGER: &str = "scale-bench-floor";
/// The label that marks the copies.
const FLOOR_LABEL: &str = "scale-bench.portmapper.dev/status-floor";

/// kube-apiserver's CPU (user + system) per PortMapping status write, by kind of write.
#[derive(Debug, Clone, Copy, Default)]
pub struct StatusCpu {
    /// PortMappings written (each kind writes each twice).
    pub mappings: usize,
    /// Server-side apply (force) of a first status.
    pub apply_first: Duration,
    /// Server-side apply (force) changing one port's counts.
    pub apply_change: Duration,
    /// JSON merge patch of a first status.
    pub merge_first: Duration,
    /// JSON merge patch changing one port's counts (the whole status sent).
    pub merge_change: Duration,
    /// PUT with the resourceVersion of a first status.
    pub put_first: Duration,
    /// PUT with the resourceVersion changing one port's counts.
    pub put_change: Duration,
    /// For reference, a merge patch of a label of the PortMapping itself (not its status):
    /// what any write of a PortMapping costs, whatever its body. First: the label added.
    pub label_first: Duration,
    /// The label's value changed.
    pub label_change: Duration,
    /// For reference, a merge patch of status setting only observedGeneration (first: on a
    /// status-less copy).
    pub tiny_first: Duration,
    /// The same, observedGeneration changed.
    pub tiny_change: Duration,
    /// The mean size of the operator's statuses, JSON bytes.
    pub status_bytes: usize,
    /// Merge patch of a first status on copies in a copy of the CRD without its CEL rules.
    pub bare_merge_first: Duration,
    /// The same, changing one port's counts.
    pub bare_merge_change: Duration,
}

/// PortMappings copied at most.
const MAX_COPIES: usize = 300;

/// Turns each kind of write takes.
const ROUNDS: u32 = 2;

#[derive(Clone, Copy)]
enum Kind {
    Apply,
    Merge,
    Put,
    /// A merge patch of a label of the PortMapping (not a status write; a reference).
    Label,
    /// A merge patch of status setting observedGeneration alone (the body's share; a reference).
    Tiny,
}

/// The group of the CRD's copy without validation rules.
const BARE_GROUP: &str = "status-floor.scale-bench.dev";

fn api_resource(group: &str) -> ApiResource {
    let gvk = GroupVersionKind::gvk(group, "v1alpha1", "PortMapping");
    ApiResource::from_gvk_with_plural(&gvk, "portmappings")
}

/// Drops every `x-kubernetes-validations` (CEL rules) from a schema.
fn strip_rules(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.remove("x-kubernetes-validations");
            map.values_mut().for_each(strip_rules);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_rules),
        _ => {}
    }
}

/// Installs a copy of the PortMapping CRD in group [`BARE_GROUP`], without its CEL rules
/// (kube-apiserver evaluates every rule of the object, spec included, on each status write).
async fn install_bare_crd(client: &Client) -> Result<(String, String), Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let ours = crds.get("portmappings.portmapper.dev").await?;
    let mut spec = serde_json::to_value(&ours.spec)?;
    strip_rules(&mut spec);
    spec["group"] = json!(BARE_GROUP);
    let name = format!("portmappings.{BARE_GROUP}");
    let bare: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": name}, "spec": spec,
    }))?;
    let created = crds.create(&PostParams::default(), &bare).await?;
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(crds, &name, conditions::is_crd_established()),
    )
    .await
    .map_err(|_| Error::Timeout("the status floor's CRD to be established".into()))?
    .map_err(|e| Error::Admin(e.to_string()))?;
    Ok((name, created.uid().unwrap_or_default()))
}

/// kube-apiserver's CPU per merge patch of status (first, changed) on copies in a CRD without
/// CEL rules; the CRD is deleted again.
async fn without_rules(
    client: &Client,
    ns: &str,
    copies: &[(Value, Value)],
    server: u32,
) -> Result<(Duration, Duration), Error> {
    let (name, uid) = install_bare_crd(client).await?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &api_resource(BARE_GROUP));
    let copies: Vec<(Value, Value)> = copies
        .iter()
        .map(|(obj, status)| {
            let mut obj = obj.clone();
            obj["apiVersion"] = json!(format!("{BARE_GROUP}/v1alpha1"));
            (obj, status.clone())
        })
        .collect();
    let mut sum = (Duration::ZERO, Duration::ZERO);
    for _ in 0..ROUNDS {
        let (first, change) = one_kind(&api, &copies, Kind::Merge, server).await?;
        sum.0 += first;
        sum.1 += change;
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete(&name, &DeleteParams::default()).await?;
    // Gone before returning: the next shape on the same control plane creates it again.
    tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(crds, &name, conditions::is_deleted(&uid)),
    )
    .await
    .map_err(|_| Error::Timeout("the status floor's CRD to be deleted".into()))?
    .map_err(|e| Error::Admin(e.to_string()))?;
    Ok((sum.0 / ROUNDS, sum.1 / ROUNDS))
}

/// `status` with one pod moved from ready to not ready on its first port (what a flip changes).
fn flipped(status: &Value) -> Value {
    let mut s = status.clone();
    if let Some(port) = s.pointer_mut("/ports/0") {
        let ready = port["ready"].as_i64().unwrap_or(0);
        let not_ready = port["notReady"].as_i64().unwrap_or(0);
        port["ready"] = json!((ready - 1).max(0));
        port["notReady"] = json!(not_ready + 1);
    }
    s["summary"] = json!(format!("{} (flipped)", s["summary"].as_str().unwrap_or("")));
    s
}

/// Writes `status` to the copy `name` (`live` is the copy as last stored, for the PUT); returns
/// the object as stored.
async fn write(
    api: &Api<DynamicObject>,
    kind: Kind,
    live: &DynamicObject,
    status: &Value,
) -> Result<DynamicObject, Error> {
    let name = live.name_any();
    let pp = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..PatchParams::default()
    };
    let stored = match kind {
        Kind::Apply => {
            let body = json!({
                "apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
                "status": status,
            });
            api.patch_status(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(body),
            )
            .await?
        }
        Kind::Merge => {
            api.patch_status(&name, &pp, &Patch::Merge(json!({"status": status})))
                .await?
        }
        Kind::Label => {
            let value = status["summary"].as_str().map_or(0, str::len).to_string();
            let body = json!({"metadata": {"labels": {"scale-bench.portmapper.dev/n": value}}});
            api.patch(&name, &pp, &Patch::Merge(body)).await?
        }
        Kind::Tiny => {
            let generation = status["summary"].as_str().map_or(0, str::len);
            let body = json!({"status": {"observedGeneration": generation}});
            api.patch_status(&name, &pp, &Patch::Merge(body)).await?
        }
        Kind::Put => {
            let mut obj = live.clone();
            obj.data["status"] = status.clone();
            let pp = PostParams {
                field_manager: Some(MANAGER.into()),
                ..PostParams::default()
            };
            api.replace_status(&name, &pp, &obj).await?
        }
    };
    Ok(stored)
}

/// One kind: creates the copies, writes the first statuses, then the changed ones, each pass
/// charged to kube-apiserver (`server`); deletes the copies.
async fn one_kind(
    api: &Api<DynamicObject>,
    copies: &[(Value, Value)],
    kind: Kind,
    server: u32,
) -> Result<(Duration, Duration), Error> {
    let pp = PostParams {
        field_manager: Some(MANAGER.into()),
        ..PostParams::default()
    };
    let mut live: Vec<DynamicObject> = futures::stream::iter(copies.iter().map(|(obj, _)| {
        let pp = pp.clone();
        async move {
            Ok::<_, Error>(
                api.create(&pp, &serde_json::from_value(obj.clone())?)
                    .await?,
            )
        }
    }))
    .buffered(8)
    .try_collect()
    .await?;
    let per = |used: Duration| used / copies.len().max(1) as u32;
    let mut out = [Duration::ZERO; 2];
    for (pass, slot) in out.iter_mut().enumerate() {
        let before = crate::procs::cpu_time(server)?;
        for (obj, (_, status)) in live.iter_mut().zip(copies) {
            let status = if pass == 0 {
                status.clone()
            } else {
                flipped(status)
            };
            *obj = write(api, kind, obj, &status).await?;
        }
        *slot = per(crate::procs::cpu_time(server)?.saturating_sub(before));
    }
    api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels(FLOOR_LABEL),
    )
    .await?;
    Ok((out[0], out[1]))
}

/// kube-apiserver's CPU per status write of each kind, on copies of the PortMappings of
/// namespace `ns` that have a status; `server` is kube-apiserver's pid. None when none has one.
pub async fn measure(client: &Client, ns: &str, server: u32) -> Result<Option<StatusCpu>, Error> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &api_resource("portmapper.dev"));
    let published = api.list(&ListParams::default()).await?;
    let copies: Vec<(Value, Value)> = published
        .items
        .iter()
        .filter(|pm| !pm.labels().contains_key(FLOOR_LABEL))
        .filter_map(|pm| {
            let status = pm.data.get("status").filter(|s| !s.is_null())?.clone();
            let obj = json!({
                "apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
                "metadata": {"name": format!("floor-{}", pm.name_any()), "namespace": ns,
                    "labels": {FLOOR_LABEL: "true"}},
                "spec": pm.data.get("spec").cloned().unwrap_or(Value::Null),
            });
            Some((obj, status))
        })
        // A per-write mean needs no more; B 1,000 would spend minutes on the floor otherwise.
        .take(MAX_COPIES)
        .collect();
    if copies.is_empty() {
        return Ok(None);
    }
    let status_bytes = copies
        .iter()
        .map(|(_, s)| serde_json::to_vec(s).map_or(0, |b| b.len()))
        .sum::<usize>()
        / copies.len();
    // The kinds take turns, ROUNDS times, so a change in the machine's load while they run
    // is spread over all of them.
    let mut sums = [(Duration::ZERO, Duration::ZERO); 5];
    for _ in 0..ROUNDS {
        for (kind, sum) in [Kind::Apply, Kind::Merge, Kind::Put, Kind::Label, Kind::Tiny]
            .into_iter()
            .zip(sums.iter_mut())
        {
            let (first, change) = one_kind(&api, &copies, kind, server).await?;
            sum.0 += first;
            sum.1 += change;
        }
    }
    let [apply, merge, put, label, tiny] = sums.map(|(f, c)| (f / ROUNDS, c / ROUNDS));
    let bare = without_rules(client, ns, &copies, server).await?;
    Ok(Some(StatusCpu {
        mappings: copies.len(),
        apply_first: apply.0,
        apply_change: apply.1,
        merge_first: merge.0,
        merge_change: merge.1,
        put_first: put.0,
        put_change: put.1,
        label_first: label.0,
        label_change: label.1,
        tiny_first: tiny.0,
        tiny_change: tiny.1,
        status_bytes,
        bare_merge_first: bare.0,
        bare_merge_change: bare.1,
    }))
}
