//! Watch streams (docs/emulator-spec.md §3.4): start position by resourceVersion, ordered events
//! from the store, bookmarks, `timeoutSeconds`, 410 as an ERROR event, `sendInitialEvents`, and the
//! watch faults.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::StreamBody;
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tracing::debug;

use crate::clock::Clock;
use crate::error::ApiError;
use crate::faults::{DropMode, FaultAction, Rule};
use crate::instance::{Body, Core};
use crate::meta;
use crate::ops::Target;
use crate::request::Output;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{EventType, JsonCache, Subscriber, WatchMsg};

/// A parsed watch request.
#[derive(Debug)]
pub struct WatchReq {
    /// What is watched.
    pub target: Target,
    /// Label filter.
    pub labels: LabelSelector,
    /// Field filter.
    pub fields: FieldSelector,
    /// `resourceVersion` parameter.
    pub rv: Option<String>,
    /// `sendInitialEvents=true`.
    pub send_initial: bool,
    /// `allowWatchBookmarks=true`.
    pub bookmarks: bool,
    /// Server-side deadline.
    pub timeout: Duration,
    /// Representation.
    pub output: Output,
    /// Fault rules that fired for this request.
    pub faults: Vec<Rule>,
}

type Tx = mpsc::Sender<Result<Frame<Bytes>, std::io::Error>>;

/// One event line (`clock`: the emulator clock, for the ages of Table rows).
fn line(etype: &str, obj: &Value, output: Output, t: &Target, clock: &Clock) -> Bytes {
    let mut buf = Vec::with_capacity(512);
    buf.extend_from_slice(b"{\"type\":\"");
    buf.extend_from_slice(etype.as_bytes());
    buf.extend_from_slice(b"\",\"object\":");
    let res = match output {
        Output::Metadata => serde_json::to_writer(&mut buf, &meta::to_partial(obj)),
        Output::Table if etype != "BOOKMARK" => serde_json::to_writer(
            &mut buf,
            &crate::table::render(
                &t.rt,
                &[obj],
                "Metadata",
                meta::rv_of(obj),
                None,
                &clock.now_rfc3339(),
            ),
        ),
        _ => serde_json::to_writer(&mut buf, obj),
    };
    if res.is_err() {
        buf.extend_from_slice(b"null");
    }
    buf.extend_from_slice(b"}\n");
    Bytes::from(buf)
}

fn bookmark(t: &Target, rv: u64, output: Output, initial_end: bool) -> Value {
    let (kind, av) = match output {
        Output::Metadata => (
            "PartialObjectMetadata".to_string(),
            "meta.k8s.io/v1".to_string(),
        ),
        _ => (t.rt.kind.clone(), t.rt.api_version()),
    };
    let mut md = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    json!({"kind": kind, "apiVersion": av, "metadata": md})
}

fn error_line(e: &ApiError) -> Bytes {
    let mut s = json!({"type": "ERROR", "object": e.to_status()}).to_string();
    s.push('\n');
    Bytes::from(s)
}

