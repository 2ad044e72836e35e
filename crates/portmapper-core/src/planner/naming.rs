//! Deterministic slice names, one grammar per `spec.sliceGrouping`. Names never depend on
//! anything but the Service, the slice's ports, its family and its chunk number, so a plan finds
//! its live slices by name and a restarted operator finds the same ones.
//!
//! **PerPort**: `<svc>.<port>[.v6][.p<target>][.<chunk>]`. `<port>` is the port name, or its
//! number for an unnamed single port; a headless Service without ports uses `<svc>` alone.
//! `.p<target>` appears for named targetPorts (pods may resolve them to different numbers).
//! Neither Service names nor Service port names (both DNS-1123 labels; `1st-api.http` is a valid
//! slice name) can contain `.`, while slice names (DNS subdomains) can, so these names never
//! collide within or across Services. They are as long as the Service and port names make them
//! (up to 63 + 1 + 63 + suffixes, well within the 253 of a DNS subdomain).
//!
//! **PerPortSet**: `<readable>.<hash>[.v6][.<chunk>]`, at most 63 characters whatever the
//! Service name and the number of ports (the native controller's names are at most 63 too):
//! - `<readable>` is `<svc>.<ports>`: the Service name, then the port keys of the slice (name,
//!   or number of an unnamed port) joined by `-`, cut to [`READABLE_MAX`] characters in all
//!   (never ending in `-`). A slice without ports (a headless Service without ports) has no
//!   `<ports>`, nor has a Service name too long to leave room for one; a Service name longer
//!   than [`READABLE_MAX`] is cut to it ([`name_prefix`]).
//! - `<hash>` ([`HASH_LEN`] characters) is the FNV-1a 64 hash of the Service name and of each
//!   port's (name, resolved number, protocol), in Service port order: it tells apart port sets
//!   the readable part cannot (a cut, or ports resolving a named target differently), and
//!   Services whose cut names are equal. Its first character is a consonant other than `p` and
//!   `v`, so a port-set name is never a per-port name (whose third segment is `v6`, `p<n>` or
//!   `<n>`) and switching shapes never rewrites a slice in place. Two port sets of one Service
//!   hashing alike (about one chance in 2^46 per pair) are told apart by a salt: the later set
//!   in port order hashes again with salt 1, 2, …
//! - chunk 1 has no suffix, chunk k ≥ 2 ends in `.<k>` (as in PerPort).
//!
//! Longest: 38 + `.` + 10 + `.v6` = 52, plus `.<chunk>` (at most 11 for a `u32`) = 63.

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

/// Characters of `<svc>.<ports>` in a port-set name, at most.
pub const READABLE_MAX: usize = 38;
/// Characters of the hash segment of a port-set name.
pub const HASH_LEN: usize = 10;
/// First character of a hash: consonants, without `p` and `v`.
const HASH_FIRST: &[u8] = b"bcdfghjklmnqrstwxz";
/// Other characters of a hash: those consonants and the digits that do not read as letters
/// (as Kubernetes' random name suffixes avoid vowels and look-alike digits).
const HASH_REST: &[u8] = b"bcdfghjklmnqrstwxz2456789";

/// One port of a port-set slice, as its name and hash read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamedPort<'a> {
    /// The Service port's name (`""` when unnamed).
    pub name: &'a str,
    /// What names show for it: the name, else the Service port's number.
    pub key: &'a str,
    /// The resolved target number.
    pub number: i32,
    /// The protocol.
    pub protocol: &'a str,
}

/// The first segment of every port-set name of `service`: the Service name, cut to
/// [`READABLE_MAX`] characters (never ending in `-`). Per-port names start with the whole name.
pub fn name_prefix(service: &str) -> &str {
    cut_label(service, READABLE_MAX)
}

/// `s` cut to at most `max` bytes (names are ASCII), without a trailing `-`.
fn cut_label(s: &str, max: usize) -> &str {
    let end = s.len().min(max);
    s.get(..end).unwrap_or(s).trim_end_matches('-')
}

