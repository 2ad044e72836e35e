//! Built-in time fields as the Go types decode and encode them (docs/emulator-spec.md §2.2):
//! `metav1.Time` parses RFC 3339 with any fraction and is written to the second; `MicroTime`
//! parses only exactly six fractional digits (`2006-01-02T15:04:05.000000Z07:00`) and is written
//! so. A value that does not parse fails the request with Go's `time.Parse` error.

use serde_json::{Value, json};

use crate::registry::ResourceType;

/// How a built-in timestamp field is decoded and serialised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeKind {
    /// `metav1.Time`: RFC 3339, seconds.
    Seconds,
    /// `metav1.MicroTime`: RFC 3339 with exactly 6 fractional digits.
    Micros,
}

const TIME_LAYOUT: &str = "2006-01-02T15:04:05Z07:00";
const MICRO_LAYOUT: &str = "2006-01-02T15:04:05.000000Z07:00";

fn time_fields(rt: &ResourceType) -> &'static [(&'static str, TimeKind)] {
    use TimeKind::{Micros, Seconds};
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("coordination.k8s.io", "leases") => {
            &[("/spec/acquireTime", Micros), ("/spec/renewTime", Micros)]
        }
        ("events.k8s.io", "events") => &[
            ("/eventTime", Micros),
            ("/series/lastObservedTime", Micros),
            ("/deprecatedFirstTimestamp", Seconds),
            ("/deprecatedLastTimestamp", Seconds),
        ],
        ("", "events") => &[
            ("/eventTime", Micros),
            ("/series/lastObservedTime", Micros),
            ("/firstTimestamp", Seconds),
            ("/lastTimestamp", Seconds),
        ],
        _ => &[],
    }
}

const CONDITION_TIMES: [&str; 4] = [
    "lastTransitionTime",
    "lastProbeTime",
    "lastHeartbeatTime",
    "lastUpdateTime",
];

/// Every time value of a built-in object: its pointer-free location and kind.
fn each_time<'a>(rt: &ResourceType, obj: &'a Value) -> Vec<(&'a Value, TimeKind)> {
    let mut out: Vec<(&Value, TimeKind)> = time_fields(rt)
        .iter()
        .filter_map(|(ptr, kind)| obj.pointer(ptr).map(|v| (v, *kind)))
        .collect();
    for c in obj
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for k in CONDITION_TIMES {
            if let Some(v) = c.get(k) {
                out.push((v, TimeKind::Seconds));
            }
        }
    }
    out
}

/// Go's error decoding the first time value of `obj` that its type does not accept (`null` is
/// the zero time; a non-string is left to the other decoding checks).
pub fn decode_error(rt: &ResourceType, obj: &Value) -> Option<String> {
    if !rt.builtin {
        return None;
    }
    each_time(rt, obj).into_iter().find_map(|(v, kind)| {
        let s = v.as_str()?;
        go_parse_error(s, kind)
    })
}

/// One fixed-width number of the layout, the literal after it, and its valid range.
struct Field {
    elem: &'static str,
    width: usize,
    sep: Option<char>,
    name: &'static str,
    lo: u32,
    hi: u32,
}

const fn field(
    elem: &'static str,
    sep: Option<char>,
    name: &'static str,
    lo: u32,
    hi: u32,
) -> Field {
    Field {
        elem,
        width: elem.len(),
        sep,
        name,
        lo,
        hi,
    }
}

/// The date and clock of both layouts.
const DATE_AND_CLOCK: [Field; 6] = [
    field("2006", Some('-'), "year", 0, 9999),
    field("01", Some('-'), "month", 1, 12),
    field("02", Some('T'), "day", 1, 31),
    field("15", Some(':'), "hour", 0, 23),
    field("04", Some(':'), "minute", 0, 59),
    field("05", None, "second", 0, 59),
];

