//! Which label-selected pod watches a namespace gets. Each distinct label key of a namespace's
//! PortMappings is one watch (`labelSelector=<key>` in that namespace). The keys are capped per
//! namespace (`--max-pod-watches-per-namespace`), so no tenant can open watches without bound,
//! and the cap is per namespace so that one tenant's keys never crowd out another's. Within a
//! namespace the keys are ranked by their oldest PortMapping (creation time, then name): a new
//! key never takes the watch of one already in use; the PortMappings of a key over the cap are
//! reported stalled, and keep what they published.

use std::collections::{BTreeSet, HashSet};

use portmapper_core::ClaimRank;

use super::{Index, PmKey, PodSource};

/// `--max-pod-watches-per-namespace`'s default: more distinct label keys than a namespace's
/// Deployments, StatefulSets and DaemonSets usually share, few enough that 1,000 namespaces
/// at the cap are 16,000 watches of one namespace each.
pub const DEFAULT_MAX_POD_WATCHES: usize = 16;

/// Why a PortMapping's pool is not watched: its namespace has more label keys than the cap,
/// and older ones take the watches. (Not how many keys: that changes with every other
/// PortMapping, and reporting it would rewrite every stalled status at each new key.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchRefused {
    /// The cap.
    pub cap: usize,
}

impl Index {
    /// Caps the label-selected pod watches per namespace (`None`: no cap).
    pub fn limit_label_watches(&mut self, cap: Option<usize>) {
        self.max_label_watches = cap;
    }

    /// The label keys of `ns` that are watched: all of them within the cap, else the `cap`
    /// keys whose oldest PortMappings are oldest.
    pub(super) fn admitted_keys(&self, ns: &str) -> BTreeSet<String> {
        let Some(keys) = self.label_keys.get(ns) else {
            return BTreeSet::new();
        };
        let cap = self.max_label_watches.unwrap_or(usize::MAX);
        if keys.len() <= cap {
            return keys.keys().cloned().collect();
        }
        let mut ranked: Vec<(&ClaimRank, &String)> = keys
            .iter()
            .filter_map(|(key, pms)| {
                let oldest = pms.iter().filter_map(|k| self.pms.get(k)).map(|f| &f.rank);
                Some((oldest.min()?, key))
            })
            .collect();
        ranked.sort();
        ranked
            .into_iter()
            .take(cap)
            .map(|(_, key)| key.clone())
            .collect()
    }

    /// The label-selected pod watches `ns` gets.
    pub fn admitted_sources(&self, ns: &str) -> Vec<PodSource> {
        self.admitted_keys(ns)
            .into_iter()
            .map(|key| PodSource::Label {
                namespace: ns.to_owned(),
                key,
            })
            .collect()
    }

    /// Whether `pm`'s pool watch is refused by the cap (never for an annotation pool, which
    /// its namespace's one namespace-wide watch serves).
    pub fn watch_refused(&self, pm: &PmKey) -> Option<WatchRefused> {
        let footprint = self.pms.get(pm)?;
        if !footprint.label_watch {
            return None;
        }
        let ns = &footprint.pool.namespace;
        let keys = self.label_keys.get(ns)?.len();
        let cap = self.max_label_watches?;
        if keys <= cap || self.admitted_keys(ns).contains(&footprint.pool.key) {
            return None;
        }
        Some(WatchRefused { cap })
    }

    /// The PortMappings of `ns` whose keys were watched (`before`) and are not, or the
    /// reverse: each reports its new state, and one let in waits for its watch's first list.
    pub(super) fn admission_wakes(&self, ns: &str, before: &BTreeSet<String>) -> Vec<PmKey> {
        let now = self.admitted_keys(ns);
        let Some(keys) = self.label_keys.get(ns) else {
            return Vec::new();
        };
        let changed: HashSet<&String> = before.symmetric_difference(&now).collect();
        changed
            .into_iter()
            .filter_map(|key| keys.get(key))
            .flatten()
            .cloned()
            .collect()
    }
}
