//! `portmapper status NAME`: the pods × ports membership matrix of a live PortMapping, per IP
//! family, read from its status and its EndpointSlices (also `kubectl portmapper status`).
//!
//! The slices say what is published (and whether each endpoint is ready, serving or
//! terminating); the status says why candidates are left out (`excluded`) and which published
//! pods are only kept because a check abstained (`kept`). Where neither tells, the cell says
//! so (`?`) instead of guessing. [`matrix`] is pure; [`table`] and [`json`] print it; [`run`]
//! reads the objects through the kubeconfig, once or on every change (`--watch`).
//!
//! Exit codes: 0 printed (or `--watch` stopped by Ctrl-C); 1 the kubeconfig, the API (not
//! found, forbidden, unreachable) or the output failed; 2 usage (from clap).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Config, ResourceExt};
use portmapper_api::{PortMapping, PortStatus};
use serde::Serialize;

/// Label our slices carry (`endpointslice.kubernetes.io/managed-by`).
const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
/// Label naming the Service of a slice.
const SERVICE_NAME: &str = "kubernetes.io/service-name";
/// `schema` of the JSON output; bumped on any incompatible change of its shape.
pub const JSON_SCHEMA: &str = "portmapper.dev/status/v1";

/// `portmapper status`.
#[derive(Debug, Args, Clone)]
pub struct StatusArgs {
    /// The PortMapping.
    pub name: String,
    /// Namespace (default: the kubeconfig context's namespace, else `default`).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Print again on every change of the PortMapping, its Service or its slices, until Ctrl-C.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Output format (`json` with `--watch`: one document per line).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Kubeconfig file (default: `$KUBECONFIG`, else `~/.kube/config`, else in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use (default: the current context).
    #[arg(long)]
    pub context: Option<String>,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
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

    /// Whether the slices publish the pod.
    pub fn is_published(self) -> bool {
        matches!(
            self,
            Self::Ready | Self::NotReady | Self::Terminating | Self::Kept
        )
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

/// The Service's families as the planner derives them: `spec.ipFamilies`, else the cluster
/// IP's family, else IPv4.
fn service_families(service: &Service) -> Vec<String> {
    let spec = service.spec.as_ref();
    if let Some(families) = spec
        .and_then(|s| s.ip_families.as_ref())
        .filter(|f| !f.is_empty())
    {
        return families.clone();
    }
    let cluster_ip = spec.and_then(|s| s.cluster_ip.as_deref());
    match cluster_ip.and_then(|ip| ip.parse::<std::net::IpAddr>().ok()) {
        Some(std::net::IpAddr::V6(_)) => vec!["IPv6".into()],
        _ => vec!["IPv4".into()],
    }
}

/// The pure part: the matrix from the PortMapping (spec, status), its Service (columns,
/// families) and the slices (already filtered to the Service by label; slices controlled by
/// another object are left out with a note).
pub fn matrix(pm: &PortMapping, service: &Service, slices: &[EndpointSlice]) -> View {
    let mut notes = Vec::new();
    let status = pm.status.clone().unwrap_or_default();
    let generation = pm.metadata.generation;
    if pm.status.is_none() {
        notes.push(
            "the PortMapping has no status yet: is the operator running? Cells the slices do \
             not decide show ?"
                .to_owned(),
        );
    } else if status.observed_generation != generation {
        notes.push(format!(
            "the status describes generation {} but the spec is at generation {}: the operator \
             has not caught up yet",
            opt(status.observed_generation),
            opt(generation)
        ));
    }

    // Columns: the Service's ports by name, in the Service's order.
    let service_ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .unwrap_or_default();
    let status_port =
        |name: &str| -> Option<&PortStatus> { status.ports.iter().find(|p| p.name == name) };
    let mut columns: Vec<(String, Column)> = Vec::new();
    for sp in &service_ports {
        let key = sp.name.clone().unwrap_or_default();
        let label = if key.is_empty() {
            sp.port.to_string()
        } else {
            key.clone()
        };
        columns.push((
            key,
            column(
                label,
                Some(sp.port),
                status_port(sp.name.as_deref().unwrap_or_default()),
            ),
        ));
    }
    if service_ports.is_empty() {
        // A headless Service without ports gets portless slices.
        columns.push((String::new(), column("(portless)".into(), None, None)));
    }

    // Families: the Service's, then any a slice still publishes.
    let mut families = service_families(service);
    let uid = pm.metadata.uid.as_deref();
    let mut foreign = 0usize;
    // (family, port key) → pod → conditions.
    let mut published: BTreeMap<(String, String), BTreeMap<String, Published>> = BTreeMap::new();
    for slice in slices {
        let controller = slice
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true));
        if controller.is_some_and(|o| Some(o.uid.as_str()) != uid) {
            foreign += 1;
            continue;
        }
        let family = slice.address_type.clone();
        if !families.contains(&family) {
            families.push(family.clone());
        }
        let port_key = slice
            .ports
            .iter()
            .flatten()
            .next()
            .and_then(|p| p.name.clone())
            .unwrap_or_default();
        if !columns.iter().any(|(k, _)| *k == port_key) {
            notes.push(format!(
                "slice {} publishes port {:?}, which the Service does not have (a stale slice \
                 the operator will delete)",
                slice.name_any(),
                port_key
            ));
            continue;
        }
        let pods = published.entry((family, port_key)).or_default();
        for e in &slice.endpoints {
            let pod = e
                .target_ref
                .as_ref()
                .and_then(|t| t.name.clone())
                .unwrap_or_else(|| format!("<{}>", e.addresses.join(",")));
            let c = e.conditions.as_ref();
            pods.insert(
                pod,
                Published {
                    ready: c.and_then(|c| c.ready),
                    serving: c.and_then(|c| c.serving),
                    terminating: c.and_then(|c| c.terminating),
                },
            );
        }
    }
    if foreign > 0 {
        notes.push(format!(
            "{foreign} slice(s) of Service {} are controlled by another object (another \
             PortMapping publishing it?) and are not shown",
            pm.spec.service_ref.name
        ));
    }

