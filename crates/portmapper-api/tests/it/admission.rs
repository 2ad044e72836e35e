//! Admission: every invalid PortMapping the schema can describe is rejected by the API server —
//! the emulator, which enforces the committed CRD's OpenAPI schema and CEL rules as
//! kube-apiserver does — on the field at fault, and the operator's own validation reports the
//! same mistake for objects that skipped admission. Valid edge cases must pass both.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube_emulator::Emulator;
use portmapper_api::PortMapping;
use portmapper_api::validate::validate_spec;
use serde_json::{Value, json};

use crate::fixtures::{VALID, json as to_json};

/// One invalid PortMapping: `VALID` with `edits` (JSON pointer → value; `null` removes).
struct Bad {
    name: &'static str,
    edits: Vec<(&'static str, Value)>,
    /// Field of the admission error (a `details.causes[].field`).
    field: String,
    /// Part of that cause's message.
    message: String,
    /// Field path that `validate_spec` names for the same mistake.
    runtime: String,
}

fn bad(
    name: &'static str,
    edits: Vec<(&'static str, Value)>,
    field: &str,
    message: &str,
    runtime: &str,
) -> Bad {
    Bad {
        name,
        edits,
        field: field.to_owned(),
        message: message.to_owned(),
        runtime: runtime.to_owned(),
    }
}

/// `bad` where admission and the runtime name the same field.
fn same(name: &'static str, edits: Vec<(&'static str, Value)>, field: &str, message: &str) -> Bad {
    bad(name, edits, field, message, field)
}

const HTTP_GET_FIELD: &str = "spec.ports[1].checks[0].anyOf[0].httpGet";
const TCP_FIELD: &str = "spec.ports[1].checks[0].anyOf[1].tcpSocket";
/// A second check of port http, free for any kind.
const EXTRA: &str = "/spec/ports/0/checks/2";
const EXTRA_FIELD: &str = "spec.ports[0].checks[2]";

fn p(base: &str, leaf: &str) -> String {
    format!("{base}.{leaf}")
}

/// A real certificate block (the body is arbitrary base64: admission checks shape, not DER).
const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ2VydGlmaWNhdGUgYm9keQ==\nZm9yIHRlc3Rz\n-----END CERTIFICATE-----\n";

fn webhook(extra: Value) -> Value {
    let mut w = json!({"url": "https://decider.example.com/decide"});
    if let (Some(w), Some(extra)) = (w.as_object_mut(), extra.as_object()) {
        w.extend(extra.clone());
    }
    json!({"webhook": w})
}

/// A check list of `anyOf`s holding these many tcpSocket entries each (one check when 1).
fn network_checks(sizes: &[usize]) -> Value {
    let tcp = json!({"tcpSocket": {}});
    sizes
        .iter()
        .map(|&n| match n {
            1 => tcp.clone(),
            n => json!({"anyOf": vec![tcp.clone(); n]}),
        })
        .collect()
}

/// `spec.ports` entries `p0`, `p1`, … with [`network_checks`] of one `anyOf` each.
fn ports_with_network_checks(sizes: &[usize]) -> Value {
    sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| json!({"name": format!("p{i}"), "checks": network_checks(&[n])}))
        .collect()
}

fn selector(expression: Value) -> Value {
    json!({"matchExpressions": [expression]})
}

fn long_prefix(len: usize) -> String {
    format!("{}/x", "a".repeat(len))
}

