//! Membership checks: the per-port rules that decide whether a pod backs a Service port.
//!
//! A CRD schema cannot be recursive and must stay structural, so a check is an object with one
//! optional field per kind (exactly one set, enforced by `minProperties`/`maxProperties`), and
//! `anyOf` holds [`LeafCheck`]s, which have every kind but `anyOf`.
//!
//! There is no CEL rule for "exactly one kind": kube-apiserver skips CEL when the schema already
//! failed, so for two kinds its message never showed, and each `has()` of it cost kube-apiserver
//! a copy of the check's schema on every write of a PortMapping, status writes included
//! (docs/benchmarks.md, status writes).
//!
//! Every kind is one row of the `check_kinds!` table below. The table generates the fields of
//! [`Check`] and [`LeafCheck`], the borrowed views ([`ApiKind`], [`NetworkKind`]),
//! the prober's owned [`NetworkCheck`] and its metric label [`CheckType`], so a kind cannot be
//! half added: the code that evaluates or validates kinds matches these enums exhaustively.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::KubeSchema;
use kube_validation::field::FieldPath;
use serde::{Deserialize, Serialize};

use crate::fields::KeySource;
use crate::rules::{FieldRule, Rule};

/// The message of the operator's own check that a check sets exactly one kind.
pub(crate) const EXACTLY_ONE_MESSAGE: &str = "each check must set exactly one kind";

