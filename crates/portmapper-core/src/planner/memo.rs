//! Memory of one PortMapping's last evaluation, so a plan after one pod event re-evaluates that
//! pod, not the pool.
//!
//! What is remembered per (pod, Service port, IP family) is what the pod's own object decides:
//! whether it is a candidate (terminal, target port, address of the family), and for ports whose
//! checks read nothing but the pod (no network check, no webhook) the checks' verdict. Keyed by
//! pod UID and resourceVersion: the API server changes the resourceVersion on every change of the
//! object, so an unchanged pair is an unchanged pod. Everything else a plan reads (network
//! results, the published state for Abstain, node zones, the time) is read afresh every pass, and
//! any change of the PortMapping's spec, the Service's spec, the gate types other PortMappings
//! set (podReady reads past them) or the unready nodes (podReady of a gated pod reads them)
//! forgets everything.
//!
//! The memo only skips work: a plan with a memo equals the plan without one for the same inputs
//! (a property test checks it on random event sequences).
//!
//! ## What is kept, and how a pass reuses it
//!
//! The operator plans with `plan_with_memo` and one `EvalMemo` per PortMapping: what each pod's own
//! object decides per (port, family) — candidacy, address, and the verdict of checks that read
//! nothing but the pod — is remembered by pod UID and resourceVersion, so a plan after one pod
//! event evaluates that pod, not the pool. The memo holds the last pass's pod records
//! (`Arc<PodRecord>`, the index's own): an unchanged pod is the same record, known unchanged
//! without reading it (the watch makes a new record for every change; a record made again from the
//! same object is known by UID and resourceVersion). Pool membership is remembered the same way, so
//! only new or changed pods are checked against the pool's key and selector; the outcomes lie in
//! one vector in pool order, read in the order they lie. Network results, the published state (for
//! Abstain), zones and time are read afresh on every pass; a change of the PortMapping's or the
//! Service's spec forgets everything.
//!
//! The memo also keeps the **settled slices** of the last pass: a live slice found exactly as
//! desired (every endpoint wanted, in place, nothing to write) is taken as it is in the next pass
//! while it has the same resourceVersion, the pool the same pods in the same order, each of its
//! pods is unchanged and still desired, and the hints and node zones are the same; packing then
//! skips finding and comparing its endpoints one by one.
//!
//! A port whose outcomes are its pods' alone (checks that read only the pod, one target port,
//! nothing rejected or abstained, no legacy Endpoints) is moreover **kept whole** (`KeptPort`): its
//! members per family in group order, each pod's state and each decision counted. While the pool is
//! the same list of pods in the same order, the next pass starts from it and visits only the
//! changed pods: their old endpoints leave the groups, their new ones are sorted and merged in,
//! their states and decisions replace the old ones; no other pod is read, sorted or counted again
//! (`PassStats::ports_kept`).
//!
//! With port sets, when every port is kept whole, the **port sets are kept** too
//! (`planner/kept_sets.rs`, `KeptSets`): per family each set's members, compact (address, pool
//! position, conditions) and in endpoint order, and each pool position's set. A pass takes the
//! changed pods out of their sets, visits them on every port, and puts each into the set of its new
//! port set, in order; no other pod is read, grouped or sorted. Only the sets a changed pod left or
//! joined get desired endpoints built; the others reach emission lazily (`Group::lazy`) and are
//! taken as they are when every live slice of theirs is as the last pass left it: settled with the
//! same resourceVersion, or written by that pass and found with the endpoints it wrote (built and
//! compared for that slice only), together holding every member once (`PassStats::sets_kept`,
//! `groups_built`).
//!
//! When pods come, go or move, the kept ports and sets are carried to the new positions through the
//! checkout's position map; a settled slice is not compared with the slice template again while the
//! template (the Service's labels, the owner) is the same. The index hands a reconcile its pool as
//! one shared list (`pool_pods.rs`), changed in place as pods change, not copied per reconcile.
//!
//! A property test (`incremental_plans_equal_full_plans_along_random_event_sequences`) checks that
//! the memo changes no plan; `portmapper_plan_pods_total{evaluation}` counts reused and evaluated
//! pods.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ServiceSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use portmapper_api::PortMappingSpec;

