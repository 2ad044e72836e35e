//! The emulated control plane loops: CRD establishment (docs/emulator-spec.md §5.1), namespace
//! deletion (§2.10) and the ownerReference garbage collector (§2.9). They write through the store
//! like any client, so watch events, resourceVersions and finalizers behave naturally.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;
use tracing::{debug, info};

use crate::instance::Core;
use crate::meta::{self, str_at};
use crate::ops::{self, DeleteOpts};
use crate::registry::{self, GroupResource, ResourceType};
use crate::store::State;

/// Run until shutdown: one pass after every kick (debounced) and at least once a second.
pub async fn run(core: Arc<Core>, mut shutdown: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = core.kick.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shutdown.changed() => return,
        }
        if !core.config.controller_delay.is_zero() {
            tokio::time::sleep(core.config.controller_delay).await;
        }
        let more = {
            let mut st = core.lock();
            pass(&mut st, &core.config)
        };
        if more {
            core.kick.notify_one();
        }
    }
}

/// One reconciliation pass over everything; returns true if it changed something.
pub fn pass(st: &mut State, cfg: &crate::instance::Config) -> bool {
    let mut changed = crds(st, cfg);
    changed |= namespaces(st);
    let pending = std::mem::take(&mut st.gc_pending);
    if !st.gc_dirty && !pending.iter().all(|(gr, k)| owners_present(st, gr, k)) {
        st.gc_dirty = true;
    }
    if st.gc_dirty {
        st.gc_dirty = false;
        changed |= gc(st);
    }
    changed
}

fn crd_gr() -> GroupResource {
    GroupResource::new("apiextensions.k8s.io", "customresourcedefinitions")
}

fn is_established(crd: &Value) -> bool {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type") == Some(&json!("Established"))
                    && c.get("status") == Some(&json!("True"))
            })
        })
}

fn crds(st: &mut State, cfg: &crate::instance::Config) -> bool {
    let mut changed = false;
    let all: Vec<(String, Arc<Value>)> = st
        .objects
        .get(&crd_gr())
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    let mut served: HashMap<GroupResource, Arc<ResourceType>> = HashMap::new();
    for (k, crd) in &all {
        let terminating = crd.pointer("/metadata/deletionTimestamp").is_some();
        if !is_established(crd) && !terminating {
            let age_ok = str_at(crd, "/metadata/creationTimestamp")
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .is_none_or(|t| {
                    st.clock.now().as_second() - t.as_second()
                        >= cfg.crd_establish_delay.as_secs() as i64
                });
            if !age_ok {
                continue;
            }
            let now = st.clock.now_rfc3339();
            let mut o = (**crd).clone();
            let names = o
                .pointer("/spec/names")
                .cloned()
                .unwrap_or_else(|| json!({}));
            let storage: Vec<Value> = o
                .pointer("/spec/versions")
                .and_then(Value::as_array)
                .map(|vs| {
                    vs.iter()
                        .filter(|v| v.get("storage") == Some(&json!(true)))
                        .filter_map(|v| v.get("name").cloned())
                        .collect()
                })
                .unwrap_or_default();
            o["status"] = json!({
                "acceptedNames": names,
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
                ],
                "storedVersions": storage,
            });
            let stored = st.replace(&crd_gr(), k.clone(), o);
            info!(crd = %k, "CRD established");
            changed = true;
            if let Some(rt) = registry::from_crd(&stored) {
                served.insert(rt.gr(), Arc::new(rt));
            }
        } else if is_established(crd) {
            // Reuse the registered type while the CRD is unchanged: building one compiles the
            // schema's patterns and CEL rules.
            let rv = meta::str_at(crd, "/metadata/resourceVersion").unwrap_or_default();
            let cached = st
                .types
                .values()
                .find(|t| {
                    t.crd
                        .as_ref()
                        .is_some_and(|c| c.crd_name == *k && c.crd_rv == rv)
                })
                .cloned();
            match cached {
                Some(rt) => {
                    served.insert(rt.gr(), rt);
                }
                None => {
                    if let Some(rt) = registry::from_crd(crd) {
                        served.insert(rt.gr(), Arc::new(rt));
                    }
                }
            }
        }
        if terminating {
            // CRD deletion: remove every CR, then the CRD (customresourcecleanup finalizer).
            if let Some(rt) = registry::from_crd(crd) {
                let keys: Vec<String> = st
                    .objects
                    .get(&rt.gr())
                    .map(|m| m.keys().cloned().collect())
                    .unwrap_or_default();
                for ck in keys {
                    st.remove(&rt.gr(), &ck);
                }
                served.remove(&rt.gr());
            }
            let fins: Vec<String> = meta::finalizers(crd)
                .into_iter()
                .filter(|f| f != "customresourcecleanup.apiextensions.k8s.io")
                .collect();
            let mut o = (**crd).clone();
            meta::set_finalizers(&mut o, &fins);
            if fins.is_empty() {
                st.remove(&crd_gr(), k);
            } else if fins != meta::finalizers(crd) {
                st.replace(&crd_gr(), k.clone(), o);
            }
            changed = true;
        }
    }
    // Sync the served custom types with the Established CRDs.
    let custom: Vec<GroupResource> = st
        .types
        .iter()
        .filter(|(_, rt)| rt.crd.is_some())
        .map(|(gr, _)| gr.clone())
        .collect();
    for gr in custom {
        if !served.contains_key(&gr) {
            st.types.remove(&gr);
            let keys: Vec<String> = st
                .objects
                .get(&gr)
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            for k in keys {
                st.remove(&gr, &k);
            }
            debug!(group = %gr.group, resource = %gr.resource, "custom type no longer served");
        }
    }
    for (gr, rt) in served {
        if st.types.get(&gr).is_none_or(|cur| cur.crd.is_some()) {
            st.types.insert(gr, rt);
        }
    }
    changed
}

