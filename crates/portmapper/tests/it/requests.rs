//! The API server's request log in one shape for both backends: the emulator's own log, or
//! the real API server's audit log (`realkube up` writes one line per answered request, and
//! one when a watch begins).
//!
//! The audit log is shared by every test of the binary and grows to tens of megabytes, so it
//! is read once, incrementally, by one tail that files each request under its namespace.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Mutex;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube_emulator::reqlog::LoggedRequest;
use serde::Deserialize;
use test_support::realkube::AuditEvent;

/// One request the API server answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub verb: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub user_agent: String,
    /// The `fieldManager` query parameter, or empty.
    pub field_manager: String,
    /// The HTTP status answered.
    pub code: u16,
    /// When the server answered (a watch: when it began), on this machine's clock.
    pub at: Timestamp,
    /// When the server received the request (the audit log's `requestReceivedTimestamp`; the
    /// emulator's log has one time, `at`). A request sent just before its client stopped is
    /// received before it stopped but may be answered later.
    pub received: Timestamp,
}

impl Request {
    /// create / update / patch / delete / deletecollection.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }

    /// Answered with a 2xx status.
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.code)
    }
}

impl Request {
    /// A request of the emulator's log; `started` is when the emulator started (its log
    /// times requests from then).
    pub fn logged(r: &LoggedRequest, started: Timestamp) -> Self {
        let since_start = SignedDuration::try_from(r.since_start).unwrap_or(SignedDuration::MAX);
        let at = started
            .saturating_add(since_start)
            .unwrap_or(Timestamp::MAX);
        Self {
            verb: r.verb.clone(),
            resource: r.resource.clone(),
            subresource: r.subresource.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            user_agent: r.user_agent.clone(),
            field_manager: r.field_manager.clone(),
            code: r.status,
            at,
            received: at,
        }
    }

    /// The request an audit event records, or None for a stage that repeats one already
    /// recorded (a watch is logged when it begins and again when it ends).
    fn from_audit(line: &Stamped) -> Option<Self> {
        let e = &line.event;
        let watch = e.verb == "watch";
        let stage = if watch {
            "ResponseStarted"
        } else {
            "ResponseComplete"
        };
        (e.stage == stage).then(|| Self {
            verb: e.verb.clone(),
            resource: e.object_ref.resource.clone(),
            subresource: e.object_ref.subresource.clone(),
            namespace: e.object_ref.namespace.clone(),
            name: e.object_ref.name.clone(),
            user_agent: e.user_agent.clone(),
            field_manager: e.field_manager().unwrap_or_default().to_string(),
            code: e.response_status.code,
            at: line.stage_timestamp,
            received: line.request_received_timestamp,
        })
    }
}

/// An audit event and the time of its stage.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stamped {
    #[serde(flatten)]
    event: AuditEvent,
    stage_timestamp: Timestamp,
    request_received_timestamp: Timestamp,
}

/// What has been read of the audit log so far.
struct Tail {
    /// Bytes consumed (up to the last complete line).
    offset: u64,
    by_namespace: BTreeMap<String, Vec<Request>>,
}

/// One tail per audit log (the shared control plane's, and those of planes of a test's own).
static TAILS: Mutex<BTreeMap<std::path::PathBuf, Tail>> = Mutex::new(BTreeMap::new());

impl Tail {
    /// Reads the lines appended to `log` since the last call.
    fn catch_up(&mut self, log: &Path) {
        let Ok(mut file) = std::fs::File::open(log) else {
            return;
        };
        let mut fresh = Vec::new();
        if file.seek(SeekFrom::Start(self.offset)).is_err() || file.read_to_end(&mut fresh).is_err()
        {
            return;
        }
        // A line still being written is read next time.
        let Some(end) = fresh.iter().rposition(|b| *b == b'\n') else {
            return;
        };
        for line in fresh[..end].split(|b| *b == b'\n') {
            let Ok(stamped) = serde_json::from_slice::<Stamped>(line) else {
                continue;
            };
            if stamped.event.object_ref.namespace.is_empty() {
                continue;
            }
            if let Some(request) = Request::from_audit(&stamped) {
                self.by_namespace
                    .entry(request.namespace.clone())
                    .or_default()
                    .push(request);
            }
        }
        self.offset += u64::try_from(end + 1).expect("a line length fits u64");
    }
}

/// Every request in `namespace` the audit log at `log` holds so far, in log order.
pub fn audited(log: &Path, namespace: &str) -> Vec<Request> {
    let mut tails = TAILS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let tail = tails.entry(log.to_path_buf()).or_insert_with(|| Tail {
        offset: 0,
        by_namespace: BTreeMap::new(),
    });
    tail.catch_up(log);
    tail.by_namespace
        .get(namespace)
        .cloned()
        .unwrap_or_default()
}
