//! The workspace's layout holds (docs/architecture.md, "Layout"):
//!
//! - **No import cycle in any crate**, at any level. Every reference from module A to module B
//!   (a `use` tree or a `crate::`/`super::`/`self::` path in code), where neither is an ancestor of
//!   the other, is an edge between the two children of their nearest common ancestor: between two
//!   files of one folder, or between two folders of the crate root. Each folder's children must
//!   form a graph without a cycle. A cycle is how placement goes wrong unnoticed: a model type
//!   living in the step that uses it, a helper every phase needs living in one phase. A child may
//!   use what its own folder's `mod.rs` defines (the folder owns the concept); test modules
//!   (`#[cfg(test)]`) are not part of the layout and are skipped.
//! - **proxy/src's top-level modules say what they may use, and use nothing else.** Each one's
//!   `//!` doc has a line `May use: ` naming the top-level modules it may use (or `nothing of this
//!   crate`, or `any module`); docs/architecture.md's folder table has the same list in its
//!   "may use" column, row for row. Every top-level module is in the table and every row is a
//!   module.
//!
//! Paths inside macro invocations are not read (`syn` leaves them as tokens); none of the crates
//! names a module of its own inside a macro call.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use syn::visit::Visit;

type ModPath = Vec<String>;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module a source file is: `config/merge.rs` is `[config, merge]`, `config/mod.rs` is
/// `[config]`, `lib.rs` and `main.rs` are the root `[]`.
fn module_of(src: &Path, file: &Path) -> ModPath {
    let rel = file
        .strip_prefix(src)
        .expect("under src")
        .with_extension("");
    let mut path: ModPath = rel
        .components()
        .map(|c| c.as_os_str().to_str().expect("utf-8 path").to_string())
        .collect();
    if path.last().is_some_and(|last| last == "mod") {
        path.pop();
    }
    if path.len() == 1 && (path[0] == "lib" || path[0] == "main") {
        path.clear();
    }
    path
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && attr
                .parse_args::<syn::Meta>()
                .is_ok_and(|meta| meta.path().is_ident("test"))
    })
}

/// Every module path a file names, made absolute (from the crate root), before resolution to a
/// module that exists.
struct Names {
    here: ModPath,
    out: Vec<ModPath>,
}

impl Names {
    /// `segments` as written in module `self.here`; `None` when it starts elsewhere (another
    /// crate, a local name).
    fn absolute(&self, segments: &[String]) -> Option<ModPath> {
        let (first, rest) = segments.split_first()?;
        let mut path = match first.as_str() {
            "crate" => ModPath::new(),
            "self" => self.here.clone(),
            "super" => {
                let mut p = self.here.clone();
                p.pop()?;
                p
            }
            _ => return None,
        };
        let mut rest = rest.iter().peekable();
        while rest.peek().is_some_and(|s| *s == "super") {
            path.pop()?;
            rest.next();
        }
        path.extend(rest.cloned());
        Some(path)
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => self.named(prefix, &n.ident),
            syn::UseTree::Rename(r) => self.named(prefix, &r.ident),
            syn::UseTree::Glob(_) => {
                if let Some(p) = self.absolute(prefix) {
                    self.out.push(p);
                }
            }
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }

    fn named(&mut self, prefix: &[String], ident: &syn::Ident) {
        let mut full = prefix.to_vec();
        // `use crate::a::{self}` names `a` itself.
        if ident != "self" {
            full.push(ident.to_string());
        }
        if let Some(p) = self.absolute(&full) {
            self.out.push(p);
        }
    }
}

impl<'ast> Visit<'ast> for Names {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if is_cfg_test(&m.attrs) {
            return;
        }
        if m.content.is_some() {
            self.here.push(m.ident.to_string());
            syn::visit::visit_item_mod(self, m);
            self.here.pop();
        }
    }
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if !is_cfg_test(&u.attrs) {
            self.use_tree(&mut Vec::new(), &u.tree);
        }
    }
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !is_cfg_test(&f.attrs) {
            syn::visit::visit_item_fn(self, f);
        }
    }
    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if !is_cfg_test(&i.attrs) {
            syn::visit::visit_item_impl(self, i);
        }
    }
    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if let Some(p) = self.absolute(&segments) {
            self.out.push(p);
        }
        syn::visit::visit_path(self, path);
    }
}

