//! Phase 1 of a plan: evaluate every (pool pod, Service port, IP family) and group the members
//! by slice set (port × family × target port), recording each pod's per-port state for status.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::IpAddr;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_validation::IpFamily;
use portmapper_api::TerminatingEndpoints;
use portmapper_api::check::CheckKind;

use super::memo::{EvalMemo, Outcome, PodMemo};
use super::naming::{group_base_name, parse_chunk};
use super::render::{DesiredEndpoint, EndpointFacts};
use super::status::PodPortState;
use super::types::{DecisionCounts, PlanWarning};
use super::{Context, Member, static_target};
use crate::check::is_no_result_yet;
use crate::decision::{Decision, Verdict};
use crate::membership::{Evaluation, PortRules, evaluate_port};
use crate::target::{
    PodAddress, ResolvedPort, ResolvedTarget, is_terminal, is_terminating, pod_address,
    resolve_target_port,
};

/// One slice set: a Service port × IP family × target port, with its desired endpoints sorted
/// by (address, pod UID), not rendered yet.
pub(crate) struct Group<'a> {
    pub port: usize,
    pub family: IpFamily,
    pub target: Option<i32>,
    pub base: String,
    pub placeholder: bool,
    pub endpoints: Vec<DesiredEndpoint<'a>>,
}

/// What phase 1 produces.
pub(crate) struct Evaluated<'a> {
    pub groups: Vec<Group<'a>>,
    /// `[port][pod]`: published (ready or not) or excluded with a reason; `None` = not a candidate.
    pub states: Vec<Vec<Option<PodPortState>>>,
    /// Members in the primary family, for the legacy Endpoints (only when enabled).
    pub members: Vec<Member>,
    /// Every decision made, by outcome.
    pub decisions: DecisionCounts,
}

struct Evaluator<'c, 'a> {
    ctx: &'c Context<'a>,
    ours: &'c [&'a EndpointSlice],
    warnings: &'c mut Vec<PlanWarning>,
    /// Memberships currently published, for Abstain; built on the first abstention only.
    published: Option<HashSet<(&'a str, IpFamily, &'a str)>>,
    rejected_warned: HashSet<(usize, String)>,
    /// Remembered outcomes, aligned with `ctx.pods`, when planning with a memo.
    memos: Option<Vec<PodMemo>>,
    /// Per port: whether its checks read only the pod, so their verdict can be remembered.
    pod_only: Vec<bool>,
    out: Evaluated<'a>,
}

