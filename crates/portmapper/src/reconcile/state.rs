//! One state per PortMapping: everything the operator remembers about it between passes, in
//! one map, so one [`States::forget`] drops all of it (the PortMapping was deleted, withdrew, or
//! this replica stopped leading). The failure backoff keeps its own map ([`Backoffs`]: the error
//! policy reads it outside any pass), and so does the batch window ([`BatchWindows`]: read
//! before a pass starts); both are forgotten with the rest.
//!
//! - **memo**: what the last plan evaluated, so the next re-evaluates only the pods that
//!   changed (taken out for the plan, put back after it).
//! - **ledger**: the Warnings already published ([`Ledger`]): each is sent once per occurrence
//!   and re-armed when its cause clears.
//! - **status written**: the status this operator last wrote, with the resourceVersion of the
//!   object it was computed from: until our write reaches the cache, the cached object still
//!   carries the older status, and comparing with it would re-send the same status.
//! - **status written at**: when that status write was answered: a change of the counts
//!   alone within the window after it is held until the window ends
//!   ([`portmapper_core::report::status_due`], decided in `plan.rs`).
//! - **status refused**: the last status the server refused: a backing-off pass does not send
//!   it again while its writes keep failing (`execute.rs`, `Mode::Probe`).
//! - **gates written**: likewise for publication gates: each written gate is remembered with
//!   the resourceVersion of the pod it was planned from; while the cache still shows that
//!   version the same gate is not sent again.
//! - **settled**: quiet passes. A resync reconciles every PortMapping, and one whose inputs have
//!   not changed since a pass that wrote nothing would plan the same nothing again (at 1,000
//!   PortMappings, about 0.3 s of CPU every resync). "Its inputs have not changed" is read from
//!   the PortMapping's resourceVersion and how many reconciles were queued for it
//!   ([`crate::index::trigger::Trigger`] counts them: every watch event that touches it and every probe
//!   membership flip). Only a pass that read nothing but the caches may be taken as settled.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use kube::runtime::reflector::ObjectRef;
use portmapper_api::{PortMapping, PortMappingStatus};
use portmapper_core::report::PlannedStatus;
use portmapper_core::{EvalMemo, Ledger, PlannedEvent, PodGate};
use tokio::time::Instant;

use crate::reconcile::backoff::Backoffs;
use crate::reconcile::batch_window::BatchWindows;

type Key = ObjectRef<PortMapping>;

/// Bound on the gates remembered per PortMapping (entries of deleted pods are never met
/// again): past it the memory is dropped, which costs at most one repeated write per pod.
const MAX_GATES_REMEMBERED: usize = 10_000;

/// What a pass saw of a PortMapping's inputs before it read any of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fingerprint {
    /// The PortMapping's resourceVersion (its spec, labels, annotations and status).
    pub resource_version: Option<String>,
    /// Reconciles queued for it so far.
    pub queued: u64,
}

/// A gate as it was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
struct SentGate {
    /// resourceVersion of the cached pod the gate was planned from.
    pod_version: String,
    status: bool,
    reason: &'static str,
    message: String,
}

impl SentGate {
    fn of(gate: &PodGate, pod_version: &str) -> Self {
        Self {
            pod_version: pod_version.to_owned(),
            status: gate.status,
            reason: gate.reason,
            message: gate.message.clone(),
        }
    }
}

/// What the operator remembers about one PortMapping (see the module doc).
#[derive(Default)]
pub struct MappingState {
    /// The UID of the PortMapping this state belongs to: a PortMapping deleted and created
    /// again under its name starts afresh even when a pass of the old one, still running when
    /// the deletion was forgotten, wrote its state back after it.
    uid: Option<String>,
    /// Boxed: a memo is 1.5 KB inline, and the map of states holds a slot per PortMapping and
    /// as many again free (16 MB of table at 5,000 PortMappings, unboxed).
    memo: Option<Box<EvalMemo>>,
    ledger: Ledger,
    status_written: Option<(String, PortMappingStatus)>,
    /// Since when a change of the counts alone has been held back (`report::status_due`),
    /// until the status is written or says what the server holds again.
    counts_held_at: Option<Instant>,
    /// The last status the server refused, until a status write goes through.
    status_refused: Option<PlannedStatus>,
    /// By pod UID and condition type.
    gates_written: HashMap<(String, String), SentGate>,
    settled: Option<Fingerprint>,
}

/// The state of every PortMapping.
#[derive(Default)]
pub struct States {
    mappings: Mutex<HashMap<Key, MappingState>>,
    /// Failure counts and retry windows: a reconcile inside its window writes nothing (watch
    /// events would otherwise retry a failing PortMapping at the event rate).
    pub backoff: Backoffs,
    /// When each PortMapping's last writing pass ended (`batch_window.rs`).
    pub batches: BatchWindows,
}

