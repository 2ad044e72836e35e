//! Pod watches that follow the PortMappings: one label-selected watch per distinct label key
//! (`labelSelector=<key>`, so the server sends only candidate pods), and one namespace-wide watch
//! per namespace that has annotation-keyed PortMappings (annotations cannot be selected
//! server-side). The index keeps the pods (there is no reflector store of pods). Reconciles call
//! [`PodWatches::is_listed`]; a watch that has not listed yet answers `false`, and the reconcile
//! then writes nothing rather than publish an empty pool.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use tokio::task::AbortHandle;
use tracing::info;

use portmapper_core::PodRecord;

use crate::index::{PmKey, PodSource, SharedIndex};
use crate::pod_wire::WirePod;
use crate::watches::{Owned, Trigger, consume};

/// A watched pod's key as the index keeps pods (the watch decodes `WirePod`s).
fn pod_key(name: &str, namespace: Option<&str>) -> ObjectRef<Pod> {
    let key = ObjectRef::new(name);
    match namespace {
        Some(ns) => key.within(ns),
        None => key,
    }
}

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
                    Some(ns) => Api::<WirePod>::namespaced(self.client.clone(), ns),
                    None => Api::<WirePod>::all(self.client.clone()),
                };
                (api, watcher::Config::default().labels(key))
            }
            PodSource::Namespace(ns) => (
                Api::<WirePod>::namespaced(self.client.clone(), ns),
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
            // Decoded with only what the record keeps (see `pod_wire`): nothing to strip.
            |_: &mut WirePod| {},
            move |change| match change {
                Owned::Apply(pod) => index
                    .lock()
                    .apply_pod(&watched, Arc::new(PodRecord::from(pod))),
                Owned::Delete(pod) => {
                    let meta = kube::Resource::meta(&pod);
                    let key = pod_key(
                        meta.name.as_deref().unwrap_or_default(),
                        meta.namespace.as_deref(),
                    );
                    index.lock().delete_pod(&watched, &key)
                }
                Owned::Relisted(present) => {
                    let present = present
                        .iter()
                        .map(|r| pod_key(&r.name, r.namespace.as_deref()))
                        .collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The PortMappings that asked before the first list was in are woken once it is: the
    /// list's own pod events came before the list was complete, so they saw it unlisted.
    #[tokio::test]
    async fn the_first_list_wakes_the_portmappings_that_waited_for_it() {
        use futures::StreamExt;
        let api = crate::reconcile::fake_api::FakeApi::default();
        let list = serde_json::json!({
            "apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "7"},
            "items": [{"metadata": {"name": "a", "namespace": "default", "uid": "u-a",
                                    "labels": {"app": "x"}}}],
        });
        api.respond("GET", "/api/v1/pods", 200, list);
        let (tx, mut rx) = futures::channel::mpsc::unbounded();
        let metrics = crate::metrics::Metrics::new();
        let trigger = crate::watches::Trigger::new(tx, Default::default(), metrics);
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
}
