//! A recording fake API for reconcile-level tests (controller-rs's `ApiServerVerifier` idea,
//! without a socket): a `kube::Client` over an in-process tower service that records every
//! request (method, path with query, JSON body) and answers from scripted responses, else from
//! defaults that behave like an API server accepting the write.
//!
//! A hand-written service rather than `tower-test`: `tower` (with `service_fn`) is already a
//! dependency, and `tower-test`'s mock hands requests out through a channel that the test must
//! serve concurrently with the reconcile, where this one answers inline, so a test is a plain
//! `reconcile(...).await` followed by assertions on the log.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::{Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};

/// One request the client sent.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// The JSON body (`Null` when empty or not JSON).
    pub body: Value,
    /// The `Accept` header (what the client asked the answer to be).
    pub accept: String,
}

impl Recorded {
    /// `METHOD path` without the query: what the ordered-writes assertions compare. A slice
    /// POST shows the path the slice is created at ([`object_path`]).
    pub fn line(&self) -> String {
        let path = self.uri.split('?').next().unwrap_or_default();
        format!(
            "{} {}",
            self.method,
            object_path(&self.method, path, &self.body)
        )
    }
}

/// The path a request acts on: a POST of an EndpointSlice names the object it creates (so a
/// test tells the creates of a pass apart, and scripts an answer for one of them).
fn object_path(method: &str, path: &str, body: &Value) -> String {
    let name = body["metadata"]["name"].as_str();
    match name {
        Some(name) if method == "POST" && path.ends_with("/endpointslices") => {
            format!("{path}/{name}")
        }
        _ => path.to_owned(),
    }
}

/// A scripted answer to every request whose method is `method` and whose path is `path`.
struct Scripted {
    method: &'static str,
    path: String,
    status: StatusCode,
    body: Value,
}

#[derive(Clone, Default)]
pub struct FakeApi {
    log: Arc<Mutex<Vec<Recorded>>>,
    script: Arc<Mutex<Vec<Scripted>>>,
}

impl FakeApi {
    /// A client whose every request goes to this fake.
    pub fn client(&self) -> Client {
        let fake = self.clone();
        let service = tower::service_fn(move |req: Request<Body>| {
            let fake = fake.clone();
            async move { Ok::<_, std::convert::Infallible>(fake.answer(req).await) }
        });
        Client::new(service, "default")
    }

    /// Answers every `method path` with `code` and `body` (the first script for a request
    /// wins).
    pub fn respond(&self, method: &'static str, path: &str, code: u16, body: Value) {
        let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        self.script
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                0,
                Scripted {
                    method,
                    path: path.to_owned(),
                    status,
                    body,
                },
            );
    }

    /// Answers `method path` with an API error of `code` (a `Status` body, as the API server).
    pub fn fail(&self, method: &'static str, path: &str, code: u16, reason: &str) {
        let body = json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": format!("{path} is {}", reason.to_lowercase()),
            "reason": reason, "code": code,
        });
        self.respond(method, path, code, body);
    }

    /// Drops every scripted failure: the server takes the writes again.
    pub fn clear_failures(&self) {
        self.script
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|s| !s.status.is_client_error() && !s.status.is_server_error());
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The requests so far as `METHOD path` lines; clears the log.
    pub fn take_lines(&self) -> Vec<String> {
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        log.drain(..).map(|r| r.line()).collect()
    }

    async fn answer(&self, req: Request<Body>) -> Response<Body> {
        let method = req.method().to_string();
        let uri = req.uri().to_string();
        let path = req.uri().path().to_owned();
        let accept = req
            .headers()
            .get(hyper::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = req
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Recorded {
                method: method.clone(),
                uri,
                body: body.clone(),
                accept,
            });
        let scripted = self
            .script
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|s| s.method == method && s.path == object_path(&method, &path, &body))
            .map(|s| (s.status, s.body.clone()));
        let (status, out) = scripted.unwrap_or_else(|| default_answer(&method, body));
        let bytes = serde_json::to_vec(&out).unwrap_or_default();
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Body::from(Bytes::from(bytes)))
            .unwrap_or_else(|_| Response::new(Body::empty()))
    }
}

/// What an accepting API server answers: a write returns the object stored (with a UID and a
/// resourceVersion), a delete a success Status, a read 404.
fn default_answer(method: &str, mut body: Value) -> (StatusCode, Value) {
    match method {
        "PATCH" | "POST" | "PUT" => {
            if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.entry("uid").or_insert(json!("uid-stored"));
                meta.insert("resourceVersion".into(), json!("100"));
            }
            let code = if method == "POST" {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            (code, body)
        }
        "DELETE" => (
            StatusCode::OK,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                   "reason": "NotFound", "code": 404, "message": "not found"}),
        ),
    }
}
