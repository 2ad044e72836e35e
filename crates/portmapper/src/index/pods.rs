//! Pods, by the watch that sees them, their pools and nodes; whether each pod watch has listed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::ObjectRef;

use portmapper_api::PortMapping;

use portmapper_core::PodRecord;
use portmapper_core::consumers::is_ambient;

use crate::index::pool_pods::PoolPods;

use super::{Index, Listing, PmKey, PodFootprint, PodSource, PoolKey};

impl Index {
    /// The pools a pod seen by `source` is in (by key and value; selectors are the planner's).
    pub(super) fn pools_of(&self, source: &PodSource, pod: &PodRecord) -> Vec<PoolKey> {
        let ns = pod.namespace.to_string();
        match source {
            PodSource::Label { key, .. } => pod
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
        if *pod.namespace != *source.namespace() {
            // Never sent by a namespaced watch; never kept if one were.
            return Vec::new();
        }
        let pools = self.pools_of(source, &pod);
        let footprint = PodFootprint {
            pools: pools.into_iter().map(|p| self.shared_pool(p)).collect(),
            pod,
        };
        let mut affected = HashSet::new();
        if let Some(old) = self.remove_pod(source, &footprint.pod.name) {
            self.collect_pod(&old, &mut affected);
            self.unregister_pod(&old);
            let left: Vec<Arc<PoolKey>> = old
                .pools
                .iter()
                .filter(|p| !footprint.pools.contains(p))
                .cloned()
                .collect();
            self.note_departures(&left, &footprint.pod);
        }
        self.note_returns(&footprint);
        self.collect_pod(&footprint, &mut affected);
        self.register_pod(&footprint);
        self.pods
            .entry(source.clone())
            .or_default()
            .insert(footprint);
        affected.into_iter().collect()
    }

    /// `pool` as the index already holds it (one allocation per pool, not per pod), or new.
    fn shared_pool(&self, pool: PoolKey) -> Arc<PoolKey> {
        match self.pods_by_pool.get_key_value(&pool) {
            Some((shared, _)) => shared.clone(),
            None => Arc::new(pool),
        }
    }

    /// Enters a pod in its pools, their counts and its node's.
    fn register_pod(&mut self, footprint: &PodFootprint) {
        let ambient = is_ambient(&footprint.pod);
        let gated = !footprint.pod.readiness_gates.is_empty();
        for pool in &footprint.pools {
            self.pods_by_pool
                .entry(pool.clone())
                .or_default()
                .insert(footprint.pod.clone());
            if ambient {
                *self.ambient_by_pool.entry(pool.clone()).or_default() += 1;
            }
            if gated {
                *self.gated_by_pool.entry(pool.clone()).or_default() += 1;
            }
        }
        if let Some(node) = footprint.node()
            && !footprint.pools.is_empty()
        {
            let by_pool = self.pools_by_node.entry(node.to_owned()).or_default();
            for pool in &footprint.pools {
                let counts = by_pool.entry(pool.clone()).or_default();
                counts.pods += 1;
                counts.gated += usize::from(gated);
            }
        }
    }

    /// Takes the pod named `name` out of `source`'s watch (dropping the set with its last pod).
    pub(super) fn remove_pod(&mut self, source: &PodSource, name: &str) -> Option<PodFootprint> {
        let pods = self.pods.get_mut(source)?;
        let old = pods.take(name);
        if pods.is_empty() {
            self.pods.remove(source);
        }
        old
    }

    /// The pods `source`'s watch holds.
    pub(super) fn pods_of(&self, source: &PodSource) -> impl Iterator<Item = &PodFootprint> {
        self.pods.get(source).into_iter().flatten()
    }

    /// A pod is gone from `source`'s watch.
    pub fn delete_pod(&mut self, source: &PodSource, pod: &ObjectRef<Pod>) -> Vec<PmKey> {
        if pod.namespace.as_deref().unwrap_or_default() != source.namespace() {
            return Vec::new();
        }
        let mut affected = HashSet::new();
        if let Some(old) = self.remove_pod(source, &pod.name) {
            self.collect_pod(&old, &mut affected);
            self.unregister_pod(&old);
            // Relabelled out of the watch, or deleted: the watch cannot tell. A deleted pod's
            // release finds it gone (one answered 404).
            self.note_departures(&old.pools, &old.pod);
        }
        affected.into_iter().collect()
    }

    /// After a relist of `source`'s watch: forgets its pods not in `present`.
    pub fn retain_pods(
        &mut self,
        source: &PodSource,
        present: &HashSet<ObjectRef<Pod>>,
    ) -> Vec<PmKey> {
        // A namespaced watch's pods: their names tell them apart.
        let listed: HashSet<&str> = present.iter().map(|p| p.name.as_str()).collect();
        let gone: Vec<ObjectRef<Pod>> = self
            .pods_of(source)
            .filter(|f| !listed.contains(f.pod.name.as_str()))
            .map(|f| ObjectRef::new(&f.pod.name).within(&f.pod.namespace))
            .collect();
        let mut out = HashSet::new();
        for pod in gone {
            out.extend(self.delete_pod(source, &pod));
        }
        // The index holds the whole list now: a reconcile that sees it listed reads a
        // complete pool, and those that asked before are woken.
        if let Some(Listing::Waiting(waiting)) = self.lists.insert(source.clone(), Listing::Listed)
        {
            out.extend(waiting);
        }
        out.into_iter().collect()
    }

    /// Whether `source`'s watch has listed (so the index holds all its pods). While it has
    /// not, `waiter` is woken once it has ([`Index::retain_pods`] returns it).
    pub fn pods_listed(&mut self, source: &PodSource, waiter: &PmKey) -> bool {
        match self
            .lists
            .entry(source.clone())
            .or_insert_with(|| Listing::Waiting(HashSet::new()))
        {
            Listing::Listed => true,
            Listing::Waiting(waiting) => {
                waiting.insert(waiter.clone());
                false
            }
        }
    }

    /// A pod watch stopped: forgets everything it indexed (no reconcile: nobody needs it).
    pub fn forget_source(&mut self, source: &PodSource) {
        self.lists.remove(source);
        let Some(gone) = self.pods.remove(source) else {
            return;
        };
        for old in gone {
            self.unregister_pod(&old);
        }
    }

    pub(super) fn collect_pod(&self, footprint: &PodFootprint, out: &mut HashSet<PmKey>) {
        for pool in &footprint.pools {
            out.extend(self.pms_by_pool.get(pool).into_iter().flatten().cloned());
        }
        if let Some(uid) = footprint.uid() {
            out.extend(
                self.published
                    .get(uid)
                    .into_iter()
                    .flatten()
                    .map(|(k, _)| PmKey::clone(k)),
            );
        }
    }

    pub(super) fn unregister_pod(&mut self, old: &PodFootprint) {
        let ambient = is_ambient(&old.pod);
        let gated = !old.pod.readiness_gates.is_empty();
        for pool in &old.pools {
            if ambient {
                uncount(&mut self.ambient_by_pool, pool);
            }
            if gated {
                uncount(&mut self.gated_by_pool, pool);
            }
            if let Some(set) = self.pods_by_pool.get_mut(pool) {
                set.remove(&old.pod.name);
                if set.is_empty() {
                    self.pods_by_pool.remove(pool);
                }
            }
        }
        if let Some(node) = old.node()
            && let Some(by_pool) = self.pools_by_node.get_mut(node)
        {
            for pool in &old.pools {
                if let Some(counts) = by_pool.get_mut(pool) {
                    counts.pods -= 1;
                    counts.gated -= usize::from(gated);
                    if counts.pods == 0 {
                        by_pool.remove(pool);
                    }
                }
            }
            if by_pool.is_empty() {
                self.pools_by_node.remove(node);
            }
        }
    }

    /// Applies every pod `source`'s watch holds again (a PortMapping started reading a new
    /// annotation key of its namespace, so their pools may differ); returns the PortMappings
    /// affected.
    pub fn reindex_pods(&mut self, source: &PodSource) -> Vec<PmKey> {
        let pods: Vec<Arc<PodRecord>> = self.pods_of(source).map(|f| f.pod.clone()).collect();
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

    /// Whether a pod of the PortMapping's pool (by key and value) lists a readiness gate.
    pub fn pool_has_gated(&self, pm: &PortMapping) -> bool {
        self.gated_by_pool.contains_key(&PoolKey::of(pm))
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
}

/// Takes one off `pool`'s count, dropping the entry at zero.
fn uncount(counts: &mut HashMap<Arc<PoolKey>, usize>, pool: &PoolKey) {
    if let Some(n) = counts.get_mut(pool) {
        *n -= 1;
        if *n == 0 {
            counts.remove(pool);
        }
    }
}
