//! A tenant's pool keys cannot multiply the operator's pod watches: every pod watch is in the
//! PortMapping's own namespace (none cluster-wide, so no other namespace's pods are listed or
//! kept), and a namespace gets at most `maxPodWatchesPerNamespace` label keys, oldest first.
//! The PortMappings over the cap are Stalled with a reason naming it; another tenant's
//! published endpoints never empty. Counted in kube-apiserver's audit log.

use std::collections::BTreeSet;

use serde_json::json;
use test_support::realkube::AuditEvent;

use super::{Tenant, World, portmapping, service, victim, victim_unharmed};

const CAP: usize = 4;
const KEYS: usize = 10;

/// The operator's pod LIST and WATCH requests: (namespace, labelSelector), empty namespace for a
/// cluster-wide one. The operator is the only ServiceAccount of its release namespace.
fn pod_watches(world: &World) -> Vec<(String, String)> {
    let operator = format!("system:serviceaccount:{}-system:", world.admin.namespace);
    world
        .admin
        .plane()
        .audit()
        .into_iter()
        .filter(|e| e.user.username.starts_with(&operator))
        .filter(|e| e.object_ref.resource == "pods" && e.object_ref.subresource.is_empty())
        .filter(|e| e.verb == "watch" || e.verb == "list")
        .map(|e| (e.object_ref.namespace.clone(), selector(&e)))
        .collect()
}

/// The request's `labelSelector`, decoded (empty without one).
fn selector(e: &AuditEvent) -> String {
    let query = e.request_uri.split_once('?').map_or("", |(_, q)| q);
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix("labelSelector="))
        .map(|v| v.replace("%2F", "/").replace("%2f", "/"))
        .unwrap_or_default()
}

fn key(i: usize) -> String {
    format!("example.com/k{i}")
}

/// `KEYS` PortMappings `pm-<i>`, each of its own Service, each with its own label key.
fn many_keys(a: &Tenant<'_>) {
    for i in 0..KEYS {
        let name = format!("pm-{i}");
        a.create(&service(&name, [80]));
        a.create(&portmapping(&name, &key(i), json!({})));
    }
}

#[test]
fn a_tenants_label_keys_open_namespaced_pod_watches_up_to_the_cap() {
    let values = json!({"maxPodWatchesPerNamespace": CAP});
    let Some(world) = World::start("tenant-watches", &values, &[]) else {
        return;
    };
    // The victim, in its own namespace, published and watched from now on.
    let (b, watch) = victim(&world);

    // The attacker: ten keys. Its pod of key k4 (over the cap) waits unwatched.
    let a = world.tenant("a");
    a.ready_pod("pm-4-1", json!({key(4): "pm-4"}), json!({}), "10.244.2.4");
    many_keys(&a);
    for i in CAP..KEYS {
        let (reason, message) = a.wait_condition(&format!("pm-{i}"), "Stalled", "True");
        assert_eq!(reason, "TooManyPodWatches", "{message}");
        for part in [
            format!("{:?}", key(i)),
            format!("at most {CAP} label keys per namespace"),
            format!("namespace {} use {CAP} others", a.namespace),
            "--max-pod-watches-per-namespace".to_owned(),
        ] {
            assert!(message.contains(&part), "{part} not in {message}");
        }
    }
    for i in 0..CAP {
        a.wait_condition(&format!("pm-{i}"), "Stalled", "False");
    }
    assert!(
        a.published("pm-4").is_empty(),
        "an unwatched pool publishes nothing"
    );

    let requests = pod_watches(&world);
    let cluster_wide: Vec<_> = requests.iter().filter(|(ns, _)| ns.is_empty()).collect();
    eprintln!(
        "operator pod LIST/WATCH requests: {} in all, {} cluster-wide",
        requests.len(),
        cluster_wide.len()
    );
    assert!(
        cluster_wide.is_empty(),
        "cluster-wide pod watches: {cluster_wide:?}"
    );
    let in_a: BTreeSet<&str> = requests
        .iter()
        .filter(|(ns, _)| *ns == a.namespace)
        .map(|(_, s)| s.as_str())
        .collect();
    let watched: Vec<String> = (0..CAP).map(key).collect();
    assert_eq!(
        in_a,
        watched.iter().map(String::as_str).collect(),
        "the attacker's namespace gets the {CAP} oldest keys' watches, no more"
    );

    // A key under the cap goes: the oldest key over it is watched, and its pod published.
    a.ok(&["delete", "portmapping", "pm-0"]);
    a.wait_condition("pm-4", "Stalled", "False");
    world.wait_for("the newly watched key's pod published", || {
        a.published("pm-4").get("p80").is_some_and(|p| p.len() == 1)
    });
    assert_eq!(a.condition("pm-5", "Stalled").1, "TooManyPodWatches");

    // The victim is served as before and never lost an endpoint.
    victim_unharmed(&world, &b, &watch);
}
