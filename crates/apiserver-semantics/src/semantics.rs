//! Schema knowledge that server-side apply needs: list types (`atomic`/`set`/`map` + keys), map
//! types (`granular`/`atomic`), struct-vs-map objects, and whether the type has `/status`.
//!
//! Paths given to [`ObjectSchema`] are field names from the object root, with `[]` standing for
//! "an item of the list here" (e.g. `["spec", "ports", "[]", "name"]`).

use serde_json::Value;

/// `+listType` / `x-kubernetes-list-type`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListType {
    /// The whole list is one value (the default).
    Atomic,
    /// Items are scalars, each one owned separately (`v:` elements).
    Set,
    /// Items are objects keyed by these fields (`k:` elements).
    Map(Vec<String>),
}

/// `+mapType` / `x-kubernetes-map-type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapType {
    /// Each key is owned separately (the default).
    Granular,
    /// The whole map is one value.
    Atomic,
}

/// What SSA needs to know about a type's schema.
pub trait ObjectSchema {
    /// Semantics of the list at `path`.
    fn list_type(&self, path: &[&str]) -> ListType;
    /// Semantics of the object at `path`.
    fn map_type(&self, path: &[&str]) -> MapType;
    /// `true` when the object at `path` is a map (its keys are owned members, like labels);
    /// `false` for a struct (only its fields' values are owned).
    fn is_map(&self, path: &[&str]) -> bool;
    /// Whether the type has a `/status` subresource (then `status` is a reset field of the main
    /// endpoint and the only field of `/status`).
    fn has_status_subresource(&self) -> bool;
    /// The default of associative-list key field `key` of the list at `path`, used when an item
    /// omits it (upstream keys items with the schema default, e.g. Service port `protocol`).
    fn key_default(&self, path: &[&str], key: &str) -> Option<Value> {
        let _ = (path, key);
        None
    }
    /// The empty typed object as Go writes it (value structs such as a Service's `spec` and
    /// `status`, nil slices such as a Pod's `spec.containers`): a create does not "add" what it
    /// holds, so Update entries carry no `.` for those fields, as on a real server. Custom
    /// resources have none (`None`).
    fn empty_object(&self) -> Option<Value> {
        None
    }
}

/// ObjectMeta's markers (shared by built-ins and CRs).
fn metadata_list_type(rest: &[&str]) -> Option<ListType> {
    match rest {
        ["finalizers"] => Some(ListType::Set),
        ["ownerReferences"] => Some(ListType::Map(vec!["uid".to_owned()])),
        _ => None,
    }
}

/// `OwnerReference` is `+structType=atomic`: an owner reference is owned as one value.
fn metadata_map_type(rest: &[&str]) -> MapType {
    match rest {
        ["ownerReferences", "[]"] => MapType::Atomic,
        _ => MapType::Granular,
    }
}

fn metadata_is_map(rest: &[&str]) -> bool {
    matches!(rest, ["labels"] | ["annotations"])
}

fn keys(k: &[&str]) -> ListType {
    ListType::Map(k.iter().map(|s| (*s).to_owned()).collect())
}

/// Pod spec markers, relative to a pod spec (`spec` of a Pod, `spec.template.spec` of workloads).
fn pod_spec_list_type(rest: &[&str]) -> Option<ListType> {
    let containers = ["containers", "initContainers", "ephemeralContainers"];
    match rest {
        [c] if containers.contains(c) => Some(keys(&["name"])),
        ["volumes"] | ["imagePullSecrets"] => Some(keys(&["name"])),
        [c, "[]", "env"] if containers.contains(c) => Some(keys(&["name"])),
        [c, "[]", "ports"] if containers.contains(c) => Some(keys(&["containerPort", "protocol"])),
        [c, "[]", "volumeMounts"] if containers.contains(c) => Some(keys(&["mountPath"])),
        [c, "[]", "volumeDevices"] if containers.contains(c) => Some(keys(&["devicePath"])),
        _ => None,
    }
}

