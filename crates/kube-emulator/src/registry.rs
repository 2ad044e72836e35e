//! The resource types the emulator serves: built-ins plus Established CRDs.

use std::sync::Arc;

use serde_json::Value;

/// (group, plural): the storage identity of a resource type (one served version each).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupResource {
    /// API group, empty for core.
    pub group: String,
    /// Plural resource name.
    pub resource: String,
}

impl GroupResource {
    /// Build from parts.
    pub fn new(group: &str, resource: &str) -> Self {
        Self {
            group: group.to_string(),
            resource: resource.to_string(),
        }
    }
}

/// When `metadata.generation` bumps (docs/emulator-spec.md §2.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GenerationPolicy {
    /// No generation field.
    None,
    /// Any change outside metadata (and outside status when status is a subresource).
    Spec,
    /// Like `Spec`, plus label changes (EndpointSlice).
    SpecOrLabels,
}

/// Per-CRD serving details.
#[derive(Debug, Clone)]
pub struct CrdInfo {
    /// Name of the CRD object.
    pub crd_name: String,
    /// resourceVersion of the CRD this was built from.
    pub crd_rv: String,
    /// `openAPIV3Schema` of the served version (may be `Null`).
    pub schema: Value,
    /// `additionalPrinterColumns` of the served version.
    pub printer_columns: Value,
    /// Compiled schema (pruning, defaults, OpenAPI + CEL validation); None if not structural.
    pub validator: Option<Arc<apiserver_semantics::schema::CrdValidator>>,
}

/// Everything the server needs to know about one resource type.
#[derive(Debug, Clone)]
pub struct ResourceType {
    /// API group ("" = core).
    pub group: String,
    /// Served version.
    pub version: String,
    /// Plural name (URL segment).
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// List kind.
    pub list_kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names for kubectl.
    pub short_names: Vec<String>,
    /// Categories (e.g. `all`).
    pub categories: Vec<String>,
    /// Has a `/status` subresource.
    pub status_subresource: bool,
    /// Generation rule.
    pub generation: GenerationPolicy,
    /// PUT of a missing object creates it.
    pub create_on_update: bool,
    /// PUT without resourceVersion is allowed.
    pub unconditional_update: bool,
    /// Built-in type (strategic merge patch allowed).
    pub builtin: bool,
    /// Set for custom resources.
    pub crd: Option<Arc<CrdInfo>>,
}

impl ResourceType {
    /// Storage key.
    pub fn gr(&self) -> GroupResource {
        GroupResource::new(&self.group, &self.plural)
    }

    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `plural.group` as used in messages.
    pub fn qualified(&self) -> String {
        crate::error::qualified(&self.plural, &self.group)
    }

    /// Verbs advertised in discovery.
    pub fn verbs(&self) -> Vec<&'static str> {
        vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }
}

#[allow(clippy::too_many_arguments)]
fn builtin(
    group: &str,
    version: &str,
    plural: &str,
    kind: &str,
    namespaced: bool,
    short: &[&str],
    status: bool,
    generation: GenerationPolicy,
    create_on_update: bool,
    unconditional_update: bool,
) -> ResourceType {
    ResourceType {
        group: group.into(),
        version: version.into(),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        kind: kind.into(),
        list_kind: format!("{kind}List"),
        namespaced,
        short_names: short.iter().map(|s| s.to_string()).collect(),
        categories: Vec::new(),
        status_subresource: status,
        generation,
        create_on_update,
        unconditional_update,
        builtin: true,
        crd: None,
    }
}

