//! PortMappings written as users write them (YAML), for every test module.

use portmapper_api::PortMapping;

/// The canonical example: http backed by pods that list it, https by probe.
pub const VALID: &str = r#"
apiVersion: portmapper.dev/v1alpha1
kind: PortMapping
metadata: {name: broker, namespace: default}
spec:
  serviceRef: {name: my-service}
  pods: {key: example.com/group}
  ports:
    - name: http
      checks:
        - podReady: {}
        - portNames: {key: example.com/ports}
    - name: https
      checks:
        - anyOf:
            - httpGet: {path: /healthz, scheme: HTTPS}
            - tcpSocket: {}
"#;

/// Parses YAML into a typed PortMapping, panicking with the error (tests only).
pub fn parse(yaml: &str) -> PortMapping {
    serde_yaml::from_str(yaml).expect("fixture parses")
}

/// Parses YAML into JSON (for schema-level checks that must see what the user wrote).
pub fn json(yaml: &str) -> serde_json::Value {
    serde_yaml::from_str(yaml).expect("fixture parses")
}
