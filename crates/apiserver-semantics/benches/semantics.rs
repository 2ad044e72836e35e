//! Costs of the per-request algorithms the emulator runs on every write: server-side apply of a
//! full EndpointSlice, PortMapping admission (prune, default, OpenAPI + CEL validation) and a
//! Table of 1,000 EndpointSlices. Run with `cargo bench -p apiserver-semantics`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use apiserver_semantics::schema::CrdValidator;
use apiserver_semantics::table::{IncludeObject, TableSource, render};
use apiserver_semantics::{BuiltinSchema, CrdSchema, ssa};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use std::hint::black_box;

const NOW: &str = "2026-01-02T03:04:05Z";

fn slice(n: usize) -> Value {
    let endpoints: Vec<Value> = (0..n)
        .map(|i| {
            json!({"addresses": [format!("10.{}.{}.{}", i / 65536, (i / 256) % 256, i % 256)],
                   "conditions": {"ready": true, "serving": true, "terminating": false},
                   "targetRef": {"kind": "Pod", "namespace": "default", "name": format!("web-{i}"), "uid": format!("uid-{i}")},
                   "nodeName": "node-1"})
        })
        .collect();
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-http-abcde", "namespace": "default",
            "labels": {"kubernetes.io/service-name": "web", "endpointslice.kubernetes.io/managed-by": "portmapper.dev"},
            "ownerReferences": [{"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping", "name": "web",
                                 "uid": "5c1", "controller": true, "blockOwnerDeletion": true}]},
        "addressType": "IPv4", "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]})
}

fn crd() -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../crds/portmapper.dev_portmappings.yaml"
    ))
    .unwrap();
    serde_yaml::from_str(&text).unwrap()
}

fn bench_ssa(c: &mut Criterion) {
    let schema = BuiltinSchema::for_kind("discovery.k8s.io", "EndpointSlice");
    let cfg = slice(1000);
    let mut live = ssa::apply(None, &cfg, "portmapper", true, None, &schema, NOW)
        .unwrap()
        .object;
    live["metadata"]["resourceVersion"] = json!("7");
    let mut changed = cfg.clone();
    changed["endpoints"][999]["conditions"]["ready"] = json!(false);
    c.bench_function("ssa apply EndpointSlice 1000 endpoints (no-op)", |b| {
        b.iter(|| {
            ssa::apply(
                Some(black_box(&live)),
                black_box(&cfg),
                "portmapper",
                true,
                None,
                &schema,
                NOW,
            )
            .unwrap()
        })
    });
    c.bench_function(
        "ssa apply EndpointSlice 1000 endpoints (one endpoint changed)",
        |b| {
            b.iter(|| {
                ssa::apply(
                    Some(black_box(&live)),
                    black_box(&changed),
                    "portmapper",
                    true,
                    None,
                    &schema,
                    NOW,
                )
                .unwrap()
            })
        },
    );
    c.bench_function("ssa record_update EndpointSlice 1000 endpoints", |b| {
        b.iter(|| {
            ssa::record_update(
                Some(black_box(&live)),
                black_box(&changed),
                "kubectl",
                None,
                &schema,
                NOW,
            )
        })
    });
    let crd = crd();
    let pm_schema = CrdSchema::from_crd(&crd, "v1alpha1").unwrap();
    let pm = json!({"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"serviceRef": {"name": "web"}, "pods": {"key": "app"}},
        "status": {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True", "reason": "R",
            "message": "", "lastTransitionTime": NOW}]}});
    let live_pm = ssa::apply(None, &pm, "portmapper", true, None, &pm_schema, NOW)
        .unwrap()
        .object;
    c.bench_function("ssa apply PortMapping status", |b| {
        b.iter(|| {
            ssa::apply(
                Some(black_box(&live_pm)),
                black_box(&pm),
                "portmapper",
                true,
                Some("status"),
                &pm_schema,
                NOW,
            )
            .unwrap()
        })
    });
}

fn bench_admission(c: &mut Criterion) {
    let validator = CrdValidator::from_crd(&crd(), "v1alpha1").unwrap();
    let pm = json!({"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"serviceRef": {"name": "web"}, "pods": {"key": "app.kubernetes.io/name", "value": "web"},
            "ports": [{"name": "http", "checks": [{"podReady": {}}, {"anyOf": [{"httpGet": {"path": "/healthz"}}, {"tcpSocket": {}}]}]},
                      {"name": "metrics", "checks": [{"portNames": {"key": "example.com/ports"}}]}]}});
    c.bench_function(
        "PortMapping admission (prune + default + validate incl. CEL)",
        |b| {
            b.iter(|| {
                let mut o = black_box(&pm).clone();
                validator.prune(&mut o);
                validator.apply_defaults(&mut o);
                assert!(validator.validate(&o, None).is_empty());
            })
        },
    );
    c.bench_function(
        "CrdValidator::from_crd (structural check + CEL compile)",
        |b| {
            let crd = crd();
            b.iter(|| CrdValidator::from_crd(black_box(&crd), "v1alpha1").unwrap())
        },
    );
}

fn bench_table(c: &mut Criterion) {
    let slices: Vec<Value> = (0..1000)
        .map(|i| {
            let mut s = slice(3);
            s["metadata"]["name"] = json!(format!("web-{i}"));
            s["metadata"]["creationTimestamp"] = json!("2026-01-02T03:00:00Z");
            s
        })
        .collect();
    let source = TableSource::Builtin {
        group: "discovery.k8s.io".into(),
        kind: "EndpointSlice".into(),
    };
    c.bench_function("Table of 1000 EndpointSlices", |b| {
        b.iter(|| {
            render(
                &source,
                black_box(&slices),
                IncludeObject::Metadata,
                "42",
                None,
                NOW,
            )
        })
    });
}

fn bench_openapi(c: &mut Criterion) {
    let crds = vec![crd()];
    c.bench_function(
        "OpenAPI v3 index (hashes every group-version document)",
        |b| b.iter(|| apiserver_semantics::openapi::v3_index(black_box(&crds))),
    );
    c.bench_function("OpenAPI v3 api/v1 document", |b| {
        b.iter(|| apiserver_semantics::openapi::v3_group_version(black_box(&crds), "", "v1"))
    });
}

criterion_group!(
    benches,
    bench_ssa,
    bench_admission,
    bench_table,
    bench_openapi
);
criterion_main!(benches);
