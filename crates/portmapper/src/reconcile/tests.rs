//! Reconcile-level tests: `reconcile` against the recording fake API ([`super::fake_api`]),
//! with caches filled by hand, asserting the ordered writes and the status synchronously.
//! Emulator tests (`tests/it`) stay for wiring, faults and failover.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::PartialObjectMeta;
use kube::runtime::reflector;
use kube::runtime::watcher;
use portmapper_api::PortMapping;
use portmapper_core::PodRecord;
use serde_json::{Value, json};

use crate::index::PodSource;
use crate::reconcile::context::{Context, TestFeeds};
use crate::reconcile::fake_api::FakeApi;

const NS: &str = "default";
const SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices";
const STATUS: &str = "/apis/portmapper.dev/v1alpha1/namespaces/default/portmappings/web/status";
const PM: &str = "/apis/portmapper.dev/v1alpha1/namespaces/default/portmappings/web";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/default/events";

/// The PortMapping of most tests here, publishing one slice per port (`web.http`): they are
/// about the reconcile's writes, and read them by name. [`port_set_pm`] has the default shape.
fn pm() -> PortMapping {
    let mut pm = port_set_pm();
    pm.spec.slice_grouping = portmapper_api::SliceGrouping::PerPort;
    pm
}

fn port_set_pm() -> PortMapping {
    let mut pm = PortMapping::new(
        "web",
        serde_json::from_value(json!({
            "serviceRef": {"name": "web"},
            "pods": {"key": "app"},
            "defaultChecks": [{"podReady": {}}],
        }))
        .unwrap(),
    );
    pm.metadata.namespace = Some(NS.into());
    pm.metadata.uid = Some("pm-uid".into());
    pm.metadata.generation = Some(1);
    pm.metadata.resource_version = Some("1".into());
    pm
}

fn service() -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": NS, "uid": "svc-uid"},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}], "clusterIP": "10.96.0.10"},
    }))
    .unwrap()
}

fn pod(name: &str, ip: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"),
                     "labels": {"app": "web"}, "resourceVersion": "5"},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}]},
        "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .unwrap()
}

/// A slice as the API server stores it (what our first publication writes, with a UID).
fn stored(body: &Value) -> EndpointSlice {
    let mut slice: EndpointSlice = serde_json::from_value(body.clone()).unwrap();
    slice.metadata.namespace = Some(NS.into());
    slice.metadata.uid = Some("slice-uid".into());
    slice.metadata.resource_version = Some("100".into());
    slice
}

/// The operator's context over the fake, with caches the test fills.
struct World {
    api: FakeApi,
    pm: PortMapping,
    ctx: Arc<Context>,
    feeds: TestFeeds,
}

impl World {
    fn new(service: Option<Service>, pods: Vec<Pod>) -> Self {
        Self::with(pm(), service, pods)
    }

    fn with(pm: PortMapping, service: Option<Service>, pods: Vec<Pod>) -> Self {
        Self::batched(pm, service, pods, Duration::ZERO)
    }

    /// A world whose passes wait `window` after a pass that wrote (and whose counts are
    /// written once per `window`: it is the status window too).
    fn batched(
        pm: PortMapping,
        service: Option<Service>,
        pods: Vec<Pod>,
        window: Duration,
    ) -> Self {
        Self::windows(pm, service, pods, window, window)
    }

    /// A world whose counts-only status changes are written once per `status_window`, and
    /// whose passes wait `batch_window` after a pass that wrote. (The operator has one
    /// window, `--batch-window-ms`, for both; apart here, a test can flip pods one pass each
    /// inside one status window.)
    fn windows(
        pm: PortMapping,
        service: Option<Service>,
        pods: Vec<Pod>,
        batch_window: Duration,
        status_window: Duration,
    ) -> Self {
        let api = FakeApi::default();
        // The status subresource answers with the whole object, as the API server does.
        api.respond("PATCH", STATUS, 200, serde_json::to_value(&pm).unwrap());
        // So does a finalizer patch.
        api.respond("PATCH", PM, 200, serde_json::to_value(&pm).unwrap());
        let (ctx, mut feeds) = Context::test(api.client());
        feeds
            .portmappings
            .apply_watcher_event(&watcher::Event::Apply(pm.clone()));
        if let Some(service) = service {
            feeds
                .services
                .apply_watcher_event(&watcher::Event::Apply(service));
        }
        let source = PodSource::Label {
            namespace: NS.into(),
            key: "app".into(),
        };
        {
            let mut idx = ctx.index.lock();
            idx.apply_portmapping(&pm);
            let mut listed = std::collections::HashSet::new();
            for p in &pods {
                idx.apply_pod(&source, Arc::new(PodRecord::from(p.clone())));
                listed.insert(reflector::ObjectRef::from_obj(p));
            }
            // The pool's watch has listed.
            idx.retain_pods(&source, &listed);
        }
        let mut ctx = ctx;
        ctx.settings.batch_window = status_window;
        ctx.states.batches = crate::reconcile::batch_window::BatchWindows::new(batch_window);
        Self {
            api,
            pm,
            ctx: Arc::new(ctx),
            feeds,
        }
    }

    /// A slice event of our label-selected watch: the index (which keeps our slices), then the
    /// reconciles it queues.
    fn slice_seen(&mut self, slice: EndpointSlice) {
        let affected = self.ctx.index.lock().apply_slice(slice);
        self.queue(affected);
    }

    /// A pod event of the pool's watch: the index, then the reconciles it queues.
    fn pod_seen(&self, pod: Pod) {
        let affected = self.ctx.index.lock().apply_pod(
            &PodSource::Label {
                namespace: NS.into(),
                key: "app".into(),
            },
            Arc::new(PodRecord::from(pod)),
        );
        self.queue(affected);
    }

    fn queue(&self, affected: Vec<reflector::ObjectRef<PortMapping>>) {
        for pm in affected {
            let _ = self.ctx.trigger.unbounded_send(pm);
        }
    }

    fn slice_gone(&mut self, slice: EndpointSlice) {
        self.ctx
            .index
            .lock()
            .delete_slice(&reflector::ObjectRef::from_obj(&slice));
    }

    fn foreign_seen(&mut self, slice: PartialObjectMeta<EndpointSlice>) {
        self.ctx.index.lock().apply_foreign_slice(&slice);
        self.feeds
            .foreign_slices
            .apply_watcher_event(&watcher::Event::Apply(slice));
    }

    /// An event of the watch of our Endpoints objects: the index, then the store.
    fn endpoints_seen(&mut self, endpoints: Endpoints) {
        self.ctx.index.lock().apply_endpoints(&endpoints);
        self.feeds
            .owned_endpoints
            .apply_watcher_event(&watcher::Event::Apply(endpoints));
    }

    async fn reconcile(
        &self,
    ) -> Result<kube::runtime::controller::Action, crate::runtime::error::Error> {
        crate::reconcile::reconcile(Arc::new(self.pm.clone()), self.ctx.clone()).await
    }

    /// The body of the one request `line` (`METHOD path`).
    fn body(&self, line: &str) -> Value {
        let found: Vec<_> = self
            .api
            .requests()
            .into_iter()
            .filter(|r| r.line() == line)
            .collect();
        assert_eq!(found.len(), 1, "{line}: {found:?}");
        found[0].body.clone()
    }
}

