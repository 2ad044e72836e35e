//! Fair probing across PortMappings and namespaces: one PortMapping whose probes hang holds its
//! own share of permits only, a quiet PortMapping's new target is probed at once, and freed
//! permits go round-robin. Paused clock and a scripted executor, as in `prober.rs`; every
//! assertion counts probes started, none measures time.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use portmapper_probe::{
    MappingKey, Membership, NoMetrics, Outcome, ProbeEvents, Prober, ProberConfig, Target,
};

use crate::prober::{Scripted, Step, advance, pod_target, settle};

fn prober(exec: &Arc<Scripted>, config: ProberConfig) -> (Prober, ProbeEvents) {
    Prober::new(config, exec.clone(), Arc::new(NoMetrics)).unwrap()
}

/// `count` targets of `ns/name`, pods named `ns.name.i`, each following `step`.
fn targets(exec: &Scripted, ns: &str, name: &str, count: usize, step: Step) -> Vec<Target> {
    (0..count)
        .map(|i| {
            let pod = format!("{ns}.{name}.{i}");
            exec.script(&pod, &[step]);
            let mut t = pod_target(&pod, Membership::Excluded, 1, 3);
            // The longest timeout a check may ask for: a hanging probe holds its permit 60 s.
            t.settings.timeout_seconds = 60;
            t.settings.period_seconds = 60;
            t
        })
        .collect()
}

/// Probes started for pods whose name starts with `prefix`.
fn started(exec: &Scripted, prefix: &str) -> usize {
    let calls = exec.calls.lock().unwrap();
    calls
        .iter()
        .filter(|(pod, _)| pod.starts_with(prefix))
        .count()
}

/// The pods probed, in the order their probes started.
fn order(exec: &Scripted) -> Vec<String> {
    let calls = exec.calls.lock().unwrap();
    calls.iter().map(|(pod, _)| pod.clone()).collect()
}

fn config(concurrency: usize) -> ProberConfig {
    ProberConfig {
        concurrency,
        start_jitter: false,
        ..ProberConfig::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_quiet_portmappings_new_target_is_probed_while_another_namespace_hangs() {
    let exec = Arc::new(Scripted::default());
    // Defaults of 8 permits: 4 per namespace, 2 per PortMapping.
    let (prober, _events) = prober(&exec, config(8));
    // The hostile tenant: three PortMappings, 200 targets each, every probe hanging.
    for name in ["m1", "m2", "m3"] {
        let hanging = targets(&exec, "tenant-a", name, 200, Step::Hang);
        prober.set_targets(&MappingKey::new("tenant-a", name), hanging);
    }
    settle().await;
    let in_flight = exec.in_flight.load(Ordering::SeqCst);
    assert_eq!(in_flight, 4, "tenant-a holds its namespace's share only");
    for name in ["m1", "m2", "m3"] {
        let m = started(&exec, &format!("tenant-a.{name}."));
        assert!(m <= 2, "{name}: {m} probes in flight, over its cap of 2");
    }

    // The victim's new pod: probed at once, while tenant-a still has 596 targets waiting.
    let victim = targets(&exec, "tenant-b", "web", 1, Step::Answer(Outcome::Include));
    let web = MappingKey::new("tenant-b", "web");
    prober.set_targets(&web, victim.clone());
    settle().await;
    assert_eq!(started(&exec, "tenant-b."), 1);
    assert_eq!(
        prober.result(&web, &victim[0].key()).unwrap().membership,
        Membership::Included
    );
    assert_eq!(
        started(&exec, "tenant-a."),
        4,
        "tenant-a gained nothing meanwhile"
    );
}

#[tokio::test(start_paused = true)]
async fn a_portmapping_whose_probes_hang_never_exceeds_its_cap_and_cancellation_frees_it() {
    let exec = Arc::new(Scripted::default());
    let (prober, _events) = prober(
        &exec,
        ProberConfig {
            concurrency_per_mapping: Some(3),
            ..config(16)
        },
    );
    let a = MappingKey::new("tenant-a", "hangs");
    let hanging = targets(&exec, "tenant-a", "hangs", 50, Step::Hang);
    prober.set_targets(&a, hanging.clone());
    settle().await;
    assert_eq!(exec.in_flight.load(Ordering::SeqCst), 3);

    // A second PortMapping of the same namespace gets its own share beside it.
    let b = MappingKey::new("tenant-a", "quiet");
    prober.set_targets(&b, targets(&exec, "tenant-a", "quiet", 1, Step::Hang));
    settle().await;
    assert_eq!(started(&exec, "tenant-a.quiet."), 1);
    assert_eq!(started(&exec, "tenant-a.hangs."), 3);

    // Dropping the three in-flight targets cancels their probes, and their permits go to the
    // PortMapping's next waiters, still three at a time.
    let probed: Vec<String> = order(&exec)
        .into_iter()
        .filter(|p| p.starts_with("tenant-a.hangs."))
        .collect();
    let kept: Vec<Target> = hanging
        .into_iter()
        .filter(|t| !probed.contains(&t.pod.name))
        .collect();
    prober.set_targets(&a, kept);
    settle().await;
    assert_eq!(started(&exec, "tenant-a.hangs."), 6);
    assert_eq!(exec.in_flight.load(Ordering::SeqCst), 4);
    assert_eq!(exec.max_in_flight.load(Ordering::SeqCst), 4);

    // Forgetting the PortMapping frees everything it held.
    prober.remove_mapping(&a);
    settle().await;
    assert_eq!(exec.in_flight.load(Ordering::SeqCst), 1);
    let next = targets(&exec, "tenant-a", "next", 3, Step::Hang);
    prober.set_targets(&MappingKey::new("tenant-a", "next"), next);
    settle().await;
    assert_eq!(started(&exec, "tenant-a.next."), 3);
}

#[tokio::test(start_paused = true)]
async fn freed_permits_go_round_robin_between_namespaces_then_portmappings() {
    let exec = Arc::new(Scripted::default());
    let (prober, _events) = prober(
        &exec,
        ProberConfig {
            concurrency_per_namespace: Some(1),
            concurrency_per_mapping: Some(1),
            ..config(1)
        },
    );
    let slow = Step::Slow(Duration::from_secs(1));
    // Listed busiest first, so a FIFO would serve x's six probes before any of y's.
    for (ns, name) in [("x", "m1"), ("x", "m2"), ("y", "m1")] {
        let list = targets(&exec, ns, name, 3, slow);
        prober.set_targets(&MappingKey::new(ns, name), list);
    }
    settle().await;
    advance(Duration::from_secs(9)).await;
    let served: Vec<String> = order(&exec)
        .iter()
        .map(|pod| pod.rsplit_once('.').unwrap().0.to_string())
        .collect();
    assert_eq!(
        served,
        [
            "x.m1", "y.m1", "x.m2", "y.m1", "x.m1", "y.m1", "x.m2", "x.m1", "x.m2"
        ],
        "namespaces alternate, and so do x's PortMappings"
    );
}
