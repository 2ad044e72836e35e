//! `sliceGrouping: PerPortSet`: the per-port groups of one plan regrouped by port set, the
//! native controller's shape (`NewPortMapKey` in its reconciler). A member's key, per IP family,
//! is the set of (Service port, resolved number) it is a member of; members with the same key
//! share one slice set listing all those ports, so a pod whose membership does not change is in
//! one slice per family, and a flip of its conditions rewrites that one slice.
//!
//! Placeholders: the Service ports without any member in a family (those that `PerPort` keeps
//! an empty slice for) share one empty slice listing all of them, so consumers still see every
//! port with zero endpoints rather than no port. A named target port there is listed at the
//! number the per-port placeholder would use (one already published, else the lowest a
//! candidate resolves); a named port no candidate resolves is not listed. Without members at
//! all, that slice lists every port; the first members then fill it in place when they serve
//! exactly those ports.

use std::collections::{BTreeMap, HashMap, HashSet};

use kube_validation::IpFamily;

use super::context::PlanContext;
use super::groups::{Group, SlicePort};
use super::naming::{NamedPort, port_set_base_name};
use super::objects::DesiredEndpoint;

/// The port-set groups of `per_port` (the `PerPort` groups, in port order; each lists one port
/// and its endpoints sorted), family by family in `ctx.families` order, each family's groups
/// sorted by port set.
pub(crate) fn regroup<'a>(ctx: &PlanContext<'a>, per_port: Vec<Group<'a>>) -> Vec<Group<'a>> {
    let mut by_family: Vec<Vec<Group<'a>>> = ctx.families.iter().map(|_| Vec::new()).collect();
    for g in per_port {
        if let Some(i) = ctx.families.iter().position(|f| *f == g.family) {
            by_family[i].push(g);
        }
    }
    let mut out = Vec::new();
    for (&family, groups) in ctx.families.iter().zip(by_family) {
        out.extend(family_groups(ctx, family, groups));
    }
    out
}

/// Port sets of one family, as ids into `sets` (0: the empty set), extended one port at a time.
struct Keys {
    sets: Vec<Vec<SlicePort>>,
    next: HashMap<(u32, SlicePort), u32>,
}

impl Keys {
    fn new() -> Self {
        Self {
            sets: vec![Vec::new()],
            next: HashMap::new(),
        }
    }

    /// The set `id` plus `port` (ports are added in Service port order).
    fn with(&mut self, id: u32, port: SlicePort) -> u32 {
        let sets = &mut self.sets;
        *self.next.entry((id, port)).or_insert_with(|| {
            let mut set = sets.get(id as usize).cloned().unwrap_or_default();
            set.push(port);
            sets.push(set);
            u32::try_from(sets.len() - 1).unwrap_or(u32::MAX)
        })
    }
}

fn family_groups<'a>(
    ctx: &PlanContext<'a>,
    family: IpFamily,
    groups: Vec<Group<'a>>,
) -> Vec<Group<'a>> {
    // Each member's key, by pool position.
    let mut keys = Keys::new();
    let mut key_of = vec![0u32; ctx.pods.len()];
    for g in &groups {
        let Some(&port) = g.ports.first() else {
            continue;
        };
        for e in &g.endpoints {
            if let Some(k) = key_of.get_mut(e.pool_position as usize) {
                *k = keys.with(*k, port);
            }
        }
    }
    // Members in endpoint order (every group's endpoints are sorted the same way, and a pod's
    // endpoint is the same on every port), each once, into its set's group.
    let mut members: BTreeMap<&[SlicePort], Vec<DesiredEndpoint<'a>>> = BTreeMap::new();
    let mut seen = vec![false; ctx.pods.len()];
    for e in merged(&groups) {
        let pos = e.pool_position as usize;
        let (Some(done), Some(&k)) = (seen.get_mut(pos), key_of.get(pos)) else {
            continue;
        };
        if std::mem::replace(done, true) {
            continue;
        }
        if let Some(set) = keys.sets.get(k as usize).filter(|s| !s.is_empty()) {
            members.entry(set.as_slice()).or_default().push(e);
        }
    }
    let uncovered: Vec<SlicePort> = groups
        .iter()
        .filter(|g| g.placeholder)
        .filter_map(|g| g.ports.first().copied())
        .collect();
    let mut sets: Vec<(Vec<SlicePort>, Vec<DesiredEndpoint<'a>>, bool)> = members
        .into_iter()
        .map(|(set, endpoints)| (set.to_vec(), endpoints, false))
        .collect();
    if !uncovered.is_empty() {
        sets.push((uncovered, Vec::new(), true));
    }
    sets.sort_by(|a, b| a.0.cmp(&b.0));
    let mut bases = HashSet::new();
    sets.into_iter()
        .map(|(ports, endpoints, placeholder)| Group {
            base: unique_base(ctx, &ports, family, &mut bases),
            ports,
            family,
            placeholder,
            endpoints,
            at: Vec::new(),
            lazy: None,
        })
        .collect()
}

/// The endpoints of every group, merged in endpoint order (duplicates included).
fn merged<'g, 'a>(groups: &'g [Group<'a>]) -> impl Iterator<Item = DesiredEndpoint<'a>> + 'g {
    let mut heads = vec![0usize; groups.len()];
    std::iter::from_fn(move || {
        let mut best: Option<(usize, &DesiredEndpoint<'a>)> = None;
        for (g, group) in groups.iter().enumerate() {
            let Some(e) = group.endpoints.get(heads[g]) else {
                continue;
            };
            if best.is_none_or(|(_, b)| super::groups::cmp_endpoints(e, b).is_lt()) {
                best = Some((g, e));
            }
        }
        let (g, e) = best?;
        heads[g] += 1;
        Some(*e)
    })
}

/// The set's base name, salted past any base an earlier set of the family took.
pub(crate) fn unique_base(
    ctx: &PlanContext<'_>,
    ports: &[SlicePort],
    family: IpFamily,
    taken: &mut HashSet<String>,
) -> String {
    let named: Vec<NamedPort<'_>> = ports
        .iter()
        .filter_map(|sp| {
            let port = ctx.ports.get(sp.port)?;
            Some(NamedPort {
                name: port.name,
                key: port.key.as_deref()?,
                number: sp.target?,
                protocol: port.protocol,
            })
        })
        .collect();
    let mut salt = 0;
    loop {
        let base = port_set_base_name(ctx.svc_name, &named, family, salt);
        if taken.insert(base.clone()) {
            return base;
        }
        salt += 1;
    }
}
