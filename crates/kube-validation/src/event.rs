//! events.k8s.io/v1 Event validation (`pkg/apis/core/validation/events.go`, strict path for
//! `events.k8s.io/v1`). Field paths use the internal (core) names the apiserver reports:
//! `involvedObject` for `regarding`, `message` for `note`, `firstTimestamp` for
//! `deprecatedFirstTimestamp`, and so on.

use k8s_openapi::api::events::v1::Event;

use crate::field::{BadValue, ErrorList, FieldError, FieldPath};
use crate::meta::{validate_object_meta, validate_object_meta_update};
use crate::names::{is_dns1123_subdomain, is_qualified_name, name_is_dns_subdomain};

/// Longest `reportingInstance`.
pub const REPORTING_INSTANCE_LENGTH_LIMIT: usize = 128;
/// Longest `action`.
pub const ACTION_LENGTH_LIMIT: usize = 128;
/// Longest `reason`.
pub const REASON_LENGTH_LIMIT: usize = 128;
/// Longest `note`.
pub const NOTE_LENGTH_LIMIT: usize = 1024;

fn len(s: &Option<String>) -> usize {
    s.as_deref().map_or(0, str::len)
}

/// `legacyValidateEvent`; `controller_field` names `reportingController` as the request's
/// version does (`reportingComponent` in core v1).
fn legacy_named(event: &Event, controller_field: &str) -> ErrorList {
    let mut errs = Vec::new();
    let namespace = event.metadata.namespace.as_deref().unwrap_or_default();
    let regarding_ns = event
        .regarding
        .as_ref()
        .and_then(|r| r.namespace.as_deref())
        .unwrap_or_default();
    let ns_path = FieldPath::new("involvedObject").child("namespace");
    if event.event_time.is_none() {
        let ok = if regarding_ns.is_empty() {
            namespace.is_empty() || namespace == "default"
        } else {
            namespace == regarding_ns
        };
        if !ok {
            errs.push(FieldError::invalid(
                &ns_path,
                regarding_ns,
                "does not match event.namespace",
            ));
        }
    } else {
        if regarding_ns.is_empty() && namespace != "default" && namespace != "kube-system" {
            errs.push(FieldError::invalid(
                &ns_path,
                regarding_ns,
                "does not match event.namespace",
            ));
        }
        let controller = event.reporting_controller.as_deref().unwrap_or_default();
        let rc_path = FieldPath::new(controller_field);
        if controller.is_empty() {
            errs.push(FieldError::required(&rc_path, ""));
        }
        errs.extend(
            is_qualified_name(controller)
                .into_iter()
                .map(|m| FieldError::invalid(&rc_path, controller, m)),
        );
        let mut bounded = |field: &str, value: &Option<String>, limit: usize, required: bool| {
            let p = FieldPath::new(field);
            if required && len(value) == 0 {
                errs.push(FieldError::required(&p, ""));
            }
            if len(value) > limit {
                errs.push(FieldError::invalid(
                    &p,
                    "",
                    format!("can have at most {limit} characters"),
                ));
            }
        };
        bounded(
            "reportingInstance",
            &event.reporting_instance,
            REPORTING_INSTANCE_LENGTH_LIMIT,
            true,
        );
        bounded("action", &event.action, ACTION_LENGTH_LIMIT, true);
        bounded("reason", &event.reason, REASON_LENGTH_LIMIT, true);
        bounded("message", &event.note, NOTE_LENGTH_LIMIT, false);
    }
    errs.extend(
        is_dns1123_subdomain(namespace)
            .into_iter()
            .map(|m| FieldError::invalid(&FieldPath::new("namespace"), namespace, m)),
    );
    errs
}

fn legacy(event: &Event) -> ErrorList {
    legacy_named(event, "reportingController")
}

/// A core v1 Event in the events.k8s.io/v1 shape (the fields validation reads).
fn from_core(e: &k8s_openapi::api::core::v1::Event) -> Event {
    Event {
        metadata: e.metadata.clone(),
        regarding: Some(e.involved_object.clone()),
        event_time: e.event_time.clone(),
        reporting_controller: e.reporting_component.clone(),
        reporting_instance: e.reporting_instance.clone(),
        action: e.action.clone(),
        reason: e.reason.clone(),
        note: e.message.clone(),
        type_: e.type_.clone(),
        ..Event::default()
    }
}

