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
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_support::realkube::{self, CONTROLLERS, ControlPlane};

use crate::env::{Cluster, Proc, kubectl_available};

/// istiod's start (informers synced, `/ready` answers 200): a correctness bound, wide for a
/// loaded 2-core machine.
const START: Duration = Duration::from_secs(180);
/// How long istiod's view may take to show what the operator first publishes (the operator's
/// start included): a correctness bound.
const WAIT: Duration = Duration::from_secs(90);
/// How long istiod's view may take to follow a change written through the API: a correctness
/// bound, wide for a loaded 2-core machine; the time taken is printed.
const FOLLOW: Duration = Duration::from_secs(30);

/// The sidecar's view: cluster name → "address port HEALTH" of each endpoint.
type View = BTreeMap<String, BTreeSet<String>>;

/// istiod on this file's control plane.
struct Istiod {
    /// Plaintext xDS (`--grpcAddr`).
    xds: String,
    /// Debug and readiness (`--httpAddr`).
    http: String,
    plane: &'static ControlPlane,
    _proc: Proc,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

/// `GET path` on `addr`: the status code and the body.
fn http_get(addr: &str, path: &str) -> (u16, String) {
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return (0, String::new());
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    if stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .is_err()
    {
        return (0, String::new());
    }
    let mut response = String::new();
    if stream.read_to_string(&mut response).is_err() {
        return (0, String::new());
    }
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, body.to_string())
}

