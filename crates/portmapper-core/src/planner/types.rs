//! What the planner takes and what it returns.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use portmapper_api::{PortMapping, PortStatus};

use crate::compact_slice::CompactSlice;
use crate::events::EventReason;
use crate::network::{NetworkDecisions, NetworkLookup};
use crate::ownership::HeldName;
use crate::pod_record::PodRecord;
use crate::pool::SelectorError;

/// Everything the planner needs; all of it read by the caller from the API (or the prober).
#[derive(Clone, Copy, Debug)]
pub struct PlanInput<'a> {
    /// The PortMapping (needs metadata name, namespace and uid: they go into owner references).
    pub port_mapping: &'a PortMapping,
    /// The Service it names.
    pub service: &'a Service,
    /// Pods of the namespace; those outside the pool are ignored, so the caller may pass a
    /// superset (e.g. everything its index returned).
    pub pods: &'a [Arc<PodRecord>],
    /// Node name → `topology.kubernetes.io/zone`, for the nodes that have one.
    pub node_zones: &'a BTreeMap<String, String>,
    /// Nodes whose `Ready` condition is known and not True (`False`, `Unknown`), with its
    /// status: a pod gated on this PortMapping that runs on one is not ready (podReady), as the
    /// native controller keeps it (the node-lifecycle controller leaves a gated pod's
    /// `Ready=False` as the kubelet wrote it). The caller may pass only the nodes of the pool's
    /// gated pods; a node missing here (unknown, or not looked up) unpublishes nothing.
    pub unready_nodes: &'a BTreeMap<String, String>,
    /// Latest network check results.
    pub network: &'a NetworkDecisions,
    /// The slices this PortMapping may write ([`Ownership::claimable`]): its own, orphans of
    /// its Service, and those of `take_over`. Any other slice given here is treated as a name
    /// held by others: never touched.
    ///
    /// [`Ownership::claimable`]: crate::ownership::Ownership::claimable
    pub live_slices: &'a [Arc<CompactSlice>],
    /// UIDs of other PortMappings whose slices among `live_slices` this one takes over (they
    /// name the same Service and lose it to this one); any other controller is foreign.
    pub take_over: &'a [String],
    /// Slice names this plan may want (`<service>`, `<service>.*`, and `<cut>.*` for the cut
    /// of a long Service name port-set names start with: [`name_prefix`](super::naming::name_prefix)) that someone
    /// else holds,
    /// gathered by the caller before planning: a slice the plan would create at one of them is
    /// not created but reported in [`Plan::collisions`].
    pub held_by_others: &'a BTreeMap<String, HeldName>,
    /// The Endpoints object named after the Service, if one exists.
    pub live_endpoints: Option<&'a Endpoints>,
    /// Every Endpoints object this PortMapping controls: those named after another Service
    /// (its `serviceRef` moved) are deleted.
    pub owned_endpoints: &'a [Arc<Endpoints>],
    /// The native and mirroring controllers' slices labelled with the Service's name: the
    /// selector migration's evidence.
    pub native_slices: &'a [NativeSlice],
    /// The time of this reconcile: no `last-change-trigger-time` is later, and it stands for
    /// changes that carry no time of their own (legacy Endpoints are stamped with it).
    pub now: Timestamp,
    /// What the other PortMappings of the namespace do with publication gates
    /// ([`GatePeers::NONE`] when the caller knows of none).
    pub gate_peers: &'a GatePeers,
    /// Whether a pod of `pods` lists a readiness gate ([`any_gated`];
    /// the operator's index counts them as pods change): without one, the plan skips the gates'
    /// scans of the pool.
    pub gated: bool,
}

/// No network results (a first publication has none yet).
static NO_RESULTS: std::sync::LazyLock<NetworkDecisions> =
    std::sync::LazyLock::new(NetworkDecisions::new);

/// No node known unready.
static NO_NODES: BTreeMap<String, String> = BTreeMap::new();

/// No names held by others.
static NONE_HELD: BTreeMap<String, HeldName> = BTreeMap::new();

