//! Server-side `Table` output (spec §5.7): CRD `additionalPrinterColumns` (apiextensions
//! `tableconvertor`) and the built-in printers of kube-apiserver (`pkg/printers/internalversion`)
//! for the kinds the emulator serves; other kinds get the apiserver default (Name, Created At).
//! Ages use apimachinery's `HumanDuration`.

use crate::jsonpath::{JsonPath, to_text};
use serde_json::{Map, Value, json};

const NAME_DOC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const AGE_DOC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// A column of a Table.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    /// `name`.
    pub name: String,
    /// `type`: integer, number, boolean, string, date.
    pub type_: String,
    /// `format` (`name` for the Name column).
    pub format: String,
    /// `description`.
    pub description: String,
    /// `priority` (0 = shown without `-o wide`).
    pub priority: i64,
    /// JSONPath for CRD columns; `None` for built-in computed columns.
    pub json_path: Option<String>,
}

impl Column {
    fn builtin(name: &str, type_: &str, priority: i64, description: &str) -> Self {
        Self {
            name: name.to_owned(),
            type_: type_.to_owned(),
            format: if name == "Name" {
                "name".to_owned()
            } else {
                String::new()
            },
            description: description.to_owned(),
            priority,
            json_path: None,
        }
    }

    fn definition(&self) -> Value {
        json!({"name": self.name, "type": self.type_, "format": self.format,
               "description": self.description, "priority": self.priority})
    }
}

/// `includeObject` of a Table request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// No `object` in rows.
    None,
    /// PartialObjectMetadata (the default).
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// Parses the `includeObject` query parameter (`None`, `Metadata`, `Object`; empty → default).
    pub fn from_param(p: Option<&str>) -> Option<Self> {
        match p {
            None | Some("") | Some("Metadata") => Some(Self::Metadata),
            Some("None") => Some(Self::None),
            Some("Object") => Some(Self::Object),
            Some(_) => None,
        }
    }
}

/// Where a Table's columns come from.
#[derive(Clone, Debug, PartialEq)]
pub enum TableSource {
    /// A CRD version: Name, then its `additionalPrinterColumns` (or Age when it has none).
    Crd(Vec<Column>),
    /// A built-in kind (`group` `""` for core): kube-apiserver's printer columns for known kinds,
    /// else the default table (Name, Created At).
    Builtin {
        /// API group.
        group: String,
        /// Kind.
        kind: String,
    },
}

