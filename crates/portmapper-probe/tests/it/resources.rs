//! Local resource exhaustion is the operator's problem: probes abstain instead of excluding.
//!
//! The outer test re-runs this binary under `prlimit --nofile` so that the inner test can use up
//! its own descriptor table without starving the other tests of this process.

use portmapper_probe::{Cause, Outcome};
use test_support::{Inner, Sandbox, in_sandbox, run_inner};
use tokio::net::TcpListener;

use crate::support::*;

const INNER: &str = "resources::inner_descriptor_exhaustion_abstains";
const ENV: &str = "PORTMAPPER_PROBE_FD_LIMITED";

#[test]
fn descriptor_exhaustion_abstains() {
    run_inner(
        Sandbox::DescriptorLimit(256),
        Inner {
            what: "descriptor exhaustion test",
            filter: INNER,
            exact: true,
            threads: 1,
            expect_passed: 1,
            env: ENV,
        },
    );
}

#[tokio::test]
#[ignore = "runs only under the descriptor limit set by descriptor_exhaustion_abstains"]
async fn inner_descriptor_exhaustion_abstains() {
    if !in_sandbox(ENV) {
        return;
    }
    let listener = TcpListener::bind((LOCALHOST, 0)).await.unwrap();
    let t = target(listener.local_addr().unwrap(), tcp_socket(None));
    let exec = executor();
    assert_eq!(exec.run(&mapping(), &t).await.outcome, Outcome::Include);

    let mut hoard = Vec::new();
    loop {
        match std::fs::File::open("/dev/null") {
            Ok(file) => hoard.push(file),
            Err(err) if err.raw_os_error() == Some(libc::EMFILE) => break,
            Err(err) => panic!("unexpected error while exhausting descriptors: {err}"),
        }
        assert!(hoard.len() < 100_000, "descriptor limit not in force");
    }
    let result = exec.run(&mapping(), &t).await;
    drop(hoard);
    assert_eq!(
        (result.outcome, result.cause),
        (Outcome::Abstain, Cause::LocalResources),
        "{result:?}"
    );
    assert_eq!(exec.run(&mapping(), &t).await.outcome, Outcome::Include);
    println!("descriptor exhaustion: {}", result.reason);
}
