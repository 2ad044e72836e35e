//! `last-change-trigger-time` with a manual clock: the latest timestamped cause of a write,
//! never later than the write; `now` for causes without a timestamp; unchanged slices keep theirs.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use portmapper_core::PlanWarning;

use crate::fixtures::*;

const TRIGGER: &str = "endpoints.kubernetes.io/last-change-trigger-time";

fn world() -> World {
    World::new(port_mapping(&["http", "https"]), web_service(), seed_pods())
}

fn trigger(w: &World, slice: &str) -> String {
    w.slice(slice)
        .and_then(|s| s.metadata.annotations.as_ref()?.get(TRIGGER).cloned())
        .expect("a written slice has a trigger time")
}

/// `secs` before the world's clock.
fn ago(w: &World, secs: i64) -> Timestamp {
    w.now - SignedDuration::from_secs(secs)
}

fn tick(w: &mut World, secs: i64) {
    w.now += SignedDuration::from_secs(secs);
}

/// Sets the pod's Ready condition, transitioned at `at` (as kubelet does).
fn set_ready(w: &mut World, pod: &str, ready: bool, at: Timestamp) {
    let conditions = w
        .pod_mut(pod)
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
        .expect("fixture pods have conditions");
    conditions[0].status = if ready { "True" } else { "False" }.into();
    conditions[0].last_transition_time = Some(Time(at));
}

#[test]
fn created_slices_are_stamped_with_the_write() {
    let mut w = world();
    // Old transitions were never waiting for a slice that did not exist.
    let long_ago = ago(&w, 3600);
    set_ready(&mut w, "pod-a", true, long_ago);
    w.step();
    assert_eq!(trigger(&w, "web.http"), w.now.to_string());
    assert_eq!(trigger(&w, "web.https"), w.now.to_string());
}

#[test]
fn a_ready_transition_stamps_its_own_time_and_the_other_slice_keeps_its_own() {
    let mut w = world();
    w.step();
    let created = w.now.to_string();
    tick(&mut w, 60);
    // pod-a (http only) went unready 7 s before this reconcile saw it.
    let flipped = ago(&w, 7);
    set_ready(&mut w, "pod-a", false, flipped);
    let p = w.step();
    assert_eq!(
        actions(&p),
        vec![
            ("web.http".into(), "update"),
            ("web.https".into(), "unchanged")
        ]
    );
    assert_eq!(trigger(&w, "web.http"), flipped.to_string());
    assert_eq!(trigger(&w, "web.https"), created);
    // Back to Ready: the new transition, not the old one.
    tick(&mut w, 60);
    let back = ago(&w, 2);
    set_ready(&mut w, "pod-a", true, back);
    w.step();
    assert_eq!(trigger(&w, "web.http"), back.to_string());
}

#[test]
fn several_changes_in_one_write_give_the_latest_of_them() {
    let mut w = world();
    w.step();
    tick(&mut w, 60);
    let (first, second) = (ago(&w, 30), ago(&w, 10));
    set_ready(&mut w, "pod-a", false, first);
    set_ready(&mut w, "pod-b", false, second);
    w.step();
    assert_eq!(trigger(&w, "web.http"), second.to_string());
    // pod-b is the only change on https.
    assert_eq!(trigger(&w, "web.https"), second.to_string());
}

#[test]
fn a_kubelet_clock_ahead_of_ours_is_capped_at_the_write() {
    let mut w = world();
    w.step();
    tick(&mut w, 60);
    let ahead = w.now + SignedDuration::from_secs(5);
    set_ready(&mut w, "pod-a", false, ahead);
    w.step();
    assert_eq!(trigger(&w, "web.http"), w.now.to_string());
}

#[test]
fn a_change_without_a_timestamp_is_stamped_when_observed_not_with_a_stale_transition() {
    let mut w = world();
    let old = ago(&w, 600);
    set_ready(&mut w, "pod-d", true, old);
    w.step();
    tick(&mut w, 60);
    // pod-d starts listing http: an annotation edit has no time; its Ready transition is older
    // than what the slice already reflects, so it is not the cause.
    w.pod_mut("pod-d")
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(PORTS_KEY.into(), "http,https".into());
    w.step();
    assert_eq!(trigger(&w, "web.http"), w.now.to_string());
}

