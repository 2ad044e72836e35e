//! Phase 1 of a plan: evaluate every (pool pod, Service port, IP family) and group the members
//! by slice set, recording each pod's per-port state for status. Members are gathered per port
//! × family × target port (the `PerPort` groups); `PerPortSet` regroups them by the set of ports
//! each pod is a member of ([`port_sets`](super::port_sets)).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use kube_validation::IpFamily;
use portmapper_api::check::CheckKind;
use portmapper_api::{SliceGrouping, TerminatingEndpoints};

use super::context::{Member, PlanContext};
use super::groups::{Group, SlicePort, cmp_endpoints, desired_endpoint, positions};
use super::kept_sets::KeptSets;
use super::memo::{DecisionCode, EvalMemo, KeptParts, KeptPort, Outcome, Outcomes};
use super::naming::group_base_name;
use super::objects::{DesiredEndpoint, KeptMember};
use super::ports::{PortView, static_target};
use super::status::{Listed, PodPortState};
use super::types::{DecisionCounts, PlanWarning};
use crate::check::{has_published_gate, is_no_result_yet, is_probed};
use crate::compact_slice::CompactSlice;
use crate::decision::{Decision, Verdict};
use crate::membership::{
    CheckClass, Evaluation, PortRules, PortWalk, Questions, classify_checks, walk_port,
};
use crate::network::{CheckPosition, NetworkKey, NetworkLookup};
use crate::pod_record::PodRecord;
use crate::target::{
    PodAddress, ResolvedPort, ResolvedTarget, is_terminal, is_terminating, pod_address,
    resolve_target_port,
};

/// What phase 1 produces.
pub(crate) struct Evaluated<'a> {
    pub groups: Vec<Group<'a>>,
    /// `[port][pod]`: published (ready or not) or excluded with a reason; `None` = not a candidate.
    pub states: Vec<Vec<Option<PodPortState>>>,
    /// Members in the primary family, for the legacy Endpoints (only when enabled).
    pub members: Vec<Member>,
    /// Every decision made, by outcome.
    pub decisions: DecisionCounts,
    /// The network results this evaluation depends on, `pod` indexing `ctx.pods`; in
    /// (port, family, pod, position) order.
    pub lookups: Vec<NetworkLookup>,
    /// Per port, when planning with a memo and the port can be kept whole: its members per
    /// family and its decisions, for [`EvalMemo::keep`] once the pass completes.
    pub kept: Vec<Option<KeptParts>>,
    /// Per port brought up to date from a kept one: what its status listed last time.
    pub listed_before: Vec<Option<Listed>>,
    /// Pool positions of the pods changed since the memo's last pass (when it has one).
    pub changed: Vec<usize>,
    /// `PerPortSet` with a memo, when every port could be kept whole: the port sets, for
    /// emission (lazy groups' members) and then [`EvalMemo::keep_sets`].
    pub sets: Option<KeptSets>,
    /// Whether `sets` are to be kept for the next pass.
    pub keep_sets: bool,
}

/// What visiting one (pod, port, family) found.
struct Visit<'a> {
    /// Its endpoint and target port, when it is a member.
    endpoint: Option<(DesiredEndpoint<'a>, Option<i32>)>,
    decision: DecisionCode,
    /// Its target port, when it is a candidate (named targets: every target a candidate
    /// resolves gets a group).
    candidate_target: Option<i32>,
    /// Its address is one the API rejects.
    rejected: bool,
}

struct Evaluator<'c, 'a> {
    ctx: &'c PlanContext<'a>,
    ours: &'c [&'a CompactSlice],
    warnings: &'c mut Vec<PlanWarning>,
    /// Memberships currently published, for Abstain; built on the first abstention only.
    published: Option<HashSet<(&'a str, IpFamily, &'a str)>>,
    rejected_warned: HashSet<(usize, String)>,
    /// Remembered outcomes, aligned with `ctx.pods`, when planning with a memo.
    memos: Option<Outcomes>,
    /// Per port: whether its checks read only the pod, so their verdict can be remembered.
    pod_only: Vec<bool>,
    /// Per port: the positions of the checks the prober evaluates, when their results are
    /// reported as lookups (empty for most ports: no allocation).
    probed: Vec<Vec<CheckPosition>>,
    /// Per port: what each check can tell, for the questions a walk asks.
    classes: Vec<Vec<CheckClass>>,
    /// Per pod: unchanged since the memo's last pass (empty without a memo).
    reused: Vec<bool>,
    /// `sliceGrouping: PerPort` (else the members are regrouped by port set).
    per_port: bool,
    /// Per family, when port sets are kept: every (port, endpoint) membership of the changed
    /// pods, for [`KeptSets::update`].
    arrivals: Vec<Vec<(SlicePort, DesiredEndpoint<'a>)>>,
    out: Evaluated<'a>,
}

