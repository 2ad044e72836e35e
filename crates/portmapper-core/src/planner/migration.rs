//! Selector migration and legacy Endpoints, as the Go original (redpanda's `portmapper`, see
//! docs/seed-parity.md) does them: decide (pure, here) which steps are due from evidence in the
//! API, so the logic is stateless and restart-safe; they are part of the plan
//! ([`Plan::migration`]), whose writes the operator's executor runs after the slices.
//!
//! - While the Service still has a selector, the native controllers own its Endpoints: we never
//!   write it, and hand back one we own (selector re-added).
//! - Once the selector is gone, the native leftovers (the Endpoints object, the native
//!   controller's slices, the mirroring controller's slices) are deleted, but only while we
//!   publish at least one endpoint (blackout guard) and `nativeCleanup` is on. The Endpoints
//!   object goes first; a failed step leaves the evidence for the next pass.
//! - With `legacyEndpoints`, an abandoned Endpoints object (no controller owner, not ours) is
//!   adopted in place instead of deleted, unless that would replace ready addresses with none.

use k8s_openapi::api::core::v1::Endpoints;
use kube_validation::IpFamily;

use super::live::Live;
pub use super::live::LiveEndpoints;
use super::types::{Deletion, Plan, PlanInput, PlannedEndpoints, PlannedSlice};
pub use super::types::{NativeSlice, Step};
use crate::EventReason;
use crate::ownership::EndpointsOwner;

/// `endpointslice.kubernetes.io/managed-by` of the native EndpointSlice controller.
pub const NATIVE_MANAGER: &str = "endpointslice-controller.k8s.io";
/// `endpointslice.kubernetes.io/managed-by` of the EndpointSlice mirroring controller.
pub const MIRROR_MANAGER: &str = "endpointslicemirroring-controller.k8s.io";

/// Evidence and settings for one pass.
pub struct Input<'a> {
    pub selector_present: bool,
    pub legacy_endpoints: bool,
    pub native_cleanup: bool,
    /// We publish at least one ready endpoint (any family).
    pub publishing: bool,
    /// We publish at least one ready endpoint in the primary family (what Endpoints can carry).
    pub publishing_primary: bool,
    /// The Endpoints object named after the Service, as read from the API, and whose it is.
    pub live_endpoints: Option<LiveEndpoints<'a>>,
    /// The planner's Endpoints (when `legacyEndpoints` is on and the object is not foreign).
    pub planned_endpoints: Option<&'a PlannedEndpoints>,
    /// The planner's deletion of our Endpoints object (`legacyEndpoints` off, or an
    /// ExternalName Service).
    pub endpoints_deletion: Option<&'a Deletion>,
    /// Native and mirror slices labelled with this Service's name.
    pub native_slices: &'a [NativeSlice],
}

fn has_ready_addresses(endpoints: &Endpoints) -> bool {
    endpoints
        .subsets
        .iter()
        .flatten()
        .any(|s| s.addresses.as_ref().is_some_and(|a| !a.is_empty()))
}

/// The steps due now.
pub fn steps(input: &Input<'_>) -> Vec<Step> {
    let mut out = Vec::new();
    let live = input.live_endpoints.map(|e| e.object);
    let live_owner = input.live_endpoints.map(|e| e.owner);
    if input.selector_present {
        relinquish(live, live_owner, &mut out);
        return out;
    }
    let mut endpoints_cleared = false;
    if let Some(d) = input.endpoints_deletion
        && let Some(uid) = &d.uid
    {
        // legacyEndpoints off, or nothing to publish at all (ExternalName): ours goes.
        out.push(Step::DeleteEndpoints {
            name: d.name.clone(),
            uid: uid.clone(),
            native: false,
        });
    } else if input.legacy_endpoints {
        endpoints_cleared = legacy_endpoints(input, live, live_owner, &mut out);
    }
    // Native leftovers: evidence = native or mirror slices for this Service.
    if !input.native_cleanup || input.native_slices.is_empty() {
        return out;
    }
    if !input.publishing {
        out.push(Step::Warn {
            reason: EventReason::NativeCleanupDeferred,
            note: "native EndpointSlices remain but this PortMapping publishes no endpoint yet; cleanup waits".into(),
        });
        return out;
    }
    native_leftovers(input, live, live_owner, endpoints_cleared, &mut out);
    out
}

