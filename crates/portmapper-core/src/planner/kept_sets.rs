//! `PerPortSet` groups kept across passes, so that a pass in which a few pods changed touches
//! the sets those pods leave and join, not the pool.
//!
//! Kept when every port can be kept whole (see `KeptPort`: checks that read only the pod, no
//! named target, no legacy Endpoints, nothing rejected or abstained): a member's set then
//! depends on its own pod alone. Per IP family, each set holds its members compactly (address,
//! pool position, conditions), in endpoint order, and each pool position knows its set. A pass
//! takes the changed pods out (the memo does, as it hands the sets over), evaluates them, and
//! puts each into the set of its new port set, in order. Only the sets a changed pod left or
//! joined get desired endpoints built; the others go to emission as they are
//! ([`Group::lazy`]), and are written only if their live slices are no longer what the last
//! pass left (then their endpoints are built there). The same groups as the full path's
//! [`regroup`](super::port_sets::regroup) (a property test compares the two).

use std::collections::{BTreeMap, HashMap, HashSet};

use kube_validation::IpFamily;

use super::context::PlanContext;
use super::groups::{Group, Lazy, SlicePort, cmp_endpoints, desired_endpoint};
use super::objects::DesiredEndpoint;
use super::objects::KeptMember;
use super::objects::address_key;
use super::port_sets::unique_base;
use super::ports::static_target;

/// The port sets of every family.
#[derive(Debug, Default)]
pub(crate) struct KeptSets {
    /// In `PlanContext::families` order.
    pub families: Vec<KeptFamily>,
}

/// The port sets of one family.
#[derive(Debug, Default)]
pub(crate) struct KeptFamily {
    pub sets: Vec<KeptSet>,
    /// Pool position → index into `sets` (`u32::MAX`: in none).
    pub set_of: Vec<u32>,
    /// Port set → index into `sets`.
    index: HashMap<Vec<SlicePort>, u32>,
}

/// One port set and its members.
#[derive(Debug, Default)]
pub(crate) struct KeptSet {
    pub ports: Vec<SlicePort>,
    /// In endpoint order (address, then pod UID).
    pub members: Vec<KeptMember>,
    /// A member left or joined it in this pass.
    pub touched: bool,
}

impl KeptSets {
    /// The sets of a pass's port-set groups (placeholders hold no member and are not kept).
    pub fn from_groups(groups: &[Group<'_>], families: &[IpFamily], pods: usize) -> Self {
        let mut out = Self {
            families: families
                .iter()
                .map(|_| KeptFamily {
                    set_of: vec![u32::MAX; pods],
                    ..KeptFamily::default()
                })
                .collect(),
        };
        for g in groups.iter().filter(|g| !g.endpoints.is_empty()) {
            let Some(f) = families.iter().position(|f| *f == g.family) else {
                continue;
            };
            let members = g.endpoints.iter().map(KeptMember::of).collect();
            out.families[f].push(g.ports.clone(), members);
        }
        out
    }

    /// Whether these sets describe a pass with `families` and `pods` (they always should).
    pub fn fits(&self, families: usize, pods: usize) -> bool {
        self.families.len() == families && self.families.iter().all(|f| f.set_of.len() == pods)
    }

    /// Takes the pods at `changed` positions out of their sets (same pool as the last pass).
    pub fn remove(&mut self, changed: &[usize]) {
        for family in &mut self.families {
            for &pos in changed {
                let Some(slot) = family.set_of.get_mut(pos) else {
                    continue;
                };
                let set = std::mem::replace(slot, u32::MAX);
                if let Some(set) = family.sets.get_mut(set as usize) {
                    let at = set.members.iter().position(|m| m.position as usize == pos);
                    if let Some(at) = at {
                        set.members.remove(at);
                        set.touched = true;
                    }
                }
            }
        }
    }

    /// These sets at the positions of a pass whose pods came, went or moved: `moved[j]`, the
    /// new position of the last pass's pod `j` (`u32::MAX`: gone or changed, so it leaves its
    /// set, which is then touched). Members keep their order (by address and UID).
    pub fn moved(mut self, moved: &[u32], pods: usize) -> Self {
        for family in &mut self.families {
            family.set_of = vec![u32::MAX; pods];
            for (i, set) in family.sets.iter_mut().enumerate() {
                let before = set.members.len();
                set.members
                    .retain_mut(|m| match moved.get(m.position as usize).copied() {
                        Some(at) if at != u32::MAX => {
                            m.position = at;
                            true
                        }
                        _ => false,
                    });
                set.touched |= set.members.len() != before;
                for m in &set.members {
                    if let Some(slot) = family.set_of.get_mut(m.position as usize) {
                        *slot = u32::try_from(i).unwrap_or(u32::MAX);
                    }
                }
            }
        }
        self
    }

    /// Puts the changed pods into the sets of their port sets (`arrivals`, per family: every
    /// (port, endpoint) membership of a changed pod), and returns the pass's groups, family by
    /// family, each family's sorted by port set as [`regroup`](super::port_sets::regroup)
    /// sorts them: touched sets with their endpoints, the others lazy, and the placeholder of
    /// the ports without members.
    pub fn update<'a>(
        &mut self,
        ctx: &PlanContext<'a>,
        arrivals: Vec<Vec<(SlicePort, DesiredEndpoint<'a>)>>,
    ) -> Vec<Group<'a>> {
        let mut groups = Vec::new();
        for (f, (family, arrived)) in self.families.iter_mut().zip(arrivals).enumerate() {
            let mut rows: BTreeMap<u32, (Vec<SlicePort>, DesiredEndpoint<'a>)> = BTreeMap::new();
            for (port, e) in arrived {
                rows.entry(e.pool_position)
                    .or_insert_with(|| (Vec::new(), e))
                    .0
                    .push(port);
            }
            for (ports, e) in rows.into_values() {
                family.insert(ctx, ports, &e);
            }
            groups.extend(family.groups(ctx, f));
        }
        groups
    }

    /// Forgets what this pass touched, once its groups are emitted. Emptied sets stay (a pod
    /// joining one again finds it) until they are most of the sets.
    pub fn settle(&mut self) {
        for family in &mut self.families {
            let mut empty = 0;
            for set in &mut family.sets {
                set.touched = false;
                empty += usize::from(set.members.is_empty());
            }
            if empty > 16 && empty * 2 > family.sets.len() {
                family.sets.retain(|s| !s.members.is_empty());
                family.reindex();
            }
        }
    }
}

impl KeptFamily {
    fn push(&mut self, ports: Vec<SlicePort>, members: Vec<KeptMember>) {
        let i = u32::try_from(self.sets.len()).unwrap_or(u32::MAX);
        for m in &members {
            if let Some(slot) = self.set_of.get_mut(m.position as usize) {
                *slot = i;
            }
        }
        self.index.insert(ports.clone(), i);
        self.sets.push(KeptSet {
            ports,
            members,
            touched: false,
        });
    }

