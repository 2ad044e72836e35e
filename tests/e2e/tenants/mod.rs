//! Tenants on the real control plane: what one namespace can make a cluster-wide operator do.
//!
//! The chart is rendered and installed with the values under test, and the `portmapper` binary
//! runs as the chart's ServiceAccount (a token from `kubectl create token`) with the chart's own
//! flags: the Deployment's environment, where every flag of `portmapper run` is read from its
//! variable. Only what cannot apply to a local process changes (loopback HTTP address, no leader
//! election, a JSON log). Tenants are users bound to what `edit` aggregates plus a Role for
//! PortMappings in their own namespace only, and act through `kubectl --as`, so kube-apiserver's
//! RBAC judges every request they make. The test plays kubelet as the admin.
//!
//! The operator watches every namespace, so these scenarios share the cluster-wide control
//! plane of `rbac.rs` and its one-at-a-time lock.

mod budgets;
mod caches;
mod dns;
mod metrics;
mod probing;
mod published;
mod watches;
mod webhook;

use std::collections::BTreeMap;
use std::process::{Command, Output, Stdio};
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::env::{Cluster, Proc, TempDir, bin, kubectl_available};
use crate::rbac::{Install, cluster_wide, install};

pub use published::PublishedWatch;

/// A correctness bound for the operator to act on a change; generous, so that a loaded 2-core
/// machine never fails a test whose behaviour is right.
pub const WAIT: Duration = Duration::from_secs(60);

/// The chart installed cluster-wide and the operator running as its ServiceAccount.
pub struct World {
    /// The admin's view, in the test's base namespace.
    pub admin: Cluster,
    install: Install,
    dir: TempDir,
    operator: Option<Proc>,
    /// The chart's memory limit for the operator container, in bytes (`resources.limits`).
    pub memory_limit: Option<u64>,
    _one_at_a_time: MutexGuard<'static, ()>,
}

/// A namespace of the world and a user who may `edit` it (and manage PortMappings) only.
pub struct Tenant<'w> {
    world: &'w World,
    /// The tenant's namespace.
    pub namespace: String,
    /// The user the tenant acts as (`kubectl --as`).
    pub user: String,
}

impl World {
    /// Installs the chart with `values` and starts the operator with the chart's flags, then
    /// `flags` (command-line flags win over the chart's environment). `None` when the chart
    /// cannot be rendered here (the scenario says SKIPPED) or kubectl is missing.
    pub fn start(tag: &str, values: &Value, flags: &[&str]) -> Option<World> {
        if !kubectl_available() || std::env::var("PORTMAPPER_E2E_KUBECONFIG").is_ok() {
            return None;
        }
        let (plane, guard) = cluster_wide();
        let admin = Cluster::on(plane, tag);
        let dir = TempDir::new(tag);
        let install = install(&admin, &dir, values)?;
        let memory_limit = chart_memory_limit(&install.objects);
        let mut world = World {
            admin,
            install,
            dir,
            operator: None,
            memory_limit,
            _one_at_a_time: guard,
        };
        world.operator = Some(world.spawn_operator(flags));
        Some(world)
    }

