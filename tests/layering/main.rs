//! Every crate's top-level modules form a layering: no module cycles; and inside every folder
//! module, its files do too ([`no_folder_has_a_file_cycle`]).
//!
//! Reads each crate's `src/**/*.rs` (not `src/bin/`, not the crate root `lib.rs`/`main.rs`, which
//! only declares and re-exports) and collects, per top-level module, the other top-level modules
//! it names: `use crate::x`, `crate::x::…`, `crate::{x, y}`, and `super::x` where `super` reaches
//! the crate root. A name the root re-exports (`crate::Check` after `pub use check::Check`)
//! counts as its module. `#[cfg(test)]` items are ignored: a test may build its inputs with a
//! higher module's helpers without that being a production dependency. Comments, strings and
//! character literals are skipped, so a doc link or a message naming a module is no edge.
//!
//! A text scan, not a Rust parser (no new dependency): macros that build paths from fragments and
//! `#[path]` modules are not seen. It is exact for how this workspace writes paths, and the
//! `analyze_*` tests below pin what it reads.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Crates not checked (none: every crate's modules form a layering; `portmapper-core` joined
/// once its `check → probe_targets → planner → membership → check` cycle was gone).
const EXCLUDED: &[&str] = &[];

/// Where one module names another: the file and line of the first reference.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Site {
    file: String,
    line: usize,
}

/// Top-level module → the top-level modules it names, each with its first reference.
type Graph = BTreeMap<String, BTreeMap<String, Site>>;