fn invalid_cases() -> Vec<Bad> {
    let hg = HTTP_GET_FIELD;
    let expr0 = "spec.pods.selector.matchExpressions[0]";
    let mut cases = vec![
        // Port numbers, wherever a port appears.
        same(
            "httpGet port 0",
            vec![(HTTP_GET_PORT, json!(0))],
            &p(hg, "port"),
            "should be greater than or equal to 1",
        ),
        same(
            "httpGet port 65536",
            vec![(HTTP_GET_PORT, json!(65536))],
            &p(hg, "port"),
            "should be less than or equal to 65535",
        ),
        same(
            "tcpSocket port -1",
            vec![(TCP_PORT, json!(-1))],
            &p(TCP_FIELD, "port"),
            "should be greater than or equal to 1",
        ),
        same(
            "grpc port 70000 in defaultChecks",
            vec![("/spec/defaultChecks", json!([{"grpc": {"port": 70000}}]))],
            "spec.defaultChecks[0].grpc.port",
            "should be less than or equal to 65535",
        ),
        // IANA service names for named ports.
        same(
            "port name of 16 characters",
            vec![(HTTP_GET_PORT, json!("abcdefghijklmnop"))],
            &p(hg, "port"),
            "Too long",
        ),
        same(
            "port name in upper case",
            vec![(HTTP_GET_PORT, json!("HTTP"))],
            &p(hg, "port"),
            "should match",
        ),
        same(
            "port name of digits only",
            vec![(TCP_PORT, json!("8080"))],
            &p(TCP_FIELD, "port"),
            "should match",
        ),
        same(
            "port name with a leading hyphen",
            vec![(TCP_PORT, json!("-http"))],
            &p(TCP_FIELD, "port"),
            "should match",
        ),
        same(
            "port name with a trailing hyphen",
            vec![(TCP_PORT, json!("http-"))],
            &p(TCP_FIELD, "port"),
            "should match",
        ),
        same(
            "port name with a double hyphen",
            vec![(TCP_PORT, json!("my--port"))],
            &p(TCP_FIELD, "port"),
            "should match",
        ),
        same(
            "port name with an underscore",
            vec![(TCP_PORT, json!("my_port"))],
            &p(TCP_FIELD, "port"),
            "should match",
        ),
        same(
            "empty port name",
            vec![(TCP_PORT, json!(""))],
            &p(TCP_FIELD, "port"),
            "should match",
        ),
        same(
            "grpc port name too long in anyOf of defaultChecks",
            vec![(
                "/spec/defaultChecks",
                json!([{"anyOf": [{"grpc": {"port": "grpc-health-port"}}]}]),
            )],
            "spec.defaultChecks[0].anyOf[0].grpc.port",
            "Too long",
        ),
        // Label selector operators and values.
        same(
            "selector operator Equals",
            vec![(
                "/spec/pods/selector",
                selector(json!({"key": "tier", "operator": "Equals", "values": ["a"]})),
            )],
            &p(expr0, "operator"),
            "Unsupported value: \"Equals\"",
        ),
        same(
            "selector In without values",
            vec![(
                "/spec/pods/selector",
                selector(json!({"key": "tier", "operator": "In"})),
            )],
            &p(expr0, "values"),
            "Required value: must be specified when `operator` is 'In' or 'NotIn'",
        ),
        same(
            "selector NotIn with no values",
            vec![(
                "/spec/pods/selector",
                selector(json!({"key": "tier", "operator": "NotIn", "values": []})),
            )],
            &p(expr0, "values"),
            "Required value",
        ),
        same(
            "selector Exists with values",
            vec![(
                "/spec/pods/selector",
                selector(json!({"key": "tier", "operator": "Exists", "values": ["a"]})),
            )],
            &p(expr0, "values"),
            "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
        ),
        same(
            "selector DoesNotExist with values",
            vec![(
                "/spec/pods/selector",
                selector(json!({"key": "tier", "operator": "DoesNotExist", "values": ["a"]})),
            )],
            &p(expr0, "values"),
            "Forbidden",
        ),
        same(
            "selector key with a space",
            vec![(
                "/spec/pods/selector",
                selector(json!({"key": "bad key", "operator": "Exists"})),
            )],
            &p(expr0, "key"),
            "should match",
        ),
        same(
            "selector key prefix of 254 characters",
            vec![(
                "/spec/pods/selector",
                selector(json!({"key": long_prefix(254), "operator": "Exists"})),
            )],
            &p(expr0, "key"),
            "prefix part must be no more than 253 characters",
        ),
        bad(
            "selector value not a label value",
            vec![(
                "/spec/pods/selector",
                selector(json!({"key": "tier", "operator": "In", "values": ["-front"]})),
            )],
            &p(expr0, "values[0]"),
            "should match",
            &p(expr0, "values[0]"),
        ),
        bad(
            "matchLabels value with a space",
            vec![(
                "/spec/pods/selector",
                json!({"matchLabels": {"tier": "front end"}}),
            )],
            "spec.pods.selector.matchLabels.tier",
            "should match",
            "spec.pods.selector.matchLabels",
        ),
        bad(
            "matchLabels value of 64 characters",
            vec![(
                "/spec/pods/selector",
                json!({"matchLabels": {"tier": "a".repeat(64)}}),
            )],
            "spec.pods.selector.matchLabels.tier",
            "Too long",
            "spec.pods.selector.matchLabels",
        ),
        // PEM shape of CA bundles.
        same(
            "caBundle without a certificate",
            vec![(EXTRA, webhook(json!({"caBundle": "not a certificate"})))],
            &p(EXTRA_FIELD, "webhook.caBundle"),
            "should match",
        ),
        same(
            "caBundle with BEGIN but no END",
            vec![(
                EXTRA,
                webhook(json!({"caBundle": "-----BEGIN CERTIFICATE-----\nMIIB\n"})),
            )],
            &p(EXTRA_FIELD, "webhook.caBundle"),
            "should match",
        ),
        same(
            "caBundle with an empty block",
            vec![(
                EXTRA,
                webhook(
                    json!({"caBundle": "-----BEGIN CERTIFICATE----------END CERTIFICATE-----"}),
                ),
            )],
            &p(EXTRA_FIELD, "webhook.caBundle"),
            "should match",
        ),
        same(
            "caBundle with a block of whitespace only",
            vec![(
                EXTRA,
                webhook(
                    json!({"caBundle": "-----BEGIN CERTIFICATE-----\n \n-----END CERTIFICATE-----\n"}),
                ),
            )],
            &p(EXTRA_FIELD, "webhook.caBundle"),
            "should match",
        ),
        same(
            "caBundle holding a private key",
            vec![(
                EXTRA,
                webhook(
                    json!({"caBundle": "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"}),
                ),
            )],
            &p(EXTRA_FIELD, "webhook.caBundle"),
            "should match",
        ),
        same(
            "caBundle block with a non-base64 body",
            vec![(
                EXTRA,
                webhook(
                    json!({"caBundle": "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n"}),
                ),
            )],
            &p(EXTRA_FIELD, "webhook.caBundle"),
            "should match",
        ),
        // Probe timing.
        same(
            "probe timeout above the default period",
            vec![("/spec/probe", json!({"timeoutSeconds": 11}))],
            "spec.probe.timeoutSeconds",
            "timeoutSeconds must not exceed periodSeconds",
        ),
        same(
            "probe timeout above an explicit period",
            vec![(
                "/spec/probe",
                json!({"periodSeconds": 2, "timeoutSeconds": 5}),
            )],
            "spec.probe.timeoutSeconds",
            "timeoutSeconds must not exceed periodSeconds",
        ),
        bad(
            "httpGet timeout above the default period",
            vec![(HTTP_GET_TIMEOUT, json!(15))],
            "spec",
            "a check's timeoutSeconds must not exceed probe.periodSeconds",
            &p(hg, "timeoutSeconds"),
        ),
        bad(
            "webhook timeout above an explicit period",
            vec![
                (EXTRA, webhook(json!({"timeoutSeconds": 30}))),
                ("/spec/probe", json!({"periodSeconds": 20})),
            ],
            "spec",
            "a check's timeoutSeconds must not exceed probe.periodSeconds",
            &p(EXTRA_FIELD, "webhook.timeoutSeconds"),
        ),
        bad(
            "grpc timeout in defaultChecks above the period",
            vec![
                (
                    "/spec/defaultChecks",
                    json!([{"grpc": {"timeoutSeconds": 6}}]),
                ),
                ("/spec/probe", json!({"periodSeconds": 5})),
            ],
            "spec",
            "a check's timeoutSeconds must not exceed probe.periodSeconds",
            "spec.defaultChecks[0].grpc.timeoutSeconds",
        ),
        same(
            "tcpSocket timeout 61",
            vec![(TCP_TIMEOUT, json!(61))],
            &p(TCP_FIELD, "timeoutSeconds"),
            "should be less than or equal to 60",
        ),
        same(
            "probe periodSeconds 0",
            vec![(
                "/spec/probe",
                json!({"periodSeconds": 0, "timeoutSeconds": 0}),
            )],
            "spec.probe.periodSeconds",
            "should be greater than or equal to 1",
        ),
        same(
            "probe successThreshold 0",
            vec![("/spec/probe", json!({"successThreshold": 0}))],
            "spec.probe.successThreshold",
            "should be greater than or equal to 1",
        ),
        same(
            "probe failureThreshold 0",
            vec![("/spec/probe", json!({"failureThreshold": 0}))],
            "spec.probe.failureThreshold",
            "should be greater than or equal to 1",
        ),
        same(
            "probe failureThreshold 101",
            vec![("/spec/probe", json!({"failureThreshold": 101}))],
            "spec.probe.failureThreshold",
            "should be less than or equal to 100",
        ),
        // Names and keys.
        same(
            "containerReady container not a DNS label",
            vec![(
                EXTRA,
                json!({"containerReady": {"container": "Web_Server"}}),
            )],
            &p(EXTRA_FIELD, "containerReady.container"),
            "should match",
        ),
        same(
            "podCondition type not a qualified name",
            vec![(EXTRA, json!({"podCondition": {"type": "broker joined!"}}))],
            &p(EXTRA_FIELD, "podCondition.type"),
            "should match",
        ),
        same(
            "podCondition type prefix of 254 characters",
            vec![(EXTRA, json!({"podCondition": {"type": long_prefix(254)}}))],
            &p(EXTRA_FIELD, "podCondition.type"),
            "prefix part must be no more than 253 characters",
        ),
        same(
            "portNames key prefix of 300 characters",
            vec![(
                "/spec/ports/0/checks/1/portNames/key",
                json!(long_prefix(300)),
            )],
            "spec.ports[0].checks[1].portNames.key",
            "prefix part must be no more than 253 characters",
        ),
        same(
            "pods key prefix of 254 characters",
            vec![("/spec/pods/key", json!(long_prefix(254)))],
            "spec.pods.key",
            "prefix part must be no more than 253 characters",
        ),
        same(
            "pods key name part of 64 characters",
            vec![(
                "/spec/pods/key",
                json!(format!("example.com/{}", "a".repeat(64))),
            )],
            "spec.pods.key",
            "should match",
        ),
        same(
            "readiness gate type not a qualified name",
            vec![(
                "/spec/readinessGate/conditionType",
                json!("example.com/published!"),
            )],
            "spec.readinessGate.conditionType",
            "should match",
        ),
        same(
            "readiness gate type without a prefix (kubelet's Ready)",
            vec![("/spec/readinessGate/conditionType", json!("Ready"))],
            "spec.readinessGate.conditionType",
            "must have a prefix",
        ),
        same(
            "readiness gate type prefix of 254 characters",
            vec![("/spec/readinessGate/conditionType", json!(long_prefix(254)))],
            "spec.readinessGate.conditionType",
            "prefix part must be no more than 253 characters",
        ),
        same(
            "readiness gate timeout 0",
            vec![("/spec/readinessGate/timeoutSeconds", json!(0))],
            "spec.readinessGate.timeoutSeconds",
            "should be greater than or equal to 1",
        ),
        same(
            "readiness gate timeout over a day",
            vec![("/spec/readinessGate/timeoutSeconds", json!(86_401))],
            "spec.readinessGate.timeoutSeconds",
            "should be less than or equal to 86400",
        ),
        same(
            "label pool value not a label value",
            vec![("/spec/pods/value", json!("two words"))],
            "spec.pods",
            "pods.value must be a valid label value",
        )
        .runtime("spec.pods.value"),
        same(
            "webhook URL without a host",
            vec![(EXTRA, webhook(json!({"url": "https://?x=1"})))],
            &p(EXTRA_FIELD, "webhook.url"),
            "should match",
        ),
        same(
            "webhook URL with another scheme",
            vec![(EXTRA, webhook(json!({"url": "ftp://decider.example.com/"})))],
            &p(EXTRA_FIELD, "webhook.url"),
            "should match",
        ),
        same(
            "httpGet path not starting with a slash",
            vec![(HTTP_GET_PATH, json!("healthz"))],
            &p(hg, "path"),
            "should match",
        ),
        same(
            "maxEndpointsPerSlice 0",
            vec![("/spec/maxEndpointsPerSlice", json!(0))],
            "spec.maxEndpointsPerSlice",
            "should be greater than or equal to 1",
        ),
        same(
            "Service name in upper case",
            vec![("/spec/serviceRef/name", json!("My-Service"))],
            "spec.serviceRef.name",
            "should match",
        ),
        same(
            "port rule name in upper case",
            vec![("/spec/ports/0/name", json!("HTTP"))],
            "spec.ports[0].name",
            "should match",
        ),
        bad(
            "check with two kinds",
            vec![(EXTRA, json!({"podReady": {}, "notTerminating": {}}))],
            EXTRA_FIELD,
            "Too many",
            EXTRA_FIELD,
        ),
        // The probe fan-out one object may ask for (issue 37's H1).
        same(
            "17 network checks in one port, anyOf entries counted",
            vec![("/spec/ports/0/checks", network_checks(&[9, 8]))],
            "spec.ports[0].checks",
            "at most 16 network checks",
        ),
        same(
            "17 network checks in defaultChecks",
            vec![("/spec/defaultChecks", network_checks(&[1, 16]))],
            "spec.defaultChecks",
            "at most 16 network checks",
        ),
        bad(
            "65 network checks over spec.ports",
            vec![(
                "/spec/ports",
                ports_with_network_checks(&[13, 13, 13, 13, 13]),
            )],
            "spec",
            "at most 64 network checks",
            "spec.ports",
        ),
        bad(
            "PerPort with maxEndpointsPerSlice 9",
            vec![
                ("/spec/sliceGrouping", json!("PerPort")),
                ("/spec/maxEndpointsPerSlice", json!(9)),
            ],
            "spec",
            "must be at least 10 with sliceGrouping PerPort",
            "spec.maxEndpointsPerSlice",
        ),
    ];
    cases.sort_by_key(|c| c.name);
    cases
}

