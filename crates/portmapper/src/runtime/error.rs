//! Operator errors. `category()` gives the bounded metric label, [`Class`] how a failure is
//! retried (the backoff in `backoff.rs` climbs its ladder); messages carry the context.

use std::time::Duration;

/// Everything that can fail in the operator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad flags or environment.
    #[error("configuration: {0}")]
    Config(String),
    /// Leader election could not start.
    #[error("leader election: {0}")]
    Leader(String),
    /// An API call failed.
    #[error("{action}: {source}")]
    Kube {
        /// What we were doing, e.g. `applying EndpointSlice ns/name`.
        action: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// A write was attempted while another replica holds the leader Lease.
    #[error("not the leader: writes are disabled on this replica")]
    NotLeader,
    /// A PortMapping without a namespace or name (the API never sends one).
    #[error("PortMapping has no {0}")]
    MissingMetadata(&'static str),
    /// Several writes of one pass failed: every one is kept (see [`Error::combine`]).
    #[error("{0}")]
    Writes(WriteErrors),
}

/// The failures of one pass, at least two, none of them itself a [`WriteErrors`].
#[derive(Debug)]
pub struct WriteErrors(Vec<Error>);

/// How many failures the message lists by name; a status condition and a log line stay
/// readable when hundreds of writes fail alike.
const LISTED: usize = 5;

impl WriteErrors {
    /// Every failure, in the order the writes were made.
    pub fn errors(&self) -> &[Error] {
        &self.0
    }

    /// The member whose retry matters most (see [`Class::of`]): the first of the
    /// most severe class; a `NotLeader` member only when every member is one.
    pub fn most_severe(&self) -> &Error {
        let rank = |e: &Error| Class::of(e).map(Class::severity);
        // Never empty: only `Error::combine` builds one, from two errors or more.
        let mut worst = &self.0[0];
        for err in &self.0[1..] {
            if rank(err) > rank(worst) {
                worst = err;
            }
        }
        worst
    }
}

impl std::fmt::Display for WriteErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} writes failed: ", self.0.len())?;
        for (i, err) in self.0.iter().take(LISTED).enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{err}")?;
        }
        if self.0.len() > LISTED {
            write!(f, "; and {} more", self.0.len() - LISTED)?;
        }
        Ok(())
    }
}

impl Error {
    /// Wraps a client error with what we were doing.
    pub fn kube(action: impl Into<String>, source: kube::Error) -> Self {
        // The client's write gate refused it: this replica's leadership deadline passed.
        if is_refused(&source) {
            return Self::NotLeader;
        }
        Self::Kube {
            action: action.into(),
            source,
        }
    }

    /// Every error of one pass as one: `None` when there is none, the error itself when there is
    /// one, [`Error::Writes`] otherwise (members that are themselves combined are flattened).
    /// Each is logged at debug level; the error policy warns once per change of the whole (see
    /// `backoff.rs`).
    pub fn combine(errors: Vec<Error>) -> Option<Error> {
        let mut all = Vec::with_capacity(errors.len());
        for err in errors {
            match err {
                Self::Writes(WriteErrors(members)) => all.extend(members),
                err => all.push(err),
            }
        }
        for err in &all {
            tracing::debug!(error = %err, "write failed");
        }
        if all.len() > 1 {
            return Some(Self::Writes(WriteErrors(all)));
        }
        all.pop()
    }

    /// A fixed label for the errors metric.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Config(_) => "config",
            Self::Leader(_) => "leader",
            Self::Kube { source, .. } => match source {
                kube::Error::Api(status) if status.is_conflict() => "conflict",
                kube::Error::Api(status) if status.is_forbidden() => "forbidden",
                kube::Error::Api(status) if status.is_not_found() => "not_found",
                kube::Error::Api(_) => "api",
                _ => "transport",
            },
            Self::MissingMetadata(_) => "invalid_object",
            Self::NotLeader => "not_leader",
            // The one the backoff follows, so the metric agrees with the retry.
            Self::Writes(all) => all.most_severe().category(),
        }
    }
}