/// Evaluates every membership and builds the groups. With `memo`, outcomes of pods unchanged
/// since the memo's last pass are reused instead of evaluated.
pub(crate) fn evaluate<'a>(
    ctx: &PlanContext<'a>,
    ours: &[&'a CompactSlice],
    warnings: &mut Vec<PlanWarning>,
    mut memo: Option<(&mut EvalMemo, &[&Arc<PodRecord>])>,
) -> Evaluated<'a> {
    let slots = ctx.ports.len() * ctx.families.len();
    let memos = memo.as_mut().map(|(m, pool)| m.checkout(pool, slots));
    let sets = memo.as_mut().and_then(|(m, _)| m.take_sets());
    let mut kept = memo
        .as_mut()
        .map(|(m, _)| m.take_kept())
        .unwrap_or_default();
    let reused = memo
        .as_ref()
        .map(|(m, _)| m.reused().to_vec())
        .unwrap_or_default();
    let mut e = Evaluator::new(ctx, ours, warnings, memos, reused);
    // Every port kept whole and the port sets with them: only the changed pods are visited.
    let mut sets = sets.filter(|s| {
        !e.per_port
            && s.fits(ctx.families.len(), ctx.pods.len())
            && (0..ctx.ports.len()).all(|p| {
                e.keepable(p)
                    && kept
                        .get(p)
                        .and_then(Option::as_ref)
                        .is_some_and(|k| e.fits(k))
            })
    });
    if sets.is_some() {
        e.arrivals = ctx.families.iter().map(|_| Vec::new()).collect();
    }
    let sets_kept = sets.is_some();
    let ports_kept = e.visit_ports(&mut kept, sets_kept);
    let whole = e.out.kept.iter().all(Option::is_some);
    if !e.per_port {
        e.group_by_port_set(&mut sets, whole);
    }
    // A rejected address or an abstention (not the pod's alone) ends keeping the sets (after
    // this pass: its lazy groups' members are there).
    e.out.sets = sets;
    e.out.keep_sets = whole;
    if e.memos.is_some() {
        for group in e.out.groups.iter_mut().filter(|g| g.lazy.is_none()) {
            group.at = positions(&group.endpoints, ctx.pods.len());
        }
    }
    if let (Some((memo, pool)), Some(memos)) = (memo, e.memos.take()) {
        memo.check_in(pool, memos);
        memo.count_ports_kept(ports_kept, sets_kept);
    }
    e.out
}

