//! Istio's own code over the slices portmapper publishes: istiod (pilot-discovery from
//! `istio.io/istio`, built by `make realkube` from `tools/istiod`) runs out of cluster against a
//! control plane of this file's own (it writes its CA objects, leases and status there), with
//! `PILOT_ENABLE_AMBIENT=true`, so one process serves both of Istio's data-plane modes.
//!
//! - Sidecar mode: what a sidecar gets, read with Istio's own ADS client (`pkg/adsc`, in
//!   `istiod eds`): the ClusterLoadAssignment of each Service port's cluster
//!   (`outbound|<port>||<svc>.<ns>.svc.cluster.local`) lists exactly that port's members, on
//!   both slice shapes and both IP families; a pod that is not ready is absent (portmapper does
//!   not publish it), a terminating one is dropped by istiod although published (serving, not
//!   ready, terminating), and membership changes are followed.
//! - Ambient mode: `/debug/ambientz` (the workloads istiod gives ztunnel) makes every pod named
//!   in any slice of the Service a workload of every port of it, and portmapper's `IstioAmbient`
//!   caveat names exactly the widening istiod shows.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_support::realkube;

use crate::consumers::{
    self, CANONICAL, FOLLOW, View, WAIT, Watch, apply, free_port, http_get, portmapping, set_status,
};
use crate::env::{Cluster, Proc, kubectl_available};

/// istiod's start (`/ready` answers 200): a correctness bound, wide for a loaded 2-core machine.
const START: Duration = Duration::from_secs(180);

/// istiod on the consumers' control plane.
struct Istiod {
    /// Plaintext xDS (`--grpcAddr`).
    xds: String,
    /// Debug and readiness (`--httpAddr`).
    http: String,
    _proc: Proc,
}

/// The istiod of this test binary, started by the first test that asks; it exits with the test
/// binary (`REALKUBE_DIE_WITH_PARENT`).
fn istiod() -> &'static Istiod {
    static ISTIOD: OnceLock<Istiod> = OnceLock::new();
    ISTIOD.get_or_init(|| {
        let plane = consumers::plane();
        let admin = Cluster::on(plane, "istio-admin");
        // Its leader-election leases and CA secret; istiod does not create its namespace.
        admin.ok(&["create", "namespace", "istio-system"]);
        let http = format!("127.0.0.1:{}", free_port());
        let xds = format!("127.0.0.1:{}", free_port());
        let monitoring = format!("127.0.0.1:{}", free_port());
        let ctrlz = free_port();
        let log_path = plane.dir().join("istiod.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let child = Command::new(realkube::istiod())
            .arg("discovery")
            .arg(format!("--kubeconfig={}", plane.kubeconfig().display()))
            .args([
                "--domain=cluster.local",
                "--secureGRPCAddr=",
                "--httpsAddr=",
            ])
            .arg(format!("--httpAddr={http}"))
            .arg(format!("--grpcAddr={xds}"))
            .arg(format!("--monitoringAddr={monitoring}"))
            .args([
                "--ctrlz_address=127.0.0.1",
                &format!("--ctrlz_port={ctrlz}"),
            ])
            .env("POD_NAMESPACE", "istio-system")
            .env("REVISION", "default")
            // Empty names: istiod patches no webhook configuration.
            .env("INJECTION_WEBHOOK_CONFIG_NAME", "")
            .env("VALIDATION_WEBHOOK_CONFIG_NAME", "")
            .env("PILOT_ENABLE_GATEWAY_API_DEPLOYMENT_CONTROLLER", "false")
            .env("PILOT_ENABLE_AMBIENT", "true")
            .env("REALKUBE_DIE_WITH_PARENT", "1")
            // Its mesh config and injection templates are looked up relative to it (absent:
            // defaults).
            .current_dir(plane.dir())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("istiod starts");
        let mut proc = Proc(child);
        let took = consumers::wait_healthy("istiod", &mut proc, &http, "/ready", &log_path, START);
        eprintln!(
            "istiod ready in {:.1} s (log: {})",
            took.as_secs_f64(),
            log_path.display()
        );
        Istiod {
            xds,
            http,
            _proc: proc,
        }
    })
}

/// A sidecar connected to istiod (`istiod eds`, Istio's `pkg/adsc`), which prints the endpoints
/// of `clusters` after every EDS response.
fn sidecar(istiod: &Istiod, namespace: &str, clusters: &[String]) -> Watch {
    let mut command = Command::new(realkube::istiod());
    command.args(["eds", "--xds", &istiod.xds, "--namespace", namespace]);
    for cluster in clusters {
        command.args(["--cluster", cluster]);
    }
    let log = consumers::plane()
        .dir()
        .join(format!("istiod-eds-{namespace}.log"));
    Watch::spawn("the sidecar's EDS", command, &log, |view, line| {
        // Each line is the whole state of the clusters istiod has sent.
        view.clear();
        for (name, endpoints) in line["clusters"].as_object().into_iter().flatten() {
            let set = view.entry(name.clone()).or_default();
            for e in endpoints.as_array().into_iter().flatten() {
                set.insert(format!(
                    "{} {} {}",
                    e["address"].as_str().unwrap(),
                    e["port"],
                    e["health"].as_str().unwrap()
                ));
            }
        }
    })
}

