//! HTTP/1.1 transport (hyper 1): accept loop with restart simulation, per-request dispatch to
//! discovery, resources, watches and the `/__emu/` admin API, fault application and request logging.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use crate::error::{ApiError, injected_status};
use crate::faults::{FaultAction, RequestFacts, Rule};
use crate::instance::{Body, Core, ListenerCmd, boxed_stream, full};
use crate::ops::{self, Target, Writer};
use crate::reqlog::LoggedRequest;
use crate::request::{self, Output, PatchType, Query, ResourcePath, Route};
use crate::watch::WatchReq;

/// Accept connections until `shutdown` flips.
pub async fn accept_loop(
    core: Arc<Core>,
    listener: TcpListener,
    mut ctl: mpsc::UnboundedReceiver<ListenerCmd>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut listener = Some(listener);
    loop {
        let Some(l) = listener.as_ref() else { return };
        tokio::select! {
            res = l.accept() => match res {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(serve_conn(core.clone(), stream));
                }
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            cmd = ctl.recv() => match cmd {
                Some(ListenerCmd::Restart(down, done)) => {
                    info!(down_ms = down.as_millis() as u64, "simulated restart: refusing connections");
                    drop(listener.take());
                    core.close_conns.send_modify(|g| *g += 1);
                    core.lock().close_all_watches();
                    tokio::time::sleep(down).await;
                    match TcpListener::bind(core.addr).await {
                        Ok(l) => listener = Some(l),
                        Err(e) => {
                            warn!(error = %e, addr = %core.addr, "could not re-bind after simulated restart");
                            return;
                        }
                    }
                    let _ = done.send(());
                }
                None => return,
            },
            _ = shutdown.changed() => {
                core.close_conns.send_modify(|g| *g += 1);
                core.lock().close_all_watches();
                return;
            }
        }
    }
}

async fn serve_conn(core: Arc<Core>, stream: tokio::net::TcpStream) {
    let mut closed = core.close_conns.subscribe();
    let c2 = core.clone();
    let svc = hyper::service::service_fn(move |req| {
        let core = c2.clone();
        async move { Ok::<_, Infallible>(handle(core, req).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), svc);
    tokio::select! {
        r = conn => if let Err(e) = r { debug!(error = %e, "connection ended with error") },
        _ = closed.changed() => {}
    }
}

fn json_response(code: u16, body: &impl serde::Serialize, content_type: &str) -> Response<Body> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut r = Response::new(full(bytes));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = HeaderValue::from_str(content_type) {
        r.headers_mut().insert(CONTENT_TYPE, v);
    }
    r
}

fn error_response(e: &ApiError) -> Response<Body> {
    let mut r = json_response(e.code, &e.to_status(), "application/json");
    if let Some(ra) = e.retry_after {
        r.headers_mut().insert("Retry-After", HeaderValue::from(ra));
    }
    r
}

fn text(code: u16, s: &str) -> Response<Body> {
    let mut r = Response::new(full(s.to_string()));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn header(req: &Request<Incoming>, name: &str) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The version document (`Client::apiserver_version()` needs every field).
pub fn version_doc() -> Value {
    json!({"major":"1","minor":"34","gitVersion":"v1.34.0-emu","gitCommit":"0000000000000000000000000000000000000000",
           "gitTreeState":"clean","buildDate":"2025-08-27T00:00:00Z","goVersion":"go1.24.0","compiler":"gc","platform":"linux/amd64"})
}

async fn read_body(body: Incoming) -> Result<Bytes, ApiError> {
    match Limited::new(body, 3 * 1024 * 1024).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                Err(ApiError::new(
                    413,
                    "RequestEntityTooLarge",
                    "the request body is larger than 3 MiB (kube-emulator limit)",
                ))
            } else {
                Err(ApiError::bad_request(format!("reading request body: {e}")))
            }
        }
    }
}

