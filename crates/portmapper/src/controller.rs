//! Wiring: reflectors, the kube-runtime Controller, and the shared reconcile context.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc;
use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{self, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use portmapper_api::PortMapping;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::context::{Context, Settings};
use crate::error::Error;
use crate::http::Readiness;
use crate::index::SharedIndex;
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::pods::PodWatches;
use crate::watches::{Change, Trigger, is_ready, reflect, strip_managed_fields};

/// Label every object we publish carries; our watches select on it.
pub const MANAGED_BY_SELECTOR: &str = "endpointslice.kubernetes.io/managed-by=portmapper.dev";
/// Every slice not published by us, including those without the label: the native
/// controllers' (migration evidence) and whoever else holds a name a plan may want.
pub const NOT_MANAGED_BY_SELECTOR: &str = "endpointslice.kubernetes.io/managed-by!=portmapper.dev";

fn api<K>(client: &Client, namespace: &Option<String>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Runs the controller until `shutdown` fires.
pub async fn run(
    client: Client,
    settings: Settings,
    leadership: Leadership,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    run_probing_with(
        client, settings, None, leadership, metrics, readiness, shutdown,
    )
    .await
}

/// [`run`], probing with `probe_executor` instead of over the host network (the demo probes
/// inside its own pod network namespace).
pub async fn run_probing_with(
    client: Client,
    settings: Settings,
    probe_executor: Option<crate::probing::CustomExecutor>,
    leadership: Leadership,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    // Lets every reflector tell a silent watch (no event, no bookmark) from a quiet one.
    let client = crate::watch_health::track(client, readiness.watches());
    let (trigger, triggers) = mpsc::unbounded();
    let index = SharedIndex::default();
    let quiet = Arc::new(crate::quiet::QuietPasses::default());
    let trigger = Trigger::new(
        trigger,
        readiness.watches().clone(),
        metrics.clone(),
        quiet.clone(),
    );
    let mut tasks = tokio::task::JoinSet::new();

    let pods = PodWatches::new(
        client.clone(),
        settings.namespace.clone(),
        index.clone(),
        trigger.clone(),
    );

    // PortMappings: our own reflector, so that its events feed the index before the Controller
    // sees them (the Controller runs on the same stream).
    let (portmappings, pm_writer) = reflector::store::<PortMapping>();
    let pm_events = {
        let (index, pods) = (index.clone(), pods.clone());
        crate::watches::indexed(
            api::<PortMapping>(&client, &settings.namespace),
            watcher::Config::default(),
            "portmappings",
            strip_managed_fields,
            pm_writer,
            move |change| match change {
                Change::Apply(pm) => {
                    let applied = index.lock().apply_portmapping(pm);
                    if let Some(source) = applied.reindex {
                        pods.reindex(&source);
                    }
                    applied.affected
                }
                Change::Delete(pm) => index.lock().delete_portmapping(&ObjectRef::from_obj(pm)),
                Change::Relisted(present) => index.lock().retain_portmappings(present),
            },
            trigger.clone(),
        )
    };
    // A PortMapping whose status alone changed (our own status write coming back) is not
    // reconciled again: that pass would only find nothing to do.
    let controller = Controller::for_stream(
        pm_events
            .touched_objects()
            .predicate_filter(crate::index::semantic_version, Default::default()),
        portmappings.clone(),
    );

    let idx = index.clone();
    let (services, task) = reflect(
        api::<Service>(&client, &settings.namespace),
        watcher::Config::default(),
        "services",
        strip_managed_fields,
        move |change| match change {
            Change::Apply(svc) | Change::Delete(svc) => {
                idx.lock().service_changed(&ObjectRef::from_obj(svc))
            }
            Change::Relisted(present) => idx.lock().services_missing(present),
        },
        trigger.clone(),
    );
    tasks.spawn(task);

    let idx = index.clone();
    let (slices, task) = reflect(
        api::<EndpointSlice>(&client, &settings.namespace),
        watcher::Config::default().labels(MANAGED_BY_SELECTOR),
        "endpointslices",
        strip_managed_fields,
        move |change| match change {
            Change::Apply(slice) => idx.lock().apply_slice(slice),
            Change::Delete(slice) => idx.lock().delete_slice(&ObjectRef::from_obj(slice)),
            Change::Relisted(present) => idx.lock().retain_slices(present),
        },
        trigger.clone(),
    );
    tasks.spawn(task);

    let idx = index.clone();
    let (owned_endpoints, task) = reflect(
        api::<Endpoints>(&client, &settings.namespace),
        watcher::Config::default().labels(MANAGED_BY_SELECTOR),
        "endpoints",
        strip_managed_fields,
        move |change| match change {
            Change::Apply(ep) => idx.lock().apply_endpoints(ep),
            Change::Delete(ep) => idx.lock().delete_endpoints(&ObjectRef::from_obj(ep)),
            Change::Relisted(present) => idx.lock().retain_endpoints(present),
        },
        trigger.clone(),
    );
    tasks.spawn(task);

    let idx = index.clone();
    let (native_slices, task) = reflect(
        api::<PartialObjectMeta<EndpointSlice>>(&client, &settings.namespace),
        watcher::Config::default().labels(NOT_MANAGED_BY_SELECTOR),
        "native-endpointslices",
        strip_managed_fields,
        move |change| match change {
            Change::Apply(slice) => idx.lock().apply_native_slice(slice),
            Change::Delete(slice) => idx.lock().delete_native_slice(&ObjectRef::from_obj(slice)),
            Change::Relisted(present) => idx.lock().retain_native_slices(present),
        },
        trigger.clone(),
    );
    tasks.spawn(task);

    let nodes = if settings.node_lookups {
        let idx = index.clone();
        let (store, task) = reflect(
            Api::<PartialObjectMeta<Node>>::all(client.clone()),
            watcher::Config::default(),
            "nodes",
            strip_managed_fields,
            move |change| match change {
                Change::Apply(node) => idx.lock().apply_node(node),
                Change::Delete(node) => idx.lock().delete_node(&node.name_any()),
                Change::Relisted(present) => idx
                    .lock()
                    .retain_nodes(&present.iter().map(|n| n.name.clone()).collect()),
            },
            trigger.clone(),
        );
        tasks.spawn(task);
        Some(store)
    } else {
        None
    };

    let (prober, probe_events) =
        crate::probing::start(settings.probe_concurrency, probe_executor, &metrics)?;
    tasks.spawn(crate::probing::forward_events(
        probe_events,
        trigger.clone(),
    ));
    let reporter = Reporter {
        controller: "portmapper".into(),
        instance: settings.instance.clone(),
    };
    let ctx = Arc::new(Context {
        recorder: Recorder::new(client.clone(), reporter),
        prober,
        client,
        settings: settings.clone(),
        portmappings: portmappings.clone(),
        services: services.clone(),
        slices: slices.clone(),
        nodes: nodes.clone(),
        owned_endpoints,
        native_slices,
        index: index.clone(),
        pods: pods.clone(),
        leadership: leadership.clone(),
        metrics: metrics.clone(),
        warned: Mutex::new(HashMap::new()),
        memos: Mutex::new(HashMap::new()),
        status_written: Mutex::new(HashMap::new()),
        backoff: crate::backoff::Backoffs::default(),
        gates_written: crate::gates::GatesWritten::default(),
        quiet,
        batches: crate::batch_window::BatchWindows::new(settings.batch_window),
    });

    // Readiness = every shared store has listed once; pod watches start lazily per pool.
    // Reconciles before that wrote nothing and wait `PENDING_RETRY` (2 s); the sync wakes
    // every PortMapping at once instead (that wait was 2 s of a 3–9 s first publication).
    let (synced_tx, synced_rx) = futures::channel::oneshot::channel::<()>();
    {
        let (pms, svcs, sls, nodes, eps, natives) = (
            portmappings.clone(),
            services.clone(),
            slices.clone(),
            nodes.clone(),
            ctx.owned_endpoints.clone(),
            ctx.native_slices.clone(),
        );
        tasks.spawn(async move {
            // Polled, not awaited: a store's wait_until_ready() (kube-runtime 5.0) wakes only its
            // latest waiter, and the Controller (PortMappings) and reconciles (is_ready on slices
            // and Services) poll the same stores, so an await here was never woken.
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tick.tick().await;
                if is_ready(&pms)
                    && is_ready(&svcs)
                    && is_ready(&sls)
                    && is_ready(&eps)
                    && is_ready(&natives)
                    && nodes.as_ref().is_none_or(is_ready)
                {
                    break;
                }
            }
            info!("caches synced");
            readiness.set_ready();
            // The Controller may be gone (shutdown): nobody to wake.
            let _ = synced_tx.send(());
        });
    }
    // Stop pod watches (and probes) that no PortMapping needs any more.
    {
        let (pods, ctx) = (pods.clone(), ctx.clone());
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(30));
            loop {
                tick.tick().await;
                pods.retain_needed();
                let alive = ctx
                    .index
                    .lock()
                    .portmapping_keys()
                    .map(|pm| {
                        portmapper_probe::MappingKey::new(
                            pm.namespace.clone().unwrap_or_default(),
                            pm.name.clone(),
                        )
                    })
                    .collect();
                crate::probing::retain(&ctx.prober, &alive);
            }
        });
    }
    // Becoming leader re-examines everything: the previous leader may have left work undone.
    let leader_changes = futures::stream::unfold(leadership.subscribe(), |mut rx| async move {
        loop {
            rx.changed().await.ok()?;
            if *rx.borrow_and_update() {
                return Some(((), rx));
            }
        }
    });
    metrics.leader.set(i64::from(leadership.is_leader()));
    let synced = futures::stream::once(synced_rx).filter_map(|r| futures::future::ready(r.ok()));
    let reconcile_all = futures::stream::select(leader_changes, synced);

    let stop = shutdown.clone();
    let gone_ctx = ctx.clone();
    controller
        .with_config(controller::Config::default().concurrency(settings.concurrency))
        .reconcile_on(triggers)
        .reconcile_all_on(reconcile_all)
        .graceful_shutdown_on(async move { stop.cancelled().await })
        .run(
            crate::reconcile::reconcile,
            crate::reconcile::error_policy,
            ctx,
        )
        .for_each(|result| {
            match result {
                Ok((obj, _)) => debug!(portmapping = %obj, "reconciled"),
                Err(controller::Error::ObjectNotFound(obj)) => {
                    debug!(portmapping = %obj, "PortMapping is gone");
                    let key = portmapper_probe::MappingKey::new(
                        obj.namespace.clone().unwrap_or_default(),
                        obj.name.clone(),
                    );
                    gone_ctx.prober.remove_mapping(&key);
                    gone_ctx
                        .metrics
                        .forget((obj.namespace.as_deref().unwrap_or_default(), &obj.name));
                    let mut gone = ObjectRef::<PortMapping>::new(&obj.name);
                    if let Some(ns) = &obj.namespace {
                        gone = gone.within(ns);
                    }
                    gone_ctx.forget(&gone);
                }
                // The error policy logged it, once per change of error (see `backoff.rs`).
                Err(controller::Error::ReconcilerFailed(err, obj)) => {
                    debug!(portmapping = %obj, error = %err, "reconcile failed")
                }
                Err(err) => warn!(error = %err, "reconcile failed"),
            }
            futures::future::ready(())
        })
        .await;
    tasks.abort_all();
    drop(trigger);
    Ok(())
}

#[cfg(test)]
mod tests {
    use portmapper_api::MANAGER;
    use portmapper_core::ownership::LABEL_MANAGED_BY;

    use super::{MANAGED_BY_SELECTOR, NOT_MANAGED_BY_SELECTOR};

    #[test]
    fn the_watch_selectors_split_on_the_label_the_ownership_classifier_reads() {
        assert_eq!(MANAGED_BY_SELECTOR, format!("{LABEL_MANAGED_BY}={MANAGER}"));
        assert_eq!(
            NOT_MANAGED_BY_SELECTOR,
            format!("{LABEL_MANAGED_BY}!={MANAGER}")
        );
    }
}
