//! Fuzz targets (stable toolchain, proptest) for the emulator's request bodies, called directly
//! on a store (no HTTP): JSON and YAML bodies of create and update, merge / JSON / strategic /
//! apply patch bodies, DeleteOptions, plus query strings and paths. Property: no panic; a bad
//! body is a 4xx `ApiError` with a message, never a 5xx; a failed request changes nothing.
//! Budget: `PORTMAPPER_FUZZ_CASES` (see `tests/support/fuzz_budget.rs`).

use std::sync::Arc;

use kube_emulator::ApiError;
use kube_emulator::clock::Clock;
use kube_emulator::ops::{self, Target, Writer};
use kube_emulator::request::{Output, PatchType, Query, route};
use kube_emulator::store::{Retention, State};
use proptest::prelude::*;
use serde_json::{Value, json};

#[path = "../../../../tests/support/fuzz_budget.rs"]
mod fuzz_budget;

/// Core and discovery types with a valid object each, stored under the name `x`.
fn seeded() -> (State, Vec<Target>) {
    let mut st = State::new(Retention::default(), Arc::new(Clock::system()));
    kube_emulator::controllers::bootstrap(&mut st);
    let objects = [
        (
            "",
            "v1",
            "configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}}),
        ),
        (
            "",
            "v1",
            "pods",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "nginx", "ports": [{"name": "http", "containerPort": 80}]}]}}),
        ),
        (
            "",
            "v1",
            "services",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"},
            "spec": {"ports": [{"name": "http", "port": 80}]}}),
        ),
        (
            "discovery.k8s.io",
            "v1",
            "endpointslices",
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "x", "labels": {"kubernetes.io/service-name": "x"}}, "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"]}], "ports": [{"name": "http", "port": 80}]}),
        ),
    ];
    let mut targets = Vec::new();
    for (group, version, resource, obj) in objects {
        let rt = st.resolve(group, version, resource).unwrap();
        let t = Target {
            rt,
            ns: Some("default".into()),
            name: Some("x".into()),
            sub: None,
        };
        ops::create(&mut st, &t, obj, &Writer::named("seed"), false).unwrap();
        targets.push(t);
    }
    (st, targets)
}

