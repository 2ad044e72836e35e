//! The index: what every watched object touches, kept up to date from watch events, so that an
//! event maps to the PortMappings it affects, and a reconcile finds its inputs, in time
//! proportional to what the object touches — never a scan of all PortMappings, slices or pods.
//!
//! It holds keys and small footprints only (the objects stay in the reflector stores). Each kind
//! has `apply_*` (added or modified), `delete_*` (by key: the footprint remembers what the object
//! touched) and, after a relist, `retain_*` (drops what the new list no longer has). Every one of
//! them returns the PortMappings to reconcile. Pure and synchronous, so it is tested without an
//! API server (the pattern of linkerd2's `policy-controller/k8s/index`).

mod departed;
mod endpoints;
mod foreign;
mod names;
mod nodes;
pub mod own_writes;
mod pod_watches;
mod pods;
pub mod pool_pods;
pub mod portmappings;
mod services;
mod slices;
pub mod trigger;

pub use nodes::unready_status;

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::core::v1::Endpoints;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use portmapper_api::{KeySource, PortMapping};

use portmapper_core::compact_slice::CompactSlice;
use portmapper_core::{ClaimRank, PodRecord};

use crate::index::own_writes::OwnWrites;
use crate::index::pool_pods::PoolPods;

pub use nodes::LABEL_ZONE;
pub use pod_watches::{DEFAULT_MAX_POD_WATCHES, WatchRefused};

/// A PortMapping, by namespace and name.
pub type PmKey = ObjectRef<PortMapping>;

/// What one pod watch covers. Every pod watch is namespaced: a pool never holds another
/// namespace's pods, so no tenant's PortMapping makes the operator list or keep pods of
/// namespaces it cannot see (a cluster-wide watch per key did, for every namespace).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PodSource {
    /// Pods of `namespace` carrying the label `key`.
    Label { namespace: String, key: String },
    /// Every pod of a namespace (annotation keys).
    Namespace(String),
}

impl PodSource {
    /// The watch a PortMapping's pool needs.
    pub fn of(pm: &PortMapping) -> Self {
        let namespace = pm.namespace().unwrap_or_default();
        match pm.spec.pods.from {
            KeySource::Label => Self::Label {
                namespace,
                key: pm.spec.pods.key.clone(),
            },
            KeySource::Annotation => Self::Namespace(namespace),
        }
    }

    /// The namespace the watch lists.
    pub fn namespace(&self) -> &str {
        match self {
            Self::Label { namespace, .. } | Self::Namespace(namespace) => namespace,
        }
    }
}

/// Whether these validation errors include the pool's (`spec.pods`): such a pool is never
/// watched, and names no pods.
pub fn invalid_pool(errors: &[kube_validation::field::FieldError]) -> bool {
    errors.iter().any(|e| e.field.starts_with("spec.pods"))
}

/// Whether `pm`'s pool passes validation (see [`invalid_pool`]).
pub fn pool_is_valid(pm: &PortMapping) -> bool {
    !invalid_pool(&portmapper_api::validate::validate_spec(&pm.spec))
}

/// The index, shared by the watch drivers (writers) and the reconciles (readers).
#[derive(Clone, Debug, Default)]
pub struct SharedIndex(Arc<Mutex<Index>>);

impl SharedIndex {
    /// Locks the index; never held across an await.
    pub fn lock(&self) -> MutexGuard<'_, Index> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A slice not managed by us (metadata only): a native controller's, or anyone else's.
pub type ForeignKey = ObjectRef<PartialObjectMeta<EndpointSlice>>;

/// A pod pool: the pods of `namespace` whose label (or annotation) `key` equals `value`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolKey {
    pub namespace: String,
    pub annotation: bool,
    pub key: String,
    pub value: String,
}

impl PoolKey {
    /// The pool a PortMapping draws from.
    pub fn of(pm: &PortMapping) -> Self {
        Self {
            namespace: pm.namespace().unwrap_or_default(),
            annotation: pm.spec.pods.from == KeySource::Annotation,
            key: pm.spec.pods.key.clone(),
            value: pm.spec.pool_value().to_owned(),
        }
    }
}

