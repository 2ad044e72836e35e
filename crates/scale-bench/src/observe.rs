//! The bench's own watches of pods and of the operator's EndpointSlices, timestamped on receipt,
//! and the membership they show: per (service, port, pod) whether a slice publishes the pod
//! ready, not ready, or not at all.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::Error;
use crate::shape::{NATIVE_PORT, NS};

/// The label naming a slice's controller.
pub const MANAGED_BY_KEY: &str = "endpointslice.kubernetes.io/managed-by";
/// Label the operator puts on its slices.
pub const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by=portmapper.dev";
/// The native EndpointSlice controller's `managed-by` value.
pub const NATIVE_MANAGER: &str = "endpointslice-controller.k8s.io";
/// The operator's slices and the native controller's.
pub const BOTH_MANAGERS: &str =
    "endpointslice.kubernetes.io/managed-by in (portmapper.dev,endpointslice-controller.k8s.io)";

/// How a (service, port) publishes one pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// In no slice.
    Absent,
    /// In a slice with `ready: false`.
    NotReady,
    /// In a slice, ready.
    Ready,
}

/// A change of how one (service, port) publishes one pod, seen in a slice event.
#[derive(Debug, Clone)]
pub struct Transition {
    /// When the slice event arrived.
    pub at: Instant,
    /// Pod name.
    pub pod: String,
    /// Service port name.
    pub port: String,
    /// The new state.
    pub state: Published,
}

/// A pod's Ready condition changing, seen in a pod event.
#[derive(Debug, Clone)]
pub struct PodEvent {
    /// When the pod event arrived.
    pub at: Instant,
    /// Pod name.
    pub pod: String,
    /// Ready condition after the event.
    pub ready: bool,
}

type PodKey = (String, String, String);

/// One slice as the view keeps it.
#[derive(Debug, Clone)]
struct SliceEntry {
    /// `kubernetes.io/service-name`.
    service: String,
    /// Its ports' names (a port-set slice lists several), or [`NATIVE_PORT`] alone for a native
    /// slice (which holds every port).
    ports: Vec<String>,
    /// The `managed-by` label.
    manager: String,
    /// (pod, ready) of each endpoint.
    endpoints: Vec<(String, bool)>,
}

/// Everything the two watches have shown so far.
#[derive(Debug, Default)]
pub struct View {
    /// slice name → (service, ports, [(pod, ready)]).
    slices: HashMap<String, SliceEntry>,
    /// (service, port, pod) → (slices publishing it ready, slices publishing it not ready).
    counts: HashMap<PodKey, (u32, u32)>,
    /// (service, port) → pods published ready.
    pub ready: BTreeMap<(String, String), usize>,
    /// (service, port) → pods published at all (ready or not).
    pub present: BTreeMap<(String, String), usize>,
    /// pod → last seen Ready condition.
    pod_ready: HashMap<String, bool>,
    /// Slice transitions, in arrival order.
    pub transitions: Vec<Transition>,
    /// Pod Ready changes, in arrival order.
    pub pod_events: Vec<PodEvent>,
    /// Arrival of the last slice event.
    pub last_slice_event: Option<Instant>,
    /// Slice events received.
    pub slice_events: u64,
    /// Bytes of the slices the change events carried (added, modified, deleted; not the
    /// initial list), as JSON: what every watcher of slices receives per change.
    pub slice_bytes: u64,
    pods_synced: bool,
    slices_synced: bool,
}

fn state((ready, not_ready): (u32, u32)) -> Published {
    if ready > 0 {
        Published::Ready
    } else if not_ready > 0 {
        Published::NotReady
    } else {
        Published::Absent
    }
}