const HTTP_GET_PORT: &str = "/spec/ports/1/checks/0/anyOf/0/httpGet/port";
const HTTP_GET_PATH: &str = "/spec/ports/1/checks/0/anyOf/0/httpGet/path";
const HTTP_GET_TIMEOUT: &str = "/spec/ports/1/checks/0/anyOf/0/httpGet/timeoutSeconds";
const TCP_PORT: &str = "/spec/ports/1/checks/0/anyOf/1/tcpSocket/port";
const TCP_TIMEOUT: &str = "/spec/ports/1/checks/0/anyOf/1/tcpSocket/timeoutSeconds";

impl Bad {
    fn runtime(mut self, field: &str) -> Self {
        self.runtime = field.to_owned();
        self
    }
}

/// Valid edge cases: accepted at admission, no runtime error.
fn valid_cases() -> Vec<(&'static str, Vec<(&'static str, Value)>)> {
    vec![
        (
            "16 network checks in one port, 64 over spec.ports",
            vec![("/spec/ports", ports_with_network_checks(&[16, 16, 16, 16]))],
        ),
        (
            "PerPort with maxEndpointsPerSlice 10",
            vec![
                ("/spec/sliceGrouping", json!("PerPort")),
                ("/spec/maxEndpointsPerSlice", json!(10)),
            ],
        ),
        ("port 1", vec![(HTTP_GET_PORT, json!(1))]),
        ("port 65535", vec![(TCP_PORT, json!(65535))]),
        (
            "port name of 15 characters",
            vec![(HTTP_GET_PORT, json!("abcdefghijklmno"))],
        ),
        (
            "port name starting with digits",
            vec![(TCP_PORT, json!("8080-http"))],
        ),
        ("one-letter port name", vec![(TCP_PORT, json!("h"))]),
        (
            "every optional field omitted",
            vec![
                ("/spec/ports", Value::Null),
                ("/spec/probe", Value::Null),
                ("/spec/pods/value", Value::Null),
            ],
        ),
        (
            "probe with every field omitted",
            vec![("/spec/probe", json!({}))],
        ),
        (
            "probe timeout equal to the period",
            vec![(
                "/spec/probe",
                json!({"periodSeconds": 5, "timeoutSeconds": 5}),
            )],
        ),
        (
            "probe timeout equal to the default period",
            vec![("/spec/probe", json!({"timeoutSeconds": 10}))],
        ),
        (
            "probe period 1 with the default timeout",
            vec![("/spec/probe", json!({"periodSeconds": 1}))],
        ),
        (
            "check timeout equal to the period",
            vec![
                (HTTP_GET_TIMEOUT, json!(30)),
                (
                    "/spec/probe",
                    json!({"periodSeconds": 30, "timeoutSeconds": 30}),
                ),
            ],
        ),
        (
            "thresholds at their bounds",
            vec![(
                "/spec/probe",
                json!({"successThreshold": 1, "failureThreshold": 100}),
            )],
        ),
        (
            "selector with every operator",
            vec![(
                "/spec/pods/selector",
                json!({
                    "matchLabels": {"tier": "front", "example.com/empty": ""},
                    "matchExpressions": [
                        {"key": "a", "operator": "In", "values": ["x", "y"]},
                        {"key": "b", "operator": "NotIn", "values": ["z"]},
                        {"key": "c", "operator": "Exists"},
                        {"key": "d", "operator": "DoesNotExist", "values": []},
                    ],
                }),
            )],
        ),
        (
            "selector key prefix of 253 characters",
            vec![(
                "/spec/pods/selector",
                selector(json!({"key": long_prefix(253), "operator": "Exists"})),
            )],
        ),
        ("empty selector", vec![("/spec/pods/selector", json!({}))]),
        (
            "caBundle with comments and two certificates",
            vec![(
                EXTRA,
                webhook(
                    json!({"caBundle": format!("# Issuer: Test CA\n{CERT}subject=CN=two\r\n{}", CERT.replace('\n', "\r\n"))}),
                ),
            )],
        ),
        (
            "podCondition type with a prefix",
            vec![(
                EXTRA,
                json!({"podCondition": {"type": "example.com/broker-joined"}}),
            )],
        ),
        (
            "containerReady container of 63 characters",
            vec![(
                EXTRA,
                json!({"containerReady": {"container": "a".repeat(63)}}),
            )],
        ),
        (
            "pods key prefix of 253 characters",
            vec![("/spec/pods/key", json!(long_prefix(253)))],
        ),
        (
            "readiness gate type of its own",
            vec![(
                "/spec/readinessGate/conditionType",
                json!("example.com/published-web"),
            )],
        ),
        (
            "readiness gate without a type (the default)",
            vec![("/spec/readinessGate", json!({}))],
        ),
        (
            "readiness gate timeout of a day",
            vec![("/spec/readinessGate", json!({"timeoutSeconds": 86_400}))],
        ),
    ]
}

