//! `PortMapping.spec`: which Service, which pods, and which rules decide per-port membership.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::check::Check;
use crate::fields::{
    DNS1123_LABEL_PATTERN, KeySource, QUALIFIED_NAME_MAX_LENGTH, QUALIFIED_NAME_PATTERN,
    QUALIFIED_NAME_PREFIX_MESSAGE, QUALIFIED_NAME_PREFIX_RULE,
};
use crate::status::PortMappingStatus;

/// Maps the pods of one pool onto the ports of one selector-less Service, port by port.
// Several printer columns share `type_ = "string"`, which clippy mistakes for a repeated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "portmapper.dev",
    version = "v1alpha1",
    kind = "PortMapping",
    plural = "portmappings",
    singular = "portmapping",
    namespaced,
    status = "PortMappingStatus",
    shortname = "pm",
    category = "portmapper",
    derive = "PartialEq",
    // `kubectl get pm --field-selector spec.serviceRef.name=web` finds a Service's PortMapping on
    // the server (selectableFields, GA since 1.32).
    selectable = ".spec.serviceRef.name",
    selectable = ".spec.pods.key",
    doc = "PortMapping publishes the EndpointSlices of one selector-less Service, choosing per Service port which pods of a pool back it.",
    cel,
    printcolumn(
        name = "Service",
        type_ = "string",
        json_path = ".spec.serviceRef.name",
        description = "The Service whose EndpointSlices this PortMapping publishes"
    ),
    printcolumn(
        name = "Ports",
        type_ = "string",
        json_path = ".status.summary",
        description = "Ready endpoints per port: name ready/candidates"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Whether every port is published as desired"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(check_timeouts_rule())
    .message("a check's timeoutSeconds must not exceed probe.periodSeconds"))]
#[x_kube(validation = kube::core::Rule::new(ports_network_checks_rule())
    .message(PORTS_NETWORK_CHECKS_MESSAGE))]
#[x_kube(validation = kube::core::Rule::new(per_port_slice_floor_rule())
    .message(PER_PORT_SLICE_FLOOR_MESSAGE))]
pub struct PortMappingSpec {
    /// The Service (in this namespace) whose EndpointSlices are published. It must have no
    /// `spec.selector`; while it still has one, slices are published beside the native ones and a
    /// condition says so.
    pub service_ref: ServiceRef,

    /// The pod pool: pods in this namespace whose label or annotation `key` equals `value`.
    pub pods: PodPool,

    /// Per-port rules, keyed by Service port name. Service ports without an entry use
    /// `defaultChecks` (or publish nothing, see `unlistedPorts`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["name".into()]))]
    pub ports: Vec<PortRule>,

    /// Checks for Service ports that have no entry in `ports`. Absent: `[podReady: {}]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = kube::core::Rule::new(port_network_checks_rule()).message(PORT_NETWORK_CHECKS_MESSAGE))]
    pub default_checks: Option<Vec<Check>>,

    /// What Service ports without an entry in `ports` publish: `UseDefaultChecks` (default) or
    /// `PublishNothing` (an empty slice: no endpoint backs them).
    #[serde(default)]
    pub unlisted_ports: UnlistedPorts,

    /// Overrides the Service's own `spec.publishNotReadyAddresses`. When true, every pod that
    /// passes the backing checks (`portNames`, `podCondition`) is published ready, whatever the
    /// health checks (`podReady`, `containerReady`, network checks) say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish_not_ready_addresses: Option<bool>,

    /// Terminating pods that still pass the checks: `Drain` (default) publishes them
    /// ready=false, serving=true, terminating=true, as the native controller does; `Drop`
    /// removes them at once.
    #[serde(default)]
    pub terminating_endpoints: TerminatingEndpoints,

    /// Maximum endpoints in one EndpointSlice (1..1000). Default 100, like kube-controller-manager.
    #[serde(default = "default_max_endpoints_per_slice")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_endpoints_per_slice: i32,

    /// How endpoints are grouped into EndpointSlices. `PerPortSet` (default), as the native
    /// controller does: pods that are members of the same set of ports share slices listing
    /// all those ports, so a pod's Ready flip rewrites one slice per IP family. `PerPort`: one
    /// slice set per Service port, each slice listing one port (named `<service>.<port>`), for
    /// readers that look a port's slices up by name; a flip rewrites one slice per port.
    /// Switching is live: the new slices are written before the old ones are deleted.
    #[serde(default)]
    pub slice_grouping: SliceGrouping,

