//! PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch.

use serde_json::{Map, Value};

/// Why a patch could not be applied.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PatchError {
    /// 400: the patch document cannot be decoded.
    #[error("{0}")]
    BadRequest(String),
    /// 422: an operation failed (missing path, failed `test`, bad directive). Upstream answers
    /// with a generic message; this text says which operation failed, for logs.
    #[error("{0}")]
    Invalid(String),
    /// 415: strategic merge patch on a type that has no patch strategy (custom resources).
    #[error("{0}")]
    UnsupportedMediaType(String),
}

/// RFC 7386 JSON merge patch: objects merge recursively, `null` deletes, anything else replaces.
pub fn merge_patch(target: &Value, patch: &Value) -> Value {
    let mut out = target.clone();
    json_patch::merge(&mut out, patch);
    out
}

/// RFC 6902 JSON patch with evanphx/json-patch quirks (`test` of a missing path against `null`
/// succeeds). Operations apply in order; any failure leaves the target untouched.
pub fn json_patch(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    let ops: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|e| PatchError::BadRequest(format!("invalid JSON patch: {e}")))?;
    let mut out = target.clone();
    for (i, op) in ops.iter().enumerate() {
        if let json_patch::PatchOperation::Test(t) = op
            && t.value.is_null()
            && out.pointer(t.path.as_str()).is_none()
        {
            // evanphx/json-patch: a missing path "equals" null (kube's finalizer helper relies on it).
            continue;
        }
        json_patch::patch(&mut out, std::slice::from_ref(op)).map_err(|e| {
            PatchError::Invalid(format!("JSON patch operation {i} ({op}) failed: {e}"))
        })?;
    }
    Ok(out)
}

/// How a list field merges under strategic merge patch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ListStrategy {
    /// No `patchStrategy`: the patch's list replaces.
    Replace,
    /// `patchStrategy: merge` on a list of scalars: union.
    MergePrimitives,
    /// `patchStrategy: merge` with `patchMergeKey`.
    MergeByKey(&'static str),
}

/// The API groups served by kube-apiserver itself (strategic merge patch works on their types).
const BUILTIN_GROUPS: &[&str] = &[
    "",
    "apps",
    "batch",
    "autoscaling",
    "policy",
    "discovery.k8s.io",
    "coordination.k8s.io",
    "events.k8s.io",
    "networking.k8s.io",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "apiextensions.k8s.io",
    "admissionregistration.k8s.io",
    "scheduling.k8s.io",
    "node.k8s.io",
    "certificates.k8s.io",
    "resource.k8s.io",
    "apiregistration.k8s.io",
    "flowcontrol.apiserver.k8s.io",
];

/// Pod spec `patchMergeKey`s, relative to a pod spec.
fn pod_spec_strategy(rest: &[&str]) -> Option<ListStrategy> {
    let containers = ["containers", "initContainers", "ephemeralContainers"];
    Some(match rest {
        [c] if containers.contains(c) => ListStrategy::MergeByKey("name"),
        ["volumes"] | ["imagePullSecrets"] => ListStrategy::MergeByKey("name"),
        ["hostAliases"] => ListStrategy::MergeByKey("ip"),
        [c, "[]", "env"] if containers.contains(c) => ListStrategy::MergeByKey("name"),
        [c, "[]", "ports"] if containers.contains(c) => ListStrategy::MergeByKey("containerPort"),
        [c, "[]", "volumeMounts"] if containers.contains(c) => {
            ListStrategy::MergeByKey("mountPath")
        }
        [c, "[]", "volumeDevices"] if containers.contains(c) => {
            ListStrategy::MergeByKey("devicePath")
        }
        _ => return None,
    })
}

