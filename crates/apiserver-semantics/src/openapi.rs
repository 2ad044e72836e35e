//! `/openapi/v2` and `/openapi/v3` documents from the CRD schemas plus the served built-ins'
//! schemas (generated from k8s-openapi, i.e. the Kubernetes OpenAPI with its descriptions).
//!
//! What kubectl 1.27–1.33 does with them:
//! - `kubectl apply/create/replace` ask `/openapi/v3`, then the group-version document, whether
//!   the PATCH operation of the object's GVK (`x-kubernetes-group-version-kind`) lists the
//!   `fieldValidation` parameter (client-go `QueryParamVerifierV3`; for a GVK it cannot find it
//!   asks about core/v1 Namespace instead). Supported → it sends `fieldValidation=Strict` and
//!   validates nothing itself; a missing `/openapi/v3` is an error for kubectl. So every served
//!   GVK gets paths with PATCH operations carrying that parameter.
//! - `kubectl explain` (v3 by default since 1.27) finds the schema whose
//!   `x-kubernetes-group-version-kind` matches in `components.schemas` of the group-version
//!   document and follows `$ref`/`allOf` into `#/components/schemas/...`.
//! - `/openapi/v2` is read by kubectl only as protobuf (gnostic); the JSON Swagger here serves
//!   other clients and `kubectl get --raw`. A server should answer 406 to the protobuf `Accept`
//!   (kubectl then tolerates the missing document).

use serde_json::{Map, Value, json};
use std::hash::{Hash, Hasher};
use std::sync::OnceLock;

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const API_VERSION_DOC: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DOC: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const METADATA_DOC: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// A served resource as the documents need it.
#[derive(Clone, Debug, PartialEq)]
struct Resource {
    group: String,
    version: String,
    kind: String,
    plural: String,
    namespaced: bool,
    status: bool,
    /// The object schema (CRD `openAPIV3Schema`, or a minimal stand-in for built-ins).
    schema: Value,
}

impl Resource {
    /// Built-in types accept strategic merge patches; custom resources do not (415).
    fn is_builtin(&self) -> bool {
        self.group.is_empty() || builtin_package(&self.group).is_some()
    }

    fn gvk(&self) -> Value {
        json!({"group": self.group, "version": self.version, "kind": self.kind})
    }

    /// `io.k8s.api.core.v1.Service` for built-ins, reversed group for CRs (`dev.portmapper.v1alpha1.PortMapping`).
    fn definition_name(&self) -> String {
        let group_part = if self.group.is_empty() {
            "io.k8s.api.core".to_owned()
        } else if let Some(builtin) = builtin_package(&self.group) {
            builtin.to_owned()
        } else {
            self.group.split('.').rev().collect::<Vec<_>>().join(".")
        };
        format!("{group_part}.{}.{}", self.version, self.kind)
    }

    fn gv_path(&self) -> String {
        if self.group.is_empty() {
            format!("api/{}", self.version)
        } else {
            format!("apis/{}/{}", self.group, self.version)
        }
    }
}

fn builtin_package(group: &str) -> Option<&'static str> {
    Some(match group {
        "discovery.k8s.io" => "io.k8s.api.discovery",
        "coordination.k8s.io" => "io.k8s.api.coordination",
        "events.k8s.io" => "io.k8s.api.events",
        "apps" => "io.k8s.api.apps",
        "apiextensions.k8s.io" => "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions",
        _ => return None,
    })
}

/// The built-ins the emulator serves; their schemas are `$ref`s into [`builtin_definitions`].
fn builtins() -> Vec<Resource> {
    let r =
        |group: &str, version: &str, kind: &str, plural: &str, namespaced: bool, status: bool| {
            let mut res = Resource {
                group: group.into(),
                version: version.into(),
                kind: kind.into(),
                plural: plural.into(),
                namespaced,
                status,
                schema: Value::Null,
            };
            res.schema = builtin_definitions()
                .get(&res.definition_name())
                .cloned()
                .unwrap_or_else(
                    || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
                );
            res
        };
    vec![
        r("", "v1", "Namespace", "namespaces", false, true),
        r("", "v1", "Service", "services", true, true),
        r("", "v1", "Endpoints", "endpoints", true, false),
        r("", "v1", "Pod", "pods", true, true),
        r("", "v1", "ConfigMap", "configmaps", true, false),
        r("", "v1", "Secret", "secrets", true, false),
        r("", "v1", "Event", "events", true, false),
        r("", "v1", "ServiceAccount", "serviceaccounts", true, false),
        r("", "v1", "Node", "nodes", false, true),
        r(
            "discovery.k8s.io",
            "v1",
            "EndpointSlice",
            "endpointslices",
            true,
            false,
        ),
        r("coordination.k8s.io", "v1", "Lease", "leases", true, false),
        r("events.k8s.io", "v1", "Event", "events", true, false),
        r(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
            true,
        ),
    ]
}