/// `time.Parse` of `value` with the layout of `kind`: `None` when it parses, else Go's message
/// (`parsing time "…" as "…": cannot parse "…" as "…"`).
pub fn go_parse_error(value: &str, kind: TimeKind) -> Option<String> {
    let layout = match kind {
        TimeKind::Seconds => TIME_LAYOUT,
        TimeKind::Micros => MICRO_LAYOUT,
    };
    let fail = |rest: &str, elem: &str| {
        Some(format!(
            "parsing time {value:?} as {layout:?}: cannot parse {rest:?} as {elem:?}"
        ))
    };
    let range = |what: &str| Some(format!("parsing time {value:?}: {what} out of range"));
    let mut rest = value;
    for Field {
        elem,
        width,
        sep,
        name,
        lo,
        hi,
    } in DATE_AND_CLOCK
    {
        let digits = rest
            .get(..width)
            .filter(|d| d.bytes().all(|b| b.is_ascii_digit()));
        let Some(digits) = digits else {
            return fail(rest, elem);
        };
        let n: u32 = digits.parse().unwrap_or(0);
        if n < lo || n > hi {
            return range(name);
        }
        rest = &rest[width..];
        if let Some(sep) = sep {
            match rest.strip_prefix(sep) {
                Some(r) => rest = r,
                None => return fail(rest, &sep.to_string()),
            }
        }
    }
    match kind {
        TimeKind::Micros => {
            let frac = rest
                .strip_prefix('.')
                .and_then(|r| r.get(..6))
                .filter(|d| d.bytes().all(|b| b.is_ascii_digit()));
            if frac.is_none() {
                return fail(rest, ".000000");
            }
            rest = &rest[7..];
        }
        TimeKind::Seconds => {
            // Parsing accepts a fraction the layout does not name.
            if let Some(r) = rest.strip_prefix(['.', ',']) {
                let n = r.bytes().take_while(u8::is_ascii_digit).count();
                if n > 0 {
                    rest = &r[n..];
                }
            }
        }
    }
    let after_zone = match rest.as_bytes().first() {
        Some(b'Z') => Some(&rest[1..]),
        Some(b'+' | b'-') => {
            let z = rest.get(1..6).filter(|z| {
                let b = z.as_bytes();
                b[0].is_ascii_digit()
                    && b[1].is_ascii_digit()
                    && b[2] == b':'
                    && b[3].is_ascii_digit()
                    && b[4].is_ascii_digit()
            });
            z.map(|_| &rest[6..])
        }
        _ => None,
    };
    match after_zone {
        None => fail(rest, "Z07:00"),
        Some("") => None,
        Some(extra) => Some(format!("parsing time {value:?}: extra text: {extra:?}")),
    }
}

fn render_time(ts: jiff::Timestamp, kind: TimeKind) -> String {
    let base = ts.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    match kind {
        TimeKind::Seconds => format!("{base}Z"),
        TimeKind::Micros => format!("{base}.{:06}Z", ts.subsec_microsecond()),
    }
}

/// Normalise built-in time fields like the apiserver's typed round trip: `Time` truncated to
/// seconds (in UTC), `MicroTime` with 6 fractional digits, `status.conditions[*]` times as
/// `Time`. Values that do not parse were refused by [`decode_error`].
pub fn normalise(rt: &ResourceType, obj: &mut Value) {
    if !rt.builtin {
        return;
    }
    for (ptr, kind) in time_fields(rt) {
        if let Some(v) = obj.pointer_mut(ptr)
            && let Some(ts) = v.as_str().and_then(|s| s.parse::<jiff::Timestamp>().ok())
        {
            *v = json!(render_time(ts, *kind));
        }
    }
    if let Some(conds) = obj
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        for c in conds {
            for k in CONDITION_TIMES {
                if let Some(v) = c.get_mut(k)
                    && let Some(ts) = v.as_str().and_then(|s| s.parse::<jiff::Timestamp>().ok())
                {
                    *v = json!(render_time(ts, TimeKind::Seconds));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_and_second_times() {
        let rt = crate::registry::builtins()
            .into_iter()
            .find(|r| r.plural == "leases")
            .unwrap();
        let mut l = json!({"spec": {"renewTime": "2026-01-02T03:04:05.123456Z"}});
        normalise(&rt, &mut l);
        assert_eq!(l["spec"]["renewTime"], "2026-01-02T03:04:05.123456Z");
        let rt = crate::registry::builtins()
            .into_iter()
            .find(|r| r.plural == "pods")
            .unwrap();
        let mut p = json!({"status": {"conditions": [{"type": "Ready", "lastTransitionTime": "2026-01-02T03:04:05.9Z"}]}});
        normalise(&rt, &mut p);
        assert_eq!(
            p["status"]["conditions"][0]["lastTransitionTime"],
            "2026-01-02T03:04:05Z"
        );
    }

    #[test]
    fn micro_times_need_exactly_six_digits() {
        let err = |v: &str| go_parse_error(v, TimeKind::Micros);
        assert_eq!(err("2026-01-02T03:04:05.123456Z"), None);
        assert_eq!(err("2026-01-02T03:04:05.123456+01:00"), None);
        assert_eq!(
            err("2026-01-02T03:04:05.123456789Z").as_deref(),
            Some(
                r#"parsing time "2026-01-02T03:04:05.123456789Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "789Z" as "Z07:00""#
            )
        );
        assert_eq!(
            err("2026-01-02T03:05:05.5Z").as_deref(),
            Some(
                r#"parsing time "2026-01-02T03:05:05.5Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse ".5Z" as ".000000""#
            )
        );
        assert_eq!(
            err("yesterday").as_deref(),
            Some(
                r#"parsing time "yesterday" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "yesterday" as "2006""#
            )
        );
    }

    #[test]
    fn times_take_any_fraction() {
        let err = |v: &str| go_parse_error(v, TimeKind::Seconds);
        assert_eq!(err("2026-01-02T03:04:05Z"), None);
        assert_eq!(err("2026-01-02T03:04:05.5Z"), None);
        assert_eq!(
            err("2026-13-02T03:04:05Z").as_deref(),
            Some(r#"parsing time "2026-13-02T03:04:05Z": month out of range"#)
        );
    }
}
