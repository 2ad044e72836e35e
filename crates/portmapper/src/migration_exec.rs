//! Executes the migration steps a plan decided ([`portmapper_core::planner::migration`]) through
//! the apply layer, and gathers their evidence (live Endpoints, native slices, the Endpoints
//! objects the PortMapping controls) from caches or, when needed, one GET.

use k8s_openapi::api::core::v1::Endpoints;
use kube::api::Api;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use portmapper_api::PortMapping;
use tracing::{info, warn};

use portmapper_core::EventReason;

use crate::apply::Writer;
use crate::context::Context;
use crate::error::Error;
use crate::metrics::ResourceLabels;
use portmapper_core::planner::migration::{NativeSlice, Step};

/// The native controllers' slices labelled with this Service's name, from the metadata cache.
pub fn native_slices(ctx: &Context, ns: &str, service: &str) -> Vec<NativeSlice> {
    let keys = ctx.index.lock().native_slices(ns, service);
    keys.iter()
        .filter_map(|k| ctx.native_slices.get(k))
        .filter_map(|s| {
            Some(NativeSlice {
                name: s.name_any(),
                uid: s.uid()?,
                manager: s
                    .labels()
                    .get(portmapper_core::ownership::LABEL_MANAGED_BY)?
                    .clone(),
            })
        })
        .collect()
}

/// The Endpoints object named after the Service: ours from the cache; otherwise one GET, only
/// when the legacy mirror is on or native leftovers make it relevant.
pub async fn live_endpoints(
    ctx: &Context,
    writer: &Writer<'_>,
    pm: &PortMapping,
    service: &str,
    native_evidence: bool,
) -> Result<(Option<Endpoints>, Read), Error> {
    let ns = writer.namespace;
    if let Some(ours) = ctx.owned_endpoints.get(&ObjectRef::new(service).within(ns)) {
        return Ok((Some(ours.as_ref().clone()), Read::Cache));
    }
    if !(pm.spec.legacy_endpoints || native_evidence) {
        return Ok((None, Read::Cache));
    }
    let api: Api<Endpoints> = Api::namespaced(writer.client.clone(), ns);
    let found = api
        .get_opt(service)
        .await
        .map_err(|e| Error::kube(format!("reading Endpoints {ns}/{service}"), e))?;
    Ok((found, Read::Server))
}

/// Where an input was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// A watch-fed cache: its changes arrive as events.
    Cache,
    /// The API server: it may change without an event we see.
    Server,
}

/// The Endpoints objects the PortMapping with `uid` controls, from the cache.
pub fn owned_endpoints(ctx: &Context, uid: &str) -> Vec<std::sync::Arc<Endpoints>> {
    let keys = ctx.index.lock().owned_endpoints(uid);
    keys.iter()
        .filter_map(|k| ctx.owned_endpoints.get(k))
        .collect()
}

/// Runs the plan's migration steps ([`Plan::migration`](portmapper_core::Plan::migration)), in
/// order; every error is returned, combined, after every step ran (except native slice
/// deletions after a failed native Endpoints delete, as the step says). Decides nothing.
pub async fn converge(
    ctx: &Context,
    writer: &Writer<'_>,
    pm: &PortMapping,
    pm_ref: &ObjectRef<PortMapping>,
    steps: &[Step],
) -> Result<(), Error> {
    let mut errors = Vec::new();
    let mut native_endpoints_delete_failed = false;
    let mut warned = Vec::new();
    for step in steps.iter().cloned() {
        // Only the native Endpoints delete needs the native slices as evidence for its retry;
        // adopting or writing our mirror is retried without them.
        let native_endpoints_delete = matches!(step, Step::DeleteEndpoints { native: true, .. });
        let result = match step {
            Step::ApplyEndpoints(endpoints) => writer.apply_endpoints(&endpoints).await,
            Step::AdoptEndpoints {
                endpoints,
                strip_annotations,
                resource_version,
            } => {
                match writer
                    .strip_endpoints_annotations(
                        &endpoints.name_any(),
                        &strip_annotations,
                        resource_version.as_deref(),
                    )
                    .await
                {
                    Ok(()) => writer.apply_endpoints(&endpoints).await,
                    Err(err) => Err(err),
                }
            }
            Step::DeleteEndpoints { name, uid, native } => {
                let r = writer.delete_endpoints(&name, &uid).await;
                if native && matches!(r, Ok(true)) {
                    ctx.metrics
                        .native_cleanup_deletions
                        .get_or_create(&ResourceLabels {
                            resource: "endpoints",
                        })
                        .inc();
                }
                r.map(drop)
            }
            Step::DeleteNativeSlice { .. } if native_endpoints_delete_failed => {
                info!(portmapping = %pm_ref, "deleting the native Endpoints object failed; native slices stay as evidence for the next pass");
                Ok(())
            }
            Step::DeleteNativeSlice { name, uid } => {
                let r = writer.delete_slice(&name, &uid).await;
                if matches!(r, Ok(true)) {
                    ctx.metrics
                        .native_cleanup_deletions
                        .get_or_create(&ResourceLabels {
                            resource: "endpointslice",
                        })
                        .inc();
                }
                r.map(drop)
            }
            Step::Warn { reason, note } => {
                warned.push(reason);
                if ctx.warn_once(pm_ref, reason.as_str()) {
                    crate::context::warn_event(ctx, pm, pm_ref, reason, &note).await;
                }
                Ok(())
            }
            Step::Normal { reason, note } => {
                info!(portmapping = %pm_ref, reason = reason.as_str(), "{note}");
                normal_event(ctx, pm, reason, &note).await;
                Ok(())
            }
        };
        if let Err(err) = result {
            warn!(portmapping = %pm_ref, error = %err, "migration step failed; the evidence stays for the next pass");
            native_endpoints_delete_failed |= native_endpoints_delete;
            errors.push(err);
        }
    }
    // Warnings whose cause cleared are re-armed.
    for reason in [
        EventReason::EndpointsCollision,
        EventReason::LegacyEndpointsNotAdopted,
        EventReason::LegacyEndpointsAdoptionDeferred,
        EventReason::NativeCleanupDeferred,
    ] {
        if !warned.contains(&reason) {
            ctx.clear_warning(pm_ref, reason.as_str());
        }
    }
    Error::combine(errors).map_or(Ok(()), Err)
}

async fn normal_event(ctx: &Context, pm: &PortMapping, reason: EventReason, note: &str) {
    let event = Event {
        type_: EventType::Normal,
        reason: reason.to_string(),
        note: Some(note.to_string()),
        action: "Reconcile".to_string(),
        secondary: None,
    };
    if ctx.leadership.is_leader()
        && ctx
            .recorder
            .publish(&event, &pm.object_ref(&()))
            .await
            .is_ok()
    {
        ctx.metrics.write("create", "events");
    }
}