/// Declares every check kind. Each row's parameters implement [`ValidateParams`]. An `api` row is
/// evaluated by the reconcile from API objects; a `network` row by the prober, and its
/// parameters implement [`NetworkParams`] too. `health` says
/// whether `publishNotReadyAddresses` bypasses an API kind (network kinds always are health).
macro_rules! check_kinds {
    (
        api {
            $( $(#[$adoc:meta])* $afield:ident: $avariant:ident($aty:ty) = $aname:literal, health = $ahealth:literal; )*
        }
        network {
            $( $(#[$ndoc:meta])* $nfield:ident: $nvariant:ident($nty:ty) = $nname:literal; )*
        }
    ) => {
        /// One membership check. Exactly one field must be set.
        #[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
        #[serde(rename_all = "camelCase")]
        #[schemars(extend("minProperties" = 1, "maxProperties" = 1))]
        pub struct Check {
            $(
                $(#[$adoc])*
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub $afield: Option<$aty>,
            )*
            $(
                $(#[$ndoc])*
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub $nfield: Option<$nty>,
            )*
            /// Includes the pod when at least one of these checks includes it (one level only: the
            /// entries may not themselves be `anyOf`).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            #[schemars(length(min = 1, max = 16))]
            pub any_of: Option<Vec<LeafCheck>>,
        }

        /// One membership check inside `anyOf`. Exactly one field must be set; `anyOf` cannot nest.
        #[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
        #[serde(rename_all = "camelCase")]
        #[schemars(extend("minProperties" = 1, "maxProperties" = 1))]
        pub struct LeafCheck {
            $(
                $(#[$adoc])*
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub $afield: Option<$aty>,
            )*
            $(
                $(#[$ndoc])*
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub $nfield: Option<$nty>,
            )*
        }

        /// The YAML names of the network kinds (each has its own `timeoutSeconds`), in field
        /// order.
        pub const NETWORK_KIND_NAMES: &[&str] = &[$($nname,)*];

        /// A borrowed view of a check kind the reconcile evaluates from API objects.
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub enum ApiKind<'a> {
            $(
                #[doc = concat!("`", $aname, "`: see [`", stringify!($aty), "`].")]
                $avariant(&'a $aty),
            )*
        }

        impl<'a> ApiKind<'a> {
            /// The field name users write in YAML.
            pub fn name(&self) -> &'static str {
                match self {
                    $(Self::$avariant(_) => $aname,)*
                }
            }

            /// Whether `publishNotReadyAddresses` bypasses it.
            pub fn is_health(&self) -> bool {
                match self {
                    $(Self::$avariant(_) => $ahealth,)*
                }
            }

            /// See [`ValidateParams::rules`].
            pub fn rules(&self, path: &FieldPath, period: i32, out: &mut Vec<FieldRule<'a>>) {
                match *self {
                    $(Self::$avariant(c) => ValidateParams::rules(c, path, period, out),)*
                }
            }
        }

        /// A borrowed view of a check kind the prober evaluates over the network.
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub enum NetworkKind<'a> {
            $(
                #[doc = concat!("`", $nname, "`: see [`", stringify!($nty), "`].")]
                $nvariant(&'a $nty),
            )*
        }

        impl<'a> NetworkKind<'a> {
            /// The field name users write in YAML.
            pub fn name(&self) -> &'static str {
                self.check_type().as_str()
            }

            /// Which kind this is.
            pub fn check_type(&self) -> CheckType {
                match self {
                    $(Self::$nvariant(_) => CheckType::$nvariant,)*
                }
            }

            /// What the check dials.
            pub fn dials(&self) -> Dials<'a> {
                match *self {
                    $(Self::$nvariant(c) => NetworkParams::dials(c),)*
                }
            }

            /// See [`ValidateParams::rules`].
            pub fn rules(&self, path: &FieldPath, period: i32, out: &mut Vec<FieldRule<'a>>) {
                match *self {
                    $(Self::$nvariant(c) => ValidateParams::rules(c, path, period, out),)*
                }
            }

            /// The owned check the prober keeps.
            pub fn cloned(&self) -> NetworkCheck {
                match *self {
                    $(Self::$nvariant(c) => NetworkCheck::$nvariant(c.clone()),)*
                }
            }
        }

        /// One network check, as written in the PortMapping, owned by the prober's targets.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum NetworkCheck {
            $(
                #[doc = concat!("`", $nname, "`.")]
                $nvariant($nty),
            )*
        }

        impl NetworkCheck {
            /// The borrowed view of this check.
            pub fn as_kind(&self) -> NetworkKind<'_> {
                match self {
                    $(Self::$nvariant(c) => NetworkKind::$nvariant(c),)*
                }
            }

            /// Which kind this is.
            pub fn check_type(&self) -> CheckType {
                self.as_kind().check_type()
            }

            /// The check's own `timeoutSeconds`, which overrides `spec.probe.timeoutSeconds`.
            pub fn timeout_seconds(&self) -> Option<i32> {
                match self {
                    $(Self::$nvariant(c) => NetworkParams::timeout_seconds(c),)*
                }
            }

            /// What the check dials.
            pub fn dials(&self) -> Dials<'_> {
                self.as_kind().dials()
            }
        }

        /// Which kind of network check: a bounded metric label.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum CheckType {
            $(
                #[doc = concat!("`", $nname, "`.")]
                $nvariant,
            )*
        }

        impl CheckType {
            /// The field name users write in YAML.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$nvariant => $nname,)*
                }
            }
        }

        impl LeafCheck {
            fn view(&self) -> LeafView<'_> {
                LeafView {
                    $($afield: self.$afield.as_ref(),)*
                    $($nfield: self.$nfield.as_ref(),)*
                }
            }
        }

        impl Check {
            fn view(&self) -> LeafView<'_> {
                LeafView {
                    $($afield: self.$afield.as_ref(),)*
                    $($nfield: self.$nfield.as_ref(),)*
                }
            }
        }

        /// The leaf kind fields of a [`Check`] or [`LeafCheck`], borrowed.
        struct LeafView<'a> {
            $($afield: Option<&'a $aty>,)*
            $($nfield: Option<&'a $nty>,)*
        }

        impl<'a> LeafView<'a> {
            /// The kinds set, without allocating.
            fn kinds(self) -> impl Iterator<Item = CheckKind<'a>> {
                let api = [$(self.$afield.map(|c| CheckKind::Api(ApiKind::$avariant(c))),)*];
                let network = [$(self.$nfield.map(|c| CheckKind::Network(NetworkKind::$nvariant(c))),)*];
                api.into_iter().chain(network).flatten()
            }
        }
    };
}

