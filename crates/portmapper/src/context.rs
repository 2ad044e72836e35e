//! What every reconcile reads and writes through (the caches, the index, the prober, what was
//! last warned and written), and what it records: the outcome metrics and Warning Events. Below
//! the controller wiring and the reconcile, so both build on it without depending on each other.

use portmapper_core::EventReason;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Node, ObjectReference, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource};
use portmapper_api::{PortMapping, PortMappingStatus};
use portmapper_core::EvalMemo;
use tracing::warn;

use crate::error::Error;
use crate::index::SharedIndex;
use crate::leader::Leadership;
use crate::metrics::{CategoryLabels, Metrics, ResultLabels};
use crate::pods::PodWatches;

/// Settings of one controller instance.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Namespace scope (None = all namespaces).
    pub namespace: Option<String>,
    /// Concurrent reconciles.
    pub concurrency: u16,
    /// Requeue period of a converged PortMapping.
    pub resync: Duration,
    /// Read Nodes for zones.
    pub node_lookups: bool,
    /// Identity for Events.
    pub instance: Option<String>,
    /// Network probes in flight at once, across all PortMappings.
    pub probe_concurrency: usize,
    /// After a pass that wrote, how long the next pass of the same PortMapping waits (zero:
    /// none); see `batch_window.rs`.
    pub batch_window: Duration,
}

/// What every reconcile reads and writes through.
pub struct Context {
    pub client: Client,
    pub settings: Settings,
    pub portmappings: Store<PortMapping>,
    pub services: Store<Service>,
    pub slices: Store<EndpointSlice>,
    pub nodes: Option<Store<PartialObjectMeta<Node>>>,
    /// The legacy Endpoints objects we publish, found by our managed-by label.
    pub owned_endpoints: Store<Endpoints>,
    /// Every slice not managed by us (metadata only): the native controllers' ones are
    /// evidence for the selector migration; all of them hold names our plans may not create.
    pub native_slices: Store<PartialObjectMeta<EndpointSlice>>,
    /// What every cached object touches: the way from an object to its PortMappings and back.
    pub index: SharedIndex,
    pub pods: Arc<PodWatches>,
    pub leadership: Leadership,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    /// Probes network checks outside reconciles; reconciles read its cached results.
    pub prober: portmapper_probe::Prober,
    /// What the last plan of each PortMapping evaluated, so the next re-evaluates only the pods
    /// that changed (taken out for the plan, put back after it).
    pub memos: Mutex<HashMap<ObjectRef<PortMapping>, EvalMemo>>,
    /// Warning reasons already emitted per PortMapping, each with the occurrence it was sent
    /// for (e.g. the squatter's UID), so each warning is sent once per occurrence and re-armed
    /// when its cause clears.
    pub warned: Mutex<HashMap<ObjectRef<PortMapping>, Warned>>,
    /// The status this operator last wrote per PortMapping, with the resourceVersion of the
    /// object it was computed from: until our own write reaches the cache, the cached object
    /// still carries the older status, and comparing with it would re-send the same status.
    pub status_written: Mutex<HashMap<ObjectRef<PortMapping>, (String, PortMappingStatus)>>,
    /// Failure counts and retry windows per PortMapping: a reconcile inside its window writes
    /// nothing (watch events would otherwise retry a failing PortMapping at the event rate).
    pub backoff: crate::backoff::Backoffs,
    /// Publication gates written that the pod cache may not show yet (see `gates.rs`).
    pub gates_written: crate::gates::GatesWritten,
    /// Queued reconciles and the passes that found nothing to do (see `quiet.rs`).
    pub quiet: Arc<crate::quiet::QuietPasses>,
    /// When each PortMapping's last writing pass ended (see `batch_window.rs`).
    pub batches: crate::batch_window::BatchWindows,
}

/// Per warning slot, the occurrences last warned about.
pub type Warned = BTreeMap<&'static str, BTreeSet<String>>;

impl Context {
    /// Records that `reason` was warned for `pm`; true the first time.
    pub fn warn_once(&self, pm: &ObjectRef<PortMapping>, reason: &'static str) -> bool {
        self.warn_occurrence(pm, reason, "")
    }

    /// Records that `reason` was warned for `pm` about `occurrence`; true when that is not the
    /// occurrence last warned about (a new squatter is a new occurrence, the same one at every
    /// retry is not).
    pub fn warn_occurrence(
        &self,
        pm: &ObjectRef<PortMapping>,
        reason: &'static str,
        occurrence: &str,
    ) -> bool {
        !self
            .new_occurrences(pm, reason, BTreeSet::from([occurrence.to_owned()]))
            .is_empty()
    }

    /// The occurrences in `current` that were not there when `slot` was last looked at for
    /// `pm` (each is warned about once); `current` becomes what was seen, so an occurrence
    /// that goes away and comes back is new again.
    pub fn new_occurrences(
        &self,
        pm: &ObjectRef<PortMapping>,
        slot: &'static str,
        current: BTreeSet<String>,
    ) -> Vec<String> {
        let mut warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        let seen = warned
            .entry(pm.clone())
            .or_default()
            .entry(slot)
            .or_default();
        let new = current.difference(seen).cloned().collect();
        *seen = current;
        new
    }

