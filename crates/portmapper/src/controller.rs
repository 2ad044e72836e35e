//! Wiring: reflectors, the kube-runtime Controller, and the shared reconcile context.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc;
use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use portmapper_api::PortMapping;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::error::Error;
use crate::http::Readiness;
use crate::leader::Leadership;
use crate::metrics::{CategoryLabels, Metrics, ResultLabels};
use crate::pods::PodWatches;
use crate::watches::{Trigger, is_ready, reflect, strip_managed_fields};

/// Label every object we publish carries; our watches select on it.
pub const MANAGED_BY_SELECTOR: &str = "endpointslice.kubernetes.io/managed-by=portmapper.dev";

/// Settings of one controller instance.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Namespace scope (None = all namespaces).
    pub namespace: Option<String>,
    /// Concurrent reconciles.
    pub concurrency: u16,
    /// Requeue period of a converged PortMapping.
    pub resync: Duration,
    /// Read Nodes for zones.
    pub node_lookups: bool,
    /// Identity for Events.
    pub instance: Option<String>,
    /// Network probes in flight at once, across all PortMappings.
    pub probe_concurrency: usize,
}

/// What every reconcile reads and writes through.
pub struct Context {
    pub client: Client,
    pub settings: Settings,
    pub portmappings: Store<PortMapping>,
    pub services: Store<Service>,
    pub slices: Store<EndpointSlice>,
    pub nodes: Option<Store<PartialObjectMeta<Node>>>,
    /// Endpoints objects we publish (legacy mirror), found by our managed-by label.
    pub owned_endpoints: Store<Endpoints>,
    /// The native controllers' slices (metadata only): evidence for the selector migration.
    pub native_slices: Store<PartialObjectMeta<EndpointSlice>>,
    pub pods: Arc<PodWatches>,
    pub leadership: Leadership,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    /// Probes network checks outside reconciles; reconciles read its cached results.
    pub prober: portmapper_probe::Prober,
    /// Warning reasons already emitted per PortMapping, so each warning is sent once per
    /// occurrence and re-armed when its cause clears.
    pub warned: Mutex<HashMap<ObjectRef<PortMapping>, Vec<&'static str>>>,
}

impl Context {
    /// Zone of a node, from the `topology.kubernetes.io/zone` label.
    pub fn node_zones(&self) -> BTreeMap<String, String> {
        let Some(nodes) = &self.nodes else {
            return BTreeMap::new();
        };
        nodes
            .state()
            .iter()
            .filter_map(|n| {
                let zone = n.labels().get("topology.kubernetes.io/zone")?;
                Some((n.name_any(), zone.clone()))
            })
            .collect()
    }

    /// Records that `reason` was warned for `pm`; true the first time.
    pub fn warn_once(&self, pm: &ObjectRef<PortMapping>, reason: &'static str) -> bool {
        let mut warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        let seen = warned.entry(pm.clone()).or_default();
        if seen.contains(&reason) {
            false
        } else {
            seen.push(reason);
            true
        }
    }

    /// Re-arms `reason` for `pm` once its cause has cleared.
    pub fn clear_warning(&self, pm: &ObjectRef<PortMapping>, reason: &'static str) {
        let mut warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(seen) = warned.get_mut(pm) {
            seen.retain(|r| *r != reason);
        }
    }
}

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

