//! What every reconcile reads and writes through: the caches, the index, the prober, the one
//! state per PortMapping, and what it records (metrics and Events). The controller builds it;
//! tests build one with [`Context::test`].

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::PartialObjectMeta;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, Store};
use portmapper_api::PortMapping;

use crate::index::SharedIndex;
use crate::index::trigger::Trigger;
use crate::reconcile::state::States;
use crate::runtime::leader::Leadership;
use crate::runtime::metrics::Metrics;

/// Settings of one controller instance.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Namespace scope (None = all namespaces).
    pub namespace: Option<String>,
    /// Concurrent reconciles.
    pub concurrency: u16,
    /// Requeue period of a converged PortMapping.
    pub resync: Duration,
    /// Read Nodes for zones and readiness.
    pub node_lookups: bool,
    /// Identity for Events.
    pub instance: Option<String>,
    /// Network probes in flight at once, across all PortMappings.
    pub probe_concurrency: usize,
    /// Network probes in flight at once for one namespace's PortMappings (None: half of
    /// `probe_concurrency`).
    pub probe_concurrency_per_namespace: Option<usize>,
    /// Network probes in flight at once for one PortMapping (None: a quarter of
    /// `probe_concurrency`).
    pub probe_concurrency_per_portmapping: Option<usize>,
    /// After a pass that wrote, how long the next pass of the same PortMapping waits (zero:
    /// none); see `batch_window.rs`.
    pub batch_window: Duration,
    /// Label-selected pod watches per namespace (`index/pod_watches.rs`).
    pub max_pod_watches_per_namespace: usize,
    /// What one PortMapping, and one namespace, may ask of the operator.
    pub budgets: portmapper_core::budget::Budgets,
    /// Which hosts webhook URLs may name.
    pub webhook_egress: portmapper_probe::WebhookEgress,
}

/// The reflector stores a reconcile reads.
#[derive(Clone)]
pub struct Stores {
    pub portmappings: Store<PortMapping>,
    pub services: Store<Service>,
    /// Nodes (name, zone label, `Ready` status only), when node lookups are on.
    pub nodes: Option<Store<Node>>,
    /// The legacy Endpoints objects we publish, found by our managed-by label.
    pub owned_endpoints: Store<Endpoints>,
    /// Every slice not managed by us (metadata only): the native controllers' ones are
    /// evidence for the selector migration; all of them hold names our plans may not create.
    pub foreign_slices: Store<PartialObjectMeta<EndpointSlice>>,
}

impl Stores {
    /// Whether every store has listed once.
    pub fn synced(&self) -> bool {
        is_ready(&self.portmappings)
            && is_ready(&self.services)
            && is_ready(&self.owned_endpoints)
            && is_ready(&self.foreign_slices)
            && self.nodes.as_ref().is_none_or(is_ready)
    }
}

/// Whether a store has finished its first list (never blocks).
fn is_ready<K>(store: &Store<K>) -> bool
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    use futures::FutureExt;
    matches!(store.wait_until_ready().now_or_never(), Some(Ok(())))
}

/// What every reconcile reads and writes through.
pub struct Context {
    pub client: Client,
    pub settings: Settings,
    pub stores: Stores,
    /// What every cached object touches: the way from an object to its PortMappings and back.
    pub index: SharedIndex,
    /// Where reconciles are queued, and how many were queued per PortMapping.
    pub trigger: Trigger,
    pub leadership: Leadership,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    /// Probes network checks outside reconciles; reconciles read its cached results.
    pub prober: portmapper_probe::Prober,
    /// The targets probed through an identical one, per PortMapping.
    pub probe_aliases: crate::reconcile::probe_aliases::ProbeAliases,
    /// The probe targets each PortMapping declared, for its namespace's budget.
    pub demands: crate::reconcile::demands::Demands,
    /// What the operator remembers per PortMapping.
    pub states: States,
    /// Reconcile passes running per namespace: no namespace holds every worker.
    pub passes: crate::reconcile::namespace_share::NamespaceShare,
}

impl Context {
    /// Whether every watch a pass reads has listed once (the stores, and our slices in the
    /// index): before that they read as "nothing published" / "no Service".
    pub fn synced(&self) -> bool {
        self.stores.synced() && self.index.lock().slices_listed()
    }

