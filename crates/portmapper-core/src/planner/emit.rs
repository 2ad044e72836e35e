//! Phase 2 of a plan: match live slices to groups by name, pack each group's endpoints into
//! chunks ([`pack`](super::pack::pack)), and render the slices to write (unchanged ones are the
//! live objects, shared); [`evaluate_and_emit`] runs phase 1 ([`evaluate`]) before it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::discovery::v1::{EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::compare::{metadata_eq, ports_eq};
use super::context::PlanContext;
use super::evaluate;
use super::groups::{Group, SlicePort, desired_endpoint, positions};
use super::kept_sets::{KeptSets, endpoints as kept_endpoints};
use super::memo::EvalMemo;
use super::naming::{chunk_name, parse_chunk};
use super::objects::KeptMember;
use super::objects::address_key;
use super::objects::{ANNOTATION_TRIGGER_TIME, DesiredEndpoint, keep_for_update, slice_labels};
use super::pack::{LiveChunk, pack};
use super::trigger::{WrittenChunk, chunk_trigger_time, read_conditions};
use super::types::{Deletion, Plan, PlanError, PlannedSlice, WriteAction};
use crate::compact_slice::{CompactEndpoint, CompactSlice};
use crate::pod_record::PodRecord;

/// Phases 1 and 2: evaluates the pool and emits the slices into `out`; returns the evaluation
/// (for the status, the gates and the memo) and the port sets it kept.
pub(crate) fn evaluate_and_emit<'a>(
    ctx: &PlanContext<'a>,
    ours: &[&'a Arc<CompactSlice>],
    pool: &[&Arc<PodRecord>],
    input_pods: &[Arc<PodRecord>],
    out: &mut Plan,
    mut memo: Option<&mut EvalMemo>,
) -> Result<(evaluate::Evaluated<'a>, Option<KeptSets>), PlanError> {
    let ours_plain: Vec<&'a CompactSlice> = ours.iter().map(|&s| s.as_ref()).collect();
    let mut evaluated = evaluate::evaluate(
        ctx,
        &ours_plain,
        &mut out.warnings,
        memo.as_deref_mut().map(|m| (m, pool)),
    );
    if let Some(memo) = memo.as_deref_mut() {
        memo.settle_context(ctx.hints, ctx.node_zones);
    }
    out.decisions = evaluated.decisions;
    out.network_lookups = std::mem::take(&mut evaluated.lookups);
    evaluate::to_input_indices(&mut out.network_lookups, ctx.pods, input_pods);
    let assignment = assign_live(&evaluated.groups, ours, &mut out.deletions);
    let mut sets = evaluated.sets.take();
    let groups = std::mem::take(&mut evaluated.groups);
    emit_slices(ctx, groups, &assignment, out, memo, sets.as_ref())?;
    if let Some(sets) = sets.as_mut() {
        sets.settle();
    }
    Ok((evaluated, sets))
}

/// Live slices per group, and chunk numbers each group may not create.
pub(crate) struct Assignment<'a> {
    live: Vec<Vec<(u32, &'a Arc<CompactSlice>)>>,
    reserved: Vec<HashSet<u32>>,
}

/// Matches live slices to groups by name. Our slices that match no group are deleted; one whose
/// addressType differs from its group's family is deleted too (the field is immutable) and its
/// name is not reused in this pass. (Names held by others are not reserved here: a create at
/// one is a collision, decided after packing.)
pub(crate) fn assign_live<'a>(
    groups: &[Group<'_>],
    ours: &[&'a Arc<CompactSlice>],
    deletions: &mut Vec<Deletion>,
) -> Assignment<'a> {
    let base_index: HashMap<&str, usize> = groups
        .iter()
        .enumerate()
        .map(|(i, g)| (g.base.as_str(), i))
        .collect();
    let mut a = Assignment {
        live: vec![Vec::new(); groups.len()],
        reserved: vec![HashSet::new(); groups.len()],
    };
    for s in ours {
        let name = s.metadata.name.as_deref().unwrap_or_default();
        match parse_chunk(name, |b| base_index.contains_key(b)) {
            Some((base, chunk)) => {
                let g = base_index[base];
                if s.address_type == groups[g].family.as_str() {
                    a.live[g].push((chunk, s));
                } else {
                    a.reserved[g].insert(chunk);
                    deletions.push(Deletion::of(&s.metadata));
                }
            }
            None => deletions.push(Deletion::of(&s.metadata)),
        }
    }
    a
}

