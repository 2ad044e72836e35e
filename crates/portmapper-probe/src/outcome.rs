//! What one probe says about one target: include, exclude or abstain, with a bounded cause.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The tri-state verdict of one probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Outcome {
    /// The pod answered as healthy: it may back the port.
    Include,
    /// The pod failed the check (pod-side failure): it should not back the port.
    Exclude,
    /// The probe says nothing about the pod (controller-side failure, or the webhook abstained):
    /// the current membership holds.
    Abstain,
}

impl Outcome {
    /// Lowercase name, used as a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Include => "include",
            Self::Exclude => "exclude",
            Self::Abstain => "abstain",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a probe ended as it did. A closed set, so it can label metrics without unbounded
/// cardinality; the free-text detail lives in [`ProbeResult::reason`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    /// The check passed (HTTP 200–399, TCP connected, gRPC SERVING).
    Healthy,
    /// The pod refused the connection.
    Refused,
    /// The probe did not finish within its timeout.
    Timeout,
    /// Another pod-side connection failure: reset, host unreachable.
    Connection,
    /// The pod answered with a failing HTTP status.
    Status,
    /// The pod's TLS handshake failed.
    Tls,
    /// The pod's answer was not valid HTTP, HTTP/2 or gRPC.
    Protocol,
    /// The gRPC health service answered, but not SERVING (or not at all for that service).
    NotServing,
    /// The check cannot apply to this pod: undeclared named port, unusable pod address,
    /// invalid header. Excluded like a failing probe, as kubelet does.
    InvalidCheck,
    /// The operator has no route to the pod's network (ENETUNREACH, EADDRNOTAVAIL) or a local
    /// firewall refused the connection (EACCES, EPERM).
    NoRoute,
    /// The operator ran out of a local resource (EMFILE, ENFILE, ENOBUFS, ENOMEM).
    LocalResources,
    /// The webhook answered a decision.
    WebhookDecision,
    /// The webhook could not be reached, timed out, or answered a non-2xx status.
    WebhookUnavailable,
    /// The webhook answered something that is not a valid decision document.
    WebhookMalformed,
}

impl Cause {
    /// camelCase name, used as a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Refused => "refused",
            Self::Timeout => "timeout",
            Self::Connection => "connection",
            Self::Status => "status",
            Self::Tls => "tls",
            Self::Protocol => "protocol",
            Self::NotServing => "notServing",
            Self::InvalidCheck => "invalidCheck",
            Self::NoRoute => "noRoute",
            Self::LocalResources => "localResources",
            Self::WebhookDecision => "webhookDecision",
            Self::WebhookUnavailable => "webhookUnavailable",
            Self::WebhookMalformed => "webhookMalformed",
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of one probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeResult {
    /// The verdict.
    pub outcome: Outcome,
    /// Why, as a bounded category.
    pub cause: Cause,
    /// Human-readable detail for PortMapping status, at most [`crate::limits::MAX_REASON_BYTES`].
    pub reason: String,
}

impl ProbeResult {
    /// A result with its reason's control characters escaped and cut to the status-friendly
    /// limit.
    pub fn new(outcome: Outcome, cause: Cause, reason: impl Into<String>) -> Self {
        use crate::limits::{escape_controls, truncate_reason};
        Self {
            outcome,
            cause,
            reason: truncate_reason(escape_controls(reason.into())),
        }
    }

    /// A passing probe.
    pub fn include(cause: Cause, reason: impl Into<String>) -> Self {
        Self::new(Outcome::Include, cause, reason)
    }

    /// A pod-side failure.
    pub fn exclude(cause: Cause, reason: impl Into<String>) -> Self {
        Self::new(Outcome::Exclude, cause, reason)
    }

    /// A probe that says nothing about the pod.
    pub fn abstain(cause: Cause, reason: impl Into<String>) -> Self {
        Self::new(Outcome::Abstain, cause, reason)
    }
}
