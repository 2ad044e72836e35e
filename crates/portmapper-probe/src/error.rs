//! Failures of one probe, before they are classified into a [`crate::ProbeResult`].

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use crate::target::AddrError;

/// Why a probe did not get a usable answer; `classify` decides whose fault it is.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The target has no address a probe may use.
    #[error(transparent)]
    Addr(#[from] AddrError),
    /// The check's parameters cannot form a request (bad header, bad path, bad URL).
    #[error("invalid check: {0}")]
    InvalidCheck(String),
    /// The TCP connection failed.
    #[error("connect to {addr}: {source}")]
    Connect {
        /// Destination.
        addr: SocketAddr,
        /// The socket error.
        #[source]
        source: io::Error,
    },
    /// The TLS handshake failed.
    #[error("TLS handshake with {addr}: {source}")]
    Tls {
        /// Destination.
        addr: SocketAddr,
        /// The handshake error (rustls errors arrive wrapped in `io::Error`).
        #[source]
        source: io::Error,
    },
    /// The HTTP or HTTP/2 exchange failed.
    #[error("HTTP exchange with {addr}: {source}")]
    Http {
        /// Destination.
        addr: SocketAddr,
        /// The hyper error.
        #[source]
        source: hyper::Error,
    },
    /// The peer answered an HTTP status the exchange does not accept.
    #[error("{addr} answered HTTP {status}")]
    HttpStatus {
        /// Destination.
        addr: SocketAddr,
        /// The status.
        status: http::StatusCode,
    },
    /// The answer was not what the protocol allows (e.g. a malformed gRPC frame).
    #[error("malformed answer from {addr}: {detail}")]
    Malformed {
        /// Destination.
        addr: SocketAddr,
        /// What was wrong.
        detail: String,
    },
    /// The probe did not finish in time.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The webhook host name did not resolve.
    #[error("resolve webhook host {host}: {source}")]
    Resolve {
        /// Host name from the URL.
        host: String,
        /// The resolver error.
        #[source]
        source: io::Error,
    },
    /// Every DNS lookup slot (the namespace's share or the operator's) stayed taken for the
    /// lookup's whole budget.
    #[error(
        "resolve webhook host {host}: no DNS lookup slot free within {budget:?} ({slots} lookups in flight)"
    )]
    ResolveBusy {
        /// Host name from the URL.
        host: String,
        /// Lookups allowed in flight.
        slots: usize,
        /// How long the lookup could wait.
        budget: Duration,
    },
    /// The operator's webhook egress policy does not admit the URL's host: no connection made.
    #[error("{0}")]
    EgressRefused(String),
}