    /// The occurrences in `current` never mentioned before in `slot` for `pm`; they are
    /// remembered until `pm` is forgotten (an occurrence that comes back is not new).
    pub fn first_mentions(
        &self,
        pm: &ObjectRef<PortMapping>,
        slot: &'static str,
        current: BTreeSet<String>,
    ) -> Vec<String> {
        let mut warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        let seen = warned
            .entry(pm.clone())
            .or_default()
            .entry(slot)
            .or_default();
        current
            .into_iter()
            .filter(|text| seen.insert(text.clone()))
            .collect()
    }

    /// The memo of `pm`'s last plan (empty the first time), to be handed back with
    /// [`Context::keep_memo`].
    pub fn take_memo(&self, pm: &ObjectRef<PortMapping>) -> EvalMemo {
        let mut memos = self.memos.lock().unwrap_or_else(|p| p.into_inner());
        memos.remove(pm).unwrap_or_default()
    }

    /// Keeps `memo` for `pm`'s next plan.
    pub fn keep_memo(&self, pm: &ObjectRef<PortMapping>, memo: EvalMemo) {
        let mut memos = self.memos.lock().unwrap_or_else(|p| p.into_inner());
        memos.insert(pm.clone(), memo);
    }

    /// Re-arms `reason` for `pm` once its cause has cleared.
    pub fn clear_warning(&self, pm: &ObjectRef<PortMapping>, reason: &'static str) {
        let mut warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(seen) = warned.get_mut(pm) {
            seen.remove(reason);
        }
    }

    /// The status the server holds for `pm` as far as this operator knows: the one it last
    /// wrote when `pm` is still the object that write was computed from (the cache has not
    /// seen the write yet), else `pm`'s own.
    pub fn known_status(&self, pm: &PortMapping) -> PortMappingStatus {
        let written = self
            .status_written
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match (
            written.get(&ObjectRef::from_obj(pm)),
            &pm.metadata.resource_version,
        ) {
            (Some((rv, status)), Some(current)) if rv == current => status.clone(),
            _ => pm.status.clone().unwrap_or_default(),
        }
    }

    /// Drops what was remembered about a deleted PortMapping: a new one of the same name starts
    /// with its own memo, warnings and status.
    pub fn forget(&self, pm: &ObjectRef<PortMapping>) {
        self.memos
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(pm);
        self.warned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(pm);
        self.status_written
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(pm);
        self.backoff.forget(pm);
        self.quiet.forget(pm);
        self.batches.forget(pm);
    }

    /// Records a status written for `pm` (computed from `pm`).
    pub fn status_was_written(&self, pm: &PortMapping, status: &PortMappingStatus) {
        let Some(rv) = pm.metadata.resource_version.clone() else {
            return;
        };
        self.status_written
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(ObjectRef::from_obj(pm), (rv, status.clone()));
    }
}

/// Records the outcome of one reconcile in the metrics.
pub fn record(metrics: &Metrics, result: &Result<Action, Error>) {
    match result {
        Ok(_) => {
            metrics
                .reconciles
                .get_or_create(&ResultLabels { result: "success" })
                .inc();
        }
        Err(err) => {
            metrics
                .reconciles
                .get_or_create(&ResultLabels { result: "error" })
                .inc();
            metrics
                .reconcile_errors
                .get_or_create(&CategoryLabels {
                    category: err.category(),
                })
                .inc();
        }
    }
}

/// A Warning Event about `pm`.
pub(crate) async fn warn_event(
    ctx: &Context,
    pm: &PortMapping,
    pm_ref: &ObjectRef<PortMapping>,
    reason: EventReason,
    note: &str,
) {
    publish_warning(ctx, pm, pm_ref, reason, note, None).await;
}

/// A Warning Event about `pm`, with `related` as its secondary object.
pub(crate) async fn publish_warning(
    ctx: &Context,
    pm: &PortMapping,
    pm_ref: &ObjectRef<PortMapping>,
    reason: EventReason,
    note: &str,
    related: Option<ObjectReference>,
) {
    let event = Event {
        type_: EventType::Warning,
        reason: reason.to_string(),
        note: Some(truncate_note(note)),
        action: "Reconcile".to_string(),
        secondary: related,
    };
    if !ctx.leadership.is_leader() {
        return;
    }
    if let Err(err) = ctx.recorder.publish(&event, &pm.object_ref(&())).await {
        warn!(portmapping = %pm_ref, reason = reason.as_str(), error = %err, "publishing a Warning event failed");
    } else {
        ctx.metrics.write("create", "events");
    }
}

fn truncate_note(note: &str) -> String {
    if note.len() <= 1000 {
        return note.to_string();
    }
    let mut end = 997;
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &note[..end])
}
