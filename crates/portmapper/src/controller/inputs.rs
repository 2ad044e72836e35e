//! The watches a controller runs: the PortMappings' own reflector (its events feed the index
//! before the Controller sees them) and one reflector per other input, each feeding the index.
//! Reflector wiring, one block per kind.

use std::sync::Arc;

use futures::Stream;
use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use portmapper_api::PortMapping;
use tokio::task::JoinSet;

use super::pods::PodWatches;
use super::watches::{
    Change, Feeds, Owned, consume, reflect, strip_managed_fields, strip_node, strip_portmapping,
    strip_service,
};
use super::{MANAGED_BY_SELECTOR, NOT_MANAGED_BY_SELECTOR, api};
use crate::index::{PodSource, SharedIndex};
use crate::reconcile::context::{Settings, Stores};

/// The PortMappings' store and the event stream the Controller runs on. A PortMapping's pool
/// watch starts when it is seen, so its pods are listed by its first pass (a pool that fails
/// validation is never watched: its pass stalls first).
pub fn portmappings(
    client: &Client,
    namespace: &Option<String>,
    index: &SharedIndex,
    pods: &Arc<PodWatches>,
    feeds: &Feeds,
) -> (
    Store<PortMapping>,
    impl Stream<Item = Result<watcher::Event<PortMapping>, watcher::Error>> + Send + 'static,
) {
    let (store, writer) = reflector::store::<PortMapping>();
    let (index, pods) = (index.clone(), pods.clone());
    let events = super::watches::indexed(
        api::<PortMapping>(client, namespace),
        watcher::Config::default(),
        "portmappings",
        strip_portmapping,
        writer,
        move |change| match change {
            Change::Apply(pm) => {
                let applied = index.lock().apply_portmapping(pm);
                let source = PodSource::of(pm);
                // Its label key, or one its change of key let in, within the namespace's cap.
                pods.ensure_admitted(source.namespace());
                if matches!(source, PodSource::Namespace(_)) && crate::index::pool_is_valid(pm) {
                    pods.ensure(&source);
                }
                if let Some(source) = applied.reindex {
                    pods.reindex(&source);
                }
                applied.affected
            }
            Change::Delete(pm) => {
                let affected = index.lock().delete_portmapping(&ObjectRef::from_obj(pm));
                // A key over the cap may be watched now.
                pods.ensure_admitted(&pm.namespace().unwrap_or_default());
                affected
            }
            Change::Relisted(present) => index.lock().retain_portmappings(present),
        },
        feeds.clone(),
    );
    (store, events)
}

/// Starts the reflector of every other input into `tasks`; the stores, with `portmappings`.
pub fn reflect_all(
    client: &Client,
    settings: &Settings,
    index: &SharedIndex,
    feeds: &Feeds,
    tasks: &mut JoinSet<()>,
    portmappings: Store<PortMapping>,
) -> Stores {
    let ns = &settings.namespace;
    let idx = index.clone();
    let (services, task) = reflect(
        api::<Service>(client, ns),
        watcher::Config::default(),
        "services",
        strip_service,
        move |change| match change {
            Change::Apply(svc) | Change::Delete(svc) => {
                idx.lock().service_changed(&ObjectRef::from_obj(svc))
            }
            Change::Relisted(present) => idx.lock().services_missing(present),
        },
        feeds.clone(),
    );
    tasks.spawn(task);
    tasks.spawn(own_slices(client, ns, index, feeds));
    let idx = index.clone();
    let (owned_endpoints, task) = reflect(
        api::<Endpoints>(client, ns),
        watcher::Config::default().labels(MANAGED_BY_SELECTOR),
        "endpoints",
        strip_managed_fields,
        move |change| match change {
            Change::Apply(ep) => idx.lock().apply_endpoints(ep),
            Change::Delete(ep) => idx.lock().delete_endpoints(&ObjectRef::from_obj(ep)),
            Change::Relisted(present) => idx.lock().retain_endpoints(present),
        },
        feeds.clone(),
    );
    tasks.spawn(task);
    Stores {
        portmappings,
        services,
        nodes: settings
            .node_lookups
            .then(|| nodes(client, index, feeds, tasks)),
        owned_endpoints,
        foreign_slices: foreign_slices(client, ns, index, feeds, tasks),
    }
}

/// Our slices, label-selected. No reflector store: the index keeps them itself, compact (their
/// endpoints were most of the operator's heap as full objects), and reconciles read them there.
fn own_slices(
    client: &Client,
    namespace: &Option<String>,
    index: &SharedIndex,
    feeds: &Feeds,
) -> impl Future<Output = ()> + Send + 'static {
    let idx = index.clone();
    consume(
        api::<EndpointSlice>(client, namespace),
        watcher::Config::default().labels(MANAGED_BY_SELECTOR),
        "endpointslices",
        strip_managed_fields,
        move |change| match change {
            Owned::Apply(slice) => idx.lock().apply_slice(slice),
            Owned::Delete(slice) => idx.lock().delete_slice(&ObjectRef::from_obj(&slice)),
            Owned::Relisted(present) => idx.lock().retain_slices(&present),
        },
        feeds.clone(),
    )
}

/// Every slice not managed by us (metadata only).
fn foreign_slices(
    client: &Client,
    namespace: &Option<String>,
    index: &SharedIndex,
    feeds: &Feeds,
    tasks: &mut JoinSet<()>,
) -> Store<PartialObjectMeta<EndpointSlice>> {
    let idx = index.clone();
    let (store, task) = reflect(
        api::<PartialObjectMeta<EndpointSlice>>(client, namespace),
        watcher::Config::default().labels(NOT_MANAGED_BY_SELECTOR),
        "foreign-endpointslices",
        strip_managed_fields,
        move |change| match change {
            Change::Apply(slice) => idx.lock().apply_foreign_slice(slice),
            Change::Delete(slice) => idx.lock().delete_foreign_slice(&ObjectRef::from_obj(slice)),
            Change::Relisted(present) => idx.lock().retain_foreign_slices(present),
        },
        feeds.clone(),
    );
    tasks.spawn(task);
    store
}

/// Nodes, for zones and readiness: a full watch (a metadata one has no conditions), cached as
/// [`strip_node`] leaves them (name, zone label, `Ready` status).
fn nodes(
    client: &Client,
    index: &SharedIndex,
    feeds: &Feeds,
    tasks: &mut JoinSet<()>,
) -> Store<Node> {
    let idx = index.clone();
    let (store, task) = reflect(
        Api::<Node>::all(client.clone()),
        watcher::Config::default(),
        "nodes",
        strip_node,
        move |change| match change {
            Change::Apply(node) => idx.lock().apply_node(node),
            Change::Delete(node) => idx.lock().delete_node(&node.name_any()),
            Change::Relisted(present) => idx
                .lock()
                .retain_nodes(&present.iter().map(|n| n.name.clone()).collect()),
        },
        feeds.clone(),
    );
    tasks.spawn(task);
    store
}
