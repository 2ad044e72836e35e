//! Writes counted by the API server itself (`apiserver_request_total` on its `/metrics`), per
//! resource: exact, no-op writes included (a watch sees only writes that change something).
//! The counter names no client, so the bench reads it only while one controller runs and
//! counts the bench's own writes (pods) apart. The same page gives kube-apiserver's Go
//! runtime counters: bytes allocated (steadier than its CPU over a short window, which moves
//! with its garbage collector) and garbage collections.

use std::collections::BTreeMap;

use kube::Client;

use crate::Error;

/// The verbs that write (the API server's names; `APPLY` is a server-side apply PATCH).
const WRITE_VERBS: [&str; 6] = [
    "POST",
    "PUT",
    "PATCH",
    "APPLY",
    "DELETE",
    "DELETECOLLECTION",
];

/// Write requests per resource so far, or between two scrapes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiWrites(pub BTreeMap<String, u64>);

impl ApiWrites {
    /// Writes to `resource` (plural, any group).
    pub fn get(&self, resource: &str) -> u64 {
        self.0.get(resource).copied().unwrap_or(0)
    }

    /// EndpointSlice writes.
    pub fn slices(&self) -> u64 {
        self.get("endpointslices")
    }

    /// The other writes a controller under test makes: the operator's PortMapping status and
    /// either's Events (the API server's own lease renewals and the bench's pods left out).
    pub fn other(&self) -> u64 {
        self.get("portmappings") + self.get("events")
    }

    /// What was written between `earlier` and `self`.
    pub fn since(&self, earlier: &ApiWrites) -> ApiWrites {
        ApiWrites(
            self.0
                .iter()
                .map(|(r, n)| (r.clone(), n.saturating_sub(earlier.get(r))))
                .filter(|(_, n)| *n > 0)
                .collect(),
        )
    }

    /// The sum of two windows.
    pub fn plus(&self, other: &ApiWrites) -> ApiWrites {
        let mut sum = self.0.clone();
        for (r, n) in &other.0 {
            *sum.entry(r.clone()).or_insert(0) += n;
        }
        ApiWrites(sum)
    }
}

/// kube-apiserver's Go runtime counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GoRuntime {
    /// Bytes allocated on its heap (`go_memstats_alloc_bytes_total`).
    pub allocated: u64,
    /// Garbage collections (`go_gc_duration_seconds_count`).
    pub collections: u64,
}

impl GoRuntime {
    /// What was counted between `earlier` and `self`.
    pub fn since(self, earlier: GoRuntime) -> GoRuntime {
        GoRuntime {
            allocated: self.allocated.saturating_sub(earlier.allocated),
            collections: self.collections.saturating_sub(earlier.collections),
        }
    }

    /// The sum of two windows.
    pub fn plus(self, other: GoRuntime) -> GoRuntime {
        GoRuntime {
            allocated: self.allocated + other.allocated,
            collections: self.collections + other.collections,
        }
    }
}

/// One scrape of `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metrics {
    /// Write requests per resource.
    pub writes: ApiWrites,
    /// The Go runtime's counters.
    pub go: GoRuntime,
}

/// Scrapes the API server's write counters and Go runtime counters.
pub async fn scrape(client: &Client) -> Result<Metrics, Error> {
    let text = client.request_text(admin_get("/metrics")?).await?;
    Ok(Metrics {
        writes: parse(&text),
        go: parse_go(&text),
    })
}

/// Has kube-apiserver collect its garbage now (its profiling handler's `gc=1`, on by default):
/// a measured window then does not pay for the garbage of the phase before it.
/// The handler collects before it answers; its body (a gzipped profile) is not read.
pub async fn collect_garbage(client: &Client) -> Result<(), Error> {
    let req = http::Request::get("/debug/pprof/heap?gc=1")
        .body(kube::client::Body::empty())
        .map_err(|e| Error::Admin(e.to_string()))?;
    let res = client.send(req).await?;
    if !res.status().is_success() {
        return Err(Error::Admin(format!(
            "kube-apiserver's /debug/pprof/heap?gc=1 answered {}",
            res.status()
        )));
    }
    Ok(())
}

/// Saves kube-apiserver's allocation profile so far (its heap profile, gzipped protobuf, whose
/// `alloc_space` counts every byte allocated) to `path`: two of them, one the `-base` of the
/// other in `go tool pprof`, say where a window's bytes were allocated. The profile is brought
/// up to date by a collection first (`gc=1`): Go records allocations at collections.
pub async fn save_allocations(client: &Client, path: &std::path::Path) -> Result<(), Error> {
    use futures::AsyncReadExt;
    let mut body = client
        .request_stream(admin_get("/debug/pprof/heap?gc=1")?)
        .await?;
    let mut bytes = Vec::new();
    body.read_to_end(&mut bytes).await?;
    std::fs::write(path, bytes)?;
    Ok(())
}

fn admin_get(path: &str) -> Result<http::Request<Vec<u8>>, Error> {
    http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| Error::Admin(e.to_string()))
}

fn parse_go(text: &str) -> GoRuntime {
    let counter = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map_or(0, |v| v as u64)
    };
    GoRuntime {
        allocated: counter("go_memstats_alloc_bytes_total"),
        collections: counter("go_gc_duration_seconds_count"),
    }
}

fn parse(text: &str) -> ApiWrites {
    let mut m = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix("=\""))
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or_default()
        };
        if !WRITE_VERBS.contains(&label("verb")) {
            continue;
        }
        // A counter is an integer, written as a float by some encoders.
        let n = value.trim().parse::<f64>().unwrap_or(0.0) as u64;
        *m.entry(label("resource").to_owned()).or_insert(0) += n;
    }
    ApiWrites(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_write_verbs_per_resource() {
        let text = r#"# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="discovery.k8s.io",resource="endpointslices",scope="resource",subresource="",verb="APPLY",version="v1"} 7
apiserver_request_total{code="201",component="apiserver",dry_run="",group="discovery.k8s.io",resource="endpointslices",scope="resource",subresource="",verb="POST",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="discovery.k8s.io",resource="endpointslices",scope="namespace",subresource="",verb="LIST",version="v1"} 9
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 2
apiserver_request_total_other{verb="POST",resource="pods"} 100
"#;
        let w = parse(text);
        assert_eq!(w.slices(), 10);
        assert_eq!(w.get("pods"), 2);
        assert_eq!(w.other(), 0);
        let later = parse(&text.replace("} 7", "} 12"));
        assert_eq!(later.since(&w).slices(), 5);
        assert_eq!(later.since(&w).get("pods"), 0);
    }

    #[test]
    fn reads_the_go_runtime_counters() {
        let text = "# TYPE go_memstats_alloc_bytes_total counter
go_memstats_alloc_bytes_total 3.48103064e+08
go_memstats_alloc_bytes 1.2e+07
go_gc_duration_seconds{quantile=\"0\"} 1e-05
go_gc_duration_seconds_sum 0.02
go_gc_duration_seconds_count 14
";
        assert_eq!(
            parse_go(text),
            GoRuntime {
                allocated: 348_103_064,
                collections: 14
            }
        );
        assert_eq!(parse_go(""), GoRuntime::default());
    }
}
