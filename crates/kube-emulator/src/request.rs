//! Request parsing: URL path grammar (docs/emulator-spec.md §1.2), query parameters (§1.3) and
//! content negotiation (§1.4).

use std::collections::HashMap;

use crate::error::ApiError;

/// Query parameters, form-urlencoded (`+` = space, `?&` tolerated); the last value of a key wins.
#[derive(Debug, Clone, Default)]
pub struct Query(pub HashMap<String, String>);

impl Query {
    /// Parse a raw query string.
    pub fn parse(raw: Option<&str>) -> Self {
        let mut m = HashMap::new();
        if let Some(raw) = raw {
            for (k, v) in form_urlencoded::parse(raw.as_bytes()) {
                if k.is_empty() {
                    continue;
                }
                m.insert(k.into_owned(), v.into_owned());
            }
        }
        Self(m)
    }

    /// Raw value of a non-empty parameter.
    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str).filter(|s| !s.is_empty())
    }

    /// Boolean parameter (`true/1/t/True/TRUE`).
    pub fn flag(&self, k: &str) -> bool {
        matches!(
            self.0.get(k).map(String::as_str),
            Some("true" | "1" | "t" | "True" | "TRUE" | "T")
        )
    }

    /// Integer parameter; unparsable → 400.
    pub fn int(&self, k: &str) -> Result<Option<i64>, ApiError> {
        match self.get(k) {
            None => Ok(None),
            Some(v) => v
                .parse::<i64>()
                .map(Some)
                .map_err(|_| ApiError::bad_request(format!("invalid value for {k}: {v:?}"))),
        }
    }
}

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/`
    Root,
    /// `/version`
    Version,
    /// `/healthz`, `/livez`, `/readyz`
    Health(String),
    /// `/openapi/v2`
    OpenApiV2,
    /// `/openapi/v3` and `/openapi/v3/<gv path>`
    OpenApiV3(String),
    /// `/api`
    CoreVersions,
    /// `/apis`
    Groups,
    /// `/apis/{group}`
    Group(String),
    /// `/api/v1` or `/apis/{g}/{v}`
    GroupVersion(String, String),
    /// A resource path.
    Resource(ResourcePath),
    /// `/__emu/...` admin API.
    Admin(String),
    /// Anything else (plain-text 404).
    Unknown,
}

/// A parsed resource URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePath {
    /// Group ("" = core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Namespace from the URL (`None` = cluster path).
    pub namespace: Option<String>,
    /// Plural resource.
    pub resource: String,
    /// Object name.
    pub name: Option<String>,
    /// Subresource (`status`, `finalize`, `scale`, ...).
    pub subresource: Option<String>,
    /// Legacy `/watch/` path prefix used.
    pub legacy_watch: bool,
}

fn decode(seg: &str) -> String {
    // Path segments are percent-encoded; names never contain '%' legitimately.
    let bytes = seg.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        // Hex digits are read from the bytes: slicing the str could cut a multi-byte char.
        if bytes[i] == b'%'
            && let Some(hex) = bytes.get(i + 1..i + 3)
            && let Ok(hex) = std::str::from_utf8(hex)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parse a request path into a route.
pub fn route(path: &str) -> Route {
    let trimmed = path.trim_end_matches('/');
    let segs: Vec<String> = trimmed
        .split('/')
        .filter(|s| !s.is_empty())
        .map(decode)
        .collect();
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    match s.as_slice() {
        [] => Route::Root,
        ["version"] => Route::Version,
        [h @ ("healthz" | "livez" | "readyz"), ..] => Route::Health((*h).to_string()),
        ["openapi", "v2"] => Route::OpenApiV2,
        ["openapi", "v3", rest @ ..] => Route::OpenApiV3(rest.join("/")),
        ["__emu", rest @ ..] => Route::Admin(rest.join("/")),
        ["api"] => Route::CoreVersions,
        ["api", v] => Route::GroupVersion(String::new(), (*v).to_string()),
        ["api", v, rest @ ..] => resource_path("", v, rest)
            .map(Route::Resource)
            .unwrap_or(Route::Unknown),
        ["apis"] => Route::Groups,
        ["apis", g] => Route::Group((*g).to_string()),
        ["apis", g, v] => Route::GroupVersion((*g).to_string(), (*v).to_string()),
        ["apis", g, v, rest @ ..] => resource_path(g, v, rest)
            .map(Route::Resource)
            .unwrap_or(Route::Unknown),
        _ => Route::Unknown,
    }
}

fn resource_path(group: &str, version: &str, rest: &[&str]) -> Option<ResourcePath> {
    let (legacy_watch, rest) = match rest {
        ["watch", r @ ..] => (true, r),
        r => (false, r),
    };
    let mk = |ns: Option<&str>, res: &str, name: Option<&str>, sub: Option<&str>| ResourcePath {
        group: group.to_string(),
        version: version.to_string(),
        namespace: ns.map(str::to_string),
        resource: res.to_string(),
        name: name.map(str::to_string),
        subresource: sub.map(str::to_string),
        legacy_watch,
    };
    Some(match rest {
        ["namespaces", ns] => mk(None, "namespaces", Some(ns), None),
        // The Namespace object's own subresources share the shape of a namespaced collection.
        ["namespaces", ns, sub @ ("status" | "finalize")] if group.is_empty() => {
            mk(None, "namespaces", Some(ns), Some(sub))
        }
        ["namespaces", ns, res] => mk(Some(ns), res, None, None),
        ["namespaces", ns, res, name] => mk(Some(ns), res, Some(name), None),
        ["namespaces", ns, res, name, sub] => mk(Some(ns), res, Some(name), Some(sub)),
        [res] => mk(None, res, None, None),
        [res, name] => mk(None, res, Some(name), None),
        [res, name, sub] => mk(None, res, Some(name), Some(sub)),
        _ => return None,
    })
}

/// What representation the client asked for (`Accept`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Plain JSON objects.
    Json,
    /// `PartialObjectMetadata(List)`.
    Metadata,
    /// `meta.k8s.io` Table.
    Table,
    /// Aggregated discovery `APIGroupDiscoveryList` (v2 or v2beta1).
    AggregatedDiscovery(&'static str),
}

/// Negotiate the response representation; `None` = nothing acceptable (406).
pub fn negotiate(accept: Option<&str>) -> Option<Output> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Some(Output::Json);
    };
    for entry in accept.split(',') {
        let mut parts = entry.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let mut params: HashMap<String, String> = HashMap::new();
        for p in parts {
            if let Some((k, v)) = p.split_once('=') {
                params.insert(k.trim().to_string(), v.trim().to_string());
            }
        }
        if media == "*/*" || media == "application/*" {
            return Some(Output::Json);
        }
        if media != "application/json" && media != "application/yaml" {
            continue;
        }
        match params.get("as").map(String::as_str) {
            None => return Some(Output::Json),
            Some("PartialObjectMetadata" | "PartialObjectMetadataList") => {
                if params.get("g").map(String::as_str) == Some("meta.k8s.io") {
                    return Some(Output::Metadata);
                }
            }
            Some("Table") => {
                if params.get("g").map(String::as_str) == Some("meta.k8s.io") {
                    return Some(Output::Table);
                }
            }
            Some("APIGroupDiscoveryList") => {
                if params.get("g").map(String::as_str) == Some("apidiscovery.k8s.io") {
                    match params.get("v").map(String::as_str) {
                        Some("v2") => return Some(Output::AggregatedDiscovery("v2")),
                        Some("v2beta1") => return Some(Output::AggregatedDiscovery("v2beta1")),
                        _ => {}
                    }
                }
            }
            Some(_) => {}
        }
    }
    None
}

/// The patch flavours (docs/emulator-spec.md §1.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// RFC 7386.
    Merge,
    /// RFC 6902.
    Json,
    /// Strategic merge patch (built-ins only).
    Strategic,
    /// Server-side apply.
    Apply,
}

impl PatchType {
    /// From a `Content-Type` header.
    pub fn from_content_type(ct: Option<&str>) -> Result<Self, ApiError> {
        let media = ct
            .unwrap_or_default()
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        match media.as_str() {
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/json-patch+json" => Ok(Self::Json),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            "application/apply-patch+yaml"
            | "application/apply-patch+json"
            | "application/apply-patch+cbor" => Ok(Self::Apply),
            _ => Err(ApiError::unsupported_media(
                "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json",
            )),
        }
    }

    /// Name used by fault rules and the request log.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Merge => "merge",
            Self::Json => "json",
            Self::Strategic => "strategic",
            Self::Apply => "apply",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_form_encoding_and_leading_ampersand() {
        let q = Query::parse(Some("&labelSelector=app+in+%28a%2Cb%29&watch=1&limit="));
        assert_eq!(q.get("labelSelector"), Some("app in (a,b)"));
        assert!(q.flag("watch"));
        assert_eq!(q.get("limit"), None);
    }

    /// Found by `fuzz_query_path_and_content_type`: a `%` followed by a multi-byte character
    /// panicked (the hex digits were sliced from the str); such a segment stays as written.
    #[test]
    fn percent_before_a_multibyte_character_is_kept() {
        assert_eq!(decode("%\u{aff}x"), "%\u{aff}x");
        assert_eq!(decode("a%2"), "a%2");
        assert_eq!(decode("a%41"), "aA");
        let Route::Resource(r) = route("/api/v1/namespaces/%\u{aff}/pods") else {
            panic!()
        };
        assert_eq!(r.namespace.as_deref(), Some("%\u{aff}"));
    }

    #[test]
    fn namespace_paths() {
        let Route::Resource(r) = route("/api/v1/namespaces/ns") else {
            panic!()
        };
        assert_eq!(
            (r.resource.as_str(), r.name.as_deref(), r.namespace),
            ("namespaces", Some("ns"), None)
        );
        let Route::Resource(r) =
            route("/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices/a/status")
        else {
            panic!()
        };
        assert_eq!(r.namespace.as_deref(), Some("ns"));
        assert_eq!(r.subresource.as_deref(), Some("status"));
        let Route::Resource(r) = route("/api/v1/namespaces/ns/status") else {
            panic!()
        };
        assert_eq!(r.subresource.as_deref(), Some("status"));
    }

    #[test]
    fn accept_metadata() {
        assert_eq!(
            negotiate(Some(
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
            )),
            Some(Output::Metadata)
        );
        assert_eq!(
            negotiate(Some(
                "application/vnd.kubernetes.protobuf, application/json"
            )),
            Some(Output::Json)
        );
        assert_eq!(negotiate(Some("application/vnd.kubernetes.protobuf")), None);
    }
}