/// The outbound cluster of a Service port, as sidecars name it.
fn cluster_name(service: &str, namespace: &str, port: u16) -> String {
    format!("outbound|{port}||{service}.{namespace}.svc.cluster.local")
}

#[test]
fn istio_sidecar_eds_lists_exactly_each_ports_members() {
    if !kubectl_available() {
        return;
    }
    let istiod = istiod();
    let cluster = Cluster::on(consumers::plane(), "istio-sidecar");
    let ns = cluster.namespace.clone();
    let ips = consumers::canonical_dual_stack(&cluster, 21);
    let started = Instant::now();
    let _operator = cluster.operator();
    let services = ["db", "db-pp"];
    let clusters: Vec<String> = services
        .iter()
        .flat_map(|s| [8080, 8443].map(|p| cluster_name(s, &ns, p)))
        .collect();
    let mut sidecar = sidecar(istiod, &ns, &clusters);
    let expected = |members: &[((u16, &str), &[&str])]| -> View {
        consumers::expected(
            "HEALTHY",
            &services,
            |s, (port, _)| cluster_name(s, &ns, port),
            &ips,
            members,
        )
    };
    let (http, https) = ((8080, "http"), (8443, "https"));
    let want = expected(&[(http, &["a", "b", "c"]), (https, &["b", "c", "d"])]);
    let first = sidecar.wait_for(&want, started, WAIT, "canonical example");
    eprintln!(
        "istio sidecar: canonical example, both shapes, dual stack in EDS {:.2} s after the operator started:\n{:#?}",
        first.as_secs_f64(),
        sidecar.view()
    );
    consumers::assert_both_shapes(&cluster);

    // c is no longer ready: portmapper stops publishing it, so no sidecar gets it (portmapper
    // writes `ready: false` only for terminating pods, never the not-ready endpoint Istio would
    // send as UNHEALTHY).
    let since = Instant::now();
    set_status(&cluster, "c", &ips["c"], false);
    let want = expected(&[(http, &["a", "b"]), (https, &["b", "d"])]);
    let not_ready = sidecar.wait_for(&want, since, FOLLOW, "c not ready");

    // a starts serving https too.
    let since = Instant::now();
    cluster.ok(&[
        "annotate",
        "pod",
        "a",
        "example.com/ports=http,https",
        "--overwrite",
    ]);
    let want = expected(&[(http, &["a", "b"]), (https, &["a", "b", "d"])]);
    let joined = sidecar.wait_for(&want, since, FOLLOW, "a joins https");

    // b is being deleted (no kubelet finishes the delete, so it stays Terminating, as during its
    // grace period): portmapper publishes it draining (serving, not ready, terminating) and
    // istiod drops a terminating endpoint from EDS.
    let since = Instant::now();
    cluster.ok(&["delete", "pod", "b", "--wait=false"]);
    let want = expected(&[(http, &["a"]), (https, &["a", "d"])]);
    let terminating = sidecar.wait_for(&want, since, FOLLOW, "b terminating");
    consumers::assert_draining(&cluster, &services, "b");

    // A live switch of `db` to per-port slices moves every pod to new slices: the view keeps
    // every member throughout (watched for a while after the switch) and ends the same.
    let switched = consumers::switch_db_to_per_port(&cluster);
    sidecar.observe(&want, Duration::from_secs(3), "db switched to PerPort");
    eprintln!(
        "istio sidecar: EDS followed c not ready in {:.2} s, a joining https in {:.2} s, b terminating in {:.2} s (from the API write); db's switch to per-port slices took {:.2} s and lost no member",
        not_ready.as_secs_f64(),
        joined.as_secs_f64(),
        terminating.as_secs_f64(),
        switched.as_secs_f64()
    );
}

/// Per workload name in `namespace`: the ports (servicePort) ambient gives it for `host`.
fn ambient_ports(istiod: &Istiod, namespace: &str, host: &str) -> BTreeMap<String, BTreeSet<u64>> {
    let (code, body) = http_get(&istiod.http, "/debug/ambientz");
    assert_eq!(code, 200, "/debug/ambientz: {body}");
    let ambientz: Value = serde_json::from_str(&body).expect("ambientz is JSON");
    let mut out = BTreeMap::new();
    for workload in ambientz["workloads"].as_array().into_iter().flatten() {
        if workload["namespace"] != namespace {
            continue;
        }
        let ports = workload["services"][host]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["servicePort"].as_u64())
            .collect();
        out.insert(workload["name"].as_str().unwrap().to_string(), ports);
    }
    out
}

