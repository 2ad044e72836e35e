//! The two output formats of `portmapper render`: multi-document YAML that `kubectl apply`
//! accepts, and a table for reading in a review.

use std::fmt::Write as _;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use portmapper_api::PortStatus;
use serde::Serialize;

use super::{Preview, RenderError, Rendered};

fn header(rendered: &Rendered) -> String {
    format!(
        "# portmapper render: an offline preview of what the operator would publish on a first\n\
         # publish (no existing EndpointSlices) and the status it would report.\n\
         # Network checks (httpGet, tcpSocket, grpc, webhook) were NOT run: every result is ASSUMED\n\
         # to be `{}` (--assume). uids the input does not set are placeholders.\n",
        rendered.assume.as_str()
    )
}

fn to_yaml<T: Serialize>(what: &str, object: &T) -> Result<String, RenderError> {
    serde_yaml::to_string(object).map_err(|source| RenderError::Serialize {
        what: what.to_owned(),
        source,
    })
}

/// Every object as one YAML document: per PortMapping its EndpointSlices, its Endpoints, then the
/// PortMapping itself with the status it would report (conditions without `lastTransitionTime`:
/// nothing transitioned yet).
pub fn yaml(rendered: &Rendered) -> Result<String, RenderError> {
    let mut out = header(rendered);
    for preview in &rendered.previews {
        let pm = &preview.port_mapping;
        let id = format!(
            "PortMapping {}/{}",
            pm.namespace().unwrap_or_default(),
            pm.name_any()
        );
        out.push_str("---\n");
        let _ = writeln!(out, "# {id} (from {})", preview.source);
        if preview.assumed > 0 {
            let _ = writeln!(
                out,
                "# {} network check results assumed `{}`",
                preview.assumed,
                rendered.assume.as_str()
            );
        }
        for note in &preview.notes {
            let _ = writeln!(out, "# {note}");
        }
        let mut first = true;
        let mut doc = |out: &mut String, text: String| {
            if !first {
                out.push_str("---\n");
            }
            first = false;
            out.push_str(&text);
        };
        for slice in &preview.slices {
            doc(&mut out, to_yaml(&format!("{id}: EndpointSlice"), slice)?);
        }
        if let Some(endpoints) = &preview.endpoints {
            doc(&mut out, to_yaml(&format!("{id}: Endpoints"), endpoints)?);
        }
        let mut value = serde_json::to_value(pm).map_err(|e| RenderError::Serialize {
            what: id.clone(),
            source: serde::ser::Error::custom(e),
        })?;
        strip_server_fields(&mut value);
        doc(&mut out, to_yaml(&id, &value)?);
    }
    Ok(out)
}

/// Keeps the PortMapping's identity, labels and annotations, drops what only the API server
/// sets, and the transition times a preview cannot know.
fn strip_server_fields(value: &mut serde_json::Value) {
    if let Some(meta) = value
        .get_mut("metadata")
        .and_then(serde_json::Value::as_object_mut)
    {
        meta.retain(|k, _| matches!(k.as_str(), "name" | "namespace" | "labels" | "annotations"));
    }
    if let Some(conditions) = value
        .pointer_mut("/status/conditions")
        .and_then(serde_json::Value::as_array_mut)
    {
        for c in conditions.iter_mut().filter_map(|c| c.as_object_mut()) {
            c.remove("lastTransitionTime");
        }
    }
}

fn endpoints_cell(slice: &EndpointSlice) -> String {
    if slice.endpoints.is_empty() {
        return "<none>".to_owned();
    }
    slice
        .endpoints
        .iter()
        .map(|e| {
            let address = e.addresses.first().cloned().unwrap_or_default();
            let pod = e
                .target_ref
                .as_ref()
                .and_then(|r| r.name.clone())
                .unwrap_or_default();
            let ready = e.conditions.as_ref().and_then(|c| c.ready) != Some(false);
            format!("{pod}={address}{}", if ready { "" } else { " (not ready)" })
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn table_one(out: &mut String, preview: &Preview, assume: &str) {
    let pm = &preview.port_mapping;
    let status = pm.status.clone().unwrap_or_default();
    let _ = writeln!(
        out,
        "PortMapping {}/{} → Service {}",
        pm.namespace().unwrap_or_default(),
        pm.name_any(),
        pm.spec.service_ref.name
    );
    for c in &status.conditions {
        let _ = writeln!(
            out,
            "  {}={} {}: {}",
            c.type_, c.status, c.reason, c.message
        );
    }
    if preview.assumed > 0 {
        let _ = writeln!(
            out,
            "  {} network check results ASSUMED {assume} (not probed)",
            preview.assumed
        );
    }
    for note in &preview.notes {
        let _ = writeln!(out, "  note: {note}");
    }
    if !preview.slices.is_empty() {
        out.push('\n');
        out.push_str(&indent(&slices_table(&preview.slices)));
    }
    if let Some(endpoints) = &preview.endpoints {
        let addresses: usize = endpoints
            .subsets
            .iter()
            .flatten()
            .map(|s| s.addresses.as_ref().map_or(0, Vec::len))
            .sum();
        let _ = writeln!(
            out,
            "\n  Endpoints {} (legacy): {addresses} ready addresses",
            endpoints.name_any()
        );
    }
    if !status.ports.is_empty() {
        out.push('\n');
        out.push_str(&indent(&ports_table(&status.ports)));
        for p in &status.ports {
            for e in &p.excluded {
                let _ = writeln!(out, "  {} excludes {}: {}", p.name, e.pod, e.reason);
            }
        }
    }
}

/// The slices, one row each: name, address type, port numbers, endpoints.
fn slices_table(slices: &[EndpointSlice]) -> String {
    let mut rows = vec![
        ["ENDPOINTSLICE", "ADDRESSTYPE", "PORTS", "ENDPOINTS"]
            .map(String::from)
            .to_vec(),
    ];
    for slice in slices {
        let port = slice
            .ports
            .iter()
            .flatten()
            .filter_map(|p| p.port)
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(",");
        rows.push(vec![
            slice.name_any(),
            slice.address_type.clone(),
            if port.is_empty() { "-".into() } else { port },
            endpoints_cell(slice),
        ]);
    }
    crate::commands::text_table::columns(&rows, 3)
}

/// The per-port counts of the status, one row per port.
fn ports_table(ports: &[PortStatus]) -> String {
    let mut rows = vec![
        [
            "PORT",
            "NUMBER",
            "READY",
            "NOT-READY",
            "CANDIDATES",
            "EXCLUDED",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for p in ports {
        rows.push(vec![
            if p.name.is_empty() {
                "-".into()
            } else {
                p.name.clone()
            },
            p.port.to_string(),
            p.ready.to_string(),
            p.not_ready.to_string(),
            p.candidates.to_string(),
            p.excluded_total.to_string(),
        ]);
    }
    crate::commands::text_table::columns(&rows, 3)
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

/// A readable summary: per PortMapping its conditions, slices with their endpoints, and per-port
/// counts with the reason for every excluded pod.
pub fn table(rendered: &Rendered) -> String {
    let mut out = String::new();
    for (i, preview) in rendered.previews.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        table_one(&mut out, preview, rendered.assume.as_str());
    }
    if rendered.previews.is_empty() {
        out.push_str("no PortMapping in the input\n");
    }
    out
}
