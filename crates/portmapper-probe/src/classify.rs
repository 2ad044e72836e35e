//! Whose fault a failure is: the pod's (Exclude) or the operator's (Abstain).
//!
//! An operator-side outage must freeze memberships rather than empty every slice, so any
//! error that describes the operator's own host (its routes, firewall, descriptors, memory)
//! abstains, whatever the check. Everything else a pod-facing probe sees is the pod's answer.

use std::error::Error as StdError;
use std::io;

use crate::error::ProbeError;
use crate::outcome::{Cause, ProbeResult};

/// An operator-side condition recognised in an OS error code.
fn local_cause(errno: i32) -> Option<Cause> {
    match errno {
        libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM => Some(Cause::LocalResources),
        // ENETUNREACH: no route in the operator's table; EADDRNOTAVAIL: no local address or
        // ephemeral port of that family; EACCES/EPERM: the operator's own firewall said no.
        libc::ENETUNREACH | libc::EADDRNOTAVAIL | libc::EACCES | libc::EPERM => {
            Some(Cause::NoRoute)
        }
        _ => None,
    }
}

/// The first OS error code in an error's source chain.
fn os_error(err: &(dyn StdError + 'static)) -> Option<i32> {
    let mut current: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(io_err) = e.downcast_ref::<io::Error>() {
            if let Some(code) = io_err.raw_os_error() {
                return Some(code);
            }
            // `io::Error::source` skips a wrapped error and returns *its* source, so step
            // into the wrapped error itself.
            if let Some(inner) = io_err.get_ref() {
                current = Some(inner as &(dyn StdError + 'static));
                continue;
            }
        }
        current = e.source();
    }
    None
}

/// The operator-side cause hidden anywhere in an error, if any.
fn local_cause_of(err: &(dyn StdError + 'static)) -> Option<Cause> {
    os_error(err).and_then(local_cause)
}

/// Classifies a failed pod-facing probe (`httpGet`, `tcpSocket`, `grpc`).
pub fn pod_failure(err: &ProbeError) -> ProbeResult {
    let reason = err.to_string();
    if let Some(cause) = local_cause_of(err) {
        return ProbeResult::abstain(cause, reason);
    }
    let cause = match err {
        ProbeError::Addr(_) | ProbeError::InvalidCheck(_) => Cause::InvalidCheck,
        ProbeError::Connect { source, .. } => match source.kind() {
            io::ErrorKind::ConnectionRefused => Cause::Refused,
            io::ErrorKind::TimedOut => Cause::Timeout,
            _ => Cause::Connection,
        },
        ProbeError::Tls { source, .. } if is_transport(source) => Cause::Connection,
        ProbeError::Tls { .. } => Cause::Tls,
        ProbeError::Http { source, .. } if source.is_timeout() => Cause::Timeout,
        ProbeError::Http { .. } | ProbeError::Malformed { .. } => Cause::Protocol,
        ProbeError::HttpStatus { .. } => Cause::Status,
        ProbeError::Timeout(_) => Cause::Timeout,
        // Pod-facing probes never resolve names nor consult the webhook policy; keep the
        // match total without guessing.
        ProbeError::Resolve { .. } | ProbeError::ResolveBusy { .. } => Cause::Connection,
        ProbeError::EgressRefused(_) => Cause::InvalidCheck,
    };
    ProbeResult::exclude(cause, reason)
}

/// Classifies a failed webhook call: the webhook is the operator's dependency, so every failure
/// to get a decision abstains.
///
/// The reason, which tenants read in status, names the kind of failure only: no address, OS
/// error or TLS detail, so that status is no port scanner of the operator's network position.
/// The full error is logged at debug level by the caller.
pub fn webhook_failure(err: &ProbeError) -> ProbeResult {
    let cause = match err {
        ProbeError::Malformed { .. } => Cause::WebhookMalformed,
        ProbeError::InvalidCheck(_) | ProbeError::Addr(_) | ProbeError::EgressRefused(_) => {
            Cause::InvalidCheck
        }
        _ => local_cause_of(err).unwrap_or(Cause::WebhookUnavailable),
    };
    ProbeResult::abstain(cause, format!("webhook: {}", webhook_reason(err, cause)))
}

/// What status says of a failed webhook call.
fn webhook_reason(err: &ProbeError, cause: Cause) -> String {
    match err {
        // The pod's own address, the tenant's own URL or bundle, the policy: all safe and needed.
        ProbeError::Addr(_)
        | ProbeError::InvalidCheck(_)
        | ProbeError::EgressRefused(_)
        | ProbeError::Resolve { .. }
        | ProbeError::ResolveBusy { .. }
        | ProbeError::Timeout(_) => err.to_string(),
        ProbeError::Malformed { detail, .. } => format!("malformed answer: {detail}"),
        ProbeError::HttpStatus { status, .. } => format!("answered HTTP {}", status.as_u16()),
        _ if cause != Cause::WebhookUnavailable => format!("operator-side failure ({cause})"),
        ProbeError::Connect { .. } => "connection failed".into(),
        ProbeError::Tls { .. } => "TLS handshake failed".into(),
        ProbeError::Http { .. } => "HTTP exchange failed".into(),
    }
}

/// Whether an error from a TLS stream is a transport failure (reset, EOF) rather than a TLS
/// protocol failure.
fn is_transport(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::outcome::Outcome;

    fn connect(errno: i32) -> ProbeError {
        ProbeError::Connect {
            addr: "10.244.0.1:80".parse().unwrap(),
            source: io::Error::from_raw_os_error(errno),
        }
    }

    #[test]
    fn pod_side_connect_failures_exclude() {
        for (errno, cause) in [
            (libc::ECONNREFUSED, Cause::Refused),
            (libc::ETIMEDOUT, Cause::Timeout),
            (libc::EHOSTUNREACH, Cause::Connection),
            (libc::ECONNRESET, Cause::Connection),
        ] {
            let r = pod_failure(&connect(errno));
            assert_eq!(
                (r.outcome, r.cause),
                (Outcome::Exclude, cause),
                "errno {errno}"
            );
        }
        let r = pod_failure(&ProbeError::Timeout(Duration::from_secs(1)));
        assert_eq!((r.outcome, r.cause), (Outcome::Exclude, Cause::Timeout));
    }

    #[test]
    fn operator_side_failures_abstain() {
        for (errno, cause) in [
            (libc::EMFILE, Cause::LocalResources),
            (libc::ENFILE, Cause::LocalResources),
            (libc::ENOBUFS, Cause::LocalResources),
            (libc::ENOMEM, Cause::LocalResources),
            (libc::ENETUNREACH, Cause::NoRoute),
            (libc::EADDRNOTAVAIL, Cause::NoRoute),
            (libc::EACCES, Cause::NoRoute),
            (libc::EPERM, Cause::NoRoute),
        ] {
            let r = pod_failure(&connect(errno));
            assert_eq!(
                (r.outcome, r.cause),
                (Outcome::Abstain, cause),
                "errno {errno}"
            );
        }
    }

    #[test]
    fn local_errors_are_found_deep_in_the_chain() {
        let nested = io::Error::other(io::Error::from_raw_os_error(libc::EMFILE));
        let err = ProbeError::Tls {
            addr: "10.244.0.1:443".parse().unwrap(),
            source: nested,
        };
        assert_eq!(pod_failure(&err).outcome, Outcome::Abstain);
    }

    #[test]
    fn every_webhook_failure_abstains() {
        for err in [
            connect(libc::ECONNREFUSED),
            ProbeError::Timeout(Duration::from_secs(1)),
            ProbeError::Malformed {
                addr: "10.0.0.1:443".parse().unwrap(),
                detail: "not JSON".into(),
            },
        ] {
            assert_eq!(webhook_failure(&err).outcome, Outcome::Abstain);
        }
        let malformed = webhook_failure(&ProbeError::Malformed {
            addr: "10.0.0.1:443".parse().unwrap(),
            detail: "not JSON".into(),
        });
        assert_eq!(malformed.cause, Cause::WebhookMalformed);
    }
}
