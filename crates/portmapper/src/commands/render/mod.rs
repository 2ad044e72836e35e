//! `portmapper render`: an offline preview for reviews. Reads PortMapping, Service, Pod and Node
//! manifests, evaluates every check that needs only API objects, takes network check results from
//! `--assume`, runs the real planner as for a first publish (no live slices) and prints what the
//! operator would publish and the status it would report.
//!
//! Exit codes: 0 the preview was printed; 1 the input is invalid (unreadable, not YAML, a kind
//! render does not read, an object defined twice, a PortMapping with unknown spec fields, that
//! fails validation or names a Service that is not in the input); 2 usage (bad flags, from
//! clap); 3 the output could not be written.

pub mod input;
pub mod output;

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

pub use input::{InputError, Loaded, Object, Source};
use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use portmapper_api::{PortMapping, PortMappingStatus};
use portmapper_core::planner::migration::Step;
use portmapper_core::planner::objects::ANNOTATION_TRIGGER_TIME;
use portmapper_core::report::{PlanFacts, PlannedStatus, Report, Stall, status};
use portmapper_core::target::{PodAddress, is_terminal, pod_address};
use portmapper_core::writes::{Phases, Write as PlannedWrite};
use portmapper_core::{
    EventType, NetworkDecisions, PlanInput, PodRecord, Verdict, planner, pod_in_pool,
};

use crate::index::unready_status;

/// What `portmapper render` reads and prints (built from its flags by the command line, `cli/mod.rs`).
#[derive(Debug, Clone)]
pub struct RenderOptions {
    /// Manifest files or directories (read recursively: *.yaml, *.yml, *.json); `-` is stdin.
    pub filenames: Vec<PathBuf>,
    /// The result every network check is assumed to give: render never probes.
    pub assume: Assume,
    /// Output format.
    pub output: Format,
    /// Namespace of objects that name none (as kubectl's current namespace would).
    pub namespace: String,
}

/// The assumed outcome of network checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assume {
    /// Every network check includes the pod.
    Include,
    /// Every network check excludes the pod.
    Exclude,
    /// Every network check abstains: on a first publish, such pods stay out.
    Abstain,
}

impl Assume {
    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Include => "include",
            Self::Exclude => "exclude",
            Self::Abstain => "abstain",
        }
    }

    fn verdict(self) -> Verdict {
        let reason = format!(
            "assumed {} (portmapper render --assume {}: network checks are not run offline)",
            self.as_str(),
            self.as_str()
        );
        match self {
            Self::Include => Verdict::INCLUDE,
            Self::Exclude => Verdict::exclude(reason),
            Self::Abstain => Verdict::abstain(reason),
        }
    }
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Multi-document YAML: the objects, then the PortMapping with its status.
    Yaml,
    /// A summary table per PortMapping.
    Table,
}

/// Why render failed.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The input is invalid; every problem found is listed.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Input(Vec<InputError>),
    /// An object could not be serialised.
    #[error("serialising {what}: {source}")]
    Serialize {
        /// Which object.
        what: String,
        /// Why.
        source: serde_yaml::Error,
    },
    /// The output could not be written.
    #[error("writing the output: {0}")]
    Output(#[from] std::io::Error),
}

impl RenderError {
    /// The documented exit code.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Input(_) => 1,
            Self::Serialize { .. } | Self::Output(_) => 3,
        }
    }
}

/// What render computed for one PortMapping.
#[derive(Clone, Debug)]
pub struct Preview {
    /// Where the PortMapping was read.
    pub source: Source,
    /// The PortMapping as given (namespace filled in), with the status it would get.
    pub port_mapping: PortMapping,
    /// EndpointSlices it would publish, by name.
    pub slices: Vec<EndpointSlice>,
    /// The legacy Endpoints object, with `legacyEndpoints: true`.
    pub endpoints: Option<Endpoints>,
    /// Warnings the operator would emit as Events (`Reason: note`) and notes on the input.
    pub notes: Vec<String>,
    /// Network check results that were assumed rather than probed.
    pub assumed: usize,
}

