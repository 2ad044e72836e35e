//! `portmapper demo`: the whole product on one machine, no cluster. It starts the API server
//! emulator in-process, installs the CRD, applies `examples/demo/`, plays kubelet for the demo
//! pods (assigning pod IPs from 10.244.0.0/16 and marking them Ready), runs the controller, and
//! prints the per-port membership every time it changes. Flip a pod with kubectl and watch it move.

pub mod pods;

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, CustomResourceExt, ResourceExt};
use portmapper_api::PortMapping;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::commands::demo::pods::PodNetwork;
use crate::controller::{self, MANAGED_BY_SELECTOR};
use crate::reconcile::context::Settings;
use crate::reconcile::probing::CustomExecutor;
use crate::runtime::error::Error;
use crate::runtime::http::Readiness;
use crate::runtime::leader::Leadership;
use crate::runtime::metrics::Metrics;

/// What `portmapper demo` needs (built from its flags by the command line, `cli/mod.rs`).
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// Stop after this long (None: run until Ctrl-C).
    pub duration: Option<Duration>,
    /// Directory of manifests to apply (the built-in copy of examples/demo when absent).
    pub manifests: PathBuf,
    /// Where to write the kubeconfig of the embedded API server (None: a temporary file).
    pub kubeconfig: Option<PathBuf>,
    /// Act out a user's kubectl session and show the effect.
    pub tour: bool,
    /// Where the logs go (shown at the start; the subscriber is installed by the caller).
    pub log_path: PathBuf,
}

/// Lines the demo has printed: the live table is redrawn in place only when nothing was printed
/// below it since it was drawn.
static PRINTED: AtomicUsize = AtomicUsize::new(0);

fn note_printed(lines: usize) {
    PRINTED.fetch_add(lines, Ordering::Relaxed);
}

fn printed_lines() -> usize {
    PRINTED.load(Ordering::Relaxed)
}

/// `println!` that counts the lines it printed.
macro_rules! say {
    ($($arg:tt)*) => {{
        let text = format!($($arg)*);
        note_printed(text.lines().count().max(1));
        println!("{text}");
    }};
}

const DEMO_MANAGER: &str = "portmapper-demo";

/// Ports the demo pods' servers listen on (the demo Service's target ports).
const DEMO_APP_PORTS: [u16; 2] = [8080, 8443];

/// The manifests shipped in `examples/demo/`, used when that directory is not at hand.
const EMBEDDED: [(&str, &str); 3] = [
    (
        "00-service.yaml",
        include_str!("../../../../../examples/demo/00-service.yaml"),
    ),
    (
        "10-pods.yaml",
        include_str!("../../../../../examples/demo/10-pods.yaml"),
    ),
    (
        "20-portmapping.yaml",
        include_str!("../../../../../examples/demo/20-portmapping.yaml"),
    ),
];

