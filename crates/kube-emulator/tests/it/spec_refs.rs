//! Every `§N` the workspace's sources cite names a section heading of docs/emulator-spec.md, so
//! the references stay inside the repository and cannot drift from the document (issue 13).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Section numbers of the spec's `##`/`###` headings: `## 0. Ten rules` → `0`,
/// `### 2.10 Namespaces` → `2.10`.
fn headings(spec: &str) -> BTreeSet<String> {
    spec.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("### ").or_else(|| l.strip_prefix("## "))?;
            let number: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let number = number.trim_end_matches('.');
            (!number.is_empty()).then(|| number.to_owned())
        })
        .collect()
}

/// Every section number cited as `§N[.M]`, including the end of a range `§2.1–2.2`.
fn citations(text: &str) -> Vec<String> {
    let number = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect::<String>()
            .trim_end_matches('.')
            .to_owned()
    };
    let mut out = Vec::new();
    for (i, _) in text.match_indices('§') {
        let rest = &text[i + '§'.len_utf8()..];
        let first = number(rest);
        if first.is_empty() {
            continue;
        }
        let after = &rest[first.len()..];
        // `§2.1–2.2` cites 2.2 too; in `§5.2–§5.5` the second `§` is a match of its own.
        if let Some(end) = after.strip_prefix('–') {
            let end = number(end);
            if !end.is_empty() {
                out.push(end);
            }
        }
        out.push(first);
    }
    out
}

/// Files under `dir` (recursively) whose name ends in one of `exts`; `target` is skipped.
fn files(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "target") {
                files(&path, exts, out);
            }
        } else if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| exts.iter().any(|e| n.ends_with(e)))
        {
            out.push(path);
        }
    }
}

#[test]
fn every_cited_section_is_a_heading_of_the_emulator_spec() {
    let root = workspace();
    let spec = std::fs::read_to_string(root.join("docs/emulator-spec.md")).unwrap();
    let sections = headings(&spec);
    assert!(sections.contains("0") && sections.contains("2.10") && sections.contains("11"));

    let mut sources = Vec::new();
    files(&root.join("crates"), &[".rs", "Cargo.toml"], &mut sources);
    // The spec's own cross-references and the emulator's user docs cite it too.
    sources.push(root.join("docs/emulator-spec.md"));
    sources.push(root.join("docs/emulator.md"));
    let mut cited = 0;
    let mut missing = Vec::new();
    for path in &sources {
        let text = std::fs::read_to_string(path).unwrap();
        for section in citations(&text) {
            cited += 1;
            if !sections.contains(&section) {
                missing.push(format!("{}: §{section}", path.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "these § references name no heading of docs/emulator-spec.md (cite its sections, or \
         name another document in the repository without §): {missing:#?}"
    );
    // The walk found the sources: dozens of citations, not zero.
    assert!(cited > 40, "only {cited} citations found");
}

#[test]
fn citations_and_headings_are_parsed_as_written() {
    assert_eq!(
        citations("spec §5.2–§5.5, §2.1–2.2 and §0 rule 5; see §4."),
        ["5.2", "5.5", "2.2", "2.1", "0", "4"]
    );
    assert_eq!(
        headings("## 0. Ten rules\n### 2.10 Namespaces (P1)\n#### 9.9 deeper\n## Not numbered"),
        BTreeSet::from(["0".to_owned(), "2.10".to_owned()])
    );
}