    fn spawn_operator(&self, flags: &[&str]) -> Proc {
        let log = std::fs::File::create(self.dir.0.join("operator.log")).unwrap();
        let mut command = Command::new(bin("portmapper"));
        command.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            command.env("PATH", path);
        }
        for (name, value) in chart_env(&self.install.objects) {
            command.env(name, value);
        }
        let child = command
            .env("POD_NAMESPACE", &self.install.namespace)
            .env("POD_NAME", "portmapper-tenants-test")
            .env("PORTMAPPER_HTTP_ADDR", "127.0.0.1:0")
            .env("PORTMAPPER_LEADER_ELECT", "false")
            .env("PORTMAPPER_LOG_FORMAT", "json")
            .arg("run")
            .arg("--kubeconfig")
            .arg(&self.install.kubeconfig)
            .args(flags)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("portmapper starts");
        Proc(child)
    }

    /// The operator's process id.
    pub fn operator_pid(&self) -> u32 {
        self.operator.as_ref().expect("the operator runs").0.id()
    }

    /// A field of the operator's `/proc/<pid>/status` in bytes (`VmHWM`, `VmRSS`).
    pub fn operator_memory(&self, field: &str) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.operator_pid())).unwrap();
        proc_status_bytes(&status, field)
            .unwrap_or_else(|| panic!("no {field} in the operator's /proc status"))
    }

    /// The operator's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("operator.log")).unwrap_or_default()
    }

    /// The operator's HTTP address (`/metrics`), from its log.
    #[allow(dead_code)] // for scenarios that reach the operator's own server
    pub fn http_addr(&self) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let found = self
                .log()
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|l| l["message"] == "serving /metrics, /healthz and /readyz")
                .and_then(|l| l["addr"].as_str().map(str::to_string));
            if let Some(addr) = found {
                return addr;
            }
            assert!(
                Instant::now() < deadline,
                "no HTTP address:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A new tenant: namespace `<base>-<name>`, user `tenant-<base>-<name>` bound to `edit`
    /// and to full access to PortMappings there.
    pub fn tenant(&self, name: &str) -> Tenant<'_> {
        let namespace = format!("{}-{name}", self.admin.namespace);
        let user = format!("tenant-{namespace}");
        self.admin.ok(&["create", "namespace", &namespace]);
        let role = format!("portmappings-{name}");
        // `edit` is aggregated from these two by kube-controller-manager's ClusterRole
        // aggregation, which this control plane does not run: bound directly, they grant
        // exactly what `edit` would.
        for cluster_role in ["system:aggregate-to-edit", "system:aggregate-to-view"] {
            self.admin.ok(&[
                "create",
                "rolebinding",
                &cluster_role.replace(':', "-"),
                &format!("--clusterrole={cluster_role}"),
                &format!("--user={user}"),
                "-n",
                &namespace,
            ]);
        }
        self.admin.ok(&[
            "create",
            "role",
            &role,
            "--verb=*",
            "--resource=portmappings.portmapper.dev",
            "-n",
            &namespace,
        ]);
        self.admin.ok(&[
            "create",
            "rolebinding",
            &role,
            &format!("--role={role}"),
            &format!("--user={user}"),
            "-n",
            &namespace,
        ]);
        Tenant {
            world: self,
            namespace,
            user,
        }
    }

    /// Plays kubelet: `pod` in `namespace` runs at `ip`, Ready. Played: the tenants' scenarios
    /// are about RBAC and fairness between namespaces, not the pods' lifecycle; a real node
    /// would add its start and containers to each of them for nothing they check.
    pub fn set_pod_ready(&self, namespace: &str, pod: &str, ip: &str) {
        let patch = json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": "True"},
                           {"type": "ContainersReady", "status": "True"}]}});
        self.admin.ok(&[
            "patch",
            "pod",
            pod,
            "-n",
            namespace,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch.to_string(),
        ]);
    }

    /// Polls `pred` until it holds; panics with the operator log after [`WAIT`].
    pub fn wait_for(&self, what: &str, pred: impl Fn() -> bool) {
        let deadline = Instant::now() + WAIT;
        while !pred() {
            assert!(
                Instant::now() < deadline,
                "timed out: {what}; operator log:\n{}",
                tail(&self.log(), 60)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        // Stop the operator before its namespaces go, so it writes nothing into a teardown.
        self.operator.take();
    }
}

impl Tenant<'_> {
    /// kubectl as the tenant, in its namespace.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_stdin(args, None)
    }

    fn kubectl_stdin(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        let mut command = Command::new(test_support::realkube::kubectl());
        command
            .arg("--kubeconfig")
            .arg(&self.world.admin.kubeconfig)
            .arg(format!("--as={}", self.user))
            .args(["-n", &self.namespace])
            .args(args);
        let Some(input) = stdin else {
            return command.output().expect("kubectl runs");
        };
        use std::io::Write;
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        child.stdin.take().unwrap().write_all(input).unwrap();
        child.wait_with_output().unwrap()
    }

    /// kubectl as the tenant that must succeed; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl --as={} {} failed: {}",
            self.user,
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Creates `objects` (a JSON object or list) as the tenant; the result of kubectl.
    pub fn try_create(&self, objects: &Value) -> Output {
        let body = objects.to_string();
        self.kubectl_stdin(&["create", "-f", "-"], Some(body.as_bytes()))
    }

    /// Creates `objects` as the tenant; it must be allowed.
    pub fn create(&self, objects: &Value) {
        let out = self.try_create(objects);
        assert!(
            out.status.success(),
            "the tenant could not create its objects: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Applies `object` server-side as the tenant (taking over fields another manager set).
    pub fn apply(&self, object: &Value) {
        let body = object.to_string();
        let args = ["apply", "--server-side", "--force-conflicts", "-f", "-"];
        let out = self.kubectl_stdin(&args, Some(body.as_bytes()));
        assert!(
            out.status.success(),
            "the tenant could not apply its object: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A pod of the tenant's (a pause container, never run) with `labels` and `annotations`,
    /// set Ready at `ip` by the admin playing kubelet.
    pub fn ready_pod(&self, name: &str, labels: Value, annotations: Value, ip: &str) {
        self.create(&pod(name, labels, annotations));
        self.world.set_pod_ready(&self.namespace, name, ip);
    }

    /// A condition of PortMapping `pm`: (status, reason, message), empty strings when absent.
    pub fn condition(&self, pm: &str, type_: &str) -> (String, String, String) {
        let out = self.ok(&["get", "portmapping", pm, "-o", "json"]);
        let object: Value = serde_json::from_str(&out).unwrap();
        let found = object["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == type_).cloned())
            .unwrap_or_default();
        let field = |name: &str| found[name].as_str().unwrap_or_default().to_string();
        (field("status"), field("reason"), field("message"))
    }

    /// Waits until `pm`'s condition `type_` has `status` and returns its (reason, message).
    pub fn wait_condition(&self, pm: &str, type_: &str, status: &str) -> (String, String) {
        let found = std::cell::RefCell::new((String::new(), String::new()));
        self.world.wait_for(&format!("{pm} {type_}={status}"), || {
            let (s, reason, message) = self.condition(pm, type_);
            *found.borrow_mut() = (reason, message);
            s == status
        });
        found.into_inner()
    }

    /// The Warning Events about `pm`, as `reason: note` lines.
    pub fn warnings(&self, pm: &str) -> Vec<String> {
        let out = self.ok(&[
            "get",
            "events",
            "--field-selector",
            &format!("involvedObject.name={pm},type=Warning"),
            "-o",
            "json",
        ]);
        let list: Value = serde_json::from_str(&out).unwrap();
        list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                format!(
                    "{}: {}",
                    e["reason"].as_str().unwrap_or_default(),
                    e["message"].as_str().unwrap_or_default()
                )
            })
            .collect()
    }

    /// The ready addresses published for `service`, by Service port name (every slice the
    /// operator manages for it, read as the admin: `edit` may not list EndpointSlices).
    pub fn published(&self, service: &str) -> BTreeMap<String, Vec<String>> {
        let out = self.world.admin.ok(&[
            "get",
            "endpointslices",
            "-n",
            &self.namespace,
            "-l",
            &format!(
                "kubernetes.io/service-name={service},endpointslice.kubernetes.io/managed-by=portmapper.dev"
            ),
            "-o",
            "json",
        ]);
        let list: Value = serde_json::from_str(&out).unwrap();
        published::ready_by_port(list["items"].as_array().into_iter().flatten())
    }

    /// Watches `service`'s published addresses from now on, recording the fewest ready
    /// addresses each port ever had (see [`PublishedWatch`]).
    pub fn watch_published(&self, service: &str) -> PublishedWatch {
        PublishedWatch::start(&self.world.admin, &self.namespace, service)
    }
}

/// The victim: Service `web` of tenant `b`, one pod published, watched from now on.
pub fn victim(world: &World) -> (Tenant<'_>, PublishedWatch) {
    let b = world.tenant("b");
    b.create(&service("web", [8080]));
    b.create(&portmapping("web", "example.com/group", json!({})));
    b.ready_pod(
        "web-1",
        json!({"example.com/group": "web"}),
        json!({}),
        "10.244.1.1",
    );
    world.wait_for("the victim's pod published", || {
        b.published("web")
            .get("p8080")
            .is_some_and(|a| a.len() == 1)
    });
    let watch = b.watch_published("web");
    (b, watch)
}

/// The victim is served as before: a new pod is published, and no port ever emptied.
pub fn victim_unharmed(world: &World, b: &Tenant<'_>, watch: &PublishedWatch) {
    b.ready_pod(
        "web-2",
        json!({"example.com/group": "web"}),
        json!({}),
        "10.244.1.2",
    );
    world.wait_for("the victim's new pod published", || {
        b.published("web")
            .get("p8080")
            .is_some_and(|a| a.len() == 2)
    });
    let fewest = watch.fewest();
    assert!(
        fewest.values().all(|&n| n >= 1),
        "a victim port emptied during the attack: {fewest:?}"
    );
}

/// A pod object (never scheduled: there is no kubelet; the test writes its status).
pub fn pod(name: &str, labels: Value, annotations: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}})
}

