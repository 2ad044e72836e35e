//! Ownership: the one answer to "is this object ours?", for EndpointSlices and Endpoints alike.
//! Every caller (the planner, the index, the migration steps, the names held by others) asks
//! [`ownership`]; an Endpoints object, named after its Service, is judged by one projection of
//! it, [`endpoints_owner`], which the legacy Endpoints planner and the migration steps share.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use portmapper_api::{GROUP, MANAGER};

/// `endpointslice.kubernetes.io/managed-by`: who publishes an object (EndpointSlices and our
/// Endpoints carry it).
pub const LABEL_MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
/// `kubernetes.io/service-name`: the Service an EndpointSlice belongs to.
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";

/// Whose an object is, from the point of view of one PortMapping.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Ownership<'a> {
    /// Controlled by this PortMapping and not labelled for another manager (our labels may have
    /// been stripped: the next apply restores them).
    Ours,
    /// Labelled managed-by portmapper.dev but not controlled by this PortMapping.
    Orphan {
        /// `None`: no controller at all (left by `--cascade=orphan`, adoptable); otherwise the
        /// other PortMapping that controls it.
        controller: Option<&'a OwnerReference>,
        /// Its `kubernetes.io/service-name`.
        service: Option<&'a str>,
    },
    /// Someone else's: labelled for another manager, controlled by something that is not a
    /// PortMapping, or neither labelled ours nor controlled by us.
    Foreign {
        /// Its managed-by label, when it names someone else.
        manager: Option<&'a str>,
        /// Its controller owner reference, if any.
        controller: Option<&'a OwnerReference>,
    },
}

/// The controller owner reference of an object, if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
}

/// Whether an owner reference points at a PortMapping (any version of our API group).
pub fn is_portmapping(owner: &OwnerReference) -> bool {
    owner.kind == "PortMapping"
        && owner
            .api_version
            .strip_prefix(GROUP)
            .is_some_and(|v| v.starts_with('/'))
}

fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels
        .as_ref()?
        .get(key)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// Classifies `meta` for the PortMapping with UID `pm_uid` (pass `""` to ask only whether the
/// object is an orphan or foreign, for no PortMapping in particular).
///
/// Another manager's label wins over our ownerReference: someone who relabelled our object took
/// it over, and forcing it back would fight them.
pub fn ownership<'a>(meta: &'a ObjectMeta, pm_uid: &str) -> Ownership<'a> {
    let manager = label(meta, LABEL_MANAGED_BY);
    let controller = controller_of(meta);
    if let Some(m) = manager.filter(|m| *m != MANAGER) {
        return Ownership::Foreign {
            manager: Some(m),
            controller,
        };
    }
    if controller.is_some_and(|c| !pm_uid.is_empty() && c.uid == pm_uid) {
        return Ownership::Ours;
    }
    let labelled_ours = manager == Some(MANAGER);
    match controller {
        Some(c) if labelled_ours && is_portmapping(c) => Ownership::Orphan {
            controller: Some(c),
            service: label(meta, LABEL_SERVICE_NAME),
        },
        None if labelled_ours => Ownership::Orphan {
            controller: None,
            service: label(meta, LABEL_SERVICE_NAME),
        },
        _ => Ownership::Foreign {
            manager: None,
            controller,
        },
    }
}

/// Who the Endpoints object named after a PortMapping's Service belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndpointsOwner {
    /// Controlled by this PortMapping (labelled or not), or labelled managed-by us without any
    /// controller (an orphan of ours: the name is the Service's, so it is this PortMapping's).
    Ours,
    /// No managed-by label and no controller owner: the native controller's leftover.
    Abandoned,
    /// Controlled by something else, or managed by someone else: left alone.
    Foreign,
}

/// Classifies an Endpoints object for the PortMapping with `pm_uid`, through [`ownership`].
/// Another PortMapping's object (say, of a deleted PortMapping of the same name the garbage
/// collector has not reached yet) is foreign, as the planner sees it.
pub fn endpoints_owner(meta: &ObjectMeta, pm_uid: &str) -> EndpointsOwner {
    match ownership(meta, pm_uid) {
        Ownership::Ours
        | Ownership::Orphan {
            controller: None, ..
        } => EndpointsOwner::Ours,
        Ownership::Foreign {
            manager: None,
            controller: None,
        } => EndpointsOwner::Abandoned,
        Ownership::Orphan { .. } | Ownership::Foreign { .. } => EndpointsOwner::Foreign,
    }
}

