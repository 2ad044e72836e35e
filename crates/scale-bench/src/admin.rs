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
