//! Server-side apply (docs/emulator-spec.md §4) and the managedFields bookkeeping of non-apply
//! writes.

use crate::field_error::go_quote;
use crate::fieldpath::{FieldSet, PathElement, path_string};
use crate::managed::{self, ManagedFieldsEntry, Operation};
use crate::semantics::{ListType, ObjectSchema};
use serde_json::{Map, Value, json};
use std::borrow::Cow;
use tracing::debug;

mod walk;

pub use walk::to_field_set;
use walk::{compare, merge_in_place, remove_path};

/// The result of a successful apply.
#[derive(Clone, Debug, PartialEq)]
pub struct Applied {
    /// The merged object with its new `metadata.managedFields`; the server still runs defaulting,
    /// validation and normalisation, then compares with the stored object for no-op detection.
    pub object: Value,
}

/// One field another manager owns that this apply would change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The other manager's name.
    pub manager: String,
    /// Its entry's operation (Update managers print `using <apiVersion>`).
    pub operation: Operation,
    /// Its entry's apiVersion.
    pub api_version: String,
    /// Its entry's subresource.
    pub subresource: Option<String>,
    /// The conflicting path, rendered (`.metadata.labels.tier`).
    pub field: String,
}

/// All conflicts of a rejected apply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflicts(pub Vec<Conflict>);

/// Why an apply was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ApplyError {
    /// 409: fields owned by other managers would change and `force` was not set.
    #[error("{}", .0.message())]
    Conflict(Conflicts),
    /// 400: the apply configuration itself is malformed.
    #[error("{0}")]
    BadRequest(String),
}

impl Conflict {
    /// upstream `printManager`: `"name"`, `"name" with subresource "status"`, `... using v1`.
    fn manager_text(&self) -> String {
        let mut s = go_quote(&self.manager);
        if let Some(sub) = &self.subresource {
            s = format!("{s} with subresource {}", go_quote(sub));
        }
        if self.operation == Operation::Update {
            s = format!("{s} using {}", self.api_version);
        }
        s
    }

    fn identity(&self) -> (String, Operation, Option<String>, String) {
        (
            self.manager.clone(),
            self.operation,
            self.subresource.clone(),
            self.api_version.clone(),
        )
    }
}

impl Conflicts {
    /// The Status message (`Apply failed with N conflict(s): ...`, upstream `getConflictMessage`).
    pub fn message(&self) -> String {
        if let [only] = self.0.as_slice() {
            return format!(
                "Apply failed with 1 conflict: conflict with {}: {}",
                only.manager_text(),
                only.field
            );
        }
        let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
        let mut sorted: Vec<&Conflict> = self.0.iter().collect();
        sorted.sort_by_key(|c| c.identity());
        for c in sorted {
            let text = c.manager_text();
            match groups.iter_mut().find(|(m, _)| *m == text) {
                Some((_, paths)) => paths.push(&c.field),
                None => groups.push((text, vec![&c.field])),
            }
        }
        let mut lines = Vec::new();
        for (manager, paths) in groups {
            lines.push(format!("conflicts with {manager}:"));
            lines.extend(paths.iter().map(|p| format!("- {p}")));
        }
        format!(
            "Apply failed with {} conflicts: {}",
            self.0.len(),
            lines.join("\n")
        )
    }

    /// The 409 Status object of docs/emulator-spec.md §4.6.
    pub fn to_status(&self) -> Value {
        let causes: Vec<Value> = self
            .0
            .iter()
            .map(|c| {
                json!({"reason": "FieldManagerConflict",
                       "message": format!("conflict with {}", c.manager_text()),
                       "field": c.field})
            })
            .collect();
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": self.message(), "reason": "Conflict",
               "details": {"causes": causes}, "code": 409})
    }
}

/// Fields upstream never tracks (`stripMetaManager`).
fn is_stripped(path: &[PathElement]) -> bool {
    let name = |pe: &PathElement| match pe {
        PathElement::Field(f) => Some(f.clone()),
        _ => None,
    };
    match path {
        [only] => matches!(
            name(only).as_deref(),
            Some("apiVersion" | "kind" | "metadata")
        ),
        [first, second] if name(first).as_deref() == Some("metadata") => matches!(
            name(second).as_deref(),
            Some(
                "name"
                    | "namespace"
                    | "creationTimestamp"
                    | "selfLink"
                    | "uid"
                    | "clusterName"
                    | "generation"
                    | "managedFields"
                    | "resourceVersion"
            )
        ),
        _ => false,
    }
}

/// Whether a path belongs to the fields a write through `subresource` may own (reset fields of
/// the other endpoint are excluded, as upstream's `ResetFields`).
fn in_scope(path: &[PathElement], subresource: Option<&str>, has_status: bool) -> bool {
    let is_status = matches!(path.first(), Some(PathElement::Field(f)) if f == "status");
    match subresource {
        Some("status") => is_status,
        _ => !(has_status && is_status),
    }
}

fn filter_set(set: &FieldSet, subresource: Option<&str>, has_status: bool) -> FieldSet {
    let mut out = FieldSet::new();
    for p in set.paths() {
        if !is_stripped(&p) && in_scope(&p, subresource, has_status) {
            out.insert(&p);
        }
    }
    out
}

/// Removes `null` members of objects (an apply of `null` means "not set, not owned",
/// docs/emulator-spec.md §4.7).
fn strip_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip_nulls).collect()),
        other => other.clone(),
    }
}

