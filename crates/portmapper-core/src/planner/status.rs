//! Per-port status: ready / notReady / candidates / excluded (with the reason naming the check).

use std::sync::Arc;

use portmapper_api::status::MAX_EXCLUDED_LISTED;
use portmapper_api::{ExcludedPod, PortStatus};

use super::ports::PortView;
use super::types::Plan;
use crate::pod_record::PodRecord;

/// What happened to one pod on one port, merged across families.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum PodPortState {
    /// Published in at least one family (ready in at least one when `ready`); `kept` is the
    /// abstention's reason when at least one family keeps it only because a check abstained.
    Published { ready: bool, kept: Option<Arc<str>> },
    /// A candidate left out everywhere; the first reason seen. `meant_to_serve`: in some
    /// family its backing checks include it (or its address cannot be published), so the
    /// publication gate waits for the port.
    Excluded {
        /// Shared with the verdict (remembered across passes), not copied per pass.
        reason: Arc<str>,
        meant_to_serve: bool,
    },
}

impl PodPortState {
    pub(crate) fn merge(self, other: Self) -> Self {
        match (self, other) {
            (
                Self::Published {
                    ready: a,
                    kept: kept_a,
                },
                Self::Published {
                    ready: b,
                    kept: kept_b,
                },
            ) => Self::Published {
                ready: a || b,
                kept: kept_a.or(kept_b),
            },
            (p @ Self::Published { .. }, Self::Excluded { .. })
            | (Self::Excluded { .. }, p @ Self::Published { .. }) => p,
            (
                Self::Excluded {
                    reason,
                    meant_to_serve: a,
                },
                Self::Excluded {
                    meant_to_serve: b, ..
                },
            ) => Self::Excluded {
                reason,
                meant_to_serve: a || b,
            },
        }
    }
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The excluded pods a port's status listed in the last pass, for a port kept whole across
/// passes (see `KeptPort`): the next status finds its listed pods among them and the pods that
/// changed, without reading every excluded pod's name.
#[derive(Debug, Clone, Default)]
pub(crate) struct Listed {
    /// Pool positions of the listed pods, in listing order (by name, then position).
    pub positions: Vec<u32>,
}

/// What the status of one port may start from: the last pass's listing and the positions of
/// the pods that changed since.
pub(crate) struct ListingHint<'h> {
    pub last: &'h Listed,
    pub changed: &'h [usize],
}

