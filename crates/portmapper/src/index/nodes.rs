//! Nodes: their zones, and the PortMappings of the pods on them.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::PartialObjectMeta;
use portmapper_core::PodRecord;

use super::{Index, PmKey, missing};

/// The label carrying a node's zone.
pub(super) const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

impl Index {
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

    pub(super) fn node_pms(&self, node: &str) -> Vec<PmKey> {
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

    /// Zones of the nodes `pods` run on (at least: when the pods outnumber the nodes, every
    /// node's, for one lookup per node rather than one hash and one copy per pod: a large pool
    /// runs on far fewer nodes than it has pods).
    pub fn zones_of(&self, pods: &[&PodRecord]) -> std::collections::BTreeMap<String, String> {
        if pods.len() > self.zones.len() {
            return self
                .zones
                .iter()
                .filter_map(|(node, zone)| Some((node.clone(), zone.clone()?)))
                .collect();
        }
        pods.iter()
            .filter_map(|p| p.node_name.as_deref())
            .filter_map(|n| Some((n.to_owned(), self.zone(n)?.to_owned())))
            .collect()
    }
}