async fn handle(core: Arc<Core>, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let raw_query = req.uri().query().unwrap_or_default().to_string();
    let query = Query::parse(Some(&raw_query));
    let mut entry = LoggedRequest {
        since_start: core.log.elapsed(),
        method: method.to_string(),
        path: path.clone(),
        query: raw_query.clone(),
        verb: String::new(),
        group: String::new(),
        resource: String::new(),
        namespace: String::new(),
        name: String::new(),
        subresource: String::new(),
        user_agent: header(&req, "user-agent").unwrap_or_default(),
        field_manager: query.get("fieldManager").unwrap_or_default().to_string(),
        patch_type: String::new(),
        status: 0,
    };
    let resp = match request::route(&path) {
        Route::Resource(rp) => {
            let deprecation = deprecation_warning(&rp);
            let mut resp = resource(&core, req, rp, &query, &mut entry).await;
            if let Some(w) = deprecation.and_then(|w| HeaderValue::from_str(w).ok()) {
                resp.headers_mut().append("Warning", w);
            }
            resp
        }
        Route::Admin(rest) => {
            let body = match read_body(req.into_body()).await {
                Ok(b) => b,
                Err(e) => return error_response(&e),
            };
            // Admin calls are not logged: tests count API traffic, not their own control traffic.
            return crate::admin::handle(&core, &method, &rest, &query, &body).await;
        }
        other => non_resource(&core, &req, other),
    };
    entry.status = resp.status().as_u16();
    core.log.push(entry);
    resp
}

fn non_resource(core: &Core, req: &Request<Incoming>, route: Route) -> Response<Body> {
    if req.method() != Method::GET {
        return error_response(&ApiError::method_not_allowed(req.uri().path()));
    }
    let output = request::negotiate(header(req, "accept").as_deref());
    let types: Vec<_> = core.lock().types.values().cloned().collect();
    match route {
        Route::Version => json_response(200, &version_doc(), "application/json"),
        Route::Health(kind)
            if kind == "readyz" && !core.ready.load(std::sync::atomic::Ordering::SeqCst) =>
        {
            text(
                500,
                "[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld (kube-emulator marked not ready)\nreadyz check failed\n",
            )
        }
        Route::Health(kind) => {
            if req.uri().query().unwrap_or_default().contains("verbose") {
                text(
                    200,
                    &format!("[+]ping ok\n[+]log ok\n[+]etcd ok\n{kind} check passed\n"),
                )
            } else {
                text(200, "ok")
            }
        }
        Route::Root => {
            let mut paths = vec!["/api".to_string(), "/api/v1".into(), "/apis".into()];
            for rt in &types {
                if !rt.group.is_empty() {
                    paths.push(format!("/apis/{}", rt.group));
                    paths.push(format!("/apis/{}/{}", rt.group, rt.version));
                }
            }
            paths.extend(
                [
                    "/healthz",
                    "/livez",
                    "/openapi/v2",
                    "/openapi/v3",
                    "/readyz",
                    "/version",
                ]
                .map(String::from),
            );
            paths.sort();
            paths.dedup();
            json_response(200, &json!({"paths": paths}), "application/json")
        }
        Route::OpenApiV2 if header(req, "accept").is_some_and(|a| a.contains("protobuf")) => {
            let mut r = Response::new(full(crate::openapi::v2_protobuf()));
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                ),
            );
            r
        }
        Route::OpenApiV2 => json_response(
            200,
            &crate::semantics::openapi_v2(&established_crds(core)),
            "application/json",
        ),
        Route::OpenApiV3(p) => match crate::semantics::openapi_v3(&established_crds(core), &p) {
            Some(doc) => json_response(200, &doc, "application/json"),
            None => text(404, "404 page not found"),
        },
        Route::CoreVersions | Route::Groups => match output {
            Some(Output::AggregatedDiscovery(v)) => json_response(
                200,
                &crate::discovery::aggregated(&types, route == Route::CoreVersions, v),
                &format!("application/json;g=apidiscovery.k8s.io;v={v};as=APIGroupDiscoveryList"),
            ),
            Some(_) if route == Route::CoreVersions => json_response(
                200,
                &crate::discovery::core_versions(&core.addr.to_string()),
                "application/json",
            ),
            Some(_) => json_response(
                200,
                &crate::discovery::group_list(&types),
                "application/json",
            ),
            None => error_response(&ApiError::not_acceptable()),
        },
        Route::Group(g) => match crate::discovery::group(&types, &g) {
            Some(d) => json_response(200, &d, "application/json"),
            None => error_response(&ApiError::no_such_resource()),
        },
        Route::GroupVersion(g, v) => match crate::discovery::resource_list(&types, &g, &v) {
            Some(d) => json_response(200, &d, "application/json"),
            None => error_response(&ApiError::no_such_resource()),
        },
        _ => text(404, "404 page not found"),
    }
}

