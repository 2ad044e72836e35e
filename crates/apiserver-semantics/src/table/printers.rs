//! The built-in printers of kube-apiserver (`pkg/printers/internalversion/printers.go`) for the
//! kinds the emulator serves, and the default table (Name, Created At) for the others.

use super::{AGE_DOC, Column, NAME_DOC, age, age_column, name_column};
use serde_json::{Map, Value, json};

pub(super) fn builtin_columns(group: &str, kind: &str) -> Vec<Column> {
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

pub(super) fn s(v: &Value) -> String {
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

pub(super) fn builtin_row(group: &str, kind: &str, o: &Value, now: &str) -> Vec<Value> {
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
