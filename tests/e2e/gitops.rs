//! GitOps health, by the library Flux runs: `kstatus` (built by `make realkube` from
//! `tools/kstatus`, sigs.k8s.io/cli-utils v0.37.2's `pkg/kstatus/status.Compute`, what
//! kustomize-controller's `wait`/`healthChecks` use) reads the live PortMapping from the real API
//! server through its lifecycle, and the test asserts what docs/install.md ("Flux and kstatus")
//! promises: InProgress until the operator has observed the latest generation, Current once
//! published, Failed while `Stalled` is True (an invalid spec, a Service claimed by another
//! PortMapping), Terminating while deleted, then NotFound. A PortMapping the operator has not
//! written status for yet is InProgress too: the CRD stores it with `observedGeneration: 0`
//! (without a status kstatus would call it Current).
//!
//! Argo CD's health check (docs/install.md, "Health in Argo CD") is run in Lua 5.1 by
//! `charts/tests/chart_test.py`: gitops-engine, which would run it as Argo CD does, does not
//! build here (`github.com/argoproj/argo-cd/gitops-engine/v3@v3.6.1 requires go >= 1.27.0`, and
//! the machine's package list marks v3.6.0 and v3.6.1 as failing on Go 1.27.3 too).

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::env::{Cluster, Proc, kubectl_available};

/// A correctness bound for the operator to publish or report (wide for a loaded machine).
const WAIT: Duration = Duration::from_secs(30);