/// For each folder (by module path), the edges among its children: child → children it uses.
type Levels = BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>>;

/// Reads every source file of the crate at `src` and lifts each reference to its level.
fn levels(src: &Path) -> Levels {
    let mut files = Vec::new();
    sources(src, &mut files);
    let modules: BTreeMap<ModPath, PathBuf> = files
        .iter()
        .map(|f| (module_of(src, f), f.clone()))
        .collect();
    let mut levels = Levels::new();
    for (module, file) in &modules {
        let text = fs::read_to_string(file).expect("read source");
        let ast = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("{} does not parse: {e}", file.display()));
        let mut names = Names {
            here: module.clone(),
            out: Vec::new(),
        };
        names.visit_file(&ast);
        for named in names.out {
            // The deepest existing module the path goes through: `crate::a::b::Item` is `a::b`
            // when `a/b.rs` exists, else `a`.
            let target: ModPath = (0..=named.len())
                .rev()
                .map(|n| named[..n].to_vec())
                .find(|p| modules.contains_key(p))
                .expect("the root always exists");
            let common = module
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            if common == module.len() || common == target.len() {
                continue; // itself, an ancestor or a descendant
            }
            levels
                .entry(module[..common].to_vec())
                .or_default()
                .entry(module[common].clone())
                .or_default()
                .insert(target[common].clone());
        }
    }
    levels
}

/// A cycle in `edges`, as the nodes on it in order, if there is one.
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

/// Every import cycle of the crate at `src`, one line per folder that has one.
fn cycles(src: &Path) -> Vec<String> {
    levels(src)
        .iter()
        .filter_map(|(folder, edges)| {
            let cycle = find_cycle(edges)?;
            let folder = if folder.is_empty() {
                "the crate root".to_string()
            } else {
                folder.join("/")
            };
            Some(format!("in {folder}: {}", cycle.join(" -> ")))
        })
        .collect()
}

fn crate_src(name: &str) -> PathBuf {
    workspace().join(name).join("src")
}