/// How a lazy group's live slice is as the last pass left it.
enum AsLeft<'s> {
    /// Its settled entry holds (the same resourceVersion).
    Carried(&'s str),
    /// Written by the last pass and found as written: (name, resourceVersion, positions).
    Checked(String, String, Vec<u32>),
}

/// Whether the live slices of a lazy group (a kept port set no member left or joined) are
/// exactly what the last pass left: each settled then (the same resourceVersion), or written
/// then and found with the endpoints it wrote (built for those endpoints only) and this
/// template and ports; together holding `total` endpoints, every member once (the entries come
/// from one packing of this same set, so they do not overlap). `None` when not.
fn as_left<'s>(
    ctx: &PlanContext<'_>,
    memo: &EvalMemo,
    live: &[(u32, &'s Arc<CompactSlice>)],
    members: &[KeptMember],
    total: usize,
    template: &ObjectMeta,
    slice_ports: &[EndpointPort],
) -> Option<Vec<AsLeft<'s>>> {
    let mut out = Vec::with_capacity(live.len());
    let mut count = 0;
    for (_, s) in live {
        let name = s.metadata.name.as_deref()?;
        let rv = s.metadata.resource_version.as_deref()?;
        let (remembered, positions) = memo.settled_entry(name)?;
        count += positions.len();
        match remembered {
            Some(r) if r == rv => out.push(AsLeft::Carried(name)),
            Some(_) => return None,
            None => {
                let same = s.endpoints.len() == positions.len()
                    && metadata_eq(template, &s.metadata)
                    && ports_eq(slice_ports, s.ports.as_deref().unwrap_or_default())
                    && s.endpoints.iter().zip(positions).all(|(e, &p)| {
                        member_at(members, e, p).is_some_and(|m| {
                            let d = desired_endpoint(
                                ctx,
                                p as usize,
                                m.address,
                                m.ready,
                                m.terminating,
                            );
                            d.same_as(e)
                        })
                    });
                if !same {
                    return None;
                }
                out.push(AsLeft::Checked(
                    name.to_owned(),
                    rv.to_owned(),
                    positions.to_vec(),
                ));
            }
        }
    }
    (count == total).then_some(out)
}

/// The member at pool position `position` whose address `live` carries (members are in
/// address order).
fn member_at<'m>(
    members: &'m [KeptMember],
    live: &CompactEndpoint,
    position: u32,
) -> Option<&'m KeptMember> {
    let address: std::net::IpAddr = live.addresses().next()?.parse().ok()?;
    let key = address_key(address);
    let first = members.partition_point(|m| address_key(m.address) < key);
    members[first..]
        .iter()
        .take_while(|m| address_key(m.address) == key)
        .find(|m| m.position == position)
}

/// The ports a group's slices list, in Service port order (none for the portless pseudo-port).
fn slice_ports(ctx: &PlanContext<'_>, ports: &[SlicePort]) -> Vec<EndpointPort> {
    ports
        .iter()
        .filter_map(|sp| {
            let port = &ctx.ports[sp.port];
            Some(EndpointPort {
                name: Some(port.name.to_owned()),
                port: Some(sp.target?),
                protocol: Some(port.protocol.to_owned()),
                app_protocol: port.service_port?.app_protocol.clone(),
            })
        })
        .collect()
}