/// `VALID` as JSON with `edits` applied.
fn edited(edits: &[(&str, Value)]) -> Value {
    let mut obj = to_json(VALID);
    for (pointer, value) in edits {
        set(&mut obj, pointer, value.clone());
    }
    obj
}

/// Sets (or, for `null`, removes) the value at a JSON pointer, creating objects on the way and
/// appending when the last index is one past an array's end.
fn set(obj: &mut Value, pointer: &str, value: Value) {
    let (parent, last) = pointer.rsplit_once('/').unwrap();
    let mut node = obj;
    for seg in parent.split('/').skip(1) {
        node = match node {
            Value::Array(items) => &mut items[seg.parse::<usize>().unwrap()],
            other => {
                if other.is_null() {
                    *other = json!({});
                }
                other
                    .as_object_mut()
                    .unwrap()
                    .entry(seg)
                    .or_insert(json!({}))
            }
        };
    }
    match node {
        Value::Array(items) => {
            let i: usize = last.parse().unwrap();
            if i == items.len() {
                items.push(value);
            } else {
                items[i] = value;
            }
        }
        Value::Object(m) if value.is_null() => {
            m.remove(last);
        }
        Value::Object(m) => {
            m.insert(last.to_owned(), value);
        }
        other => panic!("{pointer}: cannot set inside {other}"),
    }
}

