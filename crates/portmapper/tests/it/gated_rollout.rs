//! A rolling update of a gated Deployment on the real control plane: kube-controller-manager's
//! deployment and replicaset controllers roll it out (maxSurge 1, maxUnavailable 0), the test
//! plays kubelet and computes Ready as kubelet does (ContainersReady and every readiness gate
//! True), and a watcher of our slices sees every version: no port ever has fewer than N−1
//! ready members, and the rollout completes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{Timestamp, Unit};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use portmapper_core::PUBLISHED_GATE;
use serde_json::json;

use crate::harness::*;
use crate::observer::Observer;

const REPLICAS: usize = 3;
const ROLLOUT: Duration = Duration::from_secs(90);

/// Deployment `web` of gated pool pods (group `web`, ports http and https) on [`NODE`].
fn deployment(revision: &str) -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {
                    "labels": {"app": "web", "example.com/group": "web"},
                    "annotations": {"example.com/ports": "http,https", "revision": revision},
                },
                "spec": {
                    "nodeName": NODE,
                    "readinessGates": [{"conditionType": PUBLISHED_GATE}],
                    "containers": [{"name": "app", "image": "pause"}],
                },
            },
        },
    })
}

/// Ready as kubelet computes it: containers ready and every readiness gate True.
fn kubelet_ready(pod: &Pod) -> bool {
    let status = |type_: &str| {
        pod.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == type_))
            .is_some_and(|c| c.status == "True")
    };
    let gates = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .into_iter()
        .flatten();
    status("ContainersReady") && gates.into_iter().all(|g| status(&g.condition_type))
}

fn condition(pod: &Pod, type_: &str) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

/// One step of the test's kubelet for `pod`: finish a termination (delete with grace 0),
/// start a new pod (an address, containers ready), or bring Ready in line with
/// [`kubelet_ready`].
async fn kubelet_step(api: &Api<Pod>, pod: &Pod, next_ip: &AtomicUsize) {
    let name = pod.name_any();
    let now = Timestamp::now().round(Unit::Second).unwrap();
    if pod.metadata.deletion_timestamp.is_some() {
        // Kubelet stops the containers, then removes the pod.
        let _ = api
            .delete(&name, &DeleteParams::default().grace_period(0))
            .await;
        return;
    }
    let has_ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_ref())
        .is_some();
    let status = if !has_ip {
        let n = next_ip.fetch_add(1, Ordering::SeqCst);
        let ip = format!("10.244.{}.{}", 1 + n / 200, 10 + n % 200);
        json!({"status": {
            "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
            "conditions": [
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                {"type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady",
                 "lastTransitionTime": now},
            ],
        }})
    } else {
        let ready = if kubelet_ready(pod) { "True" } else { "False" };
        if condition(pod, "Ready").as_deref() == Some(ready) {
            return;
        }
        // kubelet's reason: a gate waits (this kubelet's containers are always ready).
        let reason = if ready == "True" {
            ""
        } else {
            "ReadinessGatesNotReady"
        };
        json!({"status": {"conditions": [
            {"type": "Ready", "status": ready, "reason": reason, "lastTransitionTime": now},
        ]}})
    };
    // A pod deleted meanwhile: nothing to do.
    let _ = api
        .patch_status(&name, &PatchParams::default(), &Patch::Strategic(status))
        .await;
}

/// Runs the test's kubelet over the Deployment's pods until dropped.
fn run_kubelet(client: Client, ns: &str) -> tokio::task::JoinHandle<()> {
    let api: Api<Pod> = Api::namespaced(client, ns);
    let next_ip = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        let config = watcher::Config::default().labels("app=web");
        let mut events = watch(api.clone(), config).boxed();
        while let Some(event) = events.next().await {
            let pods = match event {
                Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => vec![pod],
                _ => continue,
            };
            for pod in pods {
                kubelet_step(&api, &pod, &next_ip).await;
            }
        }
    })
}

/// Waits until the Deployment has rolled out `revision` completely.
async fn rolled_out(h: &Harness, generation: i64) {
    let api: Api<Deployment> = Api::namespaced(h.client.clone(), &h.ns);
    eventually("the rollout completes", ROLLOUT, || async {
        let d = api.get("web").await.ok()?;
        let s = d.status?;
        let n = i32::try_from(REPLICAS).ok()?;
        (s.observed_generation >= Some(generation)
            && s.updated_replicas == Some(n)
            && s.ready_replicas == Some(n)
            && s.available_replicas == Some(n)
            && s.replicas == Some(n))
        .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_deployment_rollout_never_leaves_a_port_with_fewer_than_n_minus_1_members() {
    let h = Harness::start().await;
    h.create(service("web", &[("http", 8080), ("https", 8443)]))
        .await;
    h.create(portmapping("web", "web")).await;
    let kubelet = run_kubelet(h.client.clone(), &h.ns);
    h.create(deployment("1")).await;
    rolled_out(&h, 1).await;
    let names = |m: &BTreeMap<String, Vec<String>>, slice: &str| m.get(slice).map_or(0, Vec::len);
    let membership = h.membership("web").await;
    assert_eq!(
        (
            names(&membership, "web.http"),
            names(&membership, "web.https")
        ),
        (REPLICAS, REPLICAS)
    );

    let observer = Observer::start(&h, &[("web", "http"), ("web", "https")]).await;
    let deployments: Api<Deployment> = Api::namespaced(h.client.clone(), &h.ns);
    let patched = deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"template": {"metadata": {"annotations": {"revision": "2"}}}}}),
            ),
        )
        .await
        .unwrap();
    rolled_out(&h, patched.metadata.generation.unwrap()).await;
    // Every pod of the new revision is published on both ports, the old ones gone.
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), &h.ns);
    let listed = pods.list(&Default::default()).await.unwrap().items;
    let current: Vec<String> = listed
        .iter()
        .filter(|p| p.annotations().get("revision").map(String::as_str) == Some("2"))
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(current.len(), REPLICAS);
    // Each is Ready by kubelet's rule, its gate True because it is published.
    for pod in listed.iter().filter(|p| current.contains(&p.name_any())) {
        assert!(kubelet_ready(pod), "{pod:#?}");
        assert_eq!(condition(pod, "Ready").as_deref(), Some("True"));
    }
    let membership = eventually("the slices name the new pods", ROLLOUT, || async {
        let m = h.membership("web").await;
        let mut want = current.clone();
        want.sort();
        (m.get("web.http") == Some(&want) && m.get("web.https") == Some(&want)).then_some(m)
    })
    .await;
    assert_eq!(membership.len(), 2);
    kubelet.abort();
    observer.assert_held();
    let report = observer.report();
    let fewest: Vec<usize> = report.fewest_ready.values().copied().collect();
    println!("fewest ready members per port during the rollout: {fewest:?} of {REPLICAS}");
    assert_eq!(fewest.len(), 2, "{report:#?}");
    assert!(
        fewest.iter().all(|n| *n >= REPLICAS - 1),
        "a port fell below N-1 ready members: {report:#?}"
    );
}
