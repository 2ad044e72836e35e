//! The plain-client floor: a client that does nothing else server-side-applies a controller's
//! published slices (read back, stripped of what the server set, renamed and relabelled so no
//! controller takes them for its own), one at a time and four in flight, then deletes them; and
//! creates them with a plain POST, as kube-controller-manager writes its slices. On the real
//! API server it also charges kube-apiserver's CPU to each kind of write: an apply that creates,
//! an apply that changes one endpoint, a no-op apply, a create, and an update (PUT with the
//! resourceVersion) that changes one endpoint, as the native controller updates its slices.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::Error;

/// The floor's field manager and `managed-by` value.
const MANAGER: &str = "scale-bench-floor";

/// What applying the same slices took.
#[derive(Debug, Clone)]
pub struct Floor {
    /// Slices applied.
    pub slices: usize,
    /// Endpoints in the largest of them.
    pub max_endpoints: usize,
    /// One apply at a time, the median apply.
    pub p50: Duration,
    /// The same slices created with a plain POST (as kube-controller-manager writes them), one
    /// at a time, the median create.
    pub create_p50: Duration,
    /// One at a time, all of them.
    pub sequential: Duration,
    /// Four in flight (the operator's default `--concurrency`).
    pub parallel4: Duration,
    /// kube-apiserver's CPU per write of each kind, when its process was given.
    pub server_cpu: Option<ServerCpu>,
}

/// kube-apiserver's CPU (user + system) per slice write, by kind of write.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerCpu {
    /// A server-side apply that creates the slice.
    pub apply_create: Duration,
    /// A server-side apply that changes one endpoint's `ready`.
    pub apply_change: Duration,
    /// A server-side apply of what is already there.
    pub apply_noop: Duration,
    /// A POST.
    pub create: Duration,
    /// A PUT with the resourceVersion, changing one endpoint's `ready`.
    pub update: Duration,
}

fn renamed(ns: &str, s: &EndpointSlice) -> (String, Value) {
    let name = format!("floor-{}", s.name_any());
    let service = s
        .labels()
        .get("kubernetes.io/service-name")
        .cloned()
        .unwrap_or_default();
    let obj = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": ns, "labels": {
            "kubernetes.io/service-name": format!("floor-{service}"),
            "endpointslice.kubernetes.io/managed-by": MANAGER,
        }},
        "addressType": s.address_type,
        "endpoints": s.endpoints,
        "ports": s.ports,
    });
    (name, obj)
}

/// How the floor writes each slice.
#[derive(Clone, Copy)]
enum Write {
    /// Server-side apply, as the operator does.
    Apply,
    /// POST, as kube-controller-manager creates its slices.
    Create,
    /// PUT of the object as read back, as kube-controller-manager updates its slices.
    Update,
}

/// `obj` with its first endpoint's `ready` flipped.
fn changed(obj: &Value) -> Value {
    let mut obj = obj.clone();
    if let Some(ready) = obj.pointer_mut("/endpoints/0/conditions/ready") {
        *ready = json!(!ready.as_bool().unwrap_or(true));
    } else if let Some(endpoint) = obj.pointer_mut("/endpoints/0") {
        endpoint["conditions"] = json!({"ready": false});
    }
    obj
}

async fn write_one(
    api: &Api<EndpointSlice>,
    how: Write,
    name: &str,
    obj: &Value,
) -> Result<Duration, Error> {
    let t = Instant::now();
    match how {
        Write::Apply => {
            let pp = PatchParams::apply(MANAGER).force();
            api.patch(name, &pp, &Patch::Apply(obj)).await?;
        }
        Write::Create => {
            api.create(&post_params(), &serde_json::from_value(obj.clone())?)
                .await?;
        }
        Write::Update => {
            api.replace(name, &post_params(), &serde_json::from_value(obj.clone())?)
                .await?;
        }
    }
    Ok(t.elapsed())
}

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(MANAGER.into()),
        ..PostParams::default()
    }
}

