//! The two shapes of issue 10, generated from a seed: the Services, pods (with the ports they
//! list) and PortMappings, and what "all published" means for them.

use std::collections::BTreeMap;

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde_json::{Value, json};

/// Namespace of every object (the emulator's bench; the real control plane's runs name theirs).
pub const NS: &str = "default";
/// The Node every pod runs on (the native EndpointSlice controller skips pods whose Node is missing).
pub const NODE: &str = "node-1";
/// How the bench's view names the port of a native slice: the native controller puts every
/// Service port in each slice, so a pod is published for all of them at once.
pub const NATIVE_PORT: &str = "*";
/// Pool label key (one key for every PortMapping, as both shapes say).
pub const POOL_KEY: &str = "example.com/group";
/// Annotation listing the ports a pod serves.
pub const PORTS_KEY: &str = "example.com/ports";

const PORTS_A: [(&str, i32); 4] = [
    ("http", 8080),
    ("https", 8443),
    ("admin", 9000),
    ("metrics", 9100),
];
const PORTS_B: [(&str, i32); 2] = [("http", 8080), ("admin", 9000)];

/// Which shape, at which size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// 1 PortMapping, `pods` pods, 4 ports (half the pods list all 4, half list 2).
    A {
        /// Pool size.
        pods: usize,
    },
    /// `mappings` PortMappings × `pods` pods each, 2 ports.
    B {
        /// PortMappings (and Services).
        mappings: usize,
        /// Pods per PortMapping.
        pods: usize,
    },
}

impl Shape {
    /// Short label for the table.
    pub fn label(&self) -> String {
        match self {
            Shape::A { pods } => format!("A {pods}"),
            Shape::B { mappings, pods } => format!("B {mappings}×{pods}"),
        }
    }
}

/// One pool pod.
#[derive(Debug, Clone)]
pub struct PodSpec {
    /// Pod name.
    pub name: String,
    /// Service (= PortMapping = pool value) it belongs to.
    pub service: String,
    /// Pod IP.
    pub ip: String,
    /// Service port names it lists in `example.com/ports`.
    pub ports: Vec<&'static str>,
    /// Namespace.
    pub namespace: String,
}

/// Every object of one shape.
#[derive(Debug, Clone)]
pub struct Generated {
    /// Services (JSON).
    pub services: Vec<Value>,
    /// Pods, in creation order.
    pub pods: Vec<PodSpec>,
    /// PortMappings (JSON).
    pub mappings: Vec<Value>,
    /// (service, port) → ready endpoints once everything is published.
    pub expected: BTreeMap<(String, String), usize>,
    /// The same pods behind Services *with* a selector, for the native EndpointSlice
    /// controller (JSON; created on the real control plane only).
    pub native_services: Vec<Value>,
    /// (native service, [`NATIVE_PORT`]) → ready endpoints once the native controller has
    /// published everything.
    pub expected_native: BTreeMap<(String, String), usize>,
}

/// The `i`-th address from `10.<first>.0.1` on, 250 per third octet, 64,000 per second.
fn ip_from(first: usize, i: usize) -> String {
    let block = i / 250;
    format!("10.{}.{}.{}", first + block / 256, block % 256, i % 250 + 1)
}

/// A pool pod's address: 10.244.0.1 on, into 10.245 and on past 64,000 pods.
fn ip(i: usize) -> String {
    ip_from(244, i)
}

/// A replacement pod's address: 10.248.0.1 on, apart from every pool pod's up to 256,000.
fn replacement_ip(i: usize) -> String {
    ip_from(248, i)
}

/// A Service with `ports`; with `selector` (the pool value) the native controller publishes it.
fn service(ns: &str, name: &str, ports: &[(&str, i32)], selector: Option<&str>) -> Value {
    let mut spec = json!({"ports": ports.iter()
        .map(|(n, p)| json!({"name": n, "port": p, "targetPort": p, "protocol": "TCP"}))
        .collect::<Vec<_>>()});
    if let Some(pool) = selector {
        spec["selector"] = json!({POOL_KEY: pool});
    }
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    })
}

fn mapping(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "serviceRef": {"name": name},
            "pods": {"key": POOL_KEY},
            "defaultChecks": [{"podReady": {}}, {"portNames": {"key": PORTS_KEY}}],
            "maxEndpointsPerSlice": 100,
        },
    })
}

/// The objects of `shape` in [`NS`], the same for the same seed.
pub fn generate(shape: Shape, seed: u64) -> Generated {
    generate_in(shape, seed, NS)
}