/// The Service has a selector (again): the native endpoints controller writes its Endpoints
/// object, so ours is handed back.
fn relinquish(live: Option<&Endpoints>, owner: Option<EndpointsOwner>, out: &mut Vec<Step>) {
    if let (Some(e), Some(EndpointsOwner::Ours)) = (live, owner)
        && let Some(uid) = e.metadata.uid.clone()
    {
        out.push(Step::DeleteEndpoints {
            name: e.metadata.name.clone().unwrap_or_default(),
            uid,
            native: false,
        });
        out.push(Step::Normal {
            reason: EventReason::LegacyEndpointsRelinquished,
            note: "the Service has a selector again; its Endpoints object is handed back to the native controller".into(),
        });
    }
}

/// `legacyEndpoints`: apply ours, adopt an abandoned object, or leave another controller's
/// alone. True when an abandoned object was adopted (it is no longer the native one).
fn legacy_endpoints(
    input: &Input<'_>,
    live: Option<&Endpoints>,
    owner: Option<EndpointsOwner>,
    out: &mut Vec<Step>,
) -> bool {
    match (owner, input.planned_endpoints) {
        (Some(EndpointsOwner::Foreign), _) => out.push(Step::Warn {
            reason: EventReason::EndpointsCollision,
            note: "the Service's Endpoints object belongs to another controller; it is left alone"
                .into(),
        }),
        (Some(EndpointsOwner::Abandoned), Some(planned)) => {
            let Some(e) = live else { return false };
            return adopt(input, e, planned, out);
        }
        (_, Some(planned)) if planned.action.is_write() => {
            out.push(Step::ApplyEndpoints(planned.endpoints.clone()))
        }
        _ => {}
    }
    false
}

/// Adopts the abandoned Endpoints object `e` when cleanup is on and it would not replace
/// ready addresses with none; true when adopted.
fn adopt(
    input: &Input<'_>,
    e: &Endpoints,
    planned: &PlannedEndpoints,
    out: &mut Vec<Step>,
) -> bool {
    if !input.native_cleanup {
        out.push(Step::Warn {
            reason: EventReason::LegacyEndpointsNotAdopted,
            note:
                "an abandoned Endpoints object exists and nativeCleanup is off; it is not adopted"
                    .into(),
        });
        return false;
    }
    if !input.publishing_primary && has_ready_addresses(e) {
        out.push(Step::Warn {
            reason: EventReason::LegacyEndpointsAdoptionDeferred,
            note: "not adopting the abandoned Endpoints object while it has ready addresses and we publish none".into(),
        });
        return false;
    }
    let strip = [
        "endpoints.kubernetes.io/last-change-trigger-time",
        "endpoints.kubernetes.io/over-capacity",
    ]
    .into_iter()
    .filter(|k| {
        e.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(*k))
    })
    .map(String::from)
    .collect();
    out.push(Step::AdoptEndpoints {
        endpoints: planned.endpoints.clone(),
        strip_annotations: strip,
        resource_version: e.metadata.resource_version.clone(),
    });
    out.push(Step::Normal {
        reason: EventReason::LegacyEndpointsAdopted,
        note: "took over the native controller's abandoned Endpoints object".into(),
    });
    true
}