/// The `patchStrategy`/`patchMergeKey` tags of k8s.io/api for the served built-ins.
pub(crate) fn list_strategy(group: &str, kind: &str, path: &[&str]) -> ListStrategy {
    match path {
        ["metadata", "finalizers"] => return ListStrategy::MergePrimitives,
        ["metadata", "ownerReferences"] => return ListStrategy::MergeByKey("uid"),
        ["status", "conditions"] => return ListStrategy::MergeByKey("type"),
        _ => {}
    }
    let pod_prefix: &[&str] = match (group, kind) {
        ("", "Pod") => &["spec"],
        ("", "PodTemplate") => &["template", "spec"],
        ("apps", _) | ("batch", "Job") | ("", "ReplicationController") => {
            &["spec", "template", "spec"]
        }
        ("batch", "CronJob") => &["spec", "jobTemplate", "spec", "template", "spec"],
        _ => &[],
    };
    if !pod_prefix.is_empty()
        && let Some(rest) = path.strip_prefix(pod_prefix)
        && let Some(s) = pod_spec_strategy(rest)
    {
        return s;
    }
    match (group, kind, path) {
        ("", "Service", ["spec", "ports"]) => ListStrategy::MergeByKey("port"),
        ("", "Namespace", ["spec", "finalizers"]) => ListStrategy::MergePrimitives,
        _ => ListStrategy::Replace,
    }
}

/// Strategic merge patch for a built-in kind (`group` `""` for core). Lists with a patch merge
/// key merge by it, `$patch: replace|delete|merge`, `$deleteFromPrimitiveList/<f>`,
/// `$setElementOrder/<f>` and `$retainKeys` directives are honoured; lists of unknown fields
/// are replaced. A kind without a strategy answers [`PatchError::UnsupportedMediaType`].
pub fn strategic_merge_patch(
    target: &Value,
    patch: &Value,
    group: &str,
    kind: &str,
) -> Result<Value, PatchError> {
    if !BUILTIN_GROUPS.contains(&group) {
        return Err(PatchError::UnsupportedMediaType(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".to_owned(),
        ));
    }
    if !patch.is_object() {
        return Err(PatchError::BadRequest(
            "strategic merge patch must be a JSON object".to_owned(),
        ));
    }
    let strategy = |path: &[&str]| list_strategy(group, kind, path);
    let merged = smp_map(target.as_object(), patch, &mut Vec::new(), &strategy)?;
    Ok(merged
        .map(Value::Object)
        .unwrap_or_else(|| Value::Object(Map::new())))
}

type Strategy<'a> = &'a dyn Fn(&[&str]) -> ListStrategy;

/// Merges a patch map into an original map; `None` means "delete this map".
fn smp_map<'p>(
    original: Option<&Map<String, Value>>,
    patch: &'p Value,
    names: &mut Vec<&'p str>,
    strategy: Strategy<'_>,
) -> Result<Option<Map<String, Value>>, PatchError> {
    let Value::Object(p) = patch else {
        return Err(PatchError::Invalid(format!(
            "{}: expected a map in the patch",
            names.join(".")
        )));
    };
    match p.get("$patch").and_then(Value::as_str) {
        Some("delete") => return Ok(None),
        Some("replace") => {
            let mut m = p.clone();
            m.remove("$patch");
            return Ok(Some(m));
        }
        Some("merge") | None => {}
        Some(other) => {
            return Err(PatchError::Invalid(format!(
                "unknown patch type: {other:?}"
            )));
        }
    }
    let mut out = original.cloned().unwrap_or_default();
    for (k, pv) in p {
        if k == "$patch" || k == "$retainKeys" || k.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            let remove = pv.as_array().cloned().unwrap_or_default();
            if let Some(Value::Array(items)) = out.get_mut(field) {
                items.retain(|i| !remove.contains(i));
            }
            continue;
        }
        names.push(k);
        let merged = match pv {
            Value::Null => None,
            Value::Object(_) => match out.get(k) {
                Some(Value::Object(om)) => {
                    smp_map(Some(om), pv, names, strategy)?.map(Value::Object)
                }
                _ => smp_map(None, pv, names, strategy)?.map(Value::Object),
            },
            Value::Array(items) => Some(Value::Array(smp_list(
                out.get(k).and_then(Value::as_array),
                items,
                names,
                strategy,
            )?)),
            scalar => Some(scalar.clone()),
        };
        names.pop();
        match merged {
            Some(v) => {
                out.insert(k.clone(), v);
            }
            None => {
                out.remove(k);
            }
        }
    }
    // `$setElementOrder/<f>`: the patch's order for merged lists.
    for (k, order) in p {
        let Some(field) = k.strip_prefix("$setElementOrder/") else {
            continue;
        };
        let Some(order) = order.as_array() else {
            continue;
        };
        let mut path: Vec<&str> = names.clone();
        path.push(field);
        let key = match strategy(&path) {
            ListStrategy::MergeByKey(key) => Some(key),
            _ => None,
        };
        let live: Vec<Value> = original
            .and_then(|o| o.get(field))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if let Some(Value::Array(items)) = out.get_mut(field) {
            reorder(items, order, &live, key);
        }
    }
    if let Some(retain) = p.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
        out.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(Some(out))
}

