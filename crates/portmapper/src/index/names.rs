//! The slice names the index knows per namespace, each with what ownership reads of its object
//! (its UID, the managed-by and service-name labels, its owner references), kept compact: one
//! entry per slice in the cluster's namespaces we watch, ours and everyone else's, so a whole
//! `ObjectMeta` each (its 360 bytes inline and a label map's node) cost about 2.9 KB per slice
//! in a heap profile at 5,000 PortMappings. A reader rebuilds the `ObjectMeta` of the few names
//! a plan may want ([`NameHolder::meta`]) and asks [`portmapper_core::ownership`] as before.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use std::sync::Arc;

use portmapper_core::interned::intern;
use portmapper_core::ownership::{LABEL_MANAGED_BY, LABEL_SERVICE_NAME};

/// Per namespace, slice name → its holder.
pub(super) type Names = HashMap<String, BTreeMap<String, NameHolder>>;

/// What ownership reads of the object holding a slice name, and nothing else.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct NameHolder {
    uid: Option<Box<str>>,
    /// The managed-by label (few distinct values: interned).
    managed_by: Option<Arc<str>>,
    service: Option<Box<str>>,
    owners: Box<[OwnerReference]>,
}

impl NameHolder {
    fn of(meta: &ObjectMeta) -> Self {
        let label = |key: &str| meta.labels.as_ref().and_then(|l| l.get(key));
        Self {
            uid: meta.uid.as_deref().map(Box::from),
            managed_by: label(LABEL_MANAGED_BY).map(|v| intern(v)),
            service: label(LABEL_SERVICE_NAME).map(|v| Box::from(v.as_str())),
            owners: meta.owner_references.clone().unwrap_or_default().into(),
        }
    }

    /// The object's metadata as ownership reads it: `name`, UID, the two labels, owner
    /// references.
    pub(super) fn meta(&self, name: &str) -> ObjectMeta {
        let labels: BTreeMap<String, String> = [
            (LABEL_MANAGED_BY, self.managed_by.as_deref()),
            (LABEL_SERVICE_NAME, self.service.as_deref()),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
        .collect();
        ObjectMeta {
            name: Some(name.to_owned()),
            uid: self.uid.as_deref().map(str::to_owned),
            labels: (!labels.is_empty()).then_some(labels),
            owner_references: (!self.owners.is_empty()).then(|| self.owners.to_vec()),
            ..ObjectMeta::default()
        }
    }
}

/// Records the holder of `meta`'s name in `ns`.
pub(super) fn put_name(map: &mut Names, ns: &str, meta: &ObjectMeta) {
    if let Some(name) = &meta.name {
        map.entry(ns.to_owned())
            .or_default()
            .insert(name.clone(), NameHolder::of(meta));
    }
}

/// Forgets `name` in `ns`.
pub(super) fn drop_name(map: &mut Names, ns: &str, name: &str) {
    if let Some(names) = map.get_mut(ns) {
        names.remove(name);
        if names.is_empty() {
            map.remove(ns);
        }
    }
}

/// The entries of `names` a plan for `service` may want: `<service>` (a headless Service
/// without ports), `<service>.*` (Service names cannot contain `.`, so no other Service's
/// names share the prefix), and `<cut>.*` when port-set names cut a long Service name
/// ([`super::cut_prefix`]; other Services' names there are never wanted, only looked at).
pub(super) fn service_names<'a>(
    names: Option<&'a BTreeMap<String, NameHolder>>,
    service: &'a str,
) -> impl Iterator<Item = (&'a String, &'a NameHolder)> {
    let prefixes: Vec<String> = std::iter::once(service)
        .chain(super::cut_prefix(service))
        .map(|p| format!("{p}."))
        .collect();
    names.into_iter().flat_map(move |n| {
        let dotted = prefixes.clone().into_iter().flat_map(move |dotted| {
            n.range(dotted.clone()..)
                .take_while(move |(k, _)| k.starts_with(&dotted))
        });
        n.get_key_value(service).into_iter().chain(dotted)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(labels: &[(&str, &str)], owners: Vec<OwnerReference>) -> ObjectMeta {
        ObjectMeta {
            name: Some("web.abc".into()),
            uid: Some("u-1".into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            owner_references: Some(owners),
            annotations: Some([("a".to_owned(), "b".to_owned())].into()),
            resource_version: Some("7".into()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn a_holder_gives_back_what_ownership_reads_and_nothing_else() {
        let owner = OwnerReference {
            api_version: "portmapper.dev/v1alpha1".into(),
            kind: "PortMapping".into(),
            name: "web".into(),
            uid: "pm-1".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        };
        let full = meta(
            &[
                (LABEL_MANAGED_BY, "portmapper.dev"),
                (LABEL_SERVICE_NAME, "web"),
                ("app", "web"),
            ],
            vec![owner.clone()],
        );
        let back = NameHolder::of(&full).meta("web.abc");
        assert_eq!(back.name.as_deref(), Some("web.abc"));
        assert_eq!(back.uid.as_deref(), Some("u-1"));
        assert_eq!(back.owner_references, Some(vec![owner]));
        let labels = back.labels.clone().expect("labels");
        assert_eq!(labels.len(), 2, "only the two ownership reads");
        assert_eq!(labels[LABEL_MANAGED_BY], "portmapper.dev");
        assert_eq!(labels[LABEL_SERVICE_NAME], "web");
        assert_eq!(back.annotations, None);
        assert_eq!(back.resource_version, None);
        for uid in ["pm-1", "pm-2", ""] {
            assert_eq!(
                portmapper_core::ownership(&back, uid),
                portmapper_core::ownership(&full, uid),
                "same answer for {uid:?}"
            );
        }
    }

    #[test]
    fn a_bare_holder_has_no_labels_or_owners() {
        let back = NameHolder::of(&meta(&[], vec![])).meta("x");
        assert_eq!(back.labels, None);
        assert_eq!(back.owner_references, None);
        assert_eq!(
            portmapper_core::ownership(&back, "pm-1"),
            portmapper_core::Ownership::Foreign {
                manager: None,
                controller: None
            }
        );
    }
}