/// Deletes the native leftovers once we publish: the abandoned Endpoints object (unless
/// adopted), then the native slices (mirror slices only where garbage collection will not).
fn native_leftovers(
    input: &Input<'_>,
    live: Option<&Endpoints>,
    owner: Option<EndpointsOwner>,
    mut endpoints_cleared: bool,
    out: &mut Vec<Step>,
) {
    if !endpoints_cleared
        && !input.legacy_endpoints
        && let (Some(e), Some(EndpointsOwner::Abandoned)) = (live, owner)
        && let Some(uid) = e.metadata.uid.clone()
    {
        out.push(Step::DeleteEndpoints {
            name: e.metadata.name.clone().unwrap_or_default(),
            uid,
            native: true,
        });
        endpoints_cleared = true;
    }
    let endpoints_gone = endpoints_cleared || live.is_none() || owner == Some(EndpointsOwner::Ours);
    for s in input.native_slices {
        // Mirror slices are owned by the Endpoints object: when we deleted it, GC takes them;
        // after an adoption GC would not fire, so they are deleted here.
        let mirror = s.manager == MIRROR_MANAGER;
        if mirror && !endpoints_gone {
            continue;
        }
        if mirror && !input.legacy_endpoints && endpoints_cleared {
            continue;
        }
        out.push(Step::DeleteNativeSlice {
            name: s.name.clone(),
            uid: s.uid.clone(),
        });
    }
    if out.iter().any(|s| {
        matches!(
            s,
            Step::DeleteNativeSlice { .. } | Step::DeleteEndpoints { native: true, .. }
        )
    }) {
        out.push(Step::Normal {
            reason: EventReason::NativeEndpointsCleanedUp,
            note: "deleted the native controllers' leftovers after the selector was removed".into(),
        });
    }
}

/// The steps of one plan: [`steps`] from the plan's slices and Endpoints and the evidence,
/// then the Endpoints objects named after another Service ([`stray_endpoints`]). `primary`:
/// the Service's primary IP family, the one Endpoints can carry.
pub(crate) fn plan_steps(
    input: &PlanInput<'_>,
    live: &Live<'_>,
    primary: IpFamily,
    plan: &Plan,
) -> Vec<Step> {
    let service = input.service;
    let (publishing, publishing_primary) = publishing(&plan.slices, primary);
    let selector_present = has_selector(service);
    let mut out = steps(&Input {
        selector_present,
        legacy_endpoints: input.port_mapping.spec.legacy_endpoints,
        native_cleanup: input.port_mapping.spec.native_cleanup,
        publishing,
        publishing_primary,
        live_endpoints: live.endpoints,
        planned_endpoints: plan.endpoints.as_ref(),
        endpoints_deletion: plan.endpoints_deletion.as_ref(),
        native_slices: input.native_slices,
    });
    out.extend(stray_endpoints(
        live.ours_endpoints.iter().copied(),
        service.metadata.name.as_deref(),
    ));
    out
}

/// Whether the Service still has a (non-empty) selector: the native controllers publish it too
/// and own its Endpoints object, and the selector migration waits.
pub fn has_selector(service: &k8s_openapi::api::core::v1::Service) -> bool {
    service
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .is_some_and(|s| !s.is_empty())
}

/// Whether the slices publish a ready endpoint, in any family and in `primary`.
fn publishing(slices: &[PlannedSlice], primary: IpFamily) -> (bool, bool) {
    let ready = |s: &PlannedSlice| {
        s.slice
            .endpoints
            .iter()
            .any(|e| e.conditions().and_then(|c| c.ready).unwrap_or(true))
    };
    let any = slices.iter().any(ready);
    let in_primary = slices
        .iter()
        .any(|s| s.slice.address_type == primary.as_str() && ready(s));
    (any, in_primary)
}

