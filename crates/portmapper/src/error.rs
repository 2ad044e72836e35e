//! Operator errors. `category()` gives the bounded metric label; messages carry the context.

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
        }
    }
}

/// The error a refused write fails with (turned into [`Error::NotLeader`] by [`Error::kube`]; the
/// write gate of [`crate::client`] returns it).
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
