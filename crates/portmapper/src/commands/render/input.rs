//! Reading manifests for `portmapper render`: files and directories (recursively), multi-document
//! YAML or JSON, `List` objects, each object remembered with the file, document and line it came
//! from so every error can point at it.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use portmapper_api::PortMapping;
use serde::de::DeserializeOwned;

/// Where an object came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// The file (`-` for stdin).
    pub file: PathBuf,
    /// 1-based document number in the file, counting documents that have content.
    pub document: usize,
    /// 1-based line where the document's content starts (or where an error was found).
    pub line: usize,
    /// Index in the `items` of a `List` document.
    pub item: Option<usize>,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: document {}",
            self.file.display(),
            self.line,
            self.document
        )?;
        if let Some(i) = self.item {
            write!(f, ", items[{i}]")?;
        }
        Ok(())
    }
}

/// One object render understands.
#[derive(Clone, Debug)]
pub enum Object {
    /// `portmapper.dev/v1alpha1` PortMapping.
    PortMapping(Box<PortMapping>),
    /// `v1` Service.
    Service(Box<Service>),
    /// `v1` Pod.
    Pod(Box<Pod>),
    /// `v1` Node (for zones).
    Node(Box<Node>),
}

/// An object and where it came from.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// Where.
    pub source: Source,
    /// What.
    pub object: Object,
}

/// A problem with the input, pointing at the file (and document) it is in.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// A file or directory could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A directory holds no manifest file.
    #[error("{}: no *.yaml, *.yml or *.json files found", path.display())]
    EmptyDirectory {
        /// The directory.
        path: PathBuf,
    },
    /// Something is wrong with one document or object.
    #[error("{at}: {message}")]
    Invalid {
        /// Where.
        at: Source,
        /// What.
        message: String,
    },
}

/// The kinds render reads, for error messages.
pub const SUPPORTED: &str =
    "portmapper.dev/v1alpha1 PortMapping, v1 Service, v1 Pod, v1 Node (and v1 List of them)";

/// Reads every manifest under `paths` (files, directories read recursively in name order, or
/// `-` for stdin). Returns every error found, not only the first.
pub fn load(paths: &[PathBuf]) -> Result<Vec<Loaded>, Vec<InputError>> {
    let mut loaded = Vec::new();
    let mut errors = Vec::new();
    for path in paths {
        let files = match expand(path) {
            Ok(files) => files,
            Err(err) => {
                errors.push(err);
                continue;
            }
        };
        for file in files {
            match read(&file) {
                Ok(text) => parse_file(&file, &text, &mut loaded, &mut errors),
                Err(source) => errors.push(InputError::Read { path: file, source }),
            }
        }
    }
    if errors.is_empty() {
        Ok(loaded)
    } else {
        Err(errors)
    }
}

fn read(path: &Path) -> std::io::Result<String> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text)?;
        return Ok(text);
    }
    std::fs::read_to_string(path)
}

fn is_manifest(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    )
}

/// A file as given, or the manifest files of a directory tree in name order.
fn expand(path: &Path) -> Result<Vec<PathBuf>, InputError> {
    if path == Path::new("-") {
        return Ok(vec![path.to_owned()]);
    }
    let meta = std::fs::metadata(path).map_err(|source| InputError::Read {
        path: path.to_owned(),
        source,
    })?;
    if !meta.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut files = Vec::new();
    walk(path, &mut files)?;
    if files.is_empty() {
        return Err(InputError::EmptyDirectory {
            path: path.to_owned(),
        });
    }
    Ok(files)
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) -> Result<(), InputError> {
    let read_err = |source| InputError::Read {
        path: dir.to_owned(),
        source,
    };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(read_err)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(read_err)?;
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            walk(&entry, files)?;
        } else if is_manifest(&entry) {
            files.push(entry);
        }
    }
    Ok(())
}

/// One YAML document of a file: its text and the 1-based line its text starts at.
struct Chunk {
    first_line: usize,
    content_line: usize,
    text: String,
}

/// Splits at `---` lines, as kubectl does; documents with nothing but comments are dropped.
fn split_documents(text: &str) -> Vec<Chunk> {
    let mut chunks = Vec::new();
    let mut current = Chunk {
        first_line: 1,
        content_line: 0,
        text: String::new(),
    };
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let separator = line == "---" || line.starts_with("--- ") || line.starts_with("---\t");
        if separator {
            chunks.push(std::mem::replace(
                &mut current,
                Chunk {
                    first_line: n + 1,
                    content_line: 0,
                    text: String::new(),
                },
            ));
            continue;
        }
        let trimmed = line.trim();
        if current.content_line == 0 && !trimmed.is_empty() && !trimmed.starts_with('#') {
            current.content_line = n;
        }
        current.text.push_str(line);
        current.text.push('\n');
    }
    chunks.push(current);
    chunks.retain(|c| c.content_line != 0);
    chunks
}

