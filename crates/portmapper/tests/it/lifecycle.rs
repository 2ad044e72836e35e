//! The canonical scenario: a,b,c → http and b,c,d → https, then pods move.

use std::time::Duration;

use crate::harness::*;

async fn canonical() -> Harness {
    let h = Harness::start().await;
    h.create(service("my-service", &[("http", 8080), ("https", 8443)]))
        .await;
    ready_pods(
        &h,
        "my-service",
        &[
            ("pod-a", "http", "10.244.0.1"),
            ("pod-b", "http,https", "10.244.0.2"),
            ("pod-c", "http,https", "10.244.0.3"),
            ("pod-d", "https", "10.244.0.4"),
        ],
    )
    .await;
    h.create(portmapping("my-service", "my-service")).await;
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_one_slice_per_port_with_per_port_members() {
    let h = canonical().await;
    let want = [
        (
            "my-service.http".to_string(),
            vec!["pod-a", "pod-b", "pod-c"],
        ),
        (
            "my-service.https".to_string(),
            vec!["pod-b", "pod-c", "pod-d"],
        ),
    ];
    let got = eventually("per-port slices", Duration::from_secs(15), || async {
        let m = h.membership("my-service").await;
        let ok = want.iter().all(|(n, pods)| {
            m.get(n)
                .map(|v| v.iter().map(String::as_str).eq(pods.iter().copied()))
                .unwrap_or(false)
        });
        ok.then_some(m)
    })
    .await;
    assert_eq!(got.len(), 2, "{got:?}");
    let slices = h.slices("my-service").await;
    for s in &slices {
        let labels = s.metadata.labels.as_ref().unwrap();
        assert_eq!(
            labels["endpointslice.kubernetes.io/managed-by"],
            "portmapper.dev"
        );
        assert_eq!(labels["kubernetes.io/service-name"], "my-service");
        assert_eq!(
            labels["app.kubernetes.io/name"], "my-service",
            "Service labels are copied"
        );
        let owner = &s.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("PortMapping", Some(true))
        );
        assert_eq!(s.ports.as_ref().unwrap().len(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_per_port_counts_and_ready() {
    let h = canonical().await;
    let pm = eventually("Ready status", Duration::from_secs(15), || async {
        let pm = h.portmapping("my-service").await;
        let status = pm.status.clone()?;
        let ready = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        (ready && status.ports.len() == 2).then_some(pm)
    })
    .await;
    let status = pm.status.unwrap();
    assert_eq!(status.observed_generation, pm.metadata.generation);
    assert_eq!(status.summary.as_deref(), Some("http 3/4, https 3/4"));
    let http = status.ports.iter().find(|p| p.name == "http").unwrap();
    assert_eq!((http.ready, http.not_ready, http.candidates), (3, 0, 4));
    assert_eq!(http.excluded.len(), 1);
    assert_eq!(http.excluded[0].pod, "pod-d");
    assert!(
        http.excluded[0].reason.contains("portNames"),
        "{:?}",
        http.excluded[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_annotation_and_readiness_changes() {
    let h = canonical().await;
    eventually("initial slices", Duration::from_secs(15), || async {
        (h.membership("my-service").await.len() == 2).then_some(())
    })
    .await;
    h.patch_pod(
        "pod-a",
        serde_json::json!({"metadata": {"annotations": {"example.com/ports": "http,https"}}}),
    )
    .await;
    h.set_pod_status("pod-c", &["10.244.0.3"], false).await;
    eventually(
        "pod-a joins https, pod-c leaves both",
        Duration::from_secs(15),
        || async {
            let m = h.membership("my-service").await;
            (m.get("my-service.http") == Some(&vec!["pod-a".into(), "pod-b".into()])
                && m.get("my-service.https")
                    == Some(&vec!["pod-a".into(), "pod-b".into(), "pod-d".into()]))
            .then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converged_state_issues_no_writes() {
    let h = canonical().await;
    eventually("converged", Duration::from_secs(15), || async {
        let pm = h.portmapping("my-service").await;
        pm.status?
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
            .then_some(())
    })
    .await;
    // Let any in-flight pass finish, then count writes across two more passes.
    h.passes(1).await;
    let before = h.operator_writes().await;
    assert!(
        before >= 3,
        "the counter sees our writes (2 slices + status), got {before}"
    );
    h.passes(2).await;
    assert_eq!(
        h.operator_writes().await,
        before,
        "a converged PortMapping must not write"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_controller_adopts_its_slices_without_writing() {
    let mut h = canonical().await;
    eventually("converged", Duration::from_secs(15), || async {
        let pm = h.portmapping("my-service").await;
        pm.status?
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
            .then_some(())
    })
    .await;
    let slices_before = h.slices("my-service").await;
    h.stop_controller().await;
    let before = h.operator_writes().await;
    h.run_controller();
    // The new controller's first pass and a resync.
    h.passes(2).await;
    let writes: Vec<String> = h
        .operator_requests()
        .await
        .iter()
        .skip(before)
        .map(|r| format!("{} {}/{} {}", r.verb, r.resource, r.name, r.subresource))
        .collect();
    assert_eq!(
        writes,
        Vec::<String>::new(),
        "a restart must not rewrite converged objects"
    );
    let slices_after = h.slices("my-service").await;
    let rv = |v: &[k8s_openapi::api::discovery::v1::EndpointSlice]| {
        v.iter()
            .map(|s| s.metadata.resource_version.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(rv(&slices_before), rv(&slices_after));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_report_published_endpoints_and_decisions() {
    let h = canonical().await;
    eventually("converged", Duration::from_secs(15), || async {
        let pm = h.portmapping("my-service").await;
        pm.status?
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
            .then_some(())
    })
    .await;
    let text = h.metrics.encode().unwrap();
    let value = |series: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
    };
    let ns = &h.ns;
    let http = format!(
        r#"portmapper_endpoints_published{{namespace="{ns}",service="my-service",port="http",address_type="IPv4"}}"#
    );
    assert_eq!(value(&http), 3.0);
    let slices =
        format!(r#"portmapper_endpointslices_managed{{namespace="{ns}",service="my-service"}}"#);
    assert_eq!(value(&slices), 2.0);
    let checks = |decision: &str| {
        format!(
            r#"portmapper_membership_checks_total{{namespace="{ns}",service="my-service",decision="{decision}"}}"#
        )
    };
    assert!(value(&checks("include")) >= 6.0, "{text}");
    assert!(value(&checks("exclude")) >= 2.0, "{text}");
    assert!(value("portmapper_reconcile_total{result=\"success\"}") >= 1.0);
    assert!(
        text.contains("portmapper_api_writes_total{verb=\"create\",resource=\"endpointslices\"}")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metric_series_go_with_their_port_and_their_portmapping() {
    let h = canonical().await;
    let https = format!(
        r#"portmapper_endpoints_published{{namespace="{}",service="my-service",port="https",address_type="IPv4"}} 3"#,
        h.ns
    );
    eventually("https series", Duration::from_secs(15), || async {
        h.metrics_text().contains(&https).then_some(())
    })
    .await;
    // The Service drops its https port: that port's series goes, http's stays.
    let services: kube::Api<k8s_openapi::api::core::v1::Service> =
        kube::Api::namespaced(h.client.clone(), &h.ns);
    services
        .patch(
            "my-service",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"ports": [{"name": "http", "port": 8080, "targetPort": 8080}]}})),
        )
        .await
        .unwrap();
    eventually("https series removed", Duration::from_secs(15), || async {
        let text = h.metrics_text();
        (!text.contains(r#"port="https""#) && text.contains(r#"port="http""#)).then_some(())
    })
    .await;
    // The PortMapping goes: every series of its Service goes.
    let pms: kube::Api<portmapper_api::PortMapping> =
        kube::Api::namespaced(h.client.clone(), &h.ns);
    pms.delete("my-service", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "no series of my-service",
        Duration::from_secs(15),
        || async { (!h.metrics_text().contains(r#"service="my-service""#)).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_converged_portmapping_is_looked_at_again_every_resync() {
    let h = canonical().await;
    // A pass that finds nothing changed since one that wrote nothing is a quiet one.
    let successes = || {
        h.metric(r#"portmapper_reconcile_total{result="success"}"#)
            .unwrap_or(0.0)
            + h.metric(r#"portmapper_reconcile_total{result="quiet"}"#)
                .unwrap_or(0.0)
    };
    eventually("converged", Duration::from_secs(15), || async {
        (successes() >= 1.0).then_some(())
    })
    .await;
    // Two more passes: the later one started after the converging pass's writes were
    // answered (its status write's echo included).
    h.passes(2).await;
    let (before, writes) = (successes(), h.operator_writes().await);
    // Nothing changes from here: only the resync (2 s in the harness) brings passes, and
    // none of them writes. Counted, not timed.
    h.passes(3).await;
    assert!(successes() - before >= 3.0, "the passes were resyncs");
    assert_eq!(h.operator_writes().await, writes, "a resync wrote");
}

/// With a status window (the batch window, here 10 s), flips that each come more than a fifth
/// of it after the last write have their slices written at once, while their counts wait for
/// the window of the first status write to end: then the look-again, which no event brings,
/// writes them in one status write; the Ready condition never changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flips_inside_the_status_window_share_one_status_write() {
    let window = Duration::from_secs(10);
    let h = Harness::start_with(|s| {
        s.batch_window = window;
        // No resync look inside the window: only the status's own look-again may write it.
        s.resync = Duration::from_secs(300);
    })
    .await;
    h.create(service("my-service", &[("http", 8080), ("https", 8443)]))
        .await;
    ready_pods(
        &h,
        "my-service",
        &[
            ("pod-a", "http", "10.244.0.1"),
            ("pod-b", "http,https", "10.244.0.2"),
            ("pod-c", "http,https", "10.244.0.3"),
            ("pod-d", "https", "10.244.0.4"),
        ],
    )
    .await;
    h.create(portmapping("my-service", "my-service")).await;
    let ready = |pm: &portmapper_api::PortMapping| {
        let status = pm.status.as_ref()?;
        let counts: Vec<i32> = status.ports.iter().map(|p| p.ready).collect();
        let ready = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        ready.then_some(counts)
    };
    eventually("published", Duration::from_secs(15), || async {
        let pm = h.portmapping("my-service").await;
        (ready(&pm)? == [3, 3]).then_some(())
    })
    .await;
    let statuses = |requests: &[crate::requests::Request]| -> Vec<crate::requests::Request> {
        requests
            .iter()
            .filter(|r| r.resource == "portmappings" && r.subresource == "status")
            .cloned()
            .collect()
    };
    let first = statuses(&h.operator_requests().await);
    assert_eq!(first.len(), 1, "the first publication's status");
    let transition = |pm: &portmapper_api::PortMapping| {
        pm.status.as_ref().and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == "Ready")
                .map(|c| c.last_transition_time.clone())
        })
    };
    let ready_since = transition(&h.portmapping("my-service").await);

    // Two flips, each past a fifth of the window after the last write: each slice is written
    // at once.
    for (pod, ip, slice, members) in [
        (
            "pod-a",
            "10.244.0.1",
            "my-service.http",
            vec!["pod-b", "pod-c"],
        ),
        (
            "pod-d",
            "10.244.0.4",
            "my-service.https",
            vec!["pod-b", "pod-c"],
        ),
    ] {
        tokio::time::sleep(window / 4).await;
        h.set_pod_status(pod, &[ip], false).await;
        eventually(&format!("{pod} leaves {slice}"), window, || async {
            let m = h.membership("my-service").await;
            m.get(slice)
                .is_some_and(|v| v.iter().map(String::as_str).eq(members.iter().copied()))
                .then_some(())
        })
        .await;
    }
    let flipped = h.operator_requests().await;
    let last_slice = flipped
        .iter()
        .rfind(|r| r.resource == "endpointslices")
        .unwrap()
        .at;

    // The counts arrive once the window of the first status write has passed.
    eventually("the final counts", window * 3, || async {
        let pm = h.portmapping("my-service").await;
        (ready(&pm)? == [2, 2]).then_some(())
    })
    .await;
    let requests = h.operator_requests().await;
    let written = statuses(&requests);
    let late = last_slice.duration_since(first[0].at)
        >= k8s_openapi::jiff::SignedDuration::try_from(window).unwrap();
    if late {
        // The machine was too slow to flip both inside the window: one write per window.
        assert!(written.len() <= 3, "{} status writes", written.len());
    } else {
        assert_eq!(
            written.len(),
            2,
            "the first publication's, then one for both flips"
        );
        assert!(written[1].at >= last_slice, "after both slice writes");
    }
    assert_eq!(
        transition(&h.portmapping("my-service").await),
        ready_since,
        "Ready never flipped"
    );
    // Converged: nothing more (no resync comes in this test: a while is all there is).
    let before = requests.len();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(h.operator_writes().await, before);
}