/// The runtime validation's messages for an object, as the operator would parse it.
fn runtime_errors(obj: &Value) -> Vec<String> {
    let pm: PortMapping = serde_json::from_value(obj.clone()).expect("the typed client reads it");
    validate_spec(&pm.spec)
        .iter()
        .map(ToString::to_string)
        .collect()
}

async fn emulator_with_crd() -> (Emulator, Api<DynamicObject>) {
    let emu = Emulator::start().await.expect("emulator starts");
    let client = emu.client().expect("client");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    // The committed file, as users apply it (a test in crd.rs keeps it equal to the types).
    let crd: CustomResourceDefinition = serde_yaml::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../crds/portmapper.dev_portmappings.yaml"
        ))
        .unwrap(),
    )
    .unwrap();
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("the apiserver accepts the CRD");
    tokio::time::timeout(
        Duration::from_secs(10),
        await_condition(
            crds,
            "portmappings.portmapper.dev",
            conditions::is_crd_established(),
        ),
    )
    .await
    .expect("CRD established in time")
    .expect("watch works");
    let ar = ApiResource::erase::<PortMapping>(&());
    (emu, Api::namespaced_with(client, "default", &ar))
}

async fn create(api: &Api<DynamicObject>, name: &str, mut obj: Value) -> Result<(), kube::Error> {
    obj["metadata"]["name"] = json!(name);
    let obj: DynamicObject = serde_json::from_value(obj).unwrap();
    api.create(&PostParams::default(), &obj).await.map(|_| ())
}