/// Packs and renders every group into `out.slices` (and `out.deletions`); every slice to write
/// is validated.
pub(crate) fn emit_slices<'a, 's>(
    ctx: &PlanContext<'a>,
    groups: Vec<Group<'a>>,
    assignment: &Assignment<'s>,
    out: &mut Plan,
    mut memo: Option<&mut EvalMemo>,
    sets: Option<&KeptSets>,
) -> Result<(), PlanError> {
    let template = ObjectMeta {
        namespace: Some(ctx.namespace.to_owned()),
        labels: Some(slice_labels(ctx.service, ctx.svc_name)),
        owner_references: Some(vec![ctx.owner.clone()]),
        ..ObjectMeta::default()
    };
    if let Some(memo) = memo.as_deref_mut() {
        memo.settle_template(&template);
    }
    let mut e = Emitter {
        ctx,
        template,
        max: usize::try_from(ctx.spec.max_endpoints_per_slice.clamp(1, 1000)).unwrap_or(100),
        memo,
        settled: Vec::new(),
        carried: Vec::new(),
    };
    let mut built = 0;
    for (g, mut group) in groups.into_iter().enumerate() {
        let slice_ports = slice_ports(ctx, &group.ports);
        let live = &assignment.live[g];
        if let (Some(lazy), Some(sets)) = (group.lazy, sets) {
            let members = sets
                .families
                .get(lazy.family)
                .and_then(|f| f.sets.get(lazy.set))
                .map(|s| s.members.as_slice())
                .unwrap_or_default();
            if e.take_as_left(live, members, lazy.members, &slice_ports, out) {
                continue;
            }
            group.endpoints = kept_endpoints(ctx, members);
            group.at = positions(&group.endpoints, ctx.pods.len());
        }
        built += usize::from(!group.endpoints.is_empty());
        e.emit_group(group, live, &assignment.reserved[g], &slice_ports, out)?;
    }
    if let Some(memo) = e.memo {
        memo.settle(&e.carried, e.settled);
        memo.count_groups_built(built);
    }
    Ok(())
}

/// Emission of one pass's groups, and what it learns for the memo's next pass.
struct Emitter<'c, 'a, 's, 'm> {
    ctx: &'c PlanContext<'a>,
    /// The metadata every slice of ours carries but its name and annotations.
    template: ObjectMeta,
    /// Endpoints per slice.
    max: usize,
    memo: Option<&'m mut EvalMemo>,
    /// Slices found exactly as desired in this pass (or written by it: no resourceVersion
    /// yet): (name, resourceVersion, pool positions).
    settled: Vec<(String, Option<String>, Vec<u32>)>,
    /// Settled slices whose memo entries carry over as they are.
    carried: Vec<&'s str>,
}

