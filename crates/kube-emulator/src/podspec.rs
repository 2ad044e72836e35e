//! Pod defaulting (`SetDefaults_Pod`, `SetDefaults_PodSpec`, `SetDefaults_Container`,
//! `SetDefaults_Probe`, `SetDefaults_HTTPGetAction`, `SetDefaults_PodStatus` of
//! k8s.io/kubernetes/pkg/apis/core/v1): fields the writer owns.

use serde_json::{Value, json};

use crate::defaults::set_default;

/// Defaults a Pod's spec and status.
pub fn default_pod(obj: &mut Value) {
    if let Some(spec) = obj.get_mut("spec") {
        default_spec(spec);
    }
    if let Some(status) = obj.get_mut("status") {
        default_status(status);
    }
}

fn default_spec(spec: &mut Value) {
    // DeprecatedServiceAccount mirrors ServiceAccountName, which wins.
    let account = spec
        .get("serviceAccountName")
        .or_else(|| spec.get("serviceAccount"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    if let (Some(account), Value::Object(m)) = (account, &mut *spec) {
        m.insert("serviceAccountName".into(), json!(account));
        m.insert("serviceAccount".into(), json!(account));
    }
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "enableServiceLinks", json!(true));
    if spec
        .get("terminationGracePeriodSeconds")
        .and_then(Value::as_i64)
        .is_some_and(|g| g < 0)
        && let Value::Object(m) = spec
    {
        m.insert("terminationGracePeriodSeconds".into(), json!(1));
    }
    for v in spec
        .get_mut("volumes")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        default_volume(v);
    }
    let host_network = spec.get("hostNetwork").and_then(Value::as_bool) == Some(true);
    for list in ["containers", "initContainers"] {
        for c in spec
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            default_container(c, host_network);
        }
    }
}

/// `SetDefaults_Volume` (no source: an emptyDir) and the volume sources' file modes (0644).
fn default_volume(v: &mut Value) {
    const SOURCES: [&str; 4] = ["configMap", "secret", "downwardAPI", "projected"];
    let Value::Object(m) = v else { return };
    if m.keys().all(|k| k == "name") {
        m.insert("emptyDir".into(), json!({}));
    }
    for source in SOURCES {
        if let Some(s) = m.get_mut(source) {
            set_default(s, "defaultMode", json!(420));
        }
    }
}

fn default_container(c: &mut Value, host_network: bool) {
    let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
    let policy = if image_tag(image) == "latest" {
        "Always"
    } else {
        "IfNotPresent"
    };
    set_default(c, "imagePullPolicy", json!(policy));
    set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(c, "terminationMessagePolicy", json!("File"));
    for p in c
        .get_mut("ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        set_default(p, "protocol", json!("TCP"));
        if host_network && let Some(port) = p.get("containerPort").cloned() {
            set_default(p, "hostPort", port);
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe) {
            default_probe(p);
        }
    }
    // Requests default to the limits they omit.
    let limits = c
        .pointer("/resources/limits")
        .and_then(Value::as_object)
        .cloned();
    if let (Some(limits), Some(resources)) = (limits, c.get_mut("resources")) {
        set_default(resources, "requests", json!({}));
        if let Some(Value::Object(requests)) = resources.get_mut("requests") {
            for (k, v) in limits {
                requests.entry(k).or_insert(v);
            }
        }
    }
}

fn default_probe(p: &mut Value) {
    for (key, v) in [
        ("timeoutSeconds", 1),
        ("periodSeconds", 10),
        ("successThreshold", 1),
        ("failureThreshold", 3),
    ] {
        if p.get(key).is_none_or(|x| x.is_null() || *x == json!(0))
            && let Value::Object(m) = p
        {
            m.insert(key.into(), json!(v));
        }
    }
    if let Some(get) = p.get_mut("httpGet") {
        set_default(get, "path", json!("/"));
        set_default(get, "scheme", json!("HTTP"));
    }
}

/// The tag `ParseImageName` finds: `latest` when the reference names none (and no digest).
fn image_tag(image: &str) -> &str {
    let (name, digest) = match image.split_once('@') {
        Some((n, _)) => (n, true),
        None => (image, false),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    match last.split_once(':') {
        Some((_, tag)) => tag,
        None if digest => "",
        None => "latest",
    }
}

/// `podIP` and `podIPs[0]` agree; `podIP` wins when both are set.
fn default_status(status: &mut Value) {
    let ip = status
        .get("podIP")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let first = status
        .pointer("/podIPs/0/ip")
        .and_then(Value::as_str)
        .map(str::to_string);
    let Value::Object(m) = status else { return };
    match (ip.is_empty(), first) {
        (false, None) => {
            m.insert("podIPs".into(), json!([{"ip": ip}]));
        }
        (true, Some(first)) => {
            m.insert("podIP".into(), json!(first));
        }
        (false, Some(first)) if first != ip => {
            m.insert("podIPs".into(), json!([{"ip": ip}]));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_tags_decide_the_pull_policy() {
        assert_eq!(image_tag("nginx"), "latest");
        assert_eq!(image_tag("nginx:1.27"), "1.27");
        assert_eq!(image_tag("registry:5000/app"), "latest");
        assert_eq!(image_tag("registry:5000/app:v2"), "v2");
        assert_eq!(image_tag("app@sha256:abc"), "");
    }

    #[test]
    fn pod_ip_wins_over_a_mismatched_list() {
        let mut s = json!({"podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.2"}, {"ip": "x"}]});
        default_status(&mut s);
        assert_eq!(s["podIPs"], json!([{"ip": "10.0.0.1"}]));
    }
}
