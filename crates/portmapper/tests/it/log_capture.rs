//! Captures the operator's WARN and ERROR log events, so tests can count warnings exactly
//! ("once per change", not once per retry). One global subscriber for the whole test binary:
//! tests tell their events apart by a field value (a PortMapping name of their own). An event's
//! fields include those of the spans it happened in (a warning inside a PortMapping's reconcile
//! span counts for that PortMapping even if the event itself does not name it).

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// One captured log event.
#[derive(Clone, Debug)]
pub struct Captured {
    pub level: Level,
    /// The module that logged it (`portmapper::reconcile`, `kube_client::client::builder`, …).
    pub target: String,
    pub message: String,
    /// Every other field (the event's, then those of its spans, innermost first), formatted as
    /// the log would show it.
    pub fields: BTreeMap<String, String>,
}

static CAPTURED: Mutex<Vec<Captured>> = Mutex::new(Vec::new());
static INSTALLED: OnceLock<bool> = OnceLock::new();

struct CaptureLayer;

#[derive(Default)]
struct Fields {
    message: String,
    fields: BTreeMap<String, String>,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.fields
                .insert(field.name().to_string(), format!("{value:?}"));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.fields
                .insert(field.name().to_string(), value.to_string());
        }
    }
}

/// The recorded fields of a span (kept in its extensions).
struct SpanFields(BTreeMap<String, String>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for CaptureLayer {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanFields(fields.fields));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if *event.metadata().level() > Level::WARN {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        for span in ctx.event_scope(event).into_iter().flatten() {
            if let Some(SpanFields(span_fields)) = span.extensions().get::<SpanFields>() {
                for (k, v) in span_fields {
                    fields.fields.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
        }
        CAPTURED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Captured {
                level: *event.metadata().level(),
                target: event.metadata().target().to_string(),
                message: fields.message,
                fields: fields.fields,
            });
    }
}

/// Installs the capturing subscriber (once per test binary). Panics if another global
/// subscriber was installed first, since counts would then silently read zero.
pub fn install() {
    let installed = *INSTALLED.get_or_init(|| {
        // Every span (for their fields), but only WARN and ERROR events.
        let filter = filter_fn(|meta| meta.is_span() || *meta.level() <= Level::WARN);
        let subscriber = tracing_subscriber::registry().with(CaptureLayer.with_filter(filter));
        tracing::subscriber::set_global_default(subscriber).is_ok()
    });
    assert!(installed, "another global tracing subscriber is installed");
}

/// The captured WARN/ERROR events for which `matches` holds.
pub fn warnings(matches: impl Fn(&Captured) -> bool) -> Vec<Captured> {
    CAPTURED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|c| matches(c))
        .cloned()
        .collect()
}
