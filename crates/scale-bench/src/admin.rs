//! The emulator's admin API (`/__emu/`, not logged itself): the request log, counted by client
//! the way the emulator counts (field manager, else User-Agent prefix).

use std::collections::BTreeMap;

use kube::Client;
use serde_json::Value;

use crate::Error;

/// The operator's field manager.
pub const OPERATOR: &str = "portmapper.dev";

/// One logged write.
#[derive(Debug, Clone)]
pub struct Write {
    /// Client name (field manager, else User-Agent prefix).
    pub client: String,
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
    let text = call(client, "GET", "/__emu/requests").await?;
    let v: Value = serde_json::from_str(&text)?;
    let s = |r: &Value, k: &str| r[k].as_str().unwrap_or_default().to_owned();
    let entries = v["requests"]
        .as_array()
        .ok_or_else(|| Error::Admin("no `requests` array in /__emu/requests".into()))?;
    Ok(Writes(
        entries
            .iter()
            .filter(|r| {
                matches!(
                    r["verb"].as_str(),
                    Some("create" | "update" | "patch" | "delete" | "deletecollection")
                )
            })
            .map(|r| {
                let manager = s(r, "field_manager");
                let client = if manager.is_empty() {
                    let ua = s(r, "user_agent");
                    match ua.split('/').next() {
                        Some(p) if !p.is_empty() => p.to_owned(),
                        _ => "unknown".to_owned(),
                    }
                } else {
                    manager
                };
                Write {
                    client,
                    verb: s(r, "verb"),
                    resource: s(r, "resource"),
                    subresource: s(r, "subresource"),
                }
            })
            .collect(),
    ))
}
