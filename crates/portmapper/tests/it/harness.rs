//! Starts a test's API server side, runs the controller, and offers the few verbs the
//! scenarios need (create objects, flip pod state, wait for slices, count requests).
//!
//! Two backends:
//! - **the real control plane** ([`Harness::new`], [`Harness::start`]): kube-apiserver 1.37 with
//!   kube-controller-manager, shared by the whole test binary
//!   (`test_support::realkube::shared()`). Each test works in a namespace of its own, named
//!   after the test, and its controller watches only that namespace, so tests running side by
//!   side never see each other's objects. Nodes are cluster-scoped and shared: pods run on
//!   `node-1`, which every test creates if it is missing. No kubelet runs: the tests write pod
//!   status themselves, and delete pods with grace 0 ([`Harness::delete_pod`]) since a
//!   graceful delete leaves a pod bound to a node Terminating. The request log is the API
//!   server's audit log ([`Harness::requests`]); the operator's requests are told apart by
//!   its User-Agent. Playing kubelet is what lets hundreds of tests share one plane and set
//!   any pod state in one write (an address, a flip, a timestamp); the kubelet's own behaviour
//!   (probes, gates combined into Ready, graceful termination, a rollout) is checked on the
//!   real node (`tests/e2e/node.rs`).
//! - **the emulator** ([`Harness::emulator`], [`Harness::start_on_emulator`]): a fresh
//!   in-process `kube_emulator::Emulator` per test, namespace `default`, for the tests that
//!   need what only it offers: fault rules, its clock, restarts.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, Config, CustomResourceExt, ResourceExt};
use kube_emulator::Emulator;
use portmapper::controller;
use portmapper::reconcile::context::Settings;
use portmapper::runtime::http::Readiness;
use portmapper::runtime::leader::Leadership;
use portmapper::runtime::metrics::Metrics;
use portmapper_api::PortMapping;
use serde_json::{Value, json};
use test_support::realkube::ControlPlane;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::requests::{Request, audited};

/// The User-Agent prefix of every operator client (`portmapper/<version> (<identity>)`).
pub const OPERATOR_USER_AGENT: &str = "portmapper/";
/// The identity of the harness's in-process operator (its User-Agent comment).
pub const OPERATOR_IDENTITY: &str = "test";
/// The namespace of an emulator-backed test.
pub const EMULATOR_NAMESPACE: &str = "default";
/// The node every test pod runs on (a shared, cluster-scoped object on the real server).
pub const NODE: &str = "node-1";

/// Where a test's objects live.
enum Backend {
    /// The control plane this binary shares; the test's namespace is its own, and so is
    /// `kubeconfig` (its context defaults to that namespace), in a directory removed on drop.
    Real {
        kubeconfig: std::path::PathBuf,
        plane: &'static ControlPlane,
    },
    /// An in-process emulator of this test's own, and when it started (its request log times
    /// requests from then).
    Emulator(Emulator, Timestamp),
}

