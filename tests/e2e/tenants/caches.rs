//! What a tenant's objects cost the operator's caches (L2 of the threat analysis): the
//! operator caches every Service and PortMapping it may act on, so their annotations would be
//! the operator's memory, not the tenant's. It keeps only the annotations it reads.

use serde_json::{Value, json};

use super::{World, portmapping, service, victim, victim_unharmed};

/// Objects per tenant request: eight 250 kB annotations stay under the API server's 3 MiB
/// request limit.
const BATCH: usize = 8;
const OBJECTS: usize = 48;
const BLOB: usize = 250_000;

fn list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}

fn annotated(mut object: Value, blob: &str) -> Value {
    object["metadata"]["annotations"] = json!({"example.com/blob": blob});
    object
}

#[test]
fn large_service_and_portmapping_annotations_are_not_kept_by_the_operator() {
    let Some(world) = World::start("tenant-caches", &json!({}), &[]) else {
        return;
    };
    let (b, watch) = victim(&world);
    let idle = world.operator_memory("VmRSS");
    eprintln!("operator VmRSS before: {} MiB", idle >> 20);
    let a = world.tenant("a");
    let blob = "a".repeat(BLOB);
    let names: Vec<String> = (0..OBJECTS).map(|i| format!("big-{i}")).collect();
    for chunk in names.chunks(BATCH) {
        let services = chunk.iter().map(|n| annotated(service(n, [8080]), &blob));
        a.create(&list(services.collect()));
        let portmappings = chunk
            .iter()
            .map(|n| annotated(portmapping(n, "example.com/group", json!({})), &blob));
        a.create(&list(portmappings.collect()));
    }
    // Each PortMapping has published its (empty) slice: the operator has read its Service.
    world.wait_for("every attacker's Service published", || {
        let out = world.admin.ok(&[
            "get",
            "endpointslices",
            "-n",
            &a.namespace,
            "-l",
            "endpointslice.kubernetes.io/managed-by=portmapper.dev",
            "-o",
            "name",
        ]);
        out.lines().count() == OBJECTS
    });
    victim_unharmed(&world, &b, &watch);
    // 2 × 48 × 250 kB = 24 MB of annotations were read; kept, they would stay in the RSS.
    // What was only read is handed back by jemalloc's background purge within seconds.
    let kept = 2 * OBJECTS * BLOB;
    world.wait_for("the operator's RSS back near its idle figure", || {
        let rss = world.operator_memory("VmRSS");
        rss < idle + (kept as u64) / 2
    });
    eprintln!(
        "operator VmRSS after {} MB of tenant annotations: {} MiB",
        kept / 1_000_000,
        world.operator_memory("VmRSS") >> 20
    );
}