fn has_null_member(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.values().any(|c| c.is_null() || has_null_member(c)),
        Value::Array(items) => items.iter().any(has_null_member),
        _ => false,
    }
}

/// Equality of two objects, ignoring `metadata.managedFields`, without copying either.
fn eq_ignoring_managed_fields(a: &Value, b: &Value) -> bool {
    let (Value::Object(am), Value::Object(bm)) = (a, b) else {
        return a == b;
    };
    let keys = |m: &Map<String, Value>| m.keys().filter(|k| *k != "metadata").count();
    if keys(am) != keys(bm) {
        return false;
    }
    let same_rest = am
        .iter()
        .filter(|(k, _)| *k != "metadata")
        .all(|(k, v)| bm.get(k) == Some(v));
    let meta = |m: &Map<String, Value>| -> Vec<(String, Value)> {
        m.get("metadata")
            .and_then(Value::as_object)
            .map(|mm| {
                mm.iter()
                    .filter(|(k, _)| *k != "managedFields")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    same_rest && {
        let (mut x, mut y) = (meta(am), meta(bm));
        x.sort_by(|p, q| p.0.cmp(&q.0));
        y.sort_by(|p, q| p.0.cmp(&q.0));
        x == y
    }
}

fn without_managed_fields(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    v
}

/// Server-side apply of `applied` (the request body, a complete apply configuration) by
/// `manager` onto `live` (the stored object with its managedFields, or `None` when it does not
/// exist yet). `subresource` is `Some("status")` for `/status`. `now` is the RFC 3339 time for
/// changed entries.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    subresource: Option<&str>,
    schema: &dyn ObjectSchema,
    now: &str,
) -> Result<Applied, ApplyError> {
    let Value::Object(applied_map) = applied else {
        return Err(ApplyError::BadRequest(
            "apply configuration must be a JSON object".to_owned(),
        ));
    };
    if applied_map
        .get("metadata")
        .and_then(|m| m.get("managedFields"))
        .is_some_and(|mf| !mf.is_null())
    {
        return Err(ApplyError::BadRequest(
            "metadata.managedFields must be nil".to_owned(),
        ));
    }
    let has_status = schema.has_status_subresource();
    let api_version = applied_map
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();

    // Nulls mean "not set, not owned"; copy the configuration only when it has some.
    let config: Cow<'_, Value> = if has_null_member(applied) {
        Cow::Owned(strip_nulls(applied))
    } else {
        Cow::Borrowed(applied)
    };
    // Reset fields: the main endpoint of a type with /status never touches `status`; `/status`
    // touches nothing else.
    let in_scope = |k: &str| match subresource {
        Some("status") => {
            matches!(k, "status" | "apiVersion" | "kind") || (live.is_none() && k == "metadata")
        }
        _ => !(has_status && k == "status"),
    };

    let mut entries = match live {
        Some(l) => managed::decode(l).map_err(|e| ApplyError::BadRequest(e.to_string()))?,
        None => Vec::new(),
    };
    let empty = Value::Object(Map::new());
    let lhs = live.unwrap_or(&empty);

    // Merge in place into a copy of the live object (the copy becomes the result); top-level
    // values the configuration replaces whole (scalars, atomic lists) are not copied first.
    let replaced = |k: &str| {
        config.get(k).is_some_and(|rv| {
            in_scope(k)
                && !rv.is_object()
                && (!rv.is_array() || schema.list_type(&[k]) == ListType::Atomic)
        })
    };
    let mut merged = match lhs {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !replaced(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    };
    if let Some(meta) = merged.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    if let (Value::Object(out), Value::Object(cfg)) = (&mut merged, config.as_ref()) {
        for (k, rv) in cfg.iter().filter(|(k, _)| in_scope(k)) {
            let mut names = vec![k.as_str()];
            match out.get_mut(k) {
                Some(slot) => merge_in_place(slot, rv, &mut names, schema),
                None => {
                    out.insert(k.clone(), rv.clone());
                }
            }
        }
    }
    let new_set = filter_set(
        &to_field_set(config.as_ref(), schema),
        subresource,
        has_status,
    );

    let me = ManagedFieldsEntry {
        manager: manager.to_owned(),
        operation: Operation::Apply,
        api_version: api_version.clone(),
        time: None,
        fields: new_set.clone(),
        subresource: subresource.map(str::to_owned),
    };
    let my_index = entries.iter().position(|e| e.same_identity(&me));
    let (last_set, last_time) = match my_index {
        Some(i) => {
            let prev = entries.remove(i);
            (prev.fields, prev.time)
        }
        None => (FieldSet::new(), None),
    };

    // Prune what this manager applied before and no longer applies, unless someone owns it.
    let mut owned = new_set.clone();
    for e in &entries {
        owned = owned.union(&e.fields);
    }
    let mut pruned = merged;
    let mut last_paths = last_set.paths();
    // Parents first: a list-map item is found by its key fields, so it must go before the
    // leaves (its key among them) are removed, or an empty `{}` item would be left behind.
    last_paths.sort_by_key(|p| p.len());
    for p in last_paths {
        if !owned.has_prefix(&p) {
            remove_path(&mut pruned, &p, &mut Vec::new(), schema);
        }
    }

    let cmp = compare(Some(lhs), Some(&pruned), schema);
    let changed = cmp.modified.union(&cmp.added);
    let mut conflicts = Vec::new();
    for e in &mut entries {
        let c = e.fields.intersection(&changed);
        if c.is_empty() {
            continue;
        }
        for p in c.paths() {
            conflicts.push(Conflict {
                manager: e.manager.clone(),
                operation: e.operation,
                api_version: e.api_version.clone(),
                subresource: e.subresource.clone(),
                field: path_string(&p),
            });
        }
        if force {
            e.fields = e.fields.difference(&c);
        }
    }
    if !force && !conflicts.is_empty() {
        conflicts.sort_by(|a, b| {
            a.identity()
                .cmp(&b.identity())
                .then_with(|| a.field.cmp(&b.field))
        });
        debug!(manager, conflicts = conflicts.len(), "apply conflicts");
        return Err(ApplyError::Conflict(Conflicts(conflicts)));
    }
    for e in &mut entries {
        e.fields = e.fields.difference(&cmp.removed);
    }

    let object_changed = live.is_none()
        || !(cmp.added.is_empty() && cmp.modified.is_empty() && cmp.removed.is_empty())
        || !eq_ignoring_managed_fields(&pruned, lhs);
    let time = if object_changed || last_time.is_none() {
        Some(now.to_owned())
    } else {
        last_time
    };
    entries.push(ManagedFieldsEntry { time, ..me });
    let mut object = pruned;
    managed::encode_into(&mut object, entries);
    Ok(Applied { object })
}

/// managedFields bookkeeping of a non-apply write (create, update, any non-apply patch) by
/// `manager`: returns `new` with `metadata.managedFields` recomputed from `old` (None on create).
///
/// As upstream: managedFields sent in `new` replace the tracked state (`[{}]` clears it), the
/// writer's changed and added fields move to its `Update` entry, removed fields leave every
/// entry; updates never conflict.
pub fn record_update(
    old: Option<&Value>,
    new: &Value,
    manager: &str,
    subresource: Option<&str>,
    schema: &dyn ObjectSchema,
    now: &str,
) -> Value {
    let sent = new.get("metadata").and_then(|m| m.get("managedFields"));
    if let Some(Value::Array(items)) = sent
        && items.len() == 1
        && items[0].as_object().is_some_and(Map::is_empty)
    {
        return without_managed_fields(new);
    }
    let sent_entries = match (sent, subresource) {
        (Some(_), None) => managed::decode(new).ok().filter(|e| !e.is_empty()),
        _ => None,
    };
    let mut entries = match sent_entries {
        Some(e) => e,
        None => old
            .map(|o| managed::decode(o).unwrap_or_default())
            .unwrap_or_default(),
    };
    let has_status = schema.has_status_subresource();
    // Go value structs and nil slices exist even in an empty typed object; compare from a
    // baseline that has them.
    let baseline: Option<Cow<'_, Value>> = match (old, schema.empty_object()) {
        (Some(o), Some(Value::Object(empty))) if empty.keys().any(|k| o.get(k).is_none()) => {
            let mut b = o.clone();
            if let Value::Object(m) = &mut b {
                for (k, v) in empty {
                    m.entry(k).or_insert(v);
                }
            }
            Some(Cow::Owned(b))
        }
        (Some(o), _) => Some(Cow::Borrowed(o)),
        (None, empty) => empty.map(Cow::Owned),
    };
    let cmp = compare(baseline.as_deref(), Some(new), schema);
    let taken = filter_set(&cmp.modified.union(&cmp.added), subresource, has_status);
    let removed = filter_set(&cmp.removed, subresource, has_status);
    for e in &mut entries {
        e.fields = e.fields.difference(&taken).difference(&removed);
    }
    let api_version = new
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if !taken.is_empty() {
        let me = ManagedFieldsEntry {
            manager: manager.to_owned(),
            operation: Operation::Update,
            api_version,
            time: Some(now.to_owned()),
            fields: taken,
            subresource: subresource.map(str::to_owned),
        };
        match entries.iter_mut().find(|e| e.same_identity(&me)) {
            Some(prev) => {
                prev.fields = prev.fields.union(&me.fields);
                prev.time = me.time;
            }
            None => entries.push(me),
        }
    }
    let mut object = new.clone();
    managed::encode_into(&mut object, entries);
    object
}

/// Upstream's `IgnoreManagedFieldsTimestampsTransformer`: when `new` equals `old` apart from
/// managedFields, and the managedFields differ only in `time`, the old times are put back so the
/// write is a no-op (no resourceVersion bump, no watch event — docs/emulator-spec.md §0 rule 5).
/// Call it on the final object (after defaulting and normalisation) of every update, patch and
/// apply. Returns `true` when it reverted timestamps.
pub fn revert_timestamp_only_changes(new: &mut Value, old: &Value) -> bool {
    let entries = |v: &Value| -> Vec<Value> {
        v.get("metadata")
            .and_then(|m| m.get("managedFields"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (new_entries, old_entries) = (entries(new), entries(old));
    if new_entries == old_entries || new_entries.len() != old_entries.len() {
        return false;
    }
    let without_time = |e: &Value| {
        let mut e = e.clone();
        if let Some(m) = e.as_object_mut() {
            m.remove("time");
        }
        e
    };
    let same_but_time = new_entries
        .iter()
        .zip(&old_entries)
        .all(|(a, b)| without_time(a) == without_time(b));
    if !same_but_time || without_managed_fields(new) != without_managed_fields(old) {
        return false;
    }
    if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("managedFields".into(), Value::Array(old_entries));
    }
    true
}

/// The manager name of a non-apply write: the `fieldManager` parameter, else the User-Agent up
/// to the first `/`, else `unknown`.
pub fn update_manager_name(field_manager: Option<&str>, user_agent: Option<&str>) -> String {
    if let Some(m) = field_manager.filter(|m| !m.is_empty()) {
        return m.to_owned();
    }
    match user_agent
        .and_then(|ua| ua.split('/').next())
        .filter(|s| !s.is_empty())
    {
        Some(prefix) => prefix.to_owned(),
        None => "unknown".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::walk::merge_values;
    use super::*;
    use crate::semantics::{BuiltinSchema, CrdSchema};
    use serde_json::json;

    const T1: &str = "2026-01-02T03:04:05Z";
    const T2: &str = "2026-01-02T03:05:00Z";
    const T3: &str = "2026-01-02T03:06:00Z";

    fn slice_schema() -> BuiltinSchema {
        BuiltinSchema::for_kind("discovery.k8s.io", "EndpointSlice")
    }

    fn slice(labels: Value, endpoints: Value) -> Value {
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web-x", "namespace": "default", "labels": labels,
                "ownerReferences": [{"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
                    "name": "web", "uid": "5c1", "controller": true, "blockOwnerDeletion": true}]},
            "addressType": "IPv4",
            "endpoints": endpoints,
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
        })
    }

    fn managed(obj: &Value) -> &Vec<Value> {
        obj["metadata"]["managedFields"].as_array().unwrap()
    }

    /// Stores what the server would store: the applied result with server fields.
    fn stored(mut obj: Value) -> Value {
        obj["metadata"]["uid"] = json!("u-1");
        obj["metadata"]["resourceVersion"] = json!("7");
        obj["metadata"]["creationTimestamp"] = json!(T1);
        obj
    }

    #[test]
    fn apply_create_endpointslice_records_spec_fields_v1() {
        let cfg = slice(
            json!({"kubernetes.io/service-name": "web", "endpointslice.kubernetes.io/managed-by": "pm"}),
            json!([{"addresses": ["10.0.0.1"], "conditions": {"ready": true}}]),
        );
        let out = apply(None, &cfg, "my-op", true, None, &slice_schema(), T1).unwrap();
        let mf = managed(&out.object);
        assert_eq!(mf.len(), 1);
        assert_eq!(
            mf[0],
            json!({"manager": "my-op", "operation": "Apply", "apiVersion": "discovery.k8s.io/v1",
                "time": T1, "fieldsType": "FieldsV1", "fieldsV1": {
                    "f:addressType": {}, "f:endpoints": {}, "f:ports": {},
                    "f:metadata": {"f:labels": {"f:kubernetes.io/service-name": {},
                                                "f:endpointslice.kubernetes.io/managed-by": {}},
                                   "f:ownerReferences": {"k:{\"uid\":\"5c1\"}": {}}}}})
        );
        assert_eq!(out.object["endpoints"], cfg["endpoints"]);
    }

    #[test]
    fn reapply_same_config_is_a_no_op() {
        let cfg = slice(json!({"a": "1"}), json!([]));
        let first = stored(
            apply(None, &cfg, "op", true, None, &slice_schema(), T1)
                .unwrap()
                .object,
        );
        let again = apply(Some(&first), &cfg, "op", false, None, &slice_schema(), T2).unwrap();
        assert_eq!(again.object, first, "no change, and the entry time is kept");
    }

    #[test]
    fn conflict_with_update_manager_matches_upstream_status() {
        let cfg = slice(json!({"tier": "a"}), json!([]));
        let live = stored(
            apply(None, &cfg, "my-op", true, None, &slice_schema(), T1)
                .unwrap()
                .object,
        );
        // kubectl-edit changes the label with an update: it takes the field over.
        let mut edited = live.clone();
        edited["metadata"]["labels"]["tier"] = json!("b");
        let live = record_update(
            Some(&live),
            &edited,
            "kubectl-edit",
            None,
            &slice_schema(),
            T2,
        );
        let mf = managed(&live);
        assert_eq!(mf.len(), 2);
        assert_eq!(mf[1]["manager"], "kubectl-edit");
        assert_eq!(mf[1]["operation"], "Update");
        assert_eq!(
            mf[1]["fieldsV1"],
            json!({"f:metadata": {"f:labels": {"f:tier": {}}}})
        );
        assert!(
            mf[0]["fieldsV1"]["f:metadata"]["f:labels"]
                .get("f:tier")
                .is_none()
        );

        let err = apply(Some(&live), &cfg, "my-op", false, None, &slice_schema(), T3).unwrap_err();
        let ApplyError::Conflict(conflicts) = err else {
            panic!("expected a conflict")
        };
        assert_eq!(
            conflicts.to_status(),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "reason": "Conflict", "code": 409,
                "message": "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using discovery.k8s.io/v1: .metadata.labels.tier",
                "details": {"causes": [{"reason": "FieldManagerConflict",
                    "message": "conflict with \"kubectl-edit\" using discovery.k8s.io/v1",
                    "field": ".metadata.labels.tier"}]}})
        );

        // force takes the field back; kubectl-edit's entry becomes empty and disappears.
        let forced = apply(Some(&live), &cfg, "my-op", true, None, &slice_schema(), T3).unwrap();
        assert_eq!(forced.object["metadata"]["labels"]["tier"], "a");
        let mf = managed(&forced.object);
        assert_eq!(mf.len(), 1, "{mf:?}");
        assert_eq!(mf[0]["time"], T3);
        assert!(
            mf[0]["fieldsV1"]["f:metadata"]["f:labels"]
                .get("f:tier")
                .is_some()
        );
    }

    #[test]
    fn same_value_is_shared_ownership_not_conflict() {
        let cfg = slice(json!({"tier": "a"}), json!([]));
        let live = stored(
            apply(None, &cfg, "one", true, None, &slice_schema(), T1)
                .unwrap()
                .object,
        );
        let other = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web-x", "namespace": "default", "labels": {"tier": "a"}}});
        let out = apply(Some(&live), &other, "two", false, None, &slice_schema(), T2).unwrap();
        let mf = managed(&out.object);
        assert_eq!(mf.len(), 2);
        assert!(mf.iter().all(|e| {
            e["fieldsV1"]["f:metadata"]["f:labels"]
                .get("f:tier")
                .is_some()
        }));
        // Now "two" changing it conflicts with "one" (an Apply manager: no `using`).
        let mut changed = other.clone();
        changed["metadata"]["labels"]["tier"] = json!("z");
        let err = apply(
            Some(&out.object),
            &changed,
            "two",
            false,
            None,
            &slice_schema(),
            T3,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"one\": .metadata.labels.tier"
        );
    }

    #[test]
    fn fields_no_longer_applied_are_pruned_unless_owned_by_others() {
        let cfg = slice(json!({"a": "1", "b": "2", "c": "3"}), json!([]));
        let live = stored(
            apply(None, &cfg, "op", true, None, &slice_schema(), T1)
                .unwrap()
                .object,
        );
        // Another applier also sets c (same value: shared).
        let other = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web-x", "namespace": "default", "labels": {"c": "3"}}});
        let live = apply(
            Some(&live),
            &other,
            "other",
            false,
            None,
            &slice_schema(),
            T2,
        )
        .unwrap()
        .object;
        let next = slice(json!({"a": "1"}), json!([]));
        let out = apply(Some(&live), &next, "op", false, None, &slice_schema(), T3).unwrap();
        assert_eq!(
            out.object["metadata"]["labels"],
            json!({"a": "1", "c": "3"})
        );
    }

    #[test]
    fn update_owned_fields_are_not_pruned_by_same_named_applier() {
        let create = slice(json!({"a": "1"}), json!([]));
        let live = record_update(None, &create, "op", None, &slice_schema(), T1);
        assert_eq!(managed(&live)[0]["operation"], "Update");
        let cfg = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web-x", "namespace": "default"}, "addressType": "IPv4"});
        let out = apply(Some(&live), &cfg, "op", false, None, &slice_schema(), T2).unwrap();
        assert_eq!(out.object["metadata"]["labels"], json!({"a": "1"}));
        assert_eq!(out.object["endpoints"], json!([]));
    }

    #[test]
    fn create_update_entry_marks_new_containers_with_dot() {
        let cr = json!({"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "x"}},
            "spec": {"serviceRef": {"name": "web"}}});
        let schema = CrdSchema::new(&json!({"type": "object"}), true);
        let out = record_update(None, &cr, "kubectl-create", None, &schema, T1);
        assert_eq!(
            managed(&out)[0]["fieldsV1"],
            json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                   "f:spec": {".": {}, "f:serviceRef": {".": {}, "f:name": {}}}})
        );
    }

    fn pm_schema() -> CrdSchema {
        CrdSchema::new(
            &json!({"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"x": {"type": "integer"}}},
                "status": {"type": "object", "properties": {
                    "observedGeneration": {"type": "integer"},
                    "conditions": {"type": "array", "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["type"],
                        "items": {"type": "object"}}}}}}),
            true,
        )
    }

    #[test]
    fn status_apply_is_separate_from_main_apply() {
        let schema = pm_schema();
        let cr = json!({"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
            "metadata": {"name": "web", "namespace": "default"}, "spec": {"x": 1},
            "status": {"observedGeneration": 9}});
        let live = stored(
            apply(None, &cr, "op", true, None, &schema, T1)
                .unwrap()
                .object,
        );
        assert!(live.get("status").is_none(), "main endpoint drops status");
        let status = json!({"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
            "metadata": {"name": "web", "namespace": "default", "labels": {"ignored": "yes"}},
            "spec": {"x": 99},
            "status": {"observedGeneration": 1,
                "conditions": [{"type": "Ready", "status": "True"}]}});
        let out = apply(
            Some(&live),
            &status,
            "op",
            true,
            Some("status"),
            &schema,
            T2,
        )
        .unwrap()
        .object;
        assert_eq!(out["spec"], json!({"x": 1}));
        assert!(out["metadata"].get("labels").is_none());
        assert_eq!(out["status"]["observedGeneration"], 1);
        let mf = managed(&out);
        assert_eq!(mf.len(), 2);
        assert_eq!(mf[1]["subresource"], "status");
        assert_eq!(
            mf[1]["fieldsV1"],
            json!({"f:status": {"f:observedGeneration": {},
                "f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:type": {}, "f:status": {}}}}})
        );
        // Re-applying the main object without status keeps status (it is not the main
        // endpoint's to prune).
        let out2 = apply(Some(&out), &cr, "op", false, None, &schema, T3)
            .unwrap()
            .object;
        assert_eq!(out2["status"], out["status"]);
        // A status apply by another manager changing the condition conflicts, naming the
        // subresource.
        let mut other = status.clone();
        other["status"] = json!({"conditions": [{"type": "Ready", "status": "False"}]});
        let err = apply(
            Some(&out2),
            &other,
            "intruder",
            false,
            Some("status"),
            &schema,
            T3,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"op\" with subresource \"status\": .status.conditions[type=\"Ready\"].status"
        );
    }

    #[test]
    fn lease_takeover_conflicts_then_force_wins() {
        let schema = BuiltinSchema::for_kind("coordination.k8s.io", "Lease");
        let lease = |holder: &str| {
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "lock", "namespace": "default"},
                "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                         "renewTime": "2026-01-02T03:04:05.000000Z"}})
        };
        let live = stored(
            apply(None, &lease("a"), "a", false, None, &schema, T1)
                .unwrap()
                .object,
        );
        let err = apply(Some(&live), &lease("b"), "b", false, None, &schema, T2).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"a\": .spec.holderIdentity"
        );
        let won = apply(Some(&live), &lease("b"), "b", true, None, &schema, T2)
            .unwrap()
            .object;
        assert_eq!(won["spec"]["holderIdentity"], "b");
        let mf = managed(&won);
        // a still shares the unchanged fields; holderIdentity moved to b.
        assert_eq!(mf.len(), 2);
        assert_eq!(
            mf[0]["fieldsV1"],
            json!({"f:spec": {"f:leaseDurationSeconds": {}, "f:renewTime": {}}})
        );
    }

    #[test]
    fn several_conflicts_are_grouped_by_manager() {
        let schema = BuiltinSchema::for_kind("", "ConfigMap");
        let cm = |data: Value| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "default"}, "data": data})
        };
        let live = stored(
            apply(None, &cm(json!({"x": "1"})), "a", false, None, &schema, T1)
                .unwrap()
                .object,
        );
        let live = apply(
            Some(&live),
            &cm(json!({"y": "1"})),
            "b",
            false,
            None,
            &schema,
            T1,
        )
        .unwrap()
        .object;
        let mut upd = live.clone();
        upd["data"]["z"] = json!("1");
        let live = record_update(Some(&live), &upd, "kubectl", None, &schema, T2);
        let err = apply(
            Some(&live),
            &cm(json!({"x": "2", "y": "2", "z": "2"})),
            "c",
            false,
            None,
            &schema,
            T3,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 3 conflicts: conflicts with \"a\":\n- .data.x\nconflicts with \"b\":\n- .data.y\nconflicts with \"kubectl\" using v1:\n- .data.z"
        );
    }

    #[test]
    fn service_ports_merge_by_port_and_defaulted_protocol() {
        let schema = BuiltinSchema::for_kind("", "Service");
        let live = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "s", "namespace": "default"},
            "spec": {"ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080},
                               {"port": 53, "protocol": "UDP"}]}});
        let live = record_update(None, &live, "kubectl", None, &schema, T1);
        let cfg = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "s", "namespace": "default"},
            "spec": {"ports": [{"port": 80, "name": "http"}]}});
        let out = apply(Some(&live), &cfg, "op", false, None, &schema, T2)
            .unwrap()
            .object;
        assert_eq!(
            out["spec"]["ports"],
            json!([{"port": 80, "protocol": "TCP", "targetPort": 8080, "name": "http"},
                   {"port": 53, "protocol": "UDP"}])
        );
        let cfg2 = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "s", "namespace": "default"},
            "spec": {"ports": [{"port": 80, "targetPort": 9090}]}});
        let err = apply(Some(&out), &cfg2, "op", false, None, &schema, T3).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"kubectl\" using v1: .spec.ports[port=80,protocol=\"TCP\"].targetPort"
        );
    }

    #[test]
    fn finalizers_are_a_set_and_pruned_per_value() {
        let schema = slice_schema();
        let with = |f: Value| {
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "web-x", "namespace": "default", "finalizers": f}})
        };
        let live = stored(
            apply(
                None,
                &with(json!(["a/x", "a/y"])),
                "a",
                false,
                None,
                &schema,
                T1,
            )
            .unwrap()
            .object,
        );
        let live = apply(
            Some(&live),
            &with(json!(["b/z"])),
            "b",
            false,
            None,
            &schema,
            T1,
        )
        .unwrap()
        .object;
        assert_eq!(live["metadata"]["finalizers"], json!(["a/x", "a/y", "b/z"]));
        let out = apply(
            Some(&live),
            &with(json!(["a/y"])),
            "a",
            false,
            None,
            &schema,
            T2,
        )
        .unwrap()
        .object;
        assert_eq!(out["metadata"]["finalizers"], json!(["a/y", "b/z"]));
        let a = managed(&out).iter().find(|e| e["manager"] == "a").unwrap();
        assert_eq!(
            a["fieldsV1"]["f:metadata"]["f:finalizers"],
            json!({"v:\"a/y\"": {}})
        );
    }

    #[test]
    fn bad_apply_bodies_are_rejected() {
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "managedFields": [{"manager": "x"}]}});
        let schema = BuiltinSchema::for_kind("", "ConfigMap");
        assert!(matches!(
            apply(None, &body, "m", false, None, &schema, T1),
            Err(ApplyError::BadRequest(_))
        ));
        assert!(matches!(
            apply(None, &json!([1]), "m", false, None, &schema, T1),
            Err(ApplyError::BadRequest(_))
        ));
    }

    #[test]
    fn update_with_reset_managed_fields_clears_them() {
        let schema = BuiltinSchema::for_kind("", "ConfigMap");
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "default"}, "data": {"x": "1"}});
        let live = record_update(None, &cm, "a", None, &schema, T1);
        assert!(live["metadata"].get("managedFields").is_some());
        let mut reset = live.clone();
        reset["metadata"]["managedFields"] = json!([{}]);
        let out = record_update(Some(&live), &reset, "b", None, &schema, T2);
        assert!(out["metadata"].get("managedFields").is_none());
    }

    #[test]
    fn reapply_over_defaulted_object_is_a_no_op_after_timestamp_revert() {
        // The server defaults `ports[].protocol`/`name` after the merge; the config omits them.
        let cfg = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web-x", "namespace": "default"},
            "addressType": "IPv4", "endpoints": [], "ports": [{"port": 80}]});
        let default = |mut o: Value| {
            o["ports"][0]["protocol"] = json!("TCP");
            o["ports"][0]["name"] = json!("");
            o
        };
        let stored_obj = stored(default(
            apply(None, &cfg, "op", true, None, &slice_schema(), T1)
                .unwrap()
                .object,
        ));
        let again = apply(
            Some(&stored_obj),
            &cfg,
            "op",
            true,
            None,
            &slice_schema(),
            T2,
        )
        .unwrap();
        let mut next = default(again.object);
        assert_ne!(next, stored_obj, "the entry time moved");
        assert!(revert_timestamp_only_changes(&mut next, &stored_obj));
        assert_eq!(next, stored_obj);
        // A real change keeps the new time.
        let mut changed = stored_obj.clone();
        changed["addressType"] = json!("IPv6");
        changed["metadata"]["managedFields"][0]["time"] = json!(T3);
        assert!(!revert_timestamp_only_changes(&mut changed, &stored_obj));
        assert_eq!(changed["metadata"]["managedFields"][0]["time"], T3);
    }

    #[test]
    fn lease_manager_pattern_update_owner_blocks_soft_lock_until_release() {
        let schema = BuiltinSchema::for_kind("coordination.k8s.io", "Lease");
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "lock", "namespace": "default"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}});
        // A creates and renews with non-apply writes (strategic merge patch): Update entries.
        let live = stored(record_update(
            None,
            &lease,
            "kube-lease-manager-a",
            None,
            &schema,
            T1,
        ));
        let soft_lock = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "lock", "namespace": "default"},
            "spec": {"holderIdentity": "b", "leaseDurationSeconds": 15}});
        let err = apply(
            Some(&live),
            &soft_lock,
            "kube-lease-manager-b",
            false,
            None,
            &schema,
            T2,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"kube-lease-manager-a\" using coordination.k8s.io/v1: .spec.holderIdentity"
        );
        // A releases: SMP sets holderIdentity to null, the field leaves every entry.
        let mut released = live.clone();
        released["spec"]
            .as_object_mut()
            .unwrap()
            .remove("holderIdentity");
        let live = record_update(
            Some(&live),
            &released,
            "kube-lease-manager-a",
            None,
            &schema,
            T2,
        );
        let won = apply(
            Some(&live),
            &soft_lock,
            "kube-lease-manager-b",
            false,
            None,
            &schema,
            T3,
        )
        .unwrap()
        .object;
        assert_eq!(won["spec"]["holderIdentity"], "b");
    }

    #[test]
    fn builtin_create_has_no_dot_for_value_structs() {
        let schema = BuiltinSchema::for_kind("", "Service");
        let svc = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"type": "ClusterIP", "ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080}]}});
        let out = record_update(None, &svc, "kubectl-create", None, &schema, T1);
        assert_eq!(
            managed(&out)[0]["fieldsV1"],
            json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                "f:spec": {"f:type": {},
                    "f:ports": {".": {}, "k:{\"port\":80,\"protocol\":\"TCP\"}": {
                        ".": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {}}}}})
        );
    }

    #[test]
    fn reapply_keeps_a_label_someone_else_added_and_does_not_write() {
        let cfg = slice(json!({"app": "web"}), json!([{"addresses": ["10.0.0.1"]}]));
        let live = stored(
            apply(None, &cfg, "op", true, None, &slice_schema(), T1)
                .unwrap()
                .object,
        );
        let mut patched = live.clone();
        patched["metadata"]["labels"]["team"] = json!("blue");
        let live = record_update(
            Some(&live),
            &patched,
            "kubectl-label",
            None,
            &slice_schema(),
            T2,
        );
        let again = apply(Some(&live), &cfg, "op", true, None, &slice_schema(), T3)
            .unwrap()
            .object;
        assert_eq!(
            again, live,
            "label kept, nothing else changes, entry times kept"
        );
    }

    #[test]
    fn endpoints_subsets_are_atomic_between_appliers() {
        let schema = BuiltinSchema::for_kind("", "Endpoints");
        let ep = |ip: &str| {
            json!({"apiVersion": "v1", "kind": "Endpoints",
                "metadata": {"name": "web", "namespace": "default"},
                "subsets": [{"addresses": [{"ip": ip}], "ports": [{"name": "http", "port": 8080}]}]})
        };
        let live = stored(
            apply(None, &ep("10.0.0.1"), "portmapper", true, None, &schema, T1)
                .unwrap()
                .object,
        );
        assert_eq!(
            managed(&live)[0]["fieldsV1"],
            json!({"f:subsets": {}}),
            "subsets is one atomic leaf"
        );
        let err = apply(
            Some(&live),
            &ep("10.0.0.2"),
            "other",
            false,
            None,
            &schema,
            T2,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"portmapper\": .subsets"
        );
        let taken = apply(
            Some(&live),
            &ep("10.0.0.2"),
            "other",
            true,
            None,
            &schema,
            T2,
        )
        .unwrap()
        .object;
        assert_eq!(
            taken["subsets"][0]["addresses"],
            json!([{"ip": "10.0.0.2"}])
        );
        assert_eq!(managed(&taken).len(), 1, "portmapper lost its only field");
        // The former owner stops applying subsets: nothing of other's is pruned.
        let bare = json!({"apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": "web", "namespace": "default"}});
        let out = apply(Some(&taken), &bare, "portmapper", false, None, &schema, T3)
            .unwrap()
            .object;
        assert_eq!(out["subsets"], taken["subsets"]);
    }

    /// structured-merge-diff's merge order for sets and associative lists (expectations from
    /// its `typed/merge_test.go` cases).
    #[test]
    fn list_merge_order_matches_structured_merge_diff() {
        let schema = CrdSchema::new(
            &json!({"type": "object", "properties": {
                "setStr": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                "list": {"type": "array", "x-kubernetes-list-type": "map",
                         "x-kubernetes-list-map-keys": ["key", "id"], "items": {"type": "object"}}}}),
            false,
        );
        let set_cases = [
            (
                json!(["a", "b", "c"]),
                json!(["a", "b"]),
                json!(["a", "b", "c"]),
            ),
            (json!(["a", "b"]), json!(["b", "a"]), json!(["b", "a"])),
            (
                json!(["a", "b", "c"]),
                json!(["c", "d", "e", "f"]),
                json!(["a", "b", "c", "d", "e", "f"]),
            ),
            (
                json!(["a", "b", "c", "g", "f"]),
                json!(["c", "d", "e", "f"]),
                json!(["a", "b", "c", "g", "d", "e", "f"]),
            ),
            (
                json!(["c", "d", "e", "f"]),
                json!(["a", "c", "e"]),
                json!(["a", "c", "d", "e", "f"]),
            ),
            (
                json!(["a", "b", "c", "x", "y", "z"]),
                json!(["d", "e", "f", "x", "y", "z"]),
                json!(["a", "b", "c", "d", "e", "f", "x", "y", "z"]),
            ),
            (
                json!(["c", "a", "g", "f"]),
                json!(["c", "f", "a", "g"]),
                json!(["c", "f", "a", "g"]),
            ),
            (
                json!(["a", "b", "c", "d"]),
                json!(["d", "e", "f", "a"]),
                json!(["b", "c", "d", "e", "f", "a"]),
            ),
            (
                json!(["c", "d", "e", "f", "g", "h", "i", "j"]),
                json!(["2", "h", "3", "e", "4", "k", "l"]),
                json!([
                    "c", "d", "f", "g", "2", "h", "i", "j", "3", "e", "4", "k", "l"
                ]),
            ),
            (
                json!(["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]),
                json!(["1", "b", "2", "h", "3", "e", "4", "k", "l"]),
                json!([
                    "a", "1", "b", "c", "d", "f", "g", "2", "h", "i", "j", "3", "e", "4", "k", "l"
                ]),
            ),
        ];
        for (lhs, rhs, want) in set_cases {
            let got = merge_values(
                Some(&json!({"setStr": lhs})),
                &json!({"setStr": rhs}),
                &mut Vec::new(),
                &schema,
            );
            assert_eq!(got["setStr"], want);
        }
        let item = |k: &str, id: i64| json!({"key": k, "id": id});
        let list_cases = [
            (
                json!([item("a", 1)]),
                json!([item("a", 2)]),
                json!([item("a", 1), item("a", 2)]),
            ),
            (
                json!([item("b", 2)]),
                json!([item("a", 1), item("b", 2), item("c", 3)]),
                json!([item("a", 1), item("b", 2), item("c", 3)]),
            ),
            (
                json!([item("a", 1), item("b", 2), item("c", 3)]),
                json!([item("c", 3), item("b", 2)]),
                json!([item("a", 1), item("c", 3), item("b", 2)]),
            ),
            (
                json!([item("a", 1), item("b", 2), item("c", 3)]),
                json!([item("c", 3), item("a", 1)]),
                json!([item("b", 2), item("c", 3), item("a", 1)]),
            ),
        ];
        for (lhs, rhs, want) in list_cases {
            let got = merge_values(
                Some(&json!({"list": lhs})),
                &json!({"list": rhs}),
                &mut Vec::new(),
                &schema,
            );
            assert_eq!(got["list"], want);
        }
    }

    #[test]
    fn update_manager_name_falls_back_to_user_agent() {
        assert_eq!(update_manager_name(Some("fm"), Some("kubectl/v1.33")), "fm");
        assert_eq!(
            update_manager_name(None, Some("kubectl/v1.33 (linux)")),
            "kubectl"
        );
        assert_eq!(update_manager_name(Some(""), None), "unknown");
    }
}