/// What a PortMapping touches.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PmFootprint {
    uid: Option<String>,
    service: (String, String),
    pool: PoolKey,
    /// Creation time and name decide which PortMapping of a Service publishes it; a PortMapping
    /// being deleted never does.
    rank: ClaimRank,
    deleting: bool,
    /// `spec.readinessGate.conditionType`.
    gate: String,
    /// [`semantic_version`](portmappings::semantic_version): what a change other than the status changes.
    version: Option<u64>,
    /// Its pool is label-keyed and valid: it asks for a label-selected pod watch (an invalid
    /// key is never watched).
    label_watch: bool,
}

/// What a pod touches, and the pod itself: the index is the operator's only copy of the pods
/// (no reflector store), shared with the pools through the `Arc`. A watch's pods are a set of
/// footprints keyed by the record's name (see the `Hash` and `Borrow` impls): one map entry
/// per pod without a key of its own.
#[derive(Clone, Debug, Default)]
struct PodFootprint {
    /// Its UID and node are read from the record, not copied.
    pod: Arc<PodRecord>,
    /// Shared with `pods_by_pool`'s key: nearly every pod of a pool is in the same one, and a
    /// copy of its namespace, key and value per pod cost 0.2 KiB.
    pools: Box<[Arc<PoolKey>]>,
}

/// By the pod's name, as the watch's set looks it up (every pod of a watch is of one namespace).
impl Borrow<str> for PodFootprint {
    fn borrow(&self) -> &str {
        &self.pod.name
    }
}

impl PartialEq for PodFootprint {
    fn eq(&self, other: &Self) -> bool {
        self.pod.name == other.pod.name
    }
}

impl Eq for PodFootprint {}

/// As the name's `str` hashes, so the set finds a footprint by a `&str`.
impl Hash for PodFootprint {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.pod.name.as_str().hash(state);
    }
}

/// How many pods of a pool run on a node, and how many of them list a readiness gate: what a
/// node's change wakes (its pools' PortMappings), without a key per pod.
#[derive(Clone, Copy, Debug, Default)]
struct NodePods {
    pods: usize,
    gated: usize,
}

impl PodFootprint {
    fn uid(&self) -> Option<&str> {
        Some(self.pod.uid.as_str()).filter(|u| !u.is_empty())
    }

    fn node(&self) -> Option<&str> {
        self.pod.node_name.as_deref().filter(|n| !n.is_empty())
    }
}

/// What one of our slices (or Endpoints objects) touches.
#[derive(Clone, Debug, Default)]
struct OwnedFootprint {
    /// The controlling PortMapping (by name) and its UID.
    owner: Option<(PmKey, String)>,
    /// `kubernetes.io/service-name`, when the object has no controller at all (an orphan).
    orphan_of: Option<String>,
    /// `kubernetes.io/service-name`.
    service: Option<String>,
}

/// One of our slices: the object as reconciles read it (compact, its pod UIDs shared with
/// `published`'s keys), and what it touches.
#[derive(Clone, Debug)]
struct OurSlice {
    object: Arc<CompactSlice>,
    footprint: OwnedFootprint,
}

impl OurSlice {
    /// The version the index holds, to tell whether our own write is in yet.
    fn resource_version(&self) -> Option<&str> {
        self.object.metadata.resource_version.as_deref()
    }
}