/// Writes `objects` one at a time; kube-apiserver's CPU per write (`server` is its pid).
async fn server_cpu_per_write(
    api: &Api<EndpointSlice>,
    objects: &[(String, Value)],
    how: Write,
    server: u32,
) -> Result<Duration, Error> {
    let before = crate::procs::cpu_time(server)?;
    for (name, obj) in objects {
        write_one(api, how, name, obj).await?;
    }
    let used = crate::procs::cpu_time(server)?.saturating_sub(before);
    Ok(used / objects.len().max(1) as u32)
}

/// kube-apiserver's CPU per write of each kind, on `objects` (deleted again afterwards).
async fn server_cpu(
    api: &Api<EndpointSlice>,
    objects: &[(String, Value)],
    server: u32,
) -> Result<ServerCpu, Error> {
    let changes: Vec<(String, Value)> = objects
        .iter()
        .map(|(n, o)| (n.clone(), changed(o)))
        .collect();
    let mut out = ServerCpu {
        apply_create: server_cpu_per_write(api, objects, Write::Apply, server).await?,
        apply_change: server_cpu_per_write(api, &changes, Write::Apply, server).await?,
        apply_noop: server_cpu_per_write(api, &changes, Write::Apply, server).await?,
        ..ServerCpu::default()
    };
    delete_all(api).await?;
    out.create = server_cpu_per_write(api, objects, Write::Create, server).await?;
    // The PUTs carry the resourceVersion each create answered with, read back in one list.
    let versions: std::collections::HashMap<String, String> = api
        .list(&ListParams::default().labels(&floor_selector()))
        .await?
        .items
        .into_iter()
        .map(|s| (s.name_any(), s.resource_version().unwrap_or_default()))
        .collect();
    let updates: Vec<(String, Value)> = changes
        .into_iter()
        .map(|(name, mut obj)| {
            obj["metadata"]["resourceVersion"] = json!(versions.get(&name));
            (name, obj)
        })
        .collect();
    out.update = server_cpu_per_write(api, &updates, Write::Update, server).await?;
    delete_all(api).await?;
    Ok(out)
}

fn floor_selector() -> String {
    format!("endpointslice.kubernetes.io/managed-by={MANAGER}")
}

async fn delete_all(api: &Api<EndpointSlice>) -> Result<(), Error> {
    let lp = ListParams::default().labels(&floor_selector());
    api.delete_collection(&DeleteParams::default(), &lp).await?;
    Ok(())
}

/// Writes `objects` with `inflight` requests at once; returns each write's time and the total,
/// then deletes them.
async fn write_all(
    api: &Api<EndpointSlice>,
    objects: &[(String, Value)],
    how: Write,
    inflight: usize,
) -> Result<(Vec<Duration>, Duration), Error> {
    let t = Instant::now();
    let each = futures::stream::iter(
        objects
            .iter()
            .map(|(name, obj)| write_one(api, how, name, obj)),
    )
    .buffer_unordered(inflight)
    .try_collect::<Vec<_>>()
    .await?;
    let took = t.elapsed();
    delete_all(api).await?;
    Ok((each, took))
}

/// Times a plain client applying the slices of namespace `ns` that `selector` selects; with
/// `server` (kube-apiserver's pid), charges its CPU to each kind of write.
pub async fn measure(
    client: &Client,
    ns: &str,
    selector: &str,
    server: Option<u32>,
) -> Result<Floor, Error> {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let published = api.list(&ListParams::default().labels(selector)).await?;
    let objects: Vec<(String, Value)> = published.items.iter().map(|s| renamed(ns, s)).collect();
    let (each, sequential) = write_all(&api, &objects, Write::Apply, 1).await?;
    let (_, parallel4) = write_all(&api, &objects, Write::Apply, 4).await?;
    let (created, _) = write_all(&api, &objects, Write::Create, 1).await?;
    let server_cpu = match server {
        Some(pid) => Some(server_cpu(&api, &objects, pid).await?),
        None => None,
    };
    Ok(Floor {
        slices: objects.len(),
        max_endpoints: published
            .items
            .iter()
            .map(|s| s.endpoints.len())
            .max()
            .unwrap_or(0),
        p50: crate::percentile(&each, 0.5),
        create_p50: crate::percentile(&created, 0.5),
        sequential,
        parallel4,
        server_cpu,
    })
}
