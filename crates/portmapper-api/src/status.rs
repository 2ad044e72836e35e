//! `PortMapping.status`: what was published, per port, and why pods were left out.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Condition types the operator sets.
pub mod condition_types {
    /// Every port is published as desired.
    pub const READY: &str = "Ready";
    /// Work is pending (e.g. probes have not reported yet, or writes are being retried).
    pub const RECONCILING: &str = "Reconciling";
    /// The PortMapping cannot be served until someone changes something.
    pub const STALLED: &str = "Stalled";
    /// Another PortMapping already publishes this Service.
    pub const CONFLICT: &str = "Conflict";
    /// The Service still has a selector: native slices are published beside ours.
    pub const SELECTOR_MIGRATION: &str = "SelectorMigration";
    /// A consumer of the slices is known to ignore per-port membership here (reason
    /// `IstioAmbient`: published pods are enrolled in Istio ambient and the ports have
    /// different members; `LocalTrafficPolicy`: with `externalTrafficPolicy: Local`, nodes pass
    /// the load balancer's health check without members of some ports); present only while it
    /// holds. See docs/consumers.md.
    pub const CONSUMER_CAVEAT: &str = "ConsumerCaveat";
    /// A `spec.ports[].name` names no port of the Service (its checks apply to nothing; the
    /// other ports still publish).
    pub const PORT_NOT_FOUND: &str = "PortNotFound";
}

/// Most excluded pods listed per port; the counts stay exact beyond it.
pub const MAX_EXCLUDED_LISTED: usize = 20;

/// Observed state of a PortMapping.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
// A new PortMapping is stored with `observedGeneration: 0`, so kstatus (what Flux waits with)
// reads it as InProgress until the operator's first status: without a status it would be
// Current, and a `wait` would pass before anything was published.
#[schemars(extend("default" = {"observedGeneration": 0}))]
pub struct PortMappingStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Standard conditions: Ready, Reconciling, Stalled, Conflict, SelectorMigration,
    /// ConsumerCaveat, PortNotFound.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// One entry per Service port.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<PortStatus>,
    /// Ready endpoints per port, e.g. `http 3/4, https 2/4` (ready/candidates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Number of EndpointSlices this PortMapping publishes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_slices: Option<i32>,
}

/// Published membership of one Service port, across address families.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PortStatus {
    /// Service port name (empty for a single unnamed port).
    #[serde(default)]
    pub name: String,
    /// Service port number.
    pub port: i32,
    /// Pods published ready on this port.
    pub ready: i32,
    /// Pods published not ready (draining, or not ready under publishNotReadyAddresses=false).
    pub not_ready: i32,
    /// Pool pods considered for this port (routable and resolving its target port).
    pub candidates: i32,
    /// Why candidates were left out (at most 20 listed; `excludedTotal` counts all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excluded: Vec<ExcludedPod>,
    /// Number of candidates left out.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub excluded_total: i32,
    /// Published pods whose checks could not tell (abstained, e.g. no probe result), kept on
    /// the port because they were already published; with the reason (at most 20 listed;
    /// `keptTotal` counts all). They are counted in `ready`/`notReady` too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<ExcludedPod>,
    /// Number of published pods kept by an abstention.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub kept_total: i32,
}

/// One pod left out of a port (or kept on it by an abstention), with the reason.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExcludedPod {
    /// Pod name.
    pub pod: String,
    /// Human-readable reason, naming the check that excluded it.
    pub reason: String,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}
