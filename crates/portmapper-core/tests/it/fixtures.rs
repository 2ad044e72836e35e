//! Builders for PortMappings, Services, pods and a harness that plans and "applies".

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, Endpoints, Pod, PodCondition, PodIP, PodSpec, PodStatus, Service,
    ServicePort, ServiceSpec,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use portmapper_api::check::PortNamesCheck;
use portmapper_api::{Check, KeySource, PortMapping, PortMappingSpec, PortRule, SliceGrouping};
use portmapper_core::compact_slice::CompactSlice;
use portmapper_core::{
    EvalMemo, NetworkDecisions, Plan, PlanInput, PodRecord, plan, plan_with_memo,
};
use test_support::spec;

pub const NS: &str = "shop";
pub const GROUP_KEY: &str = "example.com/group";
pub const PORTS_KEY: &str = "example.com/ports";

pub fn port_names_check() -> Check {
    Check {
        port_names: Some(PortNamesCheck {
            key: PORTS_KEY.into(),
            from: KeySource::Annotation,
        }),
        ..Check::default()
    }
}

/// A PortMapping for Service `web` whose listed ports use `[portNames, podReady]`, publishing
/// one slice set per port (`sliceGrouping: PerPort`): most tests here are about membership and
/// read a port's slice by its per-port name. `port_sets.rs` and the property tests cover the
/// default, `PerPortSet` ([`port_set_mapping`]).
pub fn port_mapping(listed_ports: &[&str]) -> PortMapping {
    let mut pm = port_set_mapping(listed_ports);
    pm.spec.slice_grouping = SliceGrouping::PerPort;
    pm
}

/// [`port_mapping`] with the default grouping, `PerPortSet`.
pub fn port_set_mapping(listed_ports: &[&str]) -> PortMapping {
    test_support::port_mapping(
        "pm",
        NS,
        PortMappingSpec {
            ports: listed_ports
                .iter()
                .map(|p| PortRule {
                    name: (*p).into(),
                    checks: vec![port_names_check(), Check::pod_ready()],
                })
                .collect(),
            ..spec("web", GROUP_KEY)
        },
    )
}

pub fn sport(name: &str, port: i32, target: Option<IntOrString>) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        port,
        target_port: target,
        protocol: Some("TCP".into()),
        ..ServicePort::default()
    }
}

pub fn service(ports: Vec<ServicePort>) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some(NS.into()),
            uid: Some("svc-uid".into()),
            labels: Some(BTreeMap::from([("app".to_owned(), "web".to_owned())])),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("10.96.0.10".into()),
            ip_families: Some(vec!["IPv4".into()]),
            ports: Some(ports),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// The Go original's Service: http 8080 and https 8443.
pub fn web_service() -> Service {
    service(vec![sport("http", 8080, None), sport("https", 8443, None)])
}

pub struct PodBuilder(pub Pod);