use super::kept_sets::KeptSets;
use super::objects::{HintMode, KeptMember};
use super::status::{Listed, PodPortState};
use super::types::{PlanError, PlanInput};
use crate::decision::Verdict;
use crate::pod_record::PodRecord;
use crate::pool::pod_in_pool;

/// Per-PortMapping memory of the last evaluation. Start with `EvalMemo::default()`, pass the same
/// value to every [`plan_with_memo`](super::plan_with_memo) of that PortMapping.
#[derive(Debug, Default)]
pub struct EvalMemo {
    inputs: Option<Inputs>,
    /// The last pass's pods, in its order, aligned with `outcomes`. Kept as two vectors in pool
    /// order rather than a map: the pool comes in the same order every pass, so a pass finds
    /// each pod's memory at its own position without hashing or allocating. Held, not copied:
    /// an unchanged pod is the same record (the watch makes a new one for every change), so
    /// it is known unchanged without reading it, and holding it keeps its address from naming
    /// another record.
    pods: Vec<Arc<PodRecord>>,
    /// Per pod of `pods`: whether it has a UID and resourceVersion (see [`identity`]).
    identified: Vec<bool>,
    outcomes: Outcomes,
    last_pass: PassStats,
    /// Whether this pass's checkout found every pod at its last position (and no others).
    aligned: bool,
    /// Changes whenever the pool's pods change order or membership, so that pool positions
    /// remembered in an earlier pass are known to still name the same pods.
    pool_epoch: u64,
    /// Per pod of this pass (aligned with the pool): whether its outcomes were reused, i.e. it
    /// has not changed since the last pass.
    reused: Vec<bool>,
    /// Live slices the last pass found exactly as desired, by name (see [`Settled`]): what
    /// this pass may take as they are. Only the last pass's: `reused` says what changed since
    /// that pass, not since any earlier one.
    usable: HashMap<String, Settled>,
    /// What this pass found settled, for the next one.
    settled: HashMap<String, Settled>,
    /// What a settled slice's endpoints depend on besides their pods and the inputs above.
    settled_context: Option<(HintMode, BTreeMap<String, String>)>,
    /// The slice metadata the settled slices were found to carry (labels from the Service's,
    /// the owner): while it stays the same, a settled slice's metadata needs no comparing.
    settled_template: Option<ObjectMeta>,
    /// Pool membership of the last pass's input pods, aligned with them (see [`pool`]).
    ///
    /// [`pool`]: Self::pool
    pooled: Vec<Pooled>,
    /// Per Service port, what the last pass (when it completed) found for the ports it could
    /// keep whole (see [`KeptPort`]), indexed by the last pass's pool positions.
    kept: Vec<Option<KeptPort>>,
    /// The port sets of the last pass (`PerPortSet`), when every port could be kept whole
    /// (see [`KeptSets`]).
    sets: Option<KeptSets>,
    /// Set by a checkout whose pods are not all where they were: per pod of the pass, its
    /// position in the last one when unchanged; and how many pods the last one had.
    moved_from: Option<(Vec<Option<usize>>, usize)>,
}

/// One port's whole evaluation by the last pass, for a port whose outcome for a pod depends
/// on that pod alone (its checks read only the pod; one target port; nothing rejected or
/// abstained): a pass in which only some pods changed starts from it and visits those pods,
/// instead of reading every pod's outcome, building and sorting every endpoint and counting
/// every decision again. Valid while the pool is the same list of pods in the same order.
#[derive(Debug, Default)]
pub(crate) struct KeptPort {
    /// Per family, in family order: its members, in group order.
    pub members: Vec<Vec<KeptMember>>,
    /// `[pod × families + family]`: the decision counted (see [`DecisionCode`]).
    pub decisions: Vec<DecisionCode>,
    /// `[pod]`: the port's state of each pod, merged across families.
    pub states: Vec<Option<PodPortState>>,
    /// The excluded pods its status listed.
    pub listed: Listed,
}

