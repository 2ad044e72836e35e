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
    // The membership table's rows, as `service port members` (whitespace-normalised).
    let rows: Vec<String> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let has = |row: &str| rows.iter().any(|r| r == row);
    assert!(has("SERVICE PORT MEMBERS"), "{stdout}");
    // Initial state from examples/demo: a,b,c → http and b,c,d → https.
    assert!(has("my-service http pod-a, pod-b, pod-c"), "{stdout}");
    assert!(has("my-service https pod-b, pod-c, pod-d"), "{stdout}");
    // The tour annotates pod-a (joins https), then deletes pod-c (leaves both).
    assert!(
        has("my-service https pod-a, pod-b, pod-c, pod-d"),
        "{stdout}"
    );
    assert!(has("my-service http pod-a, pod-b"), "{stdout}");
    assert!(
        has("my-service https pod-a, pod-b, pod-d") || has("my-service https pod-a, pod-d"),
        "{stdout}"
    );
    // Logs go to the file the demo names, never between the table's lines.
    assert!(stdout.contains("logs: "), "{stdout}");
    assert!(
        !stdout.contains(" INFO ") && !stdout.contains(" WARN "),
        "{stdout}"
    );
    assert!(stdout.contains("export KUBECONFIG="), "{stdout}");
    assert!(stdout.contains("tour done"), "{stdout}");
}
