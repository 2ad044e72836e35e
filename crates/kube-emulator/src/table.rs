//! `meta.k8s.io/v1` Table responses for `kubectl get` (docs/emulator-spec.md §5.7); the rendering
//! itself (CRD printer columns, kubectl's built-in columns, ages) is `apiserver_semantics::table`.

use apiserver_semantics::table::{self as t, IncludeObject, TableSource};
use serde_json::{Value, json};

use crate::registry::ResourceType;

/// Render a Table for objects of one type (`now`: the emulator clock, for ages).
pub fn render(
    rt: &ResourceType,
    objs: &[&Value],
    include_object: &str,
    rv: u64,
    continue_token: Option<&str>,
    now: &str,
) -> Value {
    let source = match &rt.crd {
        Some(c) => TableSource::Crd(t::crd_columns(
            &json!({"additionalPrinterColumns": c.printer_columns}),
        )),
        None => TableSource::Builtin {
            group: rt.group.clone(),
            kind: rt.kind.clone(),
        },
    };
    let include = IncludeObject::from_param(Some(include_object)).unwrap_or_default();
    let owned: Vec<Value> = objs.iter().map(|o| (*o).clone()).collect();
    t::render(
        &source,
        &owned,
        include,
        &rv.to_string(),
        continue_token,
        now,
    )
}
