//! Unknown fields of built-in objects. Upstream decodes a built-in request body into its Go type,
//! so fields the type does not declare are dropped; the strict JSON decoder names each one
//! (`unknown field "spec.ports[0].foo"`), which the handlers turn into `Warning` headers
//! (`fieldValidation=Warn`, the default), a 400 (`Strict`) or nothing (`Ignore`). Server-side
//! apply instead converts the configuration into a typed value first and fails on the first
//! undeclared field of each object (`.spec.foo: field not declared in schema`).
//!
//! The declared fields are those of the k8s-openapi schemas the `/openapi` documents serve
//! ([`crate::openapi`]): `$ref`/`allOf` are followed, `oneOf` alternatives are chosen by the
//! value's JSON type (the CRD schema's `JSONSchemaPropsOrBool`/`OrArray`), maps are
//! `additionalProperties`, and schemas that declare no fields at all (`FieldsV1`, `RawExtension`,
//! apiextensions `JSON`, `IntOrString`, `Quantity`) or preserve unknown fields are opaque, as
//! their Go types decode anything.
//!
//! Divergence: without `serde_json`'s `preserve_order`, several unknown fields are reported in
//! key order (upstream: document order for JSON bodies, key order for YAML bodies), and apply
//! reports the first undeclared field of an object in key order (upstream: map iteration order).

use serde_json::{Map, Value};

use crate::schema::Pruned;
use crate::semantics::{BuiltinSchema, ListType, ObjectSchema};

/// The object schema of a served built-in kind, or `None` for other kinds.
fn root(group: &str, version: &str, kind: &str) -> Option<&'static Value> {
    crate::openapi::builtin_definition(group, version, kind)
}

/// The schema `s` stands for, for value `v`: `$ref`s and single-element `allOf`s followed,
/// `oneOf`/`anyOf` alternatives picked by `v`'s JSON type. `None` = anything goes.
fn resolve<'a>(defs: &'a Map<String, Value>, mut s: &'a Value, v: &Value) -> Option<&'a Value> {
    // Bounded: the k8s-openapi schemas have no reference cycles that declare nothing.
    for _ in 0..32 {
        if let Some(r) = s.get("$ref").and_then(Value::as_str) {
            s = defs.get(r.rsplit('/').next().unwrap_or(r))?;
        } else if let Some([only]) = s.get("allOf").and_then(Value::as_array).map(Vec::as_slice) {
            s = only;
        } else if let Some(alts) = s
            .get("oneOf")
            .or_else(|| s.get("anyOf"))
            .and_then(Value::as_array)
        {
            s = alts
                .iter()
                .find(|a| resolve(defs, a, v).is_some_and(|r| accepts(r, v)))?;
        } else {
            return Some(s);
        }
    }
    None
}

/// Whether a resolved schema describes values of `v`'s JSON type.
fn accepts(s: &Value, v: &Value) -> bool {
    match s.get("type").and_then(Value::as_str) {
        Some("object") => v.is_object(),
        Some("array") => v.is_array(),
        Some("boolean") => v.is_boolean(),
        Some("string") => v.is_string(),
        Some("integer" | "number") => v.is_number(),
        Some(_) => false,
        None => s.get("properties").is_some() && v.is_object(),
    }
}

fn is_true(s: &Value, key: &str) -> bool {
    s.get(key) == Some(&Value::Bool(true))
}

/// How an unknown field is reported.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Style {
    /// The strict JSON decoder: every unknown field, `spec.ports[0].foo`; fields are removed.
    Decode,
    /// Structured-merge-diff's typed conversion: the first undeclared field of each object,
    /// `.spec.ports[port=80,protocol="TCP"].foo`.
    Apply,
}

struct Walk<'a> {
    defs: &'a Map<String, Value>,
    style: Style,
    /// Field names from the root with `[]` for list items (for list-type lookups).
    fields: Vec<String>,
    schema: BuiltinSchema,
    found: Vec<String>,
}

