//! The Helm chart, rendered by the real Helm engine (`charts/tests/chart_test.py render`, in the
//! virtualenv `make test` creates) and applied with kubectl to the real API server (realkube).
//!
//! The API server checks every built-in kind; prometheus-operator's kinds are not installed (and
//! the emulator, which `Cluster::emulator` still offers, lacks `apps`, `rbac.authorization.k8s.io`,
//! `policy` and `networking.k8s.io` too). So the test, for each rendered object:
//! - decodes it into its k8s-openapi type (Kubernetes 1.33 API) and re-encodes it: a wrong type
//!   fails the decode, and an unknown or misplaced field is missing from the re-encoded object;
//! - applies it with kubectl (`--server-side --validate=strict`), installing schema-less
//!   stand-in CRDs first for the kinds the server does not serve, so names, namespaces, scope
//!   and the stream itself are checked by a real kubectl and API server;
//! - reads it back and compares what was set.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};

use crate::env::{Cluster, kubectl_available, repo};

/// The Python of the chart virtualenv: `PORTMAPPER_CHART_PYTHON` (set by the Makefile, which
/// makes the chart tests mandatory) or `.venv/bin/python` when present.
fn chart_python() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("PORTMAPPER_CHART_PYTHON") {
        let path = PathBuf::from(path);
        assert!(
            path.exists(),
            "PORTMAPPER_CHART_PYTHON={} does not exist; run `make helm-venv`",
            path.display()
        );
        return Some(path);
    }
    let venv = repo().join(".venv/bin/python");
    if venv.exists() {
        return Some(venv);
    }
    eprintln!(
        "SKIPPED: no chart virtualenv (.venv/bin/python); `make helm-venv` creates it, `make test` requires it"
    );
    None
}

/// The chart rendered with `values` into `namespace` as release `name`; None when skipped.
pub fn render(name: &str, namespace: &str, values: &Value) -> Option<Vec<Value>> {
    let python = chart_python()?;
    let out = Command::new(python)
        .arg(repo().join("charts/tests/chart_test.py"))
        .args([
            "render",
            "--name",
            name,
            "--namespace",
            namespace,
            "--values",
        ])
        .arg(values.to_string())
        .output()
        .expect("the chart renderer runs");
    assert!(
        out.status.success(),
        "helm render failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let objects: Vec<Value> = serde_json::from_slice(&out.stdout).expect("rendered JSON");
    Some(objects)
}

/// Decodes `o` as `T` and re-encodes it; the result must equal the input.
fn round_trip<T: k8s_openapi::serde::de::DeserializeOwned + k8s_openapi::serde::Serialize>(
    o: &Value,
) {
    let typed: T = serde_json::from_value(o.clone())
        .unwrap_or_else(|e| panic!("{} {}: {e}", o["kind"], o["metadata"]["name"]));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(
        &back, o,
        "{} {} has fields its API type does not know (compare with the re-encoded object)",
        o["kind"], o["metadata"]["name"]
    );
}

/// Every built-in object of the chart checked against its API type (the ServiceMonitor is a
/// prometheus-operator type with no Rust type here: it is checked by chart_test.py's assertions).
fn check_types(objects: &[Value]) {
    use k8s_openapi::api::{apps, core, networking, policy, rbac};
    for o in objects {
        match (
            o["apiVersion"].as_str().unwrap(),
            o["kind"].as_str().unwrap(),
        ) {
            ("apps/v1", "Deployment") => round_trip::<apps::v1::Deployment>(o),
            ("v1", "ServiceAccount") => round_trip::<core::v1::ServiceAccount>(o),
            ("v1", "Service") => round_trip::<core::v1::Service>(o),
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
                round_trip::<rbac::v1::ClusterRole>(o)
            }
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                round_trip::<rbac::v1::ClusterRoleBinding>(o)
            }
            ("rbac.authorization.k8s.io/v1", "Role") => round_trip::<rbac::v1::Role>(o),
            ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
                round_trip::<rbac::v1::RoleBinding>(o)
            }
            ("policy/v1", "PodDisruptionBudget") => {
                round_trip::<policy::v1::PodDisruptionBudget>(o)
            }
            ("networking.k8s.io/v1", "NetworkPolicy") => {
                round_trip::<networking::v1::NetworkPolicy>(o)
            }
            ("monitoring.coreos.com/v1", "ServiceMonitor") => {}
            (api_version, kind) => panic!("unexpected {api_version} {kind} in the chart"),
        }
    }
}

/// Plural resource name of a kind (the kinds of this chart are regular).
fn plural(kind: &str) -> String {
    let lower = kind.to_lowercase();
    match lower.strip_suffix('y') {
        Some(stem) => format!("{stem}ies"),
        None => format!("{lower}s"),
    }
}

fn group_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

/// A schema-less CRD standing in for a kind the emulator does not serve.
fn stand_in_crd(api_version: &str, kind: &str, namespaced: bool) -> Value {
    let (group, version) = group_version(api_version);
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{}.{group}", plural(kind))},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural(kind), "listKind": format!("{kind}List")},
            "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "versions": [{"name": version, "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    })
}

