//! `portmapper status NAME`: the pods × ports membership matrix of a live PortMapping, per IP
//! family, read from its status and its EndpointSlices (also `kubectl portmapper status`).
//!
//! The slices say what is published (and whether each endpoint is ready, serving or
//! terminating); the status says why candidates are left out (`excluded`) and which published
//! pods are only kept because a check abstained (`kept`). Where neither tells, the cell says
//! so (`?`) instead of guessing. [`matrix`] is pure; [`print`] turns it into a table or JSON;
//! [`live`] reads the objects through the kubeconfig, once or on every change (`--watch`).
//!
//! Exit codes: 0 printed (or `--watch` stopped by Ctrl-C, or by its reader closing the pipe);
//! 1 the kubeconfig, the API (not found, forbidden, unreachable) or the output failed; 2 usage
//! (from clap).

pub mod live;
pub mod print;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use portmapper_api::{PortMapping, PortMappingStatus, PortStatus};
use serde::Serialize;

pub use live::{StatusError, main, run};
pub use print::{LEGEND, json, table};

/// Label our slices carry (`endpointslice.kubernetes.io/managed-by`).
pub(crate) use portmapper_core::ownership::LABEL_MANAGED_BY as MANAGED_BY;
/// Label naming the Service of a slice.
pub(crate) use portmapper_core::ownership::LABEL_SERVICE_NAME as SERVICE_NAME;
/// `schema` of the JSON output; bumped on any incompatible change of its shape.
pub const JSON_SCHEMA: &str = "portmapper.dev/status/v1";

/// What `portmapper status` shows (built from its flags by the command line, `cli/mod.rs`).
#[derive(Debug, Clone)]
pub struct StatusOptions {
    /// The PortMapping.
    pub name: String,
    /// Namespace (None: the kubeconfig context's namespace, else `default`).
    pub namespace: Option<String>,
    /// Print again on every change of the PortMapping, its Service or its slices.
    pub watch: bool,
    /// Output format.
    pub output: Output,
    /// Kubeconfig file (None: `$KUBECONFIG`, else `~/.kube/config`, else in-cluster).
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (None: the current context).
    pub context: Option<String>,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// One matrix per IP family, reasons below it.
    Table,
    /// The documented machine-readable shape (docs/status.md).
    Json,
}

/// What one pod is on one port in one family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum State {
    /// Published, ready.
    Ready,
    /// Published, not ready (and not terminating); `serving` says whether it still serves.
    NotReady,
    /// Published and terminating (draining).
    Terminating,
    /// Published only because a check abstained and it was already published.
    Kept,
    /// A candidate left out, with the reason.
    Excluded,
    /// Not published and not listed as excluded while the list is complete: not a candidate
    /// (the pod does not resolve the port's target, or has no address of the family).
    NotCandidate,
    /// The view cannot tell (the reason says why).
    Unknown,
}

impl State {
    /// The table's mark.
    pub fn mark(self) -> &'static str {
        match self {
            Self::Ready => "✔",
            Self::NotReady => "◐",
            Self::Terminating => "↓",
            Self::Kept => "~",
            Self::Excluded => "✘",
            Self::NotCandidate => "-",
            Self::Unknown => "?",
        }
    }
}

/// One cell of the matrix.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cell {
    /// Service port (column) name.
    pub port: String,
    /// What the pod is there.
    pub state: State,
    /// The endpoint's `ready` condition, when published.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// The endpoint's `serving` condition, when published.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serving: Option<bool>,
    /// The endpoint's `terminating` condition, when published.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminating: Option<bool>,
    /// Why (excluded, kept, unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One row: a pod and its cells, in column order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// Pod name (from the endpoint's `targetRef`, or the status).
    pub pod: String,
    /// One cell per port, in column order.
    pub ports: Vec<Cell>,
}

/// The matrix of one IP family.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Family {
    /// `IPv4` or `IPv6`.
    pub family: String,
    /// Rows sorted by pod name.
    pub pods: Vec<Row>,
}

/// A column: one Service port, with the status's counts for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Column {
    /// Port name (the number for an unnamed port, `(portless)` for a headless Service without
    /// ports).
    pub name: String,
    /// Port number (none when portless).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// `status.ports[].ready`/`notReady`/`candidates`, when the status has the port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<i32>,
    /// See `ready`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_ready: Option<i32>,
    /// See `ready`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidates: Option<i32>,
    /// Excluded pods the status lists / counts (the list is bounded, the count is not).
    pub excluded_listed: usize,
    /// See `excluded_listed`.
    pub excluded_total: i32,
    /// Kept pods the status lists / counts.
    pub kept_listed: usize,
    /// See `kept_listed`.
    pub kept_total: i32,
}

