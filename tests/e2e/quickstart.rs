//! The README quick start as a user types it: install the CRD from `portmapper crd`, apply the
//! demo manifests, run the operator, and watch kubectl show per-port membership.

use std::process::Command;
use std::time::Duration;

use crate::env::{Cluster, bin, kubectl_available, repo};

const WAIT: Duration = Duration::from_secs(30);

/// Plays kubelet where there is none: pod IP and Ready through the status subresource.
fn set_pod_status(cluster: &Cluster, pod: &str, ip: &str, ready: bool) {
    let patch = serde_json::json!({"status": {
        "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
    }});
    cluster.ok(&[
        "patch",
        "pod",
        pod,
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch.to_string(),
    ]);
}

fn install_and_apply(cluster: &Cluster) {
    let crd = Command::new(bin("portmapper")).arg("crd").output().unwrap();
    assert!(crd.status.success());
    let out = cluster.kubectl_stdin(&["apply", "-f", "-"], &crd.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("portmappings.portmapper.dev"));
    cluster.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/portmappings.portmapper.dev",
        "--timeout=30s",
    ]);
    let demo = repo().join("examples/demo");
    cluster.ok(&["apply", "-f", demo.to_str().unwrap()]);
    if cluster.plays_kubelet() {
        for (i, pod) in ["pod-a", "pod-b", "pod-c", "pod-d"].iter().enumerate() {
            set_pod_status(cluster, pod, &format!("10.244.0.{}", i + 1), true);
        }
    }
}

#[test]
fn kubectl_quickstart_publishes_per_port_memberships() {
    if !kubectl_available() {
        return;
    }
    let cluster = Cluster::start("quickstart");
    install_and_apply(&cluster);
    let _operator = cluster.operator();

    let waited = cluster.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pm/my-service",
        "--timeout=30s",
    ]);
    assert!(
        waited.status.success(),
        "PortMapping never became Ready: {}\noperator log:\n{}",
        String::from_utf8_lossy(&waited.stderr),
        cluster.operator_log()
    );
    let table = cluster.eventually(&["get", "pm"], WAIT, |out| {
        out.contains("http 3/4, https 3/4")
    });
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "SERVICE", "PORTS", "READY", "AGE"],
        "{table}"
    );
    assert!(
        table
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("my-service   my-service   http 3/4, https 3/4   True"),
        "{table}"
    );

    // One slice per port set (the default shape): kubectl lists each with all its ports.
    let slices = cluster.ok(&[
        "get",
        "endpointslices",
        "-l",
        "kubernetes.io/service-name=my-service",
    ]);
    let rows: Vec<Vec<&str>> = slices
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    let sets: Vec<(&str, &str, &str)> = rows.iter().map(|r| (r[0], r[2], r[3])).collect();
    assert_eq!(sets.len(), 3, "{slices}");
    let by_ports = |ports: &str| sets.iter().find(|s| s.1 == ports).copied();
    let (both, _, addresses) = by_ports("8080,8443").expect(&slices);
    assert!(both.starts_with("my-service.http-https."), "{slices}");
    assert_eq!(addresses, "10.244.0.2,10.244.0.3", "{slices}");
    assert_eq!(
        by_ports("8080").map(|s| s.2),
        Some("10.244.0.1"),
        "{slices}"
    );
    assert_eq!(
        by_ports("8443").map(|s| s.2),
        Some("10.244.0.4"),
        "{slices}"
    );

    // A user moves pod-a onto https with kubectl: it joins b and c's slice, and its own goes.
    cluster.ok(&[
        "annotate",
        "pod",
        "pod-a",
        "example.com/ports=http,https",
        "--overwrite",
    ]);
    cluster.eventually(
        &[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=my-service",
            "-o",
            "jsonpath={range .items[*]}{range .ports[*]}{.name} {end}:{range .endpoints[*]}{.targetRef.name} {end}{\"\\n\"}{end}",
        ],
        WAIT,
        |out| {
            let mut lines: Vec<&str> = out.lines().map(str::trim).collect();
            lines.sort_unstable();
            lines == ["http https :pod-a pod-b pod-c", "https :pod-d"]
        },
    );
    cluster.eventually(
        &[
            "get",
            "pm",
            "my-service",
            "-o",
            "jsonpath={.status.summary}",
        ],
        WAIT,
        |out| out == "http 3/4, https 4/4",
    );
}