/// The built-in types served (docs/emulator-spec.md §1.8 P0 set).
pub fn builtins() -> Vec<ResourceType> {
    use GenerationPolicy as G;
    let mut v = vec![
        builtin(
            "",
            "v1",
            "namespaces",
            "Namespace",
            false,
            &["ns"],
            true,
            G::None,
            false,
            true,
        ),
        builtin(
            "",
            "v1",
            "services",
            "Service",
            true,
            &["svc"],
            true,
            G::None,
            true,
            true,
        ),
        builtin(
            "",
            "v1",
            "endpoints",
            "Endpoints",
            true,
            &["ep"],
            false,
            G::None,
            true,
            true,
        ),
        builtin(
            "",
            "v1",
            "pods",
            "Pod",
            true,
            &["po"],
            true,
            G::Spec,
            false,
            true,
        ),
        builtin(
            "",
            "v1",
            "configmaps",
            "ConfigMap",
            true,
            &["cm"],
            false,
            G::None,
            false,
            true,
        ),
        builtin(
            "",
            "v1",
            "secrets",
            "Secret",
            true,
            &[],
            false,
            G::None,
            false,
            true,
        ),
        builtin(
            "",
            "v1",
            "events",
            "Event",
            true,
            &["ev"],
            false,
            G::None,
            true,
            true,
        ),
        builtin(
            "",
            "v1",
            "serviceaccounts",
            "ServiceAccount",
            true,
            &["sa"],
            false,
            G::None,
            false,
            true,
        ),
        builtin(
            "",
            "v1",
            "nodes",
            "Node",
            false,
            &["no"],
            true,
            G::None,
            false,
            true,
        ),
        builtin(
            "discovery.k8s.io",
            "v1",
            "endpointslices",
            "EndpointSlice",
            true,
            &[],
            false,
            G::SpecOrLabels,
            false,
            true,
        ),
        builtin(
            "coordination.k8s.io",
            "v1",
            "leases",
            "Lease",
            true,
            &[],
            false,
            G::None,
            true,
            false,
        ),
        builtin(
            "events.k8s.io",
            "v1",
            "events",
            "Event",
            true,
            &["ev"],
            false,
            G::None,
            false,
            true,
        ),
        builtin(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            &["crd", "crds"],
            true,
            G::Spec,
            false,
            false,
        ),
    ];
    for rt in &mut v {
        if rt.group.is_empty() && matches!(rt.plural.as_str(), "services" | "pods") {
            rt.categories = vec!["all".into()];
        }
    }
    v
}

/// Derive the served resource type of an Established CRD object (`None` if malformed).
pub fn from_crd(crd: &Value) -> Option<ResourceType> {
    let spec = crd.get("spec")?;
    let group = spec.get("group")?.as_str()?.to_string();
    let names = spec.get("names")?;
    let plural = names.get("plural")?.as_str()?.to_string();
    let kind = names.get("kind")?.as_str()?.to_string();
    let singular = names
        .get("singular")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let list_kind = names
        .get("listKind")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| format!("{kind}List"));
    let str_list = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let versions = spec.get("versions")?.as_array()?;
    // One served version per resource: prefer the storage version if served, else the first served.
    let served: Vec<&Value> = versions
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(false))
        .collect();
    let ver = served
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool).unwrap_or(false))
        .or_else(|| served.first())?;
    let version = ver.get("name")?.as_str()?.to_string();
    let status_subresource = ver.pointer("/subresources/status").is_some();
    let schema = ver
        .pointer("/schema/openAPIV3Schema")
        .cloned()
        .unwrap_or(Value::Null);
    let printer_columns = ver
        .get("additionalPrinterColumns")
        .cloned()
        .unwrap_or(Value::Null);
    let namespaced = spec.get("scope").and_then(Value::as_str) != Some("Cluster");
    Some(ResourceType {
        group,
        version,
        plural,
        singular,
        kind,
        list_kind,
        namespaced,
        short_names: str_list(names.get("shortNames")),
        categories: str_list(names.get("categories")),
        status_subresource,
        generation: GenerationPolicy::Spec,
        create_on_update: false,
        unconditional_update: false,
        builtin: false,
        crd: Some(Arc::new(CrdInfo {
            crd_rv: crd
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            crd_name: crd
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            validator: apiserver_semantics::schema::CrdValidator::new(&schema, "openAPIV3Schema")
                .ok()
                .map(Arc::new),
            schema,
            printer_columns,
        })),
    })
}