/// Whether `meta` has a controller other than the PortMapping with `pm_uid` (whatever its
/// labels): what the status view leaves alone, as the native controllers leave alone an object
/// someone else controls.
pub fn controlled_by_another(meta: &ObjectMeta, pm_uid: &str) -> bool {
    match ownership(meta, pm_uid) {
        Ownership::Ours => false,
        Ownership::Orphan { controller, .. } => controller.is_some(),
        Ownership::Foreign { controller, .. } => controller.is_some_and(|c| c.uid != pm_uid),
    }
}

impl Ownership<'_> {
    /// Whether this is the PortMapping's own object.
    pub fn is_ours(&self) -> bool {
        matches!(self, Self::Ours)
    }

    /// Whether the PortMapping publishing `service` may write the object: its own, an orphan of
    /// that Service without a controller (adopted, as a ReplicaSet adopts orphaned pods; never
    /// while `adopt` is false, i.e. the PortMapping is being deleted), or one controlled by a
    /// PortMapping in `take_over` (which loses the Service to this one).
    pub fn claimable(&self, service: &str, adopt: bool, take_over: &[String]) -> bool {
        match self {
            Self::Ours => true,
            Self::Orphan {
                controller: None,
                service: s,
            } => adopt && *s == Some(service),
            Self::Orphan {
                controller: Some(c),
                ..
            } => take_over.contains(&c.uid),
            Self::Foreign { .. } => false,
        }
    }
}

/// An object of someone else at a name a plan may want: what a collision reports.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct HeldName {
    /// The holder's UID: each holding object is one occurrence of the collision.
    pub uid: Option<String>,
    /// Who holds it, for the message: `managed by X`, `owned by Kind name` or `created by
    /// someone else`.
    pub holder: String,
}

impl HeldName {
    /// Describes the object in `meta` as a holder of its name.
    pub fn of(meta: &ObjectMeta) -> Self {
        let holder = match label(meta, LABEL_MANAGED_BY).filter(|m| *m != MANAGER) {
            Some(m) => format!("managed by {m}"),
            None => match meta.owner_references.iter().flatten().next() {
                Some(o) => format!("owned by {} {}", o.kind, o.name),
                None => "created by someone else".to_owned(),
            },
        };
        Self {
            uid: meta.uid.clone(),
            holder,
        }
    }
}