/// The whole preview.
#[derive(Clone, Debug)]
pub struct Rendered {
    /// One per PortMapping, by namespace and name.
    pub previews: Vec<Preview>,
    /// The `--assume` in force.
    pub assume: Assume,
}

/// The binary's entry point: prints the preview to stdout, errors to stderr.
pub fn main(options: &RenderOptions) -> ExitCode {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match run(options, &mut out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            let mut stderr = std::io::stderr();
            // Nothing better to do if stderr is gone too.
            let _ = writeln!(stderr, "portmapper render: {err}");
            ExitCode::from(err.exit_code())
        }
    }
}

/// Reads the manifests, renders and writes the chosen format.
pub fn run(options: &RenderOptions, out: &mut dyn Write) -> Result<(), RenderError> {
    let loaded = input::load(&options.filenames).map_err(RenderError::Input)?;
    let rendered =
        render(loaded, options.assume, &options.namespace).map_err(RenderError::Input)?;
    let text = match options.output {
        Format::Yaml => output::yaml(&rendered)?,
        Format::Table => output::table(&rendered),
    };
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// A placeholder uid, stable for a given object, for manifests that carry none: the planner
/// keys network results and owner references by uid.
fn placeholder_uid(kind: &str, namespace: &str, name: &str) -> String {
    uuid::Uuid::new_v5(
        &uuid::Uuid::NAMESPACE_URL,
        format!("https://portmapper.dev/render/{kind}/{namespace}/{name}").as_bytes(),
    )
    .to_string()
}

fn fill_meta(meta: &mut ObjectMeta, kind: &str, namespace: Option<&str>) {
    if let Some(ns) = namespace
        && meta.namespace.as_deref().is_none_or(str::is_empty)
    {
        meta.namespace = Some(ns.to_owned());
    }
    if meta.uid.as_deref().is_none_or(str::is_empty) {
        meta.uid = Some(placeholder_uid(
            kind,
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
        ));
    }
}

/// The inputs, sorted by kind and indexed.
#[derive(Default)]
struct Inputs {
    port_mappings: Vec<(Source, PortMapping, PortMapping)>,
    services: HashMap<(String, String), Service>,
    pods: BTreeMap<String, Vec<Arc<PodRecord>>>,
    zones: BTreeMap<String, String>,
    /// Node name → its `Ready` status, for the nodes known not Ready: a gated pod on one is
    /// not published, as the operator would not.
    unready_nodes: BTreeMap<String, String>,
}

fn index(loaded: Vec<Loaded>, default_ns: &str) -> Result<Inputs, Vec<InputError>> {
    let mut inputs = Inputs::default();
    let mut errors = Vec::new();
    let mut seen: HashMap<(&'static str, String, String), Source> = HashMap::new();
    for Loaded { source, object } in loaded {
        let (kind, meta) = match &object {
            Object::PortMapping(o) => ("PortMapping", &o.metadata),
            Object::Service(o) => ("Service", &o.metadata),
            Object::Pod(o) => ("Pod", &o.metadata),
            Object::Node(o) => ("Node", &o.metadata),
        };
        let name = meta.name.clone().unwrap_or_default();
        if name.is_empty() {
            errors.push(InputError::Invalid {
                at: source,
                message: format!("the {kind} has no metadata.name"),
            });
            continue;
        }
        let ns = match object {
            Object::Node(_) => String::new(),
            _ => meta
                .namespace
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| default_ns.to_owned()),
        };
        if let Some(first) = seen.insert((kind, ns.clone(), name.clone()), source.clone()) {
            errors.push(InputError::Invalid {
                at: source,
                message: format!("{kind} {ns}/{name} is already defined at {first}"),
            });
            continue;
        }
        match object {
            Object::PortMapping(pm) => {
                let mut given = *pm;
                given.metadata.namespace = Some(ns.clone());
                given.status = None;
                let mut planned = given.clone();
                fill_meta(&mut planned.metadata, "PortMapping", None);
                inputs.port_mappings.push((source, given, planned));
            }
            Object::Service(mut svc) => {
                fill_meta(&mut svc.metadata, "Service", Some(&ns));
                inputs.services.insert((ns, name), *svc);
            }
            Object::Pod(mut pod) => {
                fill_meta(&mut pod.metadata, "Pod", Some(&ns));
                inputs
                    .pods
                    .entry(ns)
                    .or_default()
                    .push(Arc::new(PodRecord::from(*pod)));
            }
            Object::Node(node) => {
                if let Some(ready) = unready_status(&node) {
                    inputs.unready_nodes.insert(name.clone(), ready);
                }
                if let Some(zone) = node.labels().get("topology.kubernetes.io/zone") {
                    inputs.zones.insert(name, zone.clone());
                }
            }
        }
    }
    inputs
        .port_mappings
        .sort_by_key(|(_, pm, _)| (pm.metadata.namespace.clone(), pm.metadata.name.clone()));
    if errors.is_empty() {
        Ok(inputs)
    } else {
        Err(errors)
    }
}

/// Computes the preview of every PortMapping in the input.
pub fn render(
    loaded: Vec<Loaded>,
    assume: Assume,
    default_ns: &str,
) -> Result<Rendered, Vec<InputError>> {
    let inputs = index(loaded, default_ns)?;
    let mut errors = Vec::new();
    for (source, pm, _) in &inputs.port_mappings {
        let ns = pm.namespace().unwrap_or_default();
        let at = || source.clone();
        let name = pm.name_any();
        let field_errors = portmapper_api::validate::validate_spec(&pm.spec);
        if let Some(message) = status::invalid_spec_message(&field_errors) {
            errors.push(InputError::Invalid {
                at: at(),
                message: format!("PortMapping {ns}/{name} is invalid: {message}"),
            });
            continue;
        }
        let svc = &pm.spec.service_ref.name;
        if !inputs.services.contains_key(&(ns.clone(), svc.clone())) {
            errors.push(InputError::Invalid {
                at: at(),
                message: format!(
                    "PortMapping {ns}/{name} names Service {ns}/{svc}, which is not in the input (add its manifest with -f)"
                ),
            });
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let planned: Vec<&PortMapping> = inputs.port_mappings.iter().map(|(_, _, p)| p).collect();
    let previews = inputs
        .port_mappings
        .iter()
        .map(|(source, given, pm)| preview(&inputs, &planned, source, given, pm, assume))
        .collect();
    Ok(Rendered { previews, assume })
}

/// What render reports for one PortMapping: the operator's report of the same plan (or stall),
/// and the objects the plan's writes apply, as a first publication would write them.
fn preview(
    inputs: &Inputs,
    all: &[&PortMapping],
    source: &Source,
    given: &PortMapping,
    pm: &PortMapping,
    assume: Assume,
) -> Preview {
    let ns = pm.namespace().unwrap_or_default();
    let mut out = Preview {
        source: source.clone(),
        port_mapping: given.clone(),
        slices: Vec::new(),
        endpoints: None,
        notes: Vec::new(),
        assumed: 0,
    };
    let service_key = (ns.clone(), pm.spec.service_ref.name.clone());
    let report = match (
        inputs.services.get(&service_key),
        status::conflict_winner(pm, all.iter().copied()),
    ) {
        (Some(service), None) => {
            let pods = inputs.pods.get(&ns).map_or(&[][..], Vec::as_slice);
            out.notes.extend(pods_without_ips(pm, &ns, pods));
            plan_preview(inputs, pm, service, pods, assume, &mut out)
        }
        // Checked by `render` before: the Service is there, so this is a conflict.
        (_, winner) => Report::of_stall(&Stall::ServiceClaimed {
            winner: winner.unwrap_or_default(),
            service: pm.spec.service_ref.name.clone(),
        }),
    };
    for event in report
        .events
        .iter()
        .filter(|e| e.type_ == EventType::Warning)
    {
        out.notes
            .push(format!("Warning Event {}: {}", event.reason, event.note));
    }
    out.port_mapping.status = Some(first_status(&report.status, pm));
    out
}

/// The status a first publication reports: nothing before it, every time at the epoch.
fn first_status(planned: &PlannedStatus, pm: &PortMapping) -> PortMappingStatus {
    planned.to_status(
        &PortMappingStatus::default(),
        pm.metadata.generation,
        Timestamp::UNIX_EPOCH,
    )
}

/// Notes on pool pods that carry no IP: render reads pod status as given.
fn pods_without_ips(pm: &PortMapping, ns: &str, pods: &[Arc<PodRecord>]) -> Vec<String> {
    let no_ip = |pod: &PodRecord| {
        [kube_validation::IpFamily::V4, kube_validation::IpFamily::V6]
            .into_iter()
            .all(|f| matches!(pod_address(pod, f), PodAddress::Missing))
    };
    pods.iter()
        .filter(|pod| pod_in_pool(&pm.spec, ns, pod).unwrap_or(false))
        .filter(|pod| !is_terminal(pod) && no_ip(pod))
        .map(|pod| {
            format!(
                "pod {} has no status.podIPs, so it is not a candidate: render reads pod status as `kubectl get pod -o yaml` prints it",
                pod.name
            )
        })
        .collect()
}

/// Plans `pm` as for a first publication, with every network result assumed, and fills the
/// preview with the objects its writes apply. Returns the plan's report.
fn plan_preview(
    inputs: &Inputs,
    pm: &PortMapping,
    service: &Service,
    records: &[Arc<PodRecord>],
    assume: Assume,
    out: &mut Preview,
) -> Report {
    let mut input = PlanInput::first_publication(pm, service, records, &inputs.zones);
    input.unready_nodes = &inputs.unready_nodes;
    // Every network result the planner looks up gets the assumed one, as the prober would
    // give it: the lookups of a plan do not depend on the results it reads, so a first plan
    // without results lists them for the second.
    let network: NetworkDecisions = planner::plan(&input)
        .map(|p| p.network_lookups)
        .unwrap_or_default()
        .into_iter()
        .map(|l| (l.key, assume.verdict()))
        .collect();
    out.assumed = network.len();
    input.network = &network;
    let plan = match planner::plan(&input) {
        Ok(plan) => plan,
        Err(err) => return Report::of_stall(&Stall::PlanFailed(err.to_string())),
    };
    let pods: Vec<&PodRecord> = records.iter().map(AsRef::as_ref).collect();
    // What the operator would write: the slice and Endpoints writes of the plan's phases (an Endpoints object
    // it plans but does not write, say while the Service keeps its selector, is not shown).
    for write in Phases::of_plan(&plan, &pods)
        .0
        .into_iter()
        .flat_map(|p| p.writes)
    {
        match write {
            PlannedWrite::CreateSlice(slice) | PlannedWrite::UpdateSlice(slice) => {
                let mut slice = slice.to_endpoint_slice();
                strip_trigger_time(&mut slice.metadata);
                out.slices.push(slice);
            }
            PlannedWrite::Migration(step) => {
                let (Step::ApplyEndpoints(mut endpoints)
                | Step::AdoptEndpoints { mut endpoints, .. }) = *step
                else {
                    continue;
                };
                strip_trigger_time(&mut endpoints.metadata);
                out.endpoints = Some(endpoints);
            }
            _ => {}
        }
    }
    let facts = PlanFacts {
        plan: &plan,
        service,
        pods: &pods,
        // Render looks for enrolled pods among all it was given.
        ambient: true,
        previous: &[],
    };
    Report::of_plan(&facts)
}

/// The trigger time is stamped when the operator writes; a preview has none.
fn strip_trigger_time(meta: &mut ObjectMeta) {
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(ANNOTATION_TRIGGER_TIME);
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}
