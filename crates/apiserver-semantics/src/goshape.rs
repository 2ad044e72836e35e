//! The fields Go's `encoding/json` always writes for a built-in object: fields without
//! `omitempty`, value structs (`omitempty` has no effect on them) and `metav1.Time`/`MicroTime`
//! values (written as `null` when zero). A real API server decodes every request into the Go type
//! and encodes what it stores, so an EndpointSlice sent without `endpoints` comes back with
//! `"endpoints": null`, a pod condition with `"lastProbeTime": null`, a Node with an empty
//! `status.nodeInfo`. [`fill`] gives a JSON object that shape; [`empty`] is the shape of an empty
//! object, the baseline server-side apply compares a create against (a field that exists in the
//! empty Go object is not "added" by a create, so its managedFields entry has no `.`).
//!
//! The table covers the kinds the emulator serves, read from the `json` tags of k8s.io/api
//! v0.37.2 (core/v1, discovery/v1, coordination/v1, events/v1); pointer fields and `omitempty`
//! scalars, slices and maps are absent when unset and need no entry.

use serde_json::{Map, Value, json};

/// The zero value Go writes for a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Zero {
    /// A nil slice, map or pointer, or a zero `metav1.Time`/`MicroTime`.
    Null,
    /// `""`.
    Str,
    /// `0`.
    Int,
    /// `false`.
    Bool,
    /// A value struct: `{}` (its own fields follow in the table).
    Obj,
}

use Zero::{Bool, Int, Null, Obj, Str};

/// A container's fields (Container: `name`; value struct `resources`; port and env items).
const CONTAINER: &[(&str, Zero)] = &[
    ("name", Str),
    ("resources", Obj),
    ("ports/[]/containerPort", Int),
    ("env/[]/name", Str),
];

/// ContainerStatus.
const CONTAINER_STATUS: &[(&str, Zero)] = &[
    ("name", Str),
    ("state", Obj),
    ("lastState", Obj),
    ("ready", Bool),
    ("restartCount", Int),
    ("image", Str),
    ("imageID", Str),
];

const POD: &[(&str, Zero)] = &[
    ("spec", Obj),
    ("spec/containers", Null),
    ("spec/readinessGates/[]/conditionType", Str),
    ("status", Obj),
    ("status/conditions/[]/type", Str),
    ("status/conditions/[]/status", Str),
    ("status/conditions/[]/lastProbeTime", Null),
    ("status/conditions/[]/lastTransitionTime", Null),
    ("status/podIPs/[]/ip", Str),
    ("status/hostIPs/[]/ip", Str),
];

const NODE: &[(&str, Zero)] = &[
    ("spec", Obj),
    ("spec/taints/[]/key", Str),
    ("spec/taints/[]/effect", Str),
    ("status", Obj),
    ("status/conditions/[]/type", Str),
    ("status/conditions/[]/status", Str),
    ("status/conditions/[]/lastHeartbeatTime", Null),
    ("status/conditions/[]/lastTransitionTime", Null),
    ("status/addresses/[]/type", Str),
    ("status/addresses/[]/address", Str),
    ("status/daemonEndpoints", Obj),
    ("status/daemonEndpoints/kubeletEndpoint", Obj),
    ("status/daemonEndpoints/kubeletEndpoint/Port", Int),
    ("status/nodeInfo", Obj),
    ("status/nodeInfo/machineID", Str),
    ("status/nodeInfo/systemUUID", Str),
    ("status/nodeInfo/bootID", Str),
    ("status/nodeInfo/kernelVersion", Str),
    ("status/nodeInfo/osImage", Str),
    ("status/nodeInfo/containerRuntimeVersion", Str),
    ("status/nodeInfo/kubeletVersion", Str),
    ("status/nodeInfo/kubeProxyVersion", Str),
    ("status/nodeInfo/operatingSystem", Str),
    ("status/nodeInfo/architecture", Str),
];

const SERVICE: &[(&str, Zero)] = &[
    ("spec", Obj),
    ("spec/ports/[]/port", Int),
    ("status", Obj),
    ("status/loadBalancer", Obj),
    ("status/conditions/[]/type", Str),
    ("status/conditions/[]/status", Str),
    ("status/conditions/[]/lastTransitionTime", Null),
    ("status/conditions/[]/reason", Str),
    ("status/conditions/[]/message", Str),
];

const NAMESPACE: &[(&str, Zero)] = &[
    ("spec", Obj),
    ("status", Obj),
    ("status/conditions/[]/type", Str),
    ("status/conditions/[]/status", Str),
    ("status/conditions/[]/lastTransitionTime", Null),
];

const ENDPOINTS: &[(&str, Zero)] = &[
    ("subsets/[]/addresses/[]/ip", Str),
    ("subsets/[]/notReadyAddresses/[]/ip", Str),
    ("subsets/[]/ports/[]/port", Int),
];

const ENDPOINT_SLICE: &[(&str, Zero)] = &[
    ("addressType", Str),
    ("endpoints", Null),
    ("endpoints/[]/addresses", Null),
    ("endpoints/[]/conditions", Obj),
    ("ports", Null),
];

const LEASE: &[(&str, Zero)] = &[("spec", Obj)];

const CORE_EVENT: &[(&str, Zero)] = &[
    ("involvedObject", Obj),
    ("source", Obj),
    ("firstTimestamp", Null),
    ("lastTimestamp", Null),
    ("eventTime", Null),
    ("reportingComponent", Str),
    ("reportingInstance", Str),
];

