//! Every example under `examples/` applies as written (after `portmapper crd | kubectl apply -f -`),
//! and its committed `render` output is accepted by kubectl and by the API server's validation
//! (server-side dry run), so a review can apply what render prints.

use std::path::PathBuf;
use std::process::Command;

use crate::env::{Cluster, bin, kubectl_available, repo};

fn examples() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(repo().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("manifests").is_dir())
        .collect();
    dirs.sort();
    dirs
}

fn install_crd(cluster: &Cluster) {
    let crd = Command::new(bin("portmapper")).arg("crd").output().unwrap();
    assert!(crd.status.success());
    let out = cluster.kubectl_stdin(&["apply", "-f", "-"], &crd.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    cluster.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/portmappings.portmapper.dev",
        "--timeout=30s",
    ]);
}

#[test]
fn every_example_applies_and_its_render_output_validates() {
    if !kubectl_available() {
        return;
    }
    let cluster = Cluster::start("examples");
    install_crd(&cluster);
    let dirs = examples();
    assert!(dirs.len() >= 5, "examples: {dirs:?}");
    for dir in dirs {
        // The render output first, while nothing of the example exists: client-side apply of a
        // custom resource that exists would PATCH, and the emulator advertises (and kubectl then
        // picks) strategic merge patch for custom resources, which it rejects.
        let goldens = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("expected")
            });
        for golden in goldens {
            let path = golden.to_str().unwrap();
            for dry_run in ["--dry-run=client", "--dry-run=server"] {
                let out = cluster.kubectl(&["apply", dry_run, "-f", path]);
                assert!(
                    out.status.success(),
                    "kubectl apply {dry_run} -f {path}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        let manifests = dir.join("manifests");
        let applied = cluster.ok(&["apply", "-f", manifests.to_str().unwrap()]);
        assert!(applied.contains("portmapping.portmapper.dev/"), "{applied}");
    }
    // Example names are distinct, so all of them coexist in the default namespace.
    for dir in examples() {
        let manifests = dir.join("manifests");
        cluster.ok(&["delete", "-f", manifests.to_str().unwrap(), "--wait=false"]);
    }
}
