//! The operator's kube clients: every request says who sends it (`User-Agent:
//! portmapper/<version> (<identity>)`), and the client that reconciles use refuses every write
//! once this replica's leadership deadline has passed. The check runs inside kube's retry
//! layer, immediately before a request (or a retry of it) leaves, so a replica that was paused
//! between deciding a write and sending it cannot publish stale state after losing the Lease.

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::BuildHasher;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::header::{HeaderValue, USER_AGENT};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder, ConfigExt};
use kube::{Client, Config};
use tower::buffer::BufferLayer;
use tower::retry::{Policy, RetryLayer};
use tower::util::BoxService;
use tower::{BoxError, Layer, Service, ServiceBuilder, ServiceExt};

use crate::runtime::error::{Error, WriteRefused};
use crate::runtime::leader::Leadership;

/// `portmapper/<version>`, with the replica's identity as a comment when there is one, so the
/// API server's audit log (and the emulator's request log) tells replicas apart.
pub fn user_agent(identity: Option<&str>) -> String {
    let product = format!("portmapper/{}", env!("CARGO_PKG_VERSION"));
    match identity {
        // A comment may not contain parentheses or control characters.
        Some(id) if !id.is_empty() => {
            let id: String = id
                .chars()
                .filter(|c| !c.is_control() && *c != '(' && *c != ')')
                .collect();
            format!("{product} ({id})")
        }
        _ => product,
    }
}

/// A client that sends our User-Agent and writes whenever asked (the Lease, tests).
pub fn plain(mut config: Config, user_agent: &str) -> Result<Client, Error> {
    set_user_agent(&mut config, user_agent)?;
    Ok(builder(&config)?.build())
}

/// A client that sends our User-Agent and refuses writes while `leadership` is not held.
pub fn gated(
    mut config: Config,
    user_agent: &str,
    leadership: Leadership,
) -> Result<Client, Error> {
    set_user_agent(&mut config, user_agent)?;
    // kube's own retry layer sits below any layer we add, so it would re-send a write after the
    // deadline: turn it off and put our (bounded) retries above the gate instead.
    let retry = config.default_retry;
    config.default_retry = false;
    let builder = builder(&config)?
        .with_layer(&crate::runtime::api_warnings::WarningLayer)
        .with_layer(&WriteGateLayer { leadership })
        // Retry needs a cloneable service; the buffer sits above the gate, so the gate still
        // runs immediately before the inner stack sends.
        .with_layer(&BufferLayer::new(1024));
    Ok(if retry {
        builder
            .with_layer(&RetryLayer::new(ShortRetry::default()))
            .build()
    } else {
        builder.build()
    })
}

/// The stack under every client: kube's own (`ClientBuilder::try_from(Config)`: TLS from the
/// kubeconfig, timeouts, base URI, credentials, extra headers, kube's retry when the config asks
/// for it), built here for one difference: its sockets set `TCP_NODELAY`, as client-go's (Go's
/// default) and reqwest's do. kube's connector leaves Nagle's algorithm on, so the first request
/// on each new connection waited for kube-apiserver's delayed ACK of the TLS handshake's last
/// record: 40 ms per new connection (a packet capture of the scale bench showed it on every
/// write that opened one, the first flip after a start among them).
fn builder(config: &Config) -> Result<ClientBuilder<ClientService>, Error> {
    let building = |e| Error::kube("building the API client", e);
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    let tls = config
        .rustls_https_connector_with_connector(tcp)
        .map_err(building)?;
    let mut connector = hyper_timeout::TimeoutConnector::new(tls);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Builder::new(TokioExecutor::new()).build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer().map_err(building)?)
        .layer(config.extra_headers_layer().map_err(building)?)
        .map_err(BoxError::from)
        .service(http)
        .map_response(|res| res.map(|body| BoxBody::new(body.map_err(BoxError::from))));
    Ok(ClientBuilder::new(
        BoxService::new(service),
        config.default_namespace.clone(),
    ))
}

/// The stack [`builder`] makes: requests in, responses with a boxed body out.
type ClientService = BoxService<Request<Body>, Response<BoxBody<Bytes, BoxError>>, BoxError>;

fn set_user_agent(config: &mut Config, user_agent: &str) -> Result<(), Error> {
    let value = HeaderValue::from_str(user_agent)
        .map_err(|e| Error::Config(format!("User-Agent {user_agent:?}: {e}")))?;
    config.headers.retain(|(name, _)| *name != USER_AGENT);
    config.headers.push((USER_AGENT, value));
    Ok(())
}

/// Retries of one request inside the client: at most [`ShortRetry::RETRIES`], short
/// (10 ms, 20 ms, with up to as much again of jitter), and only for 429 / 503 / 504 answers that
/// carry no `Retry-After` longer than zero. kube's default (`RetryPolicy::server_retry`: 15
/// retries, exponential from 5 ms to 1000 s, sleeping whatever `Retry-After` says) kept a
/// reconcile inside one request for tens of seconds after a throttling storm had ended, while
/// its status still said it was up to date (issue 11 item 2). When the server names a wait, the
/// error goes back to the reconcile at once: it reports the failure in status and its
/// PortMapping's backoff honours the wait (`backoff.rs`) without holding a worker meanwhile.
#[derive(Clone, Debug, Default)]
pub struct ShortRetry {
    attempt: u32,
}