/// The CRD objects whose types are served (OpenAPI documents describe exactly those).
fn established_crds(core: &Core) -> Vec<Value> {
    let st = core.lock();
    let served: std::collections::HashSet<&str> = st
        .types
        .values()
        .filter_map(|rt| rt.crd.as_ref().map(|c| c.crd_name.as_str()))
        .collect();
    st.objects
        .get(&crate::registry::GroupResource::new(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
        ))
        .map(|m| {
            m.iter()
                .filter(|(k, _)| served.contains(k.as_str()))
                .map(|(_, v)| (**v).clone())
                .collect()
        })
        .unwrap_or_default()
}

fn verb_of(method: &Method, has_name: bool, watch: bool) -> Option<&'static str> {
    Some(match (method.as_str(), has_name) {
        ("GET", false) if watch => "watch",
        ("GET", false) => "list",
        ("GET", true) if watch => "watch",
        ("GET", true) => "get",
        ("POST", false) => "create",
        ("PUT", true) => "update",
        ("PATCH", true) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => return None,
    })
}

/// The `Warning` every request to a deprecated resource gets, whatever its answer.
fn deprecation_warning(rp: &ResourcePath) -> Option<&'static str> {
    (rp.group.is_empty() && rp.version == "v1" && rp.resource == "endpoints").then_some(
        "299 - \"v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice\"",
    )
}

fn writer(query: &Query, ua: &str) -> Result<Writer, ApiError> {
    let manager = match query.get("fieldManager") {
        Some(m) => m.to_string(),
        None => {
            let prefix = ua.split('/').next().unwrap_or_default();
            if prefix.is_empty() {
                "unknown".to_string()
            } else {
                prefix.to_string()
            }
        }
    };
    Ok(Writer {
        manager,
        field_validation: crate::semantics::FieldValidation::parse(query.get("fieldValidation"))?,
    })
}