/// The index of one operator instance. Not thread-safe by itself: the operator keeps it behind
/// a mutex and never holds the lock across an await.
#[derive(Debug, Default)]
pub struct Index {
    pms: HashMap<PmKey, PmFootprint>,
    pms_by_service: HashMap<(String, String), HashSet<PmKey>>,
    /// PortMappings of Services whose port-set slice names start with a cut of their name
    /// (`naming::name_prefix`), by that cut: who may want a name starting with it.
    pms_by_name_prefix: HashMap<(String, String), HashSet<PmKey>>,
    pms_by_pool: HashMap<PoolKey, HashSet<PmKey>>,
    /// Annotation keys PortMappings of a namespace use, with how many use each: the keys a
    /// namespace-wide pod watch must index.
    annotation_keys: HashMap<String, HashMap<String, usize>>,
    /// Per namespace, the label keys its valid label-keyed PortMappings use, with who uses
    /// each: the label-selected pod watches the namespace asks for (`pod_watches.rs`).
    label_keys: HashMap<String, HashMap<String, HashSet<PmKey>>>,
    /// At most this many label-selected pod watches per namespace (`None`: no cap).
    max_label_watches: Option<usize>,
    /// PortMappings by namespace and publication gate type: who else sets which gate.
    pms_by_gate: HashMap<String, BTreeMap<String, HashSet<PmKey>>>,

    /// Pods by the watch that sees them: a relist, a re-index or a stopped watch reads only
    /// that watch's pods, never every pod of every watch.
    pods: HashMap<PodSource, HashSet<PodFootprint>>,
    /// Pool pods by name (one namespace per pool), so a pool reads out in a stable order
    /// without sorting or a lookup per pod on every reconcile. Its keys are the pools every
    /// footprint shares.
    pods_by_pool: HashMap<Arc<PoolKey>, PoolPods>,
    /// Per node, the pools of the pods on it, counted.
    pools_by_node: HashMap<String, HashMap<Arc<PoolKey>, NodePods>>,
    /// Pods enrolled in Istio ambient mode, counted per pool: without one (the common case) a
    /// reconcile does not look for them among every pool pod.
    ambient_by_pool: HashMap<Arc<PoolKey>, usize>,
    /// Pods that list a readiness gate, counted per pool: without one (the common case) a
    /// pass skips the gates' scans of the pool.
    gated_by_pool: HashMap<Arc<PoolKey>, usize>,

    /// Our slices: the only copy the operator keeps (no reflector store).
    slices: HashMap<ObjectRef<EndpointSlice>, OurSlice>,
    /// Whether our slices' watch has listed once: before that, none read as "none published".
    slices_listed: bool,
    /// Our slices by controlling PortMapping UID.
    slices_by_owner: HashMap<String, HashSet<ObjectRef<EndpointSlice>>>,
    /// Slices labelled ours without a controller, by (namespace, Service).
    orphans_by_service: HashMap<(String, String), HashSet<ObjectRef<EndpointSlice>>>,
    /// Pod UID → PortMappings whose slices publish it (with how many endpoints).
    /// A list, not a map: a pod is nearly always published by one PortMapping, and a map per
    /// published pod cost about 0.5 KiB. The UID is one allocation shared with the slices'
    /// endpoints, and the PortMapping one per slice, not a copy of its name per pod.
    published: HashMap<Arc<str>, Vec<(Arc<PmKey>, usize)>>,

    /// Slices not managed by us: the (namespace, Service) of the native and mirroring
    /// controllers' ones (migration evidence), `None` for anyone else's.
    foreign: HashMap<ForeignKey, Option<(String, String)>>,
    native_by_service: HashMap<(String, String), HashSet<ForeignKey>>,
    /// Per namespace, every slice name we know with what ownership needs (labels, owner
    /// references, UID): those not managed by us, and our labelled ones (separately: the two
    /// watches deliver a relabelled slice in either order). The names held by others that a
    /// plan may want are found here by prefix, instead of a GET before each create.
    foreign_names: names::Names,
    our_names: names::Names,
    /// Per namespace, names of our slices that left our label-selected watch without our
    /// deleting them, not (yet) seen by the other watch: deleted, or relabelled (the watch
    /// cannot tell: both arrive as DELETED with the old object). Until the other watch shows
    /// them, a reconcile reads them with one GET each, so a relabelled slice is never forced back.
    in_doubt: HashMap<String, BTreeSet<String>>,

    endpoints: HashMap<ObjectRef<Endpoints>, OwnedFootprint>,
    endpoints_by_owner: HashMap<String, HashSet<ObjectRef<Endpoints>>>,