/// Evaluates every membership and builds the groups. With `memo`, outcomes of pods unchanged
/// since the memo's last pass are reused instead of evaluated.
pub(crate) fn evaluate<'a>(
    ctx: &Context<'a>,
    ours: &[&'a EndpointSlice],
    warnings: &mut Vec<PlanWarning>,
    mut memo: Option<&mut EvalMemo>,
) -> Evaluated<'a> {
    let slots = ctx.ports.len() * ctx.families.len();
    let memos = memo.as_mut().map(|m| {
        m.checkout(
            &ctx.owner.uid,
            ctx.spec,
            ctx.service.spec.as_ref(),
            &ctx.gate_peers.types,
            ctx.pods,
            slots,
        )
    });
    let mut e = Evaluator {
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
        out: Evaluated {
            groups: Vec::new(),
            states: vec![vec![None; ctx.pods.len()]; ctx.ports.len()],
            members: Vec::new(),
            decisions: DecisionCounts::default(),
        },
    };
    for port in 0..ctx.ports.len() {
        for (family_idx, &family) in ctx.families.iter().enumerate() {
            e.port_family(port, family_idx, family);
        }
    }
    if let (Some(memo), Some(memos)) = (memo, e.memos.take()) {
        memo.check_in(ctx.pods, memos);
    }
    e.out
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
    fn port_family(&mut self, port_idx: usize, family_idx: usize, family: IpFamily) {
        let ctx = self.ctx;
        let port = &ctx.ports[port_idx];
        let slot = port_idx * ctx.families.len() + family_idx;
        let mut by_target: BTreeMap<Option<i32>, Vec<DesiredEndpoint<'a>>> = BTreeMap::new();
        let mut candidate_targets: BTreeSet<i32> = BTreeSet::new();
        for pod_idx in 0..ctx.pods.len() {
            let remembered = self
                .memos
                .as_mut()
                .and_then(|m| m[pod_idx].outcomes[slot].take());
            let outcome = match remembered {
                Some(o) => o,
                None => self.outcome(port_idx, pod_idx, family),
            };
            let endpoint = match &outcome {
                Outcome::NotCandidate => None,
                Outcome::Rejected { ip, reason } => {
                    self.reject(port_idx, pod_idx, ip, reason);
                    None
                }
                Outcome::Candidate {
                    target,
                    address,
                    verdict,
                } => {
                    if let Some(t) = target {
                        candidate_targets.insert(*t);
                    }
                    let computed;
                    let verdict = match verdict {
                        Some(v) => v,
                        None => {
                            computed = self.verdict(port_idx, pod_idx, family, *address);
                            &computed
                        }
                    };
                    self.member(port_idx, pod_idx, family, *target, *address, verdict)
                        .map(|e| (e, *target))
                }
            };
            if self.pod_only[port_idx]
                && let Some(m) = self.memos.as_mut()
            {
                m[pod_idx].outcomes[slot] = Some(outcome);
            }
            let Some((endpoint, target)) = endpoint else {
                continue;
            };
            let group_target = match (port.service_port, target) {
                (Some(sp), Some(t)) => Some(if port.named_target {
                    t
                } else {
                    static_target(sp)
                }),
                _ => None,
            };
            by_target.entry(group_target).or_default().push(endpoint);
        }
        self.close_groups(port_idx, family, by_target, &candidate_targets);
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
        Outcome::Candidate {
            target: target.map(|t| t.number),
            address,
            verdict: self.pod_only[port_idx]
                .then(|| self.evaluate_checks(port_idx, pod_idx, family, target, address)),
        }
    }

    /// The verdict of a candidate whose port's checks read more than the pod.
    fn verdict(
        &self,
        port_idx: usize,
        pod_idx: usize,
        family: IpFamily,
        address: IpAddr,
    ) -> Verdict {
        let ctx = self.ctx;
        let target = ctx.ports[port_idx]
            .service_port
            .and_then(|sp| resolve_target_port(ctx.pods[pod_idx], sp));
        self.evaluate_checks(port_idx, pod_idx, family, target, address)
    }

    fn evaluate_checks(
        &self,
        port_idx: usize,
        pod_idx: usize,
        family: IpFamily,
        target: Option<ResolvedTarget<'a>>,
        address: IpAddr,
    ) -> Verdict {
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
        evaluate_port(
            port.rules,
            &Evaluation {
                service: ctx.service,
                pod: ctx.pods[pod_idx],
                port: &resolved,
                network: ctx.network,
                publish_not_ready: ctx.pnr,
                gates: ctx.gates(),
            },
        )
    }

    /// A pod whose address the API would reject: left out, warned about once.
    fn reject(&mut self, port_idx: usize, pod_idx: usize, ip: &str, reason: &str) {
        let pod = self.ctx.pods[pod_idx];
        if self.rejected_warned.insert((pod_idx, ip.to_owned())) {
            self.warnings.push(PlanWarning::RejectedPodAddress {
                pod: pod.metadata.name.clone().unwrap_or_default(),
                ip: ip.to_owned(),
                reason: reason.to_owned(),
            });
        }
        merge_state(
            &mut self.out.states[port_idx][pod_idx],
            PodPortState::Excluded(format!("address {ip} cannot be published: {reason}")),
        );
    }

    /// Applies a candidate's verdict; renders its endpoint when it is a member.
    fn member(
        &mut self,
        port_idx: usize,
        pod_idx: usize,
        family: IpFamily,
        target: Option<i32>,
        address: IpAddr,
        verdict: &Verdict,
    ) -> Option<DesiredEndpoint<'a>> {
        let ctx = self.ctx;
        let port = &ctx.ports[port_idx];
        let pod = ctx.pods[pod_idx];
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        match verdict.decision {
            Decision::Include => self.out.decisions.include += 1,
            Decision::Exclude => self.out.decisions.exclude += 1,
            Decision::Abstain => self.out.decisions.abstain += 1,
        }
        let terminating = is_terminating(pod);
        let ours = self.ours;
        // Why a published membership stays only because a check abstained: the status lists it,
        // so `portmapper status` can tell a kept pod from an included one. Not while a network
        // check merely has no result yet (a restarted operator's first period): that would
        // rewrite every status twice per restart.
        let mut kept = None;
        let mut excluded = match verdict.decision {
            Decision::Include => None,
            Decision::Exclude => Some(verdict.reason().to_owned()),
            Decision::Abstain
                if self
                    .published
                    .get_or_insert_with(|| published_memberships(ours))
                    .contains(&(port.name, family, uid)) =>
            {
                kept = (!is_no_result_yet(verdict.reason())).then(|| verdict.reason().to_owned());
                None
            }
            Decision::Abstain => Some(format!(
                "{} (abstained; nothing published to keep)",
                verdict.reason()
            )),
        };
        if excluded.is_none()
            && terminating
            && ctx.spec.terminating_endpoints == TerminatingEndpoints::Drop
        {
            excluded = Some("pod is terminating and spec.terminatingEndpoints is Drop".to_owned());
        }
        let slot = &mut self.out.states[port_idx][pod_idx];
        if let Some(reason) = excluded {
            merge_state(slot, PodPortState::Excluded(reason));
            return None;
        }
        let ready = ctx.pnr || !terminating;
        merge_state(slot, PodPortState::Published { ready, kept });
        let zone = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .and_then(|n| ctx.node_zones.get(n))
            .map(String::as_str);
        let endpoint = DesiredEndpoint {
            facts: EndpointFacts {
                pod,
                address,
                ready,
                terminating,
                zone,
            },
            service_name: ctx.svc_name,
            namespace: ctx.namespace,
            hints: ctx.hints,
        };
        if ctx.spec.legacy_endpoints && family == ctx.families[0] {
            self.out.members.push(Member {
                pod: pod_idx,
                port: port_idx,
                target,
                ready,
                endpoint: endpoint.render(),
            });
        }
        Some(endpoint)
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
        let base = |t: Option<i32>| {
            group_base_name(
                ctx.svc_name,
                port.key.as_deref(),
                family,
                t.filter(|_| port.named_target),
            )
        };
        let placeholder = if by_target.values().any(|v| !v.is_empty()) {
            None
        } else if port.named_target {
            // Prefer a group that is already published so an emptied port rewrites one slice.
            let live_first = targets.iter().copied().find(|t| {
                let b = base(*t);
                self.ours.iter().any(|s| {
                    parse_chunk(s.metadata.name.as_deref().unwrap_or_default(), |x| x == b)
                        .is_some()
                })
            });
            live_first.or_else(|| targets.first().copied())
        } else {
            Some(static_key)
        };
        for target in targets {
            let mut endpoints = by_target.remove(&target).unwrap_or_default();
            endpoints.sort_by(|a, b| (a.facts.address, a.uid()).cmp(&(b.facts.address, b.uid())));
            self.out.groups.push(Group {
                port: port_idx,
                family,
                target,
                base: base(target),
                placeholder: placeholder == Some(target),
                endpoints,
            });
        }
    }
}

/// (port name, family, pod UID) of every endpoint in the given slices: what Abstain keeps, and
/// what the prober seeds as included.
pub fn published_memberships<'s>(
    slices: &[&'s EndpointSlice],
) -> HashSet<(&'s str, IpFamily, &'s str)> {
    let mut set = HashSet::new();
    for s in slices {
        let Some(family) = IpFamily::parse(&s.address_type) else {
            continue;
        };
        let port_name = s
            .ports
            .iter()
            .flatten()
            .next()
            .and_then(|p| p.name.as_deref())
            .unwrap_or_default();
        for e in &s.endpoints {
            if let Some(uid) = e.target_ref.as_ref().and_then(|r| r.uid.as_deref()) {
                set.insert((port_name, family, uid));
            }
        }
    }
    set
}

fn merge_state(slot: &mut Option<PodPortState>, new: PodPortState) {
    *slot = Some(match slot.take() {
        None => new,
        Some(old) => old.merge(new),
    });
}