impl fmt::Display for HeldName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.holder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn owner(kind: &str, api_version: &str, uid: &str, controller: bool) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: format!("{kind}-{uid}").to_lowercase(),
            uid: uid.into(),
            controller: Some(controller),
            block_owner_deletion: None,
        }
    }

    fn meta(manager: Option<&str>, owners: Vec<OwnerReference>) -> ObjectMeta {
        let mut labels = BTreeMap::from([(LABEL_SERVICE_NAME.to_owned(), "web".to_owned())]);
        if let Some(m) = manager {
            labels.insert(LABEL_MANAGED_BY.to_owned(), m.to_owned());
        }
        ObjectMeta {
            name: Some("web.http".into()),
            uid: Some("obj".into()),
            labels: Some(labels),
            owner_references: Some(owners),
            ..ObjectMeta::default()
        }
    }

    /// What each kind of object is, for PortMapping `me`, and whether the publisher of `web`
    /// (taking over from `loser`) may write it.
    #[test]
    fn one_table_of_objects() {
        let pm = |uid| owner("PortMapping", "portmapper.dev/v1alpha1", uid, true);
        let native = "endpointslice-controller.k8s.io";
        let take_over = ["loser".to_owned()];
        // (object, expected class, claimable, holder message)
        let table: Vec<(&str, ObjectMeta, &str, bool, &str)> = vec![
            (
                "ours",
                meta(Some(MANAGER), vec![pm("me")]),
                "ours",
                true,
                "owned by PortMapping portmapping-me",
            ),
            (
                "ours, labels stripped",
                meta(None, vec![pm("me")]),
                "ours",
                true,
                "owned by PortMapping portmapping-me",
            ),
            (
                "ours, empty manager",
                meta(Some(""), vec![pm("me")]),
                "ours",
                true,
                "owned by PortMapping portmapping-me",
            ),
            (
                "ours but relabelled",
                meta(Some("someone-else"), vec![pm("me")]),
                "foreign",
                false,
                "managed by someone-else",
            ),
            (
                "orphan",
                meta(Some(MANAGER), vec![]),
                "orphan",
                true,
                "created by someone else",
            ),
            (
                "another PortMapping's",
                meta(Some(MANAGER), vec![pm("other")]),
                "orphan",
                false,
                "owned by PortMapping portmapping-other",
            ),
            (
                "a loser's",
                meta(Some(MANAGER), vec![pm("loser")]),
                "orphan",
                true,
                "owned by PortMapping portmapping-loser",
            ),
            (
                "our label, not a PortMapping",
                meta(
                    Some(MANAGER),
                    vec![owner("Deployment", "apps/v1", "d", true)],
                ),
                "foreign",
                false,
                "owned by Deployment deployment-d",
            ),
            (
                "other group's PortMapping",
                meta(
                    Some(MANAGER),
                    vec![owner("PortMapping", "example.com/v1", "x", true)],
                ),
                "foreign",
                false,
                "owned by PortMapping portmapping-x",
            ),
            (
                "native",
                meta(Some(native), vec![owner("Service", "v1", "svc", true)]),
                "foreign",
                false,
                "managed by endpointslice-controller.k8s.io",
            ),
            (
                "abandoned",
                meta(None, vec![]),
                "foreign",
                false,
                "created by someone else",
            ),
            (
                "non-controller ref of ours",
                meta(
                    None,
                    vec![owner("PortMapping", "portmapper.dev/v1alpha1", "me", false)],
                ),
                "foreign",
                false,
                "owned by PortMapping portmapping-me",
            ),
        ];
        for (what, m, class, claimable, holder) in table {
            let got = ownership(&m, "me");
            let got_class = match got {
                Ownership::Ours => "ours",
                Ownership::Orphan { .. } => "orphan",
                Ownership::Foreign { .. } => "foreign",
            };
            assert_eq!(got_class, class, "{what}");
            assert_eq!(got.claimable("web", true, &take_over), claimable, "{what}");
            assert_eq!(HeldName::of(&m).holder, holder, "{what}");
        }
    }

    #[test]
    fn controlled_by_another_looks_at_the_controller_only() {
        let pm = |uid| owner("PortMapping", "portmapper.dev/v1alpha1", uid, true);
        let cases = [
            (meta(Some(MANAGER), vec![pm("me")]), false),
            (meta(None, vec![pm("me")]), false),
            (meta(Some("someone-else"), vec![pm("me")]), false),
            (meta(Some(MANAGER), vec![]), false),
            (meta(None, vec![]), false),
            (meta(Some(MANAGER), vec![pm("other")]), true),
            (meta(None, vec![owner("Service", "v1", "svc", true)]), true),
            (
                meta(
                    Some(MANAGER),
                    vec![owner("Deployment", "apps/v1", "d", true)],
                ),
                true,
            ),
        ];
        for (i, (m, want)) in cases.iter().enumerate() {
            assert_eq!(controlled_by_another(m, "me"), *want, "case {i}");
        }
    }

    #[test]
    fn orphans_are_adopted_only_for_their_service_and_not_while_deleting() {
        let m = meta(Some(MANAGER), vec![]);
        let o = ownership(&m, "me");
        assert!(o.claimable("web", true, &[]));
        assert!(!o.claimable("web", false, &[]));
        assert!(!o.claimable("api", true, &[]));
        // For no PortMapping in particular, our own object is another PortMapping's orphan.
        let ours = meta(
            Some(MANAGER),
            vec![owner("PortMapping", "portmapper.dev/v1", "me", true)],
        );
        assert!(matches!(
            ownership(&ours, ""),
            Ownership::Orphan {
                controller: Some(_),
                service: Some("web")
            }
        ));
    }
}
