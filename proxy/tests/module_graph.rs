//! The proxy crate's top-level modules import each other without a circle (docs/architecture.md,
//! "Layout"). A circle is how placement goes wrong unnoticed: the session context living in the
//! accept loop's file, a helper every phase needs living in one phase. This test reads the sources
//! as text: every `crate::module` path outside comments is an edge from the file's top-level module
//! to that module, and the graph must have no cycle. A cycle fails with the modules on it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read proxy/src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a source file belongs to (`None` for the crate root).
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    match first.strip_suffix(".rs") {
        Some("lib") => None,
        Some(name) => Some(name.to_string()),
        None => Some(first),
    }
}

/// The code of a line, without its `//` comment (doc comments included). Good enough for this
/// crate's sources: no string literal here contains `//` before a `crate::` path.
fn code(line: &str) -> &str {
    match line.find("//") {
        Some(at) => &line[..at],
        None => line,
    }
}

/// Every module named as `crate::NAME` in `text`'s code.
fn referenced(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let line = code(line);
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                names.insert(name);
            }
            rest = after;
        }
    }
    names
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| top_module(&src, f)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let Some(from) = top_module(&src, file) else {
            continue;
        };
        let text = fs::read_to_string(file).expect("read source");
        let to = edges.entry(from.clone()).or_default();
        for name in referenced(&text) {
            if name != from && modules.contains(&name) {
                to.insert(name);
            }
        }
    }
    edges
}

/// A cycle in `edges`, as the modules on it in order, if there is one.
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let start = path
                    .iter()
                    .position(|n| n == node)
                    .expect("open node on path");
                let mut cycle = path[start..].to_vec();
                cycle.push(node.to_string());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(node.to_string(), Mark::Open);
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, marks, path) {
                return Some(cycle);
            }
        }
        path.pop();
        marks.insert(node.to_string(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in edges.keys() {
        if let Some(cycle) = visit(node, edges, &mut marks, &mut Vec::new()) {
            return Some(cycle);
        }
    }
    None
}

#[test]
fn the_cycle_finder_finds_a_planted_cycle_and_passes_a_chain() {
    let edges = |pairs: &[(&str, &str)]| {
        let mut map: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in pairs {
            map.entry(a.to_string()).or_default().insert(b.to_string());
            map.entry(b.to_string()).or_default();
        }
        map
    };
    let chain = edges(&[
        ("server", "client"),
        ("client", "connect"),
        ("connect", "admit"),
    ]);
    assert_eq!(find_cycle(&chain), None);
    let circle = edges(&[
        ("server", "client"),
        ("client", "admit"),
        ("admit", "server"),
    ]);
    assert_eq!(
        find_cycle(&circle).expect("a cycle"),
        ["admit", "server", "client", "admit"]
    );
    assert_eq!(
        referenced(
            "use crate::context::X; // crate::server\n//! [`crate::refusal`]\nf(crate::pool::Pool)"
        ),
        BTreeSet::from(["context".to_string(), "pool".to_string()])
    );
}

#[test]
fn no_module_of_the_proxy_crate_imports_itself_through_others() {
    let edges = graph();
    assert!(
        edges.len() > 20,
        "read too few modules ({}): is the source path right?",
        edges.len()
    );
    if let Some(cycle) = find_cycle(&edges) {
        panic!(
            "proxy/src has an import circle: {} (move the shared piece into a module of its own)",
            cycle.join(" -> ")
        );
    }
}
