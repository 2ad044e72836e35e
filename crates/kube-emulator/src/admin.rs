//! The `/__emu/` admin API: faults, request log, compaction, restart, snapshot/restore, loading.
//!
//! | Method + path | Effect |
//! |---|---|
//! | `GET /__emu/faults` | rules with fire counts |
//! | `POST /__emu/faults` | add a rule (JSON of docs/emulator-spec.md §7.1) → `{"id":…}` |
//! | `DELETE /__emu/faults[/ID]` | remove all / one |
//! | `POST /__emu/seed` `{"seed":N}` | reseed the fault RNG |
//! | `GET /__emu/requests` / `DELETE` | request log / clear it |
//! | `GET /__emu/counts` | writes per client (field manager, else User-Agent prefix) |
//! | `POST /__emu/compact[?closeWatches=true]` | drop history (forced 410 on resume) |
//! | `POST /__emu/restart` `{"downMs":N,"history":"keep|drop"}` | refuse connections for N ms |
//! | `GET /__emu/snapshot` / `POST /__emu/restore` | whole-store snapshot |
//! | `POST /__emu/load` (YAML/JSON manifests) | create objects |
//! | `POST /__emu/ready` `{"ready":false}` | `/readyz` answers 500 until set back |
//! | `POST /__emu/reset` | clear faults and the request log |
//! | `GET /__emu/clock` | the emulator clock: `{"now": RFC3339, "manual": bool}` |
//! | `POST /__emu/clock` `{"advanceMs":N}` or `{"set":"<RFC3339>"}` | move the clock |

use std::sync::Arc;
use std::time::Duration;

use hyper::{Method, Response};
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::faults::Rule;
use crate::instance::{Body, Core, ListenerCmd, full};
use crate::request::Query;

fn ok(v: Value) -> Response<Body> {
    let mut r = Response::new(full(serde_json::to_vec(&v).unwrap_or_default()));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn err(e: ApiError) -> Response<Body> {
    let mut r = ok(e.to_status());
    *r.status_mut() = hyper::StatusCode::from_u16(e.code).unwrap_or(hyper::StatusCode::BAD_REQUEST);
    r
}

/// What a restart keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum History {
    /// Pure network blip: state and event history survive.
    Keep,
    /// Watch-cache re-init: resumed watches get 410 and relist.
    Drop,
}

