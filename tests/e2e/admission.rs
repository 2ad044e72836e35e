//! Invalid PortMappings through a real kubectl: the API server rejects them at admission with
//! the field at fault, so nothing invalid reaches the operator (the full table of cases is
//! `portmapper-api`'s admission test; these are the ones a user meets most).

use serde_json::{Value, json};

use crate::env::{Cluster, kubectl_available, repo};

/// A PortMapping with one check on port http; `spec` fields replace the base ones.
fn portmapping(name: &str, check: Value, spec: Value) -> String {
    let mut obj = json!({
        "apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
        "metadata": {"name": name},
        "spec": {
            "serviceRef": {"name": "web"},
            "pods": {"key": "example.com/group"},
            "ports": [{"name": "http", "checks": [check]}],
        },
    });
    if let (Some(base), Some(extra)) = (obj["spec"].as_object_mut(), spec.as_object()) {
        base.extend(extra.clone());
    }
    obj.to_string()
}

#[test]
fn kubectl_apply_of_invalid_portmappings_fails_on_the_field() {
    if !kubectl_available() {
        return;
    }
    let cluster = Cluster::start("admission");
    let crd = repo().join("crds/portmapper.dev_portmappings.yaml");
    cluster.ok(&["apply", "-f", crd.to_str().unwrap()]);
    cluster.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/portmappings.portmapper.dev",
        "--timeout=30s",
    ]);
    let cases = [
        (
            "port-zero",
            json!({"tcpSocket": {"port": 0}}),
            json!({}),
            "spec.ports[0].checks[0].tcpSocket.port: Invalid value: 0",
        ),
        (
            "port-name",
            json!({"httpGet": {"port": "Web_Port"}}),
            json!({}),
            r#"spec.ports[0].checks[0].httpGet.port: Invalid value: "Web_Port""#,
        ),
        (
            "selector-values",
            json!({"podReady": {}}),
            json!({"pods": {"key": "example.com/group", "selector": {"matchExpressions": [
                {"key": "tier", "operator": "Exists", "values": ["a"]}]}}}),
            "spec.pods.selector.matchExpressions[0].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
        ),
        (
            "ca-bundle",
            json!({"webhook": {"url": "https://decider.example.com/", "caBundle": "not a certificate"}}),
            json!({}),
            "spec.ports[0].checks[0].webhook.caBundle: Invalid value",
        ),
        (
            "probe-timeout",
            json!({"podReady": {}}),
            json!({"probe": {"periodSeconds": 2, "timeoutSeconds": 5}}),
            // 1.37 prints no value for a CEL rule's failure (older servers said `"object"`).
            "spec.probe.timeoutSeconds: Invalid value: timeoutSeconds must not exceed periodSeconds",
        ),
        (
            "check-timeout",
            json!({"grpc": {"timeoutSeconds": 30}}),
            json!({}),
            "a check's timeoutSeconds must not exceed probe.periodSeconds",
        ),
    ];
    for (name, check, spec, want) in cases {
        let obj = portmapping(name, check, spec);
        let out = cluster.kubectl_stdin(&["apply", "-f", "-"], obj.as_bytes());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: admitted");
        assert!(
            stderr.contains(&format!(r#"The PortMapping "{name}" is invalid"#))
                && stderr.contains(want),
            "{name}: want {want:?} in:\n{stderr}"
        );
    }
    // At the limits, the same shape is accepted.
    let edge = portmapping(
        "edge",
        json!({"tcpSocket": {"port": 65535, "timeoutSeconds": 10}}),
        json!({"probe": {"timeoutSeconds": 10}}),
    );
    let out = cluster.kubectl_stdin(&["apply", "-f", "-"], edge.as_bytes());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    cluster.ok(&["delete", "pm", "edge", "--wait=false"]);
}
