//! A tenant's fan-out is bounded before the work exists: admission refuses what one object
//! can say, the operator's budgets what it cannot see (Service ports, pool pods), and the
//! operator's memory stays under the chart's limit. The victim in another namespace keeps its
//! endpoints throughout and is served as before.
//!
//! The attacker's network checks name a container port its pod does not declare: every probe
//! target exists (the fan-out is real) and fails before it dials, so no packet leaves loopback.

use serde_json::{Value, json};

use super::{World, portmapping, service, victim, victim_unharmed};

/// `n` × `anyOf` of `m` tcpSocket checks on a port the pod does not declare.
fn fan_out(n: usize, m: usize) -> Value {
    let leaf = json!({"tcpSocket": {"port": "undeclared"}});
    let any_of = json!({"anyOf": vec![leaf; m]});
    Value::Array(vec![any_of; n])
}

/// Port numbers from 8000, `n` of them.
fn ports(n: u16) -> impl Iterator<Item = u16> {
    8000..8000 + n
}

#[test]
fn a_probe_fan_out_is_refused_at_admission_or_stalled_within_the_charts_memory() {
    let Some(world) = World::start("tenant-fanout", &json!({}), &[]) else {
        return;
    };
    let limit = world.memory_limit.expect("the chart sets a memory limit");
    let (b, watch) = victim(&world);
    let idle = world.operator_memory("VmHWM");
    eprintln!("operator VmHWM before the attack: {} MiB", idle >> 20);
    let a = world.tenant("a");

    // The fan-out of the threat analysis (16 × anyOf of 16 per port) is refused at admission.
    let refused = a.try_create(&portmapping(
        "big",
        "example.com/group",
        json!({"defaultChecks": fan_out(16, 16)}),
    ));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success(),
        "admission let 256 network checks per port through"
    );
    assert!(stderr.contains("at most 16 network checks"), "{stderr}");

    // Within admission: 16 per port over 64 Service ports, one pod with a 250 kB annotation:
    // 1,024 targets, inside the default budget. Port p8000 publishes on podReady alone.
    let annotation = json!({"example.com/blob": "a".repeat(250_000)});
    a.create(&service("big", ports(64)));
    a.create(&portmapping(
        "big",
        "example.com/group",
        json!({"defaultChecks": fan_out(1, 16),
               "ports": [{"name": "p8000", "checks": [{"podReady": {}}]}]}),
    ));
    a.ready_pod(
        "big-1",
        json!({"example.com/group": "big"}),
        annotation,
        "10.244.2.1",
    );
    world.wait_for("the attacker's port p8000 published", || {
        a.published("big")
            .get("p8000")
            .is_some_and(|a| a.len() == 1)
    });
    // Every target has been created and probed (each fails before it dials).
    world.wait_for("the attacker's checks probed", || {
        let pm: Value = serde_json::from_str(&a.ok(&["get", "pm", "big", "-o", "json"])).unwrap();
        let reasons: Vec<String> = pm["status"]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["name"] != "p8000")
            .map(|p| {
                p["excluded"][0]["reason"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect();
        reasons.len() == 63 && reasons.iter().all(|r| r.contains("undeclared"))
    });
    let within = world.operator_memory("VmHWM");
    eprintln!(
        "operator VmHWM with 1,024 targets of a 250 kB pod: {} MiB",
        within >> 20
    );
    assert!(
        within < limit,
        "VmHWM {within} over the chart's limit {limit}"
    );

    // Beyond what admission can see: 299 more ports of 16 checks make 4,784 targets, over
    // the default budget of 4,096. Stalled, one Warning, and p8000 stays published.
    a.apply(&service("big", ports(300)));
    let (reason, message) = a.wait_condition("big", "Stalled", "True");
    assert_eq!(reason, "TooManyProbeTargets", "{message}");
    assert!(
        message.contains("4784") && message.contains("--max-probe-targets-per-portmapping"),
        "{message}"
    );
    let warnings = a.warnings("big");
    assert_eq!(
        warnings
            .iter()
            .filter(|w| w.starts_with("OverBudget"))
            .count(),
        1,
        "{warnings:?}"
    );
    assert_eq!(a.published("big").get("p8000").map(Vec::len), Some(1));
    victim_unharmed(&world, &b, &watch);
    let peak = world.operator_memory("VmHWM");
    eprintln!(
        "operator VmHWM after the over-budget PortMapping: {} MiB",
        peak >> 20
    );
    assert!(peak < limit, "VmHWM {peak} over the chart's limit {limit}");
}

#[test]
fn slice_amplification_is_refused_at_admission_or_stalled_before_any_write() {
    let Some(world) = World::start("tenant-slices", &json!({}), &[]) else {
        return;
    };
    let (b, watch) = victim(&world);
    let a = world.tenant("a");

    // One endpoint per slice under PerPort is refused at admission.
    let refused = a.try_create(&portmapping(
        "many",
        "example.com/group",
        json!({"sliceGrouping": "PerPort", "maxEndpointsPerSlice": 1}),
    ));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success(),
        "admission let maxEndpointsPerSlice 1 through"
    );
    assert!(
        stderr.contains("at least 10 with sliceGrouping PerPort"),
        "{stderr}"
    );

    // 2,500 Service ports under PerPort need 2,500 slices, over the default budget of 2,000.
    a.create(&service("many", ports(2_500)));
    a.create(&portmapping(
        "many",
        "example.com/group",
        json!({"sliceGrouping": "PerPort", "maxEndpointsPerSlice": 10}),
    ));
    a.ready_pod(
        "many-1",
        json!({"example.com/group": "many"}),
        json!({}),
        "10.244.3.1",
    );
    let (reason, message) = a.wait_condition("many", "Stalled", "True");
    assert_eq!(reason, "TooManySlices", "{message}");
    assert!(message.contains("2500") && message.contains("--max-slices-per-portmapping"));
    assert!(
        a.published("many").is_empty(),
        "slices were written over the budget"
    );
    victim_unharmed(&world, &b, &watch);
}