impl Column {
    fn excluded_truncated(&self) -> bool {
        usize::try_from(self.excluded_total).unwrap_or(usize::MAX) > self.excluded_listed
    }

    fn kept_truncated(&self) -> bool {
        usize::try_from(self.kept_total).unwrap_or(usize::MAX) > self.kept_listed
    }
}

/// A condition of the PortMapping.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionView {
    /// `Ready`, `Reconciling`, `Stalled`, …
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Reason.
    pub reason: String,
    /// Message.
    pub message: String,
}

/// Everything `portmapper status` prints.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct View {
    /// [`JSON_SCHEMA`].
    pub schema: &'static str,
    /// Namespace.
    pub namespace: String,
    /// PortMapping name.
    pub name: String,
    /// Service name.
    pub service: String,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `status.observedGeneration`.
    pub observed_generation: Option<i64>,
    /// Status conditions, as stored.
    pub conditions: Vec<ConditionView>,
    /// Columns.
    pub ports: Vec<Column>,
    /// One matrix per family, primary first.
    pub families: Vec<Family>,
    /// What the reader should know about the data (stale status, truncated lists, foreign
    /// slices).
    pub notes: Vec<String>,
}

/// One endpoint's conditions, as published.
#[derive(Clone, Copy, Debug)]
struct Published {
    ready: Option<bool>,
    serving: Option<bool>,
    terminating: Option<bool>,
}

/// The Service's families as the planner derives them ([`portmapper_core::service_families`]),
/// by address type.
fn service_families(service: &Service) -> Vec<String> {
    portmapper_core::service_families(service)
        .into_iter()
        .map(|f| f.as_str().to_owned())
        .collect()
}

/// The pure part: the matrix from the PortMapping (spec, status), its Service (columns,
/// families) and the slices (already filtered to the Service by label; slices controlled by
/// another object are left out with a note).
pub fn matrix(pm: &PortMapping, service: &Service, slices: &[EndpointSlice]) -> View {
    let status = pm.status.clone().unwrap_or_default();
    let generation = pm.metadata.generation;
    let mut notes: Vec<String> = status_note(pm, &status).into_iter().collect();
    let columns = columns(service, &status);
    // Families: the Service's, then any a slice still publishes.
    let mut families = service_families(service);
    let published = published(pm, slices, &columns, &mut families, &mut notes);
    // Rows: every pod a slice publishes or the status names.
    let mut pods: BTreeSet<String> = published.values().flat_map(|m| m.keys().cloned()).collect();
    for p in &status.ports {
        pods.extend(p.excluded.iter().map(|e| e.pod.clone()));
        pods.extend(p.kept.iter().map(|e| e.pod.clone()));
    }
    let families_out: Vec<Family> = families
        .iter()
        .map(|family| Family {
            family: family.clone(),
            pods: pods
                .iter()
                .map(|pod| row(pod, family, &families, &columns, &published, &status))
                .collect(),
        })
        .collect();
    notes.extend(columns.iter().flat_map(|(_, col)| truncation_notes(col)));
    notes.extend(local_policy_note(pm, service, slices));
    View {
        schema: JSON_SCHEMA,
        namespace: pm.namespace().unwrap_or_default(),
        name: pm.name_any(),
        service: pm.spec.service_ref.name.clone(),
        generation,
        observed_generation: status.observed_generation,
        conditions: status
            .conditions
            .iter()
            .map(|c| ConditionView {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
            .collect(),
        ports: columns.into_iter().map(|(_, c)| c).collect(),
        families: families_out,
        notes,
    }
}

/// What the reader should know about the status itself: missing, or behind the spec.
fn status_note(pm: &PortMapping, status: &PortMappingStatus) -> Option<String> {
    let generation = pm.metadata.generation;
    if pm.status.is_none() {
        return Some(
            "the PortMapping has no status yet: is the operator running? Cells the slices do \
             not decide show ?"
                .to_owned(),
        );
    }
    (status.observed_generation != generation).then(|| {
        format!(
            "the status describes generation {} but the spec is at generation {}: the operator \
             has not caught up yet",
            opt(status.observed_generation),
            opt(generation)
        )
    })
}

/// The status port named `name`.
fn status_port<'s>(status: &'s PortMappingStatus, name: &str) -> Option<&'s PortStatus> {
    status.ports.iter().find(|p| p.name == name)
}

/// Columns: the Service's ports by name (key), in the Service's order; a headless Service
/// without ports gets portless slices.
fn columns(service: &Service, status: &PortMappingStatus) -> Vec<(String, Column)> {
    let service_ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .unwrap_or_default();
    let mut columns: Vec<(String, Column)> = Vec::new();
    for sp in &service_ports {
        let key = sp.name.clone().unwrap_or_default();
        let label = if key.is_empty() {
            sp.port.to_string()
        } else {
            key.clone()
        };
        let port = status_port(status, sp.name.as_deref().unwrap_or_default());
        columns.push((key, column(label, Some(sp.port), port)));
    }
    if service_ports.is_empty() {
        columns.push((String::new(), column("(portless)".into(), None, None)));
    }
    columns
}