/// PortMappings in the Service's namespace that reference it.
fn referencing(pms: &Store<PortMapping>, svc: &Service) -> Vec<ObjectRef<PortMapping>> {
    let ns = svc.namespace();
    let name = svc.name_any();
    pms.state()
        .iter()
        .filter(|pm| pm.namespace() == ns && pm.spec.service_ref.name == name)
        .map(|pm| ObjectRef::from_obj(pm.as_ref()))
        .collect()
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
    let client = crate::watches::track(client, readiness.watches());
    let (trigger, triggers) = mpsc::unbounded();
    let trigger = Trigger::new(trigger, readiness.watches().clone(), metrics.clone());
    let pm_api: Api<PortMapping> = api(&client, &settings.namespace);
    // Our own PortMapping watcher (Controller::new's has no backoff and no stall detection).
    let (pm_store, pm_stream) =
        crate::watches::portmappings(pm_api, watcher::Config::default(), &trigger);
    let controller = Controller::for_stream(pm_stream, pm_store);
    let portmappings = controller.store();
    let mut tasks = tokio::task::JoinSet::new();

    let pms = portmappings.clone();
    let (services, task) = reflect(
        api::<Service>(&client, &settings.namespace),
        watcher::Config::default(),
        "services",
        strip_managed_fields,
        move |svc: &Service| referencing(&pms, svc),
        trigger.clone(),
    );
    tasks.spawn(task);

    let (slices, task) = reflect(
        api::<EndpointSlice>(&client, &settings.namespace),
        watcher::Config::default().labels(MANAGED_BY_SELECTOR),
        "endpointslices",
        strip_managed_fields,
        |slice: &EndpointSlice| crate::owner::portmapping_owner(slice),
        trigger.clone(),
    );
    tasks.spawn(task);

    let (owned_endpoints, task) = reflect(
        api::<Endpoints>(&client, &settings.namespace),
        watcher::Config::default().labels(MANAGED_BY_SELECTOR),
        "endpoints",
        strip_managed_fields,
        |ep: &Endpoints| crate::owner::portmapping_owner(ep),
        trigger.clone(),
    );
    tasks.spawn(task);

    let pms = portmappings.clone();
    let (native_slices, task) = reflect(
        api::<PartialObjectMeta<EndpointSlice>>(&client, &settings.namespace),
        watcher::Config::default().labels(crate::migration::NATIVE_SELECTOR),
        "native-endpointslices",
        strip_managed_fields,
        move |slice: &PartialObjectMeta<EndpointSlice>| {
            let (ns, svc) = (
                slice.namespace(),
                slice.labels().get("kubernetes.io/service-name").cloned(),
            );
            pms.state()
                .iter()
                .filter(|pm| {
                    pm.namespace() == ns && Some(&pm.spec.service_ref.name) == svc.as_ref()
                })
                .map(|pm| ObjectRef::from_obj(pm.as_ref()))
                .collect::<Vec<_>>()
        },
        trigger.clone(),
    );
    tasks.spawn(task);

    let nodes = if settings.node_lookups {
        let (store, task) = node_reflector(&client, portmappings.clone(), trigger.clone());
        tasks.spawn(task);
        Some(store)
    } else {
        None
    };

    let pods = PodWatches::new(
        client.clone(),
        settings.namespace.clone(),
        portmappings.clone(),
        slices.clone(),
        trigger.clone(),
    );
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
        pods: pods.clone(),
        leadership: leadership.clone(),
        metrics: metrics.clone(),
        warned: Mutex::new(HashMap::new()),
    });

    // Readiness = every shared store has listed once; pod watches start lazily per pool.
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
                    .portmappings
                    .state()
                    .iter()
                    .map(|pm| crate::probing::mapping_key(pm))
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

    let stop = shutdown.clone();
    let gone_ctx = ctx.clone();
    controller
        .with_config(controller::Config::default().concurrency(settings.concurrency))
        .reconcile_on(triggers)
        .reconcile_all_on(leader_changes)
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

fn node_reflector(
    client: &Client,
    pms: Store<PortMapping>,
    trigger: Trigger,
) -> (
    Store<PartialObjectMeta<Node>>,
    impl Future<Output = ()> + Send + 'static,
) {
    // Zones change rarely; when one does, every PortMapping is re-examined (hints depend on it).
    let zones: Mutex<BTreeMap<String, Option<String>>> = Mutex::new(BTreeMap::new());
    reflect(
        Api::<PartialObjectMeta<Node>>::all(client.clone()),
        watcher::Config::default(),
        "nodes",
        strip_managed_fields,
        move |node: &PartialObjectMeta<Node>| {
            let zone = node.labels().get("topology.kubernetes.io/zone").cloned();
            let mut zones = zones.lock().unwrap_or_else(|p| p.into_inner());
            let before = zones.insert(node.name_any(), zone.clone());
            if before.as_ref() == Some(&zone) {
                return Vec::new();
            }
            pms.state()
                .iter()
                .map(|pm| ObjectRef::from_obj(pm.as_ref()))
                .collect()
        },
        trigger,
    )
}

/// Records the outcome of one reconcile in the metrics.
pub fn record(metrics: &Metrics, result: &Result<Action, Error>) {
    match result {
        Ok(_) => {
            metrics
                .reconciles
                .get_or_create(&ResultLabels { result: "success" })
                .inc();
        }
        Err(err) => {
            metrics
                .reconciles
                .get_or_create(&ResultLabels { result: "error" })
                .inc();
            metrics
                .reconcile_errors
                .get_or_create(&CategoryLabels {
                    category: err.category(),
                })
                .inc();
        }
    }
}
