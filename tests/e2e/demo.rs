//! `portmapper demo`: the README's first command, run unattended as CI does.

use std::process::Command;

use crate::env::{bin, repo};

#[test]
fn demo_shows_membership_changing_live() {
    let out = Command::new(bin("portmapper"))
        .args(["demo", "--duration", "6", "--tour", "--manifests"])
        .arg(repo().join("examples/demo"))
        .output()
        .expect("portmapper demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Initial state from examples/demo: a,b,c → http and b,c,d → https.
    assert!(
        stdout.contains("my-service http: pod-a, pod-b, pod-c\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("my-service https: pod-b, pod-c, pod-d\n"),
        "{stdout}"
    );
    // The tour annotates pod-a (joins https), then deletes pod-c (leaves both).
    assert!(
        stdout.contains("my-service https: pod-a, pod-b, pod-c, pod-d\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("my-service http: pod-a, pod-b\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("my-service https: pod-a, pod-b, pod-d\n"),
        "{stdout}"
    );
    assert!(stdout.contains("export KUBECONFIG="), "{stdout}");
    assert!(stdout.contains("tour done"), "{stdout}");
}
