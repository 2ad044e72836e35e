//! Nodes: their zones and readiness, and the PortMappings of the pods on them.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use portmapper_core::PodRecord;

use super::{Index, PmKey, missing};

/// The label carrying a node's zone.
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

impl Index {
    /// A node was added or changed: when its zone changed, the PortMappings of the pods on it;
    /// when only its readiness did, those of the gated pods on it (podReady of a gated pod
    /// reads it; any other pod's `Ready` moves with the node by itself).
    pub fn apply_node(&mut self, node: &Node) -> Vec<PmKey> {
        let name = node.name_any();
        let zone = node.labels().get(LABEL_ZONE).cloned();
        let unready = unready_status(node);
        let ready_changed = self.unready.get(&name) != unready.as_ref();
        match unready {
            Some(status) => self.unready.insert(name.clone(), status),
            None => self.unready.remove(&name),
        };
        if self.zones.get(&name) != Some(&zone) {
            self.zones.insert(name.clone(), zone);
            return self.node_pms(&name, false);
        }
        if ready_changed {
            return self.node_pms(&name, true);
        }
        Vec::new()
    }

    /// A node is gone: it is no longer known unready (a node we cannot see unpublishes nothing).
    pub fn delete_node(&mut self, node: &str) -> Vec<PmKey> {
        let was_unready = self.unready.remove(node).is_some();
        match self.zones.remove(node) {
            Some(Some(_)) => self.node_pms(node, false),
            _ if was_unready => self.node_pms(node, true),
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

    /// The nodes `pods` run on that are known not Ready, with their `Ready` status: what
    /// podReady of a gated pod reads. Without an unready node (the common case) nothing is
    /// read; otherwise only the gated pods (a pod without `gate` never reads it).
    pub fn unready_nodes_of(&self, pods: &[&PodRecord], gate: &str) -> BTreeMap<String, String> {
        if self.unready.is_empty() {
            return BTreeMap::new();
        }
        pods.iter()
            .filter(|p| p.has_gate(gate))
            .filter_map(|p| p.node_name.as_deref())
            .filter_map(|n| Some((n.to_owned(), self.unready.get(n)?.clone())))
            .collect()
    }

    /// The PortMappings of the pods on `node`; with `gated_only`, of those that list a
    /// readiness gate.
    pub(super) fn node_pms(&self, node: &str, gated_only: bool) -> Vec<PmKey> {
        let mut out = HashSet::new();
        for (pool, counts) in self.pools_by_node.get(node).into_iter().flatten() {
            if !gated_only || counts.gated > 0 {
                out.extend(self.pms_by_pool.get(&**pool).into_iter().flatten().cloned());
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

/// The status of a node's `Ready` condition when it is known and not True (`False`,
/// `Unknown`). A node without one (just registered) is not known unready.
pub fn unready_status(node: &Node) -> Option<String> {
    let ready = node
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    (ready.status != "True").then(|| ready.status.clone())
}