/// The error a refused write fails with (turned into [`Error::NotLeader`] by [`Error::kube`]; the
/// write gate of [`crate::runtime::client`] returns it).
#[derive(Debug, thiserror::Error)]
#[error("write refused: this replica's leadership deadline has passed")]
pub struct WriteRefused;

/// Whether a client error is the gate refusing a write.
pub fn is_refused(err: &kube::Error) -> bool {
    let kube::Error::Service(source) = err else {
        return false;
    };
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(source.as_ref());
    while let Some(e) = cause {
        if e.is::<WriteRefused>() {
            return true;
        }
        cause = e.source();
    }
    false
}

/// How a failed reconcile is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Likely to pass soon: conflicts, server errors, transport failures.
    Transient,
    /// The server asked us to slow down (429, possibly saying for how long), or answered a
    /// server error saying how long to wait (a 5xx with `retryAfterSeconds`).
    Throttled {
        /// The Status' `details.retryAfterSeconds`, when the server sent one.
        retry_after: Option<Duration>,
    },
    /// Will fail again until someone changes RBAC, admission or the object.
    Permanent,
}

impl Class {
    /// The class of a reconcile error; `None` for errors that are not failures of the object
    /// (this replica is not the leader: nothing to retry until it leads again).
    ///
    /// Several failed writes ([`Error::Writes`]) take the most severe class among them
    /// (permanent, then throttled with the longest wait, then transient), ignoring `NotLeader`
    /// members unless every member is one: retrying sooner would repeat the permanent failure at
    /// the transient rate, and gains nothing, as the writes that succeeded are kept and the
    /// next pass retries every write that still differs.
    pub fn of(err: &Error) -> Option<Self> {
        Some(match err {
            Error::NotLeader => return None,
            Error::Writes(all) => {
                return all
                    .errors()
                    .iter()
                    .filter_map(Self::of)
                    .reduce(Self::more_severe);
            }
            Error::Kube {
                source: kube::Error::Api(status),
                ..
            } => {
                let retry_after = status
                    .details
                    .as_ref()
                    .map(|d| d.retry_after_seconds)
                    .filter(|s| *s > 0)
                    .map(|s| Duration::from_secs(u64::from(s)));
                if status.code == 429 || status.reason == "TooManyRequests" {
                    Self::Throttled { retry_after }
                } else if (500..=599).contains(&status.code) && retry_after.is_some() {
                    // A server error naming a wait (503 while the API server is overloaded or
                    // starting, 504 `ServerTimeout`): the server knows when trying again is
                    // worth it, so its wait is honoured as a 429's is (client-go's
                    // `checkWait` does the same for 429 and every 5xx). Without a wait, a 5xx
                    // stays on the transient ladder.
                    Self::Throttled { retry_after }
                } else if status.is_forbidden()
                    || status.is_invalid()
                    || matches!(status.code, 400 | 401)
                    || matches!(status.reason.as_str(), "Unauthorized" | "BadRequest")
                {
                    Self::Permanent
                } else {
                    Self::Transient
                }
            }
            // Connection refused or reset, timeouts, a body cut short.
            Error::Kube { .. } => Self::Transient,
            Error::Config(_) | Error::Leader(_) | Error::MissingMetadata(_) => Self::Permanent,
        })
    }

    /// Whether `err` is permanent only because the server denied it (401, 403): every member
    /// of several failed writes that is permanent is a denial. Such an answer is also what a
    /// restarted kube-apiserver gives every request until its authorizer's cache has synced.
    pub fn denied(err: &Error) -> bool {
        match err {
            Error::Writes(all) => {
                let permanent: Vec<&Error> = all
                    .errors()
                    .iter()
                    .filter(|e| Self::of(e) == Some(Self::Permanent))
                    .collect();
                !permanent.is_empty() && permanent.into_iter().all(Self::denied)
            }
            Error::Kube {
                source: kube::Error::Api(status),
                ..
            } => matches!(status.code, 401 | 403),
            _ => false,
        }
    }