/// OpenAPI 3 definitions of the served built-ins and everything they reference, generated once
/// from k8s-openapi's schemas (the Kubernetes OpenAPI, with its descriptions), keyed like the
/// real documents (`io.k8s.api.core.v1.Service`).
pub(crate) fn builtin_definitions() -> &'static Map<String, Value> {
    static DEFS: OnceLock<Map<String, Value>> = OnceLock::new();
    DEFS.get_or_init(|| {
        use k8s_openapi::api::{coordination, core, discovery, events};
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
        let mut g = schemars::generate::SchemaSettings::openapi3().into_generator();
        let _ = g.subschema_for::<core::v1::Namespace>();
        let _ = g.subschema_for::<core::v1::Service>();
        let _ = g.subschema_for::<core::v1::Endpoints>();
        let _ = g.subschema_for::<core::v1::Pod>();
        let _ = g.subschema_for::<core::v1::ConfigMap>();
        let _ = g.subschema_for::<core::v1::Secret>();
        let _ = g.subschema_for::<core::v1::Event>();
        let _ = g.subschema_for::<core::v1::ServiceAccount>();
        let _ = g.subschema_for::<core::v1::Node>();
        let _ = g.subschema_for::<discovery::v1::EndpointSlice>();
        let _ = g.subschema_for::<coordination::v1::Lease>();
        let _ = g.subschema_for::<events::v1::Event>();
        let _ = g.subschema_for::<apiext::CustomResourceDefinition>();
        let _ = g.subschema_for::<meta::ObjectMeta>();
        let _ = g.subschema_for::<meta::ListMeta>();
        let mut defs = g.take_definitions(true);
        annotate_patch_strategies(&mut defs);
        defs
    })
}

/// The served built-in kinds whose lists kubectl's client-side apply merges by key.
const PATCHED_KINDS: &[(&str, &str, &str)] = &[
    ("", "v1", "Namespace"),
    ("", "v1", "Service"),
    ("", "v1", "Endpoints"),
    ("", "v1", "Pod"),
    ("", "v1", "ConfigMap"),
    ("", "v1", "Secret"),
    ("", "v1", "Event"),
    ("", "v1", "ServiceAccount"),
    ("", "v1", "Node"),
    ("discovery.k8s.io", "v1", "EndpointSlice"),
    ("coordination.k8s.io", "v1", "Lease"),
    ("events.k8s.io", "v1", "Event"),
];

/// Marks the lists strategic merge patch merges (`x-kubernetes-patch-strategy: merge`, with
/// `x-kubernetes-patch-merge-key` for lists of objects), as kube-apiserver's documents do:
/// kubectl's client-side apply reads them to compute its patch, and without them replaces every
/// list (k8s-openapi's schemas do not carry these extensions).
fn annotate_patch_strategies(defs: &mut Map<String, Value>) {
    let mut marks = Vec::new();
    for (group, version, kind) in PATCHED_KINDS {
        let res = Resource {
            group: (*group).into(),
            version: (*version).into(),
            kind: (*kind).into(),
            plural: String::new(),
            namespaced: false,
            status: false,
            schema: Value::Null,
        };
        let mut path = Vec::new();
        collect_strategies(
            defs,
            &res.definition_name(),
            group,
            kind,
            &mut path,
            &mut marks,
        );
    }
    for (def, prop, strategy) in marks {
        let Some(Value::Object(p)) = defs
            .get_mut(&def)
            .and_then(|d| d.get_mut("properties"))
            .and_then(|p| p.get_mut(&prop))
        else {
            continue;
        };
        p.insert("x-kubernetes-patch-strategy".into(), json!("merge"));
        if let crate::patch::ListStrategy::MergeByKey(key) = strategy {
            p.insert("x-kubernetes-patch-merge-key".into(), json!(key));
        }
    }
}

