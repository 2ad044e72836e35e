//! Cluster DNS over portmapper's slices: CoreDNS 1.15 (its kubernetes plugin, built by `make
//! realkube` from `tools/coredns`) answers for Services from the real API server, and `dig`
//! asks it what docs/consumers.md says it answers. For a headless Service: an SRV record per
//! named port, listing only that port's members; an A record listing the ready addresses of
//! every slice, whatever their port (the recipe "SRV records for headless Services"). For a
//! ClusterIP Service: its cluster IP, whatever the slices say.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::env::{Cluster, Proc, kubectl_available};

const WAIT: Duration = Duration::from_secs(30);

/// CoreDNS for `cluster.local` on a free loopback port, reading through `cluster`'s kubeconfig.
fn coredns(cluster: &Cluster, dir: &std::path::Path) -> (Proc, u16) {
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .unwrap();
    let corefile = dir.join("Corefile");
    std::fs::write(
        &corefile,
        format!(
            ".:{port} {{\n  errors\n  kubernetes cluster.local {{\n    kubeconfig {} realkube\n  }}\n}}\n",
            cluster.kubeconfig.display()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("coredns.log")).unwrap();
    let child = Command::new(test_support::realkube::coredns())
        .arg("-conf")
        .arg(&corefile)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("coredns starts");
    (Proc(child), port)
}

/// `dig +short` of one name and type against CoreDNS: the answers, sorted.
fn dig(port: u16, kind: &str, name: &str) -> BTreeSet<String> {
    let out = Command::new("dig")
        .args([
            "+short",
            "+time=1",
            "+tries=1",
            "-p",
            &port.to_string(),
            "@127.0.0.1",
            kind,
            name,
        ])
        .output()
        .expect("dig runs: install Debian's dnsutils (make test does)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with(';') && !l.is_empty())
        .map(str::to_string)
        .collect()
}

fn eventually_dig(port: u16, kind: &str, name: &str, want: &[&str]) {
    let want: BTreeSet<String> = want.iter().map(|s| (*s).to_string()).collect();
    let deadline = Instant::now() + WAIT;
    loop {
        let got = dig(port, kind, name);
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{kind} {name}: want {want:?}, got {got:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn coredns_answers_srv_per_port_and_a_records_over_every_port() {
    if !kubectl_available() {
        return;
    }
    let cluster = Cluster::start("dns");
    if !cluster.plays_kubelet() {
        return;
    }
    let service = |name: &str, headless: bool| {
        let mut spec =
            json!({"ports": [{"name": "http", "port": 8080}, {"name": "https", "port": 8443}]});
        if headless {
            spec["clusterIP"] = json!("None");
        }
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec})
    };
    let pod = |name: &str, ports: &str| {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"example.com/pool": "db"},
                         "annotations": {"example.com/ports": ports}},
            "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}})
    };
    let portmapping = |service: &str| {
        json!({"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
            "metadata": {"name": service},
            "spec": {"serviceRef": {"name": service}, "pods": {"key": "example.com/pool", "value": "db"},
                     "defaultChecks": [{"podReady": {}}, {"portNames": {"key": "example.com/ports"}}]}})
    };
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [
        service("db", true), service("db-vip", false),
        pod("a", "http"), pod("b", "http,https"), pod("c", "https"),
        portmapping("db"), portmapping("db-vip"),
    ]});
    let out = cluster.kubectl_stdin(&["apply", "-f", "-"], list.to_string().as_bytes());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        let ip = format!("10.244.9.{}", i + 1);
        let status = json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": "True"}]}});
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
    let _operator = cluster.operator();
    let dir = crate::env::TempDir::new("dns");
    let (_coredns, port) = coredns(&cluster, &dir.0);
    let zone = format!("{}.svc.cluster.local", cluster.namespace);
    let target = |ip: &str| format!("{}.db.{zone}.", ip.replace('.', "-"));
    eventually_dig(
        port,
        "SRV",
        &format!("_http._tcp.db.{zone}"),
        &[
            &format!("0 50 8080 {}", target("10.244.9.1")),
            &format!("0 50 8080 {}", target("10.244.9.2")),
        ],
    );
    eventually_dig(
        port,
        "SRV",
        &format!("_https._tcp.db.{zone}"),
        &[
            &format!("0 50 8443 {}", target("10.244.9.2")),
            &format!("0 50 8443 {}", target("10.244.9.3")),
        ],
    );
    // The A record is the union: a client resolving it reaches pods that do not serve its port.
    eventually_dig(
        port,
        "A",
        &format!("db.{zone}"),
        &["10.244.9.1", "10.244.9.2", "10.244.9.3"],
    );
    // A ClusterIP Service answers its cluster IP, and its SRV records name the Service.
    let vip = cluster.ok(&["get", "svc", "db-vip", "-o", "jsonpath={.spec.clusterIP}"]);
    eventually_dig(port, "A", &format!("db-vip.{zone}"), &[vip.trim()]);
    eventually_dig(
        port,
        "SRV",
        &format!("_https._tcp.db-vip.{zone}"),
        &[&format!("0 100 8443 db-vip.{zone}.")],
    );
}
