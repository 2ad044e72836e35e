//! The writes of one pass, as data: ordered phases, each a list of independent writes and the
//! earlier phases it waits for. The operator's one executor runs them as they are (a phase
//! whose guard failed is skipped), so the write order and its conditions live here, next
//! to the planner, not in the code that sends the requests.
//!
//! - Slices: the writes that take nothing away (creations, updates that only add or change
//!   endpoints), then the updates that withdraw a ready or serving endpoint from a port
//!   ([`PlannedSlice::withdraws`]), then the deletions, so endpoints moving between slices are
//!   never missing from all of them (when one port drops a pod that other ports keep, the
//!   pod's new port-set slice holds it before its old one loses it: written together, a real
//!   node's test saw the pod briefly missing from the ports that kept it), and no deletion once
//!   a write failed: the slice a deletion retires may hold the only copy of endpoints the
//!   failed write was to publish elsewhere (a
//!   switch of `sliceGrouping`, the upgrade from per-port slices); the next pass plans the
//!   deletions again.
//! - Publication gates: those that claim no publication (False, Released, TimedOut), then the
//!   Published ones, and a Published gate only once every slice write succeeded (a pod is
//!   marked published only once the slices naming it are stored; a slice at a name someone
//!   else holds is never stored, so then no Published gate is written).
//! - Our Endpoints objects (apply, adopt, delete), then the native Endpoints object, then the
//!   native controllers' slices, which wait for that object's deletion: they are the evidence
//!   that brings the next pass back to it.
//! - Teardown (the Service is gone): slices, Endpoints, then the gates, once both succeeded.
//! - First of all, the release of pods that left the pool; last, the release finalizer
//!   ([`RELEASE_FINALIZER`]): added with no condition, removed only once every earlier write
//!   of the pass succeeded (the pool's gates are then released and the deletion may go on).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::compact_slice::CompactSlice;
use crate::planner::migration::Step;
use crate::planner::{
    FinalizerChange, Plan, PlannedSlice, PodGate, RELEASE_FINALIZER, WriteAction,
};
use crate::pod_record::PodRecord;

/// One write.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// Create one of our slices (a POST): its name is free as far as the caches show. Held
    /// compact: the executor builds the object it sends as it sends it, so a publication's
    /// writes are never all full objects at once.
    CreateSlice(Arc<CompactSlice>),
    /// Replace one of our slices (a PUT) whose stored version the caches show: the object
    /// carries that `metadata.resourceVersion`, so a slice changed since is refused (409), never
    /// overwritten unseen.
    UpdateSlice(Arc<CompactSlice>),
    /// Delete one of our slices (UID precondition).
    DeleteSlice {
        /// Name.
        name: String,
        /// UID the planner saw.
        uid: String,
    },
    /// Set one pod's publication gate condition.
    SetGate {
        /// The condition.
        gate: PodGate,
        /// resourceVersion of the pod it was planned from (what a lagging cache still shows).
        pod_version: String,
    },
    /// Add this finalizer to the PortMapping.
    AddFinalizer(&'static str),
    /// Remove this finalizer from the PortMapping.
    RemoveFinalizer(&'static str),
    /// A write of the migration steps ([`Step::ApplyEndpoints`], [`Step::AdoptEndpoints`],
    /// [`Step::DeleteEndpoints`], [`Step::DeleteNativeSlice`]; their Warn and Normal steps are
    /// the report's Events, never a write).
    Migration(Box<Step>),
}

/// The phases, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PhaseKind {
    /// Releases of pods that left the pool (True, `Released`).
    ReleasedGates,
    /// Writes of our slices that take no endpoint away: creations and additive updates.
    SliceWrites,
    /// Updates of our slices that withdraw an endpoint from a port. They run even when an
    /// earlier write failed: they may be what takes an unhealthy pod out, and a slice name
    /// someone else holds fails its apply at every pass.
    SliceWithdrawals,
    /// Deletions of our slices.
    SliceDeletions,
    /// Publication gates that claim no publication (False, `Released`, `TimedOut`).
    Gates,
    /// Publication gates that say `Published`.
    PublishedGates,
    /// Our Endpoints objects.
    Endpoints,
    /// The native Endpoints object.
    NativeEndpoints,
    /// The native controllers' slices.
    NativeSlices,
    /// The release finalizer.
    Finalizer,
}

impl PhaseKind {
    /// Writes of the phase in flight at once: slices and gates are independent objects (one at
    /// a time made a first publication of hundreds of slices wait a round trip per slice), kept
    /// few so one PortMapping cannot flood the API server; the Endpoints steps go one by one.
    pub fn in_flight(self) -> usize {
        match self {
            Self::SliceWrites | Self::SliceWithdrawals | Self::SliceDeletions => 8,
            Self::ReleasedGates | Self::Gates | Self::PublishedGates => 4,
            Self::Endpoints | Self::NativeEndpoints | Self::NativeSlices | Self::Finalizer => 1,
        }
    }
}

