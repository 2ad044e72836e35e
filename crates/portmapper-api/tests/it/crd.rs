//! The generated CRD: what users and tools rely on is present, and the committed file is current.

use kube::CustomResourceExt;
use portmapper_api::PortMapping;

#[test]
fn committed_crd_matches_the_types() {
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../crds/portmapper.dev_portmappings.yaml"
    ))
    .expect("crds/portmapper.dev_portmappings.yaml exists");
    assert_eq!(
        committed,
        portmapper_api::crd::crd_yaml().unwrap(),
        "crds/ is stale: run `make crds`"
    );
}

#[test]
fn crd_has_printer_columns_short_name_and_status_subresource() {
    let crd = PortMapping::crd();
    assert_eq!(crd.spec.names.short_names, Some(vec!["pm".to_string()]));
    let version = &crd.spec.versions[0];
    let columns: Vec<&str> = version
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(columns, ["Service", "Ports", "Ready", "Age"]);
    assert!(
        version
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some()
    );
}

#[test]
fn conditions_and_port_rules_merge_by_key() {
    let yaml = portmapper_api::crd::crd_yaml().unwrap();
    let doc: serde_json::Value = serde_yaml::from_str(&yaml).unwrap();
    let props = &doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
    assert_eq!(
        props["status"]["properties"]["conditions"]["x-kubernetes-list-type"],
        "map"
    );
    assert_eq!(
        props["status"]["properties"]["conditions"]["x-kubernetes-list-map-keys"][0],
        "type"
    );
    assert_eq!(
        props["spec"]["properties"]["ports"]["x-kubernetes-list-type"],
        "map"
    );
    assert_eq!(
        props["spec"]["properties"]["ports"]["x-kubernetes-list-map-keys"][0],
        "name"
    );
}

#[test]
fn spec_defaults_are_in_the_schema() {
    let yaml = portmapper_api::crd::crd_yaml().unwrap();
    let doc: serde_json::Value = serde_yaml::from_str(&yaml).unwrap();
    let spec = &doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    assert_eq!(spec["maxEndpointsPerSlice"]["default"], 100);
    assert_eq!(spec["nativeCleanup"]["default"], true);
    assert_eq!(spec["terminatingEndpoints"]["default"], "Drain");
    assert_eq!(spec["pods"]["properties"]["from"]["default"], "Label");
}

#[test]
fn probe_thresholds_have_a_schema_minimum_of_one() {
    // The apiserver rejects `successThreshold: 0` / `failureThreshold: 0` at admission through
    // these bounds (no CEL rule is involved).
    let yaml = portmapper_api::crd::crd_yaml().unwrap();
    let doc: serde_json::Value = serde_yaml::from_str(&yaml).unwrap();
    let probe = &doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["probe"];
    for field in ["successThreshold", "failureThreshold"] {
        let p = &probe["properties"][field];
        assert_eq!(p["type"], "integer", "{field}");
        assert_eq!(p["minimum"], 1.0, "{field}");
        assert_eq!(p["maximum"], 100.0, "{field}");
        assert!(p.get("exclusiveMinimum").is_none(), "{field}");
    }
    assert_eq!(probe["properties"]["successThreshold"]["default"], 1);
    assert_eq!(probe["properties"]["failureThreshold"]["default"], 3);
}

/// Every list, map and string below a CEL rule has a size bound, so the apiserver's static cost
/// estimate of the rule (which multiplies by those bounds) stays within its budget; an unbounded
/// one counts as the whole request size and gets the CRD rejected on a real cluster, though the
/// emulator's CEL engine does not estimate cost.
#[test]
fn everything_a_cel_rule_can_reach_is_bounded() {
    fn bounded(schema: &serde_json::Value, path: &str, missing: &mut Vec<String>) {
        let has = |k: &str| schema.get(k).is_some();
        match schema["type"].as_str() {
            Some("array") if !has("maxItems") => missing.push(format!("{path}: maxItems")),
            Some("string") if !has("maxLength") && !has("enum") => {
                missing.push(format!("{path}: maxLength"))
            }
            Some("object") if has("additionalProperties") && !has("maxProperties") => {
                missing.push(format!("{path}: maxProperties"))
            }
            None if schema["x-kubernetes-int-or-string"] == true && !has("maxLength") => {
                missing.push(format!("{path}: maxLength"))
            }
            _ => {}
        }
        if let Some(items) = schema.get("items") {
            bounded(items, &format!("{path}[]"), missing);
        }
        if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
            bounded(values, &format!("{path}[*]"), missing);
        }
        for (name, child) in schema["properties"].as_object().into_iter().flatten() {
            bounded(child, &format!("{path}.{name}"), missing);
        }
    }
    fn rules_below(schema: &serde_json::Value, path: &str, missing: &mut Vec<String>) {
        if schema.get("x-kubernetes-validations").is_some() {
            // The whole subtree: what a rule may touch.
            return bounded(schema, path, missing);
        }
        if let Some(items) = schema.get("items") {
            rules_below(items, &format!("{path}[]"), missing);
        }
        for (name, child) in schema["properties"].as_object().into_iter().flatten() {
            rules_below(child, &format!("{path}.{name}"), missing);
        }
    }
    let crd = serde_json::to_value(PortMapping::crd()).unwrap();
    let root = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let mut missing = Vec::new();
    rules_below(root, "", &mut missing);
    assert!(
        root["properties"]["spec"]
            .get("x-kubernetes-validations")
            .is_some(),
        "the spec has a rule, so all of it is checked"
    );
    assert_eq!(missing, Vec::<String>::new());
}
