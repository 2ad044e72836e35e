//! Captures the operator's WARN and ERROR log events, so tests can count warnings exactly
//! ("once per change", not once per retry). One global subscriber for the whole test binary:
//! tests tell their events apart by a field value (a PortMapping name of their own).

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, SubscriberExt};

/// One captured log event.
#[derive(Clone, Debug)]
pub struct Captured {
    pub level: Level,
    pub message: String,
    /// Every other field, formatted as the log would show it.
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

impl<S: Subscriber> Layer<S> for CaptureLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        CAPTURED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Captured {
                level: *event.metadata().level(),
                message: fields.message,
                fields: fields.fields,
            });
    }
}

/// Installs the capturing subscriber (once per test binary). Panics if another global
/// subscriber was installed first, since counts would then silently read zero.
pub fn install() {
    let installed = *INSTALLED.get_or_init(|| {
        let subscriber =
            tracing_subscriber::registry().with(CaptureLayer.with_filter(LevelFilter::WARN));
        tracing::subscriber::set_global_default(subscriber).is_ok()
    });
    assert!(installed, "another global tracing subscriber is installed");
}

/// The captured WARN/ERROR events whose `field` contains `value`.
pub fn warnings_with(field: &str, value: &str) -> Vec<Captured> {
    CAPTURED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|c| c.fields.get(field).is_some_and(|v| v.contains(value)))
        .cloned()
        .collect()
}
