//! Pod watches that follow the PortMappings: one label-selected watch per distinct label key
//! (`labelSelector=<key>`, so the server sends only candidate pods), and one namespace-wide watch
//! per namespace that has annotation-keyed PortMappings (annotations cannot be selected
//! server-side). The index keeps the pods (there is no reflector store of pods). Reconciles call
//! [`PodWatches::is_listed`]; a watch that has not listed yet answers `false`, and the reconcile
//! then writes nothing rather than publish an empty pool.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodSpec, PodStatus};
use kube::Client;
use kube::api::{Api, ObjectMeta};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use tokio::task::AbortHandle;
use tracing::info;

use crate::index::{PmKey, PodSource, SharedIndex};
use crate::watches::{Owned, Trigger, consume};

struct Running {
    /// Set once the watch's first list is in the index.
    listed: Arc<AtomicBool>,
    /// PortMappings that found the watch not listed yet: woken when its first list is in.
    waiting: Arc<Mutex<HashSet<PmKey>>>,
    task: AbortHandle,
}

/// The set of running pod watches.
pub struct PodWatches {
    client: Client,
    scope: Option<String>,
    index: SharedIndex,
    trigger: Trigger,
    running: Mutex<HashMap<PodSource, Running>>,
}

impl PodWatches {
    /// No watch runs until a reconcile asks for one.
    pub fn new(
        client: Client,
        scope: Option<String>,
        index: SharedIndex,
        trigger: Trigger,
    ) -> Arc<Self> {
        Arc::new(Self {
            client,
            scope,
            index,
            trigger,
            running: Mutex::new(HashMap::new()),
        })
    }

    /// Whether `source`'s watch has listed (so the index holds all its pods); starts the watch
    /// on first use. While it has not, `waiter` is woken once the first list is in: the pods
    /// of the list wake their PortMappings as they arrive, before the list is complete, so
    /// without this the last of those reconciles would wait out its retry.
    pub fn is_listed(self: &Arc<Self>, source: &PodSource, waiter: &PmKey) -> bool {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = running.get(source) {
            let mut waiting = r.waiting.lock().unwrap_or_else(|p| p.into_inner());
            // Read under the waiting lock: the list's end sets the flag, then drains under
            // this lock, so a waiter is either seen listed or drained.
            let listed = r.listed.load(Ordering::Acquire);
            if !listed {
                waiting.insert(waiter.clone());
            }
            return listed;
        }
        let (api, config) = match source {
            PodSource::Label(key) => {
                let api = match &self.scope {
                    Some(ns) => Api::<Pod>::namespaced(self.client.clone(), ns),
                    None => Api::<Pod>::all(self.client.clone()),
                };
                (api, watcher::Config::default().labels(key))
            }
            PodSource::Namespace(ns) => (
                Api::<Pod>::namespaced(self.client.clone(), ns),
                watcher::Config::default(),
            ),
        };
        let (index, watched) = (self.index.clone(), source.clone());
        let listed = Arc::new(AtomicBool::new(false));
        let waiting = Arc::new(Mutex::new(HashSet::from([waiter.clone()])));
        let (done, woken) = (listed.clone(), waiting.clone());
        let task = consume(
            api,
            config,
            "pods",
            strip_pod,
            move |change| match change {
                Owned::Apply(pod) => index.lock().apply_pod(&watched, Arc::new(pod)),
                Owned::Delete(pod) => index
                    .lock()
                    .delete_pod(&watched, &ObjectRef::from_obj(&pod)),
                Owned::Relisted(present) => {
                    let mut affected = index.lock().retain_pods(&watched, &present);
                    // After the index holds the whole list: a reconcile that sees the flag
                    // reads a complete pool.
                    let mut waiting = woken.lock().unwrap_or_else(|p| p.into_inner());
                    done.store(true, Ordering::Release);
                    affected.extend(waiting.drain());
                    affected
                }
            },
            self.trigger.clone(),
        );
        info!(?source, "starting pod watch");
        let task = tokio::spawn(task).abort_handle();
        running.insert(
            source.clone(),
            Running {
                listed,
                waiting,
                task,
            },
        );
        false
    }