impl Walk<'_> {
    fn field_path(&self, path: &str, key: &str) -> String {
        match self.style {
            Style::Decode if path.is_empty() => key.to_owned(),
            Style::Decode => format!("{path}.{key}"),
            Style::Apply => format!("{path}.{key}"),
        }
    }

    /// `[0]` (decode, atomic lists), `[k=v,…]` (list maps), `[=v]` (sets).
    fn item_path(&self, path: &str, i: usize, item: &Value) -> String {
        if self.style == Style::Apply {
            let fields: Vec<&str> = self.fields.iter().map(String::as_str).collect();
            match self.schema.list_type(&fields) {
                ListType::Map(keys) => {
                    // A key field the item omits is keyed by its schema default (Service port
                    // `protocol`), as structured-merge-diff does.
                    let parts: Vec<String> = keys
                        .iter()
                        .filter_map(|k| {
                            let v = item
                                .get(k)
                                .cloned()
                                .or_else(|| self.schema.key_default(&fields, k))?;
                            Some(format!("{k}={v}"))
                        })
                        .collect();
                    return format!("{path}[{}]", parts.join(","));
                }
                ListType::Set => return format!("{path}[={item}]"),
                ListType::Atomic => {}
            }
        }
        format!("{path}[{i}]")
    }

    fn node(&mut self, v: &mut Value, s: &Value, path: &str) {
        let Some(s) = resolve(self.defs, s, v) else {
            return;
        };
        if is_true(s, "x-kubernetes-preserve-unknown-fields")
            || is_true(s, "x-kubernetes-int-or-string")
        {
            return;
        }
        match v {
            Value::Object(m) => {
                let props = s.get("properties").and_then(Value::as_object);
                let additional = s.get("additionalProperties").filter(|a| a.is_object());
                if props.is_none() && additional.is_none() {
                    // Declares no fields (FieldsV1, RawExtension, JSON): its Go type takes anything.
                    return;
                }
                let keys: Vec<String> = m.keys().cloned().collect();
                for k in keys {
                    let child_path = self.field_path(path, &k);
                    match props.and_then(|p| p.get(&k)).or(additional) {
                        Some(cs) => {
                            if let Some(child) = m.get_mut(&k) {
                                self.fields.push(k);
                                self.node(child, cs, &child_path);
                                self.fields.pop();
                            }
                        }
                        None => {
                            self.found.push(child_path);
                            match self.style {
                                Style::Decode => {
                                    m.remove(&k);
                                }
                                // Typed conversion stops at an object's first undeclared field.
                                Style::Apply => break,
                            }
                        }
                    }
                }
            }
            Value::Array(items) => {
                if let Some(item_schema) = s.get("items") {
                    // Item paths need the list's own path; the items' children one with `[]`.
                    let paths: Vec<String> = items
                        .iter()
                        .enumerate()
                        .map(|(i, item)| self.item_path(path, i, item))
                        .collect();
                    self.fields.push("[]".to_owned());
                    for (item, p) in items.iter_mut().zip(&paths) {
                        self.node(item, item_schema, p);
                    }
                    self.fields.pop();
                }
            }
            _ => {}
        }
    }
}

fn walk(
    group: &str,
    version: &str,
    kind: &str,
    obj: &mut Value,
    style: Style,
) -> Option<Vec<String>> {
    let schema = root(group, version, kind)?;
    let mut w = Walk {
        defs: crate::openapi::builtin_definitions(),
        style,
        fields: Vec::new(),
        schema: BuiltinSchema::for_kind(group, kind),
        found: Vec::new(),
    };
    w.node(obj, schema, "");
    Some(w.found)
}

