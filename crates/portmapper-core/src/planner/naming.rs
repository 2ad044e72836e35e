//! Deterministic slice names: `<svc>.<port>[.v6][.p<target>][.<chunk>]`.
//!
//! Neither Service names nor Service port names (both DNS-1123 labels; `1st-api.http` is a
//! valid slice name) can contain `.`, while slice names (DNS subdomains) can, so these names never
//! collide within or across Services. `<port>` is the port name, or its number for an unnamed single port; a headless
//! Service without ports uses `<svc>` alone. `.p<target>` appears for named targetPorts (pods
//! may resolve them to different numbers); chunk 1 has no suffix, chunk k ≥ 2 ends in `.<k>`.

use kube_validation::IpFamily;

/// The name of chunk 1 of a group (the base all its chunks share).
pub fn group_base_name(
    service: &str,
    port_key: Option<&str>,
    family: IpFamily,
    named_target: Option<i32>,
) -> String {
    let mut name = service.to_owned();
    if let Some(port) = port_key {
        name.push('.');
        name.push_str(port);
    }
    if family == IpFamily::V6 {
        name.push_str(".v6");
    }
    if let Some(target) = named_target {
        name.push_str(".p");
        name.push_str(&target.to_string());
    }
    name
}

/// The name of chunk `chunk` (1-based) of a group.
pub fn chunk_name(base: &str, chunk: u32) -> String {
    if chunk <= 1 {
        base.to_owned()
    } else {
        format!("{base}.{chunk}")
    }
}

/// Splits a slice name into (base, chunk) when it is chunk 1 of `is_base`, or chunk k ≥ 2 of it.
pub fn parse_chunk(name: &str, is_base: impl Fn(&str) -> bool) -> Option<(&str, u32)> {
    if is_base(name) {
        return Some((name, 1));
    }
    let (base, suffix) = name.rsplit_once('.')?;
    if suffix.starts_with('0') || !suffix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let chunk: u32 = suffix.parse().ok()?;
    (chunk >= 2 && is_base(base)).then_some((base, chunk))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_dotted_grammar() {
        assert_eq!(
            group_base_name("web", Some("http"), IpFamily::V4, None),
            "web.http"
        );
        assert_eq!(
            group_base_name("web", Some("http"), IpFamily::V6, Some(8080)),
            "web.http.v6.p8080"
        );
        assert_eq!(group_base_name("web", None, IpFamily::V6, None), "web.v6");
        assert_eq!(chunk_name("web.http", 1), "web.http");
        assert_eq!(chunk_name("web.http", 3), "web.http.3");
    }

    #[test]
    fn chunk_parsing_prefers_exact_base_for_digit_port_names() {
        // Port named "2" next to a zero-port base is impossible in one Service, but an
        // all-digit port name must still parse as chunk 1 of its own base.
        let bases = ["web.2", "web.http"];
        let is_base = |b: &str| bases.contains(&b);
        assert_eq!(parse_chunk("web.2", is_base), Some(("web.2", 1)));
        assert_eq!(parse_chunk("web.2.2", is_base), Some(("web.2", 2)));
        assert_eq!(parse_chunk("web.http.10", is_base), Some(("web.http", 10)));
        assert_eq!(
            parse_chunk("web.http.1", is_base),
            None,
            "chunk 1 has no suffix"
        );
        assert_eq!(parse_chunk("web.http.02", is_base), None);
        assert_eq!(parse_chunk("web.https", is_base), None);
    }

    #[test]
    fn names_cannot_collide_across_services() {
        // The `-` grammar collides here (`my` + `service-http` vs `my-service` + `http`).
        let a = group_base_name("my", Some("service-http"), IpFamily::V4, None);
        let b = group_base_name("my-service", Some("http"), IpFamily::V4, None);
        assert_ne!(a, b);
    }

    #[test]
    fn longest_name_is_a_valid_subdomain() {
        let svc = format!("a{}", "b".repeat(62));
        let port = "c".repeat(63);
        let name = chunk_name(
            &group_base_name(&svc, Some(&port), IpFamily::V6, Some(65535)),
            1000,
        );
        assert!(
            kube_validation::names::is_dns1123_subdomain(&name).is_empty(),
            "{name}"
        );
    }
}
