//! Pod watches that follow the PortMappings, each in one namespace: one label-selected watch per
//! distinct label key of a namespace's PortMappings (`labelSelector=<key>`, so the server sends
//! only candidate pods; at most `--max-pod-watches-per-namespace` keys, see
//! `index/pod_watches.rs`), and one namespace-wide watch per namespace that has annotation-keyed
//! PortMappings (annotations cannot be selected server-side). Never cluster-wide: a pool holds
//! pods of its own namespace only, so no other namespace's pods are listed or kept. The index
//! keeps the pods (there is no reflector store of pods) and knows whether a watch has listed
//! ([`crate::index::Index::pods_listed`]): a reconcile of a pool whose watch has not listed
//! writes nothing rather than publish an empty pool. A watch starts when a PortMapping that
//! needs it is seen ([`PodWatches::ensure`]) and stops when none does.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use tokio::task::AbortHandle;
use tracing::info;

use portmapper_core::PodRecord;

use crate::controller::pod_wire::WirePod;
use crate::controller::watches::{Feeds, Owned, consume};
use crate::index::{PodSource, SharedIndex};

/// Pods per page of a pod watch's list. kube-apiserver (1.37) serves each page of a paginated
/// list from its watch cache by first collecting every object from the page's start to the end
/// of the namespace, so a list costs it in proportion to pods² / page: at 100,000 pods, pages of
/// kube-rs's default 500 cost it 7.3 s of CPU against 2.6 s for pages of 2,000 (and 2.7 s for
/// kube-controller-manager's protobuf watch-list). The operator holds a page's body only while
/// it decodes it into `WirePod`s: about 4 MB for 2,000 pods of 2 KB.
const POD_LIST_PAGE_SIZE: u32 = 2_000;

/// A watched pod's key as the index keeps pods (the watch decodes `WirePod`s).
fn pod_key(name: &str, namespace: Option<&str>) -> ObjectRef<Pod> {
    let key = ObjectRef::new(name);
    match namespace {
        Some(ns) => key.within(ns),
        None => key,
    }
}

/// The set of running pod watches.
pub struct PodWatches {
    client: Client,
    index: SharedIndex,
    feeds: Feeds,
    running: Mutex<HashMap<PodSource, AbortHandle>>,
}

impl PodWatches {
    /// No watch runs until a PortMapping needs one.
    pub fn new(client: Client, index: SharedIndex, feeds: Feeds) -> Arc<Self> {
        Arc::new(Self {
            client,
            index,
            feeds,
            running: Mutex::new(HashMap::new()),
        })
    }

    /// Starts `source`'s watch unless it runs. Its first list, once the index holds it, marks
    /// the source listed and wakes the PortMappings that found it unlisted: the pods of the
    /// list wake their PortMappings as they arrive, before the list is complete, so without
    /// this the last of those reconciles would wait out its retry.
    pub fn ensure(&self, source: &PodSource) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if running.contains_key(source) {
            return;
        }
        let api = Api::<WirePod>::namespaced(self.client.clone(), source.namespace());
        let config = match source {
            PodSource::Label { key, .. } => watcher::Config::default().labels(key),
            PodSource::Namespace(_) => watcher::Config::default(),
        }
        .page_size(POD_LIST_PAGE_SIZE);
        let (index, watched) = (self.index.clone(), source.clone());
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
                    index.lock().retain_pods(&watched, &present)
                }
            },
            self.feeds.clone(),
        );
        info!(?source, "starting pod watch");
        running.insert(source.clone(), tokio::spawn(task).abort_handle());
    }

    /// Re-indexes every pod `source`'s watch holds (a PortMapping started reading a new
    /// annotation key of its namespace).
    pub fn reindex(&self, source: &PodSource) {
        let affected = self.index.lock().reindex_pods(source);
        for pm in affected {
            let _ = self.feeds.trigger.unbounded_send(pm);
        }
    }

    /// Starts the label watches `ns` gets within its cap (a PortMapping of `ns` came, went or
    /// changed key: a key over the cap may be let in).
    pub fn ensure_admitted(&self, ns: &str) {
        let admitted = self.index.lock().admitted_sources(ns);
        for source in &admitted {
            self.ensure(source);
        }
    }

    /// Stops watches no PortMapping needs any more (or over a namespace's cap), and starts
    /// those needed and not running (a relist of PortMappings let a key in).
    pub fn retain_needed(&self) {
        let needed: BTreeSet<PodSource> = self.index.lock().needed_sources();
        for source in &needed {
            self.ensure(source);
        }
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let mut stopped = Vec::new();
        running.retain(|source, task| {
            let keep = needed.contains(source);
            if !keep {
                info!(?source, "stopping pod watch no PortMapping needs");
                task.abort();
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
        for task in running.values() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::PmKey;
    use crate::index::trigger::Trigger;

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
        api.respond("GET", "/api/v1/namespaces/default/pods", 200, list);
        let (tx, mut rx) = futures::channel::mpsc::unbounded();
        let feeds = Feeds {
            trigger: Trigger::new(tx),
            health: Default::default(),
            metrics: crate::runtime::metrics::Metrics::new(),
        };
        let index = SharedIndex::default();
        let watches = PodWatches::new(api.client(), index.clone(), feeds);
        let source = PodSource::Label {
            namespace: "default".into(),
            key: "app".into(),
        };
        let (one, two) = (
            PmKey::new("one").within("default"),
            PmKey::new("two").within("default"),
        );
        // The test's runtime has one thread: the watch does not run before both have asked.
        watches.ensure(&source);
        assert!(!index.lock().pods_listed(&source, &one));
        assert!(!index.lock().pods_listed(&source, &two));
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
        assert!(index.lock().pods_listed(&source, &one));
    }
}
