//! The resource verbs (docs/emulator-spec.md §2): get, list, create, update, patch, delete,
//! deletecollection. Every function runs with the store lock held, so each request is atomic and
//! its watch events are ordered with its commit.

use std::sync::Arc;

use base64::Engine as _;
use serde_json::{Value, json};

use crate::builtins;
use crate::error::{ApiError, Cause};
use crate::meta::{self, str_at};
use crate::registry::{GenerationPolicy, ResourceType};
use crate::request::{Output, PatchType, Query};
use crate::selector::{FieldSelector, LabelSelector};
use crate::semantics::{self, Decoded, ManagerCtx};
use crate::store::{self, ListSnapshot, State};
use crate::strategy;
use apiserver_semantics::patch::PatchError;

/// A successful answer.
#[derive(Debug)]
pub struct Reply {
    /// HTTP code.
    pub code: u16,
    /// JSON body.
    pub body: Value,
    /// A list's objects, shared with the store: written as the body's `items` when the reply is
    /// serialized. Copying them into `body` cost a list of 10,000 pods two deep copies of every
    /// pod under the store's lock.
    pub items: Option<Vec<Arc<Value>>>,
    /// Whether the items keep `apiVersion` and `kind`: a list of built-ins has them only on
    /// the list (the items are Go structs of a known type); custom resources keep them.
    pub items_type_meta: bool,
    /// `Warning` headers.
    pub warnings: Vec<String>,
}

impl Reply {
    fn ok(body: Value) -> Self {
        Self {
            code: 200,
            body,
            items: None,
            items_type_meta: true,
            warnings: Vec::new(),
        }
    }
}

impl serde::Serialize for Reply {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match (&self.items, &self.body) {
            (Some(items), Value::Object(fields)) => {
                let mut map = s.serialize_map(Some(fields.len() + 1))?;
                for (k, v) in fields {
                    map.serialize_entry(k, v)?;
                }
                map.serialize_entry("items", &Items(items, self.items_type_meta))?;
                map.end()
            }
            _ => self.body.serialize(s),
        }
    }
}

/// A list's items, with or without their `apiVersion` and `kind`.
struct Items<'a>(&'a [Arc<Value>], bool);

impl serde::Serialize for Items<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.1 {
            return s.collect_seq(self.0.iter().map(AsRef::as_ref));
        }
        s.collect_seq(self.0.iter().map(|o| WithoutTypeMeta(o)))
    }
}

struct WithoutTypeMeta<'a>(&'a Value);

impl serde::Serialize for WithoutTypeMeta<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let Value::Object(fields) = self.0 else {
            return self.0.serialize(s);
        };
        let mut map = s.serialize_map(None)?;
        for (k, v) in fields {
            if k != "apiVersion" && k != "kind" {
                map.serialize_entry(k, v)?;
            }
        }
        map.end()
    }
}

/// What one request addresses.
#[derive(Debug, Clone)]
pub struct Target {
    /// Type.
    pub rt: Arc<ResourceType>,
    /// Namespace (None for cluster-scoped types or all-namespaces collections).
    pub ns: Option<String>,
    /// Object name.
    pub name: Option<String>,
    /// Subresource.
    pub sub: Option<String>,
}

impl Target {
    fn key(&self) -> String {
        store::key(self.ns.as_deref(), self.name.as_deref().unwrap_or_default())
    }
    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or_default()
    }
    fn not_found(&self) -> ApiError {
        ApiError::not_found(&self.rt.plural, &self.rt.group, self.name())
    }
}

/// Decode a JSON (or YAML) request body into an object.
pub fn decode_body(body: &[u8]) -> Result<Value, ApiError> {
    let v: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(je) => serde_yaml::from_slice(body).map_err(|_| {
            ApiError::bad_request(format!(
                "the body of the request could not be decoded: {je}"
            ))
        })?,
    };
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    }
    Ok(v)
}

fn check_type_meta(rt: &ResourceType, obj: &mut Value) -> Result<(), ApiError> {
    let av = rt.api_version();
    match obj.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => {}
        Some(x) if x == av => {}
        Some(x) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({x}) does not match the expected API version ({av})"
            )));
        }
    }
    match obj.get("kind").and_then(Value::as_str) {
        None | Some("") => {}
        Some(x) if x == rt.kind => {}
        Some(x) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({x}) does not match the expected kind ({})",
                rt.kind
            )));
        }
    }
    if let Value::Object(m) = obj {
        m.insert("apiVersion".into(), json!(av));
        m.insert("kind".into(), json!(rt.kind));
    }
    Ok(())
}

fn check_namespace(t: &Target, obj: &mut Value) -> Result<(), ApiError> {
    let body_ns = str_at(obj, "/metadata/namespace")
        .unwrap_or_default()
        .to_string();
    match &t.ns {
        Some(ns) => {
            if !body_ns.is_empty() && body_ns != *ns {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            meta::meta_mut(obj).insert("namespace".into(), json!(ns));
        }
        None => {
            meta::meta_mut(obj).remove("namespace");
        }
    }
    Ok(())
}

fn output_object(obj: Value, output: Output) -> Value {
    match output {
        Output::Metadata => meta::to_partial(&obj),
        _ => obj,
    }
}

fn causes_to_invalid(rt: &ResourceType, name: &str, causes: Vec<Cause>) -> ApiError {
    ApiError::invalid(&rt.kind, &rt.group, name, causes)
}

/// The revision a `resourceVersion=0` ("any") read is served at under a `staleList` fault
/// lagging `stale` revisions; `None` = the current state.
fn stale_read_rv(st: &State, q: &Query, stale: Option<u64>) -> Option<u64> {
    stale
        .filter(|_| q.get("resourceVersion") == Some("0"))
        .map(|lag| st.lagging_rv(lag))
}

/// GET one object (`stale`: the lag of a `staleList` fault that fired for this request).
pub fn get(
    st: &State,
    t: &Target,
    q: &Query,
    stale: Option<u64>,
    output: Output,
) -> Result<Reply, ApiError> {
    check_sub(t)?;
    let (obj, rv) = match stale_read_rv(st, q, stale) {
        // A lagging revision is never older than the history, so get_at always answers.
        Some(at) => (st.get_at(&t.rt.gr(), &t.key(), at).flatten(), at),
        None => (st.get(&t.rt.gr(), &t.key()), st.rv),
    };
    let obj = obj.ok_or_else(|| t.not_found())?;
    if output == Output::Table {
        return Ok(Reply::ok(crate::table::render(
            &t.rt,
            &[obj.as_ref()],
            "Metadata",
            rv,
            None,
            &st.clock.now_rfc3339(),
        )));
    }
    Ok(Reply::ok(output_object(Arc::unwrap_or_clone(obj), output)))
}

/// One page of a list: items with their keys, the list RV, and the continue token with the
/// number of items after this page.
type Page = (Vec<(String, Arc<Value>)>, u64, Option<(String, usize)>);

/// Continue token: base64url(no pad) of the upstream-shaped JSON plus our snapshot id.
fn encode_continue(rv: u64, start: &str, id: u64) -> String {
    let j = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start, "emu": id});
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(j.to_string())
}

