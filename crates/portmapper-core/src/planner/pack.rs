//! Churn-minimising packing of one group's endpoints into chunks, like the native controller:
//! endpoints stay in the slice they are in (updated in place when only their conditions or
//! topology changed), new endpoints first fill slices that are being written anyway (fullest
//! first), then — when fewer than a full slice — the unchanged slice that ends up closest to
//! full, and only then go to new slices, which recycle the names of emptied slices before taking
//! the lowest free chunk number.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

use k8s_openapi::api::discovery::v1::Endpoint;

use super::compare::endpoint_eq;
use super::objects::{DesiredEndpoint, address_key};
use crate::compact_slice::CompactEndpoint;

/// One live slice of the group.
#[derive(Clone, Copy, Debug)]
pub struct LiveChunk<'a> {
    /// Its chunk number (1 = the base name).
    pub chunk: u32,
    /// Its endpoints.
    pub endpoints: &'a [CompactEndpoint],
    /// Its metadata or ports differ from the desired ones (it is written anyway).
    pub drift: bool,
    /// When known to be exactly as desired already (nothing it depends on changed since a
    /// pass found it so): the desired index of each of its endpoints, in slice order, which
    /// packing then takes without finding and comparing them again.
    pub settled: Option<&'a [usize]>,
}

/// One slice of the packed group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedChunk {
    /// Chunk number.
    pub chunk: u32,
    /// Indexes into the desired endpoints, in slice order.
    pub endpoints: Vec<usize>,
    /// Index of the live slice it continues, if any.
    pub live: Option<usize>,
    /// Whether it must be written (created or updated).
    pub changed: bool,
}

/// The packing of one group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Packing {
    /// Slices to keep, create or update, by chunk number.
    pub chunks: Vec<PackedChunk>,
    /// Indexes of live slices to delete.
    pub deleted: Vec<usize>,
}

/// The identity of an endpoint across renders: its address and its pod's UID (hostNetwork pods
/// may share an address). Ordered as `(IpAddr, &str)` is (IPv4 before IPv6, then by value, then
/// by UID), but compared as integers: `IpAddr`'s own `Ord` compares octet arrays through
/// `memcmp`, which was a fifth of a one-pod plan at 10,000 pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Identity<'a> {
    family: u8,
    bits: u128,
    uid: &'a str,
}

impl Identity<'_> {
    /// The address part, as one integer pair: identities are nearly always told apart by it.
    fn address_key(&self) -> (u8, u128) {
        (self.family, self.bits)
    }
}

impl<'a> Identity<'a> {
    /// The identity of `address` and `uid`.
    pub fn new(address: IpAddr, uid: &'a str) -> Self {
        let (family, bits) = address_key(address);
        Self { family, bits, uid }
    }

    /// Whether the address is IPv4: its text form is then canonical whenever it parses (Rust's
    /// parser accepts exactly one spelling of an IPv4 address).
    fn is_v4(&self) -> bool {
        self.family == 4
    }
}

/// The identity of a live endpoint. A live address that does not parse matches nothing.
fn identity(e: &CompactEndpoint) -> Option<Identity<'_>> {
    let address = e.addresses().next()?.parse().ok()?;
    Some(Identity::new(address, e.target_uid().unwrap_or_default()))
}

/// What packing needs of a desired endpoint: its identity, and whether a live endpoint is
/// already exactly it.
pub trait Wanted {
    /// Address and pod UID.
    fn identity(&self) -> Option<Identity<'_>>;
    /// The address part of [`identity`](Self::identity), as `(family, bits)`: where reading
    /// the UID costs more than the address, implementations give it without the UID.
    fn address_key(&self) -> Option<(u8, u128)> {
        self.identity().map(|i| i.address_key())
    }
    /// Whether `live`, whose identity is `id` and equals this endpoint's, needs no write for
    /// this endpoint.
    fn same_as_matched(&self, live: &CompactEndpoint, id: Identity<'_>) -> bool;
}

impl Wanted for Endpoint {
    fn identity(&self) -> Option<Identity<'_>> {
        let address = self.addresses.first()?.parse().ok()?;
        let uid = self.target_ref.as_ref().and_then(|r| r.uid.as_deref());
        Some(Identity::new(address, uid.unwrap_or_default()))
    }

