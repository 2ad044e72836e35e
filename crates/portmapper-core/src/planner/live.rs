//! What is published now, classified once per plan by the one classifier ([`ownership`]): the
//! live slices this PortMapping may write, the names others hold, and the Endpoints objects.
//! Every later phase reads the classification; none asks who owns an object again.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Endpoints;

use super::types::{NameCollision, Plan, PlanInput, WriteAction};
use crate::compact_slice::CompactSlice;
use crate::ownership::{EndpointsOwner, HeldName, endpoints_owner, ownership};

/// The Endpoints object named after the Service, and whose it is.
#[derive(Clone, Copy, Debug)]
pub struct LiveEndpoints<'a> {
    pub object: &'a Endpoints,
    pub owner: EndpointsOwner,
}

impl<'a> LiveEndpoints<'a> {
    /// `object` as the PortMapping with `pm_uid` sees it ([`endpoints_owner`]).
    pub fn of(object: &'a Endpoints, pm_uid: &str) -> Self {
        Self {
            object,
            owner: endpoints_owner(&object.metadata, pm_uid),
        }
    }

    pub fn is_ours(&self) -> bool {
        self.owner == EndpointsOwner::Ours
    }
}

/// The live objects of one plan, classified.
pub(crate) struct Live<'a> {
    /// Live slices this PortMapping may write.
    pub ours: Vec<&'a Arc<CompactSlice>>,
    /// Names held by others: the caller's (`PlanInput::held_by_others`) and the live slices
    /// this PortMapping may not write. Never touched; a create there is a collision.
    pub held: BTreeMap<String, HeldName>,
    /// The Endpoints object named after the Service.
    pub endpoints: Option<LiveEndpoints<'a>>,
    /// The Endpoints objects this PortMapping controls, whatever their name.
    pub ours_endpoints: Vec<&'a Endpoints>,
}

/// Classifies `input`'s live objects for the PortMapping with `pm_uid`. Slices of other
/// PortMappings of the Service are taken over as `input.take_over` says; orphans are adopted
/// unless the PortMapping is being deleted.
pub(crate) fn classify<'a>(input: &PlanInput<'a>, pm_uid: &str) -> Live<'a> {
    let pm = input.port_mapping;
    let svc_name = pm.spec.service_ref.name.as_str();
    let adopt = pm.metadata.deletion_timestamp.is_none();
    let mut held = input.held_by_others.clone();
    let mut ours = Vec::new();
    for s in input.live_slices {
        if ownership(&s.metadata, pm_uid).claimable(svc_name, adopt, input.take_over) {
            ours.push(s);
        } else {
            let name = s.metadata.name.clone().unwrap_or_default();
            held.insert(name, HeldName::of(&s.metadata));
        }
    }
    let ours_endpoints = input
        .owned_endpoints
        .iter()
        .map(AsRef::as_ref)
        .filter(|e| ownership(&e.metadata, pm_uid).is_ours())
        .collect();
    Live {
        ours,
        held,
        endpoints: input.live_endpoints.map(|e| LiveEndpoints::of(e, pm_uid)),
        ours_endpoints,
    }
}

/// Orders the slices and deletions, and leaves out the creates the plan may not make: none
/// while the PortMapping is being deleted, none at a name `held` by another.
pub(crate) fn settle(out: &mut Plan, held: &BTreeMap<String, HeldName>, deleting: bool) {
    out.slices
        .sort_by(|a, b| a.slice.metadata.name.cmp(&b.slice.metadata.name));
    out.deletions.sort();
    out.deletions.dedup();
    if deleting {
        // Like the native controller while its Service is deleted: no creates that would race
        // the garbage collector; existing slices are still kept accurate.
        out.slices.retain(|s| s.action != WriteAction::Create);
    }
    // Never create over another owner's object: the name stays theirs and the PortMapping
    // reports the collision until it is freed (its deletion wakes the PortMapping).
    let mut collisions = Vec::new();
    out.slices.retain(|s| {
        let name = s.slice.metadata.name.as_deref().unwrap_or_default();
        match held.get(name) {
            Some(h) if s.action == WriteAction::Create => {
                collisions.push(NameCollision {
                    name: name.to_owned(),
                    held: h.clone(),
                });
                false
            }
            _ => true,
        }
    });
    out.collisions.extend(collisions);
}
