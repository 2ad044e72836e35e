//! Fuzz target (stable toolchain, proptest) for the `portmapper render` manifest reader: any
//! text, and the demo's manifests cut, spliced and corrupted. Property: `render::run` never
//! panics; it either prints a preview or fails with a typed [`RenderError`] whose message points
//! at the input. Budget: `PORTMAPPER_FUZZ_CASES` (see `tests/support/fuzz_budget.rs`).

use std::path::PathBuf;

use portmapper::commands::render::{self, Assume, Format, RenderError, RenderOptions};
use proptest::prelude::*;

use crate::render::repo;

#[path = "../../../../tests/support/fuzz_budget.rs"]
mod fuzz_budget;

/// The demo's Service, pods and PortMapping as one multi-document file: valid input to mutate.
fn seed() -> String {
    let dir = repo().join("examples/demo");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

#[derive(Clone, Debug)]
enum Edit {
    /// Cut the text at a fraction of its length.
    Truncate(f64),
    /// Remove one line.
    DropLine(usize),
    /// Repeat one line.
    DuplicateLine(usize),
    /// Put text at the start of one line.
    Insert(usize, String),
    /// Replace one line's value after its colon.
    Value(usize, String),
}

fn edit() -> impl Strategy<Value = Edit> {
    let text = prop_oneof![
        Just("---".to_owned()),
        Just("  ".to_owned()),
        Just("- ".to_owned()),
        Just("{".to_owned()),
        Just("&a ".to_owned()),
        Just("*a".to_owned()),
        Just("!!binary ".to_owned()),
        Just("kind: List\nitems: [".to_owned()),
        Just("apiVersion: v1\nkind: Pod\n".to_owned()),
        "\\PC{0,16}",
    ];
    let value = prop_oneof![
        Just(" null".to_owned()),
        Just(" []".to_owned()),
        Just(" {}".to_owned()),
        Just(" -1".to_owned()),
        Just(" 99999999999999999999".to_owned()),
        Just(" \"\"".to_owned()),
        Just(" ~".to_owned()),
        Just(" [[[[".to_owned()),
        Just(" 10.244.0.1".to_owned()),
        Just(" ::1".to_owned()),
        "\\PC{0,20}".prop_map(|s| format!(" {s}")),
    ];
    prop_oneof![
        (0.0..1.0f64).prop_map(Edit::Truncate),
        any::<usize>().prop_map(Edit::DropLine),
        any::<usize>().prop_map(Edit::DuplicateLine),
        (any::<usize>(), text).prop_map(|(i, t)| Edit::Insert(i, t)),
        (any::<usize>(), value).prop_map(|(i, v)| Edit::Value(i, v)),
    ]
}

fn mutate(text: &str, edits: &[Edit]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for e in edits {
        if lines.is_empty() {
            break;
        }
        let n = lines.len();
        match e {
            Edit::Truncate(f) => {
                let joined = lines.join("\n");
                let mut cut = (joined.len() as f64 * f) as usize;
                while !joined.is_char_boundary(cut) {
                    cut -= 1;
                }
                lines = joined[..cut].lines().map(str::to_owned).collect();
            }
            Edit::DropLine(i) => {
                lines.remove(i % n);
            }
            Edit::DuplicateLine(i) => {
                let l = lines[i % n].clone();
                lines.insert(i % n, l);
            }
            Edit::Insert(i, t) => lines[i % n].insert_str(0, t),
            Edit::Value(i, v) => {
                let l = &mut lines[i % n];
                if let Some(colon) = l.find(':') {
                    l.truncate(colon + 1);
                    l.push_str(v);
                }
            }
        }
    }
    lines.join("\n")
}

/// Renders `text` from a file of its own, in every format; the error, if any.
fn render_text(text: &str, case: u64) -> Result<(), RenderError> {
    let dir = std::env::temp_dir().join(format!("portmapper-fuzz-render-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("case-{case}.yaml"));
    std::fs::write(&file, text).unwrap();
    let mut result = Ok(());
    for (output, assume) in [
        (Format::Yaml, Assume::Abstain),
        (Format::Table, Assume::Include),
    ] {
        let options = RenderOptions {
            filenames: vec![file.clone()],
            assume,
            output,
            namespace: "default".into(),
        };
        let mut out = Vec::new();
        result = render::run(&options, &mut out);
        if result.is_ok() {
            assert!(!out.is_empty() || text.trim().is_empty() || !text.contains("PortMapping"));
        }
    }
    let _ = std::fs::remove_file(&file);
    result
}

fn check(text: &str, case: u64) -> Result<(), TestCaseError> {
    if let Err(e) = render_text(text, case) {
        let message = e.to_string();
        prop_assert!(!message.is_empty(), "{:?}", e);
        if let RenderError::Input(errors) = &e {
            prop_assert!(!errors.is_empty());
            for err in errors {
                // Every input error names the file it is about.
                prop_assert!(
                    err.to_string().contains("portmapper-fuzz-render"),
                    "{}",
                    err
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(fuzz_budget::config())]

    #[test]
    fn fuzz_render_any_text(text in prop_oneof![any::<String>(), "[ -~\n\t:{}\\[\\],-]{0,400}"], case in any::<u64>()) {
        check(&text, case)?;
    }

    #[test]
    fn fuzz_render_corrupted_manifests(edits in proptest::collection::vec(edit(), 1..6), case in any::<u64>()) {
        check(&mutate(&seed(), &edits), case)?;
    }
}

/// The unmutated seed renders: the mutations start from valid input.
#[test]
fn fuzz_render_seed_is_valid() {
    render_text(&seed(), 0).unwrap();
}
