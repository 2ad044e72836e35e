//! The index: what every watched object touches, kept up to date from watch events, so that an
//! event maps to the PortMappings it affects, and a reconcile finds its inputs, in time
//! proportional to what the object touches — never a scan of all PortMappings, slices or pods.
//!
//! It holds keys and small footprints only (the objects stay in the reflector stores). Each kind
//! has `apply_*` (added or modified), `delete_*` (by key: the footprint remembers what the object
//! touched) and, after a relist, `retain_*` (drops what the new list no longer has). Every one of
//! them returns the PortMappings to reconcile. Pure and synchronous, so it is tested without an
//! API server (the pattern of linkerd2's `policy-controller/k8s/index`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use portmapper_api::{KeySource, PortMapping};

use portmapper_core::consumers::is_ambient;
use portmapper_core::ownership::{LABEL_MANAGED_BY, LABEL_SERVICE_NAME};
use portmapper_core::{ClaimRank, PodRecord};

use crate::own_writes::{Answered, Observed, OwnWrites};
use crate::pool_pods::PoolPods;

/// A PortMapping, by namespace and name.
pub type PmKey = ObjectRef<PortMapping>;

/// What one pod watch covers.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PodSource {
    /// Pods carrying the label key (in the watch scope).
    Label(String),
    /// Every pod of a namespace (annotation keys).
    Namespace(String),
}

impl PodSource {
    /// The watch a PortMapping's pool needs.
    pub fn of(pm: &PortMapping) -> Self {
        match pm.spec.pods.from {
            KeySource::Label => Self::Label(pm.spec.pods.key.clone()),
            KeySource::Annotation => Self::Namespace(pm.namespace().unwrap_or_default()),
        }
    }
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

/// The label carrying a node's zone.
const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

/// A slice not managed by us (metadata only): a native controller's, or anyone else's.
pub type NativeKey = ObjectRef<PartialObjectMeta<EndpointSlice>>;

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

/// A pod as one pod watch sees it (the same pod may be seen by a label watch and a namespace
/// watch; each copy is indexed on its own).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodKey {
    pub source: PodSource,
    pub pod: ObjectRef<Pod>,
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
    /// [`semantic_version`]: what a change other than the status changes.
    version: Option<u64>,
}

/// A hash of what a PortMapping's reconcile reads of it besides the footprint's fields: the
/// generation (the spec), deletion, labels and annotations; `None` without a generation (a
/// server that does not keep one: every event then counts). Two events with the same value
/// differ only in status or bookkeeping, e.g. the echo of the operator's own status write.
pub fn semantic_version(pm: &PortMapping) -> Option<u64> {
    use std::hash::Hasher;
    let meta = pm.meta();
    let generation = meta.generation?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    meta.uid.hash(&mut h);
    generation.hash(&mut h);
    meta.deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .hash(&mut h);
    meta.labels.hash(&mut h);
    meta.annotations.hash(&mut h);
    Some(h.finish())
}

/// What a pod touches, and the pod itself: the index is the operator's only copy of the pods
/// (no reflector store), shared with the pools through the `Arc`.
#[derive(Clone, Debug, Default)]
struct PodFootprint {
    /// Its UID and node are read from the record, not copied.
    pod: Arc<PodRecord>,
    pools: Vec<PoolKey>,
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
    /// Pod UIDs of its endpoints (slices only).
    pods: Vec<String>,
    /// `kubernetes.io/service-name`.
    service: Option<String>,
    /// The version the cache holds (slices only), to tell whether our own write is in yet.
    resource_version: Option<String>,
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
    /// PortMappings by namespace and publication gate type: who else sets which gate.
    pms_by_gate: HashMap<String, BTreeMap<String, HashSet<PmKey>>>,

    /// Pods by the watch that sees them: a relist, a re-index or a stopped watch reads only
    /// that watch's pods, never every pod of every watch.
    pods: HashMap<PodSource, HashMap<ObjectRef<Pod>, PodFootprint>>,
    /// Pool pods by name (one namespace per pool), so a pool reads out in a stable order
    /// without sorting or a lookup per pod on every reconcile.
    pods_by_pool: HashMap<PoolKey, PoolPods>,
    pods_by_node: HashMap<String, HashSet<PodKey>>,
    /// Pods enrolled in Istio ambient mode, counted per pool: without one (the common case) a
    /// reconcile does not look for them among every pool pod.
    ambient_by_pool: HashMap<PoolKey, usize>,

    slices: HashMap<ObjectRef<EndpointSlice>, OwnedFootprint>,
    /// Our slices by controlling PortMapping UID.
    slices_by_owner: HashMap<String, HashSet<ObjectRef<EndpointSlice>>>,
    /// Slices labelled ours without a controller, by (namespace, Service).
    orphans_by_service: HashMap<(String, String), HashSet<ObjectRef<EndpointSlice>>>,
    /// Pod UID → PortMappings whose slices publish it (with how many endpoints).
    /// A list, not a map: a pod is nearly always published by one PortMapping, and a map per
    /// published pod cost about 0.5 KiB.
    published: HashMap<String, Vec<(PmKey, usize)>>,

    /// Slices not managed by us: the (namespace, Service) of the native and mirroring
    /// controllers' ones (migration evidence), `None` for anyone else's.
    native: HashMap<NativeKey, Option<(String, String)>>,
    native_by_service: HashMap<(String, String), HashSet<NativeKey>>,
    /// Per namespace, every slice name we know with what ownership needs (labels, owner
    /// references, UID): those not managed by us, and our labelled ones (separately: the two
    /// watches deliver a relabelled slice in either order). The names held by others that a
    /// plan may want are found here by prefix, instead of a GET before each create.
    foreign_names: HashMap<String, BTreeMap<String, ObjectMeta>>,
    our_names: HashMap<String, BTreeMap<String, ObjectMeta>>,
    /// Per namespace, names of our slices that left our label-selected watch without our
    /// deleting them, not (yet) seen by the other watch: deleted, or relabelled (the watch
    /// cannot tell: both arrive as DELETED with the old object). Until the other watch shows
    /// them, a reconcile reads them with one GET each, so a relabelled slice is never forced back.
    in_doubt: HashMap<String, BTreeSet<String>>,

    endpoints: HashMap<ObjectRef<Endpoints>, OwnedFootprint>,
    endpoints_by_owner: HashMap<String, HashSet<ObjectRef<Endpoints>>>,

    zones: HashMap<String, Option<String>>,

    /// Our slice writes the slice cache has not shown yet.
    own_writes: OwnWrites,

    /// Pods that left a PortMapping's pool (relabelled, annotation changed or removed, or gone
    /// from its watch) listing its gate type with a condition that is not True, by name: that
    /// PortMapping releases them (`reconcile.rs`), then forgets them here.
    departed: HashMap<PmKey, BTreeMap<String, Arc<PodRecord>>>,
}

