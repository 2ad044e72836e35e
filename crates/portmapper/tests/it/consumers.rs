//! Consumer caveats (docs/consumers.md): the `ConsumerCaveat` condition for Istio ambient
//! appears when a published pod is enrolled in ambient while the ports have different members,
//! clears when either stops holding, and each appearance gives exactly one Warning Event.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde_json::json;

use crate::harness::*;

const T: Duration = Duration::from_secs(20);

async fn caveat(h: &Harness) -> Option<Condition> {
    h.portmapping("web")
        .await
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == "ConsumerCaveat")
}

/// Waits until the caveat is True with a message containing every one of `parts`.
async fn caveat_says(h: &Harness, parts: &[&str]) -> Condition {
    eventually(
        "ConsumerCaveat=True with the expected message",
        T,
        || async {
            caveat(h)
                .await
                .filter(|c| c.status == "True" && parts.iter().all(|p| c.message.contains(p)))
        },
    )
    .await
}

/// Occurrences of the `IstioAmbient` Warning Event: kube's recorder turns a repeat of the same
/// reason into a series count on the first Event object, so objects alone would hide a repeat.
async fn occurrences(h: &Harness) -> i32 {
    h.events("IstioAmbient")
        .await
        .iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum()
}

async fn enroll(h: &Harness, pod: &str) {
    h.patch_pod(
        pod,
        json!({"metadata": {"annotations": {"ambient.istio.io/redirection": "enabled"}}}),
    )
    .await;
}

async fn set_ports(h: &Harness, pod: &str, ports: &str) {
    h.patch_pod(
        pod,
        json!({"metadata": {"annotations": {"example.com/ports": ports}}}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn istio_ambient_caveat_appears_once_per_transition_and_clears() {
    let mut h = Harness::start().await;
    h.create(service("web", &[("http", 8080), ("https", 8443)]))
        .await;
    ready_pods(
        &h,
        "web",
        &[
            ("pod-a", "http", "10.244.0.1"),
            ("pod-b", "http,https", "10.244.0.2"),
            ("pod-c", "https", "10.244.0.3"),
        ],
    )
    .await;
    h.create(portmapping("web", "web")).await;
    eventually("per-port membership", T, || async {
        let m = h.membership("web").await;
        (m.get("web.http").is_some_and(|p| p == &["pod-a", "pod-b"])
            && m.get("web.https").is_some_and(|p| p == &["pod-b", "pod-c"]))
        .then_some(())
    })
    .await;
    eventually("Ready", T, || async {
        is_ready(&h, "web").await.then_some(())
    })
    .await;
    // Different members but no pod in ambient: nothing to report.
    assert_eq!(caveat(&h).await, None);
    assert_eq!(occurrences(&h).await, 0);

    // One published pod enrolled in ambient: the condition names both ports and what ambient
    // adds to each; one Warning Event carries the same message.
    enroll(&h, "pod-a").await;
    let first = caveat_says(
        &h,
        &[
            "pods pod-a carry ambient.istio.io/redirection=enabled",
            "port http (2 published) also reaches pod-c",
            "port https (2 published) also reaches pod-a",
        ],
    )
    .await;
    assert_eq!(first.reason, "IstioAmbient");
    let events = h.events("IstioAmbient").await;
    assert_eq!(
        occurrences(&h).await,
        1,
        "one Warning Event for the transition"
    );
    assert_eq!(events[0].type_.as_deref(), Some("Warning"));
    assert_eq!(events[0].note.as_deref(), Some(first.message.as_str()));

    // Another pass that writes (pod-c leaves https) while the caveat still holds: the message
    // follows, the transition time and the Event count do not move.
    let writes = h.operator_writes().await;
    set_ports(&h, "pod-c", "").await;
    let second = caveat_says(&h, &["port https (1 published) also reaches pod-a"]).await;
    assert!(
        h.operator_writes().await > writes,
        "the pass wrote the new membership"
    );
    assert_eq!(second.last_transition_time, first.last_transition_time);
    assert_eq!(occurrences(&h).await, 1, "no Event per pass");

    // A restarted operator (fresh memory, as after a leader change) finds the condition already
    // True in the status and announces nothing; a write it makes proves it has reconciled.
    h.stop_controller().await;
    h.run_controller();
    set_ports(&h, "pod-b", "http").await;
    caveat_says(&h, &["port https (0 published) also reaches pod-a, pod-b"]).await;
    assert_eq!(occurrences(&h).await, 1, "no Event after a restart");

    // Every pod on every port: ambient's view equals ours, the condition goes away.
    for pod in ["pod-a", "pod-b", "pod-c"] {
        set_ports(&h, pod, "http,https").await;
    }
    eventually("every pod on both ports", T, || async {
        let m = h.membership("web").await;
        (m.get("web.http").map(Vec::len) == Some(3) && m.get("web.https").map(Vec::len) == Some(3))
            .then_some(())
    })
    .await;
    eventually("ConsumerCaveat cleared", T, || async {
        caveat(&h).await.is_none().then_some(())
    })
    .await;
    assert_eq!(occurrences(&h).await, 1);

    // Ports differ again: a new transition, a second Event.
    set_ports(&h, "pod-c", "https").await;
    caveat_says(&h, &["port http (2 published) also reaches pod-c"]).await;
    // The pass publishes its Events before it writes the status just observed.
    assert_eq!(occurrences(&h).await, 2);
}
