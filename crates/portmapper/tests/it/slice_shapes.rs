//! `spec.sliceGrouping`: the default port-set slices, and a live switch between the two shapes
//! that never leaves a ready pod unpublished on a port it serves, as a watcher of the slices
//! sees them event by event.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use portmapper_api::PortMapping;
use serde_json::json;

use crate::harness::*;

const SVC: &str = "shapes";

/// (pod, port) pairs published ready by `slices`, every port of a slice counting.
fn published(slices: &BTreeMap<String, EndpointSlice>) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for s in slices.values() {
        for port in s.ports.iter().flatten() {
            for e in &s.endpoints {
                let ready = e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
                let pod = e.target_ref.as_ref().and_then(|t| t.name.clone());
                if let (true, Some(pod)) = (ready, pod) {
                    out.insert((pod, port.name.clone().unwrap_or_default()));
                }
            }
        }
    }
    out
}

fn want() -> BTreeSet<(String, String)> {
    [
        ("pod-a", "http"),
        ("pod-b", "http"),
        ("pod-b", "https"),
        ("pod-c", "http"),
        ("pod-c", "https"),
        ("pod-d", "https"),
    ]
    .into_iter()
    .map(|(p, port)| (p.to_owned(), port.to_owned()))
    .collect()
}

/// Every slice event from now on, applied to the slices seen so far: the published pairs after
/// each event go out on the channel.
fn watch_published(
    h: &Harness,
) -> tokio::sync::mpsc::UnboundedReceiver<BTreeSet<(String, String)>> {
    let api: Api<EndpointSlice> = Api::namespaced(h.client.clone(), &h.ns);
    let config = watcher::Config::default().labels(&format!("kubernetes.io/service-name={SVC}"));
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut seen: BTreeMap<String, EndpointSlice> = BTreeMap::new();
        // A (re)list is a state once it is complete.
        let mut listed = false;
        let mut stream = watch(api, config).boxed();
        while let Some(Ok(event)) = stream.next().await {
            match event {
                watcher::Event::Apply(s) | watcher::Event::InitApply(s) => {
                    seen.insert(s.name_any(), s);
                }
                watcher::Event::Delete(s) => {
                    seen.remove(&s.name_any());
                }
                watcher::Event::Init => {
                    seen.clear();
                    listed = false;
                }
                watcher::Event::InitDone => listed = true,
            }
            if listed && tx.send(published(&seen)).is_err() {
                return;
            }
        }
    });
    rx
}

async fn set_grouping(h: &Harness, grouping: &str) {
    let pms: Api<PortMapping> = Api::namespaced(h.client.clone(), &h.ns);
    pms.patch(
        SVC,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"sliceGrouping": grouping}})),
    )
    .await
    .unwrap();
}

