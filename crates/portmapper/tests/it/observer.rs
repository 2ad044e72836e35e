//! The invariant observer of issue 11: a watcher (through the test's own client, so operator
//! faults never reach it) that sees every version of our EndpointSlices and records
//! - a **blackout**: a port the test declared must stay served (its pool keeps a healthy pod
//!   throughout) that was published and then has zero ready endpoints across our slices;
//! - a **lasting duplicate**: an (address, port, family) in two of our slices of one Service
//!   still there after the next write to that Service's slices (moving an endpoint between
//!   slices takes two writes, so one version with it twice is allowed).
//! - a **final state that is not the plan** ([`Observer::assert_final_state_is_the_plan`]): once
//!   a test has removed its fault and seen convergence, the final inputs (PortMapping, Service,
//!   pods, nodes, the live slices and Endpoints) are read back through the test's client and
//!   given to the operator's own pure planner; the plan must write nothing (every slice
//!   `Unchanged`, no deletion, no collision) within [`FINAL_STATE_BOUND`] of that call. A plan
//!   with zero writes means the live slices equal the desired ones in everything the planner
//!   compares: endpoints with their conditions, ports, labels, owner and address type.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use portmapper::controller::MANAGED_BY_SELECTOR;
use portmapper_api::PortMapping;
use portmapper_core::compact_slice::CompactSlice;
use portmapper_core::{PlanInput, planner};
use tokio::task::JoinHandle;

use crate::harness::{Harness, eventually};

/// How long after a test's own convergence check (which follows the last change of the
/// inputs) the live slices may still differ from the plan of the final inputs. The issue's
/// convergence target: the operator has already converged by then, so in practice the first
/// comparison holds; the bound only absorbs a write still in flight.
// Correctness bound, not a figure: wide for a loaded 2-core machine (a plan that still writes
// once the operator has converged is wrong however long one waits).
pub const FINAL_STATE_BOUND: Duration = Duration::from_secs(15);

/// (Service, port name, address type): one published port of one family.
type PortKey = (String, String, String);
/// A port plus one address.
type EndpointKey = (String, String, String, String);

#[derive(Default)]
struct State {
    synced: bool,
    slices: BTreeMap<String, EndpointSlice>,
    /// Versions seen after the initial list (every event is one write of ours).
    versions: usize,
    /// Ports seen published with a ready endpoint at least once.
    published: BTreeSet<PortKey>,
    /// Duplicates of the previous version, by Service.
    duplicates: BTreeMap<String, BTreeSet<EndpointKey>>,
    blackouts: Vec<String>,
    lasting_duplicates: Vec<String>,
    /// Per port once published, the fewest ready endpoints any later version had.
    fewest_ready: BTreeMap<PortKey, usize>,
}

/// A running observer; dropping it stops the watch.
pub struct Observer {
    client: Client,
    ns: String,
    state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What an observation found.
#[derive(Debug)]
pub struct Report {
    pub versions: usize,
    pub blackouts: Vec<String>,
    pub lasting_duplicates: Vec<String>,
    /// (Service, port, address type) → the fewest ready endpoints seen once it was published.
    pub fewest_ready: BTreeMap<PortKey, usize>,
}

impl Observer {
    /// Starts watching our slices in the test namespace; returns once the initial list is in.
    /// `must_serve` names the (Service, port) pairs whose pool keeps a healthy pod throughout.
    pub async fn start(h: &Harness, must_serve: &[(&str, &str)]) -> Self {
        let (client, ns) = (h.client.clone(), h.ns.clone());
        let must_serve: BTreeSet<(String, String)> = must_serve
            .iter()
            .map(|(s, p)| (s.to_string(), p.to_string()))
            .collect();
        let state = Arc::new(Mutex::new(State::default()));
        let api: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
        let stream =
            crate::harness::watch(api, watcher::Config::default().labels(MANAGED_BY_SELECTOR));
        let task = {
            let state = state.clone();
            tokio::spawn(async move {
                let mut stream = std::pin::pin!(stream);
                while let Some(event) = stream.next().await {
                    let Ok(event) = event else { continue };
                    let mut st = state.lock().unwrap();
                    match event {
                        Event::Init => st.slices.clear(),
                        Event::InitApply(slice) => {
                            st.slices.insert(slice.name_any(), slice);
                        }
                        Event::InitDone => {
                            st.synced = true;
                            st.observe(None, &must_serve);
                        }
                        Event::Apply(slice) => {
                            let service = service_of(&slice);
                            st.slices.insert(slice.name_any(), slice);
                            st.versions += 1;
                            st.observe(Some(&service), &must_serve);
                        }
                        Event::Delete(slice) => {
                            let service = service_of(&slice);
                            st.slices.remove(&slice.name_any());
                            st.versions += 1;
                            st.observe(Some(&service), &must_serve);
                        }
                    }
                }
            })
        };
        let observer = Self {
            client,
            ns,
            state,
            task,
        };
        eventually(
            "the observer's initial list",
            Duration::from_secs(10),
            || async { observer.state.lock().unwrap().synced.then_some(()) },
        )
        .await;
        observer
    }