impl States {
    /// The states of a controller whose passes wait `batch_window` after a pass that wrote.
    pub fn new(batch_window: std::time::Duration) -> Self {
        Self {
            batches: BatchWindows::new(batch_window),
            ..Self::default()
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Key, MappingState>> {
        // A panic while holding it leaves hints only: keep using them.
        self.mappings.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn with<T>(&self, pm: &Key, f: impl FnOnce(&mut MappingState) -> T) -> T {
        let mut mappings = self.lock();
        let state = mappings.entry(pm.clone()).or_default();
        // Keys compare by namespace and name only; a key that carries a UID (every pass's
        // does) names the object the state must belong to.
        if pm.extra.uid.is_some() && state.uid != pm.extra.uid {
            *state = MappingState {
                uid: pm.extra.uid.clone(),
                ..MappingState::default()
            };
        }
        f(state)
    }

    /// Drops everything remembered about `pm`: a PortMapping of the same name, or this one
    /// under a new leader, starts afresh.
    pub fn forget(&self, pm: &Key) {
        self.lock().remove(pm);
        self.backoff.forget(pm);
        self.batches.forget(pm);
    }

    /// Whether a pass that starts from `seen` would find what the last settled pass found.
    /// Otherwise the settled pass is forgotten, so a pass that fails cannot leave it behind.
    pub fn is_quiet(&self, pm: &Key, seen: &Fingerprint) -> bool {
        let mut mappings = self.lock();
        let Some(state) = mappings.get_mut(pm) else {
            return false;
        };
        if state.settled.as_ref() == Some(seen) {
            return true;
        }
        state.settled = None;
        false
    }

    /// The pass that started from `seen` wrote nothing and read only caches.
    pub fn settled(&self, pm: &Key, seen: Fingerprint) {
        self.with(pm, |s| s.settled = Some(seen));
    }

    /// The memo of `pm`'s last plan (empty the first time), to be handed back with
    /// [`States::keep_memo`].
    pub fn take_memo(&self, pm: &Key) -> EvalMemo {
        self.with(pm, |s| s.memo.take().map(|m| *m).unwrap_or_default())
    }

    /// Keeps `memo` for `pm`'s next plan.
    pub fn keep_memo(&self, pm: &Key, memo: EvalMemo) {
        self.with(pm, |s| s.memo = Some(Box::new(memo)));
    }

    /// The events of one pass that are news ([`Ledger::news`]), recorded as published.
    pub fn news<'e>(
        &self,
        pm: &Key,
        events: &'e [PlannedEvent],
        covers: &[portmapper_core::EventReason],
    ) -> Vec<&'e PlannedEvent> {
        self.with(pm, |s| s.ledger.news(events, covers))
    }

    /// The status the server holds for `pm` as far as this operator knows: the one it last
    /// wrote when `pm` is still the object that write was computed from (the cache has not
    /// seen the write yet), else `pm`'s own.
    pub fn known_status(&self, pm: &PortMapping) -> PortMappingStatus {
        let key = ObjectRef::from_obj(pm);
        let written = self.lock().get(&key).and_then(|s| s.status_written.clone());
        match (written, &pm.metadata.resource_version) {
            (Some((rv, status)), Some(current)) if rv == *current => status,
            _ => pm.status.clone().unwrap_or_default(),
        }
    }

    /// Records a status written for `pm` (computed from `pm`).
    pub fn status_written(&self, pm: &PortMapping, status: &PortMappingStatus) {
        let Some(rv) = pm.metadata.resource_version.clone() else {
            return;
        };
        self.with(&ObjectRef::from_obj(pm), |s| {
            s.status_written = Some((rv, status.clone()));
            s.counts_held_at = None;
        });
    }

    /// How long at `now` `pm`'s counts have been held back (`None`: not held).
    pub fn counts_held_for(&self, pm: &Key, now: Instant) -> Option<std::time::Duration> {
        let at = self.lock().get(pm).and_then(|s| s.counts_held_at)?;
        Some(now.saturating_duration_since(at))
    }

    /// `pm`'s counts are held back (`held`: since `now` unless they already were), or not.
    pub fn hold_counts(&self, pm: &Key, held: bool, now: Instant) {
        self.with(pm, |s| {
            s.counts_held_at = held.then(|| s.counts_held_at.unwrap_or(now));
        });
    }

    /// Ends the window of `pm`'s held counts, as if they were held long ago.
    #[cfg(test)]
    pub fn status_window_ended(&self, pm: &Key) {
        self.with(pm, |s| {
            s.counts_held_at = s
                .counts_held_at
                .map(|_| Instant::now() - std::time::Duration::from_secs(3600));
        });
    }

    /// Records the answer to a write of `planned`: a refusal is remembered until a status write
    /// goes through.
    pub fn status_answered(&self, pm: &Key, planned: &PlannedStatus, ok: bool) {
        self.with(pm, |s| {
            s.status_refused = (!ok).then(|| planned.clone());
        });
    }

    /// Whether `planned` says what the status the server refused last said: the same ports
    /// and the same conditions (type, status, reason; a message naming another failed write is
    /// no news).
    pub fn status_refused(&self, pm: &Key, planned: &PlannedStatus) -> bool {
        let said = |p: &PlannedStatus| {
            let conditions: Vec<_> = p
                .conditions
                .iter()
                .map(|c| (c.type_, c.status, c.reason.clone()))
                .collect();
            (conditions, p.publication.clone())
        };
        self.with(pm, |s| {
            s.status_refused
                .as_ref()
                .is_some_and(|refused| said(refused) == said(planned))
        })
    }

    /// Whether `gate`, planned from the pod at `pod_version`, was already written and the
    /// cache lags: then it is not sent again.
    pub fn gate_sent(&self, pm: &Key, gate: &PodGate, pod_version: &str) -> bool {
        self.with(pm, |s| {
            s.gates_written.get(&gate_key(gate)) == Some(&SentGate::of(gate, pod_version))
        })
    }

    /// Records the answer to a gate write: remembered when written, forgotten when the pod is
    /// gone or the write failed.
    pub fn gate_answered(&self, pm: &Key, gate: &PodGate, pod_version: &str, written: bool) {
        self.with(pm, |s| {
            if s.gates_written.len() > MAX_GATES_REMEMBERED {
                s.gates_written.clear();
            }
            if written {
                let sent = SentGate::of(gate, pod_version);
                s.gates_written.insert(gate_key(gate), sent);
            } else {
                s.gates_written.remove(&gate_key(gate));
            }
        });
    }
}

fn gate_key(gate: &PodGate) -> (String, String) {
    (gate.uid.clone(), gate.condition_type.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pm(rv: &str) -> PortMapping {
        let mut pm = PortMapping::new("web", test_support::spec("web", "app"));
        pm.metadata.namespace = Some("default".into());
        pm.metadata.resource_version = Some(rv.into());
        pm
    }

    fn seen(rv: &str, queued: u64) -> Fingerprint {
        Fingerprint {
            resource_version: Some(rv.into()),
            queued,
        }
    }

    #[test]
    fn a_pass_is_quiet_only_while_nothing_it_reads_has_changed() {
        let states = States::default();
        let key = Key::new("web").within("default");
        assert!(
            !states.is_quiet(&key, &seen("1", 0)),
            "nothing is settled yet"
        );
        states.settled(&key, seen("1", 0));
        assert!(states.is_quiet(&key, &seen("1", 0)));
        // A new version of the PortMapping, or an event that queued a reconcile.
        assert!(!states.is_quiet(&key, &seen("2", 0)));
        // The settled pass was forgotten by the look that failed.
        assert!(!states.is_quiet(&key, &seen("1", 0)));
        states.settled(&key, seen("1", 0));
        assert!(!states.is_quiet(&key, &seen("1", 1)));
        states.settled(&key, seen("1", 1));
        states.forget(&key);
        assert!(!states.is_quiet(&key, &seen("1", 1)));
    }

    #[test]
    fn forget_drops_the_memo_the_ledger_the_status_and_the_gates_at_once() {
        let states = States::default();
        let pm = pm("5");
        let key = ObjectRef::from_obj(&pm);
        let status = PortMappingStatus {
            summary: Some("written".into()),
            ..PortMappingStatus::default()
        };
        states.status_written(&pm, &status);
        assert_eq!(states.known_status(&pm), status);
        let gate = PodGate {
            pod: "p".into(),
            condition_type: "portmapper.dev/published".into(),
            uid: "u".into(),
            status: true,
            reason: "Published",
            message: String::new(),
            last_transition_time: None,
            observed_generation: None,
        };
        states.gate_answered(&key, &gate, "7", true);
        assert!(states.gate_sent(&key, &gate, "7"));
        assert!(!states.gate_sent(&key, &gate, "8"), "the cache moved on");
        let warning = PlannedEvent::warning(portmapper_core::EventReason::UnknownPort, "x");
        assert_eq!(
            states.news(&key, std::slice::from_ref(&warning), &[]).len(),
            1
        );
        states.forget(&key);
        assert_eq!(states.known_status(&pm), PortMappingStatus::default());
        assert!(!states.gate_sent(&key, &gate, "7"));
        assert_eq!(states.news(&key, &[warning], &[]).len(), 1);
    }

    #[test]
    fn a_portmapping_created_again_under_its_name_starts_afresh_without_a_forget() {
        // A pass of the deleted PortMapping that ended after its deletion was forgotten wrote
        // its ledger back; the new object's first pass must warn again all the same.
        let states = States::default();
        let warning = PlannedEvent::warning(portmapper_core::EventReason::UnknownPort, "x");
        let key_with_uid = |rv: &str, uid: &str| {
            let mut pm = pm(rv);
            pm.metadata.uid = Some(uid.into());
            ObjectRef::from_obj(&pm)
        };
        let sent = |key: &Key| states.news(key, std::slice::from_ref(&warning), &[]).len();
        let old_key = key_with_uid("5", "uid-old");
        assert_eq!(sent(&old_key), 1);
        assert_eq!(sent(&old_key), 0, "warned once");
        let new_key = key_with_uid("9", "uid-new");
        assert_eq!(sent(&new_key), 1);
        assert_eq!(sent(&new_key), 0, "warned once");
        // A key without a UID (built from a name) reads whatever state the name has.
        let by_name = Key::new(&new_key.name).within("default");
        assert!(states.news(&by_name, &[warning], &[]).is_empty());
    }
}