impl<'a> PlanInput<'a> {
    /// The input of a first publication of `port_mapping` for `service` from `pods`: nothing
    /// published yet, no node known unready, no network result, no name held by others, no other PortMapping's
    /// gates, no legacy Endpoints, at the Unix epoch. Callers change what differs with struct
    /// update syntax (`PlanInput { live_slices, ..PlanInput::first_publication(…) }`), so a new
    /// planner input is written here and where the operator gathers it.
    pub fn first_publication(
        port_mapping: &'a PortMapping,
        service: &'a Service,
        pods: &'a [Arc<PodRecord>],
        node_zones: &'a BTreeMap<String, String>,
    ) -> Self {
        Self {
            port_mapping,
            service,
            pods,
            node_zones,
            unready_nodes: &NO_NODES,
            network: &NO_RESULTS,
            live_slices: &[],
            take_over: &[],
            held_by_others: &NONE_HELD,
            live_endpoints: None,
            owned_endpoints: &[],
            native_slices: &[],
            now: Timestamp::UNIX_EPOCH,
            gate_peers: GatePeers::NONE,
            gated: any_gated(pods),
        }
    }
}

/// The publication gates of the other PortMappings of the namespace, as they bear on this one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GatePeers {
    /// Condition types other PortMappings set (not this one's): a gated pod's podReady does not
    /// wait for them, since each turns True only once that PortMapping has published the pod,
    /// which may itself wait for this one.
    pub types: std::collections::BTreeSet<String>,
    /// Pods (by name) whose condition of this PortMapping's type an older PortMapping selecting
    /// them sets, with that PortMapping's name: one writer per condition, so they never flap.
    pub managed_by: BTreeMap<String, String>,
}

impl GatePeers {
    /// No other PortMapping sets gates.
    pub const NONE: &'static GatePeers = &GatePeers {
        types: std::collections::BTreeSet::new(),
        managed_by: BTreeMap::new(),
    };
}

/// What to do with one desired object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteAction {
    /// It does not exist: create it.
    Create,
    /// It exists and differs: write it (with `resource_version` as an optimistic lock if wanted).
    Update {
        /// The stored object's resourceVersion.
        resource_version: Option<String>,
    },
    /// It exists and is semantically equal: no write at all.
    Unchanged,
}

impl PlannedSlice {
    /// The object as the API takes it (for tests and tools: a pass builds it for a write only,
    /// as the write is sent).
    pub fn full(&self) -> Arc<k8s_openapi::api::discovery::v1::EndpointSlice> {
        Arc::new(self.slice.to_endpoint_slice())
    }
}

impl WriteAction {
    /// Whether the object must be written.
    pub fn is_write(&self) -> bool {
        !matches!(self, Self::Unchanged)
    }
}

/// One desired EndpointSlice.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedSlice {
    /// The object to write (no server-populated fields); for an unchanged slice, the live
    /// object itself (shared, not rendered).
    pub slice: Arc<CompactSlice>,
    /// What to do with it.
    pub action: WriteAction,
    /// An update that takes away a ready or serving (address, port) the live slice publishes:
    /// it is written after the additive writes of its pass, so an endpoint moving between
    /// slices is in its new one before it leaves its old one ([`crate::writes`]). One that
    /// also gains endpoints gains them in that second round.
    pub withdraws: bool,
}

/// An object to delete, with the UID to use as a delete precondition.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Deletion {
    /// Name.
    pub name: String,
    /// UID of the object the planner saw (None if it had none).
    pub uid: Option<String>,
}

impl Deletion {
    /// The deletion of the object `meta` describes, with its UID as a precondition.
    pub fn of(meta: &ObjectMeta) -> Self {
        Self {
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone(),
        }
    }
}

/// The desired legacy Endpoints object.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedEndpoints {
    /// The full object to apply.
    pub endpoints: Endpoints,
    /// What to do with it.
    pub action: WriteAction,
}