    /// What was seen so far.
    pub fn report(&self) -> Report {
        let st = self.state.lock().unwrap();
        Report {
            versions: st.versions,
            blackouts: st.blackouts.clone(),
            lasting_duplicates: st.lasting_duplicates.clone(),
            fewest_ready: st.fewest_ready.clone(),
        }
    }

    /// Asserts no blackout and no lasting duplicate; returns the number of versions seen.
    pub fn assert_held(&self) -> usize {
        let report = self.report();
        assert!(report.blackouts.is_empty(), "blackouts: {report:#?}");
        assert!(
            report.lasting_duplicates.is_empty(),
            "duplicates beyond one write: {report:#?}"
        );
        report.versions
    }

    /// Invariant (c): within [`FINAL_STATE_BOUND`], the plan of PortMapping `name`'s final
    /// inputs writes nothing against the live slices. Returns how long it took to hold.
    pub async fn assert_final_state_is_the_plan(&self, name: &str) -> Duration {
        let started = tokio::time::Instant::now();
        let mut pending = Vec::new();
        while started.elapsed() < FINAL_STATE_BOUND {
            pending = pending_writes(&self.client, &self.ns, name).await;
            if pending.is_empty() {
                let took = started.elapsed();
                println!("{name}: final state = the plan of the final inputs after {took:?}");
                return took;
            }
            // A poll of the live slices until the bound, as `eventually`.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "{name}: {FINAL_STATE_BOUND:?} after convergence the plan of the final inputs still \
             writes: {pending:#?}"
        );
    }
}

/// What the planner, given the final inputs of PortMapping `name` as the API server holds them,
/// would still write: one line per slice to create, update or delete, Endpoints to write or
/// delete, and name collision. Empty: the live state is the plan.
pub async fn pending_writes(client: &Client, ns: &str, name: &str) -> Vec<String> {
    let pm = Api::<PortMapping>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .expect("the PortMapping");
    let svc_name = pm.spec.service_ref.name.clone();
    let service = Api::<Service>::namespaced(client.clone(), ns)
        .get(&svc_name)
        .await
        .expect("the Service");
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("the pods")
        .items;
    let pods: Vec<Arc<portmapper_core::PodRecord>> =
        pods.iter().map(|p| Arc::new(p.into())).collect();
    let node_zones: BTreeMap<String, String> = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("the nodes")
        .items
        .into_iter()
        .filter_map(|n| {
            let zone = n.labels().get("topology.kubernetes.io/zone")?.clone();
            Some((n.name_any(), zone))
        })
        .collect();
    // Every slice of the Service: ours are claimable, any other the planner treats as a name
    // held by someone else, as the operator does.
    let live_slices: Vec<Arc<CompactSlice>> = Api::<EndpointSlice>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={svc_name}")))
        .await
        .expect("the slices")
        .items
        .into_iter()
        .map(|s| Arc::new(CompactSlice::from(s)))
        .collect();
    let live_endpoints = Api::<Endpoints>::namespaced(client.clone(), ns)
        .get_opt(&svc_name)
        .await
        .expect("the Endpoints");
    // The tests using this check pods with API-object checks only (no prober results).
    let input = PlanInput {
        live_slices: &live_slices,
        live_endpoints: live_endpoints.as_ref(),
        now: Timestamp::now(),
        ..PlanInput::first_publication(&pm, &service, &pods, &node_zones)
    };
    let plan = planner::plan(&input).expect("the final inputs plan");
    assert!(
        plan.network_lookups.is_empty(),
        "{name} has network checks: the final-state check knows no prober results"
    );
    let live = |slice: &str| {
        live_slices
            .iter()
            .find(|l| l.metadata.name.as_deref() == Some(slice))
            .map(|l| {
                (
                    l.ports.clone(),
                    l.endpoints.clone(),
                    l.metadata.labels.clone(),
                )
            })
    };
    let mut pending: Vec<String> = plan
        .slices
        .iter()
        .filter(|p| p.action.is_write())
        .map(|p| {
            let slice = p.slice.metadata.name.clone().unwrap_or_default();
            format!(
                "{:?} {slice}: desired {:?}; live {:?}",
                p.action,
                (&p.slice.ports, &p.slice.endpoints, &p.slice.metadata.labels),
                live(&slice)
            )
        })
        .collect();
    pending.extend(
        plan.deletions
            .iter()
            .map(|d| format!("delete slice {}", d.name)),
    );
    pending.extend(
        plan.collisions
            .iter()
            .map(|c| format!("name collision {c}")),
    );
    if let Some(e) = plan.endpoints.as_ref().filter(|e| e.action.is_write()) {
        pending.push(format!("{:?} Endpoints {svc_name}", e.action));
    }
    if let Some(d) = &plan.endpoints_deletion {
        pending.push(format!("delete Endpoints {}", d.name));
    }
    pending
}

fn service_of(slice: &EndpointSlice) -> String {
    slice
        .labels()
        .get("kubernetes.io/service-name")
        .cloned()
        .unwrap_or_default()
}

impl State {
    /// Checks the current version; `written` is the Service whose slice just changed.
    fn observe(&mut self, written: Option<&str>, must_serve: &BTreeSet<(String, String)>) {
        let mut ready: BTreeMap<PortKey, usize> = BTreeMap::new();
        let mut holders: BTreeMap<EndpointKey, Vec<String>> = BTreeMap::new();
        for (name, slice) in &self.slices {
            let service = service_of(slice);
            for port in slice.ports.iter().flatten() {
                let port_name = port.name.clone().unwrap_or_default();
                let key = (
                    service.clone(),
                    port_name.clone(),
                    slice.address_type.clone(),
                );
                let count = ready.entry(key).or_default();
                for endpoint in &slice.endpoints {
                    // An unset `ready` means ready, as consumers read it.
                    let is_ready = endpoint
                        .conditions
                        .as_ref()
                        .and_then(|c| c.ready)
                        .unwrap_or(true);
                    if is_ready {
                        *count += 1;
                    }
                    for address in &endpoint.addresses {
                        holders
                            .entry((
                                service.clone(),
                                port_name.clone(),
                                slice.address_type.clone(),
                                address.clone(),
                            ))
                            .or_default()
                            .push(name.clone());
                    }
                }
            }
        }
        for (key, n) in &ready {
            if *n > 0 {
                self.published.insert(key.clone());
            }
        }
        for key in &self.published {
            let n = ready.get(key).copied().unwrap_or(0);
            let fewest = self.fewest_ready.entry(key.clone()).or_insert(n);
            *fewest = (*fewest).min(n);
        }
        for key in &self.published {
            let served = must_serve.contains(&(key.0.clone(), key.1.clone()));
            if served && ready.get(key).copied().unwrap_or(0) == 0 {
                self.blackouts.push(format!(
                    "version {}: {}/{} ({}) has no ready endpoint; slices: {:?}",
                    self.versions,
                    key.0,
                    key.1,
                    key.2,
                    self.slices.keys().collect::<Vec<_>>()
                ));
            }
        }
        let Some(service) = written else { return };
        let now: BTreeSet<EndpointKey> = holders
            .into_iter()
            .filter(|(k, names)| k.0 == service && names.len() > 1)
            .map(|(k, _)| k)
            .collect();
        let before = self.duplicates.remove(service).unwrap_or_default();
        for key in now.intersection(&before) {
            self.lasting_duplicates.push(format!(
                "version {}: {} port {} ({}) in two slices for more than one write",
                self.versions, key.3, key.1, key.2
            ));
        }
        self.duplicates.insert(service.to_string(), now);
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};
    use serde_json::json;