/// `$setElementOrder` as apimachinery's `normalizeElementOrder`: the merged items named in
/// `order` are sorted by it, the others ("server-only") keep their live order, and the two runs
/// are interleaved by their positions in the live list (`mergeSortedSlice`).
fn reorder(items: &mut Vec<Value>, order: &[Value], live: &[Value], key: Option<&str>) {
    let id = |v: &Value| -> Value {
        match key {
            Some(k) => v.get(k).cloned().unwrap_or(Value::Null),
            None => v.clone(),
        }
    };
    let pos_in = |list: &[Value], v: &Value| {
        let want = id(v);
        list.iter().position(|x| id(x) == want)
    };
    let (mut patch_items, mut server_only): (Vec<Value>, Vec<Value>) =
        items.drain(..).partition(|i| pos_in(order, i).is_some());
    patch_items.sort_by_key(|i| pos_in(order, i).unwrap_or(usize::MAX));
    server_only.sort_by_key(|i| pos_in(live, i).unwrap_or(usize::MAX));
    let (mut left, mut right) = (
        server_only.into_iter().peekable(),
        patch_items.into_iter().peekable(),
    );
    let mut out = Vec::new();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => {
                matches!((pos_in(live, l), pos_in(live, r)), (Some(a), Some(b)) if a < b)
            }
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next);
    }
    *items = out;
}