/// One phase: its writes, and the earlier phases that must have had no failure for it to run.
#[derive(Clone, Debug, PartialEq)]
pub struct Phase {
    /// Which.
    pub kind: PhaseKind,
    /// Independent writes.
    pub writes: Vec<Write>,
    /// It runs only if none of these phases had a failed write.
    pub only_if: Vec<PhaseKind>,
}

/// Every phase of a pass, in order. Empty phases are left out.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Phases(pub Vec<Phase>);

impl Phases {
    /// The writes of every phase.
    pub fn count(&self) -> usize {
        self.0.iter().map(|p| p.writes.len()).sum()
    }

    fn push(&mut self, kind: PhaseKind, writes: Vec<Write>, only_if: &[PhaseKind]) {
        if !writes.is_empty() {
            self.0.push(Phase {
                kind,
                writes,
                only_if: only_if.to_vec(),
            });
        }
    }

    /// The writes of a plan: its slices, its gates (`pods`: those it planned from, for their
    /// versions), then its Endpoints and migration steps.
    pub fn of_plan(plan: &Plan, pods: &[&PodRecord]) -> Self {
        use PhaseKind as K;
        let mut phases = Self::default();
        let (withdrawals, applies): (Vec<&PlannedSlice>, Vec<&PlannedSlice>) = plan
            .slices
            .iter()
            .filter(|s| s.action.is_write())
            .partition(|s| s.withdraws);
        let write = |slices: Vec<&PlannedSlice>| {
            slices
                .into_iter()
                .filter_map(|s| match s.action {
                    WriteAction::Create => Some(Write::CreateSlice(s.slice.clone())),
                    WriteAction::Update { .. } => Some(Write::UpdateSlice(s.slice.clone())),
                    WriteAction::Unchanged => None,
                })
                .collect()
        };
        phases.push(K::SliceWrites, write(applies), &[]);
        phases.push(K::SliceWithdrawals, write(withdrawals), &[]);
        phases.push(
            K::SliceDeletions,
            slice_deletions(plan),
            &[K::SliceWrites, K::SliceWithdrawals],
        );
        // A gate that says Published waits for the slices; the others (False, Released,
        // TimedOut: they claim no publication) do not.
        let (published, unpublished): (Vec<&PodGate>, Vec<&PodGate>) =
            plan.pod_gates.iter().partition(|g| g.waits_for_slices());
        let versions = versions(pods, &plan.pod_gates);
        phases.push(K::Gates, set_gates(unpublished, &versions), &[]);
        if plan.collisions.is_empty() {
            let published = set_gates(published, &versions);
            phases.push(
                K::PublishedGates,
                published,
                &[K::SliceWrites, K::SliceWithdrawals, K::SliceDeletions],
            );
        }
        phases.migration(&plan.migration);
        phases
    }

    /// The writes of a teardown plan ([`crate::planner::teardown`]): its slice deletions and
    /// its Endpoints deletions, then `gates` once both succeeded (a pod is told it is not
    /// published only once it is not).
    pub fn of_teardown(plan: &Plan, gates: &[PodGate], pods: &[&PodRecord]) -> Self {
        use PhaseKind as K;
        let mut phases = Self::default();
        phases.push(K::SliceDeletions, slice_deletions(plan), &[]);
        phases.migration(&plan.migration);
        let gates = set_gates(gates.iter(), &versions(pods, gates));
        phases.push(K::Gates, gates, &[K::SliceDeletions, K::Endpoints]);
        phases
    }

    /// The writes of a pass that publishes nothing new: the gates it sets False.
    pub fn of_gates(gates: &[PodGate], pods: &[&PodRecord]) -> Self {
        let mut phases = Self::default();
        let gates = set_gates(gates.iter(), &versions(pods, gates));
        phases.push(PhaseKind::Gates, gates, &[]);
        phases
    }

    /// The releases of pods that left the pool (`gates`, from
    /// [`released_pod_gates`](crate::planner::released_pod_gates); `pods`: those they were
    /// planned from): a phase of their own, run first.
    pub fn released(gates: &[PodGate], pods: &[&PodRecord]) -> Self {
        let mut phases = Self::default();
        let gates = set_gates(gates.iter(), &versions(pods, gates));
        phases.push(PhaseKind::ReleasedGates, gates, &[]);
        phases
    }

    /// These phases, then `later`'s.
    pub fn then(mut self, later: Self) -> Self {
        self.0.extend(later.0);
        self
    }

