//! Kubernetes `Status` errors (docs/emulator-spec.md §1.6) and the crate's own startup errors.

use serde_json::{Value, json};

/// One entry of `Status.details.causes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueRequired`, `FieldValueInvalid`, `FieldManagerConflict`, ...
    pub reason: String,
    /// Human-readable message of this cause.
    pub message: String,
    /// Field path (`spec.ports[0].port`), may be empty.
    pub field: String,
}

impl Cause {
    /// Build a cause from its three parts.
    pub fn new(reason: &str, message: impl Into<String>, field: impl Into<String>) -> Self {
        Self {
            reason: reason.to_string(),
            message: message.into(),
            field: field.into(),
        }
    }

    fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        if !self.reason.is_empty() {
            m.insert("reason".into(), json!(self.reason));
        }
        m.insert("message".into(), json!(self.message));
        if !self.field.is_empty() {
            m.insert("field".into(), json!(self.field));
        }
        Value::Object(m)
    }

    /// `field: message` as it appears in an Invalid Status message.
    pub fn summary(&self) -> String {
        if self.field.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.field, self.message)
        }
    }
}

/// An API error answered as a JSON `Status` (every response with code ≥ 400).
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status code, also `Status.code`.
    pub code: u16,
    /// `Status.reason` (may be empty, e.g. the create-with-resourceVersion 500).
    pub reason: String,
    /// `Status.message`.
    pub message: String,
    /// `Status.details` (`None` = omitted).
    pub details: Option<Value>,
    /// `Retry-After` header and `details.retryAfterSeconds`.
    pub retry_after: Option<u64>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

fn details(name: &str, group: &str, kind: &str) -> Value {
    let mut m = serde_json::Map::new();
    if !name.is_empty() {
        m.insert("name".into(), json!(name));
    }
    if !group.is_empty() {
        m.insert("group".into(), json!(group));
    }
    if !kind.is_empty() {
        m.insert("kind".into(), json!(kind));
    }
    Value::Object(m)
}