fn decode_continue(tok: &str) -> Result<(u64, String, u64), ApiError> {
    let bad = || ApiError::bad_request("invalid continue token");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(tok.trim_end_matches('='))
        .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(tok))
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let rv = v.get("rv").and_then(Value::as_u64).ok_or_else(bad)?;
    let start = v
        .get("start")
        .and_then(Value::as_str)
        .ok_or_else(bad)?
        .to_string();
    let id = v.get("emu").and_then(Value::as_u64).ok_or_else(bad)?;
    Ok((rv, start, id))
}

fn list_options_invalid(field: &str, msg: &str) -> ApiError {
    ApiError::invalid(
        "ListOptions",
        "meta.k8s.io",
        "",
        vec![Cause::new("FieldValueForbidden", msg, field)],
    )
}

/// Parse label and field selectors of a list/watch.
pub fn selectors(rt: &ResourceType, q: &Query) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let l = LabelSelector::parse(q.get("labelSelector").unwrap_or_default())?;
    let f = FieldSelector::parse(
        q.get("fieldSelector").unwrap_or_default(),
        &rt.group,
        &rt.plural,
        rt.namespaced,
    )?;
    Ok((l, f))
}

/// LIST a collection (`stale`: the lag of a `staleList` fault that fired for this request).
pub fn list(
    st: &mut State,
    t: &Target,
    q: &Query,
    stale: Option<u64>,
    output: Output,
) -> Result<Reply, ApiError> {
    let rt = &t.rt;
    let limit = q.int("limit")?.filter(|l| *l > 0).map(|l| l as usize);
    let rv_param = q.get("resourceVersion");
    let rv_match = q.get("resourceVersionMatch");
    let cont = q.get("continue");
    if cont.is_some() && rv_param.is_some_and(|r| r != "0") {
        return Err(ApiError::bad_request(
            "specifying resource version is not allowed when using continue",
        ));
    }
    if cont.is_some() && rv_match.is_some() {
        return Err(list_options_invalid(
            "resourceVersionMatch",
            "Forbidden: resourceVersionMatch is forbidden when continue is provided",
        ));
    }
    if let Some(m) = rv_match {
        if rv_param.is_none() {
            return Err(list_options_invalid(
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        match m {
            "Exact" if rv_param == Some("0") => {
                return Err(list_options_invalid(
                    "resourceVersionMatch",
                    "Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
            "Exact" | "NotOlderThan" => {}
            other => {
                return Err(ApiError::invalid(
                    "ListOptions",
                    "meta.k8s.io",
                    "",
                    vec![Cause::new(
                        "FieldValueNotSupported",
                        format!(
                            "Unsupported value: {other:?}: supported values: \"Exact\", \"NotOlderThan\""
                        ),
                        "resourceVersionMatch",
                    )],
                ));
            }
        }
    }
    let (items, list_rv, next): Page = if let Some(tok) = cont {
        let (rv, start, id) = decode_continue(tok)?;
        // Checked here too: trimming runs on writes, and the clock may have moved since.
        let ttl = st.retention.list_ttl;
        let snap = st
            .lists
            .get(&id)
            .filter(|s| s.rv == rv && st.clock.elapsed(s.at) <= ttl)
            .ok_or_else(|| {
            ApiError::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
        })?;
        let from = snap
            .items
            .partition_point(|(k, _)| k.as_str() < start.as_str());
        let rest = &snap.items[from..];
        page(rest, limit, rv, id)
    } else {
        // Exact reads (docs/emulator-spec.md §3.3: `resourceVersionMatch=Exact`, or a legacy
        // `resourceVersion=N` with `limit`) of an older revision are served from the event history.
        let mut at = stale_read_rv(st, q, stale);
        if let Some(n) = rv_param.filter(|r| *r != "0") {
            let n: u64 = n
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {n}")))?;
            let exact = rv_match == Some("Exact") || (rv_match.is_none() && limit.is_some());
            if n > st.rv {
                let mut e = ApiError::new(
                    504,
                    "Timeout",
                    format!("Too large resource version: {n}, current: {}", st.rv),
                );
                e.details = Some(
                    json!({"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1}),
                );
                return Err(e);
            }
            if exact {
                at = Some(n);
            }
        }
        let (l, f) = selectors(rt, q)?;
        let (all, rv) = match at {
            Some(n) => {
                let items = st
                    .select_at(&rt.gr(), n, t.ns.as_deref(), &l, &f)
                    .ok_or_else(|| {
                        // etcd3's message for a compacted revision (storage/etcd3/errors.go).
                        ApiError::expired("The resourceVersion for the provided list is too old.")
                    })?;
                (items, n)
            }
            None => (st.select(&rt.gr(), t.ns.as_deref(), &l, &f), st.rv),
        };
        match limit {
            Some(lim) if all.len() > lim => {
                let id = st.id();
                let r = page(&all, limit, rv, id);
                st.lists.insert(
                    id,
                    ListSnapshot {
                        rv,
                        items: all,
                        at: st.clock.now(),
                    },
                );
                r
            }
            _ => (all, rv, None),
        }
    };
    if output == Output::Table {
        let objs: Vec<&Value> = items.iter().map(|(_, o)| o.as_ref()).collect();
        let tb = crate::table::render(
            rt,
            &objs,
            q.get("includeObject").unwrap_or("Metadata"),
            list_rv,
            next.as_ref().map(|(c, _)| c.as_str()),
            &st.clock.now_rfc3339(),
        );
        return Ok(Reply::ok(tb));
    }
    let mut md = serde_json::Map::new();
    md.insert("resourceVersion".into(), json!(list_rv.to_string()));
    match next {
        Some((token, remaining)) => {
            md.insert("continue".into(), json!(token));
            md.insert("remainingItemCount".into(), json!(remaining));
        }
        // Custom resources are listed as unstructured lists, which always carry `continue`.
        None if !rt.builtin => {
            md.insert("continue".into(), json!(""));
        }
        None => {}
    }
    Ok(match output {
        Output::Metadata => Reply::ok(json!({
            "kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": md,
            "items": Value::Array(items.iter().map(|(_, o)| meta::to_partial(o)).collect()),
        })),
        _ => Reply {
            items: Some(items.into_iter().map(|(_, o)| o).collect()),
            items_type_meta: !rt.builtin,
            ..Reply::ok(json!({
                "kind": rt.list_kind, "apiVersion": rt.api_version(), "metadata": md,
            }))
        },
    })
}

fn page(rest: &[(String, Arc<Value>)], limit: Option<usize>, rv: u64, id: u64) -> Page {
    match limit {
        Some(l) if rest.len() > l => {
            let page = rest[..l].to_vec();
            let start = format!("{}\u{0}", page[l - 1].0);
            (
                page,
                rv,
                Some((encode_continue(rv, &start, id), rest.len() - l)),
            )
        }
        _ => (rest.to_vec(), rv, None),
    }
}

/// Who is writing.
#[derive(Debug, Clone)]
pub struct Writer {
    /// Field manager (param, else User-Agent prefix, else `unknown`).
    pub manager: String,
    /// `fieldValidation` of the request.
    pub field_validation: semantics::FieldValidation,
}

impl Writer {
    /// A writer with default field validation.
    pub fn named(manager: &str) -> Self {
        Self {
            manager: manager.to_string(),
            field_validation: semantics::FieldValidation::default(),
        }
    }
}

fn mctx<'a>(
    rt: &'a ResourceType,
    av: &'a str,
    w: &'a Writer,
    sub: Option<&'a str>,
    now: &'a str,
) -> ManagerCtx<'a> {
    ManagerCtx {
        manager: &w.manager,
        api_version: av,
        subresource: sub,
        now,
        rt,
    }
}

fn namespace_lifecycle(st: &State, t: &Target) -> Result<(), ApiError> {
    let Some(ns) = &t.ns else { return Ok(()) };
    match st.get(&crate::registry::GroupResource::new("", "namespaces"), ns) {
        None => Err(ApiError::not_found("namespaces", "", ns)),
        Some(n) if n.pointer("/metadata/deletionTimestamp").is_some() => {
            let mut e = ApiError::forbidden(
                &t.rt.plural,
                &t.rt.group,
                str_at(&n, "/metadata/name").unwrap_or_default(),
                format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ),
            );
            if let Some(Value::Object(d)) = &mut e.details {
                d.insert("causes".into(), json!([{"reason":"NamespaceTerminating","message":format!("namespace {ns} is being terminated"),"field":"metadata.namespace"}]));
            }
            Err(e)
        }
        Some(_) => Ok(()),
    }
}

/// What admission made of a write.
struct Admitted {
    warnings: Vec<String>,
    /// The object as decoding and defaulting left it, before the strategy and admission set
    /// fields no manager owns: what managedFields are computed from (`None`: the object itself).
    tracked: Option<Value>,
}

fn admit(
    st: &mut State,
    t: &Target,
    obj: &mut Value,
    old: Option<&Value>,
    w: &Writer,
) -> Result<Admitted, ApiError> {
    let rt = &t.rt;
    if rt.builtin {
        apiserver_semantics::goshape::fill(&rt.group, &rt.kind, obj);
    }
    builtins::default(rt, obj);
    crate::times::normalise(rt, obj);
    let mut warnings = Vec::new();
    let name = str_at(obj, "/metadata/name")
        .unwrap_or_default()
        .to_string();
    if rt.crd.is_some() {
        warnings = semantics::crd_admit(rt, obj, old, w.field_validation)?;
    }
    let tracked = strategy::applies(rt, t.sub.as_deref()).then(|| obj.clone());
    if tracked.is_some() {
        strategy::prepare(st, rt, obj, old)?;
    }
    let causes = builtins::validate(rt, obj, old);
    if !causes.is_empty() {
        return Err(causes_to_invalid(rt, &name, causes));
    }
    warnings.extend(crate::validation::validate(rt, obj, old)?);
    Ok(Admitted { warnings, tracked })
}

/// Records the write in `obj`'s managedFields, computed from the tracked object when admission
/// set fields after defaulting.
fn record(old: Option<&Value>, obj: &mut Value, tracked: Option<Value>, ctx: &ManagerCtx<'_>) {
    let Some(mut view) = tracked else {
        semantics::record_update(old, obj, ctx);
        return;
    };
    meta::normalise(&mut view);
    semantics::record_update(old, &mut view, ctx);
    let managed = view.pointer("/metadata/managedFields").cloned();
    let m = meta::meta_mut(obj);
    match managed {
        Some(v) => m.insert("managedFields".into(), v),
        None => m.remove("managedFields"),
    };
}

/// Create an object (POST, create-on-update PUT, apply-create, manifest loading).
pub fn create(
    st: &mut State,
    t: &Target,
    mut obj: Value,
    w: &Writer,
    applied: bool,
) -> Result<Reply, ApiError> {
    let rt = t.rt.clone();
    check_type_meta(&rt, &mut obj)?;
    // An apply configuration was checked by `apply`; every other body is decoded here.
    let mut warnings = if applied {
        Vec::new()
    } else {
        semantics::unknown_fields(&rt, &mut obj, w.field_validation, Decoded::Body)?
    };
    check_namespace(t, &mut obj)?;
    if str_at(&obj, "/metadata/resourceVersion").is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::new(
            500,
            "",
            "resourceVersion should not be set on objects to be created",
        ));
    }
    let now = st.clock.now_rfc3339();
    {
        let m = meta::meta_mut(&mut obj);
        for k in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "selfLink",
        ] {
            m.remove(k);
        }
        if !applied {
            m.remove("managedFields");
        }
    }
    if rt.status_subresource {
        let Value::Object(root) = &mut obj else {
            return Err(ApiError::bad_request("object expected"));
        };
        if rt.crd.is_some() {
            root.remove("status");
        }
    }
    let gen_needed = str_at(&obj, "/metadata/name").is_none_or(str::is_empty);
    let gen_prefix = str_at(&obj, "/metadata/generateName")
        .unwrap_or_default()
        .to_string();
    if gen_needed && !gen_prefix.is_empty() {
        let mut tries = 0;
        loop {
            let candidate = meta::generate_name(&gen_prefix);
            if st
                .get(&rt.gr(), &store::key(t.ns.as_deref(), &candidate))
                .is_none()
                || tries > 8
            {
                meta::meta_mut(&mut obj).insert("name".into(), json!(candidate));
                break;
            }
            tries += 1;
        }
    }
    let name = str_at(&obj, "/metadata/name")
        .unwrap_or_default()
        .to_string();
    if name.is_empty() {
        return Err(causes_to_invalid(
            &rt,
            "",
            vec![Cause::new(
                "FieldValueRequired",
                "Required value: name or generateName is required",
                "metadata.name",
            )],
        ));
    }
    {
        let m = meta::meta_mut(&mut obj);
        m.insert("uid".into(), json!(meta::new_uid()));
        m.insert("creationTimestamp".into(), json!(now));
        if rt.generation != GenerationPolicy::None {
            m.insert("generation".into(), json!(1));
        }
    }
    if let Some(s) = builtins::initial_status(&rt)
        && let Value::Object(root) = &mut obj
    {
        root.insert("status".into(), s);
    }
    let admitted = admit(st, t, &mut obj, None, w)?;
    warnings.extend(admitted.warnings);
    namespace_lifecycle(st, t)?;
    let k = store::key(t.ns.as_deref(), &name);
    if let Some(existing) = st.get(&rt.gr(), &k) {
        return Err(ApiError::already_exists(
            &rt.plural,
            &rt.group,
            &name,
            existing.pointer("/metadata/deletionTimestamp").is_some(),
        ));
    }
    if !applied {
        let av = rt.api_version();
        record(
            None,
            &mut obj,
            admitted.tracked,
            &mctx(&rt, &av, w, None, &now),
        );
    }
    meta::normalise(&mut obj);
    let stored = st.insert(&rt.gr(), k, obj);
    Ok(Reply {
        code: 201,
        body: (*stored).clone(),
        items: None,
        items_type_meta: true,
        warnings,
    })
}

/// How the RV of an update is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RvRule {
    /// PUT: body RV must match; empty only where the type allows unconditional update.
    Put,
    /// Patch/apply: checked only if the resulting body carries an RV.
    IfPresent,
}

/// Outcome of an update pipeline.
struct Updated {
    obj: Value,
    warnings: Vec<String>,
}

#[allow(clippy::too_many_arguments)]
fn update_pipeline(
    st: &mut State,
    t: &Target,
    old: Arc<Value>,
    mut new: Value,
    w: &Writer,
    rv_rule: RvRule,
    applied: bool,
) -> Result<Updated, ApiError> {
    let rt = t.rt.clone();
    let name = t.name().to_string();
    // resourceVersion precondition.
    let body_rv = str_at(&new, "/metadata/resourceVersion")
        .unwrap_or_default()
        .to_string();
    let old_rv = str_at(&old, "/metadata/resourceVersion")
        .unwrap_or_default()
        .to_string();
    if body_rv.is_empty() {
        if rv_rule == RvRule::Put && !rt.unconditional_update {
            // The store names the resource, not the kind, in this one.
            return Err(ApiError::invalid(
                &rt.plural,
                &rt.group,
                &name,
                vec![Cause::new(
                    "FieldValueInvalid",
                    "Invalid value: 0: must be specified for an update",
                    "metadata.resourceVersion",
                )],
            ));
        }
    } else if body_rv != old_rv {
        return Err(ApiError::conflict(&rt.plural, &rt.group, &name));
    }
    // uid precondition.
    let body_uid = str_at(&new, "/metadata/uid")
        .unwrap_or_default()
        .to_string();
    let old_uid = str_at(&old, "/metadata/uid")
        .unwrap_or_default()
        .to_string();
    if !body_uid.is_empty() && body_uid != old_uid {
        return Err(causes_to_invalid(
            &rt,
            &name,
            vec![Cause::new(
                "FieldValueInvalid",
                format!("Invalid value: {body_uid:?}: field is immutable"),
                "metadata.uid",
            )],
        ));
    }
    // Subresource split (docs/emulator-spec.md §2.6).
    let sub = t.sub.as_deref();
    match sub {
        Some("status") => {
            let status = new.get("status").cloned();
            let mut merged = (*old).clone();
            if let Value::Object(m) = &mut merged {
                match status {
                    Some(s) if !s.is_null() => {
                        m.insert("status".into(), s);
                    }
                    _ => {
                        m.remove("status");
                    }
                }
            }
            if applied && let Some(mf) = new.pointer("/metadata/managedFields") {
                meta::meta_mut(&mut merged).insert("managedFields".into(), mf.clone());
            }
            new = merged;
        }
        Some("finalize") => {
            let fin = new.pointer("/spec/finalizers").cloned();
            let mut merged = (*old).clone();
            if let Some(spec) = merged.get_mut("spec").and_then(Value::as_object_mut) {
                match fin {
                    Some(f) => spec.insert("finalizers".into(), f),
                    None => spec.remove("finalizers"),
                };
            }
            new = merged;
        }
        _ => {
            if rt.status_subresource
                && let Value::Object(m) = &mut new
            {
                match old.get("status") {
                    Some(s) => m.insert("status".into(), s.clone()),
                    None => m.remove("status"),
                };
            }
        }
    }
    check_type_meta(&rt, &mut new)?;
    // System metadata is restored from the stored object.
    {
        // Borrowed: a copy would include the stored managedFields.
        let empty = serde_json::Map::new();
        let om = old
            .get("metadata")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let m = meta::meta_mut(&mut new);
        for k in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "name",
            "namespace",
        ] {
            match om.get(k) {
                Some(v) => m.insert(k.to_string(), v.clone()),
                None => m.remove(k),
            };
        }
        if !applied {
            match om.get("managedFields") {
                Some(v) => m.insert("managedFields".into(), v.clone()),
                None => m.remove("managedFields"),
            };
        }
        m.insert("resourceVersion".into(), json!(old_rv));
    }
    let terminating = old.pointer("/metadata/deletionTimestamp").is_some();
    if terminating {
        let before = meta::finalizers(&old);
        let added: Vec<String> = meta::finalizers(&new)
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        if !added.is_empty() {
            return Err(causes_to_invalid(
                &rt,
                &name,
                vec![Cause::new(
                    "FieldValueForbidden",
                    format!(
                        "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                    ),
                    "metadata.finalizers",
                )],
            ));
        }
    }
    // /status writes are pruned, defaulted and validated like any write (CR status schemas, CEL).
    let admitted = if sub == Some("finalize") {
        Admitted {
            warnings: Vec::new(),
            tracked: None,
        }
    } else {
        admit(st, t, &mut new, Some(&old), w)?
    };
    let warnings = admitted.warnings;
    meta::normalise(&mut new);
    // Generation (docs/emulator-spec.md §2.7): never through /status, never on metadata-only
    // changes.
    if sub.is_none() && rt.generation != GenerationPolicy::None {
        let spec_changed = !meta::same_spec_part(&old, &new, rt.status_subresource);
        let labels_changed = rt.generation == GenerationPolicy::SpecOrLabels
            && old.pointer("/metadata/labels") != new.pointer("/metadata/labels");
        if spec_changed || labels_changed {
            let g = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                + 1;
            meta::meta_mut(&mut new).insert("generation".into(), json!(g));
        }
    }
    // No-op detection (rule 5) happens before bookkeeping so timestamps cannot defeat it. An
    // apply whose result only differs in entry times (e.g. it re-sent a field the server
    // defaults) is a no-op too.
    if meta::same_without_managed_fields(&new, &old)
        && (!applied || meta::same_managed_fields_sans_time(&new, &old))
    {
        return Ok(Updated {
            obj: (*old).clone(),
            warnings,
        });
    }
    if !applied {
        let now = st.clock.now_rfc3339();
        let av = rt.api_version();
        record(
            Some(&old),
            &mut new,
            admitted.tracked,
            &mctx(&rt, &av, w, sub, &now),
        );
        meta::normalise(&mut new);
    }
    let k = t.key();
    // Finalizer removal completes a pending deletion (docs/emulator-spec.md §2.8).
    if terminating && meta::finalizers(&new).is_empty() && rt.plural != "namespaces" {
        st.remove(&rt.gr(), &k);
        return Ok(Updated { obj: new, warnings });
    }
    let stored = st.replace(&rt.gr(), k, new);
    Ok(Updated {
        obj: (*stored).clone(),
        warnings,
    })
}

fn check_name(t: &Target, obj: &Value) -> Result<(), ApiError> {
    let body_name = str_at(obj, "/metadata/name").unwrap_or_default();
    if !body_name.is_empty() && body_name != t.name() {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({})",
            t.name()
        )));
    }
    Ok(())
}

