//! Wiring: reflectors, the kube-runtime Controller, and the shared reconcile context.

mod housekeeping;
mod inputs;
pub mod pod_wire;
pub mod pods;
pub mod watches;

use std::sync::Arc;

use futures::StreamExt;
use futures::channel::mpsc;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{self, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource};
use portmapper_api::PortMapping;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::controller::pods::PodWatches;
use crate::controller::watches::Feeds;
use crate::index::SharedIndex;
use crate::index::trigger::Trigger;
use crate::reconcile::context::{Context, Settings};
use crate::reconcile::namespace_share::NamespaceShare;
use crate::reconcile::state::States;
use crate::runtime::error::Error;
use crate::runtime::http::Readiness;
use crate::runtime::leader::Leadership;
use crate::runtime::metrics::Metrics;

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
    probe_executor: Option<crate::reconcile::probing::CustomExecutor>,
    leadership: Leadership,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    // Lets every reflector tell a silent watch (no event, no bookmark) from a quiet one.
    let client = crate::runtime::watch_health::track(client, readiness.watches());
    let (trigger, triggers) = mpsc::unbounded();
    let index = SharedIndex::default();
    let trigger = Trigger::new(trigger);
    let feeds = Feeds {
        trigger: trigger.clone(),
        health: readiness.watches().clone(),
        metrics: metrics.clone(),
    };
    let mut tasks = tokio::task::JoinSet::new();
    index
        .lock()
        .limit_label_watches(Some(settings.max_pod_watches_per_namespace));
    let pods = PodWatches::new(client.clone(), index.clone(), feeds.clone());
    let (portmappings, pm_events) =
        inputs::portmappings(&client, &settings.namespace, &index, &pods, &feeds);
    // A PortMapping whose status alone changed (our own status write coming back) is not
    // reconciled again: that pass would only find nothing to do.
    let controller = Controller::for_stream(
        pm_events.touched_objects().predicate_filter(
            crate::index::portmappings::semantic_version,
            Default::default(),
        ),
        portmappings.clone(),
    );
    let stores = inputs::reflect_all(&client, &settings, &index, &feeds, &mut tasks, portmappings);
    let prober = start_prober(&settings, probe_executor, &metrics, &trigger, &mut tasks)?;
    let reporter = Reporter {
        controller: "portmapper".into(),
        instance: settings.instance.clone(),
    };
    let ctx = Arc::new(Context {
        recorder: Recorder::new(client.clone(), reporter),
        prober,
        probe_aliases: Default::default(),
        demands: Default::default(),
        client,
        settings: settings.clone(),
        stores: stores.clone(),
        index,
        trigger: trigger.clone(),
        leadership: leadership.clone(),
        metrics: metrics.clone(),
        states: States::new(settings.batch_window),
        passes: NamespaceShare::new(settings.concurrency, settings.namespace.as_deref()),
    });
    let synced = housekeeping::spawn(&mut tasks, readiness, pods, ctx.clone());
    metrics.leader.set(i64::from(leadership.is_leader()));
    let gone_ctx = ctx.clone();
    controller
        .with_config(controller::Config::default().concurrency(settings.concurrency))
        .reconcile_on(trigger.taking(triggers))
        .reconcile_all_on(reconcile_all(&leadership, synced))
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(
            crate::reconcile::reconcile,
            crate::reconcile::error_policy,
            ctx,
        )
        .for_each(|result| {
            ended(&gone_ctx, result);
            futures::future::ready(())
        })
        .await;
    tasks.abort_all();
    drop(trigger);
    Ok(())
}

/// Starts the prober, its events forwarded to the Controller as reconciles.
fn start_prober(
    settings: &Settings,
    executor: Option<crate::reconcile::probing::CustomExecutor>,
    metrics: &Metrics,
    trigger: &Trigger,
    tasks: &mut tokio::task::JoinSet<()>,
) -> Result<portmapper_probe::Prober, Error> {
    let (prober, events) = crate::reconcile::probing::start(settings, executor, metrics)?;
    tasks.spawn(crate::reconcile::probing::forward_events(
        events,
        trigger.clone(),
    ));
    Ok(prober)
}

/// When to reconcile every PortMapping: once the caches have synced, and on becoming leader
/// (the previous leader may have left work undone).
fn reconcile_all(
    leadership: &Leadership,
    synced: futures::channel::oneshot::Receiver<()>,
) -> impl futures::Stream<Item = ()> + Send + 'static {
    let leader_changes = futures::stream::unfold(leadership.subscribe(), |mut rx| async move {
        loop {
            rx.changed().await.ok()?;
            if *rx.borrow_and_update() {
                return Some(((), rx));
            }
        }
    });
    let synced = futures::stream::once(synced).filter_map(|r| futures::future::ready(r.ok()));
    futures::stream::select(leader_changes, synced)
}

/// How one reconcile ended, as the Controller reports it: a PortMapping found gone is
/// forgotten.
fn ended<E: std::fmt::Display + std::error::Error + 'static>(
    ctx: &Context,
    result: Result<
        (ObjectRef<PortMapping>, controller::Action),
        controller::Error<E, watcher::Error>,
    >,
) {
    match result {
        Ok((obj, _)) => debug!(portmapping = %obj, "reconciled"),
        Err(controller::Error::ObjectNotFound(obj)) => {
            debug!(portmapping = %obj, "PortMapping is gone");
            let mut gone = ObjectRef::<PortMapping>::new(&obj.name);
            if let Some(ns) = &obj.namespace {
                gone = gone.within(ns);
            }
            ctx.forget(&gone);
        }
        // The error policy logged it, once per change of error (see `backoff.rs`).
        Err(controller::Error::ReconcilerFailed(err, obj)) => {
            debug!(portmapping = %obj, error = %err, "reconcile failed")
        }
        Err(err) => warn!(error = %err, "reconcile failed"),
    }
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