impl ShortRetry {
    /// Retries per request.
    pub const RETRIES: u32 = 2;
    /// The first retry's pause; each further one doubles it.
    pub const BASE: Duration = Duration::from_millis(10);

    /// The pause before retrying `status` (answered with `retry_after`, the header's value),
    /// or None to hand the error back.
    fn pause(&mut self, status: StatusCode, retry_after: Option<&str>) -> Option<Duration> {
        let retryable = matches!(
            status,
            StatusCode::TOO_MANY_REQUESTS
                | StatusCode::SERVICE_UNAVAILABLE
                | StatusCode::GATEWAY_TIMEOUT
        );
        // A `Retry-After` we cannot read (an HTTP date) counts as a wait too.
        let server_wait = retry_after.is_some_and(|v| v.trim().parse::<u64>() != Ok(0));
        if !retryable || server_wait || self.attempt >= Self::RETRIES {
            return None;
        }
        let base = Self::BASE * (1 << self.attempt);
        self.attempt += 1;
        // A fresh RandomState per pause: the policy is cloned for every request, so a stored
        // one would hand every request the same jitter.
        let span = u64::try_from(base.as_millis()).unwrap_or(u64::MAX).max(1);
        let jitter_ms = RandomState::new().hash_one(self.attempt) % span;
        Some(base + Duration::from_millis(jitter_ms))
    }
}

impl<Res> Policy<Request<Body>, Response<Res>, BoxError> for ShortRetry {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        _req: &mut Request<Body>,
        result: &mut Result<Response<Res>, BoxError>,
    ) -> Option<Self::Future> {
        let response = result.as_ref().ok()?;
        let retry_after = response
            .headers()
            .get(hyper::header::RETRY_AFTER)
            .map(|v| v.to_str().unwrap_or("unreadable"));
        self.pause(response.status(), retry_after)
            .map(tokio::time::sleep)
    }

    fn clone_request(&mut self, req: &Request<Body>) -> Option<Request<Body>> {
        // Only buffered bodies can be sent twice (every `Api` call's are; watches are not retried).
        let body = req.body().try_clone()?;
        let mut clone = Request::new(body);
        *clone.method_mut() = req.method().clone();
        *clone.uri_mut() = req.uri().clone();
        *clone.version_mut() = req.version();
        *clone.headers_mut() = req.headers().clone();
        *clone.extensions_mut() = req.extensions().clone();
        Some(clone)
    }
}

/// Refuses every request but GET (get, list, watch) unless leadership is held at that instant.
#[derive(Clone)]
struct WriteGateLayer {
    leadership: Leadership,
}

impl<S> Layer<S> for WriteGateLayer {
    type Service = WriteGate<S>;

    fn layer(&self, inner: S) -> Self::Service {
        WriteGate {
            inner,
            leadership: self.leadership.clone(),
        }
    }
}

#[derive(Clone)]
struct WriteGate<S> {
    inner: S,
    leadership: Leadership,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

impl<S> Service<Request<Body>> for WriteGate<S>
where
    S: Service<Request<Body>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let read = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
        if !read && !self.leadership.is_leader() {
            tracing::debug!(method = %req.method(), uri = %req.uri(), "refusing a write: not the leader");
            return Box::pin(std::future::ready(Err(Box::new(WriteRefused) as BoxError)));
        }
        let fut = self.inner.call(req);
        Box::pin(async move { fut.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_retry_retries_twice_quickly_and_never_sleeps_a_servers_wait() {
        let mut p = ShortRetry::default();
        let first = p.pause(StatusCode::TOO_MANY_REQUESTS, None).unwrap();
        assert!(
            first >= ShortRetry::BASE && first < 2 * ShortRetry::BASE,
            "{first:?}"
        );
        let second = p.pause(StatusCode::SERVICE_UNAVAILABLE, Some("0")).unwrap();
        assert!(second >= 2 * ShortRetry::BASE && second < 4 * ShortRetry::BASE);
        assert_eq!(
            p.pause(StatusCode::GATEWAY_TIMEOUT, None),
            None,
            "a third retry"
        );

        let mut p = ShortRetry::default();
        assert_eq!(p.pause(StatusCode::TOO_MANY_REQUESTS, Some("1")), None);
        assert_eq!(
            p.pause(
                StatusCode::SERVICE_UNAVAILABLE,
                Some("Wed, 21 Oct 2026 07:28:00 GMT")
            ),
            None
        );
        for status in [
            StatusCode::INTERNAL_SERVER_ERROR,
            StatusCode::CONFLICT,
            StatusCode::FORBIDDEN,
            StatusCode::OK,
        ] {
            assert_eq!(p.pause(status, None), None, "{status}");
        }
    }

    #[test]
    fn user_agent_names_product_version_and_identity() {
        let v = env!("CARGO_PKG_VERSION");
        assert_eq!(user_agent(None), format!("portmapper/{v}"));
        assert_eq!(
            user_agent(Some("pod-1_ab(c)")),
            format!("portmapper/{v} (pod-1_abc)")
        );
    }
}