fn check_sub(t: &Target) -> Result<(), ApiError> {
    match t.sub.as_deref() {
        None => Ok(()),
        Some("status") if t.rt.status_subresource => Ok(()),
        Some("finalize") if t.rt.plural == "namespaces" && t.rt.group.is_empty() => Ok(()),
        Some(s) => Err(ApiError::not_emulated(&format!(
            "subresource {s:?} of {}",
            t.rt.qualified()
        ))),
    }
}

/// PUT.
pub fn update(
    st: &mut State,
    t: &Target,
    body: &[u8],
    w: &Writer,
    output: Output,
) -> Result<Reply, ApiError> {
    check_sub(t)?;
    let mut obj = decode_body(body)?;
    let warnings = semantics::unknown_fields(&t.rt, &mut obj, w.field_validation, Decoded::Body)?;
    check_name(t, &obj)?;
    check_namespace(t, &mut obj)?;
    let Some(old) = st.get(&t.rt.gr(), &t.key()) else {
        if t.rt.create_on_update && t.sub.is_none() {
            meta::meta_mut(&mut obj).insert("name".into(), json!(t.name()));
            meta::meta_mut(&mut obj).remove("resourceVersion");
            let r = create(st, t, obj, w, false)?;
            return Ok(Reply {
                body: output_object(r.body, output),
                items: None,
                items_type_meta: true,
                warnings: [warnings, r.warnings].concat(),
                ..r
            });
        }
        return Err(t.not_found());
    };
    let u = update_pipeline(st, t, old, obj, w, RvRule::Put, false)?;
    Ok(Reply {
        code: 200,
        body: output_object(u.obj, output),
        items: None,
        items_type_meta: true,
        warnings: [warnings, u.warnings].concat(),
    })
}

