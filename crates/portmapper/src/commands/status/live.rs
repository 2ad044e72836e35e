//! Reading a live PortMapping, its Service and its slices through the kubeconfig: once, or
//! with kube-runtime watchers on every change (`--watch`), and the errors that end it.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::ExitCode;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Config, ResourceExt};
use portmapper_api::PortMapping;

use super::{MANAGED_BY, Output, SERVICE_NAME, StatusOptions, View, json, matrix, table};

/// Why `portmapper status` failed.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The kubeconfig could not be read or used.
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// The object does not exist.
    #[error("{kind} {namespace}/{name} not found{hint}")]
    NotFound {
        /// Kind.
        kind: &'static str,
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// What to check.
        hint: String,
    },
    /// The credentials may not read something.
    #[error("not allowed to {action}: {message}")]
    Forbidden {
        /// What was refused, e.g. `get portmappings in namespace default`.
        action: String,
        /// The API server's message.
        message: String,
    },
    /// Any other API failure.
    #[error("{action}: {source}")]
    Api {
        /// What we were doing.
        action: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// Encoding the JSON output failed.
    #[error("encoding the JSON output: {0}")]
    Encode(#[source] serde_json::Error),
    /// Writing the output failed.
    #[error("writing the output: {0}")]
    Output(#[from] std::io::Error),
}

/// What a 404 means for one read: (kind, namespace, name, hint).
type NotFound<'a> = (&'static str, &'a str, &'a str, &'a str);

/// Maps a client error for `action` to a clear message (`not_found`: what a 404 means).
fn api_error(err: kube::Error, action: String, not_found: Option<NotFound<'_>>) -> StatusError {
    match (err, not_found) {
        (kube::Error::Api(status), Some((kind, namespace, name, hint)))
            if status.is_not_found() =>
        {
            StatusError::NotFound {
                kind,
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                hint: hint.to_owned(),
            }
        }
        (kube::Error::Api(status), _) if status.is_forbidden() => StatusError::Forbidden {
            action,
            message: status.message.clone(),
        },
        (source, _) => StatusError::Api { action, source },
    }
}

/// A client for the kubeconfig (`--kubeconfig`, `$KUBECONFIG`, `~/.kube/config`, else
/// in-cluster) and `--context`, and the namespace to use.
async fn connect(args: &StatusOptions) -> Result<(Client, String), StatusError> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    let bad = |e: &dyn std::fmt::Display| StatusError::Kubeconfig(e.to_string());
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|e| StatusError::Kubeconfig(format!("{}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| StatusError::Kubeconfig(format!("{}: {e}", path.display())))?
        }
        None if args.context.is_some() => Config::from_kubeconfig(&options)
            .await
            .map_err(|e| bad(&e))?,
        None => Config::infer().await.map_err(|e| bad(&e))?,
    };
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client =
        crate::runtime::client::plain(config, &crate::runtime::client::user_agent(Some("status")))
            .map_err(|e| StatusError::Kubeconfig(e.to_string()))?;
    Ok((client, namespace))
}

/// The three objects a view is made of, read once.
async fn read_once(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<(PortMapping, Service, Vec<EndpointSlice>), StatusError> {
    let pms: Api<PortMapping> = Api::namespaced(client.clone(), namespace);
    let pm = pms.get(name).await.map_err(|e| {
        api_error(
            e,
            format!("get portmappings.portmapper.dev {name} in namespace {namespace}"),
            Some((
                "PortMapping",
                namespace,
                name,
                " (check the name and the namespace: -n)",
            )),
        )
    })?;
    let svc_name = pm.spec.service_ref.name.clone();
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let hint = format!(" (PortMapping {name} names it in spec.serviceRef; nothing is published)");
    let service = services.get(&svc_name).await.map_err(|e| {
        api_error(
            e,
            format!("get services {svc_name} in namespace {namespace}"),
            Some(("Service", namespace, &svc_name, &hint)),
        )
    })?;
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    let list = slices
        .list(&ListParams::default().labels(&slice_selector(&svc_name)))
        .await
        .map_err(|e| {
            api_error(
                e,
                format!("list endpointslices.discovery.k8s.io in namespace {namespace}"),
                None,
            )
        })?;
    Ok((pm, service, list.items))
}

fn slice_selector(service: &str) -> String {
    format!(
        "{MANAGED_BY}={},{SERVICE_NAME}={service}",
        portmapper_api::MANAGER
    )
}

fn render(view: &View, output: Output, watch: bool) -> Result<String, StatusError> {
    match output {
        Output::Table => Ok(table(view)),
        Output::Json => json(view, watch),
    }
}

/// Which watch an event came from.
pub(super) enum Changed {
    PortMapping(watcher::Event<PortMapping>),
    Service(watcher::Event<Service>),
    Slice(watcher::Event<EndpointSlice>),
}

/// The latest state of one watch: what it shows, a relist in progress (swapped in at its end,
/// so a relist never shows a transient "not found" or a half list), and whether its first list
/// completed.
struct Watched<K> {
    current: BTreeMap<String, K>,
    relist: Option<BTreeMap<String, K>>,
    synced: bool,
}

impl<K> Default for Watched<K> {
    fn default() -> Self {
        Self {
            current: BTreeMap::new(),
            relist: None,
            synced: false,
        }
    }
}

impl<K: kube::Resource> Watched<K> {
    fn apply(&mut self, event: watcher::Event<K>) {
        match event {
            watcher::Event::Apply(o) => {
                self.current.insert(o.name_any(), o);
            }
            watcher::Event::Delete(o) => {
                self.current.remove(&o.name_any());
            }
            watcher::Event::Init => self.relist = Some(BTreeMap::new()),
            watcher::Event::InitApply(o) => {
                self.relist
                    .get_or_insert_with(BTreeMap::new)
                    .insert(o.name_any(), o);
            }
            watcher::Event::InitDone => {
                self.current = self.relist.take().unwrap_or_default();
                self.synced = true;
            }
        }
    }

    /// The one object of a watch by name.
    fn only(&self) -> Option<&K> {
        self.current.values().next()
    }
}

/// The latest objects, kept from the watch events (a small store: one PortMapping, one Service,
/// a few slices).
#[derive(Default)]
pub(super) struct Live {
    pm: Watched<PortMapping>,
    service: Watched<Service>,
    slices: Watched<EndpointSlice>,
}

impl Live {
    pub(super) fn apply(&mut self, changed: Changed) {
        match changed {
            Changed::PortMapping(e) => self.pm.apply(e),
            Changed::Service(e) => self.service.apply(e),
            Changed::Slice(e) => self.slices.apply(e),
        }
    }

    fn synced(&self) -> bool {
        self.pm.synced && self.service.synced && self.slices.synced
    }

    /// The frame to print now, or `None` while a watch has not listed yet.
    pub(super) fn frame(
        &self,
        namespace: &str,
        name: &str,
        output: Output,
        watch: bool,
    ) -> Result<Option<String>, StatusError> {
        if !self.synced() {
            return Ok(None);
        }
        let Some(pm) = self.pm.only() else {
            return Ok(Some(format!(
                "PortMapping {namespace}/{name} not found (deleted?); waiting for it\n"
            )));
        };
        let Some(service) = self.service.only() else {
            return Ok(Some(format!(
                "Service {namespace}/{} not found; PortMapping {name} publishes nothing; \
                 waiting for it\n",
                pm.spec.service_ref.name
            )));
        };
        let slices: Vec<EndpointSlice> = self.slices.current.values().cloned().collect();
        render(&matrix(pm, service, &slices), output, watch).map(Some)
    }
}

fn events<K>(
    api: Api<K>,
    config: watcher::Config,
    wrap: fn(watcher::Event<K>) -> Changed,
) -> impl Stream<Item = Result<Changed, watcher::Error>> + Send
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher(api, config)
        .default_backoff()
        .map(move |e| e.map(wrap))
}

async fn watch(
    client: Client,
    namespace: &str,
    name: &str,
    service: &str,
    output: Output,
) -> Result<(), StatusError> {
    let by_name = |n: &str| watcher::Config::default().fields(&format!("metadata.name={n}"));
    let pm_events = events(
        Api::<PortMapping>::namespaced(client.clone(), namespace),
        by_name(name),
        Changed::PortMapping,
    );
    let svc_events = events(
        Api::<Service>::namespaced(client.clone(), namespace),
        by_name(service),
        Changed::Service,
    );
    let slice_events = events(
        Api::<EndpointSlice>::namespaced(client, namespace),
        watcher::Config::default().labels(&slice_selector(service)),
        Changed::Slice,
    );
    let mut stream =
        futures::stream::select_all([pm_events.boxed(), svc_events.boxed(), slice_events.boxed()]);
    let mut live = Live::default();
    let mut last = String::new();
    let mut stdout = std::io::stdout();
    // One listener for the whole watch, so a Ctrl-C between two events is not lost.
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        let next = tokio::select! {
            next = stream.next() => next,
            _ = &mut ctrl_c => return Ok(()),
        };
        match next {
            None => return Ok(()),
            Some(Err(err)) => {
                // The watcher backs off and retries; say so rather than stop.
                tracing::warn!(error = %err, portmapping = name, "watch failed; retrying");
                continue;
            }
            Some(Ok(changed)) => live.apply(changed),
        }
        if let Some(pm) = live.pm.only()
            && pm.spec.service_ref.name != service
        {
            // The slices watch selects by Service name: another Service needs another watch.
            let frame = format!(
                "PortMapping {namespace}/{name} now names Service {}; run portmapper status \
                 again to follow it\n",
                pm.spec.service_ref.name
            );
            stdout.write_all(frame.as_bytes())?;
            stdout.flush()?;
            return Ok(());
        }
        let Some(frame) = live.frame(namespace, name, output, true)? else {
            continue;
        };
        // Events that change nothing the view shows (a resync, another field) print nothing.
        if frame != last {
            if output == Output::Table && !last.is_empty() {
                stdout.write_all(b"\n")?;
            }
            stdout.write_all(frame.as_bytes())?;
            stdout.flush()?;
            last = frame;
        }
    }
}

/// `portmapper status`: reads, prints, and with `--watch` follows the changes.
pub async fn run(args: StatusOptions) -> Result<(), StatusError> {
    let (client, namespace) = connect(&args).await?;
    // Read once first, also with --watch: not found / forbidden fail here with a clear message
    // instead of a watch retrying forever.
    let (pm, service, slices) = read_once(&client, &namespace, &args.name).await?;
    if !args.watch {
        let text = render(&matrix(&pm, &service, &slices), args.output, false)?;
        let mut stdout = std::io::stdout();
        stdout.write_all(text.as_bytes())?;
        stdout.flush()?;
        return Ok(());
    }
    let service_name = pm.spec.service_ref.name.clone();
    watch(client, &namespace, &args.name, &service_name, args.output).await
}

/// Entry point from `main`: runs [`run`] on a runtime and maps errors to the exit code.
pub fn main(args: StatusOptions, program: &str) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("{program}: starting the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`| head`, `| jq` that exited): it has what it wanted, as
        // kubectl's output stops there too.
        Err(StatusError::Output(err)) if err.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::SUCCESS
        }
        Err(err) => {
            tracing::debug!(error = %err, "status failed");
            eprintln!("{program}: error: {err}");
            ExitCode::FAILURE
        }
    }
}
