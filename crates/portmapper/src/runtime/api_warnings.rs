//! The API server's `Warning` response headers on our writes (`299 - "v1 Endpoints is
//! deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice"` on every legacy Endpoints
//! write since 1.33). A client layer hears them; the writer of a PortMapping collects those of
//! its own writes, and the reconcile reports each distinct one once per PortMapping.
//!
//! kube's `Api` methods return the decoded body only, and the layer sits inside kube's
//! `Client`, out of the writer's reach: the two meet in one process-wide registry keyed by the
//! request path (one object, or one object's subresource), which the writer empties after each
//! of its writes.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{LazyLock, Mutex};
use std::task::{Context, Poll};

use hyper::header::WARNING;
use hyper::{Method, Request, Response};
use tower::{Layer, Service};

/// Paths with warnings not yet collected; past this the registry starts afresh (a warning on a
/// write nobody collects, such as the Lease's, must not grow it forever).
const MAX_PATHS: usize = 10_000;

/// Warnings heard per request path, not yet collected.
#[derive(Debug, Default)]
pub struct ApiWarnings(Mutex<HashMap<String, BTreeSet<String>>>);

static HEARD: LazyLock<ApiWarnings> = LazyLock::new(ApiWarnings::default);

/// The registry the client layer records into.
pub fn heard() -> &'static ApiWarnings {
    &HEARD
}

impl ApiWarnings {
    fn record(&self, path: &str, texts: BTreeSet<String>) {
        let mut heard = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if heard.len() >= MAX_PATHS && !heard.contains_key(path) {
            heard.clear();
        }
        heard.entry(path.to_owned()).or_default().extend(texts);
    }

    /// The warnings heard on writes to `path` since the last call.
    pub fn take(&self, path: &str) -> BTreeSet<String> {
        let mut heard = self.0.lock().unwrap_or_else(|p| p.into_inner());
        heard.remove(path).unwrap_or_default()
    }
}

/// The text of one `Warning` header value: `<code> <agent> "<text>"` (RFC 7234 §5.5), the
/// form kube-apiserver sends; a value of another shape is kept whole.
pub fn warning_text(value: &str) -> String {
    let mut parts = value.splitn(3, ' ');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(code), Some(_agent), Some(quoted))
            if code.len() == 3 && code.bytes().all(|b| b.is_ascii_digit()) =>
        {
            let Some(quoted) = quoted.trim().strip_prefix('"') else {
                return value.to_owned();
            };
            // Up to the first unescaped quote: a warn-date may follow it.
            let mut text = String::new();
            let mut chars = quoted.chars();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => text.extend(chars.next()),
                    '"' => break,
                    c => text.push(c),
                }
            }
            text
        }
        _ => value.to_owned(),
    }
}

/// Records the `Warning` headers of every answer to a write.
#[derive(Clone, Copy, Debug, Default)]
pub struct WarningLayer;

impl<S> Layer<S> for WarningLayer {
    type Service = Warnings<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Warnings { inner }
    }
}

/// The service [`WarningLayer`] makes.
#[derive(Clone, Debug)]
pub struct Warnings<S> {
    inner: S,
}

impl<S, B, R> Service<Request<B>> for Warnings<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<R>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let write = request.method() != Method::GET;
        let path = request.uri().path().to_owned();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            if write {
                let texts: BTreeSet<String> = response
                    .headers()
                    .get_all(WARNING)
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .map(warning_text)
                    .collect();
                if !texts.is_empty() {
                    heard().record(&path, texts);
                }
            }
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_of_a_warning_is_its_quoted_part() {
        assert_eq!(
            warning_text(
                r#"299 - "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice""#
            ),
            "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice"
        );
        assert_eq!(
            warning_text(r#"299 - "a \"quoted\" word" "Sat, 01 Jan 2026 00:00:00 GMT""#),
            r#"a "quoted" word"#
        );
        assert_eq!(warning_text("not the usual shape"), "not the usual shape");
    }

    #[test]
    fn warnings_are_taken_once_per_path() {
        let registry = ApiWarnings::default();
        registry.record("/a", BTreeSet::from(["w1".to_owned()]));
        registry.record("/a", BTreeSet::from(["w1".to_owned(), "w2".to_owned()]));
        assert_eq!(
            registry.take("/a"),
            BTreeSet::from(["w1".into(), "w2".into()])
        );
        assert!(registry.take("/a").is_empty());
        assert!(registry.take("/b").is_empty());
    }
}