fn namespaces(st: &mut State) -> bool {
    let ns_gr = GroupResource::new("", "namespaces");
    let terminating: Vec<(String, Arc<Value>)> = st
        .objects
        .get(&ns_gr)
        .map(|m| {
            m.iter()
                .filter(|(_, v)| v.pointer("/metadata/deletionTimestamp").is_some())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    let mut changed = false;
    for (name, _) in terminating {
        let types: Vec<Arc<ResourceType>> = st
            .types
            .values()
            .filter(|rt| rt.namespaced)
            .cloned()
            .collect();
        let mut remaining = 0usize;
        // Per resource: instances left; per finalizer: instances holding it (for the conditions).
        let mut left: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
        let mut held: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
        for rt in types {
            let prefix = format!("{name}/");
            let keys: Vec<(String, bool)> = st
                .objects
                .get(&rt.gr())
                .map(|m| {
                    m.range(prefix.clone()..format!("{name}0"))
                        .map(|(k, v)| {
                            (
                                k.clone(),
                                v.pointer("/metadata/deletionTimestamp").is_some(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            for (k, pending) in keys {
                remaining += 1;
                if !pending {
                    let _ = ops::delete_one(st, &rt, &k, &DeleteOpts::default());
                    changed = true;
                }
                if let Some(o) = st.get(&rt.gr(), &k) {
                    *left.entry(rt.qualified()).or_default() += 1;
                    for f in meta::finalizers(&o) {
                        *held.entry(f).or_default() += 1;
                    }
                }
            }
        }
        if remaining == 0 {
            st.remove(&ns_gr, &name);
            changed = true;
        } else {
            changed |= namespace_conditions(st, &ns_gr, &name, &left, &held);
        }
    }
    changed
}

/// The namespace controller's status conditions while content remains (written only on change).
fn namespace_conditions(
    st: &mut State,
    ns_gr: &GroupResource,
    name: &str,
    left: &std::collections::BTreeMap<String, usize>,
    held: &std::collections::BTreeMap<String, usize>,
) -> bool {
    let Some(ns) = st.get(ns_gr, name) else {
        return false;
    };
    let cond = |t: &str, status: bool, reason: &str, message: String| {
        let old = ns
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.get("type") == Some(&json!(t)))
                    .cloned()
            });
        let status = if status { "True" } else { "False" };
        let since = match &old {
            Some(o) if o.get("status") == Some(&json!(status)) => o
                .get("lastTransitionTime")
                .cloned()
                .unwrap_or(json!(st.clock.now_rfc3339())),
            _ => json!(st.clock.now_rfc3339()),
        };
        json!({"type": t, "status": status, "lastTransitionTime": since, "reason": reason, "message": message})
    };
    let resources: Vec<String> = left
        .iter()
        .map(|(r, n)| format!("{r} has {n} resource instances"))
        .collect();
    let finalizers: Vec<String> = held
        .iter()
        .map(|(f, n)| format!("{f} in {n} resource instances"))
        .collect();
    let conditions = json!([
        cond(
            "NamespaceDeletionDiscoveryFailure",
            false,
            "ResourcesDiscovered",
            "All resources successfully discovered".into()
        ),
        cond(
            "NamespaceDeletionGroupVersionParsingFailure",
            false,
            "ParsedGroupVersions",
            "All legacy kube types successfully parsed".into()
        ),
        cond(
            "NamespaceDeletionContentFailure",
            false,
            "ContentDeleted",
            "All content successfully deleted, may be waiting on finalization".into()
        ),
        if resources.is_empty() {
            cond(
                "NamespaceContentRemaining",
                false,
                "ContentRemoved",
                "All content successfully removed".into(),
            )
        } else {
            cond(
                "NamespaceContentRemaining",
                true,
                "SomeResourcesRemain",
                format!("Some resources are remaining: {}", resources.join(", ")),
            )
        },
        if finalizers.is_empty() {
            cond(
                "NamespaceFinalizersRemaining",
                false,
                "ContentHasNoFinalizers",
                "All content-preserving finalizers finished".into(),
            )
        } else {
            cond(
                "NamespaceFinalizersRemaining",
                true,
                "SomeFinalizersRemain",
                format!(
                    "Some content in the namespace has finalizers remaining: {}",
                    finalizers.join(", ")
                ),
            )
        },
    ]);
    if ns.pointer("/status/conditions") == Some(&conditions) {
        return false;
    }
    let mut o = (*ns).clone();
    o["status"]["conditions"] = conditions;
    st.replace(ns_gr, name.to_string(), o);
    true
}

struct Node {
    gr: GroupResource,
    key: String,
    ns: Option<String>,
    obj: Arc<Value>,
}

/// `metadata.<field>` without `Value::pointer`'s path parsing: the collector reads it for every
/// stored object on every pass.
/// Whether every owner the object names exists (same uid; a namespaced owner in the object's
/// namespace), found by kind and name. False when one is missing or its kind is not served:
/// then the full pass decides.
fn owners_present(st: &State, gr: &GroupResource, k: &str) -> bool {
    let Some(o) = st.get(gr, k) else {
        return true;
    };
    let ns = str_at(&o, "/metadata/namespace");
    let refs = meta_field(&o, "ownerReferences")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    refs.iter().all(|r| {
        let field = |f: &str| r.get(f).and_then(Value::as_str).unwrap_or_default();
        let group = field("apiVersion").rsplit_once('/').map_or("", |(g, _)| g);
        let Some(rt) = st
            .types
            .values()
            .find(|rt| rt.kind == field("kind") && rt.group == group)
        else {
            return false;
        };
        let key = crate::store::key(ns.filter(|_| rt.namespaced), field("name"));
        st.get(&rt.gr(), &key)
            .is_some_and(|owner| str_at(&owner, "/metadata/uid") == Some(field("uid")))
    })
}

fn meta_field<'a>(o: &'a Value, field: &str) -> Option<&'a Value> {
    o.get("metadata")?.get(field)
}

fn gc(st: &mut State) -> bool {
    // Dependents first, then an index of just the objects they name as owners: a pass costs a
    // field lookup per stored object, not a copy of every object's identity.
    let mut dependents: Vec<(GroupResource, String)> = Vec::new();
    let mut wanted: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for (gr, m) in &st.objects {
        for (k, o) in m {
            if let Some(refs) = meta_field(o, "ownerReferences") {
                dependents.push((gr.clone(), k.clone()));
                for r in refs.as_array().into_iter().flatten() {
                    if let Some(uid) = r.get("uid").and_then(Value::as_str) {
                        wanted.insert(uid);
                    }
                }
            }
        }
    }
    // uid → object, for the owners named above and every object being deleted (it may be an
    // owner waiting on foreground deletion or orphaning).
    let mut by_uid: HashMap<String, Node> = HashMap::new();
    for (gr, m) in &st.objects {
        for (k, o) in m {
            let Some(uid) = meta_field(o, "uid").and_then(Value::as_str) else {
                continue;
            };
            if !wanted.contains(uid) && meta_field(o, "deletionTimestamp").is_none() {
                continue;
            }
            by_uid.insert(
                uid.to_string(),
                Node {
                    gr: gr.clone(),
                    key: k.clone(),
                    ns: meta_field(o, "namespace")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    obj: o.clone(),
                },
            );
        }
    }
    drop(wanted);
    let mut changed = false;
    // Dependents per owner uid (for foreground/orphan handling).
    let mut children: HashMap<String, Vec<(GroupResource, String)>> = HashMap::new();
    for (gr, k) in &dependents {
        let Some(o) = st.get(gr, k) else { continue };
        let ns = str_at(&o, "/metadata/namespace").map(str::to_string);
        let refs = o
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut present = Vec::new();
        let mut absent = 0usize;
        for r in &refs {
            let uid = r.get("uid").and_then(Value::as_str).unwrap_or_default();
            // A namespaced owner in another namespace counts as absent; cluster-scoped owners resolve anywhere.
            let found = by_uid.get(uid).filter(|n| n.ns.is_none() || n.ns == ns);
            match found {
                Some(_) => {
                    present.push(r.clone());
                    children
                        .entry(uid.to_string())
                        .or_default()
                        .push((gr.clone(), k.clone()));
                }
                None => absent += 1,
            }
        }
        if absent == 0 || refs.is_empty() {
            continue;
        }
        let Some(rt) = type_of(st, gr) else { continue };
        if present.is_empty() {
            if o.pointer("/metadata/deletionTimestamp").is_none() {
                debug!(object = %k, "garbage collecting dependent with no owner left");
                let _ = ops::delete_one(st, &rt, k, &DeleteOpts::default());
                changed = true;
            }
        } else {
            let mut n = (*o).clone();
            meta::meta_mut(&mut n).insert("ownerReferences".into(), Value::Array(present));
            st.replace(gr, k.clone(), n);
            changed = true;
        }
    }
    // Owners waiting on foregroundDeletion / orphan.
    for (uid, node) in &by_uid {
        if node.obj.pointer("/metadata/deletionTimestamp").is_none() {
            continue;
        }
        let fins = meta::finalizers(&node.obj);
        let kids = children.get(uid).cloned().unwrap_or_default();
        if fins.iter().any(|f| f == "orphan") {
            for (gr, k) in &kids {
                if let Some(o) = st.get(gr, k) {
                    let mut n = (*o).clone();
                    let refs: Vec<Value> = o
                        .pointer("/metadata/ownerReferences")
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter(|r| r.get("uid").and_then(Value::as_str) != Some(uid))
                                .cloned()
                                .collect()
                        })
                        .unwrap_or_default();
                    meta::meta_mut(&mut n).insert("ownerReferences".into(), Value::Array(refs));
                    meta::normalise(&mut n);
                    st.replace(gr, k.clone(), n);
                }
            }
            remove_finalizer(st, &node.gr, &node.key, "orphan");
            changed = true;
        } else if fins.iter().any(|f| f == "foregroundDeletion") {
            let mut blocking = 0;
            for (gr, k) in &kids {
                let Some(o) = st.get(gr, k) else { continue };
                let blocks = o
                    .pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .is_some_and(|a| {
                        a.iter().any(|r| {
                            r.get("uid").and_then(Value::as_str) == Some(uid)
                                && r.get("blockOwnerDeletion") == Some(&json!(true))
                        })
                    });
                if blocks {
                    blocking += 1;
                }
                if o.pointer("/metadata/deletionTimestamp").is_none()
                    && let Some(rt) = type_of(st, gr)
                {
                    let _ = ops::delete_one(
                        st,
                        &rt,
                        k,
                        &DeleteOpts {
                            propagation: Some("Foreground".into()),
                            ..Default::default()
                        },
                    );
                    changed = true;
                }
            }
            if blocking == 0 {
                remove_finalizer(st, &node.gr, &node.key, "foregroundDeletion");
                changed = true;
            }
        }
    }
    changed
}

fn type_of(st: &State, gr: &GroupResource) -> Option<Arc<ResourceType>> {
    st.types.get(gr).cloned()
}

/// Remove one finalizer; completes the deletion when none are left.
fn remove_finalizer(st: &mut State, gr: &GroupResource, k: &str, f: &str) {
    let Some(o) = st.get(gr, k) else { return };
    let fins: Vec<String> = meta::finalizers(&o)
        .into_iter()
        .filter(|x| x != f)
        .collect();
    if fins.is_empty() && o.pointer("/metadata/deletionTimestamp").is_some() {
        st.remove(gr, k);
    } else {
        let mut n = (*o).clone();
        meta::set_finalizers(&mut n, &fins);
        st.replace(gr, k.to_string(), n);
    }
}

/// Pre-create the system namespaces (docs/emulator-spec.md §2.10).
pub fn bootstrap(st: &mut State) {
    let ns_rt = st.types.get(&GroupResource::new("", "namespaces")).cloned();
    let Some(rt) = ns_rt else { return };
    for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let t = ops::Target {
            rt: rt.clone(),
            ns: None,
            name: Some(name.into()),
            sub: None,
        };
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        let _ = ops::create(st, &t, obj, &ops::Writer::named("kube-apiserver"), false);
    }
}