/// Something the user should hear about; the plan is still safe to apply.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PlanWarning {
    /// ExternalName Services have no endpoints: everything is torn down.
    ExternalName,
    /// `topology-mode: Auto` is not implemented: no hints are published.
    TopologyModeAuto {
        /// The annotation requesting it.
        annotation: String,
    },
    /// A pod's address is one the API rejects for endpoints; the pod is left out.
    RejectedPodAddress {
        /// Pod name.
        pod: String,
        /// The address.
        ip: String,
        /// Why the API rejects it.
        reason: String,
    },
    /// The Endpoints object is controller-owned by something else; it is left alone.
    ForeignEndpoints,
    /// The legacy Endpoints object was cut at 1000 addresses.
    LegacyEndpointsTruncated {
        /// Addresses before truncation.
        total: usize,
    },
    /// `spec.ports[].name` entries that name no port of the Service: their checks apply to
    /// nothing (a typo, or a Service port renamed under the PortMapping), and the port they were
    /// meant for falls back to `defaultChecks` / `unlistedPorts`.
    UnknownPort {
        /// The unmatched entries' names, in spec order.
        entries: Vec<String>,
        /// The Service's port names (unnamed ports have none), in Service order.
        service_ports: Vec<String>,
    },
}

impl fmt::Display for PlanWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ExternalName => write!(
                f,
                "the Service is of type ExternalName, which has no endpoints; nothing is published"
            ),
            Self::TopologyModeAuto { annotation } => write!(
                f,
                "{annotation}: Auto is not supported by portmapper; no topology hints are published (use spec.trafficDistribution)"
            ),
            Self::RejectedPodAddress { pod, ip, reason } => {
                write!(
                    f,
                    "pod {pod} has address {ip}, which EndpointSlices cannot carry ({reason}); it is left out"
                )
            }
            Self::ForeignEndpoints => write!(
                f,
                "the Endpoints object of this Service is controlled by another owner; it is left alone"
            ),
            Self::UnknownPort {
                entries,
                service_ports,
            } => {
                let quoted = |names: &[String]| {
                    names
                        .iter()
                        .map(|n| format!("{n:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let ports = if service_ports.is_empty() {
                    "it has no named ports".to_owned()
                } else {
                    format!("its ports are {}", quoted(service_ports))
                };
                write!(
                    f,
                    "spec.ports names {} but the Service has no such port ({ports}); those checks apply to nothing and unlisted ports use spec.defaultChecks / spec.unlistedPorts",
                    quoted(entries)
                )
            }
            Self::LegacyEndpointsTruncated { total } => {
                write!(
                    f,
                    "the legacy Endpoints object holds at most 1000 addresses; {total} were cut to 1000"
                )
            }
        }
    }
}

/// The planner's answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Every slice that must exist, sorted by name, each with its action.
    pub slices: Vec<PlannedSlice>,
    /// Owned slices that must go.
    pub deletions: Vec<Deletion>,
    /// The legacy Endpoints object, when `legacyEndpoints` is on and it is ours to write.
    pub endpoints: Option<PlannedEndpoints>,
    /// An owned legacy Endpoints object that must go (`legacyEndpoints` off, or teardown).
    pub endpoints_deletion: Option<Deletion>,
    /// Status per Service port.
    pub ports: Vec<PortStatus>,
    /// `http 3/4, https 2/4` (ready/candidates).
    pub summary: String,
    /// Things to tell the user.
    pub warnings: Vec<PlanWarning>,
    /// Slices the plan would create at names someone else holds, sorted by name: not created
    /// (never overwrite another owner's object); the PortMapping reports `NameCollision`.
    pub collisions: Vec<NameCollision>,
    /// How every (pod, port, family) membership was decided, for metrics.
    pub decisions: DecisionCounts,
    /// Publication gate conditions to write (pods listing the PortMapping's gate type in
    /// `spec.readinessGates` whose current condition differs), in pool order. Written after the
    /// slices of the same plan.
    pub pod_gates: Vec<PodGate>,
    /// Gated pods whose gate times out with `pod_gates` (a Warning Event each).
    pub gate_timeouts: Vec<GateTimeout>,
    /// The earliest moment a gate this plan still holds False times out: the PortMapping must
    /// be reconciled again then (no periodic pass would notice).
    pub gate_deadline: Option<Timestamp>,
    /// The network check results this plan depends on, with what the prober needs to probe
    /// them: the operator's prober targets. In (Service port, family, pod, position) order.
    pub network_lookups: Vec<NetworkLookup>,
    /// The legacy Endpoints and selector-migration steps ([`migration::steps`]), in order,
    /// run after the slices are written.
    ///
    /// [`migration::steps`]: super::migration::steps
    pub migration: Vec<Step>,
}

