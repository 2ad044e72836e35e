//! Request log with per-client counters, so tests can count API writes (docs/emulator-spec.md
//! §7.1).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

/// One handled request.
#[derive(Debug, Clone, Serialize)]
pub struct LoggedRequest {
    /// Time since the emulator started.
    #[serde(serialize_with = "ser_dur")]
    pub since_start: Duration,
    /// HTTP method.
    pub method: String,
    /// Path.
    pub path: String,
    /// Raw query.
    pub query: String,
    /// Kubernetes verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`) or `""` for non-resource requests.
    pub verb: String,
    /// API group.
    pub group: String,
    /// Resource (plural).
    pub resource: String,
    /// Namespace.
    pub namespace: String,
    /// Object name.
    pub name: String,
    /// Subresource.
    pub subresource: String,
    /// `User-Agent` header.
    pub user_agent: String,
    /// `fieldManager` query parameter.
    pub field_manager: String,
    /// Patch type (`merge`, `json`, `strategic`, `apply`) for PATCH.
    pub patch_type: String,
    /// HTTP status answered.
    pub status: u16,
}

fn ser_dur<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl LoggedRequest {
    /// True for create/update/patch/delete/deletecollection.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }
}

/// The log itself (bounded).
#[derive(Debug)]
pub struct RequestLog {
    start: Instant,
    entries: Mutex<Vec<LoggedRequest>>,
    cap: usize,
}

impl RequestLog {
    /// New empty log.
    pub fn new(cap: usize) -> Self {
        Self {
            start: Instant::now(),
            entries: Mutex::new(Vec::new()),
            cap,
        }
    }

    /// Elapsed since start.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Append.
    pub fn push(&self, r: LoggedRequest) {
        let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if e.len() >= self.cap {
            let drop = e.len() / 2;
            e.drain(..drop);
        }
        e.push(r);
    }

    /// Copy of all entries.
    pub fn entries(&self) -> Vec<LoggedRequest> {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Entries matching a predicate.
    pub fn filter(&self, f: impl Fn(&LoggedRequest) -> bool) -> Vec<LoggedRequest> {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|r| f(r))
            .cloned()
            .collect()
    }

    /// Number of writes by field manager (the `fieldManager` param, else the User-Agent prefix).
    pub fn writes_by_manager(&self, manager: &str) -> usize {
        self.filter(|r| r.is_write() && client_name(r) == manager)
            .len()
    }

    /// Number of writes whose User-Agent starts with `prefix`.
    pub fn writes_by_user_agent(&self, prefix: &str) -> usize {
        self.filter(|r| r.is_write() && r.user_agent.starts_with(prefix))
            .len()
    }

    /// Per-client write counts (client = field manager, else User-Agent prefix, else `unknown`).
    pub fn write_counts(&self) -> std::collections::BTreeMap<String, usize> {
        let mut m = std::collections::BTreeMap::new();
        for r in self.filter(LoggedRequest::is_write) {
            *m.entry(client_name(&r)).or_insert(0) += 1;
        }
        m
    }

    /// Forget everything.
    pub fn clear(&self) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

/// The client identity a request is counted under.
pub fn client_name(r: &LoggedRequest) -> String {
    if !r.field_manager.is_empty() {
        return r.field_manager.clone();
    }
    let ua = r.user_agent.split('/').next().unwrap_or_default();
    if ua.is_empty() {
        "unknown".into()
    } else {
        ua.to_string()
    }
}
