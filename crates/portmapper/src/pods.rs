//! Pod watches that follow the PortMappings: one label-selected watch per distinct label key
//! (`labelSelector=<key>`, so the server sends only candidate pods), and one namespace-wide watch
//! per namespace that has annotation-keyed PortMappings (annotations cannot be selected
//! server-side). Reconciles call [`PodWatches::store_for`]; a watch that has not listed yet
//! answers `None`, and the reconcile then writes nothing rather than publish an empty pool.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};
use kube::api::{Api, ObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use portmapper_api::{KeySource, PortMapping};
use tokio::task::AbortHandle;
use tracing::info;

use crate::watches::{Trigger, reflect};

/// What one pod watch covers.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PodSource {
    /// Pods carrying the label key (in the watch scope).
    Label(String),
    /// Every pod of a namespace (annotation keys).
    Namespace(String),
}

impl PodSource {
    /// The watch a PortMapping's pool needs.
    pub fn of(pm: &PortMapping) -> Self {
        match pm.spec.pods.from {
            KeySource::Label => Self::Label(pm.spec.pods.key.clone()),
            KeySource::Annotation => Self::Namespace(pm.namespace().unwrap_or_default()),
        }
    }
}

struct Running {
    store: Store<Pod>,
    task: AbortHandle,
}

/// The set of running pod watches.
pub struct PodWatches {
    client: Client,
    scope: Option<String>,
    pms: Store<PortMapping>,
    slices: Store<k8s_openapi::api::discovery::v1::EndpointSlice>,
    trigger: Trigger,
    running: Mutex<HashMap<PodSource, Running>>,
}

impl PodWatches {
    /// No watch runs until a reconcile asks for one.
    pub fn new(
        client: Client,
        scope: Option<String>,
        pms: Store<PortMapping>,
        slices: Store<k8s_openapi::api::discovery::v1::EndpointSlice>,
        trigger: Trigger,
    ) -> Arc<Self> {
        Arc::new(Self {
            client,
            scope,
            pms,
            slices,
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
        let this = Arc::downgrade(self);
        let (store, task) = reflect(
            api,
            config,
            "pods",
            strip_pod,
            move |pod: &Pod| {
                this.upgrade()
                    .map(|w| w.affected_by(pod))
                    .unwrap_or_default()
            },
            self.trigger.clone(),
        );
        info!(?source, "starting pod watch");
        let task = tokio::spawn(task).abort_handle();
        running.insert(source.clone(), Running { store, task });
        None
    }

    /// Stops watches no PortMapping needs any more.
    pub fn retain_needed(&self) {
        let needed: BTreeSet<PodSource> = self
            .pms
            .state()
            .iter()
            .map(|pm| PodSource::of(pm))
            .collect();
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.retain(|source, r| {
            let keep = needed.contains(source);
            if !keep {
                info!(?source, "stopping pod watch no PortMapping needs");
                r.task.abort();
            }
            keep
        });
    }

    /// PortMappings whose pool has the pod now, or that published it before (so a pod leaving
    /// the pool is withdrawn).
    fn affected_by(&self, pod: &Pod) -> Vec<ObjectRef<PortMapping>> {
        let ns = pod.namespace().unwrap_or_default();
        let mut out: HashSet<ObjectRef<PortMapping>> = self
            .pms
            .state()
            .iter()
            .filter(|pm| pm.namespace().as_deref() == Some(ns.as_str()))
            .filter(|pm| portmapper_core::pod_in_pool(&pm.spec, &ns, pod).unwrap_or(false))
            .map(|pm| ObjectRef::from_obj(pm.as_ref()))
            .collect();
        if let Some(uid) = pod.uid() {
            for slice in self.slices.state() {
                if slice.namespace().as_deref() != Some(ns.as_str()) {
                    continue;
                }
                let published = slice.endpoints.iter().any(|e| {
                    e.target_ref.as_ref().and_then(|t| t.uid.as_deref()) == Some(uid.as_str())
                });
                if published {
                    out.extend(crate::owner::portmapping_owner(slice.as_ref()));
                }
            }
        }
        out.into_iter().collect()
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

/// Keeps only what membership and rendering read: identity, labels, annotations, deletion,
/// scheduling, hostname/subdomain, container names/ports, phase, IPs, conditions and container
/// readiness. Images, env, volumes and managedFields are dropped to bound memory.
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