/// Whether every field of `v` is declared by `s`: what [`Walk::node`] finds nothing in, without
/// building paths.
fn all_declared(defs: &Map<String, Value>, v: &Value, s: &Value) -> bool {
    let Some(s) = resolve(defs, s, v) else {
        return true;
    };
    if is_true(s, "x-kubernetes-preserve-unknown-fields")
        || is_true(s, "x-kubernetes-int-or-string")
    {
        return true;
    }
    match v {
        Value::Object(m) => {
            let props = s.get("properties").and_then(Value::as_object);
            let additional = s.get("additionalProperties").filter(|a| a.is_object());
            if props.is_none() && additional.is_none() {
                return true;
            }
            m.iter().all(|(k, child)| {
                props
                    .and_then(|p| p.get(k))
                    .or(additional)
                    .is_some_and(|cs| all_declared(defs, child, cs))
            })
        }
        Value::Array(items) => s
            .get("items")
            .is_none_or(|is| items.iter().all(|item| all_declared(defs, item, is))),
        _ => true,
    }
}

/// Drop the fields `obj` declares that its built-in type (`group`/`version`/`kind`) does not, as
/// decoding into the Go type does. `None` when the kind is not a served built-in (nothing is
/// touched).
pub fn prune_unknown(group: &str, version: &str, kind: &str, obj: &mut Value) -> Option<Pruned> {
    walk(group, version, kind, obj, Style::Decode).map(|unknown_fields| Pruned { unknown_fields })
}

/// The message of the 400 a create or update (PUT) answers under `fieldValidation=Strict`:
/// the handlers wrap the decoder's error (`transformDecodeError`).
pub fn strict_decode_message(version: &str, kind: &str, strict_error: &str) -> String {
    format!("{kind} in version \"{version}\" cannot be handled as a {kind}: {strict_error}")
}