    /// Drops everything this operator remembers about `pm`, wherever it is kept: its state,
    /// its failure backoff, its queued-reconcile count, its prober targets and its metric
    /// series. Called when it is deleted, after a withdrawal (its Service is gone) whose teardown
    /// went through (`execute::After`: a failing one keeps its backoff), and on every pass while
    /// this replica does not lead (a new leader re-reconciles everything).
    pub fn forget(&self, pm: &ObjectRef<PortMapping>) {
        self.states.forget(pm);
        self.trigger.forget(pm);
        self.passes.forget(pm);
        let namespace = pm.namespace.as_deref().unwrap_or_default();
        let mapping = portmapper_probe::MappingKey::new(namespace, &pm.name);
        self.prober.remove_mapping(&mapping);
        self.probe_aliases.forget(&mapping);
        self.demands.set(&mapping, 0);
        self.metrics.forget((namespace, &pm.name));
    }
}

/// A [`Context`] over a test's client, with empty, listed caches the test fills through
/// [`TestFeeds`].
#[cfg(test)]
pub struct TestFeeds {
    pub portmappings: kube::runtime::reflector::store::Writer<PortMapping>,
    pub services: kube::runtime::reflector::store::Writer<Service>,
    pub owned_endpoints: kube::runtime::reflector::store::Writer<Endpoints>,
    pub foreign_slices: kube::runtime::reflector::store::Writer<PartialObjectMeta<EndpointSlice>>,
    /// The far end of the trigger (tests call `reconcile` themselves).
    pub queued: futures::channel::mpsc::UnboundedReceiver<ObjectRef<PortMapping>>,
    pub probe_events: portmapper_probe::ProbeEvents,
}

#[cfg(test)]
impl Context {
    /// A context over `client` (a [`crate::reconcile::fake_api::FakeApi`]'s, say): every
    /// store listed and empty, one reconcile at a time, a resync of 300 s, no node lookups, and
    /// this replica leading.
    pub fn test(client: Client) -> (Self, TestFeeds) {
        use kube::runtime::watcher::Event;
        fn listed<K>() -> (Store<K>, kube::runtime::reflector::store::Writer<K>)
        where
            K: kube::Resource + Clone + 'static,
            K::DynamicType: Eq + std::hash::Hash + Clone + Default,
        {
            let (store, mut writer) = kube::runtime::reflector::store();
            writer.apply_watcher_event(&Event::Init);
            writer.apply_watcher_event(&Event::InitDone);
            (store, writer)
        }
        let metrics = Metrics::new();
        let (tx, queued) = futures::channel::mpsc::unbounded();
        let trigger = Trigger::new(tx);
        let index = SharedIndex::default();
        let (portmappings, pm_writer) = listed();
        let (services, svc_writer) = listed();
        index.lock().retain_slices(&Default::default());
        let (owned_endpoints, endpoints_writer) = listed();
        let (foreign_slices, foreign_writer) = listed();
        let settings = Settings {
            namespace: None,
            concurrency: 1,
            resync: Duration::from_secs(300),
            node_lookups: false,
            instance: None,
            probe_concurrency: 1,
            probe_concurrency_per_namespace: None,
            probe_concurrency_per_portmapping: None,
            batch_window: Duration::ZERO,
            max_pod_watches_per_namespace: crate::index::DEFAULT_MAX_POD_WATCHES,
            budgets: portmapper_core::budget::Budgets::default(),
            webhook_egress: Default::default(),
        };
        let (prober, probe_events) =
            crate::reconcile::probing::start(&settings, None, &metrics).expect("a prober starts");
        let ctx = Self {
            recorder: Recorder::new(client.clone(), "portmapper".into()),
            client,
            settings,
            stores: Stores {
                portmappings,
                services,
                nodes: None,
                owned_endpoints,
                foreign_slices,
            },
            index,
            trigger,
            leadership: Leadership::always(),
            metrics,
            prober,
            probe_aliases: Default::default(),
            demands: Default::default(),
            states: States::default(),
            passes: crate::reconcile::namespace_share::NamespaceShare::new(1, None),
        };
        let feeds = TestFeeds {
            portmappings: pm_writer,
            services: svc_writer,
            owned_endpoints: endpoints_writer,
            foreign_slices: foreign_writer,
            queued,
            probe_events,
        };
        (ctx, feeds)
    }
}