impl PodBuilder {
    pub fn new(name: &str, ips: &[&str]) -> Self {
        Self(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(NS.into()),
                uid: Some(format!("uid-{name}")),
                labels: Some(BTreeMap::from([(GROUP_KEY.to_owned(), "web".to_owned())])),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some("node-1".into()),
                containers: vec![Container {
                    name: "app".into(),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                pod_ips: Some(ips.iter().map(|ip| PodIP { ip: (*ip).into() }).collect()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        })
    }

    pub fn ports(mut self, list: &str) -> Self {
        self.0
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(PORTS_KEY.into(), list.into());
        self
    }

    pub fn unready(mut self) -> Self {
        if let Some(c) = self.0.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            c[0].status = "False".into();
        }
        self
    }

    pub fn terminating(mut self) -> Self {
        self.0.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        self
    }

    pub fn phase(mut self, phase: &str) -> Self {
        if let Some(s) = self.0.status.as_mut() {
            s.phase = Some(phase.into());
        }
        self
    }

    pub fn container_port(mut self, name: &str, number: i32) -> Self {
        if let Some(s) = self.0.spec.as_mut() {
            s.containers[0]
                .ports
                .get_or_insert_with(Vec::new)
                .push(ContainerPort {
                    name: Some(name.into()),
                    container_port: number,
                    ..ContainerPort::default()
                });
        }
        self
    }

    pub fn sidecar_port(mut self, name: &str, number: i32) -> Self {
        if let Some(s) = self.0.spec.as_mut() {
            s.init_containers
                .get_or_insert_with(Vec::new)
                .push(Container {
                    name: "proxy".into(),
                    restart_policy: Some("Always".into()),
                    ports: Some(vec![ContainerPort {
                        name: Some(name.into()),
                        container_port: number,
                        ..ContainerPort::default()
                    }]),
                    ..Container::default()
                });
        }
        self
    }

    pub fn hostname(mut self, hostname: &str, subdomain: &str) -> Self {
        if let Some(s) = self.0.spec.as_mut() {
            s.hostname = Some(hostname.into());
            s.subdomain = Some(subdomain.into());
        }
        self
    }

    pub fn build(self) -> Pod {
        self.0
    }
}

/// The Go original's pods: a→http, b,c→http+https, d→https, all ready.
pub fn seed_pods() -> Vec<Pod> {
    vec![
        PodBuilder::new("pod-a", &["10.0.0.1"])
            .ports("http")
            .build(),
        PodBuilder::new("pod-b", &["10.0.0.2"])
            .ports("http,https")
            .build(),
        PodBuilder::new("pod-c", &["10.0.0.3"])
            .ports("http, https")
            .build(),
        PodBuilder::new("pod-d", &["10.0.0.4"])
            .ports("https")
            .build(),
    ]
}

/// The records as the planner takes them.
pub fn refs(records: &[PodRecord]) -> Vec<&PodRecord> {
    records.iter().collect()
}

/// Everything the planner reads, owned, plus the "cluster" state plans are applied to.
pub struct World {
    pub pm: PortMapping,
    pub service: Service,
    pub pods: Vec<Pod>,
    pub zones: BTreeMap<String, String>,
    /// Nodes known not Ready, with their `Ready` status.
    pub unready_nodes: BTreeMap<String, String>,
    pub network: NetworkDecisions,
    pub slices: Vec<EndpointSlice>,
    pub endpoints: Option<Endpoints>,
    /// Every Endpoints object the PortMapping controls (`endpoints` included or not).
    pub owned_endpoints: Vec<std::sync::Arc<Endpoints>>,
    /// The native controllers' slices of the Service (the selector migration's evidence).
    pub native: Vec<portmapper_core::planner::migration::NativeSlice>,
    /// Names someone else holds (outside `slices`).
    pub held: BTreeMap<String, portmapper_core::HeldName>,
    pub now: Timestamp,
    pub next_uid: u64,
    pub gate_peers: portmapper_core::GatePeers,
}

impl World {
    pub fn new(pm: PortMapping, service: Service, pods: Vec<Pod>) -> Self {
        Self {
            pm,
            service,
            pods,
            zones: BTreeMap::new(),
            unready_nodes: BTreeMap::new(),
            network: NetworkDecisions::new(),
            slices: Vec::new(),
            endpoints: None,
            owned_endpoints: Vec::new(),
            native: Vec::new(),
            held: BTreeMap::new(),
            now: Timestamp::from_second(1_800_000_000).unwrap_or(Timestamp::UNIX_EPOCH),
            next_uid: 1,
            gate_peers: portmapper_core::GatePeers::default(),
        }
    }

    /// The pods as records (see [`refs`]).
    pub fn pod_records(&self) -> Vec<PodRecord> {
        self.pods.iter().map(PodRecord::from).collect()
    }

    /// The pods as the planner takes them (and the operator's index holds them).
    pub fn shared_records(&self) -> Vec<std::sync::Arc<PodRecord>> {
        self.pods
            .iter()
            .map(|p| std::sync::Arc::new(PodRecord::from(p)))
            .collect()
    }

    /// The live slices as the planner takes them (shared, as the operator's cache holds them).
    pub fn slice_refs(&self) -> Vec<std::sync::Arc<CompactSlice>> {
        self.slices
            .iter()
            .cloned()
            .map(|s| std::sync::Arc::new(CompactSlice::from(s)))
            .collect()
    }

