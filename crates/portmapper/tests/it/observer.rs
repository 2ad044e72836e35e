//! The invariant observer of issue 11: a watcher (through the test's own client, so operator
//! faults never reach it) that sees every version of our EndpointSlices and records
//! - a **blackout**: a port the test declared must stay served (its pool keeps a healthy pod
//!   throughout) that was published and then has zero ready endpoints across our slices;
//! - a **lasting duplicate**: an (address, port, family) in two of our slices of one Service
//!   still there after the next write to that Service's slices (moving an endpoint between
//!   slices takes two writes, so one version with it twice is allowed).
//!
//! Not covered here: comparing the final state with the planner's output for the final inputs
//! (the tests compare the final membership with the pods instead).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use portmapper::controller::MANAGED_BY_SELECTOR;
use tokio::task::JoinHandle;

use crate::harness::{NS, eventually};

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
    pub async fn start(client: Client, must_serve: &[(&str, &str)]) -> Self {
        let must_serve: BTreeSet<(String, String)> = must_serve
            .iter()
            .map(|(s, p)| (s.to_string(), p.to_string()))
            .collect();
        let state = Arc::new(Mutex::new(State::default()));
        let api: Api<EndpointSlice> = Api::namespaced(client, NS);
        let stream = watcher::watcher(api, watcher::Config::default().labels(MANAGED_BY_SELECTOR));
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
        let observer = Self { state, task };
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