#[test]
fn no_crate_has_a_module_cycle() {
    let crates_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates");
    let mut crate_dirs: Vec<PathBuf> = std::fs::read_dir(&crates_dir)
        .expect("read crates/")
        .map(|e| e.expect("crates/ entry").path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    crate_dirs.sort();
    let mut checked = Vec::new();
    let mut report = String::new();
    for dir in &crate_dirs {
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .expect("crate directory name")
            .to_string();
        if EXCLUDED.contains(&name.as_str()) {
            continue;
        }
        let graph = analyze(&read_sources(&dir.join("src")));
        for cycle in cycles(&graph) {
            let _ = writeln!(report, "{name}: {}", describe(&graph, &cycle));
        }
        checked.push(name);
    }
    // A wrong path would check nothing and pass.
    assert_eq!(
        checked.len() + EXCLUDED.len(),
        crate_dirs.len(),
        "checked {checked:?}"
    );
    assert!(checked.len() >= 7, "checked {checked:?}");
    assert!(report.is_empty(), "module cycles:\n{report}");
}

/// File-level cycles still to open, by crate and folder, each as its sorted members (none:
/// the planner's were opened by moving what both sides needed one floor down). The test fails
/// when a listed one is gone, so the list never outlives its cycles.
const KNOWN_FILE_CYCLES: &[(&str, &str, &[&str])] = &[];

/// Inside every folder module (`src/<folder>/…`, at any depth), its files form a layering: a
/// file (or subfolder) names a sibling through `super::sibling` or `crate::folder::sibling`, or
/// an item of the folder's `mod.rs` (node `mod`). What `mod.rs` itself names is left out: it
/// declares its children and re-exports what they define, which is no dependency on them.
#[test]
fn no_folder_has_a_file_cycle() {
    let crates_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates");
    let mut crate_dirs: Vec<PathBuf> = std::fs::read_dir(&crates_dir)
        .expect("read crates/")
        .map(|e| e.expect("crates/ entry").path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    crate_dirs.sort();
    let mut report = String::new();
    let mut known_seen = BTreeSet::new();
    let mut folders = 0;
    for dir in &crate_dirs {
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .expect("crate directory name")
            .to_string();
        for (folder, graph) in folder_graphs(&read_sources(&dir.join("src"))) {
            folders += 1;
            for cycle in cycles(&graph) {
                let known = KNOWN_FILE_CYCLES.iter().position(|(c, f, members)| {
                    *c == name && *f == folder && cycle.iter().eq(members.iter())
                });
                match known {
                    Some(i) => {
                        known_seen.insert(i);
                    }
                    None => {
                        let _ = writeln!(report, "{name} {folder}/: {}", describe(&graph, &cycle));
                    }
                }
            }
        }
    }
    assert!(folders >= 10, "folders checked: {folders}");
    assert!(report.is_empty(), "file cycles:\n{report}");
    let gone: Vec<_> = (0..KNOWN_FILE_CYCLES.len())
        .filter(|i| !known_seen.contains(i))
        .map(|i| KNOWN_FILE_CYCLES[i])
        .collect();
    assert!(
        gone.is_empty(),
        "no longer cycles, take them off KNOWN_FILE_CYCLES: {gone:?}"
    );
}

/// The module path of a source file under `src/`: `index/pods.rs` → `index::pods`,
/// `index/mod.rs` → `index`.
fn module_path(path: &str) -> Vec<String> {
    let mut parts: Vec<String> = path.split('/').map(str::to_string).collect();
    let last = parts.pop().unwrap_or_default();
    if last != "mod.rs" {
        parts.push(last.trim_end_matches(".rs").to_string());
    }
    parts
}

/// Per folder module (`a`, `a::b`, …, as `a/b`), the graph of its children (files and
/// subfolders, plus `mod` for its own `mod.rs`).
fn folder_graphs(files: &[(String, String)]) -> BTreeMap<String, Graph> {
    let is_root = |path: &str| path == "lib.rs" || path == "main.rs";
    let paths: Vec<(Vec<String>, &String, &String)> = files
        .iter()
        .filter(|(path, _)| !is_root(path))
        .map(|(path, text)| (module_path(path), path, text))
        .collect();
    // Folders: the module paths of every `mod.rs`.
    let folders: BTreeSet<Vec<String>> = files
        .iter()
        .filter(|(path, _)| path.ends_with("/mod.rs"))
        .map(|(path, _)| module_path(path))
        .collect();
    let mut graphs = BTreeMap::new();
    for folder in &folders {
        let depth = folder.len();
        let node_of = |module: &[String]| -> Option<String> {
            if module.len() < depth || module[..depth] != folder[..] {
                return None;
            }
            Some(module.get(depth).cloned().unwrap_or_else(|| "mod".into()))
        };
        let mut graph: Graph = paths
            .iter()
            .filter_map(|(module, _, _)| node_of(module))
            .map(|n| (n, BTreeMap::new()))
            .collect();
        for (module, path, text) in &paths {
            let Some(from) = node_of(module) else {
                continue;
            };
            let own_mod_rs = path.ends_with("mod.rs") && module.len() == depth;
            if own_mod_rs {
                continue;
            }
            let toks = tokens(&without_test_items(&clean(text)));
            for (target, line) in absolute_references(&toks, module) {
                let Some(to) = node_of(&target) else { continue };
                // A name that is no child of the folder is an item of its `mod.rs`.
                let to = if graph.contains_key(&to) {
                    to
                } else {
                    "mod".into()
                };
                if to != from {
                    let edges = graph.get_mut(&from).expect("every child is a node");
                    edges.entry(to).or_insert_with(|| Site {
                        file: format!("src/{path}"),
                        line,
                    });
                }
            }
        }
        graphs.insert(folder.join("/"), graph);
    }
    graphs
}

/// Every `crate::…`, `super::…` and `self::…` path of a file, as an absolute module path (its
/// segments up to the first that is not a name), with its line. `module`: the file's own module
/// path (a `mod.rs` is its folder's module, so its `super` is the folder's parent).
fn absolute_references(toks: &[Token], module: &[String]) -> Vec<(Vec<String>, usize)> {
    let is = |i: usize, s: &str| toks.get(i).is_some_and(|t| t.text == s);
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let t = toks[i].text.as_str();
        let preceded = i >= 1 && is(i - 1, "::");
        let start = match t {
            "crate" if is(i + 1, "::") && !preceded => Some((Vec::new(), i + 2)),
            "self" if is(i + 1, "::") && !preceded => Some((module.to_vec(), i + 2)),
            "super" if is(i + 1, "::") && !preceded => {
                let mut base = module.to_vec();
                let mut j = i;
                while is(j, "super") && is(j + 1, "::") {
                    base.pop();
                    j += 2;
                }
                Some((base, j))
            }
            _ => None,
        };
        if let Some((base, at)) = start {
            for (path, line) in paths_at(toks, at) {
                let mut full = base.clone();
                full.extend(path);
                out.push((full, line));
            }
        }
        i += 1;
    }
    out
}

/// The paths at `at`: `a::b::c` gives `[a, b, c]`; `a::{b, c::d}` gives `[a, b]` and
/// `[a, c, d]` (segments up to the first that is not a name).
fn paths_at(toks: &[Token], at: usize) -> Vec<(Vec<String>, usize)> {
    let name = |t: &Token| t.text.chars().all(|c| c.is_alphanumeric() || c == '_');
    let mut prefix = Vec::new();
    let mut i = at;
    while let Some(tok) = toks.get(i) {
        if tok.text == "{" {
            // Each entry of the group, split at its top-level commas.
            let mut out = Vec::new();
            let (mut depth, mut entry) = (0usize, i + 1);
            let mut j = i;
            while let Some(t) = toks.get(j) {
                match t.text.as_str() {
                    "{" => depth += 1,
                    "}" => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    "," if depth == 1 => {
                        for (p, line) in paths_at(toks, entry) {
                            out.push(([prefix.clone(), p].concat(), line));
                        }
                        entry = j + 1;
                    }
                    _ => {}
                }
                j += 1;
            }
            if toks.get(entry).is_some_and(|t| t.text != "}") {
                for (p, line) in paths_at(toks, entry) {
                    out.push(([prefix.clone(), p].concat(), line));
                }
            }
            return out;
        }
        if !name(tok) || tok.text == "self" {
            break;
        }
        prefix.push(tok.text.clone());
        if toks.get(i + 1).is_some_and(|t| t.text == "::") {
            i += 2;
        } else {
            break;
        }
    }
    let line = toks.get(at).map_or(0, |t| t.line);
    if prefix.is_empty() {
        Vec::new()
    } else {
        vec![(prefix, line)]
    }
}

#[test]
fn folder_graphs_see_sibling_and_facade_edges_but_not_the_facades_own() {
    let graphs = folder_graphs(&sources(&[
        ("lib.rs", "pub mod f;"),
        (
            "f/mod.rs",
            "mod a; mod b; pub use a::X; use crate::f::b::Y; pub struct Shared;",
        ),
        ("f/a.rs", "use super::b::Y;\nuse super::Shared;"),
        ("f/b.rs", "use crate::f::{c::Z, Shared};"),
        ("f/c/mod.rs", "use super::super::f::a::X;"),
        (
            "f/c/inner.rs",
            "use super::super::a::X;\nfn f() { self::g(); }",
        ),
        ("other.rs", "use crate::f::a::X;"),
    ]));
    assert_eq!(graphs.keys().collect::<Vec<_>>(), ["f", "f/c"]);
    assert_eq!(
        edges(&graphs["f"]),
        ["a->b", "a->mod", "b->c", "b->mod", "c->a"]
    );
    assert_eq!(edges(&graphs["f/c"]), Vec::<String>::new());
    assert_eq!(
        cycles(&graphs["f"]),
        [vec!["a".to_string(), "b".into(), "c".into()]]
    );
}

/// The sources of one crate, as (path under `src/`, text), root and binaries left out.
fn read_sources(src: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read source directory") {
            let path = entry.expect("source entry").path();
            let rel = path
                .strip_prefix(src)
                .expect("under src")
                .to_string_lossy()
                .replace('\\', "/");
            if path.is_dir() {
                if rel != "bin" {
                    dirs.push(path);
                }
            } else if rel.ends_with(".rs") {
                let text = std::fs::read_to_string(&path).expect("read source file");
                files.push((rel, text));
            }
        }
    }
    files.sort();
    files
}