/// Pods (by `targetRef.name`) each port of `service` is published on, from its slices.
fn published(cluster: &Cluster, service: &str) -> BTreeMap<u64, BTreeSet<String>> {
    let out = cluster.ok(&[
        "get",
        "endpointslices",
        "-l",
        &format!("kubernetes.io/service-name={service}"),
        "-o",
        "json",
    ]);
    let list: Value = serde_json::from_str(&out).unwrap();
    let mut members: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for slice in list["items"].as_array().unwrap() {
        for port in slice["ports"].as_array().into_iter().flatten() {
            let set = members.entry(port["port"].as_u64().unwrap()).or_default();
            for endpoint in slice["endpoints"].as_array().into_iter().flatten() {
                set.insert(endpoint["targetRef"]["name"].as_str().unwrap().to_string());
            }
        }
    }
    members
}

#[test]
fn istio_ambient_gives_a_pod_every_port_and_the_caveat_says_so() {
    if !kubectl_available() {
        return;
    }
    let istiod = istiod();
    let cluster = Cluster::on(consumers::plane(), "istio-ambient");
    let ns = cluster.namespace.clone();
    let pods = CANONICAL;
    let mut items = vec![consumers::service("db", false)];
    // What the Istio CNI sets once it redirects a pod's traffic (no CNI runs here).
    let enrolled = [("ambient.istio.io/redirection", "enabled")];
    items.extend(
        pods.iter()
            .map(|(name, ports)| consumers::pod(name, ports, &enrolled)),
    );
    apply(
        &cluster,
        &json!({"apiVersion": "v1", "kind": "List", "items": items}),
    );
    for (i, (name, _)) in pods.iter().enumerate() {
        set_status(&cluster, name, &[format!("10.244.22.{}", i + 1)], true);
    }
    apply(&cluster, &portmapping("db", json!({})));
    let _operator = cluster.operator();
    let port_names = BTreeMap::from([(8080, "http"), (8443, "https")]);
    let want_published = BTreeMap::from([
        (8080, BTreeSet::from(["a", "b", "c"].map(String::from))),
        (8443, BTreeSet::from(["b", "c", "d"].map(String::from))),
    ]);
    let deadline = Instant::now() + WAIT;
    while published(&cluster, "db") != want_published {
        assert!(
            Instant::now() < deadline,
            "portmapper did not publish the canonical example: {:?}\n{}",
            published(&cluster, "db"),
            cluster.operator_log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Istio's view: every pod named in any of db's slices is a workload of both of its ports.
    let host = format!("{ns}/db.{ns}.svc.cluster.local");
    let all: BTreeSet<u64> = port_names.keys().copied().collect();
    let want: BTreeMap<String, BTreeSet<u64>> = pods
        .iter()
        .map(|(name, _)| ((*name).to_string(), all.clone()))
        .collect();
    let since = Instant::now();
    let mut got = ambient_ports(istiod, &ns, &host);
    while got != want {
        assert!(
            since.elapsed() < WAIT,
            "ambient does not give every pod every port of {host}:\n want {want:?}\n got {got:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
        got = ambient_ports(istiod, &ns, &host);
    }

    // The widening, computed from istiod's workloads and portmapper's slices: per port, the
    // pods ambient sends it to that are not published on it.
    let widened: Vec<String> = port_names
        .iter()
        .filter_map(|(number, name)| {
            let extra: Vec<&str> = got
                .iter()
                .filter(|(pod, ports)| {
                    ports.contains(number) && !want_published[number].contains(*pod)
                })
                .map(|(pod, _)| pod.as_str())
                .collect();
            (!extra.is_empty()).then(|| {
                format!(
                    "port {name} ({} published) also reaches {}",
                    want_published[number].len(),
                    extra.join(", ")
                )
            })
        })
        .collect();
    assert_eq!(
        widened,
        [
            "port http (3 published) also reaches d",
            "port https (3 published) also reaches a"
        ]
    );

    // In the same run, portmapper's caveat names exactly that widening.
    let caveat = cluster.eventually(
        &[
            "get",
            "pm",
            "db",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"ConsumerCaveat\")].status} {.status.conditions[?(@.type==\"ConsumerCaveat\")].reason} {.status.conditions[?(@.type==\"ConsumerCaveat\")].message}",
        ],
        FOLLOW,
        |out| out.starts_with("True IstioAmbient "),
    );
    assert!(
        caveat.contains(&format!(": {} (see docs/consumers.md", widened.join("; "))),
        "the caveat does not name the widening istiod shows ({widened:?}): {caveat}"
    );
    let events = cluster.eventually(
        &[
            "get",
            "events",
            "--field-selector",
            "reason=IstioAmbient",
            "-o",
            "jsonpath={range .items[*]}{.type} {.involvedObject.kind}/{.involvedObject.name}\n{end}",
        ],
        FOLLOW,
        |out| !out.is_empty(),
    );
    assert_eq!(events.trim(), "Warning PortMapping/db");
    eprintln!("istio ambient: /debug/ambientz gives a, b, c, d both ports; caveat: {caveat}");
}