    zones: HashMap<String, Option<String>>,
    /// Nodes whose `Ready` condition is known and not True, with its status.
    unready: HashMap<String, String>,

    /// Whether each pod watch has listed, and who waits for its first list.
    lists: HashMap<PodSource, Listing>,

    /// Our slice writes the slice cache has not shown yet.
    own_writes: OwnWrites,

    /// Pods that left a PortMapping's pool (relabelled, annotation changed or removed, or gone
    /// from its watch) listing its gate type with a condition that is not True, by name: that
    /// PortMapping's pass releases them (planned in `reconcile/plan.rs`, run by `reconcile/execute.rs`),
    /// then forgets them here (`index/departed.rs`).
    departed: HashMap<PmKey, BTreeMap<String, Arc<PodRecord>>>,
}

/// Whether a pod watch has listed.
#[derive(Debug)]
enum Listing {
    /// Not yet: these PortMappings asked, and are woken by the first list.
    Waiting(HashSet<PmKey>),
    /// Its first list is in the index.
    Listed,
}

fn ns_of<K: Resource>(obj: &K) -> String {
    obj.meta().namespace.clone().unwrap_or_default()
}

fn insert<K: Eq + Hash, V: Eq + Hash>(map: &mut HashMap<K, HashSet<V>>, k: K, v: V) {
    map.entry(k).or_default().insert(v);
}

fn remove<K: Eq + Hash, V: Eq + Hash>(map: &mut HashMap<K, HashSet<V>>, k: &K, v: &V) {
    if let Some(set) = map.get_mut(k) {
        set.remove(v);
        if set.is_empty() {
            map.remove(k);
        }
    }
}

fn dedup(keys: Vec<PmKey>) -> Vec<PmKey> {
    keys.into_iter()
        .collect::<HashSet<_>>()
        .into_iter()
        .collect()
}

/// The keys a relist no longer lists.
fn missing<'a, K: Clone + Eq + Hash + 'a>(
    known: impl Iterator<Item = &'a K>,
    present: &HashSet<K>,
) -> Vec<K> {
    known.filter(|k| !present.contains(*k)).cloned().collect()
}

/// The PortMapping that controls `obj` (by ownerReference), with its UID.
fn portmapping_controller<K: Resource>(obj: &K) -> Option<(PmKey, String)> {
    let ns = obj.meta().namespace.clone()?;
    portmapper_core::ownership::controller_of(obj.meta())
        .filter(|o| portmapper_core::ownership::is_portmapping(o))
        .map(|o| (ObjectRef::new(&o.name).within(&ns), o.uid.clone()))
}

/// Ours for the Service it names, with no controller (left by `--cascade=orphan`).
fn orphan_service<K: Resource>(obj: &K) -> Option<String> {
    // For no PortMapping in particular: an orphan without a controller is adoptable.
    match portmapper_core::ownership(obj.meta(), "") {
        portmapper_core::Ownership::Orphan {
            controller: None,
            service,
        } => service.map(str::to_owned),
        _ => None,
    }
}

/// The cut of `service` port-set slice names start with, when it is not the whole name.
fn cut_prefix(service: &str) -> Option<&str> {
    Some(portmapper_core::planner::naming::name_prefix(service)).filter(|p| *p != service)
}

/// The Service whose plans may want slice `name` (`<service>[.…]`).
fn service_of_name(name: &str) -> &str {
    name.split_once('.').map_or(name, |(svc, _)| svc)
}
impl Index {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Deletes each key with `delete`; the PortMappings any of them affects, once each.
    fn delete_each<K>(
        &mut self,
        keys: Vec<K>,
        mut delete: impl FnMut(&mut Self, &K) -> Vec<PmKey>,
    ) -> Vec<PmKey> {
        let mut out = HashSet::new();
        for key in &keys {
            out.extend(delete(self, key));
        }
        out.into_iter().collect()
    }
}

#[cfg(test)]
mod tests;