    /// Ends the pass with the release finalizer's `change`: an addition runs whatever came
    /// before; a removal only if every earlier phase succeeded.
    pub fn finalizer(&mut self, change: Option<FinalizerChange>) {
        let (write, only_if) = match change {
            None => return,
            Some(FinalizerChange::Add) => (Write::AddFinalizer(RELEASE_FINALIZER), Vec::new()),
            Some(FinalizerChange::Remove) => (
                Write::RemoveFinalizer(RELEASE_FINALIZER),
                self.0.iter().map(|p| p.kind).collect(),
            ),
        };
        self.push(PhaseKind::Finalizer, vec![write], &only_if);
    }

    /// The migration steps' writes, by phase (their Events are the report's).
    fn migration(&mut self, steps: &[Step]) {
        use PhaseKind as K;
        let (mut ours, mut native, mut native_slices) = (Vec::new(), Vec::new(), Vec::new());
        for step in steps {
            let phase = match step {
                Step::ApplyEndpoints(_) | Step::AdoptEndpoints { .. } => &mut ours,
                Step::DeleteEndpoints { native: false, .. } => &mut ours,
                Step::DeleteEndpoints { native: true, .. } => &mut native,
                Step::DeleteNativeSlice { .. } => &mut native_slices,
                Step::Warn { .. } | Step::Normal { .. } => continue,
            };
            phase.push(Write::Migration(Box::new(step.clone())));
        }
        self.push(K::Endpoints, ours, &[]);
        self.push(K::NativeEndpoints, native, &[]);
        self.push(K::NativeSlices, native_slices, &[K::NativeEndpoints]);
    }
}

/// The plan's slice deletions that carry a UID (every delete has a UID precondition, so a
/// newer object of the same name is never touched; one the planner saw without a UID is left).
fn slice_deletions(plan: &Plan) -> Vec<Write> {
    plan.deletions
        .iter()
        .filter_map(|d| {
            Some(Write::DeleteSlice {
                name: d.name.clone(),
                uid: d.uid.clone()?,
            })
        })
        .collect()
}

/// The resource versions of the pods `gates` change, by UID. Only theirs: a map of the whole
/// pool cost a hash of every pod on every pass (a fifth of a flip's pass at 50,000 pods).
fn versions<'p>(pods: &[&'p PodRecord], gates: &[PodGate]) -> HashMap<&'p str, &'p str> {
    if gates.is_empty() {
        return HashMap::new();
    }
    let wanted: HashSet<&str> = gates.iter().map(|g| g.uid.as_str()).collect();
    pods.iter()
        .filter(|p| wanted.contains(p.uid.as_str()))
        .map(|p| (p.uid.as_str(), p.resource_version.as_str()))
        .collect()
}