/// What applying a PortMapping asks of the caller besides reconciles.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PmApplied {
    pub affected: Vec<PmKey>,
    /// A namespace-wide pod watch must be re-indexed: a PortMapping started using an annotation
    /// key that its pods were not indexed by.
    pub reindex: Option<PodSource>,
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
fn controller_of<K: Resource>(obj: &K) -> Option<(PmKey, String)> {
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

/// What ownership reads of an object's metadata, and nothing else.
fn ownership_meta(meta: &ObjectMeta) -> ObjectMeta {
    let labels = meta.labels.as_ref().map(|l| {
        l.iter()
            .filter(|(k, _)| *k == LABEL_MANAGED_BY || *k == LABEL_SERVICE_NAME)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    });
    ObjectMeta {
        name: meta.name.clone(),
        uid: meta.uid.clone(),
        labels,
        owner_references: meta.owner_references.clone(),
        ..ObjectMeta::default()
    }
}

fn put_name(map: &mut HashMap<String, BTreeMap<String, ObjectMeta>>, ns: &str, meta: &ObjectMeta) {
    if let Some(name) = &meta.name {
        map.entry(ns.to_owned())
            .or_default()
            .insert(name.clone(), ownership_meta(meta));
    }
}

fn drop_name(map: &mut HashMap<String, BTreeMap<String, ObjectMeta>>, ns: &str, name: &str) {
    if let Some(names) = map.get_mut(ns) {
        names.remove(name);
        if names.is_empty() {
            map.remove(ns);
        }
    }
}

/// The entries of `names` a plan for `service` may want: `<service>` (a headless Service
/// without ports), `<service>.*` (Service names cannot contain `.`, so no other Service's
/// names share the prefix), and `<cut>.*` when port-set names cut a long Service name
/// ([`cut_prefix`]; other Services' names there are never wanted, only looked at).
fn service_names<'a>(
    names: Option<&'a BTreeMap<String, ObjectMeta>>,
    service: &'a str,
) -> impl Iterator<Item = (&'a String, &'a ObjectMeta)> {
    let prefixes: Vec<String> = std::iter::once(service)
        .chain(cut_prefix(service))
        .map(|p| format!("{p}."))
        .collect();
    names.into_iter().flat_map(move |n| {
        let dotted = prefixes.clone().into_iter().flat_map(move |dotted| {
            n.range(dotted.clone()..)
                .take_while(move |(k, _)| k.starts_with(&dotted))
        });
        n.get_key_value(service).into_iter().chain(dotted)
    })
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

    // ---- PortMappings ----------------------------------------------------------------------

    /// A PortMapping was added or changed. Affected: itself, and when what decides the
    /// Service's publisher changed (Service, rank, deletion), every PortMapping naming the old or
    /// the new Service.
    pub fn apply_portmapping(&mut self, pm: &PortMapping) -> PmApplied {
        let key = ObjectRef::from_obj(pm);
        let ns = pm.namespace().unwrap_or_default();
        let footprint = PmFootprint {
            uid: pm.uid(),
            service: (ns.clone(), pm.spec.service_ref.name.clone()),
            pool: PoolKey::of(pm),
            rank: ClaimRank::of(pm.meta()),
            deleting: pm.meta().deletion_timestamp.is_some(),
            gate: pm.spec.gate_condition_type().to_owned(),
            version: semantic_version(pm),
        };
        let mut out = PmApplied::default();
        let previous = self.pms.get(&key).cloned();
        if previous.as_ref() == Some(&footprint) {
            // Only the status changed (e.g. the echo of our own status write): nothing to plan.
            if footprint.version.is_none() {
                out.affected.push(key);
            }
            return out;
        }
        let mut affected: HashSet<PmKey> = HashSet::from([key.clone()]);
        let gate_peers_changed = previous
            .as_ref()
            .is_none_or(|old| old.gate != footprint.gate || old.deleting != footprint.deleting);
        let types_before = self.gate_types(&ns);
        // Asked before unregistering: a PortMapping re-applied with the key it had (a spec
        // change) would otherwise count it from zero and re-index the namespace's pods.
        let key_indexed = footprint.pool.annotation
            && self
                .annotation_keys
                .get(&ns)
                .is_some_and(|keys| keys.contains_key(&footprint.pool.key));
        if let Some(old) = &previous {
            if old.gate != footprint.gate {
                // Pods that left under the old type are not this type's to release.
                self.departed.remove(&key);
            } else if old.pool != footprint.pool {
                // Its pool moved: the old pool's pods left it.
                let pods = self.pods_by_pool.get_mut(&old.pool).map(PoolPods::list);
                for pod in pods.iter().flat_map(|p| p.iter()) {
                    self.note_departure(&key, &old.gate, pod);
                }
            }
            affected.extend(
                self.pms_by_service
                    .get(&old.service)
                    .into_iter()
                    .flatten()
                    .cloned(),
            );
            self.unregister(&key, old);
        }
        affected.extend(
            self.pms_by_service
                .get(&footprint.service)
                .into_iter()
                .flatten()
                .cloned(),
        );
        if footprint.pool.annotation {
            let keys = self.annotation_keys.entry(ns.clone()).or_default();
            let count = keys.entry(footprint.pool.key.clone()).or_default();
            *count += 1;
            if !key_indexed {
                out.reindex = Some(PodSource::Namespace(ns.clone()));
            }
        }
        insert(
            &mut self.pms_by_service,
            footprint.service.clone(),
            key.clone(),
        );
        if let Some(cut) = cut_prefix(&footprint.service.1) {
            let cut = (footprint.service.0.clone(), cut.to_owned());
            insert(&mut self.pms_by_name_prefix, cut, key.clone());
        }
        insert(&mut self.pms_by_pool, footprint.pool.clone(), key.clone());
        self.pms_by_gate
            .entry(ns.clone())
            .or_default()
            .entry(footprint.gate.clone())
            .or_default()
            .insert(key.clone());
        if gate_peers_changed {
            // Their gate peers changed: who sets a shared type, or the types podReady reads past.
            let gates = [previous.map(|o| o.gate), Some(footprint.gate.clone())];
            let wakes =
                self.gate_wakes(&ns, &types_before, gates.iter().flatten(), &footprint.rank);
            affected.extend(wakes);
        }
        self.pms.insert(key, footprint);
        out.affected = affected.into_iter().collect();
        out
    }

    /// A PortMapping is gone: every other PortMapping of its Service may publish now.
    pub fn delete_portmapping(&mut self, key: &PmKey) -> Vec<PmKey> {
        let Some(old) = self.pms.remove(key) else {
            return Vec::new();
        };
        self.departed.remove(key);
        let types_before = self.gate_types(&old.service.0);
        self.unregister(key, &old);
        let mut affected: HashSet<PmKey> = self
            .pms_by_service
            .get(&old.service)
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        // A gate type it shared may now be another's to set.
        affected.extend(self.gate_wakes(&old.service.0, &types_before, [&old.gate], &old.rank));
        affected.into_iter().collect()
    }

    /// After a relist of PortMappings: forgets those not in `present`.
    pub fn retain_portmappings(&mut self, present: &HashSet<PmKey>) -> Vec<PmKey> {
        let gone = missing(self.pms.keys(), present);
        let mut woken = self.delete_each(gone, Self::delete_portmapping);
        // One gone PortMapping may name another gone one (a shared gate type).
        woken.retain(|k| self.pms.contains_key(k));
        woken
    }

    fn unregister(&mut self, key: &PmKey, old: &PmFootprint) {
        remove(&mut self.pms_by_service, &old.service, key);
        if let Some(cut) = cut_prefix(&old.service.1) {
            let cut = (old.service.0.clone(), cut.to_owned());
            remove(&mut self.pms_by_name_prefix, &cut, key);
        }
        remove(&mut self.pms_by_pool, &old.pool, key);
        let ns = &old.service.0;
        if let Some(by_type) = self.pms_by_gate.get_mut(ns) {
            if let Some(set) = by_type.get_mut(&old.gate) {
                set.remove(key);
                if set.is_empty() {
                    by_type.remove(&old.gate);
                }
            }
            if by_type.is_empty() {
                self.pms_by_gate.remove(ns);
            }
        }
        if old.pool.annotation
            && let Some(keys) = self.annotation_keys.get_mut(&old.pool.namespace)
        {
            if let Some(count) = keys.get_mut(&old.pool.key) {
                *count -= 1;
                if *count == 0 {
                    keys.remove(&old.pool.key);
                }
            }
            if keys.is_empty() {
                self.annotation_keys.remove(&old.pool.namespace);
            }
        }
    }

    /// The PortMapping that publishes `pm`'s Service when it is not `pm` itself: the oldest
    /// (creation time, then name) of those naming the Service, leaving out those being deleted.
    pub fn service_winner(&self, pm: &PmKey) -> Option<PmKey> {
        let footprint = self.pms.get(pm)?;
        let claims = self
            .pms_by_service
            .get(&footprint.service)?
            .iter()
            .filter_map(|k| self.pms.get(k).map(|f| (k, &f.rank, f.deleting)));
        portmapper_core::publisher(claims)
            .filter(|winner| *winner != pm)
            .cloned()
    }

    /// The UIDs of the other PortMappings of `pm`'s Service when `pm` publishes it: their slices
    /// are `pm`'s to take over (one of them may have published before `pm` existed, e.g. when
    /// both were created in the same second and it sorts after `pm` by name).
    pub fn losers_to(&self, pm: &PmKey) -> Vec<String> {
        let Some(footprint) = self.pms.get(pm) else {
            return Vec::new();
        };
        if self.service_winner(pm).is_some() || footprint.deleting {
            return Vec::new();
        }
        self.pms_by_service
            .get(&footprint.service)
            .into_iter()
            .flatten()
            .filter(|k| *k != pm)
            .filter_map(|k| self.pms.get(k)?.uid.clone())
            .collect()
    }

    /// The gate types the PortMappings of a namespace set.
    fn gate_types(&self, ns: &str) -> BTreeSet<String> {
        self.pms_by_gate
            .get(ns)
            .map(|by_type| by_type.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Who hears of a PortMapping's gate change: every PortMapping of the namespace when the
    /// namespace's set of types changed (podReady reads past them), else the younger ones
    /// sharing `gates` (one of them may set a shared type now, or no longer).
    fn gate_wakes<'g>(
        &self,
        ns: &str,
        types_before: &BTreeSet<String>,
        gates: impl IntoIterator<Item = &'g String>,
        rank: &ClaimRank,
    ) -> Vec<PmKey> {
        let Some(by_type) = self.pms_by_gate.get(ns) else {
            return Vec::new();
        };
        if self.gate_types(ns) != *types_before {
            return by_type.values().flatten().cloned().collect();
        }
        gates
            .into_iter()
            .filter_map(|g| by_type.get(g))
            .flatten()
            .filter(|k| self.pms.get(*k).is_some_and(|f| f.rank > *rank))
            .cloned()
            .collect()
    }

    /// The publication gates of `pm`'s namespace as they bear on `pm`: the gate types the other
    /// PortMappings set, and those of its own type that rank before it (creation time, then
    /// name; none being deleted), oldest first: a pod one of them selects is that one's to gate.
    /// Without `with_older` (no pod of the pool carries the gate) only the types.
    pub fn gate_peers(&self, pm: &PmKey, with_older: bool) -> (BTreeSet<String>, Vec<PmKey>) {
        let Some(footprint) = self.pms.get(pm) else {
            return (BTreeSet::new(), Vec::new());
        };
        let Some(by_type) = self.pms_by_gate.get(&footprint.service.0) else {
            return (BTreeSet::new(), Vec::new());
        };
        let types = by_type
            .keys()
            .filter(|t| **t != footprint.gate)
            .cloned()
            .collect();
        if !with_older {
            return (types, Vec::new());
        }
        let mut older: Vec<(&ClaimRank, &PmKey)> = by_type
            .get(&footprint.gate)
            .into_iter()
            .flatten()
            .filter(|k| *k != pm)
            .filter_map(|k| self.pms.get(k).map(|f| (f, k)))
            // A PortMapping being deleted gives way to every live one: it only releases.
            .filter(|(f, _)| !f.deleting && (footprint.deleting || f.rank < footprint.rank))
            .map(|(f, k)| (&f.rank, k))
            .collect();
        // Ranks are unique (the name is in them).
        older.sort_by(|a, b| a.0.cmp(b.0));
        (types, older.into_iter().map(|(_, k)| k.clone()).collect())
    }

    /// Every indexed PortMapping (for the periodic clean-up of watches no one needs).
    pub fn portmapping_keys(&self) -> impl Iterator<Item = &PmKey> {
        self.pms.keys()
    }

    /// The pod watches the indexed PortMappings need.
    pub fn needed_sources(&self) -> BTreeSet<PodSource> {
        self.pms
            .values()
            .map(|f| {
                if f.pool.annotation {
                    PodSource::Namespace(f.pool.namespace.clone())
                } else {
                    PodSource::Label(f.pool.key.clone())
                }
            })
            .collect()
    }

    // ---- Pods ------------------------------------------------------------------------------

    /// The pools a pod seen by `source` is in (by key and value; selectors are the planner's).
    fn pools_of(&self, source: &PodSource, pod: &PodRecord) -> Vec<PoolKey> {
        let ns = pod.namespace.clone();
        match source {
            PodSource::Label(key) => pod
                .labels
                .get(key)
                .map(|value| PoolKey {
                    namespace: ns,
                    annotation: false,
                    key: key.clone(),
                    value: value.to_owned(),
                })
                .into_iter()
                .collect(),
            PodSource::Namespace(_) => {
                let Some(keys) = self.annotation_keys.get(&ns) else {
                    return Vec::new();
                };
                let annotations = &pod.annotations;
                let mut pools: Vec<PoolKey> = keys
                    .keys()
                    .filter_map(|key| {
                        Some(PoolKey {
                            namespace: ns.clone(),
                            annotation: true,
                            key: key.clone(),
                            value: annotations.get(key)?.to_owned(),
                        })
                    })
                    .collect();
                pools.sort();
                pools
            }
        }
    }

    /// A pod was added or changed. Affected: the PortMappings of the pools it is in now or was
    /// in before, and those whose slices publish it (so a pod leaving the pool is withdrawn).
    pub fn apply_pod(&mut self, source: &PodSource, pod: Arc<PodRecord>) -> Vec<PmKey> {
        // Keys compare by name and namespace; the UID and version would be two more strings
        // per pod in every key copy.
        let key = PodKey {
            source: source.clone(),
            pod: ObjectRef::new(&pod.name).within(&pod.namespace),
        };
        let footprint = PodFootprint {
            pools: self.pools_of(source, &pod),
            pod,
        };
        let mut affected = HashSet::new();
        if let Some(old) = self.remove_pod(&key) {
            self.collect_pod(&old, &mut affected);
            self.unregister_pod(&key, &old);
            let left: Vec<PoolKey> = old
                .pools
                .iter()
                .filter(|p| !footprint.pools.contains(p))
                .cloned()
                .collect();
            self.note_departures(&left, &footprint.pod);
        }
        self.note_returns(&footprint);
        self.collect_pod(&footprint, &mut affected);
        let ambient = is_ambient(&footprint.pod);
        for pool in &footprint.pools {
            self.pods_by_pool
                .entry(pool.clone())
                .or_default()
                .insert(footprint.pod.clone());
            if ambient {
                *self.ambient_by_pool.entry(pool.clone()).or_default() += 1;
            }
        }
        if let Some(node) = footprint.node() {
            self.pods_by_node
                .entry(node.to_owned())
                .or_default()
                .insert(key.clone());
        }
        self.pods
            .entry(key.source)
            .or_default()
            .insert(key.pod, footprint);
        affected.into_iter().collect()
    }

    /// Takes a pod's footprint out of its watch's map (dropping the map with its last pod).
    fn remove_pod(&mut self, key: &PodKey) -> Option<PodFootprint> {
        let pods = self.pods.get_mut(&key.source)?;
        let old = pods.remove(&key.pod);
        if pods.is_empty() {
            self.pods.remove(&key.source);
        }
        old
    }

    /// The pods `source`'s watch holds, by key.
    fn pods_of(
        &self,
        source: &PodSource,
    ) -> impl Iterator<Item = (&ObjectRef<Pod>, &PodFootprint)> {
        self.pods.get(source).into_iter().flatten()
    }

    /// A pod is gone from `source`'s watch.
    pub fn delete_pod(&mut self, source: &PodSource, pod: &ObjectRef<Pod>) -> Vec<PmKey> {
        let key = PodKey {
            source: source.clone(),
            pod: pod.clone(),
        };
        let mut affected = HashSet::new();
        if let Some(old) = self.remove_pod(&key) {
            self.collect_pod(&old, &mut affected);
            self.unregister_pod(&key, &old);
            // Relabelled out of the watch, or deleted: the watch cannot tell. A deleted pod's
            // release finds it gone (one answered 404).
            self.note_departures(&old.pools, &old.pod);
        }
        affected.into_iter().collect()
    }

    /// Notes `pod` as departed from the PortMappings of `pools` whose gate it lists and still
    /// waits on (a pod on its way out waits on nothing).
    fn note_departures(&mut self, pools: &[PoolKey], pod: &Arc<PodRecord>) {
        if pod.deletion_timestamp.is_some() || pod.readiness_gates.is_empty() {
            return;
        }
        for pool in pools {
            let pms: Vec<(PmKey, String)> = self
                .pms_by_pool
                .get(pool)
                .into_iter()
                .flatten()
                .filter_map(|pm| Some((pm.clone(), self.pms.get(pm)?.gate.clone())))
                .collect();
            for (pm, gate) in pms {
                self.note_departure(&pm, &gate, pod);
            }
        }
    }

    /// Notes `pod` as departed from `pm` (of gate type `gate`) if it lists that gate and its
    /// condition is not True (a pod on its way out waits on nothing).
    fn note_departure(&mut self, pm: &PmKey, gate: &str, pod: &Arc<PodRecord>) {
        let waits = pod.deletion_timestamp.is_none()
            && pod.has_gate(gate)
            && pod.condition(gate).is_none_or(|c| c.status != "True");
        if waits {
            self.departed
                .entry(pm.clone())
                .or_default()
                .insert(pod.name.clone(), pod.clone());
        }
    }

    /// A pod back in a pool is its PortMappings' again, not departed.
    fn note_returns(&mut self, footprint: &PodFootprint) {
        for pool in &footprint.pools {
            for pm in self.pms_by_pool.get(pool).into_iter().flatten() {
                if let Some(pods) = self.departed.get_mut(pm) {
                    pods.remove(&footprint.pod.name);
                    if pods.is_empty() {
                        self.departed.remove(pm);
                    }
                }
            }
        }
    }

    /// The pods that left `pm`'s pool still waiting on its gate, by name, with the names of
    /// those a PortMapping of the same gate type (not being deleted; `pm` itself when its pool
    /// moved onto them) now has in its pool: theirs to set, not to release.
    pub fn departed(&self, pm: &PmKey) -> (Vec<Arc<PodRecord>>, BTreeSet<String>) {
        let Some(pods) = self.departed.get(pm) else {
            return (Vec::new(), BTreeSet::new());
        };
        let gate = self
            .pms
            .get(pm)
            .map(|f| f.gate.as_str())
            .unwrap_or_default();
        let kept = pods
            .values()
            .filter(|pod| {
                let key = ObjectRef::<Pod>::new(&pod.name).within(&pod.namespace);
                self.pods
                    .values()
                    .filter_map(|by_name| by_name.get(&key))
                    .flat_map(|f| &f.pools)
                    .flat_map(|pool| self.pms_by_pool.get(pool).into_iter().flatten())
                    .filter_map(|other| self.pms.get(other))
                    .any(|f| f.gate == gate && !f.deleting)
            })
            .map(|pod| pod.name.clone())
            .collect();
        (pods.values().cloned().collect(), kept)
    }

    /// `pm` released (or left to another PortMapping) these departed pods.
    pub fn released(&mut self, pm: &PmKey, names: &[String]) {
        if let Some(pods) = self.departed.get_mut(pm) {
            for name in names {
                pods.remove(name);
            }
            if pods.is_empty() {
                self.departed.remove(pm);
            }
        }
    }

    /// After a relist of `source`'s watch: forgets its pods not in `present`.
    pub fn retain_pods(
        &mut self,
        source: &PodSource,
        present: &HashSet<ObjectRef<Pod>>,
    ) -> Vec<PmKey> {
        let gone: Vec<ObjectRef<Pod>> = self
            .pods_of(source)
            .map(|(pod, _)| pod)
            .filter(|pod| !present.contains(*pod))
            .cloned()
            .collect();
        let mut out = HashSet::new();
        for pod in gone {
            out.extend(self.delete_pod(source, &pod));
        }
        out.into_iter().collect()
    }

    /// A pod watch stopped: forgets everything it indexed (no reconcile: nobody needs it).
    pub fn forget_source(&mut self, source: &PodSource) {
        let Some(gone) = self.pods.remove(source) else {
            return;
        };
        for (pod, old) in gone {
            let key = PodKey {
                source: source.clone(),
                pod,
            };
            self.unregister_pod(&key, &old);
        }
    }

    fn collect_pod(&self, footprint: &PodFootprint, out: &mut HashSet<PmKey>) {
        for pool in &footprint.pools {
            out.extend(self.pms_by_pool.get(pool).into_iter().flatten().cloned());
        }
        if let Some(uid) = footprint.uid() {
            out.extend(
                self.published
                    .get(uid)
                    .into_iter()
                    .flatten()
                    .map(|(k, _)| k.clone()),
            );
        }
    }

    fn unregister_pod(&mut self, key: &PodKey, old: &PodFootprint) {
        let ambient = is_ambient(&old.pod);
        for pool in &old.pools {
            if ambient && let Some(n) = self.ambient_by_pool.get_mut(pool) {
                *n -= 1;
                if *n == 0 {
                    self.ambient_by_pool.remove(pool);
                }
            }
            if let Some(set) = self.pods_by_pool.get_mut(pool) {
                set.remove(&key.pod.name);
                if set.is_empty() {
                    self.pods_by_pool.remove(pool);
                }
            }
        }
        if let Some(node) = old.node()
            && let Some(set) = self.pods_by_node.get_mut(node)
        {
            set.remove(key);
            if set.is_empty() {
                self.pods_by_node.remove(node);
            }
        }
    }

    /// Applies every pod `source`'s watch holds again (a PortMapping started reading a new
    /// annotation key of its namespace, so their pools may differ); returns the PortMappings
    /// affected.
    pub fn reindex_pods(&mut self, source: &PodSource) -> Vec<PmKey> {
        let pods: Vec<Arc<PodRecord>> = self.pods_of(source).map(|(_, f)| f.pod.clone()).collect();
        let mut affected = HashSet::new();
        for pod in pods {
            affected.extend(self.apply_pod(source, pod));
        }
        affected.into_iter().collect()
    }

    /// Whether a pod of the PortMapping's pool (by key and value) is enrolled in Istio ambient
    /// mode.
    pub fn pool_has_ambient(&self, pm: &PortMapping) -> bool {
        self.ambient_by_pool.contains_key(&PoolKey::of(pm))
    }

    /// The pods of a PortMapping's pool (by key and value), as the pool's watch has them, by
    /// name: a stable input order, so plans do not depend on hash order. Shared, not copied
    /// (see [`PoolPods`]).
    pub fn pool_pods(&mut self, pm: &PortMapping) -> Arc<Vec<Arc<PodRecord>>> {
        self.pods_by_pool
            .get_mut(&PoolKey::of(pm))
            .map(PoolPods::list)
            .unwrap_or_default()
    }

    // ---- Our EndpointSlices ----------------------------------------------------------------

    /// One of our slices was added or changed. Affected: its controller; for an orphan, the
    /// PortMappings of its Service (which adopt it); and PortMappings whose publication of its
    /// pods changed are found through the owner.
    pub fn apply_slice(&mut self, slice: &EndpointSlice) -> Vec<PmKey> {
        let key = ObjectRef::from_obj(slice);
        let footprint = OwnedFootprint {
            owner: controller_of(slice),
            orphan_of: orphan_service(slice),
            pods: slice
                .endpoints
                .iter()
                .filter_map(|e| e.target_ref.as_ref()?.uid.clone())
                .collect(),
            service: slice.labels().get(LABEL_SERVICE_NAME).cloned(),
            resource_version: slice.metadata.resource_version.clone(),
        };
        let observed = self
            .own_writes
            .observed(&key, footprint.resource_version.as_deref());
        put_name(&mut self.our_names, &ns_of(slice), &slice.metadata);
        self.doubt_resolved(&ns_of(slice), &key.name);
        let mut affected = HashSet::new();
        let written_by = |f: &OwnedFootprint, uid: &str| {
            f.owner.as_ref().is_some_and(|(_, u)| u == uid) && f.orphan_of.is_none()
        };
        // The echo of a write, to the PortMapping that made it, is what its plan already
        // decided: waking it would only plan again to find nothing to do (at 10,000 pods, two
        // of every three reconciles after a pod flip). Unless a reconcile of it was put off
        // until this write showed, or the slice changed hands.
        let mut echo_of = match &observed {
            Observed::Echo { owner, wake: false } | Observed::InFlight { owner } => {
                Some(owner.as_str())
            }
            _ => None,
        }
        .filter(|uid| written_by(&footprint, uid));
        if let Some(old) = self.slices.remove(&key) {
            if echo_of.is_some_and(|uid| !written_by(&old, uid)) {
                echo_of = None;
            }
            self.collect_owned(&ns_of(slice), &old, &mut affected);
            self.unregister_slice(&key, &old);
        }
        self.collect_owned(&ns_of(slice), &footprint, &mut affected);
        if echo_of.is_some()
            && let Some((pm, _)) = &footprint.owner
        {
            affected.remove(pm);
        }
        if let Some((pm, uid)) = &footprint.owner {
            insert(&mut self.slices_by_owner, uid.clone(), key.clone());
            for pod in &footprint.pods {
                let by_pm = self.published.entry(pod.clone()).or_default();
                match by_pm.iter_mut().find(|(k, _)| k == pm) {
                    Some((_, n)) => *n += 1,
                    None => by_pm.push((pm.clone(), 1)),
                }
            }
        }
        if let Some(svc) = &footprint.orphan_of {
            insert(
                &mut self.orphans_by_service,
                (ns_of(slice), svc.clone()),
                key.clone(),
            );
        }
        self.slices.insert(key, footprint);
        affected.into_iter().collect()
    }

    /// One of our slices is gone: its owner, and every PortMapping of its Service (its name is
    /// free now, e.g. for the PortMapping that takes over a deleted publisher's Service).
    pub fn delete_slice(&mut self, key: &ObjectRef<EndpointSlice>) -> Vec<PmKey> {
        let ours = self.own_writes.awaits_gone(key);
        self.own_writes.observed_gone(key);
        let mut affected = HashSet::new();
        let ns = key.namespace.as_deref().unwrap_or_default();
        let known_elsewhere = self
            .foreign_names
            .get(ns)
            .is_some_and(|n| n.contains_key(&key.name));
        if !ours && !known_elsewhere && self.slices.contains_key(key) {
            self.in_doubt
                .entry(ns.to_owned())
                .or_default()
                .insert(key.name.clone());
        }
        drop_name(&mut self.our_names, ns, &key.name);
        if let Some(old) = self.slices.remove(key) {
            let ns = key.namespace.clone().unwrap_or_default();
            if let Some(svc) = &old.service {
                affected.extend(
                    self.pms_by_service
                        .get(&(ns.clone(), svc.clone()))
                        .into_iter()
                        .flatten()
                        .cloned(),
                );
            }
            self.collect_owned(&ns, &old, &mut affected);
            self.unregister_slice(key, &old);
        }
        affected.into_iter().collect()
    }

    /// After a relist of our slices: forgets those not in `present`.
    pub fn retain_slices(&mut self, present: &HashSet<ObjectRef<EndpointSlice>>) -> Vec<PmKey> {
        let gone = missing(self.slices.keys(), present);
        self.delete_each(gone, Self::delete_slice)
    }

    /// The PortMapping with UID `owner` is about to apply `slice`: the slice's events are not
    /// taken for someone else's change until the answer says whose they were.
    pub fn applying_slice(&mut self, owner: &str, slice: ObjectRef<EndpointSlice>, now: Instant) {
        self.own_writes.applying(owner, slice, now);
    }

    /// The PortMapping with UID `owner` applied `slice` and the API server answered with
    /// `resource_version`. Nothing to await when the watch already brought that version;
    /// [`Answered::Wake`] when it brought something else meanwhile.
    pub fn wrote_slice(
        &mut self,
        owner: &str,
        slice: ObjectRef<EndpointSlice>,
        resource_version: String,
        now: Instant,
    ) -> Answered {
        let cached = self
            .slices
            .get(&slice)
            .is_some_and(|f| f.resource_version.as_deref() == Some(resource_version.as_str()));
        self.own_writes
            .answered(owner, slice, resource_version, cached, now)
    }

    /// The apply of `slice` by the PortMapping with UID `owner` failed, or its answer named no
    /// version.
    pub fn apply_failed(&mut self, owner: &str, slice: &ObjectRef<EndpointSlice>) -> Answered {
        self.own_writes.apply_failed(owner, slice)
    }

    /// The PortMapping with UID `owner` deleted `slice`. Nothing to await when the watch
    /// already removed it.
    pub fn deleted_slice(&mut self, owner: &str, slice: ObjectRef<EndpointSlice>, now: Instant) {
        if self.slices.contains_key(&slice) {
            self.own_writes.deleted(owner, slice, now);
        }
    }

    /// Whether a slice write of the PortMapping with UID `owner` has not reached the cache.
    pub fn own_writes_pending(&mut self, owner: &str, now: Instant) -> bool {
        self.own_writes.pending(owner, now)
    }

    fn collect_owned(&self, ns: &str, footprint: &OwnedFootprint, out: &mut HashSet<PmKey>) {
        if let Some((pm, _)) = &footprint.owner {
            out.insert(pm.clone());
        }
        if let Some(svc) = &footprint.orphan_of {
            out.extend(
                self.pms_by_service
                    .get(&(ns.to_owned(), svc.clone()))
                    .into_iter()
                    .flatten()
                    .cloned(),
            );
        }
    }

    fn unregister_slice(&mut self, key: &ObjectRef<EndpointSlice>, old: &OwnedFootprint) {
        if let Some((pm, uid)) = &old.owner {
            remove(&mut self.slices_by_owner, uid, key);
            for pod in &old.pods {
                if let Some(by_pm) = self.published.get_mut(pod) {
                    if let Some(at) = by_pm.iter().position(|(k, _)| k == pm) {
                        by_pm[at].1 -= 1;
                        if by_pm[at].1 == 0 {
                            by_pm.swap_remove(at);
                        }
                    }
                    if by_pm.is_empty() {
                        self.published.remove(pod);
                    }
                }
            }
        }
        if let Some(svc) = &old.orphan_of {
            let ns = key.namespace.clone().unwrap_or_default();
            remove(&mut self.orphans_by_service, &(ns, svc.clone()), key);
        }
    }

    /// Our slices controlled by the PortMapping with `uid` or by one of `also` (PortMappings it
    /// takes over from), plus orphans of `adopt_for` (a Service in `namespace`), which the
    /// planner adopts.
    pub fn owned_slices(
        &self,
        uid: &str,
        also: &[String],
        namespace: &str,
        adopt_for: Option<&str>,
    ) -> Vec<ObjectRef<EndpointSlice>> {
        let mut out: Vec<_> = std::iter::once(uid)
            .chain(also.iter().map(String::as_str))
            .filter_map(|u| self.slices_by_owner.get(u))
            .flatten()
            .cloned()
            .collect();
        if let Some(svc) = adopt_for {
            out.extend(
                self.orphans_by_service
                    .get(&(namespace.to_owned(), svc.to_owned()))
                    .into_iter()
                    .flatten()
                    .cloned(),
            );
        }
        out
    }

    // ---- Slices not managed by us (metadata) -----------------------------------------------

    /// A slice not managed by us was added or changed. Affected: for a native or mirroring
    /// controller's slice, the PortMappings of its Service (migration evidence); for any, the
    /// PortMappings whose plans may want its name (a collision starts or ends).
    pub fn apply_native_slice(&mut self, slice: &PartialObjectMeta<EndpointSlice>) -> Vec<PmKey> {
        let key = ObjectRef::from_obj(slice);
        let ns = ns_of(slice);
        let native = slice
            .labels()
            .get(LABEL_MANAGED_BY)
            .is_some_and(|m| {
                m == portmapper_core::planner::migration::NATIVE_MANAGER
                    || m == portmapper_core::planner::migration::MIRROR_MANAGER
            })
            .then(|| {
                let service = slice.labels().get(LABEL_SERVICE_NAME).cloned();
                (ns.clone(), service.unwrap_or_default())
            });
        let mut affected = self.delete_native_slice(&key);
        put_name(&mut self.foreign_names, &ns, &slice.metadata);
        self.doubt_resolved(&ns, &key.name);
        if let Some(service) = &native {
            insert(&mut self.native_by_service, service.clone(), key.clone());
            affected.extend(self.pms_of(service));
        }
        affected.extend(self.pms_wanting(ns, &key.name));
        self.native.insert(key, native);
        dedup(affected)
    }

    /// A slice not managed by us is gone: the PortMappings of its Service (native) and those
    /// that may want its name, which is free now (their collision ends without polling).
    pub fn delete_native_slice(&mut self, key: &NativeKey) -> Vec<PmKey> {
        let Some(native) = self.native.remove(key) else {
            return Vec::new();
        };
        let ns = key.namespace.clone().unwrap_or_default();
        drop_name(&mut self.foreign_names, &ns, &key.name);
        self.doubt_resolved(&ns, &key.name);
        let mut affected = Vec::new();
        if let Some(service) = &native {
            remove(&mut self.native_by_service, service, key);
            affected.extend(self.pms_of(service));
        }
        affected.extend(self.pms_wanting(ns, &key.name));
        dedup(affected)
    }

    /// Names of `service` in `namespace` in doubt (see `in_doubt`): the caller reads each.
    pub fn names_in_doubt(&self, namespace: &str, service: &str) -> Vec<String> {
        let dotted: Vec<String> = std::iter::once(service)
            .chain(cut_prefix(service))
            .map(|p| format!("{p}."))
            .collect();
        self.in_doubt
            .get(namespace)
            .into_iter()
            .flatten()
            .filter(|n| *n == service || dotted.iter().any(|d| n.starts_with(d)))
            .cloned()
            .collect()
    }

    /// A name is no longer in doubt: a watch showed it, or a read found it gone.
    pub fn doubt_resolved(&mut self, namespace: &str, name: &str) {
        if let Some(names) = self.in_doubt.get_mut(namespace) {
            names.remove(name);
            if names.is_empty() {
                self.in_doubt.remove(namespace);
            }
        }
    }

    /// The PortMappings whose plans may want slice `name`: those of the Service it starts
    /// with, and those of the Services whose port-set names start with a cut that it starts
    /// with.
    fn pms_wanting(&self, ns: String, name: &str) -> Vec<PmKey> {
        let key = (ns, service_of_name(name).to_owned());
        let mut out = self.pms_of(&key);
        out.extend(
            self.pms_by_name_prefix
                .get(&key)
                .into_iter()
                .flatten()
                .cloned(),
        );
        out
    }

    fn pms_of(&self, service: &(String, String)) -> Vec<PmKey> {
        self.pms_by_service
            .get(service)
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }

    /// The slice names a plan of the PortMapping with `uid` for `service` may want that
    /// someone else holds: any known slice named `<service>` or `<service>.*` that ownership
    /// does not let this PortMapping write ([`Ownership::claimable`]; `adopt`: it may adopt
    /// orphans, `take_over`: PortMappings it takes over from). Seen by either watch as held
    /// wins, so a relabelled slice is never forced back while the other watch lags.
    ///
    /// [`Ownership::claimable`]: portmapper_core::Ownership::claimable
    pub fn held_by_others(
        &self,
        namespace: &str,
        service: &str,
        uid: &str,
        adopt: bool,
        take_over: &[String],
    ) -> BTreeMap<String, portmapper_core::HeldName> {
        let mut held = BTreeMap::new();
        for names in [&self.our_names, &self.foreign_names] {
            for (name, meta) in service_names(names.get(namespace), service) {
                if !portmapper_core::ownership(meta, uid).claimable(service, adopt, take_over) {
                    held.insert(name.clone(), portmapper_core::HeldName::of(meta));
                }
            }
        }
        held
    }

    /// After a relist of native slices: forgets those not in `present`.
    pub fn retain_native_slices(&mut self, present: &HashSet<NativeKey>) -> Vec<PmKey> {
        let gone = missing(self.native.keys(), present);
        self.delete_each(gone, Self::delete_native_slice)
    }

    /// The native slices of a Service.
    pub fn native_slices(&self, namespace: &str, service: &str) -> Vec<NativeKey> {
        self.native_by_service
            .get(&(namespace.to_owned(), service.to_owned()))
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }

    // ---- Our Endpoints objects -------------------------------------------------------------

    /// One of our Endpoints objects was added or changed: its controller (or, for an orphan,
    /// the PortMappings of its Service).
    pub fn apply_endpoints(&mut self, endpoints: &Endpoints) -> Vec<PmKey> {
        let key = ObjectRef::from_obj(endpoints);
        let footprint = OwnedFootprint {
            owner: controller_of(endpoints),
            orphan_of: orphan_service(endpoints),
            pods: Vec::new(),
            service: None,
            resource_version: None,
        };
        let mut affected = self.delete_endpoints(&key);
        let mut more = HashSet::new();
        self.collect_owned(&ns_of(endpoints), &footprint, &mut more);
        affected.extend(more);
        if let Some((_, uid)) = &footprint.owner {
            insert(&mut self.endpoints_by_owner, uid.clone(), key.clone());
        }
        self.endpoints.insert(key, footprint);
        dedup(affected)
    }

    /// One of our Endpoints objects is gone.
    pub fn delete_endpoints(&mut self, key: &ObjectRef<Endpoints>) -> Vec<PmKey> {
        let Some(old) = self.endpoints.remove(key) else {
            return Vec::new();
        };
        if let Some((_, uid)) = &old.owner {
            remove(&mut self.endpoints_by_owner, uid, key);
        }
        let mut out = HashSet::new();
        self.collect_owned(key.namespace.as_deref().unwrap_or_default(), &old, &mut out);
        out.into_iter().collect()
    }

    /// After a relist of our Endpoints objects: forgets those not in `present`.
    pub fn retain_endpoints(&mut self, present: &HashSet<ObjectRef<Endpoints>>) -> Vec<PmKey> {
        let gone = missing(self.endpoints.keys(), present);
        self.delete_each(gone, Self::delete_endpoints)
    }

    /// Our Endpoints objects controlled by the PortMapping with `uid`.
    pub fn owned_endpoints(&self, uid: &str) -> Vec<ObjectRef<Endpoints>> {
        self.endpoints_by_owner
            .get(uid)
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }

    // ---- Services --------------------------------------------------------------------------

    /// A Service was added, changed or deleted: the PortMappings naming it.
    pub fn service_changed(&self, svc: &ObjectRef<Service>) -> Vec<PmKey> {
        self.pms_by_service
            .get(&(svc.namespace.clone().unwrap_or_default(), svc.name.clone()))
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }

    /// After a relist of Services: the PortMappings whose Service the new list lacks (it was
    /// deleted while the watch was down).
    pub fn services_missing(&self, present: &HashSet<ObjectRef<Service>>) -> Vec<PmKey> {
        let mut out = Vec::new();
        for ((ns, name), pms) in &self.pms_by_service {
            if !present.contains(&ObjectRef::new(name).within(ns)) {
                out.extend(pms.iter().cloned());
            }
        }
        dedup(out)
    }

    // ---- Nodes -----------------------------------------------------------------------------

    /// A node was added or changed: when its zone changed, the PortMappings of the pods on it.
    pub fn apply_node(&mut self, node: &PartialObjectMeta<Node>) -> Vec<PmKey> {
        let name = node.name_any();
        let zone = node.labels().get(LABEL_ZONE).cloned();
        if self.zones.get(&name) == Some(&zone) {
            return Vec::new();
        }
        self.zones.insert(name.clone(), zone);
        self.node_pms(&name)
    }

    /// A node is gone.
    pub fn delete_node(&mut self, node: &str) -> Vec<PmKey> {
        match self.zones.remove(node) {
            Some(Some(_)) => self.node_pms(node),
            _ => Vec::new(),
        }
    }

    /// After a relist of nodes: forgets those not in `present`.
    pub fn retain_nodes(&mut self, present: &HashSet<String>) -> Vec<PmKey> {
        let gone = missing(self.zones.keys(), present);
        self.delete_each(gone, |index, node: &String| index.delete_node(node))
    }

    /// Node name → zone, for the nodes that have one.
    pub fn zone(&self, node: &str) -> Option<&str> {
        self.zones.get(node)?.as_deref()
    }

    fn node_pms(&self, node: &str) -> Vec<PmKey> {
        let mut out = HashSet::new();
        for pod in self.pods_by_node.get(node).into_iter().flatten() {
            if let Some(f) = self.pods.get(&pod.source).and_then(|p| p.get(&pod.pod)) {
                for pool in &f.pools {
                    out.extend(self.pms_by_pool.get(pool).into_iter().flatten().cloned());
                }
            }
        }
        out.into_iter().collect()
    }

    /// Zones of the nodes the given pods run on.
    pub fn zones_of<'a>(
        &self,
        nodes: impl IntoIterator<Item = &'a str>,
    ) -> std::collections::BTreeMap<String, String> {
        nodes
            .into_iter()
            .filter_map(|n| Some((n.to_owned(), self.zone(n)?.to_owned())))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ObjectReference, PodSpec};
    use k8s_openapi::api::discovery::v1::Endpoint;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
    use k8s_openapi::jiff::Timestamp;
    use portmapper_api::PortMappingSpec;

    const KEY: &str = "example.com/group";

    fn spec(service: &str, from: KeySource, value: Option<&str>) -> PortMappingSpec {
        serde_json::from_value(serde_json::json!({
            "serviceRef": {"name": service},
            "pods": {"key": KEY, "from": from, "value": value},
        }))
        .expect("spec")
    }

    fn pm(ns: &str, name: &str, service: &str, from: KeySource, created: i64) -> PortMapping {
        let mut pm = PortMapping::new(name, spec(service, from, None));
        pm.metadata.namespace = Some(ns.into());
        pm.metadata.uid = Some(format!("uid-{name}"));
        pm.metadata.creation_timestamp = Some(Time(Timestamp::from_second(created).expect("time")));
        pm
    }

    fn pod(ns: &str, name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Pod {
        let map = |kv: &[(&str, &str)]| {
            Some(
                kv.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            )
        };
        Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                uid: Some(format!("pod-uid-{name}")),
                labels: map(labels),
                annotations: map(annotations),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some(format!("node-{name}")),
                ..PodSpec::default()
            }),
            status: None,
        }
    }

    fn slice(ns: &str, name: &str, owner: Option<&PortMapping>, pods: &[&Pod]) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                labels: Some(
                    [
                        (
                            LABEL_MANAGED_BY.to_owned(),
                            portmapper_api::MANAGER.to_owned(),
                        ),
                        (LABEL_SERVICE_NAME.to_owned(), "web".to_owned()),
                    ]
                    .into(),
                ),
                owner_references: owner.map(|pm| {
                    vec![OwnerReference {
                        api_version: format!("{}/v1alpha1", portmapper_api::GROUP),
                        kind: "PortMapping".into(),
                        name: pm.name_any(),
                        uid: pm.uid().unwrap_or_default(),
                        controller: Some(true),
                        block_owner_deletion: Some(true),
                    }]
                }),
                ..ObjectMeta::default()
            },
            address_type: "IPv4".into(),
            endpoints: pods
                .iter()
                .map(|p| Endpoint {
                    addresses: vec!["10.0.0.1".into()],
                    target_ref: Some(ObjectReference {
                        uid: p.uid(),
                        ..ObjectReference::default()
                    }),
                    ..Endpoint::default()
                })
                .collect(),
            ports: None,
        }
    }

    fn names(mut keys: Vec<PmKey>) -> Vec<String> {
        keys.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        keys.into_iter()
            .map(|k| format!("{}/{}", k.namespace.unwrap_or_default(), k.name))
            .collect()
    }

    fn label() -> PodSource {
        PodSource::Label(KEY.into())
    }

    /// Two PortMappings of Service web in ns a, one of api in ns a, one of web in ns b.
    fn index() -> Index {
        let mut index = Index::new();
        for pm in [
            pm("a", "web-1", "web", KeySource::Label, 10),
            pm("a", "web-2", "web", KeySource::Label, 20),
            pm("a", "api", "api", KeySource::Label, 10),
            pm("b", "web", "web", KeySource::Label, 10),
        ] {
            index.apply_portmapping(&pm);
        }
        index
    }

    /// A pod of `labels` listing the publication gate, with its condition `status` if any.
    fn gated(name: &str, labels: &[(&str, &str)], status: Option<&str>) -> Arc<PodRecord> {
        use k8s_openapi::api::core::v1::{PodCondition, PodReadinessGate, PodStatus};
        let mut pod = pod("a", name, labels, &[]);
        if let Some(spec) = pod.spec.as_mut() {
            spec.readiness_gates = Some(vec![PodReadinessGate {
                condition_type: portmapper_core::PUBLISHED_GATE.into(),
            }]);
        }
        pod.status = Some(PodStatus {
            conditions: status.map(|s| {
                vec![PodCondition {
                    type_: portmapper_core::PUBLISHED_GATE.into(),
                    status: s.into(),
                    ..PodCondition::default()
                }]
            }),
            ..PodStatus::default()
        });
        Arc::new(PodRecord::from(pod))
    }

    fn departed_names(index: &Index, pm: &str) -> (Vec<String>, Vec<String>) {
        let (pods, kept) = index.departed(&PmKey::new(pm).within("a"));
        (
            pods.iter().map(|p| p.name.clone()).collect(),
            kept.into_iter().collect(),
        )
    }

    #[test]
    fn a_gated_pod_leaving_a_pool_is_departed_until_released_or_back() {
        let mut index = index();
        let none = (Vec::<String>::new(), Vec::<String>::new());
        index.apply_pod(&label(), gated("p1", &[(KEY, "web")], Some("False")));
        assert_eq!(departed_names(&index, "web-1"), none);
        // Into api's pool: departed from both web PortMappings, kept by api (same gate type).
        let woken = index.apply_pod(&label(), gated("p1", &[(KEY, "api")], Some("False")));
        assert_eq!(names(woken), ["a/api", "a/web-1", "a/web-2"]);
        let p1 = (vec!["p1".to_owned()], vec!["p1".to_owned()]);
        assert_eq!(departed_names(&index, "web-1"), p1);
        assert_eq!(departed_names(&index, "web-2"), p1);
        // Out of every pool (gone from the watch: relabelled or deleted): nobody keeps it.
        index.delete_pod(&label(), &ObjectRef::new("p1").within("a"));
        assert_eq!(
            departed_names(&index, "web-1"),
            (vec!["p1".to_owned()], vec![])
        );
        assert_eq!(
            departed_names(&index, "api"),
            (vec!["p1".to_owned()], vec![])
        );
        index.released(&PmKey::new("web-1").within("a"), &["p1".to_owned()]);
        assert_eq!(departed_names(&index, "web-1"), none);
        // Back in the pool before its release: not departed any more.
        index.apply_pod(&label(), gated("p1", &[(KEY, "api")], Some("False")));
        assert_eq!(departed_names(&index, "api"), none);
        // A gate already True, or a pod on its way out, waits on nothing.
        index.apply_pod(&label(), gated("p2", &[(KEY, "web")], Some("True")));
        index.apply_pod(&label(), gated("p2", &[(KEY, "other")], Some("True")));
        assert_eq!(departed_names(&index, "web-2").0, ["p1"]);
        // A PortMapping's departed pods go with it.
        index.delete_portmapping(&PmKey::new("web-2").within("a"));
        assert_eq!(departed_names(&index, "web-2"), none);
        // web-1's own pool moves away from p3: the pool's waiting pods left it.
        index.apply_pod(&label(), gated("p3", &[(KEY, "web")], Some("False")));
        index.released(&PmKey::new("web-1").within("a"), &["p1".to_owned()]);
        let mut moved = pm("a", "web-1", "web", KeySource::Label, 10);
        moved.spec.pods.value = Some("elsewhere".into());
        index.apply_portmapping(&moved);
        assert_eq!(
            departed_names(&index, "web-1"),
            (vec!["p3".to_owned()], vec![])
        );
        // And back onto it: its own again (kept, not released).
        index.apply_portmapping(&pm("a", "web-1", "web", KeySource::Label, 10));
        assert_eq!(
            departed_names(&index, "web-1"),
            (vec!["p3".to_owned()], vec!["p3".to_owned()])
        );
    }

    #[test]
    fn a_pod_event_reaches_only_the_portmappings_of_its_pool() {
        let mut index = index();
        let p = pod("a", "p1", &[(KEY, "web")], &[]);
        assert_eq!(
            names(index.apply_pod(&label(), Arc::new(PodRecord::from(p.clone())))),
            ["a/web-1", "a/web-2"]
        );
        // Same value in another namespace, and another value: other pools.
        let q = pod("b", "p1", &[(KEY, "web")], &[]);
        assert_eq!(
            names(index.apply_pod(&label(), Arc::new(PodRecord::from(q.clone())))),
            ["b/web"]
        );
        let r = pod("a", "p2", &[(KEY, "nobody")], &[]);
        assert!(
            index
                .apply_pod(&label(), Arc::new(PodRecord::from(r.clone())))
                .is_empty()
        );
        assert_eq!(
            index
                .pool_pods(&pm("a", "web-1", "web", KeySource::Label, 10))
                .iter()
                .map(|p| p.name.clone())
                .collect::<Vec<_>>(),
            ["p1"]
        );
    }

    #[test]
    fn pools_know_whether_a_pod_is_enrolled_in_istio_ambient() {
        use portmapper_core::consumers::AMBIENT_REDIRECTION_ANNOTATION as AMBIENT;
        let mut index = index();
        let web = pm("a", "web-1", "web", KeySource::Label, 10);
        let plain = pod("a", "p1", &[(KEY, "web")], &[]);
        let enrolled = pod("a", "p1", &[(KEY, "web")], &[(AMBIENT, "enabled")]);
        let record = |p: &Pod| Arc::new(PodRecord::from(p.clone()));
        index.apply_pod(&label(), record(&plain));
        assert!(!index.pool_has_ambient(&web));
        index.apply_pod(&label(), record(&enrolled));
        assert!(index.pool_has_ambient(&web));
        // Another pool's count is its own.
        let api = pm("a", "api", "api", KeySource::Label, 10);
        assert!(!index.pool_has_ambient(&api));
        index.apply_pod(&label(), record(&plain));
        assert!(!index.pool_has_ambient(&web), "the annotation went");
        index.apply_pod(&label(), record(&enrolled));
        index.delete_pod(&label(), &ObjectRef::new("p1").within("a"));
        assert!(!index.pool_has_ambient(&web), "the pod went");
    }

    #[test]
    fn a_pod_moving_between_pools_reaches_both_and_a_deleted_pod_its_last_pool() {
        let mut index = index();
        index.apply_pod(
            &label(),
            Arc::new(PodRecord::from(pod("a", "p1", &[(KEY, "web")], &[]))),
        );
        let moved = pod("a", "p1", &[(KEY, "api")], &[]);
        assert_eq!(
            names(index.apply_pod(&label(), Arc::new(PodRecord::from(moved.clone())))),
            ["a/api", "a/web-1", "a/web-2"]
        );
        let web = pm("a", "web-1", "web", KeySource::Label, 10);
        assert!(index.pool_pods(&web).is_empty());
        assert_eq!(
            names(index.delete_pod(&label(), &ObjectRef::from_obj(&moved))),
            ["a/api"]
        );
        assert!(
            index
                .delete_pod(&label(), &ObjectRef::from_obj(&moved))
                .is_empty()
        );
    }

    #[test]
    fn a_published_pod_reaches_its_publisher_even_outside_every_pool() {
        let mut index = index();
        let web = pm("a", "web-1", "web", KeySource::Label, 10);
        let p = pod("a", "p1", &[(KEY, "gone")], &[]);
        assert_eq!(
            names(index.apply_slice(&slice("a", "web-http", Some(&web), &[&p]))),
            ["a/web-1"]
        );
        assert_eq!(
            names(index.apply_pod(&label(), Arc::new(PodRecord::from(p.clone())))),
            ["a/web-1"]
        );
        // Once no slice publishes it, nobody hears of it.
        index.apply_slice(&slice("a", "web-http", Some(&web), &[]));
        assert!(
            index
                .apply_pod(&label(), Arc::new(PodRecord::from(p.clone())))
                .is_empty()
        );
    }

    #[test]
    fn an_echo_handled_before_its_answer_wakes_nobody_and_a_foreign_version_wakes_the_writer() {
        let mut index = index();
        let web = pm("a", "web-1", "web", KeySource::Label, 10);
        let uid = web.uid().unwrap();
        let mut written = slice("a", "web.http", Some(&web), &[]);
        let key = ObjectRef::from_obj(&written);
        written.metadata.resource_version = Some("7".into());
        index.apply_slice(&written);
        // Our apply is sent; its event comes before its answer.
        index.applying_slice(&uid, key.clone(), Instant::now());
        written.metadata.resource_version = Some("8".into());
        assert!(
            index.apply_slice(&written).is_empty(),
            "held as a possible echo"
        );
        assert_eq!(
            index.wrote_slice(&uid, key.clone(), "8".into(), Instant::now()),
            Answered::Awaited,
            "it was the echo"
        );
        assert!(!index.own_writes_pending(&uid, Instant::now()));
        // Someone else's version comes while ours is in flight: held, then the answer wakes.
        index.applying_slice(&uid, key.clone(), Instant::now());
        written.metadata.resource_version = Some("9".into());
        assert!(index.apply_slice(&written).is_empty());
        written.metadata.resource_version = Some("10".into());
        assert!(index.apply_slice(&written).is_empty());
        assert_eq!(
            index.wrote_slice(&uid, key.clone(), "10".into(), Instant::now()),
            Answered::Wake
        );
        // With nothing in flight, the same event reaches the owner.
        written.metadata.resource_version = Some("11".into());
        assert_eq!(names(index.apply_slice(&written)), ["a/web-1"]);
    }

    #[test]
    fn owned_slices_by_uid_and_orphans_by_service() {
        let mut index = index();
        let web = pm("a", "web-1", "web", KeySource::Label, 10);
        index.apply_slice(&slice("a", "web-http", Some(&web), &[]));
        // An orphan wakes the PortMappings of its Service, which adopt it.
        assert_eq!(
            names(index.apply_slice(&slice("a", "web-admin", None, &[]))),
            ["a/web-1", "a/web-2"]
        );
        let mut owned: Vec<String> = index
            .owned_slices("uid-web-1", &[], "a", Some("web"))
            .into_iter()
            .map(|k| k.name)
            .collect();
        owned.sort();
        assert_eq!(owned, ["web-admin", "web-http"]);
        assert_eq!(index.owned_slices("uid-web-1", &[], "a", None).len(), 1);
        assert!(index.owned_slices("uid-web-1", &[], "b", Some("web")).len() == 1);
        // A deleted slice frees its name for every PortMapping of its Service.
        let gone = index.delete_slice(&ObjectRef::new("web-http").within("a"));
        assert_eq!(names(gone), ["a/web-1", "a/web-2"]);
        assert!(index.owned_slices("uid-web-1", &[], "a", None).is_empty());
    }

    #[test]
    fn deleting_the_winner_wakes_the_other_portmappings_of_its_service() {
        let mut index = index();
        let (one, two) = (
            ObjectRef::new("web-1").within("a"),
            ObjectRef::new("web-2").within("a"),
        );
        assert_eq!(index.service_winner(&two), Some(one.clone()));
        assert_eq!(index.service_winner(&one), None);
        assert_eq!(names(index.delete_portmapping(&one)), ["a/web-2"]);
        assert_eq!(index.service_winner(&two), None);
    }

    #[test]
    fn the_publisher_takes_over_the_slices_of_the_portmappings_it_beats() {
        let mut index = index();
        let (one, two) = (
            ObjectRef::new("web-1").within("a"),
            ObjectRef::new("web-2").within("a"),
        );
        let loser = pm("a", "web-2", "web", KeySource::Label, 20);
        index.apply_slice(&slice("a", "web-http", Some(&loser), &[]));
        assert_eq!(index.losers_to(&one), ["uid-web-2"]);
        assert!(index.losers_to(&two).is_empty(), "a loser takes nothing");
        let taken = index.owned_slices("uid-web-1", &index.losers_to(&one), "a", None);
        assert_eq!(taken, [ObjectRef::new("web-http").within("a")]);
    }

    #[test]
    fn same_second_ties_break_by_name_and_a_deleting_portmapping_never_wins() {
        let mut index = Index::new();
        index.apply_portmapping(&pm("a", "zz", "web", KeySource::Label, 10));
        let affected = index.apply_portmapping(&pm("a", "aa", "web", KeySource::Label, 10));
        // The newcomer may take the Service: both hear of it.
        assert_eq!(names(affected.affected), ["a/aa", "a/zz"]);
        let zz = ObjectRef::new("zz").within("a");
        assert_eq!(
            index.service_winner(&zz),
            Some(ObjectRef::new("aa").within("a"))
        );
        let mut aa = pm("a", "aa", "web", KeySource::Label, 10);
        aa.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert_eq!(
            names(index.apply_portmapping(&aa).affected),
            ["a/aa", "a/zz"]
        );
        assert_eq!(index.service_winner(&zz), None);
    }

    #[test]
    fn an_unchanged_portmapping_reaches_only_itself() {
        let mut index = index();
        let again = index.apply_portmapping(&pm("a", "web-1", "web", KeySource::Label, 10));
        assert_eq!(names(again.affected), ["a/web-1"]);
        assert_eq!(again.reindex, None);
    }

    #[test]
    fn a_status_only_change_reaches_nobody_once_the_server_keeps_generations() {
        let mut index = Index::new();
        let mut web = pm("a", "web", "web", KeySource::Label, 10);
        web.metadata.generation = Some(1);
        assert_eq!(names(index.apply_portmapping(&web).affected), ["a/web"]);
        web.metadata.resource_version = Some("2".into());
        web.status = Some(Default::default());
        assert!(
            index.apply_portmapping(&web).affected.is_empty(),
            "the echo of a status write"
        );
        web.metadata.annotations = Some([("note".to_owned(), "x".to_owned())].into());
        assert_eq!(names(index.apply_portmapping(&web).affected), ["a/web"]);
        web.metadata.generation = Some(2);
        assert_eq!(
            names(index.apply_portmapping(&web).affected),
            ["a/web"],
            "a spec change"
        );
        web.metadata.generation = None;
        assert_eq!(
            names(index.apply_portmapping(&web).affected),
            ["a/web"],
            "without generations every event counts"
        );
        assert_eq!(
            names(index.apply_portmapping(&web).affected),
            ["a/web"],
            "every one"
        );
    }

    #[test]
    fn annotation_pools_are_indexed_by_the_keys_in_use_and_reindexed_for_a_new_key() {
        let mut index = Index::new();
        let ns = PodSource::Namespace("a".into());
        let p = pod("a", "p1", &[], &[(KEY, "web")]);
        // No PortMapping reads the annotation yet: the pod is in no pool.
        assert!(
            index
                .apply_pod(&ns, Arc::new(PodRecord::from(p.clone())))
                .is_empty()
        );
        let applied = index.apply_portmapping(&pm("a", "web", "web", KeySource::Annotation, 1));
        assert_eq!(applied.reindex, Some(ns.clone()));
        // The caller re-applies the namespace's pods.
        assert_eq!(
            names(index.apply_pod(&ns, Arc::new(PodRecord::from(p.clone())))),
            ["a/web"]
        );
        let second = index.apply_portmapping(&pm("a", "web-2", "web", KeySource::Annotation, 2));
        assert_eq!(second.reindex, None, "the key is indexed already");
        index.delete_portmapping(&ObjectRef::new("web-2").within("a"));
        // The only PortMapping reading the key changes its spec: the key stays indexed, so
        // the namespace's pods are not applied again.
        let mut changed = pm("a", "web", "web", KeySource::Annotation, 1);
        changed.metadata.generation = Some(2);
        changed.spec.max_endpoints_per_slice = 50;
        let again = index.apply_portmapping(&changed);
        assert_eq!(names(again.affected), ["a/web"]);
        assert_eq!(again.reindex, None, "the same key, re-applied");
        let mut other_key = changed;
        other_key.metadata.generation = Some(3);
        other_key.spec.pods.key = "example.com/other".into();
        assert_eq!(
            index.apply_portmapping(&other_key).reindex,
            Some(ns.clone()),
            "a key no PortMapping read before"
        );
        assert_eq!(
            index.needed_sources(),
            BTreeSet::from([PodSource::Namespace("a".into())])
        );
    }

    #[test]
    fn a_zone_change_reaches_the_portmappings_of_the_pods_on_that_node() {
        let mut index = index();
        index.apply_pod(
            &label(),
            Arc::new(PodRecord::from(pod("a", "p1", &[(KEY, "api")], &[]))),
        );
        let node = |zone: &str| PartialObjectMeta::<Node> {
            metadata: ObjectMeta {
                name: Some("node-p1".into()),
                labels: Some([(LABEL_ZONE.to_owned(), zone.to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..Default::default()
        };
        assert_eq!(names(index.apply_node(&node("z1"))), ["a/api"]);
        assert!(index.apply_node(&node("z1")).is_empty(), "unchanged zone");
        assert_eq!(index.zone("node-p1"), Some("z1"));
        assert_eq!(names(index.delete_node("node-p1")), ["a/api"]);
    }

    #[test]
    fn a_relist_forgets_what_it_no_longer_lists() {
        let mut index = index();
        let (p1, p2) = (
            pod("a", "p1", &[(KEY, "web")], &[]),
            pod("a", "p2", &[(KEY, "api")], &[]),
        );
        index.apply_pod(&label(), Arc::new(PodRecord::from(p1.clone())));
        index.apply_pod(&label(), Arc::new(PodRecord::from(p2.clone())));
        let present = HashSet::from([ObjectRef::from_obj(&p1)]);
        assert_eq!(names(index.retain_pods(&label(), &present)), ["a/api"]);
        let present = HashSet::from([ObjectRef::new("web-1").within("a")]);
        let woken = index.retain_portmappings(&present);
        // web-2 and api are gone; web-1 shares web-2's Service; b/web is gone too.
        assert_eq!(names(woken), ["a/web-1"]);
        assert_eq!(index.portmapping_keys().count(), 1);
    }

    #[test]
    fn a_relist_or_a_stopped_watch_touches_only_its_own_pods() {
        let mut index = index();
        let ns = PodSource::Namespace("a".into());
        let p1 = pod("a", "p1", &[(KEY, "web")], &[]);
        index.apply_pod(&label(), Arc::new(PodRecord::from(p1.clone())));
        index.apply_pod(&ns, Arc::new(PodRecord::from(p1.clone())));
        // The namespace watch relists without p1: the label watch's copy stays in its pool.
        assert!(index.retain_pods(&ns, &HashSet::new()).is_empty());
        let web = pm("a", "web-1", "web", KeySource::Label, 10);
        assert_eq!(index.pool_pods(&web).len(), 1);
        index.apply_pod(&ns, Arc::new(PodRecord::from(p1.clone())));
        index.forget_source(&ns);
        assert_eq!(
            index.pool_pods(&web).len(),
            1,
            "the label watch still sees p1"
        );
        assert_eq!(
            names(index.retain_pods(&label(), &HashSet::new())),
            ["a/web-1", "a/web-2"]
        );
        assert!(index.pool_pods(&web).is_empty());
        assert!(
            index.pods.is_empty(),
            "no empty per-watch map is left behind"
        );
    }

    #[test]
    fn native_slices_and_endpoints_reach_the_portmappings_of_their_service() {
        let mut index = index();
        let native = PartialObjectMeta::<EndpointSlice> {
            metadata: ObjectMeta {
                namespace: Some("a".into()),
                name: Some("web-abcde".into()),
                labels: Some(
                    [
                        (LABEL_SERVICE_NAME.to_owned(), "web".to_owned()),
                        (
                            LABEL_MANAGED_BY.to_owned(),
                            portmapper_core::planner::migration::NATIVE_MANAGER.to_owned(),
                        ),
                    ]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            ..Default::default()
        };
        assert_eq!(
            names(index.apply_native_slice(&native)),
            ["a/web-1", "a/web-2"]
        );
        assert_eq!(index.native_slices("a", "web").len(), 1);
        assert_eq!(
            names(index.delete_native_slice(&ObjectRef::from_obj(&native))),
            ["a/web-1", "a/web-2"]
        );
        assert!(index.native_slices("a", "web").is_empty());
        let web = pm("a", "web-1", "web", KeySource::Label, 10);
        let mut ep = Endpoints {
            metadata: slice("a", "web", Some(&web), &[]).metadata,
            subsets: None,
        };
        assert_eq!(names(index.apply_endpoints(&ep)), ["a/web-1"]);
        assert_eq!(index.owned_endpoints("uid-web-1").len(), 1);
        ep.metadata.owner_references = None;
        assert_eq!(names(index.apply_endpoints(&ep)), ["a/web-1", "a/web-2"]);
        assert!(index.owned_endpoints("uid-web-1").is_empty());
    }

    #[test]
    fn gate_peers_name_the_other_types_and_the_older_portmappings_of_the_same_type() {
        use portmapper_api::ReadinessGate;
        let gated = |mut pm: PortMapping, gate: &str| {
            pm.spec.readiness_gate = Some(ReadinessGate {
                condition_type: gate.into(),
                timeout_seconds: None,
            });
            pm
        };
        // Namespace a: web-1 (10) and web-2 (20) keep the default type, api (10) sets its own.
        let mut index = index();
        let api = gated(
            pm("a", "api", "api", KeySource::Label, 10),
            "example.com/api",
        );
        // A new gate type wakes every PortMapping of the namespace, not those of namespace b.
        assert_eq!(
            names(index.apply_portmapping(&api).affected),
            ["a/api", "a/web-1", "a/web-2"]
        );
        let key = |name: &str| ObjectRef::<PortMapping>::new(name).within("a");
        let (types, older) = index.gate_peers(&key("web-2"), true);
        assert_eq!(types, BTreeSet::from(["example.com/api".to_owned()]));
        assert_eq!(names(older), ["a/web-1"]);
        let (types, older) = index.gate_peers(&key("web-1"), true);
        assert_eq!(types, BTreeSet::from(["example.com/api".to_owned()]));
        assert!(older.is_empty());
        let (types, older) = index.gate_peers(&key("api"), true);
        assert_eq!(
            types,
            BTreeSet::from(["portmapper.dev/published".to_owned()])
        );
        assert!(older.is_empty());
        // web-1 goes: web-2 sets the default type alone, and hears of it.
        let gone = index.delete_portmapping(&key("web-1"));
        assert!(names(gone).contains(&"a/web-2".to_owned()));
        assert!(index.gate_peers(&key("web-2"), true).1.is_empty());
        // An unchanged PortMapping wakes only itself.
        assert_eq!(names(index.apply_portmapping(&api).affected), ["a/api"]);
    }

    fn foreign(ns: &str, name: &str, manager: Option<&str>) -> PartialObjectMeta<EndpointSlice> {
        PartialObjectMeta::<EndpointSlice> {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                labels: manager.map(|m| [(LABEL_MANAGED_BY.to_owned(), m.to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn names_held_by_others_are_found_by_service_prefix_and_their_release_wakes_the_service() {
        let mut index = index();
        let web1 = pm("a", "web-1", "web", KeySource::Label, 10);
        let web2 = pm("a", "web-2", "web", KeySource::Label, 20);
        let squatter = foreign("a", "web.http", Some("someone-else"));
        // A squatter at a name of web's: web's PortMappings hear of it (a collision may start).
        assert_eq!(
            names(index.apply_native_slice(&squatter)),
            ["a/web-1", "a/web-2"]
        );
        // Names of other Services, other namespaces, and a native slice named by generateName
        // are never wanted by web's plans; none of them wakes web.
        for other in [
            foreign("a", "webx.http", None),
            foreign(
                "a",
                "web-abcde",
                Some(portmapper_core::planner::migration::NATIVE_MANAGER),
            ),
            foreign("b", "web.https", None),
        ] {
            let woken = index.apply_native_slice(&other);
            assert!(!names(woken).contains(&"a/web-1".to_owned()));
        }
        index.apply_native_slice(&foreign("a", "web", None));
        // Our labelled slices: web-1's own, and web-2's (another PortMapping's) at web.admin.
        index.apply_slice(&slice("a", "web.metrics", Some(&web1), &[]));
        index.apply_slice(&slice("a", "web.admin", Some(&web2), &[]));
        let held = index.held_by_others("a", "web", "uid-web-1", true, &[]);
        assert_eq!(
            held.iter()
                .map(|(n, h)| format!("{n}: {h}"))
                .collect::<Vec<_>>(),
            [
                "web: created by someone else",
                "web.admin: owned by PortMapping web-2",
                "web.http: managed by someone-else",
            ]
        );
        // The PortMapping it takes over from holds nothing against it.
        let held = index.held_by_others("a", "web", "uid-web-1", true, &["uid-web-2".into()]);
        assert_eq!(held.keys().collect::<Vec<_>>(), ["web", "web.http"]);
        // The squatter goes: its name is free, and web's PortMappings hear of it at once.
        assert_eq!(
            names(index.delete_native_slice(&ObjectRef::from_obj(&squatter))),
            ["a/web-1", "a/web-2"]
        );
        let held = index.held_by_others("a", "web", "uid-web-1", true, &["uid-web-2".into()]);
        assert_eq!(held.keys().collect::<Vec<_>>(), ["web"]);
        // Only a native or mirroring controller's slice is migration evidence.
        assert_eq!(index.native_slices("a", "web-abcde").len(), 0);
        // (Five slices without a Service label in namespace a; one of them is native.)
        assert_eq!(index.native_slices("a", "").len(), 1);
    }

    #[test]
    fn names_of_a_long_service_are_found_by_the_cut_its_port_set_names_start_with() {
        let mut index = index();
        let service = format!("{}-tail", "l".repeat(40));
        let cut = portmapper_core::planner::naming::name_prefix(&service).to_owned();
        assert_ne!(cut, service);
        let long = pm("a", "long", &service, KeySource::Label, 10);
        index.apply_portmapping(&long);
        let squatter = foreign("a", &format!("{cut}.http.bcdfghjklm"), Some("someone-else"));
        assert_eq!(names(index.apply_native_slice(&squatter)), ["a/long"]);
        let held = index.held_by_others("a", &service, "uid-long", true, &[]);
        assert_eq!(
            held.keys().cloned().collect::<Vec<_>>(),
            [squatter.metadata.name.clone().unwrap_or_default()]
        );
        assert_eq!(
            names(index.delete_native_slice(&ObjectRef::from_obj(&squatter))),
            ["a/long"]
        );
        assert!(
            index
                .held_by_others("a", &service, "uid-long", true, &[])
                .is_empty()
        );
        // Gone with its PortMapping.
        index.delete_portmapping(&ObjectRef::from_obj(&long));
        assert!(names(index.apply_native_slice(&squatter)).is_empty());
    }

    #[test]
    fn a_slice_leaving_our_watch_without_our_delete_is_in_doubt_until_the_other_watch_shows_it() {
        let mut index = index();
        let web1 = pm("a", "web-1", "web", KeySource::Label, 10);
        let ours = slice("a", "web.http", Some(&web1), &[]);
        let key = ObjectRef::from_obj(&ours);
        index.apply_slice(&ours);
        // Relabelled (or deleted) by someone: our watch says DELETED either way.
        index.delete_slice(&key);
        assert_eq!(index.names_in_doubt("a", "web"), ["web.http"]);
        assert!(index.names_in_doubt("a", "api").is_empty());
        // The watch of slices not ours shows it: classified from there on, no more doubt.
        let relabelled = foreign("a", "web.http", Some("someone-else"));
        index.apply_native_slice(&relabelled);
        assert!(index.names_in_doubt("a", "web").is_empty());
        assert_eq!(
            index
                .held_by_others("a", "web", "uid-web-1", true, &[])
                .keys()
                .collect::<Vec<_>>(),
            ["web.http"]
        );
        // Our own deletion is no doubt.
        index.delete_native_slice(&ObjectRef::from_obj(&relabelled));
        index.apply_slice(&ours);
        index.deleted_slice("uid-web-1", key.clone(), Instant::now());
        index.delete_slice(&key);
        assert!(index.names_in_doubt("a", "web").is_empty());
        // A read that finds it gone resolves it too.
        index.apply_slice(&ours);
        index.delete_slice(&key);
        index.doubt_resolved("a", "web.http");
        assert!(index.names_in_doubt("a", "web").is_empty());
    }
}
