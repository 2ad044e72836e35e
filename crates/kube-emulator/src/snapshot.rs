//! Snapshot / restore of the whole store, and manifest loading.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{ApiError, EmuError};
use crate::meta::{self, str_at};
use crate::ops::{self, Target, Writer};
use crate::registry::GroupResource;
use crate::store::{self, State};

/// A serialisable copy of every object (with their resourceVersions) and the revision counter.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Snapshot {
    /// Global revision at snapshot time.
    pub resource_version: u64,
    /// Objects with their type.
    pub objects: Vec<SnapshotObject>,
}

/// One stored object.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SnapshotObject {
    /// Group.
    pub group: String,
    /// Resource.
    pub resource: String,
    /// The object.
    pub object: Value,
}

/// Take a snapshot.
pub fn take(st: &State) -> Snapshot {
    let mut objects = Vec::new();
    let mut grs: Vec<&GroupResource> = st.objects.keys().collect();
    grs.sort();
    for gr in grs {
        for o in st.objects[gr].values() {
            objects.push(SnapshotObject {
                group: gr.group.clone(),
                resource: gr.resource.clone(),
                object: (**o).clone(),
            });
        }
    }
    Snapshot {
        resource_version: st.rv,
        objects,
    }
}

/// Restore: replaces every object, keeps the revision counter monotonic (it never goes back),
/// drops history (resumed watches get 410 and relist) and closes every watch.
pub fn restore(st: &mut State, snap: &Snapshot) {
    st.objects.clear();
    for so in &snap.objects {
        let gr = GroupResource::new(&so.group, &so.resource);
        let name = str_at(&so.object, "/metadata/name").unwrap_or_default();
        let k = store::key(str_at(&so.object, "/metadata/namespace"), name);
        st.objects
            .entry(gr)
            .or_default()
            .insert(k, Arc::new(so.object.clone()));
    }
    st.rv = st.rv.max(snap.resource_version) + 1;
    st.types.retain(|_, rt| rt.crd.is_none());
    st.compact_now();
    st.close_all_watches();
    st.gc_dirty = true;
}

/// Parse a YAML stream (or JSON) into objects; `List` kinds are flattened.
pub fn parse_manifests(text: &str) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let v: Value = serde::Deserialize::deserialize(doc).map_err(|e| e.to_string())?;
        match v {
            Value::Null => {}
            Value::Object(ref m)
                if m.get("kind")
                    .and_then(Value::as_str)
                    .is_some_and(|k| k.ends_with("List"))
                    && m.contains_key("items") =>
            {
                out.extend(
                    m.get("items")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default(),
                );
            }
            v => out.push(v),
        }
    }
    Ok(out)
}

/// Create (or replace) one manifest object through the normal create pipeline.
pub fn load_object(st: &mut State, mut obj: Value) -> Result<Value, ApiError> {
    let av = str_at(&obj, "/apiVersion").unwrap_or_default().to_string();
    let kind = str_at(&obj, "/kind").unwrap_or_default().to_string();
    let (group, version) = match av.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), av.clone()),
    };
    let rt = st
        .types
        .values()
        .find(|rt| rt.group == group && rt.version == version && rt.kind == kind)
        .cloned()
        .ok_or_else(|| ApiError::not_emulated(&format!("kind {kind} in {av}")))?;
    let ns = if rt.namespaced {
        Some(
            str_at(&obj, "/metadata/namespace")
                .unwrap_or("default")
                .to_string(),
        )
    } else {
        None
    };
    let name = str_at(&obj, "/metadata/name").map(str::to_string);
    meta::meta_mut(&mut obj).remove("resourceVersion");
    let t = Target {
        rt,
        ns,
        name,
        sub: None,
    };
    ops::create(st, &t, obj, &Writer::named("kube-emulator-load"), false).map(|r| r.body)
}

/// Load every `.yaml`/`.yml`/`.json` file of a path (directory entries sorted).
pub fn load_path(
    st: &mut State,
    cfg: &crate::instance::Config,
    path: &std::path::Path,
) -> Result<usize, EmuError> {
    let err = |m: String| EmuError::Load {
        path: path.display().to_string(),
        message: m,
    };
    let mut files = Vec::new();
    if path.is_dir() {
        let rd = std::fs::read_dir(path).map_err(|e| err(e.to_string()))?;
        for e in rd.flatten() {
            let p = e.path();
            if matches!(
                p.extension().and_then(|x| x.to_str()),
                Some("yaml" | "yml" | "json")
            ) {
                files.push(p);
            }
        }
        files.sort();
    } else {
        files.push(path.to_path_buf());
    }
    let mut n = 0;
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|e| err(format!("{}: {e}", f.display())))?;
        for obj in parse_manifests(&text).map_err(|e| err(format!("{}: {e}", f.display())))? {
            // CRDs in the same stream must be Established before their CRs load.
            crate::controllers::pass(st, cfg);
            load_object(st, obj).map_err(|e| err(format!("{}: {}", f.display(), e.message)))?;
            crate::controllers::pass(st, cfg);
            n += 1;
        }
    }
    Ok(n)
}
