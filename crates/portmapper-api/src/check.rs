//! Membership checks: the per-port rules that decide whether a pod backs a Service port.
//!
//! A CRD schema cannot be recursive and must stay structural, so a check is an object with one
//! optional field per kind (exactly one set, enforced by `minProperties`/`maxProperties` and a CEL
//! rule), and `anyOf` holds [`LeafCheck`]s, which have every kind but `anyOf`.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::fields::KeySource;

/// Declares a check struct with the leaf kinds, plus any extra fields, and its kind accessor.
macro_rules! check_struct {
    (
        $(#[$meta:meta])*
        $name:ident { $($(#[$fmeta:meta])* $vis:vis $field:ident : $ty:ty,)* }
        rule = $rule:literal
    ) => {
        $(#[$meta])*
        #[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
        #[serde(rename_all = "camelCase")]
        #[schemars(extend("minProperties" = 1, "maxProperties" = 1))]
        #[x_kube(validation = kube::core::Rule::new($rule).message(
            "each check must set exactly one kind"
        ))]
        pub struct $name {
            /// Includes the pod when its `Ready` condition is `True`.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub pod_ready: Option<PodReadyCheck>,
            /// Includes the pod while it has no `deletionTimestamp`. Without it, terminating pods
            /// that still pass the other checks are drained (published ready=false, serving=true,
            /// terminating=true) according to `spec.terminatingEndpoints`.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub not_terminating: Option<NotTerminatingCheck>,
            /// Includes the pod when a container is ready; by default the container that declares
            /// the port's target port.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub container_ready: Option<ContainerReadyCheck>,
            /// Includes the pod when one of its status conditions has the given status.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub pod_condition: Option<PodConditionCheck>,
            /// Includes the pod when its label or annotation lists the Service port's name.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub port_names: Option<PortNamesCheck>,
            /// Includes the pod when an HTTP(S) GET to the pod IP answers 200-399.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub http_get: Option<HttpGetCheck>,
            /// Includes the pod when a TCP connection to the pod IP succeeds.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub tcp_socket: Option<TcpSocketCheck>,
            /// Includes the pod when `grpc.health.v1.Health/Check` on the pod IP answers SERVING.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub grpc: Option<GrpcCheck>,
            /// Asks an external decider (your own HTTP endpoint) to include, exclude or abstain.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub webhook: Option<WebhookCheck>,
            $($(#[$fmeta])* $vis $field: $ty,)*
        }
    };
}

check_struct! {
    /// One membership check. Exactly one field must be set.
    Check {
        /// Includes the pod when at least one of these checks includes it (one level only: the
        /// entries may not themselves be `anyOf`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(length(min = 1, max = 16))]
        pub any_of: Option<Vec<LeafCheck>>,
    }
    rule = "[has(self.podReady), has(self.notTerminating), has(self.containerReady), has(self.podCondition), has(self.portNames), has(self.httpGet), has(self.tcpSocket), has(self.grpc), has(self.webhook), has(self.anyOf)].filter(x, x).size() == 1"
}

check_struct! {
    /// One membership check inside `anyOf`. Exactly one field must be set; `anyOf` cannot nest.
    LeafCheck {}
    rule = "[has(self.podReady), has(self.notTerminating), has(self.containerReady), has(self.podCondition), has(self.portNames), has(self.httpGet), has(self.tcpSocket), has(self.grpc), has(self.webhook)].filter(x, x).size() == 1"
}

/// `podReady` takes no parameters.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
pub struct PodReadyCheck {}

/// `notTerminating` takes no parameters.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
pub struct NotTerminatingCheck {}

/// Parameters of `containerReady`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerReadyCheck {
    /// Name of the container (or restartable init container) whose readiness counts. Default: the
    /// container that declares the Service port's target port; for a numeric target port that no
    /// container declares, the pod is excluded with a reason saying so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = crate::fields::DNS1123_LABEL_PATTERN))]
    pub container: Option<String>,
}

/// Status a pod condition must have.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum ConditionStatus {
    /// The condition holds.
    #[default]
    True,
    /// The condition does not hold.
    False,
    /// The condition's state is unknown.
    Unknown,
}

/// Parameters of `podCondition`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodConditionCheck {
    /// Condition type, e.g. a readiness gate such as `example.com/broker-joined`.
    #[serde(rename = "type")]
    #[schemars(
        length(min = 1, max = crate::fields::QUALIFIED_NAME_MAX_LENGTH),
        regex(pattern = crate::fields::QUALIFIED_NAME_PATTERN)
    )]
    #[x_kube(validation = kube::core::Rule::new(crate::fields::QUALIFIED_NAME_PREFIX_RULE)
        .message(crate::fields::QUALIFIED_NAME_PREFIX_MESSAGE))]
    pub type_: String,
    /// Required status of that condition. A missing condition never matches. Default: `True`.
    #[serde(default)]
    pub status: ConditionStatus,
}

