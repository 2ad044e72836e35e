//! PortMappings: who publishes which Service, pools, gate types; what a PortMapping event reaches.

use std::collections::{BTreeSet, HashSet};
use std::hash::Hash;

use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use portmapper_api::PortMapping;

use portmapper_core::ClaimRank;

use super::{Index, PmFootprint, PmKey, PodSource, PoolKey, cut_prefix, insert, missing, remove};

/// What applying a PortMapping asks of the caller besides reconciles.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PmApplied {
    pub affected: Vec<PmKey>,
    /// A namespace-wide pod watch must be re-indexed: a PortMapping started using an annotation
    /// key that its pods were not indexed by.
    pub reindex: Option<PodSource>,
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

/// What the index keeps of a PortMapping in namespace `ns`.
fn footprint(pm: &PortMapping, ns: &str) -> PmFootprint {
    PmFootprint {
        uid: pm.uid(),
        service: (ns.to_owned(), pm.spec.service_ref.name.clone()),
        pool: PoolKey::of(pm),
        rank: ClaimRank::of(pm.meta()),
        deleting: pm.meta().deletion_timestamp.is_some(),
        gate: pm.spec.gate_condition_type().to_owned(),
        version: semantic_version(pm),
        label_watch: pm.spec.pods.from == portmapper_api::KeySource::Label
            && super::pool_is_valid(pm),
    }
}

impl Index {
    /// A PortMapping was added or changed. Affected: itself, and when what decides the
    /// Service's publisher changed (Service, rank, deletion), every PortMapping naming the old or
    /// the new Service.
    pub fn apply_portmapping(&mut self, pm: &PortMapping) -> PmApplied {
        let key = ObjectRef::from_obj(pm);
        let ns = pm.namespace().unwrap_or_default();
        let footprint = footprint(pm, &ns);
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
        let watched_before = self.admitted_keys(&ns);
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
            self.pool_moved(&key, old, &footprint);
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
        self.register(&key, &footprint);
        if gate_peers_changed {
            // Their gate peers changed: who sets a shared type, or the types podReady reads past.
            let gates = [previous.map(|o| o.gate), Some(footprint.gate.clone())];
            let wakes =
                self.gate_wakes(&ns, &types_before, gates.iter().flatten(), &footprint.rank);
            affected.extend(wakes);
        }
        self.pms.insert(key, footprint);
        affected.extend(self.admission_wakes(&ns, &watched_before));
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
        let watched_before = self.admitted_keys(&old.service.0);
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
        // A key over the cap may be watched now.
        affected.extend(self.admission_wakes(&old.service.0, &watched_before));
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

    /// Files the PortMapping under its Service, its name prefix, its pool and its gate type
    /// (the annotation keys are counted by the caller, which needs the count before).
    fn register(&mut self, key: &PmKey, footprint: &PmFootprint) {
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
        if footprint.label_watch {
            let keys = self.label_keys.entry(footprint.pool.namespace.clone());
            insert(keys.or_default(), footprint.pool.key.clone(), key.clone());
        }
        self.pms_by_gate
            .entry(footprint.service.0.clone())
            .or_default()
            .entry(footprint.gate.clone())
            .or_default()
            .insert(key.clone());
    }

    pub(super) fn unregister(&mut self, key: &PmKey, old: &PmFootprint) {
        remove(&mut self.pms_by_service, &old.service, key);
        if let Some(cut) = cut_prefix(&old.service.1) {
            let cut = (old.service.0.clone(), cut.to_owned());
            remove(&mut self.pms_by_name_prefix, &cut, key);
        }
        remove(&mut self.pms_by_pool, &old.pool, key);
        if old.label_watch
            && let Some(keys) = self.label_keys.get_mut(&old.pool.namespace)
        {
            remove(keys, &old.pool.key, key);
            if keys.is_empty() {
                self.label_keys.remove(&old.pool.namespace);
            }
        }
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
    pub(super) fn gate_types(&self, ns: &str) -> BTreeSet<String> {
        self.pms_by_gate
            .get(ns)
            .map(|by_type| by_type.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Who hears of a PortMapping's gate change: every PortMapping of the namespace when the
    /// namespace's set of types changed (podReady reads past them), else the younger ones
    /// sharing `gates` (one of them may set a shared type now, or no longer).
    pub(super) fn gate_wakes<'g>(
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

    /// The pod watches the indexed PortMappings need: every namespace's annotation watch, and
    /// the label watches within each namespace's cap.
    pub fn needed_sources(&self) -> BTreeSet<PodSource> {
        let annotated = self
            .pms
            .values()
            .filter(|f| f.pool.annotation)
            .map(|f| PodSource::Namespace(f.pool.namespace.clone()));
        let labelled = self
            .label_keys
            .keys()
            .flat_map(|ns| self.admitted_sources(ns));
        annotated.chain(labelled).collect()
    }
}
