//! The emulator's admin API (`/__emu/`, not logged itself): the request log, counted by client
//! the way the emulator counts (field manager, else User-Agent prefix).

use std::collections::BTreeMap;

use kube::Client;
use serde_json::Value;

use crate::Error;

/// The operator's field manager.
pub const OPERATOR: &str = "portmapper.dev";

/// One logged request (a write, unless read with [`requests`]).
#[derive(Debug, Clone)]
pub struct Write {
    /// Client name (field manager, else User-Agent prefix).
    pub client: String,
    /// User-Agent prefix (the product before the `/`).
    pub agent: String,
    /// Verb.
    pub verb: String,
    /// Resource (plural).
    pub resource: String,
    /// Subresource.
    pub subresource: String,
    /// When it reached the emulator, in seconds since the emulator started.
    pub at: f64,
}

/// Writes in the request log since it was last cleared.
#[derive(Debug, Clone, Default)]
pub struct Writes(pub Vec<Write>);

impl Writes {
    /// Writes by `client` to `resource` (any resource when `None`).
    pub fn count(&self, client: &str, resource: Option<&str>) -> usize {
        self.0
            .iter()
            .filter(|w| w.client == client && resource.is_none_or(|r| w.resource == r))
            .count()
    }

    /// Writes per client.
    pub fn by_client(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for w in &self.0 {
            *m.entry(w.client.clone()).or_insert(0) += 1;
        }
        m
    }
}

async fn call(client: &Client, method: &str, path: &str) -> Result<String, Error> {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .body(Vec::new())
        .map_err(|e| Error::Admin(e.to_string()))?;
    Ok(client.request_text(req).await?)
}

/// Empties the request log.
pub async fn clear(client: &Client) -> Result<(), Error> {
    call(client, "DELETE", "/__emu/requests").await.map(drop)
}

/// The writes logged since the last clear.
pub async fn writes(client: &Client) -> Result<Writes, Error> {
    let all = requests(client).await?;
    Ok(Writes(
        all.into_iter()
            .filter(|r| {
                matches!(
                    r.verb.as_str(),
                    "create" | "update" | "patch" | "delete" | "deletecollection"
                )
            })
            .collect(),
    ))
}

/// User-Agent product of the operator's requests (`portmapper/<version>`).
pub const OPERATOR_AGENT: &str = "portmapper";

/// Every request logged since the last clear, reads and watches included, each with the
/// client named by User-Agent product (reads carry no field manager).
pub async fn requests(client: &Client) -> Result<Vec<Write>, Error> {
    let text = call(client, "GET", "/__emu/requests").await?;
    let v: Value = serde_json::from_str(&text)?;
    let s = |r: &Value, k: &str| r[k].as_str().unwrap_or_default().to_owned();
    let entries = v["requests"]
        .as_array()
        .ok_or_else(|| Error::Admin("no `requests` array in /__emu/requests".into()))?;
    Ok(entries
        .iter()
        .map(|r| {
            let manager = s(r, "field_manager");
            let ua = s(r, "user_agent");
            let agent = match ua.split('/').next() {
                Some(p) if !p.is_empty() => p.to_owned(),
                _ => "unknown".to_owned(),
            };
            Write {
                client: if manager.is_empty() {
                    agent.clone()
                } else {
                    manager
                },
                agent,
                verb: s(r, "verb"),
                resource: s(r, "resource"),
                subresource: s(r, "subresource"),
                at: r["since_start"].as_f64().unwrap_or_default(),
            }
        })
        .collect())
}

/// Requests of the User-Agent product `agent`, per "verb resource[/subresource]".
pub fn by_request(requests: &[Write], agent: &str) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for r in requests.iter().filter(|r| r.agent == agent) {
        let key = if r.subresource.is_empty() {
            format!("{} {}", r.verb, r.resource)
        } else {
            format!("{} {}/{}", r.verb, r.resource, r.subresource)
        };
        *m.entry(key).or_insert(0) += 1;
    }
    m
}

/// When the requests of one phase reached the API server, from the client's first request
/// (the emulator's clock): where a publication's time goes between reading and writing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timeline {
    /// The last pod list request (the first list's last page was asked for then).
    pub last_pod_list: f64,
    /// The first and the last EndpointSlice write.
    pub slice_writes: Option<(f64, f64)>,
}

/// The timeline of `agent`'s requests; `None` when it made none.
pub fn timeline(requests: &[Write], agent: &str) -> Option<Timeline> {
    let own: Vec<&Write> = requests.iter().filter(|r| r.agent == agent).collect();
    let start = own.iter().map(|r| r.at).reduce(f64::min)?;
    let at = |pick: &dyn Fn(&Write) -> bool| -> Vec<f64> {
        own.iter()
            .filter(|r| pick(r))
            .map(|r| r.at - start)
            .collect()
    };
    let lists = at(&|r| r.verb == "list" && r.resource == "pods");
    let writes = at(&|r| {
        r.resource == "endpointslices" && matches!(r.verb.as_str(), "create" | "update" | "patch")
    });
    let first = writes.iter().copied().reduce(f64::min);
    let last = writes.iter().copied().reduce(f64::max);
    Some(Timeline {
        last_pod_list: lists.into_iter().reduce(f64::max).unwrap_or_default(),
        slice_writes: first.zip(last),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(agent: &str, verb: &str, resource: &str, at: f64) -> Write {
        Write {
            client: agent.into(),
            agent: agent.into(),
            verb: verb.into(),
            resource: resource.into(),
            subresource: String::new(),
            at,
        }
    }

    #[test]
    fn the_timeline_counts_from_the_clients_first_request() {
        let log = [
            req("scale-bench", "list", "pods", 1.0),
            req("portmapper", "list", "portmappings", 2.0),
            req("portmapper", "list", "pods", 2.1),
            req("portmapper", "list", "pods", 2.3),
            req("portmapper", "patch", "endpointslices", 2.5),
            req("portmapper", "patch", "endpointslices", 2.9),
            req("portmapper", "patch", "portmappings", 3.0),
        ];
        let t = timeline(&log, "portmapper").expect("requests");
        assert!((t.last_pod_list - 0.3).abs() < 1e-9);
        let (first, last) = t.slice_writes.expect("writes");
        assert!((first - 0.5).abs() < 1e-9 && (last - 0.9).abs() < 1e-9);
        assert_eq!(timeline(&log, "kubectl"), None);
    }
}