async fn resource(
    core: &Arc<Core>,
    req: Request<Incoming>,
    rp: ResourcePath,
    query: &Query,
    entry: &mut LoggedRequest,
) -> Response<Body> {
    let method = req.method().clone();
    let watch = rp.legacy_watch || query.flag("watch");
    entry.group = rp.group.clone();
    entry.resource = rp.resource.clone();
    entry.namespace = rp.namespace.clone().unwrap_or_default();
    entry.name = rp.name.clone().unwrap_or_default();
    entry.subresource = rp.subresource.clone().unwrap_or_default();
    let Some(verb) = verb_of(&method, rp.name.is_some(), watch) else {
        return error_response(&ApiError::method_not_allowed(&format!(
            "{method} {}",
            req.uri().path()
        )));
    };
    entry.verb = verb.to_string();
    let accept = header(&req, "accept");
    let content_type = header(&req, "content-type");
    let patch_type = if verb == "patch" {
        PatchType::from_content_type(content_type.as_deref()).ok()
    } else {
        None
    };
    entry.patch_type = patch_type
        .map(PatchType::as_str)
        .unwrap_or_default()
        .to_string();
    let body = match read_body(req.into_body()).await {
        Ok(b) => b,
        Err(e) => return error_response(&e),
    };
    // Protobuf bodies become JSON here, so everything after (the log, faults, handlers) sees one form.
    let body = if matches!(verb, "create" | "update")
        && content_type
            .as_deref()
            .is_some_and(crate::protobuf::is_protobuf)
    {
        match crate::protobuf::decode(&body).and_then(|v| {
            serde_json::to_vec(&v).map_err(|e| ApiError::internal(format!("encoding as JSON: {e}")))
        }) {
            Ok(json) => Bytes::from(json),
            Err(e) => return error_response(&e),
        }
    } else {
        body
    };
    if verb == "create" {
        // POST URLs carry no name: rules and the log see the body's.
        if let Ok(v) = serde_json::from_slice::<Value>(&body) {
            entry.name = crate::meta::str_at(&v, "/metadata/name")
                .unwrap_or_default()
                .to_string();
        }
    }
    let facts = RequestFacts {
        verb: verb.to_string(),
        group: rp.group.clone(),
        resource: rp.resource.clone(),
        namespace: entry.namespace.clone(),
        name: entry.name.clone(),
        subresource: entry.subresource.clone(),
        watch,
        field_manager: entry.field_manager.clone(),
        patch_type: entry.patch_type.clone(),
        user_agent: entry.user_agent.clone(),
    };
    let fired = core.faults.evaluate(&facts);
    let delay: u64 = fired.iter().map(|r| r.delay_ms).sum();
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    for r in &fired {
        match &r.action {
            FaultAction::Status {
                code,
                reason,
                message,
                retry_after_seconds,
            } => {
                let mut e = injected_status(*code, reason.as_deref(), message.as_deref());
                e.retry_after = *retry_after_seconds;
                if e.retry_after.is_none() && matches!(code, 429 | 503) {
                    e.retry_after = Some(1);
                }
                return error_response(&e);
            }
            FaultAction::ConflictStatus if matches!(verb, "update" | "patch") => {
                return error_response(&ApiError::conflict(
                    &rp.resource,
                    &rp.group,
                    entry.name.as_str(),
                ));
            }
            _ => {}
        }
    }
    let output = match request::negotiate(accept.as_deref()) {
        Some(o) => o,
        None => return error_response(&ApiError::not_acceptable()),
    };
    if matches!(verb, "create" | "update")
        && content_type.as_deref().is_some_and(|c| {
            !crate::protobuf::is_protobuf(c) && (c.contains("protobuf") || c.contains("cbor"))
        })
    {
        return error_response(&ApiError::unsupported_media(
            "application/json, application/yaml, application/vnd.kubernetes.protobuf (CBOR request bodies are not emulated by kube-emulator)",
        ));
    }
    if let Some((kind, namespaced)) = crate::reviews::lookup(&rp.group, &rp.version, &rp.resource) {
        return review(kind, namespaced, &rp, verb, &body);
    }
    let target = match resolve(core, &rp, verb) {
        Ok(t) => t,
        Err(e) => return error_response(&e),
    };
    let w = match writer(query, &entry.user_agent) {
        Ok(w) => w,
        Err(e) => return error_response(&e),
    };
    if verb == "watch" {
        return match start_watch(core, target, query, output, fired) {
            Ok(b) => {
                let mut r = Response::new(b);
                let ct = if output == Output::Metadata {
                    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
                } else {
                    "application/json"
                };
                r.headers_mut()
                    .insert(CONTENT_TYPE, HeaderValue::from_static(ct));
                r
            }
            Err(e) => error_response(&e),
        };
    }
    // Faults that act on the store just before the request is handled.
    for r in &fired {
        match &r.action {
            FaultAction::StaleWrite if matches!(verb, "update" | "patch") => {
                stale_write(core, &target)
            }
            FaultAction::AlreadyExistsRace if verb == "create" => {
                let st = &mut core.lock();
                if let Ok(obj) = ops::decode_body(&body) {
                    let _ = ops::create(
                        st,
                        &target,
                        obj,
                        &Writer::named("kube-emulator-fault"),
                        false,
                    );
                }
            }
            _ => {}
        }
    }
    let dry_run = match query.get("dryRun") {
        None => false,
        Some("All") if verb != "get" && verb != "list" => true,
        Some(other) => {
            return error_response(&ApiError::bad_request(format!(
                "dryRun: Unsupported value: {other:?}: supported values: \"All\" (on create, update, patch, delete)"
            )));
        }
    };
    // DELETE carries dryRun in its DeleteOptions body (kubectl does so).
    let dry_run = dry_run
        || (matches!(verb, "delete" | "deletecollection")
            && serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|b| {
                    b.get("dryRun")
                        .and_then(Value::as_array)
                        .map(|a| a.iter().any(|x| x == "All"))
                })
                .unwrap_or(false));
    let stale = fired.iter().find_map(|r| match r.action {
        FaultAction::StaleList { revisions } => Some(revisions),
        _ => None,
    });
    let result = {
        let mut st = core.lock();
        st.dry_run = dry_run;
        let r = match verb {
            "get" => ops::get(&st, &target, query, stale, output),
            "list" => ops::list(&mut st, &target, query, stale, output),
            "create" => ops::decode_body(&body).and_then(|obj| {
                if target.sub.is_some() {
                    return Err(ApiError::method_not_allowed("POST on a subresource"));
                }
                ops::create(&mut st, &target, obj, &w, false).map(|mut r| {
                    if output == Output::Metadata {
                        r.body = crate::meta::to_partial(&r.body);
                    }
                    r
                })
            }),
            "update" => ops::update(&mut st, &target, &body, &w, output),
            "patch" => PatchType::from_content_type(content_type.as_deref())
                .and_then(|pt| ops::patch(&mut st, &target, &body, pt, query, &w, output)),
            "delete" => ops::delete(&mut st, &target, query, &body, output),
            "deletecollection" => ops::delete_collection(&mut st, &target, query, &body),
            _ => Err(ApiError::method_not_allowed(verb)),
        };
        st.dry_run = false;
        r
    };
    if verb != "get" && verb != "list" {
        core.kick.notify_one();
    }
    match result {
        Ok(reply) => {
            let ct = match output {
                Output::Metadata => "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
                Output::Table => "application/json;as=Table;g=meta.k8s.io;v=v1",
                _ => "application/json",
            };
            let ct = if output == Output::Metadata && verb == "list" {
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
            } else {
                ct
            };
            let mut resp = json_response(reply.code, &reply, ct);
            for w in &reply.warnings {
                if let Ok(v) =
                    HeaderValue::from_str(&format!("299 - \"{}\"", w.replace('"', "\\\"")))
                {
                    resp.headers_mut().append("Warning", v);
                }
            }
            if let Some(ms) = fired.iter().find_map(|r| match r.action {
                FaultAction::SlowBody { ms } => Some(ms),
                _ => None,
            }) {
                return slow(resp, Duration::from_millis(ms));
            }
            resp
        }
        Err(e) => error_response(&e),
    }
}