/// The objects of `shape` in namespace `ns`, the same for the same seed.
pub fn generate_in(shape: Shape, seed: u64, ns: &str) -> Generated {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut g = Generated {
        services: Vec::new(),
        pods: Vec::new(),
        mappings: Vec::new(),
        expected: BTreeMap::new(),
        native_services: Vec::new(),
        expected_native: BTreeMap::new(),
    };
    match shape {
        Shape::A { pods } => {
            let name = "bench";
            g.services.push(service(ns, name, &PORTS_A, None));
            g.native_services
                .push(service(ns, "native", &PORTS_A, Some(name)));
            g.mappings.push(mapping(ns, name));
            // Exactly half list all four ports; which half is seeded.
            let mut all_four: Vec<bool> = (0..pods).map(|i| i < pods.div_ceil(2)).collect();
            all_four.shuffle(&mut rng);
            for (i, four) in all_four.into_iter().enumerate() {
                let ports = if four {
                    vec!["http", "https", "admin", "metrics"]
                } else {
                    vec!["http", "admin"]
                };
                g.pods.push(PodSpec {
                    name: format!("pod-{i}"),
                    service: name.into(),
                    ip: ip(i),
                    ports,
                    namespace: ns.into(),
                });
            }
        }
        Shape::B { mappings, pods } => {
            for k in 0..mappings {
                let name = format!("svc-{k}");
                g.services.push(service(ns, &name, &PORTS_B, None));
                g.native_services
                    .push(service(ns, &format!("nat-{k}"), &PORTS_B, Some(&name)));
                g.mappings.push(mapping(ns, &name));
                for j in 0..pods {
                    g.pods.push(PodSpec {
                        name: format!("pod-{k}-{j}"),
                        service: name.clone(),
                        ip: ip(k * pods + j),
                        ports: vec!["http", "admin"],
                        namespace: ns.into(),
                    });
                }
            }
            // Creation order interleaves the pools, as pods of many apps arrive in a cluster.
            g.pods.shuffle(&mut rng);
        }
    }
    for p in &g.pods {
        for port in &p.ports {
            *g.expected
                .entry((p.service.clone(), (*port).to_owned()))
                .or_insert(0) += 1;
        }
        *g.expected_native
            .entry((native_service(&p.service), NATIVE_PORT.to_owned()))
            .or_insert(0) += 1;
    }
    g
}

/// The native Service over the pool of the operator's Service `service`.
pub fn native_service(service: &str) -> String {
    match service.strip_prefix("svc-") {
        Some(k) => format!("nat-{k}"),
        None => "native".to_owned(),
    }
}

/// The Node the pods run on.
pub fn node() -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
}

impl PodSpec {
    /// The pod object (status is written separately, as kubelet does).
    pub fn object(&self) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": self.name, "namespace": self.namespace,
                "labels": {POOL_KEY: self.service},
                "annotations": {PORTS_KEY: self.ports.join(",")},
            },
            "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "pause"}]},
        })
    }

    /// Running, with its IP, Ready or not.
    pub fn status(&self, ready: bool) -> Value {
        json!({"status": {
            "phase": "Running", "podIP": self.ip, "podIPs": [{"ip": self.ip}],
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
        }})
    }
}

impl PodSpec {
    /// The pod that replaces pool pod number `i` in a rolling restart: a new name and address,
    /// the same pool and ports.
    pub fn replacement(&self, i: usize) -> PodSpec {
        PodSpec {
            name: format!("{}-r", self.name),
            ip: replacement_ip(i),
            ..self.clone()
        }
    }
}

/// `count` distinct pod indices out of `pods`, seeded.
pub fn sample(pods: usize, count: usize, seed: u64) -> Vec<usize> {
    let mut rng = StdRng::seed_from_u64(seed ^ SAMPLE_SALT);
    let mut idx: Vec<usize> = (0..pods).collect();
    idx.shuffle(&mut rng);
    idx.truncate(count.min(pods));
    idx
}

/// A fixed salt so the flip sample is not the same permutation as the shape's.
const SAMPLE_SALT: u64 = 0x5eed_f11b;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_stay_valid_and_apart_past_64000_pods() {
        assert_eq!(ip(0), "10.244.0.1");
        assert_eq!(ip(63_999), "10.244.255.250");
        assert_eq!(ip(64_000), "10.245.0.1");
        assert_eq!(ip(99_999), "10.245.143.250");
        assert_eq!(replacement_ip(0), "10.248.0.1");
        let pool: std::collections::HashSet<String> = (0..100_000).map(ip).collect();
        assert_eq!(pool.len(), 100_000);
        assert!((0..100_000).map(replacement_ip).all(|r| !pool.contains(&r)));
    }
}