/// Validates an Event created or updated through core v1: only the legacy rules, for backwards
/// compatibility (`ValidateEventCreate`/`ValidateEventUpdate` with request version v1).
pub fn validate_core_event(event: &k8s_openapi::api::core::v1::Event) -> ErrorList {
    legacy_named(&from_core(event), "reportingComponent")
}

fn series(event: &Event) -> ErrorList {
    let mut errs = Vec::new();
    if event.series.as_ref().is_some_and(|s| s.count < 2) {
        errs.push(FieldError::invalid(
            &FieldPath::new("series.count"),
            "",
            "should be at least 2",
        ));
    }
    errs
}

/// Validates an Event created through `events.k8s.io/v1`.
pub fn validate_event_create(event: &Event) -> ErrorList {
    let mut errs = legacy(event);
    errs.extend(validate_object_meta(
        &event.metadata,
        true,
        name_is_dns_subdomain,
        &FieldPath::new("metadata"),
        true,
    ));
    errs.extend(series(event));
    if event.event_time.is_none() {
        errs.push(FieldError::required(&FieldPath::new("eventTime"), ""));
    }
    let type_ = event.type_.as_deref().unwrap_or_default();
    if type_ != "Normal" && type_ != "Warning" {
        errs.push(FieldError::invalid(
            &FieldPath::new("type"),
            "",
            format!("has invalid value: {type_}"),
        ));
    }
    let unset = |field: &str| FieldError::invalid(&FieldPath::new(field), "", "needs to be unset");
    if event.deprecated_first_timestamp.is_some() {
        errs.push(unset("firstTimestamp"));
    }
    if event.deprecated_last_timestamp.is_some() {
        errs.push(unset("lastTimestamp"));
    }
    if event.deprecated_count.is_some_and(|c| c != 0) {
        errs.push(unset("count"));
    }
    if event
        .deprecated_source
        .as_ref()
        .is_some_and(|s| len(&s.component) > 0 || len(&s.host) > 0)
    {
        errs.push(unset("source"));
    }
    errs
}