/// A slice the plan wants at a name another owner holds.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct NameCollision {
    /// The slice name.
    pub name: String,
    /// Who holds it.
    pub held: HeldName,
}

impl fmt::Display for NameCollision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "EndpointSlice {} already exists ({})",
            self.name, self.held
        )
    }
}

/// The publication gate condition (`spec.readinessGate.conditionType`, by default
/// `portmapper.dev/published`) one gated pod must carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodGate {
    /// Pod name (in the PortMapping's namespace).
    pub pod: String,
    /// The condition type.
    pub condition_type: String,
    /// Pod UID: the write must not land on a newer pod of the same name.
    pub uid: String,
    /// True: published on every port it is meant to serve.
    pub status: bool,
    /// `Published`, `NotPublished`, `NoAddress`, `Released`, `TimedOut`, or a stalled
    /// PortMapping's Ready reason.
    pub reason: &'static str,
    /// Which ports leave it out and why, or where it is published.
    pub message: String,
    /// Kept from the current condition unless the status flips (then the plan's time).
    pub last_transition_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// The pod's `metadata.generation` the condition was decided for.
    pub observed_generation: Option<i64>,
}

impl PodGate {
    /// Whether the write must wait until the plan's slice writes are stored: a True condition
    /// that says the pod is published. A False one, or a release or timeout (which claim no
    /// publication), never waits.
    pub fn waits_for_slices(&self) -> bool {
        self.status && self.reason == REASON_PUBLISHED
    }
}

/// Membership decisions of one plan, by outcome (before Abstain falls back to the live state).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecisionCounts {
    /// Decisions that included the pod.
    pub include: u64,
    /// Decisions that excluded the pod.
    pub exclude: u64,
    /// Decisions that abstained (a check could not tell).
    pub abstain: u64,
}

impl Plan {
    /// Takes a pass's gate changes into the plan.
    pub fn set_gates(&mut self, changes: GateChanges) {
        self.pod_gates = changes.gates;
        self.gate_timeouts = changes.timeouts;
        self.gate_deadline = changes.deadline;
    }

    /// Number of slice, Endpoints and gate writes in the plan's own lists (creates, updates,
    /// deletes), whether or not the executor sends them: a deletion without a UID is not sent,
    /// and the Endpoints writes sent are the migration steps'. What a pass sends is
    /// [`Phases::count`](crate::writes::Phases::count).
    pub fn writes(&self) -> usize {
        self.slices.iter().filter(|s| s.action.is_write()).count()
            + self.deletions.len()
            + usize::from(self.endpoints.as_ref().is_some_and(|e| e.action.is_write()))
            + usize::from(self.endpoints_deletion.is_some())
            + self.pod_gates.len()
    }
}