impl KeptPort {
    /// This port at the positions of a pass whose pods came, went or moved: `sources[i]`, the
    /// last position of the pass's unchanged pod `i`; `moved[j]`, the new position of the last
    /// pass's pod `j` (`u32::MAX`: gone or changed). Gone and changed pods leave it (the pass
    /// visits the changed ones); the members keep their order, which is by address and UID, not
    /// by position. `None` when it does not fit (it always should).
    fn moved(self, sources: &[Option<usize>], moved: &[u32]) -> Option<Self> {
        let families = self.members.len();
        let members = self
            .members
            .into_iter()
            .map(|group| {
                group
                    .into_iter()
                    .filter_map(|mut m| {
                        let at = *moved.get(m.position as usize)?;
                        (at != u32::MAX).then(|| {
                            m.position = at;
                            m
                        })
                    })
                    .collect()
            })
            .collect();
        let mut decisions = vec![DecisionCode::None; sources.len() * families];
        let mut old_states = self.states;
        let mut states = Vec::with_capacity(sources.len());
        for (i, s) in sources.iter().enumerate() {
            states.push(match *s {
                Some(at) => {
                    let from = self.decisions.get(at * families..(at + 1) * families)?;
                    decisions[i * families..(i + 1) * families].copy_from_slice(from);
                    old_states.get_mut(at)?.take()
                }
                None => None,
            });
        }
        // A listed pod that went or changed leaves the listing unknown: the next status then
        // looks at every pod (an empty listing forces it unless the changed pods are all).
        let positions: Option<Vec<u32>> = self
            .listed
            .positions
            .iter()
            .map(|&p| moved.get(p as usize).copied().filter(|&n| n != u32::MAX))
            .collect();
        Some(Self {
            members,
            decisions,
            states,
            listed: Listed {
                positions: positions.unwrap_or_default(),
            },
        })
    }
}

/// Members per family and decisions of a port a pass could keep whole, before its states
/// join them in [`KeptPort`].
pub(crate) type KeptParts = (Vec<Vec<KeptMember>>, Vec<DecisionCode>);

/// A decision as counted in [`DecisionCounts`](super::DecisionCounts): none for a pod that is
/// not a candidate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum DecisionCode {
    #[default]
    None,
    Include,
    Exclude,
    Abstain,
}

/// Whether one input pod was in the pool, by identity (membership reads only the pod and the
/// spec, and a spec change forgets it).
#[derive(Debug, Default)]
struct Pooled {
    /// `None`: nothing known.
    pod: Option<Arc<PodRecord>>,
    in_pool: bool,
}

/// A live slice a pass found exactly as desired (every endpoint wanted, in place, nothing to
/// write), remembered so that a later pass in which neither the slice nor any of its pods has
/// changed takes its endpoints as they are instead of finding and comparing each one again: at
/// 10,000 pods that comparison, which reads every endpoint and every pod, was most of a pass.
#[derive(Debug)]
pub(crate) struct Settled {
    /// `None`: written by the pass that found it, so its stored version is not known yet; the
    /// next pass checks its endpoints before taking it as settled.
    resource_version: Option<String>,
    pool_epoch: u64,
    /// Pool positions of its endpoints' pods, in slice order.
    positions: Vec<u32>,
}

/// What the last pass with a memo did, per pod.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PassStats {
    /// Pods whose remembered outcomes were reused.
    pub reused: usize,
    /// Pods evaluated afresh (new, changed, or everything after a spec or Service change).
    pub evaluated: usize,
    /// Service ports brought up to date from the last pass's whole evaluation of them,
    /// visiting only the changed pods (see [`KeptPort`]); the others were evaluated pod by pod.
    pub ports_kept: usize,
    /// Whether the port sets (`PerPortSet`) were brought up to date from the last pass's,
    /// the changed pods moved between them, instead of regrouped from every member.
    pub sets_kept: bool,
    /// Slice sets whose desired endpoints this pass built (every one with members, but for
    /// the kept port sets no member left or joined whose slices are as the last pass left
    /// them).
    pub groups_built: usize,
}

impl EvalMemo {
    /// The port sets the last pass kept, brought to this pass's pool: the changed pods taken
    /// out of them (their sets touched). Taken out, so a pass that fails leaves none. After
    /// [`checkout`](Self::checkout), before [`take_kept`](Self::take_kept).
    pub(crate) fn take_sets(&mut self) -> Option<KeptSets> {
        let mut sets = self.sets.take()?;
        if self.aligned {
            let changed: Vec<usize> = (0..self.reused.len())
                .filter(|&i| !self.reused[i])
                .collect();
            sets.remove(&changed);
            return Some(sets);
        }
        let (sources, last_len) = self.moved_from.as_ref()?;
        let mut moved = vec![u32::MAX; *last_len];
        for (i, s) in sources.iter().enumerate() {
            if let Some(slot) = s.and_then(|at| moved.get_mut(at)) {
                *slot = u32::try_from(i).unwrap_or(u32::MAX);
            }
        }
        Some(sets.moved(&moved, sources.len()))
    }

