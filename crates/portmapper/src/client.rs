//! The operator's kube clients: every request says who sends it (`User-Agent:
//! portmapper/<version> (<identity>)`), and the client that reconciles use refuses every write
//! once this replica's leadership deadline has passed. The check runs inside kube's retry
//! layer, immediately before a request (or a retry of it) leaves, so a replica that was paused
//! between deciding a write and sending it cannot publish stale state after losing the Lease.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::header::{HeaderValue, USER_AGENT};
use hyper::{Method, Request};
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder};
use kube::{Client, Config};
use tower::buffer::BufferLayer;
use tower::retry::RetryLayer;
use tower::{BoxError, Layer, Service};

use crate::error::Error;
use crate::leader::Leadership;

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
    Client::try_from(config).map_err(|e| Error::kube("building the API client", e))
}

/// A client that sends our User-Agent and refuses writes while `leadership` is not held.
pub fn gated(
    mut config: Config,
    user_agent: &str,
    leadership: Leadership,
) -> Result<Client, Error> {
    set_user_agent(&mut config, user_agent)?;
    // kube's own retry layer sits below any layer we add, so it would re-send a write after the
    // deadline: turn it off and put the same policy above the gate instead.
    let retry = config.default_retry;
    config.default_retry = false;
    let builder = ClientBuilder::try_from(config)
        .map_err(|e| Error::kube("building the API client", e))?
        .with_layer(&WriteGateLayer { leadership })
        // Retry needs a cloneable service; the buffer sits above the gate, so the gate still
        // runs immediately before the inner stack sends.
        .with_layer(&BufferLayer::new(1024));
    Ok(if retry {
        builder
            .with_layer(&RetryLayer::new(RetryPolicy::server_retry()))
            .build()
    } else {
        builder.build()
    })
}

fn set_user_agent(config: &mut Config, user_agent: &str) -> Result<(), Error> {
    let value = HeaderValue::from_str(user_agent)
        .map_err(|e| Error::Config(format!("User-Agent {user_agent:?}: {e}")))?;
    config.headers.retain(|(name, _)| *name != USER_AGENT);
    config.headers.push((USER_AGENT, value));
    Ok(())
}

/// The error a refused write fails with (turned into [`Error::NotLeader`] by [`Error::kube`]).
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
    fn user_agent_names_product_version_and_identity() {
        let v = env!("CARGO_PKG_VERSION");
        assert_eq!(user_agent(None), format!("portmapper/{v}"));
        assert_eq!(
            user_agent(Some("pod-1_ab(c)")),
            format!("portmapper/{v} (pod-1_abc)")
        );
    }
}