/// PATCH (merge, JSON, strategic, apply).
pub fn patch(
    st: &mut State,
    t: &Target,
    body: &[u8],
    pt: PatchType,
    q: &Query,
    w: &Writer,
    output: Output,
) -> Result<Reply, ApiError> {
    check_sub(t)?;
    let rt = t.rt.clone();
    if q.flag("force") && pt != PatchType::Apply {
        return Err(ApiError::invalid(
            "PatchOptions",
            "meta.k8s.io",
            "",
            vec![Cause::new(
                "FieldValueForbidden",
                "Forbidden: may not be specified for non-apply patch",
                "force",
            )],
        ));
    }
    if pt == PatchType::Strategic && !rt.builtin {
        return Err(ApiError::unsupported_media(
            "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        ));
    }
    if pt == PatchType::Apply {
        // Apply names its manager: the User-Agent stands in for other writes only.
        if q.get("fieldManager").is_none_or(str::is_empty) {
            return Err(ApiError::invalid(
                "PatchOptions",
                "meta.k8s.io",
                "",
                vec![Cause::new(
                    "FieldValueRequired",
                    "Required value: is required for apply patch",
                    "fieldManager",
                )],
            ));
        }
        return apply(st, t, body, q.flag("force"), w, output);
    }
    let old = st.get(&rt.gr(), &t.key()).ok_or_else(|| t.not_found())?;
    let patch_doc: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    let patched = match pt {
        PatchType::Merge => Ok(apiserver_semantics::patch::merge_patch(&old, &patch_doc)),
        PatchType::Json => apiserver_semantics::patch::json_patch(&old, &patch_doc),
        PatchType::Strategic => {
            apiserver_semantics::patch::strategic_merge_patch(&old, &patch_doc, &rt.group, &rt.kind)
        }
        PatchType::Apply => Ok((*old).clone()),
    };
    let doc = patched.map_err(|e| match e {
        PatchError::BadRequest(m) => ApiError::bad_request(m),
        // Upstream answers a failed operation with a generic message (which one failed is
        // only in its log).
        PatchError::Invalid(_) => ApiError::new(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        )
        .with_details(json!({})),
        PatchError::UnsupportedMediaType(m) => ApiError::new(415, "UnsupportedMediaType", m),
    })?;
    if !doc.is_object() {
        return Err(ApiError::bad_request("patch result is not an object"));
    }
    // Upstream decodes the patched object into the Go type: what the patch added that the
    // type does not declare is dropped (the stored object has no such fields).
    let mut doc = doc;
    let from = match pt {
        PatchType::Strategic => Decoded::StrategicPatch(&patch_doc),
        _ => Decoded::Patch,
    };
    let warnings = semantics::unknown_fields(&rt, &mut doc, w.field_validation, from)?;
    check_name(t, &doc)?;
    let u = update_pipeline(st, t, old, doc, w, RvRule::IfPresent, false)?;
    Ok(Reply {
        code: 200,
        body: output_object(u.obj, output),
        items: None,
        items_type_meta: true,
        warnings: [warnings, u.warnings].concat(),
    })
}

fn apply(
    st: &mut State,
    t: &Target,
    body: &[u8],
    force: bool,
    w: &Writer,
    output: Output,
) -> Result<Reply, ApiError> {
    let rt = t.rt.clone();
    let mut config = decode_body(body)?;
    let av = rt.api_version();
    let (cav, ckind) = (
        str_at(&config, "/apiVersion")
            .unwrap_or_default()
            .to_string(),
        str_at(&config, "/kind").unwrap_or_default().to_string(),
    );
    if cav != av || ckind != rt.kind {
        // The GroupVersionKind as Go prints it: `group/version, Kind=K`.
        let gv = if cav.contains('/') {
            cav.clone()
        } else {
            format!("/{cav}")
        };
        return Err(ApiError::bad_request(format!(
            "invalid object type: {gv}, Kind={ckind}"
        )));
    }
    // A missing name is taken from the URL (the merged object carries it, as upstream checks the result).
    if str_at(&config, "/metadata/name").is_none_or(str::is_empty) {
        meta::meta_mut(&mut config).insert("name".into(), json!(t.name()));
    }
    if str_at(&config, "/metadata/name") != Some(t.name()) {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({})",
            str_at(&config, "/metadata/name").unwrap_or_default(),
            t.name()
        )));
    }
    if config.pointer("/metadata/managedFields").is_some() {
        return Err(ApiError::bad_request("metadata.managedFields must be nil"));
    }
    // The two conversions name the object differently: the time error with the namespace the
    // configuration carries, the undeclared-field error with the request's.
    semantics::builtin_apply_times(&rt, &config)?;
    check_namespace(t, &mut config)?;
    semantics::builtin_apply_fields(&rt, &config)?;
    let now = st.clock.now_rfc3339();
    let sub = t.sub.as_deref();
    let ctx = mctx(&rt, &av, w, sub, &now);
    let old = st.get(&rt.gr(), &t.key());
    match old {
        None => {
            if sub.is_some() {
                return Err(t.not_found());
            }
            meta::meta_mut(&mut config).remove("resourceVersion");
            let merged = semantics::apply(None, &config, force, &ctx)?;
            let r = create(st, t, merged, w, true)?;
            Ok(Reply {
                body: output_object(r.body, output),
                ..r
            })
        }
        Some(old) => {
            // An RV in the apply body is a precondition (kube-coordinate relies on it).
            if let Some(rv) = str_at(&config, "/metadata/resourceVersion").filter(|s| !s.is_empty())
                && Some(rv) != str_at(&old, "/metadata/resourceVersion")
            {
                return Err(ApiError::conflict(&rt.plural, &rt.group, t.name()));
            }
            let merged = semantics::apply(Some(&old), &config, force, &ctx)?;
            let u = update_pipeline(st, t, old, merged, w, RvRule::IfPresent, true)?;
            Ok(Reply {
                code: 200,
                body: output_object(u.obj, output),
                items: None,
                items_type_meta: true,
                warnings: u.warnings,
            })
        }
    }
}