    /// Orders classes by how long their retry waits: transient < throttled < permanent.
    pub fn severity(self) -> u8 {
        match self {
            Self::Transient => 0,
            Self::Throttled { .. } => 1,
            Self::Permanent => 2,
        }
    }

    /// The more severe of two classes; of two throttles, the one that waits longer.
    fn more_severe(self, other: Self) -> Self {
        match (self, other) {
            (Self::Throttled { retry_after: a }, Self::Throttled { retry_after: b }) => {
                // `None` (no wait named) orders before any wait.
                Self::Throttled {
                    retry_after: a.max(b),
                }
            }
            _ if other.severity() > self.severity() => other,
            _ => self,
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::*;

    fn api_error(slice: &str, code: u16, reason: &str) -> Error {
        Error::kube(
            format!("applying EndpointSlice default/{slice}"),
            kube::Error::Api(Status::failure("injected", reason).with_code(code).boxed()),
        )
    }

    fn combined(errors: Vec<Error>) -> Error {
        Error::combine(errors).expect("two or more errors combine")
    }

    #[test]
    fn no_error_is_none_and_one_error_stays_itself() {
        assert!(Error::combine(Vec::new()).is_none());
        let one = Error::combine(vec![api_error("web.http", 403, "Forbidden")]);
        assert!(
            matches!(one, Some(Error::Kube { .. })),
            "a single error is never wrapped: {one:?}"
        );
    }

    #[test]
    fn the_message_counts_and_names_every_failure() {
        let members = || {
            vec![
                api_error("web.http", 409, "Conflict"),
                api_error("web.https", 403, "Forbidden"),
            ]
        };
        let [a, b] = <[Error; 2]>::try_from(members()).expect("two");
        assert_eq!(
            combined(members()).to_string(),
            format!("2 writes failed: {a}; {b}")
        );
        assert!(a.to_string().contains("default/web.http"), "{a}");
        assert!(b.to_string().contains("default/web.https"), "{b}");
    }

    #[test]
    fn the_message_lists_a_bounded_number_and_counts_the_rest() {
        let members = || (0..7).map(|i| api_error(&format!("web.p{i}"), 500, "InternalError"));
        let listed: Vec<String> = members().take(5).map(|e| e.to_string()).collect();
        let message = combined(members().collect()).to_string();
        assert_eq!(
            message,
            format!("7 writes failed: {}; and 2 more", listed.join("; "))
        );
        assert!(!message.contains("web.p5"), "{message}");
    }

    #[test]
    fn combined_errors_are_flattened() {
        let inner = combined(vec![
            api_error("a", 409, "Conflict"),
            api_error("b", 409, "Conflict"),
        ]);
        let outer = combined(vec![inner, api_error("c", 403, "Forbidden")]);
        let Error::Writes(all) = &outer else {
            panic!("{outer:?}");
        };
        assert_eq!(all.errors().len(), 3);
        assert!(
            outer.to_string().starts_with("3 writes failed: "),
            "{outer}"
        );
    }

    #[test]
    fn the_category_is_the_most_severe_members() {
        let category = |errors: Vec<Error>| combined(errors).category();
        // A 403 (permanent) outranks a 409 and a 404 (transient), wherever it is.
        assert_eq!(
            category(vec![
                api_error("a", 409, "Conflict"),
                api_error("b", 404, "NotFound"),
                api_error("c", 403, "Forbidden"),
            ]),
            "forbidden"
        );
        // Among equals the first.
        assert_eq!(
            category(vec![
                api_error("a", 409, "Conflict"),
                api_error("b", 404, "NotFound"),
            ]),
            "conflict"
        );
        // A 429 (throttled) outranks a 409.
        assert_eq!(
            category(vec![
                api_error("a", 409, "Conflict"),
                api_error("b", 429, "TooManyRequests"),
            ]),
            "api"
        );
        assert_eq!(
            category(vec![Error::NotLeader, api_error("a", 409, "Conflict")]),
            "conflict"
        );
        assert_eq!(
            category(vec![Error::NotLeader, Error::NotLeader]),
            "not_leader"
        );
    }
}