fn served(cluster: &Cluster) -> Vec<String> {
    cluster
        .ok(&["api-resources", "-o", "name"])
        .lines()
        .map(str::to_string)
        .collect()
}

/// Installs stand-ins for every rendered kind the cluster does not serve.
fn ensure_kinds(cluster: &Cluster, objects: &[Value]) {
    let served = served(cluster);
    let mut missing = Vec::new();
    for o in objects {
        let (api_version, kind) = (
            o["apiVersion"].as_str().unwrap(),
            o["kind"].as_str().unwrap(),
        );
        let (group, _) = group_version(api_version);
        let qualified = if group.is_empty() {
            plural(kind)
        } else {
            format!("{}.{group}", plural(kind))
        };
        if !served.contains(&qualified) && !missing.iter().any(|(q, _)| q == &qualified) {
            let namespaced = o["metadata"].get("namespace").is_some();
            missing.push((qualified, stand_in_crd(api_version, kind, namespaced)));
        }
    }
    for (name, crd) in &missing {
        apply(cluster, std::slice::from_ref(crd), false);
        cluster.ok(&[
            "wait",
            "--for=condition=Established",
            &format!("crd/{name}"),
            "--timeout=20s",
        ]);
    }
}

fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

/// `kubectl apply --server-side` of a List (as `helm install` would create them).
fn apply(cluster: &Cluster, objects: &[Value], dry_run: bool) -> String {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let mut args = vec![
        "apply",
        "--server-side",
        "--field-manager=helm",
        "--validate=strict",
        "-f",
        "-",
    ];
    if dry_run {
        args.push("--dry-run=server");
    }
    let out = cluster.kubectl_stdin(&args, list.to_string().as_bytes());
    assert!(
        out.status.success(),
        "kubectl apply failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn get(cluster: &Cluster, o: &Value) -> Value {
    let kind = o["kind"].as_str().unwrap();
    let (group, _) = group_version(o["apiVersion"].as_str().unwrap());
    let resource = if group.is_empty() {
        plural(kind)
    } else {
        format!("{}.{group}", plural(kind))
    };
    let name = o["metadata"]["name"].as_str().unwrap();
    let mut args = vec!["get", resource.as_str(), name, "-o", "json"];
    if let Some(ns) = o["metadata"]["namespace"].as_str() {
        args.extend(["-n", ns]);
    }
    serde_json::from_str(&cluster.ok(&args)).unwrap()
}

/// Renders with `values`, applies CRDs then templates, and checks every object reads back.
fn install(cluster: &Cluster, release: &str, ns: &str, values: Value, extra_namespaces: &[&str]) {
    let Some(objects) = render(release, ns, &values) else {
        return;
    };
    check_types(&objects);
    let mut namespaces = vec![namespace(ns)];
    namespaces.extend(extra_namespaces.iter().map(|n| namespace(n)));
    apply(cluster, &namespaces, false);
    // Stand-ins only for the kinds the server lacks (the emulator: apps, rbac, policy, ...; any
    // server: prometheus-operator's); on a cluster that is not ours, a server-side dry run.
    if cluster.disposable() {
        ensure_kinds(cluster, &objects);
    }
    let out = apply(cluster, &objects, !cluster.disposable());
    assert_eq!(
        out.lines().count(),
        objects.len(),
        "one line per object:\n{out}"
    );
    if !cluster.disposable() {
        return;
    }
    for o in &objects {
        let live = get(cluster, o);
        assert_eq!(live["metadata"]["labels"], o["metadata"]["labels"], "{o}");
        for field in ["spec", "rules", "subjects", "roleRef"] {
            if let Some(want) = o.get(field) {
                // Servers default fields (e.g. a Service's clusterIP); what we set must be there.
                assert_subset(&live[field], want, &format!("{} {field}", o["kind"]));
            }
        }
    }
}

/// Every field of `want` is in `live` with the same value (live may have more).
fn assert_subset(live: &Value, want: &Value, what: &str) {
    match (live, want) {
        (Value::Object(l), Value::Object(w)) => {
            for (k, v) in w {
                assert_subset(l.get(k).unwrap_or(&Value::Null), v, &format!("{what}.{k}"));
            }
        }
        (Value::Array(l), Value::Array(w)) => {
            assert_eq!(l.len(), w.len(), "{what}: {live} vs {want}");
            for (i, (l, w)) in l.iter().zip(w).enumerate() {
                assert_subset(l, w, &format!("{what}[{i}]"));
            }
        }
        _ => assert_eq!(live, want, "{what}"),
    }
}

#[test]
fn chart_applies_to_a_real_api_server_with_default_and_optional_values() {
    if !kubectl_available() || chart_python().is_none() {
        return;
    }
    let cluster = Cluster::start("chart");
    let crds = repo().join("charts/portmapper/crds");
    cluster.ok(&[
        "apply",
        "--server-side",
        "--field-manager=helm",
        "-f",
        crds.to_str().unwrap(),
    ]);
    cluster.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/portmappings.portmapper.dev",
        "--timeout=20s",
    ]);
    install(&cluster, "portmapper", "portmapper-system", json!({}), &[]);
    install(
        &cluster,
        "scoped",
        "team-a-system",
        json!({"watchNamespace": "team-a", "nodeLookups": false}),
        &["team-a"],
    );
    install(
        &cluster,
        "everything",
        "ops",
        json!({
            "metrics": {"serviceMonitor": {"enabled": true, "labels": {"release": "prom"}}},
            "networkPolicy": {"enabled": true, "apiServerCIDRs": ["10.0.0.1/32"],
                "metricsFrom": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}],
                "extraEgress": [{"to": [{"ipBlock": {"cidr": "10.244.0.0/16"}}]}]},
            "extraEnv": [{"name": "RUST_BACKTRACE", "value": "1"}],
            "podAnnotations": {"prometheus.io/scrape": "true"},
        }),
        &[],
    );
    install(
        &cluster,
        "single",
        "single",
        json!({"replicaCount": 1, "leaderElection": {"enabled": false}, "rbac": {"create": false},
               "serviceAccount": {"create": true, "name": "pm-sa"}}),
        &[],
    );
    if cluster.disposable() {
        // What each install created, by kind, read back.
        let roles = cluster.ok(&["get", "roles.rbac.authorization.k8s.io", "-A", "-o", "name"]);
        assert!(
            roles.contains("role.rbac.authorization.k8s.io/scoped"),
            "{roles}"
        );
        let pdbs = cluster.ok(&["get", "poddisruptionbudgets.policy", "-A", "-o", "name"]);
        assert_eq!(
            pdbs.lines().count(),
            3,
            "no PDB for the single replica: {pdbs}"
        );
    }
}