/// The module graph of one crate's sources (paths relative to `src/`).
fn analyze(files: &[(String, String)]) -> Graph {
    let is_root = |path: &str| path == "lib.rs" || path == "main.rs";
    let modules: BTreeSet<String> = files
        .iter()
        .filter(|(path, _)| !is_root(path))
        .map(|(path, _)| top_module(path))
        .collect();
    let reexports: BTreeMap<String, String> = files
        .iter()
        .filter(|(path, _)| path == "lib.rs")
        .flat_map(|(_, text)| root_reexports(&tokens(&without_test_items(&clean(text)))))
        .filter(|(_, module)| modules.contains(module))
        .collect();
    let mut graph: Graph = modules
        .iter()
        .map(|m| (m.clone(), BTreeMap::new()))
        .collect();
    for (path, text) in files.iter().filter(|(path, _)| !is_root(path)) {
        let from = top_module(path);
        let toks = tokens(&without_test_items(&clean(text)));
        for (name, line) in crate_references(&toks, file_depth(path)) {
            let target = if modules.contains(&name) {
                name
            } else if let Some(module) = reexports.get(&name) {
                module.clone()
            } else {
                continue; // an item of the root itself, or a path outside the crate
            };
            if target != from {
                let edges = graph.get_mut(&from).expect("every module is a node");
                edges.entry(target).or_insert_with(|| Site {
                    file: format!("src/{path}"),
                    line,
                });
            }
        }
    }
    graph
}