/// The name of chunk 1 of a port-set group: `ports` is the slice's port list (empty for a
/// portless slice), `salt` 0 unless an earlier set of the same Service hashed alike.
pub fn port_set_base_name(
    service: &str,
    ports: &[NamedPort<'_>],
    family: IpFamily,
    salt: u32,
) -> String {
    let prefix = name_prefix(service);
    let mut name = String::with_capacity(READABLE_MAX + HASH_LEN + 4);
    name.push_str(prefix);
    let room = READABLE_MAX.saturating_sub(prefix.len() + 1);
    if room > 0 && !ports.is_empty() {
        let joined = ports.iter().map(|p| p.key).collect::<Vec<_>>().join("-");
        let readable = cut_label(&joined, room);
        if !readable.is_empty() {
            name.push('.');
            name.push_str(readable);
        }
    }
    name.push('.');
    name.push_str(&port_set_hash(service, ports, salt));
    if family == IpFamily::V6 {
        name.push_str(".v6");
    }
    name
}

/// The hash segment of a port-set name (see the module docs).
fn port_set_hash(service: &str, ports: &[NamedPort<'_>], salt: u32) -> String {
    let mut h = Fnv1a::new();
    h.write(service.as_bytes());
    for p in ports {
        h.write(&[0]);
        h.write(p.name.as_bytes());
        h.write(&[0]);
        h.write(p.number.to_string().as_bytes());
        h.write(&[0]);
        h.write(p.protocol.as_bytes());
    }
    if salt > 0 {
        h.write(&[1]);
        h.write(salt.to_string().as_bytes());
    }
    let mut v = h.0;
    let mut out = String::with_capacity(HASH_LEN);
    let mut take = |alphabet: &[u8]| {
        let n = alphabet.len() as u64;
        // `v % n` is below the alphabet's length, itself below 256.
        let i = usize::try_from(v % n).unwrap_or(0);
        v /= n;
        out.push(char::from(alphabet[i]));
    };
    take(HASH_FIRST);
    for _ in 1..HASH_LEN {
        take(HASH_REST);
    }
    out
}

/// FNV-1a, 64 bits: specified, stable across platforms and releases (names must not change
/// when the operator is rebuilt), and enough for names that are also told apart by salt.
struct Fnv1a(u64);

impl Fnv1a {
    fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
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

    fn port<'a>(name: &'a str, number: i32) -> NamedPort<'a> {
        NamedPort {
            name,
            key: name,
            number,
            protocol: "TCP",
        }
    }

    #[test]
    fn port_set_names_read_as_service_ports_and_hash() {
        let ports = [port("http", 8080), port("https", 8443)];
        let v4 = port_set_base_name("web", &ports, IpFamily::V4, 0);
        let v6 = port_set_base_name("web", &ports, IpFamily::V6, 0);
        let (readable, hash) = v4.rsplit_once('.').unwrap();
        assert_eq!(readable, "web.http-https");
        assert_eq!(hash.len(), HASH_LEN);
        assert_eq!(v6, format!("{v4}.v6"));
        // Deterministic, and pinned: a change of the scheme renames every slice of every
        // cluster on upgrade (live, but a rewrite of everything), so it must be deliberate.
        assert_eq!(v4, port_set_base_name("web", &ports, IpFamily::V4, 0));
        // Computed independently (FNV-1a 64 of "web", then "\0http\08080\0TCP" and
        // "\0https\08443\0TCP", spelt in the two alphabets).
        assert_eq!(hash, "w6l6m2kms9");
    }

    #[test]
    fn port_set_names_tell_apart_numbers_protocols_services_and_salts() {
        let base = |svc: &str, ports: &[NamedPort<'_>], salt| {
            port_set_base_name(svc, ports, IpFamily::V4, salt)
        };
        let a = base("web", &[port("grpc", 9000)], 0);
        let udp = NamedPort {
            protocol: "UDP",
            ..port("grpc", 9000)
        };
        let names = [
            a.clone(),
            base("web", &[port("grpc", 9001)], 0),
            base("web", &[udp], 0),
            base("web", &[port("grpc", 9000)], 1),
            base("web2", &[port("grpc", 9000)], 0),
            base("web", &[port("grpc", 9000), port("http", 80)], 0),
        ];
        let distinct: std::collections::BTreeSet<&String> = names.iter().collect();
        assert_eq!(distinct.len(), names.len(), "{names:?}");
    }

    #[test]
    fn port_set_names_fit_63_characters_whatever_the_service_and_ports() {
        let many: Vec<String> = (0..100)
            .map(|i| format!("port-{i}-{}", "x".repeat(50)))
            .collect();
        let ports: Vec<NamedPort<'_>> = many.iter().map(|n| port(n, 65535)).collect();
        for svc in [
            "a".to_owned(),
            "1st-api".to_owned(),
            format!("a{}", "b".repeat(62)),
            format!("{}-{}", "a".repeat(37), "b".repeat(25)),
            "x".repeat(36),
            "x".repeat(37),
            "x".repeat(38),
        ] {
            for ports in [&ports[..], &ports[..1], &[]] {
                for family in [IpFamily::V4, IpFamily::V6] {
                    let base = port_set_base_name(&svc, ports, family, 7);
                    let name = chunk_name(&base, u32::MAX);
                    assert!(name.len() <= 63, "{name} ({})", name.len());
                    assert!(
                        kube_validation::names::is_dns1123_subdomain(&name).is_empty(),
                        "{name}"
                    );
                    assert!(
                        base.starts_with(&format!("{}.", name_prefix(&svc))),
                        "{base}"
                    );
                }
            }
        }
        // A cut never ends a segment in `-`.
        let svc = format!("{}-{}", "a".repeat(37), "b".repeat(25));
        assert_eq!(name_prefix(&svc), "a".repeat(37));
    }

    #[test]
    fn port_set_names_are_never_per_port_names() {
        // A per-port name's third segment is `v6`, `p<n>` or `<n>`; a port-set name's hash,
        // second or third, starts with a consonant other than p and v.
        for salt in 0..2000 {
            let base = port_set_base_name("web", &[port("http", 80)], IpFamily::V4, salt);
            let hash = base.rsplit('.').next().unwrap();
            let first = hash.as_bytes()[0];
            assert!(
                first.is_ascii_lowercase() && first != b'p' && first != b'v',
                "{base}"
            );
        }
    }
}