fn pod_spec_is_map(rest: &[&str]) -> bool {
    matches!(rest, ["nodeSelector"] | ["overhead"])
        || matches!(rest, [_, "[]", "resources", "limits" | "requests"])
}

/// Built-in types: the markers of k8s.io/api that matter for the emulated kinds
/// (docs/emulator-spec.md §4.4); other fields fall back to atomic lists and struct objects.
#[derive(Clone, Debug)]
pub struct BuiltinSchema {
    group: String,
    kind: String,
}

impl BuiltinSchema {
    /// Schema knowledge for a built-in kind (`group` is `""` for core).
    pub fn for_kind(group: &str, kind: &str) -> Self {
        Self {
            group: group.to_owned(),
            kind: kind.to_owned(),
        }
    }

    fn pod_spec_prefix(&self) -> Option<&'static [&'static str]> {
        match (self.group.as_str(), self.kind.as_str()) {
            ("", "Pod") => Some(&["spec"]),
            ("", "PodTemplate") => Some(&["template", "spec"]),
            ("apps", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet")
            | ("", "ReplicationController")
            | ("batch", "Job") => Some(&["spec", "template", "spec"]),
            _ => None,
        }
    }
}

impl ObjectSchema for BuiltinSchema {
    fn list_type(&self, path: &[&str]) -> ListType {
        if let ["metadata", rest @ ..] = path {
            return metadata_list_type(rest).unwrap_or(ListType::Atomic);
        }
        if let Some(prefix) = self.pod_spec_prefix()
            && let Some(rest) = path.strip_prefix(prefix)
            && let Some(lt) = pod_spec_list_type(rest)
        {
            return lt;
        }
        match (self.group.as_str(), self.kind.as_str(), path) {
            ("", "Service", ["spec", "ports"]) => keys(&["port", "protocol"]),
            ("", "Node", ["status", "addresses"]) => keys(&["type"]),
            ("discovery.k8s.io", "EndpointSlice", ["endpoints", "[]", "addresses"]) => {
                ListType::Set
            }
            ("", "Pod", ["status", "podIPs"]) => keys(&["ip"]),
            (_, _, ["status", "conditions"]) => keys(&["type"]),
            _ => ListType::Atomic,
        }
    }

    fn map_type(&self, path: &[&str]) -> MapType {
        if let ["metadata", rest @ ..] = path {
            return metadata_map_type(rest);
        }
        match (self.group.as_str(), self.kind.as_str(), path) {
            ("", "Service", ["spec", "selector"]) => MapType::Atomic,
            // ObjectReference is `+structType=atomic`.
            ("", "Event", ["involvedObject" | "related"])
            | ("events.k8s.io", "Event", ["regarding" | "related"]) => MapType::Atomic,
            _ => MapType::Granular,
        }
    }

    fn is_map(&self, path: &[&str]) -> bool {
        if let ["metadata", rest @ ..] = path {
            return metadata_is_map(rest);
        }
        if let Some(prefix) = self.pod_spec_prefix()
            && let Some(rest) = path.strip_prefix(prefix)
            && pod_spec_is_map(rest)
        {
            return true;
        }
        matches!(
            (self.group.as_str(), self.kind.as_str(), path),
            ("", "Service", ["spec", "selector"])
                | ("", "ConfigMap", ["data" | "binaryData"])
                | ("", "Secret", ["data" | "stringData"])
                | (
                    "discovery.k8s.io",
                    "EndpointSlice",
                    ["endpoints", "[]", "deprecatedTopology"]
                )
                | ("apps", _, ["spec", "selector", "matchLabels"])
        )
    }

