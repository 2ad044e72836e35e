//! The operator's own network checks (`httpGet`, `tcpSocket`, `grpc`) against real containers:
//! podserver (tools/realkube/podserver: an HTTP `/ready`, a TCP port and grpc-go's health
//! server, each switched by a request to its control port) runs in pods on the real node, and
//! the operator probes the pod IPs over the node's CNI bridge. The kubelet keeps the pods Ready
//! throughout (no readiness probe, no gate): each port's membership follows only what the
//! container answers the operator.

#[test]
fn network_checks_follow_real_containers() {
    super::on_a_real_node(
        "the operator's network checks on the real node",
        "node::probes::inner::network_checks_on_a_real_node",
    );
}

mod inner {
    use std::collections::BTreeSet;
    use std::net::SocketAddr;
    use std::time::Instant;

    use serde_json::{Value, json};
    use test_support::in_sandbox;

    use super::super::ENV;
    use super::super::inner::{
        NODE, SETTLE, SliceWatch, Snapshot, World, apply, http, is_true, pods, ready,
    };

    const PORTS: [&str; 3] = ["http", "tcp", "grpc"];

    /// A pod running podserver, no readiness probe: the kubelet reports it Ready once it runs.
    fn pod(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"example.com/group": "web"}},
            "spec": {"nodeName": NODE, "automountServiceAccountToken": false,
                "enableServiceLinks": false, "terminationGracePeriodSeconds": 2,
                "containers": [{"name": "podserver", "image": "portmapper.test/podserver:1",
                    "imagePullPolicy": "Never",
                    "ports": [{"name": "http", "containerPort": 8080},
                              {"name": "tcp", "containerPort": 8081},
                              {"name": "grpc", "containerPort": 9090},
                              {"name": "control", "containerPort": 8082}]}]}})
    }

    /// Every port's ready members are exactly `expected` (port → pod IPs).
    fn members_are(snapshot: &Snapshot, expected: &[(&str, &BTreeSet<String>)]) -> bool {
        expected
            .iter()
            .all(|(port, ips)| ready(snapshot, port) == **ips)
    }

    /// Each check switched off in pod a's container, then on again: the port leaves and comes
    /// back, the other ports keep both pods throughout, and the kubelet reports a Ready all
    /// along (the operator's probe, not the kubelet, moved it).
    #[test]
    #[ignore = "run inside a network namespace by the outer test"]
    fn network_checks_on_a_real_node() {
        if !in_sandbox(ENV) {
            return;
        }
        let began = Instant::now();
        let Some(world) = World::start_with_podserver("network-checks", &[], true) else {
            return;
        };
        let cluster = &world.cluster;
        apply(
            cluster,
            &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                "spec": {"ports": [{"name": "http", "port": 80, "targetPort": "http"},
                                   {"name": "tcp", "port": 81, "targetPort": "tcp"},
                                   {"name": "grpc", "port": 90, "targetPort": "grpc"}]}}),
        );
        // Network checks only; probes every second, one result flips (the defaults would
        // make each transition take 10 to 30 s).
        apply(
            cluster,
            &json!({"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
                "metadata": {"name": "web"},
                "spec": {"serviceRef": {"name": "web"}, "pods": {"key": "example.com/group"},
                    "probe": {"periodSeconds": 1, "failureThreshold": 1, "timeoutSeconds": 1},
                    "ports": [
                        {"name": "http", "checks": [{"httpGet": {"path": "/ready"}}]},
                        {"name": "tcp", "checks": [{"tcpSocket": {}}]},
                        {"name": "grpc", "checks": [{"grpc": {"service": "portmapper.test.Web"}}]}]}}),
        );
        for name in ["a", "b"] {
            apply(cluster, &pod(name));
        }
        let watch = SliceWatch::start(cluster);
        let ip = |name: &str| -> String {
            pods(cluster, "example.com/group=web")
                .iter()
                .find(|p| p["metadata"]["name"] == name)
                .and_then(|p| p["status"]["podIP"].as_str().map(str::to_string))
                .unwrap_or_default()
        };
        let started = Instant::now();
        watch.wait(SETTLE, "both pods members of every port", |s| {
            PORTS.iter().all(|port| ready(s, port).len() == 2)
        });
        eprintln!(
            "network checks: 2 podserver pods members of http, tcp and grpc {:.1} s after they \
             were created",
            started.elapsed().as_secs_f64()
        );
        let (a, b) = (ip("a"), ip("b"));
        let both: BTreeSet<String> = [a.clone(), b.clone()].into();
        let only_b: BTreeSet<String> = [b.clone()].into();
        let control: SocketAddr = format!("{a}:8082").parse().unwrap();
        let switch = |path: &str| {
            let answer = http(control, path).expect("podserver's control port answers");
            assert_eq!(answer.0, 200, "{path}: {answer:?}");
        };
        let mut figures = vec![];
        for (port, off, on) in [
            ("http", "/http/503", "/http/200"),
            ("tcp", "/tcp/closed", "/tcp/open"),
            ("grpc", "/grpc/NOT_SERVING", "/grpc/SERVING"),
        ] {
            let expected = |switched: bool| -> Vec<(&str, &BTreeSet<String>)> {
                PORTS
                    .iter()
                    .map(|p| {
                        (
                            *p,
                            if *p == port && switched {
                                &only_b
                            } else {
                                &both
                            },
                        )
                    })
                    .collect()
            };
            let flipped = Instant::now();
            switch(off);
            watch.wait(SETTLE, &format!("{port}: a leaves after {off}"), |s| {
                members_are(s, &expected(true))
            });
            let left = flipped.elapsed();
            let restored = Instant::now();
            switch(on);
            watch.wait(SETTLE, &format!("{port}: a is back after {on}"), |s| {
                members_are(s, &expected(false))
            });
            let back = restored.elapsed();
            // Every state the slices passed through: only `port` ever lost a, and b never left.
            let history: Vec<Vec<(&str, BTreeSet<String>)>> = watch
                .since(flipped)
                .iter()
                .map(|(_, s)| PORTS.iter().map(|p| (*p, ready(s, p))).collect())
                .collect();
            for state in &history {
                for (p, members) in state {
                    let allowed = if *p == port { &only_b } else { &both };
                    assert!(
                        *members == both || members == allowed,
                        "{p} had {members:?} while {port} was switched ({off}, then {on}); a is \
                         {a}; the ready members in turn: {history:#?}"
                    );
                }
            }
            figures.push(format!(
                "{port}: left {:.1} s after {off}, back {:.1} s after {on}",
                left.as_secs_f64(),
                back.as_secs_f64()
            ));
        }
        let a_pod = pods(cluster, "example.com/group=web")
            .into_iter()
            .find(|p| p["metadata"]["name"] == "a")
            .expect("pod a");
        assert!(
            is_true(&a_pod, "Ready"),
            "the kubelet reported a not Ready: {}",
            a_pod["status"]
        );
        assert_eq!(
            a_pod["status"]["containerStatuses"][0]["restartCount"], 0,
            "a's container restarted"
        );
        eprintln!("network checks: {}", figures.join("; "));
        drop(watch);
        world.finish();
        eprintln!(
            "network checks test: {:.1} s",
            began.elapsed().as_secs_f64()
        );
    }
}
