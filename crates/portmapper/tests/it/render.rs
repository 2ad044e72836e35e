//! `portmapper render` through the binary: golden outputs for every example, error messages that
//! point at the file and document, and the documented exit codes.
//!
//! `UPDATE_GOLDEN=1 cargo test -p portmapper --test it render::` rewrites the expectations.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn render(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_portmapper"))
        .arg("render")
        .args(args)
        .current_dir(repo())
        .output()
        .expect("portmapper runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The examples render expects golden files for: every `examples/*/manifests` but the demo.
fn examples() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("manifests").is_dir())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// `expected.yaml` is rendered with the defaults, `expected-<assume>.yaml` with `--assume <assume>`.
#[test]
fn every_example_renders_its_committed_expectation() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let names = examples();
    assert!(names.len() >= 5, "examples found: {names:?}");
    for name in names {
        let dir = repo().join("examples").join(&name);
        let mut goldens: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                let f = p.file_name().unwrap().to_string_lossy();
                f.starts_with("expected") && f.ends_with(".yaml")
            })
            .collect();
        if goldens.is_empty() {
            goldens.push(dir.join("expected.yaml"));
        }
        for golden in goldens {
            let file = golden.file_name().unwrap().to_string_lossy().into_owned();
            let manifests = format!("examples/{name}/manifests");
            let mut args = vec!["-f", manifests.as_str()];
            let assume = file
                .strip_prefix("expected-")
                .and_then(|f| f.strip_suffix(".yaml"));
            if let Some(assume) = assume {
                args.extend(["--assume", assume]);
            }
            let out = render(&args);
            assert!(
                out.status.success(),
                "render {args:?} failed: {}",
                stderr(&out)
            );
            let actual = stdout(&out);
            if update {
                std::fs::write(&golden, &actual).unwrap();
                continue;
            }
            let expected = std::fs::read_to_string(&golden).unwrap_or_default();
            assert!(
                actual == expected,
                "render {args:?} differs from {}; rerun with UPDATE_GOLDEN=1 and review the diff.\n--- actual ---\n{actual}",
                golden.display()
            );
        }
    }
}

fn kinds(text: &str) -> Vec<String> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| {
            let v = <serde_yaml::Value as serde::Deserialize>::deserialize(doc).unwrap();
            v["kind"].as_str().unwrap().to_owned()
        })
        .collect()
}