check_kinds! {
    api {
        /// Includes the pod when its `Ready` condition is `True`.
        pod_ready: PodReady(PodReadyCheck) = "podReady", health = true;
        /// Includes the pod while it has no `deletionTimestamp`. Without it, terminating pods
        /// that still pass the other checks are drained (published ready=false, serving=true,
        /// terminating=true) according to `spec.terminatingEndpoints`.
        not_terminating: NotTerminating(NotTerminatingCheck) = "notTerminating", health = false;
        /// Includes the pod when a container is ready; by default the container that declares
        /// the port's target port.
        container_ready: ContainerReady(ContainerReadyCheck) = "containerReady", health = true;
        /// Includes the pod when one of its status conditions has the given status.
        pod_condition: PodCondition(PodConditionCheck) = "podCondition", health = false;
        /// Includes the pod when its label or annotation lists the Service port's name.
        port_names: PortNames(PortNamesCheck) = "portNames", health = false;
    }
    network {
        /// Includes the pod when an HTTP(S) GET to the pod IP answers 200-399.
        http_get: HttpGet(HttpGetCheck) = "httpGet";
        /// Includes the pod when a TCP connection to the pod IP succeeds.
        tcp_socket: TcpSocket(TcpSocketCheck) = "tcpSocket";
        /// Includes the pod when `grpc.health.v1.Health/Check` on the pod IP answers SERVING.
        grpc: Grpc(GrpcCheck) = "grpc";
        /// Asks an external decider (your own HTTP endpoint) to include, exclude or abstain.
        webhook: Webhook(WebhookCheck) = "webhook";
    }
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

/// Who evaluates a check kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckClass {
    /// The reconcile, from API objects.
    Api,
    /// The prober, over the network.
    Network,
    /// `anyOf`: its entries decide.
    AnyOf,
}

/// A borrowed view of the one kind a check sets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CheckKind<'a> {
    /// A kind the reconcile evaluates from API objects.
    Api(ApiKind<'a>),
    /// A kind the prober evaluates over the network.
    Network(NetworkKind<'a>),
    /// One of these must include the pod.
    AnyOf(&'a [LeafCheck]),
}

impl<'a> CheckKind<'a> {
    /// The network check, when the prober evaluates this kind.
    pub fn as_network(&self) -> Option<NetworkKind<'a>> {
        match *self {
            Self::Network(kind) => Some(kind),
            Self::Api(_) | Self::AnyOf(_) => None,
        }
    }

    /// The field name users write in YAML.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Api(kind) => kind.name(),
            Self::Network(kind) => kind.name(),
            Self::AnyOf(_) => "anyOf",
        }
    }

    /// Who evaluates it.
    pub fn class(&self) -> CheckClass {
        match self {
            Self::Api(_) => CheckClass::Api,
            Self::Network(_) => CheckClass::Network,
            Self::AnyOf(_) => CheckClass::AnyOf,
        }
    }

    /// Network checks are evaluated by the prober, outside the reconcile.
    pub fn is_network(&self) -> bool {
        self.class() == CheckClass::Network
    }

    /// Health checks are bypassed by `publishNotReadyAddresses`; backing checks
    /// (`portNames`, `podCondition`) and `notTerminating` are not.
    pub fn is_health(&self) -> bool {
        match self {
            Self::Api(kind) => kind.is_health(),
            Self::Network(_) => true,
            Self::AnyOf(_) => false,
        }
    }
}

/// What a network check connects to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dials<'a> {
    /// The pod IP, at the check's own `port` (a number or a container port name).
    PodPort(&'a IntOrString),
    /// The pod IP, at the Service port's resolved target port.
    TargetPort,
    /// Not the pod: the check calls an endpoint of the user's choosing.
    Elsewhere,
}

/// What the prober needs from the parameters of a `network` row of `check_kinds!`.
pub trait NetworkParams {
    /// What the check connects to.
    fn dials(&self) -> Dials<'_>;
    /// The check's own `timeoutSeconds`, which overrides `spec.probe.timeoutSeconds`.
    fn timeout_seconds(&self) -> Option<i32>;
}