fn set_gates<'g>(
    gates: impl IntoIterator<Item = &'g PodGate>,
    versions: &HashMap<&str, &str>,
) -> Vec<Write> {
    gates
        .into_iter()
        .map(|gate| Write::SetGate {
            pod_version: versions
                .get(gate.uid.as_str())
                .map(|v| (*v).to_owned())
                .unwrap_or_default(),
            gate: gate.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HeldName;
    use crate::planner::{Deletion, NameCollision, PlannedSlice};

    fn gate(pod: &str, status: bool) -> PodGate {
        PodGate {
            pod: pod.into(),
            condition_type: "portmapper.dev/published".into(),
            uid: format!("uid-{pod}"),
            status,
            reason: if status { "Published" } else { "NotPublished" },
            message: String::new(),
            last_transition_time: None,
            observed_generation: None,
        }
    }

    fn shape(phases: &Phases) -> Vec<(PhaseKind, usize, Vec<PhaseKind>)> {
        phases
            .0
            .iter()
            .map(|p| (p.kind, p.writes.len(), p.only_if.clone()))
            .collect()
    }

    fn plan() -> Plan {
        Plan {
            slices: vec![
                PlannedSlice {
                    slice: Arc::default(),
                    action: WriteAction::Update {
                        resource_version: None,
                    },
                    withdraws: true,
                },
                PlannedSlice {
                    slice: Arc::default(),
                    action: WriteAction::Create,
                    withdraws: false,
                },
                PlannedSlice {
                    slice: Arc::default(),
                    action: WriteAction::Unchanged,
                    withdraws: false,
                },
            ],
            deletions: vec![
                Deletion {
                    name: "a".into(),
                    uid: Some("u".into()),
                },
                Deletion {
                    name: "no-uid".into(),
                    uid: None,
                },
            ],
            pod_gates: vec![gate("p1", true), gate("p2", false)],
            migration: vec![
                Step::DeleteEndpoints {
                    name: "web".into(),
                    uid: "e".into(),
                    native: true,
                },
                Step::DeleteNativeSlice {
                    name: "web-abc".into(),
                    uid: "n".into(),
                },
                Step::Normal {
                    reason: crate::EventReason::NativeEndpointsCleanedUp,
                    note: String::new(),
                },
                Step::DeleteEndpoints {
                    name: "old".into(),
                    uid: "o".into(),
                    native: false,
                },
            ],
            ..Plan::default()
        }
    }

    #[test]
    fn a_plan_writes_slices_then_gates_then_endpoints_with_its_conditions_as_data() {
        use PhaseKind as K;
        let pod = PodRecord {
            uid: "uid-p1".into(),
            resource_version: "7".into(),
            ..PodRecord::default()
        };
        let phases = Phases::of_plan(&plan(), &[&pod]);
        assert_eq!(
            shape(&phases),
            [
                // What adds before what withdraws: a pod moving to another slice is in it
                // before it leaves its old one.
                (K::SliceWrites, 1, vec![]),
                (K::SliceWithdrawals, 1, vec![]),
                (
                    K::SliceDeletions,
                    1,
                    vec![K::SliceWrites, K::SliceWithdrawals]
                ),
                (K::Gates, 1, vec![]),
                (
                    K::PublishedGates,
                    1,
                    vec![K::SliceWrites, K::SliceWithdrawals, K::SliceDeletions]
                ),
                (K::Endpoints, 1, vec![]),
                (K::NativeEndpoints, 1, vec![]),
                (K::NativeSlices, 1, vec![K::NativeEndpoints]),
            ]
        );
        assert_eq!(phases.count(), 8);
        let Write::SetGate { pod_version, .. } = &phases.0[4].writes[0] else {
            panic!("a gate")
        };
        assert_eq!(pod_version, "7");
    }

    #[test]
    fn a_name_held_by_others_holds_every_true_gate() {
        let mut plan = plan();
        plan.collisions.push(NameCollision {
            name: "web.http".into(),
            held: HeldName {
                uid: None,
                holder: "someone".into(),
            },
        });
        let phases = Phases::of_plan(&plan, &[]);
        assert!(phases.0.iter().all(|p| p.kind != PhaseKind::PublishedGates));
    }

    #[test]
    fn a_teardown_sets_its_gates_only_once_everything_is_deleted() {
        use PhaseKind as K;
        let teardown = Plan {
            deletions: plan().deletions,
            migration: vec![Step::DeleteEndpoints {
                name: "web".into(),
                uid: "e".into(),
                native: false,
            }],
            ..Plan::default()
        };
        let phases = Phases::of_teardown(&teardown, &[gate("p", false)], &[]);
        assert_eq!(
            shape(&phases),
            [
                (K::SliceDeletions, 1, vec![]),
                (K::Endpoints, 1, vec![]),
                (K::Gates, 1, vec![K::SliceDeletions, K::Endpoints]),
            ]
        );
        assert_eq!(shape(&Phases::of_gates(&[], &[])), []);
    }

    #[test]
    fn released_and_timed_out_gates_claim_no_publication_and_never_wait_for_the_slices() {
        use PhaseKind as K;
        let mut plan = plan();
        let mut released = gate("p3", true);
        released.reason = crate::planner::REASON_RELEASED;
        let mut timed_out = gate("p4", true);
        timed_out.reason = crate::planner::REASON_TIMED_OUT;
        plan.pod_gates = vec![gate("p1", true), released, timed_out];
        let phases = Phases::of_plan(&plan, &[]);
        let gates: Vec<(K, usize)> = phases
            .0
            .iter()
            .filter(|p| matches!(p.kind, K::Gates | K::PublishedGates))
            .map(|p| (p.kind, p.writes.len()))
            .collect();
        assert_eq!(gates, [(K::Gates, 2), (K::PublishedGates, 1)]);
    }

    #[test]
    fn departed_pods_are_released_first_and_the_finalizer_goes_last() {
        use PhaseKind as K;
        let released = Phases::released(&[gate("gone", true)], &[]);
        let mut phases = released.then(Phases::of_gates(&[gate("p", false)], &[]));
        phases.finalizer(Some(FinalizerChange::Remove));
        assert_eq!(
            shape(&phases),
            [
                (K::ReleasedGates, 1, vec![]),
                (K::Gates, 1, vec![]),
                (K::Finalizer, 1, vec![K::ReleasedGates, K::Gates]),
            ]
        );
        assert_eq!(
            phases.0[2].writes,
            [Write::RemoveFinalizer(RELEASE_FINALIZER)]
        );
        let mut added = Phases::of_gates(&[gate("p", false)], &[]);
        added.finalizer(Some(FinalizerChange::Add));
        assert_eq!(shape(&added)[1], (K::Finalizer, 1, vec![]));
        added.finalizer(None);
        assert_eq!(added.count(), 2);
    }
}