/// `check.rs` → `check`, `planner/mod.rs` and `planner/pack.rs` → `planner`.
fn top_module(path: &str) -> String {
    let first = path.split('/').next().unwrap_or(path);
    first.strip_suffix(".rs").unwrap_or(first).to_string()
}

/// How many `super::` lead from the file's top level to the crate root.
fn file_depth(path: &str) -> usize {
    let parts = path.split('/').count();
    if path.ends_with("/mod.rs") {
        parts - 1
    } else {
        parts
    }
}

/// The source with comments removed and string and character literals emptied; line breaks kept
/// so lines still count.
fn clean(src: &str) -> String {
    let s: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    // Keeps the line breaks of a skipped span.
    let skip = |out: &mut String, from: usize, to: usize| {
        out.extend(s[from..to.min(s.len())].iter().filter(|c| **c == '\n'));
    };
    while i < s.len() {
        let c = s[i];
        let next = s.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let (start, mut depth) = (i, 0usize);
            while i < s.len() {
                if s[i] == '/' && s.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if s[i] == '*' && s.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            skip(&mut out, start, i);
        } else if (c == 'r' || c == 'b') && (i == 0 || !ident(s[i - 1])) && raw_string_at(&s, i) {
            let start = i;
            while s[i] != 'r' {
                i += 1;
            }
            i += 1;
            let hashes = s[i..].iter().take_while(|c| **c == '#').count();
            i += hashes + 1;
            while i < s.len()
                && !(s[i] == '"'
                    && s[i + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|c| **c == '#')
                        .count()
                        == hashes)
            {
                i += 1;
            }
            i += 1 + hashes;
            skip(&mut out, start, i);
            out.push_str("\"\"");
        } else if c == '"' {
            let start = i;
            i += 1;
            while i < s.len() && s[i] != '"' {
                i += if s[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            skip(&mut out, start, i);
            out.push_str("\"\"");
        } else if c == '\'' {
            // A character literal ('a', '\n', '\u{1F600}', '\''), else a lifetime ('a).
            let end = if next == Some('\\') {
                (i + 2..s.len()).find(|&j| s[j] == '\'' && j > i + 2)
            } else if s.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(end) => {
                    out.push_str("' '");
                    i = end + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Whether a raw string (`r"`, `r#"`, `br"`, `br#"`) starts at `i`.
fn raw_string_at(s: &[char], i: usize) -> bool {
    let mut j = i;
    if s[j] == 'b' {
        j += 1;
    }
    if s.get(j) != Some(&'r') {
        return false;
    }
    j += 1;
    while s.get(j) == Some(&'#') {
        j += 1;
    }
    s.get(j) == Some(&'"')
}

/// Blanks every item marked `#[cfg(test)]` (up to its `;` or its closing brace), keeping lines.
fn without_test_items(src: &str) -> String {
    const MARK: &str = "#[cfg(test)]";
    let mut out = src.to_string();
    let mut from = 0;
    while let Some(pos) = out[from..].find(MARK).map(|p| p + from) {
        let bytes = out.as_bytes();
        let mut j = pos + MARK.len();
        let mut depth = 0usize;
        let mut opened = false;
        // Further attributes belong to the same item; brackets are skipped with the rest.
        let mut brackets = 0usize;
        while j < bytes.len() {
            match bytes[j] {
                b'[' => brackets += 1,
                b']' => brackets = brackets.saturating_sub(1),
                b'{' if brackets == 0 => {
                    depth += 1;
                    opened = true;
                }
                b'}' if brackets == 0 => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 && opened {
                        j += 1;
                        break;
                    }
                }
                b';' if brackets == 0 && depth == 0 => {
                    j += 1;
                    break;
                }
                _ => {}
            }
            j += 1;
        }
        let blank: String = out[pos..j]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(pos..j, &blank);
        from = j;
    }
    out
}

/// One token: an identifier, `::`, or a single punctuation character, with its line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Token {
    text: String,
    line: usize,
}

fn tokens(src: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut line = 1;
    let chars: Vec<char> = src.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token {
                text: chars[start..i].iter().collect(),
                line,
            });
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push(Token {
                text: "::".into(),
                line,
            });
            i += 2;
        } else {
            out.push(Token {
                text: c.to_string(),
                line,
            });
            i += 1;
        }
    }
    out
}

/// The first path segment after every `crate::` (and after a `super::` chain that reaches the
/// crate root from a file `depth` levels down), with its line; `crate::{a, b::c}` gives `a`, `b`.
fn crate_references(toks: &[Token], depth: usize) -> Vec<(String, usize)> {
    let is = |i: usize, s: &str| toks.get(i).is_some_and(|t| t.text == s);
    let mut refs = Vec::new();
    // One entry per open brace: whether it opens an inline `mod x { … }`.
    let mut braces: Vec<bool> = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i].text;
        if t == "{" {
            braces.push(i >= 2 && is(i - 2, "mod"));
        } else if t == "}" {
            braces.pop();
        }
        let after = if t == "crate" && is(i + 1, "::") {
            Some(i + 2)
        } else if t == "super" && is(i + 1, "::") && !(i >= 1 && is(i - 1, "::")) {
            let mut j = i;
            let mut supers = 0;
            while is(j, "super") && is(j + 1, "::") {
                supers += 1;
                j += 2;
            }
            let inline_mods = braces.iter().filter(|m| **m).count();
            (supers == depth + inline_mods).then_some(j)
        } else {
            None
        };
        if let Some(j) = after {
            refs.extend(first_segments(toks, j));
        }
        i += 1;
    }
    refs
}

