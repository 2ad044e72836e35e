//! Slices not managed by us (metadata only): the native controllers' slices of each Service (migration evidence), and every name someone else holds.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;

use portmapper_core::ownership::{LABEL_MANAGED_BY, LABEL_SERVICE_NAME};

use super::names::{drop_name, put_name, service_names};
use super::{
    ForeignKey, Index, PmKey, cut_prefix, dedup, insert, missing, ns_of, remove, service_of_name,
};

impl Index {
    /// A slice not managed by us was added or changed. Affected: for a native or mirroring
    /// controller's slice, the PortMappings of its Service (migration evidence); for any, the
    /// PortMappings whose plans may want its name (a collision starts or ends).
    pub fn apply_foreign_slice(&mut self, slice: &PartialObjectMeta<EndpointSlice>) -> Vec<PmKey> {
        let key = ObjectRef::from_obj(slice);
        let ns = ns_of(slice);
        let native = slice
            .labels()
            .get(LABEL_MANAGED_BY)
            .is_some_and(|m| {
                m == portmapper_core::planner::migration::NATIVE_MANAGER
                    || m == portmapper_core::planner::migration::MIRROR_MANAGER
            })
            .then(|| {
                let service = slice.labels().get(LABEL_SERVICE_NAME).cloned();
                (ns.clone(), service.unwrap_or_default())
            });
        let mut affected = self.delete_foreign_slice(&key);
        put_name(&mut self.foreign_names, &ns, &slice.metadata);
        self.doubt_resolved(&ns, &key.name);
        if let Some(service) = &native {
            insert(&mut self.native_by_service, service.clone(), key.clone());
            affected.extend(self.pms_of(service));
        }
        affected.extend(self.pms_wanting(ns, &key.name));
        self.foreign.insert(key, native);
        dedup(affected)
    }

    /// A slice not managed by us is gone: the PortMappings of its Service (native) and those
    /// that may want its name, which is free now (their collision ends without polling).
    pub fn delete_foreign_slice(&mut self, key: &ForeignKey) -> Vec<PmKey> {
        let Some(native) = self.foreign.remove(key) else {
            return Vec::new();
        };
        let ns = key.namespace.clone().unwrap_or_default();
        drop_name(&mut self.foreign_names, &ns, &key.name);
        self.doubt_resolved(&ns, &key.name);
        let mut affected = Vec::new();
        if let Some(service) = &native {
            remove(&mut self.native_by_service, service, key);
            affected.extend(self.pms_of(service));
        }
        affected.extend(self.pms_wanting(ns, &key.name));
        dedup(affected)
    }

    /// Names of `service` in `namespace` in doubt (see `in_doubt`): the caller reads each.
    pub fn names_in_doubt(&self, namespace: &str, service: &str) -> Vec<String> {
        let dotted: Vec<String> = std::iter::once(service)
            .chain(cut_prefix(service))
            .map(|p| format!("{p}."))
            .collect();
        self.in_doubt
            .get(namespace)
            .into_iter()
            .flatten()
            .filter(|n| *n == service || dotted.iter().any(|d| n.starts_with(d)))
            .cloned()
            .collect()
    }

    /// A name is no longer in doubt: a watch showed it, or a read found it gone.
    pub fn doubt_resolved(&mut self, namespace: &str, name: &str) {
        if let Some(names) = self.in_doubt.get_mut(namespace) {
            names.remove(name);
            if names.is_empty() {
                self.in_doubt.remove(namespace);
            }
        }
    }

    /// The PortMappings whose plans may want slice `name`: those of the Service it starts
    /// with, and those of the Services whose port-set names start with a cut that it starts
    /// with.
    fn pms_wanting(&self, ns: String, name: &str) -> Vec<PmKey> {
        let key = (ns, service_of_name(name).to_owned());
        let mut out = self.pms_of(&key);
        out.extend(
            self.pms_by_name_prefix
                .get(&key)
                .into_iter()
                .flatten()
                .cloned(),
        );
        out
    }

    pub(super) fn pms_of(&self, service: &(String, String)) -> Vec<PmKey> {
        self.pms_by_service
            .get(service)
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }

    /// The slice names a plan of the PortMapping with `uid` for `service` may want that
    /// someone else holds: any known slice named `<service>` or `<service>.*` that ownership
    /// does not let this PortMapping write ([`Ownership::claimable`]; `adopt`: it may adopt
    /// orphans, `take_over`: PortMappings it takes over from). Seen by either watch as held
    /// wins, so a relabelled slice is never forced back while the other watch lags.
    ///
    /// [`Ownership::claimable`]: portmapper_core::Ownership::claimable
    pub fn held_by_others(
        &self,
        namespace: &str,
        service: &str,
        uid: &str,
        adopt: bool,
        take_over: &[String],
    ) -> BTreeMap<String, portmapper_core::HeldName> {
        let mut held = BTreeMap::new();
        for names in [&self.our_names, &self.foreign_names] {
            for (name, holder) in service_names(names.get(namespace), service) {
                let meta = holder.meta(name);
                if !portmapper_core::ownership(&meta, uid).claimable(service, adopt, take_over) {
                    held.insert(name.clone(), portmapper_core::HeldName::of(&meta));
                }
            }
        }
        held
    }

    /// The slice names of `service` that only the watch of slices not managed by us shows and
    /// that ownership lets the PortMapping with `uid` write (arguments as for
    /// [`held_by_others`](Self::held_by_others)): ours, stripped of our label by someone. That
    /// watch keeps metadata only, and an update needs the whole stored object: the caller reads
    /// each.
    pub fn ours_outside_our_watch(
        &self,
        namespace: &str,
        service: &str,
        uid: &str,
        adopt: bool,
        take_over: &[String],
    ) -> Vec<String> {
        let ours = self.our_names.get(namespace);
        service_names(self.foreign_names.get(namespace), service)
            .filter(|(name, _)| !ours.is_some_and(|o| o.contains_key(*name)))
            .filter(|(name, holder)| {
                portmapper_core::ownership(&holder.meta(name), uid)
                    .claimable(service, adopt, take_over)
            })
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// After a relist of the watch of slices not managed by us: forgets those not in `present`.
    pub fn retain_foreign_slices(&mut self, present: &HashSet<ForeignKey>) -> Vec<PmKey> {
        let gone = missing(self.foreign.keys(), present);
        self.delete_each(gone, Self::delete_foreign_slice)
    }

    /// The native slices of a Service.
    pub fn native_slices(&self, namespace: &str, service: &str) -> Vec<ForeignKey> {
        self.native_by_service
            .get(&(namespace.to_owned(), service.to_owned()))
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }
}
