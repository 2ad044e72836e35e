//! Network membership checks (`httpGet`, `tcpSocket`, `grpc`, `webhook`), probed outside the
//! reconcile loop.
//!
//! The operator keeps one [`Prober`]. Each reconcile of a PortMapping hands it the network
//! checks in use as [`Target`]s with [`Prober::set_targets`] and reads damped, cached
//! [`TargetResult`]s with [`Prober::results`]; a read copies cached state and never waits on a
//! probe, so a Service full of unreachable pods reconciles as fast as a healthy one. When a
//! damped membership flips, the PortMapping's [`MappingKey`] arrives on [`ProbeEvents`].
//!
//! # Tri-state classification
//!
//! Every probe ends in [`Outcome::Include`], [`Outcome::Exclude`] or [`Outcome::Abstain`].
//! Pod-side failures exclude; controller-side failures abstain, and an abstaining result
//! leaves the membership as it is, so an operator-side outage freezes memberships instead of
//! emptying every slice.
//!
//! | What happened | `httpGet` / `tcpSocket` / `grpc` | `webhook` | [`Cause`] |
//! |---|---|---|---|
//! | HTTP 200–399 (3xx not followed); TCP connected; gRPC `SERVING` | Include | — | `healthy` |
//! | Connection refused | Exclude | Abstain | `refused` / `webhookUnavailable` |
//! | Timeout (connect, TLS, answer, or body slower than the timeout) | Exclude | Abstain | `timeout` / `webhookUnavailable` |
//! | Reset, host unreachable (`EHOSTUNREACH`), other connection errors | Exclude | Abstain | `connection` / `webhookUnavailable` |
//! | HTTP status outside 200–399 (webhook: outside 2xx) | Exclude | Abstain | `status` / `webhookUnavailable` |
//! | TLS handshake failure (pods: certificates are not verified) | Exclude | Abstain | `tls` / `webhookUnavailable` |
//! | Not HTTP / HTTP/2 / gRPC | Exclude | — | `protocol` |
//! | gRPC `NOT_SERVING`, `UNKNOWN`, unknown service (`NOT_FOUND`), `UNIMPLEMENTED`, other `grpc-status` | Exclude | — | `notServing` |
//! | Named port the pod does not declare, pod without a usable IP of the family, invalid header or path | Exclude | Exclude (no IP) / Abstain (bad URL, bad `caBundle`) | `invalidCheck` |
//! | No route from the operator (`ENETUNREACH`, `EADDRNOTAVAIL`), local firewall (`EACCES`, `EPERM`) | Abstain | Abstain | `noRoute` |
//! | Local resource exhaustion (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`) | Abstain | Abstain | `localResources` |
//! | Webhook answered `Include` / `Exclude` / `Abstain` | — | as answered | `webhookDecision` |
//! | Webhook answer not a decision document, or larger than 16 KiB | — | Abstain | `webhookMalformed` |
//! | Webhook host does not resolve, or not in time | — | Abstain | `webhookUnavailable` |
//! | Webhook host outside the [`WebhookEgress`] policy, or resolving to refused addresses only | — | Abstain | `invalidCheck` |
//!
//! `EHOSTUNREACH` counts as the pod's: on a pod network it means the neighbour (the pod) did not
//! answer, which is what a dead pod looks like; a missing route on the operator's side is
//! `ENETUNREACH`.
//!
//! # Damping
//!
//! A target's membership flips to included after `successThreshold` consecutive Include
//! results and to excluded after `failureThreshold` consecutive Exclude results. Abstain
//! neither counts nor breaks a streak. A new target starts from the caller's initial membership (published
//! now → included), so a restart or leader change neither flaps nor empties anything.
//!
//! # Safety
//!
//! A pod-facing probe connects only to a [`PodAddr`]: a pod IP the caller listed in
//! [`PoolPod::ips`] for the target's family, on the Service's resolved target port or a port
//! the check names on that pod. Checks have no host field; the HTTP request target is a path
//! sent over a socket already connected to the pod; redirects are never followed; timeouts are
//! capped at 60 s, headers at 16 (16 KiB) and bodies at [`limits::MAX_HTTP_BODY_BYTES`].
//! Addresses refused by [`address::refusal`] (unspecified, multicast, broadcast, link-local,
//! cloud metadata, IPv6 spellings of IPv4 addresses) are never dialled, and loopback only when
//! [`ExecutorConfig::allow_loopback`] is set (tests only). Webhook URLs are the one user-chosen
//! destination: their hosts must pass the [`WebhookEgress`] policy, and their addresses the
//! same [`address::refusal`] as pod IPs. Reasons have control characters escaped, and a webhook
//! failure's reason names its kind only (no address, body or OS error).

pub mod address;
mod classify;
mod damping;
pub mod egress;
mod error;
pub mod exec;
mod fair;
// The fuzz targets' case budget, shared with every crate's fuzz tests.
#[cfg(test)]
#[path = "../../../tests/support/fuzz_budget.rs"]
mod fuzz_budget;
pub mod limits;
pub mod metrics;
mod outcome;
mod prober;
mod target;
mod verdict;

pub use egress::{EgressError, WebhookEgress};
pub use exec::webhook::{MembershipDecision, MembershipReview, WebhookDecision};
pub use exec::{ExecutorConfig, NetworkExecutor, ProbeExecutor, ProbeFuture, TlsConfigError};
pub use fair::FairLimits;
pub use metrics::{NoMetrics, ProbeMetrics, PrometheusProbeMetrics};
pub use outcome::{Cause, Outcome, ProbeResult};
pub use prober::{
    DEFAULT_CONCURRENCY, ProbeEvents, Prober, ProberConfig, ProberError, TargetResult,
    default_per_mapping, default_per_namespace,
};
// The key vocabulary is the planner's (`portmapper-api`), re-exported for convenience.
pub use portmapper_api::network_key::{CheckPosition, IpFamily, NetworkKey};
pub use target::{
    AddrError, CheckType, ContainerPort, MappingKey, Membership, MetadataSource, NetworkCheck,
    PodAddr, PodMetadata, PoolPod, ServicePort, Target,
};
