//! What a Service's slices publish, read once or watched: a victim's port must never empty
//! while another tenant attacks, and a poll could miss a short gap, so the watch sees every
//! event kube-apiserver sends.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufReader;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use serde_json::Value;

use crate::env::Cluster;

/// Ready addresses by Service port name over `slices` (a port of several slices gets the union).
pub fn ready_by_port<'a>(
    slices: impl IntoIterator<Item = &'a Value>,
) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for slice in slices {
        let ready: Vec<&str> = slice["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            // A missing `ready` means ready (EndpointConditions).
            .filter(|e| e["conditions"]["ready"].as_bool() != Some(false))
            .flat_map(|e| e["addresses"].as_array().into_iter().flatten())
            .filter_map(Value::as_str)
            .collect();
        for port in slice["ports"].as_array().into_iter().flatten() {
            let name = port["name"].as_str().unwrap_or_default().to_string();
            out.entry(name)
                .or_default()
                .extend(ready.iter().map(|a| a.to_string()));
        }
    }
    out.into_iter()
        .map(|(port, addresses)| (port, addresses.into_iter().collect()))
        .collect()
}

/// A `kubectl get endpointslices --watch` of one Service's slices, folded into the fewest
/// ready addresses each port had after any event.
pub struct PublishedWatch {
    child: Child,
    reader: Option<JoinHandle<()>>,
    state: Arc<Mutex<Seen>>,
}

#[derive(Default)]
struct Seen {
    slices: BTreeMap<String, Value>,
    fewest: BTreeMap<String, usize>,
    events: usize,
}

impl PublishedWatch {
    pub(super) fn start(admin: &Cluster, namespace: &str, service: &str) -> Self {
        let selector = format!(
            "kubernetes.io/service-name={service},endpointslice.kubernetes.io/managed-by=portmapper.dev"
        );
        let mut child = Command::new(test_support::realkube::kubectl())
            .arg("--kubeconfig")
            .arg(&admin.kubeconfig)
            .args(["get", "endpointslices", "-n", namespace, "-l", &selector])
            .args(["--watch", "--output-watch-events", "-o", "json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl watch starts");
        let stdout = child.stdout.take().unwrap();
        let state = Arc::new(Mutex::new(Seen::default()));
        let shared = state.clone();
        let reader = std::thread::spawn(move || {
            let events = serde_json::Deserializer::from_reader(BufReader::new(stdout));
            for event in events.into_iter::<Value>().map_while(Result::ok) {
                shared.lock().unwrap().apply(&event);
            }
        });
        Self {
            child,
            reader: Some(reader),
            state,
        }
    }

    /// The fewest ready addresses each port had after any event seen so far.
    pub fn fewest(&self) -> BTreeMap<String, usize> {
        self.state.lock().unwrap().fewest.clone()
    }
}

impl Seen {
    fn apply(&mut self, event: &Value) {
        let object = &event["object"];
        let Some(name) = object["metadata"]["name"].as_str() else {
            return;
        };
        if event["type"] == "DELETED" {
            self.slices.remove(name);
        } else {
            self.slices.insert(name.to_string(), object.clone());
        }
        self.events += 1;
        let now = ready_by_port(self.slices.values());
        // A port that had addresses and now has no slice listing it counts as emptied too.
        for (port, fewest) in &mut self.fewest {
            let count = now.get(port).map_or(0, Vec::len);
            *fewest = (*fewest).min(count);
        }
        for (port, addresses) in now {
            self.fewest.entry(port).or_insert(addresses.len());
        }
    }
}

impl Drop for PublishedWatch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

#[test]
fn a_port_that_loses_its_last_slice_counts_as_emptied() {
    let slice = |name: &str, ready: bool| {
        serde_json::json!({"metadata": {"name": name}, "ports": [{"name": "http"}],
            "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": ready}}]})
    };
    let mut seen = Seen::default();
    seen.apply(&serde_json::json!({"type": "ADDED", "object": slice("a", true)}));
    assert_eq!(seen.fewest["http"], 1);
    seen.apply(&serde_json::json!({"type": "DELETED", "object": slice("a", true)}));
    assert_eq!(seen.fewest["http"], 0);
    let mut seen = Seen::default();
    seen.apply(&serde_json::json!({"type": "ADDED", "object": slice("a", false)}));
    assert_eq!(
        seen.fewest["http"], 0,
        "a not-ready endpoint is not published as ready"
    );
}
