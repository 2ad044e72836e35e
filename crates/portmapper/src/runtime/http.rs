//! The operator's own HTTP server: `/metrics`, `/healthz` (process alive) and `/readyz` (caches
//! synced and no watch stalled). Liveness never depends on the API server, so an API outage does
//! not restart replicas.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::runtime::error::Error;
use crate::runtime::metrics::Metrics;
use crate::runtime::watch_health::{WatchHealth, WatchPolicy};

/// Shared readiness: every watch has listed its objects, and none is stalled now.
#[derive(Clone, Default)]
pub struct Readiness {
    synced: Arc<AtomicBool>,
    watches: WatchHealth,
}

impl Readiness {
    /// Readiness whose watches follow `policy` (stall threshold, backoff).
    pub fn new(policy: WatchPolicy) -> Self {
        Self {
            synced: Arc::default(),
            watches: WatchHealth::new(policy),
        }
    }

    /// Marks the caches synced.
    pub fn set_ready(&self) {
        self.synced.store(true, Ordering::Release);
    }

    /// The health of every watch (reflectors report to it).
    pub fn watches(&self) -> &WatchHealth {
        &self.watches
    }

    /// Whether the process is ready.
    pub fn is_ready(&self) -> bool {
        self.synced.load(Ordering::Acquire) && self.watches.stalled().is_empty()
    }

    /// Why the process is not ready (None: ready).
    pub fn reason(&self) -> Option<String> {
        if !self.synced.load(Ordering::Acquire) {
            return Some("caches are not synced yet\n".into());
        }
        let stalled = self.watches.stalled();
        (!stalled.is_empty()).then(|| {
            format!(
                "watches stalled (no event or bookmark, restarting): {}\n",
                stalled.join(", ")
            )
        })
    }
}

/// Binds the address; call [`serve`] with the listener (tests bind port 0 and read the address).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| Error::Config(format!("binding the HTTP server to {addr}: {e}")))
}

/// Serves until `shutdown` fires.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    shutdown: CancellationToken,
) {
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, "serving /metrics, /healthz and /readyz");
    }
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(err) => {
                warn!(error = %err, "accepting an HTTP connection");
                continue;
            }
        };
        let metrics = metrics.clone();
        let readiness = readiness.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let metrics = metrics.clone();
                let readiness = readiness.clone();
                async move { Ok::<_, Infallible>(route(&req, &metrics, &readiness)) }
            });
            if let Err(err) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                debug!(%peer, error = %err, "HTTP connection ended with an error");
            }
        });
    }
}

fn route(
    req: &Request<Incoming>,
    metrics: &Metrics,
    readiness: &Readiness,
) -> Response<Full<Bytes>> {
    if req.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET is served\n");
    }
    match req.uri().path() {
        "/healthz" | "/livez" => text(StatusCode::OK, "ok\n"),
        "/readyz" => match readiness.reason() {
            None => text(StatusCode::OK, "ok\n"),
            Some(reason) => {
                let mut response = Response::new(Full::new(Bytes::from(reason)));
                *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                response
            }
        },
        "/metrics" => match metrics.encode() {
            Ok(body) => Response::builder()
                .header(
                    "content-type",
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                )
                .body(Full::new(Bytes::from(body)))
                .unwrap_or_else(|_| text(StatusCode::INTERNAL_SERVER_ERROR, "encoding\n")),
            Err(_) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "encoding metrics failed\n",
            ),
        },
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response
}