/// Parameters of `portNames`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PortNamesCheck {
    /// Label or annotation key whose value lists, comma separated, the Service port names the pod
    /// backs (whitespace around names is ignored).
    #[schemars(
        length(min = 1, max = crate::fields::QUALIFIED_NAME_MAX_LENGTH),
        regex(pattern = crate::fields::QUALIFIED_NAME_PATTERN)
    )]
    #[x_kube(validation = kube::core::Rule::new(crate::fields::QUALIFIED_NAME_PREFIX_RULE)
        .message(crate::fields::QUALIFIED_NAME_PREFIX_MESSAGE))]
    pub key: String,
    /// Where to read `key`. Default `Annotation`, because label values cannot contain commas.
    #[serde(default = "KeySource::annotation")]
    pub from: KeySource,
}

/// URL scheme of an HTTP check.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
#[serde(rename_all = "UPPERCASE")]
pub enum Scheme {
    /// Plain HTTP.
    #[default]
    Http,
    /// HTTPS; the certificate is not verified, as kubelet does for HTTPS probes.
    Https,
}

/// One request header of an HTTP check.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
pub struct HttpHeader {
    /// Header name.
    #[schemars(
        length(min = 1, max = 256),
        regex(pattern = r"^[-A-Za-z0-9!#$%&'*+.^_`|~]+$")
    )]
    pub name: String,
    /// Header value.
    #[schemars(length(max = 4096))]
    pub value: String,
}

/// Parameters of `httpGet`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpGetCheck {
    /// Request path. Default `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048), regex(pattern = "^/"))]
    pub path: Option<String>,
    /// Port on the pod IP: a number (1-65535), or the name of a container port of that pod (an
    /// IANA service name). Default: the Service port's resolved target port. The host is always
    /// the pod IP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "minimum" = 1,
        "maximum" = 65535,
        "maxLength" = crate::fields::IANA_SVC_NAME_MAX_LENGTH,
        "pattern" = crate::fields::IANA_SVC_NAME_PATTERN
    ))]
    pub port: Option<IntOrString>,
    /// `HTTP` (default) or `HTTPS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<Scheme>,
    /// Extra request headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub http_headers: Option<Vec<HttpHeader>>,
    /// Overrides `spec.probe.timeoutSeconds` for this check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 60))]
    pub timeout_seconds: Option<i32>,
}

/// Parameters of `tcpSocket`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TcpSocketCheck {
    /// Port on the pod IP: a number (1-65535) or a container port name (an IANA service name).
    /// Default: the resolved target port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "minimum" = 1,
        "maximum" = 65535,
        "maxLength" = crate::fields::IANA_SVC_NAME_MAX_LENGTH,
        "pattern" = crate::fields::IANA_SVC_NAME_PATTERN
    ))]
    pub port: Option<IntOrString>,
    /// Overrides `spec.probe.timeoutSeconds` for this check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 60))]
    pub timeout_seconds: Option<i32>,
}

/// Parameters of `grpc`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrpcCheck {
    /// Port on the pod IP: a number (1-65535) or a container port name (an IANA service name).
    /// Default: the resolved target port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "minimum" = 1,
        "maximum" = 65535,
        "maxLength" = crate::fields::IANA_SVC_NAME_MAX_LENGTH,
        "pattern" = crate::fields::IANA_SVC_NAME_PATTERN
    ))]
    pub port: Option<IntOrString>,
    /// Service name sent in the `HealthCheckRequest`. Default: empty (the server's overall health).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub service: Option<String>,
    /// Overrides `spec.probe.timeoutSeconds` for this check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 60))]
    pub timeout_seconds: Option<i32>,
}

/// What a CA bundle must contain (searched, not anchored): one PEM certificate block with
/// base64 content. Text around blocks (comments, `subject=` lines) is allowed, as PEM parsers
/// skip it.
pub const PEM_CERTIFICATE_PATTERN: &str = r"-----BEGIN CERTIFICATE-----[\r\n\t ]*[A-Za-z0-9+/=][A-Za-z0-9+/=\r\n\t ]*-----END CERTIFICATE-----";

/// Parameters of `webhook`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookCheck {
    /// URL the operator POSTs each (pod, port, address) to. It is the one destination a user
    /// chooses, so whoever may edit PortMappings can make the operator send requests there.
    #[schemars(
        length(min = 8, max = 2048),
        regex(pattern = "^https?://[^\\s/?#]+([/?#][^\\s]*)?$")
    )]
    pub url: String,
    /// Overrides `spec.probe.timeoutSeconds` for this check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 60))]
    pub timeout_seconds: Option<i32>,
    /// PEM bundle of CA certificates that verify an `https://` webhook (base64 not needed): at
    /// least one `-----BEGIN CERTIFICATE-----` … `-----END CERTIFICATE-----` block. Default: the
    /// system roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    // A `pattern`, not CEL: a rule over a 64 KiB string, times 25,600 possible webhook checks,
    // would exceed the apiserver's CEL cost budget; OpenAPI patterns have none.
    #[schemars(length(max = 65536), regex(pattern = PEM_CERTIFICATE_PATTERN))]
    pub ca_bundle: Option<String>,
}