/// Why no plan could be made. Nothing must be written then.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The PortMapping lacks metadata the owner references need.
    #[error("the PortMapping has no {0}; it cannot own EndpointSlices")]
    MissingMetadata(&'static str),
    /// The Service passed in is not the one the PortMapping names.
    #[error("the PortMapping names Service {expected:?} but the planner was given {got:?}")]
    ServiceMismatch {
        /// `spec.serviceRef.name`.
        expected: String,
        /// The Service's name.
        got: String,
    },
    /// `spec.pods.selector` is not a valid selector.
    #[error(transparent)]
    Selector(#[from] SelectorError),
    /// The planner rendered an object the API would reject (a bug: nothing is written).
    #[error("rendered {kind} {name:?} would be rejected by the API: {message}")]
    InvalidRender {
        /// Kind.
        kind: &'static str,
        /// Name.
        name: String,
        /// The apiserver's message.
        message: String,
    },
}

impl PlanWarning {
    /// The reason of the Warning Event that reports this warning.
    pub fn event_reason(&self) -> EventReason {
        match self {
            Self::ExternalName => EventReason::ExternalNameUnsupported,
            Self::TopologyModeAuto { .. } => EventReason::TopologyAwareHintsDisabled,
            Self::RejectedPodAddress { .. } => EventReason::PodAddressRejected,
            Self::ForeignEndpoints => EventReason::EndpointsCollision,
            Self::LegacyEndpointsTruncated { .. } => EventReason::LegacyEndpointsTruncated,
            Self::UnknownPort { .. } => EventReason::UnknownPort,
        }
    }
}

/// What we know of a native controller's slice (metadata only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativeSlice {
    pub name: String,
    pub uid: String,
    pub manager: String,
}

/// One thing to do, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Apply our Endpoints (create or update).
    ApplyEndpoints(Endpoints),
    /// Take over an abandoned Endpoints object: strip inherited annotations with an optimistic
    /// lock on `resource_version`, then apply ours.
    AdoptEndpoints {
        endpoints: Endpoints,
        strip_annotations: Vec<String>,
        resource_version: Option<String>,
    },
    /// Delete an Endpoints object (UID precondition).
    DeleteEndpoints {
        name: String,
        uid: String,
        native: bool,
    },
    /// Delete a native or mirror slice (UID precondition). Not run once the native Endpoints
    /// delete of the same pass failed: the native slices are the evidence that brings the next
    /// pass back to that object.
    DeleteNativeSlice { name: String, uid: String },
    /// Say something, once per occurrence.
    Warn { reason: EventReason, note: String },
    /// Report a normal transition.
    Normal { reason: EventReason, note: String },
}

/// Reason of the True condition.
pub const REASON_PUBLISHED: &str = "Published";
/// Reason of the False condition when a port the pod is meant to serve leaves it out.
pub const REASON_NOT_PUBLISHED: &str = "NotPublished";
/// Reason of the False condition while the pod has no IP address.
pub const REASON_NO_ADDRESS: &str = "NoAddress";
/// Reason of the True condition of a pod no PortMapping gates any more: its PortMapping is
/// being deleted, or the pod left the pool.
pub const REASON_RELEASED: &str = "Released";
/// Reason of the True condition of a pod not published within `readinessGate.timeoutSeconds`
/// of its containers becoming ready.
pub const REASON_TIMED_OUT: &str = "TimedOut";

/// A gated pod whose gate timed out in this pass: the Warning Event names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateTimeout {
    /// The pod's name.
    pub pod: String,
    /// The pod's UID: one Warning per pod.
    pub uid: String,
    /// What leaves it out: the ports (`port https`), or why nothing is published.
    pub not_published: String,
    /// `spec.readinessGate.timeoutSeconds`.
    pub timeout_seconds: i32,
}

impl std::fmt::Display for GateTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pod {} is not published ({}) {}s after its containers became ready: its publication \
             gate is True (TimedOut) and no longer waits",
            self.pod, self.not_published, self.timeout_seconds
        )
    }
}

/// The gate changes of one pass, with what the timeout asks of the caller.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GateChanges {
    /// The conditions to write, in pool order.
    pub gates: Vec<PodGate>,
    /// Pods whose gate times out with this pass's writes (a Warning each).
    pub timeouts: Vec<GateTimeout>,
    /// The earliest moment a gate still held will time out: reconcile again then.
    pub deadline: Option<Timestamp>,
}

/// Whether a pod of `pods` lists any readiness gate ([`PlanInput::gated`] for a caller that
/// does not count them as pods change).
pub fn any_gated(pods: &[Arc<PodRecord>]) -> bool {
    pods.iter().any(|p| !p.readiness_gates.is_empty())
}
