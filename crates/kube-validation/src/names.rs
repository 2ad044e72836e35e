//! Name and label syntax (apimachinery `util/validation`): each function returns the list of
//! messages the apiserver would produce, empty when the value is valid.

/// Longest DNS-1123 label.
pub const DNS1123_LABEL_MAX_LENGTH: usize = 63;
/// Longest DNS-1123 subdomain.
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
/// Longest DNS-1035 label.
pub const DNS1035_LABEL_MAX_LENGTH: usize = 63;
/// Longest name part of a qualified name.
pub const QUALIFIED_NAME_MAX_LENGTH: usize = 63;
/// Longest label value.
pub const LABEL_VALUE_MAX_LENGTH: usize = 63;
/// Longest IANA service (port) name.
pub const IANA_SVC_NAME_MAX_LENGTH: usize = 15;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_ERR: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// `MaxLenError`.
pub fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

/// `EmptyError`.
pub fn empty_error() -> &'static str {
    "must be non-empty"
}

/// `RegexError`, including Go's odd double space after the first of several examples.
pub fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, example) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push('\'');
        out.push_str(example);
        out.push_str("', ");
    }
    out.push_str("regex used for validation is '");
    out.push_str(fmt);
    out.push_str("')");
    out
}

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// Matches `[a-z0-9]([-a-z0-9]*[a-z0-9])?` (no length check).
pub fn matches_dns1123_label(value: &str) -> bool {
    let b = value.as_bytes();
    match (b.first(), b.last()) {
        (Some(&first), Some(&last)) => {
            is_lower_alnum(first)
                && is_lower_alnum(last)
                && b.iter().all(|&c| is_lower_alnum(c) || c == b'-')
        }
        _ => false,
    }
}

/// Matches the DNS-1123 subdomain grammar (no length check).
pub fn matches_dns1123_subdomain(value: &str) -> bool {
    value.split('.').all(matches_dns1123_label)
}

/// Matches `[a-z]([-a-z0-9]*[a-z0-9])?` (no length check).
pub fn matches_dns1035_label(value: &str) -> bool {
    matches_dns1123_label(value) && value.as_bytes()[0].is_ascii_lowercase()
}

fn is_alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

/// Matches `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]` (no length check).
pub fn matches_qualified_name_part(value: &str) -> bool {
    let b = value.as_bytes();
    match (b.first(), b.last()) {
        (Some(&first), Some(&last)) => {
            is_alnum(first)
                && is_alnum(last)
                && b.iter()
                    .all(|&c| is_alnum(c) || c == b'-' || c == b'_' || c == b'.')
        }
        _ => false,
    }
}

