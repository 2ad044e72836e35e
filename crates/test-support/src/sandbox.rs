//! Re-running some tests of the current test binary inside a sandbox made for them.
//!
//! A test that needs what a test process must not do to itself (bind non-loopback pod IPs, use
//! up its descriptor table) is written as an `#[ignore]`d *inner* test, and an *outer* test
//! re-runs the binary with the inner tests' filter under `unshare -n` or `prlimit`. The inner
//! tests find the environment variable [`Inner::env`] set and do their work; run any other way
//! they return at once ([`in_sandbox`]).

use std::process::{Command, Output};

/// The addresses the network namespace routes to its loopback interface: pod IPs for tests.
pub const POD_NETWORK: &str = "10.244.0.0/16";

/// Where the inner tests run.
#[derive(Clone, Copy, Debug)]
pub enum Sandbox {
    /// A new network namespace (`unshare -n`) with `lo` up and [`POD_NETWORK`] routed to it,
    /// and no other interface, so no packet leaves it.
    NetworkNamespace,
    /// The same process environment with at most this many open descriptors (`prlimit`).
    DescriptorLimit(u32),
}

/// The inner tests to re-run.
#[derive(Clone, Copy, Debug)]
pub struct Inner<'a> {
    /// What the tests check, for the message when the sandbox cannot be made here.
    pub what: &'a str,
    /// The test-name filter.
    pub filter: &'a str,
    /// Whether `filter` is an exact test name.
    pub exact: bool,
    /// `--test-threads`.
    pub threads: usize,
    /// How many inner tests must pass: fewer means some did not run.
    pub expect_passed: usize,
    /// The variable set for the inner run.
    pub env: &'a str,
}

/// Runs `inner` in `sandbox` and asserts that exactly [`Inner::expect_passed`] tests passed and
/// none failed. Returns `false`, after printing a `SKIPPED` line, when this machine cannot make
/// the sandbox (no `unshare`/`prlimit`, or no permission).
pub fn run_inner(sandbox: Sandbox, inner: Inner<'_>) -> bool {
    let setup = format!("ip link set lo up && ip route add local {POD_NETWORK} dev lo");
    if let Sandbox::NetworkNamespace = sandbox {
        // The namespace set-up alone, as a permission check: `unshare` and `ip` must both work.
        match Command::new("unshare")
            .args(["-n", "sh", "-c", &setup])
            .output()
        {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                eprintln!(
                    "SKIPPED {}: cannot set up a network namespace (`unshare -n`, `ip`): {}",
                    inner.what,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                return false;
            }
            Err(err) => {
                eprintln!("SKIPPED {}: cannot run unshare: {err}", inner.what);
                return false;
            }
        }
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let threads = inner.threads.to_string();
    let mut args = vec![inner.filter];
    if inner.exact {
        args.push("--exact");
    }
    args.extend(["--ignored", "--nocapture", "--test-threads", &threads]);
    let mut command = match sandbox {
        Sandbox::NetworkNamespace => {
            let mut c = Command::new("unshare");
            c.args(["-n", "sh", "-c", &format!("{setup} && exec \"$0\" \"$@\"")])
                .arg(&exe)
                .args(&args);
            c
        }
        Sandbox::DescriptorLimit(n) => {
            let mut c = Command::new("prlimit");
            c.arg(format!("--nofile={n}:{n}"))
                .arg("--")
                .arg(&exe)
                .args(&args);
            c
        }
    };
    let out: Output = match command.env(inner.env, "1").output() {
        Ok(out) => out,
        Err(err) => {
            eprintln!("SKIPPED {}: cannot start the sandbox: {err}", inner.what);
            return false;
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The inner tests' figures; libtest shows them with `--nocapture` or on failure.
    eprintln!("{}: inner output:\n{stderr}", inner.what);
    assert!(
        out.status.success(),
        "inner tests failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains(&format!(" {} passed", inner.expect_passed)),
        "not every inner test ran (want {} passed):\n{stdout}\n{stderr}",
        inner.expect_passed
    );
    // The figures the inner tests print (shown with --nocapture, as the outer test's own).
    eprint!("{stderr}");
    true
}

/// Whether this is the re-run inside the sandbox that sets `env`; says so when it is not, since
/// the inner test then does nothing.
pub fn in_sandbox(env: &str) -> bool {
    let inside = std::env::var_os(env).is_some();
    if !inside {
        eprintln!("not inside the test's sandbox ({env} unset); nothing to do");
    }
    inside
}
