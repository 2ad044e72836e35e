//! Phase 2 of a plan: match live slices to groups by name, pack each group's endpoints into
//! chunks ([`pack`](super::pack::pack)), and render the slices to write (unchanged ones are the
//! live objects, shared).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::compare::{metadata_eq, ports_eq};
use super::groups::{Group, SlicePort, desired_endpoint, positions};
use super::kept_sets::{KeptSets, endpoints as kept_endpoints};
use super::memo::EvalMemo;
use super::naming::{chunk_name, parse_chunk};
use super::objects::KeptMember;
use super::objects::address_key;
use super::objects::{ANNOTATION_TRIGGER_TIME, slice_labels};
use super::pack::{LiveChunk, pack};
use super::trigger::{WrittenChunk, chunk_trigger_time, read_conditions};
use super::types::{Deletion, Plan, PlanError, PlannedSlice, WriteAction};
use super::{PlanContext, deletion};

/// Live slices per group, and chunk numbers each group may not create.
pub(crate) struct Assignment<'a> {
    live: Vec<Vec<(u32, &'a Arc<EndpointSlice>)>>,
    reserved: Vec<HashSet<u32>>,
}

/// Matches live slices to groups by name. Our slices that match no group are deleted; one whose
/// addressType differs from its group's family is deleted too (the field is immutable) and its
/// name is not reused in this pass. (Names held by others are not reserved here: a create at
/// one is a collision, decided after packing.)
pub(crate) fn assign_live<'a>(
    groups: &[Group<'_>],
    ours: &[&'a Arc<EndpointSlice>],
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
                    deletions.push(deletion(&s.metadata));
                }
            }
            None => deletions.push(deletion(&s.metadata)),
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
    live: &[(u32, &'s Arc<EndpointSlice>)],
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
    live: &Endpoint,
    position: u32,
) -> Option<&'m KeptMember> {
    let address: std::net::IpAddr = live.addresses.first()?.parse().ok()?;
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
pub(crate) fn emit_slices<'a>(
    ctx: &PlanContext<'a>,
    groups: Vec<Group<'a>>,
    assignment: &Assignment<'_>,
    out: &mut Plan,
    mut memo: Option<&mut EvalMemo>,
    sets: Option<&KeptSets>,
) -> Result<(), PlanError> {
    // Slices found exactly as desired in this pass (or written by it: no resourceVersion yet),
    // for the memo's next one.
    let mut settled: Vec<(String, Option<String>, Vec<u32>)> = Vec::new();
    let mut carried: Vec<&str> = Vec::new();
    let max = usize::try_from(ctx.spec.max_endpoints_per_slice.clamp(1, 1000)).unwrap_or(100);
    let template = ObjectMeta {
        namespace: Some(ctx.namespace.to_owned()),
        labels: Some(slice_labels(ctx.service, ctx.svc_name)),
        owner_references: Some(vec![ctx.owner.clone()]),
        ..ObjectMeta::default()
    };
    if let Some(memo) = memo.as_deref_mut() {
        memo.settle_template(&template);
    }
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
            let as_left = memo.as_deref().and_then(|m| {
                as_left(ctx, m, live, members, lazy.members, &template, &slice_ports)
            });
            if let Some(found) = as_left {
                // Nothing of it changed: its slices stand for themselves, nothing built.
                for (_, l) in live {
                    out.slices.push(PlannedSlice {
                        slice: Arc::clone(l),
                        action: WriteAction::Unchanged,
                    });
                }
                for entry in found {
                    match entry {
                        AsLeft::Carried(name) => carried.push(name),
                        AsLeft::Checked(name, rv, positions) => {
                            settled.push((name, Some(rv), positions))
                        }
                    }
                }
                continue;
            }
            group.endpoints = kept_endpoints(ctx, members);
            group.at = positions(&group.endpoints, ctx.pods.len());
        }
        built += usize::from(!group.endpoints.is_empty());
        // Only read when a chunk of this group is written.
        let mut conditions: Option<Vec<&str>> = None;
        // The settled slices' desired indexes, one buffer for the group.
        let mut flat: Vec<usize> = Vec::new();
        let ranges: Vec<Option<std::ops::Range<usize>>> = live
            .iter()
            .map(|(_, s)| {
                let (m, name) = (memo.as_deref()?, s.metadata.name.as_deref()?);
                let start = flat.len();
                let rv = s.metadata.resource_version.as_deref();
                m.settled_endpoints(name, rv, &group.at, &mut flat)
                    .then_some(start..flat.len())
            })
            .collect();
        let known: Vec<Option<&[usize]>> = ranges
            .iter()
            .map(|r| r.as_ref().and_then(|r| flat.get(r.clone())))
            .collect();
        let live_chunks: Vec<LiveChunk<'_>> = live
            .iter()
            .zip(&known)
            .map(|((chunk, s), known)| LiveChunk {
                chunk: *chunk,
                endpoints: &s.endpoints,
                // A settled slice carried this template and these ports when it was found
                // so, and has not changed since (its ports follow the Service's spec, which
                // the memo compares).
                drift: known.is_none()
                    && (!metadata_eq(&template, &s.metadata)
                        || !ports_eq(&slice_ports, s.ports.as_deref().unwrap_or_default())),
                settled: *known,
            })
            .collect();
        let desired = group.endpoints;
        let reserved = &assignment.reserved[g];
        let packing = pack(&desired, &live_chunks, max, group.placeholder, &|n| {
            reserved.contains(&n)
        });
        out.deletions.extend(
            packing
                .deleted
                .iter()
                .map(|&i| deletion(&live[i].1.metadata)),
        );
        for chunk in packing.chunks {
            let live_slice = chunk.live.map(|i| live[i].1);
            let action = match (live_slice, chunk.changed) {
                (None, _) => WriteAction::Create,
                (Some(l), true) => WriteAction::Update {
                    resource_version: l.metadata.resource_version.clone(),
                },
                (Some(l), false) => {
                    let taken_as_settled = chunk.live.is_some_and(|i| known[i].is_some());
                    if memo.is_some()
                        && let (Some(name), Some(rv)) =
                            (&l.metadata.name, &l.metadata.resource_version)
                    {
                        if taken_as_settled {
                            // Unchanged and taken as the last pass settled it: the same
                            // endpoints at the same positions, so its entry carries over.
                            // Every test checks that claim (debug builds only).
                            #[cfg(debug_assertions)]
                            if let Some(m) = memo.as_deref() {
                                let positions: Vec<u32> = chunk
                                    .endpoints
                                    .iter()
                                    .map(|&i| desired[i].pool_position)
                                    .collect();
                                debug_assert_eq!(
                                    m.usable_positions(name),
                                    Some(&positions[..]),
                                    "a carried settled slice must be what the pass found"
                                );
                            }
                            carried.push(name.as_str());
                        } else {
                            let positions = chunk
                                .endpoints
                                .iter()
                                .map(|&i| desired[i].pool_position)
                                .collect();
                            settled.push((name.clone(), Some(rv.clone()), positions));
                        }
                    }
                    // Already as desired: the live object stands for itself (nothing rendered).
                    out.slices.push(PlannedSlice {
                        slice: Arc::clone(l),
                        action: WriteAction::Unchanged,
                    });
                    continue;
                }
            };
            // The trigger time moves with content only (unchanged slices keep their own), and
            // names when the change that caused this write happened.
            let trigger = chunk_trigger_time(
                &WrittenChunk {
                    desired: &desired,
                    endpoints: &chunk.endpoints,
                    live: live_slice.map(AsRef::as_ref),
                    drift: chunk.live.is_some_and(|i| live_chunks[i].drift),
                },
                ctx.pods,
                conditions.get_or_insert_with(|| {
                    let mut read: Vec<&str> = group
                        .ports
                        .iter()
                        .flat_map(|p| read_conditions(ctx.ports[p.port].rules))
                        .collect();
                    read.sort_unstable();
                    read.dedup();
                    read
                }),
                ctx.now,
            );
            let mut metadata = template.clone();
            metadata.name = Some(chunk_name(&group.base, chunk.chunk));
            if memo.is_some()
                && let Some(name) = &metadata.name
            {
                // Checked (not compared in full) by the next pass, once it has its version.
                let positions = chunk
                    .endpoints
                    .iter()
                    .map(|&i| desired[i].pool_position)
                    .collect();
                settled.push((name.clone(), None, positions));
            }
            metadata.annotations = Some(BTreeMap::from([(
                ANNOTATION_TRIGGER_TIME.to_owned(),
                trigger.to_string(),
            )]));
            let slice = EndpointSlice {
                metadata,
                address_type: group.family.as_str().to_owned(),
                endpoints: chunk
                    .endpoints
                    .iter()
                    .map(|&i| desired[i].to_endpoint())
                    .collect(),
                ports: Some(slice_ports.clone()),
            };
            let errors = kube_validation::validate_endpoint_slice(&slice);
            if !errors.is_empty() {
                let name = slice.metadata.name.clone().unwrap_or_default();
                return Err(PlanError::InvalidRender {
                    kind: "EndpointSlice",
                    message: kube_validation::invalid_message(
                        "EndpointSlice",
                        "discovery.k8s.io",
                        &name,
                        &errors,
                    ),
                    name,
                });
            }
            out.slices.push(PlannedSlice {
                slice: Arc::new(slice),
                action,
            });
        }
    }
    if let Some(memo) = memo {
        memo.settle(&carried, settled);
        memo.count_groups_built(built);
    }
    Ok(())
}
