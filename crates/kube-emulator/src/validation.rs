//! Built-in validation call sites. The rules live in `kube-validation` (one implementation shared
//! with the operator's planner); this module only converts between JSON and the typed objects and
//! maps field errors to Status causes. Types without rules there get ObjectMeta validation only.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_validation::field::FieldPath;
use kube_validation::{FieldError, meta as vmeta, names};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{ApiError, Cause};
use crate::registry::ResourceType;

fn typed<T: DeserializeOwned>(rt: &ResourceType, v: &Value) -> Result<T, ApiError> {
    serde_json::from_value(v.clone())
        .map_err(|e| ApiError::bad_request(format!("unable to decode {} object: {e}", rt.kind)))
}

fn meta_of(v: &Value) -> Result<ObjectMeta, ApiError> {
    serde_json::from_value(v.get("metadata").cloned().unwrap_or(Value::Null))
        .map_err(|e| ApiError::bad_request(format!("unable to decode metadata: {e}")))
}

/// Convert field errors to the 422 Status (message assembled by `kube-validation`).
pub fn invalid(rt: &ResourceType, name: &str, errors: &[FieldError]) -> ApiError {
    let causes: Vec<Cause> = errors
        .iter()
        .map(|e| Cause::new(e.kind.reason(), e.body(), e.field.clone()))
        .collect();
    // events.k8s.io Events are validated as the core Event they are stored as.
    let group = if rt.group == "events.k8s.io" {
        ""
    } else {
        rt.group.as_str()
    };
    let mut err = ApiError::invalid(&rt.kind, group, name, causes);
    err.message = kube_validation::invalid_message(&rt.kind, group, name, errors);
    err
}

fn name_fn(rt: &ResourceType) -> vmeta::NameFn {
    match (rt.group.as_str(), rt.plural.as_str()) {
        // Service names are DNS-1123 labels since 1.36 (KEP-5311, RelaxedServiceNameValidation).
        ("", "services") | ("", "namespaces") => names::name_is_dns_label,
        _ => names::name_is_dns_subdomain,
    }
}

/// Validate a built-in object on create (`old` None) or update. Custom resources get ObjectMeta
/// rules with `builtin = false`. Returns the `Warning` texts (custom-resource finalizers that are
/// not domain-qualified).
pub fn validate(
    rt: &ResourceType,
    obj: &Value,
    old: Option<&Value>,
) -> Result<Vec<String>, ApiError> {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let errors: Vec<FieldError> = match (rt.group.as_str(), rt.plural.as_str()) {
        ("discovery.k8s.io", "endpointslices") => {
            use k8s_openapi::api::discovery::v1::EndpointSlice;
            let new: EndpointSlice = typed(rt, obj)?;
            match old {
                None => kube_validation::validate_endpoint_slice(&new),
                Some(o) => kube_validation::validate_endpoint_slice_update(&new, &typed(rt, o)?),
            }
        }
        ("", "endpoints") => {
            use k8s_openapi::api::core::v1::Endpoints;
            let new: Endpoints = typed(rt, obj)?;
            match old {
                None => kube_validation::validate_endpoints(&new),
                Some(o) => kube_validation::validate_endpoints_update(&new, &typed(rt, o)?),
            }
        }
        ("coordination.k8s.io", "leases") => {
            use k8s_openapi::api::coordination::v1::Lease;
            let new: Lease = typed(rt, obj)?;
            match old {
                None => kube_validation::validate_lease(&new),
                Some(o) => kube_validation::validate_lease_update(&new, &typed(rt, o)?),
            }
        }
        ("", "services") => {
            use k8s_openapi::api::core::v1::Service;
            let new: Service = typed(rt, obj)?;
            match old {
                None => kube_validation::validate_service(&new),
                Some(o) => kube_validation::validate_service_update(&new, &typed(rt, o)?),
            }
        }
        ("", "pods") => {
            use k8s_openapi::api::core::v1::Pod;
            let new: Pod = typed(rt, obj)?;
            match old {
                None => kube_validation::validate_pod(&new),
                Some(o) => kube_validation::validate_pod_update(&new, &typed(rt, o)?),
            }
        }
        ("", "events") => {
            use k8s_openapi::api::core::v1::Event;
            kube_validation::validate_core_event(&typed::<Event>(rt, obj)?)
        }
        ("events.k8s.io", "events") => {
            use k8s_openapi::api::events::v1::Event;
            let new: Event = typed(rt, obj)?;
            match old {
                None => kube_validation::validate_event_create(&new),
                Some(o) => kube_validation::validate_event_update(&new, &typed(rt, o)?),
            }
        }
        _ => {
            let m = meta_of(obj)?;
            let path = FieldPath::new("metadata");
            let mut errs =
                vmeta::validate_object_meta(&m, rt.namespaced, name_fn(rt), &path, rt.builtin);
            if let Some(o) = old {
                errs.extend(vmeta::validate_object_meta_update(&m, &meta_of(o)?, &path));
            }
            errs
        }
    };
    if !errors.is_empty() {
        return Err(invalid(rt, &name, &errors));
    }
    if rt.builtin {
        return Ok(Vec::new());
    }
    let finalizers: Vec<String> = obj
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    Ok(vmeta::finalizer_warnings(
        &finalizers,
        &FieldPath::new("metadata").child("finalizers"),
    ))
}