/// Columns of a CRD version (`spec.versions[i]`), from `additionalPrinterColumns`; a CRD
/// without columns gets `Age` (`.metadata.creationTimestamp`), as upstream.
pub fn crd_columns(crd_version: &Value) -> Vec<Column> {
    let declared = crd_version
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if declared.is_empty() {
        return vec![Column {
            name: "Age".into(),
            type_: "date".into(),
            format: String::new(),
            description: AGE_DOC.into(),
            priority: 0,
            json_path: Some(".metadata.creationTimestamp".into()),
        }];
    }
    declared
        .iter()
        .map(|c| {
            let text = |k: &str| {
                c.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            Column {
                name: text("name"),
                type_: text("type"),
                format: text("format"),
                description: text("description"),
                priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                json_path: Some(text("jsonPath")),
            }
        })
        .collect()
}

/// apimachinery `duration.HumanDuration`.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// Age of an RFC 3339 timestamp at `now`: `<unknown>` when absent, `<invalid>` when unparsable.
pub fn age(timestamp: Option<&Value>, now: &str) -> String {
    let Some(ts) = timestamp.and_then(Value::as_str).filter(|s| !s.is_empty()) else {
        return "<unknown>".into();
    };
    match (
        ts.parse::<jiff::Timestamp>(),
        now.parse::<jiff::Timestamp>(),
    ) {
        (Ok(t), Ok(n)) => human_duration(n.as_second() - t.as_second()),
        _ => "<invalid>".into(),
    }
}

fn name_column() -> Column {
    Column::builtin("Name", "string", 0, NAME_DOC)
}

fn age_column() -> Column {
    Column::builtin("Age", "string", 0, AGE_DOC)
}

fn builtin_columns(group: &str, kind: &str) -> Vec<Column> {
    let c = Column::builtin;
    let mut cols = vec![name_column()];
    match (group, kind) {
        ("discovery.k8s.io", "EndpointSlice") => cols.extend([
            c("AddressType", "string", 0, "addressType specifies the type of address carried by this EndpointSlice."),
            c("Ports", "string", 0, "ports specifies the list of network ports exposed by each endpoint in this slice."),
            c("Endpoints", "string", 0, "endpoints is a list of unique endpoints in this slice."),
            age_column(),
        ]),
        ("", "Service") => cols.extend([
            c("Type", "string", 0, "type determines how the Service is exposed."),
            c("Cluster-IP", "string", 0, "clusterIP is the IP address of the service."),
            c("External-IP", "string", 0, "List of IP addresses for which nodes in the cluster will also accept traffic for this service."),
            c("Port(s)", "string", 0, "The list of ports that are exposed by this service."),
            age_column(),
            c("Selector", "string", 1, "Route service traffic to pods with label keys and values matching this selector."),
        ]),
        ("", "Pod") => cols.extend([
            c("Ready", "string", 0, "The aggregate readiness state of this pod for accepting traffic."),
            c("Status", "string", 0, "The aggregate status of the containers in this pod."),
            c("Restarts", "string", 0, "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
            age_column(),
            c("IP", "string", 1, "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated."),
            c("Node", "string", 1, "NodeName is a request to schedule this pod onto a specific node."),
            c("Nominated Node", "string", 1, "nominatedNodeName is set when this pod preempts other pods on the node."),
            c("Readiness Gates", "string", 1, "If specified, all readiness gates will be evaluated for pod readiness."),
        ]),
        ("coordination.k8s.io", "Lease") => cols.extend([
            c("Holder", "string", 0, "holderIdentity contains the identity of the holder of a current lease."),
            age_column(),
        ]),
        ("", "Endpoints") => cols.extend([
            c("Endpoints", "string", 0, "Endpoints is the list of endpoints."),
            age_column(),
        ]),
        ("", "Namespace") => cols.extend([
            c("Status", "string", 0, "The status of the namespace"),
            age_column(),
        ]),
        ("", "Event") | ("events.k8s.io", "Event") => {
            cols = vec![
                c("Last Seen", "string", 0, "The time at which the most recent occurrence of this event was recorded."),
                c("Type", "string", 0, "Type of this event (Normal, Warning), new types could be added in the future"),
                c("Reason", "string", 0, "This should be a short, machine understandable string that gives the reason for the transition into the object's current status."),
                c("Object", "string", 0, "The object that this event is about."),
                c("Subobject", "string", 1, "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2]."),
                c("Source", "string", 1, "The component reporting this event. Should be a short machine understandable string."),
                c("Message", "string", 0, "A human-readable description of the status of this operation."),
                c("First Seen", "string", 1, "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)"),
                c("Count", "string", 1, "The number of times this event has occurred."),
                Column::builtin("Name", "string", 1, NAME_DOC),
            ];
        }
        ("", "ConfigMap") => cols.extend([
            c("Data", "string", 0, "Data contains the configuration data."),
            age_column(),
        ]),
        ("", "Secret") => cols.extend([
            c("Type", "string", 0, "Used to facilitate programmatic handling of secret data."),
            c("Data", "string", 0, "Data contains the secret data."),
            age_column(),
        ]),
        // Types without a printer get apiserver's default table: Name and Created At.
        _ => cols.push(Column::builtin("Created At", "date", 0, AGE_DOC)),
    }
    cols
}

/// `a,b,c + N more...` or `<unset>` (kubectl's `listWithMoreString`).
fn list_with_more(list: &[String], more: bool, count: usize, max: usize, empty: &str) -> String {
    let mut ret = list.join(",");
    if more && count > max {
        ret.push_str(&format!(" + {} more...", count - max));
    }
    if ret.is_empty() {
        ret = empty.to_owned();
    }
    ret
}

fn arr(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or(&[])
}

fn s(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

fn endpointslice_ports(ports: &Value) -> String {
    let mut list = Vec::new();
    let (max, mut more, mut count) = (3, false, 0);
    for p in arr(ports) {
        if list.len() < max {
            let n = match (
                p.get("port").and_then(Value::as_i64),
                p.get("name").and_then(Value::as_str),
            ) {
                (Some(port), _) => port.to_string(),
                (None, Some(name)) => name.to_owned(),
                (None, None) => "*".to_owned(),
            };
            list.push(n);
        } else if list.len() == max {
            more = true;
        }
        count += 1;
    }
    list_with_more(&list, more, count, max, "<unset>")
}

fn endpointslice_endpoints(endpoints: &Value) -> String {
    let mut list = Vec::new();
    let (max, mut more, mut count) = (3, false, 0);
    for e in arr(endpoints) {
        for a in arr(&e["addresses"]) {
            if list.len() < max {
                list.push(s(a));
            } else if list.len() == max {
                more = true;
            }
            count += 1;
        }
    }
    list_with_more(&list, more, count, max, "<unset>")
}

fn join_host_port(ip: &str, port: i64) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

fn endpoints_list(subsets: &Value) -> String {
    if arr(subsets).is_empty() {
        return "<none>".into();
    }
    let mut list = Vec::new();
    let (max, mut more, mut count) = (3usize, false, 0usize);
    for ss in arr(subsets) {
        let addrs = arr(&ss["addresses"]);
        let ports = arr(&ss["ports"]);
        if ports.is_empty() {
            count += addrs.len();
            for a in addrs {
                if list.len() == max {
                    more = true;
                    break;
                }
                list.push(s(&a["ip"]));
            }
        } else {
            for p in ports {
                count += addrs.len();
                for a in addrs {
                    if list.len() == max {
                        more = true;
                        break;
                    }
                    list.push(join_host_port(
                        &s(&a["ip"]),
                        p["port"].as_i64().unwrap_or(0),
                    ));
                }
            }
        }
    }
    if more {
        return format!("{} + {} more...", list.join(","), count.saturating_sub(max));
    }
    list_with_more(&list, false, count, max, "<none>")
}

fn format_labels(m: &Value) -> String {
    match m.as_object().filter(|m| !m.is_empty()) {
        None => "<none>".into(),
        Some(map) => {
            let mut pairs: Vec<String> = map.iter().map(|(k, v)| format!("{k}={}", s(v))).collect();
            pairs.sort();
            pairs.join(",")
        }
    }
}

fn service_cells(o: &Value) -> Vec<Value> {
    let spec = &o["spec"];
    let svc_type = s(&spec["type"]);
    let cluster_ip = arr(&spec["clusterIPs"])
        .first()
        .map(s)
        .or_else(|| spec["clusterIP"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "<none>".into());
    let external: Vec<String> = arr(&spec["externalIPs"]).iter().map(s).collect();
    let external_ip = match svc_type.as_str() {
        "ClusterIP" | "NodePort" | "" => {
            if external.is_empty() {
                "<none>".into()
            } else {
                external.join(",")
            }
        }
        "LoadBalancer" => {
            let mut ips: Vec<String> = arr(&o["status"]["loadBalancer"]["ingress"])
                .iter()
                .filter_map(|i| {
                    i["ip"]
                        .as_str()
                        .or(i["hostname"].as_str())
                        .map(str::to_owned)
                })
                .collect();
            ips.extend(external);
            if ips.is_empty() {
                "<pending>".into()
            } else {
                ips.join(",")
            }
        }
        "ExternalName" => s(&spec["externalName"]),
        _ => "<unknown>".into(),
    };
    let ports: Vec<String> = arr(&spec["ports"])
        .iter()
        .map(|p| {
            let port = p["port"].as_i64().unwrap_or(0);
            let proto = p["protocol"].as_str().unwrap_or("TCP");
            match p["nodePort"].as_i64().filter(|n| *n > 0) {
                Some(np) => format!("{port}:{np}/{proto}"),
                None => format!("{port}/{proto}"),
            }
        })
        .collect();
    let ports = if ports.is_empty() {
        "<none>".into()
    } else {
        ports.join(",")
    };
    vec![
        json!(svc_type),
        json!(cluster_ip),
        json!(external_ip),
        json!(ports),
    ]
}

/// kube-apiserver's `printPod` (1.33): ready/total (restartable init containers count), status
/// reason from init and app containers, restarts with "(… ago)", IP, node, readiness gates.
fn pod_cells(o: &Value, now: &str) -> Vec<Value> {
    let spec = &o["spec"];
    let status = &o["status"];
    let init_specs = arr(&spec["initContainers"]);
    let restartable = |name: &str| {
        init_specs
            .iter()
            .any(|c| c["name"] == name && c["restartPolicy"] == "Always")
    };
    let total = arr(&spec["containers"]).len()
        + init_specs
            .iter()
            .filter(|c| c["restartPolicy"] == "Always")
            .count();
    let mut ready = 0usize;
    let phase = status["phase"].as_str().unwrap_or_default();
    let mut reason = status["reason"]
        .as_str()
        .filter(|r| !r.is_empty())
        .unwrap_or(phase)
        .to_owned();
    if arr(&status["conditions"])
        .iter()
        .any(|c| c["type"] == "PodScheduled" && c["reason"] == "SchedulingGated")
    {
        reason = "SchedulingGated".into();
    }
    // Restart dates compare as RFC 3339 strings (same format, UTC).
    let later = |a: &mut String, c: &Value| {
        if let Some(t) = c["lastState"]["terminated"]["finishedAt"].as_str()
            && t > a.as_str()
        {
            *a = t.to_owned();
        }
    };
    let (mut restarts, mut sidecar_restarts) = (0i64, 0i64);
    let (mut last_restart, mut sidecar_last_restart) = (String::new(), String::new());
    let mut initializing = false;
    let init_statuses = arr(&status["initContainerStatuses"]);
    for (i, c) in init_statuses.iter().enumerate() {
        let name = c["name"].as_str().unwrap_or_default();
        restarts += c["restartCount"].as_i64().unwrap_or(0);
        later(&mut last_restart, c);
        if restartable(name) {
            sidecar_restarts += c["restartCount"].as_i64().unwrap_or(0);
            later(&mut sidecar_last_restart, c);
        }
        let terminated = &c["state"]["terminated"];
        let waiting_reason = c["state"]["waiting"]["reason"].as_str().unwrap_or_default();
        if terminated.is_object() && terminated["exitCode"].as_i64() == Some(0) {
            continue;
        }
        if restartable(name) && c["started"] == true {
            if c["ready"] == true {
                ready += 1;
            }
            continue;
        }
        reason = if terminated.is_object() {
            match terminated["reason"].as_str().filter(|r| !r.is_empty()) {
                Some(r) => format!("Init:{r}"),
                None => match terminated["signal"].as_i64().filter(|s| *s != 0) {
                    Some(sig) => format!("Init:Signal:{sig}"),
                    None => format!(
                        "Init:ExitCode:{}",
                        terminated["exitCode"].as_i64().unwrap_or(0)
                    ),
                },
            }
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            format!("Init:{waiting_reason}")
        } else {
            format!("Init:{i}/{}", init_specs.len())
        };
        initializing = true;
        break;
    }
    let initialized = arr(&status["conditions"])
        .iter()
        .any(|c| c["type"] == "Initialized" && c["status"] == "True");
    if !initializing || initialized {
        restarts = sidecar_restarts;
        last_restart = sidecar_last_restart;
        let mut has_running = false;
        for c in arr(&status["containerStatuses"]).iter().rev() {
            restarts += c["restartCount"].as_i64().unwrap_or(0);
            later(&mut last_restart, c);
            let state = &c["state"];
            let terminated = &state["terminated"];
            if let Some(r) = state["waiting"]["reason"]
                .as_str()
                .filter(|r| !r.is_empty())
            {
                reason = r.to_owned();
            } else if let Some(r) = terminated["reason"].as_str().filter(|r| !r.is_empty()) {
                reason = r.to_owned();
            } else if terminated.is_object() {
                reason = match terminated["signal"].as_i64().filter(|s| *s != 0) {
                    Some(sig) => format!("Signal:{sig}"),
                    None => format!("ExitCode:{}", terminated["exitCode"].as_i64().unwrap_or(0)),
                };
            } else if c["ready"] == true && state["running"].is_object() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            let pod_ready = arr(&status["conditions"])
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            reason = if pod_ready {
                "Running".into()
            } else {
                "NotReady".into()
            };
        }
    }
    let deleting = o["metadata"]
        .get("deletionTimestamp")
        .is_some_and(|d| !d.is_null());
    if deleting && status["reason"] == "NodeLost" {
        reason = "Unknown".into();
    } else if deleting && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".into();
    }
    let restarts_text = if restarts != 0 && !last_restart.is_empty() {
        format!("{restarts} ({} ago)", age(Some(&json!(last_restart)), now))
    } else {
        restarts.to_string()
    };
    let or_none = |v: &Value| {
        v.as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or("<none>")
            .to_owned()
    };
    let gates = arr(&spec["readinessGates"]);
    let gates_text = if gates.is_empty() {
        "<none>".to_owned()
    } else {
        let true_count = gates
            .iter()
            .filter(|g| {
                arr(&status["conditions"])
                    .iter()
                    .find(|c| c["type"] == g["conditionType"])
                    .is_some_and(|c| c["status"] == "True")
            })
            .count();
        format!("{true_count}/{}", gates.len())
    };
    vec![
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts_text),
        Value::Null, // Age, filled by the caller
        json!(or_none(&status["podIPs"][0]["ip"])),
        json!(or_none(&spec["nodeName"])),
        json!(or_none(&status["nominatedNodeName"])),
        json!(gates_text),
    ]
}

/// kube-apiserver's `printEvent` (events.k8s.io/v1 objects are read through their core/v1 names).
fn event_cells(o: &Value, now: &str) -> Vec<Value> {
    let pick = |keys: &[&str]| -> Value {
        keys.iter()
            .map(|k| &o[*k])
            .find(|v| !v.is_null() && v.as_str() != Some(""))
            .cloned()
            .unwrap_or(Value::Null)
    };
    let first_ts = pick(&["firstTimestamp", "deprecatedFirstTimestamp"]);
    let first = if first_ts.is_null() {
        age(o.get("eventTime").filter(|v| !v.is_null()), now)
    } else {
        age(Some(&first_ts), now)
    };
    let last_ts = pick(&["lastTimestamp", "deprecatedLastTimestamp"]);
    let mut last = if last_ts.is_null() {
        first.clone()
    } else {
        age(Some(&last_ts), now)
    };
    let mut count = pick(&["count", "deprecatedCount"]).as_i64().unwrap_or(0);
    if let Some(series) = o.get("series").filter(|v| v.is_object()) {
        last = age(series.get("lastObservedTime"), now);
        count = series["count"].as_i64().unwrap_or(0);
    } else if count == 0 {
        count = 1;
    }
    let regarding = if o.get("regarding").is_some() {
        &o["regarding"]
    } else {
        &o["involvedObject"]
    };
    let kind = s(&regarding["kind"]).to_lowercase();
    let target = match regarding["name"].as_str().filter(|n| !n.is_empty()) {
        Some(n) => format!("{kind}/{n}"),
        None => kind,
    };
    let source = if o.get("deprecatedSource").is_some() {
        &o["deprecatedSource"]
    } else {
        &o["source"]
    };
    let first_non_empty = |a: &Value, b: &Value| {
        a.as_str()
            .filter(|x| !x.is_empty())
            .or(b.as_str())
            .unwrap_or("")
            .to_owned()
    };
    let component = first_non_empty(&source["component"], &o["reportingController"]);
    let instance = first_non_empty(&source["host"], &o["reportingInstance"]);
    let source_text = if instance.is_empty() {
        component
    } else {
        format!("{component}, {instance}")
    };
    let message = o
        .get("note")
        .or(o.get("message"))
        .map(s)
        .unwrap_or_default();
    vec![
        json!(last),
        json!(s(&o["type"])),
        json!(s(&o["reason"])),
        json!(target),
        json!(s(&regarding["fieldPath"])),
        json!(source_text),
        json!(message.trim()),
        json!(first),
        json!(count),
        json!(s(&o["metadata"]["name"])),
    ]
}

fn builtin_row(group: &str, kind: &str, o: &Value, now: &str) -> Vec<Value> {
    let name = json!(s(&o["metadata"]["name"]));
    let age_cell = json!(age(o["metadata"].get("creationTimestamp"), now));
    match (group, kind) {
        ("discovery.k8s.io", "EndpointSlice") => vec![
            name,
            json!(s(&o["addressType"])),
            json!(endpointslice_ports(&o["ports"])),
            json!(endpointslice_endpoints(&o["endpoints"])),
            age_cell,
        ],
        ("", "Service") => {
            let mut cells = vec![name];
            cells.extend(service_cells(o));
            cells.push(age_cell);
            cells.push(json!(format_labels(&o["spec"]["selector"])));
            cells
        }
        ("", "Pod") => {
            let mut cells = vec![name];
            let mut rest = pod_cells(o, now);
            rest[3] = age_cell;
            cells.extend(rest);
            cells
        }
        ("coordination.k8s.io", "Lease") => {
            vec![name, json!(s(&o["spec"]["holderIdentity"])), age_cell]
        }
        ("", "Endpoints") => vec![name, json!(endpoints_list(&o["subsets"])), age_cell],
        ("", "Namespace") => vec![name, json!(s(&o["status"]["phase"])), age_cell],
        ("", "Event") | ("events.k8s.io", "Event") => event_cells(o, now),
        ("", "ConfigMap") => {
            let n = o["data"].as_object().map_or(0, Map::len)
                + o["binaryData"].as_object().map_or(0, Map::len);
            vec![name, json!(n), age_cell]
        }
        ("", "Secret") => {
            let n = o["data"].as_object().map_or(0, Map::len);
            vec![name, json!(s(&o["type"])), json!(n), age_cell]
        }
        _ => {
            let created = o["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            vec![name, json!(created)]
        }
    }
}

/// apiextensions `cellForJSONValue` / the jsonpath printer for string columns.
fn crd_cell(column: &Column, path: Option<&JsonPath>, o: &Value, now: &str) -> Value {
    let Some(found) = path.and_then(|p| p.find(o).into_iter().next()) else {
        return Value::Null;
    };
    match column.type_.as_str() {
        "string" => json!(to_text(found)),
        "integer" => match found {
            Value::Number(n) => n
                .as_i64()
                .map_or_else(|| json!(n.as_f64().unwrap_or(0.0) as i64), |i| json!(i)),
            _ => Value::Null,
        },
        "number" => found.as_f64().map_or(Value::Null, |f| json!(f)),
        "boolean" => found.as_bool().map_or(Value::Null, |b| json!(b)),
        "date" => match found.as_str() {
            Some(_) => json!(age(Some(found), now)),
            None => Value::Null,
        },
        _ => Value::Null,
    }
}

fn row_object(o: &Value, include: IncludeObject) -> Option<Value> {
    match include {
        IncludeObject::None => None,
        IncludeObject::Object => Some(o.clone()),
        IncludeObject::Metadata => Some(json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": o.get("metadata").cloned().unwrap_or_else(|| json!({})),
        })),
    }
}

/// Renders a `meta.k8s.io/v1` Table of `objects`. `resource_version` (and `continue_token`) go
/// to the list metadata; `now` (RFC 3339) is the reference for ages.
pub fn render(
    source: &TableSource,
    objects: &[Value],
    include: IncludeObject,
    resource_version: &str,
    continue_token: Option<&str>,
    now: &str,
) -> Value {
    let (columns, rows): (Vec<Column>, Vec<Vec<Value>>) = match source {
        TableSource::Crd(cols) => {
            let paths: Vec<Option<JsonPath>> = cols
                .iter()
                .map(|c| c.json_path.as_deref().and_then(|p| JsonPath::parse(p).ok()))
                .collect();
            let mut all = vec![name_column()];
            all.extend(cols.iter().cloned());
            let rows = objects
                .iter()
                .map(|o| {
                    let mut cells = vec![json!(s(&o["metadata"]["name"]))];
                    cells.extend(
                        cols.iter()
                            .zip(&paths)
                            .map(|(c, p)| crd_cell(c, p.as_ref(), o, now)),
                    );
                    cells
                })
                .collect();
            (all, rows)
        }
        TableSource::Builtin { group, kind } => (
            builtin_columns(group, kind),
            objects
                .iter()
                .map(|o| builtin_row(group, kind, o, now))
                .collect(),
        ),
    };
    let rows: Vec<Value> = objects
        .iter()
        .zip(rows)
        .map(|(o, cells)| {
            let mut row = Map::new();
            row.insert("cells".into(), Value::Array(cells));
            if let Some(obj) = row_object(o, include) {
                row.insert("object".into(), obj);
            }
            Value::Object(row)
        })
        .collect();
    let mut metadata = Map::new();
    metadata.insert("resourceVersion".into(), json!(resource_version));
    if let Some(c) = continue_token.filter(|c| !c.is_empty()) {
        metadata.insert("continue".into(), json!(c));
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": columns.iter().map(Column::definition).collect::<Vec<_>>(),
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-01-02T03:10:00Z";

    #[test]
    fn human_durations_match_apimachinery() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (5, "5s"),
            (119, "119s"),
            (120, "2m"),
            (150, "2m30s"),
            (600, "10m"),
            (179 * 60, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 5 * 60, "3h5m"),
            (47 * 3600, "47h"),
            (2 * 86400 + 3 * 3600, "2d3h"),
            (8 * 86400, "8d"),
            (800 * 86400, "2y70d"),
            (9 * 365 * 86400, "9y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(secs), want, "{secs}s");
        }
        assert_eq!(age(Some(&json!("2026-01-02T03:05:00Z")), NOW), "5m");
        assert_eq!(age(Some(&json!("garbage")), NOW), "<invalid>");
        assert_eq!(age(None, NOW), "<unknown>");
    }

    fn slice(name: &str, ports: Value, endpoints: Value) -> Value {
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "creationTimestamp": "2026-01-02T03:00:00Z", "resourceVersion": "5"},
            "addressType": "IPv4", "ports": ports, "endpoints": endpoints})
    }

    #[test]
    fn endpointslice_columns_match_kubectl() {
        let eps: Vec<Value> = (1..=5)
            .map(|i| json!({"addresses": [format!("10.0.0.{i}")]}))
            .collect();
        let ports = json!([{"port": 80}, {"name": "x"}, {}, {"port": 9}]);
        let objs = vec![
            slice("web-abc", ports, Value::Array(eps)),
            slice("empty", json!(null), json!([])),
        ];
        let source = TableSource::Builtin {
            group: "discovery.k8s.io".into(),
            kind: "EndpointSlice".into(),
        };
        let t = render(&source, &objs, IncludeObject::Metadata, "42", None, NOW);
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            vec!["Name", "AddressType", "Ports", "Endpoints", "Age"]
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "web-abc",
                "IPv4",
                "80,x,* + 1 more...",
                "10.0.0.1,10.0.0.2,10.0.0.3 + 2 more...",
                "10m"
            ])
        );
        assert_eq!(
            t["rows"][1]["cells"],
            json!(["empty", "IPv4", "<unset>", "<unset>", "10m"])
        );
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(t["rows"][0]["object"]["metadata"]["name"], "web-abc");
        assert_eq!(t["metadata"], json!({"resourceVersion": "42"}));
        assert_eq!(t["columnDefinitions"][0]["format"], "name");
    }

    #[test]
    fn crd_columns_with_filters_dates_and_missing_values() {
        let version = json!({"name": "v1alpha1", "additionalPrinterColumns": [
            {"name": "Service", "type": "string", "jsonPath": ".spec.serviceRef.name"},
            {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
            {"name": "Slices", "type": "integer", "jsonPath": ".status.endpointSlices", "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]});
        let cols = crd_columns(&version);
        let pm = json!({"metadata": {"name": "web", "creationTimestamp": "2026-01-01T03:10:00Z"},
            "spec": {"serviceRef": {"name": "websvc"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "endpointSlices": 2}});
        let bare = json!({"metadata": {"name": "new"}, "spec": {"serviceRef": {"name": "s"}}});
        let t = render(
            &TableSource::Crd(cols),
            &[pm, bare],
            IncludeObject::None,
            "7",
            Some("tok"),
            NOW,
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!(["web", "websvc", "True", 2, "24h"])
        );
        assert_eq!(t["rows"][1]["cells"], json!(["new", "s", null, null, null]));
        assert!(t["rows"][0].get("object").is_none());
        assert_eq!(t["metadata"]["continue"], "tok");
        assert_eq!(t["columnDefinitions"][3]["priority"], 1);
        let default_cols = crd_columns(&json!({"name": "v1"}));
        assert_eq!(default_cols.len(), 1);
        assert_eq!(default_cols[0].name, "Age");
    }

    #[test]
    fn pod_rows_follow_print_pod() {
        let pod = |status: Value| {
            json!({"metadata": {"name": "web-0", "creationTimestamp": "2026-01-02T03:00:00Z"},
                "spec": {"nodeName": "node-1", "containers": [{"name": "app"}, {"name": "side"}],
                         "readinessGates": [{"conditionType": "example.com/joined"}]},
                "status": status})
        };
        let running = pod(json!({"phase": "Running", "podIPs": [{"ip": "10.0.0.7"}],
            "conditions": [{"type": "Ready", "status": "False"}, {"type": "example.com/joined", "status": "True"}],
            "containerStatuses": [
                {"name": "app", "ready": true, "restartCount": 2, "state": {"running": {}},
                 "lastState": {"terminated": {"finishedAt": "2026-01-02T03:05:00Z", "exitCode": 1}}},
                {"name": "side", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}));
        assert_eq!(
            builtin_row("", "Pod", &running, NOW),
            vec![
                json!("web-0"),
                json!("1/2"),
                json!("CrashLoopBackOff"),
                json!("2 (5m ago)"),
                json!("10m"),
                json!("10.0.0.7"),
                json!("node-1"),
                json!("<none>"),
                json!("1/1")
            ]
        );
        let init = pod(json!({"phase": "Pending", "initContainerStatuses": [
            {"name": "setup", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]}));
        let mut init = init;
        init["spec"]["initContainers"] = json!([{"name": "setup"}]);
        assert_eq!(builtin_row("", "Pod", &init, NOW)[2], json!("Init:0/1"));
        let mut deleting = pod(json!({"phase": "Running"}));
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-02T03:09:00Z");
        assert_eq!(
            builtin_row("", "Pod", &deleting, NOW)[2],
            json!("Terminating")
        );
    }

    #[test]
    fn service_lease_endpoints_and_fallback_rows() {
        let svc = json!({"metadata": {"name": "web", "creationTimestamp": "2026-01-02T03:09:00Z"},
            "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                     "ports": [{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}],
                     "selector": {"b": "2", "a": "1"}}});
        let row = builtin_row("", "Service", &svc, NOW);
        assert_eq!(
            row,
            vec![
                json!("web"),
                json!("ClusterIP"),
                json!("10.96.0.10"),
                json!("<none>"),
                json!("80/TCP,53/UDP"),
                json!("60s"),
                json!("a=1,b=2")
            ]
        );
        let lease = json!({"metadata": {"name": "lock"}, "spec": {"holderIdentity": "pod-a"}});
        assert_eq!(
            builtin_row("coordination.k8s.io", "Lease", &lease, NOW),
            vec![json!("lock"), json!("pod-a"), json!("<unknown>")]
        );
        let ep = json!({"metadata": {"name": "web"}, "subsets": [{"addresses": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}],
            "ports": [{"port": 8080}]}]});
        assert_eq!(
            builtin_row("", "Endpoints", &ep, NOW)[1],
            json!("10.0.0.1:8080,[fd00::1]:8080")
        );
        let cm = json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}});
        assert_eq!(
            builtin_row("", "ConfigMap", &cm, NOW),
            vec![json!("c"), json!(2), json!("<unknown>")]
        );
        let crd = json!({"metadata": {"name": "portmappings.portmapper.dev", "creationTimestamp": "2026-01-02T03:04:05Z"}});
        assert_eq!(
            builtin_row(
                "apiextensions.k8s.io",
                "CustomResourceDefinition",
                &crd,
                NOW
            ),
            vec![
                json!("portmappings.portmapper.dev"),
                json!("2026-01-02T03:04:05Z")
            ]
        );
        let cols = builtin_columns("apiextensions.k8s.io", "CustomResourceDefinition");
        assert_eq!(
            (cols[1].name.as_str(), cols[1].type_.as_str()),
            ("Created At", "date")
        );
        let ev = json!({"metadata": {"name": "web.1"}, "type": "Normal", "reason": "Published",
            "regarding": {"kind": "PortMapping", "name": "web"}, "note": "2 slices ",
            "reportingController": "portmapper.dev/operator", "reportingInstance": "pod-a",
            "eventTime": "2026-01-02T03:09:00.000000Z"});
        assert_eq!(
            builtin_row("events.k8s.io", "Event", &ev, NOW),
            vec![
                json!("60s"),
                json!("Normal"),
                json!("Published"),
                json!("portmapping/web"),
                json!(""),
                json!("portmapper.dev/operator, pod-a"),
                json!("2 slices"),
                json!("60s"),
                json!(1),
                json!("web.1")
            ]
        );
    }
}
