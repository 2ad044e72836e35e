//! The writer: every API write of a pass goes through it. It decides nothing (not even whether
//! a name is free: names held by others are a planner input): every write here was chosen by
//! `portmapper-core` and sent by the reconcile's executor, and every write is refused when this
//! replica is not the leader.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use k8s_openapi::api::core::v1::{Endpoints, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Client, Resource, ResourceExt};
use portmapper_api::{MANAGER, PortMapping, PortMappingStatus};
use portmapper_core::PodGate;
use serde_json::json;
use tracing::{debug, info};

use crate::runtime::error::Error;
use crate::runtime::leader::Leadership;
use crate::runtime::metrics::Metrics;

/// What an apply's answer is read for: the stored resourceVersion. Every other field is
/// skipped by the decoder without being built.
#[derive(serde::Deserialize)]
struct Stored {
    #[serde(default)]
    metadata: StoredMeta,
}

#[derive(serde::Deserialize, Default)]
struct StoredMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
}

/// The answer as metadata only (kube-apiserver's `PartialObjectMetadata`), else whole.
const METADATA_ONLY: &str =
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

/// How a slice is written.
#[derive(Clone, Copy)]
enum SliceWrite {
    Create,
    Update,
}

impl SliceWrite {
    /// The API verb (the metrics label, and the request's name in kube's tracing).
    fn verb(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Update => "update",
        }
    }

    fn doing(self) -> &'static str {
        match self {
            Self::Create => "creating",
            Self::Update => "updating",
        }
    }
}

/// Writes on behalf of one PortMapping (never reads: a read needs no leader and no guard).
pub struct Writer<'a> {
    client: &'a Client,
    pub namespace: &'a str,
    pub leadership: &'a Leadership,
    pub metrics: &'a Metrics,
    /// Writes tried through this writer, failed ones included.
    attempts: AtomicU32,
    /// Of those, PortMapping status writes.
    status_attempts: AtomicU32,
    /// The API server's warnings on this writer's writes (see `api_warnings.rs`).
    warnings: Mutex<BTreeSet<String>>,
}

impl<'a> Writer<'a> {
    pub fn new(
        client: &'a Client,
        namespace: &'a str,
        leadership: &'a Leadership,
        metrics: &'a Metrics,
    ) -> Self {
        Self {
            client,
            namespace,
            leadership,
            metrics,
            attempts: AtomicU32::new(0),
            status_attempts: AtomicU32::new(0),
            warnings: Mutex::default(),
        }
    }
}