    /// Keeps this pass's port sets for the next one. Call when the pass has completed.
    pub(crate) fn keep_sets(&mut self, sets: Option<KeptSets>) {
        self.sets = sets;
    }

    /// What a live slice a pass settled is remembered with, when it is usable in this pass
    /// (the same pool): its resourceVersion (`None`: written by that pass) and the pool
    /// positions of its endpoints' pods, in slice order.
    pub(crate) fn settled_entry(&self, name: &str) -> Option<(Option<&str>, &[u32])> {
        let s = self.usable.get(name)?;
        (s.pool_epoch == self.pool_epoch)
            .then_some((s.resource_version.as_deref(), s.positions.as_slice()))
    }

    /// Pods remembered (for tests and metrics).
    pub fn len(&self) -> usize {
        self.pods.iter().filter(|p| identity(p).is_some()).count()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the last pass reused and evaluated.
    pub fn last_pass(&self) -> PassStats {
        self.last_pass
    }

    /// Forgets everything when the inputs every outcome depends on changed. Call first in
    /// every pass.
    pub(crate) fn begin(
        &mut self,
        pm_uid: &str,
        spec: &PortMappingSpec,
        service: Option<&ServiceSpec>,
        gate_peers: &BTreeSet<String>,
        unready_nodes: &BTreeMap<String, String>,
    ) {
        let same = self.inputs.as_ref().is_some_and(|i| {
            i.pm_uid == pm_uid
                && i.spec == *spec
                && i.service.as_ref() == service
                && i.gate_peers == *gate_peers
                && i.unready_nodes == *unready_nodes
        });
        if !same {
            self.pods.clear();
            self.identified.clear();
            self.outcomes = Outcomes::default();
            self.settled.clear();
            self.pooled.clear();
            self.kept.clear();
            self.sets = None;
            self.pool_epoch += 1;
            self.inputs = Some(Inputs {
                pm_uid: pm_uid.to_owned(),
                spec: spec.clone(),
                service: service.cloned(),
                gate_peers: gate_peers.clone(),
                unready_nodes: unready_nodes.clone(),
            });
        }
    }

    /// The input pods in the pool, in input order: `in_pool` is asked only for pods new or
    /// changed since the last pass (the input comes in the same order every pass, so each pod
    /// is found at its own position). At 10,000 pods asking every pod was a tenth of a pass:
    /// each question reads the pod's namespace and labels, spread over the heap. What is
    /// remembered stays true when a question fails: each entry names the pod it describes.
    pub(crate) fn pool<'p, E>(
        &mut self,
        input: &'p [Arc<PodRecord>],
        mut in_pool: impl FnMut(&PodRecord) -> Result<bool, E>,
    ) -> Result<Vec<&'p Arc<PodRecord>>, E> {
        let mut pool = Vec::with_capacity(input.len());
        if self.pooled.len() < input.len() {
            self.pooled.resize_with(input.len(), Pooled::default);
        }
        for (pod, known) in input.iter().zip(self.pooled.iter_mut()) {
            if !known.pod.as_ref().is_some_and(|k| same_version(k, pod)) {
                // Nothing known while asking, so a failure leaves no stale answer.
                known.pod = None;
                known.in_pool = in_pool(pod)?;
                known.pod = Some(pod.clone());
            }
            if known.in_pool {
                pool.push(pod);
            }
        }
        self.pooled.truncate(input.len());
        Ok(pool)
    }

    /// Hands out the remembered outcomes of `pods`, aligned with them (empty cells for a new
    /// or changed pod). After [`begin`](Self::begin).
    pub(crate) fn checkout(&mut self, pods: &[&Arc<PodRecord>], slots: usize) -> Outcomes {
        let last = &self.pods;
        // Built only when a pod is not at its last position (pods came or went).
        let mut positions: Option<HashMap<&str, usize>> = None;
        self.usable = std::mem::take(&mut self.settled);
        let old = std::mem::take(&mut self.outcomes);
        let comparable = old.slots == slots;
        let mut anonymous = false;
        // Where each pod's remembered outcomes are, when they are still its own.
        let sources: Vec<Option<usize>> = pods
            .iter()
            .enumerate()
            .map(|(i, &pod)| {
                // The record held for this position: identified as it was then (unchanged
                // pods' records are not read at all).
                let held = last.get(i).filter(|p| Arc::ptr_eq(p, pod));
                let known = match held {
                    Some(_) => self.identified.get(i).copied().unwrap_or(false),
                    None => identity(pod).is_some(),
                };
                anonymous |= !known;
                if !known || !comparable {
                    return None;
                }
                let at = if last
                    .get(i)
                    .is_some_and(|p| Arc::ptr_eq(p, pod) || p.uid == pod.uid)
                {
                    Some(i)
                } else {
                    positions
                        .get_or_insert_with(|| {
                            last.iter()
                                .enumerate()
                                .map(|(j, p)| (p.uid.as_str(), j))
                                .collect()
                        })
                        .get(pod.uid.as_str())
                        .copied()
                }?;
                (at < old.pods() && same_version(&last[at], pod)).then_some(at)
            })
            .collect();
        // Every pod where it was, and no more of them: the pool is the same list of pods.
        self.aligned = positions.is_none() && !anonymous && self.pods.len() == pods.len();
        // Pods came, went or moved: where each pod of this pass was in the last one, for the
        // kept ports (see [`take_kept`](Self::take_kept)).
        self.moved_from = if self.aligned || !comparable {
            None
        } else {
            Some((sources.clone(), last.len()))
        };
        let out = realign(old, &sources, slots, comparable);
        self.reused.clear();
        self.reused.extend(sources.iter().map(Option::is_some));
        let reused = self.reused.iter().filter(|r| **r).count();
        self.last_pass = PassStats {
            reused,
            evaluated: pods.len() - reused,
            ..PassStats::default()
        };
        out
    }

    /// Remembers the outcomes of this pass (pods without UID or resourceVersion are not
    /// remembered); pods not in this pass are forgotten.
    pub(crate) fn check_in(&mut self, pods: &[&Arc<PodRecord>], mut outcomes: Outcomes) {
        // Known from the checkout, without comparing every UID again.
        if self.aligned {
            // Only the changed pods' records are new.
            for ((held, &pod), reused) in self.pods.iter_mut().zip(pods).zip(&self.reused) {
                if !reused {
                    *held = pod.clone();
                }
            }
        } else {
            self.pods = pods.iter().map(|&p| p.clone()).collect();
            self.pool_epoch += 1;
        }
        // Reused pods were identified (or they would not have been reused); only the others'
        // records are read.
        self.identified.resize(pods.len(), false);
        for (i, pod) in pods.iter().enumerate() {
            let known = self.reused.get(i).copied().unwrap_or(false) || identity(pod).is_some();
            self.identified[i] = known;
            if !known {
                outcomes.clear(i);
            }
        }
        self.outcomes = outcomes;
    }
}

