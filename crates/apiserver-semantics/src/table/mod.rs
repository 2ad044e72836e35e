//! Server-side `Table` output (docs/emulator-spec.md §5.7): CRD `additionalPrinterColumns`
//! (apiextensions `tableconvertor`) and the built-in printers of kube-apiserver
//! (`pkg/printers/internalversion`) for the kinds the emulator serves; other kinds get the
//! apiserver default (Name, Created At). Ages use apimachinery's `HumanDuration`.

use crate::jsonpath::{JsonPath, to_text};
use serde_json::{Map, Value, json};

mod printers;

use printers::{builtin_columns, builtin_row, s};

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