    /// Marks `source` as listed without a watch: the test put its pods in the index
    /// (reconcile-level tests).
    #[cfg(test)]
    pub fn insert_ready(&self, source: PodSource) {
        let task = tokio::spawn(async {}).abort_handle();
        let listed = Arc::new(AtomicBool::new(true));
        let waiting = Arc::default();
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                source,
                Running {
                    listed,
                    waiting,
                    task,
                },
            );
    }

    /// Re-indexes every pod `source`'s watch holds (a PortMapping started reading a new
    /// annotation key of its namespace).
    pub fn reindex(&self, source: &PodSource) {
        let affected = self.index.lock().reindex_pods(source);
        for pm in affected {
            let _ = self.trigger.unbounded_send(pm);
        }
    }

    /// Stops watches no PortMapping needs any more.
    pub fn retain_needed(&self) {
        let needed: BTreeSet<PodSource> = self.index.lock().needed_sources();
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let mut stopped = Vec::new();
        running.retain(|source, r| {
            let keep = needed.contains(source);
            if !keep {
                info!(?source, "stopping pod watch no PortMapping needs");
                r.task.abort();
                stopped.push(source.clone());
            }
            keep
        });
        drop(running);
        let mut index = self.index.lock();
        for source in &stopped {
            index.forget_source(source);
        }
    }
}

impl Drop for PodWatches {
    fn drop(&mut self) {
        let running = self.running.get_mut().unwrap_or_else(|p| p.into_inner());
        for r in running.values() {
            r.task.abort();
        }
    }
}

/// Keeps only what membership and rendering read: identity, labels, annotations, deletion (and
/// its grace period), scheduling, readiness gates, hostname/subdomain, the names and ports of
/// containers that declare ports, phase, IPs, conditions and container readiness. Images, env,
/// volumes, owner references and managedFields are dropped to bound memory. A container that
/// declares no port is dropped whole: it resolves no target or check port, and each kept
/// `Container` costs about 2 KiB however empty (k8s-openapi's struct), a third of a pool pod.
pub fn strip_pod(pod: &mut Pod) {
    let meta = std::mem::take(&mut pod.metadata);
    pod.metadata = ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        labels: meta.labels,
        annotations: meta.annotations,
        creation_timestamp: meta.creation_timestamp,
        deletion_timestamp: meta.deletion_timestamp,
        // With the deletion timestamp it dates the deletion request (slice trigger time).
        deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
        ..ObjectMeta::default()
    };
    if let Some(spec) = pod.spec.take() {
        let slim = |c: Container| Container {
            name: c.name,
            ports: c.ports,
            restart_policy: c.restart_policy,
            ..Container::default()
        };
        // `collect` reuses the source vector's buffer in place, so the kept containers are
        // moved to a fitting one: an emptied buffer of one container would still hold its 2 KiB.
        let serving = |v: Vec<Container>| -> Vec<Container> {
            let mut kept: Vec<Container> = v
                .into_iter()
                .filter(|c| c.ports.as_ref().is_some_and(|p| !p.is_empty()))
                .map(slim)
                .collect();
            kept.shrink_to_fit();
            kept
        };
        pod.spec = Some(PodSpec {
            containers: serving(spec.containers),
            init_containers: spec.init_containers.map(serving).filter(|v| !v.is_empty()),
            node_name: spec.node_name,
            // The publication gate is opt-in through it (podReady and the planner read it).
            readiness_gates: spec.readiness_gates,
            hostname: spec.hostname,
            subdomain: spec.subdomain,
            ..PodSpec::default()
        });
    }
    if let Some(status) = pod.status.take() {
        pod.status = Some(PodStatus {
            phase: status.phase,
            pod_ip: status.pod_ip,
            pod_ips: status.pod_ips,
            conditions: status.conditions,
            container_statuses: status.container_statuses.map(slim_statuses),
            init_container_statuses: status.init_container_statuses.map(slim_statuses),
            ..PodStatus::default()
        });
    }
}