#[test]
fn a_deletion_is_stamped_with_the_request_and_a_vanished_pod_with_its_observation() {
    let mut w = world();
    w.step();
    tick(&mut w, 60);
    // `kubectl delete` 3 s ago with a 30 s grace period: deletionTimestamp is 27 s ahead.
    let requested = ago(&w, 3);
    let pod = w.pod_mut("pod-a");
    pod.metadata.deletion_timestamp = Some(Time(requested + SignedDuration::from_secs(30)));
    pod.metadata.deletion_grace_period_seconds = Some(30);
    w.step();
    assert_eq!(trigger(&w, "web.http"), requested.to_string());
    // The pod object goes: nothing in the inputs dates that, so this reconcile does.
    tick(&mut w, 30);
    w.pods
        .retain(|p| p.metadata.name.as_deref() != Some("pod-a"));
    w.step();
    assert_eq!(
        pod_names(w.slice("web.http").unwrap()),
        vec!["pod-b", "pod-c"]
    );
    assert_eq!(trigger(&w, "web.http"), w.now.to_string());
}

#[test]
fn a_new_pod_is_stamped_with_its_latest_transition() {
    let mut w = world();
    w.step();
    tick(&mut w, 60);
    let (created, ready) = (ago(&w, 20), ago(&w, 4));
    let mut pod = PodBuilder::new("pod-e", &["10.0.0.5"])
        .ports("http")
        .build();
    pod.metadata.creation_timestamp = Some(Time(created));
    w.pods.push(pod);
    set_ready(&mut w, "pod-e", true, ready);
    let p = w.step();
    assert_eq!(
        actions(&p),
        vec![
            ("web.http".into(), "update"),
            ("web.https".into(), "unchanged")
        ]
    );
    assert_eq!(trigger(&w, "web.http"), ready.to_string());
}

#[test]
fn a_service_change_is_stamped_when_observed() {
    let mut w = world();
    let old = ago(&w, 600);
    set_ready(&mut w, "pod-a", true, old);
    w.step();
    tick(&mut w, 60);
    // A Service label reaches every slice: no pod caused it.
    w.service
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("tier".into(), "front".into());
    let p = w.step();
    assert_eq!(p.writes(), 2);
    assert_eq!(trigger(&w, "web.http"), w.now.to_string());
    assert_eq!(trigger(&w, "web.https"), w.now.to_string());
}

#[test]
fn a_ports_entry_naming_no_service_port_is_warned_with_the_service_ports() {
    let mut w = World::new(
        port_mapping(&["htttp", "https", "admin"]),
        web_service(),
        seed_pods(),
    );
    let p = w.step();
    let unknown = PlanWarning::UnknownPort {
        entries: vec!["htttp".into(), "admin".into()],
        service_ports: vec!["http".into(), "https".into()],
    };
    assert_eq!(p.warnings, vec![unknown.clone()]);
    assert_eq!(
        unknown.to_string(),
        "spec.ports names \"htttp\", \"admin\" but the Service has no such port (its ports are \"http\", \"https\"); those checks apply to nothing and unlisted ports use spec.defaultChecks / spec.unlistedPorts"
    );
    // The typos removed: the warning goes.
    w.pm.spec.ports.retain(|r| r.name == "https");
    assert!(w.plan().warnings.is_empty());
    // A Service port renamed under the PortMapping: warned again.
    w.service.spec.as_mut().unwrap().ports.as_mut().unwrap()[1].name = Some("tls".into());
    assert_eq!(
        w.plan().warnings,
        vec![PlanWarning::UnknownPort {
            entries: vec!["https".into()],
            service_ports: vec!["http".into(), "tls".into()],
        }]
    );
}