/// The definition a property schema refers to (`$ref`, or a lone `allOf` entry).
fn ref_target(schema: &Value) -> Option<String> {
    let r = schema
        .get("$ref")
        .or_else(|| schema.pointer("/allOf/0/$ref"))?;
    r.as_str()?.rsplit('/').next().map(str::to_owned)
}

fn collect_strategies(
    defs: &Map<String, Value>,
    def: &str,
    group: &str,
    kind: &str,
    path: &mut Vec<String>,
    marks: &mut Vec<(String, String, crate::patch::ListStrategy)>,
) {
    // Deep enough for every merged list of the served kinds; bounds recursive schemas.
    if path.len() > 12 {
        return;
    }
    let Some(props) = defs
        .get(def)
        .and_then(|d| d.get("properties"))
        .and_then(Value::as_object)
    else {
        return;
    };
    for (prop, schema) in props {
        path.push(prop.clone());
        if schema.get("type").and_then(Value::as_str) == Some("array") {
            let names: Vec<&str> = path.iter().map(String::as_str).collect();
            let strategy = crate::patch::list_strategy(group, kind, &names);
            if strategy != crate::patch::ListStrategy::Replace {
                marks.push((def.to_owned(), prop.clone(), strategy));
            }
            if let Some(item) = schema.get("items").and_then(ref_target) {
                path.push("[]".into());
                collect_strategies(defs, &item, group, kind, path, marks);
                path.pop();
            }
        } else if let Some(target) = ref_target(schema) {
            collect_strategies(defs, &target, group, kind, path, marks);
        }
        path.pop();
    }
}

/// The object schema of a served built-in kind (its `$ref`s point into [`builtin_definitions`]).
pub(crate) fn builtin_definition(group: &str, version: &str, kind: &str) -> Option<&'static Value> {
    // Looked up per request: `builtins()` clones every schema, so its names are kept once.
    static NAMES: OnceLock<Vec<(String, String, String, String)>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        builtins()
            .iter()
            .map(|r| {
                let name = r.definition_name();
                (r.group.clone(), r.version.clone(), r.kind.clone(), name)
            })
            .collect()
    });
    let (.., name) = names
        .iter()
        .find(|(g, v, k, _)| g == group && v == version && k == kind)?;
    builtin_definitions().get(name)
}

/// Every `$ref` target (definition name) inside `v`.
fn refs_in(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                if k == "$ref"
                    && let Some(name) = c.as_str().and_then(|r| r.rsplit('/').next())
                {
                    out.push(name.to_owned());
                }
                refs_in(c, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|c| refs_in(c, out)),
        _ => {}
    }
}

/// The built-in definitions reachable from `roots` (transitively).
fn closure(roots: &[Value]) -> Map<String, Value> {
    let defs = builtin_definitions();
    let mut pending = Vec::new();
    roots.iter().for_each(|r| refs_in(r, &mut pending));
    let mut out = Map::new();
    while let Some(name) = pending.pop() {
        if out.contains_key(&name) {
            continue;
        }
        if let Some(d) = defs.get(&name) {
            refs_in(d, &mut pending);
            out.insert(name, d.clone());
        }
    }
    out
}

