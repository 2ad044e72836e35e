//! The versioned in-memory store: one global resourceVersion, per-type object maps, a global event
//! log (ring buffer) and the watch subscribers (docs/emulator-spec.md §2, §3.6). Everything
//! observable happens under one mutex so watch order equals commit order.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;

use serde_json::Value;
use tokio::sync::mpsc;

use crate::clock::Clock;
use crate::meta;
use crate::registry::{GroupResource, ResourceType};
use crate::selector::{FieldSelector, LabelSelector};

/// Watch event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Object created.
    Added,
    /// Object changed.
    Modified,
    /// Object removed.
    Deleted,
}

impl EventType {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One committed change.
#[derive(Debug, Clone)]
pub struct LogEntry {
    /// Revision of this change.
    pub rv: u64,
    /// Resource type.
    pub gr: GroupResource,
    /// Store key (`ns/name` or `name`) of the changed object.
    pub key: String,
    /// Change kind.
    pub etype: EventType,
    /// New state (for Deleted: last state carrying the deletion revision).
    pub obj: Arc<Value>,
    /// Previous state as it was stored (Modified and Deleted; None for Added): what an exact-RV
    /// list of an older revision puts back when it undoes this change.
    pub prev: Option<Arc<Value>>,
    /// When committed, by the emulator clock (age-based retention).
    pub at: Timestamp,
    /// `obj` serialised once, shared by every watcher that receives it (fan-out cost).
    pub json: JsonCache,
}

/// Lazily serialised JSON of one event object.
pub type JsonCache = Arc<std::sync::OnceLock<bytes::Bytes>>;

/// What a watch stream receives from the store.
#[derive(Debug, Clone)]
pub enum WatchMsg {
    /// An event for the client (with the shared serialisation of the object).
    Event(EventType, Arc<Value>, JsonCache),
    /// Bookmark at this revision.
    Bookmark(u64),
    /// Initial-events-end bookmark (sendInitialEvents).
    InitialEnd(u64),
}

/// A registered watch.
#[derive(Debug)]
pub struct Subscriber {
    /// Id.
    pub id: u64,
    /// Watched type.
    pub gr: GroupResource,
    /// Namespace filter.
    pub namespace: Option<String>,
    /// Label filter.
    pub labels: LabelSelector,
    /// Field filter.
    pub fields: FieldSelector,
    /// Channel to the watch task.
    pub tx: mpsc::Sender<WatchMsg>,
}

impl Subscriber {
    fn matches(&self, obj: &Value) -> bool {
        if let Some(ns) = &self.namespace
            && meta::str_at(obj, "/metadata/namespace") != Some(ns.as_str())
        {
            return false;
        }
        self.labels.matches(obj) && self.fields.matches(obj)
    }

    /// Events this subscriber sees for one log entry (selector transitions, docs/emulator-spec.md
    /// §3.4).
    pub fn translate(&self, e: &LogEntry) -> Option<WatchMsg> {
        if e.gr != self.gr {
            return None;
        }
        match e.etype {
            EventType::Added => self
                .matches(&e.obj)
                .then(|| WatchMsg::Event(EventType::Added, e.obj.clone(), e.json.clone())),
            EventType::Deleted => self
                .matches(&e.obj)
                .then(|| WatchMsg::Event(EventType::Deleted, e.obj.clone(), e.json.clone())),
            EventType::Modified => {
                let now = self.matches(&e.obj);
                let before = e.prev.as_ref().is_some_and(|p| self.matches(p));
                match (before, now) {
                    (true, true) => Some(WatchMsg::Event(
                        EventType::Modified,
                        e.obj.clone(),
                        e.json.clone(),
                    )),
                    (false, true) => Some(WatchMsg::Event(
                        EventType::Added,
                        e.obj.clone(),
                        e.json.clone(),
                    )),
                    (true, false) => {
                        // Leaving the selection: previous state with the event's revision.
                        let mut p = e
                            .prev
                            .as_ref()
                            .map(|p| (**p).clone())
                            .unwrap_or(Value::Null);
                        meta::set_rv(&mut p, e.rv);
                        Some(WatchMsg::Event(
                            EventType::Deleted,
                            Arc::new(p),
                            JsonCache::default(),
                        ))
                    }
                    (false, false) => None,
                }
            }
        }
    }
}

/// A materialised list snapshot for `continue` tokens.
#[derive(Debug)]
pub struct ListSnapshot {
    /// Revision the list reflects.
    pub rv: u64,
    /// All matching items, sorted by key.
    pub items: Vec<(String, Arc<Value>)>,
    /// Creation time by the emulator clock (continue-token TTL).
    pub at: Timestamp,
}

/// Retention settings.
#[derive(Debug, Clone)]
pub struct Retention {
    /// Max events kept.
    pub max_events: usize,
    /// Max event age.
    pub max_age: Duration,
    /// Continue-token TTL.
    pub list_ttl: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            max_events: 10_000,
            max_age: Duration::from_secs(300),
            list_ttl: Duration::from_secs(300),
        }
    }
}