/// Waits until the slices are `names_like` (every slice name satisfies it) and publish
/// [`want`]; every state seen on the way must publish every pair of [`want`].
async fn switch_without_blackout(
    h: &Harness,
    seen: &mut tokio::sync::mpsc::UnboundedReceiver<BTreeSet<(String, String)>>,
    names_like: impl Fn(&str) -> bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let slices = h.slices(SVC).await;
        let done = slices.iter().all(|s| names_like(&s.name_any()));
        while let Ok(state) = seen.try_recv() {
            let missing: Vec<_> = want().difference(&state).cloned().collect();
            assert!(missing.is_empty(), "a watcher saw {missing:?} unpublished");
        }
        if done && published(&slices.into_iter().map(|s| (s.name_any(), s)).collect()) == want() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the switch did not converge"
        );
        // A poll (as `eventually`) that also checks every state seen on the way.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_shape_shares_slices_by_port_set_and_a_live_switch_has_no_blackout() {
    let h = Harness::start().await;
    h.create(service(SVC, &[("http", 8080), ("https", 8443)]))
        .await;
    ready_pods(
        &h,
        SVC,
        &[
            ("pod-a", "http", "10.244.0.1"),
            ("pod-b", "http,https", "10.244.0.2"),
            ("pod-c", "http,https", "10.244.0.3"),
            ("pod-d", "https", "10.244.0.4"),
        ],
    )
    .await;
    let mut pm = portmapping(SVC, SVC);
    pm["spec"].as_object_mut().unwrap().remove("sliceGrouping");
    h.create(pm).await;
    // The default: one slice per port set, {http}, {http, https}, {https}.
    let members = eventually("port-set slices", Duration::from_secs(15), || async {
        let slices = h.slices(SVC).await;
        let sets: BTreeSet<(Vec<String>, Vec<String>)> = slices
            .iter()
            .map(|s| {
                let ports = s
                    .ports
                    .iter()
                    .flatten()
                    .filter_map(|p| p.name.clone())
                    .collect();
                let mut pods: Vec<String> = s
                    .endpoints
                    .iter()
                    .filter_map(|e| e.target_ref.as_ref()?.name.clone())
                    .collect();
                pods.sort();
                (ports, pods)
            })
            .collect();
        (sets.len() == 3 && slices.iter().all(|s| !s.endpoints.is_empty())).then_some(sets)
    })
    .await;
    let strings = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        members,
        BTreeSet::from([
            (strings(&["http"]), strings(&["pod-a"])),
            (strings(&["http", "https"]), strings(&["pod-b", "pod-c"])),
            (strings(&["https"]), strings(&["pod-d"])),
        ])
    );
    // The per-port gauge counts a slice's endpoints on every port it lists.
    for (port, n) in [("http", 3.0), ("https", 3.0)] {
        let series = format!(
            "portmapper_endpoints_published{{namespace=\"{}\",service=\"{SVC}\",port=\"{port}\",address_type=\"IPv4\"}}",
            h.ns
        );
        eventually(&series, Duration::from_secs(15), || async {
            (h.metric(&series) == Some(n)).then_some(())
        })
        .await;
    }
    let port_set_names: BTreeSet<String> =
        h.slices(SVC).await.iter().map(|s| s.name_any()).collect();
    assert!(
        port_set_names.iter().all(|n| n.len() <= 63),
        "{port_set_names:?}"
    );

    // Per port, and back: every event a watcher sees publishes every pair.
    let mut seen = watch_published(&h);
    set_grouping(&h, "PerPort").await;
    switch_without_blackout(&h, &mut seen, |n| n == "shapes.http" || n == "shapes.https").await;
    set_grouping(&h, "PerPortSet").await;
    switch_without_blackout(&h, &mut seen, |n| port_set_names.contains(n)).await;
}

/// Waits until the slices publish `end`; every state seen on the way must publish `kept`.
async fn converge_keeping(
    h: &Harness,
    seen: &mut tokio::sync::mpsc::UnboundedReceiver<BTreeSet<(String, String)>>,
    kept: &BTreeSet<(String, String)>,
    end: &BTreeSet<(String, String)>,
) -> usize {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut states = 0;
    loop {
        let slices = h.slices(SVC).await;
        while let Ok(state) = seen.try_recv() {
            states += 1;
            let missing: Vec<_> = kept.difference(&state).cloned().collect();
            assert!(missing.is_empty(), "a watcher saw {missing:?} unpublished");
        }
        if published(&slices.into_iter().map(|s| (s.name_any(), s)).collect()) == *end {
            return states;
        }
        assert!(tokio::time::Instant::now() < deadline, "no convergence");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A pod that leaves one port and keeps another moves between two existing port-set slices:
/// the one it joins is written before the one it leaves, so a watcher never sees it missing
/// from the port it keeps (written together, it was, for one version, on a real node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_moving_between_port_set_slices_never_leaves_a_port_it_keeps() {
    let h = Harness::start().await;
    h.create(service(SVC, &[("http", 8080), ("https", 8443)]))
        .await;
    ready_pods(
        &h,
        SVC,
        &[
            ("pod-a", "http", "10.244.0.1"),
            ("pod-b", "http,https", "10.244.0.2"),
            ("pod-c", "http,https", "10.244.0.3"),
            ("pod-d", "https", "10.244.0.4"),
        ],
    )
    .await;
    let mut pm = portmapping(SVC, SVC);
    pm["spec"].as_object_mut().unwrap().remove("sliceGrouping");
    h.create(pm).await;
    let mut seen = watch_published(&h);
    converge_keeping(&h, &mut seen, &BTreeSet::new(), &want()).await;
    let pair = |p: &str, port: &str| (p.to_owned(), port.to_owned());
    let mut now = want();
    // pod-c joins {https} (pod-d's slice) and leaves {http, https}; then pod-b joins {http}.
    for (pod, keeps, drops) in [("pod-c", "https", "http"), ("pod-b", "http", "https")] {
        h.patch_pod(
            pod,
            json!({"metadata": {"annotations": {"example.com/ports": keeps}}}),
        )
        .await;
        now.remove(&pair(pod, drops));
        let states = converge_keeping(&h, &mut seen, &now, &now).await;
        assert!(states > 0, "{pod}: the watcher saw no state");
    }
}