/// The served versions of the CRDs, with their schemas.
fn crd_resources(crds: &[Value]) -> Vec<Resource> {
    let mut out = Vec::new();
    for crd in crds {
        let spec = &crd["spec"];
        let group = spec["group"].as_str().unwrap_or_default();
        let kind = spec["names"]["kind"].as_str().unwrap_or_default();
        let plural = spec["names"]["plural"].as_str().unwrap_or_default();
        let namespaced = spec["scope"].as_str() != Some("Cluster");
        for v in spec["versions"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
        {
            if v["served"] == false {
                continue;
            }
            let schema = v["schema"].get("openAPIV3Schema").cloned().unwrap_or_else(
                || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            );
            out.push(Resource {
                group: group.into(),
                version: v["name"].as_str().unwrap_or_default().into(),
                kind: kind.into(),
                plural: plural.into(),
                namespaced,
                status: v["subresources"].get("status").is_some(),
                schema,
            });
        }
    }
    out
}

fn all_resources(crds: &[Value]) -> Vec<Resource> {
    let mut all = builtins();
    all.extend(crd_resources(crds));
    all
}

/// The object schema as served: apiVersion/kind/metadata described, GVK attached.
fn object_schema(r: &Resource, refs: &str) -> Value {
    let mut s = r.schema.clone();
    if let Value::Object(m) = &mut s {
        m.insert("x-kubernetes-group-version-kind".into(), json!([r.gvk()]));
        let props = m
            .entry("properties")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        let mut props_out = Map::new();
        props_out.insert(
            "apiVersion".into(),
            json!({"type": "string", "description": API_VERSION_DOC}),
        );
        props_out.insert(
            "kind".into(),
            json!({"type": "string", "description": KIND_DOC}),
        );
        props_out.insert(
            "metadata".into(),
            json!({"allOf": [{"$ref": format!("{refs}{OBJECT_META}")}], "description": METADATA_DOC}),
        );
        for (k, v) in props {
            if k != "metadata" {
                props_out.insert(k, v);
            }
        }
        m.insert("properties".into(), Value::Object(props_out));
    }
    s
}

fn list_schema(r: &Resource, refs: &str) -> Value {
    json!({"type": "object", "required": ["items"],
        "description": format!("{}List is a list of {}", r.kind, r.kind),
        "x-kubernetes-group-version-kind": [{"group": r.group, "version": r.version, "kind": format!("{}List", r.kind)}],
        "properties": {
            "apiVersion": {"type": "string", "description": API_VERSION_DOC},
            "kind": {"type": "string", "description": KIND_DOC},
            "items": {"type": "array", "items": {"$ref": format!("{refs}{}", r.definition_name())},
                      "description": format!("List of {}.", r.plural)},
            "metadata": {"allOf": [{"$ref": format!("{refs}{LIST_META}")}],
                         "description": "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"}}})
}

fn query_param(name: &str, description: &str, v3: bool) -> Value {
    if v3 {
        json!({"name": name, "in": "query", "description": description, "schema": {"type": "string", "uniqueItems": true}})
    } else {
        json!({"name": name, "in": "query", "description": description, "type": "string", "uniqueItems": true})
    }
}

fn path_param(name: &str, description: &str, v3: bool) -> Value {
    if v3 {
        json!({"name": name, "in": "path", "required": true, "description": description, "schema": {"type": "string", "uniqueItems": true}})
    } else {
        json!({"name": name, "in": "path", "required": true, "description": description, "type": "string", "uniqueItems": true})
    }
}

const FIELD_VALIDATION_DOC: &str = "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore - Warn (default) - Strict";

/// One operation; `body` is the request body's schema ref (writes only).
fn operation(
    r: &Resource,
    action: &str,
    verb_id: &str,
    response: &str,
    write: Option<&[&str]>,
    refs: &str,
    v3: bool,
) -> Value {
    let op_id = format!("{verb_id}{}", r.kind);
    let mut params = Vec::new();
    if let Some(extra) = write {
        params.push(query_param(
            "dryRun",
            "When present, indicates that modifications should not be persisted.",
            v3,
        ));
        params.push(query_param("fieldManager", "fieldManager is a name associated with the actor or entity that is making these changes.", v3));
        params.push(query_param("fieldValidation", FIELD_VALIDATION_DOC, v3));
        for p in extra {
            params.push(query_param(p, p, v3));
        }
    }
    let ok = if v3 {
        json!({"description": "OK", "content": {"application/json": {"schema": {"$ref": format!("{refs}{response}")}}}})
    } else {
        json!({"description": "OK", "schema": {"$ref": format!("{refs}{response}")}})
    };
    let mut op = json!({
        "operationId": op_id,
        "description": format!("{action} {}", r.kind),
        "parameters": params,
        "responses": {"200": ok},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": r.gvk(),
    });
    if write.is_some() {
        let body_schema = json!({"$ref": format!("{refs}{}", r.definition_name())});
        if v3 {
            // Offering strategic merge for a custom resource makes kubectl's client-side
            // apply use it, which the server then refuses with 415.
            let types: &[&str] = if action == "patch" && r.is_builtin() {
                &[
                    "application/apply-patch+yaml",
                    "application/json-patch+json",
                    "application/merge-patch+json",
                    "application/strategic-merge-patch+json",
                ]
            } else if action == "patch" {
                &[
                    "application/apply-patch+yaml",
                    "application/json-patch+json",
                    "application/merge-patch+json",
                ]
            } else {
                &["application/json"]
            };
            let mut content = Map::new();
            for t in types {
                let schema = if action == "patch" {
                    json!({"type": "object"})
                } else {
                    body_schema.clone()
                };
                content.insert((*t).to_owned(), json!({"schema": schema}));
            }
            op["requestBody"] = json!({"content": content, "required": true});
        } else if let Some(list) = op["parameters"].as_array_mut() {
            let schema = if action == "patch" {
                json!({"type": "object"})
            } else {
                body_schema
            };
            list.insert(
                0,
                json!({"name": "body", "in": "body", "required": true, "schema": schema}),
            );
        }
    }
    op
}

/// The paths of one resource (collection, item, all-namespaces list, status).
fn paths(r: &Resource, refs: &str, v3: bool, out: &mut Map<String, Value>) {
    let root = format!("/{}", r.gv_path());
    let list_name = format!("{}List", r.definition_name());
    let def = r.definition_name();
    let ns_param = path_param(
        "namespace",
        "object name and auth scope, such as for teams and projects",
        v3,
    );
    let name_param = path_param("name", &format!("name of the {}", r.kind), v3);
    let collection = if r.namespaced {
        format!("{root}/namespaces/{{namespace}}/{}", r.plural)
    } else {
        format!("{root}/{}", r.plural)
    };
    let scope_params: Vec<Value> = if r.namespaced {
        vec![ns_param.clone()]
    } else {
        vec![]
    };
    out.insert(
        collection.clone(),
        json!({
            "get": operation(r, "list", "list", &list_name, None, refs, v3),
            "post": operation(r, "post", "create", &def, Some(&[]), refs, v3),
            "parameters": scope_params,
        }),
    );
    let mut item_params = vec![name_param.clone()];
    if r.namespaced {
        item_params.push(ns_param.clone());
    }
    out.insert(
        format!("{collection}/{{name}}"),
        json!({
            "get": operation(r, "get", "read", &def, None, refs, v3),
            "put": operation(r, "put", "replace", &def, Some(&[]), refs, v3),
            "patch": operation(r, "patch", "patch", &def, Some(&["force"]), refs, v3),
            "delete": operation(r, "delete", "delete", &def, None, refs, v3),
            "parameters": item_params.clone(),
        }),
    );
    if r.status {
        out.insert(
            format!("{collection}/{{name}}/status"),
            json!({
                "get": operation(r, "get", "readStatus", &def, None, refs, v3),
                "put": operation(r, "put", "replaceStatus", &def, Some(&[]), refs, v3),
                "patch": operation(r, "patch", "patchStatus", &def, Some(&["force"]), refs, v3),
                "parameters": item_params,
            }),
        );
    }
    if r.namespaced {
        out.insert(
            format!("{root}/{}", r.plural),
            json!({"get": operation(r, "list", "listForAllNamespaces", &list_name, None, refs, v3)}),
        );
    }
}

/// OpenAPI v3 → Swagger 2.0 schema differences that matter (`nullable` → `x-nullable`).
fn to_v2_schema(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| match k.as_str() {
                    "nullable" => ("x-nullable".to_owned(), v.clone()),
                    "$ref" => (
                        k.clone(),
                        Value::String(
                            v.as_str()
                                .unwrap_or_default()
                                .replace("#/components/schemas/", "#/definitions/"),
                        ),
                    ),
                    _ => (k.clone(), to_v2_schema(v)),
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(to_v2_schema).collect()),
        other => other.clone(),
    }
}

