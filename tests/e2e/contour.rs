//! A Gateway API / Ingress implementation's own code over the slices portmapper publishes:
//! Contour (`contour serve`, from `github.com/projectcontour/contour` v1.33.8, built by `make
//! realkube` from `tools/contour`) runs out of cluster against the consumers' control plane
//! and programs an Ingress whose rules send `/h` to port `http` and `/s` to port `https` of the
//! Service. Contour's own xDS client (`contour cli eds`) reads the ClusterLoadAssignment of each
//! port's cluster (`<ns>/<service>/<port name>`): exactly that port's members, on both slice
//! shapes and both IP families; a pod that is not ready is absent, a terminating one (published
//! serving, not ready) is dropped, and membership changes are followed.

use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_support::realkube;

use crate::consumers::{self, FOLLOW, View, WAIT, Watch, apply, free_port, set_status};
use crate::env::{Cluster, Proc, kubectl_available};

/// Contour's start (`/healthz` answers 200): a correctness bound.
const START: Duration = Duration::from_secs(120);

/// `contour serve` on the consumers' control plane: its xDS address.
struct Contour {
    xds: String,
    _proc: Proc,
}

/// The Contour of this test binary, started by the first test that asks. A static is never
/// dropped, so Contour runs under a shell that kills it when its stdin, which this process
/// holds, closes: when the test binary exits.
fn contour() -> &'static Contour {
    static CONTOUR: OnceLock<Contour> = OnceLock::new();
    CONTOUR.get_or_init(|| {
        let plane = consumers::plane();
        let admin = Cluster::on(plane, "contour-admin");
        let crds = realkube::contour_crds();
        admin.ok(&["apply", "--server-side", "-f", crds.to_str().unwrap()]);
        // Its informers fail at once on a kind the API server does not serve yet.
        admin.ok(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "-f",
            crds.to_str().unwrap(),
        ]);
        let xds_port = free_port();
        let health = format!("127.0.0.1:{}", free_port());
        let (_, health_port) = health.split_once(':').unwrap();
        let log_path = plane.dir().join("contour.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let child = Command::new("sh")
            .args([
                "-c",
                // A background job's stdin is /dev/null: keep ours on fd 3 for it.
                "exec 3<&0; \"$0\" \"$@\" </dev/null & pid=$!; { read _ <&3; kill $pid; } & wait $pid",
            ])
            .arg(realkube::contour())
            .arg("serve")
            .arg(format!("--kubeconfig={}", plane.kubeconfig().display()))
            .args(["--insecure", "--disable-leader-election"])
            .args(["--xds-address=127.0.0.1", &format!("--xds-port={xds_port}")])
            .args([
                "--health-address=127.0.0.1",
                &format!("--health-port={health_port}"),
            ])
            .args([
                "--http-address=127.0.0.1",
                &format!("--http-port={}", free_port()),
            ])
            .args([
                "--debug-http-address=127.0.0.1",
                &format!("--debug-http-port={}", free_port()),
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("contour starts");
        let mut proc = Proc(child);
        let took =
            consumers::wait_healthy("contour", &mut proc, &health, "/healthz", &log_path, START);
        eprintln!(
            "contour healthy in {:.1} s (log: {})",
            took.as_secs_f64(),
            log_path.display()
        );
        Contour {
            xds: format!("127.0.0.1:{xds_port}"),
            _proc: proc,
        }
    })
}

/// Contour's xDS client (`contour cli eds`), which prints every EDS response as JSON.
fn eds_client(contour: &Contour, namespace: &str, clusters: &[String]) -> Watch {
    let mut command = Command::new(realkube::contour());
    command.args(["cli", "eds", "--contour", &contour.xds]);
    command.args(clusters);
    let log = consumers::plane()
        .dir()
        .join(format!("contour-eds-{namespace}.log"));
    Watch::spawn("Contour's EDS", command, &log, |view, value| {
        // The client prints its requests too; responses carry resources, each a whole
        // ClusterLoadAssignment.
        for cla in value["resources"].as_array().into_iter().flatten() {
            let Some(name) = cla["cluster_name"].as_str() else {
                continue;
            };
            let set = view.entry(name.to_string()).or_default();
            set.clear();
            for locality in cla["endpoints"].as_array().into_iter().flatten() {
                for lb in locality["lb_endpoints"].as_array().into_iter().flatten() {
                    let socket = &lb["endpoint"]["address"]["socket_address"];
                    set.insert(format!(
                        "{} {} {}",
                        socket["address"].as_str().unwrap(),
                        socket["port_value"],
                        // protojson leaves out the default, UNKNOWN (Envoy balances to it).
                        lb["health_status"].as_str().unwrap_or("UNKNOWN")
                    ));
                }
            }
        }
    })
}

fn ingress() -> Value {
    let path = |path: &str, service: &str, port: &str| {
        json!({"path": path, "pathType": "Prefix",
            "backend": {"service": {"name": service, "port": {"name": port}}}})
    };
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "db"},
    "spec": {"rules": [{"host": "db.example.com", "http": {"paths": [
        path("/h", "db", "http"), path("/s", "db", "https"),
        path("/pp-h", "db-pp", "http"), path("/pp-s", "db-pp", "https"),
    ]}}]}})
}

