//! Executes the migration steps decided in [`crate::migration`] through the apply layer, and
//! gathers their evidence (live Endpoints, native slices) from caches or, when needed, one GET.

use k8s_openapi::api::core::v1::{Endpoints, Service};
use kube::api::Api;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use portmapper_api::PortMapping;
use portmapper_core::planner::Plan;
use tracing::{info, warn};

use portmapper_core::EventReason;

use crate::apply::Writer;
use crate::context::Context;
use crate::error::Error;
use crate::metrics::ResourceLabels;
use portmapper_core::planner::migration::{self, Input, NativeSlice, Step};

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

/// Deletes the Endpoints objects this PortMapping controls other than `keep` (all of them when
/// its Service is gone), from the cache; each with a UID precondition. Every deletion is
/// attempted (they are independent objects); every failure is returned, combined.
pub async fn delete_stray_endpoints(
    ctx: &Context,
    writer: &Writer<'_>,
    pm_uid: &str,
    keep: Option<&str>,
) -> Result<(), Error> {
    let owned = owned_endpoints(ctx, pm_uid);
    let mut errors = Vec::new();
    for step in migration::stray_endpoints(owned.iter().map(AsRef::as_ref), pm_uid, keep) {
        if let Step::DeleteEndpoints { name, uid, .. } = step
            && let Err(err) = writer.delete_endpoints(&name, &uid).await
        {
            errors.push(err);
        }
    }
    Error::combine(errors).map_or(Ok(()), Err)
}

/// The Endpoints objects the PortMapping with `uid` controls, from the cache.
pub fn owned_endpoints(ctx: &Context, uid: &str) -> Vec<std::sync::Arc<Endpoints>> {
    let keys = ctx.index.lock().owned_endpoints(uid);
    keys.iter()
        .filter_map(|k| ctx.owned_endpoints.get(k))
        .collect()
}

/// Whether the plan publishes a ready endpoint, in any family and in the primary one.
fn publishing(plan: &Plan, service: &Service) -> (bool, bool) {
    let primary = service
        .spec
        .as_ref()
        .and_then(|s| s.ip_families.as_ref())
        .and_then(|f| f.first().cloned())
        .unwrap_or_else(|| "IPv4".to_string());
    let ready = |s: &k8s_openapi::api::discovery::v1::EndpointSlice| {
        s.endpoints
            .iter()
            .any(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
    };
    let any = plan.slices.iter().any(|p| ready(&p.slice));
    let primary = plan
        .slices
        .iter()
        .any(|p| p.slice.address_type == primary && ready(&p.slice));
    (any, primary)
}

/// Decides and runs the migration steps; every error is returned, combined, after every step
/// ran (except native slice deletions after a failed native Endpoints delete).
#[allow(clippy::too_many_arguments)]
pub async fn converge(
    ctx: &Context,
    writer: &Writer<'_>,
    pm: &PortMapping,
    pm_ref: &ObjectRef<PortMapping>,
    service: &Service,
    plan: &Plan,
    live: Option<&Endpoints>,
    native: &[NativeSlice],
) -> Result<(), Error> {
    let (any, primary) = publishing(plan, service);
    let selector_present = service
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .is_some_and(|s| !s.is_empty());
    let pm_uid = pm.uid().unwrap_or_default();
    let input = Input {
        pm_uid: &pm_uid,
        selector_present,
        legacy_endpoints: pm.spec.legacy_endpoints,
        native_cleanup: pm.spec.native_cleanup,
        publishing: any,
        publishing_primary: primary,
        live_endpoints: live,
        planned_endpoints: plan.endpoints.as_ref(),
        endpoints_deletion: plan.endpoints_deletion.as_ref(),
        native_slices: native,
    };
    let mut steps = migration::steps(&input);
    let owned = owned_endpoints(ctx, &pm_uid);
    steps.extend(migration::stray_endpoints(
        owned.iter().map(AsRef::as_ref),
        &pm_uid,
        Some(&service.name_any()),
    ));
    let mut errors = Vec::new();
    let mut native_endpoints_delete_failed = false;
    let mut warned = Vec::new();
    for step in steps {
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

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ServiceSpec;
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointSlice};
    use portmapper_core::planner::{PlannedSlice, WriteAction};

    use super::*;

    fn slice(family: &str, ready: &[bool]) -> PlannedSlice {
        PlannedSlice {
            slice: std::sync::Arc::new(EndpointSlice {
                address_type: family.into(),
                endpoints: ready
                    .iter()
                    .map(|r| Endpoint {
                        conditions: Some(EndpointConditions {
                            ready: Some(*r),
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
            action: WriteAction::Unchanged,
        }
    }

    fn service(families: &[&str]) -> Service {
        Service {
            spec: Some(ServiceSpec {
                ip_families: Some(families.iter().map(|f| f.to_string()).collect()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn plan(slices: Vec<PlannedSlice>) -> Plan {
        Plan {
            slices,
            ..Plan::default()
        }
    }

    #[test]
    fn publishing_counts_ready_endpoints_per_primary_family() {
        let v4_only = plan(vec![slice("IPv4", &[true]), slice("IPv6", &[])]);
        assert_eq!(
            publishing(&v4_only, &service(&["IPv4", "IPv6"])),
            (true, true)
        );
        // An IPv6-primary Service whose pods only have IPv4 addresses: the Endpoints object
        // (primary family only) would be empty, so adoption must wait.
        assert_eq!(
            publishing(&v4_only, &service(&["IPv6", "IPv4"])),
            (true, false)
        );
    }

    #[test]
    fn draining_endpoints_are_not_publishing() {
        let draining = plan(vec![slice("IPv4", &[false, false])]);
        assert_eq!(publishing(&draining, &service(&["IPv4"])), (false, false));
        assert_eq!(publishing(&plan(vec![]), &service(&[])), (false, false));
    }
}