/// Why server-side apply cannot convert `config` into the typed object (any `fieldValidation`):
/// the 500 message `failed to create typed patch object (ns/name; group/version, Kind=K): …`,
/// or `None` when every field is declared (or the kind is not a served built-in).
pub fn apply_undeclared_fields(
    group: &str,
    version: &str,
    kind: &str,
    config: &Value,
) -> Option<String> {
    // Nearly every configuration declares all its fields: that is checked without the copy and
    // the paths the message needs (they were most of an EndpointSlice apply's time).
    let defs = crate::openapi::builtin_definitions();
    if all_declared(defs, config, root(group, version, kind)?) {
        return None;
    }
    let mut copy = config.clone();
    let found = walk(group, version, kind, &mut copy, Style::Apply)?;
    let errors = match found.as_slice() {
        [] => return None,
        [one] => format!("{one}: field not declared in schema"),
        many => {
            let lines: Vec<String> = many
                .iter()
                .map(|p| format!("  {p}: field not declared in schema"))
                .collect();
            format!("errors:\n{}", lines.join("\n"))
        }
    };
    let meta = |k: &str| {
        config
            .pointer(&format!("/metadata/{k}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    Some(format!(
        "failed to create typed patch object ({}/{}; {group}/{version}, Kind={kind}): {errors}",
        meta("namespace"),
        meta("name"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn prune(group: &str, kind: &str, mut v: Value) -> (Value, Vec<String>) {
        let p = prune_unknown(group, "v1", kind, &mut v).expect("served built-in");
        (v, p.unknown_fields)
    }

    #[test]
    fn unknown_fields_are_dropped_and_named_with_decoder_paths() {
        let svc = json!({"apiVersion":"v1","kind":"Service",
            "metadata":{"name":"web","labels":{"a":"b"},"colour":"red"},
            "spec":{"selector":{"app":"web"},"typo":1,
                    "ports":[{"port":80,"targetPort":"http"},{"port":81,"targetPort":8081,"nodeport":1}]},
            "status":{"loadBalancer":{}}});
        let (out, unknown) = prune("", "Service", svc.clone());
        assert_eq!(
            unknown,
            ["metadata.colour", "spec.ports[1].nodeport", "spec.typo"]
        );
        let mut expected = svc;
        expected["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("colour");
        expected["spec"].as_object_mut().unwrap().remove("typo");
        expected["spec"]["ports"][1]
            .as_object_mut()
            .unwrap()
            .remove("nodeport");
        assert_eq!(out, expected);
        assert_eq!(
            Pruned {
                unknown_fields: unknown
            }
            .strict_error()
            .unwrap(),
            "strict decoding error: unknown field \"metadata.colour\", unknown field \"spec.ports[1].nodeport\", unknown field \"spec.typo\""
        );
    }

    /// The oracle: k8s-openapi's typed decoding, which (like Go's non-strict decoder) ignores
    /// unknown fields. Pruning a document must give exactly what the typed round trip keeps.
    fn typed_round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(v: &Value) -> Value {
        serde_json::to_value(serde_json::from_value::<T>(v.clone()).unwrap()).unwrap()
    }

    #[test]
    fn known_fields_survive_and_pruning_matches_the_typed_decoder() {
        use k8s_openapi::api::{coordination, core::v1 as core, discovery, events};
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let meta = json!({"name":"x","namespace":"ns","labels":{"a":"b"},"annotations":{"c":"d"},
            "finalizers":["example.com/f"],"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"o","uid":"u","controller":true}],
            "managedFields":[{"manager":"m","operation":"Apply","apiVersion":"v1","time":"2030-01-01T00:00:00Z",
                              "fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{"f:a":{}}}}}],
            "creationTimestamp":"2030-01-01T00:00:00Z","resourceVersion":"5","uid":"u1","generation":2,"bogusMeta":1});
        let with_meta = |mut v: Value| {
            v["metadata"] = meta.clone();
            v
        };
        let typed_doc = |av: &str, kind: &str, v: Value| {
            let mut v = with_meta(v);
            v["apiVersion"] = json!(av);
            v["kind"] = json!(kind);
            v
        };
        type Case = (&'static str, &'static str, Value, fn(&Value) -> Value);
        let cases: Vec<Case> = vec![
            (
                "",
                "Service",
                typed_doc(
                    "v1",
                    "Service",
                    json!({"spec":{"type":"NodePort","ports":[{"name":"http","port":80,"targetPort":"web","nodePort":30080,"protocol":"TCP","bogus":1}],
                "selector":{"app":"w"},"clusterIPs":["10.96.0.10"],"ipFamilies":["IPv4"],"sessionAffinityConfig":{"clientIP":{"timeoutSeconds":10}},"trafficDistribution":"PreferClose","x":1},
                "status":{"loadBalancer":{"ingress":[{"ip":"1.2.3.4","ports":[{"port":80,"protocol":"TCP"}]}]},"conditions":[{"type":"A","status":"True","lastTransitionTime":"2030-01-01T00:00:00Z","reason":"R","message":"m"}]}}),
                ),
                typed_round_trip::<core::Service>,
            ),
            (
                "",
                "Pod",
                typed_doc(
                    "v1",
                    "Pod",
                    json!({"spec":{"containers":[{"name":"c","image":"i","ports":[{"containerPort":80,"protocol":"TCP"}],
                "resources":{"limits":{"cpu":"100m","memory":"1Gi"},"requests":{"cpu":"500m"}},"env":[{"name":"A","valueFrom":{"fieldRef":{"fieldPath":"status.podIP"}}}],
                "readinessProbe":{"httpGet":{"port":"http","path":"/"},"tcpSocket":{"port":80}},"typo":true}],
                "volumes":[{"name":"v","configMap":{"name":"cm","items":[{"key":"k","path":"p"}]},"emptyDir":{"sizeLimit":"1Gi"}}],
                "affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"k","operator":"In","values":["v"]}]}]}}}},
                "status":{"phase":"Running","podIP":"10.0.0.1","podIPs":[{"ip":"10.0.0.1"}],"conditions":[{"type":"Ready","status":"True"}],
                          "containerStatuses":[{"name":"c","ready":true,"restartCount":0,"image":"i","imageID":"","state":{"running":{"startedAt":"2030-01-01T00:00:00Z"}},"bogus":2}]}}),
                ),
                typed_round_trip::<core::Pod>,
            ),
            (
                "",
                "ConfigMap",
                typed_doc(
                    "v1",
                    "ConfigMap",
                    json!({"data":{"k":"v"},"binaryData":{"b":"AAAA"},"immutable":true,"bogus":{}}),
                ),
                typed_round_trip::<core::ConfigMap>,
            ),
            (
                "",
                "Secret",
                typed_doc(
                    "v1",
                    "Secret",
                    json!({"type":"Opaque","data":{"k":"dg=="},"stringData":{"s":"v"}}),
                ),
                typed_round_trip::<core::Secret>,
            ),
            (
                "",
                "Namespace",
                typed_doc(
                    "v1",
                    "Namespace",
                    json!({"spec":{"finalizers":["kubernetes"]},"status":{"phase":"Active","conditions":[{"type":"T","status":"False"}]}}),
                ),
                typed_round_trip::<core::Namespace>,
            ),
            (
                "",
                "Endpoints",
                typed_doc(
                    "v1",
                    "Endpoints",
                    json!({"subsets":[{"addresses":[{"ip":"10.0.0.1","targetRef":{"kind":"Pod","name":"p","uid":"u"},"nodeName":"n"}],
                "notReadyAddresses":[{"ip":"10.0.0.2"}],"ports":[{"port":80,"name":"http","protocol":"TCP","appProtocol":"http"}],"bogus":1}]}),
                ),
                typed_round_trip::<core::Endpoints>,
            ),
            (
                "",
                "ServiceAccount",
                typed_doc(
                    "v1",
                    "ServiceAccount",
                    json!({"secrets":[{"name":"s"}],"imagePullSecrets":[{"name":"r"}],"automountServiceAccountToken":false,"bogus":1}),
                ),
                typed_round_trip::<core::ServiceAccount>,
            ),
            (
                "",
                "Node",
                typed_doc(
                    "v1",
                    "Node",
                    json!({"spec":{"podCIDR":"10.0.0.0/24","taints":[{"key":"k","effect":"NoSchedule"}]},
                "status":{"addresses":[{"type":"InternalIP","address":"1.2.3.4"}],"capacity":{"cpu":"4","pods":"110"},"nodeInfo":{"kubeletVersion":"v1.33.0","machineID":"","systemUUID":"","bootID":"","kernelVersion":"","osImage":"","containerRuntimeVersion":"","kubeProxyVersion":"","operatingSystem":"linux","architecture":"amd64"}}}),
                ),
                typed_round_trip::<core::Node>,
            ),
            (
                "",
                "Event",
                typed_doc(
                    "v1",
                    "Event",
                    json!({"involvedObject":{"kind":"Pod","name":"p"},"reason":"R","message":"m","type":"Normal","count":2,
                "firstTimestamp":"2030-01-01T00:00:00Z","eventTime":"2030-01-01T00:00:00.000001Z","source":{"component":"c"},"series":{"count":2,"lastObservedTime":"2030-01-01T00:00:00.000001Z"}}),
                ),
                typed_round_trip::<core::Event>,
            ),
            (
                "discovery.k8s.io",
                "EndpointSlice",
                typed_doc(
                    "discovery.k8s.io/v1",
                    "EndpointSlice",
                    json!({"addressType":"IPv4","endpoints":[{"addresses":["10.0.0.1"],"conditions":{"ready":true,"serving":true,"terminating":false,"bogus":1},
                "hints":{"forZones":[{"name":"a"}]},"zone":"a","nodeName":"n","targetRef":{"kind":"Pod","name":"p"}}],"ports":[{"name":"http","port":8080,"protocol":"TCP","appProtocol":"http"}]}),
                ),
                typed_round_trip::<discovery::v1::EndpointSlice>,
            ),
            (
                "coordination.k8s.io",
                "Lease",
                typed_doc(
                    "coordination.k8s.io/v1",
                    "Lease",
                    json!({"spec":{"holderIdentity":"h","leaseDurationSeconds":15,"acquireTime":"2030-01-01T00:00:00.000001Z","renewTime":"2030-01-01T00:00:00.000002Z","leaseTransitions":1,"bogus":1}}),
                ),
                typed_round_trip::<coordination::v1::Lease>,
            ),
            (
                "events.k8s.io",
                "Event",
                typed_doc(
                    "events.k8s.io/v1",
                    "Event",
                    json!({"eventTime":"2030-01-01T00:00:00.000001Z","reportingController":"c","reportingInstance":"i","action":"A","reason":"R","type":"Normal",
                "regarding":{"kind":"Pod","name":"p"},"note":"n","series":{"count":2,"lastObservedTime":"2030-01-01T00:00:00.000001Z"},"bogus":1}),
                ),
                typed_round_trip::<events::v1::Event>,
            ),
        ];
        for (group, kind, doc, typed) in cases {
            let (pruned, unknown) = prune(group, kind, doc.clone());
            assert!(
                !unknown.is_empty(),
                "{kind}: the cases carry unknown fields"
            );
            assert_eq!(pruned, typed(&doc), "{kind}: unknown {unknown:?}");
        }
        // The CRD type: its schema is the recursive JSONSchemaProps with oneOf alternatives
        // (OrBool, OrArray) and opaque JSON values (default, enum, example).
        let crd = json!({"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"ws.example.com"},
            "spec":{"group":"example.com","scope":"Namespaced","names":{"plural":"ws","singular":"w","kind":"W","shortNames":["w"],"categories":["all"]},
              "versions":[{"name":"v1","served":true,"storage":true,"subresources":{"status":{}},
                "additionalPrinterColumns":[{"name":"Size","type":"integer","jsonPath":".spec.size"}],
                "schema":{"openAPIV3Schema":{"type":"object","required":["spec"],"properties":{
                  "spec":{"type":"object","x-kubernetes-validations":[{"rule":"self.a <= self.b","message":"m"}],
                    "properties":{"size":{"type":"integer","default":1,"minimum":0.5,"enum":[1,2,{"x":1}]},
                      "labels":{"type":"object","additionalProperties":{"type":"string"}},
                      "anything":{"type":"object","additionalProperties":true,"x-kubernetes-preserve-unknown-fields":true},
                      "ports":{"type":"array","x-kubernetes-list-type":"map","x-kubernetes-list-map-keys":["port"],
                        "items":{"type":"object","properties":{"port":{"type":"integer","x-kubernetes-int-or-string":true}},"example":{"port":80}}},
                      "notAKeyword":{"type":"string","typoKeyword":true}}},
                  "status":{"type":"object","nullable":true}}}}}],
              "conversion":{"strategy":"None"}},
            "status":{"conditions":[{"type":"Established","status":"True","lastTransitionTime":"2030-01-01T00:00:00Z"}],
                      "acceptedNames":{"plural":"ws","kind":"W"},"storedVersions":["v1"]}});
        let (pruned, unknown) = prune(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            crd.clone(),
        );
        assert_eq!(
            unknown,
            [
                "spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.notAKeyword.typoKeyword"
            ]
        );
        assert_eq!(pruned, typed_round_trip::<CustomResourceDefinition>(&crd));
    }

    #[test]
    fn apply_reports_the_first_undeclared_field_of_each_object_in_typed_paths() {
        let svc = json!({"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"ns"},
            "spec":{"ports":[{"port":80,"zzz":1,"aaa":2}],"typo":1}});
        assert_eq!(
            apply_undeclared_fields("", "v1", "Service", &svc).unwrap(),
            "failed to create typed patch object (ns/web; /v1, Kind=Service): errors:\n  .spec.ports[port=80,protocol=\"TCP\"].aaa: field not declared in schema\n  .spec.typo: field not declared in schema"
        );
        let node = json!({"apiVersion":"v1","kind":"Node","metadata":{"name":"n1","finalizers":["a"]},"spec":{"bogus":true}});
        assert_eq!(
            apply_undeclared_fields("", "v1", "Node", &node).unwrap(),
            "failed to create typed patch object (/n1; /v1, Kind=Node): .spec.bogus: field not declared in schema"
        );
        let ok = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"any-key":"v"}});
        assert_eq!(apply_undeclared_fields("", "v1", "ConfigMap", &ok), None);
        assert_eq!(
            apply_undeclared_fields("example.com", "v1", "Widget", &ok),
            None,
            "not a built-in"
        );
    }
}