#[test]
fn a_namespace_over_its_probe_budget_stalls_its_newest_portmapping_only() {
    let flags = ["--max-probe-targets-per-namespace=40"];
    let Some(world) = World::start("tenant-nsbudget", &json!({}), &flags) else {
        return;
    };
    let checks = json!({"defaultChecks": fan_out(1, 16)});
    let a = world.tenant("a");
    a.ready_pod(
        "one-1",
        json!({"example.com/group": "one"}),
        json!({}),
        "10.244.4.1",
    );
    a.ready_pod(
        "two-1",
        json!({"example.com/group": "two"}),
        json!({}),
        "10.244.4.2",
    );
    // 16 checks × 2 ports × 1 pod = 32 targets: within the namespace's 40.
    a.create(&service("one", ports(2)));
    a.create(&portmapping("one", "example.com/group", checks.clone()));
    world.wait_for("the first PortMapping planned", || {
        a.condition("one", "Stalled").0 == "False"
    });
    // 16 more would make 48: the second one is stalled, the first keeps probing.
    a.create(&service("two", ports(1)));
    a.create(&portmapping("two", "example.com/group", checks.clone()));
    let (reason, message) = a.wait_condition("two", "Stalled", "True");
    assert_eq!(reason, "TooManyProbeTargets", "{message}");
    assert!(
        message.contains("48") && message.contains("--max-probe-targets-per-namespace"),
        "{message}"
    );
    assert_eq!(a.condition("one", "Stalled").0, "False");
    // Another namespace has a budget of its own.
    let b = world.tenant("b");
    b.ready_pod(
        "one-1",
        json!({"example.com/group": "one"}),
        json!({}),
        "10.244.5.1",
    );
    b.create(&service("one", ports(2)));
    b.create(&portmapping("one", "example.com/group", checks));
    world.wait_for("the other namespace's PortMapping planned", || {
        b.condition("one", "Stalled").0 == "False"
    });
}