    /// Also publish a core/v1 Endpoints object named after the Service (deprecated API; for
    /// consumers that still read it). Off by default.
    #[serde(default)]
    pub legacy_endpoints: bool,

    /// After the Service's selector is removed, delete the native controllers' leftover
    /// EndpointSlices and Endpoints once this PortMapping publishes at least one endpoint.
    #[serde(default = "default_true")]
    pub native_cleanup: bool,

    /// Timing of network checks (`httpGet`, `tcpSocket`, `grpc`, `webhook`).
    #[serde(default)]
    pub probe: ProbeSettings,

    /// The publication readiness gate this PortMapping sets on the pool pods that list its
    /// condition type in `spec.readinessGates`: True once the pod is published on every port it
    /// is meant to serve. Absent: condition type `portmapper.dev/published`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_gate: Option<ReadinessGate>,
}

/// The condition type a PortMapping's publication gate uses when `spec.readinessGate` is absent.
pub const DEFAULT_GATE_CONDITION_TYPE: &str = "portmapper.dev/published";

/// `spec.readinessGate`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadinessGate {
    /// Pod condition type to set, as pods list it in `spec.readinessGates[].conditionType`.
    /// Default `portmapper.dev/published`. It must have a prefix (`example.com/published`): the
    /// unprefixed types (`Ready`, `ContainersReady`, …) are kubelet's. Two PortMappings selecting
    /// the same pod with different types each set their own; with the same type, the oldest one
    /// sets it ([operator](operator.md#publication-readiness-gate)).
    #[serde(default = "default_gate_condition_type")]
    #[schemars(length(min = 1, max = QUALIFIED_NAME_MAX_LENGTH), regex(pattern = QUALIFIED_NAME_PATTERN))]
    #[x_kube(
        validation = kube::core::Rule::new(QUALIFIED_NAME_PREFIX_RULE).message(QUALIFIED_NAME_PREFIX_MESSAGE),
        validation = kube::core::Rule::new(GATE_PREFIX_RULE).message(GATE_PREFIX_MESSAGE)
    )]
    pub condition_type: String,
    /// Seconds a gated pod whose containers are ready may wait for publication: past them the
    /// condition turns True with reason `TimedOut` (and a Warning Event names the pod and the
    /// ports that leave it out), so a port that never publishes cannot halt a rollout for good.
    /// Counted from the pod's `ContainersReady` transition to True. Absent: no timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = GATE_TIMEOUT_MAX_SECONDS))]
    pub timeout_seconds: Option<i32>,
}

/// Upper bound of `spec.readinessGate.timeoutSeconds` (one day).
pub const GATE_TIMEOUT_MAX_SECONDS: i32 = 86_400;

impl Default for ReadinessGate {
    fn default() -> Self {
        Self {
            condition_type: default_gate_condition_type(),
            timeout_seconds: None,
        }
    }
}

/// CEL rule: a gate's condition type has a prefix, so it can never be one of kubelet's own.
pub const GATE_PREFIX_RULE: &str = "self.contains('/')";
/// Message of [`GATE_PREFIX_RULE`].
pub const GATE_PREFIX_MESSAGE: &str = "must have a prefix (example.com/published): unprefixed condition types such as Ready belong to kubelet";

fn default_gate_condition_type() -> String {
    DEFAULT_GATE_CONDITION_TYPE.to_owned()
}

/// Reference to a Service in the PortMapping's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
pub struct ServiceRef {
    /// Name of the Service.
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS1123_LABEL_PATTERN))]
    pub name: String,
}

/// The pod pool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(
    "self.from != 'Label' || !has(self.value) || self.value.matches('^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$') && size(self.value) <= 63"
).message("pods.value must be a valid label value (at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric) when pods.from is Label"))]
pub struct PodPool {
    /// Label or annotation key whose value puts a pod in the pool, e.g. `example.com/group`.
    #[schemars(length(min = 1, max = QUALIFIED_NAME_MAX_LENGTH), regex(pattern = QUALIFIED_NAME_PATTERN))]
    #[x_kube(validation = kube::core::Rule::new(QUALIFIED_NAME_PREFIX_RULE).message(QUALIFIED_NAME_PREFIX_MESSAGE))]
    pub key: String,
    /// `Label` (default) or `Annotation`.
    #[serde(default)]
    pub from: KeySource,
    /// Value `key` must have. Default: `serviceRef.name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub value: Option<String>,
    /// Optional extra label selector; a pod must match it as well.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::selector::SelectorSchema>")]
    pub selector: Option<LabelSelector>,
}