/// The per-port status and its summary into `out`, from each (port, pod)'s `states`;
/// `listed_before`: per port, what its status listed last pass (ports kept from the memo), the
/// pods `changed` since then. Returns what each port's status lists now, for the memo.
pub(crate) fn plan_status(
    ports: &[PortView<'_>],
    pods: &[&PodRecord],
    states: &[Vec<Option<PodPortState>>],
    (listed_before, changed): (&[Option<Listed>], &[usize]),
    out: &mut Plan,
) -> Vec<Listed> {
    let hints: Vec<Option<ListingHint<'_>>> = listed_before
        .iter()
        .map(|l| l.as_ref().map(|last| ListingHint { last, changed }))
        .collect();
    let (statuses, listings) = port_statuses(ports, states, pods, &hints);
    out.ports = statuses;
    out.summary = summary(&out.ports);
    listings
}

/// One status entry per Service port (none for the portless pseudo-port of a headless Service
/// without ports), and per port the excluded pods it listed (for [`ListingHint`]).
pub(crate) fn port_statuses(
    ports: &[PortView<'_>],
    states: &[Vec<Option<PodPortState>>],
    pods: &[&PodRecord],
    hints: &[Option<ListingHint<'_>>],
) -> (Vec<PortStatus>, Vec<Listed>) {
    let mut out = Vec::new();
    let mut listings = Vec::with_capacity(ports.len());
    for (i, (port, states)) in ports.iter().zip(states).enumerate() {
        let hint = hints.get(i).and_then(Option::as_ref);
        let (ready, not_ready, total) = counts(states);
        let candidates = listing_candidates(states, hint, total);
        // (pod, reason) by reference: only the few listed become owned strings (at 10,000 pods
        // cloning every excluded pod's name and reason was a fifth of a one-pod plan).
        let mut excluded: Vec<(usize, &str)> = Vec::new();
        let mut kept: Vec<(usize, &str)> = Vec::new();
        let mut visit = |pod: usize| match &states[pod] {
            Some(PodPortState::Published {
                kept: Some(reason), ..
            }) => kept.push((pod, reason)),
            Some(PodPortState::Excluded { reason, .. }) => excluded.push((pod, reason)),
            _ => {}
        };
        match &candidates {
            Some(c) => c.iter().for_each(|&p| visit(p)),
            None => (0..states.len()).for_each(visit),
        }
        let kept_total = kept.len();
        let excluded = first_by_name(excluded, pods);
        listings.push(Listed {
            positions: excluded
                .iter()
                .map(|(p, _)| u32::try_from(*p).unwrap_or(u32::MAX))
                .collect(),
        });
        let kept = first_by_name(kept, pods);
        let Some(number) = port.number else { continue };
        out.push(PortStatus {
            name: port.name.to_owned(),
            port: number,
            ready: count(ready),
            not_ready: count(not_ready),
            candidates: count(ready + not_ready + total),
            excluded: named(excluded, pods),
            excluded_total: count(total),
            kept: named(kept, pods),
            kept_total: count(kept_total),
        });
    }
    (out, listings)
}

/// Ready, not ready and excluded pods of one port.
fn counts(states: &[Option<PodPortState>]) -> (usize, usize, usize) {
    let (mut ready, mut not_ready, mut excluded) = (0, 0, 0);
    for state in states {
        match state {
            Some(PodPortState::Published { ready: true, .. }) => ready += 1,
            Some(PodPortState::Published { ready: false, .. }) => not_ready += 1,
            Some(PodPortState::Excluded { .. }) => excluded += 1,
            None => {}
        }
    }
    (ready, not_ready, excluded)
}

/// The pods among which a port's listed ones are, when the last listing tells: the last listed
/// pods and the changed ones (sorted, distinct). An unchanged excluded pod that was not listed
/// came after every listed one, so it stays out while every listed pod is still excluded or
/// fewer than the limit were listed. `None`: every pod must be looked at. (A port kept whole
/// keeps no pod for an abstention, so only the excluded ones are listed from it.)
fn listing_candidates(
    states: &[Option<PodPortState>],
    hint: Option<&ListingHint<'_>>,
    excluded_total: usize,
) -> Option<Vec<usize>> {
    let hint = hint?;
    let excluded = |p: usize| matches!(states.get(p), Some(Some(PodPortState::Excluded { .. })));
    let last: Vec<usize> = hint.last.positions.iter().map(|&p| p as usize).collect();
    let full = last.len() >= MAX_EXCLUDED_LISTED;
    if full && !last.iter().all(|&p| excluded(p)) {
        return None;
    }
    let mut candidates: Vec<usize> = last
        .into_iter()
        .chain(hint.changed.iter().copied())
        .collect();
    candidates.sort_unstable();
    candidates.dedup();
    candidates.retain(|&p| p < states.len());
    // Fewer listed than the limit means every excluded pod was listed; the count says whether
    // the candidates still account for all of them when they should.
    let found = candidates.iter().filter(|&&p| excluded(p)).count();
    (full || found == excluded_total).then_some(candidates)
}

/// The first [`MAX_EXCLUDED_LISTED`] of `entries` by pod name (ties in pool order).
fn first_by_name<'r>(
    mut entries: Vec<(usize, &'r str)>,
    pods: &[&PodRecord],
) -> Vec<(usize, &'r str)> {
    let name = |pod: usize| pods.get(pod).map(|p| p.name.as_str()).unwrap_or_default();
    let order = |a: &(usize, &str), b: &(usize, &str)| name(a.0).cmp(name(b.0)).then(a.0.cmp(&b.0));
    if entries.len() > MAX_EXCLUDED_LISTED {
        entries.select_nth_unstable_by(MAX_EXCLUDED_LISTED, order);
        entries.truncate(MAX_EXCLUDED_LISTED);
    }
    entries.sort_unstable_by(order);
    entries
}

/// The listed pods, named.
fn named(entries: Vec<(usize, &str)>, pods: &[&PodRecord]) -> Vec<ExcludedPod> {
    entries
        .into_iter()
        .map(|(pod, reason)| ExcludedPod {
            pod: pods.get(pod).map(|p| p.name.clone()).unwrap_or_default(),
            reason: reason.to_owned(),
        })
        .collect()
}

/// `http 3/4, https 2/4`: ready/candidates per port (the number stands in for an unnamed port).
pub(crate) fn summary(ports: &[PortStatus]) -> String {
    ports
        .iter()
        .map(|p| {
            let label = if p.name.is_empty() {
                p.port.to_string()
            } else {
                p.name.clone()
            };
            format!("{label} {}/{}", p.ready, p.candidates)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn published(ready: bool, kept: Option<&str>) -> PodPortState {
        PodPortState::Published {
            ready,
            kept: kept.map(Into::into),
        }
    }

    fn excluded(reason: &str, meant_to_serve: bool) -> PodPortState {
        PodPortState::Excluded {
            reason: reason.into(),
            meant_to_serve,
        }
    }

    #[test]
    fn published_in_any_family_beats_excluded() {
        let m = excluded("no v6", true).merge(published(false, None));
        assert_eq!(m, published(false, None));
        let m = published(false, None).merge(published(true, None));
        assert_eq!(m, published(true, None));
        let m = excluded("a", false).merge(excluded("b", false));
        assert_eq!(m, excluded("a", false));
    }

    #[test]
    fn meant_to_serve_in_any_family_is_meant_to_serve() {
        assert_eq!(
            excluded("a", false).merge(excluded("b", true)),
            excluded("a", true)
        );
        assert_eq!(
            excluded("a", true).merge(excluded("b", false)),
            excluded("a", true)
        );
    }

    #[test]
    fn a_family_kept_by_an_abstention_marks_the_pod_kept() {
        let m = published(true, None).merge(published(true, Some("httpGet: no result yet")));
        assert_eq!(m, published(true, Some("httpGet: no result yet")));
    }

    #[test]
    fn summary_uses_port_number_for_unnamed_ports() {
        let p = |name: &str, port, ready, candidates| PortStatus {
            name: name.into(),
            port,
            ready,
            candidates,
            ..PortStatus::default()
        };
        assert_eq!(
            summary(&[p("http", 80, 3, 4), p("", 443, 2, 4)]),
            "http 3/4, 443 2/4"
        );
    }
}
