//! Starts the emulator, installs the CRD, runs the controller, and offers the few verbs the
//! scenarios need (create objects, flip pod state, wait for slices, count writes).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, CustomResourceExt, ResourceExt};
use kube_emulator::Emulator;
use portmapper::context::Settings;
use portmapper::controller;
use portmapper::http::Readiness;
use portmapper::leader::Leadership;
use portmapper::metrics::Metrics;
use portmapper_api::PortMapping;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const NS: &str = "default";
/// The User-Agent prefix of the operator's requests under [`Harness::run_operator_with`].
pub const OPERATOR_USER_AGENT: &str = "portmapper/";

pub struct Harness {
    pub emu: Emulator,
    pub client: Client,
    pub metrics: Arc<Metrics>,
    /// Readiness (and watch policy) the next controller started runs with.
    pub readiness: Readiness,
    shutdown: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Harness {
    /// Emulator + CRD, controller not started yet.
    pub async fn new() -> Self {
        let emu = Emulator::start().await.expect("emulator starts");
        let client = emu.client().expect("client");
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        crds.create(&PostParams::default(), &PortMapping::crd())
            .await
            .expect("CRD created");
        tokio::time::timeout(
            Duration::from_secs(10),
            await_condition(
                crds,
                "portmappings.portmapper.dev",
                conditions::is_crd_established(),
            ),
        )
        .await
        .expect("CRD established in time")
        .expect("watch works");
        Self {
            emu,
            client,
            metrics: Metrics::new(),
            readiness: Readiness::default(),
            shutdown: CancellationToken::new(),
            task: None,
        }
    }

    /// Emulator + CRD + a running controller.
    pub async fn start() -> Self {
        let mut h = Self::new().await;
        h.run_controller();
        h
    }

    /// Emulator + CRD + a controller with adjusted settings (e.g. a long resync, so a test
    /// proves a watch event, not the periodic requeue, made the change).
    pub async fn start_with(adjust: impl FnOnce(&mut Settings)) -> Self {
        let mut h = Self::new().await;
        h.run_controller_with(adjust);
        h
    }

    pub fn run_controller(&mut self) {
        self.run_controller_with(|_| {});
    }

    pub fn run_controller_with(&mut self, adjust: impl FnOnce(&mut Settings)) {
        self.spawn_controller(self.client.clone(), adjust);
    }

    /// Runs the controller through the client `portmapper run` builds (`client::gated`: our
    /// User-Agent `portmapper/<version> (test)`, our bounded retries, the write gate), so its
    /// retry behaviour is the production one and fault rules can single out its requests by
    /// User-Agent ([`OPERATOR_USER_AGENT`]) while the test's own client is left alone.
    pub fn run_operator_with(&mut self, adjust: impl FnOnce(&mut Settings)) {
        let config = self.emu.kube_config().expect("kube config");
        let user_agent = portmapper::client::user_agent(Some("test"));
        let client = portmapper::client::gated(config, &user_agent, Leadership::always())
            .expect("operator client");
        self.spawn_controller(client, adjust);
    }

    fn spawn_controller(&mut self, client: Client, adjust: impl FnOnce(&mut Settings)) {
        let mut settings = Settings {
            namespace: None,
            concurrency: 4,
            resync: Duration::from_secs(2),
            node_lookups: true,
            instance: Some("test".into()),
            probe_concurrency: 16,
        };
        adjust(&mut settings);
        let (metrics, shutdown, readiness) = (
            self.metrics.clone(),
            self.shutdown.clone(),
            self.readiness.clone(),
        );
        self.task = Some(tokio::spawn(async move {
            controller::run(
                client,
                settings,
                Leadership::always(),
                metrics,
                readiness,
                shutdown,
            )
            .await
            .expect("controller runs");
        }));
    }

    pub async fn stop_controller(&mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
        self.shutdown = CancellationToken::new();
    }

    /// Creates any namespaced object given as JSON.
    pub async fn create(&self, obj: Value) {
        let kind = obj["kind"].as_str().unwrap().to_string();
        match kind.as_str() {
            "Service" => {
                let api: Api<Service> = Api::namespaced(self.client.clone(), NS);
                api.create(
                    &PostParams::default(),
                    &serde_json::from_value(obj).unwrap(),
                )
                .await
                .unwrap();
            }
            "Pod" => {
                let api: Api<Pod> = Api::namespaced(self.client.clone(), NS);
                api.create(
                    &PostParams::default(),
                    &serde_json::from_value(obj).unwrap(),
                )
                .await
                .unwrap();
            }
            "PortMapping" => {
                let api: Api<PortMapping> = Api::namespaced(self.client.clone(), NS);
                api.create(
                    &PostParams::default(),
                    &serde_json::from_value(obj).unwrap(),
                )
                .await
                .unwrap();
            }
            other => panic!("harness cannot create {other}"),
        }
    }

    /// Sets a pod's IPs and Ready condition through the status subresource, as kubelet does.
    pub async fn set_pod_status(&self, name: &str, ips: &[&str], ready: bool) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), NS);
        let status = json!({
            "status": {
                "phase": "Running",
                "podIP": ips.first(),
                "podIPs": ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>(),
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
            }
        });
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    }

    pub async fn patch_pod(&self, name: &str, patch: Value) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), NS);
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    pub async fn slices(&self, service: &str) -> Vec<EndpointSlice> {
        let api: Api<EndpointSlice> = Api::namespaced(self.client.clone(), NS);
        let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={service}"));
        let mut items = api.list(&lp).await.unwrap().items;
        items.sort_by_key(|s| s.name_any());
        items
    }

    /// Slice name → sorted pod names of its endpoints.
    pub async fn membership(&self, service: &str) -> BTreeMap<String, Vec<String>> {
        self.slices(service)
            .await
            .into_iter()
            .map(|s| {
                let mut pods: Vec<String> = s
                    .endpoints
                    .iter()
                    .filter_map(|e| e.target_ref.as_ref().and_then(|t| t.name.clone()))
                    .collect();
                pods.sort();
                (s.name_any(), pods)
            })
            .collect()
    }

    pub async fn portmapping(&self, name: &str) -> PortMapping {
        let api: Api<PortMapping> = Api::namespaced(self.client.clone(), NS);
        api.get(name).await.unwrap()
    }

    /// events.k8s.io Events with `reason`, oldest first.
    pub async fn events(&self, reason: &str) -> Vec<k8s_openapi::api::events::v1::Event> {
        let api: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(self.client.clone(), NS);
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .collect()
    }

    /// The operator's /metrics text.
    pub fn metrics_text(&self) -> String {
        self.metrics.encode().unwrap()
    }

    /// The value of one exposed series, written exactly as in the text (`name{labels}`).
    pub fn metric(&self, series: &str) -> Option<f64> {
        self.metrics_text().lines().find_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            (name == series).then(|| value.parse().ok())?
        })
    }

    /// Reconciles finished so far, whatever their result (`portmapper_reconcile_total`).
    pub fn reconciles(&self) -> f64 {
        self.metrics_text()
            .lines()
            .filter(|l| l.starts_with("portmapper_reconcile_total{"))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum()
    }

    /// Waits until `n` more reconciles have finished (the harness resyncs every 2 s). The
    /// controller runs one reconcile of an object at a time, so of `n >= 2` passes at least
    /// `n - 1` started after this call: a request-log delta read before it and checked after
    /// it covers whole passes, which no sleep can promise.
    pub async fn passes(&self, n: u32) {
        let target = self.reconciles() + f64::from(n);
        eventually(
            &format!("{n} more reconciles"),
            Duration::from_secs(30),
            || async { (self.reconciles() >= target).then_some(()) },
        )
        .await;
    }

    /// Turns Service `name` into an ExternalName Service (the fields the API server requires
    /// cleared).
    pub async fn make_external_name(&self, name: &str) {
        let services: Api<Service> = Api::namespaced(self.client.clone(), NS);
        services
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {
                    "type": "ExternalName", "externalName": "example.com",
                    "clusterIP": null, "clusterIPs": null, "ipFamilies": null, "ipFamilyPolicy": null,
                }})),
            )
            .await
            .expect("patch the Service to ExternalName");
    }

    /// Writes issued by the operator's field manager so far.
    pub fn operator_writes(&self) -> usize {
        self.emu
            .requests()
            .writes_by_manager(portmapper_api::MANAGER)
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Creates pool pods (name, ports annotation, IP) of `group` and makes them Ready, as kubelet
/// would.
pub async fn ready_pods(h: &Harness, group: &str, pods: &[(&str, &str, &str)]) {
    for (name, ports, ip) in pods {
        h.create(pod(name, group, ports)).await;
        h.set_pod_status(name, &[ip], true).await;
    }
}

/// Whether the PortMapping reports `Ready=True`.
pub async fn is_ready(h: &Harness, pm: &str) -> bool {
    h.portmapping(pm).await.status.is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

/// Polls `check` until it returns `Some` or `timeout` passes.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn service(name: &str, ports: &[(&str, i32)]) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": NS, "labels": {"app.kubernetes.io/name": name}},
        "spec": {"ports": ports.iter().map(|(n, p)| json!({"name": n, "port": p, "targetPort": p})).collect::<Vec<_>>()},
    })
}

pub fn pod(name: &str, group: &str, ports_annotation: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": NS,
            "labels": {"example.com/group": group},
            "annotations": {"example.com/ports": ports_annotation},
        },
        "spec": {"nodeName": "node-1", "containers": [{"name": "app", "image": "pause"}]},
    })
}

/// A PortMapping publishing one slice set per port (`sliceGrouping: PerPort`): the tests read
/// a port's members by slice name (`web.http`). `slice_shapes.rs` covers the default shape.
pub fn portmapping(name: &str, service: &str) -> Value {
    json!({
        "apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "serviceRef": {"name": service},
            "pods": {"key": "example.com/group"},
            "sliceGrouping": "PerPort",
            "defaultChecks": [{"podReady": {}}, {"portNames": {"key": "example.com/ports"}}],
        },
    })
}