/// JSON values shaped like Kubernetes objects and patches, with wrong types and values anywhere.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "\\PC{0,12}".prop_map(Value::from),
        Just(json!("10.0.0.1")),
        Just(json!("IPv4")),
        Just(json!("$patch")),
        Just(json!("delete")),
        Just(json!("replace")),
        Just(json!("/metadata/name")),
    ];
    let key = prop_oneof![
        Just("apiVersion"),
        Just("kind"),
        Just("metadata"),
        Just("name"),
        Just("namespace"),
        Just("labels"),
        Just("annotations"),
        Just("uid"),
        Just("resourceVersion"),
        Just("spec"),
        Just("data"),
        Just("ports"),
        Just("port"),
        Just("containers"),
        Just("endpoints"),
        Just("addresses"),
        Just("addressType"),
        Just("ownerReferences"),
        Just("finalizers"),
        Just("managedFields"),
        Just("$patch"),
        Just("$setElementOrder/ports"),
        Just("$retainKeys"),
        Just("op"),
        Just("path"),
        Just("value"),
        Just("from"),
    ]
    .prop_map(str::to_owned);
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            proptest::collection::btree_map(key.clone(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Request bodies: raw bytes, YAML-ish text, JSON of any shape, JSON patches with wrong ops.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let op = (
        prop_oneof![
            Just("add"),
            Just("remove"),
            Just("replace"),
            Just("move"),
            Just("copy"),
            Just("test"),
            Just("nope")
        ],
        prop_oneof![
            Just("/metadata/name"),
            Just("/metadata/labels/a"),
            Just("/data/a"),
            Just("/spec/ports/0"),
            Just("/spec/ports/-"),
            Just("/endpoints/99"),
            Just("/metadata/uid"),
            Just(""),
            Just("/"),
            Just("~2"),
            Just("/a~1b")
        ],
        value(),
    )
        .prop_map(
            |(op, path, v)| json!({"op": op, "path": path, "value": v, "from": "/metadata/labels"}),
        );
    prop_oneof![
        1 => proptest::collection::vec(any::<u8>(), 0..128),
        1 => "[ -~\n]{0,160}".prop_map(String::into_bytes),
        4 => value().prop_map(|v| serde_json::to_vec(&v).unwrap_or_default()),
        2 => proptest::collection::vec(op, 0..4).prop_map(|ops| serde_json::to_vec(&ops).unwrap_or_default()),
    ]
}

#[derive(Clone, Copy, Debug)]
enum Verb {
    Create,
    Update,
    Patch(PatchType),
    Delete,
}

fn verb() -> impl Strategy<Value = Verb> {
    prop_oneof![
        Just(Verb::Create),
        Just(Verb::Update),
        Just(Verb::Patch(PatchType::Merge)),
        Just(Verb::Patch(PatchType::Json)),
        Just(Verb::Patch(PatchType::Strategic)),
        Just(Verb::Patch(PatchType::Apply)),
        Just(Verb::Delete),
    ]
}

fn call(st: &mut State, t: &Target, verb: Verb, body: &[u8]) -> Result<(), ApiError> {
    let w = Writer::named("fuzz");
    let q = Query::parse(None);
    match verb {
        Verb::Create => ops::decode_body(body).and_then(|obj| ops::create(st, t, obj, &w, false)),
        Verb::Update => ops::update(st, t, body, &w, Output::Json),
        Verb::Patch(pt) => ops::patch(st, t, body, pt, &q, &w, Output::Json),
        Verb::Delete => ops::delete(st, t, &q, body, Output::Json),
    }
    .map(|_| ())
}

fn snapshot(st: &State) -> Vec<(String, String, Value)> {
    let mut all: Vec<(String, String, Value)> = st
        .objects
        .iter()
        .flat_map(|(gr, m)| {
            m.iter()
                .map(move |(k, v)| (gr.resource.clone(), k.clone(), (**v).clone()))
        })
        .collect();
    all.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    all
}

/// kube-apiserver's answer (500, no reason) to a create whose body sets a resourceVersion.
const RESOURCE_VERSION_ON_CREATE: &str =
    "resourceVersion should not be set on objects to be created";

proptest! {
    #![proptest_config(fuzz_budget::config())]

    /// Any body, any verb, any of the seeded types: a typed 4xx or success; a failure leaves
    /// the store exactly as it was, and a success keeps the object's name and uid.
    #[test]
    fn fuzz_request_bodies(which in 0usize..4, verb in verb(), body in body()) {
        let (mut st, targets) = seeded();
        let t = &targets[which];
        let before = snapshot(&st);
        let uid_before = st.get(&t.rt.gr(), "default/x").and_then(|o| o.pointer("/metadata/uid").cloned());
        match call(&mut st, t, verb, &body) {
            Err(e) if e.code == 500 => {
                // The one 500 kube-apiserver 1.37 answers a body with: a create that sets
                // metadata.resourceVersion (its storage layer's plain error: no reason).
                prop_assert_eq!(e.message.as_str(), RESOURCE_VERSION_ON_CREATE, "{:?}", e);
                prop_assert_eq!(snapshot(&st), before, "a failed request changed the store");
            }
            Err(e) => {
                prop_assert!((400..500).contains(&e.code), "{} {}: {}", e.code, e.reason, e.message);
                prop_assert!(!e.message.is_empty() && !e.reason.is_empty(), "{:?}", e);
                prop_assert_eq!(snapshot(&st), before, "a failed request changed the store");
            }
            Ok(()) => {
                if let Some(obj) = st.get(&t.rt.gr(), "default/x") {
                    prop_assert_eq!(obj.pointer("/metadata/name"), Some(&json!("x")));
                    if matches!(verb, Verb::Update | Verb::Patch(_)) {
                        prop_assert_eq!(obj.pointer("/metadata/uid").cloned(), uid_before);
                    }
                }
            }
        }
    }

    /// Body decoding alone: an object or a 400 saying why.
    #[test]
    fn fuzz_decode_body(body in body()) {
        match ops::decode_body(&body) {
            Ok(v) => prop_assert!(v.is_object()),
            Err(e) => prop_assert_eq!(e.code, 400, "{:?}", e),
        }
    }

    /// DeleteOptions from a query and a body.
    #[test]
    fn fuzz_delete_options(query in "[ -~]{0,60}", body in body()) {
        let q = Query::parse(Some(&query));
        if let Err(e) = ops::DeleteOpts::parse(&q, &body) {
            prop_assert_eq!(e.code, 400, "{:?}", e);
        }
    }

    /// Query strings, paths and content types: parsed or refused, never a panic.
    #[test]
    fn fuzz_query_path_and_content_type(
        query in "\\PC{0,60}",
        path in prop_oneof!["\\PC{0,60}", "(/api/v1|/apis/discovery.k8s.io/v1)(/[a-z%.]{0,10}){0,6}"],
        content_type in proptest::option::of("\\PC{0,40}"),
    ) {
        let q = Query::parse(Some(&query));
        for k in ["limit", "timeoutSeconds", "resourceVersion", "watch"] {
            let _ = q.int(k);
            let _ = q.flag(k);
        }
        let _ = route(&path);
        let _ = kube_emulator::request::negotiate(content_type.as_deref());
        if let Err(e) = PatchType::from_content_type(content_type.as_deref()) {
            prop_assert_eq!(e.code, 415);
        }
    }
}