/// kstatus of PortMapping `name`, as Flux computes it.
fn kstatus(cluster: &Cluster, name: &str) -> Value {
    let out = Command::new(test_support::realkube::kstatus())
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .args(["--namespace", &cluster.namespace, name])
        .output()
        .expect("kstatus runs");
    assert!(
        out.status.success(),
        "kstatus: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "kstatus printed {:?}: {e}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Polls kstatus until `name` is `want`; returns the result and how long it took.
fn eventually(cluster: &Cluster, name: &str, want: &str) -> (Value, Duration) {
    eventually_that(cluster, name, want, |_| true)
}

/// Polls kstatus until `name` is `want` and `also` holds of the result.
fn eventually_that(
    cluster: &Cluster,
    name: &str,
    want: &str,
    also: impl Fn(&Value) -> bool,
) -> (Value, Duration) {
    let start = Instant::now();
    loop {
        let got = kstatus(cluster, name);
        if got["status"] == want && also(&got) {
            return (got, start.elapsed());
        }
        assert!(
            start.elapsed() < WAIT,
            "{name}: kstatus never became {want} as expected; last: {got}\nPortMapping:\n{}\n\
             operator log:\n{}",
            String::from_utf8_lossy(&cluster.kubectl(&["get", "pm", name, "-o", "yaml"]).stdout),
            cluster.operator_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn apply(cluster: &Cluster, object: &Value) {
    let out = cluster.kubectl_stdin(&["apply", "-f", "-"], object.to_string().as_bytes());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn portmapping(name: &str, service: &str) -> Value {
    json!({"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
        "metadata": {"name": name},
        "spec": {"serviceRef": {"name": service}, "pods": {"key": "example.com/pool", "value": "db"},
                 "defaultChecks": [{"podReady": {}}, {"portNames": {"key": "example.com/ports"}}]}})
}

/// The condition `kind` of PortMapping `name`: `status reason`.
fn condition(cluster: &Cluster, name: &str, kind: &str) -> String {
    cluster.ok(&[
        "get",
        "pm",
        name,
        "-o",
        &format!(
            "jsonpath={{.status.conditions[?(@.type==\"{kind}\")].status}} {{.status.conditions[?(@.type==\"{kind}\")].reason}}"
        ),
    ])
}

#[test]
fn kstatus_follows_a_portmapping_through_its_lifecycle_as_install_md_promises() {
    if !kubectl_available() {
        return;
    }
    let cluster = Cluster::realkube("kstatus");
    if !cluster.plays_kubelet() {
        return;
    }
    apply(
        &cluster,
        &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"},
            "spec": {"ports": [{"name": "http", "port": 8080}, {"name": "https", "port": 8443}]}}),
    );
    for (i, (pod, ports)) in [("a", "http"), ("b", "http,https")].iter().enumerate() {
        apply(
            &cluster,
            &json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod, "labels": {"example.com/pool": "db"},
                             "annotations": {"example.com/ports": ports}},
                "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}),
        );
        let ip = format!("10.244.34.{}", i + 1);
        let status = json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": "True"}]}});
        cluster.ok(&[
            "patch",
            "pod",
            pod,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ]);
    }
    // A finalizer of the test's own keeps the object Terminating once deleted.
    let mut db = portmapping("db", "db");
    db["metadata"]["finalizers"] = json!(["example.com/hold"]);
    apply(&cluster, &db);
    let mut figures = Vec::new();

    // Created, no status written yet (the operator is not running): the CRD's default status
    // (`observedGeneration: 0`) makes it InProgress, so Flux's wait does not pass here.
    let created = kstatus(&cluster, "db");
    assert_eq!(created["status"], "InProgress", "{created}");
    assert_eq!(created["observedGeneration"], 0, "{created}");

    // Published: Current, at the latest generation, Ready.
    let operator = cluster.operator();
    let (published, took) = eventually_that(&cluster, "db", "Current", |v| {
        !v["observedGeneration"].is_null()
    });
    figures.push(("published → Current", took));
    assert_eq!(published["status"], "Current", "{published}");
    assert_eq!(
        published["observedGeneration"], published["generation"],
        "{published}"
    );
    assert_eq!(condition(&cluster, "db", "Ready"), "True Published");
    // kstatus reads Ready when neither the generation, Reconciling nor Stalled decides.
    assert_eq!(published["message"], "Resource is Ready", "{published}");

    // A spec change the operator has not observed: InProgress (the operator is stopped, so
    // the state holds still to be read), then Current again once it has.
    drop(operator);
    cluster.ok(&[
        "patch",
        "pm",
        "db",
        "--type=merge",
        "-p",
        r#"{"spec":{"maxEndpointsPerSlice":50}}"#,
    ]);
    let pending = kstatus(&cluster, "db");
    assert_eq!(pending["status"], "InProgress", "{pending}");
    assert_eq!(pending["generation"], 2, "{pending}");
    assert_eq!(pending["observedGeneration"], 1, "{pending}");
    assert!(
        pending["message"]
            .as_str()
            .is_some_and(|m| m.contains("generation is 2, but latest observed generation is 1")),
        "{pending}"
    );
    let operator = cluster.operator();
    let (observed, took) = eventually(&cluster, "db", "Current");
    figures.push(("spec change observed → Current", took));
    assert_eq!(observed["observedGeneration"], 2, "{observed}");

    // Invalid spec (a matchLabels key no schema can check): Stalled, so Failed; fixed, Current.
    cluster.ok(&[
        "patch",
        "pm",
        "db",
        "--type=merge",
        "-p",
        r#"{"spec":{"pods":{"selector":{"matchLabels":{"not a key!":"x"}}}}}"#,
    ]);
    let (failed, took) = eventually(&cluster, "db", "Failed");
    figures.push(("invalid spec → Failed", took));
    assert_eq!(condition(&cluster, "db", "Stalled"), "True InvalidSpec");
    assert!(
        failed["conditions"][0]["type"] == "Stalled"
            && failed["conditions"][0]["reason"] == "InvalidSpec",
        "{failed}"
    );
    cluster.ok(&[
        "patch",
        "pm",
        "db",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/pods/selector"}]"#,
    ]);
    eventually(&cluster, "db", "Current");
    assert_eq!(condition(&cluster, "db", "Ready"), "True Published");

    // A second PortMapping for the same Service: it is the newer one, so it writes nothing
    // and is Failed (Stalled, ServiceClaimed); the first stays Current.
    apply(&cluster, &portmapping("db-2", "db"));
    let (claimed, took) = eventually(&cluster, "db-2", "Failed");
    figures.push(("Service collision → Failed", took));
    assert_eq!(
        condition(&cluster, "db-2", "Stalled"),
        "True ServiceClaimed"
    );
    assert_eq!(claimed["conditions"][0]["reason"], "ServiceClaimed");
    assert_eq!(kstatus(&cluster, "db")["status"], "Current");
    cluster.ok(&["delete", "pm", "db-2"]);
    assert_eq!(kstatus(&cluster, "db-2")["status"], "NotFound");

    // Deleted: Terminating while a finalizer holds it, then NotFound.
    cluster.ok(&["delete", "pm", "db", "--wait=false"]);
    let terminating = kstatus(&cluster, "db");
    assert_eq!(terminating["status"], "Terminating", "{terminating}");
    cluster.ok(&[
        "patch",
        "pm",
        "db",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]);
    eventually(&cluster, "db", "NotFound");
    drop::<Proc>(operator);
    for (what, took) in figures {
        eprintln!("kstatus: {what} in {} ms", took.as_millis());
    }
}