/// The first segment of the path at `at`: an identifier, or each entry of a `{…}` group.
fn first_segments(toks: &[Token], at: usize) -> Vec<(String, usize)> {
    let Some(tok) = toks.get(at) else {
        return Vec::new();
    };
    if tok.text != "{" {
        let ident = tok.text.chars().all(|c| c.is_alphanumeric() || c == '_');
        return if ident {
            vec![(tok.text.clone(), tok.line)]
        } else {
            Vec::new()
        };
    }
    let mut found = Vec::new();
    let mut depth = 0usize;
    let mut entry_start = true;
    for tok in &toks[at..] {
        match tok.text.as_str() {
            "{" => {
                depth += 1;
                entry_start = depth == 1;
                continue;
            }
            "}" => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            "," if depth == 1 => {
                entry_start = true;
                continue;
            }
            text if entry_start && depth == 1 && text != "self" && text != "*" => {
                found.push((text.to_string(), tok.line));
            }
            _ => {}
        }
        entry_start = false;
    }
    found
}

/// The names the crate root re-exports from its own modules (`pub use check::{Check, Kind as
/// K}` gives `Check` and `K` → `check`).
fn root_reexports(toks: &[Token]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        match toks[i].text.as_str() {
            "{" => depth += 1,
            "}" => depth = depth.saturating_sub(1),
            "use" if depth == 0 => {
                let end = (i..toks.len())
                    .find(|&j| toks[j].text == ";")
                    .unwrap_or(toks.len());
                let mut path = &toks[i + 1..end];
                if path
                    .first()
                    .is_some_and(|t| t.text == "crate" || t.text == "self")
                {
                    path = &path[2.min(path.len())..];
                }
                if let [module, sep, rest @ ..] = path
                    && sep.text == "::"
                {
                    for (k, tok) in rest.iter().enumerate() {
                        let leaf = rest
                            .get(k + 1)
                            .is_none_or(|n| n.text == "," || n.text == "}");
                        if leaf && tok.text.chars().all(|c| c.is_alphanumeric() || c == '_') {
                            out.push((tok.text.clone(), module.text.clone()));
                        }
                    }
                }
                i = end;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Every strongly connected component of more than one module, each sorted, in name order.
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    // Tarjan's algorithm; recursion depth is bounded by a crate's module count.
    struct State<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'g>(st: &mut State<'g>, v: &'g str) {
        let n = st.index.len();
        st.index.insert(v, n);
        st.low.insert(v, n);
        st.stack.push(v);
        for w in st.graph[v].keys() {
            let w = w.as_str();
            if !st.index.contains_key(w) {
                visit(st, w);
                let low = st.low[v].min(st.low[w]);
                st.low.insert(v, low);
            } else if st.stack.contains(&w) {
                let low = st.low[v].min(st.index[w]);
                st.low.insert(v, low);
            }
        }
        if st.low[v] == st.index[v] {
            let mut component = Vec::new();
            while let Some(w) = st.stack.pop() {
                component.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                st.found.push(component);
            }
        }
    }
    let mut st = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !st.index.contains_key(v.as_str()) {
            visit(&mut st, v);
        }
    }
    st.found.sort();
    st.found
}