/// A selector-less Service with `ports` (numbered TCP ports, named `p<port>`).
pub fn service(name: &str, ports: impl IntoIterator<Item = u16>) -> Value {
    let ports: Vec<Value> = ports
        .into_iter()
        .map(|p| json!({"name": format!("p{p}"), "port": p, "protocol": "TCP"}))
        .collect();
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"ports": ports}})
}

/// A PortMapping of Service `name` over pods labelled `key`, with `spec` merged in.
pub fn portmapping(name: &str, key: &str, spec: Value) -> Value {
    let mut object = json!({"apiVersion": "portmapper.dev/v1alpha1", "kind": "PortMapping",
        "metadata": {"name": name},
        "spec": {"serviceRef": {"name": name}, "pods": {"key": key}}});
    if let (Some(base), Some(extra)) = (object["spec"].as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            base.insert(k.clone(), v.clone());
        }
    }
    object
}

/// The literal environment of the chart's operator container (values from the downward API
/// are left out: the harness sets its own).
fn chart_env(objects: &[Value]) -> Vec<(String, String)> {
    container(objects)["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?.to_string(),
                e["value"].as_str()?.to_string(),
            ))
        })
        .collect()
}

/// The chart's memory limit for the operator container, in bytes.
fn chart_memory_limit(objects: &[Value]) -> Option<u64> {
    let limit = container(objects)["resources"]["limits"]["memory"].as_str()?;
    let (digits, unit) = limit.split_at(limit.find(|c: char| !c.is_ascii_digit())?);
    let scale = match unit {
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        _ => return None,
    };
    Some(digits.parse::<u64>().ok()? * scale)
}

fn container(objects: &[Value]) -> &Value {
    objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .map(|d| &d["spec"]["template"]["spec"]["containers"][0])
        .expect("the chart renders a Deployment")
}

/// `field` of a `/proc/<pid>/status` text, in bytes.
fn proc_status_bytes(status: &str, field: &str) -> Option<u64> {
    let line = status
        .lines()
        .find(|l| l.strip_prefix(field).is_some_and(|r| r.starts_with(':')))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[test]
fn proc_status_fields_are_read_in_bytes() {
    let status = "Name:\tportmapper\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n";
    assert_eq!(proc_status_bytes(status, "VmHWM"), Some(20 << 20));
    assert_eq!(proc_status_bytes(status, "VmRSS"), Some(10 << 20));
    assert_eq!(proc_status_bytes(status, "VmSwap"), None);
}

#[test]
fn the_charts_memory_limit_is_read_in_bytes() {
    let objects = [
        json!({"kind": "Deployment", "spec": {"template": {"spec": {"containers": [
        {"resources": {"limits": {"memory": "256Mi"}}}]}}}}),
    ];
    assert_eq!(chart_memory_limit(&objects), Some(256 << 20));
}