#[test]
fn deleting_the_portmapping_garbage_collects_its_slices() {
    if !kubectl_available() {
        return;
    }
    let cluster = Cluster::start("gc");
    install_and_apply(&cluster);
    let _operator = cluster.operator();
    cluster.eventually(
        &[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=my-service",
            "-o",
            "name",
        ],
        WAIT,
        |out| out.lines().count() == 3,
    );
    // With the legacy mirror on, the Endpoints object is the PortMapping's too.
    cluster.ok(&[
        "patch",
        "pm",
        "my-service",
        "--type=merge",
        "-p",
        r#"{"spec":{"legacyEndpoints":true}}"#,
    ]);
    cluster.eventually(
        &[
            "get",
            "endpoints",
            "-l",
            "endpointslice.kubernetes.io/managed-by=portmapper.dev",
            "-o",
            "name",
        ],
        WAIT,
        |out| out.trim() == "endpoints/my-service",
    );
    // Every v1 Endpoints write draws the API server's deprecation warning; the PortMapping
    // reports it once, however many writes follow (this membership change writes it again).
    let warned = [
        "get",
        "events.v1.events.k8s.io",
        "--field-selector",
        "reason=ApiWarning",
        "-o",
        // A repeat would be a series (kube's recorder counts it there).
        "jsonpath={range .items[*]}{.series.count}|{.note}{\"\\n\"}{end}",
    ];
    cluster.eventually(&warned, WAIT, |out| !out.is_empty());
    cluster.ok(&[
        "annotate",
        "pod",
        "pod-a",
        "example.com/ports=https",
        "--overwrite",
    ]);
    cluster.eventually(
        &[
            "get",
            "endpoints",
            "my-service",
            "-o",
            "jsonpath={.subsets[*].ports[*].name}",
        ],
        WAIT,
        // Subsets by port set: b and c serve both, a and d https only.
        |out| out == "http https https",
    );
    let events = cluster.ok(&warned);
    assert_eq!(
        events.trim(),
        "|the API server warns about this PortMapping's writes: v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice",
        "{}",
        cluster.operator_log()
    );
    cluster.ok(&["delete", "pm", "my-service", "--wait=true"]);
    cluster.eventually(
        &[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=my-service",
            "-o",
            "name",
        ],
        WAIT,
        |out| out.trim().is_empty(),
    );
    cluster.eventually(
        &[
            "get",
            "endpoints",
            "-l",
            "endpointslice.kubernetes.io/managed-by=portmapper.dev",
            "-o",
            "name",
        ],
        WAIT,
        |out| out.trim().is_empty(),
    );
}

#[test]
fn kubectl_apply_of_a_changed_portmapping_updates_it() {
    if !kubectl_available() {
        return;
    }
    let cluster = Cluster::start("reapply");
    install_and_apply(&cluster);
    let path = repo().join("examples/demo/20-portmapping.yaml");
    let changed = std::fs::read_to_string(&path).unwrap().replace(
        "  serviceRef: {name: my-service}\n",
        "  serviceRef: {name: my-service}\n  maxEndpointsPerSlice: 50\n",
    );
    assert!(changed.contains("maxEndpointsPerSlice: 50"));
    let out = cluster.kubectl_stdin(&["apply", "-f", "-"], changed.as_bytes());
    assert!(
        out.status.success(),
        "client-side apply of a changed PortMapping failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("portmapping.portmapper.dev/my-service configured")
    );
    let value = cluster.ok(&[
        "get",
        "pm",
        "my-service",
        "-o",
        "jsonpath={.spec.maxEndpointsPerSlice}",
    ]);
    assert_eq!(value, "50");
}

/// KEP-5311: since 1.36 a Service name is any DNS-1123 label. A PortMapping names `1st-api`,
/// which a 1.37 server accepts, and its slices (`1st-api.http.<hash>`) are valid names too.
#[test]
fn a_service_named_with_a_leading_digit_is_published() {
    if !kubectl_available() {
        return;
    }
    let cluster = Cluster::start("kep5311");
    let objects = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "1st-api"},
         "spec": {"ports": [{"name": "http", "port": 8080}]}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "api-0", "labels": {"example.com/group": "1st-api"}},
         "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}},
        {"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping", "metadata": {"name": "1st-api"},
         "spec": {"serviceRef": {"name": "1st-api"}, "pods": {"key": "example.com/group"},
                  "defaultChecks": [{"podReady": {}}]}},
    ]});
    let out = cluster.kubectl_stdin(&["apply", "-f", "-"], objects.to_string().as_bytes());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if cluster.plays_kubelet() {
        set_pod_status(&cluster, "api-0", "10.244.1.1", true);
    }
    let _operator = cluster.operator();
    let members = cluster.eventually(
        &[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=1st-api",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.endpoints[*].targetRef.name}{end}",
        ],
        WAIT,
        |out| out.ends_with("=api-0"),
    );
    assert!(members.starts_with("1st-api.http."), "{members}");
}

/// The CRD's selectableFields: the API server filters PortMappings by Service and by pool key.
#[test]
fn kubectl_finds_a_services_portmapping_with_a_field_selector() {
    if !kubectl_available() {
        return;
    }
    let cluster = Cluster::start("selectable");
    let pm = |name: &str, service: &str, key: &str| {
        serde_json::json!({"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
            "metadata": {"name": name},
            "spec": {"serviceRef": {"name": service}, "pods": {"key": key},
                     "defaultChecks": [{"podReady": {}}]}})
    };
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        pm("web-a", "web", "example.com/group"), pm("web-b", "web", "example.com/tier"),
        pm("api", "api", "example.com/group"),
    ]});
    let out = cluster.kubectl_stdin(&["apply", "-f", "-"], list.to_string().as_bytes());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let by =
        |selector: &str| cluster.ok(&["get", "pm", "--field-selector", selector, "-o", "name"]);
    assert_eq!(
        by("spec.serviceRef.name=web"),
        "portmapping.portmapper.dev/web-a\nportmapping.portmapper.dev/web-b\n"
    );
    assert_eq!(
        by("spec.pods.key=example.com/group,spec.serviceRef.name!=web"),
        "portmapping.portmapper.dev/api\n"
    );
}