/// Options of a delete.
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    /// `Background` | `Foreground` | `Orphan`.
    pub propagation: Option<String>,
    /// uid precondition.
    pub pre_uid: Option<String>,
    /// RV precondition.
    pub pre_rv: Option<String>,
    /// `gracePeriodSeconds` (query or body).
    pub grace: Option<i64>,
}

impl DeleteOpts {
    /// From query + JSON body (body wins).
    pub fn parse(q: &Query, body: &[u8]) -> Result<Self, ApiError> {
        let mut o = DeleteOpts {
            propagation: q.get("propagationPolicy").map(str::to_string),
            grace: q.int("gracePeriodSeconds")?,
            ..Default::default()
        };
        if q.flag("orphanDependents") {
            o.propagation = Some("Orphan".into());
        }
        if !body.iter().all(u8::is_ascii_whitespace) {
            let b: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?;
            if let Some(p) = b.get("propagationPolicy").and_then(Value::as_str) {
                o.propagation = Some(p.to_string());
            }
            if b.get("orphanDependents").and_then(Value::as_bool) == Some(true) {
                o.propagation = Some("Orphan".into());
            }
            o.pre_uid = b
                .pointer("/preconditions/uid")
                .and_then(Value::as_str)
                .map(str::to_string);
            o.pre_rv = b
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str)
                .map(str::to_string);
            if let Some(g) = b.get("gracePeriodSeconds").and_then(Value::as_i64) {
                o.grace = Some(g);
            }
        }
        if let Some(p) = &o.propagation
            && !matches!(p.as_str(), "Background" | "Foreground" | "Orphan")
        {
            return Err(ApiError::invalid(
                "DeleteOptions",
                "meta.k8s.io",
                "",
                vec![Cause::new(
                    "FieldValueNotSupported",
                    format!(
                        "Unsupported value: {p:?}: supported values: \"Background\", \"Foreground\", \"Orphan\""
                    ),
                    "propagationPolicy",
                )],
            ));
        }
        Ok(o)
    }
}