    use super::*;

    fn slice(name: &str, addresses: &[(&str, bool)]) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
        }))
        .map(|mut s: EndpointSlice| {
            s.ports = Some(vec![EndpointPort {
                name: Some("http".into()),
                port: Some(8080),
                ..EndpointPort::default()
            }]);
            s.endpoints = addresses
                .iter()
                .map(|(ip, ready)| Endpoint {
                    addresses: vec![ip.to_string()],
                    conditions: Some(EndpointConditions {
                        ready: Some(*ready),
                        ..EndpointConditions::default()
                    }),
                    ..Endpoint::default()
                })
                .collect();
            s
        })
        .unwrap()
    }

    fn write(st: &mut State, slice: EndpointSlice, must_serve: &BTreeSet<(String, String)>) {
        st.slices.insert(slice.name_any(), slice);
        st.versions += 1;
        st.observe(Some("web"), must_serve);
    }

    #[test]
    fn a_served_port_left_without_ready_endpoints_is_a_blackout() {
        let must_serve = BTreeSet::from([("web".to_string(), "http".to_string())]);
        let mut st = State::default();
        // Not yet published: no blackout.
        write(&mut st, slice("web.http", &[]), &must_serve);
        write(
            &mut st,
            slice("web.http", &[("10.0.0.1", true)]),
            &must_serve,
        );
        assert!(st.blackouts.is_empty());
        write(
            &mut st,
            slice("web.http", &[("10.0.0.1", false)]),
            &must_serve,
        );
        assert_eq!(st.blackouts.len(), 1, "{:?}", st.blackouts);
        // A port nobody declared must stay served may empty.
        let mut st = State::default();
        write(
            &mut st,
            slice("web.http", &[("10.0.0.1", true)]),
            &BTreeSet::new(),
        );
        write(&mut st, slice("web.http", &[]), &BTreeSet::new());
        assert!(st.blackouts.is_empty());
    }

    /// Invariant (c) can fail: with the operator stopped, a slice changed behind its back, a
    /// pod change it never saw, and a stray slice of ours are each a pending write; with the
    /// operator running again they are all gone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_final_state_check_sees_what_the_operator_has_not_written() {
        use crate::harness::*;
        let mut h = Harness::new().await;
        h.create(service("plan", &[("http", 8080)])).await;
        ready_pods(
            &h,
            "plan",
            &[
                ("plan-a", "http", "10.244.9.1"),
                ("plan-b", "http", "10.244.9.2"),
            ],
        )
        .await;
        h.create(portmapping("plan", "plan")).await;
        h.run_controller();
        let observer = Observer::start(&h, &[("plan", "http")]).await;
        eventually("plan.http published", Duration::from_secs(15), || async {
            (h.membership("plan").await.get("plan.http")?.len() == 2).then_some(())
        })
        .await;
        observer.assert_final_state_is_the_plan("plan").await;
        h.stop_controller().await;

        // Behind its back: one endpoint marked not ready in our slice.
        let slices: Api<EndpointSlice> = Api::namespaced(h.client.clone(), &h.ns);
        let mut slice = slices.get("plan.http").await.unwrap();
        slice.metadata.managed_fields = None;
        slice.endpoints[0].conditions = Some(EndpointConditions {
            ready: Some(false),
            ..EndpointConditions::default()
        });
        slices
            .replace("plan.http", &Default::default(), &slice)
            .await
            .unwrap();
        let pending = pending_writes(&h.client, &h.ns, "plan").await;
        assert_eq!(pending.len(), 1, "{pending:#?}");
        assert!(pending[0].starts_with("Update") && pending[0].contains("plan.http"));

        // A pod change nobody published: still one write, of the same slice.
        h.set_pod_status("plan-b", &["10.244.9.2"], false).await;
        let pending = pending_writes(&h.client, &h.ns, "plan").await;
        assert_eq!(pending.len(), 1, "{pending:#?}");

        // A stray slice of ours (its labels and owner, a name the plan does not want).
        let mut stray = slice.clone();
        stray.metadata.name = Some("plan.stray".into());
        stray.metadata.resource_version = None;
        stray.metadata.uid = None;
        slices.create(&Default::default(), &stray).await.unwrap();
        let pending = pending_writes(&h.client, &h.ns, "plan").await;
        assert!(
            pending.iter().any(|p| p == "delete slice plan.stray"),
            "{pending:#?}"
        );

        h.run_controller();
        observer.assert_final_state_is_the_plan("plan").await;
    }

    #[test]
    fn a_duplicate_is_allowed_for_one_write_only() {
        let none = BTreeSet::new();
        let mut st = State::default();
        write(&mut st, slice("web.http-a", &[("10.0.0.1", true)]), &none);
        // Moved: added to b, then removed from a.
        write(&mut st, slice("web.http-b", &[("10.0.0.1", true)]), &none);
        write(&mut st, slice("web.http-a", &[]), &none);
        assert!(
            st.lasting_duplicates.is_empty(),
            "{:?}",
            st.lasting_duplicates
        );
        // Added to a again and still in b after the next write.
        write(&mut st, slice("web.http-a", &[("10.0.0.1", true)]), &none);
        write(&mut st, slice("web.http-c", &[("10.0.0.9", true)]), &none);
        assert_eq!(
            st.lasting_duplicates.len(),
            1,
            "{:?}",
            st.lasting_duplicates
        );
    }
}
