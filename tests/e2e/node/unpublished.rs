//! A gated pod that was never published, on a node that goes NotReady: the node-lifecycle
//! controller only turns a True `Ready` False (`MarkPodsNotReady`), so this pod's conditions stay
//! as the kubelet last wrote them (`Ready=False`, reason `ReadinessGatesNotReady`,
//! `ContainersReady=True`), and nothing on the pod says its node is gone. When its checks then
//! pass (here the kubelet alone is dead; the container answers), the native controller keeps it
//! unready (it reads `Ready`); the operator reads the Node's `Ready` for a gated pod's
//! `podReady`, so it keeps it unpublished and its gate False too (docs/operator.md, "Publication
//! readiness gate"). About 45 s: the node-lifecycle controller's grace period (20 s) and 8 s of
//! chances to publish.

#[test]
fn a_never_published_gated_pod_on_a_not_ready_node_stays_unpublished() {
    super::on_a_real_node(
        "a never-published gated pod on a NotReady node",
        "node::unpublished::inner::never_published_gated_pod_on_a_not_ready_node",
    );
}

mod inner {
    use std::net::SocketAddr;
    use std::time::{Duration, Instant};

    use serde_json::{Value, json};
    use test_support::in_sandbox;

    use super::super::ENV;
    use super::super::inner::{NODE, World, apply, get_json, http, pods, ready_addresses};

    const GATE: &str = "portmapper.dev/published";

    fn conditions(pod: &Value) -> String {
        pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                format!(
                    "{}={} {}",
                    c["type"].as_str().unwrap_or_default(),
                    c["status"].as_str().unwrap_or_default(),
                    c["reason"].as_str().unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    #[test]
    #[ignore = "run inside a network namespace by the outer test"]
    fn never_published_gated_pod_on_a_not_ready_node() {
        if !in_sandbox(ENV) {
            return;
        }
        let Some(world) =
            World::start_with_podserver("unpublished", &["--node-monitor-grace-period=20s"], true)
        else {
            return;
        };
        let cluster = &world.cluster;
        apply(
            cluster,
            &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                "spec": {"ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}),
        );
        apply(
            cluster,
            &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "native"},
                "spec": {"selector": {"app": "gp"},
                         "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}),
        );
        apply(
            cluster,
            &json!({"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
                "metadata": {"name": "web"},
                "spec": {"serviceRef": {"name": "web"}, "pods": {"key": "example.com/group"},
                    "probe": {"periodSeconds": 1, "failureThreshold": 1, "timeoutSeconds": 1},
                    "ports": [{"name": "http", "checks": [{"podReady": {}}, {"httpGet": {"path": "/ready"}}]}]}}),
        );
        apply(
            cluster,
            &json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "g", "labels": {"example.com/group": "web", "app": "gp"}},
                "spec": {"nodeName": NODE, "automountServiceAccountToken": false,
                    "enableServiceLinks": false, "terminationGracePeriodSeconds": 2,
                    "readinessGates": [{"conditionType": GATE}],
                    "containers": [{"name": "podserver", "image": "portmapper.test/podserver:1",
                        "imagePullPolicy": "Never", "args": ["--http-status=503"],
                        "ports": [{"name": "http", "containerPort": 8080},
                                  {"name": "control", "containerPort": 8082}]}]}}),
        );
        let began = Instant::now();
        let pod = loop {
            let p = pods(cluster, "app=gp").pop().unwrap_or_default();
            let s = conditions(&p);
            if s.contains("ContainersReady=True") && s.contains(&format!("{GATE}=False")) {
                break p;
            }
            assert!(began.elapsed() < Duration::from_secs(60), "{s}");
            std::thread::sleep(Duration::from_millis(200));
        };
        eprintln!("before: {}", conditions(&pod));
        let ip = pod["status"]["podIP"].as_str().unwrap().to_string();
        world.plane.kill9("kubelet");
        let killed = Instant::now();
        loop {
            let node = get_json(cluster, &["get", "node", NODE]);
            let ready = node["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "Ready")
                .map(|c| c["status"].as_str().unwrap_or_default().to_string());
            if ready.as_deref() != Some("True") {
                break;
            }
            assert!(killed.elapsed() < Duration::from_secs(120));
            std::thread::sleep(Duration::from_millis(500));
        }
        std::thread::sleep(Duration::from_secs(5));
        let pod = pods(cluster, "app=gp").pop().unwrap();
        eprintln!(
            "node NotReady {:.1} s after the kill; the pod: {}",
            killed.elapsed().as_secs_f64(),
            conditions(&pod)
        );
        let control: SocketAddr = format!("{ip}:8082").parse().unwrap();
        assert_eq!(http(control, "/http/200").unwrap().0, 200);
        // Probes every second: 8 s is many chances to publish it.
        std::thread::sleep(Duration::from_secs(8));
        let pod = pods(cluster, "app=gp").pop().unwrap();
        let (native, ours) = (
            ready_addresses(cluster, "native"),
            ready_addresses(cluster, "web"),
        );
        eprintln!(
            "8 s after /ready turned 200: ready endpoints native {native:?}, portmapper {ours:?}; \
             the pod: {}",
            conditions(&pod)
        );
        assert!(
            native.is_empty(),
            "the native controller published {native:?}"
        );
        assert_eq!(
            ours, native,
            "portmapper published a pod of a NotReady node"
        );
        let gate = pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == GATE)
            .cloned()
            .unwrap_or_default();
        eprintln!("its gate: {gate}");
        assert_eq!(gate["status"], "False", "{gate}");
        // For its node, not by chance (a probe that had not passed yet would say so too).
        let message = gate["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!("its node {NODE} is not Ready")),
            "{message}"
        );
        world.finish();
    }
}