/// The condition `type_` of a status body: (status, reason).
fn condition(status: &Value, type_: &str) -> (String, String) {
    let c = status["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .cloned()
        .unwrap_or_default();
    (
        c["status"].as_str().unwrap_or_default().to_owned(),
        c["reason"].as_str().unwrap_or_default().to_owned(),
    )
}

#[tokio::test]
async fn first_publication_applies_the_slice_then_the_status_and_then_writes_nothing() {
    let mut w = World::new(Some(service()), vec![pod("pod-a", "10.244.0.1")]);
    w.reconcile().await.unwrap();
    let apply = w.body(&format!("POST {SLICES}/web.http"));
    let status = w.body(&format!("PATCH {STATUS}"));
    let query = &w.api.requests()[0].uri;
    assert!(
        query.contains("fieldManager=portmapper.dev") && !query.contains("force"),
        "{query}"
    );
    // Only the stored resourceVersion is read from the answer: asked for as metadata.
    let accept = &w.api.requests()[0].accept;
    assert!(accept.contains("as=PartialObjectMetadata"), "{accept}");
    assert_eq!(
        w.api.take_lines(),
        [format!("POST {SLICES}/web.http"), format!("PATCH {STATUS}")],
        "no GET before the create, the slice before the status"
    );
    assert_eq!(apply["endpoints"][0]["addresses"], json!(["10.244.0.1"]));
    assert_eq!(
        apply["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
        "portmapper.dev"
    );
    assert_eq!(
        condition(&status, "Ready"),
        ("True".into(), "Published".into())
    );
    assert_eq!(status["status"]["endpointSlices"], 1);

    // The watch brings our slice (and our status is remembered): converged, zero requests.
    w.slice_seen(stored(&apply));
    w.reconcile().await.unwrap();
    assert_eq!(w.api.take_lines(), Vec::<String>::new());
}

/// A resync of a PortMapping whose inputs have not changed since a pass that wrote nothing
/// plans nothing; the next event that touches it ends that.
#[tokio::test]
async fn a_pass_with_nothing_new_to_read_is_skipped_until_an_event_touches_it() {
    let mut w = World::new(Some(service()), vec![pod("pod-a", "10.244.0.1")]);
    let quiet = |w: &World| {
        w.ctx
            .metrics
            .reconciles
            .get_or_create(&crate::runtime::metrics::ResultLabels { result: "quiet" })
            .get()
    };
    let planned = |w: &World| {
        ["reused", "evaluated"]
            .map(|evaluation| {
                w.ctx
                    .metrics
                    .plan_pods
                    .get_or_create(&crate::runtime::metrics::EvaluationLabels { evaluation })
                    .get()
            })
            .iter()
            .sum::<u64>()
    };
    w.reconcile().await.unwrap();
    let apply = w.body(&format!("POST {SLICES}/web.http"));
    w.slice_seen(stored(&apply));
    w.api.take_lines();
    // Writes nothing, reads only caches: settled.
    w.reconcile().await.unwrap();
    assert_eq!(w.api.take_lines(), Vec::<String>::new());
    assert_eq!((planned(&w), quiet(&w)), (2, 0));
    // The resync after it: no plan.
    w.reconcile().await.unwrap();
    w.reconcile().await.unwrap();
    assert_eq!(w.api.take_lines(), Vec::<String>::new());
    assert_eq!((planned(&w), quiet(&w)), (2, 2));
    // The pod turns unready: its event queues a reconcile, which plans and writes.
    let mut unready = pod("pod-a", "10.244.0.1");
    unready.metadata.resource_version = Some("6".into());
    unready
        .status
        .as_mut()
        .unwrap()
        .conditions
        .as_mut()
        .unwrap()[0]
        .status = "False".into();
    w.pod_seen(unready);
    w.reconcile().await.unwrap();
    let lines = w.api.take_lines();
    assert!(
        lines.contains(&format!("PUT {SLICES}/web.http")),
        "{lines:?}"
    );
    assert_eq!((planned(&w), quiet(&w)), (3, 2));
}

#[tokio::test]
async fn a_name_held_by_others_is_never_written_and_reported_once() {
    let mut w = World::new(Some(service()), vec![pod("pod-a", "10.244.0.1")]);
    let squatter: PartialObjectMeta<EndpointSlice> = serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web.http", "namespace": NS, "uid": "squatter-uid",
                     "labels": {"endpointslice.kubernetes.io/managed-by": "someone-else"}},
    }))
    .unwrap();
    w.foreign_seen(squatter);
    w.reconcile().await.unwrap();
    let status = w.body(&format!("PATCH {STATUS}"));
    let event = w.body(&format!("POST {EVENTS}"));
    assert_eq!(
        w.api.take_lines(),
        [format!("POST {EVENTS}"), format!("PATCH {STATUS}")],
        "no slice write, no GET"
    );
    assert_eq!(
        condition(&status, "Stalled"),
        ("True".into(), "NameCollision".into())
    );
    assert_eq!(event["reason"], "EndpointSliceNameCollision");
    assert_eq!(
        event["note"],
        "EndpointSlice web.http already exists (managed by someone-else)"
    );
    assert_eq!(event["related"]["uid"], "squatter-uid");
    // Again: the same squatter is not news, and the status is unchanged.
    w.reconcile().await.unwrap();
    assert_eq!(w.api.take_lines(), Vec::<String>::new());
}

/// The status a PATCH body sets, as the PortMapping cache would deliver it at `version`.
fn with_status(pm: &PortMapping, patch: &Value, version: &str) -> PortMapping {
    let mut pm = pm.clone();
    pm.status = Some(serde_json::from_value(patch["status"].clone()).unwrap());
    pm.metadata.resource_version = Some(version.into());
    pm
}

/// Our own status writes reach the PortMapping cache late (a slow watch): the passes in between
/// see the old status. A status change is patched once, however many passes run before and
/// after the cache catches up.
#[tokio::test]
async fn a_status_change_is_patched_once_while_the_portmapping_cache_lags() {
    let pods = vec![pod("pod-a", "10.244.0.1"), pod("pod-b", "10.244.0.2")];
    let mut w = World::new(Some(service()), pods);
    w.reconcile().await.unwrap();
    let apply = w.body(&format!("POST {SLICES}/web.http"));
    let first = w.body(&format!("PATCH {STATUS}"));
    assert_eq!(first["status"]["summary"], "http 2/2");
    w.slice_seen(stored(&apply));
    w.pm = with_status(&w.pm, &first, "2");
    w.api.take_lines();

    w.pod_seen(unready_pod("pod-b", "10.244.0.2"));
    w.reconcile().await.unwrap();
    let apply = w.body(&format!("PUT {SLICES}/web.http"));
    // An update of the version the cache shows, refused if the slice changed since.
    assert_eq!(apply["metadata"]["resourceVersion"], "100");
    let second = w.body(&format!("PATCH {STATUS}"));
    assert_eq!(second["status"]["summary"], "http 1/2");
    assert_eq!(w.api.take_lines().len(), 2, "the slice, then the status");
    w.slice_seen(stored(&apply));
    // Passes while the cache still holds the first status, then one after it caught up.
    for _ in 0..3 {
        w.reconcile().await.unwrap();
    }
    w.pm = with_status(&w.pm, &second, "3");
    w.reconcile().await.unwrap();
    assert_eq!(
        w.api.take_lines(),
        Vec::<String>::new(),
        "one status change, one PATCH"
    );
}