/// One shortest cycle through the component's first module, each edge with where it is made,
/// and the component's other members.
fn describe(graph: &Graph, component: &[String]) -> String {
    let start = &component[0];
    let members: BTreeSet<&String> = component.iter().collect();
    // Breadth-first inside the component, back to `start`.
    let mut previous: BTreeMap<&String, &String> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    let mut last = None;
    while let Some(v) = queue.pop_front() {
        for w in graph[v].keys().filter(|w| members.contains(w)) {
            if w == start {
                last = Some(v);
                break;
            }
            if !previous.contains_key(w) {
                previous.insert(w, v);
                queue.push_back(w);
            }
        }
        if last.is_some() {
            break;
        }
    }
    let mut path = vec![start];
    let mut v = last.expect("a strongly connected component has a cycle");
    while v != start {
        path.push(v);
        v = previous[v];
    }
    path[1..].reverse();
    path.push(start);
    let edges: Vec<String> = path
        .windows(2)
        .map(|w| {
            let site = &graph[w[0]][w[1]];
            format!("{} → {} ({}:{})", w[0], w[1], site.file, site.line)
        })
        .collect();
    format!("{} [component: {}]", edges.join(", "), component.join(", "))
}

fn sources(files: &[(&str, &str)]) -> Vec<(String, String)> {
    files
        .iter()
        .map(|(p, t)| (p.to_string(), t.to_string()))
        .collect()
}

