//! What every phase of one plan reads ([`PlanContext`]), the members the legacy Endpoints
//! rendering keeps ([`Member`]), and how a PortMapping sets its gates ([`GateSettings`]): the
//! types the planner's phases share, apart from the orchestration in `mod.rs`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::Endpoint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube_validation::IpFamily;
use portmapper_api::{PortMapping, PortMappingSpec};

use super::objects::HintMode;
use super::ports::PortView;
use super::types::GatePeers;
use crate::network::NetworkDecisions;
use crate::pod_record::PodRecord;

/// A published (pod, port, family) member, kept for the legacy Endpoints rendering.
pub(crate) struct Member {
    pub pod: usize,
    pub port: usize,
    pub target: Option<i32>,
    pub ready: bool,
    pub endpoint: Endpoint,
}

/// What every phase of one plan reads.
pub(crate) struct PlanContext<'a> {
    pub spec: &'a PortMappingSpec,
    pub service: &'a Service,
    pub svc_name: &'a str,
    pub namespace: &'a str,
    pub owner: &'a OwnerReference,
    /// Pool pods, in input order.
    pub pods: &'a [&'a PodRecord],
    /// Primary first.
    pub families: &'a [IpFamily],
    pub ports: &'a [PortView<'a>],
    pub network: &'a NetworkDecisions,
    pub node_zones: &'a BTreeMap<String, String>,
    /// `PlanInput::unready_nodes`.
    pub unready_nodes: &'a BTreeMap<String, String>,
    /// `publishNotReadyAddresses` in force.
    pub pnr: bool,
    pub hints: HintMode,
    /// `PlanInput::now`: trigger times are never later.
    pub now: k8s_openapi::jiff::Timestamp,
    /// `spec.readinessGate.conditionType`.
    pub gate_type: &'a str,
    pub gate_peers: &'a GatePeers,
    /// How the gates are set (type, timeout, deletion, peers, now).
    pub gate: GateSettings<'a>,
}

impl PlanContext<'_> {
    /// The gate types podReady must not wait for, and the nodes it reads.
    pub fn gates(&self) -> crate::check::GateTypes<'_> {
        crate::check::GateTypes {
            own: self.gate_type,
            peers: &self.gate_peers.types,
            unready_nodes: self.unready_nodes,
        }
    }
}

/// How one PortMapping sets its gates.
#[derive(Clone, Copy, Debug)]
pub struct GateSettings<'a> {
    /// `spec.readinessGate.conditionType`.
    pub gate_type: &'a str,
    /// `spec.readinessGate.timeoutSeconds`.
    pub timeout_seconds: Option<i32>,
    /// The PortMapping's name, for messages.
    pub portmapping: &'a str,
    /// The PortMapping is being deleted: its gates are released.
    pub deleting: bool,
    /// What the other PortMappings of the namespace do with gates.
    pub peers: &'a GatePeers,
    /// The time of this pass.
    pub now: Timestamp,
}

impl<'a> GateSettings<'a> {
    /// The settings of `pm` at `now`.
    pub fn of(pm: &'a PortMapping, peers: &'a GatePeers, now: Timestamp) -> Self {
        Self {
            gate_type: pm.spec.gate_condition_type(),
            timeout_seconds: pm.spec.gate_timeout_seconds(),
            portmapping: pm.metadata.name.as_deref().unwrap_or_default(),
            deleting: pm.metadata.deletion_timestamp.is_some(),
            peers,
            now,
        }
    }
}