    /// Indexes the sets again after some went, and clears `touched`.
    fn reindex(&mut self) {
        self.index.clear();
        self.set_of.fill(u32::MAX);
        for (i, set) in self.sets.iter_mut().enumerate() {
            set.touched = false;
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            self.index.insert(set.ports.clone(), i);
            for m in &set.members {
                if let Some(slot) = self.set_of.get_mut(m.position as usize) {
                    *slot = i;
                }
            }
        }
    }

    /// Puts a changed pod's endpoint into the set of `ports`, in endpoint order.
    fn insert<'a>(
        &mut self,
        ctx: &PlanContext<'a>,
        ports: Vec<SlicePort>,
        e: &DesiredEndpoint<'a>,
    ) {
        let i = match self.index.get(&ports) {
            Some(&i) => i,
            None => {
                self.push(ports, Vec::new());
                u32::try_from(self.sets.len() - 1).unwrap_or(u32::MAX)
            }
        };
        let Some(set) = self.sets.get_mut(i as usize) else {
            return;
        };
        // Members before `e`: by address as integers; a tie reads the member's pod UID.
        let key = e.address_key();
        let at = set.members.partition_point(|m| {
            let mk = address_key(m.address);
            mk < key
                || (mk == key
                    && ctx
                        .pods
                        .get(m.position as usize)
                        .is_some_and(|p| p.uid.as_str() < e.uid()))
        });
        set.members.insert(at, KeptMember::of(e));
        set.touched = true;
        if let Some(slot) = self.set_of.get_mut(e.pool_position as usize) {
            *slot = i;
        }
    }

    /// This family's groups: its sets with members, and the placeholder of the ports none
    /// holds, sorted and named as `regroup` names them.
    fn groups<'a>(&self, ctx: &PlanContext<'a>, f: usize) -> Vec<Group<'a>> {
        let family = ctx.families[f];
        let covered: HashSet<usize> = self
            .sets
            .iter()
            .filter(|s| !s.members.is_empty())
            .flat_map(|s| s.ports.iter().map(|p| p.port))
            .collect();
        let uncovered: Vec<SlicePort> = ctx
            .ports
            .iter()
            .enumerate()
            .filter(|(i, _)| !covered.contains(i))
            .map(|(port, view)| SlicePort {
                port,
                target: view.service_port.map(static_target),
            })
            .collect();
        let mut order: Vec<(&[SlicePort], Option<usize>)> = self
            .sets
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.members.is_empty())
            .map(|(i, s)| (s.ports.as_slice(), Some(i)))
            .collect();
        if !uncovered.is_empty() {
            order.push((&uncovered, None));
        }
        order.sort_by(|a, b| a.0.cmp(b.0));
        let mut bases = HashSet::new();
        order
            .into_iter()
            .map(|(ports, set)| {
                let base = unique_base(ctx, ports, family, &mut bases);
                let (endpoints, lazy) = match set.map(|i| (i, &self.sets[i])) {
                    Some((_, s)) if s.touched => (endpoints(ctx, &s.members), None),
                    Some((i, s)) => (
                        Vec::new(),
                        Some(Lazy {
                            family: f,
                            set: i,
                            members: s.members.len(),
                        }),
                    ),
                    None => (Vec::new(), None),
                };
                Group {
                    ports: ports.to_vec(),
                    family,
                    base,
                    placeholder: set.is_none(),
                    endpoints,
                    at: Vec::new(),
                    lazy,
                }
            })
            .collect()
    }
}

/// The desired endpoints of kept members, in their order.
pub(crate) fn endpoints<'a>(
    ctx: &PlanContext<'a>,
    members: &[KeptMember],
) -> Vec<DesiredEndpoint<'a>> {
    let out: Vec<DesiredEndpoint<'a>> = members
        .iter()
        .map(|m| desired_endpoint(ctx, m.position as usize, m.address, m.ready, m.terminating))
        .collect();
    debug_assert!(out.windows(2).all(|w| !cmp_endpoints(&w[0], &w[1]).is_gt()));
    out
}