const EVENT: &[(&str, Zero)] = &[
    ("eventTime", Null),
    ("regarding", Obj),
    ("deprecatedSource", Obj),
    ("deprecatedFirstTimestamp", Null),
    ("deprecatedLastTimestamp", Null),
];

fn table(group: &str, kind: &str) -> &'static [(&'static str, Zero)] {
    match (group, kind) {
        ("", "Pod") => POD,
        ("", "Node") => NODE,
        ("", "Service") => SERVICE,
        ("", "Namespace") => NAMESPACE,
        ("", "Endpoints") => ENDPOINTS,
        ("", "Event") => CORE_EVENT,
        ("discovery.k8s.io", "EndpointSlice") => ENDPOINT_SLICE,
        ("coordination.k8s.io", "Lease") => LEASE,
        ("events.k8s.io", "Event") => EVENT,
        _ => &[],
    }
}

fn zero(z: Zero) -> Value {
    match z {
        Null => Value::Null,
        Str => json!(""),
        Int => json!(0),
        Bool => json!(false),
        Obj => Value::Object(Map::new()),
    }
}

/// Gives `obj`, a `group`/`kind` object, the shape of a stored built-in: empty lists are gone
/// (the protobuf encoding in etcd keeps no empty repeated field, so they come back nil), then
/// the fields Go always writes are added where absent.
pub fn fill(group: &str, kind: &str, obj: &mut Value) {
    drop_empty_lists(obj);
    add_zero_fields(group, kind, obj);
}

fn drop_empty_lists(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, child| !matches!(child, Value::Array(a) if a.is_empty()));
            m.values_mut().for_each(drop_empty_lists);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_empty_lists),
        _ => {}
    }
}

fn add_zero_fields(group: &str, kind: &str, obj: &mut Value) {
    for (path, z) in table(group, kind) {
        let segments: Vec<&str> = path.split('/').collect();
        fill_at(obj, &segments, *z);
    }
    if (group, kind) == ("", "Pod") {
        fill_pod_containers(obj);
    }
}

/// Containers and container statuses share one table each, for every list that holds them.
fn fill_pod_containers(obj: &mut Value) {
    for (list, fields) in [
        ("spec/containers", CONTAINER),
        ("spec/initContainers", CONTAINER),
        ("status/containerStatuses", CONTAINER_STATUS),
        ("status/initContainerStatuses", CONTAINER_STATUS),
    ] {
        for (field, z) in fields {
            let path = format!("{list}/[]/{field}");
            let segments: Vec<&str> = path.split('/').collect();
            fill_at(obj, &segments, *z);
        }
    }
}

fn fill_at(v: &mut Value, segments: &[&str], z: Zero) {
    match segments {
        [] => {}
        ["[]", rest @ ..] => {
            if let Value::Array(items) = v {
                for item in items {
                    fill_at(item, rest, z);
                }
            }
        }
        [last] => {
            if let Value::Object(m) = v
                && !m.contains_key(*last)
            {
                m.insert((*last).to_owned(), zero(z));
            }
        }
        [first, rest @ ..] => {
            if let Some(child) = v.get_mut(*first) {
                fill_at(child, rest, z);
            }
        }
    }
}

/// The JSON of an empty `group`/`kind` object as Go writes it (less `apiVersion`, `kind` and
/// `metadata`).
pub fn empty(group: &str, kind: &str) -> Value {
    let mut v = Value::Object(Map::new());
    add_zero_fields(group, kind, &mut v);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_absent_fields_only() {
        let mut slice = json!({"addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"]},
            {"addresses": ["10.0.0.2"], "conditions": {"ready": true}}]});
        fill("discovery.k8s.io", "EndpointSlice", &mut slice);
        assert_eq!(
            slice,
            json!({"addressType": "IPv4", "ports": null,
                "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {}},
                    {"addresses": ["10.0.0.2"], "conditions": {"ready": true}}]})
        );
    }

    #[test]
    fn empty_lists_come_back_nil() {
        let mut slice = json!({"addressType": "IPv4", "endpoints": [], "ports": [{"port": 80}],
            "metadata": {"finalizers": []}});
        fill("discovery.k8s.io", "EndpointSlice", &mut slice);
        assert_eq!(
            slice,
            json!({"addressType": "IPv4", "endpoints": null, "ports": [{"port": 80}],
                "metadata": {}})
        );
    }

    #[test]
    fn pod_containers_and_conditions() {
        let mut pod = json!({"spec": {"containers": [{"name": "a", "image": "x"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "a", "ready": true}]}});
        fill("", "Pod", &mut pod);
        assert_eq!(pod["spec"]["containers"][0]["resources"], json!({}));
        assert_eq!(
            pod["status"]["conditions"][0],
            json!({"type": "Ready", "status": "True", "lastProbeTime": null,
                "lastTransitionTime": null})
        );
        assert_eq!(
            pod["status"]["containerStatuses"][0],
            json!({"name": "a", "ready": true, "state": {}, "lastState": {},
                "restartCount": 0, "image": "", "imageID": ""})
        );
    }

    #[test]
    fn empty_objects() {
        assert_eq!(
            empty("", "Pod"),
            json!({"spec": {"containers": null}, "status": {}})
        );
        assert_eq!(empty("", "ConfigMap"), json!({}));
        assert_eq!(
            empty("", "Node")["status"]["daemonEndpoints"],
            json!({"kubeletEndpoint": {"Port": 0}})
        );
    }
}