    /// Renders `live` (rendered endpoints are the tests' desired ones, not the planner's).
    fn same_as_matched(&self, live: &CompactEndpoint, _: Identity<'_>) -> bool {
        endpoint_eq(self, &live.to_endpoint())
    }
}

impl Wanted for DesiredEndpoint<'_> {
    fn identity(&self) -> Option<Identity<'_>> {
        Some(Identity::new(self.facts.address, self.uid()))
    }

    fn address_key(&self) -> Option<(u8, u128)> {
        Some(DesiredEndpoint::address_key(self))
    }

    fn same_as_matched(&self, live: &CompactEndpoint, id: Identity<'_>) -> bool {
        // Equal identities: the UID is equal, and so is an IPv4 address's text (one spelling);
        // an IPv6 address may be spelled differently and is compared as text.
        DesiredEndpoint::same_as_identified(self, live, !id.is_v4())
    }
}

/// Finds a desired endpoint by identity. Desired endpoints arrive sorted by identity, so a
/// binary search needs no allocation; building a hash map of every endpoint on every pass cost
/// about a tenth of a 10,000-pod reconcile. Unsorted input (allowed, if unusual) gets the map.
enum WantedIndex<'a> {
    Sorted,
    Map(HashMap<Identity<'a>, usize>),
}

impl<'a> WantedIndex<'a> {
    fn new<W: Wanted>(desired: &'a [W]) -> Self {
        // Addresses first: the UIDs are read only where two addresses tie.
        let sorted = desired
            .windows(2)
            .all(|w| match (w[0].address_key(), w[1].address_key()) {
                (Some(a), Some(b)) if a == b => match (w[0].identity(), w[1].identity()) {
                    (Some(a), Some(b)) => a.uid < b.uid,
                    _ => false,
                },
                (Some(a), Some(b)) => a < b,
                _ => false,
            });
        if sorted {
            Self::Sorted
        } else {
            Self::Map(
                desired
                    .iter()
                    .enumerate()
                    .filter_map(|(i, e)| Some((e.identity()?, i)))
                    .collect(),
            )
        }
    }

    fn get<W: Wanted>(&self, desired: &[W], id: Identity<'_>) -> Option<usize> {
        match self {
            // By address as integers, then the few entries of that address by UID: comparing
            // whole identities in the search called `memcmp` on UIDs at every step.
            Self::Sorted => {
                let key = id.address_key();
                let first = desired.partition_point(|e| e.address_key().is_none_or(|x| x < key));
                desired[first..]
                    .iter()
                    .take_while(|e| e.address_key() == Some(key))
                    .position(|e| e.identity().is_some_and(|x| x.uid == id.uid))
                    .map(|i| first + i)
            }
            Self::Map(map) => map.get(&id).copied(),
        }
    }
}