/// Two PortMappings of one Service created in the same second: the name loser published first
/// (the winner did not exist yet); the name winner takes its slices over (one apply naming it
/// owner, no collision Event), the loser reports the conflict (`ServiceClaimed`, naming the
/// winner) and writes nothing else, and the slices follow the pods again. The tie is the
/// hardest case of the claim (oldest, then name): a younger second PortMapping loses the
/// same way.
#[tokio::test]
async fn same_second_portmappings_hand_the_slices_to_the_name_winner() {
    let second = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).unwrap(),
    );
    let named = |name: &str| {
        let mut pm = pm();
        pm.metadata.name = Some(name.into());
        pm.metadata.uid = Some(format!("uid-{name}"));
        pm.metadata.creation_timestamp = Some(second.clone());
        pm
    };
    let (zz, aa) = (named("zz"), named("aa"));
    let pods = vec![pod("pod-a", "10.244.0.1"), pod("pod-b", "10.244.0.2")];
    let mut w = World::with(zz.clone(), Some(service()), pods);
    let path = |name: &str| {
        format!("/apis/portmapper.dev/v1alpha1/namespaces/{NS}/portmappings/{name}/status")
    };
    for pm in [&zz, &aa] {
        w.api.respond(
            "PATCH",
            &path(&pm.name_any()),
            200,
            serde_json::to_value(pm).unwrap(),
        );
    }
    w.reconcile().await.unwrap();
    let published = w.body(&format!("POST {SLICES}/web.http"));
    assert_eq!(published["metadata"]["ownerReferences"][0]["uid"], "uid-zz");
    w.slice_seen(stored(&published));
    w.api.take_lines();

    w.feeds
        .portmappings
        .apply_watcher_event(&watcher::Event::Apply(aa.clone()));
    let affected = w.ctx.index.lock().apply_portmapping(&aa).affected;
    assert_eq!(affected.len(), 2, "both hear of the newcomer: {affected:?}");
    let ctx = w.ctx.clone();
    let pass = |pm: &PortMapping| crate::reconcile::reconcile(Arc::new(pm.clone()), ctx.clone());
    pass(&aa).await.unwrap();
    let taken = w.body(&format!("PUT {SLICES}/web.http"));
    assert_eq!(
        w.api.take_lines(),
        [
            format!("PUT {SLICES}/web.http"),
            format!("PATCH {}", path("aa"))
        ],
        "taking over is an apply, not a collision Event"
    );
    let owners = taken["metadata"]["ownerReferences"].as_array().unwrap();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(owners[0]["uid"], "uid-aa");
    let mut slice = stored(&taken);
    slice.metadata.resource_version = Some("101".into());
    w.slice_seen(slice);

    pass(&zz).await.unwrap();
    let lost = w.body(&format!("PATCH {}", path("zz")));
    assert_eq!(w.api.take_lines(), [format!("PATCH {}", path("zz"))]);
    assert_eq!(
        condition(&lost, "Conflict"),
        ("True".into(), "ServiceClaimed".into())
    );
    let message = lost["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Conflict"))
        .map(|c| c["message"].clone());
    assert_eq!(
        message,
        Some(json!(
            "PortMapping aa already publishes Service web; this one writes nothing until it is removed"
        ))
    );

    w.pod_seen(unready_pod("pod-b", "10.244.0.2"));
    pass(&aa).await.unwrap();
    let followed = w.body(&format!("PUT {SLICES}/web.http"));
    assert_eq!(followed["endpoints"].as_array().map(Vec::len), Some(1));
    assert_eq!(followed["endpoints"][0]["addresses"], json!(["10.244.0.1"]));
}

/// A PortMapping deleted while its pass runs: the status PATCH finds it gone, which ends the
/// pass as a success (nothing is left to report to), not as a failure to back off from.
#[tokio::test]
async fn a_status_write_that_finds_the_portmapping_gone_ends_the_pass() {
    let w = World::new(Some(service()), vec![pod("pod-a", "10.244.0.1")]);
    w.api.fail("PATCH", STATUS, 404, "NotFound");
    w.reconcile().await.unwrap();
    assert_eq!(
        w.api.take_lines(),
        [format!("POST {SLICES}/web.http"), format!("PATCH {STATUS}")]
    );
}

#[tokio::test]
async fn a_missing_service_takes_the_slices_back_then_reports() {
    let mut w = World::new(None, vec![pod("pod-a", "10.244.0.1")]);
    let mut ours = stored(&json!({
        "metadata": {"name": "web.http", "labels": {
            "endpointslice.kubernetes.io/managed-by": "portmapper.dev",
            "kubernetes.io/service-name": "web"},
            "ownerReferences": [{"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
                                 "name": "web", "uid": "pm-uid", "controller": true}]},
        "addressType": "IPv4", "endpoints": [],
    }));
    ours.metadata.uid = Some("ours-uid".into());
    w.slice_seen(ours);
    w.reconcile().await.unwrap();
    let delete = w.body(&format!("DELETE {SLICES}/web.http"));
    let status = w.body(&format!("PATCH {STATUS}"));
    assert_eq!(
        w.api.take_lines(),
        [
            format!("DELETE {SLICES}/web.http"),
            format!("PATCH {STATUS}")
        ]
    );
    assert_eq!(delete["preconditions"]["uid"], "ours-uid");
    assert_eq!(
        condition(&status, "Ready"),
        ("False".into(), "ServiceNotFound".into())
    );
}

/// An ExternalName Service has no endpoints to publish: the PortMapping writes no slice and
/// says so (a Warning Event, then Ready=False and Stalled=True, reason ExternalName), once.
#[tokio::test]
async fn an_external_name_service_publishes_nothing_and_says_so() {
    let external: Service = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": NS, "uid": "svc-uid"},
        "spec": {"type": "ExternalName", "externalName": "example.com",
                 "ports": [{"name": "http", "port": 8080}]},
    }))
    .unwrap();
    let w = World::new(Some(external), vec![pod("pod-a", "10.244.0.1")]);
    w.reconcile().await.unwrap();
    let status = w.body(&format!("PATCH {STATUS}"));
    let event = w.body(&format!("POST {EVENTS}"));
    assert_eq!(
        w.api.take_lines(),
        [format!("POST {EVENTS}"), format!("PATCH {STATUS}")],
        "no slice"
    );
    assert_eq!(
        (&event["reason"], &event["type"]),
        (&json!("ExternalNameUnsupported"), &json!("Warning"))
    );
    assert_eq!(
        condition(&status, "Ready"),
        ("False".into(), "ExternalName".into())
    );
    assert_eq!(condition(&status, "Stalled").0, "True");
    w.reconcile().await.unwrap();
    assert_eq!(w.api.take_lines(), Vec::<String>::new());
}

/// `service.kubernetes.io/topology-mode: Auto` is the native controller's to honour: the slices
/// carry no hints, and one Warning Event says so, not one per pass.
#[tokio::test]
async fn topology_mode_auto_is_refused_with_one_warning_event() {
    let mut auto = service();
    auto.metadata.annotations = Some(
        [(
            "service.kubernetes.io/topology-mode".to_owned(),
            "Auto".to_owned(),
        )]
        .into(),
    );
    if let Some(spec) = auto.spec.as_mut() {
        spec.traffic_distribution = Some("PreferClose".into());
    }
    let mut w = World::new(Some(auto), vec![pod("pod-a", "10.244.0.1")]);
    w.reconcile().await.unwrap();
    let apply = w.body(&format!("POST {SLICES}/web.http"));
    let event = w.body(&format!("POST {EVENTS}"));
    assert_eq!(event["reason"], "TopologyAwareHintsDisabled");
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["regarding"]["name"], "web");
    assert!(
        apply["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e.get("hints").is_none()),
        "no hints under Auto: {apply}"
    );
    w.slice_seen(stored(&apply));
    w.api.take_lines();
    // The next passes: warned once.
    w.pod_seen(unready_pod("pod-a", "10.244.0.1"));
    w.reconcile().await.unwrap();
    w.reconcile().await.unwrap();
    let lines = w.api.take_lines();
    assert!(!lines.contains(&format!("POST {EVENTS}")), "{lines:?}");
}

#[tokio::test]
async fn a_forbidden_write_is_kept_reported_and_backed_off_as_permanent() {
    let w = World::new(Some(service()), vec![pod("pod-a", "10.244.0.1")]);
    w.api
        .fail("POST", &format!("{SLICES}/web.http"), 403, "Forbidden");
    let err = w.reconcile().await.unwrap_err();
    assert!(
        err.to_string()
            .contains("creating EndpointSlice default/web.http"),
        "{err}"
    );
    let status = w.body(&format!("PATCH {STATUS}"));
    assert_eq!(
        w.api.take_lines(),
        [format!("POST {SLICES}/web.http"), format!("PATCH {STATUS}")],
        "the status reports what we know before the error policy retries"
    );
    assert_eq!(
        condition(&status, "Ready"),
        ("False".into(), "ApplyFailed".into())
    );
    // A 403 is permanent: the first retry waits ~10 s (not the transient ladder's ~1 s), and a
    // reconcile inside that window writes nothing.
    let action = crate::reconcile::error_policy(Arc::new(pm()), &err, w.ctx.clone());
    let wait = format!("{action:?}");
    let failure = w
        .ctx
        .states
        .backoff
        .remaining(
            &kube::runtime::reflector::ObjectRef::from_obj(&pm()),
            Some(1),
            tokio::time::Instant::now(),
        )
        .unwrap_or_default();
    assert!(failure >= Duration::from_secs(7), "{failure:?} ({wait})");
    w.reconcile().await.unwrap();
    assert_eq!(w.api.take_lines(), Vec::<String>::new());
}