    /// The plan, or why there is none.
    pub fn try_plan(&self) -> Result<Plan, portmapper_core::PlanError> {
        self.try_plan_with(None)
    }

    /// The plan, with `memo` when given (the operator's incremental path).
    pub fn try_plan_with(
        &self,
        memo: Option<&mut EvalMemo>,
    ) -> Result<Plan, portmapper_core::PlanError> {
        let (pods, slices) = (self.shared_records(), self.slice_refs());
        let input = PlanInput {
            unready_nodes: &self.unready_nodes,
            network: &self.network,
            live_slices: &slices,
            held_by_others: &self.held,
            live_endpoints: self.endpoints.as_ref(),
            owned_endpoints: &self.owned_endpoints,
            native_slices: &self.native,
            now: self.now,
            gate_peers: &self.gate_peers,
            ..PlanInput::first_publication(&self.pm, &self.service, &pods, &self.zones)
        };
        match memo {
            Some(memo) => plan_with_memo(&input, memo),
            None => plan(&input),
        }
    }

    pub fn plan(&self) -> Plan {
        self.try_plan().expect("plan")
    }

    /// Applies a plan the way the API server would store it (uid and resourceVersion set).
    pub fn apply(&mut self, plan: &Plan) {
        let mut next: Vec<EndpointSlice> = Vec::new();
        for p in &plan.slices {
            let live = self
                .slices
                .iter()
                .find(|s| s.metadata.name == p.slice.metadata.name);
            let mut s = match (&p.action, live) {
                (portmapper_core::WriteAction::Unchanged, Some(l)) => l.clone(),
                _ => p.slice.to_endpoint_slice(),
            };
            if p.action.is_write() {
                self.next_uid += 1;
                s.metadata.uid = live
                    .and_then(|l| l.metadata.uid.clone())
                    .or(Some(format!("slice-{}", self.next_uid)));
                s.metadata.resource_version = Some(self.next_uid.to_string());
            }
            next.push(s);
        }
        // Objects the plan neither keeps nor deletes (foreign ones) stay.
        for s in &self.slices {
            let planned = plan
                .slices
                .iter()
                .any(|p| p.slice.metadata.name == s.metadata.name);
            let deleted = plan
                .deletions
                .iter()
                .any(|d| Some(&d.name) == s.metadata.name.as_ref());
            if !planned && !deleted {
                next.push(s.clone());
            }
        }
        self.slices = next;
        if let Some(e) = plan.endpoints.as_ref().filter(|e| e.action.is_write()) {
            let mut obj = e.endpoints.clone();
            obj.metadata.uid = Some("ep-uid".into());
            obj.metadata.resource_version = Some("1".into());
            self.endpoints = Some(obj);
        }
        if plan.endpoints_deletion.is_some() {
            self.endpoints = None;
        }
    }

    /// Plans, applies, and returns the plan.
    pub fn step(&mut self) -> Plan {
        let p = self.plan();
        self.apply(&p);
        p
    }

    pub fn slice(&self, name: &str) -> Option<&EndpointSlice> {
        self.slices
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(name))
    }

    pub fn pod_mut(&mut self, name: &str) -> &mut Pod {
        self.pods
            .iter_mut()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .expect("pod")
    }
}

/// Pod names published in a slice, sorted.
pub fn pod_names(slice: &EndpointSlice) -> Vec<String> {
    let mut names: Vec<String> = slice
        .endpoints
        .iter()
        .filter_map(|e| e.target_ref.as_ref().and_then(|r| r.name.clone()))
        .collect();
    names.sort();
    names
}

/// Slice names of a plan with their actions, for compact assertions.
pub fn actions(plan: &Plan) -> Vec<(String, &'static str)> {
    plan.slices
        .iter()
        .map(|p| {
            let a = match p.action {
                portmapper_core::WriteAction::Create => "create",
                portmapper_core::WriteAction::Update { .. } => "update",
                portmapper_core::WriteAction::Unchanged => "unchanged",
            };
            (p.slice.metadata.name.clone().unwrap_or_default(), a)
        })
        .collect()
}