/// Packs `desired` (sorted, identities unique) into at most `max` endpoints per chunk, given the
/// group's live slices. With `placeholder`, a group without endpoints keeps (or creates) one
/// empty slice. `reserved` chunk numbers are never created (their names are taken by objects
/// this group may not overwrite).
pub fn pack<W: Wanted>(
    desired: &[W],
    live: &[LiveChunk<'_>],
    max: usize,
    placeholder: bool,
    reserved: &dyn Fn(u32) -> bool,
) -> Packing {
    let max = max.max(1);
    let (mut chunks, placed) = keep(desired, live, max);
    let mut remaining: Vec<usize> = (0..desired.len()).filter(|&i| !placed[i]).collect();
    remaining.reverse(); // pop() yields them in sorted order
    fill_written(&mut chunks, &mut remaining, max);
    top_up_unchanged(&mut chunks, &mut remaining, max);
    new_slices(&mut chunks, &mut remaining, max, reserved);
    finish(chunks, placeholder && desired.is_empty(), reserved)
}

/// Step 1: keeps what is still wanted where it is. One chunk per live slice (in chunk
/// order), and which desired endpoints they took.
fn keep<W: Wanted>(
    desired: &[W],
    live: &[LiveChunk<'_>],
    max: usize,
) -> (Vec<PackedChunk>, Vec<bool>) {
    let wanted = WantedIndex::new(desired);
    let mut placed = vec![false; desired.len()];
    let mut order: Vec<usize> = (0..live.len()).collect();
    order.sort_by_key(|&i| live[i].chunk);
    let mut chunks: Vec<PackedChunk> = Vec::new();
    for &li in &order {
        let slice = &live[li];
        let mut chunk = PackedChunk {
            chunk: slice.chunk,
            endpoints: Vec::new(),
            live: Some(li),
            changed: slice.drift,
        };
        // Settled: every endpoint is wanted and unchanged, unless an earlier slice of this pass
        // took one of them (then it is looked at as any other).
        if let Some(settled) = slice.settled.filter(|s| {
            s.len() == slice.endpoints.len()
                && s.len() <= max
                && s.iter().all(|&i| i < desired.len() && !placed[i])
        }) {
            for &i in settled {
                placed[i] = true;
            }
            chunk.endpoints.extend_from_slice(settled);
            chunks.push(chunk);
            continue;
        }
        for e in slice.endpoints {
            let found = identity(e).and_then(|id| Some((wanted.get(desired, id)?, id)));
            match found {
                Some((i, id)) if !placed[i] && chunk.endpoints.len() < max => {
                    placed[i] = true;
                    chunk.endpoints.push(i);
                    if !desired[i].same_as_matched(e, id) {
                        chunk.changed = true;
                    }
                }
                // Gone, duplicated, or over a lowered limit.
                _ => chunk.changed = true,
            }
        }
        chunks.push(chunk);
    }
    (chunks, placed)
}

/// Step 2: fills slices that are written anyway, fullest first.
fn fill_written(chunks: &mut [PackedChunk], remaining: &mut Vec<usize>, max: usize) {
    let mut fill: Vec<usize> = (0..chunks.len())
        .filter(|&c| chunks[c].changed && !chunks[c].endpoints.is_empty())
        .collect();
    fill.sort_by_key(|&c| {
        (
            std::cmp::Reverse(chunks[c].endpoints.len()),
            chunks[c].chunk,
        )
    });
    for c in fill {
        while chunks[c].endpoints.len() < max {
            let Some(i) = remaining.pop() else { break };
            chunks[c].endpoints.push(i);
        }
    }
}

/// Step 3: fewer than a full slice left go into the unchanged slice that ends up closest to
/// full.
fn top_up_unchanged(chunks: &mut [PackedChunk], remaining: &mut Vec<usize>, max: usize) {
    if remaining.is_empty() || remaining.len() >= max {
        return;
    }
    let best = (0..chunks.len())
        .filter(|&c| {
            !chunks[c].changed
                && !chunks[c].endpoints.is_empty()
                && chunks[c].endpoints.len() + remaining.len() <= max
        })
        .max_by_key(|&c| {
            (
                chunks[c].endpoints.len(),
                std::cmp::Reverse(chunks[c].chunk),
            )
        });
    if let Some(c) = best {
        chunks[c].changed = true;
        while let Some(i) = remaining.pop() {
            chunks[c].endpoints.push(i);
        }
    }
}

/// Step 4, new slices: recycles emptied live slices, then the lowest free chunk numbers.
fn new_slices(
    chunks: &mut Vec<PackedChunk>,
    remaining: &mut Vec<usize>,
    max: usize,
    reserved: &dyn Fn(u32) -> bool,
) {
    let mut recyclable: Vec<usize> = (0..chunks.len())
        .filter(|&c| chunks[c].endpoints.is_empty())
        .collect();
    recyclable.reverse();
    let mut used: BTreeSet<u32> = chunks.iter().map(|c| c.chunk).collect();
    let mut next_free = 1u32;
    while !remaining.is_empty() {
        let c = match recyclable.pop() {
            Some(c) => c,
            None => {
                while used.contains(&next_free) || reserved(next_free) {
                    next_free += 1;
                }
                used.insert(next_free);
                chunks.push(PackedChunk {
                    chunk: next_free,
                    endpoints: Vec::new(),
                    live: None,
                    changed: true,
                });
                chunks.len() - 1
            }
        };
        chunks[c].changed = true;
        while chunks[c].endpoints.len() < max {
            let Some(i) = remaining.pop() else { break };
            chunks[c].endpoints.push(i);
        }
    }
}

/// Step 5: empty slices go, except one placeholder (`placeholder`: the group has no endpoint
/// and keeps one empty slice).
fn finish(
    mut chunks: Vec<PackedChunk>,
    placeholder: bool,
    reserved: &dyn Fn(u32) -> bool,
) -> Packing {
    let mut result = Packing::default();
    let mut kept_placeholder = false;
    chunks.sort_by_key(|c| c.chunk);
    for mut chunk in chunks {
        if chunk.endpoints.is_empty() {
            if placeholder && !kept_placeholder {
                kept_placeholder = true;
                result.chunks.push(chunk);
            } else if let Some(li) = chunk.live {
                result.deleted.push(li);
            }
            continue;
        }
        if chunk.changed {
            chunk.endpoints.sort_unstable();
        }
        result.chunks.push(chunk);
    }
    if placeholder && !kept_placeholder {
        let chunk = (1..).find(|&n| !reserved(n)).unwrap_or(1);
        result.chunks.push(PackedChunk {
            chunk,
            endpoints: Vec::new(),
            live: None,
            changed: true,
        });
    }
    result.deleted.sort_unstable();
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::api::discovery::v1::EndpointConditions;

    fn ep(n: u8, ready: bool) -> Endpoint {
        Endpoint {
            addresses: vec![format!("10.0.0.{n}")],
            conditions: Some(EndpointConditions {
                ready: Some(ready),
                serving: Some(true),
                terminating: Some(!ready),
            }),
            target_ref: Some(ObjectReference {
                uid: Some(format!("u{n}")),
                ..Default::default()
            }),
            ..Endpoint::default()
        }
    }

    fn eps(ns: &[u8]) -> Vec<Endpoint> {
        ns.iter().map(|&n| ep(n, true)).collect()
    }

    fn live(ns: &[u8]) -> Vec<CompactEndpoint> {
        eps(ns).into_iter().map(CompactEndpoint::from).collect()
    }

    fn none(_: u32) -> bool {
        false
    }

    fn addrs(p: &Packing, desired: &[Endpoint]) -> Vec<(u32, Vec<String>, bool)> {
        p.chunks
            .iter()
            .map(|c| {
                (
                    c.chunk,
                    c.endpoints
                        .iter()
                        .map(|&i| desired[i].addresses[0].clone())
                        .collect(),
                    c.changed,
                )
            })
            .collect()
    }

    #[test]
    fn fresh_group_is_chunked_in_order() {
        let d = eps(&[1, 2, 3, 4, 5]);
        let p = pack(&d, &[], 2, true, &none);
        assert_eq!(
            p.chunks
                .iter()
                .map(|c| (c.chunk, c.endpoints.clone()))
                .collect::<Vec<_>>(),
            vec![(1, vec![0, 1]), (2, vec![2, 3]), (3, vec![4]),]
        );
        assert!(p.chunks.iter().all(|c| c.changed));
    }

    #[test]
    fn endpoints_stay_where_they_are_and_unchanged_slices_are_not_written() {
        let d = eps(&[1, 2, 3, 4]);
        let s1 = live(&[3, 4]);
        let s2 = live(&[1, 2]);
        let live = [
            LiveChunk {
                chunk: 1,
                endpoints: &s1,
                drift: false,
                settled: None,
            },
            LiveChunk {
                chunk: 2,
                endpoints: &s2,
                drift: false,
                settled: None,
            },
        ];
        let p = pack(&d, &live, 2, true, &none);
        assert_eq!(
            addrs(&p, &d),
            vec![
                (1, vec!["10.0.0.3".into(), "10.0.0.4".into()], false),
                (2, vec!["10.0.0.1".into(), "10.0.0.2".into()], false),
            ]
        );
        assert!(p.deleted.is_empty());
    }

    #[test]
    fn removing_an_endpoint_changes_only_its_slice() {
        let d = eps(&[1, 2, 4]);
        let s1 = live(&[1, 2]);
        let s2 = live(&[3, 4]);
        let live = [
            LiveChunk {
                chunk: 1,
                endpoints: &s1,
                drift: false,
                settled: None,
            },
            LiveChunk {
                chunk: 2,
                endpoints: &s2,
                drift: false,
                settled: None,
            },
        ];
        let p = pack(&d, &live, 2, true, &none);
        assert_eq!(
            p.chunks
                .iter()
                .filter(|c| c.changed)
                .map(|c| c.chunk)
                .collect::<Vec<_>>(),
            vec![2]
        );
    }

    #[test]
    fn condition_change_is_an_in_place_update() {
        let d = vec![ep(1, false), ep(2, true)];
        let s1 = live(&[1, 2]);
        let live = [LiveChunk {
            chunk: 1,
            endpoints: &s1,
            drift: false,
            settled: None,
        }];
        let p = pack(&d, &live, 2, true, &none);
        assert_eq!(p.chunks.len(), 1);
        assert!(p.chunks[0].changed);
    }

    #[test]
    fn new_endpoint_fills_a_slice_already_being_written() {
        let d = eps(&[1, 2, 3, 5, 9]);
        let s1 = live(&[1, 2, 3]); // unchanged, has room
        let s2 = live(&[4, 5]); // loses 4: written anyway
        let live = [
            LiveChunk {
                chunk: 1,
                endpoints: &s1,
                drift: false,
                settled: None,
            },
            LiveChunk {
                chunk: 2,
                endpoints: &s2,
                drift: false,
                settled: None,
            },
        ];
        let p = pack(&d, &live, 4, true, &none);
        assert_eq!(
            addrs(&p, &d),
            vec![
                (
                    1,
                    vec!["10.0.0.1".into(), "10.0.0.2".into(), "10.0.0.3".into()],
                    false
                ),
                (2, vec!["10.0.0.5".into(), "10.0.0.9".into()], true),
            ]
        );
    }

    #[test]
    fn few_new_endpoints_go_to_the_unchanged_slice_closest_to_full() {
        let d = eps(&[1, 2, 3, 4, 5, 9]);
        let s1 = live(&[1, 2, 3]);
        let s2 = live(&[4, 5]);
        let live = [
            LiveChunk {
                chunk: 1,
                endpoints: &s2,
                drift: false,
                settled: None,
            },
            LiveChunk {
                chunk: 2,
                endpoints: &s1,
                drift: false,
                settled: None,
            },
        ];
        let p = pack(&d, &live, 4, true, &none);
        let changed: Vec<u32> = p
            .chunks
            .iter()
            .filter(|c| c.changed)
            .map(|c| c.chunk)
            .collect();
        assert_eq!(changed, vec![2], "the 3-endpoint slice ends up full");
        assert_eq!(p.chunks.len(), 2);
    }

    #[test]
    fn emptied_slice_name_is_recycled_before_creating() {
        let d = eps(&[1, 2, 7, 8]);
        let s1 = live(&[1, 2]);
        let s2 = live(&[3, 4]); // all gone
        let live = [
            LiveChunk {
                chunk: 1,
                endpoints: &s1,
                drift: false,
                settled: None,
            },
            LiveChunk {
                chunk: 2,
                endpoints: &s2,
                drift: false,
                settled: None,
            },
        ];
        let p = pack(&d, &live, 2, true, &none);
        assert_eq!(
            addrs(&p, &d),
            vec![
                (1, vec!["10.0.0.1".into(), "10.0.0.2".into()], false),
                (2, vec!["10.0.0.7".into(), "10.0.0.8".into()], true),
            ]
        );
        assert!(p.deleted.is_empty());
    }

    #[test]
    fn empty_slices_are_deleted_but_one_placeholder_stays() {
        let s1 = live(&[1]);
        let s2 = live(&[2]);
        let live = [
            LiveChunk {
                chunk: 1,
                endpoints: &s1,
                drift: false,
                settled: None,
            },
            LiveChunk {
                chunk: 3,
                endpoints: &s2,
                drift: false,
                settled: None,
            },
        ];
        let p = pack::<Endpoint>(&[], &live, 2, true, &none);
        assert_eq!(p.chunks.len(), 1);
        assert_eq!((p.chunks[0].chunk, p.chunks[0].changed), (1, true));
        assert_eq!(p.deleted, vec![1]);
        let p = pack::<Endpoint>(&[], &live, 2, false, &none);
        assert!(p.chunks.is_empty());
        assert_eq!(p.deleted, vec![0, 1]);
    }

    #[test]
    fn placeholder_created_when_nothing_is_live() {
        let p = pack::<Endpoint>(&[], &[], 2, true, &none);
        assert_eq!(
            p.chunks,
            vec![PackedChunk {
                chunk: 1,
                endpoints: vec![],
                live: None,
                changed: true
            }]
        );
    }

    #[test]
    fn lowered_limit_moves_overflow_to_new_slices() {
        let d = eps(&[1, 2, 3]);
        let s1 = live(&[1, 2, 3]);
        let live = [LiveChunk {
            chunk: 1,
            endpoints: &s1,
            drift: false,
            settled: None,
        }];
        let p = pack(&d, &live, 2, true, &none);
        assert_eq!(
            p.chunks
                .iter()
                .map(|c| c.endpoints.len())
                .collect::<Vec<_>>(),
            vec![2, 1]
        );
    }

    #[test]
    fn duplicate_endpoint_across_slices_is_kept_once() {
        let d = eps(&[1]);
        let s1 = live(&[1]);
        let s2 = live(&[1]);
        let live = [
            LiveChunk {
                chunk: 1,
                endpoints: &s1,
                drift: false,
                settled: None,
            },
            LiveChunk {
                chunk: 2,
                endpoints: &s2,
                drift: false,
                settled: None,
            },
        ];
        let p = pack(&d, &live, 2, true, &none);
        assert_eq!(p.chunks.len(), 1);
        assert_eq!(p.deleted, vec![1]);
    }

    #[test]
    fn reserved_chunk_numbers_are_skipped() {
        let d = eps(&[1, 2]);
        let p = pack(&d, &[], 1, true, &|n| n == 1);
        assert_eq!(
            p.chunks.iter().map(|c| c.chunk).collect::<Vec<_>>(),
            vec![2, 3]
        );
    }

    #[test]
    fn metadata_drift_marks_the_slice_written_and_fillable() {
        let d = eps(&[1, 2]);
        let s1 = live(&[1]);
        let live = [LiveChunk {
            chunk: 1,
            endpoints: &s1,
            drift: true,
            settled: None,
        }];
        let p = pack(&d, &live, 2, true, &none);
        assert_eq!(p.chunks.len(), 1);
        assert!(p.chunks[0].changed);
        assert_eq!(p.chunks[0].endpoints, vec![0, 1]);
    }
}