impl EvalMemo {
    /// The ports the last pass kept whole, when they still describe this pass's pool (every
    /// pod at its last position): taken out, so a pass that fails leaves none for the next.
    /// After [`checkout`](Self::checkout).
    /// When pods came, went or moved, the kept ports are carried over to this pass's
    /// positions (see [`KeptPort::moved`]).
    pub(crate) fn take_kept(&mut self) -> Vec<Option<KeptPort>> {
        let kept = std::mem::take(&mut self.kept);
        if self.aligned {
            return kept;
        }
        let Some((sources, last_len)) = self.moved_from.take() else {
            return Vec::new();
        };
        let mut moved = vec![u32::MAX; last_len];
        for (i, s) in sources.iter().enumerate() {
            if let Some(slot) = s.and_then(|at| moved.get_mut(at)) {
                *slot = u32::try_from(i).unwrap_or(u32::MAX);
            }
        }
        kept.into_iter()
            .map(|k| k.and_then(|k| k.moved(&sources, &moved)))
            .collect()
    }

    /// Per pod of this pass: whether it is unchanged since the last one. After
    /// [`checkout`](Self::checkout).
    pub(crate) fn reused(&self) -> &[bool] {
        &self.reused
    }

    /// Records how many ports this pass brought up to date from the kept ones, and whether
    /// the port sets were.
    pub(crate) fn count_ports_kept(&mut self, n: usize, sets_kept: bool) {
        self.last_pass.ports_kept = n;
        self.last_pass.sets_kept = sets_kept;
    }

