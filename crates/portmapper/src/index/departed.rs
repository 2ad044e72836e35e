//! Pods that left a PortMapping's pool still waiting on its publication gate: nothing else
//! would ever set their condition again, so that PortMapping releases them (True, `Released`)
//! and then forgets them here.

use std::collections::BTreeSet;
use std::sync::Arc;

use portmapper_core::PodRecord;

use super::{Index, PmFootprint, PmKey, PodFootprint, PoolKey};

impl Index {
    /// `pm` was re-applied as `new`: when its pool moved, the old pool's waiting pods left it;
    /// when its gate type changed, the pods that left under the old type are not this type's
    /// to release.
    pub(super) fn pool_moved(&mut self, pm: &PmKey, old: &PmFootprint, new: &PmFootprint) {
        if old.gate != new.gate {
            self.departed.remove(pm);
        } else if old.pool != new.pool {
            let pods = self.pods_by_pool.get_mut(&old.pool).map(|p| p.list());
            for pod in pods.iter().flat_map(|p| p.iter()) {
                self.note_departure(pm, &old.gate, pod);
            }
        }
    }

    /// Notes `pod` as departed from the PortMappings of `pools` whose gate it lists and still
    /// waits on (a pod on its way out waits on nothing).
    pub(super) fn note_departures(&mut self, pools: &[Arc<PoolKey>], pod: &Arc<PodRecord>) {
        if pod.deletion_timestamp.is_some() || pod.readiness_gates.is_empty() {
            return;
        }
        for pool in pools {
            let pms: Vec<(PmKey, String)> = self
                .pms_by_pool
                .get(&**pool)
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
            && pod.condition(gate).is_none_or(|c| &*c.status != "True");
        if waits {
            self.departed
                .entry(pm.clone())
                .or_default()
                .insert(pod.name.clone(), pod.clone());
        }
    }

    /// A pod back in a pool is its PortMappings' again, not departed.
    pub(super) fn note_returns(&mut self, footprint: &PodFootprint) {
        for pool in &footprint.pools {
            for pm in self.pms_by_pool.get(&**pool).into_iter().flatten() {
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
                self.pods
                    .iter()
                    .filter(|(source, _)| *source.namespace() == *pod.namespace)
                    .filter_map(|(_, by_name)| by_name.get(pod.name.as_str()))
                    .flat_map(|f| &f.pools)
                    .flat_map(|pool| self.pms_by_pool.get(&**pool).into_iter().flatten())
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
}