fn smp_list<'p>(
    original: Option<&Vec<Value>>,
    patch: &'p [Value],
    names: &mut Vec<&'p str>,
    strategy: Strategy<'_>,
) -> Result<Vec<Value>, PatchError> {
    match strategy(names) {
        ListStrategy::Replace => Ok(patch.to_vec()),
        ListStrategy::MergePrimitives => {
            let live = original.cloned().unwrap_or_default();
            let mut out = live.clone();
            for item in patch {
                if !out.contains(item) {
                    out.push(item.clone());
                }
            }
            // `mergeSlice` enforces an order: the patch's items (new ones first) interleaved
            // with the others by their live positions.
            reorder(&mut out, patch, &live, None);
            Ok(out)
        }
        ListStrategy::MergeByKey(key) => {
            // `{"$patch": "replace"}` as an element replaces the whole list.
            if patch
                .iter()
                .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
            {
                return Ok(patch
                    .iter()
                    .filter(|i| i.get("$patch").is_none())
                    .cloned()
                    .collect());
            }
            let mut out = original.cloned().unwrap_or_default();
            names.push("[]");
            for item in patch {
                let Some(k) = item.get(key) else {
                    names.pop();
                    return Err(PatchError::Invalid(format!(
                        "map: {item} does not contain declared merge key: {key}"
                    )));
                };
                let pos = out.iter().position(|o| o.get(key) == Some(k));
                let merged = smp_map(pos.and_then(|i| out[i].as_object()), item, names, strategy)?;
                match (pos, merged) {
                    (Some(i), Some(m)) => out[i] = Value::Object(m),
                    (Some(i), None) => {
                        out.remove(i);
                    }
                    (None, Some(m)) => out.push(Value::Object(m)),
                    (None, None) => {}
                }
            }
            names.pop();
            let live: Vec<Value> = original
                .into_iter()
                .flatten()
                .filter(|o| out.iter().any(|i| i.get(key) == o.get(key)))
                .cloned()
                .collect();
            let order: Vec<Value> = patch
                .iter()
                .filter(|i| i.get("$patch").is_none())
                .cloned()
                .collect();
            reorder(&mut out, &order, &live, Some(key));
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc7386() {
        let target = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        let patch = json!({"a": "z", "c": {"f": null}, "l": [3]});
        assert_eq!(
            merge_patch(&target, &patch),
            json!({"a": "z", "c": {"d": "e"}, "l": [3]})
        );
    }

    #[test]
    fn json_patch_ops_and_test_null_on_missing_path() {
        let target = json!({"metadata": {"name": "x"}});
        let patch = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["a/b"]},
            {"op": "add", "path": "/metadata/finalizers/-", "value": "c~d"},
            {"op": "test", "path": "/metadata/finalizers/1", "value": "c~d"}
        ]);
        let out = json_patch(&target, &patch).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["a/b", "c~d"]));
        let escaped = json!([{"op": "add", "path": "/metadata/labels", "value": {}},
            {"op": "add", "path": "/metadata/labels/a~1b", "value": "1"}]);
        assert_eq!(
            json_patch(&target, &escaped).unwrap()["metadata"]["labels"]["a/b"],
            "1"
        );
    }

    #[test]
    fn json_patch_failures_are_invalid_and_garbage_is_bad_request() {
        let target = json!({"metadata": {"finalizers": ["x"]}});
        let failing_test = json!([{"op": "test", "path": "/metadata/finalizers", "value": null}]);
        assert!(matches!(
            json_patch(&target, &failing_test),
            Err(PatchError::Invalid(_))
        ));
        let missing = json!([{"op": "remove", "path": "/spec/x"}]);
        assert!(matches!(
            json_patch(&target, &missing),
            Err(PatchError::Invalid(_))
        ));
        assert!(matches!(
            json_patch(&target, &json!({"op": "add"})),
            Err(PatchError::BadRequest(_))
        ));
        assert!(matches!(
            json_patch(&target, &json!([{"op": "frobnicate", "path": "/a"}])),
            Err(PatchError::BadRequest(_))
        ));
    }

    fn pod() -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "finalizers": ["a"], "labels": {"x": "1"},
                "ownerReferences": [{"uid": "u1", "name": "o1"}]},
            "spec": {"containers": [
                {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}],
                 "ports": [{"containerPort": 80, "name": "http"}]},
                {"name": "side", "image": "side:1"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    }

    #[test]
    fn strategic_merge_by_keys_and_primitive_union() {
        let patch = json!({
            "metadata": {"finalizers": ["b"], "labels": {"x": null, "y": "2"},
                         "ownerReferences": [{"uid": "u2", "name": "o2"}]},
            "spec": {"containers": [{"name": "app", "image": "app:2",
                                     "env": [{"name": "B", "value": "2"}]}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let out = strategic_merge_patch(&pod(), &patch, "", "Pod").unwrap();
        // New items of a merged list come first (`mergeSlice`'s order, as kube-apiserver).
        assert_eq!(out["metadata"]["finalizers"], json!(["b", "a"]));
        assert_eq!(out["metadata"]["labels"], json!({"y": "2"}));
        assert_eq!(
            out["metadata"]["ownerReferences"].as_array().unwrap().len(),
            2
        );
        let c = &out["spec"]["containers"];
        assert_eq!(c.as_array().unwrap().len(), 2);
        assert_eq!(c[0]["image"], "app:2");
        assert_eq!(
            c[0]["env"],
            json!([{"name": "B", "value": "2"}, {"name": "A", "value": "1"}])
        );
        assert_eq!(
            c[0]["ports"],
            json!([{"containerPort": 80, "name": "http"}])
        );
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}])
        );
    }

    #[test]
    fn strategic_directives() {
        let patch = json!({
            "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]},
            "spec": {
                "containers": [{"name": "side", "$patch": "delete"},
                               {"name": "new", "image": "n:1"}],
                "$setElementOrder/containers": [{"name": "new"}, {"name": "app"}]}});
        let out = strategic_merge_patch(&pod(), &patch, "", "Pod").unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!([]));
        let names: Vec<&str> = out["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec!["new", "app"]);

        // Server-only items are interleaved by their live position (apimachinery mergeSortedSlice).
        let mut three = pod();
        three["spec"]["containers"] = json!([{"name": "a"}, {"name": "b"}, {"name": "c"}]);
        let order = json!({"spec": {"containers": [{"name": "b", "image": "x"}],
            "$setElementOrder/containers": [{"name": "c"}, {"name": "b"}]}});
        let out = strategic_merge_patch(&three, &order, "", "Pod").unwrap();
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "a"}, {"name": "c"}, {"name": "b", "image": "x"}])
        );

        let replace = json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "only"}]}});
        let out = strategic_merge_patch(&pod(), &replace, "", "Pod").unwrap();
        assert_eq!(out["spec"]["containers"], json!([{"name": "only"}]));

        let map_replace = json!({"metadata": {"labels": {"$patch": "replace", "z": "9"}}});
        let out = strategic_merge_patch(&pod(), &map_replace, "", "Pod").unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"z": "9"}));

        let map_delete = json!({"status": {"$patch": "delete"}});
        let out = strategic_merge_patch(&pod(), &map_delete, "", "Pod").unwrap();
        assert!(out.get("status").is_none());

        let retain = json!({"spec": {"$retainKeys": ["containers"], "containers": []}});
        let mut p = pod();
        p["spec"]["hostname"] = json!("h");
        let out = strategic_merge_patch(&p, &retain, "", "Pod").unwrap();
        assert!(out["spec"].get("hostname").is_none());
    }

    #[test]
    fn strategic_lists_without_strategy_replace_and_crs_are_415() {
        let slice = json!({"endpoints": [{"addresses": ["10.0.0.1"]}], "ports": [{"port": 1}]});
        let out = strategic_merge_patch(
            &slice,
            &json!({"endpoints": [{"addresses": ["10.0.0.2"]}]}),
            "discovery.k8s.io",
            "EndpointSlice",
        )
        .unwrap();
        assert_eq!(out["endpoints"], json!([{"addresses": ["10.0.0.2"]}]));
        let svc = json!({"spec": {"ports": [{"port": 80, "name": "a"}, {"port": 81}]}});
        let out = strategic_merge_patch(
            &svc,
            &json!({"spec": {"ports": [{"port": 81, "name": "b"}]}}),
            "",
            "Service",
        )
        .unwrap();
        assert_eq!(
            out["spec"]["ports"],
            json!([{"port": 80, "name": "a"}, {"port": 81, "name": "b"}])
        );
        let ep = json!({"subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}]});
        let out = strategic_merge_patch(
            &ep,
            &json!({"subsets": [{"addresses": [{"ip": "10.0.0.2"}]}]}),
            "",
            "Endpoints",
        )
        .unwrap();
        assert_eq!(
            out["subsets"],
            json!([{"addresses": [{"ip": "10.0.0.2"}]}]),
            "subsets has no patch strategy"
        );
        assert!(matches!(
            strategic_merge_patch(&svc, &json!({}), "portmapper.dev", "PortMapping"),
            Err(PatchError::UnsupportedMediaType(_))
        ));
        assert!(matches!(
            strategic_merge_patch(
                &svc,
                &json!({"spec": {"ports": [{"name": "x"}]}}),
                "",
                "Service"
            ),
            Err(PatchError::Invalid(_))
        ));
    }
}