/// Simulate an apiserver restart: refuse connections for `down`, close every connection.
pub async fn restart(core: &Arc<Core>, down: Duration, history: History) {
    if history == History::Drop {
        core.lock().compact_now();
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    if core.listener.send(ListenerCmd::Restart(down, tx)).is_ok() {
        let _ = rx.await;
    }
}

fn clock_doc(core: &Core) -> Response<Body> {
    let c = &core.config.clock;
    ok(json!({"now": c.now().to_string(), "manual": c.is_manual()}))
}

/// `{"advanceMs": N}` (may be negative) or `{"set": "<RFC3339>"}`.
fn move_clock(core: &Core, v: &Value) -> Result<(), ApiError> {
    let clock = &core.config.clock;
    match (v.get("advanceMs"), v.get("set")) {
        (Some(ms), None) => {
            let ms = ms
                .as_i64()
                .ok_or_else(|| ApiError::bad_request("advanceMs must be an integer"))?;
            clock.advance(jiff::SignedDuration::from_millis(ms));
        }
        (None, Some(at)) => {
            let at = at
                .as_str()
                .and_then(|s| s.parse::<jiff::Timestamp>().ok())
                .ok_or_else(|| ApiError::bad_request("set must be an RFC 3339 time"))?;
            clock.set(at);
        }
        _ => {
            return Err(ApiError::bad_request(
                "expected exactly one of {\"advanceMs\": N} or {\"set\": \"<RFC3339>\"}",
            ));
        }
    }
    core.clock_moved();
    Ok(())
}

/// Dispatch an admin request.
pub async fn handle(
    core: &Arc<Core>,
    method: &Method,
    rest: &str,
    q: &Query,
    body: &[u8],
) -> Response<Body> {
    let parse = || -> Result<Value, ApiError> {
        if body.is_empty() {
            Ok(json!({}))
        } else {
            serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("invalid JSON: {e}")))
        }
    };
    match (method.as_str(), rest) {
        ("GET", "faults") => {
            let rules: Vec<Value> = core
                .faults
                .list()
                .into_iter()
                .map(|(r, n)| json!({"rule": r, "fired": n}))
                .collect();
            ok(json!({"rules": rules}))
        }
        ("POST", "faults") => match serde_json::from_slice::<Rule>(body) {
            Ok(rule) => ok(json!({"id": core.faults.add(rule)})),
            Err(e) => err(ApiError::bad_request(format!("invalid fault rule: {e}"))),
        },
        ("DELETE", "faults") => {
            core.faults.clear();
            ok(json!({}))
        }
        ("DELETE", r) if r.starts_with("faults/") => {
            let id = &r["faults/".len()..];
            if core.faults.remove(id) {
                ok(json!({}))
            } else {
                err(ApiError::new(
                    404,
                    "NotFound",
                    format!("fault rule {id:?} not found"),
                ))
            }
        }
        ("POST", "seed") => match parse() {
            Ok(v) => {
                core.faults
                    .seed(v.get("seed").and_then(Value::as_u64).unwrap_or(0));
                ok(json!({}))
            }
            Err(e) => err(e),
        },
        ("GET", "requests") => ok(json!({"requests": core.log.entries()})),
        ("DELETE", "requests") => {
            core.log.clear();
            ok(json!({}))
        }
        ("GET", "counts") => ok(json!({"writes": core.log.write_counts()})),
        ("POST", "compact") => {
            let mut st = core.lock();
            st.compact_now();
            if q.flag("closeWatches") {
                st.close_all_watches();
            }
            ok(json!({"compactedResourceVersion": st.compacted_rv.to_string()}))
        }
        ("POST", "restart") => match parse() {
            Ok(v) => {
                let down =
                    Duration::from_millis(v.get("downMs").and_then(Value::as_u64).unwrap_or(1000));
                let history = if v.get("history").and_then(Value::as_str) == Some("drop") {
                    History::Drop
                } else {
                    History::Keep
                };
                let core = core.clone();
                // The restart closes this very connection: run it detached and answer first.
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    restart(&core, down, history).await;
                });
                ok(json!({"downMs": down.as_millis() as u64}))
            }
            Err(e) => err(e),
        },
        ("GET", "snapshot") => {
            ok(serde_json::to_value(crate::snapshot::take(&core.lock())).unwrap_or(Value::Null))
        }
        ("POST", "restore") => match serde_json::from_slice::<crate::snapshot::Snapshot>(body) {
            Ok(s) => {
                crate::snapshot::restore(&mut core.lock(), &s);
                core.kick.notify_one();
                ok(json!({}))
            }
            Err(e) => err(ApiError::bad_request(format!("invalid snapshot: {e}"))),
        },
        ("POST", "load") => {
            let text = String::from_utf8_lossy(body);
            match crate::snapshot::parse_manifests(&text) {
                Ok(objs) => {
                    let mut st = core.lock();
                    let mut created = Vec::new();
                    for o in objs {
                        crate::controllers::pass(&mut st, &core.config);
                        match crate::snapshot::load_object(&mut st, o) {
                            Ok(v) => created.push(v),
                            Err(e) => return err(e),
                        }
                    }
                    core.kick.notify_one();
                    ok(json!({"created": created.len()}))
                }
                Err(e) => err(ApiError::bad_request(e)),
            }
        }
        ("POST", "ready") => match parse() {
            Ok(v) => {
                let ready = v.get("ready").and_then(Value::as_bool).unwrap_or(true);
                core.ready.store(ready, std::sync::atomic::Ordering::SeqCst);
                ok(json!({"ready": ready}))
            }
            Err(e) => err(e),
        },
        ("GET", "clock") => clock_doc(core),
        ("POST", "clock") => match parse().and_then(|v| move_clock(core, &v)) {
            Ok(()) => clock_doc(core),
            Err(e) => err(e),
        },
        ("POST", "reset") => {
            core.faults.clear();
            core.log.clear();
            ok(json!({}))
        }
        _ => err(ApiError::new(
            404,
            "NotFound",
            format!("unknown admin endpoint {method} /__emu/{rest}"),
        )),
    }
}
