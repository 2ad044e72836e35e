//! Reflectors for everything a reconcile reads. Every watch event updates the reflector's store
//! and then the [`Index`](crate::index::Index), which answers with the PortMappings the event
//! affects; those are queued for reconcile. Reconciles read the stores and the index only; they
//! never LIST. Every watch backs off and restarts when silent ([`crate::runtime::watch_health`]).

use std::collections::HashSet;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus, Service};
use kube::Resource;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use portmapper_api::PortMapping;
use portmapper_core::planner::objects::SERVICE_ANNOTATIONS_READ;
use serde::de::DeserializeOwned;
use tracing::{debug, warn};

use crate::index::trigger::Trigger;
use crate::runtime::metrics::Metrics;
use crate::runtime::watch_health::WatchHealth;

/// What every watch feeds: the reconcile queue ([`Trigger`]), and the health registry and
/// metrics its restarts are reported to.
#[derive(Clone)]
pub struct Feeds {
    pub trigger: Trigger,
    pub health: WatchHealth,
    pub metrics: Arc<Metrics>,
}

/// One watch event as the index sees it: after the store has applied it.
pub enum Change<'a, K: Resource> {
    /// Added or modified (also every object of a relist).
    Apply(&'a K),
    /// Deleted.
    Delete(&'a K),
    /// A relist finished: these are all the objects there are now.
    Relisted(&'a HashSet<ObjectRef<K>>),
}

/// Starts a reflector for `api` and returns its store and the task driving it. `strip` trims
/// cached objects to what reconciles read (bounding memory); `on_change` updates the index and
/// returns the PortMappings to reconcile.
pub fn reflect<K, S, M>(
    api: Api<K>,
    config: watcher::Config,
    what: &'static str,
    strip: S,
    on_change: M,
    feeds: Feeds,
) -> (Store<K>, impl Future<Output = ()> + Send + 'static)
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    S: FnMut(&mut K) + Send + 'static,
    M: FnMut(Change<'_, K>) -> Vec<ObjectRef<PortMapping>> + Send + 'static,
{
    let (reader, writer) = reflector::store::<K>();
    let stream = indexed(api, config, what, strip, writer, on_change, feeds);
    let task = async move {
        let mut stream = std::pin::pin!(stream);
        while stream.next().await.is_some() {}
    };
    (reader, task)
}

/// The watch → store → index pipeline as a stream of the events (for a consumer such as the
/// Controller, which also wants them).
pub fn indexed<K, S, M>(
    api: Api<K>,
    config: watcher::Config,
    what: &'static str,
    strip: S,
    writer: reflector::store::Writer<K>,
    mut on_change: M,
    feeds: Feeds,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    S: FnMut(&mut K) + Send + 'static,
    M: FnMut(Change<'_, K>) -> Vec<ObjectRef<PortMapping>> + Send + 'static,
{
    let mut relist = Relist::default();
    crate::runtime::watch_health::resilient(api, config, what, &feeds.health, &feeds.metrics)
        .modify(strip)
        .reflect(writer)
        .inspect(move |item| {
            let targets = match item {
                Ok(Event::Apply(obj)) => on_change(Change::Apply(obj)),
                Ok(Event::Delete(obj)) => on_change(Change::Delete(obj)),
                Ok(Event::Init) => relist.start(),
                Ok(Event::InitApply(obj)) => {
                    relist.saw(obj);
                    on_change(Change::Apply(obj))
                }
                Ok(Event::InitDone) => on_change(Change::Relisted(&relist.finish())),
                // The backoff retries; the store keeps serving its last state meanwhile.
                Err(err) => failed(what, err),
            };
            queue(&feeds.trigger, what, targets);
        })
}

/// The objects of a relist in progress (kube-runtime's `Init` … `InitDone`).
struct Relist<K: Resource>(Option<HashSet<ObjectRef<K>>>);

impl<K: Resource> Default for Relist<K> {
    fn default() -> Self {
        Self(None)
    }
}

impl<K> Relist<K>
where
    K: Resource,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    /// A relist starts; nothing to reconcile yet.
    fn start(&mut self) -> Vec<ObjectRef<PortMapping>> {
        self.0 = Some(HashSet::new());
        Vec::new()
    }

    fn saw(&mut self, obj: &K) {
        self.0
            .get_or_insert_with(HashSet::new)
            .insert(ObjectRef::from_obj(obj));
    }

    /// Every object the relist listed.
    fn finish(&mut self) -> HashSet<ObjectRef<K>> {
        self.0.take().unwrap_or_default()
    }
}

fn failed(what: &str, err: &watcher::Error) -> Vec<ObjectRef<PortMapping>> {
    warn!(watch = what, error = %err, "watch failed; retrying with backoff");
    Vec::new()
}

fn queue(trigger: &Trigger, what: &str, targets: Vec<ObjectRef<PortMapping>>) {
    for target in targets {
        debug!(watch = what, portmapping = %target, "queueing reconcile");
        // A closed channel means the controller has stopped: nothing left to trigger.
        let _ = trigger.unbounded_send(target);
    }
}

/// One watch event, owned, for an index that keeps the objects itself.
pub enum Owned<K: Resource> {
    /// Added or modified (also every object of a relist).
    Apply(K),
    /// Deleted.
    Delete(K),
    /// A relist finished: these are all the objects there are now.
    Relisted(HashSet<ObjectRef<K>>),
}

/// Runs a watch whose objects the index keeps itself, without a reflector store: the index
/// takes each event's object as it is (no copy), so the objects are held once. Pods go this
/// way: a reflector would hold a second map of every pod, and reading a pool through it cost a
/// hash lookup per pod on every reconcile. `on_change` returns the PortMappings to reconcile.
pub fn consume<K, S, M>(
    api: Api<K>,
    config: watcher::Config,
    what: &'static str,
    strip: S,
    mut on_change: M,
    feeds: Feeds,
) -> impl Future<Output = ()> + Send + 'static
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    S: FnMut(&mut K) + Send + 'static,
    M: FnMut(Owned<K>) -> Vec<ObjectRef<PortMapping>> + Send + 'static,
{
    let stream =
        crate::runtime::watch_health::resilient(api, config, what, &feeds.health, &feeds.metrics)
            .modify(strip);
    async move {
        let mut stream = std::pin::pin!(stream);
        let mut relist = Relist::default();
        while let Some(item) = stream.next().await {
            let targets = match item {
                Ok(Event::Apply(obj)) => on_change(Owned::Apply(obj)),
                Ok(Event::Delete(obj)) => on_change(Owned::Delete(obj)),
                Ok(Event::Init) => relist.start(),
                Ok(Event::InitApply(obj)) => {
                    relist.saw(&obj);
                    on_change(Owned::Apply(obj))
                }
                Ok(Event::InitDone) => on_change(Owned::Relisted(relist.finish())),
                // The backoff retries; the index keeps its last state meanwhile.
                Err(err) => failed(what, &err),
            };
            queue(&feeds.trigger, what, targets);
        }
    }
}

/// Drops server bookkeeping that reconciles never read.
pub fn strip_managed_fields<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

/// A Service as the cache keeps it: without managed fields, and with only the annotations the
/// planner reads. Any tenant's Service is cached, and its annotations (up to 256 KiB, often a
/// `last-applied-configuration`) would otherwise cost the operator's memory, not the tenant's.
pub fn strip_service(svc: &mut Service) {
    strip_managed_fields(svc);
    if let Some(annotations) = svc.metadata.annotations.as_mut() {
        annotations.retain(|key, _| SERVICE_ANNOTATIONS_READ.contains(&key.as_str()));
    }
}

/// A Node as the cache keeps it: its name, its zone label and the status of its `Ready`
/// condition, nothing else. A Node's status carries its image list, addresses and capacity
/// (often tens of KiB), read by nothing here; the watch must be a full one only for `Ready`.
pub fn strip_node(node: &mut Node) {
    let zone = crate::index::LABEL_ZONE;
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| NodeCondition {
            type_: c.type_.clone(),
            status: c.status.clone(),
            ..NodeCondition::default()
        });
    let meta = &mut node.metadata;
    meta.managed_fields = None;
    meta.annotations = None;
    meta.owner_references = None;
    meta.finalizers = None;
    if let Some(labels) = meta.labels.as_mut() {
        labels.retain(|key, _| key == zone);
    }
    node.spec = None;
    node.status = ready.map(|ready| NodeStatus {
        conditions: Some(vec![ready]),
        ..NodeStatus::default()
    });
}

/// A PortMapping as the cache keeps it: nothing reads its annotations (a client-side
/// `kubectl apply` stores a second copy of the spec there).
pub fn strip_portmapping(pm: &mut PortMapping) {
    strip_managed_fields(pm);
    pm.metadata.annotations = None;
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::Service;

    use super::{strip_node, strip_service};

    #[test]
    fn a_cached_service_keeps_only_the_annotations_the_planner_reads() {
        let mut svc = Service::default();
        svc.metadata.annotations = Some(BTreeMap::from([
            ("service.kubernetes.io/topology-mode".into(), "Auto".into()),
            (
                "service.kubernetes.io/topology-aware-hints".into(),
                "auto".into(),
            ),
            (
                "kubectl.kubernetes.io/last-applied-configuration".into(),
                "{}".into(),
            ),
            ("example.com/blob".into(), "a".repeat(1000)),
        ]));
        svc.metadata.managed_fields = Some(vec![Default::default()]);
        strip_service(&mut svc);
        let kept: Vec<&str> = svc
            .metadata
            .annotations
            .iter()
            .flatten()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(
            kept,
            [
                "service.kubernetes.io/topology-aware-hints",
                "service.kubernetes.io/topology-mode"
            ]
        );
        assert_eq!(svc.metadata.managed_fields, None);
    }

    #[test]
    fn a_cached_node_keeps_its_name_zone_and_ready_status_only() {
        use k8s_openapi::api::core::v1::{
            ContainerImage, Node, NodeCondition, NodeSpec, NodeStatus,
        };
        let condition = |type_: &str, status: &str| NodeCondition {
            type_: type_.into(),
            status: status.into(),
            reason: Some("KubeletNotReady".into()),
            message: Some("m".repeat(100)),
            ..NodeCondition::default()
        };
        let mut node = Node::default();
        node.metadata.name = Some("n1".into());
        node.metadata.labels = Some(BTreeMap::from([
            ("topology.kubernetes.io/zone".into(), "z1".into()),
            ("kubernetes.io/hostname".into(), "n1".into()),
        ]));
        node.metadata.annotations = Some(BTreeMap::from([("a".into(), "b".repeat(1000))]));
        node.metadata.managed_fields = Some(vec![Default::default()]);
        node.spec = Some(NodeSpec {
            pod_cidr: Some("10.0.0.0/24".into()),
            ..NodeSpec::default()
        });
        node.status = Some(NodeStatus {
            conditions: Some(vec![
                condition("MemoryPressure", "False"),
                condition("Ready", "Unknown"),
            ]),
            images: Some(vec![ContainerImage {
                names: Some(vec!["x".repeat(1000)]),
                ..ContainerImage::default()
            }]),
            ..NodeStatus::default()
        });
        strip_node(&mut node);
        let mut expected = Node::default();
        expected.metadata.name = Some("n1".into());
        expected.metadata.labels = Some(BTreeMap::from([(
            "topology.kubernetes.io/zone".into(),
            "z1".into(),
        )]));
        expected.status = Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "Unknown".into(),
                ..NodeCondition::default()
            }]),
            ..NodeStatus::default()
        });
        assert_eq!(node, expected);

        // Without a Ready condition (just registered) nothing of the status is kept.
        node.status = Some(NodeStatus::default());
        strip_node(&mut node);
        assert_eq!(node.status, None);
    }
}