pub struct Harness {
    backend: Backend,
    /// The namespace of every namespaced object of the test.
    pub ns: String,
    /// The test's own client (not the operator's: its requests are told apart by User-Agent).
    pub client: Client,
    config: Config,
    pub metrics: Arc<Metrics>,
    /// Readiness (and watch policy) the next controller started runs with.
    pub readiness: Readiness,
    shutdown: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Harness {
    /// A namespace of this test's own on the shared real control plane (CRD installed, node
    /// [`NODE`] present); controller not started yet.
    pub async fn new() -> Self {
        Self::new_on(test_support::realkube::shared()).await
    }

    /// A namespace of this test's own on `plane` (a control plane of the test's own, for
    /// faults of its components); controller not started yet.
    pub async fn new_on(plane: &'static ControlPlane) -> Self {
        let ns = plane.namespace_name(&test_tag());
        let kubeconfig = Kubeconfig::read_from(plane.kubeconfig()).expect("realkube kubeconfig");
        let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .expect("realkube config");
        config.default_namespace = ns.clone();
        let client = Client::try_from(config.clone()).expect("client");
        let namespace: Namespace =
            serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .expect("namespace created");
        ensure_node(&client, NODE, &BTreeMap::new()).await;
        let dir = std::env::temp_dir().join(format!("portmapper-it-{}-{ns}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("the test's directory");
        let kubeconfig = dir.join("kubeconfig");
        plane.kubeconfig_in(&ns, &kubeconfig);
        Self::with(Backend::Real { kubeconfig, plane }, ns, client, config)
    }

    /// The shared real control plane + a running controller.
    pub async fn start() -> Self {
        let mut h = Self::new().await;
        h.run_controller();
        h
    }

    /// The shared real control plane + a controller with adjusted settings (e.g. a long
    /// resync, so a test proves a watch event, not the periodic requeue, made the change).
    pub async fn start_with(adjust: impl FnOnce(&mut Settings)) -> Self {
        let mut h = Self::new().await;
        h.run_controller_with(adjust);
        h
    }

    /// A fresh in-process emulator (namespace `default`) with the CRD; controller not started.
    pub async fn emulator() -> Self {
        let started = Timestamp::now();
        let emu = Emulator::start().await.expect("emulator starts");
        let config = emu.kube_config().expect("kube config");
        let client = Client::try_from(config.clone()).expect("client");
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
        Self::with(
            Backend::Emulator(emu, started),
            EMULATOR_NAMESPACE.into(),
            client,
            config,
        )
    }

    /// A fresh emulator + a running controller.
    pub async fn start_on_emulator() -> Self {
        let mut h = Self::emulator().await;
        h.run_controller();
        h
    }

    fn with(backend: Backend, ns: String, client: Client, config: Config) -> Self {
        Self {
            backend,
            ns,
            client,
            config,
            metrics: Metrics::new(),
            readiness: Readiness::default(),
            shutdown: CancellationToken::new(),
            task: None,
        }
    }

    /// The emulator of an emulator-backed test (its faults, clock and request log).
    pub fn emu(&self) -> &Emulator {
        match &self.backend {
            Backend::Emulator(emu, _) => emu,
            Backend::Real { .. } => {
                panic!("this test runs on the real control plane, not the emulator")
            }
        }
    }

    /// The real control plane of a real-backed test.
    pub fn plane(&self) -> &'static ControlPlane {
        match &self.backend {
            Backend::Real { plane, .. } => plane,
            Backend::Emulator(..) => panic!("this test runs on the emulator"),
        }
    }

    /// Whether the test runs on the real control plane.
    pub fn is_real(&self) -> bool {
        matches!(self.backend, Backend::Real { .. })
    }

    /// A kube config for this test's server, defaulting to its namespace (for clients of the
    /// test's own making).
    pub fn kube_config(&self) -> Config {
        self.config.clone()
    }

    /// A kubeconfig file for this test's server whose context defaults to its namespace, for
    /// the binaries under test.
    pub fn kubeconfig_path(&self) -> &std::path::Path {
        match &self.backend {
            Backend::Real { kubeconfig, .. } => kubeconfig,
            Backend::Emulator(emu, _) => emu.kubeconfig_path(),
        }
    }

    /// The operator's User-Agent under [`Harness::run_controller`] and
    /// [`Harness::run_operator_with`].
    pub fn operator_user_agent() -> String {
        portmapper::runtime::client::user_agent(Some(OPERATOR_IDENTITY))
    }

    pub fn run_controller(&mut self) {
        self.run_controller_with(|_| {});
    }

    /// Runs the controller through a plain client that sends the operator's User-Agent, so
    /// the request log tells its requests from the test's own.
    pub fn run_controller_with(&mut self, adjust: impl FnOnce(&mut Settings)) {
        let client =
            portmapper::runtime::client::plain(self.config.clone(), &Self::operator_user_agent())
                .expect("operator client");
        self.spawn_controller(client, adjust);
    }

    /// Runs the controller through the client `portmapper run` builds (`client::gated`: our
    /// User-Agent `portmapper/<version> (test)`, our bounded retries, the write gate), so its
    /// retry behaviour is the production one and fault rules can single out its requests by
    /// User-Agent ([`OPERATOR_USER_AGENT`]) while the test's own client is left alone.
    pub fn run_operator_with(&mut self, adjust: impl FnOnce(&mut Settings)) {
        let client = portmapper::runtime::client::gated(
            self.config.clone(),
            &Self::operator_user_agent(),
            Leadership::always(),
        )
        .expect("operator client");
        self.spawn_controller(client, adjust);
    }

    /// [`Harness::run_operator_with`] authenticated by `config` (e.g. a ServiceAccount's
    /// token, which priority and fairness does not exempt as it does the admin).
    pub fn run_operator_as(&mut self, config: Config, adjust: impl FnOnce(&mut Settings)) {
        let client = portmapper::runtime::client::gated(
            config,
            &Self::operator_user_agent(),
            Leadership::always(),
        )
        .expect("operator client");
        self.spawn_controller(client, adjust);
    }

    fn spawn_controller(&mut self, client: Client, adjust: impl FnOnce(&mut Settings)) {
        let mut settings = Settings {
            namespace: Some(self.ns.clone()),
            concurrency: 4,
            resync: Duration::from_secs(2),
            node_lookups: true,
            instance: Some(OPERATOR_IDENTITY.into()),
            // Every change written at once: these tests assert exact sequences of published
            // states (a deletion seen before its replacement); the window is tested in the
            // reconcile tests and measured by the scale bench.
            batch_window: Duration::ZERO,
            max_pod_watches_per_namespace: portmapper::index::DEFAULT_MAX_POD_WATCHES,
            budgets: portmapper_core::budget::Budgets::default(),
            probe_concurrency: 16,
            probe_concurrency_per_namespace: None,
            probe_concurrency_per_portmapping: None,
            // The deciders of the webhook tests stand at pod-network addresses (10.244.x.y) of
            // the test's network namespace: the flag an administrator would pass.
            webhook_egress: portmapper_probe::WebhookEgress::new([""; 0], ["10.244.0.0/16"])
                .expect("a valid CIDR"),
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

    /// An API of a namespaced kind in the test's namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Creates any namespaced object given as JSON, in the test's namespace.
    pub async fn create(&self, obj: Value) {
        let kind = obj["kind"].as_str().unwrap().to_string();
        match kind.as_str() {
            "Service" => create_in::<Service>(&self.api(), obj).await,
            "Pod" => create_in::<Pod>(&self.api(), obj).await,
            "PortMapping" => create_in::<PortMapping>(&self.api(), obj).await,
            "EndpointSlice" => create_in::<EndpointSlice>(&self.api(), obj).await,
            "Deployment" => {
                create_in::<k8s_openapi::api::apps::v1::Deployment>(&self.api(), obj).await;
            }
            "Endpoints" => {
                create_in::<k8s_openapi::api::core::v1::Endpoints>(&self.api(), obj).await;
            }
            other => panic!("harness cannot create {other}"),
        }
    }

    /// Sets a pod's IPs and Ready condition through the status subresource, as kubelet does.
    pub async fn set_pod_status(&self, name: &str, ips: &[&str], ready: bool) {
        let status = json!({
            "status": {
                "phase": "Running",
                "podIP": ips.first(),
                "podIPs": ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>(),
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
            }
        });
        self.api::<Pod>()
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    }

    pub async fn patch_pod(&self, name: &str, patch: Value) {
        self.api::<Pod>()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Deletes a pod at once (grace 0), as kubelet would confirm it gone. A graceful delete
    /// leaves a pod bound to a node Terminating until its kubelet confirms, and none runs.
    pub async fn delete_pod(&self, name: &str) {
        self.api::<Pod>()
            .delete(name, &DeleteParams::default().grace_period(0))
            .await
            .unwrap();
    }

    pub async fn slices(&self, service: &str) -> Vec<EndpointSlice> {
        let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={service}"));
        let mut items = self.api::<EndpointSlice>().list(&lp).await.unwrap().items;
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
        self.api::<PortMapping>().get(name).await.unwrap()
    }

    /// events.k8s.io Events with `reason`, oldest first.
    pub async fn events(&self, reason: &str) -> Vec<k8s_openapi::api::events::v1::Event> {
        self.api::<k8s_openapi::api::events::v1::Event>()
            .list(&ListParams::default())
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
        self.api::<Service>()
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

    /// Every request in the test's namespace answered so far (every request, on the
    /// emulator), in log order.
    ///
    /// The audit log gets a request's line when its response completes, possibly just after
    /// the client has read the response. So first a request of the test's own (a GET of a
    /// ConfigMap that does not exist) is sent and its line awaited: every request answered
    /// before this call is in the log by then.
    pub async fn requests(&self) -> Vec<Request> {
        match &self.backend {
            Backend::Emulator(emu, started) => emu
                .requests()
                .entries()
                .iter()
                .map(|r| Request::logged(r, *started))
                .collect(),
            Backend::Real { plane, .. } => {
                static BARRIERS: AtomicUsize = AtomicUsize::new(0);
                let barrier = format!("barrier-{}", BARRIERS.fetch_add(1, Ordering::Relaxed));
                let absent = self.api::<ConfigMap>().get_opt(&barrier).await.unwrap();
                assert!(
                    absent.is_none(),
                    "ConfigMap {barrier} is not expected to exist"
                );
                let log = plane.dir().join("audit.log");
                eventually(
                    &format!("the audit log line of GET {barrier}"),
                    Duration::from_secs(10),
                    || async {
                        let requests = audited(&log, &self.ns);
                        requests
                            .iter()
                            .any(|r| r.resource == "configmaps" && r.name == barrier)
                            .then_some(requests)
                    },
                )
                .await
            }
        }
    }

    /// The writes of the harness's operator (its User-Agent) so far, in log order.
    pub async fn operator_requests(&self) -> Vec<Request> {
        let agent = Self::operator_user_agent();
        self.requests()
            .await
            .into_iter()
            .filter(|r| r.is_write() && r.user_agent == agent)
            .collect()
    }

    /// How many writes the harness's operator has issued so far.
    pub async fn operator_writes(&self) -> usize {
        self.operator_requests().await.len()
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Backend::Real { kubeconfig, .. } = &self.backend
            && let Some(dir) = kubeconfig.parent()
        {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

async fn create_in<K>(api: &Api<K>, obj: Value)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    api.create(
        &PostParams::default(),
        &serde_json::from_value(obj).unwrap(),
    )
    .await
    .unwrap();
}

/// The test's name as the test harness names its thread (the last path segment), for the
/// namespace name.
fn test_tag() -> String {
    std::thread::current()
        .name()
        .and_then(|n| n.rsplit("::").next())
        .filter(|n| !n.is_empty() && *n != "main")
        .unwrap_or("it")
        .replace('_', "-")
}

/// Creates Node `name` with `labels` unless it exists (Nodes are cluster-scoped: tests share
/// them, so a shared node keeps the labels it was first created with).
pub async fn ensure_node(client: &Client, name: &str, labels: &BTreeMap<String, String>) {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("creating node {name}: {e}"),
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

/// A test's own watch of `api`, paced after a failure (200 ms doubling to 1 s): while the
/// API server is down every request fails at once, and a loop that skips the error without a
/// pause never yields (it holds a worker at 100 %, and its task cannot be aborted or its
/// runtime dropped).
pub fn watch<K>(
    api: Api<K>,
    config: kube::runtime::watcher::Config,
) -> impl futures::Stream<Item = Result<kube::runtime::watcher::Event<K>, kube::runtime::watcher::Error>>
+ Send
+ 'static
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    use kube::runtime::WatchStreamExt;
    use portmapper::runtime::watch_health::{WatchBackoff, WatchPolicy};
    let policy = WatchPolicy {
        backoff_initial: Duration::from_millis(200),
        backoff_max: Duration::from_secs(1),
        healthy_after: Duration::from_secs(5),
        ..WatchPolicy::default()
    };
    kube::runtime::watcher(api, config).backoff(WatchBackoff::new(&policy))
}

/// A selector-less Service (no namespace: the harness creates it in the test's).
pub fn service(name: &str, ports: &[(&str, i32)]) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": name}},
        "spec": {"ports": ports.iter().map(|(n, p)| json!({"name": n, "port": p, "targetPort": p})).collect::<Vec<_>>()},
    })
}

/// A pool pod of `group` on [`NODE`] listing `ports_annotation`.
pub fn pod(name: &str, group: &str, ports_annotation: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"example.com/group": group},
            "annotations": {"example.com/ports": ports_annotation},
        },
        "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "pause"}]},
    })
}

/// A PortMapping publishing one slice set per port (`sliceGrouping: PerPort`): the tests read
/// a port's members by slice name (`web.http`). `slice_shapes.rs` covers the default shape.
pub fn portmapping(name: &str, service: &str) -> Value {
    json!({
        "apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
        "metadata": {"name": name},
        "spec": {
            "serviceRef": {"name": service},
            "pods": {"key": "example.com/group"},
            "sliceGrouping": "PerPort",
            "defaultChecks": [{"podReady": {}}, {"portNames": {"key": "example.com/ports"}}],
        },
    })
}