#[tokio::test]
async fn a_slice_relabelled_by_someone_is_read_not_forced_back_while_the_other_watch_lags() {
    let mut w = World::new(Some(service()), vec![pod("pod-a", "10.244.0.1")]);
    w.reconcile().await.unwrap();
    let ours = stored(&w.body(&format!("POST {SLICES}/web.http")));
    w.slice_seen(ours.clone());
    w.api.take_lines();
    // Someone relabels it: our label-selected watch says DELETED; the watch of slices not ours
    // has not delivered the new state yet. The API server has it relabelled.
    w.slice_gone(ours.clone());
    let mut relabelled = serde_json::to_value(&ours).unwrap();
    relabelled["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] =
        json!("someone-else");
    w.api
        .respond("GET", &format!("{SLICES}/web.http"), 200, relabelled);
    w.reconcile().await.unwrap();
    let status = w.body(&format!("PATCH {STATUS}"));
    let lines = w.api.take_lines();
    assert_eq!(
        lines,
        [
            format!("GET {SLICES}/web.http"),
            format!("POST {EVENTS}"),
            format!("PATCH {STATUS}")
        ],
        "read, never applied back"
    );
    assert_eq!(
        condition(&status, "Stalled"),
        ("True".into(), "NameCollision".into())
    );
}

/// An update refused with 409 Conflict (the slice changed since the cache showed it) is a
/// failed write; the retry updates the version the watch brought, keeping what its writer
/// added, never the refused one.
#[tokio::test]
async fn an_update_refused_for_a_newer_version_is_retried_on_the_version_the_watch_brings() {
    let pods = vec![pod("pod-a", "10.244.0.1"), pod("pod-b", "10.244.0.2")];
    let mut w = World::new(Some(service()), pods);
    w.reconcile().await.unwrap();
    let created = stored(&w.body(&format!("POST {SLICES}/web.http")));
    w.slice_seen(created.clone());
    w.api.take_lines();
    w.api
        .fail("PUT", &format!("{SLICES}/web.http"), 409, "Conflict");
    w.pod_seen(unready_pod("pod-b", "10.244.0.2"));
    let err = w.reconcile().await.unwrap_err();
    assert!(
        err.to_string()
            .contains("updating EndpointSlice default/web.http"),
        "{err}"
    );
    let refused = w.body(&format!("PUT {SLICES}/web.http"));
    assert_eq!(refused["metadata"]["resourceVersion"], "100");
    crate::reconcile::error_policy(Arc::new(pm()), &err, w.ctx.clone());
    // What the server had: someone else's write, which the watch now brings.
    let mut theirs = created;
    theirs.metadata.resource_version = Some("150".into());
    theirs
        .metadata
        .annotations
        .get_or_insert_default()
        .insert("example.com/by".into(), "someone".into());
    w.slice_seen(theirs);
    w.api.clear_failures();
    w.api.take_lines();
    tokio::time::sleep(Duration::from_millis(1300)).await;
    w.reconcile().await.unwrap();
    let retried = w.body(&format!("PUT {SLICES}/web.http"));
    assert_eq!(retried["metadata"]["resourceVersion"], "150");
    assert_eq!(
        retried["metadata"]["annotations"]["example.com/by"],
        "someone"
    );
    assert_eq!(retried["endpoints"], refused["endpoints"]);
}

/// Two ports, so two slices to write.
fn two_port_service() -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": NS, "uid": "svc-uid"},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080},
                           {"name": "https", "port": 443, "targetPort": 8443}],
                 "clusterIP": "10.96.0.10"},
    }))
    .unwrap()
}

fn two_port_pod(name: &str, ip: &str) -> Pod {
    let mut pod = pod(name, ip);
    pod.spec.as_mut().unwrap().containers[0].ports = Some(
        serde_json::from_value(json!([
            {"name": "http", "containerPort": 8080},
            {"name": "https", "containerPort": 8443},
        ]))
        .unwrap(),
    );
    pod
}

/// Asserts that `err` counts the `failures` and names each one; returns its message.
fn names_every_failure(err: &crate::runtime::error::Error, failures: &[&str]) -> String {
    let message = err.to_string();
    let count = format!("{} writes failed: ", failures.len());
    assert!(message.starts_with(&count), "{message}");
    for failure in failures {
        assert!(message.contains(failure), "{failure} not in {message}");
    }
    message
}

/// Every failed write of a pass is kept: the error and the status name each, and the backoff
/// follows the most severe (a 403 beside a 409 is not retried at the 409's rate).
#[tokio::test]
async fn every_failed_write_is_reported_and_the_most_severe_sets_the_backoff() {
    let w = World::new(
        Some(two_port_service()),
        vec![two_port_pod("pod-a", "10.244.0.1")],
    );
    w.api
        .fail("POST", &format!("{SLICES}/web.http"), 403, "Forbidden");
    w.api
        .fail("POST", &format!("{SLICES}/web.https"), 409, "Conflict");
    let err = w.reconcile().await.unwrap_err();
    let message = names_every_failure(
        &err,
        &[
            "creating EndpointSlice default/web.http:",
            "creating EndpointSlice default/web.https:",
        ],
    );
    let status = w.body(&format!("PATCH {STATUS}"));
    let mut lines = w.api.take_lines();
    // Both applies were sent (up to 8 in flight, so in either order), then the status.
    lines[..2].sort();
    assert_eq!(
        lines,
        [
            format!("POST {SLICES}/web.http"),
            format!("POST {SLICES}/web.https"),
            format!("PATCH {STATUS}")
        ]
    );
    assert_eq!(
        condition(&status, "Ready"),
        ("False".into(), "ApplyFailed".into())
    );
    let ready = status["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(ready["message"], message.as_str(), "{ready}");
    assert_eq!(
        crate::reconcile::backoff::Class::of(&err),
        Some(crate::reconcile::backoff::Class::Permanent)
    );
    assert_eq!(err.category(), "forbidden");
}

/// With the Service gone every deletion is attempted, though one before it failed, and every
/// failure is returned.
#[tokio::test]
async fn a_withdrawal_attempts_every_deletion_and_keeps_every_failure() {
    let mut w = World::new(None, vec![pod("pod-a", "10.244.0.1")]);
    let owner = json!([{"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
                        "name": "web", "uid": "pm-uid", "controller": true}]);
    let mut ours = stored(&json!({
        "metadata": {"name": "web.http", "labels": {
            "endpointslice.kubernetes.io/managed-by": "portmapper.dev",
            "kubernetes.io/service-name": "web"},
            "ownerReferences": owner},
        "addressType": "IPv4", "endpoints": [],
    }));
    ours.metadata.uid = Some("ours-uid".into());
    w.slice_seen(ours);
    for name in ["web", "web-old"] {
        w.endpoints_seen(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": NS, "uid": format!("{name}-uid"),
                             "ownerReferences": owner},
            }))
            .unwrap(),
        );
    }
    const ENDPOINTS: &str = "/api/v1/namespaces/default/endpoints";
    w.api.fail(
        "DELETE",
        &format!("{SLICES}/web.http"),
        500,
        "InternalError",
    );
    w.api
        .fail("DELETE", &format!("{ENDPOINTS}/web"), 403, "Forbidden");
    let err = w.reconcile().await.unwrap_err();
    assert_eq!(
        w.api.take_lines(),
        [
            format!("DELETE {SLICES}/web.http"),
            format!("DELETE {ENDPOINTS}/web"),
            format!("DELETE {ENDPOINTS}/web-old"),
        ],
        "every deletion attempted"
    );
    names_every_failure(
        &err,
        &[
            "deleting EndpointSlice default/web.http:",
            "deleting Endpoints default/web:",
        ],
    );
    assert_eq!(
        crate::reconcile::backoff::Class::of(&err),
        Some(crate::reconcile::backoff::Class::Permanent)
    );
}