fn info() -> Value {
    json!({"title": "Kubernetes", "version": "v1.33.0"})
}

/// The `/openapi/v2` Swagger document: the CRDs' schemas (served versions) plus the served
/// built-ins and what they reference.
pub fn v2(crds: &[Value]) -> Value {
    let v3_refs = "#/components/schemas/";
    let resources = all_resources(crds);
    let roots: Vec<Value> = resources
        .iter()
        .map(|r| object_schema(r, v3_refs))
        .collect();
    let mut definitions: Map<String, Value> = closure(&roots)
        .into_iter()
        .map(|(name, d)| (name, to_v2_schema(&d)))
        .collect();
    if let Some(list_meta) = builtin_definitions().get(LIST_META) {
        definitions.insert(LIST_META.into(), to_v2_schema(list_meta));
    }
    let mut path_map = Map::new();
    for (r, root) in resources.iter().zip(&roots) {
        definitions.insert(r.definition_name(), to_v2_schema(root));
        definitions.insert(
            format!("{}List", r.definition_name()),
            to_v2_schema(&list_schema(r, v3_refs)),
        );
        paths(r, "#/definitions/", false, &mut path_map);
    }
    json!({"swagger": "2.0", "info": info(), "paths": path_map, "definitions": definitions})
}

fn v3_doc(resources: &[&Resource]) -> Value {
    let refs = "#/components/schemas/";
    let roots: Vec<Value> = resources.iter().map(|r| object_schema(r, refs)).collect();
    let mut schemas = closure(&roots);
    if let Some(list_meta) = builtin_definitions().get(LIST_META) {
        schemas.insert(LIST_META.into(), list_meta.clone());
    }
    let mut path_map = Map::new();
    for (r, root) in resources.iter().zip(roots) {
        schemas.insert(r.definition_name(), root);
        schemas.insert(format!("{}List", r.definition_name()), list_schema(r, refs));
        paths(r, refs, true, &mut path_map);
    }
    json!({"openapi": "3.0.0", "info": info(), "paths": path_map, "components": {"schemas": schemas}})
}