impl View {
    fn apply_slice(&mut self, now: Instant, name: String, new: Option<&EndpointSlice>) {
        let new = new.map(|s| {
            let label = |key: &str| s.labels().get(key).cloned().unwrap_or_default();
            let manager = label(MANAGED_BY_KEY);
            let ports = if manager == NATIVE_MANAGER {
                vec![NATIVE_PORT.to_owned()]
            } else {
                s.ports
                    .iter()
                    .flatten()
                    .map(|p| p.name.clone().unwrap_or_default())
                    .collect()
            };
            let endpoints = s
                .endpoints
                .iter()
                .filter_map(|e| {
                    let pod = e.target_ref.as_ref()?.name.clone()?;
                    // Unset means ready (EndpointConditions: "nil should be interpreted as true").
                    let ready = e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
                    Some((pod, ready))
                })
                .collect::<Vec<_>>();
            SliceEntry {
                service: label("kubernetes.io/service-name"),
                ports,
                manager,
                endpoints,
            }
        });
        let old = match &new {
            Some(n) => self.slices.insert(name, n.clone()),
            None => self.slices.remove(&name),
        };
        let mut touched: Vec<PodKey> = Vec::new();
        let mut before: HashMap<PodKey, Published> = HashMap::new();
        for (entry, sign) in [(old.as_ref(), -1i32), (new.as_ref(), 1)] {
            let Some(e) = entry else {
                continue;
            };
            for port in &e.ports {
                for (pod, ready) in &e.endpoints {
                    let key = (e.service.clone(), port.clone(), pod.clone());
                    let c = self.counts.entry(key.clone()).or_default();
                    before.entry(key.clone()).or_insert_with(|| {
                        touched.push(key.clone());
                        state(*c)
                    });
                    let slot = if *ready { &mut c.0 } else { &mut c.1 };
                    *slot = slot.saturating_add_signed(sign);
                }
            }
        }
        for key in touched {
            let was = before[&key];
            let c = self.counts.get(&key).copied().unwrap_or_default();
            let now_state = state(c);
            if c == (0, 0) {
                self.counts.remove(&key);
            }
            if was == now_state {
                continue;
            }
            let (svc, port, pod) = key;
            let r = self.ready.entry((svc.clone(), port.clone())).or_insert(0);
            if was == Published::Ready {
                *r = r.saturating_sub(1);
            }
            if now_state == Published::Ready {
                *r += 1;
            }
            let present = self.present.entry((svc, port.clone())).or_insert(0);
            if was == Published::Absent {
                *present += 1;
            }
            if now_state == Published::Absent {
                *present = present.saturating_sub(1);
            }
            self.transitions.push(Transition {
                at: now,
                pod,
                port,
                state: now_state,
            });
        }
        self.last_slice_event = Some(now);
        self.slice_events += 1;
    }

    fn reset_slices(&mut self) {
        self.slices.clear();
        self.counts.clear();
        self.ready.clear();
        self.present.clear();
    }

    fn apply_pod(&mut self, now: Instant, pod: &Pod) {
        let ready = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let name = pod.name_any();
        if self.pod_ready.insert(name.clone(), ready) != Some(ready) {
            self.pod_events.push(PodEvent {
                at: now,
                pod: name,
                ready,
            });
        }
    }

    /// Whether every (service, port) of `expected` publishes exactly that many ready pods.
    pub fn all_published(&self, expected: &BTreeMap<(String, String), usize>) -> bool {
        expected
            .iter()
            .all(|(k, n)| self.ready.get(k).copied().unwrap_or(0) == *n)
    }

    /// Whether every (service, port) of `expected` publishes exactly that many pods, all ready:
    /// [`Self::all_published`] with no pod left over that went away.
    pub fn exactly_published(&self, expected: &BTreeMap<(String, String), usize>) -> bool {
        self.all_published(expected)
            && expected
                .iter()
                .all(|(k, n)| self.present.get(k).copied().unwrap_or(0) == *n)
    }

    /// How the slices of (`service`, `port`) publish `pod`.
    pub fn state(&self, service: &str, port: &str, pod: &str) -> Published {
        let key = (service.to_owned(), port.to_owned(), pod.to_owned());
        self.counts
            .get(&key)
            .copied()
            .map_or(Published::Absent, state)
    }

    /// Ready endpoints published, summed over every (service, port).
    pub fn ready_total(&self) -> usize {
        self.ready.values().sum()
    }

    /// The slices seen, by name.
    pub fn slice_count(&self) -> usize {
        self.slices.len()
    }

    /// The slices of `manager` (any, if `None`) that list `pod`, ready or not: the slices a flip
    /// of the pod has to write.
    pub fn slices_holding(&self, manager: Option<&str>, pod: &str) -> usize {
        self.slices
            .values()
            .filter(|s| manager.is_none_or(|m| s.manager == m))
            .filter(|s| s.endpoints.iter().any(|(p, _)| p == pod))
            .count()
    }

    /// The slices seen whose `managed-by` label is `manager`.
    pub fn slices_of(&self, manager: &str) -> usize {
        self.slices
            .values()
            .filter(|s| s.manager == manager)
            .count()
    }
}

