//! Field rules: the validators list what each field of a spec must be ([`FieldRule`]), and
//! [`check`] judges the whole list in one place, each failure as the apiserver's field error.
//! A validator is then a plain walk of its object that decides nothing, and every format,
//! bound and message is written once, here.

use kube_validation::field::{FieldError, FieldPath};
use kube_validation::names;

/// What one field's value must be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule<'a> {
    /// An RFC 1123 label.
    Dns1123Label(&'a str),
    /// A qualified name, as label keys and condition types are.
    QualifiedName(&'a str),
    /// A label value.
    LabelValue(&'a str),
    /// A port name (`IANA_SVC_NAME`).
    PortName(&'a str),
    /// A port number.
    PortNumber(i64),
    /// Between `min` and `max`, inclusive.
    Between { value: i64, min: i64, max: i64 },
    /// At most `max`; `detail` states the rule (a CEL rule's message).
    AtMost {
        value: i64,
        max: i64,
        detail: &'static str,
    },
    /// At least `min`; `detail` states the rule (a CEL rule's message).
    AtLeast {
        value: i64,
        min: i64,
        detail: &'static str,
    },
    /// At most the value of the field `bound` (`max`).
    NotAbove {
        value: i64,
        max: i64,
        bound: &'static str,
    },
    /// Contains `part`; `detail` says why when it does not.
    Contains {
        value: &'a str,
        part: &'static str,
        detail: &'static str,
    },
    /// Starts with `prefix`; `detail` says why when it does not.
    StartsWith {
        value: &'a str,
        prefix: &'static str,
        detail: &'static str,
    },
    /// An HTTP header name (token characters only).
    HttpHeaderName(&'a str),
    /// An absolute http:// or https:// URL with a host, as the schema's pattern.
    HttpUrl(&'a str),
    /// Holds a PEM certificate; the value is never echoed.
    PemCertificate(&'a str),
    /// Not one of `earlier`, the values before it in its list.
    Unique {
        value: &'a str,
        earlier: Vec<&'a str>,
    },
    /// One of `supported`.
    OneOf {
        value: &'a str,
        supported: &'static [&'static str],
    },
    /// A list of `len` entries that must not be empty; `detail` says why.
    NotEmpty { len: usize, detail: &'static str },
    /// A list of `len` entries that must be empty; `detail` says why.
    Empty { len: usize, detail: &'static str },
    /// Exactly one of a group of optional fields is set; `set` names those that are, `detail`
    /// states the rule.
    ExactlyOne {
        set: Vec<&'static str>,
        detail: &'static str,
    },
}

/// A rule and the field it is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRule<'a> {
    pub path: FieldPath,
    pub rule: Rule<'a>,
}

/// Every failure of `rules`, in their order.
pub fn check(rules: &[FieldRule<'_>]) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for r in rules {
        let failures = failures(&r.rule);
        errs.extend(failures.into_iter().map(|detail| error(r, detail)));
    }
    errs
}

/// Why `rule` fails, one message per reason (none when it holds).
fn failures(rule: &Rule<'_>) -> Vec<String> {
    let fails_with = |holds: bool, detail: &str| (!holds).then(|| detail.to_owned());
    let failed = match rule {
        Rule::Dns1123Label(v) => return names::is_dns1123_label(v),
        Rule::QualifiedName(v) => return names::is_qualified_name(v),
        Rule::LabelValue(v) => return names::is_valid_label_value(v),
        Rule::PortName(v) => return names::is_valid_port_name(v),
        Rule::PortNumber(n) => return names::is_valid_port_num(*n),
        Rule::Between { value, min, max } => fails_with(
            (*min..=*max).contains(value),
            &format!("must be between {min} and {max}, inclusive"),
        ),
        Rule::AtMost { value, max, detail } => fails_with(value <= max, detail),
        Rule::AtLeast { value, min, detail } => fails_with(value >= min, detail),
        Rule::NotAbove { value, max, bound } => {
            fails_with(value <= max, &format!("must not exceed {bound} ({max})"))
        }
        Rule::Contains {
            value,
            part,
            detail,
        } => fails_with(value.contains(part), detail),
        Rule::StartsWith {
            value,
            prefix,
            detail,
        } => fails_with(value.starts_with(prefix), detail),
        Rule::HttpHeaderName(v) => fails_with(
            is_http_token(v),
            "must be an HTTP header name (token characters only)",
        ),
        Rule::HttpUrl(v) => fails_with(
            is_http_url(v),
            "must be an absolute http:// or https:// URL with a host",
        ),
        Rule::PemCertificate(v) => fails_with(
            has_pem_certificate(v),
            "must contain at least one PEM certificate",
        ),
        Rule::Unique { value, earlier } => fails_with(!earlier.contains(value), ""),
        Rule::OneOf { value, supported } => fails_with(supported.contains(value), ""),
        Rule::NotEmpty { len, detail } => fails_with(*len > 0, detail),
        Rule::Empty { len, detail } => fails_with(*len == 0, detail),
        Rule::ExactlyOne { set, detail } => (set.len() != 1).then(|| match set.as_slice() {
            [] => (*detail).to_owned(),
            _ => format!("{detail}, this one sets {}", set.join(", ")),
        }),
    };
    failed.into_iter().collect()
}

/// The field error of one failure of `r`, `detail` from [`failures`].
fn error(r: &FieldRule<'_>, detail: String) -> FieldError {
    let path = &r.path;
    match &r.rule {
        Rule::Dns1123Label(v)
        | Rule::QualifiedName(v)
        | Rule::LabelValue(v)
        | Rule::PortName(v)
        | Rule::Contains { value: v, .. }
        | Rule::StartsWith { value: v, .. }
        | Rule::HttpHeaderName(v)
        | Rule::HttpUrl(v) => FieldError::invalid(path, *v, detail),
        Rule::PortNumber(n)
        | Rule::Between { value: n, .. }
        | Rule::NotAbove { value: n, .. }
        | Rule::AtMost { value: n, .. }
        | Rule::AtLeast { value: n, .. } => FieldError::invalid(path, *n, detail),
        Rule::PemCertificate(_) => FieldError::invalid(path, "<redacted>", detail),
        Rule::Unique { value, .. } => FieldError::duplicate(path, *value),
        Rule::OneOf { value, supported } => FieldError::not_supported(path, *value, supported),
        Rule::NotEmpty { .. } => FieldError::required(path, detail),
        Rule::ExactlyOne { set, .. } if set.is_empty() => FieldError::required(path, detail),
        Rule::Empty { .. } | Rule::ExactlyOne { .. } => FieldError::forbidden(path, detail),
    }
}

fn is_http_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// As the schema's pattern: a host of at least one character before any path, query or
/// fragment, and no whitespace.
fn is_http_url(url: &str) -> bool {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    rest.is_some_and(|rest| {
        !rest.is_empty() && !rest.starts_with(['/', '?', '#']) && !url.contains(char::is_whitespace)
    })
}

/// Whether `text` holds a PEM certificate block with base64 content (not only whitespace):
/// what the schema's `PEM_CERTIFICATE_PATTERN` (in `check`) matches, without a regex engine.
fn has_pem_certificate(text: &str) -> bool {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let body_char = |c: char| c.is_ascii_alphanumeric() || "+/=\r\n\t ".contains(c);
    text.match_indices(BEGIN).any(|(at, _)| {
        let rest = &text[at + BEGIN.len()..];
        // The body cannot contain '-', so the block ends at the first one.
        let end = rest.find('-').unwrap_or(rest.len());
        let body = &rest[..end];
        body.chars().all(body_char)
            && body.chars().any(|c| !c.is_ascii_whitespace())
            && rest[end..].starts_with(END)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rule: Rule<'_>) -> Vec<String> {
        let path = FieldPath::new("spec").child("f");
        check(&[FieldRule { path, rule }])
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_rule_that_holds_gives_no_error() {
        for rule in [
            Rule::Dns1123Label("web"),
            Rule::Between {
                value: 5,
                min: 1,
                max: 5,
            },
            Rule::NotAbove {
                value: 5,
                max: 5,
                bound: "periodSeconds",
            },
            Rule::Unique {
                value: "a",
                earlier: vec!["b"],
            },
            Rule::OneOf {
                value: "In",
                supported: &["In"],
            },
            Rule::ExactlyOne {
                set: vec!["podReady"],
                detail: "one",
            },
            Rule::HttpUrl("https://h/p"),
        ] {
            assert_eq!(at(rule.clone()), Vec::<String>::new(), "{rule:?}");
        }
    }

    #[test]
    fn each_failure_is_the_apiservers_field_error() {
        assert_eq!(
            at(Rule::Between {
                value: 0,
                min: 1,
                max: 60
            }),
            ["spec.f: Invalid value: 0: must be between 1 and 60, inclusive"]
        );
        assert_eq!(
            at(Rule::Unique {
                value: "a",
                earlier: vec!["a"]
            }),
            ["spec.f: Duplicate value: \"a\""]
        );
        assert_eq!(
            at(Rule::OneOf {
                value: "Has",
                supported: &["In", "NotIn"]
            }),
            ["spec.f: Unsupported value: \"Has\": supported values: \"In\", \"NotIn\""]
        );
        assert_eq!(
            at(Rule::ExactlyOne {
                set: vec![],
                detail: "each check must set exactly one kind"
            }),
            ["spec.f: Required value: each check must set exactly one kind"]
        );
        assert_eq!(
            at(Rule::ExactlyOne {
                set: vec!["podReady", "grpc"],
                detail: "each check must set exactly one kind"
            }),
            [
                "spec.f: Forbidden: each check must set exactly one kind, this one sets podReady, grpc"
            ]
        );
        assert_eq!(
            at(Rule::PemCertificate("not a certificate")),
            ["spec.f: Invalid value: \"<redacted>\": must contain at least one PEM certificate"]
        );
        assert_eq!(at(Rule::Dns1123Label("Web_1")).len(), 1);
    }
}