/// Container statuses as `containerReady` reads them: name and readiness.
fn slim_statuses(statuses: Vec<ContainerStatus>) -> Vec<ContainerStatus> {
    statuses
        .into_iter()
        .map(|s| ContainerStatus {
            name: s.name,
            ready: s.ready,
            ..ContainerStatus::default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodCondition;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    /// The PortMappings that asked before the first list was in are woken once it is: the
    /// list's own pod events came before the list was complete, so they saw it unlisted.
    #[tokio::test]
    async fn the_first_list_wakes_the_portmappings_that_waited_for_it() {
        use futures::StreamExt;
        let api = crate::fake_api::FakeApi::default();
        let list = serde_json::json!({
            "apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "7"},
            "items": [{"metadata": {"name": "a", "namespace": "default", "uid": "u-a",
                                    "labels": {"app": "x"}}}],
        });
        api.respond("GET", "/api/v1/pods", 200, list);
        let (tx, mut rx) = futures::channel::mpsc::unbounded();
        let metrics = crate::metrics::Metrics::new();
        let trigger = crate::watches::Trigger::new(tx, Default::default(), metrics, Arc::default());
        let watches = PodWatches::new(api.client(), None, SharedIndex::default(), trigger);
        let source = PodSource::Label("app".into());
        let (one, two) = (
            PmKey::new("one").within("default"),
            PmKey::new("two").within("default"),
        );
        // The test's runtime has one thread: the watch does not run before both have asked.
        assert!(!watches.is_listed(&source, &one));
        assert!(!watches.is_listed(&source, &two));
        let mut woken = BTreeSet::new();
        for _ in 0..2 {
            let next = tokio::time::timeout(std::time::Duration::from_secs(5), rx.next())
                .await
                .expect("the waiting PortMappings are woken when the list is in")
                .expect("the trigger is open");
            woken.insert(next.name);
        }
        assert_eq!(
            woken,
            BTreeSet::from(["one".to_string(), "two".to_string()])
        );
        assert!(watches.is_listed(&source, &one));
    }

    #[test]
    fn stripping_keeps_what_dates_a_change() {
        let at = Time(Timestamp::from_second(1_800_000_000).unwrap());
        let mut pod = Pod {
            metadata: ObjectMeta {
                creation_timestamp: Some(at.clone()),
                deletion_timestamp: Some(at.clone()),
                deletion_grace_period_seconds: Some(30),
                ..ObjectMeta::default()
            },
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    last_transition_time: Some(at.clone()),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        };
        let kept = pod.clone();
        strip_pod(&mut pod);
        assert_eq!(pod.metadata, kept.metadata);
        assert_eq!(pod.status, kept.status);
    }

    #[test]
    fn stripping_keeps_the_readiness_gates() {
        use k8s_openapi::api::core::v1::{PodReadinessGate, PodSpec};
        let gates = vec![PodReadinessGate {
            condition_type: portmapper_core::PUBLISHED_GATE.into(),
        }];
        let mut pod = Pod {
            spec: Some(PodSpec {
                readiness_gates: Some(gates.clone()),
                ..PodSpec::default()
            }),
            ..Pod::default()
        };
        strip_pod(&mut pod);
        assert_eq!(pod.spec.and_then(|s| s.readiness_gates), Some(gates));
    }

    #[test]
    fn stripping_keeps_containers_with_ports_and_container_readiness() {
        use k8s_openapi::api::core::v1::{ContainerPort, PodSpec};
        let port = |name: &str| ContainerPort {
            name: Some(name.into()),
            container_port: 8080,
            ..ContainerPort::default()
        };
        let container = |name: &str, ports: Option<Vec<ContainerPort>>| Container {
            name: name.into(),
            image: Some("registry.example/app:1".into()),
            ports,
            ..Container::default()
        };
        let mut pod = Pod {
            spec: Some(PodSpec {
                containers: vec![
                    container("app", Some(vec![port("http")])),
                    container("logs", None),
                    container("empty", Some(Vec::new())),
                ],
                init_containers: Some(vec![container("setup", None)]),
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    name: "app".into(),
                    ready: true,
                    image: "registry.example/app:1".into(),
                    restart_count: 3,
                    ..ContainerStatus::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        };
        strip_pod(&mut pod);
        let spec = pod.spec.unwrap();
        assert_eq!(
            spec.containers,
            vec![Container {
                name: "app".into(),
                ports: Some(vec![port("http")]),
                ..Container::default()
            }]
        );
        // Three containers came in; the buffer kept fits the one left (memory per pool pod).
        assert_eq!(spec.containers.capacity(), 1);
        assert_eq!(spec.init_containers, None);
        assert_eq!(
            pod.status.unwrap().container_statuses,
            Some(vec![ContainerStatus {
                name: "app".into(),
                ready: true,
                ..ContainerStatus::default()
            }])
        );
    }
}