fn edges(graph: &Graph) -> Vec<String> {
    graph
        .iter()
        .flat_map(|(from, to)| to.keys().map(move |t| format!("{from}->{t}")))
        .collect()
}

#[test]
fn analyze_reads_every_form_of_crate_path() {
    let graph = analyze(&sources(&[
        (
            "lib.rs",
            "pub mod a; pub mod b;\npub use b::{Thing, Other as Renamed};",
        ),
        ("a.rs", "use crate::b::X;\nfn f() { crate::c::go(); }"),
        ("b.rs", "use crate::{d, e::Y, self};\nuse super::f::Z;"),
        (
            "c.rs",
            "fn g() -> crate::Thing { todo!() }\nconst R: crate::Renamed = 1;",
        ),
        ("d/mod.rs", "use super::g::A;\nuse self::inner::B;"),
        ("d/inner.rs", "use super::super::h::C;\nuse super::B;"),
        (
            "e.rs",
            "mod nested { use super::super::f::D; use super::local; }",
        ),
        ("f.rs", ""),
        ("g.rs", ""),
        ("h.rs", ""),
    ]));
    assert_eq!(
        edges(&graph),
        [
            "a->b", "a->c", "b->d", "b->e", "b->f", "c->b", "d->g", "d->h", "e->f"
        ]
    );
    assert_eq!(
        graph["a"]["c"],
        Site {
            file: "src/a.rs".into(),
            line: 2
        }
    );
}

#[test]
fn analyze_skips_comments_strings_and_test_items() {
    let graph = analyze(&sources(&[
        (
            "a.rs",
            concat!(
                "//! see [`crate::b`]\n",
                "/* crate::b /* nested */ crate::b */\n",
                "const S: &str = \"crate::b::X\";\n",
                "const R: &str = r#\"crate::b \"quoted\" \"#;\n",
                "const C: char = '\"'; fn f<'a>(x: &'a str) -> &'a str { x }\n",
                "#[cfg(test)]\nmod tests { use crate::b::X; fn t() { crate::c::go(); } }\n",
                "#[cfg(test)]\nuse crate::c::Y;\n",
                "pub(crate) fn real() { crate::d::go() }\n",
            ),
        ),
        ("b.rs", "fn f() { let _ = 'x'; crate::a::real() }"),
        ("c.rs", ""),
        ("d.rs", ""),
    ]));
    assert_eq!(edges(&graph), ["a->d", "b->a"]);
    assert_eq!(graph["a"]["d"].line, 10);
}

#[test]
fn cycles_are_found_and_described_with_their_sites() {
    let graph = analyze(&sources(&[
        ("a.rs", "use crate::b::X;"),
        ("b.rs", "\nuse crate::c::Y;"),
        ("c.rs", "\n\nuse crate::a::Z; use crate::d::W;"),
        ("d.rs", "use crate::e::V;"),
        ("e.rs", "use crate::d::U;"),
        ("f.rs", "use crate::a::T;"),
    ]));
    let found = cycles(&graph);
    assert_eq!(found, [vec!["a", "b", "c"], vec!["d", "e"]]);
    assert_eq!(
        describe(&graph, &found[0]),
        "a → b (src/a.rs:1), b → c (src/b.rs:2), c → a (src/c.rs:3) [component: a, b, c]"
    );
    assert_eq!(
        describe(&graph, &found[1]),
        "d → e (src/d.rs:1), e → d (src/e.rs:1) [component: d, e]"
    );
}