/// Store key of an object: `ns/name` or `name`.
pub fn key(ns: Option<&str>, name: &str) -> String {
    match ns {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

/// Objects of one map in key order, restricted to a namespace and the selectors.
fn filter(
    m: &BTreeMap<String, Arc<Value>>,
    ns: Option<&str>,
    labels: &LabelSelector,
    fields: &FieldSelector,
) -> Vec<(String, Arc<Value>)> {
    let iter: Box<dyn Iterator<Item = (&String, &Arc<Value>)>> = match ns {
        Some(ns) => {
            let start = format!("{ns}/");
            let end = format!("{ns}0"); // '0' follows '/' in byte order
            Box::new(m.range(start..end))
        }
        None => Box::new(m.iter()),
    };
    iter.filter(|(_, o)| labels.matches(o) && fields.matches(o))
        .map(|(k, o)| (k.clone(), o.clone()))
        .collect()
}

/// The state behind the store mutex.
#[derive(Debug)]
pub struct State {
    /// Global revision (last assigned).
    pub rv: u64,
    /// Watches starting at a revision below this get 410 (events after it are retained).
    pub compacted_rv: u64,
    /// Objects per type, keyed by `ns/name`.
    pub objects: HashMap<GroupResource, BTreeMap<String, Arc<Value>>>,
    /// Event log.
    pub log: VecDeque<LogEntry>,
    /// Watches.
    pub watchers: Vec<Subscriber>,
    /// Served types (built-ins + Established CRDs).
    pub types: BTreeMap<GroupResource, Arc<ResourceType>>,
    /// Paged list snapshots by id.
    pub lists: HashMap<u64, ListSnapshot>,
    /// Id source for watchers and snapshots.
    pub next_id: u64,
    /// Next ClusterIP offset in the IPv4 service CIDR (10.96.0.0/16).
    pub next_cluster_ip: u32,
    /// Next ClusterIP offset in the IPv6 service CIDR (fd00:10:96::/112).
    pub next_cluster_ip_v6: u32,
    /// Next NodePort.
    pub next_node_port: u32,
    /// Retention.
    pub retention: Retention,
    /// Source of server-set times and of time-based expiry.
    pub clock: Arc<Clock>,
    /// `dryRun=All` in progress: writes compute their result but change nothing.
    pub dry_run: bool,
    /// The garbage collector needs a full pass: an object was removed or is being deleted (it
    /// may be an owner), or a snapshot was restored.
    pub gc_dirty: bool,
    /// Objects whose ownerReferences appeared or changed since the last pass: the collector only
    /// checks that their owners exist (a full pass only when one does not), so writes of
    /// dependents cost a lookup per owner, not a scan of the store.
    pub gc_pending: Vec<(GroupResource, String)>,
    /// A graceful delete of a pod bound to a node leaves it Terminating until a delete with
    /// grace 0, as on a cluster without kubelets ([`crate::instance::Config`]).
    pub graceful_pod_deletion: bool,
}

impl State {
    /// Fresh state with the built-in types.
    pub fn new(retention: Retention, clock: Arc<Clock>) -> Self {
        let types = crate::registry::builtins()
            .into_iter()
            .map(|rt| (rt.gr(), Arc::new(rt)))
            .collect();
        Self {
            rv: 1,
            compacted_rv: 1,
            objects: HashMap::new(),
            log: VecDeque::new(),
            watchers: Vec::new(),
            types,
            lists: HashMap::new(),
            next_id: 1,
            next_cluster_ip: 10,
            next_cluster_ip_v6: 10,
            next_node_port: 30000,
            retention,
            clock,
            dry_run: false,
            gc_dirty: true,
            gc_pending: Vec::new(),
            graceful_pod_deletion: false,
        }
    }

    /// Look up a served type.
    pub fn resolve(&self, group: &str, version: &str, resource: &str) -> Option<Arc<ResourceType>> {
        self.types
            .get(&GroupResource::new(group, resource))
            .filter(|rt| rt.version == version)
            .cloned()
    }

    /// Read one object.
    pub fn get(&self, gr: &GroupResource, k: &str) -> Option<Arc<Value>> {
        self.objects.get(gr).and_then(|m| m.get(k)).cloned()
    }

    /// Fresh id.
    pub fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn push(&mut self, entry: LogEntry) {
        let marked = |o: &Value| o.pointer("/metadata/deletionTimestamp").is_some();
        fn owners(o: &Value) -> Option<&Value> {
            o.pointer("/metadata/ownerReferences")
        }
        if entry.etype == EventType::Deleted
            || marked(&entry.obj)
            || entry.prev.as_deref().is_some_and(marked)
        {
            self.gc_dirty = true;
        } else if owners(&entry.obj).is_some()
            && owners(&entry.obj) != entry.prev.as_deref().and_then(owners)
        {
            self.gc_pending.push((entry.gr.clone(), entry.key.clone()));
        }
        self.watchers.retain(|w| match w.translate(&entry) {
            // A watcher that cannot keep up is closed; the client re-watches (real servers do the same).
            Some(msg) => w.tx.try_send(msg).is_ok(),
            None => !w.tx.is_closed(),
        });
        self.log.push_back(entry);
        self.trim();
    }

    /// Apply retention to the event log and the list snapshots (also after the clock moved).
    pub fn trim(&mut self) {
        while let Some(front) = self.log.front() {
            let too_many = self.log.len() > self.retention.max_events;
            let too_old = self.clock.elapsed(front.at) > self.retention.max_age;
            if !(too_many || too_old) {
                break;
            }
            self.compacted_rv = front.rv;
            self.log.pop_front();
        }
        let ttl = self.retention.list_ttl;
        let clock = self.clock.clone();
        self.lists.retain(|_, s| clock.elapsed(s.at) <= ttl);
    }

    /// Drop all history: every watch resuming from an older revision gets 410.
    pub fn compact_now(&mut self) {
        // Skip one revision so that every resourceVersion handed out so far is older than the
        // compaction point (a resumed watch gets 410) while a fresh list+watch works at once.
        self.rv += 1;
        self.log.clear();
        self.compacted_rv = self.rv;
        self.lists.clear();
    }

    /// Persist a new object (ADDED).
    pub fn insert(&mut self, gr: &GroupResource, k: String, mut obj: Value) -> Arc<Value> {
        if self.dry_run {
            meta::meta_mut(&mut obj).remove("resourceVersion");
            return Arc::new(obj);
        }
        self.rv += 1;
        meta::set_rv(&mut obj, self.rv);
        let obj = Arc::new(obj);
        self.objects
            .entry(gr.clone())
            .or_default()
            .insert(k.clone(), obj.clone());
        let e = LogEntry {
            rv: self.rv,
            gr: gr.clone(),
            key: k,
            etype: EventType::Added,
            obj: obj.clone(),
            prev: None,
            at: self.clock.now(),
            json: JsonCache::default(),
        };
        self.push(e);
        obj
    }

    /// Replace an existing object (MODIFIED).
    pub fn replace(&mut self, gr: &GroupResource, k: String, mut obj: Value) -> Arc<Value> {
        if self.dry_run {
            return Arc::new(obj);
        }
        self.rv += 1;
        meta::set_rv(&mut obj, self.rv);
        let obj = Arc::new(obj);
        let prev = self
            .objects
            .entry(gr.clone())
            .or_default()
            .insert(k.clone(), obj.clone());
        let e = LogEntry {
            rv: self.rv,
            gr: gr.clone(),
            key: k,
            etype: EventType::Modified,
            obj: obj.clone(),
            prev,
            at: self.clock.now(),
            json: JsonCache::default(),
        };
        self.push(e);
        obj
    }

    /// Remove an object (DELETED with the deletion revision); returns the last state.
    pub fn remove(&mut self, gr: &GroupResource, k: &str) -> Option<Arc<Value>> {
        self.remove_as(gr, k, |_| {})
    }

    /// Remove an object whose last state is the stored one changed by `last_change` (the
    /// deletion fields a graceful delete of grace 0 sets as it removes a pod).
    pub fn remove_as(
        &mut self,
        gr: &GroupResource,
        k: &str,
        last_change: impl FnOnce(&mut Value),
    ) -> Option<Arc<Value>> {
        if self.dry_run {
            return self.get(gr, k);
        }
        let prev = self.objects.get_mut(gr)?.remove(k)?;
        self.rv += 1;
        let mut last = (*prev).clone();
        last_change(&mut last);
        meta::set_rv(&mut last, self.rv);
        let last = Arc::new(last);
        let e = LogEntry {
            rv: self.rv,
            gr: gr.clone(),
            key: k.to_string(),
            etype: EventType::Deleted,
            obj: last.clone(),
            prev: Some(prev),
            at: self.clock.now(),
            json: JsonCache::default(),
        };
        self.push(e);
        Some(last)
    }

    /// All objects of a type, sorted by key, filtered.
    pub fn select(
        &self,
        gr: &GroupResource,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> Vec<(String, Arc<Value>)> {
        match self.objects.get(gr) {
            Some(m) => filter(m, ns, labels, fields),
            None => Vec::new(),
        }
    }

    /// The objects of a type as they were at revision `at`, sorted by key, filtered: the
    /// current objects with every logged change newer than `at` undone (newest first). `None`
    /// when `at` is older than the retained history (docs/emulator-spec.md §3.3: 410 Expired).
    pub fn select_at(
        &self,
        gr: &GroupResource,
        at: u64,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> Option<Vec<(String, Arc<Value>)>> {
        if at >= self.rv {
            return Some(self.select(gr, ns, labels, fields));
        }
        // Every event after `compacted_rv` is retained (trim and compact_now move it), so the
        // undo below is complete exactly when `at` is not older than it.
        if at < self.compacted_rv {
            return None;
        }
        let mut m = self.objects.get(gr).cloned().unwrap_or_default();
        for e in self.log.iter().rev().take_while(|e| e.rv > at) {
            if e.gr != *gr {
                continue;
            }
            match &e.prev {
                Some(p) => m.insert(e.key.clone(), p.clone()),
                None => m.remove(&e.key),
            };
        }
        Some(filter(&m, ns, labels, fields))
    }

    /// One object as it was at revision `at` (`Some(None)`: it did not exist then); `None` when
    /// `at` is older than the retained history.
    pub fn get_at(&self, gr: &GroupResource, k: &str, at: u64) -> Option<Option<Arc<Value>>> {
        if at < self.compacted_rv && at < self.rv {
            return None;
        }
        let mut cur = self.get(gr, k);
        for e in self.log.iter().rev().take_while(|e| e.rv > at) {
            if e.gr == *gr && e.key == k {
                cur = e.prev.clone();
            }
        }
        Some(cur)
    }

    /// The revision a read lagging `lag` revisions behind sees: never older than the history.
    pub fn lagging_rv(&self, lag: u64) -> u64 {
        self.rv.saturating_sub(lag).max(self.compacted_rv)
    }

    /// Deliver a message to one watcher (bookmarks: ordered after every event already queued).
    pub fn send_to(&mut self, id: u64, msg: WatchMsg) -> bool {
        match self.watchers.iter().find(|w| w.id == id) {
            Some(w) => w.tx.try_send(msg).is_ok(),
            None => false,
        }
    }

    /// Remove a watcher.
    pub fn unsubscribe(&mut self, id: u64) {
        self.watchers.retain(|w| w.id != id);
    }

    /// Close every watch (restart simulation).
    pub fn close_all_watches(&mut self) {
        self.watchers.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(v: &str) -> Value {
        json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns"},"data":{"v":v}})
    }

    #[test]
    fn select_at_reaches_back_exactly_as_far_as_the_retained_history() {
        let mut st = State::new(
            Retention {
                max_events: 2,
                ..Retention::default()
            },
            Arc::default(),
        );
        let gr = GroupResource::new("", "configmaps");
        let (l, f) = (LabelSelector::default(), FieldSelector::default());
        let k = key(Some("ns"), "a");
        st.insert(&gr, k.clone(), cm("1"));
        let r1 = st.rv;
        st.replace(&gr, k.clone(), cm("2"));
        let r2 = st.rv;
        st.replace(&gr, k.clone(), cm("3"));
        st.remove(&gr, &k);
        // Four events, two retained: the state after the second is the oldest one rebuildable.
        assert_eq!(st.compacted_rv, r2);
        let at = |st: &State, rv| {
            st.select_at(&gr, rv, Some("ns"), &l, &f).map(|v| {
                v.iter()
                    .map(|(_, o)| o["data"]["v"].clone())
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(at(&st, r2), Some(vec![json!("2")]));
        assert_eq!(at(&st, r2 + 1), Some(vec![json!("3")]));
        assert_eq!(at(&st, st.rv), Some(vec![]));
        assert_eq!(at(&st, r1), None);
        assert_eq!(
            st.get_at(&gr, &k, r2)
                .flatten()
                .map(|o| o["data"]["v"].clone()),
            Some(json!("2"))
        );
        assert_eq!(st.get_at(&gr, &k, st.rv), Some(None));
        assert_eq!(st.get_at(&gr, &k, r1), None);
        assert_eq!(st.lagging_rv(1), st.rv - 1);
        assert_eq!(st.lagging_rv(100), r2);
    }
}