impl Writer<'_> {
    /// Whether this writer has tried no write.
    pub fn wrote_nothing(&self) -> bool {
        self.attempts.load(Ordering::Relaxed) == 0
    }

    /// Whether this writer tried a write of an object other than the PortMapping's status.
    /// A pass that wrote only the status proves nothing about the writes that failed before
    /// (a status write went through while the slices were still refused).
    pub fn wrote_objects(&self) -> bool {
        self.attempts.load(Ordering::Relaxed) > self.status_attempts.load(Ordering::Relaxed)
    }

    fn guard(&self) -> Result<(), Error> {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        if self.leadership.is_leader() {
            Ok(())
        } else {
            Err(Error::NotLeader)
        }
    }

    /// Collects the warnings the API server sent on writes to `name` (with `subresource`, when
    /// not empty) of kind `K` in this namespace.
    fn listen<K: Resource<DynamicType = ()>>(&self, name: &str, subresource: &str) {
        let mut path = format!("{}/{name}", K::url_path(&(), Some(self.namespace)));
        if !subresource.is_empty() {
            path = format!("{path}/{subresource}");
        }
        let heard = crate::runtime::api_warnings::heard().take(&path);
        if !heard.is_empty() {
            self.warnings
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(heard);
        }
    }

    /// The distinct warnings the API server sent on this writer's writes so far.
    pub fn warnings(&self) -> BTreeSet<String> {
        self.warnings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn params() -> PatchParams {
        PatchParams::apply(MANAGER).force()
    }

    /// Creates one of our slices (POST); returns the resourceVersion the API server stored.
    pub async fn create_slice(&self, slice: &EndpointSlice) -> Result<Option<String>, Error> {
        self.write_slice(slice, SliceWrite::Create).await
    }

    /// Replaces one of our slices (PUT), conditional on the resourceVersion it carries;
    /// returns the resourceVersion the API server stored. A slice changed since our cache saw
    /// it is refused with 409 Conflict: a failed write like any other, retried after the
    /// backoff by a pass planned from the newer version the watch brings.
    pub async fn update_slice(&self, slice: &EndpointSlice) -> Result<Option<String>, Error> {
        self.write_slice(slice, SliceWrite::Update).await
    }

    /// Creates and updates rather than server-side applies: kube-apiserver spends about a
    /// quarter of the CPU on a PUT of a 100-endpoint slice that an apply of the same change
    /// costs it (`docs/benchmarks.md`, the floor's CPU per write), as the native controller
    /// writes its slices. The answer is asked for as metadata only and read for its
    /// resourceVersion alone: decoding the whole stored slice (its endpoints and
    /// managedFields) was 7 % of the operator's CPU per pod flip at 10,000 pods, for one
    /// string.
    async fn write_slice(
        &self,
        slice: &EndpointSlice,
        how: SliceWrite,
    ) -> Result<Option<String>, Error> {
        self.guard()?;
        let name = slice.name_any();
        let failed = |e| {
            Error::kube(
                format!("{} EndpointSlice {}/{name}", how.doing(), self.namespace),
                e,
            )
        };
        let url = EndpointSlice::url_path(&(), Some(self.namespace));
        let request = kube::core::Request::new(url);
        let params = PostParams {
            dry_run: false,
            field_manager: Some(MANAGER.into()),
        };
        let body = serde_json::to_vec(slice).map_err(|e| failed(kube::Error::SerdeError(e)))?;
        let built = match how {
            SliceWrite::Create => request.create(&params, body),
            SliceWrite::Update => request.replace(&name, &params, body),
        };
        let mut request = built.map_err(|e| failed(kube::Error::BuildRequest(e)))?;
        request.headers_mut().insert(
            hyper::header::ACCEPT,
            hyper::header::HeaderValue::from_static(METADATA_ONLY),
        );
        request.extensions_mut().insert(how.verb());
        let stored = self.client.request::<Stored>(request).await;
        self.listen::<EndpointSlice>(&name, "");
        let stored = stored.map_err(failed)?;
        self.metrics.write(how.verb(), "endpointslices");
        debug!(namespace = self.namespace, slice = %name, verb = how.verb(), "wrote EndpointSlice");
        Ok(stored.metadata.resource_version)
    }

    /// Deletes a slice, only if it is still the object we saw (UID precondition), so a stale
    /// cache can never delete a newer object of the same name. True when this call deleted it
    /// (false: it was already gone).
    pub async fn delete_slice(&self, name: &str, uid: &str) -> Result<bool, Error> {
        self.delete::<EndpointSlice>(name, uid, "EndpointSlice", "endpointslices")
            .await
    }

    /// Server-side applies the legacy Endpoints object.
    pub async fn apply_endpoints(&self, endpoints: &Endpoints) -> Result<(), Error> {
        self.guard()?;
        let name = endpoints.name_any();
        let api: Api<Endpoints> = Api::namespaced(self.client.clone(), self.namespace);
        let applied = api
            .patch(&name, &Self::params(), &Patch::Apply(endpoints))
            .await;
        self.listen::<Endpoints>(&name, "");
        applied
            .map_err(|e| Error::kube(format!("applying Endpoints {}/{name}", self.namespace), e))?;
        self.metrics.write("apply", "endpoints");
        Ok(())
    }

    /// Removes annotations an adopted Endpoints object inherited from the native controller
    /// (SSA cannot remove fields it does not own). The resourceVersion makes it a no-op if the
    /// object changed since we read it.
    pub async fn strip_endpoints_annotations(
        &self,
        name: &str,
        keys: &[String],
        resource_version: Option<&str>,
    ) -> Result<(), Error> {
        if keys.is_empty() {
            return Ok(());
        }
        self.guard()?;
        let api: Api<Endpoints> = Api::namespaced(self.client.clone(), self.namespace);
        let annotations: serde_json::Map<String, serde_json::Value> = keys
            .iter()
            .map(|k| (k.clone(), serde_json::Value::Null))
            .collect();
        let patch =
            json!({"metadata": {"resourceVersion": resource_version, "annotations": annotations}});
        let patched = api
            .patch(
                name,
                &PatchParams {
                    field_manager: Some(MANAGER.into()),
                    ..PatchParams::default()
                },
                &kube::api::Patch::Merge(&patch),
            )
            .await;
        self.listen::<Endpoints>(name, "");
        patched.map_err(|e| {
            Error::kube(
                format!(
                    "stripping inherited annotations of Endpoints {}/{name}",
                    self.namespace
                ),
                e,
            )
        })?;
        self.metrics.write("patch", "endpoints");
        Ok(())
    }

    /// Deletes an Endpoints object with a UID precondition; true when this call deleted it.
    pub async fn delete_endpoints(&self, name: &str, uid: &str) -> Result<bool, Error> {
        self.delete::<Endpoints>(name, uid, "Endpoints", "endpoints")
            .await
    }

    /// Deletes `name` only while it is the object with `uid`; an object already gone is fine
    /// (false).
    async fn delete<K>(
        &self,
        name: &str,
        uid: &str,
        kind: &str,
        resource: &'static str,
    ) -> Result<bool, Error>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned,
    {
        self.guard()?;
        let api: Api<K> = Api::namespaced(self.client.clone(), self.namespace);
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let deleted = api.delete(name, &dp).await;
        self.listen::<K>(name, "");
        match deleted {
            Ok(_) => {
                self.metrics.write("delete", resource);
                info!(namespace = self.namespace, kind, name, "deleted");
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(false),
            Err(e) => Err(Error::kube(
                format!("deleting {kind} {}/{name}", self.namespace),
                e,
            )),
        }
    }

    /// Server-side applies the status subresource (only `status`, never the spec). True when
    /// written, false when the PortMapping is gone: deleted while this pass ran (setting its
    /// deletionTimestamp bumps a custom resource's generation, so the pass that sees it
    /// terminating writes a status, racing the removal once its finalizers are released).
    pub async fn apply_status(
        &self,
        pm: &PortMapping,
        status: &PortMappingStatus,
    ) -> Result<bool, Error> {
        self.status_attempts.fetch_add(1, Ordering::Relaxed);
        self.guard()?;
        let name = pm.name_any();
        let api: Api<PortMapping> = Api::namespaced(self.client.clone(), self.namespace);
        let body = json!({
            "apiVersion": "portmapper.dev/v1alpha1",
            "kind": "PortMapping",
            "status": status,
        });
        let applied = api
            .patch_status(&name, &Self::params(), &Patch::Apply(body))
            .await;
        self.listen::<PortMapping>(&name, "status");
        match applied {
            Ok(_) => {
                self.metrics.write("apply", "portmappings/status");
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(false),
            Err(e) => Err(Error::kube(
                format!("applying status of PortMapping {}/{name}", self.namespace),
                e,
            )),
        }
    }
}

impl Writer<'_> {
    /// Sets the publication gate condition (`gate.condition_type`) of one pod through `pods/status`: a
    /// strategic merge patch keyed by condition type, so kubelet's conditions and other gates
    /// are left alone. The UID in the body makes the API server refuse a newer pod of the same
    /// name (a StatefulSet's replacement). True when written, false when the pod is gone.
    pub async fn patch_pod_gate(&self, gate: &PodGate) -> Result<bool, Error> {
        self.guard()?;
        let api: Api<Pod> = Api::namespaced(self.client.clone(), self.namespace);
        let body = json!({
            "metadata": {"uid": gate.uid},
            "status": {"conditions": [{
                "type": gate.condition_type,
                "status": if gate.status { "True" } else { "False" },
                "reason": gate.reason,
                "message": gate.message,
                "lastTransitionTime": gate.last_transition_time,
                "observedGeneration": gate.observed_generation,
            }]},
        });
        let params = PatchParams {
            field_manager: Some(MANAGER.into()),
            ..PatchParams::default()
        };
        let patched = api
            .patch_status(&gate.pod, &params, &Patch::Strategic(body))
            .await;
        self.listen::<Pod>(&gate.pod, "status");
        match patched {
            Ok(_) => {
                self.metrics.write("patch", "pods/status");
                debug!(
                    namespace = self.namespace,
                    pod = %gate.pod,
                    status = gate.status,
                    reason = gate.reason,
                    "set publication gate"
                );
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(false),
            Err(e) => Err(Error::kube(
                format!(
                    "setting condition {} of Pod {}/{}",
                    gate.condition_type, self.namespace, gate.pod
                ),
                e,
            )),
        }
    }
}

impl Writer<'_> {
    /// Adds `finalizer` to the PortMapping, as kube's finalizer helper does: a JSON patch that
    /// first tests the finalizer list the cache shows, so a list changed meanwhile is never
    /// overwritten (the test fails and the next pass looks again).
    pub async fn add_finalizer(&self, pm: &PortMapping, finalizer: &str) -> Result<(), Error> {
        use json_patch::{AddOperation, PatchOperation, TestOperation};
        let list = pointer(&["finalizers"]);
        let ops = match pm.metadata.finalizers.as_deref() {
            None | Some([]) => vec![
                // An absent (or empty, which the server drops) list tests as null.
                PatchOperation::Test(TestOperation {
                    path: list.clone(),
                    value: serde_json::Value::Null,
                }),
                PatchOperation::Add(AddOperation {
                    path: list,
                    value: json!([finalizer]),
                }),
            ],
            Some(current) => vec![
                PatchOperation::Test(TestOperation {
                    path: list,
                    value: json!(current),
                }),
                PatchOperation::Add(AddOperation {
                    path: pointer(&["finalizers", "-"]),
                    value: json!(finalizer),
                }),
            ],
        };
        self.patch_finalizers(pm, ops, "adding finalizer").await
    }

    /// Removes `finalizer` from the PortMapping: a JSON patch that tests the entry it removes.
    pub async fn remove_finalizer(&self, pm: &PortMapping, finalizer: &str) -> Result<(), Error> {
        use json_patch::{PatchOperation, RemoveOperation, TestOperation};
        let Some(at) = pm.finalizers().iter().position(|f| f == finalizer) else {
            return Ok(());
        };
        let entry = pointer(&["finalizers", &at.to_string()]);
        let ops = vec![
            PatchOperation::Test(TestOperation {
                path: entry.clone(),
                value: json!(finalizer),
            }),
            PatchOperation::Remove(RemoveOperation { path: entry }),
        ];
        self.patch_finalizers(pm, ops, "removing finalizer").await
    }

    async fn patch_finalizers(
        &self,
        pm: &PortMapping,
        ops: Vec<json_patch::PatchOperation>,
        what: &str,
    ) -> Result<(), Error> {
        self.guard()?;
        let name = pm.name_any();
        let api: Api<PortMapping> = Api::namespaced(self.client.clone(), self.namespace);
        let params = PatchParams {
            field_manager: Some(MANAGER.into()),
            ..PatchParams::default()
        };
        let patch = Patch::Json::<()>(json_patch::Patch(ops));
        let patched = api.patch(&name, &params, &patch).await;
        self.listen::<PortMapping>(&name, "");
        match patched {
            Ok(_) => {
                self.metrics.write("patch", "portmappings");
                debug!(namespace = self.namespace, portmapping = %name, "{what}");
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
            Err(e) => Err(Error::kube(
                format!("{what} of PortMapping {}/{name}", self.namespace),
                e,
            )),
        }
    }
}

/// The JSON pointer `/metadata/<tokens…>`.
fn pointer(tokens: &[&str]) -> json_patch::jsonptr::PointerBuf {
    let mut all = vec!["metadata"];
    all.extend_from_slice(tokens);
    json_patch::jsonptr::PointerBuf::from_tokens(all)
}