/// While the Service keeps its selector the native controllers own its Endpoints object, so
/// render, like the operator, shows none; once the selector is gone it shows ours.
#[test]
fn yaml_output_is_a_stream_of_kubernetes_objects() {
    let out = render(&["-f", "examples/selector-migration/manifests"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(
        kinds(&text),
        ["EndpointSlice", "EndpointSlice", "PortMapping"]
    );
    assert!(text.contains("ASSUMED"), "the assumption is marked");
    assert!(text.contains("type: SelectorMigration"));
    assert!(!text.contains("last-change-trigger-time"));

    let dir = repo().join("examples/selector-migration/manifests");
    let mut manifests = String::new();
    for file in ["00-service.yaml", "10-pods.yaml", "20-portmapping.yaml"] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        manifests.push_str(&text.replace("  selector: {app: web}\n", ""));
        manifests.push_str("\n---\n");
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_portmapper"))
        .args(["render", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(manifests.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(
        kinds(&text),
        ["EndpointSlice", "EndpointSlice", "Endpoints", "PortMapping"]
    );
    assert!(!text.contains("type: SelectorMigration"));
}

#[test]
fn table_output_explains_exclusions() {
    let out = render(&["-f", "examples/colocated-broker/manifests", "-o", "table"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("PortMapping default/broker → Service broker"));
    assert!(text.contains("Ready=True Published: published client 2/3, admin 3/3"));
    assert!(text.contains(
        "client excludes broker-2: portNames: annotation example.com/ports does not list \"client\""
    ));
}

#[test]
fn assume_decides_network_checks() {
    let table = |assume: &str| {
        let out = render(&[
            "-f",
            "examples/grpc-health/manifests",
            "-o",
            "table",
            "--assume",
            assume,
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    assert!(table("include").contains("published grpc 2/2"));
    let excluded = table("exclude");
    assert!(excluded.contains("published grpc 0/2"));
    assert!(excluded.contains("grpc excludes api-1: grpc: assumed exclude"));
    let abstained = table("abstain");
    assert!(abstained.contains("2 network check results ASSUMED abstain"));
    assert!(abstained.contains("nothing published to keep"));
}

/// A scratch directory of manifests, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str, files: &[(&str, &str)]) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "portmapper-render-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
        Self(dir)
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const SERVICE: &str = "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  ports: [{name: http, port: 80}]\n";

fn port_mapping(name: &str, service: &str) -> String {
    format!(
        "apiVersion: portmapper.dev/v1alpha1\nkind: PortMapping\nmetadata: {{name: {name}}}\nspec:\n  serviceRef: {{name: {service}}}\n  pods: {{key: example.com/pool}}\n"
    )
}

#[test]
fn invalid_input_names_file_line_and_document_and_exits_1() {
    let pm = port_mapping("web", "web");
    let s = Scratch::new(
        "invalid",
        &[
            ("a.yaml", &format!("{SERVICE}---\n# a comment\n{pm}")),
            (
                "b.yaml",
                "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n---\n\napiVersion: v1\nkind: Pod\nmetadata: [oops\n",
            ),
            (
                "c.yaml",
                "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n",
            ),
        ],
    );
    let out = render(&["-f", &s.0.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "nothing printed on invalid input");
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "{}:9: document 2: not valid YAML: did not find expected ',' or ']', while parsing a flow sequence at line 8 column 11",
            s.path("b.yaml")
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{}:1: document 1: apps/v1 Deployment is not an input of render",
            s.path("c.yaml")
        )),
        "{err}"
    );
}

#[test]
fn invalid_port_mapping_and_missing_service_are_errors() {
    let bad = port_mapping("bad", "Not_A_Name");
    let orphan = port_mapping("orphan", "gone");
    let s = Scratch::new(
        "spec",
        &[("pm.yaml", &format!("{SERVICE}---\n{bad}---\n{orphan}"))],
    );
    let out = render(&["-f", &s.path("pm.yaml")]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "{}:7: document 2: PortMapping default/bad is invalid: spec.serviceRef.name: Invalid value: \"Not_A_Name\"",
            s.path("pm.yaml")
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{}:14: document 3: PortMapping default/orphan names Service default/gone, which is not in the input",
            s.path("pm.yaml")
        )),
        "{err}"
    );
}

#[test]
fn two_port_mappings_for_one_service_report_the_conflict() {
    let a = port_mapping("a", "web");
    let b = port_mapping("b", "web");
    let s = Scratch::new(
        "conflict",
        &[("x.yaml", &format!("{SERVICE}---\n{b}---\n{a}"))],
    );
    let out = render(&["-f", &s.path("x.yaml"), "-o", "table"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("Conflict=True ServiceClaimed: PortMapping a already publishes Service web"),
        "{text}"
    );
    assert!(text.contains("PortMapping default/a → Service web\n  Ready=True"));
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(render(&[]).status.code(), Some(2), "-f is required");
    assert_eq!(
        render(&["-f", "examples/dual-stack/manifests", "--assume", "maybe"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn unreadable_paths_exit_1() {
    let out = render(&["-f", "examples/does-not-exist"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("examples/does-not-exist: cannot read"));
}

#[test]
fn nodes_give_zones_and_hints() {
    let pm = port_mapping("web", "web");
    let service = "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  trafficDistribution: PreferClose\n  ports: [{name: http, port: 80}]\n";
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {example.com/pool: web}}\nspec:\n  nodeName: n1\n  containers: [{name: c, image: x}]\nstatus:\n  podIPs: [{ip: 10.0.0.1}]\n  conditions: [{type: Ready, status: \"True\"}]\n";
    let node = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Node\n  metadata: {name: n1, labels: {topology.kubernetes.io/zone: zone-a}}\n";
    let s = Scratch::new(
        "zones",
        &[(
            "x.yaml",
            &format!("{service}---\n{pm}---\n{pod}---\n{node}"),
        )],
    );
    let out = render(&["-f", &s.path("x.yaml")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("nodeName: n1"), "{text}");
    assert!(text.contains("zone: zone-a"), "{text}");
    assert!(text.contains("forZones:\n    - name: zone-a"), "{text}");
}

/// A never-published gated pod (Ready=False waiting for the gate, containers ready) is
/// previewed as the operator would publish it: in the slice on a Ready node, left out on a node
/// known not Ready (the node-lifecycle controller does not touch a pod already not Ready).
#[test]
fn a_gated_pod_on_a_node_known_not_ready_is_not_previewed_as_published() {
    let pm = port_mapping("web", "web");
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {example.com/pool: web}}\nspec:\n  nodeName: n1\n  readinessGates: [{conditionType: portmapper.dev/published}]\n  containers: [{name: c, image: x}]\nstatus:\n  podIPs: [{ip: 10.0.0.1}]\n  conditions:\n  - {type: Ready, status: \"False\", reason: ReadinessGatesNotReady}\n  - {type: ContainersReady, status: \"True\"}\n";
    let node = |ready: &str| {
        format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: n1}}\nstatus:\n  conditions: [{{type: Ready, status: \"{ready}\"}}]\n"
        )
    };
    let preview = |ready: &str| {
        let s = Scratch::new(
            "gated-node",
            &[(
                "x.yaml",
                &format!("{SERVICE}---\n{pm}---\n{pod}---\n{}", node(ready)),
            )],
        );
        let out = render(&["-f", &s.path("x.yaml")]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let ready = preview("True");
    assert!(ready.contains("- 10.0.0.1"), "{ready}");
    for status in ["False", "Unknown"] {
        let unready = preview(status);
        assert!(!unready.contains("- 10.0.0.1"), "Ready={status}: {unready}");
    }
}

/// The preview reports the Istio ambient caveat as the live reconcile does: the colocated-broker
/// example (client on two brokers, admin on three) with one broker enrolled in ambient.
#[test]
fn render_reports_the_istio_ambient_caveat() {
    let src = repo().join("examples/colocated-broker/manifests");
    let dir =
        std::env::temp_dir().join(format!("portmapper-render-ambient-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for file in ["00-service.yaml", "10-pods.yaml", "20-portmapping.yaml"] {
        let mut text = std::fs::read_to_string(src.join(file)).unwrap();
        if file == "10-pods.yaml" {
            let plain = "  name: broker-0\n  labels: {example.com/pool: broker}\n  annotations: {example.com/ports: \"client,admin\"}";
            assert!(
                text.contains(plain),
                "the example still has broker-0 as written here"
            );
            text = text.replace(
                plain,
                "  name: broker-0\n  labels: {example.com/pool: broker}\n  annotations: {example.com/ports: \"client,admin\", ambient.istio.io/redirection: enabled}",
            );
        }
        std::fs::write(dir.join(file), text).unwrap();
    }
    let out = render(&["-f", dir.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("type: ConsumerCaveat"), "{text}");
    assert!(text.contains("reason: IstioAmbient"));
    assert!(text.contains("port client (2 published) also reaches broker-2"));
    assert!(text.contains("Warning Event IstioAmbient: "));
}