impl<'c, 'a> Evaluator<'c, 'a> {
    fn new(
        ctx: &'c PlanContext<'a>,
        ours: &'c [&'a CompactSlice],
        warnings: &'c mut Vec<PlanWarning>,
        memos: Option<Outcomes>,
        reused: Vec<bool>,
    ) -> Self {
        let changed = (0..reused.len()).filter(|&i| !reused[i]).collect();
        Self {
            ctx,
            ours,
            warnings,
            published: None,
            rejected_warned: HashSet::new(),
            memos,
            pod_only: ctx
                .ports
                .iter()
                .map(|p| reads_only_the_pod(p.rules))
                .collect(),
            probed: ctx.ports.iter().map(|p| probed_positions(ctx, p)).collect(),
            classes: ctx
                .ports
                .iter()
                .map(|p| classify_checks(p.rules, p.protocol))
                .collect(),
            reused,
            out: Evaluated {
                groups: Vec::new(),
                states: Vec::with_capacity(ctx.ports.len()),
                members: Vec::new(),
                decisions: DecisionCounts::default(),
                lookups: Vec::new(),
                kept: Vec::with_capacity(ctx.ports.len()),
                listed_before: Vec::with_capacity(ctx.ports.len()),
                changed,
                sets: None,
                keep_sets: false,
            },
            per_port: ctx.spec.slice_grouping == SliceGrouping::PerPort,
            arrivals: Vec::new(),
        }
    }

    /// Every port: from what was kept of it when it can be (`sets_kept`: the port sets are
    /// kept too), else in full. Returns how many ports started from what was kept.
    fn visit_ports(&mut self, kept: &mut [Option<KeptPort>], sets_kept: bool) -> usize {
        let mut ports_kept = 0;
        for port in 0..self.ctx.ports.len() {
            let keepable = self.keepable(port);
            // Port sets keep the members: a kept port alone cannot rebuild its groups.
            let start = kept
                .get_mut(port)
                .and_then(Option::take)
                .filter(|k| keepable && self.fits(k) && (self.per_port || sets_kept));
            let parts = match start {
                Some(mut k) => {
                    ports_kept += 1;
                    self.out
                        .listed_before
                        .push(Some(std::mem::take(&mut k.listed)));
                    self.port_from_kept(port, k, sets_kept)
                }
                None => {
                    self.out.listed_before.push(None);
                    self.port_in_full(port, keepable)
                }
            };
            self.out.kept.push(parts);
        }
        ports_kept
    }

    /// `PerPortSet`: the kept sets brought up to date with the changed pods, or the per-port
    /// groups regrouped by port set (and kept from now on when every port was kept whole).
    fn group_by_port_set(&mut self, sets: &mut Option<KeptSets>, whole: bool) {
        let ctx = self.ctx;
        match sets.as_mut() {
            Some(kept_sets) => {
                let arrivals = std::mem::take(&mut self.arrivals);
                self.out.groups = kept_sets.update(ctx, arrivals);
            }
            None => {
                let per_port = std::mem::take(&mut self.out.groups);
                self.out.groups = super::port_sets::regroup(ctx, per_port);
                if self.memos.is_some() && whole {
                    *sets = Some(KeptSets::from_groups(
                        &self.out.groups,
                        ctx.families,
                        ctx.pods.len(),
                    ));
                }
            }
        }
    }
}

/// Where the prober evaluates a check of this port: its network checks (`anyOf` entries
/// included), except those that never run (see [`is_probed`]). None under
/// `publishNotReadyAddresses` (network checks are health checks, bypassed then) and for the
/// pseudo-port of a headless Service without ports (no target port to probe).
fn probed_positions(ctx: &PlanContext<'_>, port: &PortView<'_>) -> Vec<CheckPosition> {
    let mut out = Vec::new();
    if ctx.pnr || port.service_port.is_none() {
        return out;
    }
    for (index, check) in port.rules.checks().iter().enumerate() {
        match check.kind() {
            Some(CheckKind::AnyOf(entries)) => {
                for (j, entry) in entries.iter().enumerate() {
                    if entry.kind().is_some_and(|k| is_probed(&k, port.protocol)) {
                        out.push(CheckPosition {
                            index,
                            any_of: Some(j),
                        });
                    }
                }
            }
            Some(kind) if is_probed(&kind, port.protocol) => out.push(CheckPosition::top(index)),
            Some(_) | None => {}
        }
    }
    out
}

/// Whether no check of these rules (`anyOf` entries included) reads anything but the pod and
/// the Service: no network check, no webhook.
fn reads_only_the_pod(rules: PortRules<'_>) -> bool {
    fn pod_only(check: &portmapper_api::Check) -> bool {
        check.kinds().iter().all(|k| match k {
            // Leaves cannot nest `anyOf`.
            CheckKind::AnyOf(entries) => entries
                .iter()
                .all(|e| e.kinds().iter().all(|k| !k.is_network())),
            k => !k.is_network(),
        })
    }
    rules.checks().iter().all(pod_only)
}