/// The two watches and their shared view.
pub struct Observer {
    view: Arc<Mutex<View>>,
    changed: watch::Receiver<u64>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Observer {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Observer {
    /// Starts both watches in [`NS`], of the operator's slices, and waits until both have listed.
    pub async fn start(client: &Client, timeout: Duration) -> Result<Self, Error> {
        Self::start_in(client, NS, MANAGED_BY, timeout).await
    }

    /// Starts both watches in `ns`, of the slices `slice_selector` selects, and waits until
    /// both have listed.
    pub async fn start_in(
        client: &Client,
        ns: &str,
        slice_selector: &str,
        timeout: Duration,
    ) -> Result<Self, Error> {
        let view = Arc::new(Mutex::new(View::default()));
        let (tx, changed) = watch::channel(0u64);
        let tx = Arc::new(tx);
        let mut tasks = Vec::new();

        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
        let (v, t) = (view.clone(), tx.clone());
        let selector = slice_selector.to_owned();
        tasks.push(tokio::spawn(async move {
            let slices = watcher::watcher(slices, watcher::Config::default().labels(&selector));
            // The backoff's pause is what lets this task yield (and be aborted) while its
            // server is gone: a failing request is answered at once, and without a pause the
            // loop retried forever inside one poll.
            let mut s = std::pin::pin!(slices.default_backoff());
            while let Some(ev) = s.next().await {
                let now = Instant::now();
                let Ok(ev) = ev else { continue };
                {
                    let mut v = lock(&v);
                    match ev {
                        Event::Init => v.reset_slices(),
                        Event::InitApply(s) => v.apply_slice(now, s.name_any(), Some(&s)),
                        Event::Apply(s) => {
                            v.slice_bytes += json_len(&s);
                            v.apply_slice(now, s.name_any(), Some(&s))
                        }
                        Event::Delete(s) => {
                            v.slice_bytes += json_len(&s);
                            v.apply_slice(now, s.name_any(), None)
                        }
                        Event::InitDone => v.slices_synced = true,
                    }
                }
                t.send_modify(|g| *g += 1);
            }
        }));

        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let (v, t) = (view.clone(), tx.clone());
        tasks.push(tokio::spawn(async move {
            let pods = watcher::watcher(pods, watcher::Config::default());
            // Paced retries: see the slice watch above.
            let mut s = std::pin::pin!(pods.default_backoff());
            while let Some(ev) = s.next().await {
                let now = Instant::now();
                let Ok(ev) = ev else { continue };
                {
                    let mut v = lock(&v);
                    match ev {
                        Event::Init | Event::Delete(_) => {}
                        Event::InitApply(p) | Event::Apply(p) => v.apply_pod(now, &p),
                        Event::InitDone => v.pods_synced = true,
                    }
                }
                t.send_modify(|g| *g += 1);
            }
        }));

        let obs = Self {
            view,
            changed,
            tasks,
        };
        obs.wait("the bench's watches to list", timeout, |v| {
            (v.pods_synced && v.slices_synced).then_some(())
        })
        .await?;
        Ok(obs)
    }

    /// Ends both watches and waits until they have: call it before their server stops, so no
    /// watch is left retrying against a closed port.
    pub async fn stop(mut self) {
        for t in std::mem::take(&mut self.tasks) {
            t.abort();
            // Aborted (the only error of a task that never panics): nothing to report.
            let _ = t.await;
        }
    }

    /// The view, locked.
    pub fn view(&self) -> MutexGuard<'_, View> {
        lock(&self.view)
    }

    /// Waits until `check` returns `Some`, re-checking on every watch event; fails after
    /// `timeout`.
    pub async fn wait<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&View) -> Option<T>,
    ) -> Result<T, Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut rx = self.changed.clone();
        loop {
            rx.borrow_and_update();
            if let Some(v) = check(&self.view()) {
                return Ok(v);
            }
            // Also wake periodically: "quiet for N ms" conditions change without events.
            let tick = tokio::time::sleep(Duration::from_millis(100));
            tokio::select! {
                r = rx.changed() => if r.is_err() { return Err(Error::Exited("watch task")) },
                () = tick => {}
                () = tokio::time::sleep_until(deadline) => {
                    return Err(Error::Timeout(what.to_owned()));
                }
            }
        }
    }
}

/// The size of `s` as JSON, as a watcher receives it (the API server's encoding differs in
/// whitespace and field order only).
fn json_len(s: &EndpointSlice) -> u64 {
    serde_json::to_vec(s).map_or(0, |b| b.len() as u64)
}

fn lock(v: &Mutex<View>) -> MutexGuard<'_, View> {
    v.lock().unwrap_or_else(|p| p.into_inner())
}