    /// Records how many slice sets this pass built the desired endpoints of.
    pub(crate) fn count_groups_built(&mut self, n: usize) {
        self.last_pass.groups_built = n;
    }

    /// Keeps the ports this pass could keep whole (`parts`: members and decisions, by port),
    /// with their states and status listings, for the next pass. Call when the pass has
    /// completed.
    pub(crate) fn keep(
        &mut self,
        parts: Vec<Option<KeptParts>>,
        states: Vec<Vec<Option<PodPortState>>>,
        listings: Vec<Listed>,
    ) {
        self.kept = parts
            .into_iter()
            .zip(states)
            .zip(listings)
            .map(|((parts, states), listed)| {
                parts.map(|(members, decisions)| KeptPort {
                    members,
                    decisions,
                    states,
                    listed,
                })
            })
            .collect();
    }

    /// Forgets the settled slices when what their endpoints depend on besides the pods changed
    /// (hints, node zones). Call once per pass, after [`check_in`](Self::check_in).
    pub(crate) fn settle_context(&mut self, hints: HintMode, zones: &BTreeMap<String, String>) {
        let same = self
            .settled_context
            .as_ref()
            .is_some_and(|(h, z)| *h == hints && z == zones);
        if !same {
            self.usable.clear();
            self.settled_context = Some((hints, zones.clone()));
        }
    }

    /// Forgets the settled slices when the metadata every slice must carry changed (the
    /// Service's labels are not part of the inputs [`begin`](Self::begin) compares). Call once
    /// per pass, before asking for settled slices.
    pub(crate) fn settle_template(&mut self, template: &ObjectMeta) {
        if self.settled_template.as_ref() != Some(template) {
            self.usable.clear();
            self.settled_template = Some(template.clone());
        }
    }

    /// The desired indexes of a live slice's endpoints when the slice is settled and nothing it
    /// depends on changed: the same resourceVersion, the same pool, every one of its pods
    /// unchanged and still desired in the group (`at`: pool position → desired index). They are
    /// appended to `out` (one buffer for every slice of a group, not a vector each); returns
    /// whether the slice is settled (`out` is left as it was when not).
    pub(crate) fn settled_endpoints(
        &self,
        name: &str,
        resource_version: Option<&str>,
        at: &[u32],
        out: &mut Vec<usize>,
    ) -> bool {
        let Some(s) = self.usable.get(name) else {
            return false;
        };
        if s.pool_epoch != self.pool_epoch
            || s.resource_version.is_none()
            || s.resource_version.as_deref() != resource_version
        {
            return false;
        }
        let start = out.len();
        out.reserve(s.positions.len());
        for &p in &s.positions {
            let p = p as usize;
            let i = at.get(p).copied().unwrap_or(u32::MAX);
            if self.reused.get(p) != Some(&true) || i == u32::MAX {
                out.truncate(start);
                return false;
            }
            out.push(i as usize);
        }
        true
    }

    /// The pool positions a usable settled slice was remembered with (for the debug check
    /// that a carried entry is what the pass found).
    #[cfg(debug_assertions)]
    pub(crate) fn usable_positions(&self, name: &str) -> Option<&[u32]> {
        self.usable.get(name).map(|s| &s.positions[..])
    }

    /// Remembers the slices this pass found exactly as desired, for the next pass only:
    /// `carried`, those it took as the last pass had settled them and left unchanged (their
    /// entry is still true and moves over as it is: at 10,000 pods, making 300 entries anew
    /// every pass was a tenth of a one-pod plan); `found`, the others (name, resourceVersion,
    /// pool positions of their endpoints' pods in slice order). A pass that fails before it
    /// gets here leaves nothing for the next.
    pub(crate) fn settle(
        &mut self,
        carried: &[&str],
        found: Vec<(String, Option<String>, Vec<u32>)>,
    ) {
        let epoch = self.pool_epoch;
        let mut settled = std::mem::take(&mut self.settled);
        settled.clear();
        for name in carried {
            if let Some((name, entry)) = self.usable.remove_entry(*name) {
                settled.insert(name, entry);
            }
        }
        settled.extend(
            found
                .into_iter()
                .map(|(name, resource_version, positions)| {
                    (
                        name,
                        Settled {
                            resource_version,
                            pool_epoch: epoch,
                            positions,
                        },
                    )
                }),
        );
        self.settled = settled;
    }
}