/// (family, port key) → pod → conditions, as our slices publish them; adds the families a
/// slice still publishes, and notes slices of other owners and ports the Service lacks.
fn published(
    pm: &PortMapping,
    slices: &[EndpointSlice],
    columns: &[(String, Column)],
    families: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> BTreeMap<(String, String), BTreeMap<String, Published>> {
    let uid = pm.metadata.uid.as_deref().unwrap_or_default();
    let mut foreign = 0usize;
    let mut published: BTreeMap<(String, String), BTreeMap<String, Published>> = BTreeMap::new();
    for slice in slices {
        if portmapper_core::ownership::controlled_by_another(&slice.metadata, uid) {
            foreign += 1;
            continue;
        }
        let family = slice.address_type.clone();
        if !families.contains(&family) {
            families.push(family.clone());
        }
        // Every port the slice lists is a column it publishes (a port-set slice lists
        // several); a slice without ports stands for the portless pseudo-port.
        let mut port_keys: Vec<String> = slice
            .ports
            .iter()
            .flatten()
            .map(|p| p.name.clone().unwrap_or_default())
            .collect();
        if port_keys.is_empty() {
            port_keys.push(String::new());
        }
        for port_key in port_keys {
            if !columns.iter().any(|(k, _)| *k == port_key) {
                notes.push(format!(
                    "slice {} publishes port {:?}, which the Service does not have (a stale \
                     slice the operator will delete)",
                    slice.name_any(),
                    port_key
                ));
                continue;
            }
            let pods = published.entry((family.clone(), port_key)).or_default();
            pods.extend(slice.endpoints.iter().map(endpoint_published));
        }
    }
    if foreign > 0 {
        notes.push(format!(
            "{foreign} slice(s) of Service {} are controlled by another object (another \
             PortMapping publishing it?) and are not shown",
            pm.spec.service_ref.name
        ));
    }
    published
}

/// An endpoint's pod (or its addresses) and conditions.
fn endpoint_published(e: &k8s_openapi::api::discovery::v1::Endpoint) -> (String, Published) {
    let pod = e
        .target_ref
        .as_ref()
        .and_then(|t| t.name.clone())
        .unwrap_or_else(|| format!("<{}>", e.addresses.join(",")));
    let c = e.conditions.as_ref();
    let published = Published {
        ready: c.and_then(|c| c.ready),
        serving: c.and_then(|c| c.serving),
        terminating: c.and_then(|c| c.terminating),
    };
    (pod, published)
}

/// One pod's row in `family`'s matrix.
fn row(
    pod: &str,
    family: &str,
    families: &[String],
    columns: &[(String, Column)],
    published: &BTreeMap<(String, String), BTreeMap<String, Published>>,
    status: &PortMappingStatus,
) -> Row {
    let at = |family: &str, key: &str| {
        published
            .get(&(family.to_owned(), key.to_owned()))
            .and_then(|m| m.get(pod))
    };
    Row {
        pod: pod.to_owned(),
        ports: columns
            .iter()
            .map(|(key, col)| {
                let here = at(family, key).copied();
                let elsewhere: Vec<&str> = families
                    .iter()
                    .filter(|f| *f != family)
                    .filter(|f| at(f, key).is_some())
                    .map(String::as_str)
                    .collect();
                cell(col, status_port(status, key), pod, here, &elsewhere)
            })
            .collect(),
    }
}

/// Notes on a column whose status lists were cut short.
fn truncation_notes(col: &Column) -> Vec<String> {
    let mut notes = Vec::new();
    if col.excluded_truncated() {
        notes.push(format!(
            "{}: the status lists {} of {} excluded pods; the others show ? (not published, \
             reason not listed)",
            col.name, col.excluded_listed, col.excluded_total
        ));
    }
    if col.kept_truncated() {
        notes.push(format!(
            "{}: the status lists {} of {} kept pods; the others show as published",
            col.name, col.kept_listed, col.kept_total
        ));
    }
    notes
}

/// The `externalTrafficPolicy: Local` caveat, read from the published slices themselves: which
/// nodes pass the load balancer's health check without local members of a port.
fn local_policy_note(
    pm: &PortMapping,
    service: &Service,
    slices: &[EndpointSlice],
) -> Option<String> {
    use portmapper_core::compact_slice::CompactSlice;
    use portmapper_core::consumers::{local_policy_caveat, port_ready_nodes, routes_locally};
    if !routes_locally(service) {
        return None;
    }
    let uid = pm.metadata.uid.as_deref().unwrap_or_default();
    let ours: Vec<CompactSlice> = slices
        .iter()
        .filter(|s| !portmapper_core::ownership::controlled_by_another(&s.metadata, uid))
        .map(|s| s.clone().into())
        .collect();
    local_policy_caveat(&service.name_any(), &port_ready_nodes(&ours)).map(|c| c.to_string())
}

fn column(name: String, port: Option<i32>, status: Option<&PortStatus>) -> Column {
    Column {
        name,
        port,
        ready: status.map(|s| s.ready),
        not_ready: status.map(|s| s.not_ready),
        candidates: status.map(|s| s.candidates),
        excluded_listed: status.map_or(0, |s| s.excluded.len()),
        excluded_total: status.map_or(0, |s| s.excluded_total),
        kept_listed: status.map_or(0, |s| s.kept.len()),
        kept_total: status.map_or(0, |s| s.kept_total),
    }
}

/// One cell: the slices decide whether the pod is published; the status says why it is not, or
/// that it is only kept. `elsewhere` = the other families publishing this pod on this port.
fn cell(
    col: &Column,
    status: Option<&PortStatus>,
    pod: &str,
    here: Option<Published>,
    elsewhere: &[&str],
) -> Cell {
    let excluded = status.and_then(|s| s.excluded.iter().find(|e| e.pod == pod));
    let kept = status.and_then(|s| s.kept.iter().find(|e| e.pod == pod));
    let mut out = Cell {
        port: col.name.clone(),
        state: State::Unknown,
        ready: None,
        serving: None,
        terminating: None,
        reason: None,
    };
    if let Some(p) = here {
        out.ready = p.ready;
        out.serving = p.serving;
        out.terminating = p.terminating;
        // A nil `ready` reads as ready, as kube-proxy reads it.
        let state = if p.terminating == Some(true) {
            State::Terminating
        } else if p.ready == Some(false) {
            State::NotReady
        } else {
            State::Ready
        };
        (out.state, out.reason) = match (excluded, kept) {
            // The slices and the status disagree: one of them is older than the other.
            (Some(e), _) => (
                State::Unknown,
                Some(format!(
                    "published, but the status excludes it ({}): the status or the slices are \
                     not up to date yet",
                    e.reason
                )),
            ),
            (None, Some(k)) => (State::Kept, Some(k.reason.clone())),
            (None, None) => (state, None),
        };
        return out;
    }
    (out.state, out.reason) = match (status, excluded) {
        (_, Some(e)) => (State::Excluded, Some(e.reason.clone())),
        (None, None) => (
            State::Unknown,
            Some("not published; the status has no entry for this port".to_owned()),
        ),
        // The status merges families: a pod published in one is never listed as excluded.
        (Some(_), None) if !elsewhere.is_empty() => (
            State::Unknown,
            Some(format!(
                "published on {} only; the status does not say why not here",
                elsewhere.join(", ")
            )),
        ),
        (Some(_), None) if col.excluded_truncated() => (
            State::Unknown,
            Some(format!(
                "not published; the status lists {} of {} excluded pods",
                col.excluded_listed, col.excluded_total
            )),
        ),
        (Some(_), None) => (State::NotCandidate, None),
    };
    out
}

fn opt(n: Option<i64>) -> String {
    n.map_or_else(|| "-".to_owned(), |n| n.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::{Value, json};

    use super::live::{Changed, Live};
    use super::*;
    use kube::runtime::watcher;

    const UID: &str = "pm-uid";

    fn pm(status: Value) -> PortMapping {
        let mut v = json!({
            "apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
            "metadata": {"name": "web", "namespace": "ns", "uid": UID, "generation": 2},
            "spec": {"serviceRef": {"name": "web"}, "pods": {"key": "app"}},
        });
        if !status.is_null() {
            v["status"] = status;
        }
        serde_json::from_value(v).unwrap()
    }

    fn service(ports: Value, families: Option<Value>) -> Service {
        let mut v = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"ports": ports},
        });
        if let Some(f) = families {
            v["spec"]["ipFamilies"] = f;
        }
        serde_json::from_value(v).unwrap()
    }

    fn two_ports() -> Service {
        service(
            json!([{"name": "https", "port": 443}, {"name": "http", "port": 80}]),
            None,
        )
    }

    /// `endpoints`: (pod, ready, serving, terminating).
    fn slice(
        name: &str,
        family: &str,
        port: &str,
        owner: &str,
        endpoints: &[(&str, bool, bool, bool)],
    ) -> EndpointSlice {
        serde_json::from_value(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": "ns", "ownerReferences": [{
                "apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping", "name": "web",
                "uid": owner, "controller": true}]},
            "addressType": family,
            "ports": [{"name": port, "port": 8080}],
            "endpoints": endpoints.iter().enumerate().map(|(i, (pod, r, s, t))| json!({
                "addresses": [if family == "IPv6" { format!("fd00::{}", i + 1) } else { format!("10.0.0.{}", i + 1) }],
                "conditions": {"ready": r, "serving": s, "terminating": t},
                "targetRef": {"kind": "Pod", "name": pod, "namespace": "ns"},
            })).collect::<Vec<_>>(),
        }))
        .unwrap()
    }

    fn status(ports: Value) -> Value {
        json!({
            "observedGeneration": 2,
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "Published", "message": "ok",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Stalled", "status": "False", "reason": "Published", "message": "up to date",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"},
            ],
            "ports": ports,
        })
    }

    /// Pod → (state, reason) per column.
    type Cells = Vec<(String, Vec<(State, Option<String>)>)>;

    fn cells(view: &View, family: usize) -> Cells {
        view.families[family]
            .pods
            .iter()
            .map(|r| {
                (
                    r.pod.clone(),
                    r.ports
                        .iter()
                        .map(|c| (c.state, c.reason.clone()))
                        .collect(),
                )
            })
            .collect()
    }

    fn marks(view: &View, family: usize) -> Vec<String> {
        view.families[family]
            .pods
            .iter()
            .map(|r| {
                let m: String = r.ports.iter().map(|c| c.state.mark()).collect();
                format!("{} {m}", r.pod)
            })
            .collect()
    }

    #[test]
    fn published_excluded_and_not_candidate_in_service_port_order() {
        let pm = pm(status(json!([
            {"name": "https", "port": 443, "ready": 1, "notReady": 0, "candidates": 2,
             "excluded": [{"pod": "pod-a", "reason": "portNames: not listed"}], "excludedTotal": 1},
            {"name": "http", "port": 80, "ready": 1, "notReady": 0, "candidates": 1},
        ])));
        let slices = [
            slice(
                "web.http",
                "IPv4",
                "http",
                UID,
                &[("pod-a", true, true, false)],
            ),
            slice(
                "web.https",
                "IPv4",
                "https",
                UID,
                &[("pod-b", true, true, false)],
            ),
        ];
        let view = matrix(&pm, &two_ports(), &slices);
        let names: Vec<&str> = view.ports.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["https", "http"], "the Service's order");
        assert_eq!(view.families.len(), 1);
        assert_eq!(view.families[0].family, "IPv4");
        assert_eq!(
            cells(&view, 0),
            vec![
                (
                    "pod-a".to_owned(),
                    vec![
                        (State::Excluded, Some("portNames: not listed".to_owned())),
                        (State::Ready, None)
                    ]
                ),
                (
                    "pod-b".to_owned(),
                    // http's excluded list is complete and empty: pod-b is no candidate there.
                    vec![(State::Ready, None), (State::NotCandidate, None)]
                ),
            ]
        );
        assert!(view.notes.is_empty(), "{:?}", view.notes);
    }

    #[test]
    fn a_port_set_slice_publishes_its_pods_on_every_port_it_lists() {
        let pm = pm(status(json!([
            {"name": "https", "port": 443, "ready": 2, "notReady": 0, "candidates": 2},
            {"name": "http", "port": 80, "ready": 1, "notReady": 0, "candidates": 1},
        ])));
        let mut both = slice(
            "web.http-https.bcdfghjklm",
            "IPv4",
            "http",
            UID,
            &[("pod-a", true, true, false)],
        );
        both.ports
            .get_or_insert_default()
            .push(serde_json::from_value(json!({"name": "https", "port": 8443})).unwrap());
        let only_https = slice(
            "web.https.bcdfghjkln",
            "IPv4",
            "https",
            UID,
            &[("pod-b", true, true, false)],
        );
        let view = matrix(&pm, &two_ports(), &[both, only_https]);
        assert_eq!(marks(&view, 0), ["pod-a ✔✔", "pod-b ✔-"]);
        assert!(view.notes.is_empty(), "{:?}", view.notes);
    }

    #[test]
    fn not_ready_terminating_and_kept_have_their_own_marks() {
        let pm = pm(status(json!([
            {"name": "http", "port": 80, "ready": 2, "notReady": 2, "candidates": 4,
             "kept": [{"pod": "pod-c", "reason": "httpGet: no verdict yet (no route)"}], "keptTotal": 1},
        ])));
        let svc = service(json!([{"name": "http", "port": 80}]), None);
        let slices = [slice(
            "web.http",
            "IPv4",
            "http",
            UID,
            &[
                ("pod-d", false, true, true),
                ("pod-b", false, false, false),
                ("pod-c", true, true, false),
                ("pod-a", true, true, false),
            ],
        )];
        let view = matrix(&pm, &svc, &slices);
        assert_eq!(
            marks(&view, 0),
            ["pod-a ✔", "pod-b ◐", "pod-c ~", "pod-d ↓"]
        );
        let c = &view.families[0].pods[2].ports[0];
        assert_eq!(
            c.reason.as_deref(),
            Some("httpGet: no verdict yet (no route)")
        );
        let d = &view.families[0].pods[3].ports[0];
        assert_eq!(
            (d.ready, d.serving, d.terminating),
            (Some(false), Some(true), Some(true))
        );
    }

    #[test]
    fn a_truncated_excluded_list_makes_unlisted_pods_unknown_and_says_so() {
        let pm = pm(status(json!([
            {"name": "http", "port": 80, "ready": 1, "notReady": 0, "candidates": 23,
             "excluded": [{"pod": "pod-b", "reason": "podReady: not ready"}], "excludedTotal": 22},
            {"name": "https", "port": 443, "ready": 1, "notReady": 0, "candidates": 1},
        ])));
        let slices = [
            slice(
                "web.http",
                "IPv4",
                "http",
                UID,
                &[("pod-a", true, true, false)],
            ),
            slice(
                "web.https",
                "IPv4",
                "https",
                UID,
                &[("pod-c", true, true, false)],
            ),
        ];
        let view = matrix(&pm, &two_ports(), &slices);
        // Columns: https, http.
        assert_eq!(marks(&view, 0), ["pod-a -✔", "pod-b -✘", "pod-c ✔?"]);
        assert_eq!(
            view.families[0].pods[2].ports[1].reason.as_deref(),
            Some("not published; the status lists 1 of 22 excluded pods")
        );
        assert_eq!(
            view.notes,
            [
                "http: the status lists 1 of 22 excluded pods; the others show ? (not published, \
              reason not listed)"
            ]
        );
    }

    /// The planner's families: a family listed twice is one matrix, and without `ipFamilies`
    /// the first of `clusterIPs` decides (this view once read only `clusterIP`, and listed
    /// `ipFamilies` as written).
    #[test]
    fn families_are_the_planners_deduplicated_and_read_from_cluster_ips() {
        let pm = pm(Value::Null);
        let twice = service(
            json!([{"name": "http", "port": 80}]),
            Some(json!(["IPv6", "IPv6"])),
        );
        let families = |view: &View| -> Vec<String> {
            view.families.iter().map(|f| f.family.clone()).collect()
        };
        assert_eq!(families(&matrix(&pm, &twice, &[])), ["IPv6"]);
        let mut by_ips = service(json!([{"name": "http", "port": 80}]), None);
        by_ips.spec.as_mut().unwrap().cluster_ips = Some(vec!["fd00::10".into()]);
        assert_eq!(families(&matrix(&pm, &by_ips, &[])), ["IPv6"]);
    }

    #[test]
    fn dual_stack_has_one_matrix_per_family_and_cannot_tell_a_missing_family() {
        let pm = pm(status(json!([
            {"name": "http", "port": 80, "ready": 2, "notReady": 0, "candidates": 2},
        ])));
        let svc = service(
            json!([{"name": "http", "port": 80}]),
            Some(json!(["IPv6", "IPv4"])),
        );
        let slices = [
            slice(
                "web.http",
                "IPv4",
                "http",
                UID,
                &[("pod-a", true, true, false), ("pod-b", true, true, false)],
            ),
            slice(
                "web.http.v6",
                "IPv6",
                "http",
                UID,
                &[("pod-a", true, true, false)],
            ),
        ];
        let view = matrix(&pm, &svc, &slices);
        let families: Vec<&str> = view.families.iter().map(|f| f.family.as_str()).collect();
        assert_eq!(families, ["IPv6", "IPv4"], "primary first");
        assert_eq!(marks(&view, 0), ["pod-a ✔", "pod-b ?"]);
        assert_eq!(
            view.families[0].pods[1].ports[0].reason.as_deref(),
            Some("published on IPv4 only; the status does not say why not here")
        );
        assert_eq!(marks(&view, 1), ["pod-a ✔", "pod-b ✔"]);
    }

    #[test]
    fn stale_status_foreign_slices_and_disagreement_are_reported() {
        let mut st = status(json!([
            {"name": "http", "port": 80, "ready": 0, "notReady": 0, "candidates": 1,
             "excluded": [{"pod": "pod-a", "reason": "podReady: not ready"}], "excludedTotal": 1},
        ]));
        st["observedGeneration"] = json!(1);
        let pm = pm(st);
        let svc = service(json!([{"name": "http", "port": 80}]), None);
        let slices = [
            slice(
                "web.http",
                "IPv4",
                "http",
                UID,
                &[("pod-a", true, true, false)],
            ),
            slice(
                "other.http",
                "IPv4",
                "http",
                "other-uid",
                &[("pod-z", true, true, false)],
            ),
        ];
        let view = matrix(&pm, &svc, &slices);
        assert_eq!(marks(&view, 0), ["pod-a ?"], "pod-z is another owner's");
        assert!(
            view.families[0].pods[0].ports[0]
                .reason
                .as_deref()
                .unwrap()
                .starts_with("published, but the status excludes it (podReady: not ready)")
        );
        assert_eq!(view.notes.len(), 2, "{:?}", view.notes);
        assert!(
            view.notes[0]
                .starts_with("the status describes generation 1 but the spec is at generation 2")
        );
        assert!(
            view.notes[1].starts_with("1 slice(s) of Service web are controlled by another object")
        );
    }

    #[test]
    fn without_status_only_the_slices_decide() {
        let pm = pm(Value::Null);
        let svc = service(json!([{"port": 80}]), None);
        let slices = [slice(
            "web.80",
            "IPv4",
            "",
            UID,
            &[("pod-a", true, true, false)],
        )];
        let view = matrix(&pm, &svc, &slices);
        assert_eq!(view.ports[0].name, "80", "an unnamed port shows its number");
        assert_eq!(marks(&view, 0), ["pod-a ✔"]);
        assert!(view.notes[0].starts_with("the PortMapping has no status yet"));
        let text = table(&view);
        assert!(text.contains("Conditions: none\n"), "{text}");
        assert!(text.contains("Ready/candidates: 80 -\n"), "{text}");
    }

    #[test]
    fn a_local_traffic_policy_notes_the_nodes_without_members_of_a_port() {
        let mut svc = two_ports();
        let spec = svc.spec.as_mut().unwrap();
        spec.type_ = Some("LoadBalancer".into());
        spec.external_traffic_policy = Some("Local".into());
        let mut http = slice(
            "web.http",
            "IPv4",
            "http",
            UID,
            &[("a", true, true, false), ("b", true, true, false)],
        );
        let mut https = slice(
            "web.https",
            "IPv4",
            "https",
            UID,
            &[("b", true, true, false)],
        );
        for (s, nodes) in [
            (&mut http, ["node-a", "node-b"]),
            (&mut https, ["node-b", ""]),
        ] {
            for (e, node) in s.endpoints.iter_mut().zip(nodes) {
                e.node_name = Some(node.into());
            }
        }
        let view = matrix(&pm(status(json!([]))), &svc, &[http.clone(), https.clone()]);
        let note = view
            .notes
            .iter()
            .find(|n| n.contains("externalTrafficPolicy: Local"));
        assert!(
            note.is_some_and(|n| n.contains("port https on 1 node(s): node-a")),
            "{:?}",
            view.notes
        );
        // The same slices behind a Cluster policy: nothing to say.
        svc.spec.as_mut().unwrap().external_traffic_policy = Some("Cluster".into());
        let view = matrix(&pm(status(json!([]))), &svc, &[http, https]);
        assert!(
            !view
                .notes
                .iter()
                .any(|n| n.contains("externalTrafficPolicy")),
            "{:?}",
            view.notes
        );
    }

    #[test]
    fn the_table_prints_header_conditions_matrix_reasons_and_legend() {
        let mut st = status(json!([
            {"name": "https", "port": 443, "ready": 1, "notReady": 0, "candidates": 2,
             "excluded": [{"pod": "pod-a", "reason": "portNames: not listed"}], "excludedTotal": 1},
            {"name": "http", "port": 80, "ready": 1, "notReady": 0, "candidates": 1},
        ]));
        st["conditions"][1] = json!({"type": "Stalled", "status": "True", "reason": "InvalidSpec",
            "message": "spec.ports[0]: no such port", "lastTransitionTime": "2026-01-01T00:00:00Z"});
        let pm = pm(st);
        let slices = [
            slice(
                "web.http",
                "IPv4",
                "http",
                UID,
                &[("pod-a", true, true, false)],
            ),
            slice(
                "web.https",
                "IPv4",
                "https",
                UID,
                &[("pod-b", true, true, false)],
            ),
        ];
        let text = table(&matrix(&pm, &two_ports(), &slices));
        let expected = "\
PortMapping ns/web  Service web  generation 2  observedGeneration 2
Conditions: Ready=True (Published)  Stalled=True (InvalidSpec)
  Stalled: spec.ports[0]: no such port
Ready/candidates: https 1/2, http 1/1

IPv4   https  http
pod-a  ✘      ✔
pod-b  ✔      -
  ✘ pod-a https: portNames: not listed

"
        .to_owned()
            + LEGEND
            + "\n";
        assert_eq!(text, expected);
    }

    #[test]
    fn the_json_shape_is_stable() {
        let pm = pm(status(json!([
            {"name": "http", "port": 80, "ready": 1, "notReady": 0, "candidates": 2,
             "excluded": [{"pod": "pod-b", "reason": "podReady: not ready"}], "excludedTotal": 1},
        ])));
        let svc = service(json!([{"name": "http", "port": 80}]), None);
        let slices = [slice(
            "web.http",
            "IPv4",
            "http",
            UID,
            &[("pod-a", true, true, false)],
        )];
        let view = matrix(&pm, &svc, &slices);
        let value: Value = serde_json::from_str(&json(&view, true).unwrap()).unwrap();
        assert_eq!(
            value,
            json!({
                "schema": "portmapper.dev/status/v1",
                "namespace": "ns", "name": "web", "service": "web",
                "generation": 2, "observedGeneration": 2,
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "Published", "message": "ok"},
                    {"type": "Stalled", "status": "False", "reason": "Published", "message": "up to date"},
                ],
                "ports": [{"name": "http", "port": 80, "ready": 1, "notReady": 0, "candidates": 2,
                           "excludedListed": 1, "excludedTotal": 1, "keptListed": 0, "keptTotal": 0}],
                "families": [{"family": "IPv4", "pods": [
                    {"pod": "pod-a", "ports": [{"port": "http", "state": "ready",
                        "ready": true, "serving": true, "terminating": false}]},
                    {"pod": "pod-b", "ports": [{"port": "http", "state": "excluded",
                        "reason": "podReady: not ready"}]},
                ]}],
                "notes": [],
            })
        );
        assert!(
            !json(&view, true).unwrap().trim_end().contains('\n'),
            "one line per frame"
        );
    }

    fn synced_live() -> Live {
        let mut live = Live::default();
        let svc = service(json!([{"name": "http", "port": 80}]), None);
        for e in [
            Changed::PortMapping(watcher::Event::InitApply(pm(Value::Null))),
            Changed::PortMapping(watcher::Event::InitDone),
            Changed::Service(watcher::Event::InitApply(svc)),
            Changed::Service(watcher::Event::InitDone),
            Changed::Slice(watcher::Event::InitApply(slice(
                "web.http",
                "IPv4",
                "http",
                UID,
                &[("pod-a", true, true, false)],
            ))),
            Changed::Slice(watcher::Event::InitDone),
        ] {
            live.apply(e);
        }
        live
    }

    fn frame(live: &Live) -> Option<String> {
        live.frame("ns", "web", Output::Json, true).unwrap()
    }

    #[test]
    fn watch_frames_wait_for_every_list_and_follow_deletes() {
        let mut live = Live::default();
        live.apply(Changed::PortMapping(watcher::Event::InitApply(pm(
            Value::Null,
        ))));
        live.apply(Changed::PortMapping(watcher::Event::InitDone));
        assert_eq!(
            frame(&live),
            None,
            "the Service and slice watches have not listed"
        );
        let mut live = synced_live();
        let first: Value = serde_json::from_str(&frame(&live).unwrap()).unwrap();
        assert_eq!(first["families"][0]["pods"][0]["pod"], "pod-a");
        live.apply(Changed::Slice(watcher::Event::Delete(slice(
            "web.http",
            "IPv4",
            "http",
            UID,
            &[],
        ))));
        let after: Value = serde_json::from_str(&frame(&live).unwrap()).unwrap();
        assert_eq!(after["families"][0]["pods"], json!([]));
        live.apply(Changed::Service(watcher::Event::Delete(two_ports())));
        assert_eq!(
            frame(&live).unwrap(),
            "Service ns/web not found; PortMapping web publishes nothing; waiting for it\n"
        );
        live.apply(Changed::PortMapping(watcher::Event::Delete(pm(
            Value::Null,
        ))));
        assert_eq!(
            frame(&live).unwrap(),
            "PortMapping ns/web not found (deleted?); waiting for it\n"
        );
    }

    #[test]
    fn a_relist_shows_the_old_state_until_it_completes() {
        let mut live = synced_live();
        let before = frame(&live).unwrap();
        live.apply(Changed::Slice(watcher::Event::Init));
        live.apply(Changed::PortMapping(watcher::Event::Init));
        assert_eq!(
            frame(&live).unwrap(),
            before,
            "no half list, no transient not found"
        );
        live.apply(Changed::PortMapping(watcher::Event::InitDone));
        live.apply(Changed::Slice(watcher::Event::InitDone));
        // The relist found neither: the PortMapping is gone.
        assert_eq!(
            frame(&live).unwrap(),
            "PortMapping ns/web not found (deleted?); waiting for it\n"
        );
    }
}