impl<'a> Evaluator<'_, 'a> {
    /// Whether a port can be kept whole across passes (see [`KeptPort`]), as far as its rules
    /// tell: a memo, checks that read only the pod, one target port, no legacy Endpoints
    /// (whose members are gathered per pass).
    fn keepable(&self, port_idx: usize) -> bool {
        self.memos.is_some()
            && self.pod_only[port_idx]
            && !self.ctx.ports[port_idx].named_target
            && !self.ctx.spec.legacy_endpoints
    }

    /// Whether a kept port has this pass's shape (it always should: the memo forgets it when
    /// the pool, the families or the inputs change).
    fn fits(&self, kept: &KeptPort) -> bool {
        let (pods, families) = (self.ctx.pods.len(), self.ctx.families.len());
        // Port sets keep their members themselves (`KeptSets`), not per port.
        let members = if self.per_port { families } else { 0 };
        kept.members.len() == members
            && kept.decisions.len() == pods * families
            && kept.states.len() == pods
            && self.reused.len() == pods
    }

    /// Evaluates every pod of a port; with `keepable`, returns what the next pass may start
    /// from (none when a pod's address was rejected or a check abstained: those are not the
    /// pod's alone).
    fn port_in_full(&mut self, port_idx: usize, keepable: bool) -> Option<KeptParts> {
        let ctx = self.ctx;
        let families = ctx.families.len();
        self.out.states.push(vec![None; ctx.pods.len()]);
        let mut decisions = if keepable {
            vec![DecisionCode::None; ctx.pods.len() * families]
        } else {
            Vec::new()
        };
        let mut members = Vec::new();
        let mut keep = keepable;
        for (family_idx, &family) in ctx.families.iter().enumerate() {
            let mut by_target: BTreeMap<Option<i32>, Vec<DesiredEndpoint<'a>>> = BTreeMap::new();
            let mut candidate_targets: BTreeSet<i32> = BTreeSet::new();
            for pod_idx in 0..ctx.pods.len() {
                let visit = self.visit(port_idx, pod_idx, family_idx, family);
                count(&mut self.out.decisions, visit.decision);
                if let Some(d) = decisions.get_mut(pod_idx * families + family_idx) {
                    *d = visit.decision;
                }
                keep &= !visit.rejected && visit.decision != DecisionCode::Abstain;
                if let Some(t) = visit.candidate_target {
                    candidate_targets.insert(t);
                }
                let Some((endpoint, target)) = visit.endpoint else {
                    continue;
                };
                let group_target = self.group_target(port_idx, target);
                // Sized for the whole pool at once: growing one endpoint at a time copied the
                // group several times over per pass. Named targets may split it; those others
                // grow.
                let capacity = if by_target.is_empty() {
                    ctx.pods.len()
                } else {
                    0
                };
                by_target
                    .entry(group_target)
                    .or_insert_with(|| Vec::with_capacity(capacity))
                    .push(endpoint);
            }
            self.close_groups(port_idx, family, by_target, &candidate_targets);
            if keep
                && self.per_port
                && let Some(group) = self.out.groups.last()
            {
                members.push(group.endpoints.iter().map(KeptMember::of).collect());
            }
        }
        keep.then_some((members, decisions))
    }

    /// A port kept whole by the last pass, brought up to date by visiting the pods that
    /// changed since: their old endpoints leave the groups, their new ones are merged in, in
    /// group order, and their decisions replace the old ones. The same groups, states and
    /// counts as [`port_in_full`](Self::port_in_full) gives (a property test compares the two
    /// along random event sequences).
    fn port_from_kept(
        &mut self,
        port_idx: usize,
        kept: KeptPort,
        into_sets: bool,
    ) -> Option<KeptParts> {
        let ctx = self.ctx;
        let families = ctx.families.len();
        let KeptPort {
            members: kept_members,
            mut decisions,
            mut states,
            listed: _,
        } = kept;
        let changed = std::mem::take(&mut self.out.changed);
        for &i in &changed {
            states[i] = None;
        }
        self.out.states.push(states);
        let mut members_out = Vec::with_capacity(families);
        let mut keep = true;
        let mut kept_members = kept_members.into_iter();
        for (family_idx, &family) in ctx.families.iter().enumerate() {
            let mut arrived: Vec<DesiredEndpoint<'a>> = Vec::new();
            for &pod_idx in &changed {
                let visit = self.visit(port_idx, pod_idx, family_idx, family);
                decisions[pod_idx * families + family_idx] = visit.decision;
                keep &= !visit.rejected && visit.decision != DecisionCode::Abstain;
                if let Some((endpoint, target)) = visit.endpoint {
                    if into_sets {
                        let port = SlicePort {
                            port: port_idx,
                            target: self.group_target(port_idx, target),
                        };
                        self.arrivals[family_idx].push((port, endpoint));
                    } else {
                        arrived.push(endpoint);
                    }
                }
            }
            if into_sets {
                // The port sets take the changed pods' memberships (`KeptSets::update`).
                continue;
            }
            let mut members = kept_members.next().unwrap_or_default();
            members.retain(|m| self.reused[m.position as usize]);
            arrived.sort_unstable_by(cmp_endpoints);
            let endpoints = self.merge_members(&members, arrived);
            let mut by_target = BTreeMap::new();
            if !endpoints.is_empty() {
                let target = ctx.ports[port_idx].service_port.map(static_target);
                by_target.insert(target, endpoints);
            }
            // One target port: the candidates' targets only matter for named ones.
            self.close_groups(port_idx, family, by_target, &BTreeSet::new());
            members.clear();
            if let Some(group) = self.out.groups.last() {
                members.extend(group.endpoints.iter().map(KeptMember::of));
            }
            members_out.push(members);
        }
        for &d in &decisions {
            count(&mut self.out.decisions, d);
        }
        self.out.changed = changed;
        keep.then_some((members_out, decisions))
    }

    /// The endpoints of the unchanged `members` (in group order) and of the `arrived` ones
    /// (sorted), merged in group order. Unchanged members' pods are not read unless an
    /// arriving endpoint ties with one on its address.
    fn merge_members(
        &self,
        members: &[KeptMember],
        arrived: Vec<DesiredEndpoint<'a>>,
    ) -> Vec<DesiredEndpoint<'a>> {
        let mut out = Vec::with_capacity(members.len() + arrived.len());
        let mut arrived = arrived.into_iter().peekable();
        for m in members {
            let endpoint = self.endpoint(m.position as usize, m.address, m.ready, m.terminating);
            while let Some(a) = arrived.next_if(|a| cmp_endpoints(a, &endpoint).is_lt()) {
                out.push(a);
            }
            out.push(endpoint);
        }
        out.extend(arrived);
        out
    }

    /// Evaluates one (pod, port, family), reusing the memo's outcome when it has one, and
    /// records the pod's state for the port.
    fn visit(
        &mut self,
        port_idx: usize,
        pod_idx: usize,
        family_idx: usize,
        family: IpFamily,
    ) -> Visit<'a> {
        let slot = port_idx * self.ctx.families.len() + family_idx;
        let remembered = self.memos.as_mut().and_then(|m| m.take(pod_idx, slot));
        let fresh = remembered.is_none();
        let outcome = match remembered {
            Some(o) => o,
            None => self.outcome(port_idx, pod_idx, family),
        };
        let mut visit = Visit {
            endpoint: None,
            decision: DecisionCode::None,
            candidate_target: None,
            rejected: false,
        };
        match &outcome {
            Outcome::NotCandidate => {}
            Outcome::Rejected { ip, reason } => {
                self.reject(port_idx, pod_idx, ip, reason);
                visit.rejected = true;
            }
            Outcome::Candidate {
                target,
                address,
                verdict,
                excluded_by_backing,
            } => {
                visit.candidate_target = *target;
                let computed;
                let (verdict, excluded_by_backing) = match verdict {
                    Some(v) => (v, *excluded_by_backing),
                    None => {
                        computed = self.verdict(port_idx, pod_idx, family, *address);
                        (&computed.0, computed.1)
                    }
                };
                visit.decision = match verdict.decision {
                    Decision::Include => DecisionCode::Include,
                    Decision::Exclude => DecisionCode::Exclude,
                    Decision::Abstain => DecisionCode::Abstain,
                };
                let facts = (*target, *address);
                visit.endpoint = self
                    .member(
                        port_idx,
                        pod_idx,
                        family,
                        facts,
                        verdict,
                        excluded_by_backing,
                    )
                    .map(|e| (e, *target));
            }
        }
        if self.pod_only[port_idx]
            && let Some(m) = self.memos.as_mut()
        {
            if fresh {
                m.put_new(pod_idx, slot, outcome);
            } else {
                m.put(pod_idx, slot, outcome);
            }
        }
        visit
    }

    /// The group a member's endpoint joins: its resolved target for a named targetPort, else
    /// the port's static target; `None` for the portless pseudo-port.
    fn group_target(&self, port_idx: usize, target: Option<i32>) -> Option<i32> {
        let port = &self.ctx.ports[port_idx];
        match (port.service_port, target) {
            (Some(sp), Some(t)) => Some(if port.named_target {
                t
            } else {
                static_target(sp)
            }),
            _ => None,
        }
    }

    /// What the pod alone decides for one (port, family): candidacy, and the verdict when the
    /// port's checks read only the pod.
    fn outcome(&self, port_idx: usize, pod_idx: usize, family: IpFamily) -> Outcome {
        let ctx = self.ctx;
        let port = &ctx.ports[port_idx];
        let pod = ctx.pods[pod_idx];
        if is_terminal(pod) {
            return Outcome::NotCandidate;
        }
        let target = match port.service_port {
            None => None,
            Some(sp) => match resolve_target_port(pod, sp) {
                Some(t) => Some(t),
                None => return Outcome::NotCandidate,
            },
        };
        let address = match pod_address(pod, family) {
            PodAddress::Usable(a) => a,
            PodAddress::Missing => return Outcome::NotCandidate,
            PodAddress::Rejected { ip, reason } => return Outcome::Rejected { ip, reason },
        };
        let walk = self.pod_only[port_idx].then(|| {
            let ask = Questions {
                without_network: false,
                backing: has_published_gate(pod),
            };
            self.walk_checks(port_idx, pod_idx, family, target, address, ask)
        });
        Outcome::Candidate {
            target: target.map(|t| t.number),
            address,
            excluded_by_backing: walk.as_ref().is_some_and(|w| w.excluded_by_backing),
            verdict: walk.map(|w| w.verdict),
        }
    }

    /// The verdict of a candidate whose port's checks read more than the pod, and whether a
    /// backing check excludes it (asked for gated pods only); records the network lookups it
    /// depends on.
    fn verdict(
        &mut self,
        port_idx: usize,
        pod_idx: usize,
        family: IpFamily,
        address: IpAddr,
    ) -> (Verdict, bool) {
        let ctx = self.ctx;
        let pod = ctx.pods[pod_idx];
        let target = ctx.ports[port_idx]
            .service_port
            .and_then(|sp| resolve_target_port(pod, sp));
        let probed = !self.probed[port_idx].is_empty();
        let ask = Questions {
            without_network: probed,
            backing: has_published_gate(pod),
        };
        let walk = self.walk_checks(port_idx, pod_idx, family, target, address, ask);
        if probed
            && !walk.excluded_without_network
            && let Some(target) = target
        {
            self.record_lookups(port_idx, pod_idx, family, address, target.number);
        }
        (walk.verdict, walk.excluded_by_backing)
    }

    /// The lookups of one candidate whose non-network checks leave the network checks a say:
    /// every probed position of the port, read now or once an `anyOf` sibling changes.
    fn record_lookups(
        &mut self,
        port_idx: usize,
        pod_idx: usize,
        family: IpFamily,
        address: IpAddr,
        target_port: i32,
    ) {
        let ctx = self.ctx;
        let port = &ctx.ports[port_idx];
        let uid = ctx.pods[pod_idx].uid.as_str();
        let ours = self.ours;
        let published = self
            .published
            .get_or_insert_with(|| published_memberships(ours))
            .contains(&(port.name, family, uid));
        for &position in &self.probed[port_idx] {
            self.out.lookups.push(NetworkLookup {
                key: NetworkKey {
                    pod_uid: uid.to_owned(),
                    port_name: port.name.to_owned(),
                    family,
                    position,
                },
                pod: pod_idx,
                service_port: port_idx,
                address,
                target_port,
                published,
            });
        }
    }

    fn walk_checks(
        &self,
        port_idx: usize,
        pod_idx: usize,
        family: IpFamily,
        target: Option<ResolvedTarget<'a>>,
        address: IpAddr,
        ask: Questions,
    ) -> PortWalk {
        let ctx = self.ctx;
        let port = &ctx.ports[port_idx];
        let resolved = ResolvedPort {
            name: port.name,
            port: port.number,
            protocol: port.protocol,
            target,
            address,
            family,
        };
        walk_port(
            port.rules,
            &Evaluation {
                service: ctx.service,
                pod: ctx.pods[pod_idx],
                port: &resolved,
                network: ctx.network,
                publish_not_ready: ctx.pnr,
                gates: ctx.gates(),
            },
            ask,
            &self.classes[port_idx],
        )
    }

    /// A pod whose address the API would reject: left out, warned about once.
    fn reject(&mut self, port_idx: usize, pod_idx: usize, ip: &str, reason: &str) {
        let pod = self.ctx.pods[pod_idx];
        if self.rejected_warned.insert((pod_idx, ip.to_owned())) {
            self.warnings.push(PlanWarning::RejectedPodAddress {
                pod: pod.name.clone(),
                ip: ip.to_owned(),
                reason: reason.to_owned(),
            });
        }
        // Meant to serve, but its address cannot be published: the gate must say so.
        merge_state(
            &mut self.out.states[port_idx][pod_idx],
            PodPortState::Excluded {
                reason: format!("address {ip} cannot be published: {reason}").into(),
                meant_to_serve: true,
            },
        );
    }

    /// Applies a candidate's verdict; renders its endpoint when it is a member.
    /// `excluded_by_backing`: a backing check excludes it (the pod is not meant to serve the
    /// port), as far as asked.
    fn member(
        &mut self,
        port_idx: usize,
        pod_idx: usize,
        family: IpFamily,
        (target, address): (Option<i32>, IpAddr),
        verdict: &Verdict,
        excluded_by_backing: bool,
    ) -> Option<DesiredEndpoint<'a>> {
        let ctx = self.ctx;
        let port = &ctx.ports[port_idx];
        let pod = ctx.pods[pod_idx];
        let uid = pod.uid.as_str();
        let terminating = is_terminating(pod);
        let ours = self.ours;
        // Why a published membership stays only because a check abstained: the status lists it,
        // so `portmapper status` can tell a kept pod from an included one. Not while a network
        // check merely has no result yet (a restarted operator's first period): that would
        // rewrite every status twice per restart.
        let mut kept: Option<Arc<str>> = None;
        let shared_reason = || verdict.reason.clone().unwrap_or_default();
        let mut excluded: Option<Arc<str>> = match verdict.decision {
            Decision::Include => None,
            Decision::Exclude => Some(shared_reason()),
            Decision::Abstain
                if self
                    .published
                    .get_or_insert_with(|| published_memberships(ours))
                    .contains(&(port.name, family, uid)) =>
            {
                kept = (!is_no_result_yet(verdict.reason())).then(shared_reason);
                None
            }
            Decision::Abstain => Some(
                format!(
                    "{} (abstained; nothing published to keep)",
                    verdict.reason()
                )
                .into(),
            ),
        };
        if excluded.is_none()
            && terminating
            && ctx.spec.terminating_endpoints == TerminatingEndpoints::Drop
        {
            excluded = Some("pod is terminating and spec.terminatingEndpoints is Drop".into());
        }
        let slot = &mut self.out.states[port_idx][pod_idx];
        if let Some(reason) = excluded {
            merge_state(
                slot,
                PodPortState::Excluded {
                    reason,
                    meant_to_serve: !excluded_by_backing,
                },
            );
            return None;
        }
        let ready = ctx.pnr || !terminating;
        merge_state(slot, PodPortState::Published { ready, kept });
        let endpoint = self.endpoint(pod_idx, address, ready, terminating);
        if ctx.spec.legacy_endpoints && family == ctx.families[0] {
            self.out.members.push(Member {
                pod: pod_idx,
                port: port_idx,
                target,
                ready,
                endpoint: endpoint.to_endpoint(),
            });
        }
        Some(endpoint)
    }

    /// The desired endpoint of a member.
    fn endpoint(
        &self,
        pod_idx: usize,
        address: IpAddr,
        ready: bool,
        terminating: bool,
    ) -> DesiredEndpoint<'a> {
        desired_endpoint(self.ctx, pod_idx, address, ready, terminating)
    }

    /// Turns one port × family's members into groups: the static target, or every target a
    /// candidate resolves; marks the placeholder when nobody is a member.
    fn close_groups(
        &mut self,
        port_idx: usize,
        family: IpFamily,
        mut by_target: BTreeMap<Option<i32>, Vec<DesiredEndpoint<'a>>>,
        candidate_targets: &BTreeSet<i32>,
    ) {
        let ctx = self.ctx;
        let port = &ctx.ports[port_idx];
        let static_key = port
            .service_port
            .filter(|_| !port.named_target)
            .map(static_target);
        let targets: Vec<Option<i32>> = if port.named_target {
            candidate_targets.iter().map(|t| Some(*t)).collect()
        } else {
            vec![static_key]
        };
        let placeholder = if by_target.values().any(|v| !v.is_empty()) {
            None
        } else if port.named_target {
            // Prefer a number already published so an emptied port rewrites one slice.
            let published = published_targets(self.ours, port.name, family);
            let live_first = targets
                .iter()
                .copied()
                .find(|t| t.is_some_and(|t| published.contains(&t)));
            live_first.or_else(|| targets.first().copied())
        } else {
            Some(static_key)
        };
        for target in targets {
            let mut endpoints = by_target.remove(&target).unwrap_or_default();
            endpoints.sort_unstable_by(cmp_endpoints);
            self.out.groups.push(Group {
                ports: vec![SlicePort {
                    port: port_idx,
                    target,
                }],
                family,
                base: group_base_name(
                    ctx.svc_name,
                    port.key.as_deref(),
                    family,
                    target.filter(|_| port.named_target),
                ),
                placeholder: placeholder == Some(target),
                endpoints,
                at: Vec::new(),
                lazy: None,
            });
        }
    }
}

