//! `/metrics` stays bounded whatever a tenant's Service looks like: a many-port Service adds
//! at most `metrics.maxPortSeries` per-port series, its other ports summed into one
//! `port="_other"` series.

use serde_json::json;

use super::{World, portmapping, service};
use crate::rbac::http_get;

const CAP: usize = 4;
const PORTS: u16 = 40;

#[test]
fn a_many_port_service_adds_the_capped_number_of_series() {
    let values = json!({"metrics": {"maxPortSeries": CAP}});
    let Some(world) = World::start("tenant-metrics", &values, &[]) else {
        return;
    };
    let a = world.tenant("a");
    a.create(&service("wide", 9000..9000 + PORTS));
    a.create(&portmapping("wide", "example.com/group", json!({})));
    a.ready_pod(
        "wide-1",
        json!({"example.com/group": "wide"}),
        json!({}),
        "10.244.3.1",
    );
    world.wait_for("every port published", || {
        a.published("wide").len() == usize::from(PORTS)
    });
    let addr = world.http_addr();
    let namespace = format!("namespace=\"{}\"", a.namespace);
    let series = || {
        let (status, body) = http_get(&addr, "/metrics");
        assert_eq!(status, 200, "{body}");
        body.lines()
            .filter(|l| l.starts_with("portmapper_endpoints_published{") && l.contains(&namespace))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    // Each of the 36 ports past the cap publishes the one pod: the _other series sums them.
    let summed = format!(" {}", usize::from(PORTS) - CAP);
    world.wait_for("the published gauges set", || {
        series()
            .iter()
            .any(|l| l.contains("port=\"_other\"") && l.ends_with(&summed))
    });
    let lines = series();
    assert_eq!(lines.len(), CAP + 1, "{lines:#?}");
    for port in 9000..9000 + CAP {
        assert!(
            lines
                .iter()
                .any(|l| l.contains(&format!("port=\"p{port}\""))),
            "p{port} has its own series: {lines:#?}"
        );
    }
}