/// [`NetworkParams`] of checks that dial the pod at their own `port`, else the target port.
macro_rules! dials_the_pod {
    ($($ty:ty),*) => {$(
        impl NetworkParams for $ty {
            fn dials(&self) -> Dials<'_> {
                self.port.as_ref().map_or(Dials::TargetPort, Dials::PodPort)
            }
            fn timeout_seconds(&self) -> Option<i32> {
                self.timeout_seconds
            }
        }
    )*};
}

dials_the_pod!(HttpGetCheck, TcpSocketCheck, GrpcCheck);

impl NetworkParams for WebhookCheck {
    fn dials(&self) -> Dials<'_> {
        Dials::Elsewhere
    }
    fn timeout_seconds(&self) -> Option<i32> {
        self.timeout_seconds
    }
}

/// The rules of a kind's parameters that its schema states, repeated in Rust for objects that
/// never passed admission (the `validate` module says when that happens).
pub trait ValidateParams {
    /// Appends the rules of these parameters to `out`; `path` is the kind's field and `period`
    /// is `spec.probe.periodSeconds`, which bounds every timeout.
    fn rules<'a>(&'a self, path: &FieldPath, period: i32, out: &mut Vec<FieldRule<'a>>);
}

impl ValidateParams for PodReadyCheck {
    fn rules<'a>(&'a self, _: &FieldPath, _: i32, _: &mut Vec<FieldRule<'a>>) {}
}

impl ValidateParams for NotTerminatingCheck {
    fn rules<'a>(&'a self, _: &FieldPath, _: i32, _: &mut Vec<FieldRule<'a>>) {}
}

impl ValidateParams for ContainerReadyCheck {
    fn rules<'a>(&'a self, path: &FieldPath, _: i32, out: &mut Vec<FieldRule<'a>>) {
        if let Some(name) = &self.container {
            out.push(FieldRule {
                path: path.child("container"),
                rule: Rule::Dns1123Label(name),
            });
        }
    }
}

impl ValidateParams for PodConditionCheck {
    fn rules<'a>(&'a self, path: &FieldPath, _: i32, out: &mut Vec<FieldRule<'a>>) {
        out.push(FieldRule {
            path: path.child("type"),
            rule: Rule::QualifiedName(&self.type_),
        });
    }
}

impl ValidateParams for PortNamesCheck {
    fn rules<'a>(&'a self, path: &FieldPath, _: i32, out: &mut Vec<FieldRule<'a>>) {
        out.push(FieldRule {
            path: path.child("key"),
            rule: Rule::QualifiedName(&self.key),
        });
    }
}

impl ValidateParams for HttpGetCheck {
    fn rules<'a>(&'a self, path: &FieldPath, period: i32, out: &mut Vec<FieldRule<'a>>) {
        if let Some(p) = self.path.as_deref() {
            out.push(FieldRule {
                path: path.child("path"),
                rule: Rule::StartsWith {
                    value: p,
                    prefix: "/",
                    detail: "must start with '/'",
                },
            });
        }
        port_rule(&path.child("port"), self.port.as_ref(), out);
        for (i, h) in self.http_headers.iter().flatten().enumerate() {
            out.push(FieldRule {
                path: path.child("httpHeaders").index(i).child("name"),
                rule: Rule::HttpHeaderName(&h.name),
            });
        }
        timeout_rule(path, self.timeout_seconds, period, out);
    }
}

/// [`ValidateParams`] of checks whose only rules are those of `port` and `timeoutSeconds`.
macro_rules! port_and_timeout_rules {
    ($($ty:ty),*) => {$(
        impl ValidateParams for $ty {
            fn rules<'a>(&'a self, path: &FieldPath, period: i32, out: &mut Vec<FieldRule<'a>>) {
                port_rule(&path.child("port"), self.port.as_ref(), out);
                timeout_rule(path, self.timeout_seconds, period, out);
            }
        }
    )*};
}

port_and_timeout_rules!(TcpSocketCheck, GrpcCheck);