fn assert_no_cycle(name: &str) {
    let src = crate_src(name);
    let levels = levels(&src);
    let root_edges = levels.get(&ModPath::new()).map_or(0, |e| e.len());
    assert!(
        root_edges > 3,
        "read too little of {name} ({root_edges} top-level modules with imports): is the path right?"
    );
    let found = cycles(&src);
    assert!(
        found.is_empty(),
        "{name}/src has import cycles (move the shared piece below both users):\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_policy_crate_has_no_import_cycle() {
    assert_no_cycle("policy");
}

#[test]
fn the_proxy_crate_has_no_import_cycle() {
    assert_no_cycle("proxy");
}

#[test]
fn the_cli_crate_has_no_import_cycle() {
    assert_no_cycle("cli");
}

/// What a `May use:` text allows: `None` for `any module`, else the backticked names.
fn allowed(text: &str) -> Option<BTreeSet<String>> {
    if text.contains("any module") {
        return None;
    }
    Some(
        text.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect(),
    )
}

/// Each top-level module of proxy/src with its `//! May use:` text (continued on following `//!`
/// lines up to the sentence's end).
fn declared_uses(src: &Path) -> BTreeMap<String, String> {
    let mut declared = BTreeMap::new();
    for entry in fs::read_dir(src).expect("read proxy/src") {
        let path = entry.expect("dir entry").path();
        let (name, file) = if path.is_dir() {
            let name = path.file_name().unwrap().to_str().unwrap().to_string();
            (name, path.join("mod.rs"))
        } else {
            let name = path.file_stem().unwrap().to_str().unwrap().to_string();
            if name == "lib" {
                continue;
            }
            (name, path)
        };
        let text = fs::read_to_string(&file).expect("read module");
        let doc: Vec<&str> = text
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .map(|l| l.trim_start_matches("//!").trim())
            .collect();
        let joined = doc.join(" ");
        let line = joined
            .split_once("May use: ")
            .map(|(_, rest)| rest.split_once('.').map_or(rest, |(s, _)| s).to_string())
            .unwrap_or_else(|| panic!("{}: its //! has no `May use:` line", file.display()));
        declared.insert(name, line);
    }
    declared
}

/// docs/architecture.md's folder table: module → its "may use" cell.
fn documented_uses() -> BTreeMap<String, String> {
    let doc = fs::read_to_string(workspace().join("docs/architecture.md")).expect("read doc");
    let table = doc
        .split_once("| module | owns | may use |")
        .expect("docs/architecture.md has the `| module | owns | may use |` table")
        .1;
    let mut rows = BTreeMap::new();
    for line in table.lines().skip(2) {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let module = cells[1]
            .trim_matches('`')
            .trim_end_matches('/')
            .trim_end_matches(".rs");
        rows.insert(module.to_string(), cells[3].to_string());
    }
    rows
}

#[test]
fn the_proxy_crates_top_level_modules_use_only_what_they_declare() {
    let src = crate_src("proxy");
    let declared = declared_uses(&src);
    assert!(declared.len() > 10, "read too few modules: {declared:?}");
    let used = levels(&src).remove(&ModPath::new()).unwrap_or_default();
    let mut wrong = Vec::new();
    for (module, text) in &declared {
        let Some(allowed) = allowed(text) else {
            continue;
        };
        for target in used.get(module).into_iter().flatten() {
            if !allowed.contains(target) {
                wrong.push(format!("{module} uses {target} (it may use: {text})"));
            }
        }
        for name in &allowed {
            if !declared.contains_key(name) {
                wrong.push(format!("{module} may use `{name}`, which is no module"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "proxy/src's modules use what their `May use:` does not list (move the code, or \
         change the layering in both the module's //! and docs/architecture.md):\n  {}",
        wrong.join("\n  ")
    );
    let documented = documented_uses();
    let as_sets = |m: &BTreeMap<String, String>| -> BTreeMap<String, Option<BTreeSet<String>>> {
        m.iter().map(|(k, v)| (k.clone(), allowed(v))).collect()
    };
    assert_eq!(
        as_sets(&documented),
        as_sets(&declared),
        "docs/architecture.md's folder table and the modules' `May use:` lines differ"
    );
}

#[test]
fn the_checks_find_what_they_look_for() {
    // A planted cycle is found, a chain is not.
    let edges = |pairs: &[(&str, &str)]| {
        let mut map: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in pairs {
            map.entry(a.to_string()).or_default().insert(b.to_string());
            map.entry(b.to_string()).or_default();
        }
        map
    };
    assert_eq!(find_cycle(&edges(&[("a", "b"), ("b", "c")])), None);
    assert_eq!(
        find_cycle(&edges(&[("a", "b"), ("b", "c"), ("c", "a")])).expect("a cycle"),
        ["a", "b", "c", "a"]
    );

    // A small crate on disk: `x/one.rs` uses `super::two` (a sibling), `x/two.rs` uses
    // `crate::y::Thing` through a group, `y.rs` uses `crate::x::one` in code, and a test module
    // in `y.rs` that would close another circle is skipped.
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path();
    fs::create_dir(src.join("x")).unwrap();
    fs::write(src.join("lib.rs"), "mod x;\nmod y;\n").unwrap();
    fs::write(src.join("x/mod.rs"), "//! x\nmod one;\nmod two;\n").unwrap();
    fs::write(src.join("x/one.rs"), "use super::two::f;\n").unwrap();
    fs::write(
        src.join("x/two.rs"),
        "use crate::{y::{Thing}};\npub fn f() {}\n",
    )
    .unwrap();
    fs::write(
        src.join("y.rs"),
        "pub struct Thing;\nfn g() { crate::x::one::h(); }\n\
         #[cfg(test)]\nmod tests { use crate::x::two::f; }\n",
    )
    .unwrap();
    let found = levels(src);
    assert_eq!(
        found[&ModPath::new()],
        BTreeMap::from([
            ("x".to_string(), BTreeSet::from(["y".to_string()])),
            ("y".to_string(), BTreeSet::from(["x".to_string()])),
        ])
    );
    assert_eq!(
        found[&vec!["x".to_string()]],
        BTreeMap::from([("one".to_string(), BTreeSet::from(["two".to_string()]))])
    );
    assert_eq!(cycles(src), ["in the crate root: x -> y -> x"]);

    // `May use:` reading.
    assert_eq!(allowed("any module"), None);
    assert_eq!(
        allowed("`audit`, `error` and `host_files`"),
        Some(BTreeSet::from([
            "audit".to_string(),
            "error".to_string(),
            "host_files".to_string()
        ]))
    );
    assert_eq!(allowed("nothing of this crate"), Some(BTreeSet::new()));
}
