//! Pod churn at a set rate on random pods of one pool: Ready flips and edits of the ports
//! annotation, as a busy workload makes them. Used by the backoff tests (issue 26 item 3) and
//! the real control plane's fault tests, on either backend.
//!
//! The pool is a Service with ports `http` and `https`, an anchor pod that stays Ready on both
//! ports throughout (so neither port may ever go dark: the observer's `must_serve`), and
//! [`PODS`] churned pods. Every change is one request of the test's own client; a change the
//! server refuses (an API server down, etcd down) is counted and dropped, and the churn goes
//! on. The churn keeps what the server accepted, so the final membership is known exactly.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::harness::{Harness, eventually, pod, portmapping, service};
use crate::procs::Rng;

/// Churned pods (besides the anchor) of the usual pool.
pub const PODS: usize = 5;
/// The churn: 20 changes a second.
pub const EVERY: Duration = Duration::from_millis(50);
/// The annotation values a churned pod takes.
const PORT_SETS: [&str; 3] = ["http", "https", "http,https"];

/// One pod's inputs as the server last accepted them.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PodState {
    ip: String,
    ready: bool,
    ports: &'static str,
}

/// What a finished churn did.
#[derive(Debug, Default)]
pub struct Churned {
    /// Changes the server accepted.
    pub changes: usize,
    /// Changes it refused or could not be reached for.
    pub refused: usize,
}

/// A running churn; [`Churn::stop`] ends it.
pub struct Churn {
    running: Arc<AtomicBool>,
    task: JoinHandle<(Churned, BTreeMap<String, PodState>)>,
}

/// The pool of `name`: Service `name` (ports http 8080, https 8443), PortMapping `name`, the
/// anchor `<name>-anchor` and `<name>-0`..`<name>-{n-1}`, all Ready on both ports. `octet` is
/// the third octet of their IPs (10.244.`octet`.x), distinct per test.
pub async fn pool(h: &Harness, name: &str, octet: u8, n: usize) {
    h.create(service(name, &[("http", 8080), ("https", 8443)]))
        .await;
    for (pod_name, ip) in pods(name, octet, n) {
        h.create(pod(&pod_name, name, "http,https")).await;
        h.set_pod_status(&pod_name, &[&ip], true).await;
    }
    h.create(portmapping(name, name)).await;
}

/// The ports that must stay served: both, by the anchor.
pub fn must_serve(name: &str) -> [(&str, &'static str); 2] {
    [(name, "http"), (name, "https")]
}

/// (pod name, IP) of a pool of `n` churned pods, the anchor first.
fn pods(name: &str, octet: u8, n: usize) -> Vec<(String, String)> {
    let mut pods = vec![(format!("{name}-anchor"), format!("10.244.{octet}.100"))];
    pods.extend((0..n).map(|i| (format!("{name}-{i}"), format!("10.244.{octet}.{}", i + 1))));
    pods
}

/// Waits until both ports' slices hold every pod of a pool of `n` (the state [`pool`]
/// creates).
pub async fn published(h: &Harness, name: &str, n: usize, within: Duration) {
    let all: Vec<String> = pods(name, 0, n).into_iter().map(|(p, _)| p).collect();
    let want = BTreeMap::from([
        (format!("{name}.http"), sorted(all.clone())),
        (format!("{name}.https"), sorted(all)),
    ]);
    eventually(&format!("{name} published"), within, || async {
        (h.membership(name).await == want).then_some(())
    })
    .await;
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

impl Churn {
    /// Starts changing a random pod of a pool of `n` every `every` through `h`'s client
    /// (seeded).
    pub fn start(h: &Harness, name: &str, octet: u8, n: usize, every: Duration, seed: u64) -> Self {
        let api: Api<Pod> = Api::namespaced(h.client.clone(), &h.ns);
        let running = Arc::new(AtomicBool::new(true));
        let mut state: BTreeMap<String, PodState> = pods(name, octet, n)
            .into_iter()
            .map(|(p, ip)| {
                let s = PodState {
                    ip,
                    ready: true,
                    ports: "http,https",
                };
                (p, s)
            })
            .collect();
        let churned: Vec<String> = (0..n).map(|i| format!("{name}-{i}")).collect();
        let task = {
            let running = running.clone();
            tokio::spawn(async move {
                let mut rng = Rng::new(seed);
                let mut done = Churned::default();
                let mut next = Instant::now();
                while running.load(Ordering::Relaxed) {
                    next += every;
                    let pod = &churned[usize::try_from(rng.range(0, n as u64)).unwrap()];
                    let mut s = state[pod].clone();
                    let flip = rng.range(0, 2) == 0;
                    if flip {
                        s.ready = !s.ready;
                    } else {
                        let others: Vec<_> = PORT_SETS.iter().filter(|p| **p != s.ports).collect();
                        s.ports = others[usize::try_from(rng.range(0, 2)).unwrap()];
                    }
                    // A bounded wait: a request to a server that is down must not stall the churn.
                    let sent =
                        tokio::time::timeout(Duration::from_secs(2), apply(&api, pod, &s, flip))
                            .await;
                    if matches!(sent, Ok(Ok(()))) {
                        state.insert(pod.clone(), s);
                        done.changes += 1;
                    } else {
                        done.refused += 1;
                    }
                    tokio::time::sleep_until(next.max(Instant::now())).await;
                }
                (done, state)
            })
        };
        Self { running, task }
    }

    /// Stops the churn; returns what it did and the membership it left: slice name → the Ready
    /// pods listing that port, sorted.
    pub async fn stop(self, name: &str) -> (Churned, BTreeMap<String, Vec<String>>) {
        self.running.store(false, Ordering::Relaxed);
        let (done, state) = self.task.await.expect("the churn task");
        let mut members: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for port in ["http", "https"] {
            let slice = members.entry(format!("{name}.{port}")).or_default();
            for (pod, s) in &state {
                if s.ready && s.ports.split(',').any(|p| p == port) {
                    slice.push(pod.clone());
                }
            }
        }
        (done, members)
    }
}

/// One change, one request: the Ready condition through the status subresource (as kubelet),
/// or the ports annotation.
async fn apply(api: &Api<Pod>, pod: &str, s: &PodState, flip: bool) -> Result<(), kube::Error> {
    let params = PatchParams::default();
    if flip {
        let status = json!({"status": {
            "phase": "Running", "podIP": s.ip, "podIPs": [{"ip": s.ip}],
            "conditions": [{"type": "Ready", "status": if s.ready { "True" } else { "False" }}],
        }});
        api.patch_status(pod, &params, &Patch::Merge(status))
            .await?;
    } else {
        let annotation = json!({"metadata": {"annotations": {"example.com/ports": s.ports}}});
        api.patch(pod, &params, &Patch::Merge(annotation)).await?;
    }
    Ok(())
}

/// Waits until the slices hold `members` exactly; returns how long that took.
pub async fn converged(
    h: &Harness,
    members: &BTreeMap<String, Vec<String>>,
    within: Duration,
) -> Duration {
    let started = Instant::now();
    let name = members
        .keys()
        .next()
        .and_then(|s| s.split_once('.'))
        .map(|(n, _)| n.to_string())
        .expect("a slice name");
    eventually(
        &format!("{name} converged to {members:?}"),
        within,
        || async { (&h.membership(&name).await == members).then_some(()) },
    )
    .await;
    started.elapsed()
}