/// A pool pod that lists the PortMapping's publication gate.
fn gated_pod(name: &str, ip: &str) -> Pod {
    let mut pod = pod(name, ip);
    pod.spec.as_mut().unwrap().readiness_gates = Some(
        serde_json::from_value(json!([{"conditionType": "portmapper.dev/published"}])).unwrap(),
    );
    // A gated pod's podReady reads ContainersReady (its Ready waits for the gate, as kubelet's
    // reason says).
    let conditions = pod.status.as_mut().unwrap().conditions.as_mut().unwrap();
    conditions[0].status = "False".into();
    conditions[0].reason = Some("ReadinessGatesNotReady".into());
    conditions.push(
        serde_json::from_value(json!({"type": "ContainersReady", "status": "True"})).unwrap(),
    );
    pod
}

const POD_STATUS: &str = "/api/v1/namespaces/default/pods/pod-a/status";

/// [`pm`] holding the release finalizer, as it does after its first pass over a gated pool.
fn gated_pm() -> PortMapping {
    let mut pm = pm();
    pm.metadata.finalizers = Some(vec![portmapper_core::planner::RELEASE_FINALIZER.into()]);
    pm
}

/// Until the pod cache shows our patch, a plan made from the stale pod asks for the same gate
/// again; the executor does not resend it. A plan from a newer pod writes it again.
#[tokio::test]
async fn a_gate_already_sent_is_not_resent_while_the_cache_lags() {
    let pods = vec![gated_pod("pod-a", "10.244.0.1")];
    let mut w = World::with(gated_pm(), Some(service()), pods);
    w.reconcile().await.unwrap();
    let gate = w.body(&format!("PATCH {POD_STATUS}"));
    let apply = w.body(&format!("POST {SLICES}/web.http"));
    assert_eq!(
        w.api.take_lines(),
        [
            format!("POST {SLICES}/web.http"),
            format!("PATCH {POD_STATUS}"),
            format!("PATCH {STATUS}")
        ],
        "the gate after the slice, the status last"
    );
    assert_eq!(gate["status"]["conditions"][0]["status"], "True");
    assert_eq!(gate["metadata"]["uid"], "uid-pod-a");
    w.slice_seen(stored(&apply));
    // The pod cache still shows the pod without the condition: the same gate is planned.
    w.reconcile().await.unwrap();
    assert_eq!(w.api.take_lines(), Vec::<String>::new());
    // A newer pod (still without it, say kubelet wrote first): planned from it, written.
    let mut newer = gated_pod("pod-a", "10.244.0.1");
    newer.metadata.resource_version = Some("6".into());
    w.pod_seen(newer);
    w.reconcile().await.unwrap();
    assert_eq!(w.api.take_lines(), [format!("PATCH {POD_STATUS}")]);
}

/// A pod is marked published only once the slices naming it are stored: with a slice write
/// failed, its True gate waits for the next pass.
#[tokio::test]
async fn a_true_gate_waits_for_the_slice_writes() {
    let w = World::with(
        gated_pm(),
        Some(service()),
        vec![gated_pod("pod-a", "10.244.0.1")],
    );
    w.api
        .fail("POST", &format!("{SLICES}/web.http"), 500, "InternalError");
    w.reconcile().await.unwrap_err();
    assert_eq!(
        w.api.take_lines(),
        [format!("POST {SLICES}/web.http"), format!("PATCH {STATUS}")],
        "no gate written"
    );
}

/// A PortMapping whose pool has a gated pod takes the release finalizer (a JSON patch that
/// tests the list it extends) after its other writes; once it is being deleted, its pass
/// releases the gates, and only then takes the finalizer off.
#[tokio::test]
async fn a_gated_pool_holds_the_portmapping_until_its_deletion_released_the_gates() {
    let w = World::new(Some(service()), vec![gated_pod("pod-a", "10.244.0.1")]);
    w.reconcile().await.unwrap();
    let finalizer = w.body(&format!("PATCH {PM}"));
    assert_eq!(
        w.api.take_lines(),
        [
            format!("POST {SLICES}/web.http"),
            format!("PATCH {POD_STATUS}"),
            format!("PATCH {PM}"),
            format!("PATCH {STATUS}")
        ]
    );
    assert_eq!(
        finalizer,
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["portmapper.dev/release-gates"]},
        ])
    );

    let mut deleting = gated_pm();
    deleting.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
    );
    let w = World::with(
        deleting,
        Some(service()),
        vec![gated_pod("pod-a", "10.244.0.1")],
    );
    w.reconcile().await.unwrap();
    let (gate, finalizer) = (
        w.body(&format!("PATCH {POD_STATUS}")),
        w.body(&format!("PATCH {PM}")),
    );
    let lines = w.api.take_lines();
    let at = |line: String| lines.iter().position(|l| *l == line);
    let (released, removed) = (at(format!("PATCH {POD_STATUS}")), at(format!("PATCH {PM}")));
    assert!(released.is_some() && released < removed, "{lines:?}");
    assert_eq!(
        (
            &gate["status"]["conditions"][0]["status"],
            &gate["status"]["conditions"][0]["reason"]
        ),
        (&json!("True"), &json!("Released"))
    );
    assert_eq!(
        finalizer,
        json!([
            {"op": "test", "path": "/metadata/finalizers/0", "value": "portmapper.dev/release-gates"},
            {"op": "remove", "path": "/metadata/finalizers/0"},
        ])
    );
}

/// A failed release keeps the finalizer: the deletion waits for the next pass.
#[tokio::test]
async fn a_failed_release_keeps_the_finalizer() {
    let mut deleting = gated_pm();
    deleting.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
    );
    let w = World::with(
        deleting,
        Some(service()),
        vec![gated_pod("pod-a", "10.244.0.1")],
    );
    w.api.fail("PATCH", POD_STATUS, 500, "InternalError");
    w.reconcile().await.unwrap_err();
    let lines = w.api.take_lines();
    assert!(lines.contains(&format!("PATCH {POD_STATUS}")), "{lines:?}");
    assert!(!lines.contains(&format!("PATCH {PM}")), "{lines:?}");
}

#[test]
fn resyncs_are_jittered_by_up_to_a_tenth_and_end_on_a_slot() {
    let resync = Duration::from_secs(5);
    for (fraction, since) in [(0, 0), (512, 1234), (1023, 99_999), (7, 250)] {
        let since = Duration::from_millis(since);
        let delay = super::resync_delay(resync, fraction, since);
        assert!(
            delay <= resync && delay >= resync * 9 / 10 - super::RESYNC_SLOT,
            "{delay:?}"
        );
        assert_eq!(
            (since + delay).as_millis() % super::RESYNC_SLOT.as_millis(),
            0
        );
    }
    // Two PortMappings due within one slot wake together.
    let a = Duration::from_millis(1_010);
    let b = Duration::from_millis(1_060);
    assert_eq!(
        a + super::resync_delay(resync, 0, a),
        b + super::resync_delay(resync, 0, b)
    );
    // A resync shorter than a slot still waits.
    assert!(super::resync_delay(Duration::from_millis(50), 0, a) >= Duration::from_millis(25));
}