/// Validates an update through `events.k8s.io/v1`: identity fields are immutable (times compared
/// at microsecond precision), a changed `series` is revalidated.
pub fn validate_event_update(new: &Event, old: &Event) -> ErrorList {
    let mut errs = legacy(new);
    errs.extend(validate_object_meta_update(
        &new.metadata,
        &old.metadata,
        &FieldPath::new("metadata"),
    ));
    if new.series != old.series {
        errs.extend(series(new));
    }
    let immutable = |field: &str, changed: bool, shown: BadValue| {
        changed.then(|| FieldError::invalid(&FieldPath::new(field), shown, "field is immutable"))
    };
    let raw = |s: String| BadValue::Raw(s);
    let micros = |t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>| {
        t.as_ref().map(|t| t.0.as_microsecond())
    };
    let checks = [
        immutable(
            "involvedObject",
            new.regarding != old.regarding,
            raw(format!("{:?}", new.regarding)),
        ),
        immutable(
            "reason",
            new.reason != old.reason,
            new.reason.clone().unwrap_or_default().into(),
        ),
        immutable(
            "message",
            new.note != old.note,
            new.note.clone().unwrap_or_default().into(),
        ),
        immutable(
            "source",
            new.deprecated_source != old.deprecated_source,
            raw(format!("{:?}", new.deprecated_source)),
        ),
        immutable(
            "firstTimestamp",
            new.deprecated_first_timestamp != old.deprecated_first_timestamp,
            raw(format!("{:?}", new.deprecated_first_timestamp)),
        ),
        immutable(
            "lastTimestamp",
            new.deprecated_last_timestamp != old.deprecated_last_timestamp,
            raw(format!("{:?}", new.deprecated_last_timestamp)),
        ),
        immutable(
            "count",
            new.deprecated_count.unwrap_or(0) != old.deprecated_count.unwrap_or(0),
            BadValue::Int(i64::from(new.deprecated_count.unwrap_or(0))),
        ),
        immutable(
            "type",
            new.type_ != old.type_,
            new.type_.clone().unwrap_or_default().into(),
        ),
        immutable(
            "eventTime",
            micros(&new.event_time) != micros(&old.event_time),
            raw(new
                .event_time
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default()),
        ),
        immutable(
            "action",
            new.action != old.action,
            new.action.clone().unwrap_or_default().into(),
        ),
        immutable(
            "related",
            new.related != old.related,
            raw(format!("{:?}", new.related)),
        ),
        immutable(
            "reportingController",
            new.reporting_controller != old.reporting_controller,
            new.reporting_controller.clone().unwrap_or_default().into(),
        ),
        immutable(
            "reportingInstance",
            new.reporting_instance != old.reporting_instance,
            new.reporting_instance.clone().unwrap_or_default().into(),
        ),
    ];
    errs.extend(checks.into_iter().flatten());
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::api::events::v1::EventSeries;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
    use k8s_openapi::jiff::Timestamp;

    fn event() -> Event {
        Event {
            metadata: ObjectMeta {
                name: Some("pm.1234".into()),
                namespace: Some("shop".into()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(
                Timestamp::from_second(1_700_000_000).unwrap_or(Timestamp::UNIX_EPOCH),
            )),
            type_: Some("Normal".into()),
            reason: Some("Published".into()),
            action: Some("Reconcile".into()),
            note: Some("ok".into()),
            reporting_controller: Some("portmapper.dev/operator".into()),
            reporting_instance: Some("pod-a".into()),
            regarding: Some(ObjectReference {
                namespace: Some("shop".into()),
                name: Some("pm".into()),
                ..ObjectReference::default()
            }),
            ..Event::default()
        }
    }

    fn msgs(errs: ErrorList) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn valid_event_passes() {
        assert!(validate_event_create(&event()).is_empty());
    }

    #[test]
    fn event_time_required() {
        let mut e = event();
        e.event_time = None;
        assert_eq!(
            msgs(validate_event_create(&e)),
            vec!["eventTime: Required value"]
        );
    }

    #[test]
    fn type_must_be_normal_or_warning() {
        let mut e = event();
        e.type_ = Some("Info".into());
        assert_eq!(
            msgs(validate_event_create(&e)),
            vec![r#"type: Invalid value: "": has invalid value: Info"#]
        );
    }

    #[test]
    fn reporting_fields_required_and_bounded() {
        let mut e = event();
        e.reporting_instance = None;
        e.reason = Some("r".repeat(129));
        assert_eq!(
            msgs(validate_event_create(&e)),
            vec![
                "reportingInstance: Required value",
                r#"reason: Invalid value: "": can have at most 128 characters"#,
            ]
        );
    }

    #[test]
    fn note_bounded_at_1024() {
        let mut e = event();
        e.note = Some("n".repeat(1025));
        assert_eq!(
            msgs(validate_event_create(&e)),
            vec![r#"message: Invalid value: "": can have at most 1024 characters"#]
        );
    }

    #[test]
    fn regarding_namespace_must_match() {
        let mut e = event();
        e.regarding = Some(ObjectReference::default());
        assert_eq!(
            msgs(validate_event_create(&e)),
            vec![r#"involvedObject.namespace: Invalid value: "": does not match event.namespace"#]
        );
        e.metadata.namespace = Some("default".into());
        assert!(validate_event_create(&e).is_empty());
    }

    #[test]
    fn deprecated_fields_must_be_unset() {
        let mut e = event();
        e.deprecated_count = Some(3);
        assert_eq!(
            msgs(validate_event_create(&e)),
            vec![r#"count: Invalid value: "": needs to be unset"#]
        );
    }

    #[test]
    fn series_count_at_least_two() {
        let mut e = event();
        e.series = Some(EventSeries {
            count: 1,
            last_observed_time: MicroTime(Timestamp::UNIX_EPOCH),
        });
        assert_eq!(
            msgs(validate_event_create(&e)),
            vec![r#"series.count: Invalid value: "": should be at least 2"#]
        );
    }

    #[test]
    fn update_may_change_series_but_not_note() {
        let old = {
            let mut e = event();
            e.metadata.resource_version = Some("5".into());
            e
        };
        let mut new = old.clone();
        new.series = Some(EventSeries {
            count: 2,
            last_observed_time: MicroTime(Timestamp::UNIX_EPOCH),
        });
        assert!(validate_event_update(&new, &old).is_empty());
        new.note = Some("changed".into());
        assert_eq!(
            msgs(validate_event_update(&new, &old)),
            vec![r#"message: Invalid value: "changed": field is immutable"#]
        );
    }
}