#[tokio::test]
async fn every_invalid_case_is_rejected_at_admission_and_reported_at_runtime() {
    let (_emu, api) = emulator_with_crd().await;
    let cases = invalid_cases();
    assert!(cases.len() >= 40, "{} cases", cases.len());
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let obj = edited(&case.edits);
        match create(&api, &format!("bad-{i}"), obj.clone()).await {
            Ok(()) => failures.push(format!("{}: admitted", case.name)),
            Err(kube::Error::Api(status)) => {
                let causes = status
                    .details
                    .as_ref()
                    .map(|d| d.causes.clone())
                    .unwrap_or_default();
                let found = causes
                    .iter()
                    .any(|c| c.field == case.field && c.message.contains(&case.message));
                if status.code != 422 || !found {
                    failures.push(format!(
                        "{}: want 422 on {} containing {:?}, got {}: {}",
                        case.name, case.field, case.message, status.code, status.message
                    ));
                }
            }
            Err(e) => failures.push(format!("{}: {e}", case.name)),
        }
        let runtime = runtime_errors(&obj);
        if !runtime
            .iter()
            .any(|e| e.starts_with(&format!("{}: ", case.runtime)))
        {
            failures.push(format!(
                "{}: runtime validation names no error on {}: {runtime:?}",
                case.name, case.runtime
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test]
async fn valid_edge_cases_are_admitted_and_pass_runtime_validation() {
    let (_emu, api) = emulator_with_crd().await;
    let mut failures = Vec::new();
    for (i, (name, edits)) in valid_cases().into_iter().enumerate() {
        let obj = edited(&edits);
        if let Err(e) = create(&api, &format!("good-{i}"), obj.clone()).await {
            failures.push(format!("{name}: rejected: {e}"));
        }
        let runtime = runtime_errors(&obj);
        if !runtime.is_empty() {
            failures.push(format!("{name}: runtime errors {runtime:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The one mistake the schema cannot describe (map keys): admitted, and the operator's
/// validation reports it on the field, which it turns into `Stalled`/`InvalidSpec`.
#[tokio::test]
async fn a_bad_match_labels_key_is_admitted_and_reported_at_runtime() {
    let (_emu, api) = emulator_with_crd().await;
    let obj = edited(&[(
        "/spec/pods/selector",
        json!({"matchLabels": {"bad key!": "front"}}),
    )]);
    create(&api, "bad-label-key", obj.clone())
        .await
        .expect("the schema cannot constrain map keys");
    let errs = runtime_errors(&obj);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].starts_with(r#"spec.pods.selector.matchLabels: Invalid value: "bad key!": name part must consist of alphanumeric characters"#),
        "{errs:?}"
    );
}
