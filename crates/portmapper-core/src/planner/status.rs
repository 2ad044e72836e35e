//! Per-port status: ready / notReady / candidates / excluded (with the reason naming the check).

use std::sync::Arc;

use portmapper_api::status::MAX_EXCLUDED_LISTED;
use portmapper_api::{ExcludedPod, PortStatus};

use super::PortView;

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

/// One status entry per Service port (none for the portless pseudo-port of a headless Service).
pub(crate) fn port_statuses(
    ports: &[PortView<'_>],
    states: &[Vec<Option<PodPortState>>],
    pod_names: &[&str],
) -> Vec<PortStatus> {
    let mut out = Vec::new();
    for (port, states) in ports.iter().zip(states) {
        let Some(number) = port.number else { continue };
        let (mut ready, mut not_ready) = (0usize, 0usize);
        // (pod, reason) by reference: only the few listed become owned strings (at 10,000 pods
        // cloning every excluded pod's name and reason was a fifth of a one-pod plan).
        let mut excluded: Vec<(usize, &str)> = Vec::new();
        let mut kept: Vec<(usize, &str)> = Vec::new();
        for (pod, state) in states.iter().enumerate() {
            match state {
                Some(PodPortState::Published { ready: r, kept: k }) => {
                    if *r {
                        ready += 1;
                    } else {
                        not_ready += 1;
                    }
                    if let Some(reason) = k {
                        kept.push((pod, reason));
                    }
                }
                Some(PodPortState::Excluded { reason, .. }) => excluded.push((pod, reason)),
                None => {}
            }
        }
        let total = excluded.len();
        let kept_total = kept.len();
        let excluded = first_by_name(excluded, pod_names);
        let kept = first_by_name(kept, pod_names);
        out.push(PortStatus {
            name: port.name.to_owned(),
            port: number,
            ready: count(ready),
            not_ready: count(not_ready),
            candidates: count(ready + not_ready + total),
            excluded,
            excluded_total: count(total),
            kept,
            kept_total: count(kept_total),
        });
    }
    out
}

/// The first [`MAX_EXCLUDED_LISTED`] of `pods` by pod name (ties in pool order), named.
fn first_by_name(mut pods: Vec<(usize, &str)>, pod_names: &[&str]) -> Vec<ExcludedPod> {
    let name = |pod: usize| pod_names.get(pod).copied().unwrap_or_default();
    let order = |a: &(usize, &str), b: &(usize, &str)| name(a.0).cmp(name(b.0)).then(a.0.cmp(&b.0));
    if pods.len() > MAX_EXCLUDED_LISTED {
        pods.select_nth_unstable_by(MAX_EXCLUDED_LISTED, order);
        pods.truncate(MAX_EXCLUDED_LISTED);
    }
    pods.sort_unstable_by(order);
    pods.into_iter()
        .map(|(pod, reason)| ExcludedPod {
            pod: name(pod).to_owned(),
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