/// A borrowed view of the one kind a check sets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CheckKind<'a> {
    /// See [`PodReadyCheck`].
    PodReady,
    /// See [`NotTerminatingCheck`].
    NotTerminating,
    /// See [`ContainerReadyCheck`].
    ContainerReady(&'a ContainerReadyCheck),
    /// See [`PodConditionCheck`].
    PodCondition(&'a PodConditionCheck),
    /// See [`PortNamesCheck`].
    PortNames(&'a PortNamesCheck),
    /// See [`HttpGetCheck`].
    HttpGet(&'a HttpGetCheck),
    /// See [`TcpSocketCheck`].
    TcpSocket(&'a TcpSocketCheck),
    /// See [`GrpcCheck`].
    Grpc(&'a GrpcCheck),
    /// See [`WebhookCheck`].
    Webhook(&'a WebhookCheck),
    /// One of these must include the pod.
    AnyOf(&'a [LeafCheck]),
}

impl CheckKind<'_> {
    /// The field name users write in YAML.
    pub fn name(&self) -> &'static str {
        match self {
            Self::PodReady => "podReady",
            Self::NotTerminating => "notTerminating",
            Self::ContainerReady(_) => "containerReady",
            Self::PodCondition(_) => "podCondition",
            Self::PortNames(_) => "portNames",
            Self::HttpGet(_) => "httpGet",
            Self::TcpSocket(_) => "tcpSocket",
            Self::Grpc(_) => "grpc",
            Self::Webhook(_) => "webhook",
            Self::AnyOf(_) => "anyOf",
        }
    }

    /// Network checks are evaluated by the prober, outside the reconcile.
    pub fn is_network(&self) -> bool {
        matches!(
            self,
            Self::HttpGet(_) | Self::TcpSocket(_) | Self::Grpc(_) | Self::Webhook(_)
        )
    }

    /// Health checks are bypassed by `publishNotReadyAddresses`; backing checks
    /// (`portNames`, `podCondition`) and `notTerminating` are not.
    pub fn is_health(&self) -> bool {
        matches!(self, Self::PodReady | Self::ContainerReady(_)) || self.is_network()
    }
}

/// The number of kinds set on a check, for error messages when it is not exactly one.
macro_rules! kinds_of {
    ($self:ident, $($field:ident => $kind:expr),* $(,)?) => {{
        let mut kinds = Vec::new();
        $(if let Some(v) = &$self.$field { let _ = v; kinds.push($kind(v)); })*
        kinds
    }};
}

impl LeafCheck {
    /// Every kind this check sets (valid checks set exactly one).
    pub fn kinds(&self) -> Vec<CheckKind<'_>> {
        kinds_of!(self,
            pod_ready => |_| CheckKind::PodReady,
            not_terminating => |_| CheckKind::NotTerminating,
            container_ready => CheckKind::ContainerReady,
            pod_condition => CheckKind::PodCondition,
            port_names => CheckKind::PortNames,
            http_get => CheckKind::HttpGet,
            tcp_socket => CheckKind::TcpSocket,
            grpc => CheckKind::Grpc,
            webhook => CheckKind::Webhook,
        )
    }

    /// The one kind this check sets, or `None` when it sets zero or several.
    pub fn kind(&self) -> Option<CheckKind<'_>> {
        single(self.kinds())
    }
}

impl Check {
    /// Every kind this check sets (valid checks set exactly one).
    pub fn kinds(&self) -> Vec<CheckKind<'_>> {
        let mut kinds = kinds_of!(self,
            pod_ready => |_| CheckKind::PodReady,
            not_terminating => |_| CheckKind::NotTerminating,
            container_ready => CheckKind::ContainerReady,
            pod_condition => CheckKind::PodCondition,
            port_names => CheckKind::PortNames,
            http_get => CheckKind::HttpGet,
            tcp_socket => CheckKind::TcpSocket,
            grpc => CheckKind::Grpc,
            webhook => CheckKind::Webhook,
        );
        if let Some(any_of) = &self.any_of {
            kinds.push(CheckKind::AnyOf(any_of.as_slice()));
        }
        kinds
    }

    /// The one kind this check sets, or `None` when it sets zero or several.
    pub fn kind(&self) -> Option<CheckKind<'_>> {
        single(self.kinds())
    }

    /// `podReady: {}`.
    pub fn pod_ready() -> Self {
        Self {
            pod_ready: Some(PodReadyCheck {}),
            ..Self::default()
        }
    }
}

fn single<T>(mut kinds: Vec<T>) -> Option<T> {
    if kinds.len() == 1 { kinds.pop() } else { None }
}