    fn has_status_subresource(&self) -> bool {
        // docs/emulator-spec.md §2.6: the built-ins served with /status.
        matches!(
            (self.group.as_str(), self.kind.as_str()),
            (
                "",
                "Service"
                    | "Pod"
                    | "Namespace"
                    | "ReplicationController"
                    | "PersistentVolumeClaim"
                    | "Node"
            ) | ("apiextensions.k8s.io", "CustomResourceDefinition")
                | ("apps", _)
                | ("batch", _)
        )
    }

    fn key_default(&self, _path: &[&str], key: &str) -> Option<Value> {
        // Service ports and container ports default `protocol` to TCP.
        (key == "protocol").then(|| Value::String("TCP".to_owned()))
    }

    fn empty_object(&self) -> Option<Value> {
        let top: &[&str] = match (self.group.as_str(), self.kind.as_str()) {
            ("", "PersistentVolumeClaim" | "ReplicationController")
            | ("apps" | "batch", _)
            | ("apiextensions.k8s.io", "CustomResourceDefinition") => &["spec", "status"],
            _ => &[],
        };
        let mut empty = crate::goshape::empty(&self.group, &self.kind);
        if let Value::Object(m) = &mut empty {
            for f in top {
                m.insert((*f).to_owned(), Value::Object(serde_json::Map::new()));
            }
        }
        empty
            .as_object()
            .is_some_and(|m| !m.is_empty())
            .then_some(empty)
    }
}

/// A CRD version's `openAPIV3Schema`, read for `x-kubernetes-list-type`,
/// `x-kubernetes-list-map-keys`, `x-kubernetes-map-type`, `additionalProperties` and
/// `x-kubernetes-preserve-unknown-fields`; `metadata` follows ObjectMeta's markers.
#[derive(Clone, Debug)]
pub struct CrdSchema {
    schema: Value,
    status_subresource: bool,
}

impl CrdSchema {
    /// From a version's `schema.openAPIV3Schema` and whether it declares `subresources.status`.
    pub fn new(open_api_v3_schema: &Value, status_subresource: bool) -> Self {
        Self {
            schema: open_api_v3_schema.clone(),
            status_subresource,
        }
    }

    /// From a CRD object and a version name; `None` if the version or its schema is missing.
    pub fn from_crd(crd: &Value, version: &str) -> Option<Self> {
        let v = crd["spec"]["versions"]
            .as_array()?
            .iter()
            .find(|v| v["name"] == version)?;
        let schema = v["schema"].get("openAPIV3Schema")?;
        let status = v["subresources"].get("status").is_some()
            || crd["spec"]["subresources"].get("status").is_some();
        Some(Self::new(schema, status))
    }

    /// The schema node at `path`: `Known(node)`, or `Unknown` inside a
    /// `x-kubernetes-preserve-unknown-fields` region (lists atomic, objects granular maps).
    fn node(&self, path: &[&str]) -> Node<'_> {
        let mut node = &self.schema;
        for seg in path {
            let next = if *seg == "[]" {
                node.get("items")
            } else {
                node.get("properties")
                    .and_then(|p| p.get(*seg))
                    .or_else(|| node.get("additionalProperties").filter(|a| a.is_object()))
            };
            match next {
                Some(n) => node = n,
                None => return Node::Unknown,
            }
        }
        Node::Known(node)
    }
}

enum Node<'a> {
    Known(&'a Value),
    Unknown,
}

impl ObjectSchema for CrdSchema {
    fn list_type(&self, path: &[&str]) -> ListType {
        if let ["metadata", rest @ ..] = path {
            return metadata_list_type(rest).unwrap_or(ListType::Atomic);
        }
        match self.node(path) {
            Node::Known(n) => match n.get("x-kubernetes-list-type").and_then(Value::as_str) {
                Some("set") => ListType::Set,
                Some("map") => ListType::Map(
                    n.get("x-kubernetes-list-map-keys")
                        .and_then(Value::as_array)
                        .map(|ks| {
                            ks.iter()
                                .filter_map(|k| k.as_str().map(str::to_owned))
                                .collect()
                        })
                        .unwrap_or_default(),
                ),
                _ => ListType::Atomic,
            },
            Node::Unknown => ListType::Atomic,
        }
    }