/// An access review: create-only, answered and never stored.
fn review(
    kind: &str,
    namespaced: bool,
    rp: &ResourcePath,
    verb: &str,
    body: &[u8],
) -> Response<Body> {
    if rp.name.is_some() || rp.subresource.is_some() || namespaced != rp.namespace.is_some() {
        return error_response(&ApiError::no_such_resource());
    }
    if verb != "create" {
        return error_response(&ApiError::method_not_allowed(&format!(
            "{verb} on {}",
            crate::error::qualified(&rp.resource, &rp.group)
        )));
    }
    match ops::decode_body(body).and_then(|obj| crate::reviews::answer(kind, obj)) {
        Ok(v) => json_response(201, &v, "application/json"),
        Err(e) => error_response(&e),
    }
}

fn slow(resp: Response<Body>, d: Duration) -> Response<Body> {
    let (parts, body) = resp.into_parts();
    let stream = futures::stream::once(async move {
        tokio::time::sleep(d).await;
        body.collect().await.map(|c| Frame::data(c.to_bytes()))
    });
    Response::from_parts(parts, boxed_stream(StreamBody::new(stream)))
}

/// A real concurrent write: bump an annotation so the client's RV is stale.
fn stale_write(core: &Core, t: &Target) {
    let mut st = core.lock();
    let k = crate::store::key(t.ns.as_deref(), t.name.as_deref().unwrap_or_default());
    if let Some(cur) = st.get(&t.rt.gr(), &k) {
        let mut o = (*cur).clone();
        let n = crate::meta::str_at(&o, "/metadata/annotations/kube-emulator~1stale-write")
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
            + 1;
        let ann = crate::meta::meta_mut(&mut o)
            .entry("annotations")
            .or_insert_with(|| json!({}));
        if let Value::Object(a) = ann {
            a.insert("kube-emulator/stale-write".into(), json!(n.to_string()));
        }
        st.replace(&t.rt.gr(), k, o);
    }
}