/// UID and resourceVersion, when the pod has both.
fn identity(pod: &PodRecord) -> Option<(&str, &str)> {
    (!pod.uid.is_empty() && !pod.resource_version.is_empty())
        .then_some((pod.uid.as_str(), pod.resource_version.as_str()))
}

/// Whether `now` is the pod version `held` was: the same record, or (a record made again from
/// the same object, as after a relist) the same UID and resourceVersion.
fn same_version(held: &Arc<PodRecord>, now: &Arc<PodRecord>) -> bool {
    Arc::ptr_eq(held, now) || (identity(now).is_some() && identity(held) == identity(now))
}

/// What every remembered outcome depends on besides its pod.
#[derive(Debug)]
struct Inputs {
    pm_uid: String,
    spec: PortMappingSpec,
    service: Option<ServiceSpec>,
    /// Other PortMappings' gate types: podReady of a gated pod reads past them.
    gate_peers: BTreeSet<String>,
    /// podReady of a gated pod reads them; they change seldom (a node's readiness), so a change
    /// forgets everything rather than the memo tracking which pods sit on which node.
    unready_nodes: BTreeMap<String, String>,
}

/// Remembered outcomes of a pool, `[pod × slots + port × families + family]`, in one vector:
/// a pass reads them in pool order, so they lie in the order they are read (a vector per pod
/// put each pod's outcomes somewhere else on the heap, a cache miss per pod and pass).
/// An empty cell is not remembered.
#[derive(Debug, Default)]
pub(crate) struct Outcomes {
    slots: usize,
    cells: Vec<Option<Outcome>>,
    /// One shared copy of each reason remembered: pods excluded for the same reason (every pod
    /// whose port list lacks a port) share it, so reporting them touches one string, not one
    /// per pod spread over the heap.
    reasons: HashSet<Arc<str>>,
}

/// Distinct reasons kept for sharing; past it the set starts again (sharing only saves work).
const MAX_SHARED_REASONS: usize = 1024;

impl Outcomes {
    fn new(pods: usize, slots: usize) -> Self {
        let mut cells = Vec::new();
        cells.resize_with(pods * slots, || None);
        Self {
            slots,
            cells,
            reasons: HashSet::new(),
        }
    }

    /// Pods it has cells for.
    fn pods(&self) -> usize {
        self.cells.len().checked_div(self.slots).unwrap_or(0)
    }

    fn resize(&mut self, pods: usize) {
        self.cells.resize_with(pods * self.slots, || None);
    }

    fn clear(&mut self, pod: usize) {
        let slots = self.slots;
        for cell in self.cells.iter_mut().skip(pod * slots).take(slots) {
            *cell = None;
        }
    }

    /// Moves the shared reasons along with the cells.
    fn take_reasons(&mut self, other: &mut Outcomes) {
        self.reasons = std::mem::take(&mut other.reasons);
    }

    fn take_from(&mut self, other: &mut Outcomes, from: usize, to: usize) {
        let slots = self.slots;
        let source = other.cells.iter_mut().skip(from * slots).take(slots);
        for (cell, o) in self
            .cells
            .iter_mut()
            .skip(to * slots)
            .take(slots)
            .zip(source)
        {
            *cell = o.take();
        }
    }

    /// The remembered outcome of a pod's slot, taken out.
    pub fn take(&mut self, pod: usize, slot: usize) -> Option<Outcome> {
        self.cells.get_mut(pod * self.slots + slot)?.take()
    }

    /// Remembers a newly evaluated outcome of a pod's slot, its reason shared with the equal
    /// ones remembered before.
    pub fn put_new(&mut self, pod: usize, slot: usize, mut outcome: Outcome) {
        if let Outcome::Candidate {
            verdict:
                Some(Verdict {
                    reason: Some(reason),
                    ..
                }),
            ..
        } = &mut outcome
        {
            if self.reasons.len() >= MAX_SHARED_REASONS {
                self.reasons.clear();
            }
            match self.reasons.get(reason) {
                Some(shared) => *reason = shared.clone(),
                None => {
                    self.reasons.insert(reason.clone());
                }
            }
        }
        self.put(pod, slot, outcome);
    }

