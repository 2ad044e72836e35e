//! Reflectors for everything a reconcile reads, each mapping its events to the PortMappings they
//! concern. Reconciles read these stores only; they never LIST.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::channel::mpsc::UnboundedSender;
use futures::{Stream, StreamExt, TryStreamExt};
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use portmapper_api::PortMapping;
use serde::de::DeserializeOwned;
use tracing::{debug, warn};

/// Where reconcile requests go (consumed by the Controller's `reconcile_on`).
pub type Trigger = UnboundedSender<ObjectRef<PortMapping>>;

/// Starts a reflector for `api` and returns its store and the task driving it. `strip` trims
/// cached objects to what reconciles read (bounding memory); `map` turns every touched object
/// into the PortMappings to reconcile.
pub fn reflect<K, S, M, I>(
    api: Api<K>,
    config: watcher::Config,
    what: &'static str,
    strip: S,
    map: M,
    trigger: Trigger,
) -> (Store<K>, impl Future<Output = ()> + Send + 'static)
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    S: FnMut(&mut K) + Send + 'static,
    M: Fn(&K) -> I + Send + Sync + 'static,
    I: IntoIterator<Item = ObjectRef<PortMapping>> + 'static,
{
    let (reader, writer) = reflector::store::<K>();
    let stream = watcher(api, config)
        .default_backoff()
        .modify(strip)
        .reflect(writer)
        .touched_objects();
    let task = drive(stream, what, map, trigger);
    (reader, task)
}

async fn drive<K, St, M, I>(stream: St, what: &'static str, map: M, trigger: Trigger)
where
    K: Resource + Send,
    St: Stream<Item = Result<K, watcher::Error>> + Send,
    M: Fn(&K) -> I + Send + Sync,
    I: IntoIterator<Item = ObjectRef<PortMapping>>,
{
    let mut stream = std::pin::pin!(stream.map_err(Arc::new));
    while let Some(item) = stream.next().await {
        match item {
            Ok(obj) => {
                for target in map(&obj) {
                    debug!(watch = what, object = %obj.name_any(), portmapping = %target, "queueing reconcile");
                    if trigger.unbounded_send(target).is_err() {
                        // The controller has stopped: nothing left to trigger.
                        return;
                    }
                }
            }
            // The backoff retries; the store keeps serving its last state meanwhile.
            Err(err) => warn!(watch = what, error = %err, "watch failed; retrying with backoff"),
        }
    }
}

/// Drops server bookkeeping that reconciles never read.
pub fn strip_managed_fields<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

/// Whether a store has finished its first list (never blocks).
pub fn is_ready<K>(store: &Store<K>) -> bool
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    use futures::FutureExt;
    matches!(store.wait_until_ready().now_or_never(), Some(Ok(())))
}