/// Membership rules for one Service port.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
pub struct PortRule {
    /// Name of the Service port (`spec.ports[].name`).
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS1123_LABEL_PATTERN))]
    pub name: String,
    /// A pod backs this port when every check includes it. Empty: every pool pod that resolves
    /// the target port backs it.
    #[serde(default)]
    #[schemars(length(max = 16))]
    #[x_kube(validation = kube::core::Rule::new(port_network_checks_rule()).message(PORT_NETWORK_CHECKS_MESSAGE))]
    pub checks: Vec<Check>,
}

/// What Service ports without an entry in `spec.ports` publish.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum UnlistedPorts {
    /// Evaluate `defaultChecks`.
    #[default]
    UseDefaultChecks,
    /// Publish an empty slice: no pod backs the port.
    PublishNothing,
}

/// `spec.sliceGrouping`: the shape of the published EndpointSlices.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum SliceGrouping {
    /// One slice set per set of ports: a pod's key is the set of (port, resolved number,
    /// protocol) it is a member of, and pods with the same key share slices that list those
    /// ports (the native controller's shape).
    #[default]
    PerPortSet,
    /// One slice set per Service port: every slice lists exactly one port.
    PerPort,
}

/// What happens to terminating pods that still pass the checks.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum TerminatingEndpoints {
    /// Keep them published as ready=false, serving=true, terminating=true until they go.
    #[default]
    Drain,
    /// Remove them as soon as they start terminating.
    Drop,
}

/// Timing of network checks, with kubelet's probe semantics.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(probe_timeout_rule())
    .message("timeoutSeconds must not exceed periodSeconds")
    .field_path(".timeoutSeconds"))]
pub struct ProbeSettings {
    /// Seconds between two probes of one target. Default 10.
    #[serde(default = "default_period")]
    #[schemars(range(min = 1, max = 3600))]
    pub period_seconds: i32,
    /// Seconds before a probe times out. Default 1.
    #[serde(default = "default_timeout")]
    #[schemars(range(min = 1, max = 60))]
    pub timeout_seconds: i32,
    /// Consecutive successes before an excluded target is included. Default 1.
    #[serde(default = "default_success")]
    #[schemars(range(min = 1, max = 100))]
    pub success_threshold: i32,
    /// Consecutive failures before an included target is excluded. Default 3.
    #[serde(default = "default_failure")]
    #[schemars(range(min = 1, max = 100))]
    pub failure_threshold: i32,
}

impl Default for ProbeSettings {
    fn default() -> Self {
        Self {
            period_seconds: default_period(),
            timeout_seconds: default_timeout(),
            success_threshold: default_success(),
            failure_threshold: default_failure(),
        }
    }
}

fn default_max_endpoints_per_slice() -> i32 {
    100
}
fn default_true() -> bool {
    true
}
fn default_period() -> i32 {
    10
}
fn default_timeout() -> i32 {
    1
}
fn default_success() -> i32 {
    1
}
fn default_failure() -> i32 {
    3
}

/// `probe.timeoutSeconds <= probe.periodSeconds`, with the defaults spelled out: the apiserver
/// defaults before it validates, but client-side validators (and rules evaluated on objects
/// stored before a default existed) may see either side omitted.
fn probe_timeout_rule() -> String {
    format!(
        "(has(self.timeoutSeconds) ? self.timeoutSeconds : {}) <= (has(self.periodSeconds) ? self.periodSeconds : {})",
        default_timeout(),
        default_period()
    )
}

/// Every network check's own `timeoutSeconds` is at most `spec.probe.periodSeconds`. A rule
/// on the spec, the nearest node that sees both; `[…].all(period, …)` binds the (defaulted)
/// period once without `cel.bind`, which older apiservers lack. Its cost is bounded by
/// `ports` ≤ 100 × `checks` ≤ 16 × `anyOf` ≤ 16.
fn check_timeouts_rule() -> String {
    let leaf = |v: &str| {
        ["httpGet", "tcpSocket", "grpc", "webhook"]
            .map(|k| {
                format!(
                    "(!has({v}.{k}) || !has({v}.{k}.timeoutSeconds) || {v}.{k}.timeoutSeconds <= period)"
                )
            })
            .join(" && ")
    };
    let check = format!(
        "{} && (!has(c.anyOf) || c.anyOf.all(l, {}))",
        leaf("c"),
        leaf("l")
    );
    format!(
        "[has(self.probe) && has(self.probe.periodSeconds) ? self.probe.periodSeconds : {period}].all(period, \
         (!has(self.ports) || self.ports.all(p, !has(p.checks) || p.checks.all(c, {check}))) && \
         (!has(self.defaultChecks) || self.defaultChecks.all(c, {check})))",
        period = default_period()
    )
}