/// Result of deleting one object.
pub enum Deleted {
    /// Deletion pending (finalizers): the updated object.
    Pending(Value),
    /// Gone: the last state.
    Gone(Value),
}

/// Delete one object by key (also used by GC and the namespace controller).
pub fn delete_one(
    st: &mut State,
    rt: &Arc<ResourceType>,
    k: &str,
    opts: &DeleteOpts,
) -> Result<Deleted, ApiError> {
    let name = k.rsplit('/').next().unwrap_or(k).to_string();
    let old = st
        .get(&rt.gr(), k)
        .ok_or_else(|| ApiError::not_found(&rt.plural, &rt.group, &name))?;
    // `BeforeDelete` names the kind where other conflicts name the resource.
    if let Some(u) = &opts.pre_uid {
        let cur = str_at(&old, "/metadata/uid").unwrap_or_default();
        if u != cur {
            return Err(ApiError::conflict_msg(
                &rt.kind,
                &rt.group,
                &name,
                format!(
                    "Operation cannot be fulfilled on {} {name:?}: the UID in the precondition ({u}) does not match the UID in record ({cur}). The object might have been deleted and then recreated",
                    crate::error::qualified(&rt.kind, &rt.group)
                ),
            ));
        }
    }
    if let Some(r) = &opts.pre_rv {
        let cur = str_at(&old, "/metadata/resourceVersion").unwrap_or_default();
        if r != cur {
            return Err(ApiError::conflict_msg(
                &rt.kind,
                &rt.group,
                &name,
                format!(
                    "Operation cannot be fulfilled on {} {name:?}: the ResourceVersion in the precondition ({r}) does not match the ResourceVersion in record ({cur}). The object might have been modified",
                    crate::error::qualified(&rt.kind, &rt.group)
                ),
            ));
        }
    }
    let is_ns = rt.group.is_empty() && rt.plural == "namespaces";
    if is_ns && matches!(name.as_str(), "default" | "kube-system" | "kube-public") {
        return Err(ApiError::forbidden(
            &rt.plural,
            &rt.group,
            &name,
            format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted"),
        ));
    }
    let mut fins = meta::finalizers(&old);
    match opts.propagation.as_deref() {
        Some("Orphan") if !fins.iter().any(|f| f == "orphan") => fins.push("orphan".into()),
        Some("Foreground") if !fins.iter().any(|f| f == "foregroundDeletion") => {
            fins.push("foregroundDeletion".into())
        }
        _ => {}
    }
    let terminating = old.pointer("/metadata/deletionTimestamp").is_some();
    let graceful = is_pod(rt);
    if graceful
        && st.graceful_pod_deletion
        && let Some(d) = graceful_pod_delete(st, rt, k, &old, opts, &fins, terminating)
    {
        return Ok(d);
    }
    if terminating {
        if fins != meta::finalizers(&old) {
            let mut new = (*old).clone();
            meta::set_finalizers(&mut new, &fins);
            let stored = st.replace(&rt.gr(), k.to_string(), new);
            return Ok(Deleted::Pending((*stored).clone()));
        }
        return Ok(Deleted::Pending((*old).clone()));
    }
    if !fins.is_empty() || is_ns {
        let mut new = (*old).clone();
        meta::set_finalizers(&mut new, &fins);
        let m = meta::meta_mut(&mut new);
        m.insert("deletionTimestamp".into(), json!(st.clock.now_rfc3339()));
        // The namespace registry's own delete sets no grace period.
        if !is_ns {
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
        }
        if let Some(g) = m
            .get("generation")
            .and_then(Value::as_i64)
            .filter(|g| *g > 0)
        {
            m.insert("generation".into(), json!(g + 1));
        }
        if is_ns && let Value::Object(root) = &mut new {
            root.insert("status".into(), json!({"phase": "Terminating"}));
        }
        let stored = st.replace(&rt.gr(), k.to_string(), new);
        return Ok(Deleted::Pending((*stored).clone()));
    }
    let now = st.clock.now_rfc3339();
    let last = st
        .remove_as(&rt.gr(), k, |last| {
            if graceful {
                mark_deleting(last, &now, 0);
            }
        })
        .ok_or_else(|| ApiError::not_found(&rt.plural, &rt.group, &name))?;
    Ok(Deleted::Gone((*last).clone()))
}