/// The numbers our live slices of `family` publish port `name` at (any shape).
fn published_targets(ours: &[&CompactSlice], name: &str, family: IpFamily) -> BTreeSet<i32> {
    ours.iter()
        .filter(|s| s.address_type == family.as_str())
        .flat_map(|s| s.ports.iter().flatten())
        .filter(|p| p.name.as_deref().unwrap_or_default() == name)
        .filter_map(|p| p.port)
        .collect()
}

/// (port name, family, pod UID) of every endpoint in the given slices: what Abstain keeps, and
/// what the prober seeds as included.
pub fn published_memberships<'s>(
    slices: &[&'s CompactSlice],
) -> HashSet<(&'s str, IpFamily, &'s str)> {
    let mut set = HashSet::new();
    for s in slices {
        let Some(family) = IpFamily::parse(&s.address_type) else {
            continue;
        };
        // Every port of the slice counts (a port-set slice lists several); a portless slice
        // stands for the pseudo-port, whose name is "".
        let mut names: Vec<&str> = s
            .ports
            .iter()
            .flatten()
            .map(|p| p.name.as_deref().unwrap_or_default())
            .collect();
        if names.is_empty() {
            names.push("");
        }
        for e in &s.endpoints {
            if let Some(uid) = e.target_uid() {
                for &name in &names {
                    set.insert((name, family, uid));
                }
            }
        }
    }
    set
}