impl ValidateParams for WebhookCheck {
    fn rules<'a>(&'a self, path: &FieldPath, period: i32, out: &mut Vec<FieldRule<'a>>) {
        out.push(FieldRule {
            path: path.child("url"),
            rule: Rule::HttpUrl(&self.url),
        });
        if let Some(ca) = &self.ca_bundle {
            out.push(FieldRule {
                path: path.child("caBundle"),
                rule: Rule::PemCertificate(ca),
            });
        }
        timeout_rule(path, self.timeout_seconds, period, out);
    }
}

/// A check's own `timeoutSeconds`: 1-60, and (once in range) at most
/// `spec.probe.periodSeconds`.
fn timeout_rule(path: &FieldPath, timeout: Option<i32>, period: i32, out: &mut Vec<FieldRule<'_>>) {
    let Some(t) = timeout else { return };
    let (value, max) = (i64::from(t), i64::from(period));
    let rule = if (1..=60).contains(&t) {
        Rule::NotAbove {
            value,
            max,
            bound: "spec.probe.periodSeconds",
        }
    } else {
        Rule::Between {
            value,
            min: 1,
            max: 60,
        }
    };
    out.push(FieldRule {
        path: path.child("timeoutSeconds"),
        rule,
    });
}

fn port_rule<'a>(path: &FieldPath, port: Option<&'a IntOrString>, out: &mut Vec<FieldRule<'a>>) {
    let rule = match port {
        None => return,
        Some(IntOrString::Int(n)) => Rule::PortNumber(i64::from(*n)),
        Some(IntOrString::String(name)) => Rule::PortName(name),
    };
    out.push(FieldRule {
        path: path.clone(),
        rule,
    });
}

impl LeafCheck {
    /// Every kind this check sets (valid checks set exactly one), for error messages.
    pub fn kinds(&self) -> Vec<CheckKind<'_>> {
        self.view().kinds().collect()
    }

    /// How many kinds this check sets (valid checks set exactly one).
    pub fn kind_count(&self) -> usize {
        self.view().kinds().count()
    }

    /// The one kind this check sets, or `None` when it sets zero or several.
    pub fn kind(&self) -> Option<CheckKind<'_>> {
        single(self.view().kinds())
    }
}

impl Check {
    /// Every kind this check sets (valid checks set exactly one), for error messages.
    pub fn kinds(&self) -> Vec<CheckKind<'_>> {
        self.all_kinds().collect()
    }

    /// How many kinds this check sets (valid checks set exactly one).
    pub fn kind_count(&self) -> usize {
        self.all_kinds().count()
    }

    /// The one kind this check sets, or `None` when it sets zero or several.
    pub fn kind(&self) -> Option<CheckKind<'_>> {
        single(self.all_kinds())
    }

    fn all_kinds(&self) -> impl Iterator<Item = CheckKind<'_>> {
        let any_of = self.any_of.as_deref().map(CheckKind::AnyOf);
        self.view().kinds().chain(any_of)
    }

    /// Network check positions this check holds, as admission counts them: its `anyOf`
    /// entries that set a network kind, else one if it sets a network kind itself. Each is
    /// probed per pool pod and family.
    pub fn network_positions(&self) -> usize {
        let networked = |k: CheckKind<'_>| matches!(k, CheckKind::Network(_));
        match self.any_of.as_deref() {
            Some(leaves) => leaves
                .iter()
                .filter(|l| l.view().kinds().any(networked))
                .count(),
            None => usize::from(self.view().kinds().any(networked)),
        }
    }

    /// `podReady: {}`.
    pub fn pod_ready() -> Self {
        Self {
            pod_ready: Some(PodReadyCheck {}),
            ..Self::default()
        }
    }
}

/// The only item of `kinds`, or `None` when there are zero or several.
fn single<T>(mut kinds: impl Iterator<Item = T>) -> Option<T> {
    let first = kinds.next()?;
    kinds.next().is_none().then_some(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_is_none_unless_exactly_one_is_set() {
        let mut check = Check::pod_ready();
        assert_eq!(check.kind().map(|k| k.name()), Some("podReady"));
        check.grpc = Some(GrpcCheck::default());
        assert_eq!(check.kind(), None);
        assert_eq!(check.kind_count(), 2);
        assert_eq!(Check::default().kind(), None);
        assert_eq!(Check::default().kind_count(), 0);
    }
}