fn resolve(core: &Core, rp: &ResourcePath, verb: &str) -> Result<Target, ApiError> {
    let st = core.lock();
    let rt = st
        .resolve(&rp.group, &rp.version, &rp.resource)
        .ok_or_else(ApiError::no_such_resource)?;
    if rt.namespaced {
        if rp.namespace.is_none() {
            if rp.name.is_some() {
                return Err(ApiError::no_such_resource());
            }
            if !matches!(verb, "list" | "watch") {
                return Err(ApiError::method_not_allowed(&format!(
                    "{verb} on all namespaces of {}",
                    rt.qualified()
                )));
            }
        }
    } else if rp.namespace.is_some() {
        return Err(ApiError::no_such_resource());
    }
    Ok(Target {
        rt,
        ns: rp.namespace.clone(),
        name: rp.name.clone(),
        sub: rp.subresource.clone(),
    })
}

fn start_watch(
    core: &Arc<Core>,
    target: Target,
    q: &Query,
    output: Output,
    faults: Vec<Rule>,
) -> Result<Body, ApiError> {
    let send_initial = q.flag("sendInitialEvents");
    let bookmarks = q.flag("allowWatchBookmarks");
    let rv_match = q.get("resourceVersionMatch");
    if send_initial && (!bookmarks || rv_match != Some("NotOlderThan")) {
        return Err(ApiError::invalid(
            "ListOptions",
            "meta.k8s.io",
            "",
            vec![crate::error::Cause::new(
                "FieldValueForbidden",
                "Forbidden: sendInitialEvents requires setting allowWatchBookmarks=true and resourceVersionMatch=NotOlderThan",
                "sendInitialEvents",
            )],
        ));
    }
    if !send_initial && rv_match.is_some() {
        return Err(ApiError::invalid(
            "ListOptions",
            "meta.k8s.io",
            "",
            vec![crate::error::Cause::new(
                "FieldValueForbidden",
                "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                "resourceVersionMatch",
            )],
        ));
    }
    let mut target = target;
    let mut fs = q.get("fieldSelector").unwrap_or_default().to_string();
    if let Some(name) = target.name.take() {
        // Single-object watch path: the same as a metadata.name field selector.
        if !fs.is_empty() {
            fs.push(',');
        }
        fs.push_str(&format!("metadata.name={name}"));
    }
    let labels = crate::selector::LabelSelector::parse(q.get("labelSelector").unwrap_or_default())?;
    let fields = crate::selector::FieldSelector::parse(
        &fs,
        &target.rt.group,
        &target.rt.plural,
        target.rt.namespaced,
    )?;
    let timeout = match q.int("timeoutSeconds")? {
        Some(s) if s > 0 => Duration::from_secs(s as u64),
        _ => core.config.watch_default_timeout,
    };
    crate::watch::start(
        core,
        WatchReq {
            target,
            labels,
            fields,
            rv: q.get("resourceVersion").map(str::to_string),
            send_initial,
            bookmarks,
            timeout,
            output,
            faults,
        },
    )
}