/// A chunk packing kept or wrote: its endpoints (indexes into the group's desired endpoints)
/// as pool positions.
fn chunk_positions(desired: &[DesiredEndpoint<'_>], endpoints: &[usize]) -> Vec<u32> {
    endpoints
        .iter()
        .map(|&i| desired[i].pool_position)
        .collect()
}

impl<'s> Emitter<'_, '_, 's, '_> {
    /// A lazy group whose live slices are as the last pass left them: they stand for
    /// themselves, nothing is built. False when they are not.
    fn take_as_left(
        &mut self,
        live: &[(u32, &'s Arc<CompactSlice>)],
        members: &[KeptMember],
        total: usize,
        slice_ports: &[EndpointPort],
        out: &mut Plan,
    ) -> bool {
        let Some(found) = self.memo.as_deref().and_then(|m| {
            as_left(
                self.ctx,
                m,
                live,
                members,
                total,
                &self.template,
                slice_ports,
            )
        }) else {
            return false;
        };
        for (_, l) in live {
            out.slices.push(PlannedSlice {
                slice: Arc::clone(l),
                action: WriteAction::Unchanged,
                withdraws: false,
            });
        }
        for entry in found {
            match entry {
                AsLeft::Carried(name) => self.carried.push(name),
                AsLeft::Checked(name, rv, positions) => {
                    self.settled.push((name, Some(rv), positions));
                }
            }
        }
        true
    }

    /// The live chunks of a group for packing: each with the desired indexes it holds when
    /// the memo takes it as settled, and whether its metadata or ports drifted.
    fn live_chunks<'l>(
        &self,
        group: &Group<'_>,
        live: &'l [(u32, &'s Arc<CompactSlice>)],
        slice_ports: &[EndpointPort],
        flat: &'l mut Vec<usize>,
    ) -> Vec<LiveChunk<'l>> {
        let ranges: Vec<Option<std::ops::Range<usize>>> = live
            .iter()
            .map(|(_, s)| {
                let (m, name) = (self.memo.as_deref()?, s.metadata.name.as_deref()?);
                let start = flat.len();
                let rv = s.metadata.resource_version.as_deref();
                m.settled_endpoints(name, rv, &group.at, flat)
                    .then_some(start..flat.len())
            })
            .collect();
        let flat: &'l Vec<usize> = flat;
        live.iter()
            .zip(ranges)
            .map(|((chunk, s), range)| {
                let known = range.and_then(|r| flat.get(r));
                LiveChunk {
                    chunk: *chunk,
                    endpoints: &s.endpoints,
                    // A settled slice carried this template and these ports when it was found
                    // so, and has not changed since (its ports follow the Service's spec,
                    // which the memo compares).
                    drift: known.is_none()
                        && (!metadata_eq(&self.template, &s.metadata)
                            || !ports_eq(slice_ports, s.ports.as_deref().unwrap_or_default())),
                    settled: known,
                }
            })
            .collect()
    }

    /// Packs one group against its live slices and plans each chunk.
    fn emit_group(
        &mut self,
        group: Group<'_>,
        live: &[(u32, &'s Arc<CompactSlice>)],
        reserved: &HashSet<u32>,
        slice_ports: &[EndpointPort],
        out: &mut Plan,
    ) -> Result<(), PlanError> {
        let mut flat: Vec<usize> = Vec::new();
        let live_chunks = self.live_chunks(&group, live, slice_ports, &mut flat);
        let desired = &group.endpoints;
        let packing = pack(desired, &live_chunks, self.max, group.placeholder, &|n| {
            reserved.contains(&n)
        });
        out.deletions.extend(
            packing
                .deleted
                .iter()
                .map(|&i| Deletion::of(&live[i].1.metadata)),
        );
        // Only read when a chunk of this group is written.
        let mut conditions: Option<Vec<&str>> = None;
        for chunk in packing.chunks {
            let live_slice = chunk.live.map(|i| live[i].1);
            let action = match (live_slice, chunk.changed) {
                (None, _) => WriteAction::Create,
                (Some(l), true) => WriteAction::Update {
                    resource_version: l.metadata.resource_version.clone(),
                },
                (Some(l), false) => {
                    let settled = chunk.live.is_some_and(|i| live_chunks[i].settled.is_some());
                    self.unchanged(l, settled, (desired, &chunk.endpoints), out);
                    continue;
                }
            };
            let conditions = conditions.get_or_insert_with(|| {
                let mut read: Vec<&str> = group
                    .ports
                    .iter()
                    .flat_map(|p| read_conditions(self.ctx.ports[p.port].rules))
                    .collect();
                read.sort_unstable();
                read.dedup();
                read
            });
            let written = WrittenChunk {
                desired,
                endpoints: &chunk.endpoints,
                live: live_slice.map(AsRef::as_ref),
                drift: chunk.live.is_some_and(|i| live_chunks[i].drift),
            };
            let name = chunk_name(&group.base, chunk.chunk);
            let slice = self.render(&group, &written, conditions, name, slice_ports)?;
            let withdraws = live_slice.is_some_and(|l| withdraws(l, &slice));
            out.slices.push(PlannedSlice {
                slice: Arc::new(slice.into()),
                action,
                withdraws,
            });
        }
        Ok(())
    }

    /// A live slice already as desired: it stands for itself (nothing rendered), and the memo
    /// learns it as settled (`taken_as_settled`: the memo already held it so, and its entry
    /// carries over). `chunk`: the group's desired endpoints and the chunk's indexes into them.
    fn unchanged(
        &mut self,
        live: &'s Arc<CompactSlice>,
        taken_as_settled: bool,
        chunk: (&[DesiredEndpoint<'_>], &[usize]),
        out: &mut Plan,
    ) {
        if self.memo.is_some()
            && let (Some(name), Some(rv)) = (&live.metadata.name, &live.metadata.resource_version)
        {
            if taken_as_settled {
                // The same endpoints at the same positions as the last pass settled it. Every
                // test checks that claim (debug builds only).
                #[cfg(debug_assertions)]
                if let Some(m) = self.memo.as_deref() {
                    debug_assert_eq!(
                        m.usable_positions(name),
                        Some(&chunk_positions(chunk.0, chunk.1)[..]),
                        "a carried settled slice must be what the pass found"
                    );
                }
                self.carried.push(name.as_str());
            } else {
                let positions = chunk_positions(chunk.0, chunk.1);
                self.settled
                    .push((name.clone(), Some(rv.clone()), positions));
            }
        }
        out.slices.push(PlannedSlice {
            slice: Arc::clone(live),
            action: WriteAction::Unchanged,
            withdraws: false,
        });
    }

    /// Renders a chunk to write and validates it. The trigger time moves with content only
    /// (unchanged slices keep their own), and names when the change that caused this write
    /// happened.
    fn render(
        &mut self,
        group: &Group<'_>,
        written: &WrittenChunk<'_, '_>,
        conditions: &[&str],
        name: String,
        slice_ports: &[EndpointPort],
    ) -> Result<EndpointSlice, PlanError> {
        let trigger = chunk_trigger_time(written, self.ctx.pods, conditions, self.ctx.now);
        if self.memo.is_some() {
            // Checked (not compared in full) by the next pass, once it has its version.
            let positions = chunk_positions(written.desired, written.endpoints);
            self.settled.push((name.clone(), None, positions));
        }
        let mut metadata = self.template.clone();
        metadata.name = Some(name.clone());
        metadata.annotations = Some(BTreeMap::from([(
            ANNOTATION_TRIGGER_TIME.to_owned(),
            trigger.to_string(),
        )]));
        if let Some(live) = written.live {
            keep_for_update(&mut metadata, &live.metadata);
        }
        let slice = EndpointSlice {
            metadata,
            address_type: group.family.as_str().to_owned(),
            endpoints: written
                .endpoints
                .iter()
                .map(|&i| written.desired[i].to_endpoint())
                .collect(),
            ports: Some(slice_ports.to_vec()),
        };
        let errors = kube_validation::validate_endpoint_slice(&slice);
        if errors.is_empty() {
            return Ok(slice);
        }
        Err(PlanError::InvalidRender {
            kind: "EndpointSlice",
            message: kube_validation::invalid_message(
                "EndpointSlice",
                "discovery.k8s.io",
                &name,
                &errors,
            ),
            name,
        })
    }
}

/// Whether writing `new` over `live` takes away a ready or serving (address, port name) that
/// `live` publishes (an unset condition counts as true, as consumers read it).
fn withdraws(live: &CompactSlice, new: &EndpointSlice) -> bool {
    type Pairs<'s> = HashSet<(&'s str, &'s str, bool)>;
    // (address, port name, whether the pair is ready (true) or serving (false)).
    fn publish<'s>(
        out: &mut Pairs<'s>,
        ports: &'s Option<Vec<EndpointPort>>,
        addresses: impl Iterator<Item = &'s str>,
        (ready, serving): (bool, bool),
    ) {
        for address in addresses {
            for port in ports.iter().flatten() {
                let name = port.name.as_deref().unwrap_or_default();
                for (kind, on) in [(true, ready), (false, serving)] {
                    if on {
                        out.insert((address, name, kind));
                    }
                }
            }
        }
    }
    // An unset condition counts as true.
    fn on(c: Option<&k8s_openapi::api::discovery::v1::EndpointConditions>) -> (bool, bool) {
        (
            c.and_then(|c| c.ready).unwrap_or(true),
            c.and_then(|c| c.serving).unwrap_or(true),
        )
    }
    let mut now = HashSet::new();
    for e in &new.endpoints {
        let addresses = e.addresses.iter().map(String::as_str);
        publish(&mut now, &new.ports, addresses, on(e.conditions.as_ref()));
    }
    let mut before = HashSet::new();
    for e in &live.endpoints {
        publish(&mut before, &live.ports, e.addresses(), on(e.conditions()));
    }
    before.iter().any(|pair| !now.contains(pair))
}