/// Runs the demo until `--duration` passes or Ctrl-C.
pub async fn run(config: DemoConfig) -> Result<(), Error> {
    let started = Instant::now();
    let (_emu, client) = start_emulator(&config).await?;
    let pod_network = pod_network();
    apply_manifests(&client, &config, pod_network.is_some()).await?;
    let shutdown = CancellationToken::new();
    let kubelet = tokio::spawn(play_kubelet(
        client.clone(),
        shutdown.clone(),
        pod_network.clone(),
    ));
    let probe_executor = match &pod_network {
        Some(network) => Some(CustomExecutor(network.executor().map_err(Error::Config)?)),
        None => None,
    };
    let settings = Settings {
        namespace: None,
        concurrency: 2,
        resync: Duration::from_secs(30),
        node_lookups: true,
        instance: Some("demo".into()),
        probe_concurrency: portmapper_probe::DEFAULT_CONCURRENCY,
        probe_concurrency_per_namespace: None,
        probe_concurrency_per_portmapping: None,
        batch_window: crate::reconcile::batch_window::default_batch_window(),
        max_pod_watches_per_namespace: crate::index::DEFAULT_MAX_POD_WATCHES,
        budgets: portmapper_core::budget::Budgets::default(),
        webhook_egress: portmapper_probe::WebhookEgress::default(),
    };
    let controller = tokio::spawn(controller::run_probing_with(
        client.clone(),
        settings,
        probe_executor,
        Leadership::always(),
        Metrics::new(),
        Readiness::default(),
        shutdown.clone(),
    ));
    let view = Arc::new(Mutex::new(String::new()));
    let display = tokio::spawn(show_membership(
        client.clone(),
        started,
        view.clone(),
        shutdown.clone(),
    ));
    if config.tour {
        tour(&client, &view, pod_network.as_deref()).await?;
    } else {
        say!("try: kubectl annotate pod pod-a example.com/ports=http,https --overwrite");
    }
    match config.duration {
        Some(duration) => tokio::time::sleep(duration).await,
        None => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(5), controller).await;
    display.abort();
    kubelet.abort();
    say!(
        "demo finished after {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Starts the embedded API server (kept running while the returned handle lives) and says how
/// to reach it.
async fn start_emulator(config: &DemoConfig) -> Result<(kube_emulator::Emulator, Client), Error> {
    let mut builder = kube_emulator::Emulator::builder();
    if let Some(path) = &config.kubeconfig {
        builder = builder.kubeconfig(path.clone());
    }
    let emu = builder
        .start()
        .await
        .map_err(|e| Error::Config(format!("starting the embedded API server: {e}")))?;
    let client = emu
        .client()
        .map_err(|e| Error::Config(format!("client for the embedded API server: {e}")))?;
    let kubeconfig = emu.kubeconfig_path().display().to_string();
    say!("portmapper demo: embedded API server on {}", emu.url());
    say!("  export KUBECONFIG={kubeconfig}");
    say!("  kubectl get pm,endpointslices");
    say!("  logs: {}", config.log_path.display());
    Ok((emu, client))
}

/// The pods' private network namespace, when one can be made: then network checks run too.
fn pod_network() -> Option<Arc<PodNetwork>> {
    match PodNetwork::create() {
        Ok(network) => {
            say!(
                "network checks: every port also needs httpGet on the pod's own server; pods listen on their IPs inside a private network namespace"
            );
            Some(Arc::new(network))
        }
        Err(why) => {
            say!(
                "network checks: not used; the demo runs metadata-only (podReady + portNames): {why}"
            );
            None
        }
    }
}

/// Installs the CRD and applies the demo's manifests (with HTTP checks when the pods have a
/// network).
async fn apply_manifests(client: &Client, config: &DemoConfig, http: bool) -> Result<(), Error> {
    install_crd(client).await?;
    let manifests = load_manifests(&config.manifests)?;
    for doc in &manifests {
        if http {
            apply(client, &with_http_checks(doc)).await?;
        } else {
            apply(client, doc).await?;
        }
    }
    say!(
        "applied {} objects from {}",
        manifests.len(),
        source_name(&config.manifests)
    );
    Ok(())
}

async fn install_crd(client: &Client) -> Result<(), Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.patch(
        "portmappings.portmapper.dev",
        &PatchParams::apply(DEMO_MANAGER).force(),
        &Patch::Apply(PortMapping::crd()),
    )
    .await
    .map_err(|e| Error::kube("installing the PortMapping CRD", e))?;
    tokio::time::timeout(
        Duration::from_secs(10),
        await_condition(
            crds,
            "portmappings.portmapper.dev",
            conditions::is_crd_established(),
        ),
    )
    .await
    .map_err(|_| Error::Config("the PortMapping CRD did not become Established in 10s".into()))?
    .map_err(|e| Error::Config(format!("waiting for the CRD: {e}")))?;
    Ok(())
}

fn source_name(dir: &Path) -> String {
    if dir.is_dir() {
        dir.display().to_string()
    } else {
        "the built-in copy of examples/demo".into()
    }
}

/// YAML documents from the directory (sorted by file name), or the embedded copies.
fn load_manifests(dir: &Path) -> Result<Vec<Value>, Error> {
    let mut texts: Vec<(PathBuf, String)> = Vec::new();
    if dir.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| Error::Config(format!("reading {}: {e}", dir.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        for f in files {
            let text = std::fs::read_to_string(&f)
                .map_err(|e| Error::Config(format!("reading {}: {e}", f.display())))?;
            texts.push((f, text));
        }
    } else {
        texts = EMBEDDED
            .iter()
            .map(|(n, t)| (PathBuf::from(n), (*t).to_string()))
            .collect();
    }
    let mut docs = Vec::new();
    for (file, text) in texts {
        for (i, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
            let value = Value::deserialize(doc).map_err(|e| {
                Error::Config(format!("{} document {}: {e}", file.display(), i + 1))
            })?;
            if !value.is_null() {
                docs.push(value);
            }
        }
    }
    Ok(docs)
}

async fn apply(client: &Client, doc: &Value) -> Result<(), Error> {
    let kind = doc["kind"].as_str().unwrap_or_default();
    let name = doc["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let ns = doc["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_string();
    let pp = PatchParams::apply(DEMO_MANAGER).force();
    let action = format!("applying {kind} {ns}/{name}");
    let result = match kind {
        "Service" => Api::<Service>::namespaced(client.clone(), &ns)
            .patch(&name, &pp, &Patch::Apply(doc))
            .await
            .map(drop),
        "Pod" => Api::<Pod>::namespaced(client.clone(), &ns)
            .patch(&name, &pp, &Patch::Apply(doc))
            .await
            .map(drop),
        "PortMapping" => Api::<PortMapping>::namespaced(client.clone(), &ns)
            .patch(&name, &pp, &Patch::Apply(doc))
            .await
            .map(drop),
        other => {
            return Err(Error::Config(format!(
                "the demo cannot apply kind {other:?} ({ns}/{name})"
            )));
        }
    };
    result.map_err(|e| Error::kube(action, e))
}

/// With a pod network, every port of the demo's PortMapping also needs its pod's server to
/// answer (`httpGet` on the target port), probed every second.
fn with_http_checks(doc: &Value) -> Value {
    let mut doc = doc.clone();
    if doc["kind"] != "PortMapping" {
        return doc;
    }
    if let Some(ports) = doc["spec"]["ports"].as_array_mut() {
        for port in ports {
            if let Some(checks) = port["checks"].as_array_mut() {
                checks.push(json!({"httpGet": {"path": "/healthz"}}));
            }
        }
    }
    doc["spec"]["probe"] = json!({"periodSeconds": 1, "failureThreshold": 1});
    doc
}

/// Plays kubelet: every pod without an IP gets the next 10.244.0.0/16 address and becomes Ready;
/// with a pod network, it also gets servers on that address.
async fn play_kubelet(
    client: Client,
    shutdown: CancellationToken,
    network: Option<Arc<PodNetwork>>,
) {
    let pods: Api<Pod> = Api::all(client.clone());
    let mut next: u32 = 1;
    let mut stream = std::pin::pin!(
        watcher(pods, watcher::Config::default())
            .default_backoff()
            .applied_objects()
    );
    loop {
        let pod = tokio::select! {
            _ = shutdown.cancelled() => return,
            item = stream.try_next() => match item {
                Ok(Some(pod)) => pod,
                Ok(None) => return,
                Err(_) => continue,
            },
        };
        if pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_ref())
            .is_some()
            || pod.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 244, 0, 0)) + next);
        next += 1;
        let status = json!({"status": {
            "phase": "Running",
            "podIP": ip.to_string(),
            "podIPs": [{"ip": ip.to_string()}],
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}],
            "containerStatuses": pod.spec.iter().flat_map(|s| s.containers.iter()).map(|c| json!({
                "name": c.name, "ready": true, "restartCount": 0, "image": c.image, "imageID": "",
                "state": {"running": {}},
            })).collect::<Vec<_>>(),
        }});
        if let Some(network) = &network {
            // Every demo pod runs the same app on both ports; which ports it backs is up to
            // its annotation and, with a pod network, to whether that server answers.
            for port in DEMO_APP_PORTS {
                network.start_server(&pod.name_any(), IpAddr::V4(ip), port);
            }
        }
        let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
        let _ = api
            .patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&status),
            )
            .await;
    }
}