    fn map_type(&self, path: &[&str]) -> MapType {
        if let ["metadata", rest @ ..] = path {
            return metadata_map_type(rest);
        }
        match self.node(path) {
            Node::Known(n)
                if n.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic") =>
            {
                MapType::Atomic
            }
            _ => MapType::Granular,
        }
    }

    fn is_map(&self, path: &[&str]) -> bool {
        if let ["metadata", rest @ ..] = path {
            return metadata_is_map(rest);
        }
        match self.node(path) {
            Node::Known(n) => {
                let has_props = n
                    .get("properties")
                    .is_some_and(|p| p.as_object().is_some_and(|m| !m.is_empty()));
                let additional = n
                    .get("additionalProperties")
                    .is_some_and(|a| a.is_object() || a == true);
                let preserve =
                    n.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
                !has_props && (additional || preserve)
            }
            Node::Unknown => true,
        }
    }

    fn has_status_subresource(&self) -> bool {
        self.status_subresource
    }

    fn key_default(&self, path: &[&str], key: &str) -> Option<Value> {
        let mut item_path: Vec<&str> = path.to_vec();
        item_path.push("[]");
        item_path.push(key);
        match self.node(&item_path) {
            Node::Known(n) => n.get("default").cloned(),
            Node::Unknown => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn builtin_markers() {
        let es = BuiltinSchema::for_kind("discovery.k8s.io", "EndpointSlice");
        assert_eq!(es.list_type(&["endpoints"]), ListType::Atomic);
        assert_eq!(es.list_type(&["ports"]), ListType::Atomic);
        assert_eq!(es.list_type(&["metadata", "finalizers"]), ListType::Set);
        assert_eq!(
            es.list_type(&["metadata", "ownerReferences"]),
            ListType::Map(vec!["uid".into()])
        );
        assert!(es.is_map(&["metadata", "labels"]));
        assert!(!es.is_map(&["metadata"]));
        assert!(!es.has_status_subresource());
        let svc = BuiltinSchema::for_kind("", "Service");
        assert_eq!(
            svc.list_type(&["spec", "ports"]),
            ListType::Map(vec!["port".into(), "protocol".into()])
        );
        assert_eq!(svc.map_type(&["spec", "selector"]), MapType::Atomic);
        assert!(svc.has_status_subresource());
        let dep = BuiltinSchema::for_kind("apps", "Deployment");
        assert_eq!(
            dep.list_type(&["spec", "template", "spec", "containers", "[]", "env"]),
            ListType::Map(vec!["name".into()])
        );
    }

    #[test]
    fn crd_markers() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                          "x-kubernetes-list-map-keys": ["name"],
                          "items": {"type": "object", "properties": {"name": {"type": "string", "default": "x"}}}},
                "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                "sel": {"type": "object", "x-kubernetes-map-type": "atomic",
                        "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}});
        let crd = CrdSchema::new(&schema, true);
        assert_eq!(
            crd.list_type(&["spec", "ports"]),
            ListType::Map(vec!["name".into()])
        );
        assert_eq!(crd.list_type(&["spec", "tags"]), ListType::Set);
        assert_eq!(crd.list_type(&["spec", "free", "x"]), ListType::Atomic);
        assert_eq!(crd.map_type(&["spec", "sel"]), MapType::Atomic);
        assert!(crd.is_map(&["spec", "sel"]));
        assert!(crd.is_map(&["spec", "free"]));
        assert!(crd.is_map(&["spec", "free", "deep"]));
        assert!(!crd.is_map(&["spec"]));
        assert_eq!(
            crd.key_default(&["spec", "ports"], "name"),
            Some(json!("x"))
        );
        assert!(crd.has_status_subresource());
    }
}
