//! Pod watches that follow the PortMappings: one label-selected watch per distinct label key
//! (`labelSelector=<key>`, so the server sends only candidate pods), and one namespace-wide watch
//! per namespace that has annotation-keyed PortMappings (annotations cannot be selected
//! server-side). Reconciles call [`PodWatches::store_for`]; a watch that has not listed yet
//! answers `None`, and the reconcile then writes nothing rather than publish an empty pool.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};
use kube::Client;
use kube::api::{Api, ObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use tokio::task::AbortHandle;
use tracing::info;

use crate::index::{PodSource, SharedIndex};
use crate::watches::{Change, Trigger, reflect};

struct Running {
    store: Store<Pod>,
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

    /// The store for `source` once it has listed; starts the watch on first use.
    pub fn store_for(self: &Arc<Self>, source: &PodSource) -> Option<Store<Pod>> {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = running.get(source) {
            return crate::watches::is_ready(&r.store).then(|| r.store.clone());
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
        let (store, task) = reflect(
            api,
            config,
            "pods",
            strip_pod,
            move |change| match change {
                Change::Apply(pod) => index.lock().apply_pod(&watched, pod),
                Change::Delete(pod) => index.lock().delete_pod(&watched, &ObjectRef::from_obj(pod)),
                Change::Relisted(present) => index.lock().retain_pods(&watched, present),
            },
            self.trigger.clone(),
        );
        info!(?source, "starting pod watch");
        let task = tokio::spawn(task).abort_handle();
        running.insert(source.clone(), Running { store, task });
        None
    }

    /// Installs a listed store for `source` without a watch (reconcile-level tests).
    #[cfg(test)]
    pub fn insert_ready(&self, source: PodSource, store: Store<Pod>) {
        let task = tokio::spawn(async {}).abort_handle();
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(source, Running { store, task });
    }

    /// Re-indexes every pod `source`'s watch holds (a PortMapping started reading a new
    /// annotation key of its namespace).
    pub fn reindex(&self, source: &PodSource) {
        let store = {
            let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
            match running.get(source) {
                Some(r) => r.store.clone(),
                None => return,
            }
        };
        let mut affected = std::collections::HashSet::new();
        {
            let mut index = self.index.lock();
            for pod in store.state() {
                affected.extend(index.apply_pod(source, &pod));
            }
        }
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
/// its grace period),
/// scheduling, readiness gates, hostname/subdomain, container names/ports, phase, IPs, conditions
/// and container readiness. Images, env, volumes and managedFields are dropped to bound memory.
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
        owner_references: meta.owner_references,
        ..ObjectMeta::default()
    };
    if let Some(spec) = pod.spec.take() {
        let slim = |c: Container| Container {
            name: c.name,
            ports: c.ports,
            restart_policy: c.restart_policy,
            ..Container::default()
        };
        pod.spec = Some(PodSpec {
            containers: spec.containers.into_iter().map(slim).collect(),
            init_containers: spec
                .init_containers
                .map(|v| v.into_iter().map(slim).collect()),
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
            container_statuses: status.container_statuses,
            init_container_statuses: status.init_container_statuses,
            ..PodStatus::default()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodCondition;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

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
}