#[test]
fn contour_eds_lists_exactly_each_ports_members() {
    if !kubectl_available() {
        return;
    }
    let contour = contour();
    let cluster = Cluster::on(consumers::plane(), "contour");
    let ns = cluster.namespace.clone();
    let ips = consumers::canonical_dual_stack(&cluster, 23);
    apply(&cluster, &ingress());
    let started = Instant::now();
    let _operator = cluster.operator();
    let services = ["db", "db-pp"];
    let cluster_name = |service: &str, port: &str| format!("{ns}/{service}/{port}");
    let clusters: Vec<String> = services
        .iter()
        .flat_map(|s| ["http", "https"].map(|p| cluster_name(s, p)))
        .collect();
    let mut eds = eds_client(contour, &ns, &clusters);
    let expected = |members: &[((u16, &str), &[&str])]| -> View {
        consumers::expected(
            "UNKNOWN",
            &services,
            |s, (_, name)| cluster_name(s, name),
            &ips,
            members,
        )
    };
    let (http, https) = ((8080, "http"), (8443, "https"));
    let want = expected(&[(http, &["a", "b", "c"]), (https, &["b", "c", "d"])]);
    let first = eds.wait_for(&want, started, WAIT, "canonical example");
    eprintln!(
        "contour: canonical example, both shapes, dual stack in EDS {:.2} s after the operator started:\n{:#?}",
        first.as_secs_f64(),
        eds.view()
    );
    consumers::assert_both_shapes(&cluster);

    let since = Instant::now();
    set_status(&cluster, "c", &ips["c"], false);
    let want = expected(&[(http, &["a", "b"]), (https, &["b", "d"])]);
    let not_ready = eds.wait_for(&want, since, FOLLOW, "c not ready");

    let since = Instant::now();
    cluster.ok(&[
        "annotate",
        "pod",
        "a",
        "example.com/ports=http,https",
        "--overwrite",
    ]);
    let want = expected(&[(http, &["a", "b"]), (https, &["a", "b", "d"])]);
    let joined = eds.wait_for(&want, since, FOLLOW, "a joins https");

    // Published draining (serving, not ready, terminating): Contour skips `ready: false`.
    let since = Instant::now();
    cluster.ok(&["delete", "pod", "b", "--wait=false"]);
    let want = expected(&[(http, &["a"]), (https, &["a", "d"])]);
    let terminating = eds.wait_for(&want, since, FOLLOW, "b terminating");
    consumers::assert_draining(&cluster, &services, "b");

    // A live switch of `db` to per-port slices moves every pod to new slices: the view keeps
    // every member throughout (watched for a while after the switch) and ends the same.
    let switched = consumers::switch_db_to_per_port(&cluster);
    eds.observe(&want, Duration::from_secs(3), "db switched to PerPort");
    eprintln!(
        "contour: EDS followed c not ready in {:.2} s, a joining https in {:.2} s, b terminating in {:.2} s (from the API write); db's switch to per-port slices took {:.2} s and lost no member",
        not_ready.as_secs_f64(),
        joined.as_secs_f64(),
        terminating.as_secs_f64(),
        switched.as_secs_f64()
    );
}