fn hash_hex(v: &Value) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.to_string().hash(&mut h);
    format!("{:016X}", h.finish())
}

/// A group-version document with the hash clients cache it by.
struct GvDoc {
    path: String,
    group: String,
    version: String,
    doc: Value,
    hash: String,
}

fn gv_docs(resources: &[Resource]) -> Vec<GvDoc> {
    let mut gvs: Vec<(String, String, String)> = resources
        .iter()
        .map(|r| (r.gv_path(), r.group.clone(), r.version.clone()))
        .collect();
    gvs.sort();
    gvs.dedup();
    gvs.into_iter()
        .map(|(path, group, version)| {
            let members: Vec<&Resource> = resources
                .iter()
                .filter(|r| r.group == group && r.version == version)
                .collect();
            let doc = v3_doc(&members);
            let hash = hash_hex(&doc);
            GvDoc {
                path,
                group,
                version,
                doc,
                hash,
            }
        })
        .collect()
}

/// The built-in group-version documents never change: built once.
fn builtin_gv_docs() -> &'static [GvDoc] {
    static DOCS: OnceLock<Vec<GvDoc>> = OnceLock::new();
    DOCS.get_or_init(|| gv_docs(&builtins()))
}

/// The `/openapi/v3` index: `{"paths": {"apis/<g>/<v>": {"serverRelativeURL": ...}}}`; the
/// `hash` changes whenever the document does (clients cache by URL).
pub fn v3_index(crds: &[Value]) -> Value {
    let crd_docs = gv_docs(&crd_resources(crds));
    let mut out = Map::new();
    for d in builtin_gv_docs().iter().chain(&crd_docs) {
        out.insert(
            d.path.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{}?hash={}", d.path, d.hash)}),
        );
    }
    json!({"paths": out})
}