/// `publicationGate.inject`: the chart's MutatingAdmissionPolicy really mutates pods on a 1.37
/// API server. A pod created with a pool key, as a label or an annotation, in a namespace that
/// opts in gets the readiness gate once; other pods are left as they are.
#[test]
fn the_publication_gate_policy_adds_the_gate_to_pool_pods() {
    if !kubectl_available() {
        return;
    }
    let cluster = Cluster::start("gate-inject");
    if !cluster.disposable() {
        return;
    }
    let values = json!({"publicationGate": {"inject": true, "poolKeys": ["example.com/pool"]}});
    let release = format!("pm-{}", cluster.namespace);
    let Some(objects) = render(&release, &cluster.namespace, &values) else {
        return;
    };
    let policy: Vec<Value> = objects
        .into_iter()
        .filter(|o| {
            o["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("MutatingAdmissionPolicy"))
        })
        .collect();
    assert_eq!(policy.len(), 2, "{policy:?}");
    apply(&cluster, &policy, false);
    let opted_out = format!("{}-out", cluster.namespace);
    cluster.ok(&["create", "namespace", &opted_out]);
    cluster.ok(&[
        "label",
        "namespace",
        &cluster.namespace,
        "portmapper.dev/publication-gate=enabled",
    ]);
    let pod = |name: &str, meta: Value, gates: Value| {
        let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}});
        p["metadata"]
            .as_object_mut()
            .unwrap()
            .extend(meta.as_object().unwrap().clone());
        if !gates.is_null() {
            p["spec"]["readinessGates"] = gates;
        }
        p
    };
    let gates = |namespace: &str, name: &str| {
        cluster.ok(&[
            "get",
            "pod",
            name,
            "-n",
            namespace,
            "-o",
            "jsonpath={.spec.readinessGates[*].conditionType}",
        ])
    };
    // The API server starts applying a new policy once its informer has it: retry the first pod.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    for attempt in 0.. {
        let name = format!("first-{attempt}");
        apply(
            &cluster,
            &[pod(
                &name,
                json!({"labels": {"example.com/pool": "web"}}),
                Value::Null,
            )],
            false,
        );
        if gates(&cluster.namespace, &name) == "portmapper.dev/published" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the policy never mutated a pod"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let cases = [
        (
            "by-annotation",
            json!({"annotations": {"example.com/pool": "web"}}),
            Value::Null,
            "portmapper.dev/published",
        ),
        (
            "no-pool-key",
            json!({"labels": {"app": "web"}}),
            Value::Null,
            "",
        ),
        (
            "already-gated",
            json!({"labels": {"example.com/pool": "web"}}),
            json!([{"conditionType": "portmapper.dev/published"}]),
            "portmapper.dev/published",
        ),
        (
            "other-gate",
            json!({"labels": {"example.com/pool": "web"}}),
            json!([{"conditionType": "example.com/warm"}]),
            "example.com/warm portmapper.dev/published",
        ),
    ];
    for (name, meta, existing, want) in cases {
        apply(&cluster, &[pod(name, meta, existing)], false);
        assert_eq!(gates(&cluster.namespace, name), want, "{name}");
    }
    let mut outside = pod(
        "outside",
        json!({"labels": {"example.com/pool": "web"}}),
        Value::Null,
    );
    outside["metadata"]["namespace"] = json!(opted_out);
    apply(&cluster, &[outside], false);
    assert_eq!(
        gates(&opted_out, "outside"),
        "",
        "a namespace without the label"
    );
}