/// Today's per-port slice, as the previous release published it for `service()`.
fn per_port_slice() -> EndpointSlice {
    let mut slice = stored(&json!({
        "metadata": {"name": "web.http", "labels": {
            "endpointslice.kubernetes.io/managed-by": "portmapper.dev",
            "kubernetes.io/service-name": "web"},
            "ownerReferences": [{"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
                                 "name": "web", "uid": "pm-uid", "controller": true}]},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["10.244.0.1"], "conditions": {"ready": true},
                       "targetRef": {"kind": "Pod", "name": "pod-a", "namespace": NS, "uid": "uid-pod-a"}}],
    }));
    slice.metadata.uid = Some("per-port-uid".into());
    slice
}

/// The upgrade from per-port slices to the default shape: the port-set slice is applied
/// before the per-port one is deleted, so pod-a is never unpublished.
#[tokio::test]
async fn the_upgrade_to_port_sets_applies_the_new_slice_before_deleting_the_old_one() {
    let mut w = World::with(
        port_set_pm(),
        Some(service()),
        vec![pod("pod-a", "10.244.0.1")],
    );
    w.slice_seen(per_port_slice());
    w.reconcile().await.unwrap();
    let lines = w.api.take_lines();
    let new = lines
        .iter()
        .position(|l| l.starts_with(&format!("POST {SLICES}/web.http.")))
        .expect("the port-set slice is applied");
    let old = lines
        .iter()
        .position(|l| *l == format!("DELETE {SLICES}/web.http"))
        .expect("the per-port slice is deleted");
    assert!(new < old, "{lines:?}");
    assert_eq!(lines.len(), 3, "apply, delete, status: {lines:?}");
}

/// A failed apply holds back the pass's deletions: the slice they retire may hold the only
/// copy of what the failed apply was to publish.
#[tokio::test]
async fn a_failed_apply_holds_back_the_deletions_of_its_pass() {
    let mut w = World::with(
        port_set_pm(),
        Some(service()),
        vec![pod("pod-a", "10.244.0.1")],
    );
    w.slice_seen(per_port_slice());
    let name = portmapper_core::planner::naming::port_set_base_name(
        "web",
        &[portmapper_core::planner::naming::NamedPort {
            name: "http",
            key: "http",
            number: 8080,
            protocol: "TCP",
        }],
        kube_validation::IpFamily::V4,
        0,
    );
    w.api
        .fail("POST", &format!("{SLICES}/{name}"), 500, "InternalError");
    w.reconcile().await.unwrap_err();
    let lines = w.api.take_lines();
    assert!(!lines.iter().any(|l| l.starts_with("DELETE")), "{lines:?}");
    assert!(
        lines.contains(&format!("POST {SLICES}/{name}")),
        "{lines:?}"
    );
}

/// `pod(name, ip)` turned unready, at a newer resourceVersion.
fn unready_pod(name: &str, ip: &str) -> Pod {
    let mut p = pod(name, ip);
    p.metadata.resource_version = Some("7".into());
    if let Some(c) = p
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
        .and_then(|cs| cs.first_mut())
    {
        c.status = "False".into();
    }
    p
}

/// After a pass that wrote, the changes that arrive within the batch window wait for its end
/// and are written together: one slice write for two flips. (The window's arithmetic is
/// tested in `batch_window.rs`; here it is an hour, so no pass can outlive it, and its end is
/// brought about by forgetting it.)
#[tokio::test]
async fn changes_within_the_batch_window_of_a_write_are_written_together_at_its_end() {
    let window = Duration::from_secs(3600);
    let pods = vec![pod("pod-a", "10.244.0.1"), pod("pod-b", "10.244.0.2")];
    let mut w = World::batched(pm(), Some(service()), pods, window);
    w.reconcile().await.unwrap();
    let apply = w.body(&format!("POST {SLICES}/web.http"));
    w.slice_seen(stored(&apply));
    assert_eq!(w.api.take_lines().len(), 2, "the slice, then the status");

    // Two flips inside the window: each pass writes nothing.
    for (name, ip) in [("pod-a", "10.244.0.1"), ("pod-b", "10.244.0.2")] {
        w.pod_seen(unready_pod(name, ip));
        w.reconcile().await.unwrap();
        assert_eq!(w.api.take_lines(), Vec::<String>::new(), "{name}");
    }
    let batched = w
        .ctx
        .metrics
        .reconciles
        .get_or_create(&crate::runtime::metrics::ResultLabels { result: "batched" })
        .get();
    assert_eq!(batched, 2);

    // The window's end: one pass writes both flips in one slice write; the counts, changed
    // only now, wait for a window of their own, and the pass at its end writes them.
    let key = kube::runtime::reflector::ObjectRef::from_obj(&w.pm);
    w.ctx.states.batches.forget(&key);
    w.reconcile().await.unwrap();
    let apply = w.body(&format!("PUT {SLICES}/web.http"));
    assert_eq!(w.api.take_lines(), [format!("PUT {SLICES}/web.http")]);
    // Pods failing their checks are left out (no publishNotReadyAddresses): both gone.
    assert_eq!(apply["endpoints"], json!([]), "both flips in the one write");
    w.slice_seen(stored(&apply));
    w.ctx.states.batches.forget(&key);
    w.ctx.states.status_window_ended(&key);
    w.reconcile().await.unwrap();
    let status = w.body(&format!("PATCH {STATUS}"));
    assert_eq!(w.api.take_lines(), [format!("PATCH {STATUS}")]);
    assert_eq!(counts(&status).0, 0);
}

/// How soon `action` looks again.
fn requeue_after(action: &kube::runtime::controller::Action) -> Option<Duration> {
    // `Action { requeue_after: Some(3599.99s) }`: kube keeps the field private.
    let debug = format!("{action:?}");
    let secs = debug.split("Some(").nth(1)?.split("s)").next()?;
    secs.parse::<f64>().ok().map(Duration::from_secs_f64)
}

