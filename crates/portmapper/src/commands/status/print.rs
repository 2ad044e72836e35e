//! The printers of a [`View`]: the table for people, the JSON shape for scripts.

use std::fmt::Write as _;

use super::{StatusError, View, opt};

/// The first line: what, and whether the status is current.
fn header(view: &View) -> String {
    format!(
        "PortMapping {}/{}  Service {}  generation {}  observedGeneration {}",
        view.namespace,
        view.name,
        view.service,
        opt(view.generation),
        opt(view.observed_generation)
    )
}

/// `Ready=True (Published)  Stalled=False (…)`; messages of the conditions that need a look.
fn conditions_lines(view: &View) -> Vec<String> {
    if view.conditions.is_empty() {
        return vec!["Conditions: none".to_owned()];
    }
    let summary = view
        .conditions
        .iter()
        .map(|c| {
            if c.reason.is_empty() {
                format!("{}={}", c.type_, c.status)
            } else {
                format!("{}={} ({})", c.type_, c.status, c.reason)
            }
        })
        .collect::<Vec<_>>()
        .join("  ");
    let mut lines = vec![format!("Conditions: {summary}")];
    for c in &view.conditions {
        // Ready wants True; every other condition reports trouble (or work) when True.
        let attention = if c.type_ == portmapper_api::status::condition_types::READY {
            c.status != "True"
        } else {
            c.status == "True"
        };
        if attention && !c.message.is_empty() {
            lines.push(format!("  {}: {}", c.type_, c.message));
        }
    }
    lines
}

/// What each mark means (printed under the tables).
pub const LEGEND: &str = "✔ published ready  ◐ published not ready  ↓ published terminating  \
                          ~ kept (a check abstained)  ✘ excluded  - not a candidate  ? cannot tell";

/// The human-readable view.
pub fn table(view: &View) -> String {
    let mut out = String::new();
    out.push_str(&header(view));
    out.push('\n');
    for line in conditions_lines(view) {
        out.push_str(&line);
        out.push('\n');
    }
    let counts = view
        .ports
        .iter()
        .map(|c| match (c.ready, c.candidates) {
            (Some(r), Some(n)) => format!("{} {r}/{n}", c.name),
            _ => format!("{} -", c.name),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(out, "Ready/candidates: {counts}");
    for family in &view.families {
        out.push('\n');
        let mut rows = vec![
            std::iter::once(family.family.clone())
                .chain(view.ports.iter().map(|c| c.name.clone()))
                .collect::<Vec<_>>(),
        ];
        let mut reasons = Vec::new();
        for row in &family.pods {
            let mut line = vec![row.pod.clone()];
            for cell in &row.ports {
                line.push(cell.state.mark().to_owned());
                if let Some(reason) = &cell.reason {
                    reasons.push(format!(
                        "  {} {} {}: {reason}",
                        cell.state.mark(),
                        row.pod,
                        cell.port
                    ));
                }
            }
            rows.push(line);
        }
        if family.pods.is_empty() {
            rows.push(vec!["(no pods)".to_owned()]);
        }
        out.push_str(&crate::commands::text_table::columns(&rows, 2));
        for r in reasons {
            out.push_str(&r);
            out.push('\n');
        }
    }
    if !view.notes.is_empty() {
        out.push('\n');
        for note in &view.notes {
            let _ = writeln!(out, "Note: {note}");
        }
    }
    out.push('\n');
    out.push_str(LEGEND);
    out.push('\n');
    out
}

/// The machine-readable view: pretty, or one line per document (for `--watch`).
pub fn json(view: &View, one_line: bool) -> Result<String, StatusError> {
    let text = if one_line {
        serde_json::to_string(view)
    } else {
        serde_json::to_string_pretty(view)
    };
    text.map(|t| t + "\n").map_err(StatusError::Encode)
}