/// One `/openapi/v3/apis/<group>/<version>` (or `api/v1`, group `""`) document; `None` if no
/// served resource has that group-version.
pub fn v3_group_version(crds: &[Value], group: &str, version: &str) -> Option<Value> {
    if let Some(d) = builtin_gv_docs()
        .iter()
        .find(|d| d.group == group && d.version == version)
    {
        return Some(d.doc.clone());
    }
    let crd = crd_resources(crds);
    let members: Vec<&Resource> = crd
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    (!members.is_empty()).then(|| v3_doc(&members))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "portmappings.portmapper.dev"},
            "spec": {"group": "portmapper.dev", "scope": "Namespaced",
                "names": {"kind": "PortMapping", "plural": "portmappings"},
                "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "description": "PortMapping publishes...",
                        "properties": {"spec": {"type": "object", "description": "Maps pods.",
                            "properties": {"serviceRef": {"type": "object", "nullable": true}}}}}}}]}})
    }

    /// client-go `hasGVKExtensionV3`: a PATCH operation for the GVK listing `fieldValidation`.
    fn supports_field_validation(doc: &Value, gvk: &Value) -> bool {
        doc["paths"].as_object().unwrap().values().any(|p| {
            p.get("patch").is_some_and(|op| {
                op["x-kubernetes-group-version-kind"] == *gvk
                    && op["parameters"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|q| q["name"] == "fieldValidation")
            })
        })
    }

    #[test]
    fn v3_index_lists_builtin_and_crd_group_versions() {
        let idx = v3_index(&[crd()]);
        let paths = idx["paths"].as_object().unwrap();
        for gv in [
            "api/v1",
            "apis/discovery.k8s.io/v1",
            "apis/coordination.k8s.io/v1",
            "apis/apiextensions.k8s.io/v1",
            "apis/portmapper.dev/v1alpha1",
        ] {
            let url = paths[gv]["serverRelativeURL"].as_str().unwrap();
            assert!(url.starts_with(&format!("/openapi/v3/{gv}?hash=")), "{url}");
        }
    }

    #[test]
    fn v3_group_version_supports_kubectl_field_validation_check_and_explain() {
        let doc = v3_group_version(&[crd()], "portmapper.dev", "v1alpha1").unwrap();
        let gvk = json!({"group": "portmapper.dev", "version": "v1alpha1", "kind": "PortMapping"});
        assert!(supports_field_validation(&doc, &gvk));
        // explain: the schema carrying the GVK, with spec inline and metadata by $ref.
        let schema = &doc["components"]["schemas"]["dev.portmapper.v1alpha1.PortMapping"];
        assert_eq!(schema["x-kubernetes-group-version-kind"][0], gvk);
        assert_eq!(schema["properties"]["spec"]["description"], "Maps pods.");
        let meta_ref = schema["properties"]["metadata"]["allOf"][0]["$ref"]
            .as_str()
            .unwrap();
        let meta_name = meta_ref.trim_start_matches("#/components/schemas/");
        assert!(doc["components"]["schemas"].get(meta_name).is_some());
        assert!(doc["paths"]
            .get("/apis/portmapper.dev/v1alpha1/namespaces/{namespace}/portmappings/{name}/status")
            .is_some());
        let core = v3_group_version(&[], "", "v1").unwrap();
        // Built-ins carry the real Kubernetes schemas (k8s-openapi) and everything they reference.
        let svc = &core["components"]["schemas"]["io.k8s.api.core.v1.Service"];
        assert_eq!(svc["x-kubernetes-group-version-kind"][0]["kind"], "Service");
        let spec_ref = svc["properties"]["spec"]["allOf"][0]["$ref"]
            .as_str()
            .or(svc["properties"]["spec"]["$ref"].as_str())
            .unwrap();
        let spec_name = spec_ref.trim_start_matches("#/components/schemas/");
        assert!(
            core["components"]["schemas"][spec_name]["properties"]["ports"]["description"]
                .as_str()
                .is_some_and(|d| d.contains("ports")),
            "{spec_name}"
        );
        assert!(
            core["components"]["schemas"]
                .get("io.k8s.api.core.v1.Container")
                .is_some()
        );
        assert!(supports_field_validation(
            &core,
            &json!({"group": "", "version": "v1", "kind": "Namespace"})
        ));
        assert!(supports_field_validation(
            &core,
            &json!({"group": "", "version": "v1", "kind": "Service"})
        ));
        assert!(v3_group_version(&[], "nope.dev", "v1").is_none());
    }

    #[test]
    fn v2_uses_definitions_refs_and_x_nullable() {
        let doc = v2(&[crd()]);
        assert_eq!(doc["swagger"], "2.0");
        let def = &doc["definitions"]["dev.portmapper.v1alpha1.PortMapping"];
        assert_eq!(
            def["properties"]["spec"]["properties"]["serviceRef"]["x-nullable"],
            true
        );
        assert_eq!(
            def["properties"]["metadata"]["allOf"][0]["$ref"],
            format!("#/definitions/{OBJECT_META}")
        );
        assert!(
            doc["definitions"]
                .get("io.k8s.api.discovery.v1.EndpointSlice")
                .is_some()
        );
        let item = &doc["paths"]["/apis/portmapper.dev/v1alpha1/namespaces/{namespace}/portmappings/{name}"];
        assert!(
            item["patch"]["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation")
        );
    }
}