/// The ready count of the status `body`'s first port, and its summary.
fn counts(body: &Value) -> (i64, String) {
    (
        body["status"]["ports"][0]["ready"]
            .as_i64()
            .unwrap_or_default(),
        body["status"]["summary"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

/// A burst of flips inside the status window of the first write: each flip's slice is written
/// at once, its counts are not; the pass that looks again when the window ends (no event
/// comes) writes the final counts in one status write, and then nothing is written.
#[tokio::test]
async fn a_burst_of_flips_writes_its_counts_once_when_the_status_window_ends() {
    let window = Duration::from_secs(3600);
    let names = [
        ("pod-a", "10.244.0.1"),
        ("pod-b", "10.244.0.2"),
        ("pod-c", "10.244.0.3"),
    ];
    let pods = names.iter().map(|(n, ip)| pod(n, ip)).collect();
    let mut w = World::windows(pm(), Some(service()), pods, Duration::ZERO, window);
    w.reconcile().await.unwrap();
    let first = w.body(&format!("PATCH {STATUS}"));
    assert_eq!(counts(&first), (3, "http 3/3".into()));
    let apply = w.body(&format!("POST {SLICES}/web.http"));
    w.slice_seen(stored(&apply));
    assert_eq!(w.api.take_lines().len(), 2, "the slice, then the status");

    // Three flips in the window: one slice write each, no status write; each pass looks
    // again when the window ends.
    for (n, (name, ip)) in names.iter().enumerate() {
        w.pod_seen(unready_pod(name, ip));
        let action = w.reconcile().await.unwrap();
        let apply = w.body(&format!("PUT {SLICES}/web.http"));
        assert_eq!(
            w.api.take_lines(),
            [format!("PUT {SLICES}/web.http")],
            "flip {n}: the slice, not the status"
        );
        let again = requeue_after(&action).expect("looks again");
        assert!(
            again <= window && again > window - Duration::from_secs(600),
            "flip {n}: at the window's end, not before: {again:?}"
        );
        // As the fake answered the apply (resourceVersion 100).
        w.slice_seen(stored(&apply));
    }

    // The window ends and no event comes: the look-again writes the status once, with the
    // final counts; Ready stays what it was.
    let key = kube::runtime::reflector::ObjectRef::from_obj(&w.pm);
    w.ctx.states.status_window_ended(&key);
    w.reconcile().await.unwrap();
    let last = w.body(&format!("PATCH {STATUS}"));
    assert_eq!(w.api.take_lines(), [format!("PATCH {STATUS}")]);
    assert_eq!(counts(&last), (0, "http 0/3".into()));
    assert_eq!(condition(&last, "Ready"), condition(&first, "Ready"));
    assert_eq!(
        last["status"]["observedGeneration"],
        first["status"]["observedGeneration"]
    );

    // Nothing changed since: no write, and no look-again before the resync.
    let action = w.reconcile().await.unwrap();
    assert_eq!(w.api.take_lines(), Vec::<String>::new());
    assert!(requeue_after(&action).unwrap() > Duration::from_secs(60));
}

/// Inside the status window, what kstatus reads is written at once: a new generation (with
/// the counts that changed meanwhile), and the conditions of a Service gone.
#[tokio::test]
async fn a_condition_or_generation_change_inside_the_status_window_is_written_at_once() {
    let window = Duration::from_secs(3600);
    let pods = vec![pod("pod-a", "10.244.0.1"), pod("pod-b", "10.244.0.2")];
    let mut w = World::windows(pm(), Some(service()), pods, Duration::ZERO, window);
    w.reconcile().await.unwrap();
    let first = w.body(&format!("PATCH {STATUS}"));
    let apply = w.body(&format!("POST {SLICES}/web.http"));
    w.slice_seen(stored(&apply));
    w.api.take_lines();

    // A flip: its counts are held.
    w.pod_seen(unready_pod("pod-a", "10.244.0.1"));
    w.reconcile().await.unwrap();
    let apply = w.body(&format!("PUT {SLICES}/web.http"));
    assert_eq!(w.api.take_lines(), [format!("PUT {SLICES}/web.http")]);
    w.slice_seen(stored(&apply));

    // The spec changes (generation 2; the cache holds our first status): written at once,
    // with the held counts.
    w.pm.metadata.generation = Some(2);
    w.pm.metadata.resource_version = Some("2".into());
    w.pm.status = serde_json::from_value(first["status"].clone()).unwrap();
    w.feeds
        .portmappings
        .apply_watcher_event(&watcher::Event::Apply(w.pm.clone()));
    w.reconcile().await.unwrap();
    let second = w.body(&format!("PATCH {STATUS}"));
    assert_eq!(w.api.take_lines(), [format!("PATCH {STATUS}")]);
    assert_eq!(second["status"]["observedGeneration"], 2);
    assert_eq!(counts(&second), (1, "http 1/2".into()));

    // Still inside the window, the Service goes: the slice is taken back and Ready=False is
    // written at once.
    w.feeds
        .services
        .apply_watcher_event(&watcher::Event::Delete(service()));
    w.reconcile().await.unwrap();
    let gone = w.body(&format!("PATCH {STATUS}"));
    let lines = w.api.take_lines();
    assert_eq!(lines.last(), Some(&format!("PATCH {STATUS}")), "{lines:?}");
    assert_eq!(
        condition(&gone, "Ready"),
        ("False".into(), "ServiceNotFound".into())
    );
}

/// A flip and its return inside the status window: the slice follows each, and at the
/// window's end the status says what the server holds already: no status write at all.
#[tokio::test]
async fn a_flip_undone_inside_the_status_window_writes_no_status() {
    let window = Duration::from_secs(3600);
    let pods = vec![pod("pod-a", "10.244.0.1"), pod("pod-b", "10.244.0.2")];
    let mut w = World::windows(pm(), Some(service()), pods, Duration::ZERO, window);
    w.reconcile().await.unwrap();
    let apply = w.body(&format!("POST {SLICES}/web.http"));
    w.slice_seen(stored(&apply));
    w.api.take_lines();
    let mut ready = pod("pod-a", "10.244.0.1");
    ready.metadata.resource_version = Some("8".into());
    for p in [unready_pod("pod-a", "10.244.0.1"), ready] {
        w.pod_seen(p);
        w.reconcile().await.unwrap();
        let apply = w.body(&format!("PUT {SLICES}/web.http"));
        assert_eq!(w.api.take_lines(), [format!("PUT {SLICES}/web.http")]);
        w.slice_seen(stored(&apply));
    }
    let key = kube::runtime::reflector::ObjectRef::from_obj(&w.pm);
    w.ctx.states.status_window_ended(&key);
    w.reconcile().await.unwrap();
    assert_eq!(w.api.take_lines(), Vec::<String>::new());
}

/// Long after the last status write, a pod's readiness blinks (unready, then ready again
/// within the window): the first change of the counts opens the window instead of being
/// written at once, so the blink costs the status nothing.
#[tokio::test]
async fn a_blink_long_after_the_last_status_write_writes_no_status() {
    let window = Duration::from_secs(3600);
    let pods = vec![pod("pod-a", "10.244.0.1"), pod("pod-b", "10.244.0.2")];
    let mut w = World::windows(pm(), Some(service()), pods, Duration::ZERO, window);
    w.reconcile().await.unwrap();
    let apply = w.body(&format!("POST {SLICES}/web.http"));
    let first = w.body(&format!("PATCH {STATUS}"));
    w.slice_seen(stored(&apply));
    w.pm = with_status(&w.pm, &first, "2");
    w.api.take_lines();
    let key = kube::runtime::reflector::ObjectRef::from_obj(&w.pm);
    w.ctx.states.status_window_ended(&key);
    let mut ready = pod("pod-a", "10.244.0.1");
    ready.metadata.resource_version = Some("8".into());
    for p in [unready_pod("pod-a", "10.244.0.1"), ready] {
        w.pod_seen(p);
        w.reconcile().await.unwrap();
        let apply = w.body(&format!("PUT {SLICES}/web.http"));
        assert_eq!(w.api.take_lines(), [format!("PUT {SLICES}/web.http")]);
        w.slice_seen(stored(&apply));
    }
    w.ctx.states.status_window_ended(&key);
    w.reconcile().await.unwrap();
    assert_eq!(w.api.take_lines(), Vec::<String>::new());
}

/// Without a window (`--batch-window-ms=0`) every change is written at once.
#[tokio::test]
async fn without_a_batch_window_each_change_is_written_at_once() {
    let pods = vec![pod("pod-a", "10.244.0.1"), pod("pod-b", "10.244.0.2")];
    let mut w = World::batched(pm(), Some(service()), pods, Duration::ZERO);
    w.reconcile().await.unwrap();
    let apply = w.body(&format!("POST {SLICES}/web.http"));
    w.slice_seen(stored(&apply));
    w.api.take_lines();
    w.pod_seen(unready_pod("pod-a", "10.244.0.1"));
    w.reconcile().await.unwrap();
    assert_eq!(
        w.api.take_lines(),
        [format!("PUT {SLICES}/web.http"), format!("PATCH {STATUS}")]
    );
}

/// A pass that writes only the status proves nothing about the slice writes that failed (the
/// status went through while the slices were still refused): the failures are kept, so the
/// next failure climbs the ladder instead of starting it over at its bottom, and the window
/// opens again (else the next event would retry at once, writing the status twice a second).
#[tokio::test]
async fn a_pass_that_writes_only_the_status_keeps_the_failures() {
    let mut w = World::new(Some(service()), vec![pod("pod-a", "10.244.0.1")]);
    w.api
        .fail("POST", &format!("{SLICES}/web.http"), 500, "InternalError");
    let err = w.reconcile().await.unwrap_err();
    crate::reconcile::error_policy(Arc::new(pm()), &err, w.ctx.clone());
    // The slice as it would be stored: the next pass has no slice to write, only the status.
    let wanted = stored(&w.body(&format!("POST {SLICES}/web.http")));
    w.slice_seen(wanted);
    w.api.take_lines();
    // Past the window: the 1 s floor plus at most a quarter.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    w.reconcile().await.unwrap();
    assert_eq!(w.api.take_lines(), [format!("PATCH {STATUS}")]);
    // And the window opens again: a pod event right after it writes nothing.
    w.pod_seen(pod("pod-b", "10.244.0.2"));
    w.reconcile().await.unwrap();
    assert_eq!(w.api.take_lines(), Vec::<String>::new());
    let key = kube::runtime::reflector::ObjectRef::from_obj(&pm());
    assert_eq!(
        w.ctx.states.backoff.succeeded(&key),
        Some(1),
        "the slice's failure is kept"
    );
}

/// A PortMapping that is backing off probes: its next pass sends one write at a time and
/// stops at the first failure, and the status, which already says the writes fail, is not
/// written again; once the writes go through, the pass runs in full again.
#[tokio::test]
async fn a_backing_off_pass_stops_at_its_first_failed_write() {
    let w = World::new(
        Some(two_port_service()),
        vec![two_port_pod("pod-a", "10.244.0.1")],
    );
    for slice in ["web.http", "web.https"] {
        w.api
            .fail("POST", &format!("{SLICES}/{slice}"), 500, "InternalError");
    }
    let err = w.reconcile().await.unwrap_err();
    crate::reconcile::error_policy(Arc::new(pm()), &err, w.ctx.clone());
    let mut lines = w.api.take_lines();
    lines[..2].sort();
    assert_eq!(
        lines,
        [
            format!("POST {SLICES}/web.http"),
            format!("POST {SLICES}/web.https"),
            format!("PATCH {STATUS}")
        ]
    );
    // Past the window (the 1 s floor plus at most a quarter): one write, no status.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let err = w.reconcile().await.unwrap_err();
    assert_eq!(w.api.take_lines(), [format!("POST {SLICES}/web.http")]);
    assert!(
        err.to_string()
            .starts_with("creating EndpointSlice default/web.http"),
        "{err}"
    );
    let failure = crate::reconcile::error_policy(Arc::new(pm()), &err, w.ctx.clone());
    assert!(format!("{failure:?}").contains("requeue"), "{failure:?}");
    // The server takes the writes again: the next pass (past the 2 s window) writes both
    // slices and reports them.
    w.api.clear_failures();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    w.reconcile().await.unwrap();
    let lines = w.api.take_lines();
    assert_eq!(
        lines,
        [
            format!("POST {SLICES}/web.http"),
            format!("POST {SLICES}/web.https"),
            format!("PATCH {STATUS}")
        ]
    );
    let key = kube::runtime::reflector::ObjectRef::from_obj(&pm());
    assert!(!w.ctx.states.backoff.failing(&key));
}

/// Every write failing, the status too: a probe does not send again the status the server
/// refused, so a window costs one request.
#[tokio::test]
async fn a_backing_off_pass_does_not_resend_a_refused_status() {
    let w = World::new(Some(service()), vec![pod("pod-a", "10.244.0.1")]);
    w.api
        .fail("POST", &format!("{SLICES}/web.http"), 500, "InternalError");
    w.api.fail("PATCH", STATUS, 500, "InternalError");
    let err = w.reconcile().await.unwrap_err();
    crate::reconcile::error_policy(Arc::new(pm()), &err, w.ctx.clone());
    assert_eq!(
        w.api.take_lines(),
        [format!("POST {SLICES}/web.http"), format!("PATCH {STATUS}")]
    );
    tokio::time::sleep(Duration::from_millis(1300)).await;
    w.reconcile().await.unwrap_err();
    assert_eq!(w.api.take_lines(), [format!("POST {SLICES}/web.http")]);
}

/// Counts the WARN events logged while it is the thread's subscriber.
struct WarningCount(Arc<std::sync::atomic::AtomicUsize>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for WarningCount {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::WARN {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// A withdrawal whose teardown keeps failing backs off like any failing pass: its second
/// failure waits longer than its first (the ladder climbs) and is not warned about again (the
/// error did not change). The PortMapping is forgotten only once the teardown went through.
#[tokio::test]
async fn a_failing_withdrawal_climbs_its_backoff_and_warns_once() {
    use tracing_subscriber::layer::SubscriberExt;
    let mut w = World::new(None, vec![pod("pod-a", "10.244.0.1")]);
    let owner = json!([{"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
                        "name": "web", "uid": "pm-uid", "controller": true}]);
    let mut ours = stored(&json!({
        "metadata": {"name": "web.http", "labels": {
            "endpointslice.kubernetes.io/managed-by": "portmapper.dev",
            "kubernetes.io/service-name": "web"},
            "ownerReferences": owner},
        "addressType": "IPv4", "endpoints": [],
    }));
    ours.metadata.uid = Some("ours-uid".into());
    w.slice_seen(ours);
    w.api.fail(
        "DELETE",
        &format!("{SLICES}/web.http"),
        500,
        "InternalError",
    );
    let key = reflector::ObjectRef::from_obj(&pm());
    let warnings = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let subscriber =
        tracing::Dispatch::new(tracing_subscriber::registry().with(WarningCount(warnings.clone())));
    let fail = |err| {
        tracing::dispatcher::with_default(&subscriber, || {
            crate::reconcile::error_policy(Arc::new(pm()), &err, w.ctx.clone())
        });
        let now = tokio::time::Instant::now();
        w.ctx
            .states
            .backoff
            .remaining(&key, Some(1), now)
            .unwrap_or_default()
    };
    let err = w.reconcile().await.unwrap_err();
    assert_eq!(w.api.take_lines(), [format!("DELETE {SLICES}/web.http")]);
    let first = fail(err);
    tokio::time::sleep(first + Duration::from_millis(100)).await;
    let err = w.reconcile().await.unwrap_err();
    let second = fail(err);
    assert!(
        second > first,
        "the ladder climbs: {first:?}, then {second:?}"
    );
    // The second step's shortest window is 1.5 s; a restarted ladder's longest is 1.25 s.
    assert!(second >= Duration::from_millis(1500), "{second:?}");
    assert_eq!(
        warnings.load(std::sync::atomic::Ordering::Relaxed),
        1,
        "the same error is warned about once"
    );
    assert_eq!(w.api.take_lines(), [format!("DELETE {SLICES}/web.http")]);
    // Once the teardown goes through, its failures are forgotten with the rest.
    w.api.clear_failures();
    tokio::time::sleep(second + Duration::from_millis(100)).await;
    w.reconcile().await.unwrap();
    assert!(
        w.ctx
            .states
            .backoff
            .remaining(&key, Some(1), tokio::time::Instant::now())
            .is_none()
    );
    assert!(!w.ctx.states.backoff.failing(&key));
}

/// A pass that would let its namespace hold every reconcile worker gives its worker back at
/// once and writes nothing; it is queued again when a pass of its namespace ends.
#[tokio::test]
async fn a_pass_over_its_namespaces_share_of_workers_waits_for_one_of_its_namespace() {
    let mut w = World::new(Some(service()), vec![pod("pod-a", "10.244.0.1")]);
    while w.feeds.queued.try_recv().is_ok() {}
    // The test context's share is one pass per namespace: another PortMapping of the
    // namespace holds it.
    let other = reflector::ObjectRef::new("other").within(NS);
    let held = w.ctx.passes.enter(&other, &w.ctx.trigger).unwrap();
    let action = w.reconcile().await.unwrap();
    assert_eq!(action, kube::runtime::controller::Action::await_change());
    assert_eq!(
        w.api.take_lines(),
        Vec::<String>::new(),
        "deferred: no request"
    );
    assert!(w.feeds.queued.try_recv().is_err(), "not queued again yet");
    drop(held);
    let queued = w.feeds.queued.try_recv().unwrap();
    assert_eq!(queued, reflector::ObjectRef::from_obj(&w.pm));
    w.reconcile().await.unwrap();
    assert_eq!(
        w.api.take_lines(),
        [format!("POST {SLICES}/web.http"), format!("PATCH {STATUS}")]
    );
}