/// The istiod of this test binary, started by the first test that asks, on a control plane of
/// its own; it exits with the test binary (`REALKUBE_DIE_WITH_PARENT`).
fn istiod() -> &'static Istiod {
    static PLANE: OnceLock<ControlPlane> = OnceLock::new();
    static ISTIOD: OnceLock<Istiod> = OnceLock::new();
    ISTIOD.get_or_init(|| {
        let plane = PLANE.get_or_init(|| ControlPlane::start(CONTROLLERS));
        let admin = Cluster::on(plane, "istio-admin");
        // Its leader-election leases and CA secret; istiod does not create its namespace.
        admin.ok(&["create", "namespace", "istio-system"]);
        let http = format!("127.0.0.1:{}", free_port());
        let xds = format!("127.0.0.1:{}", free_port());
        let monitoring = format!("127.0.0.1:{}", free_port());
        let ctrlz = free_port();
        let log_path = plane.dir().join("istiod.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let started = Instant::now();
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
        loop {
            if http_get(&http, "/ready").0 == 200 {
                break;
            }
            let exited = proc.0.try_wait().unwrap();
            if exited.is_some() || started.elapsed() > START {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(60).collect();
                panic!(
                    "istiod not ready after {:?} (exit: {exited:?}); its log ends:\n{}",
                    started.elapsed(),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        eprintln!(
            "istiod ready in {:.1} s (log: {})",
            started.elapsed().as_secs_f64(),
            log_path.display()
        );
        Istiod {
            xds,
            http,
            plane,
            _proc: proc,
        }
    })
}

/// A sidecar connected to istiod (`istiod eds`, Istio's `pkg/adsc`), printing the endpoints of
/// some clusters after every EDS response.
struct Sidecar {
    lines: Receiver<Value>,
    last: Value,
    _proc: Proc,
}

impl Sidecar {
    fn connect(istiod: &Istiod, namespace: &str, clusters: &[String]) -> Self {
        let mut command = Command::new(realkube::istiod());
        command
            .args(["eds", "--xds", &istiod.xds, "--namespace", namespace])
            .env("REALKUBE_DIE_WITH_PARENT", "1");
        for cluster in clusters {
            command.args(["--cluster", cluster]);
        }
        let log = std::fs::File::create(
            istiod
                .plane
                .dir()
                .join(format!("istiod-eds-{namespace}.log")),
        )
        .unwrap();
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("istiod eds starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let value: Value = serde_json::from_str(&line).expect("istiod eds prints JSON");
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        Self {
            lines,
            last: Value::Null,
            _proc: Proc(child),
        }
    }

    /// The clusters' endpoints in the last EDS state received.
    fn view(&self) -> View {
        let mut view = View::new();
        let Some(clusters) = self.last["clusters"].as_object() else {
            return view;
        };
        for (name, endpoints) in clusters {
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
        view
    }

    /// Waits until the sidecar's view is `want`; the time since `since`.
    fn wait_for(&mut self, want: &View, since: Instant, timeout: Duration, what: &str) -> Duration {
        loop {
            if self.view() == *want {
                return since.elapsed();
            }
            let Some(left) = timeout.checked_sub(since.elapsed()) else {
                panic!(
                    "{what}: the sidecar's EDS is not what portmapper published after {timeout:?}\n\
                     want: {want:#?}\n got: {:#?}",
                    self.view()
                );
            };
            match self.lines.recv_timeout(left) {
                Ok(line) => self.last = line,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => panic!("{what}: istiod eds exited"),
            }
        }
    }
}

/// The outbound cluster of a Service port, as sidecars name it.
fn cluster_name(service: &str, namespace: &str, port: u16) -> String {
    format!("outbound|{port}||{service}.{namespace}.svc.cluster.local")
}

fn pod(name: &str, ports: &str, ambient: bool) -> Value {
    let mut annotations = json!({"example.com/ports": ports});
    if ambient {
        // What the Istio CNI sets once it redirects the pod's traffic (no CNI runs here).
        annotations["ambient.istio.io/redirection"] = json!("enabled");
    }
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"example.com/pool": "db"}, "annotations": annotations},
        // Bound to a node (none runs): a graceful delete then leaves the pod Terminating until
        // someone sends the final delete, as a kubelet would during the grace period.
        "spec": {"nodeName": "node-istio", "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}})
}

/// Plays kubelet: the pod's IPs, Running, and its Ready condition.
fn set_status(cluster: &Cluster, name: &str, ips: &[String], ready: bool) {
    let ready = if ready { "True" } else { "False" };
    let pod_ips: Vec<Value> = ips.iter().map(|ip| json!({"ip": ip})).collect();
    let status = json!({"status": {"phase": "Running", "podIP": ips[0], "podIPs": pod_ips,
        "conditions": [{"type": "Ready", "status": ready}, {"type": "ContainersReady", "status": ready}]}});
    cluster.ok(&[
        "patch",
        "pod",
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
        &status.to_string(),
    ]);
}

fn apply(cluster: &Cluster, object: &Value) {
    let out = cluster.kubectl_stdin(&["apply", "-f", "-"], object.to_string().as_bytes());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn service(name: &str, dual_stack: bool) -> Value {
    let mut spec =
        json!({"ports": [{"name": "http", "port": 8080}, {"name": "https", "port": 8443}]});
    if dual_stack {
        spec["ipFamilyPolicy"] = json!("RequireDualStack");
    }
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec})
}

fn portmapping(service: &str, spec: Value) -> Value {
    let mut object = json!({"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
        "metadata": {"name": service},
        "spec": {"serviceRef": {"name": service}, "pods": {"key": "example.com/pool", "value": "db"},
                 "defaultChecks": [{"podReady": {}}, {"portNames": {"key": "example.com/ports"}}]}});
    for (key, value) in spec.as_object().unwrap() {
        object["spec"][key] = value.clone();
    }
    object
}

/// Ports of each slice of a Service: one "ADDRESSTYPE port,port," line per slice, sorted.
fn slice_ports(cluster: &Cluster, service: &str) -> Vec<String> {
    let out = cluster.ok(&[
        "get",
        "endpointslices",
        "-l",
        &format!("kubernetes.io/service-name={service}"),
        "-o",
        "jsonpath={range .items[*]}{.addressType} {range .ports[*]}{.name},{end}\n{end}",
    ]);
    let mut lines: Vec<String> = out.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

/// The sidecar's expected view of `services`: each port's members, every address of each,
/// healthy.
fn expected(
    namespace: &str,
    services: &[&str],
    ips: &BTreeMap<&str, Vec<String>>,
    members: &[(u16, &[&str])],
) -> View {
    let mut view = View::new();
    for service in services {
        for (port, pods) in members {
            let set = view
                .entry(cluster_name(service, namespace, *port))
                .or_default();
            for pod in *pods {
                for ip in &ips[pod] {
                    set.insert(format!("{ip} {port} HEALTHY"));
                }
            }
        }
    }
    view
}

#[test]
fn istio_sidecar_eds_lists_exactly_each_ports_members() {
    if !kubectl_available() {
        return;
    }
    let istiod = istiod();
    let cluster = Cluster::on(istiod.plane, "istio-sidecar");
    let ns = cluster.namespace.clone();
    // The canonical example, dual stack: http → a, b, c; https → b, c, d.
    let pods = [
        ("a", "http"),
        ("b", "http,https"),
        ("c", "http,https"),
        ("d", "https"),
    ];
    let ips: BTreeMap<&str, Vec<String>> = pods
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            (
                *name,
                vec![
                    format!("10.244.21.{}", i + 1),
                    format!("fd00:10:244::21:{}", i + 1),
                ],
            )
        })
        .collect();
    // `db` publishes port-set slices (the default), `db-pp` one slice set per port: the same
    // pool, so the same members.
    let mut items = vec![service("db", true), service("db-pp", true)];
    items.extend(pods.iter().map(|(name, ports)| pod(name, ports, false)));
    apply(
        &cluster,
        &json!({"apiVersion": "v1", "kind": "List", "items": items}),
    );
    for (name, _) in pods {
        set_status(&cluster, name, &ips[name], true);
    }
    apply(&cluster, &portmapping("db", json!({})));
    apply(
        &cluster,
        &portmapping("db-pp", json!({"sliceGrouping": "PerPort"})),
    );
    let started = Instant::now();
    let _operator = cluster.operator();
    let services = ["db", "db-pp"];
    let clusters: Vec<String> = services
        .iter()
        .flat_map(|s| [8080, 8443].map(|p| cluster_name(s, &ns, p)))
        .collect();
    let mut sidecar = Sidecar::connect(istiod, &ns, &clusters);
    let want = expected(
        &ns,
        &services,
        &ips,
        &[(8080, &["a", "b", "c"]), (8443, &["b", "c", "d"])],
    );
    let first = sidecar.wait_for(&want, started, WAIT, "canonical example");
    eprintln!(
        "istio sidecar: canonical example, both shapes, dual stack in EDS {:.2} s after the operator started:\n{:#?}",
        first.as_secs_f64(),
        sidecar.view()
    );
    // Both shapes were exercised: `db` has a slice listing both ports per family, `db-pp` none.
    assert_eq!(
        slice_ports(&cluster, "db"),
        [
            "IPv4 http,",
            "IPv4 http,https,",
            "IPv4 https,",
            "IPv6 http,",
            "IPv6 http,https,",
            "IPv6 https,"
        ],
        "db's slices are not port sets"
    );
    assert_eq!(
        slice_ports(&cluster, "db-pp"),
        ["IPv4 http,", "IPv4 https,", "IPv6 http,", "IPv6 https,"],
        "db-pp's slices are not per port"
    );

    // c is no longer ready: portmapper stops publishing it, so no sidecar gets it (portmapper
    // writes `ready: false` only for terminating pods, never the not-ready endpoint Istio would
    // send as UNHEALTHY).
    let since = Instant::now();
    set_status(&cluster, "c", &ips["c"], false);
    let want = expected(
        &ns,
        &services,
        &ips,
        &[(8080, &["a", "b"]), (8443, &["b", "d"])],
    );
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
    let want = expected(
        &ns,
        &services,
        &ips,
        &[(8080, &["a", "b"]), (8443, &["a", "b", "d"])],
    );
    let joined = sidecar.wait_for(&want, since, FOLLOW, "a joins https");

    // b is being deleted (no kubelet finishes the delete, so it stays Terminating, as during its
    // grace period): portmapper publishes it draining (serving, not ready, terminating) and
    // istiod drops a terminating endpoint from EDS.
    let since = Instant::now();
    cluster.ok(&["delete", "pod", "b", "--wait=false"]);
    let want = expected(&ns, &services, &ips, &[(8080, &["a"]), (8443, &["a", "d"])]);
    let terminating = sidecar.wait_for(&want, since, FOLLOW, "b terminating");
    for service in services {
        let conditions = cluster.ok(&[
            "get",
            "endpointslices",
            "-l",
            &format!("kubernetes.io/service-name={service}"),
            "-o",
            "jsonpath={range .items[*].endpoints[*]}{.targetRef.name}={.conditions.ready},{.conditions.serving},{.conditions.terminating} {end}",
        ]);
        assert!(
            conditions.contains("b=false,true,true"),
            "{service}: b is not published draining: {conditions}"
        );
    }
    eprintln!(
        "istio sidecar: EDS followed c not ready in {:.2} s, a joining https in {:.2} s, b terminating in {:.2} s (from the API write)",
        not_ready.as_secs_f64(),
        joined.as_secs_f64(),
        terminating.as_secs_f64()
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
    let cluster = Cluster::on(istiod.plane, "istio-ambient");
    let ns = cluster.namespace.clone();
    let pods = [
        ("a", "http"),
        ("b", "http,https"),
        ("c", "http,https"),
        ("d", "https"),
    ];
    let mut items = vec![service("db", false)];
    items.extend(pods.iter().map(|(name, ports)| pod(name, ports, true)));
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