/// `<plural>.<group>` or just `<plural>` for the core group.
pub fn qualified(plural: &str, group: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

impl ApiError {
    /// Generic constructor.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.to_string(),
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    /// Attach `details`.
    pub fn with_details(mut self, d: Value) -> Self {
        self.details = Some(d);
        self
    }

    /// 404 `<res> "<name>" not found`.
    pub fn not_found(plural: &str, group: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(plural, group)),
        )
        .with_details(details(name, group, plural))
    }

    /// 404 for unknown group/version/resource.
    pub fn no_such_resource() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    /// 404 for something the emulator knows exists in Kubernetes but does not emulate.
    pub fn not_emulated(what: &str) -> Self {
        Self::new(404, "NotFound", format!("the server could not find the requested resource ({what} is not emulated by kube-emulator)"))
            .with_details(json!({}))
    }

    /// 409 AlreadyExists.
    pub fn already_exists(plural: &str, group: &str, name: &str, terminating: bool) -> Self {
        let prefix = if terminating {
            "object is being deleted: "
        } else {
            ""
        };
        Self::new(
            409,
            "AlreadyExists",
            format!(
                "{prefix}{} \"{name}\" already exists",
                qualified(plural, group)
            ),
        )
        .with_details(details(name, group, plural))
    }

    /// 409 Conflict for a stale resourceVersion.
    pub fn conflict(plural: &str, group: &str, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                qualified(plural, group)
            ),
        )
        .with_details(details(name, group, plural))
    }

    /// 409 Conflict with a free-form message (preconditions).
    pub fn conflict_msg(plural: &str, group: &str, name: &str, msg: impl Into<String>) -> Self {
        Self::new(409, "Conflict", msg).with_details(details(name, group, plural))
    }

    /// 422 Invalid: `<Kind>.<group> "<name>" is invalid: ...`.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: Vec<Cause>) -> Self {
        let qk = qualified(kind, group);
        let body = if causes.len() == 1 {
            causes[0].summary()
        } else {
            format!(
                "[{}]",
                causes
                    .iter()
                    .map(Cause::summary)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let mut d = details(name, group, kind);
        if let Value::Object(m) = &mut d {
            m.insert(
                "causes".into(),
                Value::Array(causes.iter().map(Cause::to_json).collect()),
            );
        }
        Self::new(
            422,
            "Invalid",
            format!("{qk} \"{name}\" is invalid: {body}"),
        )
        .with_details(d)
    }

    /// 400 BadRequest.
    pub fn bad_request(msg: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", msg)
    }

    /// 403 Forbidden.
    pub fn forbidden(plural: &str, group: &str, name: &str, msg: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", msg).with_details(details(name, group, plural))
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(what: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({what})"),
        )
        .with_details(json!({}))
    }

    /// 406 NotAcceptable.
    pub fn not_acceptable() -> Self {
        Self::new(
            406,
            "NotAcceptable",
            "the server was unable to respond with a content type that the client supports (kube-emulator serves application/json, PartialObjectMetadata(List), Table and APIGroupDiscoveryList)",
        )
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media(accepted: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {accepted}"
            ),
        )
    }

    /// 500 InternalError.
    pub fn internal(msg: impl Into<String>) -> Self {
        let msg = msg.into();
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {msg}"),
        )
        .with_details(json!({"causes":[{"message": msg}]}))
    }

    /// 410 Expired.
    pub fn expired(msg: impl Into<String>) -> Self {
        Self::new(410, "Expired", msg)
    }

    /// The `Status` JSON body.
    pub fn to_status(&self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("kind".into(), json!("Status"));
        m.insert("apiVersion".into(), json!("v1"));
        m.insert("metadata".into(), json!({}));
        m.insert("status".into(), json!("Failure"));
        m.insert("message".into(), json!(self.message));
        if !self.reason.is_empty() {
            m.insert("reason".into(), json!(self.reason));
        }
        let mut d = self.details.clone();
        if let Some(ra) = self.retry_after {
            let mut dm = match d.take() {
                Some(Value::Object(m)) => m,
                _ => serde_json::Map::new(),
            };
            dm.insert("retryAfterSeconds".into(), json!(ra));
            d = Some(Value::Object(dm));
        }
        if let Some(d) = d {
            m.insert("details".into(), d);
        }
        m.insert("code".into(), json!(self.code));
        Value::Object(m)
    }
}

/// Errors starting or driving the emulator (not API answers).
#[derive(Debug, thiserror::Error)]
pub enum EmuError {
    /// Could not bind the listener.
    #[error("binding {addr}: {source}")]
    Bind {
        /// Requested address.
        addr: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Could not write the kubeconfig.
    #[error("writing kubeconfig {path}: {source}")]
    Kubeconfig {
        /// Target path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Could not build a kube client for the emulator.
    #[error("building kube client: {0}")]
    Client(String),
    /// Loading manifests failed.
    #[error("loading {path}: {message}")]
    Load {
        /// File.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// Snapshot (de)serialisation failed.
    #[error("snapshot: {0}")]
    Snapshot(String),
}

/// The Status of an injected error (reason and message default by code).
pub fn injected_status(code: u16, reason: Option<&str>, message: Option<&str>) -> ApiError {
    let default_reason = match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "",
    };
    let msg = message.map(str::to_string).unwrap_or_else(|| match code {
        429 => "the server has received too many requests and has asked us to try again later (injected)".into(),
        500 => "Internal error occurred: injected fault".into(),
        503 => "the server is currently unable to handle the request (injected)".into(),
        504 => "the server was unable to return a response in the time allotted, but may still be processing the request (injected)".into(),
        c => format!("injected fault {c}"),
    });
    ApiError::new(code, reason.unwrap_or(default_reason), msg)
}