/// Deletions of the Endpoints objects of `ours` (those this PortMapping controls) it no longer
/// publishes: every one when its Service is gone (`service` None), else those named after
/// another Service (its `serviceRef` moved).
pub fn stray_endpoints<'a>(
    ours: impl IntoIterator<Item = &'a Endpoints>,
    service: Option<&str>,
) -> Vec<Step> {
    let mut stray: Vec<(String, String)> = ours
        .into_iter()
        .filter(|e| service.is_none_or(|svc| e.metadata.name.as_deref() != Some(svc)))
        .filter_map(|e| {
            Some((
                e.metadata.name.clone().unwrap_or_default(),
                e.metadata.uid.clone()?,
            ))
        })
        .collect();
    stray.sort();
    stray
        .into_iter()
        .map(|(name, uid)| Step::DeleteEndpoints {
            name,
            uid,
            native: false,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::planner::WriteAction;
    use k8s_openapi::api::core::v1::{EndpointAddress, EndpointSubset};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    use portmapper_api::MANAGER;

    use super::*;
    use crate::ownership::endpoints_owner;

    fn slice(family: &str, ready: &[bool]) -> PlannedSlice {
        use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointSlice};
        PlannedSlice {
            slice: std::sync::Arc::new(crate::compact_slice::CompactSlice::from(EndpointSlice {
                address_type: family.into(),
                endpoints: ready
                    .iter()
                    .map(|r| Endpoint {
                        conditions: Some(EndpointConditions {
                            ready: Some(*r),
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })),
            action: WriteAction::Unchanged,
            withdraws: false,
        }
    }

    #[test]
    fn publishing_counts_ready_endpoints_per_primary_family() {
        let v4_only = [slice("IPv4", &[true]), slice("IPv6", &[])];
        assert_eq!(publishing(&v4_only, IpFamily::V4), (true, true));
        // An IPv6-primary Service whose pods only have IPv4 addresses: the Endpoints object
        // (primary family only) would be empty, so adoption must wait.
        assert_eq!(publishing(&v4_only, IpFamily::V6), (true, false));
    }

    #[test]
    fn draining_endpoints_are_not_publishing() {
        let draining = [slice("IPv4", &[false, false])];
        assert_eq!(publishing(&draining, IpFamily::V4), (false, false));
        assert_eq!(publishing(&[], IpFamily::V4), (false, false));
    }

    fn endpoints(labels: &[(&str, &str)], owner: Option<&str>, ready: bool) -> Endpoints {
        Endpoints {
            metadata: ObjectMeta {
                name: Some("web".into()),
                uid: Some("ep-uid".into()),
                resource_version: Some("7".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                annotations: Some(
                    [(
                        "endpoints.kubernetes.io/last-change-trigger-time".to_string(),
                        "x".to_string(),
                    )]
                    .into(),
                ),
                owner_references: owner.map(|kind| {
                    vec![OwnerReference {
                        kind: kind.into(),
                        name: "web".into(),
                        uid: "o".into(),
                        controller: Some(true),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            subsets: ready.then(|| {
                vec![EndpointSubset {
                    addresses: Some(vec![EndpointAddress {
                        ip: "10.0.0.1".into(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }]
            }),
        }
    }

    fn planned() -> PlannedEndpoints {
        PlannedEndpoints {
            endpoints: Endpoints::default(),
            action: WriteAction::Create,
        }
    }

    fn native(manager: &str, name: &str) -> NativeSlice {
        NativeSlice {
            name: name.into(),
            uid: format!("{name}-uid"),
            manager: manager.into(),
        }
    }

    fn base<'a>(native_slices: &'a [NativeSlice]) -> Input<'a> {
        Input {
            selector_present: false,
            legacy_endpoints: false,
            native_cleanup: true,
            publishing: true,
            publishing_primary: true,
            live_endpoints: None,
            planned_endpoints: None,
            endpoints_deletion: None,
            native_slices,
        }
    }

    fn names(steps: &[Step]) -> Vec<String> {
        steps
            .iter()
            .map(|s| match s {
                Step::ApplyEndpoints(_) => "apply-endpoints".into(),
                Step::AdoptEndpoints { .. } => "adopt-endpoints".into(),
                Step::DeleteEndpoints { name, .. } => format!("delete-endpoints {name}"),
                Step::DeleteNativeSlice { name, .. } => format!("delete-slice {name}"),
                Step::Warn { reason, .. } => format!("warn {reason}"),
                Step::Normal { reason, .. } => format!("normal {reason}"),
            })
            .collect()
    }

    #[test]
    fn no_evidence_means_no_steps() {
        assert!(steps(&base(&[])).is_empty());
    }

    #[test]
    fn selector_present_blocks_every_cleanup() {
        let slices = [native(NATIVE_MANAGER, "web-abc")];
        let abandoned = endpoints(&[], None, true);
        let mut input = base(&slices);
        input.selector_present = true;
        input.live_endpoints = Some(LiveEndpoints::of(&abandoned, "o"));
        assert!(steps(&input).is_empty());
    }

    #[test]
    fn takeover_deletes_endpoints_first_then_native_slices_and_leaves_mirrors_to_gc() {
        let slices = [
            native(NATIVE_MANAGER, "web-abc"),
            native(MIRROR_MANAGER, "web-mirror"),
        ];
        let abandoned = endpoints(&[], None, true);
        let mut input = base(&slices);
        input.live_endpoints = Some(LiveEndpoints::of(&abandoned, "o"));
        assert_eq!(
            names(&steps(&input)),
            [
                "delete-endpoints web",
                "delete-slice web-abc",
                "normal NativeEndpointsCleanedUp"
            ]
        );
    }

    #[test]
    fn blackout_defers_cleanup() {
        let slices = [native(NATIVE_MANAGER, "web-abc")];
        let mut input = base(&slices);
        input.publishing = false;
        assert_eq!(names(&steps(&input)), ["warn NativeCleanupDeferred"]);
    }

    #[test]
    fn a_lone_endpoints_object_without_native_slices_is_left_alone() {
        let abandoned = endpoints(&[], None, true);
        let mut input = base(&[]);
        input.live_endpoints = Some(LiveEndpoints::of(&abandoned, "o"));
        assert!(steps(&input).is_empty());
    }

    #[test]
    fn cleanup_off_touches_nothing() {
        let slices = [native(NATIVE_MANAGER, "web-abc")];
        let abandoned = endpoints(&[], None, true);
        let mut input = base(&slices);
        input.native_cleanup = false;
        input.live_endpoints = Some(LiveEndpoints::of(&abandoned, "o"));
        assert!(steps(&input).is_empty());
    }

    #[test]
    fn legacy_adopts_abandoned_endpoints_and_deletes_mirror_slices() {
        let slices = [
            native(NATIVE_MANAGER, "web-abc"),
            native(MIRROR_MANAGER, "web-mirror"),
        ];
        let abandoned = endpoints(&[], None, true);
        let plan = planned();
        let mut input = base(&slices);
        input.legacy_endpoints = true;
        input.live_endpoints = Some(LiveEndpoints::of(&abandoned, "o"));
        input.planned_endpoints = Some(&plan);
        let steps = steps(&input);
        assert_eq!(
            names(&steps),
            [
                "adopt-endpoints",
                "normal LegacyEndpointsAdopted",
                "delete-slice web-abc",
                "delete-slice web-mirror",
                "normal NativeEndpointsCleanedUp"
            ]
        );
        match &steps[0] {
            Step::AdoptEndpoints {
                strip_annotations,
                resource_version,
                ..
            } => {
                assert_eq!(
                    strip_annotations,
                    &["endpoints.kubernetes.io/last-change-trigger-time"]
                );
                assert_eq!(resource_version.as_deref(), Some("7"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn adoption_waits_while_it_would_replace_ready_addresses_with_none() {
        let abandoned = endpoints(&[], None, true);
        let plan = planned();
        let mut input = base(&[]);
        input.legacy_endpoints = true;
        input.publishing_primary = false;
        input.live_endpoints = Some(LiveEndpoints::of(&abandoned, "o"));
        input.planned_endpoints = Some(&plan);
        assert_eq!(
            names(&steps(&input)),
            ["warn LegacyEndpointsAdoptionDeferred"]
        );
        // An empty abandoned object is adopted at once.
        let empty = endpoints(&[], None, false);
        input.live_endpoints = Some(LiveEndpoints::of(&empty, "o"));
        assert_eq!(
            names(&steps(&input)),
            ["adopt-endpoints", "normal LegacyEndpointsAdopted"]
        );
    }

    #[test]
    fn foreign_endpoints_are_never_written() {
        let foreign = endpoints(
            &[("endpointslice.kubernetes.io/managed-by", "someone")],
            None,
            true,
        );
        let plan = planned();
        let mut input = base(&[]);
        input.legacy_endpoints = true;
        input.live_endpoints = Some(LiveEndpoints::of(&foreign, "o"));
        input.planned_endpoints = Some(&plan);
        assert_eq!(names(&steps(&input)), ["warn EndpointsCollision"]);
    }

    #[test]
    fn our_endpoints_are_handed_back_when_the_selector_returns() {
        let ours = endpoints(
            &[("endpointslice.kubernetes.io/managed-by", MANAGER)],
            Some("PortMapping"),
            true,
        );
        let mut input = base(&[]);
        input.selector_present = true;
        input.live_endpoints = Some(LiveEndpoints::of(&ours, "o"));
        assert_eq!(
            names(&steps(&input)),
            ["delete-endpoints web", "normal LegacyEndpointsRelinquished"]
        );
    }

    #[test]
    fn turning_legacy_off_deletes_our_object() {
        let d = Deletion {
            name: "web".into(),
            uid: Some("ep-uid".into()),
        };
        let mut input = base(&[]);
        input.endpoints_deletion = Some(&d);
        assert_eq!(names(&steps(&input)), ["delete-endpoints web"]);
    }

    #[test]
    fn an_external_name_service_drops_our_endpoints_even_with_legacy_on() {
        let ours = endpoints(
            &[("endpointslice.kubernetes.io/managed-by", MANAGER)],
            None,
            true,
        );
        let deletion = Deletion {
            name: "web".into(),
            uid: Some("ep-uid".into()),
        };
        let mut input = base(&[]);
        input.legacy_endpoints = true;
        input.live_endpoints = Some(LiveEndpoints::of(&ours, "o"));
        input.planned_endpoints = None;
        input.endpoints_deletion = Some(&deletion);
        assert_eq!(names(&steps(&input)), ["delete-endpoints web"]);
    }

    #[test]
    fn stray_endpoints_are_ours_named_after_another_service_or_all_when_withdrawn() {
        let with = |name: &str, controller: Option<&str>| {
            let mut e = endpoints(
                &[("endpointslice.kubernetes.io/managed-by", MANAGER)],
                None,
                true,
            );
            e.metadata.name = Some(name.into());
            e.metadata.uid = Some(format!("{name}-uid"));
            e.metadata.owner_references = controller.map(|c| {
                vec![OwnerReference {
                    kind: "PortMapping".into(),
                    name: "pm".into(),
                    uid: c.into(),
                    controller: Some(true),
                    ..Default::default()
                }]
            });
            e
        };
        let all = [
            with("web", Some("pm-uid")),
            with("old", Some("pm-uid")),
            with("other", Some("someone-else")),
            with("orphan", None),
        ];
        // The planner passes the ones it controls (`live::classify`).
        let ours: Vec<&Endpoints> = all
            .iter()
            .filter(|e| crate::ownership(&e.metadata, "pm-uid").is_ours())
            .collect();
        assert_eq!(
            names(&stray_endpoints(ours.iter().copied(), Some("web"))),
            ["delete-endpoints old"]
        );
        assert_eq!(
            names(&stray_endpoints(ours.iter().copied(), None)),
            ["delete-endpoints old", "delete-endpoints web"]
        );
    }

    #[test]
    fn deferred_adoption_keeps_the_mirror_slices_but_not_the_native_ones() {
        let slices = [
            native(NATIVE_MANAGER, "web-abc"),
            native(MIRROR_MANAGER, "web-mirror"),
        ];
        let abandoned = endpoints(&[], None, true);
        let plan = planned();
        let mut input = base(&slices);
        input.legacy_endpoints = true;
        // Publishing only in the secondary family: nothing an Endpoints object could carry.
        input.publishing_primary = false;
        input.live_endpoints = Some(LiveEndpoints::of(&abandoned, "o"));
        input.planned_endpoints = Some(&plan);
        assert_eq!(
            names(&steps(&input)),
            [
                "warn LegacyEndpointsAdoptionDeferred",
                "delete-slice web-abc",
                "normal NativeEndpointsCleanedUp"
            ],
            "the mirroring controller keeps serving the abandoned object until we adopt it"
        );
    }

    #[test]
    fn native_cleanup_off_never_adopts() {
        let slices = [native(MIRROR_MANAGER, "web-mirror")];
        let abandoned = endpoints(&[], None, true);
        let plan = planned();
        let mut input = base(&slices);
        input.legacy_endpoints = true;
        input.native_cleanup = false;
        input.live_endpoints = Some(LiveEndpoints::of(&abandoned, "o"));
        input.planned_endpoints = Some(&plan);
        assert_eq!(names(&steps(&input)), ["warn LegacyEndpointsNotAdopted"]);
    }

    #[test]
    fn a_stripped_label_on_our_mirror_is_repaired_even_with_native_cleanup_off() {
        // No managed-by label any more, but still controlled by a PortMapping: ours.
        let stripped = endpoints(&[], Some("PortMapping"), true);
        assert_eq!(
            endpoints_owner(&stripped.metadata, "o"),
            EndpointsOwner::Ours
        );
        let plan = PlannedEndpoints {
            endpoints: Endpoints::default(),
            action: WriteAction::Update {
                resource_version: None,
            },
        };
        let mut input = base(&[]);
        input.legacy_endpoints = true;
        input.native_cleanup = false;
        input.live_endpoints = Some(LiveEndpoints::of(&stripped, "o"));
        input.planned_endpoints = Some(&plan);
        assert_eq!(names(&steps(&input)), ["apply-endpoints"]);
    }

    #[test]
    fn another_portmappings_mirror_is_foreign_whatever_the_flags() {
        // Our label, but controlled by an older PortMapping of the same name (not yet collected).
        let mut old = endpoints(
            &[("endpointslice.kubernetes.io/managed-by", MANAGER)],
            Some("PortMapping"),
            true,
        );
        old.metadata.owner_references.as_mut().unwrap()[0].uid = "older-uid".into();
        assert_eq!(endpoints_owner(&old.metadata, "o"), EndpointsOwner::Foreign);
        let slices = [native(NATIVE_MANAGER, "web-abc")];
        let mut input = base(&slices);
        input.live_endpoints = Some(LiveEndpoints::of(&old, "o"));
        input.legacy_endpoints = true;
        assert_eq!(
            names(&steps(&input)),
            [
                "warn EndpointsCollision",
                "delete-slice web-abc",
                "normal NativeEndpointsCleanedUp"
            ],
            "warned (the planner reports ForeignEndpoints too), native cleanup goes on"
        );
        input.legacy_endpoints = false;
        assert_eq!(
            names(&steps(&input)),
            ["delete-slice web-abc", "normal NativeEndpointsCleanedUp"],
            "never deleted as ours"
        );
        input.selector_present = true;
        assert!(steps(&input).is_empty(), "never relinquished as ours");
    }

    #[test]
    fn adoption_strips_both_inherited_annotations() {
        let mut abandoned = endpoints(&[], None, true);
        abandoned.metadata.annotations.as_mut().unwrap().insert(
            "endpoints.kubernetes.io/over-capacity".into(),
            "truncated".into(),
        );
        let plan = planned();
        let mut input = base(&[]);
        input.legacy_endpoints = true;
        input.live_endpoints = Some(LiveEndpoints::of(&abandoned, "o"));
        input.planned_endpoints = Some(&plan);
        let steps = steps(&input);
        let Step::AdoptEndpoints {
            strip_annotations, ..
        } = &steps[0]
        else {
            panic!("{steps:?}")
        };
        assert_eq!(
            strip_annotations,
            &[
                "endpoints.kubernetes.io/last-change-trigger-time",
                "endpoints.kubernetes.io/over-capacity"
            ]
        );
    }
}