/// Validate, register and start a watch; returns the streaming body.
pub fn start(core: &Arc<Core>, w: WatchReq) -> Result<Body, ApiError> {
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(64);
    let (sub_tx, sub_rx) = mpsc::channel::<WatchMsg>(core.config.watch_buffer);
    let mut initial: Vec<WatchMsg> = Vec::new();
    let mut early_error: Option<ApiError> = None;
    let id;
    {
        let mut st = core.lock();
        id = st.id();
        let gr = w.target.rt.gr();
        let sub = Subscriber {
            id,
            gr: gr.clone(),
            namespace: w.target.ns.clone(),
            labels: w.labels.clone(),
            fields: w.fields.clone(),
            tx: sub_tx,
        };
        let rv = w.rv.as_deref().filter(|r| !r.is_empty());
        match rv {
            None | Some("0") => {
                for (_, o) in st.select(&gr, w.target.ns.as_deref(), &w.labels, &w.fields) {
                    initial.push(WatchMsg::Event(EventType::Added, o, JsonCache::default()));
                }
                if w.send_initial {
                    initial.push(WatchMsg::InitialEnd(st.rv));
                }
            }
            Some(n) => {
                let n: u64 = n
                    .parse()
                    .map_err(|_| ApiError::bad_request(format!("invalid resource version: {n}")))?;
                if w.send_initial {
                    for (_, o) in st.select(&gr, w.target.ns.as_deref(), &w.labels, &w.fields) {
                        initial.push(WatchMsg::Event(EventType::Added, o, JsonCache::default()));
                    }
                    initial.push(WatchMsg::InitialEnd(st.rv.max(n)));
                } else if n < st.compacted_rv {
                    early_error = Some(ApiError::expired(format!(
                        "too old resource version: {n} ({})",
                        st.compacted_rv + 1
                    )));
                } else if n > st.rv {
                    let mut e = ApiError::new(
                        504,
                        "Timeout",
                        format!("Too large resource version: {n}, current: {}", st.rv),
                    );
                    e.details = Some(
                        json!({"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1}),
                    );
                    early_error = Some(e);
                } else {
                    for e in st.log.iter().filter(|e| e.rv > n) {
                        if let Some(m) = sub.translate(e) {
                            initial.push(m);
                        }
                    }
                }
            }
        }
        if early_error.is_none() {
            st.watchers.push(sub);
        }
    }
    let core2 = core.clone();
    tokio::spawn(async move {
        if let Some(e) = early_error {
            let _ = tx.send(Ok(Frame::data(error_line(&e)))).await;
            return;
        }
        run(core2.clone(), w, id, initial, sub_rx, tx).await;
        core2.lock().unsubscribe(id);
        debug!(watch = id, "watch ended");
    });
    let mut rx = rx;
    let stream = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
    Ok(crate::instance::boxed_stream(StreamBody::new(stream)))
}

#[derive(Default)]
struct WatchFaults {
    drop_after_events: Option<(u64, DropMode)>,
    drop_after: Option<(Duration, DropMode)>,
    /// ERROR event (code) after N events, then close.
    gone_after: Option<(u64, u16)>,
    stall: bool,
    event_delay: Option<Duration>,
    bookmarks_disabled: bool,
    bookmark_interval: Option<Duration>,
    bookmark_lag: u64,
}

impl WatchFaults {
    fn from_rules(rules: &[Rule]) -> Self {
        let mut f = Self::default();
        for r in rules {
            match &r.action {
                FaultAction::WatchDrop {
                    after_events,
                    after_ms,
                    mode,
                } => {
                    if let Some(n) = after_events {
                        f.drop_after_events = Some((*n, *mode));
                    }
                    if let Some(ms) = after_ms {
                        f.drop_after = Some((Duration::from_millis(*ms), *mode));
                    }
                    if after_events.is_none() && after_ms.is_none() {
                        f.drop_after_events = Some((0, *mode));
                    }
                }
                FaultAction::WatchGone { after_events } => {
                    f.gone_after = Some((*after_events, 410))
                }
                FaultAction::WatchError { code, after_events } => {
                    f.gone_after = Some((*after_events, *code))
                }
                FaultAction::WatchStall => f.stall = true,
                FaultAction::EventDelay { ms } => f.event_delay = Some(Duration::from_millis(*ms)),
                FaultAction::Bookmarks {
                    disabled,
                    interval_ms,
                    lag,
                } => {
                    f.bookmarks_disabled = *disabled;
                    f.bookmark_interval = interval_ms.map(Duration::from_millis);
                    f.bookmark_lag = *lag;
                }
                _ => {}
            }
        }
        f
    }
}

/// Why the stream loop stopped.
enum Stop {
    Clean,
    Drop(DropMode),
    Gone,
}

async fn drop_stream(tx: &Tx, mode: DropMode) {
    match mode {
        DropMode::Clean => {}
        DropMode::Abrupt => {
            let _ = tx
                .send(Err(std::io::Error::other("injected abrupt watch drop")))
                .await;
        }
        DropMode::MidLine => {
            let _ = tx
                .send(Ok(Frame::data(Bytes::from_static(
                    b"{\"type\":\"MODIFIED\",\"object\":{\"kind\":",
                ))))
                .await;
            let _ = tx
                .send(Err(std::io::Error::other("injected mid-line watch drop")))
                .await;
        }
    }
}

async fn run(
    core: Arc<Core>,
    w: WatchReq,
    id: u64,
    initial: Vec<WatchMsg>,
    mut sub_rx: mpsc::Receiver<WatchMsg>,
    tx: Tx,
) {
    let f = WatchFaults::from_rules(&w.faults);
    let deadline = tokio::time::Instant::now() + w.timeout;
    if f.stall {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {}
            _ = tx.closed() => {}
        }
        return;
    }
    if let Some((0, mode)) = f.drop_after_events {
        drop_stream(&tx, mode).await;
        return;
    }
    if let Some((0, code)) = f.gone_after {
        let _ = tx
            .send(Ok(Frame::data(error_line(&gone(&core, code)))))
            .await;
        return;
    }
    let mut sent = 0u64;
    for m in initial {
        match emit(&core, &w, &f, &tx, m, &mut sent).await {
            None => {}
            Some(Stop::Clean) => return,
            Some(Stop::Drop(mode)) => return drop_stream(&tx, mode).await,
            Some(Stop::Gone) => {
                let code = f.gone_after.map(|g| g.1).unwrap_or(410);
                let _ = tx
                    .send(Ok(Frame::data(error_line(&gone(&core, code)))))
                    .await;
                return;
            }
        }
    }
    let interval = f.bookmark_interval.unwrap_or(core.config.bookmark_interval);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    let bookmarks = w.bookmarks && !f.bookmarks_disabled;
    let drop_at = f
        .drop_after
        .map(|(d, m)| (tokio::time::Instant::now() + d, m));
    loop {
        let stop = tokio::select! {
            m = sub_rx.recv() => match m {
                Some(m) => emit(&core, &w, &f, &tx, m, &mut sent).await,
                None => Some(Stop::Clean),
            },
            _ = tick.tick(), if bookmarks => {
                let mut st = core.lock();
                let rv = st.rv;
                st.send_to(id, WatchMsg::Bookmark(rv));
                None
            }
            _ = tokio::time::sleep_until(deadline) => Some(Stop::Clean),
            _ = async { match drop_at { Some((at, _)) => tokio::time::sleep_until(at).await, None => std::future::pending().await } } => {
                Some(Stop::Drop(drop_at.map(|d| d.1).unwrap_or_default()))
            }
            _ = tx.closed() => Some(Stop::Clean),
        };
        match stop {
            None => {}
            Some(Stop::Clean) => return,
            Some(Stop::Drop(mode)) => return drop_stream(&tx, mode).await,
            Some(Stop::Gone) => {
                let code = f.gone_after.map(|g| g.1).unwrap_or(410);
                let _ = tx
                    .send(Ok(Frame::data(error_line(&gone(&core, code)))))
                    .await;
                return;
            }
        }
    }
}

fn gone(core: &Core, code: u16) -> ApiError {
    if code != 410 {
        return crate::error::injected_status(code, None, None);
    }
    let st = core.lock();
    ApiError::expired(format!(
        "too old resource version: {} ({})",
        st.compacted_rv, st.rv
    ))
}

async fn emit(
    core: &Core,
    w: &WatchReq,
    f: &WatchFaults,
    tx: &Tx,
    m: WatchMsg,
    sent: &mut u64,
) -> Option<Stop> {
    let clock = core.config.clock.as_ref();
    let bytes = match m {
        WatchMsg::Event(et, obj, cache) => {
            if let Some(d) = f.event_delay {
                tokio::time::sleep(d).await;
            }
            *sent += 1;
            match w.output {
                // Plain JSON: serialise the object once for every watcher of this event.
                Output::Json => {
                    let json = cache.get_or_init(|| {
                        Bytes::from(
                            serde_json::to_vec(obj.as_ref()).unwrap_or_else(|_| b"null".to_vec()),
                        )
                    });
                    let mut buf = Vec::with_capacity(json.len() + 32);
                    buf.extend_from_slice(b"{\"type\":\"");
                    buf.extend_from_slice(et.as_str().as_bytes());
                    buf.extend_from_slice(b"\",\"object\":");
                    buf.extend_from_slice(json);
                    buf.extend_from_slice(b"}\n");
                    Bytes::from(buf)
                }
                _ => line(et.as_str(), &obj, w.output, &w.target, clock),
            }
        }
        WatchMsg::Bookmark(rv) => {
            if !w.bookmarks {
                return None;
            }
            line(
                "BOOKMARK",
                &bookmark(
                    &w.target,
                    rv.saturating_sub(f.bookmark_lag),
                    w.output,
                    false,
                ),
                Output::Json,
                &w.target,
                clock,
            )
        }
        WatchMsg::InitialEnd(rv) => line(
            "BOOKMARK",
            &bookmark(&w.target, rv, w.output, true),
            Output::Json,
            &w.target,
            clock,
        ),
    };
    if tx.send(Ok(Frame::data(bytes))).await.is_err() {
        return Some(Stop::Clean);
    }
    if let Some((n, mode)) = f.drop_after_events
        && *sent >= n
    {
        return Some(Stop::Drop(mode));
    }
    if let Some((n, _)) = f.gone_after
        && *sent >= n
    {
        return Some(Stop::Gone);
    }
    None
}