fn is_pod(rt: &ResourceType) -> bool {
    rt.group.is_empty() && rt.plural == "pods"
}

/// `deletionTimestamp`, `deletionGracePeriodSeconds` and the generation bump of a first
/// graceful delete (`BeforeDelete`).
fn mark_deleting(obj: &mut Value, at: &str, grace: i64) {
    let m = meta::meta_mut(obj);
    let first = !m.contains_key("deletionTimestamp");
    m.insert("deletionTimestamp".into(), json!(at));
    m.insert("deletionGracePeriodSeconds".into(), json!(grace));
    if let Some(g) = m
        .get("generation")
        .and_then(Value::as_i64)
        .filter(|g| first && *g > 0)
    {
        m.insert("generation".into(), json!(g + 1));
    }
}

/// A pod's grace period (`CheckGracefulDelete`): the request's, else the pod's
/// `terminationGracePeriodSeconds`; 0 for an unscheduled or finished pod.
fn pod_grace(pod: &Value, requested: Option<i64>) -> i64 {
    let bound = str_at(pod, "/spec/nodeName").is_some_and(|n| !n.is_empty());
    let finished = matches!(str_at(pod, "/status/phase"), Some("Succeeded" | "Failed"));
    if !bound || finished {
        return 0;
    }
    let period = requested.unwrap_or_else(|| {
        pod.pointer("/spec/terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0)
    });
    if period < 0 { 1 } else { period }
}

/// A graceful pod delete as on a cluster whose kubelets never finish it: a grace period above 0
/// leaves the pod Terminating (or shortens its grace); `None` when the delete proceeds as any
/// other (grace 0, or an already-expired grace).
fn graceful_pod_delete(
    st: &mut State,
    rt: &Arc<ResourceType>,
    k: &str,
    old: &Value,
    opts: &DeleteOpts,
    fins: &[String],
    terminating: bool,
) -> Option<Deleted> {
    let now = st.clock.now();
    let at = |grace: i64| {
        let t = now + jiff::SignedDuration::from_secs(grace);
        t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    };
    if terminating {
        let current = old
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if current == 0 {
            return None;
        }
        return match opts.grace {
            Some(p) if p < current => {
                let mut new = old.clone();
                mark_deleting(&mut new, &at(p), p);
                if p == 0 && fins.is_empty() {
                    let last = st.replace(&rt.gr(), k.to_string(), new);
                    st.remove(&rt.gr(), k);
                    return Some(Deleted::Gone((*last).clone()));
                }
                let stored = st.replace(&rt.gr(), k.to_string(), new);
                Some(Deleted::Pending((*stored).clone()))
            }
            _ => Some(Deleted::Pending(old.clone())),
        };
    }
    let grace = pod_grace(old, opts.grace);
    let mut new = old.clone();
    meta::set_finalizers(&mut new, fins);
    mark_deleting(&mut new, &at(grace), grace);
    if grace == 0 && fins.is_empty() {
        // Upstream writes the deletion fields, then removes the pod: MODIFIED, then DELETED.
        st.replace(&rt.gr(), k.to_string(), new);
        let last = st.remove(&rt.gr(), k)?;
        return Some(Deleted::Gone((*last).clone()));
    }
    let stored = st.replace(&rt.gr(), k.to_string(), new);
    Some(Deleted::Pending((*stored).clone()))
}

/// DELETE one object.
pub fn delete(
    st: &mut State,
    t: &Target,
    q: &Query,
    body: &[u8],
    output: Output,
) -> Result<Reply, ApiError> {
    if t.sub.is_some() {
        return Err(ApiError::method_not_allowed("DELETE on a subresource"));
    }
    let opts = DeleteOpts::parse(q, body)?;
    match delete_one(st, &t.rt, &t.key(), &opts)? {
        Deleted::Pending(o) => Ok(Reply::ok(output_object(o, output))),
        Deleted::Gone(o) if returns_deleted_object(&t.rt) => {
            Ok(Reply::ok(output_object(o, output)))
        }
        Deleted::Gone(o) => {
            let mut details = serde_json::Map::new();
            details.insert("name".into(), json!(t.name()));
            if !t.rt.group.is_empty() {
                details.insert("group".into(), json!(t.rt.group));
            }
            details.insert("kind".into(), json!(t.rt.plural));
            details.insert(
                "uid".into(),
                json!(str_at(&o, "/metadata/uid").unwrap_or_default()),
            );
            Ok(Reply::ok(
                json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","details":details}),
            ))
        }
    }
}

/// The registries that answer a delete with the deleted object (`ReturnDeletedObject`) rather
/// than a Status.
fn returns_deleted_object(rt: &ResourceType) -> bool {
    rt.group.is_empty()
        && matches!(
            rt.plural.as_str(),
            "pods" | "services" | "serviceaccounts" | "namespaces"
        )
}

/// DELETE a collection.
pub fn delete_collection(
    st: &mut State,
    t: &Target,
    q: &Query,
    body: &[u8],
) -> Result<Reply, ApiError> {
    let opts = DeleteOpts::parse(q, body)?;
    let (l, f) = selectors(&t.rt, q)?;
    let items = st.select(&t.rt.gr(), t.ns.as_deref(), &l, &f);
    let mut out = Vec::new();
    for (k, o) in items {
        out.push(o.as_ref().clone());
        match delete_one(st, &t.rt, &k, &opts) {
            Ok(_) => {}
            Err(e) if e.code == 403 || e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Reply {
        items: Some(out.into_iter().map(Arc::new).collect()),
        items_type_meta: !t.rt.builtin,
        ..Reply::ok(
            json!({"kind": t.rt.list_kind, "apiVersion": t.rt.api_version(), "metadata": {"resourceVersion": st.rv.to_string()}}),
        )
    })
}
