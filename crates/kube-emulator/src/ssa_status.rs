//! The 409 Status of a server-side apply conflict (spec §4.6).

use std::collections::BTreeMap;

use serde_json::json;

use crate::error::ApiError;
use crate::registry::ResourceType;
use crate::semantics::Conflict;

fn manager_text(c: &Conflict) -> String {
    if c.operation == "Apply" {
        format!("\"{}\"", c.manager)
    } else {
        format!("\"{}\" using {}", c.manager, c.api_version)
    }
}

/// Build the conflict Status.
pub fn conflict(rt: &ResourceType, name: &str, conflicts: &[Conflict]) -> ApiError {
    let n = conflicts.len();
    let message = if n == 1 {
        let c = &conflicts[0];
        format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            manager_text(c),
            c.path
        )
    } else {
        let mut by_mgr: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        for c in conflicts {
            by_mgr.entry(manager_text(c)).or_default().push(&c.path);
        }
        let body: Vec<String> = by_mgr
            .iter()
            .map(|(m, paths)| {
                format!(
                    "conflicts with {m}:\n{}",
                    paths
                        .iter()
                        .map(|p| format!("- {p}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                )
            })
            .collect();
        format!("Apply failed with {n} conflicts: {}", body.join("\n"))
    };
    let causes: Vec<_> = conflicts
        .iter()
        .map(|c| json!({"reason": "FieldManagerConflict", "message": format!("conflict with {}", manager_text(c)), "field": c.path}))
        .collect();
    let mut d = json!({"name": name, "kind": rt.plural, "causes": causes});
    if !rt.group.is_empty() {
        d["group"] = json!(rt.group);
    }
    ApiError::new(409, "Conflict", message).with_details(d)
}