/// Network checks one port's rules may hold, each `anyOf` entry counted: every one is probed
/// per pool pod and family, so this bounds a port's probe fan-out (the operator bounds the
/// rest: `crates/portmapper-core/src/budget.rs`).
pub const MAX_NETWORK_CHECKS_PER_PORT: usize = 16;
/// Network checks `spec.ports` may hold together, each `anyOf` entry counted.
pub const MAX_NETWORK_CHECKS_IN_PORTS: usize = 64;
/// The least `maxEndpointsPerSlice` under `sliceGrouping: PerPort`, where each Service port
/// has slices of its own: with 1, a flip of one pod would rewrite one slice per port.
pub const PER_PORT_MIN_ENDPOINTS_PER_SLICE: i32 = 10;

pub(crate) const PORT_NETWORK_CHECKS_MESSAGE: &str = "at most 16 network checks (httpGet, tcpSocket, grpc, webhook) per port, each anyOf entry counted";
pub(crate) const PORTS_NETWORK_CHECKS_MESSAGE: &str = "at most 64 network checks (httpGet, tcpSocket, grpc, webhook) over spec.ports, each anyOf entry counted";
pub(crate) const PER_PORT_SLICE_FLOOR_MESSAGE: &str =
    "maxEndpointsPerSlice must be at least 10 with sliceGrouping PerPort";

/// CEL: whether `v` (a check or an `anyOf` entry) sets a network kind.
fn is_network_cel(v: &str) -> String {
    ["httpGet", "tcpSocket", "grpc", "webhook"]
        .map(|k| format!("has({v}.{k})"))
        .join(" || ")
}

/// CEL: the network checks of the check list `list`, each `anyOf` entry counted.
fn network_checks_cel(list: &str) -> String {
    format!(
        "{list}.map(c, has(c.anyOf) ? c.anyOf.filter(l, {}).size() : ({} ? 1 : 0)).sum()",
        is_network_cel("l"),
        is_network_cel("c")
    )
}

/// A port's checks (or `defaultChecks`) hold at most [`MAX_NETWORK_CHECKS_PER_PORT`] network
/// checks. Cost: `checks` ≤ 16 × `anyOf` ≤ 16.
fn port_network_checks_rule() -> String {
    format!(
        "{} <= {MAX_NETWORK_CHECKS_PER_PORT}",
        network_checks_cel("self")
    )
}

/// `spec.ports` holds at most [`MAX_NETWORK_CHECKS_IN_PORTS`] network checks. Cost: `ports`
/// ≤ 100 × `checks` ≤ 16 × `anyOf` ≤ 16, as the timeout rule.
fn ports_network_checks_rule() -> String {
    format!(
        "!has(self.ports) || self.ports.map(p, has(p.checks) ? {} : 0).sum() <= {MAX_NETWORK_CHECKS_IN_PORTS}",
        network_checks_cel("p.checks")
    )
}

/// `maxEndpointsPerSlice` ≥ [`PER_PORT_MIN_ENDPOINTS_PER_SLICE`] under `PerPort` (defaults
/// spelled out, as in the timeout rules).
fn per_port_slice_floor_rule() -> String {
    format!(
        "!has(self.sliceGrouping) || self.sliceGrouping != 'PerPort' || \
         (has(self.maxEndpointsPerSlice) ? self.maxEndpointsPerSlice : {}) >= {PER_PORT_MIN_ENDPOINTS_PER_SLICE}",
        default_max_endpoints_per_slice()
    )
}

impl PortMappingSpec {
    /// The value a pod's key must have: `pods.value`, else the Service name.
    pub fn pool_value(&self) -> &str {
        self.pods.value.as_deref().unwrap_or(&self.service_ref.name)
    }

    /// The pod condition type of the publication gate (`spec.readinessGate.conditionType`).
    pub fn gate_condition_type(&self) -> &str {
        self.readiness_gate
            .as_ref()
            .map_or(DEFAULT_GATE_CONDITION_TYPE, |g| g.condition_type.as_str())
    }

    /// The publication gate's timeout in seconds (`spec.readinessGate.timeoutSeconds`), if any.
    pub fn gate_timeout_seconds(&self) -> Option<i32> {
        self.readiness_gate.as_ref()?.timeout_seconds
    }

    /// The rule entry for a Service port name, if any.
    pub fn port_rule(&self, port_name: &str) -> Option<&PortRule> {
        self.ports.iter().find(|r| r.name == port_name)
    }
}