    // Rows: every pod a slice publishes or the status names.
    let mut pods: BTreeSet<String> = published.values().flat_map(|m| m.keys().cloned()).collect();
    for p in &status.ports {
        pods.extend(p.excluded.iter().map(|e| e.pod.clone()));
        pods.extend(p.kept.iter().map(|e| e.pod.clone()));
    }

    let empty = BTreeMap::new();
    let families_out: Vec<Family> = families
        .iter()
        .map(|family| Family {
            family: family.clone(),
            pods: pods
                .iter()
                .map(|pod| Row {
                    pod: pod.clone(),
                    ports: columns
                        .iter()
                        .map(|(key, col)| {
                            let here = published
                                .get(&(family.clone(), key.clone()))
                                .unwrap_or(&empty)
                                .get(pod)
                                .copied();
                            let elsewhere: Vec<&str> = families
                                .iter()
                                .filter(|f| *f != family)
                                .filter(|f| {
                                    published
                                        .get(&((*f).clone(), key.clone()))
                                        .is_some_and(|m| m.contains_key(pod))
                                })
                                .map(String::as_str)
                                .collect();
                            cell(col, status_port(key), pod, here, &elsewhere)
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect();

    for (_, col) in &columns {
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
    }

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

/// The first line: what, and whether the status is current.
fn header(view: &View) -> String {
    format!(
        "PortMapping {}/{}  Service {}  generation {}  observedGeneration {}",
        view.namespace,
        view.name,
        view.service,
        opt(view.generation),
        opt(view.observed_generation)
    )
}

/// `Ready=True (Published)  Stalled=False (…)`; messages of the conditions that need a look.
fn conditions_lines(view: &View) -> Vec<String> {
    if view.conditions.is_empty() {
        return vec!["Conditions: none".to_owned()];
    }
    let summary = view
        .conditions
        .iter()
        .map(|c| {
            if c.reason.is_empty() {
                format!("{}={}", c.type_, c.status)
            } else {
                format!("{}={} ({})", c.type_, c.status, c.reason)
            }
        })
        .collect::<Vec<_>>()
        .join("  ");
    let mut lines = vec![format!("Conditions: {summary}")];
    for c in &view.conditions {
        // Ready wants True; every other condition reports trouble (or work) when True.
        let attention = if c.type_ == portmapper_api::status::condition_types::READY {
            c.status != "True"
        } else {
            c.status == "True"
        };
        if attention && !c.message.is_empty() {
            lines.push(format!("  {}: {}", c.type_, c.message));
        }
    }
    lines
}

/// Left-aligned columns separated by two spaces (widths in characters: the marks are one wide).
fn columns_text(rows: &[Vec<String>]) -> String {
    let width = rows.iter().map(Vec::len).max().unwrap_or_default();
    let widths: Vec<usize> = (0..width)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or_default()
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            let pad = widths[i].saturating_sub(cell.chars().count());
            line.push_str(cell);
            line.extend(std::iter::repeat_n(' ', pad + 2));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// What each mark means (printed under the tables).
pub const LEGEND: &str = "✔ published ready  ◐ published not ready  ↓ published terminating  \
                          ~ kept (a check abstained)  ✘ excluded  - not a candidate  ? cannot tell";

/// The human-readable view.
pub fn table(view: &View) -> String {
    let mut out = String::new();
    out.push_str(&header(view));
    out.push('\n');
    for line in conditions_lines(view) {
        out.push_str(&line);
        out.push('\n');
    }
    let counts = view
        .ports
        .iter()
        .map(|c| match (c.ready, c.candidates) {
            (Some(r), Some(n)) => format!("{} {r}/{n}", c.name),
            _ => format!("{} -", c.name),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(out, "Ready/candidates: {counts}");
    for family in &view.families {
        out.push('\n');
        let mut rows = vec![
            std::iter::once(family.family.clone())
                .chain(view.ports.iter().map(|c| c.name.clone()))
                .collect::<Vec<_>>(),
        ];
        let mut reasons = Vec::new();
        for row in &family.pods {
            let mut line = vec![row.pod.clone()];
            for cell in &row.ports {
                line.push(cell.state.mark().to_owned());
                if let Some(reason) = &cell.reason {
                    reasons.push(format!(
                        "  {} {} {}: {reason}",
                        cell.state.mark(),
                        row.pod,
                        cell.port
                    ));
                }
            }
            rows.push(line);
        }
        if family.pods.is_empty() {
            rows.push(vec!["(no pods)".to_owned()]);
        }
        out.push_str(&columns_text(&rows));
        for r in reasons {
            out.push_str(&r);
            out.push('\n');
        }
    }
    if !view.notes.is_empty() {
        out.push('\n');
        for note in &view.notes {
            let _ = writeln!(out, "Note: {note}");
        }
    }
    out.push('\n');
    out.push_str(LEGEND);
    out.push('\n');
    out
}

/// The machine-readable view: pretty, or one line per document (for `--watch`).
pub fn json(view: &View, one_line: bool) -> Result<String, StatusError> {
    let text = if one_line {
        serde_json::to_string(view)
    } else {
        serde_json::to_string_pretty(view)
    };
    text.map(|t| t + "\n").map_err(StatusError::Encode)
}

/// Why `portmapper status` failed.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The kubeconfig could not be read or used.
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// The object does not exist.
    #[error("{kind} {namespace}/{name} not found{hint}")]
    NotFound {
        /// Kind.
        kind: &'static str,
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// What to check.
        hint: String,
    },
    /// The credentials may not read something.
    #[error("not allowed to {action}: {message}")]
    Forbidden {
        /// What was refused, e.g. `get portmappings in namespace default`.
        action: String,
        /// The API server's message.
        message: String,
    },
    /// Any other API failure.
    #[error("{action}: {source}")]
    Api {
        /// What we were doing.
        action: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// Encoding the JSON output failed.
    #[error("encoding the JSON output: {0}")]
    Encode(#[source] serde_json::Error),
    /// Writing the output failed.
    #[error("writing the output: {0}")]
    Output(#[from] std::io::Error),
}

/// What a 404 means for one read: (kind, namespace, name, hint).
type NotFound<'a> = (&'static str, &'a str, &'a str, &'a str);

/// Maps a client error for `action` to a clear message (`not_found`: what a 404 means).
fn api_error(err: kube::Error, action: String, not_found: Option<NotFound<'_>>) -> StatusError {
    match (err, not_found) {
        (kube::Error::Api(status), Some((kind, namespace, name, hint)))
            if status.is_not_found() =>
        {
            StatusError::NotFound {
                kind,
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                hint: hint.to_owned(),
            }
        }
        (kube::Error::Api(status), _) if status.is_forbidden() => StatusError::Forbidden {
            action,
            message: status.message.clone(),
        },
        (source, _) => StatusError::Api { action, source },
    }
}

/// A client for the kubeconfig (`--kubeconfig`, `$KUBECONFIG`, `~/.kube/config`, else
/// in-cluster) and `--context`, and the namespace to use.
async fn connect(args: &StatusArgs) -> Result<(Client, String), StatusError> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    let bad = |e: &dyn std::fmt::Display| StatusError::Kubeconfig(e.to_string());
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|e| StatusError::Kubeconfig(format!("{}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| StatusError::Kubeconfig(format!("{}: {e}", path.display())))?
        }
        None if args.context.is_some() => Config::from_kubeconfig(&options)
            .await
            .map_err(|e| bad(&e))?,
        None => Config::infer().await.map_err(|e| bad(&e))?,
    };
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = crate::client::plain(config, &crate::client::user_agent(Some("status")))
        .map_err(|e| StatusError::Kubeconfig(e.to_string()))?;
    Ok((client, namespace))
}

/// The three objects a view is made of, read once.
async fn read_once(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<(PortMapping, Service, Vec<EndpointSlice>), StatusError> {
    let pms: Api<PortMapping> = Api::namespaced(client.clone(), namespace);
    let pm = pms.get(name).await.map_err(|e| {
        api_error(
            e,
            format!("get portmappings.portmapper.dev {name} in namespace {namespace}"),
            Some((
                "PortMapping",
                namespace,
                name,
                " (check the name and the namespace: -n)",
            )),
        )
    })?;
    let svc_name = pm.spec.service_ref.name.clone();
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let hint = format!(" (PortMapping {name} names it in spec.serviceRef; nothing is published)");
    let service = services.get(&svc_name).await.map_err(|e| {
        api_error(
            e,
            format!("get services {svc_name} in namespace {namespace}"),
            Some(("Service", namespace, &svc_name, &hint)),
        )
    })?;
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    let list = slices
        .list(&ListParams::default().labels(&slice_selector(&svc_name)))
        .await
        .map_err(|e| {
            api_error(
                e,
                format!("list endpointslices.discovery.k8s.io in namespace {namespace}"),
                None,
            )
        })?;
    Ok((pm, service, list.items))
}

fn slice_selector(service: &str) -> String {
    format!(
        "{MANAGED_BY}={},{SERVICE_NAME}={service}",
        portmapper_api::MANAGER
    )
}

fn render(view: &View, output: Output, watch: bool) -> Result<String, StatusError> {
    match output {
        Output::Table => Ok(table(view)),
        Output::Json => json(view, watch),
    }
}

/// Which watch an event came from.
enum Changed {
    PortMapping(watcher::Event<PortMapping>),
    Service(watcher::Event<Service>),
    Slice(watcher::Event<EndpointSlice>),
}

/// The latest state of one watch: what it shows, a relist in progress (swapped in at its end,
/// so a relist never shows a transient "not found" or a half list), and whether its first list
/// completed.
struct Watched<K> {
    current: BTreeMap<String, K>,
    relist: Option<BTreeMap<String, K>>,
    synced: bool,
}

impl<K> Default for Watched<K> {
    fn default() -> Self {
        Self {
            current: BTreeMap::new(),
            relist: None,
            synced: false,
        }
    }
}

impl<K: kube::Resource> Watched<K> {
    fn apply(&mut self, event: watcher::Event<K>) {
        match event {
            watcher::Event::Apply(o) => {
                self.current.insert(o.name_any(), o);
            }
            watcher::Event::Delete(o) => {
                self.current.remove(&o.name_any());
            }
            watcher::Event::Init => self.relist = Some(BTreeMap::new()),
            watcher::Event::InitApply(o) => {
                self.relist
                    .get_or_insert_with(BTreeMap::new)
                    .insert(o.name_any(), o);
            }
            watcher::Event::InitDone => {
                self.current = self.relist.take().unwrap_or_default();
                self.synced = true;
            }
        }
    }

    /// The one object of a watch by name.
    fn only(&self) -> Option<&K> {
        self.current.values().next()
    }
}

/// The latest objects, kept from the watch events (a small store: one PortMapping, one Service,
/// a few slices).
#[derive(Default)]
struct Live {
    pm: Watched<PortMapping>,
    service: Watched<Service>,
    slices: Watched<EndpointSlice>,
}

impl Live {
    fn apply(&mut self, changed: Changed) {
        match changed {
            Changed::PortMapping(e) => self.pm.apply(e),
            Changed::Service(e) => self.service.apply(e),
            Changed::Slice(e) => self.slices.apply(e),
        }
    }

    fn synced(&self) -> bool {
        self.pm.synced && self.service.synced && self.slices.synced
    }

    /// The frame to print now, or `None` while a watch has not listed yet.
    fn frame(
        &self,
        namespace: &str,
        name: &str,
        output: Output,
        watch: bool,
    ) -> Result<Option<String>, StatusError> {
        if !self.synced() {
            return Ok(None);
        }
        let Some(pm) = self.pm.only() else {
            return Ok(Some(format!(
                "PortMapping {namespace}/{name} not found (deleted?); waiting for it\n"
            )));
        };
        let Some(service) = self.service.only() else {
            return Ok(Some(format!(
                "Service {namespace}/{} not found; PortMapping {name} publishes nothing; \
                 waiting for it\n",
                pm.spec.service_ref.name
            )));
        };
        let slices: Vec<EndpointSlice> = self.slices.current.values().cloned().collect();
        render(&matrix(pm, service, &slices), output, watch).map(Some)
    }
}

fn events<K>(
    api: Api<K>,
    config: watcher::Config,
    wrap: fn(watcher::Event<K>) -> Changed,
) -> impl Stream<Item = Result<Changed, watcher::Error>> + Send
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher(api, config)
        .default_backoff()
        .map(move |e| e.map(wrap))
}

async fn watch(
    client: Client,
    namespace: &str,
    name: &str,
    service: &str,
    output: Output,
) -> Result<(), StatusError> {
    let by_name = |n: &str| watcher::Config::default().fields(&format!("metadata.name={n}"));
    let pm_events = events(
        Api::<PortMapping>::namespaced(client.clone(), namespace),
        by_name(name),
        Changed::PortMapping,
    );
    let svc_events = events(
        Api::<Service>::namespaced(client.clone(), namespace),
        by_name(service),
        Changed::Service,
    );
    let slice_events = events(
        Api::<EndpointSlice>::namespaced(client, namespace),
        watcher::Config::default().labels(&slice_selector(service)),
        Changed::Slice,
    );
    let mut stream =
        futures::stream::select_all([pm_events.boxed(), svc_events.boxed(), slice_events.boxed()]);
    let mut live = Live::default();
    let mut last = String::new();
    let mut stdout = std::io::stdout();
    // One listener for the whole watch, so a Ctrl-C between two events is not lost.
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        let next = tokio::select! {
            next = stream.next() => next,
            _ = &mut ctrl_c => return Ok(()),
        };
        match next {
            None => return Ok(()),
            Some(Err(err)) => {
                // The watcher backs off and retries; say so rather than stop.
                tracing::warn!(error = %err, portmapping = name, "watch failed; retrying");
                continue;
            }
            Some(Ok(changed)) => live.apply(changed),
        }
        if let Some(pm) = live.pm.only()
            && pm.spec.service_ref.name != service
        {
            // The slices watch selects by Service name: another Service needs another watch.
            let frame = format!(
                "PortMapping {namespace}/{name} now names Service {}; run portmapper status \
                 again to follow it\n",
                pm.spec.service_ref.name
            );
            stdout.write_all(frame.as_bytes())?;
            stdout.flush()?;
            return Ok(());
        }
        let Some(frame) = live.frame(namespace, name, output, true)? else {
            continue;
        };
        // Events that change nothing the view shows (a resync, another field) print nothing.
        if frame != last {
            if output == Output::Table && !last.is_empty() {
                stdout.write_all(b"\n")?;
            }
            stdout.write_all(frame.as_bytes())?;
            stdout.flush()?;
            last = frame;
        }
    }
}

/// `portmapper status`: reads, prints, and with `--watch` follows the changes.
pub async fn run(args: StatusArgs) -> Result<(), StatusError> {
    let (client, namespace) = connect(&args).await?;
    // Read once first, also with --watch: not found / forbidden fail here with a clear message
    // instead of a watch retrying forever.
    let (pm, service, slices) = read_once(&client, &namespace, &args.name).await?;
    if !args.watch {
        let text = render(&matrix(&pm, &service, &slices), args.output, false)?;
        let mut stdout = std::io::stdout();
        stdout.write_all(text.as_bytes())?;
        stdout.flush()?;
        return Ok(());
    }
    let service_name = pm.spec.service_ref.name.clone();
    watch(client, &namespace, &args.name, &service_name, args.output).await
}

/// Entry point from `main`: runs [`run`] on a runtime and maps errors to the exit code.
pub fn main(args: StatusArgs, program: &str) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("{program}: starting the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::debug!(error = %err, "status failed");
            eprintln!("{program}: error: {err}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::{Value, json};

    use super::*;

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