    /// Remembers a pod's slot.
    pub fn put(&mut self, pod: usize, slot: usize, outcome: Outcome) {
        if let Some(cell) = self.cells.get_mut(pod * self.slots + slot) {
            *cell = Some(outcome);
        }
    }
}

/// What a (pod, Service port, IP family) comes to from the pod alone.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// Not a candidate: terminal, the target port does not resolve, or no address of the family.
    NotCandidate,
    /// An address of the family the API would reject.
    Rejected { ip: String, reason: String },
    /// A candidate: its target port (`None` for the portless pseudo-port), its address and, when
    /// the port's checks read only the pod, their verdict and whether a backing check excludes
    /// the pod (asked for pods with the publication gate only; `false` otherwise).
    Candidate {
        target: Option<i32>,
        address: IpAddr,
        verdict: Option<Verdict>,
        excluded_by_backing: bool,
    },
}

/// The outcomes of the last pass moved to this pass's positions: `sources[i]`, where pod `i`'s
/// remembered outcomes are (none: a new or changed pod, whose cells are empty).
fn realign(
    mut old: Outcomes,
    sources: &[Option<usize>],
    slots: usize,
    comparable: bool,
) -> Outcomes {
    let in_place = comparable
        && sources
            .iter()
            .enumerate()
            .all(|(i, s)| s.is_none_or(|a| a == i));
    if in_place {
        // The common pass: the cells stay where they are, and only changed pods' are emptied.
        old.resize(sources.len());
        for (i, s) in sources.iter().enumerate() {
            if s.is_none() {
                old.clear(i);
            }
        }
        return old;
    }
    let mut fresh = Outcomes::new(sources.len(), slots);
    fresh.take_reasons(&mut old);
    for (i, s) in sources.iter().enumerate() {
        if let Some(at) = *s {
            fresh.take_from(&mut old, at, i);
        }
    }
    fresh
}

/// The pool's pods: through the memo (which remembers who was in the pool), or by checking
/// every pod.
pub(crate) fn pool_of<'i>(
    input: &'i PlanInput<'_>,
    namespace: &str,
    owner: &OwnerReference,
    memo: Option<&mut EvalMemo>,
) -> Result<Vec<&'i Arc<PodRecord>>, PlanError> {
    let spec = &input.port_mapping.spec;
    let in_pool = |pod: &PodRecord| pod_in_pool(spec, namespace, pod);
    if let Some(memo) = memo {
        let service = input.service.spec.as_ref();
        memo.begin(
            &owner.uid,
            spec,
            service,
            &input.gate_peers.types,
            input.unready_nodes,
        );
        return Ok(memo.pool(input.pods, in_pool)?);
    }
    let mut pods = Vec::new();
    for pod in input.pods {
        if in_pool(pod)? {
            pods.push(pod);
        }
    }
    Ok(pods)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn excluded(reason: &str) -> Outcome {
        Outcome::Candidate {
            target: Some(80),
            address: "10.0.0.1".parse().unwrap(),
            verdict: Some(Verdict::exclude(reason.to_owned())),
            excluded_by_backing: false,
        }
    }

    fn reason(o: Option<Outcome>) -> Arc<str> {
        match o {
            Some(Outcome::Candidate {
                verdict: Some(Verdict {
                    reason: Some(r), ..
                }),
                ..
            }) => r,
            other => panic!("not an excluded candidate: {other:?}"),
        }
    }

    #[test]
    fn remembered_reasons_that_are_equal_share_one_copy() {
        let mut cells = Outcomes::new(3, 1);
        cells.put_new(0, 0, excluded("portNames: no https"));
        cells.put_new(1, 0, excluded("portNames: no https"));
        cells.put_new(2, 0, excluded("podReady: not Ready"));
        let (a, b, c) = (
            reason(cells.take(0, 0)),
            reason(cells.take(1, 0)),
            reason(cells.take(2, 0)),
        );
        assert!(Arc::ptr_eq(&a, &b), "equal reasons share one string");
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(&*c, "podReady: not Ready");
    }
}