/// `IsDNS1123Label`.
pub fn is_dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !matches_dns1123_label(value) {
        if matches_dns1123_subdomain(value) {
            errs.push("must not contain dots".to_owned());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_ERR,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// `IsDNS1123Subdomain`.
pub fn is_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if !matches_dns1123_subdomain(value) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `IsDNS1035Label`.
pub fn is_dns1035_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1035_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1035_LABEL_MAX_LENGTH));
    }
    if !matches_dns1035_label(value) {
        errs.push(regex_error(
            DNS1035_LABEL_ERR,
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// `IsQualifiedName`: `[prefix/]name`, the syntax of label and annotation keys.
pub fn is_qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push(format!("prefix part {}", empty_error()));
            } else {
                errs.extend(
                    is_dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_ERR,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push(format!("name part {}", empty_error()));
    } else if name.len() > QUALIFIED_NAME_MAX_LENGTH {
        errs.push(format!(
            "name part {}",
            max_len_error(QUALIFIED_NAME_MAX_LENGTH)
        ));
    }
    if !matches_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// `IsValidLabelValue`.
pub fn is_valid_label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX_LENGTH {
        errs.push(max_len_error(LABEL_VALUE_MAX_LENGTH));
    }
    if !value.is_empty() && !matches_qualified_name_part(value) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// `IsValidPortName`: an IANA service name (container port names, named targetPorts).
pub fn is_valid_port_name(port: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if port.len() > IANA_SVC_NAME_MAX_LENGTH {
        errs.push(max_len_error(IANA_SVC_NAME_MAX_LENGTH));
    }
    if port.is_empty() || !port.bytes().all(|c| is_lower_alnum(c) || c == b'-') {
        errs.push(
            "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_owned(),
        );
    }
    if !port.bytes().any(|c| c.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".to_owned());
    }
    if port.contains("--") {
        errs.push("must not contain consecutive hyphens".to_owned());
    }
    if port.starts_with('-') || port.ends_with('-') {
        errs.push("must not begin or end with a hyphen".to_owned());
    }
    errs
}

/// `IsValidPortNum`.
pub fn is_valid_port_num(port: i64) -> Vec<String> {
    if (1..=65535).contains(&port) {
        Vec::new()
    } else {
        vec!["must be between 1 and 65535, inclusive".to_owned()]
    }
}

/// `NameIsDNSSubdomain`: with `prefix`, a trailing `-` is allowed (generateName).
pub fn name_is_dns_subdomain(name: &str, prefix: bool) -> Vec<String> {
    is_dns1123_subdomain(&mask_trailing_dash(name, prefix))
}

/// `NameIsDNSLabel`.
pub fn name_is_dns_label(name: &str, prefix: bool) -> Vec<String> {
    is_dns1123_label(&mask_trailing_dash(name, prefix))
}

/// `NameIsDNS1035Label`.
pub fn name_is_dns1035_label(name: &str, prefix: bool) -> Vec<String> {
    is_dns1035_label(&mask_trailing_dash(name, prefix))
}

fn mask_trailing_dash(name: &str, prefix: bool) -> String {
    if prefix && name.len() > 1 && name.ends_with('-') {
        format!("{}a", &name[..name.len() - 1])
    } else {
        name.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns1123_label_accepts_digits_and_inner_double_dash() {
        assert!(is_dns1123_label("123").is_empty());
        assert!(is_dns1123_label("http--2").is_empty());
        assert!(is_dns1123_label(&"a".repeat(63)).is_empty());
    }

    #[test]
    fn dns1123_label_rejects_dots_with_specific_message() {
        assert_eq!(is_dns1123_label("a.b"), vec!["must not contain dots"]);
    }

    #[test]
    fn dns1123_label_regex_message_matches_apimachinery() {
        assert_eq!(
            is_dns1123_label("Web"),
            vec![
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ]
        );
    }

    #[test]
    fn dns1123_label_too_long_reports_length() {
        assert_eq!(is_dns1123_label(&"a".repeat(64)), vec![max_len_error(63)]);
    }

    #[test]
    fn dns1123_subdomain_accepts_dotted_names_up_to_253() {
        assert!(is_dns1123_subdomain("web.http.v6.p8080.2").is_empty());
        let long = format!(
            "{}.{}.{}.{}",
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(61)
        );
        assert_eq!(long.len(), 253);
        assert!(is_dns1123_subdomain(&long).is_empty());
        assert_eq!(
            is_dns1123_subdomain(&format!("{long}x")),
            vec![max_len_error(253)]
        );
    }

    #[test]
    fn dns1123_subdomain_rejects_empty_segments_and_uppercase() {
        assert_eq!(is_dns1123_subdomain("a..b").len(), 1);
        assert_eq!(is_dns1123_subdomain("A").len(), 1);
        assert_eq!(is_dns1123_subdomain("").len(), 1);
        assert_eq!(is_dns1123_subdomain("a-").len(), 1);
    }

    #[test]
    fn dns1035_label_requires_leading_letter() {
        assert!(is_dns1035_label("my-svc").is_empty());
        assert_eq!(is_dns1035_label("1svc").len(), 1);
    }

    #[test]
    fn qualified_name_accepts_prefixed_keys() {
        assert!(is_qualified_name("example.com/group").is_empty());
        assert!(is_qualified_name("kubernetes.io/service-name").is_empty());
        assert!(is_qualified_name("My_Name.x").is_empty());
    }

    #[test]
    fn qualified_name_rejects_empty_prefix_and_name() {
        assert_eq!(
            is_qualified_name("/a"),
            vec!["prefix part must be non-empty".to_owned()]
        );
        let errs = is_qualified_name("a/");
        assert_eq!(errs[0], "name part must be non-empty");
        assert_eq!(errs.len(), 2, "Go also reports the regex for an empty name");
    }

    #[test]
    fn qualified_name_rejects_two_slashes() {
        let errs = is_qualified_name("a/b/c");
        assert_eq!(errs.len(), 1);
        assert!(errs[0].starts_with("a qualified name must consist of"));
        assert!(errs[0].ends_with(
            "with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ));
    }

    #[test]
    fn qualified_name_rejects_uppercase_prefix() {
        let errs = is_qualified_name("Example.com/x");
        assert_eq!(errs.len(), 1);
        assert!(errs[0].starts_with("prefix part a lowercase RFC 1123 subdomain"));
    }

    #[test]
    fn label_value_allows_empty_and_rejects_commas() {
        assert!(is_valid_label_value("").is_empty());
        assert!(is_valid_label_value("my_value-1.x").is_empty());
        assert_eq!(is_valid_label_value("a,b").len(), 1);
        assert_eq!(is_valid_label_value(&"a".repeat(64)).len(), 1);
    }

    #[test]
    fn iana_port_name_rules() {
        assert!(is_valid_port_name("http").is_empty());
        assert!(is_valid_port_name("h2c-9").is_empty());
        assert_eq!(
            is_valid_port_name("http--x"),
            vec!["must not contain consecutive hyphens"]
        );
        assert_eq!(
            is_valid_port_name("8080"),
            vec!["must contain at least one letter (a-z)"]
        );
        assert_eq!(
            is_valid_port_name("-http"),
            vec!["must not begin or end with a hyphen"]
        );
        assert_eq!(
            is_valid_port_name("abcdefghijklmnop"),
            vec![max_len_error(15)]
        );
        assert_eq!(is_valid_port_name("HTTP").len(), 2);
    }

    #[test]
    fn port_number_range() {
        assert!(is_valid_port_num(1).is_empty());
        assert!(is_valid_port_num(65535).is_empty());
        assert_eq!(
            is_valid_port_num(0),
            vec!["must be between 1 and 65535, inclusive"]
        );
        assert_eq!(is_valid_port_num(65536).len(), 1);
    }

    #[test]
    fn generate_name_prefix_may_end_with_dash() {
        assert!(name_is_dns_subdomain("web-", true).is_empty());
        assert_eq!(name_is_dns_subdomain("web-", false).len(), 1);
    }
}