/// Counts one decision (none for a pod that is not a candidate).
fn count(counts: &mut DecisionCounts, decision: DecisionCode) {
    match decision {
        DecisionCode::None => {}
        DecisionCode::Include => counts.include += 1,
        DecisionCode::Exclude => counts.exclude += 1,
        DecisionCode::Abstain => counts.abstain += 1,
    }
}

fn merge_state(slot: &mut Option<PodPortState>, new: PodPortState) {
    *slot = Some(match slot.take() {
        None => new,
        Some(old) => old.merge(new),
    });
}

/// Re-points lookups from the pool (`pool`, a subsequence of `input`) to `PlanInput::pods`.
/// Only built when something is probed, so a plan without network checks pays nothing.
pub(crate) fn to_input_indices(
    lookups: &mut [NetworkLookup],
    pool: &[&PodRecord],
    input: &[Arc<PodRecord>],
) {
    if lookups.is_empty() {
        return;
    }
    let mut at = Vec::with_capacity(pool.len());
    let mut rest = input.iter().enumerate();
    for &pod in pool {
        if let Some((i, _)) = rest.find(|(_, p)| std::ptr::eq(p.as_ref(), pod)) {
            at.push(i);
        }
    }
    for lookup in lookups {
        if let Some(&i) = at.get(lookup.pod) {
            lookup.pod = i;
        }
    }
}
