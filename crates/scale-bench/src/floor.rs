//! The plain-client floor: a client that does nothing else server-side-applies a controller's
//! published slices (read back, stripped of what the server set, renamed and relabelled so no
//! controller takes them for its own), one at a time and four in flight, then deletes them; and
//! creates them with a plain POST, as kube-controller-manager writes its slices.

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
            let pp = PostParams {
                field_manager: Some(MANAGER.into()),
                ..PostParams::default()
            };
            api.create(&pp, &serde_json::from_value(obj.clone())?)
                .await?;
        }
    }
    Ok(t.elapsed())
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
    let lp =
        ListParams::default().labels(&format!("endpointslice.kubernetes.io/managed-by={MANAGER}"));
    api.delete_collection(&DeleteParams::default(), &lp).await?;
    Ok((each, took))
}

/// Times a plain client applying the slices of namespace `ns` that `selector` selects.
pub async fn measure(client: &Client, ns: &str, selector: &str) -> Result<Floor, Error> {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let published = api.list(&ListParams::default().labels(selector)).await?;
    let objects: Vec<(String, Value)> = published.items.iter().map(|s| renamed(ns, s)).collect();
    let (each, sequential) = write_all(&api, &objects, Write::Apply, 1).await?;
    let (_, parallel4) = write_all(&api, &objects, Write::Apply, 4).await?;
    let (created, _) = write_all(&api, &objects, Write::Create, 1).await?;
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
    })
}