/// serde_yaml's message with its document-relative lines made file-relative (the primary
/// location dropped: it is returned as the line), and the absolute line.
fn yaml_error(err: &serde_yaml::Error, chunk: &Chunk) -> (usize, String) {
    let mut message = err.to_string();
    let Some(loc) = err.location() else {
        return (chunk.content_line, message);
    };
    let primary = format!(" at line {} column {}", loc.line(), loc.column());
    if let Some(at) = message.find(&primary) {
        message.replace_range(at..at + primary.len(), "");
    }
    (
        chunk.first_line + loc.line() - 1,
        shift_lines(&message, chunk.first_line - 1),
    )
}

/// Adds `offset` to every `line N` in a parser message.
fn shift_lines(message: &str, offset: usize) -> String {
    const MARK: &str = "line ";
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(MARK) {
        let (before, after) = rest.split_at(at + MARK.len());
        out.push_str(before);
        let digits = after.chars().take_while(char::is_ascii_digit).count();
        match after[..digits].parse::<usize>() {
            Ok(n) => out.push_str(&(n + offset).to_string()),
            Err(_) => out.push_str(&after[..digits]),
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

/// A document's text, or a `List` item already parsed.
enum Doc<'a> {
    Text(&'a Chunk),
    Value(&'a serde_yaml::Value),
}

/// A problem in a document: the absolute line when known, and the message.
type DocError = (Option<usize>, String);

fn parse_file(file: &Path, text: &str, loaded: &mut Vec<Loaded>, errors: &mut Vec<InputError>) {
    for (index, chunk) in split_documents(text).iter().enumerate() {
        let at = Source {
            file: file.to_owned(),
            document: index + 1,
            line: chunk.content_line,
            item: None,
        };
        let invalid = |at: &Source, (line, message): DocError| InputError::Invalid {
            at: Source {
                line: line.unwrap_or(at.line),
                ..at.clone()
            },
            message,
        };
        let value: serde_yaml::Value = match serde_yaml::from_str(&chunk.text) {
            Ok(v) => v,
            Err(err) => {
                let (line, message) = yaml_error(&err, chunk);
                errors.push(invalid(
                    &at,
                    (Some(line), format!("not valid YAML: {message}")),
                ));
                continue;
            }
        };
        if value.is_null() {
            continue;
        }
        let (api_version, kind) = type_of(&value);
        if kind == "List" && api_version == "v1" {
            let items = value
                .get("items")
                .and_then(serde_yaml::Value::as_sequence)
                .map(Vec::as_slice)
                .unwrap_or_default();
            for (i, item) in items.iter().enumerate() {
                let at = Source {
                    item: Some(i),
                    ..at.clone()
                };
                let (api_version, kind) = type_of(item);
                match object_from(&api_version, &kind, &Doc::Value(item))
                    .and_then(|o| check_unknown_fields(o, item))
                {
                    Ok(object) => loaded.push(Loaded { source: at, object }),
                    Err(err) => errors.push(invalid(&at, err)),
                }
            }
            continue;
        }
        match object_from(&api_version, &kind, &Doc::Text(chunk))
            .and_then(|o| check_unknown_fields(o, &value))
        {
            Ok(object) => loaded.push(Loaded { source: at, object }),
            Err(err) => errors.push(invalid(&at, err)),
        }
    }
}

/// A PortMapping spec field the types do not know is an error, as the API server's strict field
/// validation (kubectl's default) makes it: a typo such as `legacyEndpoint` must not pass a
/// review silently.
fn check_unknown_fields(object: Object, given: &serde_yaml::Value) -> Result<Object, DocError> {
    let Object::PortMapping(pm) = &object else {
        return Ok(object);
    };
    let known = serde_yaml::to_value(&pm.spec).map_err(|e| (None, e.to_string()))?;
    let mut unknown = Vec::new();
    if let Some(spec) = given.get("spec") {
        unknown_fields(spec, &known, "spec", &mut unknown);
    }
    if unknown.is_empty() {
        Ok(object)
    } else {
        Err((
            None,
            format!(
                "PortMapping has unknown fields (the API server rejects them): {}",
                unknown.join(", ")
            ),
        ))
    }
}

/// Paths of `given` that the typed round trip `known` dropped (nulls and empty lists aside: the
/// types skip serialising absent options and empty lists).
fn unknown_fields(
    given: &serde_yaml::Value,
    known: &serde_yaml::Value,
    path: &str,
    out: &mut Vec<String>,
) {
    use serde_yaml::Value;
    let empty = |v: &Value| match v {
        Value::Null => true,
        Value::Sequence(s) => s.is_empty(),
        _ => false,
    };
    match (given, known) {
        (Value::Mapping(g), Value::Mapping(k)) => {
            for (key, value) in g {
                let name = key.as_str().unwrap_or_default();
                match k.get(key) {
                    Some(kv) => unknown_fields(value, kv, &format!("{path}.{name}"), out),
                    None if !empty(value) => out.push(format!("{path}.{name}")),
                    None => {}
                }
            }
        }
        (Value::Sequence(g), Value::Sequence(k)) => {
            for (i, (gv, kv)) in g.iter().zip(k).enumerate() {
                unknown_fields(gv, kv, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn type_of(value: &serde_yaml::Value) -> (String, String) {
    let field = |name: &str| {
        value
            .get(name)
            .and_then(serde_yaml::Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    (field("apiVersion"), field("kind"))
}

fn typed<T: DeserializeOwned>(kind: &str, doc: &Doc<'_>) -> Result<T, DocError> {
    match doc {
        Doc::Text(chunk) => serde_yaml::from_str(&chunk.text).map_err(|e| {
            let (line, message) = yaml_error(&e, chunk);
            (Some(line), format!("not a valid {kind}: {message}"))
        }),
        Doc::Value(value) => serde_yaml::from_value((*value).clone())
            .map_err(|e| (None, format!("not a valid {kind}: {e}"))),
    }
}

/// The typed object of a document, or why it is not one render reads.
fn object_from(api_version: &str, kind: &str, doc: &Doc<'_>) -> Result<Object, DocError> {
    if kind.is_empty() || api_version.is_empty() {
        return Err((
            None,
            format!("the document has no apiVersion or kind; render reads {SUPPORTED}"),
        ));
    }
    match (api_version, kind) {
        ("portmapper.dev/v1alpha1", "PortMapping") => {
            typed(kind, doc).map(|o| Object::PortMapping(Box::new(o)))
        }
        ("v1", "Service") => typed(kind, doc).map(|o| Object::Service(Box::new(o))),
        ("v1", "Pod") => typed(kind, doc).map(|o| Object::Pod(Box::new(o))),
        ("v1", "Node") => typed(kind, doc).map(|o| Object::Node(Box::new(o))),
        _ => Err((
            None,
            format!("{api_version} {kind} is not an input of render; it reads {SUPPORTED}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_keep_their_lines_and_skip_comment_only_ones() {
        let text = "# header\n---\na: 1\n---\n# only a comment\n---\n\nb: 2\n";
        let chunks = split_documents(text);
        assert_eq!(chunks.len(), 2);
        assert_eq!((chunks[0].first_line, chunks[0].content_line), (3, 3));
        assert_eq!((chunks[1].first_line, chunks[1].content_line), (7, 8));
    }

    #[test]
    fn errors_name_file_document_and_absolute_line() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Pod\nmetadata: [\n";
        let (mut loaded, mut errors) = (Vec::new(), Vec::new());
        parse_file(Path::new("x.yaml"), text, &mut loaded, &mut errors);
        assert_eq!(loaded.len(), 1);
        let msg = errors[0].to_string();
        assert!(
            msg.starts_with("x.yaml:8: document 2: not valid YAML"),
            "{msg}"
        );
    }

    #[test]
    fn unknown_port_mapping_fields_are_named() {
        let text = "apiVersion: portmapper.dev/v1alpha1\nkind: PortMapping\nmetadata: {name: a}\nspec:\n  serviceRef: {name: web}\n  pods: {key: k, selector: {}}\n  legacyEndpoint: true\n  ports: [{name: http, checks: [{podReady: {}, podReadyy: {}}]}]\n  defaultChecks: []\n";
        let (mut loaded, mut errors) = (Vec::new(), Vec::new());
        parse_file(Path::new("x.yaml"), text, &mut loaded, &mut errors);
        assert!(loaded.is_empty());
        assert_eq!(
            errors[0].to_string(),
            "x.yaml:1: document 1: PortMapping has unknown fields (the API server rejects them): spec.legacyEndpoint, spec.ports[0].checks[0].podReadyy"
        );
    }

    #[test]
    fn unknown_kinds_and_lists() {
        let text = "apiVersion: apps/v1\nkind: Deployment\n---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Node, metadata: {name: n}}\n- {apiVersion: v1, kind: ConfigMap}\n";
        let (mut loaded, mut errors) = (Vec::new(), Vec::new());
        parse_file(Path::new("x.yaml"), text, &mut loaded, &mut errors);
        assert_eq!(loaded.len(), 1);
        assert!(matches!(loaded[0].object, Object::Node(_)));
        let msgs: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            msgs[0],
            format!(
                "x.yaml:1: document 1: apps/v1 Deployment is not an input of render; it reads {SUPPORTED}"
            )
        );
        assert!(msgs[1].starts_with("x.yaml:4: document 2, items[1]: v1 ConfigMap"));
    }
}