/// `(service, port, members)` rows of the live slices, sorted: every port a slice lists has
/// its endpoints (a port-set slice lists several ports).
fn rows(slices: &[EndpointSlice]) -> Vec<(String, String, String)> {
    let mut ports: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for s in slices {
        let svc = s
            .labels()
            .get("kubernetes.io/service-name")
            .cloned()
            .unwrap_or_default();
        let members: Vec<String> = s
            .endpoints
            .iter()
            .map(|e| {
                let name = e
                    .target_ref
                    .as_ref()
                    .and_then(|t| t.name.clone())
                    .unwrap_or_default();
                let ready = e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
                if ready {
                    name
                } else {
                    format!("{name}(not ready)")
                }
            })
            .collect();
        for p in s.ports.iter().flatten() {
            let port = p
                .name
                .clone()
                .unwrap_or_else(|| p.port.unwrap_or_default().to_string());
            ports
                .entry((svc.clone(), port))
                .or_default()
                .extend(members.iter().cloned());
        }
    }
    ports
        .into_iter()
        .map(|((svc, port), mut pods)| {
            pods.sort();
            let members = if pods.is_empty() {
                "-".to_string()
            } else {
                pods.join(", ")
            };
            (svc, port, members)
        })
        .collect()
}

/// The membership as `  service port: pods` lines: what the tour waits for.
fn render(rows: &[(String, String, String)]) -> String {
    rows.iter()
        .map(|(svc, port, members)| format!("  {svc} {port}: {members}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The membership as an aligned table (SERVICE, PORT, MEMBERS), one line per port.
fn table(rows: &[(String, String, String)]) -> Vec<String> {
    let w_svc = rows.iter().map(|r| r.0.len()).chain([7]).max().unwrap_or(7);
    let w_port = rows.iter().map(|r| r.1.len()).chain([4]).max().unwrap_or(4);
    let mut lines = vec![format!(
        "  {:<w_svc$}  {:<w_port$}  MEMBERS",
        "SERVICE", "PORT"
    )];
    lines.extend(
        rows.iter()
            .map(|(svc, port, members)| format!("  {svc:<w_svc$}  {port:<w_port$}  {members}")),
    );
    lines
}

async fn show_membership(
    client: Client,
    started: Instant,
    view: Arc<Mutex<String>>,
    shutdown: CancellationToken,
) {
    let api: Api<EndpointSlice> = Api::all(client);
    let (store, writer) = kube::runtime::reflector::store();
    let stream = watcher(api, watcher::Config::default().labels(MANAGED_BY_SELECTOR))
        .default_backoff()
        .reflect(writer)
        .touched_objects();
    let mut stream = std::pin::pin!(stream);
    let live = std::io::stdout().is_terminal();
    let (mut drawn, mut drawn_at) = (0usize, 0usize);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            item = stream.next() => if item.is_none() { return },
        }
        let slices: Vec<EndpointSlice> = store.state().iter().map(|s| s.as_ref().clone()).collect();
        let rows = rows(&slices);
        let text = render(&rows);
        let mut last = view.lock().await;
        if *last != text {
            let mut lines = vec![format!(
                "[{:>5.1}s] membership:",
                started.elapsed().as_secs_f64()
            )];
            lines.extend(table(&rows));
            let mut out = std::io::stdout().lock();
            // On a terminal the table is redrawn in place while nothing else printed since:
            // a live view rather than a scroll of snapshots. Piped output keeps every snapshot.
            if live && drawn > 0 && printed_lines() == drawn_at {
                let _ = write!(out, "\x1b[{drawn}F\x1b[J");
            }
            for l in &lines {
                let _ = writeln!(out, "{l}");
            }
            let _ = out.flush();
            drawn = lines.len();
            note_printed(lines.len());
            drawn_at = printed_lines();
            *last = text;
        }
    }
}

/// A scripted walk through what a user would do with kubectl, for unattended runs.
async fn tour(
    client: &Client,
    view: &Arc<Mutex<String>>,
    network: Option<&PodNetwork>,
) -> Result<(), Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    wait_for(view, "my-service https: pod-b, pod-c, pod-d").await;
    say!("$ kubectl annotate pod pod-a example.com/ports=http,https --overwrite");
    let patch = json!({"metadata": {"annotations": {"example.com/ports": "http,https"}}});
    pods.patch("pod-a", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| Error::kube("annotating pod-a", e))?;
    wait_for(view, "my-service https: pod-a, pod-b, pod-c, pod-d").await;
    say!("$ kubectl delete pod pod-c   # pod-c leaves both ports");
    pods.delete("pod-c", &DeleteParams::default())
        .await
        .map_err(|e| Error::kube("deleting pod-c", e))?;
    wait_for(view, "my-service http: pod-a, pod-b\n").await;
    if let Some(network) = network {
        say!("$ (pod-b's https server on 8443 stops; its http server keeps answering)");
        network.stop_server("pod-b", 8443);
        wait_for(view, "my-service https: pod-a, pod-d\n").await;
        say!("pod-b left https (httpGet refused) and still serves http");
    }
    say!("tour done: pod-a joined https, pod-c left http and https");
    Ok(())
}

async fn wait_for(view: &Arc<Mutex<String>>, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if format!("{}\n", view.lock().await).contains(needle) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    say!("(gave up waiting for {needle:?} after 30s)");
}
